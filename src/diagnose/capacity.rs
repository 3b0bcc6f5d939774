//! Capacity diagnosis for `pdsim explain`: which pool binds, on which resource (compute, KV
//! memory, batch cap, fabric, queue), with the figures that show it — and the levers that would
//! move it, each **verified by running it**: the run's own scenario with one change (one more
//! instance of the pool, its TP doubled, its chunked prefill size doubled, …), simulated on the
//! same seed, its measured effect set beside the original's figures, levers ranked by that
//! effect. A rule can name a suspect; only the re-run says whether relieving it helps (relieve
//! prefill and the queue may just move to decode).
//!
//! The original run's figures are the [`Summary`] read back from `summary.json` through the
//! results schema (`report::schema`); the scenario comes from the caller (explain rebuilds it from `run.json`), so this
//! module reads no file itself.

use rayon::prelude::*;

use crate::config::{Role, Scenario};
use crate::metrics::NullSink;
use crate::metrics::summary::{PoolUsage, Summary, step_growth};
use crate::sim::World;

/// The figures a lever is judged by, of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunFigures {
    /// GPUs in all pools.
    pub gpus: u32,
    /// Requests that arrived.
    pub arrived: u64,
    /// Failed requests.
    pub failed: u64,
    /// Requests still in flight when the run stopped.
    pub unfinished: u64,
    /// `[slo]` verdict (`None`: no target).
    pub slo_met: Option<bool>,
    /// SLO attainment, 0–1.
    pub attainment: Option<f64>,
    /// p99 TTFT over finished requests, ms.
    pub ttft_p99_ms: Option<f64>,
    /// p99 TPOT over finished requests, ms.
    pub tpot_p99_ms: Option<f64>,
    /// p99 ITL over every gap, ms.
    pub itl_p99_ms: Option<f64>,
    /// p99 of each finished request's worst gap (TBT), ms.
    pub tbt_p99_ms: Option<f64>,
    /// Goodput over the arrival window, requests/s.
    pub goodput_rps: f64,
    /// Output tokens/s over the arrival window.
    pub output_tps: f64,
}

impl RunFigures {
    /// The figures of a summary just simulated.
    pub fn of(s: &Summary) -> Self {
        Self {
            gpus: s.cluster.gpus,
            arrived: s.requests.arrived,
            failed: s.requests.failed,
            unfinished: s.requests.unfinished,
            slo_met: s.slo.met,
            attainment: s.slo.attainment,
            ttft_p99_ms: s.latency_ms.ttft.p99,
            tpot_p99_ms: s.latency_ms.tpot.p99,
            itl_p99_ms: s.latency_ms.itl.p99,
            tbt_p99_ms: s.latency_ms.tbt.p99,
            goodput_rps: s.throughput.arrival_window.goodput_requests_per_s,
            output_tps: s.throughput.arrival_window.output_tokens_per_s,
        }
    }

    /// Requests the cluster did not serve: failed or still in flight.
    fn unserved(&self) -> u64 {
        self.failed + self.unfinished
    }

    /// Whether the run is in trouble: `[slo]` missed or requests left unserved.
    pub fn strained(&self) -> bool {
        self.slo_met == Some(false) || self.unfinished > 0
    }
}

/// The binding resource of a pool, with the figures that show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// Pool name.
    pub pool: String,
    /// Its role.
    pub role: String,
    /// `compute`, `kv_memory`, `batch_cap`, `fabric` or `queue`.
    pub resource: String,
    /// The figures, in words: `forwards ran 99.9 % of the arrival window; 395 requests waiting
    /// on average, …`.
    pub evidence: String,
}

/// One lever: a change to the scenario and what it did when run.
#[derive(Clone, Debug, PartialEq)]
pub struct Lever {
    /// What it is, in words: `one more prefill instance (1 → 2)`.
    pub what: String,
    /// The `--set` overrides that make it (`pools.prefill.instances=2`).
    pub sets: Vec<String>,
    /// The pool it acts on.
    pub pool: String,
    /// The measured figures, or why the lever's run failed (its configuration validated: one
    /// that does not is not proposed).
    pub outcome: Result<RunFigures, String>,
}

