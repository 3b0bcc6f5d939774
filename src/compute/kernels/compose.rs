//! One forward of sglang composed from the measured kernel tables: the op list of each
//! architecture pdsim supports, each op looked up in its table ([`super::grid`]'s
//! interpolation), summed as sglang runs them, and reduced once per model to a few curves the
//! simulation reads without a table search per event.
//!
//! # The op list (sglang 0.5, `python/sglang/srt/models/`)
//!
//! Per decoder layer, on one GPU of an attention-TP group of `tp` (`hq`, `hkv` its query and KV
//! heads; `h` the hidden width):
//!
//! * **Dense attention** (`llama.py` `LlamaAttention.forward`, `qwen3.py`, `qwen2_moe.py`):
//!   `qkv_proj` GEMM (`n = hq·d + hkv·(d + d_v)`, `k = h`), RoPE and the KV write, the
//!   attention kernel (FlashAttention 3 / TRT-LLM MHA / FlashInfer: the context table in a
//!   prefill, the generation table in a decode), `o_proj` (`n = h`, `k = hq·d_v`).
//! * **MLA** (`deepseek_v2.py` `DeepseekV2AttentionMLA`): the fused `q_a`/`kv_a` projection
//!   (replicated: `n = q_lora + kv_lora + rope`), `q_b_proj` (`n = hq·(nope + rope)`); a prefill
//!   decompresses the new and cached latent with `kv_b_proj` (`forward_normal`, `n =
//!   hq·(nope + d_v)`, `k = kv_lora`, over every context token of the chunk); a decode
//!   absorbs it into two batched matmuls per head (`forward_absorb`: `w_kc`, `w_vc`); the MLA
//!   attention kernel (the MLA tables); `o_proj`. For FP8-block checkpoints the module tables
//!   of sglang's DeepSeek deployments price the block whole; on Blackwell a prefill takes the
//!   shorter of the module and these kernels, the module's short-prompt rows being its eager
//!   host floor ([`KernelStep::new`]).
//! * **Recurrent mixers** (Mamba2 / GDN / KDA): the in- and out-projections as GEMMs; the
//!   convolution and state scan analytically (no table measures them for every mixer pdsim
//!   supports): FLOPs at the calibration's compute efficiency, the state read and written
//!   per sequence at its HBM efficiency.
//! * **FFN**: `gate_up_proj` + SiLU-and-mul + `down_proj` (`LlamaMLP`), or a plain up/down.
//! * **MoE** (`FusedMoE`, `DeepEPMoE`): the router GEMM (`n = E`), shared experts as a dense
//!   FFN, the routed experts from the MoE tables at the instance's tokens (TP-sharded experts:
//!   `moe split=tp`; DeepEP: `wideep_moe`), or, for a shape no table has, one grouped GEMM over
//!   the experts the tokens touch (`fused_moe` launches one kernel for them all), from the GEMM
//!   table.
//! * **Elementwise**: the fused add-RMSNorm twice, RoPE, the activation, the KV write — memory
//!   bound: their bytes at [`ELEMENTWISE_HBM_EFFICIENCY`] of HBM (AIConfigurator prices its
//!   `ElementWise` ops the same way).
//! * **All-reduce** after attention and after the FFN (`tensor_model_parallel_all_reduce`),
//!   `T × h` BF16 elements, from sglang's custom all-reduce table (the CUDA-graph row in a
//!   decode, the eager row in a prefill); across nodes the inter-node ring is analytic.
//! * Once per forward: the LM head (`n = vocab / tp`) on the sequences that emit a token.
//!
//! # What the simulation reads
//!
//! Every op except attention depends on the forward's token count alone, so at construction
//! they are summed into one piecewise-linear curve over tokens ([`Curve`]), with a point at
//! every size where any op's table has one: between them the sum is exactly what per-op
//! lookups give. Decode attention is reduced per batch size to `max(floor, a + β·C)` in the
//! batch's total context `C` ([`KernelStep::decode_attention`], fitted when a batch size is
//! first met and cached by the caller): the form the decode step's fast path evaluates.
//! Prefill attention is a per-pair rate over (prompts, length) ([`KernelStep::prefill_attention_s`]).

use super::grid::Grid;
use super::tables::KernelTables;
use crate::spec::{KvAttention, ModelSpec};

/// Fraction of HBM bandwidth a memory-bound elementwise kernel (RMSNorm, RoPE, SiLU-and-mul,
/// the KV write) reaches. Borrowed: AIConfigurator prices its `ElementWise` ops at 0.8 of
/// HBM (`sdk/models/llama.py`, the `0.8` of `ops.ElementWise`).
pub const ELEMENTWISE_HBM_EFFICIENCY: f64 = 0.8;

/// The GEMM precision a model's linear layers run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// BF16 weights and activations.
    Bf16,
    /// FP8 per-tensor (sglang's `--quantization fp8`, `fp8_scaled_mm`).
    Fp8,
    /// FP8 with 128×128 block scales (DeepSeek-style checkpoints, DeepGEMM on Hopper).
    Fp8Block,
    /// NVFP4 (FP4 E2M1 with FP8 block scales), Blackwell only.
    Nvfp4,
}

impl Precision {
    /// The precision weights stored as `d` run at: MLA (DeepSeek-architecture) FP8
    /// checkpoints are block-FP8, other FP8 ones per-tensor FP8.
    pub fn of_dtype(d: crate::spec::model::WeightDtype, mla: bool) -> Self {
        use crate::spec::model::WeightDtype;
        match d {
            WeightDtype::Fp8 if mla => Precision::Fp8Block,
            WeightDtype::Fp8 => Precision::Fp8,
            WeightDtype::Nvfp4 => Precision::Nvfp4,
            WeightDtype::Bf16 | WeightDtype::Fp32 => Precision::Bf16,
        }
    }

    /// The precision of `model`'s linear layers other than the routed experts.
    pub fn of(model: &ModelSpec) -> Self {
        Self::of_dtype(model.weights.dense, model.is_mla())
    }

    /// The precision of `model`'s routed experts.
    pub fn of_experts(model: &ModelSpec) -> Self {
        Self::of_dtype(model.weights.experts, model.is_mla())
    }

    /// The GEMM table's `dtype`.
    pub fn gemm(self) -> &'static str {
        match self {
            Precision::Bf16 => "bfloat16",
            Precision::Fp8 => "fp8",
            Precision::Fp8Block => "fp8_block",
            Precision::Nvfp4 => "nvfp4",
        }
    }

    /// The MoE table's `dtype`: FP8 experts are block-quantized in every MoE checkpoint the
    /// tables measure.
    pub fn moe(self) -> &'static str {
        match self {
            Precision::Bf16 => "bfloat16",
            Precision::Fp8 | Precision::Fp8Block => "fp8_block",
            Precision::Nvfp4 => "nvfp4",
        }
    }
}

/// A piecewise-linear function of one size: clamped below the first point, linear between
/// points, extrapolated from the last segment (slope ≥ 0) above the last. Seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    xs: Vec<f64>,
    ys: Vec<f64>,
    /// For each binary octave `[2^e, 2^(e+1))`, the last point at or below `2^e` (0 if none):
    /// where a segment search starts, so a lookup walks a few points of its octave instead
    /// of searching the curve (it is read on every prefill forward).
    octave: Vec<u32>,
    /// Each segment's slope, `(ys[i+1] − ys[i]) / (xs[i+1] − xs[i])`, computed once.
    slope: Vec<f64>,
}

impl Curve {
    /// A curve through `(x, y)` points with strictly increasing `x`.
    pub fn new(points: Vec<(f64, f64)>) -> Self {
        let (xs, ys): (Vec<f64>, Vec<f64>) = points.into_iter().unzip();
        let octave = (0..64)
            .map(|e| {
                let lo = 2f64.powi(e);
                let below = xs.partition_point(|&v| v <= lo).saturating_sub(1);
                u32::try_from(below).expect("a curve's points fit in u32")
            })
            .collect();
        let slope = xs
            .windows(2)
            .zip(ys.windows(2))
            .map(|(x, y)| (y[1] - y[0]) / (x[1] - x[0]))
            .collect();
        Self {
            xs,
            ys,
            octave,
            slope,
        }
    }

    /// Whether the curve has no points (it is 0 everywhere).
    pub fn is_empty(&self) -> bool {
        self.xs.is_empty()
    }

