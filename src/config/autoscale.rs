//! The checked `[autoscaler]` table (issue 38, item 3): which policy decides the pool sizes and
//! its settings, every one validated by `scenario` (`scenario/sections/autoscaler.rs`). The
//! policies themselves are `crate::autoscale`; their rules and sources are
//! `docs/autoscaling.md`. Times are whole nanoseconds, latencies milliseconds (as Dynamo's
//! planner states its SLAs), shares fractions in [0, 1].
//!
//! What a scale-up, a drain or a live role switch costs is not a policy setting: the policies
//! only decide counts. It is [`Lifecycle`], checked from the same table and read by `sim`
//! (`docs/autoscaling.md` §7).

use serde::Serialize;

use crate::engine::Nanos;

/// The `policy` key's valid values, in the order messages list them.
pub const POLICIES: [&str; 3] = ["static", "sla_planner", "threshold"];

/// `autoscaler.load_predictor`'s valid values (Dynamo's `LOAD_PREDICTORS` less `prophet`).
pub const LOAD_PREDICTORS: [&str; 3] = ["arima", "kalman", "constant"];

/// `autoscaler.optimization_target`'s valid values (Dynamo's `PlannerConfig`).
pub const OPTIMIZATION_TARGETS: [&str; 3] = ["sla", "throughput", "latency"];

/// `autoscaler.throughput_metrics_source`'s valid values (Dynamo's `PlannerConfig`).
pub const METRICS_SOURCES: [&str; 2] = ["frontend", "router"];

/// Where the throughput path reads its request count (Dynamo's `throughput_metrics_source`,
/// `planner/utils/prometheus.py`, `get_avg_request_count`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricsSource {
    /// `increase(dynamo_frontend_requests_total[window])`: the frontend's counter of requests
    /// that ended, "all success/failed" (Dynamo's default).
    Frontend,
    /// The router's `requests_started_total` (requests admitted in the window), falling back to
    /// its `requests_total`.
    Router,
}

/// `autoscaler.pre_deployment_sweeping_mode`'s valid values.
pub const SWEEPING_MODES: [&str; 2] = ["rapid", "none"];

/// Which policy sizes the pools, with its settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum Autoscaler {
    /// The pools keep the sizes the scenario gives them (what every run did before issue 38).
    #[default]
    Static,
    /// NVIDIA Dynamo's SLA planner.
    SlaPlanner(SlaPlannerParams),
    /// llm-d's saturation-based threshold autoscaler (the workload-variant-autoscaler's V1
    /// analyzer behind a Kubernetes HPA).
    Threshold(ThresholdParams),
}

impl Autoscaler {
    /// The policy's name as the scenario writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Autoscaler::Static => "static",
            Autoscaler::SlaPlanner(_) => "sla_planner",
            Autoscaler::Threshold(_) => "threshold",
        }
    }

    /// Whether the policy may change a pool's size during a run.
    pub fn resizes(&self) -> bool {
        !matches!(self, Autoscaler::Static)
    }
}

/// Dynamo's `optimization_target` (`config/planner_config.py`, `PlannerConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizationTarget {
    /// Regression-based scaling against `ttft_ms` / `itl_ms` (throughput and load paths).
    Sla,
    /// Static thresholds on queue depth and KV use, tuned for throughput (load path only).
    Throughput,
    /// Static thresholds tuned for latency (load path only).
    Latency,
}

/// Dynamo's load predictors (`core/load/predictors.py`, `LOAD_PREDICTORS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadPredictor {
    /// The next window equals the last.
    Constant,
    /// pmdarima's `auto_arima`, as pdsim approximates it (`autoscale/arima.rs`).
    Arima,
    /// filterpy's Kalman filter over a local linear trend.
    Kalman,
}

/// Where the planner's regressions start (Dynamo's `pre_deployment_sweeping_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepingMode {
    /// Seeded with a sweep of forward times, as Dynamo's rapid mode seeds them from
    /// AIConfigurator; pdsim sweeps its own step model (`autoscale/bootstrap.rs`).
    Rapid,
    /// No seed: the regressions wait for `load_min_observations` live forwards.
    None,
}

