//! The RDMA fabric: GPUs, NICs, switch tiers and NVLink as capacitated links; transfers as flows
//! that pay a latency, then share link bandwidth max-min fairly; Mooncake's timeout and retry
//! rules; faults. See `README.md` beside this file for the model and its calibration.
//!
//! # Driving it (the contract with the simulator)
//! The fabric never schedules anything itself. Every call that changes it takes `now` (ns,
//! never decreasing from call to call). After **every** such call, at the same `now`, the
//! simulator asks [`Fabric::next_due`] when the fabric next needs attention; it keeps one event
//! for it (replacing it when the time changes) and, when that event fires, calls
//! [`Fabric::fire_due`], which handles every flow due and returns the flows that ended.
//! Why one timer and not one event per flow: in a big component every mutation moves
//! thousands of flows' due times, which as per-flow events would pile up as stale entries in
//! the simulator's queue; here the cost per mutation is O(1) events, whatever the number of
//! flows whose times moved. [`harness::Harness`] is the reference loop.
//!
//! One [`Fabric::start_transfer`] is one Mooncake batch (`batch_transfer_sync_write` of one
//! prefill rank to one decode rank): it pays `base_latency_ns + batch_overhead_ns` (handled
//! here, as a phase of the flow), then moves its bytes; its timeout and retries are its own.
//!
//! # Every flow ends exactly once
//! Completed ([`FlowOutcome::Completed`], Mooncake rc 0), failed ([`FlowOutcome::Failed`], rc
//! −1: timeout, retries exhausted, no route), or aborted by the simulator
//! ([`Fabric::abort_flow`], [`Fabric::abort_flows_touching`], [`Fault::Crash`]). The
//! [`FlowEnd`] is returned exactly once, by `fire_due` or by the abort call, and the id is then
//! free for reuse.
//!
//! # Lazy settling
//! A flow's bytes are brought up to date only when its rate changes, when it ends, or when a
//! report asks ([`Fabric::settle_all`]): cost grows with rate changes, not with time. Rate
//! changes of mutations made at one instant are solved once, at the next `next_due` (or the
//! first call at a later time).
//!
//! # Names
//! Links and NICs have user-facing names (`node0.nic1.tx`, `switch2.up`, `node0.nic1`):
//! [`LinkName`], [`NicName`], checked against a topology by [`NameBounds`] (see `names.rs`).
//!
//! # Files
//! `mod.rs` the driving API and reports; `flow.rs` a flow's phases, settling, routing and end;
//! `faults.rs` faults; `maxmin.rs` the bandwidth solver; `topology.rs` links and routes;
//! `timers.rs` the due-time heap; `calibration.rs` the fitted parameters; `names.rs` names;
//! `harness.rs` a minimal event loop for tests and benchmarks.

pub mod calibration;
mod faults;
mod flow;
pub mod harness;
pub mod maxmin;
mod names;
mod timers;
mod topology;

pub use calibration::{FabricParams, Transport};
pub use faults::{Fault, FaultEffect};
pub use maxmin::FlowId;
pub use names::{Direction, LinkName, NameBounds, NameError, NicName};
pub use topology::{GpuId, Link, NicId, TopologyConfig, TopologyError, TopologyKind};

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use maxmin::{LinkIdx, RateChange, Sharing};
use timers::Timers;
use topology::{Layout, Path};

use crate::engine::Nanos;

/// Why a flow failed (Mooncake returns −1 for all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// Not done `MC_TRANSFER_TIMEOUT + bytes` ns after submission.
    Timeout,
    /// `1 + MC_RETRY_CNT` attempts failed, and a path exists (paths kept dying under it).
    RetriesExhausted,
    /// `1 + MC_RETRY_CNT` attempts failed, and no path between the two GPUs is up.
    NoRoute,
}

/// How a flow ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowOutcome {
    /// Every byte landed (rc 0).
    Completed,
    /// The batch failed (rc −1): the simulator blacklists the session.
    Failed(FailReason),
    /// The simulator aborted it (a crashed instance).
    Aborted,
}

