//! The PD cluster: prefill and decode instances, the router, and sglang's request lifecycle
//! (`domain/sglang-pd.md` §2–§3), driven by the engine's event queue.
//!
//! One [`World`] owns all state; one closed [`Event`] enum is matched exhaustively. Requests
//! live in a slab indexed by [`ReqRef`] and leave it when they reach an outcome, so memory is
//! bounded by requests in flight. A decode step is one event for its whole batch: per-token
//! figures derive from step times, never from a loop over tokens.

pub mod compute;
pub mod memory;
pub mod placement;
pub mod prefix_cache;
pub mod profile;
mod router;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;

use crate::engine::{EventQueue, NS_PER_S, Nanos};
use crate::fabric::{Fabric, FailReason, FlowOutcome, GpuId, NicId, TopologyConfig};
use crate::metrics::{Collector, Outcome, RequestRow, Sink, TimeseriesRow};
use crate::scenario::{FaultAction, Role, Scenario};
use crate::workload::{Generator, NewRequest};
use compute::{StepModel, calibrated_params};
use memory::{Holding, KvPool, PageAllocator, Shared, Store};

use crate::layout::{
    ChunkRequest, Effect, ErrorTiming, PairPlan, PdError, RequestId, Verdict, Write,
};
use profile::StepTimes;
use std::collections::BTreeSet;
use std::sync::Arc;

/// sglang's `KVPoll`: the state of one side of a request's transfer. The order is sglang's
/// (`Failed=0 < Bootstrapping < WaitingForInput < Transferring < Success`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum KvPoll {
    /// The transfer failed (terminal, overrides everything).
    Failed,
    /// Created; peers not yet connected (prefill: decode's page ids not yet received).
    Bootstrapping,
    /// Connected; waiting for data (decode: metadata sent, KV not yet landed).
    WaitingForInput,
    /// Chunks queued or moving.
    Transferring,
    /// Every chunk, the state and the aux landed.
    Success,
}

/// Handle of a request in the slab: the slot and the id, so a stale handle is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReqRef {
    slot: u32,
    id: u64,
}

/// Everything that can happen. Requests are commands; facts are in the past tense.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// The next request of the workload arrives at the router.
    Arrival,
    /// Decode's page ids (the per-request metadata) reached the prefill.
    MetadataArrived(ReqRef),
    /// A prefill forward finished (instance, its epoch when started).
    PrefillStepDone(u32, u32),
    /// The fabric's next flow phase change or end is due (stale unless `0` is the current
    /// fabric timer generation).
    FabricDue(u64),
    /// A chunk with no bytes to move returned from its (empty) batch call.
    EmptyChunkSent(u32, u32, u32),
    /// The scenario's fault number `0` happens.
    Fault(usize),
    /// A crashed instance comes back.
    Restart(u32),
    /// Decode's heartbeat has missed a crashed prefill twice: its rooms are failed.
    HeartbeatLost(u32, u32),
    /// Prefill's `conclude_transfer(Success)` reached the decode.
    TransferSucceeded(ReqRef),
    /// A decode step finished (instance, its epoch when started).
    DecodeStepDone(u32, u32),
    /// Decode's `WaitingForInput` timeout for a request, in its bootstrap round.
    WaitingTimeout(ReqRef, u32),
    /// Prefill's `Bootstrapping` timeout for a request, in its bootstrap round.
    BootstrapTimeout(ReqRef, u32),
    /// One simulated second passed: sample the timeseries.
    Tick,
}

struct Req {
    id: u64,
    input: u32,
    output: u32,
    prefill: u32,
    decode: u32,
    sender: KvPoll,
    receiver: KvPoll,
    /// Prompt tokens already computed.
    prefilled: u32,
    /// Prompt tokens whose KV has been queued for sending.
    sent: u32,
    /// Chunks queued or moving.
    chunks_in_flight: u32,
    /// Whether the last chunk has been queued.
    last_queued: bool,
    /// What the request holds on its prefill and decode instance.
    on_prefill: Holding,
    on_decode: Holding,
    /// Whether the decode allocation happened (so it must be given back).
    decode_allocated: bool,
    /// Prompt block ids for the prefix cache (empty without prefix information).
    hash_ids: Vec<u64>,
    /// Tokens decode generated before a retraction: their KV is rebuilt by the next prefill,
    /// so the prompt the prefill sees is `input + extra`.
    extra: u32,
    /// Decode steps done on its instance when it joined the batch (`NOT_RUNNING` otherwise).
    join_step: u64,
    /// Bootstrap round: 0, then one more after each retraction (stale timeouts are ignored).
    round: u32,
    /// The oracle's verdict on a round before a retraction, if it found foreign bytes.
    corrupted_earlier: Option<(String, String)>,
    row: RequestRow,
}

/// The page phase of a request that joined a decode batch after `join_step` steps with `prompt`
/// tokens of KV: at step `k` it needs a new page iff `k ≡ join_step + 1 − prompt (mod ps)`
/// (its step-`j` input token lands at slot `prompt + j − 1`).
fn phase_key(join_step: u64, prompt: u32, ps: u32) -> usize {
    let ps = u64::from(ps);
    ((join_step + 1) % ps + ps - u64::from(prompt) % ps) as usize % ps as usize
}

/// A link's name in `links.csv` and in `[[faults]]`.
pub fn link_name(link: crate::fabric::Link, nics_per_node: u32) -> String {
    use crate::fabric::Link;
    match link {
        Link::NicTx(n) => format!("node{}.nic{}.tx", n.0 / nics_per_node, n.0 % nics_per_node),
        Link::NicRx(n) => format!("node{}.nic{}.rx", n.0 / nics_per_node, n.0 % nics_per_node),
        Link::NvlinkTx(g) => format!("node{}.gpu{}.nvlink_tx", g.node, g.local),
        Link::NvlinkRx(g) => format!("node{}.gpu{}.nvlink_rx", g.node, g.local),
        Link::Uplink(s) => format!("switch{s}.up"),
        Link::Downlink(s) => format!("switch{s}.down"),
    }
}

