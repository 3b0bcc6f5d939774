//! The numbers agree with what they model: queueing theory, the serving costs where sglang pays
//! them, `pdsim calibrate` fits, the measured and published rows (colocated ShareGPT, DistServe,
//! Splitwise, LMSYS large EP, the GB200 NVL72, NVFP4, offload and multi-node MTP rows, the Kimi
//! K2 and DeepSeek-R1 H200 rows, Mooncake P:D), and `pdsim lint` against a full simulation. One
//! test binary; each former test crate is a module of the same name (`cargo test --release
//! --test fidelity moe_lmsys -- --nocapture` prints that module's rows).

#[path = "../common/mod.rs"]
mod common;

mod aic_side_by_side;
mod calibrate;
mod calibrate_sample;
mod colocated_rows;
mod deepep_tables;
mod h20_pd_ttft;
mod lint_vs_sim;
mod moe_fp4_b200;
mod moe_gb200;
mod moe_k2_r1;
mod moe_lmsys;
mod mooncake_pd;
mod published_tradeoffs;
mod queueing;
mod rate_profile;
mod serving_costs;
