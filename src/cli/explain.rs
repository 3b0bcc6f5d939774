//! `pdsim explain`: its flags; the verb itself is `app::explain`.

use std::path::PathBuf;

use clap::Args;

use crate::app::explain::ExplainRequest;

/// Arguments of `pdsim explain`.
#[derive(Args, Debug, Clone)]
pub struct ExplainArgs {
    /// A results folder (from `pdsim run`) or a scenario file (run first).
    pub path: PathBuf,
    /// Markdown instead of plain text.
    #[arg(long)]
    pub markdown: bool,
    /// Where a scenario's run writes its results (default `results/<run.name>/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides a scenario key (scenario files only), as `pdsim run --set` does.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

impl ExplainArgs {
    /// The request these flags make.
    pub fn request(&self) -> ExplainRequest {
        ExplainRequest {
            path: self.path.clone(),
            markdown: self.markdown,
            out: self.out.clone(),
            sets: self.sets.clone(),
        }
    }
}
