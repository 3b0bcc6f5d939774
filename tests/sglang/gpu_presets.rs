//! Every GPU preset end to end: the quickstart cluster (Llama-3.1-8B, 2P2D at TP 2) on each
//! `hardware.gpu` loads and serves a few requests; and `quantization = "fp8"` (sglang's
//! `--quantization fp8`) through the whole simulator: a faster decode, and the flag in the
//! plan's launch lines, which `pdsim lint` reads back.

use crate::common;
use common::*;

use pdsim::spec::gpu::GPU_PRESETS;

/// A short run of the quickstart: 12 requests at 2 per second.
const SHORT: &[&str] = &["run.max_requests=12", "workload.arrival.rate_per_s=2.0"];

#[test]
fn every_gpu_preset_serves_the_quickstart() {
    assert!(GPU_PRESETS.len() >= 9, "{GPU_PRESETS:?}");
    for gpu in GPU_PRESETS {
        let dir = tmpdir(&format!("gpu-{gpu}"));
        let set = format!("hardware.gpu=\"{gpu}\"");
        let sets: Vec<&str> = SHORT.iter().copied().chain([set.as_str()]).collect();
        let s = run("scenarios/quickstart.toml", &sets, &dir);
        assert_eq!(s.requests.arrived, 12, "{gpu}");
        assert_eq!(
            (
                s.requests.completed,
                s.requests.failed,
                s.requests.corrupted
            ),
            (12, 0, 0),
            "{gpu}: {:?}",
            s.requests
        );
        assert!(s.latency_ms.tpot.mean.unwrap() > 0.0, "{gpu}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// On an H20 (4.0 TB/s, 148 BF16 TFLOPS) a lightly loaded 8B decode is bound by streaming the
/// weights: FP8 weights on both pools cut the mean TPOT by a third or more.
#[test]
fn fp8_weights_shorten_the_decode_end_to_end() {
    let tpot = |extra: &[&str], name: &str| {
        let dir = tmpdir(name);
        let sets: Vec<&str> = SHORT
            .iter()
            .copied()
            .chain(["hardware.gpu=\"h20\""])
            .chain(extra.iter().copied())
            .collect();
        let s = run("scenarios/quickstart.toml", &sets, &dir);
        assert_eq!(s.requests.completed, 12, "{name}");
        let _ = std::fs::remove_dir_all(&dir);
        s.latency_ms.tpot.mean.unwrap()
    };
    let bf16 = tpot(&[], "fp8-off");
    let fp8 = tpot(
        &[
            "pools.prefill.server.quantization=\"fp8\"",
            "pools.decode.server.quantization=\"fp8\"",
        ],
        "fp8-on",
    );
    assert!(
        fp8 < 0.8 * bf16,
        "mean TPOT with FP8 weights {fp8:.2} ms vs BF16 {bf16:.2} ms"
    );
}

/// The plan's launch lines carry `--quantization fp8`, and lint reads it into both servers'
/// args: a consistent pair, no warning about it.
#[test]
fn the_launch_lines_carry_the_flag_and_lint_reads_it() {
    let sets: Vec<String> = [
        "pools.prefill.server.quantization=\"fp8\"",
        "pools.decode.server.quantization=\"fp8\"",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let sc = pdsim::scenario::load(&repo().join("scenarios/quickstart.toml"), &sets).unwrap();
    let text = pdsim::plan::launch::launch_text(&sc);
    let lines: Vec<&str> = pdsim::plan::launch::commands(&text)
        .filter(|l| l.contains("sglang.launch_server"))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines.iter().all(|l| l.contains("--quantization fp8")),
        "{text}"
    );
    let pick = |mode: &str| {
        lines
            .iter()
            .find(|l| l.contains(&format!("--disaggregation-mode {mode}")))
            .unwrap()
            .to_string()
    };
    let r = pdsim::diagnose::lint::lint(&pdsim::diagnose::lint::LintQuestion {
        prefill: pick("prefill"),
        decode: pick("decode"),
        model_config: None,
        profile: "guarded".into(),
        version: None,
    })
    .unwrap();
    assert!(
        r.prediction.compatible,
        "{}",
        pdsim::diagnose::lint::render(&r)
    );
    for side in [&r.prefill, &r.decode] {
        assert_eq!(
            side.args.quantization,
            Some(pdsim::spec::server::Quantization::Fp8)
        );
    }
    assert!(
        r.warnings.iter().all(|w| !w.contains("quantiz")),
        "{:?}",
        r.warnings
    );
}
