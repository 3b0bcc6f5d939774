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

use crate::common;

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

// ---- The decode side's offload (`disaggregation_decode_enable_offload_kvcache`) ----------

const OFFLOAD: [&str; 1] =
    ["pools.decode.server.disaggregation_decode_enable_offload_kvcache=true"];

/// One Mooncake trace row, as the bound below reads it.
struct Row {
    input: u64,
    output: u64,
    ids: Vec<u64>,
}

fn rows_of(path: &std::path::Path, rows: usize) -> Vec<Row> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(rows)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Row {
                input: v["input_length"].as_u64().unwrap(),
                output: v["output_length"].as_u64().unwrap(),
                ids: v["hash_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect(),
            }
        })
        .collect()
}

/// The trace's own reuse bound when the blocks of generated tokens are reusable too, from the
/// `hash_ids` alone and independently of pdsim's code: row `R`'s output completes
/// `(n + o − 1) / 512 − n / 512` blocks (`n` prompt, `o` output tokens, `f = n / 512` full
/// prompt blocks), named by the first later row that begins with `R`'s `f` full blocks, goes
/// on with a block that is not `R`'s own partial one, and whose prompt holds `n + o` tokens:
/// its full blocks `f, f + 1, …` (`docs/sglang-pd.md` §18.1). A cache that saw every earlier
/// row's prompt *and* those answer blocks hits the longest prefix of a row's blocks it holds.
/// Returns (prompt blocks only, with answer blocks).
fn answer_reuse_bound(path: &std::path::Path, rows: usize) -> (f64, f64) {
    let rows = rows_of(path, rows);
    let mut answers: Vec<Vec<u64>> = vec![Vec::new(); rows.len()];
    for (i, r) in rows.iter().enumerate() {
        let f = (r.input / 512) as usize;
        let m = ((r.input + r.output - 1) / 512) as usize - f;
        if f == 0 || m == 0 {
            continue;
        }
        let next = rows[i + 1..].iter().find(|l| {
            l.ids.len() > f
                && l.ids[..f] == r.ids[..f]
                && r.ids.get(f) != Some(&l.ids[f])
                && l.input >= r.input + r.output
        });
        if let Some(l) = next {
            let end = (f + m).min((l.input / 512) as usize).max(f);
            answers[i] = l.ids[f..end].to_vec();
        }
    }
    let share = |with_answers: bool| {
        let mut seen = std::collections::BTreeSet::new();
        let (mut hit, mut all) = (0u64, 0u64);
        for (r, a) in rows.iter().zip(&answers) {
            let m = (1..=r.ids.len())
                .take_while(|&k| seen.contains(&r.ids[..k]))
                .count() as u64;
            hit += (m * 512).min(r.input);
            all += r.input;
            for k in 1..=r.ids.len() {
                seen.insert(r.ids[..k].to_vec());
            }
            if with_answers {
                let mut p = r.ids[..(r.input / 512) as usize].to_vec();
                for &b in a {
                    p.push(b);
                    seen.insert(p.clone());
                }
            }
        }
        hit as f64 / all as f64
    };
    (share(false), share(true))
}

