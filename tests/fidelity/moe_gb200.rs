//! The deployments of 2026 against their published rows (issue 43, item 3), reproduced from
//! the published setups only — nothing here or in the step model is fitted to them:
//!
//! * LMSYS 2025-09-25, "Deploying DeepSeek on GB200 NVL72 with PD and Large Scale EP (Part
//!   II)": 48-GPU decode in one NVL72 rack, 2,000-token prompts — 9,087 output tok/s per GPU
//!   with FP8 MoE and BF16 attention, 13,386 with NVFP4 MoE and FP8 attention; prefill on
//!   4-GPU trays with layer-wise weight offload, 26,156 input tok/s per GPU in NVFP4. (Part I,
//!   2025-06-16, read 7,583 for the FP8 decode, printed beside.)
//! * LMSYS 2025-07-17, "Accelerating SGLang with Multiple Token Prediction": MTP on a 16-GPU
//!   decode over two H200 nodes with DeepEP, 2 requests per rank at 64K/4K: 81.5 output tok/s
//!   per rank (accept length 2.18), 60.4 without MTP.
//!
//! Each row prints its error. What the test holds is what these deployments are made of, not
//! the figures: the rows run, the FP8 decode saturates, the KV stays on NVLink inside the rack,
//! NVFP4 decodes faster than FP8 at one batch, MTP speeds the multi-node decode up. Issue 43
//! asks the NVL72 and FP4 rows within 20 % with the kernel-table step times of issue 42. Under
//! `sglang-2026` (measured GB200 kernels) the FP8 decode reads −5.4 % (met); the NVFP4 prefill
//! −44 % and therefore the NVFP4 decode it feeds −36 % (not met: its MoE at EP4 is priced at
//! the table's balanced time × the routing skew of a deployment without EPLB, 1.16 at EP4, and
//! its MLA attention by the context-MLA module table; AIConfigurator's own estimate of the tray
//! on the same tables reads −24.5 %, docs/performance-model.md §7.8); the MTP row +28 %
//! without the overlap scheduler, as July 2025's sglang ran speculation (the speedup 1.72×
//! where LMSYS measured 1.35×; the post's no-MTP, no-overlap row is in-sample, the fit of
//! `dp_attention_cpu_s`). `cargo test --release --test fidelity
//! moe_gb200 -- --nocapture` prints them.

use crate::common;

use std::collections::BTreeMap;

/// Mean output tokens per second per server of `role` over simulated seconds `from..to`, and
/// the mean running requests per server there.
fn per_server(dir: &std::path::Path, role: &str, from: u64, to: u64) -> (f64, f64) {
    let rows = common::read_csv(&dir.join("timeseries.csv"));
    let mut tokens: BTreeMap<u64, f64> = BTreeMap::new();
    let mut running: BTreeMap<u64, f64> = BTreeMap::new();
    let mut servers = std::collections::BTreeSet::new();
    for r in rows.iter().filter(|r| r["role"] == role) {
        let s = common::num(r, "second").unwrap();
        servers.insert(r["instance"].clone());
        if (from..to).contains(&s) {
            *tokens.entry(s).or_default() += common::num(r, "tokens_out").unwrap() as f64;
            *running.entry(s).or_default() += common::num(r, "running").unwrap() as f64;
        }
    }
    assert_eq!(
        tokens.len() as u64,
        to - from,
        "{dir:?}: seconds {from}..{to}"
    );
    let n = servers.len() as f64 * tokens.len() as f64;
    (
        tokens.values().sum::<f64>() / n,
        running.values().sum::<f64>() / n,
    )
}

/// Prompt tokens per second per prefill GPU over forwards ending in `from_s..to_s`, counted
/// as `moe_lmsys.rs` counts them (whole forwards per server, summed over servers).
fn prefill_tokens_per_gpu(dir: &std::path::Path, gpus: f64, from_s: f64, to_s: f64) -> f64 {
    crate::moe_lmsys::prefill_tokens_per_s(dir, from_s, to_s) / gpus
}

fn row(what: &str, got: f64, want: f64) -> f64 {
    let err = got / want - 1.0;
    println!(
        "{what:<58} published {want:>8.1}  pdsim {got:>8.1}  error {:+6.1} %",
        err * 100.0
    );
    err
}

