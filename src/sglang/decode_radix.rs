//! Decode-side prefix reuse: sglang's `--disaggregation-decode-enable-radix-cache` (PR #19746;
//! pdsim's `pools.<decode>.server.disaggregation_decode_enable_radix_cache`, sglang
//! `2026-09` and later; `docs/sglang-pd.md` §25).
//!
//! # What sglang does
//!
//! Without the flag a decode server runs a chunk cache: a request's KV is freed when it ends
//! (`handle_pd_disaggregation`: "KV cache is forced as chunk cache for decode server"). With
//! it, the decode keeps a radix tree over the KV of finished requests, and
//! `DecodePreallocQueue.pop_preallocated` (`disaggregation/decode.py`):
//!
//! 1. matches the request's prompt against the tree and locks the matched path
//!    (`_match_prefix_and_lock`: `match_prefix_for_req`, then `inc_lock_ref(last_node)`);
//! 2. budgets with the tree's evictable pages counted as free (`_allocatable_token_budgets`:
//!    `available_size += tree_cache.evictable_size()`) and asks only for the pages past the
//!    match (`_required_alloc_tokens(fill_len, prefix_len)`); a request that does not fit
//!    gives its lock back (`dec_lock_ref`) and the queue stops;
//! 3. preallocates the delta (`_pre_alloc`: `tree_cache.evict(...)` first when the pool is
//!    short, then `alloc_extend(prefix_lens=[total_prefix_len], ...)`) and sends the prefill
//!    only the delta's page indices with `decode_prefix_len` (`req_to_token[...]
//!    [total_prefix_len:origin_input_len]`, `send_metadata(..., decode_prefix_len=...)`);
//! 4. the prefill sends from there (`prefill.py`: `req.start_send_idx =
//!    disagg_kv_sender.pop_decode_prefix_len()`; `TransferInfo.decode_prefix_len`,
//!    `disaggregation/base/conn.py`) — a full hit still sends the aux row (`is_dummy`);
//! 5. a finished request's KV (prompt and output, whole pages) goes into the tree and its lock
//!    is released (`cache_finished_req`); a failed one inserts nothing
//!    (`release_kv_cache(..., is_insert=False)`); the running batch evicts unlocked nodes
//!    before it retracts (`alloc_token_slots` → `evict_from_tree_cache`).
//!
//! # pdsim's model
//!
//! The tree is the prefill's ([`PrefixCache`], the same radix tree over the traces' 512-token
//! block ids, leaf-first LRU), with locks: a block is a node, a node holds `512 / page_size`
//! pages of this decode's pool (so `page_size` must divide 512, checked by the scenario). A
//! prompt's match is its leading full blocks the tree holds, hence page-aligned. A finished
//! request inserts its full prompt blocks and the blocks its output completed (the ids its
//! session's next turn names, `workload::sessions`), the KV of `input + output − 1` tokens.
//!
//! **Page ids.** Tree pages are taken from and given back to the allocator like any request's.
//! A finished request's pages go back to the pool as without the tree, and the tree then takes
//! the pages of the blocks it adds: the counts are exact (the pages were just freed, so they
//! are there), the ids those pages get may differ from the request's. No tree page is ever a
//! transfer's destination (the prefix is not sent), so which ids they are decides nothing but
//! the allocator's later order.
//!
//! **Recency** is call order: decode's admissions and ends happen in simulated-time order, so
//! the tree's `(now, sequence)` key runs with `now = 0` and orders by sequence alone.

use std::collections::BTreeMap;

use super::memory::KvPool;
use super::prefix_cache::PrefixCache;
use crate::vocab::requests::Holding;
use crate::workload::trace::HASH_BLOCK_TOKENS;

/// One decode instance's radix tree and what it lends its live requests.
#[derive(Debug)]
pub struct DecodeRadix {
    /// The tree over 512-token blocks (unbounded: the pool bounds it, by eviction).
    tree: PrefixCache,
    /// KV tokens per page.
    page_size: u32,
    /// Pages per 512-token block.
    pages_per_block: u32,
    /// Bytes of one page over every attention rank of the instance: what the prefill would
    /// have written for it.
    page_bytes: u64,
    /// Page ids of each tree node, `pages_per_block` per node index (a slot of a node the
    /// tree freed is stale until the index is reused).
    slab: Vec<u32>,
    /// Live requests' locks: request id → (last matched node, prefix pages lent).
    held: BTreeMap<u64, (u32, u32)>,
    /// The blocks each routed request's output completes (`workload::sessions`).
    answers: BTreeMap<u64, Vec<u64>>,
    /// Scratch: nodes of a path, created or evicted.
    nodes: Vec<u32>,
    /// Scratch: page ids given back.
    ids: Vec<u32>,
    /// What the tree did.
    pub stats: RadixStats,
}

