//! The LMSYS large-EP figures (2025-05-05, "Deploying DeepSeek with PD Disaggregation and
//! Large-scale Expert Parallelism on 96 H100 GPUs"), reproduced from the published setup
//! only — no parameter here or in `compute::moe` is fitted to them. Each row prints its error;
//! the test holds every row within 15 % (issue 42's bar for decode and prefill rows; the decode
//! row was held within issue 22's 20 % until the decode step followed sglang's two-batch
//! schedule, docs/performance-model.md §7). `cargo test --release --test fidelity moe_lmsys --
//! --nocapture`.

use crate::common;

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

/// Prompt tokens per second the servers of `role` prefill, measured between forward ends:
/// for each server, the tokens of the requests whose forward ended in `(first, last]`, over
/// `last − first`, where `first` and `last` are its first and last forward ends inside
/// `from_s..to_s`; summed over servers. Counting whole forwards matters: the DP ranks of an
/// instance step in lockstep (as sglang's do), each forward lasting ~1.3 s, so a fixed window of
/// one-second bins holds 11 or 12 forwards depending on their phase — which moves with the
/// arrival rate. Binned, the 2K and 4K rows both came out as exactly 11 forwards of 8,192
/// tokens per rank in 14 s (51,493 tok/s/node), and the figure moved with the rate.
pub(crate) fn prefill_tokens_per_s(dir: &std::path::Path, from_s: f64, to_s: f64) -> f64 {
    let rows = common::read_csv(&dir.join("requests.csv"));
    let mut by_server: BTreeMap<u64, BTreeMap<u64, f64>> = BTreeMap::new();
    for r in &rows {
        let (Some(end), Some(server), Some(input)) = (
            common::num(r, "prefill_end_ns"),
            common::num(r, "prefill_instance"),
            common::num(r, "input_tokens"),
        ) else {
            continue;
        };
        *by_server.entry(server).or_default().entry(end).or_default() += input as f64;
    }
    let (from, to) = ((from_s * 1e9) as u64, (to_s * 1e9) as u64);
    let mut total = 0.0;
    for ends in by_server.values() {
        let inside: Vec<(u64, f64)> = ends
            .range(from..to)
            .map(|(&t, &tokens)| (t, tokens))
            .collect();
        assert!(inside.len() >= 3, "{dir:?}: too few forwards in the window");
        let span = (inside[inside.len() - 1].0 - inside[0].0) as f64 / 1e9;
        let tokens: f64 = inside[1..].iter().map(|&(_, n)| n).sum();
        total += tokens / span;
    }
    total
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
fn lmsys_large_ep_per_node_throughputs_within_15_and_20_percent() {
    let mut errors = Vec::new();
    // Prefill: 4 nodes, EP32; a saturating arrival rate (prompts queue), so the prefill
    // servers' tokens per second is their capacity, counted over whole forwards ending in
    // seconds 5..19 (arrivals still flowing).
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
        let got = prefill_tokens_per_s(&dir, 5.0, 19.0) / 4.0;
        errors.push((
            format!("prefill {len} input tok/s per node"),
            0.15,
            row(
                &format!("prefill EP32, {len}-token prompts: input tok/s/node"),
                got,
                want,
            ),
        ));
    }
    // At saturation the measured capacity must not depend on how far past it the arrivals
    // are: the 2K row again at twice the rate.
    let dir = common::tmpdir("lmsys-prefill-2048-x2");
    common::run(
        "scenarios/moe/lmsys-prefill-ep32.toml",
        &[
            "workload.input_tokens={ dist = \"fixed\", value = 2048 }",
            "workload.arrival={ process = \"constant\", rate_per_s = 625 }",
        ],
        &dir,
    );
    let twice = prefill_tokens_per_s(&dir, 5.0, 19.0) / 4.0;
    let once = (1.0 + errors[1].2) * 54_543.0;
    println!("prefill EP32, 2K at 2x the rate: {twice:.0} tok/s/node (1x: {once:.0})");
    assert!(
        (twice / once - 1.0).abs() < 0.01,
        "prefill capacity moved with the arrival rate: {once:.0} at 1x, {twice:.0} at 2x"
    );
    // Decode: 9 nodes, EP72, 256 running per GPU once the ranks fill (by second ~9).
    let dir = common::tmpdir("lmsys-decode");
    common::run("scenarios/moe/lmsys-decode-ep72.toml", &[], &dir);
    let got = per_second(&dir, "decode", 9, 14) / 9.0;
    errors.push((
        "decode output tok/s per node".into(),
        0.15,
        row(
            "decode EP72, 2K input, 256/GPU: output tok/s/node",
            got,
            22_282.0,
        ),
    ));
    for (what, bar, e) in errors {
        assert!(
            e.abs() <= bar,
            "{what}: {:+.1} % is beyond {:.0} %",
            e * 100.0,
            bar * 100.0
        );
    }
}
