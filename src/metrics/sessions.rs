//! Figures of a workload of conversations (`summary.json` `sessions`): how sessions ended,
//! and per turn index the prompt tokens the prefill found cached — the reuse the growing
//! context brings (`workload::sessions`, `docs/sglang-pd.md` §23).

use serde::{Deserialize, Serialize};

use crate::engine::Nanos;
use crate::vocab::{Outcome, RequestRow};
use crate::workload::sessions::{SessionBook, TurnEnd, TurnTag};

/// Turn indexes with their own row in [`SessionSummary::by_turn`]; the last row holds every
/// turn from `BY_TURN_ROWS − 1` on.
pub const BY_TURN_ROWS: usize = 32;

/// One turn index's sums.
#[derive(Clone, Copy, Debug, Default)]
struct TurnAcc {
    requests: u64,
    completed: u64,
    input_tokens: u64,
    /// Requests whose prefill admitted them (their `cached_tokens` is known).
    admitted: u64,
    admitted_input_tokens: u64,
    cached_tokens: u64,
}

/// Per turn index, the requests' sums, fed by every session turn's end: the sessions'
/// observer, which also tells the workload's conversations how each turn ended.
#[derive(Clone, Debug, Default)]
pub struct TurnStats {
    by_turn: Vec<TurnAcc>,
}

impl TurnStats {
    /// A request's row was written at `now`: if it is a session's turn, its sums are kept and
    /// its session in `book` learns how it ended (as the client saw it: `finish_ns` is the
    /// client's time). Returns the session and when its next turn is due, ns (before
    /// `until_ns`, the run's duration), for the caller to schedule; `None` for a row of no
    /// session or a session that ends.
    #[inline]
    pub fn row_written(
        &mut self,
        row: &RequestRow,
        now: Nanos,
        until_ns: Nanos,
        book: Option<&mut SessionBook>,
    ) -> Option<(u64, Nanos)> {
        let (Some(session), Some(turn)) = (row.session_id, row.turn) else {
            return None;
        };
        self.record(row);
        let how = match row.outcome {
            Outcome::Completed | Outcome::Corrupted => TurnEnd::Completed,
            // A client that gave up on its turn (disconnected) ends its conversation, as a
            // failed turn does: it has no answer to continue from.
            Outcome::Failed | Outcome::Aborted => TurnEnd::Failed,
            Outcome::Unfinished => TurnEnd::Unfinished,
        };
        let end = row.finish_ns.unwrap_or(now);
        let at = book?.turn_ended(TurnTag { session, turn }, how, end, until_ns)?;
        Some((session, at))
    }

    /// `summary.json` `sessions`, when the workload has sessions (`book`, closed here).
    pub fn summary_of(&self, book: Option<&mut SessionBook>) -> Option<SessionSummary> {
        let book = book?;
        book.finish();
        Some(self.summary(&book.counts))
    }

    /// A turn's row is written.
    pub fn record(&mut self, row: &RequestRow) {
        let Some(turn) = row.turn else { return };
        let k = (turn as usize).min(BY_TURN_ROWS - 1);
        if self.by_turn.len() <= k {
            self.by_turn.resize(k + 1, TurnAcc::default());
        }
        let a = &mut self.by_turn[k];
        a.requests += 1;
        if matches!(row.outcome, Outcome::Completed | Outcome::Corrupted) {
            a.completed += 1;
        }
        a.input_tokens += u64::from(row.input_tokens);
        if let Some(c) = row.cached_tokens {
            a.admitted += 1;
            a.admitted_input_tokens += u64::from(row.input_tokens);
            a.cached_tokens += u64::from(c);
        }
    }

    /// The summary, with the session counts from the workload.
    pub fn summary(&self, c: &crate::workload::sessions::SessionCounts) -> SessionSummary {
        let turns: u64 = self.by_turn.iter().map(|a| a.requests).sum();
        let input: u64 = self.by_turn.iter().map(|a| a.input_tokens).sum();
        let saved: u64 = self.by_turn.iter().map(|a| a.cached_tokens).sum();
        let admitted_input: u64 = self.by_turn.iter().map(|a| a.admitted_input_tokens).sum();
        let share = |num: u64, den: u64| (den > 0).then(|| num as f64 / den as f64);
        SessionSummary {
            started: c.started,
            completed: c.completed,
            context_full: c.context_full,
            failed: c.failed,
            cut: c.cut,
            turns,
            truncated_turns: c.truncated_turns,
            rows_dropped: c.rows_dropped,
            mean_turns_per_session: share(turns, c.started),
            mean_context_tokens: share(input, turns),
            prefill_tokens_saved: saved,
            hit_share: share(saved, admitted_input),
            by_turn: self
                .by_turn
                .iter()
                .enumerate()
                .map(|(k, a)| TurnRow {
                    turn: k as u32,
                    and_later: k == BY_TURN_ROWS - 1,
                    requests: a.requests,
                    completed: a.completed,
                    mean_context_tokens: share(a.input_tokens, a.requests),
                    cached_tokens: a.cached_tokens,
                    hit_share: share(a.cached_tokens, a.admitted_input_tokens),
                })
                .collect(),
        }
    }
}

/// `summary.json` `sessions`: a workload of conversations.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SessionSummary {
    /// Sessions whose first turn arrived.
    pub started: u64,
    /// Sessions whose every turn completed (those the context cap ended early included).
    pub completed: u64,
    /// Of the completed, those `max_context_tokens` ended before their drawn turn count
    /// (`on_context_full = "end"`).
    pub context_full: u64,
    /// Sessions a failed turn ended (the client does not send the next message).
    pub failed: u64,
    /// Sessions the run's end cut: a turn due at or after `run.duration_s`, past
    /// `run.max_requests`, or unfinished at the drain timeout.
    pub cut: u64,
    /// Turns that arrived (requests).
    pub turns: u64,
    /// Turns whose prompt `on_context_full = "truncate"` cut to fit (no block reused).
    pub truncated_turns: u64,
    /// Trace rows of a session never sent because an earlier turn ended it.
    pub rows_dropped: u64,
    /// Turns per started session (`null` without sessions).
    pub mean_turns_per_session: Option<f64>,
    /// Mean prompt tokens per turn: the context each turn re-sends.
    pub mean_context_tokens: Option<f64>,
    /// Prompt tokens the prefills found cached (GPU, host or store) over all turns: prefill
    /// compute saved.
    pub prefill_tokens_saved: u64,
    /// `prefill_tokens_saved` ÷ the prompt tokens of the turns admitted to a prefill.
    pub hit_share: Option<f64>,
    /// Per turn index, from 0.
    pub by_turn: Vec<TurnRow>,
}

/// One turn index of [`SessionSummary::by_turn`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TurnRow {
    /// Turn index, from 0.
    pub turn: u32,
    /// The last row: every turn from `turn` on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub and_later: bool,
    /// Requests of this turn index.
    pub requests: u64,
    /// Of those, completed (or corrupted: the client got an answer).
    pub completed: u64,
    /// Mean prompt tokens.
    pub mean_context_tokens: Option<f64>,
    /// Prompt tokens found cached.
    pub cached_tokens: u64,
    /// `cached_tokens` ÷ the prompt tokens of this turn's admitted requests.
    pub hit_share: Option<f64>,
}
