//! The simulation: [`World`] owns the sglang components, the fabric, the request table and the
//! event queue, and runs sglang's request lifecycle (`docs/sglang-pd.md` §2–§3) to the end.
//!
//! The shared vocabulary every component speaks — typed ids, the closed `Event` set, the
//! request table — is `crate::vocab`, below every component. `World` (this file and the
//! `impl World` blocks in `lifecycle`, `transfer`, `faults`, `abort`, `sessions` and `sampler`)
//! sits above the components and is the only place where one component's outcome reaches
//! another: a component never calls another component. It holds no sglang rule: it routes
//! each event to its component, hands it a `crate::sglang::Ctx` (`ctx!`), a component's own
//! context (`transfer_cx!` for the transfer workers, `store_cx!` for the Mooncake Store,
//! `watchers!` for a decode's coalesced steps) or the part it needs, and applies the typed
//! outcome it returns (a crash's failures and flows, a rejection, what the handshake hands on:
//! `handshake!`, `World::hand_on`) or the effects it pushed, in their order, right after the
//! call (`effects!`, `transfer!`, `store!`, `World::apply_effects`); handlers mark a `Wake`
//! set that `World` drains after every event, in ascending order. At most 35 methods and
//! 2,000 non-test lines (`tests/structure`). What only watches is an observer in `crate::metrics` that
//! `World` tells what happened: the aborts' costs (`metrics::aborts::Aborts`), the sessions'
//! turns (`metrics::sessions::TurnStats`), the per-second sampler (`metrics::sampler`). The
//! cluster it runs is built by `crate::assemble`.
//!
//! A decode step is one event for its whole batch: per-token figures derive from step times,
//! never from a loop over tokens.
//!
//! **Coalesced decode runs.** A decode instance whose batch cannot change — nobody waits to
//! join, nobody finishes before the run's last step, its free pages cover every step's growth —
//! plans its next steps at once ([`DecodeServer`]'s `plan_run`) and schedules one event, at the
//! run's end. The steps before it are *materialized* by the decode (`DecodeServer::catch_up`:
//! each does exactly what its own event would have done, at its own end time, and tells the
//! collector and the sampler what that event would have told them) when their time is reached
//! by something that reads or changes that instance (`DecodeServer::touch`): a request routed to it or landing on it or ending, its prealloc
//! queue, the per-second tick, a fault, the end of the run. A landing, a request's end, a fault,
//! or an admission that leaves too few pages also *cuts* the run: its event moves to the
//! running step's end. Tie rule, deterministic: a materialized step end at time `t` is handled
//! before the event at `t` that asked for it; a run's own event keeps the sequence number it got
//! when the run was planned. Results are byte-identical to stepping one event per step (the
//! golden files, and `coalesce_tests` against every `DecodeServer::set_coalescing(false)`);
//! only `sim.events` falls. Not coalesced: decodes watched by the ownership oracle and steps
//! that put DeepEP all-to-all bytes on the fabric.

/// The [`crate::sglang::Ctx`] of `World` `$w` for one component call: its queue, request
/// table, wake set and effects buffer (disjoint fields, so a component of `$w` may be
/// borrowed beside it).
macro_rules! ctx {
    ($w:expr) => {
        crate::sglang::Ctx {
            q: &mut $w.q,
            reqs: &mut $w.reqs,
            wake: &mut $w.wake,
            fx: &mut $w.scratch.fx,
            seed: $w.sc.seed,
        }
    };
}

/// Runs `$call`, a component call that may push effects (most push none), then applies what
/// it pushed (`World::apply_effects`).
macro_rules! effects {
    ($w:expr, $call:expr) => {{
        let base = $w.scratch.fx.len();
        $call;
        if $w.scratch.fx.len() > base {
            $w.apply_effects(base);
        }
    }};
}

