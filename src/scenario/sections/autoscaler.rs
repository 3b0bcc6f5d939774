//! `[autoscaler]` (issue 38, item 3): the policy that sizes the pools and its settings, checked
//! into [`Autoscaler`]. Every bad value is exit 2 naming `autoscaler.<key>` and what is valid; a
//! key of another policy is an error, never ignored; `ttft_ms` and `itl_ms` default from
//! `[slo]`'s per-request thresholds (`slo.ttft_ms`, `slo.tpot_ms`) when the scenario sets them,
//! else to Dynamo's 500 and 50 ms. Rules and sources: `docs/autoscaling.md`.

use super::super::file::{AutoscalerSection, ScenarioFile};
use super::super::{Checker, ScenarioError, suggestion};
use crate::config::autoscale::{
    Autoscaler, DECODE, DEFAULT_CUDA_GRAPH_CAPTURE_NS, DEFAULT_ROUTER_CHECK_INTERVAL_NS,
    DEFAULT_WEIGHT_LOAD_BYTES_PER_S, LOAD_PREDICTORS, Lifecycle, LoadPredictor, METRICS_SOURCES,
    MetricsSource, OPTIMIZATION_TARGETS, OptimizationTarget, POLICIES, PREFILL, SWEEPING_MODES,
    SlaPlannerParams, SweepingMode, ThresholdParams,
};
use crate::config::{Pool, Role};
use crate::engine::ns_from_secs_ceil;

/// Most instances a pool bound (`min_endpoint`, `min_replicas`, `max_replicas`) may name, and
/// most samples a regression may keep: far above any cluster pdsim can place.
const MAX_COUNT: i64 = 1 << 20;

