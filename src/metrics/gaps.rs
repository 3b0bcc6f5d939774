//! Inter-token gaps: every gap pooled by kind ([`Gaps`], `summary.json` `latency_ms.itl`), and
//! each request's worst gap ([`StepGaps`], `latency_ms.tbt`, Mooncake's TBT) — exact, and at a
//! cost that grows with steps and requests, never with tokens.
//!
//! A server's running requests all wait the same time for the token of one step, so the gaps a
//! running request sees are the durations of the steps it ran in, and only the first gap of a
//! stint (the step after it joined) is its own: it runs from its previous token (the prefill's,
//! or its last before a retraction) and the server records it at once. The steps after are
//! shared: [`StepGaps`] keeps, per server, the steps no later step's gap reaches (a monotone
//! stack: steps ascending, gaps strictly descending), so the worst gap of the steps from `k`
//! on is the first kept step at or after `k` — one binary search when the request leaves its
//! batch, however long it ran. A step pushes in O(1) amortized; a coalesced run pushes one
//! entry, its worst step (nobody joins inside a run, so every request asks for all of it or
//! none). Steps older than every running request's first shared step are dropped, so the
//! stack holds at most one entry per step that started a new record since the oldest running
//! request joined.

use std::collections::VecDeque;

use super::Histogram;
use crate::engine::Nanos;
use crate::vocab::GapKind;

/// Every inter-token gap, one histogram per [`GapKind`] (ns). Their union is `latency_ms.itl`;
/// apart, they say which phase the tail of the gaps comes from.
#[derive(Clone, Debug, Default)]
pub struct Gaps {
    /// By [`GapKind::index`].
    pub by_kind: [Histogram; 3],
}

impl Gaps {
    /// The histogram of `kind`.
    #[inline]
    pub fn of(&mut self, kind: GapKind) -> &mut Histogram {
        &mut self.by_kind[kind.index()]
    }

    /// Every gap in one histogram: what each kind's would have been had they been one (counts,
    /// sums and extremes add up).
    pub fn merged(&self) -> Histogram {
        let mut h = Histogram::new();
        for k in &self.by_kind {
            h.merge(k);
        }
        h
    }

    /// Gaps recorded, of every kind.
    pub fn count(&self) -> u64 {
        self.by_kind.iter().map(Histogram::count).sum()
    }
}

/// The shared steps of one server's batch, kept so each request's worst step gap is found
/// when it leaves (see the module docs). A request that joined after `j` steps had its first
/// gap at step `j + 1` (recorded by the server) and shares steps `j + 2 …`.
#[derive(Clone, Debug, Default)]
pub struct StepGaps {
    /// (step, gap ns, whether the forward ran prefill work): steps ascending, gaps strictly
    /// descending — each entry the worst of the steps from it to the next entry.
    peaks: VecDeque<(u64, Nanos, bool)>,
    /// (join step, requests still running that joined then), join steps ascending.
    joins: VecDeque<(u64, u32)>,
}

impl StepGaps {
    /// A request joined the batch after `step` steps (join steps never decrease).
    #[inline]
    pub fn joined(&mut self, step: u64) {
        match self.joins.back_mut() {
            Some(b) if b.0 == step => b.1 += 1,
            _ => {
                debug_assert!(self.joins.back().is_none_or(|b| b.0 < step));
                self.joins.push_back((step, 1));
            }
        }
    }

    /// Step `step` ended: each request in it waited `gap` ns (`mixed`: the forward also ran
    /// prefill work). Within a coalesced run, the run's worst step stands for all of them
    /// (nobody joins or leaves inside a run).
    #[inline]
    pub fn step(&mut self, step: u64, gap: Nanos, mixed: bool) {
        while self.peaks.back().is_some_and(|p| p.1 <= gap) {
            self.peaks.pop_back();
        }
        self.peaks.push_back((step, gap, mixed));
        // No running request asks for steps before its join step + 2.
        let first = self.joins.front().map_or(u64::MAX, |j| j.0 + 2);
        while self.peaks.front().is_some_and(|p| p.0 < first) {
            self.peaks.pop_front();
        }
    }

