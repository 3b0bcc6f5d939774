//! Autoscalers as policies (issue 38, item 3): what decides, at a simulated time, how many
//! prefill and decode instances a PD cluster should have. Three policies, each a faithful
//! reading of its source (`docs/autoscaling.md` states every rule with its citation):
//!
//! - [`Static`]: the pools keep their sizes (the baseline: what every run did before).
//! - [`SlaPlanner`]: NVIDIA Dynamo's SLA planner — the predictive throughput path every
//!   `throughput_adjustment_interval` (predictors over per-window traffic, regressions of
//!   forward wall time, Little's law, the GPU budget) and the reactive load path every
//!   `load_adjustment_interval` ([`sla_planner`]).
//! - [`Threshold`]: llm-d's saturation analyzer (the workload-variant-autoscaler's V1) behind a
//!   Kubernetes HPA's stabilization windows ([`threshold`]).
//!
//! **The contract with the simulator.** A policy is a pure state machine: it owns its timers
//! and its models, sees only what a real controller sees — an [`Observation`] built by the
//! caller over the windows the policy asked for ([`Tick`]) — and answers a [`Verdict`]:
//! target counts or nothing, always with a reason `explain` can print. It never reads the
//! future, a clock, a file or a random stream; floats stay inside the models and nothing here
//! iterates a hash map, so the same observations give the same verdicts on every machine.
//! Making the pools follow a verdict (cold starts, drains, role switches) is the caller's
//! (`sim`, issue 38 item 2); this floor knows nothing of it.
//!
//! **Floors.** `autoscale` sits below `sim` and above `config`, `engine` and `vocab`: it reads
//! the checked `[autoscaler]` table ([`crate::config::autoscale`]) and the step-time
//! functions a caller hands it ([`StepTimes`]), nothing of the simulation.

pub mod arima;
pub mod bootstrap;
pub mod budget;
pub mod controller;
pub mod fleet;
mod linalg;
pub mod predictor;
pub mod regression;
pub mod sla_planner;
pub mod threshold;

use crate::config::autoscale::Autoscaler as Config;
use crate::engine::Nanos;
use crate::vocab::ids::InstanceId;

pub use sla_planner::SlaPlanner;
pub use threshold::Threshold;

/// What a real controller sees at one of its ticks: windowed traffic from the frontend, the
/// latest load of each serving instance, and the pools' inventory. The caller builds it from
/// what happened before `now_ns` only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observation {
    /// When the tick fires, ns.
    pub now_ns: Nanos,
    /// Traffic over the window that ends now, when the tick asked for one
    /// ([`Tick::traffic_window_ns`]); `None` otherwise.
    pub traffic: Option<Traffic>,
    /// Each serving prefill instance's load, in ascending instance order (starting and
    /// draining instances report none: they are not in the router's set).
    pub prefill: Vec<InstanceLoad>,
    /// Each serving decode instance's load, in ascending instance order.
    pub decode: Vec<InstanceLoad>,
    /// How many instances each pool has, by state.
    pub counts: PoolCounts,
}

/// What the frontend (or router) reports over one window: Dynamo's `TrafficObservation`
/// (`core/types.py`), as its Prometheus queries compute it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Traffic {
    /// The window's length, ns (Dynamo's `duration_s`: demand is `completed / window`).
    pub window_ns: Nanos,
    /// Requests counted in the window (Dynamo's `num_req`): those that ended, whatever their
    /// outcome (`throughput_metrics_source = "frontend"`), or those the router admitted
    /// (`"router"`; `autoscale::controller`).
    pub completed: u64,
    /// Mean input length of those requests, tokens; `None` when none completed (Prometheus
    /// answers NaN, which Dynamo's predictors read as 0).
    pub mean_isl_tokens: Option<f64>,
    /// Mean output length of those requests, tokens; `None` when none completed.
    pub mean_osl_tokens: Option<f64>,
    /// The router's mean prefix hit share at admission (`overlap_blocks / isl_blocks`), 0–1;
    /// `None` without router data.
    pub kv_hit_rate: Option<f64>,
}