    /// The value at `x`.
    #[inline]
    pub fn eval(&self, x: f64) -> f64 {
        let n = self.xs.len();
        if n == 0 {
            return 0.0;
        }
        if n == 1 || x <= self.xs[0] {
            return self.ys[0];
        }
        let i = if x >= self.xs[n - 1] {
            n - 2
        } else {
            self.segment(x)
        };
        let (x0, x1, y0, y1) = (self.xs[i], self.xs[i + 1], self.ys[i], self.ys[i + 1]);
        let slope = self.slope[i];
        if x >= x1 {
            y1 + slope.max(0.0) * (x - x1)
        } else {
            y0 + slope * (x - x0)
        }
    }

    /// The last point at or below `x`, for `xs[0] < x < xs[n - 1]`: the very index
    /// `partition_point(v ≤ x) − 1` gives, found from `x`'s octave.
    #[inline(always)]
    fn segment(&self, x: f64) -> usize {
        if x < 1.0 {
            return self.xs.partition_point(|&v| v <= x) - 1;
        }
        // `x` ≥ 1 is finite here (below the last point): its exponent is its octave.
        let e = ((x.to_bits() >> 52) & 0x7ff) as usize - 1023;
        let mut i = self.octave[e.min(63)] as usize;
        // `xs[i] ≤ 2^e ≤ x` (or `i = 0`, `xs[0] < x`); the last point stops the walk.
        while self.xs[i + 1] <= x {
            i += 1;
        }
        i
    }
}

/// Across nodes: the analytic inter-node ring of a hierarchical all-reduce.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// Nodes the instance spans.
    pub nodes: f64,
    /// GPUs per node (the NVLink domain the custom all-reduce table covers).
    pub per_node: f64,
    /// NIC bytes per second one GPU sends.
    pub nic_bytes_per_s: f64,
    /// One inter-node step's latency, seconds (network + the calibration's step latency).
    pub step_latency_s: f64,
    /// Fraction of the NIC an all-reduce reaches.
    pub efficiency: f64,
}

/// Tokens up to which sglang runs a DeepSeek MoE block's shared experts on a second stream
/// (`DUAL_STREAM_TOKEN_THRESHOLD` in `DeepseekV2MoE.forward`, sglang 3e4a39ee).
pub const DUAL_STREAM_TOKENS: f64 = 1024.0;

/// Whether sglang runs `model`'s shared experts beside its routed experts on a second CUDA
/// stream, on an instance of `ep` expert-parallel GPUs with (`a2a`) or without an all-to-all
/// backend: `DeepseekV2MoE.forward` (sglang 3e4a39ee) takes `forward_normal_dual_stream` when
/// no all-to-all backend runs, the model has an alternate stream (CUDA), the shared experts
/// are not fused into the routed kernel and 1–1,024 tokens enter the block.
/// `DeepseekV2ForCausalLM.determine_num_fused_shared_experts` fuses them only for
/// DeepSeek-V3's shape (256 routed experts, one shared expert of the routed width) without
/// expert parallelism, on GPUs of compute capability 8.0 and up (every GPU with tables).
/// DeepSeek-architecture models only (MLA with shared experts, no linear-attention layers):
/// other MoE models' blocks (`Qwen2MoeSparseMoeBlock`) gate their own second stream on
/// CUDA-graph capture, and hybrids have their own; they are priced in series.
pub fn dual_stream_shared_experts(model: &ModelSpec, ep: u32, a2a: bool) -> bool {
    let Some(moe) = &model.moe else { return false };
    if !model.is_mla() || model.mamba.is_some() || moe.shared_intermediate == 0 || a2a {
        return false;
    }
    let fused = moe.experts == 256 && moe.shared_intermediate == moe.expert_intermediate && ep <= 1;
    !fused
}

/// What [`KernelStep::new`] needs to know of one server.
#[derive(Clone, Debug)]
pub struct Setup<'a> {
    /// The GPU's tables.
    pub tables: &'a KernelTables,
    /// The model.
    pub model: &'a ModelSpec,
    /// Attention-TP size: the GPUs the attention, dense FFN and shared experts are sharded over.
    pub attn_tp: u32,
    /// GPUs the routed experts are sharded over (the instance) when they are part of this
    /// forward; `None` when another model prices them ([`crate::compute::moe`]).
    pub experts_tp: Option<u32>,
    /// Whether sglang runs this model's shared experts on a second CUDA stream beside the
    /// router and the routed experts (`DeepseekV2MoE.forward_normal_dual_stream`, up to
    /// [`DUAL_STREAM_TOKENS`] tokens entering the MoE): a DeepSeek-architecture model whose
    /// shared experts are not fused into the routed kernel, without an all-to-all backend
    /// ([`dual_stream_shared_experts`]).
    pub dual_stream: bool,
    /// KV element bytes.
    pub kv_dtype_bytes: u32,
    /// All-reduces per forward.
    pub allreduces: f64,
    /// The inter-node part of the all-reduce, for an instance spanning nodes.
    pub span: Option<Span>,
    /// HBM bytes per second of one GPU.
    pub hbm_bytes_per_s: f64,
    /// Peak FLOP/s of one GPU at the model's precision (for ops no table covers).
    pub peak_flops: f64,
    /// The calibration's efficiencies for ops no table covers: (prefill FLOPs, decode FLOPs,
    /// KV reads), fractions of peak.
    pub analytic: (f64, f64, f64),
}

/// A server's forward, composed from its GPU's kernel tables (see the module docs).
#[derive(Clone, Debug)]
pub struct KernelStep {
    /// Per-token work of a prefill or mixed forward (eager all-reduce), seconds, over tokens.
    dense_eager: Curve,
    /// The same in a decode forward (CUDA-graph all-reduce).
    dense_graph: Curve,
    /// The LM head over the sequences that emit a token.
    lm_head: Curve,
    /// MLA only: `kv_b_proj` over a prefill's new and cached tokens (`forward_normal`).
    mla_decompress: Curve,
    /// MLA only: the absorbed batched matmuls over a decode's tokens (`forward_absorb`).
    mla_absorb: Curve,
    /// Decode attention per forward over (batch, context per sequence), all layers,
    /// microseconds (a grid for this model's heads).
    decode_attn: Grid,
    /// Prefill attention per (query × context) pair over (prompts, length), all layers,
    /// microseconds per pair.
    prefill_rate: Grid,
    /// The attention grid (the rate's, or the MLA module's) along its length axis at one
    /// prompt: a forward of one chunk — the common case — reads this curve, not the grid.
    prefill_one: Curve,
    /// MLA under sglang's module tables: the whole module of a prefill over (prompts, new
    /// tokens each), all layers, microseconds, and the extra microseconds per (new × cached)
    /// pair a chunk's prefix adds; `None`: [`KernelStep::prefill_rate`] prices the attention.
    mla_module_prefill: Option<(Grid, f64)>,
    /// MLA under the module tables, where the per-kernel tables measure the module's
    /// attention kernel: the prefill composed from them, which the forward takes where it is
    /// shorter than the module's wall time.
    mla_kernel_prefill: Option<MlaKernelPrefill>,
    /// The shared experts' GEMMs over the tokens, seconds (all MoE layers), where they run on
    /// their own stream ([`Setup::dual_stream`]); empty otherwise.
    shared: Curve,
    /// The other stream's work in this forward: the router GEMM and, where this forward holds
    /// them, the TP-sharded routed experts, seconds over the tokens.
    routed: Curve,
    /// Sliding-window layers' share: (layers, window); their attention is priced at the window.
    swa: Option<(f64, f64)>,
    /// Decode attention of the sliding-window layers per forward over batch, seconds.
    swa_decode: Curve,
    /// Attention layers (full and sliding-window) the prefill rate covers.
    attn_layers: f64,
    /// Provenance for `run.json`: GPU, sglang versions and the tables that priced each op.
    pub source: String,
    /// Ops the tables did not cover for this model, priced analytically instead.
    pub fallbacks: Vec<String>,
}

/// A prefill's MLA from the per-kernel tables (see [`KernelStep::prefill_attention_s`]).
#[derive(Clone, Debug)]
struct MlaKernelPrefill {
    /// The attention kernel per (query × context) pair over (prompts, length), all layers,
    /// microseconds per pair.
    rate: Grid,
    /// `rate` at one prompt over its length.
    one: Curve,
    /// `q_b_proj` and `o_proj` over the new tokens, seconds.
    q_o: Curve,
    /// `kv_b_proj` over the new and cached tokens, seconds.
    kv_b: Curve,
}

