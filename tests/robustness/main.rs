//! Bad input and killed processes end cleanly: every bad scenario's message, issue 15's
//! reproducers, traces that change under a run, issue 25's reliability cases (locks, kills,
//! resumes, merges) and the in-repo fuzzer's fixed budget (`docs/fuzzing.md`:
//! `cargo test --release --test robustness fuzz:: -- --nocapture`). One test binary; each
//! former test crate is a module of the same name.

#[path = "../common/mod.rs"]
mod common;
#[path = "../fuzz_gen/mod.rs"]
mod fuzz_gen;

mod edges;
mod fuzz;
mod hardening;
mod reliability;
mod scenario_errors;
mod trace_stream;
