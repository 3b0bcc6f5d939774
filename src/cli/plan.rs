//! `pdsim plan`: its flags; the verb itself is `app::plan`.

use std::path::PathBuf;

use clap::Args;

use crate::app::plan::PlanRequest;

/// Arguments of `pdsim plan`.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// The scenario file (TOML); its `[slo]` is the target. Left out for the one-line
    /// question (`--model`, `--gpu`, `--isl`, `--osl`, `--ttft`, `--tpot`).
    #[arg(required_unless_present = "model")]
    pub scenario: Option<PathBuf>,
    /// The one-line question: a model preset or the Hugging Face id of one (with `--gpu`,
    /// `--isl`, `--osl`, `--ttft`, `--tpot`); the plan builds the scenario and a grid of
    /// disaggregated and colocated deployments of at most `--gpus` GPUs, and writes the
    /// scenario it used to `DIR/scenario.toml`.
    #[arg(long, conflicts_with_all = ["scenario", "vary"], requires_all = ["gpu", "isl", "osl", "ttft", "tpot"])]
    pub model: Option<String>,
    /// The one-line question's GPU preset.
    #[arg(long, requires = "model")]
    pub gpu: Option<String>,
    /// The one-line question's prompt length, tokens.
    #[arg(long, requires = "model")]
    pub isl: Option<u32>,
    /// The one-line question's output length, tokens.
    #[arg(long, requires = "model")]
    pub osl: Option<u32>,
    /// The one-line question's TTFT target for each request, ms (90 % of requests must meet
    /// both targets: DistServe's goodput).
    #[arg(long, requires = "model")]
    pub ttft: Option<f64>,
    /// The one-line question's TPOT target for each request, ms.
    #[arg(long, requires = "model")]
    pub tpot: Option<f64>,
    /// The one-line question's most GPUs a deployment may use; without `--rate`, the plan
    /// finds each deployment's highest rate and marks the highest.
    #[arg(long, requires = "model", default_value_t = crate::app::oneline::DEFAULT_GPUS)]
    pub gpus: u32,
    /// The arrival rate to plan for, requests/s: finds the cheapest grid point (fewest GPUs,
    /// then nodes) that meets `[slo]` on every seed.
    #[arg(
        long,
        conflicts_with = "max_rate",
        required_unless_present_any = ["max_rate", "model"]
    )]
    pub rate: Option<f64>,
    /// Instead: every grid point's highest rate that meets `[slo]` on every seed (bisection).
    #[arg(long)]
    pub max_rate: bool,
    /// A grid axis, as for `pdsim sweep`.
    #[arg(long = "vary", value_name = "KEY=V1,V2,...")]
    pub vary: Vec<String>,
    /// Seeds per point.
    #[arg(long, default_value_t = 3)]
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Output folder (default `results/<run.name>-plan/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// `--max-rate`: stop bisecting when the bracket is this narrow (relative).
    #[arg(long, default_value_t = 0.02)]
    pub tolerance: f64,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
    /// `--rate`: run every point of the grid instead of searching cheapest first (the same
    /// answer; `sweep.csv` then holds every row).
    #[arg(long, conflicts_with = "max_rate")]
    pub full_grid: bool,
    /// Continue an interrupted plan in `--out` (same arguments): finished runs are kept and the
    /// answer is byte-identical to an uninterrupted plan's.
    #[arg(long)]
    pub resume: bool,
    /// Run every simulation to its end: by default a run stops as soon as `[slo]` can no longer
    /// be met (the same verdicts and answer; its row's other figures then cover the requests up
    /// to the stop, and `stopped_early_at_s` says when).
    #[arg(long)]
    pub no_early_stop: bool,
}

impl PlanArgs {
    /// The request these flags make.
    pub fn request(&self) -> PlanRequest {
        let question = self.model.as_ref().map(|m| crate::app::oneline::Question {
            model: m.clone(),
            gpu: self.gpu.clone().unwrap_or_default(),
            isl: self.isl.unwrap_or_default(),
            osl: self.osl.unwrap_or_default(),
            ttft_ms: self.ttft.unwrap_or_default(),
            tpot_ms: self.tpot.unwrap_or_default(),
            gpus: self.gpus,
        });
        PlanRequest {
            scenario: crate::app::Source::File(self.scenario.clone().unwrap_or_default()),
            rate: self.rate,
            // The one-line question without a rate asks what its GPUs serve at most.
            max_rate: self.max_rate || (self.model.is_some() && self.rate.is_none()),
            vary: self.vary.clone(),
            seeds: self.seeds,
            jobs: self.jobs,
            out: self.out.clone(),
            sets: self.sets.clone(),
            tolerance: self.tolerance,
            quiet: self.quiet,
            full_grid: self.full_grid,
            resume: self.resume,
            no_early_stop: self.no_early_stop,
            question,
        }
    }
}
