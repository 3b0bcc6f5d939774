//! `[autoscaler]` (issue 38): the scenario table parsed and checked into its config, the config
//! built into a running policy, the verbs running it (`docs/autoscaling.md`), and a run whose
//! pools change size (`day`). The bad values are fixtures in
//! `tests/bad_scenarios/autoscaler_*.toml`, checked by `robustness`'s
//! `every_bad_scenario_gets_a_clear_error`.

#[path = "../common/mod.rs"]
mod common;
mod day;

use common::*;
use pdsim::autoscale::{
    self, Capabilities, EngineCaps, InstanceLoad, Observation, Policy, PoolCounts, StepTimes,
    Target,
};
use pdsim::config::autoscale::{
    Autoscaler, LoadPredictor, MetricsSource, OptimizationTarget, SlaPlannerParams, SweepingMode,
    ThresholdParams,
};
use pdsim::engine::NS_PER_S;
use pdsim::scenario::{self, ScenarioError};

/// The quickstart (2P2D at TP 2, `slo.ttft_ms = 1000`, `slo.tpot_ms = 50`) with `extra` appended.
fn quickstart_with(extra: &str) -> String {
    let text = std::fs::read_to_string(repo().join("scenarios/quickstart.toml")).unwrap();
    format!("{text}\n{extra}\n")
}

fn checked(text: &str, sets: &[&str]) -> Result<Autoscaler, ScenarioError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let path = repo().join("scenarios/quickstart.toml");
    scenario::from_str_any_autoscaler(text, &path, &sets).map(|sc| sc.autoscaler)
}

#[test]
fn no_table_and_static_are_the_fixed_pools() {
    let path = repo().join("scenarios/quickstart.toml");
    let sc = scenario::load(&path, &[]).unwrap();
    assert_eq!(sc.autoscaler, Autoscaler::Static);
    assert!(
        scenario::resolved_file(&sc).autoscaler.is_none(),
        "run.json unchanged without it"
    );
    let sc = scenario::load(&path, &["autoscaler.policy=static".into()]).unwrap();
    assert_eq!(sc.autoscaler, Autoscaler::Static);
    assert!(!sc.autoscaler.resizes());
}

