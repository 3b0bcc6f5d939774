//! sglang's PD components, one file (or folder) each: [`prefill`] (the prefill server's
//! scheduler, its crash and restart), [`decode`] (prealloc queue, continuous batch,
//! retraction, coalesced runs; first contact, crash and restart in `decode/faults.rs`),
//! [`bootstrap`] (the PD handshake of a request between its two servers: the sender's and
//! the receiver's `KVPoll` moves and clocks, when each side's queue has the request),
//! [`transfer`] (the Mooncake transfer queues, their shards and worker threads, the session
//! blacklist, the landing and the oracle, the transfer's conclusion, the poll timeouts), the
//! [`effect`]s a component's call returns, the [`router`] with its health check, the decodes'
//! [`heartbeat`] to the prefills, each server's [`tokenizer`] manager (its queue and its
//! length check), colocated servers ([`colocated`]), HiCache ([`hicache`]) with the shared
//! Mooncake Store ([`kv_store`]), and the decode side's offload to it ([`decode_offload`]).
//!
//! Each owns its state (private: changed only by its own methods) and answers its events
//! with what it is handed — a [`Ctx`] (the queue and its clock, the request table, the wake
//! set) or the part of it it needs — returning a typed outcome when the effect reaches beyond
//! it (a crash's failures and flows, a [`Failure`], a tokenizer rejection, what the
//! handshake hands on to the servers: [`bootstrap::Handoff`]), or pushing
//! [`Effect`]s in the order it meets them (the [`transfer`] workers). **A component never
//! calls another component**: what crosses from one to another (a freed page that may admit a
//! request, a request that ended, a crash's failures) goes through the simulator's `World`
//! (`sim/`), which applies outcomes and effects and drains the wake set after every event. See
//! `README.md` beside this file for the request lifecycle and where each rule lives.

pub mod a2a;
pub mod abort;
pub mod approx_tree;
pub mod bootstrap;
pub mod checksum;
pub mod colocated;
pub mod dcp;
pub mod decode;
pub mod decode_offload;
pub mod decode_radix;
pub mod dp;
pub mod effect;
pub mod heartbeat;
pub mod hicache;
pub mod kv_store;
pub mod memory;
pub mod mooncake_store;
pub mod pipeline;
pub mod prefill;
pub mod prefix_cache;
pub mod router;
pub mod speculative;
pub mod staging;
pub mod tokenizer;
pub mod transfer;

#[cfg(test)]
mod message_tests;

use crate::compute::StepTimes;
use crate::engine::{EventKey, EventQueue, Nanos};
use crate::fabric::{GpuId, NicId};
use crate::vocab::ErrorKind;
use crate::vocab::event::{Event, Wake};
use crate::vocab::ids::{InstanceId, PoolId};
use crate::vocab::requests::Requests;
use memory::KvPool;

pub use effect::Effect;

/// What a component is handed while it handles an event: the clock and the event queue, the
/// request table, the wake set `World` drains after the event, the effects buffer `World`
/// applies right after the call, and the seed (every broken invariant prints it). Built by
/// `World` for one call (`sim`'s `ctx!`), so a component reaches exactly these and never
/// another component.
pub struct Ctx<'a> {
    /// The event queue; its clock is the simulated now.
    pub q: &'a mut EventQueue<Event>,
    /// Every request in flight.
    pub reqs: &'a mut Requests,
    /// Instances that may admit work once the event is handled.
    pub wake: &'a mut Vec<Wake>,
    /// What the call asks beyond the component, in order ([`Effect`]).
    pub fx: &'a mut Vec<Effect>,
    /// The run's seed, for invariant messages.
    pub seed: u64,
}

impl Ctx<'_> {
    /// The simulated now, ns.
    #[inline]
    pub fn now(&self) -> Nanos {
        self.q.now()
    }
}

/// The one `FabricDue` event kept pending at the fabric's next due time: whoever starts or
/// ends a flow syncs it (the fabric itself never schedules).
#[derive(Debug, Default)]
pub struct FabricTimer(Option<(EventKey, Nanos)>);

