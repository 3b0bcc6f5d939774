//! The prefill side of the Mooncake transfer: per prefill instance, `queue_size` transfer-queue
//! shards, each with one worker thread that sends chunks one at a time, in order; the worker
//! dies on a raised error; a return code −1 blacklists the decode session
//! (`docs/sglang-pd.md` §2.4–§2.6; sglang `disaggregation/mooncake/conn.py`,
//! `MooncakeKVManager.transfer_worker` and `add_transfer_request`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::engine::{EventKey, EventQueue, Nanos};
use crate::fabric::{Fabric, GpuId};
use crate::layout::{ChunkRequest, Effect, ErrorTiming, PairPlan, PdError, Write};
use crate::metrics::ErrorKind;
use crate::sim::event::Event;
use crate::sim::ids::{DecodeId, IdVec, InstanceId, PrefillId, ShardId};
use crate::sim::requests::{ChunkJob, KvPoll, Req, ReqRef, Requests};

/// A chunk a shard's worker is sending.
pub struct ActiveChunk {
    /// The chunk.
    pub job: ChunkJob,
    /// Mooncake batches (flows) not yet ended.
    pub flows_left: u32,
    /// A batch of this chunk returned −1 (the room already failed).
    pub failed: bool,
    /// A check that raises after this chunk's KV went (the mamba checks of §2.5).
    pub after_kv: Option<PdError>,
    /// The concrete writes, for a decode instance watched by the oracle through an inexact plan.
    pub writes: Option<Vec<Write>>,
}

/// A transfer-queue shard with its worker thread.
#[derive(Default)]
pub struct Shard {
    /// Chunks waiting for the worker.
    pub queue: VecDeque<ChunkJob>,
    /// The chunk being sent.
    pub active: Option<ActiveChunk>,
    /// The worker thread died on a raised error: nothing on this shard moves again (§2.4).
    pub dead: bool,
    /// The pending return of an empty batch call (cancelled by a crash).
    pub empty_key: Option<EventKey>,
}

/// What the simulation knows of a decode instance when sending to it (fixed for the run).
pub struct DecodeEndpoint {
    /// The decode instance's number in the results.
    pub instance: InstanceId,
    /// GPU of each TP rank.
    pub gpus: Vec<GpuId>,
    /// `--page-size`, tokens.
    pub page_size: u32,
    /// Whether the corruption oracle watches its memory.
    pub watched: bool,
    /// Session port of its rank 0.
    pub port: u32,
}

impl DecodeEndpoint {
    /// The Mooncake session id of this decode instance (`ip:rpc_port`), for messages.
    pub fn session(&self) -> String {
        let d = self.instance.0;
        format!("10.0.{}.{}:{}", d / 256, d % 256, self.port)
    }
}

/// What a worker did when it looked at its queue.
pub enum Kick {
    /// Nothing to do, or a chunk is on its way.
    Done,
    /// A chunk was put on the fabric (the fabric's timer must be refreshed).
    Started,
    /// The chunk's room fails with this error (the worker goes on with the next chunk).
    Fail {
        /// The request.
        req: ReqRef,
        /// Error kind.
        kind: ErrorKind,
        /// sglang's message.
        message: String,
    },
    /// A typed error fails the chunk's room (the worker goes on with the next chunk).
    FailWith {
        /// The request.
        req: ReqRef,
        /// The error.
        error: PdError,
    },
    /// A RuntimeError escaped `send_kvcache`: this shard's worker died.
    WorkerDied(PdError),
}

/// The world a worker needs to send one chunk.
pub struct KickEnv<'a> {
    /// Requests in flight.
    pub reqs: &'a mut Requests,
    /// The network.
    pub fabric: &'a mut Fabric,
    /// The event queue.
    pub q: &'a mut EventQueue<Event>,
    /// Every decode instance.
    pub decodes: &'a IdVec<DecodeId, DecodeEndpoint>,
    /// The compiled plan from this prefill to each decode instance.
    pub plans: &'a IdVec<DecodeId, Arc<PairPlan>>,
    /// GPU of each TP rank of this prefill.
    pub gpus: &'a [GpuId],
    /// What an empty batch call costs, ns.
    pub base_latency_ns: Nanos,
}

/// The transfer queues of one prefill instance.
pub struct TransferQueues {
    /// The shards.
    pub shards: IdVec<ShardId, Shard>,
    /// Decode instances whose Mooncake session this prefill blacklisted after a return code −1
    /// (§2.6): later chunks to them fail at once.
    pub blacklist: BTreeSet<DecodeId>,
    /// The flows of the chunk being started (reused, so a chunk allocates nothing).
    flows: Vec<crate::layout::RankFlow>,
}

