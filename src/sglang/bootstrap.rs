//! The PD handshake of one request between its prefill and its decode (`docs/sglang-pd.md`
//! §2, §2.6, §16.1): the prefill's KV sender and the decode's KV receiver, their `KVPoll`
//! states and their clocks, and when each side's queue has the request. sglang spreads it over
//! both schedulers and the connection (`disaggregation/prefill.py`, `disaggregation/decode.py`,
//! `disaggregation/common/conn.py`, `disaggregation/mooncake/conn.py`); here it is one
//! component over the request table, which moves a request's polls and hands on what the
//! servers do next ([`Handoff`], applied by `sim::World`):
//!
//! ```text
//! routed          sender Bootstrapping, its clock runs              (CommonKVSender, bootstrap timeout)
//! tokenized       the prefill's scheduler has it when its tokenizer manager is done; decode's
//!                 receiver handshakes with the prefill's bootstrap server      → Bootstrapped
//! handshaken      → decode's prealloc queue                          (DecodePreallocQueue.add)
//! page_ids_sent   decode preallocated: its page ids go to the prefill, the receiver's
//!                 WaitingForInput clock runs       (pop_preallocated → kv_receiver.init) → MetadataArrived
//! page_ids_arrived  sender WaitingForInput → the prefill's waiting queue (PrefillBootstrapQueue.pop_bootstrapped)
//! transferred     conclude_transfer(Success) reached decode: receiver Success, the first token
//!                 with the aux data                                  (DecodeTransferQueue.pop_transferred)
//! timed_out       a clock ran out: the request fails                 (_check_bootstrap_timeout,
//!                                                                     _check_waiting_timeout)
//! ```
//!
//! The transfer between `page_ids_arrived` and `transferred` is the transfer workers'
//! (`sglang::transfer`); a retraction sends a request back to `Bootstrapping` on both sides
//! (`sglang::decode`). The component calls no other: what the prefetch policy of the prefill
//! decides (`PrefillServer::prefetch_holds`) it is handed as a function.

use crate::config::Scenario;
use crate::engine::{EventQueue, Nanos};
use crate::vocab::event::{Event, lane};
use crate::vocab::ids::{DecodeId, PrefillId};
use crate::vocab::requests::{KvPoll, Req, ReqRef};

use super::transfer::PollTimeout;
use super::{Ctx, Failure};

/// What one move of a request's handshake hands on to its servers; `World` applies it
/// (`World::hand_on`).
#[derive(Debug, PartialEq)]
pub enum Handoff {
    /// Nothing more: the request ended, or its side moved on meanwhile.
    Nothing,
    /// Decode has tokenized the request and handshaken with the prefill: it joins decode
    /// `decode`'s prealloc queue, which runs (`DecodePreallocQueue.add`; a server that is down
    /// takes nothing).
    Prealloc {
        /// The decode instance.
        decode: DecodeId,
        /// The request.
        req: ReqRef,
    },
    /// Decode's page ids reached the prefill, whose sender is now `WaitingForInput`: the
    /// request queues at prefill `prefill` for a batch, and its scheduler runs
    /// (`PrefillBootstrapQueue.pop_bootstrapped`).
    Waiting {
        /// The prefill instance.
        prefill: PrefillId,
        /// The request.
        req: ReqRef,
    },
    /// The transfer's `Success` reached decode `decode`, whose receiver is now `Success`: the
    /// KV landed (`DecodeTransferQueue.pop_transferred`). `first_token`: the prompt tokens of
    /// the request whose first token came with the aux data now (`None` after a retraction:
    /// its first token came before, and its TTFT is not reset).
    Landed {
        /// The decode instance.
        decode: DecodeId,
        /// The request.
        req: ReqRef,
        /// Prompt tokens, when this is the request's first token.
        first_token: Option<u32>,
    },
    /// A clock ran out: the request fails with `failure`. `sender`: the prefill's clock (in
    /// `Bootstrapping`), a failure whose decode leg may outlive it (`sim::abort`).
    TimedOut {
        /// The request.
        req: ReqRef,
        /// Its kind and sglang's text.
        failure: Failure,
        /// Whether the prefill's sender timed out (else the decode's receiver).
        sender: bool,
    },
}

/// The handshake's figures; its state is each request's (`Req::sender`, `Req::receiver`, their
/// clocks, `Req::prefill_ready_ns`).
#[derive(Clone, Copy, Debug)]
pub struct Handshake {
    /// `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`, ns: the sender's clock; `None` where the
    /// backend's sender has none (NIXL before sglang PR #34692: a room whose decode metadata
    /// never comes stays `Bootstrapping`).
    bootstrap_timeout_ns: Option<Nanos>,
    /// `--disaggregation-transfer-backend`: whose text a sender's timeout has.
    backend: crate::spec::TransferBackend,
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, ns: the receiver's clock.
    waiting_timeout_ns: Nanos,
    /// One control message from decode to prefill (the page ids), ns.
    control_latency_ns: Nanos,
    /// Decode's KV receiver's handshake with the prefill's bootstrap server
    /// (`compute.bootstrap_handshake_s`), ns.
    handshake_ns: Nanos,
}

