//! Client disconnects and aborts as `World` routes them (`docs/sglang-pd.md` §21): a request's
//! deadline is drawn at routing; when it passes, the servers see the closed connection at
//! their next look (`sglang::abort::detect_at`) and abort the request on both sides; under
//! `decode_waits` a prefill failure leaves the decode side holding the request (an orphan).
//! sglang's rules are `sglang::abort`'s; what the aborts cost is kept by the observer
//! `metrics::aborts::Aborts`, which `World` tells what the rules decided. Nothing here runs,
//! allocates or schedules unless the scenario models aborts (`Scenario::aborts`).

use crate::metrics::aborts::Aborts;
use crate::sglang::abort as rules;
use crate::sglang::prefill::PrefillServer;
use crate::vocab::Outcome;
use crate::vocab::event::{Event, Wake};
use crate::vocab::requests::{ReqRef, Requests};

use super::World;

/// Prefill `s`'s forward ended (or, with `only`, one request of it is aborted): the observer
/// credits each request in it its tokens and its token share of the forward's GPU time.
#[inline]
pub(super) fn credit_forward(
    aborts: Option<&Aborts>,
    s: &PrefillServer,
    only: Option<ReqRef>,
    reqs: &mut Requests,
) {
    if let Some(a) = aborts {
        let gpu_ns = s.forward_ns as f64 * s.core.gpus.len() as f64;
        a.credit_forward(s.batch(), gpu_ns, only, reqs);
    }
}

impl World<'_> {
    /// The client of `r` disconnected (`detected: false`), or the servers look now.
    pub(super) fn on_client_disconnected(&mut self, r: ReqRef, detected: bool) {
        let now = self.q.now();
        let Some(req) = self.reqs.get_mut(r) else {
            // It ended before its client gave up.
            return;
        };
        let aborts = self.aborts.as_deref_mut().expect("scheduled by the aborts");
        if !detected {
            aborts.disconnected(req, now);
            let streaming = req.row.first_token_ns.is_some();
            let at = rules::detect_at(req.row.arrival_ns, now, streaming);
            if at > now {
                self.q.schedule_at(
                    at,
                    Event::ClientDisconnected {
                        req: r,
                        detected: true,
                    },
                );
                return;
            }
        }
        // The decode's steps up to now first: where the request is depends on them.
        let d = req.decode;
        self.decodes[d].touch(d, &mut self.q, &mut self.reqs, watchers!(self));
        let aborts = self.aborts.as_deref_mut().expect("scheduled by the aborts");
        let req = self.reqs.get_mut(r).expect("live");
        let stage = rules::stage(req);
        let leaked = !rules::decode_releases(stage, aborts.params().decode_queue);
        aborts.aborted(req, stage, leaked);
        // The prefill forward in progress completes (`to_finish` is read after it): its share
        // is spent on this request.
        let p = req.prefill;
        credit_forward(Some(&*aborts), &self.prefills[p], Some(r), &mut self.reqs);
        // An abort is no error: its row carries no message (sglang's line is
        // `rules::disconnected`).
        self.end(r, Outcome::Aborted, None);
    }

    /// The prefill side of `r` failed in `Bootstrapping` with `message`. Under `decode_waits`
    /// the router keeps waiting on the decode leg: the prefill gives back what it holds and
    /// the request lives on at the decode (true is returned); otherwise nothing is done.
    pub(super) fn orphan_decode(&mut self, r: ReqRef, message: &str) -> bool {
        let Some(aborts) = self.aborts.as_deref_mut() else {
            return false;
        };
        if !rules::decode_outlives_prefill_failure(aborts.params().propagation) {
            return false;
        }
        let now = self.q.now();
        let req = self.reqs.get_mut(r).expect("a live request timed out");
        let p = req.prefill;
        if !self.prefills[p].let_go(req) {
            return false;
        }
        // Not an error count: `errors` counts requests by how they ended, and this one ends
        // later (the decode's waiting timeout, or its client's disconnect); the summary's
        // `aborts.orphaned` counts it and quotes sglang's first message.
        aborts.orphaned(req, message, now);
        self.sync(super::sampler::CoreRef::Prefill(p));
        self.wake.push(Wake::Prefill(p));
        true
    }
}
