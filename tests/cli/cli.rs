//! The `pdsim` binary: verbs, files written, exit codes and messages.

use crate::common;
use common::*;

#[test]
fn run_writes_every_result_file_and_a_summary() {
    let dir = tmpdir("cli-run");
    let d = dir.to_str().unwrap();
    let (code, out, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--out",
        d,
        "--seed",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("completed") && out.contains("TTFT") && out.contains("TPOT"),
        "{out}"
    );
    for f in ["summary.json", "requests.csv", "timeseries.csv", "run.json"] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["seed"], 3, "--seed reaches the run");
    assert!(run["host"]["events_per_s"].as_f64().unwrap() > 0.0);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    for k in ["ttft", "tpot", "itl", "e2e", "queue", "transfer"] {
        for s in ["mean", "p50", "p90", "p99", "max"] {
            assert!(
                summary["latency_ms"][k][s].is_number(),
                "latency_ms.{k}.{s}"
            );
        }
    }
    let header = std::fs::read_to_string(dir.join("requests.csv")).unwrap();
    assert!(header.starts_with(
        "id,arrival_ns,prefill_instance,decode_instance,input_tokens,output_tokens,prefill_queued_ns,prefill_start_ns,prefill_end_ns,transfer_start_ns,transfer_end_ns,decode_start_ns,first_token_ns,finish_ns,kv_bytes,rdma_writes,outcome,error_kind,victims,corrupted_by,retractions,bootstrap_room\n"
    ));
}

#[test]
fn set_changes_the_run() {
    let dir = tmpdir("cli-set");
    let d = dir.to_str().unwrap();
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--out",
        d,
        "-q",
        "--set",
        "run.max_requests=25",
        "--set",
        "pools.decode.instances=1",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows = read_csv(&dir.join("requests.csv"));
    assert_eq!(rows.len(), 25);
    assert!(
        rows.iter().all(|r| r["decode_instance"] == "2"),
        "one decode instance, index 2"
    );
}

#[test]
fn bad_inputs_exit_2_and_name_the_file() {
    let (code, _, err) = pdsim(&["run", "tests/bad_scenarios/tp_not_dividing.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("tp_not_dividing.toml:") && err.contains("tp_size"),
        "{err}"
    );
    let (code, _, err) = pdsim(&["run", "no/such/scenario.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no/such/scenario.toml") && err.contains("cannot read"),
        "{err}"
    );
    let (code, _, err) = pdsim(&["run", "scenarios/quickstart.toml", "--set", "nonsense"]);
    assert_eq!(code, 2);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let (code, _, _) = pdsim(&["fly"]);
    assert_eq!(code, 2, "an unknown verb is a usage error");
}

#[test]
fn unwritable_output_exits_3() {
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--out",
        "/proc/pdsim-cannot-write",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("/proc/pdsim-cannot-write"), "{err}");
}

#[test]
fn trace_stats_prints_the_published_figures() {
    let path = common::shared("traces/conversation_trace.jsonl");
    let (code, out, err) = pdsim(&["trace", "stats", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("12031"), "{out}");
    assert!(out.contains("12035.1") && out.contains("342.6"), "{out}");
    let (code, _, err) = pdsim(&["trace", "stats", "Cargo.toml"]);
    assert_eq!(code, 2);
    assert!(err.contains("Cargo.toml"), "{err}");
}

#[test]
fn a_trace_replays_at_its_timestamps_and_time_scale_doubles_the_rate() {
    use pdsim::workload::trace::{TraceFormat, read_trace};
    let trace = read_trace(
        &common::shared("traces/conversation_trace.jsonl"),
        TraceFormat::Mooncake,
    )
    .unwrap();
    let first = trace[0].arrival_ns;
    for (scale, name) in [("1.0", "trace-1"), ("0.5", "trace-half")] {
        let dir = tmpdir(name);
        let set = format!("workload.trace.time_scale={scale}");
        let s = run("tests/scenarios/trace-conversation.toml", &[&set], &dir);
        assert_eq!(s.requests.arrived, 12_031);
        let rows = read_csv(&dir.join("requests.csv"));
        let k: f64 = scale.parse().unwrap();
        for (row, t) in rows.iter().zip(&trace) {
            let want = ((t.arrival_ns - first) as f64 * k).round() as u64;
            assert_eq!(num(row, "arrival_ns"), Some(want));
            assert_eq!(num(row, "input_tokens"), Some(u64::from(t.input_tokens)));
        }
    }
}

#[test]
fn the_shipped_trace_scenario_runs() {
    let dir = tmpdir("azure");
    let s = run("scenarios/trace-azure-code.toml", &[], &dir);
    assert_eq!(s.requests.arrived, 8_819);
    assert_eq!(s.requests.completed, 8_819);
}

#[test]
fn every_chart_renders_for_the_quickstart_with_titles_and_axis_units() {
    use pdsim::report::charts::Chart;
    let dir = tmpdir("charts");
    run("scenarios/quickstart.toml", &[], &dir);
    let texts = |svg: &str| -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split("</text>").next()?.to_string())
            })
            .collect()
    };
    let axis_units = [
        "ms",
        "(s)",
        "fraction",
        "requests",
        "tokens",
        "pages",
        "utilisation",
        "share",
    ];
    for chart in Chart::ALL {
        let path = dir.join(format!("charts/{}.svg", chart.name()));
        let svg =
            std::fs::read_to_string(&path).unwrap_or_else(|_| panic!("{} missing", path.display()));
        let t = texts(&svg);
        assert!(
            t.iter()
                .any(|x| x.contains(chart.title()) && x.contains("quickstart")),
            "{}: no title in {t:?}",
            chart.name()
        );
        assert!(
            t.iter().any(|x| axis_units.iter().any(|u| x.contains(u))),
            "{}: no axis label with a unit in {t:?}",
            chart.name()
        );
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let srcs: Vec<&str> = html
        .split("src=\"")
        .skip(1)
        .map(|s| s.split('"').next().unwrap())
        .collect();
    assert_eq!(srcs.len(), Chart::ALL.len(), "every chart in the report");
    for s in srcs {
        assert!(
            dir.join(s).is_file(),
            "index.html references {s}, which does not exist"
        );
    }
    assert!(
        std::fs::read_to_string(dir.join("summary.md"))
            .unwrap()
            .contains("| completed | ")
    );
}

