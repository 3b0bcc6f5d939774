//! Conversations: sessions whose next turn re-sends the growing context after a think time
//! (`[workload.sessions]`, and trace rows that carry a `session_id`; `docs/sglang-pd.md` §23).
//!
//! # The model
//!
//! * A session starts when the arrival process says (synthetic) or at its first row (trace).
//!   Its turns are **closed loop**: turn `k + 1` is sent a think time after turn `k` ended as
//!   the client saw it, so the simulator feeds every turn's end back here
//!   ([`SessionBook::turn_ended`]). A turn that failed, or that the run left unfinished, ends
//!   its session: a chat client shows the error and the user does not send the next message
//!   on top of an answer it never got.
//! * **Context**: turn `k + 1`'s prompt is turn `k`'s prompt, turn `k`'s answer and `u` new
//!   user tokens: `n₍ₖ₊₁₎ = nₖ + oₖ + u`. A synthetic session's sizes (turns, outputs, user
//!   tokens, think times) are drawn when it starts, each from its own stream, so the sessions
//!   are the same whatever the cluster does to their timing.
//! * **Context cap**: a turn whose prompt plus output would pass `max_context_tokens` is not
//!   sent and the session ends (`on_context_full = "end"`, the default: what ChatGPT and
//!   Claude's apps do — "this conversation is too long, start a new chat"), or its prompt
//!   keeps only the newest `max_context_tokens − o` tokens (`"truncate"`: the sliding window
//!   of front-ends that drop the oldest messages). A truncated prompt no longer starts with
//!   the previous one, so none of its blocks is reused.
//! * **Prefix identity**, in the vocabulary of the traces (512-token blocks with
//!   prefix-chained ids, `workload::trace` and `workload::trace::answers`): with `f = ⌊nₖ /
//!   512⌋` full prompt blocks and `m = completed_blocks(nₖ, oₖ)` blocks the answer completes,
//!   turn `k + 1`'s blocks are turn `k`'s first `f` ids, then turn `k`'s `m` answer ids, then
//!   fresh ids. So the prefill's radix cache finds turn `k`'s full prompt blocks (the prefill
//!   never sees the answer), and a store that a decode's offload wrote to finds the answer's
//!   blocks too: every tier and the cache-aware router see the reuse through one set of ids.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;

use crate::config::{ContextFull, SessionParams, ThinkTime};
use crate::engine::{Nanos, RngSource, rng_stream};

use super::NewRequest;
use super::trace::HASH_BLOCK_TOKENS;
use super::trace::answers::completed_blocks;

/// Which session and turn a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TurnTag {
    /// Session id: numbered from 0 in start order (synthetic), or the trace's `session_id`.
    pub session: u64,
    /// Turn index in the session, from 0.
    pub turn: u32,
}

/// One planned turn of a synthetic session.
#[derive(Clone, Copy, Debug)]
struct Planned {
    input: u32,
    output: u32,
    /// Think time before it (0 for the first turn), ns.
    think_ns: Nanos,
    /// Whether its prompt was cut to fit the context (no block reused).
    truncated: bool,
}

/// A session with a turn in flight or due.
#[derive(Debug)]
struct Open {
    /// The turn in flight (index into `plan` for synthetic sessions).
    turn: u32,
    /// Synthetic: the whole plan. Trace: empty (the rows are the plan).
    plan: Vec<Planned>,
    /// Whether the plan stopped before the drawn turn count because of the context cap.
    capped: bool,
    /// The turn in flight's prompt blocks and prompt/output tokens.
    hash_ids: Vec<u64>,
    input: u32,
    output: u32,
    /// The blocks its output completes (what a decode offload writes, what the next turn
    /// names).
    answer: Vec<u64>,
    /// Trace sessions: later rows read before this turn ended, in turn order.
    waiting: std::collections::VecDeque<NewRequest>,
    /// Trace sessions: when the last turn ended as the client saw it, ns (`None`: in flight).
    ended_ns: Option<Nanos>,
}

