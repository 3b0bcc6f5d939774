//! The "Autoscaling" section of `pdsim explain` (issue 38, item 4): what the policy did to the
//! pools, what the GPUs cost against a pool held at the peak it reached, what starting
//! instances held without serving, each window's arrivals, TTFT attainment and pool sizes, and
//! the decisions with the policy's own reasons (`docs/autoscaling.md` §7).

use super::read::Run;
use super::{Block, Section};
use crate::metrics::summary::AutoscalingSummary;

/// Windows the run is cut into for the attainment table.
const WINDOWS: u64 = 12;
/// Events listed with their reasons (the rest are in `summary.json`).
const LISTED: usize = 10;

/// Serving instances of each pool after every event: `(at_s, [prefill, decode])`, from the
/// initial sizes. A drain leaves the router's set at once; a start joins it when ready.
fn serving_over_time(a: &AutoscalingSummary, initial: [u32; 2]) -> Vec<(f64, [u32; 2])> {
    let mut n = initial.map(i64::from);
    let mut out = vec![(0.0, initial)];
    for e in &a.events {
        let r = usize::from(e.pool == "decode");
        match e.kind.as_str() {
            "ready" => n[r] += 1,
            "drain" => n[r] -= 1,
            _ => continue,
        }
        out.push((e.at_s, n.map(|v| v.max(0) as u32)));
    }
    out
}

/// The section, when the pools changed size.
pub(super) fn scaling_section(run: &Run) -> Option<Section> {
    let a = run.summary.autoscaling.as_ref()?;
    let lc = run.sc.as_ref().and_then(|sc| sc.lifecycle.clone());
    let mut blocks = Vec::new();
    let cost = a.cost_usd.map_or(String::new(), |c| format!(" (${c:.2})"));
    blocks.push(Block::Para(format!(
        "Policy `{}` moved the pools {} times: {} cold starts, {} live role switches, {} drains, {} starts called off, {} starts failed. They held {:.2} GPU-hours{cost}.",
        a.policy,
        a.decisions,
        a.cold_starts,
        a.role_switches,
        a.drains,
        a.starts_cancelled,
        a.starts_failed,
        a.gpu_hours
    )));
    let end_s = run.summary.sim.simulated_s;
    let Some(lc) = lc else {
        blocks.push(Block::Para(format!(
            "The scenario could not be rebuilt, so the pools' sizes are not drawn here: {}",
            run.sc_note.as_deref().unwrap_or("no run.json")
        )));
        return Some(Section {
            title: "Autoscaling".into(),
            blocks,
        });
    };
    let sizes = serving_over_time(a, lc.initial);
    let peak = sizes
        .iter()
        .fold([0u32; 2], |m, (_, n)| [m[0].max(n[0]), m[1].max(n[1])]);
    let peak_gpu_h = f64::from(peak[0] * lc.gpus[0] + peak[1] * lc.gpus[1]) * end_s / 3600.0;
    blocks.push(Block::Para(format!(
        "At most {} prefill and {} decode instances served at once; held all run, that peak is {:.2} GPU-hours: the policy used {:.0} % of it.",
        peak[0],
        peak[1],
        peak_gpu_h,
        100.0 * a.gpu_hours / peak_gpu_h.max(f64::MIN_POSITIVE)
    )));
    // GPUs held while starting: from each launch (or flip) to its end.
    let mut starting_gpu_s = 0.0;
    for (i, e) in a.events.iter().enumerate() {
        if e.kind == "cold_start" || e.kind == "role_switch" {
            let end = (a.events[i + 1..].iter())
                .find(|f| f.instance == e.instance && f.kind != e.kind)
                .map_or(end_s, |f| f.at_s);
            let g = lc.gpus[usize::from(e.pool == "decode")];
            starting_gpu_s += f64::from(g) * (end - e.at_s);
        }
    }
    blocks.push(Block::Para(format!(
        "Starting instances held {:.2} GPU-hours without serving (weights {:.2} GB a GPU at {:.2} GB/s, {:.0} s of CUDA graphs, the router's {:.0}-s startup check{}).",
        starting_gpu_s / 3600.0,
        lc.weight_bytes_per_gpu[0].max(lc.weight_bytes_per_gpu[1]) as f64 / 1e9,
        lc.weight_load_bytes_per_s / 1e9,
        lc.cuda_graph_capture_ns as f64 / 1e9,
        lc.router_check_interval_ns as f64 / 1e9,
        lc.startup_ns
            .map_or(String::new(), |s| format!("; `startup_s` = {:.0} s replaces the first two", s as f64 / 1e9))
    )));
    if let Some(t) = window_table(run, &sizes, end_s) {
        blocks.push(Block::Para(
            "Each window: requests that arrived in it, the share of those answered whose TTFT met `slo.ttft_ms`, and the pools serving at its end.".into(),
        ));
        blocks.push(t);
    }
    let listed: Vec<String> = (a
        .events
        .iter()
        .filter(|e| e.kind != "ready" && e.kind != "removed"))
    .take(LISTED)
    .map(|e| {
        format!(
            "{:.0} s, {} {} slot {}: {}",
            e.at_s, e.kind, e.pool, e.slot, e.why
        )
    })
    .collect();
    if !listed.is_empty() {
        blocks.push(Block::Para(format!(
            "The first {} scaling events with their reasons ({} events in all in summary.json `autoscaling.events`):",
            listed.len(),
            a.events.len()
        )));
        blocks.push(Block::Bullets(listed));
    }
    Some(Section {
        title: "Autoscaling".into(),
        blocks,
    })
}

/// The attainment per window, when the run has its requests and a TTFT target.
fn window_table(run: &Run, sizes: &[(f64, [u32; 2])], end_s: f64) -> Option<Block> {
    let target_ns = (run.summary.slo.ttft_ms? * 1e6) as u64;
    if run.arrivals.is_empty() {
        return None;
    }
    let span_ns = (end_s * 1e9) as u64;
    let w = (span_ns / WINDOWS).max(1);
    let mut rows = Vec::new();
    for k in 0..WINDOWS {
        let (from, to) = (k * w, (k + 1) * w);
        let mine = run.arrivals.iter().filter(|(a, _)| (from..to).contains(a));
        let (mut n, mut answered, mut met) = (0u64, 0u64, 0u64);
        for (_, ttft) in mine {
            n += 1;
            if let Some(t) = ttft {
                answered += 1;
                met += u64::from(*t <= target_ns);
            }
        }
        let at = to as f64 / 1e9;
        let size = sizes
            .iter()
            .rev()
            .find(|(t, _)| *t <= at)
            .map_or([0, 0], |s| s.1);
        rows.push(vec![
            format!("{:.0}–{:.0} s", from as f64 / 1e9, at),
            n.to_string(),
            if answered > 0 {
                format!("{:.1} %", 100.0 * met as f64 / answered as f64)
            } else {
                "—".into()
            },
            format!("{}P {}D", size[0], size[1]),
        ]);
    }
    Some(Block::Table(
        vec![
            "window".into(),
            "arrivals".into(),
            "TTFT met".into(),
            "serving".into(),
        ],
        rows,
    ))
}