/// One serving instance's load, as its scheduler reports it (Dynamo's per-worker forward-pass
/// metrics; vLLM/sglang's `num_requests_waiting` and KV-cache gauges for llm-d).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct InstanceLoad {
    /// The instance.
    pub instance: InstanceId,
    /// Prompt tokens waiting to be prefilled (not yet scheduled), tokens, at the tick.
    pub queued_prefill_tokens: u64,
    /// Requests waiting to be scheduled, at the tick.
    pub queued_requests: u32,
    /// The most requests waiting at any time in the last window (llm-d reads the peak over a
    /// minute).
    pub queued_requests_peak: u32,
    /// Requests in the running decode batch, at the tick.
    pub running_decode_requests: u32,
    /// KV tokens the running decode batch holds, tokens, at the tick (Dynamo's scheduled
    /// `sum_decode_kv_tokens`).
    pub decode_kv_tokens: u64,
    /// KV tokens of requests admitted but waiting for the decode batch (Dynamo's queued
    /// `sum_decode_kv_tokens`), tokens.
    pub queued_decode_kv_tokens: u64,
    /// The instance's KV capacity, tokens.
    pub kv_capacity_tokens: u64,
    /// The largest share of the KV capacity in use at any time in the last window, 0–1
    /// (llm-d's peak `kv_cache_usage`).
    pub kv_usage_peak: f64,
    /// The instance's last forward pass in the last window, `None` when it ran none (Dynamo's
    /// FPM: what its regressions learn from).
    pub last_forward: Option<ForwardPass>,
}

/// One forward pass (Dynamo's `ForwardPassMetrics.scheduled_requests` and `wall_time`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ForwardPass {
    /// Wall time of the forward, seconds (0 reads as "no sample", as Dynamo's regressions
    /// skip it).
    pub wall_s: f64,
    /// Requests whose prompt tokens this forward computed.
    pub prefill_requests: u32,
    /// Prompt tokens computed (cache hits excluded), tokens.
    pub prefill_tokens: u64,
    /// Requests decoded in this forward.
    pub decode_requests: u32,
    /// KV tokens those requests attend to, tokens.
    pub decode_kv_tokens: u64,
}

/// The pools' inventory at a tick.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Prefill instances serving (in the router's set).
    pub prefill_ready: u32,
    /// Prefill instances starting (weights loading, graphs capturing, registering).
    pub prefill_starting: u32,
    /// Prefill instances draining (out of the router's set, finishing what they hold).
    pub prefill_draining: u32,
    /// Decode instances serving.
    pub decode_ready: u32,
    /// Decode instances starting.
    pub decode_starting: u32,
    /// Decode instances draining.
    pub decode_draining: u32,
}

impl PoolCounts {
    /// Both pools steady at `prefill` and `decode` instances.
    pub fn steady(prefill: u32, decode: u32) -> Self {
        Self {
            prefill_ready: prefill,
            decode_ready: decode,
            ..Self::default()
        }
    }

    /// The prefill pool's size as a deployment's replica count: serving plus starting.
    pub fn prefill_replicas(&self) -> u32 {
        self.prefill_ready + self.prefill_starting
    }

    /// The decode pool's size as a deployment's replica count.
    pub fn decode_replicas(&self) -> u32 {
        self.decode_ready + self.decode_starting
    }
}

/// What one engine of a pool can hold, as Dynamo's `WorkerCapabilities` reads it from the
/// worker's runtime config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineCaps {
    /// GPUs one instance uses (its share of the GPU budget).
    pub gpus: u32,
    /// Most tokens in one forward (sglang's `chunked_prefill_size`), tokens.
    pub max_num_batched_tokens: u64,
    /// The instance's KV capacity, tokens.
    pub max_kv_tokens: u64,
    /// Most requests in the running batch (`max_running_requests`), if capped.
    pub max_num_seqs: Option<u32>,
    /// The model's context length (sglang's `--context-length`), tokens.
    pub context_length: u64,
}

/// Both pools' engines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// A prefill instance.
    pub prefill: EngineCaps,
    /// A decode instance.
    pub decode: EngineCaps,
}

