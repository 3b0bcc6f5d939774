//! Validation of a parsed scenario file, one function per section. Each checks its keys and
//! returns the checked values; `validate` in the parent module puts them together. The
//! sections with most keys have a file each: the pools (`pool.rs`), the host and store tiers
//! of their KV (`hicache.rs`) and the workload (`workload.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::file::{self, ScenarioFile};
use super::{Checker, ScenarioError};
use crate::config::{
    CacheAwareParams, FabricConfig, Pool, Profile, Role, RouterParams, SglangParams, Slo, limits,
};
use crate::engine::{NS_PER_US, Nanos, ns_from_secs_ceil};
use crate::layout::PairPlan;
use crate::spec::{GpuSpec, gpu};

mod autoscaler;
mod dcp;
mod hicache;
mod offload;
mod pipeline;
mod pool;
mod workload;

pub(super) use autoscaler::{autoscaler, lifecycle};
pub(super) use hicache::{decode_radix_scenario, kv_store};
pub(super) use pool::{overlap_schedule, pools};
pub(super) use workload::workload;

/// `[run]`: the name, and the arrival and drain durations in seconds.
pub(super) fn run(c: &Checker, run: &file::RunSection) -> Result<(f64, f64), ScenarioError> {
    if run.name.is_empty()
        || !run
            .name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_.".contains(ch))
        || run.name.starts_with('.')
    {
        return Err(c.err(
            "run.name",
            format!(
                "{:?} is not a usable folder name; use letters, digits, '-', '_' and '.'",
                run.name
            ),
        ));
    }
    let max = crate::vocab::limits::MAX_RUN_NAME;
    if run.name.len() > max {
        return Err(c.err(
            "run.name",
            format!(
                "is {} characters long; at most {max} (it names the output folder, and a file name holds at most 255 bytes with pdsim's suffixes such as -sweep)",
                run.name.len()
            ),
        ));
    }
    let duration_s = c.duration("run.duration_s", run.duration_s, false)?;
    let drain_s = c.duration("run.drain_timeout_s", run.drain_timeout_s, true)?;
    if run.max_requests == Some(0) {
        return Err(c.err("run.max_requests", "must be ≥ 1 (or left out for no bound)"));
    }
    Ok((duration_s, drain_s))
}

