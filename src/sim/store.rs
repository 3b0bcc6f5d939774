//! The Mooncake Store's traffic as fabric flows: HiCache's prefetch reads and write-backs
//! (`sglang::hicache`, `sglang::kv_store`; `docs/sglang-pd.md` §18).
//!
//! A store operation moves whole 512-token blocks between the store's DRAM on `[kv_store].nodes`
//! and a prefill instance's host memory. How pdsim lays it on the fabric, and why:
//!
//! * **Where a block lives.** Mooncake's master places each object on a segment it picks
//!   (`AllocationStrategy`, random among segments with room); pdsim places a block on one store
//!   node by a hash of its id ([`node_of`]), so an operation's blocks spread over the store nodes
//!   as the master's choice does, and the same block is always in the same place.
//! * **Who moves it.** Every attention-TP rank of the instance has its own host pool and its own
//!   storage client (sglang's HiCache runs one cache controller per rank; its Mooncake keys carry
//!   the rank), so each rank moves its share of a block: `block bytes / ranks`.
//! * **One batch per (store node, rank)**: a rank's blocks on one node go as one Mooncake batch
//!   (`batch_get_into` / `batch_put_from` submit all keys at once), `pages` objects of it (the
//!   host pool's `page_first` layout keeps a page's layers together, one object per page), from
//!   the store node's NIC of the rank's local index (its rail) to the rank's preferred NIC. The
//!   flow crosses no GPU transfer-engine link (both ends are DRAM) and shares NICs and switches
//!   with KV transfers and DeepEP all-to-all — which is the point: the store's prefix traffic
//!   competes with the transfers it is meant to shorten.
//! * **A replica on the rank's own node** is a local copy (Mooncake Store's
//!   `TransferSubmitter::selectStrategy` picks `LOCAL_MEMCPY` for a local replica), at
//!   [`LOCAL_COPY_BYTES_PER_NS`], off the fabric.
//!
//! A read's progress is what its batches have landed: a block is in host memory when every rank
//! has its share of it; blocks count from the front of the prompt ([`arrived_blocks`]). A write
//! makes its blocks readable when its last batch lands; a failed or aborted batch fails the
//! operation (a read keeps what landed, a write makes nothing readable), as sglang treats a
//! failed storage I/O as a miss.

use std::collections::BTreeMap;

use crate::engine::Nanos;
use crate::fabric::{FlowEnd, FlowId, FlowOutcome, GpuId};
use crate::metrics::summary::KvStoreTraffic;

use super::World;
use crate::vocab::event::Event;
use crate::vocab::ids::PrefillId;
use crate::vocab::requests::ReqRef;

/// The bit that marks a store batch's token (a KV transfer's token is `prefill << 32 | shard`,
/// far below it; an all-to-all flow's has bit 63).
const STORE_TOKEN: u64 = 1 << 62;
/// Low bits of a store token that number the batch within its operation.
const PART_BITS: u32 = 24;

/// A local replica's copy rate, bytes/ns. Mooncake Store copies a local replica with
/// `memcpy` on a pool of async workers (`local_memcpy_async_worker_num`, 32 by default); a
/// handful of threads copying multi-MB pages reach ~20 GB/s on a server socket (a single
/// `memcpy` stream runs at ~8–12 GB/s on current Xeon and EPYC parts). An assumption, stated
/// here, not a fit.
pub const LOCAL_COPY_BYTES_PER_NS: f64 = 20.0;

/// The operation and batch a store flow's `token` belongs to, if it is one's.
pub(super) fn part_of(token: u64) -> Option<(u32, u32)> {
    (token & STORE_TOKEN != 0 && token & (1 << 63) == 0).then_some((
        ((token & !STORE_TOKEN) >> PART_BITS) as u32,
        (token & ((1 << PART_BITS) - 1)) as u32,
    ))
}

