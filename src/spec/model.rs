//! Model specifications: the architectural fields that decide KV/state layout, weight bytes and FLOPs.
//!
//! A [`ModelSpec`] is plain data. Presets carry the public figures of `docs/numbers.md` and
//! `docs/sglang-pd.md` §5; Hugging Face `config.json` files are imported by [`crate::spec::hf`].
//! Parameter counts are derived from the fields, so a preset and an imported config of the same
//! model agree by construction.

use serde::Serialize;

/// Elements of one FP4 KV block sharing one `uint8` scale (`scale_block_size = 16` in
/// sglang's `MHATokenToKVPoolFP4` / `MLATokenToKVPoolFP4`).
pub const FP4_KV_SCALE_BLOCK: u64 = 16;

/// How one KV element is stored, for the bytes a token takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvElem {
    /// Whole bytes per element (BF16 2, FP8 1).
    Bytes(u32),
    /// sglang's FP4 KV pool: E2M1 nibbles, two a byte, and one `uint8` scale per
    /// [`FP4_KV_SCALE_BLOCK`] elements — 4.5 bits an element.
    Fp4,
}

/// How a layer with attention keeps its KV cache.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KvAttention {
    /// Multi-head / grouped-query attention: a K row and a V row per KV head per token.
    Mha {
        /// Total KV heads of the model (`num_key_value_heads`).
        kv_heads: u32,
        /// Elements per K head.
        head_dim: u32,
        /// Elements per V head (equal to `head_dim` for every preset).
        v_head_dim: u32,
    },
    /// Multi-head latent attention (DeepSeek): one latent row per token per layer, replicated on
    /// every TP rank.
    Mla {
        /// Width of the compressed KV latent.
        kv_lora_rank: u32,
        /// Width of the decoupled rotary key part, stored beside the latent.
        qk_rope_head_dim: u32,
        /// Per-head query/key width without rope (FLOPs only).
        qk_nope_head_dim: u32,
        /// Per-head value width (FLOPs only).
        v_head_dim: u32,
        /// Rank of the query compression, when queries are compressed too.
        q_lora_rank: Option<u32>,
    },
}

/// Which recurrent mixer a hybrid model's non-attention layers use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MambaKind {
    /// Mamba2 (Nemotron-H).
    Mamba2,
    /// Gated DeltaNet (Qwen3-Next), mapped onto sglang's `Mamba2StateShape`.
    Gdn,
    /// Kimi Delta Attention (Kimi-Linear), sglang's `KimiLinearStateShape`: the fused
    /// `[q|k|v]` conv state is stored transposed, `[conv_kernel - 1, channels/tp]` per slot
    /// (`conv_slice_axis = 1`), each sub-block sharded on its own; the temporal state is
    /// `[heads/tp, head_dim, head_dim]` (`docs/sglang-pd.md` §1.4).
    Kda,
}

/// Recurrent-state geometry in sglang's `Mamba2StateShape` terms (`docs/sglang-pd.md` §1.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MambaSpec {
    /// Mixer family.
    pub kind: MambaKind,
    /// `intermediate_size` of the state shape (GDN: value heads × value head dim).
    pub intermediate_size: u32,
    /// Key groups (GDN: key heads), padded up to a multiple of TP by sglang.
    pub n_groups: u32,
    /// SSM heads (GDN: value heads); the temporal state is split over TP along this axis.
    pub num_heads: u32,
    /// Elements per SSM head (GDN: value head dim).
    pub head_dim: u32,
    /// SSM state size (GDN: key head dim).
    pub state_size: u32,
    /// Causal-convolution kernel width; the conv state keeps `conv_kernel - 1` columns.
    pub conv_kernel: u32,
    /// Unsharded widths of the conv sub-blocks (`[q|k|v]` for GDN); empty for Mamba2.
    pub conv_shard_groups: Vec<u32>,
    /// Bytes per conv-state element (`SGLANG_MAMBA_CONV_DTYPE`, bf16 by default).
    pub conv_dtype_bytes: u32,
    /// Bytes per SSM-state element (fp32 by default).
    pub ssm_dtype_bytes: u32,
}

/// Sliding-window attention layers of an SWA hybrid (gpt-oss): their KV lives in sglang's SWA
/// sub-pool (`SWAKVPool`), which keeps only the last `window` tokens of a request and is sent
/// as a `StateType.SWA` state component, not with the full-attention KV (`docs/sglang-pd.md`
/// docs/sglang-pd.md §1.1, §1.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SwaSpec {
    /// `sliding_window`, tokens.
    pub window: u32,
    /// Global ids of the sliding-window layers (a subset of `attention_layers`).
    pub layers: Vec<u32>,
}

/// A mixture-of-experts feed-forward block.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MoeSpec {
    /// Routed experts per MoE layer.
    pub experts: u32,
    /// Routed experts each token activates.
    pub active: u32,
    /// Intermediate width of one routed expert.
    pub expert_intermediate: u32,
    /// Intermediate width of the always-on shared expert(s), 0 when there is none.
    pub shared_intermediate: u32,
}

