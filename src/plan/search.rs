//! SLO searches over a sweep's grid: the cheapest point that meets `[slo]` at a rate, and each
//! point's highest sustainable rate (goodput search, DistServe §4's placement question).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Base, Grid, PlanError, SweepRow, summarize};

/// The `--set` key that gives a scenario's arrival rate: the synthetic arrival's or the trace's
/// `rate_per_s`. A rate schedule has no single rate to set.
pub fn rate_key(base: &Base) -> Result<&'static str, PlanError> {
    let table: toml::Table = toml::from_str(&base.text)
        .map_err(|e| PlanError::Usage(format!("{}: {e}", base.path.display())))?;
    let w = table.get("workload");
    if w.and_then(|w| w.get("trace")).is_some() {
        return Ok("workload.trace.rate_per_s");
    }
    match w
        .and_then(|w| w.get("arrival"))
        .and_then(|a| a.get("process"))
        .and_then(toml::Value::as_str)
    {
        Some("poisson" | "constant" | "gamma" | "on_off") => Ok("workload.arrival.rate_per_s"),
        Some(p) => Err(PlanError::Usage(format!(
            "{}: workload.arrival.process = {p:?} has no single rate for --rate or --max-rate to set; use poisson, constant, gamma, on_off or a trace",
            base.path.display()
        ))),
        None => Err(PlanError::Usage(format!(
            "{}: the workload has no arrival rate to set (workload.arrival or workload.trace)",
            base.path.display()
        ))),
    }
}

/// A grid point's figures across its seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointVerdict {
    /// Point index in grid order.
    pub point: usize,
    /// The chosen value of every varied key, in `--vary` order.
    pub values: Vec<(String, String)>,
    /// GPUs.
    pub gpus: Option<u32>,
    /// Nodes.
    pub nodes: Option<u32>,
    /// Whether `[slo]` held on every seed.
    pub meets_slo: bool,
    /// The point's rows, one per seed.
    pub seeds: Vec<SweepRow>,
}

/// Groups rows `(row index, row)` (in row order, the seeds of a point together) by point. A
/// point may hold fewer rows than seeds: a search stops a point at its first failing seed, and
/// with one seed missing `[slo]` the point fails whatever the others would give.
pub fn verdicts(grid: &Grid, rows: &[(usize, SweepRow)]) -> Vec<PointVerdict> {
    let n = grid.seeds.len();
    rows.chunk_by(|a, b| a.0 / n == b.0 / n)
        .map(|seeds| {
            let p = seeds[0].0 / n;
            PointVerdict {
                point: p,
                values: grid
                    .axes
                    .iter()
                    .zip(grid.values_of(p))
                    .map(|(a, v)| (a.key.clone(), v.to_string()))
                    .collect(),
                gpus: seeds[0].1.gpus,
                nodes: seeds[0].1.nodes,
                meets_slo: seeds.len() == n
                    && crate::metrics::slo::met_on_every_seed(seeds.iter().map(|r| r.1.slo_met)),
                seeds: seeds.iter().map(|r| r.1.clone()).collect(),
            }
        })
        .collect()
}

/// The cheapest point that meets `[slo]` on every seed: fewest GPUs, then fewest nodes, then
/// the earliest in grid order (so the answer never depends on thread timing).
pub fn cheapest(verdicts: &[PointVerdict]) -> Option<&PointVerdict> {
    verdicts
        .iter()
        .filter(|v| v.meets_slo && v.gpus.is_some())
        .min_by_key(|v| (v.gpus, v.nodes, v.point))
}

/// A point's cost before it runs: (GPUs, nodes) of its placement, the key [`cheapest`] orders
/// by; the scenario's error when its values make an invalid one.
pub fn point_cost(base: &Base, grid: &Grid, p: usize) -> Result<(u32, u32), String> {
    let sc = base
        .with(&grid.sets_of(p * grid.seeds.len()))
        .map_err(|e| e.to_string())?;
    let place = crate::config::capacity::place(&sc);
    let gpus = place.gpus.iter().map(|g| g.len() as u32).sum();
    Ok((gpus, place.nodes))
}