/// The end of a flow, reported once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlowEnd<T = u64> {
    /// Its id (free for reuse from now on).
    pub flow: FlowId,
    /// The simulator's handle: whatever it started the flow with (a `u64` by default; the
    /// simulator's own tag type, which names the flow's owner, in `sim`).
    pub token: T,
    /// How it ended.
    pub outcome: FlowOutcome,
    /// Sending GPU.
    pub src: GpuId,
    /// Receiving GPU.
    pub dst: GpuId,
    /// Bytes requested.
    pub bytes: u64,
    /// Bytes that landed (goodput): `bytes` when completed.
    pub delivered_bytes: f64,
    /// Bytes sent again after packet loss.
    pub retransmitted_bytes: f64,
    /// Failed attempts (path failures, and retries that found no path).
    pub failed_attempts: u32,
    /// When it was started (before its latency), ns.
    pub start_ns: Nanos,
    /// When it ended, ns.
    pub end_ns: Nanos,
}

impl<T> FlowEnd<T> {
    /// Mooncake's return code: 0 completed, −1 otherwise.
    pub fn rc(&self) -> i32 {
        if self.outcome == FlowOutcome::Completed {
            0
        } else {
            -1
        }
    }

    /// Achieved bandwidth `bytes ÷ (end − start)`, bytes/ns, latency included (what a user of
    /// the transfer sees). A flow that took no time: `INFINITY`, or 0 if it had no bytes.
    pub fn achieved_bytes_per_ns(&self) -> f64 {
        match (self.bytes, self.end_ns - self.start_ns) {
            (0, _) => 0.0,
            (_, 0) => f64::INFINITY,
            (b, dt) => b as f64 / dt as f64,
        }
    }
}

/// What a live flow is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowPhase {
    /// Paying its latency.
    Latency,
    /// Moving bytes on a path.
    Moving,
    /// Its path failed; waiting to see the failure and re-post on another path.
    Retrying,
}

/// Work done by the max-min solver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SolverWork {
    /// Mutations: a flow joins or leaves the sharing, a link changes capacity.
    pub mutations: u64,
    /// Component re-solves (several mutations at one instant cost one per component).
    pub recomputations: u64,
    /// Flows re-solved, summed over all re-solves.
    pub recomputed_flows: u64,
}

/// Counters over the whole run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Flows started.
    pub started: u64,
    /// Flows completed.
    pub completed: u64,
    /// Flows failed.
    pub failed: u64,
    /// Flows aborted.
    pub aborted: u64,
    /// Failed attempts over all flows.
    pub failed_attempts: u64,
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    Latency { until: Nanos },
    Moving { share: FlowId },
    Retrying { until: Nanos },
}

/// What a flow carries, which decides its route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A Mooncake batch between GPUs: through both GPUs' transfer-engine links (PCIe /
    /// GPUDirect) and their NICs; NVLink within a node.
    Batch,
    /// A DeepEP all-to-all aggregate: NIC to NIC (NVSHMEM/IBGDA, no Mooncake engine).
    A2a,
    /// A Mooncake Store read or write between host memories: NIC to NIC (no GPU on either
    /// end), never NVLink — a store replica on the reader's own node is a local memcpy that
    /// the simulator keeps off the fabric. `client` is the end that is the sglang process (the
    /// other is the store's DRAM, which no server crash takes down).
    Store { client: GpuId },
}

