//! The `pdsim` binary and its verbs: files written, exit codes, messages, `pdsim check`,
//! `pdsim explain` (golden texts: `PDSIM_BLESS=1 cargo test --release --test cli explain::`),
//! `pdsim plan`, the reports and `--trace-events`. One test binary; each former test crate is a
//! module of the same name (`cargo test --release --test cli plan`).

#[path = "../common/mod.rs"]
mod common;

mod calibrate_kernels;
mod check;
mod cli;
mod explain;
mod k8s_schema;
mod plan;
mod report_story;
mod serve;
mod trace_events;
