//! Requests finished per simulated second by outcome, for the throughput chart: completed,
//! failed and corrupted side by side, so a run whose requests fail looks different from one
//! whose requests complete. Counted from the request rows as they stream; memory stays bounded
//! however long the run (buckets widen, as the chart timeseries thins).

use crate::engine::NS_PER_S;
use crate::vocab::{Outcome, RequestRow};

/// Buckets kept at most before two neighbours merge into one twice as wide (the charts draw
/// at most 600 points per line).
const MAX_BUCKETS: usize = 2400;

/// Finished requests per bucket of `width_s` seconds. Bucket `b` holds the requests whose
/// `finish_ns` falls in `(b·w, (b+1)·w]` seconds: the same "second ending at s" convention as
/// `timeseries.csv`, whose row `s` covers `(s−1, s]`.
#[derive(Clone, Debug)]
pub struct FinishRates {
    width_s: u64,
    /// `[completed, failed, corrupted, completed within the TTFT target]` per bucket.
    counts: Vec<[u64; 4]>,
    /// `slo.ttft_ms`, ns, when the run has one: completions are also counted against it (the
    /// pools chart's attainment over time).
    ttft_target_ns: Option<u64>,
}

impl Default for FinishRates {
    fn default() -> Self {
        Self {
            width_s: 1,
            counts: Vec::new(),
            ttft_target_ns: None,
        }
    }
}

/// One point of [`FinishRates::series`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RatePoint {
    /// The bucket's middle second (a 1 s bucket sits at its end second, as timeseries rows).
    pub second: f64,
    /// Requests per second that completed uncorrupted.
    pub completed: f64,
    /// Requests per second that failed.
    pub failed: f64,
    /// Requests per second that finished corrupted.
    pub corrupted: f64,
    /// Requests per second that completed with their TTFT within `slo.ttft_ms` (0 without a
    /// target).
    pub ttft_met: f64,
}

impl FinishRates {
    /// Also counts completions whose TTFT is within `ttft_target_ns`.
    pub fn with_ttft_target(ttft_target_ns: Option<u64>) -> Self {
        Self {
            ttft_target_ns,
            ..Self::default()
        }
    }

    /// Counts one request row; unfinished requests have no finish and are not counted.
    pub fn record(&mut self, row: &RequestRow) {
        let slot = match row.outcome {
            Outcome::Completed => 0,
            Outcome::Failed => 1,
            Outcome::Corrupted => 2,
            // Aborted requests are `summary.json` `aborts`' subject, not a finish rate.
            Outcome::Unfinished | Outcome::Aborted => return,
        };
        let Some(finish) = row.finish_ns else {
            return;
        };
        // The second ending at or after the finish (a finish at 0 counts in second 1).
        let second = finish.div_ceil(NS_PER_S).max(1);
        let mut b = ((second - 1) / self.width_s) as usize;
        while b >= MAX_BUCKETS {
            self.widen();
            b = ((second - 1) / self.width_s) as usize;
        }
        if self.counts.len() <= b {
            self.counts.resize(b + 1, [0; 4]);
        }
        self.counts[b][slot] += 1;
        if slot == 0
            && let (Some(t), Some(first)) = (self.ttft_target_ns, row.first_token_ns)
            && first.saturating_sub(row.arrival_ns) <= t
        {
            self.counts[b][3] += 1;
        }
    }

    /// Merges neighbouring buckets: twice as wide, half as many.
    fn widen(&mut self) {
        self.counts = self
            .counts
            .chunks(2)
            .map(|c| {
                let mut m = c[0];
                if let Some(d) = c.get(1) {
                    for k in 0..4 {
                        m[k] += d[k];
                    }
                }
                m
            })
            .collect();
        self.width_s *= 2;
    }

    /// Total finished requests by `[completed, failed, corrupted]`.
    pub fn totals(&self) -> [u64; 3] {
        self.counts.iter().fold([0; 3], |mut t, c| {
            for k in 0..3 {
                t[k] += c[k];
            }
            t
        })
    }

