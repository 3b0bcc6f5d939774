//! A log-linear histogram of non-negative integers (nanoseconds, bytes) in bounded memory.
//!
//! Values below 512 are counted exactly. Above, each power-of-two range is split into 256 equal
//! buckets, so a bucket spans at most 1/256 of its lower bound; a percentile is reported as the
//! midpoint of its bucket (clamped to the exact min and max), which bounds its **relative error
//! by 1/512 ≈ 0.2 %**. Count, sum, min and max are exact, so the mean is exact.
//! Memory: at most ~14,600 `u64` counters, whatever the number of values.

use serde::{Deserialize, Serialize};

const EXACT: u64 = 512;
const SUB_BITS: u32 = 8;
const SUB: u64 = 1 << SUB_BITS;

/// Streaming histogram; see the module docs for the error bound.
#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    /// Smallest value so far; `u64::MAX` while empty, so a record needs no first-value
    /// branch ([`Histogram::min`] reports 0 then).
    min: u64,
    /// Largest value so far; 0 while empty.
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: Vec::new(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

#[inline]
fn index_of(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // ≥ 9
    let shift = e - SUB_BITS;
    let m = v >> shift; // in [256, 512)
    (EXACT + u64::from(e - 9) * SUB + (m - SUB)) as usize
}

/// The [lower, upper) bounds of bucket `i`.
fn bounds_of(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < EXACT {
        return (i, i + 1);
    }
    let k = i - EXACT;
    let e = 9 + k / SUB;
    let m = SUB + k % SUB;
    let shift = e - u64::from(SUB_BITS);
    let lo = m << shift;
    (lo, lo.saturating_add(1 << shift))
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `value` once.
    pub fn record(&mut self, value: u64) {
        self.record_n(value, 1);
    }

    /// Records `value` `n` times (a decode step's inter-token latency for every request in it).
    #[inline]
    pub fn record_n(&mut self, value: u64, n: u64) {
        if n == 0 {
            return;
        }
        let i = index_of(value);
        match self.counts.get_mut(i) {
            Some(c) => *c += n,
            None => self.grow_to(i, n),
        }
        self.min = self.min.min(value);
        self.max = self.max.max(value);
        self.count += n;
        self.sum += u128::from(value) * u128::from(n);
    }

    /// Extends the counters to bucket `i`, which gets `n` (a value beyond every bucket so far).
    #[cold]
    fn grow_to(&mut self, i: usize, n: u64) {
        self.counts.resize(i + 1, 0);
        self.counts[i] = n;
    }

    /// Adds `n` values of the bucket that starts at `lo`, summing to `sum`, the least `min`
    /// and the largest `max` (what a [`StepRun`] gathered).
    #[inline(never)]
    pub fn record_bucket(&mut self, lo: u64, n: u64, sum: u128, min: u64, max: u64) {
        let i = index_of(lo);
        match self.counts.get_mut(i) {
            Some(c) => *c += n,
            None => self.grow_to(i, n),
        }
        self.min = self.min.min(min);
        self.max = self.max.max(max);
        self.count += n;
        self.sum += sum;
    }

    /// Adds every value `other` recorded: the histogram both would have made together
    /// (bucket counts, count, sum and extremes add up).
    pub fn merge(&mut self, other: &Histogram) {
        if other.count == 0 {
            return;
        }
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.sum += other.sum;
    }

    /// Values certainly above `limit` (scaled by `scale`, e.g. 1e-6 for ns against ms): those
    /// whose bucket starts past it — the rule `metrics::slo::SloWatch` counts a value late by
    /// ([`Histogram::floor_of`]), so values in the bucket straddling `limit` are not counted.
    pub fn count_past(&self, limit: f64, scale: f64) -> u64 {
        self.counts
            .iter()
            .enumerate()
            .filter(|&(i, &c)| c > 0 && bounds_of(i).0 as f64 * scale > limit)
            .map(|(_, &c)| c)
            .sum()
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Exact mean, or 0 when empty.
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// Exact maximum, or 0 when empty.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Nearest-rank quantile `q` in [0, 1]: the smallest recorded value with at least
    /// `ceil(q × count)` values at or below it, within the module's error bound. 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        self.at_rank(rank.min(self.count))
            .unwrap_or(self.max as f64)
    }

    /// Non-empty buckets in ascending order as `(lower, upper, count)`: values in
    /// `[lower, upper)`, clamped to the exact min and max (for CDF charts).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, &c)| {
                let (lo, hi) = bounds_of(i);
                (lo.max(self.min), hi.min(self.max.saturating_add(1)), c)
            })
    }

    /// The lower bound of the bucket `value` falls in: no figure this histogram reports for a
    /// rank holding `value` is below it (a reported figure is its bucket's midpoint clamped to
    /// the exact min and max, and both lie at or past this bound's bucket or at `value`).
    /// `metrics::slo::SloWatch` counts a value late against a target only when even this
    /// bound is past it, so its early verdict never differs from the histogram's.
    pub fn floor_of(value: u64) -> u64 {
        bounds_of(index_of(value)).0
    }

    /// Exact minimum, or 0 when empty.
    pub fn min(&self) -> u64 {
        if self.count == 0 { 0 } else { self.min }
    }

    /// The value of nearest rank `rank` (1-based) within the module's error bound, or `None`
    /// when fewer than `rank` values were recorded: an SLO percentile taken over more requests
    /// than completed lands on one that never did (`metrics::summary`).
    pub fn at_rank(&self, rank: u64) -> Option<f64> {
        if rank == 0 || rank > self.count {
            return None;
        }
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds_of(i);
                let mid = if hi - lo == 1 {
                    lo as f64
                } else {
                    (lo as f64 + hi as f64) / 2.0
                };
                return Some(mid.clamp(self.min as f64, self.max as f64));
            }
        }
        Some(self.max as f64)
    }

    /// Mean, p50, p90, p99 and max, scaled by `scale` (e.g. 1e-6 for ns → ms); every figure is
    /// `None` when nothing was recorded (docs/architecture.md §4: no data is `null`, never 0).
    pub fn summary(&self, scale: f64) -> Stats {
        let some = |v: f64| (self.count > 0).then_some(v * scale);
        Stats {
            mean: some(self.mean()),
            p50: some(self.quantile(0.50)),
            p90: some(self.quantile(0.90)),
            p99: some(self.quantile(0.99)),
            max: some(self.max as f64),
        }
    }
}