/// How sessions ended, and the turns sent (`summary.json` `sessions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCounts {
    /// Sessions whose first turn arrived.
    pub started: u64,
    /// Sessions whose every turn completed (including those the context cap ended early).
    pub completed: u64,
    /// Of those, sessions the context cap ended before their drawn turn count.
    pub context_full: u64,
    /// Sessions a failed turn ended.
    pub failed: u64,
    /// Sessions the run's end cut: a turn due after `run.duration_s` or past
    /// `run.max_requests`, or left unfinished at the drain timeout.
    pub cut: u64,
    /// Turns whose prompt `on_context_full = "truncate"` cut to fit.
    pub truncated_turns: u64,
    /// Trace rows of a session never sent because an earlier turn ended it.
    pub rows_dropped: u64,
}

/// What a session row of a trace becomes when it is read ([`SessionBook::trace_row`]).
#[derive(Debug)]
pub enum TraceTurn {
    /// A session's first turn: it arrives at its recorded time.
    Start(NewRequest),
    /// A later turn whose predecessor ended: due at this time, ns.
    Due(u64, Nanos),
    /// Waiting for its predecessor, or dropped (its session ended).
    Held,
}

/// What a turn's end means for its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnEnd {
    /// It completed (or decoded corrupted bytes: the client saw an answer).
    Completed,
    /// It failed.
    Failed,
    /// The run ended with it in flight.
    Unfinished,
}

/// The sessions of a run: their plans, the turns in flight and due, and how they ended.
pub struct SessionBook {
    /// Synthetic sessions' parameters (`None`: trace sessions).
    params: Option<SessionParams>,
    /// Trace sessions: the least think time after a turn's end, ns.
    trace_think_ns: Nanos,
    turns_rng: ChaCha8Rng,
    think_rng: ChaCha8Rng,
    user_rng: ChaCha8Rng,
    /// Later turns' outputs: their own stream, so first turns draw as without sessions.
    output_rng: ChaCha8Rng,
    /// Later turns' output lengths (the workload's `output_tokens`).
    output: super::LengthDraw,
    /// Turns per session and each later turn's new user tokens (`params`' distributions,
    /// ready to draw from).
    turns: super::LengthDraw,
    user_tokens: super::LengthDraw,
    /// The next fresh block id.
    next_block: u64,
    next_session: u64,
    open: BTreeMap<u64, Open>,
    /// The next turn of each session in think time, by session: at most one each.
    due: BTreeMap<u64, NewRequest>,
    /// A trace's derived answer blocks by row (with a decode offload), for rows that carry
    /// `hash_ids`.
    pub answers: Option<std::sync::Arc<crate::config::AnswerBlocks>>,
    /// Turns handed out after their session's first.
    pub later_turns: u64,
    /// How sessions ended.
    pub counts: SessionCounts,
}

impl SessionBook {
    /// The book of a synthetic workload with `params`, seeded by `seed`.
    pub fn synthetic(params: SessionParams, output: crate::config::Lengths, seed: u64) -> Self {
        let mut b = Self::trace(0, seed);
        b.turns = super::LengthDraw::new(params.turns.clone());
        b.user_tokens = super::LengthDraw::new(params.user_tokens.clone());
        b.params = Some(params);
        b.output = super::LengthDraw::new(output);
        b
    }

    /// The book of a trace whose rows carry session ids; a turn arrives at its recorded time,
    /// or `think_ns` after its predecessor ended if that is later. `first_fresh` is one past
    /// the trace's largest block id (fresh ids for turns whose rows have none).
    pub fn trace(think_ns: Nanos, seed: u64) -> Self {
        Self {
            params: None,
            trace_think_ns: think_ns,
            turns_rng: rng_stream(seed, RngSource::SessionTurns),
            think_rng: rng_stream(seed, RngSource::ThinkTimes),
            user_rng: rng_stream(seed, RngSource::UserTokens),
            output_rng: rng_stream(seed, RngSource::SessionOutputs),
            output: super::LengthDraw::new(crate::config::Lengths::Fixed(1)),
            turns: super::LengthDraw::new(crate::config::Lengths::Fixed(1)),
            user_tokens: super::LengthDraw::new(crate::config::Lengths::Fixed(1)),
            next_block: 0,
            next_session: 0,
            open: BTreeMap::new(),
            due: BTreeMap::new(),
            answers: None,
            later_turns: 0,
            counts: SessionCounts::default(),
        }
    }

