//! `summary.md`: the facts of `index.html` ([`super::html`]) as Markdown, without the charts,
//! for terminals and CI logs. Byte-stable: no timestamps, no host facts. The rows both reports
//! list (outcomes, latencies, throughput, pools) come from `html`, so the two cannot disagree.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::html::{
    POOL_HEAD, fmt_ms_or_dash, latency_rows, outcome_rows, pct, pool_rows, throughput_facts,
};
use crate::report::{IoError, Summary};

/// Writes `dir/summary.md`: the facts of `index.html` as Markdown, without the charts.
pub fn write_summary_md(
    dir: &Path,
    run_name: &str,
    summary: &Summary,
    ctx: &super::context::RunContext,
) -> Result<(), IoError> {
    let path = dir.join("summary.md");
    let md = summary_md(run_name, summary).replacen(
        "\n## Requests\n",
        &format!("{}\n## Requests\n", ctx.markdown()),
        1,
    );
    fs::write(&path, md).map_err(|source| IoError {
        path: path.clone(),
        source,
    })
}

/// `text` as a Markdown code span: literal in any renderer (no HTML, no emphasis), with `|`
/// escaped for tables and line breaks folded.
fn code_span(text: &str) -> String {
    let text = text.replace(['\r', '\n'], " ").replace('|', "\\|");
    // The fence must be longer than any run of backticks inside (CommonMark).
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// The text of `summary.md`.
pub fn summary_md(run_name: &str, s: &Summary) -> String {
    let mut m = String::new();
    headline(&mut m, run_name, s);
    requests_table(&mut m, s);
    errors_table(&mut m, s);
    slo_section(&mut m, s);
    latency_table(&mut m, s);
    throughput_list(&mut m, s);
    pools_table(&mut m, s);
    reuse_list(&mut m, s);
    m.push_str(&super::aborts::markdown(s));
    m
}

/// The title, how many requests arrived over how long, and the warnings that change how every
/// figure below reads: a run cut by the drain timeout, corrupted requests.
fn headline(m: &mut String, run_name: &str, s: &Summary) {
    let r = &s.requests;
    let _ = writeln!(m, "# pdsim run {}\n", code_span(run_name));
    let _ = writeln!(
        m,
        "{} requests arrived over {:.3} s of simulated time ({} events).",
        r.arrived, s.sim.simulated_s, s.sim.events
    );
    if s.sim.cut_by_drain_timeout {
        m.push_str(
            "\n**Warning:** the run stopped at the drain timeout with requests still in flight: \
             they count as unfinished.\n",
        );
    }
    if r.corrupted > 0 {
        let _ = writeln!(
            m,
            "\n**{} corrupted request(s)**: finished with no error but decoded from a KV cache \
             whose bytes were wrong — another request's writes, or their own without what reads \
             them (the silent hazard; `pdsim explain` names which). They count in throughput.",
            r.corrupted
        );
    }
}

/// Requests by outcome, each with its share of those that arrived.
fn requests_table(m: &mut String, s: &Summary) {
    let r = &s.requests;
    m.push_str("\n## Requests\n\n| outcome | requests | share of arrived |\n|---|---:|---:|\n");
    for (outcome, n, _) in outcome_rows(s) {
        let _ = writeln!(m, "| {outcome} | {n} | {} |", pct(n, r.arrived));
    }
    let _ = writeln!(m, "| arrived | {} | |", r.arrived);
}

/// Error kinds with their counts and sglang's message (first occurrence), as code spans so
/// that any text stays one literal cell.
fn errors_table(m: &mut String, s: &Summary) {
    m.push_str("\n## Errors\n\n");
    if s.errors.is_empty() {
        m.push_str("No request failed.\n");
        return;
    }
    m.push_str("| kind | requests | message (first occurrence) |\n|---|---:|---|\n");
    for e in &s.errors {
        let _ = writeln!(
            m,
            "| {} | {} | {} |",
            code_span(&e.kind),
            e.count,
            code_span(&e.message)
        );
    }
}

/// The `[slo]` verdict target by target (or that there is none), then attainment and goodput.
fn slo_section(m: &mut String, s: &Summary) {
    m.push_str("\n## SLO\n\n");
    let slo = &s.slo;
    match slo.met {
        None => m.push_str("No `[slo]` target set: no verdict.\n"),
        Some(_) => {
            let _ = writeln!(
                m,
                "[slo] **{}**.\n\n| target | reached | verdict | over | past the target |\n|---|---:|---|---|---|",
                slo.verdict_text()
            );
            for t in &slo.targets {
                let _ = writeln!(
                    m,
                    "| {} | {} | {} | {} | {} |",
                    t.condition().replace('|', "\\|"),
                    t.reached(),
                    t.verdict(),
                    t.population_text(),
                    t.late_text()
                );
            }
        }
    }
    let _ = writeln!(
        m,
        "\nAttainment {}: {}. Goodput {:.3} requests/s (whole run; {:.3} over the arrival window).",
        slo.attainment
            .map_or_else(|| "—".to_string(), |a| format!("{:.1} %", 100.0 * a)),
        slo.attainment_basis(),
        slo.goodput_requests_per_s,
        s.throughput.arrival_window.goodput_requests_per_s
    );
}

/// Every latency's mean and percentiles in ms, with the requests they are taken over.
fn latency_table(m: &mut String, s: &Summary) {
    let _ = write!(
        m,
        "\n## Latency (ms)\n\nLatencies {}.\n\n| metric | mean | p50 | p90 | p99 | max |\n\
         |---|---:|---:|---:|---:|---:|\n",
        crate::metrics::slo::latency_basis(&s.requests)
    );
    for (metric, _, st) in latency_rows(s) {
        let _ = writeln!(
            m,
            "| {metric} | {} | {} | {} | {} | {} |",
            fmt_ms_or_dash(st.mean),
            fmt_ms_or_dash(st.p50),
            fmt_ms_or_dash(st.p90),
            fmt_ms_or_dash(st.p99),
            fmt_ms_or_dash(st.max)
        );
    }
    m.push_str(
        "\nITL is over every gap between consecutive tokens of every request, all tokens pooled (whatever the request's outcome); TBT is each request's worst gap (Mooncake's TBT); E2E/token is arrival → last token ÷ output tokens.\n",
    );
}

/// Throughput, cost and KV transfer, one bullet each (the unit after the value).
fn throughput_list(m: &mut String, s: &Summary) {
    m.push_str("\n## Throughput and cost\n\n");
    for (label, value, unit) in throughput_facts(s) {
        let unit = unit.map_or(String::new(), |u| format!(" {u}"));
        let _ = writeln!(m, "- {label}: {value}{unit}");
    }
}

/// Each pool's utilisation and bottleneck (only when the summary has pools).
fn pools_table(m: &mut String, s: &Summary) {
    if s.pools.is_empty() {
        return;
    }
    m.push_str("\n## Pools: utilisation and bottleneck\n\n");
    let _ = writeln!(m, "| {} |", POOL_HEAD.join(" | "));
    let _ = writeln!(m, "|{}", "---|".repeat(POOL_HEAD.len()));
    for row in pool_rows(s) {
        let cells: Vec<String> = row.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(m, "| {} |", cells.join(" | "));
    }
    m.push('\n');
}

/// Prefix reuse, one bullet per source the run had: each instance's prefix cache (and its
/// HiCache tiers), the router's `cache_aware` decisions, the Mooncake Store.
fn reuse_list(m: &mut String, s: &Summary) {
    for c in &s.prefix_cache {
        let _ = writeln!(
            m,
            "- prefix cache of instance {} ({}): {:.1} % of {} prompt tokens hit in {} lookups",
            c.instance,
            c.pool.replace('|', "\\|"),
            100.0 * c.hit_rate,
            c.input_tokens,
            c.lookups
        );
        if let Some(t) = c.tiers {
            let _ = writeln!(
                m,
                "  - tiers: {} GPU, {} host, {} store hit tokens",
                t.device_hit_tokens, t.host_hit_tokens, t.store_hit_tokens
            );
        }
    }
    if let Some(r) = &s.router {
        for (side, d) in [("prefill", r.prefill), ("decode", r.decode)] {
            if let Some(d) = d {
                let _ = writeln!(
                    m,
                    "- router cache_aware ({side}): {} by affinity, {} balanced (imbalanced load), {} to the least loaded (low match), {} fallbacks; peak load gap {}",
                    d.affinity, d.imbalanced, d.low_match, d.fallback, d.peak_load_gap
                );
            }
        }
    }
    if let Some(k) = &s.kv_store {
        let _ = writeln!(
            m,
            "- Mooncake Store: {} blocks held, {} written, {} evicted, {} refused, {} prefetched; on the fabric {:.1} GB read, {:.1} GB written, {:.1} GB local copies",
            k.blocks,
            k.written_blocks,
            k.evicted_blocks,
            k.skipped_blocks,
            k.prefetched_blocks,
            k.traffic.fabric_read_bytes as f64 / 1e9,
            k.traffic.fabric_write_bytes as f64 / 1e9,
            k.traffic.local_copy_bytes as f64 / 1e9
        );
        if let Some(o) = &k.traffic.decode_offload {
            let _ = writeln!(
                m,
                "- decode offload: {} blocks of generated tokens offloaded, {} put to the store ({:.1} GB on the fabric), {} orphaned, {} dropped for want of host memory",
                o.blocks,
                o.put_blocks,
                o.fabric_write_bytes as f64 / 1e9,
                o.orphaned_blocks,
                o.host_full_blocks
            );
        }
    }
    if let Some(d) = &s.decode_prefix {
        let _ = writeln!(
            m,
            "- decode radix cache: {:.1} % of {} admitted prompt tokens already on decode ({} of {} requests hit), {:.2} GB of KV not transferred; {} blocks inserted, {} evicted",
            100.0 * d.hit_share.unwrap_or(0.0),
            d.prompt_tokens,
            d.requests_hit,
            d.requests_admitted,
            d.bytes_not_transferred as f64 / 1e9,
            d.inserted_blocks,
            d.evicted_blocks
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::charts::fixture::{NASTY_MESSAGE, synthetic, temp_dir};

    #[test]
    fn markdown_states_the_same_facts() {
        let f = synthetic();
        let dir = temp_dir("html-md");
        write_summary_md(&dir, "unit-run", &f.summary, &Default::default()).unwrap();
        let md = fs::read_to_string(dir.join("summary.md")).unwrap();
        for want in [
            "# pdsim run `unit-run`",
            "| completed | 50 | 83.3 % |",
            "| failed | 4 | 6.7 % |",
            "| corrupted | 2 | 3.3 % |",
            "| unfinished | 4 | 6.7 % |",
            "| metric | mean | p50 | p90 | p99 | max |",
            "- output tokens/s: 1075.5",
            "Attainment 87.5 %: share of arrived requests that completed",
        ] {
            assert!(md.contains(want), "no {want:?} in:\n{md}");
        }
        // The message is one table cell: pipes escaped, backticks fenced, HTML inert.
        let row = md
            .lines()
            .find(|l| l.contains("envelope_tp_mismatch"))
            .expect("error row");
        assert_eq!(
            row,
            format!(
                "| `envelope_tp_mismatch` | 4 | `` {} `` |",
                NASTY_MESSAGE.replace('|', "\\|")
            )
        );
        assert_eq!(md, summary_md("unit-run", &f.summary), "byte-stable");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn code_spans_survive_backticks_and_newlines() {
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("`x`"), "`` `x` ``");
        assert_eq!(code_span("l1\nl2|x"), "`l1 l2\\|x`");
    }
}
