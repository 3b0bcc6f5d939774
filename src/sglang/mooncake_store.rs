//! The Mooncake Store's traffic as fabric flows: HiCache's prefetch reads and write-backs
//! (`sglang::hicache`, `sglang::kv_store`; `docs/sglang-pd.md` §18): the component that owns
//! the store's object table, its clients' shapes and its operations in flight. `World` routes
//! to it what HiCache and a decode's offload start (a decode's offload as an
//! [`Effect::Offload`]), and the ends of its flows and copies; the component reaches the
//! queue, the fabric and the request table through a [`StoreCtx`] and pushes what it asks of
//! another component as effects (`sglang::effect`): a decode's host blocks freed
//! ([`Effect::OffloadWritten`]), a prefill's write-back counted ([`Effect::StoreWriteCounted`]).
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
//!
//! A decode instance that offloads its generated KV (`disaggregation_decode_enable_offload_kvcache`,
//! `sglang::decode_offload`) is a client too: after the step that completes a block of a
//! request's output, the block is copied GPU → host (the offload's own host pool) and written
//! to the store exactly as a write-back is, from the decode's GPUs' NICs — the same NICs whose
//! receive side carries the KV transfers into that decode.

use std::collections::BTreeMap;

use super::kv_store::KvStore;
use super::{Effect, FabricTimer};
use crate::engine::{EventQueue, Nanos};
use crate::fabric::{FlowId, FlowOutcome, GpuId};
use crate::metrics::summary::KvStoreTraffic;
use crate::vocab::event::Event;
use crate::vocab::flow::FlowTag;
use crate::vocab::ids::{DecodeId, IdVec, PrefillId};
use crate::vocab::requests::{ReqRef, Requests};

type Fabric = crate::fabric::Fabric<FlowTag>;

/// A local replica's copy rate, bytes/ns. Mooncake Store copies a local replica with
/// `memcpy` on a pool of async workers (`local_memcpy_async_worker_num`, 32 by default); a
/// handful of threads copying multi-MB pages reach ~20 GB/s on a server socket (a single
/// `memcpy` stream runs at ~8–12 GB/s on current Xeon and EPYC parts). An assumption, stated
/// here, not a fit.
pub const LOCAL_COPY_BYTES_PER_NS: f64 = 20.0;

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

/// Whose host memory an operation moves bytes to or from.
#[derive(Clone, Copy, Debug)]
enum Client {
    /// A prefill instance's HiCache.
    Prefill(PrefillId),
    /// A decode instance's offload.
    Decode(DecodeId),
}

/// What an operation does when its last batch ends.
#[derive(Clone, Debug)]
enum Kind {
    /// A prefetch of request `req` into prefill `prefill`'s host memory.
    Read { req: ReqRef, prefill: PrefillId },
    /// A write-back of the prompt blocks `ids`, of which the first `from` were not put (the
    /// store held them or another writer was putting them).
    Write { ids: Vec<u64>, from: usize },
    /// A decode offload by `decode` of `path[from..]` (`path`: the request's full prompt
    /// blocks, then its answer blocks up to this offload's), which holds `blocks` blocks of
    /// the decode's host pool until it ends.
    Offload {
        decode: DecodeId,
        path: Vec<u64>,
        from: usize,
        blocks: u32,
    },
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

/// The shared Mooncake Store as its clients see it: the object table (`[kv_store]`, if the
/// scenario has one), its operations in flight and the traffic so far.
#[derive(Default)]
pub struct MooncakeStore {
    /// What the store holds (`sglang::kv_store`); `None` without `[kv_store]` (a decode's
    /// offload then only copies to its host pool).
    objects: Option<KvStore>,
    /// The store nodes (`[kv_store].nodes`).
    nodes: Vec<u32>,
    ops: BTreeMap<u32, Op>,
    next: u32,
    /// Reads in flight per prefill instance (their progress is refreshed before it schedules).
    reading: BTreeMap<PrefillId, Vec<u32>>,
    /// Traffic figures for `summary.json`.
    traffic: KvStoreTraffic,
    /// Each prefill instance's shape as a client, if its HiCache has a storage backend.
    prefills: IdVec<PrefillId, Option<ClientShape>>,
    /// Each decode instance's shape as a client, if it offloads its KV.
    decodes: IdVec<DecodeId, Option<ClientShape>>,
}

/// What a store operation needs of its client (fixed for the run): the GPUs of its
/// attention-TP ranks, its KV bytes per token (all ranks together), its page size, tokens,
/// and its GPU → host copy rate, bytes/ns.
#[derive(Clone, Debug)]
pub struct ClientShape {
    /// One GPU per rank, each moving its share.
    pub gpus: Vec<GpuId>,
    /// KV bytes per token, all ranks.
    pub bytes_per_token: u64,
    /// Tokens per page.
    pub page_size: u32,
    /// The GPU → host copy before a write, all ranks' PCIe links together, bytes/ns.
    pub pcie_bytes_per_ns: f64,
}

impl ClientShape {
    /// The GPU → host copy of `bytes` (all ranks) before a write can start, ns: each rank
    /// copies its share over its own PCIe link (`HiCache::copy_ns`, the same rule).
    fn copy_ns(&self, bytes: u64) -> Nanos {
        crate::engine::ceil_ns(bytes as f64 / self.pcie_bytes_per_ns)
    }

