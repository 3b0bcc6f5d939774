//! Scenario files: parsed with serde (`deny_unknown_fields`), overridden by `--set`, then
//! validated once into a [`Scenario`] that the simulation trusts. Every error names the file,
//! the line where one can be found, the key, and what would be valid.

mod abort_keys;
pub mod expect;
mod fault_keys;
pub mod file;
pub mod locate;
mod parallel;
mod sections;
pub mod set;
mod speculative;
pub mod system;
mod trace_keys;

use std::fmt;
use std::path::{Path, PathBuf};

pub use crate::config::*;
use crate::engine::{Nanos, ns_from_secs_ceil};
use crate::spec::{ModelSpec, model};
use fault_keys::fault;
pub use file::{ArrivalSection, LengthSection, ScenarioFile};
use trace_keys::trace_workload;

/// An invalid scenario: where, which key, and what would be valid.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    /// The scenario file.
    pub file: PathBuf,
    /// 1-based line, where one is known.
    pub line: Option<usize>,
    /// Dotted key path (`pools.decode.server.tp_size`), or empty for the whole file.
    pub key: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(l) = self.line {
            write!(f, ":{l}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ScenarioError {}

/// The checked `[expect]` table of a loaded scenario (`None` when the file has none). It was
/// validated with the scenario; it is read back from the resolved file so the checked
/// configuration, which the simulation reads, carries nothing only `pdsim check` needs.
pub fn expectations(sc: &Scenario) -> Option<expect::Expect> {
    resolved_file(sc).expect
}

/// The scenario file as resolved after `--set`, typed: what `run.json` records and what the
/// verbs above the simulation read keys of (the checked configuration, `config::Scenario`,
/// sits below `scenario/` and so keeps the resolved file as data).
pub fn resolved_file(sc: &Scenario) -> file::ScenarioFile {
    use serde::Deserialize;
    file::ScenarioFile::deserialize(&sc.resolved).expect("the resolved file is a scenario file")
}

/// Reads, overrides and validates a scenario file.
pub fn load(path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        file: path.to_path_buf(),
        line: None,
        key: String::new(),
        message: format!("cannot read the scenario file: {e}"),
    })?;
    from_str(&text, path, sets)
}

/// Parses, overrides and validates scenario `text` read from `path` (used to resolve relative
/// paths and to name the file in errors).
pub fn from_str(text: &str, path: &Path, sets: &[String]) -> Result<Scenario, ScenarioError> {
    from_str_any_autoscaler(text, path, sets)
}

/// Everything [`from_str`] checks except whether the simulator can run the scenario's
/// `[autoscaler]` policy: a scenario whose policy resizes pools passes here, its settings
/// checked. For the autoscaler's tests and the pool-resizing work that will use it; the verbs
/// load through [`from_str`].
pub fn from_str_any_autoscaler(
    text: &str,
    path: &Path,
    sets: &[String],
) -> Result<Scenario, ScenarioError> {
    let err_at = |line: Option<usize>, key: &str, message: String| ScenarioError {
        file: path.to_path_buf(),
        line,
        key: key.to_string(),
        message,
    };
    // Deserializing the text itself keeps TOML's spans, so type errors and unknown keys get a
    // line; serde_path_to_error adds the key they happened at.
    let file = if sets.is_empty() {
        let de = toml::Deserializer::parse(text).map_err(|e| toml_error(text, path, &e, ""))?;
        serde_path_to_error::deserialize::<_, ScenarioFile>(de)
            .map_err(|e| keyed_error(text, path, None, e, ""))?
    } else {
        let mut table: toml::Table =
            parse_table(text).map_err(|e| toml_error(text, path, &e, ""))?;
        for s in sets {
            set::apply_set(&mut table, s).map_err(|m| {
                // The key is the --set argument's own (`KEY=VALUE`), as the user wrote it.
                let key = s.split_once('=').map_or(s.as_str(), |(k, _)| k).trim();
                err_at(None, key, m)
            })?;
        }
        let value = toml::Value::Table(table.clone());
        let file = serde_path_to_error::deserialize::<_, ScenarioFile>(value)
            .map_err(|e| keyed_error(text, path, Some(&table), e, " (after --set)"))?;
        return validate(file, text, path, Some(&table));
    };
    validate(file, text, path, None)
}

/// Whether the dotted `key` is written in `table` (the scenario after `--set`), or, without
/// one, in `text`: the keys a `hardware.system` fills in must not be contradicted.
fn key_given(text: &str, table: Option<&toml::Table>, key: &str) -> bool {
    let parsed;
    let root = match table {
        Some(t) => t,
        None => match parse_table(text) {
            Ok(t) => {
                parsed = t;
                &parsed
            }
            Err(_) => return false,
        },
    };
    let mut v: Option<&toml::Value> = None;
    let mut cur = root;
    for seg in key.split('.') {
        v = cur.get(seg);
        match v {
            Some(toml::Value::Table(t)) => cur = t,
            Some(_) => {}
            None => return false,
        }
    }
    v.is_some()
}

fn toml_error(text: &str, path: &Path, e: &toml::de::Error, suffix: &str) -> ScenarioError {
    let line = e
        .span()
        .filter(|_| suffix.is_empty())
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    ScenarioError {
        file: path.to_path_buf(),
        line,
        key: String::new(),
        message: format!("{}{suffix}", toml_message(e.message())),
    }
}

