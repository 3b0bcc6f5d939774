//! Running grid rows: a scenario read once ([`Base`]), one run to its summary with or without
//! the early stop ([`summarize_until`]), and rows run in parallel in grid order
//! ([`run_rows_durable`]). The only part of `plan` that drives the simulator.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::error::PlanError;
use super::grid::Grid;
use super::rows::SweepRow;
use crate::metrics::NullSink;
use crate::metrics::summary::Summary;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::sim::World;

/// Runs one scenario to its summary, writing nothing (`--summary-only` speed).
pub fn summarize(sc: &Scenario) -> Result<Summary, PlanError> {
    summarize_until(sc, false).map(|r| r.0)
}

/// [`summarize`]; with `early_stop`, the run stops as soon as `[slo]` can no longer be met
/// (`metrics::slo::SloWatch`, counting against the arrivals the run will see,
/// `workload::arrivals`), and the simulated second it stopped at and the targets lost by then
/// (space-separated keys) are returned with the summary of the run up to then — whose verdict
/// is the whole run's (missed). A run that meets `[slo]` never stops early, so its summary is
/// the whole run's, byte for byte.
pub fn summarize_until(
    sc: &Scenario,
    early_stop: bool,
) -> Result<(Summary, Option<(f64, String)>), PlanError> {
    let mut sink = NullSink;
    let mut world = World::new(sc, &mut sink);
    let arrivals = early_stop
        .then(|| crate::workload::arrivals(&sc.workload, sc.seed, sc.duration_ns, sc.max_requests));
    if let Some(n) = arrivals {
        world.collector.slo_watch = crate::metrics::slo::SloWatch::new(&sc.slo, n);
    }
    let crate::sim::RunResult { stats, summary, .. } = world
        .run()
        .map_err(|e| PlanError::Io(format!("{}: {e}", sc.source.display())))?;
    let stopped = world
        .collector
        .slo_watch
        .as_ref()
        .filter(|w| w.lost())
        .map(|w| {
            (
                stats.end_ns as f64 / crate::engine::NS_PER_S as f64,
                w.lost_targets().join(" "),
            )
        });
    if let (Some(n), None) = (arrivals, &stopped) {
        // Sessions are closed loop: the count is their planned turns, an upper bound (a turn
        // due after the run's duration or after a failure is never sent).
        if sc.workload.has_sessions() {
            assert!(
                summary.requests.arrived <= n,
                "workload::arrivals is below the run's arrivals (seed {}, {})",
                sc.seed,
                sc.source.display()
            );
        } else {
            // The watch's count is exact only if it is the run's own: a run to its end says so.
            assert_eq!(
                summary.requests.arrived,
                n,
                "workload::arrivals disagrees with the run (seed {}, {})",
                sc.seed,
                sc.source.display()
            );
        }
    }
    if stopped.is_some() {
        assert_eq!(
            summary.slo.met,
            Some(false),
            "a run stopped because [slo] was lost must miss it (seed {}, {})",
            sc.seed,
            sc.source.display()
        );
    }
    Ok((summary, stopped))
}

/// A scenario to sweep: its text (read once) and where it was read from.
#[derive(Clone, Debug)]
pub struct Base {
    /// The scenario file.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// The file, typed (what the verbs read keys of: the arrival rate, the pools).
    pub file: scenario::ScenarioFile,
}

impl Base {
    /// Reads and validates the scenario as written (a sweep of an invalid scenario is exit 2
    /// before any point runs).
    pub fn load(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            PlanError::Scenario(ScenarioError {
                file: path.to_path_buf(),
                line: None,
                key: String::new(),
                message: format!("cannot read the scenario file: {e}"),
            })
        })?;
        let sc = scenario::from_str(&text, path, &[])?;
        Ok(Self {
            path: path.to_path_buf(),
            text,
            file: scenario::resolved_file(&sc),
        })
    }

    /// The scenario with `sets` applied.
    pub fn with(&self, sets: &[String]) -> Result<Scenario, ScenarioError> {
        scenario::from_str(&self.text, &self.path, sets)
    }
}

