//! Capacity planning: sweeps over a grid of scenario values × seeds, sharding and merging, and
//! SLO searches (the cheapest point that meets `[slo]` at a rate; each point's highest
//! sustainable rate). See `README.md` beside this file.
//!
//! Everything here is a pure function of the scenario text, the grid and the seeds: points run
//! independently (in parallel with rayon), rows are kept in grid order, and nothing host-
//! dependent reaches a row — so `--jobs 1` and `--jobs 8`, one process or N shards merged, write
//! the same bytes. Files are written by `cli`; this module returns rows and text.

pub mod journal;
pub mod k8s;
pub mod launch;
pub mod report;
pub mod search;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::Role;
use crate::metrics::NullSink;
use crate::metrics::summary::Summary;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::sim::World;

/// A failure of a sweep or search, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A flag's value is not valid (exit 2): `flag` names it (`--vary`, `--shard`, `--seeds`,
    /// `--jobs`, `--set`, `--resume`), the message says what would be.
    #[error("{message}")]
    Flag {
        /// The flag, as typed on the command line.
        flag: &'static str,
        /// What is wrong and what is valid.
        message: String,
    },
    /// A file read back (a shard's `sweep.csv` or `sweep.json`, a `plan.csv`) that is not what
    /// pdsim wrote: cut short, edited, of another sweep or another pdsim (exit 2).
    #[error("{message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// No point of the grid is a valid scenario: a mistake in the question (a misspelt key or
    /// value), not a result (exit 2). `first` is the first point's error.
    #[error("no grid point is a valid scenario; the first: {first}")]
    NoValidPoint {
        /// The first point's error message.
        first: String,
    },
    /// The scenario itself is invalid (exit 2).
    #[error("{0}")]
    Scenario(#[from] ScenarioError),
    /// A simulation could not finish (a trace unreadable mid-run; exit 3).
    #[error("{0}")]
    Io(String),
}

impl PlanError {
    /// A bad value of `flag` (exit 2).
    pub fn flag(flag: &'static str, message: String) -> Self {
        PlanError::Flag { flag, message }
    }

    /// A results file that is not what pdsim wrote (exit 2).
    pub fn file(path: &Path, message: String) -> Self {
        PlanError::File {
            path: path.to_path_buf(),
            message,
        }
    }

    /// The flag, key or file the error is about (see `CliError::key`).
    pub fn key(&self) -> Option<String> {
        match self {
            PlanError::Flag { flag, .. } => Some((*flag).to_string()),
            PlanError::File { path, .. } => Some(path.display().to_string()),
            PlanError::Scenario(e) if !e.key.is_empty() => Some(e.key.clone()),
            _ => None,
        }
    }
}

/// One `--vary KEY=V1,V2,...`: a dotted scenario key (as `--set` takes it) and its values,
/// each a TOML value as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// The dotted key.
    pub key: String,
    /// The values, as written.
    pub values: Vec<String>,
}

/// Splits `V1,V2,...` at top-level commas (not inside `{}`, `[]` or quotes), so inline tables
/// and arrays can be values: `workload.arrival={ process = "poisson", rate_per_s = 4 },{...}`.
pub fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur.trim().to_string());
    out
}

/// Parses one `--vary` argument.
pub fn parse_axis(arg: &str) -> Result<Axis, PlanError> {
    let (key, values) = arg.split_once('=').ok_or_else(|| {
        PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: expected KEY=V1,V2,..., e.g. --vary pools.decode.instances=1,2,4"
            ),
        )
    })?;
    let key = key.trim().to_string();
    let values = split_values(values);
    if key.is_empty() || values.iter().any(String::is_empty) {
        return Err(PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: a key and at least one non-empty value are needed, e.g. --vary pools.decode.instances=1,2,4"
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for v in &values {
        if !seen.insert(v) {
            return Err(PlanError::flag(
                "--vary",
                format!("--vary {key}: value {v} is listed twice"),
            ));
        }
    }
    Ok(Axis { key, values })
}

/// The grid: every combination of the axes' values, the first axis varying slowest, each run
/// on every seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// The axes, in `--vary` order.
    pub axes: Vec<Axis>,
    /// The seeds every point runs on.
    pub seeds: Vec<u64>,
    /// `--set` assignments applied to every point before the axes (e.g. the rate of a plan).
    pub fixed: Vec<String>,
}

