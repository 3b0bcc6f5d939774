//! The RDMA fabric: GPUs, NICs, switch tiers and NVLink as capacitated links; transfers as flows
//! that pay a latency, then share link bandwidth max-min fairly; Mooncake's timeout and retry
//! rules; faults. See `README.md` beside this file for the model and its calibration.
//!
//! # Driving it (the contract with the simulator)
//! The fabric never schedules anything itself. Every call that changes it takes `now` (ns,
//! never decreasing from call to call). After **every** such call, at the same `now`, the
//! simulator asks what to schedule, in one of two modes (pick one per run):
//! - **single timer** (recommended): [`Fabric::next_due`] returns when the fabric next needs
//!   attention; the simulator keeps one event for it (replacing it when the time changes) and,
//!   when it fires, calls [`Fabric::fire_due`], which handles every flow due and returns the
//!   flows that ended. Cost per mutation: O(1) events, whatever the number of flows whose
//!   times moved.
//! - **per flow**: [`Fabric::completions`] returns one [`Completion`] per flow whose next event
//!   changed; the simulator schedules each and, when one fires, calls [`Fabric::fire`], which
//!   ignores stale ones (generation no longer the flow's) and returns the [`FlowEnd`] if the
//!   flow ended (`None` for a phase change: latency paid, retry posted). Simple, but a mutation
//!   in a big component leaves thousands of stale events in the queue.
//!
//! One [`Fabric::start_transfer`] is one Mooncake batch (`batch_transfer_sync_write` of one
//! prefill rank to one decode rank): it pays `base_latency_ns + batch_overhead_ns` (handled
//! here, as a phase of the flow), then moves its bytes; its timeout and retries are its own.
//!
//! # Every flow ends exactly once
//! Completed ([`FlowOutcome::Completed`], Mooncake rc 0), failed ([`FlowOutcome::Failed`], rc
//! −1: timeout, retries exhausted, no route), or aborted by the simulator
//! ([`Fabric::abort_flow`], [`Fabric::abort_flows_touching`]). The `FlowEnd` is returned exactly
//! once, by `fire` or by the abort call, and the id is then free for reuse.
//!
//! # Lazy settling
//! A flow's bytes are brought up to date only when its rate changes, when it ends, or when a
//! report asks ([`Fabric::settle_all`]): cost grows with rate changes, not with time. Rate
//! changes of mutations made at one instant are solved once, at the next `completions` (or the
//! first call at a later time).
//!
//! # Compatibility with the first model
//! [`Fabric::new`], [`Fabric::start_flow`] (NIC to NIC, no latency, no per-WR cap, no timeout),
//! [`Fabric::is_current`], [`Fabric::finish_flow`], [`Fabric::settle_all`] and
//! [`Fabric::nic_bytes`] keep their signatures and behaviour.

pub mod calibration;
pub mod harness;
pub mod maxmin;
mod timers;
mod topology;

pub use calibration::FabricParams;
pub use maxmin::FlowId;
pub use topology::{GpuId, Link, NicId, TopologyConfig, TopologyError, TopologyKind};

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use maxmin::{LinkIdx, RateChange, Sharing};
use timers::Timers;
use topology::{Layout, Path};

use crate::engine::Nanos;

