//! The transfer backends NIXL and MORI as run models (`[sglang] transfer_backend`,
//! `spec::TransferBackend`; `docs/sglang-pd.md` §26.3): the descriptors a NIXL request posts,
//! counted by hand from `NixlKVManager`; the aux call that NIXL does not wait for; the failures
//! where the managers part ways (no bootstrap timeout before PR #34692, no session blacklist);
//! the keys that refuse what a backend does not read.

use crate::common;
use common::*;

use std::collections::BTreeMap;

type Row = BTreeMap<String, String>;

const NIXL: &str = "scenarios/transfer/backend-nixl.toml";
const STUCK: &str = "tests/scenarios/backend-stuck-prealloc.toml";
const LINK_DOWN: &str = "scenarios/faults/link-down.toml";

/// Llama-3.1-8B (32 layers, 8 KV heads of 128, BF16) on a TP-1 pair, page 64, a fixed
/// 2,048-token prompt (one chunk: 2,048 ≤ `chunked_prefill_size`). NIXL's `transfer_worker`
/// sends it with `send_kvcache` → `_send_kvcache_generic`: MHA, so `layers_params` is the K
/// and then the V region of each of the 32 layers (64), and for each one descriptor per
/// contiguous run of `group_concurrent_contiguous(prefill pages, decode pages)` — the 32 pages
/// of a fresh pool are one run on both sides: **64** KV descriptors in one `initialize_xfer`
/// ("WRITE"). The last chunk adds `send_aux`: one DRAM descriptor per metadata buffer
/// (`for i, _ in enumerate(dst_aux_ptrs)`), 10 of them: **74** descriptors in 2 transfers.
/// Mooncake's `send_kvcache` cuts the same regions into the same blocks: the same 74 writes.
/// KV bytes: 2,048 × 32 × 2 × 8 × 128 × 2 B = 268,435,456, plus the aux rows.
///
/// Time: Mooncake's worker makes the aux call (`send_aux`, a synchronous batch) after the KV
/// batch returned, so the last chunk pays one more batch floor (`base_latency + batch_overhead`
/// = 386 µs, `fabric/calibration.rs`); NIXL posts the aux transfer with the KV and polls both
/// (`while handles: check_xfer_state`). Every request's transfer is exactly 386 µs shorter on
/// NIXL, and nothing else moves.
#[test]
fn a_nixl_request_posts_sglangs_descriptors_and_does_not_wait_for_the_aux_call() {
    let (s_n, nixl) = run_rows(NIXL, &[], "backends-nixl");
    let (s_m, mooncake) = run_rows(
        NIXL,
        &["sglang.transfer_backend=mooncake"],
        "backends-mooncake",
    );
    assert_eq!(s_n.requests.arrived, s_m.requests.arrived);
    assert_eq!(s_n.requests.completed, s_n.requests.arrived);
    assert!(s_n.requests.completed >= 40);
    // summary.json names the backend only when it is not Mooncake.
    assert_eq!(s_n.transfer.backend.as_deref(), Some("nixl"));
    assert_eq!(s_m.transfer.backend, None);
    let regions = 2 * 32;
    let runs = 1;
    let aux_buffers = 10;
    let descriptors = regions * runs + aux_buffers;
    assert_eq!(descriptors, 74);
    let kv = 2_048u64 * 32 * 2 * 8 * 128 * 2;
    assert_eq!(kv, 268_435_456);
    let floor_ns = 386_000;
    for (n, m) in nixl.iter().zip(&mooncake) {
        assert_eq!(n["id"], m["id"]);
        assert_eq!(ns(n, "rdma_writes"), descriptors, "request {}", n["id"]);
        assert_eq!(ns(m, "rdma_writes"), descriptors);
        assert!(ns(n, "kv_bytes") > kv && ns(n, "kv_bytes") == ns(m, "kv_bytes"));
        let t = |r: &Row| ns(r, "transfer_end_ns") - ns(r, "transfer_start_ns");
        assert_eq!(t(m) - t(n), floor_ns, "request {}", n["id"]);
        assert_eq!(ns(n, "transfer_start_ns"), ns(m, "transfer_start_ns"));
    }
    let mean = |s: &pdsim::report::Summary| s.latency_ms.transfer.mean.unwrap();
    assert!((mean(&s_m) - mean(&s_n) - 0.386).abs() < 1e-6);
}

