//! Process faults (issue 25): kill `pdsim sweep`, `pdsim plan` and `pdsim run` at random
//! moments (SIGKILL, sometimes SIGINT or SIGTERM), resume (`--resume`, or a rerun for `run`),
//! maybe kill the resume too, and require the final folder to be byte-identical to an
//! uninterrupted run's; and start several writers on one folder at once, which must end with
//! exit 0 or 3 (the lock) and one complete, correct result.
//!
//! After every kill the folder is checked too: if it looks complete (its marker file is there
//! and no lock or staging is), it must be the reference, byte for byte — a partial result may
//! never look finished.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Rng;

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// One thing to interrupt.
struct Config {
    name: &'static str,
    args: Vec<String>,
    /// Added when continuing (empty for `run`, which has no resume: it is run again).
    resume: &'static [&'static str],
    /// The file whose presence says "complete".
    marker: &'static str,
}

fn configs(root: &Path) -> Vec<Config> {
    let sc = root.join("scenarios/quickstart.toml").display().to_string();
    let short = [
        "--set",
        "run.duration_s=2",
        "--set",
        "run.drain_timeout_s=30",
    ];
    let grid = [
        "--vary",
        "pools.decode.instances=1,2",
        "--vary",
        "workload.arrival.rate_per_s=4,12",
        "--seeds",
        "2",
    ];
    let v = |parts: &[&[&str]]| -> Vec<String> {
        parts
            .iter()
            .flat_map(|p| p.iter().map(|s| s.to_string()))
            .collect()
    };
    vec![
        Config {
            name: "sweep jobs 1",
            args: v(&[&["sweep", &sc, "-q", "--jobs", "1"], &short, &grid]),
            resume: &["--resume"],
            marker: "sweep.json",
        },
        Config {
            name: "sweep jobs 2 shard 1/3",
            args: v(&[
                &["sweep", &sc, "-q", "--jobs", "2", "--shard", "1/3"],
                &short,
                &grid,
            ]),
            resume: &["--resume"],
            marker: "sweep.json",
        },
        Config {
            name: "plan --rate",
            args: v(&[
                &[
                    "plan", &sc, "-q", "--jobs", "2", "--rate", "8", "--seeds", "2",
                ],
                &short,
                &[
                    "--set",
                    "slo.ttft_p99_ms=600",
                    "--vary",
                    "pools.decode.instances=1,2,3",
                ],
            ]),
            resume: &["--resume"],
            marker: "plan.json",
        },
        Config {
            name: "plan --max-rate",
            args: v(&[
                &[
                    "plan",
                    &sc,
                    "-q",
                    "--jobs",
                    "1",
                    "--max-rate",
                    "--seeds",
                    "1",
                    "--tolerance",
                    "0.3",
                ],
                &["--set", "run.duration_s=1", "--set", "run.max_requests=30"],
                &[
                    "--set",
                    "slo.ttft_p99_ms=600",
                    "--vary",
                    "pools.decode.instances=1,2",
                ],
            ]),
            resume: &["--resume"],
            marker: "plan.csv",
        },
        Config {
            name: "run",
            args: v(&[&["run", &sc, "-q", "--set", "run.duration_s=4"]]),
            resume: &[],
            marker: "summary.json",
        },
    ]
}

/// A folder's files and their bytes.
type Files = Vec<(String, Vec<u8>)>;

/// The top-level files of a folder and their bytes (`run.json` holds wall times: skipped).
fn files(dir: &Path) -> Files {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, Vec<u8>)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .filter(|(n, _)| n != "run.json")
        .map(|(n, p)| (n, std::fs::read(p).unwrap_or_default()))
        .collect();
    v.sort();
    v
}

fn looks_complete(dir: &Path, marker: &str) -> bool {
    dir.join(marker).exists()
        && !dir.join(".pdsim-lock").exists()
        && !dir.join(".pdsim-partial").exists()
}

