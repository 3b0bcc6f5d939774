//! llm-d's threshold autoscaler: the workload-variant-autoscaler's saturation analyzer (V1,
//! "percentage-based") deciding a desired replica count per pool, and the Kubernetes HPA that
//! follows that count with stabilization windows. Read with the search tools from
//! `llm-d/llm-d-workload-variant-autoscaler`: `internal/capacity/analyzer.go` @b3ca6d2
//! (`AnalyzeModelCapacity`, `analyzeVariant`, `shouldScaleUp`, `isScaleDownSafe`,
//! `CalculateCapacityTargets`), `docs/saturation-analyzer.md` @14bed5d (the defaults: KV 0.80,
//! queue 5, spare triggers 0.1 and 3; "peak values over 1 minute"; the reconcile loop "typically
//! every 60s"), `docs/integrations/hpa-integration.md` @d44975b (the chart's HPA behaviour:
//! `stabilizationWindowSeconds: 240` up and down); and Kubernetes'
//! `pkg/controller/podautoscaler/horizontal.go` (`stabilizeRecommendationWithBehaviors`).
//!
//! Each pool on its own, every `interval`:
//! 1. A replica (a serving instance) is **saturated** when its peak KV use ≥ `kv_cache_threshold`
//!    or its peak waiting requests ≥ `queue_length_threshold`.
//! 2. Over the non-saturated ones, the mean spare KV (`threshold − use`) and spare queue
//!    (`threshold − waiting`); none non-saturated counts as 0 spare.
//! 3. **Scale up** when mean spare KV < `kv_spare_trigger` or mean spare queue <
//!    `queue_spare_trigger`: desired = ready + 1.
//! 4. Else **scale down** when at least 2 replicas are non-saturated and, their total load spread
//!    over one fewer, both spares stay ≥ their triggers, and more than 1 replica is ready:
//!    desired = ready − 1.
//! 5. While a previous desired count is not yet the pool's replica count (a scale in progress)
//!    the analyzer keeps it ("preserve desired").
//! 6. The HPA: every desired count is recorded with its time; the pool moves to the current
//!    count lifted to the smallest recommendation of the last `scale_up_stabilization` and capped
//!    by the largest of the last `scale_down_stabilization` (the new one included), then into
//!    `[min_replicas, max_replicas]`.
//!
//! Simplified: the HPA runs at the analyzer's cadence (its own 15-s sync re-reads the same
//! metric), its rate policies (10 pods per 150 s) and its 10 % tolerance are not applied
//! (at ±1 a step, the rate policy never binds), and the analyzer's cost-aware choice among a
//! model's variants is moot (one variant per pool).

use super::{InstanceLoad, Observation, Policy, Target, Tick, Verdict, fmt3};
use crate::config::autoscale::ThresholdParams;
use crate::engine::{NS_PER_S, Nanos};

/// `MinNonSaturatedReplicasForScaleDown`.
const MIN_NON_SATURATED_FOR_SCALE_DOWN: usize = 2;

/// One pool's analysis (`ModelCapacityAnalysis` of a single variant).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Analysis {
    /// Replicas reporting (ready).
    pub replicas: u32,
    /// Replicas not saturated.
    pub non_saturated: u32,
    /// Their mean spare KV share, 0 when none.
    pub avg_spare_kv: f64,
    /// Their mean spare queue, requests, 0 when none.
    pub avg_spare_queue: f64,
    /// `ShouldScaleUp`.
    pub scale_up: bool,
    /// `ScaleDownSafe`.
    pub scale_down_safe: bool,
}

