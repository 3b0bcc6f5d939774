//! Step-time model: how long one forward pass takes on one instance of `tp` GPUs.
//!
//! # The model
//!
//! A roofline per forward plus the costs a roofline does not see. One forward may carry
//! prefill chunks (`T_p` new tokens), decode sequences (`b`, one token each), or both (a
//! colocated server's mixed batch); `T = T_p + b`:
//!
//! ```text
//! compute = FLOPs / (tp × peak × eff)        eff = prefill_flops_efficiency × T/(T + half)
//!                                                 (any prefill tokens), decode_flops_efficiency
//! memory  = weight bytes per GPU / (HBM × hbm_efficiency)
//!         + (KV + state) bytes per GPU / (HBM × kv_hbm_efficiency)
//! gpu     = max(compute, memory) + blocks × allreduce(T × hidden × act_bytes)
//! step    = host + max(gpu, blocks × launch_per_block)
//! host    = prefill_overhead + seqs × prefill_per_seq   (a forward with prefill tokens)
//!         + decode_overhead + b × decode_per_seq          (decode only: decode_overhead alone)
//! ```
//!
//! * **FLOPs**: `2 × active params` per token through the body (dense FFN, attention
//!   projections, the *active* experts of a MoE, Mamba/GDN projections) plus the recurrent
//!   scan; the LM head once per sequence (prefill computes logits for a chunk's last token
//!   only); causal attention's quadratic term (`n·p + n(n+1)/2` query × context pairs for a
//!   chunk of `n` new tokens after `p` prefix tokens; a decode token attends to its whole
//!   context). MLA prefill runs the non-absorbed form (per-head K/V decompressed from the
//!   latent, as sglang does for prefill), decode the absorbed form against the latent.
//! * **Prefill MFU grows with the forward's tokens**: a GEMM of `T` rows fills the GPU's
//!   tiles poorly when `T` is small; `prefill_mfu_half_tokens` is where it reaches half the
//!   ceiling. 0 keeps the 2023 fit's flat efficiency.
//! * **Bytes per GPU**: the weights one step streams ÷ TP (dense weights always; of a MoE only
//!   the experts the step's tokens route to, in expectation under uniform routing — a decode
//!   batch of `b` tokens reads `E·(1 − (1 − k/E)^b)` experts per layer; not the input
//!   embedding, which is a gather), the KV the step reads (one rank's share, heads replicated
//!   when TP exceeds them), and hybrid models' recurrent state (read and written per sequence).
//!   The KV read has its own efficiency: paged attention gathers pages and streams worse than
//!   a GEMM reads weights.
//! * **FP8, FP4**: a checkpoint served in FP8 (`WeightDtype::Fp8`) reads half the weight bytes
//!   and runs its GEMMs at the FP8 peak where the GPU has one (H100, H200, B200; not A100); an
//!   NVFP4 one (4.5 bits a weight with its scales) reads 9/32 of them and runs at the FP4 peak
//!   (Blackwell only); routed experts may be stored apart from the rest
//!   ([`crate::spec::WeightFormat`]); an FP8 KV cache (`kv_cache_dtype = fp8_*`) halves the KV
//!   bytes read.
//! * **All-reduce**: Megatron-style TP ends every block (attention, FFN, MoE, mixer) in an
//!   all-reduce of the step's hidden states (`T × hidden × activation bytes`); none at TP 1.
//!   Within a node: `2(tp − 1)/tp` of the message over one-way NVLink × `nvlink_efficiency`,
//!   plus latency steps — `2(tp − 1)` for a ring (the 2023 fit), `2⌈log2 tp⌉` for sglang's
//!   custom all-reduce (`allreduce_log_steps`). An instance spanning nodes
//!   ([`Interconnect`]) runs it hierarchically, as NCCL does: a ring within each node over
//!   NVLink, then a ring across the `n` nodes over the NICs on `1/gpus_per_node` of the
//!   message, each inter-node step paying the network latency.
//! * **Host costs and launches**: scheduling, input preparation and sampling add to the GPU
//!   work; kernel launches run ahead of the GPU and only show when the GPU work is shorter
//!   than they are (a floor). Under CUDA graphs (`sglang-2025`) there is no floor.
//!
//! # Calibrations
//!
//! The parameters are data ([`crate::spec::calibration`]): `sglang-2025` (default, fitted to
//! `calibration/modern-engines.md`: see [`crate::compute::modern`]), `vllm-2023` (fitted to
//! the Splitwise `perf_model.csv`: see `compute::vllm2023`), or a user's fit from
//! `pdsim calibrate` ([`crate::compute::fit`]). Users with measured step times may also give
//! them as a profile ([`crate::compute::profile`]) instead of any model.

use crate::engine::{Nanos, ns_from_secs_ceil};
pub use crate::spec::calibration::ComputeParams;
use crate::spec::{GpuSpec, KvAttention, ModelSpec};

pub mod dcp;
mod kernel;
mod plain;
mod speculative;
pub use plain::PlainStep;

/// How the GPUs of an instance are connected when it spans nodes: the all-reduce crosses the
/// fabric between nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Interconnect {
    /// GPUs per node (NVLink domain).
    pub gpus_per_node: u32,
    /// NIC bandwidth available to one GPU, bytes per second each way.
    pub nic_bytes_per_s_per_gpu: f64,
    /// Latency of one inter-node step, seconds.
    pub network_latency_s: f64,
}