/// Forward wall times from the caller's own step model: what the SLA planner's regressions
/// start from before live samples arrive (Dynamo seeds them from AIConfigurator's estimates or
/// a pre-deployment sweep: [`bootstrap`]).
pub trait StepTimes {
    /// One prefill forward of a single request's `tokens` prompt tokens, seconds.
    fn prefill_wall_s(&self, tokens: u64) -> f64;
    /// One decode forward of `batch` requests attending to `kv_tokens` KV tokens in all,
    /// seconds.
    fn decode_wall_s(&self, batch: u32, kv_tokens: u64) -> f64;
}

/// When a policy looks next and what it needs then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tick {
    /// When, ns.
    pub at_ns: Nanos,
    /// The traffic window the observation must carry, ns (`None`: no traffic needed).
    pub traffic_window_ns: Option<Nanos>,
    /// Whether the observation must carry each instance's load.
    pub needs_load: bool,
}

/// Target pool sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Prefill instances.
    pub prefill: u32,
    /// Decode instances.
    pub decode: u32,
}

/// A policy's answer to one observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The sizes to move the pools to, or `None`: leave them as they are.
    pub target: Option<Target>,
    /// Why, in words `explain` prints as they are (the rule, its inputs, its result).
    pub reason: String,
}

impl Verdict {
    /// No change, because `reason`.
    pub fn hold(reason: impl Into<String>) -> Self {
        Self {
            target: None,
            reason: reason.into(),
        }
    }
}

/// An autoscaling policy: its own timer, its own models, observations in, verdicts out.
pub trait Policy {
    /// The policy's next look, `None` when it never looks again.
    fn next_tick(&self) -> Option<Tick>;
    /// The look at [`Policy::next_tick`]'s time; advances the policy's timers.
    fn tick(&mut self, obs: &Observation) -> Verdict;
}

/// The baseline: the pools keep the sizes the scenario gave them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Static;

impl Policy for Static {
    fn next_tick(&self) -> Option<Tick> {
        None
    }

    fn tick(&mut self, _obs: &Observation) -> Verdict {
        Verdict::hold("static: the pools keep the sizes the scenario gives them")
    }
}

/// One of the policies, by the scenario's `autoscaler.policy` (a closed set: dispatch is a
/// match, not a trait object).
#[derive(Clone, Debug)]
pub enum Autoscaler {
    /// `policy = "static"`.
    Static(Static),
    /// `policy = "sla_planner"`.
    SlaPlanner(Box<SlaPlanner>),
    /// `policy = "threshold"`.
    Threshold(Threshold),
}

impl Autoscaler {
    /// The policy a checked `[autoscaler]` table names, its timers started at `start_ns`.
    /// `steps` seeds the SLA planner's regressions under `pre_deployment_sweeping_mode =
    /// "rapid"` (ignored otherwise, and by the other policies).
    pub fn new(
        config: &Config,
        caps: Capabilities,
        start_ns: Nanos,
        steps: Option<&dyn StepTimes>,
    ) -> Self {
        match config {
            Config::Static => Autoscaler::Static(Static),
            Config::SlaPlanner(p) => {
                Autoscaler::SlaPlanner(Box::new(SlaPlanner::new(p.clone(), caps, start_ns, steps)))
            }
            Config::Threshold(p) => Autoscaler::Threshold(Threshold::new(p.clone(), start_ns)),
        }
    }
}

impl Policy for Autoscaler {
    fn next_tick(&self) -> Option<Tick> {
        match self {
            Autoscaler::Static(p) => p.next_tick(),
            Autoscaler::SlaPlanner(p) => p.next_tick(),
            Autoscaler::Threshold(p) => p.next_tick(),
        }
    }

    fn tick(&mut self, obs: &Observation) -> Verdict {
        match self {
            Autoscaler::Static(p) => p.tick(obs),
            Autoscaler::SlaPlanner(p) => p.tick(obs),
            Autoscaler::Threshold(p) => p.tick(obs),
        }
    }
}

/// `x` rounded for a reason string: enough digits to recompute the rule by hand, the same
/// text on every machine (Rust's float formatting is exact and platform-independent).
pub(crate) fn fmt3(x: f64) -> String {
    if x.is_finite() && x.abs() >= 1e6 {
        format!("{x:.4e}")
    } else {
        format!("{x:.3}")
    }
}
