//! The human-readable reports of a run: `index.html` (summary tables and the charts, opened from
//! disk with no server, no script and no external URL), and the rows of facts it shares with
//! `summary.md` ([`super::markdown`]: the same facts for terminals and CI logs). Both are
//! byte-stable: no timestamps, no host facts.

use std::fmt::Write as _;
use std::fs;
use std::path::{Component, Path, PathBuf};

use crate::metrics::Stats;
use crate::report::charts::Chart;
use crate::report::{IoError, Summary};

/// Writes `dir/index.html`: the summary tables (requests by outcome, error kinds with their
/// messages, latency in ms, throughput, SLO, transfer) and every chart in `charts` (paths
/// relative to `dir`, as [`render_charts`](super::charts::render_charts) returns them) as an
/// `<img>`.
pub fn write_index_html(
    dir: &Path,
    run_name: &str,
    summary: &Summary,
    charts: &[PathBuf],
    ctx: &super::context::RunContext,
) -> Result<(), IoError> {
    let path = dir.join("index.html");
    let html = index_html(run_name, summary, charts).replacen(
        "<h2>Requests</h2>",
        &format!("{}<h2>Requests</h2>", ctx.html()),
        1,
    );
    fs::write(&path, html).map_err(|source| IoError {
        path: path.clone(),
        source,
    })
}

pub use super::escape::escape_html;

/// A relative path as a URL path: `/`-separated, every byte outside `[A-Za-z0-9._~-]`
/// percent-encoded, so any file name survives.
fn url_path(p: &Path) -> String {
    let mut out = String::new();
    for (i, c) in p
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy()),
            _ => None,
        })
        .enumerate()
    {
        if i > 0 {
            out.push('/');
        }
        for b in c.bytes() {
            if b.is_ascii_alphanumeric() || b"._~-".contains(&b) {
                out.push(b as char);
            } else {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// [`fmt_ms`], or "—" for a figure with no data (`null` in summary.json).
pub fn fmt_ms_or_dash(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), fmt_ms)
}

pub use crate::metrics::slo::fmt_ms;

/// Bytes in binary units: 512 B, 1.50 KiB, 3.25 GiB.
fn fmt_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

pub(super) fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "–".into()
    } else {
        format!("{:.1} %", 100.0 * part as f64 / whole as f64)
    }
}

/// Outcome rows: (name, count, note).
pub(super) fn outcome_rows(s: &Summary) -> Vec<(&'static str, u64, &'static str)> {
    let r = &s.requests;
    let mut rows = vec![
        ("completed", r.completed, "finished from their own bytes"),
        ("failed", r.failed, "ended with an error (kinds below)"),
        (
            "corrupted",
            r.corrupted,
            "finished with no error but decoded from a KV cache whose bytes were wrong (another request's writes, or their own without what reads them, e.g. FP4 scales); counted in throughput",
        ),
        ("unfinished", r.unfinished, "in flight when the run stopped"),
    ];
    // Only where the scenario models client disconnects, so other reports keep their rows.
    if s.aborts.is_some() || r.aborted > 0 {
        rows.push((
            "aborted",
            r.aborted,
            "their client disconnected first; the servers aborted them (see Aborts)",
        ));
    }
    rows
}

pub(super) fn latency_rows(s: &Summary) -> [(&'static str, &'static str, Stats); 10] {
    let l = &s.latency_ms;
    [
        ("TTFT", "arrival → first token", l.ttft),
        ("TPOT", "time per output token after the first", l.tpot),
        (
            "ITL",
            "gap between consecutive tokens: every gap of every request, all tokens pooled (whatever the request's outcome)",
            l.itl,
        ),
        (
            "TBT",
            "each request's worst gap between consecutive tokens (Mooncake's TBT; requests with ≥ 2 output tokens)",
            l.tbt,
        ),
        ("E2E", "arrival → last token", l.e2e),
        (
            "E2E/token",
            "arrival → last token ÷ output tokens",
            l.e2e_per_token,
        ),
        (
            "bootstrap",
            "arrival → prefill holds decode's page ids",
            l.bootstrap,
        ),
        ("queue", "prefill waiting queue → first forward", l.queue),
        (
            "transfer",
            "first chunk sent → last chunk landed",
            l.transfer,
        ),
        (
            "decode queue",
            "first token → joins a decode batch",
            l.decode_queue,
        ),
    ]
}

