//! Dead transfer queues: which (rank, queue) workers a pair's error killed on each prefill
//! instance, and the healthy decode instances whose rooms hash to them and stall until the
//! waiting timeout (docs/sglang-pd.md §2.4, §11.3).

use super::read::Run;
use super::{instances, plan, secs, worker_killer};
use crate::layout::PairPlan;
use crate::scenario::Scenario;
use crate::vocab::ErrorKind;

/// The dead transfer queues of one prefill instance: every (rank, queue) whose worker a pair's
/// error killed — each prefill rank has its own queues and raises on its own (docs/sglang-pd.md §11.3) — the
/// decode instances whose chunks killed them, and when.
pub(super) struct DeadShard {
    pub(super) prefill: u32,
    /// (prefill rank, queue) of each dead worker, ascending.
    pub(super) lanes: Vec<(u32, u32)>,
    pub(super) culprits: Vec<u32>,
    pub(super) by_ns: Option<u64>,
    pub(super) kind: ErrorKind,
}

impl DeadShard {
    /// `rank 0 queue 1, rank 1 queue 3`.
    pub(super) fn lanes_text(&self) -> String {
        self.lanes
            .iter()
            .map(|(r, q)| format!("rank {r} queue {q}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The (rank, queue) lanes prefill ranks put a room to decode instance `d` on through `plan`.
fn lanes_of(plan: &PairPlan, d: u32, queue_size: u32) -> Vec<(u32, u32)> {
    (0..plan.prefill_layouts().len() as u32)
        .map(|rank| {
            (
                rank,
                crate::sglang::transfer::rank_queue(plan, d, rank, queue_size),
            )
        })
        .collect()
}

/// Every prefill instance's transfer queues whose worker a pair's error killed, from the
/// requests routed to such pairs.
pub(super) fn dead_shards(run: &Run, sc: &Scenario) -> Vec<DeadShard> {
    let names = instances(sc);
    let mut out: Vec<DeadShard> = Vec::new();
    for (&(p, d), c) in &run.per_pair {
        let (Some(pp), Some(dp)) = (names.get(p as usize), names.get(d as usize)) else {
            continue;
        };
        let Some(pl) = plan(sc, pp.0, dp.0) else {
            continue;
        };
        let Some(e) = worker_killer(pl) else {
            continue;
        };
        let lanes = lanes_of(pl, d, sc.sglang.queue_size);
        match out.iter_mut().find(|s| s.prefill == p && s.kind == e.kind) {
            Some(s) => {
                s.culprits.push(d);
                s.lanes.extend(lanes);
                s.lanes.sort_unstable();
                s.lanes.dedup();
                s.by_ns = match (s.by_ns, c.first_prefill_end_ns) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            None => out.push(DeadShard {
                prefill: p,
                lanes,
                culprits: vec![d],
                by_ns: c.first_prefill_end_ns,
                kind: e.kind,
            }),
        }
    }
    out
}

/// The knock-on of dead queues: per prefill, the healthy decode instances one of whose lanes
/// is dead (a chunk completes only when every rank has sent its part).
pub(super) fn knock_on(
    run: &Run,
    sc: &Scenario,
    dead: &[DeadShard],
    kind: ErrorKind,
) -> Vec<String> {
    let names = instances(sc);
    let mut lines = Vec::new();
    for s in dead.iter().filter(|s| s.kind == kind) {
        let culprits: Vec<String> = s.culprits.iter().map(|d| d.to_string()).collect();
        lines.push(format!(
            "prefill instance {} ({}): the transfer workers of {} died{} on the first chunk for decode instance {} — every later chunk hashed to those queues waits in WaitingForInput until the waiting timeout ({}).",
            s.prefill,
            names[s.prefill as usize].1,
            s.lanes_text(),
            s.by_ns.map_or(String::new(), |t| format!(" by t = {}", secs(t))),
            culprits.join(", "),
            secs(sc.sglang.waiting_timeout_ns)
        ));
        for (&(p, d), c) in run.per_pair.range((s.prefill, 0)..=(s.prefill, u32::MAX)) {
            debug_assert_eq!(p, s.prefill);
            if s.culprits.contains(&d) {
                continue;
            }
            let Some(pl) = plan(sc, names[p as usize].0, names[d as usize].0) else {
                continue;
            };
            if worker_killer(pl).is_some() {
                continue;
            }
            let shared: Vec<String> = lanes_of(pl, d, sc.sglang.queue_size)
                .into_iter()
                .filter(|l| s.lanes.contains(l))
                .map(|(r, q)| format!("rank {r} queue {q}"))
                .collect();
            if shared.is_empty() {
                continue;
            }
            let stalled = c.kinds.get("waiting_timeout").copied().unwrap_or(0);
            lines.push(format!(
                "decode instance {d} (pool {}) passes every check with prefill {p}, yet its rooms hash to dead {}: {stalled} of its {} requests through prefill {p} failed with waiting_timeout ({} completed before the workers died).",
                names[d as usize].1,
                shared.join(", "),
                c.routed,
                c.completed
            ));
        }
    }
    lines
}
