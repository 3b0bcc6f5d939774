//! The PD router: picks a prefill and a decode instance for every request.
//!
//! The router keeps each instance's load (outstanding requests, or `None` while it is down) as
//! the simulation reports changes, in a min-tree over (load, index): an update costs O(log n),
//! a `least_loaded` pick O(1), and the other policies O(1) while every instance is up — not a
//! scan of every instance per arrival.
//!
//! **Health checks** (sgl-router's `--health-check-interval-secs` 60,
//! `--health-failure-threshold` 3, the defaults of `RouterArgs` in
//! `sgl-router/py_src/sglang_router/router_args.py`; `docs/sglang-pd.md` §11.2): an instance whose server died
//! under an exception stays in rotation — the router keeps sending it requests, which fail at
//! once — until [`HEALTH_FAILURE_THRESHOLD`] consecutive checks, every
//! [`HEALTH_CHECK_INTERVAL_NS`] from the router's start, have failed. (An injected
//! `instance_crash` fault takes the instance out at once, as before: see §2.7.)

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::config::RouterPolicy;
use crate::engine::{RngSource, rng_stream};

/// The tree key of a down instance: after every live one.
const DOWN: u64 = u64::MAX;

/// The tree key of instance `i` with `load`: (load, index) packed high to low, so that one
/// integer comparison orders keys as the pair would (a branch-free `min` on the update path).
fn key(load: u32, i: usize) -> u64 {
    (u64::from(load) << 32) | i as u64
}

/// sgl-router's default `--health-check-interval-secs` (60 s), in ns: checks run at every
/// multiple of it from the router's start.
pub const HEALTH_CHECK_INTERVAL_NS: u64 = 60 * crate::engine::NS_PER_S;

/// sgl-router's default `--health-failure-threshold`: consecutive failed checks that take a
/// worker out of rotation.
pub const HEALTH_FAILURE_THRESHOLD: u32 = 3;

/// One role's instances as the router sees them.
#[derive(Default)]
struct Side {
    /// Load of each instance; `None` while it is down (the health check skips it).
    load: Vec<Option<u32>>,
    /// A min-tree over (load, index) of live instances: leaf `i` at `leaves + i`, each inner
    /// node the smaller of its two children, the root at 1. `least_loaded` reads the root.
    tree: Vec<u64>,
    /// Leaves in the tree (a power of two ≥ the instance count).
    leaves: usize,
    /// Instances in rotation (live, or dead but not yet caught by the health check).
    alive: usize,
    /// Round-robin cursor.
    next: usize,
    /// Per instance, failed health checks while its server is dead but still in rotation;
    /// `None` for instances the router sees as they are.
    unseen: Vec<Option<u32>>,
}

impl Side {
    fn new(n: usize) -> Self {
        let leaves = n.next_power_of_two().max(1);
        let mut tree = vec![DOWN; 2 * leaves];
        for i in 0..n {
            tree[leaves + i] = key(0, i);
        }
        for k in (1..leaves).rev() {
            tree[k] = tree[2 * k].min(tree[2 * k + 1]);
        }
        Self {
            load: vec![Some(0); n],
            tree,
            leaves,
            alive: n,
            next: 0,
            unseen: vec![None; n],
        }
    }

    /// Whether instance `i` is in rotation.
    fn routable(&self, i: usize) -> bool {
        self.load[i].is_some() || self.unseen[i].is_some()
    }

    #[inline]
    fn set(&mut self, i: usize, load: Option<u32>) {
        if self.unseen[i].is_some() {
            if load.is_none() {
                // Dead but still in rotation: the router keeps its last known load.
                self.load[i] = None;
                return;
            }
            // Back before the health check gave up on it.
            self.unseen[i] = None;
            self.load[i] = None;
            self.alive -= 1;
        }
        let old = std::mem::replace(&mut self.load[i], load);
        if old == load {
            return;
        }
        self.alive = self.alive + usize::from(load.is_some()) - usize::from(old.is_some());
        self.set_leaf(i, load.map_or(DOWN, |l| key(l, i)));
    }

    /// Leaf `i` becomes `v`; its ancestors follow up to the first that keeps its value (the
    /// ones above it cannot change then).
    #[inline]
    fn set_leaf(&mut self, i: usize, v: u64) {
        let t = &mut self.tree[..];
        let (mut k, mut m) = (self.leaves + i, v);
        t[k] = v;
        // `m` is node k's value: its parent's is the smaller of it and k's sibling.
        while k > 1 {
            m = m.min(t[k ^ 1]);
            k /= 2;
            if t[k] == m {
                break;
            }
            t[k] = m;
        }
    }

