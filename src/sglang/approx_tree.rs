//! The `cache_aware` router's approximate radix tree: what the router *thinks* each instance
//! has cached, built only from the requests it routed there — never the server's own cache.
//!
//! # What it follows
//!
//! sgl-model-gateway's `Tree` (`sgl-model-gateway/src/policies/tree.rs`, sgl-project/sglang
//! 03744db): one multi-tenant radix tree per model; every node lists the tenants (workers)
//! that hold it, and a tenant holding a node holds every node above it.
//!
//! - `insert(text, tenant)` walks the text down the tree, creating what is missing, and
//!   attaches the tenant to every node on the path (adding the node's characters to the
//!   tenant's count); a node the tenant newly attaches to on the way gets time stamp 0, the
//!   path's last node gets "now".
//! - `prefix_match(text)` walks the longest match over the union of all tenants and returns
//!   it with one tenant of the deepest matched node: the node's cached `last_tenant` (the one
//!   that created it) if it still holds it, else the first in the node's tenant map. pdsim
//!   keeps each node's tenants in attach order and returns the first still there, which is the
//!   creator when it is there and a fixed (not hash-ordered) choice otherwise.
//! - `evict_tenant_by_size(max)`: for every tenant holding more than `max` characters, its
//!   least recently stamped leaves (nodes no child of which it holds) are removed until it fits.
//!
//! # Eviction cost
//!
//! The gateway's `evict_tenant_by_size` walks the whole tree on every pass to collect each
//! tenant's leaves into a heap, so a pass costs O(tree) however little it removes; over a long
//! run (a pass every `eviction_interval_secs`) that made the router superlinear in run length
//! (issue 40: a 12 k-row trace 0.64 s, the same ×10 41.9 s). pdsim keeps instead, per tenant,
//! the set of its leaves ordered by `(stamp, node)` — the LRU over leaves sglang's own radix
//! tree keeps (`python/sglang/srt/mem_cache/swa_radix_cache.py`, `LRUList` and
//! `get_leaf_lru_no_lock`: the least recently used leaf without a scan). It is updated where a
//! hold becomes or stops being a leaf, or a leaf is stamped, at O(log n) each; a pass costs
//! O(log n) per hold it removes and O(1) per tenant under its bound. The order is the heap's:
//! the oldest `(stamp, node)` first, and a parent that becomes the tenant's leaf joins the
//! set with its own stamp, exactly as the gateway pushes it onto its heap — so the decisions
//! are the same as the full walk's, pass for pass.
//!
//! Memory is the tree's: nodes no tenant holds are freed at once (their slots reused), so
//! between passes the tree holds at most `max_tree_size` per tenant plus what one interval
//! inserted; with `eviction_interval_secs = 0` it never evicts, as the gateway (no eviction
//! thread) does, and grows with the distinct prefixes routed.
//!
//! # pdsim's text
//!
//! The router stores raw characters; pdsim's workloads carry a prompt's identity as
//! Mooncake-style 512-token block hashes ([`HASH_BLOCK_TOKENS`]), so a node here is one block
//! (a prompt's last block may be partial and counts its own tokens), and a tree's size is its
//! tokens times [`CHARS_PER_TOKEN`]. Matching block by block finds what the router's character
//! match would find at block granularity. Time stamps are `(simulated ns, insert sequence)`,
//! never the wall clock; the tenant set is a `Vec`, never iterated in hash order.

use std::collections::{BTreeSet, HashMap};

use crate::workload::trace::HASH_BLOCK_TOKENS;

/// Characters per token, converting pdsim's token counts to the router's character counts
/// (`--max-tree-size` is in characters). ≈ 4 for English text under BPE tokenizers (OpenAI's
/// tokenizer guide: "one token generally corresponds to ~4 characters"). A correction factor.
pub const CHARS_PER_TOKEN: u64 = 4;

/// No parent: the node hangs under the root.
const ROOT: u32 = u32::MAX;

/// A tenant's hold on a node.
#[derive(Clone, Copy, Debug)]
struct Hold {
    tenant: u32,
    /// Last stamp: (simulated ns, insert sequence); (0, 0) when attached on the way.
    stamp: (u64, u64),
    /// Children of the node this tenant also holds (0: the node is one of its leaves).
    children: u32,
}

#[derive(Clone, Debug)]
struct Node {
    id: u64,
    parent: u32,
    tokens: u32,
    /// Child nodes (any tenant).
    children: u32,
    /// Tenants holding the node, in attach order.
    holds: Vec<Hold>,
}

