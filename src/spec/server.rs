//! sglang server arguments that pdsim models, by their flag names with `_` for `-`.

use serde::Serialize;

/// The launch arguments of one sglang instance that matter to PD transfer and capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerArgs {
    /// `--tp-size`: GPUs per instance, per pipeline stage with `pp_size` > 1.
    pub tp_size: u32,
    /// Attention TP (`tp_size / dp` in sglang); defaults to `tp_size`.
    pub attn_tp_size: u32,
    /// `--page-size`: tokens per KV page.
    pub page_size: u32,
    /// `--kv-cache-dtype` as the flag string; sglang compares peers by this string.
    pub kv_cache_dtype: String,
    /// `--enable-unified-memory`.
    pub enable_unified_memory: bool,
    /// `--chunked-prefill-size`: most tokens in one prefill forward.
    pub chunked_prefill_size: u32,
    /// `--max-prefill-tokens`: most tokens in one prefill batch.
    pub max_prefill_tokens: u32,
    /// `--mem-fraction-static`: the share of HBM for weights and KV cache.
    pub mem_fraction_static: f64,
    /// `--max-running-requests`: cap on a decode batch (`None`: bounded by memory only).
    pub max_running_requests: Option<u32>,
    /// Prefix (radix) cache on a prefill instance: `None` when `--disable-radix-cache`,
    /// otherwise its capacity in tokens (`None` inside: the instance's KV capacity).
    pub radix_cache: Option<Option<u64>>,
    /// `--quantization` (`None`: the weights as the checkpoint stores them). Left out of
    /// results when `None`, so that scenarios which never set it keep their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Speculative decoding (`--speculative-algorithm` and its flags, resolved as sglang does:
    /// `spec::speculative`); `None` when off. Left out of results when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<crate::spec::speculative::SpeculativeArgs>,
    /// `--mamba-ssm-dtype` as the flag string (`float32`, `bfloat16`, `float16`), when set:
    /// the dtype of a hybrid model's temporal (SSM) state, applied to the served model's
    /// `MambaSpec::ssm_dtype_bytes` where the server is built (`None`: the model's own,
    /// `mamba_ssm_dtype` in its config, FP32 by default). Left out of results when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_ssm_dtype: Option<String>,
    /// `--pp-size`: pipeline stages, each `tp_size` GPUs holding a contiguous range of layers
    /// ([`pp_indices`]); 1 without pipeline parallelism. pdsim takes it on PD prefill servers
    /// only (`docs/sglang-pd.md` §26.4). Left out of results when 1, so scenarios which never
    /// set it keep their bytes.
    #[serde(skip_serializing_if = "is_one")]
    pub pp_size: u32,
    /// `--pp-async-batch-depth`: micro-batches a PP prefill keeps in flight beyond `pp_size`
    /// (sglang's `pp_loop_size = pp_size + pp_async_batch_depth`, default 0;
    /// `sglang::pipeline`). Left out of results when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pp_async_batch_depth: u32,
    /// `--dcp-size`: decode context parallelism, the ranks of each TP group that split a
    /// request's KV tokens among them (token `p` on DCP rank `p % dcp_size`, at local slot
    /// `p / dcp_size`; a rank's DCP rank is `tp_rank % dcp_size`); 1 without it. pdsim takes it
    /// on PD decode servers of MLA models only (`docs/sglang-pd.md` §28). Left out of results
    /// when 1, so scenarios which never set it keep their bytes.
    #[serde(skip_serializing_if = "is_one")]
    pub dcp_size: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// `[start, end)`: the layers pipeline stage `pp_rank` of `pp_size` holds, as sglang's
