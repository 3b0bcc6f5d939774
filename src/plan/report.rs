//! The report of a sweep or a plan, `index.html`. A plan's opens with its answer (the point,
//! its nodes and idle GPUs, what is billed, the deployment files, how the search went); then
//! every point in cost order with its latency against the `[slo]` target, coloured by the one
//! SLO verdict (`metrics::slo`, each row's `slo_met`) — with a varied rate, latency against
//! load instead; throughput per GPU against TTFT with the Pareto front; which prefill ×
//! decode splits meet `[slo]`; the points that miss it against the trend, with the pool that
//! binds; and every point in a table that scrolls sideways rather than cutting columns off.
//! Drawn from the rows alone (so a merged sweep draws the same bytes), as inline plotters SVG:
//! the page opens from disk with no script and no external URL.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;

use super::search::{PlanAnswer, PointVerdict, cheapest, verdicts};
use super::{Grid, Manifest, SweepRow};
use crate::metrics::slo::fmt_ms;

const W: u32 = 720;
const H: u32 = 420;
/// The run report's palette (Tableau 10), so both reports read alike.
const COLORS: [RGBColor; 10] = crate::report::charts::PALETTE;
/// Points that meet `[slo]` (Tableau green) and those that miss it (Tableau grey).
const MEETS: RGBColor = COLORS[4];
const MISSES: RGBColor = COLORS[9];

/// The mean of a figure over a point's seeds (`None` when no seed has it).
fn mean(rows: &[SweepRow], f: impl Fn(&SweepRow) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rows.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The rate axis: the varied key that sets the arrival rate, if any.
fn rate_axis(grid: &Grid) -> Option<usize> {
    use crate::scenario::file::{ARRIVAL_RATE_KEY, TRACE_RATE_KEY};
    grid.axes
        .iter()
        .position(|a| a.key == ARRIVAL_RATE_KEY || a.key == TRACE_RATE_KEY)
}

/// A label of a point's values other than the axis `skip`.
fn label(v: &PointVerdict, skip: Option<usize>) -> String {
    let parts: Vec<String> = v
        .values
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, (k, val))| {
            format!(
                "{}={val}",
                k.rsplit('.')
                    .take(2)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(".")
            )
        })
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(" ")
    }
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * e >= v * 1.05 {
            return m * e;
        }
    }
    10.0 * e
}

/// One latency figure against the arrival rate (or, with no varied rate, the achieved rate),
/// one line per combination of the other varied keys.
fn latency_chart(
    vs: &[PointVerdict],
    grid: &Grid,
    metric: &str,
    (q, target): (u32, Option<f64>),
) -> String {
    let ri = rate_axis(grid);
    let pick = |r: &SweepRow| pick(r, metric, q);
    // With one arrival rate for every point (a plan), load is not an axis: the chart shows
    // each point's latency against its GPUs instead, split by whether it meets [slo].
    let rates: std::collections::BTreeSet<u64> = vs
        .iter()
        .filter_map(|v| mean(&v.seeds, |r| r.rate_per_s.or(r.requests_per_s)))
        .map(f64::to_bits)
        .collect();
    let by_gpus = rates.len() < 2;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for v in vs {
        let x = if by_gpus {
            v.gpus.map(f64::from)
        } else {
            mean(&v.seeds, |r| r.rate_per_s.or(r.requests_per_s))
        };
        let y = mean(&v.seeds, pick);
        let name = if by_gpus {
            if v.meets_slo {
                "meets [slo]"
            } else {
                "misses [slo]"
            }
            .to_string()
        } else {
            label(v, ri)
        };
        if let (Some(x), Some(y)) = (x, y) {
            series.entry(name).or_default().push((x, y));
        }
    }
    let legend = series.len() <= 12;
    let xmax = nice_max(series.values().flatten().map(|p| p.0).fold(0.0, f64::max));
    // Latency past saturation grows by orders of magnitude: a log axis keeps the knee visible.
    let ys = || series.values().flatten().map(|p| p.1).chain(target);
    let ymax = nice_max(ys().fold(0.0, f64::max));
    let ymin = ys().fold(f64::INFINITY, f64::min).max(1e-3) / 2.0;
    let ymin = 10f64.powf(ymin.log10().floor()).min(ymax / 10.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let caption = if by_gpus {
            format!(
                "p{q} {} (ms) of each point vs its GPUs",
                metric.to_uppercase()
            )
        } else {
            format!("p{q} {} (ms) vs arrival rate", metric.to_uppercase())
        };
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, (ymin..ymax).log_scale())
        else {
            return svg_fallback("no data");
        };
        let _ = chart
            .configure_mesh()
            .x_desc(if by_gpus { "GPUs" } else { "requests/s" })
            .y_desc("ms (log)")
            .draw();
        for (k, (name, mut pts)) in series.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = if by_gpus {
                if name.starts_with("meets") {
                    MEETS
                } else {
                    MISSES
                }
            } else {
                COLORS[k % COLORS.len()]
            };
            if by_gpus {
                if let Ok(s) = chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                {
                    s.label(name)
                        .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
                }
                continue;
            }
            if let Ok(s) = chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                && legend
            {
                s.label(name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            }
            let _ = chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())));
        }
        if let Some(t) = target {
            let red = RGBColor(200, 0, 0);
            if let Ok(s) = chart.draw_series(LineSeries::new(
                vec![(0.0, t), (xmax, t)],
                red.stroke_width(1),
            )) {
                s.label(format!("SLO {t} ms"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red));
            }
        }
        let _ = chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperLeft)
            .draw();
        let _ = root.present();
    }
    svg
}

