//! The question a sweep asks: `--vary` axes ([`Axis`], [`parse_axis`]), the grid of their
//! combinations × seeds ([`Grid`], with its size limits) and `--shard I/N` ([`Shard`]). Pure
//! values parsed from flags, apart from running anything, so the manifest, the journal and the
//! searches all index rows the same way.

use serde::{Deserialize, Serialize};

use super::error::PlanError;

/// One `--vary KEY=V1,V2,...`: a dotted scenario key (as `--set` takes it) and its values,
/// each a TOML value as written. A linked axis moves several keys as one:
/// `--vary K1,K2=(A1,A2),(B1,B2)` (`key` is `K1,K2`, each value a tuple as written), so TP, DP
/// and EP can be varied together without the combinations that do not go together.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// The dotted key, or the linked keys joined by commas.
    pub key: String,
    /// The values (tuples of a linked axis), as written.
    pub values: Vec<String>,
}

impl Axis {
    /// The keys the axis sets: one, or a linked axis's in order.
    pub fn keys(&self) -> Vec<&str> {
        self.key.split(',').map(str::trim).collect()
    }

    /// Whether the axis links several keys.
    pub fn linked(&self) -> bool {
        self.key.contains(',')
    }

    /// The `(key, value)` assignments of one of the axis's values (a value it holds).
    pub fn assignments<'a>(&'a self, value: &'a str) -> Vec<(&'a str, String)> {
        if !self.linked() {
            return vec![(self.key.as_str(), value.to_string())];
        }
        self.keys().into_iter().zip(tuple_items(value)).collect()
    }
}

/// The items of a tuple value `(A, B, ...)` (top-level commas only).
fn tuple_items(value: &str) -> Vec<String> {
    let inner = value
        .trim()
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or(value);
    split_values(inner)
}

