//! Held-out rows for Kimi K2 and DeepSeek-R1 on H200, run from the published setups with the
//! defaults — nothing here, in the scenarios or in the step model is fitted to them:
//!
//! * LMSYS 2025-07-20, "Deploying Kimi K2 with PD Disaggregation and Large-Scale Expert
//!   Parallelism on 128 H200 GPUs" (https://lmsys.org/blog/2025-07-20-k2-large-scale-ep/),
//!   1P1D with 4 prefill and 12 decode nodes, 2,000-token inputs and 100-token outputs:
//!   "56k / node" prefill (input tok/s per prefill node) and "24k / node" decode (output tok/s
//!   per decode node, decode batch 480 per rank). Launch flags from the OME runtime the post
//!   deploys (`scenarios/calibration/k2-h200-*.toml` quote them).
//! * GPUStack's performance lab, "Optimizing DeepSeek-R1 Throughput on NVIDIA H200 GPUs"
//!   (https://github.com/gpustack/gpustack/blob/main/docs/performance-lab/deepseek-r1/h200.md):
//!   DeepSeek-R1-0528 on one 8 × H200 node, sglang 0.5.3 `--tp 8 --enable-dp-attention`, 500
//!   prompts sent at once: total (input + output) token throughput 19,024.33 tok/s at 2K/100
//!   and 16,096.80 at 4K/200 (`scenarios/calibration/r1-h200-tp8-colocated.toml`). Colocated,
//!   not PD.
//!
//! Each row prints `row | published | pdsim | error %`. The test holds what must be true
//! whatever the step model's constants: every run completes and conserves its requests, the
//! prefill capacity does not move with the arrival rate, the decode ranks are full where the
//! decode row is read, and every row is within ±60 % of its figure (a sanity band that catches
//! a broken model, not issue 22's 20 % bar, which the rows are printed against). The two K2
//! rows are held to issue 42's decode and prefill bar, 15 %, which they meet since DeepEP's MoE
//! table is read at a rank's shape (K2's 384 experts through DeepSeek-V3's 256-expert table;
//! `docs/performance-model.md` §2.1): +12.6 % and +13.9 %.
//! `cargo test --release --test fidelity moe_k2_r1 -- --nocapture`.

use crate::common;

use std::collections::BTreeMap;

/// The sanity band: a row further than this from its published figure means the model broke.
const SANITY: f64 = 0.60;

/// Issue 22's bar, printed against (not asserted: these rows are held out).
const BAR: f64 = 0.20;

/// Issue 42's bar for decode and prefill rows, held on the two K2 rows.
const K2_BAR: f64 = 0.15;

/// Every request of the run completed, and the outcomes add up to the arrivals.
fn completes(what: &str, s: &pdsim::report::Summary) {
    let c = &s.requests;
    assert!(
        c.conserved(),
        "{what}: outcomes do not sum to arrivals: {c:?}"
    );
    assert!(c.arrived > 0, "{what}: nothing arrived");
    assert_eq!(
        c.completed, c.arrived,
        "{what}: not every request completed: {c:?}"
    );
}

/// Output tokens per second per node of the servers of `role` over simulated seconds
/// `from..to`, and their mean running requests per server there.
fn decode_per_node(
    dir: &std::path::Path,
    role: &str,
    nodes: f64,
    from: u64,
    to: u64,
) -> (f64, f64) {
    let rows = common::read_csv(&dir.join("timeseries.csv"));
    let mut tokens: BTreeMap<u64, f64> = BTreeMap::new();
    let mut running: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["role"] == role) {
        let s = common::num(r, "second").unwrap();
        if (from..to).contains(&s) {
            *tokens.entry(s).or_default() += common::num(r, "tokens_out").unwrap() as f64;
            let e = running.entry(s).or_default();
            e.0 += common::num(r, "running").unwrap() as f64;
            e.1 += 1.0;
        }
    }
    assert_eq!(
        tokens.len() as u64,
        to - from,
        "{dir:?}: seconds {from}..{to}"
    );
    let secs = tokens.len() as f64;
    (
        tokens.values().sum::<f64>() / secs / nodes,
        running.values().map(|(r, n)| r / n).sum::<f64>() / secs,
    )
}

/// Input plus output tokens of every request over the time from the first arrival to the last
/// request's end: what `vllm bench serve` prints as "Total Token throughput".
fn total_tokens_per_s(dir: &std::path::Path) -> f64 {
    let rows = common::read_csv(&dir.join("requests.csv"));
    let first = rows
        .iter()
        .map(|r| common::num(r, "arrival_ns").unwrap())
        .min()
        .unwrap();
    let last = rows
        .iter()
        .map(|r| common::num(r, "finish_ns").expect("every request finished"))
        .max()
        .unwrap();
    let tokens: u64 = rows
        .iter()
        .map(|r| common::num(r, "input_tokens").unwrap() + common::num(r, "output_tokens").unwrap())
        .sum();
    tokens as f64 / ((last - first) as f64 / 1e9)
}