#[derive(Clone, Debug)]
struct Flow<T> {
    token: T,
    /// What the flow is: it decides its route (see [`Kind`]).
    kind: Kind,
    /// Which of its GPUs' own NICs a batch starts from ([`Fabric::rails_between`]): its
    /// routes are tried from `candidate(src, rail)` and `candidate(dst, rail)` on.
    rail: u32,
    src: GpuId,
    dst: GpuId,
    bytes: u64,
    /// Per-WR rate cap, bytes/ns.
    cap: f64,
    start_ns: Nanos,
    deadline_ns: Nanos,
    phase: Phase,
    /// Current path (meaningful while moving).
    path: Path,
    /// Goodput bytes still to land.
    remaining: f64,
    /// Wire rate (max-min share), bytes/ns.
    rate: f64,
    /// Fraction of wire bytes that are goodput: `Π (1 − loss)` over the path.
    keep: f64,
    settled_ns: Nanos,
    /// When the current phase ends, as last computed for the timers (`Nanos::MAX`: never).
    due_ns: Nanos,
    /// Consecutive failed attempts (Mooncake's per-slice retry count): reset once the current
    /// path has landed a slice.
    failures: u32,
    failed_attempts: u32,
    delivered_on_path: f64,
    retransmitted: f64,
}

#[derive(Clone, Debug)]
struct LinkState {
    /// Healthy capacity, bytes/ns.
    nominal: f64,
    /// Degradation factor in `(0, 1]`.
    fraction: f64,
    /// Nesting count of downs; up iff 0. A down link carries no flow.
    down: u32,
    /// Packet loss rate in `[0, 1)`.
    loss: f64,
    /// Cumulative wire bytes (retransmissions included).
    bytes: f64,
    /// Cumulative retransmitted bytes.
    retransmitted: f64,
    /// The link can never be the bottleneck, so the max-min solver leaves it out of flow paths
    /// (bytes are still counted on it). A switch up- or downlink is fed only by its members'
    /// NICs; when its capacity is at least their total, the NICs always saturate first. Without
    /// this, every cross-switch flow joins one max-min component through the switch links and
    /// each flow start or end re-solves all of them. A degradation clears the flag (the link
    /// may then bind) and puts the link back into its flows' paths.
    slack: bool,
    /// The link is slack only while every flow on it is a Mooncake batch on its preferred route
    /// (its GPUs' engines then bound what it carries); the first other flow routed over it (an
    /// all-to-all, a batch re-posted on another NIC) clears `slack` for good.
    slack_if_fed: bool,
}

/// The fabric: topology, link health, live flows.
pub struct Fabric<T = u64> {
    layout: Layout,
    params: FabricParams,
    sharing: Sharing,
    links: Vec<LinkState>,
    /// Links that are down (`down > 0`): while none is, every flow takes its preferred path.
    links_down: u32,
    flows: Vec<Option<Flow<T>>>,
    /// Free flow ids, lowest first (deterministic reuse).
    free: BinaryHeap<Reverse<u32>>,
    live: usize,
    /// Solver flow id → fabric flow id.
    owner: Vec<u32>,
    changes: Vec<RateChange>,
    /// Flows whose next event changed since the last `next_due` / `fire_due`.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Every live flow's next event (single-timer mode).
    timers: Timers,
    /// Time of solver mutations whose rate changes are not yet applied.
    pending: Option<Nanos>,
    /// Scheduled link-ups `(at, sequence, link)` of NIC flaps, applied lazily: bringing a link
    /// up changes no rate (a down link carries no flow), so applying it at the first call at or
    /// after its time is exact.
    ups: BinaryHeap<Reverse<(Nanos, u64, u32)>>,
    up_seq: u64,
    stats: FabricStats,
    /// Solver mutations so far.
    mutations: u64,
    now: Nanos,
}

