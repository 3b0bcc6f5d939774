//! `pdsim plan --rate`: the cheapest point that meets `[slo]` at one rate. Points grouped by
//! seed into verdicts ([`verdicts`]), ordered by what they cost ([`Cost`], known before a run
//! from the placement), and searched cheapest first ([`cheapest_first`]) to the same answer as
//! [`cheapest`] of the whole grid; [`PlanAnswer`] is the `plan.json` it writes.

use rayon::prelude::*;
use serde::Serialize;

use crate::plan::error::PlanError;
use crate::plan::grid::Grid;
use crate::plan::rows::SweepRow;
use crate::plan::run::Base;

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
                values: grid.assignments(p),
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

/// When no point meets `[slo]`, the one that came closest: the fewest seeds missing it, then
/// the fewest targets missed over its seeds (`slo_missed`), then the cheapest
/// ([`Cost::key`]), then grid order. Points that could not run are not candidates; `None`
/// when some point met `[slo]` or none ran.
pub fn closest(verdicts: &[PointVerdict]) -> Option<&PointVerdict> {
    if verdicts.iter().any(|v| v.meets_slo) {
        return None;
    }
    let costs: Vec<Cost> = verdicts.iter().filter_map(PointVerdict::cost).collect();
    let priced = priced(&costs);
    verdicts
        .iter()
        .filter(|v| !v.seeds.is_empty() && v.seeds.iter().all(|r| r.error.is_none()))
        .filter_map(|v| {
            let seeds_missed = v.seeds.iter().filter(|r| r.slo_met == Some(false)).count();
            let targets_missed: usize = v
                .seeds
                .iter()
                .filter(|r| r.slo_met == Some(false))
                .map(|r| {
                    r.slo_missed
                        .as_deref()
                        .map_or(1, |m| m.split_whitespace().count().max(1))
                })
                .sum();
            Some((
                (seeds_missed, targets_missed, v.cost()?.key(priced), v.point),
                v,
            ))
        })
        .min_by_key(|(k, _)| *k)
        .map(|x| x.1)
}

/// A point's cost before it runs, from its placement (`config::capacity::place`) and
/// `hardware.billing` — the figures its rows will hold; the scenario's error when its values
/// make an invalid one.
pub fn point_cost(base: &Base, grid: &Grid, p: usize) -> Result<Cost, String> {
    point_cost_arch(base, grid, p).map(|c| c.0)
}

/// [`point_cost`] and whether the point disaggregates.
fn point_cost_arch(base: &Base, grid: &Grid, p: usize) -> Result<(Cost, Arch), String> {
    let sc = base
        .with(&grid.sets_of(p * grid.seeds.len()))
        .map_err(|e| e.to_string())?;
    let place = &sc.placement;
    let gpus = place.gpus.iter().map(|g| g.len() as u32).sum();
    let billed = sc.billing.billed_gpus(gpus, place.nodes, sc.gpus_per_node);
    Ok((
        Cost {
            usd_per_hour: sc.usd_per_gpu_hour.map(|u| u * f64::from(billed)),
            billed_gpus: billed,
            gpus,
            nodes: place.nodes,
        },
        Arch::of_scenario(&sc),
    ))
}