/// A decode that runs 4 requests at a time under a burst of 40: the rest wait in its prealloc
/// queue, so their page ids (the decode metadata) do not reach the prefill, whose senders stay
/// `Bootstrapping`, for longer than the 2-s `bootstrap_timeout_s`.
///
/// * Mooncake (`CommonKVSender._check_bootstrap_timeout`) fails each of them after 2 s with
///   "Request {room} timed out after 2.0s in KVPoll.Bootstrapping".
/// * NIXL at the seed (`NixlKVSender.poll` before PR #34692) has no such clock: the same
///   requests wait longer than 2 s for their page ids and then complete — none fails.
/// * NIXL at `2026-09` (PR #34692) fails the same requests with the same text; MORI (its own
///   deadline in `MoriKVSender.poll`) fails them with "… waiting for decode handshake".
#[test]
fn nixl_before_pr_34692_has_no_prefill_bootstrap_timeout() {
    let (seed, seed_rows) = run_rows(STUCK, &[], "backends-stuck-nixl");
    let (moon, moon_rows) = run_rows(
        STUCK,
        &["sglang.transfer_backend=mooncake"],
        "backends-stuck-moon",
    );
    let (fixed, _) = run_rows(STUCK, &["sglang.version=2026-09"], "backends-stuck-fixed");
    let (mori, _) = run_rows(
        STUCK,
        &["sglang.transfer_backend=mori"],
        "backends-stuck-mori",
    );
    assert_eq!(seed.requests.arrived, 40);
    assert_eq!((seed.requests.completed, seed.requests.failed), (40, 0));
    assert!(seed.errors.is_empty());
    let timed_out: Vec<&Row> = moon_rows
        .iter()
        .filter(|r| r["error_kind"] == "bootstrap_timeout")
        .collect();
    assert_eq!(moon.requests.failed, timed_out.len() as u64);
    assert_eq!((moon.requests.completed, moon.requests.failed), (16, 24));
    let text = |s: &pdsim::report::Summary| {
        assert_eq!(s.errors.len(), 1);
        assert_eq!(s.errors[0].kind, "bootstrap_timeout");
        s.errors[0].message.clone()
    };
    let room = |r: &Row| r["bootstrap_room"].clone();
    let first = timed_out
        .iter()
        .min_by_key(|r| ns(r, "finish_ns"))
        .map(|r| room(r))
        .unwrap();
    assert_eq!(
        text(&moon),
        format!("Request {first} timed out after 2.0s in KVPoll.Bootstrapping")
    );
    // Under NIXL at the seed exactly those requests waited past the timeout for their page
    // ids (`prefill_queued_ns`: when they reached the prefill's waiting queue), and finished.
    let waited: Vec<String> = seed_rows
        .iter()
        .filter(|r| ns(r, "prefill_queued_ns") - ns(r, "arrival_ns") > 2_000_000_000)
        .map(room)
        .collect();
    let failed: Vec<String> = timed_out.iter().map(|r| room(r)).collect();
    let mut w = waited.clone();
    w.sort();
    let mut f = failed.clone();
    f.sort();
    assert_eq!(w, f);
    assert_eq!((fixed.requests.completed, fixed.requests.failed), (16, 24));
    assert_eq!(text(&fixed), text(&moon));
    assert_eq!((mori.requests.completed, mori.requests.failed), (16, 24));
    assert_eq!(
        text(&mori),
        format!("Request {first} timed out after 2.0s waiting for decode handshake")
    );
}

