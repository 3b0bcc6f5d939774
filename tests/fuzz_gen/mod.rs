//! The pdsim fuzzer, shared by `tests/robustness/fuzz.rs` (a fixed budget inside `cargo test`) and
//! `examples/fuzz.rs` (as long as asked). See `docs/fuzzing.md`.
//!
//! Every case is a pure function of `(seed, index)`: [`generate`] builds it from the scenario
//! files in `scenarios/` and `tests/scenarios/`, the model configs in `../shared/models/` and
//! generated traces, then mutates it. Cases run in worker processes ([`drive`] re-executes the
//! current binary with [`WORKER_ENV`] set), so a panic, an abort on allocation, a signal or a
//! hang is reported against its case and the campaign goes on in a fresh worker. Workers run
//! under `ulimit -v` so an allocation bomb fails fast instead of swapping the machine.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use toml::{Table, Value};

mod edges;
pub mod process;
mod verbs;

/// Set in a worker's environment: `SEED FIRST STRIDE LAST` (LAST = u64::MAX: until killed).
pub const WORKER_ENV: &str = "PDSIM_FUZZ_WORKER";
/// Prefix of the protocol lines a worker prints on stdout.
const TAG: &str = "@@FUZZ ";
/// Virtual-memory limit of a worker and of a spawned `pdsim`, KiB.
const MEM_LIMIT_KIB: u64 = 3 * 1024 * 1024;
/// Caps that keep one generated run small.
const MAX_REQUESTS: u64 = 150;
const MAX_DURATION_NS: u64 = 20_000_000_000;
const MAX_DRAIN_NS: u64 = 60_000_000_000;
const MAX_GPUS_TO_RUN: u64 = 256;

// ---------------------------------------------------------------------------------------------
// Known bugs
// ---------------------------------------------------------------------------------------------

/// Failures that are known bugs of issue 15 (being fixed on another branch). A failure whose
/// `kind` starts with the first field and whose signature (kind, message and the mutations
/// that produced it) contains the second is reported but does not fail `tests/robustness/fuzz.rs`.
/// Empty this list as the fixes land.
pub const KNOWN_BUGS: &[(&str, &str, &str)] = &[
    // (kind prefix, substring of the signature, issue item). Empty: every bug the fuzzer found
    // (issue 15's list, the one-expert MoE config, keyless --set errors) is fixed and pinned by a
    // test; a new entry here needs an issue.
];

/// The issue-15 item a failure belongs to, if it is a known bug.
pub fn known_bug(f: &Failure) -> Option<&'static str> {
    let sig = f.signature();
    KNOWN_BUGS
        .iter()
        .find(|(kind, needle, _)| f.kind.starts_with(kind) && sig.contains(needle))
        .map(|(_, _, item)| *item)
}

// ---------------------------------------------------------------------------------------------
// RNG
// ---------------------------------------------------------------------------------------------

/// SplitMix64: tiny, seedable, and the same on every machine.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, index: u64) -> Self {
        let mut r = Rng(seed ^ 0x9E37_79B9_7F4A_7C15);
        r.next();
        r.0 ^= index.wrapping_mul(0xD1B5_4A32_D192_ED03);
        r.next();
        r
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------------------------------------
// Corpus and cases
// ---------------------------------------------------------------------------------------------

/// The valid inputs mutations start from.
pub struct Corpus {
    /// Repository root.
    pub root: PathBuf,
    /// Scenario files (absolute path, text, parsed table).
    pub scenarios: Vec<(PathBuf, String, Table)>,
    /// Model configs (file name, JSON).
    pub models: Vec<(String, serde_json::Value)>,
    /// A baseline run for `check --baseline`: the `summary.json` and `run.json` of a small
    /// scenario named `fuzz`, as `check --out` writes them (host facts zeroed: a case is a
    /// pure function of its seed and index).
    pub baseline: (Vec<u8>, Vec<u8>),
}

impl Corpus {
    pub fn load(root: &Path) -> Self {
        let mut scenarios = Vec::new();
        for dir in ["scenarios", "tests/scenarios"] {
            collect_toml(&root.join(dir), &mut scenarios);
        }
        scenarios.sort_by(|a, b| a.0.cmp(&b.0));
        let mut models = Vec::new();
        for dir in [root.join("../shared/models"), root.join("scenarios/models")] {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            files.sort();
            for f in files {
                if f.extension().is_some_and(|e| e == "json")
                    && let Ok(text) = std::fs::read_to_string(&f)
                    && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
                {
                    models.push((f.file_name().unwrap().to_string_lossy().into_owned(), v));
                }
            }
        }
        assert!(!scenarios.is_empty(), "no scenario files under {root:?}");
        Corpus {
            root: root.to_path_buf(),
            scenarios,
            models,
            baseline: baseline_run(),
        }
    }
}

/// `summary.json` and `run.json` of one small run (see [`Corpus::baseline`]).
fn baseline_run() -> (Vec<u8>, Vec<u8>) {
    let mut rng = Rng::new(25, 25);
    let text = small_scenario(&mut rng, "preset = \"llama-3.1-8b\"", SYNTH_WORKLOAD)
        .replace(
            &format!("max_requests = {MAX_REQUESTS}"),
            "max_requests = 12",
        )
        .replace("duration_s = 10", "duration_s = 2");
    let sc =
        pdsim::scenario::from_str(&text, Path::new("c/x.toml"), &[]).expect("a baseline scenario");
    let summary = pdsim::app::run::summarize(&sc).expect("a baseline run");
    let run = serde_json::json!({
        "pdsim_version": env!("CARGO_PKG_VERSION"),
        "scenario_file": "c/x.toml",
        "seed": sc.seed,
        "scenario": sc.resolved,
        "instances": [],
        "host": {"wall_s": 0.0, "events_per_s": 0.0, "peak_rss_bytes": null}
    });
    (
        (serde_json::to_string_pretty(&summary).unwrap() + "\n").into_bytes(),
        (serde_json::to_string_pretty(&run).unwrap() + "\n").into_bytes(),
    )
}

fn collect_toml(dir: &Path, out: &mut Vec<(PathBuf, String, Table)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_toml(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml")
            && let Ok(text) = std::fs::read_to_string(&p)
            && let Ok(t) = text.parse::<Table>()
        {
            out.push((p, text, t));
        }
    }
}

/// What a case feeds pdsim.
#[derive(Clone, Debug)]
pub enum Input {
    /// `scenario::from_str(text, path, sets)`, then a capped run if it loads. `files` are
    /// written next to `path` first (relative name, bytes).
    Scenario {
        text: String,
        path: PathBuf,
        sets: Vec<String>,
        files: Vec<(String, Vec<u8>)>,
    },
    /// A trace read directly, then replayed by a small scenario.
    Trace {
        name: String,
        bytes: Vec<u8>,
        format: Option<String>,
    },
    /// `pdsim ARGS`, called in this process through the library (cwd: the case folder) and,
    /// with `spawn`, also run as a process (exit codes and signals as a shell sees them; the
    /// two must agree). `line.files` are written there first.
    Cli { line: CliLine, spawn: bool },
}

/// One generated case.
#[derive(Clone, Debug)]
pub struct Case {
    pub index: u64,
    /// `scenario`, `set`, `model`, `trace`, `cli`, `syntax`, `soak`.
    pub class: &'static str,
    /// The mutations applied, human-readable.
    pub mutations: Vec<String>,
    pub input: Input,
}

