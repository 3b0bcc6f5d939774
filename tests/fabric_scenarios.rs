//! The fabric in the whole simulator: the Mooncake calibration scenario and the fault
//! scenarios of `scenarios/faults/`, with their outcome counts and conservation.

mod common;
use common::*;

type Row = std::collections::BTreeMap<String, String>;

fn run_all(path: &str, name: &str) -> (pdsim::report::Summary, Vec<Row>, Vec<Row>) {
    let dir = tmpdir(name);
    let s = run(path, &[], &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    let links = read_csv(&dir.join("links.csv"));
    // Conservation: one row per arrival, each in exactly one outcome, counts agree.
    assert_eq!(rows.len() as u64, s.requests.arrived);
    let r = &s.requests;
    assert_eq!(
        r.arrived,
        r.completed + r.failed + r.corrupted + r.unfinished
    );
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(num(row, "id"), Some(i as u64));
    }
    let failed = rows.iter().filter(|x| x["outcome"] == "failed").count() as u64;
    assert_eq!(failed, r.failed);
    (s, rows, links)
}

#[test]
fn the_mooncake_1p1d_table_is_reproduced_within_15_percent() {
    let (s, rows, _) = run_all("scenarios/calibration/mooncake-1p1d.toml", "mooncake");
    assert_eq!(s.requests.completed, 9);
    // docs/numbers.md: prompt tokens → transfer ms (Mooncake, Qwen3-8B TP8, 8 × 400 Gb/s).
    let table = [
        (128, 0.54),
        (256, 0.61),
        (512, 0.92),
        (1024, 1.50),
        (2048, 2.51),
        (4096, 4.75),
        (8192, 8.84),
        (16384, 16.43),
        (32768, 31.65),
    ];
    for (row, (tokens, ms)) in rows.iter().zip(table) {
        assert_eq!(num(row, "input_tokens"), Some(tokens));
        let got = (num(row, "transfer_end_ns").unwrap() - num(row, "transfer_start_ns").unwrap())
            as f64
            / 1e6;
        let err = got / ms - 1.0;
        println!(
            "{tokens:>6} tokens: {got:.3} ms vs {ms} ms ({:+.1} %)",
            100.0 * err
        );
        assert!(err.abs() < 0.15, "{tokens} tokens: {got:.3} ms vs {ms} ms");
    }
}

#[test]
fn a_link_down_mid_run_reroutes_and_every_request_completes() {
    let (s, rows, links) = run_all("scenarios/faults/link-down.toml", "link-down");
    assert_eq!(s.requests.completed, s.requests.arrived);
    let down: Vec<u64> = links
        .iter()
        .filter(|l| l["link"] == "node1.nic0.rx" && l["up"] == "false")
        .map(|l| num(l, "second").unwrap())
        .collect();
    // Samples at the end of seconds 10..19; at 20 s the link_up (scheduled first) is in.
    assert_eq!(
        down,
        (10..=19).collect::<Vec<_>>(),
        "down from 9.6 s to 20 s"
    );
    for l in links
        .iter()
        .filter(|l| l["link"] == "node1.nic0.rx" && l["up"] == "false")
    {
        if num(l, "second").unwrap() > 10 {
            assert_eq!(num(l, "bytes"), Some(0), "a down link carries nothing");
        }
    }
    // Decode 4's traffic went on through its other NIC while nic0 was down.
    let detour: u64 = links
        .iter()
        .filter(|l| l["link"] == "node1.nic1.rx")
        .filter(|l| (11..=20).contains(&num(l, "second").unwrap()))
        .map(|l| num(l, "bytes").unwrap())
        .sum();
    assert!(detour > 0);
    let during: Vec<&Row> = rows
        .iter()
        .filter(|r| r["decode_instance"] == "4")
        .filter(|r| (11e9..20e9).contains(&(num(r, "transfer_start_ns").unwrap() as f64)))
        .collect();
    assert!(
        !during.is_empty(),
        "decode 4 still received KV during the outage"
    );
}