/// `n·p + n(n + 1)/2`: the (query, context) pairs of a causal chunk of `n` new tokens after
/// `p` cached ones.
#[inline]
pub fn pairs(n: f64, p: f64) -> f64 {
    n * p + n * (n + 1.0) / 2.0
}

/// GEMM lookups in one precision, falling back to BF16 where the GPU has no such table (an
/// A100 runs FP8 checkpoints weight-only, at BF16 speed and no better).
struct Gemms<'a> {
    table: &'a Grid,
}

impl<'a> Gemms<'a> {
    fn new(t: &'a KernelTables, p: Precision) -> Result<Self, String> {
        let table = t
            .find("gemm", &[("dtype", p.gemm())])
            .or_else(|| t.find("gemm", &[("dtype", "bfloat16")]))
            .ok_or_else(|| format!("{}: no GEMM table", t.meta.gpu))?;
        Ok(Self {
            table: table.grid(),
        })
    }

    /// Seconds of one GEMM of `m` rows, `n` outputs, `k` inputs (0 for an empty one).
    fn s(&self, m: f64, n: f64, k: f64) -> f64 {
        if m <= 0.0 || n <= 0.0 || k <= 0.0 {
            return 0.0;
        }
        self.table.eval(&[m, n, k]) * 1e-6
    }

    /// The `m` points of the table.
    fn ms(&self) -> &[f64] {
        &self.table.axes[0].points
    }
}

/// One linear layer: `count` GEMMs of `n × k` per forward.
#[derive(Clone, Copy, Debug)]
struct Linear {
    count: f64,
    n: f64,
    k: f64,
}

impl KernelStep {
    /// The model of one server; an error names what the GPU's tables lack for it.
    pub fn new(s: &Setup<'_>) -> Result<Self, String> {
        let t = s.tables;
        let m = s.model;
        let tp = f64::from(s.attn_tp.max(1));
        let h = f64::from(m.hidden_size);
        let prec = Precision::of(m);
        let gemm = Gemms::new(t, prec)?;
        let bf16 = Gemms::new(t, Precision::Bf16)?;
        let mut fallbacks = Vec::new();
        let hq = (f64::from(m.q_heads) / tp).max(1.0);
        let hkv = f64::from(m.kv_heads_per_rank(s.attn_tp));
        let l_att = f64::from(m.kv_layers());
        let l_mix = m.mamba_layers.len() as f64;

        // The per-token linear layers of every layer, per forward.
        let mut lin: Vec<Linear> = Vec::new();
        let mut push = |count: f64, n: f64, k: f64| {
            if count > 0.0 && n > 0.0 && k > 0.0 {
                lin.push(Linear { count, n, k });
            }
        };
        let mut mla_decompress = Vec::new();
        let mut mla_absorb = Vec::new();
        let (mut mla_kernel_q_o, mut mla_kernel_kv_b) = (Vec::new(), Vec::new());
        // sglang's DeepEP-era MLA module tables (attention with q_b, kv_b / absorb and o), for
        // FP8 block checkpoints: what the deployments of DeepSeek-architecture models run.
        let module_tables = (
            t.find("context_mla_module", &[]),
            t.find("generation_mla_module", &[]),
        );
        let mla_module = m.is_mla()
            && prec == Precision::Fp8Block
            && module_tables.0.is_some()
            && module_tables.1.is_some();
        let kv = if s.kv_dtype_bytes == 1 {
            "fp8"
        } else {
            "bfloat16"
        };
        // The context module's rows are an eager module's wall time, the longer of its host
        // and GPU work: at every shape whose GPU work is short they sit on a flat host floor
        // (B200 ~0.53 ms a layer from 1 to 2,048 tokens at 16 heads, B300 ~0.57; GB200
        // ~0.85-1.15 and GB300 ~0.9-1.1 on their Grace CPUs, where the per-kernel tables of
        // the same GPU agree within 10 %), which the forward's eager launches
        // (`eager_launch_per_moe_layer_s`, fitted on an MLA model) already price on the host.
        // Where the GPU's per-kernel `context_mla` table measures the module's own attention
        // kernel (TRT-LLM MLA on Blackwell), a prefill's MLA is also composed from it and the
        // GEMM table as `forward_normal` runs it (`q_b_proj`, `kv_b_proj` over the new and
        // cached tokens, the kernel, `o_proj`), and the forward takes the shorter of the two:
        // the module bounds its GPU time from above. On Hopper the per-kernel table measures
        // another kernel (`flash_attention`, up to 3x the module's FA3 at long prompts) and
        // the module alone prices it. The decode module (CUDA-graph replay) has no host floor.
        let kernel_prefill = mla_module
            && module_tables
                .0
                .zip(t.find("context_mla", &[("kv", kv)]))
                .is_some_and(|(module, plain)| module.attr("kernel") == plain.attr("kernel"));
        match m.attention {
            KvAttention::Mha {
                head_dim,
                v_head_dim,
                ..
            } => {
                let (d, dv) = (f64::from(head_dim), f64::from(v_head_dim));
                push(l_att, hq * d + hkv * (d + dv), h);
                push(l_att, h, hq * dv);
            }
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                qk_nope_head_dim,
                v_head_dim,
                q_lora_rank,
            } => {
                let (r, rope, nope, dv) = (
                    f64::from(kv_lora_rank),
                    f64::from(qk_rope_head_dim),
                    f64::from(qk_nope_head_dim),
                    f64::from(v_head_dim),
                );
                let ql = q_lora_rank.map_or(0.0, f64::from);
                // The fused down-projection (`fused_qkv_a_proj_with_mqa`, replicated).
                push(l_att, ql + r + rope, h);
                let q_b = Linear {
                    count: l_att,
                    n: hq * (nope + rope),
                    k: if ql > 0.0 { ql } else { h },
                };
                let o = Linear {
                    count: l_att,
                    n: h,
                    k: hq * dv,
                };
                let kv_b = Linear {
                    count: l_att,
                    n: hq * (nope + dv),
                    k: r,
                };
                if kernel_prefill {
                    mla_kernel_q_o.extend([q_b, o]);
                    mla_kernel_kv_b.push(kv_b);
                }
                if !mla_module {
                    push(q_b.count, q_b.n, q_b.k);
                    push(o.count, o.n, o.k);
                    mla_decompress.push(kv_b);
                    // Per head a (tokens × nope)·(nope × r) and a (tokens × r)·(r × d_v)
                    // matmul: as one GEMM of the heads' outputs side by side (the same bytes and
                    // FLOPs).
                    mla_absorb.push(Linear {
                        count: l_att,
                        n: hq * r,
                        k: nope,
                    });
                    mla_absorb.push(Linear {
                        count: l_att,
                        n: hq * dv,
                        k: r,
                    });
                }
            }
        }
        if let Some(mx) = &m.mamba {
            let i = f64::from(mx.intermediate_size);
            let conv: f64 = if mx.conv_shard_groups.is_empty() {
                (i + 2.0 * f64::from(mx.n_groups * mx.state_size)) * f64::from(mx.conv_kernel)
            } else {
                mx.conv_shard_groups
                    .iter()
                    .map(|&w| f64::from(w))
                    .sum::<f64>()
                    * f64::from(mx.conv_kernel)
            };
            let in_n = ((m.mixer_params() - i * h - conv) / h).max(0.0);
            push(l_mix, in_n / tp, h);
            push(l_mix, h, i / tp);
        }
        let di = f64::from(m.dense_intermediate);
        let dense_layers = f64::from(m.dense_ffn_layers);
        if m.dense_ffn_gated {
            push(dense_layers, 2.0 * di / tp, h);
        } else {
            push(dense_layers, di / tp, h);
        }
        push(dense_layers, h, di / tp);
        let moe_layers = f64::from(m.moe_layers);
        // The router (`MoEGate`, replicated) is never quantized: sglang keeps its weight in
        // the model's dtype (`quant_config=None`) and AIConfigurator prices it from the BF16
        // table (`context_router_gemm` / `generation_router_gemm`, `GEMMQuantMode.bfloat16`).
        // (It was read from the FFN's table before: on a B200 the FP8-block row of its shape
        // at 4 tokens is 1.7x the BF16 one.)
        let router = m.moe.as_ref().map(|moe| Linear {
            count: moe_layers,
            n: f64::from(moe.experts),
            k: h,
        });
        let mut shared_lin = Vec::new();
        if let Some(moe) = &m.moe {
            let si = f64::from(moe.shared_intermediate);
            push(moe_layers, 2.0 * si / tp, h);
            push(moe_layers, h, si / tp);
            if s.dual_stream && si > 0.0 {
                shared_lin.push(Linear {
                    count: moe_layers,
                    n: 2.0 * si / tp,
                    k: h,
                });
                shared_lin.push(Linear {
                    count: moe_layers,
                    n: h,
                    k: si / tp,
                });
            }
        }

