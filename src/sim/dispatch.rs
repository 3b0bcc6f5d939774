//! The two-level dispatch of a request: the router picks an instance, the instance's DP
//! controller picks its DP rank (`sglang::dp`). Without DP attention an instance is one
//! server and the second level is the identity, so such clusters route exactly as before.

use crate::config::{Role, Scenario};
use crate::sglang::dp::{DpController, Mode, resolve};
use crate::sglang::router::Router;

use super::World;
use super::ids::{ColocatedId, DecodeId, PrefillId};

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

/// The router's sides: `[prefill or colocated, decode]`.
#[derive(Default)]
pub(super) struct Dispatch {
    sides: [Groups; 2],
}

/// Which side: prefill or colocated servers.
pub(super) const FRONT: usize = 0;
/// Which side: decode servers.
pub(super) const DECODE: usize = 1;

impl Dispatch {
    /// The groups of `sc`'s pools, servers numbered per side in pool order as `World::new`
    /// creates them.
    pub(super) fn new(sc: &Scenario) -> Self {
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
    pub(super) fn instances(&self, side: usize) -> usize {
        self.sides[side].first.len()
    }

    /// The router over the instances (its DP controllers pick the ranks). A colocated
    /// cluster's router picks one server: its "prefill" side is the servers, its "decode"
    /// side a single always-live placeholder.
    pub(super) fn router(&self, sc: &Scenario, colocated: bool) -> Router {
        let decodes = if colocated { 1 } else { self.instances(DECODE) };
        Router::new(sc.router, sc.seed, self.instances(FRONT), decodes)
    }

    /// The instance of server `server` on `side`.
    pub(super) fn instance_of(&self, side: usize, server: usize) -> usize {
        self.sides[side].of[server]
    }

    /// The servers of instance `k` on `side`.
    fn servers(&self, side: usize, k: usize) -> std::ops::Range<usize> {
        let g = &self.sides[side];
        g.first[k]..g.first[k] + g.ranks[k] as usize
    }
}

impl World<'_> {
    /// `(alive, outstanding)` of server `i` on `side`.
    fn server_state(&self, side: usize, i: usize) -> (bool, u32) {
        let core = match side {
            FRONT if self.colocated.is_empty() => &self.prefills[PrefillId::from(i)].core,
            FRONT => &self.colocated[ColocatedId::from(i)].core,
            _ => &self.decodes[DecodeId::from(i)].core,
        };
        (core.alive, core.outstanding)
    }

    /// The load the router sees for the instance of server `server` on `side`: its live
    /// ranks' outstanding requests, `None` when every rank is down. Returns the instance too.
    pub(super) fn instance_load(&self, side: usize, server: usize) -> (usize, Option<u32>) {
        let k = self.dispatch.instance_of(side, server);
        let mut load = None;
        for i in self.dispatch.servers(side, k) {
            let (alive, n) = self.server_state(side, i);
            if alive {
                load = Some(load.unwrap_or(0) + n);
            }
        }
        (k, load)
    }

    /// The server of instance `k` on `side` that gets a request with bootstrap room `room`:
    /// its DP controller's rank; a rank that is down passes the request to the next live
    /// one (sglang's instance would be down with it; pdsim's ranks crash alone).
    pub(super) fn pick_rank(&mut self, side: usize, k: usize, room: u64) -> usize {
        let now = self.q.now();
        let servers = self.dispatch.servers(side, k);
        let base = servers.start;
        let n = servers.len();
        if n == 1 {
            // No DP attention: the instance is its server (and no controller state moves).
            return base;
        }
        let loads: Vec<u32> = servers.map(|i| self.server_state(side, i).1).collect();
        let rank =
            self.dispatch.sides[side].ctl[k].dispatch(room, now, |r| loads[r as usize]) as usize;
        (0..n)
            .map(|j| base + (rank + j) % n)
            .find(|&i| self.server_state(side, i).0)
            .unwrap_or(base + rank)
    }
}