#[test]
fn layout_prints_sglang_item_lens_as_table_and_json() {
    let (code, out, err) = pdsim(&[
        "layout",
        "--model",
        "qwen3-next-80b-a3b",
        "--tp",
        "4",
        "--page-size",
        "16",
        "--enable-unified-memory",
    ]);
    assert_eq!(code, 0, "{err}");
    // docs/sglang-pd.md §5.2: envelope 196608 at TP 4; mamba M = 19,316,736.
    assert!(out.contains("196608") && out.contains("19316736"), "{out}");
    let (code, out, err) = pdsim(&[
        "layout",
        "--model",
        "llama-3.1-8b",
        "--tp",
        "8",
        "--page-size",
        "64",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kv"]["count"], 64);
    assert_eq!(
        v["kv"]["item_lens_distinct"][0], 8192,
        "§5.1: Llama-8B fp8, ps 64, TP 8"
    );
    let cfg = common::shared("models/Nemotron-H-8B-Base-8K.config.reconstructed.json");
    let (code, out, err) = pdsim(&[
        "layout",
        "--model",
        cfg.to_str().unwrap(),
        "--tp",
        "2",
        "--page-size",
        "64",
        "--enable-unified-memory",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("524288") && out.contains("51068928"),
        "§5.2 Nemotron-H TP 2: {out}"
    );
    let (code, _, err) = pdsim(&["layout", "--model", "gpt-9"]);
    assert_eq!(code, 2);
    assert!(err.contains("neither a preset"), "{err}");
    let (code, _, err) = pdsim(&[
        "layout",
        "--model",
        "llama-3.1-8b",
        "--enable-unified-memory",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no hybrid layers"), "{err}");
}

/// `model.preset` takes a Hugging Face id as `lint` does (`spec::launch::preset_for`): the run
/// is the preset's, byte for byte, and a warning says which preset it was read as; an id of
/// no known layout is still refused by key.
#[test]
fn a_hugging_face_id_reads_as_its_preset() {
    let (a, b) = (common::tmpdir("hf-id-a"), common::tmpdir("hf-id-b"));
    let run = |dir: &std::path::Path, preset: &str| {
        common::pdsim(&[
            "run",
            "scenarios/quickstart.toml",
            "-q",
            "--summary-only",
            "--set",
            "run.duration_s=10",
            "--set",
            &format!("model.preset=\"{preset}\""),
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let (code, _, err) = run(&a, "meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("read as the preset llama-3.1-8b"),
        "no note: {err}"
    );
    let (code, _, err2) = run(&b, "llama-3.1-8b");
    assert_eq!(code, 0, "{err2}");
    assert!(!err2.contains("read as the preset"), "{err2}");
    assert_eq!(
        std::fs::read(a.join("summary.json")).unwrap(),
        std::fs::read(b.join("summary.json")).unwrap()
    );
    let (code, _, err) = run(&a, "acme/Unknown-7B");
    assert_eq!(code, 2);
    assert!(
        err.contains("model.preset") && err.contains("Hugging Face id"),
        "{err}"
    );
}

/// An `[slo]` target no request can meet is said at once, by key, with the floor it is under:
/// a TTFT below one token's prefill plus the first token's path, a TPOT below a decode step of
/// one request. Targets above the floor say nothing.
#[test]
fn an_impossible_slo_target_is_named_before_the_run() {
    let dir = common::tmpdir("slo-floor");
    let run = |sets: &[&str]| {
        let mut args = vec![
            "run",
            "scenarios/quickstart.toml",
            "-q",
            "--summary-only",
            "--set",
            "run.duration_s=5",
            "--out",
            dir.to_str().unwrap(),
        ];
        for s in sets {
            args.extend(["--set", s]);
        }
        common::pdsim(&args)
    };
    let (code, _, err) = run(&["slo.ttft_p99_ms=2", "slo.tpot_p50_ms=1"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: slo.ttft_p99_ms = 2 is below the fastest first token")
            && err.contains("warning: slo.tpot_p50_ms = 1 is below the fastest decode step"),
        "{err}"
    );
    let (code, _, err) = run(&["slo.ttft_p99_ms=2000", "slo.tpot_p50_ms=100"]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("is below the fastest"), "{err}");
}