/// At most this many rows (points × seeds) in a grid: each is a simulation, and a grid past
/// this is a typo (an extra axis, a seed count with one digit too many) rather than a plan.
pub const MAX_GRID_ROWS: usize = 1_000_000;
/// At most this many `--vary` axes.
pub const MAX_AXES: usize = 32;
/// At most this many values on one axis.
pub const MAX_AXIS_VALUES: usize = 10_000;

impl Grid {
    /// A grid; an axis named twice, a grid past [`MAX_GRID_ROWS`] rows, more than
    /// [`MAX_AXES`] axes, an empty axis or no seed is an error (exit 2, stating the limit).
    pub fn new(axes: Vec<Axis>, seeds: Vec<u64>, fixed: Vec<String>) -> Result<Self, PlanError> {
        if axes.len() > MAX_AXES {
            return Err(PlanError::flag(
                "--vary",
                format!(
                    "{} --vary axes: at most {MAX_AXES} are supported",
                    axes.len()
                ),
            ));
        }
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.key == a.key) {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {} is given twice; list every value in one --vary",
                        a.key
                    ),
                ));
            }
            if a.values.is_empty() || a.values.len() > MAX_AXIS_VALUES {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {}: {} values; give 1 to {MAX_AXIS_VALUES}",
                        a.key,
                        a.values.len()
                    ),
                ));
            }
            if a.key == "run.seed" {
                return Err(PlanError::flag("--vary",
                    "--vary run.seed: the seeds are the grid's own (run.seed, run.seed + 1, … for --seeds N); set the first with --set run.seed=S and the count with --seeds N".into(),
                ));
            }
        }
        if seeds.is_empty() {
            return Err(PlanError::flag(
                "--seeds",
                "--seeds must be at least 1".into(),
            ));
        }
        let rows = axes
            .iter()
            .try_fold(seeds.len(), |n, a| n.checked_mul(a.values.len()))
            .filter(|&n| n <= MAX_GRID_ROWS);
        if rows.is_none() {
            let shown =
                axes.iter().map(|a| a.values.len() as f64).product::<f64>() * seeds.len() as f64;
            return Err(PlanError::flag(
                "--vary",
                format!(
                    "the grid has {shown:.3e} rows ({} axes × {} seeds); at most {MAX_GRID_ROWS} are supported: vary fewer keys or values, or use fewer seeds",
                    axes.len(),
                    seeds.len()
                ),
            ));
        }
        Ok(Self { axes, seeds, fixed })
    }

    /// Grid points (combinations of axis values).
    pub fn points(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// Rows: points × seeds.
    pub fn rows(&self) -> usize {
        self.points() * self.seeds.len()
    }

    /// The axis values of point `p`, in axis order.
    pub fn values_of(&self, p: usize) -> Vec<&str> {
        let mut rest = p;
        let mut out = vec![""; self.axes.len()];
        for (k, a) in self.axes.iter().enumerate().rev() {
            out[k] = &a.values[rest % a.values.len()];
            rest /= a.values.len();
        }
        out
    }

    /// The `--set` list of row `i` (point `i / seeds`, seed `i % seeds`).
    pub fn sets_of(&self, i: usize) -> Vec<String> {
        let (p, s) = (i / self.seeds.len(), i % self.seeds.len());
        let mut sets = self.fixed.clone();
        for (a, v) in self.axes.iter().zip(self.values_of(p)) {
            sets.push(format!("{}={v}", a.key));
        }
        sets.push(format!("run.seed={}", self.seeds[s]));
        sets
    }
}

