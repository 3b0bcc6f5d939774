//! Inter-token gaps: every gap pooled by kind ([`Gaps`], `summary.json` `latency_ms.itl`), and
//! each request's worst gap ([`StepGaps`], `latency_ms.tbt`, Mooncake's TBT) — exact, and at a
//! cost that grows with steps and requests, never with tokens.
//!
//! A server's running requests all wait the same time for the token of one step, so the gaps a
//! running request sees are the durations of the steps it ran in, and only the first gap of a
//! stint (the step after it joined) is its own: it runs from its previous token (the prefill's,
//! or its last before a retraction) and the server records it at once. The steps after are
//! shared, and each request asks, when it leaves its batch, for the worst of the steps from
//! its join + 2 to now. [`StepGaps`] answers with two reductions:
//!
//! - **Blocks.** Between two joins or leaves nobody's window starts or ends, so the steps in
//!   between are one block: only its worst step is kept (a step is one compare; a coalesced run
//!   arrives as its worst step already). A join after `j` steps starts a block at `j + 2`; a
//!   leave closes the block it asks about.
//! - **A monotone stack of blocks.** Only blocks no later block outdid are kept (steps
//!   ascending, gaps strictly descending), so the worst gap from step `k` on is the first kept
//!   block at or after `k` — one binary search when a request leaves, however long it ran.
//!   Blocks before every running request's window are dropped, so the stack stays within the
//!   requests in flight.

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
#[derive(Clone, Debug)]
pub struct StepGaps {
    /// Closed blocks, `peaks[head..]`: (last step, worst gap ns with [`MIXED`] set when that
    /// step's forward ran prefill work): steps ascending, gaps strictly descending. A `Vec`
    /// read from `head` (dropping from the front is a move of `head`; the dead prefix is
    /// reclaimed when it outgrows the live part).
    peaks: Vec<(u64, u64)>,
    head: usize,
    /// The open block: its last step and worst gap (as in `peaks`); a gap of 0 when it is
    /// empty (no step takes 0 ns: a step is scheduled at least 1 ns on).
    open: (u64, u64),
    /// The first step the open block may not hold: a join after `j` steps starts a block at
    /// `j + 2`.
    cut: u64,
    /// Live blocks past which the server is asked for its oldest running request's join
    /// step ([`StepGaps::wants_prune`]): doubled after each prune, so the scan it costs is
    /// amortized over the blocks that made it.
    limit: usize,
}

/// The bit of a kept gap that says its forward ran prefill work (gaps are far below 2^63 ns).
const MIXED: u64 = 1 << 63;

/// The fewest live blocks that ask for a prune (4 in unit tests, so they prune all the time).
const PRUNE_AT: usize = if cfg!(test) { 4 } else { 64 };

impl Default for StepGaps {
    fn default() -> Self {
        Self {
            peaks: Vec::new(),
            head: 0,
            open: (0, 0),
            cut: u64::MAX,
            limit: PRUNE_AT,
        }
    }
}

impl StepGaps {
    /// A request joined the batch after `step` steps (every step up to `step` has ended): the
    /// steps so far close a block, and the next block starts at `step + 2`, where its window
    /// starts (step `step + 1` is its own first gap).
    #[inline]
    pub fn joined(&mut self, step: u64) {
        self.close();
        self.cut = step + 2;
    }

    /// Step `step` ended: each request in it waited `gap` ns (`mixed`: the forward also ran
    /// prefill work). Within a coalesced run, the run's worst step stands for all of them
    /// (nobody joins or leaves inside a run).
    #[inline]
    pub fn step(&mut self, step: u64, gap: Nanos, mixed: bool) {
        if step >= self.cut {
            self.close();
            self.cut = u64::MAX;
        }
        debug_assert!(gap > 0, "a step of 0 ns");
        // The later of equal gaps stands (as `close` keeps it).
        if gap >= self.open.1 & !MIXED {
            self.open.1 = gap | if mixed { MIXED } else { 0 };
        }
        self.open.0 = step;
    }

