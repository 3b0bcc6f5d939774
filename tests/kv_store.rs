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
    let text = pdsim::diagnose::explain::explain_dir(&dir, false).unwrap();
    assert!(text.contains("Prefix reuse"), "{text}");
    assert!(text.contains("from the Mooncake Store"), "{text}");
    assert!(text.contains("Mooncake Store: "), "{text}");
    assert!(
        text.contains("On the fabric, sharing NICs with the KV transfers"),
        "{text}"
    );
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

const ON_DECODE: &str = "scenarios/store/store-on-decode-node.toml";

/// Mean KV tail (the last chunk computed → the transfer done), ms, per decode instance: what a
/// transfer pays after the prefill has nothing left to compute, so what its NIC share decides.
fn kv_tail_by_decode(dir: &std::path::Path) -> std::collections::BTreeMap<u64, f64> {
    let mut by: std::collections::BTreeMap<u64, (f64, u64)> = Default::default();
    for r in common::read_csv(&dir.join("requests.csv")) {
        let (Some(d), Some(p), Some(t)) = (
            common::num(&r, "decode_instance"),
            common::num(&r, "prefill_end_ns"),
            common::num(&r, "transfer_end_ns"),
        ) else {
            continue;
        };
        let e = by.entry(d).or_default();
        e.0 += (t - p) as f64 / 1e6;
        e.1 += 1;
    }
    by.into_iter()
        .map(|(d, (sum, n))| (d, sum / n as f64))
        .collect()
}

/// Bytes each link carried over the run (`links.csv` summed over its seconds).
fn link_bytes(dir: &std::path::Path) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for r in common::read_csv(&dir.join("links.csv")) {
        *out.entry(r["link"].clone()).or_insert(0) += common::num(&r, "bytes").unwrap();
    }
    out
}

/// The store's reads and writes are fabric flows on the store node's NICs, beside the KV
/// transfers: node 3's NICs receive exactly the KV into decode 3 plus every write-back, and send
/// exactly the prefetch reads; its GPUs' transfer-engine links carry the KV only (the store is
/// host memory on both ends).
#[test]
fn store_traffic_shares_the_nics_with_kv_transfers() {
    let dir = tmpdir("kv-store-nics");
    let s = run(ON_DECODE, &[], &dir);
    let t = s.kv_store.as_ref().unwrap().traffic;
    assert!(t.writes > 0 && t.fabric_write_bytes > 0, "{t:?}");
    assert!(t.reads > 0 && t.fabric_read_bytes > 0, "{t:?}");
    assert_eq!(t.local_copy_bytes, 0, "no client on the store's node");
    let kv_into_3: u64 = common::read_csv(&dir.join("requests.csv"))
        .iter()
        .filter(|r| r["decode_instance"] == "3")
        .map(|r| common::num(r, "kv_bytes").unwrap())
        .sum();
    let links = link_bytes(&dir);
    let sum = |prefix: &str, suffix: &str| -> u64 {
        links
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && k.ends_with(suffix))
            .map(|(_, v)| v)
            .sum()
    };
    let (rx, tx) = (sum("node3.nic", ".rx"), sum("node3.nic", ".tx"));
    let engine_rx = sum("node3.gpu", ".rdma_rx");
    println!(
        "node 3 NICs: rx {rx} = KV {kv_into_3} + writes {}; tx {tx} = reads {}; GPU engines rx {engine_rx}",
        t.fabric_write_bytes, t.fabric_read_bytes
    );
    // Per-second byte counters round each second; the totals agree to a few bytes per row.
    let close = |a: u64, b: u64| a.abs_diff(b) <= 1 << 12;
    assert!(close(rx, kv_into_3 + t.fabric_write_bytes), "rx {rx}");
    assert!(close(tx, t.fabric_read_bytes), "tx {tx}");
    assert!(close(engine_rx, kv_into_3), "engine rx {engine_rx}");
    // Decode 4's node has no store: its NICs receive KV only.
    let kv_into_4: u64 = common::read_csv(&dir.join("requests.csv"))
        .iter()
        .filter(|r| r["decode_instance"] == "4")
        .map(|r| common::num(r, "kv_bytes").unwrap())
        .sum();
    assert!(close(sum("node4.nic", ".rx"), kv_into_4));
    assert!(close(sum("node4.nic", ".tx"), 0));
}

