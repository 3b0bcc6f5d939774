//! The per-second sampler: one `timeseries.csv` row per instance and one `links.csv` row per
//! link that carried bytes or is not healthy, every simulated second.

use crate::config::Role;
use crate::engine::{NS_PER_S, Nanos};
use crate::fabric::{Fabric, Link};
use crate::metrics::{LinkRow, TimeseriesRow};
use crate::sglang::Core;

use super::World;
use super::event::Event;

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
            bounds: crate::fabric::NameBounds::of(fabric.topology()),
        }
    }
}

impl World<'_> {
    /// One `links.csv` row per link that carried bytes this second or is not healthy.
    fn link_rows(&mut self) -> std::io::Result<()> {
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

    /// The row of one instance for the second ending `now`; resets its counters.
    fn instance_row(&mut self, core_of: CoreRef, now: Nanos) -> TimeseriesRow {
        let (core, role, running, queued): (&mut Core, Role, u32, u32) = match core_of {
            CoreRef::Prefill(p) => {
                let s = &mut self.prefills[p];
                let (running, queued) = (s.batch.len() as u32, s.waiting.len() as u32);
                (&mut s.core, Role::Prefill, running, queued)
            }
            CoreRef::Decode(d) => {
                let s = &mut self.decodes[d];
                let (running, queued) = (s.running, (s.prealloc.len() + s.ready.len()) as u32);
                (&mut s.core, Role::Decode, running, queued)
            }
        };
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
        let capacity = self.sc.fabric.nic_bytes_per_ns * NS_PER_S as f64 * core.nics.len() as f64;
        if core.busy {
            core.tick.busy_ns += now - core.tick.busy_since;
            core.tick.busy_since = now;
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
        core.tick.arrivals = 0;
        core.tick.busy_ns = 0;
        core.tick.tokens = 0;
        row
    }

    pub(super) fn on_tick(&mut self) -> std::io::Result<()> {
        let now = self.q.now();
        if now > 0 {
            self.fabric.settle_all(now);
            let all = self
                .prefills
                .ids()
                .map(CoreRef::Prefill)
                .chain(self.decodes.ids().map(CoreRef::Decode))
                .collect::<Vec<_>>();
            for c in all {
                let row = self.instance_row(c, now);
                self.sink.timeseries(&row)?;
            }
            self.link_rows()?;
        }
        self.sampler.seconds += 1;
        if !(self.arrivals_done && self.reqs.live() == 0) {
            self.q.schedule_in(NS_PER_S, Event::Tick);
        }
        Ok(())
    }
}

/// An instance of either role, for the sampler's walk in result order.
#[derive(Clone, Copy)]
enum CoreRef {
    Prefill(super::ids::PrefillId),
    Decode(super::ids::DecodeId),
}