fn token(op: u32, part: u32) -> u64 {
    STORE_TOKEN | (u64::from(op) << PART_BITS) | u64::from(part)
}

/// The store node (an index into `[kv_store].nodes`) of the block `hash_id`: a SplitMix64
/// finaliser of the id, so consecutive ids spread evenly.
pub fn node_of(hash_id: u64, nodes: usize) -> usize {
    let mut z = hash_id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z % nodes.max(1) as u64) as usize
}

/// Where one batch of an operation is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    /// On the fabric.
    Flow(FlowId),
    /// A local copy from `t0` to `t1`, ns.
    Copy { t0: Nanos, t1: Nanos },
    /// Every byte landed.
    Landed,
    /// It failed with this share of its bytes landed (0–1).
    Failed(f64),
}

/// What an operation does when its last batch ends.
#[derive(Clone, Debug)]
enum Kind {
    /// A prefetch of request `req` into prefill `prefill`'s host memory.
    Read { req: ReqRef, prefill: PrefillId },
    /// A write-back of the prompt blocks `ids`, of which the first `from` were not put (the
    /// store held them or another writer was putting them).
    Write { ids: Vec<u64>, from: usize },
}

/// One read or write: its batches, grouped by store node (`groups[g]` batches `g·ranks ..
/// (g+1)·ranks`, one per rank).
#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    started: Nanos,
    parts: Vec<Part>,
    /// Bytes of each part (every part of a group carries the same share).
    part_bytes: Vec<u64>,
    ranks: usize,
    /// For each block moved, in prompt order, its group (an index into the groups).
    order: Vec<u32>,
    /// Blocks per group.
    group_blocks: Vec<u32>,
    left: u32,
    failed: bool,
}

/// The store's operations in flight and the traffic so far.
#[derive(Default)]
pub(super) struct StoreFlows {
    ops: BTreeMap<u32, Op>,
    next: u32,
    /// Reads in flight per prefill instance (their progress is refreshed before it schedules).
    reading: BTreeMap<PrefillId, Vec<u32>>,
    /// Traffic figures for `summary.json`.
    pub(super) traffic: KvStoreTraffic,
}

/// Blocks of a read in host memory, from the front of the prompt: block `i` (the `k`-th of its
/// group `order[i]`) is in when `k < landed[group]`, the blocks every rank's batch of that
/// group has landed.
fn arrived_blocks(order: &[u32], landed: &[u32]) -> u32 {
    let mut seen = vec![0u32; landed.len()];
    for (i, &g) in order.iter().enumerate() {
        let g = g as usize;
        if seen[g] >= landed[g] {
            return i as u32;
        }
        seen[g] += 1;
    }
    order.len() as u32
}