impl<T: Copy> Fabric<T> {
    /// A fabric of `topo` with `params`; the error names the field at fault.
    pub fn build(topo: TopologyConfig, params: FabricParams) -> Result<Self, TopologyError> {
        topo.validate()?;
        params.validate().map_err(TopologyError::Param)?;
        let layout = Layout::new(topo);
        let topo = &layout.cfg;
        let nic = params.nic_capacity(topo.nic_bytes_per_ns);
        // An unlimited engine (`INFINITY`) is a link the solver never sees (slack below); the
        // solver takes finite capacities only.
        let engine = params.engine_bytes_per_ns.min(f64::MAX);
        // Links that can never bind are left out of the solver's paths (see `LinkState::slack`).
        // A switch link's capacity is members × line rate / oversubscription; its feeders carry
        // at most members × line rate × NIC efficiency. Strictly less: it never binds.
        let switch_slack = topo.oversubscription * nic < topo.nic_bytes_per_ns;
        // Fed only by Mooncake batches on their preferred routes, a NIC carries at most the
        // engines of the GPUs attached to it, and a switch link at most that per member NIC.
        let fed = f64::from(layout.gpus_per_nic()) * engine;
        let nic_slack_fed = fed <= nic;
        let switch_slack_fed = topo.oversubscription * nic.min(fed) < topo.nic_bytes_per_ns;
        // An engine faster than all of its node's NICs together never binds.
        let engine_slack = engine >= nic * f64::from(topo.nics_per_node);
        let links: Vec<LinkState> = (0..layout.num_links())
            .map(|i| {
                let link = layout.link(LinkIdx(i));
                let (always, fed) = match link {
                    Link::Uplink(_) | Link::Downlink(_) => (switch_slack, switch_slack_fed),
                    Link::NicTx(_) | Link::NicRx(_) => (false, nic_slack_fed),
                    Link::GpuRdmaTx(_) | Link::GpuRdmaRx(_) => (engine_slack, engine_slack),
                    Link::NvlinkTx(_) | Link::NvlinkRx(_) => (false, false),
                };
                LinkState {
                    slack: always || fed,
                    slack_if_fed: fed && !always,
                    nominal: layout.nominal_capacity(link, nic, engine),
                    fraction: 1.0,
                    down: 0,
                    loss: 0.0,
                    bytes: 0.0,
                    retransmitted: 0.0,
                }
            })
            .collect();
        Ok(Self {
            sharing: Sharing::new(links.iter().map(|l| l.nominal).collect()),
            links,
            links_down: 0,
            layout,
            params,
            flows: Vec::new(),
            free: BinaryHeap::new(),
            live: 0,
            owner: Vec::new(),
            changes: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            timers: Timers::default(),
            pending: None,
            ups: BinaryHeap::new(),
            up_seq: 0,
            stats: FabricStats::default(),
            mutations: 0,
            now: 0,
        })
    }

    /// The hardware.
    pub fn topology(&self) -> &TopologyConfig {
        &self.layout.cfg
    }

    /// The model parameters.
    pub fn params(&self) -> &FabricParams {
        &self.params
    }

    /// What one healthy NIC moves each way, bytes/ns ([`FabricParams::nic_capacity`]).
    pub fn nic_capacity_bytes_per_ns(&self) -> f64 {
        self.params.nic_capacity(self.layout.cfg.nic_bytes_per_ns)
    }

    // ------------------------------------------------------------------ flows

    /// Starts one Mooncake batch of `bytes` in `writes` writes from `src` to `dst` at `now`
    /// (ns): it pays its latency, then moves at its max-min share (bytes/ns), capped by its
    /// per-WR cost. `token` is the simulator's handle, returned in the [`FlowEnd`]. Same-node
    /// GPUs use NVLink.
    pub fn start_transfer(
        &mut self,
        now: Nanos,
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        writes: u64,
        token: T,
    ) -> FlowId {
        self.start_transfer_after(now, 0, (src, dst), bytes, writes, token)
    }

    /// [`Fabric::start_transfer`] of a batch whose sender first spends `lead_ns` (its own
    /// bookkeeping before the call, ns) at `now`: the batch's latency and timeout start then.
    pub fn start_transfer_after(
        &mut self,
        now: Nanos,
        lead_ns: Nanos,
        (src, dst): (GpuId, GpuId),
        bytes: u64,
        writes: u64,
        token: T,
    ) -> FlowId {
        // Over NVLink (Mooncake's NVLink transport: a device copy, within a node or across
        // the nodes of an NVLink domain) there are no RDMA work requests and no sender thread
        // posting them: only the links bound it.
        let cap = if self.layout.nvlink_reach(src, dst) {
            f64::INFINITY
        } else {
            self.params.flow_cap(bytes, writes)
        };
        self.post_batch(
            now,
            lead_ns,
            (src, dst, bytes),
            (Kind::Batch, 0),
            cap,
            bytes,
            token,
        )
    }