/// Prints one row and returns its error (pdsim ÷ published − 1).
fn row(what: &str, published: f64, got: f64) -> f64 {
    let err = got / published - 1.0;
    let met = if err.abs() <= BAR {
        "within"
    } else {
        "outside"
    };
    println!(
        "{what:<68} | {published:>9.1} | {got:>9.1} | {:>+6.1} %  ({met} {:.0} %)",
        err * 100.0,
        BAR * 100.0
    );
    err
}

#[test]
fn kimi_k2_and_deepseek_r1_h200_rows() {
    println!(
        "{:<68} | {:>9} | {:>9} | error",
        "row", "published", "pdsim"
    );
    let mut errors: Vec<(String, f64)> = Vec::new();

    // Kimi K2 prefill: one 4-node EP32 instance, saturated (prompts queue), counted over whole
    // forwards ending in seconds 5..15 as `moe_lmsys` counts them.
    let dir = common::tmpdir("k2-prefill");
    let s = common::run("scenarios/calibration/k2-h200-prefill-ep32.toml", &[], &dir);
    completes("K2 prefill", &s);
    let prefill = crate::moe_lmsys::prefill_tokens_per_s(&dir, 5.0, 15.0) / 4.0;
    let what = "K2 H200 prefill EP32 (4 nodes), 2K prompts: input tok/s/node";
    errors.push((what.into(), row(what, 56_000.0, prefill)));
    // At saturation the capacity must not depend on how far past it the arrivals are.
    let dir2 = common::tmpdir("k2-prefill-x2");
    let s2 = common::run(
        "scenarios/calibration/k2-h200-prefill-ep32.toml",
        &["workload.arrival.rate_per_s=400"],
        &dir2,
    );
    completes("K2 prefill at 2x", &s2);
    let twice = crate::moe_lmsys::prefill_tokens_per_s(&dir2, 5.0, 15.0) / 4.0;
    assert!(
        (twice / prefill - 1.0).abs() < 0.01,
        "K2 prefill capacity moved with the arrival rate: {prefill:.0} at 1x, {twice:.0} at 2x"
    );

    // Kimi K2 decode: one 12-node EP96 instance, its ranks full (~470 of 480) from second 12.
    let dir = common::tmpdir("k2-decode");
    let s = common::run("scenarios/calibration/k2-h200-decode-ep96.toml", &[], &dir);
    completes("K2 decode", &s);
    let (decode, running) = decode_per_node(&dir, "decode", 12.0, 12, 16);
    assert!(
        running > 440.0,
        "K2 decode not at its batch: {running:.0} running per rank of 480"
    );
    let what = "K2 H200 decode EP96 (12 nodes), 2K/100, 480/rank: output tok/s/node";
    errors.push((what.into(), row(what, 24_000.0, decode)));
    println!("  (decode ranks hold {running:.0} requests each on average in the window)");

    // DeepSeek-R1-0528 on one H200 node, colocated, 500 prompts at once.
    for (label, input, output, published) in [
        ("2K", 1997u32, 100u32, 19_024.33),
        ("4K", 3995, 200, 16_096.80),
    ] {
        let dir = common::tmpdir(&format!("r1-h200-{label}"));
        let s = common::run(
            "scenarios/calibration/r1-h200-tp8-colocated.toml",
            &[
                &format!("workload.input_tokens={{ dist = \"fixed\", value = {input} }}"),
                &format!("workload.output_tokens={{ dist = \"fixed\", value = {output} }}"),
            ],
            &dir,
        );
        completes(&format!("R1 H200 {label}"), &s);
        assert_eq!(
            s.requests.arrived, 500,
            "R1 H200 {label}: the benchmark's 500 prompts"
        );
        let what = format!("R1-0528 H200 TP8 colocated, 500 × {input}/{output}: total tok/s");
        let e = row(&what, published, total_tokens_per_s(&dir));
        errors.push((what, e));
    }

    for (what, e) in errors.iter().filter(|(w, _)| w.starts_with("K2")) {
        assert!(
            e.abs() <= K2_BAR,
            "{what}: {:+.1} % is beyond issue 42's ±{:.0} %",
            e * 100.0,
            K2_BAR * 100.0
        );
    }
    for (what, e) in errors {
        assert!(
            e.abs() <= SANITY,
            "{what}: {:+.1} % is beyond the ±{:.0} % sanity band (the model broke)",
            e * 100.0,
            SANITY * 100.0
        );
    }
}
