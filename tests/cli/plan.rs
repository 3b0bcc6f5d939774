//! Capacity planning (issue 12): sweeps are byte-identical whatever `--jobs` and however they
//! are sharded (shards run as separate processes through `deploy/`); `pdsim plan --rate` finds
//! the cheapest point and no cheaper point meets `[slo]`; `best.toml` runs from where it is
//! written and meets `[slo]` on fresh seeds; `--max-rate` brackets each point's limit; the
//! summary's nulls, SLO verdict, colocated servers, paired lengths and stale-file removal.
//! Issue 24: whole-node billing orders the search and is shown where the plan is; a run stopped
//! once `[slo]` is lost keeps the verdict and the answer; `--max-rate` gallops and bisects to
//! the answer a rung-by-rung scan gives; the plan report is a plan's; `k8s.yaml` is the launch
//! lines as LeaderWorkerSets.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{pdsim, read_csv, repo, tmpdir};

/// A short quickstart: 20 s of arrivals keeps every point of a grid well under a second.
const SHORT: [&str; 4] = [
    "--set",
    "run.duration_s=20",
    "--set",
    "run.drain_timeout_s=60",
];

fn ok(args: &[&str]) -> String {
    let (code, out, err) = pdsim(args);
    assert_eq!(code, 0, "pdsim {args:?}\nstdout: {out}\nstderr: {err}");
    out
}

fn bytes(dir: &Path, f: &str) -> Vec<u8> {
    std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{}/{f}: {e}", dir.display()))
}

const GRID: [&str; 6] = [
    "--vary",
    "pools.prefill.instances=1,2",
    "--vary",
    "pools.decode.instances=1,2",
    "--vary",
    "workload.arrival.rate_per_s=8,24",
];

fn sweep(out: &Path, extra: &[&str]) {
    let o = out.to_str().unwrap();
    let mut args = vec![
        "sweep",
        "scenarios/quickstart.toml",
        "--seeds",
        "2",
        "--out",
        o,
        "-q",
    ];
    args.extend(SHORT);
    args.extend(GRID);
    args.extend(extra);
    ok(&args);
}

#[test]
fn jobs_do_not_change_a_byte() {
    let d = tmpdir("sweep-jobs");
    let (a, b) = (d.join("j1"), d.join("j2"));
    sweep(&a, &["--jobs", "1"]);
    sweep(&b, &["--jobs", "2"]);
    for f in ["sweep.csv", "sweep.json", "index.html"] {
        assert_eq!(
            bytes(&a, f),
            bytes(&b, f),
            "{f} differs between --jobs 1 and 2"
        );
    }
    let rows = read_csv(&a.join("sweep.csv"));
    assert_eq!(rows.len(), 16, "8 points × 2 seeds");
    // Grid order: the first --vary slowest, seeds innermost.
    assert_eq!(rows[0]["pools.prefill.instances"], "1");
    assert_eq!(rows[1]["seed"], "8");
    assert_eq!(rows[2]["workload.arrival.rate_per_s"], "24");
    assert_eq!(rows[15]["pools.decode.instances"], "2");
    for r in &rows {
        let gpus: u32 = r["gpus"].parse().unwrap();
        let (p, d): (u32, u32) = (
            r["prefill_instances"].parse().unwrap(),
            r["decode_instances"].parse().unwrap(),
        );
        assert_eq!(gpus, 2 * (p + d), "TP2 instances");
    }
}