    /// Bytes of `blocks` whole blocks, all ranks.
    fn block_bytes(&self, blocks: u64) -> u64 {
        blocks * u64::from(crate::workload::trace::HASH_BLOCK_TOKENS) * self.bytes_per_token
    }
}

/// What the store borrows of the world for one call: the queue (local copies end as events,
/// a held-back request goes on), the fabric and its one due timer, the request table (a
/// read's progress is its request's) and the effects buffer `World` applies after the call.
pub struct StoreCtx<'a> {
    /// The event queue; its clock is the simulated now.
    pub q: &'a mut EventQueue<Event>,
    /// The fabric the batches cross.
    pub fabric: &'a mut Fabric,
    /// The fabric's pending `FabricDue` event, kept at its next due time.
    pub timer: &'a mut FabricTimer,
    /// Every request in flight.
    pub reqs: &'a mut Requests,
    /// Where the call pushes its effects, in order.
    pub fx: &'a mut Vec<Effect>,
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

/// An operation's blocks grouped by the store node that holds them, in order of first
/// appearance.
struct Groups {
    /// Store node index of each group.
    nodes: Vec<usize>,
    /// Blocks in each group.
    blocks: Vec<u32>,
    /// The group of each block, in the operation's block order.
    order: Vec<u32>,
}

impl Groups {
    fn of(blocks: &[u64], node_count: usize) -> Self {
        // `slot[node index]` is the group of that node.
        let mut slot = vec![u32::MAX; node_count];
        let mut g = Groups {
            nodes: Vec::new(),
            blocks: Vec::new(),
            order: Vec::with_capacity(blocks.len()),
        };
        for &id in blocks {
            let n = node_of(id, node_count);
            if slot[n] == u32::MAX {
                slot[n] = g.nodes.len() as u32;
                g.nodes.push(n);
                g.blocks.push(0);
            }
            g.blocks[slot[n] as usize] += 1;
            g.order.push(slot[n]);
        }
        g
    }
}

impl MooncakeStore {
    /// The store of `[kv_store]` (`objects`, on `nodes`) and its clients: each prefill's and
    /// decode's shape if it is one. When a decode offloads, the offload's figures are
    /// reported even if it moves nothing.
    pub fn new(
        objects: Option<KvStore>,
        nodes: Vec<u32>,
        prefills: IdVec<PrefillId, Option<ClientShape>>,
        decodes: IdVec<DecodeId, Option<ClientShape>>,
    ) -> Self {
        let offload = decodes.iter().any(Option::is_some);
        let mut s = Self {
            objects,
            nodes,
            prefills,
            decodes,
            ..Self::default()
        };
        if offload {
            s.traffic.decode_offload = Some(Default::default());
        }
        s
    }

    /// Whether the scenario has a shared store.
    pub fn present(&self) -> bool {
        self.objects.is_some()
    }

