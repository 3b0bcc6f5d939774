//! `pdsim sweep SCENARIO.toml --vary KEY=V1,V2,... [--seeds N] [--jobs N] [--shard I/N] [--out DIR]`

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::CliError;
use super::outdir::OutDir;
use super::signals;
use crate::plan::journal::Journal;
use crate::plan::{self, Base, Grid, Manifest, Shard, SweepRow};

/// What `pdsim sweep` is asked: the command line's flags (`cli::sweep`) or a program's call
/// (`crate::api`).
#[derive(Debug, Clone)]
pub struct SweepRequest {
    /// The scenario: a file, or a program's TOML text.
    pub scenario: super::Source,
    /// A grid axis: a dotted scenario key and its values, e.g.
    /// `pools.decode.instances=1,2,4` (values are TOML; inline tables may contain commas).
    pub vary: Vec<String>,
    /// Seeds per point: `run.seed`, `run.seed + 1`, ….
    pub seeds: u32,
    /// Points run in parallel (default: the machine's cores). Results do not depend on it.
    pub jobs: Option<usize>,
    /// Run only the I-th of N interleaved slices of the rows (0-based); join with `pdsim merge`.
    pub shard: Option<String>,
    /// Output folder (default `results/<run.name>-sweep/`).
    pub out: Option<PathBuf>,
    /// Overrides a scenario key for every point, e.g. `run.duration_s=60`.
    pub sets: Vec<String>,
    /// Print nothing on success.
    pub quiet: bool,
    /// Continue an interrupted sweep in `--out` (same arguments): its finished points are kept
    /// and the result is byte-identical to an uninterrupted run.
    pub resume: bool,
}

/// The jobs to use: `--jobs`, else the machine's cores.
pub fn jobs_of(jobs: Option<usize>) -> Result<usize, CliError> {
    match jobs {
        Some(0) => Err(CliError::flag("--jobs", "--jobs must be at least 1".into())),
        Some(j) if j > crate::vocab::limits::MAX_JOBS => Err(CliError::flag(
            "--jobs",
            format!(
                "--jobs {j}: at most {} worker threads (this machine has {} cores; more jobs than cores only wait)",
                crate::vocab::limits::MAX_JOBS,
                std::thread::available_parallelism().map_or(1, |n| n.get())
            ),
        )),
        Some(j) => Ok(j),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// `key` with a pool's index replaced by its name (`pools.1.x` → `pools.decode.x`), so that
/// two spellings of one key are one axis.
pub fn canonical_key(table: &toml::Table, key: &str) -> String {
    let mut parts: Vec<String> = key.split('.').map(|p| p.trim().to_string()).collect();
    if parts.len() > 1
        && parts[0] == "pools"
        && let Ok(i) = parts[1].parse::<usize>()
    {
        let name = table
            .get("pools")
            .and_then(toml::Value::as_array)
            .and_then(|a| a.get(i))
            .and_then(|p| p.get("name"))
            .and_then(toml::Value::as_str);
        if let Some(n) = name {
            parts[1] = n.to_string();
        }
    }
    parts.join(".")
}

/// Whether setting one key can change the other: equal, or one a table holding the other.
fn overlaps(a: &str, b: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.split('.').collect(), b.split('.').collect());
    a.iter().zip(&b).all(|(x, y)| x == y)
}

/// The grid of `--vary` × `--seeds`, seeds counted from the scenario's `run.seed` (after
/// `--set`); `fixed` are applied to every point first. Each key has one resolved name: two
/// axes (or an axis and a `fixed` key) that name one key, or a table and a key inside it, are
/// exit 2 — the later one would silently replace the other. `rate_key` is the key `--rate`
/// fixes or `--max-rate` (`max_rate`) searches: no axis may set it.
pub fn grid_of(
    base: &Base,
    vary: &[String],
    seeds: u32,
    fixed: Vec<String>,
    rate_key: Option<&str>,
    max_rate: bool,
) -> Result<(Grid, crate::scenario::Scenario), CliError> {
    if seeds == 0 || seeds as usize > plan::MAX_GRID_ROWS {
        return Err(CliError::flag(
            "--seeds",
            format!(
                "--seeds {seeds}: give 1 to {} seeds per point",
                plan::MAX_GRID_ROWS
            ),
        ));
    }
    if vary.len() > plan::MAX_AXES {
        return Err(CliError::flag(
            "--vary",
            format!(
                "{} --vary axes: at most {} are supported",
                vary.len(),
                plan::MAX_AXES
            ),
        ));
    }
    let axes = vary
        .iter()
        .map(|v| plan::parse_axis(v))
        .collect::<Result<Vec<_>, _>>()?;
    let table: toml::Table = crate::scenario::parse_table(&base.text).unwrap_or_default();
    // Every key an axis sets, a linked axis's each on its own, with its canonical form.
    let keys: Vec<(&str, String)> = axes
        .iter()
        .flat_map(|a| a.keys())
        .map(|k| (k, canonical_key(&table, k)))
        .collect();
    for (i, (key, canon)) in keys.iter().enumerate() {
        if let Some(rk) = rate_key.filter(|rk| overlaps(canon, rk)) {
            let flags: &'static [&'static str] = if max_rate {
                &["--vary", "--max-rate"]
            } else {
                &["--vary", "--rate"]
            };
            return Err(CliError::Conflict {
                flags,
                message: if max_rate {
                    format!(
                        "--vary {key}: --max-rate searches {rk} itself, from the scenario's rate (set the start with --set {rk}=R); drop this --vary",
                    )
                } else {
                    format!(
                        "--vary {key}: --rate fixes {rk} for every point, so the plan would answer for rates it was not asked about; drop this --vary, or use --max-rate to find each point's highest rate",
                    )
                },
            });
        }
        for (other, oc) in &keys[..i] {
            if overlaps(canon, oc) {
                return Err(CliError::flag(
                    "--vary",
                    format!(
                        "--vary {other} and --vary {key} name the same setting{}; vary it in one --vary",
                        if canon == oc {
                            format!(" ({canon})")
                        } else {
                            " (one is a table holding the other)".to_string()
                        }
                    ),
                ));
            }
        }
        for f in &fixed {
            let fkey = f.split_once('=').map_or(f.as_str(), |(k, _)| k);
            let fk = canonical_key(&table, fkey);
            if rate_key != Some(fk.as_str()) && overlaps(canon, &fk) {
                return Err(CliError::Conflict {
                    flags: &["--vary", "--set"],
                    message: format!(
                        "--vary {key} and --set {fkey} name the same setting; --set fixes it for every point, --vary changes it per point: give one",
                    ),
                });
            }
        }
    }
    let sc = base.with(&fixed)?;
    if sc.seed.checked_add(u64::from(seeds) - 1).is_none() {
        return Err(CliError::flag(
            "--seeds",
            format!(
                "--seeds {seeds}: seeds run.seed ({}) to run.seed + {} pass the largest seed, {}; use a smaller run.seed or fewer seeds",
                sc.seed,
                seeds - 1,
                u64::MAX
            ),
        ));
    }
    let seeds: Vec<u64> = (0..u64::from(seeds)).map(|k| sc.seed + k).collect();
    Ok((Grid::new(axes, seeds, fixed)?, sc))
}

