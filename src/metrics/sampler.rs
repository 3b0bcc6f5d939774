//! The per-second sampler, an observer: one `timeseries.csv` row per instance and one
//! `links.csv` row per link that carried bytes or is not healthy, every simulated second, and
//! each instance's gauges ([`Gauge`], `summary.json` `pools`).
//!
//! It keeps what it remembers between seconds and builds the rows; it reads no component:
//! the simulator (`sim::sampler`) hands it what an instance shows ([`InstanceSecond`], a
//! gauge [`State`]) and the fabric, whose links it reads through their public counters.

use super::gauges::{Gauge, State};
use super::summary::PoolGauges;
use super::{LinkRow, Sink, TimeseriesRow};
use crate::config::Role;
use crate::engine::{NS_PER_S, Nanos};
use crate::fabric::{Fabric, Link, LinkName, NameBounds};

/// What the sampler remembers between seconds.
pub struct Sampler {
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
    bounds: NameBounds,
    /// Time integrals of each instance's gauges (`summary.json` `pools`).
    gauges: Vec<Gauge>,
}

/// What one instance shows at the end of a second.
pub struct InstanceSecond<'a> {
    /// Global instance index.
    pub instance: u32,
    /// Its pool's name.
    pub pool: &'a str,
    /// Its role.
    pub role: Role,
    /// Requests in its running batch.
    pub running: u32,
    /// Requests waiting.
    pub queued: u32,
    /// KV pages in use.
    pub pages_used: u32,
    /// KV pages in all.
    pub pages_total: u32,
    /// Requests routed to it this second.
    pub arrivals: u64,
    /// Tokens it produced this second.
    pub tokens: u64,
    /// Nanoseconds it computed this second.
    pub busy_ns: u64,
    /// Bytes its NICs have moved in its direction since the run began.
    pub nic_bytes: f64,
    /// What its NICs can move in a second, bytes.
    pub nic_bytes_per_s: f64,
    /// Its slot's state and the pools' sizes, when the pools change size.
    pub fleet: Option<super::FleetColumns>,
}

impl Sampler {
    /// A sampler of `instances` instances on `fabric`.
    pub fn new<T: Copy>(fabric: &Fabric<T>, instances: usize) -> Self {
        let links: Vec<Link> = fabric.links().collect();
        Self {
            seconds: 0,
            last_instance_bytes: vec![0.0; instances],
            last_link: vec![(0.0, 0.0); links.len()],
            link_healthy: links.iter().map(|&l| fabric.link_capacity(l)).collect(),
            links,
            gauges: vec![Gauge::default(); instances],
            bounds: NameBounds::of(fabric.topology()),
        }
    }

    /// Integrates instance `i`'s gauges up to `now` (clipped to the window's `end`) and takes
    /// its state `s`.
    #[inline]
    pub fn observe(&mut self, i: usize, now: Nanos, end: Nanos, s: State) {
        self.gauges[i].observe(now, end, s);
    }

    /// Instance `i`'s gauges, for a caller that integrates a run of observations in a copy
    /// it keeps in registers ([`Sampler::set_gauge`] puts it back).
    #[inline]
    pub fn gauge(&self, i: usize) -> Gauge {
        self.gauges[i]
    }

    /// Puts back instance `i`'s gauges taken by [`Sampler::gauge`].
    #[inline]
    pub fn set_gauge(&mut self, i: usize, g: Gauge) {
        self.gauges[i] = g;
    }

    /// Adds instance `i`'s integrals, with `busy_open_ns` of the second still open, to its
    /// pool's.
    pub fn add_to(&self, i: usize, pool: &mut PoolGauges, busy_open_ns: f64) {
        self.gauges[i].add_to(pool, busy_open_ns);
    }

    /// Instance `v`'s second closes: its gauges take the second's busy time and NIC bytes,
    /// and `sink` gets its `timeseries.csv` row if it keeps rows (a summary-only run builds
    /// none).
    pub fn instance_second(
        &mut self,
        v: &InstanceSecond,
        in_window: bool,
        sink: &mut dyn crate::metrics::Sink,
    ) -> std::io::Result<()> {
        let i = v.instance as usize;
        let moved = v.nic_bytes - self.last_instance_bytes[i];
        self.last_instance_bytes[i] = v.nic_bytes;
        if in_window {
            self.gauges[i].tick_closed(v.busy_ns, moved);
        }
        if !sink.wants_rows() {
            return Ok(());
        }
        sink.timeseries(&TimeseriesRow {
            second: self.seconds,
            instance: v.instance,
            pool: v.pool.to_string(),
            role: v.role.as_str(),
            arrivals: v.arrivals,
            running: v.running,
            queued: v.queued,
            kv_pages_used: u64::from(v.pages_used),
            kv_pages_total: u64::from(v.pages_total),
            tokens_out: v.tokens,
            busy_fraction: v.busy_ns as f64 / NS_PER_S as f64,
            link_utilisation: (moved / v.nic_bytes_per_s).clamp(0.0, 1.0),
            fleet: v.fleet,
        })
    }

    /// One `links.csv` row per link of `fabric` that carried bytes this second or is not
    /// healthy, to `sink`. A sink that drops link rows gets none built.
    pub fn link_rows<T: Copy>(
        &mut self,
        fabric: &Fabric<T>,
        sink: &mut dyn Sink,
    ) -> std::io::Result<()> {
        if !sink.wants_rows() {
            return Ok(());
        }
        for k in 0..self.links.len() {
            let link = self.links[k];
            let (bytes, retx) = (
                fabric.link_bytes(link),
                fabric.link_retransmitted_bytes(link),
            );
            let (b0, r0) = self.last_link[k];
            self.last_link[k] = (bytes, retx);
            let cap = fabric.link_capacity(link);
            let up = fabric.link_is_up(link);
            let healthy = self.link_healthy[k];
            if bytes - b0 <= 0.0 && up && cap >= healthy {
                continue;
            }
            sink.link(&LinkRow {
                second: self.seconds,
                link: LinkName::of(link, &self.bounds)
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

    /// Closes the second: the next rows are the next second's.
    pub fn next_second(&mut self) {
        self.seconds += 1;
    }
}
