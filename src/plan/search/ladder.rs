//! The rate ladder of `pdsim plan --max-rate` and the gallop-then-bisect search over it: pure
//! functions of numbers (no run, no scenario), so a test checks the search against a scan of
//! every rung.

use super::rate::MAX_PLAN_RATE;

/// The least `--tolerance`: finer rungs than 1e-4 apart are below what a seed's noise moves
/// (and the ladder's arithmetic stays far from f64's precision).
pub const MIN_RATE_TOLERANCE: f64 = 1e-4;

/// `x^k` by squaring, in plain f64 multiplications: the same bits on every machine and in
/// every binary (no libm, nothing for the compiler to fold differently), so a test can name
/// a rung exactly.
fn pow_int(x: f64, k: u32) -> f64 {
    let (mut base, mut e, mut acc) = (x, k, 1.0);
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        base *= base;
        e >>= 1;
    }
    acc
}

/// The rate ladder `--max-rate` searches: rung `k` is `start × (1 + rel_tol)^k`, from the
/// lowest rung at or above `start / 1000` to the highest at or below [`MAX_PLAN_RATE`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ladder {
    /// Rung 0, requests/s.
    pub start: f64,
    /// `1 + rel_tol`.
    pub ratio: f64,
    /// The lowest rung (≤ 0).
    pub bottom: i32,
    /// The highest rung (≥ 0).
    pub top: i32,
    /// Rungs per doubling of the rate, `⌈ln 2 / ln ratio⌉`: the gallop's step.
    pub per_doubling: i32,
}

impl Ladder {
    /// The ladder from `start` (at most [`MAX_PLAN_RATE`]) with rungs `1 + rel_tol` apart.
    pub fn new(start: f64, rel_tol: f64) -> Self {
        let ratio = 1.0 + rel_tol;
        let per_doubling = (std::f64::consts::LN_2 / ratio.ln()).ceil().max(1.0) as i32;
        let mut l = Self {
            start,
            ratio,
            bottom: 0,
            top: 0,
            per_doubling,
        };
        // Found from estimates and then corrected rung by rung, so each end is exact.
        let est = |f: f64| (f.ln() / ratio.ln()) as i32;
        l.top = est(MAX_PLAN_RATE / start).max(0);
        while l.top > 0 && l.rate(l.top) > MAX_PLAN_RATE {
            l.top -= 1;
        }
        while l.rate(l.top + 1) <= MAX_PLAN_RATE {
            l.top += 1;
        }
        l.bottom = est(1e-3).min(0);
        while l.bottom < 0 && l.rate(l.bottom) < start * 1e-3 {
            l.bottom += 1;
        }
        while l.rate(l.bottom - 1) >= start * 1e-3 {
            l.bottom -= 1;
        }
        l
    }

    /// The rate of rung `k`, requests/s.
    pub fn rate(&self, k: i32) -> f64 {
        if k >= 0 {
            self.start * pow_int(self.ratio, k as u32)
        } else {
            self.start / pow_int(self.ratio, k.unsigned_abs())
        }
    }
}

/// How a search over the ladder went for one point: the bracket and the rungs tried.
#[derive(Clone, Debug, PartialEq)]
pub struct LadderSearch {
    /// The highest rung found to pass, if any.
    pub pass: Option<i32>,
    /// The rung above it found to fail, if any.
    pub fail: Option<i32>,
    /// Rungs tried, in order, with their verdicts.
    pub tried: Vec<(i32, bool)>,
    /// The budget ran out before the bracket closed.
    pub out_of_steps: bool,
}

/// Gallop then bisect over `ladder` with the verdict `meets(rung)`: from rung 0, up (or down)
/// one doubling of the rate at a time until the verdict flips, then halve the bracket until
/// its two rungs are adjacent. Assumes the verdict is monotone in the rate (more load never
/// helps; DistServe's goodput search assumes the same), and then finds exactly the rung a
/// scan of every rung finds: the highest that passes, the next failing. At most `max_steps`
/// verdicts; `meets` is asked each rung once.
pub fn search_ladder<E>(
    ladder: &Ladder,
    max_steps: u32,
    mut meets: impl FnMut(i32) -> Result<bool, E>,
) -> Result<LadderSearch, E> {
    let mut s = LadderSearch {
        pass: None,
        fail: None,
        tried: Vec::new(),
        out_of_steps: false,
    };
    let mut ask = |k: i32, s: &mut LadderSearch| -> Result<Option<bool>, E> {
        if s.tried.len() as u32 >= max_steps {
            s.out_of_steps = true;
            return Ok(None);
        }
        let ok = meets(k)?;
        s.tried.push((k, ok));
        if ok {
            s.pass = Some(s.pass.map_or(k, |p| p.max(k)));
        } else {
            s.fail = Some(s.fail.map_or(k, |f| f.min(k)));
        }
        Ok(Some(ok))
    };
    let step = ladder.per_doubling;
    let mut k = 0;
    // Gallop: one doubling of the rate per step, to the ladder's end.
    loop {
        let Some(ok) = ask(k, &mut s)? else {
            return Ok(s);
        };
        let next = if ok {
            (k < ladder.top).then(|| (k + step).min(ladder.top))
        } else {
            (k > ladder.bottom).then(|| (k - step).max(ladder.bottom))
        };
        match (s.pass, s.fail, next) {
            (Some(_), Some(_), _) | (_, _, None) => break,
            (_, _, Some(n)) => k = n,
        }
    }
    // Bisect the bracket down to adjacent rungs.
    while let (Some(p), Some(f)) = (s.pass, s.fail) {
        if f - p <= 1 {
            break;
        }
        if ask(p + (f - p) / 2, &mut s)?.is_none() {
            break;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_search_finds_a_scans_answer_in_few_steps() {
        for tol in [0.02, 0.1, 0.5] {
            let l = Ladder::new(10.0, tol);
            assert!(l.rate(l.top) <= MAX_PLAN_RATE && l.rate(l.top + 1) > MAX_PLAN_RATE);
            assert!(l.rate(l.bottom) >= 10.0 * 1e-3 && l.rate(l.bottom - 1) < 10.0 * 1e-3);
            assert_eq!(l.rate(0), 10.0);
            for k in l.bottom..l.top {
                assert!(l.rate(k + 1) > l.rate(k), "rungs rise");
            }
            // Every threshold, from below the bottom to past the top.
            for limit in (l.bottom - 1..=l.top).step_by(7) {
                let s = search_ladder(&l, 64, |k| Ok::<_, ()>(k <= limit)).unwrap();
                // A scan of every rung: the highest that passes, the next one failing.
                let scan_pass = (l.bottom..=l.top).filter(|&k| k <= limit).max();
                let scan_fail = (l.bottom..=l.top).find(|&k| k > limit);
                assert_eq!(s.pass, scan_pass, "tol {tol}, limit {limit}");
                if scan_pass.is_some() {
                    assert_eq!(s.fail, scan_fail, "tol {tol}, limit {limit}");
                }
                assert!(!s.out_of_steps);
                let mut asked: Vec<i32> = s.tried.iter().map(|t| t.0).collect();
                asked.sort_unstable();
                asked.dedup();
                assert_eq!(asked.len(), s.tried.len(), "no rung asked twice");
                assert!(s.tried.len() <= 45, "tol {tol}: {} steps", s.tried.len());
            }
        }
    }
}