/// The cheapest point meeting `[slo]` at a rate without running the whole grid, and the same
/// answer as [`cheapest`] of the whole grid's [`verdicts`] (see `README.md` beside this file).
///
/// Points run cheapest first — (GPUs, nodes, grid order), [`cheapest`]'s own key, known
/// before a run from the placement — in batches of `jobs` points. A point runs its seeds in
/// order and stops at the first that misses `[slo]` (the point fails whatever the others
/// give). The search stops after the batch holding the first point that meets `[slo]` on every
/// seed: every point before it in that order has run and failed, so no cheaper point meets
/// it. No monotonicity is assumed, so the answer holds for any axis (TP, page size, chunk size,
/// router policy alike).
///
/// Returns the rows `(row index, row)` of the points up to and including the answer in that
/// order, sorted by row index, and the runs made past the answer in its batch (kept in the
/// journal, not in the result). The kept rows do not depend on `jobs`: the batch only decides
/// how far past the answer the last batch reaches. A point whose values make an invalid
/// scenario never runs and is not kept; when every point is invalid, exit 2 with the first
/// error. `run_row` runs (or reads back from an interrupted search) one row.
pub fn cheapest_first(
    base: &Base,
    grid: &Grid,
    jobs: usize,
    run_row: &(dyn Fn(usize) -> Result<SweepRow, PlanError> + Sync),
) -> Result<(Vec<(usize, SweepRow)>, usize), PlanError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.max(1))
        .build()
        .map_err(|e| PlanError::Usage(format!("--jobs {jobs}: {e}")))?;
    let n = grid.seeds.len();
    let costs: Vec<Result<(u32, u32), String>> = pool.install(|| {
        (0..grid.points())
            .into_par_iter()
            .map(|p| point_cost(base, grid, p))
            .collect()
    });
    let mut order: Vec<(u32, u32, usize)> = costs
        .iter()
        .enumerate()
        .filter_map(|(p, c)| c.as_ref().ok().map(|&(g, nodes)| (g, nodes, p)))
        .collect();
    if order.is_empty() {
        let first = costs.into_iter().find_map(Result::err).unwrap_or_default();
        return Err(PlanError::Usage(format!(
            "no grid point is a valid scenario; the first: {first}"
        )));
    }
    order.sort_unstable();
    // One point's rows: its seeds in order, up to the first that misses [slo].
    let point =
        |&(gpus, nodes, p): &(u32, u32, usize)| -> Result<Vec<(usize, SweepRow)>, PlanError> {
            let mut rows = Vec::new();
            for k in 0..n {
                let i = p * n + k;
                let row = run_row(i)?;
                assert!(
                    row.error.is_some() || (row.gpus, row.nodes) == (Some(gpus), Some(nodes)),
                    "point {p} seed {}: the run used {:?} GPUs on {:?} nodes but its placement gave {gpus} on {nodes}; the search's order is wrong",
                    grid.seeds[k],
                    row.gpus,
                    row.nodes
                );
                let met = row.slo_met == Some(true);
                rows.push((i, row));
                if !met {
                    break;
                }
            }
            Ok(rows)
        };
    let mut kept = Vec::new();
    let mut past = 0;
    for batch in order.chunks(jobs.max(1)) {
        let ran: Vec<Result<Vec<(usize, SweepRow)>, PlanError>> =
            pool.install(|| batch.par_iter().map(point).collect());
        // Decided from the whole batch, in the search's order: never from which thread ended first.
        let mut found = false;
        for rows in ran {
            let rows = rows?;
            if found {
                past += rows.len();
                continue;
            }
            found = rows.len() == n && rows.iter().all(|r| r.1.slo_met == Some(true));
            kept.extend(rows);
        }
        if found {
            break;
        }
    }
    kept.sort_by_key(|r| r.0);
    Ok((kept, past))
}

/// `plan.json` of `pdsim plan --rate`.
#[derive(Clone, Debug, Serialize)]
pub struct PlanAnswer {
    /// The scenario file.
    pub scenario: String,
    /// The arrival rate the plan was made for, requests/s.
    pub rate_per_s: f64,
    /// The seeds every point ran on.
    pub seeds: Vec<u64>,
    /// The `[slo]` targets.
    pub slo: crate::config::Slo,
    /// How the grid was searched: `cheapest_first` (the default) or `full_grid`.
    pub search: String,
    /// Grid points examined (that ran; a search stops at the answer).
    pub points: usize,
    /// Grid points in all.
    pub grid_points: usize,
    /// Simulations run (points × seeds, a failing point's seeds up to its first miss).
    pub runs: usize,
    /// Simulations the full grid takes (points × seeds).
    pub grid_runs: usize,
    /// Points that met `[slo]` on every seed.
    pub points_meeting_slo: usize,
    /// The answer, or `null` when no point meets `[slo]`.
    pub best: Option<PointVerdict>,
    /// `best.toml`, when there is an answer (relative to `plan.json`).
    pub best_toml: Option<String>,
    /// `launch.txt`, the sglang and router launch lines of that answer (relative to
    /// `plan.json`; `plan::launch`).
    pub launch: Option<String>,
}

