//! Scenario files: parsed with serde (`deny_unknown_fields`), overridden by `--set`, then
//! validated once into a [`Scenario`] that the simulation trusts. Every error names the file,
//! the line where one can be found, the key, and what would be valid.

pub mod file;
pub mod locate;
pub mod set;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::engine::{NS_PER_US, Nanos, ns_from_secs_ceil};
use crate::spec::{GpuSpec, ModelSpec, ServerArgs, gpu, model, server};
pub use file::{ArrivalSection, LengthSection, Role, RouterPolicy, ScenarioFile};

/// An invalid scenario: where, which key, and what would be valid.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    /// The scenario file.
    pub file: PathBuf,
    /// 1-based line, where one is known.
    pub line: Option<usize>,
    /// Dotted key path (`pools.decode.server.tp_size`), or empty for the whole file.
    pub key: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

pub use crate::layout::Profile;

/// A validated pool.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Unique name.
    pub name: String,
    /// Prefill or decode.
    pub role: Role,
    /// Number of instances (≥ 1).
    pub instances: u32,
    /// Server arguments.
    pub server: ServerArgs,
    /// The model this pool serves.
    pub model: ModelSpec,
    /// Bytes per KV element (from `kv_cache_dtype` and the model).
    pub kv_dtype_bytes: u32,
    /// Measured step times replacing the roofline model (`pools.step_times`).
    pub step_times: Option<std::sync::Arc<crate::cluster::profile::MeasuredProfile>>,
    /// First node of this pool (`pools.node`), or `None` for the next free node.
    pub node: Option<u32>,
    /// Rank 0's layout (KV regions, state regions, aux rows).
    pub layout: std::sync::Arc<Vec<crate::layout::RankLayout>>,
    /// Mamba/GDN state slots per instance (0 for models without recurrent layers).
    pub state_slots: u32,
}

/// A validated arrival process.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// Exponential gaps, `rate_per_s` > 0.
    Poisson {
        /// Mean arrivals per second.
        rate_per_s: f64,
    },
    /// Even gaps of `1 / rate_per_s`.
    Constant {
        /// Arrivals per second.
        rate_per_s: f64,
    },
    /// Gamma gaps with mean `1 / rate_per_s` and coefficient of variation `cv`.
    Gamma {
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
    /// Poisson at `rate_per_s` during `on_ns`, silent during `off_ns`, repeating.
    OnOff {
        /// Arrivals per second while on.
        rate_per_s: f64,
        /// Burst length, ns.
        on_ns: Nanos,
        /// Silence length, ns.
        off_ns: Nanos,
    },
    /// Non-homogeneous Poisson with a piecewise-constant rate: `(until_ns, rate_per_s)` steps.
    Schedule {
        /// Steps in increasing `until_ns`; the last rate holds afterwards.
        steps: std::sync::Arc<Vec<(Nanos, f64)>>,
    },
}

/// A validated length distribution, tokens.
#[derive(Clone, Debug, PartialEq)]
pub enum Lengths {
    /// Always this many tokens.
    Fixed(u32),
    /// Uniform on `[min, max]`.
    Uniform {
        /// Tokens.
        min: u32,
        /// Tokens.
        max: u32,
    },
    /// Log-normal with the given mean and coefficient of variation, clamped to `[min, max]`.
    Lognormal {
        /// Mean, tokens.
        mean: f64,
        /// Coefficient of variation.
        cv: f64,
        /// Tokens.
        min: u32,
        /// Tokens.
        max: u32,
    },
    /// Uniform choice among these lengths (from a file).
    Empirical(std::sync::Arc<Vec<u32>>),
}

impl Lengths {
    /// The largest length this distribution can produce.
    pub fn max(&self) -> u32 {
        match self {
            Lengths::Fixed(v) => *v,
            Lengths::Uniform { max, .. } | Lengths::Lognormal { max, .. } => *max,
            Lengths::Empirical(v) => v.iter().copied().max().unwrap_or(0),
        }
    }
}

/// A validated workload.
#[derive(Clone, Debug)]
pub enum Workload {
    /// Generated from an arrival process and two length distributions.
    Synthetic {
        /// Arrival process.
        arrival: Arrival,
        /// Prompt lengths.
        input: Lengths,
        /// Output lengths.
        output: Lengths,
    },
    /// Replayed from a trace: arrival times already scaled, in arrival order.
    Trace {
        /// The rows to replay.
        rows: std::sync::Arc<Vec<crate::workload::trace::TraceRow>>,
    },
}

/// Fabric parameters.
#[derive(Clone, Debug, Serialize)]
pub struct FabricParams {
    /// `rail` or `leaf_spine`.
    #[serde(skip)]
    pub kind: crate::fabric::TopologyKind,
    /// Nodes under one leaf switch.
    pub nodes_per_leaf: u32,
    /// Uplink oversubscription (≥ 1).
    pub oversubscription: f64,
    /// Per-NIC line rate, bytes per nanosecond (Gb/s ÷ 8).
    pub nic_bytes_per_ns: f64,
    /// NICs per node.
    pub nics_per_node: u32,
    /// Latency a transfer pays before its bytes flow, ns.
    pub base_latency_ns: Nanos,
    /// Latency of a control message, ns.
    pub control_latency_ns: Nanos,
}

