//! The per-second sampler: one `timeseries.csv` row per instance and one `links.csv` row per
//! link that carried bytes or is not healthy, every simulated second.

use super::Fabric;
use crate::config::Role;
use crate::engine::{NS_PER_S, Nanos};
use crate::fabric::Link;
use crate::metrics::{LinkRow, TimeseriesRow};
use crate::sglang::Core;
use crate::sglang::colocated::ColocatedServer;
use crate::sglang::decode::DecodeServer;
use crate::sglang::prefill::PrefillServer;

use crate::vocab::ids::{ColocatedId, DecodeId, IdVec, PrefillId};

use super::World;
use crate::vocab::event::Event;

/// What the sampler remembers between seconds.
pub(super) struct Sampler {
    /// Seconds sampled so far.
    seconds: u64,
    /// Bytes each instance's NICs had moved (in its direction) at the last sample.
    last_instance_bytes: Vec<f64>,
    /// Every link of the fabric, in the fabric's order.
    links: Vec<Link>,
    /// Each link's bytes and retransmitted bytes at the last sample.
    last_link: Vec<(f64, f64)>,
    /// Capacity of each link before any fault, bytes/ns.
    link_healthy: Vec<f64>,
    /// The fabric's sizes, for link names.
    bounds: crate::fabric::NameBounds,
    /// Time integrals of each instance's gauges (`summary.json` `pools`).
    gauges: Vec<Gauge>,
}

/// One instance's gauges, integrated over time by the left-point rule: the state seen at an
/// observation holds until the next one. Observations come at every step end of the instance
/// (its batch changes only there or when an idle instance starts a step, also observed) and at
/// every tick, so the error is at most one step of one instance.
#[derive(Clone, Copy, Default)]
struct Gauge {
    last_ns: Nanos,
    running: u32,
    queued: u32,
    kv_share: f64,
    running_ns: f64,
    queued_ns: f64,
    kv_ns: f64,
    queue_nonempty_ns: f64,
    /// Busy time of the ticks already closed, ns.
    busy_ns: f64,
    /// Bytes the NICs moved in the instance's direction in the ticks already closed.
    nic_bytes: f64,
}

impl Gauge {
    /// Integrates the state last seen up to `now` (clipped to the arrival window's `end`: the
    /// summary's utilisation, like its throughput, describes the steady state, not the drain
    /// tail where load falls to 0), then takes the state now.
    #[inline]
    fn observe(&mut self, now: Nanos, end: Nanos, running: u32, queued: u32, kv_share: f64) {
        let dt = crate::engine::u64_to_f64(now.min(end).max(self.last_ns) - self.last_ns);
        self.integrate(dt, now, running, queued, kv_share);
    }

    /// [`Gauge::observe`] at `now` at or before the window's end: the same operations, without
    /// the clip.
    #[inline]
    fn observe_open(&mut self, now: Nanos, running: u32, queued: u32, kv_share: f64) {
        let dt = crate::engine::u64_to_f64(now.max(self.last_ns) - self.last_ns);
        self.integrate(dt, now, running, queued, kv_share);
    }

    /// Adds `dt` ns of the state last seen to the integrals, then takes the state at `now`.
    #[inline(always)]
    fn integrate(&mut self, dt: f64, now: Nanos, running: u32, queued: u32, kv_share: f64) {
        self.running_ns += f64::from(self.running) * dt;
        self.queued_ns += f64::from(self.queued) * dt;
        self.kv_ns += self.kv_share * dt;
        if self.queued > 0 {
            self.queue_nonempty_ns += dt;
        }
        self.last_ns = now;
        self.running = running;
        self.queued = queued;
        self.kv_share = kv_share;
    }
}

/// The share of `core`'s KV pages in use (0 for a pool of none).
#[inline]
fn kv_share(core: &Core) -> f64 {
    share(core.pages.used(), core.pages.total())
}

/// `used` of `total` pages as a share (0 for a pool of none).
#[inline]
fn share(used: u32, total: u32) -> f64 {
    if total == 0 {
        0.0
    } else {
        f64::from(used) / f64::from(total)
    }
}

impl Sampler {
    pub(super) fn new(fabric: &Fabric, instances: usize) -> Self {
        let links: Vec<Link> = fabric.links().collect();
        Self {
            seconds: 0,
            last_instance_bytes: vec![0.0; instances],
            last_link: vec![(0.0, 0.0); links.len()],
            link_healthy: links.iter().map(|&l| fabric.link_capacity(l)).collect(),
            links,
            gauges: vec![Gauge::default(); instances],
            bounds: crate::fabric::NameBounds::of(fabric.topology()),
        }
    }
}