/// `--shard I/N`: this process runs rows `I, I + N, I + 2N, ...` (interleaved, so every shard
/// gets a similar mix of cheap and expensive points).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based index.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl Shard {
    /// Parses `I/N` with `0 ≤ I < N`.
    pub fn parse(s: &str) -> Result<Self, PlanError> {
        let bad = || {
            PlanError::flag(
                "--shard",
                format!(
                    "--shard {s:?}: expected I/N with 0 ≤ I < N, e.g. --shard 0/4 (Slurm: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT; Kubernetes: $JOB_COMPLETION_INDEX/N)"
                ),
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }

    /// The rows of a grid of `rows` this shard runs.
    pub fn rows(&self, rows: usize) -> impl Iterator<Item = usize> + '_ {
        (self.index..rows).step_by(self.count)
    }
}

/// One row of `sweep.csv`: a point on one seed. Field order is column order (after the varied
/// keys, which come first); `None` is a blank cell (no data, or an infeasible point).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// The seed.
    pub seed: u64,
    /// GPUs in all pools.
    pub gpus: Option<u32>,
    /// Nodes the pools span.
    pub nodes: Option<u32>,
    /// GPUs of those nodes no instance uses (`nodes × gpus_per_node − gpus`).
    pub idle_gpus: Option<u32>,
    /// GPUs paid for: `gpus`, or `nodes × gpus_per_node` under `hardware.billing = "node"`.
    pub billed_gpus: Option<u32>,
    /// Prefill instances (all prefill pools).
    pub prefill_instances: Option<u32>,
    /// Decode instances.
    pub decode_instances: Option<u32>,
    /// Colocated instances.
    pub colocated_instances: Option<u32>,
    /// The arrival rate asked for, requests/s (`workload.arrival.rate_per_s` or the trace's
    /// `rate_per_s`; blank for other processes).
    pub rate_per_s: Option<f64>,
    /// Requests that arrived.
    pub arrived: Option<u64>,
    /// Completed.
    pub completed: Option<u64>,
    /// Failed.
    pub failed: Option<u64>,
    /// Corrupted.
    pub corrupted: Option<u64>,
    /// Unfinished.
    pub unfinished: Option<u64>,
    /// TTFT median, ms (finished requests).
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p90, ms.
    pub ttft_p90_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// TPOT median, ms.
    pub tpot_p50_ms: Option<f64>,
    /// TPOT p90, ms.
    pub tpot_p90_ms: Option<f64>,
    /// TPOT p99, ms.
    pub tpot_p99_ms: Option<f64>,
    /// End-to-end p99, ms.
    pub e2e_p99_ms: Option<f64>,
    /// Finished requests/s over the arrival window.
    pub requests_per_s: Option<f64>,
    /// Output tokens/s over the arrival window.
    pub output_tokens_per_s: Option<f64>,
    /// Output tokens/s per GPU over the arrival window.
    pub output_tokens_per_s_per_gpu: Option<f64>,
    /// Requests/s within the per-request SLO thresholds, over the arrival window.
    pub goodput_requests_per_s: Option<f64>,
    /// Share of arrived requests that completed within the per-request thresholds.
    pub slo_attainment: Option<f64>,
    /// Whether every `[slo]` target holds (blank when `[slo]` sets none).
    pub slo_met: Option<bool>,
    /// The `[slo]` targets missed, space-separated (`ttft_p99_ms attainment_min`); blank when
    /// every target holds or none is set. For a run stopped early, the targets already lost at
    /// the stop (the whole run misses them; the others were undecided).
    pub slo_missed: Option<String>,
    /// Simulated second at which `pdsim plan` stopped the run because `[slo]` could no longer
    /// be met (`metrics::slo::SloWatch`; the verdict is the whole run's, the other figures
    /// are of the requests up to then); blank for a run to its end.
    pub stopped_early_at_s: Option<f64>,
    /// Billed GPUs × `hardware.usd_per_gpu_hour`.
    pub usd_per_hour: Option<f64>,
    /// Dollars per million output tokens.
    pub usd_per_1m_output_tokens: Option<f64>,
    /// What bound each pool, `pool:bottleneck` space-separated.
    pub bottlenecks: Option<String>,
    /// Why the point could not run (an invalid combination), blank otherwise.
    pub error: Option<String>,
}