/// Runs `deploy/run-shard.sh` for every shard as its own process (all at once, as an array job
/// would), with the scheduler's index variable, then `deploy/merge.sh`.
fn deploy_shards(out: &Path, n: usize, index_var: &str) {
    let deploy = repo().join("deploy");
    let children: Vec<_> = (0..n)
        .map(|i| {
            let mut c = std::process::Command::new("bash");
            c.arg(deploy.join("run-shard.sh"))
                .current_dir(repo())
                .env(index_var, i.to_string())
                .env("SHARDS", n.to_string())
                .env("SCENARIO", "scenarios/quickstart.toml")
                .env("OUT", out)
                .env("SEEDS", "2")
                .env("JOBS", "1")
                .env("SETS", "run.duration_s=20 run.drain_timeout_s=60")
                .env(
                    "VARY",
                    "pools.prefill.instances=1,2 pools.decode.instances=1,2 workload.arrival.rate_per_s=8,24",
                )
                .env("PDSIM", env!("CARGO_BIN_EXE_pdsim"));
            for v in ["SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "SHARD_INDEX"] {
                if v != index_var {
                    c.env_remove(v);
                }
            }
            c.spawn().unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a shard failed");
    }
    let status = std::process::Command::new("bash")
        .arg(deploy.join("merge.sh"))
        .current_dir(repo())
        .env("OUT", out)
        .env("PDSIM", env!("CARGO_BIN_EXE_pdsim"))
        .status()
        .unwrap();
    assert!(status.success(), "merge failed");
}

#[test]
fn shards_run_as_separate_processes_merge_to_the_unsharded_bytes() {
    let d = tmpdir("sweep-shards");
    let whole = d.join("whole");
    sweep(&whole, &["--jobs", "2"]);
    for (n, var) in [(3, "SLURM_ARRAY_TASK_ID"), (5, "JOB_COMPLETION_INDEX")] {
        let out = d.join(format!("sharded-{n}"));
        deploy_shards(&out, n, var);
        for f in ["sweep.csv", "sweep.json", "index.html"] {
            assert_eq!(
                bytes(&whole, f),
                bytes(&out.join("merged"), f),
                "{f}: {n} merged shards differ from the unsharded sweep"
            );
        }
    }
    // A missing shard, a repeated one, and shards of another grid are refused.
    let s = d.join("sharded-3");
    let (a, b, c) = (s.join("shard-0"), s.join("shard-1"), s.join("shard-2"));
    let m = d.join("bad");
    let m = m.to_str().unwrap();
    for dirs in [vec![&a, &b], vec![&a, &a, &b, &c]] {
        let mut args = vec!["merge".to_string()];
        args.extend(dirs.iter().map(|p| p.display().to_string()));
        args.extend(["--out".into(), m.into()]);
        let (code, _, err) = pdsim(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("shard"), "{err}");
    }
    let (code, _, err) = pdsim(&[
        "merge",
        a.to_str().unwrap(),
        d.join("sharded-5/shard-1").to_str().unwrap(),
        "--out",
        m,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a shard of the same sweep"), "{err}");
}

/// `pdsim plan --rate`: the answer meets `[slo]` on every seed; every point that is cheaper
/// (fewer GPUs, or as many on fewer nodes) fails it on some seed; `best.toml` runs from its
/// own folder and meets `[slo]` on seeds the plan never ran.
#[test]
fn plan_picks_the_cheapest_point_and_best_toml_holds_on_fresh_seeds() {
    let d = tmpdir("plan-rate");
    let o = d.join("plan");
    let out = ok(&[
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "14",
        "--seeds",
        "2",
        "--set",
        "run.duration_s=30",
        "--set",
        "slo.ttft_p99_ms=600",
        "--set",
        "slo.tpot_p99_ms=40",
        "--vary",
        "pools.prefill.instances=1,2",
        "--vary",
        "pools.decode.instances=1,2,3",
        "--vary",
        "pools.decode.server.tp_size=1,2",
        "--full-grid",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert!(out.contains("cheapest point"), "{out}");
    let plan: serde_json::Value =
        serde_json::from_slice(&bytes(&o, "plan.json")).expect("plan.json is JSON");
    let best = &plan["best"];
    assert!(best.is_object(), "an answer exists: {plan}");
    let key = |v: &serde_json::Value| -> (u64, u64) {
        (v["gpus"].as_u64().unwrap(), v["nodes"].as_u64().unwrap())
    };
    let best_cost = key(best);
    // Independently of the planner: group sweep.csv rows by point.
    let rows = read_csv(&o.join("sweep.csv"));
    let mut points: BTreeMap<Vec<String>, Vec<&BTreeMap<String, String>>> = BTreeMap::new();
    for r in &rows {
        let k = [
            "pools.prefill.instances",
            "pools.decode.instances",
            "pools.decode.server.tp_size",
        ]
        .map(|c| r[c].clone())
        .to_vec();
        points.entry(k).or_default().push(r);
    }
    assert_eq!(points.len(), 12);
    let mut cheaper = 0;
    for (k, seeds) in &points {
        let cost: (u64, u64) = (
            seeds[0]["gpus"].parse().unwrap(),
            seeds[0]["nodes"].parse().unwrap(),
        );
        let meets = seeds.iter().all(|r| r["slo_met"] == "true");
        if cost < best_cost {
            cheaper += 1;
            assert!(
                !meets,
                "point {k:?} is cheaper ({cost:?} < {best_cost:?}) and meets [slo]"
            );
        }
    }
    assert!(
        cheaper > 0,
        "the grid has cheaper points that fail (else the test proves nothing)"
    );
    for s in best["seeds"].as_array().unwrap() {
        assert_eq!(s["slo_met"], true);
    }
    // best.toml runs as is from its folder, on fresh seeds, and meets [slo].
    let text = String::from_utf8(bytes(&o, "best.toml")).unwrap();
    for (k, v) in best["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap(), p[1].as_str().unwrap()))
    {
        let leaf = k.rsplit('.').next().unwrap();
        assert!(
            text.contains(&format!("{leaf} = {v}")),
            "best.toml writes {k} = {v}"
        );
    }
    assert!(
        text.contains("rate_per_s = 14"),
        "best.toml has the planned rate"
    );
    for seed in [1001, 1002] {
        let run_out = d.join(format!("fresh-{seed}"));
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_pdsim"))
            .args([
                "run",
                "best.toml",
                "-q",
                "--summary-only",
                "--seed",
                &seed.to_string(),
                "--out",
            ])
            .arg(&run_out)
            .current_dir(&o)
            .status()
            .unwrap();
        assert!(status.success());
        let s: serde_json::Value =
            serde_json::from_slice(&bytes(&run_out, "summary.json")).unwrap();
        assert_eq!(s["slo"]["met"], true, "seed {seed}: {}", s["slo"]);
    }
    // The report is the plan's, opening with its answer.
    let html = String::from_utf8(bytes(&o, "index.html")).unwrap();
    assert!(html.contains("<title>pdsim plan: the cheapest deployment for 14 req/s"));
    assert!(
        html.contains("meets [slo] on all 2 seeds at 14 req/s"),
        "the answer first"
    );
    assert!(
        html.matches("<svg").count() >= 4,
        "latency ×2, Pareto, the split map"
    );
}

#[test]
fn best_toml_rewrites_relative_paths_to_run_where_it_is_written() {
    let d = tmpdir("plan-paths");
    let o = d.join("deep/er");
    ok(&[
        "plan",
        "scenarios/measured-profile.toml",
        "--rate",
        "1",
        "--seeds",
        "1",
        "--set",
        "run.duration_s=10",
        "--set",
        "slo.ttft_p99_ms=100000",
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        o.to_str().unwrap(),
    ]);
    let text = String::from_utf8(bytes(&o, "best.toml")).unwrap();
    assert!(!text.contains("\"profiles/"), "paths rewritten: {text}");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["run", "best.toml", "-q", "--summary-only", "--out", "run"])
        .current_dir(&o)
        .status()
        .unwrap();
    assert!(status.success(), "best.toml runs from its folder:\n{text}");
}

#[test]
fn max_rate_brackets_each_points_limit() {
    let d = tmpdir("plan-max");
    let o = d.join("m");
    ok(&[
        "plan",
        "scenarios/quickstart.toml",
        "--max-rate",
        "--seeds",
        "1",
        "--tolerance",
        "0.1",
        "--set",
        "run.duration_s=20",
        "--set",
        "slo.ttft_p99_ms=600",
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        o.to_str().unwrap(),
    ]);
    let rows = read_csv(&o.join("plan.csv"));
    assert_eq!(rows.len(), 2);
    let rate = |r: &BTreeMap<String, String>, c: &str| -> f64 { r[c].parse().unwrap() };
    for r in &rows {
        let (pass, fail) = (rate(r, "max_rate_per_s"), rate(r, "fails_at_rate_per_s"));
        assert!(pass < fail && (fail - pass) / pass <= 0.1 + 1e-9, "{r:?}");
        // Check the bracket by running both ends.
        for (rate, want) in [(pass, true), (fail, false)] {
            let out = d.join(format!("check-{}-{rate}", r["pools.decode.instances"]));
            ok(&[
                "run",
                "scenarios/quickstart.toml",
                "--summary-only",
                "-q",
                "--set",
                "run.duration_s=20",
                "--set",
                "slo.ttft_p99_ms=600",
                "--set",
                &format!("pools.decode.instances={}", r["pools.decode.instances"]),
                "--set",
                &format!("workload.arrival.rate_per_s={rate}"),
                "--out",
                out.to_str().unwrap(),
            ]);
            let s: serde_json::Value =
                serde_json::from_slice(&bytes(&out, "summary.json")).unwrap();
            assert_eq!(s["slo"]["met"], want, "rate {rate}: {}", s["slo"]);
        }
    }
    let one: f64 = rows[0]["max_rate_per_s"].parse().unwrap();
    let two: f64 = rows[1]["max_rate_per_s"].parse().unwrap();
    assert!(
        two >= one,
        "two decode instances sustain at least what one does"
    );
}

#[test]
fn sweep_and_plan_inputs_are_checked() {
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "sweep",
                "scenarios/quickstart.toml",
                "--vary",
                "pools.decode.instances",
            ],
            "--vary",
        ),
        (
            &[
                "sweep",
                "scenarios/quickstart.toml",
                "--vary",
                "pools.decode.instances=1",
                "--shard",
                "2/2",
            ],
            "--shard",
        ),
        (
            &[
                "sweep",
                "scenarios/quickstart.toml",
                "--vary",
                "pools.decode.tp=1,2",
            ],
            "unknown field `tp`",
        ),
        (
            &["sweep", "scenarios/quickstart.toml", "--jobs", "0"],
            "--jobs",
        ),
        (
            &[
                "plan",
                "scenarios/pd/page-size-mismatch.toml",
                "--rate",
                "5",
            ],
            "[slo]",
        ),
        (&["plan", "scenarios/quickstart.toml", "--rate=0"], "--rate"),
    ];
    for (args, want) in cases {
        let (code, _, err) = pdsim(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn an_all_failed_run_reports_null_latencies_and_misses_its_slo() {
    let d = tmpdir("nulls");
    ok(&[
        "run",
        "scenarios/pd/page-size-mismatch.toml",
        "-q",
        "--summary-only",
        "--set",
        "slo.ttft_p99_ms=1000",
        "--set",
        "slo.attainment_min=0.5",
        "--out",
        d.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&d, "summary.json")).unwrap();
    assert_eq!(s["requests"]["completed"], 0);
    for m in ["ttft", "tpot", "e2e"] {
        for q in ["mean", "p50", "p99", "max"] {
            assert!(
                s["latency_ms"][m][q].is_null(),
                "{m}.{q} = {}",
                s["latency_ms"][m][q]
            );
        }
    }
    assert_eq!(s["slo"]["met"], false);
    assert_eq!(s["slo"]["attainment"], 0.0);
    let t = &s["slo"]["targets"];
    assert_eq!(t[0]["key"], "ttft_p99_ms");
    assert!(t[0]["value"].is_null());
    assert_eq!(t[0]["met"], false);
}

#[test]
fn corrupted_requests_never_meet_an_slo() {
    let d = tmpdir("corrupted");
    ok(&[
        "run",
        "scenarios/pd/tp-mismatch-unguarded.toml",
        "-q",
        "--summary-only",
        "--set",
        "slo.ttft_ms=1e9",
        "--set",
        "slo.ttft_p50_ms=1e9",
        "--out",
        d.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&d, "summary.json")).unwrap();
    let r = &s["requests"];
    let (arrived, completed, corrupted) = (
        r["arrived"].as_f64().unwrap(),
        r["completed"].as_f64().unwrap(),
        r["corrupted"].as_f64().unwrap(),
    );
    assert!(corrupted > 0.0, "the scenario corrupts requests");
    let att = s["slo"]["attainment"].as_f64().unwrap();
    assert!(
        (att - completed / arrived).abs() < 1e-12,
        "attainment {att} counts only completed"
    );
    // With more than half corrupted, even a 1e9 ms median target is missed.
    if corrupted > arrived / 2.0 {
        assert_eq!(s["slo"]["met"], false);
    }
}

#[test]
fn throughput_over_the_arrival_window_excludes_the_drain_tail() {
    let d = tmpdir("window");
    ok(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--summary-only",
        "--out",
        d.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&d, "summary.json")).unwrap();
    let t = &s["throughput"];
    let w = &t["arrival_window"];
    assert_eq!(w["end_s"], 60.0);
    assert!(
        s["sim"]["simulated_s"].as_f64().unwrap() > 60.0,
        "a drain tail exists"
    );
    let (whole, window) = (
        t["output_tokens_per_s"].as_f64().unwrap(),
        w["output_tokens_per_s"].as_f64().unwrap(),
    );
    // The drain tail produces tokens at a falling rate, so the whole-run rate is lower; and
    // the window's tokens are a part of the whole run's.
    let simulated = s["sim"]["simulated_s"].as_f64().unwrap();
    assert!(window > whole, "window {window} vs whole run {whole}");
    assert!(
        window * 60.0 <= whole * simulated + 1e-6,
        "window tokens {} exceed the run's {}",
        window * 60.0,
        whole * simulated
    );
    assert_eq!(s["cluster"]["gpus"], 8);
    assert_eq!(s["cluster"]["nodes"], 2);
    let pools = s["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    let decode = &pools[1];
    assert!(decode["batch_mean"].as_f64().unwrap() > 1.0);
    let kv = decode["kv_occupancy"].as_f64().unwrap();
    assert!(kv > 0.0 && kv < 1.0);
}

#[test]
fn colocated_servers_finish_every_request_without_the_fabric() {
    let d = tmpdir("colocated");
    ok(&[
        "run",
        "scenarios/plan/colocated-8b.toml",
        "-q",
        "--out",
        d.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&d, "summary.json")).unwrap();
    assert_eq!(s["requests"]["arrived"], s["requests"]["completed"]);
    assert_eq!(s["transfer"]["bytes"], 0);
    assert_eq!(s["pools"][0]["role"], "colocated");
    for r in read_csv(&d.join("requests.csv")) {
        assert_eq!(r["prefill_instance"], r["decode_instance"]);
        assert!(r["transfer_start_ns"].is_empty());
        let (a, f, e): (u64, u64, u64) = (
            r["arrival_ns"].parse().unwrap(),
            r["first_token_ns"].parse().unwrap(),
            r["finish_ns"].parse().unwrap(),
        );
        assert!(a <= f && f <= e);
    }
    // A colocated pool cannot be mixed into a PD cluster.
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--set",
        "pools.decode.role=colocated",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("either a PD cluster"), "{err}");
}

#[test]
fn paired_lengths_keep_each_rows_input_with_its_output() {
    let d = tmpdir("paired");
    let lengths = d.join("pairs.csv");
    std::fs::write(
        &lengths,
        "arrival_s,input_tokens,output_tokens\n0,100,7\n1,2000,3\n2,555,40\n",
    )
    .unwrap();
    let sc = d.join("s.toml");
    let text = std::fs::read_to_string(repo().join("scenarios/quickstart.toml"))
        .unwrap()
        .replace(
            "input_tokens = { dist = \"lognormal\", mean = 2048, cv = 0.8, max = 16384 }\noutput_tokens = { dist = \"lognormal\", mean = 256, cv = 0.5, max = 2048 }",
            "lengths = { path = \"pairs.csv\" }",
        );
    assert!(text.contains("lengths = {"));
    std::fs::write(&sc, text).unwrap();
    let out = d.join("out");
    ok(&[
        "run",
        sc.to_str().unwrap(),
        "-q",
        "--set",
        "run.duration_s=10",
        "--out",
        out.to_str().unwrap(),
    ]);
    let pairs: std::collections::BTreeSet<(String, String)> =
        [("100", "7"), ("2000", "3"), ("555", "40")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
    let rows = read_csv(&out.join("requests.csv"));
    assert!(rows.len() > 50);
    let mut seen = std::collections::BTreeSet::new();
    for r in &rows {
        let p = (r["input_tokens"].clone(), r["output_tokens"].clone());
        assert!(pairs.contains(&p), "{p:?} is not a row of the file");
        seen.insert(p);
    }
    assert_eq!(seen.len(), 3);
    // Paired lengths and separate lengths together are refused.
    let (code, _, err) = pdsim(&[
        "run",
        sc.to_str().unwrap(),
        "--set",
        "workload.input_tokens={ dist = \"fixed\", value = 5 }",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("workload.lengths"), "{err}");
}

#[test]
fn a_failed_run_leaves_no_stale_results() {
    let d = tmpdir("stale");
    let o = d.to_str().unwrap();
    ok(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--set",
        "run.duration_s=5",
        "--out",
        o,
    ]);
    assert!(d.join("summary.json").exists() && d.join("charts").is_dir());
    let (code, _, _) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--set",
        "pools.decode.server.tp_size=3",
        "--out",
        o,
    ]);
    assert_eq!(code, 2);
    for f in [
        "summary.json",
        "requests.csv",
        "run.json",
        "index.html",
        "charts",
    ] {
        assert!(!d.join(f).exists(), "{f} left behind by a failed run");
    }
}

#[test]
fn a_crashed_colocated_server_fails_what_it_held_and_serves_again_after_restart() {
    let d = tmpdir("colocated-crash");
    ok(&[
        "run",
        "tests/scenarios/colocated-crash.toml",
        "-q",
        "--out",
        d.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&d, "summary.json")).unwrap();
    let r = &s["requests"];
    let sum: u64 = ["completed", "failed", "corrupted", "unfinished"]
        .iter()
        .map(|k| r[k].as_u64().unwrap())
        .sum();
    assert_eq!(
        sum,
        r["arrived"].as_u64().unwrap(),
        "every request ends once"
    );
    assert_eq!(s["errors"][0]["kind"], "server_crashed");
    let rows = read_csv(&d.join("requests.csv"));
    // Server 1 serves again after its restart at 15 s.
    assert!(rows.iter().any(|r| r["prefill_instance"] == "1"
        && r["arrival_ns"].parse::<u64>().unwrap() > 16_000_000_000
        && r["outcome"] == "completed"));
    // The batch cap (max_running_requests = 16) holds: occupancy is at most 1.
    let occ = s["pools"][0]["batch_occupancy"].as_f64().unwrap();
    assert!(occ > 0.0 && occ <= 1.0, "{occ}");
}

#[test]
fn per_request_slos_mark_points_that_reach_attainment_as_met() {
    // The quickstart's [slo] is per-request thresholds (ttft_ms, tpot_ms) without
    // attainment_min: the default 90 % applies, so a comfortable point meets it — and with an
    // attainment_min no point can reach, none does.
    let out = tmpdir("sweep-per-request-slo");
    let o = out.to_str().unwrap();
    let mut args = vec![
        "sweep",
        "scenarios/quickstart.toml",
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        o,
        "-q",
    ];
    args.extend(SHORT);
    ok(&args);
    let rows = common::read_csv(&out.join("sweep.csv"));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        let a: f64 = r["slo_attainment"].parse().unwrap();
        assert!(a >= 0.9, "{r:?}");
        assert_eq!(r["slo_met"], "true", "{r:?}");
    }
    let html = String::from_utf8(bytes(&out, "index.html")).unwrap();
    assert!(html.contains("<td>yes</td>"), "the report marks met points");
    // attainment_min above what any point reaches: every row misses.
    let strict = tmpdir("sweep-per-request-slo-strict");
    let s = strict.to_str().unwrap();
    let mut args = vec![
        "sweep",
        "scenarios/quickstart.toml",
        "--vary",
        "pools.decode.instances=1,2",
        "--set",
        "slo.ttft_ms=1",
        "--set",
        "slo.attainment_min=0.5",
        "--out",
        s,
        "-q",
    ];
    args.extend(SHORT);
    ok(&args);
    for r in common::read_csv(&strict.join("sweep.csv")) {
        assert_eq!(r["slo_met"], "false", "{r:?}");
    }
}

/// `pdsim plan` writes `launch.txt` beside `best.toml`: one sglang launch line per instance of
/// every pool (the planned values on them) and the router's line naming every server. `pdsim
/// lint` accepts each prefill line with each decode line as compatible.
#[test]
fn plan_writes_launch_lines_that_lint_accepts() {
    let d = tmpdir("plan-launch");
    let o = d.join("plan");
    ok(&[
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "14",
        "--set",
        "run.duration_s=20",
        "--set",
        "slo.ttft_p99_ms=600",
        "--set",
        "slo.tpot_p99_ms=40",
        "--vary",
        "pools.decode.instances=1,2",
        "--vary",
        "pools.decode.server.tp_size=1,2",
        "--out",
        o.to_str().unwrap(),
    ]);
    let plan: serde_json::Value = serde_json::from_slice(&bytes(&o, "plan.json")).unwrap();
    assert_eq!(plan["launch"], "launch.txt", "{plan}");
    let best: BTreeMap<String, String> = plan["best"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv[0].as_str().unwrap().to_string(),
                kv[1].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let text = String::from_utf8(bytes(&o, "launch.txt")).unwrap();
    let lines: Vec<&str> = pdsim::plan::launch::commands(&text).collect();
    let servers: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains("sglang.launch_server"))
        .collect();
    let prefill: Vec<&str> = servers
        .iter()
        .copied()
        .filter(|l| l.contains("--disaggregation-mode prefill"))
        .collect();
    let decode: Vec<&str> = servers
        .iter()
        .copied()
        .filter(|l| l.contains("--disaggregation-mode decode"))
        .collect();
    // The quickstart's two prefill instances; decode has the planned count and TP.
    assert_eq!(prefill.len(), 2, "{text}");
    assert_eq!(
        decode.len().to_string(),
        best["pools.decode.instances"],
        "{text}"
    );
    let tp = &best["pools.decode.server.tp_size"];
    for l in &decode {
        assert!(l.contains(&format!("--tp-size {tp} ")), "{l}");
        assert!(
            l.contains("--mem-fraction-static "),
            "the simulated value is written: {l}"
        );
    }
    // The router names every server: prefills with their bootstrap ports.
    let router = lines
        .iter()
        .find(|l| l.contains("sglang_router.launch_router"))
        .expect("a router line");
    assert!(router.contains("--pd-disaggregation"), "{router}");
    assert_eq!(router.matches("--prefill http://").count(), prefill.len());
    assert_eq!(router.matches("--decode http://").count(), decode.len());
    for p in &prefill {
        for dl in &decode {
            let (code, out, err) = pdsim(&["lint", "--prefill", p, "--decode", dl]);
            assert_eq!(
                code, 0,
                "lint refused the plan's lines:\n{p}\n{dl}\n{out}{err}"
            );
            assert!(out.to_lowercase().contains("compatible"), "{out}");
        }
    }
}

/// `plan --rate` searches cheapest first and stops at the answer; `--full-grid` runs every
/// point. On the README's 70B question (64 points) and on that grid × page size × chunk size
/// (256 points) the search gives the same best point in at most a third of the runs, and its
/// `sweep.csv` holds exactly the rows it ran. Prints runs, grid_runs and wall time of both.
#[test]
fn the_search_finds_the_full_grids_answer_in_a_third_of_the_runs() {
    const PLAN: &str = "scenarios/plan/llama70b-azure-conv.toml";
    const README: [&str; 8] = [
        "--vary",
        "pools.prefill.instances=1,2,3,4",
        "--vary",
        "pools.decode.instances=1,2,3,4",
        "--vary",
        "pools.prefill.server.tp_size=4,8",
        "--vary",
        "pools.decode.server.tp_size=4,8",
    ];
    const LARGER: [&str; 4] = [
        "--vary",
        "pools.decode.server.page_size=16,64",
        "--vary",
        "pools.prefill.server.chunked_prefill_size=4096,8192",
    ];
    let run = |name: &str, axes: &[&str], extra: &[&str]| -> (serde_json::Value, f64, Vec<u8>) {
        let o = tmpdir(&format!("plan-search-{name}"));
        let mut args = vec!["plan", PLAN, "--rate", "20", "--jobs", "2", "-q", "--out"];
        args.push(o.to_str().unwrap());
        args.extend(axes);
        args.extend(extra);
        let t = std::time::Instant::now();
        ok(&args);
        let wall = t.elapsed().as_secs_f64();
        let plan = serde_json::from_slice(&bytes(&o, "plan.json")).expect("plan.json is JSON");
        (plan, wall, bytes(&o, "sweep.csv"))
    };
    let larger: Vec<&str> = README.iter().chain(&LARGER).copied().collect();
    for (name, axes, points) in [("readme", &README[..], 64), ("larger", &larger[..], 256)] {
        let (search, t_search, csv) = run(name, axes, &[]);
        let (full, t_full, _) = run(&format!("{name}-full"), axes, &["--full-grid"]);
        let runs = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap();
        eprintln!(
            "{name}: search {} runs of grid_runs {} in {t_search:.1} s; full grid {} runs in {t_full:.1} s",
            runs(&search, "runs"),
            runs(&search, "grid_runs"),
            runs(&full, "runs"),
        );
        assert_eq!(search["search"], "cheapest_first");
        assert_eq!(full["search"], "full_grid");
        assert_eq!(runs(&full, "grid_points"), points);
        assert_eq!(runs(&full, "runs"), points * 3);
        assert_eq!(runs(&search, "grid_runs"), runs(&full, "runs"));
        assert!(full["best"].is_object(), "{name}: the grid has an answer");
        assert_eq!(search["best"], full["best"], "{name}: the same best point");
        assert!(
            3 * runs(&search, "runs") <= runs(&full, "runs"),
            "{name}: {} runs is more than a third of {}",
            runs(&search, "runs"),
            runs(&full, "runs")
        );
        // sweep.csv holds the rows that ran: one header and `runs` lines.
        let lines = csv.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(lines, 1 + runs(&search, "runs"), "{name}");
    }
}

/// The search's files do not depend on `--jobs` (the batch only decides how far past the
/// answer the last batch runs, and those rows are not kept).
#[test]
fn a_search_writes_the_same_bytes_on_any_number_of_jobs() {
    let d = tmpdir("plan-search-jobs");
    let mut outs = Vec::new();
    for jobs in ["1", "2", "5"] {
        let o = d.join(jobs);
        let mut args = vec![
            "plan",
            "scenarios/quickstart.toml",
            "--rate",
            "30",
            "--seeds",
            "2",
            "--jobs",
            jobs,
            "-q",
            "--set",
            "slo.ttft_p99_ms=600",
            "--set",
            "slo.tpot_p99_ms=40",
            "--vary",
            "pools.prefill.instances=1,2",
            "--vary",
            "pools.decode.instances=1,2,3",
            "--out",
        ];
        args.push(o.to_str().unwrap());
        args.extend(SHORT);
        ok(&args);
        outs.push(o);
    }
    // Cheaper points fail first (else the batches prove nothing), and --jobs 2 runs past the
    // answer in its batch.
    let plan: serde_json::Value = serde_json::from_slice(&bytes(&outs[0], "plan.json")).unwrap();
    assert!(
        plan["best"].is_object() && plan["points"].as_u64().unwrap() >= 3,
        "{plan}"
    );
    for f in ["sweep.csv", "plan.json", "best.toml", "index.html"] {
        for o in &outs[1..] {
            assert_eq!(bytes(&outs[0], f), bytes(o, f), "{f} differs with --jobs");
        }
    }
}

const PLAN70B: &str = "scenarios/plan/llama70b-azure-conv.toml";
const GRID70B: [&str; 8] = [
    "--vary",
    "pools.prefill.instances=1,2,3,4",
    "--vary",
    "pools.decode.instances=1,2,3,4",
    "--vary",
    "pools.prefill.server.tp_size=4,8",
    "--vary",
    "pools.decode.server.tp_size=4,8",
];

/// `pdsim plan` of the README's 70B question into `o` with `extra` arguments; its plan.json.
fn plan70b(o: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "plan",
        PLAN70B,
        "--rate",
        "20",
        "--jobs",
        "2",
        "-q",
        "--set",
        // The grid and rate were sized to this calibration's step times: at them the cheapest
        // points miss [slo], which the billing tests need.
        "hardware.calibration=sglang-2025",
        "--out",
    ];
    args.push(o.to_str().unwrap());
    args.extend(GRID70B);
    args.extend(extra);
    ok(&args);
    serde_json::from_slice(&bytes(o, "plan.json")).expect("plan.json is JSON")
}

fn values(best: &serde_json::Value) -> Vec<(String, String)> {
    best["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv[0].as_str().unwrap().into(),
                kv[1].as_str().unwrap().into(),
            )
        })
        .collect()
}

