//! HiCache with a shared Mooncake Store (`sglang::hicache`, `sglang::kv_store`): four prefill
//! instances routed in turn, so that what one computed reaches another only through the store.
//!
//! - With an effectively unbounded store, the prefix hit share (hits from every tier ÷ prompt
//!   tokens) is within 5 points below the trace's own reuse bound — what a cache that saw every
//!   earlier request would hit, computed here from the `hash_ids` alone — and never above it, on
//!   `traces/mooncake_conversation_10min.jsonl` and the first rows of the two Mooncake traces
//!   in `../shared/traces`. It is below because a block is reusable only once its write-back
//!   completed, not when the request that computed it arrived.
//! - A bounded store hits less as its capacity shrinks.

mod common;

use common::{run, tmpdir};
use pdsim::report::Summary;

const SCENARIO: &str = "tests/scenarios/kv-store.toml";
/// Rows of each trace (the first ones), to keep the test fast.
const ROWS: usize = 2000;

fn store_run(name: &str, sets: &[String]) -> Summary {
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    run(SCENARIO, &sets, &tmpdir(&format!("kv-store-{name}")))
}

#[test]
fn an_unbounded_shared_store_reaches_the_traces_own_reuse() {
    let traces = [
        (
            "traces/mooncake_conversation_10min.jsonl",
            "../../traces/mooncake_conversation_10min.jsonl",
        ),
        (
            "../shared/traces/conversation_trace.jsonl",
            "../../../shared/traces/conversation_trace.jsonl",
        ),
        (
            "../shared/traces/synthetic_trace.jsonl",
            "../../../shared/traces/synthetic_trace.jsonl",
        ),
    ];
    for (repo_path, scenario_path) in traces {
        let path = match repo_path.strip_prefix("../shared/") {
            Some(rel) => common::shared(rel),
            None => common::repo().join(repo_path),
        };
        let bound = common::trace_reuse_bound(&path, ROWS);
        let base = vec![
            format!("workload.trace.path={scenario_path}"),
            format!("workload.trace.limit={ROWS}"),
        ];
        let mut shares = Vec::new();
        for policy in ["wait_complete", "best_effort"] {
            let mut sets = base.clone();
            sets.push(format!(
                "pools.prefill.server.hicache_storage_prefetch_policy={policy}"
            ));
            let s = store_run(policy, &sets);
            let rows = s.requests.arrived;
            assert!(rows == ROWS as u64 || repo_path.contains("10min"), "{rows}");
            assert_eq!(s.requests.completed, rows, "{repo_path}: {:?}", s.requests);
            let h = common::hit_share(&s);
            let store: u64 = s
                .prefix_cache
                .iter()
                .map(|c| c.tiers.unwrap().store_hit_tokens)
                .sum();
            println!(
                "{repo_path:<44} {policy:<13} hit share {:>6.2} %  (store {:>5.2} %)  bound {:>6.2} %",
                100.0 * h,
                100.0 * store as f64
                    / s.prefix_cache.iter().map(|c| c.input_tokens).sum::<u64>() as f64,
                100.0 * bound
            );
            assert!(
                h <= bound + 1e-9,
                "{repo_path} {policy}: {h} above the bound {bound}"
            );
            assert!(store > 0, "{repo_path}: the store served nothing");
            let k = s.kv_store.as_ref().unwrap();
            assert_eq!((k.evicted_blocks, k.skipped_blocks), (0, 0));
            assert!(k.written_blocks > 0 && k.prefetched_blocks > 0);
            shares.push(h);
        }
        // Waiting for the whole prefetch: within 5 points of the bound.
        assert!(
            shares[0] >= bound - 0.05,
            "{repo_path}: {} vs {bound}",
            shares[0]
        );
        // Best effort takes only what arrived before the request was scheduled.
        assert!(shares[1] <= shares[0] + 1e-9, "{shares:?}");
    }
}

/// `pdsim explain` and the run's summary.md tell the tiers and the store.
#[test]
fn explain_and_the_report_show_the_tiers_and_the_store() {
    let dir = tmpdir("kv-store-explain");
    run(SCENARIO, &["workload.trace.limit=300"], &dir);
    let text = pdsim::cli::explain::explain_dir(&dir, false).unwrap();
    assert!(text.contains("Prefix reuse"), "{text}");
    assert!(text.contains("from the Mooncake Store"), "{text}");
    assert!(text.contains("Mooncake Store: "), "{text}");
    let md = std::fs::read_to_string(dir.join("summary.md")).unwrap_or_default();
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap_or_default();
    assert!(md.contains("tiers:") || html.contains("store hits"), "{md}");
}

#[test]
fn a_bounded_store_hits_less_as_it_shrinks() {
    let mut last = f64::INFINITY;
    let mut seen = Vec::new();
    for cap in ["4000", "1000", "250", "60"] {
        for eviction in ["lru", "none"] {
            let s = store_run(
                &format!("{cap}-{eviction}"),
                &[
                    format!("kv_store.capacity_gb={cap}"),
                    format!("kv_store.eviction={eviction}"),
                ],
            );
            let h = common::hit_share(&s);
            let k = s.kv_store.as_ref().unwrap();
            println!(
                "capacity {cap:>5} GB {eviction:<4}: hit share {:>6.2} %  evicted {}  refused {}",
                100.0 * h,
                k.evicted_blocks,
                k.skipped_blocks
            );
            seen.push((cap, eviction, h));
            if eviction == "lru" {
                assert!(h <= last + 1e-9, "{seen:?}");
                last = h;
                if cap != "4000" {
                    assert!(k.evicted_blocks > 0);
                }
            } else {
                assert_eq!(k.evicted_blocks, 0);
            }
        }
    }
    // The smallest store keeps little: far below the unbounded one.
    assert!(seen.last().unwrap().2 < 0.5 * seen[0].2, "{seen:?}");
}

/// The same scenario and seed give the same bytes with the router's tree, HiCache and the store
/// (no hash order reaches a result).
#[test]
fn the_store_and_cache_aware_routing_are_deterministic() {
    let sets = ["workload.trace.limit=500", "router.policy=cache_aware"];
    let (a, b) = (tmpdir("kv-store-det-a"), tmpdir("kv-store-det-b"));
    run(SCENARIO, &sets, &a);
    run(SCENARIO, &sets, &b);
    for f in ["summary.json", "requests.csv", "timeseries.csv"] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(x == y, "{f} differs between two runs");
    }
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("summary.json")).unwrap()).unwrap();
    assert!(
        s["router"]["prefill"]["affinity"].as_u64().unwrap() > 0,
        "{s}"
    );
}