impl SweepRow {
    /// A point that could not run.
    fn infeasible(seed: u64, error: String) -> Self {
        Self {
            seed,
            gpus: None,
            nodes: None,
            idle_gpus: None,
            billed_gpus: None,
            prefill_instances: None,
            decode_instances: None,
            colocated_instances: None,
            rate_per_s: None,
            arrived: None,
            completed: None,
            failed: None,
            corrupted: None,
            unfinished: None,
            ttft_p50_ms: None,
            ttft_p90_ms: None,
            ttft_p99_ms: None,
            tpot_p50_ms: None,
            tpot_p90_ms: None,
            tpot_p99_ms: None,
            e2e_p99_ms: None,
            requests_per_s: None,
            output_tokens_per_s: None,
            output_tokens_per_s_per_gpu: None,
            goodput_requests_per_s: None,
            slo_attainment: None,
            slo_met: None,
            slo_missed: None,
            stopped_early_at_s: None,
            usd_per_hour: None,
            usd_per_1m_output_tokens: None,
            bottlenecks: None,
            error: Some(error),
        }
    }

    /// The row of a finished run.
    pub fn of(sc: &Scenario, s: &Summary) -> Self {
        let count = |role: Role| -> u32 {
            sc.pools
                .iter()
                .filter(|p| p.role == role)
                .map(|p| p.instances)
                .sum()
        };
        let w = &s.throughput.arrival_window;
        let l = &s.latency_ms;
        let gpus = s.cluster.gpus;
        let nodes = s.cluster.nodes;
        let missed: Vec<&str> = s
            .slo
            .targets
            .iter()
            .filter(|t| !t.met)
            .map(|t| t.key.as_str())
            .collect();
        Self {
            seed: sc.seed,
            gpus: Some(gpus),
            nodes: Some(nodes),
            idle_gpus: Some((nodes * sc.gpus_per_node).saturating_sub(gpus)),
            billed_gpus: Some(sc.billing.billed_gpus(gpus, nodes, sc.gpus_per_node)),
            prefill_instances: Some(count(Role::Prefill)),
            decode_instances: Some(count(Role::Decode)),
            colocated_instances: Some(count(Role::Colocated)),
            rate_per_s: rate_of(sc),
            arrived: Some(s.requests.arrived),
            completed: Some(s.requests.completed),
            failed: Some(s.requests.failed),
            corrupted: Some(s.requests.corrupted),
            unfinished: Some(s.requests.unfinished),
            ttft_p50_ms: l.ttft.p50,
            ttft_p90_ms: l.ttft.p90,
            ttft_p99_ms: l.ttft.p99,
            tpot_p50_ms: l.tpot.p50,
            tpot_p90_ms: l.tpot.p90,
            tpot_p99_ms: l.tpot.p99,
            e2e_p99_ms: l.e2e.p99,
            requests_per_s: Some(w.requests_per_s),
            output_tokens_per_s: Some(w.output_tokens_per_s),
            output_tokens_per_s_per_gpu: Some(w.output_tokens_per_s / f64::from(gpus.max(1))),
            goodput_requests_per_s: Some(w.goodput_requests_per_s),
            slo_attainment: s.slo.attainment,
            slo_met: s.slo.met,
            slo_missed: (!missed.is_empty()).then(|| missed.join(" ")),
            stopped_early_at_s: None,
            usd_per_hour: s.cluster.usd_per_hour,
            usd_per_1m_output_tokens: s.cluster.usd_per_1m_output_tokens,
            bottlenecks: Some(
                s.pools
                    .iter()
                    .map(|p| format!("{}:{}", p.pool, p.bottleneck))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            error: None,
        }
    }
}

/// The arrival rate of a scenario, when its process has one.
fn rate_of(sc: &Scenario) -> Option<f64> {
    scenario::resolved_file(sc).workload.rate_per_s()
}

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
    let stats = world
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
    let summary = Summary::new(&world.collector, sc, &stats.totals(), world.prefix_caches())
        .with_router(world.router_decisions())
        .with_kv_store(world.kv_store_summary())
        .with_sessions(world.session_summary());
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

/// `sweep.json`: what a sweep folder holds, so `pdsim merge` can check its shards belong
/// together and the report can be drawn again from the rows alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The scenario file as given.
    pub scenario: String,
    /// FNV-1a hash of the scenario text (shards of different scenarios do not merge).
    pub scenario_fnv: String,
    /// FNV-1a hash of every file the scenario reads, by its path as written (relative to the
    /// scenario): shards of one text beside different traces or configs do not merge.
    pub inputs: std::collections::BTreeMap<String, String>,
    /// The grid.
    pub grid: Grid,
    /// Rows in the whole grid.
    pub rows: usize,
    /// This folder's shard, or `None` for a whole sweep.
    pub shard: Option<Shard>,
    /// The SLO targets of the scenario (for the report's marks).
    pub slo: crate::config::Slo,
}

