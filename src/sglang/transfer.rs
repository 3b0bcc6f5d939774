//! The prefill side of the Mooncake transfer (`docs/sglang-pd.md` §2.4–§2.6, §3.1; sglang
//! `disaggregation/mooncake/conn.py` @ 0005973a, `MooncakeKVManager.transfer_worker` and
//! `add_transfer_request`): the component [`TransferWorkers`].
//!
//! Every prefill **rank** (TP rank) runs its own `MooncakeKVManager`, so every rank has its own
//! `queue_size` transfer queues, one worker thread each, and its own session blacklist. A room's
//! chunk goes, on each rank, to queue `sum(session ports of the decode ranks that rank serves for
//! the room) % queue_size` ([`rank_queue`]). A worker sends one chunk at a time and, within a
//! chunk, walks its decode targets one after another (`for req in reqs_to_be_processed`). A
//! raised error kills that rank's worker alone; a return code −1 blacklists that decode session
//! on that rank and fails the room. A finished batch lands in decode memory, where the
//! corruption oracle judges it; the last chunk's last rank concludes the transfer.
//!
//! The workers change their own state and the request they handle; what reaches beyond them —
//! a room that fails, the prefill freeing its side, a worker's death in the error counts, a
//! worker going on after a failure is applied — is an [`Effect`] pushed on the
//! [`TransferCtx`], which `World` applies in order right after the call (`sglang::effect`).
//!
//! Lanes: the shards of all ranks of a prefill live in one list, lane `rank · queue_size +
//! queue`, so an event names a lane with one [`ShardId`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::engine::{EventKey, EventQueue, Nanos};
use crate::fabric::{FabricParams, GpuId};
use crate::vocab::flow::FlowTag;

/// The fabric as the simulator runs it: each flow tagged with its owner.
type Fabric = crate::fabric::Fabric<FlowTag>;
use crate::layout::{
    self, ChunkRequest, DcpSpan, DecodeMemory, ErrorTiming, PairPlan, PdError, RankFlow, RequestId,
    Write,
};
use crate::metrics::{Histogram, WorkerDeath};
use crate::spec::TransferBackend;
use crate::vocab::event::{Event, lane};
use crate::vocab::ids::{DecodeId, IdVec, InstanceId, PrefillId, ShardId};
use crate::vocab::requests::{ChunkJob, KvPoll, Req, ReqRef, Requests};
use crate::vocab::{ErrorKind, RequestRow};

use super::effect::Effect;
use super::{FabricTimer, Failure};

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

/// The chunk a lane's worker is sending, and to which of its targets (plain values: what the
/// current target's batch carries to its end is the shard's [`Shard::after_kv`] and
/// [`Shard::writes`], so dropping a chunk frees nothing).
#[derive(Clone, Copy)]
struct ActiveChunk {
    /// The chunk.
    job: ChunkJob,
    /// Index into the plan's targets of the target being sent to (meaningful while `busy`).
    target: usize,
    /// The first target not yet started.
    next_target: usize,
    /// The end of this rank's targets in the plan of the job's decode instance
    /// ([`PairPlan::rank_targets`], kept: two binary searches per look-up).
    end_target: usize,
    /// The current target's batch is on the fabric (or its empty batch call is pending).
    busy: bool,
    /// Mooncake batches (flows) of the current target not yet ended.
    flows_left: u32,
    /// A batch of the current target returned −1 (the room already failed).
    failed: bool,
}

/// One transfer queue of one prefill rank, with its worker thread.
#[derive(Default)]
struct Shard {
    /// Chunks waiting for the worker.
    queue: VecDeque<ChunkJob>,
    /// The chunk being sent.
    active: Option<ActiveChunk>,
    /// A check that raises after the KV of the current target's batch went (the state checks
    /// of docs/sglang-pd.md §2.5), taken when the batch ends.
    after_kv: Option<PdError>,
    /// The concrete writes of the current target's batch, for a decode watched by the oracle
    /// through an inexact plan, taken when the batch ends.
    writes: Option<Vec<Write>>,
    /// The worker thread died on a raised error: nothing on this queue moves again (docs/sglang-pd.md §2.4).
    dead: bool,
    /// The pending call is the staging buffer's watermark wait, not an empty batch: when it
    /// returns the worker tries the same target again (`sglang::staging`).
    deferred: bool,
    /// The pending return of an empty batch call (cancelled by a crash).
    empty_key: Option<EventKey>,
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

/// The first session port; rank `r` of global instance `i` listens on
/// `CONTROL_PORT_BASE + 97 i + r`, chosen so decode instances spread over the transfer shards
/// (sglang's ports are random; `docs/sglang-pd.md` §2.4).
const CONTROL_PORT_BASE: u32 = 17_000;

/// The session port of rank `rank` of global instance `instance`.
pub fn session_port(instance: u32, rank: u32) -> u32 {
    CONTROL_PORT_BASE + 97 * instance + rank
}

/// The transfer queue prefill rank `rank` puts a room's chunks on when the room goes to decode
/// instance `decode` (global index) through `plan`: `sum(session ports of the decode ranks that
/// rank serves) % queue_size`, as `MooncakeKVManager.add_transfer_request` hashes it
/// (`docs/sglang-pd.md` §11.3). The workers queue chunks by it; `pdsim explain` uses it to name
/// the healthy decode instances that share a dead queue.
// Inlinable across codegen units, whatever modules the crate gains (issue 39's callgrind:
// left to the partitioning it was called out of line, +2 M instructions on the 30k case).
#[inline]
pub fn rank_queue(plan: &PairPlan, decode: u32, rank: u32, queue_size: u32) -> u32 {
    let sum: u64 = plan
        .rank_targets(rank)
        .map(|i| u64::from(session_port(decode, plan.target(i).decode_rank)))
        .sum();
    (sum % u64::from(queue_size.max(1))) as u32
}

/// Rank 0's queue for decode instance `instance` when prefill rank 0 serves decode rank 0
/// alone (equal attention TP): the queue `trace.json` draws a transfer on.
pub fn transfer_shard(instance: u32, queue_size: u32) -> u32 {
    session_port(instance, 0) % queue_size.max(1)
}

/// Decode memory as a finished batch's RDMA writes reach it: the corruption oracle
/// ([`DecodeMemory`]) of each decode instance it watches. The decode owns its memory; the
/// workers only land bytes in it.
pub trait DecodeMemories {
    /// The oracle's memory of decode `d`, which the oracle watches.
    fn watched(&mut self, d: DecodeId) -> &mut DecodeMemory;
}

/// What the transfer workers are handed for one call (`sim` builds it over `World`'s fields).
pub struct TransferCtx<'a> {
    /// The event queue; its clock is the simulated now.
    pub q: &'a mut EventQueue<Event>,
    /// Every request in flight.
    pub reqs: &'a mut Requests,
    /// The fabric the batches cross.
    pub fabric: &'a mut Fabric,
    /// The fabric's pending `FabricDue` event, kept at its next due time.
    pub timer: &'a mut FabricTimer,
    /// Decode memory, where finished batches land.
    pub memories: &'a mut dyn DecodeMemories,
    /// The achieved rate of every completed KV flow, MB/s (`summary.json` `transfer`).
    pub bandwidth: &'a mut Histogram,
    /// Bytes the KV flows sent again after packet loss.
    pub retransmitted_bytes: &'a mut f64,
    /// What the call asks of the rest of the simulation, in order: applied right after it.
    pub fx: &'a mut Vec<Effect>,
}

/// One prefill instance as its transfer workers see it ([`TransferWorkers::new`]).
pub struct PrefillSide {
    /// Its ranks, every attention-TP rank of every pipeline stage (stage-major): each has its
    /// own queues, workers and blacklist.
    pub ranks: u32,
    /// GPU of each rank.
    pub gpus: Vec<GpuId>,
    /// The compiled plan from it to each decode instance.
    pub plans: IdVec<DecodeId, Arc<PairPlan>>,
}

