//! SLO searches over a sweep's grid: the cheapest point that meets `[slo]` at a rate, and each
//! point's highest sustainable rate (goodput search, DistServe §4's placement question).

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{Base, Grid, PlanError, SweepRow};

/// The `--set` key that gives a scenario's arrival rate: the synthetic arrival's or the trace's
/// `rate_per_s`. A rate schedule has no single rate to set.
pub fn rate_key(base: &Base) -> Result<&'static str, PlanError> {
    use crate::scenario::file::NoSingleRate;
    let at = |key: &str, message: String| {
        PlanError::Scenario(crate::scenario::ScenarioError {
            file: base.path.clone(),
            line: None,
            key: key.into(),
            message,
        })
    };
    base.file.workload.rate_key().map_err(|why| match why {
        NoSingleRate::Process(p) => at(
            "workload.arrival.process",
            format!(
                "{p:?} has no single rate for --rate or --max-rate to set; use poisson, constant, gamma, on_off or a trace"
            ),
        ),
        NoSingleRate::Missing => at(
            "workload",
            "the workload has no arrival rate to set (workload.arrival or workload.trace)".into(),
        ),
    })
}

/// A grid point's figures across its seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointVerdict {
    /// Point index in grid order.
    pub point: usize,
    /// The chosen value of every varied key, in `--vary` order.
    pub values: Vec<(String, String)>,
    /// GPUs the instances use.
    pub gpus: Option<u32>,
    /// Nodes the pools span.
    pub nodes: Option<u32>,
    /// GPUs of those nodes no instance uses.
    pub idle_gpus: Option<u32>,
    /// GPUs paid for: `gpus`, or every GPU of the nodes under `hardware.billing = "node"`.
    pub billed_gpus: Option<u32>,
    /// Billed GPUs × `hardware.usd_per_gpu_hour`, US dollars per hour.
    pub usd_per_hour: Option<f64>,
    /// Whether `[slo]` held on every seed.
    pub meets_slo: bool,
    /// The point's rows, one per seed.
    pub seeds: Vec<SweepRow>,
}

/// What a point costs, known before it runs (from its placement) and after (from its rows):
/// the order the planner searches in and picks by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// Billed GPUs × `hardware.usd_per_gpu_hour`, US dollars per hour (`None` without a price).
    pub usd_per_hour: Option<f64>,
    /// GPUs paid for (`hardware.billing`).
    pub billed_gpus: u32,
    /// GPUs the instances use.
    pub gpus: u32,
    /// Nodes the pools span.
    pub nodes: u32,
}

/// [`Cost::key`]'s value.
pub type CostKey = (u64, u32, u32, u32);

impl Cost {
    /// The order key: the price when every point has one (`priced`), then the billed GPUs
    /// (the price's own order when one price per GPU-hour holds for every point), then the
    /// most GPUs used — of two points billed alike under whole-node billing, the one that
    /// puts more of the paid-for GPUs to work (under GPU billing the billed GPUs are the GPUs
    /// used, so this never decides) — then the fewest nodes. A non-negative f64's bits order
    /// as the number does; `+ 0.0` turns −0 into +0.
    pub fn key(&self, priced: bool) -> CostKey {
        let usd = match (priced, self.usd_per_hour) {
            (true, Some(u)) => (u + 0.0).to_bits(),
            _ => 0,
        };
        (usd, self.billed_gpus, u32::MAX - self.gpus, self.nodes)
    }
}

impl PointVerdict {
    /// The point's cost from its first row, `None` for an infeasible point.
    pub fn cost(&self) -> Option<Cost> {
        Some(Cost {
            usd_per_hour: self.usd_per_hour,
            billed_gpus: self.billed_gpus.or(self.gpus)?,
            gpus: self.gpus?,
            nodes: self.nodes?,
        })
    }
}

