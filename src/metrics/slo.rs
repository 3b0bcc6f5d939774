//! The one SLO evaluator: every verb and every report reads the `[slo]` verdict from here —
//! `run` (stdout, `summary.json`, `index.html`, `summary.md`), `sweep` and `plan` (each point's
//! `slo_met`), `check` and `explain`. Two kinds of target, one verdict:
//!
//! - **per-request thresholds** (`ttft_ms`, `tpot_ms`, `tbt_ms` — the request's worst
//!   inter-token gap, Mooncake's TBT — and `e2e_per_token_ms`): a request *attains* the SLO
//!   when it completed (not failed, corrupted or unfinished) within every threshold given (a
//!   one-token request has no TPOT and no gap: it is within those two); the run's *attainment*
//!   is the share of arrived requests that did, DistServe's goodput with every target
//!   together. They enter the verdict through `attainment_min` — and when `[slo]` gives
//!   thresholds without `attainment_min`, through [`DEFAULT_ATTAINMENT_MIN`], marked `default`
//!   so no report passes it off as the user's.
//! - **percentile targets**, each over its own population ([`Population`], stated wherever a
//!   target is shown): TTFT over **arrived** requests; TPOT and TBT (each request's worst gap)
//!   over arrived requests less the one-token completions (which have neither) — in both,
//!   every request that did not complete counted as infinitely late (DistServe's SLO
//!   attainment, MLPerf's server scenario: a dropped query counts against the bound); ITL
//!   over **every inter-token gap of every request**, all tokens pooled, as streamed
//!   (`latency_ms.itl`: a request that failed after some tokens keeps the gaps it streamed;
//!   one that never decoded adds none — the request-level targets count it).
//!
//! A run meets `[slo]` when every target holds; with no target there is no verdict (`null`).

use super::{Collector, Counts, Histogram};
use crate::config::{SLO_PERCENTILES, Slo};
use crate::engine::Nanos;
use crate::vocab::GapKind;
use serde::{Deserialize, Serialize};

/// The least attainment a run needs when `[slo]` sets per-request thresholds (`ttft_ms`,
/// `tpot_ms`, `tbt_ms`, `e2e_per_token_ms`) without `attainment_min`: 90 %, the attainment
/// target of DistServe's evaluation (Zhong et al., OSDI '24, §6: "we set the SLO attainment
/// target to 90%"). Without a default such a run has thresholds but no verdict, and every
/// sweep point read "meets SLO: no".
pub const DEFAULT_ATTAINMENT_MIN: f64 = 0.9;

/// What a target is taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Population {
    /// Arrived requests, one that did not complete counted as infinitely late (TTFT
    /// percentiles, attainment).
    Arrived,
    /// Arrived requests less the one-token completions (no TPOT, no gap), one that did not
    /// complete counted as infinitely late (TPOT and TBT percentiles).
    Decoded,
    /// Every inter-token gap of every request, all tokens pooled (ITL percentiles).
    Gaps,
}

impl Population {
    /// In words, without the count: `arrived requests (…)`.
    pub fn words(self) -> &'static str {
        match self {
            Population::Arrived => {
                "arrived requests, one that did not complete counted as infinitely late"
            }
            Population::Decoded => {
                "arrived requests less one-token completions (no gap to time), one that did not complete counted as infinitely late"
            }
            Population::Gaps => {
                "every inter-token gap of every request, all tokens pooled, as streamed (a request that never decoded adds none)"
            }
        }
    }

    /// The noun its count is of: `requests` or `gaps`.
    pub fn unit(self) -> &'static str {
        match self {
            Population::Gaps => "gaps",
            _ => "requests",
        }
    }
}

/// One `[slo]` key: its name, what it bounds and over which population. The table every
/// place that lists the keys reads (README, `pdsim.SLO_KEYS` in Python, the reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SloKey {
    /// The key in `[slo]`.
    pub key: &'static str,
    /// `threshold` (per request, joins attainment), `percentile`, or `attainment`.
    pub kind: &'static str,
    /// What it bounds, in words.
    pub meaning: &'static str,
    /// Over what it is judged.
    pub population: Population,
}