/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s), in ns.
const HEARTBEAT_INTERVAL_NS: Nanos = 5 * NS_PER_S;
/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE`.
const HEARTBEAT_MAX_FAILURE: u64 = 2;

/// `join_step` of a request that is not in a decode batch.
const NOT_RUNNING: u64 = u64::MAX;

/// sglang's `SGLANG_NUM_RESERVED_DECODE_TOKENS`: decode admits a request only if this much room
/// stays free for every request it holds, so that decode rarely has to retract.
const RESERVED_DECODE_TOKENS: u32 = 512;

impl Req {
    /// What the prefill computes and sends: the prompt plus tokens generated before a retraction.
    fn prompt(&self) -> u32 {
        self.input + self.extra
    }
}

/// One chunk of KV on a transfer queue.
#[derive(Clone, Copy, Debug)]
struct ChunkJob {
    req: ReqRef,
    /// Positions `[first, end)` in the request's page lists.
    first_page: u32,
    end_page: u32,
    last: bool,
}

struct ActiveChunk {
    job: ChunkJob,
    flows_left: u32,
    /// A batch of this chunk returned −1 (the room already failed).
    failed: bool,
    /// A check that raises after this chunk's KV went (the mamba checks of §2.5).
    after_kv: Option<PdError>,
    /// The concrete writes, for a decode instance watched by the oracle through an inexact plan.
    writes: Option<Vec<Write>>,
}

/// A transfer-queue shard with its worker thread: chunks go one at a time, in order.
#[derive(Default)]
struct Shard {
    queue: VecDeque<ChunkJob>,
    active: Option<ActiveChunk>,
    /// The worker thread died on a raised error: nothing on this shard moves again (§2.4).
    dead: bool,
}

struct Instance {
    pool: usize,
    role: Role,
    /// GPU of each TP rank.
    gpus: Vec<GpuId>,
    /// NIC of each TP rank (its GPU's preferred NIC).
    nics: Vec<NicId>,
    /// False between a crash and its restart.
    alive: bool,
    /// Bumped at every crash: step events of an earlier life are ignored.
    epoch: u32,
    step: StepTimes,
    page_size: u32,
    /// KV pages, state slots and (on oracle-watched decode instances) ownership.
    pages: KvPool,
    /// Requests assigned and not yet done with this instance (least-loaded routing).
    outstanding: u32,
    busy: bool,
    // Prefill side.
    waiting: VecDeque<ReqRef>,
    /// The request whose prompt is being chunked (it goes first in the next batch).
    chunked: Option<ReqRef>,
    batch: Vec<(ReqRef, u32)>,
    shards: Vec<Shard>,
    // Decode side.
    prealloc: VecDeque<ReqRef>,
    ready: VecDeque<ReqRef>,
    running: u32,
    joined: Vec<ReqRef>,
    /// (finishing step, join step, request): who leaves the batch after which step.
    finishing: BinaryHeap<Reverse<(u64, u64, ReqRef)>>,
    /// Running requests by (join step, id): retraction takes the most recent first.
    batch_order: BTreeSet<(u64, u64, ReqRef)>,
    /// Running requests by page phase: `phase[k % page_size]` of them need a new page at step k.
    phase: Vec<u32>,
    /// Requests holding decode pages (prealloc'd, transferring or running).
    holders: u32,
    /// Requests retracted (sent back to the prealloc queue) so far.
    retractions: u64,
    steps_done: u64,
    context_tokens: u64,
    step_started: Nanos,
    /// Session port of each rank (decode instances), which decides the transfer shard.
    ports: Vec<u32>,
    /// Radix prefix cache of a prefill instance.
    cache: Option<prefix_cache::PrefixCache>,
    // Per-second counters.
    tick_arrivals: u64,
    tick_tokens: u64,
    tick_link_bytes: f64,
    /// Start of the running step, or of the current tick if the step began earlier.
    busy_since: Nanos,
    /// Nanoseconds spent computing in the current tick.
    tick_busy_ns: u64,
}

/// Counts of the run for `summary.json`.
#[derive(Clone, Debug, Serialize)]
pub struct RunStats {
    /// Events handled.
    pub events: u64,
    /// Simulated time at the end, ns.
    pub end_ns: Nanos,
    /// Whether the run hit `duration + drain_timeout` with requests in flight.
    pub cut_by_drain_timeout: bool,
}

/// The whole simulated cluster.
pub struct World<'a> {
    sc: &'a Scenario,
    q: EventQueue<Event>,
    fabric: Fabric,
    instances: Vec<Instance>,
    prefill_ids: Vec<u32>,
    decode_ids: Vec<u32>,
    router: router::Router,
    source: Generator,
    arrivals_done: bool,
    /// The next request, drawn when its arrival was scheduled.
    pending_arrival: Option<NewRequest>,
    reqs: Vec<Option<Req>>,
    free_slots: Vec<u32>,
    live: u64,
    /// Aggregates; read by the report after the run.
    pub collector: Collector,
    sink: &'a mut dyn Sink,
    /// Generation of the one pending `FabricDue` event.
    fabric_gen: u64,
    /// When the pending `FabricDue` fires.
    fabric_due: Option<Nanos>,
    ends: Vec<crate::fabric::FlowEnd>,
    last_tick_link: Vec<f64>,
    seconds: u64,
    /// (prefill, decode) instance pairs whose Mooncake session the prefill blacklisted after a
    /// return code −1 (§2.6): later chunks to it fail at once.
    blacklist: BTreeSet<(u32, u32)>,
    /// Every link of the fabric, in the fabric's order, and its bytes and retransmitted bytes at
    /// the last sample.
    links: Vec<crate::fabric::Link>,
    last_link: Vec<(f64, f64)>,
    /// Capacity of each link before any fault, bytes/ns.
    link_healthy: Vec<f64>,
    /// The first I/O error writing a row; the run stops at the end of the event that met it.
    io_error: Option<std::io::Error>,
}

const CONTROL_PORT_BASE: u32 = 17_000;

/// The fabric of `sc` over `nodes` nodes, with the calibrated Mooncake parameters
/// (`fabric/calibration.rs`) and the scenario's network latency.
fn build_fabric(sc: &Scenario, nodes: u32) -> Fabric {
    let topo = TopologyConfig {
        nodes,
        gpus_per_node: sc.gpus_per_node,
        nics_per_node: sc.fabric.nics_per_node,
        nic_bytes_per_ns: sc.fabric.nic_bytes_per_ns,
        kind: sc.fabric.kind,
        nodes_per_leaf: sc.fabric.nodes_per_leaf,
        oversubscription: sc.fabric.oversubscription,
        // GB/s is bytes per ns.
        nvlink_bytes_per_ns: sc.gpu.nvlink_bytes_per_s / 1e9,
    };
    let params = crate::fabric::FabricParams {
        base_latency_ns: sc.fabric.base_latency_ns,
        ..Default::default()
    };
    Fabric::build(topo, params).unwrap_or_else(|e| {
        panic!(
            "a validated scenario builds its fabric: {e} (seed {})",
            sc.seed
        )
    })
}

/// The memory of one instance of pool `pool_idx` with `pages` usable KV pages: the oracle for a
/// decode pool that some prefill pool reaches through an inexact plan, or that is unified;
/// plain allocators otherwise (no write can land wrong there, so no ownership is tracked).
fn kv_pool(sc: &Scenario, pool_idx: usize, pages: u32) -> KvPool {
    let pool = &sc.pools[pool_idx];
    let watched = pool.role == Role::Decode
        && (pool.server.enable_unified_memory
            || sc
                .plans
                .iter()
                .any(|(&(_, d), plan)| d == pool_idx && !plan.is_exact()));
    let store = if watched {
        let cap = crate::layout::Capacity {
            pages,
            slots: pool.state_slots,
            // One metadata row per request that can hold pages at once.
            aux_rows: pages.max(1),
        };
        Store::Oracle {
            mem: crate::layout::DecodeMemory::new(&pool.layout, cap),
            used: 0,
            total: pages,
        }
    } else {
        Store::Plain {
            pages: PageAllocator::new(pages),
            slots: PageAllocator::new(pool.state_slots),
            grown: Vec::new(),
        }
    };
    let shared = pool.server.enable_unified_memory.then(|| Shared {
        budget: placement::kv_budget_bytes(&sc.gpu, pool).max(0.0),
        page_bytes: pool.layout[0].kv_page_bytes() as f64,
        slot_bytes: pool.layout[0].state_slot_bytes() as f64,
        used: 0.0,
    });
    KvPool::new(store, shared)
}

impl<'a> World<'a> {
    /// Builds the cluster of `sc`; rows stream to `sink`.
    pub fn new(sc: &'a Scenario, sink: &'a mut dyn Sink) -> Self {
        let layout = placement::place(sc);
        let mut instances: Vec<Instance> = Vec::new();
        let (mut prefill_ids, mut decode_ids) = (Vec::new(), Vec::new());
        for (pool_idx, pool) in sc.pools.iter().enumerate() {
            for _ in 0..pool.instances {
                let id = instances.len() as u32;
                let tp = pool.server.tp_size;
                let pages = placement::kv_pages(&sc.gpu, pool);
                let step = match &pool.step_times {
                    Some(measured) => StepTimes::Measured(measured.as_ref().clone()),
                    None => StepTimes::Model(StepModel::new(
                        &sc.gpu,
                        &pool.model,
                        tp,
                        pool.kv_dtype_bytes,
                        calibrated_params(&sc.gpu),
                    )),
                };
                let ports = (0..tp).map(|r| CONTROL_PORT_BASE + 97 * id + r).collect();
                match pool.role {
                    Role::Prefill => prefill_ids.push(id),
                    Role::Decode => decode_ids.push(id),
                }
                instances.push(Instance {
                    pool: pool_idx,
                    role: pool.role,
                    gpus: layout.gpus[id as usize].clone(),
                    nics: Vec::new(),
                    alive: true,
                    epoch: 0,
                    step,
                    page_size: pool.server.page_size,
                    pages: kv_pool(sc, pool_idx, pages),
                    outstanding: 0,
                    busy: false,
                    waiting: VecDeque::new(),
                    chunked: None,
                    batch: Vec::new(),
                    shards: (0..sc.sglang.queue_size)
                        .map(|_| Shard::default())
                        .collect(),
                    prealloc: VecDeque::new(),
                    ready: VecDeque::new(),
                    running: 0,
                    joined: Vec::new(),
                    finishing: BinaryHeap::new(),
                    batch_order: BTreeSet::new(),
                    phase: vec![0; pool.server.page_size as usize],
                    holders: 0,
                    retractions: 0,
                    steps_done: 0,
                    context_tokens: 0,
                    step_started: 0,
                    ports,
                    cache: match (pool.role, pool.server.radix_cache) {
                        (Role::Prefill, Some(cap)) => Some(prefix_cache::PrefixCache::new(Some(
                            cap.unwrap_or(u64::from(pages) * u64::from(pool.server.page_size)),
                        ))),
                        _ => None,
                    },
                    tick_arrivals: 0,
                    tick_tokens: 0,
                    tick_link_bytes: 0.0,
                    busy_since: 0,
                    tick_busy_ns: 0,
                });
            }
        }
        let n = instances.len();
        let fabric = build_fabric(sc, layout.nodes);
        for inst in &mut instances {
            inst.nics = inst.gpus.iter().map(|&g| fabric.nic_of(g)).collect();
        }
        let links: Vec<crate::fabric::Link> = fabric.links().collect();
        let link_healthy: Vec<f64> = links.iter().map(|&l| fabric.link_capacity(l)).collect();
        Self {
            sc,
            q: EventQueue::new(),
            fabric,
            instances,
            router: router::Router::new(sc.router, sc.seed, prefill_ids.len(), decode_ids.len()),
            prefill_ids,
            decode_ids,
            source: Generator::new(&sc.workload, sc.seed),
            arrivals_done: false,
            pending_arrival: None,
            reqs: Vec::new(),
            free_slots: Vec::new(),
            live: 0,
            collector: Collector::default(),
            sink,
            fabric_gen: 0,
            fabric_due: None,
            ends: Vec::new(),
            last_tick_link: vec![0.0; n],
            seconds: 0,
            blacklist: BTreeSet::new(),
            last_link: vec![(0.0, 0.0); links.len()],
            link_healthy,
            links,
            io_error: None,
        }
    }

    /// Prefix-cache figures of every prefill instance that has a cache.
    pub fn prefix_caches(&self) -> Vec<crate::report::CacheStats> {
        self.instances
            .iter()
            .enumerate()
            .filter_map(|(i, inst)| {
                let c = inst.cache.as_ref()?;
                Some(crate::report::CacheStats {
                    instance: i as u32,
                    pool: self.sc.pools[inst.pool].name.clone(),
                    lookups: c.lookups(),
                    hit_tokens: c.hit_tokens(),
                    input_tokens: c.input_tokens(),
                    hit_rate: c.hit_rate(),
                })
            })
            .collect()
    }

    /// KV pages of each instance (for the run report).
    pub fn kv_pages(&self) -> Vec<u32> {
        self.instances.iter().map(|i| i.pages.total()).collect()
    }

    /// Runs to the end: arrivals stop at `duration`, then in-flight requests drain until
    /// `duration + drain_timeout`; what remains is `unfinished`.
    pub fn run(&mut self) -> std::io::Result<RunStats> {
        self.run_with_progress(&mut |_, _, _| {})
    }

    /// [`World::run`], calling `progress(simulated ns, events, arrivals)` every 65,536 events (the CLI
    /// draws a progress bar with it; the simulation itself never looks at the clock).
    pub fn run_with_progress(
        &mut self,
        progress: &mut dyn FnMut(Nanos, u64, u64),
    ) -> std::io::Result<RunStats> {
        self.q.schedule_at(0, Event::Tick);
        for (i, f) in self.sc.faults.iter().enumerate() {
            self.q.schedule_at(f.at_ns, Event::Fault(i));
        }
        self.schedule_next_arrival();
        let hard_stop = self.sc.duration_ns.saturating_add(self.sc.drain_timeout_ns);
        let mut cut = false;
        while let Some(t) = self.q.peek_time() {
            if self.arrivals_done && self.live == 0 {
                break;
            }
            if t > hard_stop {
                cut = true;
                break;
            }
            let (_, ev) = self.q.pop().expect("peeked");
            self.handle(ev)?;
            if self.q.events_popped() & 0xFFFF == 0 {
                progress(t, self.q.events_popped(), self.collector.counts.arrived);
            }
        }
        let end = self.q.now();
        // Whatever is still in flight ends as unfinished, in id order.
        let mut left: Vec<u32> = (0..self.reqs.len() as u32)
            .filter(|&s| self.reqs[s as usize].is_some())
            .collect();
        left.sort_by_key(|&s| self.reqs[s as usize].as_ref().map(|r| r.id));
        for slot in left {
            let r = self.reqs[slot as usize].take().expect("listed as live");
            self.live -= 1;
            let mut row = r.row;
            row.outcome = Outcome::Unfinished;
            self.collector.finish(row, None, self.slo(), self.sink)?;
        }
        assert_eq!(
            self.collector.held_back(),
            0,
            "request rows left unwritten (seed {})",
            self.sc.seed
        );
        Ok(RunStats {
            events: self.q.events_popped(),
            end_ns: end,
            cut_by_drain_timeout: cut,
        })
    }

    fn slo(&self) -> (Option<Nanos>, Option<Nanos>) {
        (self.sc.slo.ttft_ns, self.sc.slo.tpot_ns)
    }

    fn handle(&mut self, ev: Event) -> std::io::Result<()> {
        match ev {
            Event::Arrival => self.on_arrival()?,
            Event::MetadataArrived(r) => self.on_metadata(r),
            Event::PrefillStepDone(p, e) => {
                if self.instances[p as usize].epoch == e {
                    self.on_prefill_step_done(p);
                }
            }
            Event::FabricDue(g) => {
                if g == self.fabric_gen {
                    self.on_fabric_due();
                }
            }
            Event::Fault(i) => self.on_fault(i),
            Event::EmptyChunkSent(p, shard, epoch) => {
                let empty = self.instances[p as usize].epoch == epoch
                    && self.instances[p as usize].shards[shard as usize]
                        .active
                        .as_ref()
                        .is_some_and(|a| a.flows_left == 0);
                if empty {
                    self.chunk_done(p, shard);
                }
            }
            Event::Restart(i) => self.on_restart(i),
            Event::HeartbeatLost(p, e) => self.on_heartbeat_lost(p, e),
            Event::TransferSucceeded(r) => self.on_transfer_succeeded(r)?,
            Event::DecodeStepDone(d, e) => {
                if self.instances[d as usize].epoch == e {
                    self.on_decode_step_done(d)?;
                }
            }
            Event::WaitingTimeout(r, round) => self.on_timeout(r, round, KvPoll::WaitingForInput),
            Event::BootstrapTimeout(r, round) => self.on_timeout(r, round, KvPoll::Bootstrapping),
            Event::Tick => self.on_tick()?,
        }
        match self.io_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    // ---------------------------------------------------------------- requests

    fn req(&mut self, r: ReqRef) -> Option<&mut Req> {
        self.reqs
            .get_mut(r.slot as usize)
            .and_then(Option::as_mut)
            .filter(|q| q.id == r.id)
    }

    fn schedule_next_arrival(&mut self) {
        let more = self
            .sc
            .max_requests
            .is_none_or(|m| self.source.produced() < m);
        if !more {
            self.arrivals_done = true;
            return;
        }
        // Peek by generating: the request is kept until its arrival event.
        let Some(next) = self.source.next_request() else {
            self.arrivals_done = true;
            return;
        };
        if next.arrival_ns >= self.sc.duration_ns {
            self.arrivals_done = true;
            return;
        }
        self.q.schedule_at(next.arrival_ns, Event::Arrival);
        self.pending_arrival = Some(next);
    }

    fn on_arrival(&mut self) -> std::io::Result<()> {
        let now = self.q.now();
        let nr = self.pending_arrival.take().expect("an arrival was drawn");
        self.schedule_next_arrival();
        let loads = |ids: &[u32], inst: &[Instance]| -> Vec<Option<u32>> {
            ids.iter()
                .map(|&i| {
                    inst[i as usize]
                        .alive
                        .then_some(inst[i as usize].outstanding)
                })
                .collect()
        };
        let pl = loads(&self.prefill_ids, &self.instances);
        let dl = loads(&self.decode_ids, &self.instances);
        let Some((pi, di)) = self.router.pick(&pl, &dl) else {
            // Every instance of a role is down: the router has nowhere to send it.
            let id = self.collector.counts.arrived;
            self.collector.counts.arrived += 1;
            let mut row =
                RequestRow::arrived(id, nr.arrival_ns, None, nr.input_tokens, nr.output_tokens);
            row.finish_ns = Some(now);
            row.outcome = Outcome::Failed;
            row.error_kind = Some("peer_lost");
            let msg = "No live prefill or decode instance to route the request to";
            if let Err(e) = self.collector.finish(row, Some(msg), self.slo(), self.sink) {
                self.io_error.get_or_insert(e);
            }
            return Ok(());
        };
        let (p, d) = (self.prefill_ids[pi], self.decode_ids[di]);
        let id = self.collector.counts.arrived;
        self.collector.counts.arrived += 1;
        let row = RequestRow::arrived(
            id,
            nr.arrival_ns,
            Some((p, d)),
            nr.input_tokens,
            nr.output_tokens,
        );
        let req = Req {
            id,
            input: nr.input_tokens,
            output: nr.output_tokens,
            prefill: p,
            decode: d,
            sender: KvPoll::Bootstrapping,
            receiver: KvPoll::Bootstrapping,
            prefilled: 0,
            sent: 0,
            chunks_in_flight: 0,
            last_queued: false,
            on_prefill: Holding::default(),
            on_decode: Holding::default(),
            decode_allocated: false,
            hash_ids: nr.hash_ids,
            extra: 0,
            join_step: NOT_RUNNING,
            round: 0,
            corrupted_earlier: None,
            row,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.reqs[s as usize] = Some(req);
                s
            }
            None => {
                self.reqs.push(Some(req));
                (self.reqs.len() - 1) as u32
            }
        };
        self.live += 1;
        let r = ReqRef { slot, id };
        for i in [p, d] {
            let inst = &mut self.instances[i as usize];
            inst.outstanding += 1;
            inst.tick_arrivals += 1;
        }
        // A request whose KV can never fit is rejected up front, as sglang's tokenizer manager
        // rejects prompts longer than the server can hold.
        let (ps_p, ps_d) = (
            self.instances[p as usize].page_size,
            self.instances[d as usize].page_size,
        );
        let need_p = nr.input_tokens.div_ceil(ps_p);
        let need_d = (nr.input_tokens + nr.output_tokens).div_ceil(ps_d);
        if need_p > self.instances[p as usize].pages.total()
            || need_d > self.instances[d as usize].pages.total()
        {
            let msg = format!(
                "Request {id} needs {need_p} prefill and {need_d} decode KV pages; the instances hold {} and {}",
                self.instances[p as usize].pages.total(),
                self.instances[d as usize].pages.total()
            );
            self.fail(r, "request_too_long", &msg);
            return Ok(());
        }
        // Decode's first contact with the prefill (`try_ensure_parallel_info`): the page-size and
        // KV-dtype checks raise on decode. The connection is only cached after a success, so
        // every request between a mismatched pair meets the same error.
        if let Some(e) = self.plan(p, d).first_contact().cloned() {
            self.fail_with(r, &e);
            return Ok(());
        }
        // Prefill: the sender starts Bootstrapping; decode: into the prealloc queue.
        self.q.schedule_at(
            now + self.sc.sglang.bootstrap_timeout_ns,
            Event::BootstrapTimeout(r, 0),
        );
        self.instances[d as usize].prealloc.push_back(r);
        self.try_prealloc(d);
        Ok(())
    }

    /// Decode's prealloc queue: in order, reserve KV pages for the prompt (and a state slot
    /// for hybrids) while room stays for `RESERVED_DECODE_TOKENS` of growth per request held,
    /// then send the page ids to the prefill (which starts the waiting-timeout clock).
    fn try_prealloc(&mut self, d: u32) {
        let now = self.q.now();
        if !self.instances[d as usize].alive {
            return;
        }
        while let Some(&r) = self.instances[d as usize].prealloc.front() {
            let Some(req) = self.req(r) else {
                self.instances[d as usize].prealloc.pop_front();
                continue;
            };
            let (prompt, output, id, round) = (req.prompt(), req.output, req.id, req.round);
            let inst = &self.instances[d as usize];
            let ps = inst.page_size;
            let need = prompt.div_ceil(ps);
            let reserve = RESERVED_DECODE_TOKENS.min(output).div_ceil(ps);
            // A lone request may always start: sglang never blocks on the reservation alone.
            if inst.holders > 0 && inst.pages.available() < need + reserve * (inst.holders + 1) {
                break;
            }
            let hybrid = self.sc.pools[inst.pool].state_slots > 0;
            let Some(holding) = self.instances[d as usize].pages.alloc(id, need, hybrid) else {
                break;
            };
            let inst = &mut self.instances[d as usize];
            inst.prealloc.pop_front();
            inst.holders += 1;
            let req = self.req(r).expect("checked above");
            req.on_decode = holding;
            req.decode_allocated = true;
            req.receiver = KvPoll::WaitingForInput;
            let lat = self.sc.fabric.control_latency_ns;
            self.q.schedule_in(lat, Event::MetadataArrived(r));
            self.q.schedule_at(
                now + self.sc.sglang.waiting_timeout_ns,
                Event::WaitingTimeout(r, round),
            );
        }
    }

    fn on_metadata(&mut self, r: ReqRef) {
        let now = self.q.now();
        let Some(req) = self.req(r) else { return };
        if req.sender != KvPoll::Bootstrapping {
            return;
        }
        req.sender = KvPoll::WaitingForInput;
        req.row.prefill_queued_ns = Some(now);
        let p = req.prefill;
        self.instances[p as usize].waiting.push_back(r);
        self.try_prefill(p);
    }

    // ---------------------------------------------------------------- prefill

    /// Forms the next prefill batch if the instance is idle: the chunked request first, then
    /// waiting requests in order, up to `chunked_prefill_size` tokens; a request that does not
    /// fit whole is chunked and ends the batch.
    fn try_prefill(&mut self, p: u32) {
        let now = self.q.now();
        if self.instances[p as usize].busy || !self.instances[p as usize].alive {
            return;
        }
        // sglang's PrefillAdder: the chunk budget spans the whole batch, within
        // --max-prefill-tokens.
        let server = &self.sc.pools[self.instances[p as usize].pool].server;
        let budget_total = server.chunked_prefill_size.min(server.max_prefill_tokens);
        let mut budget = budget_total;
        let mut batch: Vec<(ReqRef, u32)> = Vec::new();
        let mut shape: Vec<(u32, u32)> = Vec::new();
        while budget > 0 {
            let inst = &mut self.instances[p as usize];
            let (r, from_chunked) = match inst.chunked.take() {
                Some(r) => (r, true),
                None => match inst.waiting.front() {
                    Some(&r) => (r, false),
                    None => break,
                },
            };
            let ps = inst.page_size;
            let Some(req) = self
                .reqs
                .get_mut(r.slot as usize)
                .and_then(Option::as_mut)
                .filter(|q| q.id == r.id && q.sender != KvPoll::Failed)
            else {
                if !from_chunked {
                    self.instances[p as usize].waiting.pop_front();
                }
                continue;
            };
            if !from_chunked {
                // Admission needs the prompt's pages on the prefill.
                let need = req.prompt().div_ceil(ps);
                let hybrid = self.sc.pools[self.instances[p as usize].pool].state_slots > 0;
                let Some(holding) = self.instances[p as usize].pages.alloc(req.id, need, hybrid)
                else {
                    break;
                };
                self.instances[p as usize].waiting.pop_front();
                req.on_prefill = holding;
                req.row.prefill_start_ns = Some(now);
                // Cached prefix blocks are not recomputed (their KV is still sent: the decode
                // has none of it). The last token is always computed, for its logits.
                if let Some(cache) = self.instances[p as usize].cache.as_mut()
                    && !req.hash_ids.is_empty()
                {
                    let hit = cache.lookup_and_insert(&req.hash_ids, req.input, now);
                    req.prefilled = hit.min(req.prompt() - 1);
                }
            }
            let n = (req.prompt() - req.prefilled).min(budget);
            shape.push((n, req.prefilled));
            batch.push((r, n));
            budget -= n;
            if req.prefilled + n < req.prompt() {
                self.instances[p as usize].chunked = Some(r);
                break;
            }
        }
        if batch.is_empty() {
            return;
        }
        let inst = &mut self.instances[p as usize];
        let dt = inst.step.prefill_ns(&shape);
        inst.busy = true;
        inst.busy_since = now;
        inst.batch = batch;
        let epoch = inst.epoch;
        self.q.schedule_in(dt, Event::PrefillStepDone(p, epoch));
    }

    fn on_prefill_step_done(&mut self, p: u32) {
        let now = self.q.now();
        let batch = std::mem::take(&mut self.instances[p as usize].batch);
        let inst = &mut self.instances[p as usize];
        inst.busy = false;
        inst.tick_busy_ns += now - inst.busy_since;
        let ps = self.instances[p as usize].page_size;
        for (r, n) in batch {
            let Some(req) = self.req(r) else { continue };
            if req.sender == KvPoll::Failed {
                continue;
            }
            req.prefilled += n;
            let last = req.prefilled == req.prompt();
            // Non-last chunks send only whole pages; the partial page waits (sglang
            // `send_kv_chunk` rounds `end` down to a page boundary).
            let end = if last {
                req.prompt()
            } else {
                req.prefilled / ps * ps
            };
            if last {
                req.row.prefill_end_ns.get_or_insert(now);
            }
            if end > req.sent || last {
                let job = ChunkJob {
                    req: r,
                    first_page: req.sent / ps,
                    end_page: end.div_ceil(ps),
                    last,
                };
                req.sent = end;
                req.chunks_in_flight += 1;
                req.last_queued |= last;
                req.sender = KvPoll::Transferring.max(req.sender);
                let d = req.decode;
                if last {
                    self.instances[p as usize].tick_tokens += 1;
                }
                let shard = self.shard_of(d);
                self.instances[p as usize].shards[shard as usize]
                    .queue
                    .push_back(job);
                self.kick_shard(p, shard);
            }
        }
        self.try_prefill(p);
    }

    /// `sum(decode session ports) % queue_size`: every request to one decode instance hashes to
    /// the same shard of a prefill.
    fn shard_of(&self, d: u32) -> u32 {
        self.instances[d as usize].ports[0] % self.sc.sglang.queue_size
    }

    // ---------------------------------------------------------------- transfer

    /// The compiled transfer plan between prefill instance `p` and decode instance `d`.
    fn plan(&self, p: u32, d: u32) -> Arc<PairPlan> {
        let key = (
            self.instances[p as usize].pool,
            self.instances[d as usize].pool,
        );
        Arc::clone(&self.sc.plans[&key])
    }

    /// Starts the shard worker's next chunk if it is idle (and alive). Per chunk, as sglang's
    /// `transfer_worker`: skip failed rooms; a blacklisted session fails at once; the plan's
    /// check raises before the first write (the worker dies) or returns −1 (the room fails and
    /// the session is blacklisted); otherwise the chunk's flows go on the fabric.
    fn kick_shard(&mut self, p: u32, shard: u32) {
        if !self.instances[p as usize].alive {
            return;
        }
        loop {
            let sh = &mut self.instances[p as usize].shards[shard as usize];
            if sh.dead || sh.active.is_some() {
                return;
            }
            let Some(job) = sh.queue.pop_front() else {
                return;
            };
            let Some(req) = self
                .reqs
                .get(job.req.slot as usize)
                .and_then(Option::as_ref)
            else {
                continue;
            };
            if req.id != job.req.id || req.sender == KvPoll::Failed {
                continue;
            }
            let d = req.decode;
            if self.blacklist.contains(&(p, d)) {
                let msg = format!(
                    "Decode instance could be dead, remote mooncake session {} is not alive",
                    self.session_of(d)
                );
                self.fail(job.req, "session_blacklisted", &msg);
                continue;
            }
            let plan = self.plan(p, d);
            let (transfer, writes) = {
                let creq = Self::chunk_request(req, &job, &self.instances);
                let t = plan.chunk(&creq);
                let watched = self.instances[d as usize].pages.is_oracle();
                let writes = (watched
                    && !plan.is_exact()
                    && t.error
                        .as_ref()
                        .is_none_or(|e| e.1 != ErrorTiming::BeforeAnyWrite))
                .then(|| {
                    let mut w = Vec::new();
                    plan.writes(&creq, &mut w);
                    w
                });
                (t, writes)
            };
            let mut after_kv = None;
            match transfer.error {
                Some((e, ErrorTiming::BeforeAnyWrite)) => match e.effect {
                    Effect::WorkerDies => {
                        self.worker_dies(p, shard, &e);
                        return;
                    }
                    Effect::ReturnCodeFailure | Effect::RaisedOnDecode => {
                        self.blacklist.insert((p, d));
                        self.fail_with(job.req, &e);
                        continue;
                    }
                },
                Some((e, ErrorTiming::AfterKv)) => after_kv = Some(e),
                None => {}
            }
            let now = self.q.now();
            let flows: Vec<(u32, u32, u64, u64)> = transfer
                .flows
                .iter()
                .map(|f| (f.prefill_rank, f.decode_rank, f.bytes, f.writes))
                .collect();
            let req = self.req(job.req).expect("checked above");
            req.row.transfer_start_ns.get_or_insert(now);
            for &(_, _, bytes, writes) in &flows {
                req.row.kv_bytes += bytes;
                req.row.rdma_writes += writes;
            }
            // One Mooncake batch per (prefill rank, decode rank): it pays the latency, then moves
            // its bytes at its fair share, capped by the cost of posting its work requests.
            let token = (u64::from(p) << 32) | u64::from(shard);
            for &(sr, dr, bytes, writes) in &flows {
                let (src, dst) = (
                    self.instances[p as usize].gpus[sr as usize],
                    self.instances[d as usize].gpus[dr as usize],
                );
                self.fabric
                    .start_transfer(now, src, dst, bytes, writes, token);
            }
            let n = flows.len() as u32;
            let sh = &mut self.instances[p as usize].shards[shard as usize];
            sh.active = Some(ActiveChunk {
                job,
                flows_left: n,
                after_kv,
                writes,
                failed: false,
            });
            self.fabric_sync();
            if n == 0 {
                // Nothing to send (0 KV bytes on the slice path, every target a dummy): the
                // batch call returns after the network latency.
                let epoch = self.instances[p as usize].epoch;
                self.q.schedule_in(
                    self.sc.fabric.base_latency_ns,
                    Event::EmptyChunkSent(p, shard, epoch),
                );
            }
            return;
        }
    }

    /// The chunk as the plan sees it: prefill and decode page ids at the chunk's page positions.
    /// sglang indexes decode's page list with the prefill's positions (and truncates the source
    /// when the decode list is shorter), which is exactly where a page-size mismatch bites.
    fn chunk_request<'r>(req: &'r Req, job: &ChunkJob, inst: &[Instance]) -> ChunkRequest<'r> {
        let (a, b) = (job.first_page as usize, job.end_page as usize);
        let src = &req.on_prefill.pages
            [a.min(req.on_prefill.pages.len())..b.min(req.on_prefill.pages.len())];
        // Decode's KV indices cover the prompt only (the rest of its reservation is for output).
        let prompt_pages = (req.prompt().div_ceil(inst[req.decode as usize].page_size) as usize)
            .min(req.on_decode.pages.len());
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

    /// The Mooncake session id of decode instance `d` (`ip:rpc_port`), for messages.
    fn session_of(&self, d: u32) -> String {
        format!(
            "10.0.{}.{}:{}",
            d / 256,
            d % 256,
            self.instances[d as usize].ports[0]
        )
    }

    /// A RuntimeError escaped `send_kvcache`: the shard's worker thread dies ("Transfer thread
    /// failed because of … is dead."). Its queued and future chunks never move; their rooms
    /// wait for the decode waiting timeout. The error is counted once per raise.
    fn worker_dies(&mut self, p: u32, shard: u32, e: &PdError) {
        self.instances[p as usize].shards[shard as usize].dead = true;
        self.collector.raised(e.kind.as_str(), &e.message);
    }

    /// Keeps exactly one `FabricDue` event pending, at the fabric's next due time.
    fn fabric_sync(&mut self) {
        let now = self.q.now();
        let due = self.fabric.next_due(now);
        if due != self.fabric_due {
            self.fabric_gen += 1;
            self.fabric_due = due;
            if let Some(t) = due {
                self.q
                    .schedule_at(t.max(now), Event::FabricDue(self.fabric_gen));
            }
        }
    }

    fn on_fabric_due(&mut self) {
        let now = self.q.now();
        self.fabric_due = None;
        let mut ends = std::mem::take(&mut self.ends);
        ends.clear();
        self.fabric.fire_due(now, &mut ends);
        for end in &ends {
            self.flow_ended(end);
        }
        self.ends = ends;
        self.fabric_sync();
    }

    /// One Mooncake batch ended: count it against its chunk; a −1 fails the room and
    /// blacklists the decode session (the TP group's MIN poll fails the whole request).
    fn flow_ended(&mut self, end: &crate::fabric::FlowEnd) {
        let (p, shard) = ((end.token >> 32) as u32, end.token as u32);
        let Some(active) = self.instances[p as usize].shards[shard as usize]
            .active
            .as_mut()
        else {
            return;
        };
        active.flows_left -= 1;
        let r = active.job.req;
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
                active.failed = true;
                if let Some(d) = self.req(r).map(|q| q.decode) {
                    self.blacklist.insert((p, d));
                    let (kind, why) = match reason {
                        FailReason::Timeout => ("transfer_timeout", "timed out"),
                        FailReason::RetriesExhausted => ("transfer_failed", "retries exhausted"),
                        FailReason::NoRoute => ("transfer_failed", "no route"),
                    };
                    let msg = format!(
                        "Failed to send kv chunk of {} to {}: Mooncake batch_transfer_sync returned -1 ({why})",
                        r.id,
                        self.session_of(d)
                    );
                    self.fail(r, kind, &msg);
                }
            }
            FlowOutcome::Aborted => {
                active.failed = true;
            }
        }
        self.collector.retransmitted_bytes += end.retransmitted_bytes;
        let left = self.instances[p as usize].shards[shard as usize]
            .active
            .as_ref()
            .map_or(1, |a| a.flows_left);
        if left == 0 {
            self.chunk_done(p, shard);
        }
    }

    /// Every flow of the shard's active chunk landed: the bytes are in decode memory.
    fn chunk_done(&mut self, p: u32, shard: u32) {
        let now = self.q.now();
        let active = self.instances[p as usize].shards[shard as usize]
            .active
            .take()
            .expect("active chunk");
        let r = active.job.req;
        let alive = !active.failed && self.req(r).is_some_and(|q| q.sender != KvPoll::Failed);
        if alive {
            let (d, id) = {
                let q = self.req(r).expect("alive");
                (q.decode, q.id)
            };
            // Land the bytes in the oracle's view of decode memory.
            let plan = self.plan(p, d);
            let mut oob = None;
            let job = active.job;
            if let Some(writes) = &active.writes {
                let mem = self.instances[d as usize].pages.oracle().expect("watched");
                oob = mem.apply(&plan, RequestId(id), writes).error;
            } else if self.instances[d as usize].pages.is_oracle() {
                let (pages, slot, aux) = {
                    let q = self.reqs[r.slot as usize].as_ref().expect("alive");
                    let c = Self::chunk_request(q, &job, &self.instances);
                    let whole = job.last && active.after_kv.is_none();
                    (
                        c.dst_pages.to_vec(),
                        c.dst_slot.filter(|_| whole),
                        whole.then_some(c.dst_aux),
                    )
                };
                let mem = self.instances[d as usize].pages.oracle().expect("watched");
                mem.apply_exact(RequestId(id), &pages, slot, aux);
            }
            if let Some(e) = oob {
                // rc −1: the room fails and the session is blacklisted (§3.8, §2.6).
                self.blacklist.insert((p, d));
                self.fail_with(r, &e);
            } else if let Some(e) = &active.after_kv {
                // The KV went; then the state check raised and the worker died.
                self.worker_dies(p, shard, e);
                return;
            } else {
                let req = self.req(r).expect("alive");
                req.chunks_in_flight -= 1;
                if active.job.last && req.chunks_in_flight == 0 {
                    // conclude_transfer(Success): prefill frees its pages, decode is told.
                    req.sender = KvPoll::Success;
                    req.row.transfer_end_ns = Some(now);
                    let (held, id) = (std::mem::take(&mut req.on_prefill), req.id);
                    let inst = &mut self.instances[p as usize];
                    inst.pages.free(id, &held);
                    inst.outstanding -= 1;
                    self.q.schedule_in(
                        self.sc.fabric.control_latency_ns,
                        Event::TransferSucceeded(r),
                    );
                    self.try_prefill(p);
                }
            }
        }
        self.kick_shard(p, shard);
    }

    // ---------------------------------------------------------------- decode

    fn on_transfer_succeeded(&mut self, r: ReqRef) -> std::io::Result<()> {
        let now = self.q.now();
        let Some(req) = self.req(r) else {
            return Ok(());
        };
        if req.receiver != KvPoll::WaitingForInput {
            return Ok(());
        }
        req.receiver = KvPoll::Success;
        // The prefill's first token arrives with the aux data (after a retraction the request
        // already has one: TTFT is not reset).
        req.row.first_token_ns.get_or_insert(now);
        let (d, id, output) = (req.decode, req.id, req.output - req.extra);
        // From now on decode reads these bytes: the oracle checks they are the request's own.
        if let Some(mem) = self.instances[d as usize].pages.oracle() {
            mem.landed(RequestId(id));
        }
        if output == 1 {
            self.req(r)
                .expect("alive")
                .row
                .decode_start_ns
                .get_or_insert(now);
            self.complete(r);
            return Ok(());
        }
        self.instances[d as usize].ready.push_back(r);
        if !self.instances[d as usize].busy {
            self.start_decode_step(d);
        }
        Ok(())
    }

    /// Starts a decode step: transferred requests join the batch (up to `max_running_requests`),
    /// the step takes a page for every request whose next KV slot opens one — retracting the most
    /// recently joined requests while the pool is short, as sglang's `retract_decode` does — and
    /// one forward produces a token for every running request.
    fn start_decode_step(&mut self, d: u32) {
        let now = self.q.now();
        if !self.instances[d as usize].alive {
            return;
        }
        let cap = self.sc.pools[self.instances[d as usize].pool]
            .server
            .max_running_requests
            .unwrap_or(u32::MAX);
        while self.instances[d as usize].running < cap {
            let Some(r) = self.instances[d as usize].ready.pop_front() else {
                break;
            };
            let steps_done = self.instances[d as usize].steps_done;
            let Some(req) = self.req(r) else { continue };
            req.row.decode_start_ns.get_or_insert(now);
            req.join_step = steps_done;
            let (prompt, remaining, id) = (req.prompt(), req.output - 1 - req.extra, req.id);
            let inst = &mut self.instances[d as usize];
            let key = phase_key(steps_done, prompt, inst.page_size);
            inst.phase[key] += 1;
            inst.batch_order.insert((steps_done, id, r));
            inst.running += 1;
            inst.context_tokens += u64::from(prompt) + 1;
            inst.finishing
                .push(Reverse((steps_done + u64::from(remaining), steps_done, r)));
            inst.joined.push(r);
        }
        loop {
            let inst = &mut self.instances[d as usize];
            if inst.running == 0 {
                inst.busy = false;
                return;
            }
            let step = inst.steps_done + 1;
            let need = inst.phase[(step % u64::from(inst.page_size)) as usize];
            if inst.pages.grow(need) {
                break;
            }
            let &(_, _, victim) = inst.batch_order.last().expect("running > 0");
            self.retract(d, victim);
        }
        let inst = &mut self.instances[d as usize];
        let dt = inst.step.decode_ns(inst.running, inst.context_tokens);
        inst.busy = true;
        inst.step_started = now;
        inst.busy_since = now;
        let epoch = inst.epoch;
        self.q.schedule_in(dt, Event::DecodeStepDone(d, epoch));
    }

    /// Takes a running request out of decode instance `d`'s batch (it finished or is
    /// retracted), giving back the pages it grew; returns how many tokens it generated here.
    fn leave_batch(&mut self, d: u32, r: ReqRef) -> u32 {
        let inst = &mut self.instances[d as usize];
        let req = self.reqs[r.slot as usize]
            .as_mut()
            .expect("a running request is live");
        let generated = (inst.steps_done - req.join_step) as u32;
        let prompt = req.prompt();
        let ps = inst.page_size;
        inst.pages
            .shrink((prompt + generated).div_ceil(ps) - prompt.div_ceil(ps));
        inst.phase[phase_key(req.join_step, prompt, ps)] -= 1;
        inst.batch_order.remove(&(req.join_step, req.id, r));
        inst.running -= 1;
        inst.context_tokens -= u64::from(prompt) + 1 + u64::from(generated);
        inst.joined.retain(|&j| j != r);
        req.join_step = NOT_RUNNING;
        generated
    }

    /// sglang's decode retraction: the request leaves the batch and its KV, goes back to the
    /// front of the prealloc queue, and pays the bootstrap, the prefill of everything it has so
    /// far, and the transfer again before it resumes.
    fn retract(&mut self, d: u32, r: ReqRef) {
        let now = self.q.now();
        let generated = self.leave_batch(d, r);
        let req = self.reqs[r.slot as usize].as_mut().expect("live");
        req.extra += generated;
        req.round += 1;
        req.row.retractions += 1;
        req.sender = KvPoll::Bootstrapping;
        req.receiver = KvPoll::Bootstrapping;
        req.prefilled = 0;
        req.sent = 0;
        req.chunks_in_flight = 0;
        req.last_queued = false;
        req.decode_allocated = false;
        let held = std::mem::take(&mut req.on_decode);
        let (id, p, round) = (req.id, req.prefill, req.round);
        let inst = &mut self.instances[d as usize];
        inst.holders -= 1;
        inst.retractions += 1;
        if let Some(report) = inst.pages.free(id, &held)
            && matches!(report.verdict, Verdict::Corrupted { .. })
        {
            let ids = |v: &[RequestId]| {
                v.iter()
                    .map(|x| x.0.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            self.reqs[r.slot as usize]
                .as_mut()
                .expect("live")
                .corrupted_earlier = Some((ids(&report.victims), ids(&report.corrupted_by)));
        }
        inst.prealloc.push_front(r);
        self.instances[p as usize].outstanding += 1;
        self.q.schedule_at(
            now + self.sc.sglang.bootstrap_timeout_ns,
            Event::BootstrapTimeout(r, round),
        );
    }

    fn on_decode_step_done(&mut self, d: u32) -> std::io::Result<()> {
        let now = self.q.now();
        let joined = {
            let inst = &mut self.instances[d as usize];
            inst.steps_done += 1;
            inst.tick_busy_ns += now - inst.busy_since;
            inst.context_tokens += u64::from(inst.running);
            inst.tick_tokens += u64::from(inst.running);
            let dt = now - inst.step_started;
            let joined = std::mem::take(&mut inst.joined);
            self.collector
                .itl
                .record_n(dt, u64::from(inst.running) - joined.len() as u64);
            joined
        };
        // A request's first decoded token follows the prefill's token by the wait to join plus
        // this step.
        for r in joined {
            if let Some(ft) = self.req(r).and_then(|q| q.row.first_token_ns) {
                self.collector.itl.record(now - ft);
            }
        }
        loop {
            let inst = &mut self.instances[d as usize];
            match inst.finishing.peek() {
                Some(Reverse((step, _, _))) if *step <= inst.steps_done => {}
                _ => break,
            }
            let Reverse((_, join, r)) = inst.finishing.pop().expect("peeked");
            // A retracted request left a stale entry behind (its join step changed).
            if self.req(r).is_none_or(|q| q.join_step != join) {
                continue;
            }
            self.leave_batch(d, r);
            self.complete(r);
        }
        self.instances[d as usize].busy = false;
        self.try_prealloc(d);
        self.start_decode_step(d);
        Ok(())
    }

    // ---------------------------------------------------------------- faults

    fn on_fault(&mut self, i: usize) {
        let now = self.q.now();
        match self.sc.faults[i].action.clone() {
            FaultAction::Fabric(f) => {
                let effect = self.fabric.apply_fault(now, &f);
                for end in &effect.ended {
                    self.flow_ended(end);
                }
                self.fabric_sync();
            }
            FaultAction::Crash {
                instance,
                restart_ns,
            } => {
                self.crash(instance);
                if let Some(r) = restart_ns {
                    self.q.schedule_in(r, Event::Restart(instance));
                }
            }
        }
    }

    /// An instance crashes: its flows are aborted and its state is lost. A decode's requests
    /// fail at once (the prefill's next transfer to it returns −1 and blacklists it; its batch
    /// is gone). A prefill's rooms are failed by the decodes' heartbeat (`HEARTBEAT_INTERVAL`
    /// × `HEARTBEAT_MAX_FAILURE` misses) as `peer_lost`.
    fn crash(&mut self, i: u32) {
        let now = self.q.now();
        if !self.instances[i as usize].alive {
            return;
        }
        // Dead first, so that nothing the aborts set off starts new work on it.
        let inst = &mut self.instances[i as usize];
        inst.alive = false;
        inst.epoch += 1;
        let gpus = inst.gpus.clone();
        let ended = self.fabric.abort_flows_touching(now, &gpus);
        for end in &ended {
            self.flow_ended(end);
        }
        self.fabric_sync();
        let role = self.instances[i as usize].role;
        if role == Role::Decode {
            for &p in &self.prefill_ids.clone() {
                self.blacklist.insert((p, i));
            }
            let session = self.session_of(i);
            let victims = self.live_requests(|q| q.decode == i);
            for r in victims {
                let msg = format!("Lost connection with decode instance {session}: it crashed");
                self.fail(r, "peer_lost", &msg);
            }
        }
        let inst = &mut self.instances[i as usize];
        inst.busy = false;
        inst.batch.clear();
        inst.chunked = None;
        inst.waiting.clear();
        for sh in &mut inst.shards {
            sh.queue.clear();
            sh.active = None;
            sh.dead = false;
        }
        inst.prealloc.clear();
        inst.ready.clear();
        if role == Role::Prefill {
            // Heartbeats go out every HEARTBEAT_INTERVAL_NS from time 0; the second one to miss
            // marks the prefill dead.
            let next = now.div_ceil(HEARTBEAT_INTERVAL_NS).max(1) * HEARTBEAT_INTERVAL_NS;
            let detect = next + (HEARTBEAT_MAX_FAILURE - 1) * HEARTBEAT_INTERVAL_NS;
            let epoch = inst.epoch;
            self.q.schedule_at(detect, Event::HeartbeatLost(i, epoch));
        }
    }

    /// Live requests matching `pred`, in id order.
    fn live_requests(&self, pred: impl Fn(&Req) -> bool) -> Vec<ReqRef> {
        let mut v: Vec<(u64, ReqRef)> = self
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(slot, q)| {
                let q = q.as_ref()?;
                pred(q).then_some((
                    q.id,
                    ReqRef {
                        slot: slot as u32,
                        id: q.id,
                    },
                ))
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, r)| r).collect()
    }

    fn on_heartbeat_lost(&mut self, p: u32, epoch: u32) {
        if self.instances[p as usize].epoch != epoch || self.instances[p as usize].alive {
            return;
        }
        let addr = self.bootstrap_addr(p);
        // `_handle_node_failure`: every room of that prefill not yet Success fails.
        let victims = self.live_requests(|q| q.prefill == p && q.receiver != KvPoll::Success);
        for r in victims {
            self.fail(
                r,
                "peer_lost",
                &format!("Lost connection with prefill instance {addr}"),
            );
        }
    }

    fn on_restart(&mut self, i: u32) {
        let inst = &mut self.instances[i as usize];
        if inst.alive {
            return;
        }
        inst.alive = true;
        // A restarted decode registers again, which clears its blacklist entries.
        self.blacklist.retain(|&(_, d)| d != i);
        if self.instances[i as usize].role == Role::Decode {
            self.try_prealloc(i);
        }
    }

    /// The bootstrap address of prefill instance `p`, for messages.
    fn bootstrap_addr(&self, p: u32) -> String {
        format!("10.0.{}.{}:8998", p / 256, p % 256)
    }

    // ---------------------------------------------------------------- endings

    /// sglang's timeouts: decode's in `WaitingForInput`, prefill's in `Bootstrapping`; a
    /// request that moved on (or into a later bootstrap round) is left alone.
    fn on_timeout(&mut self, r: ReqRef, round: u32, stage: KvPoll) {
        let (timeout, kind) = match stage {
            KvPoll::WaitingForInput => (self.sc.sglang.waiting_timeout_ns, "waiting_timeout"),
            _ => (self.sc.sglang.bootstrap_timeout_ns, "bootstrap_timeout"),
        };
        let Some(req) = self.req(r) else { return };
        let state = if stage == KvPoll::WaitingForInput {
            req.receiver
        } else {
            req.sender
        };
        if state != stage || req.round != round {
            return;
        }
        let msg = format!(
            "Request {} timed out after {:.1}s in KVPoll.{stage:?}",
            req.id,
            timeout as f64 / NS_PER_S as f64
        );
        self.fail(r, kind, &msg);
    }

    /// Ends a request that decoded to its last token. The oracle (when it watches the decode)
    /// decides whether it decoded from its own bytes.
    fn complete(&mut self, r: ReqRef) {
        self.end(r, Outcome::Completed, None, "");
    }

    /// Ends a request with an error: both sides mark the room Failed and free what they hold
    /// (the ABORT to the prefill is taken as immediate for resources).
    fn fail(&mut self, r: ReqRef, kind: &'static str, message: &str) {
        self.end(r, Outcome::Failed, Some(kind), message);
    }

    /// [`World::fail`] with one of sglang's typed errors.
    fn fail_with(&mut self, r: ReqRef, e: &PdError) {
        self.fail(r, e.kind.as_str(), &e.message);
    }

    fn end(&mut self, r: ReqRef, outcome: Outcome, kind: Option<&'static str>, message: &str) {
        let now = self.q.now();
        let mut req = self.reqs[r.slot as usize]
            .take()
            .filter(|q| q.id == r.id)
            .unwrap_or_else(|| {
                panic!(
                    "request {} ended twice at {now} ns (seed {})",
                    r.id, self.sc.seed
                )
            });
        self.free_slots.push(r.slot);
        self.live -= 1;
        let (p, d) = (req.prefill as usize, req.decode as usize);
        if req.sender < KvPoll::Success {
            self.instances[p].pages.free(req.id, &req.on_prefill);
            self.instances[p].outstanding -= 1;
        }
        if req.join_step != NOT_RUNNING {
            // Put back so that leave_batch can read it, then take it again.
            self.reqs[r.slot as usize] = Some(req);
            self.leave_batch(d as u32, r);
            req = self.reqs[r.slot as usize].take().expect("just put back");
        }
        if req.decode_allocated {
            self.instances[d].holders -= 1;
        }
        let mut outcome = outcome;
        if let Some((v, by)) = req.corrupted_earlier.take() {
            req.row.victims = v;
            req.row.corrupted_by = by;
            if outcome == Outcome::Completed {
                outcome = Outcome::Corrupted;
            }
        }
        if req.decode_allocated
            && let Some(report) = self.instances[d].pages.free(req.id, &req.on_decode)
        {
            let ids = |v: &[RequestId]| {
                v.iter()
                    .map(|x| x.0.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            req.row.victims = ids(&report.victims);
            req.row.corrupted_by = ids(&report.corrupted_by);
            if outcome == Outcome::Completed && matches!(report.verdict, Verdict::Corrupted { .. })
            {
                outcome = Outcome::Corrupted;
            }
        }
        self.instances[d].outstanding -= 1;
        req.row.finish_ns = Some(now);
        req.row.outcome = outcome;
        req.row.error_kind = kind;
        let slo = self.slo();
        if let Err(e) = self
            .collector
            .finish(req.row, kind.map(|_| message), slo, self.sink)
        {
            self.io_error.get_or_insert(e);
        }
        if outcome == Outcome::Failed {
            // Freed pages may admit waiting work on either side.
            self.try_prealloc(d as u32);
            self.try_prefill(p as u32);
        }
    }

    // ---------------------------------------------------------------- timeseries

    /// One `links.csv` row per link that carried bytes this second or is not healthy.
    fn link_rows(&mut self) -> std::io::Result<()> {
        for k in 0..self.links.len() {
            let link = self.links[k];
            let (bytes, retx) = (
                self.fabric.link_bytes(link),
                self.fabric.link_retransmitted_bytes(link),
            );
            let (b0, r0) = self.last_link[k];
            self.last_link[k] = (bytes, retx);
            let cap = self.fabric.link_capacity(link);
            let up = self.fabric.link_is_up(link);
            let healthy = self.link_healthy[k];
            if bytes - b0 <= 0.0 && up && cap >= healthy {
                continue;
            }
            self.sink.link(&crate::metrics::LinkRow {
                second: self.seconds,
                link: link_name(link, self.sc.fabric.nics_per_node),
                capacity_gbps: if up { cap * 8.0 } else { 0.0 },
                utilisation: ((bytes - b0) / (healthy * NS_PER_S as f64)).clamp(0.0, 1.0),
                bytes: (bytes - b0).round() as u64,
                retransmitted_bytes: (retx - r0).round() as u64,
                up,
            })?;
        }
        Ok(())
    }

    fn on_tick(&mut self) -> std::io::Result<()> {
        let now = self.q.now();
        if now > 0 {
            self.fabric.settle_all(now);
            for (i, inst) in self.instances.iter_mut().enumerate() {
                let bytes: f64 = inst
                    .nics
                    .iter()
                    .map(|&n| {
                        let (tx, rx) = self.fabric.nic_bytes(n);
                        if inst.role == Role::Prefill { tx } else { rx }
                    })
                    .sum();
                let moved = bytes - self.last_tick_link[i];
                self.last_tick_link[i] = bytes;
                inst.tick_link_bytes = moved;
                let capacity =
                    self.sc.fabric.nic_bytes_per_ns * NS_PER_S as f64 * inst.nics.len() as f64;
                let (running, queued) = match inst.role {
                    Role::Prefill => (inst.batch.len() as u32, inst.waiting.len() as u32),
                    Role::Decode => (
                        inst.running,
                        (inst.prealloc.len() + inst.ready.len()) as u32,
                    ),
                };
                if inst.busy {
                    inst.tick_busy_ns += now - inst.busy_since;
                    inst.busy_since = now;
                }
                let row = TimeseriesRow {
                    second: self.seconds,
                    instance: i as u32,
                    pool: self.sc.pools[inst.pool].name.clone(),
                    role: inst.role.as_str(),
                    arrivals: inst.tick_arrivals,
                    running,
                    queued,
                    kv_pages_used: u64::from(inst.pages.used()),
                    kv_pages_total: u64::from(inst.pages.total()),
                    tokens_out: inst.tick_tokens,
                    busy_fraction: inst.tick_busy_ns as f64 / NS_PER_S as f64,
                    link_utilisation: (moved / capacity).clamp(0.0, 1.0),
                };
                inst.tick_arrivals = 0;
                inst.tick_busy_ns = 0;
                inst.tick_tokens = 0;
                self.sink.timeseries(&row)?;
            }
        }
        if now > 0 {
            self.link_rows()?;
        }
        self.seconds += 1;
        if !(self.arrivals_done && self.live == 0) {
            self.q.schedule_in(NS_PER_S, Event::Tick);
        }
        Ok(())
    }
}
