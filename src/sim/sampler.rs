//! The simulator's side of the per-second sampler (`metrics::sampler::Sampler`, an observer):
//! what each instance shows it — its gauge state at step ends and ticks, its row at each
//! second's end — read from the servers here, where the three server tables are at hand.

use crate::config::Role;
use crate::engine::{NS_PER_S, Nanos};
use crate::metrics::gauges::State;
use crate::metrics::sampler::InstanceSecond;
use crate::metrics::summary::PoolGauges;
use crate::sglang::Core;
use crate::sglang::colocated::ColocatedServer;
use crate::sglang::decode::DecodeServer;
use crate::sglang::prefill::PrefillServer;

use crate::vocab::ids::{ColocatedId, DecodeId, IdVec, PrefillId};

use super::World;
use crate::vocab::event::Event;

/// What the gauges see of `core` with `running` requests in its batch and `queued` waiting.
#[inline]
fn gauge_state(core: &Core, running: u32, queued: u32) -> State {
    State {
        running,
        queued,
        used: core.pages.used(),
        total: core.pages.total(),
    }
}

impl World<'_> {
    /// Integrates instance `core_of`'s gauges up to now and takes its current state.
    pub(super) fn observe(&mut self, core_of: CoreRef) {
        let now = self.q.now();
        let (core, _, running, queued) = state_of(
            &mut self.prefills,
            &mut self.decodes,
            &mut self.colocated,
            core_of,
        );
        let i = core.instance.idx();
        let state = gauge_state(core, running, queued);
        let end = self.collector.window_end_ns.unwrap_or(Nanos::MAX);
        self.sampler.observe(i, now, end, state);
    }

    /// The time integrals of every pool over the arrival window, for `summary.json` (observes
    /// every instance first). Busy time and NIC bytes are counted per simulated second (the
    /// ticks), the gauges at every step.
    #[cold]
    pub(crate) fn pool_gauges(&mut self) -> Vec<PoolGauges> {
        let now = self.q.now();
        (self.decodes).catch_up_all(now, &mut self.reqs, watchers!(self));
        let end = self.collector.window_end_ns.unwrap_or(Nanos::MAX);
        let mut out: Vec<PoolGauges> = self.sc.pools.iter().map(PoolGauges::of_pool).collect();
        for c in all_cores(self) {
            self.observe(c);
            let (core, _, _, _) = state_of(
                &mut self.prefills,
                &mut self.decodes,
                &mut self.colocated,
                c,
            );
            // The open second counts when the window is still open (a run cut short).
            let busy_tick = if now <= end {
                core.busy_in_open_second(now)
            } else {
                0.0
            };
            let (i, pool) = (core.instance.idx(), core.pool.idx());
            let nics = core.nics.len();
            let o = &mut out[pool];
            self.sampler.add_to(i, o, busy_tick);
            o.nic_bytes_per_ns += self.sc.fabric.topology.nic_bytes_per_ns * nics as f64;
        }
        for dec in self.decodes.iter() {
            let o = &mut out[dec.core.pool.idx()];
            o.prealloc_stops[0] += dec.prealloc_stops[0];
            o.prealloc_stops[1] += dec.prealloc_stops[1];
        }
        // Colocated servers move no KV: their NICs carry nothing worth a utilisation.
        for o in &mut out {
            if o.role == Some(Role::Colocated) {
                o.nic_bytes_per_ns = 0.0;
            }
        }
        out
    }

    pub(super) fn on_tick(&mut self) -> std::io::Result<()> {
        let now = self.q.now();
        // The second's rows read every decode's counters: its coalesced steps up to now first.
        (self.decodes).catch_up_all(now, &mut self.reqs, watchers!(self));
        if now > 0 {
            self.fabric.settle_all(now);
            let in_window = now <= self.collector.window_end_ns.unwrap_or(Nanos::MAX);
            let nic_bytes_per_s = self.sc.fabric.topology.nic_bytes_per_ns * NS_PER_S as f64;
            // Each instance's row of the second ending now; its counters reset.
            // A resizing run's extra columns, by global instance.
            let fleet: Vec<crate::metrics::FleetColumns> = (self.scaling.as_deref())
                .map(|s| {
                    let [p, d] = s.fleet.serving();
                    (0..self.prefills.len() + self.decodes.len())
                        .map(|i| {
                            let (role, slot) = s.fleet.slot_of(i as u32);
                            crate::metrics::FleetColumns {
                                state: s.fleet.phase(role, slot).name(),
                                prefill_instances: p,
                                decode_instances: d,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            for c in all_cores(self) {
                self.observe(c);
                let (core, role, running, queued) = state_of(
                    &mut self.prefills,
                    &mut self.decodes,
                    &mut self.colocated,
                    c,
                );
                let tick = core.close_second(now);
                let nic_bytes = core
                    .nics
                    .iter()
                    .map(|&n| {
                        let (tx, rx) = self.fabric.nic_bytes(n);
                        if role == Role::Prefill { tx } else { rx }
                    })
                    .sum();
                let second = InstanceSecond {
                    instance: core.instance.0,
                    pool: &self.sc.pools[core.pool.idx()].name,
                    role,
                    running,
                    queued,
                    pages_used: core.pages.used(),
                    pages_total: core.pages.total(),
                    arrivals: tick.arrivals,
                    tokens: tick.tokens,
                    busy_ns: tick.busy_ns,
                    nic_bytes,
                    nic_bytes_per_s: nic_bytes_per_s * core.nics.len() as f64,
                    fleet: fleet.get(core.instance.idx()).copied(),
                };
                (self.sampler).instance_second(&second, in_window, self.sink)?;
            }
            self.sampler.link_rows(&self.fabric, self.sink)?;
        }
        self.sampler.next_second();
        if !(self.feed.done() && self.live() == 0) {
            self.q.schedule_in(NS_PER_S, Event::Tick);
        }
        Ok(())
    }
}

/// Every instance, in result order.
fn all_cores(w: &World<'_>) -> Vec<CoreRef> {
    w.prefills
        .ids()
        .map(CoreRef::Prefill)
        .chain(w.decodes.ids().map(CoreRef::Decode))
        .chain(w.colocated.ids().map(CoreRef::Colocated))
        .collect()
}

/// An instance's core, role, running batch and queue (a free function over the three server
/// tables, so the caller keeps the rest of `World` free to borrow).
pub(super) fn state_of<'w>(
    prefills: &'w mut IdVec<PrefillId, PrefillServer>,
    decodes: &'w mut IdVec<DecodeId, DecodeServer>,
    colocated: &'w mut IdVec<ColocatedId, ColocatedServer>,
    core_of: CoreRef,
) -> (&'w mut Core, Role, u32, u32) {
    match core_of {
        CoreRef::Prefill(p) => {
            let s = &mut prefills[p];
            let (running, queued) = (s.running(), s.queued());
            (&mut s.core, Role::Prefill, running, queued)
        }
        CoreRef::Decode(d) => {
            let s = &mut decodes[d];
            let (running, queued) = (s.running(), s.queued());
            (&mut s.core, Role::Decode, running, queued)
        }
        CoreRef::Colocated(c) => {
            let s = &mut colocated[c];
            let (running, queued) = (s.running(), s.queued());
            (&mut s.core, Role::Colocated, running, queued)
        }
    }
}

/// An instance of any role, for the sampler's walk in result order.
#[derive(Clone, Copy)]
pub(super) enum CoreRef {
    Prefill(PrefillId),
    Decode(DecodeId),
    Colocated(ColocatedId),
}