impl Handshake {
    /// The handshake of `sc`'s servers.
    pub fn new(sc: &Scenario) -> Self {
        Self {
            bootstrap_timeout_ns: sc.sglang.sender_timeout_ns(),
            backend: sc.sglang.transfer_backend,
            waiting_timeout_ns: sc.sglang.waiting_timeout_ns,
            control_latency_ns: sc.fabric.control_latency_ns,
            handshake_ns: crate::engine::ns_from_secs_ceil(sc.compute.bootstrap_handshake_s),
        }
    }

    /// The router sent `r` to its prefill and decode: the prefill's sender is
    /// `Bootstrapping`, its clock running (`CommonKVSender._check_bootstrap_timeout`), if the
    /// backend's sender has one.
    #[inline]
    pub fn routed(&self, r: ReqRef, cx: &mut Ctx<'_>) {
        let req = cx.reqs.get_mut(r).expect("just routed");
        if let Some(t) = self.bootstrap_timeout_ns {
            PollTimeout::Bootstrap.arm(cx.q, req, r, t);
        }
    }

    /// Both servers' tokenizer managers have `r` (sgl-router sends the request to both):
    /// `ready` says when the prefill's and the decode's are done with it (`None` without
    /// serving costs: both schedulers have it now, the 2023 fit). The prefill's scheduler has
    /// it when its own is done; decode's prealloc queue once decode's is done and its
    /// receiver has handshaken with the prefill's bootstrap server (`Event::Bootstrapped`
    /// then, or [`Handoff::Prealloc`] now).
    #[inline]
    pub fn tokenized(&self, r: ReqRef, ready: Option<(Nanos, Nanos)>, cx: &mut Ctx<'_>) -> Handoff {
        let now = cx.now();
        let req = cx.reqs.get_mut(r).expect("just routed");
        let prealloc = Handoff::Prealloc {
            decode: req.decode,
            req: r,
        };
        let Some((prefill_ns, decode_ns)) = ready else {
            return prealloc;
        };
        req.prefill_ready_ns = prefill_ns;
        let handshaken_ns = decode_ns + self.handshake_ns;
        if handshaken_ns > now {
            cx.q.schedule_at(handshaken_ns, Event::Bootstrapped { req: r });
            return Handoff::Nothing;
        }
        // Nothing to wait for on the decode side (only the first-token path is set).
        prealloc
    }

    /// `Event::Bootstrapped`: decode has tokenized `r` and handshaken; it joins the prealloc
    /// queue unless it ended or moved on meanwhile (a fault, a timeout).
    #[inline]
    pub fn handshaken(&self, r: ReqRef, cx: &mut Ctx<'_>) -> Handoff {
        match cx.reqs.get(r) {
            Some(req) if req.receiver == KvPoll::Bootstrapping => Handoff::Prealloc {
                decode: req.decode,
                req: r,
            },
            _ => Handoff::Nothing,
        }
    }

    /// Decode preallocated each of `admitted` (`DecodePreallocQueue.pop_preallocated` →
    /// `kv_receiver.init`): its page ids go to the prefill, after the control latency, where
    /// they wait for the prefill's own tokenizer manager (`Event::MetadataArrived`); the
    /// receiver's `WaitingForInput` clock starts (`CommonKVReceiver._check_waiting_timeout`).
    /// `held(r, req, at, q)`: whether the prefill's prefetch policy holds the request back past
    /// `at`, when the page ids would be there (it then arranges the release itself:
    /// `PrefillServer::prefetch_holds`).
    #[inline]
    pub fn page_ids_sent(
        &self,
        admitted: &[ReqRef],
        mut held: impl FnMut(ReqRef, &mut Req, Nanos, &mut EventQueue<Event>) -> bool,
        cx: &mut Ctx<'_>,
    ) {
        let arrives = cx.now() + self.control_latency_ns;
        for &r in admitted {
            let req = cx.reqs.get_mut(r).expect("admitted");
            let ready = req.prefill_ready_ns;
            if held(r, req, ready.max(arrives), cx.q) {
                // The prefetch's end (or its timeout) lets it go.
            } else if ready > arrives {
                cx.q.schedule_at(ready, Event::MetadataArrived { req: r });
            } else {
                let metadata = Event::MetadataArrived { req: r };
                cx.q.schedule_lane(lane::CONTROL, self.control_latency_ns, metadata);
            }
            PollTimeout::Waiting.arm(cx.q, req, r, self.waiting_timeout_ns);
        }
    }

