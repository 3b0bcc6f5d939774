//! The prefill side of the Mooncake transfer (`docs/sglang-pd.md` §2.4–§2.6, §3.1; sglang
//! `disaggregation/mooncake/conn.py` @ 0005973a, `MooncakeKVManager.transfer_worker` and
//! `add_transfer_request`).
//!
//! Every prefill **rank** (TP rank) runs its own `MooncakeKVManager`, so every rank has its own
//! `queue_size` transfer queues, one worker thread each, and its own session blacklist. A room's
//! chunk goes, on each rank, to queue `sum(session ports of the decode ranks that rank serves for
//! the room) % queue_size`. A worker sends one chunk at a time and, within a chunk, walks its
//! decode targets one after another (`for req in reqs_to_be_processed`). A raised error kills
//! that rank's worker alone; a return code −1 blacklists that decode session on that rank.
//!
//! Lanes: the shards of all ranks live in one list, lane `rank · queue_size + queue`
//! ([`TransferQueues::lane`]), so an event names a lane with one [`ShardId`].

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::engine::{EventKey, EventQueue, Nanos};
use crate::fabric::{FabricParams, GpuId};
use crate::vocab::flow::FlowTag;

/// The fabric as the simulator runs it: each flow tagged with its owner.
type Fabric = crate::fabric::Fabric<FlowTag>;
use crate::layout::{ChunkRequest, Effect, ErrorTiming, PairPlan, PdError, RankFlow, Write};
use crate::vocab::event::{Event, lane};
use crate::vocab::ids::{DecodeId, IdVec, InstanceId, PrefillId, ShardId};
use crate::vocab::requests::{ChunkJob, KvPoll, Req, ReqRef, Requests};
use crate::vocab::{ErrorKind, RequestRow};

use super::Failure;

/// Executor threads of one transfer queue: `send_kvcache_slice` submits one future per layer to
/// the queue's `ThreadPoolExecutor(transfer_thread_pool_size // queue_size)` and awaits them, so
/// that many per-layer batches of one target are in flight at once. sglang's pool size is
/// `min(max(4, int(0.5 · cpu_count) // 8), 12)` (`MooncakeKVManager.__init__`), i.e. 8 on a
/// 128-CPU host: 8 // 4 queues = 2 threads. (`send_kvcache` puts every layer in one batch.)
pub const SLICE_EXECUTOR_THREADS: u64 = 2;

/// What sglang's transfer worker spends on one send before its Mooncake call returns, beyond
/// the call's own cost, ns: taking the chunk off its queue, grouping the page ids into
/// contiguous runs and building the per-layer address lists (`MooncakeKVManager
/// .transfer_worker`, `send_kvcache` → `_send_kvcache_generic` / `process_layers`,
/// `group_concurrent_contiguous`, conn.py @ 0005973a), and the status bookkeeping after it.
/// **Fitted**: the minimax of the 128–1,024-token rows of Mooncake's sglang PD table
/// (`docs/numbers.md` §4.3, `src/fabric/calibration.rs`), whose short prompts bottom out near
/// 2 ms; the table's 2k–32k rows are held out. Paid once per (chunk, decode rank) batch.
pub const SEND_OVERHEAD_NS: Nanos = 880_000;

/// The chunk a lane's worker is sending, and to which of its targets.
pub struct ActiveChunk {
    /// The chunk.
    pub job: ChunkJob,
    /// Index into the plan's targets of the target being sent to (meaningful while `busy`).
    pub target: usize,
    /// The first target not yet started.
    pub next_target: usize,
    /// The end of this rank's targets in the plan of the job's decode instance
    /// ([`PairPlan::rank_targets`], kept: two binary searches per look-up).
    pub end_target: usize,
    /// The current target's batch is on the fabric (or its empty batch call is pending).
    pub busy: bool,
    /// Mooncake batches (flows) of the current target not yet ended.
    pub flows_left: u32,
    /// A batch of the current target returned −1 (the room already failed).
    pub failed: bool,
    /// A check that raises after the current target's KV went (the state checks of docs/sglang-pd.md §2.5).
    pub after_kv: Option<PdError>,
    /// The concrete writes of the current target, for a decode watched by the oracle through
    /// an inexact plan.
    pub writes: Option<Vec<Write>>,
}

/// One transfer queue of one prefill rank, with its worker thread.
#[derive(Default)]
pub struct Shard {
    /// Chunks waiting for the worker.
    pub queue: VecDeque<ChunkJob>,
    /// The chunk being sent.
    pub active: Option<ActiveChunk>,
    /// The worker thread died on a raised error: nothing on this queue moves again (docs/sglang-pd.md §2.4).
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
    /// Session port of each decode rank (pdsim gives each rank one port: its Mooncake session
    /// port and its ZMQ `rank_port` are the same number).
    pub ports: Vec<u32>,
}

