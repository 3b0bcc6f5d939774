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

/// A DP-attention pool's figures in `summary.json` are per DP rank, each its own scheduler
/// with its own batch, queue and KV pool (issue 43: the LMSYS prefill benchmark read
/// `kv_memory` on both pools, the decode idle and "100 %" full, because the integrals summed
/// over 32 and 72 ranks were divided by one instance). By hand, for 20 s at 400 prompts/s of
/// 2,048 tokens, one output token each:
/// - prefill, 32 ranks of 7,587 pages: a forward takes `chunked_prefill_size / 2,048 = 4`
///   prompts, 4 × 32 = 128 pages held: 128 / 7,587 = 1.69 % of a rank's KV (summed over the
///   ranks this read 54 %); the pool serves ~99.2 prompts/s (`throughput`; 97.9 before DeepEP's
///   legs took the measured tables' rate), so the backlog grows by 400 − 99.2 = 300.8 a second
///   and its mean over the window, spread over the ranks, is 300.8 × 10 / 32 = 94.0 waiting per
///   rank;
/// - decode, 72 ranks of 10,151 pages, nothing to decode: its pages are held by the backlog,
///   preallocated at the handshake before the prefill (2,048 / 64 = 32 pages each), a mean of
///   300.8 × 10 / 72 × 32 / 10,151 = 13.2 % of a rank's KV (summed: 9.5 → "100 %"). 13 % is
///   headroom: decode binds on nothing.
#[test]
fn a_dp_attention_pools_figures_are_per_rank() {
    let dir = common::tmpdir("dp-pool-figures");
    let s = common::run("scenarios/moe/lmsys-prefill-ep32.toml", &[], &dir);
    let (p, d) = (&s.pools[0], &s.pools[1]);
    let near = |got: Option<f64>, want: f64, tol: f64| {
        let g = got.unwrap();
        assert!((g - want).abs() <= tol * want, "{g} vs {want} ± {tol}");
    };
    let served = s.throughput.requests_per_s;
    assert!((98.5..100.0).contains(&served), "{served}");
    near(p.kv_occupancy, 128.0 / 7_587.0, 0.1);
    near(p.batch_mean, 4.0, 0.05);
    near(p.queue_mean, (400.0 - served) * 10.0 / 32.0, 0.05);
    assert!(p.busy.unwrap() > 0.99 && p.busy.unwrap() <= 1.0);
    assert_eq!(p.bottleneck, "compute");
    near(
        d.kv_occupancy,
        (400.0 - served) * 10.0 / 72.0 * 32.0 / 10_151.0,
        0.1,
    );
    assert_eq!((d.busy, d.batch_mean), (Some(0.0), Some(0.0)));
    assert_eq!(d.bottleneck, "none");
}
