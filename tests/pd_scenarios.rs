//! The teaching scenarios of `scenarios/pd/`: each pins the outcome its comment teaches.

mod common;
use common::*;

fn run_pd(
    name: &str,
) -> (
    pdsim::report::Summary,
    Vec<std::collections::BTreeMap<String, String>>,
) {
    let dir = tmpdir(&format!("pd-{name}"));
    let s = run(&format!("scenarios/pd/{name}.toml"), &[], &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    (s, rows)
}

fn error<'a>(s: &'a pdsim::report::Summary, kind: &str) -> &'a pdsim::metrics::ErrorCount {
    s.errors
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", s.errors))
}

#[test]
fn a_healthy_unified_pair_completes_everything_with_envelope_writes() {
    let (s, rows) = run_pd("unified-healthy");
    assert_eq!(s.requests.completed, s.requests.arrived);
    assert!(s.requests.arrived > 40);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    // One write per contiguous page run per rank (the whole envelope) plus state and aux: far
    // fewer than the 24 per-layer regions a non-unified pool would need per run.
    for r in &rows {
        let writes = num(r, "rdma_writes").unwrap();
        assert!(
            writes > 0 && writes < 64,
            "{writes} writes for request {}",
            r["id"]
        );
    }
}

#[test]
fn a_page_size_mismatch_fails_every_request_at_first_contact() {
    let (s, rows) = run_pd("page-size-mismatch");
    assert_eq!(s.requests.failed, s.requests.arrived);
    let e = error(&s, "page_size_mismatch");
    assert_eq!(e.count, s.requests.arrived);
    assert_eq!(
        e.message,
        "Page size mismatch: prefill server has page_size=16, but decode server has page_size=64. Both servers must use the same --page-size value."
    );
    assert!(
        rows.iter().all(|r| num(r, "kv_bytes") == Some(0)),
        "no byte moves"
    );
}

/// Error (1) or (2) kills the shard's worker: raised once, every request times out.
fn worker_death(name: &str, kind: &str, message: &str) {
    let (s, rows) = run_pd(name);
    let e = error(&s, kind);
    assert_eq!(e.count, 1, "raised once: the worker is dead afterwards");
    assert_eq!(e.message, message);
    assert_eq!(error(&s, "waiting_timeout").count, s.requests.arrived);
    assert_eq!(s.requests.failed, s.requests.arrived);
    // The validator raises before the first write: nothing moved.
    assert!(rows.iter().all(|r| num(r, "kv_bytes") == Some(0)));
    // Every request waited the whole waiting timeout (30 s) after its page ids were sent.
    for r in &rows {
        let waited = num(r, "finish_ns").unwrap() - num(r, "prefill_queued_ns").unwrap();
        assert!(
            (29_900_000_000..30_000_000_000).contains(&waited),
            "{waited}"
        );
    }
}

#[test]
fn a_spec_mismatch_raises_error_1() {
    worker_death(
        "spec-mismatch",
        "envelope_layout_mismatch",
        "PD KV layout mismatch on the whole-envelope path: prefill has 1 KV region(s) with item_lens=[655360], decode has 1 with item_len=524288. With --enable-unified-memory both sides must enable it and use the same page size and model spec.",
    );
}

#[test]
fn a_unified_prefill_into_a_plain_decode_raises_error_1() {
    worker_death(
        "unified-into-plain",
        "envelope_layout_mismatch",
        "PD KV layout mismatch on the whole-envelope path: prefill has 1 KV region(s) with item_lens=[196608], decode has 24 with item_len=8192. With --enable-unified-memory both sides must enable it and use the same page size and model spec.",
    );
}

#[test]
fn equal_envelopes_at_different_tp_are_caught_only_by_error_2() {
    worker_death(
        "tp-mismatch-guarded",
        "envelope_tp_mismatch",
        "--enable-unified-memory does not support different prefill / decode attention TP sizes (prefill=2, decode=4): the whole-envelope state cannot be TP-resliced.",
    );
}

