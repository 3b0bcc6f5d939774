//! The same scenario and seed give byte-identical result files; another seed does not.

use crate::common;
use common::*;

const FILES: [&str; 3] = ["summary.json", "requests.csv", "timeseries.csv"];

fn assert_identical(scenario: &str, sets: &[&str], a: &std::path::Path, b: &std::path::Path) {
    for f in FILES {
        let (x, y) = (
            std::fs::read_to_string(a.join(f)).unwrap(),
            std::fs::read_to_string(b.join(f)).unwrap(),
        );
        if x != y {
            // Name the first row where the runs diverged, and how to reproduce it.
            let (i, (l, r)) = x
                .lines()
                .zip(y.lines())
                .enumerate()
                .find(|(_, (l, r))| l != r)
                .unwrap_or((x.lines().count().min(y.lines().count()), ("<end>", "<end>")));
            panic!(
                "{scenario}: {f} differs between two runs of the same seed, first at line {}:\n  run 1: {l}\n  run 2: {r}\nreproduce: pdsim run {scenario} {}",
                i + 1,
                sets.iter()
                    .map(|s| format!("--set {s}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
}

fn check(scenario: &str, name: &str, other_seed: &str) {
    let (a, b, c) = (
        tmpdir(&format!("{name}-a")),
        tmpdir(&format!("{name}-b")),
        tmpdir(&format!("{name}-c")),
    );
    let sa = run(scenario, &[], &a);
    run(scenario, &[], &b);
    assert!(
        sa.requests.completed > 100,
        "{scenario} should finish real work"
    );
    assert_identical(scenario, &[], &a, &b);
    run(scenario, &[other_seed], &c);
    for f in FILES {
        assert_ne!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(c.join(f)).unwrap(),
            "{scenario}: {f} is the same under another seed: the seed reaches nothing"
        );
    }
}

#[test]
fn quickstart_is_byte_identical_across_runs() {
    check("scenarios/quickstart.toml", "quick", "run.seed=8");
}

#[test]
fn a_larger_loaded_cluster_is_byte_identical_across_runs() {
    check(
        "scenarios/regression/loaded-4p4d-70b.toml",
        "large",
        "run.seed=99",
    );
}

#[test]
fn faults_crashes_retractions_and_corruption_are_byte_identical_across_runs() {
    for (i, scenario) in [
        "scenarios/faults/decode-crash.toml",
        "scenarios/faults/link-down.toml",
        "scenarios/faults/lossy-links.toml",
        "scenarios/pd/tp-mismatch-unguarded.toml",
        "scenarios/pd/dead-shard-stalls-healthy.toml",
        "scenarios/retraction.toml",
        // The KV checksum's aborts and its digests' delays off the control lane.
        "scenarios/guards/unguarded-corruption-checksum.toml",
        "scenarios/guards/checksum-cost.toml",
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (tmpdir(&format!("det-{i}-a")), tmpdir(&format!("det-{i}-b")));
        run(scenario, &[], &a);
        run(scenario, &[], &b);
        assert_identical(scenario, &[], &a, &b);
        assert_eq!(
            std::fs::read(a.join("links.csv")).unwrap(),
            std::fs::read(b.join("links.csv")).unwrap(),
            "{scenario}: links.csv differs"
        );
    }
}

#[test]
fn summary_only_gives_the_same_summary_as_a_full_run() {
    // `--summary-only` builds no rows and holds no finished row back for id order: the
    // aggregates must not notice. Faults make requests end out of id order and fail.
    for (i, scenario) in [
        "scenarios/quickstart.toml",
        "scenarios/faults/decode-crash.toml",
        "scenarios/faults/lossy-links.toml",
        "scenarios/retraction.toml",
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (tmpdir(&format!("so-{i}-a")), tmpdir(&format!("so-{i}-b")));
        run(scenario, &[], &a);
        let (code, _, err) = pdsim(&[
            "run",
            scenario,
            "--summary-only",
            "-q",
            "--out",
            b.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{scenario}: {err}");
        assert_eq!(
            std::fs::read_to_string(a.join("summary.json")).unwrap(),
            std::fs::read_to_string(b.join("summary.json")).unwrap(),
            "{scenario}: --summary-only changed summary.json"
        );
        assert!(
            !b.join("requests.csv").exists(),
            "{scenario}: --summary-only wrote requests.csv"
        );
    }
}
