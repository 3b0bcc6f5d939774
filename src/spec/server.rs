//! sglang server arguments that pdsim models, by their flag names with `_` for `-`.

use serde::Serialize;

/// The launch arguments of one sglang instance that matter to PD transfer and capacity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerArgs {
    /// `--tp-size`: GPUs per instance.
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
}

/// KV dtype flag values sglang accepts, and what pdsim knows of them.
pub const KV_CACHE_DTYPES: &[&str] = &["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"];

impl ServerArgs {
    /// Bytes per KV element for this flag on a model whose activations are `activation_bytes`
    /// wide: `auto` follows the model; fp8 is stored as `uint8` (1 byte). `None` for an unknown flag.
    pub fn kv_dtype_bytes(&self, activation_bytes: u32) -> Option<u32> {
        match self.kv_cache_dtype.as_str() {
            "auto" => Some(activation_bytes),
            "bf16" | "bfloat16" => Some(2),
            "fp8_e4m3" | "fp8_e5m2" => Some(1),
            _ => None,
        }
    }
}