fn svg_fallback(msg: &str) -> String {
    format!("<p><em>{}</em></p>", esc(msg))
}

/// Output tokens/s per GPU against p99 TTFT: every point, the points that meet `[slo]` in
/// green, the Pareto front (most throughput per GPU for a latency) as a line, the TTFT target
/// as a vertical line.
fn pareto_chart(vs: &[PointVerdict], (q, target): (u32, Option<f64>)) -> String {
    let pts: Vec<(f64, f64, bool, String)> = vs
        .iter()
        .filter_map(|v| {
            Some((
                mean(&v.seeds, |r| pick(r, "ttft", q))?,
                mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)?,
                v.meets_slo,
                short_label(&v.values),
            ))
        })
        .collect();
    if pts.is_empty() {
        return svg_fallback("no point finished a request");
    }
    let mut sorted = pts.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut front = Vec::new();
    let mut front_labels = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for (x, y, _, l) in &sorted {
        if *y > best {
            front.push((*x, *y));
            front_labels.push(((*x, *y), l.clone()));
            best = *y;
        }
    }
    // A log latency axis: the points that miss an SLO often sit 100× past it, and a linear
    // axis would squeeze the front (the interesting part) against zero.
    let xs = pts.iter().map(|p| p.0).chain(target).filter(|x| *x > 0.0);
    let xmin = 10f64.powf(xs.clone().fold(f64::INFINITY, f64::min).log10().floor());
    let xmax = 10f64.powf(xs.fold(1.0, f64::max).log10().ceil());
    let xmin = if xmin.is_finite() && xmin < xmax {
        xmin
    } else {
        xmax / 10.0
    };
    let ymax = nice_max(pts.iter().map(|p| p.1).fold(0.0, f64::max));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                format!("output tokens/s per GPU vs p{q} TTFT (Pareto front)"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
        else {
            return svg_fallback("no data");
        };
        let _ = chart
            .configure_mesh()
            .x_label_formatter(&|x| axis_ms(*x))
            .x_desc(format!(
                "p{q} TTFT, ms (log; mean over seeds, finished requests)"
            ))
            .y_desc("output tokens/s per GPU")
            .draw();
        let (green, grey) = (MEETS, MISSES);
        let _ = chart.draw_series(pts.iter().map(|(x, y, ok, _)| {
            Circle::new((*x, *y), 4, if *ok { green } else { grey }.filled())
        }));
        // The front's points are the ones worth naming.
        for (p, l) in &front_labels {
            let _ = chart.draw_series(std::iter::once(
                EmptyElement::at(*p) + Text::new(l.clone(), (6, -14), ("sans-serif", 11)),
            ));
        }
        if let Ok(s) = chart.draw_series(LineSeries::new(front, COLORS[0].stroke_width(2))) {
            s.label("Pareto front").legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], COLORS[0].stroke_width(2))
            });
        }
        if let Some(t) = target {
            let red = RGBColor(200, 0, 0);
            if let Ok(s) = chart.draw_series(LineSeries::new(
                vec![(t, 0.0), (t, ymax)],
                red.stroke_width(1),
            )) {
                s.label(format!("SLO p{q} TTFT {t} ms"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red));
            }
        }
        let _ = chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperRight)
            .draw();
        let _ = root.present();
    }
    svg
}