/// Runs rows `which` of `grid` on `jobs` threads; results in the order of `which`. A point
/// whose values make an invalid scenario becomes an infeasible row; an error that is the
/// same for every point (a misspelt `--vary` key) is exit 2 once every row failed.
pub fn run_rows(
    base: &Base,
    grid: &Grid,
    which: &[usize],
    jobs: usize,
) -> Result<Vec<SweepRow>, PlanError> {
    let rows = run_rows_durable(
        base,
        grid,
        which,
        jobs,
        false,
        &Default::default(),
        &|_, _| Ok(()),
    )?;
    all_infeasible(&rows)?;
    Ok(rows)
}

/// Exit 2 when every row is infeasible (and there is at least one): no point of the grid is
/// a valid scenario, which is a mistake in the question (a misspelt key), not a result.
pub fn all_infeasible(rows: &[SweepRow]) -> Result<(), PlanError> {
    if !rows.is_empty() && rows.iter().all(|r| r.error.is_some()) {
        return Err(PlanError::NoValidPoint {
            first: rows[0].error.clone().unwrap_or_default(),
        });
    }
    Ok(())
}

/// [`run_rows`] that skips the rows in `done` (finished by an earlier, interrupted process)
/// and hands every row it runs to `on_row` as soon as it finishes (to make it durable), before
/// the next point starts on that thread. No all-infeasible check: a shard may hold only
/// infeasible rows and must still be written so its sweep can be merged. `early_stop`: see
/// [`run_row_until`] (a plan's; a sweep runs every row to its end).
#[allow(clippy::too_many_arguments)]
pub fn run_rows_durable(
    base: &Base,
    grid: &Grid,
    which: &[usize],
    jobs: usize,
    early_stop: bool,
    done: &std::collections::BTreeMap<usize, SweepRow>,
    on_row: &(dyn Fn(usize, &SweepRow) -> Result<(), PlanError> + Sync),
) -> Result<Vec<SweepRow>, PlanError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| PlanError::flag("--jobs", format!("--jobs {jobs}: {e}")))?;
    let rows: Vec<Result<SweepRow, PlanError>> = pool.install(|| {
        which
            .par_iter()
            .map(|&i| {
                if let Some(r) = done.get(&i) {
                    return Ok(r.clone());
                }
                let row = run_row_until(base, grid, i, early_stop)?;
                on_row(i, &row)?;
                Ok(row)
            })
            .collect()
    });
    rows.into_iter().collect()
}

/// Row `i` of `grid`: its run, or an infeasible row when its values make an invalid scenario.
pub fn run_row(base: &Base, grid: &Grid, i: usize) -> Result<SweepRow, PlanError> {
    run_row_until(base, grid, i, false)
}

/// [`run_row`]; with `early_stop`, a run stops once `[slo]` is lost ([`summarize_until`]) and
/// its row says when (`stopped_early_at_s`).
pub fn run_row_until(
    base: &Base,
    grid: &Grid,
    i: usize,
    early_stop: bool,
) -> Result<SweepRow, PlanError> {
    let seed = grid.seeds[i % grid.seeds.len()];
    Ok(match base.with(&grid.sets_of(i)) {
        Ok(sc) => {
            let (s, stopped) = summarize_until(&sc, early_stop)?;
            let mut row = SweepRow::of(&sc, &s);
            if let Some((at_s, lost)) = stopped {
                // The cut run misses more targets than the whole run may (what was in flight
                // counts as infinitely late): name only those certainly missed.
                row.stopped_early_at_s = Some(at_s);
                row.slo_missed = Some(lost);
            }
            row
        }
        Err(e) => SweepRow::infeasible(seed, e.to_string()),
    })
}
