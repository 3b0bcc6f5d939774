//! Memory and prefix-cache behaviour of the cluster.

use crate::common;
use common::*;

#[test]
fn the_synthetic_trace_hits_the_prefix_cache_as_mooncake_reports() {
    let dir = tmpdir("prefix-unbounded");
    let s = run("tests/scenarios/prefix-cache.toml", &[], &dir);
    assert_eq!(s.prefix_cache.len(), 1);
    let c = &s.prefix_cache[0];
    assert_eq!(c.lookups, 3_993);
    // Mooncake paper: 66 %; the trace's own prefix structure gives 65 %.
    assert!((c.hit_rate - 0.65).abs() <= 0.01, "hit rate {}", c.hit_rate);
}

#[test]
fn a_smaller_prefix_cache_hits_less() {
    let mut last = f64::INFINITY;
    for tokens in [100_000_000u64, 10_000_000, 1_000_000, 100_000] {
        let dir = tmpdir(&format!("prefix-{tokens}"));
        let set = format!("pools.prefill.server.radix_cache_tokens={tokens}");
        let s = run("tests/scenarios/prefix-cache.toml", &[&set], &dir);
        let rate = s.prefix_cache[0].hit_rate;
        println!("capacity {tokens} tokens: hit rate {rate:.4}");
        assert!(
            rate <= last,
            "hit rate rose from {last} to {rate} as the cache shrank to {tokens}"
        );
        last = rate;
    }
    assert!(
        last < 0.5,
        "a 100k-token cache should hit far less than 65 %: {last}"
    );
}

#[test]
fn cached_prefixes_are_not_recomputed() {
    let (a, b) = (tmpdir("prefix-on"), tmpdir("prefix-off"));
    let on = run("tests/scenarios/prefix-cache.toml", &[], &a);
    let off = run(
        "tests/scenarios/prefix-cache.toml",
        &["pools.prefill.server.disable_radix_cache=true"],
        &b,
    );
    assert!(off.prefix_cache.is_empty());
    let busy = |d: &std::path::Path| -> f64 {
        read_csv(&d.join("timeseries.csv"))
            .iter()
            .filter(|r| r["role"] == "prefill")
            .map(|r| r["busy_fraction"].parse::<f64>().unwrap())
            .sum()
    };
    println!(
        "prefill busy seconds: cache on {}, off {}",
        busy(&a),
        busy(&b)
    );
    assert!(
        busy(&a) < 0.7 * busy(&b),
        "cache on {} vs off {}",
        busy(&a),
        busy(&b)
    );
    let _ = on;
    // Cached KV is still sent to decode: a request moves the same bytes either way.
    let (ra, rb) = (
        read_csv(&a.join("requests.csv")),
        read_csv(&b.join("requests.csv")),
    );
    let mut compared = 0;
    for (x, y) in ra.iter().zip(&rb) {
        if x["outcome"] == "completed" && y["outcome"] == "completed" {
            assert_eq!(x["kv_bytes"], y["kv_bytes"], "request {}", x["id"]);
            compared += 1;
        }
    }
    assert!(compared > 100, "{compared}");
}

#[test]
fn a_measured_profile_replaces_the_roofline() {
    let dir = tmpdir("measured");
    let s = run(
        "scenarios/measured-profile.toml",
        &["run.max_requests=50"],
        &dir,
    );
    assert_eq!(s.requests.completed, 50);
    // The profile's single-sequence decode step is 8.125 ms at 4,096 context; a lone request's
    // TPOT must sit on the profile's curve (8–12 ms), not on the roofline's.
    let rows = read_csv(&dir.join("requests.csv"));
    let r = &rows[0];
    let tpot = (num(r, "finish_ns").unwrap() - num(r, "first_token_ns").unwrap()) as f64
        / (num(r, "output_tokens").unwrap() - 1) as f64
        / 1e6;
    assert!((8.0..12.0).contains(&tpot), "TPOT {tpot} ms");
}

#[test]
fn decode_retracts_when_pages_run_out_and_retracted_requests_still_finish() {
    let dir = tmpdir("retraction");
    let s = run("scenarios/retraction.toml", &[], &dir);
    assert_eq!(s.requests.completed, s.requests.arrived, "{:?}", s.requests);
    let rows = read_csv(&dir.join("requests.csv"));
    let retracted: Vec<_> = rows
        .iter()
        .filter(|r| num(r, "retractions").unwrap() > 0)
        .collect();
    assert!(retracted.len() >= 3, "{} retracted", retracted.len());
    // The re-transfer is paid again: a retracted request moves its prompt's KV once, then its
    // prompt plus the tokens generated so far once more.
    let once = rows
        .iter()
        .find(|r| num(r, "retractions") == Some(0))
        .map(|r| num(r, "kv_bytes").unwrap())
        .unwrap();
    for r in &retracted {
        assert!(
            num(r, "kv_bytes").unwrap() > 2 * once,
            "request {} moved only {}",
            r["id"],
            r["kv_bytes"]
        );
        assert!(num(r, "finish_ns").unwrap() > num(r, "first_token_ns").unwrap());
    }
}

#[test]
fn max_prefill_tokens_does_not_split_a_lone_prompt_but_the_chunk_size_does() {
    // sglang's PrefillAdder.add_one_req refuses a request over the remaining
    // --max-prefill-tokens only when the batch already holds one (docs/sglang-pd.md §13).
    let service = |sets: &[&str], name: &str| {
        let dir = tmpdir(name);
        let mut all = vec!["run.max_requests=1"];
        all.extend_from_slice(sets);
        run("tests/scenarios/md1.toml", &all, &dir);
        let r = &read_csv(&dir.join("requests.csv"))[0];
        num(r, "prefill_end_ns").unwrap() - num(r, "prefill_start_ns").unwrap()
    };
    let whole = service(&[], "mpt-whole");
    let lone = service(
        &["pools.prefill.server.max_prefill_tokens=4096"],
        "mpt-lone",
    );
    assert_eq!(lone, whole, "a lone 8192-token prompt runs in one forward");
    let halves = service(
        &["pools.prefill.server.chunked_prefill_size=4096"],
        "mpt-halves",
    );
    // 8192 prompt tokens in two forwards of 4096: one more per-step cost, more attention
    // context in the second.
    assert!(halves > whole, "{halves} vs {whole}");
}
