//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pdsim::app::run::run_scenario;
use pdsim::report::Summary;
use pdsim::scenario;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path in the reference data beside the repository (`../shared/REL`: traces, model configs,
/// measurements). Missing, the test stops here with one message naming it and where it belongs,
/// not with an `unwrap()` deep in a reader.
pub fn shared(rel: &str) -> PathBuf {
    let p = repo().join("../shared").join(rel);
    assert!(p.exists(), "{}", pdsim::shared_missing(&p));
    p
}

/// A fresh, empty folder for one test's output.
///
/// The folder is removed when the returned guard drops, unless the test is failing (a
/// panicking thread keeps it, to be read). Test runs used to leave every folder behind: a
/// developer's `/tmp` filled by a few hundred MB a run until the disk did.
pub fn tmpdir(name: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("pdsim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TmpDir(d)
}

/// A test's output folder ([`tmpdir`]); read it as a `Path`.
#[derive(Debug)]
pub struct TmpDir(PathBuf);

impl std::ops::Deref for TmpDir {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for TmpDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for TmpDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs `scenario` (relative to the repo) with `sets` into `dir`.
pub fn run(scenario: &str, sets: &[&str], dir: &Path) -> Summary {
    // A scenario that reads a trace from ../shared says so before it fails to load.
    if std::fs::read_to_string(repo().join(scenario)).is_ok_and(|t| t.contains("shared/traces")) {
        shared("traces");
    }
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = scenario::load(&repo().join(scenario), &sets)
        .unwrap_or_else(|e| panic!("{scenario} does not load: {e}"));
    run_scenario(&sc, dir)
        .unwrap_or_else(|e| panic!("{scenario} failed to run: {e}"))
        .summary
}

/// Runs `scenario` with `sets` into a scratch folder named `tag` and returns its summary and
/// its `requests.csv` rows (the folder is removed when the test passes).
pub fn run_rows(
    scenario: &str,
    sets: &[&str],
    tag: &str,
) -> (Summary, Vec<std::collections::BTreeMap<String, String>>) {
    let dir = tmpdir(tag);
    let s = run(scenario, sets, &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    (s, rows)
}

/// A column that must hold a number, as u64 (the panic names the column and the request).
pub fn ns(r: &std::collections::BTreeMap<String, String>, k: &str) -> u64 {
    r[k].parse()
        .unwrap_or_else(|_| panic!("{k} of request {}", r["id"]))
}

/// Rows of a CSV file as header → value maps, in file order.
pub fn read_csv(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let headers = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// A column as u64 (None where empty).
pub fn num(row: &std::collections::BTreeMap<String, String>, col: &str) -> Option<u64> {
    let v = row.get(col).unwrap_or_else(|| panic!("no column {col}"));
    if v.is_empty() {
        None
    } else {
        Some(
            v.parse()
                .unwrap_or_else(|_| panic!("{col} = {v:?} is not a number")),
        )
    }
}

/// Runs the `pdsim` binary from the repository root: (exit code, stdout, stderr).
pub fn pdsim<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A Mooncake trace's own prefix reuse over its first `rows` rows, from its `hash_ids` alone
/// (what a cache that saw every earlier request would hit): each row hits the longest prefix of its
/// blocks that any earlier row had (whole 512-token blocks, capped at its prompt).
pub fn trace_reuse_bound(path: &std::path::Path, rows: usize) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let (mut hit, mut all) = (0u64, 0u64);
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(rows) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ids: Vec<u64> = v["hash_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        let input = v["input_length"].as_u64().unwrap();
        let m = (1..=ids.len())
            .take_while(|&k| seen.contains(&ids[..k]))
            .count() as u64;
        hit += (m * 512).min(input);
        all += input;
        for k in 1..=ids.len() {
            seen.insert(ids[..k].to_vec());
        }
    }
    hit as f64 / all as f64
}

/// Share of all prefill instances' prompt tokens that hit a prefix cache (every tier).
pub fn hit_share(s: &Summary) -> f64 {
    let h: u64 = s.prefix_cache.iter().map(|c| c.hit_tokens).sum();
    let i: u64 = s.prefix_cache.iter().map(|c| c.input_tokens).sum();
    h as f64 / i as f64
}
