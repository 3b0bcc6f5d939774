//! Coalesced decode runs: a batch that cannot change plans its next steps at once and
//! schedules one event at the run's end (`sim/mod.rs`, "Coalesced decode runs"); the steps
//! before it are materialized when their time is reached by something that reads or changes
//! the server ([`DecodeServer::catch_up`], [`DecodeServer::touch`]), each telling the
//! observers what its own event would have told them ([`Watchers`]).

use super::{DecodeServer, MAX_RUN_STEPS, MIN_RUN_STEPS};
use crate::engine::{EventQueue, Nanos};
use crate::metrics::Collector;
use crate::metrics::gaps::Gaps;
use crate::metrics::gauges::{PagesPass, State};
use crate::metrics::histogram::StepRun;
use crate::metrics::sampler::Sampler;
use crate::vocab::GapKind;
use crate::vocab::event::Event;
use crate::vocab::ids::{DecodeId, IdVec};
use crate::vocab::requests::Requests;

/// The observers a decode's materialized steps tell what their own events would have told
/// them (built by `sim`'s `watchers!` over two `World` fields): the collector (each step's
/// tokens and inter-token gaps) and the sampler (each instance's gauges, integrated at the
/// step ends as `World` observes them at a step's event). Two references, so a call passes
/// them in registers: the common call finds no step due and builds nothing.
pub struct Watchers<'a> {
    /// The run's aggregates: tokens and gaps.
    pub collector: &'a mut Collector,
    /// The per-second sampler: the gauges.
    pub sampler: &'a mut Sampler,
}

impl DecodeServer {
    /// Materializes this server's coalesced steps that end at or before `t`
    /// ([`DecodeServer::virtual_step`]), each as its own event would have run: tokens counted
    /// at its end, the step's bookkeeping, the gauges observed at its end. A step end at `t`
    /// is handled before the event at `t` that asks for it.
    #[inline(always)]
    pub fn catch_up(&mut self, t: Nanos, reqs: &mut Requests, w: Watchers<'_>) {
        if self.has_due_step(t) {
            self.materialize(t, reqs, w);
        }
    }

    /// Something is about to read or change this server (`me`: a request arrives, lands,
    /// ends; its prealloc queue runs; a fault): its steps up to now are materialized and its
    /// run is cut at the running step, so the next step sees the change.
    #[inline]
    pub fn touch(
        &mut self,
        me: DecodeId,
        q: &mut EventQueue<Event>,
        reqs: &mut Requests,
        w: Watchers<'_>,
    ) {
        self.catch_up(q.now(), reqs, w);
        self.cut_run(me, q);
    }

    /// The steps [`DecodeServer::catch_up`] found due, in one pass: each step as
    /// [`DecodeServer::virtual_step`] materializes it, its tokens counted at its end and the
    /// gauges integrated to the very integers that an observation at every step end would
    /// give (the batch and queues cannot change inside the pass; the pages can, and the gauges
    /// are observed where they grow and at the pass's first and last step: `Gauge`'s exact
    /// integrals need no more).
    #[inline(never)]
    fn materialize(&mut self, t: Nanos, reqs: &mut Requests, w: Watchers<'_>) {
        let Watchers { collector, sampler } = w;
        let end = collector.window_end_ns.unwrap_or(Nanos::MAX);
        let (running, queued) = (self.running(), self.queued());
        let total = self.core.pages.total();
        let i = self.core.instance.idx();
        let state = |used| State {
            running,
            queued,
            used,
            total,
        };
        // A copy the pass keeps in registers.
        let mut g = sampler.gauge(i);
        // Step ends increase: the ones inside the arrival window come first.
        let itl = &mut collector.itl;
        // The step ends inside the window first (all of them, in the common case): each is
        // counted, and the observation's clip to the window's end is the step end itself.
        let first = self.step_span().1;
        let mut pass = PagesPass::new(state(0));
        let in_window = u64::from(
            self.virtual_steps(t.min(end), reqs, itl, |at, used| pass.see(&mut g, at, used)),
        );
        pass.finish(&mut g);
        let mut last = if in_window > 0 { self.step_span().0 } else { 0 };
        if t > end {
            // Past the window's end: materialized and observed with the clip, not counted.
            self.virtual_steps(t, reqs, itl, |at, used| {
                g.observe(at, end, state(used));
                last = at;
            });
        }
        sampler.set_gauge(i, g);
        // Their tokens, as each step's `tokens_generated` would have counted them.
        if in_window > 0 {
            collector.tokens_generated(first, in_window * u64::from(running));
        }
        self.materialized_ns = self.materialized_ns.max(last);
    }

