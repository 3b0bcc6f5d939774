//! The question a sweep asks: `--vary` axes ([`Axis`], [`parse_axis`]), the grid of their
//! combinations × seeds ([`Grid`], with its size limits) and `--shard I/N` ([`Shard`]). Pure
//! values parsed from flags, apart from running anything, so the manifest, the journal and the
//! searches all index rows the same way.

use serde::{Deserialize, Serialize};

use super::error::PlanError;

/// One `--vary KEY=V1,V2,...`: a dotted scenario key (as `--set` takes it) and its values,
/// each a TOML value as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// The dotted key.
    pub key: String,
    /// The values, as written.
    pub values: Vec<String>,
}

/// Splits `V1,V2,...` at top-level commas (not inside `{}`, `[]` or quotes), so inline tables
/// and arrays can be values: `workload.arrival={ process = "poisson", rate_per_s = 4 },{...}`.
pub fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '{' | '[') => depth += 1,
            (None, '}' | ']') => depth -= 1,
            (None, ',') if depth == 0 => {
                out.push(std::mem::take(&mut cur).trim().to_string());
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur.trim().to_string());
    out
}

/// Parses one `--vary` argument.
pub fn parse_axis(arg: &str) -> Result<Axis, PlanError> {
    let (key, values) = arg.split_once('=').ok_or_else(|| {
        PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: expected KEY=V1,V2,..., e.g. --vary pools.decode.instances=1,2,4"
            ),
        )
    })?;
    let key = key.trim().to_string();
    let values = split_values(values);
    if key.is_empty() || values.iter().any(String::is_empty) {
        return Err(PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: a key and at least one non-empty value are needed, e.g. --vary pools.decode.instances=1,2,4"
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for v in &values {
        if !seen.insert(v) {
            return Err(PlanError::flag(
                "--vary",
                format!("--vary {key}: value {v} is listed twice"),
            ));
        }
    }
    Ok(Axis { key, values })
}

/// The grid: every combination of the axes' values, the first axis varying slowest, each run
/// on every seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Grid {
    /// The axes, in `--vary` order.
    pub axes: Vec<Axis>,
    /// The seeds every point runs on.
    pub seeds: Vec<u64>,
    /// `--set` assignments applied to every point before the axes (e.g. the rate of a plan).
    pub fixed: Vec<String>,
}

/// At most this many rows (points × seeds) in a grid: each is a simulation, and a grid past
/// this is a typo (an extra axis, a seed count with one digit too many) rather than a plan.
pub const MAX_GRID_ROWS: usize = 1_000_000;
/// At most this many `--vary` axes.
pub const MAX_AXES: usize = 32;
/// At most this many values on one axis.
pub const MAX_AXIS_VALUES: usize = 10_000;