/// How one group of weights is stored as served.
///
/// Bits per weight include the format's scales where they are a fixed share of the weights:
/// NVFP4 (NVIDIA's ModelOpt format: FP4 E2M1 elements with one FP8 E4M3 scale per block of 16
/// along the reduction axis, plus one FP32 scale per tensor — `weight_scale` of shape
/// `[rows, cols / 16]` in `float8_e4m3fn` and a scalar `weight_scale_2`, as the NVFP4
/// checkpoints store them) is 4 + 8/16 = 4.5 bits a weight; the per-tensor scalar is
/// negligible. FP8 checkpoints' block scales (DeepSeek's one FP32 per 128 × 128 block) are
/// below 0.01 % and not counted: 8 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightDtype {
    /// 32-bit floats (a config whose `torch_dtype` is float32).
    Fp32,
    /// 16-bit floats (bf16 or fp16).
    Bf16,
    /// FP8 (e4m3), one byte a weight.
    Fp8,
    /// NVFP4: 4.5 bits a weight with its block scales.
    Nvfp4,
}

impl WeightDtype {
    /// Bits per weight as stored, scales included.
    pub fn bits(self) -> f64 {
        match self {
            Self::Fp32 => 32.0,
            Self::Bf16 => 16.0,
            Self::Fp8 => 8.0,
            Self::Nvfp4 => 4.5,
        }
    }

    /// Bytes per weight as stored, scales included.
    pub fn bytes(self) -> f64 {
        self.bits() / 8.0
    }

    /// The dtype whose storage is `bytes` whole bytes a weight (a config's `torch_dtype`).
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            4 => Some(Self::Fp32),
            2 => Some(Self::Bf16),
            1 => Some(Self::Fp8),
            _ => None,
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Bf16 => "bf16",
            Self::Fp8 => "fp8",
            Self::Nvfp4 => "nvfp4",
        }
    }
}

/// The storage of a model's weights: its routed experts, and everything else (attention and
/// dense projections, shared experts, router, norms, embedding and LM head). NVIDIA's NVFP4
/// checkpoints of DeepSeek quantize the transformer blocks' linear layers and keep the rest
/// in BF16; LMSYS's GB200 deployments ran "NVFP4 MoE" with FP8 attention — so the two differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WeightFormat {
    /// Everything but the routed experts.
    pub dense: WeightDtype,
    /// The routed experts of the MoE layers (equal to `dense` without MoE).
    pub experts: WeightDtype,
}

impl WeightFormat {
    /// Every weight stored alike.
    pub const fn uniform(d: WeightDtype) -> Self {
        Self {
            dense: d,
            experts: d,
        }
    }

    /// Whether every weight is stored alike.
    pub fn is_uniform(&self) -> bool {
        self.dense == self.experts
    }

    /// The storages this format uses (one when uniform).
    pub fn dtypes(&self) -> Vec<WeightDtype> {
        if self.is_uniform() {
            vec![self.dense]
        } else {
            vec![self.dense, self.experts]
        }
    }
}

/// Everything pdsim needs to know about a model. Layer ids are global (0-based).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelSpec {
    /// Preset name or the config file it came from.
    pub name: String,
    /// All decoder layers (for hybrids: attention, mixer and MLP blocks each count as one).
    pub num_layers: u32,
    /// Model width.
    pub hidden_size: u32,
    /// Query heads of the attention layers.
    pub q_heads: u32,
    /// KV cache form of the attention layers.
    pub attention: KvAttention,
    /// Global ids of the layers that hold KV cache.
    pub attention_layers: Vec<u32>,
    /// Recurrent mixer of a hybrid model.
    pub mamba: Option<MambaSpec>,
    /// Global ids of the layers that hold recurrent state.
    pub mamba_layers: Vec<u32>,
    /// Sliding-window layers of an SWA hybrid (they stay in `attention_layers` for FLOPs and
    /// weights; their KV is the SWA state component).
    pub swa: Option<SwaSpec>,
    /// Layers with a dense feed-forward block.
    pub dense_ffn_layers: u32,
    /// Intermediate width of the dense feed-forward block.
    pub dense_intermediate: u32,
    /// Whether the dense FFN is gated (SwiGLU: 3 matrices) or plain (relu²: 2 matrices).
    pub dense_ffn_gated: bool,
    /// Mixture-of-experts block, on `moe_layers` layers.
    pub moe: Option<MoeSpec>,
    /// Layers with a MoE block.
    pub moe_layers: u32,
    /// Vocabulary size (LM head FLOPs, embedding bytes).
    pub vocab_size: u32,
    /// Whether the LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// How the weights are stored as served: bits per weight and the tensor cores their
    /// GEMMs run on, for the routed experts and for everything else.
    pub weights: WeightFormat,
    /// Hidden-state bytes per element, which `kv_cache_dtype = "auto"` resolves to.
    pub activation_bytes: u32,
}

impl ModelSpec {
    /// Whether KV is an MLA latent.
    pub fn is_mla(&self) -> bool {
        matches!(self.attention, KvAttention::Mla { .. })
    }

    /// Whether the model has recurrent (mamba/GDN) layers.
    pub fn is_hybrid(&self) -> bool {
        (self.mamba.is_some() && !self.mamba_layers.is_empty()) || self.is_swa()
    }

    /// Whether some attention layers use a sliding window (an SWA hybrid).
    pub fn is_swa(&self) -> bool {
        self.swa.as_ref().is_some_and(|s| !s.layers.is_empty())
    }

    /// The attention layers whose KV is kept whole (every attention layer but the
    /// sliding-window ones): sglang's full-attention KV pool.
    pub fn full_attention_layers(&self) -> Vec<u32> {
        match &self.swa {
            Some(s) => self
                .attention_layers
                .iter()
                .copied()
                .filter(|l| !s.layers.contains(l))
                .collect(),
            None => self.attention_layers.clone(),
        }
    }