/// `[hardware]`: the GPU preset with its overrides, and the step-time calibration (a name, or
/// a `pdsim calibrate` file read here) resolved for that GPU.
pub(super) fn hardware(
    c: &Checker,
    hw: &file::HardwareSection,
) -> Result<(GpuSpec, String, crate::spec::ComputeParams), ScenarioError> {
    let Some(name) = hw.gpu.as_deref() else {
        return Err(c.err(
            "hardware.gpu",
            format!(
                "missing: give a GPU preset ({}) or a rack-scale hardware.system ({})",
                gpu::GPU_PRESETS.join(", "),
                super::system::names().join(", ")
            ),
        ));
    };
    let mut gpu = gpu::gpu_preset(name).ok_or_else(|| {
        c.err(
            "hardware.gpu",
            format!(
                "unknown GPU preset {:?}; valid presets: {}{}",
                name,
                gpu::GPU_PRESETS.join(", "),
                super::suggestion(name, gpu::GPU_PRESETS)
            ),
        )
    })?;
    if let Some(t) = hw.bf16_tflops {
        gpu.bf16_tflops = c.bounded("hardware.bf16_tflops", t, "TFLOP/s", limits::MAX_TFLOPS)?;
    }
    if let Some(g) = hw.hbm_gb {
        let g = c.positive("hardware.hbm_gb", g, "GB")?;
        if g > limits::MAX_HBM_GB {
            return Err(c.err(
                "hardware.hbm_gb",
                format!(
                    "{g} GB per GPU is above the bound of {} GB (today's GPUs carry 80–288 GB; the KV page records grow with it)",
                    limits::MAX_HBM_GB
                ),
            ));
        }
        gpu.hbm_bytes = (g * 1e9) as u64;
    }
    if let Some(b) = hw.hbm_tb_s {
        gpu.hbm_bytes_per_s =
            c.bounded("hardware.hbm_tb_s", b, "TB/s", limits::MAX_HBM_TB_S)? * 1e12;
    }
    if let Some(t) = hw.fp8_tflops {
        gpu.fp8_tflops =
            Some(c.bounded("hardware.fp8_tflops", t, "TFLOP/s", limits::MAX_TFLOPS)?);
    }
    if let Some(t) = hw.fp4_tflops {
        gpu.fp4_tflops =
            Some(c.bounded("hardware.fp4_tflops", t, "TFLOP/s", limits::MAX_TFLOPS)?);
    }
    if let Some(b) = hw.host_link_gb_s {
        gpu.host_link_bytes_per_s = c.bounded(
            "hardware.host_link_gb_s",
            b,
            "GB/s each way",
            limits::MAX_LINK_RATE,
        )? * 1e9;
    }
    if let Some(b) = hw.nvlink_gb_s {
        gpu.nvlink_bytes_per_s =
            c.bounded("hardware.nvlink_gb_s", b, "GB/s", limits::MAX_LINK_RATE)? * 1e9;
    }
    if hw.nic_host_gbps.is_some() {
        return Err(c.err(
            "hardware.nic_host_gbps",
            "was removed: it capped every NIC, which is wrong when GPUs share NICs and for \
             DeepEP's all-to-all. Remove it; the limit now sits on each GPU's transfer engine \
             (hardware.rdma_engine_gbps, Gb/s per GPU, default 190) and the defaults hold on \
             shared-NIC hosts; on AWS EFA set fabric.transport = \"efa\"",
        ));
    }
    if let Some(g) = hw.rdma_engine_gbps {
        gpu.rdma_engine_bytes_per_s = Some(
            c.bounded(
                "hardware.rdma_engine_gbps",
                g,
                "Gb/s per GPU",
                limits::MAX_LINK_RATE,
            )? / 8.0
                * 1e9,
        );
    }
    let (calibration, compute) = calibration(c, hw, &gpu)?;
    if hw.gpus_per_node == 0 || hw.gpus_per_node > limits::MAX_GPUS_PER_NODE {
        return Err(c.err(
            "hardware.gpus_per_node",
            format!(
                "must be in 1..={} (the largest NVLink domains have 72–576 GPUs), e.g. 8; got {}",
                limits::MAX_GPUS_PER_NODE,
                hw.gpus_per_node
            ),
        ));
    }
    Ok((gpu, calibration, compute))
}

/// `hardware.nvlink_domain_gpus`: GPUs of one NVLink domain, a whole number of nodes
/// (`gpus_per_node`, the default, is one node per domain: a DGX/HGX server); at most
/// `limits::MAX_GPUS_PER_NODE`, the bound a node already has.
pub(super) fn nvlink_domain(c: &Checker, hw: &file::HardwareSection) -> Result<u32, ScenarioError> {
    let g = hw.gpus_per_node;
    let Some(d) = hw.nvlink_domain_gpus else {
        return Ok(g);
    };
    if d == 0 || d > limits::MAX_GPUS_PER_NODE || !d.is_multiple_of(g.max(1)) {
        return Err(c.err(
            "hardware.nvlink_domain_gpus",
            format!(
                "must be a whole number of nodes (a multiple of hardware.gpus_per_node = {g}) up to {} GPUs, e.g. 72 for an NVL72 rack of 4-GPU trays; got {d}",
                limits::MAX_GPUS_PER_NODE
            ),
        ));
    }
    Ok(d)
}