/// A scenario's text as a TOML table. An integer literal above 2^63 − 1 — TOML's largest,
/// which a table cannot hold — is read as its decimal string, so a `run.seed` given as one
/// (which the typed reader takes directly) reads the same through `--set`, `plan` and
/// `sweep` (which edit the table); for any other key the string is a type error naming it.
pub fn parse_table(text: &str) -> Result<toml::Table, toml::de::Error> {
    let mut owned: Option<String> = None;
    // Each pass quotes one literal; a scenario holds a handful of integers at most.
    for _ in 0..64 {
        let t = owned.as_deref().unwrap_or(text);
        match toml::from_str::<toml::Table>(t) {
            Ok(table) => return Ok(table),
            Err(e) => {
                let span = e
                    .span()
                    .filter(|_| e.message().contains("u64 value was too large"));
                let Some(span) = span else { return Err(e) };
                let lit = t.get(span.clone()).unwrap_or("");
                if lit.is_empty() || !lit.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(e);
                }
                owned = Some(format!("{}\"{lit}\"{}", &t[..span.start], &t[span.end..]));
            }
        }
    }
    toml::from_str::<toml::Table>(owned.as_deref().unwrap_or(text))
}

/// TOML's own message, with the one that names no bound given one: an integer literal above
/// i64's range (toml reads it, then cannot hold it in a table) — in a scenario that can only
/// be a seed meant as a `u64`, and a seed that large is written quoted.
fn toml_message(m: &str) -> String {
    let m = m.trim_end();
    if m.contains("u64 value was too large") {
        format!(
            "an integer above 9223372036854775807, TOML's largest; run.seed takes {}",
            file::SEED_RANGE
        )
    } else {
        m.to_string()
    }
}

/// A deserialization error with the dotted key it happened at: pools are named as the
/// contract names them (`pools.decode.server.tp_size`, not `pools[1]...`), arrays of tables
/// by index (`faults[0].link`). The line is TOML's when it knows one, else the key's.
fn keyed_error(
    text: &str,
    path: &Path,
    table: Option<&toml::Table>,
    e: serde_path_to_error::Error<toml::de::Error>,
    suffix: &str,
) -> ScenarioError {
    let mut key = contract_key(&e.path().to_string(), text, table);
    // An error inside `workload.arrival`'s nested tables is reported at `workload.arrival`:
    // find the key it is at by reading them alone, and keep the outer error's line.
    let outer_line = toml_error(text, path, e.inner(), suffix).line;
    let e = match (key == "workload.arrival")
        .then(|| nested_arrival_error(text, table))
        .flatten()
    {
        Some((prefix, value, inner)) => {
            let sub = inner.path().to_string();
            key = match sub.as_str() {
                // Still inside a tagged enum (a rate profile's shape): a value of the wrong
                // type is named by the one field that holds it.
                "" | "?" | "." => match field_of_wrong_type(&value, inner.inner().message()) {
                    Some(field) => format!("{prefix}.{field}"),
                    None => prefix,
                },
                s if s.starts_with('[') => format!("{prefix}{s}"),
                s => format!("{prefix}.{s}"),
            };
            inner
        }
        None => {
            // A tagged enum's own field of the wrong type (`workload.arrival.rate_per_s`,
            // `workload.input_tokens.mean`) comes back at the enum's key too.
            if let Some(field) = value_at(text, table, &key)
                .and_then(|v| field_of_wrong_type(&v, e.inner().message()))
            {
                key = format!("{key}.{field}");
            }
            e
        }
    };
    // A missing field has no path of its own: name it under its table.
    if let Some(field) = e
        .inner()
        .message()
        .strip_prefix("missing field `")
        .and_then(|m| m.split('`').next())
    {
        key = if key.is_empty() {
            field.to_string()
        } else {
            format!("{key}.{field}")
        };
    }
    let mut err = toml_error(text, path, e.inner(), suffix);
    err.line = err.line.or(outer_line);
    if let Some(hint) = did_you_mean(e.inner().message()) {
        err.message = format!(
            "{}; did you mean `{hint}`?{suffix}",
            e.inner().message().trim_end()
        );
    }
    if err.line.is_none() && !key.is_empty() {
        err.line = locate::line_of(text, &key);
    }
    err.key = key;
    err
}

/// serde reads an internally tagged enum (`workload.arrival`, tagged by `process`) from a
/// buffer, which hides the path below it: an error in its nested tables (`rate_profile`,
/// itself tagged by `shape`, and `steps`) comes back at `workload.arrival`. Each is read
/// alone again here; the first that fails gives its key (`workload.arrival.rate_profile`,
/// `workload.arrival.steps`) and the error below it.
fn nested_arrival_error(
    text: &str,
    table: Option<&toml::Table>,
) -> Option<(
    String,
    toml::Value,
    serde_path_to_error::Error<toml::de::Error>,
)> {
    let arrival = value_at(text, table, "workload.arrival")?;
    if let Some(p) = arrival.get("rate_profile")
        && let Err(e) = serde_path_to_error::deserialize::<_, file::RateProfileSection>(p.clone())
    {
        return Some(("workload.arrival.rate_profile".to_string(), p.clone(), e));
    }
    if let Some(s) = arrival.get("steps")
        && let Err(e) = serde_path_to_error::deserialize::<_, Vec<file::RateStep>>(s.clone())
    {
        return Some(("workload.arrival.steps".to_string(), s.clone(), e));
    }
    None
}

/// The value at dotted `key` of `table` (the scenario after `--set`), or, without one, of
/// `text` parsed (`None` when absent, or when `key` names an array element).
fn value_at(text: &str, table: Option<&toml::Table>, key: &str) -> Option<toml::Value> {
    if key.is_empty() || key.contains('[') {
        return None;
    }
    let parsed;
    let root = match table {
        Some(t) => t,
        None => {
            parsed = parse_table(text).ok()?;
            &parsed
        }
    };
    let mut segs = key.split('.');
    let mut v = root.get(segs.next()?)?;
    for seg in segs {
        v = v.get(seg)?;
    }
    Some(v.clone())
}