/// The keys of `policy = "sla_planner"`, with whether each is set.
fn sla_keys(a: &AutoscalerSection) -> [(&'static str, bool); 21] {
    [
        ("optimization_target", a.optimization_target.is_some()),
        (
            "throughput_adjustment_interval_s",
            a.throughput_adjustment_interval_s.is_some(),
        ),
        (
            "load_adjustment_interval_s",
            a.load_adjustment_interval_s.is_some(),
        ),
        (
            "enable_throughput_scaling",
            a.enable_throughput_scaling.is_some(),
        ),
        ("enable_load_scaling", a.enable_load_scaling.is_some()),
        ("min_endpoint", a.min_endpoint.is_some()),
        ("max_gpu_budget", a.max_gpu_budget.is_some()),
        ("min_gpu_budget", a.min_gpu_budget.is_some()),
        ("ttft_ms", a.ttft_ms.is_some()),
        ("itl_ms", a.itl_ms.is_some()),
        ("load_predictor", a.load_predictor.is_some()),
        ("load_predictor_log1p", a.load_predictor_log1p.is_some()),
        ("kalman_q_level", a.kalman_q_level.is_some()),
        ("kalman_q_trend", a.kalman_q_trend.is_some()),
        ("kalman_r", a.kalman_r.is_some()),
        ("max_num_fpm_samples", a.max_num_fpm_samples.is_some()),
        ("fpm_sample_bucket_size", a.fpm_sample_bucket_size.is_some()),
        ("load_min_observations", a.load_min_observations.is_some()),
        (
            "load_scaling_down_sensitivity",
            a.load_scaling_down_sensitivity.is_some(),
        ),
        (
            "pre_deployment_sweeping_mode",
            a.pre_deployment_sweeping_mode.is_some(),
        ),
        (
            "throughput_metrics_source",
            a.throughput_metrics_source.is_some(),
        ),
    ]
}

/// The keys of `policy = "threshold"`, with whether each is set.
fn threshold_keys(a: &AutoscalerSection) -> [(&'static str, bool); 9] {
    [
        ("interval_s", a.interval_s.is_some()),
        ("kv_cache_threshold", a.kv_cache_threshold.is_some()),
        ("queue_length_threshold", a.queue_length_threshold.is_some()),
        ("kv_spare_trigger", a.kv_spare_trigger.is_some()),
        ("queue_spare_trigger", a.queue_spare_trigger.is_some()),
        (
            "scale_up_stabilization_s",
            a.scale_up_stabilization_s.is_some(),
        ),
        (
            "scale_down_stabilization_s",
            a.scale_down_stabilization_s.is_some(),
        ),
        ("min_replicas", a.min_replicas.is_some()),
        ("max_replicas", a.max_replicas.is_some()),
    ]
}

/// `[autoscaler]` checked against the pools it will size.
pub(in crate::scenario) fn autoscaler(
    c: &Checker,
    file: &ScenarioFile,
    pools: &[Pool],
) -> Result<Autoscaler, ScenarioError> {
    let Some(a) = &file.autoscaler else {
        return Ok(Autoscaler::Static);
    };
    let list = POLICIES
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let Some(policy) = a.policy.as_deref() else {
        return Err(c.err(
            "autoscaler.policy",
            format!(
                "missing: name the policy that sizes the pools: {list} (\"static\": the sizes the scenario gives, as a scenario without [autoscaler]; \"sla_planner\": NVIDIA Dynamo's SLA planner; \"threshold\": llm-d's saturation thresholds behind a Kubernetes HPA)"
            ),
        ));
    };
    let foreign = |owner: &str, keys: &[(&'static str, bool)]| -> Result<(), ScenarioError> {
        if let Some((k, _)) = keys.iter().find(|(_, set)| *set) {
            let what = if policy == "static" {
                "policy = \"static\" takes no other key (the pools keep the sizes the scenario gives)".to_string()
            } else {
                format!("this [autoscaler] has policy = \"{policy}\"")
            };
            return Err(c.err(
                &format!("autoscaler.{k}"),
                format!(
                    "is a setting of policy = \"{owner}\", and {what}: remove the key or change the policy"
                ),
            ));
        }
        Ok(())
    };
    let checked = match policy {
        "static" => {
            foreign("sla_planner", &sla_keys(a))?;
            foreign("threshold", &threshold_keys(a))?;
            return Ok(Autoscaler::Static);
        }
        "sla_planner" => {
            foreign("threshold", &threshold_keys(a))?;
            Autoscaler::SlaPlanner(sla_planner(c, a, file)?)
        }
        "threshold" => {
            foreign("sla_planner", &sla_keys(a))?;
            Autoscaler::Threshold(threshold(c, a)?)
        }
        other => {
            return Err(c.err(
                "autoscaler.policy",
                format!(
                    "{other:?} is not a policy; valid: {list}{}",
                    suggestion(other, &POLICIES)
                ),
            ));
        }
    };
    pools_fit(c, policy, &checked, pools)?;
    Ok(checked)
}

/// The keys of how pools change size, with whether each is set (any resizing policy).
fn lifecycle_keys(a: &AutoscalerSection) -> [(&'static str, bool); 6] {
    [
        ("context_length", a.context_length.is_some()),
        ("startup_s", a.startup_s.is_some()),
        ("weight_load_gb_per_s", a.weight_load_gb_per_s.is_some()),
        ("cuda_graph_capture_s", a.cuda_graph_capture_s.is_some()),
        (
            "router_check_interval_s",
            a.router_check_interval_s.is_some(),
        ),
        ("role_switch", a.role_switch.is_some()),
    ]
}

/// How the pools of a resizing policy change size ([`Lifecycle`]), and the pools grown to the
/// slots it may fill: each pool's `instances` becomes its slot count (every slot is placed
/// before the run, so a scale-up finds its GPUs), the scenario's count staying the initial one.
/// `None` (and the pools untouched) under `static`, where a lifecycle key is an error.
pub(in crate::scenario) fn lifecycle(
    c: &Checker,
    file: &ScenarioFile,
    checked: &Autoscaler,
    pools: &mut [Pool],
) -> Result<Option<Lifecycle>, ScenarioError> {
    let Some(a) = &file.autoscaler else {
        return Ok(None);
    };
    if !checked.resizes() {
        if let Some((k, _)) = lifecycle_keys(a).iter().find(|(_, set)| *set) {
            return Err(c.err(
                &format!("autoscaler.{k}"),
                "says how pools change size, and policy = \"static\" never changes them: remove the key, or name a policy that resizes (\"sla_planner\", \"threshold\")",
            ));
        }
        return Ok(None);
    }
    let pi = pools.iter().position(|p| p.role == Role::Prefill);
    let di = pools.iter().position(|p| p.role == Role::Decode);
    let (Some(pi), Some(di)) = (pi, di) else {
        unreachable!("pools_fit checked one prefill and one decode pool");
    };
    for &i in &[pi, di] {
        let p = &pools[i];
        if p.parallel.dp_ranks() > 1 {
            return Err(c.err(
                "autoscaler.policy",
                format!(
                    "pool {:?} runs DP attention (dp_size = {}): pdsim runs each DP rank as a server of its own and a policy sizes whole instances; resizing a DP-attention pool is not modelled: use policy = \"static\"",
                    p.name, p.parallel.dp_size
                ),
            ));
        }
    }
    let gpus = [pools[pi].server.gpus(), pools[di].server.gpus()];
    let initial = [pools[pi].instances, pools[di].instances];
    let bound = match checked {
        Autoscaler::SlaPlanner(p) => {
            let Some(max) = p.max_gpu_budget else {
                return Err(c.err(
                    "autoscaler.max_gpu_budget",
                    "-1 leaves the pools without a ceiling, and pdsim places every instance a policy may start before the run (a scale-up needs GPUs to land on): give the most GPUs both pools may use",
                ));
            };
            let m = p.min_endpoint;
            [
                max.saturating_sub(m * gpus[DECODE]) / gpus[PREFILL],
                max.saturating_sub(m * gpus[PREFILL]) / gpus[DECODE],
            ]
        }
        Autoscaler::Threshold(t) => [t.max_replicas, t.max_replicas],
        Autoscaler::Static => unreachable!("checked.resizes()"),
    };
    let slots = [bound[0].max(initial[0]), bound[1].max(initial[1])];
    let mut lc = Lifecycle {
        initial,
        slots,
        gpus,
        weight_bytes_per_gpu: [pi, di].map(|i| {
            let p = &pools[i];
            crate::config::capacity::weight_bytes_per_gpu(&p.model, &p.server, &p.parallel) as u64
        }),
        startup_ns: None,
        weight_load_bytes_per_s: DEFAULT_WEIGHT_LOAD_BYTES_PER_S,
        cuda_graph_capture_ns: DEFAULT_CUDA_GRAPH_CAPTURE_NS,
        router_check_interval_ns: DEFAULT_ROUTER_CHECK_INTERVAL_NS,
        role_switch: a.role_switch.unwrap_or(false),
        context_length: None,
    };
    if let Some(s) = a.startup_s {
        let s = c.duration("autoscaler.startup_s", s, true)?;
        lc.startup_ns = Some(ns_from_secs_ceil(s));
    }
    if let Some(g) = a.weight_load_gb_per_s {
        let g = c.positive(
            "autoscaler.weight_load_gb_per_s",
            g,
            "GB/s each GPU reads its weight shard at",
        )?;
        if g < 1e-3 {
            return Err(c.err(
                "autoscaler.weight_load_gb_per_s",
                format!("{g} GB/s is below 1 MB/s: a cold start would outlast any run; give the storage's read rate per GPU in GB/s (1.7 GiB/s ≈ 1.83 is the default)"),
            ));
        }
        lc.weight_load_bytes_per_s = g * 1e9;
    }
    if let Some(s) = a.cuda_graph_capture_s {
        let s = c.duration("autoscaler.cuda_graph_capture_s", s, true)?;
        lc.cuda_graph_capture_ns = ns_from_secs_ceil(s);
    }
    if let Some(s) = a.router_check_interval_s {
        let s = c.duration("autoscaler.router_check_interval_s", s, false)?;
        lc.router_check_interval_ns = ns_from_secs_ceil(s);
    }
    if let Some(n) = a.context_length {
        lc.context_length = Some(u64::from(int(
            c,
            "autoscaler.context_length",
            n,
            1024,
            i64::from(u32::MAX),
            "tokens: the engines' --context-length, which Dynamo's pre-deployment sweep spans",
        )?));
    }
    if lc.role_switch {
        role_switch_fits(c, &pools[pi], &pools[di])?;
    }
    pools[pi].instances = slots[PREFILL];
    pools[di].instances = slots[DECODE];
    Ok(Some(lc))
}

/// sglang's role switch flips a server in place (PR #28403): both pools must run the same
/// server, and the PR rejects at start-up what it does not rebuild on a flip.
fn role_switch_fits(c: &Checker, p: &Pool, d: &Pool) -> Result<(), ScenarioError> {
    let key = "autoscaler.role_switch";
    let same = |what: &str, a: String, b: String| -> Result<(), ScenarioError> {
        if a == b {
            return Ok(());
        }
        Err(c.err(
            key,
            format!(
                "a role switch flips a server in place, with its weights and its KV pool (sglang PR #28403: \"assumes P/D launch with a matching config\"), so both pools must have the same {what}: prefill pool {:?} has {a}, decode pool {:?} has {b}",
                p.name, d.name
            ),
        ))
    };
    same("model", p.model.name.clone(), d.model.name.clone())?;
    same(
        "tp_size",
        p.server.tp_size.to_string(),
        d.server.tp_size.to_string(),
    )?;
    // A decode pool is one pipeline stage (`sections::pipeline`): so must a flipped prefill be.
    same(
        "pp_size",
        p.server.pp_size.to_string(),
        d.server.pp_size.to_string(),
    )?;
    // A prefill pool has no decode context parallelism (`sections::dcp`): a DCP decode
    // flipped in place would be one, with its token-sharded KV pool.
    same(
        "dcp_size",
        p.server.dcp_size.to_string(),
        d.server.dcp_size.to_string(),
    )?;
    same(
        "page_size",
        p.server.page_size.to_string(),
        d.server.page_size.to_string(),
    )?;
    for pool in [p, d] {
        let par = &pool.parallel;
        let rejected = if par.ep_size > 1 {
            Some(format!("--ep-size {}", par.ep_size))
        } else if par.moe_a2a_backend != crate::spec::server::A2aBackend::None {
            Some("--moe-a2a-backend deepep".to_string())
        } else {
            None
        };
        if let Some(flag) = rejected {
            return Err(c.err(
                key,
                format!(
                    "pool {:?} runs {flag}, which sglang's role switch rejects at start-up (PR #28403: per-role state fixed at launch, not rebuilt on a flip: DP attention, dp_size > 1, ep_size > 1, a MoE all-to-all backend, pp_size > 1): set role_switch = false",
                    pool.name
                ),
            ));
        }
    }
    Ok(())
}

/// A policy that resizes pools sizes one prefill and one decode pool.
fn pools_fit(
    c: &Checker,
    policy: &str,
    checked: &Autoscaler,
    pools: &[Pool],
) -> Result<(), ScenarioError> {
    let of = |r: Role| pools.iter().filter(|p| p.role == r).collect::<Vec<_>>();
    let (pre, dec, colo) = (of(Role::Prefill), of(Role::Decode), of(Role::Colocated));
    if !colo.is_empty() {
        return Err(c.err(
            "autoscaler.policy",
            format!(
                "policy = \"{policy}\" sizes a PD cluster's prefill and decode pools; this scenario's pools are colocated (Dynamo's aggregated mode is not modelled): use policy = \"static\""
            ),
        ));
    }
    if pre.len() != 1 || dec.len() != 1 {
        return Err(c.err(
            "autoscaler.policy",
            format!(
                "policy = \"{policy}\" sizes one prefill pool and one decode pool; this scenario has {} prefill and {} decode pools: merge them, or use policy = \"static\"",
                pre.len(),
                dec.len()
            ),
        ));
    }
    if let Autoscaler::SlaPlanner(p) = checked
        && let Some(max) = p.max_gpu_budget
    {
        let (gp, gd) = (pre[0].server.gpus(), dec[0].server.gpus());
        let need = u64::from(p.min_endpoint) * u64::from(gp + gd);
        if u64::from(max) < need {
            return Err(c.err(
                "autoscaler.max_gpu_budget",
                format!(
                    "{max} GPUs cannot hold min_endpoint = {} instance of each pool ({} × ({gp} + {gd}) = {need} GPUs; Dynamo would scale both pools to zero): raise it to at least {need}, or -1 for no ceiling",
                    p.min_endpoint, p.min_endpoint
                ),
            ));
        }
        if let Some(min) = p.min_gpu_budget
            && min > max
        {
            return Err(c.err(
                "autoscaler.min_gpu_budget",
                format!("{min} GPUs is above max_gpu_budget = {max}: the floor must not exceed the ceiling"),
            ));
        }
    }
    Ok(())
}

/// One of a closed set of names, or an error listing them.
fn choice<'v>(
    c: &Checker,
    key: &str,
    given: &str,
    valid: &[&'v str],
    extra: &str,
) -> Result<&'v str, ScenarioError> {
    valid.iter().find(|v| **v == given).copied().ok_or_else(|| {
        let list = valid
            .iter()
            .map(|v| format!("\"{v}\""))
            .collect::<Vec<_>>()
            .join(", ");
        c.err(
            key,
            format!(
                "{given:?} is not valid; valid: {list}{extra}{}",
                suggestion(given, valid)
            ),
        )
    })
}

/// An integer in `lo ..= hi`, or an error saying what it counts.
fn int(c: &Checker, key: &str, v: i64, lo: i64, hi: i64, what: &str) -> Result<u32, ScenarioError> {
    if v < lo || v > hi {
        return Err(c.err(
            key,
            format!("must be an integer in {lo} ..= {hi} ({what}), got {v}"),
        ));
    }
    Ok(v as u32)
}

/// A GPU bound: −1 (off, Dynamo's negative budget) or a count of GPUs.
fn gpu_bound(c: &Checker, key: &str, v: i64) -> Result<Option<u32>, ScenarioError> {
    if v == -1 {
        return Ok(None);
    }
    if !(0..=i64::from(crate::vocab::limits::MAX_CLUSTER_GPUS)).contains(&v) {
        return Err(c.err(
            key,
            format!(
                "must be -1 (no bound: Dynamo treats any negative budget as none) or a number of GPUs in 0 ..= {}, got {v}",
                crate::vocab::limits::MAX_CLUSTER_GPUS
            ),
        ));
    }
    Ok(Some(v as u32))
}

/// A latency target, ms.
fn target_ms(c: &Checker, key: &str, v: f64) -> Result<f64, ScenarioError> {
    if !(v.is_finite() && v > 0.0) {
        return Err(c.err(
            key,
            format!("must be a positive number of milliseconds, got {v}"),
        ));
    }
    c.within_clock(key, v, 1e-3, "ms")
}

/// `policy = "sla_planner"`.
fn sla_planner(
    c: &Checker,
    a: &AutoscalerSection,
    file: &ScenarioFile,
) -> Result<SlaPlannerParams, ScenarioError> {
    let mut p = SlaPlannerParams::default();
    if let Some(t) = a.optimization_target.as_deref() {
        p.optimization_target = match choice(
            c,
            "autoscaler.optimization_target",
            t,
            &OPTIMIZATION_TARGETS,
            " (\"sla\": the regressions against ttft_ms and itl_ms; \"throughput\" and \"latency\": Dynamo's static queue and KV thresholds, load path only)",
        )? {
            "sla" => OptimizationTarget::Sla,
            "throughput" => OptimizationTarget::Throughput,
            _ => OptimizationTarget::Latency,
        };
    }
    let easy = p.optimization_target != OptimizationTarget::Sla;
    if easy {
        // Dynamo's `_validate_config`: a threshold target forces load scaling on and throughput
        // scaling off, and ignores the SLA targets. pdsim says so instead of ignoring a key.
        let target = a.optimization_target.as_deref().unwrap_or_default();
        for (key, contradicts) in [
            (
                "enable_throughput_scaling",
                a.enable_throughput_scaling == Some(true),
            ),
            ("enable_load_scaling", a.enable_load_scaling == Some(false)),
            ("ttft_ms", a.ttft_ms.is_some()),
            ("itl_ms", a.itl_ms.is_some()),
        ] {
            if contradicts {
                return Err(c.err(
                    &format!("autoscaler.{key}"),
                    format!(
                        "optimization_target = \"{target}\" scales on static queue and KV thresholds only (Dynamo forces the load path on, the throughput path off, and ignores ttft/itl): remove the key, or set optimization_target = \"sla\""
                    ),
                ));
            }
        }
        p.enable_throughput_scaling = false;
        p.enable_load_scaling = true;
    } else {
        if let Some(b) = a.enable_throughput_scaling {
            p.enable_throughput_scaling = b;
        }
        if let Some(b) = a.enable_load_scaling {
            p.enable_load_scaling = b;
        }
        if !p.enable_throughput_scaling && !p.enable_load_scaling {
            return Err(c.err(
                if a.enable_load_scaling.is_some() {
                    "autoscaler.enable_load_scaling"
                } else {
                    "autoscaler.enable_throughput_scaling"
                },
                "at least one of enable_throughput_scaling and enable_load_scaling must be true (Dynamo refuses a planner that scales on neither)",
            ));
        }
    }
    if let Some(s) = a.throughput_adjustment_interval_s {
        let s = c.duration("autoscaler.throughput_adjustment_interval_s", s, false)?;
        p.throughput_adjustment_interval_ns = ns_from_secs_ceil(s);
    }
    if let Some(s) = a.load_adjustment_interval_s {
        let s = c.duration("autoscaler.load_adjustment_interval_s", s, false)?;
        p.load_adjustment_interval_ns = ns_from_secs_ceil(s);
    }
    if p.enable_load_scaling
        && p.enable_throughput_scaling
        && p.load_adjustment_interval_ns >= p.throughput_adjustment_interval_ns
    {
        let key = if a.load_adjustment_interval_s.is_some() {
            "autoscaler.load_adjustment_interval_s"
        } else {
            "autoscaler.throughput_adjustment_interval_s"
        };
        return Err(c.err(
            key,
            format!(
                "load_adjustment_interval_s ({} s) must be shorter than throughput_adjustment_interval_s ({} s) with both paths on: the load path is the fast reactive loop, the throughput path the slow predictive one (Dynamo's rule)",
                p.load_adjustment_interval_ns as f64 / 1e9,
                p.throughput_adjustment_interval_ns as f64 / 1e9
            ),
        ));
    }
    if let Some(v) = a.min_endpoint {
        p.min_endpoint = int(
            c,
            "autoscaler.min_endpoint",
            v,
            1,
            MAX_COUNT,
            "fewest instances of each pool; pdsim does not scale a pool to zero",
        )?;
    }
    if let Some(v) = a.max_gpu_budget {
        p.max_gpu_budget = gpu_bound(c, "autoscaler.max_gpu_budget", v)?;
    }
    if let Some(v) = a.min_gpu_budget {
        p.min_gpu_budget = gpu_bound(c, "autoscaler.min_gpu_budget", v)?;
    }
    // The SLA targets: the scenario's own per-request thresholds when it has them.
    p.ttft_ms = match a.ttft_ms {
        Some(v) => target_ms(c, "autoscaler.ttft_ms", v)?,
        None => file
            .slo
            .ttft_ms
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(p.ttft_ms),
    };
    p.itl_ms = match a.itl_ms {
        Some(v) => target_ms(c, "autoscaler.itl_ms", v)?,
        None => file
            .slo
            .tpot_ms
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(p.itl_ms),
    };
    if let Some(s) = a.load_predictor.as_deref() {
        if s == "prophet" {
            return Err(c.err(
                "autoscaler.load_predictor",
                "\"prophet\" is one of Dynamo's predictors that pdsim does not implement (Meta's Prophet fits a Stan model by optimisation; pdsim has no deterministic equivalent): use \"arima\" (Dynamo's default), \"kalman\" or \"constant\"",
            ));
        }
        p.load_predictor = match choice(c, "autoscaler.load_predictor", s, &LOAD_PREDICTORS, "")? {
            "arima" => LoadPredictor::Arima,
            "kalman" => LoadPredictor::Kalman,
            _ => LoadPredictor::Constant,
        };
    }
    if let Some(b) = a.load_predictor_log1p {
        p.load_predictor_log1p = b;
    }
    for (key, v, slot) in [
        ("kalman_q_level", a.kalman_q_level, &mut p.kalman_q_level),
        ("kalman_q_trend", a.kalman_q_trend, &mut p.kalman_q_trend),
        ("kalman_r", a.kalman_r, &mut p.kalman_r),
    ] {
        if let Some(v) = v {
            *slot = c.non_negative(
                &format!("autoscaler.{key}"),
                v,
                "a Kalman filter's noise variance",
            )?;
        }
    }
    if let Some(v) = a.max_num_fpm_samples {
        p.max_num_fpm_samples = int(
            c,
            "autoscaler.max_num_fpm_samples",
            v,
            1,
            MAX_COUNT,
            "forward samples each regression keeps",
        )?;
    }
    if let Some(v) = a.fpm_sample_bucket_size {
        let b = int(
            c,
            "autoscaler.fpm_sample_bucket_size",
            v,
            1,
            MAX_COUNT,
            "buckets the kept samples spread over",
        )?;
        let r = (f64::from(b).sqrt()) as u32;
        if r * r != b {
            return Err(c.err(
                "autoscaler.fpm_sample_bucket_size",
                format!(
                    "must be a perfect square (the decode regression's two axes get its square root each: 16 → 4 × 4), got {b}; the nearest are {} and {}",
                    r * r,
                    (r + 1) * (r + 1)
                ),
            ));
        }
        p.fpm_sample_bucket_size = b;
    }
    if let Some(v) = a.load_min_observations {
        p.load_min_observations = int(
            c,
            "autoscaler.load_min_observations",
            v,
            1,
            MAX_COUNT,
            "samples before a regression is trusted",
        )?;
    }
    if let Some(v) = a.load_scaling_down_sensitivity {
        p.load_scaling_down_sensitivity = int(
            c,
            "autoscaler.load_scaling_down_sensitivity",
            v,
            0,
            100,
            "percent of the SLA headroom a scale-down may use",
        )?;
    }
    if let Some(s) = a.throughput_metrics_source.as_deref() {
        p.throughput_metrics_source = match choice(
            c,
            "autoscaler.throughput_metrics_source",
            s,
            &METRICS_SOURCES,
            " (\"frontend\": requests that ended in the window, success or failure, as the frontend's counter counts them; \"router\": requests the router admitted in the window)",
        )? {
            "frontend" => MetricsSource::Frontend,
            _ => MetricsSource::Router,
        };
    }
    if let Some(s) = a.pre_deployment_sweeping_mode.as_deref() {
        p.pre_deployment_sweeping_mode = match choice(
            c,
            "autoscaler.pre_deployment_sweeping_mode",
            s,
            &SWEEPING_MODES,
            " (\"rapid\": the regressions start from a sweep of pdsim's own step model, as Dynamo's rapid mode starts from AIConfigurator; \"none\": from live samples only)",
        )? {
            "rapid" => SweepingMode::Rapid,
            _ => SweepingMode::None,
        };
    }
    if p.pre_deployment_sweeping_mode == SweepingMode::None && p.enable_throughput_scaling {
        return Err(c.err(
            "autoscaler.pre_deployment_sweeping_mode",
            "\"none\" leaves the throughput path without a performance model (Dynamo: \"Throughput-based scaling requires pre-deployment sweeping\"): use \"rapid\", or set enable_throughput_scaling = false",
        ));
    }
    Ok(p)
}

/// `policy = "threshold"`.
fn threshold(c: &Checker, a: &AutoscalerSection) -> Result<ThresholdParams, ScenarioError> {
    let mut p = ThresholdParams::default();
    if let Some(s) = a.interval_s {
        p.interval_ns = ns_from_secs_ceil(c.duration("autoscaler.interval_s", s, false)?);
    }
    let share = |key: &str, v: f64, zero_ok: bool, what: &str| -> Result<f64, ScenarioError> {
        let ok = v.is_finite() && v <= 1.0 && (v > 0.0 || (zero_ok && v == 0.0));
        if !ok {
            let range = if zero_ok { "[0, 1]" } else { "(0, 1]" };
            return Err(c.err(
                key,
                format!("must be a share of the KV cache in {range} ({what}), got {v}"),
            ));
        }
        Ok(v)
    };
    if let Some(v) = a.kv_cache_threshold {
        p.kv_cache_threshold = share(
            "autoscaler.kv_cache_threshold",
            v,
            false,
            "a replica at or above it is saturated; llm-d's default 0.80",
        )?;
    }
    if let Some(v) = a.kv_spare_trigger {
        p.kv_spare_trigger = share(
            "autoscaler.kv_spare_trigger",
            v,
            true,
            "scale up when the mean spare KV falls below it; llm-d's default 0.1",
        )?;
    }
    if let Some(v) = a.queue_length_threshold {
        p.queue_length_threshold = c.positive(
            "autoscaler.queue_length_threshold",
            v,
            "waiting requests at which a replica is saturated; llm-d's default 5",
        )?;
    }
    if let Some(v) = a.queue_spare_trigger {
        p.queue_spare_trigger = c.non_negative(
            "autoscaler.queue_spare_trigger",
            v,
            "requests: scale up when the mean spare queue falls below it; llm-d's default 3",
        )?;
    }
    if p.kv_spare_trigger > p.kv_cache_threshold {
        return Err(c.err(
            "autoscaler.kv_spare_trigger",
            format!(
                "{} is above kv_cache_threshold = {}: spare KV (threshold − use) can never reach it, so every look would scale up",
                p.kv_spare_trigger, p.kv_cache_threshold
            ),
        ));
    }
    if p.queue_spare_trigger > p.queue_length_threshold {
        return Err(c.err(
            "autoscaler.queue_spare_trigger",
            format!(
                "{} is above queue_length_threshold = {}: spare queue can never reach it, so every look would scale up",
                p.queue_spare_trigger, p.queue_length_threshold
            ),
        ));
    }
    if let Some(s) = a.scale_up_stabilization_s {
        p.scale_up_stabilization_ns =
            ns_from_secs_ceil(c.duration("autoscaler.scale_up_stabilization_s", s, true)?);
    }
    if let Some(s) = a.scale_down_stabilization_s {
        p.scale_down_stabilization_ns =
            ns_from_secs_ceil(c.duration("autoscaler.scale_down_stabilization_s", s, true)?);
    }
    if let Some(v) = a.min_replicas {
        p.min_replicas = int(
            c,
            "autoscaler.min_replicas",
            v,
            1,
            MAX_COUNT,
            "the HPA's minReplicas per pool; pdsim does not scale a pool to zero",
        )?;
    }
    if let Some(v) = a.max_replicas {
        p.max_replicas = int(
            c,
            "autoscaler.max_replicas",
            v,
            1,
            MAX_COUNT,
            "the HPA's maxReplicas per pool",
        )?;
    }
    if p.max_replicas < p.min_replicas {
        return Err(c.err(
            if a.max_replicas.is_some() {
                "autoscaler.max_replicas"
            } else {
                "autoscaler.min_replicas"
            },
            format!(
                "max_replicas = {} is below min_replicas = {}",
                p.max_replicas, p.min_replicas
            ),
        ));
    }
    Ok(p)
}
