//! Validation of a parsed scenario file, one function per section. Each checks its keys and
//! returns the checked values; `validate` in the parent module puts them together.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::file::{self, ScenarioFile};
use super::{Checker, ScenarioError, divisors};
use crate::config::{
    CacheAwareParams, DEFAULT_STATE_SLOTS, FabricConfig, MAX_UNIFIED_SLOTS, Pool, Profile, Role,
    RouterParams, SglangParams, Slo, Workload, limits,
};
use crate::engine::{NS_PER_S, NS_PER_US, Nanos, ns_from_secs_ceil};
use crate::layout::PairPlan;
use crate::spec::{GpuSpec, ServerArgs, gpu, server};

/// `[run]`: the name, and the arrival and drain durations in seconds.
pub(super) fn run(c: &Checker, run: &file::RunSection) -> Result<(f64, f64), ScenarioError> {
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
    let duration_s = c.duration("run.duration_s", run.duration_s, false)?;
    let drain_s = c.duration("run.drain_timeout_s", run.drain_timeout_s, true)?;
    if run.max_requests == Some(0) {
        return Err(c.err("run.max_requests", "must be ≥ 1 (or left out for no bound)"));
    }
    Ok((duration_s, drain_s))
}

/// `[hardware]`: the GPU preset with its overrides, and the step-time calibration (a name, or
/// a `pdsim calibrate` file read here) resolved for that GPU.
pub(super) fn hardware(
    c: &Checker,
    hw: &file::HardwareSection,
) -> Result<(GpuSpec, String, crate::spec::ComputeParams), ScenarioError> {
    let mut gpu = gpu::gpu_preset(&hw.gpu).ok_or_else(|| {
        c.err(
            "hardware.gpu",
            format!(
                "unknown GPU preset {:?}; valid presets: {}{}",
                hw.gpu,
                gpu::GPU_PRESETS.join(", "),
                super::suggestion(&hw.gpu, gpu::GPU_PRESETS)
            ),
        )
    })?;
    if let Some(t) = hw.bf16_tflops {
        gpu.bf16_tflops = c.bounded("hardware.bf16_tflops", t, "TFLOP/s", limits::MAX_TFLOPS)?;
    }
    if let Some(g) = hw.hbm_gb {
        let g = c.positive("hardware.hbm_gb", g, "GB")?;
        if g > limits::MAX_HBM_GB {
            return Err(c.err(
                "hardware.hbm_gb",
                format!(
                    "{g} GB per GPU is above the bound of {} GB (today's GPUs carry 80–288 GB; the KV page records grow with it)",
                    limits::MAX_HBM_GB
                ),
            ));
        }
        gpu.hbm_bytes = (g * 1e9) as u64;
    }
    if let Some(b) = hw.hbm_tb_s {
        gpu.hbm_bytes_per_s =
            c.bounded("hardware.hbm_tb_s", b, "TB/s", limits::MAX_HBM_TB_S)? * 1e12;
    }
    if let Some(t) = hw.fp8_tflops {
        gpu.fp8_tflops =
            Some(c.bounded("hardware.fp8_tflops", t, "TFLOP/s", limits::MAX_TFLOPS)?);
    }
    if let Some(b) = hw.nvlink_gb_s {
        gpu.nvlink_bytes_per_s =
            c.bounded("hardware.nvlink_gb_s", b, "GB/s", limits::MAX_LINK_RATE)? * 1e9;
    }
    if hw.nic_host_gbps.is_some() {
        return Err(c.err(
            "hardware.nic_host_gbps",
            "was removed: it capped every NIC, which is wrong when GPUs share NICs and for \
             DeepEP's all-to-all. Remove it; the limit now sits on each GPU's transfer engine \
             (hardware.rdma_engine_gbps, Gb/s per GPU, default 190) and the defaults hold on \
             shared-NIC hosts; on AWS EFA set fabric.transport = \"efa\"",
        ));
    }
    if let Some(g) = hw.rdma_engine_gbps {
        gpu.rdma_engine_bytes_per_s = Some(
            c.bounded(
                "hardware.rdma_engine_gbps",
                g,
                "Gb/s per GPU",
                limits::MAX_LINK_RATE,
            )? / 8.0
                * 1e9,
        );
    }
    let (calibration, compute) = calibration(c, hw, &gpu)?;
    if hw.gpus_per_node == 0 || hw.gpus_per_node > limits::MAX_GPUS_PER_NODE {
        return Err(c.err(
            "hardware.gpus_per_node",
            format!(
                "must be in 1..={} (the largest NVLink domains have 72–576 GPUs), e.g. 8; got {}",
                limits::MAX_GPUS_PER_NODE,
                hw.gpus_per_node
            ),
        ));
    }
    Ok((gpu, calibration, compute))
}

