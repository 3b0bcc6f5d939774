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
//! (These two pin `sglang-2025`, the calibration they were derived under; under the default
//! `sglang-2026` a second decode already pays at six prefills.)
//!
//! 3. **Mooncake's SLO form** (issue 43; `scenarios/calibration/mooncake-70b-tbt.toml`): each
//!    request's TTFT ≤ 10 s and worst inter-token gap ≤ 100 ms at 90 % attainment, on
//!    Mooncake's 16-node diagonal (FAST'25 §5.5: 5P11D … 11P5D, best ≈ 1:1), under the
//!    defaults. Not reproduced: pdsim's best is the most prefill-heavy split (see the test).

use crate::common;

use std::collections::BTreeMap;

use common::{pdsim, read_csv, tmpdir};

const SCENARIO: &str = "scenarios/calibration/mooncake-70b-pd.toml";

/// `pdsim plan --max-rate` over P × D; returns (P, D) → (max rate req/s, per GPU), printed.
fn max_rates(name: &str, p: &str, d: &str, sets: &[&str]) -> BTreeMap<(u32, u32), (f64, f64)> {
    max_rates_of(SCENARIO, name, p, d, sets)
}

/// [`max_rates`] of `scenario`.
fn max_rates_of(
    scenario: &str,
    name: &str,
    p: &str,
    d: &str,
    sets: &[&str],
) -> BTreeMap<(u32, u32), (f64, f64)> {
    let dir = tmpdir(&format!("mooncake-pd-{name}"));
    let mut args: Vec<String> = [
        "plan",
        scenario,
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
    let new = max_rates(
        "sglang-2025",
        "2,6",
        "1,2",
        &["hardware.calibration=sglang-2025"],
    );
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
        &["slo.tpot_p90_ms=25", "hardware.calibration=sglang-2025"],
    );
    assert!(tight[&(4, 2)].0 > 2.0 * tight[&(4, 1)].0, "{tight:?}");
    assert!(tight[&(4, 4)].1 > tight[&(4, 2)].1, "{tight:?}");
    assert!(tight[&(4, 4)].1 > tight[&(4, 1)].1, "{tight:?}");
}

/// The store and the router sglang deploys with: every prefill's HiCache backed by one shared
/// Mooncake Store (8 TB, `[kv_store]`) and sgl-model-gateway's default `cache_aware` routing.
const STORE: [&str; 4] = [
    "pools.prefill.server.enable_hierarchical_cache=true",
    "pools.prefill.server.hicache_storage_backend=mooncake",
    "kv_store.capacity_gb=8000",
    "router.policy=cache_aware",
];

/// The split with the most rate per GPU (the first in grid order on ties).
fn best(m: &BTreeMap<(u32, u32), (f64, f64)>) -> (u32, u32) {
    let mut b = *m.keys().next().unwrap();
    for (&k, &(_, per_gpu)) in m {
        if per_gpu > m[&b].1 {
            b = k;
        }
    }
    b
}

