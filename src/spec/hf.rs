//! PLACEHOLDER — replaced by the Hugging Face config importer before commit.
use std::path::Path;
pub fn load_model_config(path: &Path) -> Result<crate::spec::ModelSpec, String> {
    Err(format!("{}: config import pending", path.display()))
}