/// sglang's `--disaggregation-bootstrap-port` default: every prefill instance's bootstrap
/// server listens on it (`server_args.py`).
pub const BOOTSTRAP_PORT: u32 = 8998;

/// The host of global instance `instance`, for messages (`10.0.x.y`).
pub fn host_of(instance: InstanceId) -> String {
    let d = instance.0;
    format!("10.0.{}.{}", d / 256, d % 256)
}

impl DecodeEndpoint {
    /// The host of this decode instance, for messages (`10.0.x.y`).
    pub fn host(&self) -> String {
        host_of(self.instance)
    }

    /// The Mooncake session id of decode rank `rank` (`ip:rpc_port`).
    pub fn session(&self, rank: u32) -> String {
        format!("{}:{}", self.host(), self.ports[rank as usize])
    }
}

/// What a lane's worker did.
pub enum Kick {
    /// Nothing to do, or a batch is on its way.
    Done,
    /// A batch was put on the fabric (the fabric's timer must be refreshed).
    Started,
    /// The chunk's room fails with this error; the worker drops the chunk (`break`) and goes on
    /// with its next chunk.
    Fail {
        /// The request.
        req: ReqRef,
        /// Error kind.
        kind: ErrorKind,
        /// sglang's message.
        message: String,
    },
    /// A typed return-code failure fails the chunk's room (the worker goes on).
    FailWith {
        /// The request.
        req: ReqRef,
        /// The error.
        error: PdError,
    },
    /// An exception escaped the worker loop: this lane's worker thread died.
    WorkerDied(PdError),
    /// The worker sent this chunk to every one of its targets.
    ChunkDone(ChunkJob),
}

/// What one ended flow of a lane's batch means ([`TransferQueues::flow_ended`]).
pub struct FlowVerdict {
    /// A completed flow's achieved rate, MB/s (for the bandwidth histogram).
    pub bandwidth_mb_s: Option<u64>,
    /// The room fails (request, kind, sglang's message): a −1 blacklisted the session.
    pub fail: Option<(ReqRef, ErrorKind, String)>,
    /// It was the batch's last flow: the batch is done ([`TransferQueues::batch_done`]).
    pub last: bool,
}

/// What a finished batch carried, for landing it in decode memory.
pub struct Landing {
    /// The chunk.
    pub job: ChunkJob,
    /// The concrete writes, for a decode watched through an inexact plan.
    pub writes: Option<Vec<Write>>,
    /// The chunk is the request's last and nothing raised after its KV: its state slot and
    /// aux row land too.
    pub whole: bool,
}

/// What the worker does after a finished batch ([`TransferQueues::batch_done`]).
pub enum Landed {
    /// It goes on with its next target or chunk (kick the lane).
    Next,
    /// A write was out of bounds (rc −1): the room fails with sglang's message; the worker
    /// goes on.
    Fail {
        /// The request.
        req: ReqRef,
        /// Error kind.
        kind: ErrorKind,
        /// sglang's message.
        message: String,
    },
    /// A check raised after the KV went: the lane's worker thread died.
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

/// The transfer queues of every rank of one prefill instance.
pub struct TransferQueues {
    /// `sglang.queue_size`: queues per rank.
    queue_size: u32,
    /// Every rank's queues, lane `rank · queue_size + queue`.
    pub shards: IdVec<ShardId, Shard>,
    /// Per prefill rank, the decode sessions `(instance, decode rank)` that rank blacklisted
    /// after a return code −1 (docs/sglang-pd.md §2.6): later chunks to them fail at once.
    pub blacklists: Vec<BTreeSet<(DecodeId, u32)>>,
    /// The flows of the batch being started (reused, so a batch allocates nothing).
    flows: Vec<RankFlow>,
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

/// The bootstrap room of request `id`: sglang's router draws
/// `random.randint(0, 2**63 - 1)` per request; pdsim derives it from the seed and the id
/// (SplitMix64), so it is fixed by the scenario and seed and never collides in practice.
pub fn bootstrap_room(seed: u64, id: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(id.wrapping_add(1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) >> 1
}

/// sglang's `conclude_failure` reason for a batch that returned −1:
/// `f"Failed to send kv chunk of {kv_chunk.room} to {NetworkAddress(req.endpoint,
/// req.dst_port).to_host_port_str()}"` (`transfer_worker`, 0005973a).
pub fn failed_to_send(room: u64, endpoint: &DecodeEndpoint, decode_rank: u32) -> String {
    format!(
        "Failed to send kv chunk of {room} to {}",
        endpoint.session(decode_rank)
    )
}

/// The blacklist reason (`transfer_worker`, 0005973a): `f"Decode instance could be dead, remote
/// mooncake session {req.mooncake_session_id} is not alive"`.
pub fn session_not_alive(session: &str) -> String {
    format!("Decode instance could be dead, remote mooncake session {session} is not alive")
}

/// sglang's timeout reason (`CommonKVReceiver.poll` / `CommonKVSender`):
/// `f"Request {self.bootstrap_room} timed out after {elapsed:.1f}s in KVPoll.{stage}"` —
/// the bootstrap room, not pdsim's request id.
pub fn timed_out(room: u64, elapsed_s: f64, stage: &str) -> String {
    format!("Request {room} timed out after {elapsed_s:.1}s in KVPoll.{stage}")
}

/// sglang's two poll timeouts (`docs/sglang-pd.md` §2.6): the prefill's KV sender in
/// `Bootstrapping` past `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` (`CommonKVSender.
/// _check_bootstrap_timeout`), and the decode's KV receiver in `WaitingForInput` past
/// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` (`CommonKVReceiver._check_waiting_timeout`;
/// `disaggregation/common/conn.py` at 0005973a). A request that moves on cancels its timeout,
/// so one that fires always fails its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollTimeout {
    /// The sender's clock: from routing (or a retraction) until decode's page ids arrive.
    Bootstrap,
    /// The receiver's clock: from the prealloc admission until the transfer's `Success`.
    Waiting,
}

impl PollTimeout {
    /// The `KVPoll` state the clock runs in.
    pub fn stage(self) -> KvPoll {
        match self {
            Self::Bootstrap => KvPoll::Bootstrapping,
            Self::Waiting => KvPoll::WaitingForInput,
        }
    }

