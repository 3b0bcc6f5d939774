//! `pdsim run --trace-events`: `trace.json` is valid trace-event JSON whose spans nest in time,
//! with a named track per instance and per transfer shard, a marker per fault and recovery and
//! one per transfer-worker death on its shard's track; without the
//! flag nothing changes (no file, the other outputs byte-identical).

use crate::common;

use std::collections::BTreeMap;

use serde_json::Value;

fn run(scenario: &str, dir: &std::path::Path, trace: bool) {
    let mut args = vec!["run", scenario, "--out", dir.to_str().unwrap(), "-q"];
    if trace {
        args.push("--trace-events");
    }
    let (code, _, err) = common::pdsim(&args);
    assert_eq!(code, 0, "{err}");
}

/// Checks the async spans: per (pid, cat, local id), `b`/`e` pairs form a stack with matching
/// names, time never goes backwards, and a child lies within its parent. Returns the spans.
fn check_nesting(events: &[Value]) -> usize {
    let mut stacks: BTreeMap<(u64, String, u64), Vec<(String, f64)>> = BTreeMap::new();
    let mut last: BTreeMap<(u64, String, u64), f64> = BTreeMap::new();
    let mut spans = 0;
    for e in events {
        let ph = e["ph"].as_str().unwrap();
        if ph != "b" && ph != "e" {
            continue;
        }
        let key = (
            e["pid"].as_u64().unwrap(),
            e["cat"].as_str().unwrap().to_string(),
            e["id2"]["local"].as_u64().unwrap(),
        );
        let ts = e["ts"].as_f64().unwrap();
        let name = e["name"].as_str().unwrap().to_string();
        let prev = last.insert(key.clone(), ts).unwrap_or(f64::MIN);
        assert!(ts >= prev, "time went backwards in {key:?}: {e}");
        let stack = stacks.entry(key.clone()).or_default();
        if ph == "b" {
            if let Some((_, parent_start)) = stack.last() {
                assert!(ts >= *parent_start, "child starts before its parent: {e}");
            }
            stack.push((name, ts));
        } else {
            let (open, start) = stack
                .pop()
                .unwrap_or_else(|| panic!("an end with nothing open: {e}"));
            assert_eq!(open, name, "ends {name} while {open} is open in {key:?}");
            assert!(ts >= start, "ends before it starts: {e}");
            spans += 1;
        }
    }
    for (k, s) in &stacks {
        assert!(s.is_empty(), "{k:?} left open: {s:?}");
    }
    spans
}

#[test]
fn trace_json_is_valid_and_spans_nest_in_time() {
    let out = common::tmpdir("trace");
    // (scenario, faults, recoveries, worker deaths)
    for (scenario, faults, recoveries, deaths) in [
        ("scenarios/faults/decode-crash.toml", 1, 1, 0),
        ("scenarios/pd/dead-shard-stalls-healthy.toml", 0, 0, 2),
        ("scenarios/pd/tp-mismatch-unguarded.toml", 0, 0, 0),
    ] {
        let dir = out.join(scenario.replace('/', "_"));
        run(scenario, &dir, true);
        let text = std::fs::read_to_string(dir.join("trace.json")).unwrap();
        let v: Value = serde_json::from_str(&text).expect("trace.json is JSON");
        let events = v["traceEvents"].as_array().expect("a traceEvents array");
        for e in events {
            let ph = e["ph"].as_str().expect("every event has a phase");
            assert!(["M", "b", "e", "i"].contains(&ph), "{e}");
            assert!(e["pid"].is_u64(), "{e}");
            if ph != "M" {
                assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
            }
        }
        let spans = check_nesting(events);
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        let arrived = summary["requests"]["arrived"].as_u64().unwrap() as usize;
        assert!(
            spans >= arrived,
            "{scenario}: {spans} spans for {arrived} requests"
        );
        // A named track per instance and per transfer shard.
        let names: Vec<&str> = events
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with("prefill 0 (pool")),
            "{names:?}"
        );
        assert!(names.iter().any(|n| n.starts_with("decode ")), "{names:?}");
        assert!(
            names.contains(&"prefill 0 rank 0 transfer queue 1"),
            "{names:?}"
        );
        let markers = |prefix: &str| {
            events
                .iter()
                .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with(prefix))
                .count()
        };
        assert_eq!(markers("fault: "), faults, "{scenario}");
        assert_eq!(markers("recovery: "), recoveries, "{scenario}");
        assert_eq!(markers("worker died: "), deaths, "{scenario}");
        // A worker's death sits on its shard's track, named after the shard.
        for d in events
            .iter()
            .filter(|e| e["ph"] == "i" && e["name"].as_str().unwrap().starts_with("worker died"))
        {
            let track = events
                .iter()
                .find(|e| e["name"] == "process_name" && e["pid"] == d["pid"])
                .map(|e| e["args"]["name"].as_str().unwrap())
                .unwrap();
            // "worker died: prefill #0 rank 0 queue 3 (…)" on "prefill 0 rank 0 transfer queue
            // 3"; a death on another rank sits on the prefill instance's own track.
            let name = d["name"].as_str().unwrap();
            let after = |key: &str| {
                name.split(key)
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
                    .to_string()
            };
            let (rank, queue) = (after(" rank "), after(" queue "));
            if rank == "0" {
                assert_eq!(
                    track,
                    format!("prefill 0 rank 0 transfer queue {queue}"),
                    "{d}"
                );
            } else {
                assert!(track.starts_with("prefill 0 (pool"), "{d} on {track}");
            }
            assert_eq!(d["s"], "p", "{d}");
        }
        let failed = summary["requests"]["failed"].as_u64().unwrap() as usize;
        let corrupted = summary["requests"]["corrupted"].as_u64().unwrap() as usize;
        assert_eq!(markers("failed: "), failed, "{scenario}");
        assert_eq!(markers("corrupted "), corrupted, "{scenario}");
    }
}

#[test]
fn without_the_flag_there_is_no_trace_and_results_are_unchanged() {
    let out = common::tmpdir("trace-off");
    let (a, b) = (out.join("with"), out.join("without"));
    run("scenarios/faults/decode-crash.toml", &a, true);
    run("scenarios/faults/decode-crash.toml", &b, false);
    assert!(a.join("trace.json").is_file());
    assert!(!b.join("trace.json").exists());
    for f in [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "links.csv",
    ] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs with --trace-events"
        );
    }
    let (code, _, err) = common::pdsim(&[
        "run",
        "scenarios/faults/decode-crash.toml",
        "--out",
        out.to_str().unwrap(),
        "--summary-only",
        "--trace-events",
    ]);
    assert_eq!(code, 2, "{err}");
}
