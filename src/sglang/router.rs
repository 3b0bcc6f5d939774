//! The PD router: picks a prefill and a decode instance for every request.
//!
//! **Policies** are sgl-model-gateway's (`sgl-model-gateway/src/policies/`, sgl-project/sglang
//! b93974f), one per side (`--prefill-policy` / `--decode-policy`, else `--policy`):
//!
//! - `cache_aware` (`CacheAwarePolicy::select_worker`, the gateway's default): with `min` and
//!   `max` the least and most outstanding requests over the side's instances, the load is
//!   *imbalanced* when `max − min > balance_abs_threshold` **and** `max > min ×
//!   balance_rel_threshold` (in `f32`, as the router computes it). Imbalanced: the least loaded
//!   instance (`select_worker_min_load`; the request still enters the tree). Balanced: the
//!   longest prefix match over the router's own approximate tree ([`ApproxTree`]); a match rate
//!   (matched ÷ prompt) strictly above `cache_threshold` goes to the instance the match names,
//!   anything else to the least loaded instance; then the request enters the tree under the
//!   chosen instance. If the named instance is out of rotation the router falls back to the
//!   first one in rotation and inserts nothing. Every `eviction_interval_secs` from the
//!   router's start the tree drops each instance's least recently used leaves above
//!   `max_tree_size` characters (the gateway's eviction thread; here applied at the first pick
//!   after each period, which is the same since nothing else touches the tree in between).
//!   A request without prefix identity (no `hash_ids`) is text no other request shares: it
//!   matches nothing, so it goes to the least loaded instance; pdsim does not insert it, which
//!   changes no later decision (nothing can ever match it).
//! - `power_of_two` (`PowerOfTwoPolicy::select_worker`): two distinct instances in rotation
//!   drawn at random (`i`, then `(i + 1 + r) mod n`), the first unless the second has
//!   strictly fewer outstanding requests.
//! - `round_robin`, `random`, and pdsim's `least_loaded` as before.
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
//! `instance_crash` fault takes the instance out at once, as before: see docs/sglang-pd.md §2.7.)

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::approx_tree::ApproxTree;
use crate::config::{CacheAwareParams, RouterParams, RouterPolicy};
use crate::engine::{EventQueue, Nanos, RngSource, rng_stream};
use crate::metrics::summary::RouterDecisions;
use crate::vocab::ErrorKind;
use crate::vocab::event::Event;
use crate::vocab::ids::PrefillId;

use super::{Core, Failure};

/// sgl-model-gateway's PD router streams decode's tokens only once the prefill's HTTP
/// response is in (`pd_router.rs::execute_dual_dispatch_internal`, a `tokio::join!` of both
/// responses; sglang issue #22853, PRs #22856 / #24812 closed unmerged): the first token a
/// client sees waits for `response_ns` (0: no hold-back). Tokens decode produced meanwhile
/// reach the client with it; a request decode ended before then ends for its client then too
/// (its first token never after its last).
pub fn hold_back(row: &mut crate::vocab::RequestRow, response_ns: Nanos) {
    if response_ns == 0 {
        return;
    }
    if let Some(first) = row.first_token_ns.as_mut() {
        *first = (*first).max(response_ns);
        if let Some(finish) = row.finish_ns.as_mut() {
            *finish = (*finish).max(*first);
        }
    }
}

/// When the health-check round after `now` runs, ns: rounds run at every multiple of
/// [`HEALTH_CHECK_INTERVAL_NS`] from the router's start, and one at `now` itself has run.
pub fn next_health_check(now: Nanos) -> Nanos {
    (now / HEALTH_CHECK_INTERVAL_NS + 1) * HEALTH_CHECK_INTERVAL_NS
}

/// Why a request the router sent to prefill `p` (`prefill`) and `decode` fails at once: one
/// of them is a server that died under an exception and that the health check has not yet
/// taken out of rotation (`peer_lost`: the peer is gone; `server_crashed` is for what the
/// server held when it died). `None` when both are up.
pub fn dead_pick(p: PrefillId, prefill: &Core, decode: &Core) -> Option<Failure> {
    let dead = if !decode.alive() {
        format!(
            "decode server {}",
            super::transfer::host_of(decode.instance)
        )
    } else if !prefill.alive() {
        format!("prefill server {}", super::heartbeat::bootstrap_addr(p))
    } else {
        return None;
    };
    Some(Failure::new(
        ErrorKind::PeerLost,
        format!(
            "The router sent the request to {dead}, which is dead: its health check has not yet taken it out of rotation"
        ),
    ))
}

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

