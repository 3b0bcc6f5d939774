//! The Mooncake P:D check (issue 10; `docs/performance-model.md` §8):
//! `scenarios/calibration/mooncake-70b-pd.toml` (Llama-3.1-70B, 8-GPU A100 instances, the first
//! 10 minutes of Mooncake's conversation trace) through `pdsim plan --max-rate` on small grids,
//! under both calibrations. It pins what pdsim answers, and why:
//!
//! 1. With the scenario's SLO (p90 TTFT ≤ 30 s, p90 TPOT ≤ 100 ms) **prefill binds**: the
//!    highest sustainable rate grows with the prefill instances and a second decode instance
//!    adds little, so the best split per GPU is ≥ 5:1 under `sglang-2025` (the "14P2D").
//!    The 2023 fit's slower decode binds sooner: at 6 prefills a second decode raises the rate by
//!    more than it does under `sglang-2025`.
//! 2. With a tight time between tokens (p90 TPOT ≤ 25 ms, as Mooncake's latency-first decode
//!    SLOs are), **decode binds** — a decode batch may only grow so far — and the best split at
//!    4 prefills is balanced: 4P4D beats 4P2D and 4P1D per GPU.
//!
//! So pdsim reproduces a ~1:1 split only where decode is held to a tight TBT SLO; at a loose
//! one, a 70B model's 14k-token prompts make prefill the scarce side whatever the calibration.

mod common;

use std::collections::BTreeMap;

use common::{pdsim, read_csv, tmpdir};

const SCENARIO: &str = "scenarios/calibration/mooncake-70b-pd.toml";

/// `pdsim plan --max-rate` over P × D; returns (P, D) → (max rate req/s, per GPU), printed.
fn max_rates(name: &str, p: &str, d: &str, sets: &[&str]) -> BTreeMap<(u32, u32), (f64, f64)> {
    let dir = tmpdir(&format!("mooncake-pd-{name}"));
    let mut args: Vec<String> = [
        "plan",
        SCENARIO,
        "--max-rate",
        "--seeds",
        "1",
        "-q",
        "--vary",
        &format!("pools.prefill.instances={p}"),
        "--vary",
        &format!("pools.decode.instances={d}"),
        "--out",
    ]
    .map(String::from)
    .to_vec();
    args.push(dir.display().to_string());
    for s in sets {
        args.extend(["--set".to_string(), s.to_string()]);
    }
    let (code, _, err) = pdsim(&args);
    assert_eq!(code, 0, "{err}");
    let mut out = BTreeMap::new();
    for row in read_csv(&dir.join("plan.csv")) {
        let f = |c: &str| row[c].parse::<f64>().unwrap_or(0.0);
        let key = (
            row["pools.prefill.instances"].parse().unwrap(),
            row["pools.decode.instances"].parse().unwrap(),
        );
        let v = (f("max_rate_per_s"), f("max_rate_per_s_per_gpu"));
        println!(
            "{name:<22} {}P{}D  max rate {:>6.3} req/s  {:>8.5} req/s per GPU",
            key.0, key.1, v.0, v.1
        );
        out.insert(key, v);
    }
    out
}

#[test]
fn prefill_binds_at_a_loose_tbt_slo_and_decode_at_a_tight_one() {
    // 1. The scenario's SLO, sglang-2025: tripling the prefills nearly triples the rate; at six
    // prefills a second decode adds under 10 %, so one decode per six prefills is the best split
    // per GPU.
    let new = max_rates("sglang-2025", "2,6", "1,2", &[]);
    assert!(new[&(6, 1)].0 >= 2.5 * new[&(2, 1)].0, "{new:?}");
    assert!(new[&(6, 2)].0 < 1.10 * new[&(6, 1)].0, "{new:?}");
    assert!(new[&(6, 1)].1 > new[&(6, 2)].1, "{new:?}");
    assert!(new[&(6, 1)].1 > new[&(2, 1)].1, "{new:?}");
    // The 2023 fit: decode is slower per step and binds sooner.
    let old = max_rates("vllm-2023", "6", "1,2", &["hardware.calibration=vllm-2023"]);
    let gain = |m: &BTreeMap<(u32, u32), (f64, f64)>| m[&(6, 2)].0 / m[&(6, 1)].0;
    assert!(gain(&old) > 1.15, "{old:?}");
    assert!(gain(&old) > gain(&new) + 0.05, "{old:?} vs {new:?}");

    // 2. A tight time between tokens: decode binds and a balanced split is the best per GPU.
    let tight = max_rates(
        "sglang-2025 tpot 25ms",
        "4",
        "1,2,4",
        &["slo.tpot_p90_ms=25"],
    );
    assert!(tight[&(4, 2)].0 > 2.0 * tight[&(4, 1)].0, "{tight:?}");
    assert!(tight[&(4, 4)].1 > tight[&(4, 2)].1, "{tight:?}");
    assert!(tight[&(4, 4)].1 > tight[&(4, 1)].1, "{tight:?}");
}