impl FabricTimer {
    /// Moves the pending `FabricDue` to the fabric's next due time (or drops it when nothing
    /// is due); a timer already at that time is left alone.
    pub fn sync(
        &mut self,
        q: &mut EventQueue<Event>,
        fabric: &mut crate::fabric::Fabric<crate::vocab::flow::FlowTag>,
    ) {
        let now = q.now();
        let due = fabric.next_due(now);
        if due != self.0.map(|(_, t)| t) {
            if let Some((k, _)) = self.0.take() {
                q.cancel(k);
            }
            if let Some(t) = due {
                let key = q.schedule_keyed(t.max(now), Event::FabricDue);
                self.0 = Some((key, t));
            }
        }
    }

    /// The pending `FabricDue` fired.
    pub fn fired(&mut self) {
        self.0 = None;
    }
}

/// How a request fails: its error kind and the text sglang logs for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The kind (`summary.json` `errors[].kind`).
    pub kind: ErrorKind,
    /// sglang's message, or pdsim's where sglang has none (`docs/sglang-pd.md` §12).
    pub message: String,
}

impl Failure {
    /// A failure of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

impl From<&crate::layout::PdError> for Failure {
    fn from(e: &crate::layout::PdError) -> Self {
        Self::new(e.kind, e.message.clone())
    }
}

/// What a server is built from (`Core::new`); the rest of its [`Core`] starts empty and up.
pub struct CoreSpec {
    /// The instance's number in the results.
    pub instance: InstanceId,
    /// Its pool.
    pub pool: PoolId,
    /// GPU of each TP rank.
    pub gpus: Vec<GpuId>,
    /// NIC of each TP rank.
    pub nics: Vec<NicId>,
    /// Step-time model.
    pub step: StepTimes,
    /// `--page-size`, tokens.
    pub page_size: u32,
    /// Whether requests also hold a mamba/GDN state slot.
    pub hybrid: bool,
    /// KV pages and state slots.
    pub pages: KvPool,
    /// Whether its forwards' DeepEP all-to-all crosses the fabric (`sglang::a2a`).
    pub a2a_on_fabric: bool,
}

/// What every sglang server has, whatever its role.
pub struct Core {
    /// The instance's number in the results.
    pub instance: InstanceId,
    /// Its pool.
    pub pool: PoolId,
    /// GPU of each TP rank.
    pub gpus: Vec<GpuId>,
    /// NIC of each TP rank (its GPU's preferred NIC).
    pub nics: Vec<NicId>,
    /// False between a crash and its restart: only the component's own `crash` and
    /// `restart` change it ([`Core::alive`] reads it).
    alive: bool,
    /// Whether the router may send it requests: false while its slot is off, starting or
    /// draining in a pool that changes size (`autoscale::fleet`); a crash leaves it as it is.
    member: bool,
    /// Whether its forwards' DeepEP all-to-all crosses the fabric: a forward that starts is
    /// handed to `sglang::a2a` ([`Effect::ForwardStarted`]).
    a2a_on_fabric: bool,
    /// Step-time model.
    pub step: StepTimes,
    /// `--page-size`, tokens.
    pub page_size: u32,
    /// Whether requests also hold a mamba/GDN state slot.
    pub hybrid: bool,
    /// KV pages, state slots and (on oracle-watched decode instances) ownership.
    pub pages: KvPool,
    /// Requests assigned and not yet done with this instance (least-loaded routing).
    pub outstanding: u32,
    /// Whether a forward is running.
    pub busy: bool,
    /// The pending end of the running forward (cancelled by a crash).
    pub step_key: Option<EventKey>,
    /// When the running (or last) forward ends, ns (set with its event: [`Core::forward_ends`]).
    step_end_ns: Nanos,
    /// Per-second counters for the timeseries.
    pub tick: TickCounters,
}

/// Counters of the current simulated second.
#[derive(Default, Clone, Copy, Debug)]
pub struct TickCounters {
    /// Requests routed here.
    pub arrivals: u64,
    /// Tokens produced (decode) or prompts finished (prefill).
    pub tokens: u64,
    /// Start of the running step, or of the current tick if the step began earlier, ns.
    pub busy_since: Nanos,
    /// Nanoseconds spent computing in the current tick.
    pub busy_ns: u64,
}

impl TickCounters {
    /// Closes the running step's busy time at `now` (the second ends while it runs).
    #[inline]
    pub fn busy_to(&mut self, now: Nanos) {
        self.busy_ns += now - self.busy_since;
        self.busy_since = now;
    }