    /// Whether the sessions are a trace's (rows carry them) rather than drawn.
    pub fn is_trace(&self) -> bool {
        self.params.is_none()
    }

    /// Fresh block ids start at `id` (one past a trace's largest).
    pub fn fresh_from(&mut self, id: u64) {
        self.next_block = self.next_block.max(id);
    }

    fn fresh(&mut self, n: usize, into: &mut Vec<u64>) {
        for _ in 0..n {
            into.push(self.next_block);
            self.next_block += 1;
        }
    }

    /// A synthetic session starts with `nr` (drawn by the arrival process and the first-turn
    /// length distributions): its plan is drawn, its first prompt gets fresh block ids, and
    /// `nr` is tagged. Returns the turns it plans (an upper bound on its requests).
    pub fn start(&mut self, nr: &mut NewRequest) -> u32 {
        let p = self
            .params
            .as_ref()
            .expect("synthetic sessions have parameters");
        let drawn = self.turns.draw(&mut self.turns_rng).max(1);
        let mut plan = Vec::with_capacity(drawn as usize);
        plan.push(Planned {
            input: nr.input_tokens,
            output: nr.output_tokens,
            think_ns: 0,
            truncated: false,
        });
        let cap = u64::from(p.max_context_tokens);
        let mut capped = false;
        for _ in 1..drawn {
            // Every draw is made whether the turn fits or not, so one session's cap never
            // shifts the next session's sizes.
            let output = self.output.draw(&mut self.output_rng).max(1);
            let user = self.user_tokens.draw(&mut self.user_rng).max(1);
            let think_ns = think(&p.think, &mut self.think_rng);
            if capped {
                continue;
            }
            let last = plan.last().expect("the first turn is planned");
            let want = u64::from(last.input) + u64::from(last.output) + u64::from(user);
            if want + u64::from(output) <= cap {
                plan.push(Planned {
                    input: want as u32,
                    output,
                    think_ns,
                    truncated: false,
                });
            } else if p.on_context_full == ContextFull::Truncate && u64::from(output) < cap {
                plan.push(Planned {
                    input: (cap - u64::from(output)) as u32,
                    output,
                    think_ns,
                    truncated: true,
                });
            } else {
                capped = true;
            }
        }
        let session = self.next_session;
        self.next_session += 1;
        let mut hash_ids = Vec::with_capacity(blocks(nr.input_tokens));
        self.fresh(blocks(nr.input_tokens), &mut hash_ids);
        nr.hash_ids.clone_from(&hash_ids);
        nr.session = Some(TurnTag { session, turn: 0 });
        let planned = plan.len() as u32;
        let mut open = Open {
            turn: 0,
            plan,
            capped,
            hash_ids,
            input: nr.input_tokens,
            output: nr.output_tokens,
            answer: Vec::new(),
            waiting: Default::default(),
            ended_ns: None,
        };
        self.fresh(
            completed_blocks(open.input, open.output) as usize,
            &mut open.answer,
        );
        nr.answer.clone_from(&open.answer);
        self.open.insert(session, open);
        self.counts.started += 1;
        planned
    }

    /// A trace row tagged with a session (`nr.session`), read at `now` (no later than its
    /// recorded time: rows are read in time order as the run reaches them). A session's first
    /// row starts it at its recorded time ([`TraceTurn::Start`]); a later row whose
    /// predecessor ended is due at `max(its time, end + think)` ([`TraceTurn::Due`], taken
    /// with [`SessionBook::take_due`]) unless that is at or past `until_ns`; one whose
    /// predecessor is in flight or due waits here, and one whose session ended is dropped.
    pub fn trace_row(&mut self, mut nr: NewRequest, until_ns: Nanos) -> TraceTurn {
        let tag = nr.session.expect("a session row");
        let Some(open) = self.open.get_mut(&tag.session) else {
            if tag.turn > 0 {
                // Turns are checked consecutive from 0 when the trace is loaded: a later
                // turn without its session open comes after the session ended.
                self.counts.rows_dropped += 1;
                return TraceTurn::Held;
            }
            self.begin_trace_turn(&mut nr);
            self.counts.started += 1;
            return TraceTurn::Start(nr);
        };
        match open.ended_ns {
            Some(end) if open.waiting.is_empty() && !self.due.contains_key(&tag.session) => {
                nr.arrival_ns = nr.arrival_ns.max(end + self.trace_think_ns);
                if nr.arrival_ns >= until_ns {
                    self.counts.cut += 1;
                    self.counts.rows_dropped += 1;
                    self.close(tag.session);
                    return TraceTurn::Held;
                }
                let at = nr.arrival_ns;
                self.due.insert(tag.session, nr);
                TraceTurn::Due(tag.session, at)
            }
            _ => {
                open.waiting.push_back(nr);
                TraceTurn::Held
            }
        }
    }

