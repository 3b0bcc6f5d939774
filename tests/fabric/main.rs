//! The fabric, proved against hand derivations, a slow reference solver, fault rules, the
//! transfer figures of `docs/numbers.md` and whole-simulator runs (moe_contention: DeepEP
//! all-to-all sharing the NICs with KV transfers). One test binary, one link of the library;
//! each former test crate is a module of the same name (`cargo test --release --test fabric
//! fabric_faults`).

#[path = "../common/mod.rs"]
mod common;

mod fabric_calibration;
mod fabric_faults;
mod fabric_hand;
mod fabric_props;
mod fabric_scenarios;
mod moe_contention;
