//! Generators for the verbs added after `run` (issue 25): sweep grids, merge inputs (valid,
//! tampered, mixed and truncated shards, locked folders), plan questions, `check` with
//! `[expect]` tables and outputs over inputs, lint lines, calibration data, and results folders
//! for `explain`. Each returns a CLI line and the files it reads; every file lives under `c/`
//! in the case folder, which is cleared before the case runs.
//!
//! Oracle (besides the shared one: no exit 4, no signal, no hang, no empty message): a case
//! marked [`EXPECT_OK`] is a valid input and must exit 0 — an untampered set of shards must
//! merge; a merge that exits 0 must leave exactly the rows the shards hold, in grid order (a
//! mixed-up row is a failure whatever the tampering); a `check --baseline` folder that is
//! not a complete pdsim result must be refused with exit 2 naming the file, and a valid one
//! must not be.

use std::ffi::OsString;

use super::{CliLine, Corpus, MAX_REQUESTS, Rng, cli_value, mutate_json, small_scenario};

/// The mutation that marks a case pdsim must accept (exit 0).
pub const EXPECT_OK: &str = "expect exit 0";

const SYNTH: &str = "arrival = { process = \"poisson\", rate_per_s = 10.0 }\ninput_tokens = { dist = \"uniform\", min = 16, max = 512 }\noutput_tokens = { dist = \"uniform\", min = 1, max = 16 }\n\n[slo]\nttft_p99_ms = 2000\n";

