//! The shape of KV transfers over run time: RDMA writes per request and transfer time, by
//! when the transfer started. A decode pool's free list fragments as pages are freed out of
//! order, so later requests' pages form more, shorter contiguous runs and their transfers post
//! more writes (one per run and region, `group_concurrent_contiguous`); this is where that
//! decay shows, and where sglang's sorted allocator shows it gone (`docs/sglang-pd.md` §22).
//!
//! Rows are bucketed as they stream (memory: a fixed number of histograms, whatever the run's
//! length). A request retracted and sent again counts its writes and its first transfer's
//! start to its last transfer's end, as `requests.csv` does.

use serde::{Deserialize, Serialize};

use super::Histogram;
use crate::engine::{NS_PER_S, Nanos};
use crate::vocab::RequestRow;

/// Buckets the arrival window is cut into for the chart.
pub const WINDOW_BUCKETS: u64 = 60;
/// Buckets kept at most: transfers that start in the drain after the window get buckets of
/// the same width, up to this many in all; later ones join the last.
const MAX_BUCKETS: usize = 4 * WINDOW_BUCKETS as usize;

/// Writes and transfer times of the requests whose transfer started in one span of time.
#[derive(Clone, Debug, Default)]
pub struct Span {
    /// RDMA writes per request.
    pub writes: Histogram,
    /// Transfer start to end, µs (not ns: a histogram's buckets run to its largest value,
    /// and µs keep a span's counters a third the size at a 1/256 relative error).
    pub transfer_us: Histogram,
}

impl Span {
    #[inline]
    fn record(&mut self, writes: u64, ns: u64) {
        self.writes.record(writes);
        self.transfer_us.record(ns / 1_000);
    }

    /// The span's figures, `from_s` to `to_s` of run time.
    pub fn summary(&self, from_s: f64, to_s: f64) -> SpanSummary {
        let q = |h: &Histogram, p: f64, scale: f64| (h.count() > 0).then(|| h.quantile(p) * scale);
        SpanSummary {
            from_s,
            to_s,
            transfers: self.writes.count(),
            writes_p50: q(&self.writes, 0.5, 1.0),
            writes_p99: q(&self.writes, 0.99, 1.0),
            transfer_ms_p50: q(&self.transfer_us, 0.5, 1e-3),
            transfer_ms_p99: q(&self.transfer_us, 0.99, 1e-3),
        }
    }
}

/// RDMA writes per request and transfer time by transfer start, streamed from request rows.
#[derive(Clone, Debug)]
pub struct TransferShape {
    /// The planned arrival window (`run.duration_s`), ns.
    window_ns: Nanos,
    /// Width of one chart bucket, ns (≥ 1).
    width_ns: Nanos,
    /// By transfer start: bucket `b` holds starts in `[b·w, (b+1)·w)`.
    buckets: Vec<Span>,
    /// Transfers that started in the first tenth of the window.
    first: Span,
    /// … and in its last tenth.
    last: Span,
}

impl Default for TransferShape {
    fn default() -> Self {
        Self::new(0)
    }
}

impl TransferShape {
    /// Buckets for an arrival window of `window_ns` ([`WINDOW_BUCKETS`] of them; 1 s wide
    /// for a window of 0, a collector without a scenario).
    pub fn new(window_ns: Nanos) -> Self {
        Self {
            window_ns,
            width_ns: if window_ns == 0 {
                NS_PER_S
            } else {
                window_ns.div_ceil(WINDOW_BUCKETS)
            },
            buckets: Vec::new(),
            first: Span::default(),
            last: Span::default(),
        }
    }

    /// Counts the transfer of one finished request's row, if it had one that ended.
    #[inline]
    pub fn record(&mut self, row: &RequestRow) {
        let (Some(start), Some(end)) = (row.transfer_start_ns, row.transfer_end_ns) else {
            return;
        };
        if row.rdma_writes == 0 {
            return;
        }
        let ns = end.saturating_sub(start);
        let b = ((start / self.width_ns) as usize).min(MAX_BUCKETS - 1);
        if self.buckets.len() <= b {
            self.buckets.resize_with(b + 1, Span::default);
        }
        self.buckets[b].record(row.rdma_writes, ns);
        // Tenths of the window by integer arithmetic: 10·start < window, 10·start ≥ 9·window.
        let (s10, w) = (u128::from(start) * 10, u128::from(self.window_ns));
        if s10 < w {
            self.first.record(row.rdma_writes, ns);
        } else if s10 >= 9 * w && start <= self.window_ns {
            self.last.record(row.rdma_writes, ns);
        }
    }