/// The parameters of a named calibration for `gpu`: `sglang-2025` unless `name` says
/// otherwise (see [`crate::spec::calibration::named`]).
pub fn calibrated_params(gpu: &GpuSpec) -> ComputeParams {
    crate::spec::calibration::named(crate::spec::calibration::DEFAULT_CALIBRATION, gpu)
        .expect("the default calibration exists")
}

/// One forward's shape: prefill chunks and decode sequences together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Forward<'a> {
    /// Prefill chunks, each `(new_tokens, prefix_tokens)`.
    pub chunks: &'a [(u32, u32)],
    /// Decode sequences (one new token each).
    pub batch: u32,
    /// Context tokens summed over the decode sequences.
    pub context_tokens: u64,
}

/// The terms of a decode-only forward that depend on the batch size alone (see
/// [`StepModel::decode_terms`]); seconds, FLOPs and bytes as their names say.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DecodeTerms {
    /// Body and LM-head FLOPs of the batch's tokens.
    flops0: f64,
    /// Attention FLOPs per context token (the model's; 0 under measured kernels, whose
    /// context term is all in `kv_per_token`).
    pair_flops: f64,
    /// KV bytes read per context token (the model's), or, under measured kernels, seconds of
    /// attention per context token with `kv_denom = 1`.
    kv_per_token: f64,
    /// `tp × peak × decode efficiency`, FLOP/s.
    compute_denom: f64,
    /// Recurrent state bytes read and written per GPU.
    state_bytes: f64,
    /// Seconds to stream the weights the batch touches.
    t_weights: f64,
    /// `HBM × kv_hbm_efficiency`, bytes/s.
    kv_denom: f64,
    /// All-reduce seconds.
    allreduce: f64,
    /// Routed-expert seconds (0 without DP attention / EP, and where `pipelined`).
    moe: f64,
    /// The batch runs DeepEP's two-micro-batch decode pipeline: its step depends on the
    /// context inside the MoE layers, and [`StepModel::decode_s_with`] prices it through
    /// [`StepModel::forward_s`] (never on the plain path).
    pipelined: bool,
    /// The model fetches offloaded weights every forward: priced through
    /// [`StepModel::forward_s`] like `pipelined` (never on the plain path).
    offloaded: bool,
    /// The batch size (for `pipelined`).
    batch: u32,
    /// Host seconds: decode overhead and per-sequence cost.
    host: f64,
    /// The launch floor, seconds.
    floor: f64,
    /// An empty batch (no forward runs).
    empty: bool,
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
    /// The time of a prefill attention FLOP over a GEMM FLOP's: `peak_flops` over the peak
    /// the attention runs at ([`ComputeParams::attention_at_kv_precision`]); 1 when both
    /// run at one peak. Applied to the prefill's pair and prefix FLOPs in
    /// [`StepModel::forward_s`].
    prefill_attention_scale: f64,
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
    /// Across nodes: (nodes the instance spans, GPUs per node, NIC bytes/s per GPU, network
    /// latency s); `None` within one node.
    span: Option<(f64, f64, f64, f64)>,
    /// Routed experts under DP attention / expert parallelism ([`crate::compute::moe`]);
    /// `None` when the experts are part of the TP-sharded body above.
    moe: Option<crate::compute::moe::ExpertCost>,
    /// Share of the attention/dense body in the layers two-batch overlap splits (the MoE
    /// layers of `kv_layers`; sglang runs the first `first_k_dense_replace` on the whole
    /// batch); 0 without a [`crate::compute::moe`] model.
    tbo_share: f64,
    /// The forward composed from measured kernel tables, when the calibration has them
    /// ([`ComputeParams::kernels`]); `None`: the roofline above.
    kernels: Option<std::sync::Arc<crate::compute::kernels::compose::KernelStep>>,
    /// Decoder layers (each launches its kernels in an eager forward).
    layers: f64,
    /// Of them, layers with a mixture-of-experts block (they launch more kernels:
    /// [`ComputeParams::eager_launch_per_moe_layer_s`]).
    moe_layers: f64,
    /// Largest decode batch replayed from a CUDA graph (`--cuda-graph-max-bs`); larger
    /// batches run eagerly and pay [`ComputeParams::eager_launch_per_layer_s`].
    graph_max_bs: u32,
    /// Whether sglang's overlap scheduler runs (`--disable-overlap-schedule` unset, the
    /// default): the decode scheduling's host work hides behind the GPU's; off, it is added
    /// to every forward that carries a decode batch ([`StepModel::decode_sched_s`]).
    overlap: bool,
    /// Whether this is a DP-attention rank (`dp_size > 1` with `enable_dp_attention`): its
    /// decode scheduling carries [`ComputeParams::dp_attention_cpu_s`].
    dp_attention: bool,
    /// Recurrent-scan FLOPs per token on one GPU (hybrid models), priced analytically under
    /// measured kernels.
    scan_flops_per_token_gpu: f64,
    /// Weights kept in host memory and fetched every forward ([`crate::compute::offload`]);
    /// `None` when every weight stays on the GPU.
    offload: Option<crate::compute::offload::Offload>,
    /// Decode context parallelism's cross-rank merge ([`dcp::DcpMerge`]); `None` without
    /// `--dcp-size` (every DCP term is then skipped or adds +0.0, bit for bit).
    dcp: Option<dcp::DcpMerge>,
    params: ComputeParams,
}