/// For serde's "invalid type: string \"x\", expected f64" about a field of `table` it cannot
/// name, the one field whose value is that one (`None` when none or several are).
fn field_of_wrong_type(table: &toml::Value, message: &str) -> Option<String> {
    let given = message
        .strip_prefix("invalid type: ")?
        .split_once(", expected")?
        .0;
    let mut found = table.as_table()?.iter().filter(|(_, v)| {
        let shown = match v {
            toml::Value::String(s) => format!("string {s:?}"),
            toml::Value::Integer(i) => format!("integer `{i}`"),
            toml::Value::Float(f) => format!("floating point `{f}`"),
            toml::Value::Boolean(b) => format!("boolean `{b}`"),
            toml::Value::Array(_) => "sequence".to_string(),
            toml::Value::Table(_) => "map".to_string(),
            toml::Value::Datetime(_) => return false,
        };
        shown == given
    });
    match (found.next(), found.next()) {
        (Some((k, _)), None) => Some(k.clone()),
        _ => None,
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`" (or variant), the valid name
/// closest to `x`, when one is close enough to be a likely typo.
fn did_you_mean(message: &str) -> Option<String> {
    let (given, rest) = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|p| message.strip_prefix(p))?
        .split_once('`')?;
    closest(given, rest.split('`').skip(1).step_by(2)).map(str::to_string)
}

pub(crate) use crate::vocab::suggest::{closest, suggestion};

/// `pools[1].server.tp_size` → `pools.<name of pool 1>.server.tp_size` (when the pool has a
/// name); `?` (serde's placeholder for the root) → empty.
fn contract_key(raw: &str, text: &str, table: Option<&toml::Table>) -> String {
    if raw == "?" || raw == "." || raw.is_empty() {
        return String::new();
    }
    let Some(rest) = raw.strip_prefix("pools[") else {
        return raw.to_string();
    };
    let Some((index, tail)) = rest.split_once(']') else {
        return raw.to_string();
    };
    let owned;
    let table = match table {
        Some(t) => t,
        None => match parse_table(text) {
            Ok(t) => {
                owned = t;
                &owned
            }
            Err(_) => return raw.to_string(),
        },
    };
    let name = index.parse::<usize>().ok().and_then(|i| {
        table
            .get("pools")?
            .as_array()?
            .get(i)?
            .get("name")?
            .as_str()
            .map(str::to_string)
    });
    match name {
        Some(n) => format!("pools.{n}{tail}"),
        None => raw.to_string(),
    }
}

struct Checker<'a> {
    text: &'a str,
    path: &'a Path,
    /// Every file the scenario names, as written and as resolved (see [`Scenario::inputs`]).
    inputs: std::cell::RefCell<Vec<(String, PathBuf)>>,
    /// What a calibration file says it was measured on, to warn when it is used elsewhere.
    measured: std::cell::RefCell<Option<crate::spec::calibration::MeasuredOn>>,
}

impl Checker<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.path.to_path_buf(),
            line: locate::line_of(self.text, key),
            key: key.to_string(),
            message: message.into(),
        }
    }

    fn positive(&self, key: &str, v: f64, what: &str) -> Result<f64, ScenarioError> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(self.err(key, format!("must be a positive number ({what}), got {v}")))
        }
    }

    /// A positive hardware figure no larger than `max` (so derived rates stay finite).
    fn bounded(&self, key: &str, v: f64, what: &str, max: f64) -> Result<f64, ScenarioError> {
        let v = self.positive(key, v, what)?;
        if v > max {
            return Err(self.err(
                key,
                format!("{v} {what} is above the bound of {max} {what}, far beyond any GPU today"),
            ));
        }
        Ok(v)
    }

    fn non_negative(&self, key: &str, v: f64, what: &str) -> Result<f64, ScenarioError> {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(self.err(key, format!("must be ≥ 0 ({what}), got {v}")))
        }
    }

    /// A log-normal's coefficient of variation: 0 (no spread) … [`limits::MAX_LOGNORMAL_CV`].
    fn lognormal_cv(&self, key: &str, v: f64) -> Result<f64, ScenarioError> {
        let v = self.non_negative(key, v, "coefficient of variation")?;
        if v > limits::MAX_LOGNORMAL_CV {
            return Err(self.err(
                key,
                format!(
                    "must be at most {} (a log-normal's σ² = ln(1 + cv²)), got {v}",
                    limits::MAX_LOGNORMAL_CV
                ),
            ));
        }
        Ok(v)
    }

    /// A duration in seconds: finite, > 0 (or ≥ 0 when `zero_ok`), and within
    /// [`limits::MAX_DURATION_S`] so that no sum of durations overflows the `u64` ns clock.
    fn duration(&self, key: &str, v: f64, zero_ok: bool) -> Result<f64, ScenarioError> {
        let v = if zero_ok {
            self.non_negative(key, v, "seconds")?
        } else {
            self.positive(key, v, "seconds")?
        };
        self.within_clock(key, v, 1.0, "s")
    }

    /// `v`, in a unit of `unit_s` seconds written `unit`, must not exceed the clock bound.
    fn within_clock(
        &self,
        key: &str,
        v: f64,
        unit_s: f64,
        unit: &str,
    ) -> Result<f64, ScenarioError> {
        let max = limits::MAX_DURATION_S / unit_s;
        if v <= max {
            Ok(v)
        } else {
            Err(self.err(
                key,
                format!(
                    "{} {unit} is longer than the simulator's bound of {max:e} {unit} (1e9 s ≈ 31.7 years: time is u64 nanoseconds, ≈ 1.8e10 s in all, and a run adds several durations together)",
                    short(v)
                ),
            ))
        }
    }

    /// `rel` resolved against the scenario's folder, and recorded as an input of the scenario
    /// (every file a scenario reads goes through here).
    fn resolve_path(&self, rel: &str) -> PathBuf {
        let base = self.path.parent().unwrap_or(Path::new("."));
        let p = base.join(rel);
        let mut inputs = self.inputs.borrow_mut();
        if !inputs.iter().any(|(r, _)| r == rel) {
            inputs.push((rel.to_string(), p.clone()));
        }
        p
    }

    fn model(&self, key: &str, r: &file::ModelRef) -> Result<ModelSpec, ScenarioError> {
        match (&r.preset, &r.config) {
            // A Hugging Face id reads as the preset of its layout, as `lint` and `plan`'s
            // launch lines read `--model-path` (`spec::launch::preset_for`).
            (Some(p), None) => model::preset(p)
                .or_else(|| hf_preset(p).and_then(model::preset))
                .ok_or_else(|| {
                self.err(
                    &format!("{key}.preset"),
                    format!(
                        "unknown model preset {p:?}; valid presets: {} (or a Hugging Face id of one, e.g. meta-llama/Llama-3.1-8B-Instruct){}",
                        model::MODEL_PRESETS.join(", "),
                        suggestion(p, model::MODEL_PRESETS)
                    ),
                )
            }),
            (None, Some(c)) => {
                let p = self.resolve_path(c);
                crate::spec::hf::load_model_config(&p)
                    .map_err(|e| self.err(&format!("{key}.config"), e.to_string()))
            }
            _ => Err(self.err(
                key,
                "give exactly one of preset = \"<name>\" or config = \"<path to config.json>\"",
            )),
        }
    }
}

