//! Client disconnects and aborts (`[workload.client_timeout]`, `router.abort_propagation`;
//! docs/sglang-pd.md §21): hand-derived cases on one request, conservation, determinism, and
//! bad keys. Expected values are derived by hand in each test's comment.

use crate::common;
use common::*;

const ONE: &str = "tests/scenarios/abort-one.toml";
const INCIDENT: &str = "scenarios/production/client-aborts.toml";
const S: u64 = 1_000_000_000;

/// The one request's row and the summary.
fn one(
    sets: &[&str],
    name: &str,
) -> (
    std::collections::BTreeMap<String, String>,
    pdsim::report::Summary,
) {
    let dir = tmpdir(name);
    let s = run(ONE, sets, &dir);
    let mut rows = read_csv(&dir.join("requests.csv"));
    assert_eq!(rows.len(), 1);
    (rows.remove(0), s)
}

/// A prefill that times out in Bootstrapping 1 µs after the arrival (decode's page ids need the
/// 100 µs control latency). The request arrives at A = 1 s (constant 1/s); with no serving
/// costs decode preallocates its 640 / 64 = 10 pages at A.
/// - `decode_waits` (before PR #29017): the decode leg lives on and holds its 10 pages until
///   its waiting timeout at A + 10 s: 10 pages × 10 s = 100 page-s, 99.99999 of them after the
///   prefill gave up at A + 1 µs (doom → release 9.999999 s); the client gets decode's error.
/// - `cancel_paired` (sglang main): the request fails at A + 1 µs and decode frees at once: no
///   doomed request holds a page.
#[test]
fn an_orphan_holds_its_decode_pages_exactly_the_waiting_timeout_under_the_old_router() {
    let base = ["sglang.bootstrap_timeout_s=0.000001"];
    let (row, s) = one(
        &[base[0], "router.abort_propagation=\"decode_waits\""],
        "orphan-old",
    );
    assert_eq!(num(&row, "arrival_ns"), Some(S));
    assert_eq!(row["outcome"], "failed");
    assert_eq!(row["error_kind"], "waiting_timeout");
    assert_eq!(num(&row, "finish_ns"), Some(11 * S));
    let a = s.aborts.as_ref().expect("aborts modelled");
    println!("decode_waits: {a:?}");
    assert_eq!(a.orphaned, 1);
    assert_eq!(a.decode.requests, 1);
    assert!(
        (a.decode.page_s - 100.0).abs() < 1e-9,
        "{}",
        a.decode.page_s
    );
    assert!((a.decode.page_s_after_doom - 99.99999).abs() < 1e-9);
    assert!((a.decode.max_held_after_doom_s.unwrap() - 9.999999).abs() < 1e-12);
    assert_eq!(
        a.prefill.requests, 0,
        "the prefill held no page in Bootstrapping"
    );

    let (row, s) = one(
        &[base[0], "router.abort_propagation=\"cancel_paired\""],
        "orphan-new",
    );
    assert_eq!(row["error_kind"], "bootstrap_timeout");
    assert_eq!(num(&row, "finish_ns"), Some(S + 1_000));
    let a = s.aborts.as_ref().expect("aborts modelled");
    println!("cancel_paired: {a:?}");
    assert_eq!(a.orphaned, 0);
    assert_eq!(a.decode.requests, 0);
    assert_eq!(a.decode.page_s_after_doom, 0.0);
}

/// The same orphan whose client gives up after 6 s: it disconnects at A + 6 s with no token
/// yet, so the servers see it at the next 4-s poll of `_wait_one_response` counted from the
/// arrival, A + 8 s; decode held its 10 pages for 8 s (80 page-s).
#[test]
fn a_disconnect_before_the_first_token_is_seen_on_the_next_poll() {
    let (row, s) = one(
        &[
            "sglang.bootstrap_timeout_s=0.000001",
            "router.abort_propagation=\"decode_waits\"",
            "workload.client_timeout.s=6",
        ],
        "orphan-client",
    );
    assert_eq!(row["outcome"], "aborted");
    assert_eq!(row["error_kind"], "");
    assert_eq!(num(&row, "finish_ns"), Some(9 * S));
    let a = s.aborts.as_ref().unwrap();
    println!("{a:?}");
    assert_eq!((a.disconnected, a.aborted, a.orphaned), (1, 1, 1));
    assert_eq!(a.by_stage.len(), 1);
    assert_eq!(a.by_stage[0].stage.as_str(), "orphaned");
    assert!((a.decode.page_s - 80.0).abs() < 1e-9, "{}", a.decode.page_s);
    assert_eq!(s.requests.aborted, 1);
}

