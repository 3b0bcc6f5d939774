//! Coalesced decode runs against the step-by-step reference: every request row, timeseries
//! row, link row and summary figure is the same with coalescing on and off; only the number
//! of events differs (and must fall where decode steps dominate).
//!
//! The scenarios cover what cuts a run: arrivals and landings, request ends, retraction under
//! a tight pool, crashes and restarts, lossy links, a measured profile, heterogeneous TP, a
//! unified (shared-budget) pool, batch caps, overload with a blocked prealloc queue, and a run
//! cut by its drain timeout.

use std::path::Path;

use crate::metrics::VecSink;

/// Runs `path` with `sets`, coalescing on or off: the rows, the summary as JSON without
/// `sim.events`, and the event count.
fn run(path: &str, sets: &[&str], coalesce: bool) -> (VecSink, serde_json::Value, u64) {
    let mut sink = VecSink::default();
    let (summary, events) = run_into(path, sets, coalesce, &mut sink);
    (sink, summary, events)
}

/// [`run`] into any sink: the summary as JSON without `sim.events`, and the event count.
fn run_into(
    path: &str,
    sets: &[&str],
    coalesce: bool,
    sink: &mut dyn crate::metrics::Sink,
) -> (serde_json::Value, u64) {
    let sets: Vec<String> = sets.iter().map(|s| (*s).to_string()).collect();
    let sc = crate::scenario::load(Path::new(path), &sets).expect("scenario loads");
    let (mut summary, events) = {
        let mut world = super::World::new(&sc, sink);
        for d in world.decodes.iter_mut() {
            d.set_coalescing(coalesce);
        }
        let super::RunResult { stats, summary, .. } = world.run().expect("runs");
        (serde_json::to_value(&summary).unwrap(), stats.events)
    };
    summary["sim"]
        .as_object_mut()
        .expect("summary has sim")
        .remove("events");
    (summary, events)
}

/// Asserts coalesced and step-by-step runs agree; returns (events on, events off).
fn same(path: &str, sets: &[&str]) -> (u64, u64) {
    let (a, sa, ea) = run(path, sets, true);
    let (b, sb, eb) = run(path, sets, false);
    let what = format!("{path} {sets:?}");
    assert_eq!(a.requests.len(), b.requests.len(), "{what}: request rows");
    for (x, y) in a.requests.iter().zip(&b.requests) {
        assert_eq!(format!("{x:?}"), format!("{y:?}"), "{what}: request row");
    }
    assert_eq!(
        a.timeseries.len(),
        b.timeseries.len(),
        "{what}: timeseries rows"
    );
    for (x, y) in a.timeseries.iter().zip(&b.timeseries) {
        assert_eq!(format!("{x:?}"), format!("{y:?}"), "{what}: timeseries row");
    }
    assert_eq!(
        format!("{:?}", a.links),
        format!("{:?}", b.links),
        "{what}: links"
    );
    assert_eq!(sa, sb, "{what}: summary");
    assert!(ea <= eb, "{what}: coalescing added events ({ea} > {eb})");
    (ea, eb)
}

#[test]
fn coalesced_runs_match_the_step_by_step_reference() {
    let short = ["run.duration_s=20"];
    let cases: &[(&str, &[&str])] = &[
        ("scenarios/quickstart.toml", &short),
        (
            "scenarios/quickstart.toml",
            &[
                "run.duration_s=15",
                "run.seed=3",
                "pools.decode.server.page_size=1",
            ],
        ),
        (
            "scenarios/quickstart.toml",
            &[
                "run.duration_s=15",
                "pools.decode.server.page_size=16",
                "pools.decode.server.max_running_requests=8",
            ],
        ),
        // Overload: queues grow, prealloc blocks, the run is cut by its drain timeout.
        (
            "scenarios/quickstart.toml",
            &[
                "run.duration_s=10",
                "run.drain_timeout_s=3",
                "workload.arrival.rate_per_s=80",
            ],
        ),
        ("scenarios/retraction.toml", &[]),
        // Clients leaving mid-decode cut coalesced runs; orphans hold pages (issue 27).
        ("scenarios/production/client-aborts.toml", &[]),
        (
            "scenarios/production/client-aborts.toml",
            &["router.abort_propagation=\"cancel_paired\""],
        ),
        ("scenarios/faults/decode-crash.toml", &[]),
        ("scenarios/faults/prefill-crash.toml", &[]),
        ("scenarios/faults/lossy-links.toml", &[]),
        ("scenarios/measured-profile.toml", &[]),
        ("scenarios/pd/deepseek-hetero-tp.toml", &[]),
        ("scenarios/pd/unified-healthy.toml", &[]),
        ("scenarios/regression/decode-crash.toml", &[]),
        ("scenarios/regression/healthy-2p2d-8b.toml", &[]),
    ];
    let (mut on, mut off) = (0, 0);
    for (path, sets) in cases {
        let (a, b) = same(path, sets);
        on += a;
        off += b;
    }
    assert!(
        on * 2 < off,
        "coalescing should at least halve these events: {on} vs {off}"
    );
}

/// A decode-dominated point (one prefill feeding ten decodes, long outputs): almost every
/// event was a decode step, so most of them go.
#[test]
fn a_decode_dominated_run_needs_far_fewer_events() {
    let (on, off) = same(
        "scenarios/quickstart.toml",
        &[
            "run.duration_s=30",
            "workload.arrival.rate_per_s=4",
            "pools.prefill.instances=1",
            "pools.decode.instances=10",
        ],
    );
    assert!(on * 4 < off, "{on} vs {off}");
}

/// A sink that drops rows (`--summary-only`) gets no link rows built: the summary is the one a
/// sink keeping every row gets, on scenarios whose links carry bytes and fail.
#[test]
fn a_summary_only_run_gives_the_same_summary() {
    for (path, sets) in [
        ("scenarios/quickstart.toml", &["run.duration_s=10"][..]),
        ("scenarios/faults/lossy-links.toml", &[][..]),
    ] {
        let (rows, kept, _) = run(path, sets, true);
        assert!(!rows.links.is_empty(), "{path}: links carried bytes");
        let (dropped, _) = run_into(path, sets, true, &mut crate::metrics::NullSink);
        assert_eq!(kept, dropped, "{path}");
    }
}