/// `cache_aware`'s state on one side.
struct CacheAware {
    params: CacheAwareParams,
    tree: ApproxTree,
    /// A max-tree over (load, index) mirroring the side's min-tree (live instances; down
    /// ones are 0 and never the maximum over live ones that matter, see `max_load`).
    max: Vec<u64>,
    /// When the next eviction round is due, ns.
    next_eviction_ns: Nanos,
    decisions: RouterDecisions,
}

/// One role's instances as the router sees them.
#[derive(Default)]
struct Side {
    /// This side's policy.
    policy: RouterPolicy,
    /// `cache_aware`'s tree, counters and max-tree (`None` under any other policy).
    cache: Option<Box<CacheAware>>,
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
            policy: RouterPolicy::default(),
            cache: None,
            load: vec![Some(0); n],
            tree,
            leaves,
            alive: n,
            next: 0,
            unseen: vec![None; n],
        }
    }

    /// This side under `policy`.
    fn with_policy(mut self, policy: RouterPolicy, params: CacheAwareParams) -> Self {
        self.policy = policy;
        if policy == RouterPolicy::CacheAware {
            let mut max = vec![0; 2 * self.leaves];
            for i in 0..self.load.len() {
                max[self.leaves + i] = key(0, i);
            }
            for k in (1..self.leaves).rev() {
                max[k] = max[2 * k].max(max[2 * k + 1]);
            }
            self.cache = Some(Box::new(CacheAware {
                params,
                tree: ApproxTree::new(self.load.len()),
                max,
                next_eviction_ns: params.eviction_interval_ns,
                decisions: RouterDecisions::default(),
            }));
        }
        self
    }

    /// The load the router holds for instance `i` (its last known load while it is dead but
    /// in rotation).
    fn load_of(&self, i: usize) -> u32 {
        (self.tree[self.leaves + i] >> 32) as u32
    }

    /// The most loaded instance's load over the instances in rotation (0 when none).
    fn max_load(&self) -> u32 {
        let c = self
            .cache
            .as_ref()
            .expect("only cache_aware keeps a max-tree");
        (c.max[1] >> 32) as u32
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
        if let Some(c) = self.cache.as_mut() {
            // The max-tree: a down instance is 0, below every instance in rotation but one of
            // load 0 and index 0, whose maximum is 0 either way.
            let t = &mut c.max[..];
            let (mut k, mut m) = (self.leaves + i, if v == DOWN { 0 } else { v });
            t[k] = m;
            while k > 1 {
                m = m.max(t[k ^ 1]);
                k /= 2;
                if t[k] == m {
                    break;
                }
                t[k] = m;
            }
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
    rng: ChaCha8Rng,
    sides: [Side; 2],
    /// Whether a health-check round is scheduled.
    health_check_pending: bool,
}

/// What the router knows of a request when it picks: the prompt's block hashes (empty: no
/// prefix identity) and length.
#[derive(Clone, Copy, Debug)]
pub struct Prompt<'a> {
    /// Mooncake-style 512-token block hashes.
    pub hash_ids: &'a [u64],
    /// Prompt tokens.
    pub input_tokens: u32,
}

/// Index of the prefill side.
const PREFILL: usize = 0;
/// Index of the decode side.
const DECODE: usize = 1;

impl Router {
    /// A router over `prefills` and `decodes` instances, all up with no load.
    pub fn new(params: RouterParams, seed: u64, prefills: usize, decodes: usize) -> Self {
        let ca = params.cache_aware;
        Self {
            rng: rng_stream(seed, RngSource::Router),
            sides: [
                Side::new(prefills).with_policy(params.prefill, ca),
                Side::new(decodes).with_policy(params.decode, ca),
            ],
            health_check_pending: false,
        }
    }

    /// `cache_aware`'s decisions on the prefill and decode sides (`None` for a side under
    /// another policy).
    pub fn decisions(&self) -> [Option<RouterDecisions>; 2] {
        [0, 1].map(|s| self.sides[s].cache.as_ref().map(|c| c.decisions))
    }

