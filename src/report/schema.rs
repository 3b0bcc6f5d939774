//! The results schema: the types `pdsim run` writes — `summary.json` ([`Summary`]), `run.json`
//! ([`RunRecord`]) and the rows of `requests.csv` ([`RequestRow`]) — and the readers that take
//! them back through the same types (`Deserialize`), so `check`, `explain`, `plan`, `merge` and
//! the reports agree on one shape and never walk a JSON value by string key.
//!
//! A file that does not fit is a [`ReadError`] naming the file and the field (serde's path, via
//! `serde_path_to_error`), never a report of "0 requests arrived". Unknown fields are allowed (a
//! newer pdsim may add some); a field the reader needs must be there and of its type, and the
//! summary's counts must add up.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::metrics::summary::Summary;
use crate::vocab::ErrorKind;
pub use crate::vocab::RequestRow;

/// One instance of a run, as `run.json` lists them (global instance order).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InstanceFacts {
    /// Global instance index (the `prefill_instance` / `decode_instance` of `requests.csv`).
    pub instance: u32,
    /// Its pool's name.
    pub pool: String,
    /// `prefill`, `decode` or `colocated`.
    pub role: String,
    /// KV pages its pool holds per rank group (what `--max-total-tokens` / memory gave it).
    pub kv_pages: u32,
}

/// Facts of the host that ran it: the only part of a results folder that is not determined by
/// the scenario and the seed.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HostFacts {
    /// Wall-clock time of the run, s.
    pub wall_s: f64,
    /// Simulated events per wall-clock second.
    pub events_per_s: f64,
    /// Peak resident memory (Linux `VmHWM`), bytes; absent where the host does not say.
    pub peak_rss_bytes: Option<u64>,
}

/// `run.json`: what ran (the resolved scenario, after `--set`), with which seed, on which
/// instances, and the host facts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    /// The pdsim version that wrote it.
    pub pdsim_version: String,
    /// The scenario file as given (paths in the scenario resolve against its folder).
    pub scenario_file: String,
    /// The seed the run used (`--seed` overrides `run.seed`).
    pub seed: u64,
    /// The scenario as resolved after `--set`: the same keys as the file.
    pub scenario: crate::scenario::file::ScenarioFile,
    /// Every instance, in global order.
    pub instances: Vec<InstanceFacts>,
    /// What the step times came from (`hardware.calibration` and, for measured kernels,
    /// the tables' GPU, sglang versions and source); empty in a `run.json` written before it
    /// was recorded.
    #[serde(default)]
    pub step_times: String,
    /// The ops the kernel tables lack for this scenario's models, by pool, each with how it is
    /// priced instead (`sim::RunResult::step_time_fallbacks`, from the step models the run used); absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_time_fallbacks: Vec<String>,
    /// Host facts.
    pub host: HostFacts,
}

impl RunRecord {
    /// The run's name (`run.name`), as it names the results folder.
    pub fn name(&self) -> &str {
        &self.scenario.run.name
    }
}

/// A results file that could not be read as pdsim's.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read (exit 3).
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The file is not of the shape pdsim writes (exit 2).
    #[error("{}{}: {message}; not a {what} that pdsim wrote (give the folder `pdsim run` writes)", path.display(), at(field))]
    Shape {
        /// The file.
        path: PathBuf,
        /// The field, as serde's path (`requests.arrived`, `errors[0].kind`); `.` for the top.
        field: String,
        /// What is wrong with it.
        message: String,
        /// What the file should have been (`summary.json`, `run.json`, `requests.csv`).
        what: &'static str,
    },
}

impl ReadError {
    /// The exit code docs/architecture.md §2 gives it: 3 for I/O, 2 for a file that is not pdsim's.
    pub fn exit_code(&self) -> i32 {
        match self {
            ReadError::Io { .. } => 3,
            ReadError::Shape { .. } => 2,
        }
    }
}

fn at(field: &str) -> String {
    if field == "." || field.is_empty() {
        String::new()
    } else {
        format!(": {field}")
    }
}

fn shape(path: &Path, field: impl Into<String>, message: String, what: &'static str) -> ReadError {
    ReadError::Shape {
        path: path.to_path_buf(),
        field: field.into(),
        message,
        what,
    }
}

/// `path` as JSON of type `T`, the wrong field named.
fn read_json<T: DeserializeOwned>(path: &Path, what: &'static str) -> Result<T, ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut de)
        .map_err(|e| shape(path, e.path().to_string(), e.inner().to_string(), what))
}

/// Reads a `summary.json` and checks what a writer guarantees: every arrived request counted
/// once by outcome, every error kind one pdsim knows.
pub fn read_summary(path: &Path) -> Result<Summary, ReadError> {
    const WHAT: &str = "summary.json";
    let s: Summary = read_json(path, WHAT)?;
    let r = &s.requests;
    if !r.conserved() {
        return Err(shape(
            path,
            "requests",
            format!(
                "completed + failed + corrupted + unfinished + aborted ({} + {} + {} + {} + {}) is not arrived ({})",
                r.completed, r.failed, r.corrupted, r.unfinished, r.aborted, r.arrived
            ),
            WHAT,
        ));
    }
    // Latencies, rates and shares pdsim writes are finite and ≥ 0 (shares ≤ 1): a baseline or
    // a results folder with a negative one would pass every "may not rise" gate (issue 40).
    if let Some((field, v, valid)) = bad_figure(&s) {
        return Err(shape(
            path,
            field,
            format!("{v} is not a figure pdsim writes ({valid})"),
            WHAT,
        ));
    }
    if let Some((i, e)) = s
        .errors
        .iter()
        .enumerate()
        .find(|(_, e)| e.kind.parse::<ErrorKind>().is_err())
    {
        return Err(shape(
            path,
            format!("errors[{i}].kind"),
            format!("{:?} is not an error kind pdsim knows", e.kind),
            WHAT,
        ));
    }
    Ok(s)
}

