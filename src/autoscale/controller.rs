//! The control loop around a policy (issue 38, item 2): what the controller is shown, when it
//! looks, and what its verdicts do to the pools. It holds the policy, the fleet
//! ([`super::fleet`]) and the frontend's window of requests; the simulator (`sim::scaling`)
//! feeds it rows, per-second scrapes and each serving instance's state, and carries out the
//! [`Action`]s it answers. Never the future: a look reads what happened before it.
//!
//! **What a look shows** ([`Controller::decide`]): the frontend's requests over the window the
//! policy asks (their count, mean input and output lengths and prefix hit share), each serving
//! instance's scheduler state at the look (the caller's [`InstanceLoad`]s), with the peaks of
//! the per-second scrapes since the last look ([`Controller::scrape`]), and the fleet's
//! inventory.
//!
//! **Which requests count** (`throughput_metrics_source`): Dynamo's `num_req` is
//! `increase(dynamo_frontend_requests_total[window])`, a counter the frontend bumps as a request
//! ends, summed over "all success/failed and stream/non-stream requests"
//! (`planner/utils/prometheus.py`, `get_avg_request_count`): a request that failed is demand,
//! or a saturated cluster would read as a quiet one. Under `"router"` the router's
//! `requests_started_total` counts a request when it is admitted.

use std::collections::VecDeque;

use super::fleet::{Action, Fleet};
use super::{
    Autoscaler, Capabilities, EngineCaps, InstanceLoad, Observation, Policy, Target, Tick, Traffic,
};
use crate::config::autoscale::{self as cfg, DECODE, Lifecycle, PREFILL};
use crate::config::{Role, Scenario, Workload};
use crate::engine::{NS_PER_S, Nanos};

/// The context length a planner assumes when the workload does not bound it, tokens: 131,072
/// (sglang's `--context-length` defaults to the model's `max_position_embeddings`, 131,072
/// for Llama-3.1 and DeepSeek-V3).
const CONTEXT_LENGTH: u64 = 131_072;

/// The engines' `--context-length` as the planner reads it (Dynamo's `WorkerCapabilities`,
/// which its pre-deployment sweep spans), tokens: `autoscaler.context_length`, else the longest
/// request the workload can make (its prompt and output bounds, a session's context cap), as
/// an operator sizes `--context-length` for a deployment, else [`CONTEXT_LENGTH`] (a trace).
/// pdsim's model specs carry no `max_position_embeddings`.
fn context_length(lc: &Lifecycle, w: &Workload) -> u64 {
    lc.context_length.unwrap_or(match w {
        Workload::Synthetic { input, output, .. } => {
            u64::from(input.max()) + u64::from(output.max())
        }
        Workload::Sessions {
            output, sessions, ..
        } => u64::from(sessions.max_context_tokens) + u64::from(output.max()),
        Workload::Trace { .. } => CONTEXT_LENGTH,
    })
}

/// A step model as the SLA planner's bootstrap sweeps it (`autoscale::bootstrap`): one prefill
/// forward of a single prompt, one decode step.
pub struct Steps<'a> {
    /// A prefill instance's step model.
    pub prefill: &'a crate::compute::StepTimes,
    /// A decode instance's step model.
    pub decode: &'a crate::compute::StepTimes,
}

impl super::StepTimes for Steps<'_> {
    fn prefill_wall_s(&self, tokens: u64) -> f64 {
        let t = u32::try_from(tokens).unwrap_or(u32::MAX);
        self.prefill.prefill_ns(&[(t, 0)]) as f64 / 1e9
    }

    fn decode_wall_s(&self, batch: u32, kv_tokens: u64) -> f64 {
        self.decode.decode_ns(batch.max(1), kv_tokens) as f64 / 1e9
    }
}

/// One decision of the policy that moved the pools, for `explain`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// When, ns.
    pub at_ns: Nanos,
    /// The target.
    pub target: Target,
    /// The policy's reason.
    pub reason: String,
}

