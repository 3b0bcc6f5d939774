//! Regression against a stored baseline (`pdsim check --baseline DIR`): each figure of a run's
//! `summary.json` against the same figure of an earlier run's, failing when it got worse by more
//! than a stated ratio. Absolute `[expect]` bounds cannot see drift inside them (a 4× traffic
//! rise passed every bound of its scenario); a baseline can.
//!
//! A baseline folder is what `pdsim check … --out DIR` writes: `DIR/<run.name>/summary.json`
//! per scenario. A baseline's `summary.json` is read back through the type that wrote it
//! (`metrics::summary::Summary`), and figures are read from it as `[expect]` reads them
//! (`metrics::summary::Figure`); a file that does not fit is not pdsim's and is an error naming
//! the file and the field, never a silent pass.

use std::path::{Path, PathBuf};

use crate::metrics::summary::{Figure, Summary};

/// Which way a figure gets worse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worse {
    /// A rise is a regression (latencies, failures).
    Up,
    /// A fall is a regression (throughput, goodput, attainment).
    Down,
    /// Any change beyond the ratio: the workload itself moved (arrivals).
    Either,
}

/// `(name, figure, which way is worse)`, in report order.
pub const FIGURES: &[(&str, Figure, Worse)] = &[
    ("arrived", Figure::Arrived, Worse::Either),
    ("failed", Figure::Failed, Worse::Up),
    ("corrupted", Figure::Corrupted, Worse::Up),
    ("unfinished", Figure::Unfinished, Worse::Up),
    ("ttft_p50_ms", Figure::TtftP50, Worse::Up),
    ("ttft_p99_ms", Figure::TtftP99, Worse::Up),
    ("tpot_p50_ms", Figure::TpotP50, Worse::Up),
    ("tpot_p99_ms", Figure::TpotP99, Worse::Up),
    ("e2e_p99_ms", Figure::E2eP99, Worse::Up),
    ("itl_p50_ms", Figure::ItlP50, Worse::Up),
    ("itl_p99_ms", Figure::ItlP99, Worse::Up),
    ("tbt_p50_ms", Figure::TbtP50, Worse::Up),
    ("tbt_p99_ms", Figure::TbtP99, Worse::Up),
    ("throughput_rps", Figure::WindowRequestsPerS, Worse::Down),
    (
        "output_tokens_per_s",
        Figure::WindowOutputTokensPerS,
        Worse::Down,
    ),
    ("goodput_rps", Figure::WindowGoodputPerS, Worse::Down),
    ("slo_attainment", Figure::SloAttainment, Worse::Down),
];

/// One figure against its baseline.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// The figure, e.g. `ttft_p99_ms`.
    pub figure: &'static str,
    /// The baseline's value (`None`: no data, e.g. no request finished).
    pub baseline: Option<f64>,
    /// This run's value.
    pub got: Option<f64>,
    /// The bound this run had to keep, in words: `≤ 893.5 (baseline 812.3 × 1.10)`.
    pub allowed: String,
    /// Whether it held.
    pub held: bool,
}

/// Why a baseline could not be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BaselineError {
    /// The folder is missing or holds no pdsim summary at all.
    #[error("--baseline {}: {why}", dir.display())]
    NotABaseline {
        /// The folder given.
        dir: PathBuf,
        /// What is wrong and how to make one.
        why: String,
    },
    /// A summary that is not pdsim's (unreadable, or without a figure pdsim writes), or a run
    /// folder that is not a complete pdsim result (a writer's lock or staging left in it, no
    /// `summary.json` or `run.json`, a run of another scenario).
    #[error("{}: {why}", file.display())]
    NotASummary {
        /// The file (or run folder) at fault.
        file: PathBuf,
        /// What is wrong.
        why: String,
    },
}

impl BaselineError {
    /// The folder or file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            BaselineError::NotABaseline { dir, .. } => dir,
            BaselineError::NotASummary { file, .. } => file,
        }
    }
}

/// The lock file and staging folder a writer keeps in a results folder until it finished
/// (`app::outdir::{LOCK, STAGING}`; `report` sits below `app`, so the names are repeated here
/// and a test keeps them equal).
const LOCK: &str = ".pdsim-lock";
const STAGING: &str = ".pdsim-partial";

const HOW: &str = "a baseline is the folder `pdsim check SCENARIOS --out DIR` writes (DIR/<run.name>/summary.json per scenario)";

