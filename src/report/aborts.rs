//! The reports' "Aborts" section (`index.html`, `summary.md`): `summary.json` `aborts` in
//! words — client disconnects, where the servers aborted the requests, wasted prefill work,
//! and the pages doomed requests held per side.

use std::fmt::Write as _;

use crate::metrics::aborts::{AbortSummary, HeldPages};
use crate::report::Summary;

/// One side's held pages as table cells: requests, page-s, page-s after doom, max and mean
/// time from doom to release.
fn cells(h: &HeldPages) -> [String; 5] {
    let s = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1}"));
    [
        h.requests.to_string(),
        format!("{:.0}", h.page_s),
        format!("{:.0}", h.page_s_after_doom),
        s(h.max_held_after_doom_s),
        s(h.mean_held_after_doom_s),
    ]
}

/// The headline sentence.
fn headline(a: &AbortSummary) -> String {
    let stages: Vec<String> = a
        .by_stage
        .iter()
        .map(|c| format!("{} {}", c.count, c.stage.as_str()))
        .collect();
    format!(
        "Router propagation: {}; client deadline: {}. {} clients disconnected before their request ended; {} requests were aborted{}. {} requests were orphaned (their prefill failed and the decode side kept them). Prefill computed {} tokens ({:.2} GPU-s) for requests later aborted.",
        a.propagation,
        a.client_timeout
            .as_deref()
            .unwrap_or("none (clients wait for ever)"),
        a.disconnected,
        a.aborted,
        if stages.is_empty() {
            String::new()
        } else {
            format!(" (by stage: {})", stages.join(", "))
        },
        a.orphaned,
        a.wasted_prefill_tokens,
        a.wasted_prefill_gpu_s
    ) + &leak_sentence(a)
}

/// What decode leaked under `sglang.decode_queue_abort = "leak"` (empty otherwise).
fn leak_sentence(a: &AbortSummary) -> String {
    a.decode_leaked.map_or(String::new(), |l| {
        format!(
            " Decode leaked the pages of {} requests aborted in its waiting queue (sglang before PR #9817): {} pages never given back, {:.0} page-s by the end of the run.",
            l.requests, l.pages, l.page_s
        )
    })
}

const HEAD: [&str; 6] = [
    "side",
    "doomed requests holding pages",
    "page-s held",
    "page-s held after doom",
    "max doom → release (s)",
    "mean doom → release (s)",
];

/// The HTML section, empty when the run has no abort figures.
pub(super) fn html(s: &Summary) -> String {
    let Some(a) = &s.aborts else {
        return String::new();
    };
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<h2>Aborts</h2>\n<p>{}</p>\n<table>\n<tr>{}</tr>",
        super::escape::escape_html(&headline(a)),
        HEAD.iter()
            .enumerate()
            .map(|(i, t)| if i == 0 {
                format!("<th>{t}</th>")
            } else {
                format!("<th class=\"n\">{t}</th>")
            })
            .collect::<String>()
    );
    for (side, held) in [("prefill", &a.prefill), ("decode", &a.decode)] {
        let c = cells(held);
        let _ = writeln!(
            h,
            "<tr><td>{side}</td>{}</tr>",
            c.iter()
                .map(|v| format!("<td class=\"n\">{v}</td>"))
                .collect::<String>()
        );
    }
    h.push_str(
        "</table>\n<p><small>A request is doomed from its client's disconnect (or its prefill's failure, for an orphan) to its end; pages held after that are held for nothing. <code>pdsim explain</code> tells the story.</small></p>\n",
    );
    h
}

/// The Markdown section, empty when the run has no abort figures.
pub(super) fn markdown(s: &Summary) -> String {
    let Some(a) = &s.aborts else {
        return String::new();
    };
    let mut m = String::new();
    let _ = writeln!(
        m,
        "\n## Aborts\n\n{}\n\n| {} |\n|---|---:|---:|---:|---:|---:|",
        headline(a),
        HEAD.join(" | ")
    );
    for (side, held) in [("prefill", &a.prefill), ("decode", &a.decode)] {
        let _ = writeln!(m, "| {side} | {} |", cells(held).join(" | "));
    }
    m
}