/// `get_pp_indices` (`python/sglang/srt/distributed/utils.py`) splits `num_layers` without
/// `SGLANG_PP_LAYER_PARTITION`: `num_layers // pp_size` each, and the last
/// `num_layers % pp_size` stages one more (e.g. 32 layers over 3 stages: 10, 11, 11).
pub fn pp_indices(num_layers: u32, pp_rank: u32, pp_size: u32) -> (u32, u32) {
    let pp = pp_size.max(1);
    let (base, rem) = (num_layers / pp, num_layers % pp);
    if pp_rank >= pp - rem {
        let start = pp_rank * (base + 1) - (pp - rem);
        (start, start + base + 1)
    } else {
        (pp_rank * base, pp_rank * base + base)
    }
}

/// `--mamba-ssm-dtype`'s choices and their bytes per element (sglang `server_args.py`).
pub const MAMBA_SSM_DTYPES: [(&str, u32); 3] = [("float32", 4), ("bfloat16", 2), ("float16", 2)];

/// Bytes per element of a `--mamba-ssm-dtype` value, or `None` for one sglang does not take.
pub fn mamba_ssm_dtype_bytes(s: &str) -> Option<u32> {
    MAMBA_SSM_DTYPES.iter().find(|(n, _)| *n == s).map(|x| x.1)
}

/// The one check of a `--page-size` (a scenario's `page_size`, `pdsim layout --page-size`, a
/// linted launch line): at least one token per page, since sglang's paged allocator divides
/// token counts by it. The message says what is valid.
pub fn check_page_size(page_size: u32) -> Result<(), &'static str> {
    if page_size == 0 {
        Err("must be ≥ 1 token, e.g. 1, 16 or 64")
    } else {
        Ok(())
    }
}

/// `--quantization` methods pdsim models, as the key takes them.
pub const QUANTIZATIONS: &[&str] = &["fp8", "modelopt_fp4"];

/// `--quantization`: how sglang quantizes the weights it loads (`server_args.py`
/// `QUANTIZATION_CHOICES`). Modelled:
/// * `fp8`: sglang's `Fp8Config` quantizes a BF16 checkpoint's linear and MoE weights to FP8
///   (e4m3) when it loads them (`layers/quantization/fp8.py`, online quantization: one byte a
///   weight), and runs the GEMMs on FP8 tensor cores where the GPU has them (Hopper,
///   Blackwell, MI300X); on an A100 it falls back to a weight-only FP8 kernel (Marlin) with
///   BF16 math.
/// * `modelopt_fp4`: an NVFP4 checkpoint quantized by NVIDIA's ModelOpt
///   (`layers/quantization/modelopt_quant.py`, `ModelOptFp4Config`: `quant_algo = "NVFP4"`,
///   `group_size = 16`, FP8 E4M3 block scales): W4A4 GEMMs on FP4 tensor cores, which only
///   Blackwell has (`get_min_capability` is 100; pdsim refuses it elsewhere). sglang does not
///   quantize to FP4 online: the flag names a pre-quantized checkpoint (e.g.
///   `nvidia/DeepSeek-R1-0528-FP4`).
///
/// The other methods (AWQ/GPTQ int4, bitsandbytes, GGUF, MXFP4, w8a8 int8, …) need kernels
/// whose speed pdsim has no figures for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantization {
    /// `fp8`: FP8 weights, one byte each.
    Fp8,
    /// `modelopt_fp4`: NVFP4 weights, 4.5 bits each with their block scales.
    ModeloptFp4,
}

