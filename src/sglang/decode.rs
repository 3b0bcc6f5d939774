//! The decode server: the prealloc queue, the continuous batch with page-by-page KV growth,
//! and sglang's retraction when the pool runs dry (`docs/sglang-pd.md` §2–§3).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::compute::DecodeCache;
use crate::engine::{EventQueue, Nanos};
use crate::layout::{RequestId, Verdict};
use crate::metrics::histogram::{Batch, Histogram};
use crate::vocab::event::{Event, lane};
use crate::vocab::ids::DecodeId;
use crate::vocab::requests::{KvPoll, NOT_RUNNING, Req, ReqRef, Requests};

use super::Core;

/// sglang's `--num-reserved-decode-tokens` (default 512; `SGLANG_NUM_RESERVED_DECODE_TOKENS`
/// in older builds): decode admits a request only if this many tokens stay free for every
/// request it holds, whatever their output lengths, so that decode rarely has to retract.
pub const RESERVED_DECODE_TOKENS: u32 = 512;

/// sglang's `SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION` (4096): a request's `max_new_tokens` as the
/// admission budget counts it.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4096;

/// `DecodeReqToTokenPool` rows beyond `--max-running-requests` for requests being preallocated
/// or transferred: `pre_alloc_size = 2 × max_num_reqs` when `max_num_reqs <= 32`, else
/// `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS` (0) (`model_runner.py`; `docs/sglang-pd.md`
/// docs/sglang-pd.md §2.3). So above 32 running requests, preallocated, transferring and running requests share
/// the same rows.
fn pre_alloc_rows(max_running: u32) -> u32 {
    if max_running <= 32 {
        2 * max_running
    } else {
        0
    }
}

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
    pub prealloc: VecDeque<ReqRef>,
    /// Requests whose KV landed, waiting to join the batch.
    pub ready: VecDeque<ReqRef>,
    /// Requests in the batch.
    pub running: u32,
    /// Requests that joined at the start of the running step.
    pub joined: Vec<ReqRef>,
    /// (finishing step, join step, request): who leaves the batch after which step. Every
    /// running request has its entry here (an entry whose request left is stale: see
    /// [`DecodeServer::newest_running`]), so retraction finds its victim here too.
    finishing: BinaryHeap<Reverse<(u64, u64, ReqRef)>>,
    /// Running requests by page phase: `phase[k % page_size]` of them need a new page at step k.
    phase: Vec<u32>,
    /// Requests holding decode pages (prealloc'd, transferring or running).
    pub holders: u32,
    /// Requests retracted (sent back to the prealloc queue) so far.
    pub retractions: u64,
    /// Steps finished.
    pub steps_done: u64,
    /// KV tokens the running batch attends to.
    pub context_tokens: u64,
    /// The most tokens any request that joined may reach, `prompt + min(output, 4096)`: an
    /// upper bound of the prealloc budget's `need_single` term (never lowered).
    longest_joined: u64,
    /// When the running step started, ns.
    pub step_started: Nanos,
    /// Session port of each rank, which decides the prefill's transfer shard.
    pub ports: Vec<u32>,
    /// `--max-running-requests`.
    pub max_running: u32,
    /// `--num-reserved-decode-tokens`: the prealloc budget's room per request held.
    pub reserved_tokens: u32,
    /// The step model's batch-size terms, per batch size.
    step_cache: DecodeCache,
    /// Whether steps may be coalesced into runs (see [`DecodeServer::plan_run`]); `World`
    /// turns it off where a step's effects reach beyond this server (an ownership oracle
    /// watching the pages, a step that puts all-to-all bytes on the fabric).
    pub coalesce: bool,
    /// Steps of the current run that end without an event of their own: `World` materializes
    /// them ([`DecodeServer::virtual_step`]) when their time comes or something touches this
    /// server; the run's scheduled event is the end of the step after them.
    pub virtual_left: u32,
    /// When the running step ends, ns.
    pub step_end: Nanos,
    /// The planned durations of the run's steps after the first, ns, in order; the next
    /// virtual step takes `planned[next_planned]`. Slots past the run's steps are stale: the
    /// buffer is reused run after run, grown but never cleared on the hot path.
    planned: Vec<Nanos>,
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
    /// Pages the run's steps still to start will grow by.
    need_left: u64,
    /// The offload of generated KV to the store
    /// (`disaggregation_decode_enable_offload_kvcache`), if on.
    pub offload: Option<Box<super::decode_offload::DecodeOffload>>,
    /// Speculative decoding (`sglang::speculative`), when the pool runs it: each step emits
    /// its requests' accepted tokens instead of one each.
    pub spec: Option<Box<super::speculative::SpecDecode>>,
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
            retractions: 0,
            steps_done: 0,
            context_tokens: 0,
            longest_joined: 0,
            step_started: 0,
            ports,
            max_running,
            reserved_tokens: RESERVED_DECODE_TOKENS,
            step_cache: DecodeCache::default(),
            coalesce: false,
            virtual_left: 0,
            step_end: 0,
            planned: Vec::new(),
            next_planned: 0,
            next_phase: 0,
            horizon: MIN_RUN_STEPS,
            cut: false,
            full: false,
            need_left: 0,
            offload: None,
            spec: None,
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
        !oracle && !a2a && self.offload.is_none() && self.spec.is_none()
    }

    /// The prealloc queue: in order, reserve KV pages for the prompt (and a state slot for
    /// hybrids) while the admission budget holds; stop at the first request that does not fit.
    /// Each admitted request goes to `admitted`, in order (its page ids are then sent to the
    /// prefill).
    ///
    /// sglang's `DecodePreallocQueue.pop_preallocated` with `_allocatable_tokens` (sglang
    /// `disaggregation/decode.py` @ 278e503a; `_allocatable_token_budgets` @ 0035ca42, same
    /// rule), in tokens, with `R = --num-reserved-decode-tokens`:
    ///
    /// ```text
    /// retractable = Σ running (prompt + outputs)
    /// need_single = max running (prompt + min(max_new, 4096)) − retractable
    /// allocatable = free − max(R × held, need_single)         held: running, transferring,
    ///                                                          waiting, just preallocated
    /// admit iff a request row is free and
    ///   max(pages(prompt) + R, prompt + min(max_new, 4096) − retractable) <= allocatable
    /// ```
    ///
    /// Only the prompt's pages are taken; `R` is a budget, never allocated. There is no
    /// exception for an empty server: a prompt that cannot fit with its reservation waits.
    pub fn try_prealloc(&mut self, reqs: &mut Requests, admitted: &mut Vec<ReqRef>) {
        if !self.core.alive {
            return;
        }
        let ps = u64::from(self.core.page_size);
        let r = u64::from(self.reserved_tokens);
        let rows = u64::from(self.max_running) + u64::from(pre_alloc_rows(self.max_running));
        let retractable = self.context_tokens;
        // `need_single` is read only when it could beat the holders' reservation: the longest
        // running request's tokens bound it, so the scan of the batch runs on small batches.
        let mut need_single: Option<u64> = None;
        while let Some(&q) = self.prealloc.front() {
            let Some((id, prompt, output)) = reqs.get(q).map(|x| (x.id, x.prompt(), x.output))
            else {
                self.prealloc.pop_front();
                continue;
            };
            let held = u64::from(self.holders);
            if held >= rows {
                break;
            }
            let reserve = r * held;
            let single = if self.longest_joined > retractable + reserve {
                *need_single.get_or_insert_with(|| self.need_single(reqs))
            } else {
                0
            };
            let free = u64::from(self.core.pages.available()) * ps;
            let allocatable = free.saturating_sub(reserve.max(single));
            let prompt = u64::from(prompt);
            let pages = prompt.div_ceil(ps);
            let finish =
                (prompt + u64::from(output.min(CLIP_MAX_NEW_TOKENS))).saturating_sub(retractable);
            if (pages * ps + r).max(finish) > allocatable {
                break;
            }
            let Some(holding) = self.core.pages.alloc(id, pages as u32, self.core.hybrid) else {
                break;
            };
            let req = reqs.get_mut(q).expect("looked up above");
            self.prealloc.pop_front();
            self.holders += 1;
            req.on_decode = holding;
            req.decode_allocated = true;
            req.receiver = KvPoll::WaitingForInput;
            admitted.push(q);
        }
    }

    /// `need_single` of the budget: the most tokens one running request may reach
    /// (`prompt + min(max_new, 4096)`) less every running request's tokens now.
    fn need_single(&self, reqs: &Requests) -> u64 {
        let longest = self
            .finishing
            .iter()
            .filter_map(|&Reverse((_, join, r))| {
                let q = reqs.get(r).filter(|q| q.join_step == join)?;
                Some(u64::from(q.prompt()) + u64::from(q.output.min(CLIP_MAX_NEW_TOKENS)))
            })
            .max()
            .unwrap_or(0);
        longest.saturating_sub(self.context_tokens)
    }

    /// The KV of `r` landed: it waits to join the batch.
    pub fn enqueue_ready(&mut self, r: ReqRef) {
        self.ready.push_back(r);
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
    /// recently joined requests while the pool is short, as sglang's `retract_decode` does — and
    /// one forward produces a token for every running request. Retracted requests go to
    /// `retracted` (their prefill must count them again).
    ///
    /// The step plans a run ([`DecodeServer::plan_run`]) and schedules its end; the steps
    /// inside a run start in [`DecodeServer::virtual_step`].
    pub fn start_step(
        &mut self,
        (me, now): (DecodeId, Nanos),
        reqs: &mut Requests,
        q: &mut EventQueue<Event>,
        bootstrap_timeout_ns: Nanos,
        retracted: &mut Vec<ReqRef>,
    ) {
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
        loop {
            if self.running == 0 {
                self.core.busy = false;
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
            let victim = self.newest_running(reqs).expect("running > 0");
            self.retract(victim, reqs, q, bootstrap_timeout_ns);
            retracted.push(victim);
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

    /// Times the step that starts at `now` (sets `step_end`) and plans a coalesced run from
    /// it. While the batch cannot change —
    /// nobody joins (the ready and prealloc queues are empty, and whatever would fill them
    /// first cuts the run: `World::touch_decode`), nobody finishes before the run's last step,
    /// and the free pages cover every step's growth — the steps that follow are arithmetic, so
    /// only the run's last step gets an event. Sets `virtual_left` to the steps that end before
    /// it and returns the run's end, ns (without coalescing: `step_end`).
    fn plan_run(&mut self, now: Nanos) -> Nanos {
        // The batch is the run's: its terms are looked up once.
        let step = self
            .core
            .step
            .decode_step(&mut self.step_cache, self.running);
        let (running, mut ctx) = (self.running, self.context_tokens);
        let dt = step.ns(ctx);
        debug_assert_eq!(dt, self.core.step.decode_ns(running, ctx));
        self.step_end = now.saturating_add(dt);
        self.virtual_left = 0;
        self.next_planned = 0;
        // Planning past the next touch is work thrown away: the horizon follows how far runs
        // actually get.
        let (cut, full) = (
            std::mem::take(&mut self.cut),
            std::mem::take(&mut self.full),
        );
        if cut {
            self.horizon = (self.horizon / 2).max(MIN_RUN_STEPS);
        } else if full {
            self.horizon = (self.horizon * 2).min(MAX_RUN_STEPS);
        }
        // A prealloc queue that is not empty is blocked (it was just run): it stays blocked
        // while the run only takes pages and holds the same requests, so its retries at the
        // run's step ends would admit nothing.
        if !self.coalesce || !self.ready.is_empty() {
            return self.step_end;
        }
        let first = self.steps_done + 1;
        // Stale entries of retracted requests end a run early: harmless, only less coalesced.
        let finish = self.finishing.peek().map_or(u64::MAX, |e| e.0.0);
        let last = finish.min(first + self.horizon);
        let mut avail = Self::pages_in_hand(&self.core.pages);
        let start = avail;
        let ps = u64::from(self.core.page_size);
        let n = last.saturating_sub(first);
        // Any `n` steps open at most `ceil(n / ps)` pages per running request: when the pages
        // in hand cover that, no step can stop the run, and its steps are timed in one pass.
        if n.div_ceil(ps) * u64::from(running) <= avail {
            let len = usize::try_from(n).expect("a run's steps fit in memory");
            if self.planned.len() < len {
                self.planned.resize(len, 0);
            }
            let sum = step.fill_run(ctx, running.into(), &mut self.planned[..len]);
            let end = self.step_end.saturating_add(sum);
            self.next_phase = ((first + 1) % ps) as usize;
            self.need_left = self.pages_opened(self.next_phase, n);
            self.virtual_left = n as u32;
            self.full = n == self.horizon;
            return end;
        }
        self.planned.clear();
        let mut end = self.step_end;
        // The phase of step k + 1, walked without a division per step.
        let mut at = ((first + 1) % ps) as usize;
        let mut k = first;
        while k < last {
            // Step k ends without an event; step k + 1 starts and grows its pages.
            let need = u64::from(self.phase[at]);
            if need > avail {
                break;
            }
            at = if at + 1 == self.phase.len() {
                0
            } else {
                at + 1
            };
            avail -= need;
            ctx += u64::from(running);
            let dt = step.ns(ctx);
            debug_assert_eq!(dt, self.core.step.decode_ns(running, ctx));
            end = end.saturating_add(dt);
            self.planned.push(dt);
            k += 1;
        }
        self.virtual_left = (k - first) as u32;
        self.next_phase = ((first + 1) % ps) as usize;
        self.need_left = start - avail;
        self.full = k == first + self.horizon;
        end
    }

    /// Pages the `n` steps whose growth starts at `phase[at]` open: whole turns of the phase
    /// table open one page per running request each.
    fn pages_opened(&self, at: usize, n: u64) -> u64 {
        let ps = self.phase.len();
        let (turns, rest) = (n / ps as u64, (n % ps as u64) as usize);
        let whole = if turns > 0 {
            turns * self.phase.iter().map(|&x| u64::from(x)).sum::<u64>()
        } else {
            0
        };
        let tail = if at + rest <= ps {
            &self.phase[at..at + rest]
        } else {
            &self.phase[at..]
        };
        let wrapped = &self.phase[..(at + rest).saturating_sub(ps)];
        whole
            + tail
                .iter()
                .chain(wrapped)
                .map(|&x| u64::from(x))
                .sum::<u64>()
    }

    /// Free pages a run may plan on. A unified pool's byte budget is checked in floating
    /// point: a page kept in hand lets the page count alone decide.
    fn pages_in_hand(pages: &super::memory::KvPool) -> u64 {
        let margin = u64::from(pages.shared.is_some());
        u64::from(pages.available()).saturating_sub(margin)
    }

    /// The prealloc queue took pages during a run: the run goes on if the pages left still
    /// cover its growth, and is cut at the running step otherwise.
    pub fn check_run(&mut self, me: DecodeId, q: &mut EventQueue<Event>) {
        if self.virtual_left > 0 && Self::pages_in_hand(&self.core.pages) < self.need_left {
            self.cut_run(me, q);
        }
    }

    /// Materializes the next step end of a coalesced run, at `step_end`: exactly what the
    /// step's own event would have done — [`DecodeServer::step_done`] and the next
    /// [`DecodeServer::start_step`] — in the few lines left of them inside a run, where no
    /// request finishes, nobody joins, the planned pages are free and the step's duration was
    /// planned; the run's scheduled event stays. Returns the step's end, ns.
    #[inline]
    pub fn virtual_step(&mut self, reqs: &Requests, itl: &mut Histogram) -> Nanos {
        let now = self.step_end;
        let running = u64::from(self.running);
        // The step ends (`step_done`; busy stays on: the next step starts at once).
        self.steps_done += 1;
        self.context_tokens += running;
        let tick = &mut self.core.tick;
        tick.tokens += running;
        tick.busy_ns += now - tick.busy_since;
        tick.busy_since = now;
        if self.joined.is_empty() {
            itl.record_n(now - self.step_started, running);
        } else {
            self.record_itl(now, reqs, itl);
        }
        debug_assert!(
            self.finishing
                .peek()
                .is_none_or(|e| e.0.0 > self.steps_done),
            "a request finished inside a coalesced run"
        );
        // The next starts (`start_step`): its pages, its planned duration.
        let at = self.next_phase;
        debug_assert_eq!(
            at as u64,
            (self.steps_done + 1) % u64::from(self.core.page_size)
        );
        self.next_phase = if at + 1 == self.phase.len() {
            0
        } else {
            at + 1
        };
        let need = self.phase[at];
        if need > 0 {
            assert!(self.core.pages.grow(need), "a coalesced run retracted");
            self.need_left -= u64::from(need);
        }
        let dt = self.planned[self.next_planned];
        self.next_planned += 1;
        self.step_started = now;
        self.step_end = now.saturating_add(dt);
        self.virtual_left -= 1;
        now
    }

    /// [`DecodeServer::virtual_step`] for every step end of the run at or before `t`, in one
    /// pass: what only adds up (steps, context, tokens, busy time) is added once for them all,
    /// and each step keeps what is its own (its inter-token latency, the pages its successor
    /// opens). `each(end, used_pages)` sees every step end in order, after the next step took
    /// its pages, as an observer of that step's event would. Returns the steps materialized.
    #[inline]
    pub fn virtual_steps(
        &mut self,
        t: Nanos,
        reqs: &Requests,
        itl: &mut Histogram,
        mut each: impl FnMut(Nanos, u32),
    ) -> u32 {
        if self.virtual_left == 0 || self.step_end > t {
            return 0;
        }
        let mut done = 0;
        // Requests that joined at the run's first step record their first token's latency:
        // that step alone goes the single-step way.
        if !self.joined.is_empty() {
            let end = self.virtual_step(reqs, itl);
            each(end, self.core.pages.used());
            done = 1;
        }
        let running = u64::from(self.running);
        let (from, left) = (self.next_planned, self.virtual_left as usize);
        let plan = &self.planned[from..from + left];
        let (mut end, mut started, mut at) = (self.step_end, self.step_started, self.next_phase);
        let (mut used, mut grown, mut k) = (self.core.pages.used(), 0u64, 0);
        let mut batch = Batch::default();
        while k < left && end <= t {
            itl.gather(&mut batch, end - started, running);
            // The next step starts and takes the pages its tokens open.
            let need = self.phase[at];
            at = if at + 1 == self.phase.len() {
                0
            } else {
                at + 1
            };
            if need > 0 {
                assert!(self.core.pages.grow(need), "a coalesced run retracted");
                used += need;
                grown += u64::from(need);
            }
            each(end, used);
            started = end;
            end = end.saturating_add(plan[k]);
            k += 1;
        }
        itl.absorb(&mut batch);
        let steps = k as u64;
        self.steps_done += steps;
        self.context_tokens += steps * running;
        let tick = &mut self.core.tick;
        tick.tokens += steps * running;
        // Each step adds its end less the previous one: together, the last end less the start.
        tick.busy_ns += started - tick.busy_since;
        tick.busy_since = started;
        self.step_started = started;
        self.step_end = end;
        self.next_phase = at;
        self.next_planned += k;
        self.virtual_left -= k as u32;
        self.need_left -= grown;
        debug_assert!(
            self.finishing
                .peek()
                .is_none_or(|e| e.0.0 > self.steps_done),
            "a request finished inside a coalesced run"
        );
        done + k as u32
    }

    /// The inter-token latencies of the step that ended at `now`: one per running request; a
    /// request's first decoded token follows the prefill's token by the wait to join plus this
    /// step.
    fn record_itl(&mut self, now: Nanos, reqs: &Requests, itl: &mut Histogram) {
        let dt = now - self.step_started;
        itl.record_n(dt, u64::from(self.running) - self.joined.len() as u64);
        for r in self.joined.drain(..) {
            if let Some(ft) = reqs.get(r).and_then(|q| q.row.first_token_ns) {
                itl.record(now - ft);
            }
        }
    }

    /// Ends the current run at the running step, whose end gets the run's event: something
    /// touched the server, and the steps after may differ.
    pub fn cut_run(&mut self, me: DecodeId, q: &mut EventQueue<Event>) {
        if self.virtual_left == 0 {
            return;
        }
        self.virtual_left = 0;
        self.next_planned = 0;
        self.cut = true;
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        let key = q.schedule_keyed(self.step_end, Event::DecodeStepDone { decode: me });
        self.core.step_key = Some(key);
    }

    /// Takes a running request out of the batch (it finished, failed or is retracted), giving
    /// back the pages it grew; returns how many tokens it generated here.
    pub fn leave_batch(&mut self, req: &mut Req, r: ReqRef) -> u32 {
        let generated = match self.spec.as_deref_mut() {
            None => (self.steps_done - req.join_step) as u32,
            Some(s) => s.leave(r),
        };
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
        bootstrap_timeout_ns: Nanos,
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
        let held = std::mem::take(&mut req.on_decode);
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
        let key = q.schedule_lane(
            lane::BOOTSTRAP_TIMEOUT,
            bootstrap_timeout_ns,
            Event::BootstrapTimeout { req: r },
        );
        if let Some(old) = req.bootstrap_timeout.replace(key) {
            q.cancel(old);
        }
    }

    /// The step ended: every running request produced a token. Inter-token latencies go to
    /// `itl`; requests that produced their last token go to `finished` (still in the batch: the
    /// caller ends them, which calls [`DecodeServer::leave_batch`]).
    pub fn step_done(
        &mut self,
        now: Nanos,
        reqs: &mut Requests,
        itl: &mut Histogram,
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

    /// A crash: the batch and both queues are lost.
    pub fn crash(&mut self, q: &mut EventQueue<Event>) {
        self.virtual_left = 0;
        self.planned.clear();
        self.next_planned = 0;
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        self.core.busy = false;
        self.prealloc.clear();
        self.ready.clear();
        if let Some(o) = self.offload.as_mut() {
            o.crash();
        }
        if let Some(s) = self.spec.as_deref_mut() {
            s.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit::{core, request};

    /// Request `r` holds one page of `d` (prealloc bypassed) and its KV landed: it joins at the
    /// next step.
    fn landed(d: &mut DecodeServer, reqs: &mut Requests, r: ReqRef) {
        let id = reqs.get(r).unwrap().id;
        let h = d.core.pages.alloc(id, 1, false).unwrap();
        let req = reqs.get_mut(r).unwrap();
        req.on_decode = h;
        req.decode_allocated = true;
        req.receiver = KvPoll::Success;
        d.holders += 1;
        d.enqueue_ready(r);
    }

    /// sglang's budget by hand (`try_prealloc`'s formula), 80 pages of 16 tokens = 1,280
    /// tokens: each holder keeps 512 tokens of reservation whatever its output (64 here), so
    /// two short requests are admitted and the third waits (1,216 free − 2 × 512 = 192 <
    /// 32 + 512).
    #[test]
    fn prealloc_reserves_512_tokens_for_every_holder_whatever_its_output() {
        let mut reqs = Requests::default();
        let mut d = DecodeServer::new(core(80, 16), vec![17_000], u32::MAX);
        let v: Vec<_> = (0..3).map(|i| request(&mut reqs, i, 32, 64)).collect();
        d.prealloc.extend(v.iter().copied());
        let mut admitted = Vec::new();
        d.try_prealloc(&mut reqs, &mut admitted);
        assert_eq!(
            admitted,
            v[..2],
            "the third needs 544 of 192 allocatable tokens"
        );
        assert_eq!((d.holders, d.core.pages.available()), (2, 76));
        assert_eq!(reqs.get(v[0]).unwrap().receiver, KvPoll::WaitingForInput);
        assert_eq!(d.prealloc.len(), 1);
        // One page more is still short (1,232 − 1,024 = 208 < 544); 22 more pages are enough.
        let mut d = DecodeServer::new(core(81, 16), vec![17_000], u32::MAX);
        d.prealloc.extend(v.iter().copied());
        let mut admitted = Vec::new();
        d.try_prealloc(&mut reqs, &mut admitted);
        assert_eq!(admitted.len(), 2);
        let mut d = DecodeServer::new(core(102, 16), vec![17_000], u32::MAX);
        d.prealloc.extend(v.iter().copied());
        let mut admitted = Vec::new();
        d.try_prealloc(&mut reqs, &mut admitted);
        assert_eq!(admitted.len(), 3, "1,600 free − 1,024 = 576 ≥ 544");
    }

    /// No exception for an empty server: a prompt whose pages and reservation exceed the pool
    /// waits (13 pages = 208 tokens + 512 > 640), as sglang's budget makes it.
    #[test]
    fn a_lone_prompt_that_cannot_keep_its_reservation_waits() {
        let mut reqs = Requests::default();
        let mut d = DecodeServer::new(core(40, 16), vec![17_000], u32::MAX);
        let a = request(&mut reqs, 0, 200, 8);
        d.prealloc.push_back(a);
        let mut admitted = Vec::new();
        d.try_prealloc(&mut reqs, &mut admitted);
        assert!(admitted.is_empty());
        assert_eq!(d.core.pages.available(), 40);
    }

    /// Request rows: `--max-running-requests` 1 (≤ 32) gets `2 × 1` pre-alloc rows, so three
    /// requests are held at most; 40 (> 32) gets none, so 40.
    #[test]
    fn prealloc_stops_when_the_request_rows_are_held() {
        for (max_running, rows) in [(1u32, 3usize), (40, 40)] {
            let mut reqs = Requests::default();
            let mut d = DecodeServer::new(core(100_000, 16), vec![17_000], max_running);
            let v: Vec<_> = (0..50).map(|i| request(&mut reqs, i, 16, 4)).collect();
            d.prealloc.extend(v.iter().copied());
            let mut admitted = Vec::new();
            d.try_prealloc(&mut reqs, &mut admitted);
            assert_eq!(admitted.len(), rows, "max_running_requests {max_running}");
        }
    }

    /// `need_single` (sglang's "each request can finish with all others retracted"): one
    /// running request of 16 prompt tokens that may grow to 16 + 3,500 holds back every new
    /// one, where the 512-token reservations alone would let six in. 250 pages of 16 = 4,000
    /// tokens; the running request holds 1 page, so 3,984 are free and its tokens are 17:
    /// need_single = 3,516 − 17 = 3,499, allocatable = 3,984 − 3,499 = 485 < 16 + 512.
    /// With an output of 100 instead, need_single = 99 < 512 and the reservations decide:
    /// after k admissions 3,984 − 16 k − 512 (1 + k) ≥ 528 holds for k ≤ 5, six admitted.
    #[test]
    fn need_single_keeps_room_for_the_longest_running_request_to_finish() {
        let admitted_beside = |long_output: u32| {
            let mut reqs = Requests::default();
            let mut q = EventQueue::new();
            let mut d = DecodeServer::new(core(250, 16), vec![17_000], u32::MAX);
            d.coalesce = false;
            let a = request(&mut reqs, 0, 16, long_output);
            landed(&mut d, &mut reqs, a);
            let mut retracted = Vec::new();
            d.start_step(
                (DecodeId(0), q.now()),
                &mut reqs,
                &mut q,
                1_000,
                &mut retracted,
            );
            assert_eq!((d.running, d.context_tokens), (1, 17));
            let v: Vec<_> = (1..10).map(|i| request(&mut reqs, i, 16, 4)).collect();
            d.prealloc.extend(v.iter().copied());
            let mut admitted = Vec::new();
            d.try_prealloc(&mut reqs, &mut admitted);
            admitted.len()
        };
        assert_eq!(admitted_beside(3_500), 0);
        assert_eq!(admitted_beside(100), 6);
    }

    /// A batch that runs the pool dry retracts its most recently joined request: it leaves with
    /// its pages, goes to the front of the prealloc queue with what it generated added to its
    /// prompt, and gets a fresh bootstrap timeout.
    #[test]
    fn a_dry_pool_retracts_the_newest_request() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut d = DecodeServer::new(core(4, 4), vec![17_000], u32::MAX);
        // Step by step: this test plays `World`'s part for one event per step.
        d.coalesce = false;
        let a = request(&mut reqs, 0, 4, 100);
        let b = request(&mut reqs, 1, 4, 100);
        // Admit both with the lone-request rule bypassed: one page each.
        for r in [a, b] {
            landed(&mut d, &mut reqs, r);
        }
        let mut retracted = Vec::new();
        // Steps until the two requests' growth needs more than the 2 free pages.
        let mut steps = 0;
        while retracted.is_empty() && steps < 20 {
            d.start_step(
                (DecodeId(0), q.now()),
                &mut reqs,
                &mut q,
                1_000,
                &mut retracted,
            );
            let (now, _) = q.pop().unwrap();
            let mut finished = Vec::new();
            let mut itl = Histogram::default();
            d.step_done(now, &mut reqs, &mut itl, &mut finished);
            assert!(finished.is_empty());
            steps += 1;
        }
        assert_eq!(retracted, [b], "the newest joined request goes first");
        let rb = reqs.get(b).unwrap();
        assert_eq!(
            (rb.sender, rb.receiver),
            (KvPoll::Bootstrapping, KvPoll::Bootstrapping)
        );
        assert!(rb.extra > 0 && rb.row.retractions == 1);
        assert!(rb.bootstrap_timeout.is_some());
        assert_eq!(d.prealloc.front(), Some(&b));
        assert_eq!((d.running, d.holders, d.retractions), (1, 1, 1));
    }

    /// Retraction's victim, found among the finishing entries, is the newest running request
    /// a scan of the table finds, while requests join at various steps, end in any order, are
    /// retracted and join again (stale entries of both kinds stay behind).
    #[test]
    fn retraction_takes_the_newest_running_request_a_table_scan_finds() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut d = DecodeServer::new(core(100_000, 4), vec![17_000], u32::MAX);
        d.coalesce = false;
        let scan = |reqs: &Requests| {
            let live = reqs.matching(|q| q.join_step != NOT_RUNNING);
            live.into_iter()
                .map(|r| (reqs.get(r).unwrap().join_step, r.id, r))
                .max()
                .map(|e| e.2)
        };
        let (mut x, mut next_id, mut retracted) = (7u64, 0u64, 0);
        for _ in 0..400 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // 0–2 requests land, from new arrivals or from the retracted ones.
            for _ in 0..(x >> 40) % 3 {
                let r = match d.prealloc.pop_front() {
                    Some(r) if (x >> 20) % 2 == 0 => r,
                    other => {
                        d.prealloc.extend(other);
                        next_id += 1;
                        request(&mut reqs, next_id, 4 + (x >> 50) as u32 % 9, 1_000)
                    }
                };
                let id = reqs.get(r).unwrap().id;
                let need = reqs.get(r).unwrap().prompt().div_ceil(4);
                let h = d.core.pages.alloc(id, need, false).unwrap();
                let req = reqs.get_mut(r).unwrap();
                (req.on_decode, req.decode_allocated) = (h, true);
                d.holders += 1;
                d.enqueue_ready(r);
            }
            d.start_step(
                (DecodeId(0), q.now()),
                &mut reqs,
                &mut q,
                1_000,
                &mut Vec::new(),
            );
            assert_eq!(d.newest_running(&reqs), scan(&reqs));
            match (x >> 30) % 4 {
                // The newest is retracted.
                0 => {
                    if let Some(v) = scan(&reqs) {
                        d.retract(v, &mut reqs, &mut q, 1_000);
                        retracted += 1;
                    }
                }
                // A running request ends (out of the table, then out of the batch).
                1 => {
                    let live = reqs.matching(|q| q.join_step != NOT_RUNNING);
                    if !live.is_empty() {
                        let r = live[(x >> 8) as usize % live.len()];
                        let mut req = reqs.take(r).unwrap();
                        d.leave_batch(&mut req, r);
                        d.core.pages.free(req.id, &req.on_decode);
                        d.holders -= 1;
                    }
                }
                _ => {}
            }
            assert_eq!(d.newest_running(&reqs), scan(&reqs));
            if let Some(k) = d.core.step_key.take() {
                q.cancel(k);
            }
            d.core.busy = false;
            d.steps_done += 1;
        }
        assert!(retracted > 50 && next_id > 200, "{retracted} {next_id}");
    }

    /// The pages a run's steps open, counted by whole turns of the phase table, are the sum
    /// a step-by-step walk of the table finds, from every start and over every length.
    #[test]
    fn pages_opened_is_the_walk() {
        let mut d = DecodeServer::new(core(8, 16), vec![17_000], u32::MAX);
        for (i, x) in d.phase.iter_mut().enumerate() {
            *x = (i as u32 * 7 + 3) % 5;
        }
        for at in 0..16 {
            for n in 0..70u64 {
                let walk: u64 = (0..n as usize)
                    .map(|k| u64::from(d.phase[(at + k) % 16]))
                    .sum();
                assert_eq!(d.pages_opened(at, n), walk, "from {at}, {n} steps");
            }
        }
    }

    /// A crash cancels the running step: its end never fires.
    #[test]
    fn a_crash_cancels_the_running_step() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut d = DecodeServer::new(core(16, 16), vec![17_000], u32::MAX);
        let a = request(&mut reqs, 0, 16, 10);
        d.enqueue_ready(a);
        d.start_step(
            (DecodeId(0), q.now()),
            &mut reqs,
            &mut q,
            1_000,
            &mut Vec::new(),
        );
        assert_eq!(q.len(), 1);
        d.crash(&mut q);
        assert!(q.is_empty() && !d.core.busy);
    }

    /// (time, steps done, context tokens, free pages, busy ns and tokens of the tick) after a
    /// step end and the next start.
    type StepState = (Nanos, u64, u64, u32, Nanos, u64);

    /// What [`step_through`] saw: states, finished requests, events, latency buckets.
    type Walk = (Vec<StepState>, Vec<ReqRef>, usize, Vec<(u64, u64, u64)>);

    /// How a test plays `World`'s part in materializing a run's steps.
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        /// No coalescing: one event per step.
        Events,
        /// Coalesced, each step by [`DecodeServer::virtual_step`].
        Single,
        /// Coalesced, the due steps in one [`DecodeServer::virtual_steps`] pass.
        Pass,
    }

    fn state(d: &DecodeServer, t: Nanos) -> StepState {
        let free = d.core.pages.available();
        let tick = &d.core.tick;
        (
            t,
            d.steps_done,
            d.context_tokens,
            free,
            tick.busy_ns,
            tick.tokens,
        )
    }

    /// Steps a decode of three requests (outputs 5, 9 and 40 tokens, pages of 4 tokens) to its
    /// end, playing `World`'s part: after every step end and the next step's start, its
    /// state; the finished requests; the events it took; the inter-token latencies.
    fn step_through(mode: Mode) -> Walk {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut d = DecodeServer::new(core(24, 4), vec![17_000], u32::MAX);
        d.coalesce = mode != Mode::Events;
        for (i, out) in [5, 9, 40].into_iter().enumerate() {
            let r = request(&mut reqs, i as u64, 6, out);
            let id = reqs.get(r).unwrap().id;
            let req = reqs.get_mut(r).unwrap();
            req.on_decode = d.core.pages.alloc(id, 2, false).unwrap();
            req.decode_allocated = true;
            req.receiver = KvPoll::Success;
            req.row.first_token_ns = Some(0);
            d.holders += 1;
            d.enqueue_ready(r);
        }
        let (mut seen, mut done, mut events) = (Vec::new(), Vec::new(), 0);
        let mut itl = Histogram::default();
        d.start_step((DecodeId(0), 0), &mut reqs, &mut q, 1_000, &mut Vec::new());
        while let Some((now, _)) = q.pop() {
            events += 1;
            // Halfway through the run first, as a touch would, then to its end.
            for t in [now - (now - d.step_started) / 2, now] {
                if mode == Mode::Pass {
                    let mut ends = Vec::new();
                    d.virtual_steps(t, &reqs, &mut itl, |end, used| ends.push((end, used)));
                    // The pass leaves only the last state to read: earlier ones are rebuilt
                    // from the last by the arithmetic it skipped.
                    let n = ends.len() as u64;
                    for (j, &(end, used)) in ends.iter().enumerate() {
                        let back = n - 1 - j as u64;
                        let (running, total) = (u64::from(d.running), d.core.pages.total());
                        let last = state(&d, end);
                        seen.push(if back == 0 {
                            last
                        } else {
                            (
                                end,
                                last.1 - back,
                                last.2 - back * running,
                                total - used,
                                0,
                                0,
                            )
                        });
                    }
                } else {
                    while d.virtual_left > 0 && d.step_end <= t {
                        let end = d.virtual_step(&reqs, &mut itl);
                        seen.push(state(&d, end));
                    }
                }
            }
            let mut finished = Vec::new();
            d.step_done(now, &mut reqs, &mut itl, &mut finished);
            for r in finished {
                let mut req = reqs.take(r).unwrap();
                d.leave_batch(&mut req, r);
                done.push(r);
            }
            let mut retracted = Vec::new();
            d.start_step((DecodeId(0), now), &mut reqs, &mut q, 1_000, &mut retracted);
            assert!(retracted.is_empty(), "the pool suffices");
            // As a materialized step: its end, then the next step's start (pages grown).
            seen.push(state(&d, now));
        }
        (seen, done, events, itl.buckets().collect())
    }

    /// Busy time and tokens of the tick are read only at the pass's end: earlier states of a
    /// pass carry 0 there, and the step-by-step states are compared alike.
    fn without_tick_inside_passes(pass: &[StepState], other: &[StepState]) -> Vec<StepState> {
        other
            .iter()
            .zip(pass)
            .map(|(&o, p)| {
                if p.4 == 0 && p.5 == 0 {
                    (o.0, o.1, o.2, o.3, 0, 0)
                } else {
                    o
                }
            })
            .collect()
    }

    /// A coalesced run materializes exactly the step ends, contexts, page counts, tick
    /// counters and inter-token latencies of one event per step — one step at a time or in
    /// one pass — and ends where a request finishes; it takes far fewer events.
    #[test]
    fn a_coalesced_run_replays_every_step_exactly() {
        let (steps, done, events, itl) = step_through(Mode::Events);
        let (steps_s, done_s, events_s, itl_s) = step_through(Mode::Single);
        let (steps_p, done_p, events_p, itl_p) = step_through(Mode::Pass);
        assert_eq!(
            steps.len(),
            39,
            "40 output tokens: the first comes from the prefill"
        );
        assert_eq!(steps, steps_s);
        assert_eq!(without_tick_inside_passes(&steps_p, &steps), steps_p);
        assert!(
            steps_p.iter().filter(|s| s.4 == 0).count() > 10,
            "passes covered several steps"
        );
        assert_eq!((&done, &done), (&done_s, &done_p));
        assert_eq!((&itl, &itl), (&itl_s, &itl_p));
        assert_eq!(events, 39);
        assert_eq!(events_s, events_p);
        assert!(
            events_s <= 6,
            "one event per finish and per horizon: {events_s}"
        );
    }
}