    /// Prefill instance `i` now has `load` outstanding requests (`None`: it is down).
    /// Returns `i`.
    pub fn set_prefill(&mut self, i: usize, load: Option<u32>) -> usize {
        self.sides[PREFILL].set(i, load);
        i
    }

    /// Decode instance `i` now has `load` outstanding requests (`None`: it is down). Returns
    /// `i`.
    pub fn set_decode(&mut self, i: usize, load: Option<u32>) -> usize {
        self.sides[DECODE].set(i, load);
        i
    }

    /// Instance `i` of the prefill side (`decode = false`) or the decode side left the router
    /// (an autoscaler drained it): `cache_aware` drops it from its tree, as sgl-model-gateway's
    /// `CacheAwarePolicy::remove_worker` does (`tree.remove_tenant(url)`), so when the slot
    /// joins again its new process is matched as empty. Nothing under other policies.
    pub fn forget_worker(&mut self, decode: bool, i: usize) {
        let side = if decode { DECODE } else { PREFILL };
        if let Some(c) = self.sides[side].cache.as_mut() {
            c.tree.remove_tenant(i);
        }
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

    /// A server died under an exception (after [`Router::decode_died_unseen`] and the crash
    /// it set off): the next health-check round is scheduled, at the next multiple of
    /// [`HEALTH_CHECK_INTERVAL_NS`] after now, unless one already is.
    pub fn arm_health_check(&mut self, q: &mut EventQueue<Event>) {
        if !self.health_check_pending {
            self.health_check_pending = true;
            q.schedule_at(next_health_check(q.now()), Event::RouterHealthCheck);
        }
    }

    /// `Event::RouterHealthCheck`: one round ([`Router::health_check`]); the next is
    /// scheduled one interval on while a dead server is still in rotation.
    pub fn on_health_check(&mut self, q: &mut EventQueue<Event>) {
        if self.health_check() {
            q.schedule_in(HEALTH_CHECK_INTERVAL_NS, Event::RouterHealthCheck);
        } else {
            self.health_check_pending = false;
        }
    }

    /// `(prefill index, decode index)` into the role's instance lists for `prompt` at `now`;
    /// `None` when every instance of a role is down. The pick may be a dead server the health
    /// check has not yet caught: the caller fails such a request.
    pub fn pick(&mut self, prompt: Prompt<'_>, now: Nanos) -> Option<(usize, usize)> {
        Some((
            self.one(PREFILL, prompt, now)?,
            self.one(DECODE, prompt, now)?,
        ))
    }

    fn one(&mut self, role: usize, prompt: Prompt<'_>, now: Nanos) -> Option<usize> {
        let side = &mut self.sides[role];
        let n = side.load.len();
        if side.alive == 0 {
            return None;
        }
        Some(match side.policy {
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
            RouterPolicy::PowerOfTwo => {
                let m = side.alive;
                if m == 1 {
                    return side.least_loaded();
                }
                let a = self.rng.random_range(0..m);
                let b = (a + 1 + self.rng.random_range(0..m - 1)) % m;
                let nth = |k: usize| {
                    if m == n {
                        Some(k)
                    } else {
                        (0..n).filter(|&i| side.routable(i)).nth(k)
                    }
                };
                let (i, j) = (nth(a)?, nth(b)?);
                if side.load_of(i) <= side.load_of(j) {
                    i
                } else {
                    j
                }
            }
            RouterPolicy::CacheAware => side.cache_aware(prompt, now)?,
        })
    }
}

impl Side {
    /// `CacheAwarePolicy::select_worker` (module docs).
    fn cache_aware(&mut self, prompt: Prompt<'_>, now: Nanos) -> Option<usize> {
        let min_i = self.least_loaded()?;
        let (min, max) = (self.load_of(min_i), self.max_load());
        let c = self
            .cache
            .as_mut()
            .expect("a cache_aware side keeps its tree");
        if c.params.eviction_interval_ns > 0 && now >= c.next_eviction_ns {
            c.decisions.evicted += c.tree.evict_by_size(c.params.max_tree_size);
            let period = c.params.eviction_interval_ns;
            c.next_eviction_ns = (now / period + 1) * period;
        }
        c.decisions.peak_load_gap = c.decisions.peak_load_gap.max(max - min);
        let imbalanced = u64::from(max - min) > c.params.balance_abs_threshold
            && (max as f32) > (min as f32 * c.params.balance_rel_threshold);
        let has_text = !prompt.hash_ids.is_empty();
        if imbalanced {
            c.decisions.imbalanced += 1;
            if has_text {
                c.tree
                    .insert(prompt.hash_ids, prompt.input_tokens, min_i as u32, now);
            }
            return Some(min_i);
        }
        let (matched, tenant) = if has_text {
            c.tree.prefix_match(prompt.hash_ids, prompt.input_tokens)
        } else {
            (0, None)
        };
        let rate = if prompt.input_tokens == 0 {
            0.0
        } else {
            matched as f32 / prompt.input_tokens as f32
        };
        let (chosen, affinity) = match tenant {
            Some(t) if rate > c.params.cache_threshold => (t as usize, true),
            _ => (min_i, false),
        };
        if self.load[chosen].is_none() && self.unseen[chosen].is_none() {
            // Out of rotation: the router's "fallback to first healthy worker".
            c.decisions.fallback += 1;
            let (load, unseen) = (&self.load, &self.unseen);
            return (0..load.len()).find(|&i| load[i].is_some() || unseen[i].is_some());
        }
        if affinity {
            c.decisions.affinity += 1;
        } else {
            c.decisions.low_match += 1;
        }
        if has_text {
            c.tree
                .insert(prompt.hash_ids, prompt.input_tokens, chosen as u32, now);
        }
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt without prefix identity.
    const NONE: Prompt<'static> = Prompt {
        hash_ids: &[],
        input_tokens: 100,
    };

