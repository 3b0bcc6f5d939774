//! The SLA planner's performance models: forward wall time regressed on what the forward
//! carried, refitted online from forward-pass samples (Dynamo
//! `components/src/dynamo/planner/core/perf_model/{base,prefill,decode}.py`; `base.py` as
//! stored with `_MAX_KV_HIT_RATE_DISCOUNT` and `_RELAXABLE_NEG_TOLERANCE`, `prefill.py` with
//! `estimate_next_ttft(…, kv_hit_rate)`, `decode.py` @439d645).
//!
//! - **Samples** (`_BaseRegressionModel.add_observation`): a forward with wall time 0 updates
//!   the moving averages only. Each input axis is cut into equal-width buckets between the
//!   smallest and largest value seen (`fpm_sample_bucket_size` buckets in 1-D, its square root
//!   per axis in 2-D); when an axis's range grows every kept sample is re-bucketed; above
//!   `max_num_fpm_samples` the oldest sample of the fullest bucket (the first such bucket in
//!   insertion order, as Python's `max` over a dict picks it) is dropped.
//! - **Fit** (`_fit`): scikit-learn's `LinearRegression` over the kept samples, once there are
//!   `load_min_observations`; a negative coefficient on a token count rejects the fit ("model
//!   not ready"); decode's request-count coefficient may go negative — within 1e-6 it is kept,
//!   beyond it is clamped to 0 (the intercept is not refitted).
//! - **Moving averages** (`_MovingAverage`): a window of `max_num_fpm_samples`, leading zeros
//!   skipped.
//! - Predictions are `max(1e-6 s, intercept + coef · x)`.

use std::collections::VecDeque;

use super::ForwardPass;
use super::linalg::{linear_regression_1d, linear_regression_2d};

/// Dynamo's `_MAX_KV_HIT_RATE_DISCOUNT`: a full hit would hide a genuine backlog.
pub const MAX_KV_HIT_RATE_DISCOUNT: f64 = 0.95;

/// `_clamp_kv_hit_rate`: `None`/NaN → 0, else into [0, 0.95].
pub fn clamp_kv_hit_rate(h: Option<f64>) -> f64 {
    match h {
        Some(h) if !h.is_nan() => h.clamp(0.0, MAX_KV_HIT_RATE_DISCOUNT),
        _ => 0.0,
    }
}

/// `_MovingAverage`: a fixed window that skips leading zeros.
#[derive(Clone, Debug)]
pub struct MovingAverage {
    window: VecDeque<f64>,
    cap: usize,
    sum: f64,
    seen_nonzero: bool,
}

impl MovingAverage {
    /// A window of `cap` values.
    pub fn new(cap: usize) -> Self {
        Self {
            window: VecDeque::with_capacity(cap),
            cap,
            sum: 0.0,
            seen_nonzero: false,
        }
    }

    /// One value.
    pub fn add(&mut self, v: f64) {
        if v == 0.0 && !self.seen_nonzero {
            return;
        }
        if v != 0.0 {
            self.seen_nonzero = true;
        }
        if self.window.len() == self.cap
            && let Some(old) = self.window.pop_front()
        {
            self.sum -= old;
        }
        self.window.push_back(v);
        self.sum += v;
    }

    /// The mean, 0 when empty.
    pub fn value(&self) -> f64 {
        if self.window.is_empty() {
            0.0
        } else {
            self.sum / self.window.len() as f64
        }
    }
}

/// One bucket: its key (an index per axis) and its samples, oldest first.
type Bucket<const N: usize> = ([usize; N], VecDeque<([f64; N], f64)>);

/// The bucketed sample store and its linear fit, for `N` input axes.
#[derive(Clone, Debug)]
struct Samples<const N: usize> {
    max_samples: usize,
    min_observations: usize,
    buckets_per_axis: usize,
    /// Buckets in insertion order (a Python dict's order), each its samples oldest first.
    buckets: Vec<Bucket<N>>,
    total: usize,
    lo: [f64; N],
    hi: [f64; N],
    /// The fit, cached until the next sample: `Some((coef, intercept))`, or `None` when
    /// rejected or not yet made.
    fitted: Option<([f64; N], f64)>,
    stale: bool,
}