fn command(bin: &Path, c: &Config, out: &Path, resume: bool) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(&c.args).arg("--out").arg(out);
    if resume {
        cmd.args(c.resume);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// What a process-fault campaign did and found.
#[derive(Default, Debug)]
pub struct ProcessReport {
    /// Kill-and-resume cycles completed.
    pub cycles: u64,
    /// Signals delivered to a running pdsim.
    pub kills: u64,
    /// Rounds of concurrent writers.
    pub concurrent: u64,
    /// What went wrong, one line each.
    pub failures: Vec<String>,
}

/// Runs `cycles` kill-and-resume cycles (or until `deadline`) and, besides, a round of
/// concurrent writers after every fourth, in folders under `tmp`.
pub fn campaign(
    bin: &Path,
    root: &Path,
    seed: u64,
    cycles: u64,
    deadline: Option<Instant>,
    tmp: &Path,
) -> ProcessReport {
    let mut rep = ProcessReport::default();
    let cfgs = configs(root);
    let _ = std::fs::remove_dir_all(tmp);
    std::fs::create_dir_all(tmp).expect("a folder for the campaign");
    // Uninterrupted references, and how long each takes (kills land within that time).
    let mut refs: Vec<(Files, Duration)> = Vec::new();
    for (k, c) in cfgs.iter().enumerate() {
        let out = tmp.join(format!("ref{k}"));
        let t = Instant::now();
        let o = command(bin, c, &out, false).output().expect("spawn pdsim");
        if !o.status.success() {
            rep.failures.push(format!(
                "{}: the uninterrupted run failed: {}",
                c.name,
                String::from_utf8_lossy(&o.stderr)
            ));
            return rep;
        }
        refs.push((files(&out), t.elapsed()));
    }
    let mut rng = Rng::new(seed, 0x5157);
    let mut i = 0u64;
    // `cycles` kill-and-resume cycles; a round of concurrent writers comes on top, after
    // every fourth.
    while rep.cycles < cycles && deadline.is_none_or(|d| Instant::now() < d) {
        i += 1;
        let k = rng.below(cfgs.len() as u64) as usize;
        let (c, (want, took)) = (&cfgs[k], &refs[k]);
        let out = tmp.join(format!("cycle{}", i % 4));
        let _ = std::fs::remove_dir_all(&out);
        if i.is_multiple_of(5) {
            concurrent(bin, c, want, &out, &mut rng, &mut rep);
            rep.concurrent += 1;
            continue;
        }
        let budget = took.as_millis().max(20) as u64;
        let mut resume = false;
        for _ in 0..1 + rng.below(3) {
            let child = command(bin, c, &out, resume).spawn().expect("spawn pdsim");
            std::thread::sleep(Duration::from_millis(rng.below(budget)));
            let sig = *rng.pick(&[9, 9, 9, 2, 15]);
            // SAFETY: a signal to our own child, whose pid is live until we wait for it.
            unsafe {
                kill(child.id() as i32, sig);
            }
            let st = child.wait_with_output().expect("wait");
            rep.kills += 1;
            if let Some(code) = st.status.code().filter(|c| ![0, 130, 143].contains(c)) {
                rep.failures.push(format!(
                    "{} cycle {i}: exit {code} after signal {sig}: {}",
                    c.name,
                    String::from_utf8_lossy(&st.stderr).trim()
                ));
            }
            if looks_complete(&out, c.marker) && files(&out) != *want {
                rep.failures.push(format!(
                    "{} cycle {i}: a folder that looks complete after a kill differs from the uninterrupted run",
                    c.name
                ));
            }
            resume = !c.resume.is_empty();
        }
        let o = command(bin, c, &out, resume).output().expect("spawn pdsim");
        if !o.status.success() {
            rep.failures.push(format!(
                "{} cycle {i}: the resume failed: {}",
                c.name,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        } else if files(&out) != *want {
            rep.failures.push(format!(
                "{} cycle {i}: resumed bytes differ from the uninterrupted run",
                c.name
            ));
        }
        rep.cycles += 1;
    }
    rep
}

/// 2–3 writers of one folder at once: each exits 0 or 3, and the folder ends complete and
/// equal to the reference (whichever writer won).
fn concurrent(
    bin: &Path,
    c: &Config,
    want: &[(String, Vec<u8>)],
    out: &Path,
    rng: &mut Rng,
    rep: &mut ProcessReport,
) {
    let n = 2 + rng.below(2);
    let children: Vec<_> = (0..n)
        .map(|j| {
            command(bin, c, out, j > 0 && rng.chance(0.5))
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut ok = 0;
    for ch in children {
        let o = ch.wait_with_output().expect("wait");
        match o.status.code() {
            Some(0) => ok += 1,
            Some(3) => {
                let e = String::from_utf8_lossy(&o.stderr);
                if !e.contains("another pdsim is writing") {
                    rep.failures.push(format!(
                        "{}: concurrent writer exit 3 without naming the holder: {e}",
                        c.name
                    ));
                }
            }
            other => rep.failures.push(format!(
                "{}: concurrent writer ended {other:?}: {}",
                c.name,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        }
    }
    if ok == 0 {
        rep.failures
            .push(format!("{}: no concurrent writer finished", c.name));
    } else if files(out) != want {
        rep.failures.push(format!(
            "{}: concurrent writers left a folder that differs from one uninterrupted run",
            c.name
        ));
    }
}