/// Groups rows `(row index, row)` (in row order, the seeds of a point together) by point. A
/// point may hold fewer rows than seeds: a search stops a point at its first failing seed, and
/// with one seed missing `[slo]` the point fails whatever the others would give.
pub fn verdicts(grid: &Grid, rows: &[(usize, SweepRow)]) -> Vec<PointVerdict> {
    let n = grid.seeds.len();
    rows.chunk_by(|a, b| a.0 / n == b.0 / n)
        .map(|seeds| {
            let p = seeds[0].0 / n;
            let first = &seeds[0].1;
            PointVerdict {
                point: p,
                values: grid
                    .axes
                    .iter()
                    .zip(grid.values_of(p))
                    .map(|(a, v)| (a.key.clone(), v.to_string()))
                    .collect(),
                gpus: first.gpus,
                nodes: first.nodes,
                idle_gpus: first.idle_gpus,
                billed_gpus: first.billed_gpus,
                usd_per_hour: first.usd_per_hour,
                meets_slo: seeds.len() == n
                    && crate::metrics::slo::met_on_every_seed(seeds.iter().map(|r| r.1.slo_met)),
                seeds: seeds.iter().map(|r| r.1.clone()).collect(),
            }
        })
        .collect()
}

/// Whether cost is ordered by price: every feasible point has one.
fn priced<'a>(costs: impl IntoIterator<Item = &'a Cost>) -> bool {
    costs.into_iter().all(|c| c.usd_per_hour.is_some())
}

/// The cheapest point that meets `[slo]` on every seed: least billed cost ([`Cost::key`]:
/// price, billed GPUs, GPUs, nodes), then the earliest in grid order (so the answer never
/// depends on thread timing).
pub fn cheapest(verdicts: &[PointVerdict]) -> Option<&PointVerdict> {
    let costs: Vec<Cost> = verdicts.iter().filter_map(PointVerdict::cost).collect();
    let priced = priced(&costs);
    verdicts
        .iter()
        .filter(|v| v.meets_slo)
        .filter_map(|v| Some((v.cost()?.key(priced), v.point, v)))
        .min_by_key(|(k, p, _)| (*k, *p))
        .map(|x| x.2)
}

/// A point's cost before it runs, from its placement (`config::capacity::place`) and
/// `hardware.billing` — the figures its rows will hold; the scenario's error when its values
/// make an invalid one.
pub fn point_cost(base: &Base, grid: &Grid, p: usize) -> Result<Cost, String> {
    let sc = base
        .with(&grid.sets_of(p * grid.seeds.len()))
        .map_err(|e| e.to_string())?;
    let place = &sc.placement;
    let gpus = place.gpus.iter().map(|g| g.len() as u32).sum();
    let billed = sc.billing.billed_gpus(gpus, place.nodes, sc.gpus_per_node);
    Ok(Cost {
        usd_per_hour: sc.usd_per_gpu_hour.map(|u| u * f64::from(billed)),
        billed_gpus: billed,
        gpus,
        nodes: place.nodes,
    })
}

