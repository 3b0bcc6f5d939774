//! `pdsim sweep`: its flags; the verb itself is `app::sweep`.

use std::path::PathBuf;

use clap::Args;

use crate::app::sweep::SweepRequest;

/// Arguments of `pdsim sweep`.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// The scenario file (TOML).
    pub scenario: PathBuf,
    /// A grid axis: a dotted scenario key and its values, e.g.
    /// `pools.decode.instances=1,2,4` (values are TOML; inline tables may contain commas).
    #[arg(long = "vary", value_name = "KEY=V1,V2,...")]
    pub vary: Vec<String>,
    /// Seeds per point: `run.seed`, `run.seed + 1`, ….
    #[arg(long, default_value_t = 1)]
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run only the I-th of N interleaved slices of the rows (0-based); join with `pdsim merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Output folder (default `results/<run.name>-sweep/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point, e.g. `run.duration_s=60`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
    /// Continue an interrupted sweep in `--out` (same arguments): its finished points are kept
    /// and the result is byte-identical to an uninterrupted run.
    #[arg(long)]
    pub resume: bool,
}

impl SweepArgs {
    /// The request these flags make.
    pub fn request(&self) -> SweepRequest {
        SweepRequest {
            scenario: crate::app::Source::File(self.scenario.clone()),
            vary: self.vary.clone(),
            seeds: self.seeds,
            jobs: self.jobs,
            shard: self.shard.clone(),
            out: self.out.clone(),
            sets: self.sets.clone(),
            quiet: self.quiet,
            resume: self.resume,
        }
    }
}
