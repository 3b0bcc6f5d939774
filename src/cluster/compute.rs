//! Step-time model: how long one forward pass takes on one instance.
//!
//! A roofline per step: the step is bound either by FLOPs (tensor-core peak × an efficiency) or
//! by HBM bytes (weights ÷ TP plus KV read, × an efficiency), plus a fixed per-step overhead that
//! grows with TP (kernel launches, all-reduce over NVLink). `domain/numbers.md` explains why the
//! overhead term is needed: measured decode steps of a 70B model at TP4–TP8 are dominated by it.
//! All parameters live in [`ComputeParams`]; a later calibration fits them to
//! `calibration/perf_model.csv`.

use crate::engine::{Nanos, ns_from_secs_ceil};
use crate::spec::{GpuSpec, ModelSpec};

/// Efficiency factors and overheads of the roofline. Defaults are first estimates from the
/// achieved-efficiency figures in `domain/numbers.md` (Splitwise measurements: ~47 % of BF16 peak
/// in prefill and ~56 % of HBM bandwidth in decode at TP2).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ComputeParams {
    /// Fraction of peak tensor FLOP/s a prefill forward achieves.
    pub prefill_flops_efficiency: f64,
    /// Fraction of peak tensor FLOP/s a decode step achieves.
    pub decode_flops_efficiency: f64,
    /// Fraction of peak HBM bandwidth a step achieves.
    pub hbm_efficiency: f64,
    /// Fixed cost of any step at TP 1, seconds (launch and scheduling overhead).
    pub step_overhead_s: f64,
    /// Extra fixed cost per doubling of TP, seconds (all-reduce latency per layer group).
    pub tp_overhead_per_doubling_s: f64,
}

impl Default for ComputeParams {
    fn default() -> Self {
        Self {
            prefill_flops_efficiency: 0.47,
            decode_flops_efficiency: 0.35,
            hbm_efficiency: 0.56,
            step_overhead_s: 0.002,
            tp_overhead_per_doubling_s: 0.001,
        }
    }
}

/// Precomputed step-time model for one (GPU, model, TP, KV dtype).
#[derive(Clone, Debug)]
pub struct StepModel {
    /// Linear-layer FLOPs per token (2 × active params), whole model.
    flops_per_token: f64,
    /// Attention FLOPs per (query token × context token), whole model.
    attn_flops_per_pair: f64,
    /// Weight bytes one GPU reads per step.
    weight_bytes_per_gpu: f64,
    /// KV bytes per context token one GPU reads (its rank's share).
    kv_bytes_per_token_gpu: f64,
    /// Peak FLOP/s of one GPU.
    peak_flops: f64,
    /// Peak HBM bytes/s of one GPU.
    hbm_bytes_per_s: f64,
    tp: f64,
    overhead_s: f64,
    params: ComputeParams,
}

impl StepModel {
    /// Builds the model for `tp` GPUs serving `model` with KV elements of `kv_dtype_bytes`.
    pub fn new(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        params: ComputeParams,
    ) -> Self {
        // FP8 checkpoints run their linear layers on FP8 tensor cores where the GPU has them.
        let peak_tflops = match (model.weight_bytes, gpu.fp8_tflops) {
            (1, Some(fp8)) => fp8,
            _ => gpu.bf16_tflops,
        };
        let tp_f = f64::from(tp.max(1));
        Self {
            flops_per_token: 2.0 * model.active_params() + model.mamba_scan_flops_per_token(),
            attn_flops_per_pair: model.attention_flops_per_token_pair(),
            weight_bytes_per_gpu: model.weight_bytes_total() / tp_f,
            kv_bytes_per_token_gpu: model.kv_bytes_per_token_rank(tp, kv_dtype_bytes) as f64,
            peak_flops: peak_tflops * 1e12,
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            tp: tp_f,
            overhead_s: params.step_overhead_s + params.tp_overhead_per_doubling_s * tp_f.log2(),
            params,
        }
    }

