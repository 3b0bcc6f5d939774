//! What the report reads from a point's rows, as figures and as words: the means over seeds,
//! the latency at a target's percentile, the `[slo]` targets, a point's short label, why it
//! misses, the pools that bind, and the points against the trend. Shared by the charts and the
//! page.

use crate::metrics::slo::fmt_ms;
use crate::plan::Grid;
use crate::plan::SweepRow;
use crate::plan::search::PointVerdict;

/// The mean of a figure over a point's seeds (`None` when no seed has it).
pub(super) fn mean(rows: &[SweepRow], f: impl Fn(&SweepRow) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rows.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Escapes text for HTML content and double-quoted attribute values (single quotes are
/// left as they are: the page quotes every attribute with `"`).
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The rate axis: the varied key that sets the arrival rate, if any.
pub(super) fn rate_axis(grid: &Grid) -> Option<usize> {
    use crate::scenario::file::{ARRIVAL_RATE_KEY, TRACE_RATE_KEY};
    grid.axes
        .iter()
        .position(|a| a.key == ARRIVAL_RATE_KEY || a.key == TRACE_RATE_KEY)
}

/// The percentile targets of `metric` (`ttft`, `tpot`, `itl`, `tbt`).
fn targets_of<'a>(slo: &'a crate::config::Slo, metric: &str) -> &'a [Option<f64>; 3] {
    match metric {
        "ttft" => &slo.ttft_pct_ms,
        "itl" => &slo.itl_pct_ms,
        "tbt" => &slo.tbt_pct_ms,
        _ => &slo.tpot_pct_ms,
    }
}

/// The latency metrics the report charts and tabulates: TTFT and TPOT always, ITL and TBT
/// when `[slo]` sets a percentile target on them (their per-request threshold, `tbt_ms`,
/// brings TBT in too).
pub(super) fn metrics_of(slo: &crate::config::Slo) -> Vec<&'static str> {
    let mut m = vec!["ttft", "tpot"];
    if slo.itl_pct_ms.iter().any(Option::is_some) {
        m.push("itl");
    }
    if slo.tbt_ns.is_some() || slo.tbt_pct_ms.iter().any(Option::is_some) {
        m.push("tbt");
    }
    m
}

/// The percentile a latency chart shows for `metric`: that of the highest `[slo]` target
/// set (p99 when none), and the target.
pub(super) fn target_of(slo: &crate::config::Slo, metric: &str) -> (u32, Option<f64>) {
    let pct = targets_of(slo, metric);
    for k in (0..3).rev() {
        if let Some(t) = pct[k] {
            return (crate::config::SLO_PERCENTILES[k], Some(t));
        }
    }
    (99, None)
}

/// A row's latency figure at a percentile (`metric`: `ttft`, `tpot`, `itl`, `tbt`).
pub(super) fn pick(r: &SweepRow, metric: &str, q: u32) -> Option<f64> {
    match (metric, q) {
        ("ttft", 50) => r.ttft_p50_ms,
        ("ttft", 90) => r.ttft_p90_ms,
        ("ttft", _) => r.ttft_p99_ms,
        ("itl", 50) => r.itl_p50_ms,
        ("itl", 90) => r.itl_p90_ms,
        ("itl", _) => r.itl_p99_ms,
        ("tbt", 50) => r.tbt_p50_ms,
        ("tbt", 90) => r.tbt_p90_ms,
        ("tbt", _) => r.tbt_p99_ms,
        (_, 50) => r.tpot_p50_ms,
        (_, 90) => r.tpot_p90_ms,
        _ => r.tpot_p99_ms,
    }
}

/// A metric's name in the report, with what it is taken over: `TTFT`, `ITL (every gap)`.
pub(super) fn metric_label(metric: &str) -> &'static str {
    match metric {
        "ttft" => "TTFT",
        "itl" => "ITL (every gap)",
        "tbt" => "TBT (each request's worst gap)",
        _ => "TPOT",
    }
}

/// A point's worst seed at a latency figure: the highest `metric` at percentile `q` over its
/// seeds, ms (`None` when no seed finished a request).
pub(super) fn worst(v: &PointVerdict, metric: &str, q: u32) -> Option<f64> {
    v.seeds
        .iter()
        .filter_map(|r| pick(r, metric, q))
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
}

