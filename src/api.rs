//! The verbs in process: what `pdsim run`, `sweep`, `plan`, `lint`, `layout` and `explain` do,
//! callable from a program (the Python binding in `python/` is its one user).
//!
//! Every function here builds the application layer's request (`app::run::RunRequest`, …,
//! quiet) from a program's call and runs the very verb the command line runs (`app::run::run`,
//! `app::sweep::run`, …); neither this file nor the CLI builds the other's types. So a program
//! gets the CLI's files byte for byte by construction: the determinism contract
//! (`docs/architecture.md` §6) spans both. A scenario may be TOML text rather than a file
//! ([`Source::Text`]); its relative paths resolve against the folder of the path it is given,
//! as a file's do.
//!
//! Errors are the CLI's ([`CliError`]), flattened by [`Failure::of`] into what an exception
//! carries: the exit code the CLI would return, the message, and the key, file and line.
//!
//! [`read_columns`] turns a results CSV into typed columns (little-endian `i64`/`f64` buffers,
//! masks, dictionary-coded text), so a dataframe library takes a table without a row loop.

use std::path::{Path, PathBuf};

pub use crate::app::{CliError, Source};
use crate::report::IoError;
use crate::scenario;

/// Every `[slo]` key as `(key, kind, meaning, population)`: `kind` is `percentile`,
/// `threshold` (per request, joins attainment) or `attainment`; `population` says what the
/// target is taken over (`metrics::slo::SLO_KEYS`, the table the reports state).
pub fn slo_keys() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    crate::metrics::slo::SLO_KEYS
        .iter()
        .map(|k| (k.key, k.kind, k.meaning, k.population.words()))
        .collect()
}

/// A scenario given as JSON (a program's dictionary) as TOML text. JSON has no dates and TOML
/// no null: a `null` anywhere is an error naming its key.
pub fn toml_of_json(json: &str) -> Result<String, CliError> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| dict_error(format!("the scenario dictionary is not JSON: {e}")))?;
    if let Some(key) = null_key(&value, "") {
        return Err(CliError::Scenario(scenario::ScenarioError {
            file: PathBuf::from("scenario dictionary"),
            line: None,
            key,
            message: "is None; a TOML scenario has no null — leave the key out for its default"
                .into(),
        }));
    }
    let table: toml::Table = serde_json::from_value(value).map_err(|e| {
        dict_error(format!(
            "the scenario dictionary is not a table of TOML values: {e}"
        ))
    })?;
    toml::to_string(&table)
        .map_err(|e| dict_error(format!("the scenario dictionary cannot be TOML: {e}")))
}

/// A scenario dictionary that is not a TOML table (exit 2), keyed by the argument's name.
fn dict_error(message: String) -> CliError {
    CliError::flag("scenario", message)
}

/// The dotted key of the first `null` in `v`.
fn null_key(v: &serde_json::Value, at: &str) -> Option<String> {
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match v {
        serde_json::Value::Null => Some(if at.is_empty() { ".".into() } else { at.into() }),
        serde_json::Value::Object(m) => m.iter().find_map(|(k, x)| null_key(x, &join(k))),
        serde_json::Value::Array(a) => a
            .iter()
            .enumerate()
            .find_map(|(i, x)| null_key(x, &join(&i.to_string()))),
        _ => None,
    }
}

