//! The same input gives the same bytes and loses nothing: the golden hashes of every scenario,
//! byte-identical reruns, and one outcome per arrived request. Small on purpose: the check a
//! refactor must pass without re-blessing (`cargo test --release --test determinism`) builds
//! little besides the library. Rewrite the golden table on purpose with
//! `PDSIM_BLESS=1 cargo test --release --test determinism golden`.

#[path = "../common/mod.rs"]
mod common;

mod conservation;
mod determinism;
mod golden;