/// sglang's PD knobs.
#[derive(Clone, Debug, Serialize)]
pub struct SglangParams {
    /// Behaviour profile.
    pub profile: Profile,
    /// Decode `WaitingForInput` timeout, ns.
    pub waiting_timeout_ns: Nanos,
    /// Prefill `Bootstrapping` timeout, ns.
    pub bootstrap_timeout_ns: Nanos,
    /// Transfer-queue shards per prefill instance.
    pub queue_size: u32,
}

/// Latency targets.
#[derive(Clone, Copy, Debug, Serialize, Default)]
pub struct Slo {
    /// TTFT target, ns.
    pub ttft_ns: Option<Nanos>,
    /// TPOT target, ns.
    pub tpot_ns: Option<Nanos>,
}

/// A scenario the simulation can trust: every key checked, every path resolved.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// `run.name`: safe as a folder name.
    pub name: String,
    /// Seed of every random stream.
    pub seed: u64,
    /// Arrivals stop at this time, ns.
    pub duration_ns: Nanos,
    /// At most this many arrivals.
    pub max_requests: Option<u64>,
    /// The run stops at `duration_ns + drain_timeout_ns` whatever is in flight.
    pub drain_timeout_ns: Nanos,
    /// The GPU every instance runs on.
    pub gpu: GpuSpec,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Prefill pools then decode pools, in file order within each role.
    pub pools: Vec<Pool>,
    /// Fabric parameters.
    pub fabric: FabricParams,
    /// Faults in time order.
    pub faults: Vec<FaultSpec>,
    /// Nodes the placement uses.
    pub nodes: u32,
    /// Workload.
    pub workload: Workload,
    /// Router policy.
    pub router: RouterPolicy,
    /// sglang knobs.
    pub sglang: SglangParams,
    /// Latency targets.
    pub slo: Slo,
    /// The transfer plan of every (prefill pool, decode pool) pair, by pool index.
    pub plans: std::collections::BTreeMap<(usize, usize), std::sync::Arc<crate::layout::PairPlan>>,
    /// The file as resolved after `--set`, recorded in `run.json`.
    pub resolved: ScenarioFile,
    /// Where the scenario was read from.
    pub source: PathBuf,
}

/// Reads, overrides and validates a scenario file.
pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        line: None,
        key: String::new(),
        message: format!("cannot read the scenario file: {e}"),
    })?;
    from_str(&text, path, sets)
}

/// Parses, overrides and validates scenario `text` read from `path` (used to resolve relative
/// paths and to name the file in errors).
pub fn from_str(text: &str, path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
    let err_at = |line: Option<usize>, key: &str, message: String| ScenarioError {
        file: path.to_path_buf(),
        line,
        key: key.to_string(),
        message,
    };
    // Deserializing the text itself keeps TOML's spans, so type errors and unknown keys get a line.
    let parsed: Result<ScenarioFile, toml::de::Error> = toml::from_str(text);
    let file = match (parsed, sets.is_empty()) {
        (Ok(f), true) => f,
        (Err(e), _) => return Err(toml_error(text, path, &e, "")),
        (Ok(_), false) => {
            let mut table: toml::Table =
                toml::from_str(text).map_err(|e| toml_error(text, path, &e, ""))?;
            for s in sets {
                set::apply_set(&mut table, s).map_err(|m| err_at(None, "", m))?;
            }
            let value = toml::Value::Table(table);
            value
                .try_into::<ScenarioFile>()
                .map_err(|e| toml_error(text, path, &e, " (after --set)"))?
        }
    };
    validate(file, text, path)
}

fn toml_error(text: &str, path: &Path, e: &toml::de::Error, suffix: &str) -> ScenarioError {
    let line = e
        .span()
        .filter(|_| suffix.is_empty())
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    ScenarioError {
        file: path.to_path_buf(),
        line,
        key: String::new(),
        message: format!("{}{suffix}", e.message().trim_end()),
    }
}

struct Checker<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Checker<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.path.to_path_buf(),
            line: locate::line_of(self.text, key),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn positive(&self, key: &str, v: f64, what: &str) -> Result<f64, ScenarioError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(self.err(key, format!("must be a positive number ({what}), got {v}")))
        }
    }

    fn non_negative(&self, key: &str, v: f64, what: &str) -> Result<f64, ScenarioError> {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(self.err(key, format!("must be ≥ 0 ({what}), got {v}")))
        }
    }

    fn resolve_path(&self, rel: &str) -> PathBuf {
        let base = self.path.parent().unwrap_or(Path::new("."));
        base.join(rel)
    }

    fn model(&self, key: &str, r: &file::ModelRef) -> Result<ModelSpec, ScenarioError> {
        match (&r.preset, &r.config) {
            (Some(p), None) => model::preset(p).ok_or_else(|| {
                self.err(
                    &format!("{key}.preset"),
                    format!(
                        "unknown model preset {p:?}; valid presets: {}",
                        model::MODEL_PRESETS.join(", ")
                    ),
                )
            }),
            (None, Some(c)) => {
                let p = self.resolve_path(c);
                crate::spec::hf::load_model_config(&p)
                    .map_err(|e| self.err(&format!("{key}.config"), e.to_string()))
            }
            _ => Err(self.err(
                key,
                "give exactly one of preset = \"<name>\" or config = \"<path to config.json>\"",
            )),
        }
    }
}

