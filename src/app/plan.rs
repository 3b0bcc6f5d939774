//! `pdsim plan SCENARIO.toml (--rate R | --max-rate) --vary ... [--seeds N] [--jobs N] [--out DIR]`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::CliError;
use super::outdir::OutDir;
use super::sweep::{durable_rows, grid_of, jobs_of, note, open_journal, write, write_sweep};
use crate::plan::journal::Journal;
use crate::plan::search::{self, MAX_PLAN_RATE, MaxRateRow, PlanAnswer, PointVerdict, RateSearch};
use crate::plan::{self, Base, Grid, Manifest, SweepRow};
use crate::scenario::Scenario;

/// What `pdsim plan` is asked: the command line's flags (`cli::plan`) or a program's call
/// (`crate::api`).
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// The scenario (a file, or a program's TOML text); its `[slo]` is the target.
    pub scenario: super::Source,
    /// The arrival rate to plan for, requests/s: finds the cheapest grid point (fewest GPUs,
    /// then nodes) that meets `[slo]` on every seed.
    pub rate: Option<f64>,
    /// Instead: every grid point's highest rate that meets `[slo]` on every seed (bisection).
    pub max_rate: bool,
    /// A grid axis, as for `pdsim sweep`.
    pub vary: Vec<String>,
    /// Seeds per point.
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores).
    pub jobs: Option<usize>,
    /// Output folder (default `results/<run.name>-plan/`).
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point.
    pub sets: Vec<String>,
    /// `--max-rate`: stop bisecting when the bracket is this narrow (relative).
    pub tolerance: f64,
    /// Print nothing on success.
    pub quiet: bool,
    /// `--rate`: run every point of the grid instead of searching cheapest first (the same
    /// answer; `sweep.csv` then holds every row).
    pub full_grid: bool,
    /// Continue an interrupted plan in `--out` (same arguments): finished runs are kept and the
    /// answer is byte-identical to an uninterrupted plan's.
    pub resume: bool,
    /// Run every simulation to its end: by default a run stops as soon as `[slo]` can no longer
    /// be met (the same verdicts and answer; its row's other figures then cover the requests up
    /// to the stop, and `stopped_early_at_s` says when).
    pub no_early_stop: bool,
    /// The one-line question (`--model … --gpu …`) instead of a scenario: `scenario` is then
    /// ignored, and the scenario and the grid of deployments are built from it
    /// (`app::oneline`).
    pub question: Option<super::oneline::Question>,
}

/// Runs `pdsim plan`, printing its answer on standard output (nothing under `quiet`).
pub fn run(args: &PlanRequest) -> Result<(), CliError> {
    run_saying(args, &mut |text| super::print_out(text))
}

/// [`run`], handing the answer's text to `say` instead of printing it (`pdsim serve` shows it
/// on its answer page); nothing is said under `quiet`.
pub fn run_saying(args: &PlanRequest, say: &mut Say<'_>) -> Result<(), CliError> {
    let started = Instant::now();
    let Some(q) = &args.question else {
        return run_base_saying(args, args.scenario.base()?, started, say);
    };
    if !args.vary.is_empty() {
        return Err(CliError::Conflict {
            flags: &["--model", "--vary"],
            message: "the one-line question (--model, --gpu, …) builds its own grid of deployments; drop --vary, or plan a scenario file with it".into(),
        });
    }
    let (text, axis) = super::oneline::plan_of(q, args.rate.unwrap_or(1.0))?;
    let model = crate::spec::launch::preset_for(&q.model).unwrap_or("model");
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&format!("plan-{model}-{}-plan", q.gpu)));
    let path = dir.join("scenario.toml");
    let asked = PlanRequest {
        scenario: super::Source::Text {
            text: text.clone(),
            path: path.clone(),
        },
        vary: vec![axis],
        out: Some(dir.clone()),
        question: None,
        ..args.clone()
    };
    let answer = run_base_saying(&asked, asked.scenario.base()?, started, say);
    // The scenario the plan used, beside its results (also when no deployment met [slo]);
    // written whole or not at all (a temporary file renamed), so a kill never leaves half of it.
    if path.parent().is_some_and(Path::is_dir) {
        let tmp = dir.join(".scenario.toml.partial");
        std::fs::write(&tmp, text.as_bytes())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| {
                CliError::Io(crate::report::IoError {
                    path: path.clone(),
                    source,
                })
            })?;
    }
    answer
}

