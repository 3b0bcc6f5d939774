//! `pdsim merge DIR... --out DIR`: joins the shards of a sweep into the sweep itself, byte for
//! byte what one unsharded `pdsim sweep` writes.

use std::path::PathBuf;

use clap::Args;

use super::CliError;
use super::sweep::{fresh_dir, io, write_sweep};
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

/// Runs `pdsim merge`.
pub fn run(args: &MergeArgs) -> Result<(), CliError> {
    let mut shards: Vec<(Manifest, Vec<SweepRow>, PathBuf)> = Vec::new();
    for d in &args.dirs {
        let mp = d.join("sweep.json");
        let text = std::fs::read_to_string(&mp).map_err(|e| io(&mp, e))?;
        let m: Manifest = serde_json::from_str(&text).map_err(|e| {
            CliError::Usage(format!(
                "{}: not a sweep manifest ({e}); give the folders `pdsim sweep --shard I/N --out DIR` wrote",
                mp.display()
            ))
        })?;
        let rows = plan::read_sweep_csv(&d.join("sweep.csv"), m.grid.axes.len())?;
        shards.push((m, rows, d.clone()));
    }
    let first = shards[0].0.clone();
    let Some(s0) = first.shard else {
        return Err(CliError::Usage(format!(
            "{}: a whole sweep, not a shard; merge joins the folders of `pdsim sweep --shard I/N`",
            shards[0].2.display()
        )));
    };
    let n = s0.count;
    let mut by_index: Vec<Option<usize>> = vec![None; n];
    for (k, (m, rows, d)) in shards.iter().enumerate() {
        let same = m.scenario_fnv == first.scenario_fnv
            && m.grid == first.grid
            && m.rows == first.rows
            && m.slo == first.slo;
        let Some(s) = m.shard.filter(|s| s.count == n && same) else {
            return Err(CliError::Usage(format!(
                "{}: not a shard of the same sweep as {} (scenario, grid, seeds and shard count must agree)",
                d.display(),
                shards[0].2.display()
            )));
        };
        if let Some(prev) = by_index[s.index].replace(k) {
            return Err(CliError::Usage(format!(
                "shard {}/{n} is given twice: {} and {}",
                s.index,
                shards[prev].2.display(),
                d.display()
            )));
        }
        let want = s.rows(m.rows).count();
        if rows.len() != want {
            return Err(CliError::Usage(format!(
                "{}: shard {}/{n} should hold {want} rows, its sweep.csv has {} (an unfinished shard?)",
                d.display(),
                s.index,
                rows.len()
            )));
        }
    }
    if let Some(missing) = by_index.iter().position(Option::is_none) {
        return Err(CliError::Usage(format!(
            "shard {missing}/{n} is missing: give all {n} shard folders"
        )));
    }
    let mut merged = Vec::with_capacity(first.rows);
    for i in 0..first.rows {
        let k = by_index[i % n].expect("every shard checked present");
        merged.push((i, shards[k].1[i / n].clone()));
    }
    let m = Manifest {
        shard: None,
        ..first
    };
    fresh_dir(&args.out)?;
    write_sweep(&args.out, &m, &merged)?;
    if !args.quiet {
        super::print_out(&format!(
            "merge: {n} shards, {} rows; results in {}\n",
            merged.len(),
            args.out.display()
        ))?;
    }
    Ok(())
}