/// The link-down scenario with one NIC a node: the decodes' node loses its only NIC's receive
/// side from 9.6 s to 20 s. Mooncake blacklists each decode session whose write failed
/// (`failed_sessions`) and every later room to it fails at once with "Decode instance could be
/// dead, …" — to the end of the run, since a link fault never makes a decode register again.
/// NIXL keeps no blacklist: each room whose transfer was on the wire while the link was down
/// fails with
/// "NIXL transfer encountered ERR room={room}", and every request that arrives once the link
/// is back completes.
#[test]
fn nixl_fails_the_rooms_that_met_the_fault_and_blacklists_nothing() {
    let sets = ["fabric.nics_per_node=1"];
    let (moon, moon_rows) = run_rows(LINK_DOWN, &sets, "backends-link-moon");
    let dir = tmpdir("backends-link-nixl");
    let nixl = run(
        LINK_DOWN,
        &["fabric.nics_per_node=1", "sglang.transfer_backend=nixl"],
        &dir,
    );
    let nixl_rows = read_csv(&dir.join("requests.csv"));
    // `pdsim explain` tells NIXL's story, not Mooncake's blacklist.
    let text = pdsim::diagnose::explain::explain_dir(&dir, false).unwrap();
    assert!(
        text.contains("On nixl: NixlKVManager.transfer_worker polls the chunk's transfer handles")
            && text.contains("No session is blacklisted"),
        "{text}"
    );
    assert_eq!(moon.requests.arrived, nixl.requests.arrived);
    assert_eq!((moon.requests.completed, moon.requests.failed), (24, 66));
    assert!(moon.errors.iter().any(|e| e.kind == "session_blacklisted"));
    let after = |rows: &[Row]| -> (usize, usize) {
        let late: Vec<&Row> = rows
            .iter()
            .filter(|r| ns(r, "arrival_ns") >= 20_000_000_000)
            .collect();
        let failed = late.iter().filter(|r| r["outcome"] != "completed").count();
        (late.len(), failed)
    };
    assert_eq!(after(&moon_rows), (31, 31));
    assert_eq!(after(&nixl_rows), (31, 0));
    assert_eq!((nixl.requests.completed, nixl.requests.failed), (78, 12));
    assert!(nixl.errors.iter().all(|e| e.kind == "transfer_failed"));
    for r in nixl_rows.iter().filter(|r| r["outcome"] != "completed") {
        assert_eq!(r["error_kind"], "transfer_failed");
        // Its transfer was on the wire while the link was down.
        assert!(ns(r, "transfer_start_ns") < 20_000_000_000, "{r:?}");
        assert!(ns(r, "finish_ns") > 9_600_000_000, "{r:?}");
    }
    let first = &nixl.errors[0].message;
    assert!(
        first.starts_with("NIXL transfer encountered ERR room="),
        "{first}"
    );
}

/// gpt-oss-120b (SWA hybrid) from a TP-1 prefill into a TP-4 decode: `maybe_send_extra` raises
/// "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
/// — the same f-string in Mooncake's manager and NIXL's (`NixlKVManager.maybe_send_extra`). On
/// Mooncake it escapes `transfer_worker` and kills the queue's thread: one raise, and all 24
/// requests wait for the 70-s waiting timeout. NIXL's worker catches it: each of the 24 rooms
/// fails at once with that text, and none waits.
#[test]
fn on_nixl_a_raise_fails_its_room_and_the_worker_lives() {
    const GPT: &str = "scenarios/pd/gpt-oss-hetero-tp.toml";
    let (moon, _) = run_rows(
        GPT,
        &["sglang.transfer_backend=mooncake"],
        "backends-gpt-moon",
    );
    let (nixl, rows) = run_rows(GPT, &["sglang.transfer_backend=nixl"], "backends-gpt-nixl");
    let text = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet.";
    let kinds = |s: &pdsim::report::Summary| -> Vec<(String, u64)> {
        s.errors.iter().map(|e| (e.kind.clone(), e.count)).collect()
    };
    assert_eq!(
        kinds(&moon),
        [
            ("hetero_tp_unsupported".to_string(), 1),
            ("waiting_timeout".to_string(), 24)
        ]
    );
    assert_eq!(kinds(&nixl), [("hetero_tp_unsupported".to_string(), 24)]);
    assert_eq!(nixl.errors[0].message, text);
    for r in &rows {
        assert!(
            ns(r, "finish_ns") - ns(r, "arrival_ns") < 70_000_000_000,
            "{r:?}"
        );
    }
}