/// `hardware.billing = "node"` prices every GPU of the nodes a point spans: the 70B answer
/// under GPU billing (20 GPUs on 3 nodes, 4 idle) costs as much as 24 GPUs there, and the
/// search, ordering by the billed cost, picks a point that puts all 24 to work. The full grid
/// agrees; no point with a smaller bill meets `[slo]`; plan.json, launch.txt, the report and
/// a run's summary show nodes, idle GPUs and what is billed. A bad value is exit 2 naming
/// the key and the valid values.
#[test]
fn whole_node_billing_prices_idle_gpus_and_orders_the_search() {
    let d = tmpdir("plan-billing");
    let by_gpu = plan70b(&d.join("gpu"), &[]);
    let node = ["--set", "hardware.billing=\"node\""];
    let by_node = plan70b(&d.join("node"), &node);
    let full: Vec<&str> = node.iter().copied().chain(["--full-grid"]).collect();
    let by_node_full = plan70b(&d.join("node-full"), &full);
    assert_eq!(by_gpu["billing"], "gpu");
    assert_eq!(by_node["billing"], "node");
    let (g, n) = (&by_gpu["best"], &by_node["best"]);
    assert!(
        g["idle_gpus"].as_u64().unwrap() > 0,
        "GPU billing's answer leaves GPUs idle: {g}"
    );
    assert_eq!(g["billed_gpus"], g["gpus"]);
    assert_ne!(values(g), values(n), "billing by node changes the answer");
    assert_eq!(
        by_node_full["best"], by_node["best"],
        "the search is the full grid's"
    );
    for b in [g, n] {
        let billed = b["billed_gpus"].as_u64().unwrap();
        assert_eq!(b["usd_per_hour"].as_f64().unwrap(), 2.5 * billed as f64);
    }
    let nodes = n["nodes"].as_u64().unwrap();
    assert_eq!(n["billed_gpus"].as_u64().unwrap(), 8 * nodes);
    // The node answer bills what the GPU answer's nodes would cost, and uses them all.
    assert_eq!(
        n["billed_gpus"].as_u64().unwrap(),
        8 * g["nodes"].as_u64().unwrap()
    );
    assert!(n["gpus"].as_u64() > g["gpus"].as_u64());
    // Independently of the planner: every point billed less fails on some seed.
    let rows = read_csv(&d.join("node-full/sweep.csv"));
    let bill = n["billed_gpus"].as_u64().unwrap();
    let mut cheaper = 0;
    for r in &rows {
        let b: u64 = r["billed_gpus"].parse().unwrap();
        let (gpus, nds): (u64, u64) = (r["gpus"].parse().unwrap(), r["nodes"].parse().unwrap());
        assert_eq!(b, 8 * nds, "node billing: {r:?}");
        assert_eq!(r["idle_gpus"].parse::<u64>().unwrap(), 8 * nds - gpus);
        if b < bill {
            cheaper += 1;
            let point: Vec<&String> = GRID70B[1..]
                .iter()
                .step_by(2)
                .map(|a| &r[a.split('=').next().unwrap()])
                .collect();
            let seeds: Vec<_> = rows
                .iter()
                .filter(|q| {
                    GRID70B[1..]
                        .iter()
                        .step_by(2)
                        .map(|a| &q[a.split('=').next().unwrap()])
                        .eq(point.iter().copied())
                })
                .collect();
            assert!(
                seeds.iter().any(|q| q["slo_met"] == "false"),
                "{point:?} is billed less and meets [slo]"
            );
        }
    }
    assert!(
        cheaper > 0,
        "points billed less exist (else the test proves nothing)"
    );
    // launch.txt and the report say which nodes are used, what idles and what is billed.
    let launch = String::from_utf8(bytes(&d.join("gpu"), "launch.txt")).unwrap();
    assert!(
        launch.contains("# nodes used: 3 (node0, node1, node2); GPUs used 20 of 24, idle 4"),
        "{launch}"
    );
    assert!(launch.contains("# billed per GPU"), "{launch}");
    let launch = String::from_utf8(bytes(&d.join("node"), "launch.txt")).unwrap();
    assert!(
        launch.contains("# billed per node (hardware.billing = \"node\")"),
        "{launch}"
    );
    let html = String::from_utf8(bytes(&d.join("node"), "index.html")).unwrap();
    assert!(
        html.contains("billed per node"),
        "the report says what is billed"
    );
    // A run's summary prices whole nodes too.
    let o = d.join("run");
    ok(&[
        "run",
        PLAN70B,
        "-q",
        "--summary-only",
        "--set",
        "hardware.billing=\"node\"",
        "--set",
        "pools.prefill.instances=3",
        "--set",
        "run.duration_s=10",
        "--out",
        o.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&o, "summary.json")).unwrap();
    let c = &s["cluster"];
    assert_eq!(c["gpus"], 20);
    assert_eq!(c["node_billing"]["billed_gpus"], 24, "{c}");
    assert_eq!(c["node_billing"]["idle_gpus"], 4, "{c}");
    assert_eq!(c["usd_per_hour"].as_f64(), Some(60.0), "{c}");
    // Without the key the summary has no node_billing (existing results are unchanged).
    let o = d.join("run-gpu");
    ok(&[
        "run",
        PLAN70B,
        "-q",
        "--summary-only",
        "--set",
        "run.duration_s=10",
        "--out",
        o.to_str().unwrap(),
    ]);
    let s: serde_json::Value = serde_json::from_slice(&bytes(&o, "summary.json")).unwrap();
    assert!(
        s["cluster"].get("node_billing").is_none(),
        "{}",
        s["cluster"]
    );
    // A bad value names the key and what is valid.
    let (code, _, err) = pdsim(&["run", PLAN70B, "-q", "--set", "hardware.billing=\"nodes\""]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hardware.billing") && err.contains("\"gpu\"") && err.contains("\"node\""),
        "{err}"
    );
}