/// The `[slo]` targets in words: `ttft_p99_ms ≤ 2000 ms, tpot_p99_ms ≤ 100 ms`; ITL and TBT
/// targets say what they are taken over (`itl_p99_ms ≤ 50 ms over every gap`).
pub(super) fn slo_text(slo: &crate::config::Slo) -> String {
    let mut out = Vec::new();
    for metric in ["ttft", "tpot", "itl", "tbt"] {
        for (k, t) in targets_of(slo, metric).iter().enumerate() {
            if let Some(t) = t {
                out.push(format!(
                    "{metric}_p{}_ms ≤ {} ms{}",
                    crate::config::SLO_PERCENTILES[k],
                    fmt_ms(*t),
                    match metric {
                        "itl" => " over every gap",
                        "tbt" => " over each request's worst gap",
                        _ => "",
                    }
                ));
            }
        }
    }
    let ms = |ns: Option<u64>| ns.map(|n| fmt_ms(n as f64 / 1e6));
    let mut within = Vec::new();
    if let Some(t) = ms(slo.ttft_ns) {
        within.push(format!("TTFT ≤ {t} ms"));
    }
    if let Some(t) = ms(slo.tpot_ns) {
        within.push(format!("TPOT ≤ {t} ms"));
    }
    if let Some(t) = ms(slo.tbt_ns) {
        within.push(format!("worst gap ≤ {t} ms"));
    }
    if let Some(t) = ms(slo.e2e_per_token_ns) {
        within.push(format!("E2E per token ≤ {t} ms"));
    }
    if !within.is_empty() || slo.attainment_min.is_some() {
        let min = slo
            .attainment_min
            .unwrap_or(crate::metrics::slo::DEFAULT_ATTAINMENT_MIN);
        out.push(format!(
            "≥ {:.1} % of requests completed{}{}",
            100.0 * min,
            if within.is_empty() {
                String::new()
            } else {
                format!(" within {}", within.join(" and "))
            },
            if slo.attainment_min.is_none() {
                " (default attainment_min)"
            } else {
                ""
            }
        ));
    }
    out.join(", ")
}

/// A short label of a point: per pool its instances and server keys (`3P·tp4 2D·tp8`: 3
/// prefill instances of TP 4, 2 decode of TP 8), then the other keys as `leaf=value`.
pub fn short_label(values: &[(String, String)]) -> String {
    let mut pools: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut other = Vec::new();
    for (k, v) in values {
        // A whole `pools` array (a grid of PD and colocated deployments): each pool by role.
        if k == "pools"
            && let Some(l) = pools_label(v)
        {
            other.push(l);
            continue;
        }
        let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
        let parts: Vec<&str> = k.split('.').collect();
        if parts.len() >= 3 && parts[0] == "pools" {
            let name = parts[1].to_string();
            let at = match pools.iter().position(|p| p.0 == name) {
                Some(i) => i,
                None => {
                    pools.push((name.clone(), String::new(), Vec::new()));
                    pools.len() - 1
                }
            };
            let leaf = *parts.last().unwrap_or(&"");
            match leaf {
                "instances" if parts.len() == 3 => pools[at].1 = v.to_string(),
                "tp_size" => pools[at].2.push(format!("tp{v}")),
                "page_size" => pools[at].2.push(format!("page{v}")),
                "chunked_prefill_size" => pools[at].2.push(format!("chunk{v}")),
                "dp_size" => pools[at].2.push(format!("dp{v}")),
                "ep_size" => pools[at].2.push(format!("ep{v}")),
                _ => pools[at].2.push(format!("{leaf}={v}")),
            }
        } else {
            let leaf = k.rsplit('.').next().unwrap_or(k);
            other.push(format!("{leaf}={v}"));
        }
    }
    let mut out: Vec<String> = pools
        .into_iter()
        .map(|(name, n, rest)| {
            let tag = match name.as_str() {
                "prefill" => "P".to_string(),
                "decode" => "D".to_string(),
                "colocated" => "C".to_string(),
                other => format!("{other}:"),
            };
            let mut s = format!("{n}{tag}");
            for r in rest {
                s += "·";
                s += &r;
            }
            s
        })
        .collect();
    out.extend(other);
    if out.is_empty() {
        "the scenario".into()
    } else {
        out.join(" ")
    }
}

