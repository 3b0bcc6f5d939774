//! Fitting a calibration to measured step times: what `pdsim calibrate` runs, and what the
//! built-in calibrations were fitted with.
//!
//! # The fit
//!
//! A measured step ([`StepPoint`]: a prefill forward or a decode step of a known shape and its
//! time) is predicted by the step-time model ([`super::StepModel`]) of the model, GPU and TP it
//! was measured on. The loss is the mean squared log error `mean (ln(pred / measured))²`:
//! symmetric in over- and under-prediction and scale-free, so a 5 ms decode step and a 500 ms
//! prefill weigh the same. A pattern search in a transformed space (log of the value plus a
//! small floor, so parameters that may be 0 can reach it) moves one parameter at a time by
//! ×/÷ `e^step`, halving the step when no move improves, down to `e^1e-5`. Moves are taken only
//! when they strictly improve the loss, so a parameter the data cannot see (a prefill
//! parameter when only decode was measured) keeps its starting value — the base calibration's.
//!
//! Only [`FITTED`] parameters move: the MFU, HBM efficiencies, host costs and, from TTFT points,
//! the first-token path. A TTFT at concurrency 1 minus its forward is one constant per request,
//! so it moves `first_token_path_s` alone; the tokenizer rates (fixed and per token, the latter
//! collinear with prefill compute) stay at the base calibration's. The all-reduce
//! latency and NVLink efficiency stay at the base calibration's (measurements at one TP cannot
//! separate them from the fixed step cost), and so does the launch floor (0 under CUDA graphs).
//!
//! # Errors per regime
//!
//! [`report`] groups the points into regimes — prefill by tokens in the forward (≤ 512, ≤ 2k,
//! ≤ 8k, > 8k), decode by batch (1, 2–8, 9–32, 33–128, > 128) — and gives each regime's point
//! count, median and worst absolute error.

use super::model::{Forward, StepModel};
use crate::spec::calibration::ComputeParams;
use crate::spec::{GpuSpec, ModelSpec};

/// Which phase a measured step is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// A prefill forward.
    Prefill,
    /// A decode step.
    Decode,
    /// A request's time to first token on an idle server (bench_serving at concurrency 1):
    /// tokenization, one prefill forward of the prompt and the first token's path to the
    /// client (`ComputeParams::tokenize_s`, `first_token_path_s`).
    Ttft,
}

/// One measured step: its shape and time, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPoint {
    /// Prefill forward or decode step.
    pub phase: Phase,
    /// Prefill: new tokens in the forward (summed over its sequences). Decode: ignored.
    pub tokens: u32,
    /// Sequences in the forward (prefill: prompts; decode: the batch).
    pub seqs: u32,
    /// Context tokens summed over the sequences (prefill: cached prefix; decode: the KV each
    /// new token attends to).
    pub context_tokens: u64,
    /// Measured time, milliseconds.
    pub ms: f64,
    /// `file:line` (or `file:line:field`) of the measurement, for reports.
    pub origin: String,
}

impl StepPoint {
    /// The model's prediction for this point, milliseconds.
    pub fn predict_ms(&self, model: &StepModel) -> f64 {
        let seqs = self.seqs.max(1);
        match self.phase {
            Phase::Prefill => {
                // `seqs` prompts of equal length sharing the tokens and the prefix.
                let per = self.tokens / seqs;
                let extra = self.tokens - per * seqs;
                let prefix = u32::try_from(self.context_tokens / u64::from(seqs)).unwrap_or(0);
                let mut chunks = vec![(per, prefix); seqs as usize];
                chunks[0].0 += extra;
                model.forward_s(&Forward {
                    chunks: &chunks,
                    ..Forward::default()
                }) * 1e3
            }
            Phase::Decode => {
                model.forward_s(&Forward {
                    chunks: &[],
                    batch: seqs,
                    context_tokens: self.context_tokens,
                }) * 1e3
            }
            Phase::Ttft => {
                let p = model.params();
                let forward = model.forward_s(&Forward {
                    chunks: &[(self.tokens, 0)],
                    ..Forward::default()
                });
                (p.tokenize_s(self.tokens) + forward + p.first_token_path_s) * 1e3
            }
        }
    }

