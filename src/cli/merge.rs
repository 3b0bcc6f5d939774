//! `pdsim merge DIR... --out DIR`: joins the shards of a sweep into the sweep itself, byte for
//! byte what one unsharded `pdsim sweep` writes — after checking that every shard is complete,
//! belongs to the same sweep (scenario text, every file it reads, grid, seeds, `[slo]`), and
//! that every row sits where the grid puts it.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::app::outdir::{OutDir, check_complete};
use crate::app::sweep::{SWEEP_FILES, write_sweep};
use crate::plan::{self, Manifest, SweepRow};

/// Arguments of `pdsim merge`.
#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shards' output folders (each written by `pdsim sweep --shard I/N`), in any order.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// Where the merged sweep goes.
    #[arg(long)]
    pub out: PathBuf,
    /// Print nothing on success.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The same folder, however it is spelt.
fn same_dir(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// One shard folder, read and checked on its own.
struct Shard {
    manifest: Manifest,
    /// Its rows, in its own order (every `count`-th row of the sweep).
    rows: Vec<SweepRow>,
    dir: PathBuf,
}

/// Runs `pdsim merge`.
pub fn run(args: &MergeArgs) -> Result<(), CliError> {
    if let Some(d) = args.dirs.iter().find(|d| same_dir(d, &args.out)) {
        return Err(CliError::flag(
            "--out",
            format!(
                "--out {}: is one of the shards given ({}); merge into another folder",
                args.out.display(),
                d.display()
            ),
        ));
    }
    let shards = args
        .dirs
        .iter()
        .map(|d| read_shard(d))
        .collect::<Result<Vec<_>, _>>()?;
    let by_index = order_shards(&shards)?;
    let first = shards[0].manifest.clone();
    let n = by_index.len();
    let merged = interleave(&shards, &by_index, first.rows);
    let only: Vec<SweepRow> = merged.iter().map(|r| r.1.clone()).collect();
    // The unsharded sweep would have stopped here; so does its merge.
    plan::all_infeasible(&only)?;
    let m = Manifest {
        shard: None,
        ..first
    };
    let out = OutDir::open(&args.out, "merge", &SWEEP_FILES, false)?;
    write_sweep(out.staging(), &m, &merged, None).map_err(|e| out.rename_error(e))?;
    out.install(&["sweep.json"])?;
    if !args.quiet {
        super::print_out(&format!(
            "merge: {n} shards, {} rows; results in {}\n",
            merged.len(),
            args.out.display()
        ))?;
    }
    Ok(())
}

/// Reads shard folder `d`: it must be finished, hold a shard's `sweep.json`, and its
/// `sweep.csv` must hold exactly the rows the grid gives that shard, each where the grid puts it.
fn read_shard(d: &std::path::Path) -> Result<Shard, CliError> {
    check_complete(
        d,
        "finish that shard first (`pdsim sweep ... --shard I/N --resume` continues it)",
    )?;
    let mp = d.join("sweep.json");
    if !mp.is_file() {
        return Err(CliError::input(
            d,
            format!(
                "{}: no sweep.json; give the folders `pdsim sweep --shard I/N --out DIR` wrote",
                d.display()
            ),
        ));
    }
    let m = Manifest::read(&mp)?;
    let Some(s) = m.shard else {
        return Err(CliError::input(
            d,
            format!(
                "{}: a whole sweep, not a shard; merge joins the folders of `pdsim sweep --shard I/N`",
                d.display()
            ),
        ));
    };
    let csv = d.join("sweep.csv");
    let rows = plan::read_sweep_csv(&csv, m.grid.columns().len())?;
    let want: Vec<usize> = s.rows(m.rows).collect();
    if rows.len() != want.len() {
        return Err(CliError::input(
            &csv,
            format!(
                "{}: shard {}/{} should hold {} rows, it has {} (an unfinished or cut shard?)",
                csv.display(),
                s.index,
                s.count,
                want.len(),
                rows.len()
            ),
        ));
    }
    plan::verify_rows(&csv, &m.grid, &want, &rows)?;
    Ok(Shard {
        manifest: m,
        rows: rows.into_iter().map(|r| r.1).collect(),
        dir: d.to_path_buf(),
    })
}

/// Checks that the shards are all the shards of one sweep, each once, and returns, for each
/// shard index, the position of its folder in `shards`.
fn order_shards(shards: &[Shard]) -> Result<Vec<usize>, CliError> {
    let first = &shards[0].manifest;
    let n = first.shard.expect("checked to be a shard").count;
    let mut by_index: Vec<Option<usize>> = vec![None; n];
    for (k, sh) in shards.iter().enumerate() {
        let m = &sh.manifest;
        if let Some(what) = first_difference(m, first, n) {
            return Err(CliError::input(
                &sh.dir,
                format!(
                    "{}: not a shard of the same sweep as {}: its {what}",
                    sh.dir.display(),
                    shards[0].dir.display()
                ),
            ));
        }
        let s = m.shard.expect("checked to be a shard");
        if let Some(prev) = by_index[s.index].replace(k) {
            return Err(CliError::input(
                &sh.dir,
                format!(
                    "shard {}/{n} is given twice: {} and {}",
                    s.index,
                    shards[prev].dir.display(),
                    sh.dir.display()
                ),
            ));
        }
    }
    if let Some(missing) = by_index.iter().position(Option::is_none) {
        let given: Vec<String> = shards
            .iter()
            .map(|sh| {
                let s = sh.manifest.shard.expect("checked to be a shard");
                format!("{} (shard {}/{n})", sh.dir.display(), s.index)
            })
            .collect();
        return Err(CliError::Conflict {
            flags: &["DIRS"],
            message: format!(
                "shard {missing}/{n} is missing: the folders given are {}; give all {n} shard folders of the sweep",
                given.join(", ")
            ),
        });
    }
    Ok(by_index
        .into_iter()
        .map(|k| k.expect("every shard checked present"))
        .collect())
}

/// The first way manifest `m` is not of the same sweep as `first` (of `n` shards), as the end
/// of a sentence ("differ", with the files that differ when it is the scenario's inputs).
fn first_difference(m: &Manifest, first: &Manifest, n: usize) -> Option<String> {
    let differs = [
        ("scenario text", m.scenario_fnv != first.scenario_fnv),
        ("files the scenario reads", m.inputs != first.inputs),
        ("grid (--vary, --seeds, --set)", m.grid != first.grid),
        ("rows", m.rows != first.rows),
        ("[slo]", m.slo != first.slo),
        ("shard count", m.shard.map(|s| s.count) != Some(n)),
    ];
    let (what, _) = differs.iter().find(|d| d.1)?;
    let detail = if *what == "files the scenario reads" {
        let mut files: Vec<&String> = m
            .inputs
            .iter()
            .filter(|(f, h)| first.inputs.get(*f) != Some(h))
            .map(|x| x.0)
            .collect();
        files.extend(first.inputs.keys().filter(|f| !m.inputs.contains_key(*f)));
        format!(
            ": {}",
            files
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    } else {
        String::new()
    };
    Some(format!("{what} differ{detail}"))
}

/// The sweep's rows in grid order: row `i` is row `i / n` of shard `i % n` (a shard holds
/// every `n`-th row), each with its index.
fn interleave(shards: &[Shard], by_index: &[usize], rows: usize) -> Vec<(usize, SweepRow)> {
    let n = by_index.len();
    let mut merged = Vec::with_capacity(rows);
    for i in 0..rows {
        let k = by_index[i % n];
        merged.push((i, shards[k].rows[i / n].clone()));
    }
    merged
}