/// The cheapest point meeting `[slo]` at a rate without running the whole grid, and the same
/// answer as [`cheapest`] of the whole grid's [`verdicts`] (see `plan/README.md`).
///
/// Points run cheapest first — [`Cost::key`] then grid order, [`cheapest`]'s own key, known
/// before a run from the placement and `hardware.billing` — in batches of `jobs` points. A
/// point runs its seeds in order and stops at the first that misses `[slo]` (the point fails
/// whatever the others give). The search stops after the batch holding the first point that
/// meets `[slo]` on every seed: every point before it in that order has run and failed, so no
/// cheaper point meets it. No monotonicity is assumed, so the answer holds for any axis (TP,
/// page size, chunk size, router policy alike).
///
/// When the grid holds both disaggregated and colocated points ([`Arch`]), the search goes on
/// past the answer over the other kind's points alone, in the same order and batches, to that
/// kind's cheapest point meeting `[slo]` (or through all of them): PD or not is then answered
/// with the price of the road not taken (`cheapest` of each kind's verdicts, exactly as the
/// full grid gives it).
///
/// Returns the rows `(row index, row)` of the points up to and including the answer in that
/// order (and, on a mixed grid, the other kind's up to its own answer), sorted by row index,
/// and the runs made past the answers in their batches (kept in the journal, not in the
/// result). The kept rows do not depend on `jobs`: the batch only decides how far past an
/// answer the last batch reaches. A point whose values make an invalid scenario never runs
/// and is not kept; when every point is invalid, exit 2 with the first error. `run_row` runs
/// (or reads back from an interrupted search) one row.
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
    let costs: Vec<Result<(Cost, Arch), String>> = pool.install(|| {
        (0..grid.points())
            .into_par_iter()
            .map(|p| point_cost_arch(base, grid, p))
            .collect()
    });
    let priced = priced(costs.iter().filter_map(|c| c.as_ref().ok().map(|c| &c.0)));
    let mut order: Vec<(CostKey, usize, Cost, Arch)> = costs
        .iter()
        .enumerate()
        .filter_map(|(p, c)| c.as_ref().ok().map(|&(c, a)| (c.key(priced), p, c, a)))
        .collect();
    if order.is_empty() {
        let first = costs.into_iter().find_map(Result::err).unwrap_or_default();
        return Err(PlanError::NoValidPoint { first });
    }
    order.sort_unstable_by_key(|o| (o.0, o.1));
    // One point's rows: its seeds in order, up to the first that misses [slo].
    let point = |&(_, p, cost, _): &(CostKey, usize, Cost, Arch)| -> Result<Vec<(usize, SweepRow)>, PlanError> {
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
    let meets = |rows: &[(usize, SweepRow)]| {
        rows.len() == n && rows.iter().all(|r| r.1.slo_met == Some(true))
    };
    // Searches `points` (positions in `order`) in batches to the first that meets [slo];
    // rows already run (`done`, by point) are not run again. Returns the kept rows, the
    // position of the answer, and the rows run past it (by point).
    type Rows = Vec<(usize, SweepRow)>;
    type Ran = std::collections::BTreeMap<usize, Rows>;
    type Searched = (Rows, Option<usize>, Ran);
    let search = |points: &[usize], done: &mut Ran| -> Result<Searched, PlanError> {
        let mut kept = Vec::new();
        let mut past = Ran::new();
        for batch in points.chunks(jobs.max(1)) {
            let todo: Vec<usize> = batch
                .iter()
                .copied()
                .filter(|&o| !done.contains_key(&order[o].1))
                .collect();
            let ran: Vec<Result<Vec<(usize, SweepRow)>, PlanError>> =
                pool.install(|| todo.par_iter().map(|&o| point(&order[o])).collect());
            for (&o, rows) in todo.iter().zip(ran) {
                done.insert(order[o].1, rows?);
            }
            // Decided from the whole batch, in the search's order: never from which thread
            // ended first.
            let mut found = None;
            for &o in batch {
                let rows = done
                    .remove(&order[o].1)
                    .expect("every point of the batch ran");
                if found.is_some() {
                    past.insert(order[o].1, rows);
                    continue;
                }
                if meets(&rows) {
                    found = Some(o);
                }
                kept.extend(rows);
            }
            if found.is_some() {
                return Ok((kept, found, past));
            }
        }
        Ok((kept, None, past))
    };
    let all: Vec<usize> = (0..order.len()).collect();
    let (mut kept, found, mut past) = search(&all, &mut Ran::new())?;
    // A mixed grid: the other kind's cheapest point meeting [slo], past the answer (its
    // points before the answer ran and missed).
    let archs: std::collections::BTreeSet<Arch> = order.iter().map(|o| o.3).collect();
    if let Some(at) = found
        && archs.len() > 1
    {
        let rival = order[at].3.other();
        let rest: Vec<usize> = (at + 1..order.len())
            .filter(|&o| order[o].3 == rival)
            .collect();
        let (more, _, past2) = search(&rest, &mut past)?;
        kept.extend(more);
        past.extend(past2);
    }
    kept.sort_by_key(|r| r.0);
    Ok((kept, past.values().map(Vec::len).sum()))
}

/// Whether a point disaggregates prefill and decode or serves both on one server: the two
/// answers to DistServe's "PD or not?".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arch {
    /// Prefill and decode pools (PD).
    Disaggregated,
    /// Colocated servers (plain sglang: chunked prefill and decode in one batch).
    Colocated,
}

impl Arch {
    /// The kind of a scenario: colocated when its pools are.
    pub fn of_scenario(sc: &crate::config::Scenario) -> Self {
        if sc
            .pools
            .iter()
            .any(|p| p.role == crate::config::Role::Colocated)
        {
            Arch::Colocated
        } else {
            Arch::Disaggregated
        }
    }