/// The dense peak, TFLOP/s, of GEMMs over weights stored as `d` on `gpu`; the BF16 peak where
/// the GPU has no tensor cores for `d` (an NVFP4 model on a GPU without FP4, which
/// `scenario/` refuses before any step model is built). FP8 GEMMs on FP8 tensor cores run at
/// `fp8_ratio` of the FLOP efficiency BF16 ones do (`ComputeParams::fp8_gemm_ratio`), so
/// their peak is taken that much lower: the efficiencies are the BF16 GEMMs'.
fn peak_tflops(gpu: &GpuSpec, d: crate::spec::WeightDtype, fp8_ratio: f64) -> f64 {
    match (d, gpu.fp8_tflops) {
        (crate::spec::WeightDtype::Fp8, Some(fp8)) => fp8 * fp8_ratio,
        _ => gpu.gemm_tflops(d).unwrap_or(gpu.bf16_tflops),
    }
}

/// The peak, TFLOP/s, a prefill's attention runs at under
/// [`ComputeParams::attention_at_kv_precision`]: FP8's, at `fp8_ratio` as the FP8 GEMMs, for a
/// one-byte KV cache on a GPU with FP8 tensor cores (an FP4 KV cache is built at FP8's width,
/// [`StepModel::with_fp4_kv`], and only Blackwell GPUs, all of them tabled, run one);
/// otherwise BF16's.
fn attention_peak_tflops(gpu: &GpuSpec, kv_dtype_bytes: u32, fp8_ratio: f64) -> f64 {
    match (kv_dtype_bytes, gpu.fp8_tflops) {
        (1, Some(fp8)) => fp8 * fp8_ratio,
        _ => gpu.bf16_tflops,
    }
}

/// The peak, TFLOP/s, the body's GEMMs run at: the one peak of a uniformly stored model, or,
/// with routed experts stored apart, `1 / (s_d / peak_d + s_e / peak_e)` over the shares of
/// a token's body FLOPs in the dense part and in its active experts.
fn body_peak_tflops(gpu: &GpuSpec, model: &ModelSpec, fp8_ratio: f64) -> f64 {
    let w = &model.weights;
    let dense = peak_tflops(gpu, w.dense, fp8_ratio);
    if w.is_uniform() {
        return dense;
    }
    let experts = match &model.moe {
        Some(m) => {
            3.0 * f64::from(model.hidden_size)
                * f64::from(m.expert_intermediate)
                * f64::from(model.moe_layers)
                * f64::from(m.active)
        }
        None => return dense,
    };
    let body = model.active_params() - f64::from(model.vocab_size) * f64::from(model.hidden_size);
    let share = (experts / body.max(1.0)).clamp(0.0, 1.0);
    1.0 / ((1.0 - share) / dense + share / peak_tflops(gpu, w.experts, fp8_ratio))
}

impl StepModel {
    /// Builds the model for `tp` GPUs of one node serving `model` with KV elements of
    /// `kv_dtype_bytes`.
    pub fn new(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        params: ComputeParams,
    ) -> Self {
        Self::with_interconnect(gpu, model, tp, kv_dtype_bytes, params, None)
    }

    /// As [`StepModel::with_interconnect`] for one DP rank of an instance with DP attention
    /// or expert parallelism: `attn_tp` GPUs run the attention, dense and shared-expert part
    /// (`tp` of [`StepModel::with_interconnect`]), and the routed experts are priced by
    /// `moe` over the whole instance ([`crate::compute::moe`]).
    pub fn with_parallel(
        gpu: &GpuSpec,
        model: &ModelSpec,
        attn_tp: u32,
        kv_dtype_bytes: u32,
        params: ComputeParams,
        interconnect: Option<&Interconnect>,
        moe: Option<crate::compute::moe::ExpertCost>,
    ) -> Self {
        let mut s =
            Self::with_interconnect(gpu, model, attn_tp, kv_dtype_bytes, params, interconnect);
        if let Some(m) = moe {
            // The routed experts leave the TP body: their FLOPs and weights are the expert
            // model's, and so are the MoE blocks' all-reduces where a dispatch and combine
            // replace them (under TP attention without DeepEP the all-reduce stays: it is
            // the combine, `ExpertCost::combines_by_allreduce`).
            let one = s.expert_bytes_gpu * s.tp / model.weights.experts.bytes();
            s.body_flops_per_token -= 2.0 * s.experts_active * one;
            s.experts = 0.0;
            s.expert_bytes_gpu = 0.0;
            if !m.combines_by_allreduce() {
                s.allreduces -= f64::from(model.moe_layers);
            }
            s.tbo_share = f64::from(model.moe_layers) / f64::from(model.kv_layers().max(1));
            let m = match &s.params.kernels {
                Some(k) => m.with_tables(k.tables(), model),
                None => m,
            };
            let a2a_fallback = m.a2a_fallback();
            let experts_fallback = m.experts_fallback().map(str::to_string);
            s.moe = Some(m);
            // The routed experts are the expert model's: recompose the forward without them.
            s.attach_kernels(gpu, model, attn_tp, kv_dtype_bytes, None);
            if let Some(k) = s.kernels.as_mut() {
                for why in [experts_fallback, a2a_fallback].into_iter().flatten() {
                    std::sync::Arc::make_mut(k).fallbacks.push(why);
                }
            }
        }
        s
    }