/// `hardware.calibration`: a built-in name, or a path (relative to the scenario) to a file
/// written by `pdsim calibrate`.
fn calibration(
    c: &Checker,
    hw: &file::HardwareSection,
    gpu: &GpuSpec,
) -> Result<(String, crate::spec::ComputeParams), ScenarioError> {
    use crate::spec::calibration as cal;
    let key = "hardware.calibration";
    let name = hw
        .calibration
        .clone()
        .unwrap_or_else(|| cal::DEFAULT_CALIBRATION.to_string());
    if let Some(p) = cal::named(&name, gpu) {
        return Ok((name, p));
    }
    let looks_like_file = name.contains('/') || name.contains('.') || name.ends_with(".toml");
    if !looks_like_file {
        return Err(c.err(
            key,
            format!(
                "unknown calibration {name:?}; valid: {} or the path of a file written by `pdsim calibrate`{}",
                cal::CALIBRATIONS.join(", "),
                super::suggestion(&name, cal::CALIBRATIONS)
            ),
        ));
    }
    let path = c.resolve_path(&name);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        c.err(
            key,
            format!(
                "cannot read calibration file {}: {e}; give {} or a file written by `pdsim calibrate`",
                path.display(),
                cal::CALIBRATIONS.join(", ")
            ),
        )
    })?;
    let file = cal::CalibrationFile::parse(&text)
        .map_err(|e| c.err(key, format!("{}: {e}", path.display())))?;
    *c.measured.borrow_mut() = Some(file.measured.clone());
    Ok((name, file.params))
}

/// `[[pools]]`: every pool checked, prefill pools first.
pub(super) fn pools(
    c: &Checker,
    file: &ScenarioFile,
    gpu: &GpuSpec,
) -> Result<Vec<Pool>, ScenarioError> {
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
        pools.push(pool(
            c,
            p,
            &key,
            default_model.as_ref(),
            gpu,
            file.hardware.gpus_per_node,
        )?);
    }
    for p in pools
        .iter_mut()
        .filter(|p| p.server.enable_unified_memory && p.state_slots > 0)
    {
        // One shared pool: slots and pages compete for the same bytes (`docs/sglang-pd.md` §1.6).
        p.state_slots = crate::config::capacity::unified_slots(gpu, p, MAX_UNIFIED_SLOTS);
    }
    for p in &pools {
        if crate::config::capacity::kv_pages(gpu, p) == 0 {
            let key = format!("pools.{}.server.mem_fraction_static", p.name);
            return Err(c.err(
                &key,
                format!(
                    "leaves no room for KV cache: {:.2} GB per GPU after weights ({:.2} GB at tp_size {}) and activations; raise mem_fraction_static or tp_size",
                    crate::config::capacity::kv_budget_bytes(gpu, p).max(0.0) / 1e9,
                    crate::config::capacity::weight_bytes_per_gpu(&p.model, &p.server, &p.parallel) / 1e9,
                    p.server.tp_size
                ),
            ));
        }
    }
    let colocated = pools.iter().find(|p| p.role == Role::Colocated);
    let pd = pools.iter().find(|p| p.role != Role::Colocated);
    if let (Some(co), Some(other)) = (colocated, pd) {
        // A colocated server is the baseline a PD cluster is compared with, not a part of one:
        // the router of a PD cluster picks a (prefill, decode) pair, a plain server's picks one.
        return Err(c.err(
            &format!("pools.{}.role", co.name),
            format!(
                "a scenario is either a PD cluster (prefill and decode pools) or colocated servers (only role = \"colocated\" pools); pool {:?} is {} — compare the two with `pdsim sweep --vary` over two scenarios' pools",
                other.name,
                other.role.as_str()
            ),
        ));
    }
    if colocated.is_none() {
        for role in [Role::Prefill, Role::Decode] {
            if !pools.iter().any(|p| p.role == role) {
                return Err(c.err(
                    "pools",
                    format!(
                        "no {} pool: a PD cluster needs at least one [[pools]] with role = \"prefill\" and one with role = \"decode\" (or use only role = \"colocated\" pools for plain sglang servers)",
                        role.as_str()
                    ),
                ));
            }
        }
    }
    pools.sort_by_key(|p| p.role);
    Ok(pools)
}

/// `[fabric]`, over the `nodes` the placement uses, with the GPU's NVLink and RDMA engine
/// rates (`[hardware]`) and Mooncake's calibrated transfer model (`fabric/calibration.rs`).
pub(super) fn fabric(
    c: &Checker,
    f: &file::FabricSection,
    gpu: &crate::spec::GpuSpec,
    gpus_per_node: u32,
    nodes: u32,
) -> Result<FabricConfig, ScenarioError> {
    let nic_gbps = c.positive("fabric.nic_gbps", f.nic_gbps, "Gb/s per NIC")?;
    let nics_per_node = f.nics_per_node.unwrap_or(gpus_per_node);
    let max_nics = gpus_per_node.saturating_mul(limits::MAX_NICS_PER_GPU);
    if nics_per_node == 0 || nics_per_node > max_nics {
        return Err(c.err(
            "fabric.nics_per_node",
            format!(
                "must be in 1..={max_nics} ({} per GPU × hardware.gpus_per_node = {gpus_per_node}; default: one per GPU), got {nics_per_node}",
                limits::MAX_NICS_PER_GPU
            ),
        ));
    }
    let base_latency_us = c.non_negative("fabric.base_latency_us", f.base_latency_us, "µs")?;
    c.within_clock("fabric.base_latency_us", base_latency_us, 1e-6, "µs")?;
    let control_latency_us =
        c.non_negative("fabric.control_latency_us", f.control_latency_us, "µs")?;
    c.within_clock("fabric.control_latency_us", control_latency_us, 1e-6, "µs")?;
    let kind = f.topology;
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
    let topology = crate::fabric::TopologyConfig {
        nodes,
        gpus_per_node,
        nics_per_node,
        nic_bytes_per_ns: nic_gbps / 8.0,
        kind,
        nodes_per_leaf: f.nodes_per_leaf,
        oversubscription: f.oversubscription,
        // GB/s is bytes per ns.
        nvlink_bytes_per_ns: gpu.nvlink_bytes_per_s / 1e9,
    };
    let defaults = crate::fabric::FabricParams::default();
    let model = crate::fabric::FabricParams {
        base_latency_ns: (base_latency_us * NS_PER_US as f64).ceil() as Nanos,
        // The GPU's own engine rate when `[hardware]` gives one, else the transport's.
        engine_bytes_per_ns: gpu
            .rdma_engine_bytes_per_s
            .map_or_else(|| f.transport.engine_bytes_per_ns(&defaults), |b| b / 1e9),
        ..defaults
    };
    Ok(FabricConfig {
        topology,
        model,
        control_latency_ns: (control_latency_us * NS_PER_US as f64).ceil() as Nanos,
        a2a_flows: f.a2a_flows,
        transport: f.transport,
    })
}