    /// The traffic so far.
    pub fn traffic(&self) -> KvStoreTraffic {
        self.traffic
    }

    /// `summary.json` `kv_store` at `now` (the object table settled to it), for a store of
    /// `capacity_tokens`, with the decode offloads' `host` figures (blocks never offloaded for
    /// want of host room, steps an offload waited for it; summed over the decodes); `None`
    /// without a store.
    pub fn summary(
        &mut self,
        now: Nanos,
        capacity_tokens: Option<u64>,
        (host_full_blocks, host_waits): (u64, u64),
    ) -> Option<crate::metrics::summary::KvStoreSummary> {
        // Every client of the store stores the same bytes per token (checked at load).
        let bpt = (self.prefills.iter().chain(self.decodes.iter()))
            .flatten()
            .next()
            .map_or(0, |c| c.bytes_per_token);
        let mut traffic = self.traffic;
        if let Some(t) = traffic.decode_offload.as_mut() {
            t.host_full_blocks += host_full_blocks;
            t.host_waits += host_waits;
        }
        let s = self.objects.as_mut()?;
        s.settle(now);
        let block = u64::from(crate::workload::trace::HASH_BLOCK_TOKENS) * bpt;
        Some(crate::metrics::summary::KvStoreSummary {
            capacity_tokens,
            nodes: self.nodes.clone(),
            blocks: s.blocks(),
            written_blocks: s.written_blocks,
            write_bytes: s.written_blocks * block,
            skipped_blocks: s.skipped_blocks,
            evicted_blocks: s.evicted_blocks(),
            prefetched_blocks: s.read_blocks,
            prefetched_bytes: s.read_blocks * block,
            traffic,
        })
    }

    /// Whether no store operation is in flight.
    pub fn idle(&self) -> bool {
        self.ops.is_empty()
    }

    /// The decode offload's figures (present from the start of a run where a decode offloads).
    fn offload_mut(&mut self) -> &mut crate::metrics::summary::DecodeOffloadTraffic {
        offload_of(&mut self.traffic)
    }

    /// Starts a store operation of `client` on the blocks `blocks` at `now`: reads into its
    /// host memory or writes from it after `lead_ns` (the GPU → host copy). One batch per
    /// (store node, rank), a local copy where the node is the rank's own.
    fn start_op(
        &mut self,
        cx: &mut StoreCtx<'_>,
        (kind, client): (Kind, Client),
        blocks: &[u64],
        now: Nanos,
        lead_ns: Nanos,
    ) {
        let shape = match client {
            Client::Prefill(p) => self.prefills[p].as_ref(),
            Client::Decode(d) => self.decodes[d].as_ref(),
        }
        .expect("only a client starts store operations");
        let block_bytes =
            u64::from(crate::workload::trace::HASH_BLOCK_TOKENS) * shape.bytes_per_token;
        let pages_per_block =
            crate::workload::trace::HASH_BLOCK_TOKENS.div_ceil(shape.page_size.max(1));
        let ranks = shape.gpus.len().max(1);
        let groups = Groups::of(blocks, self.nodes.len());
        let op_id = self.next;
        self.next = self.next.wrapping_add(1);
        let mut parts = Vec::with_capacity(groups.nodes.len() * ranks);
        let mut part_bytes = Vec::with_capacity(parts.capacity());
        for (g, &n) in groups.nodes.iter().enumerate() {
            let c = u64::from(groups.blocks[g]);
            let bytes = (c * block_bytes).div_ceil(ranks as u64);
            let objects = c * u64::from(pages_per_block);
            for &gpu in &shape.gpus {
                let part = parts.len() as u32;
                part_bytes.push(bytes);
                let at = (now, lead_ns);
                let node = self.nodes[n];
                parts.push(start_part(
                    &mut self.traffic,
                    cx,
                    &kind,
                    (op_id, part),
                    at,
                    (gpu, node),
                    (bytes, objects),
                ));
            }
        }
        self.count_op(&kind, client, op_id);
        let left = parts.len() as u32;
        let old = self.ops.insert(
            op_id,
            Op {
                kind,
                started: now,
                parts,
                part_bytes,
                ranks,
                order: groups.order,
                group_blocks: groups.blocks,
                left,
                failed: false,
            },
        );
        debug_assert!(
            old.is_none(),
            "operation ids are not reused while in flight"
        );
        cx.timer.sync(cx.q, cx.fabric);
    }

