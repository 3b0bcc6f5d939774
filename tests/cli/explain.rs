//! `pdsim explain` on every teaching scenario (`scenarios/pd/`, `scenarios/faults/`): the text is
//! pinned by golden files in `tests/golden/explain/` (rewrite them on purpose with
//! `PDSIM_BLESS=1 cargo test --release --test cli explain::`), and each explanation must name the
//! failure, its cause (sglang's text, where it is raised) and the flag that fixes it.

use crate::common;

use std::path::Path;

use pdsim::diagnose::explain::explain_dir;

fn teaching_scenarios() -> Vec<String> {
    let mut v = Vec::new();
    for dir in ["scenarios/pd", "scenarios/faults"] {
        let mut files: Vec<_> = std::fs::read_dir(common::repo().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        v.extend(
            files
                .iter()
                .map(|p| format!("{dir}/{}", p.file_name().unwrap().to_string_lossy())),
        );
    }
    v
}

fn golden(name: &str, got: &str, diffs: &mut Vec<String>) {
    let path = common::repo().join("tests/golden/explain").join(name);
    if std::env::var_os("PDSIM_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    if want != got {
        let line = want
            .lines()
            .zip(got.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(got.lines().count()));
        diffs.push(format!(
            "{name}: differs from line {}:\n  want: {:?}\n  got:  {:?}",
            line + 1,
            want.lines().nth(line).unwrap_or(""),
            got.lines().nth(line).unwrap_or("")
        ));
    }
}

#[test]
fn every_teaching_scenario_is_explained_as_pinned() {
    let out = common::tmpdir("explain");
    let mut diffs = Vec::new();
    let scenarios = teaching_scenarios();
    assert!(scenarios.len() >= 13, "{scenarios:?}");
    for s in &scenarios {
        let stem = Path::new(s)
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .to_string();
        let dir = out.join(&stem);
        let summary = common::run(s, &[], &dir);
        let text = explain_dir(&dir, false).unwrap();
        // What every explanation must say, whatever its wording.
        let causes: Vec<&str> = summary
            .errors
            .iter()
            .map(|e| e.kind.as_str())
            .filter(|k| *k != "waiting_timeout")
            .collect();
        for k in &causes {
            let section = text
                .split(&format!("\n{k} ×"))
                .nth(1)
                .unwrap_or_else(|| panic!("{s}: no section for {k}:\n{text}"));
            assert!(
                section.contains("sglang: \"") && section.contains("raised in: "),
                "{s}: {k} without sglang's text or where it is raised:\n{text}"
            );
            assert!(section.contains("Fix: "), "{s}: {k} without a fix:\n{text}");
        }
        if summary.requests.corrupted > 0 {
            assert!(
                text.contains("\ncorrupted ×")
                    && (text.contains("Fix: make both servers")
                        // FP4 KV across PD (docs/sglang-pd.md §29): the scales stay behind.
                        || text.contains("Fix: --kv-cache-dtype fp8_e4m3 on both sides")),
                "{s}:\n{text}"
            );
        }
        if causes.iter().any(|k| k.starts_with("envelope_")) {
            assert!(
                text.contains("--enable-unified-memory"),
                "{s}: the flag that fixes it:\n{text}"
            );
        }
        if s.contains("page-size") {
            assert!(text.contains("use the same --page-size"), "{text}");
        }
        if s.contains("dead-shard") {
            // sglang's rule (`session_port_sum % queue_size`, per prefill rank) stalls healthy
            // decodes 2 and 3 through the queues decode 5's chunks killed; 1 and 4 go free.
            for d in [2, 3] {
                assert!(
                    text.contains(&format!(
                        "decode instance {d} (pool healthy) passes every check with prefill 0, yet its rooms hash to dead"
                    )),
                    "decode {d} stalls:\n{text}"
                );
            }
            for d in [1, 4] {
                assert!(
                    !text.contains(&format!("decode instance {d} (pool healthy) passes")),
                    "decode {d} is not stalled:\n{text}"
                );
            }
        }
        golden(&format!("{stem}.txt"), &text, &mut diffs);
        if s.contains("dead-shard") {
            golden(
                &format!("{stem}.md"),
                &explain_dir(&dir, true).unwrap(),
                &mut diffs,
            );
        }
    }
    assert!(
        diffs.is_empty(),
        "explain texts changed (PDSIM_BLESS=1 to accept):\n{}",
        diffs.join("\n")
    );
}

#[test]
fn explain_runs_a_scenario_file_first_and_refuses_other_paths() {
    let out = common::tmpdir("explain-cli");
    let (code, text, err) = common::pdsim(&[
        "explain",
        "scenarios/pd/page-size-mismatch.toml",
        "--out",
        out.to_str().unwrap(),
        "--markdown",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.starts_with("# pdsim explain: page-size-mismatch"),
        "{text}"
    );
    assert!(text.contains("## page_size_mismatch ×"), "{text}");
    assert!(out.join("requests.csv").is_file());
    let (code, _, err) = common::pdsim(&["explain", "no/such/thing"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn explain_names_the_binding_pool_and_a_lever_with_its_measured_effect() {
    // The quickstart with one prefill instance at 4× its rate: prefill cannot keep up, requests
    // are still queued when the run stops.
    let out = common::tmpdir("explain-capacity");
    let s = common::run(
        "scenarios/quickstart.toml",
        &[
            "pools.prefill.instances=1",
            "workload.arrival.rate_per_s=40",
            "run.duration_s=20",
            "run.drain_timeout_s=5",
        ],
        &out,
    );
    assert!(s.requests.unfinished > 0, "{:?}", s.requests);
    let text = explain_dir(&out, false).unwrap();
    let cap = &text[text.find("\nCapacity\n").expect("a Capacity section")..];
    assert!(
        cap.contains("Binding: pool `prefill` (prefill) on compute — forwards ran"),
        "{cap}"
    );
    // The top lever is the one that relieves prefill, with its measured effect.
    let first = cap
        .lines()
        .find(|l| l.trim_start().starts_with("- (1)"))
        .expect("a ranked lever");
    assert!(first.contains("pools.prefill."), "{first}");
    assert!(first.contains("unserved (failed + unfinished)"), "{first}");
    let (before, after) = {
        let u = &first[first.find("unserved (failed + unfinished) ").unwrap() + 31..];
        let mut it = u.split(';').next().unwrap().split(" → ");
        let a: u64 = it.next().unwrap().trim().parse().unwrap();
        let b: u64 = it.next().unwrap().trim().parse().unwrap();
        (a, b)
    };
    assert_eq!(before, s.requests.failed + s.requests.unfinished);
    assert!(after < before, "the lever was run and helped: {first}");
}

/// Issue 43: a missed target on inter-token gaps is named with its population and why — the
/// kind of gap past it and the phase that binds. On four colocated servers each request's worst
/// gap is a forward that also ran a prefill chunk, so a 100 ms TBT p90 misses on prefill
/// interference, and the lever that shortens those forwards is run.
#[test]
fn explain_names_a_missed_gap_target_and_its_binding_phase() {
    let dir = common::tmpdir("explain-gaps");
    common::run("scenarios/regression/gap-slos-colocated-8b.toml", &[], &dir);
    let text = explain_dir(&dir, false).unwrap();
    assert!(text.contains("[slo] MISSED (tbt_p90_ms)"), "{text}");
    assert!(
        text.contains("tbt_p90_ms ≤ 100 ms")
            && text.contains("requests with a gap (arrived less one-token completions)"),
        "the target with its population:\n{text}"
    );
    assert!(
        text.contains("gaps, all tokens pooled"),
        "the ITL target's population:\n{text}"
    );
    let why = text
        .lines()
        .find(|l| l.starts_with("Why tbt_p90_ms is missed"))
        .unwrap_or_else(|| panic!("no why line:\n{text}"));
    assert!(
        why.contains("mixed-step gaps")
            && why.contains("the binding phase is prefill interference"),
        "{why}"
    );
    assert!(
        text.contains("chunked_prefill_size 4096 instead of 8192"),
        "the chunk lever:\n{text}"
    );
}

/// The run's line counts every outcome, aborted ones included, so it adds up to the arrivals
/// (the conservation every count shown keeps); `run.json` names the scenario by an absolute
/// path, so `explain` from another folder rebuilds the same scenario (its capacity levers
/// included) and says the same.
#[test]
fn the_run_line_adds_up_and_explain_works_from_any_folder() {
    let dir = common::tmpdir("aborts-line");
    let (code, out, err) = common::pdsim(&[
        "run",
        "scenarios/production/client-aborts.toml",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let line = out.lines().next().expect("the summary line");
    let num = |word: &str| -> u64 {
        let before = line
            .split(&format!(" {word}"))
            .next()
            .unwrap_or_else(|| panic!("no {word} in {line:?}"));
        let n = before.rsplit([' ', '—']).find(|t| !t.is_empty()).unwrap();
        n.parse()
            .unwrap_or_else(|_| panic!("{word}: {n:?} in {line:?}"))
    };
    let parts: u64 = ["completed", "failed", "corrupted", "unfinished", "aborted"]
        .iter()
        .map(|w| num(w))
        .sum();
    assert!(num("aborted") > 0, "{line}");
    assert_eq!(num("arrived"), parts, "{line}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let file = record["scenario_file"].as_str().unwrap();
    assert!(std::path::Path::new(file).is_absolute(), "{file}");
    // The same explanation from the repository and from the results folder itself.
    let here = common::pdsim(&["explain", dir.to_str().unwrap()]);
    let elsewhere = std::process::Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["explain", "."])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert_eq!(here.0, 0, "{}", here.2);
    assert_eq!(String::from_utf8_lossy(&elsewhere.stdout), here.1);
}

/// Issue 41: explain proposes only levers whose configuration validates. A 13B model of 40 KV
/// heads whose TP8 prefill binds on compute: doubling its TP to 16 does not split the heads,
/// which sglang refuses at launch, so that lever is left out (it used to be listed as "could
/// not run") while the prefill's other levers are run and shown.
#[test]
fn explain_proposes_only_levers_that_validate() {
    let out = common::tmpdir("explain-valid-levers");
    common::run(
        "scenarios/quickstart.toml",
        &[
            "model={ config = \"published/llama-2-13b.config.json\" }",
            "pools.prefill.server.tp_size=8",
            "pools.prefill.instances=1",
            "pools.decode.instances=8",
            "workload.arrival.rate_per_s=80",
            "run.duration_s=20",
            "run.drain_timeout_s=5",
        ],
        &out,
    );
    let text = explain_dir(&out, false).unwrap();
    let cap = &text[text.find("\nCapacity\n").expect("a Capacity section")..];
    assert!(
        cap.contains("pool `prefill` (prefill) on compute"),
        "the prefill binds: {cap}"
    );
    let levers: Vec<&str> = cap
        .lines()
        .filter(|l| l.trim_start().starts_with("- ("))
        .collect();
    assert!(
        levers
            .iter()
            .any(|l| l.contains("pools.prefill.instances=2")),
        "{cap}"
    );
    for l in &levers {
        assert!(!l.contains("could not run"), "{l}");
        assert!(!l.contains("pools.prefill.server.tp_size=16"), "{l}");
    }
}