/// The capacity diagnosis of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnosis {
    /// The original run's figures.
    pub base: RunFigures,
    /// Pools whose bottleneck is not `none`, most constraining first; `binding[0]` is the
    /// binding pool (the one whose relief measured best, when levers ran).
    pub binding: Vec<Binding>,
    /// Levers, ranked by their measured effect (best first); empty when the run is healthy.
    pub levers: Vec<Lever>,
    /// The highest utilisation figure when no pool binds: `decode KV occupancy 25.1 %`.
    pub headroom: Option<String>,
}

fn pct(v: Option<f64>) -> String {
    v.map_or("—".into(), |x| format!("{:.1} %", 100.0 * x))
}

fn num(v: Option<f64>) -> String {
    v.map_or("—".into(), |x| format!("{x:.1}"))
}

/// The figures that show pool `p` binds on its `bottleneck`; `growth` is the decode step's
/// growth with the batch ([`step_growth`]); `server` names what the per-server figures are per
/// (`instance`, or `DP rank` under DP attention, where each rank has its own batch, queue and
/// KV pool).
fn evidence(p: &PoolUsage, growth: Option<f64>, server: &str) -> String {
    let queue = format!(
        "{} requests waiting per {server} on average, one or more waiting {} of the time",
        num(p.queue_mean),
        pct(p.queue_nonempty)
    );
    match p.bottleneck.as_str() {
        "compute" if p.role == "prefill" => {
            format!(
                "forwards ran {} of the arrival window; {queue}",
                pct(p.busy)
            )
        }
        "compute" => format!(
            "a step ran {} of the arrival window at a mean batch of {}, each step {} a lone request's; {queue}",
            pct(p.busy),
            num(p.batch_mean),
            growth.map_or("—".into(), |g| format!("{g:.1}×"))
        ),
        // Decode preallocates at the handshake, before the prefill runs (docs/sglang-pd.md
        // §16.1): behind a prefill backlog its pages are held by requests still waiting for
        // their prefill, with nothing to decode.
        "kv_memory" if p.role == "decode" && p.batch_mean.is_some_and(|b| b < 1.0) => format!(
            "KV pages {} held on average per {server} with a mean batch of {}: the pages are held by requests preallocated at their handshake and still waiting for (or in) their prefill — sglang's decode preallocates before the prefill runs, so a prefill backlog fills decode's KV; {queue} (decode's prealloc queue waits for pages)",
            pct(p.kv_occupancy),
            num(p.batch_mean)
        ),
        "kv_memory" if p.role == "decode" => format!(
            "KV pages {} held on average per {server}; {queue} (decode's prealloc queue waits for pages)",
            pct(p.kv_occupancy)
        ),
        "kv_memory" => format!(
            "KV pages {} held on average per {server}; {queue}",
            pct(p.kv_occupancy)
        ),
        // sglang's decode shares its request rows between the batch and the requests
        // preallocated or in transfer (`DecodeReqToTokenPool`, docs/sglang-pd.md §16.1): the
        // rows bind with the batch below the cap.
        "batch_cap" if p.role == "decode" && p.batch_occupancy.is_some_and(|b| b < 0.9) => format!(
            "every request row of max_running_requests held — by the batch (mean {}, {} of the cap) and by requests preallocated and still in transfer, which share the rows in sglang's decode; KV pages {} held; {queue} (decode's prealloc queue waits for a row)",
            num(p.batch_mean),
            pct(p.batch_occupancy),
            pct(p.kv_occupancy)
        ),
        "batch_cap" => format!(
            "the batch at {} of max_running_requests (mean {}); {queue}",
            pct(p.batch_occupancy),
            num(p.batch_mean)
        ),
        "fabric" => format!(
            "its NICs {} busy in its transfer direction",
            pct(p.link_utilisation)
        ),
        _ => queue,
    }
}