    /// The error kind of a request it fails.
    pub fn kind(self) -> ErrorKind {
        match self {
            Self::Bootstrap => ErrorKind::BootstrapTimeout,
            Self::Waiting => ErrorKind::WaitingTimeout,
        }
    }

    /// Starts the clock of `req` (`r`) now: its timeout fires `timeout_ns` on (on its own
    /// queue lane: every timeout of a kind is the same delay, so they fire in order). A clock
    /// already running is restarted.
    #[inline]
    pub fn arm(self, q: &mut EventQueue<Event>, req: &mut Req, r: ReqRef, timeout_ns: Nanos) {
        let (lane, event, slot) = match self {
            Self::Bootstrap => (
                lane::BOOTSTRAP_TIMEOUT,
                Event::BootstrapTimeout { req: r },
                &mut req.bootstrap_timeout,
            ),
            Self::Waiting => (
                lane::WAITING_TIMEOUT,
                Event::WaitingTimeout { req: r },
                &mut req.waiting_timeout,
            ),
        };
        let key = q.schedule_lane(lane, timeout_ns, event);
        if let Some(old) = slot.replace(key) {
            q.cancel(old);
        }
    }

    /// The clock of `r`, armed with `timeout_ns`, ran out: how the request fails, with
    /// sglang's text. Panics (printing the request and the seed) if the request ended or left
    /// the stage: its clock would have been cancelled.
    pub fn fired(self, r: ReqRef, timeout_ns: Nanos, ctx: &mut super::Ctx<'_>) -> Failure {
        let seed = ctx.seed;
        let req = ctx
            .reqs
            .get_mut(r)
            .unwrap_or_else(|| panic!("a timeout fired for ended request {} (seed {seed})", r.id));
        let state = match self {
            Self::Bootstrap => {
                req.bootstrap_timeout = None;
                req.sender
            }
            Self::Waiting => {
                req.waiting_timeout = None;
                req.receiver
            }
        };
        assert_eq!(
            state,
            self.stage(),
            "request {} timed out in a state it left (seed {seed})",
            req.id
        );
        let elapsed_s = timeout_ns as f64 / crate::engine::NS_PER_S as f64;
        let stage = format!("{:?}", self.stage());
        Failure::new(
            self.kind(),
            timed_out(bootstrap_room(seed, req.id), elapsed_s, &stage),
        )
    }
}

/// The first target of the active chunk `a`, from its `next_target`, that sends something on
/// prefill rank `rank` to decode instance `d`: a dummy target (MLA, prefill TP > decode TP)
/// sends nothing (docs/sglang-pd.md §3.4). `None` when the rank's targets are done.
#[inline]
fn next_live_target(a: &ActiveChunk, plan: &PairPlan, d: DecodeId, rank: u32) -> Option<usize> {
    let end = if d == a.job.decode {
        a.end_target
    } else {
        plan.rank_targets(rank).end
    };
    let mut i = a.next_target;
    while i < end && plan.target(i).dummy {
        i += 1;
    }
    (i != end).then_some(i)
}

/// The concrete writes of target `i` of `creq`, for the corruption oracle: kept only when it
/// watches the decode through an inexact plan (an exact plan's writes are what the decode
/// expects) and some write lands (no error before any write).
#[inline]
fn oracle_writes(
    dst: &DecodeEndpoint,
    plan: &PairPlan,
    creq: &ChunkRequest<'_>,
    i: usize,
    error: Option<&(PdError, ErrorTiming)>,
) -> Option<Vec<Write>> {
    (dst.watched && !plan.is_exact() && error.is_none_or(|e| e.1 != ErrorTiming::BeforeAnyWrite))
        .then(|| {
            let mut w = Vec::new();
            plan.target_writes(creq, i, &mut w);
            w
        })
}

/// When, after what and under which token one target's batch goes on the fabric.
#[derive(Clone, Copy)]
struct Batch {
    /// The simulated time the worker starts the send.
    now: Nanos,
    /// What passes before the bytes move ([`send_lead`]).
    lead: Nanos,
    /// Executor threads the target's batch is split over ([`SLICE_EXECUTOR_THREADS`] on the
    /// head-sliced path, else 1).
    split: u64,
    /// The lane's fabric token ([`token`]).
    token: FlowTag,
}

/// What a send costs before its KV bytes move. The worker's own cost comes first; the last
/// chunk then also makes the aux call (and, with state regions, the state call) — each a
/// synchronous Mooncake batch of its own, so each pays a batch's floor. Paid before the KV
/// batch, as one lead: the request's time is the same, and the tiny aux/state bytes ride with
/// the KV flows.
#[inline]
fn send_lead(p: &FabricParams, has_state: bool, last: bool) -> Nanos {
    let floor = p.base_latency_ns + p.batch_overhead_ns;
    let calls = if last { 1 + u64::from(has_state) } else { 0 };
    SEND_OVERHEAD_NS + calls * floor
}

/// Puts one target's batch on the fabric and counts its bytes and writes in the request's
/// `row`: one Mooncake batch per (prefill rank, decode rank) of `flows`, which pays the
/// latency, then moves its bytes at its fair share, capped by the cost of posting its work
/// requests. `gpus` are the prefill's and the decode's GPUs by rank. Returns how many fabric
/// flows started.
#[inline]
fn start_flows(
    flows: &[RankFlow],
    fabric: &mut Fabric,
    (src_gpus, dst_gpus): (&[GpuId], &[GpuId]),
    row: &mut RequestRow,
    batch: Batch,
) -> u32 {
    let mut n = 0u32;
    for f in flows {
        row.kv_bytes += f.bytes;
        row.rdma_writes += f.writes;
        let pair = (
            src_gpus[f.prefill_rank as usize],
            dst_gpus[f.decode_rank as usize],
        );
        n += start_rank_flow(fabric, pair, f, batch);
    }
    n
}

/// Starts one (prefill rank, decode rank) batch `f` between the GPUs `(src, dst)` as `k`
/// fabric flows, `k` the executor threads times the rails, at most one per write: on hosts
/// with more NICs than GPUs the batch's slices spread over the GPU's own NICs
/// (`Fabric::rails_between`), one flow per rail, each its share. Returns `k`.
#[inline]
fn start_rank_flow(
    fabric: &mut Fabric,
    (src, dst): (GpuId, GpuId),
    f: &RankFlow,
    batch: Batch,
) -> u32 {
    let rails = u64::from(fabric.rails_between(src, dst));
    let k = (batch.split * rails).min(f.writes).max(1);
    for i in 0..k {
        // Shares differ by at most one byte / one write (one flow: no division).
        let share = |x: u64| {
            if k == 1 {
                x
            } else {
                x / k + u64::from(i < x % k)
            }
        };
        if rails == 1 {
            fabric.start_transfer_after(
                batch.now,
                batch.lead,
                (src, dst),
                share(f.bytes),
                share(f.writes),
                batch.token,
            );
        } else {
            let used = rails.min(k);
            fabric.start_transfer_rail(
                batch.now,
                batch.lead,
                (src, dst),
                ((i % used) as u32, used as u32),
                share(f.bytes),
                share(f.writes),
                batch.token,
            );
        }
    }
    k as u32
}

impl TransferQueues {
    /// `queue_size` idle queues on each of `ranks` prefill ranks.
    pub fn new(ranks: u32, queue_size: u32) -> Self {
        let mut shards = IdVec::default();
        for _ in 0..ranks * queue_size {
            shards.push(Shard::default());
        }
        Self {
            queue_size,
            shards,
            blacklists: vec![BTreeSet::new(); ranks as usize],
            flows: Vec::new(),
        }
    }