/// Where a plan's answer text goes: standard output for the CLI, a page for `pdsim serve`.
pub type Say<'a> = dyn FnMut(&str) -> Result<(), CliError> + 'a;

/// [`run`] of a scenario already read (`crate::api` gives a program's TOML text as a [`Base`]).
pub fn run_base(args: &PlanRequest, base: Base, started: Instant) -> Result<(), CliError> {
    run_base_saying(args, base, started, &mut |text| super::print_out(text))
}

/// [`run_base`], the answer's text handed to `say`.
fn run_base_saying(
    args: &PlanRequest,
    base: Base,
    started: Instant,
    say: &mut Say<'_>,
) -> Result<(), CliError> {
    let key = search::rate_key(&base)?;
    let mut fixed = args.sets.clone();
    if let Some(r) = args.rate {
        check_rate(r, key)?;
        fixed.push(format!("{key}={}", search::rate_value(r)));
    }
    let (grid, sc) = grid_of(
        &base,
        &args.vary,
        args.seeds,
        fixed,
        Some(key),
        args.max_rate,
    )?;
    // Warnings print under -q too (stderr): they change what the results mean (a
    // calibration measured elsewhere extrapolates every step time), and -q only quiets
    // progress and the summary (issue 40).
    for n in &sc.notes {
        note(&format!("warning: {n}"));
    }
    require_slo(args, &sc)?;
    // Pools that change size cost what the GPUs they held cost, known only once a point has
    // run (`summary.json` `autoscaling`): every point runs, and the cheapest meeting [slo] is
    // the one whose GPU-hours cost least — the policy, and its settings, to deploy.
    let resizing;
    let args = if sc.lifecycle.is_some() && !args.max_rate {
        if sc.usd_per_gpu_hour.is_none() {
            return Err(CliError::Scenario(crate::scenario::ScenarioError {
                file: args.scenario.path().to_path_buf(),
                line: None,
                key: "hardware.usd_per_gpu_hour".into(),
                message: "a plan over an [autoscaler] that resizes the pools ranks its points by what the GPU-hours they held cost: set a price per GPU-hour".into(),
            }));
        }
        resizing = PlanRequest {
            full_grid: true,
            ..args.clone()
        };
        &resizing
    } else {
        args
    };
    let jobs = jobs_of(args.jobs)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&format!("{}-plan", sc.name)));
    let m = Manifest::new(&base, &sc, grid.clone(), None)?;
    let files = super::sweep::sweep_files(&dir, args.scenario.path());
    let mut out = OutDir::open(&dir, "plan", &files, args.resume)?;
    out.keep_staging_on_failure();
    if args.max_rate {
        let text = max_rate(args, &base, &m, &sc, key, jobs, &out, started)?;
        out.install(&["plan.csv", "plan.json"])?;
        return match args.quiet {
            true => Ok(()),
            false => say(&text),
        };
    }
    let rate = args.rate.expect("clap requires --rate without --max-rate");
    let early = !args.no_early_stop;
    let (indexed, past) = rate_rows(args, &base, &m, &out, jobs, rate, early)?;
    let stage = out.staging().to_path_buf();
    let vs = search::verdicts(&grid, &indexed);
    let best = search::cheapest(&vs).cloned();
    let files = match &best {
        Some(b) => write_best(args, &base, &grid, b, rate, &dir, &stage)?,
        None => BestFiles::default(),
    };
    let stopped = indexed
        .iter()
        .filter(|r| r.1.stopped_early_at_s.is_some())
        .count();
    let answer = PlanAnswer {
        scenario: args.scenario.path().display().to_string(),
        rate_per_s: rate,
        seeds: grid.seeds.clone(),
        slo: sc.slo,
        search: if args.full_grid {
            "full_grid"
        } else {
            "cheapest_first"
        }
        .to_string(),
        billing: sc.billing.as_str().to_string(),
        early_stop: early,
        runs_stopped_early: stopped,
        points: vs.len(),
        grid_points: grid.points(),
        runs: indexed.len(),
        grid_runs: grid.rows(),
        points_meeting_slo: vs.iter().filter(|v| v.meets_slo).count(),
        best: best.clone(),
        closest: search::closest(&vs).cloned(),
        best_toml: files.best_toml,
        launch: files.launch,
        kubernetes: files.kubernetes,
        slurm: files.slurm,
        pd_or_not: crate::plan::report::pd_or_not(&vs, &sc.slo),
        trace_seeds: None,
        grounding: search::Grounding::of(&sc, best.as_ref().or(search::closest(&vs))),
    };
    let closest = answer.closest.clone();
    let answer = PlanAnswer {
        // A trace fixes arrivals and lengths: say what its seeds varied.
        trace_seeds: matches!(sc.workload, crate::config::Workload::Trace { .. })
            .then(|| search::TraceSeeds::of(best.as_ref().or(closest.as_ref())))
            .flatten(),
        ..answer
    };
    let context = crate::plan::report::PlanContext {
        answer: &answer,
        gpus_per_node: sc.gpus_per_node,
        placement: files
            .planned
            .as_ref()
            .map(|p| crate::plan::launch::nodes_comment(p, &p.placement)),
    };
    write_sweep(&stage, &m, &indexed, Some(&context)).map_err(|e| out.rename_error(e))?;
    let json = serde_json::to_string_pretty(&answer).expect("a plan serializes") + "\n";
    write(&stage, "plan.json", json.as_bytes())?;
    out.install(&["sweep.json", "plan.json"])?;
    if !args.quiet {
        let mut head = best_line(best.as_ref(), &grid, sc.billing, rate);
        if let Some(t) = &answer.trace_seeds {
            if !t.differ {
                // Its seeds are one run: "on N seeds" would overstate it.
                let n = grid.seeds.len();
                head = head.replacen(
                    &format!("on {n} seeds"),
                    &format!("on one trace's run ({n} seeds, the same run)"),
                    1,
                );
            }
            head += &format!("\n  {}", t.note);
        }
        if let Some(c) = &answer.closest {
            head += &format!("\n  {}", closest_line(c));
        }
        if let Some(p) = profile_note(&sc.workload) {
            head += &format!("\n  {p}");
        }
        if let Some(pd) = &answer.pd_or_not {
            head += &format!("\n  {}", pd.why);
        }
        head += &format!("\n  {}", answer.grounding.note);
        say(&rate_summary(
            args, &answer, &head, stopped, past, started, &dir,
        ))?;
    }
    // No answer is a negative verdict (exit 1, as `check`'s failed expectation), after every
    // file is written: the closest point is in `plan.json`.
    if best.is_none() {
        return Err(CliError::Failed(format!(
            "no grid point meets [slo] at {rate} req/s on every seed{}; see {}",
            answer
                .closest
                .as_ref()
                .map_or(String::new(), |c| format!(" ({})", closest_line(c))),
            dir.join("plan.json").display()
        )));
    }
    Ok(())
}