/// Every `[slo]` key, in the order `summary.json` lists targets (thresholds last: they enter
/// through `attainment_min`).
pub const SLO_KEYS: &[SloKey] = &[
    pct_key(
        "ttft_p50_ms",
        "median time to first token",
        Population::Arrived,
    ),
    pct_key(
        "ttft_p90_ms",
        "p90 time to first token",
        Population::Arrived,
    ),
    pct_key(
        "ttft_p99_ms",
        "p99 time to first token",
        Population::Arrived,
    ),
    pct_key(
        "tpot_p50_ms",
        "median time per output token after the first (a request's mean gap)",
        Population::Decoded,
    ),
    pct_key(
        "tpot_p90_ms",
        "p90 time per output token",
        Population::Decoded,
    ),
    pct_key(
        "tpot_p99_ms",
        "p99 time per output token",
        Population::Decoded,
    ),
    pct_key("itl_p50_ms", "median inter-token latency", Population::Gaps),
    pct_key("itl_p90_ms", "p90 inter-token latency", Population::Gaps),
    pct_key("itl_p99_ms", "p99 inter-token latency", Population::Gaps),
    pct_key(
        "tbt_p50_ms",
        "median over requests of each request's worst inter-token gap",
        Population::Decoded,
    ),
    pct_key(
        "tbt_p90_ms",
        "p90 over requests of each request's worst inter-token gap",
        Population::Decoded,
    ),
    pct_key(
        "tbt_p99_ms",
        "p99 over requests of each request's worst inter-token gap",
        Population::Decoded,
    ),
    SloKey {
        key: "attainment_min",
        kind: "attainment",
        meaning: "least share of arrived requests that completed within every per-request threshold",
        population: Population::Arrived,
    },
    threshold_key("ttft_ms", "a request's time to first token"),
    threshold_key(
        "tpot_ms",
        "a request's time per output token (one-token requests are within it)",
    ),
    threshold_key(
        "tbt_ms",
        "a request's worst inter-token gap, Mooncake's TBT (one-token requests are within it)",
    ),
    threshold_key(
        "e2e_per_token_ms",
        "a request's end-to-end latency ÷ its output tokens",
    ),
];

const fn pct_key(key: &'static str, meaning: &'static str, population: Population) -> SloKey {
    SloKey {
        key,
        kind: "percentile",
        meaning,
        population,
    }
}

const fn threshold_key(key: &'static str, meaning: &'static str) -> SloKey {
    SloKey {
        key,
        kind: "threshold",
        meaning,
        population: Population::Arrived,
    }
}

/// The population of the target `key` (`None` for a key pdsim does not have).
pub fn population_of(key: &str) -> Option<Population> {
    SLO_KEYS.iter().find(|k| k.key == key).map(|k| k.population)
}

/// One cause of a target's misses and how many it counts: for ITL and TBT targets the kind
/// of gap past the target (`handoff`, `decode_step`, `mixed_step`: `vocab::GapKind`) and, for
/// TBT, `not_completed`; for `attainment_min` each threshold set (`ttft_ms`, …: completed
/// requests past it; a request past two counts in both), `not_completed`, and with `tbt_ms`
/// the gap kinds again, splitting the requests past `tbt_ms` by the kind of their worst gap.
/// Gap counts are of values whose histogram bucket lies wholly past the target (within
/// 0.2 %, `Histogram::count_past`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Late {
    /// The cause.
    pub what: String,
    /// How many gaps or requests.
    pub count: u64,
}

/// One `[slo]` target and how the run did against it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SloTarget {
    /// The key as written in `[slo]` (`ttft_p99_ms`, `attainment_min`, …).
    pub key: String,
    /// The target: ms for latencies, a share (0–1) for `attainment_min`.
    pub target: f64,
    /// What the run reached; `null` when the percentile falls on requests that never completed
    /// (failed, corrupted or unfinished count as infinitely late) or nothing arrived (no gap,
    /// for ITL).
    pub value: Option<f64>,
    /// Whether it holds.
    pub met: bool,
    /// True when `[slo]` did not give this target and pdsim supplied it
    /// ([`DEFAULT_ATTAINMENT_MIN`]); left out of `summary.json` otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    /// How many requests (or, for ITL, gaps) the target is taken over ([`Population`]; 0 in
    /// summaries written before it was recorded).
    #[serde(default)]
    pub population: u64,
    /// What is past the target, by cause ([`Late`]); left out for TTFT and TPOT percentiles.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late: Vec<Late>,
}

/// SLO figures and the verdict (`summary.json` `slo`; read back by `explain` and `check`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SloSummary {
    /// Share of arrived requests that **completed** (not corrupted, not failed, not
    /// unfinished) within every per-request threshold set (`ttft_ms`, `tpot_ms`, `tbt_ms`,
    /// `e2e_per_token_ms`); with no threshold, the share that completed. `null` when nothing
    /// arrived (the key must be present when read back).
    #[serde(deserialize_with = "Option::deserialize")]
    pub attainment: Option<f64>,
    /// Requests per simulated second (whole run) that completed within every threshold.
    pub goodput_requests_per_s: f64,
    /// Whether every target holds; `null` when `[slo]` sets none.
    pub met: Option<bool>,
    /// Every target, in [`SLO_KEYS`] order (percentiles, then `attainment_min`).
    pub targets: Vec<SloTarget>,
    /// `slo.ttft_ms`, the per-request TTFT threshold attainment counts against, ms (left out
    /// when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// `slo.tpot_ms`, the per-request TPOT threshold, ms (left out when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// `slo.tbt_ms`, the per-request threshold on the worst inter-token gap, ms (left out
    /// when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tbt_ms: Option<f64>,
    /// `slo.e2e_per_token_ms`, the per-request threshold on end-to-end latency ÷ output
    /// tokens, ms (left out when not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_per_token_ms: Option<f64>,
}

/// Gaps of `g` past `target_ms`, by kind, as [`Late`] entries (kinds with none left out).
fn late_by_kind(g: &super::gaps::Gaps, target_ms: f64) -> Vec<Late> {
    GapKind::ALL
        .iter()
        .map(|&k| Late {
            what: k.as_str().into(),
            count: g.by_kind[k.index()].count_past(target_ms, 1e-6),
        })
        .filter(|l| l.count > 0)
        .collect()
}