fn validate(file: ScenarioFile, text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    let c = Checker { text, path };
    let run = &file.run;
    if run.name.is_empty()
        || !run
            .name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        || run.name.starts_with('.')
    {
        return Err(c.err(
            "run.name",
            format!(
                "{:?} is not a usable folder name; use letters, digits, '-', '_' and '.'",
                run.name
            ),
        ));
    }
    let duration_s = c.positive("run.duration_s", run.duration_s, "seconds of arrivals")?;
    let drain_s = c.non_negative("run.drain_timeout_s", run.drain_timeout_s, "seconds")?;
    if run.max_requests == Some(0) {
        return Err(c.err("run.max_requests", "must be ≥ 1 (or left out for no bound)"));
    }

    // Hardware.
    let hw = &file.hardware;
    let mut gpu = gpu::gpu_preset(&hw.gpu).ok_or_else(|| {
        c.err(
            "hardware.gpu",
            format!(
                "unknown GPU preset {:?}; valid presets: {}",
                hw.gpu,
                gpu::GPU_PRESETS.join(", ")
            ),
        )
    })?;
    if let Some(t) = hw.bf16_tflops {
        gpu.bf16_tflops = c.positive("hardware.bf16_tflops", t, "TFLOP/s")?;
    }
    if let Some(g) = hw.hbm_gb {
        gpu.hbm_bytes = (c.positive("hardware.hbm_gb", g, "GB")? * 1e9) as u64;
    }
    if let Some(b) = hw.hbm_tb_s {
        gpu.hbm_bytes_per_s = c.positive("hardware.hbm_tb_s", b, "TB/s")? * 1e12;
    }
    if hw.gpus_per_node == 0 {
        return Err(c.err("hardware.gpus_per_node", "must be ≥ 1, e.g. 8"));
    }

    // Pools.
    let default_model = match &file.model {
        Some(r) => Some(c.model("model", r)?),
        None => None,
    };
    let mut pools = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for p in &file.pools {
        let key = format!("pools.{}", p.name);
        if p.name.is_empty() {
            return Err(c.err("pools", "every pool needs a non-empty name"));
        }
        if seen.contains(&p.name.as_str()) {
            return Err(c.err(
                &key,
                format!(
                    "duplicate pool name {:?}; pool names must be unique",
                    p.name
                ),
            ));
        }
        seen.push(&p.name);
        if p.instances == 0 {
            return Err(c.err(&format!("{key}.instances"), "must be ≥ 1"));
        }
        let s = &p.server;
        let k = |f: &str| format!("{key}.server.{f}");
        if s.tp_size == 0 || !hw.gpus_per_node.is_multiple_of(s.tp_size) {
            return Err(c.err(
                &k("tp_size"),
                format!(
                    "{} does not divide hardware.gpus_per_node = {}; use one of {}",
                    s.tp_size,
                    hw.gpus_per_node,
                    divisors(hw.gpus_per_node)
                ),
            ));
        }
        let attn_tp = s.attn_tp_size.unwrap_or(s.tp_size);
        if attn_tp == 0 || !s.tp_size.is_multiple_of(attn_tp) {
            return Err(c.err(
                &k("attn_tp_size"),
                format!(
                    "{attn_tp} must divide tp_size = {} (attention TP = tp_size / dp); use one of {}",
                    s.tp_size,
                    divisors(s.tp_size)
                ),
            ));
        }
        if s.page_size == 0 {
            return Err(c.err(&k("page_size"), "must be ≥ 1 token, e.g. 1, 16 or 64"));
        }
        if s.max_prefill_tokens == 0 {
            return Err(c.err(&k("max_prefill_tokens"), "must be ≥ 1 token, e.g. 16384"));
        }
        if s.chunked_prefill_size == 0 {
            return Err(c.err(&k("chunked_prefill_size"), "must be ≥ 1 token, e.g. 8192"));
        }
        if !(s.mem_fraction_static > 0.0 && s.mem_fraction_static <= 1.0) {
            return Err(c.err(
                &k("mem_fraction_static"),
                format!("must be in (0, 1], got {}", s.mem_fraction_static),
            ));
        }
        if s.radix_cache_tokens == Some(0) {
            return Err(c.err(
                &k("radix_cache_tokens"),
                "must be ≥ 1 token; to turn the cache off set disable_radix_cache = true",
            ));
        }
        if s.max_running_requests == Some(0) {
            return Err(c.err(&k("max_running_requests"), "must be ≥ 1 (or left out)"));
        }
        let model = match (&p.model, &default_model) {
            (Some(r), _) => c.model(&format!("{key}.model"), r)?,
            (None, Some(m)) => m.clone(),
            (None, None) => {
                return Err(c.err(
                    "model",
                    format!(
                        "no [model] table and pool {:?} sets no model; add [model] preset = \"llama-3.1-8b\"",
                        p.name
                    ),
                ));
            }
        };
        let server = ServerArgs {
            tp_size: s.tp_size,
            attn_tp_size: attn_tp,
            page_size: s.page_size,
            kv_cache_dtype: s.kv_cache_dtype.clone(),
            enable_unified_memory: s.enable_unified_memory,
            chunked_prefill_size: s.chunked_prefill_size,
            max_prefill_tokens: s.max_prefill_tokens,
            mem_fraction_static: s.mem_fraction_static,
            max_running_requests: s.max_running_requests,
            radix_cache: (!s.disable_radix_cache).then_some(s.radix_cache_tokens),
        };
        let kv_dtype_bytes = server
            .kv_dtype_bytes(model.activation_bytes)
            .ok_or_else(|| {
                c.err(
                    &k("kv_cache_dtype"),
                    format!(
                        "unknown KV cache dtype {:?}; valid: {}",
                        s.kv_cache_dtype,
                        server::KV_CACHE_DTYPES.join(", ")
                    ),
                )
            })?;
        if server.enable_unified_memory && !model.is_hybrid() {
            return Err(c.err(
                &k("enable_unified_memory"),
                format!(
                    "model {} has no hybrid (mamba/GDN/SWA) layers: sglang's unified pool needs at least two sub-pools, so the server would not start; set it to false",
                    model.name
                ),
            ));
        }
        let per_gpu_weights = model.weight_bytes_total() / f64::from(s.tp_size);
        let budget = gpu.hbm_bytes as f64 * s.mem_fraction_static;
        if per_gpu_weights >= budget {
            return Err(c.err(
                &k("tp_size"),
                format!(
                    "model {} needs {:.1} GB of weights per GPU at tp_size = {}, more than {:.1} GB ({} HBM × mem_fraction_static {}); raise tp_size",
                    model.name,
                    per_gpu_weights / 1e9,
                    s.tp_size,
                    budget / 1e9,
                    gpu.name,
                    s.mem_fraction_static
                ),
            ));
        }
        let layouts = crate::layout::RankLayout::all_ranks(&model, &server)
            .map_err(|e| c.err(&format!("{key}.server"), e.to_string()))?;
        let state_slots = if model.is_hybrid() {
            server.max_running_requests.unwrap_or(DEFAULT_STATE_SLOTS)
        } else {
            0
        };
        let step_times = match &p.step_times {
            Some(path) => Some(std::sync::Arc::new(
                crate::cluster::profile::load_profile(&c.resolve_path(path))
                    .map_err(|e| c.err(&format!("{key}.step_times"), e.to_string()))?,
            )),
            None => None,
        };
        pools.push(Pool {
            name: p.name.clone(),
            role: p.role,
            instances: p.instances,
            server,
            model,
            kv_dtype_bytes,
            step_times,
            layout: std::sync::Arc::new(layouts),
            state_slots,
            node: p.node,
        });
    }
    for p in pools
        .iter_mut()
        .filter(|p| p.server.enable_unified_memory && p.state_slots > 0)
    {
        // One shared pool: slots and pages compete for the same bytes (§1.6).
        p.state_slots = crate::cluster::placement::unified_slots(&gpu, p, MAX_UNIFIED_SLOTS);
    }
    for p in &pools {
        if crate::cluster::placement::kv_pages(&gpu, p) == 0 {
            let key = format!("pools.{}.server.mem_fraction_static", p.name);
            return Err(c.err(
                &key,
                format!(
                    "leaves no room for KV cache: {:.2} GB per GPU after weights ({:.2} GB at tp_size {}) and activations; raise mem_fraction_static or tp_size",
                    crate::cluster::placement::kv_budget_bytes(&gpu, p).max(0.0) / 1e9,
                    p.model.weight_bytes_total() / f64::from(p.server.tp_size) / 1e9,
                    p.server.tp_size
                ),
            ));
        }
    }
    for role in [Role::Prefill, Role::Decode] {
        if !pools.iter().any(|p| p.role == role) {
            return Err(c.err(
                "pools",
                format!(
                    "no {} pool: a PD cluster needs at least one [[pools]] with role = \"prefill\" and one with role = \"decode\"",
                    role.as_str()
                ),
            ));
        }
    }
    pools.sort_by_key(|p| p.role);

    // Fabric.
    let f = &file.fabric;
    let nic_gbps = c.positive("fabric.nic_gbps", f.nic_gbps, "Gb/s per NIC")?;
    let nics_per_node = f.nics_per_node.unwrap_or(hw.gpus_per_node);
    if nics_per_node == 0 {
        return Err(c.err("fabric.nics_per_node", "must be ≥ 1 (default: one per GPU)"));
    }
    let base_latency_us = c.non_negative("fabric.base_latency_us", f.base_latency_us, "µs")?;
    let control_latency_us =
        c.non_negative("fabric.control_latency_us", f.control_latency_us, "µs")?;
    let kind = match f.topology.as_str() {
        "rail" => crate::fabric::TopologyKind::Rail,
        "leaf_spine" => crate::fabric::TopologyKind::LeafSpine,
        other => {
            return Err(c.err(
                "fabric.topology",
                format!("unknown topology {other:?}; valid: rail, leaf_spine"),
            ));
        }
    };
    if f.nodes_per_leaf == 0 {
        return Err(c.err("fabric.nodes_per_leaf", "must be ≥ 1, e.g. 8"));
    }
    if !(f.oversubscription.is_finite() && f.oversubscription >= 1.0) {
        return Err(c.err(
            "fabric.oversubscription",
            format!(
                "must be ≥ 1 (1 is non-blocking, 4 gives each uplink a quarter), got {}",
                f.oversubscription
            ),
        ));
    }
    let fabric = FabricParams {
        kind,
        nodes_per_leaf: f.nodes_per_leaf,
        oversubscription: f.oversubscription,
        nic_bytes_per_ns: nic_gbps / 8.0,
        nics_per_node,
        base_latency_ns: (base_latency_us * NS_PER_US as f64).ceil() as Nanos,
        control_latency_ns: (control_latency_us * NS_PER_US as f64).ceil() as Nanos,
    };

    // Workload.
    let w = &file.workload;
    let workload = match (&w.trace, &w.arrival, &w.input_tokens, &w.output_tokens) {
        (Some(t), None, None, None) => trace_workload(&c, t)?,
        (Some(_), ..) => {
            return Err(c.err(
                "workload.trace",
                "a trace gives arrivals and lengths itself: remove arrival, input_tokens and output_tokens, or remove trace",
            ));
        }
        (None, Some(a), Some(i), Some(o)) => Workload::Synthetic {
            arrival: arrival(&c, a)?,
            input: lengths(&c, "workload.input_tokens", i)?,
            output: lengths(&c, "workload.output_tokens", o)?,
        },
        _ => {
            return Err(c.err(
                "workload",
                "give either trace = { path = \"...\" } or all of arrival, input_tokens and output_tokens, e.g. arrival = { process = \"poisson\", rate_per_s = 8 }",
            ));
        }
    };

    // sglang.
    let sg = &file.sglang;
    let profile: Profile = sg.profile.parse().map_err(|_| {
        c.err(
            "sglang.profile",
            format!(
                "unknown profile {:?}; valid: guarded, slice_dispatch, unguarded",
                sg.profile
            ),
        )
    })?;
    let waiting = c.positive("sglang.waiting_timeout_s", sg.waiting_timeout_s, "seconds")?;
    let bootstrap = c.positive(
        "sglang.bootstrap_timeout_s",
        sg.bootstrap_timeout_s,
        "seconds",
    )?;
    if sg.queue_size == 0 {
        return Err(c.err("sglang.queue_size", "must be ≥ 1 (sglang's default is 4)"));
    }
    let mut slo = Slo::default();
    if let Some(t) = file.slo.ttft_ms {
        slo.ttft_ns = Some(ns_from_secs_ceil(c.positive("slo.ttft_ms", t, "ms")? / 1e3));
    }
    if let Some(t) = file.slo.tpot_ms {
        slo.tpot_ns = Some(ns_from_secs_ceil(c.positive("slo.tpot_ms", t, "ms")? / 1e3));
    }

    // One transfer plan per (prefill pool, decode pool): compiled once, used by every request.
    let mut plans = std::collections::BTreeMap::new();
    for (pi, pp) in pools
        .iter()
        .enumerate()
        .filter(|(_, p)| p.role == Role::Prefill)
    {
        for (di, dp) in pools
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == Role::Decode)
        {
            let plan = crate::layout::PairPlan::compile(
                (&pp.model, &pp.server),
                (&dp.model, &dp.server),
                profile,
            )
            .map_err(|e| {
                c.err(
                    &format!("pools.{}.server", dp.name),
                    format!("prefill pool {:?} cannot pair with it: {e}", pp.name),
                )
            })?;
            plans.insert((pi, di), std::sync::Arc::new(plan));
        }
    }

    let placement = crate::cluster::placement::place_pools(&pools, hw.gpus_per_node);
    if let Some((i, p)) = pools
        .iter()
        .enumerate()
        .find(|(_, p)| p.node.is_some_and(|n| n > 4096))
    {
        let _ = i;
        return Err(c.err(
            &format!("pools.{}.node", p.name),
            "must be a node index below 4096",
        ));
    }
    let nodes = placement.nodes;
    let mut faults = Vec::new();
    for (i, f) in file.faults.iter().enumerate() {
        faults.push(fault(
            &c,
            i,
            f,
            &pools,
            &placement,
            nics_per_node,
            hw.gpus_per_node,
        )?);
    }
    faults.sort_by_key(|f| f.at_ns);

    Ok(Scenario {
        faults,
        nodes,
        plans,
        name: run.name.clone(),
        seed: run.seed,
        duration_ns: ns_from_secs_ceil(duration_s),
        max_requests: run.max_requests,
        drain_timeout_ns: ns_from_secs_ceil(drain_s),
        gpu,
        gpus_per_node: hw.gpus_per_node,
        pools,
        fabric,
        workload,
        router: file.router.policy,
        sglang: SglangParams {
            profile,
            waiting_timeout_ns: ns_from_secs_ceil(waiting),
            bootstrap_timeout_ns: ns_from_secs_ceil(bootstrap),
            queue_size: sg.queue_size,
        },
        slo,
        source: path.to_path_buf(),
        resolved: file,
    })
}