/// A decode tree's figures (`summary.json` `decode_prefix`), summed over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RadixStats {
    /// Requests admitted (each matched once at its admission).
    pub admitted: u64,
    /// Of those, requests whose prompt the tree held a prefix of.
    pub hit_requests: u64,
    /// Prompt tokens admitted.
    pub prompt_tokens: u64,
    /// Prompt tokens the tree held at admission: KV the prefill did not send.
    pub hit_tokens: u64,
    /// Pages of those tokens.
    pub hit_pages: u64,
    /// Bytes of those pages (every attention rank): what the transfer did not move.
    pub bytes_not_transferred: u64,
    /// Blocks finished requests added to the tree.
    pub inserted_blocks: u64,
    /// Blocks evicted to make room.
    pub evicted_blocks: u64,
    /// The most blocks the tree held at once.
    pub peak_blocks: u64,
}

impl RadixStats {
    /// The sum of two instances' figures (peaks add: instances hold theirs at once, a bound).
    pub fn add(&mut self, o: &RadixStats) {
        self.admitted += o.admitted;
        self.hit_requests += o.hit_requests;
        self.prompt_tokens += o.prompt_tokens;
        self.hit_tokens += o.hit_tokens;
        self.hit_pages += o.hit_pages;
        self.bytes_not_transferred += o.bytes_not_transferred;
        self.inserted_blocks += o.inserted_blocks;
        self.evicted_blocks += o.evicted_blocks;
        self.peak_blocks += o.peak_blocks;
    }
}

/// A combination sglang refuses `--disaggregation-decode-enable-radix-cache` with.
#[derive(Clone, Copy, Debug)]
pub enum Refusal<'a> {
    /// `--enable-hisparse` (`handle_pd_disaggregation`).
    Hisparse,
    /// `--disaggregation-transfer-backend fake` (`handle_pd_disaggregation`).
    FakeBackend,
    /// Any `--speculative-algorithm`, as given (`handle_pd_disaggregation`).
    Speculative(&'a str),
    /// A sliding-window hybrid without the unified radix tree (`build_kv_cache`, PR #27770).
    Swa,
    /// A model with recurrent (Mamba/SSM) state (`build_kv_cache`).
    MambaSsm,
}

/// sglang's `ValueError` text for `r` (`arg_groups/pd_disaggregation_hook.py::
/// handle_pd_disaggregation`, `mem_cache/kv_cache_builder.py::build_kv_cache`;
/// `docs/sglang-pd.md` §12, §25.1).
pub fn refusal(r: Refusal<'_>) -> String {
    let flag = "--disaggregation-decode-enable-radix-cache";
    match r {
        Refusal::Hisparse => format!("{flag} is incompatible with --enable-hisparse"),
        Refusal::FakeBackend => {
            format!("{flag} is incompatible with --disaggregation-transfer-backend fake")
        }
        Refusal::Speculative(alg) => format!(
            "{flag} is incompatible with speculative decoding (--speculative-algorithm {alg})"
        ),
        Refusal::Swa => format!(
            "{flag} with sliding window attention (SWA) models requires the unified radix tree (set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1)."
        ),
        Refusal::MambaSsm => format!("{flag} is incompatible with Mamba/SSM models"),
    }
}

impl DecodeRadix {
    /// An empty tree over pages of `page_size` tokens (a divisor of 512) of `page_bytes`
    /// bytes (all attention ranks).
    pub fn new(page_size: u32, page_bytes: u64) -> Self {
        assert!(
            page_size > 0 && HASH_BLOCK_TOKENS.is_multiple_of(page_size),
            "the scenario checks that page_size divides 512"
        );
        Self {
            tree: PrefixCache::new(None),
            page_size,
            pages_per_block: HASH_BLOCK_TOKENS / page_size,
            page_bytes,
            slab: Vec::new(),
            held: BTreeMap::new(),
            answers: BTreeMap::new(),
            nodes: Vec::new(),
            ids: Vec::new(),
            stats: RadixStats::default(),
        }
    }

    /// Request `id`, routed here, completes the blocks `answer` with its output.
    pub fn remember(&mut self, id: u64, answer: Vec<u64>) {
        self.answers.insert(id, answer);
    }