/// The gaps of consecutive steps of one batch, each recorded `n` times (every request of the
/// batch waited it), gathered per bucket before they enter a [`Histogram`]: a decode run's
/// gaps move slowly, so the bucket is looked up when the gap leaves it, not at every step, and
/// a bucket's gaps sum to the last step's end less the first one's start. Counts, sums,
/// minima and maxima add up the same in any grouping, so the histogram ends as with one
/// [`Histogram::record_n`] per step.
#[derive(Clone, Copy, Debug)]
pub struct StepRun {
    /// The bucket of the gaps gathered, `[lo, hi)` (empty when none is).
    lo: u64,
    hi: u64,
    /// When the first step gathered started, ns.
    from: u64,
    /// Steps gathered.
    steps: u64,
    /// Their least and largest gap, ns.
    min: u64,
    max: u64,
    /// Copies of each gap.
    n: u64,
}

impl StepRun {
    /// Gathers steps whose gaps each count `n` times.
    pub fn new(n: u64) -> Self {
        Self {
            lo: 1,
            hi: 0,
            from: 0,
            steps: 0,
            min: u64::MAX,
            max: 0,
            n,
        }
    }

    /// The step from `started` to `end` (ns) ended; it started where the last one ended.
    #[inline(always)]
    pub fn step(&mut self, h: &mut Histogram, started: u64, end: u64) {
        let gap = end - started;
        if gap >= self.lo && gap < self.hi {
            self.steps += 1;
            self.min = self.min.min(gap);
            self.max = self.max.max(gap);
        } else {
            self.restart(h, started, gap);
        }
    }

