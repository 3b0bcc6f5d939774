//! The sample benchmark file `pdsim calibrate` ships with
//! (`scenarios/calibration/samples/`, its README says where the figures come from): the fit
//! runs on it, its parameters land in a plausible range, it reproduces the measurements it
//! was fitted to, and a scenario accepts the file it writes.

use crate::common;

use common::{pdsim, repo, tmpdir};
use pdsim::compute::{fit, measure};
use pdsim::spec::calibration::{CalibrationFile, SGLANG_2025};
use pdsim::spec::{gpu_preset, preset};

const SAMPLE: &str = "scenarios/calibration/samples/llama2-70b-h100-tp4.bench_one_batch.jsonl";

#[test]
fn the_sample_calibrates_to_parameters_in_range() {
    let dir = tmpdir("calibrate-sample");
    let out = dir.join("llama2-70b-h100-tp4.toml");
    let sample = repo().join(SAMPLE);
    let (code, stdout, stderr) = pdsim(&[
        "calibrate",
        &sample.display().to_string(),
        "--model",
        "llama2-70b",
        "--gpu",
        "h100-sxm",
        "--tp",
        "4",
        "--out",
        &out.display().to_string(),
    ]);
    println!("{stdout}");
    assert_eq!(code, 0, "{stderr}");
    let file = CalibrationFile::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // 19 bench_one_batch records, each a prefill and a decode point.
    assert_eq!(file.measured.points, 38);
    let p = &file.params;
    // Fractions of the H100's peaks, and per-step costs, where a 2023 vLLM engine sits
    // (docs/numbers.md §2: ~47 % of BF16 peak in prefill at TP2, falling with TP; decode
    // streams weights well below the HBM peak).
    assert!(
        (0.25..=0.7).contains(&p.prefill_flops_efficiency),
        "{}",
        p.prefill_flops_efficiency
    );
    assert!(
        (0.2..=0.9).contains(&p.hbm_efficiency),
        "{}",
        p.hbm_efficiency
    );
    for (name, s) in [
        ("prefill_overhead_s", p.prefill_overhead_s),
        ("prefill_per_seq_overhead_s", p.prefill_per_seq_overhead_s),
        ("decode_overhead_s", p.decode_overhead_s),
        ("decode_per_seq_overhead_s", p.decode_per_seq_overhead_s),
    ] {
        assert!((0.0..0.05).contains(&s), "{name} = {s} s");
    }

    // The fit reproduces its own measurements better than the default does: every regime's
    // median within 10 %, the batch-1 decode steps (weight streaming) within 2 %.
    let text = std::fs::read_to_string(&sample).unwrap();
    let points = measure::parse(SAMPLE, &text).unwrap();
    let setup = fit::Setup {
        gpu: gpu_preset("h100-sxm").unwrap(),
        model: preset("llama2-70b").unwrap(),
        tp: 4,
        kv_dtype_bytes: 2,
    };
    let after = fit::report(&setup, p, &points);
    let before = fit::report(&setup, &SGLANG_2025, &points);
    for r in &after {
        assert!(r.median < 0.10, "{}: {:.1} %", r.regime, 100.0 * r.median);
    }
    let b1 = after.iter().find(|r| r.regime == "decode batch 1").unwrap();
    assert!(
        b1.median < 0.02,
        "decode batch 1: {:.1} %",
        100.0 * b1.median
    );
    let mean = |rs: &[fit::RegimeError]| rs.iter().map(|r| r.median).sum::<f64>();
    assert!(mean(&after) < mean(&before));

    // A scenario on the measured setup accepts the file and runs.
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "[run]\nname = \"sample\"\nduration_s = 5\n[model]\npreset = \"llama2-70b\"\n\
         [hardware]\ngpu = \"h100-sxm\"\ncalibration = \"llama2-70b-h100-tp4.toml\"\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n[pools.server]\ntp_size = 4\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n[pools.server]\ntp_size = 4\n\
         [workload]\narrival = { process = \"poisson\", rate_per_s = 1 }\n\
         input_tokens = { dist = \"fixed\", value = 512 }\noutput_tokens = { dist = \"fixed\", value = 32 }\n",
    )
    .unwrap();
    let (code, _, err) = pdsim(&[
        "run",
        &scenario.display().to_string(),
        "-q",
        "--summary-only",
        "--out",
        &dir.join("run").display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
