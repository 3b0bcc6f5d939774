//! The pools as an operator runs them (issue 38, item 2): which slot of each pool is off,
//! starting, serving or draining, how a policy's target becomes cold starts, drains and live
//! role switches, and what the GPUs cost while they are held. A pure state machine: the
//! simulator (`sim::scaling`) tells it the time, a verdict, a drained instance; it answers
//! [`Action`]s the simulator carries out (schedule a start's end, take an instance out of the
//! router's set) and keeps the events `summary.json` `autoscaling` and `explain` print.
//!
//! **The rules**, each from its source (`docs/autoscaling.md` §7):
//! - A pool holds its scenario's count of slots placed before the run
//!   (`config::autoscale::Lifecycle::slots`); a slot that is off holds no GPU and bills none.
//! - **Scale-up**: the lowest free slot launches; it bills its GPUs from the launch and joins the
//!   router's set after its cold start (weights, CUDA graphs, the router's startup check:
//!   `Lifecycle::cold_start_ns`).
//! - **Scale-down**: a Kubernetes ReplicaSet deletes pods that are not ready before ready ones
//!   (`pkg/controller/controller_utils.go`, `ActivePods.Less`: pending before running, not
//!   ready before ready, the newest first), so a pool cancels its starting slots first (the
//!   latest launched first), then drains its serving ones (the highest slot first: the newest).
//!   A draining instance leaves the router's set at once and finishes what it holds (sglang
//!   admits nothing new to a server the router no longer sends to; nothing is cut), then is off.
//! - **Role switch** (`--enable-pd-role-switch`, sglang PR #28403, `Lifecycle::role_switch`):
//!   when one pool must grow while the other shrinks, a serving instance of the shrinking pool
//!   drains first ("drain-first flip") and then flips in place: no weight reload, no KV-pool
//!   reallocation, the decode CUDA graphs captured when it becomes decode, the router's check
//!   (`Lifecycle::switch_ns`). Its GPUs stay billed throughout. It lands on a free slot of the
//!   other pool (pdsim places each pool's slots apart: the flipped server's fabric position is
//!   its new slot's, which only moves whose NICs it shares).
//! - Targets are absolute: a pool's replicas are its serving and starting instances and the
//!   switches heading into it; a target equal to them asks for nothing.

use super::{PoolCounts, Target};
use crate::config::autoscale::{DECODE, Lifecycle, PREFILL};
use crate::engine::Nanos;
pub use crate::vocab::scale::ScaleEvent;

/// Where one slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not running: no GPU held, out of the router's set.
    Off,
    /// Launched (its GPUs billed); joins the router's set at `ready_ns`.
    Starting {
        /// When the router admits it, ns.
        ready_ns: Nanos,
    },
    /// In the router's set.
    Serving,
    /// Out of the router's set, finishing what it holds; then off, or flipped into pool `to`.
    Draining {
        /// The pool a live role switch takes it to (`None`: it is removed).
        to: Option<usize>,
    },
}

impl Phase {
    /// Its name in `timeseries.csv`'s `state` column.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Off => "off",
            Phase::Starting { .. } => "starting",
            Phase::Serving => "serving",
            Phase::Draining { .. } => "draining",
        }
    }
}

/// What the simulator must do for the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Slot `slot` of pool `role` was launched: it is ready at `ready_ns` (the simulator
    /// schedules that and then asks [`Fleet::ready`]).
    Launch {
        /// `PREFILL` or `DECODE`.
        role: usize,
        /// The slot, in the pool's order.
        slot: u32,
        /// When the router admits it, ns.
        ready_ns: Nanos,
    },
    /// Slot `slot` of pool `role` leaves the router's set and drains (the simulator tells
    /// [`Fleet::drained`] once it holds nothing).
    Drain {
        /// `PREFILL` or `DECODE`.
        role: usize,
        /// The slot.
        slot: u32,
    },
}

/// Each pool's name in results.
pub const POOL_NAMES: [&str; 2] = ["prefill", "decode"];

/// The pools' slots and their phases, the GPUs held over time, and the events.
#[derive(Clone, Debug)]
pub struct Fleet {
    lc: Lifecycle,
    phase: [Vec<Phase>; 2],
    /// GPUs held now.
    gpus_now: u64,
    /// When `gpus_now` last changed, ns.
    since_ns: Nanos,
    /// GPU-nanoseconds held before `since_ns`.
    gpu_ns: u128,
    events: Vec<ScaleEvent>,
}