#[test]
fn gb200_nvl72_fp4_offload_and_mtp_rows() {
    // FP8 decode, 48 GPUs in one rack: once the ranks fill (by second 7), their KV pools hold
    // ~355 requests each (of the 384 places LMSYS ran).
    let dir = common::tmpdir("gb200-fp8-decode");
    common::run("scenarios/moe/gb200-nvl72-decode.toml", &[], &dir);
    let (fp8, running) = per_server(&dir, "decode", 7, 12);
    assert!(
        running > 340.0,
        "decode not saturated: {running:.0} running per rank"
    );
    row(
        "GB200 NVL72 decode, FP8 MoE, BF16 KV (Part II)",
        fp8,
        9_087.0,
    );
    row("  the same against Part I's row", fp8, 7_583.0);
    // NVFP4 MoE + FP8 KV on the decode, 4-GPU offloading prefills. Not held to the published
    // row (issue 43 keeps it open): the decode ranks hold ~260 requests, not 384. Not for want
    // of prefills (400 trays instead of 150 lift it to ~310): sglang's decode shares its
    // request rows between the batch and the requests preallocated or in transfer, and those
    // rows bind with the KV 17 % used — the pool's bottleneck says `batch_cap`, not
    // `kv_memory`. What holds is the step: per running request, NVFP4 experts with an FP8 KV
    // decode faster than FP8 experts with a BF16 KV.
    let dir = common::tmpdir("gb200-fp4-decode");
    let s4 = common::run("scenarios/moe/gb200-nvl72-fp4-decode.toml", &[], &dir);
    let (fp4, running4) = per_server(&dir, "decode", 8, 15);
    row(
        "GB200 NVL72 decode, NVFP4 MoE, FP8 KV (Part II)",
        fp4,
        13_386.0,
    );
    let decode = s4
        .pools
        .iter()
        .find(|p| p.role == "decode")
        .expect("a decode pool");
    println!(
        "  (decode below its cap: {running4:.0} running per rank of 384, KV {:.0} % used; bound by {})",
        100.0 * decode.kv_occupancy.unwrap_or(0.0),
        decode.bottleneck
    );
    assert_eq!(
        decode.bottleneck, "batch_cap",
        "its request rows bind, not its pages"
    );
    // The rows that bind, given: `--disaggregation-decode-extra-slots` (the seed's
    // SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS, which deployment scripts of these racks
    // set) lets the requests preallocated or in transfer sit beside a full batch, and with
    // enough feeder trays every rank runs its 384. What is left of the gap is the step at 384.
    let dir = common::tmpdir("gb200-fp4-decode-full");
    common::run(
        "scenarios/moe/gb200-nvl72-fp4-decode.toml",
        &[
            "pools.decode.server.disaggregation_decode_extra_slots=640",
            "pools.prefill.instances=400",
            "workload.arrival.rate_per_s=12000",
        ],
        &dir,
    );
    let (fp4_full, running_full) = per_server(&dir, "decode", 8, 15);
    row(
        "  the same, extra slots: a full batch of 384",
        fp4_full,
        13_386.0,
    );
    assert!(
        running_full > 380.0 && running_full > running4 + 50.0,
        "extra slots should fill the batch: {running_full:.0} running per rank (without: {running4:.0})"
    );
    // The FP8 decode fed to about the same batch (3,200 req/s instead of 6,000), so the two
    // steps compare at one shape.
    let dir8 = common::tmpdir("gb200-fp8-decode-light");
    common::run(
        "scenarios/moe/gb200-nvl72-decode.toml",
        &["workload.arrival.rate_per_s=3200"],
        &dir8,
    );
    let (fp8_light, running8) = per_server(&dir8, "decode", 6, 10);
    assert!(
        (running8 / running4 - 1.0).abs() < 0.2,
        "batches differ: FP8 {running8:.0}, NVFP4 {running4:.0} per rank"
    );
    let (per4, per8) = (fp4 / running4, fp8_light / running8);
    println!(
        "  per running request at ~{running4:.0} per rank: NVFP4 {per4:.1} tok/s, FP8 {per8:.1} tok/s"
    );
    assert!(
        per4 > per8,
        "NVFP4 {per4:.1} tok/s per running request not above FP8 {per8:.1}"
    );
    // Prefill: 6 one-tray instances, saturated, their KV over NVLink to the decode.
    let dir = common::tmpdir("gb200-fp4-prefill");
    let s = common::run("scenarios/moe/gb200-fp4-offload-prefill.toml", &[], &dir);
    assert_eq!(s.requests.failed, 0);
    let prefill = prefill_tokens_per_gpu(&dir, 24.0, 3.0, 11.0);
    row(
        "GB200 prefill, 4-GPU trays, NVFP4, offload g2 (Part II)",
        prefill,
        26_156.0,
    );
    // MTP with DeepEP across two H200 nodes, 2 requests per rank, and without MTP.
    let mtp_dir = common::tmpdir("mtp-deepep");
    common::run("scenarios/moe/mtp-deepep-two-nodes.toml", &[], &mtp_dir);
    let (mtp, r1) = per_server(&mtp_dir, "decode", 55, 70);
    // Without MTP, with the overlap scheduler (the post's 60.4) and without it (its 51, the
    // row `dp_attention_cpu_s` is fitted to: in-sample).
    let without_mtp = |overlap: bool, name: &str| {
        let dir = common::tmpdir(name);
        let off = format!("pools.decode.server.disable_overlap_schedule={}", !overlap);
        common::run(
            "scenarios/moe/mtp-deepep-two-nodes.toml",
            &[
                "pools.prefill.server.speculative_algorithm=\"none\"",
                "pools.decode.server.speculative_algorithm=\"none\"",
                &off,
            ],
            &dir,
        );
        per_server(&dir, "decode", 55, 70)
    };
    let (plain, r2) = without_mtp(true, "mtp-deepep-off");
    let (serial, r3) = without_mtp(false, "mtp-deepep-off-serial");
    assert!(
        r1 > 1.8 && r2 > 1.8 && r3 > 1.8,
        "2 per rank: {r1:.2}, {r2:.2}, {r3:.2}"
    );
    row(
        "H200 × 2 nodes, EP16 DeepEP, MTP 2 steps: tok/s per rank",
        mtp,
        81.5,
    );
    row("  the same without MTP", plain, 60.4);
    let fitted = row(
        "  without MTP or the overlap scheduler (in-sample)",
        serial,
        51.0,
    );
    row("  MTP speedup", mtp / plain, 81.5 / 60.4);
    assert!(mtp > plain, "MTP {mtp:.1} not above {plain:.1}");
    // The fit: the scheduler's work the overlap hides is what separates 51 from 60.4.
    assert!(fitted.abs() < 0.02, "the fitted row moved: {fitted:+.3}");
    assert!(
        serial < plain,
        "no overlap {serial:.1} not below {plain:.1}"
    );
}
