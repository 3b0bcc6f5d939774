//! `pdsim check PATH... [--junit FILE] [--out DIR] [--set KEY=VALUE]... [--jobs N]`: runs every
//! scenario (a file, or the `.toml` files under a folder) that has an `[expect]` table, prints
//! each expectation with what was expected and what the run gave, writes JUnit XML, and exits 1
//! when any expectation fails (docs/architecture.md §2).
//!
//! Expectations are evaluated on the run's in-memory summary, serialized exactly as
//! `summary.json` is, so an expectation reads the figure a `jq` gate on the file would read; a
//! figure with no data (`null`, absent, or a latency when no request finished) fails its
//! expectation with "got null" rather than passing on a 0.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::Args;

use super::CliError;
use crate::scenario::expect::{Bound, Expect};
use crate::scenario::{self, Scenario};

/// Arguments of `pdsim check`.
#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// Scenario files or folders (searched recursively for `.toml` files with an `[expect]`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Also write a JUnit XML report here (one testcase per scenario, a `<failure>` per broken
    /// expectation).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write each scenario's full results under `DIR/<run.name>/` (default: none are written).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Overrides a key of every scenario, as `pdsim run --set` does.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Scenarios run at once (default: the machine's cores). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Print only failures and the final line.
    #[arg(long, short)]
    pub quiet: bool,
    /// Also compare every run with the `summary.json` of the same `run.name` under DIR (the
    /// folder an earlier `pdsim check … --out DIR` wrote): a figure that got worse by more than
    /// `--max-regression` fails, as a broken expectation does.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// With `--baseline`: how much worse a figure may get, as a ratio of the baseline's value
    /// (default 0.1 = 10 %; latencies and failures may rise by it, throughput and attainment
    /// fall by it, arrivals move by it either way).
    #[arg(long, value_name = "RATIO", requires = "baseline", value_parser = crate::report::baseline::parse_ratio)]
    pub max_regression: Option<f64>,
}

/// `--max-regression` when not given: 10 %.
pub const DEFAULT_MAX_REGRESSION: f64 = 0.1;

/// One expectation's verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The `[expect]` key.
    pub key: String,
    /// What was expected, e.g. `≤ 2000`.
    pub expected: String,
    /// What the run gave, e.g. `2512.3`, or `null`.
    pub got: String,
    /// Whether it held.
    pub held: bool,
}

/// One checked scenario.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The scenario file.
    pub file: PathBuf,
    /// `run.name`.
    pub name: String,
    /// The seed it ran with.
    pub seed: u64,
    /// Verdicts in report order.
    pub verdicts: Vec<Verdict>,
    /// Wall time of the run, s (JUnit `time`; never part of a result).
    pub wall_s: f64,
    /// The one-line outcome of the run (`Summary::human`'s first line).
    pub headline: String,
}

impl Checked {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.held)
    }
}

/// A number as a person writes it: integers without a fraction, others to 3 decimals.
pub fn fmt_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// Evaluates `expect` against a run's summary.
pub fn evaluate(expect: &Expect, summary: &crate::metrics::summary::Summary) -> Vec<Verdict> {
    let mut out = Vec::new();
    if let Some(kinds) = &expect.error_kinds {
        let mut want: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        want.sort_unstable();
        want.dedup();
        let mut got: Vec<&str> = summary.errors.iter().map(|e| e.kind.as_str()).collect();
        got.sort_unstable();
        got.dedup();
        out.push(Verdict {
            key: "error_kinds".into(),
            expected: format!("exactly [{}]", want.join(", ")),
            got: format!("[{}]", got.join(", ")),
            held: want == got,
        });
    }
    let finished = summary.requests.completed + summary.requests.corrupted;
    for b in expect.numeric() {
        // A latency with no finished request has no data, whatever the summary wrote for it.
        let figure = b.figure.read(summary);
        let (sign, held) = match (b.bound, figure) {
            (Bound::Min, Some(v)) => ("≥", v >= b.value),
            (Bound::Max, Some(v)) => ("≤", v <= b.value),
            (Bound::Min, None) => ("≥", false),
            (Bound::Max, None) => ("≤", false),
        };
        out.push(Verdict {
            key: b.key.into(),
            expected: format!("{sign} {}", fmt_num(b.value)),
            got: figure.map_or_else(
                || {
                    if b.figure.needs_finished() && finished == 0 {
                        "null (no request finished)".to_string()
                    } else {
                        "null".to_string()
                    }
                },
                fmt_num,
            ),
            held,
        });
    }
    out
}

