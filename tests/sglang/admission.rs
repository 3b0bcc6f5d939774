//! Decode admission after a request gives its pages back outside a decode step (issue 43, the
//! first defect): hand-derived on sglang's prefill benchmark shape.

use crate::common;
use common::*;

const BURST: &str = "tests/scenarios/one-token-burst.toml";

/// 512 prompts of 1,024 tokens at once, one output token each, on one Llama-3.1-8B TP1 pair
/// (H100, page 64). The decode has P = 6,678 KV pages (`run.json`; `capacity::kv_pages`), i.e.
/// 427,392 tokens. sglang's budget admits the (k+1)-th request while
/// `1,024 + 512 ≤ free − 512 k` with `free = 427,392 − 1,024 k`, i.e. `1,536 (k + 1) ≤
/// 427,392`: k + 1 ≤ 278.25, so the first 278 are preallocated at their arrival — their page
/// ids reach the prefill after exactly the control latency (100 µs) — and 234 wait.
///
/// Each of the 278 completes as its KV lands (its one token is the prefill's) and gives 16
/// pages and its 512-token reservation back: one more fits per completion. Before the fix
/// nothing ran the prealloc queue again (no decode step ever ends: nothing decodes), so the
/// 234 waited until their 300-s `bootstrap_timeout` and 101 of them failed (the failures'
/// own wakes let the rest in). Now every request completes and none fails.
#[test]
fn every_one_token_prompt_of_a_burst_completes() {
    let dir = tmpdir("one-token-burst");
    let s = run(BURST, &[], &dir);
    assert_eq!(
        (s.requests.arrived, s.requests.completed, s.requests.failed),
        (512, 512, 0),
        "errors: {:?}",
        s.errors
    );
    assert_eq!(s.requests.unfinished, 0);
    let record = pdsim::report::schema::read_run(&dir.join("run.json")).unwrap();
    let pages = u64::from(record.instances[1].kv_pages);
    assert_eq!(pages, 6_678, "the decode's KV pages");
    let first_wave = (pages * 64 / (1_024 + 512)) as usize;
    assert_eq!(first_wave, 278);
    let rows = read_csv(&dir.join("requests.csv"));
    let at_once = rows
        .iter()
        .filter(|r| num(r, "prefill_queued_ns").unwrap() - num(r, "arrival_ns").unwrap() == 100_000)
        .count();
    assert_eq!(at_once, first_wave, "preallocated at their arrival");
    // The 279th request's page ids go out only once the first completion gave pages back.
    let first_done = rows
        .iter()
        .map(|r| num(r, "finish_ns").unwrap())
        .min()
        .unwrap();
    let later = rows
        .iter()
        .filter(|r| num(r, "prefill_queued_ns").unwrap() - num(r, "arrival_ns").unwrap() > 100_000);
    for r in later {
        assert!(num(r, "prefill_queued_ns").unwrap() >= first_done + 100_000);
    }
}
