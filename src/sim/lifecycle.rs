//! The request lifecycle as `World` drives it: arrival and routing, what the handshake
//! (`sglang::bootstrap`) hands on to the servers, the servers' admission and step events, and
//! the end of a request (`docs/sglang-pd.md` §2–§3).

use crate::engine::Nanos;
use crate::sglang::bootstrap::Handoff;
use crate::sglang::dp::{DECODE, FRONT};
use crate::vocab::{ErrorKind, Outcome, RequestRow};

use super::World;
use super::sampler::CoreRef;
use crate::vocab::event::{Event, Wake};
use crate::vocab::ids::{ColocatedId, DecodeId, PrefillId};
use crate::vocab::requests::{Req, ReqRef};

impl World<'_> {
    /// The scheduled arrival is due: the request drawn for it arrives (unless the request
    /// budget filled meanwhile), and the next one is drawn (`workload::feed`).
    pub(super) fn on_arrival(&mut self) {
        let limits = (self.sc.max_requests, self.sc.duration_ns);
        let arrived = self.collector.counts.arrived;
        let end = &mut self.collector.window_end_ns;
        if let Some(nr) =
            (self.feed).arrival_due(&mut self.source, &mut self.q, (arrived, limits), end)
        {
            self.arrive(nr);
        }
    }

    /// Request `nr` arrives at the router now (the stream's next, or a session's turn).
    pub(super) fn arrive(&mut self, nr: crate::workload::NewRequest) {
        let now = self.q.now();
        let id = self.collector.counts.arrived;
        self.collector.counts.arrived += 1;
        if !self.colocated.is_empty() {
            self.arrive_colocated(id, nr);
            return;
        }
        let prompt = crate::sglang::router::Prompt {
            hash_ids: &nr.hash_ids,
            input_tokens: nr.input_tokens,
        };
        let Some((pi, di)) = self.router.pick(prompt, now) else {
            // Every instance of a role is down: the router has nowhere to send it.
            let mut row = unroutable(id, &nr, now);
            row.bootstrap_room = crate::sglang::transfer::bootstrap_room(self.sc.seed, id);
            let msg = "No live prefill or decode instance to route the request to";
            self.write_row(&row, Some(msg));
            return;
        };
        // The router chose instances; their DP controllers choose the ranks.
        let room = crate::sglang::transfer::bootstrap_room(self.sc.seed, id);
        let (pi, di) = (
            self.dispatch
                .pick_rank(FRONT, pi, room, now, served!(self, FRONT)),
            self.dispatch
                .pick_rank(DECODE, di, room, now, served!(self, DECODE)),
        );
        let (p, d) = (PrefillId::from(pi), DecodeId::from(di));
        // The decode's coalesced steps are left for later: routing changes nothing a run or its
        // observations read (the router's count of outstanding requests, the second's
        // arrivals). What does — a refusal, a decode that dies, the prealloc queue — catches
        // the decode up first.
        let mut row = RequestRow::arrived(
            id,
            nr.arrival_ns,
            Some((
                self.prefills[p].core.instance.0,
                self.decodes[d].core.instance.0,
            )),
            nr.input_tokens,
            nr.output_tokens,
        );
        row.bootstrap_room = room;
        nr.tag_row(&mut row);
        if let Some(c) = self.scaling.as_deref_mut() {
            c.admitted(now, row.input_tokens, row.output_tokens);
        }
        if !nr.answer.is_empty() {
            self.decodes[d].remember_answer(id, nr.answer);
        }
        let r = self.reqs.insert(Req::routed(
            id,
            nr.input_tokens,
            nr.output_tokens,
            (p, d),
            nr.hash_ids,
            row,
        ));
        if let Some(a) = self.aborts.as_deref_mut() {
            let req = self.reqs.get_mut(r).expect("just routed");
            if let Some(at) = a.arrived(req, nr.client_wait_ns) {
                let gone = Event::ClientDisconnected {
                    req: r,
                    detected: false,
                };
                self.q.schedule_at(at, gone);
            }
        }
        self.prefills[p].request_routed();
        self.decodes[d].request_routed();
        self.sync(CoreRef::Prefill(p));
        self.sync(CoreRef::Decode(d));
        let (pc, dc) = (&self.prefills[p].core, &self.decodes[d].core);
        // The router's pick may be a dead server still in rotation (`sglang::router`); a
        // request whose KV can never fit is rejected up front (`sglang::tokenizer`).
        let refused = crate::sglang::router::dead_pick(p, pc, dc).or_else(|| {
            crate::sglang::tokenizer::check_pd(id, (nr.input_tokens, nr.output_tokens), pc, dc)
                .err()
                .map(|e| e.failure())
        });
        if let Some(f) = refused {
            self.end(r, Outcome::Failed, Some((f.kind, &f.message)));
            return;
        }
        // Decode's first contact with the prefill raises what nothing catches: the decode
        // server dies (`sglang::decode::faults`).
        if let Err(e) = self.decodes[d].ensure_prefill_info(self.transfer.plan(p, d)) {
            self.end(r, Outcome::Failed, Some((e.kind, &e.message)));
            self.crash(
                CoreRef::Decode(d),
                crate::sglang::decode::CrashCause::Exception(&e),
            );
            return;
        }
        // The handshake starts: the prefill's sender is `Bootstrapping`, its clock running.
        self.handshake.routed(r, &mut ctx!(self));
        // HiCache with a storage backend: the prefetch from the store starts now, past what
        // the instance's own tiers hold; its policy may hold the request back from the
        // prefill's scheduler (`try_prealloc`).
        if self.store.present()
            && let Some(local) = (self.reqs.get(r))
                .and_then(|req| self.prefills[p].local_prefix_blocks(&req.hash_ids))
        {
            store!(self, prefetch((r, p), local));
        }
        // Both servers' tokenizer managers tokenize it; the handshake says when each
        // scheduler has it.
        let costs = &self.sc.compute;
        let (pi, di) = (
            self.prefills[p].core.instance,
            self.decodes[d].core.instance,
        );
        let ready = costs.has_serving_costs().then(|| {
            let (t, input) = (&mut self.tokenizers, nr.input_tokens);
            let ready_p = t.tokenize_prompt(pi, now, input, costs);
            (ready_p, t.tokenize_prompt(di, now, input, costs))
        });
        handshake!(self, tokenized(r, ready));
    }

    /// Applies what a move of a request's handshake hands on to its servers
    /// (`sglang::bootstrap::Handoff`): the request joins the decode's prealloc queue (the
    /// decode's coalesced steps up to now first: they observe the queue as it was), or the
    /// prefill's waiting queue (its scheduler runs, the sampler observes it), or its KV landed
    /// on the decode (the first token counted; done with one output token, else it waits for
    /// the batch, which an idle decode starts), or it failed on a clock (under `decode_waits`
    /// a prefill's failure may leave the decode leg waiting: `orphan_decode`).
    #[inline(always)]
    pub(super) fn hand_on(&mut self, h: Handoff) {
        let now = self.q.now();
        match h {
            Handoff::Nothing => {}
            Handoff::Prealloc { decode: d, req } => {
                self.decodes[d].catch_up(now, &mut self.reqs, watchers!(self));
                if self.decodes[d].handshaken(req) {
                    self.try_prealloc(d);
                }
            }
            Handoff::Waiting { prefill: p, req } => {
                self.prefills[p].enqueue_waiting(req);
                self.schedule_prefill(p);
                self.observe(CoreRef::Prefill(p));
            }
            Handoff::Landed {
                decode: d,
                req: r,
                first_token,
            } => {
                self.decodes[d].touch(d, &mut self.q, &mut self.reqs, watchers!(self));
                if let Some(input) = first_token {
                    self.collector.prompt_done(now, input);
                    self.collector.tokens_generated(now, 1);
                }
                let req = self.reqs.get_mut(r).expect("landed, not ended");
                if self.decodes[d].landed((r, req), now) {
                    self.end(r, Outcome::Completed, None);
                } else if !self.decodes[d].core.busy {
                    effects!(self, self.decodes[d].start_step(d, &mut ctx!(self)));
                    self.observe(CoreRef::Decode(d));
                }
            }
            Handoff::TimedOut {
                req: r,
                failure,
                sender,
            } => {
                // Before sgl-model-gateway PR #29017 the decode leg outlives a prefill failure.
                if sender && self.orphan_decode(r, &failure.message) {
                    return;
                }
                self.end(r, Outcome::Failed, Some((failure.kind, &failure.message)));
            }
        }
    }

    /// Decode's prealloc queue admits what fits; each admitted request's page ids go to its
    /// prefill, where its prefill's prefetch policy may hold it (`Handshake::page_ids_sent`).
    pub(super) fn try_prealloc(&mut self, d: DecodeId) {
        (self.decodes[d]).catch_up(self.q.now(), &mut self.reqs, watchers!(self));
        // Most step ends find nobody waiting: nothing to admit.
        if self.decodes[d].prealloc_is_empty() {
            return;
        }
        let mut admitted = std::mem::take(&mut self.scratch.refs);
        admitted.clear();
        self.decodes[d].try_prealloc(&mut self.reqs, &mut admitted);
        if !admitted.is_empty() {
            self.decodes[d].check_run(d, &mut self.q);
        }
        let (prefills, store) = (&self.prefills, self.store.present());
        let held = |r, req: &mut Req, at, q: &mut _| {
            store && prefills[req.prefill].prefetch_holds((r, req), at, q)
        };
        self.handshake
            .page_ids_sent(&admitted, held, &mut ctx!(self));
        if let Some(a) = self.aborts.as_deref() {
            for &r in &admitted {
                a.preallocated(self.reqs.get_mut(r).expect("admitted"), self.q.now());
            }
        }
        self.scratch.refs = admitted;
    }

    /// `try_schedule` on prefill `p`, with what the store's prefetches have landed by now.
    pub(super) fn schedule_prefill(&mut self, p: PrefillId) {
        let core = &self.prefills[p].core;
        // Only an idle, live prefill starts a forward (`try_schedule` returns at once on any
        // other): the common wake of a busy one costs no call.
        if core.busy || !core.alive() {
            return;
        }
        // What the prefetches from the store have landed by now is what admission finds.
        let now = self.q.now();
        self.store.refresh(&self.fabric, &mut self.reqs, p, now);
        effects!(self, self.prefills[p].try_schedule(p, &mut ctx!(self)));
    }

    /// A prefill forward ended: its chunks go on their transfer shards (all chunks to one
    /// decode instance hash to the same shard), and the next batch forms.
    pub(super) fn on_prefill_step_done(&mut self, p: PrefillId) {
        let now = self.q.now();
        let mut jobs = std::mem::take(&mut self.scratch.jobs);
        jobs.clear();
        let aborts = self.aborts.as_deref();
        super::abort::credit_forward(aborts, &self.prefills[p], None, &mut self.reqs);
        self.prefills[p].step_done(now, &mut self.reqs, &mut jobs);
        for &job in &jobs {
            // The prefill ended: HiCache backs the prompt up to the store as its write policy
            // says.
            if job.last
                && self.store.present()
                && let Some(ids) = self
                    .reqs
                    .get(job.req)
                    .and_then(|q| self.prefills[p].blocks_to_store(q).map(<[u64]>::to_vec))
            {
                store!(self, write_back(p, ids));
            }
            transfer!(self, enqueue(p, job));
        }
        self.scratch.jobs = jobs;
        self.schedule_prefill(p);
        self.observe(CoreRef::Prefill(p));
    }

    /// A decode step ended: finished requests complete, the prealloc queue admits what fits,
    /// and the next step starts.
    pub(super) fn on_decode_step_done(&mut self, d: DecodeId) {
        let now = self.q.now();
        // The run's last step: the steps before it end first, at their own times.
        self.decodes[d].catch_up(now, &mut self.reqs, watchers!(self));
        debug_assert!(!self.decodes[d].in_run());
        let mut finished = std::mem::take(&mut self.scratch.refs);
        finished.clear();
        self.collector
            .tokens_generated(now, self.decodes[d].step_tokens());
        self.decodes[d].step_done(now, &mut self.reqs, &mut self.collector.itl, &mut finished);
        // The blocks this step completed go to the store before their requests end, as sglang's
        // batch result processor offloads a finished request before releasing it.
        if self.decodes[d].offload.is_some() {
            let base = self.scratch.fx.len();
            self.decodes[d].offload_due(d, &self.reqs, &finished, &mut self.scratch.fx);
            self.apply_effects(base);
        }
        for &r in &finished {
            self.end(r, Outcome::Completed, None);
        }
        self.scratch.refs = finished;
        self.try_prealloc(d);
        effects!(self, self.decodes[d].start_step(d, &mut ctx!(self)));
        self.observe(CoreRef::Decode(d));
    }

    /// A row that never entered the request table (refused at the router or by the server, or
    /// a colocated server's) is written, and its session hears of its end.
    pub(super) fn write_row(&mut self, row: &RequestRow, message: Option<&str>) {
        if let Err(e) = self.collector.finish(row, message, self.slo, self.sink) {
            self.io_error.get_or_insert(e);
        }
        if let Some(c) = self.scaling.as_deref_mut()
            && row.outcome != Outcome::Unfinished
        {
            c.ended(
                self.q.now(),
                row.input_tokens,
                row.output_tokens,
                row.cached_tokens,
            );
        }
        self.turn_ended(row);
    }

    /// A request reaches its `outcome`: `Completed` when it decoded to its last token (the
    /// oracle, when it watches the decode, may judge it `Corrupted`), `Failed` with its
    /// `failure` (kind and sglang's text: both sides mark the room Failed, the ABORT to the
    /// prefill taken as immediate for resources), or `Aborted`. It gives back what it holds on
    /// both instances, its pending timeouts are cancelled, and its row is written. What it freed may admit waiting
    /// work: the decode marks itself unless the request finished in its batch at a step end
    /// (`DecodeServer::request_ended`), and a failure wakes the prefill.
    pub(super) fn end(&mut self, r: ReqRef, outcome: Outcome, failure: Option<(ErrorKind, &str)>) {
        let now = self.q.now();
        if let Some(a) = self.aborts.as_deref_mut()
            && let Some(req) = self.reqs.get(r)
        {
            a.released(req, outcome, now);
        }
        // Out of flight at once (nothing below finds it), but worked on in its slot.
        if !self.reqs.retire(r) {
            panic!(
                "request {} ended twice at {now} ns (seed {})",
                r.id, self.sc.seed
            );
        }
        let req = self.reqs.retired_mut(r);
        let (p, d) = (req.prefill, req.decode);
        for k in [req.bootstrap_timeout.take(), req.waiting_timeout.take()]
            .into_iter()
            .flatten()
        {
            self.q.cancel(k);
        }
        self.decodes[d].touch(d, &mut self.q, &mut self.reqs, watchers!(self));
        let (slo, path) = (self.slo, first_token_path_ns(self.sc));
        let req = self.reqs.retired_mut(r);
        // Unless its transfer concluded or it was orphaned (`abort.rs`) first.
        let released_prefill = self.prefills[p].let_go(req);
        let outcome = self.decodes[d].request_ended(d, (req, r), outcome, &mut self.wake);
        req.row.finish_ns = Some(now);
        req.row.outcome = outcome;
        req.row.error_kind = failure.map(|(kind, _)| kind);
        crate::sglang::router::hold_back(&mut req.row, req.prefill_response_ns);
        client_clock(path, &mut req.row);
        if let Err(e) = self
            .collector
            .finish(&req.row, failure.map(|(_, m)| m), slo, self.sink)
        {
            self.io_error.get_or_insert(e);
        }
        if let Some(c) = self.scaling.as_deref_mut() {
            let row = &req.row;
            c.ended(now, row.input_tokens, row.output_tokens, row.cached_tokens);
        }
        let turn = req.row.session_id.is_some().then(|| req.row.clone());
        self.reqs.release(r);
        // The router reads loads only when it picks: telling it after the row is written is
        // telling it at once.
        if released_prefill {
            self.sync(CoreRef::Prefill(p));
        }
        self.sync(CoreRef::Decode(d));
        // Decode marked itself (`request_ended`); a failure also frees the prefill's side.
        if matches!(outcome, Outcome::Failed | Outcome::Aborted) {
            self.wake.push(Wake::Prefill(p));
        }
        if let Some(row) = turn {
            self.turn_ended(&row);
        }
    }

    /// Tells the router instance `c`'s load (its outstanding requests; `None` while down).
    #[inline(always)]
    pub(super) fn sync(&mut self, c: CoreRef) -> usize {
        // Each arm with its side fixed, so the dispatch's look-up folds to that side's. Returns
        // the instance's index in the router's side.
        match c {
            CoreRef::Prefill(p) => {
                let (k, load) = (self.dispatch).server_load(FRONT, p.idx(), served!(self, FRONT));
                self.router.set_prefill(k, load)
            }
            CoreRef::Decode(d) => {
                let (k, load) = (self.dispatch).server_load(DECODE, d.idx(), served!(self, DECODE));
                self.router.set_decode(k, load)
            }
            CoreRef::Colocated(c) => {
                let (k, load) = (self.dispatch).server_load(FRONT, c.idx(), served!(self, FRONT));
                self.router.set_prefill(k, load)
            }
        }
    }
}

