//! `pdsim check`: the regression suite CI runs, exit codes, JUnit XML, typed `[expect]`.

use crate::common;
use common::*;

/// The JUnit `<testcase>` elements of a report, each with its body.
fn testcases(xml: &str) -> Vec<&str> {
    xml.split("<testcase ").skip(1).collect()
}

#[test]
fn the_regression_suite_holds_and_its_junit_has_one_testcase_per_scenario() {
    let dir = tmpdir("check-suite");
    let junit = dir.join("junit.xml");
    let (code, out, err) = pdsim(&[
        "check",
        "scenarios/regression",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let n = std::fs::read_dir(repo().join("scenarios/regression"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "toml")
        })
        .count();
    assert!(n >= 5, "the suite has {n} scenarios");
    assert!(out.contains(&format!("check: {n} scenario(s)")), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
    assert_eq!(testcases(&xml).len(), n, "{xml}");
    assert!(
        xml.contains(&format!("tests=\"{n}\" failures=\"0\"")),
        "{xml}"
    );
    assert!(!xml.contains("<failure"), "{xml}");
}

#[test]
fn a_failing_expectation_exits_1_and_junit_names_it_with_expected_and_got() {
    let dir = tmpdir("check-fail");
    let junit = dir.join("report/junit.xml");
    let (code, out, err) = pdsim(&[
        "check",
        "tests/check_fixtures/too-strict.toml",
        "scenarios/regression/page-size-mismatch.toml",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("check failed"), "{err}");
    assert!(
        out.contains("FAIL tests/check_fixtures/too-strict.toml")
            && out.contains("PASS scenarios/regression/page-size-mismatch.toml"),
        "{out}"
    );
    // The failing lines carry expected and got; the holding ones are marked ok.
    let line = out
        .lines()
        .find(|l| l.contains("completed_min"))
        .expect("the completed_min verdict");
    assert!(
        line.contains("FAIL") && line.contains("expected ≥ 100000") && line.contains("got 205"),
        "{line}"
    );
    assert!(out.contains("2 failed (1 scenario(s) failed)"), "{out}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = testcases(&xml);
    assert_eq!(cases.len(), 2);
    let strict = cases
        .iter()
        .find(|c| c.contains("name=\"fixture-too-strict\""))
        .unwrap();
    assert_eq!(strict.matches("<failure ").count(), 2, "{strict}");
    assert!(
        strict.contains("message=\"completed_min: expected ≥ 100000, got 205\""),
        "{strict}"
    );
    assert!(
        strict.contains("message=\"tpot_p99_ms_max: expected ≤ 1, got "),
        "{strict}"
    );
    assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
    let other = cases
        .iter()
        .find(|c| c.contains("name=\"regression-page-size-mismatch\""))
        .unwrap();
    assert!(!other.contains("<failure"), "{other}");
}

#[test]
fn a_latency_gate_fails_when_no_request_finished() {
    let (code, out, _) = pdsim(&["check", "tests/check_fixtures/all-failed-latency-gate.toml"]);
    assert_eq!(code, 1, "{out}");
    let line = out.lines().find(|l| l.contains("ttft_p99_ms_max")).unwrap();
    assert!(
        line.contains("FAIL") && line.contains("got null (no request finished)"),
        "{line}"
    );
}

#[test]
fn bad_expect_tables_exit_2_naming_the_key_and_the_nearest_valid_one() {
    let dir = tmpdir("check-typo");
    let f = dir.join("typo.toml");
    std::fs::copy(repo().join("tests/check_fixtures/typo.toml.bad"), &f).unwrap();
    let (code, _, err) = pdsim(&["check", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("expect.completd_min") && err.contains("did you mean `completed_min`?"),
        "{err}"
    );
    // `pdsim run` refuses it too: a typo is never accepted silently.
    let (code, _, err) = pdsim(&["run", f.to_str().unwrap(), "--out", dir.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    // A misspelt error kind names the nearest kind.
    let text = std::fs::read_to_string(&f)
        .unwrap()
        .replace("completd_min", "completed_min")
        .replace("error_kinds = []", "error_kinds = [\"peer_lsot\"]");
    std::fs::write(&f, text).unwrap();
    let (code, _, err) = pdsim(&["check", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("expect.error_kinds") && err.contains("did you mean `peer_lost`?"),
        "{err}"
    );
    // Values serde cannot check.
    let text = std::fs::read_to_string(&f)
        .unwrap()
        .replace("[\"peer_lsot\"]", "[]")
        .replace("slo_attainment_min = 0.99", "slo_attainment_min = 99");
    std::fs::write(&f, text).unwrap();
    let (code, _, err) = pdsim(&["check", f.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("expect.slo_attainment_min"), "{err}");
}

#[test]
fn a_named_file_without_expect_and_a_missing_path_are_usage_errors() {
    let (code, _, err) = pdsim(&["check", "scenarios/quickstart.toml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no [expect] table"), "{err}");
    let (code, _, err) = pdsim(&["check", "scenarios/nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no such scenario file or folder"), "{err}");
}

#[test]
fn check_out_writes_each_scenarios_results() {
    let dir = tmpdir("check-out");
    let (code, out, err) = pdsim(&[
        "check",
        "scenarios/regression/page-size-mismatch.toml",
        "--out",
        dir.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        dir.join("regression-page-size-mismatch/summary.json")
            .is_file()
    );
    assert!(!out.contains("ok "), "quiet prints failures only: {out}");
}

#[test]
fn a_baseline_catches_drift_inside_every_absolute_bound() {
    // Record a baseline, then re-check: identical runs hold every figure.
    let base = tmpdir("check-baseline");
    let b = base.to_str().unwrap();
    let scenario = "scenarios/regression/healthy-2p2d-8b.toml";
    let (code, out, err) = pdsim(&["check", scenario, "--out", b, "-q"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("baseline.ttft_p99_ms"), "{out}");
    // Traffic 4× the baseline's: flagged however the [expect] bounds fare, exit 1.
    let (code, out, err) = pdsim(&[
        "check",
        scenario,
        "--baseline",
        b,
        "--set",
        "workload.arrival.rate_per_s=32",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("FAIL") && l.contains("baseline.arrived")),
        "{out}"
    );
    // A ratio wide enough lets a small drift through; a bad ratio names the flag.
    let (code, _, err) = pdsim(&["check", scenario, "--baseline", b, "--max-regression=-1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--max-regression must be a ratio in [0, 10)"),
        "{err}"
    );
    // A folder that is not a baseline, and a summary that is not pdsim's, stop with exit 2.
    let empty = tmpdir("check-baseline-empty");
    let (code, _, err) = pdsim(&["check", scenario, "--baseline", empty.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a pdsim baseline"), "{err}");
    let run = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("summary.json").is_file())
        .unwrap();
    std::fs::write(run.join("summary.json"), "{\"requests\": {\"arrived\": 3}}").unwrap();
    let (code, _, err) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("requests: missing field `completed`")
            && err.contains("not a summary.json that pdsim writes"),
        "{err}"
    );
    // A run the baseline does not have fails its `baseline` verdict.
    std::fs::remove_dir_all(&run).unwrap();
    std::fs::create_dir_all(base.join("other")).unwrap();
    std::fs::write(base.join("other/summary.json"), "{}").unwrap();
    let (code, out, _) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("re-record the baseline"), "{out}");
}

#[test]
fn a_baseline_run_that_is_not_a_complete_result_of_that_run_is_exit_2_naming_the_file() {
    // Issue 25: a baseline folder is read back only when each run in it is complete pdsim
    // output of the same run; anything else stops the check before a figure is compared.
    let base = tmpdir("check-baseline-complete");
    let b = base.to_str().unwrap();
    let scenario = "scenarios/regression/healthy-2p2d-8b.toml";
    let (code, out, err) = pdsim(&["check", scenario, "--out", b, "-q"]);
    assert_eq!(code, 0, "{out}{err}");
    let run = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("summary.json").is_file())
        .unwrap();
    let r = run.display().to_string();
    let summary = std::fs::read_to_string(run.join("summary.json")).unwrap();
    let facts = std::fs::read_to_string(run.join("run.json")).unwrap();
    let restore = || {
        let _ = std::fs::remove_file(run.join(".pdsim-lock"));
        let _ = std::fs::remove_dir_all(run.join(".pdsim-partial"));
        std::fs::write(run.join("summary.json"), &summary).unwrap();
        std::fs::write(run.join("run.json"), &facts).unwrap();
    };
    let refused = |needles: &[&str]| {
        let (code, out, err) = pdsim(&["check", scenario, "--baseline", b]);
        assert_eq!(code, 2, "{out}{err}");
        for n in needles {
            assert!(err.contains(n), "{n:?} not in: {err}");
        }
        restore();
    };
    // The complete baseline holds.
    let (code, out, err) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 0, "{out}{err}");
    // A writer's lock (alive or killed) and its staging folder.
    std::fs::write(run.join(".pdsim-lock"), "pid 4242 on ci: pdsim check\n").unwrap();
    refused(&[&format!("{r}/.pdsim-lock"), "incomplete", "pid 4242 on ci"]);
    std::fs::create_dir_all(run.join(".pdsim-partial")).unwrap();
    refused(&[&format!("{r}/.pdsim-partial"), "incomplete"]);
    // A partial folder: no summary.json; summary.json cut short; no run.json.
    std::fs::remove_file(run.join("summary.json")).unwrap();
    refused(&[&format!("{r}: no summary.json")]);
    std::fs::write(run.join("summary.json"), &summary[..summary.len() / 2]).unwrap();
    refused(&[&format!("{r}/summary.json"), "not JSON"]);
    std::fs::remove_file(run.join("run.json")).unwrap();
    refused(&[&format!("{r}: no run.json")]);
    // Another schema: a figure of another type, named by its field, and counts that do not add up.
    std::fs::write(
        run.join("summary.json"),
        summary.replacen("\"p99\": ", "\"p99\": \"fast\", \"was\": ", 1),
    )
    .unwrap();
    refused(&[&format!("{r}/summary.json"), "latency_ms.ttft.p99"]);
    let mut v: serde_json::Value = serde_json::from_str(&summary).unwrap();
    v["requests"]["arrived"] = serde_json::json!(1);
    std::fs::write(run.join("summary.json"), v.to_string()).unwrap();
    refused(&[&format!("{r}/summary.json"), "is not arrived (1)"]);
    // Another scenario's run filed under this one's name.
    let mut v: serde_json::Value = serde_json::from_str(&facts).unwrap();
    v["scenario"]["run"]["name"] = serde_json::json!("someone-else");
    std::fs::write(run.join("run.json"), v.to_string()).unwrap();
    refused(&[
        &format!("{r}/run.json"),
        "scenario.run.name",
        "someone-else",
        "another scenario",
    ]);
    // One run's folder given for the baseline itself.
    let (code, _, err) = pdsim(&["check", scenario, "--baseline", &r]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("give the folder above it"), "{err}");
}

/// Issue 43: `[expect]` bounds and `--baseline` cover the inter-token figures — ITL (every
/// gap) and TBT (each request's worst gap) — and a baseline recorded before `latency_ms.tbt`
/// existed still reads, its missing figures holding as "no data in the baseline".
#[test]
fn gap_figures_are_gated_by_expect_and_by_a_baseline() {
    let scenario = "scenarios/regression/gap-slos-colocated-8b.toml";
    let (code, out, err) = pdsim(&[
        "check",
        scenario,
        "--set",
        "expect.tbt_p90_ms_max=1",
        "--set",
        "expect.itl_p99_ms_max=1e6",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let line = |name: &str| {
        out.lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name} in {out}"))
            .to_string()
    };
    assert!(
        line("tbt_p90_ms_max").contains("FAIL") && line("tbt_p90_ms_max").contains("expected ≤ 1")
    );
    assert!(line("itl_p99_ms_max").contains("ok"));
    // A baseline: identical runs hold the gap figures; one without them (an older pdsim's)
    // holds them as no data.
    let base = tmpdir("check-baseline-gaps");
    let b = base.to_str().unwrap();
    let (code, out, err) = pdsim(&["check", scenario, "--out", b, "-q"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 0, "{out}{err}");
    for f in ["itl_p50_ms", "itl_p99_ms", "tbt_p50_ms", "tbt_p99_ms"] {
        assert!(out.contains(&format!("baseline.{f}")), "{f}: {out}");
    }
    let summary = base.join("regression-gap-slos-colocated-8b/summary.json");
    let mut v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary).unwrap()).unwrap();
    let lat = v["latency_ms"].as_object_mut().unwrap();
    lat.remove("tbt");
    lat.remove("e2e_per_token");
    std::fs::write(&summary, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let (code, out, err) = pdsim(&["check", scenario, "--baseline", b]);
    assert_eq!(code, 0, "{out}{err}");
    let tbt = out
        .lines()
        .find(|l| l.contains("baseline.tbt_p99_ms"))
        .unwrap();
    assert!(tbt.contains("no data in the baseline"), "{tbt}");
}