/// Issue 23: the P:D answer with prefix reuse as production gets it, next to Mooncake's
/// published deployment (Mooncake, FAST'25, §8: its conversation workload on 10 prefill + 10
/// decode instances, ~1:1, as `scenarios/calibration/mooncake-70b-pd.toml` reports it).
#[test]
fn the_store_and_cache_aware_routing_make_prefill_bound_splits_cheaper() {
    let without = max_rates("per-instance caches", "2,4,6,8", "1,2", &[]);
    let with = max_rates("store + cache_aware", "2,4,6,8", "1,2", &STORE);
    let tight = max_rates(
        "store, tpot 25ms",
        "4",
        "1,2,4",
        &[STORE.as_slice(), &["slo.tpot_p90_ms=25"]].concat(),
    );
    let (bw, bs, bt) = (best(&without), best(&with), best(&tight));
    println!("published (Mooncake FAST'25 §8): 10P10D, P:D = 1:1");
    println!(
        "pdsim, per-instance radix caches, least_loaded: best {}P{}D (P:D = {:.1}:1), {:.4} req/s per GPU",
        bw.0,
        bw.1,
        f64::from(bw.0) / f64::from(bw.1),
        without[&bw].1
    );
    println!(
        "pdsim, shared store + cache_aware:             best {}P{}D (P:D = {:.1}:1), {:.4} req/s per GPU",
        bs.0,
        bs.1,
        f64::from(bs.0) / f64::from(bs.1),
        with[&bs].1
    );
    println!(
        "pdsim, shared store, p90 TPOT ≤ 25 ms, 4 prefills: best {}P{}D (P:D = {:.1}:1)",
        bt.0,
        bt.1,
        f64::from(bt.0) / f64::from(bt.1)
    );
    // Prefix reuse makes prefill cheaper: every split with enough prefills sustains more.
    for k in [(4, 1), (6, 2), (8, 2)] {
        assert!(
            with[&k].0 > 1.1 * without[&k].0,
            "{k:?}: {with:?} vs {without:?}"
        );
    }
    assert!(
        with[&bs].1 > 1.15 * without[&bw].1,
        "{with:?} vs {without:?}"
    );
    // At the loose SLO prefill still binds (the trace reuses ~29 % of its prompt tokens, so
    // prefill work falls by about that much, not by the ~4× a 1:1 split would need): the best
    // split is 2:1 to 4:1, and never further from balance than without the store.
    let ratio = |k: (u32, u32)| f64::from(k.0) / f64::from(k.1);
    assert!(ratio(bs) <= 4.0 && ratio(bs) >= 2.0, "{bs:?}");
    assert!(ratio(bs) <= ratio(bw), "{bs:?} vs {bw:?}");
    // Held to a tight time between tokens, 1:1 is the best split, as without the store.
    assert_eq!(bt, (4, 4), "{tight:?}");
    // The published 1:1 is reached only there.
    assert!(ratio(bs) > 1.0 && ratio(bt) == 1.0);
}

/// Each split of the 16-node diagonal's highest rate under Mooncake's SLO form, printed:
/// `p` → (max rate req/s, per GPU). One `max_rates` per split (a grid of one point).
fn diagonal(name: &str, ps: &[u32], sets: &[&str]) -> BTreeMap<u32, (f64, f64)> {
    ps.iter()
        .map(|&p| {
            let m = max_rates_of(TBT, name, &p.to_string(), &(16 - p).to_string(), sets);
            (p, m[&(p, 16 - p)])
        })
        .collect()
}

const TBT: &str = "scenarios/calibration/mooncake-70b-tbt.toml";

/// Issue 43's held-out check — **not met** (recorded in docs/performance-model.md §8 and the
/// issue): with Mooncake's TBT target the best split of the 16-node diagonal should lie
/// between 2:1 and 1:2 (published: ≈ 1:1, FAST'25 §5.5). pdsim's capacity still grows with
/// every prefill across the diagonal: with 12k-token prompts on a 70B model, a 100 ms worst
/// gap never binds a 70B A100 decode at the batches the prefills can feed (its steps are
/// ~25 ms), so prefill is the scarce side. What this pins is that answer, so the docs stay true
/// and a change to it is seen.
#[test]
fn mooncakes_tbt_slo_on_its_16_node_diagonal() {
    let ps = [4, 6, 8, 10, 12];
    let tbt = diagonal("ttft 10 s, tbt 100 ms", &ps, &[]);
    let mut best = ps[0];
    for &p in &ps {
        if tbt[&p].0 > tbt[&best].0 {
            best = p;
        }
    }
    println!("published (Mooncake FAST'25 §5.5): best at P:D ≈ 1:1");
    println!(
        "pdsim: best {best}P{}D (P:D = {:.2})",
        16 - best,
        f64::from(best) / f64::from(16 - best)
    );
    for w in ps.windows(2) {
        assert!(
            tbt[&w[1]].0 > tbt[&w[0]].0,
            "prefill no longer binds: {tbt:?}"
        );
    }
}