/// The `[slo]` verdict of a run from its aggregates; `span_s` is the simulated span goodput is
/// taken over, seconds.
pub fn evaluate(c: &Collector, slo: &Slo, span_s: f64) -> SloSummary {
    let arrived = c.counts.arrived;
    let not_completed = arrived.saturating_sub(c.counts.completed);
    let attainment = (arrived > 0).then(|| c.slo_met as f64 / arrived as f64);
    let mut targets = Vec::new();
    let pct = |h: &Histogram, population: u64, q: u32| -> Option<f64> {
        let rank = (u64::from(q) * population).div_ceil(100).max(1);
        (population > 0)
            .then(|| h.at_rank(rank))
            .flatten()
            .map(|ns| ns * 1e-6)
    };
    // A one-token request has no TPOT and no gap: it is neither early nor late for those.
    let decoded = arrived.saturating_sub(c.one_token_completed);
    let gaps = slo
        .itl_pct_ms
        .iter()
        .any(Option::is_some)
        .then(|| c.itl.merged());
    let tbt = slo
        .tbt_pct_ms
        .iter()
        .any(Option::is_some)
        .then(|| c.tbt_completed.merged());
    let empty = Histogram::new();
    for (metric, targets_ms, h, population) in [
        ("ttft", &slo.ttft_pct_ms, &c.ttft_completed, arrived),
        ("tpot", &slo.tpot_pct_ms, &c.tpot_completed, decoded),
        (
            "itl",
            &slo.itl_pct_ms,
            gaps.as_ref().unwrap_or(&empty),
            c.itl.count(),
        ),
        (
            "tbt",
            &slo.tbt_pct_ms,
            tbt.as_ref().unwrap_or(&empty),
            decoded,
        ),
    ] {
        for (k, &q) in SLO_PERCENTILES.iter().enumerate() {
            if let Some(target) = targets_ms[k] {
                let value = pct(h, population, q);
                let late = match metric {
                    "itl" => late_by_kind(&c.itl, target),
                    "tbt" => {
                        let mut l = late_by_kind(&c.tbt_completed, target);
                        if not_completed > 0 {
                            l.push(Late {
                                what: "not_completed".into(),
                                count: not_completed,
                            });
                        }
                        l
                    }
                    _ => Vec::new(),
                };
                targets.push(SloTarget {
                    key: format!("{metric}_p{q}_ms"),
                    target,
                    value,
                    met: value.is_some_and(|v| v <= target),
                    default: false,
                    population,
                    late,
                });
            }
        }
    }
    let th = slo.thresholds();
    let min = slo
        .attainment_min
        .map(|m| (m, false))
        .or(th.any().then_some((DEFAULT_ATTAINMENT_MIN, true)));
    if let Some((min, default)) = min {
        let mut late: Vec<Late> = ["ttft_ms", "tpot_ms", "tbt_ms", "e2e_per_token_ms"]
            .iter()
            .zip([th.ttft_ns, th.tpot_ns, th.tbt_ns, th.e2e_per_token_ns])
            .zip(c.past_threshold)
            .filter(|((_, set), _)| set.is_some())
            .filter(|(_, count)| *count > 0)
            .map(|((what, _), count)| Late {
                what: (*what).into(),
                count,
            })
            .collect();
        if not_completed > 0 {
            late.push(Late {
                what: "not_completed".into(),
                count: not_completed,
            });
        }
        if let Some(t) = th.tbt_ns {
            late.extend(late_by_kind(&c.tbt_completed, t as f64 / 1e6));
        }
        targets.push(SloTarget {
            key: "attainment_min".into(),
            target: min,
            value: attainment,
            met: attainment.is_some_and(|a| a >= min),
            default,
            population: arrived,
            late,
        });
    }
    let ms = |ns: Option<Nanos>| ns.map(|n| n as f64 / 1e6);
    SloSummary {
        attainment,
        goodput_requests_per_s: c.slo_met as f64 / span_s,
        met: (!targets.is_empty()).then(|| targets.iter().all(|t| t.met)),
        targets,
        ttft_ms: ms(th.ttft_ns),
        tpot_ms: ms(th.tpot_ns),
        tbt_ms: ms(th.tbt_ns),
        e2e_per_token_ms: ms(th.e2e_per_token_ns),
    }
}

/// One percentile target the watch follows: (target ms, requests allowed late, requests late
/// so far, its `[slo]` key).
type Watched = (f64, u64, u64, String);