/// How much a pool's figures say it is constrained (orders the binding pools before any lever
/// ran): its largest utilisation share.
fn severity(p: &PoolUsage) -> f64 {
    [
        p.queue_nonempty,
        p.kv_occupancy,
        p.batch_occupancy,
        p.link_utilisation,
        (p.role == "prefill").then_some(p.busy).flatten(),
    ]
    .into_iter()
    .flatten()
    .fold(0.0, f64::max)
}

/// The `--set`s that double `pool`'s TP as sglang would take it: with expert parallelism the
/// experts spread over the new GPUs too (sglang sets `ep_size = tp_size`: an EP pool's
/// `ep_size` must be 1 or `tp_size`), and with DP attention the attention ranks double, each
/// keeping its attention TP. Doubling `tp_size` alone made an EP32 prefill's lever "could not
/// run" (issue 43).
fn tp2_sets(pool: &crate::config::Pool, key: &dyn Fn(&str) -> String) -> Vec<String> {
    let (tp, par) = (pool.server.tp_size, &pool.parallel);
    let mut sets = vec![format!("{}={}", key("server.tp_size"), 2 * tp)];
    if par.ep_size > 1 && par.ep_size == tp {
        sets.push(format!("{}={}", key("server.ep_size"), 2 * tp));
        // The experts and their redundant replicas must split evenly over the new ep_size:
        // the fewest more replicas that do (EP32 with 256 + 32 → EP64 with 256 + 64).
        let experts = pool.model.moe.as_ref().map_or(0, |m| m.experts);
        let r = par.ep_num_redundant_experts;
        let total = experts + r;
        if !total.is_multiple_of(2 * tp) {
            let more = total.div_ceil(2 * tp) * 2 * tp - experts;
            sets.push(format!("{}={more}", key("server.ep_num_redundant_experts")));
        }
    }
    if par.enable_dp_attention && par.dp_size > 1 {
        sets.push(format!("{}={}", key("server.dp_size"), 2 * par.dp_size));
    }
    sets
}

/// The levers worth running for a pool of the scenario that binds on `resource`.
fn levers_for(sc: &Scenario, p: &PoolUsage, resource: &str) -> Vec<(String, Vec<String>)> {
    let Some(pool) = sc.pools.iter().find(|q| q.name == p.pool) else {
        return Vec::new();
    };
    let key = |k: &str| format!("pools.{}.{k}", p.pool);
    let s = &pool.server;
    let mut v = vec![(
        format!(
            "one more {} instance ({} → {}, +{} GPUs)",
            p.pool,
            pool.instances,
            pool.instances + 1,
            s.tp_size
        ),
        vec![format!("{}={}", key("instances"), pool.instances + 1)],
    )];
    let tp2_set = tp2_sets(pool, &key);
    let named = |k: &str| tp2_set.iter().any(|x| x.contains(k));
    let with = match (named("ep_size"), named("dp_size")) {
        (false, false) => String::new(),
        (false, true) => ", DP attention ranks doubled".into(),
        (true, false) => ", ep_size doubled".into(),
        (true, true) => ", ep_size and DP attention ranks doubled".into(),
    };
    let tp2 = (
        format!(
            "{} at TP {} instead of {}{with} (+{} GPUs)",
            p.pool,
            2 * s.tp_size,
            s.tp_size,
            s.tp_size * pool.instances
        ),
        tp2_set,
    );
    match resource {
        "compute" if pool.role == Role::Prefill => {
            v.push(tp2);
            v.push((
                format!(
                    "{} with chunked_prefill_size {} instead of {} (same GPUs)",
                    p.pool,
                    2 * s.chunked_prefill_size,
                    s.chunked_prefill_size
                ),
                vec![format!(
                    "{}={}",
                    key("server.chunked_prefill_size"),
                    2 * s.chunked_prefill_size
                )],
            ));
        }
        "compute" | "kv_memory" => v.push(tp2),
        "batch_cap" => {
            if let Some(m) = s.max_running_requests {
                v.push((
                    format!(
                        "{} with max_running_requests {} instead of {m} (same GPUs)",
                        p.pool,
                        2 * m
                    ),
                    vec![format!("{}={}", key("server.max_running_requests"), 2 * m)],
                ));
            }
        }
        "fabric" => {
            // The line rate as the scenario wrote it (the resolved file), not the derated rate.
            let g = crate::scenario::resolved_file(sc).fabric.nic_gbps;
            v.push((
                format!("NICs of {} Gb/s instead of {g} (same GPUs)", 2.0 * g),
                vec![format!("fabric.nic_gbps={}", 2.0 * g)],
            ));
        }
        _ => {}
    }
    v
}