/// The transfer workers of every prefill instance, the component `World` hands a prefill's
/// finished chunks ([`TransferWorkers::enqueue`]), the ends of its lanes' fabric flows
/// ([`TransferWorkers::flow_ended`]) and the returns of their empty batch calls, and whose
/// [`Effect::Kick`] comes back to [`TransferWorkers::kick`].
pub struct TransferWorkers {
    /// Each prefill instance's queues, workers and blacklists.
    prefills: IdVec<PrefillId, TransferQueues>,
    /// What a prefill needs to know of each decode instance to send to it.
    endpoints: IdVec<DecodeId, DecodeEndpoint>,
    /// What the control plane takes to tell decode a transfer concluded, ns.
    control_latency_ns: Nanos,
    /// Every decode rank's staging ring (`SGLANG_DISAGG_STAGING_BUFFER`); empty unless a plan
    /// stages.
    staging: super::staging::StagingRings,
}

/// What one step of a lane's worker did ([`TransferQueues::step`]).
enum Step {
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
    /// An exception escaped the worker loop: this lane's worker thread died.
    WorkerDied(PdError),
    /// The worker sent this chunk to every one of its targets.
    ChunkDone(ChunkJob),
}

/// The transfer queues of every rank of one prefill instance, and what its workers need of it.
struct TransferQueues {
    /// `sglang.queue_size`: queues per rank.
    queue_size: u32,
    /// Every rank's queues, lane `rank · queue_size + queue`.
    shards: IdVec<ShardId, Shard>,
    /// Per prefill rank, the decode sessions `(instance, decode rank)` that rank blacklisted
    /// after a return code −1 (docs/sglang-pd.md §2.6): later chunks to them fail at once.
    /// Each with when it failed, or `None` when its decode went down (no probe can reach a
    /// dead process; its re-registration takes it off).
    blacklists: Vec<Blacklist>,
    /// `SGLANG_ENABLE_FAILED_SESSION_PROBE`: the probe's interval, ns (`None`: off).
    probe_ns: Option<Nanos>,
    /// The flows of the batch being started (reused, so a batch allocates nothing).
    flows: Vec<RankFlow>,
    /// GPU of each TP rank of the prefill.
    gpus: Vec<GpuId>,
    /// The compiled plan from the prefill to each decode instance.
    plans: IdVec<DecodeId, Arc<PairPlan>>,
    /// False between the prefill's crash and its restart: its workers died with it.
    up: bool,
    /// `--disaggregation-transfer-backend`: where its manager differs from Mooncake's
    /// (`spec::TransferBackend`: the aux call, the blacklist, a raise, the slice's posting,
    /// the queue a room's chunks take).
    backend: TransferBackend,
}

/// One prefill rank's blacklisted decode sessions, each with when it failed (`None`: its
/// decode went down).
type Blacklist = BTreeMap<(DecodeId, u32), Option<Nanos>>;

/// The chunk as the plan sees it: prefill and decode page ids at the chunk's page positions.
/// sglang indexes decode's page list with the prefill's positions (and truncates the source
/// when the decode list is shorter), which is exactly where a page-size mismatch bites. A
/// decode with context parallelism takes [`chunk_request_dcp`] instead.
pub fn chunk_request<'r>(req: &'r Req, job: &ChunkJob, decode_page_size: u32) -> ChunkRequest<'r> {
    let (a, b) = (job.first_page as usize, job.end_page as usize);
    let dst_all = decode_prompt_pages(req, decode_page_size);
    ChunkRequest {
        dst_pages: &dst_all[a.min(dst_all.len())..b.min(dst_all.len())],
        ..chunk_source(req, job)
    }
}

/// [`chunk_request`] for a decode with context parallelism (`decode_page_size` is then its
/// virtual page of `page_size × dcp` tokens): `transfer_worker` hands `send_kvcache_dcp` the
/// whole `req.dst_kv_indices`, unsliced, and the chunk's place in the request ([`dcp_span`]).
#[cold]
pub fn chunk_request_dcp<'r>(
    req: &'r Req,
    job: &ChunkJob,
    decode_page_size: u32,
) -> ChunkRequest<'r> {
    ChunkRequest {
        dst_pages: decode_prompt_pages(req, decode_page_size),
        ..chunk_source(req, job)
    }
}

/// The request's decode page ids that hold its prompt: decode's KV indices cover the prompt
/// only (the rest of its reservation is for output).
#[inline]
fn decode_prompt_pages(req: &Req, decode_page_size: u32) -> &[u32] {
    let prompt_pages =
        (req.prompt().div_ceil(decode_page_size) as usize).min(req.on_decode.pages.len());
    &req.on_decode.pages[..prompt_pages]
}

/// Chunk `job` of `req` with its prefill pages, slots and aux rows, and no decode pages yet.
#[inline]
fn chunk_source<'r>(req: &'r Req, job: &ChunkJob) -> ChunkRequest<'r> {
    let (a, b) = (job.first_page as usize, job.end_page as usize);
    let n = req.on_prefill.pages.len();
    ChunkRequest {
        src_pages: &req.on_prefill.pages[a.min(n)..b.min(n)],
        dst_pages: &[],
        last: job.last,
        src_slot: req.on_prefill.slot,
        dst_slot: req.on_decode.slot,
        src_aux: 0,
        dst_aux: req.on_decode.aux,
    }
}

/// Where chunk `job` of `req` sits in its request, on a pair whose decode has context
/// parallelism: its first page position and its KV tokens (`kv_chunk.num_kv_tokens`). The
/// physical page is the decode rank's registered `page_size`, the prefill's too (sglang's
/// first contact refuses unequal page sizes).
#[cold]
pub fn dcp_span(plan: &PairPlan, req: &Req, job: &ChunkJob) -> DcpSpan {
    let ps = plan.decode_layouts()[0].page_size;
    let start = job.first_page.saturating_mul(ps);
    let end = job.end_page.saturating_mul(ps).min(req.prompt());
    DcpSpan {
        src_page_offset: job.first_page,
        tokens: end.saturating_sub(start),
    }
}