/// What a plan adds to its report: the answer and where the point sits.
pub struct PlanContext<'a> {
    /// `plan.json`.
    pub answer: &'a PlanAnswer,
    /// GPUs per node (for idle GPUs in words).
    pub gpus_per_node: u32,
    /// The answer's nodes and idle GPUs, as `launch.txt` states them (`launch::nodes_comment`).
    pub placement: Option<String>,
}

/// A log axis' tick in ms: `100`, `2k`, `1.5M`.
fn axis_ms(x: f64) -> String {
    let (v, unit) = if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let t = format!("{v:.1}");
    format!("{}{unit}", t.trim_end_matches(".0"))
}

/// The percentile a latency chart shows for `metric`: that of the highest `[slo]` target
/// set (p99 when none), and the target.
fn target_of(slo: &crate::config::Slo, metric: &str) -> (u32, Option<f64>) {
    let pct = if metric == "ttft" {
        &slo.ttft_pct_ms
    } else {
        &slo.tpot_pct_ms
    };
    for k in (0..3).rev() {
        if let Some(t) = pct[k] {
            return (crate::config::SLO_PERCENTILES[k], Some(t));
        }
    }
    (99, None)
}

/// A row's latency figure at a percentile.
fn pick(r: &SweepRow, metric: &str, q: u32) -> Option<f64> {
    match (metric, q) {
        ("ttft", 50) => r.ttft_p50_ms,
        ("ttft", 90) => r.ttft_p90_ms,
        ("ttft", _) => r.ttft_p99_ms,
        (_, 50) => r.tpot_p50_ms,
        (_, 90) => r.tpot_p90_ms,
        _ => r.tpot_p99_ms,
    }
}