impl Case {
    /// The input, printable.
    pub fn show(&self) -> String {
        let mut s = format!(
            "case {} [{}]\nmutations: {:?}\n",
            self.index, self.class, self.mutations
        );
        match &self.input {
            Input::Scenario {
                text,
                path,
                sets,
                files,
            } => {
                s += &format!("scenario path: {}\n", path.display());
                for a in sets {
                    s += &format!("--set {a:?}\n");
                }
                for (n, b) in files {
                    s += &format!(
                        "--- file {n} ---\n{}\n",
                        shorten(&String::from_utf8_lossy(b), 4000)
                    );
                }
                s += &format!("--- scenario ---\n{}", shorten(text, 6000));
            }
            Input::Trace {
                name,
                bytes,
                format,
            } => {
                s += &format!(
                    "trace {name} (format {format:?}, {} bytes):\n{}",
                    bytes.len(),
                    shorten(&String::from_utf8_lossy(bytes), 3000)
                );
            }
            Input::Cli { line, spawn } => {
                let (args, files) = (&line.args, &line.files);
                if *spawn {
                    s += "(in-process, then as a process)\n";
                }
                s += &format!(
                    "pdsim {}\n",
                    args.iter()
                        .map(|a| format!("{a:?}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                for (n, b) in files {
                    s += &format!(
                        "--- file {n} ---\n{}\n",
                        shorten(&String::from_utf8_lossy(b), 2000)
                    );
                }
                if !line.codes.is_empty() {
                    s += &format!("must exit {:?}\n", line.codes);
                }
                if let Some(n) = &line.names {
                    s += &format!("a refusal must name {n:?}\n");
                }
                if let Some(d) = &line.hold_lock {
                    s += &format!("runs while this case holds the lock of {d}\n");
                }
                for (n, kind) in &line.plants {
                    s += &format!("{n} planted as {kind:?}\n");
                }
                for (n, _) in &line.keep {
                    s += &format!("{n} must keep its bytes whatever the exit\n");
                }
                if let Some(c) = &line.conserve {
                    s += &format!("every row of {c} must conserve on exit 0\n");
                }
                for (n, b) in &line.expect {
                    s += &format!(
                        "--- must leave {n} ---\n{}\n",
                        shorten(&String::from_utf8_lossy(b), 2000)
                    );
                }
            }
        }
        s
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..cut], s.len())
}

// ---------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------

const ENUM_WORDS: &[&str] = &[
    "eagle",
    "eagle3",
    "nextn",
    "sorted",
    "unsorted",
    "poisson",
    "constant",
    "gamma",
    "on_off",
    "schedule",
    "fixed",
    "uniform",
    "lognormal",
    "empirical",
    "prefill",
    "decode",
    "rail",
    "leaf_spine",
    "guarded",
    "unguarded",
    "slice_dispatch",
    "seed_commit",
    "colocated",
    "deepep",
    "none",
    "sglang-2025",
    "vllm-2023",
    "follow_bootstrap_room",
    "shortest_queue",
    "minimum_tokens",
    "gpt-oss-120b",
    "round_robin",
    "least_loaded",
    "random",
    "link_down",
    "link_up",
    "link_degraded",
    "packet_loss",
    "nic_down",
    "nic_up",
    "nic_flap",
    "instance_crash",
    "h100-sxm",
    "a100-sxm",
    "h200",
    "b200",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "nemotron-h-8b",
    "bloom-176b",
    "auto",
    "bf16",
    "fp8_e4m3",
    "mooncake",
    "azure",
    "vidur",
    "csv",
    "",
    " ",
    "Poisson",
    "prefil",
    "h100",
    "ünïcödé",
    "../../etc/passwd",
];

const MODEL_PRESETS: &[&str] = &[
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen3-8b",
    "llama2-70b",
    "bloom-176b",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "nemotron-h-8b",
    "gpt-5",
    "",
];

/// Keys behind issue-15 findings and their neighbours: `(section, key)`; `pools` means the
/// first pool.
const HOT_KEYS: &[(&str, &str)] = &[
    ("sglang", "waiting_timeout_s"),
    ("sglang", "bootstrap_timeout_s"),
    ("sglang", "queue_size"),
    ("fabric", "nics_per_node"),
    ("fabric", "base_latency_us"),
    ("fabric", "control_latency_us"),
    ("fabric", "nic_gbps"),
    ("fabric", "nodes_per_leaf"),
    ("fabric", "oversubscription"),
    ("hardware", "hbm_gb"),
    ("hardware", "gpus_per_node"),
    ("hardware", "bf16_tflops"),
    ("hardware", "hbm_tb_s"),
    ("run", "drain_timeout_s"),
    ("run", "seed"),
    ("slo", "ttft_ms"),
    ("pools", "instances"),
    ("pools", "node"),
    ("pools", "server.tp_size"),
    ("pools", "server.page_size"),
    ("pools", "server.chunked_prefill_size"),
    ("pools", "server.dp_size"),
    ("pools", "server.ep_size"),
    ("pools", "server.ep_num_redundant_experts"),
    ("pools", "server.num_reserved_decode_tokens"),
    ("pools", "server.speculative_num_steps"),
    ("pools", "server.speculative_eagle_topk"),
    ("pools", "server.speculative_num_draft_tokens"),
    ("pools", "speculative_accept_rate"),
    ("pools", "speculative_accept_length"),
    ("pools", "speculative_accept_rate_sd"),
    ("hardware", "rdma_engine_gbps"),
    ("hardware", "nvlink_gb_s"),
    ("hardware", "fp8_tflops"),
    ("hardware", "usd_per_gpu_hour"),
    ("slo", "ttft_p99_ms"),
    ("slo", "attainment_min"),
    ("slo", "tbt_ms"),
    ("slo", "tbt_p90_ms"),
    ("slo", "itl_p99_ms"),
    ("slo", "e2e_per_token_ms"),
    ("workload", "arrival.cv"),
    ("workload", "client_timeout.s"),
    ("workload", "client_timeout.mean_s"),
];

fn huge_number(rng: &mut Rng) -> Value {
    match rng.below(22) {
        0 => Value::Integer(0),
        1 => Value::Integer(-1),
        2 => Value::Integer(u32::MAX as i64),
        3 => Value::Integer(u32::MAX as i64 + 1),
        4 => Value::Integer(i64::MAX),
        5 => Value::Integer(i64::MIN),
        6 => Value::Float(1e300),
        7 => Value::Float(-1e300),
        8 => Value::Float(1e-300),
        9 => Value::Float(f64::NAN),
        10 => Value::Float(f64::INFINITY),
        11 => Value::Float(f64::NEG_INFINITY),
        12 => Value::Float(0.0),
        13 => Value::Float(-0.0),
        14 => Value::Float(2e10),
        15 => Value::Float(2e16),
        16 => Value::Float(1e-9),
        17 => Value::Integer(1),
        18 => Value::Integer(4096),
        19 => Value::Integer(65536),
        20 => Value::Float(0.5),
        _ => Value::Integer(rng.below(100) as i64),
    }
}

fn other_type(rng: &mut Rng) -> Value {
    match rng.below(7) {
        0 => Value::String("x".into()),
        1 => Value::String("NaN".into()),
        2 => Value::Boolean(rng.chance(0.5)),
        3 => Value::Array(vec![Value::Integer(1), Value::String("a".into())]),
        4 => Value::Table(Table::new()),
        5 => Value::String("1e400".into()),
        _ => Value::Array(vec![]),
    }
}

/// Every key path of a table, arrays of tables by index.
fn leaves(v: &Value, prefix: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Table(t) => {
            for (k, x) in t {
                prefix.push(Seg::Key(k.clone()));
                out.push(prefix.clone());
                leaves(x, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                prefix.push(Seg::Idx(i));
                out.push(prefix.clone());
                leaves(x, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Idx(usize),
}

fn path_str(p: &[Seg]) -> String {
    let mut s = String::new();
    for seg in p {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Idx(i) => s += &format!("[{i}]"),
        }
    }
    s
}

fn get_mut<'a>(root: &'a mut Value, p: &[Seg]) -> Option<&'a mut Value> {
    let mut v = root;
    for seg in p {
        v = match (seg, v) {
            (Seg::Key(k), Value::Table(t)) => t.get_mut(k)?,
            (Seg::Idx(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

fn remove(root: &mut Value, p: &[Seg]) {
    let Some((last, parent)) = p.split_last() else {
        return;
    };
    match (last, get_mut(root, parent)) {
        (Seg::Key(k), Some(Value::Table(t))) => {
            t.remove(k);
        }
        (Seg::Idx(i), Some(Value::Array(a))) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

fn random_link(rng: &mut Rng) -> String {
    let n = rng.below(6);
    match rng.below(8) {
        0 | 1 => format!("node{n}.nic{}.{}", rng.below(10), rng.pick(&["tx", "rx"])),
        2 => format!(
            "node{n}.gpu{}.{}",
            rng.below(10),
            rng.pick(&["nvlink_tx", "nvlink_rx"])
        ),
        3 | 4 => format!("switch{}.{}", rng.below(12), rng.pick(&["up", "down"])),
        5 => format!("node{}.nic{}.tx", u32::MAX, u32::MAX),
        6 => rng
            .pick(&[
                "",
                "node",
                "node0",
                "switch.up",
                "node0.nic0",
                "nodeX.nic0.tx",
                "node-1.nic0.tx",
            ])
            .to_string(),
        _ => format!("node{n}.nic{}", rng.below(10)),
    }
}

fn random_fault(rng: &mut Rng, pools: &[String]) -> Value {
    let mut t = Table::new();
    t.insert(
        "at_s".into(),
        Value::Float([0.0, 0.5, 1.0, 3.0, 10.0, 1e12][rng.below(6) as usize]),
    );
    let kind = *rng.pick(&[
        "link_down",
        "link_up",
        "link_degraded",
        "packet_loss",
        "nic_down",
        "nic_up",
        "nic_flap",
        "instance_crash",
        "meteor",
    ]);
    t.insert("kind".into(), Value::String(kind.into()));
    match kind {
        "nic_down" | "nic_up" | "nic_flap" => {
            let l = random_link(rng);
            let nic = l
                .rsplit_once('.')
                .filter(|_| rng.chance(0.7))
                .map(|x| x.0.to_string())
                .unwrap_or(l);
            t.insert("nic".into(), Value::String(nic));
            if kind == "nic_flap" {
                t.insert(
                    "duration_s".into(),
                    Value::Float([0.1, 2.0, 0.0, 1e300][rng.below(4) as usize]),
                );
            }
        }
        "instance_crash" => {
            let p = if pools.is_empty() || rng.chance(0.1) {
                "nope".to_string()
            } else {
                rng.pick(pools).clone()
            };
            t.insert("pool".into(), Value::String(p));
            t.insert("instance".into(), Value::Integer(rng.below(4) as i64));
            if rng.chance(0.6) {
                t.insert(
                    "restart_after_s".into(),
                    Value::Float([0.5, 3.0, 0.0, 1e300][rng.below(4) as usize]),
                );
            }
        }
        _ => {
            t.insert("link".into(), Value::String(random_link(rng)));
            if rng.chance(0.8) {
                t.insert(
                    "fraction".into(),
                    Value::Float([0.5, 0.01, 1.0, 0.0, 2.0][rng.below(5) as usize]),
                );
            }
            if rng.chance(0.5) {
                t.insert(
                    "rate".into(),
                    Value::Float([0.01, 0.5, 0.0, 1.0, -1.0][rng.below(5) as usize]),
                );
            }
        }
    }
    Value::Table(t)
}

fn pool_names(t: &Table) -> Vec<String> {
    t.get("pools")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| p.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// One mutation of a scenario table, described.
fn mutate_table(rng: &mut Rng, root: &mut Value) -> String {
    let mut paths = Vec::new();
    leaves(root, &mut Vec::new(), &mut paths);
    let op = rng.below(100);
    if op < 8 {
        // Duplicate a pool (same name sometimes, node 0 sometimes).
        if let Some(Value::Array(pools)) = root.get_mut("pools")
            && !pools.is_empty()
        {
            let i = rng.below(pools.len() as u64) as usize;
            let mut p = pools[i].clone();
            let mut desc = format!("duplicate pools[{i}]");
            if let Value::Table(t) = &mut p {
                if rng.chance(0.6) {
                    let name = format!("dup{}", rng.below(100));
                    desc += &format!(" as {name}");
                    t.insert("name".into(), Value::String(name));
                }
                if rng.chance(0.5) {
                    t.insert("node".into(), Value::Integer(0));
                    desc += " node=0";
                }
            }
            pools.push(p);
            return desc;
        }
    }
    if op < 20 {
        let names = root.as_table().map(pool_names).unwrap_or_default();
        let f = random_fault(rng, &names);
        let desc = format!("add fault {f}");
        if let Value::Table(t) = root {
            let e = t.entry("faults").or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(a) = e {
                a.push(f);
            } else {
                *e = Value::Array(vec![f]);
            }
        }
        return desc;
    }
    if (20..34).contains(&op) {
        // A key the simulator is sensitive to, present or not, set to an extreme value.
        let (sec, key) = *rng.pick(HOT_KEYS);
        let n = huge_number(rng);
        let desc = format!("{sec}.{key} := {n} (hot key)");
        if let Value::Table(t) = root {
            if sec == "pools" {
                if let Some(Value::Array(ps)) = t.get_mut("pools")
                    && let Some(Value::Table(p)) = ps.first_mut()
                {
                    if let Some(k) = key.strip_prefix("server.") {
                        if let Value::Table(srv) = p
                            .entry("server")
                            .or_insert_with(|| Value::Table(Table::new()))
                        {
                            srv.insert(k.into(), n);
                        }
                    } else {
                        p.insert(key.into(), n);
                    }
                }
            } else if let Some(k) = key.strip_prefix("client_timeout.") {
                // A client deadline at an extreme: fixed, or a lognormal of extreme mean.
                let mut c = Table::new();
                c.insert(k.into(), n.clone());
                if k == "mean_s" {
                    c.insert("dist".into(), Value::String("lognormal".into()));
                    c.insert("cv".into(), Value::Float(1.0));
                }
                if let Value::Table(w) = t
                    .entry("workload")
                    .or_insert_with(|| Value::Table(Table::new()))
                {
                    w.insert("client_timeout".into(), Value::Table(c));
                }
                return format!("workload.client_timeout.{k} := {n} (hot key)");
            } else if sec == "workload" {
                let cv = if rng.chance(0.5) {
                    Value::Float(1e-200)
                } else {
                    n
                };
                let mut a = Table::new();
                a.insert("process".into(), Value::String("gamma".into()));
                a.insert("rate_per_s".into(), Value::Float(5.0));
                a.insert("cv".into(), cv.clone());
                if let Value::Table(w) = t
                    .entry("workload")
                    .or_insert_with(|| Value::Table(Table::new()))
                {
                    w.remove("trace");
                    w.insert("arrival".into(), Value::Table(a));
                }
                return format!("workload.arrival = gamma cv := {cv} (hot key)");
            } else if let Value::Table(x) =
                t.entry(sec).or_insert_with(|| Value::Table(Table::new()))
            {
                x.insert(key.into(), n);
            }
        }
        return desc;
    }
    if op < 38 {
        // An unknown key somewhere.
        let tables: Vec<&Vec<Seg>> = paths.iter().filter(|p| p.len() <= 2).collect();
        let key = rng
            .pick(&["colour", "seeed", "rate_per_sec", "tp", "", "pools"])
            .to_string();
        if tables.is_empty() {
            return "noop".into();
        }
        let p = (*rng.pick(&tables)).clone();
        if let Some(Value::Table(t)) = get_mut(root, &p) {
            t.insert(key.clone(), Value::Integer(1));
            return format!("add unknown key {}.{key}", path_str(&p));
        }
        return "noop".into();
    }
    if paths.is_empty() {
        return "noop".into();
    }
    let p = rng.pick(&paths).clone();
    let ps = path_str(&p);
    let Some(v) = get_mut(root, &p) else {
        return "noop".into();
    };
    match op {
        38..=49 => {
            remove(root, &p);
            format!("delete {ps}")
        }
        50..=74 => {
            // Numbers get extreme values; anything else sometimes too.
            let n = huge_number(rng);
            let desc = format!("{ps} := {n}");
            if matches!(v, Value::Integer(_) | Value::Float(_)) || rng.chance(0.2) {
                *v = n;
                desc
            } else {
                *v = Value::String(rng.pick(ENUM_WORDS).to_string());
                format!("{ps} := {v}")
            }
        }
        75..=84 => {
            let n = other_type(rng);
            let desc = format!("{ps} := {n} (type swap)");
            *v = n;
            desc
        }
        _ => {
            let w = if rng.chance(0.3) {
                match v {
                    Value::String(s) if !s.is_empty() => {
                        let mut s = s.clone();
                        s.remove(rng.below(s.len() as u64) as usize);
                        s
                    }
                    _ => rng.pick(ENUM_WORDS).to_string(),
                }
            } else {
                rng.pick(ENUM_WORDS).to_string()
            };
            let desc = format!("{ps} := {w:?}");
            *v = Value::String(w);
            desc
        }
    }
}

/// Caps the run so a case stays small (mutations may undo it; the loaded scenario is capped
/// again before running).
fn cap_table(t: &mut Table) {
    if let Some(Value::Table(run)) = t.get_mut("run") {
        run.insert("max_requests".into(), Value::Integer(MAX_REQUESTS as i64));
        if run
            .get("duration_s")
            .and_then(Value::as_float)
            .is_none_or(|d| d > 20.0)
        {
            run.insert("duration_s".into(), Value::Float(20.0));
        }
    }
}

fn random_set(rng: &mut Rng, t: &Table) -> String {
    let mut paths = Vec::new();
    leaves(&Value::Table(t.clone()), &mut Vec::new(), &mut paths);
    let names = pool_names(t);
    let key = match rng.below(10) {
        0 => rng
            .pick(&[
                "",
                ".",
                "a..b",
                "run.",
                "pools.nope.instances",
                "x.y.z",
                "run.seed.x",
                "pools.99.instances",
                "faults.0.at_s",
            ])
            .to_string(),
        1 if !names.is_empty() => format!(
            "pools.{}.{}",
            rng.pick(&names),
            rng.pick(&[
                "instances",
                "server.tp_size",
                "server.page_size",
                "node",
                "role",
                "server.kv_cache_dtype",
                "server.chunked_prefill_size",
                "server.dp_size",
                "server.enable_dp_attention",
                "server.ep_size",
                "server.moe_a2a_backend",
                "server.enable_two_batch_overlap",
                "server.enable_mixed_chunk",
                "server.load_balance_method",
                "server.enable_eplb",
                "server.speculative_algorithm",
                "server.speculative_num_steps",
                "server.speculative_eagle_topk",
                "server.speculative_num_draft_tokens",
                "server.speculative_draft_model_path",
                "server.attention_backend",
                "speculative_accept_rate",
                "speculative_accept_length",
                "kv_allocator",
                "nope"
            ])
        ),
        2 if rng.chance(0.3) => "fabric.a2a_flows".into(),
        2 => "k.".repeat(1 + rng.below(40) as usize) + "v",
        _ if !paths.is_empty() => {
            // Dotted form of a real key (array indices as numbers).
            rng.pick(&paths)
                .iter()
                .map(|s| match s {
                    Seg::Key(k) => k.clone(),
                    Seg::Idx(i) => i.to_string(),
                })
                .collect::<Vec<_>>()
                .join(".")
        }
        _ => "run.seed".into(),
    };
    let value = match rng.below(9) {
        0 => "".to_string(),
        1 => "{ process = \"gamma\", rate_per_s = 5, cv = 1e-200 }".into(),
        2 => "[1, 2".into(),
        3 => "\"unterminated".into(),
        4 => rng.pick(ENUM_WORDS).to_string(),
        5 => "{ a = 1 }".into(),
        _ => huge_number(rng).to_string(),
    };
    if rng.chance(0.03) {
        return key; // no '='
    }
    format!("{key}={value}")
}

/// A small valid scenario around `model` and `workload` lines, for model and trace cases.
fn small_scenario(rng: &mut Rng, model_line: &str, workload: &str) -> String {
    let tp = *rng.pick(&[1, 2, 4, 8]);
    let gpu = *rng.pick(&["h100-sxm", "h200", "b200"]);
    format!(
        "[run]\nname = \"fuzz\"\nseed = {}\nduration_s = 10\nmax_requests = {MAX_REQUESTS}\ndrain_timeout_s = 60\n\n\
         [model]\n{model_line}\n\n[hardware]\ngpu = \"{gpu}\"\n\n\
         [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = {}\n[pools.server]\ntp_size = {tp}\npage_size = 64\n\n\
         [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = {}\n[pools.server]\ntp_size = {tp}\npage_size = 64\n\n\
         [workload]\n{workload}\n",
        rng.below(1000),
        1 + rng.below(2),
        1 + rng.below(2),
    )
}

const SYNTH_WORKLOAD: &str = "arrival = { process = \"poisson\", rate_per_s = 10.0 }\ninput_tokens = { dist = \"uniform\", min = 16, max = 2048 }\noutput_tokens = { dist = \"uniform\", min = 1, max = 64 }";

fn mutate_json(rng: &mut Rng, v: &mut serde_json::Value) -> String {
    use serde_json::Value as J;
    // Pick a numeric-ish field of the top level or of a nested object (text_config, …).
    let mut targets: Vec<Vec<String>> = Vec::new();
    if let J::Object(m) = &*v {
        for (k, x) in m {
            targets.push(vec![k.clone()]);
            if let J::Object(inner) = x {
                for k2 in inner.keys() {
                    targets.push(vec![k.clone(), k2.clone()]);
                }
            }
        }
    }
    if targets.is_empty() {
        return "noop".into();
    }
    // Prefer the fields the simulator reads.
    const HOT: &[&str] = &[
        "num_key_value_heads",
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "head_dim",
        "vocab_size",
        "intermediate_size",
        "n_routed_experts",
        "num_experts",
        "num_experts_per_tok",
        "kv_lora_rank",
        "qk_rope_head_dim",
        "moe_intermediate_size",
        "torch_dtype",
        "model_type",
        "hybrid_override_pattern",
        "layer_types",
        "full_attention_interval",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "mamba_num_heads",
        "ssm_state_size",
        "first_k_dense_replace",
        "tie_word_embeddings",
    ];
    let hot: Vec<Vec<String>> = targets
        .iter()
        .filter(|p| HOT.contains(&p.last().unwrap().as_str()))
        .cloned()
        .collect();
    let path = if !hot.is_empty() && rng.chance(0.7) {
        rng.pick(&hot).clone()
    } else {
        rng.pick(&targets).clone()
    };
    let name = path.join(".");
    let parent = if path.len() == 2 {
        v.get_mut(&path[0]).unwrap()
    } else {
        &mut *v
    };
    let J::Object(m) = parent else {
        return "noop".into();
    };
    let key = path.last().unwrap().clone();
    let new = match rng.below(12) {
        0 => {
            m.remove(&key);
            return format!("delete {name}");
        }
        1 => J::from(0),
        2 => J::from(-1),
        3 => J::from(u32::MAX),
        4 => J::from(u64::MAX),
        5 => J::from(1e300),
        6 => J::from(1),
        7 => J::String("x".into()),
        8 => J::Null,
        9 => J::Array(vec![]),
        10 => J::from(0.5),
        _ => J::from(rng.below(200)),
    };
    let desc = format!("{name} := {new}");
    m.insert(key, new);
    desc
}

fn gen_trace(rng: &mut Rng) -> (String, Vec<u8>, Option<String>, Vec<String>) {
    let fmt = *rng.pick(&["mooncake", "azure", "vidur", "csv"]);
    // Half the pdsim CSV traces are conversations (`session_id`, and a `turn` left to file
    // order), replayed closed loop.
    let sessions = fmt == "csv" && rng.chance(0.5);
    let n = 1 + rng.below(30);
    let mut lines: Vec<String> = Vec::new();
    let mut t = 0u64;
    for i in 0..n {
        t += rng.below(2000);
        let (inp, out) = (1 + rng.below(4000), 1 + rng.below(300));
        lines.push(match fmt {
            "mooncake" => format!(
                "{{\"timestamp\": {t}, \"input_length\": {inp}, \"output_length\": {out}, \"hash_ids\": [{}, {}]}}",
                i % 3,
                i
            ),
            "azure" => format!("2023-11-16 18:{:02}:{:02}.{:07},{inp},{out}", (t / 60000) % 60, (t / 1000) % 60, (t % 1000) * 10000),
            "vidur" => format!("{},{inp},{out}", t as f64 / 1000.0),
            _ if sessions => format!("{},{inp},{out},{},", t as f64 / 1000.0, i % 4),
            _ => format!("{},{inp},{out}", t as f64 / 1000.0),
        });
    }
    let header = match fmt {
        "mooncake" => None,
        "azure" => Some("TIMESTAMP,ContextTokens,GeneratedTokens"),
        "vidur" => Some("arrived_at,num_prefill_tokens,num_decode_tokens"),
        _ if sessions => Some("arrival_s,input_tokens,output_tokens,session_id,turn"),
        _ => Some("arrival_s,input_tokens,output_tokens"),
    };
    let mut muts = Vec::new();
    for _ in 0..rng.below(3) {
        let i = rng.below(lines.len().max(1) as u64) as usize;
        let m = rng.below(12);
        if lines.is_empty() {
            break;
        }
        let desc = match m {
            0 => {
                lines.swap(0, i);
                "unordered times".to_string()
            }
            1 => {
                lines[i] = lines[i].replacen(|c: char| c.is_ascii_digit(), "-", 1);
                format!("negative/garbled number on row {i}")
            }
            2 => {
                lines[i] = "x".repeat(1 << (10 + rng.below(12)));
                format!("huge line at row {i}")
            }
            3 => {
                lines[i].clear();
                format!("empty row {i}")
            }
            4 => {
                lines[i] = lines[i].replace(',', ",,");
                format!("extra columns on row {i}")
            }
            5 => {
                lines[i] = lines[i].split(',').next().unwrap_or("").to_string();
                format!("short row {i}")
            }
            6 => {
                lines[i] += ",99999999999999999999";
                format!("trailing huge field on row {i}")
            }
            7 => {
                lines.clear();
                "no rows".to_string()
            }
            8 => {
                lines[i] = lines[i].replace(|c: char| c.is_ascii_digit(), "9");
                format!("all nines (huge values) on row {i}")
            }
            9 => {
                lines[i] = lines[i].replacen('1', "NaN", 1);
                format!("NaN on row {i}")
            }
            10 => {
                lines[i] = lines[i].replacen('0', "1e400", 1);
                format!("1e400 on row {i}")
            }
            _ => {
                lines[i] = "\u{feff}\0\u{1}".to_string();
                format!("control bytes on row {i}")
            }
        };
        muts.push(desc);
    }
    let mut text = String::new();
    if let Some(h) = header
        && !rng.chance(0.05)
    {
        text += h;
        text.push('\n');
    } else if header.is_some() {
        muts.push("no header".into());
    }
    text += &lines.join("\n");
    if rng.chance(0.8) {
        text.push('\n');
    }
    let mut bytes = text.into_bytes();
    if rng.chance(0.03) {
        bytes.extend_from_slice(&[0xff, 0xfe, b'\n']);
        muts.push("invalid UTF-8".into());
    }
    let ext = if fmt == "mooncake" { "jsonl" } else { "csv" };
    let format = if rng.chance(0.5) {
        Some(fmt.to_string())
    } else if rng.chance(0.1) {
        Some(
            rng.pick(&["mooncake", "azure", "vidur", "csv", "parquet", ""])
                .to_string(),
        )
    } else {
        None
    };
    muts.insert(0, format!("{fmt} trace, {n} rows"));
    (format!("trace.{ext}"), bytes, format, muts)
}

/// A generated command line and what it must do.
#[derive(Clone, Debug, Default)]
pub struct CliLine {
    /// The verb it exercises (`run`, `merge`, `check`, …): the case's class.
    pub verb: &'static str,
    /// `pdsim`'s arguments (without the program name).
    pub args: Vec<std::ffi::OsString>,
    /// Files written into the case folder first (relative name, bytes).
    pub files: Vec<(String, Vec<u8>)>,
    /// The mutations applied, human-readable.
    pub muts: Vec<String>,
    /// Files the line must leave with exactly these bytes when it exits 0 (a merge's rows as
    /// merged by hand: a mixed-up row is a difference here).
    pub expect: Vec<(String, Vec<u8>)>,
    /// The exit codes allowed (empty: any of 0–3).
    pub codes: Vec<i32>,
    /// A text the error message must contain when the line exits 2 or 3 (the file it refuses).
    pub names: Option<String>,
    /// An output folder whose lock the case holds while the line runs (a live writer).
    pub hold_lock: Option<String>,
    /// Entries planted after the files are written (a link, a FIFO: `edges::Plant`).
    pub plants: Vec<(String, edges::Plant)>,
    /// Files that must hold exactly these bytes after the line, whatever it exits with (the
    /// canary a planted link points to).
    pub keep: Vec<(String, Vec<u8>)>,
    /// A `sweep.csv` whose every row must conserve requests when the line exits 0.
    pub conserve: Option<String>,
}

impl CliLine {
    fn new(verb: &'static str, args: Vec<std::ffi::OsString>) -> Self {
        CliLine {
            verb,
            args,
            ..Default::default()
        }
    }
}

fn cli_value(rng: &mut Rng) -> String {
    rng.pick(&[
        "0",
        "1",
        "-1",
        "4294967295",
        "4294967296",
        "18446744073709551615",
        "99999999999999999999",
        "abc",
        "",
        "1e9",
        "NaN",
        "2",
        "8",
        "64",
        "3",
    ])
    .to_string()
}

fn gen_cli(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    use std::ffi::OsString;
    let mut args: Vec<OsString> = Vec::new();
    let mut files = Vec::new();
    let mut muts = Vec::new();
    let verb;
    match rng.below(10) {
        0..=4 => {
            verb = "run";
            args.push("run".into());
            let sc = rng.below(10);
            match sc {
                0 => args.push("does-not-exist.toml".into()),
                1 => args.push(".".into()),
                2 => args.push("/dev/null".into()),
                _ => args.push(rng.pick(&corpus.scenarios).0.clone().into_os_string()),
            }
            // Always capped: a full-size scenario (bench/foundation-100k) outlasts the case
            // timeout without being a hang.
            {
                args.extend([
                    "--set".into(),
                    format!("run.max_requests={}", 1 + rng.below(MAX_REQUESTS)).into(),
                ]);
                args.extend(["--set".into(), "run.duration_s=10".into()]);
                muts.push("capped".into());
            }
            args.extend(["--out".into(), "out".into()]);
            for _ in 0..rng.below(4) {
                match rng.below(9) {
                    0 => args.extend(["--seed".into(), cli_value(rng).into()]),
                    1 => args.push("--summary-only".into()),
                    2 => args.push("-q".into()),
                    3 => args.push("--png".into()),
                    4 => args.push(rng.pick(&["--bogus", "-x", "--", "--set"]).into()),
                    5 => {
                        let t = corpus.scenarios[rng.below(corpus.scenarios.len() as u64) as usize]
                            .2
                            .clone();
                        args.extend(["--set".into(), random_set(rng, &t).into()]);
                    }
                    6 => args.extend([
                        "--out".into(),
                        rng.pick(&["/dev/null/x", "", "out", "/proc/nope"]).into(),
                    ]),
                    7 => {
                        use std::os::unix::ffi::OsStringExt;
                        args.push(OsString::from_vec(vec![
                            b'-', b'-', b's', b'e', b't', b'=', 0xff, 0xfe,
                        ]));
                    }
                    _ => args.extend([
                        "--set".into(),
                        format!("{}=1", "k.".repeat(1 + rng.below(20) as usize) + "v").into(),
                    ]),
                }
            }
        }
        5..=7 => {
            verb = "layout";
            args.push("layout".into());
            if rng.chance(0.9) {
                args.extend(["--model".into(), rng.pick(MODEL_PRESETS).into()]);
            }
            for _ in 0..rng.below(5) {
                match rng.below(6) {
                    0 => args.extend(["--tp".into(), cli_value(rng).into()]),
                    1 => args.extend(["--page-size".into(), cli_value(rng).into()]),
                    2 => args.extend([
                        "--kv-cache-dtype".into(),
                        rng.pick(&["auto", "bf16", "fp8_e4m3", "fp8_e5m2", "int4", ""])
                            .into(),
                    ]),
                    3 => args.extend(["--rank".into(), cli_value(rng).into()]),
                    4 => args.push(
                        rng.pick(&["--json", "--enable-unified-memory", "--nope"])
                            .into(),
                    ),
                    _ => args.extend(["--tp".into(), rng.pick(&["1", "2", "4", "8"]).into()]),
                }
            }
        }
        8 => {
            verb = "trace-stats";
            args.extend(["trace".into(), "stats".into()]);
            let (name, bytes, format, m) = gen_trace(rng);
            muts.extend(m);
            if rng.chance(0.95) {
                args.push(name.clone().into());
                files.push((name, bytes));
            } else {
                args.push(rng.pick(&["missing.csv", ".", "/dev/null"]).into());
            }
            if let Some(f) = format {
                args.extend(["--format".into(), f.into()]);
            }
        }
        _ => {
            verb = "cli-misc";
            let pool: &[&str] = &[
                "",
                "--help",
                "--version",
                "help",
                "run",
                "trace",
                "layout",
                "check",
                "-h",
                "trace stats",
                "run --seed",
            ];
            for _ in 0..1 + rng.below(3) {
                args.push(rng.pick(pool).into());
            }
        }
    }
    CliLine {
        files,
        muts,
        ..CliLine::new(verb, args)
    }
}

/// The case `(seed, index)`.
pub fn generate(corpus: &Corpus, seed: u64, index: u64) -> Case {
    let mut rng = Rng::new(seed, index);
    let roll = rng.below(100);
    let mut mutations = Vec::new();
    let (class, input) = if roll < 22 {
        // Mutated scenario file (or a fault soak: the file untouched but for faults).
        let soak = roll >= 20;
        let (path, _, table) = rng.pick(&corpus.scenarios).clone();
        let mut root = Value::Table(table);
        let n = if soak {
            1 + rng.below(6)
        } else {
            1 + rng.below(3)
        };
        for _ in 0..n {
            if soak {
                let names = root.as_table().map(pool_names).unwrap_or_default();
                let f = random_fault(&mut rng, &names);
                mutations.push(format!("add fault {f}"));
                if let Value::Table(t) = &mut root {
                    let e = t.entry("faults").or_insert_with(|| Value::Array(vec![]));
                    if let Value::Array(a) = e {
                        a.push(f);
                    }
                }
            } else {
                mutations.push(mutate_table(&mut rng, &mut root));
            }
        }
        let mut t = root.as_table().cloned().unwrap_or_default();
        if rng.chance(0.7) {
            cap_table(&mut t);
        }
        let text = toml::to_string(&t).unwrap_or_default();
        (
            if soak { "soak" } else { "scenario" },
            Input::Scenario {
                text,
                path,
                sets: vec![],
                files: vec![],
            },
        )
    } else if roll < 30 {
        let (path, text, table) = rng.pick(&corpus.scenarios).clone();
        let mut sets = vec![format!("run.max_requests={MAX_REQUESTS}")];
        for _ in 0..1 + rng.below(3) {
            sets.push(random_set(&mut rng, &table));
        }
        mutations.extend(sets.iter().skip(1).map(|a| format!("--set {a}")));
        (
            "set",
            Input::Scenario {
                text,
                path,
                sets,
                files: vec![],
            },
        )
    } else if roll < 38 && !corpus.models.is_empty() {
        let (name, json) = rng.pick(&corpus.models).clone();
        let mut json = json;
        mutations.push(format!("model {name}"));
        if rng.chance(0.9) {
            for _ in 0..1 + rng.below(2) {
                mutations.push(mutate_json(&mut rng, &mut json));
            }
        }
        let mut bytes = serde_json::to_vec_pretty(&json).unwrap();
        if rng.chance(0.03) {
            bytes.truncate(bytes.len() / 2);
            mutations.push("truncated JSON".into());
        }
        let text = small_scenario(&mut rng, "config = \"model.json\"", SYNTH_WORKLOAD);
        (
            "model",
            Input::Scenario {
                text,
                path: PathBuf::from("scenario.toml"),
                sets: vec![],
                files: vec![("model.json".into(), bytes)],
            },
        )
    } else if roll < 46 {
        let (name, bytes, format, m) = gen_trace(&mut rng);
        mutations.extend(m);
        (
            "trace",
            Input::Trace {
                name,
                bytes,
                format,
            },
        )
    } else if roll < 50 {
        // Text-level damage: truncation, a stray byte, a duplicated line.
        let (path, text, _) = rng.pick(&corpus.scenarios).clone();
        let mut text = text;
        match rng.below(4) {
            0 => {
                let mut cut = rng.below(text.len() as u64) as usize;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                mutations.push(format!("truncate at byte {cut}"));
            }
            1 => {
                let mut at = rng.below(text.len() as u64) as usize;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let c = *rng.pick(&['"', '[', ']', '=', '\n', '{', '#', '\'', '\\']);
                text.insert(at, c);
                mutations.push(format!("insert {c:?} at byte {at}"));
            }
            2 => {
                let lines: Vec<&str> = text.lines().collect();
                let i = rng.below(lines.len() as u64) as usize;
                let mut v: Vec<&str> = lines.clone();
                v.insert(i, lines[i]);
                mutations.push(format!("duplicate line {}", i + 1));
                text = v.join("\n");
            }
            _ => {
                text = "[run]\n".repeat(1 + rng.below(3) as usize) + &text;
                mutations.push("repeat [run] header".into());
            }
        }
        (
            "syntax",
            Input::Scenario {
                text,
                path,
                sets: vec!["run.max_requests=100".into()],
                files: vec![],
            },
        )
    } else {
        // Half the cases are command lines: `run`, `layout`, `trace stats` and clap's own
        // (15 %), and the verbs of issue 25 (35 %, tests/fuzz_gen/verbs.rs). They run
        // in-process; a slice also runs as a process (see `SPAWN_SHARE`).
        let line = if roll < 62 {
            gen_cli(&mut rng, corpus)
        } else if roll < 65 {
            edges::gen_edge(&mut rng, corpus)
        } else {
            verbs::gen_verb(&mut rng, corpus)
        };
        mutations.extend(line.muts.iter().cloned());
        let spawn = Rng::new(seed ^ 0x5BA7, index).chance(SPAWN_SHARE);
        (line.verb, Input::Cli { line, spawn })
    };
    Case {
        index,
        class,
        mutations,
        input,
    }
}

// ---------------------------------------------------------------------------------------------
// Running one case (inside a worker)
// ---------------------------------------------------------------------------------------------

/// What a case ended as.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Status {
    /// The input was rejected with a good message.
    Rejected,
    /// The scenario loaded and ran (twice, identically, conserving requests).
    Ran,
    /// The scenario loaded but was too big to run here.
    Accepted,
    /// A CLI line ended with exit 0 or 1.
    Exited(i32),
    /// A check failed.
    Fail { kind: String, detail: String },
}

/// A failed check.
#[derive(Clone, Debug)]
pub struct Failure {
    pub index: u64,
    pub class: &'static str,
    pub kind: String,
    pub detail: String,
    pub mutations: Vec<String>,
}

impl Failure {
    /// What known-bug matching and grouping look at.
    pub fn signature(&self) -> String {
        format!(
            "{} | {} | {}",
            self.kind,
            self.detail,
            self.mutations.join("; ")
        )
    }
    /// The failure with numbers blanked, to group repeats.
    pub fn group(&self) -> String {
        let mut first = self.detail.lines().next().unwrap_or("");
        // Drop a leading file path: group by message.
        if first.starts_with('/')
            && let Some((_, rest)) = first.split_once(": ")
        {
            first = rest;
        }
        let mut g: String = format!("{} [{}]: {}", self.kind, self.class, first)
            .chars()
            .map(|c| if c.is_ascii_digit() { '#' } else { c })
            .collect();
        g.truncate(g.char_indices().nth(160).map_or(g.len(), |(i, _)| i));
        g
    }
}

static PANIC_MSG: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn fail(kind: &str, detail: impl Into<String>) -> Status {
    Status::Fail {
        kind: kind.into(),
        detail: detail.into(),
    }
}

fn write_files(dir: &Path, files: &[(String, Vec<u8>)]) {
    // The verbs' cases keep their files under `c/`, fresh for every case.
    let _ = std::fs::remove_dir_all(dir.join("c"));
    for (name, bytes) in files {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("a case folder");
        }
        std::fs::write(p, bytes).expect("write a case file");
    }
}

/// Plants a line's links and FIFOs (after its files are written).
fn plant(dir: &Path, line: &CliLine) {
    use edges::Plant;
    for (name, kind) in &line.plants {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("a case folder");
        }
        let _ = std::fs::remove_file(&p);
        match kind {
            Plant::LinkToCanary => {
                std::os::unix::fs::symlink(dir.join(edges::CANARY), &p).expect("plant a link")
            }
            Plant::LinkToFolder => {
                std::os::unix::fs::symlink(dir.join("c/elsewhere"), &p).expect("plant a link")
            }
            Plant::Dangling => {
                std::os::unix::fs::symlink(dir.join("c/nothing-here"), &p).expect("plant a link")
            }
            Plant::Fifo => {
                let c =
                    std::ffi::CString::new(p.to_str().expect("a UTF-8 case path")).expect("no NUL");
                // SAFETY: a NUL-terminated path owned here.
                assert_eq!(
                    unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
                    0,
                    "mkfifo {p:?}"
                );
            }
        }
    }
}

/// The first row of the `sweep.csv` at `path` that does not conserve requests.
fn unconserved_row(path: &Path) -> Option<String> {
    let mut r = match csv::Reader::from_path(path) {
        Ok(r) => r,
        Err(e) => return Some(format!("{}: {e}", path.display())),
    };
    let h = r.headers().ok()?.clone();
    let col = |name: &str| h.iter().position(|c| c == name);
    let cols = [
        "arrived",
        "completed",
        "failed",
        "corrupted",
        "unfinished",
        "aborted",
    ];
    let idx: Vec<Option<usize>> = cols.iter().map(|c| col(c)).collect();
    if let Some(i) = idx.iter().position(Option::is_none) {
        return Some(format!("sweep.csv has no column {}", cols[i]));
    }
    for (n, rec) in r.records().enumerate() {
        let rec = rec.ok()?;
        let v: Vec<Option<u64>> = idx
            .iter()
            .map(|i| rec.get(i.expect("checked")).and_then(|x| x.parse().ok()))
            .collect();
        // An infeasible point has no counts at all.
        if v.iter().all(Option::is_none) {
            continue;
        }
        let v: Vec<u64> = v.into_iter().map(|x| x.unwrap_or(u64::MAX)).collect();
        if v[0] != v[1..].iter().fold(0u64, |a, b| a.saturating_add(*b)) {
            return Some(format!("row {}: {:?} = {v:?}", n + 2, cols));
        }
    }
    None
}

/// Loads, checks the rejection or runs the scenario twice.
fn scenario_case(text: &str, path: &Path, sets: &[String]) -> Status {
    let loaded = match std::panic::catch_unwind(|| pdsim::scenario::from_str(text, path, sets)) {
        Ok(r) => r,
        Err(_) => {
            return fail(
                "panic",
                format!("while loading: {}", PANIC_MSG.lock().unwrap()),
            );
        }
    };
    let sc = match loaded {
        Err(e) => {
            if e.message.trim().is_empty() {
                return fail("empty-message", e.to_string());
            }
            // A rejection names the key, a line, or the `--set` argument it is about.
            let names_set = e.message.starts_with("--set ") || e.message.starts_with("--set \"");
            if e.key.is_empty() && e.line.is_none() && !names_set {
                return fail("keyless-rejection", e.to_string());
            }
            return Status::Rejected;
        }
        Ok(sc) => sc,
    };
    let gpus: u64 = sc
        .pools
        .iter()
        .map(|p| p.instances as u64 * p.server.tp_size as u64)
        .sum();
    if gpus > MAX_GPUS_TO_RUN || sc.placement.nodes > 64 {
        return Status::Accepted;
    }
    let mut sc = sc;
    sc.max_requests = Some(sc.max_requests.unwrap_or(MAX_REQUESTS).min(MAX_REQUESTS));
    sc.duration_ns = sc.duration_ns.min(MAX_DURATION_NS);
    sc.drain_timeout_ns = sc.drain_timeout_ns.min(MAX_DRAIN_NS);
    let run = || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut sink = pdsim::metrics::VecSink::default();
            let (stats, counts) = {
                let mut w = pdsim::sim::World::new(&sc, &mut sink);
                let stats = w.run();
                (stats, w.collector.counts.clone())
            };
            (stats, counts, sink)
        }))
    };
    let (stats, counts, sink) = match run() {
        Ok(x) => x,
        Err(_) => {
            return fail(
                "panic",
                format!("while running: {}", PANIC_MSG.lock().unwrap()),
            );
        }
    };
    let stats = match stats {
        Ok(s) => s,
        Err(e) => return fail("run-error", e.to_string()),
    };
    let c = &counts;
    if c.arrived != c.completed + c.failed + c.corrupted + c.unfinished + c.aborted {
        return fail("conservation", format!("{c:?}"));
    }
    if sink.requests.len() as u64 != c.arrived {
        return fail(
            "conservation",
            format!(
                "{} request rows for {} arrivals",
                sink.requests.len(),
                c.arrived
            ),
        );
    }
    if let Some((i, r)) = sink
        .requests
        .iter()
        .enumerate()
        .find(|(i, r)| r.id != *i as u64)
    {
        return fail("conservation", format!("row {i} has id {}", r.id));
    }
    let (stats2, counts2, sink2) = match run() {
        Ok((Ok(s), c, k)) => (s, c, k),
        Ok((Err(e), _, _)) => return fail("nondeterministic", format!("second run failed: {e}")),
        Err(_) => {
            return fail(
                "panic",
                format!("on the rerun: {}", PANIC_MSG.lock().unwrap()),
            );
        }
    };
    if format!("{stats:?}{counts:?}") != format!("{stats2:?}{counts2:?}")
        || sink.requests != sink2.requests
        || format!("{:?}{:?}", sink.timeseries, sink.links)
            != format!("{:?}{:?}", sink2.timeseries, sink2.links)
    {
        return fail("nondeterministic", format!("{stats:?} vs {stats2:?}"));
    }
    Status::Ran
}

fn trace_case(dir: &Path, name: &str, bytes: &[u8], format: Option<&str>) -> Status {
    use pdsim::workload::trace;
    let path = dir.join(name);
    write_files(dir, &[(name.to_string(), bytes.to_vec())]);
    let direct = std::panic::catch_unwind(|| {
        let fmt = match format {
            Some(f) => f.parse::<trace::TraceFormat>().map_err(|e| e.to_string())?,
            None => trace::detect_format(&path).map_err(|e| e.to_string())?,
        };
        trace::read_trace(&path, fmt)
            .map(|rows| {
                trace::trace_stats(&rows);
            })
            .map_err(|e| e.to_string())
    });
    match direct {
        Err(_) => {
            return fail(
                "panic",
                format!("reading the trace: {}", PANIC_MSG.lock().unwrap()),
            );
        }
        Ok(Err(m)) if m.trim().is_empty() => return fail("empty-message", "trace error"),
        Ok(Err(m)) if !m.contains(name) && !m.contains("format") => {
            return fail("unnamed-trace-error", m);
        }
        _ => {}
    }
    let fmt_line = format
        .map(|f| format!(", format = \"{f}\""))
        .unwrap_or_default();
    let mut rng = Rng::new(bytes.len() as u64, 7);
    let text = small_scenario(
        &mut rng,
        "preset = \"llama-3.1-8b\"",
        &format!("trace = {{ path = \"{name}\"{fmt_line} }}"),
    );
    scenario_case(&text, &dir.join("scenario.toml"), &[])
}

/// The share of command lines that also run as a process: the slice that sees exit codes,
/// signals and aborts as a shell does (the rest run in-process, ~50× cheaper).
pub const SPAWN_SHARE: f64 = 1.0 / 16.0;
/// Cases a worker runs before it exits and the driver starts a fresh one, so what one case
/// leaks (a signal handler's message, a verb's caches) never adds up to the memory limit.
const CASES_PER_WORKER: u64 = 5_000;

/// How a command line ended: its exit code and its message (stderr for a process, the
/// error's text in-process).
struct Ended {
    code: i32,
    message: String,
}

/// Set by a worker once its standard output goes to a capture file (see [`worker_main`]).
static CAPTURING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The file a worker's standard output goes to while a case runs, in the case folder.
const CAPTURE: &str = ".stdout";

unsafe extern "C" {
    // libc's dup(2) and dup2(2), which std links already.
    fn dup(fd: i32) -> i32;
    fn dup2(from: i32, to: i32) -> i32;
}

/// Points standard output (fd 1) at a fresh `dir/.stdout`, so a verb's output is captured
/// there instead of mixing with the worker's protocol.
fn capture_stdout(dir: &Path) {
    use std::os::fd::AsRawFd;
    if !CAPTURING.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let _ = std::io::stdout().flush();
    if let Ok(f) = std::fs::File::create(dir.join(CAPTURE)) {
        // SAFETY: dup2 onto fd 1, which std's stdout writes to and never closes.
        unsafe {
            dup2(f.as_raw_fd(), 1);
        }
    }
}

/// What the line printed on standard output (in-process, when captured).
fn captured(dir: &Path) -> Option<Vec<u8>> {
    let _ = std::io::stdout().flush();
    CAPTURING
        .load(std::sync::atomic::Ordering::Relaxed)
        .then(|| std::fs::read(dir.join(CAPTURE)).unwrap_or_default())
}

/// Calls `pdsim ARGS` in this process as `main` does — clap parses, `cli::dispatch` runs —
/// under `catch_unwind`: a panic here is what exit 4 is for the binary. The worker's cwd is
/// the case folder, so relative paths mean what they mean to the process.
fn cli_in_process(dir: &Path, args: &[std::ffi::OsString]) -> Result<Ended, Status> {
    use clap::Parser;
    let _ = std::fs::remove_dir_all(dir.join("out"));
    capture_stdout(dir);
    let argv: Vec<std::ffi::OsString> = std::iter::once("pdsim".into())
        .chain(args.iter().cloned())
        .collect();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        match pdsim::cli::Cli::try_parse_from(argv) {
            // clap's own: 0 for --help and --version, 2 for a usage error.
            Err(e) => Ok(Ended {
                code: e.exit_code(),
                message: e.to_string(),
            }),
            Ok(cli) => match pdsim::cli::dispatch(cli) {
                Ok(()) => Ok(Ended {
                    code: 0,
                    message: String::new(),
                }),
                // A rejected scenario names a key, a line or the `--set` argument — or, when
                // the file itself cannot be read, the file alone (its path leads the message).
                Err(pdsim::app::CliError::Scenario(e))
                    if e.key.is_empty()
                        && e.line.is_none()
                        && !e.message.starts_with("--set ")
                        && !e.message.starts_with("cannot read the scenario file") =>
                {
                    Err(fail("keyless-rejection", e.to_string()))
                }
                Err(e) => Ok(Ended {
                    code: e.exit_code(),
                    message: e.to_string(),
                }),
            },
        }
    }));
    match r {
        Ok(x) => x,
        Err(_) => Err(fail(
            "panic",
            format!("in-process: {}", PANIC_MSG.lock().unwrap()),
        )),
    }
}

