//! The blacklist's failed-session probe (`SGLANG_ENABLE_FAILED_SESSION_PROBE`,
//! `MooncakeKVManager._failed_session_probe_loop`; `docs/sglang-pd.md` §26.5) on
//! `scenarios/faults/blacklist-probe.toml`: a decode's only NIC is down from 9.6 s to 20 s.

use crate::common;
use common::*;

use std::collections::BTreeMap;

type Row = BTreeMap<String, String>;

const PROBE: &str = "scenarios/faults/blacklist-probe.toml";

/// The same cluster without the probe: the link-down scenario with one NIC a node (same
/// seed, workload and faults).
const NO_PROBE: (&str, &str) = ("scenarios/faults/link-down.toml", "fabric.nics_per_node=1");

fn rows(sets: &[&str], tag: &str) -> (pdsim::report::Summary, Vec<Row>) {
    let dir = tmpdir(&format!("probe-{tag}"));
    let s = run(PROBE, sets, &dir);
    (s, read_csv(&dir.join("requests.csv")))
}

fn rows_without_probe(tag: &str) -> (pdsim::report::Summary, Vec<Row>) {
    let dir = tmpdir(&format!("probe-{tag}"));
    let s = run(NO_PROBE.0, &[NO_PROBE.1], &dir);
    (s, read_csv(&dir.join("requests.csv")))
}

/// Without the probe a blacklisted session stays blacklisted until its decode registers
/// again, which a link fault never makes it do: requests routed to that decode after the link
/// is back still fail with `session_blacklisted`. With a pass every 5 s, the pass at 20 s —
/// the moment the link is back — finds the path up: no request that arrives from 20 s on
/// fails, and the arrivals before the fault are the same in both runs.
#[test]
fn the_probe_takes_a_healed_session_off_the_blacklist() {
    let (off, off_rows) = rows_without_probe("off");
    let (on, on_rows) = rows(&[], "on");
    assert_eq!(off.requests.arrived, on.requests.arrived);
    let late_failures = |rows: &[Row]| {
        rows.iter()
            .filter(|r| r["arrival_ns"].parse::<u64>().unwrap() >= 20_000_000_000)
            .filter(|r| r["outcome"] != "completed")
            .inspect(|r| assert_eq!(r["error_kind"], "session_blacklisted", "{r:?}"))
            .count()
    };
    assert!(late_failures(&off_rows) > 5, "{:?}", off.requests);
    assert_eq!(late_failures(&on_rows), 0, "{:?}", on.requests);
    assert!(on.requests.completed > off.requests.completed);
    // The fault's own casualties are the same: the batches in flight at 9.6 s.
    let kind = |s: &pdsim::report::Summary, k: &str| {
        s.errors
            .iter()
            .find(|e| e.kind.as_str() == k)
            .map_or(0, |e| e.count)
    };
    assert_eq!(kind(&on, "transfer_failed"), kind(&off, "transfer_failed"));
    assert!(kind(&on, "transfer_failed") > 0);
}

/// A probe pass that finds the path still down keeps the session: with a pass every 4 s the
/// passes at 12 s and 16 s meet a dead link, the one at 20 s a live one, so the same requests
/// come back as with 5 s (both first passes after the repair are at 20 s).
#[test]
fn a_pass_that_meets_a_dead_link_keeps_the_session() {
    let (five, _) = rows(&[], "five");
    let (four, _) = rows(&["sglang.failed_session_probe_interval_s=4"], "four");
    assert_eq!(four.requests, five.requests);
    // With sglang's default of 30 s the first pass after the repair is at 30 s, when arrivals
    // end: only requests whose chunks the workers meet after it come back — more than
    // without the probe, fewer than with 5 s.
    let (thirty, _) = rows(&["sglang.failed_session_probe_interval_s=30"], "thirty");
    let (off, _) = rows_without_probe("off2");
    assert!(
        off.requests.completed < thirty.requests.completed
            && thirty.requests.completed < five.requests.completed,
        "{:?} {:?} {:?}",
        off.requests,
        thirty.requests,
        five.requests
    );
}