/// The `[slo]` targets in words: `ttft_p99_ms ≤ 2000 ms, tpot_p99_ms ≤ 100 ms`.
fn slo_text(slo: &crate::config::Slo) -> String {
    let mut out = Vec::new();
    for (metric, pct) in [("ttft", &slo.ttft_pct_ms), ("tpot", &slo.tpot_pct_ms)] {
        for (k, t) in pct.iter().enumerate() {
            if let Some(t) = t {
                out.push(format!(
                    "{metric}_p{}_ms ≤ {} ms",
                    crate::config::SLO_PERCENTILES[k],
                    fmt_ms(*t)
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

/// The binding pools of a row's `bottlenecks` (`prefill:compute decode:none` → `prefill
/// (compute)`), or `None` when no pool binds.
fn binding(r: &SweepRow) -> Option<String> {
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
fn off_trend(vs: &[PointVerdict]) -> Vec<(&PointVerdict, &PointVerdict)> {
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

/// Every point in cost order (cheapest at the top), its worst seed's latency at the target's
/// percentile on a log axis, green when it meets `[slo]`, grey when it misses, hollow when
/// its run stopped early (a figure of the requests up to the stop), a red ring when it is
/// against the trend ([`off_trend`]). Each row is labelled with its point.
fn ladder_chart(
    order: &[&PointVerdict],
    metric: &str,
    slo: &crate::config::Slo,
    outliers: &[usize],
) -> String {
    let (q, target) = target_of(slo, metric);
    let n = order.len();
    if n == 0 {
        return svg_fallback("no point ran");
    }
    let worst = |v: &PointVerdict| {
        v.seeds
            .iter()
            .filter_map(|r| pick(r, metric, q))
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    let xs: Vec<f64> = order
        .iter()
        .filter_map(|v| worst(v))
        .chain(target)
        .filter(|x| *x > 0.0)
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(0.0, f64::max);
    let xmin = if lo.is_finite() {
        10f64.powf(lo.log10().floor())
    } else {
        0.1
    };
    // Room right of the target for its label.
    let xmax = 10f64.powf(
        hi.max(xmin * 10.0)
            .max(target.unwrap_or(0.0) * 2.0)
            .log10()
            .ceil(),
    );
    let labels: Vec<String> = order
        .iter()
        .map(|v| {
            format!(
                "{}  ({} GPUs)",
                short_label(&v.values),
                v.billed_gpus
                    .or(v.gpus)
                    .map_or("—".into(), |g| g.to_string())
            )
        })
        .collect();
    let height = 90 + 18 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (940, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                format!(
                    "p{q} {} of every point, cheapest at the top (worst seed; ms, log)",
                    metric.to_uppercase()
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(330)
            .build_cartesian_2d((xmin..xmax).log_scale(), (0..n as i32 - 1).into_segmented())
        else {
            return svg_fallback("no data");
        };
        // Row `i` from the top is segment `n - 1 - i`.
        let row_of = |s: &SegmentValue<i32>| match s {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                let k = n as i32 - 1 - *i;
                usize::try_from(k).ok().and_then(|k| labels.get(k).cloned())
            }
            SegmentValue::Last => None,
        };
        let _ = chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n + 1)
            .y_label_formatter(&|s| row_of(s).unwrap_or_default())
            .y_label_style(("sans-serif", 12))
            .x_labels(8)
            .x_label_formatter(&|x| axis_ms(*x))
            .x_desc(format!(
                "p{q} {}, ms (finished requests; log)",
                metric.to_uppercase()
            ))
            .draw();
        let y = |i: usize| SegmentValue::CenterOf(n as i32 - 1 - i as i32);
        let red = RGBColor(200, 0, 0);
        for (i, v) in order.iter().enumerate() {
            let c = if v.meets_slo { MEETS } else { MISSES };
            let stopped = v.seeds.iter().any(|r| r.stopped_early_at_s.is_some());
            match worst(v) {
                Some(x) => {
                    let x = x.max(xmin);
                    let style = if stopped {
                        c.stroke_width(2)
                    } else {
                        c.filled()
                    };
                    let _ = chart.draw_series(std::iter::once(Circle::new((x, y(i)), 5, style)));
                    if outliers.contains(&v.point) {
                        let _ = chart.draw_series(std::iter::once(Circle::new(
                            (x, y(i)),
                            8,
                            red.stroke_width(2),
                        )));
                    }
                }
                None => {
                    // No request finished: the figure is off the chart to the right.
                    let _ = chart.draw_series(std::iter::once(Text::new(
                        "▶ none finished",
                        (xmax / 3.0, y(i)),
                        ("sans-serif", 11).into_font().color(&c),
                    )));
                }
            }
        }
        if let Some(t) = target {
            let _ = chart.draw_series(std::iter::once(PathElement::new(
                vec![
                    (t, SegmentValue::Exact(0)),
                    (t, SegmentValue::Exact(n as i32)),
                ],
                red.stroke_width(1),
            )));
            let _ = chart.draw_series(std::iter::once(Text::new(
                format!("target {} ms", fmt_ms(t)),
                (t * 1.05, SegmentValue::Exact(n as i32)),
                ("sans-serif", 12).into_font().color(&red),
            )));
        }
        let _ = root.present();
    }
    svg
}

/// Which prefill × decode instance counts meet `[slo]` (with some value of the other keys):
/// green with the cheapest such point's label and GPUs; grey naming what the cheapest point
/// missed; blank for splits the plan's search never ran. `None` when there are not two
/// splits to compare.
fn split_map(vs: &[PointVerdict]) -> Option<String> {
    let mut cells: BTreeMap<(u32, u32), Vec<&PointVerdict>> = BTreeMap::new();
    for v in vs {
        let r = &v.seeds[0];
        let (Some(p), Some(d)) = (r.prefill_instances, r.decode_instances) else {
            continue;
        };
        if p == 0 || d == 0 {
            continue;
        }
        cells.entry((p, d)).or_default().push(v);
    }
    let ps: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.0).collect();
    let ds: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.1).collect();
    // One row or one column of splits compares nothing (and has no cell to fill).
    if ps.len() < 2 || ds.len() < 2 {
        return None;
    }
    let (ps, ds): (Vec<u32>, Vec<u32>) = (ps.into_iter().collect(), ds.into_iter().collect());
    let billed = |v: &PointVerdict| v.billed_gpus.or(v.gpus).unwrap_or(u32::MAX);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                "meets [slo]? by prefill × decode instances (cheapest point of each split)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            // A segmented i32 range has one segment per value of `0..=n-1`.
            .build_cartesian_2d(
                (0..ps.len() as i32 - 1).into_segmented(),
                (0..ds.len() as i32 - 1).into_segmented(),
            )
        else {
            return None;
        };
        let name = |v: &[u32], s: &SegmentValue<i32>| match s {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                v.get(*i as usize).map_or(String::new(), |x| x.to_string())
            }
            SegmentValue::Last => String::new(),
        };
        let _ = chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("prefill instances")
            .y_desc("decode instances")
            .x_labels(ps.len() + 1)
            .y_labels(ds.len() + 1)
            .x_label_formatter(&|s| name(&ps, s))
            .y_label_formatter(&|s| name(&ds, s))
            .draw();
        let green = RGBColor(190, 228, 190);
        let grey = RGBColor(225, 225, 225);
        for (i, p) in ps.iter().enumerate() {
            for (j, d) in ds.iter().enumerate() {
                let Some(points) = cells.get(&(*p, *d)) else {
                    continue;
                };
                let meeting = points
                    .iter()
                    .filter(|v| v.meets_slo)
                    .min_by_key(|v| (billed(v), v.point));
                let cheapest = points
                    .iter()
                    .min_by_key(|v| (billed(v), v.point))
                    .expect("a cell has a point");
                let (fill, lines) = match meeting {
                    Some(v) => (
                        green,
                        vec![
                            "meets".to_string(),
                            format!("{} GPUs", billed(v)),
                            short_label(&v.values),
                        ],
                    ),
                    None => (
                        grey,
                        vec![
                            "misses".to_string(),
                            cheapest.seeds[0]
                                .slo_missed
                                .clone()
                                .unwrap_or_else(|| "[slo]".into()),
                            binding(&cheapest.seeds[0]).unwrap_or_default(),
                        ],
                    ),
                };
                let (x, y) = (i as i32, j as i32);
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                    ],
                    fill.filled(),
                )));
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                    ],
                    WHITE.stroke_width(2),
                )));
                for (k, line) in lines.into_iter().enumerate() {
                    let _ = chart.draw_series(std::iter::once(
                        EmptyElement::at((SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)))
                            + Text::new(line, (-50, -20 + 14 * k as i32), ("sans-serif", 11)),
                    ));
                }
            }
        }
        let _ = root.present();
    }
    Some(svg)
}