#[test]
fn a_static_policy_runs_byte_for_byte_as_before() {
    let (a, b) = (tmpdir("static-none"), tmpdir("static-set"));
    let plain = run("scenarios/quickstart.toml", &["run.duration_s=20"], &a);
    let with = run(
        "scenarios/quickstart.toml",
        &["run.duration_s=20", "autoscaler.policy=static"],
        &b,
    );
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&with).unwrap()
    );
    for f in ["summary.json", "requests.csv", "timeseries.csv"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn the_sla_planner_defaults_are_dynamos_and_the_targets_come_from_slo() {
    let a = checked(
        &quickstart_with("[autoscaler]\npolicy = \"sla_planner\""),
        &[],
    )
    .unwrap();
    let want = SlaPlannerParams {
        // The quickstart's [slo]: ttft_ms = 1000, tpot_ms = 50.
        ttft_ms: 1000.0,
        itl_ms: 50.0,
        ..SlaPlannerParams::default()
    };
    assert_eq!(a, Autoscaler::SlaPlanner(want));
    let SlaPlannerParams {
        throughput_adjustment_interval_ns,
        load_adjustment_interval_ns,
        enable_throughput_scaling,
        enable_load_scaling,
        min_endpoint,
        max_gpu_budget,
        load_predictor,
        optimization_target,
        ..
    } = SlaPlannerParams::default();
    assert_eq!(throughput_adjustment_interval_ns, 180 * NS_PER_S);
    assert_eq!(load_adjustment_interval_ns, 5 * NS_PER_S);
    assert!(enable_throughput_scaling && !enable_load_scaling);
    assert_eq!((min_endpoint, max_gpu_budget), (1, Some(8)));
    assert_eq!(load_predictor, LoadPredictor::Arima);
    assert_eq!(optimization_target, OptimizationTarget::Sla);
    // Without [slo] thresholds, Dynamo's 500 and 50 ms.
    let text = quickstart_with("[autoscaler]\npolicy = \"sla_planner\"")
        .replace("ttft_ms = 1000\ntpot_ms = 50", "ttft_p99_ms = 2000");
    let Autoscaler::SlaPlanner(p) = checked(&text, &[]).unwrap() else {
        panic!()
    };
    assert_eq!((p.ttft_ms, p.itl_ms), (500.0, 50.0));
}

#[test]
fn every_sla_planner_key_reaches_its_setting() {
    let text = quickstart_with(
        r#"[autoscaler]
policy = "sla_planner"
throughput_adjustment_interval_s = 60
load_adjustment_interval_s = 2.5
enable_load_scaling = true
min_endpoint = 2
max_gpu_budget = 64
min_gpu_budget = 8
ttft_ms = 300
itl_ms = 25
load_predictor = "kalman"
load_predictor_log1p = true
kalman_q_level = 2
kalman_q_trend = 0.5
kalman_r = 4
max_num_fpm_samples = 128
fpm_sample_bucket_size = 25
load_min_observations = 8
load_scaling_down_sensitivity = 60
pre_deployment_sweeping_mode = "rapid"
throughput_metrics_source = "router"
"#,
    );
    let a = checked(&text, &[]).unwrap();
    assert_eq!(
        a,
        Autoscaler::SlaPlanner(SlaPlannerParams {
            optimization_target: OptimizationTarget::Sla,
            throughput_adjustment_interval_ns: 60 * NS_PER_S,
            load_adjustment_interval_ns: 2_500_000_000,
            enable_throughput_scaling: true,
            enable_load_scaling: true,
            min_endpoint: 2,
            max_gpu_budget: Some(64),
            min_gpu_budget: Some(8),
            ttft_ms: 300.0,
            itl_ms: 25.0,
            load_predictor: LoadPredictor::Kalman,
            load_predictor_log1p: true,
            kalman_q_level: 2.0,
            kalman_q_trend: 0.5,
            kalman_r: 4.0,
            max_num_fpm_samples: 128,
            fpm_sample_bucket_size: 25,
            load_min_observations: 8,
            load_scaling_down_sensitivity: 60,
            pre_deployment_sweeping_mode: SweepingMode::Rapid,
            throughput_metrics_source: MetricsSource::Router,
        })
    );
    // --set reaches the same keys, and a threshold target turns the paths around as Dynamo's
    // validator does (load on, throughput off), so `none` needs no sweep.
    let a = checked(
        &quickstart_with("[autoscaler]\npolicy = \"sla_planner\""),
        &[
            "autoscaler.optimization_target=latency",
            "autoscaler.pre_deployment_sweeping_mode=none",
        ],
    )
    .unwrap();
    let Autoscaler::SlaPlanner(p) = a else {
        panic!()
    };
    assert_eq!(p.optimization_target, OptimizationTarget::Latency);
    assert!(p.enable_load_scaling && !p.enable_throughput_scaling);
    assert_eq!(p.pre_deployment_sweeping_mode, SweepingMode::None);
}

#[test]
fn every_threshold_key_reaches_its_setting() {
    let text = quickstart_with(
        r#"[autoscaler]
policy = "threshold"
interval_s = 30
kv_cache_threshold = 0.9
queue_length_threshold = 8
kv_spare_trigger = 0.15
queue_spare_trigger = 2
scale_up_stabilization_s = 0
scale_down_stabilization_s = 300
min_replicas = 2
max_replicas = 6
"#,
    );
    assert_eq!(
        checked(&text, &[]).unwrap(),
        Autoscaler::Threshold(ThresholdParams {
            interval_ns: 30 * NS_PER_S,
            kv_cache_threshold: 0.9,
            queue_length_threshold: 8.0,
            kv_spare_trigger: 0.15,
            queue_spare_trigger: 2.0,
            scale_up_stabilization_ns: 0,
            scale_down_stabilization_ns: 300 * NS_PER_S,
            min_replicas: 2,
            max_replicas: 6,
        })
    );
    let d = checked(
        &quickstart_with("[autoscaler]\npolicy = \"threshold\""),
        &[],
    )
    .unwrap();
    assert_eq!(d, Autoscaler::Threshold(ThresholdParams::default()));
}

#[test]
fn a_policy_needs_one_pd_pair() {
    // Three pools: which prefill pool would scale?
    let text = quickstart_with("[autoscaler]\npolicy = \"threshold\"").replace(
        "[[pools]]\nname = \"decode\"",
        "[[pools]]\nname = \"prefill2\"\nrole = \"prefill\"\ninstances = 1\n[pools.server]\ntp_size = 2\npage_size = 64\n\n[[pools]]\nname = \"decode\"",
    );
    let e = checked(&text, &[]).unwrap_err();
    assert_eq!(e.key, "autoscaler.policy", "{e}");
    assert!(e.message.contains("2 prefill and 1 decode pools"), "{e}");
}

#[test]
fn the_verbs_run_a_resizing_policy_and_name_a_bad_key() {
    let out = tmpdir("resizing");
    for policy in ["sla_planner", "threshold"] {
        let set = format!("autoscaler.policy={policy}");
        let (code, _, err) = pdsim(&[
            "run",
            "scenarios/quickstart.toml",
            "--set",
            &set,
            "--set",
            "run.duration_s=30",
            "--summary-only",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let s: pdsim::metrics::summary::Summary =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let a = s.autoscaling.expect("`autoscaling` in summary.json");
        assert_eq!(a.policy, policy);
        assert!(a.gpu_hours > 0.0);
    }
    // A bad value is named, exit 2, nothing written.
    let bad = tmpdir("resizing-bad");
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--set",
        "autoscaler.policy=sla_planner",
        "--set",
        "autoscaler.load_predictor=prophet",
        "--out",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("autoscaler.load_predictor"), "{err}");
    assert!(!bad.join("summary.json").exists(), "nothing is written");
}

/// The quickstart's engines, roughly: prefill 20 ms + 60 µs a token, decode 8 ms + 40 µs a
/// request + 10 ns a KV token.
struct Steps;
impl StepTimes for Steps {
    fn prefill_wall_s(&self, tokens: u64) -> f64 {
        0.02 + 6e-5 * tokens as f64
    }
    fn decode_wall_s(&self, batch: u32, kv_tokens: u64) -> f64 {
        0.008 + 4e-5 * f64::from(batch) + 1e-8 * kv_tokens as f64
    }
}

fn caps() -> Capabilities {
    let engine = EngineCaps {
        gpus: 2,
        max_num_batched_tokens: 8192,
        max_kv_tokens: 600_000,
        max_num_seqs: None,
        context_length: 131_072,
    };
    Capabilities {
        prefill: engine,
        decode: engine,
    }
}

#[test]
fn a_checked_table_builds_a_running_policy() {
    // The SLA planner from the table: first look at 5 s; at 180 s the throughput path sizes the
    // pools from the traffic: 40 req/s of 2048-token prompts at 0.143 s each (7.0 req/s an
    // engine) → 6 prefills; decode batches of 275 (the KV's 600,000 / 2176) step in 25 ms
    // (43 req/s an engine) → 1 decode; 7 instances of 2 GPUs = 14 GPUs, over Dynamo's default
    // budget of 8: shrunk to 3 + 1.
    let a = checked(
        &quickstart_with("[autoscaler]\npolicy = \"sla_planner\"\nload_predictor = \"constant\""),
        &[],
    )
    .unwrap();
    let mut policy = autoscale::Autoscaler::new(&a, caps(), 0, Some(&Steps));
    assert_eq!(policy.next_tick().unwrap().at_ns, 5 * NS_PER_S);
    let verdict = loop {
        let tick = policy.next_tick().unwrap();
        let obs = Observation {
            now_ns: tick.at_ns,
            traffic: tick.traffic_window_ns.map(|w| autoscale::Traffic {
                window_ns: w,
                completed: 40 * 180,
                mean_isl_tokens: Some(2048.0),
                mean_osl_tokens: Some(256.0),
                kv_hit_rate: Some(0.0),
            }),
            counts: PoolCounts::steady(2, 2),
            ..Observation::default()
        };
        let v = policy.tick(&obs);
        if tick.traffic_window_ns.is_some() {
            assert_eq!(tick.at_ns, 180 * NS_PER_S);
            break v;
        }
    };
    assert_eq!(
        verdict.target,
        Some(Target {
            prefill: 3,
            decode: 1
        }),
        "{}",
        verdict.reason
    );
    assert!(verdict.reason.contains("GPU budget"), "{}", verdict.reason);
    // The threshold policy from the table: a look a minute, on the peaks of the window.
    let t = checked(
        &quickstart_with("[autoscaler]\npolicy = \"threshold\""),
        &[],
    )
    .unwrap();
    let mut policy = autoscale::Autoscaler::new(&t, caps(), 0, None);
    let tick = policy.next_tick().unwrap();
    assert_eq!((tick.at_ns, tick.needs_load), (60 * NS_PER_S, true));
    let hot = InstanceLoad {
        kv_usage_peak: 0.95,
        queued_requests_peak: 12,
        ..InstanceLoad::default()
    };
    let v = policy.tick(&Observation {
        now_ns: tick.at_ns,
        prefill: vec![hot; 2],
        decode: vec![InstanceLoad::default(); 2],
        counts: PoolCounts::steady(2, 2),
        ..Observation::default()
    });
    assert_eq!(
        v.target,
        Some(Target {
            prefill: 3,
            decode: 1
        }),
        "{}",
        v.reason
    );
    // Static never looks.
    let mut s = autoscale::Autoscaler::new(&Autoscaler::Static, caps(), 0, None);
    assert_eq!(s.next_tick(), None);
    assert_eq!(s.tick(&Observation::default()).target, None);
}

/// A day of diurnal traffic through the SLA planner with Dynamo's default ARIMA predictor:
/// 480 throughput windows and 17,280 load ticks. The same observations give the same verdicts,
/// word for word, and the prefill pool follows the demand (more at the peak than at the trough).
#[test]
fn a_diurnal_day_is_followed_deterministically() {
    let day = || -> Vec<(u64, Option<Target>, String)> {
        let a = checked(
            &quickstart_with("[autoscaler]\npolicy = \"sla_planner\"\nmax_gpu_budget = 64"),
            &[],
        )
        .unwrap();
        let mut policy = autoscale::Autoscaler::new(&a, caps(), 0, Some(&Steps));
        let mut out = Vec::new();
        loop {
            let tick = policy.next_tick().unwrap();
            if tick.at_ns > 86_400 * NS_PER_S {
                break;
            }
            let t_s = tick.at_ns as f64 / NS_PER_S as f64;
            let rps = 20.0 + 15.0 * (2.0 * std::f64::consts::PI * t_s / 86_400.0).sin();
            let obs = Observation {
                now_ns: tick.at_ns,
                traffic: tick.traffic_window_ns.map(|w| autoscale::Traffic {
                    window_ns: w,
                    completed: (rps * w as f64 / NS_PER_S as f64) as u64,
                    mean_isl_tokens: Some(2048.0),
                    mean_osl_tokens: Some(256.0),
                    kv_hit_rate: Some(0.25),
                }),
                counts: PoolCounts::steady(2, 2),
                ..Observation::default()
            };
            let v = policy.tick(&obs);
            if tick.traffic_window_ns.is_some() {
                out.push((tick.at_ns / NS_PER_S, v.target, v.reason));
            }
        }
        out
    };
    let a = day();
    assert_eq!(a.len(), 480);
    assert_eq!(a, day(), "the same day twice");
    // Prompts of 2048 tokens at 0.75 of their length (hit 0.25) take 0.112 s: 8.92 req/s an
    // engine. Every window's prefill count covers the demand the window before it saw within
    // one instance, and the day spans the peak (35 req/s: 4 prefills) and the trough (5 req/s:
    // 1).
    let mut seen = std::collections::BTreeSet::new();
    for (at, t, why) in &a {
        let p = t.unwrap_or_else(|| panic!("{at} s: {why}")).prefill;
        let t_s = (*at - 180) as f64;
        let seen_rps = 20.0 + 15.0 * (2.0 * std::f64::consts::PI * t_s / 86_400.0).sin();
        let need = (seen_rps * 0.112_16).ceil() as u32;
        assert!(
            p.abs_diff(need.max(1)) <= 1,
            "{at} s: {p} prefills for {need}: {why}"
        );
        seen.insert(p);
    }
    assert!(seen.contains(&4) && seen.contains(&1), "{seen:?}");
}