fn validate(
    mut file: ScenarioFile,
    text: &str,
    path: &Path,
    table: Option<&toml::Table>,
) -> Result<Scenario, ScenarioError> {
    let c = Checker {
        text,
        path,
        inputs: Default::default(),
        measured: Default::default(),
    };
    system::resolve(&c, &mut file, &|k| key_given(text, table, k))?;
    let run = &file.run;
    let (duration_s, drain_s) = sections::run(&c, run)?;
    let hw = &file.hardware;
    let (gpu, calibration, compute) = sections::hardware(&c, hw)?;
    let domain_gpus = sections::nvlink_domain(&c, hw)?;
    let mut pools = sections::pools(&c, &file, &gpu, domain_gpus)?;
    sections::overlap_schedule(&c, &pools, &calibration, &compute)?;
    // A decode pool that offloads to the store needs the blocks its outputs complete named.
    let offload_key = pools.iter().find(|p| p.decode_offload.is_some()).map(|p| {
        format!(
            "pools.{}.server.disaggregation_decode_enable_offload_kvcache",
            p.name
        )
    });
    // So does a decode radix tree fed by a trace (a synthetic workload without sessions
    // just never hits it).
    let offload_key = offload_key.or_else(|| {
        let p = pools.iter().find(|p| p.decode_radix)?;
        file.workload.trace.as_ref().map(|_| {
            format!(
                "pools.{}.server.disaggregation_decode_enable_radix_cache",
                p.name
            )
        })
    });
    let workload = sections::workload(&c, &file.workload, offload_key.as_deref())?;
    if let (Workload::Synthetic { arrival, .. } | Workload::Sessions { arrival, .. }, None) =
        (&workload, run.max_requests)
    {
        let most = arrival.peak_rate_per_s() * duration_s;
        if most > limits::MAX_UNBOUNDED_ARRIVALS {
            return Err(c.err(
                "workload.arrival.rate_per_s",
                format!(
                    "up to {} req/s over run.duration_s = {} s is ~{most:.1e} requests, beyond the {:.0e} a run may be asked for without a bound: lower the rate or set run.max_requests",
                    short(arrival.peak_rate_per_s()),
                    short(duration_s),
                    limits::MAX_UNBOUNDED_ARRIVALS
                ),
            ));
        }
    }
    let (sglang, slo) = sections::sglang_and_slo(&c, &file)?;
    let colocated = pools
        .iter()
        .any(|p| p.role == crate::config::Role::Colocated);
    let router = sections::router(&c, &file.router, colocated)?;
    // `--disaggregation-enable-kv-checksum` digests a PD transfer; a plain server has none.
    if colocated && sglang.kv_checksum {
        return Err(c.err(
            "sglang.kv_checksum",
            "--disaggregation-enable-kv-checksum checks the KV a prefill transfers to a decode; this cluster has colocated servers and no transfer: leave kv_checksum out, or use prefill and decode pools".to_string(),
        ));
    }
    transfer_paths(&c, &sglang, &pools, colocated)?;
    let trace_deadlines = match &workload {
        Workload::Trace { source } => source.deadlines,
        _ => false,
    };
    let aborts = abort_keys::aborts(&c, &file, colocated, trace_deadlines)?;
    speculative::check_pairs(&c, &pools)?;
    let plans = sections::plans(&c, &pools, &sglang, gpu.hbm_bytes_per_s)?;
    let radix_notes = sections::decode_radix_scenario(&c, &pools, sglang.version, &plans)?;
    sections::expect(&c, file.expect.as_ref())?;
    // A resizing policy grows each pool to the slots it may fill before anything is placed.
    let autoscaler = sections::autoscaler(&c, &file, &pools)?;
    let lifecycle = sections::lifecycle(&c, &file, &autoscaler, &mut pools)?;
    let placement = place(&c, &pools, &plans, &gpu, (hw.gpus_per_node, domain_gpus))?;
    let nodes = placement.nodes;
    let mut fabric = sections::fabric(
        &c,
        &file.fabric,
        &gpu,
        (hw.gpus_per_node, domain_gpus),
        nodes,
    )?;
    // `mooncake_tcp`: the same Mooncake engine over its TCP transport, at the stated rate.
    if let Some(tcp) = sglang.tcp_bytes_per_ns {
        fabric.model.engine_bytes_per_ns = fabric.model.engine_bytes_per_ns.min(tcp);
    }
    // EFA is Mooncake's transport (`MOONCAKE_PROTOCOL=efa`); NIXL and MORI pick theirs otherwise.
    if fabric.transport == crate::fabric::Transport::Efa
        && !sglang.transfer_backend.mooncake_manager()
    {
        return Err(c.err(
            "fabric.transport",
            format!(
                "\"efa\" is Mooncake's EFA transport (MOONCAKE_PROTOCOL=efa); transfer_backend = {:?} does not use it: leave fabric.transport at \"rdma\", or use transfer_backend = \"mooncake\"",
                sglang.transfer_backend.as_str()
            ),
        ));
    }
    let mut faults = Vec::new();
    for (i, f) in file.faults.iter().enumerate() {
        faults.push(fault(&c, i, f, &pools, &fabric)?);
    }
    faults.sort_by_key(|f| f.at_ns);
    let kv_store = sections::kv_store(&c, &file, &pools, nodes)?;

    let mut notes = calibration_notes(&c, &calibration, &gpu.name, &pools);
    notes.extend(speculative::notes(&pools));
    notes.extend(radix_notes);
    notes.extend(hf_id_notes(&file));
    Ok(Scenario {
        notes,
        kv_store,
        faults,
        placement,
        plans,
        name: run.name.clone(),
        seed: run.seed,
        duration_ns: ns_from_secs_ceil(duration_s),
        max_requests: run.max_requests,
        drain_timeout_ns: ns_from_secs_ceil(drain_s),
        gpu,
        calibration,
        compute,
        calibration_measured: c.measured.borrow().clone(),
        gpus_per_node: hw.gpus_per_node,
        nvlink_domain_gpus: domain_gpus,
        usd_per_gpu_hour: match hw.usd_per_gpu_hour {
            Some(u) => {
                Some(c.non_negative("hardware.usd_per_gpu_hour", u, "US dollars per GPU-hour")?)
            }
            None => None,
        },
        billing: match hw.billing.as_deref() {
            None => crate::config::Billing::Gpu,
            Some(b) => crate::config::Billing::parse(b).ok_or_else(|| {
                c.err(
                    "hardware.billing",
                    format!(
                        "{b:?} is not a billing; valid: \"gpu\" (the GPUs the pools use, the default) or \"node\" (every GPU of the nodes they span, idle ones included){}",
                        suggestion(b, &crate::config::BILLINGS)
                    ),
                )
            })?,
        },
        pools,
        fabric,
        workload,
        aborts,
        router,
        sglang,
        slo,
        autoscaler,
        lifecycle,
        source: path.to_path_buf(),
        resolved: serde_json::to_value(&file).expect("a scenario file serializes"),
        inputs: c.inputs.take(),
    })
}

