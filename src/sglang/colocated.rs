//! A plain (colocated) sglang server: one instance computes prompts and generates tokens, no KV
//! crosses the fabric. The baseline a PD cluster is compared with (DistServe's Fig. 1 question:
//! PD or not, and at what ratio).
//!
//! It follows sglang's scheduler with chunked prefill (`docs/sglang-pd.md` §14), in one of the
//! two ways `--enable-mixed-chunk` (`pools.server.enable_mixed_chunk`) chooses:
//! - **off, sglang's default** (`ServerArgs.enable_mixed_chunk = False`): each turn of the loop
//!   runs one batch, and `Scheduler.get_next_batch_to_run` runs a prefill batch "first if
//!   possible" — when `get_new_batch_prefill` forms one (a chunk of the request being chunked,
//!   or waiting requests the `PrefillAdder` admits) it is the whole forward and the decode batch
//!   waits; the decode step runs only when none forms (`managers/scheduler.py` @ 0003215c). A
//!   long prompt's chunks run back to back, so every running request's next token waits for
//!   all of them: the interference PD removes;
//! - **on**: every step is one forward mixing the running decode batch (one token each) with a
//!   chunk of prefill work (`ScheduleBatch.mix_with_running`, `schedule_batch.py`), the prefill
//!   budget being `chunked_prefill_size` (within `max_prefill_tokens`) **minus the running
//!   decode tokens** (`PrefillAdder.__init__`: `rem_chunk_tokens -= mixed_with_decode_tokens`,
//!   `schedule_policy.py`);
//! - either way a truncated chunk is rounded down to whole pages (`PrefillAdder.add_one_req`:
//!   `trunc_len = rem_chunk_tokens // page_size * page_size`);
//! - a waiting request is admitted when its prompt plus `min(max_new_tokens, 4096)` fits in the
//!   free KV less what the holders are expected to still need, `new_token_ratio` (0.7, sglang's
//!   `SGLANG_INIT_NEW_TOKEN_RATIO`) of their `min(max_new_tokens, 4096)`
//!   (`PrefillAdder.add_one_req`, `rem_total_tokens`; `CLIP_MAX_NEW_TOKENS_ESTIMATION`); the
//!   estimate is kept from admission rather than shrunk per token (sglang decays the ratio
//!   instead), so admission is slightly conservative;
//! - when a step's pages run out, the most recently joined request is retracted to the front of
//!   the waiting queue and its prompt and generated tokens are computed again
//!   (`ScheduleBatch.retract_decode`).
//!
//! Like the decode server, a step is one event for the whole batch: page growth is counted per
//! page phase and finishing per step, never per token.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use crate::engine::{EventQueue, Nanos};
use crate::metrics::gaps::{Gaps, StepGaps};
use crate::vocab::event::Event;
use crate::vocab::ids::ColocatedId;
use crate::vocab::{ErrorKind, GapKind, Outcome, RequestRow};

use super::Core;
use crate::vocab::requests::Holding;

/// sglang's `CLIP_MAX_NEW_TOKENS_ESTIMATION`: output lengths count at most this much in the
/// admission estimate.
pub const CLIP_MAX_NEW_TOKENS: u32 = 4096;
/// sglang's `SGLANG_INIT_NEW_TOKEN_RATIO`: the share of their outputs the holders are expected
/// to still need.
pub const NEW_TOKEN_RATIO: f64 = 0.7;

/// A slot in the server's request table.
type Slot = u32;

/// A request this server holds.
struct CoReq {
    id: u64,
    input: u32,
    output: u32,
    /// Tokens generated before a retraction (they are part of the prompt computed again).
    extra: u32,
    /// Prompt tokens computed so far.
    prefilled: u32,
    holding: Holding,
    /// Whether it holds its prompt's pages.
    admitted: bool,
    /// Decode steps done when it joined the batch, or `None` while not running.
    join_step: Option<u64>,
    /// Its share of the admission estimate, tokens.
    reserve: f64,
    /// When the scheduler has it (its tokenizer manager is done), ns.
    ready_ns: Nanos,
    row: RequestRow,
}

impl CoReq {
    fn prompt(&self) -> u32 {
        self.input + self.extra
    }
}

/// What one step produced, for `World` to record.
#[derive(Default)]
pub struct StepOutcome {
    /// Rows of requests that produced their last token (outcome and times still to set by the
    /// caller: it ends them).
    pub finished: Vec<RequestRow>,
    /// Prompt tokens of requests whose first token came in this step.
    pub first_token_inputs: Vec<u32>,
    /// Tokens generated in this step (decode batch plus first tokens).
    pub tokens: u64,
}