    /// Registers `nr` as its session's turn in flight (trace), naming its blocks.
    fn begin_trace_turn(&mut self, nr: &mut NewRequest) {
        let tag = nr.session.expect("a session row");
        let prev = self.open.remove(&tag.session);
        let named = !nr.hash_ids.is_empty();
        if !named {
            // No prefix information in the row: the session's structure gives it.
            nr.hash_ids = match &prev {
                Some(p) => self.continue_blocks(p, nr.input_tokens, false),
                None => {
                    let mut v = Vec::new();
                    self.fresh(blocks(nr.input_tokens), &mut v);
                    v
                }
            };
        }
        let mut answer = Vec::new();
        match self.answers.as_deref() {
            // The trace's own ids: the session's next row names them (`trace::answers`).
            Some(a) if named => answer.extend_from_slice(a.of(nr.row)),
            _ => self.fresh(
                completed_blocks(nr.input_tokens, nr.output_tokens) as usize,
                &mut answer,
            ),
        }
        nr.answer.clone_from(&answer);
        let waiting = prev.map(|p| p.waiting).unwrap_or_default();
        self.open.insert(
            tag.session,
            Open {
                turn: tag.turn,
                plan: Vec::new(),
                capped: false,
                hash_ids: nr.hash_ids.clone(),
                input: nr.input_tokens,
                output: nr.output_tokens,
                answer,
                waiting,
                ended_ns: None,
            },
        );
    }

    /// The blocks of a prompt of `input` tokens that continues `prev`: its full prompt
    /// blocks, its answer's blocks, then fresh ids — or, `truncated`, fresh ids only. A
    /// prompt shorter than that (a trace row that trimmed history) keeps what fits in its
    /// full blocks.
    fn continue_blocks(&mut self, prev: &Open, input: u32, truncated: bool) -> Vec<u64> {
        let n = blocks(input);
        let mut v = Vec::with_capacity(n);
        if !truncated {
            let f = (prev.input / HASH_BLOCK_TOKENS) as usize;
            let full_here = (input / HASH_BLOCK_TOKENS) as usize;
            v.extend(
                prev.hash_ids[..f.min(prev.hash_ids.len())]
                    .iter()
                    .chain(&prev.answer)
                    .take(full_here),
            );
        }
        let rest = n - v.len();
        self.fresh(rest, &mut v);
        v
    }