/// `[workload]`: a trace or a synthetic generator.
/// `[workload]`. `offload`: the key of a decode pool that offloads to the store, which needs
/// a trace with prefix ids (a synthetic workload has none).
pub(super) fn workload(
    c: &Checker,
    w: &file::WorkloadSection,
    offload: Option<&str>,
) -> Result<Workload, ScenarioError> {
    if let (Some(key), None, None) = (offload, &w.trace, &w.sessions) {
        return Err(c.err(
            key,
            "needs requests with prefix ids: a trace with hash_ids (as the Mooncake traces have) or [workload.sessions] (conversations name their blocks); the store names a block by its prefix, and a plain synthetic workload's requests have none",
        ));
    }
    if let (Some(_), Some(_)) = (&w.sessions, &w.trace) {
        return Err(c.err(
            "workload.sessions",
            "is for synthetic workloads; a trace gives its conversations by a session_id column (pdsim CSV) or key (Mooncake JSON lines), replayed closed loop with workload.trace.think_time_s",
        ));
    }
    if w.lengths.is_some() && (w.input_tokens.is_some() || w.output_tokens.is_some()) {
        return Err(c.err(
            "workload.lengths",
            "lengths = { path } gives input and output lengths together: remove input_tokens and output_tokens, or remove lengths",
        ));
    }
    let workload = match (
        &w.trace,
        &w.arrival,
        &w.input_tokens,
        &w.output_tokens,
        &w.lengths,
    ) {
        (Some(t), None, None, None, None) => super::trace_workload(c, t, offload)?,
        (Some(_), ..) => {
            return Err(c.err(
                "workload.trace",
                "a trace gives arrivals and lengths itself: remove arrival, input_tokens, output_tokens and lengths, or remove trace",
            ));
        }
        (None, Some(a), None, None, Some(l)) => {
            let pairs = paired_lengths(c, &l.path)?;
            Workload::Synthetic {
                arrival: super::arrival(c, a)?,
                input: crate::config::Lengths::PairedInput(pairs.clone()),
                output: crate::config::Lengths::PairedOutput(pairs),
            }
        }
        (None, Some(a), Some(i), Some(o), None) => Workload::Synthetic {
            arrival: super::arrival(c, a)?,
            input: super::lengths(c, "workload.input_tokens", i)?,
            output: super::lengths(c, "workload.output_tokens", o)?,
        },
        _ => {
            return Err(c.err(
                "workload",
                "give either trace = { path = \"...\" }, or arrival with input_tokens and output_tokens, or arrival with lengths = { path = \"...\" } (paired), e.g. arrival = { process = \"poisson\", rate_per_s = 8 }",
            ));
        }
    };
    let Some(s) = &w.sessions else {
        return Ok(workload);
    };
    let Workload::Synthetic {
        arrival,
        input,
        output,
    } = workload
    else {
        unreachable!("a trace with sessions was refused above");
    };
    let sessions = sessions(c, s, &input, &output)?;
    Ok(Workload::Sessions {
        arrival,
        input,
        output,
        sessions,
    })
}

/// Most turns one session may plan (its plan is held while it runs).
const MAX_TURNS: u32 = 10_000;

/// `[workload.sessions]`, given the first-turn prompt and output distributions.
fn sessions(
    c: &Checker,
    s: &file::SessionsSection,
    input: &crate::config::Lengths,
    output: &crate::config::Lengths,
) -> Result<crate::config::SessionParams, ScenarioError> {
    use crate::config::ThinkTime;
    let turns = super::lengths(c, "workload.sessions.turns", &s.turns)?;
    if turns.max() > MAX_TURNS {
        return Err(c.err(
            "workload.sessions.turns",
            format!(
                "at most {MAX_TURNS} turns per session, got a maximum of {} (published chat logs average 2–4 turns; agentic sessions tens)",
                turns.max()
            ),
        ));
    }
    let user_tokens = super::lengths(c, "workload.sessions.user_tokens", &s.user_tokens)?;
    let key = "workload.sessions.think_time_s";
    let ns = |v: f64| (v * NS_PER_S as f64).ceil();
    let think = match s.think_time_s {
        file::ThinkSection::Fixed { value } => {
            let k = format!("{key}.value");
            let v = c.non_negative(&k, value, "seconds")?;
            ThinkTime::Fixed(ns_from_secs_ceil(c.within_clock(&k, v, 1.0, "s")?))
        }
        file::ThinkSection::Exponential { mean } => {
            let k = format!("{key}.mean");
            let v = c.positive(&k, mean, "seconds")?;
            ThinkTime::Exponential {
                mean_ns: ns(c.within_clock(&k, v, 1.0, "s")?),
            }
        }
        file::ThinkSection::Lognormal { mean, cv } => {
            let k = format!("{key}.mean");
            let v = c.positive(&k, mean, "seconds")?;
            let cv = c.non_negative(&format!("{key}.cv"), cv, "coefficient of variation")?;
            ThinkTime::Lognormal {
                mean_ns: ns(c.within_clock(&k, v, 1.0, "s")?),
                cv,
            }
        }
    };
    let cap = s.max_context_tokens;
    let first = u64::from(input.max()) + u64::from(output.max());
    if first > u64::from(cap) {
        return Err(c.err(
            "workload.sessions.max_context_tokens",
            format!(
                "{cap} tokens cannot hold a first turn: workload.input_tokens and workload.output_tokens reach {} + {} = {first}; raise it to the model's context length (sglang's --context-length) or lower their max",
                input.max(),
                output.max()
            ),
        ));
    }
    Ok(crate::config::SessionParams {
        turns,
        think,
        user_tokens,
        max_context_tokens: cap,
        on_context_full: s.on_context_full,
    })
}