/// FNV-1a, 64 bits, hex: a stable fingerprint of bytes.
pub fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// FNV-1a of a file's bytes, read in blocks (a trace may be large).
pub fn fnv_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{h:016x}"))
}

/// The last segments of keys whose values are file paths (for the files an axis may name).
const PATH_LEAVES: [&str; 5] = ["path", "config", "step_times", "calibration", "lengths"];

impl Manifest {
    /// A manifest for `grid` of `base`: the text's and every input file's fingerprint. The
    /// inputs are the files the scenario `sc` (the base with the fixed `--set`s) reads, and
    /// every file an axis names (a varied trace path, model config or calibration).
    pub fn new(
        base: &Base,
        sc: &Scenario,
        grid: Grid,
        shard: Option<Shard>,
    ) -> Result<Self, PlanError> {
        let mut inputs = std::collections::BTreeMap::new();
        let dir = base.path.parent().unwrap_or(Path::new("."));
        let mut named: Vec<(String, PathBuf)> = sc.inputs.clone();
        for a in &grid.axes {
            let leaf = a.key.rsplit('.').next().unwrap_or_default();
            if !PATH_LEAVES.contains(&leaf) {
                continue;
            }
            for v in &a.values {
                let rel = v.trim().trim_matches(|c| c == '"' || c == '\'');
                if dir.join(rel).is_file() {
                    named.push((rel.to_string(), dir.join(rel)));
                }
            }
        }
        for (rel, path) in named {
            // A file that cannot be read now fails its points, which say so; it has no print.
            let print = fnv_file(&path).unwrap_or_else(|e| format!("unreadable: {e}"));
            inputs.insert(rel, print);
        }
        Ok(Self {
            scenario: base.path.display().to_string(),
            scenario_fnv: fnv(base.text.as_bytes()),
            inputs,
            rows: grid.rows(),
            grid,
            shard,
            slo: sc.slo,
        })
    }

