//! `pdsim layout --model M [--tp N] [--page-size P] [--kv-cache-dtype D]
//! [--mamba-ssm-dtype T] [--enable-unified-memory] [--rank R] [--pp-size N --pp-rank S] [--json]`: the KV and state
//! regions one rank registers.

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
    /// `--mamba-ssm-dtype` (`float32`, `bfloat16`, `float16`), when given: the temporal state's
    /// dtype of a mamba/GDN hybrid (`None`: the model's own).
    pub mamba_ssm_dtype: Option<String>,
    /// Which attention-TP rank (heads and channels it owns differ; sizes do not).
    pub rank: u32,
    /// `--pp-size`: pipeline stages of a prefill instance (1: none).
    pub pp_size: u32,
    /// Which pipeline stage (its layers differ).
    pub pp_rank: u32,
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
    let mut spec = load_model(&a.model)?;
    if let Some(dt) = a.mamba_ssm_dtype.as_deref() {
        let valid: Vec<&str> = server::MAMBA_SSM_DTYPES.iter().map(|x| x.0).collect();
        let bytes = server::mamba_ssm_dtype_bytes(dt).ok_or_else(|| {
            CliError::flag(
                "--mamba-ssm-dtype",
                format!(
                    "--mamba-ssm-dtype {dt:?}: sglang takes {}",
                    valid.join(", ")
                ),
            )
        })?;
        let m = spec.mamba.as_mut().ok_or_else(|| {
            CliError::flag(
                "--mamba-ssm-dtype",
                format!(
                    "--mamba-ssm-dtype: model {:?} has no mamba/linear-attention state to set",
                    spec.name
                ),
            )
        })?;
        m.ssm_dtype_bytes = bytes;
    }
    if !server::KV_CACHE_DTYPES.contains(&a.kv_cache_dtype.as_str()) {
        return Err(CliError::Flag {
            flag: "--kv-cache-dtype",
            message: format!(
                "--kv-cache-dtype {:?}: {}valid values are {}",
                a.kv_cache_dtype,
                server::unmodelled_kv_dtype(&a.kv_cache_dtype)
                    .map_or_else(String::new, |w| format!("{w}; ")),
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
    if a.pp_size == 0 || a.pp_size > spec.num_layers {
        return Err(CliError::flag(
            "--pp-size",
            format!(
                "--pp-size {}: must be 1 (no pipeline) to {} (the layers of {}; a stage needs one)",
                a.pp_size, spec.num_layers, spec.name
            ),
        ));
    }
    if a.pp_size > 1 && (spec.is_hybrid() || spec.is_swa() || a.enable_unified_memory) {
        return Err(CliError::flag(
            "--pp-size",
            format!(
                "--pp-size {}: pipeline stages are modelled for models without recurrent or sliding-window state; {} has it",
                a.pp_size, spec.name
            ),
        ));
    }
    if a.pp_rank >= a.pp_size {
        return Err(CliError::flag(
            "--pp-rank",
            format!(
                "--pp-rank {} is out of range for --pp-size {} (0..{})",
                a.pp_rank, a.pp_size, a.pp_size
            ),
        ));
    }
    let args = ServerArgs {
        enable_unified_memory: a.enable_unified_memory,
        radix_cache: None,
        mamba_ssm_dtype: a.mamba_ssm_dtype.clone(),
        pp_size: a.pp_size,
        ..ServerArgs::sglang_defaults(a.tp, a.page_size, &a.kv_cache_dtype)
    };
    Ok(RankLayout::stage(&spec, &args, a.rank, a.pp_rank)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(dtype: Option<&str>, model: &str) -> Result<RankLayout, CliError> {
        layout_of(&LayoutRequest {
            model: model.into(),
            tp: 2,
            page_size: 16,
            kv_cache_dtype: "auto".into(),
            enable_unified_memory: false,
            mamba_ssm_dtype: dtype.map(String::from),
            rank: 0,
            pp_size: 1,
            pp_rank: 0,
            json: false,
        })
    }

    /// Qwen3-Next at TP 2: 16 value heads × 128 × 128 a rank, a 1,048,576-byte temporal row in
    /// FP32 (the model's own) and 524,288 in BF16; the conv rows (24,576 B) keep their dtype.
    #[test]
    fn the_ssm_dtype_sets_the_temporal_row() {
        let q = "qwen3-next-80b-a3b";
        let max = |l: RankLayout| l.state_item_lens().into_iter().max().unwrap();
        assert_eq!(max(ask(None, q).unwrap()), 1_048_576);
        assert_eq!(max(ask(Some("float32"), q).unwrap()), 1_048_576);
        let bf16 = ask(Some("bfloat16"), q).unwrap();
        assert_eq!(bf16.state_item_lens().into_iter().min(), Some(24_576));
        assert_eq!(max(bf16), 524_288);
        let bad = ask(Some("fp32"), q).unwrap_err().to_string();
        assert!(
            bad.contains("sglang takes float32, bfloat16, float16"),
            "{bad}"
        );
        let dense = ask(Some("float32"), "llama-3.1-8b")
            .unwrap_err()
            .to_string();
        assert!(dense.contains("no mamba/linear-attention state"), "{dense}");
    }

    /// `--pp-size 2 --pp-rank 1` on Llama-3.1-8B: the second stage's 16 layers (16–31), K then
    /// V, 32 regions; a stage out of range, 0 stages and a hybrid model are refused naming the
    /// flag.
    #[test]
    fn a_pipeline_stage_registers_its_layers() {
        let stage = |pp: u32, r: u32, model: &str| {
            layout_of(&LayoutRequest {
                model: model.into(),
                tp: 2,
                page_size: 64,
                kv_cache_dtype: "auto".into(),
                enable_unified_memory: false,
                mamba_ssm_dtype: None,
                rank: 0,
                pp_size: pp,
                pp_rank: r,
                json: false,
            })
        };
        let l = stage(2, 1, "llama-3.1-8b").unwrap();
        assert_eq!(
            (l.pp_rank, l.pp_size, l.start_layer, l.end_layer()),
            (1, 2, 16, 32)
        );
        let layers: Vec<u32> = l.kv_regions.iter().filter_map(|r| r.layer).collect();
        let want: Vec<u32> = (16..32).chain(16..32).collect();
        assert_eq!(layers, want);
        assert!(crate::layout::render_table(&l).contains("pipeline stage 1 of 2"));
        for (pp, r, m, flag) in [
            (2, 2, "llama-3.1-8b", "--pp-rank"),
            (0, 0, "llama-3.1-8b", "--pp-size"),
            (2, 0, "qwen3-next-80b-a3b", "--pp-size"),
        ] {
            let e = stage(pp, r, m).expect_err("refused");
            assert_eq!(e.key().as_deref(), Some(flag), "{e}");
        }
    }
}
