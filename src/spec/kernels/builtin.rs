//! The kernel tables that ship with pdsim (`kernels/` at the repository root), one file per GPU
//! AIConfigurator measured, compiled into the binary so a run needs no file beside it. The
//! build (`build.rs`) reads each text file and embeds its compiled form
//! ([`KernelTables::to_compiled`]); a run decodes a file's index on first use, and each of its
//! tables on the first use of that table.

use std::sync::{Arc, OnceLock};

use super::tables::KernelTables;

/// `(pdsim GPU preset, the file's name, its compiled form)` of every shipped table file.
const FILES: &[(&str, &str, &[u8])] = &[
    (
        "a100-sxm",
        "kernels/a100-sxm.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/a100-sxm.kt")),
    ),
    (
        "h100-sxm",
        "kernels/h100-sxm.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/h100-sxm.kt")),
    ),
    (
        "h200",
        "kernels/h200.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/h200.kt")),
    ),
    (
        "b200",
        "kernels/b200.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/b200.kt")),
    ),
    (
        "gb200",
        "kernels/gb200.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/gb200.kt")),
    ),
    (
        "b300",
        "kernels/b300.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/b300.kt")),
    ),
    (
        "gb300",
        "kernels/gb300.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/gb300.kt")),
    ),
    (
        "l40s",
        "kernels/l40s.txt",
        include_bytes!(concat!(env!("OUT_DIR"), "/l40s.kt")),
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
        let (_, file, compiled) = FILES[i];
        Arc::new(
            KernelTables::from_compiled(file, compiled)
                .unwrap_or_else(|e| panic!("a shipped kernel table file decodes: {e}")),
        )
    })))
}

#[cfg(test)]
mod tests {
    /// Every shipped file's compiled form decodes, every table of it too (the run decodes
    /// them on first use), to exactly what the text reader reads from the file (every value's
    /// bits: `Grid`'s equality is `f64`'s, and no table holds a NaN once filled); each names
    /// its GPU and carries the tables every forward needs.
    #[test]
    fn every_shipped_file_decodes_as_its_text_reads_and_has_the_core_tables() {
        let root = env!("CARGO_MANIFEST_DIR");
        for &(g, file, _) in super::FILES {
            let t = super::tables(g).unwrap();
            let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
            let eager = super::KernelTables::parse(file, &text).unwrap();
            assert_eq!(*t, eager, "{file}: the compiled form differs from the text");
            for table in &t.tables {
                assert!(
                    table.grid().values.iter().all(|v| v.is_finite()),
                    "{file}: {} holds a value not filled",
                    table.name
                );
            }
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