impl<const N: usize> Samples<N> {
    fn new(max_samples: u32, min_observations: u32, bucket_count: u32) -> Self {
        let per_axis = if N == 1 {
            bucket_count as usize
        } else {
            (bucket_count as f64).sqrt() as usize
        };
        Self {
            max_samples: max_samples as usize,
            min_observations: min_observations as usize,
            buckets_per_axis: per_axis.max(1),
            buckets: Vec::new(),
            total: 0,
            lo: [f64::INFINITY; N],
            hi: [f64::NEG_INFINITY; N],
            fitted: None,
            stale: true,
        }
    }

    fn key(&self, x: &[f64; N]) -> [usize; N] {
        let mut k = [0; N];
        for i in 0..N {
            let (lo, hi) = (self.lo[i], self.hi[i]);
            if hi > lo {
                // Python's int() truncates toward zero.
                let idx = ((x[i] - lo) / (hi - lo) * self.buckets_per_axis as f64).trunc();
                k[i] = (idx.max(0.0) as usize).min(self.buckets_per_axis - 1);
            }
        }
        k
    }

    fn push(&mut self, key: [usize; N], sample: ([f64; N], f64)) {
        match self.buckets.iter_mut().find(|(k, _)| *k == key) {
            Some((_, q)) => q.push_back(sample),
            None => self.buckets.push((key, VecDeque::from([sample]))),
        }
    }

    fn add(&mut self, x: [f64; N], wall_s: f64) {
        let mut changed = false;
        for ((v, lo), hi) in x.iter().zip(&mut self.lo).zip(&mut self.hi) {
            if *v < *lo {
                *lo = *v;
                changed = true;
            }
            if *v > *hi {
                *hi = *v;
                changed = true;
            }
        }
        if changed && self.total > 0 {
            let all: Vec<([f64; N], f64)> = self
                .buckets
                .drain(..)
                .flat_map(|(_, q)| q.into_iter())
                .collect();
            for s in all {
                let k = self.key(&s.0);
                self.push(k, s);
            }
        }
        let k = self.key(&x);
        self.push(k, (x, wall_s));
        self.total += 1;
        if self.total > self.max_samples {
            // The first of the fullest buckets.
            let mut fattest = 0;
            for (i, (_, q)) in self.buckets.iter().enumerate() {
                if q.len() > self.buckets[fattest].1.len() {
                    fattest = i;
                }
            }
            self.buckets[fattest].1.pop_front();
            self.total -= 1;
            if self.buckets[fattest].1.is_empty() {
                self.buckets.remove(fattest);
            }
        }
        self.stale = true;
    }

    fn sufficient(&self) -> bool {
        self.total >= self.min_observations
    }

    /// `_ensure_fitted`: the fit, refitted when samples arrived since; `relax` names the axis
    /// whose small negative coefficient is tolerated (decode's request count).
    fn fit(&mut self, relax: Option<usize>) -> Option<([f64; N], f64)> {
        if !self.stale && self.fitted.is_some() {
            return self.fitted;
        }
        self.stale = false;
        self.fitted = None;
        let obs: Vec<&([f64; N], f64)> = self.buckets.iter().flat_map(|(_, q)| q.iter()).collect();
        if obs.len() < self.min_observations || obs.is_empty() {
            return None;
        }
        let ys: Vec<f64> = obs.iter().map(|o| o.1).collect();
        let (mut coef, intercept) = if N == 1 {
            let xs: Vec<f64> = obs.iter().map(|o| o.0[0]).collect();
            let (s, i) = linear_regression_1d(&xs, &ys);
            let mut c = [0.0; N];
            c[0] = s;
            (c, i)
        } else {
            let xs: Vec<[f64; 2]> = obs.iter().map(|o| [o.0[0], o.0[1]]).collect();
            let (c2, i) = linear_regression_2d(&xs, &ys);
            let mut c = [0.0; N];
            c[0] = c2[0];
            c[1] = c2[1];
            (c, i)
        };
        const RELAXABLE_NEG_TOLERANCE: f64 = 1e-6;
        for (i, c) in coef.iter_mut().enumerate() {
            if *c < 0.0 {
                if Some(i) != relax {
                    return None;
                }
                if *c < -RELAXABLE_NEG_TOLERANCE {
                    *c = 0.0;
                }
            }
        }
        self.fitted = Some((coef, intercept));
        self.fitted
    }
}

