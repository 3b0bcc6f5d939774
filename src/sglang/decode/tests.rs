//! The decode server's unit tests, each playing `World`'s part by hand.

use super::*;
use crate::sglang::testkit::{core, request};
use crate::vocab::GapKind;

/// `start_step` as `World` calls it, at `q`'s now, a retracted request's bootstrap clock
/// restarted with `timeout`: the requests it retracted (its `Effect::Retracted`, in order) and
/// the wakes it marked.
fn start(
    d: &mut DecodeServer,
    reqs: &mut Requests,
    q: &mut EventQueue<Event>,
    timeout: Nanos,
) -> (Vec<ReqRef>, Vec<Wake>) {
    let (mut wake, mut fx) = (Vec::new(), Vec::new());
    let mut cx = Ctx {
        q,
        reqs,
        wake: &mut wake,
        fx: &mut fx,
        seed: 7,
    };
    d.sender_timeout_ns = Some(timeout);
    d.start_step(DecodeId(0), &mut cx);
    let retracted = fx
        .into_iter()
        .filter_map(|e| match e {
            crate::sglang::Effect::Retracted { req, .. } => Some(req),
            _ => None,
        })
        .collect();
    (retracted, wake)
}

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
/// requests are held at most; 40 (> 32) gets none, so 40 — and with
/// `--disaggregation-decode-extra-slots 7`, 47. At ≤ 32 the extra slots change nothing: the
/// doubling wins (`model_runner.py`: "only effective when max_num_reqs > 32").
#[test]
fn prealloc_stops_when_the_request_rows_are_held() {
    for (max_running, extra, rows) in [
        (1u32, None, 3usize),
        (40, None, 40),
        (40, Some(7), 47),
        (40, Some(0), 40),
        (1, Some(7), 3),
    ] {
        let mut reqs = Requests::default();
        let mut d = DecodeServer::new(core(100_000, 16), vec![17_000], max_running);
        d.extra_slots = extra;
        let v: Vec<_> = (0..50).map(|i| request(&mut reqs, i, 16, 4)).collect();
        d.prealloc.extend(v.iter().copied());
        let mut admitted = Vec::new();
        d.try_prealloc(&mut reqs, &mut admitted);
        assert_eq!(
            admitted.len(),
            rows,
            "max_running_requests {max_running}, extra slots {extra:?}"
        );
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
        start(&mut d, &mut reqs, &mut q, 1_000);
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
        retracted.extend(start(&mut d, &mut reqs, &mut q, 1_000).0);
        let (now, _) = q.pop().unwrap();
        let mut finished = Vec::new();
        let mut itl = Gaps::default();
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
        start(&mut d, &mut reqs, &mut q, 1_000);
        assert_eq!(d.newest_running(&reqs), scan(&reqs));
        match (x >> 30) % 4 {
            // The newest is retracted.
            0 => {
                if let Some(v) = scan(&reqs) {
                    d.retract(v, &mut reqs, &mut q, Some(1_000));
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

/// An injected crash with one request running: the server is down at once and says what the
/// crash does beyond it — abort its GPUs' flows, blacklist its one session, fail what was
/// routed to it as `peer_lost` naming its host; losing its state then cancels the running
/// step (its end never fires) and empties its queues. A second crash changes nothing; a
/// restart brings it back once.
#[test]
fn an_injected_crash_fails_its_requests_as_peer_lost_and_loses_the_batch() {
    let mut reqs = Requests::default();
    let mut q = EventQueue::new();
    let mut c = core(16, 16);
    c.instance = crate::vocab::ids::InstanceId(2);
    let mut d = DecodeServer::new(c, vec![17_000], u32::MAX);
    let a = request(&mut reqs, 0, 16, 10);
    d.enqueue_ready(a);
    start(&mut d, &mut reqs, &mut q, 1_000);
    let b = request(&mut reqs, 1, 16, 10);
    d.enqueue_prealloc(b);
    assert_eq!((q.len(), d.running(), d.queued()), (1, 1, 1));
    let crash = d.crash(CrashCause::Injected).expect("it was up");
    assert!(!d.core.alive());
    assert_eq!(crash.ranks, 1);
    assert_eq!(
        crash.failure,
        crate::sglang::Failure::new(
            crate::vocab::ErrorKind::PeerLost,
            "Lost connection with decode instance 10.0.0.2: it crashed"
        )
    );
    assert!(d.crash(CrashCause::Injected).is_none(), "already down");
    d.lose_state(&mut q);
    assert!(q.is_empty() && !d.core.busy && d.queued() == 0);
    let mut admitted = Vec::new();
    d.enqueue_prealloc(b);
    d.try_prealloc(&mut reqs, &mut admitted);
    assert!(admitted.is_empty(), "a dead decode admits nothing");
    assert!(d.restart() && !d.restart());
}

/// First contact with a prefill of another page size raises sglang's RuntimeError; the
/// decode dies of it: every request it held fails as `server_crashed` with "Scheduler hit an
/// exception".
#[test]
fn an_exception_crashes_the_server_with_server_crashed() {
    let mut d = DecodeServer::new(core(16, 16), vec![17_000, 17_001], u32::MAX);
    let e = crate::layout::checks::first_contact(64, "auto", 16, "auto").unwrap_err();
    let crash = d.crash(CrashCause::Exception(&e)).unwrap();
    assert_eq!(crash.ranks, 2);
    assert_eq!(crash.failure.kind, crate::vocab::ErrorKind::ServerCrashed);
    assert_eq!(
        crash.failure.message,
        format!("Scheduler hit an exception: RuntimeError: {}", e.message)
    );
}

/// (time, steps done, context tokens, free pages, busy ns and tokens of the tick) after a
/// step end and the next start.
type StepState = (Nanos, u64, u64, u32, Nanos, u64);

/// What [`step_through`] saw: states, finished requests, events, latency buckets, and each
/// finished request's worst gap.
type Walk = (
    Vec<StepState>,
    Vec<ReqRef>,
    usize,
    Vec<(u64, u64, u64)>,
    Vec<Option<(Nanos, GapKind)>>,
);

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
    let (mut seen, mut done, mut events, mut worst) = (Vec::new(), Vec::new(), 0, Vec::new());
    let mut itl = Gaps::default();
    start(&mut d, &mut reqs, &mut q, 1_000);
    while let Some((now, _)) = q.pop() {
        events += 1;
        // Halfway through the run first, as a touch would, then to its end.
        for t in [now - (now - d.step_started) / 2, now] {
            if mode == Mode::Pass {
                // The pass's step ends, from the run's plan before it.
                let mut step_ends = vec![d.step_end];
                for k in 0..d.virtual_left as usize {
                    let next = step_ends[k] + d.planned[d.next_planned + k];
                    step_ends.push(next);
                }
                let mut shown = Vec::new();
                let n = d.virtual_steps(t, &mut reqs, &mut itl, |end, used| {
                    shown.push((end, used));
                });
                step_ends.truncate(n as usize);
                // `each` saw the first step end, the last and every one where the pages
                // grew: a step end it skipped has the pages of the one it saw before.
                assert!(shown.len() <= step_ends.len());
                assert_eq!(shown.first().map(|s| s.0), step_ends.first().copied());
                assert_eq!(shown.last().map(|s| s.0), step_ends.last().copied());
                // (Were a step end where the pages grew skipped, its pages rebuilt here would
                // differ from the step-by-step walk's.)
                let ends: Vec<(Nanos, u32)> = step_ends
                    .iter()
                    .map(|&e| {
                        let seen = shown
                            .iter()
                            .rfind(|s| s.0 <= e)
                            .expect("the first is shown");
                        (e, seen.1)
                    })
                    .collect();
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
                    let end = d.virtual_step(&mut reqs, &mut itl);
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
            worst.push(req.row.gaps.worst);
        }
        let (retracted, _) = start(&mut d, &mut reqs, &mut q, 1_000);
        assert!(retracted.is_empty(), "the pool suffices");
        // As a materialized step: its end, then the next step's start (pages grown).
        seen.push(state(&d, now));
    }
    (seen, done, events, itl.merged().buckets().collect(), worst)
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
    let (steps, done, events, itl, worst) = step_through(Mode::Events);
    let (steps_s, done_s, events_s, itl_s, worst_s) = step_through(Mode::Single);
    let (steps_p, done_p, events_p, itl_p, worst_p) = step_through(Mode::Pass);
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
    // Each request's worst gap, one step at a time or coalesced, is the longest of the steps
    // it ran in (all three joined at 0 with their first token at 0; outputs 5, 9, 40 take
    // 4, 8 and 39 steps), read off the step ends.
    assert_eq!((&worst, &worst), (&worst_s, &worst_p));
    let ends: Vec<Nanos> = steps.iter().map(|s| s.0).collect();
    for (k, w) in [4usize, 8, 39].iter().zip(&worst) {
        let longest = (0..*k)
            .map(|i| ends[i] - if i == 0 { 0 } else { ends[i - 1] })
            .max()
            .unwrap();
        assert_eq!(w.map(|w| w.0), Some(longest), "{k} steps");
    }
    assert_eq!(events, 39);
    assert_eq!(events_s, events_p);
    assert!(
        events_s <= 6,
        "one event per finish and per horizon: {events_s}"
    );
}

/// Issue 43's first defect, at the component: a request with one output token completes as
/// its KV lands and gives its pages back outside any step end, so it must mark the prealloc
/// queue for another pass. By hand, 80 pages of 16 tokens (1,280), three prompts of 32 tokens
/// with one output token each (`max(2 pages + 512, 32 + 1 − 0)` = 544 tokens wanted):
/// - admitted 0: allocatable 1,280 − 0 ≥ 544; 78 pages (1,248) left;
/// - admitted 1: 1,248 − 512 × 1 = 736 ≥ 544; 76 pages (1,216) left;
/// - the third: 1,216 − 512 × 2 = 192 < 544, waits.
///
/// The first lands and completes (not in the batch): its end marks `Wake::Decode(D0)`; with
/// its 2 pages back (1,248 free, 1 held) the pass gives 1,248 − 512 = 736 ≥ 544 and the third
/// is admitted. A request that finished in the batch marks nothing (the step end that
/// finished it runs the queue next); a failed one marks, in or out of the batch.
#[test]
fn a_request_ending_outside_a_step_end_marks_the_prealloc_queue() {
    let mut reqs = Requests::default();
    let mut d = DecodeServer::new(core(80, 16), vec![17_000], u32::MAX);
    let v: Vec<_> = (0..3).map(|i| request(&mut reqs, i, 32, 1)).collect();
    d.prealloc.extend(v.iter().copied());
    let mut admitted = Vec::new();
    d.try_prealloc(&mut reqs, &mut admitted);
    assert_eq!(
        admitted,
        v[..2],
        "the third wants 544 of 192 allocatable tokens"
    );
    assert_eq!(d.core.pages.available(), 76);
    // The first one's KV lands: one output token, nothing to decode; `World` ends it.
    let mut wake = Vec::new();
    let mut req = reqs.take(v[0]).unwrap();
    d.core.request_routed();
    let outcome = d.request_ended(DecodeId(0), (&mut req, v[0]), Outcome::Completed, &mut wake);
    assert_eq!(
        outcome,
        Outcome::Completed,
        "its own bytes: the oracle does not watch here"
    );
    assert_eq!(wake, [Wake::Decode(DecodeId(0))]);
    assert_eq!((d.holders, d.core.pages.available()), (1, 78));
    // `World` drains the mark: the queue's next pass admits the third.
    let mut admitted = Vec::new();
    d.try_prealloc(&mut reqs, &mut admitted);
    assert_eq!(admitted, [v[2]], "1,248 − 512 = 736 ≥ 544");

    // In the batch: a completion at its step end marks nothing, a failure marks.
    let mut q = EventQueue::new();
    let mut d = DecodeServer::new(core(80, 16), vec![17_000], u32::MAX);
    d.coalesce = false;
    let a = request(&mut reqs, 10, 16, 4);
    let b = request(&mut reqs, 11, 16, 4);
    for r in [a, b] {
        landed(&mut d, &mut reqs, r);
    }
    start(&mut d, &mut reqs, &mut q, 1_000);
    assert_eq!(d.running(), 2);
    let mut wake = Vec::new();
    let mut req = reqs.take(a).unwrap();
    d.core.request_routed();
    d.request_ended(DecodeId(0), (&mut req, a), Outcome::Completed, &mut wake);
    assert!(wake.is_empty(), "the step end runs the queue itself");
    let mut req = reqs.take(b).unwrap();
    d.core.request_routed();
    d.request_ended(DecodeId(3), (&mut req, b), Outcome::Failed, &mut wake);
    assert_eq!(wake, [Wake::Decode(DecodeId(3))]);
    assert_eq!((d.running(), d.holders), (0, 0));
}

/// A retraction that empties the batch leaves no step end to run the prealloc queue, which
/// now holds the victim at its front: the server marks itself. By hand, 2 pages of 4 tokens:
/// `a` (4 prompt tokens, 1 page) runs, `b` holds the other page (preallocated, its KV not
/// landed). `a` joined at step 0 with 4 tokens: its step-1 token opens a page
/// (`1 ≡ 0 + 1 − 4 mod 4`), none is free, so `a` is retracted, the batch is empty, and
/// `Wake::Decode(D0)` is marked with `a` at the front of the queue and 1 page free.
#[test]
fn a_retraction_that_empties_the_batch_marks_the_prealloc_queue() {
    let mut reqs = Requests::default();
    let mut q = EventQueue::new();
    let mut d = DecodeServer::new(core(2, 4), vec![17_000], u32::MAX);
    d.coalesce = false;
    let a = request(&mut reqs, 0, 4, 100);
    landed(&mut d, &mut reqs, a);
    let b = request(&mut reqs, 1, 4, 100);
    let h = d.core.pages.alloc(1, 1, false).unwrap();
    let rb = reqs.get_mut(b).unwrap();
    (rb.on_decode, rb.decode_allocated, rb.receiver) = (h, true, KvPoll::WaitingForInput);
    d.holders += 1;
    let (retracted, wake) = start(&mut d, &mut reqs, &mut q, 1_000);
    assert_eq!(retracted, [a]);
    assert_eq!(wake, [Wake::Decode(DecodeId(0))]);
    assert_eq!(d.prealloc.front(), Some(&a));
    assert_eq!(
        (d.running(), d.core.busy, d.core.pages.available()),
        (0, false, 1)
    );
}

/// A server of `pages` pages of `page_size` tokens whose decode step takes 10 ms per request
/// in the batch, whatever the contexts (a measured profile, so gaps can be derived by hand).
fn core_10ms_per_request(pages: u32, page_size: u32) -> crate::sglang::Core {
    crate::sglang::testkit::core_measured(
        pages,
        page_size,
        "phase,tokens,batch_size,context_tokens,time_ms\n\
         prefill,1,,0,1\nprefill,100000,,0,1\n\
         decode,,1,0,10\ndecode,,1,100000000,10\n\
         decode,,8,0,80\ndecode,,8,100000000,80\n",
    )
}

/// One kind's gaps: (count, min, max, sum), ms.
type GapStats = (u64, f64, f64, f64);

/// Plays `World` for a decode server stepped one event per step: before the step starting at
/// each time in `land`, the given request's KV lands (with `pages` pages); finished requests
/// leave. Returns the gaps by kind — (count, min, max, sum) in ms, exact — and each finished
/// request's worst gap (ms).
fn walk_by_hand(
    d: &mut DecodeServer,
    reqs: &mut Requests,
    mut land: Vec<(Nanos, ReqRef, u32)>,
) -> (Vec<GapStats>, Vec<(u64, f64, GapKind)>) {
    let mut q = EventQueue::new();
    d.coalesce = false;
    let mut itl = Gaps::default();
    let mut worst = Vec::new();
    for &(t, ..) in &land {
        q.schedule_at(t, Event::Tick);
    }
    land.reverse();
    while let Some((now, ev)) = q.pop() {
        let mut finished = Vec::new();
        if matches!(ev, Event::DecodeStepDone { .. }) {
            d.step_done(now, reqs, &mut itl, &mut finished);
        } else if !matches!(ev, Event::Tick) {
            continue; // a retracted request's bootstrap timeout: far past the walk
        }
        for r in finished {
            let mut req = reqs.take(r).unwrap();
            d.leave_batch(&mut req, r);
            let (g, k) = req.row.gaps.worst.unwrap();
            worst.push((req.id, g as f64 / 1e6, k));
        }
        while land.last().is_some_and(|l| l.0 <= now) {
            let (_, r, pages) = land.pop().unwrap();
            let id = reqs.get(r).unwrap().id;
            let h = d.core.pages.alloc(id, pages, false).unwrap();
            let req = reqs.get_mut(r).unwrap();
            (req.on_decode, req.decode_allocated, req.receiver) = (h, true, KvPoll::Success);
            d.holders += 1;
            d.enqueue_ready(r);
        }
        if !d.core.busy {
            start(d, reqs, &mut q, 1 << 50);
        }
    }
    let ms = |ns: f64| ns.round() / 1e6;
    let gaps = itl
        .by_kind
        .iter()
        .map(|h| {
            let n = h.count();
            (
                n,
                ms(h.min() as f64),
                ms(h.max() as f64),
                ms(h.mean() * n as f64),
            )
        })
        .collect();
    (gaps, worst)
}

/// Each request's worst gap and every gap by kind, derived by hand. Steps take 10 ms per
/// request. A's prefill token comes at 0 and it joins at 5 ms (4 tokens: steps 1–3); B's comes
/// at 12 ms and it joins at 15 ms (5 tokens: steps 2–5):
///
/// | step | batch | ends | A's gap | B's gap |
/// |---|---|---|---|---|
/// | 1 | A | 15 | 15 (handoff: 0 → 15) | |
/// | 2 | A B | 35 | 20 | 23 (handoff: 12 → 35) |
/// | 3 | A B | 55 | 20 (A done) | 20 |
/// | 4 | B | 65 | | 10 |
/// | 5 | B | 75 | | 10 (B done) |
///
/// A's worst is a decode step of 20 ms, B's its 23 ms handoff; the 7 gaps pool as handoffs
/// {15, 23} and steps {10, 10, 20, 20, 20}.
#[test]
fn worst_gaps_and_gap_kinds_by_hand() {
    let ms = 1_000_000;
    let mut reqs = Requests::default();
    let mut d = DecodeServer::new(core_10ms_per_request(100, 16), vec![17_000], u32::MAX);
    let a = request(&mut reqs, 0, 16, 4);
    let b = request(&mut reqs, 1, 16, 5);
    reqs.get_mut(a).unwrap().row.first_token_ns = Some(0);
    reqs.get_mut(b).unwrap().row.first_token_ns = Some(12 * ms);
    let (gaps, worst) = walk_by_hand(&mut d, &mut reqs, vec![(5 * ms, a, 1), (15 * ms, b, 1)]);
    assert_eq!(gaps[0], (2, 15.0, 23.0, 38.0), "handoffs: 15 and 23");
    assert_eq!(
        gaps[1],
        (5, 10.0, 20.0, 80.0),
        "decode steps: 20, 20, 20, 10, 10"
    );
    assert_eq!(gaps[2].0, 0, "a decode server never mixes");
    assert_eq!(
        worst,
        [(0, 20.0, GapKind::DecodeStep), (1, 23.0, GapKind::Handoff)]
    );
}

/// A retraction: the gap after it runs from the last token before it, not from the first
/// token. Pages of 4 tokens, 5 pages; A and B (prompt 4, 10 tokens each) join at 0 with their
/// first token at 0, one page each; step 1 opens a page for each (1 left), steps of 20 ms end
/// at 20, 40, 60, 80; step 5 needs two pages again: B, the newest, is retracted at 80 ms with
/// 4 tokens decoded. A runs alone (10 ms steps, done at 130 ms: worst 20). B's KV lands again
/// at 150 ms (2 pages) and it decodes its last 5 tokens in 10 ms steps from 150: its first gap
/// back is 160 − 80 = 80 ms, a handoff — its worst (the first token would say 160).
#[test]
fn a_retracted_request_resumes_its_gaps_from_its_last_token() {
    let ms = 1_000_000;
    let mut reqs = Requests::default();
    let mut d = DecodeServer::new(core_10ms_per_request(5, 4), vec![17_000], u32::MAX);
    let a = request(&mut reqs, 0, 4, 10);
    let b = request(&mut reqs, 1, 4, 10);
    for r in [a, b] {
        reqs.get_mut(r).unwrap().row.first_token_ns = Some(0);
    }
    let (gaps, worst) = walk_by_hand(
        &mut d,
        &mut reqs,
        vec![(0, a, 1), (0, b, 1), (150 * ms, b, 2)],
    );
    assert_eq!(gaps[0], (1, 80.0, 80.0, 80.0), "one handoff: B's return");
    assert_eq!(
        gaps[1],
        (17, 10.0, 20.0, 250.0),
        "8 shared 20 ms gaps, then 5 of A's and 4 of B's at 10 ms"
    );
    assert_eq!(
        worst,
        [(0, 20.0, GapKind::DecodeStep), (1, 80.0, GapKind::Handoff)]
    );
    assert_eq!(d.retractions, 1);
}

/// Every request's worst gap against a per-token oracle that times each running request's
/// token at every step end (what a client would measure). Hundreds of requests land in bursts
/// with a few output lengths (so many finish at one step) into one server whose step grows
/// with its batch, so the batch grows and shrinks, the kept blocks outgrow their prune limit
/// (4 in unit tests) all the time, and (with few pages) requests are retracted and come back.
#[test]
fn every_worst_gap_matches_a_per_token_oracle() {
    for (pages, seed) in [(100_000, 99), (400, 99), (100_000, 7), (300, 2024)] {
        let ms = 1_000_000;
        let mut reqs = Requests::default();
        let mut d = DecodeServer::new(core_10ms_per_request(pages, 16), vec![17_000], u32::MAX);
        d.coalesce = false;
        let mut q = EventQueue::new();
        let mut x: u64 = seed;
        let mut rnd = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let n = 400u64;
        let mut land = Vec::new();
        let mut t = 0;
        for id in 0..n {
            // Bursts of arrivals with a few output lengths: many requests finish together.
            t += if rnd(3) == 0 { rnd(120) * ms } else { 0 };
            let r = request(&mut reqs, id, 16, 2 + 20 * rnd(4) as u32 + rnd(2) as u32);
            reqs.get_mut(r).unwrap().row.first_token_ns = Some(t.saturating_sub(rnd(20) * ms));
            q.schedule_at(t, Event::Tick);
            land.push((t, r));
        }
        land.reverse();
        let (mut last, mut oracle) = (
            std::collections::BTreeMap::new(),
            std::collections::BTreeMap::new(),
        );
        let mut got = std::collections::BTreeMap::new();
        let mut itl = Gaps::default();
        let mut relanded = std::collections::BTreeMap::new();
        while let Some((now, ev)) = q.pop() {
            let mut finished = Vec::new();
            if matches!(ev, Event::DecodeStepDone { .. }) {
                // The oracle: every request in the batch gets a token now.
                for (&id, &r) in &relanded {
                    let Some(q) = reqs.get(r) else { continue };
                    if q.join_step != crate::vocab::requests::NOT_RUNNING {
                        let from = *last.get(&id).unwrap_or(&q.row.first_token_ns.unwrap());
                        let w: &mut Nanos = oracle.entry(id).or_insert(0);
                        *w = (*w).max(now - from);
                        last.insert(id, now);
                    }
                }
                d.step_done(now, &mut reqs, &mut itl, &mut finished);
            } else if !matches!(ev, Event::Tick) {
                continue; // a retracted request's bootstrap timeout, far past the walk
            }
            for r in finished {
                let mut req = reqs.take(r).unwrap();
                d.leave_batch(&mut req, r);
                d.holders -= 1;
                d.core.pages.free(req.id, &req.on_decode);
                got.insert(req.id, req.row.gaps.worst.unwrap().0);
            }
            while land.last().is_some_and(|l| l.0 <= now) {
                let (_, r) = land.pop().unwrap();
                relanded.insert(r.id, r);
                let (id, prompt) = {
                    let q = reqs.get(r).unwrap();
                    (q.id, q.prompt())
                };
                let Some(h) = d.core.pages.alloc(id, prompt.div_ceil(16), false) else {
                    // No room now: try again a little later.
                    land.push((now + 5 * ms, r));
                    land.sort_by_key(|x| std::cmp::Reverse(x.0));
                    q.schedule_at(now + 5 * ms, Event::Tick);
                    break;
                };
                let req = reqs.get_mut(r).unwrap();
                (req.on_decode, req.decode_allocated, req.receiver) = (h, true, KvPoll::Success);
                d.holders += 1;
                d.enqueue_ready(r);
            }
            if !d.core.busy {
                let (retracted, _) = start(&mut d, &mut reqs, &mut q, 1 << 50);
                for r in retracted {
                    // Back after a re-prefill and transfer: 50 ms on.
                    land.push((now + 50 * ms, r));
                    land.sort_by_key(|x| std::cmp::Reverse(x.0));
                    q.schedule_at(now + 50 * ms, Event::Tick);
                }
            }
        }
        assert_eq!(
            got.len() as u64,
            n,
            "every request finished ({pages} pages)"
        );
        assert_eq!(got, oracle, "{pages} pages");
        if pages < 1000 {
            assert!(d.retractions > 0, "the tight pool retracts");
        }
    }
}
