//! [`PlanError`], the one error type of sweeps, merges and searches, and the exit code each
//! variant maps to. Its own module so every part of `plan` can return it without reaching
//! back into the façade (`plan/mod.rs`).

use std::path::{Path, PathBuf};

use crate::scenario::ScenarioError;

/// A failure of a sweep or search, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A flag's value is not valid (exit 2): `flag` names it (`--vary`, `--shard`, `--seeds`,
    /// `--jobs`, `--set`, `--resume`), the message says what would be.
    #[error("{message}")]
    Flag {
        /// The flag, as typed on the command line.
        flag: &'static str,
        /// What is wrong and what is valid.
        message: String,
    },
    /// A file read back (a shard's `sweep.csv` or `sweep.json`, a `plan.csv`) that is not what
    /// pdsim wrote: cut short, edited, of another sweep or another pdsim (exit 2).
    #[error("{message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// No point of the grid is a valid scenario: a mistake in the question (a misspelt key or
    /// value), not a result (exit 2). `first` is the first point's error.
    #[error("no grid point is a valid scenario; the first: {first}")]
    NoValidPoint {
        /// The first point's error message.
        first: String,
    },
    /// The scenario itself is invalid (exit 2).
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// A simulation could not finish (a trace unreadable mid-run; exit 3).
    #[error("{0}")]
    Io(String),
}

impl PlanError {
    /// A bad value of `flag` (exit 2).
    pub fn flag(flag: &'static str, message: String) -> Self {
        PlanError::Flag { flag, message }
    }

    /// A results file that is not what pdsim wrote (exit 2).
    pub fn file(path: &Path, message: String) -> Self {
        PlanError::File {
            path: path.to_path_buf(),
            message,
        }
    }

    /// The flag, key or file the error is about (see `CliError::key`).
    pub fn key(&self) -> Option<String> {
        match self {
            PlanError::Flag { flag, .. } => Some((*flag).to_string()),
            PlanError::File { path, .. } => Some(path.display().to_string()),
            PlanError::Scenario(e) if !e.key.is_empty() => Some(e.key.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::plan::rows::whole_lines;
    use crate::plan::{Grid, PlanError, Shard, SweepRow, all_infeasible, parse_axis};

    /// Every planner mistake names its flag, file or key (what `pdsim` prints and the Python
    /// binding's exception carries), and all are exit 2 but I/O.
    #[test]
    fn planner_errors_name_the_flag_file_or_key() {
        let key = |e: PlanError| e.key();
        assert_eq!(
            key(parse_axis("nokey").unwrap_err()).as_deref(),
            Some("--vary")
        );
        assert_eq!(
            key(Shard::parse("3/2").unwrap_err()).as_deref(),
            Some("--shard")
        );
        let axis = parse_axis("a=1").unwrap();
        let twice = Grid::new(vec![axis.clone(), axis], vec![1], vec![]).unwrap_err();
        assert_eq!(key(twice).as_deref(), Some("--vary"));
        assert_eq!(
            key(Grid::new(vec![], vec![], vec![]).unwrap_err()).as_deref(),
            Some("--seeds")
        );
        let cut = whole_lines(Path::new("s/sweep.csv"), b"a,b\n1,2").unwrap_err();
        assert!(matches!(&cut, PlanError::File { path, .. } if path == Path::new("s/sweep.csv")));
        let none = all_infeasible(&[SweepRow::infeasible(0, "pools.x: unknown key".into())]);
        assert_eq!(
            none.unwrap_err().to_string(),
            "no grid point is a valid scenario; the first: pools.x: unknown key"
        );
    }
}