    /// Starts a new second: its arrivals, tokens and busy time from 0.
    #[inline]
    pub fn next_second(&mut self) {
        self.arrivals = 0;
        self.busy_ns = 0;
        self.tokens = 0;
    }
}

impl Core {
    /// A request was routed here: it counts in least-loaded routing until it is done here
    /// ([`Core::request_done`]), and in this second's arrivals.
    #[inline]
    pub fn request_routed(&mut self) {
        self.outstanding += 1;
        self.request_arrived();
    }

    /// A request arrived here: it counts in this second's arrivals.
    #[inline]
    pub fn request_arrived(&mut self) {
        self.tick.arrivals += 1;
    }

    /// A request came back to this instance (a decode retracted it: its prefill redoes it).
    #[inline]
    pub fn request_returned(&mut self) {
        self.outstanding += 1;
    }

    /// A request is done with this instance.
    #[inline]
    pub fn request_done(&mut self) {
        self.outstanding -= 1;
    }

    /// Takes back the end of the running forward (its event cancelled): something other than
    /// the step model sets it (`sglang::a2a`, when the forward's all-to-all lands).
    pub fn take_back_forward_end(&mut self, q: &mut EventQueue<Event>) {
        if let Some(k) = self.step_key.take() {
            q.cancel(k);
        }
    }

    /// The running forward ends at `at` with the event `key`: the step's end is kept with
    /// its event (a crash cancels the event; [`Core::next_turn_ns`] reads the end).
    pub fn forward_ends(&mut self, at: Nanos, key: EventKey) {
        self.step_end_ns = at;
        self.step_key = Some(key);
    }

    /// When this server's single-threaded event loop next turns, seen at `now`: the end of
    /// the running forward, or `now` when idle (sglang runs `stream_output` and its queue
    /// polls only between `run_batch` calls).
    pub fn next_turn_ns(&self, now: Nanos) -> Nanos {
        if self.busy {
            self.step_end_ns.max(now)
        } else {
            now
        }
    }

    /// A live, idle server with nothing assigned.
    pub fn new(spec: CoreSpec) -> Self {
        Self {
            instance: spec.instance,
            pool: spec.pool,
            gpus: spec.gpus,
            nics: spec.nics,
            alive: true,
            member: true,
            a2a_on_fabric: spec.a2a_on_fabric,
            step: spec.step,
            page_size: spec.page_size,
            hybrid: spec.hybrid,
            pages: spec.pages,
            outstanding: 0,
            busy: false,
            step_key: None,
            step_end_ns: 0,
            tick: TickCounters::default(),
        }
    }

    /// Whether the server is up (false between a crash and its restart).
    #[inline]
    pub fn alive(&self) -> bool {
        self.alive
    }

    /// Whether the router may send it requests: up, and in its pool's serving set.
    #[inline]
    pub fn routable(&self) -> bool {
        self.alive & self.member
    }

    /// Its KV pool in use, 0–1 (what an autoscaler's scrape reads).
    pub fn kv_share(&self) -> f64 {
        f64::from(self.pages.used()) / f64::from(self.pages.total().max(1))
    }

    /// Whether it is in its pool's serving set (`autoscale::fleet`; always, in a fixed pool).
    #[inline]
    pub fn member(&self) -> bool {
        self.member
    }

    /// Puts it in its pool's serving set or takes it out (`sim::scaling`: a start's end, a
    /// drain).
    pub fn set_member(&mut self, member: bool) {
        self.member = member;
    }

    /// When the running (or last) forward ends (or ended), ns; 0 before the first.
    #[inline]
    pub fn forward_end_ns(&self) -> Nanos {
        self.step_end_ns
    }

    /// Whether its forwards' DeepEP all-to-all crosses the fabric (`sglang::a2a`).
    #[inline]
    pub fn a2a_on_fabric(&self) -> bool {
        self.a2a_on_fabric
    }

    /// The forward that just started here (the running forward's event was `before`) goes
    /// to the all-to-all when this server's crosses the fabric: `Effect::ForwardStarted`
    /// on `fx` (`World` has the server describe it and `sglang::a2a` start its flows).
    #[inline]
    pub fn forward_started(&self, before: Option<EventKey>, fx: &mut Vec<Effect>) {
        if self.a2a_on_fabric && self.step_key != before {
            fx.push(Effect::ForwardStarted {
                instance: self.instance,
                before,
            });
        }
    }

    /// The server goes down; false if it already was (a second crash changes nothing).
    fn go_down(&mut self) -> bool {
        std::mem::replace(&mut self.alive, false)
    }

