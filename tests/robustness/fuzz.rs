//! The in-repo fuzzer's fixed budget (see `docs/fuzzing.md`): generated scenarios, `--set`
//! lists, model configs, traces and CLI lines, each checked for panics, hangs, aborts, exit
//! codes, keyless rejections, request conservation and byte-identical reruns.
//!
//! `PDSIM_FUZZ_CASES=N` runs N cases (default 5,000), `PDSIM_FUZZ_SEED=S` another seed,
//! `PDSIM_FUZZ_ONLY=I` only case I (prints its input). The test fails for failures that are
//! not in `fuzz_gen::KNOWN_BUGS`.

use crate::fuzz_gen;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const DEFAULT_CASES: u64 = 5_000;
const DEFAULT_SEED: u64 = 15;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
    })
}

/// Not a test of its own: the body of a worker process when `PDSIM_FUZZ_WORKER` is set.
#[test]
fn fuzz_worker() {
    if let Ok(spec) = std::env::var(fuzz_gen::WORKER_ENV) {
        fuzz_gen::worker_main(
            &spec,
            Path::new(env!("CARGO_MANIFEST_DIR")),
            Some(Path::new(env!("CARGO_BIN_EXE_pdsim"))),
        );
    }
}

/// The process-fault harness's fast slice: a few kill-and-resume cycles of sweeps, plans and
/// runs and one round of concurrent writers (`examples/fuzz --kill-cycles N` runs thousands).
#[test]
fn fuzz_process_faults_fast() {
    if std::env::var(fuzz_gen::WORKER_ENV).is_ok() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("pdsim-fuzz-proc-{}", std::process::id()));
    let cycles = env_u64("PDSIM_FUZZ_KILL_CYCLES").unwrap_or(5);
    let seed = env_u64("PDSIM_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let rep = fuzz_gen::process::campaign(
        Path::new(env!("CARGO_BIN_EXE_pdsim")),
        root,
        seed,
        cycles,
        None,
        &tmp,
    );
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(rep.failures.is_empty(), "{:#?}", rep.failures);
    assert_eq!(rep.cycles, cycles, "{rep:?}");
    assert_eq!(rep.concurrent, cycles.saturating_sub(1) / 4, "{rep:?}");
}

#[test]
fn fuzz_fixed_budget() {
    if std::env::var(fuzz_gen::WORKER_ENV).is_ok() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seed = env_u64("PDSIM_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_u64("PDSIM_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let only = env_u64("PDSIM_FUZZ_ONLY");
    let corpus = fuzz_gen::Corpus::load(root);
    let plan = fuzz_gen::Plan {
        seed,
        cases,
        deadline: None,
        workers: std::thread::available_parallelism().map_or(2, |n| n.get().min(2) as u64),
        // Generous: a valid scenario with per-token pages on a large GPU sets up millions of
        // oracle records in ~4 s on a 2-core machine; a hang is anything past this.
        case_timeout: Duration::from_secs(30),
        worker: Box::new(|| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.args([
                "fuzz::fuzz_worker",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ]);
            c
        }),
        only,
        progress: None,
    };
    let report = fuzz_gen::drive(&plan, &corpus, |_, _| {});
    let reproduce = |i: u64| {
        format!(
            "PDSIM_FUZZ_SEED={seed} PDSIM_FUZZ_ONLY={i} cargo test --release --test robustness fuzz:: -- --nocapture"
        )
    };
    if let Some(i) = only {
        eprintln!("{}", fuzz_gen::generate(&corpus, seed, i).show());
    }
    let unknown = fuzz_gen::print_report(&report, seed, &reproduce);
    for f in &unknown {
        eprintln!(
            "\n--- NEW failure, case {} ---\n{}\n{}: {}",
            f.index,
            fuzz_gen::generate(&corpus, seed, f.index).show(),
            f.kind,
            f.detail
        );
    }
    assert_eq!(
        report.cases,
        if only.is_some() { 1 } else { cases },
        "every case reported"
    );
    assert!(
        unknown.is_empty(),
        "{} fuzz failure(s) that are not known bugs (see above)",
        unknown.len()
    );
}