    /// `Event::MetadataArrived`: decode's page ids reached the prefill. A sender still
    /// `Bootstrapping` is connected (`WaitingForInput`, its clock stopped) and the request
    /// queues for a prefill batch; one that moved on (a second release of a held request, a
    /// retraction meanwhile) hands on nothing.
    #[inline]
    pub fn page_ids_arrived(&self, r: ReqRef, cx: &mut Ctx<'_>) -> Handoff {
        let now = cx.now();
        let Some(req) = cx.reqs.get_mut(r) else {
            return Handoff::Nothing;
        };
        if req.sender != KvPoll::Bootstrapping {
            return Handoff::Nothing;
        }
        req.sender = KvPoll::WaitingForInput;
        req.row.prefill_queued_ns = Some(now);
        if let Some(k) = req.bootstrap_timeout.take() {
            cx.q.cancel(k);
        }
        Handoff::Waiting {
            prefill: req.prefill,
            req: r,
        }
    }

    /// `Event::TransferSucceeded`: the prefill's `conclude_transfer(Success)` reached decode.
    /// A receiver still `WaitingForInput` is `Success` (its clock stopped), and the prefill's
    /// first token arrives with the aux data (after a retraction the request already has one:
    /// TTFT is not reset).
    #[inline]
    pub fn transferred(&self, r: ReqRef, cx: &mut Ctx<'_>) -> Handoff {
        let now = cx.now();
        let Some(req) = cx.reqs.get_mut(r) else {
            return Handoff::Nothing;
        };
        if req.receiver != KvPoll::WaitingForInput {
            return Handoff::Nothing;
        }
        req.receiver = KvPoll::Success;
        if let Some(k) = req.waiting_timeout.take() {
            cx.q.cancel(k);
        }
        let first_token = req.row.first_token_ns.is_none().then(|| {
            req.row.first_token_ns = Some(now);
            req.input
        });
        Handoff::Landed {
            decode: req.decode,
            req: r,
            first_token,
        }
    }