/// With the decode side's offload, a later turn also hits the blocks of the earlier answer:
/// the prefix hit share rises — by at least half of what the trace's own bound gains when it
/// counts answer blocks as reusable — and never passes that bound. On the 10-minute Mooncake
/// conversation trace and the first rows of the shared one; four prefill instances routed in
/// turn, so the answer reaches the next turn only through the store.
#[test]
fn decode_offload_lets_a_later_turn_hit_the_answer() {
    let traces = [
        (
            common::repo().join("traces/mooncake_conversation_10min.jsonl"),
            "../../traces/mooncake_conversation_10min.jsonl",
        ),
        (
            common::shared("traces/conversation_trace.jsonl"),
            "../../../shared/traces/conversation_trace.jsonl",
        ),
    ];
    for (path, scenario_path) in traces {
        let (bound, bound_answers) = answer_reuse_bound(&path, ROWS);
        let base = vec![
            format!("workload.trace.path={scenario_path}"),
            format!("workload.trace.limit={ROWS}"),
        ];
        let off = store_run("offload-off", &base);
        let mut sets = base.clone();
        sets.extend(OFFLOAD.iter().map(|s| s.to_string()));
        let on = store_run("offload-on", &sets);
        assert_eq!(
            on.requests.completed, on.requests.arrived,
            "{:?}",
            on.requests
        );
        let (h_off, h_on) = (common::hit_share(&off), common::hit_share(&on));
        let o = on
            .kv_store
            .as_ref()
            .unwrap()
            .traffic
            .decode_offload
            .unwrap();
        println!(
            "{}: hit share {:.2} % → {:.2} % with the decode offload; bounds {:.2} % (prompts) → {:.2} % (with answers); {} answer blocks offloaded, {} put, {:.1} GB on the fabric",
            path.display(),
            100.0 * h_off,
            100.0 * h_on,
            100.0 * bound,
            100.0 * bound_answers,
            o.blocks,
            o.put_blocks,
            o.fabric_write_bytes as f64 / 1e9
        );
        assert!(
            off.kv_store
                .as_ref()
                .unwrap()
                .traffic
                .decode_offload
                .is_none()
        );
        assert!(h_off <= bound + 1e-9 && h_on <= bound_answers + 1e-9);
        assert!(
            h_on - h_off >= 0.5 * (bound_answers - bound),
            "{h_off} → {h_on} against the bounds {bound} → {bound_answers}"
        );
        // Every prompt was written before its answer landed (write_through, unbounded).
        assert_eq!((o.orphaned_blocks, o.host_full_blocks, o.failed), (0, 0, 0));
        assert!(o.put_blocks > 0 && o.put_blocks <= o.blocks, "{o:?}");
    }
}

/// Bytes each link of `nodes` carried over the run, receive and send sides summed apart.
fn nic_bytes(dir: &std::path::Path, nodes: &[u32]) -> (u64, u64) {
    let links = link_bytes(dir);
    let side = |suffix: &str| -> u64 {
        links
            .iter()
            .filter(|(k, _)| {
                nodes
                    .iter()
                    .any(|n| k.starts_with(&format!("node{n}.nic")) && k.ends_with(suffix))
            })
            .map(|(_, v)| v)
            .sum()
    };
    (side(".rx"), side(".tx"))
}

const DECODE_OFFLOAD: &str = "scenarios/store/decode-offload.toml";