    /// Posts one Mooncake batch (a KV batch's share on rail `rail`, or a store batch) of
    /// `bytes` from `src` to `dst` after the sender's `lead_ns` at `now`: it pays a batch's
    /// latency, moves at most `cap` bytes/ns, and fails at Mooncake's timeout for
    /// `timeout_bytes` (the whole batch's bytes).
    #[allow(clippy::too_many_arguments)]
    fn post_batch(
        &mut self,
        now: Nanos,
        lead_ns: Nanos,
        (src, dst, bytes): (GpuId, GpuId, u64),
        (kind, rail): (Kind, u32),
        cap: f64,
        timeout_bytes: u64,
        token: T,
    ) -> FlowId {
        self.advance(now);
        self.layout.check_gpu(src);
        self.layout.check_gpu(dst);
        let latency = lead_ns + self.params.base_latency_ns + self.params.batch_overhead_ns;
        let deadline = now
            .saturating_add(lead_ns)
            .saturating_add(self.params.timeout_ns(timeout_bytes));
        let mut flow = self.new_flow(
            (token, src, dst, bytes),
            kind,
            cap,
            now,
            now + latency,
            deadline,
        );
        flow.rail = rail;
        let id = self.insert(flow);
        self.mark_dirty(id);
        FlowId(id)
    }

    /// Over how many NICs a Mooncake batch from `src` to `dst` spreads: on nodes with more
    /// NICs than GPUs each GPU has `rails` NICs of its own (its preferred devices), and
    /// Mooncake's engine picks a preferred device per slice, so a batch's slices go out over
    /// all of them (`RdmaTransport::selectDevice`); 1 within a node and on hosts with a NIC per
    /// GPU or fewer.
    pub fn rails_between(&self, src: GpuId, dst: GpuId) -> u32 {
        if self.layout.nvlink_reach(src, dst) {
            1
        } else {
            self.layout.rails()
        }
    }

    /// One rail's share of a Mooncake batch that spreads over `rails` NICs
    /// ([`Fabric::rails_between`]): `bytes` in `writes` writes leave by the `rail`-th of
    /// `src`'s own NICs for the `rail`-th of `dst`'s, after `lead_ns` at `now`, as
    /// [`Fabric::start_transfer_after`] otherwise. The batch's own limits stay the batch's:
    /// each share is capped at `1 / rails` of what the whole batch (`rails ×` these bytes and
    /// writes) may move, so spreading changes which NICs carry it, not how fast it can go
    /// alone. With `rails = 1` this is `start_transfer_after`.
    #[allow(clippy::too_many_arguments)]
    pub fn start_transfer_rail(
        &mut self,
        now: Nanos,
        lead_ns: Nanos,
        (src, dst): (GpuId, GpuId),
        (rail, rails): (u32, u32),
        bytes: u64,
        writes: u64,
        token: T,
    ) -> FlowId {
        if rails <= 1 {
            return self.start_transfer_after(now, lead_ns, (src, dst), bytes, writes, token);
        }
        debug_assert!(rail < rails && !self.layout.nvlink_reach(src, dst));
        let whole = |x: u64| x.saturating_mul(u64::from(rails));
        let cap = self.params.flow_cap(whole(bytes), whole(writes)) / f64::from(rails);
        self.post_batch(
            now,
            lead_ns,
            (src, dst, bytes),
            (Kind::Batch, rail),
            cap,
            whole(bytes),
            token,
        )
    }

    /// A flow of `bytes` from `src` to `dst` started at `now` (ns), capped at `cap` bytes/ns,
    /// paying its latency until `until` and failing at `deadline` (ns); nothing moved yet.
    fn new_flow(
        &self,
        (token, src, dst, bytes): (T, GpuId, GpuId, u64),
        kind: Kind,
        cap: f64,
        now: Nanos,
        until: Nanos,
        deadline: Nanos,
    ) -> Flow<T> {
        Flow {
            token,
            kind,
            rail: 0,
            src,
            dst,
            bytes,
            cap,
            start_ns: now,
            deadline_ns: deadline,
            phase: Phase::Latency { until },
            // The path is chosen when the latency is paid.
            path: Path::EMPTY,
            remaining: bytes as f64,
            rate: 0.0,
            keep: 1.0,
            settled_ns: now,
            due_ns: Nanos::MAX,
            failures: 0,
            failed_attempts: 0,
            delivered_on_path: 0.0,
            retransmitted: 0.0,
        }
    }