    /// Reads `sweep.json` back, checking every field (a hand-edited index is exit 2 naming the
    /// field, never a panic): the grid within bounds, `rows` equal to it, the shard in range.
    pub fn read(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PlanError::Io(format!("{}: {e}", path.display())))?;
        let bad = |field: &str, why: String| {
            PlanError::file(
                path,
                format!(
                    "{}: {field}: {why}; this is not a sweep.json that pdsim wrote (was it edited?)",
                    path.display()
                ),
            )
        };
        let m: Manifest =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
                .map_err(|e| {
                    let field = e.path().to_string();
                    bad(&field, e.inner().to_string())
                })?;
        for (k, a) in m.grid.axes.iter().enumerate() {
            parse_axis(&format!("{}={}", a.key, a.values.join(",")))
                .ok()
                .filter(|b| b == a)
                .ok_or_else(|| {
                    bad(
                        &format!("grid.axes[{k}]"),
                        "a key and distinct, non-empty values are needed".into(),
                    )
                })?;
        }
        let grid = Grid::new(
            m.grid.axes.clone(),
            m.grid.seeds.clone(),
            m.grid.fixed.clone(),
        )
        .map_err(|e| bad("grid", e.to_string()))?;
        if m.rows != grid.rows() {
            return Err(bad(
                "rows",
                format!("{} but the grid has {} rows", m.rows, grid.rows()),
            ));
        }
        if let Some(s) = m.shard
            && (s.count == 0 || s.index >= s.count || s.count > MAX_GRID_ROWS)
        {
            return Err(bad(
                "shard",
                format!(
                    "{}/{}: expected 0 ≤ index < count ≤ {MAX_GRID_ROWS}",
                    s.index, s.count
                ),
            ));
        }
        if m.scenario_fnv.len() != 16 || !m.scenario_fnv.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("scenario_fnv", "16 hex digits expected".into()));
        }
        Ok(m)
    }
}