/// A varied key as a table heading that may break at its dots.
fn heading(key: &str) -> String {
    esc(key).replace('.', ".<wbr>")
}

/// The plan's answer: the point, its placement and cost, the targets it meets, the files to
/// deploy it, and how the search went.
fn plan_answer_html(vs: &[PointVerdict], m: &Manifest, p: &PlanContext) -> String {
    let a = p.answer;
    let mut h = String::new();
    let search = format!(
        "{} {} runs of the full grid's {} ({} of {} points){}.",
        if a.search == "full_grid" {
            "Every point ran:"
        } else {
            "Found cheapest first, stopping at the answer:"
        },
        a.runs,
        a.grid_runs,
        a.points,
        a.grid_points,
        if a.runs_stopped_early > 0 {
            format!(
                "; {} runs stopped as soon as [slo] could no longer be met (their verdict is the whole run's)",
                a.runs_stopped_early
            )
        } else {
            String::new()
        }
    );
    match &a.best {
        None => {
            let _ = writeln!(
                h,
                "<p class=\"answer bad\"><b>No grid point meets [slo] at {} req/s on every seed</b> ({}). {search}</p>",
                a.rate_per_s,
                esc(&slo_text(&m.slo))
            );
        }
        Some(b) => {
            let vals: Vec<String> = b
                .values
                .iter()
                .map(|(k, v)| format!("<code>{}={}</code>", esc(k), esc(v)))
                .collect();
            let idle = b.idle_gpus.unwrap_or(0);
            let billing = match a.billing.as_str() {
                "node" => format!(
                    "billed per node: {} GPUs ({} nodes × {})",
                    b.billed_gpus.unwrap_or(0),
                    b.nodes.unwrap_or(0),
                    p.gpus_per_node
                ),
                _ => format!(
                    "billed per GPU{}",
                    if idle > 0 {
                        " (set hardware.billing = \"node\" if whole nodes are rented)"
                    } else {
                        ""
                    }
                ),
            };
            let cost = match (
                b.usd_per_hour,
                mean(&b.seeds, |r| r.usd_per_1m_output_tokens),
            ) {
                (Some(h), Some(t)) => {
                    format!(" — <b>${h:.2}/hour</b>, ${t:.2} per 1M output tokens")
                }
                (Some(h), None) => format!(" — <b>${h:.2}/hour</b>"),
                _ => String::new(),
            };
            let worst = |metric: &str| {
                let (q, t) = target_of(&m.slo, metric);
                t.and_then(|t| {
                    let w = b
                        .seeds
                        .iter()
                        .filter_map(|r| pick(r, metric, q))
                        .fold(f64::NEG_INFINITY, f64::max);
                    w.is_finite().then(|| {
                        format!(
                            "p{q} {} {} ms (target {})",
                            metric.to_uppercase(),
                            fmt_ms(w),
                            fmt_ms(t)
                        )
                    })
                })
            };
            let reached: Vec<String> = ["ttft", "tpot"].iter().filter_map(|m| worst(m)).collect();
            let files: Vec<String> = [&a.best_toml, &a.launch, &a.kubernetes]
                .iter()
                .filter_map(|f| f.as_ref())
                .map(|f| format!("<a href=\"{0}\"><code>{0}</code></a>", esc(f)))
                .collect();
            let _ = writeln!(
                h,
                "<p class=\"answer\"><b>{}</b> meets [slo] on all {} seeds at {} req/s: {}<br>{} GPUs on {} node{}, {} idle; {billing}{cost}.<br>[slo]: {}; worst seed: {}.<br>Deploy it: {}.</p>",
                esc(&short_label(&b.values)),
                a.seeds.len(),
                a.rate_per_s,
                vals.join(" "),
                b.gpus.unwrap_or(0),
                b.nodes.unwrap_or(0),
                if b.nodes == Some(1) { "" } else { "s" },
                idle,
                esc(&slo_text(&m.slo)),
                if reached.is_empty() {
                    "—".to_string()
                } else {
                    esc(&reached.join(", "))
                },
                files.join(", ")
            );
            if let Some(pl) = &p.placement {
                let _ = writeln!(h, "<pre class=\"place\">{}</pre>", esc(pl.trim_end()));
            }
            let _ = writeln!(h, "<p>{search}</p>");
        }
    }
    let _ = vs;
    h
}