    /// Starts an aggregated all-to-all flow (DeepEP dispatch + combine of one forward) of
    /// `bytes` from `src` to `dst`, another node's GPU, at `now` (ns): no Mooncake batch latency,
    /// no transfer timeout (the kernels' fixed latency is in the step time), moving at once at
    /// its max-min share, at most `cap` bytes/ns (the rate DeepEP's RDMA kernels reach). It
    /// shares NIC (and switch) links with KV transfers like any flow, and ends like any flow,
    /// with `token` in its [`FlowEnd`]. `bytes` must be positive.
    pub fn start_a2a(
        &mut self,
        now: Nanos,
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        cap: f64,
        token: T,
    ) -> FlowId {
        self.advance(now);
        self.layout.check_gpu(src);
        self.layout.check_gpu(dst);
        assert!(bytes > 0, "an all-to-all flow carries bytes");
        let flow = self.new_flow(
            (token, src, dst, bytes),
            Kind::A2a,
            cap,
            now,
            now,
            Nanos::MAX,
        );
        let id = self.insert(flow);
        // Routed now, not at a timer event: the flow has no latency phase to pay.
        let ended = self.route(id as usize, now);
        debug_assert!(
            ended.is_none(),
            "a flow with bytes does not end when routed"
        );
        FlowId(id)
    }

    /// Starts one Mooncake Store batch (a HiCache prefetch read or write-back) of `bytes` in
    /// `writes` objects between the host memories behind `src` and `dst` — GPUs standing for
    /// their NICs (each end uses the NIC its GPU prefers), on different nodes — after the
    /// caller's `lead_ns` of its own work at `now` (ns). It pays a Mooncake batch's latency and
    /// per-WR cap like a KV batch and shares NIC and switch links with every other flow, but
    /// crosses no GPU transfer-engine link: both ends are DRAM. `token` comes back in its
    /// [`FlowEnd`]; it fails at Mooncake's transfer timeout like any batch. `client` (`src`
    /// or `dst`) is the sglang server's end: a crash of its instance aborts the flow
    /// ([`Fabric::abort_flows_touching`]), a crash of a server beside the store's DRAM does not.
    pub fn start_store(
        &mut self,
        now: Nanos,
        lead_ns: Nanos,
        (src, dst, client): (GpuId, GpuId, GpuId),
        (bytes, writes): (u64, u64),
        token: T,
    ) -> FlowId {
        assert_ne!(
            src.node, dst.node,
            "a store replica on the reader's node is a local copy, not a flow"
        );
        debug_assert!(client == src || client == dst, "the client is one end");
        let cap = self.params.flow_cap(bytes, writes);
        self.post_batch(
            now,
            lead_ns,
            (src, dst, bytes),
            (Kind::Store { client }, 0),
            cap,
            bytes,
            token,
        )
    }

    /// Brings rates up to date at `now` (ns) and returns when, in ns, the fabric next needs
    /// [`Fabric::fire_due`] (the earliest event of any flow), if ever. Call it after every call
    /// that changed the fabric (see the module documentation).
    pub fn next_due(&mut self, now: Nanos) -> Option<Nanos> {
        self.advance(now);
        self.flush();
        self.process_dirty(now);
        self.timers.peek().map(|(at, _)| at)
    }