    /// Rates per bucket from the first second through `through_s` (at least through the last
    /// finish), zero where nothing finished, so the lines drop to 0 rather than interpolate.
    pub fn series(&self, through_s: u64) -> Vec<RatePoint> {
        let w = self.width_s;
        let buckets = (through_s.div_ceil(w) as usize).max(self.counts.len());
        (0..buckets)
            .map(|b| {
                let c = self.counts.get(b).copied().unwrap_or([0; 4]);
                let per_s = |n: u64| n as f64 / w as f64;
                RatePoint {
                    // Seconds b·w+1 ..= (b+1)·w; their middle.
                    second: (b as u64 * w) as f64 + (w + 1) as f64 / 2.0,
                    completed: per_s(c[0]),
                    failed: per_s(c[1]),
                    corrupted: per_s(c[2]),
                    ttft_met: per_s(c[3]),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, finish_ns: Option<u64>, outcome: Outcome) -> RequestRow {
        let mut r = RequestRow::arrived(id, 0, None, 10, 10);
        r.finish_ns = finish_ns;
        r.outcome = outcome;
        r
    }

    #[test]
    fn counts_by_the_second_ending_at_the_finish() {
        let mut f = FinishRates::default();
        f.record(&row(0, Some(NS_PER_S), Outcome::Completed)); // second 1
        f.record(&row(1, Some(NS_PER_S + 1), Outcome::Failed)); // second 2
        f.record(&row(2, Some(2 * NS_PER_S), Outcome::Corrupted)); // second 2
        f.record(&row(3, None, Outcome::Unfinished));
        let s = f.series(4);
        assert_eq!(s.len(), 4);
        assert_eq!(
            s[0],
            RatePoint {
                second: 1.0,
                completed: 1.0,
                failed: 0.0,
                corrupted: 0.0,
                ttft_met: 0.0,
            }
        );
        assert_eq!((s[1].second, s[1].failed, s[1].corrupted), (2.0, 1.0, 1.0));
        assert_eq!((s[3].second, s[3].completed), (4.0, 0.0));
        assert_eq!(f.totals(), [1, 1, 1]);
    }

    #[test]
    fn completions_are_counted_against_the_ttft_target() {
        let mut f = FinishRates::with_ttft_target(Some(500_000_000));
        let mut fast = row(0, Some(NS_PER_S), Outcome::Completed);
        fast.first_token_ns = Some(500_000_000); // TTFT 500 ms: within
        let mut slow = row(1, Some(NS_PER_S), Outcome::Completed);
        slow.first_token_ns = Some(500_000_001); // 1 ns over
        let mut failed = row(2, Some(NS_PER_S), Outcome::Failed);
        failed.first_token_ns = Some(1);
        for r in [&fast, &slow, &failed] {
            f.record(r);
        }
        let s = f.series(1);
        assert_eq!(
            (s[0].completed, s[0].ttft_met, s[0].failed),
            (2.0, 1.0, 1.0)
        );
        // Without a target nothing is counted as met.
        let mut g = FinishRates::default();
        g.record(&fast);
        assert_eq!(g.series(1)[0].ttft_met, 0.0);
    }

    #[test]
    fn long_runs_stay_bounded_and_keep_every_request() {
        let mut f = FinishRates::default();
        // 2¹⁷ seconds: a whole number of the 64 s buckets it ends up in.
        let n = 1u64 << 17;
        for s in 0..n {
            f.record(&row(s, Some(s * NS_PER_S + 1), Outcome::Failed));
        }
        assert!(f.counts.len() <= MAX_BUCKETS, "{} buckets", f.counts.len());
        assert_eq!(f.totals(), [0, n, 0]);
        let s = f.series(n);
        // One failure per second whatever the bucket width.
        assert!(s.iter().all(|p| (p.failed - 1.0).abs() < 1e-9), "{s:?}");
    }
}
