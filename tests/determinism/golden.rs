//! Golden results: every scenario in `scenarios/` gives the same bytes in `summary.json`,
//! `requests.csv`, `timeseries.csv` and `links.csv` as when the table in
//! `tests/golden/hashes.txt` was written. A refactor that changes a result fails here; a change
//! of behaviour made on purpose rewrites the table (`PDSIM_BLESS=1 cargo test --release --test
//! determinism golden`) and says why in its commit.
//!
//! The hash is 64-bit FNV-1a: enough to tell two files apart, written out here rather than
//! adding a crate for a test.
//!
//! `sim.events` in `summary.json` is masked: it counts the simulator's own work (coalesced
//! decode runs, fabric timers), not anything that happened to a request, so a change of how
//! the simulator gets there is not a change of results. `tests/determinism/determinism.rs` still
//! holds it to the same value run after run.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const FILES: [&str; 4] = [
    "summary.json",
    "requests.csv",
    "timeseries.csv",
    "links.csv",
];

/// The line a scenario carries when the golden table pins its `summary.json` alone.
const SUMMARY_ONLY: &str = "# golden: summary-only";

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The bytes that are pinned: `summary.json`'s `sim.events` masked (see the module docs).
fn pinned(name: &str, bytes: Vec<u8>) -> Vec<u8> {
    if name != "summary.json" {
        return bytes;
    }
    let text = String::from_utf8(bytes).expect("summary.json is UTF-8");
    let mut masked = 0;
    let out: Vec<String> = text
        .split('\n')
        .map(|l| match l.trim_start().strip_prefix("\"events\": ") {
            // `sim.events` is a number (`autoscaling.events` is a list, pinned).
            Some(v) if v.starts_with(|c: char| c.is_ascii_digit()) => {
                masked += 1;
                let indent = &l[..l.len() - l.trim_start().len()];
                format!("{indent}\"events\": \"masked\",")
            }
            _ => l.to_string(),
        })
        .collect();
    assert_eq!(masked, 1, "summary.json should have one sim.events");
    out.join("\n").into_bytes()
}

fn scenarios(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            scenarios(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
}

/// A blessed hash says nothing about whether a figure makes sense: every latency figure in
/// `summary.json` must lie between 0 and the simulated time (a `u64` difference taken the wrong
/// way round once read 1.8e13 ms and was blessed).
fn latencies_are_within_the_run(rel: &str, dir: &Path) {
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
    let run_ms = s["sim"]["simulated_s"].as_f64().unwrap() * 1e3;
    for (name, stats) in s["latency_ms"].as_object().unwrap() {
        for (k, v) in stats.as_object().unwrap() {
            if let Some(x) = v.as_f64() {
                assert!(
                    (0.0..=run_ms).contains(&x),
                    "{rel}: latency_ms.{name}.{k} = {x} outside [0, {run_ms}]"
                );
            }
        }
    }
}

#[test]
fn every_scenario_gives_its_recorded_bytes() {
    let root = common::repo();
    let mut files = Vec::new();
    scenarios(&root.join("scenarios"), &mut files);
    assert!(files.len() >= 20, "found {} scenarios", files.len());
    let mut got = BTreeMap::new();
    let out = common::tmpdir("golden");
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let dir = out.join(rel.replace('/', "_"));
        // A scenario of a day at a realistic rate writes half a gigabyte of rows: its summary
        // is pinned (and `tests/autoscale` reads its figures).
        let files: &[&str] = if std::fs::read_to_string(f).unwrap().contains(SUMMARY_ONLY) {
            let sc = pdsim::scenario::load(f, &[]).unwrap();
            pdsim::app::run::run_summary_only(&sc, &dir, false).unwrap();
            &FILES[..1]
        } else {
            common::run(&rel, &[], &dir);
            &FILES
        };
        latencies_are_within_the_run(&rel, &dir);
        for &name in files {
            let bytes = pinned(name, std::fs::read(dir.join(name)).unwrap());
            got.insert(format!("{rel} {name}"), format!("{:016x}", fnv1a(&bytes)));
        }
    }
    let table_path = root.join("tests/golden/hashes.txt");
    let table: String = got.iter().map(|(k, v)| format!("{v} {k}\n")).collect();
    if std::env::var_os("PDSIM_BLESS").is_some() {
        std::fs::write(&table_path, &table).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&table_path).unwrap();
    let mut diffs = Vec::new();
    let want: BTreeMap<&str, &str> = want
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(h, k)| (k, h)))
        .collect();
    for (k, h) in &got {
        match want.get(k.as_str()) {
            Some(w) if *w == h => {}
            Some(w) => diffs.push(format!("{k}: recorded {w}, now {h}")),
            None => diffs.push(format!("{k}: not in the table (new scenario? bless it)")),
        }
    }
    for k in want.keys() {
        if !got.contains_key(*k) {
            diffs.push(format!("{k}: in the table but no longer produced"));
        }
    }
    assert!(
        diffs.is_empty(),
        "results changed:\n{}\nIf on purpose: PDSIM_BLESS=1 cargo test --release --test determinism golden",
        diffs.join("\n")
    );
}