/// The [`crate::sglang::transfer::TransferCtx`] of `World` `$w` for one call of its transfer
/// workers: the queue, the request table, the fabric and its timer, decode memory, the
/// transfer figures and the effects buffer `World` applies after the call
/// (`World::apply_effects`).
macro_rules! transfer_cx {
    ($w:expr) => {
        crate::sglang::transfer::TransferCtx {
            q: &mut $w.q,
            reqs: &mut $w.reqs,
            fabric: &mut $w.fabric,
            timer: &mut $w.fabric_timer,
            memories: &mut $w.decodes,
            bandwidth: &mut $w.collector.bandwidth,
            retransmitted_bytes: &mut $w.collector.retransmitted_bytes,
            fx: &mut $w.scratch.fx,
        }
    };
}

/// The [`crate::sglang::decode::Watchers`] of `World` `$w`: the observers a decode's
/// materialized steps tell (its collector and sampler).
macro_rules! watchers {
    ($w:expr) => {
        crate::sglang::decode::Watchers {
            collector: &mut $w.collector,
            sampler: &mut $w.sampler,
        }
    };
}

/// Calls `$method` of `World` `$w`'s transfer workers with `$args` and their context
/// (`transfer_cx!`), then applies the effects the call pushed (`World::apply_effects`; most
/// calls push none).
macro_rules! transfer {
    ($w:expr, $method:ident($($arg:expr),* $(,)?)) => {{
        let base = $w.scratch.fx.len();
        $w.transfer.$method($($arg,)* &mut transfer_cx!($w));
        if $w.scratch.fx.len() > base {
            $w.apply_effects(base);
        }
    }};
}

/// The [`crate::sglang::mooncake_store::StoreCtx`] of `World` `$w` for one call of its
/// Mooncake Store: the queue, the fabric and its timer, the request table and the effects
/// buffer `World` applies after the call (`World::apply_effects`).
macro_rules! store_cx {
    ($w:expr) => {
        crate::sglang::mooncake_store::StoreCtx {
            q: &mut $w.q,
            fabric: &mut $w.fabric,
            timer: &mut $w.fabric_timer,
            reqs: &mut $w.reqs,
            fx: &mut $w.scratch.fx,
        }
    };
}

/// Calls `$method` of `World` `$w`'s Mooncake Store with `$args` and its context
/// (`store_cx!`), then applies the effects the call pushed (`World::apply_effects`).
macro_rules! store {
    ($w:expr, $method:ident($($arg:expr),* $(,)?)) => {{
        let base = $w.scratch.fx.len();
        $w.store.$method($($arg,)* &mut store_cx!($w));
        if $w.scratch.fx.len() > base {
            $w.apply_effects(base);
        }
    }};
}

/// Calls `$method` of `World` `$w`'s handshake (`sglang::bootstrap::Handshake`) with `$args`
/// and the context (`ctx!`), then applies what it hands on (`World::hand_on`).
macro_rules! handshake {
    ($w:expr, $method:ident($($arg:expr),* $(,)?)) => {{
        let h = $w.handshake.$method($($arg,)* &mut ctx!($w));
        $w.hand_on(h);
    }};
}

/// The `(alive, outstanding)` of each server on `$side` of the router as a closure over
/// `World` `$w`'s server tables (`dispatch::server_state`), for `sglang::dp::Dispatch`.
macro_rules! served {
    ($w:expr, $side:expr) => {
        |i| crate::sim::dispatch::server_state(&$w.prefills, &$w.decodes, &$w.colocated, $side, i)
    };
}

mod abort;
mod dispatch;
mod faults;
mod lifecycle;
mod sampler;
mod scaling;
mod sessions;
mod transfer;

#[cfg(test)]
mod coalesce_tests;
#[cfg(test)]
mod result_tests;
#[cfg(test)]
mod store_tests;

use crate::config::Scenario;
use crate::engine::{EventQueue, Nanos};
use crate::vocab::flow::FlowTag;

