//! Reading a results folder back: before `explain` (or anything else) trusts a folder, it must
//! be one that `pdsim run` finished writing — no lock or staging left by a writer that is still
//! running or was killed (`outdir::check_complete`), and a `summary.json` and `run.json` of the
//! shape pdsim writes, with counts that add up (`report::schema`, the types that wrote them). A
//! file that is not pdsim's is exit 2 naming the file and the field, never a report of
//! "0 requests arrived".

use std::path::Path;

use super::CliError;
use crate::report::schema;

/// Checks that `dir` is a finished results folder of `pdsim run` (see the module docs).
pub fn results_dir(dir: &Path) -> Result<(), CliError> {
    super::outdir::check_complete(dir, "run it again")?;
    let sp = dir.join("summary.json");
    if !sp.is_file() {
        return Err(CliError::Input {
            path: dir.to_path_buf(),
            message: format!(
                "{}: no summary.json, so not a finished `pdsim run` results folder",
                dir.display()
            ),
        });
    }
    schema::read_summary(&sp)?;
    // Every folder `pdsim run` finishes holds run.json (a --summary-only run too): without it
    // the folder is not one, which is bad input (exit 2), not a failed read (issue 40).
    let rp = dir.join("run.json");
    if !rp.is_file() {
        return Err(CliError::Input {
            path: rp.clone(),
            message: format!(
                "{}: missing: every folder `pdsim run` finishes holds run.json beside summary.json, so {} is not a finished results folder; run the scenario again",
                rp.display(),
                dir.display()
            ),
        });
    }
    schema::read_run(&rp)?;
    Ok(())
}