/// A request decoding 20,000 tokens whose client leaves after 2 s: decode is streaming, so the
/// closed connection is seen at once (A + 2 s) and nothing is held after it; its whole prompt
/// (640 tokens, no prefix cache) was computed for nobody.
#[test]
fn a_disconnect_while_streaming_aborts_at_once_and_wastes_the_prefill() {
    let (row, s) = one(&["workload.client_timeout.s=2"], "streaming");
    assert_eq!(row["outcome"], "aborted");
    assert_eq!(num(&row, "finish_ns"), Some(3 * S));
    assert!(num(&row, "first_token_ns").is_some());
    let a = s.aborts.as_ref().unwrap();
    println!("{a:?}");
    assert_eq!(
        a.propagation, "cancel_paired",
        "the default is sglang main's"
    );
    assert_eq!(a.by_stage[0].stage.as_str(), "decode");
    assert_eq!(a.wasted_prefill_tokens, 640);
    assert!(a.wasted_prefill_gpu_s > 0.0);
    assert_eq!(a.decode.requests, 1);
    assert_eq!(a.decode.page_s_after_doom, 0.0);
    assert_eq!(a.decode.max_held_after_doom_s, Some(0.0));
    // A deadline the request beats changes nothing but the summary's abort block.
    let (late, s) = one(&["workload.client_timeout.s=100000"], "late");
    assert_eq!(late["outcome"], "completed");
    assert_eq!(s.aborts.unwrap().disconnected, 0);
}

/// Every arrival ends in exactly one outcome with aborts in the mix, under both profiles.
#[test]
fn aborts_are_conserved() {
    for p in ["decode_waits", "cancel_paired"] {
        let dir = tmpdir(&format!("conserve-{p}"));
        let s = run(
            INCIDENT,
            &[&format!("router.abort_propagation=\"{p}\"")],
            &dir,
        );
        let r = &s.requests;
        println!("{p}: {r:?}");
        assert_eq!(
            r.arrived,
            r.completed + r.failed + r.corrupted + r.unfinished + r.aborted
        );
        assert!(r.aborted > 0);
        let rows = read_csv(&dir.join("requests.csv"));
        assert_eq!(rows.len() as u64, r.arrived);
        let count = |o: &str| rows.iter().filter(|x| x["outcome"] == o).count() as u64;
        assert_eq!(count("aborted"), r.aborted);
        let a = s.aborts.as_ref().unwrap();
        assert_eq!(a.aborted, r.aborted);
        assert_eq!(a.by_stage.iter().map(|c| c.count).sum::<u64>(), r.aborted);
        // Every abort is a disconnect the servers saw; a few disconnects end on their own first.
        assert!(a.disconnected >= a.aborted);
        // Aborted rows end, with no error kind, at or after their arrival.
        for x in rows.iter().filter(|x| x["outcome"] == "aborted") {
            assert!(x["error_kind"].is_empty());
            assert!(num(x, "finish_ns").unwrap() >= num(x, "arrival_ns").unwrap());
        }
    }
}

/// The incident: under the old router, decode is held by orphans and completes far fewer.
#[test]
fn the_old_router_turns_a_burst_into_a_stall() {
    let old = run(INCIDENT, &[], &tmpdir("incident-old"));
    let new = run(
        INCIDENT,
        &["router.abort_propagation=\"cancel_paired\""],
        &tmpdir("incident-new"),
    );
    let (a, b) = (old.aborts.unwrap(), new.aborts.unwrap());
    println!("old {:?}\nnew {:?}", old.requests, new.requests);
    assert!(a.orphaned > 100 && b.orphaned == 0);
    assert!(a.decode.page_s_after_doom > 1000.0 * b.decode.page_s_after_doom.max(1.0));
    assert!(new.requests.completed > 2 * old.requests.completed);
}

/// Same scenario and seed, same bytes; and deadlines draw from their own stream, so turning
/// them on moves no arrival or length.
#[test]
fn aborts_are_deterministic_and_shift_no_other_draw() {
    let files = [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "links.csv",
    ];
    let (a, b) = (tmpdir("det-a"), tmpdir("det-b"));
    run(INCIDENT, &[], &a);
    run(INCIDENT, &[], &b);
    for f in files {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between two runs (reproduce: pdsim run {INCIDENT})"
        );
    }
    let (off, on) = (tmpdir("draws-off"), tmpdir("draws-on"));
    run("scenarios/quickstart.toml", &[], &off);
    run(
        "scenarios/quickstart.toml",
        &["workload.client_timeout={ dist = \"exponential\", mean_s = 3.0 }"],
        &on,
    );
    let (x, y) = (
        read_csv(&off.join("requests.csv")),
        read_csv(&on.join("requests.csv")),
    );
    assert_eq!(x.len(), y.len());
    for (r, q) in x.iter().zip(&y) {
        for c in [
            "arrival_ns",
            "input_tokens",
            "output_tokens",
            "bootstrap_room",
        ] {
            assert_eq!(r[c], q[c], "{c} of request {}", r["id"]);
        }
    }
    assert!(y.iter().any(|r| r["outcome"] == "aborted"));
}

