//! The GPU staging buffer for heterogeneous attention TP (`SGLANG_DISAGG_STAGING_BUFFER`,
//! sglang PR #19890 / #22536; `docs/sglang-pd.md` §26) end to end on the p2d4 teaching pair
//! (`scenarios/transfer/`): the writes each request issues, counted by hand, and the transfer
//! time moving the way sglang's figures say; the ring's back-pressure and its oversized raise.

use crate::common;
use common::*;

use std::collections::BTreeMap;

type Row = BTreeMap<String, String>;

const SLICED: &str = "scenarios/transfer/hetero-tp-sliced.toml";
const STAGED: &str = "scenarios/transfer/hetero-tp-staged.toml";

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Llama-3.1-8B: 32 layers, 8 KV heads of 128, BF16; prefill TP 2 (4 heads a rank), decode
/// TP 4 (2 heads a rank); a fixed 2,048-token prompt. Each prefill rank serves 2 decode ranks,
/// so 4 targets a request, each owed 2 heads × 128 × 2 B = 512 B per token per layer region.
///
/// * Without staging (`send_kvcache_slice`, §3.3): one write per token per region per target:
///   4 × 64 regions × 2,048 tokens = **524,288** KV writes.
/// * With staging (`send_kvcache_staged`): one block per target per chunk; the prompt is one
///   chunk (2,048 ≤ `chunked_prefill_size` 8,192): **4** KV writes.
///
/// Both move the same KV bytes: 2,048 × 32 × 2 × 8 × 128 × 2 B = 268,435,456; the metadata
/// rows (aux) add the same writes and bytes to both.
#[test]
fn a_staged_request_issues_one_write_per_rank_pair_and_chunk() {
    let sets = ["run.max_requests=5"];
    let (a, sliced) = run_rows(SLICED, &sets, "staging-count-sliced");
    let (b, staged) = run_rows(STAGED, &sets, "staging-count-staged");
    assert_eq!((a.requests.completed, b.requests.completed), (5, 5));
    const KV_BYTES: u64 = 268_435_456;
    let aux = |r: &Row, kv_writes: u64| {
        (
            ns(r, "rdma_writes") - kv_writes,
            ns(r, "kv_bytes") - KV_BYTES,
        )
    };
    let first = aux(&sliced[0], 524_288);
    assert!(first.0 > 0 && first.0 < 100, "aux writes {first:?}");
    for (x, y) in sliced.iter().zip(&staged) {
        assert_eq!(aux(x, 524_288), first, "request {}", x["id"]);
        assert_eq!(aux(y, 4), first, "request {}", y["id"]);
    }
}

/// The transfer time moves the way sglang's figures say: PR #22536 reports p2d4 TTFT 749 →
/// 355 ms with the buffer and the docs "2–5x throughput", because ~half a million 512-B
/// writes each pay the sender's per-work-request cost (1 µs) where one bulk write is cut into
/// 64 KiB slices. pdsim: a flow of 131,072 writes over 2 executor threads moves at most
/// 512 B / 1 µs a write, ~1 GB/s; the staged flow is bound by the NIC. So the staged
/// transfer is several times shorter (asserted: under half) even with the gather and the
/// scatter it adds, and TTFT falls with it. The figures come from the runs.
#[test]
fn staging_shortens_the_transfer_and_ttft() {
    let (_, sliced) = run_rows(SLICED, &[], "staging-time-sliced");
    let (_, staged) = run_rows(STAGED, &[], "staging-time-staged");
    let transfer = |rows: &[Row]| {
        mean(
            &rows
                .iter()
                .map(|r| (ns(r, "transfer_end_ns") - ns(r, "transfer_start_ns")) as f64)
                .collect::<Vec<_>>(),
        )
    };
    let ttft = |rows: &[Row]| {
        mean(
            &rows
                .iter()
                .map(|r| (ns(r, "first_token_ns") - ns(r, "arrival_ns")) as f64)
                .collect::<Vec<_>>(),
        )
    };
    let (t0, t1) = (transfer(&sliced), transfer(&staged));
    assert!(
        t1 * 2.0 < t0,
        "transfer mean {t0} ns sliced, {t1} ns staged"
    );
    // The staged transfer still pays its batches' floor, the gather and the scatter.
    assert!(t1 > 1e6, "{t1}");
    let (f0, f1) = (ttft(&sliced), ttft(&staged));
    assert!(f1 < f0, "TTFT mean {f0} ns sliced, {f1} ns staged");
    // sglang's docs: staged heterogeneous TP runs "within ~5 %" of homogeneous TP. The same
    // cluster with a TP-2 decode (equal TP, `send_kvcache`): the staged p2d4's mean TTFT is
    // within 5 % of it, the sliced one's several times it.
    let (_, equal) = run_rows(
        SLICED,
        &["pools.decode.server.tp_size=2"],
        "staging-time-equal",
    );
    let fe = ttft(&equal);
    assert!(
        f1 <= fe * 1.05,
        "TTFT mean {f1} ns staged, {fe} ns at equal TP"
    );
    assert!(
        f0 > fe * 2.0,
        "TTFT mean {f0} ns sliced, {fe} ns at equal TP"
    );
}