/// Colocated (plain sglang) servers: routing, the mixed step, crashes. A colocated request
/// never touches the request table, the fabric or the transfer queues: the server owns it from
/// arrival to its end, and `World` only records what each step produced.
impl World<'_> {
    /// The router picks a live server; a request whose prompt and output can never fit in its
    /// KV is rejected up front, as sglang's tokenizer manager rejects it; the server has the
    /// request once its tokenizer manager is done (`Event::Tokenized`), and steps if idle
    /// (`Wake::Colocated`).
    fn arrive_colocated(&mut self, id: u64, nr: crate::workload::NewRequest) {
        let now = self.q.now();
        let prompt = crate::sglang::router::Prompt {
            hash_ids: &nr.hash_ids,
            input_tokens: nr.input_tokens,
        };
        let Some((ci, _)) = self.router.pick(prompt, now) else {
            let row = unroutable(id, &nr, now);
            self.write_row(&row, Some("No live server to route the request to"));
            return;
        };
        let ci = self
            .dispatch
            .pick_rank(FRONT, ci, 0, now, served!(self, FRONT));
        let c = ColocatedId::from(ci);
        let server = &mut self.colocated[c];
        let instance = server.core.instance;
        let mut row = RequestRow::arrived(
            id,
            nr.arrival_ns,
            Some((instance.0, instance.0)),
            nr.input_tokens,
            nr.output_tokens,
        );
        nr.tag_row(&mut row);
        if let Err(rejected) = server.admit(id, (nr.input_tokens, nr.output_tokens)) {
            row.finish_ns = Some(now);
            row.outcome = Outcome::Failed;
            row.error_kind = Some(rejected.kind());
            self.write_row(&row, Some(&rejected.to_string()));
            return;
        }
        // The scheduler has it once the server's tokenizer manager is done with it.
        let ready = if self.sc.compute.has_serving_costs() {
            (self.tokenizers).tokenize_prompt(instance, now, nr.input_tokens, &self.sc.compute)
        } else {
            now
        };
        row.prefill_queued_ns = Some(ready);
        let server = &mut self.colocated[c];
        server.arrive(row, ready);
        if ready > now {
            self.q.schedule_at(ready, Event::Tokenized { colocated: c });
        }
        self.sync(CoreRef::Colocated(c));
        self.wake.push(Wake::Colocated(c));
    }

    /// A mixed step ended: record its tokens, end the requests that finished; the server steps
    /// again (`Wake::Colocated`).
    pub(super) fn on_colocated_step_done(&mut self, c: ColocatedId) {
        let now = self.q.now();
        let mut out = crate::sglang::colocated::StepOutcome::default();
        self.colocated[c].step_done(now, &mut self.collector.itl, &mut out);
        self.collector.tokens_generated(now, out.tokens);
        for input in out.first_token_inputs {
            self.collector.prompt_done(now, input);
        }
        let path = first_token_path_ns(self.sc);
        for mut row in out.finished {
            row.outcome = Outcome::Completed;
            client_clock(path, &mut row);
            self.write_row(&row, None);
        }
        self.sync(CoreRef::Colocated(c));
        self.wake.push(Wake::Colocated(c));
    }
}

