//! Traces are streamed: the scenario checks every row once and keeps none; the run reads them
//! again. A trace that changes between the two passes is an error of the run, not a panic and
//! not a silently shorter workload.

use crate::common;

use pdsim::config::Workload;
use pdsim::scenario;

const SCENARIO: &str = r#"
[run]
name = "stream"
seed = 1
duration_s = 100
drain_timeout_s = 100
[model]
preset = "llama-3.1-8b"
[hardware]
gpu = "h100-sxm"
[[pools]]
name = "prefill"
role = "prefill"
instances = 1
[[pools]]
name = "decode"
role = "decode"
instances = 1
[workload]
trace = { path = "trace.csv", format = "csv", time_scale = 2.0 }
"#;

fn write_trace(dir: &std::path::Path, broken: bool) {
    let mut t = String::from("arrival_s,input_tokens,output_tokens\n");
    for i in 0..50 {
        if broken && i == 30 {
            t += "7.5,not-a-number,20\n";
        } else {
            t += &format!("{},{},{}\n", i as f64 * 0.25, 100 + i, 20);
        }
    }
    std::fs::write(dir.join("trace.csv"), t).unwrap();
}

#[test]
fn a_trace_is_checked_once_and_read_again_by_the_run() {
    let dir = common::tmpdir("trace-stream");
    std::fs::write(dir.join("s.toml"), SCENARIO).unwrap();
    write_trace(&dir, false);
    let sc = scenario::load(&dir.join("s.toml"), &[]).unwrap();
    let Workload::Trace { source } = &sc.workload else {
        panic!("a trace workload")
    };
    assert_eq!((source.rows, source.base_ns, source.scale), (50, 0, 2.0));
    let out = pdsim::app::run::run_scenario(&sc, &dir.join("out")).unwrap();
    assert_eq!(out.summary.requests.arrived, 50);
    // time_scale 2: the last of 50 rows at 12.25 s arrives at 24.5 s.
    let rows = common::read_csv(&dir.join("out/requests.csv"));
    assert_eq!(rows[49]["arrival_ns"], "24500000000");
    assert_eq!(rows[10]["input_tokens"], "110");
}

#[test]
fn a_trace_that_breaks_after_loading_fails_the_run_with_its_line() {
    let dir = common::tmpdir("trace-stream-broken");
    std::fs::write(dir.join("s.toml"), SCENARIO).unwrap();
    write_trace(&dir, false);
    let sc = scenario::load(&dir.join("s.toml"), &[]).unwrap();
    // The file changes under the run: row 31 (line 32) is now unreadable.
    write_trace(&dir, true);
    let mut sink = pdsim::metrics::VecSink::default();
    let mut world = pdsim::sim::World::new(&sc, &mut sink);
    let err = world.run().unwrap_err().to_string();
    assert!(
        err.contains("trace.csv") && err.contains(":32"),
        "the error names the file and line: {err}"
    );
}