impl World<'_> {
    /// One `links.csv` row per link that carried bytes this second or is not healthy. A sink
    /// that drops link rows gets none built (the last sample only serves the rows).
    fn link_rows(&mut self) -> std::io::Result<()> {
        if !self.sink.wants_rows() {
            return Ok(());
        }
        let s = &mut self.sampler;
        for k in 0..s.links.len() {
            let link = s.links[k];
            let (bytes, retx) = (
                self.fabric.link_bytes(link),
                self.fabric.link_retransmitted_bytes(link),
            );
            let (b0, r0) = s.last_link[k];
            s.last_link[k] = (bytes, retx);
            let cap = self.fabric.link_capacity(link);
            let up = self.fabric.link_is_up(link);
            let healthy = s.link_healthy[k];
            if bytes - b0 <= 0.0 && up && cap >= healthy {
                continue;
            }
            self.sink.link(&LinkRow {
                second: s.seconds,
                link: crate::fabric::LinkName::of(link, &s.bounds)
                    .expect("a link of this fabric has a name")
                    .to_string(),
                capacity_gbps: if up { cap * 8.0 } else { 0.0 },
                utilisation: ((bytes - b0) / (healthy * NS_PER_S as f64)).clamp(0.0, 1.0),
                bytes: (bytes - b0).round() as u64,
                retransmitted_bytes: (retx - r0).round() as u64,
                up,
            })?;
        }
        Ok(())
    }

    /// Integrates instance `core_of`'s gauges up to now and takes its current state.
    pub(super) fn observe(&mut self, core_of: CoreRef) {
        self.observe_at(core_of, self.q.now());
    }

    /// [`World::observe`] at `now`: a coalesced decode step materialized later observes at
    /// its own end.
    pub(super) fn observe_at(&mut self, core_of: CoreRef, now: Nanos) {
        let (core, _, running, queued) = state_of(
            &mut self.prefills,
            &mut self.decodes,
            &mut self.colocated,
            core_of,
        );
        let i = core.instance.idx();
        let kv_share = kv_share(core);
        let end = self.collector.window_end_ns.unwrap_or(Nanos::MAX);
        self.sampler.gauges[i].observe(now, end, running, queued, kv_share);
    }

    /// Decode `d`'s coalesced steps that end at or before `t`, in one pass: each step as
    /// [`crate::sglang::decode::DecodeServer::virtual_step`] materializes it, its tokens
    /// counted at its end and the gauges observed there, exactly as
    /// [`World::observe_at`] would (the batch and queues cannot change inside the pass; the
    /// pages can, and are read at every step).
    #[inline(never)]
    pub(super) fn materialize_decode(&mut self, d: DecodeId, t: Nanos) {
        let end = self.collector.window_end_ns.unwrap_or(Nanos::MAX);
        let dec = &mut self.decodes[d];
        let (running, queued) = (dec.running(), dec.queued());
        let total = dec.core.pages.total();
        let i = dec.core.instance.idx();
        // A copy the pass keeps in registers.
        let mut g = self.sampler.gauges[i];
        // Step ends increase: the ones inside the arrival window come first.
        let (mut last, mut first, mut in_window) = (0, 0, 0u64);
        let itl = &mut self.collector.itl;
        if t <= end {
            // Every step end of the pass is inside the window (the common case): each is
            // counted, and `observe`'s clip to the window's end is the step end itself.
            first = dec.step_span().1;
            in_window = u64::from(dec.virtual_steps(t, &mut self.reqs, itl, |at, used| {
                g.observe_open(at, running, queued, share(used, total));
            }));
            last = if in_window > 0 { dec.step_span().0 } else { 0 };
        } else {
            dec.virtual_steps(t, &mut self.reqs, itl, |at, used| {
                if at <= end {
                    first = if in_window == 0 { at } else { first };
                    in_window += 1;
                }
                g.observe(at, end, running, queued, share(used, total));
                last = at;
            });
        }
        self.sampler.gauges[i] = g;
        // Their tokens, as each step's `tokens_generated` would have counted them.
        if in_window > 0 {
            self.collector
                .tokens_generated(first, in_window * u64::from(running));
        }
        self.materialized_ns = self.materialized_ns.max(last);
    }

    /// Every instance, in result order.
    pub(super) fn all_cores(&self) -> Vec<CoreRef> {
        self.prefills
            .ids()
            .map(CoreRef::Prefill)
            .chain(self.decodes.ids().map(CoreRef::Decode))
            .chain(self.colocated.ids().map(CoreRef::Colocated))
            .collect()
    }

    /// The time integrals of every pool over the arrival window, for `summary.json` (observes
    /// every instance first). Busy time and NIC bytes are counted per simulated second (the
    /// ticks), the gauges at every step.
    pub(crate) fn pool_gauges(&mut self) -> Vec<crate::metrics::summary::PoolGauges> {
        let now = self.q.now();
        self.catch_up_decodes(now);
        let end = self.collector.window_end_ns.unwrap_or(Nanos::MAX);
        let mut out: Vec<crate::metrics::summary::PoolGauges> = self
            .sc
            .pools
            .iter()
            .map(|p| crate::metrics::summary::PoolGauges {
                pool: p.name.clone(),
                role: Some(p.role),
                instances: p.instances,
                servers: p.servers(),
                gpus: p.instances * p.server.tp_size,
                // Per server, as `sim::decode_server` caps each DP rank.
                batch_cap: p
                    .server
                    .max_running_requests
                    .map(|m| (m / p.parallel.dp_ranks()).max(1)),
                ..Default::default()
            })
            .collect();
        for c in self.all_cores() {
            self.observe(c);
            let (core, _, _, _) = state_of(
                &mut self.prefills,
                &mut self.decodes,
                &mut self.colocated,
                c,
            );
            // The open second counts when the window is still open (a run cut short).
            let busy_tick = if now <= end {
                core.tick.busy_ns as f64
                    + if core.busy {
                        (now - core.tick.busy_since) as f64
                    } else {
                        0.0
                    }
            } else {
                0.0
            };
            let (i, pool) = (core.instance.idx(), core.pool.idx());
            let nics = core.nics.len();
            let g = self.sampler.gauges[i];
            let bytes = g.nic_bytes;
            let o = &mut out[pool];
            o.busy_ns += g.busy_ns + busy_tick;
            o.running_ns += g.running_ns;
            o.queued_ns += g.queued_ns;
            o.kv_ns += g.kv_ns;
            o.queue_nonempty_ns += g.queue_nonempty_ns;
            o.nic_bytes += bytes;
            o.nic_bytes_per_ns += self.sc.fabric.topology.nic_bytes_per_ns * nics as f64;
        }
        // Colocated servers move no KV: their NICs carry nothing worth a utilisation.
        for o in &mut out {
            if o.role == Some(Role::Colocated) {
                o.nic_bytes_per_ns = 0.0;
            }
        }
        out
    }

    /// The row of one instance for the second ending `now`; resets its counters.
    fn instance_row(&mut self, core_of: CoreRef, now: Nanos) -> TimeseriesRow {
        self.observe(core_of);
        let (core, role, running, queued) = state_of(
            &mut self.prefills,
            &mut self.decodes,
            &mut self.colocated,
            core_of,
        );
        let i = core.instance.idx();
        let bytes: f64 = core
            .nics
            .iter()
            .map(|&n| {
                let (tx, rx) = self.fabric.nic_bytes(n);
                if role == Role::Prefill { tx } else { rx }
            })
            .sum();
        let moved = bytes - self.sampler.last_instance_bytes[i];
        self.sampler.last_instance_bytes[i] = bytes;
        let capacity =
            self.sc.fabric.topology.nic_bytes_per_ns * NS_PER_S as f64 * core.nics.len() as f64;
        if core.busy {
            core.tick.busy_to(now);
        }
        let row = TimeseriesRow {
            second: self.sampler.seconds,
            instance: core.instance.0,
            pool: self.sc.pools[core.pool.idx()].name.clone(),
            role: role.as_str(),
            arrivals: core.tick.arrivals,
            running,
            queued,
            kv_pages_used: u64::from(core.pages.used()),
            kv_pages_total: u64::from(core.pages.total()),
            tokens_out: core.tick.tokens,
            busy_fraction: core.tick.busy_ns as f64 / NS_PER_S as f64,
            link_utilisation: (moved / capacity).clamp(0.0, 1.0),
        };
        if now <= self.collector.window_end_ns.unwrap_or(Nanos::MAX) {
            let g = &mut self.sampler.gauges[i];
            g.busy_ns += core.tick.busy_ns as f64;
            g.nic_bytes += moved;
        }
        core.tick.next_second();
        row
    }

    pub(super) fn on_tick(&mut self) -> std::io::Result<()> {
        let now = self.q.now();
        // The second's rows read every decode's counters: its coalesced steps up to now first.
        self.catch_up_decodes(now);
        if now > 0 {
            self.fabric.settle_all(now);
            for c in self.all_cores() {
                let row = self.instance_row(c, now);
                self.sink.timeseries(&row)?;
            }
            self.link_rows()?;
        }
        self.sampler.seconds += 1;
        if !(self.arrivals_done && self.live() == 0) {
            self.q.schedule_in(NS_PER_S, Event::Tick);
        }
        Ok(())
    }
}

