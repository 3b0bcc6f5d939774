//! An NVFP4 configuration against its published rows (issue 43's "an FP4 configuration ...
//! within 20 %"), held out — nothing here or in the step model is fitted to them: DeepSeek-R1
//! in NVFP4 on 8 × B200, TP 8 with EP 8 and no DeepEP, colocated, closed loop at concurrency
//! 4–32, 1k/1k (SemiAnalysis InferenceX `dsr1-fp4-b200-sglang`, issue #870, SGLang v0.5.6;
//! `scenarios/calibration/r1-fp4-b200-inferencex.toml` has the launch line).
//!
//! Each row prints output tok/s per GPU against the published figure. Read −38 … −47 % while
//! pdsim charged this EP mode an all-to-all it does not run (four all-to-all latencies a MoE
//! layer, and the block's all-reduce dropped); with the TP all-reduce as its combine
//! (`ExpertCost::combines_by_allreduce`, sglang's `DeepseekV2MoE.forward_normal`) it reads
//! −24 … −26 %, −22 … −24 % with the router priced in BF16 and a Blackwell prefill's MLA from
//! its kernels under the context module's host floor, and −16 … −18 % with the shared experts
//! beside the routed ones on sglang's second stream (`forward_normal_dual_stream`: under
//! `--ep-size 8` sglang does not fuse the shared expert). At concurrency 4 a decode step is
//! ~9.6 ms where AIConfigurator's own estimate is 8.0 ms (its power-law expert rows; no host)
//! and the row implies ~8.4; the benchmark also ran kernels the tables do not measure
//! (FlashInfer's fused all-reduce with symmetric memory). The test holds Blackwell's 20 % bar
//! (issue 42), which the rows now meet.
//! `cargo test --release --test fidelity moe_fp4_b200 -- --nocapture`.

use crate::common;

/// (concurrency, published output tok/s per GPU).
const ROWS: [(u32, f64); 4] = [(4, 59.7), (8, 104.8), (16, 169.3), (32, 282.4)];

/// `c` sessions of 10 turns (bench_serving's `C × 10` prompts at `--max-concurrency C`), every
/// turn's lengths spread evenly over 819–1,024 tokens (`--random-range-ratio 0.8`), all sent at
/// 0: each session's next turn waits for its previous one, which makes the closed loop.
fn closed_loop(c: u32) -> String {
    let mut s = String::from("arrival_s,input_tokens,output_tokens,session_id,turn\n");
    let len = |k: u32, a: u32, b: u32| 819 + ((k * a + b) % 100) * 205 / 99;
    for (k, (session, turn)) in (0..c)
        .flat_map(|s| (0..10).map(move |t| (s, t)))
        .enumerate()
    {
        let k = k as u32;
        s += &format!("0,{},{},{session},{turn}\n", len(k, 37, 0), len(k, 61, 13));
    }
    s
}

#[test]
fn r1_fp4_b200_closed_loop_rows() {
    // The shipped trace is this generator's concurrency-4 output.
    let shipped =
        std::fs::read_to_string(common::repo().join("scenarios/calibration/r1-fp4-b200-conc4.csv"))
            .unwrap();
    assert_eq!(
        shipped,
        closed_loop(4),
        "the shipped trace is the generator's"
    );
    println!(
        "R1-0528 NVFP4, 8 × B200, TP8 EP8 (no DeepEP), 1k/1k closed loop: output tok/s per GPU"
    );
    let mut errors = Vec::new();
    for (c, published) in ROWS {
        let dir = common::tmpdir(&format!("r1-fp4-b200-c{c}"));
        let trace = dir.join(format!("conc{c}.csv"));
        std::fs::write(&trace, closed_loop(c)).unwrap();
        let s = common::run(
            "scenarios/calibration/r1-fp4-b200-inferencex.toml",
            &[&format!(
                "workload.trace={{ path = \"{}\", format = \"csv\" }}",
                trace.display()
            )],
            &dir,
        );
        assert_eq!(s.requests.completed, u64::from(c) * 10, "concurrency {c}");
        let rows = common::read_csv(&dir.join("requests.csv"));
        let at =
            |r: &std::collections::BTreeMap<String, String>, k: &str| common::num(r, k).unwrap();
        let first = rows.iter().map(|r| at(r, "arrival_ns")).min().unwrap();
        let last = rows.iter().map(|r| at(r, "finish_ns")).max().unwrap();
        let out: u64 = rows.iter().map(|r| at(r, "output_tokens")).sum();
        let got = out as f64 / ((last - first) as f64 / 1e9) / 8.0;
        let tpot = rows
            .iter()
            .map(|r| {
                (at(r, "finish_ns") - at(r, "first_token_ns")) as f64
                    / 1e6
                    / (at(r, "output_tokens") - 1) as f64
            })
            .sum::<f64>()
            / rows.len() as f64;
        let err = got / published - 1.0;
        println!(
            "  concurrency {c:>2}: published {published:>6.1}  pdsim {got:>6.1} ({:+5.1} %)  mean TPOT {tpot:.2} ms",
            100.0 * err
        );
        errors.push((c, err));
    }
    for (c, e) in errors {
        assert!(
            e.abs() < 0.20,
            "concurrency {c}: {:+.1} % is outside Blackwell's 20 % — revisit docs/performance-model.md §7.8",
            100.0 * e
        );
    }
}