    /// Number of layers holding KV cache.
    pub fn kv_layers(&self) -> u32 {
        self.attention_layers.len() as u32
    }

    /// Total KV heads (1 for MLA, whose latent has no head axis).
    pub fn kv_heads(&self) -> u32 {
        match self.attention {
            KvAttention::Mha { kv_heads, .. } => kv_heads,
            KvAttention::Mla { .. } => 1,
        }
    }

    /// KV heads one rank stores at attention TP `tp`: `max(1, H_kv / tp)` (sglang
    /// `get_num_kv_heads`); heads are replicated once `tp > H_kv`.
    pub fn kv_heads_per_rank(&self, tp: u32) -> u32 {
        (self.kv_heads() / tp.max(1)).max(1)
    }

    /// KV elements one rank stores per token per KV layer (K and V together; the latent for MLA).
    pub fn kv_elems_per_token_layer_rank(&self, tp: u32) -> u64 {
        match self.attention {
            KvAttention::Mha {
                head_dim,
                v_head_dim,
                ..
            } => u64::from(self.kv_heads_per_rank(tp)) * u64::from(head_dim + v_head_dim),
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => u64::from(kv_lora_rank + qk_rope_head_dim),
        }
    }

    /// KV bytes per token held by one rank (all KV layers), at `dtype_bytes` per element.
    pub fn kv_bytes_per_token_rank(&self, tp: u32, dtype_bytes: u32) -> u64 {
        // Sliding-window layers keep a bounded window, not a row per context token.
        self.full_attention_layers().len() as u64
            * self.kv_elems_per_token_layer_rank(tp)
            * u64::from(dtype_bytes)
    }

    /// KV bytes per token held by one rank (all KV layers) stored as `elem`: whole bytes
    /// ([`ModelSpec::kv_bytes_per_token_rank`]), or sglang's FP4 pool with its scales
    /// ([`ModelSpec::kv_fp4_bytes_per_token_layer_rank`] a layer).
    pub fn kv_token_bytes_rank(&self, tp: u32, elem: KvElem) -> u64 {
        match elem {
            KvElem::Bytes(b) => self.kv_bytes_per_token_rank(tp, b),
            KvElem::Fp4 => {
                self.full_attention_layers().len() as u64
                    * self.kv_fp4_bytes_per_token_layer_rank(tp)
            }
        }
    }

    /// Bytes one rank's FP4 KV pool holds per token per layer, data and scales, as sglang
    /// allocates them (`mem_cache/memory_pool.py`, stored sglang ids 71289913139, 54903128358):
    /// `MHATokenToKVPoolFP4._create_buffers` gives K and V each `[n, head_dim // 2]` uint8
    /// (two E2M1 elements a byte) and a scale row of `(n · head_dim) // 16` uint8, `n` the
    /// rank's KV heads; `MLATokenToKVPoolFP4._create_buffers` the latent `[1, dim // 2]` and
    /// `dim // 16` scale bytes, `dim = kv_lora_rank + qk_rope_head_dim`. The profiler sizes the
    /// pool with the same bytes (`get_cell_size_per_token`: `cell_size // 2` plus the
    /// `kv_scale_buffer` term). Llama-3.1-8B at TP 1: 2 × (8 · 64 + 8 · 128 / 16) = 1,152 B a
    /// layer; DeepSeek-V3: 576 / 2 + 576 / 16 = 324 B.
    pub fn kv_fp4_bytes_per_token_layer_rank(&self, tp: u32) -> u64 {
        let row = |elems: u64| elems / 2 + elems / FP4_KV_SCALE_BLOCK;
        match self.attention {
            KvAttention::Mha {
                head_dim,
                v_head_dim,
                ..
            } => {
                let n = u64::from(self.kv_heads_per_rank(tp));
                row(n * u64::from(head_dim)) + row(n * u64::from(v_head_dim))
            }
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => row(u64::from(kv_lora_rank + qk_rope_head_dim)),
        }
    }

    /// KV bytes per token across all `tp` ranks of an instance: for MHA
    /// `layers × max(kv_heads, tp) × head_dim × 2 × dtype`; for MLA the latent times `tp`
    /// (every rank keeps a copy).
    pub fn kv_bytes_per_token_instance(&self, tp: u32, dtype_bytes: u32) -> u64 {
        self.kv_bytes_per_token_rank(tp, dtype_bytes) * u64::from(tp.max(1))
    }

