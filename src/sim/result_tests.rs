//! One run result: every caller that turns a run into a summary (the `run` verb, a sweep or
//! plan row, the capacity diagnosis; Python goes through the `run` verb) reads the one
//! [`super::World::run`] builds, so the optional sections survive into each.

use std::path::Path;

/// The summary of `path` with `sets` as each caller builds it, as JSON.
fn summaries(path: &str, sets: &[&str]) -> [(&'static str, serde_json::Value); 3] {
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_string()).collect();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let sc = crate::scenario::load(&file, &sets).expect("scenario loads");
    let json = |s: crate::metrics::summary::Summary| serde_json::to_value(s).expect("serializes");
    [
        ("run", json(crate::app::run::summarize(&sc).expect("runs"))),
        ("plan", json(crate::plan::summarize(&sc).expect("runs"))),
        (
            "capacity diagnosis",
            json(crate::diagnose::capacity::simulate(&sc).expect("runs")),
        ),
    ]
}

/// Each caller's summary equals the run verb's and carries `sections`, each non-empty.
fn same_with(path: &str, sets: &[&str], sections: &[&str]) {
    let all = summaries(path, sets);
    let (_, run) = &all[0];
    for key in sections {
        let v = &run[*key];
        assert!(
            !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)),
            "{path}: the run's summary has no `{key}` section"
        );
    }
    for (who, s) in &all[1..] {
        for key in sections {
            assert_eq!(&s[*key], &run[*key], "{path}: {who} differs in `{key}`");
        }
        assert_eq!(s, run, "{path}: {who}'s summary differs from the run's");
    }
    // A sweep (and plan, and Python's `Sweep.rows`) row is read off the plan's summary: its
    // counts are the run's, aborts included, so the row conserves.
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_string()).collect();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let sc = crate::scenario::load(&file, &sets).expect("scenario loads");
    let row = crate::plan::SweepRow::of(&sc, &crate::plan::summarize(&sc).expect("runs"));
    let r = &run["requests"];
    // A zero count is left out of `summary.json`.
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    assert_eq!(
        row.arrived,
        Some(n("arrived")),
        "{path}: the row's arrivals"
    );
    assert_eq!(row.aborted, Some(n("aborted")), "{path}: the row's aborts");
    let parts = ["completed", "failed", "corrupted", "unfinished", "aborted"];
    assert_eq!(
        n("arrived"),
        parts.iter().map(|k| n(k)).sum::<u64>(),
        "{path}: the run conserves"
    );
    assert!(n("arrived") > 0, "{path}: nothing arrived");
}

#[test]
fn speculative_and_abort_sections_survive_into_every_summary() {
    same_with(
        "scenarios/production/speculative-decoding.toml",
        &[
            "workload.client_timeout.dist=\"lognormal\"",
            "workload.client_timeout.mean_s=2",
            "workload.client_timeout.cv=0.5",
            "run.duration_s=20",
        ],
        &["speculative", "aborts"],
    );
    // The timeouts bite, so the aborted count the row must carry is not zero.
    let [(_, run), ..] = summaries(
        "scenarios/production/speculative-decoding.toml",
        &[
            "workload.client_timeout.dist=\"lognormal\"",
            "workload.client_timeout.mean_s=2",
            "workload.client_timeout.cv=0.5",
            "run.duration_s=20",
        ],
    );
    assert!(
        run["requests"]["aborted"].as_u64() > Some(0),
        "{}",
        run["requests"]
    );
}

#[test]
fn session_store_and_router_sections_survive_into_every_summary() {
    same_with(
        "scenarios/production/multi-turn-sessions.toml",
        &["run.duration_s=30"],
        &["sessions", "kv_store", "router", "prefix_cache"],
    );
}