/// The closest point in words: its values, on how many seeds it missed `[slo]` and which
/// targets.
fn closest_line(c: &PointVerdict) -> String {
    let missed: std::collections::BTreeSet<&str> = c
        .seeds
        .iter()
        .filter_map(|r| r.slo_missed.as_deref())
        .flat_map(str::split_whitespace)
        .collect();
    format!(
        "closest: {} missed it on {} of the {} seeds run ({})",
        c.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        c.seeds.iter().filter(|r| r.slo_met == Some(false)).count(),
        c.seeds.len(),
        if missed.is_empty() {
            "targets not named".to_string()
        } else {
            missed.into_iter().collect::<Vec<_>>().join(", ")
        }
    )
}

/// A plan needs a target: the scenario's `[slo]` sets at least one bound.
fn require_slo(args: &PlanRequest, sc: &Scenario) -> Result<(), CliError> {
    if !sc.slo.any() {
        return Err(CliError::Scenario(crate::scenario::ScenarioError {
            file: args.scenario.path().to_path_buf(),
            line: None,
            key: "slo".into(),
            message: "[slo] sets no target to plan for; add e.g. ttft_p99_ms = 2000 and tpot_p99_ms = 100 (or attainment_min with ttft_ms/tpot_ms)".into(),
        }));
    }
    // A target below what the base deployment can ever give: said before the search, which
    // will find no point meeting it there.
    for n in crate::assemble::slo_floor_notes(sc) {
        super::sweep::note(&format!("warning: {n}"));
    }
    Ok(())
}

