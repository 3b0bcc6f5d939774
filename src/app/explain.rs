//! `pdsim explain RESULTS_DIR | SCENARIO.toml [--markdown] [--out DIR]`: a narrative of a run
//! for people (docs/architecture.md §2). A scenario file is run first (into `--out`, default
//! `results/<run.name>/`); the folder is checked to be a finished run's, read back through the
//! results schema and explained by `diagnose::explain`. This file calls and prints.

use std::path::PathBuf;

use super::CliError;
use crate::diagnose::explain::explain_dir;
use crate::scenario;

/// What `pdsim explain` is asked: the command line's flags (`cli::explain`) or a program's call
/// (`crate::api`).
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    /// A results folder (from `pdsim run`) or a scenario file (run first).
    pub path: PathBuf,
    /// Markdown instead of plain text.
    pub markdown: bool,
    /// Where a scenario's run writes its results (default `results/<run.name>/`).
    pub out: Option<PathBuf>,
    /// Overrides a scenario key (scenario files only), as `pdsim run --set` does.
    pub sets: Vec<String>,
}

/// Runs `pdsim explain`.
pub fn run(a: &ExplainRequest) -> Result<(), CliError> {
    super::print_out(&explain_text(a)?)
}

/// The text `run` prints (`crate::api` returns it).
pub fn explain_text(a: &ExplainRequest) -> Result<String, CliError> {
    let dir = if a.path.is_dir() {
        if !a.sets.is_empty() {
            return Err(CliError::Flag {
                flag: "--set",
                message: "--set applies to a scenario file, not to a results folder".into(),
            });
        }
        a.path.clone()
    } else if a.path.is_file() {
        let sc = scenario::load(&a.path, &a.sets)?;
        let dir = a
            .out
            .clone()
            .unwrap_or_else(|| super::default_out(&sc.name));
        super::run::run_scenario(&sc, &dir)?;
        let _ = writeln_stderr(&format!(
            "pdsim: ran {} into {}",
            a.path.display(),
            dir.display()
        ));
        dir
    } else {
        return Err(CliError::Input {
            path: a.path.clone(),
            message: format!(
                "{}: neither a results folder nor a scenario file",
                a.path.display()
            ),
        });
    };
    super::readback::results_dir(&dir)?;
    Ok(explain_dir(&dir, a.markdown)?)
}

fn writeln_stderr(s: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stderr(), "{s}")
}
