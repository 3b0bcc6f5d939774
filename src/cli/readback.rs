//! Reading a results folder back: before `explain` (or anything else) trusts a folder, it must
//! be one that `pdsim run` finished writing — no lock or staging left by a writer that is still
//! running or was killed (`outdir::check_complete`), and a `summary.json` and `run.json` of the
//! shape pdsim writes, with counts that add up. A file that is not pdsim's is exit 2 naming the
//! file and the field, never a report of "0 requests arrived".
//!
//! The shapes here are the fields readers rely on, deserialized with serde (unknown fields are
//! allowed: a newer pdsim may add some); `serde_path_to_error` names the field that is wrong.

use std::path::Path;

use serde::Deserialize;

use super::CliError;

#[derive(Deserialize)]
#[allow(dead_code)] // read to be checked, not used
struct Requests {
    arrived: u64,
    completed: u64,
    failed: u64,
    corrupted: u64,
    unfinished: u64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ErrorCount {
    kind: String,
    count: u64,
    message: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Sim {
    events: u64,
    simulated_s: f64,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct SummaryShape {
    requests: Requests,
    errors: Vec<ErrorCount>,
    latency_ms: serde_json::Map<String, serde_json::Value>,
    throughput: serde_json::Map<String, serde_json::Value>,
    slo: serde_json::Map<String, serde_json::Value>,
    sim: Sim,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct RunShape {
    pdsim_version: String,
    scenario_file: String,
    seed: u64,
    scenario: serde_json::Map<String, serde_json::Value>,
}

fn typed<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        CliError::Io(crate::report::IoError {
            path: path.to_path_buf(),
            source,
        })
    })?;
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let at = if field == "." {
            String::new()
        } else {
            format!(": {field}")
        };
        CliError::Usage(format!(
            "{}{at}: {}; not a {what} that pdsim wrote (give the folder `pdsim run` writes)",
            path.display(),
            e.inner()
        ))
    })
}

/// Checks that `dir` is a finished results folder of `pdsim run` (see the module docs).
pub fn results_dir(dir: &Path) -> Result<(), CliError> {
    super::outdir::check_complete(dir, "run it again")?;
    let sp = dir.join("summary.json");
    if !sp.is_file() {
        return Err(CliError::Usage(format!(
            "{}: no summary.json, so not a finished `pdsim run` results folder",
            dir.display()
        )));
    }
    let s: SummaryShape = typed(&sp, "summary.json")?;
    let r = &s.requests;
    let ended = [r.completed, r.failed, r.corrupted, r.unfinished]
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b));
    if ended != Some(r.arrived) {
        return Err(CliError::Usage(format!(
            "{}: requests: completed + failed + corrupted + unfinished ({} + {} + {} + {}) is not arrived ({}); not a summary.json that pdsim wrote",
            sp.display(),
            r.completed,
            r.failed,
            r.corrupted,
            r.unfinished,
            r.arrived
        )));
    }
    if let Some((i, _)) = s
        .errors
        .iter()
        .enumerate()
        .find(|(_, e)| e.kind.parse::<crate::vocab::ErrorKind>().is_err())
    {
        return Err(CliError::Usage(format!(
            "{}: errors[{i}].kind: {:?} is not an error kind pdsim knows",
            sp.display(),
            s.errors[i].kind
        )));
    }
    let rp = dir.join("run.json");
    if rp.is_file() {
        let _: RunShape = typed(&rp, "run.json")?;
    }
    Ok(())
}