/// Runs a scenario to its summary, writing nothing.
pub(crate) fn simulate(sc: &Scenario) -> Result<Summary, String> {
    let mut sink = NullSink;
    let mut world = World::new(sc, &mut sink);
    Ok(world.run().map_err(|e| e.to_string())?.summary)
}

/// Whether a missed `[slo]` target on inter-token gaps has mostly mixed-step gaps past it (a
/// colocated forward that also ran prefill chunks: `slo.targets[].late`).
fn mixed_steps_bind(s: &Summary) -> bool {
    s.slo.targets.iter().filter(|t| !t.met).any(|t| {
        let n = |w: &str| t.late.iter().find(|l| l.what == w).map_or(0, |l| l.count);
        let mixed = n("mixed_step");
        mixed > 0 && mixed >= n("handoff") && mixed >= n("decode_step")
    })
}

/// The ranking key of a lever's outcome (smaller is better): `[slo]` met, fewer requests
/// unserved, more goodput, lower p99 TTFT, fewer GPUs. Levers that could not run go last.
fn rank(o: &Result<RunFigures, String>) -> (u8, u64, i64, i64, u32) {
    match o {
        Err(_) => (2, u64::MAX, i64::MAX, i64::MAX, u32::MAX),
        Ok(f) => (
            u8::from(f.slo_met != Some(true)),
            f.unserved(),
            // Goodput in milli-requests/s, negated: more is better (integers keep the order total).
            -(f.goodput_rps * 1e3).round() as i64,
            f.ttft_p99_ms.map_or(i64::MAX, |t| (t * 1e3).round() as i64),
            f.gpus,
        ),
    }
}

