//! The guards sglang grew after the seed (`docs/sglang-pd.md` §24), run end to end: the KV
//! checksum turns the silent unsliced-copy hazard into aborts with sglang's words and costs
//! each request its two digests; registration-time validation (PR #37840) rejects the
//! Mamba-state dtype pair before any write, which without it corrupts in silence. Every
//! expected figure is derived by hand in the test's comment.

use crate::common;
use common::*;

use std::collections::BTreeMap;

type Row = BTreeMap<String, String>;

const UNGUARDED: &str = "scenarios/regression/unguarded-corruption.toml";
const CHECKSUM: [&str; 2] = ["sglang.version=2026-09", "sglang.kv_checksum=true"];

/// The regression suite's unguarded corruption (a unified TP-2 prefill copying its unsliced
/// mamba state into a TP-4 decode) corrupts every request; under sglang 2026-09 with
/// `--disaggregation-enable-kv-checksum` on both servers, the same arrivals — same seed, same
/// requests — all abort on decode with "KV checksum mismatch" before their first token, and
/// none is corrupted. The figures come from the first run, not from constants.
#[test]
fn the_checksum_aborts_every_corrupted_request_and_corrupts_none() {
    let (plain, plain_rows) = run_rows(UNGUARDED, &[], "guards-plain");
    assert!(plain.requests.corrupted >= 10, "{:?}", plain.requests);
    let corrupted: Vec<&str> = plain_rows
        .iter()
        .filter(|r| r["outcome"] == "corrupted")
        .map(|r| r["id"].as_str())
        .collect();

    let (s, rows) = run_rows(UNGUARDED, &CHECKSUM, "guards-checksum");
    assert_eq!(s.requests.arrived, plain.requests.arrived);
    assert_eq!(s.requests.corrupted, 0);
    assert_eq!(s.requests.completed, 0);
    assert_eq!(s.requests.failed, s.requests.arrived);
    let by_id: BTreeMap<&str, &Row> = rows.iter().map(|r| (r["id"].as_str(), r)).collect();
    for id in corrupted {
        let r = by_id[id];
        assert_eq!(r["outcome"], "failed", "request {id}");
        assert_eq!(r["error_kind"], "kv_checksum_mismatch", "request {id}");
        assert_eq!(
            r["first_token_ns"], "",
            "aborted before its first token: {id}"
        );
    }
    assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
    let e = &s.errors[0];
    assert_eq!(
        (e.kind.as_str(), e.count),
        ("kv_checksum_mismatch", s.requests.failed)
    );
    // sglang's words, then the room of the request it names (`requests.csv` `bootstrap_room`).
    let room = rows
        .iter()
        .map(|r| r["bootstrap_room"].as_str())
        .find(|room| e.message.ends_with(&format!("bootstrap_room={room}")))
        .expect("the message names a request's room");
    assert_eq!(
        e.message,
        format!("KV checksum mismatch for bootstrap_room={room}")
    );
}

/// The flag does not exist at the seed's commit: exit 2 naming the key and the versions
/// that have it.
#[test]
fn the_checksum_flag_under_the_seed_is_refused_naming_the_versions() {
    let e = pdsim::scenario::load(
        &repo().join(UNGUARDED),
        &["sglang.kv_checksum=true".to_string()],
    )
    .unwrap_err();
    assert_eq!(e.key, "sglang.kv_checksum");
    let m = e.to_string();
    assert!(
        m.contains("does not exist in sglang version \"seed\"")
            && m.contains("versions that have it: \"2026-09\", \"2026-09+pr37840\""),
        "{m}"
    );
}

/// The Mamba-state dtype pair (Qwen3-Next at attention TP 2 both sides, FP32 state on the
/// prefill, BF16 on the decode): without a check that compares the rows, every request
/// finishes corrupted and no error is raised; under PR #37840 every request fails at once
/// with the registration error, before any byte is written (`kv_bytes` 0, no RDMA write),
/// and none is corrupted.
#[test]
fn the_mamba_state_dtype_hazard_is_silent_without_registration_validation_and_rejected_with_it() {
    let (silent, _) = run_rows(
        "scenarios/guards/mamba-state-dtype-silent.toml",
        &[],
        "guards-m-silent",
    );
    assert!(silent.errors.is_empty(), "{:?}", silent.errors);
    assert_eq!(silent.requests.completed, 0);
    assert_eq!(silent.requests.corrupted, silent.requests.arrived);

    let (s, rows) = run_rows(
        "scenarios/guards/mamba-state-dtype-rejected.toml",
        &[],
        "guards-m-rej",
    );
    assert_eq!(s.requests.arrived, silent.requests.arrived);
    assert_eq!(s.requests.corrupted, 0);
    assert_eq!(s.requests.failed, s.requests.arrived);
    for r in &rows {
        assert_eq!(r["error_kind"], "peer_layout_rejected");
        assert_eq!(
            (r["kv_bytes"].as_str(), r["rdma_writes"].as_str()),
            ("0", "0")
        );
    }
    let e = &s.errors[0];
    assert!(
        e.message.contains("state entry")
            && e.message
                .contains("has another stride (prefill=1048576, decode=524288)"),
        "{}",
        e.message
    );
    // The seed with its default profile raises after the KV instead: the worker dies.
    let (seed, _) = run_rows(
        "scenarios/guards/mamba-state-dtype-silent.toml",
        &["sglang.profile=guarded"],
        "guards-m-seed",
    );
    assert!(
        seed.errors
            .iter()
            .any(|e| e.kind == "mamba_slot_size_mismatch"),
        "{:?}",
        seed.errors
    );
}

/// What the checksum costs one request, by hand: Llama-3.1-8B at TP 2, page 64: 32 layers ×
/// 2 × 4 heads × 128 × 2 B = 64 KiB a token a rank, so a 2,048-token prompt is 32 pages of
/// 4 MiB = 134,217,728 B a rank; read at the H100's 3.35 TB/s that is 40,064.99 ns, rounded
/// up to 40,065 ns, once on the prefill before its last chunk and once on decode before the
/// request joins a batch. With no two transfers overlapping, every request's first token comes
/// exactly 80,130 ns later than without the checksum, and nothing else changes.
#[test]
fn the_checksum_costs_each_request_its_two_digests() {
    const S: &str = "tests/data/guards/checksum-1p1d.toml";
    let (on, on_rows) = run_rows(S, &[], "guards-cost-on");
    let (off, off_rows) = run_rows(S, &["sglang.kv_checksum=false"], "guards-cost-off");
    assert_eq!(on.requests.completed, on.requests.arrived);
    assert_eq!(off.requests.completed, on.requests.completed);
    assert!(on.requests.completed >= 9, "{:?}", on.requests);
    for (a, b) in on_rows.iter().zip(&off_rows) {
        let ft = |r: &Row| num(r, "first_token_ns").unwrap();
        assert_eq!(ft(a) - ft(b), 80_130, "request {}", a["id"]);
        // The prefill's digest delays the transfer's start; its bytes are the same.
        assert_eq!(
            num(a, "transfer_end_ns").unwrap() - num(b, "transfer_end_ns").unwrap(),
            40_065
        );
        assert_eq!(a["kv_bytes"], b["kv_bytes"]);
    }
}