    /// The peak FLOP/s this model's GEMMs run at on `gpu` (FP8 where the checkpoint and the
    /// GPU have it, FP4 for NVFP4 weights: [`GpuSpec::gemm_tflops`]). With routed experts
    /// stored apart from the rest ([`crate::spec::WeightFormat`]), the peak of the whole
    /// body: the harmonic mean of the two peaks weighted by each part's FLOPs per token. FP8
    /// peaks are taken at `params.fp8_gemm_ratio` ([`ComputeParams::fp8_gemm_ratio`]).
    pub fn peak_flops_for(gpu: &GpuSpec, model: &ModelSpec, params: &ComputeParams) -> f64 {
        body_peak_tflops(gpu, model, params.fp8_gemm_ratio) * 1e12
    }

    /// The peak FLOP/s of the routed experts' GEMMs alone (what the expert-parallel cost
    /// model, [`crate::compute::moe`], prices them at), as [`StepModel::peak_flops_for`].
    pub fn expert_peak_flops_for(gpu: &GpuSpec, model: &ModelSpec, params: &ComputeParams) -> f64 {
        peak_tflops(gpu, model.weights.experts, params.fp8_gemm_ratio) * 1e12
    }

    /// As [`StepModel::new`]; an instance of more GPUs than `interconnect.gpus_per_node`
    /// spans nodes and its all-reduce crosses the fabric.
    pub fn with_interconnect(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        params: ComputeParams,
        interconnect: Option<&Interconnect>,
    ) -> Self {
        // FP8 checkpoints run their linear layers on FP8 tensor cores where the GPU has them
        // (NVFP4 ones on FP4 tensor cores).
        let peak_tflops = body_peak_tflops(gpu, model, params.fp8_gemm_ratio);
        let tp_f = f64::from(tp.max(1));
        let h = f64::from(model.hidden_size);
        let vocab_h = f64::from(model.vocab_size) * h;
        let wb = model.weights.dense.bytes();
        let we = model.weights.experts.bytes();

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

        let mut s = Self {
            body_flops_per_token: 2.0 * (model.active_params() - vocab_h)
                + model.mamba_scan_flops_per_token(),
            lm_head_flops: 2.0 * vocab_h,
            prefill_pair_flops,
            decode_pair_flops: model.attention_flops_per_token_pair(),
            prefix_flops_per_token,
            dense_weight_bytes_gpu: dense_params * wb / tp_f,
            expert_bytes_gpu: one_expert_params * we / tp_f,
            experts,
            experts_active: active,
            kv_bytes_per_token_gpu: model.kv_bytes_per_token_rank(tp, kv_dtype_bytes) as f64,
            state_bytes_per_seq_gpu: state_bytes_per_seq / tp_f,
            peak_flops: peak_tflops * 1e12,
            prefill_attention_scale: if params.attention_at_kv_precision {
                peak_tflops / attention_peak_tflops(gpu, kv_dtype_bytes, params.fp8_gemm_ratio)
            } else {
                1.0
            },
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            tp: tp_f,
            allreduces,
            allreduce_bytes_per_token: h * f64::from(model.activation_bytes),
            nvlink_one_way_bytes_per_s: gpu.nvlink_bytes_per_s / 2.0,
            span: interconnect
                .filter(|i| i.gpus_per_node > 0 && tp > i.gpus_per_node)
                .map(|i| {
                    let per_node = f64::from(i.gpus_per_node);
                    (
                        (tp_f / per_node).ceil(),
                        per_node,
                        i.nic_bytes_per_s_per_gpu,
                        i.network_latency_s,
                    )
                }),
            moe: None,
            tbo_share: 0.0,
            kernels: None,
            layers: f64::from(model.num_layers),
            moe_layers: f64::from(model.moe_layers.min(model.num_layers)),
            graph_max_bs: crate::spec::server::cuda_graph_max_bs(gpu, tp),
            overlap: true,
            dp_attention: false,
            scan_flops_per_token_gpu: model.mamba_scan_flops_per_token() / tp_f,
            offload: None,
            dcp: None,
            params,
        };
        s.attach_kernels(gpu, model, tp, kv_dtype_bytes, Some(tp));
        s
    }

    /// Composes the forward from the calibration's kernel tables, if it has them:
    /// `experts_tp` GPUs shard the routed experts when they are part of this forward (`None`
    /// when [`crate::compute::moe`] prices them). Panics with the seed-free message of a
    /// table the GPU lacks; a scenario is checked for that before it runs
    /// ([`StepModel::kernels_ok`]).
    fn attach_kernels(
        &mut self,
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        experts_tp: Option<u32>,
    ) {
        let Some(k) = &self.params.kernels else {
            return;
        };
        let setup = Self::kernel_setup(self, gpu, model, tp, kv_dtype_bytes, experts_tp, k);
        let step = crate::compute::kernels::compose::KernelStep::new(&setup)
            .unwrap_or_else(|e| panic!("kernel tables for {}: {e}", model.name));
        self.kernels = Some(std::sync::Arc::new(step));
    }

