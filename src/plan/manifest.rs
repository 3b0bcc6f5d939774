//! `sweep.json` ([`Manifest`]): what a sweep folder holds, with FNV-1a fingerprints of the
//! scenario and every file it reads, read back with every field bounded; and [`verify_rows`],
//! which checks rows read back against the grid. What lets `pdsim merge` and `--resume` refuse
//! shards or journals of another sweep instead of mixing them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::PlanError;
use super::grid::{Grid, MAX_GRID_ROWS, Shard, parse_axis};
use super::rows::SweepRow;
use super::run::Base;
use crate::scenario::Scenario;

/// `sweep.json`: what a sweep folder holds, so `pdsim merge` can check its shards belong
/// together and the report can be drawn again from the rows alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The scenario file as given.
    pub scenario: String,
    /// FNV-1a hash of the scenario text (shards of different scenarios do not merge).
    pub scenario_fnv: String,
    /// FNV-1a hash of every file the scenario reads, by its path as written (relative to the
    /// scenario): shards of one text beside different traces or configs do not merge.
    pub inputs: std::collections::BTreeMap<String, String>,
    /// The grid.
    pub grid: Grid,
    /// Rows in the whole grid.
    pub rows: usize,
    /// This folder's shard, or `None` for a whole sweep.
    pub shard: Option<Shard>,
    /// The SLO targets of the scenario (for the report's marks).
    pub slo: crate::config::Slo,
}

/// FNV-1a, 64 bits, hex: a stable fingerprint of bytes.
pub fn fnv(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// FNV-1a of a file's bytes, read in blocks (a trace may be large).
pub fn fnv_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{h:016x}"))
}

/// The last segments of keys whose values are file paths (for the files an axis may name).
const PATH_LEAVES: [&str; 5] = ["path", "config", "step_times", "calibration", "lengths"];

impl Manifest {
    /// A manifest for `grid` of `base`: the text's and every input file's fingerprint. The
    /// inputs are the files the scenario `sc` (the base with the fixed `--set`s) reads, and
    /// every file an axis names (a varied trace path, model config or calibration).
    pub fn new(
        base: &Base,
        sc: &Scenario,
        grid: Grid,
        shard: Option<Shard>,
    ) -> Result<Self, PlanError> {
        let mut inputs = std::collections::BTreeMap::new();
        let dir = base.path.parent().unwrap_or(Path::new("."));
        let mut named: Vec<(String, PathBuf)> = sc.inputs.clone();
        for a in &grid.axes {
            for v in &a.values {
                for (key, v) in a.assignments(v) {
                    let leaf = key.rsplit('.').next().unwrap_or_default();
                    if !PATH_LEAVES.contains(&leaf) {
                        continue;
                    }
                    let rel = v.trim().trim_matches(|c| c == '"' || c == '\'');
                    if dir.join(rel).is_file() {
                        named.push((rel.to_string(), dir.join(rel)));
                    }
                }
            }
        }
        for (rel, path) in named {
            // A file that cannot be read now fails its points, which say so; it has no print.
            let print = fnv_file(&path).unwrap_or_else(|e| format!("unreadable: {e}"));
            inputs.insert(rel, print);
        }
        Ok(Self {
            scenario: base.path.display().to_string(),
            scenario_fnv: fnv(base.text.as_bytes()),
            inputs,
            rows: grid.rows(),
            grid,
            shard,
            slo: sc.slo,
        })
    }

    /// Reads `sweep.json` back, checking every field (a hand-edited index is exit 2 naming the
    /// field, never a panic): the grid within bounds, `rows` equal to it, the shard in range.
    pub fn read(path: &Path) -> Result<Self, PlanError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PlanError::Io(format!("{}: {e}", path.display())))?;
        let bad = |field: &str, why: String| {
            PlanError::file(
                path,
                format!(
                    "{}: {field}: {why}; this is not a sweep.json that pdsim wrote (was it edited?)",
                    path.display()
                ),
            )
        };
        let m: Manifest =
            serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text))
                .map_err(|e| {
                    let field = e.path().to_string();
                    bad(&field, e.inner().to_string())
                })?;
        for (k, a) in m.grid.axes.iter().enumerate() {
            parse_axis(&format!("{}={}", a.key, a.values.join(",")))
                .ok()
                .filter(|b| b == a)
                .ok_or_else(|| {
                    bad(
                        &format!("grid.axes[{k}]"),
                        "a key and distinct, non-empty values are needed".into(),
                    )
                })?;
        }
        let grid = Grid::new(
            m.grid.axes.clone(),
            m.grid.seeds.clone(),
            m.grid.fixed.clone(),
        )
        .map_err(|e| bad("grid", e.to_string()))?;
        if m.rows != grid.rows() {
            return Err(bad(
                "rows",
                format!("{} but the grid has {} rows", m.rows, grid.rows()),
            ));
        }
        if let Some(s) = m.shard
            && (s.count == 0 || s.index >= s.count || s.count > MAX_GRID_ROWS)
        {
            return Err(bad(
                "shard",
                format!(
                    "{}/{}: expected 0 ≤ index < count ≤ {MAX_GRID_ROWS}",
                    s.index, s.count
                ),
            ));
        }
        if m.scenario_fnv.len() != 16 || !m.scenario_fnv.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("scenario_fnv", "16 hex digits expected".into()));
        }
        Ok(m)
    }
}

/// Checks rows read back against the grid: the row at position `k` must be grid row
/// `indices[k]` — its varied values that point's and its seed that row's seed. A row filed
/// under another point (rows swapped by hand) is exit 2 naming the file and line.
pub fn verify_rows(
    file: &Path,
    grid: &Grid,
    indices: &[usize],
    rows: &[(Vec<String>, SweepRow)],
) -> Result<(), PlanError> {
    for (k, (&i, (values, row))) in indices.iter().zip(rows).enumerate() {
        // A linked axis's keys are a column each.
        let want: Vec<String> = grid
            .assignments(i / grid.seeds.len())
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        let seed = grid.seeds[i % grid.seeds.len()];
        if values.iter().ne(want.iter()) || row.seed != seed {
            return Err(PlanError::file(
                file,
                format!(
                    "{}: line {}: the row is ({}, seed {}), but grid row {i} is ({}, seed {seed}); the file's rows are out of order or from another sweep",
                    file.display(),
                    k + 2,
                    values.join(", "),
                    row.seed,
                    want.join(", ")
                ),
            ));
        }
    }
    Ok(())
}
