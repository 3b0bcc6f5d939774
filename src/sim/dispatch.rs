//! The two-level dispatch of a request: the router picks an instance, the instance's DP
//! controller picks its DP rank (`sglang::dp`). Without DP attention an instance is one
//! server and the second level is the identity, so such clusters route exactly as before.

use crate::config::{Role, Scenario};
use crate::sglang::dp::{DpController, Mode, resolve};
use crate::sglang::router::Router;

use super::World;
use crate::vocab::ids::{ColocatedId, DecodeId, PrefillId};

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
        let mut params = sc.router;
        if colocated && params.decode == crate::config::RouterPolicy::CacheAware {
            // The placeholder needs no tree (and draws nothing, as before).
            params.decode = crate::config::RouterPolicy::LeastLoaded;
        }
        Router::new(params, sc.seed, self.instances(FRONT), decodes)
    }

    /// The instance of server `server` on `side`.
    pub(super) fn instance_of(&self, side: usize, server: usize) -> usize {
        self.sides[side].of[server]
    }

    /// The instance of server `server` on `side` when it is the instance's only server (no
    /// DP attention: the instance's load is the server's).
    #[inline]
    pub(super) fn sole_instance_of(&self, side: usize, server: usize) -> Option<usize> {
        let g = &self.sides[side];
        let k = g.of[server];
        (g.ranks[k] == 1).then_some(k)
    }

    /// The servers of instance `k` on `side`.
    fn servers(&self, side: usize, k: usize) -> std::ops::Range<usize> {
        let g = &self.sides[side];
        g.first[k]..g.first[k] + g.ranks[k] as usize
    }
}

impl World<'_> {
    /// `(alive, outstanding)` of server `i` on `side`.
    #[inline]
    fn server_state(&self, side: usize, i: usize) -> (bool, u32) {
        let core = match side {
            FRONT if self.colocated.is_empty() => &self.prefills[PrefillId::from(i)].core,
            FRONT => &self.colocated[ColocatedId::from(i)].core,
            _ => &self.decodes[DecodeId::from(i)].core,
        };
        (core.alive(), core.outstanding)
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

    /// [`World::instance_load`] of server `server`'s instance, without the walk over its
    /// ranks when the server is the whole instance (no DP attention).
    #[inline]
    pub(super) fn server_load(&self, side: usize, server: usize) -> (usize, Option<u32>) {
        match self.dispatch.sole_instance_of(side, server) {
            Some(k) => {
                let (alive, n) = self.server_state(side, server);
                (k, alive.then_some(n))
            }
            None => self.instance_load(side, server),
        }
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{DECODE, FRONT};
    use crate::metrics::NullSink;
    use crate::vocab::ids::{DecodeId, PrefillId};

    /// The load the router hears for a server is its instance's, DP ranks or not, whatever
    /// the servers' states: the shortcut for a one-server instance agrees with the walk.
    #[test]
    fn server_load_is_the_instance_load() {
        for path in [
            "scenarios/bench/foundation-100k.toml",
            "scenarios/moe/deepep-kv-contention.toml",
        ] {
            let sc = crate::scenario::load(Path::new(path), &[]).expect("scenario loads");
            let mut sink = NullSink;
            let mut w = super::World::new(&sc, &mut sink);
            let mut x: u64 = 5;
            for _ in 0..50 {
                for p in 0..w.prefills.len() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let c = &mut w.prefills[PrefillId::from(p)].core;
                    c.set_alive((x >> 60) != 0);
                    c.outstanding = (x >> 40) as u32 % 7;
                }
                for d in 0..w.decodes.len() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let c = &mut w.decodes[DecodeId::from(d)].core;
                    c.set_alive((x >> 60) != 0);
                    c.outstanding = (x >> 40) as u32 % 7;
                }
                for (side, n) in [(FRONT, w.prefills.len()), (DECODE, w.decodes.len())] {
                    for i in 0..n {
                        assert_eq!(w.server_load(side, i), w.instance_load(side, i), "{path}");
                    }
                }
            }
        }
    }
}