/// The policy, the fleet and what the policy is shown.
pub struct Controller {
    /// The pools' slots and their phases.
    pub fleet: Fleet,
    policy: Autoscaler,
    /// Requests not older than the longest window a policy asks for: `(when ns, input tokens,
    /// output tokens, prefix hit share)`.
    done: VecDeque<(Nanos, u32, u32, Option<f64>)>,
    /// How long `done` keeps a request, ns (0: the policy reads no traffic).
    keep_ns: Nanos,
    /// Whether requests count when the router admits them rather than when they end.
    count_admitted: bool,
    /// Per global instance: the peak waiting requests and KV share scraped since the last look.
    peaks: Vec<(u32, f64)>,
    /// When the policy last looked, ns.
    last_look_ns: Nanos,
    /// The decisions that moved the pools.
    pub decisions: Vec<Decision>,
}

impl Controller {
    /// The controller of `sc`'s policy over the pools of `lc`, each instance's KV capacity
    /// `kv_tokens` (by global instance, prefill slots first), seeded with `steps` (the SLA
    /// planner's bootstrap).
    pub fn new(sc: &Scenario, lc: &Lifecycle, kv_tokens: &[u64], steps: &Steps<'_>) -> Self {
        let caps = |r: usize, kv: u64| {
            let role = if r == PREFILL {
                Role::Prefill
            } else {
                Role::Decode
            };
            let p = (sc.pools.iter().find(|p| p.role == role)).expect("a PD pair, checked");
            EngineCaps {
                gpus: lc.gpus[r],
                max_num_batched_tokens: u64::from(p.server.chunked_prefill_size),
                max_kv_tokens: kv,
                max_num_seqs: p.server.max_running_requests,
                context_length: context_length(lc, &sc.workload).min(kv.max(1)),
            }
        };
        let caps = Capabilities {
            prefill: caps(PREFILL, kv_tokens[0]),
            decode: caps(DECODE, kv_tokens[lc.slots[PREFILL] as usize]),
        };
        let (keep_ns, count_admitted) = match &sc.autoscaler {
            cfg::Autoscaler::SlaPlanner(p) => (
                (p.throughput_adjustment_interval_ns).max(p.load_adjustment_interval_ns),
                p.throughput_metrics_source == cfg::MetricsSource::Router,
            ),
            _ => (0, false),
        };
        Self {
            fleet: Fleet::new(lc.clone()),
            policy: Autoscaler::new(&sc.autoscaler, caps, 0, Some(steps)),
            done: VecDeque::new(),
            keep_ns,
            count_admitted,
            peaks: vec![(0, 0.0); kv_tokens.len()],
            last_look_ns: 0,
            decisions: Vec::new(),
        }
    }

    /// A request ended at `now` (any outcome but unfinished): it counts in the frontend's
    /// traffic (`"frontend"`).
    pub fn ended(&mut self, now: Nanos, input: u32, output: u32, cached: Option<u32>) {
        if !self.count_admitted {
            self.count(now, input, output, cached);
        }
    }

    /// The router admitted a request at `now`: it counts then (`"router"`).
    pub fn admitted(&mut self, now: Nanos, input: u32, output: u32) {
        if self.count_admitted {
            self.count(now, input, output, None);
        }
    }

    fn count(&mut self, now: Nanos, input: u32, output: u32, cached: Option<u32>) {
        if self.keep_ns == 0 {
            return;
        }
        let hit = cached
            .filter(|_| input > 0)
            .map(|c| f64::from(c) / f64::from(input));
        self.done.push_back((now, input, output, hit));
    }

    /// The frontend's traffic over the `window_ns` ending at `now`.
    fn traffic(&mut self, now: Nanos, window_ns: Nanos) -> Traffic {
        let keep_from = now.saturating_sub(self.keep_ns);
        while self.done.front().is_some_and(|d| d.0 <= keep_from) {
            self.done.pop_front();
        }
        let from = now.saturating_sub(window_ns);
        let (mut n, mut isl, mut osl, mut hits, mut hit_n) = (0u64, 0f64, 0f64, 0f64, 0u64);
        for &(at, i, o, h) in self.done.iter().rev() {
            if at <= from {
                break;
            }
            n += 1;
            isl += f64::from(i);
            osl += f64::from(o);
            if let Some(h) = h {
                hits += h;
                hit_n += 1;
            }
        }
        Traffic {
            window_ns,
            completed: n,
            mean_isl_tokens: (n > 0).then(|| isl / n as f64),
            mean_osl_tokens: (n > 0).then(|| osl / n as f64),
            kv_hit_rate: (hit_n > 0).then(|| hits / hit_n as f64),
        }
    }

