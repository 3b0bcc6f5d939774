//! NVIDIA Dynamo's SLA planner in disaggregated mode, as its code defines it. Read with the
//! search tools from `ai-dynamo/dynamo`, `components/src/dynamo/planner/`:
//! `core/state_machine.py` (the version that holds `_kv_hit_rate_predictor`: `on_tick`,
//! `_next_scheduled_tick`, `_observe_traffic`, `_observe_fpm`, `_apply_global_budget`),
//! `core/throughput_scaling.py` @0c9050c (`_advance_throughput`, `_throughput_disagg`,
//! `_compute_prefill_replicas`, `_compute_decode_replicas`), `core/load_scaling.py` @0c6da1e
//! (`_advance_load_disagg`, `_prefill_load_decision`, `_decode_load_decision`,
//! `_prefill_easy_decision`, `_decode_easy_decision`, `_scale_decision`), `config/defaults.py`
//! @1ca6015 and `config/planner_config.py` @1366ebb; the regressions are
//! [`super::regression`], the predictors [`super::predictor`], the budget [`super::budget`].
//!
//! **Ticks** (`_next_scheduled_tick`): a load tick every `load_adjustment_interval` from the
//! start (it also feeds the regressions when load scaling is off), a throughput tick every
//! `throughput_adjustment_interval` when throughput scaling is on; ticks due within 0.5 s of
//! each other merge. Each next tick is counted from the tick that ran. A throughput tick
//! observes the traffic of its interval; in load-only mode a load tick observes the traffic of
//! its own interval for the KV hit rate alone.
//!
//! **A tick** (`on_tick`): the throughput path first (so a lower bound it sets binds the load
//! path of the same tick), then the load path; the load path's decision wins when it makes one.
//!
//! **Throughput path** (`_advance_throughput`, `_throughput_disagg`):
//! - `demand = predicted num_req / window`, with ISL, OSL and the KV hit rate `h` predicted too
//!   (a hit rate never observed predicts 0);
//! - prefill: `ISL_eff = ISL · (1 − clamp(h, 0, 0.95))`, `wt` = the prefill regression at
//!   `ISL_eff` chunked by `max_num_batched_tokens`, `rps = 1/wt`, `TTFT = wt`;
//!   `P = max(⌈demand/rps⌉, floor, min_endpoint)` with `floor = ⌈TTFT/ttft⌉` when `TTFT > ttft`
//!   (one engine cannot meet it), else 1;
//! - decode: `ctx = ISL + OSL/2`; the largest batch `b ≤ min(max_kv/ctx, max_num_seqs)` whose
//!   step meets `itl`, `rps = b / (OSL · wt(b, b·ctx))` (Little's law),
//!   `D = max(⌈demand/rps⌉, min_endpoint)`;
//! - a regression not ready (too few samples, or a rejected fit) leaves the pools alone;
//! - with load scaling on, `(P, D)` only become the load path's lower bounds; else the GPU
//!   budget clamps them and they are the decision.
//!
//! **Load path** (`_advance_load_disagg`), each pool on its instances' latest state:
//! - `sla` target: the regressions estimate each instance's next TTFT (its queued prompt tokens
//!   plus a mean prompt, hit-discounted, chunked) and next ITL (its batch plus one mean
//!   request); every instance above the target → one more instance; one fewer only when every
//!   instance, with its queue scaled by `N/(N−1)`, keeps its queue-induced TTFT below
//!   `(ttft − own TTFT) · sensitivity` (prefill), or its KV (scaled likewise) below
//!   `max_kv_tokens` and its ITL below `itl · sensitivity` (decode); fewer than
//!   `load_min_observations` samples → no decision;
//! - `throughput` / `latency` targets (Dynamo's "easy" mode): prefill scales up when any
//!   instance's `queued tokens / context_length ≥ 1.0` (latency: `≥ 0.1`), down when all are
//!   `< 0.1` (latency: `= 0`); decode up when any `(scheduled + queued KV) / max_kv > 1.0`
//!   (latency: `> 0.4`), down when all `< 0.6` (latency: `< 0.1`); never below `min_endpoint`;
//! - then the throughput lower bounds (when throughput scaling is on), `min_endpoint`, the GPU
//!   budget; no decision when that is the current size.
//!
//! Dynamo's disaggregated load path does not wait for a scale in progress (only its
//! single-pool and aggregated paths call `_scaling_in_progress`); a target is absolute, so a
//! tick that repeats it while an instance starts changes nothing. Not modelled: the
//! aggregated and single-pool modes, MTP's accept length, the power budget, Prophet.

use super::budget::Budget;
use super::predictor::Predictor;
use super::regression::{DecodeModel, PrefillModel, clamp_kv_hit_rate};
use super::{
    Capabilities, InstanceLoad, Observation, Policy, PoolCounts, StepTimes, Target, Tick, Traffic,
    Verdict, bootstrap, fmt3,
};
use crate::config::autoscale::{OptimizationTarget, SlaPlannerParams, SweepingMode};
use crate::engine::{NS_PER_S, Nanos};

/// `PlannerStateMachine._MERGE_TOLERANCE_S`.
const MERGE_TOLERANCE_NS: Nanos = NS_PER_S / 2;

/// Dynamo's SLA planner (module docs).
#[derive(Clone, Debug)]
pub struct SlaPlanner {
    params: SlaPlannerParams,
    caps: Capabilities,
    prefill: PrefillModel,
    decode: DecodeModel,
    num_req: Predictor,
    isl: Predictor,
    osl: Predictor,
    kv_hit: Predictor,
    /// `_throughput_lower_bound_{p,d}` (1 until the throughput path sets them).
    lower: Target,
    /// `_last_kv_hit_rate`: what the load path discounts prefill work by.
    last_kv_hit_rate: Option<f64>,
    next_load_ns: Nanos,
    /// `None`: throughput scaling is off (Dynamo's `inf`).
    next_throughput_ns: Option<Nanos>,
}