/// `hardware.calibration`: a built-in name, or a path (relative to the scenario) to a file
/// written by `pdsim calibrate`.
fn calibration(
    c: &Checker,
    hw: &file::HardwareSection,
    gpu: &GpuSpec,
) -> Result<(String, crate::spec::ComputeParams), ScenarioError> {
    use crate::spec::calibration as cal;
    let key = "hardware.calibration";
    let name = hw
        .calibration
        .clone()
        .unwrap_or_else(|| cal::DEFAULT_CALIBRATION.to_string());
    if let Some(p) = cal::named(&name, gpu) {
        return Ok((name, p));
    }
    let looks_like_file = name.contains('/') || name.contains('.') || name.ends_with(".toml");
    if !looks_like_file {
        return Err(c.err(
            key,
            format!(
                "unknown calibration {name:?}; valid: {} or the path of a file written by `pdsim calibrate`{}",
                cal::CALIBRATIONS.join(", "),
                super::suggestion(&name, cal::CALIBRATIONS)
            ),
        ));
    }
    let path = c.resolve_path(&name);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        c.err(
            key,
            format!(
                "cannot read calibration file {}: {e}; give {} or a file written by `pdsim calibrate`",
                path.display(),
                cal::CALIBRATIONS.join(", ")
            ),
        )
    })?;
    if text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| l.starts_with(crate::spec::kernels::tables::MAGIC))
    {
        return kernel_file(c, &name, &path, &text, gpu);
    }
    let file = cal::CalibrationFile::parse(&text)
        .map_err(|e| c.err(key, format!("{}: {e}", path.display())))?;
    *c.measured.borrow_mut() = Some(file.measured.clone());
    Ok((name, file.params))
}

/// A kernel-table file (`pdsim calibrate --from-aiconfigurator`): `sglang-2026` with these
/// tables instead of the shipped ones. The tables must be of the scenario's GPU.
fn kernel_file(
    c: &Checker,
    name: &str,
    path: &std::path::Path,
    text: &str,
    gpu: &GpuSpec,
) -> Result<(String, crate::spec::ComputeParams), ScenarioError> {
    use crate::spec::kernels::{KernelTables, Kernels};
    let key = "hardware.calibration";
    let tables =
        KernelTables::parse(&path.display().to_string(), text).map_err(|e| c.err(key, e))?;
    if tables.meta.gpu != gpu.name {
        return Err(c.err(
            key,
            format!(
                "{}: kernel tables measured on {}, and hardware.gpu is {}: give the tables of {} (pdsim calibrate --from-aiconfigurator DIR --gpu {} …) or set hardware.gpu = {:?}",
                path.display(),
                tables.meta.gpu,
                gpu.name,
                gpu.name,
                gpu.name,
                tables.meta.gpu
            ),
        ));
    }
    for table in ["gemm", "context_attention", "generation_attention"] {
        if tables.find(table, &[]).is_none() {
            return Err(c.err(
                key,
                format!(
                    "{}: no `{table}` table; every forward needs one (re-derive the file with pdsim calibrate --from-aiconfigurator)",
                    path.display()
                ),
            ));
        }
    }
    let params = crate::spec::ComputeParams {
        kernels: Some(Kernels(std::sync::Arc::new(tables))),
        ..crate::spec::calibration::sglang_2026(gpu)
    };
    Ok((name.to_string(), params))
}