/// An event the simulator must schedule: call [`Fabric::fire`]`(at, flow, generation)` at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The flow.
    pub flow: FlowId,
    /// Its generation when scheduled.
    pub generation: u64,
    /// When the flow's next phase change (or its end) is due, ns.
    pub at: Nanos,
}

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
pub struct FlowEnd {
    /// Its id (free for reuse from now on).
    pub flow: FlowId,
    /// The simulator's handle.
    pub token: u64,
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

impl FlowEnd {
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

/// A fault, as the scenario describes it. [`Fabric::apply_fault`] applies it.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// A link goes down (downs nest: as many ups as downs bring it back).
    LinkDown(Link),
    /// A link comes back up.
    LinkUp(Link),
    /// Both directions of a NIC go down.
    NicDown(NicId),
    /// Both directions of a NIC come back up.
    NicUp(NicId),
    /// A NIC goes down now and comes back `down_ns` later.
    NicFlap {
        /// The NIC.
        nic: NicId,
        /// How long it stays down, ns.
        down_ns: Nanos,
    },
    /// A link runs at `fraction` of its capacity, in `(0, 1]` (1 restores it).
    Degrade {
        /// The link.
        link: Link,
        /// Fraction of the healthy capacity.
        fraction: f64,
    },
    /// A link loses `rate` of its packets, in `[0, 1)` (0 restores it).
    Loss {
        /// The link.
        link: Link,
        /// Packet loss rate.
        rate: f64,
    },
    /// The instance on these GPUs crashed: its flows are aborted.
    Crash {
        /// The instance's GPUs.
        gpus: Vec<GpuId>,
    },
}

/// What a fault did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultEffect {
    /// Live flows whose path failed, rate or goodput changed (ascending ids).
    pub affected: Vec<FlowId>,
    /// Flows that ended (aborted by a crash).
    pub ended: Vec<FlowEnd>,
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

#[derive(Clone, Debug)]
struct Flow {
    token: u64,
    src: GpuId,
    dst: GpuId,
    /// First-model flows are pinned to a NIC pair.
    pinned: Option<(NicId, NicId)>,
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
    generation: u64,
    /// When the current phase ends, as last reported in a `Completion` (`Nanos::MAX`: never).
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
}

/// The fabric: topology, link health, live flows.
pub struct Fabric {
    layout: Layout,
    params: FabricParams,
    sharing: Sharing,
    links: Vec<LinkState>,
    flows: Vec<Option<Flow>>,
    /// Free flow ids, lowest first (deterministic reuse).
    free: BinaryHeap<Reverse<u32>>,
    live: usize,
    /// Solver flow id → fabric flow id.
    owner: Vec<u32>,
    next_generation: u64,
    changes: Vec<RateChange>,
    /// Flows whose next event changed since the last `completions`.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Every live flow's next event (single-timer mode).
    timers: Timers,
    /// Scratch list of flows due now.
    due_now: Vec<u32>,
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

impl Fabric {
    /// First-model constructor: `nics` NICs of `bytes_per_ns` each, full duplex, all on one
    /// non-blocking switch; flows are started NIC to NIC with [`Fabric::start_flow`].
    pub fn new(nics: u32, bytes_per_ns: f64) -> Self {
        let topo = TopologyConfig {
            nodes: nics.max(1),
            gpus_per_node: 1,
            nics_per_node: 1,
            nic_bytes_per_ns: bytes_per_ns,
            kind: TopologyKind::Rail,
            nvlink_bytes_per_ns: 2.0 * bytes_per_ns,
            ..TopologyConfig::default()
        };
        Self::build(topo, FabricParams::ideal()).expect("a valid first-model fabric")
    }