        // Routed experts in this forward (TP-sharded), from the MoE table or the roofline.
        let expert_prec = Precision::of_experts(m);
        let experts = match (&m.moe, s.experts_tp) {
            (Some(moe), Some(etp)) => {
                let want = [("dtype", expert_prec.moe()), ("split", "tp")];
                let shape = [
                    ("hidden", m.hidden_size.to_string()),
                    ("inter", moe.expert_intermediate.to_string()),
                    ("topk", moe.active.to_string()),
                    ("experts", moe.experts.to_string()),
                ];
                let found = t
                    .all("moe", &want)
                    .into_iter()
                    .find(|tb| shape.iter().all(|(k, v)| tb.attr(k) == Some(v.as_str())));
                match found {
                    Some(tb) => Some((tb.grid().clone(), f64::from(etp), moe_layers)),
                    None => {
                        fallbacks.push(format!(
                            "routed experts (hidden {}, inter {}, top-{} of {}, {}): no MoE table of that shape; priced as one grouped GEMM over the experts it touches",
                            m.hidden_size,
                            moe.expert_intermediate,
                            moe.active,
                            moe.experts,
                            expert_prec.moe()
                        ));
                        None
                    }
                }
            }
            _ => None,
        };
        // Without a MoE table: each expert's gate_up and down as GEMMs of the tokens it gets
        // (uniform routing), over the experts the tokens touch.
        let expert_gemms = match (&m.moe, s.experts_tp, &experts) {
            (Some(moe), Some(etp), None) => Some((
                f64::from(moe.experts),
                f64::from(moe.active),
                f64::from(moe.expert_intermediate) / f64::from(etp.max(1)),
                moe_layers,
            )),
            _ => None,
        };

        // Elementwise bytes per token over every layer: two fused add-RMSNorms (read x and
        // the residual, write both), RoPE on q and k, the activation (read 2I, write I), the
        // KV write.
        let act = f64::from(m.activation_bytes);
        let q_k_dims = match m.attention {
            KvAttention::Mha { head_dim, .. } => (hq + hkv) * f64::from(head_dim),
            KvAttention::Mla {
                qk_rope_head_dim, ..
            } => (hq + 1.0) * f64::from(qk_rope_head_dim),
        };
        let layers = f64::from(m.num_layers.max(1));
        let ew_bytes_per_token = act
            * (layers * 8.0 * h
                + l_att * 2.0 * q_k_dims
                + dense_layers * 3.0 * di / tp
                + l_att * m.kv_elems_per_token_layer_rank(s.attn_tp) as f64);
        let ew_s_per_token = ew_bytes_per_token / (s.hbm_bytes_per_s * ELEMENTWISE_HBM_EFFICIENCY);

        // All-reduce per forward over tokens, per mode.
        let ar = |mode: &str| -> Option<Grid> {
            t.find("allreduce", &[("mode", mode)])
                .or_else(|| t.find("allreduce", &[]))
                .map(|tb| tb.grid().clone())
        };
        let (ar_graph, ar_eager) = (ar("graph"), ar("eager"));
        let ar_gpus = match s.span {
            Some(sp) => sp.per_node.min(tp),
            None => tp,
        };
        if s.allreduces > 0.0 && tp > 1.0 && ar_eager.is_none() {
            fallbacks.push(
                "all-reduce: no custom all-reduce table; priced over NVLink analytically".into(),
            );
        }
        let allreduce_s = |grid: &Option<Grid>, tokens: f64| -> f64 {
            if tp <= 1.0 || s.allreduces <= 0.0 || tokens <= 0.0 {
                return 0.0;
            }
            let elems = tokens * h;
            let intra = match grid {
                Some(g) if ar_gpus > 1.0 => g.eval(&[ar_gpus, elems]) * 1e-6,
                _ => 0.0,
            };
            let inter = match s.span {
                Some(sp) if sp.nodes > 1.0 => {
                    let msg = elems * 2.0 / sp.per_node;
                    2.0 * (sp.nodes - 1.0) * sp.step_latency_s
                        + 2.0 * (sp.nodes - 1.0) / sp.nodes * msg
                            / (sp.nic_bytes_per_s * sp.efficiency)
                }
                _ => 0.0,
            };
            s.allreduces * (intra + inter)
        };

        // The points of the per-token curve: every GEMM row count the tables measure, every
        // all-reduce size, and the MoE table's token counts, in tokens.
        let mut xs: Vec<f64> = gemm.ms().to_vec();
        for g in [&ar_graph, &ar_eager].into_iter().flatten() {
            if let Some(a) = g.axis("elements") {
                xs.extend(a.points.iter().map(|e| e / h));
            }
        }
        if let Some(a) = experts.as_ref().and_then(|(g, ..)| g.axis("tokens")) {
            xs.extend(a.points.iter().copied());
        }
        xs.extend([65_536.0, 131_072.0, 262_144.0]);
        xs.retain(|&x| (1.0..=262_144.0).contains(&x));
        xs.sort_by(f64::total_cmp);
        xs.dedup();

        // The TP-sharded routed experts of this forward, if it holds them.
        let experts_s = |tokens: f64| -> f64 {
            if let Some((g, etp, layers)) = &experts {
                return layers * g.eval(&[*etp, tokens]) * 1e-6;
            }
            if let Some((e, k, inter, layers)) = expert_gemms {
                // Tokens per touched expert under uniform routing. sglang's fused MoE runs
                // every touched expert in one grouped kernel (`fused_moe`): one GEMM whose N
                // spans them prices its weight reads and FLOPs without a launch per expert.
                let touched = e * (1.0 - (1.0 - k / e).powf(tokens));
                let per = tokens * k / touched.max(1.0);
                return layers
                    * (gemm.s(per, 2.0 * inter * touched, h) + gemm.s(per, h * touched, inter));
            }
            0.0
        };
        let router_s = |tokens: f64| router.map_or(0.0, |r| r.count * bf16.s(tokens, r.n, r.k));
        let per_token = |tokens: f64, graph: bool| -> f64 {
            let mut sec: f64 = lin.iter().map(|l| l.count * gemm.s(tokens, l.n, l.k)).sum();
            sec += router_s(tokens);
            sec += ew_s_per_token * tokens;
            sec += allreduce_s(if graph { &ar_graph } else { &ar_eager }, tokens);
            sec + experts_s(tokens)
        };
        // The router and the TP-sharded routed experts: the stream beside the shared experts'.
        let routed_s = |tokens: f64| router_s(tokens) + experts_s(tokens);
        let (shared, routed) = if shared_lin.is_empty() {
            (Curve::new(Vec::new()), Curve::new(Vec::new()))
        } else {
            (
                Curve::new(
                    xs.iter()
                        .map(|&x| {
                            let t: f64 = shared_lin
                                .iter()
                                .map(|l| l.count * gemm.s(x, l.n, l.k))
                                .sum();
                            (x, t)
                        })
                        .collect(),
                ),
                Curve::new(xs.iter().map(|&x| (x, routed_s(x))).collect()),
            )
        };
        let dense_eager = Curve::new(xs.iter().map(|&x| (x, per_token(x, false))).collect());
        let dense_graph = Curve::new(xs.iter().map(|&x| (x, per_token(x, true))).collect());
        let lm_n = f64::from(m.vocab_size) / tp;
        let lm_head = Curve::new(bf16.ms().iter().map(|&x| (x, bf16.s(x, lm_n, h))).collect());
        let curve_of = |ls: &[Linear]| {
            Curve::new(
                gemm.ms()
                    .iter()
                    .chain([65_536.0, 131_072.0, 262_144.0].iter())
                    .map(|&x| (x, ls.iter().map(|l| l.count * gemm.s(x, l.n, l.k)).sum()))
                    .collect(),
            )
        };
        let mla_decompress_c = curve_of(&mla_decompress);
        let mla_absorb_c = curve_of(&mla_absorb);