/// The SLA planner's settings; every default is Dynamo's (`config/defaults.py`,
/// `SLAPlannerDefaults`, @1ca6015) unless its doc says otherwise.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlaPlannerParams {
    /// `optimization_target`; pdsim's default is `sla` (Dynamo's `PlannerConfig` defaults to
    /// `throughput`, its threshold-only "easy" mode, which the policy named `sla_planner` is
    /// not).
    pub optimization_target: OptimizationTarget,
    /// The predictive path's period (`throughput_adjustment_interval`, 180 s), ns.
    pub throughput_adjustment_interval_ns: Nanos,
    /// The reactive path's period, which also feeds the regressions
    /// (`load_adjustment_interval`, 5 s), ns.
    pub load_adjustment_interval_ns: Nanos,
    /// `enable_throughput_scaling` (true; false under a threshold target).
    pub enable_throughput_scaling: bool,
    /// `enable_load_scaling` (false; true under a threshold target).
    pub enable_load_scaling: bool,
    /// Fewest instances of each pool (`min_endpoint`, 1).
    pub min_endpoint: u32,
    /// Most GPUs of both pools together (`max_gpu_budget`, 8); `None` disables the ceiling
    /// (Dynamo: a negative budget).
    pub max_gpu_budget: Option<u32>,
    /// Fewest GPUs of both pools together (`min_gpu_budget`, disabled: Dynamo's later
    /// `PlannerConfig` and `core/budget.py`).
    pub min_gpu_budget: Option<u32>,
    /// The TTFT target (`ttft`, 500 ms; pdsim takes `slo.ttft_ms` when set), ms.
    pub ttft_ms: f64,
    /// The ITL target (`itl`, 50 ms; pdsim takes `slo.tpot_ms` when set), ms.
    pub itl_ms: f64,
    /// `load_predictor` (`arima`).
    pub load_predictor: LoadPredictor,
    /// Fit the predictors in log1p space (`load_predictor_log1p`, false).
    pub load_predictor_log1p: bool,
    /// Kalman process noise of the level (`kalman_q_level`, 1.0).
    pub kalman_q_level: f64,
    /// Kalman process noise of the trend (`kalman_q_trend`, 0.1).
    pub kalman_q_trend: f64,
    /// Kalman measurement noise (`kalman_r`, 10.0).
    pub kalman_r: f64,
    /// Forward samples each regression keeps (`max_num_fpm_samples`, 64).
    pub max_num_fpm_samples: u32,
    /// Buckets the kept samples spread over (`fpm_sample_bucket_size`, 16; a perfect square).
    pub fpm_sample_bucket_size: u32,
    /// Samples before a regression is trusted (`load_min_observations`, 5).
    pub load_min_observations: u32,
    /// Share, in percent, of the SLA headroom a scale-down may use (`load_scaling_down_sensitivity`,
    /// 80).
    pub load_scaling_down_sensitivity: u32,
    /// `pre_deployment_sweeping_mode` (`rapid`).
    pub pre_deployment_sweeping_mode: SweepingMode,
    /// `throughput_metrics_source` (`frontend`).
    pub throughput_metrics_source: MetricsSource,
}

impl Default for SlaPlannerParams {
    fn default() -> Self {
        Self {
            optimization_target: OptimizationTarget::Sla,
            throughput_adjustment_interval_ns: 180 * crate::engine::NS_PER_S,
            load_adjustment_interval_ns: 5 * crate::engine::NS_PER_S,
            enable_throughput_scaling: true,
            enable_load_scaling: false,
            min_endpoint: 1,
            max_gpu_budget: Some(8),
            min_gpu_budget: None,
            ttft_ms: 500.0,
            itl_ms: 50.0,
            load_predictor: LoadPredictor::Arima,
            load_predictor_log1p: false,
            kalman_q_level: 1.0,
            kalman_q_trend: 0.1,
            kalman_r: 10.0,
            max_num_fpm_samples: 64,
            fpm_sample_bucket_size: 16,
            load_min_observations: 5,
            load_scaling_down_sensitivity: 80,
            pre_deployment_sweeping_mode: SweepingMode::Rapid,
            throughput_metrics_source: MetricsSource::Frontend,
        }
    }
}