/// Checks rows read back against the grid: the row at position `k` must be grid row
/// `indices[k]` — its varied values that point's and its seed that row's seed. A row filed
/// under another point (rows swapped by hand) is exit 2 naming the file and line.
pub fn verify_rows(
    file: &Path,
    grid: &Grid,
    indices: &[usize],
    rows: &[(Vec<String>, SweepRow)],
) -> Result<(), PlanError> {
    for (k, (&i, (values, row))) in indices.iter().zip(rows).enumerate() {
        let want = grid.values_of(i / grid.seeds.len());
        let seed = grid.seeds[i % grid.seeds.len()];
        if values.iter().map(String::as_str).ne(want.iter().copied()) || row.seed != seed {
            return Err(PlanError::file(
                file,
                format!(
                    "{}: line {}: the row is ({}, seed {}), but grid row {i} is ({}, seed {seed}); the file's rows are out of order or from another sweep",
                    file.display(),
                    k + 2,
                    values.join(", "),
                    row.seed,
                    want.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// `sweep.csv`'s bytes: the varied keys, then [`SweepRow`]'s columns.
pub fn sweep_csv(grid: &Grid, rows: &[(usize, SweepRow)]) -> Result<Vec<u8>, PlanError> {
    let err = |e: csv::Error| PlanError::Io(format!("sweep.csv: {e}"));
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    let mut header: Vec<String> = grid.axes.iter().map(|a| a.key.clone()).collect();
    header.extend(row_columns());
    w.write_record(&header).map_err(err)?;
    for (i, row) in rows {
        let p = i / grid.seeds.len();
        let mut rec: Vec<String> = grid.values_of(p).iter().map(|s| s.to_string()).collect();
        rec.extend(row_cells(row).map_err(err)?);
        w.write_record(&rec).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| PlanError::Io(format!("sweep.csv: {e}")))
}

/// The column names of [`SweepRow`].
pub fn row_columns() -> Vec<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(SweepRow::infeasible(0, String::new()))
        .expect("a row serializes");
    let bytes = w.into_inner().expect("in memory");
    let text = String::from_utf8(bytes).expect("csv is UTF-8");
    text.lines()
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect()
}

fn row_cells(row: &SweepRow) -> Result<Vec<String>, csv::Error> {
    Ok(crate::report::first_csv_record(row, false)?
        .iter()
        .map(str::to_string)
        .collect())
}

/// Reads a `sweep.csv` back: each line's varied values and row.
pub fn read_sweep_csv(path: &Path, axes: usize) -> Result<Vec<(Vec<String>, SweepRow)>, PlanError> {
    let bytes =
        std::fs::read(path).map_err(|e| PlanError::Io(format!("{}: {e}", path.display())))?;
    parse_sweep_csv(path, &bytes, axes)
}

/// Refuses CSV bytes whose last line has no end: pdsim ends every line with a newline, and the
/// csv reader takes a field cut inside its quotes (`"infeasible, ""q`) as a whole field, so a
/// file cut there would otherwise read back as a row with a shorter value.
pub(crate) fn whole_lines(path: &Path, bytes: &[u8]) -> Result<(), PlanError> {
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        Ok(())
    } else {
        Err(PlanError::file(
            path,
            format!(
                "{}: cut short: its last line has no end (pdsim ends every line with a newline), so the file is unfinished or damaged",
                path.display()
            ),
        ))
    }
}

/// [`read_sweep_csv`] of bytes (`path` names them in errors).
pub fn parse_sweep_csv(
    path: &Path,
    bytes: &[u8],
    axes: usize,
) -> Result<Vec<(Vec<String>, SweepRow)>, PlanError> {
    whole_lines(path, bytes)?;
    let err = |e: csv::Error| PlanError::file(path, format!("{}: {e}", path.display()));
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let header: csv::StringRecord = r.headers().map_err(err)?.clone();
    let tail: csv::StringRecord = header.iter().skip(axes).collect();
    if tail.iter().map(str::to_string).collect::<Vec<_>>() != row_columns() {
        return Err(PlanError::file(
            path,
            format!(
                "{}: not a sweep.csv of this pdsim (its columns after the {axes} varied key(s) differ)",
                path.display()
            ),
        ));
    }
    let columns: csv::StringRecord = row_columns().into();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(err)?;
        let values: Vec<String> = rec.iter().take(axes).map(str::to_string).collect();
        let tail: csv::StringRecord = rec.iter().skip(axes).collect();
        rows.push((
            values,
            tail.deserialize::<SweepRow>(Some(&columns)).map_err(err)?,
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every planner mistake names its flag, file or key (what `pdsim` prints and the Python
    /// binding's exception carries), and all are exit 2 but I/O.
    #[test]
    fn planner_errors_name_the_flag_file_or_key() {
        let key = |e: PlanError| e.key();
        assert_eq!(
            key(parse_axis("nokey").unwrap_err()).as_deref(),
            Some("--vary")
        );
        assert_eq!(
            key(Shard::parse("3/2").unwrap_err()).as_deref(),
            Some("--shard")
        );
        let axis = parse_axis("a=1").unwrap();
        let twice = Grid::new(vec![axis.clone(), axis], vec![1], vec![]).unwrap_err();
        assert_eq!(key(twice).as_deref(), Some("--vary"));
        assert_eq!(
            key(Grid::new(vec![], vec![], vec![]).unwrap_err()).as_deref(),
            Some("--seeds")
        );
        let cut = whole_lines(Path::new("s/sweep.csv"), b"a,b\n1,2").unwrap_err();
        assert!(matches!(&cut, PlanError::File { path, .. } if path == Path::new("s/sweep.csv")));
        let none = all_infeasible(&[SweepRow::infeasible(0, "pools.x: unknown key".into())]);
        assert_eq!(
            none.unwrap_err().to_string(),
            "no grid point is a valid scenario; the first: pools.x: unknown key"
        );
    }

    /// `--rate` sets the typed workload's rate key; a schedule has none, and the error names
    /// `workload.arrival.process`.
    #[test]
    fn the_rate_key_comes_from_the_typed_workload() {
        let dir = std::env::temp_dir().join(format!("pdsim-ratekey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let quick = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml"),
        )
        .unwrap();
        let path = dir.join("q.toml");
        std::fs::write(&path, &quick).unwrap();
        let base = Base::load(&path).unwrap();
        assert_eq!(
            search::rate_key(&base).unwrap(),
            "workload.arrival.rate_per_s"
        );
        let mut sched = base.clone();
        sched.file.workload.arrival = Some(scenario::ArrivalSection::Schedule { steps: vec![] });
        let e = search::rate_key(&sched).unwrap_err();
        assert_eq!(e.key().as_deref(), Some("workload.arrival.process"));
        assert!(
            e.to_string().contains("\"schedule\" has no single rate"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn values_split_at_top_level_commas_only() {
        assert_eq!(split_values("1, 2,4"), vec!["1", "2", "4"]);
        assert_eq!(
            split_values(r#"{ process = "poisson", rate_per_s = 4 },"a,b",[1,2]"#),
            vec![
                r#"{ process = "poisson", rate_per_s = 4 }"#,
                r#""a,b""#,
                "[1,2]"
            ]
        );
    }

    #[test]
    fn grid_order_is_first_axis_slowest_then_seeds() {
        let g = Grid::new(
            vec![parse_axis("a=1,2").unwrap(), parse_axis("b=x,y,z").unwrap()],
            vec![7, 8],
            vec![],
        )
        .unwrap();
        assert_eq!(g.rows(), 12);
        assert_eq!(g.values_of(0), vec!["1", "x"]);
        assert_eq!(g.values_of(2), vec!["1", "z"]);
        assert_eq!(g.values_of(3), vec!["2", "x"]);
        assert_eq!(g.sets_of(3), vec!["a=1", "b=y", "run.seed=8"]);
    }

    #[test]
    fn shards_partition_the_rows() {
        let mut all: Vec<usize> = (0..3)
            .flat_map(|i| Shard { index: i, count: 3 }.rows(10).collect::<Vec<_>>())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(Shard::parse("3/3").is_err());
        assert!(Shard::parse("x").is_err());
        assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
    }

    #[test]
    fn bad_vary_arguments_say_what_is_expected() {
        for bad in ["a", "=1", "a=", "a=1,,2", "a=1,1"] {
            let e = parse_axis(bad).unwrap_err().to_string();
            assert!(e.contains("--vary"), "{bad}: {e}");
        }
    }

    #[test]
    fn rows_read_back_as_written() {
        let g = Grid::new(vec![parse_axis("a=1,2").unwrap()], vec![0], vec![]).unwrap();
        let mut r = SweepRow::infeasible(0, "no, \"really\"".into());
        r.ttft_p99_ms = Some(0.1 + 0.2);
        r.slo_met = Some(false);
        let rows = vec![(0, r.clone()), (1, SweepRow::infeasible(0, String::new()))];
        let bytes = sweep_csv(&g, &rows).unwrap();
        let dir = std::env::temp_dir().join(format!("pdsim-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("sweep.csv");
        std::fs::write(&p, &bytes).unwrap();
        let back: Vec<SweepRow> = read_sweep_csv(&p, 1)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(back[0], r);
        assert_eq!(
            sweep_csv(&g, &[(0, back[0].clone()), (1, back[1].clone())]).unwrap(),
            bytes
        );
    }

    #[test]
    fn a_csv_cut_inside_a_quoted_field_is_refused_not_read_short() {
        // The fuzzer's find (seed 2, case 4335): a shard cut inside `"no, ""really"""` read back
        // as a row whose error was `no, "r`, and the merge exited 0 with it.
        let g = Grid::new(vec![parse_axis("a=1,2").unwrap()], vec![0], vec![]).unwrap();
        let rows = vec![
            (0, SweepRow::infeasible(0, String::new())),
            (1, SweepRow::infeasible(0, "no, \"really\"".into())),
        ];
        let bytes = sweep_csv(&g, &rows).unwrap();
        let p = Path::new("shard/sweep.csv");
        assert_eq!(parse_sweep_csv(p, &bytes, 1).unwrap().len(), 2);
        let end = String::from_utf8_lossy(&bytes).rfind("\"\"really").unwrap();
        let cut = end + 4;
        assert!(bytes[..cut].ends_with(b"\"\"re"), "cut inside the quotes");
        let e = parse_sweep_csv(p, &bytes[..cut], 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard/sweep.csv") && e.contains("cut short"),
            "{e}"
        );
        // The same for plan.csv.
        let e = search::parse_plan_csv(p, b"a,b\n1,\"x", 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short"), "{e}");
    }
}