/// `PrefillRegressionModel`: wall time of a prefill forward on `sum_prefill_tokens`.
#[derive(Clone, Debug)]
pub struct PrefillModel {
    samples: Samples<1>,
    avg_isl: MovingAverage,
    avg_num_prefill: MovingAverage,
}

impl PrefillModel {
    /// An empty model (`max_num_fpm_samples`, `load_min_observations`,
    /// `fpm_sample_bucket_size`).
    pub fn new(max_samples: u32, min_observations: u32, bucket_count: u32) -> Self {
        Self {
            samples: Samples::new(max_samples, min_observations, bucket_count),
            avg_isl: MovingAverage::new(max_samples as usize),
            avg_num_prefill: MovingAverage::new(max_samples as usize),
        }
    }

    /// `add_observation`.
    pub fn observe(&mut self, f: &ForwardPass) {
        if f.prefill_requests > 0 {
            self.avg_isl
                .add(f.prefill_tokens as f64 / f64::from(f.prefill_requests));
        }
        self.avg_num_prefill.add(f64::from(f.prefill_requests));
        if f.wall_s == 0.0 {
            return;
        }
        self.samples.add([f.prefill_tokens as f64], f.wall_s);
    }

    /// Samples kept.
    pub fn observations(&self) -> usize {
        self.samples.total
    }

    /// `has_sufficient_data`.
    pub fn has_sufficient_data(&self) -> bool {
        self.samples.sufficient()
    }

    /// The moving mean prompt length per prefill request, tokens.
    pub fn avg_isl(&self) -> f64 {
        self.avg_isl.value()
    }

    /// The fit: `(seconds per token, intercept seconds)`, `None` when not ready.
    pub fn fit(&mut self) -> Option<(f64, f64)> {
        self.samples.fit(None).map(|(c, i)| (c[0], i))
    }

    fn wall(slope: f64, intercept: f64, tokens: f64) -> f64 {
        (intercept + slope * tokens).max(1e-6)
    }

    /// `estimate_next_ttft`: the queue ahead plus a mean prompt, both discounted by the hit
    /// rate, chunked into `max_num_batched_tokens` forwards; seconds, `None` when the model is
    /// not ready.
    pub fn estimate_next_ttft(
        &mut self,
        queued_prefill_tokens: u64,
        max_num_batched_tokens: u64,
        kv_hit_rate: Option<f64>,
    ) -> Option<f64> {
        let (slope, icpt) = self.fit()?;
        if max_num_batched_tokens == 0 {
            return None;
        }
        let scale = 1.0 - clamp_kv_hit_rate(kv_hit_rate);
        let total = (queued_prefill_tokens as f64 + self.avg_isl.value()) * scale;
        if total <= 0.0 {
            return Some(0.0);
        }
        let mbt = max_num_batched_tokens as f64;
        let iterations = (total / mbt).ceil() as u64;
        let mut time = 0.0;
        let mut remaining = total;
        for _ in 0..iterations {
            let chunk = remaining.min(mbt);
            time += Self::wall(slope, icpt, chunk);
            remaining -= chunk;
        }
        Some(time)
    }