/// Target `i`'s flows of chunk `creq` (chunk `job` of `req`) on a pair whose decode has
/// context parallelism (`send_kvcache_dcp`). Out of line: a pair without DCP never calls it.
#[cold]
#[inline(never)]
fn dcp_target_chunk(
    plan: &PairPlan,
    (req, job): (&Req, &ChunkJob),
    creq: &ChunkRequest<'_>,
    i: usize,
    flows: &mut Vec<RankFlow>,
) -> Option<(PdError, ErrorTiming)> {
    plan.chunk_target_dcp_into(creq, dcp_span(plan, req, job), i, flows)
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

/// The line sglang logs when an exception escapes `transfer_worker` (0005973a):
/// `f"Transfer thread failed because of {e}. Prefill instance with
/// bootstrap_port={self.bootstrap_port} is dead."` — the thread dies with it.
pub fn transfer_thread_failed(e: &str) -> String {
    format!(
        "Transfer thread failed because of {e}. Prefill instance with bootstrap_port={BOOTSTRAP_PORT} is dead."
    )
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
///
/// NIXL and MORI post the aux and state writes with the KV and wait for all together
/// (`TransferBackend::aux_after_kv` false): their last chunk pays no extra floor.
#[inline]
fn send_lead(p: &FabricParams, has_state: bool, last: bool, aux_after_kv: bool) -> Nanos {
    let floor = p.base_latency_ns + p.batch_overhead_ns;
    let calls = if last && aux_after_kv {
        1 + u64::from(has_state)
    } else {
        0
    };
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

/// Where a finished batch's bytes land in decode memory, for the oracle's judgment: an inexact
/// plan's concrete `writes` are applied as written and answer the out-of-bounds error one met
/// (a −1); an exact plan's bytes are what the decode expects, so a watched decode records its
/// units of the chunk as filled — with the state slot and aux row when the chunk is `whole`
/// (the request's last, nothing raised after its KV) — and nothing can go out of bounds.
#[inline]
fn land(
    memories: &mut dyn DecodeMemories,
    endpoint: &DecodeEndpoint,
    (req, plan, job): (&Req, &PairPlan, &ChunkJob),
    writes: Option<Vec<Write>>,
    whole: bool,
) -> Option<PdError> {
    let d = req.decode;
    if let Some(writes) = &writes {
        return memories
            .watched(d)
            .apply(plan, RequestId(req.id), writes)
            .error;
    }
    if endpoint.watched {
        let c = if plan.dcp_size() > 1 {
            chunk_request_dcp(req, job, endpoint.page_size)
        } else {
            chunk_request(req, job, endpoint.page_size)
        };
        memories.watched(d).apply_exact(
            RequestId(req.id),
            c.dst_pages,
            c.dst_slot.filter(|_| whole),
            whole.then_some(c.dst_aux),
        );
    }
    None
}

impl TransferWorkers {
    /// Idle workers on every rank of every prefill instance in `prefills`, sending to the
    /// decode instances `endpoints`: `queue_size` queues a rank; a concluded transfer reaches
    /// decode `control_latency_ns` later.
    pub fn new(
        prefills: Vec<PrefillSide>,
        endpoints: IdVec<DecodeId, DecodeEndpoint>,
        queue_size: u32,
        control_latency_ns: Nanos,
    ) -> Self {
        let mut queues = IdVec::default();
        for p in prefills {
            queues.push(TransferQueues::new(p, queue_size));
        }
        Self {
            prefills: queues,
            endpoints,
            control_latency_ns,
            staging: Default::default(),
        }
    }

    /// Runs every prefill's workers as `backend`'s manager does (the default is Mooncake's).
    pub fn set_backend(&mut self, backend: TransferBackend) {
        for t in self.prefills.iter_mut() {
            t.backend = backend;
        }
    }

    /// Turns on `SGLANG_ENABLE_FAILED_SESSION_PROBE` on every prefill rank, a pass every
    /// `interval_ns` ([`probed_back`]).
    pub fn set_failed_session_probe(&mut self, interval_ns: Nanos) {
        for t in self.prefills.iter_mut() {
            t.probe_ns = Some(interval_ns.max(1));
        }
    }

    /// The compiled plan from prefill `p` to decode `d` (decode's first contact reads its
    /// checks).
    pub fn plan(&self, p: PrefillId, d: DecodeId) -> &PairPlan {
        &self.prefills[p].plans[d]
    }

    /// `add_transfer_request` on every rank of prefill `p`: each rank puts the chunk on its
    /// queue [`rank_queue`], then each rank's worker goes on, in rank order. The request counts
    /// one chunk in flight per rank.
    pub fn enqueue(&mut self, p: PrefillId, job: ChunkJob, cx: &mut TransferCtx<'_>) {
        let t = &mut self.prefills[p];
        let decode = self.endpoints[job.decode].instance.0;
        let ranks = t.plans[job.decode].prefill_layouts().len() as u32;
        let mut room = 0;
        if let Some(req) = cx.reqs.get_mut(job.req) {
            // The prefill's `step_done` counted the chunk once; every further rank adds one.
            req.chunks_in_flight += ranks - 1;
            room = req.row.bootstrap_room;
        }
        // Every rank's lane gets the chunk before any worker moves (the lane is recomputed,
        // cheaply, rather than kept in a list allocated per chunk).
        for rank in 0..ranks {
            let l = t.chunk_lane(job.decode, (decode, room), rank);
            t.push(l, job);
        }
        // A worker that failed a room stopped until the failure is applied: the ranks after it
        // go on after that too, in order.
        let mut at_once = true;
        for rank in 0..ranks {
            let l = self.prefills[p].chunk_lane(job.decode, (decode, room), rank);
            if at_once {
                at_once = self.kick(p, l, cx);
            } else {
                cx.fx.push(Effect::Kick {
                    prefill: p,
                    lane: l,
                });
            }
        }
    }

    /// The worker of prefill `p`'s lane `lane` goes on: it sends its next batch, dropping the
    /// rooms that fail on the way ([`Effect::Fail`]) and concluding the transfers whose last
    /// chunk it sent. A room it fails leaves the request table, which the worker reads next,
    /// so it stops there and pushes its own [`Effect::Kick`]; returns false then (whatever
    /// else was to go on waits for the failure too).
    pub fn kick(&mut self, p: PrefillId, lane: ShardId, cx: &mut TransferCtx<'_>) -> bool {
        let t = &mut self.prefills[p];
        if !t.up {
            return true;
        }
        loop {
            match t.step(p, lane, (&self.endpoints, &mut self.staging), cx) {
                Step::Done => return true,
                Step::Started => {
                    cx.timer.sync(cx.q, cx.fabric);
                    return true;
                }
                Step::Fail { req, kind, message } => {
                    cx.fx.push(Effect::Fail { req, kind, message });
                    cx.fx.push(Effect::Kick { prefill: p, lane });
                    return false;
                }
                Step::WorkerDied(e) => {
                    let now = cx.q.now();
                    cx.fx.push(t.death(p, lane, &e, now));
                    return true;
                }
                Step::ChunkDone(job) => {
                    let plan = &*t.plans[job.decode];
                    let late =
                        (plan.has_extras()).then(|| (plan, self.endpoints[job.decode].page_size));
                    conclude(p, job, (self.control_latency_ns, late), cx);
                    // The usual end of a chunk: nothing queued behind it, so going on would
                    // find the worker idle (skipped, not paid for).
                    if t.is_idle(lane) {
                        return true;
                    }
                }
            }
        }
    }

    /// One flow of prefill `p`'s lane `lane` ended (`transfer_worker` reading the batch's
    /// return code): a −1 blacklists the decode session on this rank and fails the room with
    /// sglang's "Failed to send kv chunk" (a timeout as `transfer_timeout`; the TP group's MIN
    /// poll fails the whole request); an aborted flow (a crash) only counts. The batch's last
    /// flow ends the batch: its bytes land, and the worker goes on. Nothing when the lane has
    /// no active chunk (lost in a crash).
    #[inline]
    pub fn flow_ended(
        &mut self,
        p: PrefillId,
        lane: ShardId,
        end: &crate::fabric::FlowEnd<FlowTag>,
        cx: &mut TransferCtx<'_>,
    ) {
        use crate::fabric::{FailReason, FlowOutcome};
        let t = &mut self.prefills[p];
        let rank = t.rank_of(lane);
        let Some(active) = t.shards[lane].active.as_mut() else {
            return;
        };
        active.flows_left -= 1;
        active.failed |= !matches!(end.outcome, FlowOutcome::Completed);
        let (r, last) = (active.job.req, active.flows_left == 0);
        let mut failed_room = false;
        match end.outcome {
            FlowOutcome::Completed => {
                let bw = end.achieved_bytes_per_ns();
                if bw.is_finite() && end.bytes > 0 {
                    // bytes/ns × 1000 = MB/s, kept as an integer in the histogram.
                    cx.bandwidth.record((bw * 1000.0).round() as u64);
                }
            }
            FlowOutcome::Failed(reason) => {
                if let Some((d, room)) = cx.reqs.get(r).map(|q| (q.decode, q.row.bootstrap_room)) {
                    let ep = &self.endpoints[d];
                    let drank = ep.gpus.iter().position(|&g| g == end.dst).unwrap_or(0) as u32;
                    if t.backend.blacklists_sessions() {
                        t.blacklists[rank as usize].insert((d, drank), Some(cx.q.now()));
                    }
                    let kind = match reason {
                        FailReason::Timeout => ErrorKind::TransferTimeout,
                        _ => ErrorKind::TransferFailed,
                    };
                    let message = t
                        .backend
                        .write_failed_text(room, || failed_to_send(room, ep, drank));
                    cx.fx.push(Effect::Fail {
                        req: r,
                        kind,
                        message,
                    });
                    failed_room = true;
                }
            }
            FlowOutcome::Aborted => {}
        }
        *cx.retransmitted_bytes += end.retransmitted_bytes;
        if last {
            self.batch_done(p, lane, !failed_room, cx);
        }
    }

    /// Prefill `p`'s lane `lane`'s empty batch call returned: if its batch was still pending
    /// (a crash in between cleared it), the batch is done.
    pub fn empty_batch_returned(&mut self, p: PrefillId, lane: ShardId, cx: &mut TransferCtx<'_>) {
        let sh = &mut self.prefills[p].shards[lane];
        sh.empty_key = None;
        if std::mem::take(&mut sh.deferred) {
            return self.retry_staged(p, lane, cx);
        }
        if sh
            .active
            .as_ref()
            .is_some_and(|a| a.busy && a.flows_left == 0)
        {
            self.batch_done(p, lane, true, cx);
        }
    }

    /// Every flow of the lane's current batch ended. If the room still stands, the bytes land
    /// in decode memory ([`land`]), where the oracle judges them; an out-of-bounds write is a
    /// −1, which blacklists the session on this rank and fails the room (docs/sglang-pd.md
    /// §3.8, §2.6). A state check that raises after the KV went kills the worker (§2.5).
    /// Otherwise, and when the room failed while the batch was out (the worker drops the
    /// chunk), the worker goes on with its next target: at once when `at_once`, else after the
    /// failure pushed before it is applied.
    fn batch_done(&mut self, p: PrefillId, lane: ShardId, at_once: bool, cx: &mut TransferCtx<'_>) {
        let t = &mut self.prefills[p];
        let rank = t.rank_of(lane);
        let sh = &mut t.shards[lane];
        let a = sh.active.as_mut().expect("active chunk");
        a.busy = false;
        let (job, target, failed) = (a.job, a.target, a.failed);
        let (after_kv, writes) = (sh.after_kv.take(), sh.writes.take());
        let live = cx.reqs.get(job.req).filter(|q| q.sender != KvPoll::Failed);
        let Some(req) = live.filter(|_| !failed) else {
            sh.active = None;
            return self.go_on(p, lane, at_once, cx);
        };
        let (d, plan) = (req.decode, &*t.plans[req.decode]);
        let whole = job.last && after_kv.is_none();
        let ep = &self.endpoints[d];
        if let Some(e) = land(cx.memories, ep, (req, plan, &job), writes, whole) {
            let drank = plan.target(target).decode_rank;
            if t.backend.blacklists_sessions() {
                t.blacklists[rank as usize].insert((d, drank), Some(cx.q.now()));
            }
            let room = req.row.bootstrap_room;
            let message = t
                .backend
                .write_failed_text(room, || failed_to_send(room, ep, drank));
            t.shards[lane].active = None;
            cx.fx.push(Effect::Fail {
                req: job.req,
                kind: e.kind,
                message,
            });
            return self.go_on(p, lane, false, cx);
        }
        if plan.has_extras() {
            let at = (plan, self.control_latency_ns);
            staged_landed(&mut self.staging, at, (d, target), &job, cx.q.now());
        }
        if let Some(e) = after_kv {
            if !t.backend.raise_kills_worker() {
                // The KV went; then the state check raised: NIXL's worker fails the room only.
                t.shards[lane].active = None;
                cx.fx.push(Effect::Fail {
                    req: job.req,
                    kind: e.kind,
                    message: t.backend.raised_text(&e.message),
                });
                return self.go_on(p, lane, false, cx);
            }
            // The KV went; then the state check raised and the worker died.
            let sh = &mut t.shards[lane];
            sh.dead = true;
            sh.active = None;
            let now = cx.q.now();
            cx.fx.push(t.death(p, lane, &e, now));
            return;
        }
        self.go_on(p, lane, at_once, cx)
    }

    /// The staging buffer's watermark wait of prefill `p`'s lane `lane` ended: the worker
    /// tries the target it waited on again. sglang puts the chunk back on the queue and takes
    /// the next one after the wait (`_do_staging_transfer` → `queue.put`, then the worker
    /// loop), so a chunk queued behind may go first there; pdsim retries the same chunk at the
    /// same target (targets it already sent are not sent again).
    #[cold]
    #[inline(never)]
    fn retry_staged(&mut self, p: PrefillId, lane: ShardId, cx: &mut TransferCtx<'_>) {
        if let Some(a) = self.prefills[p].shards[lane].active.as_mut() {
            a.busy = false;
            a.next_target = a.target;
        }
        self.kick(p, lane, cx);
    }

    /// The lane's worker goes on: at once, or after the effects pushed so far are applied
    /// ([`Effect::Kick`]).
    #[inline]
    fn go_on(&mut self, p: PrefillId, lane: ShardId, at_once: bool, cx: &mut TransferCtx<'_>) {
        if at_once {
            self.kick(p, lane, cx);
        } else {
            cx.fx.push(Effect::Kick { prefill: p, lane });
        }
    }

    /// Prefill `p` crashed: its workers die with it (nothing moves until its restart) and
    /// every queue and pending empty batch call is lost. A batch on the fabric is dropped when
    /// its flows, which the crash aborts right after this, end ([`TransferWorkers::flow_ended`]);
    /// the dead workers come back with the restart.
    pub fn crash(&mut self, p: PrefillId, q: &mut EventQueue<Event>) {
        let t = &mut self.prefills[p];
        t.up = false;
        for sh in t.shards.iter_mut() {
            sh.queue.clear();
            sh.dead = false;
            if let Some(k) = sh.empty_key.take() {
                q.cancel(k);
                sh.deferred = false;
                sh.active = None;
                sh.after_kv = None;
                sh.writes = None;
            }
        }
    }

    /// Prefill `p` restarted: its workers are back, every queue empty.
    pub fn restart(&mut self, p: PrefillId) {
        self.prefills[p].up = true;
    }

    /// Decode `d` crashed: every rank of every prefill blacklists each of its `ranks`
    /// sessions.
    pub fn decode_down(&mut self, d: DecodeId, ranks: u32) {
        self.staging.decode_down(d);
        for t in self.prefills.iter_mut() {
            for b in &mut t.blacklists {
                for r in 0..ranks {
                    b.insert((d, r), None);
                }
            }
        }
    }

    /// A restarted decode `d` registered again: every rank of every prefill takes its
    /// sessions off the list (`bootstrap_thread`: `failed_sessions.remove`).
    pub fn decode_registered(&mut self, d: DecodeId) {
        for t in self.prefills.iter_mut() {
            for b in &mut t.blacklists {
                b.retain(|&(x, _), _| x != d);
            }
        }
    }
}

/// `--disaggregation-enable-kv-checksum`: what one prefill rank's digest of a `prompt`-token
/// request takes, ns (`page_indices_for_request(req, end_idx)`: the pages of its prompt).
/// Out of line: a run without the flag never calls it.
#[inline(never)]
fn prefill_digest_ns(plan: &PairPlan, prompt: u32) -> Nanos {
    let page_size = plan.prefill_layouts()[0].page_size.max(1);
    plan.kv_checksum()
        .map_or(0, |c| c.digest_ns(u64::from(prompt.div_ceil(page_size))).0)
}

/// What decode's re-digest of a `prompt`-token request takes, ns: decode's KV indices cover
/// the prompt (`chunk_request`). Out of line, as [`prefill_digest_ns`].
#[inline(never)]
fn decode_verify_ns(c: &crate::layout::KvChecksum, prompt: u32, decode_page_size: u32) -> Nanos {
    c.digest_ns(u64::from(prompt.div_ceil(decode_page_size.max(1))))
        .1
}

/// What decode does with a landed request before it may join a batch, beyond being told, ns:
/// with the staging buffer it scatters the last chunk first ([`last_scatter_ns`]), then with
/// `--disaggregation-enable-kv-checksum` it digests the landed pages ([`decode_verify_ns`]).
/// Out of line: a plan with neither never calls it.
#[cold]
#[inline(never)]
fn late_ns(plan: &PairPlan, job: &ChunkJob, prompt: u32, decode_page_size: u32) -> Nanos {
    plan.staging().map_or(0, |s| last_scatter_ns(s, job))
        + plan
            .kv_checksum()
            .map_or(0, |c| decode_verify_ns(c, prompt, decode_page_size))
}

/// One rank of prefill `p` sent chunk `job` to all its targets. Once the last chunk's last
/// rank is done the transfer concludes (`conclude_transfer(Success)`, which the prefill's
/// scheduler polls as the MIN over its ranks): the sender is `Success`, decode is told over
/// the control plane `control_latency_ns` later, and the prefill frees its side and may admit
/// more ([`Effect::Release`]). With `--disaggregation-enable-kv-checksum` (`verify`) decode
/// digests the landed pages before the request may join a batch: its `Success` is handled
/// that much later (the verdict itself is `sglang::checksum`'s, at that event).
#[inline]
fn conclude(
    p: PrefillId,
    job: ChunkJob,
    (control_latency_ns, late): (Nanos, Option<(&PairPlan, u32)>),
    cx: &mut TransferCtx<'_>,
) {
    let r = job.req;
    let Some(req) = cx.reqs.get_mut(r).filter(|q| q.sender != KvPoll::Failed) else {
        return;
    };
    req.chunks_in_flight -= 1;
    if !(job.last && req.chunks_in_flight == 0) {
        return;
    }
    req.sender = KvPoll::Success;
    req.row.transfer_end_ns = Some(cx.q.now());
    match late {
        None => {
            cx.q.schedule_lane(
                lane::CONTROL,
                control_latency_ns,
                Event::TransferSucceeded { req: r },
            );
        }
        // Off the control lane: its delay is fixed, and this one grows with the request.
        Some((plan, decode_page_size)) => {
            let at = control_latency_ns + late_ns(plan, &job, req.prompt(), decode_page_size);
            cx.q.schedule_in(at, Event::TransferSucceeded { req: r });
        }
    }
    cx.fx.push(Effect::Release { prefill: p, req: r });
}

impl TransferQueues {
    /// `queue_size` idle queues on each rank of prefill `p`, its workers up.
    fn new(p: PrefillSide, queue_size: u32) -> Self {
        let mut shards = IdVec::default();
        for _ in 0..p.ranks * queue_size {
            shards.push(Shard::default());
        }
        Self {
            queue_size,
            shards,
            blacklists: vec![BTreeMap::new(); p.ranks as usize],
            probe_ns: None,
            backend: TransferBackend::default(),
            flows: Vec::new(),
            gpus: p.gpus,
            plans: p.plans,
            up: true,
        }
    }

    /// The lane of queue `queue` of prefill rank `rank`.
    fn lane(&self, rank: u32, queue: u32) -> ShardId {
        ShardId(rank * self.queue_size + queue)
    }

    /// The prefill rank that owns `lane`.
    fn rank_of(&self, lane: ShardId) -> u32 {
        lane.0 / self.queue_size
    }

    /// The lane of rank `rank` that a chunk to decode `d` (global instance `decode`) goes on.
    fn chunk_lane(&self, d: DecodeId, (decode, room): (u32, u64), rank: u32) -> ShardId {
        // NIXL shards a room by its number (`add_transfer_request`: `bootstrap_room %
        // len(self.transfer_queues)`); MORI has no queues (its scheduler submits) and is given
        // the same [simplified].
        if self.backend.queues_by_room() {
            return self.lane(rank, (room % u64::from(self.queue_size.max(1))) as u32);
        }
        self.lane(
            rank,
            rank_queue(&self.plans[d], decode, rank, self.queue_size),
        )
    }

    /// Whether the lane's worker would do nothing: it is dead, or has no chunk, active or
    /// queued.
    fn is_idle(&self, lane: ShardId) -> bool {
        let sh = &self.shards[lane];
        sh.dead || (sh.active.is_none() && sh.queue.is_empty())
    }

    /// Puts a chunk on a lane's queue.
    fn push(&mut self, lane: ShardId, job: ChunkJob) {
        self.shards[lane].queue.push_back(job);
    }

    /// An exception escaped `transfer_worker` on `lane` at `now`: the lane's worker thread
    /// died with sglang's "Transfer thread failed because of … is dead." — the line the
    /// prefill's operator sees, so it is the message the summary shows. Its queued and future
    /// chunks never move; their rooms wait for the decode waiting timeout. Counted once per
    /// raise, i.e. per rank, and the death recorded for the reports' markers.
    fn death(&self, p: PrefillId, lane: ShardId, e: &PdError, now: Nanos) -> Effect {
        let rank = self.rank_of(lane);
        Effect::WorkerDied {
            death: WorkerDeath {
                at_ns: now,
                // Prefills come first among the global instances: `PrefillId(i)` is instance i.
                prefill_instance: p.0,
                rank,
                shard: lane.0 - self.lane(rank, 0).0,
                kind: e.kind,
            },
            message: transfer_thread_failed(&e.message),
        }
    }

    /// One step of the lane's worker: with an idle active chunk it starts the next target;
    /// with none it takes the next chunk off its queue (skipping rooms that already failed,
    /// as `transfer_worker` does). Returns at the first batch started, failure, or finished
    /// chunk.
    fn step(
        &mut self,
        me: PrefillId,
        lane: ShardId,
        decodes: Decodes<'_>,
        cx: &mut TransferCtx<'_>,
    ) -> Step {
        let rank = self.rank_of(lane);
        loop {
            let sh = &mut self.shards[lane];
            if sh.dead {
                return Step::Done;
            }
            match &sh.active {
                Some(a) if a.busy => return Step::Done,
                Some(_) => {}
                None => {
                    let Some(job) = sh.queue.pop_front() else {
                        return Step::Done;
                    };
                    if cx
                        .reqs
                        .get(job.req)
                        .is_none_or(|r| r.sender == KvPoll::Failed)
                    {
                        continue;
                    }
                    let targets = self.plans[job.decode].rank_targets(rank);
                    sh.active = Some(ActiveChunk {
                        job,
                        target: targets.start,
                        next_target: targets.start,
                        end_target: targets.end,
                        busy: false,
                        flows_left: 0,
                        failed: false,
                    });
                }
            }
            return self.advance(me, lane, rank, decodes, cx);
        }
    }

    /// Starts the active chunk's next non-dummy target (docs/sglang-pd.md §3.1 steps 1–4):
    /// the blacklist check, then the plan's check for that target (raise → the worker dies;
    /// rc −1 → the session is blacklisted on this rank and the room fails), then the batch.
    fn advance(
        &mut self,
        me: PrefillId,
        lane: ShardId,
        rank: u32,
        (endpoints, rings): Decodes<'_>,
        cx: &mut TransferCtx<'_>,
    ) -> Step {
        let Self {
            shards,
            blacklists,
            flows,
            gpus,
            plans,
            probe_ns,
            backend,
            ..
        } = self;
        let backend = *backend;
        let sh = &mut shards[lane];
        let a = sh.active.as_mut().expect("an active chunk");
        let job = a.job;
        let Some(req) = cx.reqs.get(job.req).filter(|r| r.sender != KvPoll::Failed) else {
            // The room failed while an earlier target's batch was out: the chunk is dropped.
            sh.active = None;
            return Step::Done;
        };
        let d = req.decode;
        let dst = &endpoints[d];
        let plan = &plans[d];
        let Some(i) = next_live_target(a, plan, d, rank) else {
            sh.active = None;
            return Step::ChunkDone(job);
        };
        let decode_rank = plan.target(i).decode_rank;
        // The chunk's first batch on this rank: `target` and `next_target` part after it.
        let first_batch = a.target == a.next_target;
        a.next_target = i + 1;
        a.target = i;
        let blacklist = &mut blacklists[rank as usize];
        if let Some(&failed_at) = blacklist.get(&(d, decode_rank))
            && !probed_back(
                blacklist,
                (d, decode_rank, failed_at),
                *probe_ns,
                &*cx.fabric,
                (gpus[rank as usize], dst.gpus[decode_rank as usize]),
                cx.q.now(),
            )
        {
            sh.active = None;
            return Step::Fail {
                req: job.req,
                kind: ErrorKind::SessionBlacklisted,
                message: session_not_alive(&dst.session(decode_rank)),
            };
        }
        // A DCP decode takes `send_kvcache_dcp` (cold, out of line); the values are built in
        // place on both paths (no tuple of a request and an error moved about).
        let dcp = plan.dcp_size() > 1;
        let creq = if dcp {
            chunk_request_dcp(req, &job, dst.page_size)
        } else {
            chunk_request(req, &job, dst.page_size)
        };
        let error = if dcp {
            dcp_target_chunk(plan, (req, &job), &creq, i, flows)
        } else {
            plan.chunk_target_into(&creq, i, flows)
        };
        let writes = oracle_writes(dst, plan, &creq, i, error.as_ref());
        let after_kv = match error {
            Some((e, ErrorTiming::BeforeAnyWrite)) => {
                let at = (d, decode_rank, cx.q.now());
                return refuse(sh, (blacklist, backend), at, job.req, e);
            }
            Some((e, ErrorTiming::AfterKv)) => Some(e),
            None => None,
        };
        // `--disaggregation-enable-kv-checksum` and `SGLANG_DISAGG_STAGING_BUFFER`: what the
        // batch pays before it goes, or whether it waits for the decode's ring
        // ([`extra_lead`]).
        let mut digest_ns = 0;
        if plan.has_extras() {
            let at = (cx.q.now(), &*cx.reqs);
            match extra_lead(rings, (d, i, plan), (req, &job, &creq), first_batch, at) {
                Staged::Go(ns) => digest_ns = ns,
                Staged::Wait => return defer(sh, (me, lane), first_batch, cx),
                Staged::Died(e) => {
                    sh.active = None;
                    // NIXL's worker catches the raise and fails the room only.
                    if !backend.raise_kills_worker() {
                        return Step::Fail {
                            req: job.req,
                            kind: e.kind,
                            message: backend.raised_text(&e.message),
                        };
                    }
                    sh.dead = true;
                    return Step::WorkerDied(e);
                }
            }
        }
        let batch = Batch {
            now: cx.q.now(),
            // A pipeline stage other than the last makes no aux call (`send_aux` only on
            // `pp_group.is_last_rank`).
            lead: send_lead(
                cx.fabric.params(),
                plan.has_state(),
                job.last && (plan.pp_size() == 1 || plan.target_sends_aux(i)),
                backend.aux_after_kv(),
            ) + digest_ns,
            // On the head-sliced path the target's per-layer batches run on the queue's
            // executor threads (NIXL: one transfer from the worker; MORI: its engine's
            // workers): that many flows, each with its share of the bytes and writes.
            split: if plan.send_path() == crate::layout::SendPath::Slice && plan.staging().is_none()
            {
                backend
                    .slice_posting_threads()
                    .unwrap_or(SLICE_EXECUTOR_THREADS)
            } else {
                1
            },
            token: FlowTag::Kv { prefill: me, lane },
        };
        let req = cx.reqs.get_mut(job.req).expect("checked above");
        req.row.transfer_start_ns.get_or_insert(batch.now);
        let n = start_flows(flows, cx.fabric, (gpus, &dst.gpus), &mut req.row, batch);
        arm(sh, (me, lane), n, (after_kv, writes), cx)
    }
}

/// `SGLANG_ENABLE_FAILED_SESSION_PROBE` (`MooncakeKVManager._failed_session_probe_loop`,
/// `_run_one_probe_pass`): every `probe_ns` from the manager's start the prefill rank probes
/// each blacklisted session (`engine.send_probe`) and takes the ones that answer off its list
/// (sglang counts them in `sglang:failed_session_recoveries_total`). Asked when the worker
/// meets the session `(d, rank)`, blacklisted at `failed_at`: it is back if a probe pass ran
/// since (the last one at or before `now` is after `failed_at`), its decode did not go down
/// (`failed_at` is `None` then: a dead process answers no probe; re-registration clears it),
/// and a batch from the prefill rank's GPU to the decode rank's would find a path
/// ([`crate::fabric::Fabric::reachable`]). pdsim judges the path at `now`, not at the pass's
/// own time: a link that came back after the last pass reads as back one pass early. Out of
/// line and cold: a run without the probe, or without a blacklisted session, never calls it.
#[cold]
#[inline(never)]
fn probed_back(
    blacklist: &mut Blacklist,
    (d, rank, failed_at): (DecodeId, u32, Option<Nanos>),
    probe_ns: Option<Nanos>,
    fabric: &Fabric,
    (src, dst): (GpuId, GpuId),
    now: Nanos,
) -> bool {
    let (Some(every), Some(t0)) = (probe_ns, failed_at) else {
        return false;
    };
    let last_pass = now / every * every;
    if last_pass <= t0 || !fabric.reachable(src, dst) {
        return false;
    }
    blacklist.remove(&(d, rank));
    true
}

/// What a staged batch does now ([`admit_staged`]).
enum Staged {
    /// It goes after the prefill's gather, ns.
    Go(Nanos),
    /// Its ring region is not free yet.
    Wait,
    /// The region exceeds the ring: the worker raised.
    Died(PdError),
}

/// The watermark has not passed the region of the lane's current target: the worker waits
/// [`super::staging::STAGING_WATERMARK_WAIT_NS`] (as a pending call, cancelled by a crash)
/// and then tries the same target again ([`TransferWorkers::retry_staged`]). Whether the
/// target was the chunk's first batch on this rank is kept (a later target leaves `target`
/// apart from `next_target`), so the retry pays what a first batch pays only if it is one.
#[cold]
#[inline(never)]
fn defer(
    sh: &mut Shard,
    (me, lane): (PrefillId, ShardId),
    first_batch: bool,
    cx: &mut TransferCtx<'_>,
) -> Step {
    let a = sh.active.as_mut().expect("still active");
    a.busy = true;
    a.flows_left = 0;
    a.next_target = a.target;
    if !first_batch {
        a.target = usize::MAX;
    }
    sh.deferred = true;
    sh.empty_key = Some(cx.q.schedule_keyed_in(
        super::staging::STAGING_WATERMARK_WAIT_NS,
        Event::EmptyChunkSent {
            prefill: me,
            shard: lane,
        },
    ));
    Step::Done
}

/// One writer's staged batch of `job` for target `target` of `plan` landed on decode `d` at
/// `now`: its ring region is freed once the chunk's last writer landed, decode was told
/// (`CHUNK_READY` over the control plane), its scatter ran, and the watermark went back
/// (`WATERMARK`, the control plane again) [INFERRED: both messages at the control latency].
#[cold]
#[inline(never)]
fn staged_landed(
    rings: &mut super::staging::StagingRings,
    (plan, control_latency_ns): (&PairPlan, Nanos),
    (d, target): (DecodeId, usize),
    job: &ChunkJob,
    now: Nanos,
) {
    let Some(s) = plan.staging() else { return };
    let rank = plan.target(target).decode_rank;
    let pages = u64::from(job.end_page - job.first_page);
    let after = s.scatter_ns(pages) + 2 * control_latency_ns;
    rings.landed((d, rank), (job.req, job.first_page), now, after);
}

/// Decode's scatter of a request's last chunk, which it finishes before the request may join
/// a batch (`DecodeStagingHandler.advance_scatter`: the room is done once every allocation
/// was scattered), ns.
#[inline(never)]
fn last_scatter_ns(s: &crate::layout::Staging, job: &ChunkJob) -> Nanos {
    s.scatter_ns(u64::from(job.end_page - job.first_page))
}

/// The decode instances a worker sends to and their staging rings.
type Decodes<'a> = (
    &'a IdVec<DecodeId, DecodeEndpoint>,
    &'a mut super::staging::StagingRings,
);

/// What target `i`'s batch of the chunk `creq` of `job` pays before it goes, beyond the
/// worker's own lead, on a plan with extras: with `--disaggregation-enable-kv-checksum`, the
/// rank digests the whole request's pages and state once, before its last chunk's first batch
/// goes out (the digest rides in the metadata row that chunk sends: PR #39500); with the
/// staging buffer, the region on the decode's ring must be free and the prefill gathers
/// ([`admit_staged`]). Out of line: a plan without extras never calls it.
#[cold]
#[inline(never)]
fn extra_lead(
    rings: &mut super::staging::StagingRings,
    (d, i, plan): (DecodeId, usize, &PairPlan),
    (req, job, creq): (&Req, &ChunkJob, &ChunkRequest<'_>),
    first_batch: bool,
    at: (Nanos, &Requests),
) -> Staged {
    let digest_ns = if job.last && first_batch && plan.kv_checksum().is_some() {
        prefill_digest_ns(plan, req.prompt())
    } else {
        0
    };
    if plan.dcp_pack().is_some() {
        // The pack kernel gathers the target's owned rows before its blocks go (PR #35762).
        return Staged::Go(digest_ns + plan.dcp_gather_ns(i, creq, dcp_span(plan, req, job)));
    }
    match plan.staging() {
        None => Staged::Go(digest_ns),
        Some(s) => match admit_staged(rings, s, (d, i, plan), (req, job, creq), at) {
            Staged::Go(gather_ns) => Staged::Go(digest_ns + gather_ns),
            other => other,
        },
    }
}

/// Asks decode `d`'s ring for target `i`'s region of the chunk `creq` of `job` and prices the
/// gather. A chunk with no KV to send (no pages) stages nothing.
fn admit_staged(
    rings: &mut super::staging::StagingRings,
    s: &crate::layout::Staging,
    (d, i, plan): (DecodeId, usize, &PairPlan),
    (req, job, creq): (&Req, &ChunkJob, &ChunkRequest<'_>),
    (now, reqs): (Nanos, &Requests),
) -> Staged {
    use super::staging::Admit;
    let pages = creq.src_pages.len().min(creq.dst_pages.len()) as u64;
    let bytes = plan.sliced_kv_bytes(i, pages);
    if bytes == 0 {
        return Staged::Go(0);
    }
    let rank = plan.target(i).decode_rank;
    let key = (job.req, pages, req.row.bootstrap_room);
    match rings.admit(
        s,
        (d, rank),
        (key.0, job.first_page, key.1),
        key.2,
        now,
        reqs,
    ) {
        Admit::Go => Staged::Go(s.gather_ns(bytes)),
        Admit::Wait => Staged::Wait,
        Admit::Oversized(e) => Staged::Died(e),
    }
}

/// The plan's check refused the target before any write: the chunk is dropped; a raised
/// error kills the lane's worker (docs/sglang-pd.md §2.4), a return code −1 (or a raise on
/// decode) blacklists the decode session `session` on this rank (`blacklist`) and fails the
/// room (§2.6).
fn refuse(
    sh: &mut Shard,
    (blacklist, backend): (&mut Blacklist, TransferBackend),
    (d, rank, now): (DecodeId, u32, Nanos),
    req: ReqRef,
    e: PdError,
) -> Step {
    sh.active = None;
    match e.effect {
        layout::Effect::WorkerDies if backend.raise_kills_worker() => {
            sh.dead = true;
            Step::WorkerDied(e)
        }
        // NIXL's worker (MORI's submission) catches the raise and fails the room only.
        layout::Effect::WorkerDies => Step::Fail {
            req,
            kind: e.kind,
            message: backend.raised_text(&e.message),
        },
        layout::Effect::ReturnCodeFailure | layout::Effect::RaisedOnDecode => {
            if backend.blacklists_sessions() {
                blacklist.insert((d, rank), Some(now));
            }
            Step::Fail {
                req,
                kind: e.kind,
                message: e.message,
            }
        }
        // sglang PR #37840: the rejected session stays failed and every room to it fails with
        // the registration error itself (not the blacklist's "not alive" text); the worker
        // lives on.
        layout::Effect::SessionRejected => Step::Fail {
            req,
            kind: e.kind,
            message: e.message,
        },
    }
}

/// The target's batch is out (`n` flows): the active chunk waits for them, carrying the
/// check that raises after its KV and the oracle's writes. A batch with nothing to send (0 KV
/// bytes on the slice path, a hybrid-MLA sub-rank) still makes its call, which returns after
/// the network latency.
fn arm(
    sh: &mut Shard,
    (me, lane): (PrefillId, ShardId),
    n: u32,
    (after_kv, writes): (Option<PdError>, Option<Vec<Write>>),
    cx: &mut TransferCtx<'_>,
) -> Step {
    let a = sh.active.as_mut().expect("still active");
    a.busy = true;
    a.flows_left = n;
    a.failed = false;
    sh.after_kv = after_kv;
    sh.writes = writes;
    if n == 0 {
        sh.empty_key = Some(cx.q.schedule_keyed_in(
            cx.fabric.params().base_latency_ns,
            Event::EmptyChunkSent {
                prefill: me,
                shard: lane,
            },
        ));
    }
    Step::Started
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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

    /// A check that raises before any write (a unified Qwen3-Next prefill at attention TP 2
    /// into TP 4, sglang's validator, docs/sglang-pd.md §2.5) kills the worker of each rank
    /// that meets it: each death is an effect with sglang's "Transfer thread failed" line, in
    /// rank order; the room does not fail (it waits for its timeout), and the dead lanes never
    /// move again.
    #[test]
    fn a_raise_kills_each_ranks_worker_and_its_lane_stays_dead() {
        let m = crate::spec::model::preset("qwen3-next-80b-a3b").unwrap();
        let (pa, da) = (
            crate::layout::test_args(2, 16, "auto", true),
            crate::layout::test_args(4, 16, "auto", true),
        );
        let plan = PairPlan::compile((&m, &pa), (&m, &da), layout::Profile::Guarded).unwrap();
        let (mut t, mut env) = (workers_over(plan, 2, 4), Env::new());
        let (r, job) = computed(&mut env.reqs, 0);
        env.q.schedule_at(3, Event::Tick);
        env.q.pop();
        t.enqueue(PrefillId(0), job, &mut env.cx());
        let lanes: Vec<ShardId> = (0..2)
            .map(|rank| t.prefills[PrefillId(0)].chunk_lane(DecodeId(0), (1, 0), rank))
            .collect();
        assert_eq!(env.fx.len(), 2, "{:?}", env.fx);
        for (rank, (e, &lane)) in env.fx.iter().zip(&lanes).enumerate() {
            let Effect::WorkerDied { death, message } = e else {
                panic!("a death: {e:?}");
            };
            assert_eq!((death.at_ns, death.prefill_instance), (3, 0));
            assert_eq!(death.rank, rank as u32);
            assert_eq!(lane, t.prefills[PrefillId(0)].lane(death.rank, death.shard));
            assert!(
                message.starts_with("Transfer thread failed because of ")
                    && message.ends_with("bootstrap_port=8998 is dead."),
                "{message}"
            );
            assert!(t.prefills[PrefillId(0)].shards[lane].dead);
        }
        assert_eq!(env.fabric.live_flows(), 0);
        assert_eq!(env.reqs.get(r).unwrap().sender, KvPoll::Transferring);
        env.fx.clear();
        let (_, job) = computed(&mut env.reqs, 1);
        t.enqueue(PrefillId(0), job, &mut env.cx());
        assert!(env.fx.is_empty());
        assert_eq!(t.prefills[PrefillId(0)].shards[lanes[0]].queue.len(), 1);
    }

    /// A dead worker moves nothing again, whatever is queued behind it (the chunks of healthy
    /// decode instances that hash to the same queue included); other lanes go on.
    /// A decode memory no test watches.
    struct Unwatched;

    impl DecodeMemories for Unwatched {
        fn watched(&mut self, d: DecodeId) -> &mut DecodeMemory {
            unreachable!("no test watches decode {}", d.0)
        }
    }

    /// What a test hands the workers: the queue, the requests, the fabric and its timer, and
    /// what they write (figures, effects).
    struct Env {
        q: EventQueue<Event>,
        reqs: Requests,
        fabric: Fabric,
        timer: FabricTimer,
        memories: Unwatched,
        bandwidth: Histogram,
        retransmitted: f64,
        fx: Vec<Effect>,
    }

    impl Env {
        fn new() -> Self {
            Self {
                q: EventQueue::new(),
                reqs: Requests::default(),
                fabric: fabric(),
                timer: FabricTimer::default(),
                memories: Unwatched,
                bandwidth: Histogram::default(),
                retransmitted: 0.0,
                fx: Vec::new(),
            }
        }

        fn cx(&mut self) -> TransferCtx<'_> {
            TransferCtx {
                q: &mut self.q,
                reqs: &mut self.reqs,
                fabric: &mut self.fabric,
                timer: &mut self.timer,
                memories: &mut self.memories,
                bandwidth: &mut self.bandwidth,
                retransmitted_bytes: &mut self.retransmitted,
                fx: &mut self.fx,
            }
        }
    }

    /// Workers of one prefill of `ranks` ranks on GPUs 0.. with `queue_size` queues a rank,
    /// sending to one Llama-3.1-8B TP1 decode on GPU 4 through an exact plan.
    fn workers(ranks: u32, queue_size: u32) -> TransferWorkers {
        let m = crate::spec::model::preset("llama-3.1-8b").unwrap();
        let args = crate::layout::test_args(1, 16, "auto", false);
        let plan = PairPlan::compile((&m, &args), (&m, &args), layout::Profile::Guarded).unwrap();
        workers_over(plan, ranks, queue_size)
    }

    /// Workers of one prefill of `ranks` ranks on GPUs 0.. with `queue_size` queues a rank,
    /// sending through `plan` to one decode (global instance 1) on GPUs 4..
    fn workers_over(plan: PairPlan, ranks: u32, queue_size: u32) -> TransferWorkers {
        let decode_tp = plan.decode_layouts().len() as u32;
        let mut plans = IdVec::default();
        plans.push(Arc::new(plan));
        let mut endpoints = IdVec::default();
        endpoints.push(DecodeEndpoint {
            instance: InstanceId(1),
            gpus: (4..4 + decode_tp)
                .map(|local| GpuId { node: 0, local })
                .collect(),
            page_size: 16,
            watched: false,
            ports: (0..decode_tp).map(|r| session_port(1, r)).collect(),
        });
        let side = PrefillSide {
            ranks,
            gpus: (0..ranks).map(|local| GpuId { node: 0, local }).collect(),
            plans,
        };
        TransferWorkers::new(vec![side], endpoints, queue_size, 1_000)
    }

    /// A request of one 16-token page on P0 and D0 whose prompt was computed: one chunk, the
    /// last, counted in flight once (as the prefill's `step_done` leaves it).
    fn computed(reqs: &mut Requests, id: u64) -> (ReqRef, ChunkJob) {
        let r = crate::sglang::testkit::request(reqs, id, 16, 4);
        let req = reqs.get_mut(r).unwrap();
        req.on_prefill.pages = vec![id as u32];
        req.on_decode.pages = vec![id as u32];
        req.sender = KvPoll::Transferring;
        req.chunks_in_flight = 1;
        (r, job(r, 0))
    }

    /// A chunk's whole way through a worker: queued, its batch on the fabric (the fabric's
    /// timer set), its flows' ends, then the transfer concludes — the sender is `Success`,
    /// decode is told after the control latency, and the prefill's release is the one effect.
    #[test]
    fn a_chunk_goes_out_lands_and_concludes_its_transfer() {
        let (mut t, mut env) = (workers(1, 4), Env::new());
        let (r, job) = computed(&mut env.reqs, 0);
        t.enqueue(PrefillId(0), job, &mut env.cx());
        assert!(env.fx.is_empty(), "{:?}", env.fx);
        assert_eq!(env.fabric.live_flows(), 1);
        // The fabric's timer fires (the batch's lead, then its bytes) until the flow ends.
        let mut ends = Vec::new();
        let due = loop {
            let (due, ev) = env.q.pop().expect("the fabric's timer");
            assert!(matches!(ev, Event::FabricDue));
            env.timer.fired();
            env.fabric.fire_due(due, &mut ends);
            if !ends.is_empty() {
                break due;
            }
            env.timer.sync(&mut env.q, &mut env.fabric);
        };
        assert_eq!(ends.len(), 1);
        let FlowTag::Kv { prefill, lane } = ends[0].token else {
            panic!("a KV flow");
        };
        t.flow_ended(prefill, lane, &ends[0], &mut env.cx());
        assert_eq!(env.fx, [Effect::Release { prefill, req: r }]);
        let req = env.reqs.get(r).unwrap();
        assert_eq!(
            (req.sender, req.row.transfer_end_ns),
            (KvPoll::Success, Some(due))
        );
        assert_eq!(env.bandwidth.count(), 1);
        assert_eq!(
            env.q
                .pop()
                .map(|(t, e)| (t, matches!(e, Event::TransferSucceeded { req } if req == r))),
            Some((due + 1_000, true))
        );
    }

    /// A chunk to a blacklisted decode session (a crashed decode) fails its room at once
    /// (`session_blacklisted`, sglang's text); the worker stops there and goes on only after
    /// the failure is applied (the effect that kicks it comes after the failure). Once the
    /// decode registers again, its chunks go out.
    #[test]
    fn a_blacklisted_session_fails_the_room_and_the_worker_goes_on_after_it() {
        let (mut t, mut env) = (workers(1, 4), Env::new());
        t.decode_down(DecodeId(0), 1);
        let (r, job) = computed(&mut env.reqs, 0);
        t.enqueue(PrefillId(0), job, &mut env.cx());
        let lane = t.prefills[PrefillId(0)].chunk_lane(DecodeId(0), (1, 0), 0);
        assert_eq!(
            env.fx,
            [
                Effect::Fail {
                    req: r,
                    kind: ErrorKind::SessionBlacklisted,
                    message: session_not_alive(&format!("10.0.0.1:{}", session_port(1, 0))),
                },
                Effect::Kick {
                    prefill: PrefillId(0),
                    lane,
                },
            ]
        );
        assert_eq!(env.fabric.live_flows(), 0);
        t.decode_registered(DecodeId(0));
        env.fx.clear();
        let (_, job) = computed(&mut env.reqs, 1);
        t.enqueue(PrefillId(0), job, &mut env.cx());
        assert!(env.fx.is_empty());
        assert_eq!(env.fabric.live_flows(), 1);
    }

    /// A dead worker moves nothing again, whatever is queued behind it (the chunks of healthy
    /// decode instances that hash to the same queue included); other lanes go on.
    #[test]
    fn a_dead_shard_never_moves_again() {
        let (mut t, mut env) = (workers(2, 4), Env::new());
        let r = ReqRef { slot: 0, id: 0 };
        let p = PrefillId(0);
        let q = &mut t.prefills[p];
        let dead = q.lane(1, 1);
        q.shards[dead].dead = true;
        q.push(dead, job(r, 0));
        q.push(dead, job(r, 3));
        assert!(t.kick(p, dead, &mut env.cx()));
        assert_eq!(
            t.prefills[p].shards[dead].queue.len(),
            2,
            "nothing was taken off"
        );
        // A live lane drops chunks of requests that already ended and stays idle.
        let live = t.prefills[p].lane(0, 1);
        t.prefills[p].push(live, job(r, 0));
        assert!(t.kick(p, live, &mut env.cx()));
        assert!(t.prefills[p].is_idle(live));
        assert!(env.fx.is_empty());
    }

    /// A crash empties every lane, drops a pending empty batch call and revives dead workers,
    /// and nothing moves until the restart.
    #[test]
    fn a_crash_clears_queues_and_workers_until_the_restart() {
        let (mut t, mut env) = (workers(2, 2), Env::new());
        let (p, (_, job)) = (PrefillId(0), computed(&mut env.reqs, 0));
        let q = &mut t.prefills[p];
        q.push(ShardId(0), job);
        q.shards[ShardId(3)].dead = true;
        let k = env.q.schedule_keyed(
            5,
            Event::EmptyChunkSent {
                prefill: p,
                shard: ShardId(1),
            },
        );
        q.shards[ShardId(1)].empty_key = Some(k);
        q.shards[ShardId(1)].active = Some(ActiveChunk {
            job,
            target: 0,
            next_target: 1,
            end_target: 1,
            busy: true,
            flows_left: 0,
            failed: false,
        });
        t.crash(p, &mut env.q);
        assert!(
            t.prefills[p]
                .shards
                .iter()
                .all(|s| s.queue.is_empty() && !s.dead && s.active.is_none())
        );
        assert!(
            env.q.is_empty(),
            "the pending empty-chunk return is cancelled"
        );
        t.enqueue(p, job, &mut env.cx());
        assert_eq!(env.fabric.live_flows(), 0, "its workers are down");
        t.restart(p);
        let lane = t.prefills[p].chunk_lane(DecodeId(0), (1, 0), 0);
        assert!(t.kick(p, lane, &mut env.cx()));
        assert_eq!(env.fabric.live_flows(), 1);
    }

    #[test]
    fn lanes_number_ranks_and_back() {
        let t = workers(4, 4);
        let q = &t.prefills[PrefillId(0)];
        assert_eq!(q.lane(2, 3), ShardId(11));
        assert_eq!(q.rank_of(ShardId(11)), 2);
    }

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