impl World<'_> {
    /// Starts a store operation of prefill `p` on the prompt blocks `blocks` at `now`: reads
    /// into its host memory (`read`) or writes from it after `lead_ns` (the GPU → host copy).
    /// One batch per (store node, rank), a local copy where the node is the rank's own.
    fn start_store_op(
        &mut self,
        kind: Kind,
        p: PrefillId,
        blocks: &[u64],
        now: Nanos,
        lead_ns: Nanos,
    ) {
        let read = matches!(kind, Kind::Read { .. });
        let k = self
            .sc
            .kv_store
            .as_ref()
            .expect("a store has its parameters");
        let nodes = &k.nodes;
        let core = &self.prefills[p].core;
        let h = self.prefills[p]
            .hicache
            .as_deref()
            .expect("store traffic comes from HiCache");
        let block_bytes =
            u64::from(crate::workload::trace::HASH_BLOCK_TOKENS) * h.params.bytes_per_token;
        let pages_per_block =
            crate::workload::trace::HASH_BLOCK_TOKENS.div_ceil(core.page_size.max(1));
        let ranks = core.gpus.len().max(1);
        // Groups in store-node order; `slot[node index]` is the group of that node.
        let mut slot = vec![u32::MAX; nodes.len()];
        let mut group_nodes: Vec<usize> = Vec::new();
        let mut group_blocks: Vec<u32> = Vec::new();
        let mut order = Vec::with_capacity(blocks.len());
        for &id in blocks {
            let n = node_of(id, nodes.len());
            if slot[n] == u32::MAX {
                slot[n] = group_nodes.len() as u32;
                group_nodes.push(n);
                group_blocks.push(0);
            }
            group_blocks[slot[n] as usize] += 1;
            order.push(slot[n]);
        }
        let op_id = self.store.next;
        self.store.next = self.store.next.wrapping_add(1);
        let mut parts = Vec::with_capacity(group_nodes.len() * ranks);
        let mut part_bytes = Vec::with_capacity(parts.capacity());
        let gpus = core.gpus.clone();
        for (g, &n) in group_nodes.iter().enumerate() {
            let node = nodes[n];
            let c = u64::from(group_blocks[g]);
            let bytes = (c * block_bytes).div_ceil(ranks as u64);
            let objects = c * u64::from(pages_per_block);
            for &gpu in &gpus {
                let part = parts.len() as u32;
                part_bytes.push(bytes);
                if gpu.node == node {
                    let t0 = now + lead_ns;
                    let t1 = t0 + crate::engine::ceil_ns(bytes as f64 / LOCAL_COPY_BYTES_PER_NS);
                    self.q
                        .schedule_at(t1, Event::StoreCopied { op: op_id, part });
                    self.store.traffic.local_copy_bytes += bytes;
                    parts.push(Part::Copy { t0, t1 });
                } else {
                    let far = GpuId {
                        node,
                        local: gpu.local,
                    };
                    let (src, dst) = if read { (far, gpu) } else { (gpu, far) };
                    let f = self.fabric.start_store(
                        now,
                        lead_ns,
                        (src, dst, gpu),
                        (bytes, objects),
                        token(op_id, part),
                    );
                    if read {
                        self.store.traffic.fabric_read_bytes += bytes;
                    } else {
                        self.store.traffic.fabric_write_bytes += bytes;
                    }
                    parts.push(Part::Flow(f));
                }
            }
        }
        if read {
            self.store.traffic.reads += 1;
            self.store.reading.entry(p).or_default().push(op_id);
        } else {
            self.store.traffic.writes += 1;
        }
        let left = parts.len() as u32;
        let old = self.store.ops.insert(
            op_id,
            Op {
                kind,
                started: now,
                parts,
                part_bytes,
                ranks,
                order,
                group_blocks,
                left,
                failed: false,
            },
        );
        debug_assert!(
            old.is_none(),
            "operation ids are not reused while in flight"
        );
        self.fabric_sync();
    }

    /// HiCache's prefetch of request `r` from the shared store, started as prefill `p`'s
    /// scheduler receives it at `now` (`HiRadixCache.prefetch_from_storage`): the blocks past
    /// the instance's own tiers that the store holds now, when there are at least
    /// `prefetch_threshold` tokens of them.
    pub(super) fn start_prefetch(&mut self, r: ReqRef, p: PrefillId, now: Nanos) {
        use crate::sglang::hicache::PREFETCH_THRESHOLD_TOKENS;
        use crate::sglang::kv_store::KvStore;
        use crate::vocab::requests::Prefetch;
        let Some(store) = self.kv_store.as_mut() else {
            return;
        };
        let server = &self.prefills[p];
        let Some(h) = server.hicache.as_deref().filter(|h| h.params.storage) else {
            return;
        };
        let Some(req) = self.reqs.get(r) else {
            return;
        };
        if req.hash_ids.is_empty() {
            return;
        }
        let device = server
            .cache
            .as_ref()
            .map_or(0, |c| c.peek_blocks(&req.hash_ids));
        let local = device.max(h.host_blocks(&req.hash_ids));
        let held = store.held(&req.hash_ids, now);
        let gain = KvStore::tokens(held)
            .min(u64::from(req.input))
            .saturating_sub(KvStore::tokens(local));
        if held <= local || gain < PREFETCH_THRESHOLD_TOKENS {
            return;
        }
        store.read(&req.hash_ids, local, now);
        let block_bytes = KvStore::tokens(1) * h.params.bytes_per_token;
        let blocks = req.hash_ids[local as usize..held as usize].to_vec();
        self.reqs.get_mut(r).expect("present").prefetch =
            Some(Prefetch::new(now, local, held - local, block_bytes));
        self.start_store_op(Kind::Read { req: r, prefill: p }, p, &blocks, now, 0);
    }

    /// Request `r`'s prefill on `p` ended at `now`: HiCache writes its blocks back to the shared
    /// store as the write policy says, skipping what the store holds or is being written
    /// (`HiCacheController.write_backup_storage`, `MooncakeStore._batch_set_v2_aggregated`).
    pub(super) fn write_back(&mut self, p: PrefillId, r: ReqRef, now: Nanos) {
        let Some(store) = self.kv_store.as_mut() else {
            return;
        };
        let Some(h) = self.prefills[p]
            .hicache
            .as_deref_mut()
            .filter(|h| h.params.storage)
        else {
            return;
        };
        let Some(req) = self.reqs.get(r) else {
            return;
        };
        let n = h.blocks_to_store(req.hash_ids.len(), req.local_hit_tokens);
        if n == 0 {
            return;
        }
        let ids = req.hash_ids[..n].to_vec();
        let from = store.begin_write(&ids, now);
        if from == n {
            return;
        }
        let bytes = (n - from) as u64
            * u64::from(crate::workload::trace::HASH_BLOCK_TOKENS)
            * h.params.bytes_per_token;
        h.counts.store_write_bytes += bytes;
        let lead = h.copy_ns(bytes);
        let blocks = ids[from..].to_vec();
        self.start_store_op(Kind::Write { ids, from }, p, &blocks, now, lead);
    }

    /// A store flow ended (`flow_ended` dispatches here by its token).
    pub(super) fn store_flow_ended(&mut self, end: &FlowEnd, op: u32, part: u32) {
        let state = if end.outcome == FlowOutcome::Completed {
            Part::Landed
        } else {
            Part::Failed(end.delivered_bytes / end.bytes.max(1) as f64)
        };
        self.store_part_ended(op, part, state);
    }

    /// A local copy of a store operation ended.
    pub(super) fn on_store_copied(&mut self, op: u32, part: u32) {
        self.store_part_ended(op, part, Part::Landed);
    }

    fn store_part_ended(&mut self, op_id: u32, part: u32, state: Part) {
        let now = self.q.now();
        let Some(op) = self.store.ops.get_mut(&op_id) else {
            return;
        };
        op.failed |= matches!(state, Part::Failed(_));
        op.parts[part as usize] = state;
        op.left -= 1;
        if op.left > 0 {
            return;
        }
        let op = self.store.ops.remove(&op_id).expect("present");
        if op.failed {
            self.store.traffic.failed += 1;
        }
        match op.kind {
            Kind::Write { ids, from } => {
                if let Some(store) = self.kv_store.as_mut() {
                    store.finish_write(&ids, from, now, !op.failed);
                }
            }
            Kind::Read { req, prefill } => {
                if let Some(v) = self.store.reading.get_mut(&prefill) {
                    v.retain(|&o| o != op_id);
                }
                let dt = now - op.started;
                let t = &mut self.store.traffic;
                t.read_ns_total += dt;
                t.read_ns_max = t.read_ns_max.max(dt);
                let arrived = arrived_of(&op, &self.fabric, now);
                let Some(q) = self.reqs.get_mut(req) else {
                    return;
                };
                if let Some(pf) = q.prefetch.as_mut() {
                    pf.arrived = arrived;
                    pf.done_ns = Some(now);
                }
                // A request its policy held back from the prefill's scheduler goes on now.
                if let Some(at) = q.metadata_at.take() {
                    self.q
                        .schedule_at(at.max(now), Event::MetadataArrived { req });
                }
            }
        }
    }

    /// Brings the progress of prefill `p`'s prefetches in flight up to `now`, before its
    /// scheduler looks at them (what `best_effort` takes, and a `timeout` cut-off, are what has
    /// landed then).
    pub(super) fn refresh_prefetches(&mut self, p: PrefillId) {
        // Most calls: no store, or nothing in flight here.
        if self.store.reading.is_empty() {
            return;
        }
        let Some(ops) = self.store.reading.get(&p) else {
            return;
        };
        let now = self.q.now();
        for &o in ops {
            let op = &self.store.ops[&o];
            let Kind::Read { req, .. } = op.kind else {
                continue;
            };
            let arrived = arrived_of(op, &self.fabric, now);
            if let Some(pf) = self.reqs.get_mut(req).and_then(|q| q.prefetch.as_mut()) {
                pf.arrived = arrived;
            }
        }
    }
}

