//! A minimal event loop around a [`Fabric`]: exactly what the simulator does with it, without the
//! simulator. Tests, the calibration check and the benchmark drive the fabric through it, and it
//! is the reference for integrating the fabric into the cluster.

use super::{Completion, Fabric, FabricStats, Fault, FlowEnd, FlowId, GpuId};
use crate::engine::{EventQueue, Nanos};

#[derive(Clone, Debug)]
enum Ev {
    /// A fabric event (per-flow mode).
    Due(Completion),
    /// The fabric's timer (single-timer mode); stale unless its number is the current one.
    Timer(u64),
    /// Start a transfer.
    Start {
        src: GpuId,
        dst: GpuId,
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
    /// A fabric event (stale, a phase change, or an end: see `Harness::ended`).
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
    buf: Vec<Completion>,
    /// Single-timer mode: the number and time of the live timer event.
    single: Option<(u64, Option<Nanos>)>,
    /// Every flow end, in the order they happened.
    pub ended: Vec<FlowEnd>,
}

impl Harness {
    /// Drives `fabric` from time 0 in per-flow mode ([`Fabric::completions`], [`Fabric::fire`]).
    pub fn new(fabric: Fabric) -> Self {
        Self {
            fabric,
            queue: EventQueue::new(),
            buf: Vec::new(),
            single: None,
            ended: Vec::new(),
        }
    }

    /// Drives `fabric` from time 0 in single-timer mode ([`Fabric::next_due`],
    /// [`Fabric::fire_due`]).
    pub fn single_timer(fabric: Fabric) -> Self {
        Self {
            single: Some((0, None)),
            ..Self::new(fabric)
        }
    }

    /// Simulated time of the last event handled, ns.
    pub fn now(&self) -> Nanos {
        self.queue.now()
    }

    /// Time of the next event, if any.
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

    /// Applies `fault` at `at`.
    pub fn fault_at(&mut self, at: Nanos, fault: Fault) {
        self.queue.schedule_at(at, Ev::Fault(fault));
    }

    /// Handles the next event; `None` when there is none left.
    pub fn step(&mut self) -> Option<Stepped> {
        let (now, ev) = self.queue.pop()?;
        let stepped = match ev {
            Ev::Due(c) => {
                if let Some(end) = self.fabric.fire(now, c.flow, c.generation) {
                    self.ended.push(end);
                }
                Stepped::Fabric
            }
            Ev::Timer(n) => {
                if let Some((current, _)) = self.single
                    && n == current
                {
                    self.single = Some((current, None));
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
            Ev::Fault(fault) => {
                let effect = self.fabric.apply_fault(now, &fault);
                self.ended.extend(effect.ended);
                Stepped::Fault
            }
        };
        // After every call that changes the fabric: schedule what changed.
        if let Some((n, scheduled)) = self.single {
            let due = self.fabric.next_due(now);
            if due != scheduled {
                // The old timer event (if any) goes stale.
                self.single = Some((n + 1, due));
                if let Some(at) = due {
                    self.queue.schedule_at(at, Ev::Timer(n + 1));
                }
            }
        } else {
            self.buf.clear();
            self.fabric.completions(now, &mut self.buf);
            for c in self.buf.drain(..) {
                self.queue.schedule_at(c.at, Ev::Due(c));
            }
        }
        Some(stepped)
    }

    /// Runs until no event is left; returns the ends.
    pub fn run(&mut self) -> &[FlowEnd] {
        while self.step().is_some() {}
        &self.ended
    }

    /// Runs every event due at or before `t`.
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