/// What `run.json` must say for its summary to be a baseline of a run: which scenario it is.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct RunFacts {
    pdsim_version: String,
    scenario: RunScenario,
}

#[derive(serde::Deserialize)]
struct RunScenario {
    run: RunSection,
}

#[derive(serde::Deserialize)]
struct RunSection {
    name: String,
}

/// Checks that `dir` can hold a baseline: a folder that can be read and is not itself one
/// run's results folder (whose parent is the baseline).
pub fn check_readable(dir: &Path) -> Result<(), BaselineError> {
    let not = |why: String| BaselineError::NotABaseline {
        dir: dir.to_path_buf(),
        why,
    };
    std::fs::read_dir(dir).map_err(|e| not(format!("cannot be read ({e}); {HOW}")))?;
    for own in ["summary.json", LOCK, STAGING] {
        if std::fs::symlink_metadata(dir.join(own)).is_ok() {
            return Err(not(format!(
                "holds {own}: it is one run's results folder, not a baseline of runs; give the folder above it ({HOW})"
            )));
        }
    }
    Ok(())
}

/// Checks that `dir` looks like a baseline: a folder with at least one `*/summary.json`.
pub fn check_folder(dir: &Path) -> Result<(), BaselineError> {
    let not = |why: String| BaselineError::NotABaseline {
        dir: dir.to_path_buf(),
        why,
    };
    let rd = std::fs::read_dir(dir).map_err(|e| not(format!("cannot be read ({e}); {HOW}")))?;
    let any = rd
        .filter_map(Result::ok)
        .any(|e| e.path().join("summary.json").is_file());
    if any {
        Ok(())
    } else {
        Err(not(format!(
            "holds no <run.name>/summary.json, so it is not a pdsim baseline; {HOW}"
        )))
    }
}

/// Deserializes `text` (the file `file`) as `T`, naming the field that is wrong.
fn typed<T: serde::de::DeserializeOwned>(
    file: &Path,
    text: &str,
    what: &str,
) -> Result<T, BaselineError> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let at = if field == "." {
            String::new()
        } else {
            format!("{field}: ")
        };
        BaselineError::NotASummary {
            file: file.to_path_buf(),
            why: format!(
                "{at}{}: not a {what} that pdsim writes; re-record the baseline ({HOW})",
                e.inner()
            ),
        }
    })
}

/// The baseline summary of run `name`, kept in the run folder `folder` (the one `check --out`
/// gave it: `name`, or `name-2`… for a name used twice); `None` when the baseline has no such
/// folder (a new scenario). A folder that is not a complete pdsim result of that run is an
/// error naming the file and the field: a writer's lock or staging folder in it (still being
/// written, or killed), no `summary.json` or `run.json`, a summary cut short or of another
/// shape, counts that do not add up, or a `run.json` of another scenario.
pub fn read(dir: &Path, folder: &str, name: &str) -> Result<Option<Summary>, BaselineError> {
    let run = dir.join(folder);
    if std::fs::symlink_metadata(&run).is_err() {
        return Ok(None);
    }
    let bad = |file: PathBuf, why: String| BaselineError::NotASummary { file, why };
    if !run.is_dir() {
        return Err(bad(
            run.clone(),
            format!("not a folder, where the baseline's results of run {name:?} belong; {HOW}"),
        ));
    }
    let lock = run.join(LOCK);
    if std::fs::symlink_metadata(&lock).is_ok() {
        let holder = std::fs::read_to_string(&lock).unwrap_or_default();
        let holder = match holder.trim() {
            "" => "a pdsim process".to_string(),
            h => h.to_string(),
        };
        return Err(bad(
            lock,
            format!(
                "the baseline's run {} is incomplete: {holder} is writing it, or was killed before it finished; wait for it, or re-record the baseline",
                run.display()
            ),
        ));
    }
    let staging = run.join(STAGING);
    if std::fs::symlink_metadata(&staging).is_ok() {
        return Err(bad(
            staging,
            format!(
                "the baseline's run {} is incomplete: this is the partial output of a writer that did not finish; re-record the baseline",
                run.display()
            ),
        ));
    }
    let file = run.join("summary.json");
    if !file.is_file() {
        return Err(bad(
            run.clone(),
            format!(
                "no summary.json: not a finished pdsim run (its writer did not finish, or it is not pdsim's); re-record the baseline ({HOW})"
            ),
        ));
    }
    let not = |why: String| bad(file.clone(), why);
    let text = std::fs::read_to_string(&file).map_err(|e| not(e.to_string()))?;
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(&text) {
        return Err(not(format!("not JSON ({e}); {HOW}")));
    }
    let summary: Summary = typed(&file, &text, "summary.json")?;
    let r = &summary.requests;
    if !r.conserved() {
        return Err(not(format!(
            "requests: completed + failed + corrupted + unfinished + aborted ({} + {} + {} + {} + {}) is not arrived ({}): not a summary.json that pdsim wrote; re-record the baseline",
            r.completed, r.failed, r.corrupted, r.unfinished, r.aborted, r.arrived
        )));
    }
    if let Some((field, v, valid)) = crate::report::schema::bad_figure(&summary) {
        return Err(not(format!(
            "{field}: {v} is not a figure pdsim writes ({valid}); re-record the baseline"
        )));
    }
    let rp = run.join("run.json");
    if !rp.is_file() {
        return Err(bad(
            run.clone(),
            format!(
                "no run.json beside summary.json: not a complete pdsim results folder; re-record the baseline ({HOW})"
            ),
        ));
    }
    let rtext = std::fs::read_to_string(&rp).map_err(|e| bad(rp.clone(), e.to_string()))?;
    let facts: RunFacts = typed(&rp, &rtext, "run.json")?;
    if facts.scenario.run.name != name {
        return Err(bad(
            rp,
            format!(
                "scenario.run.name: {:?}, but it is the baseline of run {name:?}: a summary of another scenario; re-record the baseline",
                facts.scenario.run.name
            ),
        ));
    }
    Ok(Some(summary))
}

