//! Reports that tell the story (issue 13): the time charts mark faults, recoveries and
//! transfer-worker deaths at the times the run recorded them; the throughput chart shows
//! failures; the CDFs show the `[slo]`; `index.html` and `summary.md` list the events.

use crate::common;

use std::path::Path;

/// `<text>` contents of an SVG (plotters writes each on one element).
fn svg_texts(path: &Path) -> Vec<String> {
    let svg = std::fs::read_to_string(path).unwrap();
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..t.find("</text>")?];
            Some(body.trim().replace("&amp;", "&").replace("&quot;", "\""))
        })
        .collect()
}

/// Rows of the Events table of `summary.md`: (seconds, kind, what).
fn events(dir: &Path) -> Vec<(f64, String, String)> {
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let Some(table) = md.split("## Events").nth(1) else {
        return Vec::new();
    };
    table
        .lines()
        .skip_while(|l| !l.starts_with("|---"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            (c[0].parse().unwrap(), c[1].to_string(), c[2].to_string())
        })
        .collect()
}

const TIME_CHARTS: [&str; 5] = [
    "throughput",
    "queue_depth",
    "kv_usage",
    "utilisation",
    "timeline",
];

#[test]
fn a_dead_shard_is_marked_when_its_worker_died_and_healthy_traffic_stalls_after_it() {
    let dir = common::tmpdir("story-dead-shard");
    common::run("scenarios/pd/dead-shard-stalls-healthy.toml", &[], &dir);
    let ev = events(&dir);
    // Every prefill rank has its own queues and raises on its own (sglang's per-rank
    // transfer queues): decode 5's chunks kill queue 3 on both ranks of prefill 0.
    assert_eq!(ev.len(), 2, "{ev:?}");
    for (i, (_, kind, what)) in ev.iter().enumerate() {
        assert_eq!(kind, "worker died");
        assert_eq!(
            what,
            &format!("worker died: prefill #0 rank {i} queue 3 (envelope_tp_mismatch)")
        );
    }
    let (at_s, _, what) = &ev[0];
    // The recorded time is the knock-on's start: healthy decodes 2 and 3 hash to a dead queue
    // (sglang's `session_port_sum % queue_size`), so their requests whose KV was ready after
    // the death all time out, and one transferred before it completed.
    let death_ns = (at_s * 1e9) as u64;
    let (mut before, mut after) = (0, 0);
    for r in common::read_csv(&dir.join("requests.csv")) {
        if !matches!(common::num(&r, "decode_instance"), Some(2 | 3)) {
            continue;
        }
        if common::num(&r, "prefill_end_ns").is_some_and(|t| t > death_ns + 1_000_000) {
            assert_eq!(r["outcome"], "failed", "{r:?}");
            assert_eq!(r["error_kind"], "waiting_timeout", "{r:?}");
            after += 1;
        } else if common::num(&r, "transfer_end_ns").is_some_and(|t| t + 1_000_000 < death_ns) {
            assert_eq!(r["outcome"], "completed", "{r:?}");
            before += 1;
        }
    }
    assert!(before >= 1 && after >= 40, "{before} before, {after} after");
    for chart in TIME_CHARTS {
        let t = svg_texts(&dir.join(format!("charts/{chart}.svg")));
        // Deaths at one time share a marker: "… (envelope_tp_mismatch) (+1 more)".
        assert!(
            t.iter().any(|x| x.starts_with(what.as_str())),
            "{chart}: {t:?}"
        );
    }
    // Failures appear in the throughput chart.
    let t = svg_texts(&dir.join("charts/throughput.svg"));
    assert!(t.contains(&"failed/s (103 in all)".to_string()), "{t:?}");
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("<h2>Events</h2>"));
    assert!(html.contains("worker died: prefill #0 rank 1 queue 3 (envelope_tp_mismatch)"));
}

