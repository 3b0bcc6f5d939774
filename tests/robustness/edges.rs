//! Issue 40's reproducers: limits that bit without a clear error, and trust at the edges. Each
//! test failed before its fix.

use crate::common;
use common::*;

const QUICKSTART: &str = "scenarios/quickstart.toml";
const SHORT: [&str; 4] = [
    "--set",
    "run.duration_s=3",
    "--set",
    "run.drain_timeout_s=30",
];

fn args<'a>(head: &[&'a str]) -> Vec<&'a str> {
    let mut a = head.to_vec();
    a.extend(SHORT);
    a
}

/// Seeds take the whole `u64` range: in a scenario file (as an integer, or quoted above
/// TOML's largest integer), through `--set run.seed` and through `--seed` — and a run on
/// seed 2^64 − 1 gives the same bytes however the seed was given.
#[test]
fn seeds_take_the_whole_u64_range() {
    let max = "18446744073709551615";
    let d = tmpdir("seed-range");
    let text = std::fs::read_to_string(repo().join(QUICKSTART)).unwrap();
    let mut outs = vec![];
    for (i, seed_line) in [format!("seed = {max}"), format!("seed = \"{max}\"")]
        .iter()
        .enumerate()
    {
        let f = d.join(format!("s{i}.toml"));
        let t = text
            .lines()
            .map(|l| {
                if l.starts_with("seed") {
                    seed_line.as_str()
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&f, t).unwrap();
        let out = d.join(format!("o{i}"));
        let (code, _, err) = pdsim(&args(&[
            "run",
            f.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "-q",
        ]));
        assert_eq!(code, 0, "{seed_line}: {err}");
        outs.push(out);
    }
    for (i, how) in [["--seed", max], ["--set", "run.seed=18446744073709551615"]]
        .iter()
        .enumerate()
    {
        let out = d.join(format!("flag{i}"));
        let mut a = args(&["run", QUICKSTART, "--out", out.to_str().unwrap(), "-q"]);
        a.extend(how);
        let (code, _, err) = pdsim(&a);
        assert_eq!(code, 0, "{how:?}: {err}");
        outs.push(out);
    }
    let first = std::fs::read(outs[0].join("requests.csv")).unwrap();
    for o in &outs[1..] {
        assert_eq!(
            std::fs::read(o.join("requests.csv")).unwrap(),
            first,
            "{o:?}"
        );
    }
    // Past the range, or negative: exit 2 naming run.seed and the range.
    for bad in [
        "run.seed=18446744073709551616",
        "run.seed=-1",
        "run.seed=\"x1\"",
    ] {
        let (code, _, err) = pdsim(&args(&["run", QUICKSTART, "--set", bad, "-q"]));
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.contains("run.seed") && err.contains("18446744073709551615"),
            "{bad}: {err}"
        );
    }
}

/// A 300-character `run.name` is refused when the scenario is checked (exit 2 naming the
/// key and the bound), not at the first file write (exit 3 "File name too long").
#[test]
fn a_long_run_name_is_refused_at_validation() {
    let name = format!("run.name=\"{}\"", "n".repeat(300));
    let (code, _, err) = pdsim(&args(&["run", QUICKSTART, "--set", &name, "-q"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("run.name") && err.contains("300 characters") && err.contains("200"),
        "{err}"
    );
    let ok = format!("run.name=\"{}\"", "n".repeat(200));
    let d = tmpdir("name-200");
    let (code, _, err) = pdsim(&args(&[
        "sweep",
        QUICKSTART,
        "--set",
        &ok,
        "--vary",
        "pools.decode.instances=1",
        "-q",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    // The default folder (results/<name>-sweep) fits too.
    let sc = pdsim::scenario::load(&repo().join(QUICKSTART), &[ok]).unwrap();
    assert_eq!(sc.name.len(), 200);
    assert!(format!("{}-sweep", sc.name).len() < 255);
}

/// `workload.client_timeout` lognormal with `cv = 0` (allowed by the README) loads and runs:
/// every client waits the mean.
#[test]
fn a_lognormal_client_timeout_of_cv_0_runs() {
    let d = tmpdir("cv0");
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        "workload.client_timeout={ dist = \"lognormal\", mean_s = 0.5, cv = 0 }",
        "--out",
        d.to_str().unwrap(),
        "-q",
    ]));
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        "workload.client_timeout={ dist = \"lognormal\", mean_s = 0.5, cv = -1 }",
        "-q",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("workload.client_timeout.cv"), "{err}");
}

/// A results folder for `explain`: a short quickstart run.
fn results(name: &str) -> crate::common::TmpDir {
    let d = tmpdir(name);
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--out",
        d.to_str().unwrap(),
        "-q",
    ]));
    assert_eq!(code, 0, "{err}");
    d
}

/// `explain` on a folder without `run.json` is bad input (exit 2 naming it), not exit 3.
#[test]
fn explain_without_run_json_is_exit_2() {
    let d = results("explain-no-run-json");
    std::fs::remove_file(d.join("run.json")).unwrap();
    let (code, _, err) = pdsim(&["explain", d.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&d.join("run.json").display().to_string()),
        "{err}"
    );
}