    /// The lane of queue `queue` of prefill rank `rank`.
    pub fn lane(&self, rank: u32, queue: u32) -> ShardId {
        ShardId(rank * self.queue_size + queue)
    }

    /// The prefill rank that owns `lane`.
    pub fn rank_of(&self, lane: ShardId) -> u32 {
        lane.0 / self.queue_size
    }

    /// Whether a kick of the lane would do nothing: its worker is dead, or has no chunk, active
    /// or queued.
    pub fn is_idle(&self, lane: ShardId) -> bool {
        let sh = &self.shards[lane];
        sh.dead || (sh.active.is_none() && sh.queue.is_empty())
    }

    /// Puts a chunk on a lane's queue.
    pub fn push(&mut self, lane: ShardId, job: ChunkJob) {
        self.shards[lane].queue.push_back(job);
    }

    /// Blacklists decode rank `decode_rank` of `d` on every rank (a crashed decode).
    pub fn blacklist_everywhere(&mut self, d: DecodeId, ranks: u32) {
        for b in &mut self.blacklists {
            for r in 0..ranks {
                b.insert((d, r));
            }
        }
    }

    /// A restarted decode registered again: every rank takes its sessions off the list
    /// (`bootstrap_thread`: `failed_sessions.remove`).
    pub fn unblacklist(&mut self, d: DecodeId) {
        for b in &mut self.blacklists {
            b.retain(|&(x, _)| x != d);
        }
    }