impl Quantization {
    /// The method a flag value names, or `None` where pdsim does not model it.
    pub fn parse(v: &str) -> Option<Self> {
        match v {
            "fp8" => Some(Self::Fp8),
            "modelopt_fp4" => Some(Self::ModeloptFp4),
            _ => None,
        }
    }

    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fp8 => "fp8",
            Self::ModeloptFp4 => "modelopt_fp4",
        }
    }

    /// `model` as a server with this flag loads it. The weight bytes drive the weight memory
    /// (and so the KV pool left over), the weight-streaming time of a step, and the peak of
    /// its GEMMs (`compute::StepModel::peak_flops_for`). Activations and a KV cache of
    /// `kv_cache_dtype = "auto"` stay the model's dtype, as in sglang.
    /// * `fp8`: what a config's `quantization_config` with `quant_method = "fp8"` gives
    ///   (`spec::hf`): every weight one byte, the embedding and LM head too (sglang keeps
    ///   those in BF16: on an 8B model with a 128k vocabulary that is ~1 GB of weights too few).
    /// * `modelopt_fp4`: the routed experts in NVFP4 and the rest as the model stores it (a
    ///   MoE model's NVFP4 checkpoint — NVIDIA's DeepSeek ones — keeps attention out of FP4:
    ///   sglang serves it in FP8 with `SGLANG_NVFP4_CKPT_FP8_GEMM_IN_ATTN`, LMSYS's "FP8
    ///   attention, NVFP4 MoE"; the `deepseek-v3` preset is FP8 already); a dense model's
    ///   every linear layer in NVFP4 (its embedding and LM head counted alike, as `fp8` does).
    pub fn apply(self, model: &mut crate::spec::ModelSpec) {
        use crate::spec::model::{WeightDtype, WeightFormat};
        match self {
            Self::Fp8 => model.weights = WeightFormat::uniform(WeightDtype::Fp8),
            Self::ModeloptFp4 if model.moe.is_some() => model.weights.experts = WeightDtype::Nvfp4,
            Self::ModeloptFp4 => model.weights = WeightFormat::uniform(WeightDtype::Nvfp4),
        }
    }
}

/// KV dtype flag values sglang accepts, and what pdsim knows of them.
pub const KV_CACHE_DTYPES: &[&str] = &[
    "auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1",
];

/// Whether `--kv-cache-dtype v` selects sglang's FP4 KV pool (`fp4_e2m1`: "only mxfp4",
/// "supported for CUDA 12.8+ and PyTorch 2.8.0+" in `server_args.py`'s help): each K, V (MHA,
/// `MHATokenToKVPoolFP4`) or latent (MLA, `MLATokenToKVPoolFP4`) row stored as packed E2M1
/// nibbles, two elements a byte, beside a `uint8` scale buffer of one byte per 16 elements
/// (`mem_cache/memory_pool.py`, stored sglang ids 71289913139 and 54903128358; docs/sglang-pd.md §29).
pub fn is_fp4_kv(v: &str) -> bool {
    v == "fp4_e2m1"
}

/// Why a KV dtype sglang accepts is not one pdsim models, for the error that refuses it;
/// `None` for values sglang does not know either.
///
/// Later sglang renamed its FP4 KV cache: `fp4_e2m1` raises "deprecated" there, and `nvfp4` /
/// `fp4_mx_block16` pick a recipe (`KV_CACHE_QUANT_REGISTRY`: NVFP4's FP8 E4M3 block scales
/// and a per-tensor global scale) whose buffers and PD registration pdsim has not read; the
/// version pdsim models is `fp4_e2m1` (docs/sglang-pd.md §29).
pub fn unmodelled_kv_dtype(v: &str) -> Option<&'static str> {
    matches!(v, "nvfp4" | "fp4_mx_block16").then_some(
        "later sglang's recipe-based FP4 KV cache (KV_CACHE_QUANT_REGISTRY: nvfp4, fp4_mx_block16) is not modelled: pdsim has not read its pools' buffers and PD registration; fp4_e2m1 (MHATokenToKVPoolFP4 / MLATokenToKVPoolFP4) is, or use fp8_e4m3",
    )
}

