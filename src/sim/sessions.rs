//! Conversations as `World` routes them (`workload::sessions`, `docs/sglang-pd.md` §23): every
//! written row goes to the sessions' observer (`metrics::sessions::TurnStats`), which keeps
//! the per-turn sums and tells the workload how the turn ended; the workload may make the next
//! turn due a think time later (`Event::TurnDue`, scheduled here). A trace's session rows go
//! to the workload as they are read (`Generator::stream_row`, which says what to schedule).
//! Runs without sessions never reach this file past one `Option` test per request end.

use crate::vocab::RequestRow;
use crate::vocab::event::Event;

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

    /// A request's row was written: the sessions' observer hears it (`TurnStats::row_written`)
    /// and, if the row ended a turn whose session goes on, its next turn is scheduled.
    pub(super) fn turn_ended(&mut self, row: &RequestRow) {
        // Most rows are of no session: one test, as before the observer.
        if row.session_id.is_none() {
            return;
        }
        let (now, until) = (self.q.now(), self.sc.duration_ns);
        let book = self.source.sessions.as_mut();
        if let Some((session, at)) = self.turn_stats.row_written(row, now, until, book) {
            self.q.schedule_at(at, Event::TurnDue { session });
        }
    }
}