#[test]
fn a_decode_crash_loses_its_requests_and_the_rest_complete() {
    let (s, rows, _) = run_all("scenarios/faults/decode-crash.toml", "decode-crash");
    let lost: Vec<&Row> = rows.iter().filter(|r| r["outcome"] == "failed").collect();
    assert!(!lost.is_empty());
    for r in &lost {
        assert_eq!(r["error_kind"], "peer_lost");
        assert_eq!(
            r["decode_instance"], "2",
            "only the crashed decode's requests"
        );
        assert_eq!(
            num(r, "finish_ns"),
            Some(15_000_000_000),
            "lost at the crash"
        );
    }
    // Down from 15 s to 35 s: the router sends nothing to it meanwhile, and uses it again after.
    let to_crashed = |a: f64, b: f64| {
        rows.iter()
            .filter(|r| r["decode_instance"] == "2")
            .filter(|r| (a..b).contains(&(num(r, "arrival_ns").unwrap() as f64 / 1e9)))
            .count()
    };
    assert_eq!(to_crashed(15.0, 35.0), 0);
    assert!(to_crashed(35.0, 60.0) > 10, "back after the restart");
    assert_eq!(s.requests.completed + s.requests.failed, s.requests.arrived);
}

#[test]
fn a_prefill_crash_is_noticed_by_the_heartbeat() {
    let (s, rows, _) = run_all("scenarios/faults/prefill-crash.toml", "prefill-crash");
    let lost: Vec<&Row> = rows.iter().filter(|r| r["outcome"] == "failed").collect();
    assert!(!lost.is_empty(), "{:?}", s.requests);
    for r in &lost {
        assert_eq!(r["error_kind"], "peer_lost");
        assert_eq!(r["prefill_instance"], "1");
        // Crash at 12 s; heartbeats at 15 s and 20 s miss; the second marks the rooms failed.
        assert_eq!(num(r, "finish_ns"), Some(20_000_000_000));
    }
    assert!(
        rows.iter()
            .filter(|r| num(r, "arrival_ns").unwrap() > 12_000_000_000)
            .all(|r| r["prefill_instance"] == "0")
    );
}

#[test]
fn a_prefill_back_before_the_heartbeat_verdict_is_never_declared_lost() {
    // Crash at 12 s, restart at 14 s: the heartbeats at 15 s and 20 s find it alive, so the
    // pending verdict is cancelled and no room fails as peer_lost. The rooms it lost with its
    // memory wait for decode's WaitingForInput timeout instead (30 s here).
    let dir = tmpdir("prefill-crash-restart");
    let s = run(
        "scenarios/faults/prefill-crash.toml",
        &["faults.0.restart_after_s=2", "sglang.waiting_timeout_s=30"],
        &dir,
    );
    let rows = read_csv(&dir.join("requests.csv"));
    assert!(rows.iter().all(|r| r["error_kind"] != "peer_lost"));
    let timed_out: Vec<&Row> = rows
        .iter()
        .filter(|r| r["error_kind"] == "waiting_timeout")
        .collect();
    assert!(!timed_out.is_empty(), "{:?}", s.requests);
    for r in &timed_out {
        assert_eq!(r["prefill_instance"], "1");
        assert!(num(r, "arrival_ns").unwrap() < 12_000_000_000);
    }
    // After the restart the router sends it work again, and that work completes.
    assert!(rows.iter().any(|r| r["prefill_instance"] == "1"
        && num(r, "arrival_ns").unwrap() > 14_000_000_000
        && r["outcome"] == "completed"));
}

#[test]
fn lossy_links_retransmit_and_still_deliver() {
    let (s, _, links) = run_all("scenarios/faults/lossy-links.toml", "lossy");
    assert_eq!(s.requests.completed, s.requests.arrived);
    assert!(s.transfer.retransmitted_bytes > 0);
    let lossy: u64 = links
        .iter()
        .filter(|l| l["link"].starts_with("node1.nic") && l["link"].ends_with(".rx"))
        .map(|l| num(l, "retransmitted_bytes").unwrap())
        .sum();
    let carried: u64 = links
        .iter()
        .filter(|l| l["link"].starts_with("node1.nic") && l["link"].ends_with(".rx"))
        .filter(|l| num(l, "second").unwrap() > 5)
        .map(|l| num(l, "bytes").unwrap())
        .sum();
    // 2 % of what crossed the lossy links after t = 5 s went twice (give or take the second
    // in which the loss began).
    let share = lossy as f64 / carried as f64;
    assert!(
        (0.015..0.025).contains(&share),
        "retransmitted share {share}"
    );
}
