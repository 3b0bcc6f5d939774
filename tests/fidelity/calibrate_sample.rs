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

/// The same measurements as a served deployment shows them (`make_observed.py` beside the
/// samples: a PD prefill server's log, a PD decode server's log and scrapes of its
/// `/metrics`): the fit from them predicts every measured shape as the fit from the benchmark
/// records does, within 2 %, and the generator still writes the shipped files.
#[test]
fn the_observed_samples_calibrate_as_the_benchmark_sample_does() {
    let dir = tmpdir("calibrate-observed-sample");
    let samples = repo().join("scenarios/calibration/samples");
    let fit_of = |files: &[&str], out: &str| {
        let mut args: Vec<String> = vec!["calibrate".into()];
        args.extend(files.iter().map(|f| samples.join(f).display().to_string()));
        args.extend(
            [
                "--model",
                "llama2-70b",
                "--gpu",
                "h100-sxm",
                "--tp",
                "4",
                "--out",
            ]
            .map(String::from),
        );
        args.push(dir.join(out).display().to_string());
        let (code, stdout, stderr) = pdsim(&args);
        println!("{stdout}{stderr}");
        assert_eq!(code, 0, "{stderr}");
        (
            CalibrationFile::parse(&std::fs::read_to_string(dir.join(out)).unwrap()).unwrap(),
            stderr,
        )
    };
    let (observed, notes) = fit_of(
        &[
            "llama2-70b-h100-tp4.prefill-server.log",
            "llama2-70b-h100-tp4.decode-server.log",
            "llama2-70b-h100-tp4.decode-server.prom",
        ],
        "observed.toml",
    );
    let (bench, _) = fit_of(&["llama2-70b-h100-tp4.bench_one_batch.jsonl"], "bench.toml");
    // What the reading left out is said, with its place.
    assert!(notes.contains("prefill-server.log:20"), "{notes}");
    assert!(notes.contains("decode-server.log:1"), "{notes}");
    // 19 prefill batches; 19 records × 4 decode lines less the first; 19 scrape windows.
    assert_eq!(observed.measured.points, 19 + 75 + 19);
    assert_eq!(observed.measured.decode_batch, Some([1, 64]));
    let setup = fit::Setup {
        gpu: gpu_preset("h100-sxm").unwrap(),
        model: preset("llama2-70b").unwrap(),
        tp: 4,
        kv_dtype_bytes: 2,
    };
    let text = std::fs::read_to_string(repo().join(SAMPLE)).unwrap();
    let points = measure::parse(SAMPLE, &text).unwrap();
    let mut worst: f64 = 0.0;
    for p in &points {
        let (a, b) = (
            p.predict_ms(&setup.step_model(&observed.params)),
            p.predict_ms(&setup.step_model(&bench.params)),
        );
        worst = worst.max((a / b - 1.0).abs());
    }
    println!(
        "worst difference between the two fits over the measured shapes: {:.2} %",
        100.0 * worst
    );
    assert!(worst < 0.02, "{:.2} %", 100.0 * worst);
    // The generator is deterministic and the shipped files are its output.
    let copy = dir.join("gen");
    std::fs::create_dir_all(&copy).unwrap();
    for f in [
        "make_observed.py",
        "llama2-70b-h100-tp4.bench_one_batch.jsonl",
    ] {
        std::fs::copy(samples.join(f), copy.join(f)).unwrap();
    }
    let ok = std::process::Command::new("python3")
        .arg(copy.join("make_observed.py"))
        .status()
        .expect("python3 runs");
    assert!(ok.success());
    for f in [
        "llama2-70b-h100-tp4.prefill-server.log",
        "llama2-70b-h100-tp4.decode-server.log",
        "llama2-70b-h100-tp4.decode-server.prom",
    ] {
        assert_eq!(
            std::fs::read(copy.join(f)).unwrap(),
            std::fs::read(samples.join(f)).unwrap(),
            "{f} is not make_observed.py's output"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
