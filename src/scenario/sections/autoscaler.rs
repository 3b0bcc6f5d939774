//! `[autoscaler]` (issue 38, item 3): the policy that sizes the pools and its settings, checked
//! into [`Autoscaler`]. Every bad value is exit 2 naming `autoscaler.<key>` and what is valid; a
//! key of another policy is an error, never ignored; `ttft_ms` and `itl_ms` default from
//! `[slo]`'s per-request thresholds (`slo.ttft_ms`, `slo.tpot_ms`) when the scenario sets them,
//! else to Dynamo's 500 and 50 ms. Rules and sources: `docs/autoscaling.md`.

use super::super::file::{AutoscalerSection, ScenarioFile};
use super::super::{Checker, ScenarioError, suggestion};
use crate::config::autoscale::{
    Autoscaler, LOAD_PREDICTORS, LoadPredictor, OPTIMIZATION_TARGETS, OptimizationTarget, POLICIES,
    SWEEPING_MODES, SlaPlannerParams, SweepingMode, ThresholdParams,
};
use crate::config::{Pool, Role};
use crate::engine::ns_from_secs_ceil;

/// Most instances a pool bound (`min_endpoint`, `min_replicas`, `max_replicas`) may name, and
/// most samples a regression may keep: far above any cluster pdsim can place.
const MAX_COUNT: i64 = 1 << 20;

/// The keys of `policy = "sla_planner"`, with whether each is set.
fn sla_keys(a: &AutoscalerSection) -> [(&'static str, bool); 20] {
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
        let (gp, gd) = (pre[0].server.tp_size, dec[0].server.tp_size);
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
