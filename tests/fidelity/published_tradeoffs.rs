//! Published end-to-end trade-offs of PD disaggregation, reproduced from the papers' setups
//! (`scenarios/published/`, each file citing its table or figure). No parameter of pdsim was
//! fitted to these rows: they are held out, and `docs/performance-model.md` §6 lists them with
//! today's errors. Each row prints published vs pdsim; what is asserted, and why, is said at
//! each assertion. `cargo test --release --test fidelity published_tradeoffs -- --nocapture`.
//! (LMSYS and Mooncake have their own: `moe_lmsys`, `mooncake_pd`, `fabric_scenarios`.)

use crate::common;

use pdsim::report::Summary;

fn row(what: &str, published: f64, got: f64) -> f64 {
    let err = got / published - 1.0;
    println!(
        "{what:<58} published {published:>8.2}  pdsim {got:>8.2}  error {:+6.1} %",
        err * 100.0
    );
    err
}

fn run(scenario: &str, name: &str, sets: &[String]) -> Summary {
    let dir = common::tmpdir(name);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let s = common::run(scenario, &sets, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    s
}

/// P90 TTFT and P90 TPOT, ms.
fn p90s(s: &Summary) -> (f64, f64) {
    let l = &s.latency_ms;
    (
        l.ttft.p90.expect("requests finished"),
        l.tpot.p90.expect("requests finished"),
    )
}

/// DistServe's SLOs for Figure 1 (the lines of the figure): P90 TTFT 0.4 s, P90 TPOT 0.04 s.
const TTFT_MS: f64 = 400.0;
const TPOT_MS: f64 = 40.0;

/// Which of DistServe's SLOs a deployment is judged by.
#[derive(Clone, Copy)]
enum Judge {
    Ttft,
    Tpot,
    Both,
}

/// The highest Poisson rate (req/s, to 1/64 of the starting bracket) at which `scenario` with
/// `sets` keeps the SLOs `judge` names at the 90th percentile: DistServe's goodput at 90 %
/// attainment. Bisection, assuming (as DistServe's own search does) that more load never helps.
fn goodput(scenario: &str, name: &str, sets: &[&str], judge: Judge) -> f64 {
    let meets = |rate: f64| {
        let mut all: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        all.push(format!("workload.arrival.rate_per_s={rate}"));
        let (ttft, tpot) = p90s(&run(scenario, name, &all));
        match judge {
            Judge::Ttft => ttft <= TTFT_MS,
            Judge::Tpot => tpot <= TPOT_MS,
            Judge::Both => ttft <= TTFT_MS && tpot <= TPOT_MS,
        }
    };
    let (mut lo, mut hi) = (0.25, 24.0);
    assert!(meets(lo), "{name}: misses the SLOs even at {lo} req/s");
    assert!(!meets(hi), "{name}: holds the SLOs even at {hi} req/s");
    for _ in 0..6 {
        let mid = (lo + hi) / 2.0;
        if meets(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// DistServe (OSDI'24) Figure 1 / §1: a 13B model on A100s, 512-token prompts, 64-token outputs.
/// Published: colocated 1.6 req/s per GPU; a prefill-only GPU 5.6; a decode-only GPU 10; 2P1D
/// "10 rps, or equally 3.3 rps per GPU, 2.1x higher".
#[test]
fn distserve_figure_1_goodputs() {
    const COLO: &str = "scenarios/published/distserve-fig1-colocated.toml";
    const PD: &str = "scenarios/published/distserve-fig1-pd.toml";
    let colocated = goodput(COLO, "ds-colo", &[], Judge::Both);
    // A prefill-only GPU: one prefill, decode ample (three decodes), judged by TTFT alone, as
    // the figure's prefill-only curve; a decode-only GPU: prefill ample, judged by TPOT alone.
    let prefill_only = goodput(
        PD,
        "ds-p",
        &["pools.prefill.instances=1", "pools.decode.instances=3"],
        Judge::Ttft,
    );
    let decode_only = goodput(
        PD,
        "ds-d",
        &["pools.prefill.instances=3", "pools.decode.instances=1"],
        Judge::Tpot,
    );
    let two_one = goodput(PD, "ds-2p1d", &[], Judge::Both);
    println!("DistServe Figure 1 (13B, A100, 512 in / 64 out, P90 TTFT 0.4 s, P90 TPOT 0.04 s):");
    let e_colo = row("colocated goodput, req/s per GPU", 1.6, colocated);
    let e_p = row("prefill-only GPU goodput, req/s", 5.6, prefill_only);
    let e_d = row("decode-only GPU goodput, req/s", 10.0, decode_only);
    row(
        "2P1D goodput, req/s per GPU (paper: min of its sides)",
        10.0 / 3.0,
        two_one / 3.0,
    );
    row(
        "2P1D per GPU over colocated (the trade-off)",
        2.1,
        two_one / 3.0 / colocated,
    );

    // The mechanism of the figure, at one rate between the colocated and the disaggregated
    // capacities: colocating prefill with decode delays both (a decode token waits for a
    // prompt's forward, a prompt for the running batch), so the colocated GPU's P90 TTFT and
    // P90 TPOT both exceed those of a GPU serving one phase.
    let at = vec!["workload.arrival.rate_per_s=3".to_string()];
    let (c_ttft, c_tpot) = p90s(&run(COLO, "ds-colo-3", &at));
    let mut p_sets = at.clone();
    p_sets.extend([
        "pools.prefill.instances=1".into(),
        "pools.decode.instances=3".into(),
    ]);
    let (p_ttft, _) = p90s(&run(PD, "ds-p-3", &p_sets));
    let mut d_sets = at.clone();
    d_sets.extend([
        "pools.prefill.instances=3".into(),
        "pools.decode.instances=1".into(),
    ]);
    let (_, d_tpot) = p90s(&run(PD, "ds-d-3", &d_sets));
    println!(
        "at 3 req/s: P90 TTFT colocated {c_ttft:.0} ms vs prefill-only {p_ttft:.0} ms; P90 TPOT \
         colocated {c_tpot:.1} ms vs decode-only {d_tpot:.1} ms"
    );
    assert!(
        c_ttft > p_ttft && c_tpot > d_tpot,
        "no prefill-decode interference: TTFT {c_ttft} vs {p_ttft}, TPOT {c_tpot} vs {d_tpot}"
    );
    // DistServe derives the 2P1D goodput as the slower side's: min(2 × prefill-only,
    // decode-only). pdsim's measured 2P1D must compose the same way (within 15 %: the KV
    // transfer over NVLink and the bisection's resolution are the slack).
    let sides = (2.0 * prefill_only).min(decode_only);
    assert!(
        (two_one / sides - 1.0).abs() < 0.15,
        "2P1D {two_one:.2} req/s is not the slower side's {sides:.2}"
    );
    // Issue 43's held-out check, under the conditions DistServe measured (the 2023 vLLM
    // engine's step times as DistServe's artifact fits them, no mixed chunk): 2P1D per GPU
    // over colocated at least 1.6× (published 2.1×).
    let gain = two_one / 3.0 / colocated;
    assert!(gain >= 1.6, "2P1D per GPU over colocated {gain:.2}×");
    // The colocated and decode-only GPUs within 20 % of the paper: both are decode-paced, and
    // the profile is the engine's. The prefill-only GPU reads +37 %: a queue of 98 ms
    // prefills is 55 % busy at the paper's 5.6 req/s, with a P90 TTFT well under 0.4 s, so the
    // figure's prefill runs paid costs the profile lacks (docs/performance-model.md §6). If
    // these move, re-measure and update the trust table.
    for (what, e, bound) in [
        ("colocated", e_colo, 0.2),
        ("decode-only", e_d, 0.2),
        ("prefill-only", e_p, 0.5),
    ] {
        assert!(
            e.abs() < bound,
            "{what}: {:+.0} % outside ±{:.0} %",
            e * 100.0,
            bound * 100.0
        );
    }
}

/// Splitwise (ISCA'24) Table IV: P50 request metrics of Llama-70B on one DGX-A100 and one
/// DGX-H100 without batching, coding and conversation traces.
#[test]
fn splitwise_table_iv_a100_vs_h100() {
    const SW: &str = "scenarios/published/splitwise-table4.toml";
    // (trace, [TTFT, TBT, E2E] on A100, the same on H100 (ms), the table's printed H100/A100
    // ratios). The printed coding TBT ratio, 0.70×, is not its cells' 31/52 = 0.60 (two
    // independent copies of the table agree on all three); the ratio column is what the paper
    // argues from (Insight VII), so the ratios are checked against it.
    let published = [
        (
            "code",
            [185.0, 52.0, 856.0],
            [95.0, 31.0, 493.0],
            [0.51, 0.70, 0.58],
        ),
        (
            "conv",
            [155.0, 40.0, 4957.0],
            [84.0, 28.0, 3387.0],
            [0.54, 0.70, 0.68],
        ),
    ];
    println!("Splitwise Table IV (Llama-70B TP8, vLLM, one request at a time), P50:");
    for (trace, a100, h100, ratio) in published {
        let lengths = format!(
            "workload.lengths={{ path = \"../../traces/AzureLLMInferenceTrace_{trace}.csv\" }}"
        );
        let p50s = |gpu: &str| {
            let s = run(
                SW,
                &format!("sw-{trace}-{gpu}"),
                &[lengths.clone(), format!("hardware.gpu={gpu}")],
            );
            let l = &s.latency_ms;
            [
                l.ttft.p50.unwrap(),
                // Splitwise's TBT: the time between two tokens of a request.
                l.itl.p50.unwrap(),
                l.e2e.p50.unwrap(),
            ]
        };
        let (a, h) = (p50s("a100-sxm"), p50s("h100-sxm"));
        let mut ratios = [0.0; 3];
        for (i, metric) in ["TTFT", "TBT", "E2E"].into_iter().enumerate() {
            row(&format!("{trace} {metric} A100, ms"), a100[i], a[i]);
            row(&format!("{trace} {metric} H100, ms"), h100[i], h[i]);
            let want = ratio[i];
            ratios[i] = h[i] / a[i];
            row(&format!("{trace} {metric} H100 / A100"), want, ratios[i]);
            // The trade-off is the ratio: the steps come from a fit to this campaign's own
            // profile (in-sample), the ratio of request metrics over the trace's length mix does
            // not. Held to 0.06 of the published two-digit ratio.
            assert!(
                (ratios[i] - want).abs() < 0.06,
                "{trace} {metric}: H100/A100 {:.2} vs {want:.2}",
                ratios[i]
            );
            // Absolutes are looser (TTFT reads up to +42 % on coding: the fit's all-reduce and
            // prefill cost at ~1,500 tokens); the trust table records each. Within 50 %.
            for (gpu, got, want) in [("A100", a[i], a100[i]), ("H100", h[i], h100[i])] {
                assert!(
                    (got / want - 1.0).abs() < 0.5,
                    "{trace} {metric} {gpu}: {got:.0} vs {want:.0} ms"
                );
            }
        }
        // Insight VII: token generation gains less from H100 than the prompt phase.
        assert!(
            ratios[0] < ratios[1],
            "{trace}: TTFT ratio {:.2} not below TBT ratio {:.2}",
            ratios[0],
            ratios[1]
        );
    }
}
