//! The per-request serving costs of a calibration (`docs/performance-model.md` §1.1), each
//! checked where sglang pays it: the first-token path shifts what the client sees and nothing
//! the servers do; each server's tokenizer manager is one first-come-first-served process; the
//! decode side's bootstrap handshake comes before the request can reach the prefill's queue.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{num, read_csv, run, tmpdir};
use pdsim::spec::calibration::{CalibrationFile, ComputeParams, MeasuredOn, SGLANG_2025};

/// `sglang-2025` without any serving cost, then `tweak`ed; written to `dir/name.toml`.
fn calibration(dir: &Path, name: &str, tweak: impl Fn(&mut ComputeParams)) -> String {
    let mut params = ComputeParams {
        tokenize_per_request_s: 0.0,
        tokenize_per_token_s: 0.0,
        bootstrap_handshake_s: 0.0,
        first_token_path_s: 0.0,
        ..SGLANG_2025
    };
    tweak(&mut params);
    let file = CalibrationFile {
        measured: MeasuredOn {
            model: "llama-3.1-8b".into(),
            gpu: "h100-sxm".into(),
            tp: 1,
            files: vec![],
            points: 0,
            prefill_tokens: None,
            decode_batch: None,
        },
        params,
    };
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, file.to_toml()).unwrap();
    format!("hardware.calibration={}", path.display())
}

fn rows(dir: &Path) -> Vec<BTreeMap<String, String>> {
    read_csv(&dir.join("requests.csv"))
}

#[test]
fn the_first_token_path_shifts_what_the_client_sees_and_nothing_else() {
    let dir = tmpdir("serving-path");
    let none = calibration(&dir, "none", |_| {});
    let path = calibration(&dir, "path", |p| p.first_token_path_s = 0.25);
    let (a, b) = (dir.join("a"), dir.join("b"));
    let sa = run(
        "scenarios/quickstart.toml",
        &[&none, "run.duration_s=20"],
        &a,
    );
    let sb = run(
        "scenarios/quickstart.toml",
        &[&path, "run.duration_s=20"],
        &b,
    );
    assert_eq!(
        sa.sim.events, sb.sim.events,
        "the servers did the same work"
    );
    let (ra, rb) = (rows(&a), rows(&b));
    assert_eq!(ra.len(), rb.len());
    let mut completed = 0;
    for (x, y) in ra.iter().zip(&rb) {
        for col in ["prefill_start_ns", "prefill_end_ns", "decode_start_ns"] {
            assert_eq!(num(x, col), num(y, col), "{col} of request {}", x["id"]);
        }
        if x["outcome"] == "completed" {
            completed += 1;
            for col in ["first_token_ns", "finish_ns"] {
                assert_eq!(
                    num(y, col).unwrap() - num(x, col).unwrap(),
                    250_000_000,
                    "{col} of request {}",
                    x["id"]
                );
            }
        }
    }
    assert!(completed > 50, "{completed}");
    let ttft = |s: &pdsim::report::Summary| s.latency_ms.ttft.p50.unwrap();
    // The summary's median (a histogram quantile) moves by the same 250 ms.
    assert!((ttft(&sb) - ttft(&sa) - 250.0).abs() < 2.5);
}

#[test]
fn each_server_tokenizes_one_request_at_a_time_in_arrival_order() {
    let dir = tmpdir("serving-tokenizer");
    // 40 ms a request on four colocated servers at 30 req/s: each tokenizer is 30 % busy, so
    // some requests queue behind another's tokenization.
    let slow = calibration(&dir, "slow", |p| p.tokenize_per_request_s = 0.04);
    run(
        "scenarios/plan/colocated-8b.toml",
        &[&slow, "run.duration_s=20", "workload.arrival.rate_per_s=30"],
        &dir,
    );
    let mut by_server: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for r in rows(&dir) {
        if let Some(q) = num(&r, "prefill_queued_ns") {
            by_server
                .entry(r["prefill_instance"].clone())
                .or_default()
                .push((num(&r, "arrival_ns").unwrap(), q));
        }
    }
    let mut waited = 0;
    for (server, reqs) in &by_server {
        let mut free = 0;
        for &(arrival, ready) in reqs {
            // Starts when the process is free, takes 40 ms.
            assert_eq!(ready, arrival.max(free) + 40_000_000, "server {server}");
            waited += usize::from(free > arrival);
            free = ready;
        }
    }
    assert!(waited > 10, "{waited} requests queued for a tokenizer");
}

#[test]
fn the_bootstrap_handshake_comes_before_the_prefill_queue_in_pd() {
    let dir = tmpdir("serving-bootstrap");
    let none = calibration(&dir, "none", |_| {});
    let hs = calibration(&dir, "hs", |p| p.bootstrap_handshake_s = 0.2);
    let (a, b) = (dir.join("a"), dir.join("b"));
    run(
        "scenarios/quickstart.toml",
        &[&none, "run.duration_s=10"],
        &a,
    );
    run("scenarios/quickstart.toml", &[&hs, "run.duration_s=10"], &b);
    let wait = |d: &Path| -> Vec<u64> {
        rows(d)
            .iter()
            .filter_map(|r| Some(num(r, "prefill_queued_ns")? - num(r, "arrival_ns")?))
            .collect()
    };
    let (wa, wb) = (wait(&a), wait(&b));
    assert!(!wa.is_empty() && wa.len() == wb.len());
    // Without it the page ids reach the prefill after the control latency (µs); with it,
    // never before the handshake is done.
    assert!(wa.iter().all(|&w| w < 200_000_000), "{wa:?}");
    assert!(wb.iter().all(|&w| w >= 200_000_000), "{wb:?}");
}
