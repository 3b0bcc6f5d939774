//! The decodes' heartbeat to the prefills: how long a dead prefill goes unnoticed, and what
//! the decodes fail when they notice (`docs/sglang-pd.md` §2.6).
//!
//! sglang's `CommonKVReceiver._start_heartbeat_checker_thread` (`disaggregation/common/conn.py`,
//! read at 0005973a) GETs `http://{bootstrap_addr}/health` on every known prefill every
//! `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s); at
//! `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE` (2) consecutive failures,
//! `_handle_node_failure` marks every room of that prefill that has not reached `Success`
//! Failed. pdsim's heartbeats go out at every multiple of the interval from time 0 (one clock
//! for every decode: they all ask the same prefill), so a prefill that crashes at `t` is
//! declared lost at the `MAX_FAILURE`-th multiple at or after `t` (the first after 0) — and a
//! restart before then cancels the verdict: the decodes never notice.

use crate::engine::{EventKey, EventQueue, NS_PER_S, Nanos};
use crate::vocab::ErrorKind;
use crate::vocab::event::Event;
use crate::vocab::ids::{IdVec, PrefillId};
use crate::vocab::requests::KvPoll;

use super::transfer::BOOTSTRAP_PORT;
use super::{Ctx, Effect};

/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s), in ns.
pub const HEARTBEAT_INTERVAL_NS: Nanos = 5 * NS_PER_S;
/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE`: consecutive missed heartbeats
/// that declare a prefill lost.
pub const HEARTBEAT_MAX_FAILURE: u64 = 2;

/// When the decodes declare lost a prefill that crashed at `crash_ns`, ns: the first
/// heartbeat to miss is the first multiple of the interval at or after the crash (never the
/// one at time 0, before any room exists), and the `HEARTBEAT_MAX_FAILURE`-th miss decides.
pub fn detection_ns(crash_ns: Nanos) -> Nanos {
    let first_miss = crash_ns.div_ceil(HEARTBEAT_INTERVAL_NS).max(1) * HEARTBEAT_INTERVAL_NS;
    first_miss + (HEARTBEAT_MAX_FAILURE - 1) * HEARTBEAT_INTERVAL_NS
}

/// `_handle_node_failure`'s failure reason (`common/conn.py`):
/// `f"Lost connection with prefill instance (bootstrap_addr: {failed_bootstrap_addr})"`.
pub fn lost_prefill(bootstrap_addr: &str) -> String {
    format!("Lost connection with prefill instance (bootstrap_addr: {bootstrap_addr})")
}

/// The bootstrap address of prefill instance `p` (prefills come first in the global
/// numbering, so its instance number is its prefill index), for messages.
pub fn bootstrap_addr(p: PrefillId) -> String {
    format!("10.0.{}.{}:{}", p.0 / 256, p.0 % 256, BOOTSTRAP_PORT)
}

/// The pending heartbeat verdict on each crashed prefill.
pub struct Heartbeat {
    pending: IdVec<PrefillId, Option<EventKey>>,
}

impl Heartbeat {
    /// No verdict pending on any of `prefills` prefill instances.
    pub fn new(prefills: usize) -> Self {
        let mut pending = IdVec::default();
        for _ in 0..prefills {
            pending.push(None);
        }
        Self { pending }
    }

    /// Prefill `p` crashed now: its `Event::HeartbeatLost` is scheduled at
    /// [`detection_ns`] (replacing one still pending from an earlier crash).
    pub fn prefill_down(&mut self, p: PrefillId, q: &mut EventQueue<Event>) {
        let key = q.schedule_keyed(detection_ns(q.now()), Event::HeartbeatLost { prefill: p });
        if let Some(old) = self.pending[p].replace(key) {
            q.cancel(old);
        }
    }

    /// Prefill `p` is back: a verdict still pending is cancelled (its heartbeats answer again
    /// before the decodes gave up).
    pub fn prefill_up(&mut self, p: PrefillId, q: &mut EventQueue<Event>) {
        if let Some(k) = self.pending[p].take() {
            q.cancel(k);
        }
    }

    /// `Event::HeartbeatLost` for `p` fired: `_handle_node_failure` fails every room of `p`
    /// that has not reached `Success` on the decode side, in id order (`Effect::Fail`:
    /// `peer_lost` with its text).
    pub fn lost(&mut self, p: PrefillId, cx: &mut Ctx<'_>) {
        self.pending[p] = None;
        let message = lost_prefill(&bootstrap_addr(p));
        let rooms = cx
            .reqs
            .matching(|q| q.prefill == p && q.receiver != KvPoll::Success);
        cx.fx.extend(rooms.into_iter().map(|req| Effect::Fail {
            req,
            kind: ErrorKind::PeerLost,
            message: message.clone(),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit::{Sim, request};

    const S: Nanos = NS_PER_S;

    /// Two misses × 5 s from the crash instant: a crash at 12 s misses the heartbeats of 15 s
    /// and 20 s and is declared lost at 20 s; one exactly at 15 s misses 15 s and 20 s too; one
    /// at 0.5 s misses 5 s and 10 s (none goes out at 0).
    #[test]
    fn a_crashed_prefill_is_lost_at_its_second_missed_heartbeat() {
        assert_eq!(detection_ns(12 * S), 20 * S);
        assert_eq!(detection_ns(15 * S), 20 * S);
        assert_eq!(detection_ns(15 * S + 1), 25 * S);
        assert_eq!(detection_ns(S / 2), 10 * S);
        assert_eq!(detection_ns(0), 10 * S);
        let mut sim = Sim::default();
        let mut hb = Heartbeat::new(2);
        sim.q.schedule_at(12 * S, Event::Tick);
        sim.q.pop();
        hb.prefill_down(PrefillId(1), &mut sim.q);
        let (t, ev) = sim.q.pop().unwrap();
        assert_eq!(t, 20 * S);
        assert!(matches!(
            ev,
            Event::HeartbeatLost {
                prefill: PrefillId(1)
            }
        ));
    }

    /// A restart before the verdict cancels it; a second crash replaces the first verdict.
    #[test]
    fn a_restart_before_detection_cancels_it() {
        let mut sim = Sim::default();
        let mut hb = Heartbeat::new(1);
        sim.q.schedule_at(12 * S, Event::Tick);
        sim.q.pop();
        hb.prefill_down(PrefillId(0), &mut sim.q);
        hb.prefill_up(PrefillId(0), &mut sim.q);
        assert!(sim.q.pop().is_none(), "the decodes never notice");
        sim.q.schedule_at(13 * S, Event::Tick);
        sim.q.pop();
        hb.prefill_down(PrefillId(0), &mut sim.q);
        sim.q.schedule_at(16 * S, Event::Tick);
        sim.q.pop();
        hb.prefill_down(PrefillId(0), &mut sim.q);
        let times: Vec<_> = std::iter::from_fn(|| sim.q.pop()).map(|e| e.0).collect();
        assert_eq!(times, [25 * S], "one verdict, from the later crash");
    }

    /// `_handle_node_failure` fails the rooms of the lost prefill that are not yet Success on
    /// the decode side, as `peer_lost` with sglang's text; other rooms are untouched.
    #[test]
    fn a_lost_prefill_fails_its_rooms_not_yet_success() {
        let mut sim = Sim::default();
        let a = request(&mut sim.reqs, 0, 16, 4);
        let b = request(&mut sim.reqs, 1, 16, 4);
        let c = request(&mut sim.reqs, 2, 16, 4);
        sim.reqs.get_mut(b).unwrap().receiver = KvPoll::Success;
        sim.reqs.get_mut(c).unwrap().prefill = PrefillId(1);
        let mut hb = Heartbeat::new(2);
        hb.lost(PrefillId(0), &mut sim.ctx());
        let message = "Lost connection with prefill instance (bootstrap_addr: 10.0.0.0:8998)";
        assert_eq!(
            sim.fx,
            [Effect::Fail {
                req: a,
                kind: ErrorKind::PeerLost,
                message: message.into(),
            }]
        );
    }
}