/// Blocks of read `op` in host memory at `now`, from the fabric's progress of its batches.
fn arrived_of(op: &Op, fabric: &crate::fabric::Fabric, now: Nanos) -> u32 {
    let landed: Vec<u32> = op
        .group_blocks
        .iter()
        .enumerate()
        .map(|(g, &blocks)| {
            let share = (g * op.ranks..(g + 1) * op.ranks)
                .map(|i| match op.parts[i] {
                    Part::Landed => 1.0,
                    Part::Failed(f) => f,
                    Part::Flow(id) => {
                        fabric.flow_landed_bytes_at(id, now) / op.part_bytes[i].max(1) as f64
                    }
                    Part::Copy { t1, .. } if now >= t1 => 1.0,
                    Part::Copy { t0, t1 } => {
                        now.saturating_sub(t0) as f64 / (t1 - t0).max(1) as f64
                    }
                })
                .fold(1.0f64, f64::min);
            // Whole blocks only; a block is in when every rank has all of its share.
            ((share * f64::from(blocks)) + 1e-9)
                .floor()
                .min(f64::from(blocks)) as u32
        })
        .collect();
    arrived_blocks(&op.order, &landed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_tokens_never_look_like_other_tokens() {
        assert_eq!(part_of(token(7, 3)), Some((7, 3)));
        assert_eq!(
            part_of(token(u32::MAX, (1 << PART_BITS) - 1)),
            Some((u32::MAX, (1 << PART_BITS) - 1))
        );
        // A KV transfer's token (prefill << 32 | shard) and an all-to-all's (bit 63).
        assert_eq!(part_of((5u64 << 32) | 3), None);
        assert_eq!(part_of((1 << 63) | 9), None);
    }

    #[test]
    fn blocks_spread_over_the_store_nodes() {
        let mut count = [0u32; 4];
        for id in 0..4000u64 {
            count[node_of(id, 4)] += 1;
        }
        assert!(count.iter().all(|&c| (900..1100).contains(&c)), "{count:?}");
        assert_eq!(node_of(12345, 1), 0);
        assert_eq!(
            node_of(12345, 4),
            node_of(12345, 4),
            "a block has one place"
        );
    }

    #[test]
    fn a_read_arrives_from_the_front_of_the_prompt() {
        // Blocks alternate between groups 0 and 1.
        let order = [0, 1, 0, 1, 0];
        assert_eq!(arrived_blocks(&order, &[3, 2]), 5);
        assert_eq!(
            arrived_blocks(&order, &[3, 1]),
            3,
            "block 3 is group 1's second"
        );
        assert_eq!(
            arrived_blocks(&order, &[0, 2]),
            0,
            "the first block is not in"
        );
        assert_eq!(arrived_blocks(&order, &[1, 0]), 1);
    }
}