/// How the throughput path sized the prefill pool.
struct PrefillSizing {
    isl_eff: f64,
    engine_rps: f64,
    ttft_ms: f64,
    sla_floor: u32,
    count: u32,
}

/// How the throughput path sized the decode pool.
struct DecodeSizing {
    context: f64,
    engine_rps: f64,
    itl_ms: f64,
    count: u32,
}

/// `math.ceil` of a non-negative float as a count (saturating).
fn ceil_count(x: f64) -> u32 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        let c = x.ceil();
        if c >= f64::from(u32::MAX) {
            u32::MAX
        } else {
            c as u32
        }
    }
}

impl SlaPlanner {
    /// The planner with its first ticks counted from `start_ns` (`initial_tick`); under
    /// `pre_deployment_sweeping_mode = "rapid"` its regressions are seeded from `steps`
    /// ([`bootstrap`]), which a caller without a step model may leave out.
    pub fn new(
        params: SlaPlannerParams,
        caps: Capabilities,
        start_ns: Nanos,
        steps: Option<&dyn StepTimes>,
    ) -> Self {
        let (n, m, b) = (
            params.max_num_fpm_samples,
            params.load_min_observations,
            params.fpm_sample_bucket_size,
        );
        let mut prefill = PrefillModel::new(n, m, b);
        let mut decode = DecodeModel::new(n, m, b);
        let easy = params.optimization_target != OptimizationTarget::Sla;
        if let (false, SweepingMode::Rapid, Some(steps)) =
            (easy, params.pre_deployment_sweeping_mode, steps)
        {
            for f in bootstrap::prefill_samples(steps, &caps.prefill) {
                prefill.observe(&f);
            }
            for f in bootstrap::decode_samples(steps, &caps.decode) {
                decode.observe(&f);
            }
        }
        let next_throughput_ns = params
            .enable_throughput_scaling
            .then(|| start_ns.saturating_add(params.throughput_adjustment_interval_ns));
        Self {
            num_req: Predictor::new(&params),
            isl: Predictor::new(&params),
            osl: Predictor::new(&params),
            kv_hit: Predictor::new(&params),
            next_load_ns: start_ns.saturating_add(params.load_adjustment_interval_ns),
            next_throughput_ns,
            lower: Target {
                prefill: 1,
                decode: 1,
            },
            last_kv_hit_rate: None,
            prefill,
            decode,
            caps,
            params,
        }
    }

    /// The prefill regression (for tests and `explain`).
    pub fn prefill_model(&mut self) -> &mut PrefillModel {
        &mut self.prefill
    }

    /// The decode regression.
    pub fn decode_model(&mut self) -> &mut DecodeModel {
        &mut self.decode
    }

    /// The throughput path's lower bounds for the load path.
    pub fn lower_bounds(&self) -> Target {
        self.lower
    }

    fn easy(&self) -> bool {
        self.params.optimization_target != OptimizationTarget::Sla
    }

    fn budget(&self) -> Budget {
        Budget {
            min_gpus: self.params.min_gpu_budget,
            max_gpus: self.params.max_gpu_budget,
            prefill_gpus: self.caps.prefill.gpus,
            decode_gpus: self.caps.decode.gpus,
            min_endpoint: self.params.min_endpoint,
        }
    }

    /// Which paths the next tick runs: `(at, load, throughput)`.
    fn schedule(&self) -> (Nanos, bool, bool) {
        let at = match self.next_throughput_ns {
            Some(t) => t.min(self.next_load_ns),
            None => self.next_load_ns,
        };
        let load = self.next_load_ns <= at.saturating_add(MERGE_TOLERANCE_NS);
        let throughput = self
            .next_throughput_ns
            .is_some_and(|t| t <= at.saturating_add(MERGE_TOLERANCE_NS));
        (at, load, throughput)
    }

    /// `_observe_traffic`.
    fn observe_traffic(&mut self, t: &Traffic) {
        if self.params.enable_throughput_scaling {
            self.num_req.add(t.completed as f64);
            self.isl.add(t.mean_isl_tokens.unwrap_or(f64::NAN));
            self.osl.add(t.mean_osl_tokens.unwrap_or(f64::NAN));
        }
        if let Some(h) = t.kv_hit_rate.filter(|h| !h.is_nan()) {
            if self.params.enable_throughput_scaling {
                self.kv_hit.add(h);
            } else {
                self.last_kv_hit_rate = Some(h);
            }
        }
    }

    /// `_observe_fpm`: each serving instance's last forward into its pool's regression.
    fn observe_forwards(&mut self, obs: &Observation) {
        for l in &obs.prefill {
            if let Some(f) = &l.last_forward {
                self.prefill.observe(f);
            }
        }
        for l in &obs.decode {
            if let Some(f) = &l.last_forward {
                self.decode.observe(f);
            }
        }
    }

    /// `_compute_prefill_replicas`.
    fn size_prefill(&mut self, demand: f64, isl: f64, h: Option<f64>) -> Option<PrefillSizing> {
        let isl_eff = isl * (1.0 - clamp_kv_hit_rate(h));
        let mbt = self.caps.prefill.max_num_batched_tokens;
        let (engine_rps, ttft_ms) = self
            .prefill
            .best_engine_rps(isl_eff, (mbt > 0).then_some(mbt));
        if engine_rps <= 0.0 {
            return None;
        }
        let sla_floor = if ttft_ms > self.params.ttft_ms {
            ceil_count(ttft_ms / self.params.ttft_ms)
        } else {
            1
        };
        let count = ceil_count(demand / engine_rps)
            .max(sla_floor)
            .max(self.params.min_endpoint);
        Some(PrefillSizing {
            isl_eff,
            engine_rps,
            ttft_ms,
            sla_floor,
            count,
        })
    }

