//! `[expect]` (docs/architecture.md §3): typed expectations that `pdsim check` evaluates against a run's
//! summary. Unknown keys are errors (with the nearest valid key), like every other table.
//!
//! Each bound names the summary figure it reads (`metrics::summary::Figure`, one per
//! `summary.json` field), so `check` evaluates the run's typed summary — the one it writes, or
//! the baseline's read back through the same type — and a figure that has no data (`null`)
//! fails its expectation ("got null").

use serde::{Deserialize, Serialize};

use crate::metrics::summary::Figure;
use crate::vocab::ErrorKind;

/// `[expect]` as written. Every field is optional; an empty table expects nothing.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Exactly these error kinds occur (`[]` = no error at all); order does not matter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kinds: Option<Vec<ErrorKind>>,
    /// At least this many requests arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrived_min: Option<u64>,
    /// At least this many requests completed (from their own bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_min: Option<u64>,
    /// At most this many requests completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_max: Option<u64>,
    /// At least this many requests failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_min: Option<u64>,
    /// At most this many requests failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_max: Option<u64>,
    /// At least this many requests finished corrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupted_min: Option<u64>,
    /// At most this many requests finished corrupted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupted_max: Option<u64>,
    /// At most this many requests were still in flight when the run stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unfinished_max: Option<u64>,
    /// Median time to first token, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms_max: Option<f64>,
    /// p99 time to first token, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_p99_ms_max: Option<f64>,
    /// Median time per output token, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_p50_ms_max: Option<f64>,
    /// p99 time per output token, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpot_p99_ms_max: Option<f64>,
    /// p99 end-to-end latency, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_p99_ms_max: Option<f64>,
    /// Median inter-token latency over every gap of every request, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p50_ms_max: Option<f64>,
    /// p99 inter-token latency over every gap of every request, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub itl_p99_ms_max: Option<f64>,
    /// Median over finished requests of each one's worst inter-token gap, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tbt_p50_ms_max: Option<f64>,
    /// p90 of each finished request's worst inter-token gap, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tbt_p90_ms_max: Option<f64>,
    /// p99 of each finished request's worst inter-token gap, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tbt_p99_ms_max: Option<f64>,
    /// p99 of end-to-end latency ÷ output tokens over finished requests, ms, at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub e2e_per_token_p99_ms_max: Option<f64>,
    /// Finished requests per simulated second, at least.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_rps_min: Option<f64>,
    /// Requests per simulated second that met every SLO, at least.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput_rps_min: Option<f64>,
    /// Share of arrived requests that met every SLO (0–1), at least.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slo_attainment_min: Option<f64>,
}

/// Which way a bound points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The figure must be ≥ the value.
    Min,
    /// The figure must be ≤ the value.
    Max,
}

/// One numeric expectation: the `[expect]` key, the `summary.json` figure it reads (a JSON
/// pointer), the direction and the value.
#[derive(Clone, Debug, PartialEq)]
pub struct NumericBound {
    /// The `[expect]` key, e.g. `ttft_p99_ms_max`.
    pub key: &'static str,
    /// The summary figure it bounds.
    pub figure: Figure,
    /// Min or max.
    pub bound: Bound,
    /// The bound's value, in the figure's unit.
    pub value: f64,
}

/// `(key, figure, bound)` for every numeric key, in the order `check` reports them.
const NUMERIC: &[(&str, Figure, Bound)] = &[
    ("arrived_min", Figure::Arrived, Bound::Min),
    ("completed_min", Figure::Completed, Bound::Min),
    ("completed_max", Figure::Completed, Bound::Max),
    ("failed_min", Figure::Failed, Bound::Min),
    ("failed_max", Figure::Failed, Bound::Max),
    ("corrupted_min", Figure::Corrupted, Bound::Min),
    ("corrupted_max", Figure::Corrupted, Bound::Max),
    ("unfinished_max", Figure::Unfinished, Bound::Max),
    ("ttft_p50_ms_max", Figure::TtftP50, Bound::Max),
    ("ttft_p99_ms_max", Figure::TtftP99, Bound::Max),
    ("tpot_p50_ms_max", Figure::TpotP50, Bound::Max),
    ("tpot_p99_ms_max", Figure::TpotP99, Bound::Max),
    ("e2e_p99_ms_max", Figure::E2eP99, Bound::Max),
    ("itl_p50_ms_max", Figure::ItlP50, Bound::Max),
    ("itl_p99_ms_max", Figure::ItlP99, Bound::Max),
    ("tbt_p50_ms_max", Figure::TbtP50, Bound::Max),
    ("tbt_p90_ms_max", Figure::TbtP90, Bound::Max),
    ("tbt_p99_ms_max", Figure::TbtP99, Bound::Max),
    (
        "e2e_per_token_p99_ms_max",
        Figure::E2ePerTokenP99,
        Bound::Max,
    ),
    ("throughput_rps_min", Figure::RequestsPerS, Bound::Min),
    ("goodput_rps_min", Figure::GoodputPerS, Bound::Min),
    ("slo_attainment_min", Figure::SloAttainment, Bound::Min),
];