    /// The lane's worker goes on: with an idle active chunk it starts the next target; with
    /// none it takes the next chunk off its queue (skipping rooms that already failed, as
    /// `transfer_worker` does). Returns at the first batch started, failure, or finished chunk.
    pub fn kick(&mut self, me: PrefillId, lane: ShardId, env: &mut KickEnv) -> Kick {
        let rank = self.rank_of(lane);
        loop {
            let sh = &mut self.shards[lane];
            if sh.dead {
                return Kick::Done;
            }
            match &sh.active {
                Some(a) if a.busy => return Kick::Done,
                Some(_) => {}
                None => {
                    let Some(job) = sh.queue.pop_front() else {
                        return Kick::Done;
                    };
                    if env
                        .reqs
                        .get(job.req)
                        .is_none_or(|r| r.sender == KvPoll::Failed)
                    {
                        continue;
                    }
                    let targets = env.plans[job.decode].rank_targets(rank);
                    sh.active = Some(ActiveChunk {
                        job,
                        target: targets.start,
                        next_target: targets.start,
                        end_target: targets.end,
                        busy: false,
                        flows_left: 0,
                        failed: false,
                        after_kv: None,
                        writes: None,
                    });
                }
            }
            return self.advance(me, lane, rank, env);
        }
    }

    /// Starts the active chunk's next non-dummy target (docs/sglang-pd.md §3.1 steps 1–4): the blacklist check,
    /// then the plan's check for that target (raise → the worker dies; rc −1 → the session is
    /// blacklisted on this rank and the room fails), then the batch.
    fn advance(&mut self, me: PrefillId, lane: ShardId, rank: u32, env: &mut KickEnv) -> Kick {
        let a = self.shards[lane].active.as_mut().expect("an active chunk");
        let job = a.job;
        let Some(req) = env.reqs.get(job.req).filter(|r| r.sender != KvPoll::Failed) else {
            // The room failed while an earlier target's batch was out: the chunk is dropped.
            self.shards[lane].active = None;
            return Kick::Done;
        };
        let d = req.decode;
        let dst = &env.decodes[d];
        let plan = &env.plans[d];
        let Some(i) = next_live_target(a, plan, d, rank) else {
            self.shards[lane].active = None;
            return Kick::ChunkDone(job);
        };
        let decode_rank = plan.target(i).decode_rank;
        a.next_target = i + 1;
        a.target = i;
        if self.blacklists[rank as usize].contains(&(d, decode_rank)) {
            self.shards[lane].active = None;
            return Kick::Fail {
                req: job.req,
                kind: ErrorKind::SessionBlacklisted,
                message: session_not_alive(&dst.session(decode_rank)),
            };
        }
        let creq = chunk_request(req, &job, dst.page_size);
        let error = plan.chunk_target_into(&creq, i, &mut self.flows);
        let writes = oracle_writes(dst, plan, &creq, i, error.as_ref());
        let after_kv = match error {
            Some((e, ErrorTiming::BeforeAnyWrite)) => {
                return self.refuse(lane, rank, (d, decode_rank), job.req, e);
            }
            Some((e, ErrorTiming::AfterKv)) => Some(e),
            None => None,
        };
        let batch = Batch {
            now: env.q.now(),
            lead: send_lead(env.fabric.params(), plan.has_state(), job.last),
            // On the head-sliced path the target's per-layer batches run on the queue's
            // executor threads: that many flows, each with its share of the bytes and writes.
            split: if plan.send_path() == crate::layout::SendPath::Slice {
                SLICE_EXECUTOR_THREADS
            } else {
                1
            },
            token: FlowTag::Kv { prefill: me, lane },
        };
        let req = env.reqs.get_mut(job.req).expect("checked above");
        req.row.transfer_start_ns.get_or_insert(batch.now);
        let n = start_flows(
            &self.flows,
            env.fabric,
            (env.gpus, &dst.gpus),
            &mut req.row,
            batch,
        );
        self.arm(me, lane, n, after_kv, writes, env)
    }