    /// `_compute_decode_replicas`.
    fn size_decode(&mut self, demand: f64, isl: f64, osl: f64) -> Option<DecodeSizing> {
        let d = self.caps.decode;
        let context = isl + osl / 2.0;
        let (engine_rps, itl_ms) = self.decode.best_engine_rps(
            self.params.itl_ms,
            context,
            osl,
            (d.max_kv_tokens > 0).then_some(d.max_kv_tokens),
            d.max_num_seqs,
        );
        if engine_rps <= 0.0 {
            return None;
        }
        let count = ceil_count(demand / engine_rps).max(self.params.min_endpoint);
        Some(DecodeSizing {
            context,
            engine_rps,
            itl_ms,
            count,
        })
    }

    /// `_advance_throughput` in disaggregated mode.
    fn advance_throughput(&mut self, t: &Traffic, counts: &PoolCounts) -> (Option<Target>, String) {
        let nr = self.num_req.predict();
        let isl = self.isl.predict();
        let osl = self.osl.predict();
        let window_s = t.window_ns as f64 / NS_PER_S as f64;
        if window_s <= 0.0 {
            return (None, "throughput: no traffic data (an empty window)".into());
        }
        let demand = nr / window_s;
        let h = self.kv_hit.predict();
        if !h.is_nan() {
            self.last_kv_hit_rate = Some(h);
        }
        let mut why = format!(
            "throughput: predicted {} requests in {} s → {} req/s, ISL {} tokens, OSL {} tokens, KV hit rate {}",
            fmt3(nr),
            fmt3(window_s),
            fmt3(demand),
            fmt3(isl),
            fmt3(osl),
            fmt3(h),
        );
        let p = self.size_prefill(demand, isl, Some(h));
        let d = self.size_decode(demand, isl, osl);
        let (Some(p), Some(d)) = (p, d) else {
            let which = match (self.prefill.fit().is_none(), self.decode.fit().is_none()) {
                (true, true) => "the prefill and decode regressions are",
                (true, false) => "the prefill regression is",
                _ => "the decode regression is",
            };
            why.push_str(&format!(
                "; {which} not ready ({} prefill and {} decode samples, {} needed, or a fit with a negative token coefficient): no change",
                self.prefill.observations(),
                self.decode.observations(),
                self.params.load_min_observations
            ));
            return (None, why);
        };
        why.push_str(&format!(
            "; prefill: effective ISL {} tokens → one engine {} req/s at TTFT {} ms (target {} ms{}) → P = max(⌈{}⌉, {}, min_endpoint {}) = {}",
            fmt3(p.isl_eff),
            fmt3(p.engine_rps),
            fmt3(p.ttft_ms),
            fmt3(self.params.ttft_ms),
            if p.sla_floor > 1 {
                format!(", over it: floor ⌈TTFT/target⌉ = {}", p.sla_floor)
            } else {
                String::new()
            },
            fmt3(demand / p.engine_rps),
            p.sla_floor,
            self.params.min_endpoint,
            p.count
        ));
        why.push_str(&format!(
            "; decode: context {} tokens → the largest batch within ITL {} ms steps {} ms → one engine {} req/s (Little's law) → D = max(⌈{}⌉, min_endpoint {}) = {}",
            fmt3(d.context),
            fmt3(self.params.itl_ms),
            fmt3(d.itl_ms),
            fmt3(d.engine_rps),
            fmt3(demand / d.engine_rps),
            self.params.min_endpoint,
            d.count
        ));
        if self.params.enable_load_scaling {
            self.lower = Target {
                prefill: p.count,
                decode: d.count,
            };
            why.push_str("; load scaling is on: these are its lower bounds");
            return (None, why);
        }
        let (bp, bd) = self.budget().clamp(p.count, d.count);
        if (bp, bd) != (p.count, d.count) {
            why.push_str(&format!(
                "; GPU budget ({}) → P = {bp}, D = {bd}",
                self.budget_words()
            ));
        }
        let target = Target {
            prefill: bp,
            decode: bd,
        };
        if target.prefill == counts.prefill_replicas() && target.decode == counts.decode_replicas()
        {
            why.push_str("; the pools already have these sizes");
        }
        (Some(target), why)
    }

    fn budget_words(&self) -> String {
        let b = self.budget();
        let bound = |v: Option<u32>| v.map_or("off".to_string(), |v| v.to_string());
        format!(
            "max {} GPUs, min {}, {} GPUs a prefill, {} a decode",
            bound(b.max_gpus),
            bound(b.min_gpus),
            b.prefill_gpus,
            b.decode_gpus
        )
    }

    /// `_scale_decision`: every estimate over the target → one more; a safe consolidation →
    /// one fewer (never below `min_endpoint`).
    fn scale_decision(
        &self,
        estimates: &[f64],
        sla: f64,
        n: u32,
        can_scale_down: bool,
    ) -> Option<u32> {
        if estimates.is_empty() {
            return None;
        }
        if estimates.iter().all(|t| *t > sla) {
            return Some(n + 1);
        }
        if n > 1 && can_scale_down {
            return Some((n - 1).max(self.params.min_endpoint));
        }
        None
    }