/// The capacity diagnosis of a run: `summary` is its `summary.json`, `sc` the scenario it ran
/// and `with` rebuilds that scenario with `--set` overrides (the levers; one it refuses is not
/// proposed). Levers run only when
/// the run is strained ([`RunFigures::strained`]) or a pool binds: a healthy run costs nothing.
pub fn diagnose(
    summary: &Summary,
    sc: &Scenario,
    with: &(dyn Fn(&[String]) -> Result<Scenario, String> + Sync),
) -> Diagnosis {
    let base = RunFigures::of(summary);
    let pools = &summary.pools;
    let growth = |p: &PoolUsage| -> Option<f64> {
        let pool = sc.pools.iter().find(|q| q.name == p.pool)?;
        step_growth(sc, pool, p)
    };
    let server = |p: &PoolUsage| -> &'static str {
        let dp = sc.pools.iter().find(|q| q.name == p.pool);
        if dp.is_some_and(|q| q.parallel.dp_ranks() > 1) {
            "DP rank"
        } else {
            "instance"
        }
    };
    let mut bound: Vec<&PoolUsage> = pools.iter().filter(|p| p.bottleneck != "none").collect();
    bound.sort_by(|a, b| severity(b).total_cmp(&severity(a)));
    let mut binding: Vec<Binding> = bound
        .iter()
        .map(|p| Binding {
            pool: p.pool.clone(),
            role: p.role.clone(),
            resource: p.bottleneck.clone(),
            evidence: evidence(p, growth(p), server(p)),
        })
        .collect();
    let headroom = binding.is_empty().then(|| {
        pools
            .iter()
            .flat_map(|p| {
                [
                    ("KV occupancy", p.kv_occupancy),
                    ("batch occupancy", p.batch_occupancy),
                    ("link use", p.link_utilisation),
                    ("waiting share", p.queue_nonempty),
                    (
                        "compute busy",
                        (p.role == "prefill").then_some(p.busy).flatten(),
                    ),
                ]
                .into_iter()
                .filter_map(move |(what, v)| v.map(|v| (p.pool.clone(), what, v)))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2))
            .map_or("no pool figures".into(), |(pool, what, v)| {
                format!("{pool} {what} {}", pct(Some(v)))
            })
    });
    if binding.is_empty() && !base.strained() {
        return Diagnosis {
            base,
            binding,
            levers: Vec::new(),
            headroom,
        };
    }
    // Strained with no pool named: every pool is a suspect; the re-runs decide.
    let suspects: Vec<(PoolUsage, String)> = if bound.is_empty() {
        pools.iter().map(|p| (p.clone(), "queue".into())).collect()
    } else {
        bound
            .iter()
            .map(|p| ((*p).clone(), p.bottleneck.clone()))
            .collect()
    };
    let mut plan: Vec<(String, Vec<String>, String)> = suspects
        .iter()
        .flat_map(|(p, r)| {
            levers_for(sc, p, r)
                .into_iter()
                .map(|(what, sets)| (what, sets, p.pool.clone()))
        })
        .collect();
    // A missed target on inter-token gaps whose gaps past it are mostly mixed forwards: the
    // prefill chunk each running request waits out is the lever (halved: shorter forwards,
    // the same GPUs).
    if mixed_steps_bind(summary) {
        for pool in sc.pools.iter().filter(|p| p.role == Role::Colocated) {
            let c = pool.server.chunked_prefill_size;
            if c >= 2 {
                plan.push((
                    format!(
                        "{} with chunked_prefill_size {} instead of {c} (same GPUs: shorter mixed forwards)",
                        pool.name,
                        c / 2
                    ),
                    vec![format!(
                        "pools.{}.server.chunked_prefill_size={}",
                        pool.name,
                        c / 2
                    )],
                    pool.name.clone(),
                ));
            }
        }
    }
    // Only configurations that validate are proposed: a lever sglang would refuse to launch
    // (TP 16 of a model with 40 KV heads) is no lever (issue 41).
    let plan: Vec<(String, Vec<String>, String, Scenario)> = plan
        .into_iter()
        .filter_map(|(what, sets, pool)| with(&sets).ok().map(|s| (what, sets, pool, s)))
        .collect();
    let mut levers: Vec<Lever> = plan
        .into_par_iter()
        .map(|(what, sets, pool, s)| {
            let outcome = simulate(&s).map(|x| RunFigures::of(&x));
            Lever {
                what,
                sets,
                pool,
                outcome,
            }
        })
        .collect();
    // Stable: equal effects keep the order they were proposed in (pool order, cheapest first).
    levers.sort_by_key(|l| rank(&l.outcome));
    // The binding pool is the one whose relief measured best — when it improved anything.
    if let Some(best) = levers.first()
        && best
            .outcome
            .as_ref()
            .is_ok_and(|f| rank(&Ok(f.clone())) < rank(&Ok(base.clone())))
        && let Some(i) = binding.iter().position(|b| b.pool == best.pool)
    {
        let b = binding.remove(i);
        binding.insert(0, b);
    }
    Diagnosis {
        base,
        binding,
        levers,
        headroom,
    }
}

/// A figure's change in words: `122 s → 1.2 s`.
fn change(a: Option<f64>, b: Option<f64>, unit: &str) -> String {
    let f = |v: Option<f64>| match v {
        None => "—".to_string(),
        Some(ms) if unit == "ms" && ms >= 10_000.0 => format!("{:.1} s", ms / 1e3),
        Some(v) if unit == "ms" => format!("{} ms", crate::metrics::slo::fmt_ms(v)),
        Some(v) if unit == "%" => format!("{:.1} %", 100.0 * v),
        Some(v) => format!("{v:.2}{unit}"),
    };
    format!("{} → {}", f(a), f(b))
}