    /// The plan's check refused the target before any write: the chunk is dropped; a raised
    /// error kills the lane's worker (docs/sglang-pd.md §2.4), a return code −1 (or a raise
    /// on decode) blacklists the decode session `session` on this rank and fails the room
    /// (§2.6).
    fn refuse(
        &mut self,
        lane: ShardId,
        rank: u32,
        session: (DecodeId, u32),
        req: ReqRef,
        e: PdError,
    ) -> Kick {
        let sh = &mut self.shards[lane];
        sh.active = None;
        match e.effect {
            Effect::WorkerDies => {
                sh.dead = true;
                Kick::WorkerDied(e)
            }
            Effect::ReturnCodeFailure | Effect::RaisedOnDecode => {
                self.blacklists[rank as usize].insert(session);
                Kick::FailWith { req, error: e }
            }
        }
    }

    /// The target's batch is out (`n` flows): the active chunk waits for them, carrying the
    /// check that raises after its KV and the oracle's writes. A batch with nothing to send
    /// (0 KV bytes on the slice path, a hybrid-MLA sub-rank) still makes its call, which
    /// returns after the network latency.
    fn arm(
        &mut self,
        me: PrefillId,
        lane: ShardId,
        n: u32,
        after_kv: Option<PdError>,
        writes: Option<Vec<Write>>,
        env: &mut KickEnv,
    ) -> Kick {
        let sh = &mut self.shards[lane];
        let a = sh.active.as_mut().expect("still active");
        a.busy = true;
        a.flows_left = n;
        a.failed = false;
        a.after_kv = after_kv;
        a.writes = writes;
        if n == 0 {
            sh.empty_key = Some(env.q.schedule_keyed_in(
                env.base_latency_ns,
                Event::EmptyChunkSent {
                    prefill: me,
                    shard: lane,
                },
            ));
        }
        Kick::Started
    }

    /// One flow of the lane's current batch ended (`transfer_worker` reading the batch's
    /// return code): a −1 blacklists the decode session on this rank and fails the room with
    /// sglang's "Failed to send kv chunk" (a timeout as `transfer_timeout`); an aborted flow
    /// (a crash) only counts. `None` when the lane has no active chunk (lost in a crash).
    #[inline]
    pub fn flow_ended(
        &mut self,
        lane: ShardId,
        end: &crate::fabric::FlowEnd<FlowTag>,
        reqs: &Requests,
        decodes: &IdVec<DecodeId, DecodeEndpoint>,
        seed: u64,
    ) -> Option<FlowVerdict> {
        use crate::fabric::{FailReason, FlowOutcome};
        let active = self.shards[lane].active.as_mut()?;
        active.flows_left -= 1;
        active.failed |= !matches!(end.outcome, FlowOutcome::Completed);
        let (r, last) = (active.job.req, active.flows_left == 0);
        let mut verdict = FlowVerdict {
            bandwidth_mb_s: None,
            fail: None,
            last,
        };
        match end.outcome {
            FlowOutcome::Completed => {
                let bw = end.achieved_bytes_per_ns();
                if bw.is_finite() && end.bytes > 0 {
                    // bytes/ns × 1000 = MB/s, kept as an integer in the histogram.
                    verdict.bandwidth_mb_s = Some((bw * 1000.0).round() as u64);
                }
            }
            FlowOutcome::Failed(reason) => {
                if let Some(d) = reqs.get(r).map(|q| q.decode) {
                    let ep = &decodes[d];
                    let drank = ep.gpus.iter().position(|&g| g == end.dst).unwrap_or(0) as u32;
                    let rank = self.rank_of(lane);
                    self.blacklists[rank as usize].insert((d, drank));
                    let kind = match reason {
                        FailReason::Timeout => ErrorKind::TransferTimeout,
                        _ => ErrorKind::TransferFailed,
                    };
                    let message = failed_to_send(bootstrap_room(seed, r.id), ep, drank);
                    verdict.fail = Some((r, kind, message));
                }
            }
            FlowOutcome::Aborted => {}
        }
        Some(verdict)
    }

