//! `pdsim plan --max-rate`: each point's highest rate on the ladder that meets `[slo]`
//! ([`max_rate`], [`max_rates`]), its row of `plan.csv` ([`MaxRateRow`], written and read back
//! by [`plan_csv`] and [`parse_plan_csv`]) and the `plan.json` of them all ([`MaxRatePlan`]).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::ladder::{Ladder, search_ladder};
use super::rate::rate_value;
use crate::plan::error::PlanError;
use crate::plan::grid::Grid;
use crate::plan::rows::{SweepRow, whole_lines};
use crate::plan::run::{Base, summarize_until};

/// One row of `plan.csv` (`pdsim plan --max-rate`): a point's highest rate meeting `[slo]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxRateRow {
    /// GPUs the instances use.
    pub gpus: Option<u32>,
    /// Nodes the pools span.
    pub nodes: Option<u32>,
    /// GPUs of those nodes no instance uses.
    pub idle_gpus: Option<u32>,
    /// GPUs paid for (`hardware.billing`).
    pub billed_gpus: Option<u32>,
    /// The highest rate of the ladder found to meet `[slo]` on every seed, requests/s (blank
    /// when even the lowest rung fails, or the point is infeasible).
    pub max_rate_per_s: Option<f64>,
    /// `max_rate_per_s` ÷ billed GPUs.
    pub max_rate_per_s_per_gpu: Option<f64>,
    /// Output tokens/s at that rate (mean over seeds).
    pub output_tokens_per_s: Option<f64>,
    /// Dollars per million output tokens at that rate (mean over seeds).
    pub usd_per_1m_output_tokens: Option<f64>,
    /// The next rung up, found to fail, requests/s (the limit lies between the two).
    pub fails_at_rate_per_s: Option<f64>,
    /// No failing rate was found up to the ladder's top
    /// ([`MAX_PLAN_RATE`](super::MAX_PLAN_RATE)) or the search's step budget: the point
    /// sustains *at least* `max_rate_per_s`, and the limit was not bracketed.
    pub max_rate_is_lower_bound: bool,
    /// Simulations the search ran (every seed of every rate tried, a rate's seeds up to its
    /// first miss).
    pub runs: u32,
    /// Of those, runs stopped as soon as `[slo]` was lost (`metrics::slo::SloWatch`).
    pub runs_stopped_early: u32,
    /// Simulations a scan of the ladder takes to the same answer: every rung from the starting
    /// rate to the bracket, one at a time, on every seed.
    pub ladder_runs: u32,
    /// The rates tried in order, `rate+` (met on every seed) or `rate-` (missed), space-
    /// separated.
    pub rates_tried: String,
    /// Why the point could not run, blank otherwise.
    pub error: Option<String>,
}

/// Settings of `--max-rate`.
#[derive(Clone, Copy, Debug)]
pub struct RateSearch {
    /// The starting rate (rung 0 of the ladder), requests/s.
    pub start: f64,
    /// Adjacent rungs differ by the factor `1 + rel_tol`, so the bracket found has
    /// `(fail − pass) / pass = rel_tol`.
    pub rel_tol: f64,
    /// At most this many rates tried per point (a budget; the ladder's ends come first for
    /// any tolerance `--tolerance` accepts).
    pub max_steps: u32,
    /// Stop each run once `[slo]` is lost ([`summarize_until`]).
    pub early_stop: bool,
}

