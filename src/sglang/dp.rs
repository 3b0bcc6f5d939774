//! DP attention: how an instance's DP ranks become what the simulation schedules.
//!
//! With `enable_dp_attention`, an sglang instance of `tp_size` GPUs runs `dp_size` attention
//! ranks of `tp_size / dp_size` GPUs each; every rank has its own scheduler, running batch and
//! KV pool (`DataParallelController`, sglang v0.4.6 `managers/data_parallel_controller.py`),
//! and a request lives on exactly one rank: its KV is on that rank's GPUs and its PD transfer
//! runs between the prefill rank's and the decode rank's GPUs (the transfer contract sees the
//! attention TP, `get_attention_tp_size()`). pdsim therefore simulates each DP rank as its own
//! server (its own `Core`: GPUs, pages, batch). The ranks of one instance step in lockstep in sglang (an idle rank runs an idle
//! batch so the MoE layers meet); the step-time model prices that by assuming the ranks carry
//! equal load (`compute::moe`).
//!
//! **Which rank gets a request** is the instance's DP controller's choice
//! (`DataParallelController`, sglang commit 000a3db1 `managers/data_parallel_controller.py`):
//! the router picks an instance (as sgl-router does without `--dp-aware`), then
//! [`DpController::dispatch`] picks the rank by `--load-balance-method`:
//!
//! * `round_robin` (`round_robin_scheduler`): the next rank in turn;
//! * `follow_bootstrap_room` (`follow_bootstrap_room_scheduler`): rank
//!   `bootstrap_room % dp_size` — PD's default on the prefill side, so that the decode can
//!   compute the prefill rank holding a room's KV from the room alone;
//! * `shortest_queue` (`shortest_queue_scheduler` over `DPBudget`): from the ranks' request
//!   counts (`num_reqs` of their load reports, pushed every `--load-watch-interval`, 0.1 s, by
//!   the tokenizer manager's `watch_load_thread`), a budget queue gives every rank below the
//!   most loaded one turns until all are level (`DPBudget.update_budget`); when it is empty the
//!   ranks take one turn each in order (`DPBudget.dispatch`). pdsim reads the counts when a
//!   dispatch is the first after a 0.1 s boundary (the report's instant, within the interval);
//! * `minimum_tokens`: deprecated there (`minimum_tokens_scheduler` logs a warning and falls
//!   back to `round_robin` without PD, `follow_bootstrap_room` with it);
//! * `auto` (`ServerArgs._handle_load_balance_method`): `follow_bootstrap_room` on a PD
//!   prefill server, `round_robin` elsewhere; and on a PD prefill server `round_robin` itself
//!   means `follow_bootstrap_room` ("for backward compatibility").

use std::collections::VecDeque;

use crate::engine::Nanos;
use crate::fabric::GpuId;
use crate::spec::server::LoadBalanceMethod;

/// `--load-watch-interval`'s default (0.1 s), ns: how often the ranks' loads reach the
/// controller for `shortest_queue`.
pub const LOAD_WATCH_INTERVAL_NS: Nanos = 100_000_000;

/// Where a server sits: `Prefill` and `Decode` in a PD cluster, `Plain` without PD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `--disaggregation-mode prefill`.
    Prefill,
    /// `--disaggregation-mode decode`.
    Decode,
    /// `--disaggregation-mode null` (a colocated server).
    Plain,
}

/// The rule a controller follows once `auto`, the PD-prefill `round_robin` and the deprecated
/// `minimum_tokens` are resolved as sglang resolves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The next rank in turn.
    RoundRobin,
    /// `bootstrap_room % dp_size`.
    FollowBootstrapRoom,
    /// The DP budget.
    ShortestQueue,
}

