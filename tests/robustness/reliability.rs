//! Issue 25: nothing lost, nothing mixed up. Each class of the issue's reproducers is pinned
//! here: locked and staged output folders, killed and interrupted sweeps that resume to the
//! uninterrupted bytes, merges that verify rows and input files, plans that answer the
//! question asked, bounds stated in the error, outputs that never overwrite inputs, and
//! results read back only when they are pdsim's.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{pdsim, repo, tmpdir};

const QUICK: &str = "scenarios/quickstart.toml";

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn expect_code(args: &[&str], code: i32, needles: &[&str]) -> String {
    let (c, out, err) = pdsim(args);
    assert_eq!(c, code, "pdsim {args:?}\nstdout: {out}\nstderr: {err}");
    for n in needles {
        assert!(
            err.contains(n),
            "pdsim {args:?}: stderr should name {n:?}:\n{err}"
        );
    }
    err
}

fn files_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rd: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    rd.sort();
    for p in rd {
        if p.is_file() {
            out.push((
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// 1. Atomic, locked outputs
// ---------------------------------------------------------------------------------------------

#[test]
fn a_second_writer_of_one_folder_fails_with_exit_3_naming_the_holder() {
    let d = tmpdir("rel-busy");
    let held = pdsim::app::outdir::OutDir::open(&d, "sweep", &[], false).unwrap();
    let err = expect_code(
        &[
            "run",
            QUICK,
            "--set",
            "run.duration_s=1",
            "--out",
            &s(&d),
            "-q",
        ],
        3,
        &[&s(&d), "another pdsim is writing", "pdsim sweep", "pid"],
    );
    assert!(!d.join("summary.json").exists(), "{err}");
    drop(held);
    expect_code(
        &[
            "run",
            QUICK,
            "--set",
            "run.duration_s=1",
            "--out",
            &s(&d),
            "-q",
        ],
        0,
        &[],
    );
    assert!(d.join("summary.json").is_file());
    assert!(!d.join(".pdsim-lock").exists() && !d.join(".pdsim-partial").exists());
}

#[test]
fn concurrent_runs_into_one_folder_never_mix_their_files() {
    // The issue's reproducer: two runs of different sizes into one folder both exited 0 and
    // left one's summary beside the other's rows. Now one wins and the other is refused.
    let d = tmpdir("rel-race");
    let spawn = |rate: &str| {
        Command::new(env!("CARGO_BIN_EXE_pdsim"))
            .args(["run", QUICK, "--set", "run.duration_s=3", "--set"])
            .arg(format!("workload.arrival.rate_per_s={rate}"))
            .args(["--out", &s(&d), "-q"])
            .current_dir(repo())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    for _ in 0..3 {
        let (a, b) = (spawn("2.0"), spawn("20.0"));
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        let codes = [a.status.code(), b.status.code()];
        assert!(codes.iter().all(|c| matches!(c, Some(0 | 3))), "{codes:?}");
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join("summary.json")).unwrap()).unwrap();
        let rows = std::fs::read_to_string(d.join("requests.csv"))
            .unwrap()
            .lines()
            .count()
            - 1;
        assert_eq!(
            summary["requests"]["arrived"].as_u64().unwrap() as usize,
            rows,
            "summary.json and requests.csv are of one run"
        );
    }
}

#[test]
fn a_stale_lock_of_a_killed_writer_is_explained_and_taken_over() {
    let d = tmpdir("rel-stale");
    std::fs::write(
        d.join(".pdsim-lock"),
        "pid 999999 on elsewhere: pdsim run\n",
    )
    .unwrap();
    std::fs::create_dir_all(d.join(".pdsim-partial")).unwrap();
    std::fs::write(d.join(".pdsim-partial/requests.csv"), "id,arr").unwrap();
    // A reader refuses the folder meanwhile.
    expect_code(&["explain", &s(&d)], 2, &["incomplete", "pid 999999"]);
    expect_code(
        &[
            "run",
            QUICK,
            "--set",
            "run.duration_s=1",
            "--out",
            &s(&d),
            "-q",
        ],
        0,
        &["pid 999999", "stopped before finishing"],
    );
    assert!(!d.join(".pdsim-partial").exists());
    expect_code(&["explain", &s(&d)], 0, &[]);
}

#[test]
fn a_killed_run_leaves_no_half_file_in_the_folder() {
    let d = tmpdir("rel-killrun");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args([
            "run",
            QUICK,
            "--set",
            "run.duration_s=100000",
            "--out",
            &s(&d),
            "-q",
        ])
        .current_dir(repo())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !d.join(".pdsim-partial/requests.csv").exists()
        && start.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run must still be running when it is killed"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    for f in ["requests.csv", "summary.json", "timeseries.csv"] {
        assert!(
            !d.join(f).exists(),
            "{f} appeared in the folder of a killed run"
        );
    }
    assert!(
        d.join(".pdsim-lock").exists(),
        "the lock file marks the folder unfinished"
    );
    expect_code(&["explain", &s(&d)], 2, &["incomplete"]);
}

// ---------------------------------------------------------------------------------------------
// 2. Resumable sweeps and plans
// ---------------------------------------------------------------------------------------------

const SWEEP: [&str; 12] = [
    "--set",
    "run.duration_s=10",
    "--set",
    "run.drain_timeout_s=60",
    "--vary",
    "pools.decode.instances=1,2",
    "--vary",
    "workload.arrival.rate_per_s=4,8,12",
    "--seeds",
    "2",
    "--jobs",
    "1",
];

fn sweep_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec!["sweep", QUICK, "--out", out, "-q"];
    a.extend(SWEEP);
    a.extend(extra);
    a
}

/// Starts a sweep and stops it with `signal` once `points` rows are durable.
fn interrupt(args: &[&str], out: &Path, points: usize, signal: &str) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(args)
        .current_dir(repo())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pts = out.join(".pdsim-partial/.points");
    let start = Instant::now();
    loop {
        let n = std::fs::read_dir(&pts)
            .map(|r| {
                r.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "csv"))
                })
                .count()
            })
            .unwrap_or(0);
        // A child that already ended (a grid faster than the polling) is not waited for.
        let ended = child.try_wait().is_ok_and(|s| s.is_some());
        if n >= points || ended || start.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    child.wait_with_output().unwrap()
}