    /// The kind of a row's point (`None` for an infeasible point).
    pub fn of_row(r: &SweepRow) -> Option<Self> {
        match (r.colocated_instances, r.prefill_instances) {
            (Some(c), _) if c > 0 => Some(Arch::Colocated),
            (_, Some(p)) if p > 0 => Some(Arch::Disaggregated),
            _ => None,
        }
    }

    /// The other kind.
    pub fn other(self) -> Self {
        match self {
            Arch::Disaggregated => Arch::Colocated,
            Arch::Colocated => Arch::Disaggregated,
        }
    }

    /// `disaggregated` or `colocated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Disaggregated => "disaggregated",
            Arch::Colocated => "colocated",
        }
    }
}

/// The point verdicts of one kind.
pub fn of_arch(vs: &[PointVerdict], arch: Arch) -> Vec<PointVerdict> {
    vs.iter()
        .filter(|v| v.seeds.first().and_then(Arch::of_row) == Some(arch))
        .cloned()
        .collect()
}

/// `plan.json`'s `pd_or_not`: on a grid of both kinds, which the answer is, each kind's
/// cheapest point meeting `[slo]` (`null`: none of that kind does) and why, in words.
#[derive(Clone, Debug, Serialize)]
pub struct PdOrNot {
    /// `disaggregated`, `colocated`, or `neither` (no point meets `[slo]`).
    pub answer: String,
    /// The cheapest disaggregated point meeting `[slo]`, by grid index.
    pub best_disaggregated: Option<usize>,
    /// The cheapest colocated point meeting `[slo]`, by grid index.
    pub best_colocated: Option<usize>,
    /// The answer, the other kind's price at the same `[slo]` and the binding phase, as the
    /// report and the CLI say it.
    pub why: String,
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
    /// When no point meets `[slo]`: the one that came closest ([`closest`]); left out
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest: Option<PointVerdict>,
    /// `best.toml`, when there is an answer (relative to `plan.json`).
    pub best_toml: Option<String>,
    /// `launch.txt`, the sglang and router launch lines of that answer (relative to
    /// `plan.json`; `plan::launch`).
    pub launch: Option<String>,
    /// `k8s.yaml`, the same deployment as Kubernetes manifests (one LeaderWorkerSet per pool,
    /// the router's Deployment and Service; `plan::k8s`).
    pub kubernetes: Option<String>,
    /// `slurm.sh`, the same deployment as a Slurm batch script (one task per node running
    /// that node's lines of `launch.txt`; `plan::slurm`).
    pub slurm: Option<String>,
    /// PD or not: on a grid holding both disaggregated and colocated points, which the answer
    /// is and what the other costs at the same `[slo]` (left out of other plans).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pd_or_not: Option<PdOrNot>,
    /// A trace replay ([`TraceSeeds`]): what its seeds varied. Left out on a synthetic
    /// workload, whose seeds draw its arrivals and lengths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_seeds: Option<TraceSeeds>,
    /// What the answer's step times rest on: the user's measurements or pdsim's defaults
    /// ([`super::Grounding`]).
    pub grounding: super::Grounding,
}

/// What the seeds of a trace replay varied. The trace fixes every arrival and length, so the
/// seeds vary only what the run draws at random (a `random` or `power_of_two` router, client
/// timeouts, speculative acceptance, lossy links); with none of that every seed replays the
/// same run, and "met on every seed" is one run's verdict (issue 41).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceSeeds {
    /// Whether the point the answer rests on (or the closest) ran differently on some seed.
    pub differ: bool,
    /// The same in words, for the CLI line and the report.
    pub note: String,
}

impl TraceSeeds {
    /// From the seeds' rows of the point the answer rests on; `None` without one that ran on
    /// two seeds or more (a point stops at its first failing seed).
    pub fn of(point: Option<&PointVerdict>) -> Option<Self> {
        let rows = &point?.seeds;
        if rows.len() < 2 {
            return None;
        }
        let same = |r: &SweepRow| SweepRow {
            seed: 0,
            ..r.clone()
        };
        let differ = rows.windows(2).any(|w| same(&w[0]) != same(&w[1]));
        let n = rows.len();
        let note = if differ {
            format!(
                "one trace: its {n} seeds replay the same arrivals and lengths and vary only what the run draws at random"
            )
        } else {
            format!(
                "one trace, one run: its {n} seeds replayed the same run (the trace fixes arrivals and lengths, and nothing else is drawn at random)"
            )
        };
        Some(Self { differ, note })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::parse_axis;

    #[test]
    fn a_point_stopped_at_its_first_failing_seed_is_one_verdict_that_fails() {
        let g = Grid::new(vec![parse_axis("a=1,2,3").unwrap()], vec![0, 1], vec![]).unwrap();
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
}