    /// [`StepRun::step`] for a batch whose steps never shorten (a coalesced run of plain
    /// terms: `compute::profile::DecodeStep::rises`): a gap stays in its bucket until it
    /// reaches the bucket's end, the first gap of a bucket is its least and the latest its
    /// largest, so one comparison a step does what [`StepRun::step`]'s three do.
    #[inline(always)]
    pub fn step_rising(&mut self, h: &mut Histogram, started: u64, end: u64) {
        let gap = end - started;
        debug_assert!(gap >= self.max, "a rising run's step shortened");
        if gap < self.hi {
            self.steps += 1;
            self.max = gap;
        } else {
            self.restart(h, started, gap);
        }
    }

    /// The largest gap gathered since the last bucket change: under
    /// [`StepRun::step_rising`], the largest of every step (0 before any).
    pub fn latest_max(&self) -> u64 {
        self.max
    }

    /// Flushes what was gathered and starts the bucket of `gap`, the step that started at
    /// `started` (ns) its first.
    #[inline(always)]
    fn restart(&mut self, h: &mut Histogram, started: u64, gap: u64) {
        self.flush(h, started);
        let (lo, hi) = bounds_of(index_of(gap));
        *self = Self {
            lo,
            hi,
            from: started,
            steps: 1,
            min: gap,
            max: gap,
            n: self.n,
        };
    }

    /// Adds the steps gathered, the last of them ending at `until` (ns), to `h`.
    #[inline(always)]
    pub fn flush(&mut self, h: &mut Histogram, until: u64) {
        if self.steps > 0 && self.n > 0 {
            let sum = u128::from(until - self.from) * u128::from(self.n);
            h.record_bucket(self.lo, self.steps * self.n, sum, self.min, self.max);
        }
        self.steps = 0;
    }
}

/// The five numbers the summary reports for every latency; `None` (JSON `null`) when no
/// request reached the stage.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    // Each field must be present when read back (`null` for no data): a summary missing one
    // is not pdsim's, rather than a run with no data (`Option::deserialize` makes serde
    // require the key).
    /// Exact mean.
    #[serde(deserialize_with = "Option::deserialize")]
    pub mean: Option<f64>,
    /// Median (nearest rank).
    #[serde(deserialize_with = "Option::deserialize")]
    pub p50: Option<f64>,
    /// 90th percentile.
    #[serde(deserialize_with = "Option::deserialize")]
    pub p90: Option<f64>,
    /// 99th percentile.
    #[serde(deserialize_with = "Option::deserialize")]
    pub p99: Option<f64>,
    /// Exact maximum.
    #[serde(deserialize_with = "Option::deserialize")]
    pub max: Option<f64>,
}