    /// The per-second scrape of serving instance `i`: `queued` requests waiting, `kv_share` of
    /// its KV pool in use.
    pub fn scrape(&mut self, i: usize, queued: u32, kv_share: f64) {
        let p = &mut self.peaks[i];
        p.0 = p.0.max(queued);
        p.1 = p.1.max(kv_share);
    }

    /// When the policy last looked, ns: the start of the window a forward must fall in to be
    /// its instance's last.
    pub fn last_look_ns(&self) -> Nanos {
        self.last_look_ns
    }

    /// The policy's look due at or before `now`, if any.
    pub fn due(&self, now: Nanos) -> Option<Tick> {
        self.policy.next_tick().filter(|t| t.at_ns <= now)
    }

    /// The policy looks at `now` (its `tick`) on the serving instances' `prefill` and `decode`
    /// loads (peaks filled in here); its verdict moves the fleet. The actions to carry out.
    pub fn decide(
        &mut self,
        now: Nanos,
        tick: Tick,
        mut prefill: Vec<InstanceLoad>,
        mut decode: Vec<InstanceLoad>,
    ) -> Vec<Action> {
        for l in prefill.iter_mut().chain(decode.iter_mut()) {
            let (q, kv) = self.peaks[l.instance.idx()];
            l.queued_requests_peak = q.max(l.queued_requests);
            l.kv_usage_peak = kv;
        }
        let obs = Observation {
            now_ns: now,
            traffic: tick.traffic_window_ns.map(|w| self.traffic(now, w)),
            prefill,
            decode,
            counts: self.fleet.counts(),
        };
        self.last_look_ns = now;
        self.peaks.iter_mut().for_each(|p| *p = (0, 0.0));
        let verdict = self.policy.tick(&obs);
        let Some(target) = verdict.target else {
            return Vec::new();
        };
        let moved = self.fleet.apply(target, now, &verdict.reason);
        let c = self.fleet.counts();
        if !moved.is_empty()
            || (c.prefill_replicas(), c.decode_replicas()) != (target.prefill, target.decode)
        {
            self.decisions.push(Decision {
                at_ns: now,
                target,
                reason: verdict.reason,
            });
        }
        moved
    }

    /// When the controller looks next after a look at `now`: the next whole second (the
    /// scrape, and drains that emptied), or the policy's tick if sooner.
    pub fn next_look(&self, now: Nanos) -> Nanos {
        let next_second = (now / NS_PER_S + 1) * NS_PER_S;
        match self.policy.next_tick() {
            Some(t) if t.at_ns > now => t.at_ns.min(next_second),
            _ => next_second,
        }
    }

    /// `summary.json` `autoscaling` of a run that ended at `end_ns`, GPUs priced at
    /// `usd_per_gpu_hour`.
    pub fn summary(
        &self,
        policy: &str,
        usd_per_gpu_hour: Option<f64>,
        end_ns: Nanos,
    ) -> crate::metrics::summary::AutoscalingSummary {
        let gpu_hours = self.fleet.gpu_hours(end_ns);
        let events = self.fleet.events();
        let count = |k: &str| events.iter().filter(|e| e.kind == k).count() as u64;
        crate::metrics::summary::AutoscalingSummary {
            policy: policy.to_string(),
            gpu_hours,
            cost_usd: usd_per_gpu_hour.map(|u| u * gpu_hours),
            cold_starts: count("cold_start"),
            role_switches: count("role_switch"),
            drains: count("drain"),
            starts_cancelled: count("start_cancelled"),
            starts_failed: count("start_failed"),
            decisions: self.decisions.len() as u64,
            events: events.to_vec(),
        }
    }
}