/// The cheapest point meeting `[slo]` at a rate without running the whole grid, and the same
/// answer as [`cheapest`] of the whole grid's [`verdicts`] (see `README.md` beside this file).
///
/// Points run cheapest first — [`Cost::key`] then grid order, [`cheapest`]'s own key, known
/// before a run from the placement and `hardware.billing` — in batches of `jobs` points. A
/// point runs its seeds in order and stops at the first that misses `[slo]` (the point fails
/// whatever the others give). The search stops after the batch holding the first point that
/// meets `[slo]` on every seed: every point before it in that order has run and failed, so no
/// cheaper point meets it. No monotonicity is assumed, so the answer holds for any axis (TP,
/// page size, chunk size, router policy alike).
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
        .map_err(|e| PlanError::flag("--jobs", format!("--jobs {jobs}: {e}")))?;
    let n = grid.seeds.len();
    let costs: Vec<Result<Cost, String>> = pool.install(|| {
        (0..grid.points())
            .into_par_iter()
            .map(|p| point_cost(base, grid, p))
            .collect()
    });
    let priced = priced(costs.iter().filter_map(|c| c.as_ref().ok()));
    let mut order: Vec<(CostKey, usize, Cost)> = costs
        .iter()
        .enumerate()
        .filter_map(|(p, c)| c.as_ref().ok().map(|&c| (c.key(priced), p, c)))
        .collect();
    if order.is_empty() {
        let first = costs.into_iter().find_map(Result::err).unwrap_or_default();
        return Err(PlanError::NoValidPoint { first });
    }
    order.sort_unstable_by_key(|o| (o.0, o.1));
    // One point's rows: its seeds in order, up to the first that misses [slo].
    let point =
        |&(_, p, cost): &(CostKey, usize, Cost)| -> Result<Vec<(usize, SweepRow)>, PlanError> {
            let mut rows = Vec::new();
            for k in 0..n {
                let i = p * n + k;
                let row = run_row(i)?;
                assert!(
                    row.error.is_some()
                        || (row.gpus, row.nodes, row.billed_gpus)
                            == (Some(cost.gpus), Some(cost.nodes), Some(cost.billed_gpus)),
                    "point {p} seed {}: the run used {:?} GPUs on {:?} nodes ({:?} billed) but its placement gave {} on {} ({} billed); the search's order is wrong",
                    grid.seeds[k],
                    row.gpus,
                    row.nodes,
                    row.billed_gpus,
                    cost.gpus,
                    cost.nodes,
                    cost.billed_gpus
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
    /// What cost is ordered by: `gpu` (the GPUs used) or `node` (every GPU of the nodes
    /// spanned), as `hardware.billing` says.
    pub billing: String,
    /// Whether runs stopped once `[slo]` was lost (`--no-early-stop` turns it off).
    pub early_stop: bool,
    /// Runs stopped once `[slo]` was lost.
    pub runs_stopped_early: usize,
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
    /// `k8s.yaml`, the same deployment as Kubernetes manifests (one LeaderWorkerSet per pool,
    /// the router's Deployment and Service; `plan::k8s`).
    pub kubernetes: Option<String>,
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
    /// No failing rate was found up to the ladder's top ([`MAX_PLAN_RATE`]) or the search's
    /// step budget: the point sustains *at least* `max_rate_per_s`, and the limit was not
    /// bracketed.
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
    /// Stop each run once `[slo]` is lost ([`super::summarize_until`]).
    pub early_stop: bool,
}

/// The least `--tolerance`: finer rungs than 1e-4 apart are below what a seed's noise moves
/// (and the ladder's arithmetic stays far from f64's precision).
pub const MIN_RATE_TOLERANCE: f64 = 1e-4;

/// `x^k` by squaring, in plain f64 multiplications: the same bits on every machine and in
/// every binary (no libm, nothing for the compiler to fold differently), so a test can name
/// a rung exactly.
fn pow_int(x: f64, k: u32) -> f64 {
    let (mut base, mut e, mut acc) = (x, k, 1.0);
    while e > 0 {
        if e & 1 == 1 {
            acc *= base;
        }
        base *= base;
        e >>= 1;
    }
    acc
}

/// The rate ladder `--max-rate` searches: rung `k` is `start × (1 + rel_tol)^k`, from the
/// lowest rung at or above `start / 1000` to the highest at or below [`MAX_PLAN_RATE`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ladder {
    /// Rung 0, requests/s.
    pub start: f64,
    /// `1 + rel_tol`.
    pub ratio: f64,
    /// The lowest rung (≤ 0).
    pub bottom: i32,
    /// The highest rung (≥ 0).
    pub top: i32,
    /// Rungs per doubling of the rate, `⌈ln 2 / ln ratio⌉`: the gallop's step.
    pub per_doubling: i32,
}

impl Ladder {
    /// The ladder from `start` (at most [`MAX_PLAN_RATE`]) with rungs `1 + rel_tol` apart.
    pub fn new(start: f64, rel_tol: f64) -> Self {
        let ratio = 1.0 + rel_tol;
        let per_doubling = (std::f64::consts::LN_2 / ratio.ln()).ceil().max(1.0) as i32;
        let mut l = Self {
            start,
            ratio,
            bottom: 0,
            top: 0,
            per_doubling,
        };
        // Found from estimates and then corrected rung by rung, so each end is exact.
        let est = |f: f64| (f.ln() / ratio.ln()) as i32;
        l.top = est(MAX_PLAN_RATE / start).max(0);
        while l.top > 0 && l.rate(l.top) > MAX_PLAN_RATE {
            l.top -= 1;
        }
        while l.rate(l.top + 1) <= MAX_PLAN_RATE {
            l.top += 1;
        }
        l.bottom = est(1e-3).min(0);
        while l.bottom < 0 && l.rate(l.bottom) < start * 1e-3 {
            l.bottom += 1;
        }
        while l.rate(l.bottom - 1) >= start * 1e-3 {
            l.bottom -= 1;
        }
        l
    }

    /// The rate of rung `k`, requests/s.
    pub fn rate(&self, k: i32) -> f64 {
        if k >= 0 {
            self.start * pow_int(self.ratio, k as u32)
        } else {
            self.start / pow_int(self.ratio, k.unsigned_abs())
        }
    }
}

/// How a search over the ladder went for one point: the bracket and the rungs tried.
#[derive(Clone, Debug, PartialEq)]
pub struct LadderSearch {
    /// The highest rung found to pass, if any.
    pub pass: Option<i32>,
    /// The rung above it found to fail, if any.
    pub fail: Option<i32>,
    /// Rungs tried, in order, with their verdicts.
    pub tried: Vec<(i32, bool)>,
    /// The budget ran out before the bracket closed.
    pub out_of_steps: bool,
}

/// Gallop then bisect over `ladder` with the verdict `meets(rung)`: from rung 0, up (or down)
/// one doubling of the rate at a time until the verdict flips, then halve the bracket until
/// its two rungs are adjacent. Assumes the verdict is monotone in the rate (more load never
/// helps; DistServe's goodput search assumes the same), and then finds exactly the rung a
/// scan of every rung finds: the highest that passes, the next failing. At most `max_steps`
/// verdicts; `meets` is asked each rung once.
pub fn search_ladder<E>(
    ladder: &Ladder,
    max_steps: u32,
    mut meets: impl FnMut(i32) -> Result<bool, E>,
) -> Result<LadderSearch, E> {
    let mut s = LadderSearch {
        pass: None,
        fail: None,
        tried: Vec::new(),
        out_of_steps: false,
    };
    let mut ask = |k: i32, s: &mut LadderSearch| -> Result<Option<bool>, E> {
        if s.tried.len() as u32 >= max_steps {
            s.out_of_steps = true;
            return Ok(None);
        }
        let ok = meets(k)?;
        s.tried.push((k, ok));
        if ok {
            s.pass = Some(s.pass.map_or(k, |p| p.max(k)));
        } else {
            s.fail = Some(s.fail.map_or(k, |f| f.min(k)));
        }
        Ok(Some(ok))
    };
    let step = ladder.per_doubling;
    let mut k = 0;
    // Gallop: one doubling of the rate per step, to the ladder's end.
    loop {
        let Some(ok) = ask(k, &mut s)? else {
            return Ok(s);
        };
        let next = if ok {
            (k < ladder.top).then(|| (k + step).min(ladder.top))
        } else {
            (k > ladder.bottom).then(|| (k - step).max(ladder.bottom))
        };
        match (s.pass, s.fail, next) {
            (Some(_), Some(_), _) | (_, _, None) => break,
            (_, _, Some(n)) => k = n,
        }
    }
    // Bisect the bracket down to adjacent rungs.
    while let (Some(p), Some(f)) = (s.pass, s.fail) {
        if f - p <= 1 {
            break;
        }
        if ask(p + (f - p) / 2, &mut s)?.is_none() {
            break;
        }
    }
    Ok(s)
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
            let (sum, stop) =
                super::summarize_until(&sc, s.early_stop).map_err(|e| e.to_string())?;
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
    /// Every point: its values by key and its row of `plan.csv`.
    pub points: Vec<MaxRatePoint>,
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
            points: rows
                .iter()
                .enumerate()
                .map(|(p, r)| MaxRatePoint {
                    point: p,
                    values: grid
                        .axes
                        .iter()
                        .zip(grid.values_of(p))
                        .map(|(a, v)| (a.key.clone(), v.to_string()))
                        .collect(),
                    row: r.clone(),
                })
                .collect(),
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
    super::whole_lines(name, bytes)?;
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
    let mut header: Vec<String> = grid.axes.iter().map(|a| a.key.clone()).collect();
    header.extend(PLAN_COLUMNS.map(String::from));
    w.write_record(&header).map_err(err)?;
    let cell = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let int = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    for (p, r) in rows {
        let mut rec: Vec<String> = grid.values_of(*p).iter().map(|s| s.to_string()).collect();
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

/// `best.toml`: the scenario with the chosen values and the rate set, every relative path
/// rewritten to be relative to `out_dir` (where the file is written), so it runs as is from
/// there. The chosen values are listed in a comment at the top and written in the tables.
pub fn best_toml(
    base: &Base,
    sets: &[String],
    out_dir: &std::path::Path,
    header: &str,
) -> Result<String, PlanError> {
    // The file as written, not the typed one: best.toml keeps the user's tables and values,
    // with only the chosen ones changed (raw TOML at the edge, where the file is written).
    let mut table: toml::Table = toml::from_str(&base.text).map_err(|e| {
        PlanError::Scenario(crate::scenario::ScenarioError {
            file: base.path.clone(),
            line: None,
            key: String::new(),
            message: e.to_string(),
        })
    })?;
    for s in sets {
        crate::scenario::set::apply_set(&mut table, s).map_err(|e| PlanError::flag("--set", e))?;
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

    /// `--rate` sets the typed workload's rate key; a schedule has none, and the error names
    /// `workload.arrival.process`.
    #[test]
    fn the_rate_key_comes_from_the_typed_workload() {
        let dir = std::env::temp_dir().join(format!("pdsim-ratekey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let quick = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml"),
        )
        .unwrap();
        let path = dir.join("q.toml");
        std::fs::write(&path, &quick).unwrap();
        let base = Base::load(&path).unwrap();
        assert_eq!(rate_key(&base).unwrap(), "workload.arrival.rate_per_s");
        let mut sched = base.clone();
        sched.file.workload.arrival =
            Some(crate::scenario::ArrivalSection::Schedule { steps: vec![] });
        let e = rate_key(&sched).unwrap_err();
        assert_eq!(e.key().as_deref(), Some("workload.arrival.process"));
        assert!(
            e.to_string().contains("\"schedule\" has no single rate"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

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
    fn the_ladder_search_finds_a_scans_answer_in_few_steps() {
        for tol in [0.02, 0.1, 0.5] {
            let l = Ladder::new(10.0, tol);
            assert!(l.rate(l.top) <= MAX_PLAN_RATE && l.rate(l.top + 1) > MAX_PLAN_RATE);
            assert!(l.rate(l.bottom) >= 10.0 * 1e-3 && l.rate(l.bottom - 1) < 10.0 * 1e-3);
            assert_eq!(l.rate(0), 10.0);
            for k in l.bottom..l.top {
                assert!(l.rate(k + 1) > l.rate(k), "rungs rise");
            }
            // Every threshold, from below the bottom to past the top.
            for limit in (l.bottom - 1..=l.top).step_by(7) {
                let s = search_ladder(&l, 64, |k| Ok::<_, ()>(k <= limit)).unwrap();
                // A scan of every rung: the highest that passes, the next one failing.
                let scan_pass = (l.bottom..=l.top).filter(|&k| k <= limit).max();
                let scan_fail = (l.bottom..=l.top).find(|&k| k > limit);
                assert_eq!(s.pass, scan_pass, "tol {tol}, limit {limit}");
                if scan_pass.is_some() {
                    assert_eq!(s.fail, scan_fail, "tol {tol}, limit {limit}");
                }
                assert!(!s.out_of_steps);
                let mut asked: Vec<i32> = s.tried.iter().map(|t| t.0).collect();
                asked.sort_unstable();
                asked.dedup();
                assert_eq!(asked.len(), s.tried.len(), "no rung asked twice");
                assert!(s.tried.len() <= 45, "tol {tol}: {} steps", s.tried.len());
            }
        }
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
