//! `load_balance_method`: the router picks an instance, its DP controller picks the DP rank
//! by sglang's rule (`sglang::dp`, whose unit tests pin the rules themselves). Here the wiring:
//! which rank each request of a run landed on, read back from `requests.csv`.

use crate::common;

use std::collections::BTreeMap;

/// The LMSYS prefill setup (one prefill instance of 32 DP ranks, one decode instance of 72)
/// for 2 simulated seconds; `(id, bootstrap_room, prefill rank, decode rank)` per request, in
/// arrival order.
fn ranks(sets: &[&str]) -> Vec<(u64, u64, u64, u64)> {
    let dir = common::tmpdir(&format!(
        "dp-dispatch-{}",
        sets.join("-").replace(['"', '='], "_")
    ));
    let mut all = vec!["run.duration_s=2"];
    all.extend_from_slice(sets);
    common::run("scenarios/moe/lmsys-prefill-ep32.toml", &all, &dir);
    let rows = common::read_csv(&dir.join("requests.csv"));
    let mut out: Vec<(u64, u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            let n = |c| common::num(r, c).unwrap();
            let room: u64 = r["bootstrap_room"].parse().unwrap();
            // Prefill ranks are instances 0..32, decode ranks 32..104.
            (
                n("id"),
                room,
                n("prefill_instance"),
                n("decode_instance") - 32,
            )
        })
        .collect();
    out.sort_unstable();
    assert!(out.len() > 100, "{} requests", out.len());
    out
}

#[test]
fn auto_follows_the_bootstrap_room_on_prefill_and_takes_turns_on_decode() {
    for (i, &(_, room, p, d)) in ranks(&[]).iter().enumerate() {
        assert_eq!(p, room % 32, "prefill: follow_bootstrap_room");
        assert_eq!(d, i as u64 % 72, "decode: round_robin");
    }
}

#[test]
fn explicit_methods_dispatch_as_sglang_resolves_them() {
    // On a PD prefill server `round_robin` means bootstrap-room routing (sglang's backward
    // compatibility); `follow_bootstrap_room` on decode; deprecated `minimum_tokens` falls
    // back to `follow_bootstrap_room` under PD.
    let got = ranks(&[
        "pools.prefill.server.load_balance_method=\"round_robin\"",
        "pools.decode.server.load_balance_method=\"follow_bootstrap_room\"",
    ]);
    for &(_, room, p, d) in &got {
        assert_eq!((p, d), (room % 32, room % 72));
    }
    let min_tokens = ranks(&["pools.decode.server.load_balance_method=\"minimum_tokens\""]);
    for &(_, room, _, d) in &min_tokens {
        assert_eq!(d, room % 72);
    }
}

#[test]
fn shortest_queue_levels_the_decode_ranks() {
    // Every rank starts empty: the budget is empty, so ranks take turns (`DPBudget.dispatch`)
    // until the loads reported at a 0.1 s boundary differ; the counts stay level within a
    // handful of requests, unlike room routing, whose counts scatter.
    let count = |v: &[(u64, u64, u64, u64)]| {
        let mut c: BTreeMap<u64, u64> = BTreeMap::new();
        for &(_, _, _, d) in v {
            *c.entry(d).or_default() += 1;
        }
        let (min, max) = (c.values().min().copied(), c.values().max().copied());
        (c.len(), max.unwrap() - min.unwrap())
    };
    let sq = count(&ranks(&[
        "pools.decode.server.load_balance_method=\"shortest_queue\"",
    ]));
    let room = count(&ranks(&[
        "pools.decode.server.load_balance_method=\"follow_bootstrap_room\"",
    ]));
    assert_eq!(sq.0, 72, "every decode rank used");
    assert!(sq.1 <= 5, "shortest_queue spread {}", sq.1);
    assert!(
        room.1 > sq.1,
        "room routing scatters more: {} vs {}",
        room.1,
        sq.1
    );
}

#[test]
fn bad_methods_exit_2_naming_the_key_and_the_valid_names() {
    let (code, _, err) = common::pdsim(&[
        "check",
        "scenarios/moe/lmsys-prefill-ep32.toml",
        "--set",
        "pools.prefill.server.load_balance_method=\"fastest\"",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("pools.prefill.server.load_balance_method"),
        "{err}"
    );
    for name in [
        "auto",
        "round_robin",
        "follow_bootstrap_room",
        "shortest_queue",
        "minimum_tokens",
    ] {
        assert!(err.contains(name), "{err}");
    }
    let (code, _, err) = common::pdsim(&[
        "check",
        "scenarios/plan/colocated-8b.toml",
        "--set",
        "pools.servers.server.load_balance_method=\"follow_bootstrap_room\"",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("load_balance_method") && err.contains("bootstrap room"),
        "{err}"
    );
}
