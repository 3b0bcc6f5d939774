//! `pdsim lint --prefill "ARGS" --decode "ARGS" [--model-config F] [--profile P] [--json]`:
//! reads two real `python -m sglang.launch_server …` command lines and predicts the pair's
//! outcome — sglang's exact error text, or compatible — from the layouts and the transfer
//! contract alone (`layout/`), without simulating traffic (docs/architecture.md §2). Exit 0 compatible,
//! 1 incompatible, 2 unreadable. The analysis is `diagnose::lint`; this file parses and prints.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::diagnose::lint::{LintQuestion, lint, render};

/// Arguments of `pdsim lint`.
#[derive(Args, Debug, Clone)]
pub struct LintArgs {
    /// The prefill server's command line (`python -m sglang.launch_server --model-path … --disaggregation-mode prefill …`).
    #[arg(long, allow_hyphen_values = true)]
    pub prefill: String,
    /// The decode server's command line.
    #[arg(long, allow_hyphen_values = true)]
    pub decode: String,
    /// A Hugging Face config.json for the model both lines serve (when `--model-path` is
    /// neither a known model id nor a local folder with a config.json).
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
    /// Which sglang behaviour to predict: guarded (default), slice_dispatch or unguarded.
    #[arg(long, default_value = "guarded")]
    pub profile: String,
    /// Which sglang release to predict: seed (default, the commit pdsim grew from), 2026-09
    /// (has --disaggregation-enable-kv-checksum) or 2026-09+pr37840 (also validates peer
    /// layouts at registration).
    #[arg(long, value_name = "VERSION")]
    pub sglang_version: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl LintArgs {
    /// The question these flags ask.
    pub fn question(&self) -> LintQuestion {
        LintQuestion {
            prefill: self.prefill.clone(),
            decode: self.decode.clone(),
            model_config: self.model_config.clone(),
            profile: self.profile.clone(),
            version: self.sglang_version.clone(),
        }
    }
}

/// Runs `pdsim lint`.
pub fn run(a: &LintArgs) -> Result<(), CliError> {
    let r = lint(&a.question())?;
    let text = if a.json {
        serde_json::to_string_pretty(&r).expect("a report serializes") + "\n"
    } else {
        render(&r)
    };
    super::print_out(&text)?;
    if r.prediction.compatible {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "incompatible pair: {}",
            r.prediction
                .kind
                .map_or("silent corruption".to_string(), |k| k.to_string())
        )))
    }
}