    /// `_prefill_load_decision` (`sla` target).
    fn prefill_load(&mut self, loads: &[InstanceLoad], n: u32) -> (Option<u32>, String) {
        if !self.prefill.has_sufficient_data() {
            return (
                None,
                format!(
                    "prefill: insufficient data ({}/{} samples)",
                    self.prefill.observations(),
                    self.params.load_min_observations
                ),
            );
        }
        let mbt = self.caps.prefill.max_num_batched_tokens;
        if n == 0 || mbt == 0 {
            return (None, "prefill: insufficient data".into());
        }
        let h = self.last_kv_hit_rate;
        let sensitivity = f64::from(self.params.load_scaling_down_sensitivity) / 100.0;
        let consolidation = if n > 1 {
            f64::from(n) / f64::from(n - 1)
        } else {
            1.0
        };
        let t_own_ms = if n > 1 {
            self.prefill
                .estimate_next_ttft(0, mbt, h)
                .map(|s| s * 1000.0)
        } else {
            None
        };
        let mut can = t_own_ms.is_some();
        let mut refused = false;
        let mut budget_ms = 0.0;
        if let Some(own) = t_own_ms {
            budget_ms = (self.params.ttft_ms - own) * sensitivity;
            if budget_ms <= 0.0 {
                can = false;
                refused = true;
            }
        }
        let mut estimates = Vec::with_capacity(loads.len());
        for l in loads {
            if let Some(est) = self
                .prefill
                .estimate_next_ttft(l.queued_prefill_tokens, mbt, h)
            {
                estimates.push(est * 1000.0);
            }
            if can {
                let post_q = (l.queued_prefill_tokens as f64 * consolidation) as u64;
                match self.prefill.estimate_next_ttft(post_q, mbt, h) {
                    None => can = false,
                    Some(post) => {
                        if post * 1000.0 - t_own_ms.unwrap_or(0.0) >= budget_ms {
                            can = false;
                            refused = true;
                        }
                    }
                }
            }
        }
        let decision = self.scale_decision(&estimates, self.params.ttft_ms, n, can);
        let worst = estimates.iter().copied().fold(f64::NAN, f64::max);
        let why = match decision {
            Some(k) if k > n => format!(
                "prefill: every instance's next TTFT is above {} ms (worst {} ms) → {k}",
                fmt3(self.params.ttft_ms),
                fmt3(worst)
            ),
            Some(k) => format!(
                "prefill: with one instance fewer every queue-induced TTFT stays under (target − own {} ms) × {} → {k}",
                fmt3(t_own_ms.unwrap_or(0.0)),
                fmt3(sensitivity)
            ),
            None if estimates.is_empty() => "prefill: insufficient data (no fit)".into(),
            None if refused => format!(
                "prefill: no change (worst next TTFT {} ms; one fewer would break the TTFT target)",
                fmt3(worst)
            ),
            None => format!("prefill: no change (worst next TTFT {} ms)", fmt3(worst)),
        };
        (decision, why)
    }

    /// `_decode_load_decision` (`sla` target).
    fn decode_load(&mut self, loads: &[InstanceLoad], n: u32) -> (Option<u32>, String) {
        if !self.decode.has_sufficient_data() {
            return (
                None,
                format!(
                    "decode: insufficient data ({}/{} samples)",
                    self.decode.observations(),
                    self.params.load_min_observations
                ),
            );
        }
        if n == 0 {
            return (None, "decode: insufficient data".into());
        }
        let sensitivity = f64::from(self.params.load_scaling_down_sensitivity) / 100.0;
        let consolidation = if n > 1 {
            f64::from(n) / f64::from(n - 1)
        } else {
            1.0
        };
        let max_kv = self.caps.decode.max_kv_tokens;
        let mut can = n > 1;
        let mut refused = false;
        let mut estimates = Vec::with_capacity(loads.len());
        for l in loads {
            let (sched, queued) = (l.decode_kv_tokens, l.queued_decode_kv_tokens);
            if let Some(est) = self.decode.estimate_next_itl(sched, queued) {
                estimates.push(est * 1000.0);
            }
            if can {
                let post = ((sched + queued) as f64 * consolidation) as u64;
                if max_kv > 0 && post >= max_kv {
                    can = false;
                    refused = true;
                    continue;
                }
                match self.decode.estimate_next_itl(post, 0) {
                    None => can = false,
                    Some(itl) if itl * 1000.0 >= self.params.itl_ms * sensitivity => {
                        can = false;
                        refused = true;
                    }
                    Some(_) => {}
                }
            }
        }
        let decision = self.scale_decision(&estimates, self.params.itl_ms, n, can);
        let worst = estimates.iter().copied().fold(f64::NAN, f64::max);
        let why = match decision {
            Some(k) if k > n => format!(
                "decode: every instance's next ITL is above {} ms (worst {} ms) → {k}",
                fmt3(self.params.itl_ms),
                fmt3(worst)
            ),
            Some(k) => format!(
                "decode: with one instance fewer every instance's KV fits and its ITL stays under {} ms × {} → {k}",
                fmt3(self.params.itl_ms),
                fmt3(sensitivity)
            ),
            None if estimates.is_empty() => "decode: insufficient data (no fit)".into(),
            None if refused => format!(
                "decode: no change (worst next ITL {} ms; one fewer would overfill the KV or break the ITL target)",
                fmt3(worst)
            ),
            None => format!("decode: no change (worst next ITL {} ms)", fmt3(worst)),
        };
        (decision, why)
    }

    /// `_prefill_easy_decision`.
    fn prefill_easy(&self, loads: &[InstanceLoad], n: u32) -> (Option<u32>, String) {
        let ctx = self.caps.prefill.context_length;
        if ctx == 0 || n == 0 || loads.is_empty() {
            return (None, "prefill: insufficient data".into());
        }
        let latency = self.params.optimization_target == OptimizationTarget::Latency;
        let (up, down) = if latency { (0.1, 0.0) } else { (1.0, 0.1) };
        let ratios: Vec<f64> = loads
            .iter()
            .map(|l| l.queued_prefill_tokens as f64 / ctx as f64)
            .collect();
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        if ratios.iter().any(|r| *r >= up) {
            return (
                Some(n + 1),
                format!(
                    "prefill: an instance's queued tokens reach {} × context_length (≥ {up}) → {}",
                    fmt3(worst),
                    n + 1
                ),
            );
        }
        let all_down = if latency {
            ratios.iter().all(|r| *r <= down)
        } else {
            ratios.iter().all(|r| *r < down)
        };
        if n > 1 && all_down {
            let k = (n - 1).max(self.params.min_endpoint);
            return (
                Some(k),
                format!(
                    "prefill: every instance's queue is below {down} × context_length (worst {}) → {k}",
                    fmt3(worst)
                ),
            );
        }
        (
            None,
            format!(
                "prefill: no change (worst queue {} × context_length)",
                fmt3(worst)
            ),
        )
    }

