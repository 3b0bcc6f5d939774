//! `summary.json` `aborts`: client disconnects, where the servers aborted the requests, the
//! prefill work they wasted, and the pages they held for nothing, per side (present only when
//! the scenario models aborts: `[workload.client_timeout]`, `router.abort_propagation`, or a
//! trace whose rows give `timeout_s`).
//!
//! [`Aborts`] is the observer `sim::World` tells of each step of a request's abort path
//! (`docs/sglang-pd.md` §21): it draws each client's deadline at routing, keeps each
//! request's [`AbortTrack`] and the [`AbortBook`]. sglang's rules — when a disconnect is
//! seen, where a request is, whether decode frees it, whether a prefill failure orphans the
//! decode leg — are `sglang::abort`'s; `World` applies them and tells this observer what
//! they decided. Nothing here runs unless the scenario models aborts.

use serde::{Deserialize, Serialize};

use crate::config::aborts::{AbortParams, Deadline, DecodeQueueAbort};
use crate::engine::{NS_PER_S, Nanos};
use crate::vocab::Outcome;
use crate::vocab::abort::{AbortStage, AbortTrack};
use crate::vocab::requests::{Req, ReqRef, Requests};
use crate::workload::timeout::DeadlineSampler;

/// The run's aborts: the scenario's parameters, the clients' deadline sampler and the book
/// that reports them (`summary.json` `aborts`).
pub struct Aborts {
    params: AbortParams,
    deadlines: Option<DeadlineSampler>,
    book: AbortBook,
}

impl Aborts {
    /// The aborts of a run with `params`, deadlines drawn from `seed`'s stream.
    pub fn new(params: AbortParams, seed: u64) -> Self {
        Self {
            deadlines: params.client_timeout.map(|d| DeadlineSampler::new(d, seed)),
            params,
            book: AbortBook::default(),
        }
    }

    /// The scenario's abort parameters (the rules `World` applies read them).
    #[inline]
    pub fn params(&self) -> &AbortParams {
        &self.params
    }

    /// `req` was routed: its client's deadline (`own_wait_ns`, a trace row's `timeout_s`,
    /// else one drawn from `[workload.client_timeout]`) is set and its track begun. Returns
    /// when its client disconnects, ns (absolute; `None`: it waits for ever).
    pub fn arrived(&mut self, req: &mut Req, own_wait_ns: Option<Nanos>) -> Option<Nanos> {
        let mut track = AbortTrack::default();
        // The draw is made even for a row with its own deadline, so the rows without one get
        // the same draws whichever rows carry theirs.
        let drawn = self.deadlines.as_mut().map(|s| s.next_wait_ns());
        let at = own_wait_ns
            .or(drawn)
            .map(|wait| req.row.arrival_ns.saturating_add(wait));
        track.deadline_ns = at;
        req.abort = Some(Box::new(track));
        at
    }

    /// Decode preallocated `req`'s pages at `now`.
    #[inline]
    pub fn preallocated(&self, req: &mut Req, now: Nanos) {
        if let Some(a) = req.abort.as_deref_mut() {
            a.decode_alloc_ns = Some(now);
        }
    }

    /// `req`'s client disconnected at `now`: from now on it is doomed.
    pub fn disconnected(&mut self, req: &mut Req, now: Nanos) {
        self.book.disconnected();
        let a = req.abort.as_deref_mut().expect("tracked at arrival");
        a.doomed_ns.get_or_insert(now);
    }

    /// The servers aborted `req` at `stage`; `leaked`: decode drops it without giving its
    /// pages back (`sglang::abort::decode_releases` said no).
    pub fn aborted(&mut self, req: &mut Req, stage: AbortStage, leaked: bool) {
        self.book.aborted(stage);
        if leaked {
            req.abort
                .as_deref_mut()
                .expect("tracked at arrival")
                .decode_leaked = true;
        }
    }

    /// A prefill forward of `batch` (each request with its tokens) took `gpu_ns` GPU-ns (its
    /// time times the instance's GPUs): each request in it (only `only`, when given) is
    /// credited its tokens and its token share of that time.
    pub fn credit_forward(
        &self,
        batch: &[(ReqRef, u32)],
        gpu_ns: f64,
        only: Option<ReqRef>,
        reqs: &mut Requests,
    ) {
        let total: u64 = batch.iter().map(|&(_, n)| u64::from(n)).sum();
        if total == 0 {
            return;
        }
        for &(r, n) in batch {
            if only.is_some_and(|o| o != r) {
                continue;
            }
            if let Some(a) = reqs.get_mut(r).and_then(|q| q.abort.as_deref_mut()) {
                a.prefill_tokens += u64::from(n);
                a.prefill_gpu_ns += gpu_ns * f64::from(n) / total as f64;
            }
        }
    }