/// Warnings when a calibration file measured on one model, GPU or TP is used for another:
/// legal (a nearby fit may be the best there is) but its step times are extrapolated.
/// The preset a Hugging Face id (`org/name`, as `--model-path` takes it) names; a bare name
/// must be a preset as written (a typo gets its "did you mean").
fn hf_preset(p: &str) -> Option<&'static str> {
    p.contains('/')
        .then(|| crate::spec::launch::preset_for(p))
        .flatten()
}

/// A note for each `model.preset` given as a Hugging Face id: the preset it was read as.
fn hf_id_notes(file: &file::ScenarioFile) -> Vec<String> {
    let refs = std::iter::once(("model".to_string(), file.model.as_ref())).chain(
        file.pools
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("pools[{i}].model"), p.model.as_ref())),
    );
    refs.filter_map(|(key, r)| {
        let p = r?.preset.as_deref()?;
        if model::preset(p).is_some() {
            return None;
        }
        let as_preset = hf_preset(p)?;
        Some(format!(
            "{key}.preset {p:?} is read as the preset {as_preset} (the same layout; suffixes such as -Instruct do not change it)"
        ))
    })
    .collect()
}

fn calibration_notes(c: &Checker, calibration: &str, gpu: &str, pools: &[Pool]) -> Vec<String> {
    let Some(m) = c.measured.borrow().clone() else {
        return Vec::new();
    };
    let norm = |s: &str| {
        let base = Path::new(s)
            .file_name()
            .map_or(s.to_string(), |f| f.to_string_lossy().into_owned());
        base.to_lowercase()
            .trim_end_matches(".json")
            .trim_end_matches(".config")
            .to_string()
    };
    let mut out = Vec::new();
    if !m.gpu.eq_ignore_ascii_case(gpu) {
        out.push(format!(
            "hardware.calibration {calibration:?} was measured on {}, and this scenario runs on {gpu}: its step times are extrapolated",
            m.gpu
        ));
    }
    for p in pools {
        if norm(&m.model) != norm(&p.model.name) {
            out.push(format!(
                "hardware.calibration {calibration:?} was measured with model {}, and pool {} serves {}: its step times are extrapolated",
                m.model, p.name, p.model.name
            ));
        }
        if m.tp != p.server.tp_size {
            out.push(format!(
                "hardware.calibration {calibration:?} was measured at TP {}, and pool {} runs TP {}: its step times are extrapolated",
                m.tp, p.name, p.server.tp_size
            ));
        }
    }
    out
}

