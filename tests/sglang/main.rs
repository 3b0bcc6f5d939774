//! The simulated servers behave as sglang's code does: memory and the prefix cache, HiCache and
//! the Mooncake Store, decode admission, router policies, DP dispatch, the PD teaching scenarios, speculative
//! decoding, aborts, page fragmentation, sessions, the GPU presets, the transfer backends and decode context
//! parallelism. One test binary; each
//! former test crate is a module of the same name (`cargo test --release --test sglang
//! kv_store`).

#[path = "../common/mod.rs"]
mod common;

mod aborts;
mod admission;
mod backends;
mod dcp;
mod decode_radix;
mod deployments;
mod dp_dispatch;
mod fp4_kv;
mod fragmentation;
mod gpu_presets;
mod guards;
mod kv_store;
mod memory;
mod pd_scenarios;
mod pipeline;
mod probe;
mod router_policies;
mod sessions;
mod speculative;
mod staging;
mod trace_deadlines;
