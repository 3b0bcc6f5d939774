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
//! # pdsim's text
//!
//! The router stores raw characters; pdsim's workloads carry a prompt's identity as
//! Mooncake-style 512-token block hashes ([`HASH_BLOCK_TOKENS`]), so a node here is one block
//! (a prompt's last block may be partial and counts its own tokens), and a tree's size is its
//! tokens times [`CHARS_PER_TOKEN`]. Matching block by block finds what the router's character
//! match would find at block granularity. Time stamps are `(simulated ns, insert sequence)`,
//! never the wall clock; the tenant set is a `Vec`, never iterated in hash order.

use std::collections::{BinaryHeap, HashMap};

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
            match n.holds.iter_mut().find(|h| h.tenant == tenant) {
                Some(h) => {
                    if last {
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
                    self.size[tenant as usize] += u64::from(n.tokens);
                    if parent != ROOT {
                        let p = &mut self.nodes[parent as usize];
                        let h = p
                            .holds
                            .iter_mut()
                            .find(|h| h.tenant == tenant)
                            .expect("a tenant holds every node above one it holds");
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
    /// removed.
    pub fn evict_by_size(&mut self, max_chars: u64) -> u64 {
        let max_tokens = max_chars / CHARS_PER_TOKEN;
        let mut removed = 0;
        for t in 0..self.size.len() {
            if self.size[t] <= max_tokens {
                continue;
            }
            let tenant = t as u32;
            // The tenant's leaves, oldest first (a min-heap by (stamp, node)).
            let mut heap = BinaryHeap::new();
            for (i, n) in self.nodes.iter().enumerate() {
                if let Some(h) = n.holds.iter().find(|h| h.tenant == tenant)
                    && h.children == 0
                {
                    heap.push(std::cmp::Reverse((h.stamp, i as u32)));
                }
            }
            while self.size[t] > max_tokens {
                let Some(std::cmp::Reverse((_, node))) = heap.pop() else {
                    break;
                };
                let n = &mut self.nodes[node as usize];
                let at = n
                    .holds
                    .iter()
                    .position(|h| h.tenant == tenant)
                    .expect("a leaf in the heap is held");
                n.holds.remove(at);
                self.size[t] -= u64::from(n.tokens);
                removed += 1;
                let (parent, id, orphan) = (n.parent, n.id, n.holds.is_empty());
                if orphan {
                    self.index.remove(&(parent, id));
                    self.free.push(node);
                }
                if parent != ROOT {
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
                    if h.children == 0 {
                        heap.push(std::cmp::Reverse((h.stamp, parent)));
                    }
                }
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