/// Runs `pdsim` on a CLI line as a process, under a memory limit and a timeout.
fn cli_process(
    bin: &Path,
    dir: &Path,
    args: &[std::ffi::OsString],
    timeout: Duration,
) -> Result<Ended, Status> {
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let mut child = match limited(bin)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Err(fail("spawn", e.to_string())),
    };
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.by_ref().take(1 << 20).read_to_end(&mut s);
        String::from_utf8_lossy(&s).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let err = reader.join().unwrap_or_default();
    let tail: String = err
        .lines()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join(" / ");
    let Some(status) = status else {
        return Err(fail("hang", format!("pdsim ran longer than {timeout:?}")));
    };
    match status.code() {
        Some(code) => Ok(Ended { code, message: err }),
        None => {
            use std::os::unix::process::ExitStatusExt;
            Err(fail(
                &format!("signal {}", status.signal().unwrap_or(0)),
                tail,
            ))
        }
    }
}

/// Runs `pdsim` on a CLI line as a process (the shared oracle of [`judge`], without a
/// line's own expectations).
pub fn cli_case(bin: &Path, dir: &Path, args: &[std::ffi::OsString], timeout: Duration) -> Status {
    match cli_process(bin, dir, args, timeout) {
        Ok(e) => judge(&CliLine::default(), &e, dir, None),
        Err(s) => s,
    }
}