/// The head-sliced p2d4 pair (`hetero-tp-sliced.toml`, 524,288 descriptors a request): NIXL
/// posts a target's whole list as one transfer from its worker thread, Mooncake spreads a
/// target's per-layer batches over 2 executor threads, MORI's engine over its 4 workers
/// (`SGLANG_MORI_NUM_WORKERS`). With the per-descriptor cost the same (1 µs, borrowed:
/// `FabricParams::per_wr_ns`), the transfer takes about twice Mooncake's on NIXL and half on
/// MORI — the posting threads, not the wire, bound it.
#[test]
fn a_head_sliced_transfer_is_bound_by_its_posting_threads() {
    let sets = |b: &'static str| ["run.max_requests=8", b];
    let (m, _) = run_rows(
        "scenarios/transfer/hetero-tp-sliced.toml",
        &sets("sglang.transfer_backend=mooncake"),
        "backends-sliced-moon",
    );
    let (n, nixl) = run_rows(
        "scenarios/transfer/hetero-tp-sliced.toml",
        &sets("sglang.transfer_backend=nixl"),
        "backends-sliced-nixl",
    );
    let (o, _) = run_rows(
        "scenarios/transfer/hetero-tp-sliced.toml",
        &sets("sglang.transfer_backend=mori"),
        "backends-sliced-mori",
    );
    for r in &nixl {
        assert_eq!(ns(r, "rdma_writes"), 4 * 64 * 2_048 + 40);
    }
    let t = |s: &pdsim::report::Summary| s.latency_ms.transfer.mean.unwrap();
    let (tm, tn, to) = (t(&m), t(&n), t(&o));
    assert!(tn / tm > 1.8 && tn / tm < 2.2, "{tm} {tn}");
    assert!(to / tm > 0.4 && to / tm < 0.6, "{tm} {to}");
}

/// Bad values are refused naming the key: an unknown backend (with a suggestion), the two
/// still refused, and the Mooncake-only settings under NIXL or MORI.
#[test]
fn backends_refuse_what_they_do_not_read() {
    let load = |path: &str, sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        pdsim::scenario::load(&repo().join(path), &sets).unwrap_err()
    };
    let e = load(NIXL, &["sglang.transfer_backend=nixll"]);
    assert_eq!(e.key, "sglang.transfer_backend");
    let m = e.to_string();
    assert!(
        m.contains("unknown transfer backend \"nixll\"") && m.contains("nixl"),
        "{m}"
    );
    for b in ["ascend", "fake"] {
        let e = load(NIXL, &[&format!("sglang.transfer_backend={b}")]);
        assert_eq!(e.key, "sglang.transfer_backend");
        assert!(e.to_string().contains("is not modelled"), "{e}");
    }
    let e = load(NIXL, &["sglang.tcp_gbps=25"]);
    assert_eq!(e.key, "sglang.tcp_gbps");
    for b in ["nixl", "mori"] {
        let e = load(
            NIXL,
            &[
                &format!("sglang.transfer_backend={b}"),
                "sglang.failed_session_probe=true",
            ],
        );
        assert_eq!(e.key, "sglang.failed_session_probe");
        assert!(e.to_string().contains("keeps no blacklist"), "{e}");
        let e = load(
            NIXL,
            &[
                &format!("sglang.transfer_backend={b}"),
                "fabric.transport=efa",
            ],
        );
        assert_eq!(e.key, "fabric.transport");
    }
    let e = load(
        NIXL,
        &["sglang.transfer_backend=mori", "sglang.staging_buffer=true"],
    );
    assert_eq!(e.key, "sglang.staging_buffer");
}
