//! The decode server: the prealloc queue, the continuous batch with page-by-page KV growth,
//! and sglang's retraction when the pool runs dry (`docs/sglang-pd.md` §2–§3). By
//! responsibility: the batch and its step here; admission ([`prealloc`]: sglang's
//! `DecodePreallocQueue` budget); coalesced runs of steps (`run.rs`); going down and coming
//! back ([`faults`]: crash, first contact, restart). The tests play `World`'s part by hand
//! (`tests.rs`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::compute::DecodeCache;
use crate::engine::{EventQueue, Nanos};
use crate::layout::{RequestId, Verdict};
use crate::metrics::gaps::{Gaps, StepGaps};
use crate::vocab::Outcome;
use crate::vocab::event::{Event, Wake};
use crate::vocab::ids::DecodeId;
use crate::vocab::requests::{KvPoll, NOT_RUNNING, Req, ReqRef, Requests};

use super::transfer::PollTimeout;
use super::{Core, Ctx};

pub mod faults;
pub mod prealloc;
mod run;
pub mod summary;

#[cfg(test)]
mod tests;

pub use faults::{CrashCause, DecodeCrash, scheduler_hit_an_exception};
pub use run::Watchers;

/// sglang's `--num-reserved-decode-tokens` (default 512; `SGLANG_NUM_RESERVED_DECODE_TOKENS`
/// in older builds): decode admits a request only if this many tokens stay free for every
/// request it holds, whatever their output lengths, so that decode rarely has to retract.
pub const RESERVED_DECODE_TOKENS: u32 = 512;

/// sglang's `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION` (4096): a request's `max_new_tokens` as the
/// admission budget counts it.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4096;

/// The page phase of a request that joined a decode batch after `join_step` steps with `prompt`
/// tokens of KV: at step `k` it needs a new page iff `k ≡ join_step + 1 − prompt (mod ps)`
/// (its step-`j` input token lands at slot `prompt + j − 1`).
fn phase_key(join_step: u64, prompt: u32, ps: u32) -> usize {
    let ps = u64::from(ps);
    ((join_step + 1) % ps + ps - u64::from(prompt) % ps) as usize % ps as usize
}

