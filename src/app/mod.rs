//! The application layer: what each verb does, under both the command line (`cli`, which
//! parses flags into a request) and the Python API (`crate::api`, which builds the same
//! request from a call). A verb here takes its request (`run::RunRequest`,
//! `sweep::SweepRequest`, `plan::PlanRequest`, `layout::LayoutRequest`,
//! `explain::ExplainRequest`), writes its results folder atomically (`outdir`) and returns
//! [`CliError`] — named for the exit code the command line gives it — so a program gets the
//! CLI's files byte for byte by construction (`docs/architecture.md` §6).

pub mod explain;
pub mod layout;
pub mod oneline;
pub mod outdir;
pub mod plan;
pub mod progress;
pub mod readback;
pub mod run;
pub mod serve;
pub mod signals;
pub mod sweep;

use std::path::{Path, PathBuf};

use crate::plan::Base;
use crate::scenario::{self, Scenario};

/// Why a verb failed, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A flag's value is not valid (exit 2): `flag` names it (`--tp`, `--gpu`), the message
    /// says what would be.
    #[error("{message}")]
    Flag {
        /// The flag, as typed on the command line.
        flag: &'static str,
        /// What is wrong and what is valid.
        message: String,
    },
    /// Flags that cannot be given together (exit 2).
    #[error("{message}")]
    Conflict {
        /// The flags, as typed.
        flags: &'static [&'static str],
        /// Why, and which to keep.
        message: String,
    },
    /// A path argument that is not what the verb reads, or an input it refuses (exit 2).
    #[error("{message}")]
    Input {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong with it and what the verb wants.
        message: String,
    },
    /// An unreadable or invalid trace (exit 2).
    #[error("{0}")]
    Trace(#[from] crate::workload::trace::TraceError),
    /// An unreadable or unsupported model config (exit 2).
    #[error("{0}")]
    ModelConfig(#[from] crate::spec::hf::ConfigError),
    /// Server arguments no layout exists for (exit 2).
    #[error("{0}")]
    Layout(#[from] crate::layout::LayoutError),
    /// An invalid scenario (exit 2).
    #[error("{0}")]
    Scenario(#[from] crate::scenario::ScenarioError),
    /// A file could not be read or written (exit 3).
    #[error("{0}")]
    Io(#[from] crate::report::IoError),
    /// A results file read back that is not pdsim's (exit 2) or could not be read (exit 3).
    #[error(transparent)]
    Results(#[from] crate::report::schema::ReadError),
    /// A `check --baseline` folder that is not a baseline, or a run in it that is not a
    /// complete pdsim result (exit 2, naming the folder or file).
    #[error(transparent)]
    Baseline(#[from] crate::report::baseline::BaselineError),
    /// Launch lines `lint` cannot read or predict (exit 2).
    #[error(transparent)]
    Lint(#[from] crate::diagnose::lint::LintError),
    /// The verb ran and its verdict is negative: an expectation failed (`check`) or the pair
    /// is incompatible (`lint`). Exit 1.
    #[error("{0}")]
    Failed(String),
    /// Another pdsim process is writing the output folder (exit 3, like any I/O refusal).
    #[error("{0}")]
    Busy(String),
    /// A sweep or plan failed.
    #[error("{0}")]
    Plan(#[from] crate::plan::PlanError),
    /// Standard output was closed by its reader (`pdsim ... | head`): not a failure, so exit 0
    /// without a message, as `head`'s other writers (coreutils, ripgrep) do.
    #[error("standard output closed")]
    ClosedStdout,
}

impl CliError {
    /// A bad value of `flag` (exit 2).
    pub fn flag(flag: &'static str, message: String) -> Self {
        CliError::Flag { flag, message }
    }

    /// A refused input file or folder (exit 2).
    pub fn input(path: impl Into<PathBuf>, message: String) -> Self {
        CliError::Input {
            path: path.into(),
            message,
        }
    }

    /// The flag, key or file the error is about, for callers that act on it (a notebook's
    /// exception, an editor's squiggle): `--tp`, `pools.decode.server.tp_size`, a path.
    pub fn key(&self) -> Option<String> {
        match self {
            CliError::Flag { flag, .. } => Some((*flag).to_string()),
            CliError::Conflict { flags, .. } => Some(flags.join(" ")),
            CliError::Input { path, .. } => Some(path.display().to_string()),
            CliError::Scenario(e) if !e.key.is_empty() => Some(e.key.clone()),
            CliError::Results(crate::report::schema::ReadError::Shape { path, field, .. }) => {
                Some(format!("{}: {field}", path.display()))
            }
            CliError::Baseline(e) => Some(e.path().display().to_string()),
            CliError::Plan(e) => e.key(),
            _ => None,
        }
    }

    /// docs/architecture.md §2: 1 a negative verdict, 2 usage or invalid input, 3 I/O.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Flag { .. }
            | CliError::Conflict { .. }
            | CliError::Input { .. }
            | CliError::Trace(_)
            | CliError::ModelConfig(_)
            | CliError::Layout(_)
            | CliError::Scenario(_)
            | CliError::Baseline(_)
            | CliError::Lint(_) => 2,
            CliError::Results(e) => e.exit_code(),
            CliError::Io(_) | CliError::Busy(_) => 3,
            CliError::Failed(_) => 1,
            CliError::Plan(crate::plan::PlanError::Io(_)) => 3,
            CliError::Plan(_) => 2,
            CliError::ClosedStdout => 0,
        }
    }
}

/// Writes `text` to standard output, locked and flushed, so a write error is an error rather
/// than a panic in `print!`: a closed pipe is [`CliError::ClosedStdout`] (exit 0, quietly),
/// anything else (a full disk) an I/O error on `standard output` (exit 3).
pub fn print_out(text: &str) -> Result<(), CliError> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::BrokenPipe {
                CliError::ClosedStdout
            } else {
                CliError::Io(crate::report::IoError {
                    path: PathBuf::from("standard output"),
                    source,
                })
            }
        })
}

/// Whether `a` and `b` name the same file (by device and inode when both exist, so `./x`,
/// `x` and a link to it are one file).
pub fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// A path for messages.
pub fn shown(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// The default output folder of a run.
pub fn default_out(name: &str) -> PathBuf {
    PathBuf::from("results").join(name)
}

/// Where a scenario comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A scenario file, as the CLI takes it.
    File(PathBuf),
    /// TOML text; `path` names it in errors and its folder resolves the relative paths inside
    /// (it need not exist).
    Text {
        /// The scenario.
        text: String,
        /// Its stand-in file name.
        path: PathBuf,
    },
}

impl Source {
    /// The scenario's file name (a stand-in for text), as the CLI's arguments carry it.
    pub fn path(&self) -> &Path {
        match self {
            Source::File(p) | Source::Text { path: p, .. } => p,
        }
    }

    /// The scenario read once (what a sweep or plan keeps), validated as written.
    pub fn base(&self) -> Result<Base, CliError> {
        match self {
            Source::File(p) => Ok(Base::load(p)?),
            Source::Text { text, path } => {
                let sc = scenario::from_str(text, path, &[])?;
                Ok(Base {
                    path: path.clone(),
                    text: text.clone(),
                    file: scenario::resolved_file(&sc),
                })
            }
        }
    }

    /// The scenario with `sets` applied.
    pub fn load(&self, sets: &[String]) -> Result<Scenario, CliError> {
        Ok(match self {
            Source::File(p) => scenario::load(p, sets)?,
            Source::Text { text, path } => scenario::from_str(text, path, sets)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every typed user mistake carries the flag, key or file it is about and exits 2; a
    /// results file that cannot be read at all is I/O (3).
    #[test]
    fn typed_errors_name_their_key_and_exit_2() {
        let flag = CliError::flag("--tp", "--tp 0: must be at least 1".into());
        assert_eq!((flag.key().as_deref(), flag.exit_code()), (Some("--tp"), 2));
        let both = CliError::Conflict {
            flags: &["--trace-events", "--summary-only"],
            message: "pick one".into(),
        };
        assert_eq!(both.key().as_deref(), Some("--trace-events --summary-only"));
        assert_eq!(both.exit_code(), 2);
        let input = CliError::input("results/x", "not a results folder".into());
        assert_eq!(
            (input.key().as_deref(), input.exit_code()),
            (Some("results/x"), 2)
        );
        let shape = CliError::Results(crate::report::schema::ReadError::Shape {
            path: "r/summary.json".into(),
            field: "requests.arrived".into(),
            message: "missing".into(),
            what: "summary.json",
        });
        assert_eq!(
            (shape.key().as_deref(), shape.exit_code()),
            (Some("r/summary.json: requests.arrived"), 2)
        );
        let unreadable = CliError::Results(crate::report::schema::ReadError::Io {
            path: "r/run.json".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(unreadable.exit_code(), 3);
    }
}