/// One colocated instance.
pub struct ColocatedServer {
    /// What every server has.
    pub core: Core,
    waiting: VecDeque<Slot>,
    /// Requests whose prompt is computed, waiting for room in a batch at its cap (they keep
    /// their pages, as sglang keeps their KV).
    computed: VecDeque<Slot>,
    chunked: Option<Slot>,
    /// The prefill part of the running step: slot and tokens computed.
    step_prefill: Vec<(Slot, u32)>,
    /// Requests in the decode batch.
    running: u32,
    /// Requests that joined the batch for the running step.
    joined: Vec<Slot>,
    table: Vec<Option<CoReq>>,
    free_slots: Vec<Slot>,
    live: u32,
    /// (finishing step, join step, slot).
    finishing: BinaryHeap<Reverse<(u64, u64, Slot)>>,
    /// Running requests by (join step, id): retraction takes the most recent.
    batch_order: BTreeSet<(u64, u64, Slot)>,
    /// Running requests by page phase (see `phase_key`).
    phase: Vec<u32>,
    steps_done: u64,
    /// KV tokens the decode batch attends to.
    context_tokens: u64,
    /// Prefill token budget of a step before the decode tokens are taken off.
    budget: u32,
    max_running: u32,
    /// The holders' admission estimate, tokens.
    reserved_tokens: f64,
    step_started: Nanos,
    /// When the last decode step ended, ns: the last token of every request in it. Unmixed,
    /// prefill forwards may run between two decode steps, and a running request's gap spans
    /// them.
    last_step_end: Nanos,
    /// The batch's shared step gaps, for each request's worst gap (`metrics::gaps`).
    gaps: StepGaps,
    shape: Vec<(u32, u32)>,
    /// `--enable-mixed-chunk`: every forward carries the decode batch with the prefill chunk.
    /// Off (sglang's default), a forward is a prefill batch or a decode step, never both.
    mixed: bool,
    /// Whether the running forward steps the decode batch (always, mixed; off, only a forward
    /// that formed no prefill batch).
    decodes: bool,
}

/// What a colocated crash ends: the rows of every request it held, failed, in slot order,
/// for `World` to write with `message`.
#[derive(Debug)]
pub struct ColocatedCrash {
    /// The failed requests' rows (`finish_ns`, `outcome`, `error_kind` set).
    pub failed: Vec<RequestRow>,
    /// The failure's text.
    pub message: String,
}

/// The page phase of a request that joined after `join_step` steps with `prompt` tokens of KV:
/// it needs a new page at step `k` iff `k ≡ join_step + 1 − prompt (mod ps)` (the same rule as
/// the decode server's).
fn phase_key(join_step: u64, prompt: u32, ps: u32) -> usize {
    let ps = u64::from(ps);
    ((join_step + 1) % ps + ps - u64::from(prompt) % ps) as usize % ps as usize
}

impl ColocatedServer {
    /// An idle server; `budget` is `min(chunked_prefill_size, max_prefill_tokens)`, `mixed`
    /// sglang's `--enable-mixed-chunk`.
    pub fn new(core: Core, budget: u32, max_running: u32, mixed: bool) -> Self {
        let ps = core.page_size as usize;
        Self {
            core,
            waiting: VecDeque::new(),
            computed: VecDeque::new(),
            chunked: None,
            step_prefill: Vec::new(),
            running: 0,
            joined: Vec::new(),
            table: Vec::new(),
            free_slots: Vec::new(),
            live: 0,
            finishing: BinaryHeap::new(),
            batch_order: BTreeSet::new(),
            phase: vec![0; ps],
            steps_done: 0,
            context_tokens: 0,
            budget,
            max_running,
            reserved_tokens: 0.0,
            step_started: 0,
            last_step_end: 0,
            gaps: StepGaps::default(),
            shape: Vec::new(),
            mixed,
            decodes: false,
        }
    }

    /// Requests in the decode batch.
    pub fn running(&self) -> u32 {
        self.running
    }

    /// Requests waiting for (the rest of) their prefill.
    pub fn queued(&self) -> u32 {
        (self.waiting.len() + self.computed.len()) as u32 + u32::from(self.chunked.is_some())
    }

    /// Requests held, in any stage.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Its running forward's end moved to `at` (its all-to-all landed, `sglang::a2a`), with
    /// the event `key` that ends it.
    #[inline]
    pub fn forward_ends(&mut self, at: crate::engine::Nanos, key: crate::engine::EventKey) {
        self.core.forward_ends(at, key);
    }

    /// Request `id` of `input` prompt and `output` output tokens was routed here: it counts in
    /// this second's arrivals, and it is rejected up front when its prompt and output can never
    /// fit in the KV pool, as sglang's tokenizer manager rejects it
    /// (`sglang::tokenizer::check_colocated`).
    pub fn admit(
        &mut self,
        id: u64,
        (input, output): (u32, u32),
    ) -> Result<(), super::tokenizer::Rejection> {
        self.core.request_arrived();
        super::tokenizer::check_colocated(id, (input, output), &self.core)
    }

