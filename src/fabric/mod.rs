//! The RDMA fabric: NICs as full-duplex links, transfers as flows that share link bandwidth
//! max-min fairly (recomputed whenever a flow starts or ends), each paying a latency first.
//!
//! This is the first fabric model: one TX and one RX link per NIC, GPU → NIC affinity by index,
//! no switch tier. Flows settle their progress lazily: a flow's bytes are brought up to date only
//! when its rate changes or a report needs them, so cost grows with rate changes, not time.

pub mod maxmin;

use maxmin::{FlowId, LinkIdx, RateChange, Sharing};

use crate::engine::Nanos;

/// Index of a NIC in the cluster (`node × nics_per_node + local`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NicId(pub u32);

struct Flow {
    /// Bytes still to move.
    remaining: f64,
    /// Current rate, bytes per ns.
    rate: f64,
    /// When `remaining` was last brought up to date, ns.
    settled_ns: Nanos,
    /// Changes whenever the completion time does; a completion event carries the value it was
    /// scheduled with, so a stale one is recognised and ignored.
    generation: u64,
    links: [LinkIdx; 2],
    /// The simulator's handle for what this flow belongs to.
    token: u64,
}

/// A completion the simulator must schedule: `FlowDone { flow, generation }` at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The flow.
    pub flow: FlowId,
    /// Its generation when scheduled.
    pub generation: u64,
    /// When it will have moved its last byte, ns.
    pub at: Nanos,
}

/// NICs, links and live flows.
pub struct Fabric {
    sharing: Sharing,
    flows: Vec<Option<Flow>>,
    /// Cumulative bytes carried by each link (TX links at even, RX at odd indices).
    link_bytes: Vec<f64>,
    next_generation: u64,
    changes: Vec<RateChange>,
}

impl Fabric {
    /// `nics` NICs of `bytes_per_ns` each, full duplex.
    pub fn new(nics: u32, bytes_per_ns: f64) -> Self {
        let caps = vec![bytes_per_ns; 2 * nics as usize];
        Self {
            link_bytes: vec![0.0; caps.len()],
            sharing: Sharing::new(caps),
            flows: Vec::new(),
            next_generation: 0,
            changes: Vec::new(),
        }
    }

    fn tx(nic: NicId) -> LinkIdx {
        LinkIdx(2 * nic.0)
    }

    fn rx(nic: NicId) -> LinkIdx {
        LinkIdx(2 * nic.0 + 1)
    }

    /// Starts moving `bytes` from `src`'s TX to `dst`'s RX now. Call [`Fabric::completions`]
    /// afterwards to learn which completion events to (re)schedule.
    pub fn start_flow(
        &mut self,
        now: Nanos,
        src: NicId,
        dst: NicId,
        bytes: u64,
        token: u64,
    ) -> FlowId {
        let links = [Self::tx(src), Self::rx(dst)];
        let id = self.sharing.add_flow(&links, f64::INFINITY);
        let i = id.0 as usize;
        if i >= self.flows.len() {
            self.flows.resize_with(i + 1, || None);
        }
        self.flows[i] = Some(Flow {
            remaining: bytes as f64,
            rate: 0.0,
            settled_ns: now,
            generation: 0,
            links,
            token,
        });
        id
    }

    /// Whether `generation` is the flow's current one (its completion event is not stale).
    pub fn is_current(&self, flow: FlowId, generation: u64) -> bool {
        matches!(self.flows.get(flow.0 as usize), Some(Some(f)) if f.generation == generation)
    }

    /// Ends `flow` (its completion fired), returning its token.
    pub fn finish_flow(&mut self, flow: FlowId) -> u64 {
        let f = self.flows[flow.0 as usize]
            .take()
            .expect("finish_flow on a live flow");
        // The residue is the rounding of the completion time up to the nanosecond.
        let moved = f.remaining.max(0.0);
        for l in f.links {
            self.link_bytes[l.0 as usize] += moved;
        }
        self.sharing.remove_flow(flow);
        f.token
    }

    /// Brings every changed flow up to date at `now` and returns the completions to schedule.
    pub fn completions(&mut self, now: Nanos, out: &mut Vec<Completion>) {
        self.changes.clear();
        self.sharing.drain_changes(&mut self.changes);
        for ch in &self.changes {
            let Some(f) = self.flows[ch.flow.0 as usize].as_mut() else {
                continue;
            };
            let moved = (f.rate * (now - f.settled_ns) as f64).min(f.remaining);
            f.remaining -= moved;
            for l in f.links {
                self.link_bytes[l.0 as usize] += moved;
            }
            f.settled_ns = now;
            f.rate = ch.new_rate;
            self.next_generation += 1;
            f.generation = self.next_generation;
            if f.rate > 0.0 {
                out.push(Completion {
                    flow: ch.flow,
                    generation: f.generation,
                    at: now + (f.remaining / f.rate).ceil() as Nanos,
                });
            }
        }
    }

    /// Brings every live flow's bytes up to `now` (for utilisation reports).
    pub fn settle_all(&mut self, now: Nanos) {
        for f in self.flows.iter_mut().flatten() {
            let moved = (f.rate * (now - f.settled_ns) as f64).min(f.remaining);
            f.remaining -= moved;
            for l in f.links {
                self.link_bytes[l.0 as usize] += moved;
            }
            f.settled_ns = now;
        }
    }

    /// Cumulative bytes sent by `nic` (TX) and received (RX).
    pub fn nic_bytes(&self, nic: NicId) -> (f64, f64) {
        (
            self.link_bytes[Self::tx(nic).0 as usize],
            self.link_bytes[Self::rx(nic).0 as usize],
        )
    }

    /// Flows alive.
    pub fn live_flows(&self) -> usize {
        self.flows.iter().filter(|f| f.is_some()).count()
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
}
