//! The results folder read back for `explain`: the summary, the run record (and the scenario
//! rebuilt from it), and the requests counted by outcome per instance and per (prefill,
//! decode) pair, with the first corrupted requests named.

use std::collections::BTreeMap;
use std::path::Path;

use crate::report::schema::{self, ReadError, RequestRow, RunRecord, Summary};
use crate::scenario::{self, Scenario};
use crate::vocab::Outcome;

/// Outcome counts of a group of requests.
#[derive(Clone, Debug, Default)]
pub(super) struct Counts {
    pub(super) routed: u64,
    pub(super) completed: u64,
    pub(super) failed: u64,
    pub(super) corrupted: u64,
    pub(super) unfinished: u64,
    pub(super) aborted: u64,
    pub(super) kinds: BTreeMap<String, u64>,
    /// The earliest end of a prefill forward among them, ns (when a dead shard stopped).
    pub(super) first_prefill_end_ns: Option<u64>,
}

impl Counts {
    fn add(&mut self, r: &RequestRow) {
        self.routed += 1;
        match r.outcome {
            Outcome::Completed => self.completed += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Corrupted => self.corrupted += 1,
            Outcome::Unfinished => self.unfinished += 1,
            Outcome::Aborted => self.aborted += 1,
        }
        if let Some(k) = r.error_kind {
            *self.kinds.entry(k.as_str().to_string()).or_insert(0) += 1;
        }
        if let Some(t) = r.prefill_end_ns {
            self.first_prefill_end_ns = Some(self.first_prefill_end_ns.map_or(t, |m| m.min(t)));
        }
    }
    pub(super) fn kinds_text(&self) -> String {
        self.kinds
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A corrupted request and who it names.
pub(super) struct Corrupted {
    pub(super) id: u64,
    pub(super) victims: String,
    pub(super) corrupted_by: String,
}

/// How many corrupted requests are listed one by one.
const CORRUPTED_LISTED: usize = 10;

/// Everything read from a run.
pub(super) struct Run {
    pub(super) name: String,
    pub(super) seed: u64,
    pub(super) sc: Option<Scenario>,
    /// Why the scenario could not be rebuilt, if it could not.
    pub(super) sc_note: Option<String>,
    pub(super) summary: Summary,
    /// `run.json`, from which capacity levers rebuild the scenario with their changes.
    pub(super) record: RunRecord,
    pub(super) per_instance: BTreeMap<u32, Counts>,
    pub(super) per_pair: BTreeMap<(u32, u32), Counts>,
    pub(super) corrupted: Vec<Corrupted>,
    pub(super) corrupted_total: u64,
    pub(super) corrupted_named: u64,
    /// Every request's arrival and, if it had one, its TTFT, ns (in file order): what the
    /// windows of a run whose rate moves are read from.
    pub(super) arrivals: Vec<(u64, Option<u64>)>,
}

/// The scenario a results folder ran, rebuilt from `run.json` (paths resolve against the
/// original scenario file's folder), with `sets` applied as `--set` would (capacity levers).
pub(super) fn rebuild(record: &RunRecord, sets: &[String]) -> Result<Scenario, String> {
    let text = toml::to_string(&record.scenario).map_err(|e| e.to_string())?;
    let mut sc = scenario::from_str(&text, Path::new(&record.scenario_file), sets)
        .map_err(|e| e.to_string())?;
    // The run's own seed: `run.seed` in the resolved file may differ when `--seed` was given.
    sc.seed = record.seed;
    Ok(sc)
}

/// Reads the results in `dir` and counts its requests per instance, per pair and, for the
/// corrupted ones, by name; a `--summary-only` folder (no `requests.csv`) is an error.
pub(super) fn read_run(dir: &Path) -> Result<Run, ReadError> {
    let summary = schema::read_summary(&dir.join("summary.json"))?;
    let record = schema::read_run(&dir.join("run.json"))?;
    let (sc, sc_note) = match rebuild(&record, &[]) {
        Ok(sc) => (Some(sc), None),
        Err(e) => (None, Some(e)),
    };
    let csv_path = dir.join("requests.csv");
    if !csv_path.is_file() {
        return Err(ReadError::Shape {
            path: csv_path,
            field: ".".into(),
            message:
                "missing (a --summary-only run has no requests.csv; run it without --summary-only)"
                    .into(),
            what: "requests.csv",
        });
    }
    let rows = schema::read_requests(&csv_path)?;
    let mut run = Run {
        name: record.name().to_string(),
        seed: record.seed,
        sc,
        sc_note,
        summary,
        record,
        per_instance: BTreeMap::new(),
        per_pair: BTreeMap::new(),
        corrupted: Vec::new(),
        corrupted_total: 0,
        corrupted_named: 0,
        arrivals: Vec::with_capacity(rows.len()),
    };
    for r in &rows {
        run.arrivals.push((
            r.arrival_ns,
            r.first_token_ns.map(|f| f.saturating_sub(r.arrival_ns)),
        ));
        // A colocated server is both of a row's instances: counted once.
        for i in r.instances() {
            run.per_instance.entry(i).or_default().add(r);
        }
        if let (Some(p), Some(d)) = (r.prefill_instance, r.decode_instance) {
            run.per_pair.entry((p, d)).or_default().add(r);
        }
        if r.outcome == Outcome::Corrupted {
            run.corrupted_total += 1;
            if !r.corrupted_by.is_empty() || !r.victims.is_empty() {
                run.corrupted_named += 1;
            }
            if run.corrupted.len() < CORRUPTED_LISTED {
                run.corrupted.push(Corrupted {
                    id: r.id,
                    victims: r.victims.clone(),
                    corrupted_by: r.corrupted_by.clone(),
                });
            }
        }
    }
    Ok(run)
}