    /// Handles every flow event due at or before `now` (ns), in (time, flow id) order,
    /// appending the flows that ended to `ends`. Then call [`Fabric::next_due`].
    #[inline]
    pub fn fire_due(&mut self, now: Nanos, ends: &mut Vec<FlowEnd<T>>) {
        self.advance(now);
        loop {
            self.flush();
            self.process_dirty(now);
            if self.timers.peek().is_none_or(|(at, _)| at > now) {
                return;
            }
            // Fire every flow due now before re-solving: a flow due now finished at its old
            // rate even if another one ending now changes that rate from now on. Firing a flow
            // touches no other flow's timer (rates and due times move only at the next
            // `process_dirty`), so taking them off the heap one at a time gives the order a
            // batch collected first would.
            while let Some((at, fi)) = self.timers.peek() {
                if at > now {
                    break;
                }
                self.timers.remove(fi);
                if let Some(end) = self.fire_one(now, fi as usize) {
                    ends.push(end);
                }
            }
        }
    }

    /// Aborts a live flow at `now` (ns), e.g. its instance crashed.
    pub fn abort_flow(&mut self, now: Nanos, flow: FlowId) -> FlowEnd<T> {
        self.advance(now);
        assert!(
            matches!(self.flows.get(flow.0 as usize), Some(Some(_))),
            "abort_flow: flow {} is not live",
            flow.0
        );
        self.end(flow.0 as usize, now, FlowOutcome::Aborted)
    }