/// What `pdsim run` is asked.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The scenario.
    pub scenario: Source,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--set KEY=VALUE`, in order.
    pub sets: Vec<String>,
    /// `--out` (a program always names the folder; the binding uses a temporary one).
    pub out: PathBuf,
    /// `--summary-only`.
    pub summary_only: bool,
    /// `--trace-events`.
    pub trace_events: bool,
}

/// What a run wrote.
#[derive(Clone, Debug)]
pub struct RunDone {
    /// The folder written.
    pub dir: PathBuf,
    /// The scenario's warnings (what the CLI prints as `warning: …`).
    pub notes: Vec<String>,
}

/// `pdsim run … -q`: writes `req.out` exactly as the CLI does.
pub fn run(req: &RunRequest) -> Result<RunDone, CliError> {
    let r = crate::app::run::RunRequest {
        scenario: req.scenario.clone(),
        seed: req.seed,
        out: Some(req.out.clone()),
        sets: req.sets.clone(),
        png: false,
        quiet: true,
        summary_only: req.summary_only,
        trace_events: req.trace_events,
    };
    let out = crate::app::run::run(&r)?;
    Ok(RunDone {
        dir: out.dir,
        notes: out.notes,
    })
}

/// What `pdsim sweep` is asked.
#[derive(Clone, Debug)]
pub struct SweepRequest {
    /// The scenario.
    pub scenario: Source,
    /// `--vary KEY=V1,V2,...`, in order.
    pub vary: Vec<String>,
    /// `--seeds`.
    pub seeds: u32,
    /// `--jobs` (`None`: the machine's cores).
    pub jobs: Option<usize>,
    /// `--shard I/N`.
    pub shard: Option<String>,
    /// `--set`.
    pub sets: Vec<String>,
    /// `--out`.
    pub out: PathBuf,
    /// `--resume`.
    pub resume: bool,
}

/// The application layer's request for `req`, quiet.
fn sweep_request(req: &SweepRequest) -> crate::app::sweep::SweepRequest {
    crate::app::sweep::SweepRequest {
        scenario: req.scenario.clone(),
        vary: req.vary.clone(),
        seeds: req.seeds,
        jobs: req.jobs,
        shard: req.shard.clone(),
        out: Some(req.out.clone()),
        sets: req.sets.clone(),
        quiet: true,
        resume: req.resume,
    }
}

/// `pdsim sweep … -q` into `req.out`.
pub fn sweep(req: &SweepRequest) -> Result<PathBuf, CliError> {
    crate::app::sweep::run(&sweep_request(req))?;
    Ok(req.out.clone())
}

/// `pdsim plan --model … --gpu … -q` (the one-line question, `app::oneline`) into `out`: at
/// `rate`, or each deployment's highest rate when `None`.
pub fn plan_question(
    q: &crate::app::oneline::Question,
    rate: Option<f64>,
    seeds: u32,
    jobs: Option<usize>,
    out: &std::path::Path,
    resume: bool,
) -> Result<PathBuf, CliError> {
    let done = crate::app::plan::run(&crate::app::plan::PlanRequest {
        scenario: crate::app::Source::File(PathBuf::new()),
        rate,
        max_rate: rate.is_none(),
        vary: Vec::new(),
        seeds,
        jobs,
        out: Some(out.to_path_buf()),
        sets: Vec::new(),
        tolerance: 0.02,
        quiet: true,
        full_grid: false,
        resume,
        no_early_stop: false,
        question: Some(q.clone()),
    });
    match done {
        // No deployment meeting `[slo]` is the answer's to say (`best` null).
        Ok(()) | Err(CliError::Failed(_)) => Ok(out.to_path_buf()),
        Err(e) => Err(e),
    }
}

/// What `pdsim plan` is asked.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    /// The sweep it searches (`shard` must be `None`).
    pub sweep: SweepRequest,
    /// `--rate R`; `None` is `--max-rate`.
    pub rate: Option<f64>,
    /// `--tolerance` (`--max-rate`).
    pub tolerance: f64,
    /// `--full-grid`.
    pub full_grid: bool,
    /// `--no-early-stop`.
    pub no_early_stop: bool,
}

/// `pdsim plan … -q` into `req.sweep.out`.
pub fn plan(req: &PlanRequest) -> Result<PathBuf, CliError> {
    let s = &req.sweep;
    if s.shard.is_some() {
        return Err(CliError::Conflict {
            flags: &["shard", "plan"],
            message: "a plan is not sharded: drop shard (sweep takes it)".into(),
        });
    }
    if req.full_grid && req.rate.is_none() {
        return Err(CliError::Conflict {
            flags: &["--full-grid", "--max-rate"],
            message: "full_grid applies to a plan at one rate: give rate, or drop full_grid".into(),
        });
    }
    // No grid point meeting `[slo]` is the CLI's exit 1 after every file is written; a
    // program reads it from the answer (`best` null, `closest` the nearest point).
    let done = crate::app::plan::run(&crate::app::plan::PlanRequest {
        scenario: s.scenario.clone(),
        rate: req.rate,
        max_rate: req.rate.is_none(),
        vary: s.vary.clone(),
        seeds: s.seeds,
        jobs: s.jobs,
        out: Some(s.out.clone()),
        sets: s.sets.clone(),
        tolerance: req.tolerance,
        quiet: true,
        full_grid: req.full_grid,
        resume: s.resume,
        no_early_stop: req.no_early_stop,
        question: None,
    });
    match done {
        Ok(()) | Err(CliError::Failed(_)) => Ok(s.out.clone()),
        Err(e) => Err(e),
    }
}

/// `pdsim lint --json`: the report as the CLI prints it (pretty JSON) and whether the pair is
/// compatible (the CLI's exit 0, else 1).
pub fn lint(q: &crate::diagnose::lint::LintQuestion) -> Result<(String, bool), CliError> {
    let r = crate::diagnose::lint::lint(q)?;
    let json = serde_json::to_string_pretty(&r).expect("a report serializes") + "\n";
    Ok((json, r.prediction.compatible))
}

/// `pdsim layout --json`: the regions one rank registers, as the CLI prints them.
pub fn layout(a: &crate::app::layout::LayoutRequest) -> Result<String, CliError> {
    let layout = crate::app::layout::layout_of(a)?;
    Ok(serde_json::to_string_pretty(&layout).expect("a layout serializes") + "\n")
}

/// `pdsim explain`: the text it prints.
pub fn explain(a: &crate::app::explain::ExplainRequest) -> Result<String, CliError> {
    crate::app::explain::explain_text(a)
}

/// An error as a program's exception carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The exit code the CLI returns for it (1 verdict, 2 input, 3 I/O, 4 a bug).
    pub exit_code: i32,
    /// The CLI's message: what is wrong and what would be valid.
    pub message: String,
    /// The key, flag or file it is about (`pools.decode.server.tp_size`, `--tp`).
    pub key: Option<String>,
    /// The scenario file (or stand-in) of a scenario error.
    pub file: Option<PathBuf>,
    /// Its 1-based line, where known.
    pub line: Option<usize>,
}

impl Failure {
    /// Flattens a verb's error.
    pub fn of(e: &CliError) -> Self {
        let scenario = match e {
            CliError::Scenario(s) | CliError::Plan(crate::plan::PlanError::Scenario(s)) => Some(s),
            _ => None,
        };
        let key = e.key().or_else(|| {
            scenario
                .filter(|s| !s.key.is_empty())
                .map(|s| s.key.clone())
        });
        Self {
            exit_code: e.exit_code(),
            message: e.to_string(),
            key,
            file: scenario.map(|s| s.file.clone()),
            line: scenario.and_then(|s| s.line),
        }
    }

    /// A panic caught at the boundary: a bug, exit 4 as the CLI's panic hook gives it.
    pub fn internal(what: &str, payload: &(dyn std::any::Any + Send)) -> Self {
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into());
        Self {
            exit_code: 4,
            message: format!(
                "internal error (a bug in pdsim) in {what}: {text}; please report it with the scenario and seed"
            ),
            key: None,
            file: None,
            line: None,
        }
    }
}

/// One column of a results table.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// Integers, little-endian `i64`; `mask[i]` (1 byte each) is 1 where the cell is empty.
    Int {
        /// `rows × 8` bytes.
        values: Vec<u8>,
        /// `rows` bytes, or `None` when no cell is empty.
        mask: Option<Vec<u8>>,
    },
    /// Decimals, little-endian `f64`, NaN where the cell is empty.
    Float {
        /// `rows × 8` bytes.
        values: Vec<u8>,
    },
    /// `true`/`false`; `mask` as for `Int`.
    Bool {
        /// `rows` bytes, 0 or 1.
        values: Vec<u8>,
        /// Empty cells.
        mask: Option<Vec<u8>>,
    },
    /// Text, dictionary-coded: `codes` little-endian `i32` into `categories` (in order of first
    /// appearance), -1 where the cell is empty. A column with no value at all is text with
    /// no categories.
    Text {
        /// `rows × 4` bytes.
        codes: Vec<u8>,
        /// The distinct values.
        categories: Vec<String>,
    },
}

/// A column: its header and its cells.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// The header.
    pub name: String,
    /// The cells.
    pub data: ColumnData,
}

/// A results CSV (`requests.csv`, `timeseries.csv`, `links.csv`, `sweep.csv`, `plan.csv`) as
/// typed columns, in header order. A column's type is what all its non-empty cells are:
/// integers, else decimals, else `true`/`false`, else text. Rows: the length of any column.
pub fn read_columns(path: &Path) -> Result<(Vec<Column>, usize), CliError> {
    let io = |source| {
        CliError::Io(IoError {
            path: path.to_path_buf(),
            source,
        })
    };
    let mut r = csv::Reader::from_path(path).map_err(|e| io(std::io::Error::other(e)))?;
    let names: Vec<String> = r
        .headers()
        .map_err(|e| io(std::io::Error::other(e)))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut cells: Vec<Vec<String>> = vec![Vec::new(); names.len()];
    for rec in r.records() {
        let rec = rec.map_err(|e| io(std::io::Error::other(e)))?;
        for (c, cell) in cells.iter_mut().zip(rec.iter()) {
            c.push(cell.to_string());
        }
    }
    let rows = cells.first().map_or(0, Vec::len);
    let columns = names
        .into_iter()
        .zip(cells)
        .map(|(name, c)| Column {
            name,
            data: column_of(&c),
        })
        .collect();
    Ok((columns, rows))
}

/// The narrowest type every non-empty cell of `c` fits.
fn column_of(c: &[String]) -> ColumnData {
    let present = || c.iter().filter(|s| !s.is_empty());
    let mask = || -> Option<Vec<u8>> {
        c.iter()
            .any(String::is_empty)
            .then(|| c.iter().map(|s| u8::from(s.is_empty())).collect())
    };
    let any = present().next().is_some();
    if any && present().all(|s| s.parse::<i64>().is_ok()) {
        let values = c
            .iter()
            .flat_map(|s| s.parse::<i64>().unwrap_or(0).to_le_bytes())
            .collect();
        return ColumnData::Int {
            values,
            mask: mask(),
        };
    }
    if any && present().all(|s| s.parse::<f64>().is_ok()) {
        let values = c
            .iter()
            .flat_map(|s| s.parse::<f64>().unwrap_or(f64::NAN).to_le_bytes())
            .collect();
        return ColumnData::Float { values };
    }
    if any && present().all(|s| s == "true" || s == "false") {
        return ColumnData::Bool {
            values: c.iter().map(|s| u8::from(s == "true")).collect(),
            mask: mask(),
        };
    }
    let mut categories: Vec<String> = Vec::new();
    let mut index = std::collections::BTreeMap::<&str, i32>::new();
    let mut codes = Vec::with_capacity(c.len() * 4);
    for s in c {
        let code = if s.is_empty() {
            -1
        } else {
            *index.entry(s).or_insert_with(|| {
                categories.push(s.clone());
                (categories.len() - 1) as i32
            })
        };
        codes.extend_from_slice(&code.to_le_bytes());
    }
    ColumnData::Text { codes, categories }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cells(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// Each column type from its cells, empties masked, text coded by first appearance.
    #[test]
    fn columns_take_the_narrowest_type_their_cells_fit() {
        let ints = column_of(&cells(&["1", "", "-3"]));
        let mut want = Vec::new();
        for v in [1i64, 0, -3] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(
            ints,
            ColumnData::Int {
                values: want,
                mask: Some(vec![0, 1, 0])
            }
        );
        match column_of(&cells(&["1", "2.5", ""])) {
            ColumnData::Float { values } => {
                let f: Vec<f64> = values
                    .chunks(8)
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                assert_eq!(f[..2], [1.0, 2.5]);
                assert!(f[2].is_nan());
            }
            other => panic!("not a float column: {other:?}"),
        }
        assert_eq!(
            column_of(&cells(&["true", "false"])),
            ColumnData::Bool {
                values: vec![1, 0],
                mask: None
            }
        );
        let text = column_of(&cells(&["b", "", "a", "b"]));
        let codes: Vec<u8> = [0i32, -1, 1, 0]
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect();
        assert_eq!(
            text,
            ColumnData::Text {
                codes,
                categories: cells(&["b", "a"])
            }
        );
        // A column with no value at all is text with no categories.
        assert!(matches!(
            column_of(&cells(&["", ""])),
            ColumnData::Text { categories, .. } if categories.is_empty()
        ));
    }

    /// A dictionary's null is refused by its key; nested tables and arrays become TOML.
    #[test]
    fn a_dictionary_becomes_toml_and_null_names_its_key() {
        let t =
            toml_of_json(r#"{"run": {"name": "x", "seed": 3}, "pools": [{"name": "p"}]}"#).unwrap();
        let back: toml::Table = toml::from_str(&t).unwrap();
        assert_eq!(back["run"]["seed"].as_integer(), Some(3));
        assert_eq!(back["pools"][0]["name"].as_str(), Some("p"));
        let e = toml_of_json(r#"{"pools": [{"server": {"tp_size": null}}]}"#).unwrap_err();
        assert!(e.to_string().contains("pools.0.server.tp_size"), "{e}");
        assert_eq!(e.exit_code(), 2);
    }

    /// A scenario error carries its key, file and line through `Failure`, also from a sweep.
    #[test]
    fn failures_carry_the_key_of_a_scenario_error() {
        let src = Source::Text {
            text: "[run]\nname = 1\n".into(),
            path: "virtual/s.toml".into(),
        };
        let e = src.base().unwrap_err();
        let f = Failure::of(&e);
        assert_eq!(f.exit_code, 2);
        assert_eq!(f.key.as_deref(), Some("run.name"), "{f:?}");
        assert_eq!(f.file.as_deref(), Some(Path::new("virtual/s.toml")));
        let panic = Failure::internal("run", &"boom");
        assert_eq!(panic.exit_code, 4);
        assert!(panic.message.contains("boom"));
    }
}
