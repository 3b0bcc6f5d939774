//! The discrete-event engine: integer-nanosecond time, a totally ordered event queue and one
//! random stream per source. It knows nothing about GPUs, requests or networks.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Simulated time in nanoseconds since the start of the run.
pub type Nanos = u64;

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;

/// Converts a non-negative duration in seconds to nanoseconds, rounding **up** so that an event
/// is never scheduled before the moment the model says it happens (and a positive duration
/// never becomes zero, which would let a component run twice in one instant).
pub fn ns_from_secs_ceil(seconds: f64) -> Nanos {
    assert!(
        seconds.is_finite() && seconds >= 0.0,
        "a duration must be finite and non-negative, got {seconds} s"
    );
    (seconds * NS_PER_S as f64).ceil() as Nanos
}

/// Converts nanoseconds to milliseconds for reporting.
pub fn ms(ns: Nanos) -> f64 {
    ns as f64 / NS_PER_MS as f64
}

struct Entry<E> {
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest (time, sequence) first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A future-event list ordered by (time, sequence number).
///
/// Why both keys: many events fall on the same nanosecond (a decode step that ends as a
/// transfer lands). Ordering ties by the order in which events were *scheduled* makes the run a
/// pure function of the scenario and the seed — the heap's internal layout never decides.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    now: Nanos,
    next_seq: u64,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            now: 0,
            next_seq: 0,
            popped: 0,
        }
    }

    /// The time of the event being handled (the last one popped).
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Schedules `event` at absolute time `at` (never in the past).
    pub fn schedule_at(&mut self, at: Nanos, event: E) {
        assert!(
            at >= self.now,
            "event scheduled in the past: at {at} ns < now {} ns",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Entry { at, seq, event });
    }

    /// Schedules `event` `delay` nanoseconds from now.
    pub fn schedule_in(&mut self, delay: Nanos, event: E) {
        self.schedule_at(self.now.saturating_add(delay), event);
    }

    /// Time of the next event, if any.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|e| e.at)
    }

    /// Removes the next event and advances the clock to it.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.popped += 1;
        Some((e.at, e.event))
    }

    /// Events handled so far.
    pub fn events_popped(&self) -> u64 {
        self.popped
    }

    /// Events still pending.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The independent sources of randomness. Each gets its own ChaCha stream, so that adding a
/// source (or drawing more from one) never shifts the numbers another source sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u64)]
pub enum RngSource {
    /// Inter-arrival times.
    Arrivals = 1,
    /// Prompt lengths.
    InputLengths = 2,
    /// Output lengths.
    OutputLengths = 3,
    /// Router choices.
    Router = 4,
    /// Fault injection.
    Faults = 5,
}

/// The random stream of `source` for a run with `seed`: ChaCha8 keyed by the seed, on stream
/// number `source` (`set_stream`), so streams never overlap.
pub fn rng_stream(seed: u64, source: RngSource) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(source as u64);
    rng
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn ties_pop_in_scheduling_order() {
        let mut q = EventQueue::new();
        q.schedule_at(10, "b");
        q.schedule_at(5, "a");
        q.schedule_at(10, "c");
        q.schedule_at(10, "d");
        let order: Vec<_> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert_eq!(q.now(), 10);
        assert_eq!(q.events_popped(), 4);
    }

    #[test]
    #[should_panic(expected = "scheduled in the past")]
    fn scheduling_in_the_past_is_a_bug() {
        let mut q = EventQueue::new();
        q.schedule_at(10, ());
        q.pop();
        q.schedule_at(9, ());
    }

    #[test]
    fn durations_round_up_to_the_nanosecond() {
        assert_eq!(ns_from_secs_ceil(1.5e-9), 2);
        assert_eq!(ns_from_secs_ceil(2.0), 2 * NS_PER_S);
        assert_eq!(ns_from_secs_ceil(0.0), 0);
    }

    #[test]
    fn streams_are_pinned_and_independent() {
        // Pinned first draws: a change here changes every result file ever written.
        let first = |s| rng_stream(7, s).random::<u64>();
        let a = first(RngSource::Arrivals);
        let r = first(RngSource::Router);
        assert_ne!(a, r);
        assert_eq!(a, rng_stream(7, RngSource::Arrivals).random::<u64>());
        assert_ne!(a, rng_stream(8, RngSource::Arrivals).random::<u64>());
        // Drawing from one stream does not move another.
        let mut arr = rng_stream(7, RngSource::Arrivals);
        for _ in 0..100 {
            let _: u64 = arr.random();
        }
        assert_eq!(r, rng_stream(7, RngSource::Router).random::<u64>());
        assert_eq!(
            [a, r],
            [PINNED_ARRIVALS_FIRST_DRAW, PINNED_ROUTER_FIRST_DRAW],
            "the first draw of a stream changed: results of every scenario will change"
        );
    }

    const PINNED_ARRIVALS_FIRST_DRAW: u64 = 18_301_176_669_829_311_175;
    const PINNED_ROUTER_FIRST_DRAW: u64 = 18_244_131_744_192_737_788;
}
