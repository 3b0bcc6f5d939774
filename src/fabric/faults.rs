//! Faults: links and NICs going down and up, flapping, degrading and losing packets, and
//! instances crashing. Each takes effect at the instant it is applied; the flows it touches
//! are re-routed, re-solved or ended by the same call. Every call takes `now` in ns, like all
//! fabric calls; capacities are bytes/ns.
//!
//! Why downs nest (a counter, not a flag): a NIC flap and an explicit link-down may overlap on
//! the same link, and the link must stay down until both are over.

use std::cmp::Reverse;

use super::maxmin::LinkIdx;
use super::{Fabric, FlowEnd, FlowId, GpuId, Link, NicId, Phase};
use crate::engine::Nanos;

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
pub struct FaultEffect<T = u64> {
    /// Live flows whose path failed, rate or goodput changed (ascending ids).
    pub affected: Vec<FlowId>,
    /// Flows that ended (aborted by a crash).
    pub ended: Vec<FlowEnd<T>>,
}
impl<T: Copy> Fabric<T> {
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
        self.unslack(l, now);
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
    pub fn apply_fault(&mut self, now: Nanos, fault: &Fault) -> FaultEffect<T> {
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

    /// One more down on link `l`; if it just went down, every flow moving over it fails its
    /// attempt now. Returns those flows.
    pub(super) fn lower(&mut self, l: LinkIdx, now: Nanos) -> Vec<FlowId> {
        let st = &mut self.links[l.0 as usize];
        st.down += 1;
        if st.down > 1 {
            return Vec::new();
        }
        self.links_down += 1;
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
    pub(super) fn raise(&mut self, l: u32) {
        let st = &mut self.links[l as usize];
        let was = st.down;
        st.down = was.saturating_sub(1);
        if was == 1 {
            self.links_down -= 1;
        }
    }
}