    /// Weights of one attention layer (projections only), in parameters.
    fn attention_params(&self) -> f64 {
        let h = f64::from(self.hidden_size);
        let q = f64::from(self.q_heads);
        match self.attention {
            KvAttention::Mha {
                kv_heads,
                head_dim,
                v_head_dim,
            } => {
                let (kv, hd, vd) = (
                    f64::from(kv_heads),
                    f64::from(head_dim),
                    f64::from(v_head_dim),
                );
                h * q * hd + h * kv * (hd + vd) + q * vd * h
            }
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                qk_nope_head_dim,
                v_head_dim,
                q_lora_rank,
            } => {
                let (r, rope, nope, vd) = (
                    f64::from(kv_lora_rank),
                    f64::from(qk_rope_head_dim),
                    f64::from(qk_nope_head_dim),
                    f64::from(v_head_dim),
                );
                let q_proj = match q_lora_rank {
                    Some(ql) => h * f64::from(ql) + f64::from(ql) * q * (nope + rope),
                    None => h * q * (nope + rope),
                };
                q_proj + h * (r + rope) + r * q * (nope + vd) + q * vd * h
            }
        }
    }

    /// Weights of one recurrent mixer layer, in parameters (in/out projections and conv): what
    /// the kernel-table model prices as the mixer's projection GEMMs.
    pub fn mixer_params(&self) -> f64 {
        self.mamba_params()
    }

    /// Weights of one recurrent mixer layer, in parameters (in/out projections and conv).
    fn mamba_params(&self) -> f64 {
        let Some(m) = &self.mamba else { return 0.0 };
        let h = f64::from(self.hidden_size);
        if m.kind == MambaKind::Kda {
            // KDA (Kimi-Linear `KimiDeltaAttention`): q, k, v projections (the conv sub-blocks),
            // the output projection, beta (a scalar per head), and the low-rank (rank
            // `head_dim`) forget and output gates `f_a·f_b`, `g_a·g_b`; a depthwise conv per
            // channel.
            let width: f64 = m.conv_shard_groups.iter().map(|&w| f64::from(w)).sum();
            let value = f64::from(m.intermediate_size);
            let rank = f64::from(m.head_dim);
            return h * width
                + value * h
                + h * f64::from(m.num_heads)
                + 2.0 * (h * rank + rank * value)
                + width * f64::from(m.conv_kernel);
        }
        let i = f64::from(m.intermediate_size);
        let gs = f64::from(m.n_groups * m.state_size);
        let conv_dim = i + 2.0 * gs;
        h * (2.0 * i + 2.0 * gs + f64::from(m.num_heads))
            + i * h
            + conv_dim * f64::from(m.conv_kernel)
    }

    fn dense_ffn_params(&self) -> f64 {
        let mats = if self.dense_ffn_gated { 3.0 } else { 2.0 };
        mats * f64::from(self.hidden_size) * f64::from(self.dense_intermediate)
    }

    /// (total, active-per-token) parameters of one MoE block.
    fn moe_params(&self) -> (f64, f64) {
        let Some(m) = &self.moe else {
            return (0.0, 0.0);
        };
        let h = f64::from(self.hidden_size);
        let expert = 3.0 * h * f64::from(m.expert_intermediate);
        let shared = 3.0 * h * f64::from(m.shared_intermediate);
        let router = h * f64::from(m.experts);
        (
            router + shared + expert * f64::from(m.experts),
            router + shared + expert * f64::from(m.active),
        )
    }

    fn embedding_params(&self) -> f64 {
        let e = f64::from(self.vocab_size) * f64::from(self.hidden_size);
        if self.tie_word_embeddings { e } else { 2.0 * e }
    }

    /// Total parameters (all experts), which decide weight bytes.
    pub fn total_params(&self) -> f64 {
        let (moe_total, _) = self.moe_params();
        self.body_params_excluding_moe()
            + f64::from(self.moe_layers) * moe_total
            + self.embedding_params()
    }

    /// Parameters one token multiplies through (active experts, LM head; not the embedding
    /// lookup), which decide FLOPs: `2 × active_params` per token.
    pub fn active_params(&self) -> f64 {
        let (_, moe_active) = self.moe_params();
        let lm_head = f64::from(self.vocab_size) * f64::from(self.hidden_size);
        self.body_params_excluding_moe() + f64::from(self.moe_layers) * moe_active + lm_head
    }

    fn body_params_excluding_moe(&self) -> f64 {
        // One RMSNorm weight vector before every attention/mixer/FFN block, plus the final norm.
        let blocks = self.kv_layers() as usize
            + self.mamba_layers.len()
            + self.dense_ffn_layers as usize
            + self.moe_layers as usize;
        (blocks + 1) as f64 * f64::from(self.hidden_size)
            + f64::from(self.kv_layers()) * self.attention_params()
            + self.mamba_layers.len() as f64 * self.mamba_params()
            + f64::from(self.dense_ffn_layers) * self.dense_ffn_params()
    }

    /// Parameters of the routed experts over all MoE layers (gate, up and down matrices of
    /// every expert).
    pub fn routed_expert_params(&self) -> f64 {
        match &self.moe {
            Some(m) => {
                3.0 * f64::from(self.hidden_size)
                    * f64::from(m.expert_intermediate)
                    * f64::from(self.moe_layers)
                    * f64::from(m.experts)
            }
            None => 0.0,
        }
    }

    /// Weight bytes of the whole model as served.
    pub fn weight_bytes_total(&self) -> f64 {
        let w = &self.weights;
        if w.is_uniform() {
            return self.total_params() * w.dense.bytes();
        }
        let experts = self.routed_expert_params();
        (self.total_params() - experts) * w.dense.bytes() + experts * w.experts.bytes()
    }

    /// Attention FLOPs per (query token × context token) over all attention layers:
    /// `2 × q_heads × (qk_dim + v_dim)` per layer (QKᵀ and AV).
    pub fn attention_flops_per_token_pair(&self) -> f64 {
        let per_layer = match self.attention {
            KvAttention::Mha {
                head_dim,
                v_head_dim,
                ..
            } => 2.0 * f64::from(self.q_heads) * f64::from(head_dim + v_head_dim),
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => {
                // Absorbed MLA (sglang's decode path): scores and values run against the latent.
                2.0 * f64::from(self.q_heads) * f64::from(2 * kv_lora_rank + qk_rope_head_dim)
            }
        };
        f64::from(self.kv_layers()) * per_layer
    }

    /// Recurrent-scan FLOPs per token over all mixer layers (linear in length).
    pub fn mamba_scan_flops_per_token(&self) -> f64 {
        let Some(m) = &self.mamba else { return 0.0 };
        // State update and readout: ~6 FLOPs per state element per token (decay, outer product, dot).
        self.mamba_layers.len() as f64
            * 6.0
            * f64::from(m.num_heads)
            * f64::from(m.head_dim)
            * f64::from(m.state_size)
    }
}