    /// The worst gap of the steps from `from` on, with its kind (`None`: no such step).
    #[inline]
    pub fn worst_since(&self, from: u64) -> Option<(Nanos, GapKind)> {
        let i = self.peaks.partition_point(|p| p.0 < from);
        self.peaks.get(i).map(|p| (p.1, GapKind::step(p.2)))
    }

    /// A request that joined after `join` steps leaves the batch; returns the worst gap of the
    /// steps it shared (`None` when it shared none).
    #[inline]
    pub fn left(&mut self, join: u64) -> Option<(Nanos, GapKind)> {
        let worst = self.worst_since(join + 2);
        let i = self.joins.partition_point(|j| j.0 < join);
        match self.joins.get_mut(i) {
            Some(j) if j.0 == join && j.1 > 0 => j.1 -= 1,
            _ => debug_assert!(false, "a request that joined at step {join} left twice"),
        }
        while self.joins.front().is_some_and(|j| j.1 == 0) {
            self.joins.pop_front();
        }
        if self.joins.is_empty() {
            self.peaks.clear();
        }
        worst
    }

    /// Entries kept (for tests of the bound).
    pub fn kept(&self) -> usize {
        self.peaks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slow, obviously right answer: every step's gap kept, the max over a range.
    struct Naive(Vec<(Nanos, bool)>);

    impl Naive {
        fn worst_since(&self, from: u64) -> Option<(Nanos, GapKind)> {
            // Steps are 1-based; the first of equal worst gaps is the latest one (the stack
            // keeps the later of equal gaps).
            let mut best: Option<(Nanos, GapKind)> = None;
            for (k, &(g, m)) in self.0.iter().enumerate() {
                if (k as u64 + 1) >= from && best.is_none_or(|b| g >= b.0) {
                    best = Some((g, GapKind::step(m)));
                }
            }
            best
        }
    }

    #[test]
    fn each_leaver_gets_the_worst_of_the_steps_it_shared() {
        // A batch of requests joining and leaving at pseudo-random steps over step gaps that rise
        // and fall; every leaver's answer is the naive maximum over its steps.
        let mut s = StepGaps::default();
        let mut naive = Naive(Vec::new());
        let mut running: Vec<u64> = Vec::new();
        let mut x: u64 = 12345;
        let mut rnd = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut checked = 0;
        for step in 0..5000u64 {
            // Joins happen at the start of step `step + 1`, after `step` steps.
            for _ in 0..rnd(3) {
                s.joined(step);
                running.push(step);
            }
            let gap = 1000 + rnd(500) + if rnd(50) == 0 { 5000 } else { 0 } + (step % 97) * 3;
            let mixed = rnd(4) == 0;
            s.step(step + 1, gap, mixed);
            naive.0.push((gap, mixed));
            // Leaves after the step's end.
            let mut i = 0;
            while i < running.len() {
                if rnd(20) == 0 {
                    let j = running.swap_remove(i);
                    assert_eq!(s.left(j), naive.worst_since(j + 2), "join {j} at {step}");
                    checked += 1;
                } else {
                    i += 1;
                }
            }
            assert!(s.kept() <= 200, "the stack stays small: {}", s.kept());
        }
        assert!(checked > 1000);
    }

    #[test]
    fn a_run_pushes_its_worst_step_and_old_steps_are_dropped() {
        let mut s = StepGaps::default();
        s.joined(0);
        s.step(1, 10, false); // request 0's first gap (its own), then shared steps from 2
        s.step(2, 30, true);
        s.step(3, 20, false);
        s.joined(3);
        s.step(4, 25, false);
        assert_eq!(s.worst_since(2), Some((30, GapKind::MixedStep)));
        assert_eq!(
            s.worst_since(5),
            None,
            "the request joined at 3 shared nothing yet"
        );
        assert_eq!(s.left(3), None);
        s.step(5, 5, false);
        assert_eq!(s.left(0), Some((30, GapKind::MixedStep)));
        assert_eq!(s.kept(), 0, "nobody runs: nothing kept");
    }
}
