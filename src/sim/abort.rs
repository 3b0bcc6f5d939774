//! Client disconnects and aborts as `World` routes them (`docs/sglang-pd.md` §21): a request's
//! deadline is drawn at arrival; when it passes, the servers see the closed connection at
//! their next look (`sglang::abort::detect_at`) and abort the request on both sides; under
//! `decode_waits` a prefill failure leaves the decode side holding the request (an orphan).
//! The book keeps what `summary.json` `aborts` reports. Nothing here runs, allocates or
//! schedules unless the scenario models aborts (`Scenario::aborts`).

use crate::config::aborts::{AbortParams, Deadline, DecodeQueueAbort};
use crate::engine::{NS_PER_S, Nanos};
use crate::metrics::aborts::{AbortBook, AbortSummary};
use crate::sglang::abort as rules;
use crate::vocab::Outcome;
use crate::vocab::abort::AbortTrack;
use crate::vocab::event::{Event, Wake};
use crate::vocab::ids::PrefillId;
use crate::vocab::requests::ReqRef;
use crate::workload::timeout::DeadlineSampler;

use super::World;

/// The run's aborts: the scenario's parameters, the deadline sampler and the book
/// (`metrics::aborts::AbortBook`) that reports them.
pub(super) struct AbortState {
    params: AbortParams,
    sampler: Option<DeadlineSampler>,
    book: AbortBook,
}

impl AbortState {
    pub(super) fn new(params: AbortParams, seed: u64) -> Self {
        Self {
            sampler: params.client_timeout.map(|d| DeadlineSampler::new(d, seed)),
            params,
            book: AbortBook::default(),
        }
    }
}

/// The run's client deadlines in words, for the summary (`None`: clients wait for ever).
fn deadline_words(p: &AbortParams) -> Option<String> {
    let drawn = p.client_timeout.map(describe);
    if !p.trace_deadlines {
        return drawn;
    }
    let own = "each trace row's timeout_s";
    Some(match drawn {
        Some(d) => format!("{own}; rows without one: {d}"),
        None => format!("{own}; rows without one wait for ever"),
    })
}

/// A deadline in words, for the summary.
fn describe(d: Deadline) -> String {
    match d {
        Deadline::Fixed(ns) => format!("fixed {} s", ns as f64 / NS_PER_S as f64),
        Deadline::Exponential { mean_s } => format!("exponential, mean {mean_s} s"),
        Deadline::Lognormal { mean_s, cv } => format!("lognormal, mean {mean_s} s, cv {cv}"),
    }
}