/// Sets the figure at dotted `field` of `dir/summary.json` to −5.
fn tamper(dir: &std::path::Path, field: &str) {
    let sp = dir.join("summary.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sp).unwrap()).unwrap();
    let path: Vec<&str> = field.split('.').collect();
    let mut cur = &mut v;
    for p in &path[..path.len() - 1] {
        cur = cur.get_mut(*p).unwrap();
    }
    cur[path[path.len() - 1]] = serde_json::json!(-5.0);
    std::fs::write(&sp, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// A summary's latency or throughput below zero is refused by `explain` and by
/// `check --baseline` (exit 2), naming the file and the field.
#[test]
fn negative_latencies_and_rates_are_refused() {
    const REG: &str = "scenarios/regression/healthy-2p2d-8b.toml";
    for field in [
        "latency_ms.ttft.p99",
        "latency_ms.tpot.mean",
        "throughput.requests_per_s",
        "throughput.arrival_window.goodput_requests_per_s",
    ] {
        let d = results(&format!("negative-{field}"));
        tamper(&d, field);
        let (code, _, err) = pdsim(&["explain", d.to_str().unwrap()]);
        assert_eq!(code, 2, "explain, {field}: {err}");
        assert!(err.contains(field) && err.contains("-5"), "{err}");
        let base = tmpdir(&format!("negative-base-{field}"));
        let (code, _, err) = pdsim(&["check", REG, "--out", base.to_str().unwrap(), "-q"]);
        assert_eq!(code, 0, "{err}");
        tamper(&base.join("regression-healthy-2p2d-8b"), field);
        let (code, _, err) = pdsim(&["check", REG, "--baseline", base.to_str().unwrap(), "-q"]);
        assert_eq!(code, 2, "check --baseline, {field}: {err}");
        assert!(err.contains("summary.json") && err.contains(field), "{err}");
    }
}

/// A dense model at `tp_size = 16` on 8-GPU nodes runs (sglang's `--nnodes 2`): each
/// instance spans two nodes, every request is accounted for, and the cross-node all-reduce
/// costs time — the same deployment on 16-GPU nodes (all-reduce over NVLink alone) decodes
/// faster.
#[test]
fn dense_tp16_spans_two_nodes_and_pays_the_network() {
    let sets = |gpn: &'static str| {
        vec![
            "model.preset=\"llama-3.1-70b\"",
            "pools.prefill.instances=1",
            "pools.decode.instances=1",
            "pools.prefill.server.tp_size=16",
            "pools.decode.server.tp_size=16",
            gpn,
            "run.duration_s=10",
            "run.drain_timeout_s=120",
        ]
    };
    let two = run(
        QUICKSTART,
        &sets("hardware.gpus_per_node=8"),
        &tmpdir("tp16-8"),
    );
    assert_eq!(
        (two.cluster.gpus, two.cluster.nodes),
        (32, 4),
        "{:?}",
        two.cluster
    );
    assert!(
        two.requests.conserved() && two.requests.completed > 0,
        "{:?}",
        two.requests
    );
    let one = run(
        QUICKSTART,
        &sets("hardware.gpus_per_node=16"),
        &tmpdir("tp16-16"),
    );
    assert_eq!(one.cluster.nodes, 2);
    let (a, b) = (
        two.latency_ms.tpot.p50.unwrap(),
        one.latency_ms.tpot.p50.unwrap(),
    );
    assert!(a > b, "TPOT p50 over two nodes {a} ms, within one {b} ms");
}

/// A calibration measured on another GPU, model and TP is warned about on stderr under `-q`
/// too (`run`, `sweep`, `check`): the warning changes what the results mean.
#[test]
fn calibration_mismatch_warns_under_quiet() {
    use pdsim::spec::calibration::{CalibrationFile, MeasuredOn, sglang_2025_a100};
    let d = tmpdir("calibration-warn-q");
    let cal = CalibrationFile {
        measured: MeasuredOn {
            model: "qwen3-8b".into(),
            gpu: "a100-sxm".into(),
            tp: 4,
            files: vec!["m.csv".into()],
            points: 10,
            prefill_tokens: None,
            decode_batch: None,
        },
        params: sglang_2025_a100(),
    };
    let cal_path = d.join("cal.toml");
    std::fs::write(&cal_path, cal.to_toml()).unwrap();
    let set = format!("hardware.calibration={:?}", cal_path.display().to_string());
    let out = d.join("o");
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        &set,
        "-q",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning") && err.contains("was measured on a100-sxm"),
        "run -q: {err}"
    );
    let (code, _, err) = pdsim(&args(&[
        "sweep",
        QUICKSTART,
        "--set",
        &set,
        "--vary",
        "pools.decode.instances=1",
        "-q",
        "--out",
        d.join("s").to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("was measured on a100-sxm"), "sweep -q: {err}");
}

/// Attention TP past what one instance can hold (the fuzzer's find once attention TP could
/// span nodes: `tp_size = 4096` panicked in the transfer oracle) is refused naming the key.
#[test]
fn attention_tp_past_its_bound_is_refused_by_key() {
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        "pools.decode.server.tp_size=4096",
        "-q",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("pools.decode.server.tp_size") && err.contains("64"),
        "{err}"
    );
}

/// A log-normal length's cv past 1,000 is refused naming the key (the fuzzer's seed 44 case
/// 540,395: cv = 1e300 made σ infinite, every draw NaN, a length of 0, and a run that never
/// ended); 1,000 itself runs.
#[test]
fn a_lognormal_cv_past_its_bound_is_refused_by_key() {
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        "workload.output_tokens.cv=1e300",
        "-q",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("workload.output_tokens.cv") && err.contains("at most 1000"),
        "{err}"
    );
    let sets = ["workload.output_tokens.cv=1000".to_string()];
    let sc = pdsim::scenario::load(&repo().join(QUICKSTART), &sets).unwrap();
    let d = tmpdir("cv-1000");
    let (code, _, err) = pdsim(&args(&[
        "run",
        QUICKSTART,
        "--set",
        &sets[0],
        "--summary-only",
        "-q",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{err} ({})", sc.name);
}