    /// `req` is about to end with `outcome` at `now`: if it was doomed, the pages it still
    /// holds on each side are counted as held for nothing until now; an aborted request's
    /// prefill work is counted as wasted.
    pub fn released(&mut self, req: &Req, outcome: Outcome, now: Nanos) {
        let Some(a) = req.abort.as_deref() else {
            return;
        };
        let book = &mut self.book;
        if outcome == Outcome::Aborted {
            book.wasted(a.prefill_tokens, a.prefill_gpu_ns);
        }
        let Some(doomed) = a.doomed_ns else {
            return;
        };
        if req.prefill_holds() {
            let alloc = req.row.prefill_start_ns.unwrap_or(now);
            book.prefill_released(req.on_prefill.pages.len(), alloc, doomed, now);
        }
        if req.decode_allocated && a.decode_leaked {
            book.leaked(req.on_decode.pages.len() as u64, now);
        } else if req.decode_allocated {
            let alloc = a.decode_alloc_ns.unwrap_or(now);
            book.decode_released(req.on_decode.pages.len(), alloc, doomed, now);
        }
    }

    /// `req`'s prefill side failed at `now` with `message` and gave back what it held, while
    /// its decode side keeps it (`decode_waits`): an orphan, doomed from now.
    pub fn orphaned(&mut self, req: &mut Req, message: &str, now: Nanos) {
        self.book.orphaned(message);
        let a = req.abort.as_deref_mut().expect("tracked at arrival");
        a.prefill_released = true;
        a.doomed_ns.get_or_insert(now);
    }

    /// `summary.json` `aborts` at `now`.
    pub fn summary(&self, now: Nanos) -> AbortSummary {
        let p = &self.params;
        self.book.summary(
            p.propagation.as_str().to_string(),
            deadline_words(p),
            p.decode_queue == DecodeQueueAbort::Leak,
            now,
        )
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

/// `summary.json` `aborts`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AbortSummary {
    /// `router.abort_propagation` in force (`cancel_paired` or `decode_waits`).
    pub propagation: String,
    /// The clients' deadline, in words (`null`: clients wait for ever).
    pub client_timeout: Option<String>,
    /// Requests whose client deadline passed before they ended.
    pub disconnected: u64,
    /// Requests the servers aborted for it (`requests.aborted`).
    pub aborted: u64,
    /// Aborted requests by where they were, in pipeline order; stages with none left out.
    pub by_stage: Vec<StageCount>,
    /// Requests whose prefill failed while the decode side kept them (`decode_waits`).
    pub orphaned: u64,
    /// sglang's message of the first prefill failure that orphaned a request.
    pub orphan_message: Option<String>,
    /// Prompt tokens prefill computed for requests later aborted.
    pub wasted_prefill_tokens: u64,
    /// GPU-seconds of those prefill forwards (each forward's time shared by tokens, times the
    /// instance's GPUs).
    pub wasted_prefill_gpu_s: f64,
    /// Pages the doomed requests (aborted or orphaned) held on the prefill side.
    pub prefill: HeldPages,
    /// Pages the doomed requests held on the decode side (leaked pages not included: they
    /// were never released).
    pub decode: HeldPages,
    /// Pages decode never gave back (`sglang.decode_queue_abort = "leak"`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_leaked: Option<LeakedPages>,
}

/// KV pages decode lost to aborted requests it dropped from its waiting queue without freeing
/// them (sglang before PR #9817).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct LeakedPages {
    /// Aborted requests whose pages leaked.
    pub requests: u64,
    /// Pages lost, all decode instances together (still lost at the run's end).
    pub pages: u64,
    /// Page-seconds they stayed lost, from each abort to the run's end.
    pub page_s: f64,
}

/// Aborted requests at one stage.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct StageCount {
    /// The stage.
    pub stage: AbortStage,
    /// Requests aborted there.
    pub count: u64,
}

/// What doomed requests held on one side: a request is doomed from its client's disconnect
/// (or its prefill's failure, for an orphan) to its end.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct HeldPages {
    /// Doomed requests that still held pages here when they were released.
    pub requests: u64,
    /// KV page-seconds they held here, from allocation to release.
    pub page_s: f64,
    /// Of those, page-seconds held after they were doomed.
    pub page_s_after_doom: f64,
    /// Longest time from a request's doom to the release of its pages here, s (`null` when
    /// none held any).
    pub max_held_after_doom_s: Option<f64>,
    /// Mean of that time over `requests`, s.
    pub mean_held_after_doom_s: Option<f64>,
}

/// Held pages on one side, accumulated.
#[derive(Default, Debug)]
struct Side {
    requests: u64,
    page_ns: f64,
    page_ns_after: f64,
    max_after_ns: Option<Nanos>,
    sum_after_ns: f64,
}