fn trace_workload(c: &Checker, t: &file::TraceSection) -> Result<Workload, ScenarioError> {
    use crate::workload::trace;
    let path = c.resolve_path(&t.path);
    let format = match &t.format {
        Some(f) => f.parse::<trace::TraceFormat>().map_err(|_| {
            c.err(
                "workload.trace.format",
                format!("unknown trace format {f:?}; valid: mooncake, azure, vidur, csv (or leave it out to detect)"),
            )
        })?,
        None => trace::detect_format(&path).map_err(|e| c.err("workload.trace.path", e.to_string()))?,
    };
    let mut rows = trace::read_trace(&path, format)
        .map_err(|e| c.err("workload.trace.path", e.to_string()))?;
    if let Some(limit) = t.limit {
        if limit == 0 {
            return Err(c.err(
                "workload.trace.limit",
                "must be ≥ 1 row (or left out for all rows)",
            ));
        }
        rows.truncate(limit.min(rows.len() as u64) as usize);
    }
    let scale = match t.rate_per_s {
        Some(rate) => {
            if t.time_scale != 1.0 {
                return Err(c.err(
                    "workload.trace.rate_per_s",
                    "give rate_per_s or time_scale, not both",
                ));
            }
            let rate = c.positive("workload.trace.rate_per_s", rate, "requests per second")?;
            let span =
                rows.last().map_or(0, |r| r.arrival_ns) - rows.first().map_or(0, |r| r.arrival_ns);
            if rows.len() < 2 || span == 0 {
                return Err(c.err(
                    "workload.trace.rate_per_s",
                    "the trace has no time span to rescale (fewer than two distinct arrival times)",
                ));
            }
            let observed = (rows.len() - 1) as f64 / (span as f64 / 1e9);
            observed / rate
        }
        None => c.positive(
            "workload.trace.time_scale",
            t.time_scale,
            "a factor on arrival times",
        )?,
    };
    let base = rows.first().map_or(0, |r| r.arrival_ns);
    for r in &mut rows {
        r.arrival_ns = ((r.arrival_ns - base) as f64 * scale).round() as Nanos;
    }
    Ok(Workload::Trace {
        rows: std::sync::Arc::new(rows),
    })
}