/// An instance's core, role, running batch and queue (a free function over the three server
/// tables, so the caller keeps the rest of `World` free to borrow).
fn state_of<'w>(
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

#[cfg(test)]
mod tests {
    use super::Gauge;
    use rand::{RngExt, SeedableRng};

    /// Inside the window, `observe_open` integrates exactly as `observe` (bit for bit), over
    /// random observation sequences that also repeat a time and idle.
    #[test]
    fn an_open_observation_is_the_clipped_one_inside_the_window() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..200 {
            let (mut a, mut b) = (Gauge::default(), Gauge::default());
            let mut now = rng.random_range(0..1_000_000u64);
            for _ in 0..100 {
                now += rng.random_range(0..3) * rng.random_range(0..50_000_000u64);
                let (running, queued) = (rng.random_range(0..300), rng.random_range(0..3));
                let kv = rng.random_range(0..=1000u32);
                let share = f64::from(kv) / 1000.0;
                a.observe(now, now + rng.random_range(0..2), running, queued, share);
                b.observe_open(now, running, queued, share);
            }
            let bits = |g: &Gauge| {
                [g.running_ns, g.queued_ns, g.kv_ns, g.queue_nonempty_ns].map(f64::to_bits)
            };
            assert_eq!(bits(&a), bits(&b));
            assert_eq!(a.last_ns, b.last_ns);
        }
    }
}