    /// `_decode_easy_decision`.
    fn decode_easy(&self, loads: &[InstanceLoad], n: u32) -> (Option<u32>, String) {
        let max_kv = self.caps.decode.max_kv_tokens;
        if max_kv == 0 || n == 0 || loads.is_empty() {
            return (None, "decode: insufficient data".into());
        }
        let latency = self.params.optimization_target == OptimizationTarget::Latency;
        let (up, down) = if latency { (0.4, 0.1) } else { (1.0, 0.6) };
        let utils: Vec<f64> = loads
            .iter()
            .map(|l| (l.decode_kv_tokens + l.queued_decode_kv_tokens) as f64 / max_kv as f64)
            .collect();
        let worst = utils.iter().copied().fold(0.0, f64::max);
        if utils.iter().any(|u| *u > up) {
            return (
                Some(n + 1),
                format!(
                    "decode: an instance's KV use (scheduled + queued) is {} of max_kv_tokens (> {up}) → {}",
                    fmt3(worst),
                    n + 1
                ),
            );
        }
        if n > 1 && utils.iter().all(|u| *u < down) {
            let k = (n - 1).max(self.params.min_endpoint);
            return (
                Some(k),
                format!(
                    "decode: every instance's KV use is below {down} (worst {}) → {k}",
                    fmt3(worst)
                ),
            );
        }
        (
            None,
            format!("decode: no change (worst KV use {})", fmt3(worst)),
        )
    }

    /// `_advance_load_disagg`.
    fn advance_load(&mut self, obs: &Observation) -> (Option<Target>, String) {
        if !self.params.enable_load_scaling {
            return (None, String::new());
        }
        let counts = obs.counts;
        let (np, nd) = (counts.prefill_ready, counts.decode_ready);
        if obs.prefill.is_empty() && obs.decode.is_empty() {
            return (None, "load: no forward-pass data: no change".into());
        }
        if (!obs.prefill.is_empty() && obs.prefill.len() != np as usize)
            || (!obs.decode.is_empty() && obs.decode.len() != nd as usize)
        {
            return (
                None,
                "load: the instances reporting differ from the serving count: no change".into(),
            );
        }
        let easy = self.easy();
        let (p_desired, p_why) = if obs.prefill.is_empty() {
            (None, "prefill: no data".to_string())
        } else if easy {
            self.prefill_easy(&obs.prefill, np)
        } else {
            self.prefill_load(&obs.prefill, np)
        };
        let (d_desired, d_why) = if obs.decode.is_empty() {
            (None, "decode: no data".to_string())
        } else if easy {
            self.decode_easy(&obs.decode, nd)
        } else {
            self.decode_load(&obs.decode, nd)
        };
        let mut p = p_desired.unwrap_or(np);
        let mut d = d_desired.unwrap_or(nd);
        let mut why = format!("load: {p_why}; {d_why}");
        if self.params.enable_throughput_scaling {
            if self.lower.prefill > p || self.lower.decode > d {
                why.push_str(&format!(
                    "; the throughput path's lower bounds P ≥ {}, D ≥ {}",
                    self.lower.prefill, self.lower.decode
                ));
            }
            p = p.max(self.lower.prefill);
            d = d.max(self.lower.decode);
        }
        p = p.max(self.params.min_endpoint);
        d = d.max(self.params.min_endpoint);
        let (bp, bd) = self.budget().clamp(p, d);
        if (bp, bd) != (p, d) {
            why.push_str(&format!(
                "; GPU budget ({}) → P = {bp}, D = {bd}",
                self.budget_words()
            ));
        }
        if bp == np && bd == nd {
            why.push_str(": no change");
            return (None, why);
        }
        why.push_str(&format!(": P {np} → {bp}, D {nd} → {bd}"));
        (
            Some(Target {
                prefill: bp,
                decode: bd,
            }),
            why,
        )
    }
}

impl Policy for SlaPlanner {
    fn next_tick(&self) -> Option<Tick> {
        let (at_ns, load, throughput) = self.schedule();
        let traffic_window_ns = if throughput {
            Some(self.params.throughput_adjustment_interval_ns)
        } else if load && !self.params.enable_throughput_scaling {
            Some(self.params.load_adjustment_interval_ns)
        } else {
            None
        };
        Some(Tick {
            at_ns,
            traffic_window_ns,
            needs_load: load,
        })
    }

