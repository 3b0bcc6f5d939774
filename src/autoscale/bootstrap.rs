//! Seeding the SLA planner's regressions before live samples arrive. Dynamo's rapid mode sweeps
//! AIConfigurator's estimates into synthetic forward-pass samples
//! (`components/src/dynamo/planner/monitoring/aic_interpolation.py` @470c013:
//! `_sweep_prefill`, `_sweep_decode`, `_concurrency_sweep`) and loads them with
//! `load_benchmark_fpms`; pdsim runs the same sweep over the caller's own step model
//! ([`StepTimes`]), so the planner starts from what the simulated engines actually do.
//!
//! - **Prefill**: one sample per ISL in `range(100, L − 512, max(1, (L − 612) // 16))` for a
//!   context length `L` (512 tokens kept for the chat template, 16 the profiler's
//!   `prefill_interpolation_granularity`): one request of `isl` tokens, wall time
//!   `prefill_wall_s(isl)`.
//! - **Decode**: for each ISL in `range(100, L − 500, max(1, (L − 500) // 6))` (OSL 500, 6 the
//!   profiler's `decode_interpolation_granularity`), the concurrencies of a linear sweep from 1
//!   to `max_kv_tokens // (isl + 500)` in 6 points (`1 + round(i·step)`, Python's
//!   round-half-even), each a batch of `n` requests holding `round(n·(isl + 250))` KV tokens,
//!   wall time `decode_wall_s(n, kv)`. A context too short for the sweep gives no samples
//!   (Dynamo raises and falls back to its file loader).

use super::{EngineCaps, ForwardPass, StepTimes};

const PREFILL_CONTEXT_MARGIN: u64 = 512;
const PREFILL_GRANULARITY: u64 = 16;
const DECODE_OSL: u64 = 500;
const DECODE_GRANULARITY: u64 = 6;

/// `_sweep_prefill`.
pub fn prefill_samples(steps: &dyn StepTimes, caps: &EngineCaps) -> Vec<ForwardPass> {
    let Some(max_ctx) = caps.context_length.checked_sub(PREFILL_CONTEXT_MARGIN) else {
        return Vec::new();
    };
    if max_ctx <= 100 {
        return Vec::new();
    }
    let step = ((max_ctx - 100) / PREFILL_GRANULARITY).max(1);
    (100..max_ctx)
        .step_by(step as usize)
        .filter_map(|isl| {
            let wall_s = steps.prefill_wall_s(isl);
            (wall_s.is_finite() && wall_s > 0.0).then_some(ForwardPass {
                wall_s,
                prefill_requests: 1,
                prefill_tokens: isl,
                ..ForwardPass::default()
            })
        })
        .collect()
}

/// `_concurrency_sweep`: up to `granularity` integer concurrencies from 1 to `max`.
pub fn concurrency_sweep(max: u64, granularity: u64) -> Vec<u64> {
    if max == 0 || granularity == 0 {
        return Vec::new();
    }
    if granularity == 1 {
        return vec![max];
    }
    if max <= granularity {
        return (1..=max).collect();
    }
    let step = (max - 1) as f64 / (granularity - 1) as f64;
    let mut points: Vec<u64> = (0..granularity)
        .map(|i| (1 + (i as f64 * step).round_ties_even() as u64).max(1))
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// `_sweep_decode`.
pub fn decode_samples(steps: &dyn StepTimes, caps: &EngineCaps) -> Vec<ForwardPass> {
    let ctx = caps.context_length;
    if ctx <= DECODE_OSL + 100 {
        return Vec::new();
    }
    let isl_step = ((ctx - DECODE_OSL) / DECODE_GRANULARITY).max(1);
    let mut out = Vec::new();
    for isl in (100..ctx - DECODE_OSL).step_by(isl_step as usize) {
        let ctx_len = isl as f64 + DECODE_OSL as f64 / 2.0;
        let max_conc = caps.max_kv_tokens / (isl + DECODE_OSL);
        if max_conc == 0 {
            break;
        }
        for n in concurrency_sweep(max_conc, DECODE_GRANULARITY) {
            let kv = (n as f64 * ctx_len).round_ties_even() as u64;
            let batch = u32::try_from(n).unwrap_or(u32::MAX);
            let wall_s = steps.decode_wall_s(batch, kv);
            if wall_s.is_finite() && wall_s > 0.0 {
                out.push(ForwardPass {
                    wall_s,
                    decode_requests: batch,
                    decode_kv_tokens: kv,
                    ..ForwardPass::default()
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Linear;
    impl StepTimes for Linear {
        fn prefill_wall_s(&self, tokens: u64) -> f64 {
            0.01 + 1e-4 * tokens as f64
        }
        fn decode_wall_s(&self, batch: u32, kv_tokens: u64) -> f64 {
            0.005 + 1e-4 * f64::from(batch) + 2e-8 * kv_tokens as f64
        }
    }

    fn caps(context_length: u64, max_kv_tokens: u64) -> EngineCaps {
        EngineCaps {
            gpus: 1,
            max_num_batched_tokens: 8192,
            max_kv_tokens,
            max_num_seqs: None,
            context_length,
        }
    }

    #[test]
    fn the_concurrency_sweep_is_dynamos() {
        assert_eq!(concurrency_sweep(4, 6), vec![1, 2, 3, 4]);
        // max 100, 6 points: step 19.8 → 1, 20.8→21, 40.6→41, 60.4→60, 80.2→80, 100.
        assert_eq!(concurrency_sweep(100, 6), vec![1, 21, 41, 60, 80, 100]);
        // Half-way points round to even, as Python's round: max 10, 5 points, step 2.25:
        // i·step = 0, 2.25, 4.5 (→ 4, even), 6.75, 9 → 1, 3, 5, 8, 10.
        assert_eq!(concurrency_sweep(10, 5), vec![1, 3, 5, 8, 10]);
        assert_eq!(concurrency_sweep(7, 1), vec![7]);
    }

    #[test]
    fn the_sweeps_cover_the_context() {
        // L = 8192: max_ctx 7680, step (7580)//16 = 473: 100, 573, …, 7668 → 17 points.
        let p = prefill_samples(&Linear, &caps(8192, 1_000_000));
        assert_eq!(p.len(), 17);
        assert_eq!(p[0].prefill_tokens, 100);
        assert_eq!(p[16].prefill_tokens, 100 + 16 * 473);
        assert!((p[1].wall_s - (0.01 + 1e-4 * 573.0)).abs() < 1e-12);
        // Decode: ISLs 100, 1382, 2664, 3946, 5228, 6510 (step (8192 − 500)//6 = 1282); at
        // ISL 100 the KV holds 1,000,000 // 600 = 1666 requests → 6 concurrencies.
        let d = decode_samples(&Linear, &caps(8192, 1_000_000));
        assert_eq!(
            d.iter().filter(|f| f.decode_kv_tokens == 350).count(),
            1,
            "n = 1 at ISL 100"
        );
        assert_eq!(d.len(), 36);
        // A context too short to sweep gives nothing.
        assert!(prefill_samples(&Linear, &caps(600, 1_000_000)).is_empty());
        assert!(decode_samples(&Linear, &caps(600, 1_000_000)).is_empty());
    }
}
