//! Step-time model: how long one forward pass takes on one instance of `tp` GPUs.
//!
//! # The model
//!
//! A roofline per step plus the costs a roofline does not see:
//!
//! ```text
//! gpu  = max(FLOPs / (tp × peak × flops_eff), bytes_per_gpu / (HBM × hbm_eff))
//!      + blocks × (2(tp−1) × allreduce_step_latency
//!                  + 2(tp−1)/tp × tokens × hidden × act_bytes / (NVLink one-way × nvlink_eff))
//! step = host + max(gpu, blocks × launch_per_block)
//! host = prefill_overhead                                  (prefill)
//!      = decode_overhead + batch × decode_per_seq_overhead (decode)
//! ```
//!
//! Why two kinds of host cost: scheduling, input preparation and sampling run before or after
//! the GPU work and add to it; kernel launches run ahead of the GPU and only show when the GPU
//! work is shorter than they are. The data show both: Llama2-70B decode on H100 takes 37 ms at
//! TP2 (weights ÷ HBM: bandwidth-bound) but 29–30 ms at both TP4 and TP8, although the weights
//! per GPU halve between them (launch-bound: 160 blocks × 0.175 ms ≈ 28 ms).
//!
//! * **FLOPs**: `2 × active params` per token through the body (dense FFN, attention
//!   projections, the *active* experts of a MoE, Mamba/GDN projections) plus the recurrent scan
//!   (linear in length); the LM head once per sequence (prefill computes logits for a chunk's
//!   last token only); causal attention's quadratic term (`n·p + n(n+1)/2` query × context pairs
//!   for a chunk of `n` new tokens after `p` prefix tokens). MLA prefill runs the non-absorbed
//!   form (per-head K/V decompressed from the latent, as sglang does for prefill), decode the
//!   absorbed form against the latent.
//! * **Bytes per GPU**: the weights one step streams ÷ TP (dense weights always; of a MoE only
//!   the experts the step's tokens route to, in expectation under uniform routing; not the input
//!   embedding, which is a gather), the KV the step reads (one rank's share, heads replicated
//!   when TP exceeds them), and hybrid models' recurrent state (read and written per sequence).
//! * **FP8**: a checkpoint served in FP8 (`weight_bytes == 1`) runs its GEMMs at the FP8 peak
//!   where the GPU has one.
//! * **All-reduce**: Megatron-style TP ends every block (attention, FFN, MoE, mixer) in an
//!   all-reduce of the step's hidden states over NVLink; there is none at TP 1.
//!
//! # Calibration
//!
//! [`calibrated_params`] returns parameters fitted (`tests::fit_to_perf_model`, a pattern
//! search minimising the mean absolute log error) to `calibration/perf_model.csv`: vLLM 2023
//! step times of Llama2-70B (TP2/4/8) and BLOOM-176B (TP8) on A100-80GB and H100-80GB SXM
//! (Splitwise, ISCA'24). Its `prompt_time` is one forward over all `batch_size × prompt_size`
//! prompt tokens: the data say so (H100 TP8: 8 prompts of 512 take 377.6 ms, one prompt of
//! 4096 takes 378.6 ms; 16 × 512 and 1 × 8192 agree within 6 %), which is vLLM 2023's
//! scheduler batching every waiting prompt into one forward. Its `token_time` is the mean of
//! the `token_size − 1` decode steps (`e2e = prompt_time + (token_size − 1) × token_time`),
//! evaluated here at the mean context `prompt_size + token_size / 2` per sequence — exact
//! while the step is linear in context, which it is (memory- and overhead-bound throughout).
//! `tests::calibration_error_is_within_15_percent` checks the median error per GPU.
//!
//! Known misfits (printed by that test): prompts of ≤ 256 tokens at TP4–8 (measured ≈ 50 ms
//! whatever the length, predicted 30–35 ms), and H100 TP8 prefill, which is super-linear
//! between 2k and 4k tokens where the model is linear (±25 %). The TP2 batch-64 rows are not
//! what they say (see `tests::kv_starved`) and are off by 10×; the median is robust to them.
//!
//! The overheads are those of vLLM 2023 (Python scheduling and sampling, no CUDA graphs, NCCL
//! all-reduce without overlap); a modern engine is faster there. Users with their own
//! measurements should give them as a profile ([`crate::compute::profile`]) instead.

use crate::engine::{Nanos, ns_from_secs_ceil};
use crate::spec::{GpuSpec, KvAttention, ModelSpec};