/// A sweep's answer line: the cheapest point meeting `[slo]` on every seed.
fn sweep_answer_html(vs: &[PointVerdict], m: &Manifest) -> String {
    if !m.slo.any() {
        return "<p class=\"answer\">The scenario sets no <code>[slo]</code> target: no verdict (add <code>ttft_p99_ms</code>, <code>tpot_p99_ms</code>, … to get one).</p>\n".into();
    }
    let ok = vs.iter().filter(|v| v.meets_slo).count();
    match cheapest(vs) {
        None => format!(
            "<p class=\"answer bad\"><b>No grid point meets [slo] on every seed</b> ({}; {} points, {} seeds).</p>\n",
            esc(&slo_text(&m.slo)),
            vs.len(),
            m.grid.seeds.len()
        ),
        Some(b) => {
            let cost = b
                .usd_per_hour
                .map_or(String::new(), |c| format!(", ${c:.2}/hour"));
            format!(
                "<p class=\"answer\"><b>Cheapest point meeting [slo] on all {} seeds:</b> {} — {} GPUs on {} nodes{cost}. {ok} of {} points meet it ({}).</p>\n",
                m.grid.seeds.len(),
                esc(&short_label(&b.values)),
                b.gpus.unwrap_or(0),
                b.nodes.unwrap_or(0),
                vs.len(),
                esc(&slo_text(&m.slo))
            )
        }
    }
}

