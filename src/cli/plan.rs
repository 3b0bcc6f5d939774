//! `pdsim plan SCENARIO.toml (--rate R | --max-rate) --vary ... [--seeds N] [--jobs N] [--out DIR]`

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;

use super::CliError;
use super::sweep::{fresh_dir, grid_of, jobs_of, write, write_sweep};
use crate::plan::search::{self, PlanAnswer, RateSearch};
use crate::plan::{self, Base, Manifest, SweepRow};

/// Arguments of `pdsim plan`.
#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// The scenario file (TOML); its `[slo]` is the target.
    pub scenario: PathBuf,
    /// The arrival rate to plan for, requests/s: finds the cheapest grid point (fewest GPUs,
    /// then nodes) that meets `[slo]` on every seed.
    #[arg(
        long,
        conflicts_with = "max_rate",
        required_unless_present = "max_rate"
    )]
    pub rate: Option<f64>,
    /// Instead: every grid point's highest rate that meets `[slo]` on every seed (bisection).
    #[arg(long)]
    pub max_rate: bool,
    /// A grid axis, as for `pdsim sweep`.
    #[arg(long = "vary", value_name = "KEY=V1,V2,...")]
    pub vary: Vec<String>,
    /// Seeds per point.
    #[arg(long, default_value_t = 3)]
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Output folder (default `results/<run.name>-plan/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// `--max-rate`: stop bisecting when the bracket is this narrow (relative).
    #[arg(long, default_value_t = 0.02)]
    pub tolerance: f64,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Runs `pdsim plan`.
pub fn run(args: &PlanArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let base = Base::load(&args.scenario)?;
    let key = search::rate_key(&base)?;
    let mut fixed = args.sets.clone();
    if let Some(r) = args.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err(CliError::Usage(format!(
                "--rate {r}: must be a positive number of requests per second"
            )));
        }
        fixed.push(format!("{key}={r}"));
    }
    let (grid, sc) = grid_of(&base, &args.vary, args.seeds, fixed)?;
    if !sc.slo.any() {
        return Err(CliError::Usage(format!(
            "{}: [slo] sets no target to plan for; add e.g. ttft_p99_ms = 2000 and tpot_p99_ms = 100 (or attainment_min with ttft_ms/tpot_ms)",
            args.scenario.display()
        )));
    }
    let jobs = jobs_of(args.jobs)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&format!("{}-plan", sc.name)));
    fresh_dir(&dir)?;
    if args.max_rate {
        return max_rate(args, &base, &grid, &sc, key, jobs, &dir, started);
    }
    let rate = args.rate.expect("clap requires --rate without --max-rate");
    let all: Vec<usize> = (0..grid.rows()).collect();
    let rows = plan::run_rows(&base, &grid, &all, jobs)?;
    let m = Manifest {
        scenario: args.scenario.display().to_string(),
        scenario_fnv: plan::fnv(base.text.as_bytes()),
        rows: grid.rows(),
        grid: grid.clone(),
        shard: None,
        slo: sc.slo,
    };
    let indexed: Vec<(usize, SweepRow)> = all.into_iter().zip(rows.iter().cloned()).collect();
    write_sweep(&dir, &m, &indexed)?;
    let vs = search::verdicts(&grid, &rows);
    let best = search::cheapest(&vs).cloned();
    let mut best_toml = None;
    let mut launch = None;
    if let Some(b) = &best {
        let mut sets = grid.fixed.clone();
        sets.extend(b.values.iter().map(|(k, v)| format!("{k}={v}")));
        let chosen: String = b
            .values
            .iter()
            .map(|(k, v)| format!("#   {k} = {v}\n"))
            .collect();
        let header = format!(
            "# Written by `pdsim plan --rate {rate}` from {}: the cheapest grid point ({} GPUs on {} nodes)\n# that met [slo] on seeds {:?}. Chosen values:\n{chosen}# Relative paths are relative to this file.\n\n",
            args.scenario.display(),
            b.gpus.unwrap_or(0),
            b.nodes.unwrap_or(0),
            grid.seeds
        );
        let text = search::best_toml(&base, &sets, &dir, &header)?;
        write(&dir, "best.toml", text.as_bytes())?;
        best_toml = Some("best.toml".to_string());
        // The deployment of that point: what was simulated is what is launched.
        let planned = crate::scenario::from_str(&text, &dir.join("best.toml"), &[])?;
        let lines = crate::plan::launch::launch_text(&planned);
        write(&dir, "launch.txt", lines.as_bytes())?;
        launch = Some("launch.txt".to_string());
    }
    let answer = PlanAnswer {
        scenario: args.scenario.display().to_string(),
        rate_per_s: rate,
        seeds: grid.seeds.clone(),
        slo: sc.slo,
        points: vs.len(),
        points_meeting_slo: vs.iter().filter(|v| v.meets_slo).count(),
        best: best.clone(),
        best_toml,
        launch,
    };
    let json = serde_json::to_string_pretty(&answer).expect("a plan serializes") + "\n";
    write(&dir, "plan.json", json.as_bytes())?;
    if !args.quiet {
        let head = match &best {
            Some(b) => format!(
                "cheapest point meeting [slo] at {rate} req/s on {} seeds: {} — {} GPUs on {} nodes{}",
                grid.seeds.len(),
                b.values
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                b.gpus.unwrap_or(0),
                b.nodes.unwrap_or(0),
                b.seeds[0]
                    .usd_per_hour
                    .map_or(String::new(), |c| format!(", ${c:.2}/hour"))
            ),
            None => format!("no grid point meets [slo] at {rate} req/s on every seed"),
        };
        super::print_out(&format!(
            "plan: {head}\n  {} of {} points meet it; {} runs in {:.1} s; results in {}\n",
            answer.points_meeting_slo,
            answer.points,
            grid.rows(),
            started.elapsed().as_secs_f64(),
            dir.display()
        ))?;
    }
    Ok(())
}

/// `pdsim plan --max-rate`: every point's highest rate meeting `[slo]` → `plan.csv`.
#[allow(clippy::too_many_arguments)]
fn max_rate(
    args: &PlanArgs,
    base: &Base,
    grid: &crate::plan::Grid,
    sc: &crate::scenario::Scenario,
    key: &str,
    jobs: usize,
    dir: &std::path::Path,
    started: Instant,
) -> Result<(), CliError> {
    if !(args.tolerance > 0.0 && args.tolerance < 1.0) {
        return Err(CliError::Usage(format!(
            "--tolerance {}: must be in (0, 1), e.g. 0.02",
            args.tolerance
        )));
    }
    let start = sc
        .resolved
        .get("workload")
        .and_then(|w| w.get("arrival").or_else(|| w.get("trace")))
        .and_then(|a| a.get("rate_per_s"))
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(1.0);
    let s = RateSearch {
        start,
        rel_tol: args.tolerance,
        max_steps: 24,
    };
    let rows = search::max_rates(base, grid, key, s, jobs)?;
    write(dir, "plan.csv", &search::plan_csv(grid, &rows)?)?;
    if !args.quiet {
        let mut out = format!(
            "plan --max-rate: {} points × {} seeds in {:.1} s; results in {}\n",
            grid.points(),
            grid.seeds.len(),
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        for (p, r) in rows.iter().enumerate() {
            let vals = grid.values_of(p).join(", ");
            let rate = r
                .max_rate_per_s
                .map_or("below the lowest rate tried".into(), |v| {
                    format!("{v:.2} req/s")
                });
            out += &format!("  [{vals}] {} GPUs: {rate}\n", r.gpus.unwrap_or(0));
        }
        super::print_out(&out)?;
    }
    Ok(())
}