/// Splits `V1,V2,...` at top-level commas (not inside `{}`, `[]`, `()` or quotes), so inline
/// tables, arrays and a linked axis's tuples can be values:
/// `workload.arrival={ process = "poisson", rate_per_s = 4 },{...}`.
pub fn split_values(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quote) = (Vec::new(), String::new(), 0i32, None);
    for ch in s.chars() {
        match (quote, ch) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(ch),
            (None, '{' | '[' | '(') => depth += 1,
            (None, '}' | ']' | ')') => depth -= 1,
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

/// Parses one `--vary` argument: `KEY=V1,V2,...`, or linked keys `K1,K2,...=(A1,A2,...),...`.
pub fn parse_axis(arg: &str) -> Result<Axis, PlanError> {
    let (key, values) = arg.split_once('=').ok_or_else(|| {
        PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: expected KEY=V1,V2,..., e.g. --vary pools.decode.instances=1,2,4 (or linked keys K1,K2=(A1,A2),(B1,B2))"
            ),
        )
    })?;
    let keys: Vec<&str> = key.split(',').map(str::trim).collect();
    let key = keys.join(",");
    let values = split_values(values);
    if keys.iter().any(|k| k.is_empty()) || values.iter().any(String::is_empty) {
        return Err(PlanError::flag(
            "--vary",
            format!(
                "--vary {arg:?}: a key and at least one non-empty value are needed, e.g. --vary pools.decode.instances=1,2,4"
            ),
        ));
    }
    if keys.len() > 1 {
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].contains(k) {
                return Err(PlanError::flag(
                    "--vary",
                    format!("--vary {key}: {k} is linked twice"),
                ));
            }
        }
        for v in &values {
            let t = v.trim();
            let items = tuple_items(t);
            if !(t.starts_with('(') && t.ends_with(')'))
                || items.len() != keys.len()
                || items.iter().any(String::is_empty)
            {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {key}: value {v} is not a tuple of {} values; linked keys take one (A1,A2,...) per point, e.g. --vary pools.decode.server.tp_size,pools.decode.server.ep_size=(8,8),(16,16)",
                        keys.len()
                    ),
                ));
            }
        }
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
            if let Some(k) = a
                .keys()
                .into_iter()
                .find(|k| axes[..i].iter().any(|b| b.keys().contains(k)))
            {
                return Err(PlanError::flag(
                    "--vary",
                    format!(
                        "--vary {k} is given twice; list every value in one --vary (a linked key moves only with its tuple)"
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
            if a.keys().contains(&"run.seed") {
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

    /// Point `p`'s `(key, value)` assignments, a linked axis's keys each on its own.
    pub fn assignments(&self, p: usize) -> Vec<(String, String)> {
        self.axes
            .iter()
            .zip(self.values_of(p))
            .flat_map(|(a, v)| a.assignments(v))
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// The varied keys, a linked axis's each on its own (the result tables' columns).
    pub fn columns(&self) -> Vec<String> {
        self.axes
            .iter()
            .flat_map(|a| a.keys())
            .map(String::from)
            .collect()
    }

    /// The `--set` list of row `i` (point `i / seeds`, seed `i % seeds`).
    pub fn sets_of(&self, i: usize) -> Vec<String> {
        let (p, s) = (i / self.seeds.len(), i % self.seeds.len());
        let mut sets = self.fixed.clone();
        for (k, v) in self.assignments(p) {
            sets.push(format!("{k}={v}"));
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

    /// A linked axis moves its keys as one: each point sets every key of its tuple, the
    /// tables get a column per key, and a key cannot be varied apart from its tuple.
    #[test]
    fn a_linked_axis_sets_its_keys_together() {
        let linked = parse_axis("a.tp , a.ep=(8,8), (16, 16),(32,{ x = [1, 2] })").unwrap();
        assert_eq!(linked.key, "a.tp,a.ep");
        assert_eq!(linked.values, ["(8,8)", "(16, 16)", "(32,{ x = [1, 2] })"]);
        let g = Grid::new(vec![linked, parse_axis("b=1,2").unwrap()], vec![7], vec![]).unwrap();
        assert_eq!(
            (g.points(), g.columns()),
            (6, vec!["a.tp".into(), "a.ep".into(), "b".into()])
        );
        assert_eq!(g.sets_of(2), ["a.tp=16", "a.ep=16", "b=1", "run.seed=7"]);
        assert_eq!(
            g.sets_of(5),
            ["a.tp=32", "a.ep={ x = [1, 2] }", "b=2", "run.seed=7"]
        );
        for (arg, why) in [
            ("a,b=(1,2),(3)", "not a tuple of 2 values"),
            ("a,b=1,2", "not a tuple of 2 values"),
            ("a,b=(1,2,3)", "not a tuple of 2 values"),
            ("a,b=(1,)", "not a tuple of 2 values"),
            ("a,a=(1,2)", "a is linked twice"),
            ("a,=(1,2)", "a key and at least one non-empty value"),
        ] {
            let e = parse_axis(arg).unwrap_err().to_string();
            assert!(e.contains(why), "{arg}: {e}");
        }
        let twice = Grid::new(
            vec![parse_axis("a,b=(1,2)").unwrap(), parse_axis("b=3").unwrap()],
            vec![1],
            vec![],
        )
        .unwrap_err()
        .to_string();
        assert!(twice.contains("--vary b is given twice"), "{twice}");
        let seed = Grid::new(
            vec![parse_axis("a,run.seed=(1,2)").unwrap()],
            vec![1],
            vec![],
        );
        assert!(seed.unwrap_err().to_string().contains("run.seed"));
    }

    #[test]
    fn bad_vary_arguments_say_what_is_expected() {
        for bad in ["a", "=1", "a=", "a=1,,2", "a=1,1"] {
            let e = parse_axis(bad).unwrap_err().to_string();
            assert!(e.contains("--vary"), "{bad}: {e}");
        }
    }
}
