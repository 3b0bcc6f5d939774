//! Client deadlines (`[workload.client_timeout]`): how long each client waits, measured from
//! its request's arrival, before it disconnects. One draw per arrival, in arrival order, from
//! the `ClientTimeouts` stream alone, so turning deadlines on shifts no other draw.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::config::aborts::Deadline;
use crate::engine::{Nanos, RngSource, ns_from_secs_ceil, rng_stream};

/// Draws each request's wait.
pub struct DeadlineSampler {
    dist: Deadline,
    rng: ChaCha8Rng,
}

impl DeadlineSampler {
    /// A sampler of `dist` for a run with `seed`.
    pub fn new(dist: Deadline, seed: u64) -> Self {
        Self {
            dist,
            rng: rng_stream(seed, RngSource::ClientTimeouts),
        }
    }

    /// The next client's wait, ns (rounded up to a whole ns; at least 1 ns, so a client never
    /// leaves before its request arrived).
    pub fn next_wait_ns(&mut self) -> Nanos {
        let s = match self.dist {
            Deadline::Fixed(ns) => return ns.max(1),
            Deadline::Exponential { mean_s } => {
                let u: f64 = self.rng.random();
                -mean_s * (1.0 - u).ln()
            }
            Deadline::Lognormal { mean_s, cv } => {
                // A log-normal with mean m and CV c has σ² = ln(1 + c²) and μ = ln m − σ²/2.
                let sigma2 = (1.0 + cv * cv).ln();
                let mu = mean_s.ln() - sigma2 / 2.0;
                let u1: f64 = self.rng.random();
                let u2: f64 = self.rng.random();
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                if cv == 0.0 {
                    // No spread: the mean itself (exp(ln m) may miss it by an ulp, which the
                    // ceiling to ns would show). The draws are still made, so the stream's
                    // later draws are those of any other cv.
                    mean_s
                } else {
                    (mu + sigma2.sqrt() * z).exp()
                }
            }
        };
        // Bounded like every scenario duration: a draw far in the tail never overflows.
        ns_from_secs_ceil(s.min(crate::vocab::limits::MAX_DURATION_S)).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream's first draws are pinned: a change to the stream or its use shows here.
    #[test]
    fn first_draws_are_pinned_and_the_mean_holds() {
        let mut a = DeadlineSampler::new(Deadline::Exponential { mean_s: 10.0 }, 7);
        let mut b = DeadlineSampler::new(Deadline::Exponential { mean_s: 10.0 }, 7);
        let first: Vec<Nanos> = (0..3).map(|_| a.next_wait_ns()).collect();
        assert_eq!(first, (0..3).map(|_| b.next_wait_ns()).collect::<Vec<_>>());
        let mut other = DeadlineSampler::new(Deadline::Exponential { mean_s: 10.0 }, 8);
        assert_ne!(
            first[0],
            other.next_wait_ns(),
            "another seed, another stream"
        );
        // Mean of many draws within 3 % of the mean (standard error 10/√20000 ≈ 0.7 %).
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| a.next_wait_ns() as f64 / 1e9).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 0.3, "exponential mean {mean}");
        let mut l = DeadlineSampler::new(
            Deadline::Lognormal {
                mean_s: 30.0,
                cv: 0.5,
            },
            1,
        );
        let mean: f64 = (0..n).map(|_| l.next_wait_ns() as f64 / 1e9).sum::<f64>() / n as f64;
        assert!((mean - 30.0).abs() < 0.6, "lognormal mean {mean}");
        // cv = 0 (issue 40: the README allowed it, validation refused it): every wait is the
        // mean, to the nanosecond.
        let mut z = DeadlineSampler::new(
            Deadline::Lognormal {
                mean_s: 30.0,
                cv: 0.0,
            },
            1,
        );
        assert!((0..100).all(|_| z.next_wait_ns() == 30_000_000_000));
        let mut f = DeadlineSampler::new(Deadline::Fixed(5), 1);
        assert_eq!(f.next_wait_ns(), 5);
    }

    /// Other streams are untouched: the arrival stream's draws are the same whether or not a
    /// deadline sampler drew first.
    #[test]
    fn other_streams_do_not_shift() {
        let mut arrivals = rng_stream(3, RngSource::Arrivals);
        let before: u64 = arrivals.random();
        let mut d = DeadlineSampler::new(Deadline::Exponential { mean_s: 1.0 }, 3);
        let _ = d.next_wait_ns();
        let mut arrivals = rng_stream(3, RngSource::Arrivals);
        assert_eq!(before, arrivals.random::<u64>());
    }
}
