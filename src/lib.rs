//! # pdsim — a deterministic simulator of prefill/decode-disaggregated LLM serving
//!
//! pdsim simulates sglang-style PD clusters: prefill instances compute a prompt's KV cache and
//! push it over RDMA to decode instances, which generate the tokens.
//!
//! ## Units
//! Simulated time is `u64` **nanoseconds** ([`engine::Nanos`]); sizes are **bytes**; lengths are
//! **tokens**; rates say their unit in their name (`rate_per_s`, `bytes_per_ns`). Floats appear
//! only inside models (a step time, a bandwidth share) and are rounded **up** to a whole
//! nanosecond where an event is scheduled.
//!
//! ## Event-ordering contract
//! Events are totally ordered by `(time, sequence number)`, where the sequence number is the
//! order in which events were scheduled. Two events at the same nanosecond are handled in the
//! order they were created — never in an order a heap, a hash or a thread picks.
//!
//! ## Determinism contract
//! The same scenario and seed give byte-identical `summary.json`, `requests.csv` and
//! `timeseries.csv` on every run and every machine of the same architecture:
//! - every random source (arrivals, each length, the router, faults) draws from its own ChaCha8
//!   stream derived from the seed ([`engine::rng_stream`]), so adding a source or drawing more
//!   from one never shifts another;
//! - nothing host-dependent reaches results: no `HashMap` iteration order, no wall clock, no
//!   thread count; keyed collections that reach output are `BTreeMap`s or `Vec`s;
//! - the simulation reads no files and no clock: the application layer (`app`, under the CLI
//!   and the Python API) reads inputs, the report writes outputs.
//!
//! Only `run.json` records host facts (wall time, events per second, peak memory).
//!
//! ## Layers
//! Folders are floors and imports only run down (`docs/architecture.md` §1):
//! `{cli, api} → app → {plan, diagnose, scenario} → sim → assemble → sglang → {compute,
//! workload, metrics, config} → {layout, fabric} → {vocab, spec, engine}` (`assemble` builds the
//! cluster `sim` runs; `autoscale`, the policies that size the pools, sits below `sim` and
//! above `config`). `config` — the checked configuration — embeds
//! compiled layout plans and fabric parameters, so it sits above `layout` and `fabric`, not at
//! the bottom. `vocab` is the ground floor's shared words (ids, events, the request table,
//! `Outcome` / `ErrorKind`). `report` reads metrics and holds the results schema
//! (`report::schema`) through which `check`, `explain`, `plan` and `merge` read results back.
//!
//! ## Where behaviour lives
//! Every sglang rule is in its component under `sglang/` — its state private, handed a
//! `sglang::Ctx` (queue and clock, request table, wake set, effects buffer), returning a typed
//! outcome or pushing effects: crash and restart per role (`sglang/decode/faults.rs`,
//! `prefill.rs`, `transfer.rs`, `colocated.rs`), the decodes' heartbeat (`heartbeat.rs`), the
//! router's health check (`router.rs`), tokenizer limits (`tokenizer.rs`), first contact
//! (`decode/faults.rs`), the PD handshake and its clocks (`bootstrap.rs`, the timeouts'
//! `PollTimeout` in `transfer.rs`), the Mooncake Store's operations on the fabric
//! (`mooncake_store.rs`, with its own context and effects). `sim::World` routes events,
//! applies outcomes and effects and drains the wake set (`docs/architecture.md` §1, §7, §8). Bookkeeping that only watches — what aborts
//! cost, the sessions' turns, the per-second sampler — is an observer in `metrics/` that
//! `World` tells what happened (`metrics::aborts::Aborts`, `metrics::sessions::TurnStats`,
//! `metrics::sampler::Sampler`); `assemble/` builds the cluster `World` runs.

pub mod api;
pub mod app;
pub mod assemble;
pub mod autoscale;
pub mod cli;
pub mod compute;
pub mod config;
pub mod diagnose;
pub mod engine;
pub mod fabric;
pub mod layout;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod scenario;
pub mod sglang;
pub mod sim;
pub mod spec;
pub mod vocab;
pub mod workload;

/// The message every test that needs `../shared` stops with when it is missing.
pub fn shared_missing(path: &std::path::Path) -> String {
    format!(
        "this test needs pdsim's reference data, and {} is missing: place the `shared` folder \
         (traces, model configs, calibration measurements) beside the repository as `../shared`, \
         as CI does (README, \"Two commands\"). `pdsim` itself and the quickstart need nothing from it.",
        path.display()
    )
}

/// `../shared/REL` beside the repository, for the unit tests that read reference data; missing,
/// the test stops with [`shared_missing`]'s message.
#[cfg(test)]
pub(crate) fn shared_path(rel: &str) -> std::path::PathBuf {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(rel);
    assert!(p.exists(), "{}", shared_missing(&p));
    p
}
