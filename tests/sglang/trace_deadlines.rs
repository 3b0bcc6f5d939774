//! Per-row client deadlines in traces (`timeout_s`, pdsim CSV and Mooncake JSON lines;
//! docs/sglang-pd.md §21.4): a row's own deadline aborts its request at exactly that wait, a
//! row without one falls back to `[workload.client_timeout]` (or waits for ever), bad values
//! and colocated clusters are exit-2 errors naming the file, line or key.

use crate::common::*;

use std::path::Path;

const S: u64 = 1_000_000_000;

/// One 1P1D pair, no serving costs (the 2023 fit), replaying `trace` (file name in `dir`),
/// plus `extra` TOML for `[workload]`.
fn scenario(dir: &Path, trace: &str, role_pair: bool, extra: &str) -> std::path::PathBuf {
    let pools = if role_pair {
        r#"
[[pools]]
name = "prefill"
role = "prefill"
instances = 1
[pools.server]
tp_size = 1
page_size = 64

[[pools]]
name = "decode"
role = "decode"
instances = 1
[pools.server]
tp_size = 1
page_size = 64
"#
    } else {
        r#"
[[pools]]
name = "server"
role = "colocated"
instances = 1
[pools.server]
tp_size = 1
page_size = 64
"#
    };
    let text = format!(
        r#"[run]
name = "trace-deadlines"
seed = 1
duration_s = 10
drain_timeout_s = 600

[model]
preset = "llama-3.1-8b"

[hardware]
gpu = "h100-sxm"
gpus_per_node = 8
calibration = "vllm-2023"
{pools}
[workload]
trace = {{ path = "{trace}" }}
{extra}
"#
    );
    let p = dir.join("scenario.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn load_and_run(sc: &Path, out: &Path) -> pdsim::report::Summary {
    let sc = pdsim::scenario::load(sc, &[]).unwrap_or_else(|e| panic!("does not load: {e}"));
    pdsim::app::run::run_scenario(&sc, out)
        .expect("runs")
        .summary
}

/// Three 640-token prompts at 0, 1 and 2 s, each generating 2,000 tokens (many seconds of
/// decode): row 0 gives its client 0.5 s, row 1 nothing, row 2 1,000 s.
const CSV: &str = "arrival_s,input_tokens,output_tokens,timeout_s\n0,640,2000,0.5\n1,640,2000,\n2,640,2000,1000\n";

/// The rows of `requests.csv` as (outcome, finish_ns).
fn outcomes(out: &Path) -> Vec<(String, u64)> {
    read_csv(&out.join("requests.csv"))
        .iter()
        .map(|r| (r["outcome"].clone(), num(r, "finish_ns").unwrap()))
        .collect()
}

/// Row 0's first token comes within a few ms, so its client leaves while decode streams and
/// the closed connection is seen at once: aborted at exactly 0 + 0.5 s. Rows 1 and 2 complete:
/// no deadline, and one far beyond their decode. Conservation: 3 = 2 completed + 1 aborted.
#[test]
fn a_rows_own_deadline_aborts_it_at_exactly_that_wait() {
    let dir = tmpdir("trace-deadlines-own");
    std::fs::write(dir.join("t.csv"), CSV).unwrap();
    let out = dir.join("out");
    let s = load_and_run(&scenario(&dir, "t.csv", true, ""), &out);
    let rows = outcomes(&out);
    println!("{rows:?}");
    assert_eq!(rows[0], ("aborted".to_string(), S / 2));
    assert_eq!(rows[1].0, "completed");
    assert_eq!(rows[2].0, "completed");
    assert!(
        rows[1].1 > 3 * S,
        "2,000 tokens take seconds: {}",
        rows[1].1
    );
    assert_eq!(
        (s.requests.arrived, s.requests.completed, s.requests.aborted),
        (3, 2, 1)
    );
    let a = s
        .aborts
        .as_ref()
        .expect("the trace's deadlines turn aborts on");
    assert_eq!(
        a.client_timeout.as_deref(),
        Some("each trace row's timeout_s; rows without one wait for ever")
    );
    assert_eq!((a.disconnected, a.aborted), (1, 1));
    assert_eq!(a.by_stage[0].stage.as_str(), "decode");

    // The same rows as Mooncake JSON lines give the same requests.
    let jsonl = "{\"timestamp\": 0, \"input_length\": 640, \"output_length\": 2000, \"hash_ids\": [1, 2], \"timeout_s\": 0.5}\n\
                 {\"timestamp\": 1000, \"input_length\": 640, \"output_length\": 2000, \"hash_ids\": [3, 4], \"timeout_s\": null}\n\
                 {\"timestamp\": 2000, \"input_length\": 640, \"output_length\": 2000, \"hash_ids\": [5, 6], \"timeout_s\": 1000}\n";
    std::fs::write(dir.join("t.jsonl"), jsonl).unwrap();
    let out2 = dir.join("out-jsonl");
    load_and_run(&scenario(&dir, "t.jsonl", true, ""), &out2);
    assert_eq!(outcomes(&out2), rows);
    let _ = std::fs::remove_dir_all(dir);
}

/// With `[workload.client_timeout] s = 0.3` as well: row 1, which gives none, gets 0.3 s and
/// is aborted at 1.3 s; rows 0 and 2 keep their own (0.5 s, longer than the drawn one, and
/// 1,000 s).
#[test]
fn rows_without_a_deadline_fall_back_to_the_drawn_one() {
    let dir = tmpdir("trace-deadlines-fallback");
    std::fs::write(dir.join("t.csv"), CSV).unwrap();
    let out = dir.join("out");
    let s = load_and_run(
        &scenario(&dir, "t.csv", true, "client_timeout = { s = 0.3 }"),
        &out,
    );
    let rows = outcomes(&out);
    println!("{rows:?}");
    assert_eq!(rows[0], ("aborted".to_string(), S / 2));
    assert_eq!(rows[1], ("aborted".to_string(), S + 3 * S / 10));
    assert_eq!(rows[2].0, "completed");
    assert_eq!(
        s.aborts.unwrap().client_timeout.as_deref(),
        Some("each trace row's timeout_s; rows without one: fixed 0.3 s")
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A trace without the column models no aborts at all (its run keeps the bytes it had).
#[test]
fn a_trace_without_deadlines_models_no_aborts() {
    let dir = tmpdir("trace-deadlines-none");
    std::fs::write(
        dir.join("t.csv"),
        "arrival_s,input_tokens,output_tokens\n0,640,20\n",
    )
    .unwrap();
    let s = load_and_run(&scenario(&dir, "t.csv", true, ""), &dir.join("out"));
    assert!(s.aborts.is_none());
    assert_eq!(s.requests.completed, 1);
    let _ = std::fs::remove_dir_all(dir);
}

/// Bad deadlines name the file, the line and the field; a colocated cluster names the key.
#[test]
fn bad_deadlines_are_exit_2_naming_file_line_and_field() {
    let dir = tmpdir("trace-deadlines-bad");
    let cases: [(&str, &str, &str); 4] = [
        (
            "t.csv",
            "arrival_s,input_tokens,output_tokens,timeout_s\n0,640,20,5\n1,640,20,-3\n",
            "t.csv:3",
        ),
        (
            "t.csv",
            "arrival_s,input_tokens,output_tokens,timeout_s\n0,640,20,0\n",
            "t.csv:2",
        ),
        (
            "t.csv",
            "arrival_s,input_tokens,output_tokens,timeout_s\n0,640,20,soon\n",
            "t.csv:2",
        ),
        (
            "t.jsonl",
            "{\"timestamp\": 0, \"input_length\": 640, \"output_length\": 20, \"hash_ids\": [1, 2], \"timeout_s\": \"5\"}\n",
            "t.jsonl:1",
        ),
    ];
    for (name, text, at) in cases {
        std::fs::write(dir.join(name), text).unwrap();
        let sc = scenario(&dir, name, true, "");
        let o = dir.join("o");
        let (code, _, err) = pdsim(&[
            "run".as_ref(),
            sc.as_os_str(),
            "--out".as_ref(),
            o.as_os_str(),
        ]);
        println!("{name}: {err}");
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(at) && err.contains("timeout_s"), "{err}");
        assert!(err.contains("> 0 and at most 1e9"), "{err}");
    }
    std::fs::write(dir.join("t.csv"), CSV).unwrap();
    let sc = scenario(&dir, "t.csv", false, "");
    let e = pdsim::scenario::load(&sc, &[]).unwrap_err().to_string();
    println!("{e}");
    assert!(
        e.contains("workload.trace.path") && e.contains("colocated"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
