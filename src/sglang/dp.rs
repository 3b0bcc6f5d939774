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

use crate::config::{Role, Scenario};
use crate::engine::Nanos;
use crate::fabric::GpuId;
use crate::sglang::router::Router;
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

/// One side of the router (prefill or colocated servers; decode servers): which instance
/// each server belongs to, and each instance's servers and controller.
#[derive(Default)]
struct Groups {
    /// Instance of each server.
    of: Vec<usize>,
    /// First server of each instance.
    first: Vec<usize>,
    /// DP ranks (servers) of each instance.
    ranks: Vec<u32>,
    /// Each instance's DP controller.
    ctl: Vec<DpController>,
}

/// The two-level dispatch of a request: the router picks an instance (`sglang::router`), the
/// instance's DP controller ([`DpController`]) picks its rank. Without DP attention an
/// instance is one server and the second level is the identity. The router's sides:
/// `[prefill or colocated, decode]`, each server numbered per side in pool order.
#[derive(Default)]
pub struct Dispatch {
    sides: [Groups; 2],
}

/// Which side: prefill or colocated servers.
pub const FRONT: usize = 0;
/// Which side: decode servers.
pub const DECODE: usize = 1;

impl Dispatch {
    /// The groups of `sc`'s pools, servers numbered per side in pool order as `World::new`
    /// creates them (`assemble`).
    pub fn new(sc: &Scenario) -> Self {
        let mut d = Self::default();
        for pool in &sc.pools {
            let (side, mode) = match pool.role {
                Role::Prefill => (FRONT, Mode::Prefill),
                Role::Decode => (DECODE, Mode::Decode),
                Role::Colocated => (FRONT, Mode::Plain),
            };
            let ranks = pool.parallel.dp_ranks();
            let rule = resolve(pool.parallel.load_balance_method, mode);
            let g = &mut d.sides[side];
            for _ in 0..pool.instances {
                let k = g.first.len();
                g.first.push(g.of.len());
                g.ranks.push(ranks);
                g.ctl.push(DpController::new(rule, ranks));
                g.of.extend(std::iter::repeat_n(k, ranks as usize));
            }
        }
        d
    }

    /// Instances on `side` (what the router chooses among).
    fn instances(&self, side: usize) -> usize {
        self.sides[side].first.len()
    }

    /// The router over the instances (its DP controllers pick the ranks). A colocated
    /// cluster's router picks one server: its "prefill" side is the servers, its "decode"
    /// side a single always-live placeholder.
    pub fn router(&self, sc: &Scenario, colocated: bool) -> Router {
        let decodes = if colocated { 1 } else { self.instances(DECODE) };
        let mut params = sc.router;
        if colocated && params.decode == crate::config::RouterPolicy::CacheAware {
            // The placeholder needs no tree (and draws nothing, as before).
            params.decode = crate::config::RouterPolicy::LeastLoaded;
        }
        Router::new(params, sc.seed, self.instances(FRONT), decodes)
    }

    /// The instance of server `server` on `side`.
    pub fn instance_of(&self, side: usize, server: usize) -> usize {
        self.sides[side].of[server]
    }

    /// The instance of server `server` on `side` when it is the instance's only server (no
    /// DP attention: the instance's load is the server's).
    #[inline]
    fn sole_instance_of(&self, side: usize, server: usize) -> Option<usize> {
        let g = &self.sides[side];
        let k = g.of[server];
        (g.ranks[k] == 1).then_some(k)
    }

    /// The servers of instance `k` on `side`.
    fn servers(&self, side: usize, k: usize) -> std::ops::Range<usize> {
        let g = &self.sides[side];
        g.first[k]..g.first[k] + g.ranks[k] as usize
    }

    /// The load the router sees for the instance of server `server` on `side`: its live
    /// ranks' outstanding requests, `None` when every rank is down (`state(i)`: whether
    /// server `i` of the side is alive, and its outstanding requests). Returns the instance
    /// too.
    pub fn instance_load(
        &self,
        side: usize,
        server: usize,
        state: impl Fn(usize) -> (bool, u32),
    ) -> (usize, Option<u32>) {
        let k = self.instance_of(side, server);
        let mut load = None;
        for i in self.servers(side, k) {
            let (alive, n) = state(i);
            if alive {
                load = Some(load.unwrap_or(0) + n);
            }
        }
        (k, load)
    }

    /// [`Dispatch::instance_load`] of server `server`'s instance, without the walk over its
    /// ranks when the server is the whole instance (no DP attention).
    #[inline(always)]
    pub fn server_load(
        &self,
        side: usize,
        server: usize,
        state: impl Fn(usize) -> (bool, u32),
    ) -> (usize, Option<u32>) {
        match self.sole_instance_of(side, server) {
            Some(k) => {
                let (alive, n) = state(server);
                (k, alive.then_some(n))
            }
            None => self.instance_load(side, server, state),
        }
    }

    /// The server of instance `k` on `side` that gets a request with bootstrap room `room`
    /// at `now`: its DP controller's rank; a rank that is down passes the request to the next
    /// live one (sglang's instance would be down with it; pdsim's ranks crash alone).
    /// `state` as for [`Dispatch::instance_load`].
    // Inlinable across codegen units, whatever modules the crate gains (issue 39's callgrind:
    // left to the partitioning it was called out of line, +2 M instructions on the 30k case).
    #[inline]
    pub fn pick_rank(
        &mut self,
        side: usize,
        k: usize,
        room: u64,
        now: Nanos,
        state: impl Fn(usize) -> (bool, u32),
    ) -> usize {
        let servers = self.servers(side, k);
        let base = servers.start;
        let n = servers.len();
        if n == 1 {
            // No DP attention: the instance is its server (and no controller state moves).
            return base;
        }
        let loads: Vec<u32> = servers.map(|i| state(i).1).collect();
        let rank = self.sides[side].ctl[k].dispatch(room, now, |r| loads[r as usize]) as usize;
        (0..n)
            .map(|j| base + (rank + j) % n)
            .find(|&i| state(i).0)
            .unwrap_or(base + rank)
    }
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