/// The fabric as the simulator runs it: each flow tagged with its owner ([`FlowTag`]), by
/// which an ended flow is routed back to it.
pub(crate) type Fabric = crate::fabric::Fabric<FlowTag>;
/// A flow's end as the simulator receives it.
pub(crate) type FlowEnd = crate::fabric::FlowEnd<FlowTag>;
use crate::metrics::summary::{RunTotals, Summary};
use crate::metrics::{Collector, Sink};
use crate::sglang::colocated::ColocatedServer;
use crate::sglang::decode::DecodeServer;
use crate::sglang::heartbeat::Heartbeat;
use crate::sglang::prefill::PrefillServer;
use crate::sglang::router::Router;
use crate::sglang::tokenizer::Tokenizers;
use crate::sglang::transfer::TransferWorkers;
use crate::vocab::Outcome;
use crate::workload::Generator;

use crate::vocab::event::{Event, Wake};
use crate::vocab::ids::{ColocatedId, DecodeId, IdVec, InstanceId, PrefillId};
use crate::vocab::requests::{ChunkJob, ReqRef, Requests};

use crate::sglang::transfer::PollTimeout;
pub use crate::vocab::requests::KvPoll;

/// What a run produced: the run loop's counts and the one summary built from them
/// ([`World::run`]).
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The run loop's counts.
    pub stats: RunTotals,
    /// `summary.json`, every optional section included.
    pub summary: Summary,
    /// KV pages of each instance, in result order (for `run.json`).
    pub kv_pages: Vec<u32>,
    /// Ops the kernel tables did not cover, priced otherwise, as `"<pool>: <op …>"` (for
    /// `run.json` and the report's setup line): read from the step models the run used, not
    /// composed again.
    pub step_time_fallbacks: Vec<String>,
}

/// Scratch buffers reused by every event, so handlers do not allocate.
#[derive(Default)]
struct Scratch {
    jobs: Vec<ChunkJob>,
    refs: Vec<ReqRef>,
    ends: Vec<FlowEnd>,
    /// The effects a component call pushes, and those still to apply (`World::apply_effects`).
    fx: Vec<crate::sglang::Effect>,
}

/// The whole simulated cluster.
pub struct World<'a> {
    sc: &'a Scenario,
    /// `[slo]`'s per-request thresholds, which every written row is judged by.
    slo: crate::config::Thresholds,
    q: EventQueue<Event>,
    fabric: Fabric,
    prefills: IdVec<PrefillId, PrefillServer>,
    /// Every prefill's transfer workers (`sglang::transfer`), with the decodes' endpoints and
    /// the compiled plan of every (prefill, decode) pair.
    transfer: TransferWorkers,
    decodes: IdVec<DecodeId, DecodeServer>,
    /// Plain sglang servers (a colocated scenario has only these).
    colocated: IdVec<ColocatedId, ColocatedServer>,
    /// Nodes the cluster spans.
    nodes: u32,
    router: Router,
    /// The sessions' observer: per turn index, the session turns' sums (`sim::sessions`
    /// feeds it every written row).
    turn_stats: crate::metrics::sessions::TurnStats,
    source: Generator,
    /// The head of the arrival stream (`workload::feed`).
    feed: crate::workload::feed::Feed,
    reqs: Requests,
    /// Aggregates; read by the report after the run.
    pub collector: Collector,
    sink: &'a mut dyn Sink,
    /// The one pending `FabricDue` event and when it fires.
    fabric_timer: crate::sglang::FabricTimer,
    /// Instances that may admit work, drained after every event (sorted and deduplicated
    /// there: a handful per event, so a `Vec` beats a set).
    wake: Vec<Wake>,
    /// The decodes' heartbeat to the prefills (`sglang::heartbeat`).
    heartbeat: Heartbeat,
    sampler: crate::metrics::sampler::Sampler,
    scratch: Scratch,
    /// Each instance's tokenizer manager, by global instance number (`sglang::tokenizer`).
    tokenizers: Tokenizers,
    /// The PD handshake of each request between its two servers (`sglang::bootstrap`; called
    /// through `handshake!`).
    handshake: crate::sglang::bootstrap::Handshake,
    /// The first I/O error writing a row; the run stops at the end of the event that met it.
    io_error: Option<std::io::Error>,
    /// DeepEP all-to-all on the fabric (`sglang::a2a`; `transfer.rs` routes to it).
    a2a: crate::sglang::a2a::A2aFlows,
    /// The shared Mooncake Store (`[kv_store]`) and its clients' reads and writes on the
    /// fabric (`sglang::mooncake_store`; called through `store!`).
    store: crate::sglang::mooncake_store::MooncakeStore,
    /// Instances and their DP controllers (`sglang::dp::Dispatch`; `dispatch.rs` reads the
    /// servers for it).
    dispatch: crate::sglang::dp::Dispatch,
    /// Client disconnects and aborts, when the scenario models them: the observer
    /// (`metrics::aborts`) that `abort.rs` tells what sglang's rules (`sglang::abort`) decided.
    aborts: Option<Box<crate::metrics::aborts::Aborts>>,
    /// The pools that change size, their policy and what it sees (`sim::scaling`), when a
    /// policy resizes them.
    scaling: Option<Box<crate::autoscale::controller::Controller>>,
}