#[test]
fn without_the_guard_the_unsliced_copy_corrupts_requests_and_names_victims() {
    let (s, rows) = run_pd("tp-mismatch-unguarded");
    assert_eq!(s.requests.failed, 0, "no error is raised");
    assert!(s.errors.is_empty());
    assert!(s.requests.corrupted > 0);
    assert_eq!(
        s.requests.corrupted + s.requests.completed,
        s.requests.arrived
    );
    // Victims are named, and each victim lists the writer among its corrupters.
    let mut pairs = 0;
    for r in &rows {
        for v in r["victims"].split_whitespace() {
            let victim = &rows[v.parse::<usize>().unwrap()];
            assert!(
                victim["corrupted_by"]
                    .split_whitespace()
                    .any(|w| w == r["id"]),
                "request {} hit {v}, which does not name it",
                r["id"]
            );
            pairs += 1;
        }
    }
    assert!(
        pairs > 0,
        "the unsliced mamba copy lands on other requests' slots"
    );
    // Corrupted requests finish normally: they count in throughput, as in production.
    assert!(s.throughput.requests_per_s > 0.0);
}

#[test]
fn slice_dispatch_sends_no_kv_then_raises_the_mamba_check() {
    let (s, rows) = run_pd("tp-mismatch-slice-dispatch");
    let e = error(&s, "mamba_layout_mismatch");
    assert_eq!(e.count, 1);
    assert_eq!(
        e.message,
        "Mamba state layouts differ between prefill and decode (src item_lens=[38633472], dst item_lens=[19316736]) and no per-tensor dim metadata is available to reslice. With --enable-unified-memory, prefill and decode must both enable it and use equal attention TP sizes."
    );
    assert!(
        s.errors.iter().all(|e| e.kind != "envelope_tp_mismatch"),
        "the validator is not on this path"
    );
    assert_eq!(s.requests.failed, s.requests.arrived);
    // The first request's chunks went through send_kvcache_slice: 0 KV bytes, return code 0.
    assert_eq!(num(&rows[0], "kv_bytes"), Some(0));
    assert!(
        num(&rows[0], "transfer_start_ns").is_some(),
        "its transfer did start"
    );
}

#[test]
fn deepseek_with_different_attention_tp_works() {
    let (s, rows) = run_pd("deepseek-hetero-tp");
    assert_eq!(s.requests.completed, s.requests.arrived);
    assert!(s.errors.is_empty());
    // The latent is copied whole to each of the 2 decode attention ranks: 61 layers × 576
    // elements × 2 B (bf16) per token, pages of 64 tokens; plus the aux rows.
    for r in &rows {
        let pages = num(r, "input_tokens").unwrap().div_ceil(64);
        let kv = 2 * pages * 64 * 61 * 576 * 2;
        let bytes = num(r, "kv_bytes").unwrap();
        assert!(bytes >= kv && bytes < kv + 4 * 65_536, "{bytes} vs KV {kv}");
    }
}

#[test]
fn one_mismatched_decode_stalls_the_healthy_decode_sharing_its_shard() {
    let (s, rows) = run_pd("dead-shard-stalls-healthy");
    assert_eq!(error(&s, "envelope_tp_mismatch").count, 1);
    let on = |d: &str, outcome: &str| {
        rows.iter()
            .filter(|r| r["decode_instance"] == d && r["outcome"] == outcome)
            .count()
    };
    // Instance 5 (mismatched) and instance 1 (healthy, same shard) time out after the death;
    // instances 2-4 complete everything.
    assert!(on("5", "completed") == 0 && on("5", "failed") > 10);
    assert!(
        on("1", "failed") > 10,
        "healthy traffic on the dead shard stalls"
    );
    for d in ["2", "3", "4"] {
        assert_eq!(on(d, "failed"), 0, "decode {d} uses a live shard");
        assert!(on(d, "completed") > 10);
    }
    assert!(
        rows.iter()
            .filter(|r| r["outcome"] == "failed")
            .all(|r| r["error_kind"] == "waiting_timeout")
    );
}
