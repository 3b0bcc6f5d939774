//! The scenario file as written (docs/architecture.md §3): serde structs with `deny_unknown_fields`.
//! Nothing here is checked beyond types; [`super::validate`] turns it into a [`super::Scenario`].

pub use crate::config::{KvAllocator, Role, RouterPolicy};
use serde::{Deserialize, Serialize};

/// A whole scenario file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    /// `[run]`
    pub run: RunSection,
    /// `[model]`: the model every pool serves unless the pool overrides it.
    pub model: Option<ModelRef>,
    /// `[hardware]`
    pub hardware: HardwareSection,
    /// `[[pools]]`
    #[serde(default)]
    pub pools: Vec<PoolSection>,
    /// `[fabric]`
    #[serde(default)]
    pub fabric: FabricSection,
    /// `[[faults]]`
    #[serde(default)]
    pub faults: Vec<FaultSection>,
    /// `[workload]`
    pub workload: WorkloadSection,
    /// `[router]`
    #[serde(default)]
    pub router: RouterSection,
    /// `[kv_store]`: a Mooncake Store shared by the prefill instances (HiCache's storage tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_store: Option<KvStoreSection>,
    /// `[sglang]`
    #[serde(default)]
    pub sglang: SglangSection,
    /// `[slo]`
    #[serde(default)]
    pub slo: SloSection,
    /// `[autoscaler]`: the policy that sizes the pools during the run (static when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<AutoscalerSection>,
    /// `[expect]`: typed expectations that `pdsim check` evaluates; `pdsim run` checks its
    /// keys and records it in `run.json`.
    pub expect: Option<super::expect::Expect>,
}

/// `[run]`
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// Results go to `results/<name>/`.
    pub name: String,
    /// Seed of every random stream: any `u64`, 0 ..= 18446744073709551615. TOML's integers
    /// stop at 2^63 − 1, so a larger seed may also be written as a quoted string
    /// (`seed = "18446744073709551615"`), which is also what `--set run.seed=N` yields for one.
    #[serde(default, deserialize_with = "seed_of")]
    pub seed: u64,
    /// Arrivals stop after this many simulated seconds.
    pub duration_s: f64,
    /// Optional second bound on the number of arrivals.
    pub max_requests: Option<u64>,
    /// After arrivals stop, in-flight requests drain for at most this many seconds.
    #[serde(default = "default_drain_timeout_s")]
    pub drain_timeout_s: f64,
}

/// The valid range of `run.seed`, for messages.
pub const SEED_RANGE: &str = "an integer in 0 ..= 18446744073709551615 (2^64 − 1; above 9223372036854775807, TOML's largest integer, write it as a quoted string: seed = \"18446744073709551615\")";

/// `run.seed`: a `u64` given as an integer or as a string of decimal digits (module docs of
/// [`RunSection::seed`]); anything else names the valid range.
fn seed_of<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Seed;
    impl serde::de::Visitor<'_> for Seed {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(SEED_RANGE)
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v)
                .map_err(|_| E::custom(format!("{v} is negative; a seed is {SEED_RANGE}")))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            let t = v.trim();
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                t.parse::<u64>().map_err(|_| {
                    E::custom(format!(
                        "{t} is above 18446744073709551615; a seed is {SEED_RANGE}"
                    ))
                })
            } else {
                // Never echo more than a short value back.
                let shown: String = t.chars().take(40).collect();
                Err(E::custom(format!(
                    "{shown:?} is not a seed; a seed is {SEED_RANGE}"
                )))
            }
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<u64, E> {
            Err(E::custom(format!(
                "{v} is not a whole number; a seed is {SEED_RANGE}"
            )))
        }
    }
    d.deserialize_any(Seed)
}

fn default_drain_timeout_s() -> f64 {
    900.0
}

/// `[model]` or a pool's `model = {...}`: exactly one of `preset` or `config`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// A built-in model name.
    pub preset: Option<String>,
    /// A Hugging Face `config.json`, relative to the scenario file.
    pub config: Option<String>,
}

/// `[hardware]`
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSection {
    /// A rack-scale system that names the GPU, the node (tray) and the NVLink domain together:
    /// `gb200-nvl72`, `gb300-nvl72` (`scenario::system`). Left out of results when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// GPU preset name (required unless `system` names it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// GPUs per node: the unit of placement and of billing, with its own NICs (a GB200 NVL72
    /// compute tray holds 4).
    #[serde(default = "default_gpus_per_node")]
    pub gpus_per_node: u32,
    /// GPUs of one NVLink domain (NVSwitch fabric): `gpus_per_node` by default (a DGX/HGX
    /// node); 72 for an NVL72 rack of 18 trays. Consecutive nodes form a domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_domain_gpus: Option<u32>,
    /// Override of the preset's dense FP4 peak, TFLOP/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp4_tflops: Option<f64>,
    /// Override of the preset's GPU ↔ host link each way, GB/s (PCIe, or NVLink-C2C on a
    /// Grace superchip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_gb_s: Option<f64>,
    /// Overrides of the preset's dense BF16 peak, TFLOP/s.
    pub bf16_tflops: Option<f64>,
    /// Override of the preset's HBM capacity, GB (10⁹ bytes).
    pub hbm_gb: Option<f64>,
    /// Override of the preset's HBM bandwidth, TB/s.
    pub hbm_tb_s: Option<f64>,
    /// Override of the preset's dense FP8 peak, TFLOP/s.
    pub fp8_tflops: Option<f64>,
    /// Override of the preset's NVLink bandwidth (both directions), GB/s.
    pub nvlink_gb_s: Option<f64>,
    /// Most one GPU's Mooncake transfer engine moves each way between GPU memory and its NICs
    /// (PCIe / GPUDirect path and engine threads), Gb/s. Default: the calibrated 190.
    pub rdma_engine_gbps: Option<f64>,
    /// Removed (it capped each NIC, which is wrong for shared NICs and for DeepEP): read only
    /// to say what replaced it.
    #[serde(default, skip_serializing)]
    pub nic_host_gbps: Option<f64>,
    /// Step-time calibration: `sglang-2025` (default), `vllm-2023`, or a file written by
    /// `pdsim calibrate` (relative to the scenario file).
    pub calibration: Option<String>,
    /// Price of one GPU-hour, US dollars: the summary and `pdsim plan` then give $/hour and
    /// $/1M output tokens.
    pub usd_per_gpu_hour: Option<f64>,
    /// What is billed: `"gpu"` (default: the GPUs the pools use) or `"node"` (every node they
    /// span, idle GPUs included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing: Option<String>,
}