impl<'a> World<'a> {
    /// Builds the cluster of `sc`; rows stream to `sink`.
    pub fn new(sc: &'a Scenario, sink: &'a mut dyn Sink) -> Self {
        let crate::assemble::Cluster {
            fabric,
            mut prefills,
            transfer,
            mut decodes,
            colocated,
            instances: global,
            a2a,
        } = crate::assemble::assemble(sc);
        let prefills_len = prefills.len();
        let sampler = crate::metrics::sampler::Sampler::new(&fabric, global as usize);
        let dispatch = crate::sglang::dp::Dispatch::new(sc);
        let store = crate::sglang::mooncake_store::MooncakeStore::new(
            sc.kv_store
                .as_ref()
                .map(|k| crate::sglang::kv_store::KvStore::new(k.capacity_tokens, k.evict)),
            sc.kv_store
                .as_ref()
                .map_or_else(Vec::new, |k| k.nodes.clone()),
            prefills.iter().map(PrefillServer::store_client).collect(),
            decodes.iter().map(DecodeServer::store_client).collect(),
        );
        let scaling = (sc.lifecycle.as_ref())
            .map(|lc| scaling::controller(sc, lc, &mut prefills, &mut decodes));
        let mut router = dispatch.router(sc, !colocated.is_empty());
        // The slots not serving at the start are out of the router's set.
        for (i, p) in prefills.iter().enumerate() {
            if !p.core.member() {
                router.set_prefill(i, None);
            }
        }
        for (i, d) in decodes.iter().enumerate() {
            if !d.core.member() {
                router.set_decode(i, None);
            }
        }
        Self {
            sc,
            slo: sc.slo.thresholds(),
            q: EventQueue::new(),
            router,
            turn_stats: Default::default(),
            fabric,
            prefills,
            transfer,
            decodes,
            colocated,
            nodes: sc.placement.nodes,
            source: Generator::new(&sc.workload, sc.seed),
            feed: Default::default(),
            reqs: Requests::default(),
            collector: Collector::for_window(sc.duration_ns),
            sink,
            fabric_timer: crate::sglang::FabricTimer::default(),
            wake: Vec::new(),
            heartbeat: Heartbeat::new(prefills_len),
            sampler,
            scratch: Scratch::default(),
            tokenizers: Tokenizers::new(global as usize),
            handshake: crate::sglang::bootstrap::Handshake::new(sc),
            io_error: None,
            a2a,
            store,
            dispatch,
            aborts: sc
                .aborts
                .map(|a| Box::new(crate::metrics::aborts::Aborts::new(a, sc.seed))),
            scaling,
        }
    }

    /// Requests in flight, on every kind of server.
    fn live(&self) -> u64 {
        self.reqs.live()
            + self
                .colocated
                .iter()
                .map(|c| u64::from(c.live()))
                .sum::<u64>()
    }

