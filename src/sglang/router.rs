//! The PD router: picks a prefill and a decode instance for every request.
//!
//! The router keeps each instance's load (outstanding requests, or `None` while it is down) as
//! the simulation reports changes, in a min-tree over (load, index): an update costs O(log n),
//! a `least_loaded` pick O(1), and the other policies O(1) while every instance is up — not a
//! scan of every instance per arrival.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::config::RouterPolicy;
use crate::engine::{RngSource, rng_stream};

/// The tree key of a down instance: after every live one.
const DOWN: (u32, u32) = (u32::MAX, u32::MAX);

/// One role's instances as the router sees them.
#[derive(Default)]
struct Side {
    /// Load of each instance; `None` while it is down (the health check skips it).
    load: Vec<Option<u32>>,
    /// A min-tree over (load, index) of live instances: leaf `i` at `leaves + i`, each inner
    /// node the smaller of its two children, the root at 1. `least_loaded` reads the root.
    tree: Vec<(u32, u32)>,
    /// Leaves in the tree (a power of two ≥ the instance count).
    leaves: usize,
    /// Live instances.
    alive: usize,
    /// Round-robin cursor.
    next: usize,
}

impl Side {
    fn new(n: usize) -> Self {
        let leaves = n.next_power_of_two().max(1);
        let mut tree = vec![DOWN; 2 * leaves];
        for i in 0..n {
            tree[leaves + i] = (0, i as u32);
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
        }
    }

    fn set(&mut self, i: usize, load: Option<u32>) {
        let old = std::mem::replace(&mut self.load[i], load);
        if old == load {
            return;
        }
        self.alive = self.alive + usize::from(load.is_some()) - usize::from(old.is_some());
        let mut k = self.leaves + i;
        self.tree[k] = load.map_or(DOWN, |l| (l, i as u32));
        while k > 1 {
            k /= 2;
            self.tree[k] = self.tree[2 * k].min(self.tree[2 * k + 1]);
        }
    }

    /// The live instance with the least load, ties to the lowest index.
    fn least_loaded(&self) -> Option<usize> {
        let root = self.tree[1];
        (root != DOWN).then_some(root.1 as usize)
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

    /// `(prefill index, decode index)` into the role's instance lists; `None` when every
    /// instance of a role is down.
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
                    .find(|&i| side.load[i].is_some())?;
                side.next = (i + 1) % n;
                i
            }
            RouterPolicy::Random => {
                // A uniform draw over the live instances in index order.
                let k = self.rng.random_range(0..side.alive);
                if side.alive == n {
                    k
                } else {
                    (0..n).filter(|&i| side.load[i].is_some()).nth(k)?
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
