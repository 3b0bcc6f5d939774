//! Decode-side prefix reuse (`--disaggregation-decode-enable-radix-cache`, sglang PR #19746;
//! `docs/sglang-pd.md` §25): what every turn of one conversation transfers with and without
//! it, derived by hand from the session's structure; the teaching scenario's bytes and TTFT;
//! the router's choice of decode by prefix.
//!
//! `cargo test --release --test sglang decode_radix -- --nocapture` prints the per-turn table.

use crate::common;
use common::*;

const ONE: &str = "tests/scenarios/one-session.toml";
const ON: &[&str] = &[
    "sglang.version=\"2026-09\"",
    "pools.decode.server.disaggregation_decode_enable_radix_cache=true",
];

/// Turn k's prompt in the one-session scenario: 1000, then + 300 (answer) + 200 (message).
fn prompt(k: u64) -> u64 {
    1000 + 500 * k
}
/// Every turn's output tokens.
const OUTPUT: u64 = 300;
/// Llama-3.1-8B's KV a token: 32 layers × 2 (K and V) × 8 KV heads × 128 × 2 B (bf16), on one
/// GPU (TP 1).
const TOKEN_BYTES: u64 = 32 * 2 * 8 * 128 * 2;
/// Tokens a page (`page_size = 64`) and the bytes of one.
const PAGE: u64 = 64;
const PAGE_BYTES: u64 = PAGE * TOKEN_BYTES;

/// The decode's tree after turn k − 1 holds the conversation's blocks up to the KV turn k − 1
/// left — its prompt and all but its last output token: `⌊(n₍ₖ₋₁₎ + o − 1) / 512⌋` blocks
/// (its full prompt blocks, then the blocks its answer completed, which turn k's prompt names
/// next). Turn k (whose prompt is longer) matches all of them: `512 ⌊(n₍ₖ₋₁₎ + o − 1) / 512⌋`
/// tokens, page-aligned since 64 divides 512.
fn hit(k: u64) -> u64 {
    if k == 0 {
        0
    } else {
        512 * ((prompt(k - 1) + OUTPUT - 1) / 512)
    }
}

/// Pages turn k's transfer carries: the prompt's pages past the hit.
fn pages(k: u64, reuse: bool) -> u64 {
    prompt(k).div_ceil(PAGE) - if reuse { hit(k) / PAGE } else { 0 }
}

#[test]
fn each_turn_transfers_only_what_the_decode_lacks() {
    let (off_dir, on_dir) = (tmpdir("radix-one-off"), tmpdir("radix-one-on"));
    let off = run(ONE, &[], &off_dir);
    let on = run(ONE, ON, &on_dir);
    let (off_rows, on_rows) = (
        read_csv(&off_dir.join("requests.csv")),
        read_csv(&on_dir.join("requests.csv")),
    );
    assert_eq!((off_rows.len(), on_rows.len()), (6, 6));
    // Every request also carries its metadata (aux) row: the bytes past whole pages, the same
    // for every request.
    let aux = num(&off_rows[0], "kv_bytes").unwrap() - pages(0, false) * PAGE_BYTES;
    assert!(aux > 0 && aux < PAGE_BYTES, "{aux}");
    println!("turn  prompt  hit  pages off  pages on  bytes off  bytes on");
    let (mut hits, mut saved_pages) = (0, 0);
    for k in 0..6u64 {
        let (a, b) = (&off_rows[k as usize], &on_rows[k as usize]);
        assert_eq!(num(b, "input_tokens"), Some(prompt(k)));
        assert_eq!((&*a["outcome"], &*b["outcome"]), ("completed", "completed"));
        let (bytes_off, bytes_on) = (num(a, "kv_bytes").unwrap(), num(b, "kv_bytes").unwrap());
        println!(
            "{k:>4}  {:>6}  {:>4}  {:>9}  {:>8}  {bytes_off:>9}  {bytes_on:>8}",
            prompt(k),
            hit(k),
            pages(k, false),
            pages(k, true)
        );
        assert_eq!(
            bytes_off,
            pages(k, false) * PAGE_BYTES + aux,
            "turn {k} without"
        );
        assert_eq!(bytes_on, pages(k, true) * PAGE_BYTES + aux, "turn {k} with");
        hits += hit(k);
        saved_pages += pages(k, false) - pages(k, true);
        // The prefill computes the same tokens either way: its own cache decides that.
        assert_eq!(num(a, "cached_tokens"), num(b, "cached_tokens"), "turn {k}");
    }
    // By hand: hits 1024, 1536, 2048, 2560, 3072 (turns 1–5) = 10,240 tokens, 160 pages.
    assert_eq!((hits, saved_pages), (10_240, 160));
    let d = on.decode_prefix.as_ref().expect("a decode_prefix summary");
    assert_eq!(d.requests_admitted, 6);
    assert_eq!(d.requests_hit, 5);
    assert_eq!(d.prompt_tokens, (0..6).map(prompt).sum::<u64>());
    assert_eq!(d.hit_tokens, hits);
    assert_eq!(d.hit_pages, saved_pages);
    assert_eq!(d.bytes_not_transferred, saved_pages * PAGE_BYTES);
    assert_eq!(
        off.transfer.bytes - on.transfer.bytes,
        d.bytes_not_transferred,
        "the transfer moved exactly the bytes the tree did not hold"
    );
    // The tree holds the whole conversation once: 2, 3, 4, 5, 6, 7 blocks after each turn,
    // each turn adding one (the first two).
    assert_eq!(
        (d.inserted_blocks, d.peak_blocks, d.evicted_blocks),
        (7, 7, 0)
    );
    assert!(off.decode_prefix.is_none(), "no section without the flag");
    // Less to move, sooner the first token: every later turn's TTFT is lower.
    for k in 1..6 {
        let ttft = |r: &std::collections::BTreeMap<String, String>| {
            num(r, "first_token_ns").unwrap() - num(r, "arrival_ns").unwrap()
        };
        assert!(
            ttft(&on_rows[k]) < ttft(&off_rows[k]),
            "turn {k}: {} vs {}",
            ttft(&on_rows[k]),
            ttft(&off_rows[k])
        );
    }
    assert!(on.latency_ms.ttft.mean.unwrap() < off.latency_ms.ttft.mean.unwrap());
}