    /// Aborts at `now` (ns) every live flow from or to one of `gpus` (a crashed instance), in
    /// ascending id order.
    pub fn abort_flows_touching(&mut self, now: Nanos, gpus: &[GpuId]) -> Vec<FlowEnd<T>> {
        self.advance(now);
        let hit: Vec<usize> = self
            .flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                f.as_ref()
                    .filter(|f| match f.kind {
                        Kind::Store { client } => gpus.contains(&client),
                        _ => gpus.contains(&f.src) || gpus.contains(&f.dst),
                    })
                    .map(|_| i)
            })
            .collect();
        hit.into_iter()
            .map(|fi| self.end(fi, now, FlowOutcome::Aborted))
            .collect()
    }

    // ------------------------------------------------------------------ reports

    /// Brings every moving flow's bytes up to `now` (ns): call it before reading byte counters,
    /// which settling otherwise updates only when rates change.
    pub fn settle_all(&mut self, now: Nanos) {
        self.advance(now);
        for fi in 0..self.flows.len() {
            if self.flows[fi].is_some() {
                self.settle(fi, now);
            }
        }
    }

    /// Cumulative bytes sent by `nic` (TX) and received (RX), retransmissions included, as of
    /// the last [`Fabric::settle_all`].
    pub fn nic_bytes(&self, nic: NicId) -> (f64, f64) {
        (
            self.link_bytes(Link::NicTx(nic)),
            self.link_bytes(Link::NicRx(nic)),
        )
    }

    /// Cumulative wire bytes carried by `link` (retransmissions included), as of the last
    /// [`Fabric::settle_all`].
    pub fn link_bytes(&self, link: Link) -> f64 {
        self.links[self.layout.index(link).0 as usize].bytes
    }

    /// Cumulative retransmitted bytes carried by `link`.
    pub fn link_retransmitted_bytes(&self, link: Link) -> f64 {
        self.links[self.layout.index(link).0 as usize].retransmitted
    }

    /// Current capacity of `link`, bytes/ns (0 when down).
    pub fn link_capacity(&self, link: Link) -> f64 {
        let st = &self.links[self.layout.index(link).0 as usize];
        if st.down > 0 {
            0.0
        } else {
            st.nominal * st.fraction
        }
    }

    /// Whether `link` is up.
    pub fn link_is_up(&self, link: Link) -> bool {
        self.links[self.layout.index(link).0 as usize].down == 0
    }

    /// Every link, in a fixed order (NIC links first, `TX` then `RX` per NIC).
    pub fn links(&self) -> impl Iterator<Item = Link> + '_ {
        (0..self.layout.num_links()).map(|i| self.layout.link(LinkIdx(i)))
    }

    /// NICs in the cluster.
    pub fn num_nics(&self) -> u32 {
        self.layout.num_nics()
    }

    /// First-tier switches (rails or leaves).
    pub fn num_switches(&self) -> u32 {
        self.layout.num_switches()
    }

    /// The sizes names are checked against (see [`NameBounds`]).
    pub fn name_bounds(&self) -> NameBounds {
        NameBounds::of(&self.layout.cfg)
    }

    /// The user-facing name of `link` (`node0.nic1.tx`, `switch2.up`, ...).
    ///
    /// # Panics
    /// If `link` is not one of this fabric's (as every other call taking a link).
    pub fn link_name(&self, link: Link) -> LinkName {
        LinkName::of(link, &self.name_bounds()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The NIC GPU `gpu` prefers (GPU `g` → NIC `g × nics_per_node / gpus_per_node`).
    pub fn nic_of(&self, gpu: GpuId) -> NicId {
        self.layout.check_gpu(gpu);
        self.layout.affinity(gpu)
    }

    /// Flows alive.
    pub fn live_flows(&self) -> usize {
        self.live
    }

    /// Live flow ids, ascending.
    pub fn live_flow_ids(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_some())
            .map(|(i, _)| FlowId(i as u32))
    }

    /// The token a live flow was started with.
    pub fn flow_token(&self, flow: FlowId) -> T {
        self.flow(flow).token
    }

    /// Phase of a live flow.
    pub fn flow_phase(&self, flow: FlowId) -> FlowPhase {
        match self.flow(flow).phase {
            Phase::Latency { .. } => FlowPhase::Latency,
            Phase::Moving { .. } => FlowPhase::Moving,
            Phase::Retrying { .. } => FlowPhase::Retrying,
        }
    }

    /// Wire rate of a live flow (its max-min share), bytes/ns, as of the last `next_due` or
    /// `fire_due`.
    pub fn flow_rate(&self, flow: FlowId) -> f64 {
        let f = self.flow(flow);
        if matches!(f.phase, Phase::Moving { .. }) {
            f.rate
        } else {
            0.0
        }
    }

    /// Goodput rate of a live flow, bytes/ns: wire rate × Π (1 − loss).
    pub fn flow_goodput_rate(&self, flow: FlowId) -> f64 {
        self.flow_rate(flow) * self.flow(flow).keep
    }

    /// Links a live flow is moving over (empty unless moving).
    pub fn flow_path(&self, flow: FlowId) -> Vec<Link> {
        let f = self.flow(flow);
        if matches!(f.phase, Phase::Moving { .. }) {
            f.path
                .links()
                .iter()
                .map(|&l| self.layout.link(l))
                .collect()
        } else {
            Vec::new()
        }
    }

    /// Goodput bytes a live flow still has to land, as of its last settling.
    pub fn flow_remaining_bytes(&self, flow: FlowId) -> f64 {
        self.flow(flow).remaining
    }

    /// Goodput bytes a live flow has landed by `now` (ns, not before its last settling), at
    /// its current rate: what a reader polling the transfer would see. Rates are current after
    /// [`Fabric::next_due`], so at any event time this is exact.
    pub fn flow_landed_bytes_at(&self, flow: FlowId, now: Nanos) -> f64 {
        let f = self.flow(flow);
        let moving = if matches!(f.phase, Phase::Moving { .. }) && now > f.settled_ns {
            (f.rate * f.keep * (now - f.settled_ns) as f64).min(f.remaining)
        } else {
            0.0
        };
        f.bytes as f64 - f.remaining + moving
    }

    /// Per-WR rate cap of a live flow, bytes/ns (`INFINITY`: none).
    pub fn flow_cap(&self, flow: FlowId) -> f64 {
        self.flow(flow).cap
    }

    /// Run counters.
    pub fn stats(&self) -> FabricStats {
        self.stats
    }

    /// Solver work so far (for benchmarks).
    pub fn solver_work(&self) -> SolverWork {
        SolverWork {
            mutations: self.mutations,
            recomputations: self.sharing.recomputations(),
            recomputed_flows: self.sharing.recomputed_flows(),
        }
    }
}

#[cfg(test)]
mod tests;
