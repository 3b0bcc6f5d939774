//! `pdsim layout`: its flags; the verb itself is `app::layout`.

use clap::Args;

use crate::app::layout::LayoutRequest;

/// Arguments of `pdsim layout`.
#[derive(Args, Debug)]
pub struct LayoutArgs {
    /// A model preset (e.g. qwen3-next-80b-a3b) or a Hugging Face config.json.
    #[arg(long)]
    pub model: String,
    /// Attention TP size.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Tokens per KV page.
    #[arg(long, default_value_t = 1)]
    pub page_size: u32,
    /// `--kv-cache-dtype` as given to sglang.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: String,
    /// `--enable-unified-memory`.
    #[arg(long)]
    pub enable_unified_memory: bool,
    /// `--mamba-ssm-dtype` as given to sglang (float32, bfloat16, float16): the temporal
    /// state's dtype of a mamba/GDN hybrid (default: the model's own).
    #[arg(long, value_name = "DTYPE")]
    pub mamba_ssm_dtype: Option<String>,
    /// Which attention-TP rank (heads and channels it owns differ; sizes do not).
    #[arg(long, default_value_t = 0)]
    pub rank: u32,
    /// `--pp-size` as given to a prefill server: pipeline stages, each holding a contiguous
    /// range of layers (sglang's `get_pp_indices`).
    #[arg(long, default_value_t = 1)]
    pub pp_size: u32,
    /// Which pipeline stage (0..pp-size): its layers are the ones it registers.
    #[arg(long, default_value_t = 0)]
    pub pp_rank: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl LayoutArgs {
    /// The request these flags make.
    pub fn request(&self) -> LayoutRequest {
        LayoutRequest {
            model: self.model.clone(),
            tp: self.tp,
            page_size: self.page_size,
            kv_cache_dtype: self.kv_cache_dtype.clone(),
            enable_unified_memory: self.enable_unified_memory,
            mamba_ssm_dtype: self.mamba_ssm_dtype.clone(),
            rank: self.rank,
            pp_size: self.pp_size,
            pp_rank: self.pp_rank,
            json: self.json,
        }
    }
}