/// The result files a sweep folder may hold; a new sweep removes them first so a failed one
/// never leaves an older sweep's files looking current (`scenario.toml` too: a one-line plan
/// writes it, and a later plan into the same folder must not leave it beside other answers).
pub const SWEEP_FILES: [&str; 10] = [
    "sweep.csv",
    "sweep.json",
    "index.html",
    "plan.json",
    "plan.csv",
    "best.toml",
    "launch.txt",
    "k8s.yaml",
    "slurm.sh",
    "scenario.toml",
];

/// [`SWEEP_FILES`] less `scenario.toml` when it is the very file the verb reads (`scenario`):
/// planning a one-line plan's `DIR/scenario.toml` into `DIR` again must not remove its input.
pub fn sweep_files(dir: &Path, scenario: &Path) -> Vec<&'static str> {
    let same = |a: &Path, b: &Path| {
        let full = |p: &Path| {
            std::fs::canonicalize(p)
                .or_else(|_| std::path::absolute(p))
                .unwrap_or_else(|_| p.to_path_buf())
        };
        full(a) == full(b)
    };
    let own = same(&dir.join("scenario.toml"), scenario);
    SWEEP_FILES
        .iter()
        .copied()
        .filter(|f| !(own && *f == "scenario.toml"))
        .collect()
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
/// sweep, `index.html` — a plan's report when `plan` gives the plan's answer.
pub fn write_sweep(
    dir: &Path,
    m: &Manifest,
    rows: &[(usize, SweepRow)],
    plan: Option<&plan::report::PlanContext>,
) -> Result<(), CliError> {
    write(dir, "sweep.csv", &plan::sweep_csv(&m.grid, rows)?)?;
    let json = serde_json::to_string_pretty(m).expect("a manifest serializes") + "\n";
    write(dir, "sweep.json", json.as_bytes())?;
    if m.shard.is_none() {
        write(
            dir,
            "index.html",
            plan::report::index_html(m, rows, plan).as_bytes(),
        )?;
    }
    Ok(())
}