/// The (input, output) pairs of `workload.lengths.path`; every pair ≥ 1 token each.
fn paired_lengths(
    c: &Checker,
    rel: &str,
) -> Result<std::sync::Arc<Vec<(u32, u32)>>, ScenarioError> {
    let key = "workload.lengths.path";
    let pairs = crate::workload::trace::read_lengths(&c.resolve_path(rel))
        .map_err(|e| c.err(key, e.to_string()))?;
    if pairs.is_empty() {
        return Err(c.err(key, "the file has no rows: nothing to sample lengths from"));
    }
    if let Some(i) = pairs.iter().position(|p| p.0 == 0 || p.1 == 0) {
        return Err(c.err(
            key,
            format!("row {} has a length of 0 tokens (input {}, output {}); every request needs ≥ 1 of each", i + 1, pairs[i].0, pairs[i].1),
        ));
    }
    Ok(std::sync::Arc::new(pairs))
}

/// `[sglang]` and `[slo]`.
pub(super) fn sglang_and_slo(
    c: &Checker,
    file: &ScenarioFile,
) -> Result<(SglangParams, Slo), ScenarioError> {
    let sg = &file.sglang;
    let profile: Profile = sg.profile;
    let waiting = c.duration("sglang.waiting_timeout_s", sg.waiting_timeout_s, false)?;
    let bootstrap = c.duration("sglang.bootstrap_timeout_s", sg.bootstrap_timeout_s, false)?;
    if sg.queue_size == 0 || sg.queue_size > limits::MAX_QUEUE_SIZE {
        return Err(c.err(
            "sglang.queue_size",
            format!(
                "must be in 1..={} transfer-queue shards per prefill instance (sglang's default is 4), got {}",
                limits::MAX_QUEUE_SIZE,
                sg.queue_size
            ),
        ));
    }
    let mut slo = Slo::default();
    if let Some(t) = file.slo.ttft_ms {
        let t = c.positive("slo.ttft_ms", t, "ms")?;
        slo.ttft_ns = Some(ns_from_secs_ceil(
            c.within_clock("slo.ttft_ms", t, 1e-3, "ms")? / 1e3,
        ));
    }
    if let Some(t) = file.slo.tpot_ms {
        let t = c.positive("slo.tpot_ms", t, "ms")?;
        slo.tpot_ns = Some(ns_from_secs_ceil(
            c.within_clock("slo.tpot_ms", t, 1e-3, "ms")? / 1e3,
        ));
    }
    let s = &file.slo;
    let pct = |name: &str, v: Option<f64>| -> Result<Option<f64>, ScenarioError> {
        v.map(|t| {
            let key = format!("slo.{name}");
            c.positive(&key, t, "ms")?;
            c.within_clock(&key, t, 1e-3, "ms")
        })
        .transpose()
    };
    slo.ttft_pct_ms = [
        pct("ttft_p50_ms", s.ttft_p50_ms)?,
        pct("ttft_p90_ms", s.ttft_p90_ms)?,
        pct("ttft_p99_ms", s.ttft_p99_ms)?,
    ];
    slo.tpot_pct_ms = [
        pct("tpot_p50_ms", s.tpot_p50_ms)?,
        pct("tpot_p90_ms", s.tpot_p90_ms)?,
        pct("tpot_p99_ms", s.tpot_p99_ms)?,
    ];
    if let Some(a) = s.attainment_min {
        if !(a > 0.0 && a <= 1.0) {
            return Err(c.err(
                "slo.attainment_min",
                format!("must be a share of arrived requests in (0, 1], e.g. 0.9; got {a}"),
            ));
        }
        slo.attainment_min = Some(a);
    }
    let sglang = SglangParams {
        profile,
        waiting_timeout_ns: ns_from_secs_ceil(waiting),
        bootstrap_timeout_ns: ns_from_secs_ceil(bootstrap),
        queue_size: sg.queue_size,
    };
    Ok((sglang, slo))
}

/// One transfer plan per (prefill pool, decode pool): compiled once, used by every request.
pub(super) fn plans(
    c: &Checker,
    pools: &[Pool],
    profile: Profile,
) -> Result<BTreeMap<(usize, usize), Arc<PairPlan>>, ScenarioError> {
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
    Ok(plans)
}