fn fmt(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// Every figure of `got` against `base`: a figure regresses when it moved the worse way by more
/// than `max_regression` (a ratio: 0.1 = 10 %) of the baseline's value. A count whose baseline
/// is 0 regresses on any rise (a new failure is never within a ratio of none). A figure with
/// data in the baseline and none now regresses; one with no data in the baseline holds.
pub fn compare(base: &Summary, got: &Summary, max_regression: f64) -> Vec<Comparison> {
    let r = max_regression;
    FIGURES
        .iter()
        .map(|&(figure, of, worse)| {
            let (b, g) = (of.read(base), of.read(got));
            let (allowed, held) = match b {
                None => ("any (no data in the baseline)".to_string(), true),
                Some(b) => {
                    let hi = b * (1.0 + r);
                    let lo = b * (1.0 - r);
                    let ratio = fmt(1.0 + r);
                    match worse {
                        Worse::Up => (
                            format!("≤ {} (baseline {} × {ratio})", fmt(hi), fmt(b)),
                            g.is_some_and(|g| g <= hi),
                        ),
                        Worse::Down => (
                            format!("≥ {} (baseline {} × {})", fmt(lo), fmt(b), fmt(1.0 - r)),
                            g.is_some_and(|g| g >= lo),
                        ),
                        Worse::Either => (
                            format!(
                                "{} … {} (baseline {} ± {})",
                                fmt(lo),
                                fmt(hi),
                                fmt(b),
                                fmt(r)
                            ),
                            g.is_some_and(|g| g >= lo && g <= hi),
                        ),
                    }
                }
            };
            Comparison {
                figure,
                baseline: b,
                got: g,
                allowed,
                held,
            }
        })
        .collect()
}

impl Comparison {
    /// What this run gave, with its change against the baseline: `950.1 (+17.0 %)`.
    pub fn got_text(&self) -> String {
        match (self.got, self.baseline) {
            (None, _) => "null".into(),
            (Some(g), Some(b)) if b != 0.0 => {
                format!("{} ({:+.1} %)", fmt(g), 100.0 * (g / b - 1.0))
            }
            (Some(g), _) => fmt(g),
        }
    }
}

/// Reads `--max-regression`: a ratio in [0, 10) (0.1 = 10 %).
pub fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..10.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "--max-regression must be a ratio in [0, 10): how much worse a figure may get than the baseline's (0.1 = 10 %), got {s:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn summary(arrived: u64, failed: u64, ttft_p99: Option<f64>, rps: f64) -> Summary {
        let mut s = crate::report::schema::sample_summary();
        s.requests = crate::metrics::Counts {
            arrived,
            completed: arrived - failed,
            failed,
            corrupted: 0,
            unfinished: 0,
            aborted: 0,
        };
        s.latency_ms.ttft.p50 = Some(10.0);
        s.latency_ms.ttft.p99 = ttft_p99;
        s.latency_ms.tpot.p50 = Some(5.0);
        s.latency_ms.tpot.p99 = Some(6.0);
        s.latency_ms.e2e.p99 = Some(900.0);
        let w = &mut s.throughput.arrival_window;
        (
            w.requests_per_s,
            w.output_tokens_per_s,
            w.goodput_requests_per_s,
        ) = (rps, 100.0, rps);
        s.slo.attainment = Some(1.0);
        s
    }

    fn held(c: &[Comparison], figure: &str) -> bool {
        c.iter().find(|c| c.figure == figure).unwrap().held
    }

    #[test]
    fn a_figure_fails_only_beyond_the_ratio_and_the_worse_way() {
        let base = summary(1000, 0, Some(800.0), 10.0);
        let same = compare(&base, &base, 0.1);
        assert!(same.iter().all(|c| c.held), "{same:?}");
        // p99 TTFT +9 % holds at 10 %, +11 % fails; faster is never a regression.
        assert!(held(
            &compare(&base, &summary(1000, 0, Some(872.0), 10.0), 0.1),
            "ttft_p99_ms"
        ));
        let c = compare(&base, &summary(1000, 0, Some(888.0), 10.0), 0.1);
        assert!(!held(&c, "ttft_p99_ms"));
        let t = c.iter().find(|c| c.figure == "ttft_p99_ms").unwrap();
        assert_eq!(t.allowed, "≤ 880 (baseline 800 × 1.1)");
        assert_eq!(t.got_text(), "888 (+11.0 %)");
        assert!(held(
            &compare(&base, &summary(1000, 0, Some(100.0), 10.0), 0.1),
            "ttft_p99_ms"
        ));
        // Throughput falls the worse way.
        assert!(!held(
            &compare(&base, &summary(1000, 0, Some(800.0), 8.0), 0.1),
            "throughput_rps"
        ));
        assert!(held(
            &compare(&base, &summary(1000, 0, Some(800.0), 20.0), 0.1),
            "throughput_rps"
        ));
        // Traffic 4× is flagged however the latencies look.
        assert!(!held(
            &compare(&base, &summary(4000, 0, Some(800.0), 40.0), 0.1),
            "arrived"
        ));
        // One new failure against none regresses.
        assert!(!held(
            &compare(&base, &summary(1000, 1, Some(800.0), 10.0), 0.1),
            "failed"
        ));
        // Data then, none now: regressed; none then: any value holds.
        assert!(!held(
            &compare(&base, &summary(1000, 0, None, 10.0), 0.1),
            "ttft_p99_ms"
        ));
        let no_data = summary(1000, 0, None, 10.0);
        assert!(held(&compare(&no_data, &base, 0.1), "ttft_p99_ms"));
    }

    /// A complete run folder `dir/name` as `check --out` writes it (the files a baseline reads).
    fn record(dir: &Path, folder: &str, name: &str) -> PathBuf {
        let run = dir.join(folder);
        std::fs::create_dir_all(&run).unwrap();
        let mut s = summary(10, 1, Some(800.0), 5.0);
        s.slo.attainment = Some(0.9);
        std::fs::write(
            run.join("summary.json"),
            serde_json::to_string_pretty(&s).unwrap(),
        )
        .unwrap();
        let facts = json!({"pdsim_version": "0.1.0", "scenario_file": "a.toml", "seed": 1,
                           "scenario": {"run": {"name": name}}});
        std::fs::write(run.join("run.json"), facts.to_string()).unwrap();
        run
    }

    fn tmp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pdsim-baseline-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn folders_and_files_that_are_not_pdsims_are_named() {
        let dir = tmp("shape");
        let e = check_readable(&dir).unwrap_err().to_string();
        assert!(
            e.starts_with("--baseline ") && e.contains("pdsim check"),
            "{e}"
        );
        std::fs::create_dir_all(dir.join("run")).unwrap();
        let e = check_folder(&dir).unwrap_err().to_string();
        assert!(e.contains("not a pdsim baseline"), "{e}");
        let run = record(&dir, "run", "run");
        check_folder(&dir).unwrap();
        assert!(read(&dir, "run", "run").unwrap().is_some());
        std::fs::write(run.join("summary.json"), "{\"requests\": {}}").unwrap();
        let e = read(&dir, "run", "run").unwrap_err().to_string();
        assert!(
            e.contains("summary.json: requests: missing field `arrived`"),
            "{e}"
        );
        // A latency left out is not "no data": the key must be there (null for none).
        let mut s: serde_json::Value =
            serde_json::to_value(summary(10, 1, Some(8.0), 5.0)).unwrap();
        s["latency_ms"]["ttft"]
            .as_object_mut()
            .unwrap()
            .remove("p99");
        std::fs::write(run.join("summary.json"), s.to_string()).unwrap();
        let e = read(&dir, "run", "run").unwrap_err().to_string();
        assert!(e.contains("latency_ms.ttft: missing field `p99`"), "{e}");
        std::fs::write(run.join("summary.json"), "not json").unwrap();
        assert!(
            read(&dir, "run", "run")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert_eq!(read(&dir, "other", "other"), Ok(None));
        // One run's own folder given for the baseline: its parent is meant.
        let e = check_readable(&run).unwrap_err().to_string();
        assert!(e.contains("give the folder above it"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_run_folder_that_is_not_a_complete_result_of_that_run_is_refused_naming_the_file() {
        let dir = tmp("complete");
        let fresh = || {
            let _ = std::fs::remove_dir_all(&dir);
            record(&dir, "a", "a")
        };
        let refused = |needles: &[&str]| {
            let e = read(&dir, "a", "a").unwrap_err().to_string();
            for n in needles {
                assert!(e.contains(n), "{n:?} not in: {e}");
            }
        };
        let run = fresh();
        assert!(read(&dir, "a", "a").unwrap().is_some());
        // Being written, or its writer killed: the lock names the holder.
        std::fs::write(run.join(LOCK), "pid 7 on h: pdsim check\n").unwrap();
        refused(&["a/.pdsim-lock", "incomplete", "pid 7 on h: pdsim check"]);
        let run = fresh();
        std::fs::create_dir_all(run.join(STAGING)).unwrap();
        refused(&["a/.pdsim-partial", "incomplete"]);
        // No summary.json (the marker a finished run writes last), no run.json, a cut summary.
        let run = fresh();
        std::fs::remove_file(run.join("summary.json")).unwrap();
        refused(&["a: no summary.json"]);
        let run = fresh();
        std::fs::remove_file(run.join("run.json")).unwrap();
        refused(&["a: no run.json"]);
        let run = fresh();
        let text = std::fs::read_to_string(run.join("summary.json")).unwrap();
        std::fs::write(run.join("summary.json"), &text[..text.len() / 2]).unwrap();
        refused(&["a/summary.json", "not JSON"]);
        // A figure of another type is named, not read as "no data"; counts must add up.
        for (ptr, v, field) in [
            ("/latency_ms/ttft/p99", json!("fast"), "latency_ms.ttft.p99"),
            ("/requests/arrived", json!("10"), "requests.arrived"),
            ("/slo/attainment", json!([1]), "slo.attainment"),
            (
                "/throughput/arrival_window/requests_per_s",
                json!(null),
                "throughput.arrival_window.requests_per_s",
            ),
        ] {
            let run = fresh();
            let mut s: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                    .unwrap();
            *s.pointer_mut(ptr).unwrap() = v;
            std::fs::write(run.join("summary.json"), s.to_string()).unwrap();
            refused(&[
                "a/summary.json",
                field,
                "not a summary.json that pdsim writes",
            ]);
        }
        let run = fresh();
        let mut s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap())
                .unwrap();
        s["requests"]["failed"] = json!(5);
        std::fs::write(run.join("summary.json"), s.to_string()).unwrap();
        refused(&["a/summary.json", "is not arrived (10)"]);
        // A run of another scenario filed under this one's name.
        let _ = std::fs::remove_dir_all(&dir);
        record(&dir, "a", "b");
        refused(&[
            "a/run.json",
            "scenario.run.name",
            "\"b\"",
            "another scenario",
        ]);
        // `a-2` holds the second scenario named `a`: its run.json says `a`.
        record(&dir, "a-2", "a");
        assert!(read(&dir, "a-2", "a").unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_folder_names_match_the_writer() {
        assert_eq!(LOCK, crate::app::outdir::LOCK);
        assert_eq!(STAGING, crate::app::outdir::STAGING);
    }

    #[test]
    fn the_ratio_is_checked() {
        assert_eq!(parse_ratio("0.1"), Ok(0.1));
        assert_eq!(parse_ratio("0"), Ok(0.0));
        for bad in ["-0.1", "10", "nan", "x", "inf"] {
            assert!(
                parse_ratio(bad).unwrap_err().contains("--max-regression"),
                "{bad}"
            );
        }
    }
}
