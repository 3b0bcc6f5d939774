//! The shared Mooncake Store: HiCache's storage tier (`hicache_storage_backend = "mooncake"`),
//! one KV pool in some nodes' DRAM that every prefill instance of the pools using it reads and
//! writes (`docs/sglang-pd.md` §18).
//!
//! Blocks are Mooncake-style 512-token prefix blocks, kept in a [`PrefixCache`] (a block is
//! only reusable with its whole prefix, as HiCache's prefix-keyed pages are). A write becomes
//! visible when it completes: [`KvStore::write`] queues the blocks with their completion time,
//! and every read first applies the writes completed by then, in completion order
//! ([`KvStore::settle`]). Capacity is in tokens (whole blocks); a full store evicts least
//! recently used leaves (`lru`) or takes no more (`none`).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::prefix_cache::PrefixCache;
use crate::engine::Nanos;
use crate::workload::trace::HASH_BLOCK_TOKENS;

/// The store of a run.
#[derive(Debug)]
pub struct KvStore {
    blocks: PrefixCache,
    evict: bool,
    /// Writes completed but not yet applied: (completion ns, sequence, blocks).
    pending: BinaryHeap<Reverse<(Nanos, u64, Vec<u64>)>>,
    /// Blocks whose write is on its way (a second writer skips them, as Mooncake's master
    /// refuses a put of a key already being put).
    writing: std::collections::HashSet<u64>,
    writes: u64,
    /// Blocks written (new to the store).
    pub written_blocks: u64,
    /// Blocks offered that a full store (`none`) did not take.
    pub skipped_blocks: u64,
    /// Blocks read by prefetches.
    pub read_blocks: u64,
    /// Blocks a decode offload landed whose prefix the store did not hold (dropped).
    pub orphaned_blocks: u64,
}

impl KvStore {
    /// An empty store of `capacity_tokens` (`None`: unbounded).
    pub fn new(capacity_tokens: Option<u64>, evict: bool) -> Self {
        Self {
            blocks: PrefixCache::new(capacity_tokens),
            evict,
            pending: BinaryHeap::new(),
            writing: std::collections::HashSet::new(),
            writes: 0,
            written_blocks: 0,
            skipped_blocks: 0,
            read_blocks: 0,
            orphaned_blocks: 0,
        }
    }

    /// Applies every write completed by `now`, in completion order.
    pub fn settle(&mut self, now: Nanos) {
        while let Some(Reverse((t, _, _))) = self.pending.peek()
            && *t <= now
        {
            let Reverse((t, _, ids)) = self.pending.pop().expect("peeked");
            let held = u64::from(self.blocks.peek_blocks(&ids));
            let new = self.blocks.write(&ids, t, self.evict);
            self.written_blocks += new;
            self.skipped_blocks += ids.len() as u64 - held - new;
        }
    }

    /// Queues a write of the prompt blocks `hash_ids` that completes at `done_ns`.
    pub fn write(&mut self, hash_ids: &[u64], done_ns: Nanos) {
        if hash_ids.is_empty() {
            return;
        }
        self.pending
            .push(Reverse((done_ns, self.writes, hash_ids.to_vec())));
        self.writes += 1;
    }

    /// A writer starts putting the prompt blocks `hash_ids` at `now`: the leading blocks the
    /// store holds or is already being written are skipped (sglang's backend puts only the keys
    /// `batch_is_exist` does not find). Returns how many lead are skipped; the rest are in
    /// flight until [`KvStore::finish_write`].
    pub fn begin_write(&mut self, hash_ids: &[u64], now: Nanos) -> usize {
        let held = self.held(hash_ids, now) as usize;
        let from = held
            + hash_ids[held..]
                .iter()
                .take_while(|id| self.writing.contains(id))
                .count();
        self.writing.extend(&hash_ids[from..]);
        from
    }

    /// The write of `hash_ids[from..]` (what [`KvStore::begin_write`] returned `from` for and
    /// left in flight) ended at `now`: landed (`ok`), its blocks are readable from now on;
    /// failed, they are not in the store. The store is keyed by prefix, so the write is applied
    /// as the whole prefix `hash_ids` (its first `from` blocks were held or being written: a
    /// block another writer is still putting becomes readable with this one).
    pub fn finish_write(&mut self, hash_ids: &[u64], from: usize, now: Nanos, ok: bool) {
        for id in &hash_ids[from..] {
            self.writing.remove(id);
        }
        if ok {
            self.write(hash_ids, now);
        }
    }