fn default_reserved_decode_tokens() -> u32 {
    crate::sglang::decode::RESERVED_DECODE_TOKENS
}

fn default_gpus_per_node() -> u32 {
    8
}

/// `[[pools]]`: a group of identical sglang instances.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// Unique pool name (addressed by `--set pools.<name>.…`).
    pub name: String,
    /// `prefill`, `decode`, or `colocated` (a plain sglang server).
    pub role: Role,
    /// Number of instances.
    pub instances: u32,
    /// sglang server args.
    #[serde(default)]
    pub server: ServerSection,
    /// Overrides `[model]` for this pool.
    pub model: Option<ModelRef>,
    /// First node of this pool's instances (default: the next node no earlier pool uses).
    pub node: Option<u32>,
    /// First GPU of `node` this pool's instances take (default 0): with it, pools share a
    /// node on distinct GPUs (DistServe's placement), and their transfers go over NVLink.
    pub gpu: Option<u32>,
    /// A CSV of measured step times to use instead of the roofline model
    /// (`phase,tokens,batch_size,context_tokens,time_ms`), relative to the scenario file.
    pub step_times: Option<String>,
    /// How the KV allocator returns freed pages (`sorted` | `unsorted`; default: what sglang
    /// builds for the role, `sorted` for prefill and decode, `unsorted` for colocated). Not an
    /// sglang flag: sglang derives it from `--disaggregation-mode` (`docs/sglang-pd.md` §22).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_allocator: Option<KvAllocator>,
    /// Speculative decoding's per-position acceptance rate α on this decode pool (default:
    /// per algorithm, `scenario::speculative`). Not an sglang flag: it is the draft model's
    /// agreement with the target on this pool's traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_accept_rate: Option<f64>,
    /// The same as a mean accept length τ (tokens per request per step, the bonus included,
    /// as sglang logs "accept len"); converted to α by the chain formula.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_accept_length: Option<f64>,
    /// The spread (standard deviation) of a request's own α around the pool's (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_accept_rate_sd: Option<f64>,
}