    /// Counts a started operation in the traffic totals; a prefill's read is also filed
    /// under the prefill, which waits on it.
    fn count_op(&mut self, kind: &Kind, client: Client, op: u32) {
        if let (Kind::Read { .. }, Client::Prefill(p)) = (kind, client) {
            self.traffic.reads += 1;
            self.reading.entry(p).or_default().push(op);
        } else {
            self.traffic.writes += 1;
            if matches!(kind, Kind::Offload { .. }) {
                self.offload_mut().writes += 1;
            }
        }
    }

    /// HiCache's prefetch of request `r` from the store into prefill `p` at `now`
    /// (`HiRadixCache.prefetch_from_storage`), the instance's own tiers (device and host)
    /// holding its first `local` blocks: the blocks past them that the store holds now, when
    /// there are at least `prefetch_threshold` tokens of them. The request's `prefetch` tracks
    /// it. Nothing without a store, or when `p`'s HiCache has no storage backend.
    #[inline(never)]
    pub fn prefetch(&mut self, (r, p): (ReqRef, PrefillId), local: u32, cx: &mut StoreCtx<'_>) {
        use crate::sglang::hicache::PREFETCH_THRESHOLD_TOKENS;
        use crate::vocab::requests::Prefetch;
        let now = cx.q.now();
        let (Some(store), Some(shape)) = (self.objects.as_mut(), self.prefills[p].as_ref()) else {
            return;
        };
        let Some(req) = cx.reqs.get(r) else {
            return;
        };
        let held = store.held(&req.hash_ids, now);
        let gain = KvStore::tokens(held)
            .min(u64::from(req.input))
            .saturating_sub(KvStore::tokens(local));
        if held <= local || gain < PREFETCH_THRESHOLD_TOKENS {
            return;
        }
        store.read(&req.hash_ids, local, now);
        let block_bytes = shape.block_bytes(1);
        let blocks = req.hash_ids[local as usize..held as usize].to_vec();
        cx.reqs.get_mut(r).expect("present").prefetch =
            Some(Prefetch::new(now, local, held - local, block_bytes));
        self.start_op(
            cx,
            (Kind::Read { req: r, prefill: p }, Client::Prefill(p)),
            &blocks,
            now,
            0,
        );
    }

    /// HiCache of prefill `p` writes the prompt blocks `ids` back to the store at `now`, as its
    /// write policy chose them (`HiCacheController.write_backup_storage`): the first of them
    /// the store holds or another writer is putting are skipped
    /// (`MooncakeStore._batch_set_v2_aggregated`); the rest are copied GPU → host, counted
    /// in the prefill's figures ([`Effect::StoreWriteCounted`]), then put. Nothing without a
    /// store, or when `p`'s HiCache has no storage backend.
    #[inline(never)]
    pub fn write_back(&mut self, p: PrefillId, ids: Vec<u64>, cx: &mut StoreCtx<'_>) {
        let now = cx.q.now();
        let (Some(store), Some(shape)) = (self.objects.as_mut(), self.prefills[p].as_ref()) else {
            return;
        };
        let from = store.begin_write(&ids, now);
        if from == ids.len() {
            return;
        }
        let bytes = shape.block_bytes((ids.len() - from) as u64);
        let lead = shape.copy_ns(bytes);
        cx.fx.push(Effect::StoreWriteCounted { prefill: p, bytes });
        let blocks = ids[from..].to_vec();
        self.start_op(
            cx,
            (Kind::Write { ids, from }, Client::Prefill(p)),
            &blocks,
            now,
            lead,
        );
    }

