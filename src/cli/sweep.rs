//! `pdsim sweep SCENARIO.toml --vary KEY=V1,V2,... [--seeds N] [--jobs N] [--shard I/N] [--out DIR]`

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;

use super::CliError;
use crate::plan::{self, Base, Grid, Manifest, Shard, SweepRow};

/// Arguments of `pdsim sweep`.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// The scenario file (TOML).
    pub scenario: PathBuf,
    /// A grid axis: a dotted scenario key and its values, e.g.
    /// `pools.decode.instances=1,2,4` (values are TOML; inline tables may contain commas).
    #[arg(long = "vary", value_name = "KEY=V1,V2,...")]
    pub vary: Vec<String>,
    /// Seeds per point: `run.seed`, `run.seed + 1`, ….
    #[arg(long, default_value_t = 1)]
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Run only the I-th of N interleaved slices of the rows (0-based); join with `pdsim merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Output folder (default `results/<run.name>-sweep/`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point, e.g. `run.duration_s=60`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The jobs to use: `--jobs`, else the machine's cores.
pub fn jobs_of(jobs: Option<usize>) -> Result<usize, CliError> {
    match jobs {
        Some(0) => Err(CliError::Usage("--jobs must be at least 1".into())),
        Some(j) => Ok(j),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// The grid of `--vary` × `--seeds`, seeds counted from the scenario's `run.seed` (after
/// `--set`); `fixed` are applied to every point first.
pub fn grid_of(
    base: &Base,
    vary: &[String],
    seeds: u32,
    fixed: Vec<String>,
) -> Result<(Grid, crate::scenario::Scenario), CliError> {
    let axes = vary
        .iter()
        .map(|v| plan::parse_axis(v))
        .collect::<Result<Vec<_>, _>>()?;
    let sc = base.with(&fixed)?;
    let seeds: Vec<u64> = (0..u64::from(seeds))
        .map(|k| sc.seed.wrapping_add(k))
        .collect();
    Ok((Grid::new(axes, seeds, fixed)?, sc))
}

/// The result files a sweep folder may hold; a new sweep removes them first so a failed one
/// never leaves an older sweep's files looking current.
pub const SWEEP_FILES: [&str; 6] = [
    "sweep.csv",
    "sweep.json",
    "index.html",
    "plan.json",
    "plan.csv",
    "best.toml",
];

/// Creates `dir` and removes the result files of an earlier sweep in it.
pub fn fresh_dir(dir: &Path) -> Result<(), CliError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for f in SWEEP_FILES {
        let p = dir.join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p, e)),
        }
    }
    Ok(())
}

/// An I/O error on `path`.
pub fn io(path: &Path, source: std::io::Error) -> CliError {
    CliError::Io(crate::report::IoError {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `dir/name`.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), CliError> {
    let p = dir.join(name);
    std::fs::write(&p, bytes).map_err(|e| io(&p, e))
}

/// Writes a whole sweep's (or a shard's) files: `sweep.csv`, `sweep.json` and, for a whole
/// sweep, `index.html`.
pub fn write_sweep(dir: &Path, m: &Manifest, rows: &[(usize, SweepRow)]) -> Result<(), CliError> {
    write(dir, "sweep.csv", &plan::sweep_csv(&m.grid, rows)?)?;
    let json = serde_json::to_string_pretty(m).expect("a manifest serializes") + "\n";
    write(dir, "sweep.json", json.as_bytes())?;
    if m.shard.is_none() {
        let only: Vec<SweepRow> = rows.iter().map(|r| r.1.clone()).collect();
        let title = format!("pdsim sweep: {}", m.scenario);
        write(
            dir,
            "index.html",
            plan::report::index_html(m, &only, &title).as_bytes(),
        )?;
    }
    Ok(())
}

/// Runs `pdsim sweep`.
pub fn run(args: &SweepArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let base = Base::load(&args.scenario)?;
    let (grid, sc) = grid_of(&base, &args.vary, args.seeds, args.sets.clone())?;
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let jobs = jobs_of(args.jobs)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&format!("{}-sweep", sc.name)));
    fresh_dir(&dir)?;
    let which: Vec<usize> = match shard {
        Some(s) => s.rows(grid.rows()).collect(),
        None => (0..grid.rows()).collect(),
    };
    let rows = plan::run_rows(&base, &grid, &which, jobs)?;
    let m = Manifest {
        scenario: args.scenario.display().to_string(),
        scenario_fnv: plan::fnv(base.text.as_bytes()),
        rows: grid.rows(),
        grid,
        shard,
        slo: sc.slo,
    };
    let indexed: Vec<(usize, SweepRow)> = which.into_iter().zip(rows).collect();
    write_sweep(&dir, &m, &indexed)?;
    if !args.quiet {
        let infeasible = indexed.iter().filter(|r| r.1.error.is_some()).count();
        super::print_out(&format!(
            "sweep: {} rows ({} points × {} seeds{}){} in {:.1} s on {jobs} job(s); results in {}\n",
            indexed.len(),
            m.grid.points(),
            m.grid.seeds.len(),
            shard.map_or(String::new(), |s| format!(
                ", shard {}/{}",
                s.index, s.count
            )),
            if infeasible > 0 {
                format!(", {infeasible} infeasible (see the error column)")
            } else {
                String::new()
            },
            started.elapsed().as_secs_f64(),
            dir.display()
        ))?;
    }
    Ok(())
}