/// The chunk as the plan sees it: prefill and decode page ids at the chunk's page positions.
/// sglang indexes decode's page list with the prefill's positions (and truncates the source
/// when the decode list is shorter), which is exactly where a page-size mismatch bites.
pub fn chunk_request<'r>(req: &'r Req, job: &ChunkJob, decode_page_size: u32) -> ChunkRequest<'r> {
    let (a, b) = (job.first_page as usize, job.end_page as usize);
    let src =
        &req.on_prefill.pages[a.min(req.on_prefill.pages.len())..b.min(req.on_prefill.pages.len())];
    // Decode's KV indices cover the prompt only (the rest of its reservation is for output).
    let prompt_pages =
        (req.prompt().div_ceil(decode_page_size) as usize).min(req.on_decode.pages.len());
    let dst_all = &req.on_decode.pages[..prompt_pages];
    let dst = &dst_all[a.min(dst_all.len())..b.min(dst_all.len())];
    ChunkRequest {
        src_pages: src,
        dst_pages: dst,
        last: job.last,
        src_slot: req.on_prefill.slot,
        dst_slot: req.on_decode.slot,
        src_aux: 0,
        dst_aux: req.on_decode.aux,
    }
}

/// The fabric token of a prefill's shard: every flow of the chunk carries it.
fn token(p: PrefillId, shard: ShardId) -> u64 {
    (u64::from(p.0) << 32) | u64::from(shard.0)
}

/// The prefill and shard a fabric token names.
pub fn from_token(token: u64) -> (PrefillId, ShardId) {
    (PrefillId((token >> 32) as u32), ShardId(token as u32))
}

impl TransferQueues {
    /// `queue_size` idle shards.
    pub fn new(queue_size: u32) -> Self {
        let mut shards = IdVec::default();
        for _ in 0..queue_size {
            shards.push(Shard::default());
        }
        Self {
            shards,
            blacklist: BTreeSet::new(),
            flows: Vec::new(),
        }
    }

    /// Puts a chunk on a shard's queue.
    pub fn push(&mut self, shard: ShardId, job: ChunkJob) {
        self.shards[shard].queue.push_back(job);
    }

    /// The shard's worker looks at its queue if it is idle. Per chunk, as sglang's
    /// `transfer_worker`: skip failed rooms; a blacklisted session fails at once; the plan's
    /// check raises before the first write (the worker dies) or returns −1 (the room fails and
    /// the session is blacklisted); otherwise the chunk's flows go on the fabric. Returns at
    /// the first chunk that started or failed; call again after a failure.
    pub fn kick(&mut self, me: PrefillId, shard: ShardId, env: &mut KickEnv) -> Kick {
        loop {
            let sh = &mut self.shards[shard];
            if sh.dead || sh.active.is_some() {
                return Kick::Done;
            }
            let Some(job) = sh.queue.pop_front() else {
                return Kick::Done;
            };
            let Some(req) = env.reqs.get(job.req) else {
                continue;
            };
            if req.sender == KvPoll::Failed {
                continue;
            }
            let d = req.decode;
            let dst = &env.decodes[d];
            if self.blacklist.contains(&d) {
                let message = format!(
                    "Decode instance could be dead, remote mooncake session {} is not alive",
                    dst.session()
                );
                return Kick::Fail {
                    req: job.req,
                    kind: ErrorKind::SessionBlacklisted,
                    message,
                };
            }
            let plan = &env.plans[d];
            let creq = chunk_request(req, &job, dst.page_size);
            let error = plan.chunk_into(&creq, &mut self.flows);
            let writes = (dst.watched
                && !plan.is_exact()
                && error
                    .as_ref()
                    .is_none_or(|e| e.1 != ErrorTiming::BeforeAnyWrite))
            .then(|| {
                let mut w = Vec::new();
                plan.writes(&creq, &mut w);
                w
            });
            let mut after_kv = None;
            match error {
                Some((e, ErrorTiming::BeforeAnyWrite)) => match e.effect {
                    Effect::WorkerDies => {
                        self.shards[shard].dead = true;
                        return Kick::WorkerDied(e);
                    }
                    Effect::ReturnCodeFailure | Effect::RaisedOnDecode => {
                        self.blacklist.insert(d);
                        return Kick::FailWith {
                            req: job.req,
                            error: e,
                        };
                    }
                },
                Some((e, ErrorTiming::AfterKv)) => after_kv = Some(e),
                None => {}
            }
            let now = env.q.now();
            let req = env.reqs.get_mut(job.req).expect("checked above");
            req.row.transfer_start_ns.get_or_insert(now);
            // One Mooncake batch per (prefill rank, decode rank): it pays the latency, then moves
            // its bytes at its fair share, capped by the cost of posting its work requests.
            for f in &self.flows {
                req.row.kv_bytes += f.bytes;
                req.row.rdma_writes += f.writes;
                let (src, dst_gpu) = (
                    env.gpus[f.prefill_rank as usize],
                    dst.gpus[f.decode_rank as usize],
                );
                env.fabric
                    .start_transfer(now, src, dst_gpu, f.bytes, f.writes, token(me, shard));
            }
            let n = self.flows.len() as u32;
            let sh = &mut self.shards[shard];
            sh.active = Some(ActiveChunk {
                job,
                flows_left: n,
                after_kv,
                writes,
                failed: false,
            });
            if n == 0 {
                // Nothing to send (0 KV bytes on the slice path, every target a dummy): the
                // batch call returns after the network latency.
                sh.empty_key = Some(env.q.schedule_keyed_in(
                    env.base_latency_ns,
                    Event::EmptyChunkSent { prefill: me, shard },
                ));
            }
            return Kick::Started;
        }
    }

