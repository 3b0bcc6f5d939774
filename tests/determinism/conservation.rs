//! Every arrived request ends in exactly one outcome, including runs cut by the drain timeout.

use crate::common;
use common::*;

fn check(scenario: &str, sets: &[&str], name: &str) -> pdsim::report::Summary {
    let dir = tmpdir(name);
    let s = run(scenario, sets, &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    let r = &s.requests;
    assert_eq!(rows.len() as u64, r.arrived, "one row per arrived request");
    assert_eq!(
        r.arrived,
        r.completed + r.failed + r.corrupted + r.unfinished + r.aborted,
        "outcomes partition the arrivals"
    );
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            num(row, "id"),
            Some(i as u64),
            "rows in id order, each id once"
        );
        let outcome = row["outcome"].as_str();
        assert!(
            ["completed", "failed", "corrupted", "unfinished", "aborted"].contains(&outcome),
            "{outcome}"
        );
        let finished = num(row, "finish_ns");
        match outcome {
            "completed" | "corrupted" => {
                let (a, ft, f) = (
                    num(row, "arrival_ns").unwrap(),
                    num(row, "first_token_ns").unwrap(),
                    finished.unwrap(),
                );
                assert!(a <= ft && ft <= f, "times in order: {row:?}");
                assert!(row["error_kind"].is_empty());
            }
            "failed" => assert!(!row["error_kind"].is_empty() && finished.is_some()),
            "aborted" => assert!(row["error_kind"].is_empty() && finished.is_some()),
            _ => assert!(
                finished.is_none(),
                "an unfinished request has no finish time"
            ),
        }
    }
    let count = |o: &str| rows.iter().filter(|r| r["outcome"] == o).count() as u64;
    assert_eq!(count("completed"), r.completed);
    assert_eq!(count("failed"), r.failed);
    assert_eq!(count("unfinished"), r.unfinished);
    assert_eq!(count("aborted"), r.aborted);
    s
}

#[test]
fn client_aborts_are_conserved_under_both_router_profiles() {
    // Clients that give up mid-run, and orphans of prefill timeouts under the old router.
    for p in ["decode_waits", "cancel_paired"] {
        let set = format!("router.abort_propagation=\"{p}\"");
        let s = check(
            "scenarios/production/client-aborts.toml",
            &[&set],
            &format!("aborts-{p}"),
        );
        assert!(s.requests.aborted > 0, "{p}: {:?}", s.requests);
    }
    // Requests whose pages leak (sglang before PR #9817) are still aborted requests, once.
    let s = check("scenarios/production/abort-leak.toml", &[], "aborts-leak");
    assert!(s.aborts.unwrap().decode_leaked.unwrap().requests > 0);
}

#[test]
fn a_healthy_run_completes_every_request() {
    let s = check("scenarios/quickstart.toml", &[], "healthy");
    assert_eq!(s.requests.completed, s.requests.arrived);
    assert!(!s.sim.cut_by_drain_timeout);
}

#[test]
fn a_run_cut_by_the_drain_timeout_accounts_for_every_request() {
    // Several times the traffic one small cluster can serve, and 5 s to drain.
    let s = check(
        "scenarios/quickstart.toml",
        &[
            "workload.arrival={ process = \"poisson\", rate_per_s = 200 }",
            "run.duration_s=20",
            "run.drain_timeout_s=5",
        ],
        "cut",
    );
    assert!(s.sim.cut_by_drain_timeout);
    assert!(s.requests.unfinished > 0, "{:?}", s.requests);
    assert!(s.requests.completed > 0);
}

#[test]
fn timeouts_fail_requests_and_conserve_them() {
    // Decode KV so small that most requests wait in the prealloc queue past the bootstrap
    // timeout; some wait for their transfer past the waiting timeout.
    let s = check(
        "scenarios/quickstart.toml",
        &[
            "pools.decode.server.mem_fraction_static=0.109",
            "pools.decode.instances=1",
            "sglang.bootstrap_timeout_s=2",
            "sglang.waiting_timeout_s=1",
            "run.duration_s=20",
        ],
        "timeouts",
    );
    assert!(s.requests.failed > 0, "{:?}", s.requests);
    assert!(
        s.errors.iter().any(|e| e.kind == "bootstrap_timeout"),
        "{:?}",
        s.errors
    );
}