impl Stats {
    /// No data: every figure `null` (a block older summaries do not have reads as this).
    pub fn none() -> Self {
        Self {
            mean: None,
            p50: None,
            p90: None,
            p99: None,
            max: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn bucket_bounds_invert_the_index() {
        for v in [
            0u64,
            1,
            511,
            512,
            513,
            1023,
            1024,
            123_456_789,
            u64::MAX / 3,
        ] {
            let (lo, hi) = bounds_of(index_of(v));
            assert!(lo <= v && v < hi, "{v}: [{lo}, {hi})");
            assert!((hi - lo) as f64 <= (lo as f64 / 256.0).max(1.0));
        }
    }

    #[test]
    fn quantiles_of_a_million_values_match_an_exact_sort_within_the_bound() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut h = Histogram::new();
        let mut all = Vec::new();
        for _ in 0..1_000_000 {
            // Log-uniform over 1 ns .. 100 s.
            let v = 10f64.powf(rng.random::<f64>() * 11.0) as u64;
            h.record(v);
            all.push(v);
        }
        all.sort_unstable();
        for q in [0.01, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let exact = all[((q * all.len() as f64).ceil() as usize).max(1) - 1] as f64;
            let got = h.quantile(q);
            let err = (got - exact).abs() / exact.max(1.0);
            assert!(err <= 1.0 / 512.0 + 1e-12, "q {q}: {got} vs {exact}");
        }
        let mean = all.iter().map(|&v| v as f64).sum::<f64>() / all.len() as f64;
        assert!((h.mean() - mean).abs() / mean < 1e-12);
        assert_eq!(h.max(), *all.last().unwrap());
    }

    /// Gathering through a batch ends in the histogram one `record_n` per value gives: over
    /// runs of close values (a decode run's), scattered ones, zero weights, the exact range
    /// and the top bucket.
    #[test]
    fn gathered_steps_make_the_same_histogram() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..200 {
            let (mut a, mut b) = (Histogram::new(), Histogram::new());
            let mut gap: u64 = match case % 4 {
                0 => rng.random_range(1..600),
                1 => rng.random_range(1_000_000..20_000_000),
                2 => 1 << 50,
                _ => rng.random_range(1..1 << 40),
            };
            let mut at = rng.random_range(0..1 << 20);
            // Runs of steps, each with its own batch size (0 included).
            for _ in 0..rng.random_range(1..20) {
                let n = rng.random_range(0..4);
                let mut run = StepRun::new(n);
                for _ in 0..rng.random_range(1..100) {
                    a.record_n(gap, n);
                    run.step(&mut b, at, at + gap);
                    at += gap;
                    gap = match rng.random_range(0..10) {
                        0 => rng.random_range(1..1 << 40),
                        1 => (gap / 2).max(1),
                        _ => gap + rng.random_range(0..(gap / 1000).max(2)),
                    };
                }
                run.flush(&mut b, at);
            }
            assert_eq!(
                (a.count, a.sum, a.min, a.max),
                (b.count, b.sum, b.min, b.max)
            );
            assert!(a.buckets().eq(b.buckets()), "case {case}");
        }
    }

    /// Steps that never shorten, gathered by their bucket's end alone, end in the histogram
    /// `StepRun::step` and one `record_n` per value give, and the latest maximum is the
    /// largest gap: rising runs that stay in a bucket, cross buckets one step at a time,
    /// leap across many, and repeat a gap.
    #[test]
    fn rising_steps_make_the_same_histogram() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        for case in 0..300 {
            let (mut a, mut b, mut c) = (Histogram::new(), Histogram::new(), Histogram::new());
            let n = rng.random_range(0..4);
            let (mut any, mut rising) = (StepRun::new(n), StepRun::new(n));
            let mut gap: u64 = match case % 3 {
                0 => rng.random_range(1..600),
                1 => rng.random_range(1_000_000..20_000_000),
                _ => rng.random_range(1..1 << 40),
            };
            let mut at = rng.random_range(0..1 << 20);
            let mut largest = 0;
            for _ in 0..rng.random_range(1..300) {
                a.record_n(gap, n);
                any.step(&mut b, at, at + gap);
                rising.step_rising(&mut c, at, at + gap);
                largest = gap;
                at += gap;
                gap += match rng.random_range(0..20) {
                    0 => rng.random_range(0..gap.max(1)),
                    1..=5 => 0,
                    _ => rng.random_range(0..(gap / 2000).max(2)),
                };
            }
            assert_eq!(rising.latest_max(), largest, "case {case}");
            any.flush(&mut b, at);
            rising.flush(&mut c, at);
            for h in [&b, &c] {
                assert_eq!(
                    (a.count, a.sum, a.min, a.max),
                    (h.count, h.sum, h.min, h.max)
                );
                assert!(a.buckets().eq(h.buckets()), "case {case}");
            }
        }
    }

    #[test]
    fn weighted_records_count_each_copy() {
        let mut h = Histogram::new();
        h.record_n(10, 3);
        h.record(1000);
        assert_eq!(h.count(), 4);
        assert_eq!(h.quantile(0.75), 10.0);
        assert_eq!(h.quantile(1.0), 1000.0);
        assert!(Histogram::new().quantile(0.5) == 0.0);
    }
}