/// The highest rate of the ladder at which point `p` meets `[slo]` on every seed
/// ([`search_ladder`]); a rate's seeds run in order and stop at the first that misses.
pub fn max_rate(base: &Base, grid: &Grid, p: usize, key: &str, s: RateSearch) -> MaxRateRow {
    let ladder = Ladder::new(s.start, s.rel_tol);
    let n = grid.seeds.len();
    let mut runs = 0u32;
    let mut stopped = 0u32;
    let mut at: std::collections::BTreeMap<i32, Vec<SweepRow>> = Default::default();
    let mut eval = |k: i32| -> Result<bool, String> {
        let rate = ladder.rate(k);
        let mut rows = Vec::new();
        let mut ok = true;
        for seed in 0..n {
            // Last, so it wins over a `--set` of the rate (which gave the start).
            let mut sets = grid.sets_of(p * n + seed);
            sets.push(format!("{key}={}", rate_value(rate)));
            let sc = base.with(&sets).map_err(|e| e.to_string())?;
            let (sum, stop) = summarize_until(&sc, s.early_stop).map_err(|e| e.to_string())?;
            runs += 1;
            stopped += u32::from(stop.is_some());
            let row = SweepRow::of(&sc, &sum);
            ok = crate::metrics::slo::met_on_every_seed([row.slo_met]);
            rows.push(row);
            if !ok {
                // One failing seed decides: the rest need not run.
                break;
            }
        }
        at.insert(k, rows);
        Ok(ok)
    };
    let found = search_ladder(&ladder, s.max_steps, &mut eval);
    let first = at.values().next().and_then(|r| r.first()).cloned();
    let mut row = MaxRateRow {
        gpus: first.as_ref().and_then(|r| r.gpus),
        nodes: first.as_ref().and_then(|r| r.nodes),
        idle_gpus: first.as_ref().and_then(|r| r.idle_gpus),
        billed_gpus: first.as_ref().and_then(|r| r.billed_gpus),
        max_rate_per_s: None,
        max_rate_per_s_per_gpu: None,
        output_tokens_per_s: None,
        usd_per_1m_output_tokens: None,
        fails_at_rate_per_s: None,
        max_rate_is_lower_bound: false,
        runs,
        runs_stopped_early: stopped,
        ladder_runs: 0,
        rates_tried: String::new(),
        error: None,
    };
    let found = match found {
        Ok(f) => f,
        Err(e) => {
            row.error = Some(e);
            return row;
        }
    };
    let mean = |f: &dyn Fn(&SweepRow) -> Option<f64>, rows: &[SweepRow]| -> Option<f64> {
        let v: Vec<f64> = rows.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let best = found.pass.map(|k| ladder.rate(k));
    let pass_rows = found.pass.and_then(|k| at.get(&k)).map(Vec::as_slice);
    row.max_rate_per_s = best;
    row.max_rate_per_s_per_gpu = best
        .zip(row.billed_gpus)
        .map(|(r, g)| r / f64::from(g.max(1)));
    row.output_tokens_per_s = pass_rows.and_then(|r| mean(&|r| r.output_tokens_per_s, r));
    row.usd_per_1m_output_tokens = pass_rows.and_then(|r| mean(&|r| r.usd_per_1m_output_tokens, r));
    row.fails_at_rate_per_s = found.fail.map(|k| ladder.rate(k));
    row.max_rate_is_lower_bound = best.is_some() && (found.fail.is_none() || found.out_of_steps);
    // A scan from rung 0 toward the answer, one rung at a time, to where the verdict flips.
    let end = match (found.pass, found.fail) {
        (Some(p), _) if p < 0 => p,
        (_, Some(f)) => f,
        (Some(p), None) => p,
        (None, None) => 0,
    };
    row.ladder_runs = (end.unsigned_abs() + 1) * n as u32;
    row.rates_tried = found
        .tried
        .iter()
        .map(|&(k, ok)| {
            format!(
                "{}{}",
                rate_value(ladder.rate(k)),
                if ok { '+' } else { '-' }
            )
        })
        .collect::<Vec<_>>()
        .join(" ");
    row
}

/// [`max_rate`] for every point of the grid, on `jobs` threads, in grid order. Points in
/// `done` (finished by an interrupted run) are not searched again; every point searched is
/// handed to `on_point` as soon as it is done.
pub fn max_rates(
    base: &Base,
    grid: &Grid,
    key: &str,
    s: RateSearch,
    jobs: usize,
    done: &std::collections::BTreeMap<usize, MaxRateRow>,
    on_point: &(dyn Fn(usize, &MaxRateRow) -> Result<(), PlanError> + Sync),
) -> Result<Vec<MaxRateRow>, PlanError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| PlanError::flag("--jobs", format!("--jobs {jobs}: {e}")))?;
    let points: Vec<usize> = (0..grid.points()).collect();
    let rows: Vec<Result<MaxRateRow, PlanError>> = pool.install(|| {
        points
            .par_iter()
            .map(|&p| {
                if let Some(r) = done.get(&p) {
                    return Ok(r.clone());
                }
                let r = max_rate(base, grid, p, key, s);
                on_point(p, &r)?;
                Ok(r)
            })
            .collect()
    });
    let rows = rows.into_iter().collect::<Result<Vec<_>, _>>()?;
    if rows.iter().all(|r| r.error.is_some()) {
        return Err(PlanError::NoValidPoint {
            first: rows[0].error.clone().unwrap_or_default(),
        });
    }
    Ok(rows)
}