/// The `.toml` files named by `paths`: files as given, folders searched recursively in name
/// order. A path that does not exist is a usage error. Symbolic links are followed once: a
/// folder (or file) reached again by another path — a link loop, or two links to one place —
/// is not searched (run) again.
fn collect(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>, CliError> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out, &mut seen)?;
        } else if p.is_file() {
            if seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())) {
                out.push((p.clone(), true));
            }
        } else {
            return Err(CliError::input(
                p,
                format!("{}: no such scenario file or folder", p.display()),
            ));
        }
    }
    Ok(out)
}

fn walk(
    dir: &Path,
    out: &mut Vec<(PathBuf, bool)>,
    seen: &mut std::collections::BTreeSet<PathBuf>,
) -> Result<(), CliError> {
    if !seen.insert(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())) {
        return Ok(());
    }
    let rd = std::fs::read_dir(dir).map_err(|source| {
        CliError::Io(crate::report::IoError {
            path: dir.to_path_buf(),
            source,
        })
    })?;
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out, seen)?;
        } else if p.extension().is_some_and(|x| x == "toml")
            && seen.insert(std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone()))
        {
            out.push((p, false));
        }
    }
    Ok(())
}

/// A scenario to run and its expectations.
struct Job {
    sc: Scenario,
    expect: Expect,
    /// With `--baseline`: the baseline's summary of this run (`Err`: the file it lacks) and
    /// the ratio a figure may regress by.
    baseline: Option<(Result<crate::metrics::summary::Summary, PathBuf>, f64)>,
}

/// Loads every scenario first, so an invalid one stops the check (exit 2) before any runs.
/// Files found in folders without an `[expect]` are skipped; a file named on the command
/// line without one is a usage error (there is nothing to check).
fn load_jobs(a: &CheckArgs) -> Result<(Vec<Job>, Vec<PathBuf>), CliError> {
    let mut jobs = Vec::new();
    let mut skipped = Vec::new();
    for (path, named) in collect(&a.paths)? {
        let sc = scenario::load(&path, &a.sets)?;
        // As `run` does, under -q too: a warning changes what the verdict means.
        for n in &sc.notes {
            crate::app::sweep::note(&format!("warning: {}: {n}", path.display()));
        }
        match scenario::expectations(&sc).filter(|e| !e.is_empty()) {
            Some(expect) => jobs.push(Job {
                sc,
                expect,
                baseline: None,
            }),
            None if named => {
                return Err(CliError::input(
                    &path,
                    format!(
                        "{}: has no [expect] table, so there is nothing to check; add one (e.g. `[expect]` with `completed_min = 1`), or use `pdsim run`",
                        path.display()
                    ),
                ));
            }
            None => skipped.push(path),
        }
    }
    if jobs.is_empty() {
        let under: Vec<String> = a.paths.iter().map(|p| p.display().to_string()).collect();
        return Err(CliError::input(
            a.paths.first().cloned().unwrap_or_default(),
            format!(
                "no scenario with an [expect] table under {}",
                under.join(", ")
            ),
        ));
    }
    Ok((jobs, skipped))
}

/// Output folders, `DIR/<run.name>`, with `-2`, `-3`… for names used twice — never a name
/// another scenario has (`a`, `a`, `a-2` give `a`, `a-3`, `a-2`), so no two share a folder.
fn out_dirs(jobs: &[Job], base: Option<&Path>) -> Vec<Option<PathBuf>> {
    let names: std::collections::BTreeSet<&str> = jobs.iter().map(|j| j.sc.name.as_str()).collect();
    let mut used = std::collections::BTreeSet::<String>::new();
    jobs.iter()
        .map(|j| {
            let mut name = j.sc.name.clone();
            let mut n = 1;
            while used.contains(&name) || (n > 1 && names.contains(name.as_str())) {
                n += 1;
                name = format!("{}-{n}", j.sc.name);
            }
            used.insert(name.clone());
            base.map(|b| b.join(name))
        })
        .collect()
}