/// Names of the built-in model presets.
pub const MODEL_PRESETS: &[&str] = &[
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen3-8b",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "nemotron-h-8b",
    "llama2-70b",
    "bloom-176b",
    "gpt-oss-120b",
    "qwen3-235b-a22b",
    "kimi-linear-48b-a3b",
    "kimi-k2",
];

/// The fields of a dense GQA transformer (a preset or an imported config).
pub(crate) struct Gqa {
    pub(crate) layers: u32,
    pub(crate) hidden: u32,
    pub(crate) q_heads: u32,
    pub(crate) kv_heads: u32,
    pub(crate) head_dim: u32,
    pub(crate) ffn: u32,
    pub(crate) vocab: u32,
}

/// A dense GQA transformer with a gated FFN on every layer, bf16 weights, untied embeddings.
pub(crate) fn dense_gqa(name: &str, g: Gqa) -> ModelSpec {
    let Gqa {
        layers,
        hidden,
        q_heads,
        kv_heads,
        head_dim,
        ffn,
        vocab,
    } = g;
    ModelSpec {
        name: name.to_string(),
        num_layers: layers,
        hidden_size: hidden,
        q_heads,
        attention: KvAttention::Mha {
            kv_heads,
            head_dim,
            v_head_dim: head_dim,
        },
        attention_layers: (0..layers).collect(),
        mamba: None,
        mamba_layers: Vec::new(),
        swa: None,
        dense_ffn_layers: layers,
        dense_intermediate: ffn,
        dense_ffn_gated: true,
        moe: None,
        moe_layers: 0,
        vocab_size: vocab,
        tie_word_embeddings: false,
        weights: WeightFormat::uniform(WeightDtype::Bf16),
        activation_bytes: 2,
    }
}

/// Layer ids of a hybrid pattern: `(mamba, attention, mlp)`.
pub type HybridLayers = (Vec<u32>, Vec<u32>, Vec<u32>);

/// Layer ids of each block kind in a Nemotron-H `hybrid_override_pattern`
/// (`M` mamba, `*` attention, `-` MLP): `(mamba, attention, mlp)`.
pub fn parse_hybrid_pattern(pattern: &str) -> Result<HybridLayers, char> {
    let (mut m, mut a, mut f) = (Vec::new(), Vec::new(), Vec::new());
    for (i, c) in pattern.chars().enumerate() {
        let i = i as u32;
        match c {
            'M' => m.push(i),
            '*' => a.push(i),
            '-' => f.push(i),
            other => return Err(other),
        }
    }
    Ok((m, a, f))
}

/// A built-in model by name, or `None`.
///
/// Sources: `docs/numbers.md` (model table), `docs/sglang-pd.md` §5, `models/SOURCES.md`
/// (Llama-3.1-8B and Qwen3-8B fields); Llama2-70B and BLOOM-176B from their public configs
/// (the models measured in `calibration/perf_model.csv`).
pub fn preset(name: &str) -> Option<ModelSpec> {
    Some(match name {
        "llama-3.1-8b" => dense_gqa(
            name,
            Gqa {
                layers: 32,
                hidden: 4096,
                q_heads: 32,
                kv_heads: 8,
                head_dim: 128,
                ffn: 14336,
                vocab: 128_256,
            },
        ),
        "llama-3.1-70b" => dense_gqa(
            name,
            Gqa {
                layers: 80,
                hidden: 8192,
                q_heads: 64,
                kv_heads: 8,
                head_dim: 128,
                ffn: 28672,
                vocab: 128_256,
            },
        ),
        "qwen3-8b" => dense_gqa(
            name,
            Gqa {
                layers: 36,
                hidden: 4096,
                q_heads: 32,
                kv_heads: 8,
                head_dim: 128,
                ffn: 12288,
                vocab: 151_936,
            },
        ),
        "llama2-70b" => dense_gqa(
            name,
            Gqa {
                layers: 80,
                hidden: 8192,
                q_heads: 64,
                kv_heads: 8,
                head_dim: 128,
                ffn: 28672,
                vocab: 32_000,
            },
        ),
        "bloom-176b" => {
            // BLOOM: 70 layers, hidden 14336, 112 heads of 128, plain MHA, 4×hidden GELU MLP.
            let mut s = dense_gqa(
                name,
                Gqa {
                    layers: 70,
                    hidden: 14336,
                    q_heads: 112,
                    kv_heads: 112,
                    head_dim: 128,
                    ffn: 4 * 14336,
                    vocab: 250_880,
                },
            );
            s.dense_ffn_gated = false;
            s.tie_word_embeddings = true;
            s
        }
        "deepseek-v3" => deepseek_v3(name),
        "qwen3-next-80b-a3b" => qwen3_next_80b(name),
        "nemotron-h-8b" => nemotron_h_8b(name),
        "gpt-oss-120b" => gpt_oss_120b(name),
        "qwen3-235b-a22b" => qwen3_235b_a22b(name),
        "kimi-linear-48b-a3b" => kimi_linear_48b_a3b(name),
        "kimi-k2" => kimi_k2(name),
        _ => return None,
    })
}

