//! The engine against queueing theory: one prefill instance as an M/D/1 queue, and Little's law
//! on the decode side of the quickstart.

use crate::common;
use common::*;

/// One prefill instance whose every batch holds exactly one request (input = chunked prefill
/// size), ample decode, Poisson arrivals at utilisation `rho`: the mean wait before
/// `prefill_start_ns` must match Pollaczek–Khinchine, `Wq = ρ·S / (2(1 − ρ))`.
fn md1(rho: f64, requests: u64, name: &str) {
    // First, the deterministic service time S of one 8192-token forward on this instance.
    let probe = tmpdir(&format!("{name}-probe"));
    run("tests/scenarios/md1.toml", &["run.max_requests=3"], &probe);
    let rows = read_csv(&probe.join("requests.csv"));
    let s_ns =
        num(&rows[0], "prefill_end_ns").unwrap() - num(&rows[0], "prefill_start_ns").unwrap();
    let rate = rho / (s_ns as f64 / 1e9);

    let dir = tmpdir(name);
    let sets = [
        format!("workload.arrival={{ process = \"poisson\", rate_per_s = {rate} }}"),
        format!("run.max_requests={requests}"),
    ];
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let summary = run("tests/scenarios/md1.toml", &sets, &dir);
    assert_eq!(summary.requests.completed, requests);
    let rows = read_csv(&dir.join("requests.csv"));
    let mut waits = 0.0;
    for r in &rows {
        let service = num(r, "prefill_end_ns").unwrap() - num(r, "prefill_start_ns").unwrap();
        assert_eq!(
            service, s_ns,
            "service must be deterministic (one request per batch)"
        );
        waits +=
            (num(r, "prefill_start_ns").unwrap() - num(r, "prefill_queued_ns").unwrap()) as f64;
    }
    let measured = waits / rows.len() as f64;
    let theory = rho * s_ns as f64 / (2.0 * (1.0 - rho));
    let err = (measured / theory - 1.0).abs();
    println!(
        "M/D/1 rho={rho}: S={s_ns} ns, Wq measured {measured:.0} ns, theory {theory:.0} ns, error {:.2} %",
        100.0 * err
    );
    assert!(
        err < 0.03,
        "M/D/1 at rho {rho}: measured {measured:.0} ns vs {theory:.0} ns ({:.1} %)",
        100.0 * err
    );
}

#[test]
fn prefill_queue_matches_md1_at_half_load() {
    md1(0.5, 200_000, "md1-50");
}

#[test]
fn prefill_queue_matches_md1_at_80_percent_load() {
    md1(0.8, 400_000, "md1-80");
}

/// Little's law on the decode side: the mean number of requests in decode (sampled by the
/// simulator's own counters each second) equals throughput × mean time in decode.
#[test]
fn littles_law_holds_on_the_decode_side_of_the_quickstart() {
    let dir = tmpdir("little");
    run("scenarios/quickstart.toml", &["run.duration_s=600"], &dir);
    let rows = read_csv(&dir.join("requests.csv"));
    let ts = read_csv(&dir.join("timeseries.csv"));
    // Window: whole seconds in which arrivals were on.
    let window_s = 600u64;
    let mut samples = std::collections::BTreeMap::<u64, u64>::new();
    for t in ts.iter().filter(|t| t["role"] == "decode") {
        let sec = num(t, "second").unwrap();
        if (1..=window_s).contains(&sec) {
            *samples.entry(sec).or_default() +=
                num(t, "running").unwrap() + num(t, "queued").unwrap();
        }
    }
    let l_sampled = samples.values().sum::<u64>() as f64 / samples.len() as f64;
    // Time in decode: from joining decode's queue (first token) to the last token, clipped
    // to the window, so requests straddling its ends count for the part inside.
    let (lo, hi) = (1e9, window_s as f64 * 1e9);
    let mut area = 0.0;
    for r in &rows {
        let (a, b) = (
            num(r, "first_token_ns").unwrap() as f64,
            num(r, "finish_ns").unwrap() as f64,
        );
        area += (b.min(hi) - a.max(lo)).max(0.0);
    }
    let l_little = area / (hi - lo);
    let err = (l_sampled / l_little - 1.0).abs();
    println!(
        "Little: sampled L = {l_sampled:.3}, λW = {l_little:.3}, error {:.2} %",
        100.0 * err
    );
    assert!(err < 0.02, "sampled L {l_sampled} vs λW {l_little}");
}
