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
    /// NVLink bandwidth, both directions together, bytes per second: the datasheets' figure
    /// (H100 "900 GB/s", H800 "400 GB/s"); the step model and the fabric take half of it each
    /// way. On the MI300X it is AMD Infinity Fabric (xGMI), which sglang's all-reduce uses where
    /// NVIDIA GPUs use NVLink.
    pub nvlink_bytes_per_s: f64,
    /// Most one GPU's Mooncake transfer engine moves each way between GPU memory and its
    /// NICs, bytes per second (`hardware.rdma_engine_gbps`): the PCIe / GPUDirect path and the
    /// engine's threads. `None`: the fabric's calibrated default (`fabric::calibration`).
    pub rdma_engine_bytes_per_s: Option<f64>,
}

/// Names of the built-in GPU presets.
pub const GPU_PRESETS: &[&str] = &[
    "a100-sxm", "h100-sxm", "h800", "h20", "h20-3e", "h200", "b200", "gb200", "mi300x",
];

/// A built-in GPU by name, or `None`.
///
/// Source: `docs/numbers.md` §1, which cites each figure (NVIDIA and AMD datasheets, ±a few %).
/// TFLOPS are dense (no 2:4 sparsity). Memory is the device memory the driver reports
/// (`nvidia-smi`'s total: A100 80 GB 81,920 MiB, H100 / H800 80 GB 81,559 MiB, H20 97,871 MiB,
/// H20-3e and H200 143,771 MiB, B200 183,359 MiB, GB200 189,471 MiB; `rocm-smi`'s
/// "VRAM Total Memory" on the MI300X, 205,822,885,888 B = 196,288 MiB), which is what sglang's
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
        // The H100 die with NVLink cut to 400 GB/s (8 links instead of 18); same tensor cores
        // and HBM3 (NVIDIA H800 datasheet).
        "h800" => g(989.0, Some(1979.0), 81_559, 3.35, 400.0),
        // Hopper with 78 SMs: ~15 % of the H100's tensor throughput, full NVLink, 96 GB HBM3 at
        // 4.0 TB/s (NVIDIA's H20 product brief as vendors reproduce it).
        "h20" => g(148.0, Some(296.0), 97_871, 4.0, 900.0),
        // The H20's compute with the H200's 141 GB HBM3e at 4.8 TB/s (the Mooncake sglang PD
        // table's GPU, docs/numbers.md §4.3).
        "h20-3e" => g(148.0, Some(296.0), 143_771, 4.8, 900.0),
        "h200" => g(989.0, Some(1979.0), 143_771, 4.8, 900.0),
        "b200" => g(2250.0, Some(4500.0), 183_359, 8.0, 1800.0),
        // One Blackwell GPU of a GB200 NVL72 rack (NVIDIA's rack figures ÷ 72): clocked above
        // the air-cooled B200 (1,200 W against 1,000 W), NVLink 5 at 1.8 TB/s.
        "gb200" => g(2500.0, Some(5000.0), 189_471, 8.0, 1800.0),
        // AMD CDNA 3: 192 GB HBM3 at 5.3 TB/s; seven Infinity Fabric links of 64 GB/s each way
        // to the seven peers of an 8-GPU platform, 896 GB/s both directions together. Unlike an
        // NVSwitch, one peer gets only one link (64 GB/s each way): a TP group smaller than the
        // node does not see the aggregate, so for TP < 8 this figure is optimistic.
        "mi300x" => g(1307.4, Some(2614.9), 196_288, 5.3, 896.0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Each new preset against the figure its source gives (`docs/numbers.md` §1).
    #[test]
    fn the_h800_is_an_h100_with_400_gb_s_nvlink() {
        let (h800, h100) = (gpu_preset("h800").unwrap(), gpu_preset("h100-sxm").unwrap());
        // NVIDIA's datasheet: "NVLink 400 GB/s" (both directions), the H100's 900 GB/s.
        assert_eq!(h800.nvlink_bytes_per_s, 400e9);
        assert_eq!(h800.hbm_bytes, 81_559 * MIB);
        assert_eq!(
            (h800.bf16_tflops, h800.fp8_tflops, h800.hbm_bytes_per_s),
            (h100.bf16_tflops, h100.fp8_tflops, h100.hbm_bytes_per_s)
        );
    }

    #[test]
    fn the_h20_and_h20_3e_share_compute_and_differ_in_memory() {
        let (h20, h20e) = (gpu_preset("h20").unwrap(), gpu_preset("h20-3e").unwrap());
        for g in [&h20, &h20e] {
            assert_eq!((g.bf16_tflops, g.fp8_tflops), (148.0, Some(296.0)));
        }
        // nvidia-smi: 97,871 MiB (96 GB HBM3, 4.0 TB/s) and 143,771 MiB (141 GB HBM3e, 4.8 TB/s).
        assert_eq!(h20.hbm_bytes, 97_871 * MIB);
        assert_eq!(h20.hbm_bytes_per_s, 4.0e12);
        assert_eq!(h20e.hbm_bytes, 143_771 * MIB);
        assert_eq!(h20e.hbm_bytes_per_s, 4.8e12);
        // The H20-3e is the H200's memory system with the H20's tensor cores.
        let h200 = gpu_preset("h200").unwrap();
        assert_eq!(
            (
                h20e.hbm_bytes,
                h20e.hbm_bytes_per_s,
                h20e.nvlink_bytes_per_s
            ),
            (
                h200.hbm_bytes,
                h200.hbm_bytes_per_s,
                h200.nvlink_bytes_per_s
            )
        );
    }

    #[test]
    fn the_gb200_is_one_seventy_second_of_an_nvl72_rack() {
        let g = gpu_preset("gb200").unwrap();
        // NVL72: 360 PFLOPS BF16 and 720 PFLOPS FP8 with sparsity, 576 TB/s HBM, 130 TB/s
        // NVLink, over 72 GPUs; dense is half the sparse figure.
        assert_eq!(g.bf16_tflops, 360e3 / 72.0 / 2.0);
        assert_eq!(g.fp8_tflops, Some(720e3 / 72.0 / 2.0));
        assert_eq!(g.hbm_bytes_per_s, 576e12 / 72.0);
        assert!((g.nvlink_bytes_per_s * 72.0 / 130e12 - 1.0).abs() < 0.01);
        assert_eq!(g.hbm_bytes, 189_471 * MIB);
    }

    #[test]
    fn the_mi300x_has_192_gb_and_infinity_fabric_in_the_nvlink_field() {
        let g = gpu_preset("mi300x").unwrap();
        // rocm-smi's VRAM total, 205,822,885,888 B: a whole number of MiB.
        assert_eq!(g.hbm_bytes, 205_822_885_888);
        assert_eq!(g.hbm_bytes_per_s, 5.3e12);
        assert_eq!((g.bf16_tflops, g.fp8_tflops), (1307.4, Some(2614.9)));
        // Seven xGMI links × 64 GB/s × both directions.
        assert_eq!(g.nvlink_bytes_per_s, 7.0 * 64e9 * 2.0);
    }

    #[test]
    fn every_listed_preset_resolves_and_unknown_names_do_not() {
        for name in GPU_PRESETS {
            let g = gpu_preset(name).unwrap();
            assert_eq!(g.name, *name);
            assert!(
                g.hbm_bytes > 64 * 1024 * MIB && g.bf16_tflops > 100.0,
                "{name}"
            );
        }
        assert_eq!(gpu_preset("H800"), None);
        assert_eq!(gpu_preset("mi300"), None);
    }
}