    /// Whether any transfer was counted.
    pub fn is_empty(&self) -> bool {
        self.first.writes.count() == 0 && self.buckets.iter().all(|b| b.writes.count() == 0)
    }

    /// The planned arrival window, s.
    pub fn window_s(&self) -> f64 {
        self.window_ns as f64 / NS_PER_S as f64
    }

    /// Width of a bucket, s.
    pub fn bucket_s(&self) -> f64 {
        self.width_ns as f64 / NS_PER_S as f64
    }

    /// `(bucket middle, s; its span)` for every bucket that had a transfer, in time order.
    pub fn series(&self) -> impl Iterator<Item = (f64, &Span)> + '_ {
        let w = self.bucket_s();
        self.buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| b.writes.count() > 0)
            .map(move |(i, b)| ((i as f64 + 0.5) * w, b))
    }

    /// `summary.json` `transfer.fragmentation`, or `None` when no transfer was counted.
    pub fn summary(&self) -> Option<FragmentationSummary> {
        if self.is_empty() {
            return None;
        }
        let w = self.window_ns as f64 / NS_PER_S as f64;
        Some(FragmentationSummary {
            bucket_s: self.bucket_s(),
            first_tenth: self.first.summary(0.0, w / 10.0),
            last_tenth: self.last.summary(w * 0.9, w),
        })
    }
}

/// `summary.json` `transfer.fragmentation`: RDMA writes per request and transfer time early
/// and late in the arrival window, the decay a fragmenting free list causes (or its absence).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FragmentationSummary {
    /// Width of the time buckets of the fragmentation chart, s.
    pub bucket_s: f64,
    /// Transfers that started in the first tenth of the arrival window.
    pub first_tenth: SpanSummary,
    /// Transfers that started in its last tenth.
    pub last_tenth: SpanSummary,
}

/// Transfers that started between `from_s` and `to_s`; figures are `null` without any.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpanSummary {
    /// Start of the span, s of simulated time.
    pub from_s: f64,
    /// End of the span, s.
    pub to_s: f64,
    /// Transfers counted (one per request).
    pub transfers: u64,
    /// Median RDMA writes per request.
    pub writes_p50: Option<f64>,
    /// 99th percentile of RDMA writes per request.
    pub writes_p99: Option<f64>,
    /// Median transfer time (first chunk posted to the last landed), ms.
    pub transfer_ms_p50: Option<f64>,
    /// 99th percentile of the transfer time, ms.
    pub transfer_ms_p99: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(start_s: f64, ms: u64, writes: u64) -> RequestRow {
        let mut r = RequestRow::arrived(0, 0, None, 10, 10);
        let start = (start_s * 1e9) as u64;
        r.transfer_start_ns = Some(start);
        r.transfer_end_ns = Some(start + ms * 1_000_000);
        r.rdma_writes = writes;
        r
    }

    #[test]
    fn tenths_and_buckets_by_transfer_start() {
        // A 100 s window: tenths are [0, 10) and [90, 100]; buckets are 100/60 s wide.
        let mut t = TransferShape::new(100 * NS_PER_S);
        assert!(t.summary().is_none());
        t.record(&row(0.5, 2, 10));
        t.record(&row(9.9, 4, 30));
        t.record(&row(50.0, 9, 99)); // neither tenth
        t.record(&row(95.0, 20, 400));
        t.record(&row(150.0, 1, 7)); // the drain: a bucket, no tenth
        let mut none = row(1.0, 1, 0);
        none.rdma_writes = 0;
        t.record(&none);
        let s = t.summary().unwrap();
        assert_eq!(s.first_tenth.transfers, 2);
        assert_eq!(s.first_tenth.writes_p50, Some(10.0));
        assert_eq!(s.first_tenth.writes_p99, Some(30.0));
        assert_eq!(s.first_tenth.transfer_ms_p99, Some(4.0));
        assert_eq!(s.last_tenth.transfers, 1);
        assert_eq!(s.last_tenth.writes_p50, Some(400.0));
        assert_eq!((s.last_tenth.from_s, s.last_tenth.to_s), (90.0, 100.0));
        let pts: Vec<f64> = t
            .series()
            .map(|(x, _)| (x / t.bucket_s()).floor())
            .collect();
        // Buckets are 1,666,666,667 ns wide: 95 s is 56.99… widths, 150 s 89.99….
        assert_eq!(pts, [0.0, 5.0, 29.0, 56.0, 89.0]);
    }
}
