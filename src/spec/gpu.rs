//! GPU presets: the per-GPU figures the compute and memory models use.

use serde::Serialize;

/// One GPU's capabilities. Units are in the field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuSpec {
    /// Preset name.
    pub name: String,
    /// Dense BF16 peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 peak, TFLOP/s (`None` where the GPU has no FP8 tensor cores).
    pub fp8_tflops: Option<f64>,
    /// HBM capacity, bytes.
    pub hbm_bytes: u64,
    /// HBM bandwidth, bytes per second.
    pub hbm_bytes_per_s: f64,
    /// NVLink bandwidth, both directions together, bytes per second.
    pub nvlink_bytes_per_s: f64,
    /// Most one GPU's Mooncake transfer engine moves each way between GPU memory and its
    /// NICs, bytes per second (`hardware.rdma_engine_gbps`): the PCIe / GPUDirect path and the
    /// engine's threads. `None`: the fabric's calibrated default (`fabric::calibration`).
    pub rdma_engine_bytes_per_s: Option<f64>,
}

/// Names of the built-in GPU presets.
pub const GPU_PRESETS: &[&str] = &["a100-sxm", "h100-sxm", "h200", "b200"];

/// A built-in GPU by name, or `None`.
///
/// Source: `docs/numbers.md` (NVIDIA datasheets as reproduced by vendor spec pages, ±a few %).
/// Memory is the device memory the driver reports (`nvidia-smi`'s total: A100 80 GB 81,920 MiB,
/// H100 / H800 80 GB 81,559 MiB, H200 143,771 MiB, B200 183,359 MiB), which is what sglang's
/// `mem_fraction_static` multiplies: the datasheets' "80 GB" are binary gigabytes, and reading
/// them as 10⁹ bytes left every KV pool ~6 % short (issue 22). What the step-time model takes from them: BF16 and FP8 peaks (FP8
/// checkpoints run their GEMMs at the FP8 peak where there is one: not on the A100), HBM
/// bandwidth (decode is bound by it: an H200 decodes ~1.4× and a B200 ~2.4× faster than an
/// H100 at the same efficiency) and NVLink bandwidth (TP all-reduce).
pub fn gpu_preset(name: &str) -> Option<GpuSpec> {
    let g = |bf16: f64, fp8: Option<f64>, hbm_mib: u64, tb_s: f64, nvlink_gb_s: f64| GpuSpec {
        name: name.to_string(),
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        hbm_bytes: hbm_mib << 20,
        hbm_bytes_per_s: tb_s * 1e12,
        nvlink_bytes_per_s: nvlink_gb_s * 1e9,
        rdma_engine_bytes_per_s: None,
    };
    Some(match name {
        "a100-sxm" => g(312.0, None, 81_920, 2.039, 600.0),
        "h100-sxm" => g(989.0, Some(1979.0), 81_559, 3.35, 900.0),
        "h200" => g(989.0, Some(1979.0), 143_771, 4.8, 900.0),
        "b200" => g(2250.0, Some(4500.0), 183_359, 8.0, 1800.0),
        _ => return None,
    })
}
