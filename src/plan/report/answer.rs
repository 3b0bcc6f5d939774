//! The answer that opens the report: a plan's chosen point (its placement, cost, the targets it
//! meets and the files to deploy it) or a sweep's cheapest point meeting `[slo]`.

use std::fmt::Write as _;

use super::figures::{binding, esc, mean, pick, short_label, slo_text, target_of};
use crate::metrics::slo::fmt_ms;
use crate::plan::Manifest;
use crate::plan::search::{Arch, PdOrNot, PlanAnswer, PointVerdict, cheapest, of_arch};

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
    let files: Vec<String> = [&a.best_toml, &a.launch, &a.kubernetes, &a.slurm]
        .iter()
        .filter_map(|f| f.as_ref())
        .map(|f| format!("<a href=\"{0}\"><code>{0}</code></a>", esc(f)))
        .collect();
    let _ = writeln!(
        h,
        "<p class=\"answer\"><b>{}</b> meets [slo] on {} at {} req/s: {}<br>{} GPUs on {} node{}, {} idle; {billing}{cost}.<br>[slo]: {}; worst seed: {}.<br>Deploy it: {}.</p>",
        esc(&short_label(&b.values)),
        match &a.trace_seeds {
            Some(t) if !t.differ =>
                format!("one trace's run ({} seeds, the same run)", a.seeds.len()),
            _ => format!("all {} seeds", a.seeds.len()),
        },
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
    if let Some(pd) = &a.pd_or_not {
        let _ = writeln!(h, "<p class=\"pd\">{}</p>", pd_html(pd));
    }
    if let Some(t) = &a.trace_seeds {
        let _ = writeln!(h, "<p class=\"pd\">{}.</p>", esc(&t.note));
    }
    let _ = writeln!(
        h,
        "<p class=\"pd\"><b>What it rests on:</b> {}.</p>",
        code_spans(&esc(&a.grounding.note))
    );
    let _ = writeln!(h, "<p>{search}</p>");
    h
}

/// Escaped text with its `backticked` spans as `<code>`.
fn code_spans(escaped: &str) -> String {
    escaped
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                format!("<code>{part}</code>")
            } else {
                part.to_string()
            }
        })
        .collect()
}

/// The PD-or-not sentence as HTML: its opening (`PD or not: disaggregated.`) in bold.
fn pd_html(pd: &PdOrNot) -> String {
    match pd.why.split_once(". ") {
        Some((head, rest)) => format!("<b>{}.</b> {}", esc(head), esc(rest)),
        None => esc(&pd.why),
    }
}

/// What a point costs, as the search orders it: `$48.00/hour (24 GPUs billed)`, or the GPUs
/// billed without a price.
fn cost_words(v: &PointVerdict) -> String {
    let billed = v.billed_gpus.or(v.gpus).unwrap_or(0);
    let gpus = if billed == 1 { "GPU" } else { "GPUs" };
    match v.usd_per_hour {
        Some(u) => format!("${u:.2}/hour, {billed} {gpus} billed"),
        None => format!("{billed} {gpus} billed"),
    }
}

/// Which phase a missed target names, for a point of `arch`: `ttft_*` the prefill phase,
/// `tpot_*`, `itl_*`, `tbt_*` the decode phase, `attainment_min` the per-request thresholds
/// `slo` sets (their phases).
fn phase_of(key: &str, arch: Arch, slo: &crate::config::Slo) -> String {
    let prefill = match arch {
        Arch::Disaggregated => {
            "the prefill phase (time to first token: the prefill queue and forwards, then the KV handoff to decode)"
        }
        Arch::Colocated => {
            "the prefill phase (time to first token: prompts wait for the budget decoding leaves them in each forward)"
        }
    };
    let decode = match arch {
        Arch::Disaggregated => "the decode phase (inter-token gaps: decode steps and handoffs)",
        Arch::Colocated => {
            "the decode phase (inter-token gaps: a colocated server's decode steps wait behind its prefill forwards, or share them under enable_mixed_chunk)"
        }
    };
    let k = key.split('_').next().unwrap_or(key);
    match k {
        "ttft" => prefill.into(),
        "tpot" | "itl" | "tbt" => decode.into(),
        _ => {
            let th = slo.thresholds();
            let pre = th.ttft_ns.is_some();
            let dec = th.tpot_ns.is_some() || th.tbt_ns.is_some() || th.e2e_per_token_ns.is_some();
            match (pre, dec) {
                (true, false) => format!("attainment within ttft_ms: {prefill}"),
                (false, true) => format!("attainment within the per-request thresholds: {decode}"),
                _ => "attainment within the per-request thresholds (prefill and decode)".into(),
            }
        }
    }
}

/// Why point `v` of `arch` misses `[slo]`, naming the binding phase: `misses tbt_p99_ms —
/// the decode phase (…); binds: servers (compute)`.
fn why_phase(v: &PointVerdict, arch: Arch, slo: &crate::config::Slo) -> String {
    let Some(r) = v.seeds.iter().find(|r| r.slo_met != Some(true)) else {
        return "meets [slo]".into();
    };
    if let Some(e) = &r.error {
        return format!("is not a valid scenario ({e})");
    }
    let missed: Vec<&str> = r
        .slo_missed
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let mut phases: Vec<String> = Vec::new();
    for k in &missed {
        let p = phase_of(k, arch, slo);
        if !phases.contains(&p) {
            phases.push(p);
        }
    }
    let mut s = format!(
        "misses {} on seed {}",
        if missed.is_empty() {
            "[slo]".to_string()
        } else {
            missed.join(", ")
        },
        r.seed
    );
    if !phases.is_empty() {
        s += &format!(" — {}", phases.join("; "));
    }
    match binding(r) {
        Some(b) => s += &format!("; binds: {b}"),
        None => s += "; no pool reads as saturated",
    }
    s
}