/// Conservation, as the results show it: with the store on the prefill nodes, the decode
/// nodes' NICs receive the KV transfers into them and nothing else, with the offload on or
/// off; with it on they send the offload's store batches, which are exactly the blocks it put
/// (a block's bytes split over the 8 TP ranks), and the GPU → host copies are exactly the
/// blocks offloaded. `links.csv` has whole seconds: what the last writes moved after the
/// run's last whole second is not in it (whole batches; `sim::store`'s own test counts the
/// fabric's bytes to the last one).
#[test]
fn the_decode_nodes_nics_carry_exactly_the_offloaded_bytes_more() {
    let store = "kv_store.nodes=[0, 1, 2]";
    let (d_on, d_off) = (tmpdir("offload-nics-on"), tmpdir("offload-nics-off"));
    let on = run(DECODE_OFFLOAD, &[store], &d_on);
    let off = run(
        DECODE_OFFLOAD,
        &[
            store,
            "pools.decode.server.disaggregation_decode_enable_offload_kvcache=false",
        ],
        &d_off,
    );
    assert_eq!(
        on.requests.completed, on.requests.arrived,
        "{:?}",
        on.requests
    );
    assert_eq!(off.requests.completed, on.requests.completed);
    let o = on
        .kv_store
        .as_ref()
        .unwrap()
        .traffic
        .decode_offload
        .unwrap();
    let kv_in: u64 = common::read_csv(&d_on.join("requests.csv"))
        .iter()
        .map(|r| common::num(r, "kv_bytes").unwrap())
        .sum();
    let ((rx_on, tx_on), (rx_off, tx_off)) =
        (nic_bytes(&d_on, &[3, 4]), nic_bytes(&d_off, &[3, 4]));
    println!(
        "decode nodes' NICs: rx {rx_off} → {rx_on} (KV in {kv_in}), tx {tx_off} → {tx_on}; offload {} blocks, {} put, {} bytes in {} batches",
        o.blocks, o.put_blocks, o.fabric_write_bytes, o.batches
    );
    // Per-second byte counters round each second; the totals agree to a few bytes per row.
    let close = |a: u64, b: u64| a.abs_diff(b) <= 1 << 12;
    assert!(
        close(rx_on, kv_in) && close(rx_off, kv_in),
        "rx {rx_on} {rx_off}"
    );
    assert!(close(tx_off, 0), "tx without the offload {tx_off}");
    // Llama-3.1-70B: 320 KiB of KV per token; a block is 512 tokens, a rank's batch 1/8 of it.
    let block = 512 * 327_680u64;
    let late = o.fabric_write_bytes - tx_on.min(o.fabric_write_bytes);
    assert!(tx_on <= o.fabric_write_bytes + (1 << 12), "tx {tx_on}");
    assert!(
        close(late % (block / 8), 0) || close(late % (block / 8), block / 8),
        "what is missing is whole batches: {late}"
    );
    assert!(
        late * 100 < o.fabric_write_bytes,
        "{late} of {}",
        o.fabric_write_bytes
    );
    assert_eq!(o.local_copy_bytes, 0, "no store on a decode node");
    assert_eq!(o.fabric_write_bytes, o.put_blocks * block);
    assert_eq!(o.d2h_bytes, o.blocks * block);
    assert_eq!(
        o.batches,
        o.writes * 8,
        "one block a write, on one store node, 8 ranks"
    );
    assert!(o.writes > 0 && o.put_blocks == o.writes, "{o:?}");
}

/// The same scenario and seed give the same bytes with the decode offload on.
#[test]
fn the_decode_offload_is_deterministic() {
    let sets = ["workload.trace.limit=400", OFFLOAD[0]];
    let (a, b) = (tmpdir("offload-det-a"), tmpdir("offload-det-b"));
    run(SCENARIO, &sets, &a);
    run(SCENARIO, &sets, &b);
    for f in [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "links.csv",
    ] {
        let (x, y) = (
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
        );
        assert!(x == y, "{f} differs between two runs");
    }
    // Without the key, the summary has no trace of it.
    let c = tmpdir("offload-det-off");
    run(SCENARIO, &["workload.trace.limit=400"], &c);
    let s = std::fs::read_to_string(c.join("summary.json")).unwrap();
    assert!(!s.contains("decode_offload"), "{s}");
}