    /// `find_best_engine_prefill_rps`: `(requests/s, TTFT ms)` of one engine at `isl` tokens,
    /// chunked at `max_num_batched_tokens` (`(n−1)·wt(MBT) + wt(rest)`); `(0, 0)` when the model
    /// is not ready or `isl ≤ 0`.
    pub fn best_engine_rps(&mut self, isl: f64, max_num_batched_tokens: Option<u64>) -> (f64, f64) {
        let Some((slope, icpt)) = self.fit() else {
            return (0.0, 0.0);
        };
        if isl <= 0.0 {
            return (0.0, 0.0);
        }
        let wt = match max_num_batched_tokens {
            Some(mbt) if mbt > 0 && isl > mbt as f64 => {
                let mbt = mbt as f64;
                let chunks = (isl / mbt).ceil();
                let rest = isl - (chunks - 1.0) * mbt;
                (chunks - 1.0) * Self::wall(slope, icpt, mbt) + Self::wall(slope, icpt, rest)
            }
            _ => Self::wall(slope, icpt, isl),
        };
        (1.0 / wt, wt * 1000.0)
    }
}

/// `DecodeRegressionModel`: wall time of a decode forward on `[num_decode_requests,
/// sum_decode_kv_tokens]`.
#[derive(Clone, Debug)]
pub struct DecodeModel {
    samples: Samples<2>,
    avg_decode_len: MovingAverage,
    avg_num_decode: MovingAverage,
    max_observed_kv: f64,
}

impl DecodeModel {
    /// An empty model.
    pub fn new(max_samples: u32, min_observations: u32, bucket_count: u32) -> Self {
        Self {
            samples: Samples::new(max_samples, min_observations, bucket_count),
            avg_decode_len: MovingAverage::new(max_samples as usize),
            avg_num_decode: MovingAverage::new(max_samples as usize),
            max_observed_kv: 0.0,
        }
    }

    /// `add_observation`.
    pub fn observe(&mut self, f: &ForwardPass) {
        if f.decode_requests > 0 {
            self.avg_decode_len
                .add(f.decode_kv_tokens as f64 / f64::from(f.decode_requests));
        }
        self.avg_num_decode.add(f64::from(f.decode_requests));
        if f.decode_kv_tokens as f64 > self.max_observed_kv {
            self.max_observed_kv = f.decode_kv_tokens as f64;
        }
        if f.wall_s == 0.0 {
            return;
        }
        self.samples.add(
            [f64::from(f.decode_requests), f.decode_kv_tokens as f64],
            f.wall_s,
        );
    }

    /// Samples kept.
    pub fn observations(&self) -> usize {
        self.samples.total
    }

    /// `has_sufficient_data`.
    pub fn has_sufficient_data(&self) -> bool {
        self.samples.sufficient()
    }

    /// The fit: `([s per request, s per KV token], intercept s)`, `None` when not ready.
    pub fn fit(&mut self) -> Option<([f64; 2], f64)> {
        self.samples.fit(Some(0))
    }

    fn wall(c: [f64; 2], icpt: f64, requests: f64, kv: f64) -> f64 {
        (icpt + c[0] * requests + c[1] * kv).max(1e-6)
    }

    /// `estimate_next_itl`: one more request of mean length joining the batch and its queue;
    /// seconds, `None` when not ready.
    pub fn estimate_next_itl(&mut self, scheduled_kv: u64, queued_kv: u64) -> Option<f64> {
        let (c, icpt) = self.fit()?;
        let kv = scheduled_kv as f64 + queued_kv as f64 + self.avg_decode_len.value();
        let requests = self.avg_num_decode.value() + 1.0;
        Some(Self::wall(c, icpt, requests, kv))
    }