    fn router(policy: RouterPolicy, p: &[Option<u32>], d: &[Option<u32>]) -> Router {
        let mut r = Router::new(RouterParams::uniform(policy), 1, p.len(), d.len());
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
        let picks: Vec<_> = (0..4).map(|_| rr.pick(NONE, 0).unwrap()).collect();
        assert_eq!(picks, vec![(0, 0), (1, 1), (2, 0), (0, 1)]);
        // A down instance is skipped.
        rr.set_prefill(1, None);
        let picks: Vec<_> = (0..3).map(|_| rr.pick(NONE, 0).unwrap().0).collect();
        assert_eq!(picks, vec![2, 0, 2]);
        for i in 0..3 {
            rr.set_prefill(i, None);
        }
        assert_eq!(rr.pick(NONE, 0), None);
        let mut ll = router(
            RouterPolicy::LeastLoaded,
            &[Some(2), Some(1), Some(1)],
            &[z, z],
        );
        assert_eq!(ll.pick(NONE, 0), Some((1, 0)));
        ll.set_prefill(1, None);
        assert_eq!(ll.pick(NONE, 0), Some((2, 0)));
        let mut r = router(RouterPolicy::Random, &[z; 4], &[z; 4]);
        let mut seen = [false; 4];
        for _ in 0..100 {
            seen[r.pick(NONE, 0).unwrap().0] = true;
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
        let picks: Vec<_> = (0..4).map(|_| rr.pick(NONE, 0).unwrap().1).collect();
        assert_eq!(picks, vec![0, 1, 0, 1], "still routed to the dead server");
        assert!(rr.health_check(), "one failure");
        assert!(rr.health_check(), "two failures");
        assert!(!rr.health_check(), "the third takes it out");
        let picks: Vec<_> = (0..4).map(|_| rr.pick(NONE, 0).unwrap().1).collect();
        assert_eq!(picks, vec![0, 0, 0, 0]);
        // least_loaded: the dead server keeps its last load until it is caught.
        let mut ll = router(RouterPolicy::LeastLoaded, &[z], &[Some(1), Some(0)]);
        ll.decode_died_unseen(1);
        ll.set_decode(1, None);
        assert_eq!(ll.pick(NONE, 0), Some((0, 1)));
        ll.set_decode(1, Some(5));
        assert_eq!(
            ll.pick(NONE, 0),
            Some((0, 0)),
            "back up, with its real load"
        );
        assert!(!ll.health_check(), "nothing left to catch");
        // Every decode dead and caught: nowhere to route.
        let mut one = router(RouterPolicy::Random, &[z], &[z]);
        one.decode_died_unseen(0);
        one.set_decode(0, None);
        assert!(one.pick(NONE, 0).is_some());
        for _ in 0..3 {
            one.health_check();
        }
        assert_eq!(one.pick(NONE, 0), None);
    }

    /// Rounds run at multiples of 60 s from the start: a server that dies at 7 s is checked
    /// at 60, 120 and 180 s and leaves rotation at the third; one that dies exactly at 60 s
    /// waits for 120 s (the round at 60 s has run). Each round schedules the next while the
    /// dead server is still in rotation, and a second death before the first round adds none.
    #[test]
    fn health_check_rounds_run_on_the_minute_until_the_dead_server_leaves() {
        const S: u64 = crate::engine::NS_PER_S;
        assert_eq!(next_health_check(7 * S), 60 * S);
        assert_eq!(next_health_check(60 * S), 120 * S);
        assert_eq!(next_health_check(0), 60 * S);
        let z = Some(0);
        let mut r = router(RouterPolicy::RoundRobin, &[z], &[z, z, z]);
        let mut q = EventQueue::new();
        q.schedule_at(7 * S, Event::Tick);
        q.pop();
        r.decode_died_unseen(1);
        r.set_decode(1, None);
        r.arm_health_check(&mut q);
        r.decode_died_unseen(2);
        r.set_decode(2, None);
        r.arm_health_check(&mut q);
        assert_eq!(q.len(), 1, "one round pending for both");
        let mut rounds = Vec::new();
        while let Some((t, ev)) = q.pop() {
            assert!(matches!(ev, Event::RouterHealthCheck));
            rounds.push(t / S);
            r.on_health_check(&mut q);
        }
        assert_eq!(rounds, [60, 120, 180]);
        let picks: Vec<_> = (0..3).map(|_| r.pick(NONE, 0).unwrap().1).collect();
        assert_eq!(picks, [0, 0, 0], "both dead servers are out of rotation");
        // Once idle, the next death arms a new round.
        r.arm_health_check(&mut q);
        assert_eq!(q.len(), 1);
    }

    /// A pick on a dead server fails at once with `peer_lost`, naming the dead one (decode
    /// first); two live servers pass.
    #[test]
    fn a_pick_on_a_dead_server_is_peer_lost() {
        let (mut p, mut d) = (
            crate::sglang::testkit::core(8, 16),
            crate::sglang::testkit::core(8, 16),
        );
        d.instance = crate::vocab::ids::InstanceId(3);
        assert_eq!(dead_pick(PrefillId(0), &p, &d), None);
        p.set_alive(false);
        let f = dead_pick(PrefillId(0), &p, &d).unwrap();
        assert_eq!(f.kind, ErrorKind::PeerLost);
        assert!(
            f.message.contains("prefill server 10.0.0.0:8998"),
            "{}",
            f.message
        );
        d.set_alive(false);
        let f = dead_pick(PrefillId(0), &p, &d).unwrap();
        assert!(
            f.message.contains("decode server 10.0.0.3,"),
            "{}",
            f.message
        );
    }

    #[test]
    fn least_loaded_matches_a_scan_under_random_updates() {
        // The kept order must give exactly what a scan of every instance gives.
        let n = 37;
        let mut r = Router::new(RouterParams::uniform(RouterPolicy::LeastLoaded), 3, n, 1);
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
            assert_eq!(r.pick(NONE, 0).map(|p| p.0), scan);
        }
    }