/// DeepSeek-V3 (671B MoE, MLA attention, FP8 weights).
fn deepseek_v3(name: &str) -> ModelSpec {
    ModelSpec {
        name: name.to_string(),
        num_layers: 61,
        hidden_size: 7168,
        q_heads: 128,
        attention: KvAttention::Mla {
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
            qk_nope_head_dim: 128,
            v_head_dim: 128,
            q_lora_rank: Some(1536),
        },
        attention_layers: (0..61).collect(),
        mamba: None,
        mamba_layers: Vec::new(),
        swa: None,
        dense_ffn_layers: 3,
        dense_intermediate: 18432,
        dense_ffn_gated: true,
        moe: Some(MoeSpec {
            experts: 256,
            active: 8,
            expert_intermediate: 2048,
            shared_intermediate: 2048,
        }),
        moe_layers: 58,
        vocab_size: 129_280,
        tie_word_embeddings: false,
        weights: WeightFormat::uniform(WeightDtype::Fp8),
        activation_bytes: 2,
    }
}

/// Kimi-K2 (`moonshotai/Kimi-K2-Instruct`, modified MIT): DeepSeek-V3's architecture — sglang
/// serves it with `DeepseekV3ForCausalLM` — at 1.04T parameters, 32B active: 61 layers (the
/// first dense, 18432 wide), MLA with 64 query heads (DeepSeek-V3 has 128), 384 routed experts
/// of 2048 with one shared, 8 active, vocabulary 163,840; block-FP8 weights.
/// `scenarios/models/kimi-k2-instruct.config.json` (reconstructed; `src/spec/hf` pins it).
fn kimi_k2(name: &str) -> ModelSpec {
    let mut s = deepseek_v3(name);
    s.q_heads = 64;
    s.dense_ffn_layers = 1;
    s.moe_layers = 60;
    s.moe = Some(MoeSpec {
        experts: 384,
        active: 8,
        expert_intermediate: 2048,
        shared_intermediate: 2048,
    });
    s.vocab_size = 163_840;
    s
}

/// Qwen3-Next-80B-A3B: GDN linear attention with full attention every 4th layer, MoE.
fn qwen3_next_80b(name: &str) -> ModelSpec {
    {
        // Full attention every 4th layer: ids 3, 7, ..., 47; GDN elsewhere.
        let attention_layers: Vec<u32> = (0..48).filter(|l| (l + 1) % 4 == 0).collect();
        let mamba_layers: Vec<u32> = (0..48).filter(|l| (l + 1) % 4 != 0).collect();
        ModelSpec {
            name: name.to_string(),
            num_layers: 48,
            hidden_size: 2048,
            q_heads: 16,
            attention: KvAttention::Mha {
                kv_heads: 2,
                head_dim: 256,
                v_head_dim: 256,
            },
            attention_layers,
            mamba: Some(MambaSpec {
                kind: MambaKind::Gdn,
                intermediate_size: 32 * 128,
                n_groups: 16,
                num_heads: 32,
                head_dim: 128,
                state_size: 128,
                conv_kernel: 4,
                conv_shard_groups: vec![16 * 128, 16 * 128, 32 * 128],
                conv_dtype_bytes: 2,
                ssm_dtype_bytes: 4,
            }),
            mamba_layers,
            swa: None,
            dense_ffn_layers: 0,
            dense_intermediate: 0,
            dense_ffn_gated: true,
            moe: Some(MoeSpec {
                experts: 512,
                active: 10,
                expert_intermediate: 512,
                shared_intermediate: 512,
            }),
            moe_layers: 48,
            vocab_size: 151_936,
            tie_word_embeddings: false,
            weights: WeightFormat::uniform(WeightDtype::Bf16),
            activation_bytes: 2,
        }
    }
}

/// gpt-oss-120b (OpenAI, Apache-2.0), from its public `config.json`
/// (`scenarios/models/gpt-oss-120b.config.json`): 36 layers alternating sliding-window (128
/// tokens, even layers) and full attention, 64 query heads, 8 KV heads of 64, MoE with 128
/// experts of width 2880, 4 active per token. The checkpoint stores the experts in MXFP4
/// (4.25 bits a weight) and the rest in bf16; pdsim counts 1 byte a weight and the FP8 peak
/// (about 1.9× the real 63 GB checkpoint: size the GPUs accordingly). [`WeightDtype`] could
/// say MXFP4 now; the preset keeps its byte so that the gpt-oss scenarios keep their results
/// (an MXFP4 entry and its Hopper kernels are a follow-up).
fn gpt_oss_120b(name: &str) -> ModelSpec {
    ModelSpec {
        name: name.to_string(),
        num_layers: 36,
        hidden_size: 2880,
        q_heads: 64,
        attention: KvAttention::Mha {
            kv_heads: 8,
            head_dim: 64,
            v_head_dim: 64,
        },
        attention_layers: (0..36).collect(),
        mamba: None,
        mamba_layers: Vec::new(),
        swa: Some(SwaSpec {
            window: 128,
            // `layer_types`: "sliding_attention" on even layers, "full_attention" on odd.
            layers: (0..36).filter(|l| l % 2 == 0).collect(),
        }),
        dense_ffn_layers: 0,
        dense_intermediate: 0,
        dense_ffn_gated: true,
        moe: Some(MoeSpec {
            experts: 128,
            active: 4,
            expert_intermediate: 2880,
            shared_intermediate: 0,
        }),
        moe_layers: 36,
        vocab_size: 201_088,
        tie_word_embeddings: false,
        weights: WeightFormat::uniform(WeightDtype::Fp8),
        activation_bytes: 2,
    }
}

