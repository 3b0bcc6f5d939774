//! `pdsim layout --model M [--tp N] [--page-size P] [--kv-cache-dtype D]
//! [--enable-unified-memory] [--rank R] [--json]`: the KV and state regions one rank registers.

use std::path::Path;

use super::CliError;
use crate::layout::{RankLayout, render_table};
use crate::spec::{ServerArgs, model, server};

/// What `pdsim layout` is asked: the command line's flags (`cli::layout`) or a program's call
/// (`crate::api`).
#[derive(Debug, Clone)]
pub struct LayoutRequest {
    /// A model preset (e.g. qwen3-next-80b-a3b) or a Hugging Face config.json.
    pub model: String,
    /// Attention TP size.
    pub tp: u32,
    /// Tokens per KV page.
    pub page_size: u32,
    /// `--kv-cache-dtype` as given to sglang.
    pub kv_cache_dtype: String,
    /// `--enable-unified-memory`.
    pub enable_unified_memory: bool,
    /// Which attention-TP rank (heads and channels it owns differ; sizes do not).
    pub rank: u32,
    /// Print JSON instead of a table.
    pub json: bool,
}

/// A model preset, or a Hugging Face `config.json` read from `name`.
pub(crate) fn load_model(name: &str) -> Result<crate::spec::ModelSpec, CliError> {
    match model::preset(name) {
        Some(m) => Ok(m),
        None if name.ends_with(".json") || Path::new(name).is_file() => {
            Ok(crate::spec::hf::load_model_config(Path::new(name))?)
        }
        None => Err(CliError::Flag {
            flag: "--model",
            message: format!(
                "--model {name:?} is neither a preset ({}) nor a config.json file",
                model::MODEL_PRESETS.join(", ")
            ),
        }),
    }
}

/// Prints the layout.
pub fn run(a: &LayoutRequest) -> Result<(), CliError> {
    let layout = layout_of(a)?;
    if a.json {
        let text = serde_json::to_string_pretty(&layout).map_err(|e| CliError::Flag {
            flag: "--json",
            message: format!("cannot render JSON: {e}"),
        })?;
        super::print_out(&format!("{text}\n"))
    } else {
        super::print_out(&render_table(&layout))
    }
}

/// The layout the flags ask for, every flag checked (what `run` prints; `crate::api` returns it).
pub fn layout_of(a: &LayoutRequest) -> Result<RankLayout, CliError> {
    let spec = load_model(&a.model)?;
    if !server::KV_CACHE_DTYPES.contains(&a.kv_cache_dtype.as_str()) {
        return Err(CliError::Flag {
            flag: "--kv-cache-dtype",
            message: format!(
                "--kv-cache-dtype {:?}: valid values are {}",
                a.kv_cache_dtype,
                server::KV_CACHE_DTYPES.join(", ")
            ),
        });
    }
    if a.tp == 0 {
        return Err(CliError::flag("--tp", "--tp must be at least 1".into()));
    }
    server::check_page_size(a.page_size)
        .map_err(|m| CliError::flag("--page-size", format!("--page-size {}: {m}", a.page_size)))?;
    if a.rank >= a.tp {
        return Err(CliError::Flag {
            flag: "--rank",
            message: format!(
                "--rank {} is out of range for --tp {} (0..{})",
                a.rank, a.tp, a.tp
            ),
        });
    }
    let args = ServerArgs {
        enable_unified_memory: a.enable_unified_memory,
        radix_cache: None,
        ..ServerArgs::sglang_defaults(a.tp, a.page_size, &a.kv_cache_dtype)
    };
    Ok(RankLayout::new(&spec, &args, a.rank)?)
}