/// `pools.server.enable_mixed_chunk = true` is the colocated server pdsim ran before the key
/// existed (issue 43: every forward mixed the decode batch with the prefill chunk): with it,
/// every colocated scenario gives the bytes it was blessed with then, under the calibration
/// of then (`sglang-2025`). (Its default, sglang's `false`, and the default calibration,
/// `sglang-2026`, changed their results: the golden table above has those. DistServe's
/// colocated scenario is not here: it now prices its steps by DistServe's measured profile.
/// `summary.json`'s hashes are re-recorded for the inter-token gap figures every summary
/// gained, `latency_ms.tbt` and `latency_ms.e2e_per_token`; the other files are those of then.)
#[test]
fn mixed_chunk_on_keeps_the_colocated_bytes_of_before() {
    const BEFORE: [(&str, &str, [&str; 4]); 3] = [
        (
            "scenarios/calibration/sharegpt-colocated.toml",
            "server",
            [
                "d891e123b2e50e12",
                "490531ce95221d17",
                "803b6ae483355045",
                "346eb78c25ca4ffb",
            ],
        ),
        (
            "scenarios/plan/colocated-8b.toml",
            "servers",
            [
                "d3db1b67027a4d76",
                "c2e8227fbc18ebf8",
                "4b032668dafc4607",
                "346eb78c25ca4ffb",
            ],
        ),
        (
            "scenarios/published/splitwise-table4.toml",
            "server",
            [
                "0b899752a6cf5eda",
                "a26c84da44048337",
                "94e92f57fa0ea751",
                "346eb78c25ca4ffb",
            ],
        ),
    ];
    let out = common::tmpdir("golden-mixed");
    let mut diffs = Vec::new();
    for (rel, pool, hashes) in BEFORE {
        let dir = out.join(rel.replace('/', "_"));
        let set = format!("pools.{pool}.server.enable_mixed_chunk=true");
        // The default's scenarios under the calibration of then; Splitwise's names its own.
        let then = if rel.contains("splitwise") {
            "hardware.calibration=vllm-2023"
        } else {
            "hardware.calibration=sglang-2025"
        };
        // sglang 0.3.0's benchmark now says its loop had no overlap scheduler, a flag the
        // serial calibration of then refuses (it priced that host work serially already).
        let overlap = format!("pools.{pool}.server.disable_overlap_schedule=false");
        common::run(rel, &[&set, then, &overlap], &dir);
        for (name, want) in FILES.iter().zip(hashes) {
            let bytes = pinned(name, std::fs::read(dir.join(name)).unwrap());
            let got = format!("{:016x}", fnv1a(&bytes));
            if got != want {
                diffs.push(format!("{rel} {name}: {got} (was {want})"));
            }
        }
    }
    assert!(diffs.is_empty(), "{diffs:#?}");
}