/// A small scenario that runs in milliseconds.
fn scenario(rng: &mut Rng) -> Vec<u8> {
    let mut s = small_scenario(rng, "preset = \"llama-3.1-8b\"", SYNTH);
    s = s.replace(
        &format!("max_requests = {MAX_REQUESTS}"),
        &format!("max_requests = {}", 5 + rng.below(20)),
    );
    s.replace("duration_s = 10", "duration_s = 2").into_bytes()
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// A `--vary` argument: mostly valid keys of [`scenario`], sometimes hostile.
fn vary(rng: &mut Rng) -> String {
    let key = *rng.pick(&[
        "pools.d.instances",
        "pools.p.instances",
        "pools.1.instances",
        "pools.d.server.page_size",
        "workload.arrival.rate_per_s",
        "workload.arrival",
        "run.seed",
        "run.max_requests",
        "pools.x.instances",
        "nope",
        "",
    ]);
    let vals: Vec<String> = (0..1 + rng.below(3))
        .map(|_| {
            rng.pick(&[
                "1", "2", "3", "16", "0", "-1", "1e19", "\"a\"", "", "{}", "[1]",
            ])
            .to_string()
        })
        .collect();
    if rng.chance(0.02) {
        // An axis past the bound of values (2,000 values × 64 seeds would be a real
        // 128,000-row sweep, which takes its time rather than hangs).
        return format!(
            "{key}={}",
            (0..12_000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    format!("{key}={}", vals.join(","))
}

fn sweep(rng: &mut Rng, verb: &str) -> CliLine {
    let mut files = vec![("c/s.toml".to_string(), scenario(rng))];
    let mut muts = vec![format!("{verb} grid")];
    let mut args = os(&[verb, "c/s.toml", "--out", "c/out", "-q"]);
    let axes = if rng.chance(0.03) { 40 } else { rng.below(3) };
    for _ in 0..axes {
        args.extend(os(&["--vary", &vary(rng)]));
    }
    if verb == "plan" {
        match rng.below(3) {
            0 => args.push("--max-rate".into()),
            _ => {
                let r = rng.pick(&["8", "1", "1e19", "1e300", "-1", "0", "NaN", "inf", "1000"]);
                args.extend(os(&["--rate", r]));
            }
        }
        if rng.chance(0.3) {
            args.extend(os(&[
                "--tolerance",
                *rng.pick(&["0.5", "0", "1", "2", "NaN"]),
            ]));
        }
    }
    if rng.chance(0.5) {
        args.extend(os(&["--seeds", &cli_value(rng)]));
    } else {
        args.extend(os(&["--seeds", "1"]));
    }
    if rng.chance(0.3) {
        let s = format!("{}/{}", rng.below(4), rng.below(4));
        args.extend(os(&["--shard", &s]));
    }
    if rng.chance(0.3) {
        args.push("--resume".into());
    }
    if rng.chance(0.3) {
        args.extend(os(&[
            "--set",
            *rng.pick(&[
                "run.seed=9223372036854775807",
                "run.seed=3",
                "pools.d.instances=2",
                "slo.ttft_p99_ms=1",
            ]),
        ]));
    }
    if rng.chance(0.1) {
        // A stale lock of a killed writer, or a staging folder left behind.
        files.push((
            "c/out/.pdsim-lock".into(),
            b"pid 999999 on elsewhere: pdsim sweep\n".to_vec(),
        ));
        files.push((
            "c/out/.pdsim-partial/.points/identity.json".into(),
            b"{}".to_vec(),
        ));
        muts.push("stale lock".into());
    }
    args.extend(os(&["--jobs", "1"]));
    CliLine {
        files,
        muts,
        ..CliLine::new(if verb == "plan" { "plan" } else { "sweep" }, args)
    }
}

/// A valid set of `n` shards of a small grid, as `pdsim sweep --shard` writes them, built
/// from pdsim's own types, and the `sweep.csv` their merge must write (every row in grid
/// order).
fn shard_files(rng: &mut Rng, n: usize, tag: &str) -> (Vec<(String, Vec<u8>)>, Vec<u8>) {
    use pdsim::plan::{Axis, Grid, Manifest, Shard, SweepRow};
    let axes: Vec<Axis> = (0..1 + rng.below(2))
        .map(|k| Axis {
            key: format!("pools.d.k{k}"),
            values: (0..1 + rng.below(3)).map(|v| v.to_string()).collect(),
        })
        .collect();
    let seeds: Vec<u64> = (0..1 + rng.below(2)).map(|s| 7 + s).collect();
    let grid = Grid::new(axes, seeds, vec![]).expect("a small grid");
    let row = |r: usize| {
        let seed = grid.seeds[r % grid.seeds.len()];
        let mut row: SweepRow = serde_json::from_value(serde_json::json!({
            "seed": seed, "gpus": 4, "nodes": 1, "prefill_instances": 1,
            "decode_instances": 1, "colocated_instances": 0, "rate_per_s": 8.0,
            "arrived": 10, "completed": 10, "failed": 0, "corrupted": 0,
            "unfinished": 0, "ttft_p50_ms": 1.5, "ttft_p90_ms": 2.5,
            "ttft_p99_ms": r as f64 + 0.1, "tpot_p50_ms": 1.0, "tpot_p90_ms": 1.0,
            "tpot_p99_ms": 1.0, "e2e_p99_ms": 9.0, "requests_per_s": 1.0,
            "output_tokens_per_s": 10.0, "output_tokens_per_s_per_gpu": 2.5,
            "goodput_requests_per_s": 1.0, "slo_attainment": 1.0, "slo_met": true,
            "usd_per_hour": null, "usd_per_1m_output_tokens": null,
            "bottlenecks": "p:compute d:compute", "error": null
        }))
        .expect("a row");
        if r % 5 == 4 {
            row.error = Some("infeasible, \"quoted\"".into());
        }
        (r, row)
    };
    let mut files = Vec::new();
    for i in 0..n {
        let shard = Shard { index: i, count: n };
        let rows: Vec<(usize, SweepRow)> = shard.rows(grid.rows()).map(row).collect();
        let m = Manifest {
            scenario: format!("s{tag}.toml"),
            scenario_fnv: "0123456789abcdef".into(),
            inputs: Default::default(),
            rows: grid.rows(),
            grid: grid.clone(),
            shard: Some(shard),
            slo: Default::default(),
        };
        files.push((
            format!("c/{tag}{i}/sweep.csv"),
            pdsim::plan::sweep_csv(&grid, &rows).expect("csv"),
        ));
        files.push((
            format!("c/{tag}{i}/sweep.json"),
            (serde_json::to_string_pretty(&m).unwrap() + "\n").into_bytes(),
        ));
    }
    let all: Vec<(usize, SweepRow)> = (0..grid.rows()).map(row).collect();
    let merged = pdsim::plan::sweep_csv(&grid, &all).expect("csv");
    (files, merged)
}

fn merge(rng: &mut Rng) -> CliLine {
    let n = 1 + rng.below(3) as usize;
    let (mut files, mut merged) = shard_files(rng, n, "s");
    let mut muts = vec![format!("merge {n} shards")];
    let mut dirs: Vec<String> = (0..n).map(|i| format!("c/s{i}")).collect();
    let tamper = rng.below(10);
    match tamper {
        0 => {
            // Swap two data lines of one shard's CSV.
            let k = rng.below(n as u64) as usize * 2;
            let text = String::from_utf8(files[k].1.clone()).unwrap();
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.len() > 2 {
                let (a, b) = (1 + rng.below(lines.len() as u64 - 1) as usize, 1);
                lines.swap(a, b);
            }
            files[k].1 = (lines.join("\n") + "\n").into_bytes();
            muts.push("swap rows".into());
        }
        1 => {
            let k = rng.below(n as u64) as usize * 2;
            let cut = rng.below(files[k].1.len() as u64) as usize;
            files[k].1.truncate(cut);
            muts.push(format!("truncate csv at {cut}"));
        }
        2 => {
            let k = rng.below(n as u64) as usize * 2 + 1;
            let mut v: serde_json::Value = serde_json::from_slice(&files[k].1).unwrap();
            muts.push(mutate_json(rng, &mut v));
            files[k].1 = serde_json::to_vec(&v).unwrap();
        }
        3 => {
            // Mix in a shard of another sweep.
            // One shard of another sweep among ours is refused unless the two sweeps are one
            // grid (then their rows are the same); alone (n = 1) it is that sweep, whole.
            let (other, other_merged) = shard_files(rng, n, "o");
            files.extend(other);
            dirs[0] = "c/o0".into();
            merged = other_merged;
            muts.push("mixed shards".into());
        }
        4 => {
            dirs.push(dirs[0].clone());
            muts.push("shard twice".into());
        }
        5 => {
            files.push((
                format!("{}/.pdsim-lock", dirs[0]),
                b"pid 1 on h: pdsim sweep".to_vec(),
            ));
            muts.push("locked shard".into());
        }
        6 => {
            dirs.push("c/missing".into());
            muts.push("missing folder".into());
        }
        7 if n > 1 => {
            dirs.pop();
            muts.push("a shard left out".into());
        }
        _ => muts.push(EXPECT_OK.into()),
    }
    let mut args = os(&["merge"]);
    args.extend(dirs.iter().map(OsString::from));
    let out = if rng.chance(0.05) {
        muts.retain(|m| m != EXPECT_OK);
        muts.push("--out is a shard".into());
        dirs[0].clone()
    } else {
        "c/out".into()
    };
    args.extend(os(&["--out", &out, "-q"]));
    let codes = if muts.iter().any(|m| m == EXPECT_OK) {
        vec![0]
    } else {
        vec![]
    };
    CliLine {
        files,
        muts,
        expect: vec![("c/out/sweep.csv".into(), merged)],
        codes,
        ..CliLine::new("merge", args)
    }
}

fn lint(rng: &mut Rng) -> CliLine {
    let line = |rng: &mut Rng| {
        let mut s = String::from("python -m sglang.launch_server");
        for _ in 0..rng.below(6) {
            let flag = rng.pick(&[
                "--tp-size",
                "--tp",
                "--dp-size",
                "--page-size",
                "--kv-cache-dtype",
                "--enable-dp-attention",
                "--model-path",
                "--disaggregation-mode",
                "--chunked-prefill-size",
                "--mem-fraction-static",
                "--bogus",
                "--ep-size",
            ]);
            let v = rng.pick(&[
                "1",
                "2",
                "8",
                "1048576",
                "4294967296",
                "0",
                "-1",
                "auto",
                "fp8_e4m3",
                "prefill",
                "decode",
                "meta-llama/Llama-3.1-8B",
                "'",
                "\"",
                "0.9",
                "NaN",
            ]);
            s += &format!(" {flag} {v}");
        }
        s
    };
    let (p, d) = (line(rng), line(rng));
    let mut args = os(&["lint", "--prefill", &p, "--decode", &d]);
    if rng.chance(0.3) {
        args.push("--json".into());
    }
    CliLine {
        muts: vec!["lint lines".into()],
        ..CliLine::new("lint", args)
    }
}

fn calibrate(rng: &mut Rng) -> CliLine {
    let mut csv = String::from("phase,tokens,batch_size,context_tokens,time_ms\n");
    for _ in 0..rng.below(8) {
        let phase = rng.pick(&["prefill", "decode", "ttft", "x", ""]);
        let t = rng.pick(&[
            "40", "8", "150", "1e-300", "0", "-3", "1e9", "NaN", "inf", "0.0005", "3.6e6", "x",
        ]);
        let tok = rng.pick(&["1024", "0", "4294967296", "-1", "8"]);
        csv += &format!(
            "{phase},{tok},{},{},{t}\n",
            rng.pick(&["1", "32", "0"]),
            rng.pick(&["0", "8192", "99999999999999"])
        );
    }
    let out = if rng.chance(0.1) {
        "c/m.csv"
    } else {
        "c/cal.toml"
    };
    let mut args = os(&[
        "calibrate",
        "c/m.csv",
        "--model",
        *rng.pick(&["llama-3.1-8b", "qwen3-8b", "nope"]),
        "--gpu",
        *rng.pick(&["h100-sxm", "h200", "x"]),
        "--out",
        out,
    ]);
    if rng.chance(0.4) {
        args.extend(os(&["--tp", &cli_value(rng)]));
    }
    CliLine {
        files: vec![("c/m.csv".into(), csv.into_bytes())],
        muts: vec!["calibration data".into()],
        ..CliLine::new("calibrate", args)
    }
}

fn check(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    let mut sc = String::from_utf8(scenario(rng)).unwrap();
    sc += "\n[expect]\n";
    if rng.chance(0.4) {
        // A valid table: the baseline alone decides.
        sc += "completed_min = 0\n";
        return baseline(rng, corpus, vec![("c/x.toml".to_string(), sc.into_bytes())]);
    }
    for _ in 0..1 + rng.below(3) {
        let k = rng.pick(&[
            "completed_min",
            "failed_max",
            "ttft_p99_ms_max",
            "tbt_p99_ms_max",
            "itl_p50_ms_max",
            "throughput_rps_min",
            "slo_attainment_min",
            "error_kinds",
            "bogus_key",
            "corrupted_max",
        ]);
        let v = rng.pick(&[
            "1",
            "0",
            "-1",
            "1e308",
            "nan",
            "[]",
            "[\"waiting_timeout\"]",
            "\"x\"",
            "2.5",
        ]);
        sc += &format!("{k} = {v}\n");
    }
    let mut files = vec![("c/x.toml".to_string(), sc.clone().into_bytes())];
    if rng.chance(0.5) {
        files.push(("c/y.toml".to_string(), sc.into_bytes()));
    }
    let mut args = os(&["check", "c"]);
    match rng.below(4) {
        0 => args.extend(os(&["--junit", "c/x.toml"])),
        1 => args.extend(os(&["--junit", "c/j.xml"])),
        2 => args.extend(os(&["--out", "c/out", "--jobs", "2"])),
        _ => {}
    }
    CliLine {
        files,
        muts: vec!["expect tables".into()],
        ..CliLine::new("check", args)
    }
}

/// `check --baseline DIR` with a baseline folder as `check --out` writes it (the summary and
/// `run.json` of a real run, `Corpus::baseline`), complete or damaged: a damaged one must be
/// refused with exit 2 naming the file, a complete one must run (exit 0 or 1).
fn baseline(rng: &mut Rng, corpus: &Corpus, mut files: Vec<(String, Vec<u8>)>) -> CliLine {
    let (summary, run) = corpus.baseline.clone();
    let b = "c/base/fuzz";
    files.push((format!("{b}/summary.json"), summary.clone()));
    files.push((format!("{b}/run.json"), run.clone()));
    files.push((format!("{b}/requests.csv"), b"id\n".to_vec()));
    let mut muts = vec!["baseline".to_string()];
    let (mut codes, mut names, mut hold_lock) = (vec![2], None, None);
    let mut base_arg = "c/base".to_string();
    let set = |files: &mut Vec<(String, Vec<u8>)>, name: &str, bytes: Option<Vec<u8>>| {
        files.retain(|f| f.0 != name);
        if let Some(b) = bytes {
            files.push((name.to_string(), b));
        }
    };
    match rng.below(13) {
        0 | 1 => {
            muts.push("complete baseline".into());
            codes = vec![0, 1];
        }
        2 => {
            set(&mut files, &format!("{b}/summary.json"), None);
            muts.push("no summary.json".into());
            names = Some(b.to_string());
        }
        3 => {
            // Short of the closing brace: a summary without only its final newline is whole
            // JSON, a complete summary (the long campaign's one false alarm, seed 25 case
            // 156300).
            let cut = rng.below(summary.len() as u64 - 1) as usize;
            set(
                &mut files,
                &format!("{b}/summary.json"),
                Some(summary[..cut].to_vec()),
            );
            muts.push(format!("summary.json cut at {cut}"));
            names = Some(format!("{b}/summary.json"));
        }
        4 => {
            files.push((
                format!("{b}/.pdsim-lock"),
                b"pid 999999 on elsewhere: pdsim check\n".to_vec(),
            ));
            muts.push("stale lock".into());
            names = Some(format!("{b}/.pdsim-lock"));
        }
        5 => {
            files.push((format!("{b}/.pdsim-partial/requests.csv"), b"id\n".to_vec()));
            muts.push("staging folder".into());
            names = Some(format!("{b}/.pdsim-partial"));
        }
        6 => {
            hold_lock = Some(b.to_string());
            muts.push("lock held by a live writer".into());
            names = Some(b.to_string());
        }
        7 => {
            let mut v: serde_json::Value = serde_json::from_slice(&run).unwrap();
            v["scenario"]["run"]["name"] = serde_json::json!("another");
            set(
                &mut files,
                &format!("{b}/run.json"),
                Some(serde_json::to_vec_pretty(&v).unwrap()),
            );
            muts.push("run.json of another scenario".into());
            names = Some(format!("{b}/run.json"));
        }
        8 => {
            // Another pdsim file where the summary belongs (a sweep's index, a run.json).
            let other = if rng.chance(0.5) {
                run.clone()
            } else {
                b"{\"scenario\": \"s.toml\", \"rows\": 4, \"grid\": {}}\n".to_vec()
            };
            set(&mut files, &format!("{b}/summary.json"), Some(other));
            muts.push("summary.json of another schema".into());
            names = Some(format!("{b}/summary.json"));
        }
        9 => {
            set(&mut files, &format!("{b}/run.json"), None);
            muts.push("no run.json".into());
            names = Some(b.to_string());
        }
        10 => {
            // A figure of the wrong type, or a count that does not add up.
            let mut v: serde_json::Value = serde_json::from_slice(&summary).unwrap();
            let (ptr, val) = rng
                .pick(&[
                    ("/requests/arrived", serde_json::json!("10")),
                    ("/requests/failed", serde_json::json!(-1)),
                    ("/latency_ms/ttft/p99", serde_json::json!("fast")),
                    ("/slo/attainment", serde_json::json!([1])),
                    ("/requests/completed", serde_json::json!(u64::MAX)),
                    (
                        "/throughput/arrival_window/requests_per_s",
                        serde_json::json!({}),
                    ),
                ])
                .clone();
            if let Some(x) = v.pointer_mut(ptr) {
                *x = val.clone();
            }
            set(
                &mut files,
                &format!("{b}/summary.json"),
                Some(serde_json::to_vec_pretty(&v).unwrap()),
            );
            muts.push(format!("summary.json {ptr} := {val}"));
            names = Some(format!("{b}/summary.json"));
        }
        11 => {
            let mut v: serde_json::Value = serde_json::from_slice(&summary).unwrap();
            for _ in 0..1 + rng.below(2) {
                muts.push(mutate_json(rng, &mut v));
            }
            set(
                &mut files,
                &format!("{b}/summary.json"),
                Some(serde_json::to_vec(&v).unwrap()),
            );
            codes = vec![];
        }
        _ => {
            base_arg = rng
                .pick(&["c/x.toml", "c/nothing", "c/base/fuzz", ""])
                .to_string();
            muts.push(format!("--baseline {base_arg:?}"));
            names = Some(base_arg.clone()).filter(|s| !s.is_empty());
        }
    }
    let mut args = os(&["check", "c/x.toml", "--baseline", &base_arg]);
    if rng.chance(0.3) {
        args.extend(os(&[
            "--max-regression",
            *rng.pick(&["0", "0.5", "9.99", "10", "-0.1", "NaN"]),
        ]));
        // A bad ratio is refused before the folder is read.
        if !codes.is_empty() {
            codes.push(2);
        }
        names = None;
    }
    CliLine {
        files,
        muts,
        codes,
        names,
        hold_lock,
        ..CliLine::new("check", args)
    }
}

/// A results folder for `explain`: a plausible `summary.json` and `run.json`, mutated; or a
/// scenario file it runs first.
fn explain(rng: &mut Rng) -> CliLine {
    if rng.chance(0.15) {
        let mut args = os(&["explain", "c/s.toml", "--out", "c/r"]);
        if rng.chance(0.3) {
            args.extend(os(&["--set", "pools.d.server.page_size=32"]));
        }
        if rng.chance(0.2) {
            args.push("--markdown".into());
        }
        return CliLine {
            files: vec![("c/s.toml".into(), scenario(rng))],
            muts: vec!["explain a scenario".into()],
            ..CliLine::new("explain", args)
        };
    }
    let mut summary = serde_json::json!({
        "requests": {"arrived": 10, "completed": 8, "failed": 2, "corrupted": 0, "unfinished": 0},
        "errors": [{"kind": "waiting_timeout", "count": 2, "message": "m"}],
        "latency_ms": {}, "throughput": {}, "slo": {},
        "sim": {"events": 100, "simulated_s": 1.0}
    });
    let mut run = serde_json::json!({
        "pdsim_version": "0.1.0", "scenario_file": "c/s.toml", "seed": 1,
        "scenario": {"run": {"name": "x"}}
    });
    let mut muts = vec!["results folder".into()];
    for _ in 0..rng.below(3) {
        let v = if rng.chance(0.6) {
            &mut summary
        } else {
            &mut run
        };
        muts.push(mutate_json(rng, v));
    }
    let mut files = vec![
        (
            "c/r/summary.json".to_string(),
            serde_json::to_vec(&summary).unwrap(),
        ),
        (
            "c/r/run.json".to_string(),
            serde_json::to_vec(&run).unwrap(),
        ),
        ("c/r/requests.csv".to_string(), b"id,arrival_ns\n".to_vec()),
    ];
    match rng.below(6) {
        0 => files[0].1 = b"{}".to_vec(),
        1 => files.push(("c/r/.pdsim-lock".into(), b"pid 2 on h: pdsim run".to_vec())),
        2 => {
            let half = files[0].1.len() / 2;
            files[0].1.truncate(half);
        }
        _ => {}
    }
    CliLine {
        files,
        muts,
        ..CliLine::new("explain", os(&["explain", "c/r"]))
    }
}

/// One generated line for a verb of issue 25.
pub fn gen_verb(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    match rng.below(8) {
        0 => sweep(rng, "sweep"),
        1 => sweep(rng, "plan"),
        2 | 3 => merge(rng),
        4 => lint(rng),
        5 => calibrate(rng),
        6 => check(rng, corpus),
        _ => explain(rng),
    }
}
