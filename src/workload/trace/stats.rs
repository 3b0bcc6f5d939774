//! Exact statistics of a trace, as printed by `pdsim trace stats`: row count, span, mean
//! rate, and mean/p50/p90/p99/max of the input and output lengths (type 7 percentiles,
//! see the module docs of [`trace`](super)).

use std::fmt;

use super::TraceRow;

/// Summary of a trace, as printed by `pdsim trace stats`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceStats {
    /// Number of requests.
    pub rows: u64,
    /// Last arrival minus first arrival, in seconds.
    pub span_s: f64,
    /// Mean arrival rate in requests per second, `(rows − 1) / span_s` (= 1 / mean
    /// inter-arrival gap); NaN when the span is 0.
    pub mean_rate_per_s: f64,
    /// Prompt lengths, in tokens.
    pub input: LengthStats,
    /// Generated lengths, in tokens.
    pub output: LengthStats,
}

/// Distribution of a token length, in tokens. Percentiles are type 7 (see the module docs);
/// all fields but `max` are NaN for an empty input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LengthStats {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: u32,
}

impl LengthStats {
    /// Statistics of already sorted (ascending) values.
    pub fn from_sorted(sorted: &[u32]) -> Self {
        debug_assert!(sorted.is_sorted());
        // An exact u64 sum (no rounding drift), divided once.
        let sum: u64 = sorted.iter().map(|&v| u64::from(v)).sum();
        LengthStats {
            mean: sum as f64 / sorted.len() as f64,
            p50: percentile_sorted(sorted, 0.5),
            p90: percentile_sorted(sorted, 0.9),
            p99: percentile_sorted(sorted, 0.99),
            max: sorted.last().copied().unwrap_or(0),
        }
    }
}

/// Exact statistics of a set of lengths (sorts a copy).
pub fn length_stats(values: impl IntoIterator<Item = u32>) -> LengthStats {
    let mut v: Vec<u32> = values.into_iter().collect();
    v.sort_unstable();
    LengthStats::from_sorted(&v)
}

/// Percentile `q ∈ [0, 1]` of ascending `sorted` by linear interpolation between closest
/// ranks (numpy's default): `h = (n − 1)·q`, `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`.
/// NaN if `sorted` is empty.
pub fn percentile_sorted(sorted: &[u32], q: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return f64::NAN;
    };
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    if lo + 1 >= sorted.len() {
        return f64::from(last);
    }
    let (a, b) = (f64::from(sorted[lo]), f64::from(sorted[lo + 1]));
    a + (h - lo as f64) * (b - a)
}

/// Exact statistics of a trace (see [`TraceStats`]). Rows need not be sorted.
pub fn trace_stats(rows: &[TraceRow]) -> TraceStats {
    let first = rows.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
    let last = rows.iter().map(|r| r.arrival_ns).max().unwrap_or(0);
    let span_s = (last - first) as f64 / 1e9;
    let mean_rate_per_s = if span_s > 0.0 {
        (rows.len() - 1) as f64 / span_s
    } else {
        f64::NAN
    };
    TraceStats {
        rows: rows.len() as u64,
        span_s,
        mean_rate_per_s,
        input: length_stats(rows.iter().map(|r| r.input_tokens)),
        output: length_stats(rows.iter().map(|r| r.output_tokens)),
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "rows       {}", self.rows)?;
        writeln!(f, "span       {:.3} s", self.span_s)?;
        if self.mean_rate_per_s.is_nan() {
            writeln!(f, "mean rate  n/a (all arrivals at the same time)")?;
        } else {
            writeln!(f, "mean rate  {:.3} req/s", self.mean_rate_per_s)?;
        }
        writeln!(
            f,
            "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "tokens", "mean", "p50", "p90", "p99", "max"
        )?;
        for (name, s) in [("input", &self.input), ("output", &self.output)] {
            writeln!(
                f,
                "{name:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10}",
                s.mean, s.p50, s.p90, s.p99, s.max
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::TraceFormat;
    use super::super::testutil::stats_of;
    use super::*;

    #[test]
    fn splitwise_medians_azure_and_vidur() {
        for (file, format, rows, p_in, p_out) in [
            (
                "AzureLLMInferenceTrace_code.csv",
                TraceFormat::Azure,
                8_819,
                1_469.0,
                13.0,
            ),
            (
                "splitwise_code.csv",
                TraceFormat::Vidur,
                8_819,
                1_469.0,
                13.0,
            ),
            (
                "AzureLLMInferenceTrace_conv.csv",
                TraceFormat::Azure,
                19_366,
                1_020.0,
                129.0,
            ),
            (
                "splitwise_conv.csv",
                TraceFormat::Vidur,
                19_366,
                1_020.0,
                129.0,
            ),
        ] {
            let s = stats_of(file, format);
            assert_eq!(
                (s.rows, s.input.p50, s.output.p50),
                (rows, p_in, p_out),
                "{file}"
            );
        }
    }

    #[test]
    fn percentile_is_numpy_linear() {
        let v = [1, 2, 3, 4];
        assert_eq!(percentile_sorted(&v, 0.5), 2.5);
        assert!((percentile_sorted(&v, 0.9) - 3.7).abs() < 1e-12);
        assert_eq!(percentile_sorted(&v, 0.0), 1.0);
        assert_eq!(percentile_sorted(&v, 1.0), 4.0);
        assert_eq!(percentile_sorted(&[7], 0.99), 7.0);
        assert!(percentile_sorted(&[], 0.5).is_nan());
        let s = length_stats([10, 1, 4, 3, 2]);
        assert_eq!((s.mean, s.p50, s.max), (4.0, 3.0, 10));
    }

    #[test]
    fn stats_display_and_rate() {
        let row = |ms: u64, i, o| TraceRow {
            arrival_ns: ms * 1_000_000,
            input_tokens: i,
            output_tokens: o,
            hash_ids: vec![],
            session_id: None,
            turn: None,
            timeout_ns: None,
        };
        let s = trace_stats(&[row(1000, 10, 1), row(2000, 20, 2), row(3000, 30, 3)]);
        assert_eq!((s.rows, s.span_s, s.mean_rate_per_s), (3, 2.0, 1.0));
        let text = s.to_string();
        for needle in [
            "rows       3",
            "span       2.000 s",
            "1.000 req/s",
            "input",
            "20.0",
            "30",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let one = trace_stats(&[row(5, 1, 1)]);
        assert!(one.mean_rate_per_s.is_nan());
        assert!(one.to_string().contains("n/a"));
    }
}