/// Runs rows `which` of `m`'s grid into `out`'s staging, each finished row durable at once
/// (`plan::journal`); with `resume`, rows an interrupted run finished are read back (checked
/// against the grid) instead of run again. `question` names what else the result depends on
/// (a plan's rate) so a resumed run answers the same question. SIGINT/SIGTERM print the
/// resume line and exit. `early_stop`: a plan's runs stop once `[slo]` is lost
/// (`plan::run_row_until`; say so in `question`, the rows differ).
#[allow(clippy::too_many_arguments)]
pub fn durable_rows(
    out: &OutDir,
    base: &Base,
    m: &Manifest,
    which: &[usize],
    jobs: usize,
    resume: bool,
    question: &str,
    early_stop: bool,
    quiet: bool,
) -> Result<Vec<SweepRow>, CliError> {
    let (journal, done) = open_journal(out, m, which, resume, question)?;
    let verb = question.split_whitespace().next().unwrap_or("sweep");
    let progress = super::progress::Progress::new(verb, "rows", which.len(), done.len(), quiet);
    let record = |i: usize, row: &SweepRow| -> Result<(), plan::PlanError> {
        journal.record(i, &plan::sweep_csv(&m.grid, &[(i, row.clone())])?)?;
        progress.inc();
        Ok(())
    };
    let rows = plan::run_rows_durable(base, &m.grid, which, jobs, early_stop, &done, &record);
    progress.finish();
    Ok(rows?)
}

/// The journal of `out` (see [`durable_rows`]) and, with `resume`, the rows an interrupted run
/// finished among `which` (any row of the grid when `which` is empty: a plan's search does
/// not know beforehand which rows it runs). Installs the SIGINT/SIGTERM resume line.
pub fn open_journal(
    out: &OutDir,
    m: &Manifest,
    which: &[usize],
    resume: bool,
    question: &str,
) -> Result<(Journal, std::collections::BTreeMap<usize, SweepRow>), CliError> {
    let identity = serde_json::to_string_pretty(&(m, question)).expect("a manifest serializes");
    let (journal, continued) = Journal::open(out.staging(), &identity, resume)?;
    let mut done = std::collections::BTreeMap::new();
    if continued {
        let (good, bad) = journal.recorded()?;
        for (i, bytes) in good {
            let name = out
                .staging()
                .join(plan::journal::POINTS)
                .join(format!("{i}"));
            let rows = plan::parse_sweep_csv(&name, &bytes, m.grid.columns().len());
            let fits = |r: &Vec<(Vec<String>, SweepRow)>| {
                r.len() == 1
                    && i < m.grid.rows()
                    && (which.is_empty() || which.binary_search(&i).is_ok())
                    && plan::verify_rows(&name, &m.grid, &[i], r).is_ok()
            };
            match rows {
                Ok(mut r) if fits(&r) => {
                    done.insert(i, r.remove(0).1);
                }
                _ => note(&format!(
                    "a damaged point file in {}: point {i} runs again",
                    out.dir().display()
                )),
            }
        }
        for p in bad {
            note(&format!(
                "{}: damaged (checksum); that point runs again",
                p.display()
            ));
        }
        note(&format!(
            "resuming {}: {} of {} rows already finished",
            out.dir().display(),
            done.len(),
            if which.is_empty() {
                m.grid.rows()
            } else {
                which.len()
            }
        ));
    }
    signals::on_interrupt(&format!(
        "pdsim: interrupted; the finished points are kept in {}. Continue with:\n  {}",
        out.dir().display(),
        signals::resume_line()
    ));
    Ok((journal, done))
}

/// A note on stderr (a closed stderr is no reason to fail).
pub fn note(s: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "pdsim: {s}");
}

/// Runs `pdsim sweep`.
pub fn run(args: &SweepRequest) -> Result<(), CliError> {
    let started = Instant::now();
    run_base(args, args.scenario.base()?, started)
}

/// [`run`] of a scenario already read (`crate::api` gives a program's TOML text as a [`Base`]).
pub fn run_base(args: &SweepRequest, base: Base, started: Instant) -> Result<(), CliError> {
    let (grid, sc) = grid_of(
        &base,
        &args.vary,
        args.seeds,
        args.sets.clone(),
        None,
        false,
    )?;
    // Warnings print under -q too (stderr): they change what the results mean (a
    // calibration measured elsewhere extrapolates every step time), and -q only quiets
    // progress and the summary (issue 40).
    for n in &sc.notes {
        note(&format!("warning: {n}"));
    }
    let shard = args.shard.as_deref().map(Shard::parse).transpose()?;
    let jobs = jobs_of(args.jobs)?;
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&format!("{}-sweep", sc.name)));
    let which: Vec<usize> = match shard {
        Some(s) => s.rows(grid.rows()).collect(),
        None => (0..grid.rows()).collect(),
    };
    let m = Manifest::new(&base, &sc, grid, shard)?;
    let files = sweep_files(&dir, args.scenario.path());
    let mut out = OutDir::open(&dir, "sweep", &files, args.resume)?;
    out.keep_staging_on_failure();
    let rows = durable_rows(
        &out,
        &base,
        &m,
        &which,
        jobs,
        args.resume,
        "sweep",
        false,
        args.quiet,
    )?;
    if shard.is_none() {
        plan::all_infeasible(&rows)?;
    }
    let indexed: Vec<(usize, SweepRow)> = which.into_iter().zip(rows).collect();
    write_sweep(out.staging(), &m, &indexed, None).map_err(|e| out.rename_error(e))?;
    out.install(&["sweep.json"])?;
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