/// The parameters of the step-time model. Efficiencies are fractions (0, 1] of the GPU's
/// peak; times are seconds. See the module docs for where each enters.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ComputeParams {
    /// Fraction of peak tensor FLOP/s a prefill forward achieves.
    pub prefill_flops_efficiency: f64,
    /// Fraction of peak tensor FLOP/s a decode step achieves.
    pub decode_flops_efficiency: f64,
    /// Fraction of peak HBM bandwidth a step achieves.
    pub hbm_efficiency: f64,
    /// Fixed cost of one prefill forward, seconds (scheduling, launches, sampling).
    pub prefill_overhead_s: f64,
    /// Fixed cost of one decode step, seconds.
    pub decode_overhead_s: f64,
    /// Cost per running sequence in one decode step, seconds (per-sequence scheduling,
    /// block tables and sampling on the host).
    pub decode_per_seq_overhead_s: f64,
    /// Latency of one ring step of an all-reduce, seconds; an all-reduce over `tp` GPUs takes
    /// `2(tp − 1)` steps, and a forward runs one per block.
    pub allreduce_step_latency_s: f64,
    /// Fraction of the one-way NVLink bandwidth (half the spec's both-directions figure) an
    /// all-reduce achieves.
    pub nvlink_efficiency: f64,
    /// Host time to launch one block's kernels, seconds. Launches run ahead of the GPU, so a
    /// forward takes at least `blocks × launch_per_block_s`, and GPU work shorter than that
    /// hides behind it.
    pub launch_per_block_s: f64,
}

/// A100-80GB SXM fit. Source: `calibration/perf_model.csv`, rows `a100-80gb` (76 points:
/// Llama2-70B TP2/4/8, BLOOM-176B TP8), fitted by `tests::fit_to_perf_model`; median absolute
/// error 5.4 % (prompt) and 1.4 % (token). `decode_flops_efficiency` is not identifiable (no
/// measured decode step is compute-bound at batch ≤ 64) and is tied to the prefill one.
const A100_FIT: ComputeParams = ComputeParams {
    prefill_flops_efficiency: 0.690,
    decode_flops_efficiency: 0.690,
    hbm_efficiency: 0.650,
    prefill_overhead_s: 9.844e-3,
    decode_overhead_s: 5.635e-3,
    decode_per_seq_overhead_s: 3.013e-4,
    allreduce_step_latency_s: 4.701e-6,
    nvlink_efficiency: 0.217,
    launch_per_block_s: 2.430e-4,
};

/// H100-80GB SXM fit. Source: `calibration/perf_model.csv`, rows `h100-80gb` (76 points;
/// `h100-80gb-pcap`, power-capped, excluded), fitted by `tests::fit_to_perf_model`; median
/// absolute error 8.4 % (prompt) and 1.6 % (token). 57 % of BF16 peak in prefill and 61 % of
/// HBM bandwidth agree with `docs/numbers.md` (~47 % and ~56 % at TP2, which include the
/// overheads). `decode_flops_efficiency` is tied to the prefill one, as for the A100.
const H100_FIT: ComputeParams = ComputeParams {
    prefill_flops_efficiency: 0.566,
    decode_flops_efficiency: 0.566,
    hbm_efficiency: 0.614,
    prefill_overhead_s: 6.654e-3,
    decode_overhead_s: 1.507e-3,
    decode_per_seq_overhead_s: 2.896e-4,
    allreduce_step_latency_s: 6.119e-6,
    nvlink_efficiency: 0.254,
    launch_per_block_s: 1.752e-4,
};

/// The calibrated parameters for `gpu`, by preset name.
///
/// * `a100-sxm`: the A100-80GB fit; `h100-sxm`: the H100-80GB fit.
/// * `h200`, `b200` and any other GPU: the H100 fit, by this rule — efficiencies are
///   fractions of the GPU's *own* peaks, so an H200's faster HBM or a B200's faster tensor
///   cores, HBM and NVLink already speed the roofline terms up; the overheads are host- and
///   latency-bound (scheduling, launches, NVLink hop latency) and do not scale with the GPU.
///   H200 is the H100 die with more and faster HBM, so the rule is close there; for B200 it
///   is an extrapolation no measurement here checks.
pub fn calibrated_params(gpu: &GpuSpec) -> ComputeParams {
    match gpu.name.as_str() {
        "a100-sxm" => A100_FIT,
        _ => H100_FIT,
    }
}

impl Default for ComputeParams {
    /// The H100 fit (`calibrated_params` of `h100-sxm`).
    fn default() -> Self {
        H100_FIT
    }
}

