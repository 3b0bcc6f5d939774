//! The teaching scenarios of `scenarios/pd/`: each pins the outcome its comment teaches, as
//! sglang's code produces it (`docs/sglang-pd.md`; issue 14).

use crate::common;
use common::*;

use std::collections::BTreeMap;

type Row = BTreeMap<String, String>;

fn run_pd_with(name: &str, sets: &[&str]) -> (pdsim::report::Summary, Vec<Row>) {
    let dir = tmpdir(&format!("pd-{name}-{}", sets.len()));
    let s = run(&format!("scenarios/pd/{name}.toml"), sets, &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    (s, rows)
}

fn run_pd(name: &str) -> (pdsim::report::Summary, Vec<Row>) {
    run_pd_with(name, &[])
}

fn error<'a>(s: &'a pdsim::report::Summary, kind: &str) -> &'a pdsim::metrics::ErrorCount {
    s.errors
        .iter()
        .find(|e| e.kind == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", s.errors))
}

/// sglang's line when an exception escapes `transfer_worker` (0005973a), filled as Python fills
/// it: `{e}` ends with its own full stop, so the line has two.
fn thread_failed(e: &str) -> String {
    format!(
        "Transfer thread failed because of {e}. Prefill instance with bootstrap_port=8998 is dead."
    )
}