/// `AnalyzeModelCapacity` on one pool's replicas.
pub fn analyze(loads: &[InstanceLoad], p: &ThresholdParams) -> Analysis {
    let saturated = |l: &InstanceLoad| {
        l.kv_usage_peak >= p.kv_cache_threshold
            || f64::from(l.queued_requests_peak) >= p.queue_length_threshold
    };
    let (mut spare_kv, mut spare_q, mut n) = (0.0, 0.0, 0usize);
    let (mut load_kv, mut load_q) = (0.0, 0u64);
    for l in loads.iter().filter(|l| !saturated(l)) {
        spare_kv += p.kv_cache_threshold - l.kv_usage_peak;
        spare_q += p.queue_length_threshold - f64::from(l.queued_requests_peak);
        load_kv += l.kv_usage_peak;
        load_q += u64::from(l.queued_requests_peak);
        n += 1;
    }
    let (avg_spare_kv, avg_spare_queue) = if n > 0 {
        (spare_kv / n as f64, spare_q / n as f64)
    } else {
        (0.0, 0.0)
    };
    let scale_up = !loads.is_empty()
        && (avg_spare_kv < p.kv_spare_trigger || avg_spare_queue < p.queue_spare_trigger);
    let scale_down_safe = n >= MIN_NON_SATURATED_FOR_SCALE_DOWN && {
        let remaining = (n - 1) as f64;
        let kv_after = p.kv_cache_threshold - load_kv / remaining;
        let q_after = p.queue_length_threshold - load_q as f64 / remaining;
        kv_after >= p.kv_spare_trigger && q_after >= p.queue_spare_trigger
    };
    Analysis {
        replicas: loads.len() as u32,
        non_saturated: n as u32,
        avg_spare_kv,
        avg_spare_queue,
        scale_up,
        scale_down_safe,
    }
}

/// One pool's analyzer and HPA state.
#[derive(Clone, Debug, Default)]
struct PoolState {
    /// The analyzer's last desired count (`VariantAutoscaling` status), 0 before any.
    desired: u32,
    /// The HPA's recorded recommendations: `(time, replicas)`.
    recommendations: Vec<(Nanos, u32)>,
}

/// llm-d's threshold autoscaler (module docs).
#[derive(Clone, Debug)]
pub struct Threshold {
    params: ThresholdParams,
    next_ns: Nanos,
    prefill: PoolState,
    decode: PoolState,
}

impl Threshold {
    /// The autoscaler with its first look at `start_ns + interval`.
    pub fn new(params: ThresholdParams, start_ns: Nanos) -> Self {
        Self {
            next_ns: start_ns.saturating_add(params.interval_ns),
            params,
            prefill: PoolState::default(),
            decode: PoolState::default(),
        }
    }

    /// One pool: its new replica count and why.
    fn pool(
        params: &ThresholdParams,
        state: &mut PoolState,
        name: &str,
        loads: &[InstanceLoad],
        ready: u32,
        replicas: u32,
        now: Nanos,
    ) -> (u32, String) {
        let a = analyze(loads, params);
        let mut why = format!(
            "{name}: {} of {} ready not saturated, mean spare KV {} (trigger {}), mean spare queue {} (trigger {})",
            a.non_saturated,
            a.replicas,
            fmt3(a.avg_spare_kv),
            fmt3(params.kv_spare_trigger),
            fmt3(a.avg_spare_queue),
            fmt3(params.queue_spare_trigger)
        );
        // CalculateCapacityTargets: from the ready count, unless a previous decision is still
        // being carried out.
        let desired = if state.desired != 0 && state.desired != replicas {
            why.push_str(&format!(
                " → keeps {} (a scale to it is in progress)",
                state.desired
            ));
            state.desired
        } else if a.scale_up {
            why.push_str(&format!(" → scale up: {}", ready + 1));
            ready + 1
        } else if a.scale_down_safe && ready > 1 {
            why.push_str(&format!(" → one fewer keeps both spares: {}", ready - 1));
            ready - 1
        } else {
            why.push_str(&format!(" → {ready}"));
            ready
        };
        state.desired = desired;
        // The HPA's stabilization: the current count lifted to the least recent-enough up
        // recommendation, capped by the greatest recent-enough down one.
        let up_cut = now.saturating_sub(params.scale_up_stabilization_ns);
        let down_cut = now.saturating_sub(params.scale_down_stabilization_ns);
        let (mut up_rec, mut down_rec) = (desired, desired);
        let mut old = None;
        for (i, &(at, r)) in state.recommendations.iter().enumerate() {
            if at > up_cut {
                up_rec = up_rec.min(r);
            }
            if at > down_cut {
                down_rec = down_rec.max(r);
            }
            if at < up_cut && at < down_cut {
                old = Some(i);
            }
        }
        match old {
            Some(i) => state.recommendations[i] = (now, desired),
            None => state.recommendations.push((now, desired)),
        }
        let mut next = replicas;
        if next < up_rec {
            next = up_rec;
        }
        if next > down_rec {
            next = down_rec;
        }
        let bounded = next.clamp(params.min_replicas, params.max_replicas);
        if next != desired {
            why.push_str(&format!(
                "; HPA stabilization (up window {} s, down {} s) holds {next}",
                params.scale_up_stabilization_ns / NS_PER_S,
                params.scale_down_stabilization_ns / NS_PER_S
            ));
        }
        if bounded != next {
            why.push_str(&format!(
                "; HPA bounds [{}, {}] → {bounded}",
                params.min_replicas, params.max_replicas
            ));
        }
        (bounded, why)
    }
}

