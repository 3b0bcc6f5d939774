//! The TTFT column of Mooncake's sglang PD table (kvcache-ai/Mooncake
//! `docs/source/performance/sglang/sglang-benchmark-results-v1.md`, PR #2972; sglang main
//! 43124cdd + Mooncake 6e3a11b9): Qwen3-235B-A22B BF16 at TP 8 on one prefill and one decode node
//! of 8 H20-3e, chunked prefill and the radix cache off, one request at a time, output 128 —
//! `scenarios/calibration/mooncake-sglang-h20.toml`, whose transfer column
//! `tests/fabric/fabric_scenarios.rs` checks. Nothing was fitted to this column, and the H20-3e
//! has no kernel tables: its prefill is the roofline with the efficiencies its FLOP-to-byte
//! balance gives (`spec::kernels::balance`, issue 42), so this is the held-out check of prefill
//! on a GPU without tables.
//!
//! What holds: from 4k tokens up (prefill-dominated) within 15 %. What does not (printed, and
//! pinned so a change is seen): at 128–1,024 tokens sglang's PD path has a floor of ~125 ms a
//! request that pdsim's short-prompt TTFT (36–75 ms) lacks — a prefill of 128 tokens costs
//! pdsim 26 ms, and no public row separates what the remaining ~90 ms is (the router's two
//! dispatches, decode's polling of the KV receiver, the first decode step's output, the
//! detokenizer). `cargo test --release --test fidelity h20_pd_ttft -- --nocapture`.

use crate::common;

/// (prompt tokens, published TTFT ms: the table's "TTFT (ms)", bench_serving's mean at
/// concurrency 1).
const ROWS: [(u64, f64); 9] = [
    (128, 129.21),
    (256, 125.76),
    (512, 133.91),
    (1024, 125.84),
    (2048, 172.05),
    (4096, 304.02),
    (8192, 591.14),
    (16384, 1305.15),
    (32768, 3260.14),
];

#[test]
fn h20_pd_ttft_one_request_at_a_time() {
    let dir = common::tmpdir("h20-pd-ttft");
    let s = common::run("scenarios/calibration/mooncake-sglang-h20.toml", &[], &dir);
    assert_eq!(s.requests.completed, 9);
    let rows = common::read_csv(&dir.join("requests.csv"));
    println!("sglang PD, Qwen3-235B BF16 TP8, H20-3e 1P1D, concurrency 1: TTFT ms");
    let mut short = Vec::new();
    for (row, (tokens, published)) in rows.iter().zip(ROWS) {
        assert_eq!(common::num(row, "input_tokens"), Some(tokens));
        let at = |c: &str| common::num(row, c).unwrap() as f64 / 1e6;
        let ttft = at("first_token_ns") - at("arrival_ns");
        let forward = at("prefill_end_ns") - at("prefill_start_ns");
        let err = ttft / published - 1.0;
        let held = tokens >= 4096;
        println!(
            "{tokens:>6} tokens: published {published:>8.2}  pdsim {ttft:>8.2} ({:+6.1} %)  prefill forward {forward:>8.2}  {}",
            100.0 * err,
            if held {
                "held (15 %)"
            } else {
                "PD floor not modelled"
            }
        );
        if held {
            assert!(
                err.abs() < 0.15,
                "{tokens} tokens: {ttft:.1} vs {published} ms"
            );
        } else {
            short.push(published - ttft);
        }
    }
    // The short-prompt gap, pinned: pdsim is 50–100 ms under sglang's PD floor there.
    for (i, gap) in short.iter().enumerate() {
        assert!(
            (30.0..110.0).contains(gap),
            "row {i}: the short-prompt gap moved to {gap:.1} ms — revisit the docs"
        );
    }
}