/// `--rate r` is a rate the simulated clock can express: positive and at most
/// [`MAX_PLAN_RATE`] requests/s (one arrival per nanosecond on `key`).
pub(crate) fn check_rate(r: f64, key: &str) -> Result<(), CliError> {
    if !(r.is_finite() && r > 0.0 && r <= MAX_PLAN_RATE) {
        return Err(CliError::flag(
            "--rate",
            format!(
                "--rate {r}: must be a positive number of requests per second, at most {MAX_PLAN_RATE:e} ({key}: one arrival per nanosecond, the simulated clock's resolution)"
            ),
        ));
    }
    Ok(())
}

/// The `--rate` plan's rows (grid index, row), each durable in the journal as it finishes:
/// the whole grid with `--full-grid`, else cheapest first until the answer is known. The
/// second value counts the runs finished past the answer in its batch (not kept).
fn rate_rows(
    args: &PlanRequest,
    base: &Base,
    m: &Manifest,
    out: &OutDir,
    jobs: usize,
    rate: f64,
    early: bool,
) -> Result<(Vec<(usize, SweepRow)>, usize), CliError> {
    let grid = &m.grid;
    // Early-stopped rows differ from whole runs beyond the verdict: a resume must not mix them.
    let question = format!(
        "plan --rate {}{}",
        search::rate_value(rate),
        if early { "" } else { " --no-early-stop" }
    );
    // Rows are pure functions of the grid and their index, so the journal is the same whether
    // the grid is searched or run whole: a resumed plan may switch between the two.
    if args.full_grid {
        let all: Vec<usize> = (0..grid.rows()).collect();
        let rows = durable_rows(
            out,
            base,
            m,
            &all,
            jobs,
            args.resume,
            &question,
            early,
            args.quiet,
        )?;
        plan::all_infeasible(&rows)?;
        return Ok((all.into_iter().zip(rows).collect::<Vec<_>>(), 0));
    }
    let (journal, done) = open_journal(out, m, &[], args.resume, &question)?;
    // The search stops at its answer: the count runs against the grid's rows, its bound.
    let progress =
        super::progress::Progress::new("plan", "runs", grid.rows(), done.len(), args.quiet);
    let run_row = |i: usize| -> Result<SweepRow, plan::PlanError> {
        if let Some(r) = done.get(&i) {
            return Ok(r.clone());
        }
        let row = plan::run_row_until(base, grid, i, early)?;
        journal.record(i, &plan::sweep_csv(grid, &[(i, row.clone())])?)?;
        progress.inc();
        Ok(row)
    };
    let rows = search::cheapest_first(base, grid, jobs, &run_row);
    progress.finish();
    Ok(rows?)
}

/// The files written for the `--rate` answer's point, as `plan.json` names them (`None`
/// when no point meets `[slo]`).
#[derive(Default)]
struct BestFiles {
    best_toml: Option<String>,
    launch: Option<String>,
    kubernetes: Option<String>,
    slurm: Option<String>,
    /// `best.toml` read back: the deployment launched is the one simulated.
    planned: Option<Scenario>,
}