/// `[fabric]`, over the `nodes` the placement uses, with the GPU's NVLink and RDMA engine
/// rates (`[hardware]`) and Mooncake's calibrated transfer model (`fabric/calibration.rs`).
pub(super) fn fabric(
    c: &Checker,
    f: &file::FabricSection,
    gpu: &crate::spec::GpuSpec,
    (gpus_per_node, domain_gpus): (u32, u32),
    nodes: u32,
) -> Result<FabricConfig, ScenarioError> {
    let nic_gbps = c.positive("fabric.nic_gbps", f.nic_gbps, "Gb/s per NIC")?;
    let nics_per_node = f.nics_per_node.unwrap_or(gpus_per_node);
    let max_nics = gpus_per_node.saturating_mul(limits::MAX_NICS_PER_GPU);
    if nics_per_node == 0 || nics_per_node > max_nics {
        return Err(c.err(
            "fabric.nics_per_node",
            format!(
                "must be in 1..={max_nics} ({} per GPU × hardware.gpus_per_node = {gpus_per_node}; default: one per GPU), got {nics_per_node}",
                limits::MAX_NICS_PER_GPU
            ),
        ));
    }
    let base_latency_us = c.non_negative("fabric.base_latency_us", f.base_latency_us, "µs")?;
    c.within_clock("fabric.base_latency_us", base_latency_us, 1e-6, "µs")?;
    let control_latency_us =
        c.non_negative("fabric.control_latency_us", f.control_latency_us, "µs")?;
    c.within_clock("fabric.control_latency_us", control_latency_us, 1e-6, "µs")?;
    let kind = f.topology;
    if f.nodes_per_leaf == 0 {
        return Err(c.err("fabric.nodes_per_leaf", "must be ≥ 1, e.g. 8"));
    }
    if !(f.oversubscription.is_finite() && f.oversubscription >= 1.0) {
        return Err(c.err(
            "fabric.oversubscription",
            format!(
                "must be ≥ 1 (1 is non-blocking, 4 gives each uplink a quarter), got {}",
                f.oversubscription
            ),
        ));
    }
    let topology = crate::fabric::TopologyConfig {
        nodes,
        gpus_per_node,
        nics_per_node,
        nic_bytes_per_ns: nic_gbps / 8.0,
        kind,
        nodes_per_leaf: f.nodes_per_leaf,
        oversubscription: f.oversubscription,
        // GB/s is bytes per ns.
        nvlink_bytes_per_ns: gpu.nvlink_bytes_per_s / 1e9,
        // KV between the nodes of one NVLink domain takes NVLink through Mooncake's
        // multi-node NVLink transport unless `fabric.mnnvl = false`.
        nodes_per_nvlink_domain: if f.mnnvl.unwrap_or(true) {
            domain_gpus / gpus_per_node.max(1)
        } else {
            1
        },
    };
    let defaults = crate::fabric::FabricParams::default();
    let model = crate::fabric::FabricParams {
        base_latency_ns: (base_latency_us * NS_PER_US as f64).ceil() as Nanos,
        // The GPU's own engine rate when `[hardware]` gives one, else the transport's.
        engine_bytes_per_ns: gpu
            .rdma_engine_bytes_per_s
            .map_or_else(|| f.transport.engine_bytes_per_ns(&defaults), |b| b / 1e9),
        ..defaults
    };
    Ok(FabricConfig {
        topology,
        model,
        control_latency_ns: (control_latency_us * NS_PER_US as f64).ceil() as Nanos,
        a2a_flows: f.a2a_flows,
        transport: f.transport,
    })
}