    /// Instance `i`'s server died (it is alive now): it stays in rotation until the health
    /// check catches it.
    fn died_unseen(&mut self, i: usize) {
        if self.load[i].is_some() {
            self.unseen[i] = Some(0);
        }
    }

    /// One health-check round: a dead instance still in rotation fails its check; at the
    /// threshold it leaves rotation. Returns whether any dead instance is still in rotation.
    fn health_check(&mut self) -> bool {
        let mut pending = false;
        for i in 0..self.unseen.len() {
            let Some(fails) = self.unseen[i] else {
                continue;
            };
            if fails + 1 >= HEALTH_FAILURE_THRESHOLD {
                self.unseen[i] = None;
                self.alive -= 1;
                self.set_leaf(i, DOWN);
            } else {
                self.unseen[i] = Some(fails + 1);
                pending = true;
            }
        }
        pending
    }

    /// The live instance with the least load, ties to the lowest index.
    fn least_loaded(&self) -> Option<usize> {
        let root = self.tree[1];
        (root != DOWN).then_some((root & u64::from(u32::MAX)) as usize)
    }
}

/// The router of a run.
pub struct Router {
    policy: RouterPolicy,
    rng: ChaCha8Rng,
    sides: [Side; 2],
}

/// Index of the prefill side.
const PREFILL: usize = 0;
/// Index of the decode side.
const DECODE: usize = 1;

impl Router {
    /// A router over `prefills` and `decodes` instances, all up with no load.
    pub fn new(policy: RouterPolicy, seed: u64, prefills: usize, decodes: usize) -> Self {
        Self {
            policy,
            rng: rng_stream(seed, RngSource::Router),
            sides: [Side::new(prefills), Side::new(decodes)],
        }
    }

    /// Prefill instance `i` now has `load` outstanding requests (`None`: it is down).
    pub fn set_prefill(&mut self, i: usize, load: Option<u32>) {
        self.sides[PREFILL].set(i, load);
    }

    /// Decode instance `i` now has `load` outstanding requests (`None`: it is down).
    pub fn set_decode(&mut self, i: usize, load: Option<u32>) {
        self.sides[DECODE].set(i, load);
    }

    /// Decode instance `i`'s server died under an exception: it stays in rotation until the
    /// health check catches it (call before its load is reported as `None`).
    pub fn decode_died_unseen(&mut self, i: usize) {
        self.sides[DECODE].died_unseen(i);
    }

    /// Prefill instance `i`'s server died under an exception (see
    /// [`Router::decode_died_unseen`]).
    pub fn prefill_died_unseen(&mut self, i: usize) {
        self.sides[PREFILL].died_unseen(i);
    }

    /// One health-check round over every instance (at a multiple of
    /// [`HEALTH_CHECK_INTERVAL_NS`]). Returns whether another round can change anything.
    pub fn health_check(&mut self) -> bool {
        let p = self.sides[PREFILL].health_check();
        let d = self.sides[DECODE].health_check();
        p || d
    }

    /// `(prefill index, decode index)` into the role's instance lists; `None` when every
    /// instance of a role is down. The pick may be a dead server the health check has not yet
    /// caught: the caller fails such a request.
    pub fn pick(&mut self) -> Option<(usize, usize)> {
        Some((self.one(PREFILL)?, self.one(DECODE)?))
    }

