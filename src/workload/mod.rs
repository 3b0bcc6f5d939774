//! Request sources: arrival processes and length distributions, each drawing from its own
//! random stream so that changing one never shifts another.

pub mod feed;
pub mod sessions;
pub mod timeout;
pub mod trace;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::config::{Arrival, Lengths, Workload};
use crate::engine::{NS_PER_S, Nanos, RngSource, rng_stream};

/// One request as the workload produces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRequest {
    /// Arrival time, ns.
    pub arrival_ns: Nanos,
    /// Prompt tokens (≥ 1).
    pub input_tokens: u32,
    /// Tokens to generate (≥ 1), the first of which comes from prefill.
    pub output_tokens: u32,
    /// Prefix-chained ids of the prompt's 512-token blocks (traces with prefix information;
    /// empty otherwise).
    pub hash_ids: Vec<u64>,
    /// The session and turn it is, in a workload of conversations (`None` otherwise).
    pub session: Option<sessions::TurnTag>,
    /// The ids of the blocks its output completes, when a decode pool offloads them to the
    /// store (empty otherwise): a trace's derived table (`trace::answers`), or the session's
    /// own ids, named as its next turn names them.
    pub answer: Vec<u64>,
    /// Its row in the trace, from 0 (synthetic: its index among first turns).
    pub row: u64,
    /// Its client's own deadline, ns from arrival (a trace row's `timeout_s`; `None`
    /// otherwise, and `[workload.client_timeout]`, if set, draws one). Not scaled with the
    /// trace's `time_scale`: that compresses the gaps between users, not one user's patience.
    pub client_wait_ns: Option<Nanos>,
}

impl NewRequest {
    /// What a request of this one writes in its row's session columns.
    #[inline]
    pub fn tag_row(&self, row: &mut crate::vocab::RequestRow) {
        if let Some(t) = self.session {
            row.session_id = Some(t.session);
            row.turn = Some(t.turn);
        }
    }
}

/// Where requests come from.
// One per run: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Source {
    Synthetic {
        arrival: Arrival,
        input: LengthDraw,
        output: LengthDraw,
        arrivals_rng: ChaCha8Rng,
        input_rng: ChaCha8Rng,
        output_rng: ChaCha8Rng,
        /// Arrival time of the next request, in fractional ns, so that rounding never drifts
        /// the rate.
        next_arrival: f64,
        /// Under a rate profile, the next arrival's operational time (fractional ns): the
        /// process's own clock, summed as `next_arrival` is without one, so a factor of 1
        /// gives the very same arrivals.
        next_op: f64,
    },
    Trace {
        rows: crate::config::TraceRows,
        /// Rows read so far.
        read: u64,
        /// The blocks each row's output completes, with a decode offload.
        answers: Option<std::sync::Arc<crate::config::AnswerBlocks>>,
        /// Rows still to replay.
        left: u64,
        base_ns: Nanos,
        scale: f64,
    },
}

/// Generates requests in arrival order.
pub struct Generator {
    source: Source,
    produced: u64,
    error: Option<String>,
    /// The conversations, when the workload has sessions (synthetic `[workload.sessions]`, or
    /// a trace with `session_id`s): the simulator reports every turn's end to it.
    pub sessions: Option<sessions::SessionBook>,
}

impl Generator {
    /// A generator for `workload` seeded by `seed`.
    pub fn new(workload: &Workload, seed: u64) -> Self {
        let mut book = None;
        let source = match workload.clone() {
            Workload::Sessions {
                arrival,
                input,
                output,
                sessions,
            } => {
                book = Some(sessions::SessionBook::synthetic(
                    sessions,
                    output.clone(),
                    seed,
                ));
                Self::synthetic(arrival, input, output, seed)
            }
            Workload::Synthetic {
                arrival,
                input,
                output,
            } => Self::synthetic(arrival, input, output, seed),
            Workload::Trace { source } => {
                if let Some(s) = &source.sessions {
                    let mut b = sessions::SessionBook::trace(s.think_ns, seed);
                    b.fresh_from(s.first_fresh_id);
                    b.answers = source.answers.clone();
                    book = Some(b);
                }
                Source::Trace {
                    rows: (source.open)(),
                    read: 0,
                    answers: source.answers.clone(),
                    left: source.rows,
                    base_ns: source.base_ns,
                    scale: source.scale,
                }
            }
        };
        Self {
            source,
            produced: 0,
            error: None,
            sessions: book,
        }
    }

