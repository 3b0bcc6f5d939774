//! The report of a sweep or a plan, `index.html`. A plan's opens with its answer (the point,
//! its nodes and idle GPUs, what is billed, the deployment files, how the search went); then
//! every point in cost order with its latency against the `[slo]` target, coloured by the one
//! SLO verdict (`metrics::slo`, each row's `slo_met`) — with a varied rate, latency against
//! load instead; throughput per GPU against TTFT with the Pareto front; which prefill ×
//! decode splits meet `[slo]`; the points that miss it against the trend, with the pool that
//! binds; and every point in a table that scrolls sideways rather than cutting columns off.
//! Drawn from the rows alone (so a merged sweep draws the same bytes), as inline plotters SVG:
//! the page opens from disk with no script and no external URL.
//!
//! The page is put together here; the charts are drawn in `charts.rs`, the answer at the top
//! is written in `answer.rs`, and both read the rows through `figures.rs`.

use std::fmt::Write as _;

use super::search::{PointVerdict, verdicts};
use super::{Manifest, SweepRow};
use crate::metrics::slo::fmt_ms;

mod answer;
mod charts;
mod figures;

pub use answer::{PlanContext, pd_or_not};
pub use figures::{short_label, why_missed};

use figures::{
    binding, esc, mean, metric_label, metrics_of, off_trend, rate_axis, target_of, worst,
};

/// A varied key as a table heading that may break at its dots.
fn heading(key: &str) -> String {
    esc(key).replace('.', ".<wbr>")
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
    let mut h = page_head(&title);
    h += &match plan {
        Some(p) => answer::plan_answer_html(&vs, m, p),
        None => answer::sweep_answer_html(&vs, m),
    };
    let _ = writeln!(
        h,
        "<p>{} points × {} seeds from <code>{}</code>; varied: {}. A point meets [slo] when every seed does (<code>metrics::slo</code>: TTFT, TPOT and TBT percentile targets over arrived requests, a request that never completed counted infinitely late; ITL targets over every inter-token gap of every request). Latency figures are over finished requests (ITL over every gap); rates and throughput over the arrival window. <code>sweep.csv</code> has every row.</p>",
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
    h += &figures_html(&vs, m, &order, &marked, by_rate);
    h += &outliers_html(&outliers);
    h += &points_table(m, &order, &marked);
    h += "</body></html>\n";
    h
}

/// The page up to its answer: the document head with the page's one stylesheet, and the title
/// `title` as its heading.
fn page_head(title: &str) -> String {
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;max-width:980px;margin:2rem auto;color:#222}}.answer{{font-size:1.05rem;line-height:1.5;padding:.8rem;background:#eef7ee;border-left:4px solid #2ca02c}}.bad{{background:#fbeeee;border-color:#d62728}}pre.place{{background:#f6f6f6;padding:.5rem;font-size:.8rem;white-space:pre-wrap}}.scroll{{overflow-x:auto;max-width:100%;border:1px solid #ddd}}table{{border-collapse:collapse;font-size:.8rem}}td,th{{border:1px solid #ccc;padding:2px 5px;text-align:right;vertical-align:top;white-space:nowrap}}th{{background:#f3f3f3;position:sticky;top:0;max-width:9rem}}td.why,td.lab{{text-align:left}}td.why{{white-space:normal;min-width:16rem}}th{{white-space:normal}}tr.met td{{background:#f0f8f0}}tr.out td{{background:#fdf0f0}}figure{{margin:1rem 0}}li{{margin:.3rem 0}}p.pd{{line-height:1.5;padding:.6rem .8rem;background:#eef2fb;border-left:4px solid #1f77b4}}</style></head><body>\n<h1>{t}</h1>",
        t = esc(title)
    );
    h
}