impl ServerArgs {
    /// sglang's defaults (`ServerArgs` in `server_args.py`) for the flags pdsim reads, at TP
    /// `tp` (attention TP alike), `page_size` tokens a page and `--kv-cache-dtype`
    /// `kv_cache_dtype`; the radix cache on at its default size.
    pub fn sglang_defaults(tp: u32, page_size: u32, kv_cache_dtype: &str) -> Self {
        Self {
            tp_size: tp,
            attn_tp_size: tp,
            page_size,
            kv_cache_dtype: kv_cache_dtype.to_string(),
            enable_unified_memory: false,
            chunked_prefill_size: 8192,
            max_prefill_tokens: 16384,
            mem_fraction_static: 0.85,
            max_running_requests: None,
            radix_cache: Some(None),
            quantization: None,
            speculative: None,
            mamba_ssm_dtype: None,
            pp_size: 1,
            pp_async_batch_depth: 0,
            dcp_size: 1,
        }
    }

    /// Tokens one KV page id holds on this server: `page_size`, times `dcp_size` on a decode
    /// with context parallelism, whose allocator hands out sglang's widened virtual pages of
    /// `page_size × dcp_size` tokens, each rank keeping `page_size` of them in its own
    /// physical page of the same id (`build_dcp_token_transfer_plan`: `virtual_page_size =
    /// physical_page_size * dcp_size`).
    pub fn tokens_per_page(&self) -> u32 {
        self.page_size * self.dcp_size.max(1)
    }

    /// GPUs one instance takes: `tp_size` per pipeline stage, `tp_size × pp_size`.
    pub fn gpus(&self) -> u32 {
        self.tp_size * self.pp_size.max(1)
    }

    /// The most layers one pipeline stage holds of a model of `num_layers` layers (all of
    /// them without PP): what bounds a stage's GPU memory ([`pp_indices`]).
    pub fn max_stage_layers(&self, num_layers: u32) -> u32 {
        (0..self.pp_size.max(1))
            .map(|r| {
                let (a, b) = pp_indices(num_layers, r, self.pp_size);
                b - a
            })
            .max()
            .unwrap_or(num_layers)
    }

    /// Bytes per KV element for this flag on a model whose activations are `activation_bytes`
    /// wide: `auto` follows the model; fp8 is stored as `uint8` (1 byte). `None` for an unknown flag.
    /// FP4 ([`is_fp4_kv`]) gives 1, the FP8 width the step model's kernel tables are read at
    /// (the measured tables have no FP4-KV attention); its true bytes, 9/16 of FP8's with the
    /// scales, come from [`crate::spec::ModelSpec::kv_token_bytes_rank`] with
    /// [`crate::spec::model::KvElem::Fp4`].
    pub fn kv_dtype_bytes(&self, activation_bytes: u32) -> Option<u32> {
        match self.kv_cache_dtype.as_str() {
            "auto" => Some(activation_bytes),
            "bf16" | "bfloat16" => Some(2),
            "fp8_e4m3" | "fp8_e5m2" | "fp4_e2m1" => Some(1),
            _ => None,
        }
    }
}

/// `--moe-a2a-backend`: how MoE tokens reach the GPUs holding their experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum A2aBackend {
    /// No all-to-all: experts are TP-sharded and the MoE output is all-reduced (sglang's
    /// default, `--moe-a2a-backend none`).
    #[default]
    None,
    /// DeepEP dispatch/combine kernels: tokens travel to their experts' GPUs over NVLink
    /// inside a node and over the RDMA NICs between nodes.
    Deepep,
}

/// `--load-balance-method`: how an instance's DP controller spreads requests over its DP
/// ranks (sglang `managers/data_parallel_controller.py` `LoadBalanceMethod` and
/// `server_args.py` `_handle_load_balance_method`, commit 000a3db1; `sglang::dp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalanceMethod {
    /// sglang's default: `follow_bootstrap_room` on a PD prefill server, `round_robin`
    /// everywhere else.
    #[default]
    Auto,
    /// The next rank in turn (on a PD prefill server sglang reads it as
    /// `follow_bootstrap_room`, for backward compatibility).
    RoundRobin,
    /// Rank `bootstrap_room % dp_size`: a PD request's rank follows from its room.
    FollowBootstrapRoom,
    /// The DP budget: ranks below the most loaded one (requests, as last reported) first.
    ShortestQueue,
    /// Deprecated in sglang: falls back to `round_robin` (non-PD) or `follow_bootstrap_room`.
    MinimumTokens,
}