    /// A decode's offload starts putting the blocks `path[start..]` at `now`: `path` is the
    /// request's full prompt blocks and then its answer blocks up to this write's, and
    /// `path[..start]` are not this writer's (the prefill wrote the prompt; earlier offloads
    /// the answer's first blocks). Of its own, the leading ones the store holds or another
    /// writer is putting are skipped, as in [`KvStore::begin_write`]. Returns where its put
    /// starts; `path[from..]` are in flight until [`KvStore::finish_offload`].
    pub fn begin_offload(&mut self, path: &[u64], start: usize, now: Nanos) -> usize {
        let held = (self.held(path, now) as usize).max(start);
        let from = held
            + path[held..]
                .iter()
                .take_while(|id| self.writing.contains(id))
                .count();
        self.writing.extend(&path[from..]);
        from
    }

    /// The offload of `path[from..]` ([`KvStore::begin_offload`]) ended at `now`. Landed, its
    /// blocks are readable from now on if every block before them is held or being put (a
    /// block is only reachable with its whole prefix: sglang's storage lookup stops at the
    /// first page it does not find, `HiCacheController._storage_hit_query`); otherwise they
    /// are orphans and are dropped. Returns whether they were kept.
    pub fn finish_offload(&mut self, path: &[u64], from: usize, now: Nanos, ok: bool) -> bool {
        for id in &path[from..] {
            self.writing.remove(id);
        }
        if !ok {
            return false;
        }
        let held = self.held(path, now) as usize;
        let reachable = held >= from || path[held..from].iter().all(|id| self.writing.contains(id));
        if reachable {
            self.write(path, now);
        } else {
            self.orphaned_blocks += (path.len() - from) as u64;
        }
        reachable
    }

    /// The prompt's leading blocks the store holds at `now`, after the writes completed by then.
    pub fn held(&mut self, hash_ids: &[u64], now: Nanos) -> u32 {
        self.settle(now);
        self.blocks.peek_blocks(hash_ids)
    }

    /// A prefetch reads the prompt's leading blocks from `from` on at `now`: each block held is
    /// touched (LRU recency) and the ones read counted. Returns the leading blocks held.
    pub fn read(&mut self, hash_ids: &[u64], from: u32, now: Nanos) -> u32 {
        let held = self.held(hash_ids, now);
        if held > from {
            self.blocks.touch_prefix(&hash_ids[..held as usize], now);
            self.read_blocks += u64::from(held - from);
        }
        held
    }

    /// Blocks held now.
    pub fn blocks(&self) -> u64 {
        self.blocks.cached_blocks()
    }

    /// Blocks evicted so far.
    pub fn evicted_blocks(&self) -> u64 {
        self.blocks.evicted_blocks()
    }

