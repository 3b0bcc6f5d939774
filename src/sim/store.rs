//! Where `World` meets the Mooncake Store (`sglang::mooncake_store`, `docs/sglang-pd.md` §18):
//! HiCache's prefetches and write-backs and a decode's offloads start here with what their
//! client is (its ranks' GPUs, bytes per token, page size), the ends of the store's flows and
//! local copies come back here, and what the store asks of a decode's offload is applied.

use super::FlowEnd;
use crate::engine::Nanos;
use crate::sglang::mooncake_store::{ClientShape, StoreCtx, StoreEffect};
use crate::vocab::ids::{DecodeId, PrefillId};
use crate::vocab::requests::ReqRef;

use super::World;

/// The store's context over `World`'s fields (a macro, so the borrows stay field by field
/// beside a client's shape borrowed from its server).
macro_rules! store_cx {
    ($w:expr) => {
        StoreCtx {
            q: &mut $w.q,
            fabric: &mut $w.fabric,
            timer: &mut $w.fabric_timer,
            reqs: &mut $w.reqs,
        }
    };
}

impl World<'_> {
    /// HiCache's prefetch of request `r` from the shared store, started as prefill `p`'s
    /// scheduler receives it at `now` (`HiRadixCache.prefetch_from_storage`): the instance's
    /// own tiers (device and host) hold the prompt's first blocks; the store reads the rest it
    /// holds.
    pub(super) fn start_prefetch(&mut self, r: ReqRef, p: PrefillId, now: Nanos) {
        if !self.store.present() {
            return;
        }
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
        let shape = ClientShape {
            gpus: &server.core.gpus,
            bytes_per_token: h.params.bytes_per_token,
            page_size: server.core.page_size,
        };
        let mut cx = store_cx!(self);
        self.store.prefetch(&mut cx, (r, p, &shape), local, now);
    }

    /// Request `r`'s prefill on `p` ended at `now`: HiCache writes its blocks back to the shared
    /// store as the write policy says, skipping what the store holds or is being written
    /// (`HiCacheController.write_backup_storage`, `MooncakeStore._batch_set_v2_aggregated`).
    pub(super) fn write_back(&mut self, p: PrefillId, r: ReqRef, now: Nanos) {
        if !self.store.present() {
            return;
        }
        let server = &mut self.prefills[p];
        let Some(h) = server.hicache.as_deref_mut().filter(|h| h.params.storage) else {
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
        let Some(from) = self.store.begin_write(&ids, now) else {
            return;
        };
        let bytes = (n - from) as u64
            * u64::from(crate::workload::trace::HASH_BLOCK_TOKENS)
            * h.params.bytes_per_token;
        let lead = h.writes_to_store(bytes);
        let shape = ClientShape {
            gpus: &server.core.gpus,
            bytes_per_token: h.params.bytes_per_token,
            page_size: server.core.page_size,
        };
        let mut cx = store_cx!(self);
        self.store
            .write(&mut cx, (p, &shape), (ids, from), now, lead);
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
    /// the instance's PCIe links, then put to the store.
    fn offload_write(
        &mut self,
        d: DecodeId,
        path: Vec<u64>,
        start: usize,
        blocks: u32,
        now: Nanos,
    ) {
        let server = &self.decodes[d];
        let o = server.offload.as_deref().expect("on");
        let shape = ClientShape {
            gpus: &server.core.gpus,
            bytes_per_token: o.params.bytes_per_token,
            page_size: server.core.page_size,
        };
        let pcie = o.params.pcie_bytes_per_ns;
        let mut cx = store_cx!(self);
        let e = self
            .store
            .offload(&mut cx, (d, &shape, pcie), (path, start, blocks), now);
        self.apply_store(e);
    }

    /// A store flow ended (`flow_ended` dispatches here by its tag).
    pub(super) fn store_flow_ended(&mut self, end: &FlowEnd, op: u32, part: u32) {
        let mut cx = store_cx!(self);
        let e = self.store.flow_ended(
            &mut cx,
            (op, part),
            end.outcome,
            (end.delivered_bytes, end.bytes),
        );
        self.apply_store(e);
    }

    /// A local copy of a store operation ended.
    pub(super) fn on_store_copied(&mut self, op: u32, part: u32) {
        let mut cx = store_cx!(self);
        let e = self.store.copied(&mut cx, op, part);
        self.apply_store(e);
    }

    /// What the store asks of a decode's offload.
    fn apply_store(&mut self, e: Option<StoreEffect>) {
        if let Some(StoreEffect::OffloadWritten { decode, blocks }) = e
            && let Some(o) = self.decodes[decode].offload.as_deref_mut()
        {
            o.written(blocks);
        }
    }

    /// Brings the progress of prefill `p`'s prefetches in flight up to now, before its
    /// scheduler looks at them.
    pub(super) fn refresh_prefetches(&mut self, p: PrefillId) {
        let now = self.q.now();
        self.store.refresh(&self.fabric, &mut self.reqs, p, now);
    }
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
            (rx, tx, w.store.traffic().decode_offload)
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
}