/// Every bad abort key is exit 2 naming the key and what would be valid.
#[test]
fn bad_abort_keys_name_themselves() {
    let cases: &[(&str, &[&str])] = &[
        (
            "router.abort_propagation=\"decode_wait\"",
            &["router.abort_propagation", "cancel_paired", "decode_waits"],
        ),
        (
            "workload.client_timeout.s=-1",
            &["workload.client_timeout.s", "positive"],
        ),
        (
            "workload.client_timeout={ dist = \"gamma\", mean_s = 3.0 }",
            &["workload.client_timeout.dist", "exponential", "lognormal"],
        ),
        (
            "workload.client_timeout={ dist = \"lognormal\", mean_s = 3.0 }",
            &["workload.client_timeout.cv"],
        ),
        (
            "workload.client_timeout={ dist = \"exponential\" }",
            &["workload.client_timeout.mean_s"],
        ),
        (
            "workload.client_timeout={ s = 3.0, dist = \"exponential\", mean_s = 3.0 }",
            &["workload.client_timeout.dist", "not both"],
        ),
        (
            "workload.client_timeout={ s = 3.0, cv = 1.0 }",
            &["workload.client_timeout.cv"],
        ),
        (
            "workload.client_timeout={ mean = 3.0 }",
            &["mean", "mean_s"],
        ),
        (
            "workload.client_timeout={ }",
            &["workload.client_timeout", "s ="],
        ),
        (
            "sglang.decode_queue_abort=\"leaks\"",
            &["sglang.decode_queue_abort", "release", "leak", "#9817"],
        ),
    ];
    for (set, want) in cases {
        let (code, _, err) = pdsim(&[
            "run",
            "scenarios/quickstart.toml",
            "--summary-only",
            "--out",
            &tmpdir("bad").to_string_lossy(),
            "--set",
            set,
        ]);
        println!("{set}: {err}");
        assert_eq!(code, 2, "{set}: {err}");
        for w in *want {
            assert!(err.contains(w), "{set}: {err:?} lacks {w:?}");
        }
    }
    // Colocated servers: no PD legs to propagate to.
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/plan/colocated-8b.toml",
        "--summary-only",
        "--out",
        &tmpdir("bad-colo").to_string_lossy(),
        "--set",
        "workload.client_timeout.s=5",
    ]);
    println!("colocated: {err}");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.client_timeout") && err.contains("colocated"));
}

/// A 120,000-token prompt (1,875 pages of 64 on each side) whose client leaves 1 s after the
/// arrival, mid-prefill: no token yet, so the servers see it at the 4-s poll, A + 4 s; both
/// sides held 1,875 pages for 3 s after the doom (5,625 page-s). Every chunk computed is
/// wasted, the forward running at the abort included (sglang completes it): whole chunks of
/// `chunked_prefill_size` = 8192 tokens.
#[test]
fn a_disconnect_mid_prefill_holds_both_sides_until_the_poll() {
    let (row, s) = one(
        &[
            "workload.client_timeout.s=1",
            "workload.input_tokens={ dist = \"fixed\", value = 120000 }",
        ],
        "mid-prefill",
    );
    assert_eq!(row["outcome"], "aborted");
    assert_eq!(num(&row, "finish_ns"), Some(5 * S));
    let a = s.aborts.unwrap();
    println!("{a:?}");
    assert_eq!(a.by_stage[0].stage.as_str(), "prefill");
    for side in [&a.prefill, &a.decode] {
        assert_eq!(side.requests, 1);
        assert!((side.page_s_after_doom - 5625.0).abs() < 1e-6, "{side:?}");
        assert_eq!(side.max_held_after_doom_s, Some(3.0));
    }
    assert!(a.wasted_prefill_tokens > 0 && a.wasted_prefill_tokens % 8192 == 0);
    assert!(a.wasted_prefill_tokens < 120_000);
}