/// `plan.json` of `pdsim plan --max-rate`.
#[derive(Clone, Debug, Serialize)]
pub struct MaxRatePlan {
    /// The scenario file.
    pub scenario: String,
    /// The seeds every rate ran on.
    pub seeds: Vec<u64>,
    /// The `[slo]` targets.
    pub slo: crate::config::Slo,
    /// How each point's rate was searched: `gallop_bisect` over the ladder.
    pub search: String,
    /// The ladder: rung 0 (the scenario's rate), the factor between rungs, the lowest and
    /// highest rates it holds.
    pub start_rate_per_s: f64,
    /// `1 + --tolerance`.
    pub rung_ratio: f64,
    /// The ladder's lowest rate, requests/s.
    pub lowest_rate_per_s: f64,
    /// The ladder's highest rate, requests/s.
    pub highest_rate_per_s: f64,
    /// Whether runs stopped once `[slo]` was lost (`--no-early-stop` turns it off).
    pub early_stop: bool,
    /// Simulations run, all points.
    pub runs: u64,
    /// Of those, stopped once `[slo]` was lost.
    pub runs_stopped_early: u64,
    /// Simulations a rung-by-rung scan takes to the same answers (see `ladder_runs`).
    pub ladder_runs: u64,
    /// Grid points.
    pub grid_points: usize,
    /// The point with the highest sustained rate per billed GPU (`null` when none sustains
    /// the lowest rung).
    pub most_per_gpu: Option<usize>,
    /// The point with the highest sustained rate (fewest billed GPUs, then the earliest, on
    /// ties): what the GPUs of the grid serve at most (`null` when none sustains the lowest
    /// rung).
    pub most_rate: Option<usize>,
    /// Every point: its values by key and its row of `plan.csv`.
    pub points: Vec<MaxRatePoint>,
    /// What the step times rest on ([`super::Grounding`]; set by the caller, who has the
    /// scenario).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grounding: Option<super::Grounding>,
}

/// One point of [`MaxRatePlan`].
#[derive(Clone, Debug, Serialize)]
pub struct MaxRatePoint {
    /// Point index in grid order.
    pub point: usize,
    /// The chosen value of every varied key, in `--vary` order.
    pub values: Vec<(String, String)>,
    /// Its figures (`plan.csv`'s row).
    #[serde(flatten)]
    pub row: MaxRateRow,
}

