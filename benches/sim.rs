//! Whole-simulation benchmark: the cases issue 9 sets targets for, each in its own process so
//! that its peak memory is its own.
//!
//! `cargo bench --bench sim` runs every case; `cargo bench --bench sim -- --case NAME` one.
//! Pin it to one core for figures that compare (`taskset -c 0 cargo bench --bench sim`).
//! Each case runs `scenarios/bench/foundation-100k.toml` (Llama-3.1-8B TP1 on H100, lognormal
//! lengths) with overrides, summary only (rows go nowhere, as in a sweep), and prints one line:
//! requests, events, wall seconds, requests per second, events per second and peak resident
//! memory (Linux VmHWM). Coalesced decode runs (`src/sim/mod.rs`) make events per second a
//! poor yardstick: a run of steps is one event, so compare wall seconds and requests per second.
//!
//! Cases:
//! - `100k`: 100,000 requests, 8P + 8D, 50 req/s (~80 % load);
//! - `1m`: the same with 1,000,000 requests (memory must not grow with run length);
//! - `1m-512p256d`: 1,000,000 requests, 512P + 256D, 1,600 req/s;
//! - `overload10x-*`, `overload100x-*`: 8P + 8D at 10× and 100× the ~62 req/s it sustains, for
//!   two run lengths each. Queued requests wait for sglang's 300 s timeouts (sglang ignores
//!   `--max-queued-requests` in PD mode, so nothing rejects them earlier): memory grows until
//!   rate × timeout requests are waiting, then stays flat however long the overload lasts.

use std::process::Command;
use std::time::Instant;

use pdsim::metrics::NullSink;
use pdsim::scenario;
use pdsim::sim::World;

/// (name, `--set` overrides).
const CASES: &[(&str, &[&str])] = &[
    ("100k", &[]),
    ("1m", &["run.max_requests=1000000"]),
    (
        "1m-512p256d",
        &[
            "run.max_requests=1000000",
            "pools.prefill.instances=512",
            "pools.decode.instances=256",
            "workload.arrival={ process = \"poisson\", rate_per_s = 1600.0 }",
        ],
    ),
    (
        "overload10x-300k",
        &[
            "run.max_requests=300000",
            "workload.arrival={ process = \"poisson\", rate_per_s = 620.0 }",
        ],
    ),
    (
        "overload10x-600k",
        &[
            "run.max_requests=600000",
            "workload.arrival={ process = \"poisson\", rate_per_s = 620.0 }",
        ],
    ),
    (
        "overload100x-2m",
        &[
            "run.max_requests=2000000",
            "workload.arrival={ process = \"poisson\", rate_per_s = 6200.0 }",
        ],
    ),
    (
        "overload100x-3m",
        &[
            "run.max_requests=3000000",
            "workload.arrival={ process = \"poisson\", rate_per_s = 6200.0 }",
        ],
    ),
];

/// Peak resident memory of this process (Linux `VmHWM`), MB.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn run_case(name: &str) {
    let (_, sets) = CASES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/bench/foundation-100k.toml");
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    let sc = scenario::load(&path, &sets).expect("the bench scenario loads");
    let mut sink = NullSink;
    let started = Instant::now();
    let mut world = World::new(&sc, &mut sink);
    let stats = world.run().expect("no I/O in a summary-only run").stats;
    let wall = started.elapsed().as_secs_f64();
    let c = &world.collector.counts;
    println!(
        "{name:<14} {:>9} req {:>11} events {:>7.3} s {:>9.0} req/s {:>6.2} M events/s {:>8.1} MB peak  (completed {}, failed {})",
        c.arrived,
        stats.events,
        wall,
        c.arrived as f64 / wall,
        stats.events as f64 / wall / 1e6,
        peak_rss_mb(),
        c.completed,
        c.failed,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--case") {
        run_case(args.get(i + 1).expect("--case NAME"));
        return;
    }
    // cargo bench passes `--bench`; every case runs in a fresh process of this binary.
    let me = std::env::current_exe().expect("the bench binary");
    for (name, _) in CASES {
        let status = Command::new(&me)
            .args(["--case", name])
            .status()
            .expect("the bench can start itself");
        assert!(status.success(), "case {name} failed");
    }
}