impl Expect {
    /// Every `[expect]` key, for messages.
    pub fn keys() -> Vec<&'static str> {
        let mut k = vec!["error_kinds"];
        k.extend(NUMERIC.iter().map(|n| n.0));
        k
    }

    /// The value given for numeric key `key`, as f64.
    fn value_of(&self, key: &str) -> Option<f64> {
        let u = |v: Option<u64>| v.map(|x| x as f64);
        match key {
            "arrived_min" => u(self.arrived_min),
            "completed_min" => u(self.completed_min),
            "completed_max" => u(self.completed_max),
            "failed_min" => u(self.failed_min),
            "failed_max" => u(self.failed_max),
            "corrupted_min" => u(self.corrupted_min),
            "corrupted_max" => u(self.corrupted_max),
            "unfinished_max" => u(self.unfinished_max),
            "ttft_p50_ms_max" => self.ttft_p50_ms_max,
            "ttft_p99_ms_max" => self.ttft_p99_ms_max,
            "tpot_p50_ms_max" => self.tpot_p50_ms_max,
            "tpot_p99_ms_max" => self.tpot_p99_ms_max,
            "e2e_p99_ms_max" => self.e2e_p99_ms_max,
            "itl_p50_ms_max" => self.itl_p50_ms_max,
            "itl_p99_ms_max" => self.itl_p99_ms_max,
            "tbt_p50_ms_max" => self.tbt_p50_ms_max,
            "tbt_p90_ms_max" => self.tbt_p90_ms_max,
            "tbt_p99_ms_max" => self.tbt_p99_ms_max,
            "e2e_per_token_p99_ms_max" => self.e2e_per_token_p99_ms_max,
            "throughput_rps_min" => self.throughput_rps_min,
            "goodput_rps_min" => self.goodput_rps_min,
            "slo_attainment_min" => self.slo_attainment_min,
            _ => None,
        }
    }

    /// The numeric bounds given, in report order.
    pub fn numeric(&self) -> Vec<NumericBound> {
        NUMERIC
            .iter()
            .filter_map(|&(key, figure, bound)| {
                self.value_of(key).map(|value| NumericBound {
                    key,
                    figure,
                    bound,
                    value,
                })
            })
            .collect()
    }

    /// Whether the table expects nothing.
    pub fn is_empty(&self) -> bool {
        self.error_kinds.is_none() && self.numeric().is_empty()
    }

    /// Checks values serde cannot: finite, non-negative, attainment within 0–1, min ≤ max.
    /// Returns the offending key (under `expect.`) and the message.
    pub fn check(&self) -> Result<(), (String, String)> {
        for b in self.numeric() {
            if !b.value.is_finite() || b.value < 0.0 {
                return Err((
                    format!("expect.{}", b.key),
                    format!("must be a finite number ≥ 0, got {}", b.value),
                ));
            }
        }
        if let Some(a) = self.slo_attainment_min
            && a > 1.0
        {
            return Err((
                "expect.slo_attainment_min".into(),
                format!("is a share of requests, 0 to 1 (0.9 = 90 %), got {a}"),
            ));
        }
        for (what, lo, hi) in [
            ("completed", self.completed_min, self.completed_max),
            ("failed", self.failed_min, self.failed_max),
            ("corrupted", self.corrupted_min, self.corrupted_max),
        ] {
            if let (Some(lo), Some(hi)) = (lo, hi)
                && lo > hi
            {
                return Err((
                    format!("expect.{what}_min"),
                    format!("{what}_min = {lo} is above {what}_max = {hi}: no run can meet both"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_numeric_key_reads_its_field() {
        // A table with every key set to a distinct value: each bound must come back with it.
        let mut t = toml::Table::new();
        for (i, (k, ..)) in NUMERIC.iter().enumerate() {
            let v = if k.ends_with("_ms_max") || k.contains("rps") || k.contains("attainment") {
                toml::Value::Float(i as f64 / 100.0)
            } else {
                toml::Value::Integer(i as i64)
            };
            t.insert((*k).into(), v);
        }
        let e: Expect = t.try_into().unwrap();
        let got = e.numeric();
        assert_eq!(got.len(), NUMERIC.len());
        for (i, b) in got.iter().enumerate() {
            let want = if b.key.ends_with("_ms_max")
                || b.key.contains("rps")
                || b.key.contains("attainment")
            {
                i as f64 / 100.0
            } else {
                i as f64
            };
            assert_eq!(b.value, want, "{}", b.key);
        }
    }

    #[test]
    fn impossible_bounds_are_refused() {
        let e = Expect {
            failed_min: Some(3),
            failed_max: Some(1),
            ..Default::default()
        };
        assert_eq!(e.check().unwrap_err().0, "expect.failed_min");
        let e = Expect {
            slo_attainment_min: Some(90.0),
            ..Default::default()
        };
        assert!(e.check().unwrap_err().1.contains("0 to 1"));
    }
}
