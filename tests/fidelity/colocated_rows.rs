//! The colocated rows of `calibration/modern-engines.md` (sglang 0.3.0's own benchmark,
//! `benchmark/benchmark_vllm_060/README.md`: one plain server, ShareGPT) run as scenarios
//! through the colocated role, not as step-time checks:
//! `scenarios/calibration/sharegpt-colocated.toml` with the row's model, GPU, TP and rate. Each
//! row's error is printed (`cargo test --release --test fidelity colocated_rows -- --nocapture`).
//!
//! What the bounds mean:
//! - median ITL: held out here (the step model was fitted to them as pure steps at the
//!   Little's-law batch): within 30 %;
//! - median TTFT (the same runs): `first_token_path_s` is their fitted residual (one constant for
//!   four rows) and the rest is the forward and the tokenizer: in-sample, the 15 % — but
//!   fitted while pdsim's colocated server mixed every prefill chunk with the decode batch, and
//!   sglang 0.3.0 ran these rows without `--enable-mixed-chunk` (the README's commands), as the
//!   server now does by default (issue 43): a prompt's prefill runs alone at once, and the 70B
//!   rows read −18.0 / −15.5 %. Until the residual is refitted with the step-time model (issue
//!   42), the bound is 20 %;
//! - offline throughput (5,000 prompts at once, as the README's command): not fitted, held out:
//!   within 30 %. It reads low (docs/performance-model.md §2 says why what is left is left).
//!
//! The 8B A100 rows run under the default (`sglang-2026`, measured kernels); the 70B H100 TP4
//! rows under `sglang-2025`: sglang 0.3.0's 70B TP4 decode is ~1.4× what 2026's kernels run
//! (AIConfigurator's tables and pdsim agree within 1 % there, `aic_side_by_side.rs`), so
//! under the default they read ITL −28 / −32 %, TTFT −24 / −27 %, offline +35 % — printed by
//! `compute::modern`'s sglang-2026 table, not held here.

use crate::common;

/// (label, model, GPU, TP, rate req/s or None for offline, published figure, bound).
type Row = (
    &'static str,
    &'static str,
    &'static str,
    u32,
    Option<f64>,
    f64,
    f64,
);

const ROWS: [Row; 6] = [
    (
        "8B A100 TP1, 4 req/s, median ITL ms",
        "llama-3.1-8b",
        "a100-sxm",
        1,
        Some(4.0),
        11.93,
        0.30,
    ),
    (
        "8B A100 TP1, 8 req/s, median ITL ms",
        "llama-3.1-8b",
        "a100-sxm",
        1,
        Some(8.0),
        14.41,
        0.30,
    ),
    (
        "70B H100 TP4, 4 req/s, median ITL ms",
        "llama-3.1-70b",
        "h100-sxm",
        4,
        Some(4.0),
        21.67,
        0.30,
    ),
    (
        "70B H100 TP4, 8 req/s, median ITL ms",
        "llama-3.1-70b",
        "h100-sxm",
        4,
        Some(8.0),
        24.45,
        0.30,
    ),
    (
        "8B A100 TP1, offline, output tok/s",
        "llama-3.1-8b",
        "a100-sxm",
        1,
        None,
        4281.5,
        0.30,
    ),
    (
        "70B H100 TP4, offline, output tok/s",
        "llama-3.1-70b",
        "h100-sxm",
        4,
        None,
        3856.0,
        0.30,
    ),
];

/// Median TTFT of the online rows, ms (model, rate req/s, published): the README's tables.
const TTFT: [(&str, f64, f64); 4] = [
    ("llama-3.1-8b", 4.0, 31.98),
    ("llama-3.1-8b", 8.0, 35.68),
    ("llama-3.1-70b", 4.0, 53.94),
    ("llama-3.1-70b", 8.0, 58.11),
];

#[test]
fn colocated_rows_of_modern_engines_run_as_scenarios() {
    let mut bad = Vec::new();
    for (label, model, gpu, tp, rate, published, bound) in ROWS {
        let dir = common::tmpdir(&format!("colocated-row-{model}-{tp}-{rate:?}"));
        let mut sets = vec![
            format!("model.preset={model}"),
            format!("hardware.gpu={gpu}"),
            format!("pools.server.server.tp_size={tp}"),
        ];
        match rate {
            Some(r) => sets.push(format!("workload.arrival.rate_per_s={r}")),
            // Offline: every prompt at once, as bench_serving's infinite request rate.
            None => sets.extend([
                "workload.arrival.rate_per_s=1000".to_string(),
                "run.max_requests=5000".to_string(),
            ]),
        }
        // The 70B H100 rows run sglang 0.3.0 (2024) where the default's 2026 kernels are a
        // third faster (`compute::modern`'s sglang-2026 table prints them: ITL −28 / −34 %):
        // they are held under `sglang-2025`, the calibration fitted to that era.
        let era = model == "llama-3.1-70b";
        if era {
            sets.push("hardware.calibration=sglang-2025".to_string());
        }
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        common::run("scenarios/calibration/sharegpt-colocated.toml", &sets, &dir);
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(
            s["requests"]["completed"], s["requests"]["arrived"],
            "{label}: every request completes"
        );
        if let Some(r) = rate {
            // The same run's median TTFT against the README's (fitted: see the module docs).
            let (_, _, ttft_published) = TTFT
                .iter()
                .find(|(m, x, _)| *m == model && *x == r)
                .expect("a TTFT row per online row");
            let got = s["latency_ms"]["ttft"]["p50"].as_f64().unwrap();
            let err = got / ttft_published - 1.0;
            println!(
                "{:<40} published {ttft_published:>8.2}  pdsim {got:>8.2}  error {:>+6.1} %  (bound ±20 %)",
                format!("{model} {gpu} TP{tp}, {r} req/s, median TTFT ms"),
                err * 100.0
            );
            if err.abs() > 0.20 {
                bad.push(format!("{label} (TTFT): {:+.1} %", err * 100.0));
            }
        }
        let got = match rate {
            Some(_) => s["latency_ms"]["itl"]["p50"].as_f64().unwrap(),
            None => s["throughput"]["output_tokens_per_s"].as_f64().unwrap(),
        };
        let err = got / published - 1.0;
        println!(
            "{label:<40} published {published:>8.2}  pdsim {got:>8.2}  error {:>+6.1} %  (bound ±{:.0} %)",
            err * 100.0,
            bound * 100.0
        );
        if err.abs() > bound {
            bad.push(format!("{label}: {:+.1} %", err * 100.0));
        }
    }
    assert!(bad.is_empty(), "outside their bounds: {bad:?}");
}
