//! The arrival stream as the event loop sees it: one request drawn ahead and its arrival
//! scheduled, the request budget (`run.max_requests`) and the run's duration applied, and a
//! trace session's later turns handed to the session book instead of arriving.
//!
//! The next request is drawn when the previous one arrives ("peek by generating"): the
//! generator is a stream, and only its head is known. The stream ends for one of three
//! reasons — the budget is spent, the source is exhausted, or the next arrival falls past
//! the duration — and the arrival window then ends at that moment (the duration, or the
//! last arrival), which the collector's rates are computed over.

use crate::engine::{EventQueue, Nanos};
use crate::vocab::event::Event;

use super::sessions::TraceTurn;
use super::{Generator, NewRequest};

/// The head of the arrival stream and whether it has ended.
#[derive(Debug, Default)]
pub struct Feed {
    /// The next request, drawn when its arrival was scheduled.
    pending: Option<NewRequest>,
    /// Arrivals are over.
    done: bool,
}

impl Feed {
    /// Whether the stream has ended (no arrival is scheduled and none will be).
    #[inline]
    pub fn done(&self) -> bool {
        self.done
    }

    /// Draws the next request of `source` and schedules its arrival on `q` (or a trace
    /// session turn's due time, reading on past it), with at most `max_requests` drawn and
    /// none arriving at or after `duration_ns`. If the stream ends here, `window_end` is set
    /// to when the arrival window ended, ns.
    pub fn schedule_next(
        &mut self,
        source: &mut Generator,
        q: &mut EventQueue<Event>,
        (max_requests, duration_ns): (Option<u64>, Nanos),
        window_end: &mut Option<Nanos>,
    ) {
        loop {
            let now = q.now();
            if max_requests.is_some_and(|m| source.produced() >= m) {
                return self.stop(now, window_end);
            }
            let Some(next) = source.next_request() else {
                return self.stop(now, window_end);
            };
            if next.arrival_ns >= duration_ns {
                source.never_arrived(&next);
                return self.stop(duration_ns, window_end);
            }
            // A trace session's later turn is not the stream's: it is due when its
            // predecessor ended, or waits for it (`workload::sessions`), and the stream reads
            // on.
            match source.stream_row(next, duration_ns) {
                TraceTurn::Start(nr) => {
                    q.schedule_at(nr.arrival_ns, Event::Arrival);
                    self.pending = Some(nr);
                    return;
                }
                TraceTurn::Due(session, at) => q.schedule_at(at, Event::TurnDue { session }),
                TraceTurn::Held => {}
            }
        }
    }

    /// The scheduled arrival is due: the request drawn for it, unless the budget
    /// (`max_requests`) was filled meanwhile by session turns that arrived in between (issue
    /// 40: 10 → 11) — it then never arrives and the stream ends — with the next one drawn
    /// and scheduled. `arrived` is how many requests have arrived so far. Returns the request
    /// that arrives; if the stream ends here, `window_end` is set to when the arrival window
    /// ended, ns.
    #[inline]
    pub fn arrival_due(
        &mut self,
        source: &mut Generator,
        q: &mut EventQueue<Event>,
        (arrived, limits): (u64, (Option<u64>, Nanos)),
        window_end: &mut Option<Nanos>,
    ) -> Option<NewRequest> {
        let nr = self.pending.take().expect("an arrival was drawn");
        // Without sessions every arrival is the stream's and the budget cannot be full here.
        if limits.0.is_some_and(|m| arrived >= m) {
            source.never_arrived(&nr);
            self.stop(q.now(), window_end);
            return None;
        }
        self.schedule_next(source, q, limits, window_end);
        Some(nr)
    }

    /// The stream ends with the arrival window at `end_ns`.
    fn stop(&mut self, end_ns: Nanos, window_end: &mut Option<Nanos>) {
        self.done = true;
        *window_end = Some(end_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Arrival, Lengths, Workload};

    fn constant(rate_per_s: f64) -> Generator {
        Generator::new(
            &Workload::Synthetic {
                arrival: Arrival::Constant { rate_per_s },
                input: Lengths::Fixed(8),
                output: Lengths::Fixed(4),
            },
            1,
        )
    }

    /// Ten requests a second for 1 s: even gaps put arrivals at 0.1, 0.2, … 0.9 s; the tenth
    /// would arrive at the duration, so it never does and the window ends at the duration.
    #[test]
    fn the_stream_ends_at_the_duration() {
        let (mut src, mut q, mut feed) = (constant(10.0), EventQueue::new(), Feed::default());
        let limits = (None, 1_000_000_000);
        let mut end = None;
        feed.schedule_next(&mut src, &mut q, limits, &mut end);
        assert_eq!(end, None);
        let mut times = Vec::new();
        while let Some((t, ev)) = q.pop() {
            assert!(matches!(ev, Event::Arrival));
            let arrived = times.len() as u64;
            let nr = feed.arrival_due(&mut src, &mut q, (arrived, limits), &mut end);
            times.push((t, nr.expect("arrives").arrival_ns));
        }
        assert_eq!(times.len(), 9);
        assert!(times.iter().all(|(t, a)| t == a));
        assert_eq!((times[0].0, times[8].0), (100_000_000, 900_000_000));
        assert_eq!(end, Some(1_000_000_000));
        assert!(feed.done());
    }

    /// A budget of 3 draws 3: the window ends at the third arrival (0.3 s), when the fourth
    /// would have been drawn; a budget already filled when an arrival is due (by session turns)
    /// drops that arrival and ends the window then.
    #[test]
    fn the_budget_ends_the_stream_at_its_last_arrival() {
        let (mut src, mut q, mut feed) = (constant(10.0), EventQueue::new(), Feed::default());
        let limits = (Some(3), 10_000_000_000);
        let mut end = None;
        feed.schedule_next(&mut src, &mut q, limits, &mut end);
        let mut arrived = 0;
        while let Some((_, _)) = q.pop() {
            let nr = feed.arrival_due(&mut src, &mut q, (arrived, limits), &mut end);
            arrived += u64::from(nr.is_some());
        }
        assert_eq!((arrived, end), (3, Some(300_000_000)));

        let (mut src, mut q, mut feed) = (constant(10.0), EventQueue::new(), Feed::default());
        let mut end = None;
        feed.schedule_next(&mut src, &mut q, limits, &mut end);
        q.pop();
        let nr = feed.arrival_due(&mut src, &mut q, (3, limits), &mut end);
        assert!(nr.is_none());
        assert_eq!(
            end,
            Some(100_000_000),
            "the window ends when the dropped one was due"
        );
        assert!(feed.done() && q.pop().is_none());
    }
}