/// Issue 43, the second defect: a TP8 prefill and a TP16 decode on 8-GPU nodes use nodes 0,
/// 1 and 2 — 24 GPUs, none idle — so at $2 per GPU-hour billed per node a run costs 3 × 8 × 2 =
/// $48/h (the decode was aligned to 16 GPUs and took nodes 2–3: 4 nodes, 8 idle GPUs, $64/h),
/// and a sweep's row, which `plan` ranks points by, bills 24 GPUs on 3 nodes. (Qwen3-235B-A22B:
/// here with DP attention, attention groups of 8 inside a node; a dense TP16 spans both.)
#[test]
fn a_two_node_instance_takes_the_next_free_node_and_is_billed_so() {
    let d = tmpdir("placement-billing");
    let sets = [
        "model.preset=qwen3-235b-a22b",
        "pools.prefill.instances=1",
        "pools.prefill.server.tp_size=8",
        "pools.decode.instances=1",
        "pools.decode.server.tp_size=16",
        "pools.decode.server.dp_size=2",
        "pools.decode.server.enable_dp_attention=true",
        "hardware.usd_per_gpu_hour=2",
        "hardware.billing=\"node\"",
    ];
    let with_sets = |mut args: Vec<String>| {
        for s in sets {
            args.extend(["--set".to_string(), s.to_string()]);
        }
        args
    };
    let o = d.join("run");
    let args = with_sets(
        [
            "run",
            "scenarios/quickstart.toml",
            "-q",
            "--summary-only",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([o.to_str().unwrap().to_string()])
        .collect(),
    );
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let s: serde_json::Value = serde_json::from_slice(&bytes(&o, "summary.json")).unwrap();
    let c = &s["cluster"];
    assert_eq!(
        (c["gpus"].as_u64(), c["nodes"].as_u64()),
        (Some(24), Some(3)),
        "{c}"
    );
    assert_eq!(c["usd_per_hour"].as_f64(), Some(48.0), "{c}");
    assert_eq!(c["node_billing"]["billed_gpus"], 24, "{c}");
    assert_eq!(c["node_billing"]["idle_gpus"], 0, "{c}");
    let o = d.join("sweep");
    let args = with_sets(
        [
            "sweep",
            "scenarios/quickstart.toml",
            "-q",
            "--vary",
            "run.duration_s=2",
            "--out",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([o.to_str().unwrap().to_string()])
        .collect(),
    );
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let rows = read_csv(&o.join("sweep.csv"));
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(
        (
            &*r["gpus"],
            &*r["nodes"],
            &*r["idle_gpus"],
            &*r["billed_gpus"]
        ),
        ("24", "3", "0", "24")
    );
}

/// Stopping a run once `[slo]` can no longer be met changes no verdict and no answer: on the
/// 70B grid run whole (`--full-grid`), every row's `slo_met` is the same with and without
/// `--no-early-stop`, the rows that met `[slo]` are byte for byte the same, many rows stopped
/// (else this proves nothing) and each names a target it lost; the plan's answer is the same.
#[test]
fn runs_stopped_once_the_slo_is_lost_keep_every_verdict_and_the_answer() {
    let d = tmpdir("plan-early");
    let early = plan70b(&d.join("early"), &["--full-grid"]);
    let whole = plan70b(&d.join("whole"), &["--full-grid", "--no-early-stop"]);
    assert_eq!(early["best"]["values"], whole["best"]["values"]);
    assert_eq!(
        early["best"]["seeds"], whole["best"]["seeds"],
        "the answer's rows are whole runs"
    );
    assert!(early["early_stop"] == true && whole["early_stop"] == false);
    assert_eq!(whole["runs_stopped_early"], 0);
    let (a, b) = (
        read_csv(&d.join("early/sweep.csv")),
        read_csv(&d.join("whole/sweep.csv")),
    );
    assert_eq!(a.len(), b.len());
    let mut stopped = 0;
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x["slo_met"], y["slo_met"], "{x:?}\n{y:?}");
        if x["stopped_early_at_s"].is_empty() {
            assert_eq!(x, y, "a run that was not stopped is the whole run");
        } else {
            stopped += 1;
            assert_eq!(x["slo_met"], "false");
            let t: f64 = x["stopped_early_at_s"].parse().unwrap();
            assert!(t < 240.0, "stopped before the run's end: {t}");
            // What it names as lost, the whole run misses.
            for k in x["slo_missed"].split(' ') {
                assert!(
                    y["slo_missed"].split(' ').any(|m| m == k),
                    "{k} lost early but met whole: {y:?}"
                );
            }
        }
    }
    assert_eq!(early["runs_stopped_early"].as_u64(), Some(stopped));
    assert!(stopped >= 20, "{stopped} runs stopped early");
}