    /// Tokens of `blocks` whole blocks.
    pub fn tokens(blocks: u32) -> u64 {
        u64::from(blocks) * u64::from(HASH_BLOCK_TOKENS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_readable_once_its_write_completes() {
        let mut s = KvStore::new(None, true);
        s.write(&[1, 2, 3], 100);
        assert_eq!(s.read(&[1, 2, 3], 0, 99), 0, "not yet written");
        assert_eq!(s.read(&[1, 2, 3], 0, 100), 3);
        assert_eq!(s.read(&[1, 2, 9], 1, 101), 2);
        assert_eq!(s.read_blocks, 3 + 1);
        assert_eq!(s.written_blocks, 3);
        // Writes apply in completion order, not queueing order.
        s.write(&[7, 8], 300);
        s.write(&[7], 200);
        assert_eq!(s.read(&[7, 8], 0, 250), 1);
        assert_eq!(s.read(&[7, 8], 0, 300), 2);
        assert_eq!(s.written_blocks, 5);
    }

    #[test]
    fn a_full_store_evicts_lru_or_refuses() {
        let cap = Some(2 * u64::from(HASH_BLOCK_TOKENS));
        let mut lru = KvStore::new(cap, true);
        lru.write(&[1], 1);
        lru.write(&[2], 2);
        lru.settle(2);
        assert_eq!(lru.read(&[1], 0, 3), 1, "reading 1 makes 2 the oldest");
        lru.write(&[3], 4);
        lru.settle(4);
        assert_eq!(lru.blocks(), 2);
        assert_eq!(lru.evicted_blocks(), 1);
        assert_eq!(lru.read(&[2], 0, 5), 0);
        assert_eq!(lru.read(&[1], 0, 5), 1);
        let mut none = KvStore::new(cap, false);
        none.write(&[1, 2, 3], 1);
        none.settle(1);
        assert_eq!(none.blocks(), 2);
        assert_eq!(none.read(&[1, 2, 3], 0, 2), 2);
        assert_eq!(none.evicted_blocks(), 0);
        assert_eq!(none.skipped_blocks, 1);
    }

    #[test]
    fn a_second_writer_skips_what_is_held_or_on_its_way() {
        let mut s = KvStore::new(None, true);
        s.write(&[1], 0);
        assert_eq!(s.begin_write(&[1, 2, 3], 10), 1, "block 1 is held");
        // Blocks 2 and 3 are on their way: another writer of [1, 2, 3, 4] only puts 4.
        assert_eq!(s.begin_write(&[1, 2, 3, 4], 11), 3);
        assert_eq!(
            s.read(&[1, 2, 3], 0, 12),
            1,
            "not readable before the write lands"
        );
        s.finish_write(&[1, 2, 3], 1, 20, true);
        s.finish_write(&[1, 2, 3, 4], 3, 21, false);
        assert_eq!(
            s.read(&[1, 2, 3, 4], 0, 22),
            3,
            "the failed write left 4 out"
        );
        assert_eq!(
            s.begin_write(&[1, 2, 3, 4], 23),
            3,
            "4 may be written again"
        );
    }

    /// A decode's offload puts only its own blocks, and they are readable only under a prompt
    /// the store holds (or is being written): otherwise they are orphans.
    #[test]
    fn an_offload_extends_the_prompt_the_prefill_wrote() {
        let mut s = KvStore::new(None, true);
        // The prompt [1, 2] is held; the offload of answer block 7 puts 7 only.
        s.write(&[1, 2], 0);
        assert_eq!(s.begin_offload(&[1, 2, 7], 2, 10), 2);
        assert_eq!(s.read(&[1, 2, 7], 0, 11), 2, "not before it lands");
        assert!(s.finish_offload(&[1, 2, 7], 2, 20, true));
        assert_eq!(s.read(&[1, 2, 7, 8], 0, 21), 3);
        // A prompt the store does not hold ([5, 6]) leaves the answer unreachable, though its
        // bytes moved.
        assert_eq!(
            s.begin_offload(&[5, 6, 9], 2, 30),
            2,
            "never puts the prompt"
        );
        assert!(!s.finish_offload(&[5, 6, 9], 2, 40, true));
        assert_eq!(s.orphaned_blocks, 1);
        assert_eq!(s.read(&[5, 6, 9], 0, 41), 0);
        // Two offloads of one request in flight at once: the second lands first, its prefix
        // block (being put) makes it reachable, as for write-backs.
        assert_eq!(s.begin_offload(&[1, 2, 7, 8], 3, 50), 3);
        assert_eq!(s.begin_offload(&[1, 2, 7, 8, 9], 4, 51), 4);
        assert!(s.finish_offload(&[1, 2, 7, 8, 9], 4, 60, true));
        assert!(s.finish_offload(&[1, 2, 7, 8], 3, 61, true));
        assert_eq!(s.read(&[1, 2, 7, 8, 9], 0, 62), 5);
        // A failed offload makes nothing readable and frees its blocks for another writer.
        assert_eq!(s.begin_offload(&[1, 2, 7, 8, 9, 10], 5, 70), 5);
        assert!(!s.finish_offload(&[1, 2, 7, 8, 9, 10], 5, 80, false));
        assert_eq!(s.begin_offload(&[1, 2, 7, 8, 9, 10], 5, 81), 5);
    }
}