fn check_one(job: &Job, out: Option<&Path>) -> Result<Checked, CliError> {
    let started = Instant::now();
    let summary = match out {
        Some(dir) => crate::app::run::run_scenario(&job.sc, dir)?.summary,
        None => crate::app::run::summarize(&job.sc)?,
    };
    let mut verdicts = evaluate(&job.expect, &summary);
    match &job.baseline {
        None => {}
        Some((Err(missing), _)) => verdicts.push(Verdict {
            key: "baseline".into(),
            expected: format!("{} to exist", missing.display()),
            got: "no such file (a new scenario or a renamed run: re-record the baseline)".into(),
            held: false,
        }),
        Some((Ok(base), ratio)) => {
            verdicts.extend(
                crate::report::baseline::compare(base, &summary, *ratio)
                    .into_iter()
                    .map(|c| Verdict {
                        key: format!("baseline.{}", c.figure),
                        expected: c.allowed.clone(),
                        got: c.got_text(),
                        held: c.held,
                    }),
            );
        }
    }
    Ok(Checked {
        file: job.sc.source.clone(),
        name: job.sc.name.clone(),
        seed: job.sc.seed,
        verdicts,
        wall_s: started.elapsed().as_secs_f64(),
        headline: summary
            .human(&job.sc.name)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
    })
}

