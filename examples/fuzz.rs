//! Runs the pdsim fuzzer for as long as asked (see `docs/fuzzing.md`):
//!
//! ```text
//! cargo build --release && cargo run --release --example fuzz -- --minutes 5 [--seed S] [--workers W]
//! cargo run --release --example fuzz -- --cases 1000000 --kill-cycles 1000   # a fixed campaign
//! cargo run --release --example fuzz -- --seed S --case I      # reproduce one case
//! cargo run --release --example fuzz -- --minutes 0 --kill-cycles 1000   # process faults only
//! ```
//!
//! Prints the count of cases by class (the verb or input kind) and outcome, progress every
//! minute, every failure with a reproduce line, and exits 1 if any failure is found (known
//! bugs included; they are marked).

#[path = "../tests/fuzz_gen/mod.rs"]
mod fuzz_gen;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().expect("current exe");
    // target/release/examples/fuzz → target/release/pdsim
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("pdsim"))
        .filter(|p| p.exists());
    if let Ok(spec) = std::env::var(fuzz_gen::WORKER_ENV) {
        fuzz_gen::worker_main(&spec, &root, bin.as_deref());
        return;
    }
    let mut minutes = 1.0f64;
    let mut seed: Option<u64> = None;
    let mut case: Option<u64> = None;
    let mut workers = std::thread::available_parallelism().map_or(2, |n| n.get() as u64);
    let mut kill_cycles = 0u64;
    let mut cases: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--minutes" => minutes = val().parse().unwrap_or_else(|_| usage("--minutes N")),
            "--seed" => seed = Some(val().parse().unwrap_or_else(|_| usage("--seed S"))),
            "--case" => case = Some(val().parse().unwrap_or_else(|_| usage("--case I"))),
            "--cases" => cases = Some(val().parse().unwrap_or_else(|_| usage("--cases N"))),
            "--workers" => workers = val().parse().unwrap_or_else(|_| usage("--workers W")),
            "--kill-cycles" => {
                kill_cycles = val().parse().unwrap_or_else(|_| usage("--kill-cycles N"))
            }
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    if bin.is_none() {
        eprintln!(
            "fuzz: no release pdsim binary next to the example; CLI cases are skipped (run `cargo build --release` first)"
        );
    }
    let corpus = fuzz_gen::Corpus::load(&root);
    let plan = fuzz_gen::Plan {
        seed,
        cases: cases.unwrap_or(0),
        deadline: if case.is_some() || cases.is_some() {
            None
        } else {
            Some(Instant::now() + Duration::from_secs_f64(minutes * 60.0))
        },
        workers: workers.max(1),
        case_timeout: Duration::from_secs(30),
        worker: Box::new(move || Command::new(&exe)),
        only: case,
        progress: Some(Duration::from_secs(60)),
    };
    if let Some(i) = case {
        eprintln!("{}", fuzz_gen::generate(&corpus, seed, i).show());
    }
    match cases {
        Some(n) => eprintln!("fuzz: seed {seed}, {workers} worker(s), {n} cases"),
        None => eprintln!("fuzz: seed {seed}, {workers} worker(s), {minutes} minute(s)"),
    }
    let reproduce =
        |i: u64| format!("cargo run --release --example fuzz -- --seed {seed} --case {i}");
    let report = fuzz_gen::drive(&plan, &corpus, |f, c| {
        let known = fuzz_gen::known_bug(f).map_or("NEW".to_string(), |i| format!("known: {i}"));
        eprintln!(
            "FAILURE case {} [{}] {} ({known}): {}\n  mutations: {:?}\n  reproduce: {}",
            c.index,
            c.class,
            f.kind,
            f.detail.lines().next().unwrap_or(""),
            c.mutations,
            reproduce(c.index)
        );
    });
    fuzz_gen::print_report(&report, seed, &reproduce);
    let rejected = report.by_status.get("rejected").copied().unwrap_or(0);
    let ran = report.by_status.get("ran").copied().unwrap_or(0);
    println!(
        "fuzz: {} cases in {:.1} s ({} also as a process): {rejected} rejected, {ran} ran, {} failures ({} distinct)",
        report.cases,
        report.elapsed.as_secs_f64(),
        report.spawned,
        report.failures.len(),
        report
            .failures
            .iter()
            .map(|f| f.group())
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    );
    let mut process_failures = 0;
    if kill_cycles > 0 {
        let Some(bin) = bin.as_deref() else {
            usage("--kill-cycles needs the release pdsim binary: cargo build --release");
        };
        let tmp = std::env::temp_dir().join(format!("pdsim-fuzz-proc-{}", std::process::id()));
        let t = Instant::now();
        let rep = fuzz_gen::process::campaign(bin, &root, seed, kill_cycles, None, &tmp);
        let _ = std::fs::remove_dir_all(&tmp);
        for f in &rep.failures {
            eprintln!("PROCESS FAILURE: {f}");
        }
        println!(
            "fuzz: process faults: {} kill-and-resume cycles ({} signals delivered), {} rounds of concurrent writers in {:.1} s: {} failures",
            rep.cycles,
            rep.kills,
            rep.concurrent,
            t.elapsed().as_secs_f64(),
            rep.failures.len()
        );
        process_failures = rep.failures.len();
    }
    if !report.failures.is_empty() || process_failures > 0 {
        std::process::exit(1);
    }
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "fuzz: {msg}\nusage: cargo run --release --example fuzz -- [--minutes N | --cases N] [--seed S] [--workers W] [--case I] [--kill-cycles N]"
    );
    std::process::exit(2);
}
