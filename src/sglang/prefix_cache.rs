//! A prefill instance's prefix cache: a radix tree over Mooncake-style block hash chains, with
//! leaf-first LRU eviction.
//!
//! # What it models
//!
//! A trace row carries `hash_ids`, the ids of its prompt's 512-token blocks
//! ([`HASH_BLOCK_TOKENS`]), prefix-chained: equal id ⇒ equal prompt prefix through that block.
//! A request's prompt hits the cache for the longest run of its blocks, from the first, that
//! is cached; those tokens need no prefill compute. The last block of a prompt may be partial,
//! so the hit is `min(matched_blocks × 512, input_tokens)` tokens. After the lookup, the whole
//! prompt's blocks are cached (the prefill computes them), as sglang's radix cache does.
//!
//! # Structure and eviction
//!
//! Blocks form a trie: a node is a block id under its parent block (the root is the empty
//! prefix). Nodes are looked up by `(parent, id)`, so a chain only matches along one path, even
//! if a malformed trace reused an id under another prefix.
//!
//! With a capacity, the least recently used **leaf** is evicted until the cache fits. Every
//! lookup touches the whole matched path, so an ancestor is always at least as recent as its
//! descendants and leaf-first eviction never strands a cached block without its prefix: this
//! is plain LRU over blocks (ties between a block and its ancestors broken deepest-first),
//! which has LRU's inclusion property — a larger capacity never lowers the hit rate.
//! A block occupies a full 512 tokens of capacity even when it is a prompt's partial last block
//! (caches allocate whole blocks).
//!
//! # Determinism and cost
//!
//! Recency is ordered by `(now, call sequence)`, then by node index: never by a hash. The
//! `HashMap` is used for lookup by key only and is never iterated. A lookup costs
//! `O(blocks × log cached_blocks)`.

use std::collections::{BTreeSet, HashMap};

use crate::workload::trace::HASH_BLOCK_TOKENS;

/// No parent: the node hangs under the root (the empty prefix).
const ROOT: u32 = u32::MAX;

/// One cached block.
#[derive(Clone, Debug)]
struct Node {
    /// The block's hash id.
    id: u64,
    /// Parent node index, or [`ROOT`].
    parent: u32,
    /// Cached child blocks.
    children: u32,
    /// Last use: (simulated ns, call sequence).
    used: (u64, u64),
    /// Live requests whose matched prefix runs through this node (sglang's `lock_ref`): a
    /// locked node is never evicted. Only a decode's tree locks (`sglang::decode_radix`);
    /// a prefill's stays 0.
    lock: u32,
}