/// Nemotron-H-8B: Mamba2 hybrid with MLP and attention layers by its pattern.
fn nemotron_h_8b(name: &str) -> ModelSpec {
    {
        let (mamba_layers, attention_layers, mlp) =
            parse_hybrid_pattern("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-")
                .expect("the preset pattern is valid");
        ModelSpec {
            name: name.to_string(),
            num_layers: 52,
            hidden_size: 4096,
            q_heads: 32,
            attention: KvAttention::Mha {
                kv_heads: 8,
                head_dim: 128,
                v_head_dim: 128,
            },
            attention_layers,
            mamba: Some(MambaSpec {
                kind: MambaKind::Mamba2,
                intermediate_size: 128 * 64,
                n_groups: 8,
                num_heads: 128,
                head_dim: 64,
                state_size: 128,
                conv_kernel: 4,
                conv_shard_groups: Vec::new(),
                conv_dtype_bytes: 2,
                ssm_dtype_bytes: 4,
            }),
            mamba_layers,
            swa: None,
            dense_ffn_layers: mlp.len() as u32,
            dense_intermediate: 21504,
            dense_ffn_gated: false,
            moe: None,
            moe_layers: 0,
            vocab_size: 131_072,
            tie_word_embeddings: false,
            weights: WeightFormat::uniform(WeightDtype::Bf16),
            activation_bytes: 2,
        }
    }
}

// Issue 11's large MoE presets. Each equals, field for field but `name`, what
// `crate::spec::hf` imports from the config copied into `scenarios/models/` (a test there pins it).

/// Qwen3-235B-A22B (`Qwen/Qwen3-235B-A22B`, Apache-2.0): 94 layers of GQA attention (64 query
/// heads, 4 KV heads of 128) and a MoE block on every layer (128 experts of width 1536, 8
/// active, no shared expert); bf16 weights. `scenarios/models/qwen3-235b-a22b.config.json`.
fn qwen3_235b_a22b(name: &str) -> ModelSpec {
    let mut s = dense_gqa(
        name,
        Gqa {
            layers: 94,
            hidden: 4096,
            q_heads: 64,
            kv_heads: 4,
            head_dim: 128,
            ffn: 12288,
            vocab: 151_936,
        },
    );
    // `decoder_sparse_step = 1`, `mlp_only_layers = []`: every layer is MoE, none dense; the
    // dense width only matters where a layer has a dense MLP (as the importer records it).
    s.dense_ffn_layers = 0;
    s.dense_intermediate = 0;
    s.moe = Some(MoeSpec {
        experts: 128,
        active: 8,
        expert_intermediate: 1536,
        shared_intermediate: 0,
    });
    s.moe_layers = 94;
    s
}

/// The 0-based ids of Kimi-Linear's layers from its 1-based `kda_layers` list (sglang
/// `KimiLinearConfig.is_kda_layer`: `(layer_idx + 1) in kda_layers`): `(kda, full attention)`.
pub(crate) fn kimi_layer_ids(layers: u32, kda_one_based: &[u32]) -> (Vec<u32>, Vec<u32>) {
    (0..layers).partition(|l| kda_one_based.contains(&(l + 1)))
}

