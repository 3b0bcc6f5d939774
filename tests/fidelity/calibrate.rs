//! `pdsim calibrate` end to end: measurements made by pdsim itself under known parameters, in
//! each input format, are fitted back within 2 %; the file it writes is accepted by
//! `hardware.calibration` and changes the run; bad input exits 2 naming file, line and field.

use crate::common;

use std::fmt::Write as _;
use std::path::Path;

use common::{pdsim, tmpdir};
use pdsim::compute::StepModel;
use pdsim::spec::calibration::{CalibrationFile, ComputeParams, SGLANG_2025};
use pdsim::spec::{gpu_preset, preset};

/// A cluster whose parameters differ from the default by 10–40 %.
fn truth() -> ComputeParams {
    ComputeParams {
        prefill_flops_efficiency: 0.38,
        prefill_mfu_half_tokens: 500.0,
        decode_flops_efficiency: 0.45,
        hbm_efficiency: 0.58,
        kv_hbm_efficiency: 0.45,
        prefill_overhead_s: 3.0e-3,
        prefill_per_seq_overhead_s: 8.0e-5,
        decode_overhead_s: 7.0e-4,
        decode_per_seq_overhead_s: 6.0e-5,
        first_token_path_s: 6.0e-3,
        ..SGLANG_2025
    }
}

fn model(p: &ComputeParams) -> StepModel {
    StepModel::new(
        &gpu_preset("h200").unwrap(),
        &preset("llama-3.1-8b").unwrap(),
        2,
        2,
        p.clone(),
    )
}

/// The same shapes in three formats: a step CSV, bench_one_batch JSON lines and bench_serving
/// JSON lines (Little's law: batch = throughput × (E2E − TTFT)).
fn write_measurements(dir: &Path, m: &StepModel) -> Vec<String> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut csv = String::from("phase,tokens,batch_size,context_tokens,time_ms\n");
    for (seqs, len) in [(1u32, 256u32), (1, 1024), (1, 4096), (1, 16384), (4, 512)] {
        let t = ms(m.prefill_ns(&vec![(len, 0); seqs as usize]));
        writeln!(csv, "prefill,{},{seqs},0,{t}", seqs * len).unwrap();
    }
    for b in [1u32, 8, 32, 128] {
        for ctx in [512u64, 4096] {
            let t = ms(m.decode_ns(b, u64::from(b) * ctx));
            writeln!(csv, "decode,,{b},{},{t}", u64::from(b) * ctx).unwrap();
        }
    }
    let mut one = String::new();
    for (bs, input, output) in [(1u32, 2048u32, 32u32), (16, 1024, 64), (64, 512, 128)] {
        let prefill = ms(m.prefill_ns(&vec![(input, 0); bs as usize])) / 1e3;
        let ctx = u64::from(bs) * (u64::from(input) + u64::from(output) / 2);
        let decode = ms(m.decode_ns(bs, ctx)) / 1e3;
        writeln!(
            one,
            "{{\"run_name\": \"default\", \"batch_size\": {bs}, \"input_len\": {input}, \
             \"output_len\": {output}, \"prefill_latency\": {prefill}, \
             \"median_decode_latency\": {decode}, \"total_latency\": 1.0}}"
        )
        .unwrap();
    }
    let mut serving = String::new();
    for b in [24u32, 96] {
        // 100 requests of 1000 in / 200 out; throughput × decode time = b.
        let itl = ms(m.decode_ns(b, u64::from(b) * 1100));
        let decode_s = 200.0 * itl / 1e3;
        let rate = f64::from(b) / decode_s;
        writeln!(
            serving,
            "{{\"backend\": \"sglang\", \"completed\": 100, \"total_input_tokens\": 100000, \
             \"total_output_tokens\": 20000, \"request_throughput\": {rate}, \
             \"mean_e2e_latency_ms\": {}, \"mean_ttft_ms\": 50.0, \"median_ttft_ms\": 50.0, \
             \"median_itl_ms\": {itl}}}",
            50.0 + decode_s * 1e3
        )
        .unwrap();
    }
    // One client at a time (`--max-concurrency 1`): its median TTFT is the tokenizer, one
    // forward of the 1,000-token prompt and the first token's path.
    let p = m.params();
    let ttft =
        p.tokenize_s(1000) * 1e3 + ms(m.prefill_ns(&[(1000, 0)])) + p.first_token_path_s * 1e3;
    let itl = ms(m.decode_ns(1, 1100));
    writeln!(
        serving,
        "{{\"backend\": \"sglang\", \"completed\": 100, \"total_input_tokens\": 100000, \
         \"total_output_tokens\": 20000, \"max_concurrency\": 1, \"concurrency\": 1.0, \
         \"median_ttft_ms\": {ttft}, \"median_itl_ms\": {itl}}}"
    )
    .unwrap();
    let files = [
        ("steps.csv", csv),
        ("one_batch.jsonl", one),
        ("serving.jsonl", serving),
    ];
    files
        .iter()
        .map(|(name, text)| {
            std::fs::write(dir.join(name), text).unwrap();
            dir.join(name).display().to_string()
        })
        .collect()
}