    /// The regime this point reports under (see the module docs).
    pub fn regime(&self) -> &'static str {
        match self.phase {
            Phase::Prefill => match self.tokens {
                0..=512 => "prefill ≤ 512 tokens",
                513..=2048 => "prefill 513–2048 tokens",
                2049..=8192 => "prefill 2049–8192 tokens",
                _ => "prefill > 8192 tokens",
            },
            Phase::Decode => match self.seqs {
                0..=1 => "decode batch 1",
                2..=8 => "decode batch 2–8",
                9..=32 => "decode batch 9–32",
                33..=128 => "decode batch 33–128",
                _ => "decode batch > 128",
            },
            Phase::Ttft => "TTFT, concurrency 1",
        }
    }
}

/// A parameter the fit may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    PrefillFlopsEfficiency,
    PrefillMfuHalfTokens,
    DecodeFlopsEfficiency,
    HbmEfficiency,
    KvHbmEfficiency,
    PrefillOverhead,
    PrefillPerSeqOverhead,
    DecodeOverhead,
    DecodePerSeqOverhead,
    AllreduceStepLatency,
    NvlinkEfficiency,
    FirstTokenPath,
}

/// The parameters `pdsim calibrate` fits.
pub const FITTED: &[Param] = &[
    Param::PrefillFlopsEfficiency,
    Param::PrefillMfuHalfTokens,
    Param::DecodeFlopsEfficiency,
    Param::HbmEfficiency,
    Param::KvHbmEfficiency,
    Param::PrefillOverhead,
    Param::PrefillPerSeqOverhead,
    Param::DecodeOverhead,
    Param::DecodePerSeqOverhead,
    Param::FirstTokenPath,
];

impl Param {
    fn slot(self, p: &mut ComputeParams) -> &mut f64 {
        match self {
            Param::PrefillFlopsEfficiency => &mut p.prefill_flops_efficiency,
            Param::PrefillMfuHalfTokens => &mut p.prefill_mfu_half_tokens,
            Param::DecodeFlopsEfficiency => &mut p.decode_flops_efficiency,
            Param::HbmEfficiency => &mut p.hbm_efficiency,
            Param::KvHbmEfficiency => &mut p.kv_hbm_efficiency,
            Param::PrefillOverhead => &mut p.prefill_overhead_s,
            Param::PrefillPerSeqOverhead => &mut p.prefill_per_seq_overhead_s,
            Param::DecodeOverhead => &mut p.decode_overhead_s,
            Param::DecodePerSeqOverhead => &mut p.decode_per_seq_overhead_s,
            Param::AllreduceStepLatency => &mut p.allreduce_step_latency_s,
            Param::NvlinkEfficiency => &mut p.nvlink_efficiency,
            Param::FirstTokenPath => &mut p.first_token_path_s,
        }
    }

    /// (floor added before the log, upper bound): fractions stay ≤ 1; times and token counts
    /// may reach 0 through the floor.
    fn range(self) -> (f64, f64) {
        match self {
            Param::PrefillFlopsEfficiency
            | Param::DecodeFlopsEfficiency
            | Param::HbmEfficiency
            | Param::KvHbmEfficiency
            | Param::NvlinkEfficiency => (0.0, 1.0),
            Param::PrefillMfuHalfTokens => (1.0, 1e6),
            _ => (1e-7, 1.0),
        }
    }

    fn get(self, p: &ComputeParams) -> f64 {
        let mut q = p.clone();
        *self.slot(&mut q)
    }

    /// Sets `v`, clamped into range.
    fn set(self, p: &mut ComputeParams, v: f64) {
        let (floor, hi) = self.range();
        let lo = if floor > 0.0 { 0.0 } else { 1e-4 };
        *self.slot(p) = v.clamp(lo, hi);
    }

    fn value_to_x(self, v: f64) -> f64 {
        (v + self.range().0).ln()
    }

    fn x_to_value(self, x: f64) -> f64 {
        x.exp() - self.range().0
    }
}