#[test]
fn a_crash_and_its_restart_are_marked_and_the_slo_drawn() {
    let dir = common::tmpdir("story-decode-crash");
    common::run(
        "scenarios/faults/decode-crash.toml",
        &["slo.ttft_ms=100", "slo.tpot_ms=5"],
        &dir,
    );
    let ev = events(&dir);
    let want = [
        (15.0, "fault", "crash decode #2"),
        (35.0, "recovery", "restart decode #2"),
    ];
    assert_eq!(ev.len(), want.len(), "{ev:?}");
    for ((t, k, w), (wt, wk, ww)) in ev.iter().zip(want) {
        assert_eq!((*t, k.as_str(), w.as_str()), (wt, wk, ww));
    }
    for chart in TIME_CHARTS {
        let t = svg_texts(&dir.join(format!("charts/{chart}.svg")));
        for (_, _, w) in want {
            assert!(t.contains(&w.to_string()), "{chart}: no {w:?} in {t:?}");
        }
    }
    for chart in ["ttft_cdf", "tpot_cdf", "outcomes"] {
        let t = svg_texts(&dir.join(format!("charts/{chart}.svg")));
        assert!(
            !t.iter().any(|x| x.contains("crash decode")),
            "{chart}: {t:?}"
        );
    }
    let ttft = svg_texts(&dir.join("charts/ttft_cdf.svg"));
    assert!(ttft.contains(&"SLO ≤ 100 ms".to_string()), "{ttft:?}");
    assert!(
        ttft.iter().any(|t| t.starts_with("SLO ≤ 100 ms (")),
        "{ttft:?}"
    );
    let tpot = svg_texts(&dir.join("charts/tpot_cdf.svg"));
    assert!(tpot.contains(&"SLO ≤ 5 ms".to_string()), "{tpot:?}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let failed = summary["requests"]["failed"].as_u64().unwrap();
    assert!(failed > 0, "the crash fails requests");
    let t = svg_texts(&dir.join("charts/throughput.svg"));
    assert!(t.contains(&format!("failed/s ({failed} in all)")), "{t:?}");
    assert!(t.contains(&"corrupted/s: none".to_string()), "{t:?}");
}

#[test]
fn a_run_without_faults_has_no_events_and_no_markers() {
    let dir = common::tmpdir("story-calm");
    common::run("scenarios/quickstart.toml", &["run.duration_s=5"], &dir);
    assert!(events(&dir).is_empty());
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    assert!(!md.contains("## Events"));
    let t = svg_texts(&dir.join("charts/throughput.svg"));
    assert!(
        !t.iter().any(|x| x == "fault" || x == "worker died"),
        "{t:?}"
    );
    assert!(t.contains(&"failed/s: none".to_string()), "{t:?}");
}

/// The HTML report shows what summary.json says of speculative decoding (per pool: what sglang
/// resolved, the accept length measured beside the model's) and of the transfers'
/// fragmentation (first vs last tenth); a run without speculation has no such section.
#[test]
fn the_report_shows_speculation_and_fragmentation() {
    let dir = common::tmpdir("report-spec");
    let s = common::run(
        "scenarios/production/speculative-decoding.toml",
        &["run.duration_s=20"],
        &dir,
    );
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(
        html.contains("<h2>Speculative decoding</h2>"),
        "no speculative section"
    );
    let decode = s
        .speculative
        .iter()
        .find(|x| x.role == "decode")
        .expect("a decode pool speculates");
    let shown = format!(
        "{:.2} ({:.2})",
        decode.accept_length_mean.unwrap(),
        decode.accept_length_model.unwrap()
    );
    assert!(
        html.contains(&shown),
        "accept length {shown} not in the report"
    );
    assert!(html.contains("<h2>KV transfer fragmentation</h2>"));
    let plain = common::tmpdir("report-plain");
    common::run("scenarios/quickstart.toml", &["run.duration_s=10"], &plain);
    let html = std::fs::read_to_string(plain.join("index.html")).unwrap();
    assert!(!html.contains("<h2>Speculative decoding</h2>"));
}

/// Issue 41: the report's configuration shows every flag the scenario sets, as the launch line
/// writes it — HiCache, its storage backend and prefetch policy, the decode offload — and a DP
/// attention pool as instances × DP ranks (each rank its own server), not one instance a rank.
#[test]
fn the_report_shows_every_flag_and_dp_ranks() {
    let dir = common::tmpdir("report-flags");
    common::run("scenarios/store/decode-offload.toml", &[], &dir);
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    for flag in [
        "--enable-hierarchical-cache",
        "--hicache-storage-backend mooncake",
        "--hicache-storage-prefetch-policy wait_complete",
        "--disaggregation-decode-enable-offload-kvcache",
    ] {
        assert!(html.contains(flag), "{flag} not in index.html");
        assert!(md.contains(flag), "{flag} not in summary.md");
    }
    // Each flag once: the resolved ones are not written again.
    assert_eq!(html.matches("--page-size").count(), 2, "two pools");
    let dp = common::tmpdir("report-dp-ranks");
    common::run("scenarios/moe/lmsys-prefill-ep32.toml", &[], &dp);
    let html = std::fs::read_to_string(dp.join("index.html")).unwrap();
    assert!(
        html.contains("1 × 32 DP ranks (servers 0–31)"),
        "prefill ranks"
    );
    assert!(
        html.contains("1 × 72 DP ranks (servers 32–103)"),
        "decode ranks"
    );
}

/// Rows of a `| instance | pool | role | requests | completed | … |` table in Markdown text:
/// (requests, completed) per instance.
fn per_instance(md: &str) -> Vec<(u64, u64)> {
    let Some(table) = md.split("## Per instance").nth(1) else {
        return Vec::new();
    };
    table
        .lines()
        .skip_while(|l| !l.starts_with("|---") && !l.starts_with("|--"))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let c: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (c[3].parse().unwrap(), c[4].parse().unwrap())
        })
        .collect()
}

/// A colocated server is a row's prefill and its decode instance at once: the per-instance
/// tables of `summary.md` and of `pdsim explain --markdown` count each request once, so
/// their requests sum to the arrivals (they read twice the arrivals before).
#[test]
fn a_colocated_servers_requests_are_counted_once_per_instance() {
    let dir = common::tmpdir("colocated-per-instance");
    let s = common::run(
        "scenarios/calibration/sharegpt-colocated.toml",
        &["run.duration_s=20", "pools.server.instances=2"],
        &dir,
    );
    let arrived = s.requests.arrived;
    assert!(arrived > 50, "{arrived}");
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let rows = per_instance(&md);
    assert_eq!(rows.len(), 2, "{md}");
    assert_eq!(rows.iter().map(|r| r.0).sum::<u64>(), arrived, "{rows:?}");
    assert_eq!(
        rows.iter().map(|r| r.1).sum::<u64>(),
        s.requests.completed,
        "{rows:?}"
    );
    let (code, out, err) = common::pdsim(&["explain", dir.to_str().unwrap(), "--markdown"]);
    assert_eq!(code, 0, "{err}");
    let rows = per_instance(&out);
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows.iter().map(|r| r.0).sum::<u64>(), arrived, "{rows:?}");
}