/// `[pools.server]`: sglang flags with `_` for `-`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// `--tp-size`.
    #[serde(default = "one")]
    pub tp_size: u32,
    /// Attention TP; defaults to `tp_size`.
    pub attn_tp_size: Option<u32>,
    /// `--page-size`, tokens.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// `--pp-size`: pipeline stages of `tp_size` GPUs each (prefill pools only; default 1).
    /// Checked in `sections::pipeline`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub pp_size: u32,
    /// `--pp-async-batch-depth`: PP micro-batches in flight beyond `pp_size` (default 0).
    /// Checked in `sections::pipeline`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pp_async_batch_depth: u32,
    /// `--dcp-size`: decode context parallelism, ranks of each TP group splitting a request's
    /// KV tokens (decode pools of MLA models only; default 1). Checked in `sections::dcp`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dcp_size: u32,
    /// `--kv-cache-dtype`.
    #[serde(default = "default_kv_dtype")]
    pub kv_cache_dtype: String,
    /// `--quantization`: `fp8` loads the checkpoint's weights as FP8 (one byte each); left out,
    /// the weights keep the checkpoint's dtype. Checked in `sections::pool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// `--mamba-ssm-dtype` (`float32`, `bfloat16`, `float16`): the temporal state dtype of a
    /// mamba/GDN hybrid; left out, the model's own (`mamba_ssm_dtype`, FP32 by default).
    /// Checked in `sections::pool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_ssm_dtype: Option<String>,
    /// `--enable-unified-memory`.
    #[serde(default)]
    pub enable_unified_memory: bool,
    /// `--chunked-prefill-size`, tokens.
    #[serde(default = "default_chunked_prefill_size")]
    pub chunked_prefill_size: u32,
    /// `--mem-fraction-static`.
    #[serde(default = "default_mem_fraction")]
    pub mem_fraction_static: f64,
    /// `--max-prefill-tokens`: most tokens in one prefill batch (with chunking, the batch budget
    /// is the smaller of this and `chunked_prefill_size`).
    #[serde(default = "default_max_prefill_tokens")]
    pub max_prefill_tokens: u32,
    /// `--max-running-requests`.
    pub max_running_requests: Option<u32>,
    /// `--num-reserved-decode-tokens` (decode): tokens of room the prealloc budget keeps for
    /// every request a decode instance holds. Default 512, sglang's.
    #[serde(default = "default_reserved_decode_tokens")]
    pub num_reserved_decode_tokens: u32,
    /// `--disaggregation-decode-extra-slots` (decode; the seed's
    /// `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS`): request rows per decode worker beyond
    /// `max_running_requests` for requests being preallocated or transferred. Unset: sglang's
    /// 0, or twice the per-worker `max_running_requests` where that is ≤ 32 (always, then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation_decode_extra_slots: Option<u32>,
    /// `--disable-radix-cache`: no prefix cache on this (prefill) instance.
    #[serde(default)]
    pub disable_radix_cache: bool,
    /// Prefix-cache capacity, tokens (default: the instance's KV capacity).
    pub radix_cache_tokens: Option<u64>,
    /// `--dp-size`: data-parallel attention ranks (with `enable_dp_attention`).
    #[serde(default = "one")]
    pub dp_size: u32,
    /// `--enable-dp-attention`: attention TP = `tp_size / dp_size`, one batch per DP rank.
    #[serde(default)]
    pub enable_dp_attention: bool,
    /// `--ep-size`: GPUs the routed experts are spread over.
    #[serde(default = "one")]
    pub ep_size: u32,
    /// `--moe-a2a-backend`: `none` or `deepep`.
    #[serde(default)]
    pub moe_a2a_backend: crate::spec::server::A2aBackend,
    /// `--ep-num-redundant-experts`.
    #[serde(default)]
    pub ep_num_redundant_experts: u32,
    /// `--enable-eplb`.
    #[serde(default)]
    pub enable_eplb: bool,
    /// `--enable-two-batch-overlap`.
    #[serde(default)]
    pub enable_two_batch_overlap: bool,
    /// `--disable-overlap-schedule`: the scheduler's work for the next batch runs after this
    /// one's forward instead of beside it (sglang's `event_loop_normal` instead of
    /// `event_loop_overlap`). Checked in `sections::pool`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_overlap_schedule: bool,
    /// `--load-balance-method`: how the DP controller picks a DP rank.
    #[serde(default)]
    pub load_balance_method: crate::spec::server::LoadBalanceMethod,
    /// `--enable-hierarchical-cache`: HiCache (GPU → host memory → storage), prefill pools.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_hierarchical_cache: bool,
    /// `--hicache-ratio`: host tier ÷ GPU KV pool (used when `hicache_size` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_ratio: Option<f64>,
    /// `--hicache-size`: host tier per rank, GB (0: from `hicache_ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_size: Option<f64>,
    /// `--hicache-write-policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_write_policy: Option<crate::config::WritePolicy>,
    /// `--hicache-storage-backend`: `mooncake` (the `[kv_store]`), or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_storage_backend: Option<String>,
    /// `--hicache-storage-prefetch-policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hicache_storage_prefetch_policy: Option<crate::config::PrefetchPolicy>,
    /// `--disaggregation-decode-enable-offload-kvcache` (decode pools): the blocks a request's
    /// output completes go to the storage backend (`hicache_storage_backend`) as they fill
    /// (sglang's `DecodeKVCacheOffloadManager`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub disaggregation_decode_enable_offload_kvcache: bool,
    /// `--disaggregation-decode-enable-radix-cache` (decode pools; sglang `2026-09` and later,
    /// PR #19746): decode keeps a radix tree over finished requests' KV, matches each new
    /// request's prefix and receives only the rest (`sglang::decode_radix`). Checked in
    /// `sections::hicache::decode_radix` and against `[sglang] version`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disaggregation_decode_enable_radix_cache: bool,
    /// `--speculative-algorithm`: `none` (default), `eagle`, `eagle3`, `nextn` (sglang's alias
    /// of eagle). Checked in `scenario::speculative`, as are the four below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_algorithm: Option<String>,
    /// `--speculative-num-steps` (unset with the two below: sglang's auto choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_num_steps: Option<u32>,
    /// `--speculative-eagle-topk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_eagle_topk: Option<u32>,
    /// `--speculative-num-draft-tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_num_draft_tokens: Option<u32>,
    /// `--speculative-draft-model-path`: the EAGLE head's name (sglang needs it for EAGLE and
    /// EAGLE-3 unless the model ships MTP layers); pdsim sizes the head from the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative_draft_model_path: Option<String>,
    /// `--attention-backend`: read only by sglang's speculative checks (unset: flashinfer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_backend: Option<String>,
    /// `--cpu-offload-gb`: GiB of each GPU's layer weights sglang keeps in pinned host memory
    /// and copies back at every forward (offloader V1, `compute::offload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offload_gb: Option<u32>,
    /// `--offload-group-size`: layer-wise offload with prefetch (offloader V2): of every group
    /// of this many layers the last `offload_num_in_group` keep their routed experts in host
    /// memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_group_size: Option<u32>,
    /// `--offload-num-in-group` (sglang's default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_num_in_group: Option<u32>,
    /// `--offload-prefetch-step` (sglang's default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_prefetch_step: Option<u32>,
    /// `--offload-mode` (sglang's default `cpu`; the one pdsim models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_mode: Option<String>,
    /// `--enable-mixed-chunk` (colocated pools): one forward mixes the running decode batch
    /// with the prefill chunk; off (sglang's default), a prefill batch runs instead of the
    /// decode step. Checked in `sections::pool`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable_mixed_chunk: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `[kv_store]`: a Mooncake Store (Mooncake's distributed KV pool in the nodes' DRAM).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KvStoreSection {
    /// Capacity over all its nodes, GB (left out: unbounded).
    pub capacity_gb: Option<f64>,
    /// Nodes whose DRAM holds it (default: node 0); their NICs serve its reads.
    #[serde(default)]
    pub nodes: Vec<u32>,
    /// `lru` (default) or `none` (a full store refuses new blocks).
    #[serde(default = "default_store_eviction")]
    pub eviction: String,
}

fn default_store_eviction() -> String {
    "lru".to_string()
}

