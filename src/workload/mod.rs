//! Request sources: arrival processes and length distributions, each drawing from its own
//! random stream so that changing one never shifts another.

pub mod trace;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::engine::{NS_PER_S, Nanos, RngSource, rng_stream};
use crate::scenario::{Arrival, Lengths, Workload};

/// One request as the workload produces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewRequest {
    /// Arrival time, ns.
    pub arrival_ns: Nanos,
    /// Prompt tokens (≥ 1).
    pub input_tokens: u32,
    /// Tokens to generate (≥ 1), the first of which comes from prefill.
    pub output_tokens: u32,
}

/// Where requests come from.
// One per run: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Source {
    Synthetic {
        arrival: Arrival,
        input: Lengths,
        output: Lengths,
        arrivals_rng: ChaCha8Rng,
        input_rng: ChaCha8Rng,
        output_rng: ChaCha8Rng,
        /// Arrival time of the next request, in fractional ns, so that rounding never drifts
        /// the rate.
        next_arrival: f64,
    },
    Trace {
        rows: std::sync::Arc<Vec<trace::TraceRow>>,
        next: usize,
    },
}

/// Generates requests in arrival order.
pub struct Generator {
    source: Source,
    produced: u64,
}

impl Generator {
    /// A generator for `workload` seeded by `seed`.
    pub fn new(workload: &Workload, seed: u64) -> Self {
        let source = match workload.clone() {
            Workload::Synthetic {
                arrival,
                input,
                output,
            } => {
                let mut s = Source::Synthetic {
                    arrival,
                    input,
                    output,
                    arrivals_rng: rng_stream(seed, RngSource::Arrivals),
                    input_rng: rng_stream(seed, RngSource::InputLengths),
                    output_rng: rng_stream(seed, RngSource::OutputLengths),
                    next_arrival: 0.0,
                };
                if let Source::Synthetic {
                    arrival,
                    arrivals_rng,
                    next_arrival,
                    ..
                } = &mut s
                {
                    *next_arrival = gap_ns(arrival, arrivals_rng);
                }
                s
            }
            Workload::Trace { rows } => Source::Trace { rows, next: 0 },
        };
        Self {
            source,
            produced: 0,
        }
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
            } => {
                let arrival_ns = next_arrival.ceil() as Nanos;
                *next_arrival += gap_ns(arrival, arrivals_rng);
                NewRequest {
                    arrival_ns,
                    input_tokens: sample(input, input_rng),
                    output_tokens: sample(output, output_rng),
                }
            }
            Source::Trace { rows, next } => {
                let row = rows.get(*next)?;
                *next += 1;
                NewRequest {
                    arrival_ns: row.arrival_ns,
                    input_tokens: row.input_tokens,
                    output_tokens: row.output_tokens,
                }
            }
        };
        self.produced += 1;
        Some(r)
    }

    /// Requests produced so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }
}

fn gap_ns(arrival: &Arrival, rng: &mut ChaCha8Rng) -> f64 {
    match *arrival {
        Arrival::Poisson { rate_per_s } => {
            // Inverse CDF of the exponential; 1 - u is in (0, 1], so ln never sees 0.
            let u: f64 = rng.random();
            -(1.0 - u).ln() / rate_per_s * NS_PER_S as f64
        }
        Arrival::Constant { rate_per_s } => NS_PER_S as f64 / rate_per_s,
    }
}

/// Draws one length from `dist`.
pub fn sample(dist: &Lengths, rng: &mut ChaCha8Rng) -> u32 {
    match *dist {
        Lengths::Fixed(v) => v,
        Lengths::Uniform { min, max } => rng.random_range(min..=max),
        Lengths::Lognormal { mean, cv, min, max } => {
            // A log-normal with mean m and CV c has σ² = ln(1 + c²) and μ = ln m − σ²/2.
            let sigma2 = (1.0 + cv * cv).ln();
            let mu = mean.ln() - sigma2 / 2.0;
            let z = standard_normal(rng);
            let x = (mu + sigma2.sqrt() * z).exp().round();
            (x.clamp(f64::from(min), f64::from(max))) as u32
        }
    }
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
        let mut a = Generator::new(&workload(Arrival::Poisson { rate_per_s: 1.0 }, lengths), 5);
        let mut b = Generator::new(&workload(Arrival::Constant { rate_per_s: 9.0 }, lengths), 5);
        for _ in 0..100 {
            assert_eq!(
                a.next_request().unwrap().input_tokens,
                b.next_request().unwrap().input_tokens
            );
        }
    }
}