impl Grid {
    /// A grid; an axis named twice, a grid past [`MAX_GRID_ROWS`] rows, more than
    /// [`MAX_AXES`] axes, an empty axis or no seed is an error (exit 2, stating the limit).
    pub fn new(axes: Vec<Axis>, seeds: Vec<u64>, fixed: Vec<String>) -> Result<Self, PlanError> {
        if axes.len() > MAX_AXES {
            return Err(PlanError::flag(
                "--vary",
                format!(
                    "{} --vary axes: at most {MAX_AXES} are supported",
                    axes.len()
                ),
            ));
        }
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.key == a.key) {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {} is given twice; list every value in one --vary",
                        a.key
                    ),
                ));
            }
            if a.values.is_empty() || a.values.len() > MAX_AXIS_VALUES {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {}: {} values; give 1 to {MAX_AXIS_VALUES}",
                        a.key,
                        a.values.len()
                    ),
                ));
            }
            if a.key == "run.seed" {
                return Err(PlanError::flag("--vary",
                    "--vary run.seed: the seeds are the grid's own (run.seed, run.seed + 1, … for --seeds N); set the first with --set run.seed=S and the count with --seeds N".into(),
                ));
            }
        }
        if seeds.is_empty() {
            return Err(PlanError::flag(
                "--seeds",
                "--seeds must be at least 1".into(),
            ));
        }
        let rows = axes
            .iter()
            .try_fold(seeds.len(), |n, a| n.checked_mul(a.values.len()))
            .filter(|&n| n <= MAX_GRID_ROWS);
        if rows.is_none() {
            let shown =
                axes.iter().map(|a| a.values.len() as f64).product::<f64>() * seeds.len() as f64;
            return Err(PlanError::flag(
                "--vary",
                format!(
                    "the grid has {shown:.3e} rows ({} axes × {} seeds); at most {MAX_GRID_ROWS} are supported: vary fewer keys or values, or use fewer seeds",
                    axes.len(),
                    seeds.len()
                ),
            ));
        }
        Ok(Self { axes, seeds, fixed })
    }

    /// Grid points (combinations of axis values).
    pub fn points(&self) -> usize {
        self.axes.iter().map(|a| a.values.len()).product()
    }

    /// Rows: points × seeds.
    pub fn rows(&self) -> usize {
        self.points() * self.seeds.len()
    }

    /// The axis values of point `p`, in axis order.
    pub fn values_of(&self, p: usize) -> Vec<&str> {
        let mut rest = p;
        let mut out = vec![""; self.axes.len()];
        for (k, a) in self.axes.iter().enumerate().rev() {
            out[k] = &a.values[rest % a.values.len()];
            rest /= a.values.len();
        }
        out
    }

    /// The `--set` list of row `i` (point `i / seeds`, seed `i % seeds`).
    pub fn sets_of(&self, i: usize) -> Vec<String> {
        let (p, s) = (i / self.seeds.len(), i % self.seeds.len());
        let mut sets = self.fixed.clone();
        for (a, v) in self.axes.iter().zip(self.values_of(p)) {
            sets.push(format!("{}={v}", a.key));
        }
        sets.push(format!("run.seed={}", self.seeds[s]));
        sets
    }
}

/// `--shard I/N`: this process runs rows `I, I + N, I + 2N, ...` (interleaved, so every shard
/// gets a similar mix of cheap and expensive points).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// 0-based index.
    pub index: usize,
    /// Shards in all.
    pub count: usize,
}

impl Shard {
    /// Parses `I/N` with `0 ≤ I < N`.
    pub fn parse(s: &str) -> Result<Self, PlanError> {
        let bad = || {
            PlanError::flag(
                "--shard",
                format!(
                    "--shard {s:?}: expected I/N with 0 ≤ I < N, e.g. --shard 0/4 (Slurm: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT; Kubernetes: $JOB_COMPLETION_INDEX/N)"
                ),
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<usize>().map_err(|_| bad())?,
            n.trim().parse::<usize>().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }

    /// The rows of a grid of `rows` this shard runs.
    pub fn rows(&self, rows: usize) -> impl Iterator<Item = usize> + '_ {
        (self.index..rows).step_by(self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_at_top_level_commas_only() {
        assert_eq!(split_values("1, 2,4"), vec!["1", "2", "4"]);
        assert_eq!(
            split_values(r#"{ process = "poisson", rate_per_s = 4 },"a,b",[1,2]"#),
            vec![
                r#"{ process = "poisson", rate_per_s = 4 }"#,
                r#""a,b""#,
                "[1,2]"
            ]
        );
    }

    #[test]
    fn grid_order_is_first_axis_slowest_then_seeds() {
        let g = Grid::new(
            vec![parse_axis("a=1,2").unwrap(), parse_axis("b=x,y,z").unwrap()],
            vec![7, 8],
            vec![],
        )
        .unwrap();
        assert_eq!(g.rows(), 12);
        assert_eq!(g.values_of(0), vec!["1", "x"]);
        assert_eq!(g.values_of(2), vec!["1", "z"]);
        assert_eq!(g.values_of(3), vec!["2", "x"]);
        assert_eq!(g.sets_of(3), vec!["a=1", "b=y", "run.seed=8"]);
    }

    #[test]
    fn shards_partition_the_rows() {
        let mut all: Vec<usize> = (0..3)
            .flat_map(|i| Shard { index: i, count: 3 }.rows(10).collect::<Vec<_>>())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(Shard::parse("3/3").is_err());
        assert!(Shard::parse("x").is_err());
        assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
    }

    #[test]
    fn bad_vary_arguments_say_what_is_expected() {
        for bad in ["a", "=1", "a=", "a=1,,2", "a=1,1"] {
            let e = parse_axis(bad).unwrap_err().to_string();
            assert!(e.contains("--vary"), "{bad}: {e}");
        }
    }
}