    /// One offload of decode `d` (`Effect::Offload`): `blocks` blocks, `path[start..]`,
    /// copied GPU → host over the instance's PCIe links, then put to the store (what it holds
    /// or is being written is skipped, as for write-backs). An offload that puts nothing frees
    /// its host blocks at once ([`Effect::OffloadWritten`]).
    #[inline(never)]
    pub fn offload(
        &mut self,
        d: DecodeId,
        (path, start, blocks): (Vec<u64>, usize, u32),
        cx: &mut StoreCtx<'_>,
    ) {
        let now = cx.q.now();
        let shape = self.decodes[d].as_ref().expect("an offloading decode");
        let bytes = shape.block_bytes(u64::from(blocks));
        let lead = shape.copy_ns(bytes);
        let t = self.offload_mut();
        t.offloads += 1;
        t.blocks += u64::from(blocks);
        t.d2h_bytes += bytes;
        let written = Effect::OffloadWritten { decode: d, blocks };
        let Some(store) = self.objects.as_mut() else {
            cx.fx.push(written);
            return;
        };
        let from = store.begin_offload(&path, start, now);
        if from == path.len() {
            // Every block is in the store or on its way: the backup puts nothing and frees the
            // host pages.
            cx.fx.push(written);
            return;
        }
        self.offload_mut().put_blocks += (path.len() - from) as u64;
        let put = path[from..].to_vec();
        self.start_op(
            cx,
            (
                Kind::Offload {
                    decode: d,
                    path,
                    from,
                    blocks,
                },
                Client::Decode(d),
            ),
            &put,
            now,
            lead,
        );
    }

    /// A store flow ended (the fabric's end of `FlowTag::Store { op, part }`).
    #[inline(never)]
    pub fn flow_ended(
        &mut self,
        (op, part): (u32, u32),
        outcome: FlowOutcome,
        (delivered_bytes, bytes): (f64, u64),
        cx: &mut StoreCtx<'_>,
    ) {
        let state = if outcome == FlowOutcome::Completed {
            Part::Landed
        } else {
            Part::Failed(delivered_bytes / bytes.max(1) as f64)
        };
        self.part_ended(cx, op, part, state);
    }

    /// A local copy of a store operation ended (`Event::StoreCopied`).
    // The store's entry points are out of line: their call sites are `World::handle` and the
    // hot lifecycle handlers, whose inlining a scenario without a store must not pay for
    // (callgrind, foundation-100k).
    #[inline(never)]
    pub fn copied(&mut self, op: u32, part: u32, cx: &mut StoreCtx<'_>) {
        self.part_ended(cx, op, part, Part::Landed);
    }

    /// Part `part` of operation `op_id` ended in `state`; the operation ends with its last
    /// part: a write makes its blocks readable, an offload frees its host blocks, a read's
    /// request learns what landed and, if its policy held it back, goes on.
    fn part_ended(&mut self, cx: &mut StoreCtx<'_>, op_id: u32, part: u32, state: Part) {
        let now = cx.q.now();
        let Some(op) = self.ops.get_mut(&op_id) else {
            return;
        };
        op.failed |= matches!(state, Part::Failed(_));
        op.parts[part as usize] = state;
        op.left -= 1;
        if op.left > 0 {
            return;
        }
        let op = self.ops.remove(&op_id).expect("present");
        if op.failed {
            self.traffic.failed += 1;
        }
        match op.kind {
            Kind::Write { ids, from } => {
                if let Some(store) = self.objects.as_mut() {
                    store.finish_write(&ids, from, now, !op.failed);
                }
            }
            Kind::Offload {
                decode,
                path,
                from,
                blocks,
            } => {
                let kept = self
                    .objects
                    .as_mut()
                    .is_some_and(|s| s.finish_offload(&path, from, now, !op.failed));
                let t = self.offload_mut();
                if op.failed {
                    t.failed += 1;
                } else if !kept {
                    t.orphaned_blocks += (path.len() - from) as u64;
                }
                cx.fx.push(Effect::OffloadWritten { decode, blocks });
            }
            Kind::Read { req, prefill } => {
                if let Some(v) = self.reading.get_mut(&prefill) {
                    v.retain(|&o| o != op_id);
                }
                let dt = now - op.started;
                let t = &mut self.traffic;
                t.read_ns_total += dt;
                t.read_ns_max = t.read_ns_max.max(dt);
                let arrived = arrived_of(&op, cx.fabric, now);
                let Some(q) = cx.reqs.get_mut(req) else {
                    return;
                };
                if let Some(pf) = q.prefetch.as_mut() {
                    pf.arrived = arrived;
                    pf.done_ns = Some(now);
                }
                // A request its policy held back from the prefill's scheduler goes on now.
                if let Some(at) = q.metadata_at.take() {
                    cx.q.schedule_at(at.max(now), Event::MetadataArrived { req });
                }
            }
        }
    }

