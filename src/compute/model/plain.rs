//! A batch's plain decode step ([`StepModel::decode_s_plain`]) with its terms copied out, for a
//! coalesced run that times many steps of one batch in a row.

use super::{DecodeTerms, StepModel};
use crate::engine::{NS_PER_S, Nanos, TWO_63};

/// [`StepModel::decode_s_plain_f`] of one batch, its terms and the model's two per-token
/// coefficients held by value: a run's loop keeps them in registers instead of reading them
/// through two references at every step.
#[derive(Clone, Copy, Debug)]
pub struct PlainStep {
    /// The batch's terms.
    t: DecodeTerms,
    /// The terms' attention FLOPs per context token (the model's `decode_pair_flops`).
    pair_flops: f64,
    /// The terms' KV bytes (or measured seconds) per context token.
    kv_per_token: f64,
}

impl StepModel {
    /// `t`'s plain step by value. Only where [`StepModel::decode_plain_ok`] holds for `t`.
    #[inline(always)]
    pub fn plain_step(&self, t: &DecodeTerms) -> PlainStep {
        PlainStep {
            t: *t,
            pair_flops: t.pair_flops,
            kv_per_token: t.kv_per_token,
        }
    }
}

impl PlainStep {
    /// The plain step's duration at context `ctx` (exact in `f64`), seconds: the compute- or
    /// memory-bound time, whichever is larger, plus the all-reduce and MoE parts, at least the
    /// launch floor, plus the host's time ([`StepModel::decode_s_with`] with plain comparisons
    /// for `max`). [`StepModel::decode_s_plain_f`] is this.
    #[inline(always)]
    pub fn secs(&self, ctx: f64) -> f64 {
        let flops = self.t.flops0 + self.pair_flops * ctx;
        let t_compute = flops / self.t.compute_denom;
        let kv_bytes = self.kv_per_token * ctx + self.t.state_bytes;
        let t_memory = self.t.t_weights + kv_bytes / self.t.kv_denom;
        let gpu = if t_compute > t_memory {
            t_compute
        } else {
            t_memory
        } + self.t.allreduce
            + self.t.moe;
        self.t.host
            + if gpu > self.t.floor {
                gpu
            } else {
                self.t.floor
            }
    }

    /// The durations of the steps after one at context `ctx`, the context growing by
    /// `per_step` tokens a step, written to `out` in order (one step a slot): `ceil_ns(secs(c)
    /// · 1e9)` of each context `c`, stepped in `f64` as
    /// [`crate::compute::profile::DecodeStep::fill_run`] steps it. Returns their sum, ns
    /// (saturating), or `None` (and `out` untouched) unless every context is exact in `f64`
    /// and every step below 2^52 ns (52 days), where the ceiling needs no conversion
    /// ([`ceil_below_2_52`]). Every
    /// operation of [`PlainStep::secs`] is non-decreasing in the context over plain terms, so
    /// the last step bounds them all, and the first and last steps decide which operand of
    /// each `max` every step takes where they agree.
    pub fn fill_run(&self, ctx: u64, per_step: u64, out: &mut [Nanos]) -> Option<Nanos> {
        let n = u64::try_from(out.len()).ok()?;
        let last = per_step.checked_mul(n)?.checked_add(ctx)?;
        if last >= 1 << 53 {
            return None;
        }
        let (first, last) = (ctx as f64, last as f64);
        let x_last = self.secs(last) * NS_PER_S as f64;
        if !(0.0..TWO_52).contains(&x_last) {
            return None;
        }
        // No step exceeds `x_last + 1` ns: where `n` of those fit, the sum needs no saturation.
        let no_overflow = (x_last + 1.0) * (n as f64) < TWO_63;
        if self.memory_bound(first, last) && no_overflow {
            return Some(fill(first, per_step as f64, out, |c| {
                self.t.host + self.gpu(self.t_memory(c))
            }));
        }
        let sum = fill(first, per_step as f64, out, |c| self.secs(c));
        // `fill` adds without saturating: a sum that may not fit is summed again.
        Some(if no_overflow {
            sum
        } else {
            out.iter().fold(0, |a: Nanos, &x| a.saturating_add(x))
        })
    }

    /// Whether every step between contexts `first` and `last` takes the memory time and clears
    /// the floor: the context only grows, so where the memory time at `first` already reaches
    /// the compute time at `last` (and the GPU time at `first` clears the floor), every step
    /// between does, and computes only that.
    fn memory_bound(&self, first: f64, last: f64) -> bool {
        self.t_compute(last) <= self.t_memory(first)
            && self.gpu(self.t_memory(first)) > self.t.floor
    }

    /// The compute-bound time at context `ctx`, s.
    #[inline(always)]
    fn t_compute(&self, ctx: f64) -> f64 {
        (self.t.flops0 + self.pair_flops * ctx) / self.t.compute_denom
    }

    /// The memory-bound time at context `ctx`, s.
    #[inline(always)]
    fn t_memory(&self, ctx: f64) -> f64 {
        self.t.t_weights + (self.kv_per_token * ctx + self.t.state_bytes) / self.t.kv_denom
    }