impl World<'_> {
    /// A request was routed: its client's deadline (`own_wait_ns`, a trace row's `timeout_s`,
    /// else one drawn from `[workload.client_timeout]`) is set and its disconnect scheduled.
    pub(super) fn abort_arrived(&mut self, r: ReqRef, own_wait_ns: Option<Nanos>) {
        let Some(book) = self.aborts.as_deref_mut() else {
            return;
        };
        let req = self.reqs.get_mut(r).expect("just routed");
        let mut track = AbortTrack::default();
        // The draw is made even for a row with its own deadline, so the rows without one get
        // the same draws whichever rows carry theirs.
        let drawn = book.sampler.as_mut().map(|s| s.next_wait_ns());
        if let Some(wait) = own_wait_ns.or(drawn) {
            let at = req.row.arrival_ns.saturating_add(wait);
            track.deadline_ns = Some(at);
            self.q.schedule_at(
                at,
                Event::ClientDisconnected {
                    req: r,
                    detected: false,
                },
            );
        }
        req.abort = Some(Box::new(track));
    }

    /// Decode preallocated `r`'s pages now.
    pub(super) fn abort_preallocated(&mut self, r: ReqRef) {
        if self.aborts.is_none() {
            return;
        }
        let now = self.q.now();
        if let Some(a) = self.reqs.get_mut(r).and_then(|q| q.abort.as_deref_mut()) {
            a.decode_alloc_ns = Some(now);
        }
    }

    /// The client of `r` disconnected (`detected: false`), or the servers look now.
    pub(super) fn on_client_disconnected(&mut self, r: ReqRef, detected: bool) {
        let now = self.q.now();
        let Some(req) = self.reqs.get_mut(r) else {
            // It ended before its client gave up.
            return;
        };
        let book = self.aborts.as_deref_mut().expect("scheduled by the book");
        if !detected {
            book.book.disconnected();
            let a = req.abort.as_deref_mut().expect("tracked at arrival");
            a.doomed_ns.get_or_insert(now);
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
        self.touch_decode(d);
        let book = self.aborts.as_deref_mut().expect("scheduled by the book");
        let req = self.reqs.get(r).expect("live");
        let stage = rules::stage(req);
        book.book.aborted(stage);
        if !rules::decode_releases(stage, book.params.decode_queue) {
            let a = self
                .reqs
                .get_mut(r)
                .and_then(|q| q.abort.as_deref_mut())
                .expect("tracked at arrival");
            a.decode_leaked = true;
        }
        let req = self.reqs.get(r).expect("live");
        // The prefill forward in progress completes (`to_finish` is read after it): its share
        // is spent on this request.
        let p = req.prefill;
        self.credit_forward(p, Some(r));
        let msg = rules::disconnected(r.id);
        self.end(r, Outcome::Aborted, None, &msg);
    }

    /// Prefill `p`'s forward ended (or, with `only`, one request of it is aborted): each
    /// request in it is credited its tokens and its token share of the forward's GPU time.
    pub(super) fn credit_forward(&mut self, p: PrefillId, only: Option<ReqRef>) {
        if self.aborts.is_none() {
            return;
        }
        let s = &self.prefills[p];
        let total: u64 = s.batch().iter().map(|&(_, n)| u64::from(n)).sum();
        if total == 0 {
            return;
        }
        let gpu_ns = s.forward_ns as f64 * s.core.gpus.len() as f64;
        for &(r, n) in s.batch() {
            if only.is_some_and(|o| o != r) {
                continue;
            }
            if let Some(a) = self.reqs.get_mut(r).and_then(|q| q.abort.as_deref_mut()) {
                a.prefill_tokens += u64::from(n);
                a.prefill_gpu_ns += gpu_ns * f64::from(n) / total as f64;
            }
        }
    }

    /// `r` is about to end with `outcome`: if it was doomed, the pages it still holds on each
    /// side are counted as held for nothing until now; an aborted request's prefill work is
    /// counted as wasted.
    pub(super) fn abort_released(&mut self, r: ReqRef, outcome: Outcome) {
        let Some(book) = self.aborts.as_deref_mut() else {
            return;
        };
        let now = self.q.now();
        let Some(req) = self.reqs.get(r) else {
            return;
        };
        let Some(a) = req.abort.as_deref() else {
            return;
        };
        if outcome == Outcome::Aborted {
            book.book.wasted(a.prefill_tokens, a.prefill_gpu_ns);
        }
        let Some(doomed) = a.doomed_ns else {
            return;
        };
        if req.prefill_holds() {
            let alloc = req.row.prefill_start_ns.unwrap_or(now);
            book.book
                .prefill_released(req.on_prefill.pages.len(), alloc, doomed, now);
        }
        if req.decode_allocated && a.decode_leaked {
            book.book.leaked(req.on_decode.pages.len() as u64, now);
        } else if req.decode_allocated {
            let alloc = a.decode_alloc_ns.unwrap_or(now);
            book.book
                .decode_released(req.on_decode.pages.len(), alloc, doomed, now);
        }
    }

    /// The prefill side of `r` failed in `Bootstrapping` with `message`. Under `decode_waits`
    /// the router keeps waiting on the decode leg: the prefill gives back what it holds and
    /// the request lives on at the decode (true is returned); otherwise nothing is done.
    pub(super) fn orphan_decode(&mut self, r: ReqRef, message: &str) -> bool {
        let Some(book) = self.aborts.as_deref_mut() else {
            return false;
        };
        if !rules::decode_outlives_prefill_failure(book.params.propagation) {
            return false;
        }
        let now = self.q.now();
        let req = self.reqs.get_mut(r).expect("a live request timed out");
        let p = req.prefill;
        if !self.prefills[p].let_go(req) {
            return false;
        }
        book.book.orphaned(message);
        let a = req.abort.as_deref_mut().expect("tracked at arrival");
        a.prefill_released = true;
        a.doomed_ns.get_or_insert(now);
        // Not an error count: `errors` counts requests by how they ended, and this one ends
        // later (the decode's waiting timeout, or its client's disconnect); the summary's
        // `aborts.orphaned` counts it and quotes sglang's first message.
        self.sync_prefill(p);
        self.wake.push(Wake::Prefill(p));
        true
    }

    /// `summary.json` `aborts`, when the scenario models aborts.
    pub(super) fn abort_summary(&self) -> Option<AbortSummary> {
        let b = self.aborts.as_deref()?;
        Some(b.book.summary(
            b.params.propagation.as_str().to_string(),
            deadline_words(&b.params),
            b.params.decode_queue == DecodeQueueAbort::Leak,
            self.q.now(),
        ))
    }
}