impl MaxRatePlan {
    /// The plan of `rows` (in grid order) over `grid`.
    pub fn new(
        scenario: String,
        grid: &Grid,
        slo: crate::config::Slo,
        s: RateSearch,
        rows: &[MaxRateRow],
    ) -> Self {
        let ladder = Ladder::new(s.start, s.rel_tol);
        let sum = |f: &dyn Fn(&MaxRateRow) -> u32| rows.iter().map(|r| u64::from(f(r))).sum();
        let most_per_gpu = rows
            .iter()
            .enumerate()
            .filter_map(|(p, r)| Some((r.max_rate_per_s_per_gpu?, p)))
            // The highest; the earliest point on ties (`max_by` keeps the last).
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|x| x.1);
        let most_rate = rows
            .iter()
            .enumerate()
            .filter_map(|(p, r)| Some((r.max_rate_per_s?, r.billed_gpus.unwrap_or(u32::MAX), p)))
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)))
            .map(|x| x.2);
        Self {
            scenario,
            seeds: grid.seeds.clone(),
            slo,
            search: "gallop_bisect".into(),
            start_rate_per_s: ladder.start,
            rung_ratio: ladder.ratio,
            lowest_rate_per_s: ladder.rate(ladder.bottom),
            highest_rate_per_s: ladder.rate(ladder.top),
            early_stop: s.early_stop,
            runs: sum(&|r| r.runs),
            runs_stopped_early: sum(&|r| r.runs_stopped_early),
            ladder_runs: sum(&|r| r.ladder_runs),
            grid_points: grid.points(),
            most_per_gpu,
            most_rate,
            points: rows
                .iter()
                .enumerate()
                .map(|(p, r)| MaxRatePoint {
                    point: p,
                    values: grid.assignments(p),
                    row: r.clone(),
                })
                .collect(),
            grounding: None,
        }
    }
}

/// The columns of `plan.csv` after the varied keys.
const PLAN_COLUMNS: [&str; 15] = [
    "gpus",
    "nodes",
    "idle_gpus",
    "billed_gpus",
    "max_rate_per_s",
    "max_rate_per_s_per_gpu",
    "output_tokens_per_s",
    "usd_per_1m_output_tokens",
    "fails_at_rate_per_s",
    "max_rate_is_lower_bound",
    "runs",
    "runs_stopped_early",
    "ladder_runs",
    "rates_tried",
    "error",
];

/// Reads `plan.csv` bytes back (for a resumed search's finished points): each line's varied
/// values and row.
pub fn parse_plan_csv(
    name: &std::path::Path,
    bytes: &[u8],
    axes: usize,
) -> Result<Vec<(Vec<String>, MaxRateRow)>, PlanError> {
    whole_lines(name, bytes)?;
    let err = |e: csv::Error| PlanError::file(name, format!("{}: {e}", name.display()));
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let header = r.headers().map_err(err)?.clone();
    if header.iter().skip(axes).ne(PLAN_COLUMNS) {
        return Err(PlanError::file(
            name,
            format!(
                "{}: not a plan.csv of this pdsim (its columns differ)",
                name.display()
            ),
        ));
    }
    let columns: csv::StringRecord = PLAN_COLUMNS.iter().copied().collect();
    let mut out = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(err)?;
        let values = rec.iter().take(axes).map(str::to_string).collect();
        let tail: csv::StringRecord = rec.iter().skip(axes).collect();
        out.push((values, tail.deserialize(Some(&columns)).map_err(err)?));
    }
    Ok(out)
}

/// `plan.csv`'s bytes: the varied keys, then [`MaxRateRow`]'s columns.
pub fn plan_csv(grid: &Grid, rows: &[(usize, MaxRateRow)]) -> Result<Vec<u8>, PlanError> {
    let err = |e: csv::Error| PlanError::Io(format!("plan.csv: {e}"));
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    let mut header = grid.columns();
    header.extend(PLAN_COLUMNS.map(String::from));
    w.write_record(&header).map_err(err)?;
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let int = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    for (p, r) in rows {
        let mut rec: Vec<String> = grid.assignments(*p).into_iter().map(|(_, v)| v).collect();
        rec.extend([
            int(r.gpus),
            int(r.nodes),
            int(r.idle_gpus),
            int(r.billed_gpus),
            cell(r.max_rate_per_s),
            cell(r.max_rate_per_s_per_gpu),
            cell(r.output_tokens_per_s),
            cell(r.usd_per_1m_output_tokens),
            cell(r.fails_at_rate_per_s),
            r.max_rate_is_lower_bound.to_string(),
            r.runs.to_string(),
            r.runs_stopped_early.to_string(),
            r.ladder_runs.to_string(),
            r.rates_tried.clone(),
            r.error.clone().unwrap_or_default(),
        ]);
        w.write_record(&rec).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| PlanError::Io(format!("plan.csv: {e}")))
}