/// One `[[pools]]` entry, its key `key` (`pools.<name>`).
fn pool(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    default_model: Option<&crate::spec::ModelSpec>,
    gpu: &GpuSpec,
    gpus_per_node: u32,
) -> Result<Pool, ScenarioError> {
    if p.instances == 0 {
        return Err(c.err(&format!("{key}.instances"), "must be ≥ 1"));
    }
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    if s.tp_size == 0
        || !(gpus_per_node.is_multiple_of(s.tp_size) || s.tp_size.is_multiple_of(gpus_per_node))
    {
        return Err(c.err(
            &k("tp_size"),
            format!(
                "{} neither divides hardware.gpus_per_node = {} nor is a multiple of it (an instance spans whole nodes); use one of {} or a multiple of {}",
                s.tp_size,
                gpus_per_node,
                divisors(gpus_per_node),
                gpus_per_node
            ),
        ));
    }
    let parallel = super::parallel::check(c, key, s, gpus_per_node)?;
    super::parallel::check_role(c, key, &parallel.args, p.role)?;
    let attn_tp = parallel.attn_tp;
    let parallel = parallel.args;
    crate::spec::server::check_page_size(s.page_size).map_err(|m| c.err(&k("page_size"), m))?;
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
    if s.num_reserved_decode_tokens > limits::MAX_RESERVED_DECODE_TOKENS {
        return Err(c.err(
            &k("num_reserved_decode_tokens"),
            format!(
                "must be at most {} tokens (sglang's default is 512), got {}",
                limits::MAX_RESERVED_DECODE_TOKENS,
                s.num_reserved_decode_tokens
            ),
        ));
    }
    let model = match (&p.model, default_model) {
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
    let quantization = match s.quantization.as_deref() {
        None => None,
        Some(q) => Some(server::Quantization::parse(q).ok_or_else(|| {
            c.err(
                &k("quantization"),
                format!(
                    "{q:?} is not a quantization pdsim models; valid: {} (sglang's online FP8 \
                     weights). sglang's other --quantization methods (awq, gptq, marlin, \
                     bitsandbytes, gguf, modelopt_fp4, w8a8_int8, mxfp4, …) are not modelled; \
                     leave the key out to serve the checkpoint's own dtype",
                    server::QUANTIZATIONS.join(", ")
                ),
            )
        })?),
    };
    let mut model = model;
    if let Some(q) = quantization {
        q.apply(&mut model);
    }
    super::parallel::check_model(c, key, &parallel, &model)?;
    let (speculative, spec_notes) =
        match super::speculative::server_args(c, p, key, &model, &parallel, gpus_per_node)? {
            Some((a, n)) => (Some(a), n),
            None => (None, Vec::new()),
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
        // sglang: "Max running requests is reset to 48 for speculative decoding".
        max_running_requests: s.max_running_requests.or(speculative.as_ref().map(|_| 48)),
        radix_cache: (!s.disable_radix_cache).then_some(s.radix_cache_tokens),
        quantization,
        speculative,
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
    let mut per_gpu_weights =
        crate::config::capacity::weight_bytes_per_gpu(&model, &server, &parallel);
    if let Some(spec) = &server.speculative {
        per_gpu_weights +=
            crate::config::capacity::draft_weight_bytes_per_gpu(&model, spec, &server, &parallel);
    }
    let budget = gpu.hbm_bytes as f64 * s.mem_fraction_static;
    if per_gpu_weights >= budget {
        return Err(c.err(
            &k("tp_size"),
            format!(
                "model {} needs {:.1} GB of weights per GPU at tp_size = {} (dp_size {}, ep_size {}), more than {:.1} GB ({} HBM × mem_fraction_static {}); raise tp_size or ep_size",
                model.name,
                per_gpu_weights / 1e9,
                s.tp_size,
                parallel.dp_ranks(),
                parallel.ep_size,
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
        Some(path) => Some(std::sync::Arc::new(step_times(c, key, path)?)),
        None => None,
    };
    let mut pool = Pool {
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
        gpu: p.gpu.unwrap_or(0),
        kv_allocator: p
            .kv_allocator
            .unwrap_or(crate::config::KvAllocator::default_for(p.role)),
        num_reserved_decode_tokens: s.num_reserved_decode_tokens,
        parallel,
        hicache: None,
        decode_offload: None,
        speculative: None,
    };
    pool.hicache = hicache(c, p, key, &pool, gpu)?;
    pool.decode_offload = decode_offload(c, p, key, &pool, gpu)?;
    pool.speculative = super::speculative::params(c, p, key, &pool, spec_notes)?;
    Ok(pool)
}

/// GPU → host bandwidth of one GPU, bytes/s, one direction: its PCIe x16 link (NVIDIA's data
/// sheets: A100 "PCIe Gen4: 64 GB/s", H100/H800/H20/H200/B200 "PCIe Gen5: 128 GB/s", both
/// directions together; AMD's MI300X sheet the same Gen5 x16) times [`PCIE_EFFICIENCY`]. A
/// GB200 reaches its Grace host over NVLink-C2C instead; it takes the Gen5 figure too, a lower
/// bound (`docs/numbers.md` §1).
fn pcie_bytes_per_s(gpu: &GpuSpec) -> f64 {
    let raw = if gpu.name.starts_with("a100") {
        32e9
    } else {
        64e9
    };
    raw * PCIE_EFFICIENCY
}

/// Share of a PCIe link's line rate that bulk DMA copies reach (≈ 80 %: 128b/130b coding, TLP
/// headers and flow control; the usual measured `cudaMemcpy` pinned-memory figure). A
/// correction factor.
const PCIE_EFFICIENCY: f64 = 0.8;

/// `pools.<name>.server.enable_hierarchical_cache` and the `hicache_*` flags (sglang
/// `server_args.py` defaults: ratio 2.0, size 0, `write_through`, no storage backend,
/// `best_effort`).
fn hicache(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<Option<crate::config::HiCacheParams>, ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    if !s.enable_hierarchical_cache {
        // A decode pool's offload takes the host-pool and backend flags too
        // (`decode_offload` checks them).
        if s.disaggregation_decode_enable_offload_kvcache {
            return Ok(None);
        }
        for (f, set) in [
            ("hicache_ratio", s.hicache_ratio.is_some()),
            ("hicache_size", s.hicache_size.is_some()),
            ("hicache_write_policy", s.hicache_write_policy.is_some()),
            (
                "hicache_storage_backend",
                s.hicache_storage_backend.is_some(),
            ),
            (
                "hicache_storage_prefetch_policy",
                s.hicache_storage_prefetch_policy.is_some(),
            ),
        ] {
            if set {
                let on = if p.role == Role::Decode {
                    "disaggregation_decode_enable_offload_kvcache = true (the decode side's offload to the store)"
                } else {
                    "enable_hierarchical_cache = true"
                };
                return Err(c.err(
                    &k(f),
                    format!("is a HiCache flag: set {on} on this pool, or drop it"),
                ));
            }
        }
        return Ok(None);
    }
    if p.role == Role::Decode {
        // sglang main also has a decode-side radix cache with HiCache
        // (`--disaggregation-decode-enable-radix-cache` with `--enable-hierarchical-cache`:
        // `enable_decode_hicache` in the scheduler), which pdsim does not model.
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            format!(
                "pdsim models HiCache on prefill pools only (pool {:?} is decode): sglang's decode side writes its KV to the store through its own flag, --disaggregation-decode-enable-offload-kvcache (DecodeKVCacheOffloadManager): remove enable_hierarchical_cache and set disaggregation_decode_enable_offload_kvcache = true (with a [kv_store]; sglang's decode radix cache with HiCache, --disaggregation-decode-enable-radix-cache, is not modelled)",
                p.name
            ),
        ));
    }
    if p.role != Role::Prefill {
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            format!(
                "pdsim models HiCache on prefill pools only (pool {:?} is {}); remove enable_hierarchical_cache here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if s.disable_radix_cache {
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            "needs the radix cache (sglang refuses --enable-hierarchical-cache with --disable-radix-cache); set disable_radix_cache = false",
        ));
    }
    let (host_tokens, per_rank) = host_pool(c, key, p, pool, gpu)?;
    let attn_tp = pool.server.attn_tp_size;
    let storage = match s.hicache_storage_backend.as_deref() {
        None => false,
        Some("mooncake") => true,
        Some(other) => {
            return Err(c.err(
                &k("hicache_storage_backend"),
                format!("{other:?} is not modelled; valid: \"mooncake\" (the scenario's [kv_store]), or leave it out"),
            ));
        }
    };
    let write_policy = s.hicache_write_policy.unwrap_or_default();
    if storage && write_policy == crate::config::WritePolicy::WriteBack {
        return Err(c.err(
            &k("hicache_write_policy"),
            "write_back with a storage backend is not modelled (blocks would reach the store only when the GPU evicts them); valid with hicache_storage_backend: write_through, write_through_selective",
        ));
    }
    let prefetch = s.hicache_storage_prefetch_policy.unwrap_or_default();
    if !storage && s.hicache_storage_prefetch_policy.is_some() {
        return Err(c.err(
            &k("hicache_storage_prefetch_policy"),
            "only matters with a storage backend: set hicache_storage_backend = \"mooncake\", or drop it",
        ));
    }
    Ok(Some(crate::config::HiCacheParams {
        host_tokens,
        write_policy,
        storage,
        prefetch,
        bytes_per_token: per_rank * u64::from(attn_tp),
        pcie_bytes_per_ns: pcie_bytes_per_s(gpu) * f64::from(attn_tp) / 1e9,
    }))
}

/// A host pool of `hicache_size` GB per rank or (size 0) `hicache_ratio` × the GPU KV pool, as
/// sglang sizes HiCache's host pool and the decode offload's (`HostKVCache.__init__`): its
/// tokens per instance, and the KV bytes of one token on one attention-TP rank.
fn host_pool(
    c: &Checker,
    key: &str,
    p: &file::PoolSection,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<(u64, u64), ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    let per_rank = pool
        .model
        .kv_bytes_per_token_rank(pool.server.attn_tp_size, pool.kv_dtype_bytes)
        .max(1);
    let size_gb = s.hicache_size.unwrap_or(0.0);
    if !(size_gb.is_finite() && (0.0..=1e6).contains(&size_gb)) {
        return Err(c.err(
            &k("hicache_size"),
            format!("must be host memory per rank in GB, 0 to 1e6 (0: from hicache_ratio), got {size_gb}"),
        ));
    }
    let ratio = s.hicache_ratio.unwrap_or(2.0);
    if !(ratio.is_finite() && ratio > 1.0 && ratio <= 1e4) {
        return Err(c.err(
            &k("hicache_ratio"),
            format!("must be above 1 (the host tier is larger than the GPU pool; sglang's default: 2.0) and at most 1e4, got {ratio}"),
        ));
    }
    let device_tokens =
        u64::from(crate::config::capacity::kv_pages(gpu, pool)) * u64::from(pool.server.page_size);
    let host_tokens = if size_gb > 0.0 {
        (size_gb * 1e9 / per_rank as f64) as u64
    } else {
        (ratio * device_tokens as f64) as u64
    };
    Ok((host_tokens, per_rank))
}

/// `pools.<name>.server.disaggregation_decode_enable_offload_kvcache` (sglang's
/// `--disaggregation-decode-enable-offload-kvcache`, default false): a decode pool writes the
/// blocks its requests' outputs complete to the storage backend through a host pool of its
/// own (`DecodeKVCacheOffloadManager`, sglang main 2026 @ 0122d6f; `docs/sglang-pd.md` §18.1).
/// It takes `hicache_storage_backend` (the offload's `HiCacheController` writes through it;
/// `"mooncake"`, the default here) and the host pool's `hicache_ratio` / `hicache_size`, not
/// `enable_hierarchical_cache`; `[kv_store]` is checked by [`kv_store`].
fn decode_offload(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<Option<crate::config::DecodeOffloadParams>, ScenarioError> {
    let s = &p.server;
    if !s.disaggregation_decode_enable_offload_kvcache {
        return Ok(None);
    }
    let k = |f: &str| format!("{key}.server.{f}");
    let flag = k("disaggregation_decode_enable_offload_kvcache");
    if p.role != Role::Decode {
        return Err(c.err(
            &flag,
            format!(
                "only a decode pool offloads (sglang builds its DecodeKVCacheOffloadManager only with --disaggregation-mode decode; pool {:?} is {}): a prefill pool writes to the store with enable_hierarchical_cache = true and hicache_storage_backend = \"mooncake\"; set it to false here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if pool.model.is_hybrid() {
        return Err(c.err(
            &flag,
            format!(
                "model {} keeps recurrent state beside its KV: sglang's decode offload supports MHA and MLA KV pools only (DecodeKVCacheOffloadManager raises \"Unsupported KV cache type for decode offload\"), so the server would not start; set it to false",
                pool.model.name
            ),
        ));
    }
    for (f, set) in [
        ("hicache_write_policy", s.hicache_write_policy.is_some()),
        (
            "hicache_storage_prefetch_policy",
            s.hicache_storage_prefetch_policy.is_some(),
        ),
    ] {
        if set {
            return Err(c.err(
                &k(f),
                "does nothing on a decode pool: its offload writes every block a request's output completes, as it fills, and never prefetches; drop it",
            ));
        }
    }
    // sglang's offload writes through `--hicache-storage-backend`, which it needs; pdsim's one
    // backend is the scenario's Mooncake Store, so leaving it out here means that one (and
    // `plan`'s launch line writes it).
    if let Some(other) = s
        .hicache_storage_backend
        .as_deref()
        .filter(|b| *b != "mooncake")
    {
        return Err(c.err(
            &k("hicache_storage_backend"),
            format!("{other:?} is not modelled; valid: \"mooncake\" (the scenario's [kv_store]), or leave it out (the same)"),
        ));
    }
    let (host_tokens, per_rank) = host_pool(c, key, p, pool, gpu)?;
    let attn_tp = pool.server.attn_tp_size;
    Ok(Some(crate::config::DecodeOffloadParams {
        host_tokens,
        bytes_per_token: per_rank * u64::from(attn_tp),
        pcie_bytes_per_ns: pcie_bytes_per_s(gpu) * f64::from(attn_tp) / 1e9,
    }))
}

/// `[kv_store]`: needed by, and only by, prefill pools with `hicache_storage_backend =
/// "mooncake"` and decode pools that offload (`disaggregation_decode_enable_offload_kvcache`). Its capacity is counted in the
/// tokens of the first such pool (every such pool must store the same KV bytes per token: the
/// store's blocks are shared between them).
pub(super) fn kv_store(
    c: &Checker,
    file: &ScenarioFile,
    pools: &[Pool],
    nodes: u32,
) -> Result<Option<crate::config::KvStoreParams>, ScenarioError> {
    // (pool, KV bytes per token, the key that makes it a user)
    let users: Vec<(&Pool, u64, String)> = pools
        .iter()
        .filter_map(|p| {
            if let Some(h) = p.hicache.filter(|h| h.storage) {
                Some((
                    p,
                    h.bytes_per_token,
                    format!("pools.{}.server.hicache_storage_backend", p.name),
                ))
            } else {
                p.decode_offload.map(|o| {
                    (
                        p,
                        o.bytes_per_token,
                        format!(
                            "pools.{}.server.disaggregation_decode_enable_offload_kvcache",
                            p.name
                        ),
                    )
                })
            }
        })
        .collect();
    let Some(ks) = &file.kv_store else {
        if let Some((p, _, key)) = users.first() {
            let what = if p.hicache.is_some() {
                "\"mooncake\" needs the store"
            } else {
                "writes to the Mooncake Store"
            };
            return Err(c.err(
                key,
                format!("{what}: add a [kv_store] section (capacity_gb, nodes, eviction)"),
            ));
        }
        return Ok(None);
    };
    let Some((first, bpt, _)) = users.first() else {
        return Err(c.err(
            "kv_store",
            "no pool uses it: set enable_hierarchical_cache = true and hicache_storage_backend = \"mooncake\" on a prefill pool (or disaggregation_decode_enable_offload_kvcache = true on a decode pool), or drop [kv_store]",
        ));
    };
    let bpt = *bpt;
    if let Some((other, other_bpt, key)) = users.iter().find(|u| u.1 != bpt) {
        return Err(c.err(
            key,
            format!(
                "pools sharing the [kv_store] must store the same KV bytes per token; pool {:?} has {} and pool {:?} {}",
                first.name, bpt, other.name, other_bpt
            ),
        ));
    }
    let capacity_tokens = match ks.capacity_gb {
        None => None,
        Some(gb) => {
            if !(gb.is_finite() && gb > 0.0 && gb <= 1e9) {
                return Err(c.err(
                    "kv_store.capacity_gb",
                    format!("must be a positive number of GB, at most 1e9 (leave it out for an unbounded store), got {gb}"),
                ));
            }
            Some((gb * 1e9 / bpt as f64) as u64)
        }
    };
    let store_nodes = if ks.nodes.is_empty() {
        vec![0]
    } else {
        ks.nodes.clone()
    };
    if let Some(&n) = store_nodes.iter().find(|&&n| n >= nodes) {
        return Err(c.err(
            "kv_store.nodes",
            format!(
                "node {n} is not in the cluster, which has nodes 0 to {}",
                nodes - 1
            ),
        ));
    }
    let mut sorted = store_nodes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != store_nodes.len() {
        return Err(c.err("kv_store.nodes", "lists a node twice"));
    }
    let evict = match ks.eviction.as_str() {
        "lru" => true,
        "none" => false,
        other => {
            return Err(c.err(
                "kv_store.eviction",
                format!("{other:?} is not an eviction policy; valid: \"lru\" (least recently used blocks make room), \"none\" (a full store takes no more)"),
            ));
        }
    };
    Ok(Some(crate::config::KvStoreParams {
        capacity_tokens,
        nodes: store_nodes,
        evict,
    }))
}

/// `pools.<name>.step_times`: the scenario layer reads the file; `compute/` only parses text.
fn step_times(
    c: &Checker,
    key: &str,
    path: &str,
) -> Result<crate::compute::MeasuredProfile, ScenarioError> {
    use crate::compute::profile::{ProfileError, parse_profile};
    let path = c.resolve_path(path);
    std::fs::read_to_string(&path)
        .map_err(|source| ProfileError::Io {
            path: path.clone(),
            source,
        })
        .and_then(|text| parse_profile(&path, &text))
        .map_err(|e| c.err(&format!("{key}.step_times"), e.to_string()))
}

/// `[expect]`: what serde cannot check (finite, non-negative, min ≤ max, attainment ≤ 1).
pub(super) fn expect(c: &Checker, e: Option<&super::expect::Expect>) -> Result<(), ScenarioError> {
    match e.map(super::expect::Expect::check) {
        Some(Err((key, message))) => Err(c.err(&key, message)),
        _ => Ok(()),
    }
}

/// `[router]`: a policy per side and `cache_aware`'s parameters. `prefill_policy` and
/// `decode_policy` are the PD router's flags: a plain (colocated) cluster has neither side.
pub(super) fn router(
    c: &Checker,
    r: &file::RouterSection,
    colocated: bool,
) -> Result<RouterParams, ScenarioError> {
    if colocated {
        for (key, v) in [
            ("router.prefill_policy", r.prefill_policy),
            ("router.decode_policy", r.decode_policy),
        ] {
            if v.is_some() {
                return Err(c.err(
                    key,
                    "is a PD router flag (--prefill-policy / --decode-policy), and this cluster has colocated servers; set router.policy instead",
                ));
            }
        }
    }
    if !(0.0..=1.0).contains(&r.cache_threshold) {
        return Err(c.err(
            "router.cache_threshold",
            format!(
                "must be a prefix match rate in [0, 1] (sgl-model-gateway's default: 0.3), got {}",
                r.cache_threshold
            ),
        ));
    }
    if !(r.balance_rel_threshold.is_finite() && r.balance_rel_threshold >= 1.0) {
        return Err(c.err(
            "router.balance_rel_threshold",
            format!(
                "must be a load ratio ≥ 1 (sgl-model-gateway's default: 1.5), got {}",
                r.balance_rel_threshold
            ),
        ));
    }
    if r.balance_abs_threshold > u64::from(u32::MAX) {
        return Err(c.err(
            "router.balance_abs_threshold",
            format!(
                "must be a number of requests ≤ {} (sgl-model-gateway's default: 64), got {}",
                u32::MAX,
                r.balance_abs_threshold
            ),
        ));
    }
    if r.eviction_interval_secs as f64 > limits::MAX_DURATION_S {
        return Err(c.err(
            "router.eviction_interval_secs",
            format!(
                "must be at most {} s (0 turns eviction off; sgl-model-gateway's default: 60), got {}",
                limits::MAX_DURATION_S,
                r.eviction_interval_secs
            ),
        ));
    }
    if r.max_tree_size == 0 {
        return Err(c.err(
            "router.max_tree_size",
            "must be ≥ 1 character (sgl-model-gateway's default: 67108864 = 2^26)",
        ));
    }
    Ok(RouterParams {
        prefill: r.prefill_policy.unwrap_or(r.policy),
        decode: r.decode_policy.unwrap_or(r.policy),
        cache_aware: CacheAwareParams {
            cache_threshold: r.cache_threshold as f32,
            balance_abs_threshold: r.balance_abs_threshold,
            balance_rel_threshold: r.balance_rel_threshold as f32,
            eviction_interval_ns: r.eviction_interval_secs * crate::engine::NS_PER_S,
            max_tree_size: r.max_tree_size,
        },
    })
}