impl Default for ServerSection {
    fn default() -> Self {
        Self {
            tp_size: 1,
            attn_tp_size: None,
            pp_size: 1,
            pp_async_batch_depth: 0,
            dcp_size: 1,
            page_size: default_page_size(),
            kv_cache_dtype: default_kv_dtype(),
            quantization: None,
            mamba_ssm_dtype: None,
            enable_unified_memory: false,
            chunked_prefill_size: default_chunked_prefill_size(),
            mem_fraction_static: default_mem_fraction(),
            max_prefill_tokens: default_max_prefill_tokens(),
            max_running_requests: None,
            num_reserved_decode_tokens: default_reserved_decode_tokens(),
            disaggregation_decode_extra_slots: None,
            disable_radix_cache: false,
            enable_mixed_chunk: false,
            radix_cache_tokens: None,
            dp_size: 1,
            enable_dp_attention: false,
            ep_size: 1,
            moe_a2a_backend: Default::default(),
            ep_num_redundant_experts: 0,
            enable_eplb: false,
            enable_two_batch_overlap: false,
            disable_overlap_schedule: false,
            load_balance_method: Default::default(),
            enable_hierarchical_cache: false,
            hicache_ratio: None,
            hicache_size: None,
            hicache_write_policy: None,
            hicache_storage_backend: None,
            hicache_storage_prefetch_policy: None,
            disaggregation_decode_enable_offload_kvcache: false,
            disaggregation_decode_enable_radix_cache: false,
            speculative_algorithm: None,
            speculative_num_steps: None,
            speculative_eagle_topk: None,
            speculative_num_draft_tokens: None,
            speculative_draft_model_path: None,
            attention_backend: None,
            cpu_offload_gb: None,
            offload_group_size: None,
            offload_num_in_group: None,
            offload_prefetch_step: None,
            offload_mode: None,
        }
    }
}

fn one() -> u32 {
    1
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_one(n: &u32) -> bool {
    *n == 1
}
fn default_page_size() -> u32 {
    1
}
fn default_kv_dtype() -> String {
    "auto".to_string()
}
fn default_chunked_prefill_size() -> u32 {
    8192
}
fn default_max_prefill_tokens() -> u32 {
    16384
}
fn default_mem_fraction() -> f64 {
    0.85
}

/// `[fabric]`
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FabricSection {
    /// Per-NIC line rate, Gb/s.
    #[serde(default = "default_nic_gbps")]
    pub nic_gbps: f64,
    /// NICs per node; default one per GPU.
    pub nics_per_node: Option<u32>,
    /// One-way latency a transfer pays before its bytes flow, µs.
    #[serde(default = "default_base_latency_us")]
    pub base_latency_us: f64,
    /// Latency of a control message (ZMQ over TCP: metadata, status, abort), µs.
    #[serde(default = "default_control_latency_us")]
    pub control_latency_us: f64,
    /// `rail` (same-index NICs on one rail switch) or `leaf_spine`.
    #[serde(default = "default_topology")]
    pub topology: crate::fabric::TopologyKind,
    /// Nodes under one leaf switch (`leaf_spine`).
    #[serde(default = "default_nodes_per_leaf")]
    pub nodes_per_leaf: u32,
    /// NIC line rate under a switch ÷ its uplink capacity (≥ 1; 1 is non-blocking).
    #[serde(default = "one_f64")]
    pub oversubscription: f64,
    /// DeepEP's inter-node dispatch/combine as fabric flows that share the NICs with KV
    /// transfers (default); `false` prices it at the NICs' uncontended rate inside the step
    /// time — the counterfactual "no link sharing" (`docs/performance-model.md` §7.3).
    #[serde(default = "yes")]
    pub a2a_flows: bool,
    /// Mooncake's transport: `rdma` (RoCE / InfiniBand verbs, the default) or `efa` (AWS EFA).
    #[serde(default)]
    pub transport: crate::fabric::Transport,
    /// KV between nodes of one NVLink domain over Mooncake's multi-node NVLink transport
    /// (sglang's `SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK` with Mooncake's `MC_FORCE_MNNVL`):
    /// the default where a domain spans nodes; `false` sends it over the NICs (RDMA), as sglang
    /// does without them. Left out of results when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mnnvl: Option<bool>,
}

fn yes() -> bool {
    true
}

fn default_topology() -> crate::fabric::TopologyKind {
    crate::fabric::TopologyKind::Rail
}
fn default_nodes_per_leaf() -> u32 {
    8
}

/// The kinds of `[[faults]]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A link goes down (`link`).
    LinkDown,
    /// A link comes back (`link`).
    LinkUp,
    /// A link keeps `fraction` of its capacity (`link`, `fraction`).
    LinkDegraded,
    /// A link drops `rate` of its packets (`link`, `rate`).
    PacketLoss,
    /// A NIC goes down (`nic`).
    NicDown,
    /// A NIC comes back (`nic`).
    NicUp,
    /// A NIC goes down for `duration_s` (`nic`, `duration_s`).
    NicFlap,
    /// An instance crashes (`pool`, `instance`), restarting after `restart_after_s` if given.
    InstanceCrash,
}

impl FaultKind {
    /// The kind as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::LinkDown => "link_down",
            FaultKind::LinkUp => "link_up",
            FaultKind::LinkDegraded => "link_degraded",
            FaultKind::PacketLoss => "packet_loss",
            FaultKind::NicDown => "nic_down",
            FaultKind::NicUp => "nic_up",
            FaultKind::NicFlap => "nic_flap",
            FaultKind::InstanceCrash => "instance_crash",
        }
    }
}