/// Whether the first line of a refusal says what it is about: a flag (`--x`), one of the
/// arguments given (a file, a folder, a value) or a part of one's path, a file the case
/// wrote (found under a folder given), or clap's own `error:` (which names the argument on
/// its own terms).
fn names_something(first: &str, line: &CliLine) -> bool {
    let args = &line.args;
    let mentions = |a: &std::ffi::OsString| {
        let a = a.to_string_lossy();
        (!a.is_empty() && first.starts_with(&format!("{a}: ")))
            || a.len() >= 2
                && (first.contains(a.as_ref())
                    || a.split('/')
                        .filter(|p| p.len() >= 2)
                        .any(|p| first.contains(p)))
    };
    first.contains("--")
        || first.contains("error:")
        || args.iter().any(mentions)
        || line.files.iter().any(|(f, _)| first.contains(f.as_str()))
}

/// The oracle of a command line that ended with `e`: exit 0–3, a message with 2 and 3, the
/// line's allowed codes and named file, the files it must leave, and JSON that parses when
/// `--json` was asked (`stdout`: what it printed, when captured).
fn judge(line: &CliLine, e: &Ended, dir: &Path, stdout: Option<&[u8]>) -> Status {
    for (name, want) in &line.keep {
        if std::fs::read(dir.join(name)).ok().as_deref() != Some(want.as_slice()) {
            return fail(
                "written through",
                format!("{name} was changed (exit {}): {}", e.code, e.message),
            );
        }
    }
    if e.code == 0
        && let Some(csv) = &line.conserve
        && let Some(why) = unconserved_row(&dir.join(csv))
    {
        return fail("sweep row does not conserve", why);
    }
    // The error's line: in-process the message's first; a process's stderr may hold notes
    // and warnings first, and `main` prefixes its error line with `pdsim: `.
    let first = e
        .message
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("pdsim: "))
        .unwrap_or_else(|| e.message.lines().next().unwrap_or(""))
        .to_string();
    match e.code {
        0..=3 => {}
        c => return fail(&format!("exit {c}"), e.message.clone()),
    }
    if matches!(e.code, 2 | 3) && e.message.trim().is_empty() {
        return fail("empty-message", "exit 2/3 with nothing on stderr");
    }
    if matches!(e.code, 2 | 3) && !names_something(&first, line) {
        return fail("keyless message", first);
    }
    if !line.codes.is_empty() && !line.codes.contains(&e.code) {
        return fail(
            "wrong exit",
            format!("exit {}, expected one of {:?}: {first}", e.code, line.codes),
        );
    }
    if let Some(n) = &line.names
        && matches!(e.code, 2 | 3)
        && !e.message.contains(n.as_str())
    {
        return fail(
            "refusal names no file",
            format!("the message does not name {n}: {first}"),
        );
    }
    if e.code == 0 {
        for (name, want) in &line.expect {
            let got = std::fs::read(dir.join(name)).unwrap_or_default();
            if got != *want {
                return fail(
                    "mixed-up output",
                    format!(
                        "exit 0, but {name} is not what the inputs give ({} bytes, {} expected)",
                        got.len(),
                        want.len()
                    ),
                );
            }
        }
        if let Some(out) = stdout
            && line.args.iter().any(|a| a == "--json")
            && serde_json::from_slice::<serde_json::Value>(out).is_err()
        {
            return fail(
                "bad json",
                format!(
                    "--json printed what is not JSON: {}",
                    shorten(&String::from_utf8_lossy(out), 300)
                ),
            );
        }
    }
    match e.code {
        c @ (0 | 1) => Status::Exited(c),
        _ => Status::Rejected,
    }
}