/// PD or not, when the plan's points hold both kinds (`None` otherwise): which kind the
/// answer is, the other kind's cheapest point meeting `[slo]` and its price (or that none
/// does), and why — the other kind's points that cost no more than the answer all miss
/// `[slo]`, the dearest of them on the phase its missed targets name. `vs` are the points
/// that ran (a search runs each kind to its own answer: `search::cheapest_first`).
pub fn pd_or_not(vs: &[PointVerdict], slo: &crate::config::Slo) -> Option<PdOrNot> {
    let dis = of_arch(vs, Arch::Disaggregated);
    let col = of_arch(vs, Arch::Colocated);
    if dis.is_empty() || col.is_empty() {
        return None;
    }
    let priced = vs
        .iter()
        .filter_map(PointVerdict::cost)
        .all(|c| c.usd_per_hour.is_some());
    let key = |v: &PointVerdict| v.cost().map(|c| c.key(priced));
    // What is billed: the price (when every point has one), then the GPUs billed — the
    // order's first terms; the rest only break ties between equal bills.
    let bill = |v: &PointVerdict| key(v).map(|k| (k.0, k.1));
    let of = |a: Arch| if a == Arch::Disaggregated { &dis } else { &col };
    let best = |a: Arch| cheapest(of(a)).cloned();
    let (bd, bc) = (best(Arch::Disaggregated), best(Arch::Colocated));
    let answer = cheapest(vs).cloned();
    let label = |v: &PointVerdict| short_label(&v.values);
    // The dearest point of `a` that ran and missed, billed at most `limit`.
    let dearest_miss = |a: Arch, limit: Option<(u64, u32)>| {
        of(a)
            .iter()
            .filter(|v| !v.meets_slo && key(v).is_some())
            .filter(|v| limit.is_none_or(|l| bill(v).is_some_and(|b| b <= l)))
            .max_by_key(|v| (key(v), std::cmp::Reverse(v.point)))
            .cloned()
    };
    let why = match &answer {
        Some(win) => {
            let a = Arch::of_row(&win.seeds[0]).unwrap_or(Arch::Disaggregated);
            let r = a.other();
            let rival = if r == Arch::Disaggregated { &bd } else { &bc };
            let mut s = format!(
                "PD or not: {}. The cheapest point meeting [slo], {} ({}), is {}",
                a.as_str(),
                label(win),
                cost_words(win),
                a.as_str()
            );
            match rival {
                Some(rb) => {
                    s += &format!(
                        "; the best {} point, {}, costs {} at the same [slo].",
                        r.as_str(),
                        label(rb),
                        cost_words(rb)
                    )
                }
                None => {
                    s += &format!(
                        "; no {} point meets [slo] ({} of them ran).",
                        r.as_str(),
                        of(r).len()
                    )
                }
            }
            let tie = rival.as_ref().filter(|rb| bill(rb) == bill(win));
            if let Some(rb) = tie {
                s += &format!(
                    " Why: both bill the same; {} comes first in the search's order (the most GPUs used, then the fewest nodes, then grid order) ahead of {}.",
                    label(win),
                    label(rb)
                );
            } else if let Some(m) = dearest_miss(r, bill(win)) {
                s += &format!(
                    " Why: every {} point that costs no more misses [slo]; the dearest of them, {} ({}), {}.",
                    r.as_str(),
                    label(&m),
                    cost_words(&m),
                    why_phase(&m, r, slo)
                );
            } else {
                let cheapest_rival = of(r)
                    .iter()
                    .filter(|v| key(v).is_some())
                    .min_by_key(|v| (key(v), v.point));
                s += &format!(
                    " Why: no {} point on the grid costs as little{}.",
                    r.as_str(),
                    cheapest_rival.map_or(String::new(), |c| format!(
                        " (the cheapest, {}, {})",
                        label(c),
                        cost_words(c)
                    ))
                );
            }
            s
        }
        None => {
            let mut s = "PD or not: neither. No point of either kind meets [slo].".to_string();
            for a in [Arch::Disaggregated, Arch::Colocated] {
                if let Some(m) = dearest_miss(a, None) {
                    s += &format!(
                        " The dearest {} point, {} ({}), {}.",
                        a.as_str(),
                        label(&m),
                        cost_words(&m),
                        why_phase(&m, a, slo)
                    );
                }
            }
            s
        }
    };
    Some(PdOrNot {
        answer: answer
            .as_ref()
            .and_then(|w| Arch::of_row(&w.seeds[0]))
            .map_or("neither", Arch::as_str)
            .to_string(),
        best_disaggregated: bd.map(|v| v.point),
        best_colocated: bc.map(|v| v.point),
        why,
    })
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

/// The chosen point's worst seed against each latency percentile target `slo` sets (TTFT,
/// TPOT, ITL, TBT): `p99 TTFT 812 ms (target 2000)`.
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
    ["ttft", "tpot", "itl", "tbt"]
        .iter()
        .filter_map(|m| worst(m))
        .collect()
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