    /// Runs to the end: arrivals stop at `duration`, then in-flight requests drain until
    /// `duration + drain_timeout`; what remains is `unfinished`.
    pub fn run(&mut self) -> std::io::Result<RunResult> {
        self.run_with_progress(&mut |_, _, _| {})
    }

    /// The run's summary with every section the scenario asked for: built here once, so a
    /// run, a sweep row, a plan, the capacity diagnosis and Python read the same one.
    #[cold]
    fn summary(&mut self, stats: &RunTotals) -> Summary {
        let now = self.q.now();
        // Prefix-cache figures of every prefill instance that has a cache.
        let pool = |p: &PrefillServer| self.sc.pools[p.core.pool.idx()].name.clone();
        let caches = (self.prefills.iter())
            .filter_map(|p| p.cache_stats(pool(p)))
            .collect();
        // The router's `cache_aware` decisions, `[prefill or colocated side, decode side]`;
        // a plain cluster's decode side is a placeholder.
        let mut decisions = self.router.decisions();
        if !self.colocated.is_empty() {
            decisions[1] = None;
        }
        Summary::new(&self.collector, self.sc, stats, caches)
            .with_router(decisions)
            .with_kv_store(self.sc.kv_store.as_ref().and_then(|k| {
                let host =
                    crate::sglang::decode::summary::offload_host_figures(self.decodes.iter());
                self.store.summary(now, k.capacity_tokens, host)
            }))
            .with_decode_prefix(crate::sglang::decode::summary::radix_summary(
                self.decodes.iter(),
            ))
            .with_speculative(crate::sglang::speculative::summary(
                self.sc,
                &(self.prefills.iter())
                    .filter_map(|p| Some((p.core.pool, p.spec.as_deref()?)))
                    .collect::<Vec<_>>(),
                &(self.decodes.iter())
                    .filter_map(|d| Some((d.core.pool, d.spec.as_deref()?)))
                    .collect::<Vec<_>>(),
            ))
            .with_aborts(self.aborts.as_deref().map(|a| a.summary(now)))
            .with_sessions(self.turn_stats.summary_of(self.source.sessions.as_mut()))
            .with_autoscaling((self.scaling.as_deref()).map(|c| {
                c.summary(
                    self.sc.autoscaler.name(),
                    self.sc.usd_per_gpu_hour,
                    stats.end_ns,
                )
            }))
    }