    /// A routed request joins the waiting queue; the scheduler may admit it from `ready_ns`
    /// (when the tokenizer manager hands it over: requests become ready in arrival order).
    pub fn arrive(&mut self, row: RequestRow, ready_ns: Nanos) {
        let r = CoReq {
            id: row.id,
            input: row.input_tokens,
            output: row.output_tokens,
            extra: 0,
            prefilled: 0,
            holding: Holding::default(),
            admitted: false,
            join_step: None,
            reserve: 0.0,
            ready_ns,
            row,
        };
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.table[s as usize] = Some(r);
                s
            }
            None => {
                self.table.push(Some(r));
                (self.table.len() - 1) as Slot
            }
        };
        self.live += 1;
        self.core.outstanding += 1;
        self.waiting.push_back(slot);
    }

    fn req(&mut self, s: Slot) -> &mut CoReq {
        self.table[s as usize].as_mut().expect("a live slot")
    }

    /// Starts the next forward if the server is idle and has work. Mixed
    /// (`--enable-mixed-chunk`): the decode batch takes its pages (retracting while short), then
    /// the prefill part fills what the budget leaves, and one forward runs both. Unmixed
    /// (sglang's default): a prefill batch that forms runs alone and the decode batch waits;
    /// only when none forms does the decode step run ([`ColocatedServer::try_step_unmixed`]).
    pub fn try_step(&mut self, me: ColocatedId, q: &mut EventQueue<Event>) {
        let now = q.now();
        if self.core.busy || !self.core.alive {
            return;
        }
        while self.running < self.max_running {
            let Some(s) = self.computed.pop_front() else {
                break;
            };
            let r = self.req(s);
            let remaining = r.output - 1 - r.extra.min(r.output - 1);
            self.join(s, now, remaining);
        }
        if !self.mixed {
            self.try_step_unmixed(me, q);
            return;
        }
        self.grow_or_retract();
        self.form_prefill(now);
        if self.running == 0 && self.step_prefill.is_empty() {
            return;
        }
        // One forward over the prefill chunks and the decode tokens, as sglang's mixed chunked
        // prefill runs them (`compute::StepModel::mixed_ns`: the decode sequences read their
        // whole context, the chunks pay prefill compute and attention).
        let dt = if self.shape.is_empty() {
            self.core.step.decode_ns(self.running, self.context_tokens)
        } else {
            self.core
                .step
                .mixed_ns(&self.shape, self.running, self.context_tokens)
        };
        self.decodes = true;
        self.start_forward(me, q, dt);
    }

    /// sglang's `Scheduler.get_next_batch_to_run` without mixed chunks
    /// (`managers/scheduler.py` @ 0003215c; `docs/sglang-pd.md` §14.1): `get_new_batch_prefill`
    /// first — the chunked request's next chunk, then waiting requests while the `PrefillAdder`
    /// admits them, its budgets not reduced by the running batch (`mixed_with_decode_tokens` is
    /// `running_bs if self.is_mixed_chunk else 0`) — and "Run prefill first if possible": a batch
    /// that forms is the whole forward. Only when none forms does `update_running_batch` take the
    /// decode step's pages (`check_decode_mem`, retracting while short) and the decode step run.
    /// A chunked prompt's chunks thus run back to back, the decode batch waiting for the last
    /// (sglang always forms a batch for its `chunked_req`). A retraction that empties the batch
    /// leaves the victims waiting: the loop's next turn (at once) may prefill them.
    fn try_step_unmixed(&mut self, me: ColocatedId, q: &mut EventQueue<Event>) {
        let now = q.now();
        self.form_prefill(now);
        if self.step_prefill.is_empty() && self.running > 0 {
            self.grow_or_retract();
            if self.running == 0 {
                self.form_prefill(now);
            }
        }
        let dt = if !self.step_prefill.is_empty() {
            self.decodes = false;
            self.core.step.prefill_ns(&self.shape)
        } else if self.running > 0 {
            self.decodes = true;
            self.core.step.decode_ns(self.running, self.context_tokens)
        } else {
            return;
        };
        self.start_forward(me, q, dt);
    }

    /// The decode step's pages: every running request whose next token opens a page takes
    /// one, the most recently joined request retracted while the pool is short (sglang's
    /// `retract_decode`).
    fn grow_or_retract(&mut self) {
        let ps = self.core.page_size;
        loop {
            if self.running == 0 {
                break;
            }
            let need = self.phase[((self.steps_done + 1) % u64::from(ps)) as usize];
            if self.core.pages.grow(need) {
                break;
            }
            let &(_, _, victim) = self.batch_order.last().expect("running > 0");
            self.retract(victim);
        }
    }

    /// A forward of `dt` ns starts now.
    fn start_forward(&mut self, me: ColocatedId, q: &mut EventQueue<Event>, dt: Nanos) {
        let now = q.now();
        self.core.start_busy(now);
        self.step_started = now;
        self.core.step_key =
            Some(q.schedule_keyed_in(dt.max(1), Event::ColocatedStepDone { colocated: me }));
    }

    /// The prefill part of a step: the chunked request first, then waiting requests in order
    /// while KV and the budget allow (sglang's `PrefillAdder`).
    fn form_prefill(&mut self, now: Nanos) {
        self.shape.clear();
        self.step_prefill.clear();
        let ps = self.core.page_size;
        // `PrefillAdder`'s `mixed_with_decode_tokens`: the running batch's tokens come off the
        // budget only when they share the forward.
        let mixed_with_decode = if self.mixed { self.running } else { 0 };
        let mut budget = self.budget.saturating_sub(mixed_with_decode);
        while budget > 0 {
            let (s, from_chunked) = match self.chunked.take() {
                Some(s) => (s, true),
                None => match self.waiting.front() {
                    Some(&s)
                        if self.table[s as usize]
                            .as_ref()
                            .is_some_and(|r| r.ready_ns <= now) =>
                    {
                        (s, false)
                    }
                    _ => break,
                },
            };
            // Unmixed, sglang's cap on admission: no new request once the running batch and
            // the batch being formed (the chunked request included) reach
            // `max_running_requests` (`len(adder.can_run_list) >= get_num_allocatable_reqs(
            // running_bs)` → `batch_is_full`). A prefill past the cap would otherwise hold the
            // decode step back for a request that cannot join. (The mixed server keeps pdsim's
            // earlier rule: such a request is computed and waits for a place.)
            let batch = self.running as usize + self.computed.len() + self.step_prefill.len();
            if !from_chunked && !self.mixed && batch >= self.max_running as usize {
                break;
            }
            if !from_chunked {
                let running = self.running;
                let holders_reserve = self.reserved_tokens;
                let free_tokens = f64::from(self.core.pages.available()) * f64::from(ps);
                let hybrid = self.core.hybrid;
                let r = self.req(s);
                let rest = (r.output - 1 - r.extra.min(r.output - 1)).min(CLIP_MAX_NEW_TOKENS);
                let wanted = f64::from(r.prompt()) + f64::from(rest);
                let lone = running == 0 && holders_reserve == 0.0;
                if !lone && wanted >= free_tokens - holders_reserve {
                    break;
                }
                let (id, pages) = (r.id, r.prompt().div_ceil(ps));
                let Some(holding) = self.core.pages.alloc(id, pages, hybrid) else {
                    break;
                };
                self.waiting.pop_front();
                let r = self.req(s);
                r.holding = holding;
                r.admitted = true;
                r.reserve = f64::from(rest) * NEW_TOKEN_RATIO;
                r.row.prefill_start_ns.get_or_insert(now);
                let reserve = r.reserve;
                self.reserved_tokens += reserve;
            }
            let r = self.req(s);
            let left = r.prompt() - r.prefilled;
            let n = if left <= budget {
                left
            } else {
                // A truncated chunk is whole pages (sglang `add_one_req`), at least one token.
                (budget / ps * ps).max(budget.min(1))
            };
            let prefilled = r.prefilled;
            self.shape.push((n, prefilled));
            self.step_prefill.push((s, n));
            budget -= n;
            if prefilled + n < self.req(s).prompt() {
                self.chunked = Some(s);
                break;
            }
        }
    }

    /// The step ended: every decode request produced a token, finished ones leave, and
    /// requests whose last chunk was computed get their first token and join the batch.
    /// Inter-token gaps go to `itl` by kind: the step's, a mixed step when it also ran prefill
    /// chunks; a request that joined at its start from its previous token (a handoff when it
    /// waited: for a place in the batch, or its prompt computed again after a retraction).
    pub fn step_done(&mut self, now: Nanos, itl: &mut Gaps, out: &mut StepOutcome) {
        self.core.end_busy(now);
        if self.decodes {
            self.decode_step_done(now, itl, out);
        }
        for (s, n) in std::mem::take(&mut self.step_prefill) {
            let r = self.table[s as usize].as_mut().expect("a live slot");
            r.prefilled += n;
            if r.prefilled < r.prompt() {
                continue;
            }
            r.row.prefill_end_ns.get_or_insert(now);
            if r.row.first_token_ns.is_none() {
                r.row.first_token_ns = Some(now);
                out.first_token_inputs.push(r.input);
                out.tokens += 1;
                self.core.tick.tokens += 1;
            }
            let remaining = r.output - 1 - r.extra.min(r.output - 1);
            if remaining == 0 {
                let mut r = self.remove(s);
                r.row.decode_start_ns.get_or_insert(now);
                r.row.finish_ns = Some(now);
                out.finished.push(r.row);
                continue;
            }
            if self.running >= self.max_running {
                // The batch is full: it waits, computed, with its pages held, and joins when a
                // running request leaves.
                self.computed.push_back(s);
                continue;
            }
            self.join(s, now, remaining);
        }
    }

    /// The decode batch's part of a forward that stepped it: a token for every running
    /// request (their gap since their previous token, or since their first for those that
    /// joined), and the requests that produced their last leave.
    fn decode_step_done(&mut self, now: Nanos, itl: &mut Gaps, out: &mut StepOutcome) {
        self.steps_done += 1;
        // Mixed, every forward is a decode step: the previous token came as this one started.
        // Unmixed, prefill forwards that ran since the last decode step lengthen this gap: the
        // prefill interference PD removes, as a mixed step's chunks are.
        let since = if self.mixed {
            self.step_started
        } else {
            self.last_step_end
        };
        let mixed = if self.mixed {
            !self.step_prefill.is_empty()
        } else {
            since < self.step_started
        };
        let dt = now - since;
        out.tokens += u64::from(self.running);
        self.core.tick.tokens += u64::from(self.running);
        self.context_tokens += u64::from(self.running);
        let kind = GapKind::step(mixed);
        itl.of(kind)
            .record_n(dt, u64::from(self.running) - self.joined.len() as u64);
        self.gaps.step(self.steps_done, dt, mixed);
        self.last_step_end = now;
        // A request that joined as this step started had its previous token then: one step's
        // gap (unmixed, no prefill forward came between); else it waited, a handoff.
        let joined_kind = GapKind::step(self.mixed && mixed);
        for s in std::mem::take(&mut self.joined) {
            let Some(r) = self.table[s as usize].as_mut() else {
                continue;
            };
            if let Some(from) = r.row.gaps.resumed_from.or(r.row.first_token_ns) {
                let k = if from == self.step_started {
                    joined_kind
                } else {
                    GapKind::Handoff
                };
                itl.of(k).record(now - from);
                r.row.gaps.saw(now - from, k);
            }
        }
        while let Some(&Reverse((step, join, s))) = self.finishing.peek() {
            if step > self.steps_done {
                break;
            }
            self.finishing.pop();
            let current = self.table[s as usize].as_ref().and_then(|r| r.join_step);
            if current == Some(join) {
                let mut r = self.remove(s);
                r.row.finish_ns = Some(now);
                out.finished.push(r.row);
            }
        }
    }

    fn join(&mut self, s: Slot, now: Nanos, remaining: u32) {
        let steps = self.steps_done;
        let ps = self.core.page_size;
        let r = self.req(s);
        r.row.decode_start_ns.get_or_insert(now);
        r.join_step = Some(steps);
        let (prompt, id) = (r.prompt(), r.id);
        self.gaps.joined(steps);
        self.phase[phase_key(steps, prompt, ps)] += 1;
        self.batch_order.insert((steps, id, s));
        self.running += 1;
        self.context_tokens += u64::from(prompt);
        self.finishing
            .push(Reverse((steps + u64::from(remaining), steps, s)));
        self.joined.push(s);
    }

    /// Takes a running request out of the batch, giving back the pages it grew; returns the
    /// tokens it generated while running.
    fn leave_batch(&mut self, s: Slot) -> u32 {
        let ps = self.core.page_size;
        let steps = self.steps_done;
        let r = self.table[s as usize].as_mut().expect("a live slot");
        let Some(join) = r.join_step.take() else {
            return 0;
        };
        // Its gaps: the worst of the steps it shared; its last token came at the last step's
        // end when it ran one (a later stint's first gap starts there).
        if let Some((g, kind)) = self.gaps.left(join, self.running - 1) {
            r.row.gaps.saw(g, kind);
        }
        if steps > join {
            r.row.gaps.resumed_from = Some(self.last_step_end);
        }
        let generated = (steps - join) as u32;
        let prompt = r.prompt();
        let id = r.id;
        self.core
            .pages
            .shrink((prompt + generated).div_ceil(ps) - prompt.div_ceil(ps));
        self.phase[phase_key(join, prompt, ps)] -= 1;
        self.batch_order.remove(&(join, id, s));
        if self.gaps.wants_prune() {
            let oldest = self.batch_order.first().map_or(u64::MAX, |b| b.0);
            self.gaps.prune(oldest);
        }
        self.running -= 1;
        self.context_tokens -= u64::from(prompt) + u64::from(generated);
        self.joined.retain(|&j| j != s);
        generated
    }

    /// sglang's `retract_decode`: the newest running request gives back its KV and goes to the
    /// front of the waiting queue; its prompt and generated tokens are computed again.
    fn retract(&mut self, s: Slot) {
        let generated = self.leave_batch(s);
        let r = self.table[s as usize].as_mut().expect("a live slot");
        r.extra += generated;
        r.row.retractions += 1;
        r.prefilled = 0;
        r.admitted = false;
        let (id, holding, reserve) = (r.id, std::mem::take(&mut r.holding), r.reserve);
        r.reserve = 0.0;
        self.reserved_tokens -= reserve;
        self.core.pages.free(id, &holding);
        self.waiting.push_front(s);
    }

    /// Frees everything request `s` holds and takes it out of the table.
    fn remove(&mut self, s: Slot) -> CoReq {
        self.leave_batch(s);
        let r = self.table[s as usize].take().expect("a live slot");
        if r.admitted {
            self.core.pages.free(r.id, &r.holding);
            self.reserved_tokens -= r.reserve;
        }
        if self.live == 1 {
            // The last holder left: reset the float sum so rounding never accumulates.
            self.reserved_tokens = 0.0;
        }
        self.free_slots.push(s);
        self.live -= 1;
        self.core.outstanding -= 1;
        r
    }

    /// A crash now: the step is lost and every request held here fails — `server_crashed`,
    /// the exception ends sglang's scheduler loop and every request with it. `None` if the
    /// server was already down.
    pub fn crash(&mut self, me: ColocatedId, q: &mut EventQueue<Event>) -> Option<ColocatedCrash> {
        if !self.core.go_down() {
            return None;
        }
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        self.core.busy = false;
        let now = q.now();
        let mut failed = self.drain();
        for row in &mut failed {
            row.finish_ns = Some(now);
            row.outcome = Outcome::Failed;
            row.error_kind = Some(ErrorKind::ServerCrashed);
        }
        Some(ColocatedCrash {
            failed,
            message: format!("Server {} crashed", me.0),
        })
    }

    /// The server is back, empty; false if it was up.
    pub fn restart(&mut self) -> bool {
        self.core.come_up()
    }

    /// Every request still held (the run ended, or the server crashed), in slot order.
    pub fn drain(&mut self) -> Vec<RequestRow> {
        let mut out = Vec::new();
        for s in 0..self.table.len() as Slot {
            if self.table[s as usize].is_some() {
                out.push(self.remove(s).row);
            }
        }
        self.waiting.clear();
        self.computed.clear();
        self.chunked = None;
        self.step_prefill.clear();
        self.finishing.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit;

    fn row(id: u64, input: u32, output: u32) -> RequestRow {
        RequestRow::arrived(id, 0, Some((0, 0)), input, output)
    }

    /// Runs the server alone until it is idle; returns the finished rows.
    fn run(server: &mut ColocatedServer, q: &mut EventQueue<Event>) -> Vec<RequestRow> {
        let mut done = Vec::new();
        let mut itl = Gaps::default();
        server.try_step(ColocatedId(0), q);
        while let Some((_, ev)) = q.pop() {
            assert!(matches!(ev, Event::ColocatedStepDone { .. }));
            let mut out = StepOutcome::default();
            server.step_done(q.now(), &mut itl, &mut out);
            done.extend(out.finished);
            server.try_step(ColocatedId(0), q);
        }
        done
    }

    /// A crash 1 µs into a step, with one request in the step and one waiting: both fail as
    /// `server_crashed` at 1 µs, in slot order, every page is given back, the step's end never
    /// fires and a dead server steps no more; back, it serves again.
    #[test]
    fn a_crash_fails_every_request_it_holds() {
        let mut s = ColocatedServer::new(testkit::core(64, 16), 512, 1, true);
        let mut q = EventQueue::new();
        s.arrive(row(0, 100, 50), 0);
        s.try_step(ColocatedId(3), &mut q);
        s.arrive(row(1, 100, 50), 0);
        q.schedule_at(1_000, Event::Tick);
        while !matches!(q.pop(), Some((_, Event::Tick))) {}
        let crash = s.crash(ColocatedId(3), &mut q).expect("it was up");
        assert_eq!(crash.message, "Server 3 crashed");
        let ids: Vec<_> = crash.failed.iter().map(|r| r.id).collect();
        assert_eq!(ids, [0, 1]);
        for r in &crash.failed {
            assert_eq!(
                (r.finish_ns, r.outcome, r.error_kind),
                (Some(1_000), Outcome::Failed, Some(ErrorKind::ServerCrashed))
            );
        }
        assert_eq!(
            (s.live(), s.core.pages.used(), s.core.outstanding),
            (0, 0, 0)
        );
        assert!(s.crash(ColocatedId(3), &mut q).is_none(), "already down");
        s.arrive(row(2, 100, 50), 0);
        s.try_step(ColocatedId(3), &mut q);
        assert!(
            q.pop().is_none(),
            "no step on a dead server, none left over"
        );
        assert!(s.restart() && !s.restart());
        s.try_step(ColocatedId(3), &mut q);
        assert!(matches!(
            q.pop(),
            Some((_, Event::ColocatedStepDone { .. }))
        ));
    }

    #[test]
    fn mixed_steps_finish_every_request_and_free_every_page() {
        let mut s = ColocatedServer::new(testkit::core(2000, 16), 512, u32::MAX, true);
        let mut q = EventQueue::new();
        for id in 0..20 {
            s.arrive(row(id, 300 + 37 * id as u32, 5 + id as u32), 0);
        }
        let done = run(&mut s, &mut q);
        assert_eq!(done.len(), 20);
        assert_eq!(s.live(), 0);
        assert_eq!(s.core.pages.used(), 0, "every page given back");
        for r in &done {
            let (ft, fin) = (r.first_token_ns.unwrap(), r.finish_ns.unwrap());
            assert!(ft <= fin && r.prefill_start_ns.unwrap() < ft);
        }
        // A prompt longer than the budget is chunked over several steps, mixed with decoding.
        assert!(s.steps_done > 20);
    }

    #[test]
    fn the_prefill_budget_shrinks_by_the_running_decode_tokens() {
        let mut s = ColocatedServer::new(testkit::core(100_000, 1), 64, u32::MAX, true);
        let mut q = EventQueue::new();
        for id in 0..10 {
            s.arrive(row(id, 4, 100), 0);
        }
        // Step 1: 64 tokens of budget, 10 prompts of 4 tokens: all prefilled at once.
        s.try_step(ColocatedId(0), &mut q);
        assert_eq!(s.step_prefill.len(), 10);
        let mut out = StepOutcome::default();
        let mut itl = Gaps::default();
        q.pop();
        s.step_done(q.now(), &mut itl, &mut out);
        assert_eq!(s.running(), 10);
        // Step 2: a 100-token prompt gets 64 − 10 running = 54 tokens.
        s.arrive(row(10, 100, 2), 0);
        s.try_step(ColocatedId(0), &mut q);
        assert_eq!(s.step_prefill, vec![(10, 54)]);
    }

    #[test]
    fn a_capped_batch_holds_computed_requests_until_room_and_leaks_no_page() {
        let mut s = ColocatedServer::new(testkit::core(5000, 16), 8192, 3, true);
        let mut q = EventQueue::new();
        for id in 0..12 {
            s.arrive(row(id, 200, 20 + id as u32), 0);
        }
        let mut itl = Gaps::default();
        let mut done = 0;
        s.try_step(ColocatedId(0), &mut q);
        while q.pop().is_some() {
            let mut out = StepOutcome::default();
            s.step_done(q.now(), &mut itl, &mut out);
            done += out.finished.len();
            assert!(s.running() <= 3, "the cap holds");
            s.try_step(ColocatedId(0), &mut q);
        }
        assert_eq!(done, 12);
        assert_eq!(s.core.pages.used(), 0, "no page leaked");
    }

    /// Gaps by hand on a colocated server whose forward takes 30 ms when it runs prefill
    /// work and 10 ms when it only decodes. A (4 tokens) is prefilled in step 1 (0–30 ms) and
    /// joins; B (3 tokens) is ready at 35 ms:
    ///
    /// | step | forward | ends | A's gap | B's gap |
    /// |---|---|---|---|---|
    /// | 2 | decode A | 40 | 10 | |
    /// | 3 | decode A + prefill B | 70 | 30 (mixed) | (first token) |
    /// | 4 | decode A B | 80 | 10 (A done) | 10 |
    /// | 5 | decode B | 90 | | 10 (B done) |
    ///
    /// A's worst gap is the mixed step's 30 ms — the interference PD removes; B's a decode step.
    #[test]
    fn a_mixed_forward_is_the_gap_its_running_requests_wait_out() {
        let ms = 1_000_000;
        let core = testkit::core_measured(
            1000,
            16,
            "phase,tokens,batch_size,context_tokens,time_ms\n\
             prefill,1,,0,30\nprefill,100000,,0,30\nprefill,1,,100000,30\nprefill,100000,,100000,30\n\
             decode,,1,0,10\ndecode,,1,100000000,10\ndecode,,8,0,10\ndecode,,8,100000000,10\n",
        );
        let mut s = ColocatedServer::new(core, 512, u32::MAX, true);
        let mut q = EventQueue::new();
        s.arrive(row(0, 4, 4), 0);
        s.arrive(row(1, 4, 3), 35 * ms);
        let mut itl = Gaps::default();
        let mut done = Vec::new();
        s.try_step(ColocatedId(0), &mut q);
        while q.pop().is_some() {
            let mut out = StepOutcome::default();
            s.step_done(q.now(), &mut itl, &mut out);
            done.extend(out.finished);
            s.try_step(ColocatedId(0), &mut q);
        }
        let worst: Vec<_> = done
            .iter()
            .map(|r| (r.id, r.finish_ns.unwrap() / ms, r.gaps.worst.unwrap()))
            .collect();
        assert_eq!(
            worst,
            [
                (0, 80, (30 * ms, GapKind::MixedStep)),
                (1, 90, (10 * ms, GapKind::DecodeStep))
            ]
        );
        let by = |k: GapKind| {
            let h = &itl.by_kind[k.index()];
            (h.count(), h.min() / ms, h.max() / ms)
        };
        assert_eq!(by(GapKind::DecodeStep), (4, 10, 10));
        assert_eq!(by(GapKind::MixedStep), (1, 30, 30));
        assert_eq!(by(GapKind::Handoff).0, 0);
    }

    #[test]
    fn a_short_pool_retracts_the_newest_request_and_still_finishes_all() {
        // 40 pages of 16 tokens: four requests of 100 + 200 tokens cannot all hold their KV.
        let mut s = ColocatedServer::new(testkit::core(40, 16), 8192, u32::MAX, true);
        let mut q = EventQueue::new();
        for id in 0..4 {
            s.arrive(row(id, 100, 200), 0);
        }
        let done = run(&mut s, &mut q);
        assert_eq!(done.len(), 4);
        assert_eq!(s.core.pages.used(), 0);
    }

    /// Ends the running forward at its event: its time and the tokens it produced.
    fn next(s: &mut ColocatedServer, q: &mut EventQueue<Event>, itl: &mut Gaps) -> (Nanos, u64) {
        let (t, ev) = q.pop().expect("a forward runs");
        assert!(matches!(ev, Event::ColocatedStepDone { .. }));
        let mut out = StepOutcome::default();
        s.step_done(t, itl, &mut out);
        s.try_step(ColocatedId(0), q);
        (t, out.tokens)
    }

    /// Without `--enable-mixed-chunk` (sglang's default) a prefill batch that forms runs
    /// instead of the decode step, which then starts exactly one prefill forward late. By hand,
    /// 16-token pages, a 512-token budget; `P(c)` is the model's prefill forward over chunks `c`
    /// and `D(b, k)` its decode step of `b` requests over `k` context tokens:
    /// - t = 0: A (160 prompt tokens, 10 out) is the only request: a prefill forward, t1 = P([160]);
    /// - t1: A has its first token and joins; nothing waits, so the decode step runs over A's
    ///   160 tokens: t2 = t1 + D(1, 160); B (320 tokens) arrives meanwhile;
    /// - t2: A's token; B's prefill forms, with the whole 512-token budget (unmixed, the
    ///   running batch takes nothing off it), and runs alone: t3 = t2 + P([320]), one token —
    ///   B's first — and none for A;
    /// - t3: B joins; the decode step of A (161 tokens) and B (320): t4 = t3 + D(2, 481).
    ///
    /// A's second decode step starts at t3 = t2 + P([320]) rather than t2; its gap between two
    /// tokens is P([320]) + D(2, 481). With the flag on the same t2 runs one mixed forward,
    /// `mixed(P [320]; 1 request over 161)`, A's token and B's first together; and B's chunk
    /// budget is 512 − 1.
    #[test]
    fn unmixed_a_ready_prefill_delays_the_decode_step_by_exactly_the_prefill_forward() {
        let mut s = ColocatedServer::new(testkit::core(100_000, 16), 512, u32::MAX, false);
        let mut q = EventQueue::new();
        let mut itl = Gaps::default();
        let step = s.core.step.clone();
        s.arrive(row(0, 160, 10), 0);
        s.try_step(ColocatedId(0), &mut q);
        let t1 = step.prefill_ns(&[(160, 0)]);
        assert_eq!(next(&mut s, &mut q, &mut itl), (t1, 1), "A's first token");
        s.arrive(row(1, 320, 10), t1 + 1);
        let t2 = t1 + step.decode_ns(1, 160);
        assert_eq!(next(&mut s, &mut q, &mut itl), (t2, 1), "A's decode token");
        assert_eq!(s.shape, [(320, 0)], "B's prefill, alone");
        let t3 = t2 + step.prefill_ns(&[(320, 0)]);
        assert_eq!(
            next(&mut s, &mut q, &mut itl),
            (t3, 1),
            "B's first token only"
        );
        let t4 = t3 + step.decode_ns(2, 481);
        assert_eq!(next(&mut s, &mut q, &mut itl), (t4, 2));
        // A's gap: B's prefill forward, then the decode step.
        assert_eq!(
            t4 - t2,
            step.prefill_ns(&[(320, 0)]) + step.decode_ns(2, 481)
        );
        // A mixed gap: the prefill interference, as a mixed forward's chunks are.
        assert_eq!(itl.of(GapKind::MixedStep).max(), t4 - t2);
        assert_eq!(itl.of(GapKind::MixedStep).count(), 1);

        // Mixed: at t2 one forward carries A's token and B's prefill.
        let mut s = ColocatedServer::new(testkit::core(100_000, 16), 512, u32::MAX, true);
        let mut q = EventQueue::new();
        s.arrive(row(0, 160, 10), 0);
        s.try_step(ColocatedId(0), &mut q);
        assert_eq!(next(&mut s, &mut q, &mut itl), (t1, 1));
        s.arrive(row(1, 320, 10), t1 + 1);
        assert_eq!(next(&mut s, &mut q, &mut itl), (t2, 1));
        let m = t2 + step.mixed_ns(&[(320, 0)], 1, 161);
        assert_eq!(
            next(&mut s, &mut q, &mut itl),
            (m, 2),
            "A's token and B's first"
        );
        // The budget is 512 − 1 running: a 512-token prompt is cut to 31 pages (496 tokens).
        let mut s = ColocatedServer::new(testkit::core(100_000, 16), 512, u32::MAX, true);
        let mut q = EventQueue::new();
        s.arrive(row(0, 160, 10), 0);
        s.try_step(ColocatedId(0), &mut q);
        next(&mut s, &mut q, &mut itl);
        s.arrive(row(1, 512, 10), 0);
        next(&mut s, &mut q, &mut itl);
        assert_eq!(s.shape, [(496, 0)]);
        let mut s = ColocatedServer::new(testkit::core(100_000, 16), 512, u32::MAX, false);
        let mut q = EventQueue::new();
        s.arrive(row(0, 160, 10), 0);
        s.try_step(ColocatedId(0), &mut q);
        next(&mut s, &mut q, &mut itl);
        s.arrive(row(1, 512, 10), 0);
        next(&mut s, &mut q, &mut itl);
        assert_eq!(s.shape, [(512, 0)], "unmixed, the whole budget");
    }

    /// Unmixed, a prompt longer than the budget is prefilled chunk after chunk with no decode
    /// step between (sglang forms a batch for its `chunked_req` every turn): A runs (joined
    /// after its 160-token prefill and one decode step), then B's 1,200 tokens at a 512-token
    /// budget take three forwards, P([512]), P([512 over 512]), P([176 over 1,024]), producing
    /// only B's first token at the third; A's next token comes with the decode step after them.
    #[test]
    fn unmixed_a_chunked_prompt_runs_its_chunks_back_to_back() {
        let mut s = ColocatedServer::new(testkit::core(100_000, 16), 512, u32::MAX, false);
        let mut q = EventQueue::new();
        let mut itl = Gaps::default();
        let step = s.core.step.clone();
        s.arrive(row(0, 160, 10), 0);
        s.try_step(ColocatedId(0), &mut q);
        let (t1, _) = next(&mut s, &mut q, &mut itl);
        s.arrive(row(1, 1_200, 10), t1);
        let (t2, _) = next(&mut s, &mut q, &mut itl);
        let mut t = t2;
        for (chunk, tokens) in [((512, 0), 0), ((512, 512), 0), ((176, 1_024), 1)] {
            assert_eq!(s.shape, [chunk]);
            t += step.prefill_ns(&[chunk]);
            assert_eq!(next(&mut s, &mut q, &mut itl), (t, tokens), "{chunk:?}");
        }
        assert_eq!(s.running(), 2);
        t += step.decode_ns(2, 161 + 1_200);
        assert_eq!(
            next(&mut s, &mut q, &mut itl),
            (t, 2),
            "the decode step after"
        );
    }

    /// Unmixed, a batch at `max_running_requests` admits no prefill (sglang's
    /// `get_num_allocatable_reqs`): with a cap of 2 and three prompts waiting, the first forward
    /// prefills two, and the third waits while they decode — it is never computed to wait for a
    /// place, and the cap holds at every forward.
    #[test]
    fn unmixed_a_batch_at_its_cap_admits_no_prefill() {
        let mut s = ColocatedServer::new(testkit::core(10_000, 16), 8192, 2, false);
        let mut q = EventQueue::new();
        let mut itl = Gaps::default();
        for id in 0..3 {
            s.arrive(row(id, 100, 4), 0);
        }
        s.try_step(ColocatedId(0), &mut q);
        assert_eq!(s.step_prefill.len(), 2, "two of three: the cap");
        let (_, tokens) = next(&mut s, &mut q, &mut itl);
        assert_eq!((tokens, s.running(), s.queued()), (2, 2, 1));
        assert!(
            s.step_prefill.is_empty(),
            "a decode step, not the third prompt"
        );
        let mut done = 0;
        while !q.is_empty() {
            let (t, ev) = q.pop().unwrap();
            assert!(matches!(ev, Event::ColocatedStepDone { .. }));
            let mut out = StepOutcome::default();
            s.step_done(t, &mut itl, &mut out);
            done += out.finished.len();
            assert!(s.computed.is_empty() && s.running() <= 2);
            s.try_step(ColocatedId(0), &mut q);
        }
        assert_eq!((done, s.core.pages.used()), (3, 0));
    }

    /// Unmixed or not, every request finishes and every page comes back, retractions included.
    #[test]
    fn unmixed_steps_finish_every_request_and_free_every_page() {
        for (pages, n) in [(2_000, 20), (40, 4)] {
            let mut s = ColocatedServer::new(testkit::core(pages, 16), 512, u32::MAX, false);
            let mut q = EventQueue::new();
            for id in 0..n {
                s.arrive(row(id, 100 + 37 * id as u32, 5 + 40 * id as u32 % 200), 0);
            }
            let done = run(&mut s, &mut q);
            assert_eq!(done.len(), n as usize);
            assert_eq!((s.live(), s.core.pages.used()), (0, 0));
        }
    }
}