/// `pdsim calibrate FILES --model llama-3.1-8b --gpu h200 --tp 2 --out OUT`: the setup
/// [`model`] measures.
fn calibrate_8b_h200_tp2(files: &[String], out: &Path) -> (i32, String, String) {
    let mut args: Vec<String> = vec!["calibrate".into()];
    args.extend(files.iter().cloned());
    args.extend(
        [
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200",
            "--tp",
            "2",
            "--out",
        ]
        .map(String::from),
    );
    args.push(out.display().to_string());
    pdsim(&args)
}

#[test]
fn calibrate_round_trips_pdsim_measurements_within_2_percent() {
    let dir = tmpdir("calibrate-roundtrip");
    let truth_model = model(&truth());
    let files = write_measurements(&dir, &truth_model);
    let out = dir.join("cal.toml");
    let (code, stdout, stderr) = calibrate_8b_h200_tp2(&files, &out);
    println!("{stdout}");
    assert_eq!(code, 0, "{stderr}");
    for regime in [
        "prefill ≤ 512 tokens",
        "prefill > 8192 tokens",
        "decode batch 1",
        "decode batch 33–128",
    ] {
        assert!(stdout.contains(regime), "{regime} missing:\n{stdout}");
    }
    let file = CalibrationFile::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!((file.measured.gpu.as_str(), file.measured.tp), ("h200", 2));
    assert_eq!(file.measured.points, 13 + 6 + 2 + 2);
    // Every measured shape, and shapes not measured, predicted within 2 %.
    let fitted = model(&file.params);
    let mut worst: f64 = 0.0;
    for (chunks, b, ctx) in [
        (vec![(256u32, 0u32)], 0u32, 0u64),
        (vec![(4096, 0)], 0, 0),
        (vec![(2048, 0), (2048, 0)], 0, 0),
        (vec![], 1, 512),
        (vec![], 16, 16 * 2048),
        (vec![], 64, 64 * 1024),
        (vec![], 128, 128 * 4096),
    ] {
        let (t, f) = if b == 0 {
            (truth_model.prefill_ns(&chunks), fitted.prefill_ns(&chunks))
        } else {
            (truth_model.decode_ns(b, ctx), fitted.decode_ns(b, ctx))
        };
        let e = f as f64 / t as f64 - 1.0;
        worst = worst.max(e.abs());
        assert!(
            e.abs() < 0.02,
            "{chunks:?} b{b} ctx{ctx}: {:+.2}%",
            100.0 * e
        );
    }
    println!("worst round-trip error {:.3}%", 100.0 * worst);
    // The TTFT point gives back the first token's path (the base has 6.9 ms, the truth 6 ms).
    assert!(stdout.contains("TTFT, concurrency 1"), "{stdout}");
    let path = file.params.first_token_path_s / truth().first_token_path_s - 1.0;
    assert!(
        path.abs() < 0.02,
        "first_token_path_s {:+.2}%",
        100.0 * path
    );

    // The file is a calibration a scenario accepts, and it changes the run.
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "[run]\nname = \"cal\"\nduration_s = 5\n[model]\npreset = \"llama-3.1-8b\"\n\
         [hardware]\ngpu = \"h200\"\ncalibration = \"cal.toml\"\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n\
         [workload]\narrival = { process = \"poisson\", rate_per_s = 4 }\n\
         input_tokens = { dist = \"fixed\", value = 1024 }\noutput_tokens = { dist = \"fixed\", value = 64 }\n",
    )
    .unwrap();
    let run = |extra: &[&str], out: &str| {
        let mut a = vec![
            "run".to_string(),
            scenario.display().to_string(),
            "-q".into(),
            "--summary-only".into(),
            "--out".into(),
            dir.join(out).display().to_string(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        let (code, _, err) = pdsim(&a);
        assert_eq!(code, 0, "{err}");
        std::fs::read_to_string(dir.join(out).join("summary.json")).unwrap()
    };
    let mine = run(&[], "mine");
    let default = run(
        &["--set", "hardware.calibration=\"sglang-2025\""],
        "default",
    );
    assert_ne!(mine, default);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same cluster seen as a served deployment sees itself: an sglang server log (a PD
/// prefill's back-to-back `Prefill batch` lines, PD decode `Decode batch` lines, each batch
/// size on its own scheduler so every interval holds one batch) and Prometheus scrapes of
/// sglang 2026's counters (a window of prefill forwards, a window of decode steps).
fn write_observations(dir: &Path, m: &StepModel) -> Vec<String> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut log = String::from("[2026-12-01 10:00:00] INFO:     Started server process [1]\n");
    let shapes = [(1u32, 256u32), (1, 1024), (1, 4096), (1, 16384), (4, 512)];
    for (i, (seqs, len)) in shapes.iter().enumerate() {
        // Line i's throughput is the previous batch's tokens over its forward.
        let thr = match i.checked_sub(1).map(|j| shapes[j]) {
            Some((ps, pl)) => {
                f64::from(ps * pl) / (ms(m.prefill_ns(&vec![(pl, 0); ps as usize])) / 1e3)
            }
            None => 0.0,
        };
        writeln!(
            log,
            "[2026-12-01 10:00:0{i} TP0] Prefill batch, #new-seq: {seqs}, #new-token: {}, #cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 5, #prealloc-req: 0, #inflight-req: 1, input throughput (token/s): {thr:.4},",
            seqs * len
        )
        .unwrap();
    }
    let (ps, pl) = shapes[4];
    let thr = f64::from(ps * pl) / (ms(m.prefill_ns(&vec![(pl, 0); ps as usize])) / 1e3);
    writeln!(
        log,
        "[2026-12-01 10:00:09 TP0] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 1, input throughput (token/s): {thr:.4},"
    )
    .unwrap();
    for (r, b) in [1u32, 8, 32, 128].iter().enumerate() {
        for ctx in [512u64, 512, 4096] {
            let step = ms(m.decode_ns(*b, u64::from(*b) * ctx)) / 1e3;
            writeln!(
                log,
                "[2026-12-01 10:01:00 DP{r} TP{r}] Decode batch, #running-req: {b}, #token: {}, token usage: 0.30, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): {:.6}, #queue-req: 0,",
                u64::from(*b) * ctx,
                f64::from(*b) / step
            )
            .unwrap();
        }
    }
    let scrape = |pf: f64, dec: f64, secs: f64, passes: f64, running: u32, lens: u64| {
        let l = "model_name=\"m\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"";
        format!(
            "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n\
             sglang:num_running_reqs{{{l}}} {running}\nsglang:decode_sum_seq_lens{{{l}}} {lens}\n\
             sglang:realtime_tokens_total{{{l},mode=\"prefill_compute\"}} {pf}\n\
             sglang:realtime_tokens_total{{{l},mode=\"prefill_cache\"}} 0\n\
             sglang:realtime_tokens_total{{{l},mode=\"decode\"}} {dec}\n\
             sglang:gpu_execution_seconds_total{{{l},category=\"forward\"}} {secs}\n\
             sglang:cuda_graph_passes_total{{{l},mode=\"full\"}} {passes}\n"
        )
    };
    // 20 forwards of a 2,048-token prompt, then 500 steps of batch 64 at 2,048 tokens each.
    let pre = ms(m.prefill_ns(&[(2048, 0)])) / 1e3;
    let dec = ms(m.decode_ns(64, 64 * 2048)) / 1e3;
    let prom = [
        scrape(0.0, 0.0, 0.0, 0.0, 0, 0),
        scrape(20.0 * 2048.0, 0.0, 20.0 * pre, 20.0, 0, 0),
        scrape(
            20.0 * 2048.0,
            500.0 * 64.0,
            20.0 * pre + 500.0 * dec,
            520.0,
            64,
            64 * 2048,
        ),
    ]
    .concat();
    let files = [("server.log", log), ("metrics.prom", prom)];
    files
        .iter()
        .map(|(name, text)| {
            std::fs::write(dir.join(name), text).unwrap();
            dir.join(name).display().to_string()
        })
        .collect()
}

#[test]
fn calibrate_reads_an_sglang_log_and_prometheus_scrapes_back_within_2_percent() {
    let dir = tmpdir("calibrate-observed");
    let truth_model = model(&truth());
    let files = write_observations(&dir, &truth_model);
    let out = dir.join("cal.toml");
    let (code, stdout, stderr) = calibrate_8b_h200_tp2(&files, &out);
    println!("{stdout}{stderr}");
    assert_eq!(code, 0, "{stderr}");
    // What was left out is said: each scheduler's first decode line, the last prefill batch.
    assert!(
        stderr.contains("first decode line") && stderr.contains("server.log:"),
        "{stderr}"
    );
    let file = CalibrationFile::parse(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // 5 prefill batches and 4 × 2 decode lines from the log, 2 windows from the scrapes.
    assert_eq!(file.measured.points, 5 + 8 + 2);
    assert_eq!(file.measured.prefill_tokens, Some([256, 16384]));
    assert_eq!(file.measured.decode_batch, Some([1, 128]));
    let fitted = model(&file.params);
    for (chunks, b, ctx) in [
        (vec![(256u32, 0u32)], 0u32, 0u64),
        (vec![(2048, 0)], 0, 0),
        (vec![(16384, 0)], 0, 0),
        (vec![], 1, 512),
        (vec![], 32, 32 * 4096),
        (vec![], 64, 64 * 2048),
        (vec![], 128, 128 * 512),
    ] {
        let (t, f) = if b == 0 {
            (truth_model.prefill_ns(&chunks), fitted.prefill_ns(&chunks))
        } else {
            (truth_model.decode_ns(b, ctx), fitted.decode_ns(b, ctx))
        };
        let e = f as f64 / t as f64 - 1.0;
        println!("{chunks:?} b{b} ctx{ctx}: {:+.3}%", 100.0 * e);
        assert!(
            e.abs() < 0.02,
            "{chunks:?} b{b} ctx{ctx}: {:+.2}%",
            100.0 * e
        );
    }

    // A plan on the file says its answer rests on these measurements: 1,024-token prompts
    // lie inside the measured 256–16,384, and a light load's decode batch inside 1–128.
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "[run]\nname = \"g\"\nduration_s = 20\n[model]\npreset = \"llama-3.1-8b\"\n\
         [hardware]\ngpu = \"h200\"\ncalibration = \"cal.toml\"\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n[pools.server]\ntp_size = 2\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n[pools.server]\ntp_size = 2\n\
         [workload]\narrival = { process = \"poisson\", rate_per_s = 4 }\n\
         input_tokens = { dist = \"fixed\", value = 1024 }\noutput_tokens = { dist = \"fixed\", value = 64 }\n\
         [slo]\nttft_p90_ms = 2000\n",
    )
    .unwrap();
    let plan_dir = dir.join("plan");
    let (code, stdout, stderr) = pdsim(&[
        "plan",
        &scenario.display().to_string(),
        "--rate",
        "4",
        "--vary",
        "pools.d.instances=1,2",
        "--seeds",
        "1",
        "--out",
        &plan_dir.display().to_string(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("step times: your measurements `cal.toml` (15 points"),
        "{stdout}"
    );
    let answer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(plan_dir.join("plan.json")).unwrap())
            .unwrap();
    assert_eq!(
        answer["grounding"]["source"], "calibrated",
        "{}",
        answer["grounding"]
    );
    let report = std::fs::read_to_string(plan_dir.join("index.html")).unwrap();
    assert!(report.contains("What it rests on:"), "the report says it");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_rejects_bad_input_with_exit_2_naming_what_is_wrong() {
    let dir = tmpdir("calibrate-bad");
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "phase,tokens,batch_size,context_tokens,time_ms\ndecode,,0,10,3\n",
    )
    .unwrap();
    let out = dir.join("x.toml").display().to_string();
    let bad_s = bad.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "calibrate",
                &bad_s,
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-sxm",
                "--out",
                &out,
            ],
            "bad.csv:2",
        ),
        (
            vec![
                "calibrate",
                &bad_s,
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100",
                "--out",
                &out,
            ],
            "--gpu",
        ),
        (
            vec![
                "calibrate",
                &bad_s,
                "--model",
                "llama-9",
                "--gpu",
                "h100-sxm",
                "--out",
                &out,
            ],
            "--model",
        ),
        (
            vec![
                "calibrate",
                "missing.csv",
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-sxm",
                "--out",
                &out,
            ],
            "missing.csv",
        ),
        (
            vec![
                "calibrate",
                &bad_s,
                "--model",
                "llama-3.1-8b",
                "--gpu",
                "h100-sxm",
                "--base",
                "x",
                "--out",
                &out,
            ],
            "--base",
        ),
    ];
    for (args, needle) in cases {
        let (code, _, err) = pdsim(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert!(!Path::new(&out).exists());
    // A calibration name or file that is not one: exit 2 naming the key.
    let s = dir.join("s.toml");
    std::fs::write(&s, "[run]\nname = \"x\"\nduration_s = 1\n[model]\npreset = \"llama-3.1-8b\"\n[hardware]\ngpu = \"h100-sxm\"\ncalibration = \"sglang-2052\"\n[[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 1\n[[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 1\n[workload]\narrival = { process = \"poisson\", rate_per_s = 1 }\ninput_tokens = { dist = \"fixed\", value = 10 }\noutput_tokens = { dist = \"fixed\", value = 10 }\n").unwrap();
    let s_str = s.display().to_string();
    let (code, _, err) = pdsim(&["run", &s_str]);
    assert_eq!(code, 2);
    assert!(
        err.contains("hardware.calibration") && err.contains("sglang-2025"),
        "{err}"
    );
    std::fs::write(dir.join("c.toml"), "[measured]\nmodel = \"m\"\n").unwrap();
    let (code, _, err) = pdsim(&["run", &s_str, "--set", "hardware.calibration=\"c.toml\""]);
    assert_eq!(code, 2);
    assert!(
        err.contains("hardware.calibration") && err.contains("c.toml"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