/// Bad combinations are exit-2 errors naming the key and what would be valid.
#[test]
fn bad_decode_offload_combinations_name_their_key() {
    let on = |pool: &str| {
        format!("pools.{pool}.server.disaggregation_decode_enable_offload_kvcache=true")
    };
    let key =
        |pool: &str| format!("pools.{pool}.server.disaggregation_decode_enable_offload_kvcache");
    let cases: Vec<(&str, Vec<String>, String, &str)> = vec![
        // No store to write to.
        (
            "tests/scenarios/router-conversation.toml",
            vec![on("decode")],
            key("decode"),
            "add a [kv_store] section",
        ),
        // A synthetic workload names no block.
        (
            "scenarios/quickstart.toml",
            vec![on("decode")],
            key("decode"),
            "trace",
        ),
        // A trace without prefix ids.
        (
            "scenarios/trace-azure-code.toml",
            vec![on("decode")],
            key("decode"),
            "hash_ids",
        ),
        // Only decode pools offload.
        (
            SCENARIO,
            vec![on("prefill")],
            key("prefill"),
            "only a decode pool",
        ),
        // Another backend.
        (
            SCENARIO,
            vec![
                on("decode"),
                "pools.decode.server.hicache_storage_backend=hf3fs".into(),
            ],
            "pools.decode.server.hicache_storage_backend".into(),
            "valid: \"mooncake\"",
        ),
        // Flags the offload has no use for.
        (
            SCENARIO,
            vec![
                on("decode"),
                "pools.decode.server.hicache_write_policy=write_through".into(),
            ],
            "pools.decode.server.hicache_write_policy".into(),
            "does nothing on a decode pool",
        ),
        // A hybrid model's pool is not an MHA/MLA pool.
        (
            SCENARIO,
            vec![on("decode"), "model.preset=nemotron-h-8b".into()],
            key("decode"),
            "Unsupported KV cache type for decode offload",
        ),
        // HiCache on a decode pool points at the offload's key; its flags without the key too.
        (
            SCENARIO,
            vec!["pools.decode.server.enable_hierarchical_cache=true".into()],
            "pools.decode.server.enable_hierarchical_cache".into(),
            "disaggregation_decode_enable_offload_kvcache = true",
        ),
        (
            SCENARIO,
            vec!["pools.decode.server.hicache_ratio=3".into()],
            "pools.decode.server.hicache_ratio".into(),
            "disaggregation_decode_enable_offload_kvcache = true",
        ),
    ];
    for (scenario, sets, key, hint) in cases {
        let mut args = vec!["run".to_string(), scenario.to_string(), "-q".into()];
        for s in &sets {
            args.push("--set".into());
            args.push(s.clone());
        }
        let out = tmpdir("offload-bad");
        args.push("--out".into());
        args.push(out.to_string_lossy().into_owned());
        let (code, _, err) = common::pdsim(&args);
        assert_eq!(code, 2, "{scenario} {sets:?}: {err}");
        assert!(
            err.contains(&format!(": {key}: ")),
            "{scenario} {sets:?}: {err}"
        );
        assert!(err.contains(hint), "{scenario} {sets:?}: {err}");
    }
    // The offload's host pool takes HiCache's sizing flags, without enable_hierarchical_cache:
    // 4 GB per rank of Llama-3.1-8B's 128 KiB per token.
    let sc = pdsim::scenario::load(
        &common::repo().join(SCENARIO),
        &[on("decode"), "pools.decode.server.hicache_size=4".into()],
    )
    .unwrap();
    let d = sc.pools.iter().find(|p| p.name == "decode").unwrap();
    assert!(d.hicache.is_none());
    assert_eq!(
        d.decode_offload.unwrap().host_tokens,
        4_000_000_000 / 131_072
    );
}

/// `pdsim plan`'s launch lines for a decode pool that offloads carry sglang's flag and the
/// backend it needs, and `pdsim lint` accepts the pair.
#[test]
fn lint_accepts_the_offloading_decodes_launch_line() {
    let sc = pdsim::scenario::load(&common::repo().join(DECODE_OFFLOAD), &[]).unwrap();
    let text = pdsim::plan::launch::launch_text(&sc);
    let line = |mode: &str| {
        pdsim::plan::launch::commands(&text)
            .find(|l| l.contains(&format!("--disaggregation-mode {mode}")))
            .unwrap()
            .to_string()
    };
    let (p, d) = (line("prefill"), line("decode"));
    assert!(
        d.contains("--disaggregation-decode-enable-offload-kvcache"),
        "{d}"
    );
    let (code, out, err) = common::pdsim(&["lint", "--prefill", &p, "--decode", &d]);
    assert_eq!(code, 0, "{out}{err}");
}