/// A prefix cache over 512-token blocks. Capacity and counts are in tokens.
#[derive(Debug)]
pub struct PrefixCache {
    /// Most tokens cached (`None`: unbounded), counted as 512 per block.
    capacity_tokens: Option<u64>,
    /// Node slab; freed slots are reused from `free`.
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// (parent, block id) → node; lookup only, never iterated.
    index: HashMap<(u32, u64), u32>,
    /// Evictable nodes (no cached children), least recently used first.
    leaves: BTreeSet<((u64, u64), u32)>,
    /// Blocks cached now.
    blocks: u64,
    /// Calls to [`PrefixCache::lookup_and_insert`], numbering the recency ties.
    lookups: u64,
    hit_tokens: u64,
    input_tokens: u64,
    evicted_blocks: u64,
    /// Blocks some live request has locked (sglang's `protected_size`, in blocks).
    protected: u64,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity_tokens` tokens (whole 512-token blocks), or
    /// unbounded with `None`.
    pub fn new(capacity_tokens: Option<u64>) -> Self {
        Self {
            capacity_tokens,
            nodes: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            leaves: BTreeSet::new(),
            blocks: 0,
            lookups: 0,
            hit_tokens: 0,
            input_tokens: 0,
            evicted_blocks: 0,
            protected: 0,
        }
    }

    /// The prompt tokens of `hash_ids` already cached, as [`PrefixCache::lookup_and_insert`]
    /// would return them, without touching, inserting or counting anything: what sglang's
    /// scheduler knows of a waiting request's prefix before `PrefillAdder` decides on it.
    pub fn peek(&self, hash_ids: &[u64], input_tokens: u32) -> u32 {
        let matched = u64::from(self.peek_blocks(hash_ids));
        let hit = (matched * u64::from(HASH_BLOCK_TOKENS)).min(u64::from(input_tokens));
        u32::try_from(hit).expect("hit ≤ input_tokens, a u32")
    }

    /// Looks up a prompt of `input_tokens` tokens whose blocks are `hash_ids`, at simulated
    /// time `now` (ns), then caches all its blocks, evicting least recently used leaves if over
    /// capacity. Returns the prompt tokens already cached: `min(matched × 512, input_tokens)`
    /// for the `matched` leading blocks found. An empty `hash_ids` (no prefix information)
    /// hits nothing and caches nothing.
    pub fn lookup_and_insert(&mut self, hash_ids: &[u64], input_tokens: u32, now: u64) -> u32 {
        let used = (now, self.lookups);
        self.lookups += 1;
        self.input_tokens += u64::from(input_tokens);

        // Match the longest cached prefix, touching each block on the way.
        let (mut parent, matched) = self.match_touching(hash_ids, used);
        let hit = (matched as u64 * u64::from(HASH_BLOCK_TOKENS)).min(u64::from(input_tokens));
        self.hit_tokens += hit;

        // Cache the rest as a new chain below the last match. Only the chain's end is a leaf,
        // so only it enters the leaf set (one ordered-set update per lookup, not per block).
        let rest = &hash_ids[matched..];
        for (k, &id) in rest.iter().enumerate() {
            parent = self.insert(parent, id, used, k == 0, k + 1 == rest.len());
        }
        self.evict_to_capacity();
        u32::try_from(hit).expect("hit ≤ input_tokens, a u32")
    }

    /// Writes the prompt's blocks without a lookup counted (a store's write of blocks another
    /// instance computed): touches the cached prefix and caches the rest; with `evict`,
    /// least recently used leaves make room as in [`PrefixCache::lookup_and_insert`], without
    /// it, only as many new blocks as fit are written. Returns the blocks newly written.
    pub fn write(&mut self, hash_ids: &[u64], now: u64, evict: bool) -> u64 {
        let used = (now, self.lookups);
        self.lookups += 1;
        let (mut parent, matched) = self.match_touching(hash_ids, used);
        let mut rest = &hash_ids[matched..];
        if !evict && let Some(cap) = self.capacity_tokens {
            let room = (cap / u64::from(HASH_BLOCK_TOKENS)).saturating_sub(self.blocks);
            rest = &rest[..rest.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        }
        for (k, &id) in rest.iter().enumerate() {
            parent = self.insert(parent, id, used, k == 0, k + 1 == rest.len());
        }
        self.evict_to_capacity();
        rest.len() as u64
    }

    /// Leading blocks of `hash_ids` cached, each touched at `now` (a read: LRU recency).
    pub fn touch_prefix(&mut self, hash_ids: &[u64], now: u64) -> u32 {
        let used = (now, self.lookups);
        self.lookups += 1;
        self.match_touching(hash_ids, used).1 as u32
    }

    /// Drops every cached block, as a new process starts with an empty radix cache (a
    /// restart after a crash, a slot an autoscaler launches again). The capacity stays, and
    /// so do the counts of lookups, hits and evictions: they describe the instance over the
    /// run, not one process.
    pub fn forget(&mut self) {
        self.nodes.clear();
        self.free.clear();
        self.index.clear();
        self.leaves.clear();
        self.blocks = 0;
        self.protected = 0;
    }

    /// Leading blocks of `hash_ids` cached (no touch).
    pub fn peek_blocks(&self, hash_ids: &[u64]) -> u32 {
        let mut parent = ROOT;
        let mut matched = 0u32;
        for &id in hash_ids {
            let Some(&node) = self.index.get(&(parent, id)) else {
                break;
            };
            parent = node;
            matched += 1;
        }
        matched
    }

    /// The longest cached prefix of `hash_ids`, each of its blocks touched at `used`: the last
    /// matched node (`ROOT` when none) and the blocks matched.
    #[inline]
    fn match_touching(&mut self, hash_ids: &[u64], used: (u64, u64)) -> (u32, usize) {
        let mut parent = ROOT;
        let mut matched = 0usize;
        for &id in hash_ids {
            let Some(&node) = self.index.get(&(parent, id)) else {
                break;
            };
            self.touch(node, used);
            parent = node;
            matched += 1;
        }
        (parent, matched)
    }

    /// Least recently used leaves go until the cache is within its capacity.
    fn evict_to_capacity(&mut self) {
        if let Some(cap) = self.capacity_tokens {
            while self.blocks * u64::from(HASH_BLOCK_TOKENS) > cap {
                self.evict_lru_leaf();
            }
        }
    }

    /// Marks `node` used at `used`, keeping the leaf set's order right.
    fn touch(&mut self, node: u32, used: (u64, u64)) {
        let n = &mut self.nodes[node as usize];
        if n.children == 0 && n.lock == 0 {
            self.leaves.remove(&(n.used, node));
            self.leaves.insert((used, node));
        }
        n.used = used;
    }

    /// Adds block `id` under `parent`; returns its index. `parent_indexed`: the parent follows
    /// the leaf-set invariant (in the set iff childless), false for a chain node inserted just
    /// before; `leaf`: the new node ends its chain and enters the leaf set.
    fn insert(
        &mut self,
        parent: u32,
        id: u64,
        used: (u64, u64),
        parent_indexed: bool,
        leaf: bool,
    ) -> u32 {
        if parent != ROOT {
            let p = &mut self.nodes[parent as usize];
            if p.children == 0 && parent_indexed {
                // The parent stops being evictable while it has a cached child.
                self.leaves.remove(&(p.used, parent));
            }
            p.children += 1;
        }
        let node = Node {
            id,
            parent,
            children: 0,
            used,
            lock: 0,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 - 1 cached blocks")
            }
        };
        self.index.insert((parent, id), idx);
        if leaf {
            self.leaves.insert((used, idx));
        }
        self.blocks += 1;
        idx
    }

    /// Evicts the least recently used leaf; its parent becomes a leaf if it has no other child
    /// (and no lock). Returns the evicted node's index.
    fn evict_lru_leaf(&mut self) -> u32 {
        let (_, idx) = self
            .leaves
            .pop_first()
            .expect("an over-capacity cache has a leaf");
        let Node { id, parent, .. } = self.nodes[idx as usize];
        self.index.remove(&(parent, id));
        self.free.push(idx);
        self.blocks -= 1;
        self.evicted_blocks += 1;
        if parent != ROOT {
            let p = &mut self.nodes[parent as usize];
            p.children -= 1;
            if p.children == 0 && p.lock == 0 {
                self.leaves.insert((p.used, parent));
            }
        }
        idx
    }

    /// Matches the leading cached blocks of `hash_ids`, touching them at `now`, and locks the
    /// matched path (sglang's `match_prefix` then `inc_lock_ref(last_node)`: every node from
    /// the last matched one up to the root gains a lock). Returns the blocks matched and the
    /// last matched node, the handle [`PrefixCache::unlock`] takes (`None`: nothing matched,
    /// nothing locked). Counts no lookup in the hit figures.
    pub fn match_and_lock(&mut self, hash_ids: &[u64], now: u64) -> (u32, Option<u32>) {
        let used = (now, self.lookups);
        self.lookups += 1;
        let (last, matched) = self.match_touching(hash_ids, used);
        if matched == 0 {
            return (0, None);
        }
        let mut node = last;
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            if n.lock == 0 {
                self.protected += 1;
                if n.children == 0 {
                    self.leaves.remove(&(n.used, node));
                }
            }
            n.lock += 1;
            node = n.parent;
        }
        (matched as u32, Some(last))
    }

    /// Takes back one lock [`PrefixCache::match_and_lock`] put on the path ending at `last`
    /// (sglang's `dec_lock_ref`): a node no request locks any more is evictable again.
    pub fn unlock(&mut self, last: u32) {
        let mut node = last;
        while node != ROOT {
            let n = &mut self.nodes[node as usize];
            debug_assert!(n.lock > 0, "unlocking an unlocked prefix");
            n.lock -= 1;
            if n.lock == 0 {
                self.protected -= 1;
                if n.children == 0 {
                    self.leaves.insert((n.used, node));
                }
            }
            node = n.parent;
        }
    }

    /// The nodes of the path ending at `last`, root side first, onto `out`.
    pub fn path(&self, last: u32, out: &mut Vec<u32>) {
        let at = out.len();
        let mut node = last;
        while node != ROOT {
            out.push(node);
            node = self.nodes[node as usize].parent;
        }
        out[at..].reverse();
    }

    /// Caches every block of `hash_ids` at `now` without eviction or a counted lookup (a
    /// decode inserting a finished request's KV: sglang's `cache_finished_req`); the nodes
    /// it created, in path order, go onto `created`.
    pub fn insert_path(&mut self, hash_ids: &[u64], now: u64, created: &mut Vec<u32>) {
        let used = (now, self.lookups);
        self.lookups += 1;
        let (mut parent, matched) = self.match_touching(hash_ids, used);
        let rest = &hash_ids[matched..];
        for (k, &id) in rest.iter().enumerate() {
            parent = self.insert(parent, id, used, k == 0, k + 1 == rest.len());
            created.push(parent);
        }
    }

    /// Evicts up to `blocks` least recently used unlocked leaves (sglang's `evict`: leaves
    /// first, a parent once its last child went); their indices go onto `evicted`.
    pub fn evict_blocks(&mut self, blocks: u64, evicted: &mut Vec<u32>) {
        for _ in 0..blocks {
            if self.leaves.is_empty() {
                break;
            }
            evicted.push(self.evict_lru_leaf());
        }
    }

    /// Blocks no live request locks (sglang's `evictable_size`, in blocks).
    pub fn evictable_blocks(&self) -> u64 {
        self.blocks - self.protected
    }

    /// Calls to [`PrefixCache::lookup_and_insert`].
    pub fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Prompt tokens found cached, summed over lookups.
    pub fn hit_tokens(&self) -> u64 {
        self.hit_tokens
    }

    /// Prompt tokens looked up, summed over lookups.
    pub fn input_tokens(&self) -> u64 {
        self.input_tokens
    }

    /// Token-weighted hit rate: hit tokens ÷ input tokens (0 before any lookup).
    pub fn hit_rate(&self) -> f64 {
        if self.input_tokens == 0 {
            0.0
        } else {
            self.hit_tokens as f64 / self.input_tokens as f64
        }
    }

    /// Blocks cached now.
    pub fn cached_blocks(&self) -> u64 {
        self.blocks
    }

    /// Blocks evicted so far.
    pub fn evicted_blocks(&self) -> u64 {
        self.evicted_blocks
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::workload::trace::{TraceFormat, TraceRow, read_trace};

    fn trace(name: &str) -> Vec<TraceRow> {
        read_trace(
            &crate::shared_path("traces").join(name),
            TraceFormat::Mooncake,
        )
        .unwrap()
    }

    /// Runs a trace through one cache in arrival order; returns the cache.
    fn replay(rows: &[TraceRow], capacity_tokens: Option<u64>) -> PrefixCache {
        let mut cache = PrefixCache::new(capacity_tokens);
        for r in rows {
            cache.lookup_and_insert(&r.hash_ids, r.input_tokens, r.arrival_ns);
        }
        cache
    }

    #[test]
    fn a_forgotten_cache_starts_empty_and_keeps_its_counts_and_capacity() {
        let mut c = PrefixCache::new(Some(3 * 512));
        c.lookup_and_insert(&[1, 2, 3], 1536, 0);
        assert_eq!(c.lookup_and_insert(&[1, 2, 9], 1536, 1), 1024);
        let evicted = c.evicted_blocks();
        assert_eq!(evicted, 1, "a 3-block capacity holds 1, 2 and one of 3 / 9");
        c.forget();
        assert_eq!(c.cached_blocks(), 0);
        assert_eq!(c.peek(&[1, 2, 9], 1536), 0);
        // A new process: the same prompt misses, and caches again within the capacity.
        assert_eq!(c.lookup_and_insert(&[1, 2, 9], 1536, 2), 0);
        assert_eq!(c.lookup_and_insert(&[4, 5], 1024, 3), 0);
        assert_eq!(
            c.cached_blocks(),
            3,
            "capacity of 3 blocks holds after the forget"
        );
        assert_eq!(c.evicted_blocks(), evicted + 2);
        assert_eq!(c.lookup_and_insert(&[4, 5], 1024, 4), 1024);
        // The counts span both processes: 1,024 hit tokens before, 1,024 after.
        assert_eq!(c.hit_tokens(), 2048);
    }

    #[test]
    fn hits_count_matched_leading_blocks_and_partial_last_blocks() {
        let mut c = PrefixCache::new(None);
        assert_eq!(c.lookup_and_insert(&[1, 2, 3], 1300, 0), 0);
        // Same first two blocks, then a different third: 2 × 512.
        assert_eq!(c.lookup_and_insert(&[1, 2, 9], 1500, 1), 1024);
        // The whole prompt, whose last block is partial: the input length, not 3 × 512.
        assert_eq!(c.lookup_and_insert(&[1, 2, 3], 1300, 2), 1300);
        // A matching id after a miss does not count: prefixes match from the start only.
        assert_eq!(c.lookup_and_insert(&[7, 2, 3], 1300, 3), 0);
        // Nor does an id reused under another parent.
        assert_eq!(c.lookup_and_insert(&[2], 512, 4), 0);
        assert_eq!(c.lookup_and_insert(&[], 100, 5), 0);
        assert_eq!(c.lookups(), 6);
        assert_eq!(c.hit_tokens(), 1024 + 1300);
        assert_eq!(c.input_tokens(), 1300 + 1500 + 1300 + 1300 + 512 + 100);
        // Blocks 1,2,3 / 9 / 7,2,3 / 2 (under the root).
        assert_eq!(c.cached_blocks(), 8);
        assert_eq!(c.evicted_blocks(), 0);
    }

    #[test]
    fn eviction_is_lru_over_leaves_and_keeps_prefixes() {
        // Room for 4 blocks.
        let mut c = PrefixCache::new(Some(4 * 512));
        c.lookup_and_insert(&[1, 2, 3], 1536, 0);
        c.lookup_and_insert(&[1, 5], 1024, 1);
        assert_eq!(c.cached_blocks(), 4);
        // A new chain of 2 evicts two leaves, least recent first: 3 (used at 0), then 2
        // (now a leaf, used at 0). 1 and 5 stay (1 was touched at 1).
        c.lookup_and_insert(&[8, 9], 1024, 2);
        assert_eq!(c.cached_blocks(), 4);
        assert_eq!(c.evicted_blocks(), 2);
        assert_eq!(c.lookup_and_insert(&[1, 5], 1024, 3), 1024);
        assert_eq!(c.lookup_and_insert(&[1, 2, 3], 1536, 4), 512);
        // A prompt bigger than the cache keeps its leading blocks, never a block without its
        // prefix.
        let mut small = PrefixCache::new(Some(2 * 512));
        small.lookup_and_insert(&[1, 2, 3, 4], 2048, 0);
        assert_eq!(small.cached_blocks(), 2);
        assert_eq!(small.lookup_and_insert(&[1, 2, 3, 4], 2048, 1), 1024);
        // Less than a block of capacity caches nothing.
        let mut none = PrefixCache::new(Some(511));
        none.lookup_and_insert(&[1], 512, 0);
        assert_eq!(none.lookup_and_insert(&[1], 512, 1), 0);
        assert_eq!(none.cached_blocks(), 0);
    }

    #[test]
    fn ties_at_the_same_time_follow_call_order() {
        let mut c = PrefixCache::new(Some(2 * 512));
        c.lookup_and_insert(&[1], 512, 5);
        c.lookup_and_insert(&[2], 512, 5);
        c.lookup_and_insert(&[3], 512, 5);
        // Block 1, the first used at t = 5, went first.
        assert_eq!(c.lookup_and_insert(&[2], 512, 5), 512);
        assert_eq!(c.lookup_and_insert(&[3], 512, 5), 512);
        assert_eq!(c.lookup_and_insert(&[1], 512, 5), 0);
    }

    /// The obviously-right reference: every cached prefix path with its last use, eviction by
    /// a scan for the least recent (deepest on ties). Quadratic, fine for a few hundred calls.
    #[test]
    fn matches_a_naive_lru_over_prefix_paths() {
        use std::collections::BTreeMap;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            // SplitMix64: a fixed, dependency-free sequence.
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) % n
        };
        // Ids name paths in a branching-3 tree, so equal id ⇒ equal prefix.
        let mut ids: BTreeMap<Vec<u64>, u64> = BTreeMap::new();
        for cap_blocks in [1u64, 3, 7, 20] {
            let cap = cap_blocks * 512;
            let mut fast = PrefixCache::new(Some(cap));
            let mut naive: BTreeMap<Vec<u64>, (u64, u64)> = BTreeMap::new();
            for call in 0..400u64 {
                let depth = 1 + next(6) as usize;
                let path: Vec<u64> = (0..depth).map(|_| next(3)).collect();
                let chain: Vec<u64> = (1..=depth)
                    .map(|k| {
                        let fresh = ids.len() as u64;
                        *ids.entry(path[..k].to_vec()).or_insert(fresh)
                    })
                    .collect();
                let input = (depth as u32 - 1) * 512 + 1 + next(512) as u32;
                let now = call / 3; // repeated times exercise the call-order tie-break
                let got = fast.lookup_and_insert(&chain, input, now);

                let key = (now, call);
                let matched = (1..=depth)
                    .take_while(|&k| naive.contains_key(&path[..k]))
                    .count();
                for k in 1..=depth {
                    naive.insert(path[..k].to_vec(), key);
                }
                while naive.len() as u64 * 512 > cap {
                    let victim = naive
                        .iter()
                        .min_by_key(|(p, used)| (**used, std::cmp::Reverse(p.len())))
                        .map(|(p, _)| p.clone())
                        .unwrap();
                    naive.remove(&victim);
                }
                let want = (matched as u32 * 512).min(input);
                assert_eq!(got, want, "capacity {cap_blocks} blocks, call {call}");
                assert_eq!(fast.cached_blocks(), naive.len() as u64);
            }
        }
    }

    #[test]
    fn synthetic_trace_reuses_65_percent_of_input_tokens() {
        // Mooncake (FAST'25): 66 %; traces/README.md: ≈65 % with an unbounded cache.
        let c = replay(&trace("synthetic_trace.jsonl"), None);
        println!(
            "synthetic: {:.2} % of input tokens hit",
            100.0 * c.hit_rate()
        );
        assert!((c.hit_rate() - 0.65).abs() <= 0.01, "{}", c.hit_rate());
        assert_eq!(c.lookups(), 3993);
    }

    #[test]
    fn conversation_trace_reuses_about_37_percent_and_runs_fast() {
        // traces/README.md: ≈37 % token-weighted (Mooncake's "cache ratio": 40 %).
        let rows = trace("conversation_trace.jsonl");
        let start = std::time::Instant::now();
        let c = replay(&rows, None);
        let took = start.elapsed();
        println!(
            "conversation: {:.2} % of input tokens hit, {} blocks cached, {took:?} for {} requests",
            100.0 * c.hit_rate(),
            c.cached_blocks(),
            rows.len()
        );
        assert!((c.hit_rate() - 0.37).abs() <= 0.01, "{}", c.hit_rate());
        // Generous even for a debug build; release takes a few ms.
        assert!(took.as_secs_f64() < 5.0, "{took:?}");
    }

    #[test]
    fn hit_rate_never_rises_as_capacity_shrinks() {
        let rows = trace("conversation_trace.jsonl");
        let unbounded = replay(&rows, None);
        let all_tokens = unbounded.cached_blocks() * u64::from(HASH_BLOCK_TOKENS);
        // 10 capacities from 1/1024 of the footprint to all of it, then unbounded.
        let mut rates = Vec::new();
        for shift in (0..10).rev() {
            let cap = all_tokens >> shift;
            rates.push((cap, replay(&rows, Some(cap)).hit_rate()));
        }
        rates.push((u64::MAX, unbounded.hit_rate()));
        for (cap, rate) in &rates {
            println!("capacity {cap:>20} tokens: {:.2} %", 100.0 * rate);
        }
        assert!(rates.windows(2).all(|w| w[0].1 <= w[1].1), "{rates:?}");
        assert!(rates[0].1 < rates[rates.len() - 1].1);
        // Holding the whole footprint loses nothing.
        assert_eq!(rates[9].1, unbounded.hit_rate());
    }

    #[test]
    fn the_same_trace_gives_the_same_counts() {
        let rows = trace("synthetic_trace.jsonl");
        let cap = Some(2_000_000);
        let (a, b) = (replay(&rows, cap), replay(&rows, cap));
        assert_eq!(
            (a.hit_tokens(), a.evicted_blocks(), a.cached_blocks()),
            (b.hit_tokens(), b.evicted_blocks(), b.cached_blocks())
        );
    }
}