/// The same, run by run, over the kinds of target and workload: percentile targets and
/// per-request thresholds with `attainment_min` (its default too), a Poisson arrival cut by
/// the duration, one cut by `max_requests`, a trace — the verdict with early stop equals the
/// whole run's every time, and a run that meets `[slo]` is byte for byte the same summary.
#[test]
fn the_early_stop_is_exact_run_by_run() {
    let mut stopped = 0;
    let mut cases = 0;
    let slos: [&[&str]; 4] = [
        &["slo.ttft_p99_ms=600", "slo.tpot_p99_ms=40"],
        &["slo.ttft_p90_ms=300"],
        &["slo.tpot_p50_ms=20", "slo.ttft_p50_ms=200"],
        &[
            "slo.ttft_ms=500",
            "slo.tpot_ms=40",
            "slo.attainment_min=0.95",
        ],
    ];
    let workloads: [&[&str]; 2] = [
        &["run.duration_s=20"],
        &["run.duration_s=60", "run.max_requests=300"],
    ];
    for slo in slos {
        for w in workloads {
            for rate in ["10", "45", "90"] {
                for seed in ["1", "2"] {
                    let mut sets: Vec<String> = vec![
                        "run.drain_timeout_s=60".into(),
                        format!("workload.arrival.rate_per_s={rate}"),
                        format!("run.seed={seed}"),
                    ];
                    sets.extend(w.iter().chain(slo).map(|s| s.to_string()));
                    let sc =
                        pdsim::scenario::load(&repo().join("scenarios/quickstart.toml"), &sets)
                            .unwrap();
                    let (whole, none) = pdsim::plan::summarize_until(&sc, false).unwrap();
                    let (cut, at) = pdsim::plan::summarize_until(&sc, true).unwrap();
                    assert!(none.is_none());
                    assert_eq!(whole.slo.met, cut.slo.met, "{sets:?}");
                    if at.is_some() {
                        stopped += 1;
                        assert_eq!(whole.slo.met, Some(false), "{sets:?}");
                    } else {
                        assert_eq!(whole, cut, "{sets:?}: not stopped, the same run");
                    }
                    cases += 1;
                }
            }
        }
    }
    // A trace (Azure code), replayed at a rate the cluster holds and at one it does not.
    for rate in ["2", "20"] {
        let sets = vec![
            format!("workload.trace.rate_per_s={rate}"),
            "run.duration_s=30".to_string(),
            "run.drain_timeout_s=60".to_string(),
            "slo.ttft_p99_ms=2000".to_string(),
        ];
        let sc = pdsim::scenario::load(&repo().join("scenarios/trace-azure-code.toml"), &sets)
            .unwrap_or_else(|e| panic!("{e}"));
        let (whole, _) = pdsim::plan::summarize_until(&sc, false).unwrap();
        let (cut, at) = pdsim::plan::summarize_until(&sc, true).unwrap();
        assert_eq!(whole.slo.met, cut.slo.met, "trace at {rate}");
        stopped += usize::from(at.is_some());
        cases += 1;
    }
    assert!(
        stopped >= cases / 4 && stopped < cases,
        "{stopped} of {cases} stopped: both kinds must occur"
    );
}

/// `--max-rate` gallops and bisects over the rate ladder (rungs `1 + tolerance` apart), and
/// gives what a scan of every rung gives: a sweep over the rungs around each point's answer
/// passes up to `max_rate_per_s` and fails from `fails_at_rate_per_s` on. It takes fewer runs
/// than the rung-by-rung scan from the starting rate (plan.json's `runs` and `ladder_runs`),
/// and its output names every key.
#[test]
fn max_rate_searches_to_the_answer_of_a_scan_of_every_rate() {
    let d = tmpdir("plan-max-ladder");
    let o = d.join("m");
    let common = [
        "--seeds",
        "1",
        "--set",
        "run.duration_s=20",
        "--set",
        "slo.ttft_p99_ms=600",
        "--set",
        "workload.arrival.rate_per_s=2",
    ];
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--max-rate",
        "--tolerance",
        "0.05",
        "--jobs",
        "2",
    ];
    args.extend(common);
    args.extend([
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        o.to_str().unwrap(),
    ]);
    let out = ok(&args);
    assert!(
        out.contains("pools.decode.instances=1 —") && out.contains("pools.decode.instances=2 —"),
        "{out}"
    );
    assert!(!out.contains("  ["), "no bare values: {out}");
    let plan: serde_json::Value = serde_json::from_slice(&bytes(&o, "plan.json")).unwrap();
    let (runs, ladder) = (
        plan["runs"].as_u64().unwrap(),
        plan["ladder_runs"].as_u64().unwrap(),
    );
    eprintln!("max-rate: {runs} runs, a rung-by-rung scan {ladder}");
    assert!(runs < ladder, "{runs} runs vs {ladder} for the scan");
    assert_eq!(plan["points"][1]["values"][0][0], "pools.decode.instances");
    let ladder = pdsim::plan::search::Ladder::new(2.0, 0.05);
    let rows = read_csv(&o.join("plan.csv"));
    for r in &rows {
        let pass: f64 = r["max_rate_per_s"].parse().unwrap();
        let fail: f64 = r["fails_at_rate_per_s"].parse().unwrap();
        let k = (ladder.bottom..=ladder.top)
            .find(|&k| ladder.rate(k) == pass)
            .expect("the answer is a rung");
        assert_eq!(ladder.rate(k + 1), fail, "adjacent rungs");
        // The exhaustive way: every rung from 5 below to 5 above, each run whole.
        let rungs: Vec<String> = (k - 5..=k + 5)
            .map(|j| pdsim::plan::search::rate_value(ladder.rate(j)))
            .collect();
        let s = d.join(format!("scan-{}", r["pools.decode.instances"]));
        let vary = format!("workload.arrival.rate_per_s={}", rungs.join(","));
        let inst = format!("pools.decode.instances={}", r["pools.decode.instances"]);
        let mut args = vec![
            "sweep",
            "scenarios/quickstart.toml",
            "-q",
            "--jobs",
            "2",
            "--vary",
            &vary,
            "--set",
            &inst,
        ];
        args.extend(common[..6].iter().copied());
        args.extend(["--out", s.to_str().unwrap()]);
        ok(&args);
        let scan = read_csv(&s.join("sweep.csv"));
        assert_eq!(scan.len(), 11);
        for (j, q) in scan.iter().enumerate() {
            let want = if j <= 5 { "true" } else { "false" };
            assert_eq!(
                q["slo_met"],
                want,
                "rung {} ({}): {q:?}",
                k - 5 + j as i32,
                rungs[j]
            );
        }
    }
}

/// The plan report is a plan's: titled so, every point run labelled with its values, a
/// point marked as meeting `[slo]` exactly when its rows do (the one evaluator, not goodput),
/// the cost columns in a table that scrolls rather than cuts, and the points against the
/// trend explained by the pool that binds. A sweep's report stays a sweep's.
#[test]
fn the_plan_report_labels_colours_and_explains_every_point() {
    let d = tmpdir("plan-report");
    let o = d.join("full");
    let plan = plan70b(&o, &["--full-grid"]);
    let html = String::from_utf8(bytes(&o, "index.html")).unwrap();
    let title = &html[html.find("<title>").unwrap()..html.find("</title>").unwrap()];
    assert!(
        title.contains("pdsim plan") && !title.contains("sweep"),
        "{title}"
    );
    let rows = read_csv(&o.join("sweep.csv"));
    let label = |r: &BTreeMap<String, String>| {
        format!(
            "{}P·tp{} {}D·tp{}",
            r["pools.prefill.instances"],
            r["pools.prefill.server.tp_size"],
            r["pools.decode.instances"],
            r["pools.decode.server.tp_size"]
        )
    };
    let mut met = BTreeMap::new();
    for r in &rows {
        let e = met.entry(label(r)).or_insert(true);
        *e &= r["slo_met"] == "true";
    }
    assert_eq!(met.len(), 64);
    for (l, m) in &met {
        // Each chart labels it (TTFT, TPOT), and so does the table.
        assert!(
            html.matches(&format!("\n{l}  (")).count() >= 2,
            "{l} is labelled on the charts"
        );
        let row = "<td class=\"lab\" title=";
        let at = html
            .find(&format!("\">{l}</td>"))
            .unwrap_or_else(|| panic!("{l} in the table"));
        let tr = &html[html[..at].rfind("<tr").unwrap()..at];
        assert!(tr.contains(row));
        assert_eq!(
            tr.contains("class=\"met\""),
            *m,
            "{l}: the table's verdict is the rows'"
        );
    }
    assert!(met.values().any(|m| *m) && met.values().any(|m| !*m));
    assert!(html.contains("<div class=\"scroll\"><table>") && html.contains("<th>$/hour</th>"));
    assert!(
        html.contains("<h2>Against the trend</h2>") && html.contains("binds: prefill (compute)"),
        "outliers explained"
    );
    assert!(html.contains(&format!(
        "{} runs of the full grid's {}",
        plan["runs"], plan["grid_runs"]
    )));
    // A sweep's report is titled a sweep.
    let s = d.join("sweep");
    sweep(&s, &[]);
    let html = String::from_utf8(bytes(&s, "index.html")).unwrap();
    assert!(html.contains("<title>pdsim sweep: scenarios/quickstart.toml</title>"));
}