/// Precomputed step-time model for one (GPU, model, TP, KV dtype).
#[derive(Clone, Debug)]
pub struct StepModel {
    /// Body FLOPs per token, whole model: `2 × (active params − LM head)` plus the recurrent
    /// scan.
    body_flops_per_token: f64,
    /// LM-head FLOPs per sequence that emits logits.
    lm_head_flops: f64,
    /// Attention FLOPs per (query token × context token) pair in prefill, whole model.
    prefill_pair_flops: f64,
    /// Attention FLOPs per pair in decode, whole model.
    decode_pair_flops: f64,
    /// Extra prefill FLOPs per prefix token (MLA: decompressing the cached latent into
    /// per-head K and V); 0 for MHA.
    prefix_flops_per_token: f64,
    /// Weight bytes one GPU streams every step whatever the tokens route to.
    dense_weight_bytes_gpu: f64,
    /// Weight bytes one GPU holds of one routed expert index, summed over the MoE layers.
    expert_bytes_gpu: f64,
    /// Routed experts per MoE layer (0 without MoE).
    experts: f64,
    /// Experts each token activates.
    experts_active: f64,
    /// KV bytes per context token one GPU reads (its rank's share).
    kv_bytes_per_token_gpu: f64,
    /// Recurrent (conv + SSM) state bytes per sequence on one GPU.
    state_bytes_per_seq_gpu: f64,
    /// Peak FLOP/s of one GPU for this model's GEMMs.
    peak_flops: f64,
    /// Peak HBM bytes/s of one GPU.
    hbm_bytes_per_s: f64,
    /// GPUs of the instance.
    tp: f64,
    /// All-reduces per forward (one per block).
    allreduces: f64,
    /// Hidden-state bytes per token in one all-reduce.
    allreduce_bytes_per_token: f64,
    /// One-way NVLink bytes/s of one GPU.
    nvlink_one_way_bytes_per_s: f64,
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
        let h = f64::from(model.hidden_size);
        let vocab_h = f64::from(model.vocab_size) * h;
        let wb = f64::from(model.weight_bytes);

        // MoE: routed experts are streamed only when some token of the step routes to them.
        let (experts, active, one_expert_params) = match &model.moe {
            Some(m) => (
                f64::from(m.experts),
                f64::from(m.active),
                // Gated expert: gate, up and down matrices.
                3.0 * h * f64::from(m.expert_intermediate) * f64::from(model.moe_layers),
            ),
            None => (0.0, 0.0, 0.0),
        };
        // The input embedding is a gather of a few rows, not a streamed matrix; tied
        // embeddings are streamed anyway as the LM head.
        let input_embedding = if model.tie_word_embeddings {
            0.0
        } else {
            vocab_h
        };
        let dense_params = model.total_params() - input_embedding - experts * one_expert_params;