/// `[sglang]` and `[slo]`.
pub(super) fn sglang_and_slo(
    c: &Checker,
    file: &ScenarioFile,
) -> Result<(SglangParams, Slo), ScenarioError> {
    let sg = &file.sglang;
    let profile: Profile = sg.profile;
    let version = match sg.version.as_deref() {
        None => crate::spec::SglangVersion::default(),
        Some(v) => v.parse().map_err(|e: String| {
            c.err(
                "sglang.version",
                format!(
                    "{e} (the seed's commit is \"seed\", the default){}",
                    crate::vocab::suggest::suggestion(v, &crate::spec::SglangVersion::names())
                ),
            )
        })?,
    };
    // A flag the chosen release does not have is an error naming where it exists.
    if sg.kv_checksum && !version.has_kv_checksum() {
        return Err(c.err(
            "sglang.kv_checksum",
            format!(
                "--disaggregation-enable-kv-checksum does not exist in sglang version {:?} (it came with PR #39500, 2026-09-15); versions that have it: {}. Set sglang.version to one of them, or leave kv_checksum out",
                version.as_str(),
                crate::spec::SglangVersion::names_where(crate::spec::SglangVersion::has_kv_checksum)
            ),
        ));
    }
    let transfer_backend = match sg.transfer_backend.as_deref() {
        None => crate::spec::TransferBackend::default(),
        Some(b) => b.parse().map_err(|e: String| {
            c.err(
                "sglang.transfer_backend",
                format!(
                    "{e}{}",
                    crate::vocab::suggest::suggestion(b, &crate::spec::TransferBackend::names())
                ),
            )
        })?,
    };
    if let Some(why) = transfer_backend.not_modelled() {
        return Err(c.err(
            "sglang.transfer_backend",
            format!(
                "{:?} is not modelled: {why}. pdsim runs \"mooncake\" (the default), \"mooncake_tcp\", \"nixl\" and \"mori\" (docs/sglang-pd.md §26.3)",
                transfer_backend.as_str()
            ),
        ));
    }
    let tcp_bytes_per_ns = match (transfer_backend, sg.tcp_gbps) {
        (crate::spec::TransferBackend::MooncakeTcp, Some(g)) if g.is_finite() && g > 0.0 => {
            Some(g / 8.0)
        }
        (crate::spec::TransferBackend::MooncakeTcp, g) => {
            return Err(c.err(
                "sglang.tcp_gbps",
                format!(
                    "transfer_backend = \"mooncake_tcp\" moves KV over Mooncake's TCP transport (MC_FORCE_TCP=1); say what one GPU's TCP transport moves each way, a positive number of Gb/s (pdsim has no measured figure to default to); got {}",
                    g.map_or("nothing".to_string(), |g| g.to_string())
                ),
            ));
        }
        (_, Some(_)) => {
            return Err(c.err(
                "sglang.tcp_gbps",
                "is read only with transfer_backend = \"mooncake_tcp\": leave it out, or set that backend".to_string(),
            ));
        }
        (_, None) => None,
    };
    let staging_pool_mb = match (sg.staging_buffer, sg.staging_pool_mb) {
        (false, Some(_)) => {
            return Err(c.err(
                "sglang.staging_pool_mb",
                "SGLANG_DISAGG_STAGING_POOL_SIZE_MB is read only with SGLANG_DISAGG_STAGING_BUFFER: set sglang.staging_buffer = true, or leave staging_pool_mb out".to_string(),
            ));
        }
        (false, None) => None,
        (true, Some(0)) => {
            return Err(c.err(
                "sglang.staging_pool_mb",
                "must be a positive number of MiB per decode rank (sglang's default is 4096); got 0".to_string(),
            ));
        }
        (true, mb) => Some(mb.unwrap_or(crate::sglang::staging::DEFAULT_POOL_MB)),
    };
    if staging_pool_mb.is_some() && !transfer_backend.allows_staging() {
        return Err(c.err(
            "sglang.staging_buffer",
            format!(
                "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or 'nixl', got '{}'.",
                transfer_backend.as_str()
            ),
        ));
    }
    let failed_session_probe_ns = match (
        sg.failed_session_probe,
        sg.failed_session_probe_interval_s,
    ) {
        (false, Some(_)) => {
            return Err(c.err(
                "sglang.failed_session_probe_interval_s",
                "SGLANG_FAILED_SESSION_PROBE_INTERVAL_S is read only with SGLANG_ENABLE_FAILED_SESSION_PROBE: set sglang.failed_session_probe = true, or leave the interval out".to_string(),
            ));
        }
        (false, None) => None,
        (true, s) => {
            let every = s.unwrap_or(crate::sglang::staging::DEFAULT_PROBE_INTERVAL_S);
            if !(every.is_finite() && every > 0.0) {
                return Err(c.err(
                    "sglang.failed_session_probe_interval_s",
                    format!("must be a positive number of seconds between probe passes (sglang's default is 30); got {every}"),
                ));
            }
            let every = c.duration("sglang.failed_session_probe_interval_s", every, false)?;
            Some(ns_from_secs_ceil(every))
        }
    };
    // The probe is Mooncake's (`MooncakeKVManager._failed_session_probe_loop`): NIXL and MORI
    // keep no session blacklist to probe.
    if failed_session_probe_ns.is_some() && !transfer_backend.mooncake_manager() {
        return Err(c.err(
            "sglang.failed_session_probe",
            format!(
                "SGLANG_ENABLE_FAILED_SESSION_PROBE probes Mooncake's blacklisted sessions (MooncakeKVManager._failed_session_probe_loop); transfer_backend = {:?} keeps no blacklist to probe: leave failed_session_probe out, or use \"mooncake\"",
                transfer_backend.as_str()
            ),
        ));
    }
    if profile == Profile::SeedCommit && !version.allows_seed_commit_profile() {
        return Err(c.err(
            "sglang.profile",
            format!(
                "\"seed_commit\" is the seeds' start-up refusal of unified memory with PD for MHA-attention hybrids, which PR #37506 lifted on 2026-09-02, before sglang version {:?}; use it with sglang.version = \"seed\", or pick guarded, slice_dispatch or unguarded",
                version.as_str()
            ),
        ));
    }
    let waiting = c.duration("sglang.waiting_timeout_s", sg.waiting_timeout_s, false)?;
    let bootstrap = c.duration("sglang.bootstrap_timeout_s", sg.bootstrap_timeout_s, false)?;
    if sg.queue_size == 0 || sg.queue_size > limits::MAX_QUEUE_SIZE {
        return Err(c.err(
            "sglang.queue_size",
            format!(
                "must be in 1..={} transfer-queue shards per prefill instance (sglang's default is 4), got {}",
                limits::MAX_QUEUE_SIZE,
                sg.queue_size
            ),
        ));
    }
    let mut slo = Slo::default();
    let s = &file.slo;
    // A latency target: a positive number of ms no longer than the clock's bound; the error
    // says what the key bounds (`metrics::slo::SLO_KEYS`).
    let ms = |name: &str, t: f64| -> Result<f64, ScenarioError> {
        let key = format!("slo.{name}");
        if !(t.is_finite() && t > 0.0) {
            let what = crate::metrics::slo::SLO_KEYS
                .iter()
                .find(|k| k.key == name)
                .map_or(String::new(), |k| format!(" ({})", k.meaning));
            return Err(c.err(
                &key,
                format!("must be a positive number of milliseconds{what}; got {t}"),
            ));
        }
        c.within_clock(&key, t, 1e-3, "ms")
    };
    // A per-request threshold in ms, as whole ns (rounded up: a bound never tightens).
    let threshold = |name: &str, v: Option<f64>| -> Result<Option<u64>, ScenarioError> {
        v.map(|t| Ok(ns_from_secs_ceil(ms(name, t)? / 1e3)))
            .transpose()
    };
    slo.ttft_ns = threshold("ttft_ms", s.ttft_ms)?;
    slo.tpot_ns = threshold("tpot_ms", s.tpot_ms)?;
    slo.tbt_ns = threshold("tbt_ms", s.tbt_ms)?;
    slo.e2e_per_token_ns = threshold("e2e_per_token_ms", s.e2e_per_token_ms)?;
    let pct = |name: &str, v: Option<f64>| -> Result<Option<f64>, ScenarioError> {
        v.map(|t| ms(name, t)).transpose()
    };
    slo.ttft_pct_ms = [
        pct("ttft_p50_ms", s.ttft_p50_ms)?,
        pct("ttft_p90_ms", s.ttft_p90_ms)?,
        pct("ttft_p99_ms", s.ttft_p99_ms)?,
    ];
    slo.tpot_pct_ms = [
        pct("tpot_p50_ms", s.tpot_p50_ms)?,
        pct("tpot_p90_ms", s.tpot_p90_ms)?,
        pct("tpot_p99_ms", s.tpot_p99_ms)?,
    ];
    slo.itl_pct_ms = [
        pct("itl_p50_ms", s.itl_p50_ms)?,
        pct("itl_p90_ms", s.itl_p90_ms)?,
        pct("itl_p99_ms", s.itl_p99_ms)?,
    ];
    slo.tbt_pct_ms = [
        pct("tbt_p50_ms", s.tbt_p50_ms)?,
        pct("tbt_p90_ms", s.tbt_p90_ms)?,
        pct("tbt_p99_ms", s.tbt_p99_ms)?,
    ];
    if let Some(a) = s.attainment_min {
        if !(a > 0.0 && a <= 1.0) {
            return Err(c.err(
                "slo.attainment_min",
                format!("must be a share of arrived requests in (0, 1], e.g. 0.9; got {a}"),
            ));
        }
        slo.attainment_min = Some(a);
    }
    let sglang = SglangParams {
        profile,
        version,
        kv_checksum: sg.kv_checksum,
        staging_pool_mb,
        transfer_backend,
        tcp_bytes_per_ns,
        failed_session_probe_ns,
        waiting_timeout_ns: ns_from_secs_ceil(waiting),
        bootstrap_timeout_ns: ns_from_secs_ceil(bootstrap),
        queue_size: sg.queue_size,
    };
    Ok((sglang, slo))
}