/// The first figure of `s` outside what pdsim writes: `(field, value, what is valid)`.
pub(crate) fn bad_figure(s: &Summary) -> Option<(String, f64, &'static str)> {
    const MS: &str = "a latency, ms: finite and ≥ 0";
    const RATE: &str = "a rate: finite and ≥ 0";
    const SHARE: &str = "a share: in [0, 1]";
    let l = &s.latency_ms;
    let mut figures: Vec<(String, Option<f64>, &'static str)> = Vec::new();
    for (name, st) in [
        ("ttft", &l.ttft),
        ("tpot", &l.tpot),
        ("itl", &l.itl),
        ("e2e", &l.e2e),
        ("queue", &l.queue),
        ("bootstrap", &l.bootstrap),
        ("decode_queue", &l.decode_queue),
        ("transfer", &l.transfer),
        ("tbt", &l.tbt),
        ("e2e_per_token", &l.e2e_per_token),
    ] {
        for (stat, v) in [
            ("mean", st.mean),
            ("p50", st.p50),
            ("p90", st.p90),
            ("p99", st.p99),
            ("max", st.max),
        ] {
            figures.push((format!("latency_ms.{name}.{stat}"), v, MS));
        }
    }
    let t = &s.throughput;
    let w = &t.arrival_window;
    for (name, v) in [
        ("throughput.requests_per_s", t.requests_per_s),
        ("throughput.input_tokens_per_s", t.input_tokens_per_s),
        ("throughput.output_tokens_per_s", t.output_tokens_per_s),
        ("throughput.arrival_window.end_s", w.end_s),
        ("throughput.arrival_window.requests_per_s", w.requests_per_s),
        (
            "throughput.arrival_window.input_tokens_per_s",
            w.input_tokens_per_s,
        ),
        (
            "throughput.arrival_window.output_tokens_per_s",
            w.output_tokens_per_s,
        ),
        (
            "throughput.arrival_window.goodput_requests_per_s",
            w.goodput_requests_per_s,
        ),
        ("slo.goodput_requests_per_s", s.slo.goodput_requests_per_s),
    ] {
        figures.push((name.to_string(), Some(v), RATE));
    }
    figures.push(("slo.attainment".into(), s.slo.attainment, SHARE));
    figures.into_iter().find_map(|(field, v, valid)| {
        let v = v?;
        let ok = v.is_finite() && v >= 0.0 && (valid != SHARE || v <= 1.0);
        (!ok).then_some((field, v, valid))
    })
}

/// Reads a `run.json`.
pub fn read_run(path: &Path) -> Result<RunRecord, ReadError> {
    read_json(path, "run.json")
}

/// Reads every row of a `requests.csv`, in file order; a bad row names its line.
pub fn read_requests(path: &Path) -> Result<Vec<RequestRow>, ReadError> {
    let mut rd = csv::Reader::from_path(path).map_err(|e| csv_error(path, e))?;
    rd.deserialize::<RequestRow>()
        .enumerate()
        .map(|(i, r)| {
            r.map_err(|e| {
                // Line 1 is the header.
                shape(
                    path,
                    format!("line {}", i + 2),
                    e.to_string(),
                    "requests.csv",
                )
            })
        })
        .collect()
}

fn csv_error(path: &Path, e: csv::Error) -> ReadError {
    match e.into_kind() {
        csv::ErrorKind::Io(source) => ReadError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => shape(path, ".", format!("{other:?}"), "requests.csv"),
    }
}

/// A real `summary.json` (the quickstart, 20 requests) for unit tests that need a whole
/// summary to change one figure of.
#[cfg(test)]
pub(crate) fn sample_summary() -> Summary {
    serde_json::from_str(include_str!("testdata/summary.json")).expect("the sample is a summary")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pdsim-schema-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_summary_missing_a_field_names_it() {
        let d = tmp("missing");
        let p = write(&d, "summary.json", r#"{"requests": {"arrived": 1}}"#);
        let e = read_summary(&p).unwrap_err().to_string();
        assert!(e.contains("summary.json: requests"), "{e}");
        assert!(e.contains("completed"), "{e}");
        assert_eq!(read_summary(&p).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn an_unreadable_file_is_io() {
        let e = read_run(Path::new("/nonexistent/run.json")).unwrap_err();
        assert_eq!(e.exit_code(), 3);
        assert!(e.to_string().starts_with("/nonexistent/run.json"), "{e}");
    }

    #[test]
    fn a_bad_request_row_names_its_line() {
        let d = tmp("rows");
        let p = write(&d, "requests.csv", "id,arrival_ns\n0,1\nx,2\n");
        let e = read_requests(&p).unwrap_err().to_string();
        assert!(e.contains("requests.csv: line 2"), "{e}");
    }
}