    /// The server is back; false if it was up.
    fn come_up(&mut self) -> bool {
        !std::mem::replace(&mut self.alive, true)
    }

    /// Sets the server up or down without its component's crash or restart: for tests that
    /// need a server in a given state.
    #[cfg(test)]
    pub fn set_alive(&mut self, alive: bool) {
        self.alive = alive;
    }

    /// A forward starts at `now`.
    pub fn start_busy(&mut self, now: Nanos) {
        self.busy = true;
        self.tick.busy_since = now;
    }

    /// The running forward ended at `now`.
    pub fn end_busy(&mut self, now: Nanos) {
        self.busy = false;
        self.step_key = None;
        self.tick.busy_ns += now - self.tick.busy_since;
    }

    /// The second ending at `now` closes: returns its counters, the running forward's busy
    /// time up to `now` included, and starts the next second's from 0 (the sampler's tick).
    #[inline]
    pub fn close_second(&mut self, now: Nanos) -> TickCounters {
        if self.busy {
            self.tick.busy_to(now);
        }
        let closed = self.tick;
        self.tick.next_second();
        closed
    }

    /// Nanoseconds computed in the second still open at `now`, the running forward's time
    /// so far included (as `f64`, for the pools' busy integrals).
    #[inline]
    pub fn busy_in_open_second(&self, now: Nanos) -> f64 {
        self.tick.busy_ns as f64
            + if self.busy {
                (now - self.tick.busy_since) as f64
            } else {
                0.0
            }
    }
}

/// Builders for the components' unit tests: a server core over a plain page pool, and requests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::memory::{KvPool, PageAllocator, Store};
    use super::{Core, CoreSpec, Ctx};
    use crate::compute::{StepModel, StepTimes, calibrated_params};
    use crate::engine::EventQueue;
    use crate::vocab::RequestRow;
    use crate::vocab::event::{Event, Wake};
    use crate::vocab::ids::{DecodeId, InstanceId, PoolId, PrefillId};
    use crate::vocab::requests::{Req, ReqRef, Requests};

    /// A live, idle Llama-3.1-8B TP1 H100 server with `pages` KV pages of `page_size` tokens.
    pub fn core(pages: u32, page_size: u32) -> Core {
        let gpu = crate::spec::gpu::gpu_preset("h100-sxm").unwrap();
        let model = crate::spec::model::preset("llama-3.1-8b").unwrap();
        Core::new(CoreSpec {
            instance: InstanceId(0),
            pool: PoolId(0),
            gpus: Vec::new(),
            nics: Vec::new(),
            step: StepTimes::Model(StepModel::new(&gpu, &model, 1, 2, calibrated_params(&gpu))),
            page_size,
            hybrid: false,
            pages: KvPool::new(
                Store::Plain {
                    pages: PageAllocator::new(pages),
                    slots: PageAllocator::new(0),
                    grown: Vec::new(),
                },
                None,
            ),
            a2a_on_fabric: false,
        })
    }

    /// [`core`] with its steps read from a measured profile (`pools.step_times` CSV text), so
    /// a test can derive step times by hand.
    pub fn core_measured(pages: u32, page_size: u32, csv: &str) -> Core {
        let mut c = core(pages, page_size);
        c.step = StepTimes::Measured(
            crate::compute::profile::parse_profile(std::path::Path::new("hand.csv"), csv)
                .expect("a valid profile"),
        );
        c
    }

    /// The simulation a component's test plays: a queue, a request table, a wake set and the
    /// effects pushed.
    #[derive(Default)]
    pub struct Sim {
        pub q: EventQueue<Event>,
        pub reqs: Requests,
        pub wake: Vec<Wake>,
        pub fx: Vec<super::Effect>,
    }

    impl Sim {
        /// The context a component is handed (seed 7).
        pub fn ctx(&mut self) -> Ctx<'_> {
            Ctx {
                q: &mut self.q,
                reqs: &mut self.reqs,
                wake: &mut self.wake,
                fx: &mut self.fx,
                seed: 7,
            }
        }
    }

    /// A request of `input` prompt and `output` generated tokens, just routed to P0/D0.
    pub fn request(reqs: &mut Requests, id: u64, input: u32, output: u32) -> ReqRef {
        reqs.insert(Req::routed(
            id,
            input,
            output,
            (PrefillId(0), DecodeId(0)),
            Vec::new(),
            RequestRow::arrived(id, 0, Some((0, 1)), input, output),
        ))
    }
}
