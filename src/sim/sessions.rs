//! Conversations as `World` routes them (`workload::sessions`, `docs/sglang-pd.md` §23): every
//! session turn's end goes back to the workload, which may make the next turn due a think time
//! later (`Event::TurnDue`); a trace's session rows go to the workload as they are read
//! (`Generator::stream_row`, which says what to schedule). Runs without sessions never reach
//! this file past one `Option` test per request end.

use crate::engine::Nanos;
use crate::vocab::event::Event;
use crate::vocab::{Outcome, RequestRow};
use crate::workload::NewRequest;
use crate::workload::sessions::{TurnEnd, TurnTag};

use super::World;

impl World<'_> {
    /// Session `session`'s next turn is due: it arrives, unless `run.max_requests` requests
    /// already have (the session is cut).
    pub(super) fn on_turn_due(&mut self, session: u64) {
        let now = self.q.now();
        let full = self
            .sc
            .max_requests
            .is_some_and(|m| self.collector.counts.arrived >= m);
        let book = self
            .source
            .sessions
            .as_mut()
            .expect("turns are due only with sessions");
        if full {
            book.drop_due(session);
            return;
        }
        let nr = book.take_due(session).expect("a due turn");
        // A turn after the arrival stream stopped extends the arrival window.
        if let Some(end) = self.collector.window_end_ns.as_mut() {
            *end = (*end).max(now);
        }
        self.arrive(nr);
    }

    /// A request's row was written: if it is a session's turn, its session learns how it
    /// ended (as the client saw it: `finish_ns` is the client's time) and its next turn may
    /// become due.
    pub(super) fn turn_ended(&mut self, row: &RequestRow) {
        let (Some(session), Some(turn)) = (row.session_id, row.turn) else {
            return;
        };
        self.turn_stats.record(row);
        let how = match row.outcome {
            Outcome::Completed | Outcome::Corrupted => TurnEnd::Completed,
            // A client that gave up on its turn (disconnected) ends its conversation, as a
            // failed turn does: it has no answer to continue from.
            Outcome::Failed | Outcome::Aborted => TurnEnd::Failed,
            Outcome::Unfinished => TurnEnd::Unfinished,
        };
        let end: Nanos = row.finish_ns.unwrap_or_else(|| self.q.now());
        let until = self.sc.duration_ns;
        let Some(book) = self.source.sessions.as_mut() else {
            return;
        };
        if let Some(at) = book.turn_ended(TurnTag { session, turn }, how, end, until) {
            self.q.schedule_at(at, Event::TurnDue { session });
        }
    }

    /// The sessions' figures (`summary.json` `sessions`), when the workload has sessions.
    pub(super) fn session_summary(&mut self) -> Option<crate::metrics::sessions::SessionSummary> {
        let book = self.source.sessions.as_mut()?;
        book.finish();
        Some(self.turn_stats.summary(&book.counts))
    }
}

/// What a request of `nr` writes in its row's session columns.
pub(super) fn tag_row(row: &mut RequestRow, nr: &NewRequest) {
    if let Some(t) = nr.session {
        row.session_id = Some(t.session);
        row.turn = Some(t.turn);
    }
}