/// Checks the cluster's size before placing it (the placement allocates per GPU), places it,
/// and checks that no two pools share a GPU and that the page records fit in memory.
fn place(
    c: &Checker,
    pools: &[Pool],
    plans: &std::collections::BTreeMap<(usize, usize), std::sync::Arc<crate::layout::PairPlan>>,
    gpu: &crate::spec::GpuSpec,
    (gpus_per_node, domain_gpus): (u32, u32),
) -> Result<crate::config::capacity::Placement, ScenarioError> {
    use crate::config::capacity;
    let mut total_gpus = 0u64;
    for p in pools {
        if let Some(n) = p.node
            && n >= limits::MAX_NODES
        {
            return Err(c.err(
                &format!("pools.{}.node", p.name),
                format!(
                    "must be a node index below {} (0..={}), got {n}",
                    limits::MAX_NODES,
                    limits::MAX_NODES - 1
                ),
            ));
        }
        if p.gpu != 0 {
            let key = format!("pools.{}.gpu", p.name);
            if p.node.is_none() {
                return Err(c.err(
                    &key,
                    "places a pool on a GPU of a given node: set pools.node too (e.g. node = 0, gpu = 4)",
                ));
            }
            if p.gpu >= gpus_per_node {
                return Err(c.err(
                    &key,
                    format!(
                        "must be a GPU index of the node, 0..{} (hardware.gpus_per_node = {gpus_per_node}), got {}",
                        gpus_per_node - 1,
                        p.gpu
                    ),
                ));
            }
            if !p.gpu.is_multiple_of(p.server.gpus()) {
                return Err(c.err(
                    &key,
                    format!(
                        "must be a multiple of tp_size × pp_size = {} (an instance takes that many GPUs, aligned to it), got {}",
                        p.server.gpus(), p.gpu
                    ),
                ));
            }
        }
        total_gpus += u64::from(p.instances) * u64::from(p.server.gpus());
        if total_gpus > u64::from(limits::MAX_CLUSTER_GPUS) {
            return Err(c.err(
                &format!("pools.{}.instances", p.name),
                format!(
                    "{} instance(s) × {} GPUs (tp_size × pp_size) bring the cluster to {total_gpus} GPUs, above the bound of {} GPUs in all pools together",
                    p.instances,
                    p.server.gpus(),
                    limits::MAX_CLUSTER_GPUS
                ),
            ));
        }
    }
    let placement = capacity::place_pools(pools, gpus_per_node, domain_gpus);
    // Two pools placed on the same GPUs (e.g. both at `node = 0`) would share their HBM.
    let mut owner: std::collections::BTreeMap<crate::fabric::GpuId, usize> = Default::default();
    let mut instance = 0usize;
    for (pi, p) in pools.iter().enumerate() {
        for _ in 0..p.instances {
            for &g in &placement.gpus[instance] {
                if let Some(&other) = owner.get(&g)
                    && other != pi
                {
                    let (a, b) = (&pools[other].name, &p.name);
                    return Err(c.err(
                        &format!("pools.{b}.node"),
                        format!(
                            "pools {a:?} and {b:?} are both placed on GPU {} of node {}: pools cannot share GPUs; give pool {b:?} a node = that pool {a:?} does not use, or leave node out to take the next free node",
                            g.local, g.node
                        ),
                    ));
                }
                owner.insert(g, pi);
            }
            instance += 1;
        }
    }
    let mut bytes = 0u64;
    for (pi, p) in pools.iter().enumerate() {
        let each = capacity::page_record_bytes(gpu, p, capacity::oracle_watched(pools, plans, pi));
        bytes = bytes.saturating_add(each.saturating_mul(u64::from(p.servers())));
        if bytes > limits::MAX_PAGE_RECORD_BYTES {
            // Each DP rank keeps its own pages: the records count per rank.
            let servers = if p.servers() == p.instances {
                format!("{} instance(s)", p.instances)
            } else {
                format!(
                    "{} instance(s) × {} DP ranks",
                    p.instances,
                    p.servers() / p.instances.max(1)
                )
            };
            return Err(c.err(
                &format!("pools.{}.instances", p.name),
                format!(
                    "the KV page and state-slot records of the instances up to this pool take {:.1} GiB ({servers} of {:.1} MiB each here), above the bound of {} GiB; use fewer instances, less hardware.hbm_gb or a larger page_size",
                    bytes as f64 / f64::from(1u32 << 30),
                    each as f64 / f64::from(1u32 << 20),
                    limits::MAX_PAGE_RECORD_BYTES >> 30
                ),
            ));
        }
    }
    Ok(placement)
}