    /// The synthetic source.
    fn synthetic(arrival: Arrival, input: Lengths, output: Lengths, seed: u64) -> Source {
        let mut arrivals_rng = rng_stream(seed, RngSource::Arrivals);
        let (next_arrival, next_op) = match &arrival {
            Arrival::Profiled { base, profile } => {
                let op = gap_ns(base, &mut arrivals_rng, 0.0);
                (profile.inverse(op), op)
            }
            a => (gap_ns(a, &mut arrivals_rng, 0.0), 0.0),
        };
        Source::Synthetic {
            arrival,
            input: LengthDraw::new(input),
            output: LengthDraw::new(output),
            arrivals_rng,
            input_rng: rng_stream(seed, RngSource::InputLengths),
            output_rng: rng_stream(seed, RngSource::OutputLengths),
            next_arrival,
            next_op,
        }
    }

    /// Why a trace stopped early (it was valid when the scenario was loaded, then changed or
    /// became unreadable), if it did: the reader's message, naming the file and line.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// What the arrival stream makes of a row it read (`nr`) for a run of `until_ns`: a
    /// trace session's later turn goes to the session book — [`sessions::TraceTurn::Due`] at
    /// a time for the simulator to schedule, or held for its predecessor — and everything else
    /// (a request, a synthetic session's first turn, a trace session's start) arrives.
    pub fn stream_row(&mut self, nr: NewRequest, until_ns: Nanos) -> sessions::TraceTurn {
        if nr.session.is_none() {
            return sessions::TraceTurn::Start(nr);
        }
        let Some(book) = self.sessions.as_mut() else {
            return sessions::TraceTurn::Held;
        };
        if !book.is_trace() {
            // A synthetic session's first turn: the arrival process's.
            return sessions::TraceTurn::Start(nr);
        }
        book.trace_row(nr, until_ns)
    }

    /// The arrival stream drew `nr` and it never arrived (past the run's duration, or the
    /// request budget filled first): a synthetic session it would have started never did.
    pub fn never_arrived(&mut self, nr: &NewRequest) {
        if let (Some(t), Some(book)) = (nr.session, self.sessions.as_mut())
            && !book.is_trace()
        {
            book.unstart(t.session);
        }
    }

    /// Whether no session turn is due (in think time): with the arrival stream over and
    /// nothing in flight, the run may end.
    pub fn no_turn_due(&self) -> bool {
        self.sessions.as_ref().is_none_or(|b| b.pending() == 0)
    }