/// The threshold policy's settings: llm-d workload-variant-autoscaler's saturation thresholds
/// (`deploy/configmap-saturation-scaling.yaml`, `docs/saturation-analyzer.md`) and the
/// Kubernetes HPA behaviour its Helm chart installs (`docs/integrations/hpa-integration.md`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ThresholdParams {
    /// How often the analyzer looks (the controller's reconcile loop, "typically every 60s"),
    /// ns; each look reads the peak of the window since the last.
    pub interval_ns: Nanos,
    /// A replica is saturated at or above this KV-cache use (`kvCacheThreshold`, 0.80), 0–1.
    pub kv_cache_threshold: f64,
    /// … or at or above this many waiting requests (`queueLengthThreshold`, 5).
    pub queue_length_threshold: f64,
    /// Scale up when the non-saturated replicas' mean spare KV falls below this
    /// (`kvSpareTrigger`, 0.1), 0–1.
    pub kv_spare_trigger: f64,
    /// … or their mean spare queue below this (`queueSpareTrigger`, 3), requests.
    pub queue_spare_trigger: f64,
    /// HPA `behavior.scaleUp.stabilizationWindowSeconds` (240 in the chart), ns.
    pub scale_up_stabilization_ns: Nanos,
    /// HPA `behavior.scaleDown.stabilizationWindowSeconds` (240 in the chart), ns.
    pub scale_down_stabilization_ns: Nanos,
    /// HPA `minReplicas` per pool (1).
    pub min_replicas: u32,
    /// HPA `maxReplicas` per pool (10, the chart's sample HPA).
    pub max_replicas: u32,
}

impl Default for ThresholdParams {
    fn default() -> Self {
        Self {
            interval_ns: 60 * crate::engine::NS_PER_S,
            kv_cache_threshold: 0.80,
            queue_length_threshold: 5.0,
            kv_spare_trigger: 0.1,
            queue_spare_trigger: 3.0,
            scale_up_stabilization_ns: 240 * crate::engine::NS_PER_S,
            scale_down_stabilization_ns: 240 * crate::engine::NS_PER_S,
            min_replicas: 1,
            max_replicas: 10,
        }
    }
}

/// The default weight read rate per GPU at a cold start, bytes/s: 1.7 GiB/s, what one vLLM
/// rank streamed its checkpoint shard at from a VAST cluster over NFS/RDMA
/// (`run-ai/runai-model-streamer` issue #135: "69.3 GiB … 41.52s, 1.7 GiB/s"), each rank of
/// an instance reading its own shard at once.
pub const DEFAULT_WEIGHT_LOAD_BYTES_PER_S: f64 = 1.7 * 1024.0 * 1024.0 * 1024.0;

/// The default CUDA-graph capture of a starting server, ns: 12 s, sglang's "Capture cuda graph
/// end. Time elapsed: 12.11 s" for a main model on FA3 (sgl-project/sglang issue #10088); sglang
/// captures after the weights are loaded (`--startup-weight-load-mode serial`, the default,
/// PR #32017).
pub const DEFAULT_CUDA_GRAPH_CAPTURE_NS: Nanos = 12 * crate::engine::NS_PER_S;

/// The default period at which the router checks a worker it was told to add, ns: 30 s,
/// sgl-router's `worker_startup_check_interval` (`RouterArgs`, `router_args.py`): the worker
/// joins the rotation at the first check that finds it healthy.
pub const DEFAULT_ROUTER_CHECK_INTERVAL_NS: Nanos = 30 * crate::engine::NS_PER_S;