/// The teaching scenario and its twin without the flag: the same sessions move a third of the
/// bytes and reach the first token sooner; the tree's count of bytes not moved is what the
/// transfers saved per admitted token.
#[test]
fn the_teaching_scenario_moves_less_and_answers_sooner() {
    let (on_dir, off_dir) = (tmpdir("radix-teach-on"), tmpdir("radix-teach-off"));
    let on = run("scenarios/sessions/decode-prefix-reuse.toml", &[], &on_dir);
    let off = run(
        "scenarios/sessions/decode-prefix-reuse-off.toml",
        &[],
        &off_dir,
    );
    for s in [&on, &off] {
        assert_eq!(s.requests.failed + s.requests.corrupted, 0);
    }
    let d = on.decode_prefix.as_ref().unwrap();
    let share = d.hit_share.unwrap();
    println!(
        "with: {} B, TTFT {:.1} ms, hit share {share:.3}; without: {} B, TTFT {:.1} ms",
        on.transfer.bytes,
        on.latency_ms.ttft.mean.unwrap(),
        off.transfer.bytes,
        off.latency_ms.ttft.mean.unwrap()
    );
    assert!(share > 0.6, "{share}");
    assert!(on.transfer.bytes * 2 < off.transfer.bytes);
    assert!(on.latency_ms.ttft.mean.unwrap() < off.latency_ms.ttft.mean.unwrap());
    assert!(on.latency_ms.transfer.mean.unwrap() < off.latency_ms.transfer.mean.unwrap());
    // The report says it where the run has a tree, with the bytes the summary counts.
    let html = |dir: &std::path::Path| std::fs::read_to_string(dir.join("index.html")).unwrap();
    let gb = format!(
        "{:.2} GB of KV the prefills did not send",
        d.bytes_not_transferred as f64 / 1e9
    );
    assert!(html(&on_dir).contains("<h2>Decode prefix reuse</h2>") && html(&on_dir).contains(&gb));
    assert!(!html(&off_dir).contains("Decode prefix reuse"));
}

/// sgl-model-gateway picks the decode with its own policy (`pd_router.rs::select_pd_pair`:
/// `decode_policy.select_worker(decode_workers, request_text)`; `decode_policy` defaults to the
/// main policy, `cache_aware`), so a conversation's turns follow the decode whose tree holds
/// them. Round robin sends consecutive turns to different decodes, and fewer hit.
#[test]
fn the_cache_aware_router_keeps_a_conversation_on_its_decode() {
    let (a, b) = (tmpdir("radix-router-ca"), tmpdir("radix-router-rr"));
    let scenario = "scenarios/sessions/decode-prefix-reuse.toml";
    let aware = run(scenario, &[], &a);
    let rr = run(scenario, &["router.decode_policy=\"round_robin\""], &b);
    let (x, y) = (
        aware.decode_prefix.as_ref().unwrap().hit_share.unwrap(),
        rr.decode_prefix.as_ref().unwrap().hit_share.unwrap(),
    );
    println!("decode hit share: cache_aware {x:.3}, round_robin {y:.3}");
    assert!(x > y + 0.1, "{x} vs {y}");
    assert!(aware.transfer.bytes < rr.transfer.bytes);
}

/// A decode pool too small for every conversation: the trees evict unlocked blocks, least
/// recently used first, to admit new requests and to grow running ones; no request fails, the
/// hit share falls with the room, and the blocks held at the end are what was inserted less
/// what was evicted (never more than the peak).
#[test]
fn a_full_pool_evicts_and_loses_no_request() {
    let scenario = "scenarios/sessions/decode-prefix-reuse.toml";
    let (a, b) = (tmpdir("radix-roomy"), tmpdir("radix-tight"));
    let roomy = run(scenario, &[], &a);
    let tight = run(
        scenario,
        &["pools.decode.server.mem_fraction_static=0.25"],
        &b,
    );
    let (r, t) = (
        roomy.decode_prefix.as_ref().unwrap(),
        tight.decode_prefix.as_ref().unwrap(),
    );
    println!(
        "roomy: hit share {:.3}, evicted {}; tight: hit share {:.3}, evicted {}, peak {}",
        r.hit_share.unwrap(),
        r.evicted_blocks,
        t.hit_share.unwrap(),
        t.evicted_blocks,
        t.peak_blocks
    );
    assert_eq!(r.evicted_blocks, 0);
    assert!(t.evicted_blocks > 0);
    assert!(t.hit_share.unwrap() < r.hit_share.unwrap());
    assert!(t.inserted_blocks - t.evicted_blocks <= t.peak_blocks);
    let q = &tight.requests;
    assert_eq!((q.failed, q.corrupted, q.unfinished), (0, 0, 0));
    assert_eq!(q.completed, q.arrived);
}
