//! Diagnosis of finished runs (DESIGN.md §1): what bound a run's capacity and which levers,
//! run for real, relieve it. `cli/explain.rs` renders it; the failure narrative still lives
//! there.

pub mod capacity;