    /// The next request, or `None` when a trace is exhausted; arrival times never decrease.
    pub fn next_request(&mut self) -> Option<NewRequest> {
        let r = match &mut self.source {
            Source::Synthetic {
                arrival,
                input,
                output,
                arrivals_rng,
                input_rng,
                output_rng,
                next_arrival,
                next_op,
            } => {
                let arrival_ns = crate::engine::ceil_ns(*next_arrival);
                if let Arrival::Profiled { base, profile } = arrival {
                    profiled_next(base, profile, arrivals_rng, next_op, next_arrival);
                } else {
                    *next_arrival += gap_ns(arrival, arrivals_rng, *next_arrival);
                }
                let (input_tokens, output_tokens) = match input.lengths() {
                    // One draw picks the pair: the output comes from the same trace row.
                    Lengths::PairedInput(pairs) => pairs[input_rng.random_range(0..pairs.len())],
                    _ => (input.draw(input_rng), output.draw(output_rng)),
                };
                let mut nr = NewRequest {
                    arrival_ns,
                    input_tokens,
                    output_tokens,
                    hash_ids: Vec::new(),
                    session: None,
                    answer: Vec::new(),
                    row: self.produced,
                    client_wait_ns: None,
                };
                if let Some(book) = self.sessions.as_mut() {
                    book.start(&mut nr);
                }
                nr
            }
            Source::Trace {
                rows,
                read,
                answers,
                left,
                base_ns,
                scale,
            } => {
                if *left == 0 {
                    return None;
                }
                let row = match rows.next()? {
                    Ok(row) => row,
                    Err(e) => {
                        self.error = Some(e);
                        *left = 0;
                        return None;
                    }
                };
                *left -= 1;
                *read += 1;
                let row_index = *read - 1;
                // A session's turns take theirs when they start (`SessionBook`).
                let answer = match answers {
                    Some(a) if row.session_id.is_none() => a.of(row_index).to_vec(),
                    _ => Vec::new(),
                };
                NewRequest {
                    arrival_ns: ((row.arrival_ns - *base_ns) as f64 * *scale).round() as Nanos,
                    input_tokens: row.input_tokens,
                    output_tokens: row.output_tokens,
                    hash_ids: row.hash_ids,
                    session: row.session_id.map(|session| sessions::TurnTag {
                        session,
                        turn: row.turn.unwrap_or(0),
                    }),
                    answer,
                    row: row_index,
                    client_wait_ns: row.timeout_ns,
                }
            }
        };
        self.produced += 1;
        Some(r)
    }

    /// Requests produced so far, later turns of sessions included.
    pub fn produced(&self) -> u64 {
        self.produced + self.sessions.as_ref().map_or(0, |b| b.later_turns)
    }
}

/// How many requests a run of `workload` on `seed` sees arrive: those the generator produces
/// before `duration_ns`, at most `max_requests` — the rule of the run loop's
/// `schedule_next_arrival` (`sim/lifecycle.rs`), replayed without the cluster. Arrivals are
/// open loop (nothing the servers do moves them), so this is exact before the run starts; it
/// is what `metrics::slo::SloWatch` counts against. Reads a trace through once.
pub fn arrivals(
    workload: &Workload,
    seed: u64,
    duration_ns: Nanos,
    max_requests: Option<u64>,
) -> u64 {
    let mut g = Generator::new(workload, seed);
    let mut n = 0;
    while max_requests.is_none_or(|m| g.produced() < m) {
        match g.next_request() {
            // A synthetic session counts the turns it plans: an upper bound on its requests
            // (the closed loop may cut it), which is what the SLO watch needs. Trace rows of
            // sessions are rows.
            Some(r) if r.arrival_ns < duration_ns => {
                n += match (&r.session, g.sessions.as_mut()) {
                    (Some(t), Some(b))
                        if t.turn == 0 && matches!(g.source, Source::Synthetic { .. }) =>
                    {
                        u64::from(b.forget(t.session))
                    }
                    _ => 1,
                }
            }
            _ => break,
        }
    }
    max_requests.map_or(n, |m| n.min(m))
}

/// Under a rate profile, the next arrival: the base process's gap in operational time
/// (`next_op`), mapped back through `Λ⁻¹` (never before the last arrival). Out of line: a
/// workload without a profile never comes here.
#[cold]
#[inline(never)]
fn profiled_next(
    base: &Arrival,
    profile: &crate::config::rate_profile::RateProfile,
    rng: &mut ChaCha8Rng,
    next_op: &mut f64,
    next_arrival: &mut f64,
) {
    *next_op += gap_ns(base, rng, *next_op);
    *next_arrival = profile.inverse(*next_op).max(*next_arrival);
}