/// `v` for a message: scientific notation when it is very large or very small.
fn short(v: f64) -> String {
    if v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

fn divisors(n: u32) -> String {
    (1..=n)
        .filter(|d| n.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn arrival(c: &Checker, a: &ArrivalSection) -> Result<Arrival, ScenarioError> {
    let base = arrival_process(c, a)?;
    let (profile, refused) = match a {
        ArrivalSection::Poisson { rate_profile, .. }
        | ArrivalSection::Constant { rate_profile, .. }
        | ArrivalSection::Gamma { rate_profile, .. } => (rate_profile, None),
        ArrivalSection::OnOff { rate_profile, .. } => (rate_profile, Some("on_off")),
        ArrivalSection::Schedule { rate_profile, .. } => (rate_profile, Some("schedule")),
    };
    let Some(p) = profile else {
        return Ok(base);
    };
    if let Some(process) = refused {
        return Err(c.err(
            "workload.arrival.rate_profile",
            format!("process = \"{process}\" already moves its rate over time; give the rate profile to a poisson, constant or gamma process instead"),
        ));
    }
    Ok(Arrival::Profiled {
        base: Box::new(base),
        profile: std::sync::Arc::new(rate_profile(c, p)?),
    })
}

/// `workload.arrival.rate_profile`, built ([`crate::config::rate_profile`]); every error
/// names the key it is about.
fn rate_profile(
    c: &Checker,
    p: &file::RateProfileSection,
) -> Result<crate::config::rate_profile::RateProfile, ScenarioError> {
    use crate::config::rate_profile::RateProfile;
    let key = "workload.arrival.rate_profile";
    let ns = |k: &str, v: f64| -> Result<f64, ScenarioError> {
        Ok(c.duration(&format!("{key}.{k}"), v, false)? * 1e9)
    };
    match p {
        file::RateProfileSection::Piecewise {
            at_s,
            factor,
            interpolate,
            repeat_s,
        } => {
            for (i, &t) in at_s.iter().enumerate() {
                if !t.is_finite() || t < 0.0 {
                    return Err(c.err(
                        &format!("{key}.at_s"),
                        format!("point {} is at {t} s: times are finite and ≥ 0", i + 1),
                    ));
                }
                c.within_clock(&format!("{key}.at_s"), t, 1.0, "s")?;
            }
            let at: Vec<f64> = at_s.iter().map(|t| t * 1e9).collect();
            let repeat = repeat_s.map(|r| ns("repeat_s", r)).transpose()?;
            let built = match interpolate {
                file::Interpolate::Step => RateProfile::steps(&at, factor, repeat),
                file::Interpolate::Linear => RateProfile::linear(&at, factor, repeat),
            };
            built.map_err(|e| c.err(key, e))
        }
        file::RateProfileSection::Diurnal {
            period_s,
            peak_s,
            trough,
        } => {
            let period = ns("period_s", *period_s)?;
            if !peak_s.is_finite() {
                return Err(c.err(
                    &format!("{key}.peak_s"),
                    format!("must be a number of seconds, got {peak_s}"),
                ));
            }
            RateProfile::diurnal(period, peak_s * 1e9, *trough)
                .map_err(|e| c.err(&format!("{key}.trough"), e))
        }
        file::RateProfileSection::Trace {
            path,
            format,
            bin_s,
            span_s,
        } => {
            let pk = format!("{key}.path");
            let file = c.resolve_path(path);
            let fmt = match format {
                Some(f) => f.parse::<crate::workload::trace::TraceFormat>().map_err(|_| {
                    c.err(
                        &format!("{key}.format"),
                        format!("unknown trace format {f:?}; valid: mooncake, azure, vidur, csv (or leave it out to detect)"),
                    )
                })?,
                None => crate::workload::trace::detect_format(&file)
                    .map_err(|e| c.err(&pk, e.to_string()))?,
            };
            let mut arrivals = Vec::new();
            let rows = crate::workload::trace::TraceReader::open(&file, fmt)
                .map_err(|e| c.err(&pk, e.to_string()))?;
            for row in rows {
                arrivals.push(row.map_err(|e| c.err(&pk, e.to_string()))?.arrival_ns);
            }
            let bin = ns("bin_s", *bin_s)?;
            let span = span_s.map(|s| ns("span_s", s)).transpose()?;
            RateProfile::from_arrivals(&arrivals, bin, span).map_err(|e| c.err(&pk, e))
        }
    }
}

/// The process of `workload.arrival` without its rate profile.
fn arrival_process(c: &Checker, a: &ArrivalSection) -> Result<Arrival, ScenarioError> {
    let key = "workload.arrival.rate_per_s";
    let secs = |k: &str, v: f64| -> Result<Nanos, ScenarioError> {
        Ok(ns_from_secs_ceil(c.duration(
            &format!("workload.arrival.{k}"),
            v,
            false,
        )?))
    };
    Ok(match a {
        ArrivalSection::Poisson { rate_per_s, .. } => Arrival::Poisson {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
        },
        ArrivalSection::Constant { rate_per_s, .. } => Arrival::Constant {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
        },
        ArrivalSection::Gamma { rate_per_s, cv, .. } => Arrival::Gamma {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second")?,
            cv: {
                let (lo, hi) = limits::GAMMA_CV_RANGE;
                let cv = c.positive(
                    "workload.arrival.cv",
                    *cv,
                    "coefficient of variation; 1 is Poisson",
                )?;
                if !(lo..=hi).contains(&cv) {
                    return Err(c.err(
                        "workload.arrival.cv",
                        format!("must be in [{lo:e}, {hi:e}], got {}: below {lo:e} the gaps are constant to one part in a million (use process = \"constant\"), above {hi:e} nearly every gap is 0 ns", short(cv)),
                    ));
                }
                cv
            },
        },
        ArrivalSection::OnOff {
            rate_per_s,
            on_s,
            off_s,
            ..
        } => Arrival::OnOff {
            rate_per_s: c.positive(key, *rate_per_s, "requests per second while on")?,
            on_ns: secs("on_s", *on_s)?,
            off_ns: ns_from_secs_ceil(c.duration("workload.arrival.off_s", *off_s, true)?),
        },
        ArrivalSection::Schedule { steps, .. } => {
            let k = "workload.arrival.steps";
            if steps.is_empty() {
                return Err(c.err(
                    k,
                    "needs at least one step, e.g. steps = [{ until_s = 60, rate_per_s = 5 }]",
                ));
            }
            let mut out = Vec::new();
            let mut last = 0.0;
            for (i, st) in steps.iter().enumerate() {
                if !(st.until_s.is_finite() && st.until_s > last) {
                    return Err(c.err(
                        k,
                        format!("step {} ends at until_s = {}, which must be later than the step before ({last} s)", i + 1, st.until_s),
                    ));
                }
                c.non_negative(k, st.rate_per_s, "requests per second")?;
                c.within_clock(k, st.until_s, 1.0, "s")?;
                last = st.until_s;
                out.push((ns_from_secs_ceil(st.until_s), st.rate_per_s));
            }
            if out.iter().all(|s| s.1 == 0.0) {
                return Err(c.err(k, "every step has rate 0: no request would ever arrive"));
            }
            Arrival::Schedule {
                steps: std::sync::Arc::new(out),
            }
        }
    })
}

fn lengths(c: &Checker, key: &str, l: &LengthSection) -> Result<Lengths, ScenarioError> {
    if let LengthSection::Empirical { path } = l {
        let p = c.resolve_path(path);
        let pairs = crate::workload::trace::read_lengths(&p)
            .map_err(|e| c.err(&format!("{key}.path"), e.to_string()))?;
        let output = key.ends_with("output_tokens");
        let v: Vec<u32> = pairs
            .iter()
            .map(|&(i, o)| if output { o } else { i })
            .collect();
        return Ok(Lengths::Empirical(std::sync::Arc::new(v)));
    }
    Ok(match *l {
        LengthSection::Empirical { .. } => unreachable!("handled above"),
        LengthSection::Fixed { value } => {
            if value == 0 {
                return Err(c.err(&format!("{key}.value"), "must be ≥ 1 token"));
            }
            Lengths::Fixed(value)
        }
        LengthSection::Uniform { min, max } => {
            if min == 0 || min > max {
                return Err(c.err(
                    key,
                    format!("needs 1 ≤ min ≤ max tokens, got min = {min}, max = {max}"),
                ));
            }
            Lengths::Uniform { min, max }
        }
        LengthSection::Lognormal { mean, cv, max, min } => {
            let mean = c.positive(&format!("{key}.mean"), mean, "tokens")?;
            let cv = c.lognormal_cv(&format!("{key}.cv"), cv)?;
            if min == 0 || min > max {
                return Err(c.err(
                    key,
                    format!("needs 1 ≤ min ≤ max tokens, got min = {min}, max = {max}"),
                ));
            }
            Lengths::Lognormal { mean, cv, min, max }
        }
    })
}

/// The `--speculative-*` flags of one `sglang.launch_server` line (`flags`, as
/// `spec::launch::ServerLine::speculative_flags` holds them) resolved as a `[pools.server]`
/// with those keys is, for `pdsim lint`: the same start-up checks, auto choices and
/// adjustments (`docs/sglang-pd.md` §19.1). `args` are the line's other flags (page size, TP,
/// `--max-running-requests`), updated as sglang updates them (the 48-request cap). Returns
/// sglang's log lines; an error names the line's flag.
pub fn speculative_for_line(
    side: &str,
    model: &ModelSpec,
    args: &mut crate::spec::ServerArgs,
    flags: &[(String, String)],
) -> Result<Vec<String>, String> {
    use crate::spec::launch::SPECULATIVE_FLAGS;
    if flags.is_empty() {
        return Ok(Vec::new());
    }
    let mut server = toml::Table::new();
    server.insert("tp_size".into(), i64::from(args.tp_size).into());
    server.insert("page_size".into(), i64::from(args.page_size).into());
    if let Some(m) = args.max_running_requests {
        server.insert("max_running_requests".into(), i64::from(m).into());
    }
    for (flag, v) in flags {
        let key = SPECULATIVE_FLAGS
            .iter()
            .find(|(f, _)| f == flag)
            .map_or(flag.as_str(), |(_, k)| k);
        let value: toml::Value = match key {
            "speculative_num_steps" | "speculative_eagle_topk" | "speculative_num_draft_tokens" => {
                v.parse::<u32>()
                    .map_err(|_| format!("--{side}: {flag} {v:?} must be a whole number"))?
                    .into()
            }
            _ => v.clone().into(),
        };
        server.insert(key.into(), value);
    }
    let mut pool = toml::Table::new();
    pool.insert("name".into(), side.into());
    pool.insert("role".into(), side.into());
    pool.insert("instances".into(), 1.into());
    pool.insert("server".into(), server.into());
    let text = toml::to_string(&pool).map_err(|e| e.to_string())?;
    let section: file::PoolSection = toml::from_str(&text).map_err(|e| format!("--{side}: {e}"))?;
    let path = Path::new("launch line");
    let c = Checker {
        text: &text,
        path,
        inputs: Default::default(),
        measured: Default::default(),
    };
    let resolved = speculative::server_args(&c, &section, side, model).map_err(|e| {
        let key = e.key.rsplit('.').next().unwrap_or("");
        let flag = SPECULATIVE_FLAGS
            .iter()
            .find(|(_, k)| *k == key)
            .map_or(key.to_string(), |(f, _)| f.to_string());
        format!("--{side}: {flag}: {}", e.message)
    })?;
    Ok(match resolved {
        Some((spec, notes)) => {
            args.max_running_requests = args.max_running_requests.or(Some(48));
            args.speculative = Some(spec);
            // The notes name scenario keys (`prefill.server.max_running_requests: …`); a
            // launch line's reader knows the flag.
            let prefix = format!("{side}.server.");
            notes
                .into_iter()
                .map(
                    |n| match n.strip_prefix(&prefix).and_then(|t| t.split_once(':')) {
                        Some((key, rest)) => format!("--{}:{rest}", key.replace('_', "-")),
                        None => n,
                    },
                )
                .collect()
        }
        None => Vec::new(),
    })
}

/// `[sglang]`'s transfer paths and backend against the cluster: the staging buffer and a
/// backend other than the default move a PD transfer, which a colocated cluster has none of;
/// and sglang's decode refuses the staging buffer on an MLA model at start-up
/// (`DecodePreallocQueue.__init__`, docs/sglang-pd.md §26.1).
fn transfer_paths(
    c: &Checker,
    sglang: &crate::config::SglangParams,
    pools: &[crate::config::Pool],
    colocated: bool,
) -> Result<(), ScenarioError> {
    if colocated && sglang.staging_pool_mb.is_some() {
        return Err(c.err(
            "sglang.staging_buffer",
            "SGLANG_DISAGG_STAGING_BUFFER stages the KV a prefill transfers to a decode; this cluster has colocated servers and no transfer: leave staging_buffer out, or use prefill and decode pools".to_string(),
        ));
    }
    if colocated && sglang.failed_session_probe_ns.is_some() {
        return Err(c.err(
            "sglang.failed_session_probe",
            "SGLANG_ENABLE_FAILED_SESSION_PROBE probes the decode sessions a prefill blacklisted; this cluster has colocated servers and no transfer: leave failed_session_probe out, or use prefill and decode pools".to_string(),
        ));
    }
    if colocated && !sglang.transfer_backend.is_mooncake() {
        return Err(c.err(
            "sglang.transfer_backend",
            "--disaggregation-transfer-backend picks how a prefill sends KV to a decode; this cluster has colocated servers and no transfer: leave transfer_backend out, or use prefill and decode pools".to_string(),
        ));
    }
    if sglang.staging_pool_mb.is_some()
        && let Some(p) = pools
            .iter()
            .find(|p| p.role == crate::config::Role::Decode && p.model.is_mla())
    {
        return Err(c.err(
            "sglang.staging_buffer",
            format!(
                "decode pool {:?} serves an MLA model, and sglang's decode refuses to start: \"SGLANG_DISAGG_STAGING_BUFFER is designed for non-MLA models (e.g. GQA, MHA). MLA models should not set this flag.\" Leave staging_buffer out (MLA's latent row is not head-sliced: it never needs staging)",
                p.name
            ),
        ));
    }
    Ok(())
}