/// The highest arrival rate a plan asks about or searches to, requests/s: one arrival per
/// nanosecond, the simulated clock's resolution (a faster rate is the same run).
pub const MAX_PLAN_RATE: f64 = 1e9;

/// A rate as a `--set` value that parses back to the same number as a TOML float (`14.0`,
/// `1e19`): Rust's `{:?}` of an `f64` is the shortest round-trip form and always has a `.` or
/// an exponent, where `{}` would write `10000000000000000000`, an integer TOML cannot hold.
pub fn rate_value(r: f64) -> String {
    format!("{r:?}")
}

/// One row of `plan.csv` (`pdsim plan --max-rate`): a point's highest rate meeting `[slo]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxRateRow {
    /// GPUs.
    pub gpus: Option<u32>,
    /// Nodes.
    pub nodes: Option<u32>,
    /// The highest rate found to meet `[slo]` on every seed, requests/s (blank when even the
    /// lowest rate tried fails, or the point is infeasible).
    pub max_rate_per_s: Option<f64>,
    /// `max_rate_per_s` ÷ GPUs.
    pub max_rate_per_s_per_gpu: Option<f64>,
    /// Output tokens/s at that rate (mean over seeds).
    pub output_tokens_per_s: Option<f64>,
    /// Dollars per million output tokens at that rate (mean over seeds).
    pub usd_per_1m_output_tokens: Option<f64>,
    /// The lowest rate found to fail, requests/s (the answer lies between the two).
    pub fails_at_rate_per_s: Option<f64>,
    /// No failing rate was found before the search's limit (its steps, or
    /// [`MAX_PLAN_RATE`]): the point sustains *at least* `max_rate_per_s`, and the true limit
    /// was not bracketed.
    pub max_rate_is_lower_bound: bool,
    /// Simulations the search ran (every seed of every rate tried).
    pub runs: u32,
    /// Why the point could not run, blank otherwise.
    pub error: Option<String>,
}

/// Bisection settings of `--max-rate`.
#[derive(Clone, Copy, Debug)]
pub struct RateSearch {
    /// The first rate tried, requests/s.
    pub start: f64,
    /// Stop when `(fail − pass) / pass` is at most this.
    pub rel_tol: f64,
    /// At most this many rates tried per point.
    pub max_steps: u32,
}

/// The highest rate at which point `p` meets `[slo]` on every seed: from `start`, double (or
/// halve) until the verdict flips, then bisect the bracket to `rel_tol`. Goodput search as in
/// DistServe: a rate "is sustained" when the SLO holds on every seed.
pub fn max_rate(base: &Base, grid: &Grid, p: usize, key: &str, s: RateSearch) -> MaxRateRow {
    let mut runs = 0u32;
    let mut last_ok: Option<(f64, Vec<SweepRow>)> = None;
    let mut first_fail: Option<f64> = None;
    let mut gpus = None;
    let mut nodes = None;
    let eval = |rate: f64, runs: &mut u32| -> Result<(bool, Vec<SweepRow>), String> {
        let mut rows = Vec::new();
        for k in 0..grid.seeds.len() {
            let mut sets = grid.sets_of(p * grid.seeds.len() + k);
            sets.insert(0, format!("{key}={}", rate_value(rate)));
            let sc = base.with(&sets).map_err(|e| e.to_string())?;
            let sum = summarize(&sc).map_err(|e| e.to_string())?;
            *runs += 1;
            let row = SweepRow::of(&sc, &sum);
            let ok = crate::metrics::slo::met_on_every_seed([row.slo_met]);
            rows.push(row);
            if !ok {
                // One failing seed decides: the rest need not run.
                return Ok((false, rows));
            }
        }
        Ok((true, rows))
    };
    let mut rate = s.start;
    let mut steps = 0;
    let error = loop {
        if steps >= s.max_steps {
            break None;
        }
        steps += 1;
        let (ok, rows) = match eval(rate, &mut runs) {
            Ok(v) => v,
            Err(e) => break Some(e),
        };
        gpus = rows[0].gpus;
        nodes = rows[0].nodes;
        if ok {
            last_ok = Some((rate, rows));
        } else {
            first_fail = Some(first_fail.map_or(rate, |f: f64| f.min(rate)));
        }
        let pass = last_ok.as_ref().map(|l| l.0);
        rate = match (pass, first_fail) {
            (Some(p), None) if p >= MAX_PLAN_RATE => break None,
            (Some(p), None) => (p * 2.0).min(MAX_PLAN_RATE),
            (None, Some(f)) => {
                if f < s.start * 1e-3 {
                    break None;
                }
                f / 2.0
            }
            (Some(p), Some(f)) => {
                if (f - p) / p <= s.rel_tol {
                    break None;
                }
                (p + f) / 2.0
            }
            (None, None) => unreachable!("a rate was just tried"),
        };
    };
    let mean = |f: &dyn Fn(&SweepRow) -> Option<f64>, rows: &[SweepRow]| -> Option<f64> {
        let v: Vec<f64> = rows.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let best = last_ok.as_ref().map(|l| l.0);
    MaxRateRow {
        gpus,
        nodes,
        max_rate_per_s: best,
        max_rate_per_s_per_gpu: best.zip(gpus).map(|(r, g)| r / f64::from(g.max(1))),
        output_tokens_per_s: last_ok
            .as_ref()
            .and_then(|l| mean(&|r| r.output_tokens_per_s, &l.1)),
        usd_per_1m_output_tokens: last_ok
            .as_ref()
            .and_then(|l| mean(&|r| r.usd_per_1m_output_tokens, &l.1)),
        fails_at_rate_per_s: first_fail,
        max_rate_is_lower_bound: best.is_some() && first_fail.is_none(),
        runs,
        error,
    }
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
        .map_err(|e| PlanError::Usage(format!("--jobs {jobs}: {e}")))?;
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
        return Err(PlanError::Usage(format!(
            "no grid point is a valid scenario; the first: {}",
            rows[0].error.as_deref().unwrap_or_default()
        )));
    }
    Ok(rows)
}

