//! The answer that opens the report: a plan's chosen point (its placement, cost, the targets it
//! meets and the files to deploy it) or a sweep's cheapest point meeting `[slo]`.

use std::fmt::Write as _;

use super::figures::{esc, mean, pick, short_label, slo_text, target_of};
use crate::metrics::slo::fmt_ms;
use crate::plan::Manifest;
use crate::plan::search::{PlanAnswer, PointVerdict, cheapest};

/// What a plan adds to its report: the answer and where the point sits.
pub struct PlanContext<'a> {
    /// `plan.json`.
    pub answer: &'a PlanAnswer,
    /// GPUs per node (for idle GPUs in words).
    pub gpus_per_node: u32,
    /// The answer's nodes and idle GPUs, as `launch.txt` states them (`launch::nodes_comment`).
    pub placement: Option<String>,
}

/// The plan's answer: the point, its placement and cost, the targets it meets, the files to
/// deploy it, and how the search went.
pub(super) fn plan_answer_html(vs: &[PointVerdict], m: &Manifest, p: &PlanContext) -> String {
    let a = p.answer;
    let _ = vs;
    let search = search_text(a);
    let Some(b) = &a.best else {
        let mut h = String::new();
        let _ = writeln!(
            h,
            "<p class=\"answer bad\"><b>No grid point meets [slo] at {} req/s on every seed</b> ({}). {search}</p>",
            a.rate_per_s,
            esc(&slo_text(&m.slo))
        );
        return h;
    };
    let mut h = String::new();
    let vals: Vec<String> = b
        .values
        .iter()
        .map(|(k, v)| format!("<code>{}={}</code>", esc(k), esc(v)))
        .collect();
    let idle = b.idle_gpus.unwrap_or(0);
    let (billing, cost) = price_text(a, b, p.gpus_per_node);
    let reached = reached(b, &m.slo);
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
    h
}

/// How the plan's search went, in a sentence: cheapest first or the whole grid, its runs
/// against the grid's, and the runs stopped once `[slo]` was lost.
fn search_text(a: &PlanAnswer) -> String {
    format!(
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
    )
}

/// What the chosen point `b` is billed for (per node, `gpus_per_node` each, or per GPU) and
/// its price (USD/hour and per 1M output tokens; empty without prices).
fn price_text(a: &PlanAnswer, b: &PointVerdict, gpus_per_node: u32) -> (String, String) {
    let idle = b.idle_gpus.unwrap_or(0);
    let billing = match a.billing.as_str() {
        "node" => format!(
            "billed per node: {} GPUs ({} nodes × {})",
            b.billed_gpus.unwrap_or(0),
            b.nodes.unwrap_or(0),
            gpus_per_node
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
    (billing, cost)
}

/// The chosen point's worst seed against each latency target `slo` sets (TTFT, then TPOT):
/// `p99 TTFT 812 ms (target 2000)`.
fn reached(b: &PointVerdict, slo: &crate::config::Slo) -> Vec<String> {
    let worst = |metric: &str| {
        let (q, t) = target_of(slo, metric);
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
    ["ttft", "tpot"].iter().filter_map(|m| worst(m)).collect()
}

/// A sweep's answer line: the cheapest point meeting `[slo]` on every seed.
pub(super) fn sweep_answer_html(vs: &[PointVerdict], m: &Manifest) -> String {
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