/// One transfer plan per (prefill pool, decode pool): compiled once, used by every request,
/// with the guards of the sglang version (registration validation) and the KV checksum when
/// on (every GPU of the cluster is `hardware.gpu`, HBM `hbm_bytes_per_s` bytes/s).
pub(super) fn plans(
    c: &Checker,
    pools: &[Pool],
    sglang: &SglangParams,
    hbm_bytes_per_s: f64,
) -> Result<BTreeMap<(usize, usize), Arc<PairPlan>>, ScenarioError> {
    let profile = sglang.profile;
    let mut plans = std::collections::BTreeMap::new();
    // A PP prefill's stages register part of the layers each: what the KV checksum digests
    // and what registration-time validation compares per stage were not read (PR #39500 and
    // PR #37840 show pp_size 1 only).
    if let Some(p) = pools.iter().find(|p| p.server.pp_size > 1) {
        let guard = if sglang.kv_checksum {
            Some("sglang.kv_checksum (--disaggregation-enable-kv-checksum)")
        } else if sglang.version.validates_registration() {
            Some("registration-time layout validation (sglang.version with PR #37840)")
        } else {
            None
        };
        if let Some(guard) = guard {
            return Err(c.err(
                &format!("pools.{}.server.pp_size", p.name),
                format!(
                    "pipeline-parallel prefill is not modelled with {guard}: how each stage's partial layer list is digested or validated was not read; leave pp_size out (1) or the guard off"
                ),
            ));
        }
    }
    // Decode context parallelism: sglang's backend refusal (`handle_pd_disaggregation`, which
    // rewrites `mooncake_tcp` to `mooncake` first), and the guards whose digests or
    // validation of a token-sharded pool pdsim did not read.
    if let Some(p) = pools.iter().find(|p| p.server.dcp_size > 1) {
        use crate::spec::TransferBackend as B;
        let key = format!("pools.{}.server.dcp_size", p.name);
        let backend = sglang.transfer_backend;
        if !matches!(backend, B::Mooncake | B::MooncakeTcp | B::Nixl) {
            return Err(c.err(
                &key,
                format!(
                    "{} (sglang handle_pd_disaggregation; set sglang.transfer_backend = \"mooncake\" or \"nixl\", or dcp_size = 1)",
                    crate::sglang::dcp::backend_refusal(backend.as_str())
                ),
            ));
        }
        if sglang.kv_checksum {
            return Err(c.err(
                &key,
                "decode context parallelism is not modelled with sglang.kv_checksum (--disaggregation-enable-kv-checksum): what each DCP rank digests of its token shard against the prefill's whole pages was not read; leave dcp_size out (1) or the checksum off",
            ));
        }
    }
    for (pi, pp) in pools
        .iter()
        .enumerate()
        .filter(|(_, p)| p.role == Role::Prefill)
    {
        for (di, dp) in pools
            .iter()
            .enumerate()
            .filter(|(_, p)| p.role == Role::Decode)
        {
            let mut plan = crate::layout::PairPlan::compile(
                (&pp.model, &pp.server),
                (&dp.model, &dp.server),
                profile,
            )
            .map_err(|e| {
                c.err(
                    &format!("pools.{}.server", dp.name),
                    format!("prefill pool {:?} cannot pair with it: {e}", pp.name),
                )
            })?;
            if sglang.version.validates_registration() {
                plan.validate_registration();
            }
            if sglang.kv_checksum {
                plan.enable_kv_checksum(hbm_bytes_per_s, hbm_bytes_per_s);
            }
            if let Some(mb) = sglang.staging_pool_mb {
                plan.enable_staging(mb << 20, hbm_bytes_per_s, hbm_bytes_per_s);
            }
            if dp.server.dcp_size > 1 {
                // The prefill's pack buffer holds `max_prefill_tokens` tokens
                // (`init_dcp_pack_buffers`: `max_prefill_buffer_tokens()`, else the
                // schedule's `max_prefill_tokens`).
                plan.enable_dcp_pack(pp.server.max_prefill_tokens, hbm_bytes_per_s);
            }
            plans.insert((pi, di), std::sync::Arc::new(plan));
        }
    }
    Ok(plans)
}