        // Attention grids for this model's heads.
        let (full_layers, swa) = match &m.swa {
            Some(w) if !w.layers.is_empty() => {
                let n_swa = w.layers.len() as f64;
                (l_att - n_swa, Some((n_swa, f64::from(w.window))))
            }
            _ => (l_att, None),
        };
        let (decode_attn, prefill_rate) = match m.attention {
            KvAttention::Mha {
                head_dim,
                v_head_dim,
                ..
            } => {
                let mha = (hq - hkv).abs() < 0.5;
                mha_grids(t, mha, head_dim.max(v_head_dim), hq, hkv, kv)?
            }
            KvAttention::Mla { .. } if mla_module => {
                let (c, g) = (
                    module_tables.0.expect("checked"),
                    module_tables.1.expect("checked"),
                );
                (slice(g.grid(), hq, 1.0), slice(c.grid(), hq, 1.0))
            }
            KvAttention::Mla { .. } => match mla_grids(t, hq, kv) {
                Ok(g) => g,
                Err(e) => {
                    fallbacks.push(format!("MLA attention: {e}; priced by the roofline"));
                    analytic_mla_grids(m, hq, s)
                }
            },
        };
        let swa_decode = match swa {
            // The sliding-window layers read at most `window` tokens per sequence: per batch
            // size the layer's time at the window, flat in the context.
            Some((n, w)) => Curve::new(
                decode_attn_axis(&decode_attn, "batch")
                    .iter()
                    .map(|&b| (b, n * decode_attn.eval(&[b, w]) * 1e-6))
                    .collect(),
            ),
            None => Curve::new(Vec::new()),
        };
        let decode_attn = scale_grid(decode_attn, full_layers);
        // Under the module tables the "rate" grid is the module's time over (prompts, new
        // tokens); a chunk's cached prefix adds the module's incremental cost per pair at the
        // longest measured prompt.
        let (prefill_rate, mla_module_prefill) = if mla_module {
            let g = scale_grid(prefill_rate, l_att);
            let ls = &g.axes[1].points;
            let n = ls.len();
            let per_pair = if n >= 2 {
                let (a, b) = (ls[n - 2], ls[n - 1]);
                ((g.eval(&[1.0, b]) - g.eval(&[1.0, a])) / (pairs(b, 0.0) - pairs(a, 0.0))).max(0.0)
            } else {
                0.0
            };
            (
                Grid {
                    axes: Vec::new(),
                    values: Vec::new(),
                },
                Some((g, per_pair)),
            )
        } else {
            (scale_grid(prefill_rate, l_att), None)
        };

        let one_of = |g: &Grid| {
            Curve::new(
                g.axes
                    .get(1)
                    .map_or(&[][..], |a| &a.points[..])
                    .iter()
                    .map(|&l| (l, g.eval(&[1.0, l])))
                    .collect(),
            )
        };
        let prefill_one = match &mla_module_prefill {
            Some((g, _)) => one_of(g),
            None => one_of(&prefill_rate),
        };

        let mla_kernel_prefill = if kernel_prefill {
            let rate = scale_grid(mla_grids(t, hq, kv)?.1, l_att);
            let one = one_of(&rate);
            let (q_o, kv_b) = (curve_of(&mla_kernel_q_o), curve_of(&mla_kernel_kv_b));
            Some(MlaKernelPrefill {
                rate,
                one,
                q_o,
                kv_b,
            })
        } else {
            None
        };

        let versions: Vec<String> = t
            .versions()
            .into_iter()
            .map(|(v, names)| format!("{} at sglang {v}", names.join(", ")))
            .collect();
        let source = format!(
            "kernels {} ({}): {}; {}",
            t.meta.gpu,
            t.meta.device,
            versions.join("; "),
            t.meta.source
        );
        Ok(Self {
            dense_eager,
            dense_graph,
            lm_head,
            mla_decompress: mla_decompress_c,
            mla_absorb: mla_absorb_c,
            mla_kernel_prefill,
            decode_attn,
            prefill_rate,
            prefill_one,
            mla_module_prefill,
            shared,
            routed,
            swa,
            swa_decode,
            attn_layers: l_att,
            source,
            fallbacks,
        })
    }

    /// Seconds of a forward's per-token work over `tokens` tokens (GEMMs, elementwise,
    /// all-reduce, TP-sharded experts); `graph`: a decode replayed from a CUDA graph.
    #[inline]
    pub fn dense_s(&self, tokens: f64, graph: bool) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        if graph {
            self.dense_graph.eval(tokens)
        } else {
            self.dense_eager.eval(tokens)
        }
    }

    /// Seconds the shared experts' stream hides of a forward over `tokens` tokens on this
    /// rank, with `moe_tokens` entering each MoE block (all DP ranks' under DP attention) and
    /// `routed_elsewhere_s` of routed experts priced outside this composition (the expert
    /// model's): the shorter of the two streams, as sglang's `forward_normal_dual_stream`
    /// runs them (the shared experts on the current stream, router and routed experts on the
    /// alternate one, joined before the add) — 0 where sglang runs them in series.
    /// AIConfigurator prices the same overlap as the longer of the two (`OverlapOp`).
    #[inline]
    pub fn dual_stream_hidden_s(
        &self,
        tokens: f64,
        moe_tokens: f64,
        routed_elsewhere_s: f64,
    ) -> f64 {
        if self.shared.is_empty() || tokens <= 0.0 || moe_tokens > DUAL_STREAM_TOKENS {
            return 0.0;
        }
        self.shared
            .eval(tokens)
            .min(self.routed.eval(tokens) + routed_elsewhere_s)
    }

    /// Seconds of the LM head over `seqs` sequences.
    #[inline]
    pub fn lm_head_s(&self, seqs: f64) -> f64 {
        if seqs <= 0.0 {
            0.0
        } else {
            self.lm_head.eval(seqs)
        }
    }

    /// MLA: seconds of decompressing `tokens` latent rows (a prefill's new and cached tokens).
    #[inline]
    pub fn mla_decompress_s(&self, tokens: f64) -> f64 {
        if tokens <= 0.0 {
            0.0
        } else {
            self.mla_decompress.eval(tokens)
        }
    }

    /// MLA: seconds of the absorbed matmuls over `tokens` decode tokens.
    #[inline]
    pub fn mla_absorb_s(&self, tokens: f64) -> f64 {
        if tokens <= 0.0 {
            0.0
        } else {
            self.mla_absorb.eval(tokens)
        }
    }

    /// Seconds of a prefill's attention over `chunks` (`(new, cached)` tokens each), all
    /// layers: the per-pair rate at the chunks' count and mean length times their pairs. MLA
    /// under the module tables: the module's time at the chunks' count and mean new tokens,
    /// plus its per-pair cost of the cached prefixes, projections included; on Blackwell the
    /// shorter of that and the per-kernel composition (`q_b` and `o` over the new tokens,
    /// `kv_b` over new and cached, the kernel's pairs).
    pub fn prefill_attention_s(&self, chunks: &[(u32, u32)]) -> f64 {
        let (mut k, mut len, mut p, mut swa_pairs) = (0.0, 0.0, 0.0, 0.0);
        for &(n, c) in chunks.iter().filter(|c| c.0 > 0) {
            let (n, c) = (f64::from(n), f64::from(c));
            k += 1.0;
            len += n + c;
            p += pairs(n, c);
            if let Some((_, w)) = self.swa {
                swa_pairs += n * (n + c).min(w);
            }
        }
        if k == 0.0 {
            return 0.0;
        }
        if let Some((module, per_pair)) = &self.mla_module_prefill {
            let new: f64 = chunks.iter().map(|&(n, _)| f64::from(n)).sum();
            let cached: f64 = chunks
                .iter()
                .filter(|c| c.0 > 0)
                .map(|&(n, c)| f64::from(n) * f64::from(c))
                .sum();
            let t = if k == 1.0 {
                self.prefill_one.eval(new)
            } else {
                module.eval(&[k, new / k])
            };
            let module_s = (t + per_pair * cached) * 1e-6;
            return match &self.mla_kernel_prefill {
                Some(kp) => {
                    let rate = if k == 1.0 {
                        kp.one.eval(len)
                    } else {
                        kp.rate.eval(&[k, len / k])
                    } * 1e-6;
                    module_s.min(rate * p + kp.q_o.eval(new) + kp.kv_b.eval(len))
                }
                None => module_s,
            };
        }
        let rate = if k == 1.0 {
            self.prefill_one.eval(len)
        } else {
            self.prefill_rate.eval(&[k, len / k])
        } * 1e-6;
        match self.swa {
            // The rate covers every attention layer; the window's layers see at most
            // `window` keys per query.
            Some((n_swa, _)) => {
                let swa_share = n_swa / self.attn_layers.max(1.0);
                rate * (p * (1.0 - swa_share) + swa_pairs * swa_share)
            }
            None => rate * p,
        }
    }

    /// Decode attention of a batch of `b` sequences, all layers, as `(floor, a, β)`: seconds
    /// `max(floor, a + β·C)` for a total context `C`. `floor` is the grid at the shortest
    /// context; `a`, `β` the least-squares line (in relative error) through the grid at
    /// contexts from 256 tokens up. The sliding-window layers' cost (flat in `C`) is in
    /// `a` and `floor`.
    pub fn decode_attention(&self, b: u32) -> (f64, f64, f64) {
        if b == 0 {
            return (0.0, 0.0, 0.0);
        }
        let bf = f64::from(b);
        let ctxs = decode_attn_axis(&self.decode_attn, "context");
        let floor = self.decode_attn.eval(&[bf, ctxs[0]]) * 1e-6;
        let pts: Vec<(f64, f64)> = ctxs
            .iter()
            .copied()
            .filter(|&c| c >= 256.0)
            .map(|c| (bf * c, self.decode_attn.eval(&[bf, c]) * 1e-6))
            .collect();
        let (a, beta) = relative_line(&pts);
        let swa = self.swa_decode.eval(bf);
        (floor + swa, a + swa, beta)
    }

    /// The decode-attention grid itself at batch `b` and `ctx_per_seq` tokens per sequence,
    /// seconds (what [`KernelStep::decode_attention`] approximates).
    pub fn decode_attn_grid_eval(&self, b: u32, ctx_per_seq: f64) -> f64 {
        self.decode_attn.eval(&[f64::from(b), ctx_per_seq]) * 1e-6
            + self.swa_decode.eval(f64::from(b))
    }

    /// This forward on sglang's FP4 KV cache (`--kv-cache-dtype fp4_e2m1`), composed from the
    /// FP8 tables (the measured tables have no FP4-KV attention): the decode attention, which
    /// streams the KV, is the FP8 grid's time × `ratio`, FP4's bytes a token (data and scales)
    /// over FP8's — 9/16 on every model pdsim knows. Under sglang's MLA module tables the grid
    /// is the whole generation module, whose projections do not shrink with the KV: kept at
    /// FP8's time. Prefill attention, FLOP-bound, keeps FP8's. Either way a fallback line says
    /// so.
    pub fn with_fp4_kv(mut self, ratio: f64) -> Self {
        if self.mla_module_prefill.is_some() {
            self.fallbacks.push(
                "decode attention on the FP4 KV cache (--kv-cache-dtype fp4_e2m1): no FP4-KV table; the FP8 generation module's time, unscaled (its projections do not shrink with the KV)".into(),
            );
        } else {
            self.decode_attn = scale_grid(self.decode_attn, ratio);
            self.fallbacks.push(format!(
                "decode attention on the FP4 KV cache (--kv-cache-dtype fp4_e2m1): no FP4-KV table; the FP8 table's time × {ratio:.4} (FP4's bytes a token, scales included, over FP8's); prefill attention at FP8's"
            ));
        }
        self
    }

    /// [`KernelStep::decode_attention`] evaluated at total context `ctx`, seconds.
    pub fn decode_attention_s(&self, b: u32, ctx: f64) -> f64 {
        let (floor, a, beta) = self.decode_attention(b);
        floor.max(a + beta * ctx)
    }
}