/// Writes the chosen point `b` into `stage`: `best.toml` (the user's file with the chosen
/// values set), and from it `launch.txt`, `k8s.yaml` and `slurm.sh`.
fn write_best(
    args: &PlanRequest,
    base: &Base,
    grid: &Grid,
    b: &PointVerdict,
    rate: f64,
    dir: &Path,
    stage: &Path,
) -> Result<BestFiles, CliError> {
    let mut sets = grid.fixed.clone();
    sets.extend(b.values.iter().map(|(k, v)| format!("{k}={v}")));
    let chosen: String = b
        .values
        .iter()
        .map(|(k, v)| format!("#   {k} = {v}\n"))
        .collect();
    let header = format!(
        "# Written by `pdsim plan --rate {rate}` from {}: the cheapest grid point ({} GPUs on {} nodes, {} billed)\n# that met [slo] on seeds {:?}. Chosen values:\n{chosen}# Relative paths are relative to this file.\n\n",
        args.scenario.path().display(),
        b.gpus.unwrap_or(0),
        b.nodes.unwrap_or(0),
        b.billed_gpus.unwrap_or(0),
        grid.seeds
    );
    let text = search::best_toml(base, &sets, dir, &header)?;
    write(stage, "best.toml", text.as_bytes())?;
    // The deployment of that point: what was simulated is what is launched.
    let sc = crate::scenario::from_str(&text, &dir.join("best.toml"), &[])?;
    let lines = crate::plan::launch::launch_text(&sc);
    write(stage, "launch.txt", lines.as_bytes())?;
    write(
        stage,
        "k8s.yaml",
        crate::plan::k8s::k8s_yaml(&sc).as_bytes(),
    )?;
    write(
        stage,
        "slurm.sh",
        crate::plan::slurm::slurm_script(&sc).as_bytes(),
    )?;
    Ok(BestFiles {
        best_toml: Some("best.toml".to_string()),
        launch: Some("launch.txt".to_string()),
        kubernetes: Some("k8s.yaml".to_string()),
        slurm: Some("slurm.sh".to_string()),
        planned: Some(sc),
    })
}

/// What "the rate" means under a rate profile (`workload.arrival.rate_profile`): the
/// process's `rate_per_s`, which the profile's factor multiplies over the run; `None` when the
/// rate does not move.
fn profile_note(w: &crate::config::Workload) -> Option<String> {
    use crate::config::{Arrival, Workload};
    let (Workload::Synthetic { arrival, .. } | Workload::Sessions { arrival, .. }) = w else {
        return None;
    };
    let Arrival::Profiled { profile, .. } = arrival else {
        return None;
    };
    Some(format!(
        "the rate is workload.arrival.rate_per_s, which the rate profile multiplies over the run (its largest factor {:.3}: the peak is that times the rate); the verdict is over the whole run",
        profile.max_factor()
    ))
}

/// The `--rate` answer in one line: the chosen point, its GPUs, nodes, idle GPUs (billed or
/// not under `billing`) and price, or that no point meets `[slo]`.
fn best_line(
    best: Option<&PointVerdict>,
    grid: &Grid,
    billing: crate::config::Billing,
    rate: f64,
) -> String {
    let Some(b) = best else {
        return format!("no grid point meets [slo] at {rate} req/s on every seed");
    };
    format!(
        "cheapest point meeting [slo] at {rate} req/s on {} seeds: {} — {} GPUs on {} node{}{}{}",
        grid.seeds.len(),
        b.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
        b.gpus.unwrap_or(0),
        b.nodes.unwrap_or(0),
        if b.nodes == Some(1) { "" } else { "s" },
        match (b.idle_gpus, billing) {
            (Some(0) | None, _) => String::new(),
            (Some(i), crate::config::Billing::Node) => {
                format!(" ({i} idle, billed: hardware.billing = \"node\")")
            }
            (Some(i), crate::config::Billing::Gpu) => format!(" ({i} idle, not billed)"),
        },
        b.usd_per_hour
            .map_or(String::new(), |c| format!(", ${c:.2}/hour"))
    )
}