/// The charts, each in a `<figure>`: latency against load when a sweep varies the rate, else
/// the ladder of every point in cost `order` (`marked`: the points against the trend); then
/// the Pareto chart and, when there are splits to compare, the split map.
fn figures_html(
    vs: &[PointVerdict],
    m: &Manifest,
    order: &[&PointVerdict],
    marked: &[usize],
    by_rate: bool,
) -> String {
    let mut h = String::new();
    for metric in metrics_of(&m.slo) {
        h += "<figure>";
        h += &if by_rate {
            charts::latency_chart(vs, &m.grid, metric, target_of(&m.slo, metric))
        } else {
            charts::ladder_chart(order, metric, &m.slo, marked)
        };
        h += "</figure>\n";
    }
    if !by_rate {
        h += "<p>Filled: the run went to its end; hollow: it stopped once [slo] was lost (its figure covers the requests up to then); green meets [slo], grey misses it; a red ring: against the trend (below).</p>\n";
    }
    h += "<figure>";
    h += &charts::pareto_chart(vs, target_of(&m.slo, "ttft"));
    h += "</figure>\n";
    if let Some(svg) = charts::split_map(vs) {
        h += "<figure>";
        h += &svg;
        h += "</figure>\n";
    }
    h
}

/// The section on the points against the trend ([`off_trend`]'s pairs), the first dozen named
/// with the cheaper point that meets `[slo]`; empty when there are none.
fn outliers_html(outliers: &[(&PointVerdict, &PointVerdict)]) -> String {
    let mut h = String::new();
    if outliers.is_empty() {
        return h;
    }
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
    h
}

/// The table of every point in cost `order`, met points shaded green and `marked` ones (against
/// the trend) red.
fn points_table(m: &Manifest, order: &[&PointVerdict], marked: &[usize]) -> String {
    let mut h = String::new();
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
    let shown: Vec<(&str, u32)> = metrics_of(&m.slo)
        .into_iter()
        .map(|metric| (metric, target_of(&m.slo, metric).0))
        .collect();
    let latency_heads: String = shown
        .iter()
        .map(|(metric, q)| format!("<th>p{q} {} ms (worst seed)</th>", metric_label(metric)))
        .collect();
    let _ = writeln!(
        h,
        "<th>GPUs</th><th>nodes</th><th>idle GPUs</th><th>billed GPUs</th>{latency_heads}<th>attain&shy;ment (min)</th><th>out tok/s per GPU</th><th>$/hour</th><th>$ per 1M out tokens</th><th>meets [slo]</th><th>why it misses</th></tr>"
    );
    for v in order {
        h += &point_row(v, marked, &shown);
    }
    h += "</table></div>\n";
    h
}

/// One point's row of [`points_table`]: its worst seed's latency of each `shown` metric at its
/// percentile (the first, TTFT, starred when a run stopped early), its least attainment, mean
/// throughput and cost, and its verdict.
fn point_row(v: &PointVerdict, marked: &[usize], shown: &[(&str, u32)]) -> String {
    let mut h = String::new();
    let f = |v: Option<f64>| v.map_or("—".to_string(), fmt_ms);
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
    let stopped = if v.seeds.iter().any(|r| r.stopped_early_at_s.is_some()) {
        "*"
    } else {
        ""
    };
    let latencies: String = shown
        .iter()
        .enumerate()
        .map(|(i, &(metric, q))| {
            format!(
                "<td>{}{}</td>",
                f(worst(v, metric, q)),
                if i == 0 { stopped } else { "" }
            )
        })
        .collect();
    let _ = writeln!(
        h,
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td>{latencies}<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"why\">{}</td></tr>",
        int(v.gpus),
        int(v.nodes),
        int(v.idle_gpus),
        int(v.billed_gpus),
        attain.map_or("—".into(), |a| format!("{:.1} %", 100.0 * a)),
        mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)
            .map_or("—".into(), |g| format!("{g:.1}")),
        v.usd_per_hour.map_or("—".into(), |c| format!("{c:.2}")),
        mean(&v.seeds, |r| r.usd_per_1m_output_tokens).map_or("—".into(), |c| format!("{c:.2}")),
        if v.meets_slo { "yes" } else { "no" },
        if v.meets_slo {
            esc(&binding(r).map_or(String::new(), |b| format!("binds: {b}")))
        } else {
            esc(&why_missed(v))
        }
    );
    h
}