/// `index.html` of a whole sweep (its rows `(row index, row)`, in row order: every row of the
/// grid, or those a plan's search ran); a plan's report with `plan`.
pub fn index_html(m: &Manifest, rows: &[(usize, SweepRow)], plan: Option<&PlanContext>) -> String {
    let vs = verdicts(&m.grid, rows);
    let title = match plan {
        Some(p) => format!(
            "pdsim plan: the cheapest deployment for {} req/s — {}",
            p.answer.rate_per_s, m.scenario
        ),
        None => format!("pdsim sweep: {}", m.scenario),
    };
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;max-width:980px;margin:2rem auto;color:#222}}.answer{{font-size:1.05rem;line-height:1.5;padding:.8rem;background:#eef7ee;border-left:4px solid #2ca02c}}.bad{{background:#fbeeee;border-color:#d62728}}pre.place{{background:#f6f6f6;padding:.5rem;font-size:.8rem;white-space:pre-wrap}}.scroll{{overflow-x:auto;max-width:100%;border:1px solid #ddd}}table{{border-collapse:collapse;font-size:.8rem}}td,th{{border:1px solid #ccc;padding:2px 5px;text-align:right;vertical-align:top;white-space:nowrap}}th{{background:#f3f3f3;position:sticky;top:0;max-width:9rem}}td.why,td.lab{{text-align:left}}td.why{{white-space:normal;min-width:16rem}}th{{white-space:normal}}tr.met td{{background:#f0f8f0}}tr.out td{{background:#fdf0f0}}figure{{margin:1rem 0}}li{{margin:.3rem 0}}</style></head><body>\n<h1>{t}</h1>",
        t = esc(&title)
    );
    h += &match plan {
        Some(p) => plan_answer_html(&vs, m, p),
        None => sweep_answer_html(&vs, m),
    };
    let _ = writeln!(
        h,
        "<p>{} points × {} seeds from <code>{}</code>; varied: {}. A point meets [slo] when every seed does (<code>metrics::slo</code>: percentile targets over arrived requests, a request that never completed counted infinitely late). Latency figures are over finished requests; rates and throughput over the arrival window. <code>sweep.csv</code> has every row.</p>",
        vs.len(),
        m.grid.seeds.len(),
        esc(&m.scenario),
        m.grid
            .axes
            .iter()
            .map(|a| format!("<code>{}</code>", esc(&a.key)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Cost order: the order a plan searches in and picks by.
    let costs: Vec<_> = vs.iter().filter_map(PointVerdict::cost).collect();
    let priced = costs.iter().all(|c| c.usd_per_hour.is_some());
    let mut order: Vec<&PointVerdict> = vs.iter().collect();
    order.sort_by_key(|v| (v.cost().map(|c| c.key(priced)), v.point));
    let outliers = off_trend(&vs);
    let marked: Vec<usize> = outliers.iter().map(|o| o.0.point).collect();
    let by_rate = plan.is_none() && rate_axis(&m.grid).is_some();
    for metric in ["ttft", "tpot"] {
        h += "<figure>";
        h += &if by_rate {
            latency_chart(&vs, &m.grid, metric, target_of(&m.slo, metric))
        } else {
            ladder_chart(&order, metric, &m.slo, &marked)
        };
        h += "</figure>\n";
    }
    if !by_rate {
        h += "<p>Filled: the run went to its end; hollow: it stopped once [slo] was lost (its figure covers the requests up to then); green meets [slo], grey misses it; a red ring: against the trend (below).</p>\n";
    }
    h += "<figure>";
    h += &pareto_chart(&vs, target_of(&m.slo, "ttft"));
    h += "</figure>\n";
    if let Some(svg) = split_map(&vs) {
        h += "<figure>";
        h += &svg;
        h += "</figure>\n";
    }
    if !outliers.is_empty() {
        h += "<h2>Against the trend</h2>\n<p>These points miss [slo] although a point at the same rate billing fewer GPUs meets it: the extra GPUs sit where they do not help.</p>\n<ul>\n";
        const SHOWN: usize = 12;
        for (v, w) in outliers.iter().take(SHOWN) {
            let _ = writeln!(
                h,
                "<li><b>{}</b> ({} GPUs) — {}; <b>{}</b> ({} GPUs) meets it.</li>",
                esc(&short_label(&v.values)),
                v.billed_gpus.or(v.gpus).unwrap_or(0),
                esc(&why_missed(v)),
                esc(&short_label(&w.values)),
                w.billed_gpus.or(w.gpus).unwrap_or(0)
            );
        }
        if outliers.len() > SHOWN {
            let _ = writeln!(
                h,
                "<li>… and {} more, shaded red in the table.</li>",
                outliers.len() - SHOWN
            );
        }
        h += "</ul>\n";
    }
    let _ = write!(
        h,
        "<h2>Points</h2>\n<p>In cost order (price, billed GPUs, then the most GPUs used); # is the point's place in grid order (<code>sweep.csv</code> has its keys: {}). Labels: <code>3P·tp4</code> is 3 prefill instances of TP 4, <code>2D</code> 2 decode instances; hover a label for every key. * the run stopped once [slo] was lost: its figures cover the requests up to then.</p>\n<div class=\"scroll\"><table><tr><th>#</th><th>point</th>",
        m.grid
            .axes
            .iter()
            .map(|a| format!("<code>{}</code>", heading(&a.key)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let (tq, _) = target_of(&m.slo, "ttft");
    let (pq, _) = target_of(&m.slo, "tpot");
    let _ = writeln!(
        h,
        "<th>GPUs</th><th>nodes</th><th>idle GPUs</th><th>billed GPUs</th><th>p{tq} TTFT ms (worst seed)</th><th>p{pq} TPOT ms (worst seed)</th><th>attain&shy;ment (min)</th><th>out tok/s per GPU</th><th>$/hour</th><th>$ per 1M out tokens</th><th>meets [slo]</th><th>why it misses</th></tr>"
    );
    let f = |v: Option<f64>| v.map_or("—".to_string(), fmt_ms);
    let worst = |v: &PointVerdict, metric: &str, q: u32| {
        v.seeds
            .iter()
            .filter_map(|r| pick(r, metric, q))
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    for v in &order {
        let r = &v.seeds[0];
        let class = if v.meets_slo {
            " class=\"met\""
        } else if marked.contains(&v.point) {
            " class=\"out\""
        } else {
            ""
        };
        let _ = write!(
            h,
            "<tr{class}><td>{}</td><td class=\"lab\" title=\"{}\">{}</td>",
            v.point,
            esc(&v
                .values
                .iter()
                .map(|(k, x)| format!("{k}={x}"))
                .collect::<Vec<_>>()
                .join(" ")),
            esc(&short_label(&v.values))
        );
        let int = |x: Option<u32>| x.map_or("—".into(), |g| g.to_string());
        let attain = v
            .seeds
            .iter()
            .filter_map(|r| r.slo_attainment)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let _ = writeln!(
            h,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
            int(v.gpus),
            int(v.nodes),
            int(v.idle_gpus),
            int(v.billed_gpus),
            f(worst(v, "ttft", tq)),
            if v.seeds.iter().any(|r| r.stopped_early_at_s.is_some()) {
                "*"
            } else {
                ""
            },
            f(worst(v, "tpot", pq)),
            attain.map_or("—".into(), |a| format!("{:.1} %", 100.0 * a)),
            mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)
                .map_or("—".into(), |g| format!("{g:.1}")),
            v.usd_per_hour.map_or("—".into(), |c| format!("{c:.2}")),
            mean(&v.seeds, |r| r.usd_per_1m_output_tokens)
                .map_or("—".into(), |c| format!("{c:.2}")),
            if v.meets_slo { "yes" } else { "no" },
            if v.meets_slo {
                esc(&binding(r).map_or(String::new(), |b| format!("binds: {b}")))
            } else {
                esc(&why_missed(v))
            }
        );
    }
    h += "</table></div>\n</body></html>\n";
    h
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
    }
}
