//! The kernel tables that ship with pdsim (`kernels/` at the repository root), one file per GPU
//! AIConfigurator measured, compiled into the binary so a run needs no file beside it; each is
//! read on first use, and each of its tables on the first use of that table.

use std::sync::{Arc, OnceLock};

use super::tables::KernelTables;

/// `(pdsim GPU preset, the file's name, its text)` of every shipped table file.
const FILES: &[(&str, &str, &str)] = &[
    (
        "a100-sxm",
        "kernels/a100-sxm.txt",
        include_str!("../../../kernels/a100-sxm.txt"),
    ),
    (
        "h100-sxm",
        "kernels/h100-sxm.txt",
        include_str!("../../../kernels/h100-sxm.txt"),
    ),
    (
        "h200",
        "kernels/h200.txt",
        include_str!("../../../kernels/h200.txt"),
    ),
    (
        "b200",
        "kernels/b200.txt",
        include_str!("../../../kernels/b200.txt"),
    ),
    (
        "gb200",
        "kernels/gb200.txt",
        include_str!("../../../kernels/gb200.txt"),
    ),
    (
        "b300",
        "kernels/b300.txt",
        include_str!("../../../kernels/b300.txt"),
    ),
    (
        "gb300",
        "kernels/gb300.txt",
        include_str!("../../../kernels/gb300.txt"),
    ),
    (
        "l40s",
        "kernels/l40s.txt",
        include_str!("../../../kernels/l40s.txt"),
    ),
];

/// The GPU presets with shipped tables.
pub fn gpus() -> impl Iterator<Item = &'static str> {
    FILES.iter().map(|(g, ..)| *g)
}

/// The shipped tables of GPU preset `gpu`, or `None` for a GPU AIConfigurator did not
/// measure.
pub fn tables(gpu: &str) -> Option<Arc<KernelTables>> {
    static PARSED: [OnceLock<Arc<KernelTables>>; FILES.len()] =
        [const { OnceLock::new() }; FILES.len()];
    let i = FILES.iter().position(|(g, ..)| *g == gpu)?;
    Some(Arc::clone(PARSED[i].get_or_init(|| {
        let (_, file, text) = FILES[i];
        Arc::new(
            KernelTables::parse_shipped(file, text)
                .unwrap_or_else(|e| panic!("a shipped kernel table file parses: {e}")),
        )
    })))
}

#[cfg(test)]
mod tests {
    /// Every shipped file parses, every table of it too (the run reads them on first use),
    /// as the eager reader reads it; each names its GPU and carries the tables every forward
    /// needs.
    #[test]
    fn every_shipped_file_parses_and_has_the_core_tables() {
        for &(g, file, text) in super::FILES {
            let t = super::tables(g).unwrap();
            let eager = super::KernelTables::parse(file, text).unwrap();
            assert_eq!(*t, eager, "{file}: read on use differs from read at once");
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