/// A request that arrived at `now` and that the router had nowhere to send: it fails there
/// (`PeerLost`).
fn unroutable(id: u64, nr: &crate::workload::NewRequest, now: Nanos) -> RequestRow {
    let mut row = RequestRow::arrived(id, nr.arrival_ns, None, nr.input_tokens, nr.output_tokens);
    nr.tag_row(&mut row);
    row.finish_ns = Some(now);
    row.outcome = Outcome::Failed;
    row.error_kind = Some(ErrorKind::PeerLost);
    row
}

/// `compute.first_token_path_s` in ns.
fn first_token_path_ns(sc: &crate::config::Scenario) -> Nanos {
    crate::engine::ns_from_secs_ceil(sc.compute.first_token_path_s)
}

/// What the client sees of `row`, with the server-to-client path `path` ns: every output
/// token reaches it that long after the server produced it (detokenizer, tokenizer manager,
/// HTTP), so the first token and the end of a request that completes shift by that much and
/// the intervals between tokens do not. A request that fails ends when the server fails it (a
/// crash drops the connection at once); a first token still on its way then is never seen
/// after that end.
fn client_clock(path: crate::engine::Nanos, row: &mut RequestRow) {
    let Some(first) = row.first_token_ns else {
        return;
    };
    if path == 0 {
        return;
    }
    row.server_first_token_ns = Some(first);
    if matches!(row.outcome, Outcome::Completed | Outcome::Corrupted) {
        row.first_token_ns = Some(first + path);
        row.finish_ns = row.finish_ns.map(|t| t + path);
    } else {
        row.first_token_ns = Some(
            row.finish_ns
                .map_or(first + path, |f| (first + path).min(f)),
        );
    }
}