    fn tick(&mut self, obs: &Observation) -> Verdict {
        let (_, load, throughput) = self.schedule();
        let now = obs.now_ns;
        let mut reasons: Vec<String> = Vec::new();
        let mut throughput_target = None;
        if throughput {
            match &obs.traffic {
                Some(t) => {
                    self.observe_traffic(t);
                    let (target, why) = self.advance_throughput(t, &obs.counts);
                    throughput_target = target;
                    reasons.push(why);
                }
                None => reasons.push("throughput: no traffic data: no change".into()),
            }
            self.next_throughput_ns =
                Some(now.saturating_add(self.params.throughput_adjustment_interval_ns));
        }
        let mut load_target = None;
        if load {
            if !throughput && let Some(t) = &obs.traffic {
                self.observe_traffic(t);
            }
            if !self.easy() {
                self.observe_forwards(obs);
            }
            let (target, why) = self.advance_load(obs);
            load_target = target;
            if !why.is_empty() {
                reasons.push(why);
            }
            self.next_load_ns = now.saturating_add(self.params.load_adjustment_interval_ns);
        }
        let target = load_target.or(throughput_target);
        let mut reason = reasons.join(" | ");
        if reason.is_empty() {
            reason = "load tick: forward samples recorded".into();
        }
        Verdict { target, reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscale::{EngineCaps, ForwardPass};
    use crate::config::autoscale::LoadPredictor;
    use crate::vocab::ids::InstanceId;

    /// Forward times of a made-up engine: prefill 0.02 s + 0.1 ms a token, decode 5 ms +
    /// 0.1 ms a request + 20 ns a KV token.
    struct Engine;
    impl StepTimes for Engine {
        fn prefill_wall_s(&self, tokens: u64) -> f64 {
            0.02 + 1e-4 * tokens as f64
        }
        fn decode_wall_s(&self, batch: u32, kv: u64) -> f64 {
            0.005 + 1e-4 * f64::from(batch) + 2e-8 * kv as f64
        }
    }

    fn caps() -> Capabilities {
        Capabilities {
            prefill: EngineCaps {
                gpus: 1,
                max_num_batched_tokens: 8192,
                max_kv_tokens: 500_000,
                max_num_seqs: None,
                context_length: 32_768,
            },
            decode: EngineCaps {
                gpus: 1,
                max_num_batched_tokens: 8192,
                max_kv_tokens: 2_000_000,
                max_num_seqs: None,
                context_length: 32_768,
            },
        }
    }

    fn params() -> SlaPlannerParams {
        SlaPlannerParams {
            load_predictor: LoadPredictor::Constant,
            max_gpu_budget: None,
            ..SlaPlannerParams::default()
        }
    }

    fn traffic(rps: f64, isl: f64, osl: f64, hit: f64) -> Traffic {
        Traffic {
            window_ns: 180 * NS_PER_S,
            completed: (rps * 180.0) as u64,
            mean_isl_tokens: Some(isl),
            mean_osl_tokens: Some(osl),
            kv_hit_rate: Some(hit),
        }
    }

    /// Runs the planner to its first throughput tick with `traffic`, every load tick in
    /// between seeing idle instances.
    fn first_throughput_verdict(
        planner: &mut SlaPlanner,
        t: Traffic,
        counts: PoolCounts,
    ) -> Verdict {
        loop {
            let tick = planner.next_tick().unwrap();
            let obs = Observation {
                now_ns: tick.at_ns,
                traffic: tick.traffic_window_ns.map(|_| t),
                counts,
                ..Observation::default()
            };
            let v = planner.tick(&obs);
            if tick.traffic_window_ns.is_some() {
                return v;
            }
        }
    }

    #[test]
    fn the_ticks_are_dynamos_cadence() {
        let mut p = SlaPlanner::new(params(), caps(), 0, None);
        let mut seen = Vec::new();
        for _ in 0..37 {
            let t = p.next_tick().unwrap();
            seen.push((
                t.at_ns / NS_PER_S,
                t.traffic_window_ns.map(|w| w / NS_PER_S),
            ));
            p.tick(&Observation {
                now_ns: t.at_ns,
                ..Observation::default()
            });
        }
        assert_eq!(seen[0], (5, None));
        assert_eq!(seen[34], (175, None));
        // 180 s: the load and throughput ticks merge; the throughput window is 180 s.
        assert_eq!(seen[35], (180, Some(180)));
        assert_eq!(seen[36], (185, None));
        // Load-only: every load tick scrapes its own 5 s window for the hit rate.
        let lp = SlaPlanner::new(
            SlaPlannerParams {
                enable_throughput_scaling: false,
                enable_load_scaling: true,
                ..params()
            },
            caps(),
            0,
            None,
        );
        assert_eq!(
            lp.next_tick(),
            Some(Tick {
                at_ns: 5 * NS_PER_S,
                traffic_window_ns: Some(5 * NS_PER_S),
                needs_load: true
            })
        );
    }

    #[test]
    fn the_throughput_path_by_hand() {
        // 10 req/s, ISL 3000, OSL 150, hit 0.5, TTFT 500 ms, ITL 50 ms, regressions from the
        // Engine's own step times (exact lines, so the fits are the Engine):
        // prefill: ISL_eff 1500 → wt = 0.02 + 0.15 = 0.17 s → 5.882 req/s, TTFT 170 ms ≤ 500
        //   → P = ⌈10/5.882⌉ = ⌈1.7⌉ = 2;
        // decode: ctx = 3075, wt(b) = 0.005 + b·(1e-4 + 6.15e-5) ≤ 0.05 → b = 278,
        //   wt = 0.049897 s → 278/(150 · 0.049897) = 37.14 req/s → D = ⌈0.269⌉ = 1.
        let mut p = SlaPlanner::new(params(), caps(), 0, Some(&Engine));
        let v = first_throughput_verdict(
            &mut p,
            traffic(10.0, 3000.0, 150.0, 0.5),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 2,
                decode: 1
            }),
            "{}",
            v.reason
        );
        assert!(
            v.reason.contains("P = max(⌈1.700⌉, 1, min_endpoint 1) = 2"),
            "{}",
            v.reason
        );
        // 101 req/s: P = ⌈101 · 0.17⌉ = ⌈17.17⌉ = 18, D = ⌈101/37.14⌉ = ⌈2.72⌉ = 3.
        let mut p = SlaPlanner::new(params(), caps(), 0, Some(&Engine));
        let v = first_throughput_verdict(
            &mut p,
            traffic(101.0, 3000.0, 150.0, 0.5),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 18,
                decode: 3
            }),
            "{}",
            v.reason
        );
        // No prefix hits: ISL 3000 → wt 0.32 s → 3.125 req/s → ⌈32.32⌉ = 33 prefill.
        let mut p = SlaPlanner::new(params(), caps(), 0, Some(&Engine));
        let v = first_throughput_verdict(
            &mut p,
            traffic(101.0, 3000.0, 150.0, 0.0),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(v.target.unwrap().prefill, 33, "{}", v.reason);
    }

    #[test]
    fn a_ttft_no_engine_meets_sets_the_floor() {
        // ISL 12000 at MBT 8192: 2 chunks, wt = (0.02 + 0.8192) + (0.02 + 0.3808) = 1.24 s;
        // TTFT 1240 ms > 500 ms → floor ⌈2.48⌉ = 3, although 1 req/s needs ⌈1.24⌉ = 2.
        let mut p = SlaPlanner::new(params(), caps(), 0, Some(&Engine));
        let v = first_throughput_verdict(
            &mut p,
            traffic(1.0, 12_000.0, 100.0, 0.0),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(v.target.unwrap().prefill, 3, "{}", v.reason);
        assert!(v.reason.contains("floor ⌈TTFT/target⌉ = 3"), "{}", v.reason);
    }

    #[test]
    fn the_budget_clamps_the_throughput_decision() {
        // 101 req/s wants 18 P + 3 D = 21 GPUs; Dynamo's default budget of 8:
        // scale 8/21 → P = min(⌊(8 − 1)/1⌋, ⌊6.86⌋) = 6, D = 8 − 6 = 2.
        let mut p = SlaPlanner::new(
            SlaPlannerParams {
                max_gpu_budget: Some(8),
                ..params()
            },
            caps(),
            0,
            Some(&Engine),
        );
        let v = first_throughput_verdict(
            &mut p,
            traffic(101.0, 3000.0, 150.0, 0.5),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 6,
                decode: 2
            }),
            "{}",
            v.reason
        );
        assert!(v.reason.contains("GPU budget"), "{}", v.reason);
    }

    #[test]
    fn without_a_bootstrap_the_regressions_wait_for_samples() {
        let mut p = SlaPlanner::new(
            SlaPlannerParams {
                pre_deployment_sweeping_mode: SweepingMode::None,
                ..params()
            },
            caps(),
            0,
            Some(&Engine),
        );
        let v = first_throughput_verdict(
            &mut p,
            traffic(10.0, 3000.0, 150.0, 0.0),
            PoolCounts::steady(1, 1),
        );
        assert_eq!(v.target, None);
        assert!(v.reason.contains("not ready"), "{}", v.reason);
    }

    #[test]
    fn live_forwards_teach_the_regressions() {
        // No bootstrap; each load tick one prefill and one decode forward from the Engine.
        let mut p = SlaPlanner::new(
            SlaPlannerParams {
                pre_deployment_sweeping_mode: SweepingMode::None,
                ..params()
            },
            caps(),
            0,
            None,
        );
        let mut verdict = None;
        for k in 0..36u64 {
            let tick = p.next_tick().unwrap();
            let tokens = 500 + 300 * (k % 7);
            let (b, ctx) = (1 + (k % 9) as u32, 1000 + 250 * (k % 5));
            let kv = u64::from(b) * ctx;
            let load = |id: u32, f: ForwardPass| InstanceLoad {
                instance: InstanceId(id),
                last_forward: Some(f),
                ..InstanceLoad::default()
            };
            let obs = Observation {
                now_ns: tick.at_ns,
                traffic: tick
                    .traffic_window_ns
                    .map(|_| traffic(10.0, 3000.0, 150.0, 0.5)),
                prefill: vec![load(
                    0,
                    ForwardPass {
                        wall_s: Engine.prefill_wall_s(tokens),
                        prefill_requests: 1,
                        prefill_tokens: tokens,
                        ..ForwardPass::default()
                    },
                )],
                decode: vec![load(
                    1,
                    ForwardPass {
                        wall_s: Engine.decode_wall_s(b, kv),
                        decode_requests: b,
                        decode_kv_tokens: kv,
                        ..ForwardPass::default()
                    },
                )],
                counts: PoolCounts::steady(1, 1),
            };
            verdict = Some(p.tick(&obs));
        }
        let v = verdict.unwrap();
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 2,
                decode: 1
            }),
            "{}",
            v.reason
        );
    }

    fn loaded(queued_prefill: u64, kv: u64) -> InstanceLoad {
        InstanceLoad {
            queued_prefill_tokens: queued_prefill,
            decode_kv_tokens: kv,
            ..InstanceLoad::default()
        }
    }

    fn load_only(target: OptimizationTarget) -> SlaPlannerParams {
        SlaPlannerParams {
            optimization_target: target,
            enable_throughput_scaling: target == OptimizationTarget::Sla,
            enable_load_scaling: true,
            ..params()
        }
    }

    /// A planner without a bootstrap whose regressions learned the Engine from live forwards:
    /// prompts of 1000 … 3000 tokens (mean 2000), decode batches of 8 … 12 (mean 10) at
    /// 2800 … 3200 tokens each (mean 3000).
    fn seeded(params: SlaPlannerParams) -> SlaPlanner {
        let mut p = SlaPlanner::new(
            SlaPlannerParams {
                pre_deployment_sweeping_mode: SweepingMode::None,
                ..params
            },
            caps(),
            0,
            None,
        );
        for (tokens, (b, ctx)) in [1000u64, 1500, 2000, 2500, 3000].into_iter().zip([
            (8u32, 2800u64),
            (9, 3200),
            (10, 3000),
            (11, 2900),
            (12, 3100),
        ]) {
            p.prefill_model().observe(&ForwardPass {
                wall_s: Engine.prefill_wall_s(tokens),
                prefill_requests: 1,
                prefill_tokens: tokens,
                ..ForwardPass::default()
            });
            let kv = u64::from(b) * ctx;
            p.decode_model().observe(&ForwardPass {
                wall_s: Engine.decode_wall_s(b, kv),
                decode_requests: b,
                decode_kv_tokens: kv,
                ..ForwardPass::default()
            });
        }
        p
    }

    #[test]
    fn the_sla_load_path_scales_on_estimated_latency() {
        let mut p = seeded(load_only(OptimizationTarget::Sla));
        // Prefill next TTFT with q queued: (q + 2000) in 8192-token chunks. Both instances
        // hold 8000 queued tokens: 10000 → 8192 + 1808 → 0.04 + 1.0 = 1.04 s > 0.5 → 3.
        // Decode, both at 300,000 KV: next ITL = 0.005 + 1e-4·11 + 2e-8·303,000 = 12.2 ms <
        // 50 ms; one fewer holds 600,000 (< 2,000,000) at 18.2 ms < 40 ms → 1.
        let obs = Observation {
            now_ns: 5 * NS_PER_S,
            prefill: vec![loaded(8000, 0), loaded(8000, 0)],
            decode: vec![loaded(0, 300_000), loaded(0, 300_000)],
            counts: PoolCounts::steady(2, 2),
            ..Observation::default()
        };
        let v = p.tick(&obs);
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 3,
                decode: 1
            }),
            "{}",
            v.reason
        );
        // One prefill instance under the target: no scale-up (every one must be over); one
        // fewer would push the idle one's twin to 18000 tokens, 1640 ms over its own 220 ms
        // against a budget of (500 − 220)·0.8 = 224 ms: refused. Decode at 1,000,000 each:
        // one fewer would hold 2,000,000 ≥ max_kv → refused.
        let obs = Observation {
            now_ns: 10 * NS_PER_S,
            prefill: vec![loaded(8000, 0), loaded(0, 0)],
            decode: vec![loaded(0, 1_000_000), loaded(0, 1_000_000)],
            counts: PoolCounts::steady(2, 2),
            ..Observation::default()
        };
        let v = p.tick(&obs);
        assert_eq!(v.target, None, "{}", v.reason);
        assert!(v.reason.contains("overfill"), "{}", v.reason);
        assert!(
            v.reason.contains("would break the TTFT target"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn the_sla_load_path_needs_its_samples() {
        let mut p = SlaPlanner::new(
            SlaPlannerParams {
                pre_deployment_sweeping_mode: SweepingMode::None,
                ..load_only(OptimizationTarget::Sla)
            },
            caps(),
            0,
            None,
        );
        let v = p.tick(&Observation {
            now_ns: 5 * NS_PER_S,
            prefill: vec![loaded(100_000, 0)],
            decode: vec![loaded(0, 0)],
            counts: PoolCounts::steady(1, 1),
            ..Observation::default()
        });
        assert_eq!(v.target, None);
        assert!(
            v.reason.contains("insufficient data (0/5 samples)"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn the_threshold_targets_are_dynamos_easy_mode() {
        // throughput target: prefill up at queued/context ≥ 1.0, down when all < 0.1;
        // decode up at KV use > 1.0, down when all < 0.6.
        let mut p = SlaPlanner::new(load_only(OptimizationTarget::Throughput), caps(), 0, None);
        let obs = |pre: Vec<InstanceLoad>, dec: Vec<InstanceLoad>, np, nd| Observation {
            now_ns: 5 * NS_PER_S,
            prefill: pre,
            decode: dec,
            counts: PoolCounts::steady(np, nd),
            ..Observation::default()
        };
        // 32768 queued = 1.0 × context → up; decode at 1,100,000/2,000,000 = 0.55 < 0.6 on
        // both → down.
        let v = p.tick(&obs(
            vec![loaded(32_768, 0), loaded(0, 0)],
            vec![loaded(0, 1_100_000), loaded(0, 1_100_000)],
            2,
            2,
        ));
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 3,
                decode: 1
            }),
            "{}",
            v.reason
        );
        // Just under the level: no change on prefill (0.999 × context); decode 0.6 is not < 0.6.
        let v = p.tick(&obs(
            vec![loaded(32_767, 0), loaded(4000, 0)],
            vec![loaded(0, 1_200_000), loaded(0, 100)],
            2,
            2,
        ));
        assert_eq!(v.target, None, "{}", v.reason);
        // Latency target: up at 0.1 × context (3277 tokens), down only when every queue is 0;
        // decode up above 0.4.
        let mut l = SlaPlanner::new(load_only(OptimizationTarget::Latency), caps(), 0, None);
        let v = l.tick(&obs(
            vec![loaded(3277, 0), loaded(0, 0)],
            vec![loaded(0, 800_001), loaded(0, 0)],
            2,
            2,
        ));
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 3,
                decode: 3
            }),
            "{}",
            v.reason
        );
        let v = l.tick(&obs(
            vec![loaded(0, 0), loaded(0, 0)],
            vec![loaded(0, 150_000), loaded(0, 0)],
            2,
            2,
        ));
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 1,
                decode: 1
            }),
            "{}",
            v.reason
        );
        // min_endpoint holds the floor.
        let v = l.tick(&obs(vec![loaded(0, 0)], vec![loaded(0, 0)], 1, 1));
        assert_eq!(v.target, None, "{}", v.reason);
    }

    #[test]
    fn the_throughput_bounds_floor_the_load_path() {
        // Both paths on: at 180 s the throughput path sets P ≥ 18, D ≥ 3 (101 req/s, hit 0.5);
        // the load path at the same tick sees idle instances (it would shrink each pool by
        // one, 4 → 3) and is lifted to the bounds.
        let mut p = seeded(SlaPlannerParams {
            enable_load_scaling: true,
            ..params()
        });
        let mut before = Vec::new();
        let v = loop {
            let tick = p.next_tick().unwrap();
            let obs = Observation {
                now_ns: tick.at_ns,
                traffic: tick
                    .traffic_window_ns
                    .map(|_| traffic(101.0, 3000.0, 150.0, 0.5)),
                prefill: vec![loaded(0, 0); 4],
                decode: vec![loaded(0, 0); 4],
                counts: PoolCounts::steady(4, 4),
            };
            let v = p.tick(&obs);
            if tick.traffic_window_ns.is_some() {
                break v;
            }
            before.push(v.target);
        };
        assert!(
            before.iter().all(|t| *t
                == Some(Target {
                    prefill: 3,
                    decode: 3
                })),
            "{before:?}"
        );
        assert_eq!(
            p.lower_bounds(),
            Target {
                prefill: 18,
                decode: 3
            }
        );
        assert_eq!(
            v.target,
            Some(Target {
                prefill: 18,
                decode: 3
            }),
            "{}",
            v.reason
        );
        assert!(v.reason.contains("lower bounds"), "{}", v.reason);
    }
}