    /// The composition's inputs for this model.
    fn kernel_setup<'a>(
        &self,
        gpu: &GpuSpec,
        model: &'a ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        experts_tp: Option<u32>,
        k: &'a crate::spec::kernels::Kernels,
    ) -> crate::compute::kernels::compose::Setup<'a> {
        crate::compute::kernels::compose::Setup {
            tables: k.tables(),
            model,
            attn_tp: tp,
            experts_tp,
            dual_stream: crate::compute::kernels::compose::dual_stream_shared_experts(
                model,
                self.moe.as_ref().map_or(1, |m| m.ep_size()),
                self.moe.as_ref().is_some_and(|m| m.deepep()),
            ),
            kv_dtype_bytes,
            allreduces: self.allreduces,
            span: self.span.map(|(nodes, per_node, nic, latency)| {
                crate::compute::kernels::compose::Span {
                    nodes,
                    per_node,
                    nic_bytes_per_s: nic,
                    step_latency_s: self.params.allreduce_step_latency_s + latency,
                    efficiency: self.params.nvlink_efficiency,
                }
            }),
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            peak_flops: self.peak_flops,
            analytic: (
                self.params.prefill_flops_efficiency,
                self.params.decode_flops_efficiency,
                self.params.kv_hbm_efficiency,
            ),
        }
    }

    /// Whether the calibration's kernel tables can price `model` at attention TP `tp`:
    /// `Err` names what they lack (a GPU's AIConfigurator data without MLA tables, say).
    pub fn kernels_ok(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        kv_dtype_bytes: u32,
        params: &ComputeParams,
    ) -> Result<(), String> {
        let Some(k) = &params.kernels else {
            return Ok(());
        };
        let plain = ComputeParams {
            kernels: None,
            ..params.clone()
        };
        let s = Self::new(gpu, model, tp, kv_dtype_bytes, plain);
        let setup = s.kernel_setup(gpu, model, tp, kv_dtype_bytes, Some(tp), k);
        crate::compute::kernels::compose::KernelStep::new(&setup).map(|_| ())
    }

    /// All-reduces per forward (one per block whose output the TP group sums).
    #[cfg(test)]
    pub(crate) fn allreduce_count(&self) -> f64 {
        self.allreduces
    }

    /// Sets the largest decode batch sglang replays from a CUDA graph (`--cuda-graph-max-bs`).
    pub fn set_graph_max_bs(&mut self, bs: u32) {
        self.graph_max_bs = bs;
    }

    /// Runs the server without sglang's overlap scheduler (`--disable-overlap-schedule`):
    /// `Scheduler.event_loop_normal` prepares the next batch and processes this one's result
    /// after the forward instead of `event_loop_overlap` doing it beside the next one, so the
    /// decode scheduling that [`StepModel::decode_cpu_floor_s`] hides becomes part of the
    /// exposed host time. Kernel launches stay asynchronous either way.
    pub fn set_overlap_schedule(&mut self, on: bool) {
        self.overlap = on;
    }

    /// Marks the model as one DP-attention rank's, whose every decode iteration synchronises
    /// with the other ranks ([`ComputeParams::dp_attention_cpu_s`]).
    pub fn set_dp_attention(&mut self, on: bool) {
        self.dp_attention = on;
    }

    /// What the kernel tables could not price for this model, each with how pdsim prices it
    /// instead (empty under the roofline or when the tables cover every op).
    pub fn kernel_fallbacks(&self) -> &[String] {
        self.kernels
            .as_ref()
            .map_or(&[], |k| k.fallbacks.as_slice())
    }

    /// Where the step times come from, for `run.json`: the kernel tables' provenance, or
    /// `None` for the roofline.
    pub fn kernel_source(&self) -> Option<&str> {
        self.kernels.as_ref().map(|k| k.source.as_str())
    }

    /// This model with `offload`'s fetches added to every forward's GPU time
    /// ([`crate::compute::offload::Offload::forward_s`]).
    pub fn with_offload(mut self, offload: Option<crate::compute::offload::Offload>) -> Self {
        self.offload = offload;
        self
    }

    /// This model on sglang's FP4 KV cache (`--kv-cache-dtype fp4_e2m1`), built at the FP8
    /// width (`kv_dtype_bytes` 1, [`crate::spec::ServerArgs::kv_dtype_bytes`]): the KV a
    /// forward streams is FP4's true bytes, data and scales
    /// ([`ModelSpec::kv_token_bytes_rank`]), and the kernel tables' decode attention is scaled
    /// alike ([`crate::compute::kernels::compose::KernelStep::with_fp4_kv`]).
    pub fn with_fp4_kv(mut self, model: &ModelSpec, tp: u32) -> Self {
        use crate::spec::model::KvElem;
        let fp8 = model.kv_token_bytes_rank(tp, KvElem::Bytes(1));
        if fp8 == 0 {
            return self;
        }
        let ratio = model.kv_token_bytes_rank(tp, KvElem::Fp4) as f64 / fp8 as f64;
        self.kv_bytes_per_token_gpu *= ratio;
        if let Some(k) = self.kernels.take() {
            self.kernels = Some(std::sync::Arc::new((*k).clone().with_fp4_kv(ratio)));
        }
        self
    }

    /// This model on a decode of `merge.size` context-parallel ranks a TP group
    /// (`--dcp-size`, [`dcp`]): each GPU reads `1/dcp` of the context's KV (its token shard),
    /// does the same attention FLOPs (the group's heads over its shard), and every decode step
    /// pays the merge's collectives. A decode server only runs decode forwards, so the whole
    /// model takes the shard.
    pub fn with_dcp(mut self, merge: dcp::DcpMerge) -> Self {
        if merge.size > 1 {
            self.kv_bytes_per_token_gpu /= f64::from(merge.size);
            self.dcp = Some(merge);
        }
        self
    }

    /// Seconds of the DCP merge in a forward of `batch` decode sequences; 0.0 without DCP.
    #[inline]
    fn dcp_merge_s(&self, batch: f64) -> f64 {
        match &self.dcp {
            Some(d) => d.secs(batch),
            None => 0.0,
        }
    }

    /// `gpu` seconds of a forward's GPU work with the offloaded weights fetched.
    #[inline]
    fn offloaded(&self, gpu: f64) -> f64 {
        match &self.offload {
            Some(o) => o.forward_s(gpu).total_s,
            None => gpu,
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

    /// Seconds of all-reduce in one forward over `tokens` tokens: per block, a ring over
    /// NVLink (`2(n − 1)` steps of latency, `2(n − 1)/n` of the hidden states over one-way
    /// NVLink); across nodes, a ring over the node's GPUs and then one over the nodes on the
    /// NICs, carrying `1/gpus_per_node` of the message (NCCL's hierarchical all-reduce).
    fn allreduce_s(&self, tokens: f64) -> f64 {
        if self.tp <= 1.0 {
            return 0.0;
        }
        let p = &self.params;
        let msg = tokens * self.allreduce_bytes_per_token;
        let ring = |n: f64, bytes: f64, bw: f64, latency: f64| {
            let steps = 2.0 * (n - 1.0);
            let latency_steps = if p.allreduce_log_steps {
                2.0 * n.log2().ceil()
            } else {
                steps
            };
            latency_steps * latency + steps / n * bytes / (bw * p.nvlink_efficiency)
        };
        let one = match self.span {
            None => ring(
                self.tp,
                msg,
                self.nvlink_one_way_bytes_per_s,
                p.allreduce_step_latency_s,
            ),
            Some((nodes, per_node, nic, net_latency)) => {
                ring(
                    per_node,
                    msg,
                    self.nvlink_one_way_bytes_per_s,
                    p.allreduce_step_latency_s,
                ) + ring(
                    nodes,
                    msg / per_node,
                    nic,
                    p.allreduce_step_latency_s + net_latency,
                )
            }
        };
        self.allreduces * one
    }

    /// Prefill MFU for a forward of `tokens` tokens (see the module docs).
    fn prefill_efficiency(&self, tokens: f64) -> f64 {
        let p = &self.params;
        if p.prefill_mfu_half_tokens > 0.0 {
            p.prefill_flops_efficiency * tokens / (tokens + p.prefill_mfu_half_tokens)
        } else {
            p.prefill_flops_efficiency
        }
    }

    /// One forward of any shape (prefill chunks, decode sequences or both), in seconds, before
    /// rounding; 0 when it computes no token.
    pub fn forward_s(&self, f: &Forward<'_>) -> f64 {
        if let Some(k) = &self.kernels {
            return self.kernel_forward_s(k, f);
        }
        let (mut new, mut pairs, mut prefix, mut seqs) = (0.0, 0.0, 0.0, 0.0);
        for &(n, p) in f.chunks.iter().filter(|c| c.0 > 0) {
            let (n, p) = (f64::from(n), f64::from(p));
            new += n;
            // Causal: token i of the chunk sees p + i + 1 tokens.
            pairs += n * p + n * (n + 1.0) / 2.0;
            prefix += p;
            seqs += 1.0;
        }
        let b = f64::from(f.batch);
        let ctx = f.context_tokens as f64;
        let tokens = new + b;
        if tokens == 0.0 {
            return 0.0;
        }
        let p = &self.params;
        let flops = self.body_flops_per_token * tokens
            + self.lm_head_flops * (seqs + b)
            + (self.prefill_pair_flops * pairs + self.prefix_flops_per_token * prefix)
                * self.prefill_attention_scale
            + self.decode_pair_flops * ctx;
        let eff = if new > 0.0 {
            self.prefill_efficiency(tokens)
        } else {
            p.decode_flops_efficiency
        };
        let t_compute = flops / (self.tp * self.peak_flops * eff);
        let kv_bytes = self.kv_bytes_per_token_gpu * (prefix + new + ctx)
            + 2.0 * self.state_bytes_per_seq_gpu * (seqs + b);
        let t_memory = self.weight_bytes_gpu(tokens) / (self.hbm_bytes_per_s * p.hbm_efficiency)
            + kv_bytes / (self.hbm_bytes_per_s * p.kv_hbm_efficiency);
        let gpu = if new == 0.0 && self.decode_pipelined() {
            // The MoE layers' attention runs inside the two-micro-batch pipeline: outside it
            // only the first dense layers' share of the whole batch's roofline.
            let m = self.decode_moe(b, flops, kv_bytes);
            t_compute.max(t_memory) * (1.0 - self.tbo_share) + self.allreduce_s(tokens) + m.total_s
        } else {
            let moe = self.moe_time(tokens, new > 0.0).map_or(0.0, |m| m.total_s);
            t_compute.max(t_memory) + self.allreduce_s(tokens) + moe + self.dcp_merge_s(b)
        };
        let gpu = self.offloaded(gpu);
        let host = self.forward_host_s(new > 0.0, seqs, f.batch);
        // The host work the GPU's hides (0 in the calibrations that price host costs
        // serially, where the floor is the per-block launch floor alone, as before).
        let cpu = self.hidden_host_s(new > 0.0, f.batch);
        host + gpu.max((self.allreduces * p.launch_per_block_s).max(cpu))
    }

    /// Host seconds to launch one forward's kernels without a CUDA graph (a prefill, or a
    /// decode batch above `cuda_graph_max_bs`): the dense rate for every layer, the MoE rate
    /// for the layers with experts where the calibration separates them.
    pub(crate) fn eager_launch_s(&self) -> f64 {
        let p = &self.params;
        if p.eager_launch_per_moe_layer_s == 0.0 || self.moe_layers == 0.0 {
            return self.layers * p.eager_launch_per_layer_s;
        }
        (self.layers - self.moe_layers) * p.eager_launch_per_layer_s
            + self.moe_layers * p.eager_launch_per_moe_layer_s
    }

    /// The context-independent terms of a decode-only forward of `batch` sequences, for
    /// [`StepModel::decode_s_with`]. Each term is the very sub-expression [`StepModel::forward_s`]
    /// computes with no chunks (where its chunk sums are 0.0, and `x + 0.0 == x`), in the same
    /// operation order, so the cached path is bit-identical to the uncached one.
    pub fn decode_terms(&self, batch: u32) -> DecodeTerms {
        if let Some(k) = &self.kernels {
            return self.kernel_decode_terms(k, batch);
        }
        let b = f64::from(batch);
        let p = &self.params;
        let eff = p.decode_flops_efficiency;
        DecodeTerms {
            flops0: self.body_flops_per_token * b + self.lm_head_flops * b,
            pair_flops: self.decode_pair_flops,
            kv_per_token: self.kv_bytes_per_token_gpu,
            compute_denom: self.tp * self.peak_flops * eff,
            state_bytes: 2.0 * self.state_bytes_per_seq_gpu * b,
            t_weights: self.weight_bytes_gpu(b) / (self.hbm_bytes_per_s * p.hbm_efficiency),
            kv_denom: self.hbm_bytes_per_s * p.kv_hbm_efficiency,
            allreduce: self.allreduce_s(b) + self.dcp_merge_s(b),
            moe: if self.decode_pipelined() {
                0.0
            } else {
                self.moe
                    .as_ref()
                    .map_or(0.0, |m| m.time(b, false, eff, p.hbm_efficiency).total_s)
            },
            pipelined: self.decode_pipelined(),
            offloaded: self.offload.is_some(),
            batch,
            host: self.decode_host_s(batch),
            floor: (self.allreduces * p.launch_per_block_s).max(self.decode_cpu_s(batch)),
            empty: batch == 0,
        }
    }

    /// [`StepModel::forward_s`] of a decode-only forward over `context_tokens`, from the
    /// batch's cached `terms`: seconds, bit-identical to the uncached call.
    #[inline]
    pub fn decode_s_with(&self, t: &DecodeTerms, context_tokens: u64) -> f64 {
        if t.empty {
            return 0.0;
        }
        if t.pipelined || t.offloaded {
            return self.forward_s(&Forward {
                chunks: &[],
                batch: t.batch,
                context_tokens,
            });
        }
        let ctx = context_tokens as f64;
        let flops = t.flops0 + t.pair_flops * ctx;
        let t_compute = flops / t.compute_denom;
        let kv_bytes = t.kv_per_token * ctx + t.state_bytes;
        let t_memory = t.t_weights + kv_bytes / t.kv_denom;
        let gpu = t_compute.max(t_memory) + t.allreduce + t.moe;
        t.host + gpu.max(t.floor)
    }

    /// Whether [`StepModel::decode_s_plain`] is [`StepModel::decode_s_with`] for `t` at every
    /// context, and a valid duration: every term and coefficient is finite and positive or
    /// +0.0 (no −0.0), both denominators are above 0, and the step at `u64::MAX` tokens is
    /// finite. Every operation is then non-decreasing in the context over such values, so no
    /// NaN, infinity or −0.0 arises anywhere in between, and `max` needs none of its NaN and
    /// signed-zero care.
    pub fn decode_plain_ok(&self, t: &DecodeTerms) -> bool {
        let plain = |x: f64| x.is_finite() && x.is_sign_positive();
        let terms = [
            t.flops0,
            t.state_bytes,
            t.t_weights,
            t.allreduce,
            t.moe,
            t.host,
            t.floor,
            t.pair_flops,
            t.kv_per_token,
        ];
        !t.empty
            && !t.pipelined
            && !t.offloaded
            && terms.into_iter().all(plain)
            && [t.compute_denom, t.kv_denom]
                .into_iter()
                .all(|x| plain(x) && x > 0.0)
            && self.decode_s_with(t, u64::MAX).is_finite()
    }

    /// [`StepModel::decode_s_with`] with plain comparisons for `max`: the same bits where
    /// [`StepModel::decode_plain_ok`] holds for `t` (only there may it be used).
    #[inline]
    pub fn decode_s_plain(&self, t: &DecodeTerms, context_tokens: u64) -> f64 {
        self.decode_s_plain_f(t, crate::engine::u64_to_f64(context_tokens))
    }

    /// [`StepModel::decode_s_plain`] over a context already converted (`context_tokens as
    /// f64`, exact): a coalesced run steps it by adding the batch size.
    #[inline(always)]
    pub fn decode_s_plain_f(&self, t: &DecodeTerms, ctx: f64) -> f64 {
        self.plain_step(t).secs(ctx)
    }

    /// The routed-expert part of a forward over `tokens` tokens of this rank (`prefill` when
    /// it computes new prompt tokens), at the efficiencies [`StepModel::forward_s`] uses:
    /// `None` without a [`crate::compute::moe`] model. The simulation reads its NIC leg to
    /// put the all-to-all on the fabric (`sglang::a2a`).
    pub fn moe_time(&self, tokens: f64, prefill: bool) -> Option<crate::compute::moe::MoeTime> {
        self.moe_time_at(tokens, prefill, 0)
    }

    /// [`StepModel::moe_time`] of a forward whose decode sequences' contexts sum to
    /// `context_tokens`: a decode forward under DeepEP's two-micro-batch pipeline prices its
    /// attention inside the MoE layers, so its time depends on the context.
    pub fn moe_time_at(
        &self,
        tokens: f64,
        prefill: bool,
        context_tokens: u64,
    ) -> Option<crate::compute::moe::MoeTime> {
        if !prefill && tokens > 0.0 && self.decode_pipelined() {
            let ctx = context_tokens as f64;
            if let Some(k) = &self.kernels {
                let p = &self.params;
                let (half, core) = self.kernel_half_batch_s(k, tokens, ctx);
                return self.moe.as_ref().map(|m| {
                    m.decode_time(
                        tokens,
                        p.decode_flops_efficiency,
                        p.hbm_efficiency,
                        half,
                        core,
                    )
                });
            }
            let flops = self.body_flops_per_token * tokens
                + self.lm_head_flops * tokens
                + self.decode_pair_flops * ctx;
            let kv_bytes =
                self.kv_bytes_per_token_gpu * ctx + 2.0 * self.state_bytes_per_seq_gpu * tokens;
            return Some(self.decode_moe(tokens, flops, kv_bytes));
        }
        let p = &self.params;
        let eff = if prefill {
            self.prefill_efficiency(tokens)
        } else {
            p.decode_flops_efficiency
        };
        self.moe
            .as_ref()
            .filter(|_| tokens > 0.0)
            .map(|m| m.time(tokens, prefill, eff, p.hbm_efficiency))
    }

    /// Whether decode forwards run DeepEP's two-micro-batch pipeline
    /// ([`crate::compute::moe::ExpertCost::decode_pipelined`]).
    fn decode_pipelined(&self) -> bool {
        self.moe.as_ref().is_some_and(|m| m.decode_pipelined())
    }

    /// The MoE layers of a pipelined decode forward of `b` sequences whose whole-batch FLOPs
    /// and KV bytes are `flops` and `kv_bytes`: one micro-batch's attention and dense seconds
    /// are the roofline over half the batch (half the FLOPs and KV, the weights of half the
    /// tokens — every micro-batch streams them) in the MoE layers' share of the body, its
    /// attention core the half batch's KV read.
    fn decode_moe(&self, b: f64, flops: f64, kv_bytes: f64) -> crate::compute::moe::MoeTime {
        let p = &self.params;
        let half_compute = flops / 2.0 / (self.tp * self.peak_flops * p.decode_flops_efficiency);
        let half_kv = kv_bytes / 2.0 / (self.hbm_bytes_per_s * p.kv_hbm_efficiency);
        let half_memory =
            self.weight_bytes_gpu(b / 2.0) / (self.hbm_bytes_per_s * p.hbm_efficiency) + half_kv;
        let attn_s = half_compute.max(half_memory) * self.tbo_share;
        // The attention core's share: the roofline's KV read (the attention kernel's bytes).
        let core_s = half_kv * self.tbo_share;
        self.moe
            .as_ref()
            .expect("pipelined decode has an expert model")
            .decode_time(
                b,
                p.decode_flops_efficiency,
                p.hbm_efficiency,
                attn_s,
                core_s,
            )
    }

    /// One prefill forward over `chunks`, each `(new_tokens, prefix_tokens)`: the new tokens
    /// attend causally to the prefix (already in KV cache) and to each other. Nanoseconds,
    /// rounded up; 0 when there are no new tokens (no forward runs).
    pub fn prefill_ns(&self, chunks: &[(u32, u32)]) -> Nanos {
        ns_from_secs_ceil(self.forward_s(&Forward {
            chunks,
            ..Forward::default()
        }))
    }

    /// The host part of a prefill forward over `seqs` sequences, the per-forward and
    /// per-sequence overheads [`StepModel::forward_s`] adds to the GPU's time: nanoseconds,
    /// rounded up (a PP prefill puts it on its first stage, `sglang::pipeline`).
    pub fn prefill_host_ns(&self, seqs: u32) -> Nanos {
        let p = &self.params;
        ns_from_secs_ceil(p.prefill_overhead_s + p.prefill_per_seq_overhead_s * f64::from(seqs))
    }

    /// One decode step of `batch` sequences whose contexts sum to `context_tokens`: one new
    /// token per sequence. Nanoseconds, rounded up; 0 for an empty batch.
    pub fn decode_ns(&self, batch: u32, context_tokens: u64) -> Nanos {
        ns_from_secs_ceil(self.forward_s(&Forward {
            chunks: &[],
            batch,
            context_tokens,
        }))
    }

    /// One mixed forward of a colocated server: prefill `chunks` and `batch` decode sequences
    /// (contexts summing to `context_tokens`) in one batch, as sglang's mixed chunked prefill
    /// runs them. Nanoseconds, rounded up.
    pub fn mixed_ns(&self, chunks: &[(u32, u32)], batch: u32, context_tokens: u64) -> Nanos {
        ns_from_secs_ceil(self.forward_s(&Forward {
            chunks,
            batch,
            context_tokens,
        }))
    }
}

#[cfg(test)]
mod tests;