    /// Closes the open block onto the stack, dropping the blocks it outdoes.
    #[inline]
    fn close(&mut self) {
        let (step, g) = std::mem::take(&mut self.open);
        if g == 0 {
            return;
        }
        let gap = g & !MIXED;
        while self.peaks.len() > self.head && self.peaks.last().is_some_and(|p| p.1 & !MIXED <= gap)
        {
            self.peaks.pop();
        }
        self.peaks.push((step, g));
    }

    /// A request that joined after `join` steps leaves the batch, `running` requests staying;
    /// returns the worst gap of the steps it shared (`None` when it shared none). The open
    /// block counts: a request leaves after the steps it ran in ended.
    #[inline]
    pub fn left(&mut self, join: u64, running: u32) -> Option<(Nanos, GapKind)> {
        self.close();
        let live = &self.peaks[self.head..];
        // Most leavers joined before every kept block: the first is theirs.
        let from = join + 2;
        let i = if live.first().is_none_or(|p| p.0 >= from) {
            0
        } else {
            live.partition_point(|p| p.0 < from)
        };
        let worst = live
            .get(i)
            .map(|p| (p.1 & !MIXED, GapKind::step(p.1 & MIXED != 0)));
        if running == 0 {
            // Nobody runs: nothing kept is asked for again.
            self.peaks.clear();
            self.head = 0;
            self.cut = u64::MAX;
            self.limit = PRUNE_AT;
        }
        worst
    }

    /// Whether the stack outgrew its limit: the server should [`StepGaps::prune`] it with its
    /// oldest running request's join step.
    #[inline]
    pub fn wants_prune(&self) -> bool {
        self.peaks.len() - self.head > self.limit
    }

    /// Drops the blocks before every running request's window: `oldest` is a join step no
    /// later than any running request's (a lower bound is enough: it keeps more).
    pub fn prune(&mut self, oldest: u64) {
        let live = &self.peaks[self.head..];
        self.head += live.partition_point(|p| p.0 < oldest.saturating_add(2));
        if self.head * 2 > self.peaks.len() {
            self.peaks.drain(..self.head);
            self.head = 0;
        }
        self.limit = (2 * (self.peaks.len() - self.head)).max(PRUNE_AT);
    }

    /// Blocks kept (for tests of the bound).
    pub fn kept(&self) -> usize {
        self.peaks.len() - self.head + usize::from(self.open.1 != 0)
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
        // The server's part: its running requests' oldest join step when the stack asks.
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
                    let worst = s.left(j, running.len() as u32);
                    assert_eq!(worst, naive.worst_since(j + 2), "join {j} at {step}");
                    checked += 1;
                } else {
                    i += 1;
                }
            }
            if s.wants_prune() {
                s.prune(running.iter().copied().min().unwrap_or(u64::MAX));
            }
            assert!(s.kept() <= 200, "the stack stays small: {}", s.kept());
        }
        assert!(checked > 1000);
    }

    #[test]
    fn blocks_end_where_windows_start_and_an_empty_batch_keeps_nothing() {
        let mut s = StepGaps::default();
        s.joined(0);
        s.step(1, 10, false); // request 0's first gap (its own), then shared steps from 2
        s.step(2, 30, true);
        s.step(3, 20, false);
        s.joined(3); // step 4 is this one's own first gap; it shares from 5
        s.step(4, 25, false);
        assert_eq!(
            s.left(3, 1),
            None,
            "the request joined at 3 shared nothing yet"
        );
        s.step(5, 5, false);
        assert_eq!(s.left(0, 0), Some((30, GapKind::MixedStep)));
        assert_eq!(s.kept(), 0, "nobody runs: nothing kept");
        // A request that joined at 3 and shared step 5 only sees 5 (not 4, its own).
        let mut s = StepGaps::default();
        s.joined(0);
        s.step(1, 10, false);
        s.step(2, 30, false);
        s.step(3, 20, false);
        s.joined(3);
        s.step(4, 25, false);
        s.step(5, 7, false);
        assert_eq!(s.left(3, 1), Some((7, GapKind::DecodeStep)));
        assert_eq!(s.left(0, 0), Some((30, GapKind::DecodeStep)));
    }
}
