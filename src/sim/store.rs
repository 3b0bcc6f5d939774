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
//!
//! A decode instance that offloads its generated KV (`disaggregation_decode_enable_offload_kvcache`,
//! `sglang::decode_offload`) is a client too: after the step that completes a block of a
//! request's output, the block is copied GPU → host (the offload's own host pool) and written
//! to the store exactly as a write-back is, from the decode's GPUs' NICs — the same NICs whose
//! receive side carries the KV transfers into that decode.

use std::collections::BTreeMap;

use super::FlowEnd;
use crate::engine::Nanos;
use crate::fabric::{FlowId, FlowOutcome, GpuId};
use crate::metrics::summary::KvStoreTraffic;
use crate::vocab::flow::FlowTag;

use super::World;
use crate::vocab::event::Event;
use crate::vocab::ids::{DecodeId, PrefillId};
use crate::vocab::requests::ReqRef;

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

impl World<'_> {
    /// Starts a store operation of `client` on the blocks `blocks` at `now`: reads into its
    /// host memory (`read`) or writes from it after `lead_ns` (the GPU → host copy). One batch
    /// per (store node, rank), a local copy where the node is the rank's own.
    fn start_store_op(
        &mut self,
        kind: Kind,
        client: Client,
        blocks: &[u64],
        now: Nanos,
        lead_ns: Nanos,
    ) {
        // The scenario outlives the world, so its node list borrows nothing of `self`.
        let sc = self.sc;
        let nodes = &sc
            .kv_store
            .as_ref()
            .expect("a store has its parameters")
            .nodes;
        let (gpus, bytes_per_token, page_size) = self.store_client(client);
        let block_bytes = u64::from(crate::workload::trace::HASH_BLOCK_TOKENS) * bytes_per_token;
        let pages_per_block = crate::workload::trace::HASH_BLOCK_TOKENS.div_ceil(page_size.max(1));
        let ranks = gpus.len().max(1);
        let groups = Groups::of(blocks, nodes.len());
        let op_id = self.store.next;
        self.store.next = self.store.next.wrapping_add(1);
        let mut parts = Vec::with_capacity(groups.nodes.len() * ranks);
        let mut part_bytes = Vec::with_capacity(parts.capacity());
        for (g, &n) in groups.nodes.iter().enumerate() {
            let c = u64::from(groups.blocks[g]);
            let bytes = (c * block_bytes).div_ceil(ranks as u64);
            let objects = c * u64::from(pages_per_block);
            for &gpu in &gpus {
                let part = parts.len() as u32;
                part_bytes.push(bytes);
                let at = (now, lead_ns);
                parts.push(self.start_part(
                    &kind,
                    (op_id, part),
                    at,
                    (gpu, nodes[n]),
                    (bytes, objects),
                ));
            }
        }
        self.count_store_op(&kind, client, op_id);
        let left = parts.len() as u32;
        let old = self.store.ops.insert(
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
        self.fabric_sync();
    }

    /// The ranks of a store client, its KV bytes per token (all ranks together) and its page
    /// size, tokens.
    fn store_client(&self, client: Client) -> (Vec<GpuId>, u64, u32) {
        let (core, bytes_per_token) = match client {
            Client::Prefill(p) => (
                &self.prefills[p].core,
                self.prefills[p]
                    .hicache
                    .as_deref()
                    .expect("store traffic comes from HiCache")
                    .params
                    .bytes_per_token,
            ),
            Client::Decode(d) => (
                &self.decodes[d].core,
                self.decodes[d]
                    .offload
                    .as_deref()
                    .expect("a decode's store traffic comes from its offload")
                    .params
                    .bytes_per_token,
            ),
        };
        (core.gpus.clone(), bytes_per_token, core.page_size)
    }

    /// Starts part `part` of operation `op`: `bytes` (`objects` store objects) between rank
    /// `gpu` and store node `node`, a local copy when the node is the rank's own, else a
    /// fabric flow; `(now, lead_ns)` as for [`World::start_store_op`].
    fn start_part(
        &mut self,
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
            self.q.schedule_at(t1, Event::StoreCopied { op, part });
            self.store.traffic.local_copy_bytes += bytes;
            if offload {
                self.store.offload_mut().local_copy_bytes += bytes;
            }
            return Part::Copy { t0, t1 };
        }
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
            FlowTag::Store { op, part },
        );
        if read {
            self.store.traffic.fabric_read_bytes += bytes;
        } else {
            self.store.traffic.fabric_write_bytes += bytes;
        }
        if offload {
            let o = self.store.offload_mut();
            o.fabric_write_bytes += bytes;
            o.batches += 1;
        }
        Part::Flow(f)
    }

    /// Counts a started operation in the traffic totals; a prefill's read is also filed
    /// under the prefill, which waits on it.
    fn count_store_op(&mut self, kind: &Kind, client: Client, op: u32) {
        if let (Kind::Read { .. }, Client::Prefill(p)) = (kind, client) {
            self.store.traffic.reads += 1;
            self.store.reading.entry(p).or_default().push(op);
        } else {
            self.store.traffic.writes += 1;
            if matches!(kind, Kind::Offload { .. }) {
                self.store.offload_mut().writes += 1;
            }
        }
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
        self.start_store_op(
            Kind::Read { req: r, prefill: p },
            Client::Prefill(p),
            &blocks,
            now,
            0,
        );
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
        self.start_store_op(
            Kind::Write { ids, from },
            Client::Prefill(p),
            &blocks,
            now,
            lead,
        );
    }

    /// Decode `d`'s offloads due after its step that just ended (`finished`: the requests that
    /// produced their last token in it, which offload what is left before they end): each
    /// due request's completed blocks are copied GPU → host if the offload's host pool has
    /// room (else they wait for the next step, or, at the request's end, are dropped) and
    /// written to the store (`DecodeKVCacheOffloadManager.offload_kv_cache`, then
    /// `_trigger_backup` once the copy is done; `sglang::decode_offload`).
    pub(super) fn offload_due(&mut self, d: DecodeId, finished: &[ReqRef]) {
        let now = self.q.now();
        let steps = self.decodes[d].steps_done();
        // The block after a request's last: its full prompt blocks and its answer's.
        fn end_block(
            answers: &std::collections::BTreeMap<u64, Vec<u64>>,
            q: &crate::vocab::requests::Req,
        ) -> u32 {
            q.input / crate::workload::trace::HASH_BLOCK_TOKENS
                + answers.get(&q.id).map_or(0, |a| a.len() as u32)
        }
        let mut due = std::mem::take(&mut self.scratch.due);
        due.clear();
        {
            let (reqs, answers) = (&self.reqs, &self.answer_ids);
            let o = self.decodes[d]
                .offload
                .as_deref_mut()
                .expect("offloads are due only where the offload is on");
            o.take_due(
                steps,
                |r| {
                    let q = reqs.get(r)?;
                    let kv = u64::from(q.prompt()) + steps.saturating_sub(q.join_step);
                    Some((q.join_step, kv, end_block(answers, q)))
                },
                &mut due,
            );
        }
        for &(item, join) in &due {
            let q = self.reqs.get(item.req).expect("due requests are live");
            let (prompt, last_block) = (q.prompt(), end_block(&self.answer_ids, q));
            let blocks = item.end - item.first;
            let o = self.decodes[d].offload.as_deref_mut().expect("on");
            if !o.has_room(blocks) {
                o.wait(item, join, steps, finished.contains(&item.req));
                continue;
            }
            o.offloaded(item, join, prompt, last_block);
            let full = (q.input / crate::workload::trace::HASH_BLOCK_TOKENS) as usize;
            let answer = &self.answer_ids.get(&q.id).map_or(&[][..], Vec::as_slice)
                [..item.end as usize - full];
            let mut path = Vec::with_capacity(full + answer.len());
            path.extend_from_slice(&q.hash_ids[..full]);
            path.extend_from_slice(answer);
            self.offload_write(d, path, item.first as usize, blocks, now);
        }
        self.scratch.due = due;
    }

    /// The requests that joined decode `d`'s batch at the step that just started have their
    /// next block scheduled.
    pub(super) fn offload_joined(&mut self, d: DecodeId) {
        let answers = &self.answer_ids;
        let (o, joined) = self.decodes[d].offload_and_joined();
        let o = o.expect("on");
        for &r in joined {
            let Some(q) = self.reqs.get(r) else {
                continue;
            };
            let end = q.input / crate::workload::trace::HASH_BLOCK_TOKENS
                + answers.get(&q.id).map_or(0, |a| a.len() as u32);
            o.joined(r, q.join_step, (q.prompt(), q.input), end);
        }
    }

    /// One offload of decode `d`: `blocks` blocks, `path[start..]`, copied GPU → host over
    /// the instance's PCIe links, then put to the store (what it holds or is being written is
    /// skipped, as for write-backs).
    fn offload_write(
        &mut self,
        d: DecodeId,
        path: Vec<u64>,
        start: usize,
        blocks: u32,
        now: Nanos,
    ) {
        let o = self.decodes[d].offload.as_deref_mut().expect("on");
        let bytes = u64::from(blocks)
            * u64::from(crate::workload::trace::HASH_BLOCK_TOKENS)
            * o.params.bytes_per_token;
        let lead = crate::engine::ceil_ns(bytes as f64 / o.params.pcie_bytes_per_ns);
        let t = self.store.offload_mut();
        t.offloads += 1;
        t.blocks += u64::from(blocks);
        t.d2h_bytes += bytes;
        let Some(store) = self.kv_store.as_mut() else {
            o.written(blocks);
            return;
        };
        let from = store.begin_offload(&path, start, now);
        if from == path.len() {
            // Every block is in the store or on its way: the backup puts nothing and frees the
            // host pages.
            o.written(blocks);
            return;
        }
        self.store.offload_mut().put_blocks += (path.len() - from) as u64;
        let put = path[from..].to_vec();
        self.start_store_op(
            Kind::Offload {
                decode: d,
                path,
                from,
                blocks,
            },
            Client::Decode(d),
            &put,
            now,
            lead,
        );
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
            Kind::Offload {
                decode,
                path,
                from,
                blocks,
            } => {
                if let Some(o) = self.decodes[decode].offload.as_deref_mut() {
                    o.written(blocks);
                }
                let kept = self
                    .kv_store
                    .as_mut()
                    .is_some_and(|s| s.finish_offload(&path, from, now, !op.failed));
                let t = self.store.offload_mut();
                if op.failed {
                    t.failed += 1;
                } else if !kept {
                    t.orphaned_blocks += (path.len() - from) as u64;
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

impl StoreFlows {
    /// Whether no store operation is in flight.
    pub(super) fn idle(&self) -> bool {
        self.ops.is_empty()
    }

    /// The decode offload's figures (present from the start of a run where a decode offloads).
    fn offload_mut(&mut self) -> &mut crate::metrics::summary::DecodeOffloadTraffic {
        self.traffic
            .decode_offload
            .get_or_insert_with(Default::default)
    }
}

/// Blocks of read `op` in host memory at `now`, from the fabric's progress of its batches.
fn arrived_of(op: &Op, fabric: &super::Fabric, now: Nanos) -> u32 {
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

    /// Runs `scenarios/store/decode-offload.toml` with `sets`: bytes the decode instances'
    /// NICs received and sent over the whole run (the fabric's own counters, to the last
    /// byte), the KV bytes of every request, and the offload's figures.
    fn decode_nics(
        sets: &[&str],
    ) -> (
        f64,
        f64,
        u64,
        Option<crate::metrics::summary::DecodeOffloadTraffic>,
    ) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/store/decode-offload.toml");
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let sc = crate::scenario::load(&path, &sets).expect("loads");
        let mut sink = crate::metrics::VecSink::default();
        let (rx, tx, traffic) = {
            let mut w = World::new(&sc, &mut sink);
            w.run().expect("runs");
            let now = w.q.now();
            w.fabric.settle_all(now);
            let mut nics: Vec<_> = w.decodes.iter().flat_map(|d| d.core.nics.clone()).collect();
            nics.sort_unstable();
            nics.dedup();
            let (mut rx, mut tx) = (0.0, 0.0);
            for n in nics {
                let (t, r) = w.fabric.nic_bytes(n);
                tx += t;
                rx += r;
            }
            (rx, tx, w.store.traffic.decode_offload)
        };
        let kv = sink.requests.iter().map(|r| r.kv_bytes).sum();
        (rx, tx, kv, traffic)
    }

    /// Conservation, to the byte: with the store on the prefill nodes, the decode instances'
    /// NICs receive the KV transfers into them and nothing else whether the offload is on or
    /// off, and with it on they send exactly the offload's batches (and nothing without it).
    #[test]
    fn a_decode_nics_carry_exactly_its_offload_more() {
        let store = "kv_store.nodes=[0, 1, 2]";
        let (rx_on, tx_on, kv_on, on) = decode_nics(&[store]);
        let (rx_off, tx_off, kv_off, off) = decode_nics(&[
            store,
            "pools.decode.server.disaggregation_decode_enable_offload_kvcache=false",
        ]);
        let on = on.expect("the offload's figures");
        assert!(off.is_none());
        assert!(on.writes > 0 && on.fabric_write_bytes > 0, "{on:?}");
        assert_eq!(kv_on, kv_off);
        // Byte counts are sums of f64 shares; they agree to well under a byte per flow.
        let close = |a: f64, b: u64| (a - b as f64).abs() < 1e-3 * (1.0 + b as f64 / 1e9);
        assert!(
            close(rx_on, kv_on) && close(rx_off, kv_off),
            "rx {rx_on} {rx_off} {kv_on}"
        );
        assert!(close(tx_off, 0), "{tx_off}");
        assert!(close(tx_on, on.fabric_write_bytes), "tx {tx_on} vs {on:?}");
        assert!(close(
            (rx_on + tx_on) - (rx_off + tx_off),
            on.fabric_write_bytes
        ));
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