/// With `PDSIM_FUZZ_MESSAGES=FILE`, appends `verb<TAB>exit<TAB>first line of the message`
/// of every refused line to FILE, to read what users are told (the oracle checks only that a
/// message exists and, where the case knows it, names the file).
fn log_message(line: &CliLine, e: &Ended) {
    if let Some(path) = std::env::var_os("PDSIM_FUZZ_MESSAGES")
        && e.code >= 2
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let first = e.message.lines().next().unwrap_or("");
        let _ = writeln!(f, "{}\t{}\t{first}", line.verb, e.code);
    }
}

/// Holds the lock of `line.hold_lock` (a writer that is alive) while `f` runs.
fn with_lock<T>(line: &CliLine, dir: &Path, f: impl FnOnce() -> T) -> T {
    let guard = line
        .hold_lock
        .as_ref()
        .and_then(|d| pdsim::app::outdir::OutDir::open(&dir.join(d), "fuzz", &[], false).ok());
    let r = f();
    drop(guard);
    r
}

/// A command line: in-process, and for the spawned slice also as a process, whose exit code
/// must be the same.
fn cli_line(line: &CliLine, spawn: bool, dir: &Path, bin: Option<&Path>) -> Status {
    write_files(dir, &line.files);
    plant(dir, line);
    let inproc = match with_lock(line, dir, || cli_in_process(dir, &line.args)) {
        Ok(e) => e,
        Err(s) => return s,
    };
    let status = judge(line, &inproc, dir, captured(dir).as_deref());
    log_message(line, &inproc);
    if matches!(status, Status::Fail { .. }) || !spawn {
        return status;
    }
    let Some(bin) = bin else {
        return status;
    };
    write_files(dir, &line.files);
    plant(dir, line);
    let proc = match with_lock(line, dir, || {
        cli_process(bin, dir, &line.args, Duration::from_secs(30))
    }) {
        Ok(e) => e,
        Err(s) => return s,
    };
    let st = judge(line, &proc, dir, None);
    if matches!(st, Status::Fail { .. }) {
        return st;
    }
    if proc.code != inproc.code {
        return fail(
            "in-process and process differ",
            format!(
                "in-process exit {} ({}), as a process exit {} ({})",
                inproc.code,
                inproc.message.lines().next().unwrap_or(""),
                proc.code,
                proc.message.lines().last().unwrap_or("")
            ),
        );
    }
    st
}