    /// Pages the tree holds that no live request locks: free on demand.
    pub fn evictable_pages(&self) -> u32 {
        u32::try_from(self.tree.evictable_blocks() * u64::from(self.pages_per_block))
            .expect("fewer tree pages than a pool's u32")
    }

    /// Pages the tree holds now.
    pub fn cached_pages(&self) -> u64 {
        self.tree.cached_blocks() * u64::from(self.pages_per_block)
    }

    /// Matches request `id`'s prompt (`prompt` tokens, blocks `hash_ids`) and locks what it
    /// found: its leading full blocks the tree holds. Returns the prefix in pages (0: nothing
    /// matched, nothing locked).
    pub fn match_prefix(&mut self, id: u64, hash_ids: &[u64], prompt: u32) -> u32 {
        let full = ((prompt / HASH_BLOCK_TOKENS) as usize).min(hash_ids.len());
        if full == 0 {
            return 0;
        }
        let (blocks, last) = self.tree.match_and_lock(&hash_ids[..full], 0);
        let Some(last) = last else { return 0 };
        let pages = blocks * self.pages_per_block;
        self.held.insert(id, (last, pages));
        pages
    }

    /// Request `id` did not fit after all: its lock goes back (sglang's `dec_lock_ref` when
    /// `pop_preallocated` breaks).
    pub fn unmatch(&mut self, id: u64) {
        if let Some((last, _)) = self.held.remove(&id) {
            self.tree.unlock(last);
        }
    }

    /// Frees tree pages, least recently used unlocked blocks first, until `pool` has `need`
    /// pages free or nothing is evictable. Returns whether it evicted anything.
    pub fn evict_for(&mut self, need: u32, pool: &mut KvPool) -> bool {
        let have = pool.available();
        if have >= need {
            return false;
        }
        let blocks = (need - have).div_ceil(self.pages_per_block);
        self.nodes.clear();
        self.tree.evict_blocks(u64::from(blocks), &mut self.nodes);
        if self.nodes.is_empty() {
            return false;
        }
        self.ids.clear();
        let ppb = self.pages_per_block as usize;
        for &n in &self.nodes {
            let at = n as usize * ppb;
            self.ids.extend_from_slice(&self.slab[at..at + ppb]);
        }
        pool.give_from_tree(&self.ids);
        self.stats.evicted_blocks += self.nodes.len() as u64;
        true
    }

    /// Request `id` was admitted with `delta`, its newly allocated pages: its page list
    /// becomes the tree's pages of its prefix, then the delta (decode's `req_to_token` row:
    /// the prefix indices, then `kv_loc`); `prompt` tokens are counted.
    pub fn admitted(&mut self, id: u64, prompt: u32, delta: &mut Holding) {
        self.stats.admitted += 1;
        self.stats.prompt_tokens += u64::from(prompt);
        let Some(&(last, pages)) = self.held.get(&id) else {
            return;
        };
        self.stats.hit_requests += 1;
        self.stats.hit_pages += u64::from(pages);
        self.stats.hit_tokens += u64::from(pages * self.page_size);
        self.stats.bytes_not_transferred += u64::from(pages) * self.page_bytes;
        self.nodes.clear();
        self.tree.path(last, &mut self.nodes);
        let ppb = self.pages_per_block as usize;
        let mut list = Vec::with_capacity(pages as usize + delta.pages.len());
        for &n in &self.nodes {
            let at = n as usize * ppb;
            list.extend_from_slice(&self.slab[at..at + ppb]);
        }
        list.truncate(pages as usize);
        list.append(&mut delta.pages);
        delta.pages = list;
    }

    /// Request `id` leaves decode (it ended or was retracted): the prefix pages lent to it go
    /// out of its page list (they stay the tree's) and its lock goes back.
    pub fn release(&mut self, id: u64, holding: &mut Holding) {
        if let Some((last, pages)) = self.held.remove(&id) {
            holding
                .pages
                .drain(..(pages as usize).min(holding.pages.len()));
            self.tree.unlock(last);
        }
    }

    /// Request `id` ended: the blocks its output would complete are forgotten.
    pub fn forget(&mut self, id: u64) {
        self.answers.remove(&id);
    }