    /// The GPU time from the larger of the two, s.
    #[inline(always)]
    fn gpu(&self, t: f64) -> f64 {
        t + self.t.allreduce + self.t.moe
    }
}

/// 2^52 as `f64`: from it to 2^53 the `f64`s are exactly the integers.
const TWO_52: f64 = 4_503_599_627_370_496.0;

/// `ceil(x) as Nanos` of an `x` in [0, 2^52), exact, without a float-to-integer conversion:
/// adding 2^52 rounds `x` to an integer (the spacing of `f64`s there is 1) that the sum's bits
/// less 2^52's are (a sum that rounds up to 2^53 carries into the exponent, which is the same
/// integer), and one comparison says whether that rounded down. SSE2 has no packed 64-bit
/// conversion: this is what lets two steps share one register ([`fill`]).
#[inline(always)]
fn ceil_below_2_52(x: f64) -> Nanos {
    debug_assert!((0.0..TWO_52).contains(&x), "{x} outside [0, 2^52)");
    let y = x + TWO_52;
    (y.to_bits() - TWO_52.to_bits()) + Nanos::from(y - TWO_52 < x)
}

/// Writes `ceil_ns(secs(c) · 1e9)` of the contexts after `ctx`, `step` apart, to `out`; returns
/// their sum (wrapping: the caller knows whether it fits). Every step must lie in [0, 2^52) ns,
/// and every context below 2^53 (so each is exact, however it is summed).
///
/// Two steps a turn, in two lanes that never meet: the compiler runs them in one SSE2
/// register, each lane's operations exactly the scalar ones. A run's plan times every step it
/// plans, cut later or not, and this halved it (the 30,000-request benchmark: 644.7 M → 634.8 M
/// instructions).
#[inline(always)]
fn fill(c: f64, step: f64, out: &mut [Nanos], secs: impl Fn(f64) -> f64) -> Nanos {
    let dt = |c| ceil_below_2_52(secs(c) * NS_PER_S as f64);
    // Contexts are integers below 2^53, so `c + 2·step` is the context two steps on, exactly
    // (a lane's context past the last step may not be, and is never used).
    let (mut c0, mut c1, step2) = (c + step, c + 2.0 * step, 2.0 * step);
    let (mut sum0, mut sum1): (Nanos, Nanos) = (0, 0);
    let mut pairs = out.chunks_exact_mut(2);
    for pair in &mut pairs {
        let (d0, d1) = (dt(c0), dt(c1));
        pair[0] = d0;
        pair[1] = d1;
        // Wrapping sums regroup exactly.
        sum0 = sum0.wrapping_add(d0);
        sum1 = sum1.wrapping_add(d1);
        c0 += step2;
        c1 += step2;
    }
    if let [slot] = pairs.into_remainder() {
        *slot = dt(c0);
        sum0 = sum0.wrapping_add(*slot);
    }
    sum0.wrapping_add(sum1)
}

#[cfg(test)]
mod tests {
    use super::super::tests::every_shape;
    use rand::{RngExt, SeedableRng};

    /// The run's fast path gives every step's own `decode_ns`, on every shape whose terms are
    /// plain, over random batches, contexts and lengths; it declines (leaving `out` alone)
    /// where a step reaches 2^52 ns or a context 2^53 tokens.
    #[test]
    fn a_plain_run_is_each_steps_decode_ns() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut fast, mut declined, mut memory) = (0, 0, 0);
        for m in every_shape().iter().step_by(3) {
            for k in 0..12 {
                let b: u32 = rng.random_range(1..=1024);
                let terms = m.decode_terms(b);
                if !m.decode_plain_ok(&terms) {
                    continue;
                }
                let ctx = match k {
                    0 => (1 << 53) - 3 * u64::from(b),
                    1 => 1 << 52,
                    _ => rng.random_range(0..=u64::from(b) * 100_000),
                };
                let n: u64 = rng.random_range(0..80);
                let mut out = vec![7; n as usize + 1];
                match m.plain_step(&terms).fill_run(ctx, b.into(), &mut out[1..]) {
                    Some(sum) => {
                        fast += 1;
                        let last = (ctx + n * u64::from(b)) as f64;
                        memory += usize::from(m.plain_step(&terms).memory_bound(ctx as f64, last));
                        let want: Vec<_> = std::iter::once(7)
                            .chain((1..=n).map(|s| m.decode_ns(b, ctx + s * u64::from(b))))
                            .collect();
                        assert_eq!(out, want, "batch {b}, ctx {ctx}");
                        let total = want[1..].iter().fold(0u64, |a, &x| a.saturating_add(x));
                        assert_eq!(sum, total);
                    }
                    None => {
                        declined += 1;
                        assert!(out.iter().all(|&x| x == 7));
                        let last = ctx + n * u64::from(b);
                        assert!(
                            last >= 1 << 53 || m.decode_ns(b, last) >= 1 << 52,
                            "declined batch {b}, ctx {ctx}, n {n}"
                        );
                    }
                }
            }
        }
        assert!(
            fast > 500 && declined > 20 && memory > 100 && fast - memory > 30,
            "fast {fast}, declined {declined}, memory-bound {memory}"
        );
    }
}