/// The gap to the next arrival after `now` (fractional ns), for every arrival process.
fn gap_ns(arrival: &Arrival, rng: &mut ChaCha8Rng, now: f64) -> f64 {
    let ns = NS_PER_S as f64;
    match arrival {
        Arrival::Poisson { rate_per_s } => exponential(rng) / rate_per_s * ns,
        Arrival::Constant { rate_per_s } => ns / rate_per_s,
        Arrival::Gamma { rate_per_s, cv } => {
            // Shape k = 1/cv² gives the CV; scale = mean/k keeps the mean gap 1/rate.
            let k = 1.0 / (cv * cv);
            gamma(k, rng) / k / rate_per_s * ns
        }
        Arrival::OnOff {
            rate_per_s,
            on_ns,
            off_ns,
        } => {
            // Draw the gap in "on-time", then map on-time back to simulated time, skipping
            // the silences.
            let (on, off) = (*on_ns as f64, *off_ns as f64);
            let period = on + off;
            let on_time_now = (now / period).floor() * on + (now % period).min(on);
            let t = on_time_now + exponential(rng) / rate_per_s * ns;
            let at = (t / on).floor() * period + t % on;
            at - now
        }
        Arrival::Profiled { base, .. } => {
            // Only through `Generator::next_request`, which keeps the operational clock: here
            // the base's gap.
            gap_ns(base, rng, now)
        }
        Arrival::Schedule { steps } => {
            // Time-change: a unit-rate exponential amount of "rate-time" Λ, spent step by step.
            let mut need = exponential(rng);
            let mut t = now;
            for &(until, rate) in steps.iter() {
                let until = until as f64;
                if t >= until {
                    continue;
                }
                let have = (until - t) / ns * rate;
                if have >= need {
                    return t + need / rate * ns - now;
                }
                need -= have;
                t = until;
            }
            let last = steps.last().map_or(0.0, |s| s.1);
            if last > 0.0 {
                t + need / last * ns - now
            } else {
                f64::INFINITY
            }
        }
    }
}

/// A unit-mean exponential draw (inverse CDF; `1 − u` is in (0, 1], so ln never sees 0).
fn exponential(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = rng.random();
    -(1.0 - u).ln()
}