    /// A fabric of `topo` with `params`; the error names the field at fault.
    pub fn build(topo: TopologyConfig, params: FabricParams) -> Result<Self, TopologyError> {
        topo.validate()?;
        params.validate().map_err(TopologyError::Param)?;
        let layout = Layout::new(topo);
        let links: Vec<LinkState> = (0..layout.num_links())
            .map(|i| LinkState {
                nominal: layout.nominal_capacity(layout.link(LinkIdx(i)), params.nic_efficiency),
                fraction: 1.0,
                down: 0,
                loss: 0.0,
                bytes: 0.0,
                retransmitted: 0.0,
            })
            .collect();
        Ok(Self {
            sharing: Sharing::new(links.iter().map(|l| l.nominal).collect()),
            links,
            layout,
            params,
            flows: Vec::new(),
            free: BinaryHeap::new(),
            live: 0,
            owner: Vec::new(),
            next_generation: 0,
            changes: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            timers: Timers::default(),
            due_now: Vec::new(),
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

    // ------------------------------------------------------------------ flows

    /// Starts one Mooncake batch of `bytes` in `writes` writes from `src` to `dst` now: it pays
    /// its latency, then moves at its max-min share, capped by its per-WR cost. `token` is the
    /// simulator's handle, returned in the [`FlowEnd`]. Same-node GPUs use NVLink.
    pub fn start_transfer(
        &mut self,
        now: Nanos,
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        writes: u64,
        token: u64,
    ) -> FlowId {
        self.advance(now);
        self.layout.check_gpu(src);
        self.layout.check_gpu(dst);
        let latency = self.params.base_latency_ns + self.params.batch_overhead_ns;
        let flow = Flow {
            token,
            src,
            dst,
            pinned: None,
            bytes,
            cap: self.params.wr_cap(bytes, writes),
            start_ns: now,
            deadline_ns: now.saturating_add(self.params.timeout_ns(bytes)),
            phase: Phase::Latency {
                until: now + latency,
            },
            // Placeholder: the path is chosen when the latency is paid.
            path: self.layout.nvlink_path(src, src),
            remaining: bytes as f64,
            rate: 0.0,
            keep: 1.0,
            settled_ns: now,
            generation: 0,
            due_ns: Nanos::MAX,
            failures: 0,
            failed_attempts: 0,
            delivered_on_path: 0.0,
            retransmitted: 0.0,
        };
        let id = self.insert(flow);
        self.mark_dirty(id);
        FlowId(id)
    }

    /// First model: starts moving `bytes` from `src`'s TX to `dst`'s RX now, with no latency,
    /// no per-WR cap and no timeout (the caller paid the latency). Call
    /// [`Fabric::completions`] afterwards; end it with [`Fabric::finish_flow`] or
    /// [`Fabric::fire`].
    pub fn start_flow(
        &mut self,
        now: Nanos,
        src: NicId,
        dst: NicId,
        bytes: u64,
        token: u64,
    ) -> FlowId {
        self.advance(now);
        self.layout.check_nic(src);
        self.layout.check_nic(dst);
        let flow = Flow {
            token,
            src: self.first_gpu_of(src),
            dst: self.first_gpu_of(dst),
            pinned: Some((src, dst)),
            bytes,
            cap: f64::INFINITY,
            start_ns: now,
            deadline_ns: Nanos::MAX,
            phase: Phase::Latency { until: now },
            path: self.layout.nic_path(src, dst),
            remaining: bytes as f64,
            rate: 0.0,
            keep: 1.0,
            settled_ns: now,
            generation: 0,
            due_ns: Nanos::MAX,
            failures: 0,
            failed_attempts: 0,
            delivered_on_path: 0.0,
            retransmitted: 0.0,
        };
        let id = self.insert(flow);
        // Pinned flows never end inside `route` (a zero-byte one gets an immediate event, as in
        // the first model, so the caller's `finish_flow` finds it).
        let ended = self.route(id as usize, now);
        debug_assert!(ended.is_none());
        FlowId(id)
    }

    /// Per-flow mode: brings rates up to date at `now` and appends the events to (re)schedule,
    /// one per flow whose next event changed, in ascending flow id order.
    pub fn completions(&mut self, now: Nanos, out: &mut Vec<Completion>) {
        self.advance(now);
        self.flush();
        self.process_dirty(now, Some(out));
    }

    /// Single-timer mode: brings rates up to date at `now` and returns when the fabric next
    /// needs [`Fabric::fire_due`] (the earliest event of any flow), if ever. The simulator keeps
    /// one event for the whole fabric instead of one per flow: in a big component every
    /// mutation moves thousands of flows' times, which as per-flow events would pile up as
    /// stale entries in its queue.
    pub fn next_due(&mut self, now: Nanos) -> Option<Nanos> {
        self.advance(now);
        self.flush();
        self.process_dirty(now, None);
        self.timers.peek().map(|(at, _)| at)
    }

    /// Single-timer mode: handles every flow event due at or before `now`, in (time, flow id)
    /// order, appending the flows that ended to `ends`. Then call [`Fabric::next_due`].
    pub fn fire_due(&mut self, now: Nanos, ends: &mut Vec<FlowEnd>) {
        self.advance(now);
        loop {
            self.flush();
            self.process_dirty(now, None);
            let mut batch = std::mem::take(&mut self.due_now);
            while let Some((at, fi)) = self.timers.peek() {
                if at > now {
                    break;
                }
                self.timers.remove(fi);
                batch.push(fi);
            }
            if batch.is_empty() {
                self.due_now = batch;
                return;
            }
            // Fire them all before re-solving: a flow due now finished at its old rate even if
            // another one ending now changes that rate from now on.
            for &fi in &batch {
                if let Some(end) = self.fire_inner(now, fi as usize) {
                    ends.push(end);
                }
            }
            batch.clear();
            self.due_now = batch;
        }
    }

    /// Whether `generation` is the flow's current one (its event is not stale).
    pub fn is_current(&self, flow: FlowId, generation: u64) -> bool {
        matches!(self.flows.get(flow.0 as usize), Some(Some(f)) if f.generation == generation)
    }

    /// Handles the event `(flow, generation)` due at `now`: `None` if it is stale or was a phase
    /// change, the flow's end otherwise. Call [`Fabric::completions`] afterwards.
    pub fn fire(&mut self, now: Nanos, flow: FlowId, generation: u64) -> Option<FlowEnd> {
        self.advance(now);
        if !self.is_current(flow, generation) {
            return None;
        }
        self.fire_inner(now, flow.0 as usize)
    }

    /// Handles flow `fi`'s event at `now` (see [`Fabric::fire`]).
    fn fire_inner(&mut self, now: Nanos, fi: usize) -> Option<FlowEnd> {
        let f = self.flows[fi].as_ref().expect("a live flow");
        let (due, deadline, phase) = (f.due_ns, f.deadline_ns, f.phase);
        if due <= now && due <= deadline {
            return match phase {
                Phase::Latency { .. } => self.route(fi, now),
                Phase::Moving { .. } => Some(self.end(fi, now, FlowOutcome::Completed)),
                Phase::Retrying { .. } => {
                    if f.failures > self.params.retry_cnt {
                        let reason = if self.select_path(fi).is_some() {
                            FailReason::RetriesExhausted
                        } else {
                            FailReason::NoRoute
                        };
                        Some(self.end(fi, now, FlowOutcome::Failed(reason)))
                    } else {
                        self.route(fi, now)
                    }
                }
            };
        }
        if deadline <= now {
            return Some(self.end(fi, now, FlowOutcome::Failed(FailReason::Timeout)));
        }
        // Not due (cannot happen when the contract is followed): ask for a fresh event.
        self.mark_dirty(fi as u32);
        None
    }

    /// First model: ends `flow`, whose completion event is current and due, returning its token.
    ///
    /// # Panics
    /// If the flow does not complete at its event (use [`Fabric::fire`] for transfers).
    pub fn finish_flow(&mut self, flow: FlowId) -> u64 {
        let f = self.flows[flow.0 as usize]
            .as_ref()
            .expect("finish_flow on a live flow");
        let (at, generation) = (f.due_ns.min(f.deadline_ns), f.generation);
        match self.fire(at, flow, generation) {
            Some(end) if end.outcome == FlowOutcome::Completed => end.token,
            other => panic!(
                "finish_flow: flow {} did not complete at {at} ns ({other:?}); use fire",
                flow.0
            ),
        }
    }

    /// Aborts a live flow now (e.g. its instance crashed).
    pub fn abort_flow(&mut self, now: Nanos, flow: FlowId) -> FlowEnd {
        self.advance(now);
        assert!(
            matches!(self.flows.get(flow.0 as usize), Some(Some(_))),
            "abort_flow: flow {} is not live",
            flow.0
        );
        self.end(flow.0 as usize, now, FlowOutcome::Aborted)
    }

    /// Aborts now every live flow from or to one of `gpus` (a crashed instance), in ascending
    /// id order.
    pub fn abort_flows_touching(&mut self, now: Nanos, gpus: &[GpuId]) -> Vec<FlowEnd> {
        self.advance(now);
        let hit: Vec<usize> = self
            .flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                f.as_ref()
                    .filter(|f| gpus.contains(&f.src) || gpus.contains(&f.dst))
                    .map(|_| i)
            })
            .collect();
        hit.into_iter()
            .map(|fi| self.end(fi, now, FlowOutcome::Aborted))
            .collect()
    }

    // ------------------------------------------------------------------ faults

    /// Takes `link` down now. Flows moving over it lose their path: each sees the failure after
    /// the detection delay and then retries on another NIC pair. Returns them.
    pub fn link_down(&mut self, now: Nanos, link: Link) -> Vec<FlowId> {
        self.advance(now);
        let l = self.layout.index(link);
        let mut hit = self.lower(l, now);
        hit.sort_unstable();
        hit
    }

    /// Brings `link` back up now (after as many ups as downs). Flows that lost it stay on the
    /// path they retried on; later attempts may use it again. Returns no flow (none crosses a
    /// down link), for symmetry.
    pub fn link_up(&mut self, now: Nanos, link: Link) -> Vec<FlowId> {
        self.advance(now);
        let l = self.layout.index(link);
        self.raise(l.0);
        Vec::new()
    }

    /// Takes both directions of `nic` down now (see [`Fabric::link_down`]).
    pub fn nic_down(&mut self, now: Nanos, nic: NicId) -> Vec<FlowId> {
        self.advance(now);
        let mut hit = self.lower(self.layout.index(Link::NicTx(nic)), now);
        hit.extend(self.lower(self.layout.index(Link::NicRx(nic)), now));
        hit.sort_unstable();
        hit.dedup();
        hit
    }

    /// Brings both directions of `nic` back up now.
    pub fn nic_up(&mut self, now: Nanos, nic: NicId) -> Vec<FlowId> {
        self.advance(now);
        for link in [Link::NicTx(nic), Link::NicRx(nic)] {
            let l = self.layout.index(link);
            self.raise(l.0);
        }
        Vec::new()
    }

    /// Takes `nic` down now and brings it back `down_ns` later (applied by the fabric itself at
    /// the first call at or after that time). Returns the flows that lost their path.
    pub fn nic_flap(&mut self, now: Nanos, nic: NicId, down_ns: Nanos) -> Vec<FlowId> {
        let hit = self.nic_down(now, nic);
        for link in [Link::NicTx(nic), Link::NicRx(nic)] {
            let l = self.layout.index(link);
            self.up_seq += 1;
            self.ups
                .push(Reverse((now.saturating_add(down_ns), self.up_seq, l.0)));
        }
        hit
    }

    /// Runs `link` at `fraction` of its healthy capacity from now on, `fraction` in `(0, 1]`
    /// (1 restores it). Returns the flows moving over it (their rates are re-solved).
    pub fn degrade_link(&mut self, now: Nanos, link: Link, fraction: f64) -> Vec<FlowId> {
        assert!(
            fraction > 0.0 && fraction <= 1.0,
            "a degraded link keeps a fraction in (0, 1] of its capacity, got {fraction}"
        );
        self.advance(now);
        let l = self.layout.index(link);
        let st = &mut self.links[l.0 as usize];
        st.fraction = fraction;
        self.sharing.set_capacity(l, st.nominal * fraction);
        self.mutations += 1;
        self.pending = Some(now);
        self.flows_on(l)
    }

    /// Sets the packet loss rate of `link` to `rate` in `[0, 1)` from now on (0 restores it).
    /// A flow's goodput is its wire rate × Π (1 − loss) over its path; the difference is
    /// retransmitted bytes, counted per flow and per link. Returns the flows moving over it.
    pub fn set_link_loss(&mut self, now: Nanos, link: Link, rate: f64) -> Vec<FlowId> {
        assert!(
            (0.0..1.0).contains(&rate),
            "a packet loss rate is in [0, 1), got {rate}"
        );
        self.advance(now);
        let l = self.layout.index(link);
        let hit = self.flows_on(l);
        for f in &hit {
            self.settle(f.0 as usize, now);
        }
        self.links[l.0 as usize].loss = rate;
        for f in &hit {
            let fi = f.0 as usize;
            let keep = self.keep_of(self.flows[fi].as_ref().expect("live").path);
            self.flows[fi].as_mut().expect("live").keep = keep;
            self.mark_dirty(f.0);
        }
        hit
    }

    /// Applies `fault` now.
    pub fn apply_fault(&mut self, now: Nanos, fault: &Fault) -> FaultEffect {
        let affected = match *fault {
            Fault::LinkDown(l) => self.link_down(now, l),
            Fault::LinkUp(l) => self.link_up(now, l),
            Fault::NicDown(n) => self.nic_down(now, n),
            Fault::NicUp(n) => self.nic_up(now, n),
            Fault::NicFlap { nic, down_ns } => self.nic_flap(now, nic, down_ns),
            Fault::Degrade { link, fraction } => self.degrade_link(now, link, fraction),
            Fault::Loss { link, rate } => self.set_link_loss(now, link, rate),
            Fault::Crash { ref gpus } => {
                return FaultEffect {
                    affected: Vec::new(),
                    ended: self.abort_flows_touching(now, gpus),
                };
            }
        };
        FaultEffect {
            affected,
            ended: Vec::new(),
        }
    }

    // ------------------------------------------------------------------ reports

    /// Brings every moving flow's bytes up to `now` (before reading byte counters).
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

    /// Cumulative wire bytes carried by `link` (retransmissions included).
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
    pub fn flow_token(&self, flow: FlowId) -> u64 {
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

    /// Wire rate of a live flow (its max-min share), bytes/ns, as of the last `completions`.
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

    // ------------------------------------------------------------------ internals

    fn flow(&self, flow: FlowId) -> &Flow {
        self.flows
            .get(flow.0 as usize)
            .and_then(Option::as_ref)
            .unwrap_or_else(|| panic!("flow {} is not live", flow.0))
    }

    /// The GPU a first-model flow is attributed to: the first GPU attached to `nic`.
    fn first_gpu_of(&self, nic: NicId) -> GpuId {
        let c = &self.layout.cfg;
        let (node, k) = (nic.0 / c.nics_per_node, nic.0 % c.nics_per_node);
        let local =
            (u64::from(k) * u64::from(c.gpus_per_node)).div_ceil(u64::from(c.nics_per_node)) as u32;
        GpuId {
            node,
            local: local.min(c.gpus_per_node - 1),
        }
    }

    fn insert(&mut self, flow: Flow) -> u32 {
        let id = match self.free.pop() {
            Some(Reverse(id)) => id,
            None => {
                let id = u32::try_from(self.flows.len()).expect("too many flows");
                self.flows.push(None);
                self.is_dirty.push(false);
                id
            }
        };
        self.flows[id as usize] = Some(flow);
        self.live += 1;
        self.stats.started += 1;
        id
    }

    /// Moves the clock to `now`: applies rate changes of mutations made earlier, and scheduled
    /// link-ups due by `now`.
    fn advance(&mut self, now: Nanos) {
        assert!(
            now >= self.now,
            "fabric called at {now} ns after a call at {} ns: time went backwards",
            self.now
        );
        if self.pending.is_some_and(|t| t < now) {
            self.flush();
        }
        while let Some(&Reverse((at, _, l))) = self.ups.peek() {
            if at > now {
                break;
            }
            self.ups.pop();
            self.raise(l);
        }
        self.now = now;
    }

    /// Applies the solver's rate changes at the time of the mutations that caused them: each
    /// changed flow moved at its old rate until then.
    fn flush(&mut self) {
        let Some(t) = self.pending.take() else {
            return;
        };
        let mut changes = std::mem::take(&mut self.changes);
        changes.clear();
        self.sharing.drain_changes(&mut changes);
        for ch in &changes {
            let fi = self.owner[ch.flow.0 as usize] as usize;
            self.settle(fi, t);
            self.flows[fi].as_mut().expect("owner is live").rate = ch.new_rate;
            self.mark_dirty(fi as u32);
        }
        self.changes = changes;
    }

    /// Computes the next event of every flow marked dirty, updates the timer heap, and (per-flow
    /// mode) appends the events to schedule.
    fn process_dirty(&mut self, now: Nanos, mut out: Option<&mut Vec<Completion>>) {
        let mut dirty = std::mem::take(&mut self.dirty);
        if dirty.len() * 16 > self.is_dirty.len() {
            // Many (a big component changed): reading the marks in id order beats sorting.
            dirty.clear();
            dirty.extend((0..self.is_dirty.len() as u32).filter(|&f| self.is_dirty[f as usize]));
        } else {
            dirty.sort_unstable();
        }
        for &fi in &dirty {
            self.is_dirty[fi as usize] = false;
            let Some(f) = self.flows[fi as usize].as_mut() else {
                continue;
            };
            let due = match f.phase {
                Phase::Latency { until } | Phase::Retrying { until } => until,
                Phase::Moving { .. } => {
                    let goodput = f.rate * f.keep;
                    if f.remaining <= 0.0 {
                        f.settled_ns
                    } else if goodput > 0.0 {
                        // Rounded up: the event never comes before the last byte.
                        f.settled_ns
                            .saturating_add((f.remaining / goodput).ceil() as Nanos)
                    } else {
                        Nanos::MAX
                    }
                }
            };
            f.due_ns = due;
            let at = due.min(f.deadline_ns);
            if at == Nanos::MAX {
                self.timers.remove(fi);
                continue;
            }
            let at = at.max(now);
            self.timers.set(fi, at);
            if let Some(out) = out.as_deref_mut() {
                out.push(Completion {
                    flow: FlowId(fi),
                    generation: f.generation,
                    at,
                });
            }
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Gives the flow a new generation (its scheduled event becomes stale) and lists it for the
    /// next `completions`.
    fn mark_dirty(&mut self, fi: u32) {
        self.next_generation += 1;
        self.flows[fi as usize].as_mut().expect("live").generation = self.next_generation;
        if !self.is_dirty[fi as usize] {
            self.is_dirty[fi as usize] = true;
            self.dirty.push(fi);
        }
    }

    /// Brings a flow's bytes up to `now` at its current rate.
    fn settle(&mut self, fi: usize, now: Nanos) {
        let slice = self.params.slice_bytes as f64;
        let Self { flows, links, .. } = self;
        let f = flows[fi].as_mut().expect("settle a live flow");
        if matches!(f.phase, Phase::Moving { .. }) && now > f.settled_ns && f.rate > 0.0 {
            let goodput = f.rate * f.keep;
            let dt = (now - f.settled_ns) as f64;
            // A flow past its (rounded-up) due time has landed everything, whatever the float
            // product says: otherwise a flow due at the very instant another one ends would be
            // left a residue and pushed 1 ns later.
            let due = f
                .settled_ns
                .saturating_add((f.remaining / goodput).ceil() as Nanos);
            let good = if now >= due {
                f.remaining
            } else {
                (goodput * dt).min(f.remaining)
            };
            let wire = good / f.keep;
            let resent = wire - good;
            f.remaining -= good;
            f.delivered_on_path += good;
            f.retransmitted += resent;
            for &l in f.path.links() {
                let st = &mut links[l.0 as usize];
                st.bytes += wire;
                st.retransmitted += resent;
            }
            if f.delivered_on_path >= slice {
                // A slice landed on this path: the slices that failed before are through.
                f.failures = 0;
            }
        }
        f.settled_ns = f.settled_ns.max(now);
    }

    /// Goodput fraction of a path.
    fn keep_of(&self, path: Path) -> f64 {
        path.links()
            .iter()
            .map(|l| 1.0 - self.links[l.0 as usize].loss)
            .product()
    }

    fn path_is_up(&self, path: &Path) -> bool {
        path.links()
            .iter()
            .all(|l| self.links[l.0 as usize].down == 0)
    }

    /// The path an attempt uses: the first NIC pair, in Mooncake's preference order, whose
    /// links are all up. Order: the sender's preferred NIC with each receiver NIC (preferred
    /// first, then the node's others in ring order), then the sender's next NIC, and so on.
    fn select_path(&self, fi: usize) -> Option<Path> {
        let f = self.flows[fi].as_ref().expect("live");
        let up = |p: Path| self.path_is_up(&p).then_some(p);
        if let Some((s, d)) = f.pinned {
            return up(self.layout.nic_path(s, d));
        }
        if f.src.node == f.dst.node {
            return up(self.layout.nvlink_path(f.src, f.dst));
        }
        let n = self.layout.cfg.nics_per_node;
        (0..n).find_map(|i| {
            let a = self.layout.candidate(f.src, i);
            (0..n).find_map(|j| up(self.layout.nic_path(a, self.layout.candidate(f.dst, j))))
        })
    }

    /// The path the sender tries first (whether up or not).
    fn preferred_path(&self, fi: usize) -> Path {
        let f = self.flows[fi].as_ref().expect("live");
        if let Some((s, d)) = f.pinned {
            self.layout.nic_path(s, d)
        } else if f.src.node == f.dst.node {
            self.layout.nvlink_path(f.src, f.dst)
        } else {
            self.layout
                .nic_path(self.layout.affinity(f.src), self.layout.affinity(f.dst))
        }
    }

    /// How long the sender takes to see an attempt on `path` fail because `dead` is down:
    /// at once-ish if `dead` is its own first link (port-error event, WRs flushed), after the
    /// RC retry timeout otherwise.
    fn detect_ns(&self, path: &Path, dead: LinkIdx) -> Nanos {
        if path.links().first() == Some(&dead) {
            self.params.local_detect_ns
        } else {
            self.params.remote_detect_ns
        }
    }

    /// Starts (or re-posts) the flow's bytes on a path now. With no path up, the attempt fails:
    /// the flow waits for the failure to be seen, then retries.
    fn route(&mut self, fi: usize, now: Nanos) -> Option<FlowEnd> {
        let f = self.flows[fi].as_ref().expect("live");
        if f.bytes == 0 && f.pinned.is_none() {
            return Some(self.end(fi, now, FlowOutcome::Completed));
        }
        match self.select_path(fi) {
            Some(path) => {
                let keep = self.keep_of(path);
                // A cap at or above the smallest healthy capacity on the path can never bind
                // (capacities only go down from there): leave it out of the solver, which would
                // otherwise sort every capped flow at each re-solve. Same rates, less work.
                let floor = path
                    .links()
                    .iter()
                    .map(|l| self.links[l.0 as usize].nominal)
                    .fold(f64::INFINITY, f64::min);
                let cap = if f.cap >= floor { f64::INFINITY } else { f.cap };
                let share = self.sharing.add_flow(path.links(), cap);
                self.mutations += 1;
                if share.0 as usize >= self.owner.len() {
                    self.owner.resize(share.0 as usize + 1, 0);
                }
                self.owner[share.0 as usize] = fi as u32;
                let f = self.flows[fi].as_mut().expect("live");
                f.phase = Phase::Moving { share };
                f.path = path;
                f.keep = keep;
                f.rate = 0.0;
                f.settled_ns = now;
                f.delivered_on_path = 0.0;
                self.pending = Some(now);
            }
            None => {
                let path = self.preferred_path(fi);
                let dead = *path
                    .links()
                    .iter()
                    .find(|l| self.links[l.0 as usize].down > 0)
                    .expect("no path up, so the preferred one has a down link");
                let until = now + self.detect_ns(&path, dead);
                let f = self.flows[fi].as_mut().expect("live");
                f.failures += 1;
                f.failed_attempts += 1;
                f.phase = Phase::Retrying { until };
                self.stats.failed_attempts += 1;
            }
        }
        self.mark_dirty(fi as u32);
        None
    }

    /// Live fabric flows moving over `l`, ascending.
    fn flows_on(&self, l: LinkIdx) -> Vec<FlowId> {
        let mut v: Vec<FlowId> = self
            .sharing
            .flows_on(l)
            .map(|s| FlowId(self.owner[s.0 as usize]))
            .collect();
        v.sort_unstable();
        v
    }

    /// One more down on link `l`; if it just went down, every flow moving over it fails its
    /// attempt now. Returns those flows.
    fn lower(&mut self, l: LinkIdx, now: Nanos) -> Vec<FlowId> {
        let st = &mut self.links[l.0 as usize];
        st.down += 1;
        if st.down > 1 {
            return Vec::new();
        }
        let hit = self.flows_on(l);
        for &flow in &hit {
            let fi = flow.0 as usize;
            self.settle(fi, now);
            let f = self.flows[fi].as_ref().expect("live");
            let Phase::Moving { share } = f.phase else {
                unreachable!("only moving flows are on links")
            };
            let until = now + self.detect_ns(&f.path, l);
            self.sharing.remove_flow(share);
            self.mutations += 1;
            let f = self.flows[fi].as_mut().expect("live");
            f.phase = Phase::Retrying { until };
            f.rate = 0.0;
            f.failures += 1;
            f.failed_attempts += 1;
            self.stats.failed_attempts += 1;
            self.mark_dirty(flow.0);
        }
        if !hit.is_empty() {
            self.pending = Some(now);
        }
        hit
    }

    /// One less down on link `l` (no-op on a link that is up).
    fn raise(&mut self, l: u32) {
        let st = &mut self.links[l as usize];
        st.down = st.down.saturating_sub(1);
    }

    /// Ends flow `fi` now with `outcome`, frees its id, and reports it.
    fn end(&mut self, fi: usize, now: Nanos, outcome: FlowOutcome) -> FlowEnd {
        self.settle(fi, now);
        let mut f = self.flows[fi].take().expect("end a live flow");
        if let Phase::Moving { share } = f.phase {
            if outcome == FlowOutcome::Completed && f.remaining > 0.0 {
                // The residue left by rounding the event time up to the nanosecond.
                let wire = f.remaining / f.keep;
                let resent = wire - f.remaining;
                for &l in f.path.links() {
                    let st = &mut self.links[l.0 as usize];
                    st.bytes += wire;
                    st.retransmitted += resent;
                }
                f.retransmitted += resent;
                f.remaining = 0.0;
            }
            self.sharing.remove_flow(share);
            self.mutations += 1;
            self.pending = Some(now);
        }
        self.timers.remove(fi as u32);
        self.free.push(Reverse(fi as u32));
        self.live -= 1;
        match outcome {
            FlowOutcome::Completed => self.stats.completed += 1,
            FlowOutcome::Failed(_) => self.stats.failed += 1,
            FlowOutcome::Aborted => self.stats.aborted += 1,
        }
        FlowEnd {
            flow: FlowId(fi as u32),
            token: f.token,
            outcome,
            src: f.src,
            dst: f.dst,
            bytes: f.bytes,
            delivered_bytes: f.bytes as f64 - f.remaining,
            retransmitted_bytes: f.retransmitted,
            failed_attempts: f.failed_attempts,
            start_ns: f.start_ns,
            end_ns: now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_to_end(f: &mut Fabric, mut now: Nanos) -> Vec<(u64, Nanos)> {
        let mut done = Vec::new();
        let mut pending: Vec<Completion> = Vec::new();
        f.completions(now, &mut pending);
        while !pending.is_empty() {
            pending.sort_by_key(|c| (c.at, c.flow));
            let c = pending.remove(0);
            if !f.is_current(c.flow, c.generation) {
                continue;
            }
            now = c.at;
            done.push((f.finish_flow(c.flow), now));
            f.completions(now, &mut pending);
        }
        done
    }

    #[test]
    fn two_flows_on_one_nic_share_it_then_the_survivor_speeds_up() {
        // 50 bytes/ns NICs (400 Gb/s). Flow a: 1000 B, flow b: 3000 B, both leave NIC 0.
        let mut f = Fabric::new(3, 50.0);
        f.start_flow(0, NicId(0), NicId(1), 1000, 1);
        f.start_flow(0, NicId(0), NicId(2), 3000, 2);
        let done = run_to_end(&mut f, 0);
        // a: 1000 B at 25 B/ns = 40 ns; b then has 2000 B left at 50 B/ns = 40 ns more.
        assert_eq!(done, vec![(1, 40), (2, 80)]);
        let (tx, _) = f.nic_bytes(NicId(0));
        assert!((tx - 4000.0).abs() < 1e-6);
    }

    #[test]
    fn independent_flows_do_not_slow_each_other() {
        let mut f = Fabric::new(4, 50.0);
        f.start_flow(0, NicId(0), NicId(1), 5000, 1);
        f.start_flow(0, NicId(2), NicId(3), 5000, 2);
        assert_eq!(run_to_end(&mut f, 0), vec![(1, 100), (2, 100)]);
    }

    #[test]
    fn a_first_model_flow_to_its_own_nic_crosses_tx_and_rx() {
        let mut f = Fabric::new(1, 50.0);
        f.start_flow(0, NicId(0), NicId(0), 500, 7);
        assert_eq!(run_to_end(&mut f, 0), vec![(7, 10)]);
        assert_eq!(f.nic_bytes(NicId(0)), (500.0, 500.0));
    }
}