impl Lever {
    /// The measured effect against `base`, in words.
    pub fn effect(&self, base: &RunFigures) -> String {
        match &self.outcome {
            Err(e) => format!("could not run: {e}"),
            Ok(f) => {
                let verdict = |m: Option<bool>| match m {
                    None => "no verdict",
                    Some(true) => "met",
                    Some(false) => "MISSED",
                };
                format!(
                    "[slo] {} → {}; unserved (failed + unfinished) {} → {}; p99 TTFT {}; p99 TPOT {}; p99 ITL {}; p99 TBT {}; attainment {}; goodput {} req/s; GPUs {} → {}",
                    verdict(base.slo_met),
                    verdict(f.slo_met),
                    base.unserved(),
                    f.unserved(),
                    change(base.ttft_p99_ms, f.ttft_p99_ms, "ms"),
                    change(base.tpot_p99_ms, f.tpot_p99_ms, "ms"),
                    change(base.itl_p99_ms, f.itl_p99_ms, "ms"),
                    change(base.tbt_p99_ms, f.tbt_p99_ms, "ms"),
                    change(base.attainment, f.attainment, "%"),
                    change(Some(base.goodput_rps), Some(f.goodput_rps), ""),
                    base.gpus,
                    f.gpus
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(met: Option<bool>, unserved: u64, goodput: f64, gpus: u32) -> RunFigures {
        RunFigures {
            gpus,
            unfinished: unserved,
            slo_met: met,
            goodput_rps: goodput,
            ..RunFigures::default()
        }
    }

    #[test]
    fn levers_rank_by_verdict_then_unserved_then_goodput() {
        let mut v = [
            Ok(figures(Some(false), 0, 9.0, 8)),
            Err("invalid".to_string()),
            Ok(figures(Some(true), 0, 8.0, 12)),
            Ok(figures(Some(false), 5, 9.5, 8)),
            Ok(figures(Some(false), 0, 9.5, 8)),
        ];
        v.sort_by_key(rank);
        assert_eq!(v[0].as_ref().unwrap().slo_met, Some(true));
        assert_eq!(v[1].as_ref().unwrap().goodput_rps, 9.5);
        assert_eq!(v[2].as_ref().unwrap().goodput_rps, 9.0);
        assert_eq!(v[3].as_ref().unwrap().unfinished, 5);
        assert!(v[4].is_err());
    }

    #[test]
    fn evidence_names_the_figures_of_the_resource() {
        let p = PoolUsage {
            pool: "prefill".into(),
            role: "prefill".into(),
            instances: 1,
            gpus: 4,
            busy: Some(0.999),
            batch_mean: Some(8.0),
            batch_occupancy: None,
            kv_occupancy: Some(0.02),
            queue_mean: Some(394.8),
            queue_nonempty: Some(0.994),
            link_utilisation: Some(0.01),
            bottleneck: "compute".into(),
        };
        let e = evidence(&p, None, "instance");
        assert!(
            e.contains("forwards ran 99.9 %") && e.contains("394.8"),
            "{e}"
        );
        let d = PoolUsage {
            role: "decode".into(),
            ..p.clone()
        };
        let e = evidence(&d, Some(3.04), "DP rank");
        assert!(e.contains("mean batch of 8.0") && e.contains("3.0×"), "{e}");
        assert!(e.contains("394.8 requests waiting per DP rank"), "{e}");
        // A decode binding on KV with nothing to decode: a prefill backlog holds its pages.
        let k = PoolUsage {
            batch_mean: Some(0.0),
            kv_occupancy: Some(0.767),
            bottleneck: "kv_memory".into(),
            ..d.clone()
        };
        let e = evidence(&k, None, "DP rank");
        assert!(
            e.contains("76.7 % held on average per DP rank with a mean batch of 0.0")
                && e.contains("still waiting for (or in) their prefill"),
            "{e}"
        );
        let p = PoolUsage {
            role: "prefill".into(),
            ..k
        };
        let e = evidence(&p, None, "instance");
        assert!(
            !e.contains("prealloc"),
            "a prefill has no prealloc queue: {e}"
        );
    }
}