    /// Session `tag`'s turn ended at `end_ns` (as the client saw it) with `how`. Returns the
    /// next turn to schedule (its arrival in `arrival_ns`), if the session goes on and that
    /// turn is due before `until_ns`; the caller schedules it and later takes it with
    /// [`SessionBook::take_due`].
    pub fn turn_ended(
        &mut self,
        tag: TurnTag,
        how: TurnEnd,
        end_ns: Nanos,
        until_ns: Nanos,
    ) -> Option<Nanos> {
        let open = self.open.get_mut(&tag.session)?;
        if open.turn != tag.turn {
            return None;
        }
        match how {
            TurnEnd::Completed => {}
            TurnEnd::Failed => {
                self.counts.failed += 1;
                self.close(tag.session);
                return None;
            }
            TurnEnd::Unfinished => {
                self.counts.cut += 1;
                self.close(tag.session);
                return None;
            }
        }
        if self.params.is_none() {
            // A trace session: the next row, if it was read, is due now.
            open.ended_ns = Some(end_ns);
            let Some(mut next) = open.waiting.pop_front() else {
                // Its next row may not have been read yet; it stays open (a session with no
                // later row is complete at the run's end, `finish`).
                return None;
            };
            next.arrival_ns = next.arrival_ns.max(end_ns + self.trace_think_ns);
            if next.arrival_ns >= until_ns {
                self.counts.cut += 1;
                self.close(tag.session);
                return None;
            }
            let at = next.arrival_ns;
            self.due.insert(tag.session, next);
            return Some(at);
        }
        let k = tag.turn as usize + 1;
        let Some(&planned) = open.plan.get(k) else {
            self.counts.completed += 1;
            if open.capped {
                self.counts.context_full += 1;
            }
            self.open.remove(&tag.session);
            return None;
        };
        let at = end_ns.saturating_add(planned.think_ns);
        if at >= until_ns {
            self.counts.cut += 1;
            self.close(tag.session);
            return None;
        }
        let open = self.open.remove(&tag.session).expect("open");
        let hash_ids = self.continue_blocks(&open, planned.input, planned.truncated);
        if planned.truncated {
            self.counts.truncated_turns += 1;
        }
        let mut next = Open {
            turn: k as u32,
            hash_ids: hash_ids.clone(),
            input: planned.input,
            output: planned.output,
            answer: Vec::new(),
            ..open
        };
        self.fresh(
            completed_blocks(planned.input, planned.output) as usize,
            &mut next.answer,
        );
        let answer = next.answer.clone();
        self.open.insert(tag.session, next);
        self.due.insert(
            tag.session,
            NewRequest {
                arrival_ns: at,
                input_tokens: planned.input,
                output_tokens: planned.output,
                hash_ids,
                session: Some(TurnTag {
                    session: tag.session,
                    turn: k as u32,
                }),
                answer,
                row: tag.session,
                client_wait_ns: None,
            },
        );
        self.later_turns += 1;
        Some(at)
    }

    /// The due turn of `session` (scheduled by [`SessionBook::turn_ended`]); trace turns are
    /// registered as in flight here.
    pub fn take_due(&mut self, session: u64) -> Option<NewRequest> {
        let mut nr = self.due.remove(&session)?;
        if self.params.is_none() {
            self.begin_trace_turn(&mut nr);
            self.later_turns += 1;
        }
        Some(nr)
    }

    /// A due turn was not sent (the run's `max_requests` was reached): its session is cut.
    pub fn drop_due(&mut self, session: u64) {
        self.due.remove(&session);
        self.counts.cut += 1;
        self.close(session);
    }

    /// Session `session`'s planned turns, and the session forgotten (counting arrivals
    /// ahead of a run, `workload::arrivals`).
    pub fn forget(&mut self, session: u64) -> u32 {
        self.open
            .remove(&session)
            .map_or(1, |o| o.plan.len() as u32)
    }

    /// Synthetic session `session` was drawn but never arrived (past the run's duration).
    pub fn unstart(&mut self, session: u64) {
        if self.open.remove(&session).is_some() {
            self.counts.started -= 1;
        }
    }

    /// Turns due (in think time), not yet arrived.
    pub fn pending(&self) -> usize {
        self.due.len()
    }

    fn close(&mut self, session: u64) {
        if let Some(o) = self.open.remove(&session) {
            self.counts.rows_dropped += o.waiting.len() as u64;
        }
    }

    /// The run is over: trace sessions whose last turn completed (no later row) are complete;
    /// any other session still open was cut.
    pub fn finish(&mut self) {
        let open = std::mem::take(&mut self.open);
        for (_, o) in open {
            if o.ended_ns.is_some() && o.waiting.is_empty() {
                self.counts.completed += 1;
            } else {
                self.counts.cut += 1;
                self.counts.rows_dropped += o.waiting.len() as u64;
            }
        }
        self.due.clear();
    }
}

/// Blocks of a prompt of `tokens` tokens: `⌈tokens / 512⌉`.
fn blocks(tokens: u32) -> usize {
    tokens.div_ceil(HASH_BLOCK_TOKENS) as usize
}