/// The ring's back-pressure: a decode rank's region of a 2,048-token chunk is 2,048 × 32 ×
/// 2 × 2 heads × 128 × 2 B = 64 MiB. Four prefills into one decode at 30 req/s: with a 64 MiB
/// ring every region after the first wraps to a new round and waits (1 ms at a time) until
/// the one before it was scattered and freed, so requests wait longer from their prefill's
/// end to their transfer's end than with sglang's 4 GiB. A 63 MiB ring cannot hold one region:
/// decode answers ALLOC_OVERSIZED, the worker raises sglang's text and dies, nothing
/// completes.
#[test]
fn a_small_ring_holds_chunks_back_and_a_too_small_one_kills_the_worker() {
    let busy = [
        "workload.arrival.rate_per_s=30",
        "pools.prefill.instances=4",
        "run.duration_s=5",
    ];
    let wait = |mb: &str| {
        let pool = format!("sglang.staging_pool_mb={mb}");
        let mut sets = busy.to_vec();
        sets.push(&pool);
        let (s, rows) = run_rows(STAGED, &sets, &format!("staging-ring-{mb}"));
        assert_eq!(s.requests.completed, s.requests.arrived, "{mb} MiB");
        let w: Vec<f64> = rows
            .iter()
            .map(|r| (ns(r, "transfer_end_ns") - ns(r, "prefill_end_ns")) as f64)
            .collect();
        (mean(&w), w.iter().cloned().fold(0.0, f64::max))
    };
    let (big_mean, big_max) = wait("4096");
    let (small_mean, small_max) = wait("64");
    assert!(small_mean > big_mean, "{small_mean} vs {big_mean}");
    assert!(small_max >= big_max + 1e6, "{small_max} vs {big_max}");

    let (s, _) = run_rows(STAGED, &["sglang.staging_pool_mb=63"], "staging-ring-63");
    assert_eq!(s.requests.completed, 0);
    let e = &s.errors[0];
    assert!(
        e.message.starts_with("Transfer thread failed because of [Staging] Chunk staging allocation permanently failed: chunk exceeds ring buffer total size (room="),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("Increase SGLANG_DISAGG_STAGING_POOL_SIZE_MB.")
    );
}

/// sglang's refusals: the MLA decode's start-up error and the backend check, each exit 2
/// naming the key.
#[test]
fn staging_refuses_mla_and_other_backends() {
    let load = |path: &str, set: &str| {
        pdsim::scenario::load(&repo().join(path), &[set.to_string()]).unwrap_err()
    };
    let e = load(
        "scenarios/pd/deepseek-hetero-tp.toml",
        "sglang.staging_buffer=true",
    );
    assert_eq!(e.key, "sglang.staging_buffer");
    let m = e.to_string();
    assert!(m.contains("SGLANG_DISAGG_STAGING_BUFFER is designed for non-MLA models (e.g. GQA, MHA). MLA models should not set this flag."), "{m}");
    let e = load(STAGED, "sglang.transfer_backend=mori");
    assert_eq!(e.key, "sglang.staging_buffer");
    let m = e.to_string();
    assert!(m.contains("SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got 'mori'."), "{m}");
}

/// `transfer_backend = "mooncake_tcp"` (sglang PR #26346: the Mooncake manager over TCP,
/// `MC_FORCE_TCP=1`) at a stated 25 Gb/s a GPU: each prefill rank of the p2d4 pair sends
/// half the request's KV, 134,217,728 B, through its GPU's engine at ≤ 3.125 B/ns, so no
/// transfer can take less than 42.95 ms — against the RDMA engine's 23.75 B/ns. The default
/// backend's results are the scenario's own (golden).
#[test]
fn mooncake_over_tcp_moves_at_the_stated_rate() {
    let sets = ["run.max_requests=5"];
    let tcp = [
        "run.max_requests=5",
        "sglang.transfer_backend=mooncake_tcp",
        "sglang.tcp_gbps=25",
    ];
    let (_, rdma) = run_rows(STAGED, &sets, "staging-tcp-rdma");
    let (s, over_tcp) = run_rows(STAGED, &tcp, "staging-tcp-tcp");
    assert_eq!(s.requests.completed, 5);
    let floor_ns = (134_217_728.0_f64 / 3.125).ceil() as u64;
    for (a, b) in rdma.iter().zip(&over_tcp) {
        let t = |r: &Row| ns(r, "transfer_end_ns") - ns(r, "transfer_start_ns");
        assert!(t(b) >= floor_ns, "request {}: {} ns", b["id"], t(b));
        assert!(
            t(a) < floor_ns / 3,
            "request {}: {} ns over RDMA",
            a["id"],
            t(a)
        );
    }
}