    /// `find_best_engine_decode_rps`: the largest batch `b ≤ min(max_kv/ctx, max_num_seqs)`
    /// whose step `wt(b, b·ctx)` stays within `itl_ms` (binary search), and Little's law
    /// `b / (osl · wt)`; `(requests/s, ITL ms)`. At batch 1 over the target, the batch-1 rate
    /// (with a warning in Dynamo); `(0, 0)` when not ready or an input is not positive.
    pub fn best_engine_rps(
        &mut self,
        itl_ms: f64,
        context_length: f64,
        osl: f64,
        max_kv_tokens: Option<u64>,
        max_num_seqs: Option<u32>,
    ) -> (f64, f64) {
        let Some((c, icpt)) = self.fit() else {
            return (0.0, 0.0);
        };
        if context_length <= 0.0 || osl <= 0.0 || itl_ms <= 0.0 {
            return (0.0, 0.0);
        }
        let kv_cap = match max_kv_tokens {
            Some(m) if m > 0 => ((m as f64 / context_length) as u64).max(1),
            _ if self.max_observed_kv > 0.0 => {
                ((self.max_observed_kv / context_length) as u64).max(1)
            }
            _ => 256,
        };
        let seq_cap = match max_num_seqs {
            Some(s) if s > 0 => u64::from(s),
            _ => kv_cap,
        };
        let max_batch = kv_cap.min(seq_cap).max(1);
        let wt1 = Self::wall(c, icpt, 1.0, context_length);
        if wt1 * 1000.0 > itl_ms {
            return (1.0 / (osl * wt1), wt1 * 1000.0);
        }
        let (mut lo, mut hi) = (1u64, max_batch);
        let (mut best_b, mut best_wt) = (1u64, wt1);
        while lo <= hi {
            let mid = (lo + hi) / 2;
            let wt = Self::wall(c, icpt, mid as f64, mid as f64 * context_length);
            if wt * 1000.0 <= itl_ms {
                best_b = mid;
                best_wt = wt;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        (best_b as f64 / (osl * best_wt), best_wt * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefill(tokens: u64, wall_s: f64) -> ForwardPass {
        ForwardPass {
            wall_s,
            prefill_requests: 1,
            prefill_tokens: tokens,
            ..ForwardPass::default()
        }
    }

    fn decode(requests: u32, kv: u64, wall_s: f64) -> ForwardPass {
        ForwardPass {
            wall_s,
            decode_requests: requests,
            decode_kv_tokens: kv,
            ..ForwardPass::default()
        }
    }

    #[test]
    fn the_prefill_model_waits_for_five_samples_then_fits_the_line() {
        // wt = 0.01 s + 50 µs per token.
        let mut m = PrefillModel::new(64, 5, 16);
        for (i, t) in [1000u64, 2000, 3000, 4000].into_iter().enumerate() {
            m.observe(&prefill(t, 0.01 + 5e-5 * t as f64));
            assert_eq!(m.observations(), i + 1);
            assert_eq!(m.fit(), None, "fewer than load_min_observations");
        }
        m.observe(&prefill(0, 0.0));
        assert_eq!(m.observations(), 4, "a zero wall time is no sample");
        m.observe(&prefill(8000, 0.01 + 5e-5 * 8000.0));
        let (s, i) = m.fit().unwrap();
        assert!(
            (s - 5e-5).abs() < 1e-15 && (i - 0.01).abs() < 1e-12,
            "{s} {i}"
        );
        // The mean ISL moves with every forward that prefilled (the zero one too: 0 tokens
        // over 1 request is a zero after non-zeros): (1000+2000+3000+4000+0+8000)/6.
        assert!((m.avg_isl() - 3000.0).abs() < 1e-9, "{}", m.avg_isl());
    }

    #[test]
    fn prefill_rps_chunks_long_prompts() {
        // wt = 0.02 + 1e-4·tokens: ISL 3000 ≤ MBT 8192 → wt = 0.32 s → 3.125 req/s, 320 ms.
        let mut m = PrefillModel::new(64, 5, 16);
        for t in [1000u64, 2000, 4000, 6000, 8000] {
            m.observe(&prefill(t, 0.02 + 1e-4 * t as f64));
        }
        let (rps, ttft) = m.best_engine_rps(3000.0, Some(8192));
        assert!(
            (rps - 3.125).abs() < 1e-9 && (ttft - 320.0).abs() < 1e-9,
            "{rps} {ttft}"
        );
        // ISL 10000 over MBT 4096: 3 chunks, 2·wt(4096) + wt(1808) = 2·0.4296 + 0.2008 = 1.06 s.
        let (rps, ttft) = m.best_engine_rps(10_000.0, Some(4096));
        assert!((ttft - 1060.0).abs() < 1e-6, "{ttft}");
        assert!((rps - 1.0 / 1.06).abs() < 1e-9);
        // TTFT of the next request behind 5000 queued tokens (avg ISL 4200, no hits):
        // 9200 tokens in MBT 4096 chunks: 4096, 4096, 1008 → 3·0.02 + 1e-4·9200 = 0.98 s.
        let t = m.estimate_next_ttft(5000, 4096, None).unwrap();
        assert!((t - 0.98).abs() < 1e-9, "{t}");
        // Half of it hits the cache: 4600 tokens → 4096 + 504 → 2·0.02 + 0.46 = 0.50 s.
        let t = m.estimate_next_ttft(5000, 4096, Some(0.5)).unwrap();
        assert!((t - 0.50).abs() < 1e-9, "{t}");
        // A hit rate of 1 is capped at 0.95.
        let t = m.estimate_next_ttft(5000, 4096, Some(1.0)).unwrap();
        assert!((t - (0.02 + 1e-4 * 460.0)).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_negative_token_slope_is_rejected() {
        let mut m = PrefillModel::new(64, 5, 16);
        for t in [1000u64, 2000, 3000, 4000, 5000] {
            m.observe(&prefill(t, 1.0 - 1e-4 * t as f64));
        }
        assert_eq!(m.fit(), None);
        assert_eq!(m.best_engine_rps(3000.0, None), (0.0, 0.0));
    }

    #[test]
    fn the_sample_store_retires_the_oldest_of_the_fullest_bucket() {
        // Six samples, at most five kept; 1-D with 2 buckets over [0, 100].
        let mut m = PrefillModel::new(5, 1, 2);
        for (t, w) in [
            (0u64, 1.0),
            (100, 2.0),
            (10, 3.0),
            (20, 4.0),
            (90, 5.0),
            (30, 6.0),
        ] {
            m.observe(&prefill(t, w));
        }
        assert_eq!(m.observations(), 5);
        // Bucket 0 held 0, 10, 20, 30 (the fullest): its oldest, the sample at 0 tokens, went.
        let kept: Vec<f64> = m
            .samples
            .buckets
            .iter()
            .flat_map(|(_, q)| q.iter().map(|s| s.0[0]))
            .collect();
        assert!(!kept.contains(&0.0), "{kept:?}");
        assert_eq!(kept.len(), 5);
    }

    #[test]
    fn decode_rps_is_the_largest_batch_within_the_itl_and_littles_law() {
        // wt = 0.005 + 0.0001·b + 2e-8·kv. ctx = 3000 + 150/2 = 3075 tokens, OSL 150, ITL 50 ms.
        // wt(b) = 0.005 + b·(1e-4 + 6.15e-5) = 0.005 + 1.615e-4·b ≤ 0.05 → b ≤ 278.6 → 278.
        let mut m = DecodeModel::new(64, 5, 16);
        for (b, ctx) in [
            (1u32, 1000u64),
            (8, 2000),
            (32, 4000),
            (64, 1500),
            (128, 3000),
            (200, 2500),
        ] {
            let kv = u64::from(b) * ctx;
            m.observe(&decode(
                b,
                kv,
                0.005 + 1e-4 * f64::from(b) + 2e-8 * kv as f64,
            ));
        }
        let (c, i) = m.fit().unwrap();
        assert!(
            (c[0] - 1e-4).abs() < 1e-10 && (c[1] - 2e-8).abs() < 1e-13,
            "{c:?}"
        );
        assert!((i - 0.005).abs() < 1e-9);
        let (rps, itl) = m.best_engine_rps(50.0, 3075.0, 150.0, Some(2_000_000), None);
        let wt = 0.005 + 278.0 * (1e-4 + 2e-8 * 3075.0);
        assert!((itl - wt * 1000.0).abs() < 1e-6, "{itl}");
        assert!((rps - 278.0 / (150.0 * wt)).abs() < 1e-6, "{rps}");
        // KV capacity binds first: 500,000 / 3075 = 162 requests.
        let (rps, _) = m.best_engine_rps(50.0, 3075.0, 150.0, Some(500_000), None);
        let wt = 0.005 + 162.0 * (1e-4 + 2e-8 * 3075.0);
        assert!((rps - 162.0 / (150.0 * wt)).abs() < 1e-6, "{rps}");
        // max_num_seqs binds: 64.
        let (rps, _) = m.best_engine_rps(50.0, 3075.0, 150.0, Some(2_000_000), Some(64));
        let wt = 0.005 + 64.0 * (1e-4 + 2e-8 * 3075.0);
        assert!((rps - 64.0 / (150.0 * wt)).abs() < 1e-6, "{rps}");
        // An ITL target below one request's step: batch 1's rate.
        let (rps, itl) = m.best_engine_rps(1.0, 3075.0, 150.0, Some(2_000_000), None);
        let wt1 = 0.005 + 1e-4 + 2e-8 * 3075.0;
        assert!((itl - wt1 * 1000.0).abs() < 1e-9 && (rps - 1.0 / (150.0 * wt1)).abs() < 1e-9);
    }

    #[test]
    fn decode_tolerates_a_negative_request_coefficient_by_clamping_it() {
        // wall = 0.004 − 1e-5·b + 3e-8·kv with kv not proportional to b: the request
        // coefficient −1e-5 < −1e-6 is clamped to 0, the KV one kept.
        let mut m = DecodeModel::new(64, 5, 16);
        for (b, kv) in [
            (1u32, 40_000u64),
            (10, 90_000),
            (20, 60_000),
            (40, 300_000),
            (80, 200_000),
        ] {
            m.observe(&decode(
                b,
                kv,
                0.004 - 1e-5 * f64::from(b) + 3e-8 * kv as f64,
            ));
        }
        let (c, _) = m.fit().unwrap();
        assert_eq!(c[0], 0.0);
        assert!((c[1] - 3e-8).abs() < 1e-13, "{c:?}");
        // A negative KV coefficient rejects the fit.
        let mut bad = DecodeModel::new(64, 5, 16);
        for (b, kv) in [
            (1u32, 40_000u64),
            (10, 90_000),
            (20, 60_000),
            (40, 300_000),
            (80, 200_000),
        ] {
            bad.observe(&decode(b, kv, 0.1 + 1e-4 * f64::from(b) - 1e-8 * kv as f64));
        }
        assert_eq!(bad.fit(), None);
    }

    #[test]
    fn next_itl_adds_one_mean_request() {
        let mut m = DecodeModel::new(64, 5, 16);
        for (b, kv) in [
            (10u32, 20_000u64),
            (20, 40_000),
            (30, 60_000),
            (40, 90_000),
            (50, 100_000),
        ] {
            m.observe(&decode(
                b,
                kv,
                0.01 + 1e-4 * f64::from(b) + 1e-7 * kv as f64,
            ));
        }
        let (c, i) = m.fit().unwrap();
        // avg_num_decode = 30, avg_decode_len = mean(2000, 2000, 2000, 2250, 2000) = 2050.
        let want = i + c[0] * 31.0 + c[1] * (50_000.0 + 10_000.0 + 2050.0);
        let got = m.estimate_next_itl(50_000, 10_000).unwrap();
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
}