#[test]
fn a_killed_sweep_resumes_to_the_uninterrupted_bytes() {
    let d = tmpdir("rel-resume");
    let whole = d.join("whole");
    expect_code(&sweep_args(&s(&whole), &[]), 0, &[]);
    let cut = d.join("cut");
    let o = interrupt(&sweep_args(&s(&cut), &[]), &cut, 3, "-KILL");
    assert!(!o.status.success());
    assert!(
        !cut.join("sweep.csv").exists(),
        "a killed sweep shows no result"
    );
    expect_code(
        &["merge", &s(&cut), "--out", &s(&d.join("m"))],
        2,
        &["incomplete"],
    );
    let err = expect_code(&sweep_args(&s(&cut), &["--resume"]), 0, &["resuming"]);
    assert!(err.contains("rows already finished"), "{err}");
    assert_eq!(files_of(&whole), files_of(&cut));
    // --resume of a different sweep in that folder is refused, not mixed in.
    let other = d.join("other");
    let _ = interrupt(&sweep_args(&s(&other), &[]), &other, 2, "-KILL");
    let other_s = s(&other);
    let mut a = sweep_args(&other_s, &["--resume"]);
    a.extend(["--set", "slo.ttft_p99_ms=1"]);
    expect_code(&a, 2, &["--resume", "other inputs"]);
}

/// A killed sweep over a linked `--vary` (issue 41) reads its finished points back — a column
/// per linked key — instead of running them again, and ends with the uninterrupted bytes.
#[test]
fn a_killed_linked_sweep_resumes_its_points() {
    let d = tmpdir("rel-resume-linked");
    let args = |out: &str, extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "sweep",
            QUICK,
            "--out",
            out,
            "-q",
            "--jobs",
            "1",
            "--set",
            "run.duration_s=100",
            "--vary",
            "pools.decode.server.tp_size,pools.decode.instances=(1,4),(2,2),(4,1)",
            "--vary",
            "workload.arrival.rate_per_s=4,8",
        ]
        .map(String::from)
        .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let whole = d.join("whole");
    let a = args(&s(&whole), &[]);
    expect_code(&a.iter().map(String::as_str).collect::<Vec<_>>(), 0, &[]);
    let cut = d.join("cut");
    let a = args(&s(&cut), &[]);
    let _ = interrupt(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &cut,
        3,
        "-KILL",
    );
    let a = args(&s(&cut), &["--resume"]);
    let err = expect_code(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        0,
        &["resuming"],
    );
    assert!(!err.contains("damaged"), "{err}");
    assert!(err.contains("rows already finished"), "{err}");
    assert_eq!(files_of(&whole), files_of(&cut));
}