/// sglang's resolution of `method` for a server in `mode`.
pub fn resolve(method: LoadBalanceMethod, mode: Mode) -> Rule {
    use LoadBalanceMethod as M;
    match (method, mode) {
        (M::Auto | M::RoundRobin | M::MinimumTokens, Mode::Prefill) => Rule::FollowBootstrapRoom,
        (M::MinimumTokens, Mode::Decode) => Rule::FollowBootstrapRoom,
        (M::Auto | M::RoundRobin | M::MinimumTokens, _) => Rule::RoundRobin,
        (M::FollowBootstrapRoom, _) => Rule::FollowBootstrapRoom,
        (M::ShortestQueue, _) => Rule::ShortestQueue,
    }
}

/// One instance's DP controller.
#[derive(Clone, Debug)]
pub struct DpController {
    rule: Rule,
    ranks: u32,
    /// `round_robin_counter`.
    next: u32,
    /// `DPBudget.budget_queue`.
    budget: VecDeque<u32>,
    /// The load-watch interval whose report was last applied.
    watched: Option<Nanos>,
}

impl DpController {
    /// The controller of an instance of `ranks` DP ranks following `rule`.
    pub fn new(rule: Rule, ranks: u32) -> Self {
        Self {
            rule,
            ranks: ranks.max(1),
            next: 0,
            budget: VecDeque::new(),
            watched: None,
        }
    }

    /// The rank for a request with `room` at `now` (ns); `load(rank)` is a rank's request
    /// count (`num_reqs`), read for `shortest_queue` once per load-watch interval.
    pub fn dispatch(&mut self, room: u64, now: Nanos, load: impl Fn(u32) -> u32) -> u32 {
        match self.rule {
            Rule::RoundRobin => {
                let r = self.next;
                self.next = (self.next + 1) % self.ranks;
                r
            }
            Rule::FollowBootstrapRoom => (room % u64::from(self.ranks)) as u32,
            Rule::ShortestQueue => {
                let interval = now / LOAD_WATCH_INTERVAL_NS;
                if self.watched != Some(interval) {
                    self.watched = Some(interval);
                    let loads: Vec<u32> = (0..self.ranks).map(load).collect();
                    self.update_budget(loads);
                }
                if self.budget.is_empty() {
                    self.budget.extend(0..self.ranks);
                }
                self.budget.pop_front().expect("just filled")
            }
        }
    }

    /// `DPBudget.update_budget` with every rank's report in (`SGLANG_DATA_PARALLEL_BUDGET_INTERVAL`
    /// taken as 1: every report applies): the queue is rebuilt so that the least loaded ranks
    /// take turns, level by level, until all match the most loaded.
    fn update_budget(&mut self, mut num_reqs: Vec<u32>) {
        self.budget.clear();
        while num_reqs.iter().any(|&x| x != num_reqs[0]) {
            let min = *num_reqs.iter().min().expect("non-empty");
            let second = *num_reqs
                .iter()
                .filter(|&&x| x > min)
                .min()
                .expect("not all equal");
            let at_min: Vec<u32> = (0..num_reqs.len() as u32)
                .filter(|&r| num_reqs[r as usize] == min)
                .collect();
            // Python's `[ranks] * n`: the whole list, n times over.
            for _ in 0..second - min {
                self.budget.extend(at_min.iter().copied());
            }
            for &r in &at_min {
                num_reqs[r as usize] = second;
            }
        }
    }
}

