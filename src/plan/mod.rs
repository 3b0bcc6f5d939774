//! Capacity planning: sweeps over a grid of scenario values × seeds, sharding and merging, and
//! SLO searches (the cheapest point that meets `[slo]` at a rate; each point's highest
//! sustainable rate). See `README.md` beside this file.
//!
//! Everything here is a pure function of the scenario text, the grid and the seeds: points run
//! independently (in parallel with rayon), rows are kept in grid order, and nothing host-
//! dependent reaches a row — so `--jobs 1` and `--jobs 8`, one process or N shards merged, write
//! the same bytes. Files are written by `app`; this module returns rows and text.
//!
//! The parts, each re-exported here so callers name `plan::Grid`, `plan::run_rows`: `grid` (the
//! question: axes, the grid, shards), `run` (running rows), `rows` (a row and `sweep.csv`),
//! `manifest` (`sweep.json` and the checks of rows read back), `error` ([`PlanError`]); and the
//! public modules below for the journal, the searches, the launch lines, the Kubernetes
//! manifests, the Slurm script and the report.

pub mod journal;
pub mod k8s;
pub mod launch;
pub mod report;
pub mod search;
pub mod slurm;

mod error;
mod grid;
mod manifest;
mod rows;
mod run;

pub use error::PlanError;
pub use grid::{
    Axis, Grid, MAX_AXES, MAX_AXIS_VALUES, MAX_GRID_ROWS, Shard, parse_axis, split_values,
};
pub use manifest::{Manifest, fnv, fnv_file, verify_rows};
pub use rows::{SweepRow, parse_sweep_csv, read_sweep_csv, row_columns, sweep_csv};
pub use run::{
    Base, all_infeasible, run_row, run_row_until, run_rows, run_rows_durable, summarize,
    summarize_until,
};
