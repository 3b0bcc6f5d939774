//! The what-if of `scenarios/moe/deepep-kv-contention.toml`: DeepEP all-to-all and KV
//! transfers share the decode GPUs' NICs. Run at two NIC rates, with the all-to-all as fabric
//! flows (contention) and priced at the uncontended rate (`fabric.a2a_flows = false`, no
//! contention), the test pins what contention costs: longer KV transfers, a slower decode step
//! (TPOT), fewer output tokens — and more of each when the NICs are halved.
//! `cargo test --release --test fabric moe_contention -- --nocapture` prints the table.

use crate::common;

use serde_json::Value;

const SCENARIO: &str = "scenarios/moe/deepep-kv-contention.toml";

/// The figures a run gives.
struct Run {
    transfer_ms: f64,
    tpot_ms: f64,
    out_tok_s: f64,
    /// Decode pool's all-to-all slowdown over the uncontended rate (`None`: not on the fabric).
    a2a_slowdown: Option<f64>,
}

fn run(gbps: u32, flows: bool) -> Run {
    let dir = common::tmpdir(&format!("contention-{gbps}-{flows}"));
    common::run(
        SCENARIO,
        &[
            &format!("fabric.nic_gbps={gbps}"),
            &format!("fabric.a2a_flows={flows}"),
        ],
        &dir,
    );
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let f = |v: &Value| v.as_f64().unwrap();
    let a2a = s["transfer"]["a2a"].as_array();
    Run {
        transfer_ms: f(&s["latency_ms"]["transfer"]["mean"]),
        tpot_ms: f(&s["latency_ms"]["tpot"]["mean"]),
        out_tok_s: f(&s["throughput"]["arrival_window"]["output_tokens_per_s"]),
        a2a_slowdown: a2a.and_then(|rows| {
            rows.iter()
                .find(|r| r["pool"] == "decode")
                .map(|r| f(&r["slowdown"]))
        }),
    }
}

fn pct(a: f64, b: f64) -> f64 {
    (a / b - 1.0) * 100.0
}

#[test]
fn kv_transfers_and_deepep_all_to_all_slow_each_other_on_shared_nics() {
    let mut growth = Vec::new();
    for gbps in [400, 200] {
        let (with, without) = (run(gbps, true), run(gbps, false));
        assert!(without.a2a_slowdown.is_none(), "no flows, no a2a figures");
        let slow = with
            .a2a_slowdown
            .expect("the decode pool's all-to-all ran on the fabric");
        let (t, p, o) = (
            pct(with.transfer_ms, without.transfer_ms),
            pct(with.tpot_ms, without.tpot_ms),
            pct(with.out_tok_s, without.out_tok_s),
        );
        println!(
            "{gbps} Gb/s NICs: KV transfer {:.2} -> {:.2} ms ({t:+.1} %), TPOT {:.2} -> {:.2} ms ({p:+.1} %), output {:.0} -> {:.0} tok/s ({o:+.1} %), decode all-to-all {:+.1} % over uncontended",
            without.transfer_ms,
            with.transfer_ms,
            without.tpot_ms,
            with.tpot_ms,
            without.out_tok_s,
            with.out_tok_s,
            slow * 100.0
        );
        // Measured with the defaults (issue 22: the engine limit on each GPU, none on DeepEP;
        // decode under DeepEP's two-micro-batch pipeline; 400 / 200 Gb/s NICs; sglang-2026's
        // step times with DeepEP's legs at the measured tables' rate): KV transfer mean
        // −0.1 / +52 %, TPOT +7.4 / +19.3 %, output −2.8 / −11.7 %, decode all-to-all +9.6 /
        // +12.9 % over uncontended. At 400 Gb/s one Mooncake batch's ceiling (18.3 GB/s) sits below
        // its max-min share of the NIC next to the all-to-all (23 GB/s), so the KV keeps its
        // speed (within noise: +0.3 % and −0.1 % in earlier versions of the step) and the
        // all-to-all absorbs the contention; at 200 Gb/s the share (11.5 GB/s) falls below
        // that ceiling and both slow. The bounds are about half of it.
        if gbps == 400 {
            assert!(t.abs() < 2.0, "400 Gb/s: the KV transfers moved {t:.1} %");
        } else {
            assert!(t > 20.0, "{gbps} Gb/s: KV transfers grew only {t:.1} %");
        }
        let p_min = if gbps == 400 { 1.5 } else { 3.5 };
        assert!(p > p_min, "{gbps} Gb/s: TPOT grew only {p:.1} %");
        assert!(o < -1.5, "{gbps} Gb/s: output fell only {o:.1} %");
        assert!(
            slow > 0.025,
            "{gbps} Gb/s: the all-to-all slowed only {:.1} %",
            slow * 100.0
        );
        growth.push((t, p, slow));
    }
    // Halving the NICs makes contention worse on every count.
    let (fast, slow) = (growth[0], growth[1]);
    assert!(
        slow.0 > fast.0 && slow.1 > fast.1 && slow.2 > fast.2,
        "{growth:?}"
    );
}