impl Fleet {
    /// The pools at the start: each pool's first `initial` slots serving, the rest off.
    pub fn new(lc: Lifecycle) -> Self {
        let phase = [PREFILL, DECODE].map(|r| {
            (0..lc.slots[r])
                .map(|s| {
                    if s < lc.initial[r] {
                        Phase::Serving
                    } else {
                        Phase::Off
                    }
                })
                .collect()
        });
        let gpus_now = [PREFILL, DECODE]
            .iter()
            .map(|&r| u64::from(lc.initial[r]) * u64::from(lc.gpus[r]))
            .sum();
        Self {
            lc,
            phase,
            gpus_now,
            since_ns: 0,
            gpu_ns: 0,
            events: Vec::new(),
        }
    }

    /// The lifecycle it runs by.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lc
    }

    /// Slot `slot` of pool `role`'s phase.
    pub fn phase(&self, role: usize, slot: u32) -> Phase {
        self.phase[role][slot as usize]
    }

    /// The global instance number of slot `slot` of pool `role` (prefill slots first).
    pub fn instance(&self, role: usize, slot: u32) -> u32 {
        if role == PREFILL {
            slot
        } else {
            self.lc.slots[PREFILL] + slot
        }
    }

    /// The pool and slot of global instance `i`.
    pub fn slot_of(&self, i: u32) -> (usize, u32) {
        if i < self.lc.slots[PREFILL] {
            (PREFILL, i)
        } else {
            (DECODE, i - self.lc.slots[PREFILL])
        }
    }

    /// Every draining slot, `(role, slot)`, in pool then slot order.
    pub fn draining(&self) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        for r in [PREFILL, DECODE] {
            for (s, p) in self.phase[r].iter().enumerate() {
                if matches!(p, Phase::Draining { .. }) {
                    out.push((r, s as u32));
                }
            }
        }
        out
    }

    /// The pools' inventory, as a policy sees it: a switch heading into a pool counts as
    /// starting there (and as draining where it is).
    pub fn counts(&self) -> PoolCounts {
        let mut ready = [0u32; 2];
        let mut starting = [0u32; 2];
        let mut draining = [0u32; 2];
        for r in [PREFILL, DECODE] {
            for p in &self.phase[r] {
                match *p {
                    Phase::Off => {}
                    Phase::Starting { .. } => starting[r] += 1,
                    Phase::Serving => ready[r] += 1,
                    Phase::Draining { to } => {
                        draining[r] += 1;
                        if let Some(t) = to {
                            starting[t] += 1;
                        }
                    }
                }
            }
        }
        PoolCounts {
            prefill_ready: ready[PREFILL],
            prefill_starting: starting[PREFILL],
            prefill_draining: draining[PREFILL],
            decode_ready: ready[DECODE],
            decode_starting: starting[DECODE],
            decode_draining: draining[DECODE],
        }
    }

    /// Serving instances of each pool, `[prefill, decode]`.
    pub fn serving(&self) -> [u32; 2] {
        let c = self.counts();
        [c.prefill_ready, c.decode_ready]
    }

    /// GPU-hours held from the start to `now`.
    pub fn gpu_hours(&self, now: Nanos) -> f64 {
        let ns = self.gpu_ns + u128::from(self.gpus_now) * u128::from(now - self.since_ns);
        ns as f64 / 3.6e12
    }

    /// The events so far, in time order.
    pub fn events(&self) -> &[ScaleEvent] {
        &self.events
    }

    /// Moves the pools toward `target` at `now` because of `why` (the policy's reason).
    pub fn apply(&mut self, target: Target, now: Nanos, why: &str) -> Vec<Action> {
        let mut out = Vec::new();
        let c = self.counts();
        let want = [target.prefill, target.decode];
        let have = [c.prefill_replicas(), c.decode_replicas()];
        let mut delta = [0i64; 2];
        for r in [PREFILL, DECODE] {
            delta[r] = i64::from(want[r]) - i64::from(have[r]);
        }
        if self.lc.role_switch {
            for (from, to) in [(DECODE, PREFILL), (PREFILL, DECODE)] {
                while delta[to] > 0 && delta[from] < 0 {
                    let Some(s) = self.newest(from, |p| p == Phase::Serving) else {
                        break;
                    };
                    self.set(from, s, Phase::Draining { to: Some(to) }, now);
                    self.note(
                        now,
                        "drain",
                        from,
                        s,
                        format!("to switch to {}: {why}", POOL_NAMES[to]),
                    );
                    out.push(Action::Drain {
                        role: from,
                        slot: s,
                    });
                    delta[to] -= 1;
                    delta[from] += 1;
                }
            }
        }
        for r in [PREFILL, DECODE] {
            while delta[r] < 0 {
                if let Some(s) = self.newest_start(r) {
                    self.set(r, s, Phase::Off, now);
                    self.note(now, "start_cancelled", r, s, why.to_string());
                } else if let Some((o, s)) = self.switch_into(r) {
                    self.phase[o][s as usize] = Phase::Draining { to: None };
                    self.note(
                        now,
                        "drain",
                        o,
                        s,
                        format!("switch into {} called off: {why}", POOL_NAMES[r]),
                    );
                } else if let Some(s) = self.newest(r, |p| p == Phase::Serving) {
                    self.set(r, s, Phase::Draining { to: None }, now);
                    self.note(now, "drain", r, s, why.to_string());
                    out.push(Action::Drain { role: r, slot: s });
                } else {
                    break;
                }
                delta[r] += 1;
            }
            while delta[r] > 0 {
                let Some(s) = self.lowest_off(r) else {
                    self.note(
                        now,
                        "no_slot",
                        r,
                        self.lc.slots[r],
                        format!(
                            "every one of the pool's {} slots is held: {why}",
                            self.lc.slots[r]
                        ),
                    );
                    break;
                };
                let ready_ns = now + self.lc.cold_start_ns(r);
                self.set(r, s, Phase::Starting { ready_ns }, now);
                self.note(
                    now,
                    "cold_start",
                    r,
                    s,
                    format!("ready in {:.1} s: {why}", (ready_ns - now) as f64 / 1e9),
                );
                out.push(Action::Launch {
                    role: r,
                    slot: s,
                    ready_ns,
                });
                delta[r] -= 1;
            }
        }
        out
    }

    /// Slot `slot` of pool `role` reached its ready time `now`: whether it joins the router's
    /// set (false when its start was cancelled or moved, or `up` is false: the server crashed
    /// while starting, and the start failed; the slot is off).
    pub fn ready(&mut self, role: usize, slot: u32, now: Nanos, up: bool) -> bool {
        if self.phase(role, slot) != (Phase::Starting { ready_ns: now }) {
            return false;
        }
        if !up {
            self.set(role, slot, Phase::Off, now);
            self.note(now, "start_failed", role, slot, "the server crashed while starting; its GPUs are released and the policy may launch again".into());
            return false;
        }
        self.set(role, slot, Phase::Serving, now);
        self.note(
            now,
            "ready",
            role,
            slot,
            "healthy, and admitted at the router's startup check".into(),
        );
        true
    }

    /// Draining slot `slot` of pool `role` holds nothing at `now`: it is off, or flips into
    /// the other pool (a [`Action::Launch`] of the slot it lands on).
    pub fn drained(&mut self, role: usize, slot: u32, now: Nanos) -> Option<Action> {
        let Phase::Draining { to } = self.phase(role, slot) else {
            return None;
        };
        self.set(role, slot, Phase::Off, now);
        let Some(to) = to else {
            self.note(
                now,
                "removed",
                role,
                slot,
                "drained: every request it held ended".into(),
            );
            return None;
        };
        let Some(s) = self.lowest_off(to) else {
            self.note(
                now,
                "no_slot",
                to,
                self.lc.slots[to],
                "the switch found no free slot; the drained server is removed".into(),
            );
            return None;
        };
        let ready_ns = now + self.lc.switch_ns(to);
        self.set(to, s, Phase::Starting { ready_ns }, now);
        self.note(
            now,
            "role_switch",
            to,
            s,
            format!(
                "{} slot {slot} drained and flipped in place (no weight reload): ready in {:.1} s",
                POOL_NAMES[role],
                (ready_ns - now) as f64 / 1e9
            ),
        );
        Some(Action::Launch {
            role: to,
            slot: s,
            ready_ns,
        })
    }

    fn set(&mut self, role: usize, slot: u32, to: Phase, now: Nanos) {
        let was = std::mem::replace(&mut self.phase[role][slot as usize], to);
        let held = |p: Phase| p != Phase::Off;
        if held(was) != held(to) {
            self.gpu_ns += u128::from(self.gpus_now) * u128::from(now - self.since_ns);
            self.since_ns = now;
            let g = u64::from(self.lc.gpus[role]);
            if held(to) {
                self.gpus_now += g;
            } else {
                self.gpus_now -= g;
            }
        }
    }

    fn note(&mut self, now: Nanos, kind: &'static str, role: usize, slot: u32, why: String) {
        self.events.push(ScaleEvent {
            at_s: now as f64 / 1e9,
            kind: kind.to_string(),
            pool: POOL_NAMES[role].to_string(),
            slot,
            instance: self.instance(role, slot),
            why,
        });
    }

    /// The highest slot of pool `role` whose phase passes `f`.
    fn newest(&self, role: usize, f: impl Fn(Phase) -> bool) -> Option<u32> {
        (self.phase[role].iter().rposition(|&p| f(p))).map(|s| s as u32)
    }

    /// The starting slot of pool `role` launched last (latest ready time; the highest slot on
    /// a tie).
    fn newest_start(&self, role: usize) -> Option<u32> {
        let mut best: Option<(Nanos, u32)> = None;
        for (s, p) in self.phase[role].iter().enumerate() {
            if let Phase::Starting { ready_ns } = *p
                && best.is_none_or(|(t, _)| ready_ns >= t)
            {
                best = Some((ready_ns, s as u32));
            }
        }
        best.map(|(_, s)| s)
    }

    /// A switch heading into pool `role`: the other pool's highest such draining slot.
    fn switch_into(&self, role: usize) -> Option<(usize, u32)> {
        let other = 1 - role;
        self.newest(other, |p| p == Phase::Draining { to: Some(role) })
            .map(|s| (other, s))
    }

    fn lowest_off(&self, role: usize) -> Option<u32> {
        (self.phase[role].iter().position(|&p| p == Phase::Off)).map(|s| s as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::NS_PER_S;

    /// Two slots of each pool at one GPU (prefill) and two GPUs (decode), one of each serving;
    /// a cold start of 40 s healthy (admitted at the 30-s check: 60 s), graphs 12 s.
    fn lc(role_switch: bool) -> Lifecycle {
        Lifecycle {
            initial: [1, 1],
            slots: [3, 3],
            gpus: [1, 2],
            weight_bytes_per_gpu: [0, 0],
            startup_ns: Some(40 * NS_PER_S),
            weight_load_bytes_per_s: 1e9,
            cuda_graph_capture_ns: 12 * NS_PER_S,
            router_check_interval_ns: 30 * NS_PER_S,
            role_switch,
            context_length: None,
        }
    }

    fn t(p: u32, d: u32) -> Target {
        Target {
            prefill: p,
            decode: d,
        }
    }

    #[test]
    fn a_scale_up_cold_starts_the_lowest_free_slot_and_bills_from_the_launch() {
        let mut f = Fleet::new(lc(false));
        // 1 P (1 GPU) + 1 D (2 GPUs) for 100 s = 300 GPU-s.
        let a = f.apply(t(2, 1), 100 * NS_PER_S, "more");
        // Healthy after 40 s, admitted at the router's check at 60 s.
        assert_eq!(
            a,
            vec![Action::Launch {
                role: PREFILL,
                slot: 1,
                ready_ns: 160 * NS_PER_S
            }]
        );
        assert_eq!(f.counts().prefill_starting, 1);
        assert_eq!(f.counts().prefill_replicas(), 2);
        // Asking again changes nothing: targets are absolute.
        assert!(f.apply(t(2, 1), 120 * NS_PER_S, "same").is_empty());
        assert!(!f.ready(PREFILL, 1, 159 * NS_PER_S, true));
        assert!(f.ready(PREFILL, 1, 160 * NS_PER_S, true));
        assert_eq!(f.serving(), [2, 1]);
        // 300 GPU-s, then 4 GPUs from 100 s to 200 s: 700 GPU-s.
        let h = f.gpu_hours(200 * NS_PER_S);
        assert!((h - 700.0 / 3600.0).abs() < 1e-12, "{h}");
    }

    #[test]
    fn a_scale_down_cancels_starts_before_it_drains_and_drains_the_newest() {
        let mut f = Fleet::new(lc(false));
        f.apply(t(3, 1), 0, "up");
        assert_eq!(f.counts().prefill_starting, 2);
        // One fewer: the start launched last goes (slots 1 and 2 launched together: slot 2).
        assert!(f.apply(t(2, 1), NS_PER_S, "down").is_empty());
        assert_eq!(f.phase(PREFILL, 2), Phase::Off);
        assert!(matches!(f.phase(PREFILL, 1), Phase::Starting { .. }));
        assert!(f.ready(PREFILL, 1, 60 * NS_PER_S, true));
        // Down to one: slot 1 (the newest serving) drains; slot 0 keeps serving.
        let a = f.apply(t(1, 1), 70 * NS_PER_S, "down");
        assert_eq!(
            a,
            vec![Action::Drain {
                role: PREFILL,
                slot: 1
            }]
        );
        assert_eq!(f.counts().prefill_draining, 1);
        assert_eq!(f.counts().prefill_replicas(), 1);
        assert_eq!(f.drained(PREFILL, 1, 75 * NS_PER_S), None);
        assert_eq!(f.phase(PREFILL, 1), Phase::Off);
        let kinds: Vec<_> = f.events().iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "cold_start",
                "cold_start",
                "start_cancelled",
                "ready",
                "drain",
                "removed"
            ]
        );
    }

    #[test]
    fn a_role_switch_drains_then_flips_without_a_cold_start() {
        let mut f = Fleet::new(Lifecycle {
            initial: [1, 2],
            gpus: [2, 2],
            ..lc(true)
        });
        // +1 P, −1 D: decode slot 1 drains to switch.
        let a = f.apply(t(2, 1), 10 * NS_PER_S, "shift");
        assert_eq!(
            a,
            vec![Action::Drain {
                role: DECODE,
                slot: 1
            }]
        );
        let c = f.counts();
        assert_eq!((c.prefill_replicas(), c.decode_replicas()), (2, 1));
        // Drained at 15 s: it lands on prefill slot 1; becoming prefill captures no decode
        // graphs, so it joins at the router's first check, at once.
        let a = f.drained(DECODE, 1, 15 * NS_PER_S);
        assert_eq!(
            a,
            Some(Action::Launch {
                role: PREFILL,
                slot: 1,
                ready_ns: 15 * NS_PER_S
            })
        );
        // Becoming decode captures the graphs (12 s), admitted at the 30-s check.
        assert_eq!(f.lifecycle().switch_ns(DECODE), 30 * NS_PER_S);
        // GPUs held throughout: 6 GPUs from 0 to 20 s.
        assert!(f.ready(PREFILL, 1, 15 * NS_PER_S, true));
        let h = f.gpu_hours(20 * NS_PER_S);
        assert!((h - 120.0 / 3600.0).abs() < 1e-12, "{h}");
    }

    #[test]
    fn a_start_that_crashed_fails_and_releases_its_gpus() {
        let mut f = Fleet::new(lc(false));
        f.apply(t(1, 2), 0, "up");
        assert!(!f.ready(DECODE, 1, 60 * NS_PER_S, false));
        assert_eq!(f.phase(DECODE, 1), Phase::Off);
        // 3 GPUs for 60 s and 2 more for the same 60 s: 300 GPU-s; then 3 GPUs.
        let h = f.gpu_hours(100 * NS_PER_S);
        assert!((h - 420.0 / 3600.0).abs() < 1e-12, "{h}");
    }

    #[test]
    fn a_target_beyond_the_slots_is_an_event_not_a_panic() {
        let mut f = Fleet::new(lc(false));
        let a = f.apply(t(5, 1), 0, "far up");
        assert_eq!(a.len(), 2);
        assert_eq!(f.events().last().map(|e| e.kind.as_str()), Some("no_slot"));
    }
}