/// Watches a run's requests as they finish and says as soon as `[slo]` can no longer be met,
/// whatever the requests still to come do — so a planner can stop the run there: the verdict of
/// the whole run is then certainly `missed`, and so is [`evaluate`]'s of the run cut at that
/// point (every request in flight counts as infinitely late). Exact, not a heuristic, given
/// `arrivals`, the number of requests the whole run will see arrive — known before the run for
/// pdsim's open-loop workloads (`workload::arrivals`), and an upper bound suffices:
///
/// - a percentile target `pQ ≤ T` over a population of `N` requests is missed once more than
///   `N − max(1, ⌈Q·N/100⌉)` of them are late (the rank [`evaluate`] reads then falls on a
///   late one). That allowance never shrinks as `N` grows, so counting against the final
///   arrivals (the TPOT and TBT population, arrivals less one-token completions, is no
///   larger) is safe. A request is late once it finished without completing (infinitely
///   late), or completed with a latency whose histogram bucket starts past `T`
///   ([`Histogram::floor_of`]: the figure [`evaluate`] reports for a rank is never below its
///   value's bucket floor, so a value in a bucket straddling `T` is not counted — the stop may
///   come a request later, never wrongly);
/// - `attainment ≥ m` is missed once `(arrivals − not_attained) / arrivals < m`: the share can
///   only fall below that bound (f64 division is monotone, so the bound holds in floats too);
/// - ITL targets are not watched: their population, every gap of the run, has no bound known
///   before the run (it grows with the output tokens still to come), so a run with only ITL
///   targets runs to its end, and one with others stops on those.
#[derive(Clone, Debug)]
pub struct SloWatch {
    /// Per TTFT percentile target.
    ttft: Vec<Watched>,
    /// The same for TPOT.
    tpot: Vec<Watched>,
    /// The same for TBT (each request's worst gap).
    tbt: Vec<Watched>,
    /// `attainment_min` (or the default) and the requests that did not attain so far.
    attainment: Option<(f64, u64)>,
    arrivals: u64,
    lost: bool,
}

impl SloWatch {
    /// A watch of `slo` for a run that will see `arrivals` requests arrive (or at most that
    /// many); `None` when `[slo]` sets no target (there is no verdict to lose).
    pub fn new(slo: &Slo, arrivals: u64) -> Option<Self> {
        if !slo.any() {
            return None;
        }
        let allowed =
            |q: u32| arrivals - (u64::from(q) * arrivals).div_ceil(100).max(1).min(arrivals);
        let targets = |metric: &str, pct: &[Option<f64>; 3]| -> Vec<Watched> {
            SLO_PERCENTILES
                .iter()
                .zip(pct)
                .filter_map(|(&q, t)| t.map(|t| (t, allowed(q), 0, format!("{metric}_p{q}_ms"))))
                .collect()
        };
        let min = slo
            .attainment_min
            .or(slo.thresholds().any().then_some(DEFAULT_ATTAINMENT_MIN));
        Some(Self {
            ttft: targets("ttft", &slo.ttft_pct_ms),
            tpot: targets("tpot", &slo.tpot_pct_ms),
            tbt: targets("tbt", &slo.tbt_pct_ms),
            attainment: min.map(|m| (m, 0)),
            arrivals,
            lost: false,
        })
    }

    /// Whether `[slo]` is lost: some target cannot hold whatever the rest of the run does.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// A request completed (not corrupted) with `ttft_ns`, `tpot_ns` and `tbt_ns` (its worst
    /// gap; both `None` for one output token) and whether it met every per-request threshold.
    pub fn completed(
        &mut self,
        ttft_ns: Nanos,
        tpot_ns: Option<Nanos>,
        tbt_ns: Option<Nanos>,
        attained: bool,
    ) {
        // Once lost, the verdict is decided: the counts stay as they were at the loss, so
        // `lost_targets` names what was lost then (not what the cut run's leftovers add).
        if self.lost {
            return;
        }
        let late = |ns: Nanos, t: f64| Histogram::floor_of(ns) as f64 * 1e-6 > t;
        for x in &mut self.ttft {
            x.2 += u64::from(late(ttft_ns, x.0));
        }
        for (v, watched) in [(tpot_ns, &mut self.tpot), (tbt_ns, &mut self.tbt)] {
            if let Some(v) = v {
                for x in watched {
                    x.2 += u64::from(late(v, x.0));
                }
            }
        }
        if !attained && let Some(a) = &mut self.attainment {
            a.1 += 1;
        }
        self.check();
    }

    /// A request finished without completing (failed, corrupted or unfinished): late for
    /// every percentile target, and not attained.
    pub fn not_completed(&mut self) {
        if self.lost {
            return;
        }
        for x in self
            .ttft
            .iter_mut()
            .chain(&mut self.tpot)
            .chain(&mut self.tbt)
        {
            x.2 += 1;
        }
        if let Some(a) = &mut self.attainment {
            a.1 += 1;
        }
        self.check();
    }

    /// Whether `attainment_min` is lost.
    fn attainment_lost(&self) -> bool {
        self.attainment.is_some_and(|(min, not)| {
            self.arrivals > 0
                && ((self.arrivals - not.min(self.arrivals)) as f64 / self.arrivals as f64) < min
        })
    }

    fn watched(&self) -> impl Iterator<Item = &Watched> {
        self.ttft.iter().chain(&self.tpot).chain(&self.tbt)
    }

    fn check(&mut self) {
        self.lost |= self.attainment_lost() || self.watched().any(|x| x.2 > x.1);
    }

    /// The `[slo]` keys of the targets lost when the watch first said so, in [`evaluate`]'s
    /// order (the run misses them whatever comes; the others were undecided).
    pub fn lost_targets(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .watched()
            .filter(|x| x.2 > x.1)
            .map(|x| x.3.as_str())
            .collect();
        if self.attainment_lost() {
            out.push("attainment_min");
        }
        out
    }
}