/// A validated fault.
#[derive(Clone, Debug)]
pub struct FaultSpec {
    /// When, ns.
    pub at_ns: Nanos,
    /// What happens.
    pub action: FaultAction,
}

/// What a fault does.
#[derive(Clone, Debug)]
pub enum FaultAction {
    /// Something in the fabric breaks or heals.
    Fabric(crate::fabric::Fault),
    /// A global instance crashes; it restarts after `restart_ns` if given.
    Crash {
        /// Global instance index.
        instance: u32,
        /// Restart delay, ns.
        restart_ns: Option<Nanos>,
    },
}

fn parse_index(s: &str, prefix: &str) -> Option<u32> {
    s.strip_prefix(prefix)?.parse().ok()
}

fn fault(
    c: &Checker,
    i: usize,
    f: &file::FaultSection,
    pools: &[Pool],
    placement: &crate::cluster::placement::Placement,
    nics_per_node: u32,
    gpus_per_node: u32,
) -> Result<FaultSpec, ScenarioError> {
    use crate::fabric::{Fault, GpuId, Link, NicId};
    let key = |k: &str| format!("faults[{i}].{k}");
    let at_s = c.non_negative(&key("at_s"), f.at_s, "simulated seconds")?;
    let nodes = placement.nodes;
    let nic = |name: &Option<String>, k: &str| -> Result<NicId, ScenarioError> {
        let name = name.as_deref().ok_or_else(|| {
            c.err(
                &key(k),
                format!("{} needs {k} = \"node<N>.nic<I>\"", f.kind),
            )
        })?;
        let parts: Vec<&str> = name.split('.').collect();
        match parts.as_slice() {
            [n, x] => match (parse_index(n, "node"), parse_index(x, "nic")) {
                (Some(n), Some(x)) if n < nodes && x < nics_per_node => Ok(NicId(n * nics_per_node + x)),
                _ => Err(c.err(&key(k), format!("{name:?}: node must be < {nodes} and nic < {nics_per_node}, as node<N>.nic<I>"))),
            },
            _ => Err(c.err(&key(k), format!("{name:?}: write a NIC as node<N>.nic<I>"))),
        }
    };
    let link = || -> Result<Link, ScenarioError> {
        let name = f.link.as_deref().ok_or_else(|| {
            c.err(&key("link"), format!("{} needs link = \"node<N>.nic<I>.tx|rx\", \"node<N>.gpu<G>.nvlink_tx|nvlink_rx\" or \"switch<S>.up|down\"", f.kind))
        })?;
        let bad = || {
            c.err(&key("link"), format!("{name:?} is not a link: write node<N>.nic<I>.tx|rx, node<N>.gpu<G>.nvlink_tx|nvlink_rx or switch<S>.up|down (nodes 0..{nodes}, NICs 0..{nics_per_node}, GPUs 0..{gpus_per_node})"))
        };
        let parts: Vec<&str> = name.split('.').collect();
        match parts.as_slice() {
            [n, x, d] if n.starts_with("node") => {
                let node = parse_index(n, "node")
                    .filter(|&v| v < nodes)
                    .ok_or_else(bad)?;
                if let Some(x) = parse_index(x, "nic").filter(|&v| v < nics_per_node) {
                    let id = NicId(node * nics_per_node + x);
                    match *d {
                        "tx" => Ok(Link::NicTx(id)),
                        "rx" => Ok(Link::NicRx(id)),
                        _ => Err(bad()),
                    }
                } else if let Some(g) = parse_index(x, "gpu").filter(|&v| v < gpus_per_node) {
                    let gpu = GpuId { node, local: g };
                    match *d {
                        "nvlink_tx" => Ok(Link::NvlinkTx(gpu)),
                        "nvlink_rx" => Ok(Link::NvlinkRx(gpu)),
                        _ => Err(bad()),
                    }
                } else {
                    Err(bad())
                }
            }
            [sw, d] => {
                let s = parse_index(sw, "switch").ok_or_else(bad)?;
                match *d {
                    "up" => Ok(Link::Uplink(s)),
                    "down" => Ok(Link::Downlink(s)),
                    _ => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    };
    let action = match f.kind.as_str() {
        "link_down" => FaultAction::Fabric(Fault::LinkDown(link()?)),
        "link_up" => FaultAction::Fabric(Fault::LinkUp(link()?)),
        "link_degraded" => {
            let fr = f.fraction.ok_or_else(|| {
                c.err(
                    &key("fraction"),
                    "link_degraded needs fraction = <share of capacity left, in (0, 1]>",
                )
            })?;
            if !(fr > 0.0 && fr <= 1.0) {
                return Err(c.err(&key("fraction"), format!("must be in (0, 1], got {fr}")));
            }
            FaultAction::Fabric(Fault::Degrade {
                link: link()?,
                fraction: fr,
            })
        }
        "packet_loss" => {
            let r = f.rate.ok_or_else(|| {
                c.err(
                    &key("rate"),
                    "packet_loss needs rate = <loss rate in [0, 1)>",
                )
            })?;
            if !(0.0..1.0).contains(&r) {
                return Err(c.err(&key("rate"), format!("must be in [0, 1), got {r}")));
            }
            FaultAction::Fabric(Fault::Loss {
                link: link()?,
                rate: r,
            })
        }
        "nic_down" => FaultAction::Fabric(Fault::NicDown(nic(&f.nic, "nic")?)),
        "nic_up" => FaultAction::Fabric(Fault::NicUp(nic(&f.nic, "nic")?)),
        "nic_flap" => {
            let d = f.duration_s.ok_or_else(|| {
                c.err(
                    &key("duration_s"),
                    "nic_flap needs duration_s = <seconds down>",
                )
            })?;
            let d = c.positive(&key("duration_s"), d, "seconds down")?;
            FaultAction::Fabric(Fault::NicFlap {
                nic: nic(&f.nic, "nic")?,
                down_ns: ns_from_secs_ceil(d),
            })
        }
        "instance_crash" => {
            let pool = f.pool.as_deref().ok_or_else(|| c.err(&key("pool"), "instance_crash needs pool = \"<pool name>\" (and instance = <index>, default 0)"))?;
            let (pi, p) = pools
                .iter()
                .enumerate()
                .find(|(_, p)| p.name == pool)
                .ok_or_else(|| {
                    c.err(
                        &key("pool"),
                        format!(
                            "no pool named {pool:?}; pools: {}",
                            pools
                                .iter()
                                .map(|p| p.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            let k = f.instance.unwrap_or(0);
            if k >= p.instances {
                return Err(c.err(
                    &key("instance"),
                    format!(
                        "pool {pool:?} has {} instance(s); use 0..{}",
                        p.instances, p.instances
                    ),
                ));
            }
            let first: u32 = pools[..pi].iter().map(|p| p.instances).sum();
            let restart_ns = match f.restart_after_s {
                Some(r) => Some(ns_from_secs_ceil(c.positive(
                    &key("restart_after_s"),
                    r,
                    "seconds",
                )?)),
                None => None,
            };
            FaultAction::Crash {
                instance: first + k,
                restart_ns,
            }
        }
        other => {
            return Err(c.err(
                &key("kind"),
                format!("unknown fault kind {other:?}; valid: link_down, link_up, link_degraded, packet_loss, nic_down, nic_up, nic_flap, instance_crash"),
            ));
        }
    };
    Ok(FaultSpec {
        at_ns: ns_from_secs_ceil(at_s),
        action,
    })
}

/// Upper bound on a unified pool's slot count (its oracle keeps a record per slot).
pub const MAX_UNIFIED_SLOTS: u32 = 65_536;

/// State slots of a hybrid instance when `max_running_requests` is not set: sglang sizes its
/// mamba pool for the running batch; this is the cap on concurrent hybrid requests.
pub const DEFAULT_STATE_SLOTS: u32 = 256;

fn divisors(n: u32) -> String {
    (1..=n)
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn arrival(c: &Checker, a: &ArrivalSection) -> Result<Arrival, ScenarioError> {
    let key = "workload.arrival.rate_per_s";
    let secs = |k: &str, v: f64| -> Result<Nanos, ScenarioError> {
        Ok(ns_from_secs_ceil(c.positive(
            &format!("workload.arrival.{k}"),
            v,
            "seconds",
        )?))
    };
    Ok(match a {
        ArrivalSection::Poisson { rate_per_s } => Arrival::Poisson {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
        },
        ArrivalSection::Constant { rate_per_s } => Arrival::Constant {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
        },
        ArrivalSection::Gamma { rate_per_s, cv } => Arrival::Gamma {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
            cv: c.positive(
                "workload.arrival.cv",
                *cv,
                "coefficient of variation; 1 is Poisson",
            )?,
        },
        ArrivalSection::OnOff {
            rate_per_s,
            on_s,
            off_s,
        } => Arrival::OnOff {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second while on")?,
            on_ns: secs("on_s", *on_s)?,
            off_ns: ns_from_secs_ceil(c.non_negative(
                "workload.arrival.off_s",
                *off_s,
                "seconds",
            )?),
        },
        ArrivalSection::Schedule { steps } => {
            let k = "workload.arrival.steps";
            if steps.is_empty() {
                return Err(c.err(
                    k,
                    "needs at least one step, e.g. steps = [{ until_s = 60, rate_per_s = 5 }]",
                ));
            }
            let mut out = Vec::new();
            let mut last = 0.0;
            for (i, st) in steps.iter().enumerate() {
                if !(st.until_s.is_finite() && st.until_s > last) {
                    return Err(c.err(
                        k,
                        format!("step {} ends at until_s = {}, which must be later than the step before ({last} s)", i + 1, st.until_s),
                    ));
                }
                c.non_negative(k, st.rate_per_s, "requests per second")?;
                last = st.until_s;
                out.push((ns_from_secs_ceil(st.until_s), st.rate_per_s));
            }
            if out.iter().all(|s| s.1 == 0.0) {
                return Err(c.err(k, "every step has rate 0: no request would ever arrive"));
            }
            Arrival::Schedule {
                steps: std::sync::Arc::new(out),
            }
        }
    })
}

fn lengths(c: &Checker, key: &str, l: &LengthSection) -> Result<Lengths, ScenarioError> {
    if let LengthSection::Empirical { path } = l {
        let p = c.resolve_path(path);
        let pairs = crate::workload::trace::read_lengths(&p)
            .map_err(|e| c.err(&format!("{key}.path"), e.to_string()))?;
        let output = key.ends_with("output_tokens");
        let v: Vec<u32> = pairs
            .iter()
            .map(|&(i, o)| if output { o } else { i })
            .collect();
        return Ok(Lengths::Empirical(std::sync::Arc::new(v)));
    }
    Ok(match *l {
        LengthSection::Empirical { .. } => unreachable!("handled above"),
        LengthSection::Fixed { value } => {
            if value == 0 {
                return Err(c.err(&format!("{key}.value"), "must be ≥ 1 token"));
            }
            Lengths::Fixed(value)
        }
        LengthSection::Uniform { min, max } => {
            if min == 0 || min > max {
                return Err(c.err(
                    key,
                    format!("needs 1 ≤ min ≤ max tokens, got min = {min}, max = {max}"),
                ));
            }
            Lengths::Uniform { min, max }
        }
        LengthSection::Lognormal { mean, cv, max, min } => {
            let mean = c.positive(&format!("{key}.mean"), mean, "tokens")?;
            let cv = c.non_negative(&format!("{key}.cv"), cv, "coefficient of variation")?;
            if min == 0 || min > max {
                return Err(c.err(
                    key,
                    format!("needs 1 ≤ min ≤ max tokens, got min = {min}, max = {max}"),
                ));
            }
            Lengths::Lognormal { mean, cv, min, max }
        }
    })
}
