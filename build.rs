//! Compiles the shipped kernel tables (`kernels/*.txt`) into their binary form at build time,
//! so a run decodes a handful of tables instead of parsing a 0.5 MB text file at every start
//! (`src/spec/kernels/tables.rs`, `KernelTables::to_compiled`). The reader is the crate's own
//! (`grid.rs`, `tables.rs`, included here by path), so the text a user writes and the text
//! that ships are read by the same code; a shipped file that does not read fails the build
//! with the reader's message (file and line).

// The build uses the reader and the writer of the compiled form; the rest of the two files
// (the calibrate command's writer, lookups) is the library's.
#![allow(dead_code)]

#[path = "src/spec/kernels/grid.rs"]
mod grid;
#[path = "src/spec/kernels/tables.rs"]
mod tables;

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/spec/kernels/grid.rs");
    println!("cargo:rerun-if-changed=src/spec/kernels/tables.rs");
    println!("cargo:rerun-if-changed=kernels");
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let mut files: Vec<_> = std::fs::read_dir("kernels")
        .expect("the kernels/ folder ships with the sources")
        .map(|e| e.expect("kernels/ lists").path())
        // One file per GPU; the folder also holds the tables' licence.
        .filter(|p| {
            p.extension().is_some_and(|x| x == "txt")
                && !p
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("LICENSE"))
        })
        .collect();
    files.sort();
    for path in files {
        println!("cargo:rerun-if-changed={}", path.display());
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.display().to_string();
        let t = tables::KernelTables::parse(&name, &text)
            .unwrap_or_else(|e| panic!("a shipped kernel-table file does not read: {e}"));
        let stem = path.file_stem().expect("a file name").to_string_lossy();
        let out = Path::new(&out_dir).join(format!("{stem}.kt"));
        std::fs::write(&out, t.to_compiled()).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    }
}