/// A Gamma(k, 1) draw by Marsaglia–Tsang; shapes below 1 use the boost `G(k+1)·U^(1/k)`.
fn gamma(k: f64, rng: &mut ChaCha8Rng) -> f64 {
    if k < 1.0 {
        let u: f64 = rng.random();
        return gamma(k + 1.0, rng) * (1.0 - u).powf(1.0 / k);
    }
    let d = k - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = standard_normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u: f64 = rng.random();
        if (1.0 - u).ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// Draws one length from `dist`.
pub fn sample(dist: &Lengths, rng: &mut ChaCha8Rng) -> u32 {
    match *dist {
        Lengths::Empirical(ref v) => v[rng.random_range(0..v.len())],
        Lengths::PairedInput(ref v) => v[rng.random_range(0..v.len())].0,
        Lengths::PairedOutput(ref v) => v[rng.random_range(0..v.len())].1,
        Lengths::Fixed(v) => v,
        Lengths::Uniform { min, max } => rng.random_range(min..=max),
        Lengths::Lognormal { mean, cv, min, max } => {
            lognormal(lognormal_params(mean, cv), (min, max), rng)
        }
    }
}

/// A length distribution ready to draw from, the same draws as [`sample`]: a log-normal's μ
/// and σ are worked out once (two logarithms and a root a draw, half the cost of drawing it).
#[derive(Clone, Debug)]
pub struct LengthDraw {
    dist: Lengths,
    /// `(μ, σ)` of a log-normal; unused otherwise.
    params: (f64, f64),
}

impl LengthDraw {
    /// Ready to draw from `dist`.
    pub fn new(dist: Lengths) -> Self {
        let params = match dist {
            Lengths::Lognormal { mean, cv, .. } => lognormal_params(mean, cv),
            _ => (0.0, 0.0),
        };
        Self { dist, params }
    }

    /// The distribution.
    pub fn lengths(&self) -> &Lengths {
        &self.dist
    }

    /// Draws one length.
    #[inline]
    pub fn draw(&self, rng: &mut ChaCha8Rng) -> u32 {
        match self.dist {
            Lengths::Lognormal { min, max, .. } => lognormal(self.params, (min, max), rng),
            ref other => sample(other, rng),
        }
    }
}

/// `(μ, σ)` of the log-normal with mean `mean` and CV `cv`: σ² = ln(1 + c²), μ = ln m − σ²/2.
fn lognormal_params(mean: f64, cv: f64) -> (f64, f64) {
    let sigma2 = (1.0 + cv * cv).ln();
    (mean.ln() - sigma2 / 2.0, sigma2.sqrt())
}

/// One log-normal length with parameters `(mu, sigma)`, rounded and clamped to `min..=max`.
fn lognormal((mu, sigma): (f64, f64), (min, max): (u32, u32), rng: &mut ChaCha8Rng) -> u32 {
    let z = standard_normal(rng);
    let x = (mu + sigma * z).exp().round();
    // `max` then `min`, not `clamp`: a NaN (which checked parameters never give) lands on
    // `min` rather than casting to 0, a length no request may have.
    x.max(f64::from(min)).min(f64::from(max)) as u32
}

/// A standard normal draw by Box–Muller (two uniforms in, one normal out; the second normal
/// is discarded so that every draw consumes the same amount of the stream).
fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.random();
    let u2: f64 = rng.random();
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters that give NaN (an infinite σ, which validation refuses) still draw a length
    /// in range, the least, never 0.
    #[test]
    fn a_nan_lognormal_draw_is_the_least_length() {
        use rand::SeedableRng;
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let p = lognormal_params(256.0, 1e300);
        assert!(p.1.is_infinite(), "{p:?}");
        for _ in 0..100 {
            assert_eq!(lognormal(p, (3, 1024), &mut rng), 3);
        }
    }

    fn workload(arrival: Arrival, input: Lengths) -> Workload {
        Workload::Synthetic {
            arrival,
            input,
            output: Lengths::Fixed(1),
        }
    }

    #[test]
    fn poisson_rate_and_lognormal_moments_hold() {
        let w = workload(
            Arrival::Poisson { rate_per_s: 50.0 },
            Lengths::Lognormal {
                mean: 2048.0,
                cv: 0.8,
                min: 1,
                max: 1_000_000,
            },
        );
        let mut g = Generator::new(&w, 11);
        let n = 200_000;
        let reqs: Vec<_> = (0..n).map(|_| g.next_request().unwrap()).collect();
        let span_s = reqs.last().unwrap().arrival_ns as f64 / 1e9;
        let rate = n as f64 / span_s;
        assert!((rate / 50.0 - 1.0).abs() < 0.01, "rate {rate}");
        let mean = reqs.iter().map(|r| f64::from(r.input_tokens)).sum::<f64>() / n as f64;
        assert!((mean / 2048.0 - 1.0).abs() < 0.01, "mean {mean}");
        let var = reqs
            .iter()
            .map(|r| (f64::from(r.input_tokens) - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        let cv = var.sqrt() / mean;
        assert!((cv / 0.8 - 1.0).abs() < 0.03, "cv {cv}");
        assert!(reqs.windows(2).all(|w| w[0].arrival_ns <= w[1].arrival_ns));
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced_and_clamps_hold() {
        let w = workload(
            Arrival::Constant { rate_per_s: 3.0 },
            Lengths::Uniform { min: 5, max: 9 },
        );
        let mut g = Generator::new(&w, 1);
        let r: Vec<_> = (0..4).map(|_| g.next_request().unwrap()).collect();
        assert_eq!(r[0].arrival_ns, 333_333_334);
        assert_eq!(r[2].arrival_ns, 1_000_000_000);
        assert!(r.iter().all(|x| (5..=9).contains(&x.input_tokens)));
    }

    #[test]
    fn length_streams_do_not_depend_on_the_arrival_process() {
        let lengths = Lengths::Uniform { min: 1, max: 1000 };
        let mut a = Generator::new(
            &workload(Arrival::Poisson { rate_per_s: 1.0 }, lengths.clone()),
            5,
        );
        let mut b = Generator::new(&workload(Arrival::Constant { rate_per_s: 9.0 }, lengths), 5);
        for _ in 0..100 {
            assert_eq!(
                a.next_request().unwrap().input_tokens,
                b.next_request().unwrap().input_tokens
            );
        }
    }

    fn arrivals(arrival: Arrival, n: usize) -> Vec<f64> {
        let mut g = Generator::new(&workload(arrival, Lengths::Fixed(1)), 21);
        (0..n)
            .map(|_| g.next_request().unwrap().arrival_ns as f64 / 1e9)
            .collect()
    }

    fn gap_moments(t: &[f64]) -> (f64, f64) {
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn gamma_arrivals_have_the_asked_rate_and_burstiness() {
        for cv in [0.5, 1.0, 3.0] {
            let t = arrivals(
                Arrival::Gamma {
                    rate_per_s: 20.0,
                    cv,
                },
                200_000,
            );
            let (mean, got_cv) = gap_moments(&t);
            assert!((mean * 20.0 - 1.0).abs() < 0.02, "cv {cv}: mean gap {mean}");
            assert!((got_cv / cv - 1.0).abs() < 0.05, "cv {cv}: got {got_cv}");
        }
    }

    #[test]
    fn on_off_arrivals_stay_silent_when_off() {
        let t = arrivals(
            Arrival::OnOff {
                rate_per_s: 100.0,
                on_ns: 2 * NS_PER_S,
                off_ns: 3 * NS_PER_S,
            },
            20_000,
        );
        assert!(
            t.iter().all(|x| x % 5.0 < 2.0 + 1e-9),
            "an arrival in a silence"
        );
        let span = t.last().unwrap();
        let rate = t.len() as f64 / span;
        assert!(
            (rate / 40.0 - 1.0).abs() < 0.03,
            "mean rate {rate}, want 100 × 2/5"
        );
    }

    #[test]
    fn a_rate_schedule_follows_its_steps() {
        let steps = std::sync::Arc::new(vec![
            (100 * NS_PER_S, 10.0),
            (200 * NS_PER_S, 0.0),
            (300 * NS_PER_S, 50.0),
        ]);
        let t = arrivals(Arrival::Schedule { steps }, 20_000);
        let count = |a: f64, b: f64| t.iter().filter(|&&x| x >= a && x < b).count() as f64;
        assert!((count(0.0, 100.0) / 1000.0 - 1.0).abs() < 0.1);
        assert_eq!(count(100.0, 200.0), 0.0);
        assert!((count(200.0, 300.0) / 5000.0 - 1.0).abs() < 0.05);
        // The last rate holds after the last step.
        assert!((count(300.0, 320.0) / 1000.0 - 1.0).abs() < 0.1);
    }

    #[test]
    fn paired_lengths_keep_each_rows_input_with_its_output() {
        let pairs = std::sync::Arc::new(vec![(100, 1), (200, 2), (300, 3), (400, 4)]);
        let w = Workload::Synthetic {
            arrival: Arrival::Poisson { rate_per_s: 10.0 },
            input: Lengths::PairedInput(pairs.clone()),
            output: Lengths::PairedOutput(pairs.clone()),
        };
        let mut g = Generator::new(&w, 5);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let r = g.next_request().unwrap();
            assert_eq!(
                r.input_tokens,
                100 * r.output_tokens,
                "a pair stays together"
            );
            seen.insert(r.output_tokens);
        }
        assert_eq!(seen.len(), 4, "every pair is drawn");
    }

    #[test]
    fn empirical_lengths_sample_the_given_values() {
        let v = std::sync::Arc::new(vec![3, 7, 7, 100]);
        let mut rng = rng_stream(1, RngSource::InputLengths);
        let draws: Vec<u32> = (0..4000)
            .map(|_| sample(&Lengths::Empirical(v.clone()), &mut rng))
            .collect();
        assert!(draws.iter().all(|d| [3, 7, 100].contains(d)));
        let sevens = draws.iter().filter(|&&d| d == 7).count() as f64 / 4000.0;
        assert!((sevens - 0.5).abs() < 0.03, "{sevens}");
    }
}
