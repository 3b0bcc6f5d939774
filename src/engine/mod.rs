//! The discrete-event engine: integer-nanosecond time, a totally ordered event queue and one
//! random stream per source. It knows nothing about GPUs, requests or networks.

use std::collections::VecDeque;

mod heap;
use heap::MinHeap;

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
    // One range test (NaN fails it): the two-comparison form compiles to more instructions, and
    // a coalesced decode run converts every step it plans.
    assert!(
        (0.0..f64::INFINITY).contains(&seconds),
        "a duration must be finite and non-negative, got {seconds} s"
    );
    ceil_ns(seconds * NS_PER_S as f64)
}

/// `x.ceil() as Nanos`, without a call into libm: on the baseline x86-64 target `f64::ceil` is
/// a function call, and this runs for every scheduled event. Exact: below 2^53 the truncation
/// is exact, above it every `f64` is already an integer; NaN and negatives give 0 and huge
/// values saturate, as the `as` cast does.
#[inline]
pub fn ceil_ns(x: f64) -> Nanos {
    // Below 2^63 the signed conversions give the unsigned ones' values in fewer instructions
    // (x86-64 has no unsigned conversion).
    if (0.0..TWO_63).contains(&x) {
        return ceil_ns_below_2_63(x);
    }
    let t = x as Nanos;
    if (t as f64) < x {
        t.saturating_add(1)
    } else {
        t
    }
}

/// 2^63 as `f64`: below it a duration's ceiling fits the signed conversion.
pub const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// [`ceil_ns`] of an `x` the caller knows is in [0, 2^63): the signed conversions alone, for a
/// loop that proved the range once for all its values (a coalesced run's planned steps) rather
/// than per value.
#[inline(always)]
pub fn ceil_ns_below_2_63(x: f64) -> Nanos {
    debug_assert!((0.0..TWO_63).contains(&x), "{x} outside [0, 2^63)");
    // Below 2^53 the truncation is exact; above it every `f64` is already an integer.
    let t = x as i64;
    (t + i64::from((t as f64) < x)) as Nanos
}

/// `x as f64`, bit for bit, in one conversion where it can: below 2^63 the signed conversion
/// gives the unsigned one's value (both round to nearest), and x86-64 has no unsigned one (the
/// plain cast is a branchy sequence). Hot where a step time or a gauge reads a count or a
/// duration (ns, tokens).
#[inline(always)]
pub fn u64_to_f64(x: u64) -> f64 {
    if x < 1 << 63 {
        x as i64 as f64
    } else {
        x as f64
    }
}

/// Converts nanoseconds to milliseconds for reporting.
pub fn ms(ns: Nanos) -> f64 {
    ns as f64 / NS_PER_MS as f64
}

/// A heap or lane entry: the order key and the slab slot holding the event. Events themselves
/// stay in the slab, so a sift moves 24 bytes whatever the event's size.
#[derive(Clone, Copy)]
struct Entry {
    at: Nanos,
    seq: u64,
    slot: u32,
}

/// `EventKey::lane` of an event scheduled on no lane (its entry is in the heap).
const IN_HEAP: u32 = u32::MAX;

/// The handle of a scheduled event, for [`EventQueue::cancel`]. It names the event by its
/// sequence number, which no other event ever shares, so cancelling is deterministic and a key
/// whose event already fired (or was cancelled) cancels nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventKey {
    seq: u64,
    slot: u32,
    /// The event's lane, or [`IN_HEAP`].
    lane: u32,
}