/// `k8s.yaml` is the deployment of `launch.txt` as Kubernetes objects: the ConfigMap of the
/// cluster's names, per pool one LeaderWorkerSet per port its instances use in `launch.txt`
/// (replicas adding up to the pool's instances, the instance's GPUs per pod) each with a Service
/// on its leaders, each server's arguments those of its launch line (but the GPU offset and the
/// way a variable is written), and the router Deployment naming every instance by its LWS pod's
/// DNS name; `slurm.sh` beside it parses and is listed in `plan.json`.
#[test]
fn kubernetes_manifests_are_the_launch_lines_as_leader_worker_sets() {
    let d = tmpdir("plan-k8s");
    let plan = plan70b(&d, &[]);
    assert_eq!(plan["kubernetes"], "k8s.yaml");
    assert_eq!(plan["slurm"], "slurm.sh");
    let yaml = String::from_utf8(bytes(&d, "k8s.yaml")).unwrap();
    let launch = String::from_utf8(bytes(&d, "launch.txt")).unwrap();
    let docs: Vec<&str> = yaml.split("\n---\n").skip(1).collect();
    let kind = |doc: &str| doc.lines().nth(1).unwrap().to_string();
    assert_eq!(kind(docs[0]), "kind: \"ConfigMap\"");
    assert!(docs[0].contains("IB_DEVICES: \"\""), "{}", docs[0]);
    let n = docs.len();
    assert_eq!(kind(docs[n - 2]), "kind: \"Deployment\"");
    assert_eq!(kind(docs[n - 1]), "kind: \"Service\"");
    let lws: Vec<&str> = docs[1..n - 2].iter().step_by(2).copied().collect();
    for (i, l) in lws.iter().enumerate() {
        assert_eq!(kind(l), "kind: \"LeaderWorkerSet\"", "{l}");
        let svc = docs[2 + 2 * i];
        assert_eq!(kind(svc), "kind: \"Service\"", "{svc}");
        assert!(svc.contains("leaderworkerset.sigs.k8s.io/worker-index: \"0\""));
    }
    let best = values(&plan["best"])
        .into_iter()
        .collect::<BTreeMap<_, _>>();
    let lines: Vec<&str> = pdsim::plan::launch::commands(&launch).collect();
    // The command of a document: its `- "word"` lines under `command:`.
    let command = |doc: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut inside = false;
        for l in doc.lines() {
            let t = l.trim_start();
            if t == "command:" {
                inside = true;
            } else if inside && let Some(w) = t.strip_prefix("- \"") {
                out.push(serde_json::from_str::<String>(&format!("\"{w}")).unwrap());
            } else if inside {
                break;
            }
        }
        out
    };
    let strip = |words: Vec<String>| -> Vec<String> {
        // The GPU offset (Kubernetes assigns the GPUs) and the RDMA devices' variable
        // (`"${IB_DEVICES}"` in a shell, `$(IB_DEVICES)` in a pod) differ by design; the
        // environment is the container's `env`, not words.
        let mut out = Vec::new();
        let mut skip = false;
        for w in words
            .into_iter()
            .skip_while(|w| w.contains('=') && !w.starts_with("--"))
        {
            if skip {
                skip = false;
                continue;
            }
            if ["--base-gpu-id", "--disaggregation-ib-device"].contains(&w.as_str()) {
                skip = true;
                continue;
            }
            out.push(w);
        }
        out
    };
    for role in ["prefill", "decode"] {
        let n: u32 = best[&format!("pools.{role}.instances")].parse().unwrap();
        let tp = &best[&format!("pools.{role}.server.tp_size")];
        let mine: Vec<&&str> = lws
            .iter()
            .filter(|d| d.contains(&format!("pdsim.io/role: \"{role}\"")))
            .collect();
        let replicas: u32 = mine
            .iter()
            .map(|d| {
                let l = d.lines().find(|l| l.starts_with("  replicas: ")).unwrap();
                l["  replicas: ".len()..].parse::<u32>().unwrap()
            })
            .sum();
        assert_eq!(replicas, n, "{role}: replicas add up to the instances");
        for doc in &mine {
            assert!(doc.contains("    size: 1\n"), "TP {tp} fits a node: {doc}");
            assert!(doc.contains(&format!("nvidia.com/gpu: \"{tp}\"")), "{doc}");
            assert!(doc.contains("hostNetwork: true") && doc.contains("privileged: true"));
            assert!(
                doc.contains("path: \"/health\""),
                "probed on /health: {doc}"
            );
            // The launch line with this LWS's port is its command.
            let cmd = command(doc);
            let port = &cmd[cmd.iter().position(|w| w == "--port").unwrap() + 1];
            let line = lines
                .iter()
                .find(|l| {
                    l.contains(&format!("--disaggregation-mode {role}"))
                        && l.contains(&format!("--port {port} "))
                })
                .unwrap();
            let words: Vec<String> = line.split_whitespace().map(String::from).collect();
            assert_eq!(
                strip(cmd),
                strip(words),
                "{role}: the launch line's arguments"
            );
        }
    }
    let router = command(docs[n - 2]);
    let prefill = router.iter().filter(|w| *w == "--prefill").count();
    let decode = router.iter().filter(|w| *w == "--decode").count();
    assert_eq!(prefill.to_string(), best["pools.prefill.instances"]);
    assert_eq!(decode.to_string(), best["pools.decode.instances"]);
    // Every URL names a leader pod of an LWS above (`x-g.x`) on that LWS's port: here the two
    // decodes sharing a node in launch.txt are two LWS, on ports 30000 and 30001.
    for url in router.iter().filter(|w| w.starts_with("http://")) {
        let (host, port) = url["http://".len()..].split_once(':').unwrap();
        let (pod, lws_name) = host.split_once('.').unwrap();
        let doc = lws
            .iter()
            .find(|d| d.contains(&format!("  name: \"{lws_name}\"\n")))
            .unwrap_or_else(|| panic!("{url}: no LWS {lws_name}"));
        assert!(pod.starts_with(&format!("{lws_name}-")), "{url}");
        assert!(doc.contains(&format!("containerPort: {port}\n")), "{url}");
    }
    assert!(
        router.contains(
            &"http://llama70b-azure-conv-decode-1-0.llama70b-azure-conv-decode-1:30001".to_string()
        ),
        "{router:?}"
    );
    let line = lines.last().unwrap();
    assert!(
        line.ends_with(router.last().unwrap()),
        "the same policy: {line}"
    );
    // The Slurm script parses.
    let st = std::process::Command::new("bash")
        .arg("-n")
        .arg(d.join("slurm.sh"))
        .status()
        .unwrap();
    assert!(st.success());
}

/// A grid of whole deployments: one PD pair (1P + 1D at TP 1, 2 GPUs) and 1, 2 or 3 colocated
/// TP 1 servers, as one `--vary pools=…` axis.
const PD_OR_NOT: &str = "pools=\
[{name=\"prefill\",role=\"prefill\",instances=1,server={tp_size=1,page_size=64}},{name=\"decode\",role=\"decode\",instances=1,server={tp_size=1,page_size=64}}],\
[{name=\"servers\",role=\"colocated\",instances=1,server={tp_size=1,page_size=64}}],\
[{name=\"servers\",role=\"colocated\",instances=2,server={tp_size=1,page_size=64}}],\
[{name=\"servers\",role=\"colocated\",instances=3,server={tp_size=1,page_size=64}}]";

/// Plans the PD-or-not grid at 4 req/s under `slo`; returns plan.json, stdout and the report.
fn pd_or_not_plan(o: &Path, slo: &str, extra: &[&str]) -> (serde_json::Value, String, String) {
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "4",
        "--seeds",
        "1",
        "--out",
        o.to_str().unwrap(),
        "--set",
        slo,
        "--vary",
        PD_OR_NOT,
    ];
    args.extend(SHORT);
    args.extend(extra);
    let out = ok(&args);
    let plan: serde_json::Value = serde_json::from_slice(&bytes(o, "plan.json")).unwrap();
    let html = String::from_utf8(bytes(o, "index.html")).unwrap();
    (plan, out, html)
}