/// Kimi-Linear-48B-A3B (`moonshotai/Kimi-Linear-48B-A3B-Instruct`, MIT): 27 layers, 7 of them
/// MLA full attention (1-based 4, 8, …, 24, 27) and 20 KDA linear attention (32 heads of 128,
/// short conv 4); MoE (256 experts of 1024, 8 active, 1 shared) on every layer after the first,
/// which is dense (9216). `scenarios/models/kimi-linear-48b-a3b.config.json` (reconstructed).
fn kimi_linear_48b_a3b(name: &str) -> ModelSpec {
    let kda_one_based: Vec<u32> = (1..=26).filter(|l| l % 4 != 0).collect();
    let (mamba_layers, attention_layers) = kimi_layer_ids(27, &kda_one_based);
    ModelSpec {
        name: name.to_string(),
        num_layers: 27,
        hidden_size: 2304,
        q_heads: 32,
        attention: KvAttention::Mla {
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
            qk_nope_head_dim: 128,
            v_head_dim: 128,
            q_lora_rank: None,
        },
        attention_layers,
        mamba: Some(MambaSpec {
            kind: MambaKind::Kda,
            intermediate_size: 32 * 128,
            n_groups: 32,
            num_heads: 32,
            head_dim: 128,
            state_size: 128,
            conv_kernel: 4,
            // `KimiLinearStateShape.conv_shard_groups = [proj_size, proj_k_size, proj_k_size]`.
            conv_shard_groups: vec![32 * 128, 32 * 128, 32 * 128],
            conv_dtype_bytes: 2,
            ssm_dtype_bytes: 4,
        }),
        mamba_layers,
        swa: None,
        dense_ffn_layers: 1,
        dense_intermediate: 9216,
        dense_ffn_gated: true,
        moe: Some(MoeSpec {
            experts: 256,
            active: 8,
            expert_intermediate: 1024,
            shared_intermediate: 1024,
        }),
        moe_layers: 26,
        vocab_size: 163_840,
        tie_word_embeddings: false,
        weights: WeightFormat::uniform(WeightDtype::Bf16),
        activation_bytes: 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_bytes_per_token_match_published_table() {
        // docs/numbers.md, "KV bytes per token (bf16, whole model)", at TP 1.
        let cases = [
            ("llama-3.1-8b", 131_072),
            ("llama-3.1-70b", 327_680),
            ("qwen3-8b", 147_456),
            ("qwen3-next-80b-a3b", 24_576),
            ("nemotron-h-8b", 16_384),
        ];
        for (name, bytes) in cases {
            let m = preset(name).unwrap();
            assert_eq!(m.kv_bytes_per_token_instance(1, 2), bytes, "{name}");
        }
        // MLA latent: 61 × 576 × 2 = 70,272 per rank.
        assert_eq!(
            preset("deepseek-v3").unwrap().kv_bytes_per_token_rank(8, 2),
            70_272
        );
    }

    #[test]
    fn heads_replicate_once_tp_exceeds_kv_heads() {
        let m = preset("llama-3.1-8b").unwrap();
        // layers × max(kv_heads, tp) × head_dim × 2 × dtype.
        assert_eq!(m.kv_bytes_per_token_instance(16, 2), 32 * 16 * 128 * 2 * 2);
        assert_eq!(m.kv_heads_per_rank(16), 1);
    }

    #[test]
    fn parameter_counts_are_near_the_published_sizes() {
        // Published sizes: 8.0B, 70.6B, 8.2B, 671B total / 37B active, 80B total / 3B active.
        let near = |x: f64, want: f64, tol: f64| (x / want - 1.0).abs() < tol;
        let p = |n: &str| preset(n).unwrap();
        assert!(near(p("llama-3.1-8b").total_params(), 8.03e9, 0.02));
        assert!(near(p("llama-3.1-70b").total_params(), 70.6e9, 0.02));
        assert!(near(p("qwen3-8b").total_params(), 8.2e9, 0.03));
        assert!(near(p("deepseek-v3").total_params(), 671e9, 0.03));
        assert!(near(p("deepseek-v3").active_params(), 37e9, 0.06));
        assert!(near(p("qwen3-next-80b-a3b").total_params(), 80e9, 0.05));
        assert!(near(p("qwen3-next-80b-a3b").active_params(), 3.0e9, 0.25));
        assert!(near(p("nemotron-h-8b").total_params(), 8.1e9, 0.08));
        assert!(near(p("bloom-176b").total_params(), 176e9, 0.03));
    }

    #[test]
    fn hybrid_layer_sets_follow_the_published_patterns() {
        let q = preset("qwen3-next-80b-a3b").unwrap();
        assert_eq!(q.kv_layers(), 12);
        assert_eq!(q.attention_layers[0], 3);
        assert_eq!(q.mamba_layers.len(), 36);
        let n = preset("nemotron-h-8b").unwrap();
        assert_eq!(n.attention_layers, vec![7, 18, 29, 40]);
        assert_eq!(n.mamba_layers.len(), 24);
        assert_eq!(n.dense_ffn_layers, 24);
    }

    #[test]
    fn every_listed_preset_exists() {
        for name in MODEL_PRESETS {
            assert!(preset(name).is_some(), "{name}");
        }
        assert!(preset("gpt-5").is_none());
    }

    #[test]
    fn moe_preset_parameter_counts_are_near_the_published_sizes() {
        // Published: Qwen3-235B-A22B 235B total / 22B active; Kimi-Linear 48B / 3B active.
        let near = |x: f64, want: f64, tol: f64| (x / want - 1.0).abs() < tol;
        let q = preset("qwen3-235b-a22b").unwrap();
        assert!(near(q.total_params(), 235e9, 0.02), "{}", q.total_params());
        assert!(near(q.active_params(), 22e9, 0.05), "{}", q.active_params());
        let k = preset("kimi-linear-48b-a3b").unwrap();
        assert!(near(k.total_params(), 48e9, 0.05), "{}", k.total_params());
        assert!(near(k.active_params(), 3e9, 0.2), "{}", k.active_params());
    }

    /// Kimi-K2: "1 T total parameters, 32 B activated" (Moonshot's model card).
    #[test]
    fn kimi_k2_has_its_published_size() {
        let near = |x: f64, want: f64, tol: f64| (x / want - 1.0).abs() < tol;
        let k = preset("kimi-k2").unwrap();
        assert!(
            near(k.total_params(), 1.04e12, 0.02),
            "{}",
            k.total_params()
        );
        assert!(near(k.active_params(), 32e9, 0.06), "{}", k.active_params());
        // MLA latent as DeepSeek-V3's: 61 layers × 576 × 2 bytes a token, every rank.
        assert_eq!(k.kv_bytes_per_token_rank(8, 2), 70_272);
        assert_eq!(k.weights, WeightFormat::uniform(WeightDtype::Fp8));
    }

    #[test]
    fn kimi_layer_sets_follow_the_config() {
        let k = preset("kimi-linear-48b-a3b").unwrap();
        assert_eq!(k.attention_layers, vec![3, 7, 11, 15, 19, 23, 26]);
        assert_eq!(k.mamba_layers.len(), 20);
        assert_eq!(k.mamba_layers[..4], [0, 1, 2, 4]);
        assert!(k.is_mla() && k.is_hybrid());
        // MLA latent over the 7 full-attention layers: 7 × 576 × 2 bytes a token, every rank.
        assert_eq!(k.kv_bytes_per_token_rank(4, 2), 8064);
    }
}
