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
    /// outstanding requests (`None` for an instance that is down: the router's health check
    /// skips it). `None` when every instance of a role is down.
    pub fn pick(
        &mut self,
        prefill_load: &[Option<u32>],
        decode_load: &[Option<u32>],
    ) -> Option<(usize, usize)> {
        Some((self.one(0, prefill_load)?, self.one(1, decode_load)?))
    }

    fn one(&mut self, role: usize, load: &[Option<u32>]) -> Option<usize> {
        let n = self.counts[role];
        let alive: Vec<usize> = (0..n).filter(|&i| load[i].is_some()).collect();
        if alive.is_empty() {
            return None;
        }
        Some(match self.policy {
            RouterPolicy::RoundRobin => {
                // The next live instance in turn.
                let start = self.next[role];
                let i = (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&i| load[i].is_some())?;
                self.next[role] = (i + 1) % n;
                i
            }
            RouterPolicy::Random => alive[self.rng.random_range(0..alive.len())],
            // Ties go to the lowest index, so the choice never depends on anything but loads.
            RouterPolicy::LeastLoaded => *alive.iter().min_by_key(|&&i| (load[i], i))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pick_as_documented() {
        let z = Some(0);
        let mut rr = Router::new(RouterPolicy::RoundRobin, 1, 3, 2);
        let picks: Vec<_> = (0..4).map(|_| rr.pick(&[z; 3], &[z; 2]).unwrap()).collect();
        assert_eq!(picks, vec![(0, 0), (1, 1), (2, 0), (0, 1)]);
        // A down instance is skipped.
        let picks: Vec<_> = (0..3)
            .map(|_| rr.pick(&[z, None, z], &[z, z]).unwrap().0)
            .collect();
        assert_eq!(picks, vec![2, 0, 2]);
        assert_eq!(rr.pick(&[None; 3], &[z; 2]), None);
        let mut ll = Router::new(RouterPolicy::LeastLoaded, 1, 3, 2);
        assert_eq!(ll.pick(&[Some(2), Some(1), Some(1)], &[z, z]), Some((1, 0)));
        assert_eq!(ll.pick(&[Some(2), None, Some(1)], &[z, z]), Some((2, 0)));
        let mut r = Router::new(RouterPolicy::Random, 1, 4, 4);
        let mut seen = [false; 4];
        for _ in 0..100 {
            seen[r.pick(&[z; 4], &[z; 4]).unwrap().0] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
