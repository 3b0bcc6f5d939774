//! The kernel tables that ship with pdsim (`kernels/` at the repository root), one file per GPU
//! AIConfigurator measured, compiled into the binary so a run needs no file beside it; each is
//! parsed once, on first use.

use std::sync::{Arc, OnceLock};

use super::tables::KernelTables;

/// `(pdsim GPU preset, the file's text)` of every shipped table file.
const FILES: &[(&str, &str)] = &[
    ("a100-sxm", include_str!("../../../kernels/a100-sxm.txt")),
    ("h100-sxm", include_str!("../../../kernels/h100-sxm.txt")),
    ("h200", include_str!("../../../kernels/h200.txt")),
    ("b200", include_str!("../../../kernels/b200.txt")),
    ("gb200", include_str!("../../../kernels/gb200.txt")),
    ("b300", include_str!("../../../kernels/b300.txt")),
    ("gb300", include_str!("../../../kernels/gb300.txt")),
    ("l40s", include_str!("../../../kernels/l40s.txt")),
];

/// The GPU presets with shipped tables.
pub fn gpus() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(g, _)| *g)
}

/// The shipped tables of GPU preset `gpu`, or `None` for a GPU AIConfigurator did not
/// measure.
pub fn tables(gpu: &str) -> Option<Arc<KernelTables>> {
    static PARSED: [OnceLock<Arc<KernelTables>>; FILES.len()] =
        [const { OnceLock::new() }; FILES.len()];
    let i = FILES.iter().position(|(g, _)| *g == gpu)?;
    Some(Arc::clone(PARSED[i].get_or_init(|| {
        let (g, text) = FILES[i];
        Arc::new(
            KernelTables::parse(&format!("kernels/{g}.txt"), text)
                .unwrap_or_else(|e| panic!("a shipped kernel table file parses: {e}")),
        )
    })))
}

#[cfg(test)]
mod tests {
    /// Every shipped file parses, names its GPU and carries the tables every forward needs.
    #[test]
    fn every_shipped_file_parses_and_has_the_core_tables() {
        for g in super::gpus() {
            let t = super::tables(g).unwrap();
            assert_eq!(t.meta.gpu, g);
            assert!(
                t.meta.source.starts_with("aiconfigurator-core 0.12.0"),
                "{g}: {}",
                t.meta.source
            );
            for name in ["gemm", "context_attention", "generation_attention"] {
                assert!(t.find(name, &[]).is_some(), "{g}: no {name}");
            }
        }
    }
}