    #[test]
    fn random_draws_over_live_instances_as_a_scan_would() {
        // Same stream, same draws: the pick equals indexing the list of live instances.
        let mut r = Router::new(RouterParams::uniform(RouterPolicy::Random), 5, 6, 1);
        let mut reference = rng_stream(5, RngSource::Router);
        r.set_prefill(2, None);
        let alive = [0, 1, 3, 4, 5];
        for _ in 0..200 {
            let want = alive[reference.random_range(0..alive.len())];
            // The decode side (one instance, all up) draws too.
            let _ = reference.random_range(0..1usize);
            assert_eq!(r.pick(NONE, 0).unwrap().0, want);
        }
    }

    fn cache_aware(p: usize, params: CacheAwareParams) -> Router {
        let rp = RouterParams {
            prefill: RouterPolicy::CacheAware,
            decode: RouterPolicy::RoundRobin,
            cache_aware: params,
        };
        Router::new(rp, 1, p, 1)
    }

    fn prompt(h: &[u64], n: u32) -> Prompt<'_> {
        Prompt {
            hash_ids: h,
            input_tokens: n,
        }
    }

    /// A worker that left the router (an autoscaler drained it) is forgotten by its tree, as
    /// the gateway's `remove_worker` does: its prefix no longer draws affinity when it joins
    /// again, and the other side's tree is untouched.
    #[test]
    fn a_forgotten_worker_draws_no_affinity_when_it_joins_again() {
        let mut r = cache_aware(2, CacheAwareParams::default());
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 0).unwrap().0, 0);
        r.set_prefill(0, Some(1));
        // Remembered: the same prefix goes back to 0 despite its load.
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 1).unwrap().0, 0);
        r.forget_worker(true, 0); // the decode side: nothing (round_robin)
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 2).unwrap().0, 0);
        r.forget_worker(false, 0);
        // Forgotten: no match anywhere, so the least loaded, instance 1.
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 3).unwrap().0, 1);
        let d = r.decisions()[0].unwrap();
        assert_eq!((d.affinity, d.low_match), (2, 2));
    }

    /// The decision rule by hand, at the router's defaults (threshold 0.3, 64, 1.5).
    #[test]
    fn cache_aware_decides_affinity_or_balance_as_the_gateway_does() {
        let mut r = cache_aware(3, CacheAwareParams::default());
        // Empty tree, loads 0: no match → least loaded (lowest index on ties).
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 0), Some((0, 0)));
        r.set_prefill(0, Some(1));
        // Same prefix: 3/3 blocks match on instance 0 → affinity despite its higher load.
        assert_eq!(r.pick(prompt(&[1, 2, 3], 1536), 1).unwrap().0, 0);
        r.set_prefill(0, Some(2));
        // 1 of 4 blocks (25 % ≤ 30 %): least loaded, instance 1.
        assert_eq!(r.pick(prompt(&[1, 7, 8, 9], 2048), 2).unwrap().0, 1);
        r.set_prefill(1, Some(1));
        // 2 of 5 blocks (40 % > 30 %) of [1, 7, …]: instance 1 now holds [1, 7].
        assert_eq!(r.pick(prompt(&[1, 7, 5, 6, 4], 2560), 3).unwrap().0, 1);
        // Exactly at the threshold is not above it: 3 of 10 blocks = 0.3.
        let ten: Vec<u64> = vec![1, 2, 3, 40, 41, 42, 43, 44, 45, 46];
        assert_eq!(r.pick(prompt(&ten, 5120), 4).unwrap().0, 2, "least loaded");
        let d = r.decisions()[0].unwrap();
        assert_eq!((d.affinity, d.low_match, d.imbalanced), (2, 3, 0));
        assert!(r.decisions()[1].is_none(), "decode is round_robin");

        // Imbalance needs both: spread > 64 and max > 1.5 × min.
        let mut r = cache_aware(2, CacheAwareParams::default());
        r.pick(prompt(&[1], 512), 0);
        r.set_prefill(0, Some(200));
        r.set_prefill(1, Some(150)); // spread 50 ≤ 64: balanced → affinity to 0
        assert_eq!(r.pick(prompt(&[1], 512), 1).unwrap().0, 0);
        r.set_prefill(1, Some(134)); // spread 66 > 64, 200 ≤ 1.5 × 134 = 201: balanced
        assert_eq!(r.pick(prompt(&[1], 512), 2).unwrap().0, 0);
        r.set_prefill(1, Some(133)); // 200 > 199.5: imbalanced → least loaded
        assert_eq!(r.pick(prompt(&[1], 512), 3).unwrap().0, 1);
        let d = r.decisions()[0].unwrap();
        assert_eq!((d.affinity, d.imbalanced, d.low_match), (2, 1, 1));
        assert_eq!(d.peak_load_gap, 67);
        // The imbalanced pick entered the tree: instance 1 now holds [1] too, and the match
        // names the node's creator, instance 0.
        r.set_prefill(1, Some(199));
        assert_eq!(r.pick(prompt(&[1], 512), 4).unwrap().0, 0);
    }

    #[test]
    fn cache_aware_without_prefix_identity_is_least_loaded() {
        let mut ca = cache_aware(4, CacheAwareParams::default());
        let mut ll = Router::new(RouterParams::uniform(RouterPolicy::LeastLoaded), 1, 4, 1);
        let mut x: u64 = 7;
        for _ in 0..500 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let i = (x >> 33) as usize % 4;
            let l = Some(((x >> 20) % 90) as u32);
            ca.set_prefill(i, l);
            ll.set_prefill(i, l);
            assert_eq!(ca.pick(NONE, 0).unwrap().0, ll.pick(NONE, 0).unwrap().0);
        }
        let d = ca.decisions()[0].unwrap();
        assert_eq!(d.affinity + d.fallback, 0);
        assert_eq!(d.imbalanced + d.low_match, 500);
    }

    #[test]
    fn cache_aware_falls_back_and_evicts_on_its_period() {
        let params = CacheAwareParams {
            eviction_interval_ns: 10,
            max_tree_size: 512 * crate::sglang::approx_tree::CHARS_PER_TOKEN,
            ..CacheAwareParams::default()
        };
        let mut r = cache_aware(3, params);
        assert_eq!(r.pick(prompt(&[5], 512), 0).unwrap().0, 0);
        // Instance 0 leaves rotation: a match naming it falls back to the first in rotation.
        r.set_prefill(0, None);
        r.set_prefill(1, Some(4));
        assert_eq!(r.pick(prompt(&[5], 512), 1).unwrap().0, 1);
        r.set_prefill(0, Some(0));
        // Instance 0 routes two chains, [5] then [6]; at t = 10 the eviction keeps one block.
        assert_eq!(r.pick(prompt(&[6], 512), 2).unwrap().0, 0);
        assert_eq!(r.pick(prompt(&[6], 512), 10).unwrap().0, 0);
        let d = r.decisions()[0].unwrap();
        assert_eq!((d.fallback, d.evicted), (1, 1));
        // [5] (the older leaf) is gone: no match, least loaded is 0 anyway; load 0 up so the
        // least loaded is 2, and [5] goes there.
        r.set_prefill(0, Some(9));
        assert_eq!(r.pick(prompt(&[5], 512), 11).unwrap().0, 2);
        assert_eq!(r.pick(prompt(&[6], 512), 12).unwrap().0, 0, "[6] stayed");
    }

    #[test]
    fn power_of_two_takes_the_less_loaded_of_two_distinct_draws() {
        let mut r = Router::new(RouterParams::uniform(RouterPolicy::PowerOfTwo), 9, 4, 1);
        let loads = [5u32, 1, 3, 0];
        for (i, &l) in loads.iter().enumerate() {
            r.set_prefill(i, Some(l));
        }
        let mut reference = rng_stream(9, RngSource::Router);
        for _ in 0..300 {
            let a = reference.random_range(0..4usize);
            let b = (a + 1 + reference.random_range(0..3usize)) % 4;
            assert_ne!(a, b);
            let want = if loads[a] <= loads[b] { a } else { b };
            // The decode side has one instance: no draw.
            assert_eq!(r.pick(NONE, 0).unwrap().0, want);
        }
        // The most loaded instance is never chosen over another.
        let mut one = Router::new(RouterParams::uniform(RouterPolicy::PowerOfTwo), 9, 1, 1);
        assert_eq!(one.pick(NONE, 0), Some((0, 0)));
    }

    /// The hold-back moves a client's first token to the prefill's response, and its end
    /// with it when decode finished first; no response (0) or an earlier one changes nothing.
    #[test]
    fn the_hold_back_delays_the_first_token_to_the_prefills_response() {
        let at = |first: Nanos, finish: Nanos| {
            let mut r = crate::vocab::RequestRow::arrived(0, 0, Some((0, 1)), 16, 4);
            (r.first_token_ns, r.finish_ns) = (Some(first), Some(finish));
            r
        };
        let cases = [
            // (first, finish, response) → (first, finish)
            ((10, 40), 25, (25, 40)),
            ((10, 40), 60, (60, 60)),
            ((10, 40), 5, (10, 40)),
            ((10, 40), 0, (10, 40)),
        ];
        for ((first, finish), response, want) in cases {
            let mut r = at(first, finish);
            hold_back(&mut r, response);
            assert_eq!(
                (r.first_token_ns, r.finish_ns),
                (Some(want.0), Some(want.1))
            );
        }
    }
}