/// The router's approximate tree over one side's instances (tenants `0..n`).
#[derive(Debug)]
pub struct ApproxTree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    /// (parent, block id) → node; lookup only, never iterated.
    index: HashMap<(u32, u64), u32>,
    /// Tokens each tenant holds.
    size: Vec<u64>,
    /// Inserts so far (the stamp's tie-break).
    inserts: u64,
    /// Per tenant, its leaves (holds with no held child) as `(stamp ns, stamp sequence,
    /// node)`, oldest first: the eviction order, kept as holds change (module docs).
    leaves: Vec<BTreeSet<(u64, u64, u32)>>,
}

impl ApproxTree {
    /// An empty tree over `tenants` instances.
    pub fn new(tenants: usize) -> Self {
        Self {
            nodes: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            size: vec![0; tenants],
            inserts: 0,
            leaves: vec![BTreeSet::new(); tenants],
        }
    }

    /// The tokens of block `k` of a prompt of `input_tokens` tokens in `blocks` blocks.
    fn block_tokens(k: usize, blocks: usize, input_tokens: u32) -> u32 {
        if k + 1 == blocks {
            input_tokens
                .saturating_sub(HASH_BLOCK_TOKENS * (blocks as u32 - 1))
                .clamp(1, HASH_BLOCK_TOKENS)
        } else {
            HASH_BLOCK_TOKENS
        }
    }

    /// The longest match of the prompt (`hash_ids`, `input_tokens`) over every tenant's
    /// blocks: `(matched tokens, tenant of the deepest matched node)`, the tenant `None` when
    /// nothing matched (the router's `"empty"`).
    pub fn prefix_match(&self, hash_ids: &[u64], input_tokens: u32) -> (u32, Option<u32>) {
        let mut parent = ROOT;
        let mut matched = 0u32;
        for &id in hash_ids {
            let Some(&n) = self.index.get(&(parent, id)) else {
                break;
            };
            matched = matched.saturating_add(self.nodes[n as usize].tokens);
            parent = n;
        }
        if parent == ROOT {
            return (0, None);
        }
        let tenant = self.nodes[parent as usize].holds.first().map(|h| h.tenant);
        (matched.min(input_tokens), tenant)
    }

    /// Records that the prompt was routed to `tenant` at simulated time `now`.
    pub fn insert(&mut self, hash_ids: &[u64], input_tokens: u32, tenant: u32, now: u64) {
        let stamp = (now, self.inserts);
        self.inserts += 1;
        let mut parent = ROOT;
        for (k, &id) in hash_ids.iter().enumerate() {
            let last = k + 1 == hash_ids.len();
            let node = match self.index.get(&(parent, id)) {
                Some(&n) => n,
                None => {
                    let tokens = Self::block_tokens(k, hash_ids.len(), input_tokens);
                    self.create(parent, id, tokens)
                }
            };
            let n = &mut self.nodes[node as usize];
            let fresh = n.holds.is_empty();
            let leaves = &mut self.leaves[tenant as usize];
            match n.holds.iter_mut().find(|h| h.tenant == tenant) {
                Some(h) => {
                    if last {
                        if h.children == 0 {
                            leaves.remove(&(h.stamp.0, h.stamp.1, node));
                            leaves.insert((stamp.0, stamp.1, node));
                        }
                        h.stamp = stamp;
                    }
                }
                None => {
                    // A node created by this insert is part of the router's one new leaf node
                    // (the rest of the text): "now"; an existing node attached on the way: 0.
                    let s = if last || fresh { stamp } else { (0, 0) };
                    n.holds.push(Hold {
                        tenant,
                        stamp: s,
                        children: 0,
                    });
                    leaves.insert((s.0, s.1, node));
                    self.size[tenant as usize] += u64::from(n.tokens);
                    if parent != ROOT {
                        let p = &mut self.nodes[parent as usize];
                        let h = p
                            .holds
                            .iter_mut()
                            .find(|h| h.tenant == tenant)
                            .expect("a tenant holds every node above one it holds");
                        if h.children == 0 {
                            leaves.remove(&(h.stamp.0, h.stamp.1, parent));
                        }
                        h.children += 1;
                    }
                }
            }
            parent = node;
        }
    }