impl std::fmt::Display for FaultKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[[faults]]`: something that breaks (or heals) at a simulated time.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSection {
    /// When, simulated seconds.
    pub at_s: f64,
    /// What happens.
    pub kind: FaultKind,
    /// A link: `node<N>.nic<I>.tx|rx`, `node<N>.gpu<G>.nvlink_tx|nvlink_rx`, `switch<S>.up|down`.
    pub link: Option<String>,
    /// A NIC: `node<N>.nic<I>`.
    pub nic: Option<String>,
    /// The pool of a crashing instance.
    pub pool: Option<String>,
    /// The crashing instance's index within its pool (default 0).
    pub instance: Option<u32>,
    /// `link_degraded`: the fraction of capacity left, in (0, 1].
    pub fraction: Option<f64>,
    /// `packet_loss`: the loss rate, in [0, 1).
    pub rate: Option<f64>,
    /// `nic_flap`: how long the NIC stays down, s.
    pub duration_s: Option<f64>,
    /// `instance_crash`: restart after this many seconds (never, when left out).
    pub restart_after_s: Option<f64>,
}

impl Default for FabricSection {
    fn default() -> Self {
        Self {
            nic_gbps: default_nic_gbps(),
            nics_per_node: None,
            base_latency_us: default_base_latency_us(),
            control_latency_us: default_control_latency_us(),
            topology: default_topology(),
            nodes_per_leaf: default_nodes_per_leaf(),
            oversubscription: 1.0,
            a2a_flows: true,
            transport: Default::default(),
            mnnvl: None,
        }
    }
}

fn default_nic_gbps() -> f64 {
    400.0
}
fn default_base_latency_us() -> f64 {
    3.0
}
fn default_control_latency_us() -> f64 {
    100.0
}

/// `[workload]`: synthetic (arrival + lengths) or a trace.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    /// Arrival process of a synthetic workload.
    pub arrival: Option<ArrivalSection>,
    /// Prompt lengths, tokens.
    pub input_tokens: Option<LengthSection>,
    /// Output lengths, tokens.
    pub output_tokens: Option<LengthSection>,
    /// Instead of `input_tokens` and `output_tokens`: (input, output) pairs sampled together
    /// from a trace's rows (`{ path = "..." }`), keeping their correlation.
    pub lengths: Option<PairedLengthsSection>,
    /// A trace to replay instead.
    pub trace: Option<TraceSection>,
    /// How long each client waits before it disconnects (`[workload.client_timeout]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_timeout: Option<ClientTimeoutSection>,
    /// Conversations: turns, think time, context growth (synthetic workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsSection>,
}

/// `[workload.client_timeout]`: a fixed wait `s`, or `dist = "exponential"` with `mean_s`, or
/// `dist = "lognormal"` with `mean_s` and `cv` (checked in `scenario::aborts`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientTimeoutSection {
    /// Every client waits this long, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<f64>,
    /// `exponential` or `lognormal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dist: Option<String>,
    /// Mean wait of a distribution, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_s: Option<f64>,
    /// Coefficient of variation of a lognormal wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
}

/// The `--set` key of a synthetic workload's single arrival rate.
pub const ARRIVAL_RATE_KEY: &str = "workload.arrival.rate_per_s";
/// The `--set` key of a replayed trace's mean rate.
pub const TRACE_RATE_KEY: &str = "workload.trace.rate_per_s";

/// Why a workload has no single arrival rate a planner can set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoSingleRate {
    /// A process whose rate changes over time (`schedule`): named, for the message.
    Process(&'static str),
    /// Neither `workload.arrival` nor `workload.trace`.
    Missing,
}

impl WorkloadSection {
    /// The `--set` key that gives this workload's arrival rate ([`ARRIVAL_RATE_KEY`] or
    /// [`TRACE_RATE_KEY`]), what `pdsim plan --rate` and `--max-rate` set.
    pub fn rate_key(&self) -> Result<&'static str, NoSingleRate> {
        if self.trace.is_some() {
            return Ok(TRACE_RATE_KEY);
        }
        match &self.arrival {
            Some(ArrivalSection::Schedule { .. }) => Err(NoSingleRate::Process("schedule")),
            Some(_) => Ok(ARRIVAL_RATE_KEY),
            None => Err(NoSingleRate::Missing),
        }
    }

    /// The arrival rate as written, requests per second: the process's, or the trace's
    /// `rate_per_s` when it rescales the trace (`None` for a schedule or an unscaled trace).
    pub fn rate_per_s(&self) -> Option<f64> {
        if let Some(t) = &self.trace {
            return t.rate_per_s;
        }
        match self.arrival.as_ref()? {
            ArrivalSection::Poisson { rate_per_s, .. }
            | ArrivalSection::Constant { rate_per_s, .. }
            | ArrivalSection::Gamma { rate_per_s, .. }
            | ArrivalSection::OnOff { rate_per_s, .. } => Some(*rate_per_s),
            ArrivalSection::Schedule { .. } => None,
        }
    }
}

/// `[workload.sessions]`: a synthetic workload of conversations. Session starts follow
/// `arrival`; the first prompt is `input_tokens`, every turn's output `output_tokens`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SessionsSection {
    /// Turns per session.
    pub turns: LengthSection,
    /// Seconds between a turn's completion and the next turn's arrival.
    pub think_time_s: ThinkSection,
    /// New user tokens each later turn appends.
    pub user_tokens: LengthSection,
    /// The model's context length: a turn's prompt plus output must fit.
    #[serde(default = "default_max_context_tokens")]
    pub max_context_tokens: u32,
    /// `end` (the session ends) or `truncate` (the oldest tokens are dropped).
    #[serde(default = "default_context_full")]
    pub on_context_full: crate::config::ContextFull,
}

fn default_max_context_tokens() -> u32 {
    131_072
}

fn default_context_full() -> crate::config::ContextFull {
    crate::config::ContextFull::End
}

/// A think-time distribution, seconds.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum ThinkSection {
    /// Always `value` seconds.
    Fixed {
        /// Seconds.
        value: f64,
    },
    /// Exponential with this mean, seconds.
    Exponential {
        /// Seconds.
        mean: f64,
    },
    /// Log-normal with this mean (seconds) and coefficient of variation.
    Lognormal {
        /// Seconds.
        mean: f64,
        /// Standard deviation ÷ mean.
        cv: f64,
    },
}