impl LoadBalanceMethod {
    /// The flag values, as the key takes them.
    pub const NAMES: &[&str] = &[
        "auto",
        "round_robin",
        "follow_bootstrap_room",
        "shortest_queue",
        "minimum_tokens",
    ];

    fn is_auto(&self) -> bool {
        *self == Self::Auto
    }
}

/// The large-MoE parallelism of one instance: DP attention and expert parallelism, with
/// sglang's flag names (`server_args.py`). Kept beside [`ServerArgs`], not inside it: the
/// transfer contract sees only the attention TP these imply (`ServerArgs::attn_tp_size`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Parallel {
    /// `--dp-size` (1 without DP attention).
    pub dp_size: u32,
    /// `--enable-dp-attention`: attention runs data-parallel, TP `tp_size / dp_size` per rank.
    pub enable_dp_attention: bool,
    /// `--ep-size`: GPUs the routed experts are spread over (1: TP-sharded experts).
    pub ep_size: u32,
    /// `--moe-a2a-backend`.
    pub moe_a2a_backend: A2aBackend,
    /// `--ep-num-redundant-experts`: extra expert replicas EPLB may place.
    pub ep_num_redundant_experts: u32,
    /// `--enable-eplb`: the expert-parallel load balancer rebalances experts over GPUs.
    pub enable_eplb: bool,
    /// `--enable-two-batch-overlap`: split each batch in two micro-batches so one's
    /// communication runs under the other's compute.
    pub enable_two_batch_overlap: bool,
    /// `--load-balance-method` (left out of results when `auto`, so that scenarios which never
    /// set it keep their bytes).
    #[serde(skip_serializing_if = "LoadBalanceMethod::is_auto")]
    pub load_balance_method: LoadBalanceMethod,
}

impl Default for Parallel {
    fn default() -> Self {
        Self {
            dp_size: 1,
            enable_dp_attention: false,
            ep_size: 1,
            moe_a2a_backend: A2aBackend::None,
            ep_num_redundant_experts: 0,
            enable_eplb: false,
            enable_two_batch_overlap: false,
            load_balance_method: LoadBalanceMethod::Auto,
        }
    }
}

impl Parallel {
    /// DP ranks that each hold a batch and a KV pool (1 without DP attention).
    pub fn dp_ranks(&self) -> u32 {
        if self.enable_dp_attention {
            self.dp_size.max(1)
        } else {
            1
        }
    }
}

/// sglang's default `--cuda-graph-max-bs` for a server of `tp_size` GPUs of `gpu`: the
/// largest decode batch replayed from a CUDA graph (larger ones run eagerly). sglang
/// `server_args.py`, `ServerArgs._handle_gpu_memory_settings` (v0.5): by the GPU's memory
/// in MiB — below 35 GiB 24 (TP < 4) or 80; below 60 GiB 32 or 160; below 160 GiB (A100,
/// H100, H20, H200) 256 or 512; above (B200, MI300X) 512.
pub fn cuda_graph_max_bs(gpu: &crate::spec::GpuSpec, tp_size: u32) -> u32 {
    let mib = gpu.hbm_bytes >> 20;
    // (memory below, MiB; TP < 4; TP ≥ 4)
    const RULE: [(u64, u32, u32); 3] = [
        (35 * 1024, 24, 80),
        (60 * 1024, 32, 160),
        (160 * 1024, 256, 512),
    ];
    RULE.iter()
        .find(|&&(below, ..)| mib < below)
        .map_or(
            512,
            |&(_, small, large)| if tp_size < 4 { small } else { large },
        )
}
