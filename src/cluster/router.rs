//! The PD router: picks a prefill and a decode instance for every request.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::engine::{RngSource, rng_stream};
use crate::scenario::RouterPolicy;

pub struct Router {
    policy: RouterPolicy,
    rng: ChaCha8Rng,
    next: [usize; 2],
    counts: [usize; 2],
}

impl Router {
    pub fn new(policy: RouterPolicy, seed: u64, prefills: usize, decodes: usize) -> Self {
        Self {
            policy,
            rng: rng_stream(seed, RngSource::Router),
            next: [0, 0],
            counts: [prefills, decodes],
        }
    }

    /// `(prefill index, decode index)` into the role's instance lists, given each instance's
    /// outstanding requests.
    pub fn pick(&mut self, prefill_load: &[u32], decode_load: &[u32]) -> (usize, usize) {
        (self.one(0, prefill_load), self.one(1, decode_load))
    }

    fn one(&mut self, role: usize, load: &[u32]) -> usize {
        let n = self.counts[role];
        match self.policy {
            RouterPolicy::RoundRobin => {
                let i = self.next[role];
                self.next[role] = (i + 1) % n;
                i
            }
            RouterPolicy::Random => self.rng.random_range(0..n),
            // Ties go to the lowest index, so the choice never depends on anything but loads.
            RouterPolicy::LeastLoaded => (0..n).min_by_key(|&i| (load[i], i)).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pick_as_documented() {
        let mut rr = Router::new(RouterPolicy::RoundRobin, 1, 3, 2);
        let picks: Vec<_> = (0..4).map(|_| rr.pick(&[0; 3], &[0; 2])).collect();
        assert_eq!(picks, vec![(0, 0), (1, 1), (2, 0), (0, 1)]);
        let mut ll = Router::new(RouterPolicy::LeastLoaded, 1, 3, 2);
        assert_eq!(ll.pick(&[2, 1, 1], &[0, 0]), (1, 0));
        let mut r = Router::new(RouterPolicy::Random, 1, 4, 4);
        let mut seen = [false; 4];
        for _ in 0..100 {
            seen[r.pick(&[0; 4], &[0; 4]).0] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