/// An arrival process.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "process", rename_all = "snake_case", deny_unknown_fields)]
pub enum ArrivalSection {
    /// Exponential inter-arrival times.
    Poisson {
        /// Mean arrivals per second (times the profile's factor, with one).
        rate_per_s: f64,
        /// How the rate moves over time (`None`: it does not).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_profile: Option<RateProfileSection>,
    },
    /// Evenly spaced arrivals.
    Constant {
        /// Arrivals per second (times the profile's factor, with one).
        rate_per_s: f64,
        /// How the rate moves over time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_profile: Option<RateProfileSection>,
    },
    /// Gamma-distributed gaps: bursty (cv > 1) or regular (cv < 1) traffic at a mean rate.
    Gamma {
        /// Mean arrivals per second (times the profile's factor, with one).
        rate_per_s: f64,
        /// Coefficient of variation of the gaps (1 is Poisson).
        cv: f64,
        /// How the rate moves over time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_profile: Option<RateProfileSection>,
    },
    /// Poisson arrivals during `on_s`-second bursts separated by `off_s` seconds of silence.
    OnOff {
        /// Arrivals per second while on.
        rate_per_s: f64,
        /// Length of a burst, s.
        on_s: f64,
        /// Length of a silence, s.
        off_s: f64,
        /// Refused (named here so the message can say why): bursts are already a rate over
        /// time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_profile: Option<RateProfileSection>,
    },
    /// Poisson arrivals with a piecewise-constant rate; the last step's rate holds to the end.
    Schedule {
        /// Steps in time order.
        steps: Vec<RateStep>,
        /// Refused: a schedule is already a rate over time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rate_profile: Option<RateProfileSection>,
    },
}

/// `workload.arrival.rate_profile`: a factor on the process's rate over simulated time
/// (`config::rate_profile`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateProfileSection {
    /// `factor[i]` from `at_s[i]`, held (`interpolate = "step"`) or joined linearly to the
    /// next point (`"linear"`); with `repeat_s` the profile starts over then.
    Piecewise {
        /// Point times, s: the first 0, increasing.
        at_s: Vec<f64>,
        /// The factor at each point (≥ 0).
        factor: Vec<f64>,
        /// `step` (default) or `linear`.
        #[serde(default)]
        interpolate: Interpolate,
        /// The period the profile repeats with, s (after the last point).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repeat_s: Option<f64>,
    },
    /// A day's swing: factor 1 at `peak_s`, `trough` half a period away, a cosine between,
    /// repeating every `period_s` (default 86,400): `rate_per_s` is the peak rate.
    Diurnal {
        /// Seconds of one period.
        #[serde(default = "default_day_s")]
        period_s: f64,
        /// When the factor peaks, s into the period.
        peak_s: f64,
        /// The factor at the trough, in [0, 1].
        trough: f64,
    },
    /// A trace's own arrival counts in bins of `bin_s`, as steps whose mean is 1
    /// (`rate_per_s` is the mean rate), stretched so the trace's span lasts `span_s`, repeating.
    Trace {
        /// Trace file, relative to the scenario file.
        path: String,
        /// `mooncake`, `azure`, `vidur` or `csv`; detected from the file when left out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<String>,
        /// Bin width, s of the trace's own time.
        bin_s: f64,
        /// How long the trace's span lasts in the run, s (default: as recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        span_s: Option<f64>,
    },
}

/// How a piecewise profile goes between its points.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Interpolate {
    /// Each factor holds until the next point.
    #[default]
    Step,
    /// Straight lines between points.
    Linear,
}

fn default_day_s() -> f64 {
    86_400.0
}

/// One step of a rate schedule.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RateStep {
    /// The step lasts until this simulated second (increasing).
    pub until_s: f64,
    /// Arrivals per second during the step (0 for a pause).
    pub rate_per_s: f64,
}

/// A length distribution, tokens.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum LengthSection {
    /// Always `value`.
    Fixed {
        /// Tokens.
        value: u32,
    },
    /// Uniform on `[min, max]`, inclusive.
    Uniform {
        /// Tokens.
        min: u32,
        /// Tokens.
        max: u32,
    },
    /// Log-normal with this mean and coefficient of variation, clamped to `[min, max]`.
    Lognormal {
        /// Mean tokens (before clamping).
        mean: f64,
        /// Standard deviation ÷ mean.
        cv: f64,
        /// Upper clamp, tokens.
        max: u32,
        /// Lower clamp, tokens (default 1).
        #[serde(default = "one")]
        min: u32,
    },
    /// Sampled uniformly from the lengths of a trace file (any trace format, or a lengths-only
    /// CSV such as Vidur's Arxiv-4K statistics).
    Empirical {
        /// The file, relative to the scenario file.
        path: String,
    },
}

/// `lengths = { path }`: paired (input, output) lengths from a trace or lengths-only CSV.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PairedLengthsSection {
    /// The file (any trace format, or a lengths-only CSV), relative to the scenario file.
    pub path: String,
}

/// `trace = { path, format, time_scale, rate_per_s, limit }`
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSection {
    /// Trace file, relative to the scenario file.
    pub path: String,
    /// `mooncake`, `azure`, `vidur` or `csv`; detected from the file when left out.
    pub format: Option<String>,
    /// Multiplies every arrival time (0.5 doubles the rate).
    #[serde(default = "one_f64")]
    pub time_scale: f64,
    /// Rescales arrival times so that the trace's mean rate becomes this (instead of time_scale).
    pub rate_per_s: Option<f64>,
    /// Replays only the first `limit` rows.
    pub limit: Option<u64>,
    /// Rows with a `session_id`: a later turn arrives at least this many seconds after its
    /// previous turn ended (default 0: never before it ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_time_s: Option<f64>,
}