/// One think time, ns (rounded up to a whole ns).
fn think(t: &ThinkTime, rng: &mut ChaCha8Rng) -> Nanos {
    let ns = match *t {
        ThinkTime::Fixed(ns) => return ns,
        ThinkTime::Exponential { mean_ns } => super::exponential(rng) * mean_ns,
        ThinkTime::Lognormal { mean_ns, cv } => {
            let sigma2 = (1.0 + cv * cv).ln();
            let mu = mean_ns.ln() - sigma2 / 2.0;
            (mu + sigma2.sqrt() * super::standard_normal(rng)).exp()
        }
    };
    crate::engine::ceil_ns(ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Lengths;

    fn params(turns: u32, cap: u32, on_full: ContextFull) -> SessionParams {
        SessionParams {
            turns: Lengths::Fixed(turns),
            think: ThinkTime::Fixed(7),
            user_tokens: Lengths::Fixed(100),
            max_context_tokens: cap,
            on_context_full: on_full,
        }
    }

    fn first(input: u32, output: u32) -> NewRequest {
        NewRequest {
            arrival_ns: 0,
            input_tokens: input,
            output_tokens: output,
            hash_ids: Vec::new(),
            session: None,
            answer: Vec::new(),
            row: 0,
            client_wait_ns: None,
        }
    }

    /// Turn 1 of a 1000 + 300 turn: 1400 tokens whose blocks are turn 0's one full block,
    /// then the one block turn 0's answer completed (KV of 1299 tokens: blocks 0 and 1), then
    /// one fresh id; it is due the think time after turn 0's end.
    #[test]
    fn the_next_turn_names_the_previous_prompt_and_answer() {
        let mut b =
            SessionBook::synthetic(params(3, 1 << 20, ContextFull::End), Lengths::Fixed(300), 1);
        let mut nr = first(1000, 300);
        assert_eq!(b.start(&mut nr), 3);
        assert_eq!(nr.hash_ids, vec![0, 1]);
        assert_eq!(nr.answer, vec![2]);
        let tag = nr.session.unwrap();
        assert_eq!(
            b.turn_ended(tag, TurnEnd::Completed, 50, u64::MAX),
            Some(57)
        );
        let t1 = b.take_due(tag.session).unwrap();
        assert_eq!((t1.input_tokens, t1.output_tokens), (1400, 300));
        assert_eq!(t1.hash_ids, vec![0, 2, 3]);
        // KV of 1699 tokens: blocks 2 (the partial block 2 of the prompt, id 3's) … 1699 / 512 = 3.
        assert_eq!(t1.answer, vec![4]);
        // A failed turn ends the session: nothing more is due.
        let tag1 = t1.session.unwrap();
        assert_eq!(b.turn_ended(tag1, TurnEnd::Failed, 90, u64::MAX), None);
        assert_eq!((b.counts.started, b.counts.failed, b.pending()), (1, 1, 0));
    }

    /// The context cap ends a session (counted) or truncates its prompt to fresh blocks.
    #[test]
    fn the_cap_ends_or_truncates() {
        let mut b =
            SessionBook::synthetic(params(4, 1800, ContextFull::End), Lengths::Fixed(300), 1);
        let mut nr = first(1000, 300);
        // 1000 + 300 fits; 1400 + 300 fits; 1800 + 300 does not: two turns.
        assert_eq!(b.start(&mut nr), 2);
        let mut b = SessionBook::synthetic(
            params(4, 1800, ContextFull::Truncate),
            Lengths::Fixed(300),
            1,
        );
        let mut nr = first(1000, 300);
        assert_eq!(b.start(&mut nr), 4);
        let mut tag = nr.session.unwrap();
        let mut last = nr;
        for end in [10, 20] {
            b.turn_ended(tag, TurnEnd::Completed, end, u64::MAX)
                .unwrap();
            last = b.take_due(tag.session).unwrap();
            tag = last.session.unwrap();
        }
        assert_eq!(last.input_tokens, 1500, "1800 − 300");
        assert!(
            last.hash_ids.iter().all(|&id| id >= 5),
            "fresh ids only: {:?}",
            last.hash_ids
        );
        assert_eq!(b.counts.truncated_turns, 1);
        // A turn due at or after the run's end cuts the session.
        assert_eq!(b.turn_ended(tag, TurnEnd::Completed, 30, 31), None);
        assert_eq!(b.counts.cut, 1);
    }
}