/// What `pdsim plan --rate` prints: `head` (from [`best_line`]), then how much of the grid
/// was run to find it, how long it took (wall-clock s since `started`) and where the results
/// are.
fn rate_summary(
    args: &PlanRequest,
    answer: &PlanAnswer,
    head: &str,
    stopped: usize,
    past: usize,
    started: Instant,
    dir: &Path,
) -> String {
    format!(
        "plan: {head}\n  {} of {} points run meet it; {} runs of the grid's {} ({} of {} points{}{}){} in {:.1} s; results in {}\n",
        answer.points_meeting_slo,
        answer.points,
        answer.runs,
        answer.grid_runs,
        answer.points,
        answer.grid_points,
        if args.full_grid {
            ""
        } else {
            ", cheapest first"
        },
        if stopped > 0 {
            format!("; {stopped} runs stopped once [slo] was lost")
        } else {
            String::new()
        },
        if past > 0 {
            format!(" (+{past} past the answer in its batch, not kept)")
        } else {
            String::new()
        },
        started.elapsed().as_secs_f64(),
        dir.display()
    )
}

/// `pdsim plan --max-rate`: every point's highest rate meeting `[slo]` → `plan.csv` (in
/// `out`'s staging), each point durable as soon as its search ends.
#[allow(clippy::too_many_arguments)]
fn max_rate(
    args: &PlanRequest,
    base: &Base,
    m: &Manifest,
    sc: &Scenario,
    key: &str,
    jobs: usize,
    out: &OutDir,
    started: Instant,
) -> Result<String, CliError> {
    let grid = &m.grid;
    if !(args.tolerance >= search::MIN_RATE_TOLERANCE && args.tolerance < 1.0) {
        return Err(CliError::flag(
            "--tolerance",
            format!(
                "--tolerance {}: must be in [{}, 1), e.g. 0.02 (adjacent rates of the search differ by 1 + tolerance)",
                args.tolerance,
                search::MIN_RATE_TOLERANCE
            ),
        ));
    }
    let start = crate::scenario::resolved_file(sc)
        .workload
        .rate_per_s()
        .unwrap_or(1.0)
        .min(MAX_PLAN_RATE);
    let s = RateSearch {
        start,
        rel_tol: args.tolerance,
        max_steps: 64,
        early_stop: !args.no_early_stop,
    };
    let question = format!(
        "plan --max-rate from {} to {:?}{}",
        search::rate_value(start),
        args.tolerance,
        if s.early_stop { "" } else { " --no-early-stop" }
    );
    let identity = serde_json::to_string_pretty(&(m, &question)).expect("a manifest serializes");
    let (journal, continued) = Journal::open(out.staging(), &identity, args.resume)?;
    let done = if continued {
        searched_points(&journal, out, grid)?
    } else {
        BTreeMap::new()
    };
    super::signals::on_interrupt(&format!(
        "pdsim: interrupted; the points searched are kept in {}. Continue with:\n  {}",
        out.dir().display(),
        super::signals::resume_line()
    ));
    let progress =
        super::progress::Progress::new("plan", "points", grid.points(), done.len(), args.quiet);
    let record = |p: usize, r: &MaxRateRow| -> Result<(), plan::PlanError> {
        journal.record(p, &search::plan_csv(grid, &[(p, r.clone())])?)?;
        progress.inc();
        Ok(())
    };
    let rows = search::max_rates(base, grid, key, s, jobs, &done, &record);
    progress.finish();
    let rows = rows?;
    let indexed: Vec<(usize, MaxRateRow)> = rows.iter().cloned().enumerate().collect();
    write(
        out.staging(),
        "plan.csv",
        &search::plan_csv(grid, &indexed)?,
    )
    .map_err(|e| out.rename_error(e))?;
    let answer = search::MaxRatePlan {
        grounding: Some(search::Grounding::of(sc, None)),
        ..search::MaxRatePlan::new(
            args.scenario.path().display().to_string(),
            grid,
            sc.slo,
            s,
            &rows,
        )
    };
    let json = serde_json::to_string_pretty(&answer).expect("a plan serializes") + "\n";
    write(out.staging(), "plan.json", json.as_bytes()).map_err(|e| out.rename_error(e))?;
    let mut text = format!(
        "plan --max-rate: {} points × {} seeds: {} runs ({} stopped once [slo] was lost; a rung-by-rung scan takes {}) in {:.1} s; results in {}\n",
        grid.points(),
        grid.seeds.len(),
        answer.runs,
        answer.runs_stopped_early,
        answer.ladder_runs,
        started.elapsed().as_secs_f64(),
        out.dir().display()
    );
    for (p, r) in rows.iter().enumerate() {
        text += &point_line(grid, &answer, &s, p, r);
    }
    if let Some(g) = &answer.grounding {
        text += &format!("{}\n", g.note);
    }
    Ok(text)
}