    /// Every flow of the lane's current batch ended. If the room still stands, `land` puts
    /// the bytes in decode memory (the request, its plan and what was sent), where the oracle
    /// judges them, and returns the out-of-bounds error a write met: that is a −1, which
    /// blacklists the session on this rank and fails the room (docs/sglang-pd.md §3.8, §2.6).
    /// A state check that raises after the KV went kills the worker (§2.5). Otherwise, and
    /// when the room failed while the batch was out (the worker drops the chunk), the worker
    /// goes on: [`Landed::Next`].
    #[inline]
    pub fn batch_done(
        &mut self,
        lane: ShardId,
        reqs: &Requests,
        (plans, decodes): (
            &IdVec<DecodeId, Arc<PairPlan>>,
            &IdVec<DecodeId, DecodeEndpoint>,
        ),
        seed: u64,
        land: impl FnOnce(&Req, &PairPlan, Landing) -> Option<PdError>,
    ) -> Landed {
        let rank = self.rank_of(lane);
        let sh = &mut self.shards[lane];
        let a = sh.active.as_mut().expect("active chunk");
        a.busy = false;
        let (job, target, failed) = (a.job, a.target, a.failed);
        let (after_kv, writes) = (a.after_kv.take(), a.writes.take());
        let live = reqs.get(job.req).filter(|q| q.sender != KvPoll::Failed);
        let Some(req) = live.filter(|_| !failed) else {
            sh.active = None;
            return Landed::Next;
        };
        let (d, plan) = (req.decode, &*plans[req.decode]);
        let whole = job.last && after_kv.is_none();
        let oob = land(req, plan, Landing { job, writes, whole });
        if let Some(e) = oob {
            let drank = plan.target(target).decode_rank;
            self.blacklists[rank as usize].insert((d, drank));
            let message = failed_to_send(bootstrap_room(seed, req.id), &decodes[d], drank);
            self.shards[lane].active = None;
            return Landed::Fail {
                req: job.req,
                kind: e.kind,
                message,
            };
        }
        if let Some(e) = after_kv {
            // The KV went; then the state check raised and the worker died.
            let sh = &mut self.shards[lane];
            sh.dead = true;
            sh.active = None;
            return Landed::WorkerDied(e);
        }
        Landed::Next
    }

    /// The lane's empty batch call returned: whether its batch is done (it was still
    /// pending; a crash in between cleared it).
    pub fn empty_chunk_returned(&mut self, lane: ShardId) -> bool {
        self.shards[lane].empty_key = None;
        self.empty_chunk_pending(lane)
    }

