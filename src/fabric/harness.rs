//! A minimal event loop around a [`Fabric`]: exactly what the simulator does with it, without the
//! simulator (one timer event for the whole fabric, [`Fabric::next_due`] after every call,
//! [`Fabric::fire_due`] when the timer fires). Tests and the calibration check drive the fabric
//! through it, and it is the reference for integrating the fabric into the cluster.

use super::{Fabric, FabricStats, Fault, FlowEnd, FlowId, GpuId};
use crate::engine::{EventQueue, Nanos};

#[derive(Clone, Debug)]
enum Ev {
    /// The fabric's timer; stale unless its number is the current one (a timer is never
    /// cancelled, only superseded: the queue has no removal).
    Timer(u64),
    /// Start a transfer.
    Start {
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        writes: u64,
        token: u64,
    },
    /// Start an all-to-all flow.
    A2a {
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        cap: f64,
        token: u64,
    },
    /// Start a Mooncake Store batch.
    Store {
        ends: (GpuId, GpuId, GpuId),
        bytes: u64,
        writes: u64,
        token: u64,
    },
    /// Apply a fault.
    Fault(Fault),
}

/// What one [`Harness::step`] handled.
#[derive(Clone, Debug, PartialEq)]
pub enum Stepped {
    /// The fabric's timer fired (or a stale one was dropped); ends are in `Harness::ended`.
    Fabric,
    /// A transfer started, with its id.
    Started(FlowId),
    /// A fault was applied.
    Fault,
}

/// A fabric, an event queue and the record of ended flows.
pub struct Harness {
    /// The fabric under test.
    pub fabric: Fabric,
    queue: EventQueue<Ev>,
    /// The number of the live timer event and its time, ns (`None`: no timer pending).
    timer: (u64, Option<Nanos>),
    /// Every flow end, in the order they happened.
    pub ended: Vec<FlowEnd>,
}

impl Harness {
    /// Drives `fabric` from time 0.
    pub fn new(fabric: Fabric) -> Self {
        Self {
            fabric,
            queue: EventQueue::new(),
            timer: (0, None),
            ended: Vec::new(),
        }
    }

    /// Simulated time of the last event handled, ns.
    pub fn now(&self) -> Nanos {
        self.queue.now()
    }

    /// Time of the next event (stale timers included), ns, if any.
    pub fn next_time(&self) -> Option<Nanos> {
        self.queue.peek_time()
    }

    /// Starts a transfer at `at` (see [`Fabric::start_transfer`]).
    pub fn start_at(
        &mut self,
        at: Nanos,
        src: GpuId,
        dst: GpuId,
        bytes: u64,
        writes: u64,
        token: u64,
    ) {
        self.queue.schedule_at(
            at,
            Ev::Start {
                src,
                dst,
                bytes,
                writes,
                token,
            },
        );
    }

    /// Starts an all-to-all flow at `at` (see [`Fabric::start_a2a`]: `src` and `dst` on
    /// different nodes, `bytes > 0`, at most `cap` bytes/ns).
    pub fn a2a_at(&mut self, at: Nanos, src: GpuId, dst: GpuId, bytes: u64, cap: f64, token: u64) {
        self.queue.schedule_at(
            at,
            Ev::A2a {
                src,
                dst,
                bytes,
                cap,
                token,
            },
        );
    }

    /// Starts a Mooncake Store batch at `at` (see [`Fabric::start_store`]: `(src, dst, client)`
    /// with `src` and `dst` on different nodes and `client` one of them).
    pub fn store_at(&mut self, at: Nanos, ends: (GpuId, GpuId, GpuId), bytes: u64, token: u64) {
        self.queue.schedule_at(
            at,
            Ev::Store {
                ends,
                bytes,
                writes: 1,
                token,
            },
        );
    }

    /// Applies `fault` at `at`.
    pub fn fault_at(&mut self, at: Nanos, fault: Fault) {
        self.queue.schedule_at(at, Ev::Fault(fault));
    }

    /// Handles the next event; `None` when there is none left.
    pub fn step(&mut self) -> Option<Stepped> {
        let (now, ev) = self.queue.pop()?;
        let stepped = match ev {
            Ev::Timer(n) => {
                if n == self.timer.0 {
                    self.timer.1 = None;
                    self.fabric.fire_due(now, &mut self.ended);
                }
                Stepped::Fabric
            }
            Ev::Start {
                src,
                dst,
                bytes,
                writes,
                token,
            } => Stepped::Started(
                self.fabric
                    .start_transfer(now, src, dst, bytes, writes, token),
            ),
            Ev::A2a {
                src,
                dst,
                bytes,
                cap,
                token,
            } => Stepped::Started(self.fabric.start_a2a(now, src, dst, bytes, cap, token)),
            Ev::Store {
                ends,
                bytes,
                writes,
                token,
            } => Stepped::Started(
                self.fabric
                    .start_store(now, 0, ends, (bytes, writes), token),
            ),
            Ev::Fault(fault) => {
                let effect = self.fabric.apply_fault(now, &fault);
                self.ended.extend(effect.ended);
                Stepped::Fault
            }
        };
        // After every call that changes the fabric: move the timer if its time changed.
        let due = self.fabric.next_due(now);
        if due != self.timer.1 {
            // The old timer event (if any) goes stale.
            self.timer = (self.timer.0 + 1, due);
            if let Some(at) = due {
                self.queue.schedule_at(at, Ev::Timer(self.timer.0));
            }
        }
        Some(stepped)
    }

    /// Runs until no event is left; returns the ends.
    pub fn run(&mut self) -> &[FlowEnd] {
        while self.step().is_some() {}
        &self.ended
    }

    /// Runs every event due at or before `t` (ns).
    pub fn run_until(&mut self, t: Nanos) {
        while self.queue.peek_time().is_some_and(|at| at <= t) {
            self.step();
        }
    }

    /// The fabric's counters.
    pub fn stats(&self) -> FabricStats {
        self.fabric.stats()
    }

    /// The end of the flow started with `token`, if it ended.
    pub fn end_of(&self, token: u64) -> Option<&FlowEnd> {
        self.ended.iter().find(|e| e.token == token)
    }
}