    /// Times the step that starts at `now` (sets `step_end`) and plans a coalesced run from
    /// it. While the batch cannot change —
    /// nobody joins (the ready and prealloc queues are empty, and whatever would fill them
    /// first cuts the run: [`DecodeServer::touch`]), nobody finishes before the run's last step,
    /// and the free pages cover every step's growth — the steps that follow are arithmetic, so
    /// only the run's last step gets an event. Sets `virtual_left` to the steps that end before
    /// it and returns the run's end, ns (without coalescing: `step_end`).
    pub(super) fn plan_run(&mut self, now: Nanos) -> Nanos {
        // The batch is the run's: its terms are looked up once.
        let step = self
            .core
            .step
            .decode_step(&mut self.step_cache, self.running);
        let (running, mut ctx) = (self.running, self.context_tokens);
        self.rising = step.rises();
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
        self.full = k == first + self.horizon;
        end
    }

    /// Pages the `n` steps whose growth starts at `phase[at]` open: whole turns of the phase
    /// table open one page per running request each.
    pub(super) fn pages_opened(&self, at: usize, n: u64) -> u64 {
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
    fn pages_in_hand(pages: &crate::sglang::memory::KvPool) -> u64 {
        let margin = u64::from(pages.shared.is_some());
        u64::from(pages.available()).saturating_sub(margin)
    }

    /// The prealloc queue took pages during a run: the run goes on if the pages left still
    /// cover its growth, and is cut at the running step otherwise.
    pub fn check_run(&mut self, me: DecodeId, q: &mut EventQueue<Event>) {
        if self.virtual_left == 0 {
            return;
        }
        let avail = Self::pages_in_hand(&self.core.pages);
        // The run's steps still to start open at most `ceil(n / ps)` pages per running
        // request (as `plan_run` bounds them); only below that are they counted.
        let n = u64::from(self.virtual_left);
        let bound = n.div_ceil(u64::from(self.core.page_size)) * u64::from(self.running);
        if avail < bound && avail < self.pages_opened(self.next_phase, n) {
            self.cut_run(me, q);
        }
    }

    /// Materializes the next step end of a coalesced run, at `step_end`: exactly what the
    /// step's own event would have done — [`DecodeServer::step_done`] and the next
    /// [`DecodeServer::start_step`] — in the few lines left of them inside a run, where no
    /// request finishes, nobody joins, the planned pages are free and the step's duration was
    /// planned; the run's scheduled event stays. Returns the step's end, ns.
    #[inline]
    pub fn virtual_step(&mut self, reqs: &mut Requests, itl: &mut Gaps) -> Nanos {
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
            let dt = now - self.step_started;
            itl.of(GapKind::DecodeStep).record_n(dt, running);
            self.gaps.step(self.steps_done, dt, false);
            self.last_step_end = now;
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
    /// opens). `each(end, used_pages)` sees step ends in order, after the next step took its
    /// pages, as an observer of that step's event would: the pass's first, every one where the
    /// pages grow, and its last. Between them an observer would see the same batch, queue and
    /// pages again, which an exact integral (the gauges) does not need. Returns the steps
    /// materialized.
    #[inline]
    pub fn virtual_steps(
        &mut self,
        t: Nanos,
        reqs: &mut Requests,
        itl: &mut Gaps,
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
        let (mut used, mut k) = (self.core.pages.used(), 0);
        let mut gaps = StepRun::new(running);
        let h = itl.of(GapKind::DecodeStep);
        // Whether a step end since the last one `each` saw is still to be shown: the pass's
        // first is shown unless the joined step above was.
        let (mut first, mut unseen) = (done == 0, false);
        // Nobody joins or leaves inside a run: every request asks for all of its steps or
        // none, so the run's worst step stands for them all (`metrics::gaps::StepGaps`).
        // Steps that never shorten make it the last one's, and gather their gaps by their
        // bucket's end alone (`StepRun::step_rising`); the loop is written twice so that the
        // choice is made once a pass.
        macro_rules! pass {
            ($gather:stmt) => {
                while k < left && end <= t {
                    $gather
                    // The next step starts and takes the pages its tokens open.
                    let need = self.phase[at];
                    at = if at + 1 == self.phase.len() {
                        0
                    } else {
                        at + 1
                    };
                    if need > 0 || first {
                        if need > 0 {
                            assert!(self.core.pages.grow(need), "a coalesced run retracted");
                            used += need;
                        }
                        each(end, used);
                        (first, unseen) = (false, false);
                    } else {
                        unseen = true;
                    }
                    started = end;
                    end = end.saturating_add(plan[k]);
                    k += 1;
                }
            };
        }
        let worst = if self.rising {
            pass!(gaps.step_rising(h, started, end));
            gaps.latest_max()
        } else {
            let mut worst = 0;
            pass!({
                worst = Nanos::max(worst, end - started);
                gaps.step(h, started, end);
            });
            worst
        };
        if unseen {
            each(started, used);
        }
        gaps.flush(h, started);
        let steps = k as u64;
        self.steps_done += steps;
        if k > 0 {
            self.gaps.step(self.steps_done, worst, false);
            self.last_step_end = started;
        }
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
        debug_assert!(
            self.finishing
                .peek()
                .is_none_or(|e| e.0.0 > self.steps_done),
            "a request finished inside a coalesced run"
        );
        done + k as u32
    }

    /// The inter-token gaps of the step that ended at `now`: one per running request. A
    /// request that joined at the step's start gets its own: from its previous token — the
    /// prefill's (the wait to join plus this step), or its last before a retraction (the
    /// prefill and the transfer again) — a handoff; the others share the step's duration.
    pub(super) fn record_itl(&mut self, now: Nanos, reqs: &mut Requests, itl: &mut Gaps) {
        let dt = now - self.step_started;
        itl.of(GapKind::DecodeStep)
            .record_n(dt, u64::from(self.running) - self.joined.len() as u64);
        self.gaps.step(self.steps_done, dt, false);
        self.last_step_end = now;
        for r in self.joined.drain(..) {
            let Some(q) = reqs.get_mut(r) else { continue };
            if let Some(from) = q.row.gaps.resumed_from.or(q.row.first_token_ns) {
                let kind = if from == self.step_started {
                    GapKind::DecodeStep
                } else {
                    GapKind::Handoff
                };
                itl.of(kind).record(now - from);
                q.row.gaps.saw(now - from, kind);
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
}

/// The decode servers together, for what reaches every one of them.
impl IdVec<DecodeId, DecodeServer> {
    /// Every server's coalesced steps up to `t` ([`DecodeServer::catch_up`]); returns the
    /// latest step end any server has materialized so far, ns (a run cut at `t` ends there).
    #[inline(never)]
    pub fn catch_up_all(&mut self, t: Nanos, reqs: &mut Requests, w: Watchers<'_>) -> Nanos {
        let Watchers { collector, sampler } = w;
        let mut last = 0;
        for d in self.ids() {
            self[d].catch_up(t, reqs, Watchers { collector, sampler });
            last = last.max(self[d].materialized_ns);
        }
        last
    }

    /// Every server touched ([`DecodeServer::touch`]): a fault, a restart, the heartbeat's
    /// verdict or the router's health check reads and changes instances beyond any one
    /// request.
    pub fn touch_all(&mut self, q: &mut EventQueue<Event>, reqs: &mut Requests, w: Watchers<'_>) {
        let Watchers { collector, sampler } = w;
        for d in self.ids() {
            self[d].touch(d, q, reqs, Watchers { collector, sampler });
        }
    }
}