#[test]
fn sigint_and_sigterm_stop_a_sweep_and_print_the_resume_line() {
    let d = tmpdir("rel-sigint");
    let whole = d.join("whole");
    expect_code(&sweep_args(&s(&whole), &["--shard", "1/2"]), 0, &[]);
    for sig in ["-INT", "-TERM"] {
        let cut = d.join(format!("cut{sig}"));
        let o = interrupt(&sweep_args(&s(&cut), &["--shard", "1/2"]), &cut, 1, sig);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(if sig == "-INT" { 130 } else { 143 }),
            "{err}"
        );
        assert!(
            err.contains("interrupted") && err.contains("--resume"),
            "{err}"
        );
        // The shard resumes on its own.
        expect_code(
            &sweep_args(&s(&cut), &["--shard", "1/2", "--resume"]),
            0,
            &[],
        );
        assert_eq!(files_of(&whole), files_of(&cut));
    }
}

#[test]
fn a_killed_plan_resumes_to_the_same_answer() {
    let d = tmpdir("rel-plan-resume");
    let args = |out: &str, extra: &[&'static str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "plan",
            QUICK,
            "--rate",
            "8",
            "--seeds",
            "2",
            "--jobs",
            "1",
            "--set",
            "run.duration_s=100",
            "--set",
            "slo.ttft_p99_ms=600",
            "--vary",
            "pools.decode.instances=1,2,3",
            // Every point runs: the kill after two leaves four to resume.
            "--full-grid",
            "--out",
            out,
            "-q",
        ]
        .map(String::from)
        .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let whole = d.join("whole");
    let (c, _, e) = pdsim(&args(&s(&whole), &[]));
    assert_eq!(c, 0, "{e}");
    let cut = d.join("cut");
    let a = args(&s(&cut), &[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = interrupt(&a, &cut, 2, "-KILL");
    assert!(!o.status.success(), "the plan was killed before its end");
    let (c, _, e) = pdsim(&args(&s(&cut), &["--resume"]));
    assert_eq!(c, 0, "{e}");
    assert!(e.contains("resuming"), "{e}");
    assert_eq!(files_of(&whole), files_of(&cut));
}

// ---------------------------------------------------------------------------------------------
// 3. Merges that verify
// ---------------------------------------------------------------------------------------------

fn shards(d: &Path, extra: &[&str]) -> (PathBuf, PathBuf) {
    let (a, b) = (d.join("s0"), d.join("s1"));
    for (i, o) in [(0, &a), (1, &b)] {
        let sh = format!("{i}/2");
        let os = s(o);
        let mut args = sweep_args(&os, &["--shard", &sh]);
        args.extend(extra);
        let (c, _, e) = pdsim(&args);
        assert_eq!(c, 0, "{e}");
    }
    (a, b)
}

#[test]
fn merge_refuses_rows_filed_under_another_point() {
    let d = tmpdir("rel-swap");
    let (a, b) = shards(&d, &[]);
    let csv = a.join("sweep.csv");
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(1, 2);
    std::fs::write(&csv, lines.join("\n") + "\n").unwrap();
    expect_code(
        &["merge", &s(&a), &s(&b), "--out", &s(&d.join("m"))],
        2,
        &["sweep.csv", "line 2", "out of order"],
    );
    // A shard cut mid-line.
    std::fs::write(&csv, &text[..text.len() - 40]).unwrap();
    expect_code(
        &["merge", &s(&a), &s(&b), "--out", &s(&d.join("m"))],
        2,
        &["sweep.csv"],
    );
}

#[test]
fn merge_refuses_shards_of_one_text_beside_different_files() {
    let d = tmpdir("rel-inputs");
    let src = repo().join("scenarios/calibration");
    let (x, y) = (d.join("x"), d.join("y"));
    for dir in [&x, &y] {
        std::fs::create_dir_all(dir).unwrap();
        for f in ["mooncake-1p1d.toml", "mooncake-1p1d.csv"] {
            std::fs::copy(src.join(f), dir.join(f)).unwrap();
        }
    }
    let trace = y.join("mooncake-1p1d.csv");
    let t = std::fs::read_to_string(&trace)
        .unwrap()
        .replacen("0,128,128", "0,129,128", 1);
    std::fs::write(&trace, t).unwrap();
    for (i, dir) in [(0, &x), (1, &y)] {
        let sh = format!("{i}/2");
        let out = s(&dir.join("out"));
        let sc = s(&dir.join("mooncake-1p1d.toml"));
        let args = [
            "sweep",
            &sc,
            "--vary",
            "pools.decode.instances=1,2",
            "--set",
            "run.duration_s=20",
            "--shard",
            &sh,
            "--out",
            &out,
            "-q",
        ];
        let (c, _, e) = pdsim(&args);
        assert_eq!(c, 0, "{e}");
    }
    expect_code(
        &[
            "merge",
            &s(&x.join("out")),
            &s(&y.join("out")),
            "--out",
            &s(&d.join("m")),
        ],
        2,
        &["files the scenario reads", "mooncake-1p1d.csv"],
    );
}

#[test]
fn a_hand_edited_sweep_json_is_exit_2_naming_the_field() {
    let d = tmpdir("rel-json");
    let (a, b) = shards(&d, &[]);
    let path = a.join("sweep.json");
    let orig: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let edits: [(&str, serde_json::Value, &str); 6] = [
        ("/rows", serde_json::json!(18446744073709551615u64), "rows"),
        ("/shard/index", serde_json::json!(7), "shard"),
        ("/shard/count", serde_json::json!(0), "shard"),
        ("/grid/seeds", serde_json::json!([]), "grid"),
        ("/grid/axes/0/values", serde_json::json!([]), "grid.axes[0]"),
        ("/scenario_fnv", serde_json::json!(12), "scenario_fnv"),
    ];
    for (ptr, v, field) in edits {
        let mut m = orig.clone();
        *m.pointer_mut(ptr).unwrap() = v;
        std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
        expect_code(
            &["merge", &s(&a), &s(&b), "--out", &s(&d.join("m"))],
            2,
            &["sweep.json", field],
        );
    }
}

#[test]
fn a_shard_of_only_infeasible_rows_is_written_and_merges() {
    let d = tmpdir("rel-infeasible");
    // Row 1 (the second seed-less point) is infeasible: 0 decode instances.
    let grid = [
        "--vary",
        "pools.decode.instances=1,0",
        "--set",
        "run.duration_s=5",
    ];
    let whole = d.join("whole");
    let mut a = vec![
        "sweep",
        QUICK,
        "--out",
        &*Box::leak(s(&whole).into_boxed_str()),
        "-q",
    ];
    a.extend(grid);
    expect_code(&a, 0, &[]);
    let mut outs = Vec::new();
    for i in 0..2 {
        let o = s(&d.join(format!("s{i}")));
        let sh = format!("{i}/2");
        let mut a = vec!["sweep", QUICK, "--out", &o, "-q", "--shard", &sh];
        a.extend(grid);
        expect_code(&a, 0, &[]);
        outs.push(o);
    }
    assert!(Path::new(&outs[1]).join("sweep.csv").is_file());
    let m = s(&d.join("m"));
    expect_code(&["merge", &outs[0], &outs[1], "--out", &m], 0, &[]);
    assert_eq!(files_of(&whole), files_of(Path::new(&m)));
    // A shard left out: the message names the folders given and which shard is missing.
    expect_code(
        &["merge", &outs[0], "--out", &s(&d.join("m2"))],
        2,
        &["shard 1/2 is missing", &format!("{} (shard 0/2)", outs[0])],
    );
    // The fuzzer's find (seed 2, case 4335): shard 1's last row (the infeasible one) cut
    // inside its `error` text used to read back as a row with a shorter error, and merge
    // exited 0 with it.
    let csv = Path::new(&outs[1]).join("sweep.csv");
    let text = std::fs::read(&csv).unwrap();
    let last = String::from_utf8_lossy(&text)
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert!(
        last.len() > 40 && !last.ends_with(','),
        "an error text: {last}"
    );
    std::fs::write(&csv, &text[..text.len() - 4]).unwrap();
    expect_code(
        &["merge", &outs[0], &outs[1], "--out", &s(&d.join("m3"))],
        2,
        &["sweep.csv", "cut short"],
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Plans consistent with the question
// ---------------------------------------------------------------------------------------------

#[test]
fn plans_answer_the_question_asked() {
    let d = tmpdir("rel-plan");
    let out = s(&d.join("p"));
    expect_code(
        &[
            "plan",
            QUICK,
            "--rate",
            "1000",
            "--vary",
            "workload.arrival.rate_per_s=1,2",
            "--out",
            &out,
        ],
        2,
        &["--vary workload.arrival.rate_per_s", "--rate fixes"],
    );
    expect_code(
        &[
            "plan",
            QUICK,
            "--rate",
            "1000",
            "--vary",
            "workload.arrival={process=\"poisson\",rate_per_s=1}",
            "--out",
            &out,
        ],
        2,
        &["--rate fixes"],
    );
    expect_code(
        &[
            "plan",
            QUICK,
            "--rate",
            "1e19",
            "--vary",
            "pools.decode.instances=1",
            "--out",
            &out,
        ],
        2,
        &["--rate", "workload.arrival.rate_per_s", "at most"],
    );
    // A rate that is a float in any notation parses back.
    assert_eq!(pdsim::plan::search::rate_value(14.0), "14.0");
    assert_eq!(
        "1e19".parse::<f64>().unwrap(),
        pdsim::plan::search::rate_value(1e19)
            .parse::<f64>()
            .unwrap()
    );
    let set: toml::Table =
        toml::from_str(&format!("r = {}", pdsim::plan::search::rate_value(1e19))).unwrap();
    assert_eq!(
        set["r"].as_float(),
        Some(1e19),
        "a float, not an integer TOML cannot hold"
    );
}

#[test]
fn an_unbounded_max_rate_is_reported_as_a_lower_bound() {
    let d = tmpdir("rel-maxrate");
    let out = d.join("m");
    let (c, stdout, e) = pdsim(&[
        "plan",
        QUICK,
        "--max-rate",
        "--seeds",
        "1",
        "--set",
        "run.max_requests=20",
        "--set",
        "run.duration_s=1",
        "--set",
        "slo.ttft_p99_ms=1e12",
        "--vary",
        "pools.decode.instances=1",
        "--out",
        &s(&out),
    ]);
    assert_eq!(c, 0, "{e}");
    let rows = common::read_csv(&out.join("plan.csv"));
    assert_eq!(rows[0]["max_rate_is_lower_bound"], "true", "{rows:?}");
    assert_eq!(rows[0]["fails_at_rate_per_s"], "");
    assert!(
        stdout.contains("≥") && stdout.contains("lower bound"),
        "{stdout}"
    );
}

#[test]
fn best_toml_rewrites_a_calibration_file_path() {
    let d = tmpdir("rel-best");
    let sc_dir = d.join("sc");
    std::fs::create_dir_all(sc_dir.join("cal")).unwrap();
    let cal = sc_dir.join("cal/mine.toml");
    let meas = d.join("m.csv");
    std::fs::write(
        &meas,
        "phase,tokens,batch_size,context_tokens,time_ms\nprefill,1024,1,0,40\nprefill,4096,1,0,150\ndecode,0,1,1024,8\ndecode,0,32,32768,12\n",
    )
    .unwrap();
    expect_code(
        &[
            "calibrate",
            &s(&meas),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--tp",
            "2",
            "--out",
            &s(&cal),
        ],
        0,
        &[],
    );
    let text = std::fs::read_to_string(repo().join(QUICK))
        .unwrap()
        .replace(
            "gpus_per_node = 8",
            "gpus_per_node = 8\ncalibration = \"cal/mine.toml\"",
        );
    let sc = sc_dir.join("q.toml");
    std::fs::write(&sc, text).unwrap();
    let out = d.join("deep/plan");
    expect_code(
        &[
            "plan",
            &s(&sc),
            "--rate",
            "4",
            "--seeds",
            "1",
            "--set",
            "run.duration_s=5",
            "--set",
            "slo.ttft_p99_ms=100000",
            "--vary",
            "pools.decode.instances=1,2",
            "--out",
            &s(&out),
            "-q",
        ],
        0,
        &[],
    );
    let best = std::fs::read_to_string(out.join("best.toml")).unwrap();
    assert!(best.contains("../../sc/cal/mine.toml"), "{best}");
    let st = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["run", "best.toml", "-q", "--summary-only", "--out", "r"])
        .current_dir(&out)
        .status()
        .unwrap();
    assert!(st.success());
}

// ---------------------------------------------------------------------------------------------
// 5. Bounds
// ---------------------------------------------------------------------------------------------

#[test]
fn grids_seeds_and_axes_are_bounded_in_the_error() {
    let out_dir = tmpdir("rel-bounds");
    let out = s(&out_dir.join("o"));
    let mut many = vec!["sweep", QUICK, "--out", &out];
    let axes: Vec<String> = (0..64).map(|i| format!("run.k{i}=1,2")).collect();
    for a in &axes {
        many.extend(["--vary", a]);
    }
    expect_code(&many, 2, &["at most 32"]);
    let mut big = vec!["sweep", QUICK, "--out", &out];
    let axes: Vec<String> = (0..8)
        .map(|i| format!("run.k{i}=1,2,3,4,5,6,7,8"))
        .collect();
    for a in &axes {
        big.extend(["--vary", a]);
    }
    expect_code(&big, 2, &["rows", "at most 1000000"]);
    expect_code(
        &[
            "sweep",
            QUICK,
            "--seeds",
            "4294967295",
            "--vary",
            "pools.decode.instances=1",
            "--out",
            &out,
        ],
        2,
        &["--seeds 4294967295", "1 to 1000000"],
    );
    expect_code(
        &["sweep", QUICK, "--vary", "run.seed=1,2", "--out", &out],
        2,
        &["--vary run.seed", "--seeds"],
    );
    expect_code(
        &[
            "sweep",
            QUICK,
            "--vary",
            "pools.decode.instances=1,2",
            "--vary",
            "pools.1.instances=3",
            "--out",
            &out,
        ],
        2,
        &[
            "pools.decode.instances",
            "pools.1.instances",
            "same setting",
        ],
    );
    expect_code(
        &[
            "sweep",
            QUICK,
            "--vary",
            "workload.arrival.rate_per_s=1,2",
            "--vary",
            "workload.arrival={process=\"poisson\",rate_per_s=3}",
            "--out",
            &out,
        ],
        2,
        &["a table holding the other"],
    );
    expect_code(
        &[
            "sweep",
            QUICK,
            "--vary",
            "pools.decode.instances=1,2",
            "--set",
            "pools.decode.instances=3",
            "--out",
            &out,
        ],
        2,
        &["--set pools.decode.instances"],
    );
    let start = Instant::now();
    expect_code(
        &[
            "lint",
            "--prefill",
            "python -m sglang.launch_server --tp-size 1048576",
            "--decode",
            "python -m sglang.launch_server --tp-size 2",
        ],
        2,
        &["--tp-size 1048576", "65536"],
    );
    assert!(start.elapsed() < Duration::from_secs(5));
}

// ---------------------------------------------------------------------------------------------
// 6. Inputs protected
// ---------------------------------------------------------------------------------------------

#[test]
fn an_output_that_is_an_input_is_exit_2_and_the_input_stays() {
    let d = tmpdir("rel-inputs-protected");
    let x = d.join("x.toml");
    let text =
        std::fs::read_to_string(repo().join("tests/check_fixtures/too-strict.toml")).unwrap();
    std::fs::write(&x, &text).unwrap();
    expect_code(
        &["check", &s(&x), "--junit", &s(&x)],
        2,
        &["--junit", "input"],
    );
    assert_eq!(std::fs::read_to_string(&x).unwrap(), text);
    let m = d.join("m.csv");
    let meas =
        "phase,tokens,batch_size,context_tokens,time_ms\nprefill,1024,1,0,40\ndecode,0,8,8192,9\n";
    std::fs::write(&m, meas).unwrap();
    expect_code(
        &[
            "calibrate",
            &s(&m),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            &s(&m),
        ],
        2,
        &["--out", "measurement"],
    );
    assert_eq!(std::fs::read_to_string(&m).unwrap(), meas);
}

#[test]
fn check_gives_each_scenario_its_own_folder_and_follows_links_once() {
    let d = tmpdir("rel-check");
    let sc = d.join("scs");
    std::fs::create_dir_all(&sc).unwrap();
    let body =
        std::fs::read_to_string(repo().join(QUICK)).unwrap() + "\n[expect]\ncompleted_min = 1\n";
    let body = body.replace("duration_s = 60", "duration_s = 2");
    for n in ["a", "b"] {
        std::fs::write(sc.join(format!("{n}.toml")), &body).unwrap();
    }
    std::fs::write(
        sc.join("c.toml"),
        body.replace("name = \"quickstart\"", "name = \"quickstart-2\""),
    )
    .unwrap();
    std::os::unix::fs::symlink(&sc, sc.join("loop")).unwrap();
    let out = d.join("out");
    let (c, stdout, e) = pdsim(&["check", &s(&sc), "--out", &s(&out), "--jobs", "2"]);
    assert_eq!(c, 0, "{stdout}{e}");
    assert!(stdout.contains("check: 3 scenario(s)"), "{stdout}");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["quickstart", "quickstart-2", "quickstart-3"]);
}

// ---------------------------------------------------------------------------------------------
// 7. Validated read-back
// ---------------------------------------------------------------------------------------------

#[test]
fn explain_refuses_files_that_are_not_pdsims() {
    let d = tmpdir("rel-explain");
    std::fs::write(d.join("summary.json"), "{}").unwrap();
    expect_code(&["explain", &s(&d)], 2, &["summary.json", "requests"]);
    let good = d.join("good");
    expect_code(
        &[
            "run",
            QUICK,
            "--set",
            "run.duration_s=2",
            "--out",
            &s(&good),
            "-q",
        ],
        0,
        &[],
    );
    let p = good.join("summary.json");
    let t = std::fs::read_to_string(&p).unwrap();
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    let arrived = v["requests"]["arrived"].as_u64().unwrap();
    std::fs::write(
        &p,
        t.replacen(
            &format!("\"arrived\": {arrived}"),
            &format!("\"arrived\": {}", arrived + 5),
            1,
        ),
    )
    .unwrap();
    expect_code(&["explain", &s(&good)], 2, &["summary.json", "arrived"]);
    std::fs::write(&p, t.replacen("\"requests\"", "\"requestz\"", 1)).unwrap();
    expect_code(&["explain", &s(&good)], 2, &["summary.json", "requests"]);
}

#[test]
fn calibrate_rejects_non_physical_step_times_naming_the_line() {
    let d = tmpdir("rel-cal");
    let m = d.join("m.csv");
    for bad in ["1e-300", "0", "-3", "1e9", "NaN"] {
        std::fs::write(
            &m,
            format!("phase,tokens,batch_size,context_tokens,time_ms\nprefill,1024,1,0,40\ndecode,0,8,8192,{bad}\n"),
        )
        .unwrap();
        let (c, _, e) = pdsim(&[
            "calibrate",
            &s(&m),
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            &s(&d.join("c.toml")),
        ]);
        assert_eq!(c, 2, "{bad}: {e}");
        assert!(e.contains("m.csv:3") || e.contains("m.csv"), "{bad}: {e}");
        assert!(e.len() < 600, "{bad}: a short message: {e}");
    }
}

#[test]
fn a_calibration_used_for_another_gpu_model_or_tp_is_warned_about() {
    let d = tmpdir("rel-cal-warn");
    let m = d.join("m.csv");
    std::fs::write(
        &m,
        "phase,tokens,batch_size,context_tokens,time_ms\nprefill,1024,1,0,40\nprefill,4096,1,0,150\ndecode,0,1,1024,8\ndecode,0,32,32768,12\n",
    )
    .unwrap();
    let cal = d.join("cal.toml");
    expect_code(
        &[
            "calibrate",
            &s(&m),
            "--model",
            "qwen3-8b",
            "--gpu",
            "h200",
            "--tp",
            "4",
            "--out",
            &s(&cal),
        ],
        0,
        &[],
    );
    let set = format!("hardware.calibration=\"{}\"", s(&cal));
    expect_code(
        &[
            "run",
            QUICK,
            "--set",
            &set,
            "--set",
            "run.duration_s=1",
            "--summary-only",
            "--out",
            &s(&d.join("r")),
        ],
        0,
        &[
            "measured on h200",
            "measured with model qwen3-8b",
            "measured at TP 4",
        ],
    );
}