/// Pattern search from `start` over `free`, minimising `loss` (see the module docs). Returns
/// the best loss and parameters.
pub fn pattern_search(
    start: &ComputeParams,
    free: &[Param],
    loss: impl Fn(&ComputeParams) -> f64,
) -> (f64, ComputeParams) {
    let mut best_p = start.clone();
    let mut best = loss(&best_p);
    let mut x: Vec<f64> = free.iter().map(|q| q.value_to_x(q.get(start))).collect();
    let mut step: f64 = 1.0;
    while step > 1e-5 {
        let mut improved = false;
        for (i, q) in free.iter().enumerate() {
            for dir in [1.0, -1.0] {
                let xi = x[i] + dir * step;
                let mut cand = best_p.clone();
                q.set(&mut cand, q.x_to_value(xi));
                let l = loss(&cand);
                if l < best {
                    best = l;
                    // Keep x consistent with the clamped value.
                    x[i] = q.value_to_x(q.get(&cand));
                    best_p = cand;
                    improved = true;
                }
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
    (best, best_p)
}

/// What one measured instance is: the model, GPU, TP and KV dtype its steps were timed on.
#[derive(Clone, Debug)]
pub struct Setup {
    pub gpu: GpuSpec,
    pub model: ModelSpec,
    pub tp: u32,
    pub kv_dtype_bytes: u32,
}

impl Setup {
    /// The step model of this setup under `params`.
    pub fn step_model(&self, params: &ComputeParams) -> StepModel {
        StepModel::new(
            &self.gpu,
            &self.model,
            self.tp,
            self.kv_dtype_bytes,
            params.clone(),
        )
    }
}

/// Mean squared log error of `points` under `params`.
pub fn loss(setup: &Setup, params: &ComputeParams, points: &[StepPoint]) -> f64 {
    if points.is_empty() {
        return 0.0;
    }
    let model = setup.step_model(params);
    points
        .iter()
        .map(|pt| (pt.predict_ms(&model) / pt.ms).ln().powi(2))
        .sum::<f64>()
        / points.len() as f64
}

/// Fits [`FITTED`] to `points` measured on `setup`, starting from `base`: several starts
/// (the base and the base with its HBM efficiencies moved to either side of the
/// compute/memory ridge) and the best kept.
pub fn fit(setup: &Setup, base: &ComputeParams, points: &[StepPoint]) -> ComputeParams {
    let starts = [1.0, 0.6, 1.4].map(|k: f64| {
        let mut p = base.clone();
        p.hbm_efficiency = (p.hbm_efficiency * k).min(1.0);
        p.kv_hbm_efficiency = (p.kv_hbm_efficiency * k).min(1.0);
        p
    });
    starts
        .iter()
        .map(|s| pattern_search(s, FITTED, |p| loss(setup, p, points)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("three starts")
        .1
}

/// One regime's errors.
#[derive(Clone, Debug, PartialEq)]
pub struct RegimeError {
    pub regime: &'static str,
    pub points: usize,
    /// Median absolute relative error, a fraction.
    pub median: f64,
    /// Worst absolute relative error, a fraction.
    pub worst: f64,
    /// The worst point's origin.
    pub worst_at: String,
}

/// Errors per regime of `points` under `params`, in regime order (prefill by length, then
/// decode by batch).
pub fn report(setup: &Setup, params: &ComputeParams, points: &[StepPoint]) -> Vec<RegimeError> {
    let model = setup.step_model(params);
    type Errors<'a> = Vec<(f64, &'a str)>;
    let mut by: std::collections::BTreeMap<(Phase, u32, &'static str), Errors<'_>> =
        Default::default();
    for pt in points {
        let e = (pt.predict_ms(&model) / pt.ms - 1.0).abs();
        // Sort key: phase, then the regime's lower bound.
        let bound = match pt.phase {
            Phase::Prefill => match pt.tokens {
                0..=512 => 0,
                513..=2048 => 1,
                2049..=8192 => 2,
                _ => 3,
            },
            Phase::Decode => match pt.seqs {
                0..=1 => 0,
                2..=8 => 1,
                9..=32 => 2,
                33..=128 => 3,
                _ => 4,
            },
            Phase::Ttft => 0,
        };
        by.entry((pt.phase, bound, pt.regime()))
            .or_default()
            .push((e, &pt.origin));
    }
    by.into_iter()
        .map(|((_, _, regime), mut errs)| {
            errs.sort_by(|a, b| a.0.total_cmp(&b.0));
            let n = errs.len();
            let median = if n % 2 == 1 {
                errs[n / 2].0
            } else {
                (errs[n / 2 - 1].0 + errs[n / 2].0) / 2.0
            };
            let (worst, at) = errs[n - 1];
            RegimeError {
                regime,
                points: n,
                median,
                worst,
                worst_at: at.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::calibration::SGLANG_2025;
    use crate::spec::{gpu_preset, preset};

    fn setup(model: &str, gpu: &str, tp: u32) -> Setup {
        Setup {
            gpu: gpu_preset(gpu).unwrap(),
            model: preset(model).unwrap(),
            tp,
            kv_dtype_bytes: 2,
        }
    }

    /// A grid of bench_one_batch-like shapes: prefill of 1–8 prompts of 128–8192 tokens,
    /// decode at batch 1–256 and context 256–8192 per sequence.
    fn shapes() -> Vec<StepPoint> {
        let mut pts = Vec::new();
        for (seqs, len) in [
            (1, 128),
            (1, 512),
            (1, 2048),
            (1, 8192),
            (4, 1024),
            (8, 2048),
        ] {
            pts.push(StepPoint {
                phase: Phase::Prefill,
                tokens: seqs * len,
                seqs,
                context_tokens: 0,
                ms: 1.0,
                origin: format!("prefill {seqs}x{len}"),
            });
        }
        for b in [1u32, 4, 16, 64, 256] {
            for ctx in [256u64, 2048, 8192] {
                pts.push(StepPoint {
                    phase: Phase::Decode,
                    tokens: 0,
                    seqs: b,
                    context_tokens: u64::from(b) * ctx,
                    ms: 1.0,
                    origin: format!("decode b{b} ctx{ctx}"),
                });
            }
        }
        pts
    }

    /// Measurements made by pdsim itself under `truth`.
    fn measured(s: &Setup, truth: &ComputeParams) -> Vec<StepPoint> {
        let m = s.step_model(truth);
        shapes()
            .into_iter()
            .map(|mut p| {
                p.ms = p.predict_ms(&m);
                p
            })
            .collect()
    }

    #[test]
    fn the_fit_recovers_known_parameters_within_2_percent() {
        // A "cluster" whose parameters differ from the default by 10–40 %.
        let truth = ComputeParams {
            prefill_flops_efficiency: 0.45,
            prefill_mfu_half_tokens: 600.0,
            decode_flops_efficiency: 0.40,
            hbm_efficiency: 0.55,
            kv_hbm_efficiency: 0.60,
            prefill_overhead_s: 3.0e-3,
            prefill_per_seq_overhead_s: 1.0e-4,
            decode_overhead_s: 5.0e-4,
            decode_per_seq_overhead_s: 2.0e-5,
            ..SGLANG_2025
        };
        for (model, gpu, tp) in [
            ("llama-3.1-8b", "h100-sxm", 1),
            ("llama-3.1-70b", "h200", 4),
        ] {
            let s = setup(model, gpu, tp);
            let pts = measured(&s, &truth);
            let got = fit(&s, &SGLANG_2025, &pts);
            let model_got = s.step_model(&got);
            for pt in &pts {
                let e = pt.predict_ms(&model_got) / pt.ms - 1.0;
                assert!(e.abs() < 0.02, "{model} {}: {:+.2}%", pt.origin, 100.0 * e);
            }
            for r in report(&s, &got, &pts) {
                assert!(r.worst < 0.02, "{r:?}");
            }
        }
    }

    #[test]
    fn unseen_parameters_keep_the_base_values() {
        let s = setup("llama-3.1-8b", "h100-sxm", 1);
        let decode_only: Vec<StepPoint> = measured(&s, &SGLANG_2025)
            .into_iter()
            .filter(|p| p.phase == Phase::Decode)
            .collect();
        let got = fit(&s, &SGLANG_2025, &decode_only);
        assert_eq!(got.prefill_overhead_s, SGLANG_2025.prefill_overhead_s);
        assert_eq!(
            got.prefill_mfu_half_tokens,
            SGLANG_2025.prefill_mfu_half_tokens
        );
    }

    #[test]
    fn regimes_are_reported_in_order() {
        let s = setup("llama-3.1-8b", "h100-sxm", 1);
        let pts = measured(&s, &SGLANG_2025);
        let r = report(&s, &SGLANG_2025, &pts);
        let names: Vec<&str> = r.iter().map(|r| r.regime).collect();
        assert_eq!(
            names,
            [
                "prefill ≤ 512 tokens",
                "prefill 513–2048 tokens",
                "prefill 2049–8192 tokens",
                "prefill > 8192 tokens",
                "decode batch 1",
                "decode batch 2–8",
                "decode batch 9–32",
                "decode batch 33–128",
                "decode batch > 128",
            ]
        );
        assert!(r.iter().all(|r| r.worst < 1e-9));
    }
}