        let (prefill_pair_flops, prefix_flops_per_token) = match model.attention {
            KvAttention::Mha { .. } => (model.attention_flops_per_token_pair(), 0.0),
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                qk_nope_head_dim,
                v_head_dim,
                ..
            } => {
                // Non-absorbed MLA: QKᵀ over nope+rope dims and AV over v dims, per head.
                let layers = f64::from(model.kv_layers());
                let q = f64::from(model.q_heads);
                let pair = 2.0 * q * f64::from(qk_nope_head_dim + qk_rope_head_dim + v_head_dim);
                let decompress =
                    2.0 * f64::from(kv_lora_rank) * q * f64::from(qk_nope_head_dim + v_head_dim);
                (layers * pair, layers * decompress)
            }
        };

        let state_bytes_per_seq = match &model.mamba {
            Some(m) => {
                let layers = model.mamba_layers.len() as f64;
                let ssm = f64::from(m.num_heads)
                    * f64::from(m.head_dim)
                    * f64::from(m.state_size)
                    * f64::from(m.ssm_dtype_bytes);
                let conv_dim = f64::from(m.intermediate_size)
                    + 2.0 * f64::from(m.n_groups) * f64::from(m.state_size);
                let conv = conv_dim
                    * f64::from(m.conv_kernel.saturating_sub(1))
                    * f64::from(m.conv_dtype_bytes);
                layers * (ssm + conv)
            }
            None => 0.0,
        };

        let allreduces = f64::from(model.kv_layers())
            + model.mamba_layers.len() as f64
            + f64::from(model.dense_ffn_layers)
            + f64::from(model.moe_layers);

        Self {
            body_flops_per_token: 2.0 * (model.active_params() - vocab_h)
                + model.mamba_scan_flops_per_token(),
            lm_head_flops: 2.0 * vocab_h,
            prefill_pair_flops,
            decode_pair_flops: model.attention_flops_per_token_pair(),
            prefix_flops_per_token,
            dense_weight_bytes_gpu: dense_params * wb / tp_f,
            expert_bytes_gpu: one_expert_params * wb / tp_f,
            experts,
            experts_active: active,
            kv_bytes_per_token_gpu: model.kv_bytes_per_token_rank(tp, kv_dtype_bytes) as f64,
            state_bytes_per_seq_gpu: state_bytes_per_seq / tp_f,
            peak_flops: peak_tflops * 1e12,
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            tp: tp_f,
            allreduces,
            allreduce_bytes_per_token: h * f64::from(model.activation_bytes),
            nvlink_one_way_bytes_per_s: gpu.nvlink_bytes_per_s / 2.0,
            params,
        }
    }

    /// The parameters this model was built with.
    pub fn params(&self) -> &ComputeParams {
        &self.params
    }

    /// Weight bytes one GPU streams in a step over `tokens` tokens: the dense weights, and the
    /// expected number of distinct routed experts `E·(1 − (1 − k/E)^tokens)` under uniform
    /// routing (k of E per token).
    fn weight_bytes_gpu(&self, tokens: f64) -> f64 {
        if self.experts == 0.0 {
            return self.dense_weight_bytes_gpu;
        }
        let untouched = (1.0 - self.experts_active / self.experts).powf(tokens);
        self.dense_weight_bytes_gpu + self.expert_bytes_gpu * self.experts * (1.0 - untouched)
    }

    /// Seconds of all-reduce in one forward over `tokens` tokens: per block, `2(tp − 1)` ring
    /// steps of latency and `2(tp − 1)/tp` of the hidden states over one-way NVLink.
    fn allreduce_s(&self, tokens: f64) -> f64 {
        if self.tp <= 1.0 {
            return 0.0;
        }
        let steps = 2.0 * (self.tp - 1.0);
        let bytes = steps / self.tp * tokens * self.allreduce_bytes_per_token;
        let bw = self.nvlink_one_way_bytes_per_s * self.params.nvlink_efficiency;
        self.allreduces * (steps * self.params.allreduce_step_latency_s + bytes / bw)
    }

    /// One prefill forward over `chunks`, each `(new_tokens, prefix_tokens)`: the new tokens
    /// attend causally to the prefix (already in KV cache) and to each other. Nanoseconds,
    /// rounded up; 0 when there are no new tokens (no forward runs).
    pub fn prefill_ns(&self, chunks: &[(u32, u32)]) -> Nanos {
        let (mut tokens, mut pairs, mut prefix, mut seqs) = (0.0, 0.0, 0.0, 0.0);
        for &(n, p) in chunks.iter().filter(|c| c.0 > 0) {
            let (n, p) = (f64::from(n), f64::from(p));
            tokens += n;
            // Causal: token i of the chunk sees p + i + 1 tokens.
            pairs += n * p + n * (n + 1.0) / 2.0;
            prefix += p;
            seqs += 1.0;
        }
        if tokens == 0.0 {
            return 0;
        }
        let p = &self.params;
        let flops = self.body_flops_per_token * tokens
            + self.lm_head_flops * seqs
            + self.prefill_pair_flops * pairs
            + self.prefix_flops_per_token * prefix;
        let t_compute = flops / (self.tp * self.peak_flops * p.prefill_flops_efficiency);
        let bytes = self.weight_bytes_gpu(tokens)
            + self.kv_bytes_per_token_gpu * (prefix + tokens)
            + 2.0 * self.state_bytes_per_seq_gpu * seqs;
        let t_memory = bytes / (self.hbm_bytes_per_s * p.hbm_efficiency);
        let gpu = t_compute.max(t_memory) + self.allreduce_s(tokens);
        ns_from_secs_ceil(p.prefill_overhead_s + gpu.max(self.allreduces * p.launch_per_block_s))
    }

    /// One decode step of `batch` sequences whose contexts sum to `context_tokens`: one new
    /// token per sequence. Nanoseconds, rounded up; 0 for an empty batch.
    pub fn decode_ns(&self, batch: u32, context_tokens: u64) -> Nanos {
        if batch == 0 {
            return 0;
        }
        let p = &self.params;
        let b = f64::from(batch);
        let ctx = context_tokens as f64;
        let flops =
            (self.body_flops_per_token + self.lm_head_flops) * b + self.decode_pair_flops * ctx;
        let t_compute = flops / (self.tp * self.peak_flops * p.decode_flops_efficiency);
        let bytes = self.weight_bytes_gpu(b)
            + self.kv_bytes_per_token_gpu * ctx
            + 2.0 * self.state_bytes_per_seq_gpu * b;
        let t_memory = bytes / (self.hbm_bytes_per_s * p.hbm_efficiency);
        let host = p.decode_overhead_s + p.decode_per_seq_overhead_s * b;
        let gpu = t_compute.max(t_memory) + self.allreduce_s(b);
        ns_from_secs_ceil(host + gpu.max(self.allreduces * p.launch_per_block_s))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::spec::{gpu_preset, preset};

    const PERF_MODEL_CSV: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/calibration/perf_model.csv"
    );

    /// One measured configuration of `perf_model.csv`: the mean of its repeats.
    #[derive(Clone, Debug)]
    struct Point {
        model: String,
        hardware: String,
        tp: u32,
        prompt_size: u32,
        batch_size: u32,
        token_size: u32,
        prompt_ms: f64,
        token_ms: f64,
    }

    #[derive(serde::Deserialize)]
    struct Row {
        model: String,
        hardware: String,
        prompt_size: u32,
        batch_size: u32,
        token_size: u32,
        prompt_time: f64,
        token_time: f64,
        tensor_parallel: u32,
    }

    /// Configurations in (model, hardware, tp, prompt, batch, tokens) order, repeats averaged.
    fn load_points() -> Vec<Point> {
        let mut reader = csv::Reader::from_path(PERF_MODEL_CSV).expect("perf_model.csv");
        type Key = (String, String, u32, u32, u32, u32);
        let mut sums: BTreeMap<Key, (f64, f64, f64)> = BTreeMap::new();
        for row in reader.deserialize() {
            let r: Row = row.expect("a perf_model.csv row");
            let key = (
                r.model,
                r.hardware,
                r.tensor_parallel,
                r.prompt_size,
                r.batch_size,
                r.token_size,
            );
            let e = sums.entry(key).or_default();
            *e = (e.0 + r.prompt_time, e.1 + r.token_time, e.2 + 1.0);
        }
        sums.into_iter()
            .map(|((model, hardware, tp, p, b, t), (pt, tt, n))| Point {
                model,
                hardware,
                tp,
                prompt_size: p,
                batch_size: b,
                token_size: t,
                prompt_ms: pt / n,
                token_ms: tt / n,
            })
            .collect()
    }

    /// The pdsim GPU preset a `perf_model.csv` hardware name was measured on (Azure ND A100 v4
    /// and ND H100 v5 are SXM parts).
    fn gpu_of(hardware: &str) -> GpuSpec {
        let name = if hardware.starts_with("a100") {
            "a100-sxm"
        } else {
            "h100-sxm"
        };
        gpu_preset(name).unwrap()
    }

    /// Predicted (prompt_time, token_time) in ms for one point: the prompt phase is one
    /// forward over `batch` prompts; the token time is a decode step at the mean context.
    fn predict(params: &ComputeParams, pt: &Point) -> (f64, f64) {
        let model = preset(&pt.model).unwrap();
        let s = StepModel::new(&gpu_of(&pt.hardware), &model, pt.tp, 2, params.clone());
        let prompt = s.prefill_ns(&vec![(pt.prompt_size, 0); pt.batch_size as usize]);
        let ctx_per_seq = u64::from(pt.prompt_size) + u64::from(pt.token_size) / 2;
        let token = s.decode_ns(pt.batch_size, u64::from(pt.batch_size) * ctx_per_seq);
        (prompt as f64 / 1e6, token as f64 / 1e6)
    }

    /// Absolute percentage errors of prompt and token times, each with its point.
    fn errors<'a>(params: &ComputeParams, points: &'a [Point]) -> Vec<(f64, f64, &'a Point)> {
        points
            .iter()
            .map(|pt| {
                let (p, t) = predict(params, pt);
                let ape = |pred: f64, meas: f64| (pred - meas).abs() / meas;
                (ape(p, pt.prompt_ms), ape(t, pt.token_ms), pt)
            })
            .collect()
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    /// vLLM did not run the TP2 batch-64 configurations as asked: 64 sequences' KV does not fit
    /// beside 138 GB of Llama2-70B weights on two 80 GB GPUs, and the recorded prompt time is
    /// below batch 32's (796 vs 6,607 ms on A100). They stay in the error figures; the report
    /// also names the worst point outside them.
    fn kv_starved(pt: &Point) -> bool {
        pt.tp == 2 && pt.batch_size == 64
    }

    /// Prints the median APE of prompt and token times for one hardware and its worst points
    /// (overall and outside [`kv_starved`]); returns (median prompt APE, median token APE).
    fn report(params: &ComputeParams, hardware: &str) -> (f64, f64) {
        let points: Vec<Point> = load_points()
            .into_iter()
            .filter(|p| p.hardware == hardware)
            .collect();
        let errs = errors(params, &points);
        let mp = median(errs.iter().map(|e| e.0).collect());
        let mt = median(errs.iter().map(|e| e.1).collect());
        println!(
            "{hardware} ({} points): median APE prompt {:.1} %, token {:.1} %",
            points.len(),
            100.0 * mp,
            100.0 * mt
        );
        for (phase, prompt) in [("prompt", true), ("token", false)] {
            let ape = |e: &(f64, f64, &Point)| if prompt { e.0 } else { e.1 };
            for (label, skip_starved) in [("worst", false), ("worst outside TP2 batch 64", true)] {
                let (e, pt) = errs
                    .iter()
                    .filter(|e| !(skip_starved && kv_starved(e.2)))
                    .map(|e| (ape(e), e.2))
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .unwrap();
                let (pp, pk) = predict(params, pt);
                let (pred, meas) = if prompt {
                    (pp, pt.prompt_ms)
                } else {
                    (pk, pt.token_ms)
                };
                println!(
                    "  {label} {phase}: {} tp{} prompt {} batch {} tokens {}: \
                     predicted {pred:.1} ms, measured {meas:.1} ms ({:.1} %)",
                    pt.model,
                    pt.tp,
                    pt.prompt_size,
                    pt.batch_size,
                    pt.token_size,
                    100.0 * e
                );
            }
        }
        (mp, mt)
    }

    fn h100(model: &str, tp: u32) -> StepModel {
        let gpu = gpu_preset("h100-sxm").unwrap();
        StepModel::new(
            &gpu,
            &preset(model).unwrap(),
            tp,
            2,
            calibrated_params(&gpu),
        )
    }

    #[test]
    fn prefill_grows_with_tokens_and_context_and_is_linear_when_compute_bound() {
        let s = h100("llama-3.1-8b", 1);
        let a = s.prefill_ns(&[(4096, 0)]);
        let b = s.prefill_ns(&[(8192, 0)]);
        let c = s.prefill_ns(&[(4096, 8192)]);
        assert!(b > a && c > a, "{a} {b} {c}");
        // Compute-bound: doubling tokens doubles the time net of the fixed overhead, a little
        // more for the quadratic attention term.
        let over = ns_from_secs_ceil(s.params().prefill_overhead_s);
        let ratio = (b - over) as f64 / (a - over) as f64;
        assert!((2.0..2.3).contains(&ratio), "{ratio}");
        // Two chunks in one forward cost less than two forwards (one overhead, one weight pass).
        let both = s.prefill_ns(&[(512, 0), (512, 0)]);
        assert!(both < 2 * s.prefill_ns(&[(512, 0)]));
        assert_eq!(s.prefill_ns(&[]), 0);
        assert_eq!(s.prefill_ns(&[(0, 100)]), 0);
    }

    #[test]
    fn decode_grows_with_batch_and_context() {
        let s = h100("llama-3.1-70b", 4);
        let one = s.decode_ns(1, 1000);
        assert!(s.decode_ns(64, 64_000) > one);
        assert!(s.decode_ns(64, 6_400_000) > s.decode_ns(64, 64_000));
        assert_eq!(s.decode_ns(0, 0), 0);
        // Memory-bound at batch 1 once the launch floor is exceeded: the weights of a 70B model
        // at TP2 (~70 GB per GPU) take 70e9 / (3.35e12 × hbm_efficiency) ≈ 34 ms.
        let s2 = h100("llama-3.1-70b", 2);
        let floor = s2.weight_bytes_gpu(1.0) / (3.35e12 * s2.params().hbm_efficiency);
        assert!(s2.decode_ns(1, 1000) as f64 > floor * 1e9, "{floor}");
    }

    #[test]
    fn tp_splits_work_but_adds_all_reduce() {
        let t2 = h100("llama-3.1-70b", 2).prefill_ns(&[(8192, 0)]);
        let t8 = h100("llama-3.1-70b", 8).prefill_ns(&[(8192, 0)]);
        assert!(t8 < t2);
        // No all-reduce at TP 1; it grows with TP and with tokens.
        let m = |tp| h100("llama-3.1-8b", tp);
        assert_eq!(m(1).allreduce_s(4096.0), 0.0);
        assert!(m(4).allreduce_s(4096.0) > m(2).allreduce_s(4096.0));
        assert!(m(2).allreduce_s(4096.0) > m(2).allreduce_s(1.0));
        // 64 blocks (32 attention + 32 FFN), 2 ring steps at TP 2.
        let p = m(2).params().clone();
        let latency_only = 64.0 * 2.0 * p.allreduce_step_latency_s;
        assert!((m(2).allreduce_s(0.0) - latency_only).abs() < 1e-12);
    }

    #[test]
    fn moe_streams_only_the_routed_experts() {
        let s = h100("deepseek-v3", 8);
        let total = preset("deepseek-v3").unwrap().weight_bytes_total() / 8.0;
        let one = s.weight_bytes_gpu(1.0);
        let many = s.weight_bytes_gpu(1e6);
        // One token touches 8 of 256 experts per layer: ~37B active of 671B (less the
        // embedding gather).
        assert!(one < 0.1 * total, "{one} of {total}");
        assert!((many / (total - 129_280.0 * 7168.0 / 8.0) - 1.0).abs() < 1e-6);
        assert!(s.decode_ns(64, 64_000) > s.decode_ns(1, 1000));
    }

    #[test]
    fn fp8_checkpoints_use_the_fp8_peak_where_there_is_one() {
        let ds = preset("deepseek-v3").unwrap();
        let p = ComputeParams::default();
        let on = |g: &str| StepModel::new(&gpu_preset(g).unwrap(), &ds, 8, 2, p.clone()).peak_flops;
        assert_eq!(on("h100-sxm"), 1979e12);
        assert_eq!(on("a100-sxm"), 312e12);
        assert_eq!(h100("llama-3.1-8b", 1).peak_flops, 989e12);
    }

    #[test]
    fn mla_prefill_runs_non_absorbed_and_pays_prefix_decompression() {
        let s = h100("deepseek-v3", 8);
        // Per pair: absorbed 2·128·(2·512+64) vs non-absorbed 2·128·(128+64+128), × 61 layers.
        assert_eq!(s.decode_pair_flops, 61.0 * 2.0 * 128.0 * 1088.0);
        assert_eq!(s.prefill_pair_flops, 61.0 * 2.0 * 128.0 * 320.0);
        assert!(s.prefix_flops_per_token > 0.0);
        assert_eq!(h100("llama-3.1-8b", 1).prefix_flops_per_token, 0.0);
    }

    #[test]
    fn hybrid_models_carry_state_and_scale_nearly_linearly() {
        let s = h100("nemotron-h-8b", 1);
        assert!(s.state_bytes_per_seq_gpu > 0.0);
        assert!(s.body_flops_per_token > 2.0 * 7e9);
        // 4 attention layers of 52: the quadratic term is small, so 4× the tokens cost < 4.5×.
        let a = s.prefill_ns(&[(8192, 0)]) as f64;
        let b = s.prefill_ns(&[(32768, 0)]) as f64;
        assert!(b / a < 4.5, "{}", b / a);
        let dense = h100("llama-3.1-8b", 1);
        let d = dense.prefill_ns(&[(32768, 0)]) as f64 / dense.prefill_ns(&[(8192, 0)]) as f64;
        assert!(d > b / a, "{d}");
    }

    #[test]
    fn calibrated_params_follow_the_documented_rule() {
        let p = |g: &str| calibrated_params(&gpu_preset(g).unwrap());
        assert_eq!(p("a100-sxm"), A100_FIT);
        assert_eq!(p("h100-sxm"), H100_FIT);
        assert_eq!(p("h200"), H100_FIT);
        assert_eq!(p("b200"), H100_FIT);
        assert_eq!(ComputeParams::default(), H100_FIT);
        // The same efficiencies on faster hardware give faster steps, down to the host launch
        // floor (70B at TP2: 160 blocks × launch_per_block_s ≈ 28 ms), which does not scale.
        let step = |g: &str| {
            let gpu = gpu_preset(g).unwrap();
            let s = StepModel::new(&gpu, &preset("llama-3.1-70b").unwrap(), 2, 2, p(g));
            (s.decode_ns(1, 1000), s.prefill_ns(&[(8192, 0)]))
        };
        let (a100, h100, h200, b200) = (
            step("a100-sxm"),
            step("h100-sxm"),
            step("h200"),
            step("b200"),
        );
        assert!(
            a100.0 > h100.0 && h100.0 > h200.0 && h200.0 >= b200.0,
            "{a100:?} {h100:?} {h200:?} {b200:?}"
        );
        assert!(a100.1 > h100.1 && h100.1 == h200.1 && h200.1 > b200.1);
    }

    #[test]
    fn calibration_error_is_within_15_percent() {
        for (hardware, gpu) in [("a100-80gb", "a100-sxm"), ("h100-80gb", "h100-sxm")] {
            let params = calibrated_params(&gpu_preset(gpu).unwrap());
            let (mp, mt) = report(&params, hardware);
            assert!(mp <= 0.15, "{hardware}: median prompt APE {mp}");
            assert!(mt <= 0.15, "{hardware}: median token APE {mt}");
        }
        // Power-capped H100: not fitted, reported against the H100 fit.
        report(
            &calibrated_params(&gpu_preset("h100-sxm").unwrap()),
            "h100-80gb-pcap",
        );
    }

    /// The fitted parameters, in a fixed order, as a vector (log space in the search).
    fn to_vec(p: &ComputeParams) -> Vec<f64> {
        vec![
            p.prefill_flops_efficiency,
            p.hbm_efficiency,
            p.prefill_overhead_s,
            p.decode_overhead_s,
            p.decode_per_seq_overhead_s,
            p.allreduce_step_latency_s,
            p.nvlink_efficiency,
            p.launch_per_block_s,
        ]
    }

    fn from_vec(v: &[f64]) -> ComputeParams {
        ComputeParams {
            prefill_flops_efficiency: v[0].min(1.0),
            // Not identifiable from this data (no decode step is compute-bound at batch ≤ 64):
            // tied to the prefill efficiency.
            decode_flops_efficiency: v[0].min(1.0),
            hbm_efficiency: v[1].min(1.0),
            prefill_overhead_s: v[2],
            decode_overhead_s: v[3],
            decode_per_seq_overhead_s: v[4],
            allreduce_step_latency_s: v[5],
            nvlink_efficiency: v[6].min(1.0),
            launch_per_block_s: v[7],
        }
    }

    /// Mean absolute log error of prompt and token times: symmetric in over/under-prediction
    /// and robust to the few rows vLLM did not run as configured (TP2, batch 64: the KV cache
    /// could not hold 64 sequences next to 138 GB of weights, and both times drop).
    fn loss(params: &ComputeParams, points: &[Point]) -> f64 {
        let mut sum = 0.0;
        for pt in points {
            let (p, t) = predict(params, pt);
            sum += (p / pt.prompt_ms).ln().abs() + (t / pt.token_ms).ln().abs();
        }
        sum / (2.0 * points.len() as f64)
    }

    /// Pattern search in log space from `start`: each coordinate is tried ×/÷ `e^step`; the
    /// step halves when no coordinate improves. Returns (loss, parameters).
    fn pattern_search(start: &ComputeParams, points: &[Point]) -> (f64, ComputeParams) {
        let eval = |x: &[f64]| {
            let v: Vec<f64> = x.iter().map(|l| l.exp()).collect();
            loss(&from_vec(&v), points)
        };
        let mut x: Vec<f64> = to_vec(start).iter().map(|v| v.ln()).collect();
        let mut best = eval(&x);
        let mut step = 0.5;
        while step > 1e-4 {
            let mut improved = false;
            for i in 0..x.len() {
                for dir in [1.0, -1.0] {
                    let mut y = x.clone();
                    y[i] += dir * step;
                    let l = eval(&y);
                    if l < best {
                        (best, x, improved) = (l, y, true);
                    }
                }
            }
            if !improved {
                step /= 2.0;
            }
        }
        (
            best,
            from_vec(&x.iter().map(|l| l.exp()).collect::<Vec<_>>()),
        )
    }

    /// Fits the parameters per GPU and prints them as Rust constants. The loss surface has
    /// shallow local minima along the launch-floor / HBM-efficiency ridge (both explain flat
    /// decode times), so the search starts from several launch costs and keeps the best.
    /// Run: `cargo test --release fit_to_perf_model -- --ignored --nocapture` (< 1 s).
    #[test]
    #[ignore]
    fn fit_to_perf_model() {
        let all = load_points();
        for hardware in ["a100-80gb", "h100-80gb"] {
            let points: Vec<Point> = all
                .iter()
                .filter(|p| p.hardware == hardware)
                .cloned()
                .collect();
            let (best, p) = [5e-5, 1e-4, 2e-4, 3e-4, 4e-4]
                .into_iter()
                .map(|launch| {
                    let start = ComputeParams {
                        prefill_flops_efficiency: 0.5,
                        decode_flops_efficiency: 0.5,
                        hbm_efficiency: 0.7,
                        prefill_overhead_s: 0.02,
                        decode_overhead_s: 0.01,
                        decode_per_seq_overhead_s: 3e-4,
                        allreduce_step_latency_s: 1e-5,
                        nvlink_efficiency: 0.1,
                        launch_per_block_s: launch,
                    };
                    pattern_search(&start, &points)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap();
            println!("{hardware}: mean |ln error| {best:.4}");
            println!(
                "    prefill_flops_efficiency: {:.3},",
                p.prefill_flops_efficiency
            );
            println!(
                "    decode_flops_efficiency: {:.3},",
                p.decode_flops_efficiency
            );
            println!("    hbm_efficiency: {:.3},", p.hbm_efficiency);
            println!("    prefill_overhead_s: {:.3e},", p.prefill_overhead_s);
            println!("    decode_overhead_s: {:.3e},", p.decode_overhead_s);
            println!(
                "    decode_per_seq_overhead_s: {:.3e},",
                p.decode_per_seq_overhead_s
            );
            println!(
                "    allreduce_step_latency_s: {:.3e},",
                p.allreduce_step_latency_s
            );
            println!("    nvlink_efficiency: {:.3},", p.nvlink_efficiency);
            println!("    launch_per_block_s: {:.3e},", p.launch_per_block_s);
            report(&p, hardware);
        }
    }
}