const CSS: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;\
margin:2rem auto;max-width:960px;padding:0 1rem;color:#222;line-height:1.4}\
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:.5rem 0}th,td{border:1px solid #ddd;padding:.25rem .6rem;\
text-align:left;vertical-align:top}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
tr.corrupted td{background:#f3e8f7;color:#5a1f70;font-weight:600}\
tr.missed td{background:#fbeeee;color:#8b1a1a;font-weight:600}\
.ok{background:#eef7ee;border-left:4px solid #2ca02c;padding:.4rem .8rem}\
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em;white-space:pre-wrap;\
word-break:break-word}.warn{background:#fff4e5;border-left:4px solid #f28e2b;padding:.4rem .8rem}\
.hazard{background:#f3e8f7;border-left:4px solid #7b3294;padding:.4rem .8rem}\
figure{margin:1rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{color:#666;font-size:.9rem}";

/// `$20.00 (8 GPUs × $2.50/GPU-hour)`, or why there is no figure.
fn cost_per_hour(s: &Summary) -> String {
    let c = &s.cluster;
    if let (Some(h), Some(a)) = (c.usd_per_hour, &s.autoscaling) {
        return format!(
            "${h:.2} mean over the run (the pools changed size: {:.2} GPU-hours held, ${:.2} in all; {} GPUs placed)",
            a.gpu_hours,
            a.cost_usd.unwrap_or(0.0),
            c.gpus
        );
    }
    match (c.usd_per_hour, &c.node_billing) {
        (Some(h), None) => format!(
            "${h:.2} ({} GPUs × ${:.2}/GPU-hour)",
            c.gpus,
            h / f64::from(c.gpus.max(1))
        ),
        (Some(h), Some(n)) => format!(
            "${h:.2} ({} whole nodes × {} GPUs × ${:.2}/GPU-hour, billed per node: {} GPUs used, {} idle)",
            c.nodes,
            n.gpus_per_node,
            h / f64::from(n.billed_gpus.max(1)),
            c.gpus,
            n.idle_gpus
        ),
        (None, _) => no_price(s, ""),
    }
}

/// Why a cost figure is blank: no price given, or (`why`) no data with one.
fn no_price(s: &Summary, why: &str) -> String {
    if s.cluster.usd_per_hour.is_none() {
        format!(
            "— (no price: set hardware.usd_per_gpu_hour; {} GPUs)",
            s.cluster.gpus
        )
    } else {
        format!("— ({why})")
    }
}

/// The throughput, cost and KV transfer figures both reports list, as `(label, value,
/// unit)`: rates are per simulated second. The unit, when the label does not carry it, goes
/// after the label in HTML and after the value in Markdown.
pub(super) fn throughput_facts(s: &Summary) -> [(&'static str, String, Option<&'static str>); 8] {
    let t = &s.throughput;
    let x = &s.transfer;
    [
        (
            "finished requests/s",
            format!("{:.3}", t.requests_per_s),
            None,
        ),
        (
            "input tokens/s",
            format!("{:.1}", t.input_tokens_per_s),
            None,
        ),
        (
            "output tokens/s",
            format!("{:.1}", t.output_tokens_per_s),
            None,
        ),
        ("cost per hour", cost_per_hour(s), None),
        (
            "cost per 1M output tokens",
            s.cluster.usd_per_1m_output_tokens.map_or_else(
                || no_price(s, "no output token in the arrival window"),
                |c| match s.autoscaling {
                    Some(_) => format!("${c:.2} (the GPU-hours held over every output token)"),
                    None => format!("${c:.2} (at the arrival window's output rate)"),
                },
            ),
            None,
        ),
        (
            "KV transfer",
            format!(
                "{} ({} B) in {} RDMA writes",
                fmt_bytes(x.bytes),
                x.bytes,
                x.writes
            ),
            None,
        ),
        (
            "achieved bandwidth per batch, p50 / p99",
            format!(
                "{} / {}",
                x.bandwidth_gbps
                    .p50
                    .map_or("—".into(), |v| format!("{v:.2}")),
                x.bandwidth_gbps
                    .p99
                    .map_or("—".into(), |v| format!("{v:.2}"))
            ),
            Some("GB/s"),
        ),
        (
            "retransmitted after packet loss",
            fmt_bytes(x.retransmitted_bytes),
            None,
        ),
    ]
}

/// The text of `index.html`.
pub fn index_html(run_name: &str, s: &Summary, charts: &[PathBuf]) -> String {
    let name = escape_html(run_name);
    let r = &s.requests;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>pdsim — {name}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <h1>pdsim run <code>{name}</code></h1>\n"
    );
    let _ = writeln!(
        h,
        "<p>{} requests arrived over {:.3} s of simulated time ({} events).</p>",
        r.arrived, s.sim.simulated_s, s.sim.events
    );
    if s.sim.cut_by_drain_timeout {
        h.push_str(
            "<p class=\"warn\">The run stopped at the drain timeout with requests still in \
             flight: they count as unfinished.</p>\n",
        );
    }
    if r.corrupted > 0 {
        let _ = writeln!(
            h,
            "<p class=\"hazard\"><strong>{} corrupted request(s)</strong>: they finished with no \
             error but decoded from a KV cache whose bytes were wrong — another request's writes, \
             or their own without what reads them (the silent hazard; <code>pdsim explain</code> names \
             which). They count in throughput, as they would in production.</p>",
            r.corrupted
        );
    }

    requests_table(&mut h, s);
    errors_table(&mut h, s);
    slo_section(&mut h, s);
    latency_table(&mut h, s);
    throughput_table(&mut h, s);
    pools_table(&mut h, s);
    prefix_cache_table(&mut h, s);
    h.push_str(&super::aborts::html(s));
    sessions_table(&mut h, s);
    autoscaling_table(&mut h, s);
    speculative_table(&mut h, s);
    fragmentation_table(&mut h, s);
    chart_figures(&mut h, charts);
    h.push_str(
        "<p><small>Also in this folder: <code>summary.json</code>, <code>summary.md</code>, \
         <code>requests.csv</code>, <code>timeseries.csv</code>, <code>run.json</code>.</small></p>\n\
         </body>\n</html>\n",
    );
    h
}

/// The outcome table: requests per outcome and their share of arrivals.
fn requests_table(h: &mut String, s: &Summary) {
    let r = &s.requests;
    h.push_str(
        "<h2>Requests</h2>\n<table>\n<tr><th>outcome</th><th class=\"n\">requests</th>\
         <th class=\"n\">share of arrived</th><th>meaning</th></tr>\n",
    );
    for (outcome, n, note) in outcome_rows(s) {
        // A row stands out (`tr.corrupted`) only when it counts something: an empty corrupted
        // row in the hazard's colours drew the eye to nothing.
        let class = if n > 0 { outcome } else { "none" };
        let _ = writeln!(
            h,
            "<tr class=\"{class}\"><td>{outcome}</td><td class=\"n\">{n}</td>\
             <td class=\"n\">{}</td><td>{}</td></tr>",
            pct(n, r.arrived),
            escape_html(note)
        );
    }
    let _ = writeln!(
        h,
        "<tr><td>arrived</td><td class=\"n\">{}</td><td class=\"n\"></td><td></td></tr>\n</table>",
        r.arrived
    );
}

/// Failed requests per error kind, with the first message of each.
fn errors_table(h: &mut String, s: &Summary) {
    h.push_str("<h2>Errors</h2>\n");
    if s.errors.is_empty() {
        h.push_str("<p>No request failed.</p>\n");
    } else {
        h.push_str(
            "<table>\n<tr><th>kind</th><th class=\"n\">requests</th><th>message (first \
             occurrence)</th></tr>\n",
        );
        for e in &s.errors {
            let _ = writeln!(
                h,
                "<tr><td><code>{}</code></td><td class=\"n\">{}</td><td><code>{}</code></td></tr>",
                escape_html(&e.kind),
                e.count,
                escape_html(&e.message)
            );
        }
        h.push_str("</table>\n");
    }
}

/// Every `[slo]` target with what the run reached and met/MISSED, the verdict, and what
/// attainment counts (so a 100 % beside a missed percentile target reads as what it is).
fn slo_section(h: &mut String, s: &Summary) {
    let slo = &s.slo;
    h.push_str("<h2>SLO</h2>\n");
    match slo.met {
        None => h.push_str("<p>No <code>[slo]</code> target set: no verdict.</p>\n"),
        Some(met) => {
            let _ = writeln!(
                h,
                "<p class=\"{}\">[slo] <strong>{}</strong>.</p>\n<table>\n<tr><th>target</th><th class=\"n\">reached</th><th>verdict</th><th>over</th><th>past the target</th></tr>",
                if met { "ok" } else { "warn" },
                escape_html(&slo.verdict_text())
            );
            for t in &slo.targets {
                let _ = writeln!(
                    h,
                    "<tr class=\"{}\"><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    if t.met { "met" } else { "missed" },
                    escape_html(&t.condition()),
                    escape_html(&t.reached()),
                    t.verdict(),
                    escape_html(&t.population_text()),
                    escape_html(&t.late_text())
                );
            }
            h.push_str("</table>\n");
        }
    }
    let _ = writeln!(
        h,
        "<p>Attainment {}: {}. Goodput {:.3} requests/s (whole run; {:.3} over the arrival window).</p>",
        slo.attainment
            .map_or_else(|| "—".to_string(), |a| format!("{:.1} %", 100.0 * a)),
        escape_html(&slo.attainment_basis()),
        slo.goodput_requests_per_s,
        s.throughput.arrival_window.goodput_requests_per_s
    );
}

/// Latency percentiles, in ms.
fn latency_table(h: &mut String, s: &Summary) {
    let _ = writeln!(
        h,
        "<h2>Latency (ms)</h2>\n<p>Latencies {}.</p>",
        escape_html(&crate::metrics::slo::latency_basis(&s.requests))
    );
    h.push_str(
        "<table>\n<tr><th>metric</th><th class=\"n\">mean</th>\
         <th class=\"n\">p50</th><th class=\"n\">p90</th><th class=\"n\">p99</th>\
         <th class=\"n\">max</th><th>what</th></tr>\n",
    );
    for (metric, what, st) in latency_rows(s) {
        let _ = writeln!(
            h,
            "<tr><td>{metric}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            fmt_ms_or_dash(st.mean),
            fmt_ms_or_dash(st.p50),
            fmt_ms_or_dash(st.p90),
            fmt_ms_or_dash(st.p99),
            fmt_ms_or_dash(st.max),
            escape_html(what)
        );
    }
    h.push_str("</table>\n");
}

/// Rates (per simulated second), cost and KV transfer volume and bandwidth.
fn throughput_table(h: &mut String, s: &Summary) {
    h.push_str("<h2>Throughput and cost</h2>\n<table>\n");
    for (label, value, unit) in throughput_facts(s) {
        let unit = unit.map_or(String::new(), |u| format!(" ({u})"));
        let _ = writeln!(
            h,
            "<tr><td>{label}{unit}</td><td class=\"n\">{value}</td></tr>"
        );
    }
    h.push_str("</table>\n");
}

/// Rows of the per-pool utilisation table: what each pool did over the arrival window and what
/// bound it. Decode's compute share is 1 whenever it holds a request, so its batch and KV
/// occupancy are the signal that varies.
pub(super) fn pool_rows(s: &Summary) -> Vec<[String; 8]> {
    let pct = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{:.1} %", 100.0 * x));
    let num = |v: Option<f64>| v.map_or("—".to_string(), |x| format!("{x:.2}"));
    s.pools
        .iter()
        .map(|p| {
            [
                p.pool.clone(),
                p.role.to_string(),
                pct(p.busy),
                num(p.batch_mean),
                pct(p.kv_occupancy),
                num(p.queue_mean),
                pct(p.link_utilisation),
                p.bottleneck.to_string(),
            ]
        })
        .collect()
}

pub(super) const POOL_HEAD: [&str; 8] = [
    "pool",
    "role",
    "compute busy",
    "mean batch",
    "KV occupancy",
    "mean queue",
    "link use",
    "bottleneck",
];

/// Per-pool utilisation and bottleneck (`summary.json` `pools`).
fn pools_table(h: &mut String, s: &Summary) {
    if s.pools.is_empty() {
        return;
    }
    h.push_str("<h2>Pools: utilisation and bottleneck</h2>\n<p>Over the arrival window. A decode pool computes whenever it holds a request, so its batch and KV occupancy say how full it is.</p>\n<table>\n<tr>");
    for (i, c) in POOL_HEAD.iter().enumerate() {
        let class = if (2..7).contains(&i) {
            " class=\"n\""
        } else {
            ""
        };
        let _ = write!(h, "<th{class}>{c}</th>");
    }
    h.push_str("</tr>\n");
    for row in pool_rows(s) {
        h.push_str("<tr>");
        for (i, c) in row.iter().enumerate() {
            let class = if (2..7).contains(&i) {
                " class=\"n\""
            } else {
                ""
            };
            let _ = write!(h, "<td{class}>{}</td>", escape_html(c));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
}

/// Per-instance prefix cache hits (with HiCache, per tier); absent when no instance has a
/// prefix cache. Then the router's `cache_aware` decisions, the shared store and the decodes' radix
/// trees, when present.
fn prefix_cache_table(h: &mut String, s: &Summary) {
    if !s.prefix_cache.is_empty() {
        let tiers = s.prefix_cache.iter().any(|c| c.tiers.is_some());
        h.push_str("<h2>Prefix cache</h2>\n<table>\n<tr><th>instance</th><th>pool</th><th>lookups</th><th>hit tokens</th><th>hit rate</th>");
        if tiers {
            h.push_str("<th>GPU hits</th><th>host hits</th><th>store hits</th><th>store read</th>");
        }
        h.push_str("</tr>\n");
        for c in &s.prefix_cache {
            let _ = write!(
                h,
                "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1} %</td>",
                c.instance,
                escape_html(&c.pool),
                c.lookups,
                c.hit_tokens,
                100.0 * c.hit_rate
            );
            if let Some(t) = c.tiers {
                let _ = write!(
                    h,
                    "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.1} GB</td>",
                    t.device_hit_tokens,
                    t.host_hit_tokens,
                    t.store_hit_tokens,
                    t.store_read_bytes as f64 / 1e9
                );
            } else if tiers {
                h.push_str("<td></td><td></td><td></td><td></td>");
            }
            h.push_str("</tr>\n");
        }
        h.push_str("</table>\n");
    }
    if let Some(r) = &s.router {
        h.push_str("<h2>Router: cache_aware decisions</h2>\n<table>\n<tr><th>side</th><th>affinity</th><th>imbalanced</th><th>low match</th><th>fallback</th><th>peak load gap</th><th>tree evictions</th></tr>\n");
        for (side, d) in [("prefill", r.prefill), ("decode", r.decode)] {
            if let Some(d) = d {
                let _ = writeln!(
                    h,
                    "<tr><td>{side}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    d.affinity, d.imbalanced, d.low_match, d.fallback, d.peak_load_gap, d.evicted
                );
            }
        }
        h.push_str("</table>\n");
    }
    if let Some(k) = &s.kv_store {
        let _ = writeln!(
            h,
            "<h2>Mooncake Store</h2>\n<p>{} blocks held ({}), {} written ({:.1} GB), {} evicted, {} refused, {} prefetched ({:.1} GB).</p>",
            k.blocks,
            k.capacity_tokens
                .map_or("unbounded".to_string(), |t| format!("capacity {t} tokens")),
            k.written_blocks,
            k.write_bytes as f64 / 1e9,
            k.evicted_blocks,
            k.skipped_blocks,
            k.prefetched_blocks,
            k.prefetched_bytes as f64 / 1e9
        );
        let t = &k.traffic;
        let _ = writeln!(
            h,
            "<p>On the fabric (sharing NICs with KV transfers): {} reads ({:.1} GB, mean {:.1} ms), {} writes ({:.1} GB); {:.1} GB local copies; {} failed.</p>",
            t.reads,
            t.fabric_read_bytes as f64 / 1e9,
            t.read_ns_total as f64 / t.reads.max(1) as f64 / 1e6,
            t.writes,
            t.fabric_write_bytes as f64 / 1e9,
            t.local_copy_bytes as f64 / 1e9,
            t.failed
        );
        if let Some(o) = &t.decode_offload {
            let _ = writeln!(
                h,
                "<p>Decode offload: {} blocks of generated tokens ({:.1} GB copied to host), {} put ({:.1} GB from the decode nodes' NICs); {} orphaned, {} dropped for want of host memory.</p>",
                o.blocks,
                o.d2h_bytes as f64 / 1e9,
                o.put_blocks,
                o.fabric_write_bytes as f64 / 1e9,
                o.orphaned_blocks,
                o.host_full_blocks
            );
        }
    }
    if let Some(d) = &s.decode_prefix {
        let _ = writeln!(
            h,
            "<h2>Decode prefix reuse</h2>\n<p>The decodes' radix trees (<code>--disaggregation-decode-enable-radix-cache</code>) held {:.1} % of the {} prompt tokens they admitted ({} of {} requests hit, {} pages): {:.2} GB of KV the prefills did not send. {} blocks of 512 tokens went into the trees, at most {} at once; {} evicted.</p>",
            100.0 * d.hit_share.unwrap_or(0.0),
            d.prompt_tokens,
            d.requests_hit,
            d.requests_admitted,
            d.hit_pages,
            d.bytes_not_transferred as f64 / 1e9,
            d.inserted_blocks,
            d.peak_blocks,
            d.evicted_blocks
        );
    }
}

/// Events of a run whose pools changed size listed in the report at most (the rest are in
/// `summary.json`).
const SCALING_EVENTS_LISTED: usize = 40;

/// Pools that changed size (`summary.json` `autoscaling`): what the GPUs cost, what the policy
/// did, and its events with their reasons; absent with fixed pools.
fn autoscaling_table(h: &mut String, s: &Summary) {
    let Some(a) = &s.autoscaling else { return };
    let cost = a.cost_usd.map_or(String::new(), |c| format!(" (${c:.2})"));
    let _ = writeln!(
        h,
        "<h2>Autoscaling</h2>\n<p>Policy <code>{}</code>: {:.2} GPU-hours held{cost}; {} decisions moved the pools: {} cold starts, {} live role switches, {} drains, {} starts called off, {} starts failed. The chart <code>charts/pools.svg</code> draws the pools against the demand and TTFT attainment; <code>pdsim explain</code> tells each window.</p>",
        escape_html(&a.policy),
        a.gpu_hours,
        a.decisions,
        a.cold_starts,
        a.role_switches,
        a.drains,
        a.starts_cancelled,
        a.starts_failed
    );
    h.push_str(
        "<table>\n<tr><th>time (s)</th><th>event</th><th>pool</th><th>slot</th><th>why</th></tr>\n",
    );
    for e in a.events.iter().take(SCALING_EVENTS_LISTED) {
        let _ = writeln!(
            h,
            "<tr><td class=\"n\">{:.0}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            e.at_s,
            escape_html(&e.kind),
            escape_html(&e.pool),
            e.slot,
            escape_html(&e.why)
        );
    }
    h.push_str("</table>\n");
    if a.events.len() > SCALING_EVENTS_LISTED {
        let _ = writeln!(
            h,
            "<p>… and {} more events in <code>summary.json</code> <code>autoscaling.events</code>.</p>",
            a.events.len() - SCALING_EVENTS_LISTED
        );
    }
}

/// Conversations: how sessions ended and the prefix hit share by turn index; absent without
/// sessions.
fn sessions_table(h: &mut String, s: &Summary) {
    let Some(x) = &s.sessions else { return };
    let pct = |v: Option<f64>| v.map_or(String::new(), |v| format!("{:.1} %", 100.0 * v));
    let _ = writeln!(
        h,
        "<h2>Sessions</h2>\n<p>{} started, {} completed ({} ended at the context cap), {} ended by a failed turn, {} cut by the run's end; {} turns ({:.2} per session), mean prompt {:.0} tokens. Prefill tokens saved by cached prefixes: {} ({}).</p>",
        x.started,
        x.completed,
        x.context_full,
        x.failed,
        x.cut,
        x.turns,
        x.mean_turns_per_session.unwrap_or(0.0),
        x.mean_context_tokens.unwrap_or(0.0),
        x.prefill_tokens_saved,
        pct(x.hit_share)
    );
    h.push_str("<table>\n<tr><th>turn</th><th>requests</th><th>completed</th><th>mean prompt</th><th>cached tokens</th><th>hit share</th></tr>\n");
    for t in &x.by_turn {
        let turn = if t.and_later {
            format!("{}+", t.turn)
        } else {
            t.turn.to_string()
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"n\">{turn}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            t.requests,
            t.completed,
            t.mean_context_tokens
                .map_or(String::new(), |m| format!("{m:.0}")),
            t.cached_tokens,
            pct(t.hit_share)
        );
    }
    h.push_str("</table>\n");
}

/// Speculative decoding per pool that runs it (`summary.json` `speculative`): what sglang
/// resolved, the accept length and rate measured against the acceptance model's, and where a
/// decode step's time went.
fn speculative_table(h: &mut String, s: &Summary) {
    if s.speculative.is_empty() {
        return;
    }
    let f2 = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.2}"));
    let pc = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{:.1} %", 100.0 * v));
    h.push_str(
        "<h2>Speculative decoding</h2>\n<p>Accept length: tokens a request emits per decode step, the bonus token included (sglang's \"accept len\"); accept rate: accepted drafts over proposed.</p>\n<table>\n<tr><th>pool</th><th>role</th><th>algorithm</th><th class=\"n\">steps / top-k / draft tokens</th><th class=\"n\">accept length (model)</th><th class=\"n\">accept rate (the model's α per position)</th><th class=\"n\">decode steps</th><th>step time: draft / verify / extend / host</th><th class=\"n\">draft share of prefill</th></tr>\n",
    );
    for x in &s.speculative {
        let share = x.time_share.as_ref().map_or("—".to_string(), |t| {
            format!(
                "{} / {} / {} / {}",
                pc(Some(t.draft)),
                pc(Some(t.verify)),
                pc(Some(t.draft_extend)),
                pc(Some(t.host))
            )
        });
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{} / {} / {}</td><td class=\"n\">{} ({})</td><td class=\"n\">{} ({})</td><td class=\"n\">{}</td><td>{share}</td><td class=\"n\">{}</td></tr>",
            escape_html(&x.pool),
            escape_html(&x.role),
            escape_html(&x.algorithm),
            x.num_steps,
            x.eagle_topk,
            x.num_draft_tokens,
            f2(x.accept_length_mean),
            f2(x.accept_length_model),
            pc(x.accept_rate),
            x.accept_rate_model
                .map_or("—".to_string(), |a| format!("α {a:.2}")),
            x.steps,
            pc(x.draft_prefill_share),
        );
    }
    h.push_str("</table>\n");
}

/// How fragmented the KV transfers were early and late in the run (`summary.json`
/// `transfer.fragmentation`): RDMA writes per request and the transfer time, first vs last
/// tenth of the arrival window (a page allocator that scatters pages shows here).
fn fragmentation_table(h: &mut String, s: &Summary) {
    let Some(fr) = &s.transfer.fragmentation else {
        return;
    };
    let f = |v: Option<f64>, d: usize| v.map_or("—".to_string(), |v| format!("{v:.d$}"));
    h.push_str(
        "<h2>KV transfer fragmentation</h2>\n<p>RDMA writes per request and transfer time (first chunk posted to the last landed), for the transfers that started in the first and the last tenth of the arrival window.</p>\n<table>\n<tr><th>span (s)</th><th class=\"n\">transfers</th><th class=\"n\">writes p50</th><th class=\"n\">writes p99</th><th class=\"n\">transfer ms p50</th><th class=\"n\">transfer ms p99</th></tr>\n",
    );
    for x in [&fr.first_tenth, &fr.last_tenth] {
        let _ = writeln!(
            h,
            "<tr><td>{:.1} – {:.1}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            x.from_s,
            x.to_s,
            x.transfers,
            f(x.writes_p50, 0),
            f(x.writes_p99, 0),
            f(x.transfer_ms_p50, 2),
            f(x.transfer_ms_p99, 2),
        );
    }
    h.push_str("</table>\n");
}

/// One figure per chart file, `charts` relative to the run folder.
fn chart_figures(h: &mut String, charts: &[PathBuf]) {
    if !charts.is_empty() {
        h.push_str("<h2>Charts</h2>\n");
    }
    for c in charts {
        let stem = c
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let caption = Chart::from_name(&stem).map_or(stem.to_string(), |c| c.title().to_string());
        let (w, hgt) = super::charts::SIZE;
        let _ = writeln!(
            h,
            "<figure><img src=\"{}\" alt=\"{}\" width=\"{w}\" height=\"{hgt}\">\
             <figcaption><code>{}</code></figcaption></figure>",
            escape_html(&url_path(c)),
            escape_html(&caption),
            escape_html(&c.to_string_lossy())
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::charts::fixture::{empty, synthetic, temp_dir};
    use crate::report::charts::{ImageFormat, render_charts};
    use crate::report::markdown::summary_md;

    /// Every value of an attribute `attr="…"` in `html`.
    fn attr_values<'h>(html: &'h str, attr: &str) -> Vec<&'h str> {
        let key = format!(" {attr}=\"");
        html.match_indices(&key)
            .map(|(i, _)| {
                let v = &html[i + key.len()..];
                &v[..v.find('"').expect("unterminated attribute")]
            })
            .collect()
    }

    #[test]
    fn index_references_only_files_that_exist() {
        let f = synthetic();
        let dir = temp_dir("html-index");
        let charts = render_charts(&f.input("unit-run"), &dir, ImageFormat::Svg).unwrap();
        write_index_html(&dir, "unit-run", &f.summary, &charts, &Default::default()).unwrap();
        let html = fs::read_to_string(dir.join("index.html")).unwrap();
        let srcs = attr_values(&html, "src");
        assert_eq!(srcs.len(), charts.len(), "one <img> per chart");
        for src in srcs {
            assert!(
                !src.contains(':') && !src.starts_with('/'),
                "not relative: {src}"
            );
            assert!(
                dir.join(src).is_file(),
                "{src} does not exist under {dir:?}"
            );
        }
        assert!(attr_values(&html, "href").is_empty());
        for banned in ["http:", "https:", "<script", "//"] {
            assert!(!html.contains(banned), "index.html contains {banned:?}");
        }
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn both_reports_show_each_pools_utilisation_and_bottleneck() {
        let mut f = synthetic();
        f.summary.pools = vec![crate::report::PoolUsage {
            pool: "dec<ode>".into(),
            role: "decode".into(),
            instances: 2,
            gpus: 4,
            busy: Some(1.0),
            batch_mean: Some(37.5),
            batch_occupancy: None,
            kv_occupancy: Some(0.914),
            queue_mean: Some(3.25),
            queue_nonempty: Some(0.5),
            link_utilisation: None,
            bottleneck: "kv_memory".into(),
        }];
        let html = index_html("unit-run", &f.summary, &[]);
        assert!(
            html.contains("<h2>Pools: utilisation and bottleneck</h2>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>dec&lt;ode&gt;</td><td>decode</td><td class=\"n\">100.0 %</td><td class=\"n\">37.50</td><td class=\"n\">91.4 %</td><td class=\"n\">3.25</td><td class=\"n\">—</td><td>kv_memory</td>"
            ),
            "{html}"
        );
        let md = summary_md("unit-run", &f.summary);
        assert!(
            md.contains("| dec<ode> | decode | 100.0 % | 37.50 | 91.4 % | 3.25 | — | kv_memory |"),
            "{md}"
        );
    }

    #[test]
    fn both_reports_list_every_slo_target_with_its_verdict_and_the_cost() {
        use crate::metrics::slo::SloTarget;
        let mut f = synthetic();
        // Percentile targets only, one missed, while every request completed: the report must
        // list both, say MISSED, and explain that attainment is not the verdict.
        f.summary.slo.attainment = Some(1.0);
        f.summary.slo.targets = vec![
            SloTarget {
                key: "ttft_p99_ms".into(),
                target: 2000.0,
                value: Some(87.0),
                met: true,
                default: false,
                population: 60,
                late: Vec::new(),
            },
            SloTarget {
                key: "tpot_p99_ms".into(),
                target: 50.0,
                value: Some(53.0),
                met: false,
                default: false,
                population: 58,
                late: Vec::new(),
            },
        ];
        f.summary.slo.met = Some(false);
        f.summary.cluster.gpus = 8;
        f.summary.cluster.usd_per_hour = Some(20.0);
        f.summary.cluster.usd_per_1m_output_tokens = Some(5.05);
        let html = index_html("unit-run", &f.summary, &[]);
        let md = summary_md("unit-run", &f.summary);
        for text in [&html, &md] {
            assert!(!text.contains("no SLO set"), "{text}");
            assert!(text.contains("MISSED (tpot_p99_ms)"), "{text}");
            assert!(
                text.contains("the percentile targets decide the verdict"),
                "{text}"
            );
            assert!(text.contains("$20.00 (8 GPUs × $2.50/GPU-hour)"), "{text}");
            assert!(text.contains("$5.05"), "{text}");
            assert!(
                text.contains("over 52 finished requests (50 completed + 2 corrupted)"),
                "{text}"
            );
        }
        assert!(html.contains(
            "<tr class=\"met\"><td>ttft_p99_ms ≤ 2000 ms</td><td class=\"n\">87.0 ms</td><td>met</td><td>60 arrived requests, one that did not complete counted as infinitely late</td><td></td></tr>"
        ));
        assert!(html.contains(
            "<tr class=\"missed\"><td>tpot_p99_ms ≤ 50.0 ms</td><td class=\"n\">53.0 ms</td><td>MISSED</td><td>58 arrived requests less one-token completions (no gap to time), one that did not complete counted as infinitely late</td><td></td></tr>"
        ));
        assert!(
            md.contains("| ttft_p99_ms ≤ 2000 ms | 87.0 ms | met | 60 arrived requests"),
            "{md}"
        );
        assert!(
            md.contains("| tpot_p99_ms ≤ 50.0 ms | 53.0 ms | MISSED | 58 arrived requests less"),
            "{md}"
        );
        // No price: the cost row says how to get one.
        f.summary.cluster.usd_per_hour = None;
        f.summary.cluster.usd_per_1m_output_tokens = None;
        assert!(summary_md("unit-run", &f.summary).contains("set hardware.usd_per_gpu_hour"));
        // No target at all: said once, as such.
        f.summary.slo.targets.clear();
        f.summary.slo.met = None;
        assert!(summary_md("unit-run", &f.summary).contains("No `[slo]` target set"));
    }

    #[test]
    fn strings_are_escaped() {
        let f = synthetic();
        let html = index_html("<b>run</b> & co", &f.summary, &[]);
        assert!(!html.contains("<tp_size>") && !html.contains("<b>run"));
        assert!(html.contains(
            "Envelope &lt;tp_size&gt; mismatch: prefill &quot;4&quot; &amp; decode &#39;8&#39;"
        ));
        assert!(html.contains("&lt;b&gt;run&lt;/b&gt; &amp; co"));
        assert_eq!(escape_html("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
    }

    /// The corrupted row wears the hazard's colours only when it counts a request.
    #[test]
    fn the_corrupted_row_stands_out_only_when_it_counts_one() {
        let mut f = synthetic();
        let html = index_html("unit-run", &f.summary, &[]);
        assert!(html.contains("<tr class=\"corrupted\"><td>corrupted</td><td class=\"n\">2</td>"));
        f.summary.requests.completed += f.summary.requests.corrupted;
        f.summary.requests.corrupted = 0;
        let html = index_html("unit-run", &f.summary, &[]);
        assert!(!html.contains("<tr class=\"corrupted\">"), "{html}");
        assert!(html.contains("<tr class=\"none\"><td>corrupted</td><td class=\"n\">0</td>"));
    }

    #[test]
    fn index_has_every_table() {
        let f = synthetic();
        let html = index_html("unit-run", &f.summary, &[]);
        for want in [
            "<td>completed</td><td class=\"n\">50</td>",
            "<td>failed</td><td class=\"n\">4</td>",
            "<td>corrupted</td><td class=\"n\">2</td>",
            "<td>unfinished</td><td class=\"n\">4</td>",
            "<code>envelope_tp_mismatch</code></td><td class=\"n\">4</td>",
            "2 corrupted request(s)",
            "<td>TTFT</td>",
            "<td>TPOT</td>",
            "<td>ITL</td>",
            "<td>E2E</td>",
            "<td>queue</td>",
            "<td>transfer</td>",
            "1075.5",
            "87.5 %",
            "3.00 GiB",
        ] {
            assert!(html.contains(want), "no {want:?} in index.html");
        }
        let p99 = fmt_ms_or_dash(f.summary.latency_ms.ttft.p99);
        assert!(html.contains(&format!("<td class=\"n\">{p99}</td>")));
    }

    #[test]
    fn chart_paths_become_relative_urls() {
        let html = index_html(
            "r",
            &synthetic().summary,
            &[
                PathBuf::from("charts/ttft_cdf.svg"),
                PathBuf::from("charts/a b&c.svg"),
            ],
        );
        assert_eq!(
            attr_values(&html, "src"),
            ["charts/ttft_cdf.svg", "charts/a%20b%26c.svg"]
        );
        assert!(html.contains("alt=\"Time to first token (TTFT), CDF\""));
    }

    #[test]
    fn empty_run_reports_render() {
        let f = empty();
        let md = summary_md("empty", &f.summary);
        assert!(md.contains("No request failed.") && md.contains("| completed | 0 | – |"));
        let html = index_html("empty", &f.summary, &[]);
        assert!(html.contains("No request failed.") && html.ends_with("</html>\n"));
        assert!(!html.contains("NaN") && !md.contains("NaN"));
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_ms(1234.4), "1234");
        assert_eq!(fmt_ms(56.78), "56.8");
        assert_eq!(fmt_ms(8.914), "8.91");
        assert_eq!(fmt_ms(0.1234), "0.123");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(1536), "1.50 KiB");
    }
}