/// A future-event list ordered by (time, sequence number), with keyed cancellation.
///
/// Why both keys: many events fall on the same nanosecond (a decode step that ends as a
/// transfer lands). Ordering ties by the order in which events were *scheduled* makes the run a
/// pure function of the scenario and the seed — the heap's internal layout never decides.
///
/// **Lanes.** Events that are always scheduled a fixed delay from now (sglang's timeouts, control
/// messages) arrive in (time, sequence) order by construction, so they need no heap: each lane is
/// a FIFO. The queue keeps which lane front is earliest, so `pop` compares the heap's top with
/// one entry, and the lanes are looked over only when a lane's front changes. The order is
/// exactly the heap's; the cost of a timeout is O(1) instead of O(log n) — under overload
/// millions of timeouts wait at once.
///
/// **Cancellation** is lazy: a cancelled event leaves its slab slot at once (the slot may be
/// reused), and its entry is dropped when it reaches the top of the heap or the front of its lane,
/// recognised because the slot no longer holds that sequence number. When cancelled entries
/// outnumber live ones the heap (or the lanes) are rebuilt without them, so both stay within
/// about twice their pending events.
pub struct EventQueue<E> {
    /// Events on no lane. Its top is never a cancelled event.
    heap: MinHeap,
    /// FIFO lanes, each in (time, sequence) order; a front is never a cancelled event.
    lanes: Vec<VecDeque<Entry>>,
    /// The earliest lane front and its lane.
    first_lane: Option<(Entry, usize)>,
    /// Entries in all lanes (cancelled ones included until they are dropped).
    in_lanes: usize,
    /// Events by slot.
    slab: Vec<Slot<E>>,
    free: Vec<u32>,
    /// Heap entries whose event was cancelled.
    stale: usize,
    /// Lane entries whose event was cancelled.
    stale_in_lanes: usize,
    now: Nanos,
    next_seq: u64,
    popped: u64,
    cancelled: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

/// A slab slot: the event and the sequence number it was scheduled under.
struct Slot<E> {
    seq: u64,
    event: Option<E>,
}

/// Whether the event of `e` is still pending in `slab` (not popped, not cancelled).
#[inline(always)]
fn is_live<E>(slab: &[Slot<E>], e: &Entry) -> bool {
    let s = &slab[e.slot as usize];
    s.seq == e.seq && s.event.is_some()
}

/// The earliest front of `lanes` and its lane.
fn first_front(lanes: &[VecDeque<Entry>]) -> Option<(Entry, usize)> {
    let mut best: Option<(Entry, usize)> = None;
    for (i, lane) in lanes.iter().enumerate() {
        if let Some(&e) = lane.front()
            && best.is_none_or(|(b, _)| heap::key(&e) < heap::key(&b))
        {
            best = Some((e, i));
        }
    }
    best
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: MinHeap::default(),
            lanes: Vec::new(),
            first_lane: None,
            in_lanes: 0,
            slab: Vec::new(),
            free: Vec::new(),
            stale: 0,
            stale_in_lanes: 0,
            now: 0,
            next_seq: 0,
            popped: 0,
            cancelled: 0,
        }
    }

    /// The time of the event being handled (the last one popped).
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Moves the clock forward to `t` (never back): work done outside the queue, such as a
    /// simulation's coalesced steps, reached `t` after the last popped event.
    pub fn advance_to(&mut self, t: Nanos) {
        self.now = self.now.max(t);
    }

    /// Stores `event` and returns its entry.
    #[inline(always)]
    fn store(&mut self, at: Nanos, event: E) -> Entry {
        assert!(
            at >= self.now,
            "event scheduled in the past: at {at} ns < now {} ns",
            self.now
        );
        let seq = self.next_seq;
        self.next_seq += 1;
        let entry = Slot {
            seq,
            event: Some(event),
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = entry;
                s
            }
            None => {
                self.slab.push(entry);
                (self.slab.len() - 1) as u32
            }
        };
        Entry { at, seq, slot }
    }

    /// Schedules `event` at absolute time `at` (never in the past) and returns its key.
    pub fn schedule_keyed(&mut self, at: Nanos, event: E) -> EventKey {
        let e = self.store(at, event);
        self.heap.push(e);
        EventKey {
            seq: e.seq,
            slot: e.slot,
            lane: IN_HEAP,
        }
    }

    /// Schedules `event` `delay` ns from now on FIFO lane `lane` and returns its key. Every event
    /// of a lane must come no earlier than the lane's last one (use one lane per fixed delay).
    pub fn schedule_lane(&mut self, lane: usize, delay: Nanos, event: E) -> EventKey {
        let at = self.now.saturating_add(delay);
        if lane >= self.lanes.len() {
            assert!(lane < IN_HEAP as usize, "lane {lane} is no lane number");
            self.lanes.resize_with(lane + 1, VecDeque::new);
        }
        if let Some(last) = self.lanes[lane].back() {
            assert!(
                last.at <= at,
                "lane {lane} out of order: {at} ns after {} ns",
                last.at
            );
        }
        let e = self.store(at, event);
        let fifo = &mut self.lanes[lane];
        // Only a new front can be the earliest front (the lane's others come after its front).
        if fifo.is_empty()
            && self
                .first_lane
                .is_none_or(|(f, _)| heap::key(&e) < heap::key(&f))
        {
            self.first_lane = Some((e, lane));
        }
        fifo.push_back(e);
        self.in_lanes += 1;
        EventKey {
            seq: e.seq,
            slot: e.slot,
            lane: lane as u32,
        }
    }

    /// Schedules `event` at absolute time `at` (never in the past).
    pub fn schedule_at(&mut self, at: Nanos, event: E) {
        self.schedule_keyed(at, event);
    }

    /// Schedules `event` `delay` nanoseconds from now (saturating at the end of time).
    pub fn schedule_in(&mut self, delay: Nanos, event: E) {
        self.schedule_at(self.now.saturating_add(delay), event);
    }

    /// [`EventQueue::schedule_in`], returning the event's key.
    pub fn schedule_keyed_in(&mut self, delay: Nanos, event: E) -> EventKey {
        self.schedule_keyed(self.now.saturating_add(delay), event)
    }

    /// Cancels the event of `key` if it is still pending; returns whether it was.
    pub fn cancel(&mut self, key: EventKey) -> bool {
        let Some(entry) = self.slab.get_mut(key.slot as usize) else {
            return false;
        };
        if entry.seq != key.seq || entry.event.is_none() {
            return false;
        }
        entry.event = None;
        self.free.push(key.slot);
        self.cancelled += 1;
        if key.lane == IN_HEAP {
            self.stale += 1;
            if self.stale > 16 && self.stale * 2 > self.heap.len() {
                let slab = &self.slab;
                self.heap.retain(|e| is_live(slab, e));
                self.stale = 0;
            }
            self.skip_stale_heap();
            return true;
        }
        self.stale_in_lanes += 1;
        if self.stale_in_lanes > 1024 && self.stale_in_lanes * 2 > self.in_lanes {
            // Order is kept: a lane stays sorted when entries leave it.
            let slab = &self.slab;
            for fifo in &mut self.lanes {
                fifo.retain(|e| is_live(slab, e));
            }
            self.in_lanes = self.lanes.iter().map(VecDeque::len).sum();
            self.stale_in_lanes = 0;
        }
        let lane = key.lane as usize;
        self.skip_stale_lane(lane);
        // Only a front that left can have been the earliest (fronts are never cancelled, so a
        // rebuild leaves them).
        if self
            .first_lane
            .is_some_and(|(f, l)| l == lane && f.seq == key.seq)
        {
            self.first_lane = first_front(&self.lanes);
        }
        true
    }

    /// Drops cancelled entries from the top of the heap.
    fn skip_stale_heap(&mut self) {
        while let Some(e) = self.heap.peek() {
            if is_live(&self.slab, e) {
                break;
            }
            self.heap.pop();
            self.stale = self.stale.saturating_sub(1);
        }
    }

    /// Drops cancelled entries from the front of lane `i`.
    #[inline(always)]
    fn skip_stale_lane(&mut self, i: usize) {
        let fifo = &mut self.lanes[i];
        while let Some(e) = fifo.front() {
            if is_live(&self.slab, e) {
                break;
            }
            fifo.pop_front();
            self.in_lanes -= 1;
            self.stale_in_lanes = self.stale_in_lanes.saturating_sub(1);
        }
    }

    /// The earliest pending entry, and its lane if it is a lane's front.
    #[inline(always)]
    fn earliest(&self) -> Option<(Entry, Option<usize>)> {
        let top = self.heap.peek();
        match (top, self.first_lane) {
            (Some(h), Some((f, lane))) if heap::key(&f) < heap::key(h) => Some((f, Some(lane))),
            (Some(h), _) => Some((*h, None)),
            (None, Some((f, lane))) => Some((f, Some(lane))),
            (None, None) => None,
        }
    }

    /// Time of the next pending event, if any.
    #[inline]
    pub fn peek_time(&self) -> Option<Nanos> {
        self.earliest().map(|(e, _)| e.at)
    }

    /// Removes the next pending event and advances the clock to it.
    #[inline]
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let (e, lane) = self.earliest()?;
        let event = self.slab[e.slot as usize]
            .event
            .take()
            .expect("a live entry");
        self.free.push(e.slot);
        // Only the source popped from can have a cancelled entry newly at its front.
        match lane {
            None => {
                self.heap.pop();
                self.skip_stale_heap();
            }
            Some(i) => {
                self.lanes[i].pop_front();
                self.in_lanes -= 1;
                self.skip_stale_lane(i);
                self.first_lane = first_front(&self.lanes);
            }
        }
        self.now = e.at;
        self.popped += 1;
        Some((e.at, event))
    }

    /// Events handled so far (cancelled events are not counted).
    pub fn events_popped(&self) -> u64 {
        self.popped
    }

    /// Events cancelled so far.
    pub fn events_cancelled(&self) -> u64 {
        self.cancelled
    }

    /// Events still pending.
    pub fn len(&self) -> usize {
        self.slab.len() - self.free.len()
    }

    /// Whether no event is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// Speculative decoding's acceptance: each request its own segment of the stream
    /// (`sglang::speculative`), so a request's draws never depend on which others ran.
    Speculative = 6,
    /// Client deadlines (`[workload.client_timeout]`): one draw per arrival, in arrival order.
    ClientTimeouts = 7,
    /// Turns per session (`[workload.sessions]`): numbered apart from the others so sources
    /// added beside them never collide.
    SessionTurns = 10,
    /// Think times between a session's turns.
    ThinkTimes = 11,
    /// New user tokens of a session's later turns.
    UserTokens = 12,
    /// Output lengths of a session's later turns.
    SessionOutputs = 13,
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
    fn cancelled_events_never_pop_and_keys_are_single_use() {
        let mut q = EventQueue::new();
        let a = q.schedule_keyed(10, "a");
        let b = q.schedule_keyed(10, "b");
        q.schedule_at(5, "x");
        assert!(q.cancel(a));
        assert!(!q.cancel(a), "a key cancels once");
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some((5, "x")));
        // The slot of `a` is reused by `c`; the old key must not cancel the new event.
        let c = q.schedule_keyed(10, "c");
        assert!(!q.cancel(a));
        assert_eq!(q.peek_time(), Some(10));
        assert_eq!(q.pop(), Some((10, "b")));
        assert!(!q.cancel(b), "a fired event cannot be cancelled");
        assert_eq!(q.pop(), Some((10, "c")));
        assert!(!q.cancel(c));
        assert!(q.is_empty());
        assert_eq!((q.events_popped(), q.events_cancelled()), (3, 1));
    }

    #[test]
    fn heap_stays_small_when_most_events_are_cancelled() {
        // Two long timeouts per request, cancelled soon after: the heap must not keep them.
        let mut q = EventQueue::new();
        for i in 0..100_000u64 {
            let t1 = q.schedule_keyed(i + 300_000_000_000, i);
            let t2 = q.schedule_keyed(i + 300_000_000_000, i);
            q.schedule_at(i, i);
            q.pop();
            q.cancel(t1);
            q.cancel(t2);
            assert!(
                q.heap.len() <= 2 * q.len() + 34,
                "heap {} pending {}",
                q.heap.len(),
                q.len()
            );
        }
        assert!(q.is_empty());
    }

    #[test]
    fn order_with_cancellations_matches_a_sorted_reference() {
        // Interleaved schedules and cancels: what pops is exactly the uncancelled events in
        // (time, sequence) order.
        let mut q = EventQueue::new();
        let mut keys = Vec::new();
        let mut expect = Vec::new();
        let mut x: u64 = 12345;
        for seq in 0..5_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (x >> 33) % 1000;
            keys.push((q.schedule_keyed(at, seq), at, seq));
        }
        for (i, &(k, at, seq)) in keys.iter().enumerate() {
            if i % 3 == 0 {
                assert!(q.cancel(k));
            } else {
                expect.push((at, seq));
            }
        }
        expect.sort();
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn lanes_pop_in_the_same_order_as_the_heap() {
        // The same schedule through lanes and through the heap pops identically, cancellations
        // included: lanes change the cost, never the order.
        let mut a = EventQueue::new();
        let mut b = EventQueue::new();
        let mut out_a = Vec::new();
        let mut out_b = Vec::new();
        let mut x: u64 = 5;
        for step in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            match r % 4 {
                // Fixed delays on two lanes; a keyed heap event at a random delay.
                0 => {
                    let ka = a.schedule_lane(0, 300, step);
                    let kb = b.schedule_keyed_in(300, step);
                    if r.is_multiple_of(3) {
                        assert_eq!(a.cancel(ka), b.cancel(kb));
                    }
                }
                1 => {
                    a.schedule_lane(1, 100, step);
                    b.schedule_in(100, step);
                }
                2 => {
                    a.schedule_in(r % 500, step);
                    b.schedule_in(r % 500, step);
                }
                _ => {
                    out_a.push(a.pop());
                    out_b.push(b.pop());
                    assert_eq!(a.peek_time(), b.peek_time());
                    assert_eq!(a.len(), b.len());
                }
            }
        }
        while !b.is_empty() {
            out_a.push(a.pop());
            out_b.push(b.pop());
        }
        assert!(a.is_empty());
        assert_eq!(out_a, out_b);
    }

    #[test]
    fn lanes_with_cancellations_pop_as_one_heap() {
        // Lanes whose fronts, middles and backs are cancelled (in bursts that make the lanes and
        // the heap rebuild) pop exactly as a plain heap given the same schedule.
        let mut a = EventQueue::new();
        let mut b = EventQueue::new();
        let mut keys: Vec<(EventKey, EventKey)> = Vec::new();
        let mut x: u64 = 77;
        let (mut popped, mut lane_rebuilds, mut heap_rebuilds) = (0, 0, 0);
        for step in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            // Bursts of cancellations (a quarter of the steps), else a growing mix.
            let burst = (step / 5_000) % 4 == 3;
            let (lane_stale, heap_stale) = (a.stale_in_lanes, a.stale);
            match if burst { 10 } else { r % 10 } {
                0..=3 => {
                    let lane = (r / 10 % 3) as usize;
                    let delay = [1_000, 40, 300][lane];
                    let ka = a.schedule_lane(lane, delay, step);
                    keys.push((ka, b.schedule_keyed_in(delay, step)));
                }
                4 => {
                    let at = r % 700;
                    keys.push((a.schedule_keyed_in(at, step), b.schedule_keyed_in(at, step)));
                }
                5..=7 => {
                    let (ea, eb) = (a.pop(), b.pop());
                    assert_eq!(ea, eb, "step {step}");
                    popped += u64::from(ea.is_some());
                }
                // Any key, often one whose event already fired (a lane's front, a middle...).
                8 | 9 if !keys.is_empty() => {
                    let (ka, kb) = keys.swap_remove(r as usize % keys.len());
                    assert_eq!(a.cancel(ka), b.cancel(kb), "step {step}");
                }
                // The newest keys, still pending.
                _ => {
                    if let Some((ka, kb)) = keys.pop() {
                        assert_eq!(a.cancel(ka), b.cancel(kb), "step {step}");
                    }
                }
            }
            lane_rebuilds += u32::from(a.stale_in_lanes + 100 < lane_stale);
            heap_rebuilds += u32::from(a.stale + 10 < heap_stale);
            assert_eq!(a.peek_time(), b.peek_time(), "step {step}");
            assert_eq!(a.len(), b.len());
            assert!(
                a.in_lanes <= 2 * a.len() + 1030,
                "lanes keep cancelled entries"
            );
            assert!(
                a.heap.len() <= 2 * a.len() + 40,
                "heap keeps cancelled entries"
            );
        }
        while let Some(e) = b.pop() {
            assert_eq!(a.pop(), Some(e));
            popped += 1;
        }
        assert!(a.is_empty() && a.heap.len() == 0 && a.in_lanes == 0);
        assert_eq!(a.events_popped(), popped);
        assert!(
            lane_rebuilds > 0 && heap_rebuilds > 0,
            "{lane_rebuilds} {heap_rebuilds}"
        );
    }

    #[test]
    #[should_panic(expected = "out of order")]
    fn a_lane_refuses_an_earlier_event() {
        let mut q = EventQueue::new();
        q.schedule_lane(0, 100, ());
        q.schedule_lane(0, 50, ());
    }

    #[test]
    fn ceil_ns_is_the_ceiling() {
        for x in [
            0.0,
            0.2,
            1.0,
            1.5,
            2.999_999,
            1e9 + 0.5,
            4.5e15,
            9.007_199_254_740_993e15,
            1.2e19,
            1e30,
            -0.5,
            -3.0,
            -0.0,
            // Around 2^63, where the signed fast path hands over.
            9_223_372_036_854_774_784.0,
            9_223_372_036_854_775_808.0,
            9_223_372_036_854_777_856.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(ceil_ns(x), x.ceil() as Nanos, "{x}");
        }
        assert_eq!(ceil_ns(f64::NAN), 0);
        let mut v: u64 = 1;
        for _ in 0..10_000 {
            v = v
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = (v >> 11) as f64 / 1024.0;
            assert_eq!(ceil_ns(x), x.ceil() as Nanos, "{x}");
        }
    }

    #[test]
    fn u64_to_f64_is_the_cast() {
        let mut v: u64 = 7;
        for i in 0..10_000u32 {
            v = v
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Every magnitude, the sign bit's both sides, and values that round.
            let x = v >> (i % 64);
            assert_eq!(u64_to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
        for x in [0, 1, (1 << 53) + 1, (1 << 63) - 1, 1 << 63, u64::MAX] {
            assert_eq!(u64_to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
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