impl Policy for Threshold {
    fn next_tick(&self) -> Option<Tick> {
        Some(Tick {
            at_ns: self.next_ns,
            traffic_window_ns: None,
            needs_load: true,
        })
    }

    fn tick(&mut self, obs: &Observation) -> Verdict {
        let now = obs.now_ns;
        let c = obs.counts;
        let (p, p_why) = Self::pool(
            &self.params,
            &mut self.prefill,
            "prefill",
            &obs.prefill,
            c.prefill_ready,
            c.prefill_replicas(),
            now,
        );
        let (d, d_why) = Self::pool(
            &self.params,
            &mut self.decode,
            "decode",
            &obs.decode,
            c.decode_ready,
            c.decode_replicas(),
            now,
        );
        self.next_ns = now.saturating_add(self.params.interval_ns);
        let reason = format!("threshold: {p_why}; {d_why}");
        if p == c.prefill_replicas() && d == c.decode_replicas() {
            return Verdict::hold(format!("{reason}: no change"));
        }
        Verdict {
            target: Some(Target {
                prefill: p,
                decode: d,
            }),
            reason: format!(
                "{reason}: P {} → {p}, D {} → {d}",
                c.prefill_replicas(),
                c.decode_replicas()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscale::PoolCounts;

    fn replica(kv: f64, queue: u32) -> InstanceLoad {
        InstanceLoad {
            kv_usage_peak: kv,
            queued_requests_peak: queue,
            ..InstanceLoad::default()
        }
    }

    #[test]
    fn the_analysis_is_the_analyzers() {
        let p = ThresholdParams::default();
        // Two replicas at KV 0.5, queue 1: spare KV 0.3, spare queue 4: no scale-up; one fewer
        // would carry KV 1.0 (> 0.8) → unsafe.
        let a = analyze(&[replica(0.5, 1), replica(0.5, 1)], &p);
        assert!(!a.scale_up && !a.scale_down_safe, "{a:?}");
        assert!((a.avg_spare_kv - 0.3).abs() < 1e-12 && (a.avg_spare_queue - 4.0).abs() < 1e-12);
        // Three at KV 0.2, queue 0: one fewer carries 0.3 each: spare 0.5 ≥ 0.1, queue 5 ≥ 3 → safe.
        let a = analyze(&[replica(0.2, 0); 3], &p);
        assert!(!a.scale_up && a.scale_down_safe, "{a:?}");
        // KV 0.75 on both: spare 0.05 < 0.1 → up.
        let a = analyze(&[replica(0.75, 0), replica(0.75, 0)], &p);
        assert!(a.scale_up);
        // Queue 3 on both: spare queue 2 < 3 → up.
        assert!(analyze(&[replica(0.1, 3), replica(0.1, 3)], &p).scale_up);
        // One saturated (KV 0.8 ≥ 0.8), one idle: the idle one alone has spare 0.8 and 5 → no
        // up; scale-down needs two non-saturated → unsafe.
        let a = analyze(&[replica(0.8, 0), replica(0.0, 0)], &p);
        assert!(
            !a.scale_up && !a.scale_down_safe && a.non_saturated == 1,
            "{a:?}"
        );
        // All saturated: no spare at all → up.
        assert!(analyze(&[replica(0.9, 9), replica(0.85, 0)], &p).scale_up);
    }

    fn tick(
        t: &mut Threshold,
        at_s: u64,
        pre: Vec<InstanceLoad>,
        dec: Vec<InstanceLoad>,
        counts: PoolCounts,
    ) -> Verdict {
        t.tick(&Observation {
            now_ns: at_s * NS_PER_S,
            prefill: pre,
            decode: dec,
            counts,
            ..Observation::default()
        })
    }

    /// Neither scale-up nor a safe scale-down: KV 0.5, one waiting, on both replicas.
    fn steady() -> Vec<InstanceLoad> {
        vec![replica(0.5, 1), replica(0.5, 1)]
    }

    fn busy(n: usize) -> Vec<InstanceLoad> {
        vec![replica(0.9, 8); n]
    }

    #[test]
    fn scale_down_waits_out_the_stabilization_window() {
        let mut t = Threshold::new(ThresholdParams::default(), 0);
        assert_eq!(t.next_tick().unwrap().at_ns, 60 * NS_PER_S);
        // At 60 s the prefill pool wants 3, the first recommendation: up at once.
        let v = tick(&mut t, 60, busy(2), steady(), PoolCounts::steady(2, 2));
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 3,
                decode: 2
            }),
            "{}",
            v.reason
        );
        // The pool moved to 3. Load gone: the analyzer wants 2, but the down window (240 s)
        // still holds the 3 recommended at 60 s: held while it is younger than 240 s (the
        // cutoff is exclusive, so at 300 s it has left).
        let counts = PoolCounts::steady(3, 2);
        let calm3 = || vec![replica(0.1, 0); 3];
        for at in [120, 180, 240] {
            let v = tick(&mut t, at, calm3(), steady(), counts);
            assert_eq!(v.target, None, "at {at} s: {}", v.reason);
            assert!(v.reason.contains("HPA stabilization"), "{}", v.reason);
        }
        let v = tick(&mut t, 300, calm3(), steady(), counts);
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 2,
                decode: 2
            }),
            "{}",
            v.reason
        );
    }

    #[test]
    fn a_brief_spike_is_filtered_by_the_up_window() {
        // Up window 240 s: a pool recommended 2 at 60 s and 3 from 120 s on moves to 3 only
        // once the 2 has left the window.
        let mut t = Threshold::new(ThresholdParams::default(), 0);
        let counts = PoolCounts::steady(2, 2);
        assert_eq!(tick(&mut t, 60, steady(), steady(), counts).target, None);
        let v = tick(&mut t, 120, busy(2), steady(), counts);
        assert_eq!(v.target, None, "{}", v.reason);
        assert!(v.reason.contains("HPA stabilization"), "{}", v.reason);
        for at in [180, 240] {
            assert_eq!(
                tick(&mut t, at, busy(2), steady(), counts).target,
                None,
                "at {at}"
            );
        }
        let v = tick(&mut t, 300, busy(2), steady(), counts);
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 3,
                decode: 2
            }),
            "{}",
            v.reason
        );
        // Calm pools with no stabilization fall by one per look, never below min_replicas.
        let mut t = Threshold::new(
            ThresholdParams {
                scale_up_stabilization_ns: 0,
                scale_down_stabilization_ns: 0,
                ..ThresholdParams::default()
            },
            0,
        );
        let calm = || vec![replica(0.3, 0), replica(0.3, 0)];
        let v = tick(&mut t, 60, calm(), calm(), counts);
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 1,
                decode: 1
            }),
            "{}",
            v.reason
        );
        let v = tick(
            &mut t,
            120,
            vec![replica(0.0, 0)],
            vec![replica(0.0, 0)],
            PoolCounts::steady(1, 1),
        );
        assert_eq!(v.target, None, "{}", v.reason);
    }

    #[test]
    fn a_scale_in_progress_is_kept_and_bounds_hold() {
        let p = ThresholdParams {
            scale_up_stabilization_ns: 0,
            scale_down_stabilization_ns: 0,
            max_replicas: 3,
            ..ThresholdParams::default()
        };
        let mut t = Threshold::new(p, 0);
        let v = tick(&mut t, 60, busy(2), steady(), PoolCounts::steady(2, 2));
        assert_eq!(v.target.unwrap().prefill, 3);
        // The new instance is starting (2 ready + 1 starting = 3 replicas): no second step.
        let starting = PoolCounts {
            prefill_starting: 1,
            ..PoolCounts::steady(2, 2)
        };
        let v = tick(&mut t, 120, busy(2), steady(), starting);
        assert_eq!(v.target, None, "{}", v.reason);
        // A decision the pool has not reached yet is kept by the analyzer: desired 3 while the
        // pool still counts 2 replicas (the start was refused, say), even though it is calm.
        let v = tick(
            &mut t,
            180,
            vec![replica(0.1, 0); 2],
            steady(),
            PoolCounts::steady(2, 2),
        );
        assert!(v.reason.contains("keeps 3"), "{}", v.reason);
        assert_eq!(v.target.unwrap().prefill, 3);
        // Ready at 3 and still busy: 4 wanted, max_replicas 3 holds it.
        let v = tick(&mut t, 240, busy(3), steady(), PoolCounts::steady(3, 2));
        assert_eq!(v.target, None, "{}", v.reason);
        assert!(v.reason.contains("HPA bounds [1, 3]"), "{}", v.reason);
    }
}