    fn create(&mut self, parent: u32, id: u64, tokens: u32) -> u32 {
        let node = Node {
            id,
            parent,
            tokens,
            children: 0,
            holds: Vec::new(),
        };
        if parent != ROOT {
            self.nodes[parent as usize].children += 1;
        }
        let idx = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 - 1 tree nodes")
            }
        };
        self.index.insert((parent, id), idx);
        idx
    }

    /// Tokens tenant `t` holds.
    pub fn tenant_tokens(&self, t: usize) -> u64 {
        self.size[t]
    }

    /// Nodes in the tree.
    pub fn nodes(&self) -> usize {
        self.nodes.len() - self.free.len()
    }

    /// The router's `evict_tenant_by_size(max_chars)`: every tenant over `max_chars`
    /// characters loses its least recently stamped leaves until it fits. Returns the holds
    /// removed. Costs O(log n) per hold removed (module docs, "Eviction cost").
    pub fn evict_by_size(&mut self, max_chars: u64) -> u64 {
        let max_tokens = max_chars / CHARS_PER_TOKEN;
        let mut removed = 0;
        for t in 0..self.size.len() {
            let tenant = t as u32;
            while self.size[t] > max_tokens {
                let Some((_, _, node)) = self.leaves[t].pop_first() else {
                    break;
                };
                removed += 1;
                if let Some((stamp, parent)) = self.drop_leaf(node, tenant) {
                    self.leaves[t].insert((stamp.0, stamp.1, parent));
                }
            }
        }
        removed
    }

    /// The gateway's `remove_tenant(url)`, which `CacheAwarePolicy::remove_worker` /
    /// `remove_worker_by_url` call when a worker leaves the router
    /// (`sgl-model-gateway/src/policies/cache_aware.rs`): tenant `t` lets go of every node it
    /// holds, leaf by leaf, and a node nobody holds any more is freed. A worker that joins
    /// again starts with nothing, as its new process's cache does. Returns the holds removed.
    pub fn remove_tenant(&mut self, t: usize) -> u64 {
        let tenant = t as u32;
        let mut removed = 0;
        while let Some((_, _, node)) = self.leaves[t].pop_first() {
            removed += 1;
            if let Some((stamp, parent)) = self.drop_leaf(node, tenant) {
                self.leaves[t].insert((stamp.0, stamp.1, parent));
            }
        }
        debug_assert_eq!(self.size[t], 0, "tenant {t} holds nothing once removed");
        removed
    }

    /// Tenant `tenant` lets go of its leaf `node`: its tokens leave the tenant's size, a node
    /// nobody holds any more is freed, and the parent loses a child. Returns the parent's
    /// (stamp, node) when it became one of the tenant's leaves (both eviction orders put it in
    /// their queue).
    fn drop_leaf(&mut self, node: u32, tenant: u32) -> Option<((u64, u64), u32)> {
        let n = &mut self.nodes[node as usize];
        let at = n
            .holds
            .iter()
            .position(|h| h.tenant == tenant)
            .expect("an evicted leaf is held");
        n.holds.remove(at);
        self.size[tenant as usize] -= u64::from(n.tokens);
        let (parent, id, orphan) = (n.parent, n.id, n.holds.is_empty());
        if orphan {
            self.index.remove(&(parent, id));
            self.free.push(node);
        }
        if parent == ROOT {
            return None;
        }
        let p = &mut self.nodes[parent as usize];
        if orphan {
            p.children -= 1;
        }
        let h = p
            .holds
            .iter_mut()
            .find(|h| h.tenant == tenant)
            .expect("a tenant holds every node above one it holds");
        h.children -= 1;
        (h.children == 0).then_some((h.stamp, parent))
    }

    /// The gateway's pass as pdsim ran it before issue 40 (a walk of the whole tree per tenant
    /// over its bound, collecting its leaves into a heap), then the LRU rebuilt by a walk: the
    /// slow reference the LRU's passes must equal.
    #[cfg(test)]
    fn evict_by_walk(&mut self, max_chars: u64) -> u64 {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let max_tokens = max_chars / CHARS_PER_TOKEN;
        let mut removed = 0;
        for t in 0..self.size.len() {
            if self.size[t] <= max_tokens {
                continue;
            }
            let tenant = t as u32;
            let mut heap = BinaryHeap::new();
            for (i, n) in self.nodes.iter().enumerate() {
                if let Some(h) = n.holds.iter().find(|h| h.tenant == tenant)
                    && h.children == 0
                {
                    heap.push(Reverse((h.stamp, i as u32)));
                }
            }
            while self.size[t] > max_tokens {
                let Some(Reverse((_, node))) = heap.pop() else {
                    break;
                };
                removed += 1;
                if let Some((stamp, parent)) = self.drop_leaf(node, tenant) {
                    heap.push(Reverse((stamp, parent)));
                }
            }
        }
        for t in 0..self.size.len() {
            self.leaves[t] = self.leaves_by_walk(t as u32);
        }
        removed
    }

    /// The leaves tenant `t` holds, by a full walk (the gateway's way): the tests' slow,
    /// obviously-right reference for the LRU the tree keeps.
    #[cfg(test)]
    fn leaves_by_walk(&self, t: u32) -> BTreeSet<(u64, u64, u32)> {
        let free: BTreeSet<u32> = self.free.iter().copied().collect();
        self.nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| !free.contains(&(*i as u32)))
            .filter_map(|(i, n)| {
                let h = n.holds.iter().find(|h| h.tenant == t)?;
                (h.children == 0).then_some((h.stamp.0, h.stamp.1, i as u32))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A removed tenant holds nothing and is never named by a match; the others keep every
    /// hold, nodes only it held are freed, and a match on its prompt now names whoever else
    /// holds the deepest shared node — each checked against a walk of the whole tree.
    #[test]
    fn a_removed_tenant_holds_nothing_and_the_rest_keep_theirs() {
        let mut t = ApproxTree::new(3);
        t.insert(&[1, 2, 3], 1536, 0, 10);
        t.insert(&[1, 2, 9], 1100, 1, 11);
        t.insert(&[1, 2, 3, 4], 2000, 0, 12);
        t.insert(&[7], 300, 2, 13);
        let nodes = t.nodes();
        let (one, two) = (t.tenant_tokens(1), t.tenant_tokens(2));
        assert_eq!(t.prefix_match(&[1, 2, 3, 4], 2000), (2000, Some(0)));
        // Tenant 0 held 1, 2, 3, 4: four holds; 3 and 4 were only its own.
        assert_eq!(t.remove_tenant(0), 4);
        assert_eq!(t.tenant_tokens(0), 0);
        assert_eq!((t.tenant_tokens(1), t.tenant_tokens(2)), (one, two));
        assert_eq!(t.nodes(), nodes - 2);
        assert!(t.leaves[0].is_empty());
        for k in 0..3 {
            assert_eq!(
                t.leaves[k],
                t.leaves_by_walk(k as u32),
                "tenant {k}'s leaves"
            );
        }
        // Its prompt now matches only the blocks tenant 1 shares, and names tenant 1.
        assert_eq!(t.prefix_match(&[1, 2, 3, 4], 2000), (1024, Some(1)));
        assert_eq!(t.remove_tenant(0), 0);
        // Joining again, it starts from nothing.
        t.insert(&[1, 2, 3], 1500, 0, 20);
        assert_eq!(t.tenant_tokens(0), 1500);
    }

    #[test]
    fn the_deepest_match_names_its_creator_and_counts_partial_blocks() {
        let mut t = ApproxTree::new(3);
        assert_eq!(t.prefix_match(&[1, 2], 1000), (0, None));
        t.insert(&[1, 2, 3], 1300, 0, 10);
        t.insert(&[1, 2, 9], 1100, 1, 11);
        // Both hold 1, 2; 3 is only tenant 0's, 9 only tenant 1's.
        assert_eq!(t.prefix_match(&[1, 2, 3], 1300), (1300, Some(0)));
        assert_eq!(t.prefix_match(&[1, 2, 9], 1100), (1100, Some(1)));
        // The shared prefix's deepest node was created by tenant 0.
        assert_eq!(t.prefix_match(&[1, 2, 7], 1500), (1024, Some(0)));
        // An id under another parent does not match.
        assert_eq!(t.prefix_match(&[2], 512), (0, None));
        // Tokens: 0 holds 512 + 512 + 276, 1 holds 512 + 512 + 76.
        assert_eq!(t.tenant_tokens(0), 1300);
        assert_eq!(t.tenant_tokens(1), 1100);
        assert_eq!(t.tenant_tokens(2), 0);
        assert_eq!(t.nodes(), 4);
    }

    #[test]
    fn eviction_drops_a_tenants_oldest_leaves_until_it_fits() {
        let mut t = ApproxTree::new(2);
        t.insert(&[1, 2], 1024, 0, 1); // chain A
        t.insert(&[5, 6], 1024, 0, 2); // chain B, newer
        t.insert(&[1, 2], 1024, 1, 3); // tenant 1 shares chain A
        assert_eq!(t.tenant_tokens(0), 2048);
        // Room for 2 blocks of tenant 0 (in characters): chain A (older) goes, leaf first.
        let removed = t.evict_by_size(1024 * CHARS_PER_TOKEN);
        assert_eq!(removed, 2);
        assert_eq!(t.tenant_tokens(0), 1024);
        assert_eq!(t.tenant_tokens(1), 1024, "tenant 1 is under the bound");
        // Chain A is now only tenant 1's; its nodes stay.
        assert_eq!(t.prefix_match(&[1, 2], 1024), (1024, Some(1)));
        assert_eq!(t.prefix_match(&[5, 6], 1024), (1024, Some(0)));
        assert_eq!(t.nodes(), 4);
        // Evicting tenant 1 entirely frees chain A's nodes.
        t.evict_by_size(0);
        assert_eq!(t.nodes(), 0);
        assert_eq!(t.prefix_match(&[1, 2], 1024), (0, None));
        // Freed slots are reused.
        t.insert(&[8], 100, 1, 9);
        assert_eq!(t.prefix_match(&[8], 100), (100, Some(1)));
        assert_eq!(t.nodes(), 1);
    }

    /// The LRU over leaves decides exactly what the full walk did (issue 40): two trees fed
    /// the same random inserts, one evicting by its LRU and one by the walk, agree on every
    /// pass's count, every tenant's size, the node count and every probe's match; and the
    /// LRU always equals the leaves a walk finds.
    #[test]
    fn the_leaf_lru_evicts_what_the_full_walk_evicts() {
        use rand::{RngExt, SeedableRng};
        for seed in 0..20u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let tenants = rng.random_range(1..5usize);
            let (mut fast, mut slow) = (ApproxTree::new(tenants), ApproxTree::new(tenants));
            let mut now = 0u64;
            for step in 0..600 {
                now += rng.random_range(0..3u64);
                // Prompts over a small alphabet so prefixes are shared and re-stamped.
                let len = rng.random_range(1..7usize);
                let ids: Vec<u64> = (0..len).map(|_| rng.random_range(0..4u64)).collect();
                let tokens = (len as u32 - 1) * HASH_BLOCK_TOKENS + rng.random_range(1..=512);
                let tenant = rng.random_range(0..tenants as u32);
                fast.insert(&ids, tokens, tenant, now);
                slow.insert(&ids, tokens, tenant, now);
                if step % 7 == 0 {
                    let max = rng.random_range(0..8u64) * 512 * CHARS_PER_TOKEN;
                    assert_eq!(
                        fast.evict_by_size(max),
                        slow.evict_by_walk(max),
                        "seed {seed}"
                    );
                }
                for t in 0..tenants {
                    assert_eq!(fast.size[t], slow.size[t], "seed {seed} step {step}");
                    assert_eq!(fast.leaves[t], fast.leaves_by_walk(t as u32), "seed {seed}");
                }
                assert_eq!(fast.nodes(), slow.nodes(), "seed {seed} step {step}");
                assert_eq!(
                    fast.prefix_match(&ids, tokens),
                    slow.prefix_match(&ids, tokens)
                );
            }
        }
    }

    /// A pass removes what it must and touches nothing else: with one tenant far over its
    /// bound by one leaf, a pass removes that one hold (the old walk visited every node).
    #[test]
    fn a_pass_over_a_large_tree_removes_only_the_excess() {
        let mut t = ApproxTree::new(1);
        for i in 0..10_000u64 {
            t.insert(&[i], 512, 0, i);
        }
        assert_eq!(t.evict_by_size(9_999 * 512 * CHARS_PER_TOKEN), 1);
        assert_eq!(t.prefix_match(&[0], 512), (0, None), "the oldest leaf went");
        assert_eq!(t.prefix_match(&[1], 512), (512, Some(0)));
        assert_eq!(t.evict_by_size(9_999 * 512 * CHARS_PER_TOKEN), 0);
    }

    #[test]
    fn a_node_attached_on_the_way_is_evicted_before_a_fresh_leaf() {
        // Tenant 1 routes [1, 2, 3] after tenant 0 made [1, 2]: it attaches to 1 and 2 on the
        // way (stamp 0) and creates 3 (stamp now). Its leaves: 3 only; after 3 goes, 2 is a
        // leaf with stamp 0 and goes before anything stamped.
        let mut t = ApproxTree::new(2);
        t.insert(&[1, 2], 1024, 0, 5);
        t.insert(&[1, 2, 3], 1536, 1, 6);
        t.insert(&[7], 512, 1, 7);
        // Tenant 1 holds 4 blocks; keep 2: removes 3 (stamp 6) — no: the oldest leaf first.
        // Leaves of tenant 1: 3 (6, 1) and 7 (7, 2); 3 goes, then 2 (stamp 0).
        t.evict_by_size(2 * 512 * CHARS_PER_TOKEN);
        assert_eq!(t.tenant_tokens(1), 1024);
        assert_eq!(t.prefix_match(&[7], 512), (512, Some(1)));
        assert_eq!(t.prefix_match(&[1, 2], 1024), (1024, Some(0)));
    }
}