/// The GPUs of each DP rank of an instance placed on `gpus` (rank order), each rank taking
/// `gpus.len() / dp` consecutive GPUs: sglang's attention TP groups are consecutive ranks.
pub fn rank_gpus(gpus: &[GpuId], dp: u32) -> Vec<Vec<GpuId>> {
    let dp = dp.max(1) as usize;
    let per = (gpus.len() / dp).max(1);
    gpus.chunks(per).map(<[GpuId]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_resolves_auto_and_the_deprecated_names_by_mode() {
        use LoadBalanceMethod as M;
        assert_eq!(resolve(M::Auto, Mode::Prefill), Rule::FollowBootstrapRoom);
        assert_eq!(resolve(M::Auto, Mode::Decode), Rule::RoundRobin);
        assert_eq!(resolve(M::Auto, Mode::Plain), Rule::RoundRobin);
        // PD prefill: legacy round_robin means bootstrap-room routing.
        assert_eq!(
            resolve(M::RoundRobin, Mode::Prefill),
            Rule::FollowBootstrapRoom
        );
        assert_eq!(resolve(M::RoundRobin, Mode::Decode), Rule::RoundRobin);
        assert_eq!(
            resolve(M::MinimumTokens, Mode::Decode),
            Rule::FollowBootstrapRoom
        );
        assert_eq!(resolve(M::MinimumTokens, Mode::Plain), Rule::RoundRobin);
        assert_eq!(resolve(M::ShortestQueue, Mode::Decode), Rule::ShortestQueue);
        assert_eq!(
            resolve(M::FollowBootstrapRoom, Mode::Decode),
            Rule::FollowBootstrapRoom
        );
    }

    #[test]
    fn round_robin_and_bootstrap_room_dispatch_as_sglang_does() {
        let mut rr = DpController::new(Rule::RoundRobin, 3);
        let got: Vec<u32> = (0..7).map(|_| rr.dispatch(99, 0, |_| 0)).collect();
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2, 0]);
        let mut room = DpController::new(Rule::FollowBootstrapRoom, 4);
        let rooms = [0u64, 5, 10, 15, 7_000_000_000_000_000_003];
        let got: Vec<u32> = rooms.iter().map(|&r| room.dispatch(r, 0, |_| 0)).collect();
        assert_eq!(got, vec![0, 1, 2, 3, 3]);
    }

    #[test]
    fn shortest_queue_levels_the_ranks_from_their_reported_loads() {
        // Loads [3, 1, 1, 0]: rank 3 gets one turn to reach 1, then ranks 1, 2, 3 take two
        // rounds to reach 3 (`[1, 2, 3] * 2`), as `DPBudget.update_budget` builds it; then the
        // queue is empty and every rank takes a turn in order.
        let loads = [3u32, 1, 1, 0];
        let mut c = DpController::new(Rule::ShortestQueue, 4);
        let got: Vec<u32> = (0..11)
            .map(|_| c.dispatch(0, 5, |r| loads[r as usize]))
            .collect();
        assert_eq!(got, vec![3, 1, 2, 3, 1, 2, 3, 0, 1, 2, 3]);
        // Level loads leave the queue empty: plain turns. A new interval re-reads the loads.
        let mut c = DpController::new(Rule::ShortestQueue, 2);
        assert_eq!(c.dispatch(0, 0, |_| 4), 0);
        assert_eq!(
            c.dispatch(0, 1, |r| [0, 9][r as usize]),
            1,
            "same interval: no re-read"
        );
        assert_eq!(
            c.dispatch(0, LOAD_WATCH_INTERVAL_NS, |r| [0, 2][r as usize]),
            0
        );
        assert_eq!(
            c.dispatch(0, LOAD_WATCH_INTERVAL_NS, |r| [0, 2][r as usize]),
            0
        );
        assert_eq!(
            c.dispatch(0, LOAD_WATCH_INTERVAL_NS, |r| [0, 2][r as usize]),
            0
        );
        assert_eq!(
            c.dispatch(0, LOAD_WATCH_INTERVAL_NS, |r| [0, 2][r as usize]),
            1
        );
    }

    #[test]
    fn ranks_take_consecutive_gpus() {
        let gpus: Vec<GpuId> = (0..16).map(|g| GpuId::from_global(g, 8)).collect();
        let r = rank_gpus(&gpus, 4);
        assert_eq!(r.len(), 4);
        assert_eq!(r[1], gpus[4..8].to_vec());
        assert_eq!(rank_gpus(&gpus, 16)[15], vec![gpus[15]]);
        assert_eq!(rank_gpus(&gpus, 1)[0], gpus);
    }
}