    /// `clock` of `r` ran out (`Event::BootstrapTimeout`, `Event::WaitingTimeout`): the
    /// request fails with sglang's text (`PollTimeout::fired`).
    pub fn timed_out(&self, r: ReqRef, clock: PollTimeout, cx: &mut Ctx<'_>) -> Handoff {
        let timeout = match clock {
            PollTimeout::Bootstrap => self
                .bootstrap_timeout_ns
                .expect("a sender clock fired that was never armed"),
            PollTimeout::Waiting => self.waiting_timeout_ns,
        };
        let mut failure = clock.fired(r, timeout, cx);
        // MORI's sender checks its own deadline, with its own text (`MoriKVSender.poll`).
        if clock == PollTimeout::Bootstrap && self.backend == crate::spec::TransferBackend::Mori {
            let room = super::transfer::bootstrap_room(cx.seed, r.id);
            let elapsed_s = timeout as f64 / crate::engine::NS_PER_S as f64;
            failure.message = self.backend.bootstrap_timeout_text(room, elapsed_s);
        }
        Handoff::TimedOut {
            req: r,
            failure,
            sender: clock == PollTimeout::Bootstrap,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit::{Sim, request};
    use crate::vocab::ErrorKind;

    /// Timeouts of 30 s and 300 s, a 5 ns control message and a 2 ns handshake.
    fn handshake() -> Handshake {
        Handshake {
            bootstrap_timeout_ns: Some(30_000_000_000),
            backend: crate::spec::TransferBackend::Mooncake,
            waiting_timeout_ns: 300_000_000_000,
            control_latency_ns: 5,
            handshake_ns: 2,
        }
    }

    /// One request's polls through the handshake, each move once: the sender's clock from
    /// routing to the page ids, the receiver's from the prealloc to the landing, the first
    /// token once; a move that comes again hands on nothing.
    #[test]
    fn each_poll_moves_once() {
        let (h, mut sim) = (handshake(), Sim::default());
        let r = request(&mut sim.reqs, 0, 100, 8);
        h.routed(r, &mut sim.ctx());
        assert!(sim.reqs.get(r).unwrap().bootstrap_timeout.is_some());
        // The prefill's tokenizer is done at 10 ns, decode's at 20 ns: decode has it after
        // its handshake, at 22 ns.
        assert_eq!(
            h.tokenized(r, Some((10, 20)), &mut sim.ctx()),
            Handoff::Nothing
        );
        assert_eq!(sim.reqs.get(r).unwrap().prefill_ready_ns, 10);
        assert_eq!(sim.q.pop(), Some((22, Event::Bootstrapped { req: r })));
        let prealloc = Handoff::Prealloc {
            decode: DecodeId(0),
            req: r,
        };
        assert_eq!(h.handshaken(r, &mut sim.ctx()), prealloc);
        // Decode preallocated it (`DecodeServer::try_prealloc`): its page ids leave at 22 ns
        // and reach the prefill at 27 ns, whose scheduler has had it since 10 ns.
        sim.reqs.get_mut(r).unwrap().receiver = KvPoll::WaitingForInput;
        h.page_ids_sent(&[r], |_, _, _, _| false, &mut sim.ctx());
        assert!(sim.reqs.get(r).unwrap().waiting_timeout.is_some());
        assert_eq!(sim.q.pop(), Some((27, Event::MetadataArrived { req: r })));
        let waiting = Handoff::Waiting {
            prefill: PrefillId(0),
            req: r,
        };
        assert_eq!(h.page_ids_arrived(r, &mut sim.ctx()), waiting);
        let req = sim.reqs.get(r).unwrap();
        assert_eq!(
            (req.sender, req.bootstrap_timeout),
            (KvPoll::WaitingForInput, None)
        );
        assert_eq!(req.row.prefill_queued_ns, Some(27));
        assert_eq!(h.page_ids_arrived(r, &mut sim.ctx()), Handoff::Nothing);
        let landed = |first_token| Handoff::Landed {
            decode: DecodeId(0),
            req: r,
            first_token,
        };
        assert_eq!(h.transferred(r, &mut sim.ctx()), landed(Some(100)));
        let req = sim.reqs.get(r).unwrap();
        assert_eq!((req.receiver, req.waiting_timeout), (KvPoll::Success, None));
        assert_eq!(req.row.first_token_ns, Some(27));
        assert_eq!(h.transferred(r, &mut sim.ctx()), Handoff::Nothing);
        // Retracted and transferred again: its first token came before.
        sim.reqs.get_mut(r).unwrap().receiver = KvPoll::WaitingForInput;
        assert_eq!(h.transferred(r, &mut sim.ctx()), landed(None));
        // Nobody: nothing handed on.
        let gone = sim.reqs.take(r).map(|_| r).unwrap();
        assert_eq!(h.handshaken(gone, &mut sim.ctx()), Handoff::Nothing);
        assert_eq!(h.page_ids_arrived(gone, &mut sim.ctx()), Handoff::Nothing);
        assert_eq!(h.transferred(gone, &mut sim.ctx()), Handoff::Nothing);
    }

    /// Without serving costs both schedulers have the request at once; the page ids wait for
    /// the prefill's tokenizer manager when it is slower than the control message; a request
    /// the prefetch policy holds gets no message (the prefetch lets it go).
    #[test]
    fn when_each_side_has_it() {
        let (h, mut sim) = (handshake(), Sim::default());
        let (a, b, c) = (
            request(&mut sim.reqs, 0, 100, 8),
            request(&mut sim.reqs, 1, 100, 8),
            request(&mut sim.reqs, 2, 100, 8),
        );
        let prealloc = Handoff::Prealloc {
            decode: DecodeId(0),
            req: a,
        };
        assert_eq!(h.tokenized(a, None, &mut sim.ctx()), prealloc);
        // Decode's side took no time: it joins at once.
        sim.q.advance_to(50);
        let now_too = Handoff::Prealloc {
            decode: DecodeId(0),
            req: b,
        };
        assert_eq!(h.tokenized(b, Some((90, 48)), &mut sim.ctx()), now_too);
        h.page_ids_sent(&[a, b, c], |r, _, at, _| r == c && at == 55, &mut sim.ctx());
        assert_eq!(sim.q.pop(), Some((55, Event::MetadataArrived { req: a })));
        assert_eq!(sim.q.pop(), Some((90, Event::MetadataArrived { req: b })));
        assert_eq!(
            sim.q.pop().map(|(_, e)| e),
            Some(Event::WaitingTimeout { req: a })
        );
        assert!(sim.reqs.get(c).unwrap().waiting_timeout.is_some());
    }

    /// A clock that runs out fails its request with its kind; the prefill's says so.
    #[test]
    fn a_clock_runs_out() {
        let (h, mut sim) = (handshake(), Sim::default());
        let r = request(&mut sim.reqs, 0, 100, 8);
        h.routed(r, &mut sim.ctx());
        let (t, e) = sim.q.pop().unwrap();
        assert_eq!((t, e), (30_000_000_000, Event::BootstrapTimeout { req: r }));
        let Handoff::TimedOut {
            req,
            failure,
            sender,
        } = h.timed_out(r, PollTimeout::Bootstrap, &mut sim.ctx())
        else {
            panic!("a timeout fails its request");
        };
        assert_eq!(
            (req, failure.kind, sender),
            (r, ErrorKind::BootstrapTimeout, true)
        );
    }
}