/// `sh -c 'ulimit -v N; exec BIN'`.
fn limited(bin: &Path) -> Command {
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(format!(
            "ulimit -v {MEM_LIMIT_KIB} 2>/dev/null; exec \"$0\" \"$@\""
        ))
        .arg(bin);
    c
}

/// Runs one case in this process (a worker).
/// Runs one case in this process (a worker).
pub fn run_case(case: &Case, dir: &Path, bin: Option<&Path>) -> Status {
    match &case.input {
        Input::Scenario {
            text,
            path,
            sets,
            files,
        } => {
            write_files(dir, files);
            let path = if path.is_absolute() {
                path.clone()
            } else {
                dir.join(path)
            };
            scenario_case(text, &path, sets)
        }
        Input::Trace {
            name,
            bytes,
            format,
        } => trace_case(dir, name, bytes, format.as_deref()),
        Input::Cli { line, spawn } => cli_line(line, *spawn, dir, bin),
    }
}

/// The body of a worker process: runs cases `first, first+stride, …` up to `last` (at most
/// [`CASES_PER_WORKER`] of them), printing a begin line before and a result line after each
/// on the protocol channel (standard output as it was at start; the verbs' own output goes to
/// a capture file). The begin line goes to stderr too, so the driver can tell which case
/// wrote what a crash leaves there.
pub fn worker_main(spec: &str, root: &Path, bin: Option<&Path>) {
    use std::os::fd::FromRawFd;
    let f: Vec<u64> = spec
        .split_whitespace()
        .map(|x| x.parse().expect("worker spec"))
        .collect();
    let (seed, first, stride, last) = (f[0], f[1], f[2], f[3]);
    std::panic::set_hook(Box::new(|info| {
        let loc = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        *PANIC_MSG.lock().unwrap() = format!("{msg} (at {loc})");
    }));
    let corpus = Corpus::load(root);
    let dir = std::env::temp_dir().join(format!("pdsim-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The verbs resolve relative paths against the cwd, as they would in a shell there.
    std::env::set_current_dir(&dir).expect("cd into the case folder");
    let _ = std::io::stdout().flush();
    // SAFETY: dup(1) returns a new descriptor this function alone owns.
    let fd = unsafe { dup(1) };
    assert!(fd >= 0, "dup(1) failed");
    // SAFETY: `fd` is open and owned by nothing else.
    let mut proto = unsafe { std::fs::File::from_raw_fd(fd) };
    CAPTURING.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut i = first;
    let mut ran = 0u64;
    while i <= last && ran < CASES_PER_WORKER {
        let case = generate(&corpus, seed, i);
        let _ = writeln!(std::io::stderr(), "{TAG}B {i}");
        writeln!(proto, "{TAG}B {i}").unwrap();
        proto.flush().unwrap();
        let status = run_case(&case, &dir, bin);
        writeln!(
            proto,
            "{TAG}E {i} {}",
            serde_json::to_string(&status).unwrap()
        )
        .unwrap();
        proto.flush().unwrap();
        ran += 1;
        match i.checked_add(stride) {
            Some(n) => i = n,
            None => break,
        }
    }
    let _ = std::env::set_current_dir(root);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// Driving workers
// ---------------------------------------------------------------------------------------------

/// A campaign.
pub struct Plan {
    pub seed: u64,
    /// Cases `0..cases` (or until the deadline).
    pub cases: u64,
    pub deadline: Option<Instant>,
    pub workers: u64,
    pub case_timeout: Duration,
    /// Builds the command of a worker (the current binary, told to be a worker).
    pub worker: Box<dyn Fn() -> Command>,
    /// Only this case (reproducing).
    pub only: Option<u64>,
    /// Print a progress line on stderr this often.
    pub progress: Option<Duration>,
}

/// What a campaign found.
#[derive(Default)]
pub struct Report {
    pub cases: u64,
    pub by_status: BTreeMap<String, u64>,
    pub by_class: BTreeMap<String, u64>,
    pub failures: Vec<Failure>,
    pub elapsed: Duration,
    /// Command lines that also ran as a process.
    pub spawned: u64,
}

enum Msg {
    Begin(u64),
    End(u64, Status),
    Eof,
}

struct Worker {
    child: Child,
    rx: mpsc::Receiver<Msg>,
    current: Option<(u64, Instant)>,
    next: u64,
    stderr: PathBuf,
}

fn spawn_worker(plan: &Plan, w: u64, first: u64, stride: u64, last: u64, tmp: &Path) -> Worker {
    let stderr = tmp.join(format!("worker{w}.stderr"));
    let mut cmd = (plan.worker)();
    // Run it under a memory limit: re-exec through sh.
    let prog = PathBuf::from(cmd.get_program());
    let args: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
    let envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
        .collect();
    let mut c = limited(&prog);
    c.args(args);
    for (k, v) in envs {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    cmd = c;
    cmd.env("RUST_BACKTRACE", "0");
    cmd.env(WORKER_ENV, format!("{} {first} {stride} {last}", plan.seed));
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let mut child = cmd.spawn().expect("spawn a fuzz worker");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(rest) = line.strip_prefix(TAG) else {
                continue;
            };
            let (tag, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let msg = match tag {
                "B" => Msg::Begin(rest.trim().parse().unwrap()),
                _ => {
                    let (i, json) = rest.split_once(' ').unwrap();
                    Msg::End(i.parse().unwrap(), serde_json::from_str(json).unwrap())
                }
            };
            if tx.send(msg).is_err() {
                return;
            }
        }
        let _ = tx.send(Msg::Eof);
    });
    Worker {
        child,
        rx,
        current: None,
        next: first,
        stderr,
    }
}

/// Runs a campaign: `plan.workers` worker processes, each taking every `workers`-th case.
pub fn drive(plan: &Plan, corpus: &Corpus, mut on_failure: impl FnMut(&Failure, &Case)) -> Report {
    let start = Instant::now();
    let tmp = std::env::temp_dir().join(format!("pdsim-fuzz-driver-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut report = Report::default();
    let (stride, first_of, last) = match plan.only {
        Some(i) => (1, vec![i], i),
        None => (
            plan.workers,
            (0..plan.workers).collect(),
            if plan.deadline.is_some() {
                u64::MAX
            } else {
                plan.cases.saturating_sub(1)
            },
        ),
    };
    if plan.only.is_none() && plan.cases == 0 && plan.deadline.is_none() {
        return report;
    }
    let mut workers: Vec<Option<Worker>> = first_of
        .iter()
        .enumerate()
        .map(|(w, &f)| Some(spawn_worker(plan, w as u64, f, stride, last, &tmp)))
        .collect();
    let mut last_progress = Instant::now();
    let mut record = |report: &mut Report, i: u64, status: Status| {
        let case = generate(corpus, plan.seed, i);
        report.cases += 1;
        *report.by_class.entry(case.class.to_string()).or_default() += 1;
        if matches!(case.input, Input::Cli { spawn: true, .. }) {
            report.spawned += 1;
        }
        let key = match &status {
            Status::Fail { .. } => "failure".to_string(),
            Status::Exited(c) => format!("exit {c}"),
            s => format!("{s:?}").to_lowercase(),
        };
        *report.by_status.entry(key).or_default() += 1;
        if let Status::Fail { kind, detail } = status {
            let f = Failure {
                index: i,
                class: case.class,
                kind,
                detail,
                mutations: case.mutations.clone(),
            };
            on_failure(&f, &case);
            report.failures.push(f);
        }
    };
    loop {
        let mut alive = 0;
        for (w, slot) in workers.iter_mut().enumerate() {
            let Some(wk) = slot.as_mut() else {
                continue;
            };
            alive += 1;
            // Drain what the worker said.
            let mut died = false;
            loop {
                match wk.rx.try_recv() {
                    Ok(Msg::Begin(i)) => wk.current = Some((i, Instant::now())),
                    Ok(Msg::End(i, s)) => {
                        wk.current = None;
                        wk.next = i.saturating_add(stride);
                        record(&mut report, i, s);
                    }
                    Ok(Msg::Eof) | Err(mpsc::TryRecvError::Disconnected) => {
                        died = true;
                        break;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                }
            }
            let out_of_time = plan.deadline.is_some_and(|d| Instant::now() >= d);
            let hung = wk
                .current
                .is_some_and(|(_, t)| t.elapsed() > plan.case_timeout);
            if died || hung || out_of_time {
                if !died {
                    let _ = wk.child.kill();
                }
                let status = wk.child.wait().ok();
                if let Some((i, _)) = wk.current.take()
                    && !out_of_time
                {
                    let all = std::fs::read_to_string(&wk.stderr).unwrap_or_default();
                    // Only what this case wrote: the text after its begin line.
                    let marker = format!("{TAG}B {i}\n");
                    let err = &all[all.rfind(&marker).map_or(0, |p| p + marker.len())..];
                    // The line that says why (allocation failure, stack overflow, …), else the last.
                    let tail = err
                        .lines()
                        .find(|l| {
                            [
                                "memory allocation",
                                "overflowed",
                                "panicked",
                                "fatal",
                                "abort",
                                "error",
                            ]
                            .iter()
                            .any(|k| l.contains(k))
                        })
                        .or_else(|| err.lines().last())
                        .unwrap_or("")
                        .to_string();
                    let kind = if hung {
                        "hang".to_string()
                    } else {
                        use std::os::unix::process::ExitStatusExt;
                        match status {
                            Some(s) if s.signal().is_some() => {
                                format!("signal {}", s.signal().unwrap())
                            }
                            Some(s) => format!("worker exit {}", s.code().unwrap_or(-1)),
                            None => "worker lost".into(),
                        }
                    };
                    let detail = if hung {
                        format!("no result within {:?}", plan.case_timeout)
                    } else {
                        tail
                    };
                    record(&mut report, i, Status::Fail { kind, detail });
                    wk.next = i.saturating_add(stride);
                }
                let next = wk.next;
                *slot = if !out_of_time && next <= last && plan.only.is_none() && (died || hung) {
                    Some(spawn_worker(plan, w as u64, next, stride, last, &tmp))
                } else {
                    None
                };
            }
        }
        if alive == 0 {
            break;
        }
        if let Some(every) = plan.progress
            && last_progress.elapsed() >= every
        {
            last_progress = Instant::now();
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "fuzz: {:.0} s: {} cases ({:.0}/s), {} spawned, {} failures",
                secs,
                report.cases,
                report.cases as f64 / secs.max(1e-9),
                report.spawned,
                report.failures.len()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::fs::remove_dir_all(&tmp);
    report.elapsed = start.elapsed();
    report
}

/// Prints a campaign's counts and failures grouped by kind; returns the failures that are not
/// known bugs.
pub fn print_report(r: &Report, seed: u64, reproduce: &dyn Fn(u64) -> String) -> Vec<Failure> {
    eprintln!(
        "fuzz: seed {seed}: {} cases in {:.1} s ({:.0}/s), {} also as a process; by outcome {:?}; by class {:?}",
        r.cases,
        r.elapsed.as_secs_f64(),
        r.cases as f64 / r.elapsed.as_secs_f64().max(1e-9),
        r.spawned,
        r.by_status,
        r.by_class
    );
    let mut groups: BTreeMap<String, Vec<&Failure>> = BTreeMap::new();
    for f in &r.failures {
        groups.entry(f.group()).or_default().push(f);
    }
    let mut unknown = Vec::new();
    for (g, fs) in &groups {
        let f = fs[0];
        let known = known_bug(f);
        eprintln!(
            "\n== {g}\n   {} case(s), {}\n   first: case {} mutations {:?}\n   detail: {}\n   reproduce: {}",
            fs.len(),
            match known {
                Some(item) => format!("KNOWN BUG ({item})"),
                None => "NEW".into(),
            },
            f.index,
            f.mutations,
            shorten(&f.detail, 600),
            reproduce(f.index)
        );
        for f in fs {
            if known_bug(f).is_none() {
                unknown.push((*f).clone());
            }
        }
    }
    unknown
}
