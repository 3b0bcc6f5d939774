//! `pdsim run`: its flags; the verb itself is `app::run`.

use std::path::PathBuf;

use clap::Args;

use crate::app::run::RunRequest;

/// Arguments of `pdsim run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The scenario file (TOML).
    pub scenario: PathBuf,
    /// Overrides `run.seed`.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Output folder (default `results/<run.name>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides any scenario key by its dotted path, e.g. `pools.decode.server.tp_size=8`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Draw the charts as PNG instead of SVG (needs a build with `--features png`).
    #[arg(long)]
    pub png: bool,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
    /// Write `summary.json` and `run.json` only: no per-request, timeseries or link rows, no
    /// charts (for sweeps; the summary is byte-identical to a full run's).
    #[arg(long)]
    pub summary_only: bool,
    /// Also write `trace.json` (Chrome/Perfetto trace events: a track per instance and per
    /// transfer shard, a span per request phase, fault markers) for ui.perfetto.dev.
    #[arg(long)]
    pub trace_events: bool,
}

impl RunArgs {
    /// The request these flags make.
    pub fn request(&self) -> RunRequest {
        RunRequest {
            scenario: crate::app::Source::File(self.scenario.clone()),
            seed: self.seed,
            out: self.out.clone(),
            sets: self.sets.clone(),
            png: self.png,
            quiet: self.quiet,
            summary_only: self.summary_only,
            trace_events: self.trace_events,
        }
    }
}