fn one_f64() -> f64 {
    1.0
}

/// `[router]`: sgl-model-gateway's routing flags (`router_args.py`, sgl-project/sglang
/// 05e589a), defaults as there.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    /// `--policy`: how the router picks instances (both sides of a PD cluster unless
    /// overridden).
    #[serde(default)]
    pub policy: RouterPolicy,
    /// `--prefill-policy` (PD only): the prefill side's policy instead of `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_policy: Option<RouterPolicy>,
    /// `--decode-policy` (PD only): the decode side's policy instead of `policy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_policy: Option<RouterPolicy>,
    /// `--cache-threshold`: least prefix match rate, in [0, 1], for affinity routing.
    #[serde(default = "default_cache_threshold")]
    pub cache_threshold: f64,
    /// `--balance-abs-threshold`: requests.
    #[serde(default = "default_balance_abs_threshold")]
    pub balance_abs_threshold: u64,
    /// `--balance-rel-threshold`: a ratio.
    #[serde(default = "default_balance_rel_threshold")]
    pub balance_rel_threshold: f64,
    /// `--eviction-interval-secs`: seconds between the approximate tree's evictions (0: none).
    #[serde(default = "default_eviction_interval_secs")]
    pub eviction_interval_secs: u64,
    /// `--max-tree-size`: characters per instance the tree keeps after an eviction.
    #[serde(default = "default_max_tree_size")]
    pub max_tree_size: u64,
    /// What the PD router does with the decode leg when the prefill leg fails: a version
    /// profile, `cancel_paired` (sglang main) or `decode_waits` (before PR #29017).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_propagation: Option<String>,
}

impl Default for RouterSection {
    fn default() -> Self {
        Self {
            policy: RouterPolicy::default(),
            prefill_policy: None,
            decode_policy: None,
            cache_threshold: default_cache_threshold(),
            balance_abs_threshold: default_balance_abs_threshold(),
            balance_rel_threshold: default_balance_rel_threshold(),
            eviction_interval_secs: default_eviction_interval_secs(),
            max_tree_size: default_max_tree_size(),
            abort_propagation: None,
        }
    }
}

fn default_cache_threshold() -> f64 {
    0.3
}
fn default_balance_abs_threshold() -> u64 {
    64
}
fn default_balance_rel_threshold() -> f64 {
    1.5
}
fn default_eviction_interval_secs() -> u64 {
    60
}
fn default_max_tree_size() -> u64 {
    1 << 26
}

/// `[sglang]`
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SglangSection {
    /// Which sglang behaviour: `guarded`, `unguarded` or `slice_dispatch`.
    #[serde(default)]
    pub profile: crate::layout::Profile,
    /// Which sglang release (`spec::SglangVersion`): `seed` (the default), `2026-09`,
    /// `2026-09+pr37840`. A string here, checked in `sections::sglang_and_slo` so a bad one
    /// is an error naming the key and the valid versions. Left out of the resolved scenario
    /// when not set, so older scenarios keep their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `--disaggregation-enable-kv-checksum` on every prefill and decode server (sglang PR
    /// #39500; needs a version that has it). Left out of the resolved scenario when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kv_checksum: bool,
    /// `SGLANG_DISAGG_STAGING_BUFFER=1` on every prefill and decode server (sglang PR #19890,
    /// #22536): heterogeneous-TP KV goes gathered, in one bulk write per rank pair, and is
    /// scattered on decode. Left out of the resolved scenario when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub staging_buffer: bool,
    /// `SGLANG_DISAGG_STAGING_POOL_SIZE_MB`: each decode rank's staging ring, MiB (sglang's
    /// default 4096). Only with `staging_buffer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_pool_mb: Option<u64>,
    /// `--disaggregation-transfer-backend` (`spec::TransferBackend`): `mooncake` (the default),
    /// `mooncake_tcp`, `nixl`, `mori`, `ascend`, `fake`. A string here, checked in
    /// `sections::sglang_and_slo`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_backend: Option<String>,
    /// With `transfer_backend = "mooncake_tcp"`: what one GPU's Mooncake TCP transport moves
    /// each way, Gb/s (no default: pdsim has no measured figure for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_gbps: Option<f64>,
    /// `SGLANG_ENABLE_FAILED_SESSION_PROBE=1` on every prefill: each rank probes its
    /// blacklisted decode sessions and takes back the ones that answer. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed_session_probe: bool,
    /// `SGLANG_FAILED_SESSION_PROBE_INTERVAL_S` (sglang's default 30), s; only with
    /// `failed_session_probe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_session_probe_interval_s: Option<f64>,
    /// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, s.
    #[serde(default = "default_timeout_s")]
    pub waiting_timeout_s: f64,
    /// `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`, s.
    #[serde(default = "default_timeout_s")]
    pub bootstrap_timeout_s: f64,
    /// `SGLANG_DISAGGREGATION_QUEUE_SIZE`: transfer-queue shards per prefill instance.
    #[serde(default = "default_queue_size")]
    pub queue_size: u32,
    /// What decode's `abort_request` does with a request in its waiting queue (preallocated
    /// and transferred, not yet running): `release` (since sglang PR #9817) or `leak`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_queue_abort: Option<String>,
}

impl Default for SglangSection {
    fn default() -> Self {
        Self {
            profile: crate::layout::Profile::default(),
            version: None,
            kv_checksum: false,
            staging_buffer: false,
            staging_pool_mb: None,
            transfer_backend: None,
            tcp_gbps: None,
            failed_session_probe: false,
            failed_session_probe_interval_s: None,
            waiting_timeout_s: default_timeout_s(),
            bootstrap_timeout_s: default_timeout_s(),
            queue_size: default_queue_size(),
            decode_queue_abort: None,
        }
    }
}