/// The waiting-timeout text names the request's bootstrap room, not pdsim's request id.
fn assert_timeout_names_room(s: &pdsim::report::Summary, rows: &[Row], secs: &str) {
    let e = error(s, "waiting_timeout");
    let room = &rows
        .iter()
        .find(|r| r["error_kind"] == "waiting_timeout")
        .unwrap()["bootstrap_room"];
    assert_eq!(
        e.message,
        format!("Request {room} timed out after {secs}s in KVPoll.WaitingForInput")
    );
    assert!(room.parse::<u64>().unwrap() >= 1 << 32, "a 63-bit room");
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

/// Item 1: the page-size RuntimeError kills the decode server; the healthy prefill's requests
/// on it die with it; the router keeps routing to the dead decodes until three failed health
/// checks, after which nothing can be routed.
#[test]
fn a_page_size_mismatch_kills_every_decode_it_meets() {
    let (s, rows) = run_pd("page-size-mismatch");
    assert_eq!(s.requests.failed, s.requests.arrived);
    let psm = "Page size mismatch: prefill server has page_size=16, but decode server has page_size=64. Both servers must use the same --page-size value.";
    let e = error(&s, "page_size_mismatch");
    assert_eq!(e.count, 3, "one per decode server it killed");
    assert_eq!(e.message, psm);
    let crashed = error(&s, "server_crashed");
    assert_eq!(
        crashed.message,
        format!("Scheduler hit an exception: RuntimeError: {psm}")
    );
    // The requests lost with a dead decode came from the healthy prefill (instance 1).
    let lost: Vec<&Row> = rows
        .iter()
        .filter(|r| r["error_kind"] == "server_crashed")
        .collect();
    assert!(!lost.is_empty() && lost.iter().all(|r| r["prefill_instance"] == "1"));
    // Every decode (instances 2, 3, 4) died at its first request from the bad prefill.
    let mut killed: Vec<&str> = rows
        .iter()
        .filter(|r| r["error_kind"] == "page_size_mismatch")
        .map(|r| r["decode_instance"].as_str())
        .collect();
    killed.sort_unstable();
    assert_eq!(killed, ["2", "3", "4"]);
    // Routed to a dead decode before the health check caught it: peer_lost at once. After the
    // third failed check (180 s) the router has no decode left.
    let t = |r: &Row| num(r, "arrival_ns").unwrap();
    let dead_pick: Vec<&Row> = rows
        .iter()
        .filter(|r| r["error_kind"] == "peer_lost" && !r["decode_instance"].is_empty())
        .collect();
    let unroutable: Vec<&Row> = rows
        .iter()
        .filter(|r| r["decode_instance"].is_empty())
        .collect();
    assert!(dead_pick.len() > 100 && dead_pick.iter().all(|r| t(r) < 180_000_000_000));
    assert!(!unroutable.is_empty() && unroutable.iter().all(|r| t(r) >= 180_000_000_000));
    assert!(
        dead_pick
            .iter()
            .all(|r| num(r, "finish_ns") == num(r, "arrival_ns")),
        "a request to a dead server fails at once"
    );
}

/// Under `unguarded` the page-size check still runs (it predates unified memory), and still
/// kills the decode.
#[test]
fn unguarded_keeps_the_first_contact_page_size_check() {
    let (s, _) = run_pd_with("page-size-mismatch", &["sglang.profile=unguarded"]);
    assert_eq!(error(&s, "page_size_mismatch").count, 3);
    assert!(error(&s, "server_crashed").count >= 1);
}

/// Error (1) or (2) kills the transfer worker of one queue on every prefill rank: raised once
/// per rank, shown as sglang's "Transfer thread failed" line; every request times out.
fn worker_death(name: &str, kind: &str, message: &str) {
    let (s, rows) = run_pd(name);
    let e = error(&s, kind);
    assert_eq!(e.count, 2, "raised once per prefill rank (TP 2)");
    assert_eq!(e.message, thread_failed(message));
    assert_eq!(error(&s, "waiting_timeout").count, s.requests.arrived);
    assert_eq!(s.requests.failed, s.requests.arrived);
    assert_timeout_names_room(&s, &rows, "30.0");
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

/// Item 3: a non-unified hybrid prefill publishes its KV layer ids, a unified decode none:
/// `build_transfer_entry_pairs` raises and the worker dies.
#[test]
fn a_plain_prefill_into_a_unified_decode_fails_pairing_layer_ids() {
    let (s, rows) = run_pd_with(
        "unified-into-plain",
        &[
            "pools.prefill.server.enable_unified_memory=false",
            "pools.decode.server.enable_unified_memory=true",
        ],
    );
    let e = error(&s, "kv_layers_out_of_range");
    assert_eq!(e.count, 2);
    assert_eq!(
        e.message,
        thread_failed(
            "PP-heterogeneous transfer requires layer ids on both peers; got src=24 dst=1 entries"
        )
    );
    assert_eq!(error(&s, "waiting_timeout").count, s.requests.arrived);
    assert!(rows.iter().all(|r| num(r, "kv_bytes") == Some(0)));
}

/// Issue 13's check: every corrupted request names its culprit, and every culprit names it
/// among its victims.
fn culprits_and_victims_agree(rows: &[Row]) -> usize {
    let by_id: BTreeMap<&str, &Row> = rows.iter().map(|r| (r["id"].as_str(), r)).collect();
    let mut pairs = 0;
    for r in rows {
        if r["outcome"] == "corrupted" {
            assert!(
                !r["corrupted_by"].is_empty(),
                "corrupted request {} names no culprit",
                r["id"]
            );
        }
        for c in r["corrupted_by"].split_whitespace() {
            assert!(
                by_id[c]["victims"].split_whitespace().any(|v| v == r["id"]),
                "request {} names culprit {c}, which does not name it",
                r["id"]
            );
            pairs += 1;
        }
        for v in r["victims"].split_whitespace() {
            let victim = by_id[v];
            // A victim that decoded names its culprit unless its own later write healed it.
            if victim["outcome"] == "corrupted" && v != r["id"] {
                pairs += 1;
            }
        }
    }
    pairs
}

#[test]
fn without_the_guard_the_unsliced_copy_corrupts_requests_and_names_culprits() {
    let (s, rows) = run_pd("tp-mismatch-unguarded");
    assert_eq!(s.requests.failed, 0, "no error is raised");
    assert!(s.errors.is_empty());
    assert!(s.requests.corrupted > 0);
    assert_eq!(
        s.requests.corrupted + s.requests.completed,
        s.requests.arrived
    );
    assert!(culprits_and_victims_agree(&rows) > 0);
    // A request whose own state went to other requests' slots names itself: its slot was
    // never written.
    assert!(
        rows.iter()
            .any(|r| { r["corrupted_by"].split_whitespace().any(|c| c == r["id"]) })
    );
    // Corrupted requests finish normally: they count in throughput, as in production.
    assert!(s.throughput.requests_per_s > 0.0);
}

/// The same property in the other hazard scenarios, run unguarded.
#[test]
fn every_corrupted_request_names_a_culprit_in_every_unguarded_hazard() {
    for name in [
        "spec-mismatch",
        "unified-into-plain",
        "dead-shard-stalls-healthy",
    ] {
        let (_, rows) = run_pd_with(name, &["sglang.profile=unguarded"]);
        culprits_and_victims_agree(&rows);
    }
}

#[test]
fn slice_dispatch_sends_no_kv_then_raises_the_mamba_check() {
    let (s, rows) = run_pd("tp-mismatch-slice-dispatch");
    let e = error(&s, "mamba_layout_mismatch");
    assert_eq!(e.count, 2, "once per prefill rank");
    assert_eq!(
        e.message,
        thread_failed(
            "Mamba state layouts differ between prefill and decode (src item_lens=[38633472], dst item_lens=[19316736]) and no per-tensor dim metadata is available to reslice. With --enable-unified-memory, prefill and decode must both enable it and use equal attention TP sizes."
        )
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

/// Item 2: queues per prefill rank, `sum(session ports) % 4`. Decode session ports are
/// `17000 + 97·instance + rank`; the mismatched decode (instance 5, TP 4) has ranks 0–1 on
/// prefill rank 0 (ports 17485 + 17486 → queue 3) and ranks 2–3 on prefill rank 1 (17487 +
/// 17488 → queue 3). A healthy TP-2 decode i uses queue i % 4 on rank 0 and (i + 1) % 4 on
/// rank 1: decode 3 shares rank 0's dead queue, decode 2 rank 1's. Both stall; 1 and 4 live.
#[test]
fn one_mismatched_decode_stalls_the_healthy_decodes_sglangs_rule_picks() {
    let (s, rows) = run_pd("dead-shard-stalls-healthy");
    assert_eq!(error(&s, "envelope_tp_mismatch").count, 2, "once per rank");
    let on = |d: &str, outcome: &str| {
        rows.iter()
            .filter(|r| r["decode_instance"] == d && r["outcome"] == outcome)
            .count()
    };
    assert!(on("5", "completed") == 0 && on("5", "failed") > 10);
    for d in ["2", "3"] {
        assert!(
            on(d, "failed") > 10,
            "decode {d} stalls behind a dead queue"
        );
    }
    for d in ["1", "4"] {
        assert_eq!(on(d, "failed"), 0, "decode {d} uses live queues");
        assert!(on(d, "completed") > 10);
    }
    assert!(
        rows.iter()
            .filter(|r| r["outcome"] == "failed")
            .all(|r| r["error_kind"] == "waiting_timeout")
    );
}

/// Item 7: llm-d #2433. The full-attention KV goes; then the SWA rule raises on the last
/// chunk; the client gets no first token and the decode fails at its waiting timeout.
#[test]
fn gpt_oss_at_different_tp_hangs_the_client_then_times_out() {
    let (s, rows) = run_pd("gpt-oss-hetero-tp");
    let e = error(&s, "hetero_tp_unsupported");
    assert_eq!(e.count, 1, "prefill TP 1: one rank, one raise");
    assert_eq!(
        e.message,
        thread_failed(
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
        )
    );
    assert_eq!(error(&s, "waiting_timeout").count, s.requests.arrived);
    assert_timeout_names_room(&s, &rows, "70.0");
    // The first request's KV moved (head-sliced, 4 decode ranks) before the raise; nobody got
    // a first token.
    assert!(num(&rows[0], "kv_bytes").unwrap() > 0);
    assert!(rows.iter().all(|r| r["first_token_ns"].is_empty()));
    // The fix the guide adopted: equal TP.
    let (s, _) = run_pd_with(
        "gpt-oss-hetero-tp",
        &[
            "pools.decode.server.tp_size=1",
            "pools.decode.server.mem_fraction_static=0.95",
        ],
    );
    assert_eq!(s.requests.completed, s.requests.arrived);
}

/// The preset is the public config.json kept in the repository.
#[test]
fn the_gpt_oss_preset_matches_its_config_json() {
    let text =
        std::fs::read_to_string(repo().join("scenarios/models/gpt-oss-120b.config.json")).unwrap();
    let c: serde_json::Value = serde_json::from_str(&text).unwrap();
    let m = pdsim::spec::preset("gpt-oss-120b").unwrap();
    let u = |k: &str| c[k].as_u64().unwrap() as u32;
    assert_eq!(m.num_layers, u("num_hidden_layers"));
    assert_eq!(m.hidden_size, u("hidden_size"));
    assert_eq!(m.q_heads, u("num_attention_heads"));
    assert_eq!(m.vocab_size, u("vocab_size"));
    assert_eq!(
        m.attention,
        pdsim::spec::KvAttention::Mha {
            kv_heads: u("num_key_value_heads"),
            head_dim: u("head_dim"),
            v_head_dim: u("head_dim"),
        }
    );
    let moe = m.moe.as_ref().unwrap();
    assert_eq!(moe.experts, u("num_local_experts"));
    assert_eq!(moe.active, u("num_experts_per_tok"));
    assert_eq!(moe.expert_intermediate, u("intermediate_size"));
    let swa = m.swa.as_ref().unwrap();
    assert_eq!(swa.window, u("sliding_window"));
    let sliding: Vec<u32> = c["layer_types"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.as_str() == Some("sliding_attention"))
        .map(|(i, _)| i as u32)
        .collect();
    assert_eq!(swa.layers, sliding);
    assert_eq!(m.full_attention_layers().len(), 18);
}

/// Item 5: profile `seed_commit` refuses unified memory with PD on an MHA hybrid at start-up
/// (exit 2, naming the key and the fix).
#[test]
fn seed_commit_refuses_unified_memory_on_mha_hybrids_at_start_up() {
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/pd/unified-healthy.toml",
        "--set",
        "sglang.profile=seed_commit",
        "--summary-only",
        "-q",
        "--out",
        tmpdir("pd-seed-commit").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pools.decode.server"), "{err}");
    assert!(
        err.contains("refuses to start") && err.contains("enable_unified_memory = false"),
        "{err}"
    );
    // Without unified memory the same scenario runs under seed_commit.
    let (s, _) = run_pd_with(
        "unified-healthy",
        &[
            "sglang.profile=seed_commit",
            "pools.prefill.server.enable_unified_memory=false",
            "pools.decode.server.enable_unified_memory=false",
        ],
    );
    assert_eq!(s.requests.completed, s.requests.arrived);
}

/// Issue 11: error (2) as sglang raises it, from an MLA hybrid. Kimi-Linear (MLA + KDA) always
/// takes `send_kvcache`, so under the version read (`slice_dispatch`) the whole-envelope
/// validator runs and only its TP check can tell the peers apart (the MLA page envelope is
/// TP-invariant). The seeds' commit lets MLA hybrids start with unified memory and raises the
/// same; without the guard (`unguarded`) the unsliced slot envelope corrupts every request;
/// without unified memory the KDA state is resliced and every request completes.
#[test]
fn kimi_linear_at_unequal_tp_raises_error_2_on_the_send_kvcache_path() {
    let e2 = "--enable-unified-memory does not support different prefill / decode attention TP sizes (prefill=2, decode=4): the whole-envelope state cannot be TP-resliced.";
    worker_death("kimi-linear-tp-mismatch", "envelope_tp_mismatch", e2);
    let (s, _) = run_pd_with("kimi-linear-tp-mismatch", &["sglang.profile=seed_commit"]);
    assert_eq!(error(&s, "envelope_tp_mismatch").message, thread_failed(e2));
    assert_eq!(s.requests.failed, s.requests.arrived);
    let (s, rows) = run_pd_with("kimi-linear-tp-mismatch", &["sglang.profile=unguarded"]);
    assert_eq!(s.requests.corrupted, s.requests.arrived);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert!(culprits_and_victims_agree(&rows) > 0);
    let (s, _) = run_pd_with(
        "kimi-linear-tp-mismatch",
        &[
            "pools.prefill.server.enable_unified_memory=false",
            "pools.decode.server.enable_unified_memory=false",
        ],
    );
    assert_eq!(s.requests.completed, s.requests.arrived);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
}