/// The columns of `plan.csv` after the varied keys.
const PLAN_COLUMNS: [&str; 10] = [
    "gpus",
    "nodes",
    "max_rate_per_s",
    "max_rate_per_s_per_gpu",
    "output_tokens_per_s",
    "usd_per_1m_output_tokens",
    "fails_at_rate_per_s",
    "max_rate_is_lower_bound",
    "runs",
    "error",
];

/// Reads `plan.csv` bytes back (for a resumed search's finished points): each line's varied
/// values and row.
pub fn parse_plan_csv(
    name: &std::path::Path,
    bytes: &[u8],
    axes: usize,
) -> Result<Vec<(Vec<String>, MaxRateRow)>, PlanError> {
    super::whole_lines(name, bytes)?;
    let err = |e: csv::Error| PlanError::Usage(format!("{}: {e}", name.display()));
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let header = r.headers().map_err(err)?.clone();
    if header.iter().skip(axes).ne(PLAN_COLUMNS) {
        return Err(PlanError::Usage(format!(
            "{}: not a plan.csv of this pdsim (its columns differ)",
            name.display()
        )));
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
    let mut header: Vec<String> = grid.axes.iter().map(|a| a.key.clone()).collect();
    header.extend(PLAN_COLUMNS.map(String::from));
    w.write_record(&header).map_err(err)?;
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for (p, r) in rows {
        let mut rec: Vec<String> = grid.values_of(*p).iter().map(|s| s.to_string()).collect();
        rec.extend([
            r.gpus.map_or(String::new(), |v| v.to_string()),
            r.nodes.map_or(String::new(), |v| v.to_string()),
            cell(r.max_rate_per_s),
            cell(r.max_rate_per_s_per_gpu),
            cell(r.output_tokens_per_s),
            cell(r.usd_per_1m_output_tokens),
            cell(r.fails_at_rate_per_s),
            r.max_rate_is_lower_bound.to_string(),
            r.runs.to_string(),
            r.error.clone().unwrap_or_default(),
        ]);
        w.write_record(&rec).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| PlanError::Io(format!("plan.csv: {e}")))
}

/// `best.toml`: the scenario with the chosen values and the rate set, every relative path
/// rewritten to be relative to `out_dir` (where the file is written), so it runs as is from
/// there. The chosen values are listed in a comment at the top and written in the tables.
pub fn best_toml(
    base: &Base,
    sets: &[String],
    out_dir: &std::path::Path,
    header: &str,
) -> Result<String, PlanError> {
    let mut table: toml::Table = toml::from_str(&base.text)
        .map_err(|e| PlanError::Usage(format!("{}: {e}", base.path.display())))?;
    for s in sets {
        crate::scenario::set::apply_set(&mut table, s).map_err(PlanError::Usage)?;
    }
    let from = base.path.parent().unwrap_or(std::path::Path::new("."));
    rewrite_paths(&mut table, from, out_dir);
    let body = toml::to_string(&table).map_err(|e| PlanError::Io(format!("best.toml: {e}")))?;
    Ok(format!("{header}{body}"))
}

/// The keys whose values are paths relative to the scenario file.
fn is_path_key(path: &[&str]) -> bool {
    matches!(
        path,
        ["model", "config"]
            | ["pools", _, "model", "config"]
            | ["pools", _, "step_times"]
            | ["workload", "trace", "path"]
            | ["workload", "input_tokens", "path"]
            | ["workload", "output_tokens", "path"]
            | ["workload", "lengths", "path"]
            | ["hardware", "calibration_file"]
    )
}

fn rewrite_paths(table: &mut toml::Table, from: &std::path::Path, to: &std::path::Path) {
    fn walk(
        v: &mut toml::Value,
        path: &mut Vec<String>,
        from: &std::path::Path,
        to: &std::path::Path,
    ) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    path.push(k.clone());
                    walk(v, path, from, to);
                    path.pop();
                }
            }
            toml::Value::Array(a) => {
                for v in a.iter_mut() {
                    path.push("_".into());
                    walk(v, path, from, to);
                    path.pop();
                }
            }
            toml::Value::String(s) => {
                let keys: Vec<&str> = path.iter().map(String::as_str).collect();
                // `hardware.calibration` is a preset name or a file: a path only if it names
                // one beside the scenario (a name is never rewritten).
                let calibration_file = keys == ["hardware", "calibration"]
                    && std::path::Path::new(s.as_str()).is_relative()
                    && from.join(s.as_str()).is_file();
                if (is_path_key(&keys) || calibration_file)
                    && std::path::Path::new(s.as_str()).is_relative()
                {
                    *s = relative_to(&from.join(s.as_str()), to)
                        .display()
                        .to_string();
                }
            }
            _ => {}
        }
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    walk(&mut root, &mut Vec::new(), from, to);
    if let toml::Value::Table(t) = root {
        *table = t;
    }
}

