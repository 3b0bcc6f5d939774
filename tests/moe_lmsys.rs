//! The LMSYS large-EP figures (2025-05-05, "Deploying DeepSeek with PD Disaggregation and
//! Large-scale Expert Parallelism on 96 H100 GPUs"), reproduced from the published setup
//! only — no parameter here or in `compute::moe` is fitted to them. Each row prints its error;
//! the test holds each within 25 %. `cargo test --release --test moe_lmsys -- --nocapture`.

mod common;

use std::collections::BTreeMap;

/// Mean over simulated seconds `from..to` of the per-second sum of `tokens_out` over the
/// servers of `role`.
fn per_second(dir: &std::path::Path, role: &str, from: u64, to: u64) -> f64 {
    let rows = common::read_csv(&dir.join("timeseries.csv"));
    let mut by_sec: BTreeMap<u64, f64> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["role"] == role) {
        let s = common::num(r, "second").unwrap();
        if (from..to).contains(&s) {
            *by_sec.entry(s).or_default() += common::num(r, "tokens_out").unwrap() as f64;
        }
    }
    assert_eq!(
        by_sec.len() as u64,
        to - from,
        "{dir:?}: seconds {from}..{to}"
    );
    by_sec.values().sum::<f64>() / by_sec.len() as f64
}

fn row(what: &str, got: f64, want: f64) -> f64 {
    let err = got / want - 1.0;
    println!(
        "{what:<44} LMSYS {want:>8.0}  pdsim {got:>8.0}  error {:+6.1} %",
        err * 100.0
    );
    err
}

#[test]
fn lmsys_large_ep_per_node_throughputs_within_25_percent() {
    let mut errors = Vec::new();
    // Prefill: 4 nodes, EP32; a saturating arrival rate (prompts queue), so the prefill
    // servers' prompts per second is their capacity. Seconds 5..19: arrivals still flowing.
    for (len, want) in [(1024u32, 57_674.0), (2048, 54_543.0), (4096, 50_302.0)] {
        let dir = common::tmpdir(&format!("lmsys-prefill-{len}"));
        let rate = 4.0 * 8.0 * 20_000.0 / f64::from(len);
        common::run(
            "scenarios/moe/lmsys-prefill-ep32.toml",
            &[
                &format!("workload.input_tokens={{ dist = \"fixed\", value = {len} }}"),
                &format!("workload.arrival={{ process = \"constant\", rate_per_s = {rate} }}"),
            ],
            &dir,
        );
        let prompts = per_second(&dir, "prefill", 5, 19);
        let got = prompts * f64::from(len) / 4.0;
        errors.push((
            format!("prefill {len} input tok/s per node"),
            row(
                &format!("prefill EP32, {len}-token prompts: input tok/s/node"),
                got,
                want,
            ),
        ));
    }
    // Decode: 9 nodes, EP72, 256 running per GPU once the ranks fill (by second ~9).
    let dir = common::tmpdir("lmsys-decode");
    common::run("scenarios/moe/lmsys-decode-ep72.toml", &[], &dir);
    let got = per_second(&dir, "decode", 9, 14) / 9.0;
    errors.push((
        "decode output tok/s per node".into(),
        row(
            "decode EP72, 2K input, 256/GPU: output tok/s/node",
            got,
            22_282.0,
        ),
    ));
    for (what, e) in errors {
        assert!(
            e.abs() <= 0.25,
            "{what}: {:+.1} % is beyond 25 %",
            e * 100.0
        );
    }
}