/// Issue 43 item 5: on a grid of PD and colocated points the plan says which wins, what the
/// best point of the other kind costs at the same `[slo]` (or that none meets it) and why —
/// the same answer the full grid gives, from a search that runs the other kind to its own
/// answer. With TTFT and TPOT targets one colocated GPU serves 4 req/s and PD needs two; with
/// a tail on each request's worst gap (TBT) the colocated servers' forwards that mix prefill
/// chunks into decoding miss it on every point, and the PD pair (whose decode steps carry no
/// prefill) meets it.
#[test]
fn the_plan_says_pd_or_not_and_prices_the_other_kind() {
    let d = tmpdir("pd-or-not");
    // Colocated wins.
    let (plan, out, html) = pd_or_not_plan(
        &d.join("colo"),
        "slo={ttft_p99_ms=1000, tpot_p99_ms=100}",
        &[],
    );
    let pd = &plan["pd_or_not"];
    assert_eq!(pd["answer"], "colocated", "{pd}");
    assert_eq!(plan["best"]["point"], 1, "one colocated GPU");
    assert_eq!(
        (&pd["best_colocated"], &pd["best_disaggregated"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "the PD pair is the best disaggregated point: {pd}"
    );
    let why = pd["why"].as_str().unwrap();
    assert!(
        why.starts_with(
            "PD or not: colocated. The cheapest point meeting [slo], 1C·tp1 (1 GPU billed)"
        ) && why.contains(
            "the best disaggregated point, 1P·tp1 1D·tp1, costs 2 GPUs billed at the same [slo]"
        ) && why.contains("no disaggregated point on the grid costs as little"),
        "{why}"
    );
    assert!(out.contains(why), "the CLI says it: {out}");
    assert!(
        html.contains("<b>PD or not: colocated.</b>"),
        "the report says it"
    );
    // PD wins: no colocated point holds a 100 ms tail on each request's worst gap.
    let (plan, out, html) =
        pd_or_not_plan(&d.join("pd"), "slo={ttft_p99_ms=1000, tbt_p99_ms=100}", &[]);
    let pd = &plan["pd_or_not"];
    assert_eq!(pd["answer"], "disaggregated", "{pd}");
    assert_eq!(plan["best"]["point"], 0);
    assert!(pd["best_colocated"].is_null(), "{pd}");
    let why = pd["why"].as_str().unwrap();
    assert!(
        why.contains("no colocated point meets [slo] (3 of them ran)")
            && why.contains("every colocated point that costs no more misses [slo]")
            && why.contains("misses tbt_p99_ms")
            && why.contains("the decode phase"),
        "{why}"
    );
    assert!(out.contains("PD or not: disaggregated."), "{out}");
    assert!(html.contains("<b>PD or not: disaggregated.</b>"));
    // The search's answer is the full grid's, on both kinds, every run to its end (the TBT
    // target's early stop is exact).
    let (full, ..) = pd_or_not_plan(
        &d.join("pd-full"),
        "slo={ttft_p99_ms=1000, tbt_p99_ms=100}",
        &["--full-grid", "--no-early-stop"],
    );
    assert_eq!(full["pd_or_not"], plan["pd_or_not"]);
    assert_eq!(full["points_meeting_slo"], 1);
    // A grid of one kind says nothing of it.
    let o = d.join("pd-only");
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "4",
        "--seeds",
        "1",
        "--out",
        o.to_str().unwrap(),
        "--vary",
        "pools.decode.instances=1,2",
    ];
    args.extend(SHORT);
    let out = ok(&args);
    let plan: serde_json::Value = serde_json::from_slice(&bytes(&o, "plan.json")).unwrap();
    assert!(plan.get("pd_or_not").is_none() && !out.contains("PD or not"));
}

/// Issue 40: a sweep's rows conserve requests with every outcome — `sweep.csv` has an
/// `aborted` column, so a row of a run whose clients disconnected no longer reads "arrived
/// 200, completed 8" and nothing else.
#[test]
fn every_sweep_row_conserves_requests_aborts_included() {
    let out = tmpdir("sweep-aborted-conserves");
    let o = out.to_str().unwrap();
    let mut args = vec!["sweep", "scenarios/quickstart.toml", "--out", o, "-q"];
    args.extend(SHORT);
    args.extend([
        "--set",
        "workload.client_timeout={ s = 0.5 }",
        "--vary",
        "workload.arrival.rate_per_s=4,40",
    ]);
    ok(&args);
    let rows = read_csv(&out.join("sweep.csv"));
    assert_eq!(rows.len(), 2);
    let n = |r: &BTreeMap<String, String>, k: &str| -> u64 {
        r.get(k)
            .unwrap_or_else(|| panic!("sweep.csv has no column {k}"))
            .parse()
            .unwrap_or_else(|e| panic!("{k}: {e}"))
    };
    let mut aborted = 0;
    for r in &rows {
        let parts = ["completed", "failed", "corrupted", "unfinished", "aborted"];
        let sum: u64 = parts.iter().map(|k| n(r, k)).sum();
        assert_eq!(n(r, "arrived"), sum, "row does not conserve: {r:?}");
        aborted += n(r, "aborted");
    }
    assert!(aborted > 0, "the grid aborts requests: {rows:?}");
}

/// Issue 40: `deploy/run-shard.sh` passes a quoted `VARY` (or `SETS`) value holding spaces as
/// one argument (it word-split it on every space), and never runs what the value holds.
#[test]
fn run_shard_keeps_a_quoted_vary_value_whole() {
    let d = tmpdir("run-shard-quoting");
    let stub = d.join("stub.sh");
    std::fs::write(
        &stub,
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n",
    )
    .unwrap();
    std::process::Command::new("chmod")
        .args(["+x", stub.to_str().unwrap()])
        .status()
        .unwrap();
    let canary = d.join("ran");
    let out = std::process::Command::new("bash")
        .arg(repo().join("deploy/run-shard.sh"))
        .env("SHARD_INDEX", "1")
        .env("SHARDS", "2")
        .env("SCENARIO", "x.toml")
        .env("OUT", &d)
        .env("PDSIM", &stub)
        .env(
            "VARY",
            format!(
                "'workload.arrival={{ process = \"poisson\", rate_per_s = 4 }}' pools.decode.instances=1,2 '$(touch {})'",
                canary.display()
            ),
        )
        .env("SETS", "run.duration_s=5 \"run.name='a b'\"")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let args: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let after = |flag: &str| -> Vec<&str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    };
    assert_eq!(
        after("--vary"),
        [
            "workload.arrival={ process = \"poisson\", rate_per_s = 4 }",
            "pools.decode.instances=1,2",
            &format!("$(touch {})", canary.display()),
        ],
        "{args:?}"
    );
    assert_eq!(after("--set"), ["run.duration_s=5", "run.name='a b'"]);
    assert!(!canary.exists(), "a value is never run");
}

/// A plan whose grid holds no point meeting `[slo]` writes every file, names the point that
/// came closest in `plan.json` and on its line, and exits 1 (a negative verdict); one with an
/// answer has no `closest`.
#[test]
fn a_plan_with_no_answer_names_the_closest_point_and_exits_1() {
    let dir = common::tmpdir("plan-closest");
    let plan = |ttft: &str| {
        common::pdsim(&[
            "plan",
            "scenarios/quickstart.toml",
            "--rate",
            "10",
            "--vary",
            "pools.decode.instances=1,2",
            "--seeds",
            "2",
            "--set",
            "run.duration_s=20",
            "--set",
            &format!("slo.ttft_p99_ms={ttft}"),
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let (code, out, err) = plan("20");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("closest: pools.decode.instances="), "{out}");
    assert!(err.contains("no grid point meets [slo]"), "{err}");
    let answer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
    assert!(answer["best"].is_null());
    assert!(answer["closest"]["values"].is_array(), "{answer}");
    assert!(dir.join("sweep.csv").is_file());
    let (code, _, err) = plan("5000");
    assert_eq!(code, 0, "{err}");
    let answer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
    assert!(
        answer["best"].is_object() && answer.get("closest").is_none(),
        "{answer}"
    );
}

/// Issue 41: a linked `--vary` moves its keys as one — a plan over decode TP × instances
/// tuples runs only the tuples (not their cross product), writes a column per key, names the
/// answer by every key, and resumes from its own `sweep.json` to the same bytes.
#[test]
fn a_linked_vary_plans_its_tuples_and_resumes() {
    let out = tmpdir("plan-linked");
    let o = out.to_str().unwrap();
    let linked = "pools.decode.server.tp_size,pools.decode.instances=(1,4),(2,2),(4,1)";
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "8",
        "--vary",
        linked,
        "--vary",
        "pools.prefill.instances=1,2",
        "--full-grid",
        "--out",
        o,
    ];
    args.extend(SHORT);
    let line = ok(&args);
    assert!(line.contains("pools.decode.server.tp_size="), "{line}");
    let rows = read_csv(&out.join("sweep.csv"));
    assert_eq!(
        rows.len(),
        3 * 2 * 3,
        "3 tuples × 2 × 3 seeds, not 3 × 3 × 2 × 3"
    );
    let pairs: std::collections::BTreeSet<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["pools.decode.server.tp_size"].clone(),
                r["pools.decode.instances"].clone(),
            )
        })
        .collect();
    let want = [("1", "4"), ("2", "2"), ("4", "1")].map(|(a, b)| (a.to_string(), b.to_string()));
    assert_eq!(pairs, want.into_iter().collect());
    let before = std::fs::read(out.join("plan.json")).unwrap();
    args.push("--resume");
    ok(&args);
    assert_eq!(std::fs::read(out.join("plan.json")).unwrap(), before);
    let (code, _, err) = pdsim(&[
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "8",
        "--vary",
        "pools.decode.server.tp_size,pools.decode.instances=(1,4),(2)",
        "--out",
        o,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a tuple of 2 values"), "{err}");
}

/// Issue 41: a plan over a trace replay says what its seeds varied. The trace fixes every
/// arrival and length: with a `round_robin` router nothing else is drawn, so its seeds are one
/// run (`trace_seeds.differ` false, "one trace, one run"); a `random` router draws its picks from
/// the seed, so they differ. A synthetic workload's plan has no such note.
#[test]
fn a_trace_plan_says_what_its_seeds_varied() {
    let run = |policy: &str| {
        let out = tmpdir(&format!("plan-trace-{policy}"));
        let policy_set = format!("router.policy=\"{policy}\"");
        let line = ok(&[
            "plan",
            "scenarios/trace-azure-code.toml",
            "--rate",
            "0.5",
            "--vary",
            "pools.decode.instances=1,2",
            "--set",
            "workload.trace={ path = \"../traces/AzureLLMInferenceTrace_code.csv\", format = \"azure\", limit = 200 }",
            "--set",
            &policy_set,
            "--set",
            "slo={ttft_ms=20000, tpot_ms=200}",
            "--out",
            out.to_str().unwrap(),
        ]);
        let plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("plan.json")).unwrap()).unwrap();
        (line, plan["trace_seeds"].clone())
    };
    let (line, t) = run("round_robin");
    assert_eq!(t["differ"], false, "{t}");
    assert!(
        line.contains("one trace, one run: its 3 seeds replayed the same run"),
        "{line}"
    );
    let (line, t) = run("random");
    assert_eq!(t["differ"], true, "{t}");
    assert!(
        line.contains("vary only what the run draws at random"),
        "{line}"
    );
    let out = tmpdir("plan-synthetic-seeds");
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "4",
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(SHORT);
    ok(&args);
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("plan.json")).unwrap()).unwrap();
    assert!(plan.get("trace_seeds").is_none(), "{plan}");
}