/// The what-if: how much prefix traffic can a decode node's NICs bear? With the store on decode
/// 3's node, KV transfers into decode 3 share its NICs with every write-back; into decode 4 they
/// do not. Moving the store to node 4 moves the cost with it. At 200 Gb/s per NIC the NICs bear
/// it; at 50 Gb/s they do not.
#[test]
fn a_store_on_a_decode_node_slows_the_kv_transfers_into_it() {
    let mut ratios = Vec::new();
    for gbps in [200, 100, 50] {
        let mut row = Vec::new();
        for store in [3u64, 4] {
            let dir = tmpdir(&format!("kv-store-whatif-{gbps}-{store}"));
            let sets = [
                format!("fabric.nic_gbps={gbps}"),
                format!("kv_store.nodes=[{store}]"),
            ];
            let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
            let s = run(ON_DECODE, &sets, &dir);
            assert_eq!(s.requests.completed, s.requests.arrived, "{:?}", s.requests);
            let tail = kv_tail_by_decode(&dir);
            let other = 7 - store;
            let ratio = tail[&store] / tail[&other];
            println!(
                "{gbps:>3} Gb/s NICs, store on node {store}: KV tail into decode {store} {:>7.1} ms, into decode {other} {:>7.1} ms ({ratio:.2}x)",
                tail[&store], tail[&other]
            );
            row.push(ratio);
        }
        ratios.push((gbps, row));
    }
    for (gbps, row) in &ratios {
        match gbps {
            // Line rate to spare: within a third either way.
            200 => assert!(row.iter().all(|&r| r < 1.35), "{ratios:?}"),
            // Where the store is, the KV is slower, whichever node it is.
            100 => assert!(row.iter().all(|&r| r > 1.1), "{ratios:?}"),
            _ => assert!(row.iter().all(|&r| r > 1.5), "{ratios:?}"),
        }
    }
}

/// A prefetch is a fabric read: on slower NICs less of it has landed when a `best_effort`
/// request is scheduled (fewer store hits), and a `wait_complete` request waits longer for it.
#[test]
fn prefetches_move_at_the_fabrics_pace() {
    let mut rows = Vec::new();
    for gbps in ["400", "50"] {
        for policy in ["best_effort", "wait_complete"] {
            let s = store_run(
                &format!("pace-{gbps}-{policy}"),
                &[
                    "workload.trace.limit=600".to_string(),
                    format!("fabric.nic_gbps={gbps}"),
                    format!("pools.prefill.server.hicache_storage_prefetch_policy={policy}"),
                ],
            );
            let store: u64 = s
                .prefix_cache
                .iter()
                .map(|c| c.tiers.unwrap().store_hit_tokens)
                .sum();
            let t = s.kv_store.as_ref().unwrap().traffic;
            let read_ms = t.read_ns_total as f64 / t.reads.max(1) as f64 / 1e6;
            println!(
                "{gbps:>3} Gb/s {policy:<13}: store hit tokens {store:>9}, mean read {read_ms:>8.2} ms, TTFT p50 {:>8.1} ms",
                s.latency_ms.ttft.p50.unwrap()
            );
            rows.push((store, read_ms, s.latency_ms.ttft.p50.unwrap()));
        }
    }
    let (fast_be, fast_wc, slow_be, slow_wc) = (rows[0], rows[1], rows[2], rows[3]);
    assert!(slow_be.1 > 2.5 * fast_be.1, "reads take longer: {rows:?}");
    assert!(
        slow_be.0 < fast_be.0,
        "best effort finds less landed: {rows:?}"
    );
    assert!(
        slow_wc.2 > fast_wc.2,
        "waiting for the read costs TTFT: {rows:?}"
    );
    // Waiting for every read, the hits do not depend on the fabric's pace.
    assert!(slow_wc.0 >= fast_wc.0 * 9 / 10, "{rows:?}");
}