/// Space-separated request ids, as `requests.csv` lists victims.
pub fn id_list(v: &[RequestId]) -> String {
    v.iter()
        .map(|x| x.0.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// One decode instance.
pub struct DecodeServer {
    /// What every server has.
    pub core: Core,
    /// Requests waiting for pages, in order (retracted ones go to the front).
    prealloc: VecDeque<ReqRef>,
    /// Requests whose KV landed, waiting to join the batch.
    ready: VecDeque<ReqRef>,
    /// Requests in the batch.
    running: u32,
    /// Requests that joined at the start of the running step.
    joined: Vec<ReqRef>,
    /// (finishing step, join step, request): who leaves the batch after which step. Every
    /// running request has its entry here (an entry whose request left is stale: see
    /// [`DecodeServer::newest_running`]), so retraction finds its victim here too.
    finishing: BinaryHeap<Reverse<(u64, u64, ReqRef)>>,
    /// Running requests by page phase: `phase[k % page_size]` of them need a new page at step k.
    phase: Vec<u32>,
    /// Requests holding decode pages (prealloc'd, transferring or running).
    holders: u32,
    /// Times the prealloc queue stopped at a request because every request row was held
    /// (`[0]`: running, transferring and preallocated requests share them) or because its
    /// pages did not fit the budget (`[1]`): what the pool's bottleneck names.
    pub prealloc_stops: [u64; 2],
    /// Requests retracted (sent back to the prealloc queue) so far.
    retractions: u64,
    /// Steps finished.
    steps_done: u64,
    /// KV tokens the running batch attends to.
    context_tokens: u64,
    /// The most tokens any request that joined may reach, `prompt + min(output, 4096)`: an
    /// upper bound of the prealloc budget's `need_single` term (never lowered).
    longest_joined: u64,
    /// When the running step started, ns.
    step_started: Nanos,
    /// When the last step ended, ns: the time of the last token of every request in it.
    last_step_end: Nanos,
    /// The batch's shared step gaps, for each request's worst gap (`metrics::gaps`).
    gaps: StepGaps,
    /// Session port of each rank, which decides the prefill's transfer shard.
    pub ports: Vec<u32>,
    /// `--max-running-requests`.
    pub max_running: u32,
    /// `--num-reserved-decode-tokens`: the prealloc budget's room per request held.
    pub reserved_tokens: u32,
    /// `--disaggregation-decode-extra-slots` (`None`: unset, sglang's 0).
    pub extra_slots: Option<u32>,
    /// The step model's batch-size terms, per batch size.
    step_cache: DecodeCache,
    /// Whether steps may be coalesced into runs (see [`DecodeServer::plan_run`]); off where a
    /// step's effects reach beyond this server (an ownership oracle watching the pages, a step
    /// that puts all-to-all bytes on the fabric: [`DecodeServer::set_coalescing`]).
    coalesce: bool,
    /// Steps of the current run that end without an event of their own: they are
    /// materialized ([`DecodeServer::virtual_step`]) when their time comes or something
    /// touches this server; the run's scheduled event is the end of the step after them.
    virtual_left: u32,
    /// When the running step ends, ns.
    step_end: Nanos,
    /// The planned durations of the run's steps after the first, ns, in order; the next
    /// virtual step takes `planned[next_planned]`. Slots past the run's steps are stale: the
    /// buffer is reused run after run, grown but never cleared on the hot path.
    planned: Vec<Nanos>,
    /// Whether the run's steps never shorten ([`crate::compute::DecodeStep::rises`]), so a
    /// pass over them gathers its gaps by comparing each with its bucket's end only.
    rising: bool,
    /// How many of `planned` have started.
    next_planned: usize,
    /// `phase` index of the step after the running one inside a run (`(steps_done + 2) %
    /// page_size`), walked instead of divided.
    next_phase: usize,
    /// How many steps the next run may plan: doubled after a run that ran to its end, halved
    /// after one that was cut, so the planning a cut throws away stays near the steps a run
    /// actually covers.
    horizon: u64,
    /// Whether the current run was cut.
    cut: bool,
    /// Whether the current run was planned to the horizon (not stopped by a finish or pages).
    full: bool,
    /// The latest end of a step materialized so far, ns.
    materialized_ns: Nanos,
    /// The offload of generated KV to the store
    /// (`disaggregation_decode_enable_offload_kvcache`), if on.
    pub offload: Option<Box<super::decode_offload::DecodeOffload>>,
    /// Speculative decoding (`sglang::speculative`), when the pool runs it: each step emits
    /// its requests' accepted tokens instead of one each.
    pub spec: Option<Box<super::speculative::SpecDecode>>,
    /// The radix tree over finished requests' KV
    /// (`disaggregation_decode_enable_radix_cache`), if on; without it decode runs sglang's
    /// chunk cache.
    pub radix: Option<Box<super::decode_radix::DecodeRadix>>,
    /// The sender's bootstrap clock a retracted request's prefill restarts, ns
    /// (`SglangParams::sender_timeout_ns`: `None` where the transfer backend's sender has
    /// none). Set when the server is assembled.
    pub sender_timeout_ns: Option<Nanos>,
}

/// The most steps one coalesced run covers.
const MAX_RUN_STEPS: u64 = 4096;
/// The fewest steps a run plans (when the batch allows).
const MIN_RUN_STEPS: u64 = 16;

impl DecodeServer {
    /// An idle decode server.
    pub fn new(core: Core, ports: Vec<u32>, max_running: u32) -> Self {
        let ps = core.page_size as usize;
        let mut d = Self {
            core,
            prealloc: VecDeque::new(),
            ready: VecDeque::new(),
            running: 0,
            joined: Vec::new(),
            finishing: BinaryHeap::new(),
            phase: vec![0; ps],
            holders: 0,
            prealloc_stops: [0; 2],
            retractions: 0,
            steps_done: 0,
            context_tokens: 0,
            longest_joined: 0,
            step_started: 0,
            last_step_end: 0,
            gaps: StepGaps::default(),
            ports,
            max_running,
            reserved_tokens: RESERVED_DECODE_TOKENS,
            extra_slots: None,
            step_cache: DecodeCache::default(),
            coalesce: false,
            virtual_left: 0,
            step_end: 0,
            planned: Vec::new(),
            next_planned: 0,
            next_phase: 0,
            rising: false,
            horizon: MIN_RUN_STEPS,
            cut: false,
            full: false,
            materialized_ns: 0,
            offload: None,
            spec: None,
            radix: None,
            sender_timeout_ns: None,
        };
        d.coalesce = d.may_coalesce();
        d
    }

    /// Whether this server's steps may be coalesced: not where an ownership oracle reads who
    /// owns every page as transfers land, nor where a DeepEP step across nodes puts bytes on
    /// the fabric, nor where step ends offload KV to the store (their steps stay events).
    pub fn may_coalesce(&self) -> bool {
        let oracle = matches!(self.core.pages.store, super::memory::Store::Oracle { .. });
        let a2a = matches!(&self.core.step, crate::compute::StepTimes::Model(m)
            if m.moe_time(1.0, false).is_some_and(|t| t.rdma_bytes_per_gpu > 0.0));
        // A speculative step advances each request by its own accepted tokens: no run of
        // steps is arithmetic.
        // A radix tree may evict at any step that grows the batch's pages: its steps stay
        // events too.
        !oracle && !a2a && self.offload.is_none() && self.spec.is_none() && self.radix.is_none()
    }

    /// Its running forward's end moved to `at` (its all-to-all landed, `sglang::a2a`), with
    /// the event `key` that ends it.
    #[inline]
    pub fn forward_ends(&mut self, at: crate::engine::Nanos, key: crate::engine::EventKey) {
        self.core.forward_ends(at, key);
    }

    /// A request was routed here: it counts in least-loaded routing until it ends
    /// ([`DecodeServer::request_ended`]), and in this second's arrivals.
    #[inline]
    pub fn request_routed(&mut self) {
        self.core.request_routed();
    }

    /// Request `id`'s transfer concluded: from now on decode reads its bytes, and the oracle
    /// (when it watches this decode) checks they are the request's own.
    #[inline]
    pub fn kv_landed(&mut self, id: u64) {
        if let Some(mem) = self.core.pages.oracle() {
            mem.landed(RequestId(id));
        }
    }

    /// The KV of `r` landed: it waits to join the batch.
    pub fn enqueue_ready(&mut self, r: ReqRef) {
        self.ready.push_back(r);
    }

    /// The KV of `r` (`req`) landed at `now`, its receiver `Success`
    /// (`sglang::bootstrap::Handoff::Landed`; sglang's `DecodeTransferQueue.pop_transferred`):
    /// from now on decode reads its bytes ([`DecodeServer::kv_landed`]). A request with one
    /// output token to go is done, the prefill having made it (true); any other waits to join
    /// the batch.
    #[inline]
    pub fn landed(&mut self, (r, req): (ReqRef, &mut Req), now: Nanos) -> bool {
        self.kv_landed(req.id);
        if req.output - req.extra == 1 {
            req.row.decode_start_ns.get_or_insert(now);
            return true;
        }
        self.enqueue_ready(r);
        false
    }

    /// Requests in the batch.
    #[inline]
    pub fn running(&self) -> u32 {
        self.running
    }

    /// Steps finished.
    #[inline]
    pub fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// KV tokens the running batch attends to.
    #[inline]
    pub fn context_tokens(&self) -> u64 {
        self.context_tokens
    }

    /// When the running step started and when it ends, ns.
    #[inline]
    pub fn step_span(&self) -> (Nanos, Nanos) {
        (self.step_started, self.step_end)
    }

    /// Whether a step of the current coalesced run ends at or before `t` without its own
    /// event (`World` materializes it, [`DecodeServer::virtual_steps`]).
    #[inline(always)]
    pub fn has_due_step(&self, t: Nanos) -> bool {
        self.virtual_left > 0 && self.step_end <= t
    }

    /// Whether steps of a coalesced run are still to be materialized.
    #[inline]
    pub fn in_run(&self) -> bool {
        self.virtual_left > 0
    }

    /// Lets steps coalesce into runs where `allowed` (assembly allows it; the coalescing tests
    /// forbid it for their reference) and this server permits it: not where a forward's
    /// all-to-all crosses the fabric (it ends when its flows do, so a run could not be planned),
    /// nor where [`DecodeServer::may_coalesce`] says no.
    pub fn set_coalescing(&mut self, allowed: bool) {
        self.coalesce = allowed && !self.core.a2a_on_fabric() && self.may_coalesce();
    }

    /// What its scheduler reports to an autoscaler at `now` (Dynamo's forward-pass metrics):
    /// its batch and the KV it attends to, its queue, its KV pool, and its last step if that
    /// ended in `(since, now]`. KV admitted but not yet in the batch is not split out
    /// (`queued_decode_kv_tokens` 0: the pool's pages hold it either way).
    pub fn load(&self, since: Nanos, now: Nanos) -> crate::autoscale::InstanceLoad {
        let (start, end) = self.step_span();
        let ran = end > since && end <= now && self.running > 0;
        crate::autoscale::InstanceLoad {
            instance: self.core.instance,
            queued_requests: self.queued(),
            running_decode_requests: self.running,
            decode_kv_tokens: self.context_tokens,
            kv_capacity_tokens: u64::from(self.core.pages.total()) * u64::from(self.core.page_size),
            last_forward: ran.then(|| crate::autoscale::ForwardPass {
                wall_s: (end - start) as f64 / 1e9,
                decode_requests: self.running,
                decode_kv_tokens: self.context_tokens,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Requests waiting for pages or to join the batch.
    #[inline]
    pub fn queued(&self) -> u32 {
        (self.prealloc.len() + self.ready.len()) as u32
    }

    /// The step that just started here (`step_key` was `before`), when its all-to-all goes on
    /// the fabric (the caller checked this server's GPUs send on it): priced as scheduled — a
    /// speculative step's draft forwards, verify and draft extend, as its parts — its end taken
    /// back (`sglang::a2a::take_forward`).
    pub fn a2a_forward<'s>(
        &'s mut self,
        me: DecodeId,
        before: Option<crate::engine::EventKey>,
        q: &mut EventQueue<Event>,
    ) -> Option<super::a2a::Forward<'s>> {
        let now = q.now();
        let (dt, spec) = match self.spec.as_deref() {
            None => (
                self.core
                    .step
                    .decode_ns(self.running(), self.context_tokens()),
                None,
            ),
            Some(sp) => (self.step_span().1.saturating_sub(now), Some(sp.moe_parts())),
        };
        let done = Event::DecodeStepDone { decode: me };
        let (ctx, running) = (self.context_tokens(), u64::from(self.running()));
        super::a2a::take_forward(
            &mut self.core,
            (before, q),
            (now, dt, done),
            (running, false, ctx),
            spec,
        )
    }

    /// What the Mooncake Store needs of this instance as its client, if it offloads its KV:
    /// its ranks' GPUs, the offload's bytes per token and copy rate, its page size.
    pub fn store_client(&self) -> Option<super::mooncake_store::ClientShape> {
        let o = self.offload.as_deref()?;
        Some(super::mooncake_store::ClientShape {
            gpus: self.core.gpus.clone(),
            bytes_per_token: o.params.bytes_per_token,
            page_size: self.core.page_size,
            pcie_bytes_per_ns: o.params.pcie_bytes_per_ns,
        })
    }

    /// Request `id`, routed here, completes the blocks `answer` with its output: kept for the
    /// offload, if on (`DecodeOffload::remember`).
    pub fn remember_answer(&mut self, id: u64, answer: Vec<u64>) {
        match (self.offload.as_deref_mut(), self.radix.as_deref_mut()) {
            (Some(o), Some(t)) => {
                t.remember(id, answer.clone());
                o.remember(id, answer);
            }
            (Some(o), None) => o.remember(id, answer),
            (None, Some(t)) => t.remember(id, answer),
            (None, None) => {}
        }
    }

    /// The offload (if on) learns of the requests that joined at the start of the running
    /// step (`DecodeOffload::batch_joined`).
    fn offload_joined(&mut self, reqs: &Requests) {
        if let Some(o) = self.offload.as_deref_mut() {
            o.batch_joined(&self.joined, reqs);
        }
    }

    /// The step that just ended (`finished`: the requests whose last token it produced) makes
    /// the offload's due blocks go to the store (`DecodeOffload::step_ended`; effects pushed on
    /// `fx`).
    pub fn offload_due(
        &mut self,
        me: DecodeId,
        reqs: &Requests,
        finished: &[ReqRef],
        fx: &mut Vec<super::Effect>,
    ) {
        let steps = self.steps_done();
        if let Some(o) = self.offload.as_deref_mut() {
            o.step_ended((me, steps), reqs, finished, fx);
        }
    }

    /// The offload goes on with the offloads due after this step (`Effect::OffloadGoOn`).
    pub fn offload_go_on(&mut self, me: DecodeId, reqs: &Requests, fx: &mut Vec<super::Effect>) {
        let steps = self.steps_done();
        if let Some(o) = self.offload.as_deref_mut() {
            o.go_on((me, steps), reqs, fx);
        }
    }

    /// A store write of the offload's ended or put nothing: `blocks` blocks of its host pool
    /// are free again (`Effect::OffloadWritten`).
    pub fn offload_written(&mut self, blocks: u32) {
        if let Some(o) = self.offload.as_deref_mut() {
            o.written(blocks);
        }
    }

    /// Request `r` (out of the table, `req`) ended with `outcome` (`Completed` when it produced
    /// its last token): it leaves the batch if it runs, the offload forgets it, it no longer
    /// holds a request row, its pages go back to the pool and it stops counting here. Returns
    /// the outcome as decode's memory judges it — a completed request the oracle finds decoded
    /// from another's bytes (now, or at an earlier write: `Req::corrupted_earlier`) is
    /// `Corrupted` — with `req.row`'s victims and corrupters written.
    ///
    /// sglang runs the prealloc queue (`process_decode_queue` → `pop_preallocated`) at every
    /// turn of the decode scheduler's loop, busy or idle (`event_loop_normal_disagg_decode`,
    /// `disaggregation/decode.py` @ 0035ca42), so whatever a request gives back is seen at the
    /// next turn. pdsim runs it at each step end (`World::on_decode_step_done`, before the next
    /// step starts) and when marked: so a request that ends anywhere but in the batch at a step
    /// end — a failure or an abort, or one that completes as its KV lands (one output token,
    /// the prefill made it: sglang's `--random-output 1` benchmark) — marks `Wake::Decode(me)`.
    /// Without that mark, one-token requests gave back their pages and nobody let the waiting
    /// ones have them until their `bootstrap_timeout`.
    #[inline]
    pub fn request_ended(
        &mut self,
        me: DecodeId,
        (req, r): (&mut Req, ReqRef),
        outcome: Outcome,
        wake: &mut Vec<Wake>,
    ) -> Outcome {
        let completed = outcome == Outcome::Completed;
        let in_batch = req.join_step != NOT_RUNNING;
        if in_batch {
            self.leave_batch(req, r);
        }
        if let Some(o) = self.offload.as_deref_mut() {
            o.forget(r.id);
        }
        // A completed request's answer blocks are read when its KV goes into the tree, below.
        if let Some(t) = self.radix.as_deref_mut()
            && !(completed && req.decode_allocated)
        {
            t.forget(r.id);
        }
        if req.decode_allocated {
            self.holders -= 1;
        }
        // Finished in the batch: the step end that finished it runs the queue next.
        if !(completed && in_batch) {
            wake.push(Wake::Decode(me));
        }
        let mut outcome = outcome;
        if let Some((v, by)) = req.corrupted_earlier.take().map(|b| *b) {
            req.row.victims = v;
            req.row.corrupted_by = by;
            if completed {
                outcome = Outcome::Corrupted;
            }
        }
        // A request decode drops from its waiting queue without freeing it (sglang before
        // PR #9817) keeps its pages taken for the rest of the run.
        let leaked = req.abort.as_deref().is_some_and(|a| a.decode_leaked);
        let mut radix = self
            .radix
            .as_deref_mut()
            .filter(|_| req.decode_allocated && !leaked);
        if let Some(t) = radix.as_deref_mut() {
            // The prefix pages it borrowed stay the tree's.
            t.release(r.id, &mut req.on_decode);
        }
        if req.decode_allocated
            && !leaked
            && let Some(mut report) = self
                .core
                .pages
                .free_owned(r.id, std::mem::take(&mut req.on_decode))
        {
            if !completed {
                // A request that never decoded is nobody's victim of its own unfinished
                // transfer; the requests its writes hit stay named.
                let me = RequestId(r.id);
                report.victims.retain(|&v| v != me);
                report.corrupted_by.retain(|&v| v != me);
            }
            req.row.victims = id_list(&report.victims);
            req.row.corrupted_by = id_list(&report.corrupted_by);
            if completed && matches!(report.verdict, Verdict::Corrupted { .. }) {
                outcome = Outcome::Corrupted;
            }
        }
        // A completed request's KV, prompt and output, goes into the tree
        // (`cache_finished_req`); a failed one's does not (`is_insert=False`).
        if let Some(t) = radix {
            if outcome == Outcome::Completed {
                t.insert_finished(r.id, &req.hash_ids, req.input, &mut self.core.pages);
            } else {
                t.forget(r.id);
            }
        }
        self.core.request_done();
        outcome
    }

    /// Tokens the running step emits: one per running request, or with speculative decoding
    /// its requests' accepted tokens.
    pub fn step_tokens(&self) -> u64 {
        self.spec
            .as_deref()
            .map_or(u64::from(self.running), |s| s.step_tokens())
    }

    /// Starts a decode step: landed requests join the batch (up to `max_running_requests`), the
    /// step takes a page for every request whose next KV slot opens one — retracting the most
    /// recently joined requests while the pool is short, as sglang's `retract_decode` does
    /// (each an `Effect::Retracted`: its prefill counts it again), a retracted request's
    /// sender clock restarted with [`DecodeServer::sender_timeout_ns`] (if the backend has one) — and one forward produces a token for
    /// every running request (handed to the all-to-all where it crosses the fabric:
    /// `Core::forward_started`). The offload, if on, learns who joined.
    ///
    /// The step plans a run ([`DecodeServer::plan_run`]) and schedules its end; the steps
    /// inside a run start in [`DecodeServer::virtual_step`].
    pub fn start_step(&mut self, me: DecodeId, cx: &mut Ctx<'_>) {
        let before = self.core.step_key;
        self.start_forward(me, cx);
        self.core.forward_started(before, cx.fx);
        if self.offload.is_some() {
            self.offload_joined(cx.reqs);
        }
    }

    /// [`DecodeServer::start_step`]'s batch and forward.
    fn start_forward(&mut self, me: DecodeId, cx: &mut Ctx<'_>) {
        let Ctx {
            q, reqs, wake, fx, ..
        } = cx;
        let now = q.now();
        if !self.core.alive {
            return;
        }
        while self.running < self.max_running {
            let Some(r) = self.ready.pop_front() else {
                break;
            };
            let steps_done = self.steps_done;
            let Some(req) = reqs.get_mut(r) else { continue };
            req.row.decode_start_ns.get_or_insert(now);
            req.join_step = steps_done;
            self.gaps.joined(steps_done);
            let (prompt, remaining) = (req.prompt(), req.output - 1 - req.extra);
            let key = phase_key(steps_done, prompt, self.core.page_size);
            self.phase[key] += 1;
            self.running += 1;
            self.context_tokens += u64::from(prompt) + 1;
            self.longest_joined = self
                .longest_joined
                .max(u64::from(prompt) + u64::from(req.output.min(CLIP_MAX_NEW_TOKENS)));
            let steps = match self.spec.as_deref_mut() {
                None => u64::from(remaining),
                Some(s) => s.join(r, req.id, req.row.retractions, prompt, remaining),
            };
            self.finishing
                .push(Reverse((steps_done + steps, steps_done, r)));
            self.joined.push(r);
        }
        let mut retracted = false;
        loop {
            if self.running == 0 {
                self.core.busy = false;
                // Every running request was retracted: no step end will run the prealloc
                // queue, which now holds them at its front with their pages given back
                // (sglang's next loop turn resumes them, `resume_retracted_reqs`).
                if retracted {
                    wake.push(Wake::Decode(me));
                }
                return;
            }
            let step = self.steps_done + 1;
            let need = match self.spec.as_deref_mut() {
                None => self.phase[(step % u64::from(self.core.page_size)) as usize],
                Some(s) => s.plan(self.core.page_size),
            };
            if self.core.pages.grow(need) {
                break;
            }
            // sglang's `alloc_token_slots` evicts unlocked tree nodes before the batch gives
            // up a request (`evict_from_tree_cache`).
            if let Some(t) = self.radix.as_deref_mut()
                && t.evict_for(need, &mut self.core.pages)
                && self.core.pages.grow(need)
            {
                break;
            }
            let victim = self.newest_running(reqs).expect("running > 0");
            self.retract(victim, reqs, q, self.sender_timeout_ns);
            let prefill = reqs.get(victim).expect("retracted, not ended").prefill;
            fx.push(super::Effect::Retracted {
                req: victim,
                prefill,
            });
            retracted = true;
        }
        if self.gaps.wants_prune() {
            // Here every running request has its finishing entry (those a step finished have
            // left; a stale entry of a retracted one only lowers the bound), so their least
            // join step bounds every window from below.
            let oldest = self.finishing.iter().map(|e| e.0.1).min();
            self.gaps.prune(oldest.unwrap_or(u64::MAX));
        }
        debug_assert_eq!(self.virtual_left, 0, "a run's steps start in virtual_step");
        self.core.start_busy(now);
        self.step_started = now;
        let end = match self.spec.as_deref_mut() {
            None => self.plan_run(now),
            Some(s) => {
                self.step_end = now.saturating_add(s.start(self.running, self.context_tokens));
                self.step_end
            }
        };
        self.core.step_key = Some(q.schedule_keyed(end, Event::DecodeStepDone { decode: me }));
    }

    /// Takes a running request out of the batch (it finished, failed or is retracted), giving
    /// back the pages it grew; returns how many tokens it generated here.
    pub fn leave_batch(&mut self, req: &mut Req, r: ReqRef) -> u32 {
        let generated = match self.spec.as_deref_mut() {
            None => (self.steps_done - req.join_step) as u32,
            Some(s) => s.leave(r),
        };
        // Its gaps: the worst of the steps it shared (its first was recorded at that step's
        // end); a request that ran a step has its last token at the last step's end, where a
        // later stint's first gap starts.
        if let Some((g, kind)) = self.gaps.left(req.join_step, self.running - 1) {
            req.row.gaps.saw(g, kind);
        }
        if self.steps_done > req.join_step {
            req.row.gaps.resumed_from = Some(self.last_step_end);
        }
        let prompt = req.prompt();
        let ps = self.core.page_size;
        self.core
            .pages
            .shrink((prompt + generated).div_ceil(ps) - prompt.div_ceil(ps));
        self.phase[phase_key(req.join_step, prompt, ps)] -= 1;
        self.running -= 1;
        self.context_tokens -= u64::from(prompt) + 1 + u64::from(generated);
        self.joined.retain(|&j| j != r);
        req.join_step = NOT_RUNNING;
        generated
    }

    /// The running request that joined last (the largest (join step, id)): sglang's
    /// `retract_decode` takes it first. Retraction is rare, so it is found by a scan of the
    /// finishing entries rather than kept in order at every join and leave; an entry is live
    /// while its request is in the table with the entry's join step.
    fn newest_running(&self, reqs: &Requests) -> Option<ReqRef> {
        self.finishing
            .iter()
            .filter_map(|&Reverse((_, join, r))| {
                let q = reqs.get(r).filter(|q| q.join_step == join)?;
                Some((join, q.id, r))
            })
            .max()
            .map(|(_, _, r)| r)
    }

    /// sglang's decode retraction: the request leaves the batch and its KV, goes back to the
    /// front of the prealloc queue, and pays the bootstrap, the prefill of everything it has so
    /// far, and the transfer again before it resumes.
    fn retract(
        &mut self,
        r: ReqRef,
        reqs: &mut Requests,
        q: &mut EventQueue<Event>,
        bootstrap_timeout_ns: Option<Nanos>,
    ) {
        let req = reqs.get_mut(r).expect("a running request is live");
        let generated = self.leave_batch(req, r);
        req.extra += generated;
        req.row.retractions += 1;
        req.sender = KvPoll::Bootstrapping;
        req.receiver = KvPoll::Bootstrapping;
        req.prefilled = 0;
        req.sent = 0;
        req.chunks_in_flight = 0;
        req.last_queued = false;
        req.decode_allocated = false;
        if let Some(k) = req.waiting_timeout.take() {
            q.cancel(k);
        }
        let mut held = std::mem::take(&mut req.on_decode);
        if let Some(t) = self.radix.as_deref_mut() {
            // The retracted request re-matches when it is admitted again (sglang's own TODO in
            // `_pre_alloc`: retraction is not radix-aware; its resume re-allocates).
            t.release(req.id, &mut held);
            req.decode_prefix = 0;
        }
        self.holders -= 1;
        self.retractions += 1;
        if let Some(report) = self.core.pages.free(req.id, &held)
            && matches!(report.verdict, Verdict::Corrupted { .. })
        {
            req.corrupted_earlier = Some(Box::new((
                id_list(&report.victims),
                id_list(&report.corrupted_by),
            )));
        }
        self.prealloc.push_front(r);
        // No clock where the backend's sender has none (NIXL before PR #34692).
        if let Some(t) = bootstrap_timeout_ns {
            PollTimeout::Bootstrap.arm(q, req, r, t);
        }
    }

    /// The step ended: every running request produced a token. Inter-token gaps go to `itl`;
    /// requests that produced their last token go to `finished` (still in the batch: the
    /// caller ends them, which calls [`DecodeServer::leave_batch`]).
    pub fn step_done(
        &mut self,
        now: Nanos,
        reqs: &mut Requests,
        itl: &mut Gaps,
        finished: &mut Vec<ReqRef>,
    ) {
        self.steps_done += 1;
        self.core.end_busy(now);
        let tokens = match self.spec.as_deref_mut() {
            None => u64::from(self.running),
            Some(s) => s.commit(),
        };
        self.context_tokens += tokens;
        self.core.tick.tokens += tokens;
        self.record_itl(now, reqs, itl);
        while let Some(&Reverse((step, join, r))) = self.finishing.peek() {
            if step > self.steps_done {
                break;
            }
            self.finishing.pop();
            // A retracted request left a stale entry behind (its join step changed).
            if reqs.get(r).is_some_and(|q| q.join_step == join) {
                // It leaves the batch when it ends (`leave_batch`), in this order.
                finished.push(r);
            }
        }
    }
}

/// A prefill's transfer worker lands a finished batch's bytes in a decode's memory, where the
/// corruption oracle keeps who owns each unit (`sglang::transfer`).
impl super::transfer::DecodeMemories for crate::vocab::ids::IdVec<DecodeId, DecodeServer> {
    fn watched(&mut self, d: DecodeId) -> &mut crate::layout::DecodeMemory {
        self[d]
            .core
            .pages
            .oracle()
            .expect("the oracle watches a decode its batches land on")
    }
}