/// A `pools` array value as a label: `2P·tp2 1D·tp4`, `4C·tp2` (a pool's role as its tag,
/// its instances and TP); `None` when it does not read as one.
fn pools_label(v: &str) -> Option<String> {
    let t: toml::Table = toml::from_str(&format!("v = {v}")).ok()?;
    let pools = t.get("v")?.as_array()?;
    let label: Vec<String> = pools
        .iter()
        .map(|p| {
            let p = p.as_table()?;
            let tag = match p.get("role")?.as_str()? {
                "prefill" => "P",
                "decode" => "D",
                "colocated" => "C",
                _ => "?",
            };
            let n = p.get("instances").and_then(toml::Value::as_integer)?;
            let tp = p
                .get("server")
                .and_then(|s| s.get("tp_size"))
                .and_then(toml::Value::as_integer)
                .unwrap_or(1);
            Some(format!("{n}{tag}·tp{tp}"))
        })
        .collect::<Option<_>>()?;
    (!label.is_empty()).then(|| label.join(" "))
}

/// The binding pools of a row's `bottlenecks` (`prefill:compute decode:none` → `prefill
/// (compute)`), or `None` when no pool binds.
pub(super) fn binding(r: &SweepRow) -> Option<String> {
    let b: Vec<String> = r
        .bottlenecks
        .as_deref()?
        .split_whitespace()
        .filter_map(|p| p.split_once(':'))
        .filter(|(_, b)| *b != "none")
        .map(|(p, b)| format!("{p} ({})", b.replace('_', " ")))
        .collect();
    (!b.is_empty()).then(|| b.join(", "))
}

/// Why a point misses `[slo]`, from its rows: the targets missed, on which seed, whether the
/// run stopped early, the pools that bind, and the requests left unserved.
pub fn why_missed(v: &PointVerdict) -> String {
    let Some(r) = v.seeds.iter().find(|r| r.slo_met != Some(true)) else {
        return String::new();
    };
    if let Some(e) = &r.error {
        return format!("not a valid scenario: {e}");
    }
    let mut s = format!(
        "seed {} misses {}",
        r.seed,
        r.slo_missed
            .as_deref()
            .unwrap_or("[slo]")
            .replace(' ', ", ")
    );
    if let Some(t) = r.stopped_early_at_s {
        s += &format!(" (lost by {t:.1} s; the run stopped there)");
    }
    let unserved = r.failed.unwrap_or(0) + r.unfinished.unwrap_or(0);
    if unserved > 0 && r.stopped_early_at_s.is_none() {
        s += &format!(
            "; {} of {} requests failed or unfinished",
            unserved,
            r.arrived.unwrap_or(0)
        );
    }
    match binding(r) {
        Some(b) => s += &format!("; binds: {b}"),
        None => s += "; no pool reads as saturated",
    }
    s
}

/// Points against the trend: they miss `[slo]` although a point at the same rate that bills
/// fewer GPUs meets it — more hardware, worse latency, so the extra hardware sits in the
/// wrong pool.
/// Returns (point, the cheaper point that meets it).
pub(super) fn off_trend(vs: &[PointVerdict]) -> Vec<(&PointVerdict, &PointVerdict)> {
    let billed = |v: &PointVerdict| v.billed_gpus.or(v.gpus);
    let mut out = Vec::new();
    for v in vs.iter().filter(|v| !v.meets_slo) {
        let Some(b) = billed(v) else { continue };
        let better = vs
            .iter()
            .filter(|w| {
                w.meets_slo
                    && billed(w).is_some_and(|c| c < b)
                    && w.seeds[0].rate_per_s == v.seeds[0].rate_per_s
            })
            .min_by_key(|w| (billed(w), w.point));
        if let Some(w) = better {
            out.push((v, w));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_each_pools_instances_and_tp() {
        let v = |k: &str, x: &str| (k.to_string(), x.to_string());
        assert_eq!(
            short_label(&[
                v("pools.prefill.instances", "3"),
                v("pools.decode.instances", "2"),
                v("pools.prefill.server.tp_size", "4"),
                v("pools.decode.server.tp_size", "8"),
                v("router.policy", "\"round_robin\""),
            ]),
            "3P·tp4 2D·tp8 policy=round_robin"
        );
        assert_eq!(short_label(&[]), "the scenario");
        // A whole `pools` array (a PD-or-colocated grid) reads by role.
        assert_eq!(
            short_label(&[v(
                "pools",
                "[{name=\"p\",role=\"prefill\",instances=2,server={tp_size=2}},{name=\"d\",role=\"decode\",instances=1}]"
            )]),
            "2P·tp2 1D·tp1"
        );
        assert_eq!(
            short_label(&[v(
                "pools",
                "[{name=\"s\",role=\"colocated\",instances=4,server={tp_size=2}}]"
            )]),
            "4C·tp2"
        );
    }
}