/// Whether a grid point meets `[slo]`: its verdict holds on every seed. A seed with no verdict
/// (`[slo]` sets no target) or no run (an infeasible point) does not meet it.
pub fn met_on_every_seed(verdicts: impl IntoIterator<Item = Option<bool>>) -> bool {
    let mut any = false;
    for v in verdicts {
        if v != Some(true) {
            return false;
        }
        any = true;
    }
    any
}

/// A latency in ms with precision that suits its size: 1234, 56.7, 8.91, 0.123 (every report
/// prints latencies this way).
pub fn fmt_ms(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A figure of a target in its unit: `53.0 ms`, `87.5 %`.
fn figure(key: &str, v: f64) -> String {
    if key == "attainment_min" {
        format!("{:.1} %", 100.0 * v)
    } else {
        format!("{} ms", fmt_ms(v))
    }
}

impl SloTarget {
    /// The target as a condition: `tpot_p99_ms ≤ 50 ms`, `attainment ≥ 90.0 % (default)`.
    pub fn condition(&self) -> String {
        if self.key == "attainment_min" {
            format!(
                "attainment ≥ {}{}",
                figure(&self.key, self.target),
                if self.default {
                    " (default: [slo] sets per-request thresholds without attainment_min)"
                } else {
                    ""
                }
            )
        } else {
            format!("{} ≤ {}", self.key, figure(&self.key, self.target))
        }
    }

    /// What the run reached, or why there is no figure.
    pub fn reached(&self) -> String {
        match self.value {
            Some(v) => figure(&self.key, v),
            None if self.key == "attainment_min" => "— (nothing arrived)".into(),
            None if self.key.starts_with("itl_") => "— (no inter-token gap)".into(),
            None => "— (falls on requests that never completed)".into(),
        }
    }

    /// `met` or `MISSED`.
    pub fn verdict(&self) -> &'static str {
        if self.met { "met" } else { "MISSED" }
    }

    /// What the target is taken over, with its count: `1000 arrived requests, one that did
    /// not complete counted as infinitely late`, `251234 gaps: every inter-token gap …`.
    pub fn population_text(&self) -> String {
        match population_of(&self.key) {
            Some(p @ Population::Gaps) => format!("{} gaps: {}", self.population, p.words()),
            Some(Population::Decoded) => format!(
                "{} arrived requests less one-token completions (no gap to time), one that did not complete counted as infinitely late",
                self.population
            ),
            Some(Population::Arrived) | None => format!(
                "{} arrived requests, one that did not complete counted as infinitely late",
                self.population
            ),
        }
    }

    /// The population in a few words: `over 1000 requests`, `over 251234 gaps`.
    pub fn population_short(&self) -> String {
        let p = population_of(&self.key).unwrap_or(Population::Arrived);
        match p {
            Population::Gaps => format!("over {} gaps, all tokens pooled", self.population),
            Population::Decoded => format!(
                "over {} requests with a gap (arrived less one-token completions)",
                self.population
            ),
            Population::Arrived => format!("over {} arrived requests", self.population),
        }
    }

    /// One line: `tpot_p99_ms ≤ 50 ms: 53.0 ms — MISSED (over 1000 requests with a gap …)`.
    pub fn line(&self) -> String {
        format!(
            "{}: {} — {} ({})",
            self.condition(),
            self.reached(),
            self.verdict(),
            self.population_short()
        )
    }

    /// [`SloTarget::late`] in words, largest first: `9812 handoff gaps, 140 decode-step gaps`,
    /// `30 requests whose worst gap is a handoff` (empty when nothing is recorded).
    pub fn late_text(&self) -> String {
        let unit = match population_of(&self.key) {
            Some(Population::Gaps) => "gaps",
            _ => "requests",
        };
        let mut l: Vec<&Late> = self.late.iter().filter(|l| l.count > 0).collect();
        l.sort_by_key(|l| std::cmp::Reverse(l.count));
        l.iter()
            .map(|l| {
                let s = if l.count == 1 { "" } else { "s" };
                match l.what.as_str() {
                    "not_completed" => format!("{} request{s} that never completed", l.count),
                    w if w.ends_with("_ms") => {
                        format!("{} completed request{s} past {w}", l.count)
                    }
                    w if unit == "gaps" => format!("{} {} gap{s}", l.count, w.replace('_', "-")),
                    w => format!(
                        "{} request{s} whose worst gap is a {}",
                        l.count,
                        w.replace('_', "-")
                    ),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl SloSummary {
    /// The verdict in words: `met`, `MISSED (tpot_p99_ms)`, or `no target set`.
    pub fn verdict_text(&self) -> String {
        match self.met {
            None => "no target set".into(),
            Some(true) => "met".into(),
            Some(false) => {
                let missed: Vec<&str> = self
                    .targets
                    .iter()
                    .filter(|t| !t.met)
                    .map(|t| t.key.as_str())
                    .collect();
                format!("MISSED ({})", missed.join(", "))
            }
        }
    }

    /// What attainment counts, so a 100 % never reads as the verdict: `share of arrived
    /// requests that completed within TTFT ≤ 1000 ms and TPOT ≤ 50 ms`, or, with no
    /// per-request threshold, `share of arrived requests that completed, with no
    /// ttft_ms/tpot_ms set (the percentile targets decide the verdict)`.
    pub fn attainment_basis(&self) -> String {
        let mut within = Vec::new();
        for (what, t) in [
            ("TTFT", self.ttft_ms),
            ("TPOT", self.tpot_ms),
            ("worst inter-token gap (TBT)", self.tbt_ms),
            ("E2E per output token", self.e2e_per_token_ms),
        ] {
            if let Some(t) = t {
                within.push(format!("{what} ≤ {} ms", fmt_ms(t)));
            }
        }
        if within.is_empty() {
            let pct = self.targets.iter().any(|t| t.key != "attainment_min");
            format!(
                "share of arrived requests that completed, with no ttft_ms/tpot_ms set{}",
                if pct {
                    " (the percentile targets decide the verdict)"
                } else {
                    ""
                }
            )
        } else {
            format!(
                "share of arrived requests that completed within {}",
                within.join(" and ")
            )
        }
    }
}

/// Over which requests the latency figures (`summary.json` `latency_ms`) are taken: the
/// finished ones (completed and corrupted), with the requests left out counted, e.g.
/// `over 420 finished requests (412 completed + 8 corrupted); 580 failed and 0 unfinished are
/// not in them (…)`.
pub fn latency_basis(r: &Counts) -> String {
    let finished = r.completed + r.corrupted;
    let mut s = format!("over {finished} finished requests");
    if r.corrupted > 0 {
        s += &format!(" ({} completed + {} corrupted)", r.completed, r.corrupted);
    }
    if r.failed + r.unfinished > 0 {
        s += &format!(
            "; {} failed and {} unfinished are not in them (an [slo] percentile target counts them as infinitely late)",
            r.failed, r.unfinished
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(targets: Vec<SloTarget>, ttft_ms: Option<f64>) -> SloSummary {
        SloSummary {
            attainment: Some(1.0),
            goodput_requests_per_s: 1.0,
            met: (!targets.is_empty()).then(|| targets.iter().all(|t| t.met)),
            targets,
            ttft_ms,
            tpot_ms: None,
            tbt_ms: None,
            e2e_per_token_ms: None,
        }
    }

    fn target(key: &str, target: f64, value: Option<f64>, met: bool) -> SloTarget {
        SloTarget {
            key: key.into(),
            target,
            value,
            met,
            default: false,
            population: 100,
            late: Vec::new(),
        }
    }

    #[test]
    fn thresholds_without_attainment_min_get_the_default_and_a_verdict() {
        let mut c = Collector::default();
        c.counts.arrived = 10;
        c.slo_met = 9;
        let slo = Slo {
            ttft_ns: Some(1_000_000_000),
            tpot_ns: Some(50_000_000),
            ..Slo::default()
        };
        let s = evaluate(&c, &slo, 1.0);
        assert_eq!(s.met, Some(true), "90 % ≥ the 90 % default");
        assert_eq!(s.targets.len(), 1);
        assert!(s.targets[0].default && s.targets[0].key == "attainment_min");
        assert_eq!((s.ttft_ms, s.tpot_ms), (Some(1000.0), Some(50.0)));
        c.slo_met = 8;
        assert_eq!(evaluate(&c, &slo, 1.0).met, Some(false));
        // Given explicitly, the user's value holds and is not marked default.
        let slo = Slo {
            attainment_min: Some(0.8),
            ..slo
        };
        let s = evaluate(&c, &slo, 1.0);
        assert_eq!(s.met, Some(true));
        assert!(!s.targets[0].default);
        // No target at all: no verdict.
        assert_eq!(evaluate(&c, &Slo::default(), 1.0).met, None);
    }

    /// Every new figure and target by hand, through the collector as the run feeds it. Five
    /// requests (ms): r0 completes 3 tokens, first at 100, last at 300, worst gap 150 (a
    /// handoff); r1 5 tokens, 50 → 250, worst 60 (a decode step); r2 one token at 40 (no gap);
    /// r3 fails; r4 2 tokens, 20 → 120, worst 100 (a mixed step). All arrive at 0. The seven
    /// gaps streamed: handoffs 150, 30; decode steps 60, 40, 50, 60; one mixed 100.
    #[test]
    fn gap_figures_and_targets_by_hand() {
        use crate::config::Thresholds;
        use crate::metrics::NullSink;
        use crate::vocab::{ErrorKind, Outcome, RequestRow};
        let ms = 1_000_000u64;
        let slo = Slo {
            tbt_ns: Some(120 * ms),
            e2e_per_token_ns: Some(90 * ms),
            itl_pct_ms: [Some(55.0), None, Some(200.0)],
            tbt_pct_ms: [Some(101.0), Some(500.0), None],
            attainment_min: Some(0.5),
            ..Slo::default()
        };
        let th: Thresholds = slo.thresholds();
        let mut c = Collector::default();
        for (kind, gaps) in [
            (GapKind::Handoff, &[150, 30][..]),
            (GapKind::DecodeStep, &[60, 40, 50, 60][..]),
            (GapKind::MixedStep, &[100][..]),
        ] {
            for g in gaps {
                c.itl.of(kind).record(g * ms);
            }
        }
        let rows = [
            (3, Some((100, 300)), Some((150, GapKind::Handoff))),
            (5, Some((50, 250)), Some((60, GapKind::DecodeStep))),
            (1, Some((40, 40)), None),
            (4, None, None),
            (2, Some((20, 120)), Some((100, GapKind::MixedStep))),
        ];
        c.counts.arrived = rows.len() as u64;
        for (id, (out, times, worst)) in rows.into_iter().enumerate() {
            let mut r = RequestRow::arrived(id as u64, 0, Some((0, 1)), 10, out);
            match times {
                Some((ft, fin)) => {
                    r.first_token_ns = Some(ft * ms);
                    r.finish_ns = Some(fin * ms);
                    r.outcome = Outcome::Completed;
                    r.gaps.worst = worst.map(|(g, k)| (g * ms, k));
                }
                None => {
                    r.finish_ns = Some(10 * ms);
                    r.outcome = Outcome::Failed;
                    r.error_kind = Some(ErrorKind::BootstrapTimeout);
                }
            }
            c.finish(&r, Some("x"), th, &mut NullSink).unwrap();
        }
        let close =
            |got: Option<f64>, want: f64| got.is_some_and(|g| (g - want).abs() <= want / 256.0);
        // latency_ms: TBT over the finished requests with a gap, E2E/token over all finished.
        let l = c.latencies();
        assert!(
            close(l.tbt.p50, 100.0) && l.tbt.max == Some(150.0),
            "{:?}",
            l.tbt
        );
        assert!((l.tbt.mean.unwrap() - 310.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            (l.e2e_per_token.mean, l.e2e_per_token.max),
            (Some(62.5), Some(100.0)),
            "(100 + 50 + 40 + 60) / 4"
        );
        assert!(close(l.itl.p50, 60.0) && l.itl.max == Some(150.0));
        let s = evaluate(&c, &slo, 1.0);
        let t = |k: &str| s.targets.iter().find(|t| t.key == k).unwrap();
        let late = |k: &str| -> Vec<(String, u64)> {
            t(k).late
                .iter()
                .map(|l| (l.what.clone(), l.count))
                .collect()
        };
        // ITL over the 7 gaps: p50 is rank 4 → 60 ms > 55 (missed); p99 rank 7 → 150 ≤ 200.
        assert_eq!(t("itl_p50_ms").population, 7);
        assert!(close(t("itl_p50_ms").value, 60.0) && !t("itl_p50_ms").met);
        assert_eq!(
            late("itl_p50_ms"),
            [
                ("handoff".into(), 1),
                ("decode_step".into(), 2),
                ("mixed_step".into(), 1)
            ]
        );
        assert_eq!(t("itl_p99_ms").value, Some(150.0));
        assert!(t("itl_p99_ms").met);
        // TBT over arrived less the one-token completion (4): p50 rank 2 → 100 ≤ 101; p90
        // rank 4 falls on the failed request → no value, missed.
        assert_eq!(t("tbt_p50_ms").population, 4);
        assert!(close(t("tbt_p50_ms").value, 100.0) && t("tbt_p50_ms").met);
        assert_eq!((t("tbt_p90_ms").value, t("tbt_p90_ms").met), (None, false));
        assert!(late("tbt_p90_ms").contains(&("not_completed".into(), 1)));
        // Attainment: r0 is past tbt_ms (150 > 120) and e2e_per_token_ms (100 > 90), r3 never
        // completed; r1, r2 (no gap: within tbt_ms) and r4 attain: 3 of 5.
        assert_eq!(s.attainment, Some(0.6));
        assert!(t("attainment_min").met);
        assert_eq!(
            late("attainment_min"),
            [
                ("tbt_ms".into(), 1),
                ("e2e_per_token_ms".into(), 1),
                ("not_completed".into(), 1),
                ("handoff".into(), 1)
            ],
            "r0's worst gap past tbt_ms is a handoff"
        );
        assert_eq!((s.tbt_ms, s.e2e_per_token_ms), (Some(120.0), Some(90.0)));
        assert_eq!(s.met, Some(false), "itl_p50_ms and tbt_p90_ms missed");
        assert_eq!(s.verdict_text(), "MISSED (itl_p50_ms, tbt_p90_ms)");
        assert!(
            s.attainment_basis()
                .contains("worst inter-token gap (TBT) ≤ 120 ms")
        );
        assert!(
            t("itl_p50_ms")
                .line()
                .contains("over 7 gaps, all tokens pooled")
        );
        assert_eq!(
            t("itl_p50_ms").late_text(),
            "2 decode-step gaps, 1 handoff gap, 1 mixed-step gap"
        );
    }

    #[test]
    fn the_default_is_marked_in_json_and_text() {
        let mut t = target("attainment_min", 0.9, Some(1.0), true);
        assert!(!serde_json::to_string(&t).unwrap().contains("default"));
        t.default = true;
        assert!(
            serde_json::to_string(&t)
                .unwrap()
                .contains("\"default\":true")
        );
        assert!(t.condition().contains("(default"), "{}", t.condition());
    }

    #[test]
    fn the_watch_loses_a_percentile_only_past_its_allowance() {
        // p99 over 100 arrivals: the rank is 99, so one late request is allowed, two are not.
        let slo = Slo {
            ttft_pct_ms: [None, None, Some(100.0)],
            ..Slo::default()
        };
        let mut w = SloWatch::new(&slo, 100).unwrap();
        w.completed(200_000_000, None, None, true);
        assert!(!w.lost());
        // A value in the bucket straddling the target is not counted late: its figure could
        // still read ≤ 100 ms.
        let straddle = (99_999_000..100_500_000)
            .find(|&v| Histogram::floor_of(v) <= 100_000_000 && v > 100_000_000)
            .unwrap();
        w.completed(straddle, None, None, true);
        assert!(!w.lost(), "a straddling value is not late");
        w.not_completed();
        assert!(w.lost());
        assert_eq!(w.lost_targets(), vec!["ttft_p99_ms"]);
        // Lost, it stops counting: the leftovers of a cut run add nothing.
        w.completed(1, None, None, true);
        assert_eq!(w.lost_targets(), vec!["ttft_p99_ms"]);
        assert!(
            SloWatch::new(&Slo::default(), 100).is_none(),
            "no target, no watch"
        );
    }

    #[test]
    fn the_watch_loses_attainment_when_even_every_remaining_request_cannot_save_it() {
        // Thresholds without attainment_min: the 90 % default, over 10 arrivals.
        let slo = Slo {
            ttft_ns: Some(1_000_000_000),
            ..Slo::default()
        };
        let mut w = SloWatch::new(&slo, 10).unwrap();
        w.completed(5, None, None, false);
        assert!(!w.lost(), "9 of 10 can still attain: 90 % ≥ 90 %");
        w.not_completed();
        assert!(w.lost(), "8 of 10 at best");
        assert_eq!(w.lost_targets(), vec!["attainment_min"]);
    }

    #[test]
    fn the_watch_loses_a_tbt_percentile_as_tpot_and_never_an_itl_one() {
        // tbt_p90 over 10 arrivals: rank 9, one request allowed late; ITL is not watched.
        let ms = 1_000_000;
        let slo = Slo {
            tbt_pct_ms: [None, Some(100.0), None],
            itl_pct_ms: [Some(1.0), None, None],
            ..Slo::default()
        };
        let mut w = SloWatch::new(&slo, 10).unwrap();
        w.completed(ms, Some(ms), Some(500 * ms), true);
        w.completed(ms, None, None, true); // one token: no gap, not late
        assert!(!w.lost());
        w.completed(ms, Some(ms), Some(50 * ms), true);
        assert!(!w.lost(), "within the target");
        w.completed(ms, Some(ms), Some(200 * ms), true);
        assert!(w.lost());
        assert_eq!(w.lost_targets(), vec!["tbt_p90_ms"]);
        // With only an ITL target, nothing is ever lost early.
        let slo = Slo {
            itl_pct_ms: [Some(1.0), None, None],
            ..Slo::default()
        };
        let mut w = SloWatch::new(&slo, 10).unwrap();
        for _ in 0..10 {
            w.not_completed();
        }
        assert!(!w.lost(), "ITL's population is unknown before the run");
    }

    #[test]
    fn every_seed_must_meet_it() {
        assert!(met_on_every_seed([Some(true), Some(true)]));
        assert!(!met_on_every_seed([Some(true), None]));
        assert!(!met_on_every_seed([Some(true), Some(false)]));
        assert!(!met_on_every_seed(std::iter::empty()));
    }

    #[test]
    fn lines_say_value_target_and_verdict() {
        let t = target("tpot_p99_ms", 50.0, Some(53.04), false);
        assert_eq!(
            t.line(),
            "tpot_p99_ms ≤ 50.0 ms: 53.0 ms — MISSED (over 100 requests with a gap (arrived less one-token completions))"
        );
        let t = target("ttft_p99_ms", 2000.0, None, false);
        assert!(t.line().contains("never completed"), "{}", t.line());
        let s = summary(
            vec![
                target("ttft_p99_ms", 2000.0, Some(10.0), true),
                target("tpot_p99_ms", 50.0, Some(53.0), false),
            ],
            None,
        );
        assert_eq!(s.verdict_text(), "MISSED (tpot_p99_ms)");
        assert!(
            s.attainment_basis()
                .contains("the percentile targets decide the verdict"),
            "{}",
            s.attainment_basis()
        );
        let s = summary(Vec::new(), Some(1000.0));
        assert_eq!(s.verdict_text(), "no target set");
        assert!(s.attainment_basis().ends_with("within TTFT ≤ 1000 ms"));
    }

    #[test]
    fn latency_basis_counts_who_is_left_out() {
        let r = Counts {
            arrived: 1000,
            completed: 412,
            failed: 580,
            corrupted: 8,
            unfinished: 0,
            aborted: 0,
        };
        let b = latency_basis(&r);
        assert!(b.starts_with("over 420 finished requests (412 completed + 8 corrupted)"));
        assert!(
            b.contains("580 failed and 0 unfinished are not in them"),
            "{b}"
        );
    }
}