/// The points of `g`'s axis `name`.
fn decode_attn_axis<'a>(g: &'a Grid, name: &str) -> &'a [f64] {
    &g.axis(name).expect("the attention grid's axis").points
}

/// `g` with every value times `k`.
fn scale_grid(mut g: Grid, k: f64) -> Grid {
    for v in &mut g.values {
        *v *= k;
    }
    g
}

/// The line `a + β·x` minimising the squared relative error over `pts` (`(x, y)`, `y > 0`),
/// with `β ≥ 0`; one point: flat through it.
fn relative_line(pts: &[(f64, f64)]) -> (f64, f64) {
    if pts.len() < 2 {
        return (pts.first().map_or(0.0, |p| p.1), 0.0);
    }
    // Weighted least squares with weights 1/y².
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in pts {
        let w = 1.0 / (y * y);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    if det <= 0.0 {
        return (sy / sw, 0.0);
    }
    let beta = ((sw * sxy - sx * sy) / det).max(0.0);
    let a = (sy - beta * sx) / sw;
    (a, beta)
}

/// The head dimension of `name`'s tables nearest `d`, and the factor that scales a time
/// there to `d` (the bytes and FLOPs per head follow the head dimension).
fn nearest_head_dim(t: &KernelTables, name: &str, d: u32) -> Option<(String, f64)> {
    let mut dims: Vec<u32> = t
        .tables
        .iter()
        .filter(|x| x.name == name)
        .filter_map(|x| x.attr("head_dim").and_then(|v| v.parse().ok()))
        .collect();
    dims.sort_unstable();
    dims.dedup();
    let off = |x: u32| (f64::from(x).ln() - f64::from(d).ln()).abs();
    let best = dims
        .iter()
        .copied()
        .min_by(|&a, &b| off(a).total_cmp(&off(b)))?;
    Some((best.to_string(), f64::from(d) / f64::from(best)))
}

/// Decode attention over (batch, context) per layer and the prefill per-pair rate over
/// (prompts, length) per layer, both microseconds, for `hq` query and `hkv` KV heads per GPU of
/// head dimension `d` (MHA/GQA).
fn mha_grids(
    t: &KernelTables,
    mha: bool,
    d: u32,
    hq: f64,
    hkv: f64,
    kv: &str,
) -> Result<(Grid, Grid), String> {
    let family = if mha { "mha" } else { "gqa" };
    let (gen_d, gen_k) = nearest_head_dim(t, "generation_attention", d)
        .ok_or_else(|| format!("{}: no generation-attention table", t.meta.gpu))?;
    let gen_t = t
        .find(
            "generation_attention",
            &[("head_dim", &gen_d), ("kv", kv), ("family", family)],
        )
        .or_else(|| t.find("generation_attention", &[("head_dim", &gen_d), ("kv", kv)]))
        .or_else(|| t.find("generation_attention", &[("head_dim", &gen_d)]))
        .ok_or_else(|| {
            format!(
                "{}: no generation-attention table for head_dim {gen_d}",
                t.meta.gpu
            )
        })?;
    let decode = slice(gen_t.grid(), hkv, gen_k);
    let (ctx_d, ctx_k) = nearest_head_dim(t, "context_attention", d)
        .ok_or_else(|| format!("{}: no context-attention table", t.meta.gpu))?;
    let ctx = t
        .find(
            "context_attention",
            &[
                ("head_dim", &ctx_d),
                ("attn", "bfloat16"),
                ("kv", kv),
                ("family", family),
            ],
        )
        .or_else(|| {
            t.find(
                "context_attention",
                &[("head_dim", &ctx_d), ("kv", kv), ("family", family)],
            )
        })
        .or_else(|| {
            t.find(
                "context_attention",
                &[("head_dim", &ctx_d), ("family", family)],
            )
        })
        .or_else(|| t.find("context_attention", &[("head_dim", &ctx_d)]))
        .ok_or_else(|| {
            format!(
                "{}: no context-attention table for head_dim {ctx_d}",
                t.meta.gpu
            )
        })?;
    let prefill = per_pair(slice(ctx.grid(), hq, ctx_k), "isl");
    Ok((decode, prefill))
}

/// MLA's grids (the MLA tables, `heads` per attention-TP rank), as [`mha_grids`].
fn mla_grids(t: &KernelTables, hq: f64, kv: &str) -> Result<(Grid, Grid), String> {
    let find = |name: &str| {
        t.find(name, &[("kv", kv)])
            .or_else(|| t.find(name, &[]))
            .ok_or_else(|| {
                format!(
                    "{}: no {name} table: MLA models need the MLA tables (the GPU's AIConfigurator data lacks them)",
                    t.meta.gpu
                )
            })
    };
    let gen_t = find("generation_mla")?;
    let ctx = find("context_mla")?;
    Ok((
        slice(gen_t.grid(), hq, 1.0),
        per_pair(slice(ctx.grid(), hq, 1.0), "isl"),
    ))
}

/// MLA attention per layer by the roofline where the GPU has no MLA tables, on the grids
/// the tables would have given: a decode reads each sequence's latent (`kv_lora + rope`
/// elements per token) and computes the absorbed scores and values; a prefill computes the
/// decompressed attention. Each at the calibration's efficiency, above a 10 µs kernel floor
/// (the MLA tables' smallest entries on the GPUs that have them are 8–15 µs).
fn analytic_mla_grids(m: &ModelSpec, hq: f64, s: &Setup<'_>) -> (Grid, Grid) {
    use super::grid::Axis;
    let KvAttention::Mla {
        kv_lora_rank,
        qk_rope_head_dim,
        qk_nope_head_dim,
        v_head_dim,
        ..
    } = m.attention
    else {
        unreachable!("MLA grids of an MLA model")
    };
    let (r, rope, nope, dv) = (
        f64::from(kv_lora_rank),
        f64::from(qk_rope_head_dim),
        f64::from(qk_nope_head_dim),
        f64::from(v_head_dim),
    );
    let (pe, de, ke) = s.analytic;
    let floor_us = 10.0;
    let bs: Vec<f64> = (0..12).map(|i| f64::from(1u32 << i)).collect();
    let ctxs: Vec<f64> = (1..18).map(|i| f64::from(1u32 << i)).collect();
    let kv_bytes = if s.kv_dtype_bytes == 1 { 1.0 } else { 2.0 };
    let mut dec = Vec::new();
    for &b in &bs {
        for &c in &ctxs {
            let bytes = b * c * (r + rope) * kv_bytes;
            let flops = b * c * 2.0 * hq * (2.0 * r + rope);
            let t = (bytes / (s.hbm_bytes_per_s * ke)).max(flops / (s.peak_flops * de));
            dec.push(floor_us + t * 1e6);
        }
    }
    let isls: Vec<f64> = (0..16).map(|i| f64::from(1u32 << i)).collect();
    let mut pre = Vec::new();
    for &b in &bs[..9] {
        for &l in &isls {
            let flops = b * pairs(l, 0.0) * 2.0 * hq * (nope + rope + dv);
            let t = floor_us + flops / (s.peak_flops * pe) * 1e6;
            pre.push(t / (b * pairs(l, 0.0)));
        }
    }
    let axis = |name: &str, points: Vec<f64>| Axis {
        name: name.to_string(),
        points,
    };
    (
        Grid {
            axes: vec![axis("batch", bs.clone()), axis("context", ctxs)],
            values: dec,
        },
        Grid {
            axes: vec![axis("batch", bs[..9].to_vec()), axis("isl", isls)],
            values: pre,
        },
    )
}

/// The 2-D grid over `g`'s last two axes at `x` on its first axis (heads), times `k`.
fn slice(g: &Grid, x: f64, k: f64) -> Grid {
    let (b, c) = (&g.axes[1], &g.axes[2]);
    let mut values = Vec::with_capacity(b.points.len() * c.points.len());
    for &bv in &b.points {
        for &cv in &c.points {
            values.push(g.eval(&[x, bv, cv]) * k);
        }
    }
    Grid {
        axes: vec![b.clone(), c.clone()],
        values,
    }
}

/// A (batch, length) grid of prefill times as microseconds per (query, context) pair:
/// `t / (batch · pairs(length, 0))`. Per pair, the time is flat at long lengths (compute
/// bound), so the grid's linear rule above its last length holds it there rather than
/// extrapolating a quadratic cost linearly.
fn per_pair(mut g: Grid, len_axis: &str) -> Grid {
    let bs = g.axes[0].points.clone();
    let ls = g.axes[1].points.clone();
    debug_assert_eq!(g.axes[1].name, len_axis);
    let n = ls.len();
    for (i, &b) in bs.iter().enumerate() {
        for (j, &l) in ls.iter().enumerate() {
            g.values[i * n + j] /= b * pairs(l, 0.0);
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_curve_interpolates_clamps_and_extrapolates() {
        let c = Curve::new(vec![(1.0, 2.0), (3.0, 6.0), (5.0, 7.0)]);
        assert_eq!(c.eval(0.5), 2.0);
        assert_eq!(c.eval(2.0), 4.0);
        assert_eq!(c.eval(4.0), 6.5);
        assert_eq!(c.eval(7.0), 8.0);
    }

    /// The octave walk finds the segment a search over every point finds, at every size
    /// (below 1, within an octave of many points, past 2^63).
    #[test]
    fn the_octave_walk_is_the_search() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for case in 0..200 {
            let n = rng.random_range(2..60);
            let mut x = if case % 3 == 0 { 0.25 } else { 1.0 };
            let pts: Vec<(f64, f64)> = (0..n)
                .map(|_| {
                    x += if rng.random_bool(0.3) {
                        x * 3.0
                    } else {
                        rng.random_range(0.5..40.0)
                    };
                    (x, rng.random_range(0.0..10.0))
                })
                .collect();
            let c = Curve::new(pts.clone());
            let last = pts[n - 1].0;
            for _ in 0..300 {
                let v = rng.random_range(pts[0].0..last);
                let want = c.xs.partition_point(|&p| p <= v) - 1;
                assert_eq!(c.segment(v), want, "case {case}: x = {v}");
            }
            for v in [pts[0].0, last, last * 2.0, 0.0, 1e30] {
                let i = if v <= pts[0].0 || v >= last {
                    continue;
                } else {
                    c.segment(v)
                };
                assert_eq!(i, c.xs.partition_point(|&p| p <= v) - 1);
            }
        }
    }

    #[test]
    fn the_relative_line_recovers_a_line() {
        let pts: Vec<(f64, f64)> = (1..10)
            .map(|i| (f64::from(i), 2.0 + 0.5 * f64::from(i)))
            .collect();
        let (a, b) = relative_line(&pts);
        assert!((a - 2.0).abs() < 1e-9 && (b - 0.5).abs() < 1e-9, "{a} {b}");
    }

    /// DeepSeek-V3 at attention TP 8 on `gpu`'s built-in tables, routed experts priced
    /// elsewhere (as under expert parallelism), FP8 KV; with `experts` routed experts.
    fn deepseek(gpu: &str, experts: u32) -> (KernelStep, std::sync::Arc<KernelTables>) {
        deepseek_at(gpu, experts, 8)
    }

    /// [`deepseek`] at attention TP `attn_tp`.
    fn deepseek_at(
        gpu: &str,
        experts: u32,
        attn_tp: u32,
    ) -> (KernelStep, std::sync::Arc<KernelTables>) {
        deepseek_with(gpu, experts, attn_tp, false)
    }

    /// [`deepseek_at`], with the shared experts on their own stream where `dual_stream`.
    fn deepseek_with(
        gpu: &str,
        experts: u32,
        attn_tp: u32,
        dual_stream: bool,
    ) -> (KernelStep, std::sync::Arc<KernelTables>) {
        let mut m = crate::spec::preset("deepseek-v3").expect("a preset");
        m.moe.as_mut().expect("MoE").experts = experts;
        let t = crate::spec::kernels::builtin::tables(gpu).expect("built-in tables");
        let s = Setup {
            tables: &t,
            model: &m,
            attn_tp,
            experts_tp: None,
            dual_stream,
            kv_dtype_bytes: 1,
            allreduces: 0.0,
            span: None,
            hbm_bytes_per_s: 8e12,
            peak_flops: 2e15,
            analytic: (0.5, 0.5, 0.5),
        };
        (KernelStep::new(&s).expect("composes"), t)
    }

    /// sglang's DeepSeek MoE block runs the shared experts on one stream and the router with
    /// the routed experts on another up to 1,024 tokens entering the block
    /// (`DeepseekV2MoE.forward_normal_dual_stream`): the forward hides the shorter of the two.
    /// By hand from the H100 tables: 58 MoE layers of the shared expert's `gate_up`
    /// (2 × 2,048 / 8 outputs over 7,168) and `down` (7,168 over 2,048 / 8) in FP8 blocks, and
    /// the router, BF16, 256 outputs over 7,168.
    #[test]
    fn the_shared_experts_stream_hides_the_shorter_side_up_to_1024_tokens() {
        let (plain, t) = deepseek_with("h100-sxm", 256, 8, false);
        let (dual, _) = deepseek_with("h100-sxm", 256, 8, true);
        let g = |dtype: &str, m: f64, n: f64, k: f64| {
            t.find("gemm", &[("dtype", dtype)])
                .expect("a GEMM table")
                .grid()
                .eval(&[m, n, k])
                * 58.0
                * 1e-6
        };
        let shared = |x: f64| g("fp8_block", x, 512.0, 7168.0) + g("fp8_block", x, 7168.0, 256.0);
        let router = |x: f64| g("bfloat16", x, 256.0, 7168.0);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-12);
        for x in [1.0, 4.0, 64.0, 300.0, 1024.0] {
            // The flag moves nothing into or out of the per-token work.
            assert_eq!(plain.dense_s(x, true), dual.dense_s(x, true));
            assert_eq!(plain.dense_s(x, false), dual.dense_s(x, false));
            // Routed experts priced elsewhere for a second: the shared experts all hide.
            let hidden = dual.dual_stream_hidden_s(x, x, 1.0);
            assert!(close(hidden, shared(x)), "{x}: {hidden} vs {}", shared(x));
            // None elsewhere: the router alone runs beside them.
            let hidden = dual.dual_stream_hidden_s(x, x, 0.0);
            let want = shared(x).min(router(x));
            assert!(close(hidden, want), "{x}: {hidden} vs {want}");
            assert!(hidden > 0.0);
            assert_eq!(plain.dual_stream_hidden_s(x, x, 1.0), 0.0);
        }
        // Above 1,024 tokens entering the block (every DP rank's), in series again.
        assert_eq!(dual.dual_stream_hidden_s(4.0, 1025.0, 1.0), 0.0);
        assert!(dual.dual_stream_hidden_s(4.0, 1024.0, 1.0) > 0.0);
    }

    /// Which deployments run the second stream (sglang 3e4a39ee,
    /// `DeepseekV2ForCausalLM.determine_num_fused_shared_experts` and
    /// `DeepseekV2MoE.forward`): DeepSeek-V3's shape fuses its shared expert into the routed
    /// kernel unless experts are spread by EP; Kimi K2 (384 experts) never fuses; an
    /// all-to-all backend (DeepEP) takes `forward_deepep`; models without MLA or shared
    /// experts are not DeepSeek's block.
    #[test]
    fn the_second_stream_runs_where_sglang_does_not_fuse_the_shared_expert() {
        let v3 = crate::spec::preset("deepseek-v3").expect("a preset");
        let k2 = crate::spec::preset("kimi-k2").expect("a preset");
        assert!(!dual_stream_shared_experts(&v3, 1, false));
        assert!(dual_stream_shared_experts(&v3, 8, false));
        assert!(!dual_stream_shared_experts(&v3, 8, true));
        assert!(dual_stream_shared_experts(&k2, 1, false));
        assert!(!dual_stream_shared_experts(&k2, 32, true));
        for name in [
            "llama-3.1-8b",
            "qwen3-235b-a22b",
            "qwen3-next-80b-a3b",
            "kimi-linear-48b-a3b",
        ] {
            let m = crate::spec::preset(name).expect("a preset");
            assert!(!dual_stream_shared_experts(&m, 8, false), "{name}");
        }
    }

    /// On Blackwell a DeepSeek prefill's MLA is the shorter of the context module's eager
    /// wall time and its per-kernel composition (`q_b`, `kv_b`, the TRT-LLM MLA context
    /// kernel, `o`): the composition where the module sits on its host floor (short prompts,
    /// ~0.53 ms a layer on a B200), the module where it is the shorter; on Hopper, whose
    /// per-kernel table measures another kernel, the module alone.
    #[test]
    fn blackwell_prefill_mla_is_its_kernels_under_the_modules_host_floor() {
        let layers = 61.0;
        let us = |t: &KernelTables, name: &str, want: &[(&str, &str)], x: &[f64]| {
            t.find(name, want).expect(name).grid().eval(x) * layers * 1e-6
        };
        let composed = |t: &KernelTables, heads: f64, b: f64, n: f64| {
            let g =
                |m: f64, nn: f64, kk: f64| us(t, "gemm", &[("dtype", "fp8_block")], &[m, nn, kk]);
            g(b * n, heads * 192.0, 1536.0)
                + g(b * n, heads * 256.0, 512.0)
                + g(b * n, 7168.0, heads * 128.0)
                + us(t, "context_mla", &[("kv", "fp8")], &[heads, b, n])
        };
        let (k, t) = deepseek("b200", 256);
        for n in [256.0, 1024.0, 4096.0] {
            let want = composed(&t, 16.0, 1.0, n);
            let module = us(&t, "context_mla_module", &[], &[16.0, 1.0, n]);
            let got = k.prefill_attention_s(&[(n as u32, 0)]);
            assert!(
                (got / want - 1.0).abs() < 1e-9,
                "{n} tokens: {got} vs {want}"
            );
            assert!(
                got < 0.5 * module,
                "{n} tokens: {got} vs the module's {module}"
            );
        }
        // A cached prefix: the kernel's pairs over it and kv_b over every token.
        let with_prefix = k.prefill_attention_s(&[(1024, 3072)]);
        assert!(with_prefix > k.prefill_attention_s(&[(1024, 0)]));
        // The decode keeps the module: its projections are not charged twice.
        assert_eq!(k.mla_absorb_s(64.0), 0.0);
        assert_eq!(k.mla_decompress_s(1024.0), 0.0);
        // Where the composition is the longer, the module: GB200, one DP rank (128 heads),
        // 16 prompts of 2,048 tokens.
        let (g1, gb) = deepseek_at("gb200", 256, 1);
        let module = us(&gb, "context_mla_module", &[], &[128.0, 16.0, 2048.0]);
        assert!(composed(&gb, 128.0, 16.0, 2048.0) > module);
        let got = g1.prefill_attention_s(&[(2048, 0); 16]);
        assert!((got / module - 1.0).abs() < 1e-9, "{got} vs {module}");
        // Hopper: the module.
        let (h, ht) = deepseek("h200", 256);
        let module = us(&ht, "context_mla_module", &[], &[16.0, 1.0, 1024.0]);
        let got = h.prefill_attention_s(&[(1024, 0)]);
        assert!((got / module - 1.0).abs() < 1e-9, "{got} vs {module}");
    }

    /// The MoE router is priced from the BF16 GEMM table whatever the checkpoint's dtype:
    /// twice the experts adds the BF16 GEMMs' difference to the per-token curve.
    #[test]
    fn the_router_is_a_bf16_gemm() {
        let (a, t) = deepseek("b200", 256);
        let (b, _) = deepseek("b200", 512);
        let g = |dtype: &str, m: f64, n: f64| {
            t.find("gemm", &[("dtype", dtype)])
                .expect("a GEMM table")
                .grid()
                .eval(&[m, n, 7168.0])
                * 58.0
                * 1e-6
        };
        for m in [4.0, 128.0, 4096.0] {
            let got = b.dense_s(m, true) - a.dense_s(m, true);
            let want = g("bfloat16", m, 512.0) - g("bfloat16", m, 256.0);
            let fp8 = g("fp8_block", m, 512.0) - g("fp8_block", m, 256.0);
            assert!(
                (got - want).abs() < 1e-12,
                "{m}: {got} vs {want} (fp8 {fp8})"
            );
        }
    }

    #[test]
    fn causal_pairs() {
        assert_eq!(pairs(1.0, 0.0), 1.0);
        assert_eq!(pairs(4.0, 0.0), 10.0);
        assert_eq!(pairs(2.0, 3.0), 9.0);
    }
}