    /// One flow of the shard's active chunk ended; `failed` if it returned −1 or was aborted.
    /// Returns the chunk's request and whether that was its last flow, or `None` when the shard
    /// has no active chunk (it was lost in a crash).
    pub fn flow_ended(&mut self, shard: ShardId, failed: bool) -> Option<(ReqRef, bool)> {
        let active = self.shards[shard].active.as_mut()?;
        active.flows_left -= 1;
        active.failed |= failed;
        Some((active.job.req, active.flows_left == 0))
    }

    /// Whether the shard's active chunk had nothing to send and is waiting for its empty
    /// batch call to return.
    pub fn empty_chunk_pending(&self, shard: ShardId) -> bool {
        self.shards[shard]
            .active
            .as_ref()
            .is_some_and(|a| a.flows_left == 0)
    }

    /// A crash: every queue, chunk and worker is lost (workers come back with the restart).
    pub fn crash(&mut self, q: &mut EventQueue<Event>) {
        for sh in self.shards.iter_mut() {
            sh.queue.clear();
            sh.active = None;
            sh.dead = false;
            if let Some(k) = sh.empty_key.take() {
                q.cancel(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(r: ReqRef, d: u32) -> ChunkJob {
        ChunkJob {
            req: r,
            decode: DecodeId(d),
            first_page: 0,
            end_page: 1,
            last: true,
        }
    }

    /// A dead worker moves nothing again, whatever is queued behind it (the chunks of healthy
    /// decode instances that hash to the same shard included); other shards go on.
    #[test]
    fn a_dead_shard_never_moves_again() {
        let mut t = TransferQueues::new(4);
        let r = ReqRef { slot: 0, id: 0 };
        t.shards[ShardId(1)].dead = true;
        t.push(ShardId(1), job(r, 0));
        t.push(ShardId(1), job(r, 3));
        let mut reqs = Requests::default();
        let mut fabric = crate::fabric::Fabric::build(
            crate::fabric::TopologyConfig {
                nodes: 1,
                gpus_per_node: 8,
                nics_per_node: 8,
                nic_bytes_per_ns: 50.0,
                kind: crate::fabric::TopologyKind::Rail,
                nodes_per_leaf: 1,
                oversubscription: 1.0,
                nvlink_bytes_per_ns: 900.0,
            },
            Default::default(),
        )
        .unwrap();
        let mut q = EventQueue::new();
        let decodes = IdVec::default();
        let plans = IdVec::default();
        let mut env = KickEnv {
            reqs: &mut reqs,
            fabric: &mut fabric,
            q: &mut q,
            decodes: &decodes,
            plans: &plans,
            gpus: &[],
            base_latency_ns: 1,
        };
        assert!(matches!(
            t.kick(PrefillId(0), ShardId(1), &mut env),
            Kick::Done
        ));
        assert_eq!(t.shards[ShardId(1)].queue.len(), 2, "nothing was taken off");
        // A live shard drops chunks of requests that already ended and stays idle.
        t.push(ShardId(2), job(r, 0));
        assert!(matches!(
            t.kick(PrefillId(0), ShardId(2), &mut env),
            Kick::Done
        ));
        assert!(t.shards[ShardId(2)].queue.is_empty());
    }

    /// A crash empties every shard and revives dead workers (they come back with the restart).
    #[test]
    fn a_crash_clears_queues_and_workers() {
        let mut t = TransferQueues::new(2);
        let r = ReqRef { slot: 0, id: 0 };
        t.push(ShardId(0), job(r, 0));
        t.shards[ShardId(1)].dead = true;
        let mut q = EventQueue::new();
        let k = q.schedule_keyed(
            5,
            Event::EmptyChunkSent {
                prefill: PrefillId(0),
                shard: ShardId(0),
            },
        );
        t.shards[ShardId(0)].empty_key = Some(k);
        t.crash(&mut q);
        assert!(
            t.shards
                .iter()
                .all(|s| s.queue.is_empty() && !s.dead && s.active.is_none())
        );
        assert!(q.is_empty(), "the pending empty-chunk return is cancelled");
    }

    #[test]
    fn tokens_round_trip() {
        assert_eq!(
            from_token(token(PrefillId(513), ShardId(3))),
            (PrefillId(513), ShardId(3))
        );
    }
}