    /// Brings the progress of prefill `p`'s prefetches in flight up to `now`, before its
    /// scheduler looks at them (what `best_effort` takes, and a `timeout` cut-off, are what has
    /// landed then).
    #[inline]
    pub fn refresh(&self, fabric: &Fabric, reqs: &mut Requests, p: PrefillId, now: Nanos) {
        // Most calls: no store, or nothing in flight here.
        if !self.reading.is_empty() {
            self.refresh_reads(fabric, reqs, p, now);
        }
    }

    /// [`MooncakeStore::refresh`] with reads in flight somewhere.
    fn refresh_reads(&self, fabric: &Fabric, reqs: &mut Requests, p: PrefillId, now: Nanos) {
        let Some(ops) = self.reading.get(&p) else {
            return;
        };
        for &o in ops {
            let op = &self.ops[&o];
            let Kind::Read { req, .. } = op.kind else {
                continue;
            };
            let arrived = arrived_of(op, fabric, now);
            if let Some(pf) = reqs.get_mut(req).and_then(|q| q.prefetch.as_mut()) {
                pf.arrived = arrived;
            }
        }
    }
}

/// Starts part `part` of operation `op`: `bytes` (`objects` store objects) between rank
/// `gpu` and store node `node`, a local copy when the node is the rank's own, else a
/// fabric flow, counted in `traffic`; `(now, lead_ns)` as for [`MooncakeStore::start_op`].
fn start_part(
    traffic: &mut KvStoreTraffic,
    cx: &mut StoreCtx<'_>,
    kind: &Kind,
    (op, part): (u32, u32),
    (now, lead_ns): (Nanos, Nanos),
    (gpu, node): (GpuId, u32),
    (bytes, objects): (u64, u64),
) -> Part {
    let read = matches!(kind, Kind::Read { .. });
    let offload = matches!(kind, Kind::Offload { .. });
    if gpu.node == node {
        let t0 = now + lead_ns;
        let t1 = t0 + crate::engine::ceil_ns(bytes as f64 / LOCAL_COPY_BYTES_PER_NS);
        cx.q.schedule_at(t1, Event::StoreCopied { op, part });
        traffic.local_copy_bytes += bytes;
        if offload {
            offload_of(traffic).local_copy_bytes += bytes;
        }
        return Part::Copy { t0, t1 };
    }
    let far = GpuId {
        node,
        local: gpu.local,
    };
    let (src, dst) = if read { (far, gpu) } else { (gpu, far) };
    let f = cx.fabric.start_store(
        now,
        lead_ns,
        (src, dst, gpu),
        (bytes, objects),
        FlowTag::Store { op, part },
    );
    if read {
        traffic.fabric_read_bytes += bytes;
    } else {
        traffic.fabric_write_bytes += bytes;
    }
    if offload {
        let o = offload_of(traffic);
        o.fabric_write_bytes += bytes;
        o.batches += 1;
    }
    Part::Flow(f)
}

/// The decode offload's figures in `traffic` (present from the start of a run where a decode
/// offloads).
fn offload_of(traffic: &mut KvStoreTraffic) -> &mut crate::metrics::summary::DecodeOffloadTraffic {
    traffic.decode_offload.get_or_insert_with(Default::default)
}

/// Blocks of read `op` in host memory at `now`, from the fabric's progress of its batches.
fn arrived_of(op: &Op, fabric: &Fabric, now: Nanos) -> u32 {
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