/// sglang before PR #9817 leaked the KV of a request aborted in decode's waiting queue
/// (`tests/scenarios/abort-leak.toml`). The second request (640 tokens: 640 / 64 = 10 decode
/// pages) is transferred at once and waits behind the first (decode runs one at a time); its
/// first token came from prefill, so decode streams and sees its client leave at exactly
/// 0.1 + 2 = 2.1 s, in the waiting queue.
/// - `leak`: its 10 pages are never given back: 10 pages from 2.1 s to the run's end,
///   10 × (end − 2.1) page-s, and they are still taken when the run ends.
/// - `release` (the default, since #9817): the same abort gives them back; nothing leaks.
#[test]
fn a_request_aborted_in_decodes_waiting_queue_leaks_its_pages_before_pr_9817() {
    const LEAK: &str = "tests/scenarios/abort-leak.toml";
    let mut seen = Vec::new();
    for q in ["leak", "release"] {
        let dir = tmpdir(&format!("abort-leak-{q}"));
        let set = format!("sglang.decode_queue_abort=\"{q}\"");
        let s = run(LEAK, &[&set], &dir);
        let rows = read_csv(&dir.join("requests.csv"));
        assert_eq!(rows[1]["outcome"], "aborted");
        assert_eq!(num(&rows[1], "finish_ns"), Some(2 * S + S / 10));
        assert_eq!(rows[0]["outcome"], "completed");
        let a = s
            .aborts
            .as_ref()
            .expect("the trace's deadlines turn aborts on");
        assert_eq!(a.by_stage.len(), 1);
        assert_eq!(
            (a.by_stage[0].stage.as_str(), a.by_stage[0].count),
            ("decode_queue", 1)
        );
        let (arrived, completed, aborted) =
            (s.requests.arrived, s.requests.completed, s.requests.aborted);
        assert_eq!((arrived, completed, aborted), (2, 1, 1), "conserved");
        let end_s = s.sim.simulated_s;
        println!(
            "{q}: end {end_s} s, leaked {:?}, decode {:?}",
            a.decode_leaked, a.decode
        );
        match q {
            "leak" => {
                let l = a.decode_leaked.expect("the leak profile reports its pages");
                assert_eq!((l.requests, l.pages), (1, 10));
                let want = 10.0 * (end_s - 2.1);
                assert!((l.page_s - want).abs() < 1e-6, "{} vs {want}", l.page_s);
                assert_eq!(
                    a.decode.requests, 0,
                    "a leaked request never released pages"
                );
            }
            _ => {
                assert!(a.decode_leaked.is_none());
                assert_eq!(a.decode.requests, 1, "released at its abort");
                assert_eq!(
                    a.decode.page_s_after_doom, 0.0,
                    "freed the moment it was seen"
                );
            }
        }
        seen.push(num(&rows[0], "finish_ns"));
        let _ = std::fs::remove_dir_all(dir);
    }
    // The first request runs alone either way: the leak changes nothing it needs.
    assert_eq!(seen[0], seen[1]);
}

/// `scenarios/production/abort-leak.toml`: under `leak` (sglang before PR #9817) decode loses
/// most of its pool to requests that no longer exist and prefills keep timing out long after
/// the burst; with the fix (`release`) nothing leaks and the timeouts stay in the burst.
/// `explain` names the leak, its size and the fix.
#[test]
fn leaked_pages_keep_decode_starved_after_the_burst_and_the_fix_ends_it() {
    const SC: &str = "scenarios/production/abort-leak.toml";
    // Bootstrap timeouts that fail after 200 s: the burst (60–120 s) and its wake are over.
    let late = |dir: &std::path::Path| {
        read_csv(&dir.join("requests.csv"))
            .iter()
            .filter(|r| r["error_kind"] == "bootstrap_timeout")
            .filter(|r| num(r, "finish_ns").unwrap() > 200 * S)
            .count()
    };
    let dir = tmpdir("abort-leak-prod");
    let s = run(SC, &[], &dir);
    let l = s
        .aborts
        .as_ref()
        .unwrap()
        .decode_leaked
        .expect("leak profile");
    let record: pdsim::report::schema::RunRecord =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let total: u64 = record
        .instances
        .iter()
        .filter(|i| i.role == "decode")
        .map(|i| u64::from(i.kv_pages))
        .sum();
    let late_leak = late(&dir);
    println!("leak: {l:?} of {total} pages; late bootstrap timeouts {late_leak}");
    assert!(
        l.requests > 0 && 2 * l.pages > total,
        "most of the pool leaks"
    );
    assert!(late_leak > 0);
    let (code, out, _) = pdsim(&[std::ffi::OsStr::new("explain"), dir.as_os_str()]);
    assert_eq!(code, 0);
    assert!(
        out.contains("PR #9817") && out.contains(&format!("{} pages", l.pages)),
        "{out}"
    );

    let fixed = tmpdir("abort-leak-prod-fixed");
    let s = run(SC, &["sglang.decode_queue_abort=\"release\""], &fixed);
    assert!(s.aborts.as_ref().unwrap().decode_leaked.is_none());
    let late_fixed = late(&fixed);
    println!("release: late bootstrap timeouts {late_fixed}");
    assert_eq!(late_fixed, 0);
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(fixed);
}