impl Side {
    /// A doomed request released `pages` pages here at `now`, held since `alloc_ns`, doomed at
    /// `doomed_ns`.
    fn release(&mut self, pages: usize, alloc_ns: Nanos, doomed_ns: Nanos, now: Nanos) {
        if pages == 0 {
            return;
        }
        let pages = pages as f64;
        let after = now.saturating_sub(doomed_ns.max(alloc_ns));
        self.requests += 1;
        self.page_ns += pages * now.saturating_sub(alloc_ns) as f64;
        self.page_ns_after += pages * after as f64;
        let held = now.saturating_sub(doomed_ns);
        self.max_after_ns = Some(self.max_after_ns.map_or(held, |m| m.max(held)));
        self.sum_after_ns += held as f64;
    }

    fn summary(&self) -> HeldPages {
        let s = NS_PER_S as f64;
        HeldPages {
            requests: self.requests,
            page_s: self.page_ns / s,
            page_s_after_doom: self.page_ns_after / s,
            max_held_after_doom_s: self.max_after_ns.map(|n| n as f64 / s),
            mean_held_after_doom_s: (self.requests > 0)
                .then(|| self.sum_after_ns / self.requests as f64 / s),
        }
    }
}

/// What the run's aborts cost, as the run reports them: the sums [`Aborts`] keeps of each
/// disconnect, abort, orphan, wasted prefill and held or leaked page.
#[derive(Default, Debug)]
pub struct AbortBook {
    disconnected: u64,
    aborted: u64,
    by_stage: [u64; AbortStage::ALL.len()],
    orphaned: u64,
    orphan_message: Option<String>,
    wasted_tokens: u64,
    wasted_gpu_ns: f64,
    prefill: Side,
    decode: Side,
    /// Leaked decode pages: requests, pages, and Σ pages × abort time (page·ns, exact), so
    /// the summary can count page-seconds to whenever the run ends.
    leaked: (u64, u64, u128),
}

impl AbortBook {
    /// A client disconnected.
    pub fn disconnected(&mut self) {
        self.disconnected += 1;
    }

    /// The servers aborted a request at `stage`.
    pub fn aborted(&mut self, stage: AbortStage) {
        self.aborted += 1;
        self.by_stage[stage as usize] += 1;
    }

    /// A prefill failure orphaned a request on its decode (`message`: sglang's text).
    pub fn orphaned(&mut self, message: &str) {
        self.orphaned += 1;
        self.orphan_message
            .get_or_insert_with(|| message.to_string());
    }

    /// An aborted request's prefill work: `tokens` prompt tokens and `gpu_ns` GPU-ns.
    pub fn wasted(&mut self, tokens: u64, gpu_ns: f64) {
        self.wasted_tokens += tokens;
        self.wasted_gpu_ns += gpu_ns;
    }

    /// A doomed request released `pages` prefill pages at `now`, held since `alloc_ns`,
    /// doomed at `doomed_ns`.
    pub fn prefill_released(
        &mut self,
        pages: usize,
        alloc_ns: Nanos,
        doomed_ns: Nanos,
        now: Nanos,
    ) {
        self.prefill.release(pages, alloc_ns, doomed_ns, now);
    }

    /// The same on the decode side.
    pub fn decode_released(&mut self, pages: usize, alloc_ns: Nanos, doomed_ns: Nanos, now: Nanos) {
        self.decode.release(pages, alloc_ns, doomed_ns, now);
    }

    /// A doomed request's `pages` decode pages leaked at `now` (never given back).
    pub fn leaked(&mut self, pages: u64, now: Nanos) {
        self.leaked.0 += 1;
        self.leaked.1 += pages;
        self.leaked.2 += u128::from(pages) * u128::from(now);
    }

    /// `summary.json` `aborts` at `now`: `propagation` and `client_timeout` in words as the
    /// scenario set them; `leak`: decode leaks its aborted queue's pages (the leaked pages
    /// are reported).
    pub fn summary(
        &self,
        propagation: String,
        client_timeout: Option<String>,
        leak: bool,
        now: Nanos,
    ) -> AbortSummary {
        AbortSummary {
            propagation,
            client_timeout,
            disconnected: self.disconnected,
            aborted: self.aborted,
            by_stage: AbortStage::ALL
                .iter()
                .zip(self.by_stage)
                .filter(|(_, n)| *n > 0)
                .map(|(&stage, count)| StageCount { stage, count })
                .collect(),
            orphaned: self.orphaned,
            orphan_message: self.orphan_message.clone(),
            wasted_prefill_tokens: self.wasted_tokens,
            wasted_prefill_gpu_s: self.wasted_gpu_ns / NS_PER_S as f64,
            prefill: self.prefill.summary(),
            decode: self.decode.summary(),
            decode_leaked: leak.then(|| {
                let (requests, pages, page_at) = self.leaked;
                let page_ns = u128::from(pages) * u128::from(now) - page_at;
                LeakedPages {
                    requests,
                    pages,
                    page_s: page_ns as f64 / NS_PER_S as f64,
                }
            }),
        }
    }
}