/// `[expect]`: what serde cannot check (finite, non-negative, min ≤ max, attainment ≤ 1).
pub(super) fn expect(c: &Checker, e: Option<&super::expect::Expect>) -> Result<(), ScenarioError> {
    match e.map(super::expect::Expect::check) {
        Some(Err((key, message))) => Err(c.err(&key, message)),
        _ => Ok(()),
    }
}

/// `[router]`: a policy per side and `cache_aware`'s parameters. `prefill_policy` and
/// `decode_policy` are the PD router's flags: a plain (colocated) cluster has neither side.
pub(super) fn router(
    c: &Checker,
    r: &file::RouterSection,
    colocated: bool,
) -> Result<RouterParams, ScenarioError> {
    if colocated {
        for (key, v) in [
            ("router.prefill_policy", r.prefill_policy),
            ("router.decode_policy", r.decode_policy),
        ] {
            if v.is_some() {
                return Err(c.err(
                    key,
                    "is a PD router flag (--prefill-policy / --decode-policy), and this cluster has colocated servers; set router.policy instead",
                ));
            }
        }
    }
    if !(0.0..=1.0).contains(&r.cache_threshold) {
        return Err(c.err(
            "router.cache_threshold",
            format!(
                "must be a prefix match rate in [0, 1] (sgl-model-gateway's default: 0.3), got {}",
                r.cache_threshold
            ),
        ));
    }
    if !(r.balance_rel_threshold.is_finite() && r.balance_rel_threshold >= 1.0) {
        return Err(c.err(
            "router.balance_rel_threshold",
            format!(
                "must be a load ratio ≥ 1 (sgl-model-gateway's default: 1.5), got {}",
                r.balance_rel_threshold
            ),
        ));
    }
    if r.balance_abs_threshold > u64::from(u32::MAX) {
        return Err(c.err(
            "router.balance_abs_threshold",
            format!(
                "must be a number of requests ≤ {} (sgl-model-gateway's default: 64), got {}",
                u32::MAX,
                r.balance_abs_threshold
            ),
        ));
    }
    if r.eviction_interval_secs as f64 > limits::MAX_DURATION_S {
        return Err(c.err(
            "router.eviction_interval_secs",
            format!(
                "must be at most {} s (0 turns eviction off; sgl-model-gateway's default: 60), got {}",
                limits::MAX_DURATION_S,
                r.eviction_interval_secs
            ),
        ));
    }
    if r.max_tree_size == 0 {
        return Err(c.err(
            "router.max_tree_size",
            "must be ≥ 1 character (sgl-model-gateway's default: 67108864 = 2^26)",
        ));
    }
    Ok(RouterParams {
        prefill: r.prefill_policy.unwrap_or(r.policy),
        decode: r.decode_policy.unwrap_or(r.policy),
        cache_aware: CacheAwareParams {
            cache_threshold: r.cache_threshold as f32,
            balance_abs_threshold: r.balance_abs_threshold,
            balance_rel_threshold: r.balance_rel_threshold as f32,
            eviction_interval_ns: r.eviction_interval_secs * crate::engine::NS_PER_S,
            max_tree_size: r.max_tree_size,
        },
    })
}