    /// Whether the lane's current batch had nothing to send and is waiting for its empty
    /// batch call to return.
    pub fn empty_chunk_pending(&self, lane: ShardId) -> bool {
        self.shards[lane]
            .active
            .as_ref()
            .is_some_and(|a| a.busy && a.flows_left == 0)
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

    /// The prefill's `Bootstrapping` clock: armed at 2 s with sglang's 300 s and re-armed at
    /// 3 s (a retraction), it fires once, at 303 s, and fails the request as
    /// `bootstrap_timeout` with sglang's text (the bootstrap room, not the id; elapsed to one
    /// decimal).
    #[test]
    fn a_bootstrapping_sender_times_out_after_its_timeout() {
        use crate::sglang::testkit::{Sim, request};
        const S: Nanos = crate::engine::NS_PER_S;
        let mut sim = Sim::default();
        let r = request(&mut sim.reqs, 3, 16, 4);
        sim.q.schedule_at(2 * S, Event::Tick);
        sim.q.pop();
        let req = sim.reqs.get_mut(r).unwrap();
        PollTimeout::Bootstrap.arm(&mut sim.q, req, r, 300 * S);
        sim.q.schedule_at(3 * S, Event::Tick);
        sim.q.pop();
        PollTimeout::Bootstrap.arm(&mut sim.q, req, r, 300 * S);
        let (t, ev) = sim.q.pop().unwrap();
        assert_eq!(t, 303 * S, "the first clock was cancelled");
        assert!(matches!(ev, Event::BootstrapTimeout { req } if req == r));
        assert!(sim.q.pop().is_none());
        let f = PollTimeout::Bootstrap.fired(r, 300 * S, &mut sim.ctx());
        assert_eq!(f.kind, ErrorKind::BootstrapTimeout);
        assert_eq!(
            f.message,
            format!(
                "Request {} timed out after 300.0s in KVPoll.Bootstrapping",
                bootstrap_room(7, 3)
            )
        );
        assert_eq!(sim.reqs.get(r).unwrap().bootstrap_timeout, None);
    }

    /// The decode's `WaitingForInput` clock: a request admitted at 1 s with a 12.5 s timeout
    /// times out at 13.5 s as `waiting_timeout`.
    #[test]
    fn a_waiting_receiver_times_out_after_its_timeout() {
        use crate::sglang::testkit::{Sim, request};
        const S: Nanos = crate::engine::NS_PER_S;
        let mut sim = Sim::default();
        let r = request(&mut sim.reqs, 0, 16, 4);
        sim.q.schedule_at(S, Event::Tick);
        sim.q.pop();
        let req = sim.reqs.get_mut(r).unwrap();
        req.receiver = KvPoll::WaitingForInput;
        PollTimeout::Waiting.arm(&mut sim.q, req, r, 12_500_000_000);
        let (t, ev) = sim.q.pop().unwrap();
        assert_eq!(t, 13_500_000_000);
        assert!(matches!(ev, Event::WaitingTimeout { req } if req == r));
        let f = PollTimeout::Waiting.fired(r, 12_500_000_000, &mut sim.ctx());
        assert_eq!(f.kind, ErrorKind::WaitingTimeout);
        assert!(
            f.message
                .ends_with("timed out after 12.5s in KVPoll.WaitingForInput"),
            "{}",
            f.message
        );
    }

    /// A clock that fires after its request left the stage is a bug: it panics naming the seed.
    #[test]
    #[should_panic(expected = "timed out in a state it left (seed 7)")]
    fn a_timeout_in_a_state_left_is_a_broken_invariant() {
        use crate::sglang::testkit::{Sim, request};
        let mut sim = Sim::default();
        let r = request(&mut sim.reqs, 0, 16, 4);
        sim.reqs.get_mut(r).unwrap().receiver = KvPoll::Success;
        PollTimeout::Waiting.fired(r, 1, &mut sim.ctx());
    }

    fn job(r: ReqRef, d: u32) -> ChunkJob {
        ChunkJob {
            req: r,
            decode: DecodeId(d),
            first_page: 0,
            end_page: 1,
            last: true,
        }
    }

    fn fabric() -> Fabric {
        crate::fabric::Fabric::build(
            crate::fabric::TopologyConfig {
                nodes: 1,
                gpus_per_node: 8,
                nics_per_node: 8,
                nic_bytes_per_ns: 50.0,
                kind: crate::fabric::TopologyKind::Rail,
                nodes_per_leaf: 1,
                oversubscription: 1.0,
                nvlink_bytes_per_ns: 900.0,
                nodes_per_nvlink_domain: 1,
            },
            Default::default(),
        )
        .unwrap()
    }

    /// A dead worker moves nothing again, whatever is queued behind it (the chunks of healthy
    /// decode instances that hash to the same queue included); other lanes go on.
    #[test]
    fn a_dead_shard_never_moves_again() {
        let mut t = TransferQueues::new(2, 4);
        let r = ReqRef { slot: 0, id: 0 };
        let dead = t.lane(1, 1);
        t.shards[dead].dead = true;
        t.push(dead, job(r, 0));
        t.push(dead, job(r, 3));
        let mut reqs = Requests::default();
        let mut fabric = fabric();
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
        assert!(matches!(t.kick(PrefillId(0), dead, &mut env), Kick::Done));
        assert_eq!(t.shards[dead].queue.len(), 2, "nothing was taken off");
        // A live lane drops chunks of requests that already ended and stays idle.
        let live = t.lane(0, 1);
        t.push(live, job(r, 0));
        assert!(matches!(t.kick(PrefillId(0), live, &mut env), Kick::Done));
        assert!(t.shards[live].queue.is_empty());
    }

    /// A crash empties every lane and revives dead workers (they come back with the restart).
    #[test]
    fn a_crash_clears_queues_and_workers() {
        let mut t = TransferQueues::new(2, 2);
        let r = ReqRef { slot: 0, id: 0 };
        t.push(ShardId(0), job(r, 0));
        t.shards[ShardId(3)].dead = true;
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
    fn lanes_number_ranks_and_back() {
        let t = TransferQueues::new(4, 4);
        assert_eq!(t.lane(2, 3), ShardId(11));
        assert_eq!(t.rank_of(ShardId(11)), 2);
    }

    /// Rooms are 63-bit, fixed by (seed, id), and distinct across ids and seeds.
    #[test]
    fn rooms_are_63_bit_and_distinct() {
        let mut seen = BTreeSet::new();
        for seed in 0..4 {
            for id in 0..2_000 {
                let r = bootstrap_room(seed, id);
                assert!(r < 1 << 63);
                assert!(seen.insert(r), "room {r} repeats");
                assert_eq!(r, bootstrap_room(seed, id));
            }
        }
    }

    #[test]
    fn messages_fill_sglangs_templates() {
        let e = DecodeEndpoint {
            instance: InstanceId(258),
            gpus: vec![],
            page_size: 16,
            watched: false,
            ports: vec![17_000, 17_001],
        };
        assert_eq!(
            failed_to_send(42, &e, 1),
            "Failed to send kv chunk of 42 to 10.0.1.2:17001"
        );
        assert_eq!(
            session_not_alive(&e.session(0)),
            "Decode instance could be dead, remote mooncake session 10.0.1.2:17000 is not alive"
        );
    }
}
