//! `World`'s side of the transfer: driving the shard workers of [`crate::sglang::transfer`],
//! keeping one fabric timer, and landing finished chunks in decode memory, where the corruption
//! oracle judges them (`docs/sglang-pd.md` §2.4–§2.6, §3.8).

use crate::fabric::{FailReason, FlowEnd, FlowOutcome};
use crate::layout::{PdError, RequestId};
use crate::metrics::{ErrorKind, WorkerDeath};
use crate::sglang::transfer::{Kick, KickEnv, chunk_request, from_token};

use super::World;
use super::event::{Event, Wake, lane};
use super::ids::{PrefillId, ShardId};
use super::requests::KvPoll;

impl World<'_> {
    /// Lets the shard's worker send its next chunk, failing rooms as it meets errors.
    pub(super) fn kick_shard(&mut self, p: PrefillId, shard: ShardId) {
        if !self.prefills[p].core.alive {
            return;
        }
        loop {
            let mut env = KickEnv {
                reqs: &mut self.reqs,
                fabric: &mut self.fabric,
                q: &mut self.q,
                decodes: &self.endpoints,
                plans: &self.plans[p],
                gpus: &self.prefills[p].core.gpus,
                base_latency_ns: self.sc.fabric.base_latency_ns,
            };
            match self.transfers[p].kick(p, shard, &mut env) {
                Kick::Done => return,
                Kick::Started => {
                    self.fabric_sync();
                    return;
                }
                Kick::Fail { req, kind, message } => self.fail(req, kind, &message),
                Kick::FailWith { req, error } => self.fail_with(req, &error),
                Kick::WorkerDied(e) => {
                    self.worker_died(p, shard, &e);
                    return;
                }
            }
        }
    }

    /// A RuntimeError escaped `send_kvcache`: the shard's worker thread died ("Transfer thread
    /// failed because of … is dead."). Its queued and future chunks never move; their rooms
    /// wait for the decode waiting timeout. The error is counted once per raise, and the death
    /// recorded for the reports' markers.
    fn worker_died(&mut self, p: PrefillId, shard: ShardId, e: &PdError) {
        self.collector.raised(e.kind, &e.message);
        self.collector.worker_deaths.push(WorkerDeath {
            at_ns: self.q.now(),
            // Prefills come first among the global instances: `PrefillId(i)` is instance i.
            prefill_instance: p.0,
            shard: shard.0,
            kind: e.kind,
        });
    }

    /// Keeps exactly one `FabricDue` event pending, at the fabric's next due time.
    pub(super) fn fabric_sync(&mut self) {
        let now = self.q.now();
        let due = self.fabric.next_due(now);
        if due != self.fabric_timer.map(|(_, t)| t) {
            if let Some((k, _)) = self.fabric_timer.take() {
                self.q.cancel(k);
            }
            if let Some(t) = due {
                let key = self.q.schedule_keyed(t.max(now), Event::FabricDue);
                self.fabric_timer = Some((key, t));
            }
        }
    }

    pub(super) fn on_fabric_due(&mut self) {
        let now = self.q.now();
        self.fabric_timer = None;
        let mut ends = std::mem::take(&mut self.scratch.ends);
        ends.clear();
        self.fabric.fire_due(now, &mut ends);
        for end in &ends {
            self.flow_ended(end);
        }
        self.scratch.ends = ends;
        self.fabric_sync();
    }

    /// One Mooncake batch ended: count it against its chunk; a −1 fails the room and
    /// blacklists the decode session (the TP group's MIN poll fails the whole request).
    pub(super) fn flow_ended(&mut self, end: &FlowEnd) {
        let (p, shard) = from_token(end.token);
        let failed = !matches!(end.outcome, FlowOutcome::Completed);
        let Some((r, last)) = self.transfers[p].flow_ended(shard, failed) else {
            return;
        };
        match end.outcome {
            FlowOutcome::Completed => {
                let bw = end.achieved_bytes_per_ns();
                if bw.is_finite() && end.bytes > 0 {
                    // bytes/ns × 1000 = MB/s, kept as an integer in the histogram.
                    self.collector
                        .bandwidth
                        .record((bw * 1000.0).round() as u64);
                }
            }
            FlowOutcome::Failed(reason) => {
                if let Some(d) = self.reqs.get(r).map(|q| q.decode) {
                    self.transfers[p].blacklist.insert(d);
                    let (kind, why) = match reason {
                        FailReason::Timeout => (ErrorKind::TransferTimeout, "timed out"),
                        FailReason::RetriesExhausted => {
                            (ErrorKind::TransferFailed, "retries exhausted")
                        }
                        FailReason::NoRoute => (ErrorKind::TransferFailed, "no route"),
                    };
                    let msg = format!(
                        "Failed to send kv chunk of {} to {}: Mooncake batch_transfer_sync returned -1 ({why})",
                        r.id,
                        self.endpoints[d].session()
                    );
                    self.fail(r, kind, &msg);
                }
            }
            FlowOutcome::Aborted => {}
        }
        self.collector.retransmitted_bytes += end.retransmitted_bytes;
        if last {
            self.chunk_done(p, shard);
        }
    }

    /// Every flow of the shard's active chunk ended: the bytes are in decode memory, where the
    /// oracle sees whose pages they landed on. The request's last chunk concludes the transfer.
    pub(super) fn chunk_done(&mut self, p: PrefillId, shard: ShardId) {
        let now = self.q.now();
        let active = self.transfers[p].shards[shard]
            .active
            .take()
            .expect("active chunk");
        let r = active.job.req;
        let live = self.reqs.get(r).filter(|q| q.sender != KvPoll::Failed);
        if let (false, Some(req)) = (active.failed, live) {
            let (d, id) = (req.decode, req.id);
            // Land the bytes in the oracle's view of decode memory.
            let mut oob = None;
            let job = active.job;
            if let Some(writes) = &active.writes {
                let mem = self.decodes[d].core.pages.oracle().expect("watched");
                oob = mem.apply(&self.plans[p][d], RequestId(id), writes).error;
            } else if self.endpoints[d].watched {
                let c = chunk_request(req, &job, self.endpoints[d].page_size);
                let whole = job.last && active.after_kv.is_none();
                let (pages, slot, aux) = (
                    c.dst_pages.to_vec(),
                    c.dst_slot.filter(|_| whole),
                    whole.then_some(c.dst_aux),
                );
                let mem = self.decodes[d].core.pages.oracle().expect("watched");
                mem.apply_exact(RequestId(id), &pages, slot, aux);
            }
            if let Some(e) = oob {
                // rc −1: the room fails and the session is blacklisted (§3.8, §2.6).
                self.transfers[p].blacklist.insert(d);
                self.fail_with(r, &e);
            } else if let Some(e) = &active.after_kv {
                // The KV went; then the state check raised and the worker died.
                self.transfers[p].shards[shard].dead = true;
                self.worker_died(p, shard, e);
                return;
            } else {
                let req = self.reqs.get_mut(r).expect("live");
                req.chunks_in_flight -= 1;
                if job.last && req.chunks_in_flight == 0 {
                    // conclude_transfer(Success): prefill frees its pages, decode is told.
                    req.sender = KvPoll::Success;
                    req.row.transfer_end_ns = Some(now);
                    let held = std::mem::take(&mut req.on_prefill);
                    let pc = &mut self.prefills[p].core;
                    pc.pages.free(id, &held);
                    pc.outstanding -= 1;
                    self.sync_prefill(p);
                    self.q.schedule_lane(
                        lane::CONTROL,
                        self.sc.fabric.control_latency_ns,
                        Event::TransferSucceeded { req: r },
                    );
                    self.wake.push(Wake::Prefill(p));
                }
            }
        }
        self.kick_shard(p, shard);
    }
}