    fn one(&mut self, role: usize) -> Option<usize> {
        let policy = self.policy;
        let side = &mut self.sides[role];
        let n = side.load.len();
        if side.alive == 0 {
            return None;
        }
        Some(match policy {
            RouterPolicy::RoundRobin => {
                // The next live instance in turn.
                let start = side.next;
                let i = (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&i| side.routable(i))?;
                side.next = (i + 1) % n;
                i
            }
            RouterPolicy::Random => {
                // A uniform draw over the live instances in index order.
                let k = self.rng.random_range(0..side.alive);
                if side.alive == n {
                    k
                } else {
                    (0..n).filter(|&i| side.routable(i)).nth(k)?
                }
            }
            // Ties go to the lowest index, so the choice never depends on anything but loads.
            RouterPolicy::LeastLoaded => side.least_loaded()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(policy: RouterPolicy, p: &[Option<u32>], d: &[Option<u32>]) -> Router {
        let mut r = Router::new(policy, 1, p.len(), d.len());
        for (i, &l) in p.iter().enumerate() {
            r.set_prefill(i, l);
        }
        for (i, &l) in d.iter().enumerate() {
            r.set_decode(i, l);
        }
        r
    }

    #[test]
    fn policies_pick_as_documented() {
        let z = Some(0);
        let mut rr = router(RouterPolicy::RoundRobin, &[z; 3], &[z; 2]);
        let picks: Vec<_> = (0..4).map(|_| rr.pick().unwrap()).collect();
        assert_eq!(picks, vec![(0, 0), (1, 1), (2, 0), (0, 1)]);
        // A down instance is skipped.
        rr.set_prefill(1, None);
        let picks: Vec<_> = (0..3).map(|_| rr.pick().unwrap().0).collect();
        assert_eq!(picks, vec![2, 0, 2]);
        for i in 0..3 {
            rr.set_prefill(i, None);
        }
        assert_eq!(rr.pick(), None);
        let mut ll = router(
            RouterPolicy::LeastLoaded,
            &[Some(2), Some(1), Some(1)],
            &[z, z],
        );
        assert_eq!(ll.pick(), Some((1, 0)));
        ll.set_prefill(1, None);
        assert_eq!(ll.pick(), Some((2, 0)));
        let mut r = router(RouterPolicy::Random, &[z; 4], &[z; 4]);
        let mut seen = [false; 4];
        for _ in 0..100 {
            seen[r.pick().unwrap().0] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    /// A server that died under an exception stays in rotation for three failed health checks
    /// (sgl-router's defaults), then leaves it; a restart before then puts it back as it was.
    #[test]
    fn the_health_check_takes_a_dead_server_out_after_three_failures() {
        let z = Some(0);
        let mut rr = router(RouterPolicy::RoundRobin, &[z], &[z, z]);
        rr.decode_died_unseen(1);
        rr.set_decode(1, None);
        let picks: Vec<_> = (0..4).map(|_| rr.pick().unwrap().1).collect();
        assert_eq!(picks, vec![0, 1, 0, 1], "still routed to the dead server");
        assert!(rr.health_check(), "one failure");
        assert!(rr.health_check(), "two failures");
        assert!(!rr.health_check(), "the third takes it out");
        let picks: Vec<_> = (0..4).map(|_| rr.pick().unwrap().1).collect();
        assert_eq!(picks, vec![0, 0, 0, 0]);
        // least_loaded: the dead server keeps its last load until it is caught.
        let mut ll = router(RouterPolicy::LeastLoaded, &[z], &[Some(1), Some(0)]);
        ll.decode_died_unseen(1);
        ll.set_decode(1, None);
        assert_eq!(ll.pick(), Some((0, 1)));
        ll.set_decode(1, Some(5));
        assert_eq!(ll.pick(), Some((0, 0)), "back up, with its real load");
        assert!(!ll.health_check(), "nothing left to catch");
        // Every decode dead and caught: nowhere to route.
        let mut one = router(RouterPolicy::Random, &[z], &[z]);
        one.decode_died_unseen(0);
        one.set_decode(0, None);
        assert!(one.pick().is_some());
        for _ in 0..3 {
            one.health_check();
        }
        assert_eq!(one.pick(), None);
    }

    #[test]
    fn least_loaded_matches_a_scan_under_random_updates() {
        // The kept order must give exactly what a scan of every instance gives.
        let n = 37;
        let mut r = Router::new(RouterPolicy::LeastLoaded, 3, n, 1);
        let mut load: Vec<Option<u32>> = vec![Some(0); n];
        let mut x: u64 = 99;
        for _ in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (x >> 33) as usize % n;
            let l = ((x >> 20) % 9) as u32;
            let v = if l == 8 { None } else { Some(l) };
            load[i] = v;
            r.set_prefill(i, v);
            let scan = (0..n)
                .filter(|&i| load[i].is_some())
                .min_by_key(|&i| (load[i], i));
            assert_eq!(r.pick().map(|p| p.0), scan);
        }
    }

    #[test]
    fn random_draws_over_live_instances_as_a_scan_would() {
        // Same stream, same draws: the pick equals indexing the list of live instances.
        let mut r = Router::new(RouterPolicy::Random, 5, 6, 1);
        let mut reference = rng_stream(5, RngSource::Router);
        r.set_prefill(2, None);
        let alive = [0, 1, 3, 4, 5];
        for _ in 0..200 {
            let want = alive[reference.random_range(0..alive.len())];
            // The decode side (one instance, all up) draws too.
            let _ = reference.random_range(0..1usize);
            assert_eq!(r.pick().unwrap().0, want);
        }
    }
}
