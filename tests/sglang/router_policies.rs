//! sgl-model-gateway's policies on Mooncake's conversation trace (`traces/
//! mooncake_conversation_10min.jsonl`, 4 prefill instances with their own radix caches):
//! `cache_aware` — the router's default — sends a conversation's turns where its earlier turns
//! went, so it hits more prefix tokens than `round_robin`, `least_loaded` or `power_of_two`,
//! while its load stays within the router's balance thresholds.

use crate::common;

use common::{run, tmpdir};
use pdsim::report::Summary;

const SCENARIO: &str = "tests/scenarios/router-conversation.toml";

fn policy_run(name: &str, sets: &[&str]) -> Summary {
    let dir = tmpdir(&format!("router-{name}"));
    let s = run(SCENARIO, sets, &dir);
    assert_eq!(s.requests.completed, 1750, "{name}: {:?}", s.requests);
    println!(
        "{name:<28} prefix hit share {:>6.2} %   router {:?}",
        100.0 * common::hit_share(&s),
        s.router
    );
    s
}

#[test]
fn cache_aware_hits_more_prefix_tokens_within_the_balance_thresholds() {
    let bound = common::trace_reuse_bound(
        &common::repo().join("traces/mooncake_conversation_10min.jsonl"),
        usize::MAX,
    );
    println!("trace reuse bound {:.2} %", 100.0 * bound);
    for cache in ["kv-sized", "unbounded"] {
        let mut sets = vec![];
        if cache == "unbounded" {
            sets.push("pools.prefill.server.radix_cache_tokens=1000000000000");
        }
        let with = |p: &'static str| {
            let mut v = sets.clone();
            v.push(p);
            v
        };
        let ca = policy_run(
            &format!("{cache} cache_aware"),
            &with("router.policy=cache_aware"),
        );
        let rr = policy_run(
            &format!("{cache} round_robin"),
            &with("router.policy=round_robin"),
        );
        let ll = policy_run(
            &format!("{cache} least_loaded"),
            &with("router.policy=least_loaded"),
        );
        let p2 = policy_run(
            &format!("{cache} power_of_two"),
            &with("router.policy=power_of_two"),
        );
        let h = common::hit_share(&ca);
        for (other, s) in [
            ("round_robin", &rr),
            ("least_loaded", &ll),
            ("power_of_two", &p2),
        ] {
            assert!(
                h > 1.2 * common::hit_share(s),
                "{cache}: cache_aware {h} vs {other} {}",
                common::hit_share(s)
            );
        }
        assert!(
            h <= bound + 1e-9,
            "{cache}: above the trace's own reuse {bound}"
        );
        if cache == "unbounded" {
            // Affinity alone recovers nearly all the reuse when no cache ever evicts.
            assert!(h > bound - 0.02, "{h} vs {bound}");
        }
        // The router's tree and counters: both sides decide, and load never got unbalanced
        // by the router's own rule (spread > 64 and max > 1.5 × min).
        let r = ca
            .router
            .as_ref()
            .expect("cache_aware reports its decisions");
        for side in [r.prefill.unwrap(), r.decode.unwrap()] {
            assert_eq!(
                side.affinity + side.low_match + side.imbalanced + side.fallback,
                1750
            );
            assert!(side.affinity > 0);
            assert!(u64::from(side.peak_load_gap) <= 64, "{side:?}");
            assert_eq!(side.imbalanced, 0, "{side:?}");
        }
        // No other policy reports decisions.
        assert!(rr.router.is_none() && ll.router.is_none() && p2.router.is_none());
    }
    // Tight thresholds: the router balances often, and still hits more than round_robin.
    let tight = policy_run(
        "tight cache_aware",
        &[
            "router.balance_abs_threshold=4",
            "router.balance_rel_threshold=1.2",
        ],
    );
    let rr = policy_run("round_robin", &["router.policy=round_robin"]);
    let p = tight.router.as_ref().unwrap().prefill.unwrap();
    assert!(p.imbalanced > 50, "{p:?}");
    assert!(p.peak_load_gap < 16, "{p:?}");
    assert!(common::hit_share(&tight) > common::hit_share(&rr));
}

/// The prefill and decode sides follow their own flags.
#[test]
fn prefill_and_decode_policies_override_the_policy() {
    let s = policy_run(
        "prefill cache_aware only",
        &[
            "router.policy=round_robin",
            "router.prefill_policy=cache_aware",
        ],
    );
    let r = s.router.as_ref().unwrap();
    assert!(r.prefill.is_some() && r.decode.is_none());
    let s = policy_run(
        "decode cache_aware only",
        &[
            "router.policy=cache_aware",
            "router.prefill_policy=least_loaded",
        ],
    );
    let r = s.router.as_ref().unwrap();
    assert!(r.prefill.is_none() && r.decode.is_some());
}