    /// Request `id` completed with `input` prompt tokens of blocks `hash_ids`; its pages are
    /// back in `pool`. Its KV — the full prompt blocks, then the blocks its output completed
    /// — goes into the tree, each block new to the tree taking its pages from `pool`
    /// (unlocked blocks are evicted first if the pool is short, which only a block another
    /// request inserted meanwhile can make it).
    pub fn insert_finished(&mut self, id: u64, hash_ids: &[u64], input: u32, pool: &mut KvPool) {
        let answer = self.answers.remove(&id).unwrap_or_default();
        let full = ((input / HASH_BLOCK_TOKENS) as usize).min(hash_ids.len());
        if full == 0 && answer.is_empty() {
            return;
        }
        // Answer blocks continue the full prompt blocks only when every prompt block is full
        // and named: otherwise they have no prefix in this tree.
        let mut path: Vec<u64> = hash_ids[..full].to_vec();
        if full == (input / HASH_BLOCK_TOKENS) as usize {
            path.extend_from_slice(&answer);
        }
        let ppb = self.pages_per_block;
        loop {
            let new = path.len() as u32 - self.tree.peek_blocks(&path);
            let need = new * ppb;
            if pool.available() >= need || !self.evict_for(need, pool) {
                let fit = self.tree.peek_blocks(&path) + pool.available() / ppb;
                path.truncate((fit as usize).min(path.len()));
                break;
            }
        }
        self.nodes.clear();
        self.tree.insert_path(&path, 0, &mut self.nodes);
        for &n in &self.nodes {
            let at = n as usize * ppb as usize;
            if self.slab.len() < at + ppb as usize {
                self.slab.resize(at + ppb as usize, 0);
            }
            self.ids.clear();
            let took = pool.take_for_tree(ppb, &mut self.ids);
            assert!(took, "request {id}: the pool had the pages its blocks need");
            self.slab[at..at + ppb as usize].copy_from_slice(&self.ids);
        }
        self.stats.inserted_blocks += self.nodes.len() as u64;
        self.stats.peak_blocks = self.stats.peak_blocks.max(self.tree.cached_blocks());
    }