/// The points a resumed `--max-rate` plan already searched, read back from `journal`: a
/// damaged or foreign point file is noted and its point searched again.
fn searched_points(
    journal: &Journal,
    out: &OutDir,
    grid: &Grid,
) -> Result<BTreeMap<usize, MaxRateRow>, CliError> {
    let mut done = BTreeMap::new();
    let (good, bad) = journal.recorded()?;
    for (p, bytes) in good {
        let name = out
            .staging()
            .join(plan::journal::POINTS)
            .join(p.to_string());
        match search::parse_plan_csv(&name, &bytes, grid.columns().len()) {
            Ok(mut r)
                if r.len() == 1
                    && p < grid.points()
                    && r[0].0.iter().eq(grid.assignments(p).iter().map(|(_, v)| v)) =>
            {
                done.insert(p, r.remove(0).1);
            }
            _ => note(&format!(
                "a damaged point file: point {p} is searched again"
            )),
        }
    }
    for p in bad {
        note(&format!(
            "{}: damaged (checksum); that point is searched again",
            p.display()
        ));
    }
    note(&format!(
        "resuming {}: {} of {} points already searched",
        out.dir().display(),
        done.len(),
        grid.points()
    ));
    Ok(done)
}

/// One `--max-rate` point as printed: its values, its placement, its highest rate meeting
/// `[slo]` (or why there is none, or that it is a lower bound), its runs, and a mark on the
/// point with the most req/s per billed GPU.
fn point_line(
    grid: &Grid,
    answer: &search::MaxRatePlan,
    s: &RateSearch,
    p: usize,
    r: &MaxRateRow,
) -> String {
    let vals: Vec<String> = grid
        .assignments(p)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let rate = match (r.max_rate_per_s, r.max_rate_is_lower_bound) {
        _ if r.error.is_some() => format!(
            "not a valid scenario: {}",
            r.error.as_deref().unwrap_or_default()
        ),
        (None, _) => format!(
            "misses [slo] even at {} req/s, the ladder's lowest rate",
            search::rate_value(answer.lowest_rate_per_s)
        ),
        (Some(v), true) => format!(
            "≥ {v:.2} req/s (a lower bound: no failing rate found up to {v:.2} req/s; the search stops at {MAX_PLAN_RATE:e} req/s or {} rates)",
            s.max_steps
        ),
        (Some(v), false) => format!(
            "{v:.2} req/s (misses at {:.2})",
            r.fails_at_rate_per_s.unwrap_or(f64::NAN)
        ),
    };
    let place = match (r.gpus, r.nodes) {
        (Some(g), Some(n)) => format!(
            "{g} GPUs on {n} node{}{}",
            if n == 1 { "" } else { "s" },
            match r.idle_gpus {
                Some(0) | None => String::new(),
                Some(i) => format!(" ({i} idle)"),
            }
        ),
        _ => "—".to_string(),
    };
    let mark = match (answer.most_rate == Some(p), answer.most_per_gpu == Some(p)) {
        (true, true) => "  ← the highest rate, and the most req/s per billed GPU",
        (true, false) => "  ← the highest rate",
        (false, true) => "  ← most req/s per billed GPU",
        (false, false) => "",
    };
    format!(
        "  {} — {place}: {rate}, {} runs{mark}\n",
        vals.join(" "),
        r.runs
    )
}