    /// One prefill forward over `chunks`, each `(new_tokens, prefix_tokens)`: the new tokens
    /// attend causally to the prefix and to each other.
    pub fn prefill_ns(&self, chunks: &[(u32, u32)]) -> Nanos {
        let mut tokens = 0.0;
        let mut pairs = 0.0;
        let mut kv_read = 0.0;
        for &(n, prefix) in chunks {
            let (n, p) = (f64::from(n), f64::from(prefix));
            tokens += n;
            // Causal: token i of the chunk sees prefix + i + 1 tokens.
            pairs += n * p + n * (n + 1.0) / 2.0;
            kv_read += p + n;
        }
        let flops = self.flops_per_token * tokens + self.attn_flops_per_pair * pairs;
        let t_compute = flops / (self.tp * self.peak_flops * self.params.prefill_flops_efficiency);
        let bytes = self.weight_bytes_per_gpu + self.kv_bytes_per_token_gpu * kv_read;
        let t_memory = bytes / (self.hbm_bytes_per_s * self.params.hbm_efficiency);
        ns_from_secs_ceil(t_compute.max(t_memory) + self.overhead_s)
    }

    /// One decode step of `batch` requests whose contexts sum to `context_tokens`.
    pub fn decode_ns(&self, batch: u32, context_tokens: u64) -> Nanos {
        let b = f64::from(batch);
        let ctx = context_tokens as f64;
        let flops = self.flops_per_token * b + self.attn_flops_per_pair * ctx;
        let t_compute = flops / (self.tp * self.peak_flops * self.params.decode_flops_efficiency);
        let bytes = self.weight_bytes_per_gpu + self.kv_bytes_per_token_gpu * ctx;
        let t_memory = bytes / (self.hbm_bytes_per_s * self.params.hbm_efficiency);
        ns_from_secs_ceil(t_compute.max(t_memory) + self.overhead_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{gpu_preset, preset};

    fn m(model: &str, tp: u32) -> StepModel {
        StepModel::new(
            &gpu_preset("h100-sxm").unwrap(),
            &preset(model).unwrap(),
            tp,
            2,
            ComputeParams::default(),
        )
    }

    #[test]
    fn prefill_grows_with_tokens_and_context() {
        let s = m("llama-3.1-8b", 1);
        let a = s.prefill_ns(&[(1024, 0)]);
        let b = s.prefill_ns(&[(2048, 0)]);
        let c = s.prefill_ns(&[(1024, 8192)]);
        assert!(b > a && c > a, "{a} {b} {c}");
        // Compute-bound: doubling tokens roughly doubles the non-overhead time.
        let over = ns_from_secs_ceil(0.002);
        let ratio = (b - over) as f64 / (a - over) as f64;
        assert!((1.9..2.2).contains(&ratio), "{ratio}");
    }

    #[test]
    fn decode_is_memory_bound_at_small_batch_and_grows_with_batch_and_context() {
        let s = m("llama-3.1-8b", 1);
        let one = s.decode_ns(1, 1000);
        // ~16 GB of weights at 3.35 TB/s × 0.56 ≈ 8.6 ms, plus 2 ms overhead.
        assert!((9_500_000..11_500_000).contains(&one), "{one}");
        assert!(s.decode_ns(64, 64_000) > one);
        assert!(s.decode_ns(64, 640_000) > s.decode_ns(64, 64_000));
    }

    #[test]
    fn more_tp_is_faster_for_a_big_model_but_pays_overhead() {
        let t2 = m("llama-3.1-70b", 2).decode_ns(8, 8000);
        let t8 = m("llama-3.1-70b", 8).decode_ns(8, 8000);
        assert!(t8 < t2);
        let tiny2 = m("llama-3.1-8b", 2).decode_ns(1, 10);
        let tiny8 = m("llama-3.1-8b", 8).decode_ns(1, 10);
        assert!(tiny8 > ns_from_secs_ceil(0.002 + 0.003) && tiny8 < tiny2);
    }
}