    /// [`World::run`], calling `progress(simulated ns, events, arrivals)` every 65,536 events (the CLI
    /// draws a progress bar with it; the simulation itself never looks at the clock).
    pub fn run_with_progress(
        &mut self,
        progress: &mut dyn FnMut(Nanos, u64, u64),
    ) -> std::io::Result<RunResult> {
        self.q.schedule_at(0, Event::Tick);
        if self.scaling.is_some() {
            self.q.schedule_at(0, Event::ScaleTick);
        }
        for (index, f) in self.sc.faults.iter().enumerate() {
            self.q.schedule_at(f.at_ns, Event::Fault { index });
        }
        let limits = (self.sc.max_requests, self.sc.duration_ns);
        let end = &mut self.collector.window_end_ns;
        (self.feed).schedule_next(&mut self.source, &mut self.q, limits, end);
        let hard_stop = self.sc.duration_ns.saturating_add(self.sc.drain_timeout_ns);
        let mut cut = false;
        while let Some(t) = self.q.peek_time() {
            // The run ends when every request has, and every store operation has landed: a
            // decode's offload of a request's last blocks outlives the request.
            if self.feed.done()
                && self.live() == 0
                && self.store.idle()
                && self.source.no_turn_due()
            {
                break;
            }
            if t > hard_stop {
                // Cut with requests still to come or in flight (not only store writes).
                cut = !(self.feed.done() && self.live() == 0 && self.source.no_turn_due());
                // The coalesced steps the cut run had reached are run as their events would be.
                let (reqs, w) = (&mut self.reqs, watchers!(self));
                let last = self.decodes.catch_up_all(hard_stop, reqs, w);
                // A run cut there ends at the latest step end materialized, when that is past
                // the last event.
                self.q.advance_to(last);
                break;
            }
            let (_, ev) = self.q.pop().expect("peeked");
            self.handle(ev)?;
            // Early stop (only with `collector.slo_watch`, which `pdsim plan` installs):
            // `[slo]` is lost whatever the rest of the run does; what is in flight ends
            // unfinished below, as at the drain timeout.
            if self.collector.slo_lost() {
                break;
            }
            if self.q.events_popped() & 0xFFFF == 0 {
                progress(t, self.q.events_popped(), self.collector.counts.arrived);
            }
        }
        if let Some(e) = self.source.error() {
            // The trace was valid when the scenario was loaded; reading it again failed.
            return Err(std::io::Error::other(format!(
                "the trace could not be read again during the run: {e}"
            )));
        }
        let end = self.q.now();
        // Whatever is still in flight ends as unfinished, in id order.
        for r in self.reqs.matching(|_| true) {
            let req = self.reqs.take(r).expect("listed as live");
            let mut row = req.row;
            row.outcome = Outcome::Unfinished;
            self.collector.finish(&row, None, self.slo, self.sink)?;
            self.turn_ended(&row);
        }
        let mut rows = Vec::new();
        for c in self.colocated.iter_mut() {
            rows.extend(c.drain());
        }
        for mut row in rows {
            row.outcome = Outcome::Unfinished;
            row.finish_ns = None;
            self.collector.finish(&row, None, self.slo, self.sink)?;
            self.turn_ended(&row);
        }
        let pools = self.pool_gauges();
        assert_eq!(
            self.collector.held_back(),
            0,
            "request rows left unwritten (seed {})",
            self.sc.seed
        );
        let stats = RunTotals {
            events: self.q.events_popped(),
            end_ns: end,
            cut,
            pools,
            nodes: self.nodes,
            a2a: self.a2a.summary(self.sc),
        };
        let summary = self.summary(&stats);
        let cores = || {
            let p = self.prefills.iter().map(|p| &p.core);
            p.chain(self.decodes.iter().map(|d| &d.core))
                .chain(self.colocated.iter().map(|c| &c.core))
        };
        // Every server of a pool runs its pool's one step model: the first one's says it.
        let step_time_fallbacks = (self.sc.pools.iter().enumerate())
            .filter(|(_, pool)| pool.step_times.is_none())
            .flat_map(|(i, pool)| {
                let core = cores().find(|c| c.pool.idx() == i);
                let lacking = core.map_or(&[][..], |c| c.step.kernel_fallbacks());
                lacking.iter().map(|f| format!("{}: {f}", pool.name))
            })
            .collect();
        Ok(RunResult {
            stats,
            summary,
            kv_pages: cores().map(|c| c.pages.total()).collect(),
            step_time_fallbacks,
        })
    }

