//! Diagnosis (docs/architecture.md §1): what a run, a pair of launch lines or a failure kind means for
//! people. Everything here reads results back through the results schema (`report::schema`) or
//! takes a loaded scenario; the verbs in `app/` and `cli/` call these and print.
//!
//! - [`explain`]: the narrative of a finished run — outcomes, each failure kind, who was hurt,
//!   the fix, and the capacity analysis;
//! - [`capacity`]: which pool binds on which resource, and the levers, each run for real;
//! - [`lint`] and [`outcome`]: a prefill/decode pair's outcome predicted from two launch lines;
//! - [`kinds`]: one fact table per error kind (where sglang raises it, the check, the effect,
//!   the flags that fix it).

pub mod capacity;
pub mod explain;
pub mod kinds;
pub mod lint;
pub mod outcome;

#[cfg(test)]
mod guard_tests;