/// `target` as a path relative to the folder `dir` (both made absolute first).
pub fn relative_to(target: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let abs = |p: &std::path::Path| {
        std::fs::canonicalize(p).unwrap_or_else(|_| {
            std::env::current_dir()
                .map(|c| c.join(p))
                .unwrap_or_else(|_| p.to_path_buf())
        })
    };
    let (t, d) = (abs(target), abs(dir));
    let tc: Vec<_> = t.components().collect();
    let dc: Vec<_> = d.components().collect();
    let common = tc.iter().zip(&dc).take_while(|(a, b)| a == b).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..dc.len() {
        out.push("..");
    }
    for c in &tc[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_stopped_at_its_first_failing_seed_is_one_verdict_that_fails() {
        let g = Grid::new(
            vec![super::super::parse_axis("a=1,2,3").unwrap()],
            vec![0, 1],
            vec![],
        )
        .unwrap();
        let row = |met: bool| {
            let mut r = SweepRow::infeasible(0, String::new());
            (r.error, r.gpus, r.nodes, r.slo_met) = (None, Some(1), Some(1), Some(met));
            r
        };
        // Point 0 stopped at seed 0; point 2 met on both seeds; point 1 never ran.
        let rows = vec![(0, row(false)), (4, row(true)), (5, row(true))];
        let vs = verdicts(&g, &rows);
        assert_eq!(vs.iter().map(|v| v.point).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(
            vs.iter().map(|v| v.meets_slo).collect::<Vec<_>>(),
            vec![false, true]
        );
        assert_eq!(cheapest(&vs).map(|v| v.point), Some(2));
        // A point with a seed missing is never met, even if the seeds it has are.
        assert!(!verdicts(&g, &[(4, row(true))])[0].meets_slo);
    }

    #[test]
    fn relative_paths_climb_and_descend() {
        let base = std::env::temp_dir().join(format!("pdsim-rel-{}", std::process::id()));
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::create_dir_all(base.join("c")).unwrap();
        std::fs::write(base.join("a/b/t.csv"), "x").unwrap();
        assert_eq!(
            relative_to(&base.join("a/b/t.csv"), &base.join("c")),
            std::path::PathBuf::from("../a/b/t.csv")
        );
    }
}