    fn handle(&mut self, ev: Event) -> std::io::Result<()> {
        match ev {
            Event::Arrival => self.on_arrival(),
            Event::TurnDue { session } => self.on_turn_due(session),
            Event::MetadataArrived { req } => handshake!(self, page_ids_arrived(req)),
            Event::Bootstrapped { req } => handshake!(self, handshaken(req)),
            Event::Tokenized { colocated } => self.wake.push(Wake::Colocated(colocated)),
            Event::PrefillStepDone { prefill } => self.on_prefill_step_done(prefill),
            Event::PrefillStageFree { prefill: p } => self.prefills[p].opened(p, &mut self.wake),
            Event::FabricDue => self.on_fabric_due(),
            Event::Fault { index } => {
                // Faults read and change instances and links beyond any one request.
                (self.decodes).touch_all(&mut self.q, &mut self.reqs, watchers!(self));
                self.on_fault(index)
            }
            Event::EmptyChunkSent { prefill, shard } => {
                transfer!(self, empty_batch_returned(prefill, shard))
            }
            Event::Restart { instance } => {
                (self.decodes).touch_all(&mut self.q, &mut self.reqs, watchers!(self));
                self.on_restart(instance)
            }
            Event::HeartbeatLost { prefill } => {
                (self.decodes).touch_all(&mut self.q, &mut self.reqs, watchers!(self));
                // `_handle_node_failure` on the decodes: the rooms fail (`sglang::heartbeat`).
                effects!(self, self.heartbeat.lost(prefill, &mut ctx!(self)));
            }
            Event::RouterHealthCheck => {
                (self.decodes).touch_all(&mut self.q, &mut self.reqs, watchers!(self));
                self.router.on_health_check(&mut self.q)
            }
            Event::TransferSucceeded { req } => {
                let mut h = self.handshake.transferred(req, &mut ctx!(self));
                // `--disaggregation-enable-kv-checksum`: decode's verdict before batching
                // (`sglang::checksum`, out of line); without the flag one test of a bool.
                if self.sc.sglang.kv_checksum {
                    let (t, d, reqs) = (&self.transfer, &mut self.decodes, &mut self.reqs);
                    h = crate::sglang::checksum::verdict(h, t, d, reqs, self.sc.seed);
                }
                self.hand_on(h);
            }
            Event::DecodeStepDone { decode } => self.on_decode_step_done(decode),
            Event::ColocatedStepDone { colocated } => self.on_colocated_step_done(colocated),
            Event::WaitingTimeout { req } => handshake!(self, timed_out(req, PollTimeout::Waiting)),
            Event::BootstrapTimeout { req } => {
                handshake!(self, timed_out(req, PollTimeout::Bootstrap))
            }
            Event::StoreCopied { op, part } => store!(self, copied(op, part)),
            Event::ClientDisconnected { req, detected } => {
                self.on_client_disconnected(req, detected)
            }
            Event::Tick => self.on_tick()?,
            Event::ScaleTick => self.on_scale_tick(),
            // Joining the router's set changes nothing a decode's coalesced run reads.
            Event::InstanceReady { instance } => self.on_instance_ready(instance),
        }
        self.drain_wakes();
        match self.io_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Lets every instance that a handler marked admit work, in ascending order.
    fn drain_wakes(&mut self) {
        // Most events mark nothing.
        if self.wake.is_empty() {
            return;
        }
        let mut wake = std::mem::take(&mut self.wake);
        while !wake.is_empty() {
            wake.sort_unstable();
            wake.dedup();
            for &w in &wake {
                match w {
                    Wake::Prefill(p) => self.schedule_prefill(p),
                    Wake::Decode(d) => self.try_prealloc(d),
                    // An idle server steps; the sampler observes it, as after its every event.
                    Wake::Colocated(c) => {
                        self.colocated[c].try_step(c, &mut self.q);
                        self.observe(sampler::CoreRef::Colocated(c));
                    }
                }
            }
            // Admitting work ends no request, so this is empty; if that ever changes, the new
            // marks are drained too.
            wake.clear();
            std::mem::swap(&mut wake, &mut self.wake);
        }
        // Both lists are empty here: keep the one with an allocation, so the next mark does
        // not allocate again.
        if wake.capacity() > self.wake.capacity() {
            self.wake = wake;
        }
    }

    /// The server behind a global instance number: in a colocated cluster its colocated
    /// server, else the prefill or the decode one (prefills are numbered first).
    fn core_of(&self, i: InstanceId) -> sampler::CoreRef {
        if !self.colocated.is_empty() {
            return sampler::CoreRef::Colocated(ColocatedId(i.0));
        }
        let n = self.prefills.len() as u32;
        if i.0 < n {
            sampler::CoreRef::Prefill(PrefillId(i.0))
        } else {
            sampler::CoreRef::Decode(DecodeId(i.0 - n))
        }
    }
}