fn default_timeout_s() -> f64 {
    300.0
}
fn default_queue_size() -> u32 {
    4
}

/// `[slo]`
#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SloSection {
    /// Per-request time-to-first-token threshold (attainment, goodput), ms.
    pub ttft_ms: Option<f64>,
    /// Per-request time-per-output-token threshold (attainment, goodput), ms.
    pub tpot_ms: Option<f64>,
    /// Median TTFT target over arrived requests (failed ones count as never), ms.
    pub ttft_p50_ms: Option<f64>,
    /// 90th-percentile TTFT target, ms.
    pub ttft_p90_ms: Option<f64>,
    /// 99th-percentile TTFT target, ms.
    pub ttft_p99_ms: Option<f64>,
    /// Median TPOT target, ms.
    pub tpot_p50_ms: Option<f64>,
    /// 90th-percentile TPOT target, ms.
    pub tpot_p90_ms: Option<f64>,
    /// 99th-percentile TPOT target, ms.
    pub tpot_p99_ms: Option<f64>,
    /// Least share of arrived requests that must meet every per-request threshold (`ttft_ms`,
    /// `tpot_ms`, `tbt_ms`, `e2e_per_token_ms`), in (0, 1].
    pub attainment_min: Option<f64>,
    /// Median inter-token latency target over every gap of every request (all tokens pooled),
    /// ms.
    pub itl_p50_ms: Option<f64>,
    /// 90th-percentile ITL target (all tokens pooled), ms.
    pub itl_p90_ms: Option<f64>,
    /// 99th-percentile ITL target (all tokens pooled), ms.
    pub itl_p99_ms: Option<f64>,
    /// Per-request threshold on the request's worst inter-token gap (Mooncake's TBT; joins
    /// attainment and goodput), ms.
    pub tbt_ms: Option<f64>,
    /// Median over requests of each request's worst gap (failed ones count as never), ms.
    pub tbt_p50_ms: Option<f64>,
    /// 90th percentile over requests of each request's worst gap, ms.
    pub tbt_p90_ms: Option<f64>,
    /// 99th percentile over requests of each request's worst gap, ms.
    pub tbt_p99_ms: Option<f64>,
    /// Per-request threshold on end-to-end latency ÷ output tokens (joins attainment), ms.
    pub e2e_per_token_ms: Option<f64>,
}

/// `[autoscaler]`: `policy` and that policy's settings, flat (checked in
/// `scenario/sections/autoscaler.rs`: a key of another policy is an error naming it). Every
/// setting is optional; the defaults are Dynamo's and llm-d's (`config::autoscale`).
#[derive(Clone, Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AutoscalerSection {
    /// `"static"`, `"sla_planner"` or `"threshold"`.
    pub policy: Option<String>,
    // `policy = "sla_planner"` (Dynamo's `PlannerConfig` names, units added).
    /// `"sla"`, `"throughput"` or `"latency"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimization_target: Option<String>,
    /// Seconds between throughput-path ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_adjustment_interval_s: Option<f64>,
    /// Seconds between load-path ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_adjustment_interval_s: Option<f64>,
    /// The predictive path on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_throughput_scaling: Option<bool>,
    /// The reactive path on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_load_scaling: Option<bool>,
    /// Fewest instances of each pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_endpoint: Option<i64>,
    /// Most GPUs of both pools (−1: no ceiling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gpu_budget: Option<i64>,
    /// Fewest GPUs of both pools (−1: no floor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gpu_budget: Option<i64>,
    /// TTFT target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// ITL target, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<f64>,
    /// `"arima"`, `"kalman"` or `"constant"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_predictor: Option<String>,
    /// Predict in log1p space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_predictor_log1p: Option<bool>,
    /// Kalman level noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kalman_q_level: Option<f64>,
    /// Kalman trend noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kalman_q_trend: Option<f64>,
    /// Kalman measurement noise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kalman_r: Option<f64>,
    /// Samples a regression keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_fpm_samples: Option<i64>,
    /// Buckets the samples spread over (a perfect square).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fpm_sample_bucket_size: Option<i64>,
    /// Samples before a regression is trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_min_observations: Option<i64>,
    /// Percent of the SLA headroom a scale-down may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_scaling_down_sensitivity: Option<i64>,
    /// `"rapid"` or `"none"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_deployment_sweeping_mode: Option<String>,
    /// `"frontend"` or `"router"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_metrics_source: Option<String>,
    // `policy = "threshold"` (llm-d's saturation config and the HPA's behaviour).
    /// Seconds between looks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// Saturated at this KV use, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_threshold: Option<f64>,
    /// Saturated at this many waiting requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_length_threshold: Option<f64>,
    /// Scale up below this mean spare KV, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_spare_trigger: Option<f64>,
    /// Scale up below this mean spare queue, requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_spare_trigger: Option<f64>,
    /// HPA scale-up stabilization window, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_up_stabilization_s: Option<f64>,
    /// HPA scale-down stabilization window, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_down_stabilization_s: Option<f64>,
    /// HPA `minReplicas` per pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i64>,
    /// HPA `maxReplicas` per pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i64>,
    // How the pools change size (any resizing policy): cold starts, drains, role switches.
    /// A cold start's whole length, s (replaces the weights + CUDA-graph estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_s: Option<f64>,
    /// Weight read rate per GPU during a cold start, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_load_gb_per_s: Option<f64>,
    /// CUDA-graph capture at a cold start (and a prefill → decode switch), s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_capture_s: Option<f64>,
    /// The router's period of checking a starting worker, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_check_interval_s: Option<f64>,
    /// Live prefill ↔ decode role switches instead of a drain plus a cold start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role_switch: Option<bool>,
    /// The engines' `--context-length` as the planner reads it, tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<i64>,
}