    /// The server crashed and every request on it ended: the tree's pages go back to `pool`
    /// and the tree starts empty.
    pub fn crash(&mut self, pool: &mut KvPool) {
        // Every request routed here failed before this; only a request decode dropped without
        // freeing (sglang before PR #9817, `decode_leaked`) can still hold a lock.
        for (_, (last, _)) in std::mem::take(&mut self.held) {
            self.tree.unlock(last);
        }
        self.evict_for(pool.total(), pool);
        self.answers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::memory::{PageAllocator, Store};

    fn pool(pages: u32) -> KvPool {
        KvPool::new(
            Store::Plain {
                pages: PageAllocator::new(pages),
                slots: PageAllocator::new(0),
                grown: Vec::new(),
            },
            None,
        )
    }

    /// Admits request `id` (its `prompt` tokens of blocks `ids`) by hand, as the prealloc
    /// queue does: match, evict for the delta, allocate, lend the prefix.
    fn admit(t: &mut DecodeRadix, p: &mut KvPool, id: u64, ids: &[u64], prompt: u32) -> Holding {
        let prefix = t.match_prefix(id, ids, prompt);
        let delta = prompt.div_ceil(t.page_size) - prefix;
        t.evict_for(delta, p);
        let mut h = p.alloc(id, delta, false).expect("room");
        t.admitted(id, prompt, &mut h);
        h
    }

    /// Ends request `id` as `request_ended` does: its prefix back to the tree, its pages back
    /// to the pool, then (completed) its blocks into the tree.
    fn end(
        t: &mut DecodeRadix,
        p: &mut KvPool,
        id: u64,
        mut h: Holding,
        ins: Option<(&[u64], u32)>,
    ) {
        t.release(id, &mut h);
        p.free_owned(id, h);
        match ins {
            Some((ids, input)) => t.insert_finished(id, ids, input, p),
            None => t.forget(id),
        }
    }

    /// Pages are conserved: free + the tree's + every live request's delta = total.
    fn conserved(t: &DecodeRadix, p: &KvPool, live: &[&Holding]) {
        let lent: u64 = t.held.values().map(|&(_, n)| u64::from(n)).sum();
        let own: u64 = live.iter().map(|h| h.pages.len() as u64).sum::<u64>() - lent;
        assert_eq!(
            u64::from(p.available()) + t.cached_pages() + own,
            u64::from(p.total())
        );
    }

    #[test]
    fn a_second_turn_reuses_the_first_turns_prompt_and_answer() {
        // Page 64: 8 pages a block. Turn 0: 1,100 prompt tokens (blocks 1, 2, 3; two full),
        // 500 output tokens: KV of 1,599 tokens completes block 3' (answer id 10). Turn 1's
        // prompt 1,700 tokens: blocks 1, 2, 10, then its own 4 (partial).
        let mut p = pool(100);
        let mut t = DecodeRadix::new(64, 1000);
        t.remember(0, vec![10]);
        let h0 = admit(&mut t, &mut p, 0, &[1, 2, 3], 1100);
        assert_eq!(h0.pages.len(), 18, "no prefix: ⌈1100/64⌉ pages");
        conserved(&t, &p, &[&h0]);
        end(&mut t, &mut p, 0, h0, Some((&[1, 2, 3], 1100)));
        assert_eq!(t.cached_pages(), 24, "blocks 1, 2 and the answer's 10");
        conserved(&t, &p, &[]);
        let h1 = admit(&mut t, &mut p, 1, &[1, 2, 10, 4], 1700);
        // 1,536 tokens matched (24 pages); the delta is ⌈1700/64⌉ − 24 = 3 pages.
        assert_eq!(h1.pages.len(), 27);
        assert_eq!(t.stats.hit_tokens, 1536);
        assert_eq!(t.stats.bytes_not_transferred, 24 * 1000);
        assert_eq!(t.evictable_pages(), 0, "the matched path is locked");
        conserved(&t, &p, &[&h1]);
        // A failure inserts nothing and unlocks.
        end(&mut t, &mut p, 1, h1, None);
        assert_eq!(t.evictable_pages(), 24);
        conserved(&t, &p, &[]);
    }

    #[test]
    fn locked_blocks_survive_pressure_and_unlocked_ones_go_lru() {
        // 40 pages of 512 tokens: a block is one page.
        let mut p = pool(40);
        let mut t = DecodeRadix::new(512, 1);
        for (id, ids) in [(0u64, [1u64, 2, 3]), (1, [4, 5, 6])] {
            let h = admit(&mut t, &mut p, id, &ids, 1536);
            end(&mut t, &mut p, id, h, Some((&ids, 1536)));
        }
        assert_eq!(t.cached_pages(), 6);
        // Request 2 locks 1-2-3; request 3 (no match) needs 37 pages: 34 free, so three
        // blocks go, the least recent unlocked first (4-5-6, leaf first), never 1-2-3.
        let h2 = admit(&mut t, &mut p, 2, &[1, 2, 3], 1536);
        assert_eq!(h2.pages.len(), 3);
        let h3 = admit(&mut t, &mut p, 3, &[7], 37 * 512);
        assert_eq!(t.stats.evicted_blocks, 3);
        assert_eq!(t.cached_pages(), 3);
        conserved(&t, &p, &[&h2, &h3]);
        assert!(
            !t.evict_for(1, &mut p),
            "nothing evictable: 1-2-3 is locked"
        );
        end(&mut t, &mut p, 2, h2, None);
        end(&mut t, &mut p, 3, h3, None);
        conserved(&t, &p, &[]);
        t.crash(&mut p);
        assert_eq!(p.available(), 40);
    }

    /// Random admissions and ends against the invariant: pages are never lost or lent twice.
    #[test]
    fn random_traffic_conserves_pages() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let mut p = pool(64);
        let mut t = DecodeRadix::new(128, 1);
        let mut live: Vec<(u64, Vec<u64>, u32, Holding)> = Vec::new();
        for id in 0..600u64 {
            if next(3) == 0 && !live.is_empty() {
                let (i, ids, input, h) = live.swap_remove(next(live.len() as u64) as usize);
                let ok = next(2) == 0;
                end(&mut t, &mut p, i, h, ok.then_some((&ids[..], input)));
            } else {
                let depth = 1 + next(4);
                let ids: Vec<u64> = (0..depth).map(|k| k * 10 + next(2)).collect();
                let input = depth as u32 * 512 - next(100) as u32;
                t.remember(id, vec![999 + id]);
                let prefix = t.match_prefix(id, &ids, input);
                let delta = input.div_ceil(128) - prefix;
                t.evict_for(delta, &mut p);
                match p.alloc(id, delta, false) {
                    Some(mut h) => {
                        t.admitted(id, input, &mut h);
                        live.push((id, ids, input, h));
                    }
                    None => {
                        t.unmatch(id);
                        t.forget(id);
                    }
                }
            }
            let hs: Vec<&Holding> = live.iter().map(|x| &x.3).collect();
            conserved(&t, &p, &hs);
        }
    }
}