/// Runs the jobs on `threads` threads; results come back in job order whatever finishes first.
fn run_all(
    jobs: &[Job],
    dirs: &[Option<PathBuf>],
    threads: usize,
) -> Vec<Result<Checked, CliError>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<Checked, CliError>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs.len() {
                        break;
                    }
                    let r = check_one(&jobs[i], dirs[i].as_deref());
                    results.lock().expect("no thread panics holding it")[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .expect("no thread panics holding it")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

/// The text report of one scenario.
pub fn render(c: &Checked, quiet: bool) -> String {
    let mut s = format!(
        "{} {}  ({}, seed {}, {:.1} s)\n",
        if c.passed() { "PASS" } else { "FAIL" },
        c.file.display(),
        c.name,
        c.seed,
        c.wall_s
    );
    if !quiet || !c.passed() {
        s += &format!("  {}\n", c.headline);
    }
    let width = c.verdicts.iter().map(|v| v.key.len()).max().unwrap_or(0);
    let ew = c
        .verdicts
        .iter()
        .map(|v| v.expected.chars().count())
        .max()
        .unwrap_or(0);
    for v in &c.verdicts {
        if quiet && v.held {
            continue;
        }
        s += &format!(
            "  {}  {:width$}  expected {:ew$}  got {}\n",
            if v.held { "ok  " } else { "FAIL" },
            v.key,
            v.expected,
            v.got,
        );
    }
    s
}

/// Escapes text for XML attributes and content.
fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // XML 1.0 forbids most control characters even escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// JUnit XML as GitHub Actions (test-reporter actions), GitLab and Jenkins read it: one
/// `<testsuite>`, one `<testcase>` per scenario (classname = its folder, name = `run.name`),
/// a `<failure>` per broken expectation naming it with expected and got, and every verdict
/// in `<system-out>`.
pub fn junit(checked: &[Checked], sets: &[String]) -> String {
    // The reproduce line carries the check's own `--set`s, shell-quoted: without them it runs
    // another scenario than the one that failed.
    let set_flags: String = sets
        .iter()
        .map(|kv| format!(" --set '{}'", kv.replace('\'', "'\\''")))
        .collect();
    let failures: usize = checked.iter().filter(|c| !c.passed()).count();
    let time: f64 = checked.iter().map(|c| c.wall_s).sum();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    s += &format!(
        "<testsuites name=\"pdsim check\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{time:.3}\">\n",
        checked.len()
    );
    s += &format!(
        "  <testsuite name=\"pdsim check\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">\n",
        checked.len()
    );
    for c in checked {
        let class = c
            .file
            .parent()
            .map(|p| p.display().to_string().replace(['/', '\\'], "."))
            .unwrap_or_default();
        s += &format!(
            "    <testcase classname=\"{}\" name=\"{}\" file=\"{}\" time=\"{:.3}\">\n",
            xml(class.trim_matches('.')),
            xml(&c.name),
            xml(&c.file.display().to_string()),
            c.wall_s
        );
        for v in c.verdicts.iter().filter(|v| !v.held) {
            let msg = format!("{}: expected {}, got {}", v.key, v.expected, v.got);
            s += &format!(
                "      <failure type=\"expectation\" message=\"{}\">{}\nseed {}; reproduce: pdsim run {} --seed {}{}</failure>\n",
                xml(&msg),
                xml(&msg),
                c.seed,
                xml(&c.file.display().to_string()),
                c.seed,
                xml(&set_flags)
            );
        }
        s += &format!(
            "      <system-out>{}</system-out>\n",
            xml(&render(c, false))
        );
        s += "    </testcase>\n";
    }
    s += "  </testsuite>\n</testsuites>\n";
    s
}

/// Reads every job's baseline summary from `dir`, named as `--out` names run folders (so a
/// baseline recorded with `--out DIR` lines up); a folder that is not a baseline, or a run
/// folder in it that is not a complete pdsim result of that run, stops the check before
/// anything runs (exit 2, naming the file).
fn attach_baselines(jobs: &mut [Job], dir: &Path, ratio: Option<f64>) -> Result<(), CliError> {
    use crate::report::baseline;
    baseline::check_readable(dir)?;
    let ratio = ratio.unwrap_or(DEFAULT_MAX_REGRESSION);
    let names = out_dirs(jobs, Some(dir));
    let mut any = false;
    for (job, path) in jobs.iter_mut().zip(names) {
        let path = path.expect("a baseline folder names every run");
        let folder = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let found = baseline::read(dir, &folder, &job.sc.name)?;
        any |= found.is_some();
        job.baseline = Some((found.ok_or(path.join("summary.json")), ratio));
    }
    if !any {
        // No run of this check is in it: it must at least be a baseline of other runs.
        baseline::check_folder(dir)?;
    }
    Ok(())
}

/// Runs `pdsim check`; `Ok(true)` when every expectation held.
pub fn run(a: &CheckArgs) -> Result<bool, CliError> {
    let (mut jobs, skipped) = load_jobs(a)?;
    if let Some(path) = &a.junit {
        // Before anything runs: the report must not overwrite what the check reads.
        let inputs = jobs.iter().flat_map(|j| {
            std::iter::once(j.sc.source.clone()).chain(j.sc.inputs.iter().map(|i| i.1.clone()))
        });
        for f in inputs {
            if super::same_file(&f, path) {
                return Err(CliError::flag(
                    "--junit",
                    format!(
                        "--junit {}: is {}, an input of this check; give the report another path",
                        path.display(),
                        f.display()
                    ),
                ));
            }
        }
    }
    let dirs = out_dirs(&jobs, a.out.as_deref());
    if let Some(dir) = &a.baseline {
        attach_baselines(&mut jobs, dir, a.max_regression)?;
    }
    // The bound of sweep and plan (at least 1, at most MAX_JOBS threads).
    let threads = crate::app::sweep::jobs_of(a.jobs)?;
    let mut checked = Vec::new();
    for r in run_all(&jobs, &dirs, threads) {
        checked.push(r?);
    }
    let mut text = String::new();
    for c in &checked {
        text += &render(c, a.quiet);
    }
    for p in &skipped {
        if !a.quiet {
            text += &format!("skip {}  (no [expect])\n", p.display());
        }
    }
    let (n, failed) = (
        checked.iter().map(|c| c.verdicts.len()).sum::<usize>(),
        checked
            .iter()
            .flat_map(|c| &c.verdicts)
            .filter(|v| !v.held)
            .count(),
    );
    let bad = checked.iter().filter(|c| !c.passed()).count();
    text += &format!(
        "check: {} scenario(s), {n} expectation(s): {} held, {failed} failed{}\n",
        checked.len(),
        n - failed,
        if bad > 0 {
            format!(" ({bad} scenario(s) failed)")
        } else {
            String::new()
        }
    );
    if let Some(path) = &a.junit {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|source| {
                CliError::Io(crate::report::IoError {
                    path: parent.to_path_buf(),
                    source,
                })
            })?;
        }
        crate::app::outdir::write_atomic(path, junit(&checked, &a.sets).as_bytes())?;
    }
    super::print_out(&text)?;
    Ok(bad == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::summary::Summary;

    fn summary(completed: u64, corrupted: u64, ttft_p99: Option<f64>) -> Summary {
        let mut s = crate::report::schema::sample_summary();
        s.requests = crate::metrics::Counts {
            arrived: 10,
            completed,
            failed: 10 - completed - corrupted,
            corrupted,
            unfinished: 0,
            aborted: 0,
        };
        s.errors = vec![crate::metrics::ErrorCount {
            kind: "waiting_timeout".into(),
            count: 3,
            message: "m".into(),
        }];
        s.latency_ms.ttft.p99 = ttft_p99;
        s.slo.attainment = Some(0.8);
        s
    }

    #[test]
    fn bounds_hold_and_fail_with_expected_and_got() {
        let e = Expect {
            completed_min: Some(8),
            ttft_p99_ms_max: Some(100.0),
            slo_attainment_min: Some(0.9),
            error_kinds: Some(vec![crate::vocab::ErrorKind::WaitingTimeout]),
            ..Default::default()
        };
        let v = evaluate(&e, &summary(8, 0, Some(150.25)));
        let by: std::collections::BTreeMap<_, _> = v.iter().map(|v| (v.key.as_str(), v)).collect();
        assert!(by["completed_min"].held);
        assert!(by["error_kinds"].held);
        assert!(!by["ttft_p99_ms_max"].held);
        assert_eq!(by["ttft_p99_ms_max"].expected, "≤ 100");
        assert_eq!(by["ttft_p99_ms_max"].got, "150.25");
        assert!(!by["slo_attainment_min"].held);
    }

    #[test]
    fn a_figure_without_data_fails_as_null() {
        let e = Expect {
            ttft_p99_ms_max: Some(100.0),
            ..Default::default()
        };
        // Issue 12's null.
        let v = evaluate(&e, &summary(5, 0, None));
        assert!(!v[0].held && v[0].got == "null", "{v:?}");
        // Every request failed: a 0 latency is no data, not a pass.
        let v = evaluate(&e, &summary(0, 0, Some(0.0)));
        assert!(!v[0].held && v[0].got.starts_with("null"), "{v:?}");
        // No attainment (nothing arrived): no data, not a pass.
        let e = Expect {
            slo_attainment_min: Some(0.0),
            ..Default::default()
        };
        let mut s = summary(5, 0, Some(1.0));
        s.slo.attainment = None;
        let v = evaluate(&e, &s);
        assert!(!v[0].held && v[0].got == "null", "{v:?}");
    }

    #[test]
    fn junit_names_each_broken_expectation_and_escapes() {
        let c = Checked {
            file: PathBuf::from("scenarios/regression/a<b>.toml"),
            name: "a&b".into(),
            seed: 3,
            verdicts: vec![
                Verdict {
                    key: "ttft_p99_ms_max".into(),
                    expected: "≤ 100".into(),
                    got: "150".into(),
                    held: false,
                },
                Verdict {
                    key: "completed_min".into(),
                    expected: "≥ 1".into(),
                    got: "0".into(),
                    held: false,
                },
            ],
            wall_s: 0.5,
            headline: "x".into(),
        };
        let x = junit(std::slice::from_ref(&c), &[]);
        assert_eq!(x.matches("<failure ").count(), 2, "{x}");
        assert!(x.contains(
            "reproduce: pdsim run scenarios/regression/a&lt;b&gt;.toml --seed 3</failure>"
        ));
        // The check's --set overrides ride along, quoted for a shell.
        let sets = ["run.duration_s=5".to_string(), "run.name=it's".to_string()];
        let y = junit(&[c], &sets);
        assert!(
            y.contains(
                "--seed 3 --set &apos;run.duration_s=5&apos; --set &apos;run.name=it&apos;\\&apos;&apos;s&apos;</failure>"
            ),
            "{y}"
        );
        assert!(x.contains("message=\"ttft_p99_ms_max: expected ≤ 100, got 150\""));
        assert!(x.contains("name=\"a&amp;b\"") && x.contains("a&lt;b&gt;.toml"));
        assert!(x.contains("classname=\"scenarios.regression\""));
    }
}
