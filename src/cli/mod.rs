//! The command line: one file per verb. `main.rs` only parses and maps errors to exit codes.

pub mod calibrate;
pub mod check;
pub mod explain;
pub mod layout;
pub mod lint;
pub mod merge;
pub mod outdir;
pub mod plan;
pub mod readback;
pub mod run;
pub mod signals;
pub mod sweep;
pub mod trace;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// pdsim — a deterministic simulator of prefill/decode-disaggregated LLM serving.
#[derive(Parser, Debug)]
#[command(name = "pdsim", version, about, long_about = None)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub command: Command,
}

/// Verbs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one scenario and write its results.
    Run(run::RunArgs),
    /// Inspect a request trace.
    Trace(trace::TraceArgs),
    /// Print the KV and state regions one rank registers (sglang's kv_args).
    Layout(layout::LayoutArgs),
    /// Run scenarios with an [expect] table and check it (exit 1 when any expectation fails).
    Check(check::CheckArgs),
    /// Explain a run (a results folder, or a scenario it runs first): what failed, why, where
    /// in sglang, who was hurt, and the flags that fix it.
    Explain(explain::ExplainArgs),
    /// Predict a prefill/decode pair's outcome from two `sglang.launch_server` command lines.
    Lint(lint::LintArgs),
    /// Fit the step-time model to measurements and write a calibration file.
    Calibrate(calibrate::CalibrateArgs),
    /// Run a grid of scenario values × seeds in parallel (summary only per point).
    Sweep(sweep::SweepArgs),
    /// Join the shards of a sweep (`pdsim sweep --shard I/N`).
    Merge(merge::MergeArgs),
    /// The cheapest grid point meeting [slo] at a rate, or each point's highest rate.
    Plan(plan::PlanArgs),
}

/// Why a verb failed, with its exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A bad flag or argument (exit 2).
    #[error("{0}")]
    Usage(String),
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
    /// docs/architecture.md §2: 1 a negative verdict, 2 usage or invalid input, 3 I/O.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_)
            | CliError::Trace(_)
            | CliError::ModelConfig(_)
            | CliError::Layout(_)
            | CliError::Scenario(_)
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

/// Runs the parsed command.
pub fn dispatch(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Run(args) => run::run(&args).map(|_| ()),
        Command::Trace(args) => trace::run(&args),
        Command::Layout(args) => layout::run(&args),
        Command::Check(args) => match check::run(&args)? {
            true => Ok(()),
            false => Err(CliError::Failed(
                "check failed: at least one expectation did not hold (see above)".into(),
            )),
        },
        Command::Explain(args) => explain::run(&args),
        Command::Lint(args) => lint::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Sweep(args) => sweep::run(&args),
        Command::Merge(args) => merge::run(&args),
        Command::Plan(args) => plan::run(&args),
    }
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
