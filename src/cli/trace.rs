//! `pdsim trace stats FILE [--format F]`: rows, span, mean rate, and the input and output
//! length distribution of a trace.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::CliError;
use crate::workload::trace::{self, TraceFormat};

/// `pdsim trace …`
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// What to do with the trace.
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// Trace verbs.
#[derive(Subcommand, Debug)]
pub enum TraceCommand {
    /// Rows, span, mean rate, and mean/p50/p90/p99 of input and output lengths.
    Stats {
        /// The trace file.
        file: PathBuf,
        /// mooncake, azure, vidur or csv (detected from the file when left out).
        #[arg(long)]
        format: Option<TraceFormat>,
    },
}

/// Runs a trace verb.
pub fn run(args: &TraceArgs) -> Result<(), CliError> {
    match &args.command {
        TraceCommand::Stats { file, format } => {
            let format = match format {
                Some(f) => *f,
                None => trace::detect_format(file)?,
            };
            let rows = trace::read_trace(file, format)?;
            super::print_out(&format!(
                "{} ({})\n{}",
                file.display(),
                format,
                trace::trace_stats(&rows)
            ))
        }
    }
}