/// Issue 41: a sweep and a plan count their finished rows on stderr when it is a terminal (run
/// under `script`, which gives them one), and print nothing of it into a pipe or under `-q`.
#[test]
fn sweep_and_plan_show_progress_on_a_terminal_only() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` (util-linux) to give the command a terminal");
        return;
    }
    let bin = env!("CARGO_BIN_EXE_pdsim");
    let on_tty = |args: &str| {
        let out = std::process::Command::new("script")
            .args(["-qec", &format!("{bin} {args}"), "/dev/null"])
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let dir = tmpdir("progress");
    let d = dir.to_str().unwrap();
    let sweep = format!(
        "sweep scenarios/quickstart.toml --vary pools.decode.instances=1,2 --vary workload.arrival.rate_per_s=4,8 --set run.duration_s=8 --out {d}/sweep"
    );
    let shown = on_tty(&sweep);
    assert!(shown.contains("sweep: 0/4 rows"), "{shown}");
    assert!(shown.contains("sweep: 4/4 rows"), "{shown}");
    let plan = format!(
        "plan scenarios/quickstart.toml --rate 4 --vary pools.decode.instances=1,2 --set run.duration_s=8 --out {d}/plan"
    );
    let shown = on_tty(&plan);
    assert!(shown.contains("plan: 0/6 runs"), "{shown}");
    let quiet = on_tty(&format!("{sweep} -q"));
    assert!(!quiet.contains("0/4 rows"), "{quiet}");
    // Into a pipe: the summary line alone.
    let (code, out, err) = pdsim(&[
        "sweep",
        "scenarios/quickstart.toml",
        "--vary",
        "pools.decode.instances=1,2",
        "--set",
        "run.duration_s=8",
        "--out",
        &format!("{d}/piped"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("0/2") && !out.contains("0/2"), "{out}{err}");
}

/// Issue 41 item 5: `--model-path` of a model given as a config file is the checkpoint it
/// stands for — the folder of a `config.json` (absolute: the line runs from anywhere), the
/// config's `_name_or_path`, or a shell-safe placeholder with a note saying to replace it —
/// never a path relative to the results folder of a file sglang cannot load.
#[test]
fn a_config_file_model_gets_a_model_path_that_loads() {
    let dir = tmpdir("launch-model-path");
    let ckpt = dir.join("my-13b");
    std::fs::create_dir_all(&ckpt).unwrap();
    let cfg = std::fs::read_to_string(repo().join("scenarios/published/llama-2-13b.config.json"))
        .unwrap();
    std::fs::write(ckpt.join("config.json"), &cfg).unwrap();
    let named = cfg.replacen(
        '{',
        "{\n  \"_name_or_path\": \"meta-llama/Llama-2-13b-hf\",",
        1,
    );
    std::fs::write(dir.join("named.config.json"), named).unwrap();
    let plan_with = |config: &str, out: &str| -> String {
        let o = dir.join(out);
        let model = format!("model={{ config = \"{config}\" }}");
        let mut args = vec![
            "plan",
            "scenarios/quickstart.toml",
            "--rate",
            "4",
            "--vary",
            "pools.decode.instances=1,2",
            "--set",
            &model,
            "--out",
            o.to_str().unwrap(),
        ];
        args.extend(SHORT);
        ok(&args);
        std::fs::read_to_string(o.join("launch.txt")).unwrap()
    };
    let abs = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
    let text = plan_with(&format!("{}/config.json", abs(&ckpt)), "folder");
    assert!(
        text.contains(&format!("--model-path {} ", abs(&ckpt))),
        "{text}"
    );
    let text = plan_with(&format!("{}/named.config.json", abs(&dir)), "named");
    assert!(
        text.contains("--model-path meta-llama/Llama-2-13b-hf "),
        "{text}"
    );
    let text = plan_with("published/llama-2-13b.config.json", "bare");
    assert!(
        text.contains("--model-path CHECKPOINT_OF_llama-2-13b.config.json "),
        "{text}"
    );
    assert_eq!(
        text.matches("replace CHECKPOINT_OF_llama-2-13b.config.json with yours")
            .count(),
        1,
        "one note: {text}"
    );
    assert!(
        !text.contains(".."),
        "no path relative to the results: {text}"
    );
    // Every server line says the node it runs on, as the router's URLs name them.
    let servers = text.matches("python -m sglang.launch_server").count();
    let placed = text.matches(":\npython -m sglang.launch_server").count();
    assert_eq!((servers, placed), (3, 3), "{text}");
    assert!(
        text.contains("# on node0:\npython -m sglang.launch_server"),
        "{text}"
    );
}

/// Issue 41 item 1: the planner in one line. From the model, the GPU, the lengths, the two
/// per-request targets and the rate, `plan` builds the scenario and a grid of disaggregated and
/// colocated deployments (of at most `--gpus` GPUs, only those that validate), answers with the
/// cheapest and says PD or not, and writes the scenario it used; a MoE model's deployments move
/// DP attention and EP with TP. Bad flags are exit 2 naming the flag.
#[test]
fn the_planner_answers_in_one_line() {
    let dir = tmpdir("one-line");
    let o = dir.join("70b");
    let line = ok(&[
        "plan",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "1024",
        "--osl",
        "256",
        "--ttft",
        "500",
        "--tpot",
        "30",
        "--rate",
        "20",
        "--gpus",
        "16",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert!(
        line.contains("cheapest point meeting [slo] at 20 req/s"),
        "{line}"
    );
    assert!(line.contains("PD or not:"), "{line}");
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(o.join("plan.json")).unwrap()).unwrap();
    assert!(plan["best"]["gpus"].as_u64().unwrap() <= 16, "{plan}");
    assert!(
        plan["pd_or_not"].is_object(),
        "both kinds on the grid: {plan}"
    );
    // The grid holds no deployment that cannot launch: 70B at TP 1 does not fit an H100.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(o.join("sweep.json")).unwrap()).unwrap();
    let values = m["grid"]["axes"][0]["values"].as_array().unwrap();
    assert!(
        values
            .iter()
            .all(|v| !v.as_str().unwrap().contains("tp_size=1}"))
    );
    assert!(
        values
            .iter()
            .any(|v| v.as_str().unwrap().contains("colocated"))
    );
    // The scenario it used runs on its own.
    let scenario = o.join("scenario.toml");
    let (code, _, err) = pdsim(&[
        "run",
        scenario.to_str().unwrap(),
        "--summary-only",
        "-q",
        "--out",
        dir.join("rerun").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // A MoE model: DP attention and expert parallelism with TP.
    let o = dir.join("ds");
    ok(&[
        "plan",
        "--model",
        "deepseek-ai/DeepSeek-V3",
        "--gpu",
        "h200",
        "--isl",
        "2000",
        "--osl",
        "200",
        "--ttft",
        "2000",
        "--tpot",
        "80",
        "--rate",
        "20",
        "--gpus",
        "16",
        "--out",
        o.to_str().unwrap(),
    ]);
    let best = std::fs::read_to_string(o.join("best.toml")).unwrap();
    assert!(
        best.contains("enable_dp_attention=true") && best.contains("ep_size="),
        "{best}"
    );
    // Without --rate: what the GPUs serve at most — each deployment's highest rate, the
    // highest marked.
    let o = dir.join("gpus");
    let line = ok(&[
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "512",
        "--osl",
        "128",
        "--ttft",
        "500",
        "--tpot",
        "30",
        "--gpus",
        "2",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert!(line.contains("← the highest rate"), "{line}");
    let plan: serde_json::Value =
        serde_json::from_slice(&std::fs::read(o.join("plan.json")).unwrap()).unwrap();
    let rates: Vec<f64> = plan["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["max_rate_per_s"].as_f64().unwrap_or(0.0))
        .collect();
    let top = rates.iter().copied().fold(0.0, f64::max);
    let at = plan["most_rate"].as_u64().unwrap() as usize;
    assert_eq!(rates[at], top, "{rates:?}");
    assert!(rates.len() >= 4, "PD and colocated deployments: {rates:?}");
    for (flag, bad) in [
        ("--model", "gpt-9"),
        ("--gpu", "h1000"),
        ("--isl", "0"),
        ("--tpot", "0"),
        ("--gpus", "0"),
    ] {
        let mut args = vec![
            "plan",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--isl",
            "128",
            "--osl",
            "128",
            "--ttft",
            "500",
            "--tpot",
            "50",
            "--rate",
            "4",
        ];
        let at = args.iter().position(|a| *a == flag).map(|i| i + 1);
        match at {
            Some(i) => args[i] = bad,
            None => args.extend([flag, bad]),
        }
        let (code, _, err) = pdsim(&args);
        assert_eq!(code, 2, "{flag} {bad}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
    }
    let (code, _, err) = pdsim(&[
        "plan",
        "scenarios/quickstart.toml",
        "--model",
        "llama-3.1-8b",
        "--rate",
        "4",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// `scenario.toml` is a plan's result file like the others (`SWEEP_FILES`): a later plan into
/// the folder of a one-line plan removes the one-line plan's scenario, which no longer
/// describes what the folder holds — unless that scenario is the very file the later plan
/// reads, which stays. The one-line plan's folder also holds `slurm.sh`.
#[test]
fn a_later_plan_into_the_folder_leaves_no_stale_scenario() {
    let d = tmpdir("plan-stale-scenario");
    let one = d.join("one");
    let one_line = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "512",
        "--osl",
        "64",
        "--ttft",
        "2000",
        "--tpot",
        "100",
        "--rate",
        "2",
        "--gpus",
        "2",
        "-q",
        "--out",
    ];
    let mut args = one_line.to_vec();
    args.push(one.to_str().unwrap());
    ok(&args);
    assert!(one.join("scenario.toml").is_file() && one.join("slurm.sh").is_file());
    // Its own scenario planned again into the same folder: kept.
    let own = one.join("scenario.toml");
    let before = std::fs::read(&own).unwrap();
    ok(&[
        "plan",
        own.to_str().unwrap(),
        "--rate",
        "2",
        "--vary",
        "pools=[{name=\"servers\",role=\"colocated\",instances=1,server={tp_size=1}}]",
        "-q",
        "--out",
        one.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(&own).unwrap(),
        before,
        "the plan's input is kept"
    );
    // Another scenario planned into it: the stale scenario.toml is gone.
    let mut args = vec![
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "4",
        "--vary",
        "pools.decode.instances=1,2",
        "--out",
        one.to_str().unwrap(),
    ];
    args.extend(SHORT);
    ok(&args);
    assert!(
        !own.exists(),
        "a stale scenario.toml is left beside the new plan"
    );
    assert!(one.join("launch.txt").is_file() && one.join("slurm.sh").is_file());
}