/// Index of the prefill pool in [`Lifecycle`]'s pairs.
pub const PREFILL: usize = 0;
/// Index of the decode pool in [`Lifecycle`]'s pairs.
pub const DECODE: usize = 1;

/// How pools change size at run time (issue 38, item 2), for a policy that resizes: the slots
/// placed before the run, and what a cold start and a live role switch cost. Pairs are
/// `[prefill, decode]` ([`PREFILL`], [`DECODE`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Lifecycle {
    /// Instances of each pool serving at the start (the scenario's `instances`).
    pub initial: [u32; 2],
    /// Most instances each pool may hold at once: the slots the scenario places (each pool's
    /// `instances` in the checked scenario is this), from the policy's bounds
    /// (`max_gpu_budget`, `max_replicas`).
    pub slots: [u32; 2],
    /// GPUs of one instance of each pool.
    pub gpus: [u32; 2],
    /// Weight bytes each GPU of an instance of each pool reads at a cold start, bytes.
    pub weight_bytes_per_gpu: [u64; 2],
    /// A cold start's length from launch to healthy, ns, when the scenario states it
    /// (`startup_s`); else weights ÷ rate + graph capture.
    pub startup_ns: Option<Nanos>,
    /// Weight read rate per GPU, bytes/s (`weight_load_gb_per_s`).
    pub weight_load_bytes_per_s: f64,
    /// CUDA-graph capture, ns (`cuda_graph_capture_s`).
    pub cuda_graph_capture_ns: Nanos,
    /// The router's check period for a worker it adds, ns (`router_check_interval_s`).
    pub router_check_interval_ns: Nanos,
    /// Whether a pool that grows while the other shrinks flips instances live
    /// (`--enable-pd-role-switch`, sglang PR #28403) instead of draining one and cold-starting
    /// another.
    pub role_switch: bool,
    /// The engines' `--context-length` as the planner reads it (`context_length`), tokens;
    /// `None`: the longest request the workload can make (`sim::scaling`).
    pub context_length: Option<u64>,
}

impl Lifecycle {
    /// Servers of pool `role` serving at the start (`initial`, indexed prefill then decode).
    pub fn initial_of(&self, role: super::Role) -> u32 {
        self.initial[usize::from(role == super::Role::Decode)]
    }

    /// How long a server of pool `role` takes from launch until it is healthy, ns: the stated
    /// `startup_s`, else its GPU's weight shard at the read rate, then CUDA-graph capture
    /// (serial, sglang's default).
    pub fn healthy_after_ns(&self, role: usize) -> Nanos {
        self.startup_ns.unwrap_or_else(|| {
            let weights_s = self.weight_bytes_per_gpu[role] as f64 / self.weight_load_bytes_per_s;
            crate::engine::ns_from_secs_ceil(weights_s) + self.cuda_graph_capture_ns
        })
    }

    /// When the router admits a worker that is healthy `healthy_ns` after it was added, ns
    /// after the add: at the first of its checks (at the add, then every
    /// `router_check_interval`) that finds it healthy (sgl-router's startup wait loop).
    pub fn admitted_after_ns(&self, healthy_ns: Nanos) -> Nanos {
        let every = self.router_check_interval_ns.max(1);
        healthy_ns.div_ceil(every) * every
    }

    /// A cold start of pool `role`: launch to the router's rotation, ns.
    pub fn cold_start_ns(&self, role: usize) -> Nanos {
        self.admitted_after_ns(self.healthy_after_ns(role))
    }

    /// A live switch of a drained server into pool `to`: teardown and rebuild of the transfer
    /// state in place, no weight reload, no KV-pool reallocation; a server becoming decode
    /// captures its decode CUDA graphs (sglang PR #28403: "decode CUDA graph captured on the
    /// flip"); then the router's check. ns.
    pub fn switch_ns(&self, to: usize) -> Nanos {
        let healthy = if to == DECODE {
            self.cuda_graph_capture_ns
        } else {
            0
        };
        self.admitted_after_ns(healthy)
    }
}
