//! GPU presets: the per-GPU figures the compute and memory models use.

use serde::Serialize;

use crate::spec::model::WeightDtype;

/// One GPU's capabilities. Units are in the field names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuSpec {
    /// Preset name.
    pub name: String,
    /// Dense BF16 peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 peak, TFLOP/s (`None` where the GPU has no FP8 tensor cores).
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 (NVFP4) peak, TFLOP/s: Blackwell's fifth-generation tensor cores; `None` on
    /// Hopper, Ada, Ampere and the MI300X, where sglang refuses an NVFP4 checkpoint
    /// (`ModelOptFp4Config.get_min_capability` is 100). Left out of results when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp4_tflops: Option<f64>,
    /// HBM capacity, bytes.
    pub hbm_bytes: u64,
    /// HBM bandwidth, bytes per second.
    pub hbm_bytes_per_s: f64,
    /// NVLink bandwidth, both directions together, bytes per second: the datasheets' figure
    /// (H100 "900 GB/s", H800 "400 GB/s"); the step model and the fabric take half of it each
    /// way. On the MI300X it is AMD Infinity Fabric (xGMI), which sglang's all-reduce uses where
    /// NVIDIA GPUs use NVLink; on the L40S, which has no NVLink, it is the PCIe Gen4 x16 link
    /// peer-to-peer traffic crosses instead.
    pub nvlink_bytes_per_s: f64,
    /// The GPU's link to its host's memory, bytes per second **each way** at line rate: its
    /// PCIe x16 slot (Gen4 32 GB/s, Gen5 64 GB/s, Gen6 128 GB/s), or on a Grace superchip
    /// (GB200, GB300) its share of NVLink-C2C. What HiCache loads and weight offload fetches
    /// cross (`hardware.host_link_gb_s` overrides it).
    pub host_link_bytes_per_s: f64,
    /// Most one GPU's Mooncake transfer engine moves each way between GPU memory and its
    /// NICs, bytes per second (`hardware.rdma_engine_gbps`): the PCIe / GPUDirect path and the
    /// engine's threads. `None`: the fabric's calibrated default (`fabric::calibration`).
    pub rdma_engine_bytes_per_s: Option<f64>,
}

impl GpuSpec {
    /// The dense peak, TFLOP/s, at which GEMMs over weights stored as `dtype` run: BF16 for
    /// BF16/FP32 weights; the FP8 peak for FP8 weights where the GPU has FP8 tensor cores (an
    /// A100 runs a weight-only FP8 kernel, Marlin, with BF16 math: its BF16 peak); the FP4
    /// peak for NVFP4 (W4A4: sglang's `ModelOptFp4LinearMethod` quantizes activations to FP4
    /// too). `None` for NVFP4 on a GPU without FP4 tensor cores, which sglang refuses.
    pub fn gemm_tflops(&self, dtype: WeightDtype) -> Option<f64> {
        match dtype {
            WeightDtype::Fp32 | WeightDtype::Bf16 => Some(self.bf16_tflops),
            WeightDtype::Fp8 => Some(self.fp8_tflops.unwrap_or(self.bf16_tflops)),
            WeightDtype::Nvfp4 => self.fp4_tflops,
        }
    }
}

/// Share of a host link's line rate that bulk DMA copies reach (≈ 80 %: 128b/130b coding, TLP
/// headers and flow control; the usual measured `cudaMemcpy` pinned-memory figure over PCIe).
/// A correction factor, applied to NVLink-C2C alike for want of a public measurement.
pub const HOST_LINK_EFFICIENCY: f64 = 0.8;

impl GpuSpec {
    /// What bulk copies between this GPU and host memory reach each way, bytes per second
    /// (HiCache's loads and write-backs, weight offload's fetches).
    pub fn host_copy_bytes_per_s(&self) -> f64 {
        self.host_link_bytes_per_s * HOST_LINK_EFFICIENCY
    }
}

/// Names of the built-in GPU presets.
pub const GPU_PRESETS: &[&str] = &[
    "a100-sxm", "h100-sxm", "h800", "h20", "h20-3e", "h200", "b200", "gb200", "b300", "gb300",
    "l40s", "mi300x",
];

/// PCIe x16 line rate each way, bytes per second: Gen4 (16 GT/s × 16 lanes, NVIDIA's "PCIe
/// Gen4: 64 GB/s" both directions together), Gen5 (the "128 GB/s" of the H100/H200/B200
/// datasheets) and Gen6 (the B300's "256 GB/s", the HGX B300 datasheet).
const PCIE_GEN4: f64 = 32e9;
const PCIE_GEN5: f64 = 64e9;
const PCIE_GEN6: f64 = 128e9;
/// One GPU's share of a Grace superchip's NVLink-C2C each way: NVIDIA gives the GB200 (and
/// GB300) superchip "900 GB/s of bidirectional bandwidth" between its Grace CPU and its two
/// Blackwell GPUs (GB200 NVL72 product page, "NVLink-C2C"): 450 GB/s each way shared by two
/// GPUs. (A Grace CPU's LPDDR5X delivers up to 512 GB/s, 256 GB/s per GPU, so the link and
/// not the memory binds.) 3.5× a PCIe Gen5 slot.
const C2C_PER_GPU: f64 = 900e9 / 2.0 / 2.0;

/// A built-in GPU by name, or `None`.
///
/// Source: `docs/numbers.md` §1, which cites each figure (NVIDIA and AMD datasheets, ±a few %).
/// TFLOPS are dense (no 2:4 sparsity). Memory is the device memory the driver reports
/// (`nvidia-smi`'s total: A100 80 GB 81,920 MiB, H100 / H800 80 GB 81,559 MiB, H20 97,871 MiB,
/// H20-3e and H200 143,771 MiB, B200 183,359 MiB, GB200 189,471 MiB, B300 275,040 MiB, GB300
/// 284,208 MiB, L40S 46,068 MiB; `rocm-smi`'s "VRAM Total Memory" on the MI300X,
/// 205,822,885,888 B = 196,288 MiB), which is what sglang's
/// `mem_fraction_static` multiplies: the datasheets' "80 GB" are binary gigabytes, and reading
/// them as 10⁹ bytes left every KV pool ~6 % short (issue 22). What the step-time model takes from them: BF16 and FP8 peaks (FP8
/// checkpoints run their GEMMs at the FP8 peak where there is one: not on the A100), the FP4
/// peak of NVFP4 checkpoints (Blackwell only), HBM
/// bandwidth (decode is bound by it: an H200 decodes ~1.4× and a B200 ~2.4× faster than an
/// H100 at the same efficiency) and NVLink bandwidth (TP all-reduce).
pub fn gpu_preset(name: &str) -> Option<GpuSpec> {
    let g = |bf16: f64, fp8: Option<f64>, hbm_mib: u64, tb_s: f64, nvlink_gb_s: f64| GpuSpec {
        name: name.to_string(),
        bf16_tflops: bf16,
        fp8_tflops: fp8,
        fp4_tflops: None,
        hbm_bytes: hbm_mib << 20,
        hbm_bytes_per_s: tb_s * 1e12,
        nvlink_bytes_per_s: nvlink_gb_s * 1e9,
        host_link_bytes_per_s: PCIE_GEN5,
        rdma_engine_bytes_per_s: None,
    };
    let with = |mut s: GpuSpec, fp4: Option<f64>, host: f64| {
        s.fp4_tflops = fp4;
        s.host_link_bytes_per_s = host;
        s
    };
    Some(match name {
        "a100-sxm" => with(g(312.0, None, 81_920, 2.039, 600.0), None, PCIE_GEN4),
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
        // HGX B200: FP4 144 PFLOPS with sparsity over 8 GPUs, 9 dense per GPU.
        "b200" => with(
            g(2250.0, Some(4500.0), 183_359, 8.0, 1800.0),
            Some(9000.0),
            PCIE_GEN5,
        ),
        // One Blackwell GPU of a GB200 NVL72 rack (NVIDIA's rack figures ÷ 72): clocked above
        // the air-cooled B200 (1,200 W against 1,000 W), NVLink 5 at 1.8 TB/s; FP4 1,440
        // PFLOPS with sparsity per rack, 10 dense per GPU; its host is a Grace CPU over C2C.
        "gb200" => with(
            g(2500.0, Some(5000.0), 189_471, 8.0, 1800.0),
            Some(10_000.0),
            C2C_PER_GPU,
        ),
        // Blackwell Ultra in an HGX B300 board: the B200's BF16 and FP8 tensor cores, FP4 up
        // to 14 PFLOPS dense (NVIDIA's Blackwell Ultra datasheet, as AIConfigurator 0.12's
        // `systems/b300_sxm.yaml` quotes it: "18 PFLOPS sparse | 14 PFLOPS dense"), 288 GB
        // HBM3e (12-high stacks) at 8 TB/s, NVLink 5, PCIe Gen6 to the host.
        "b300" => with(
            g(2250.0, Some(4500.0), 275_040, 8.0, 1800.0),
            Some(14_000.0),
            PCIE_GEN6,
        ),
        // One Blackwell Ultra GPU of a GB300 NVL72 rack (rack figures ÷ 72, dense: 1,080
        // PFLOPS FP4, 360 FP8, 180 BF16; 576 TB/s HBM; 130 TB/s NVLink), 288 GB HBM3e, a Grace
        // host over C2C.
        "gb300" => with(
            g(2500.0, Some(5000.0), 284_208, 8.0, 1800.0),
            Some(15_000.0),
            C2C_PER_GPU,
        ),
        // Ada Lovelace, PCIe only (NVIDIA L40S datasheet: BF16 362.05 TFLOPS and FP8 733
        // TFLOPS dense, 48 GB GDDR6 at 864 GB/s, "PCIe Gen4 x16: 64 GB/s bidirectional", no
        // NVLink). TP traffic and same-node KV copies cross PCIe: the "NVLink" figure is that
        // link, 64 GB/s both directions together. No FP4.
        "l40s" => with(g(362.05, Some(733.0), 46_068, 0.864, 64.0), None, PCIE_GEN4),
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
                g.hbm_bytes > 40 * 1024 * MIB && g.bf16_tflops > 100.0,
                "{name}"
            );
        }
        assert_eq!(gpu_preset("H800"), None);
        assert_eq!(gpu_preset("mi300"), None);
    }

    /// FP4 peaks (dense, per GPU) from NVIDIA's figures: HGX B200 144 PFLOPS with sparsity
    /// over 8 GPUs; GB200 NVL72 1,440 PFLOPS with sparsity over 72; B300 14 PFLOPS dense
    /// (Blackwell Ultra datasheet); GB300 NVL72 1,080 PFLOPS dense over 72. None before
    /// Blackwell, where an NVFP4 checkpoint has no GEMM peak.
    #[test]
    fn fp4_peaks_are_blackwells_alone() {
        let p = |n: &str| gpu_preset(n).unwrap();
        assert_eq!(p("b200").fp4_tflops, Some(144e3 / 8.0 / 2.0));
        assert_eq!(p("gb200").fp4_tflops, Some(1440e3 / 72.0 / 2.0));
        assert_eq!(p("b300").fp4_tflops, Some(14e3));
        assert_eq!(p("gb300").fp4_tflops, Some(1080e3 / 72.0));
        for n in [
            "a100-sxm", "h100-sxm", "h800", "h20", "h20-3e", "h200", "l40s", "mi300x",
        ] {
            assert_eq!(p(n).fp4_tflops, None, "{n}");
            assert_eq!(p(n).gemm_tflops(WeightDtype::Nvfp4), None, "{n}");
        }
        // FP8 weights on an A100 run a weight-only kernel at the BF16 peak.
        assert_eq!(p("a100-sxm").gemm_tflops(WeightDtype::Fp8), Some(312.0));
        assert_eq!(p("gb300").gemm_tflops(WeightDtype::Nvfp4), Some(15e3));
    }

    /// Blackwell Ultra keeps Blackwell's BF16/FP8 tensor cores and grows memory to 288 GB
    /// (nvidia-smi totals as AIConfigurator 0.12 records them: 275,040 and 284,208 MiB).
    #[test]
    fn the_b300_and_gb300_are_blackwell_ultra() {
        let (b300, gb300) = (gpu_preset("b300").unwrap(), gpu_preset("gb300").unwrap());
        let (b200, gb200) = (gpu_preset("b200").unwrap(), gpu_preset("gb200").unwrap());
        assert_eq!(
            (b300.bf16_tflops, b300.fp8_tflops),
            (b200.bf16_tflops, b200.fp8_tflops)
        );
        assert_eq!(
            (gb300.bf16_tflops, gb300.fp8_tflops),
            (gb200.bf16_tflops, gb200.fp8_tflops)
        );
        assert_eq!(b300.hbm_bytes, 275_040 * MIB);
        assert_eq!(gb300.hbm_bytes, 284_208 * MIB);
        // GB300 NVL72: 576 TB/s of HBM over 72 GPUs.
        assert_eq!(gb300.hbm_bytes_per_s, 576e12 / 72.0);
        // PCIe Gen6 on the HGX board, NVLink-C2C to a Grace CPU on the rack's trays.
        assert_eq!(b300.host_link_bytes_per_s, 2.0 * b200.host_link_bytes_per_s);
        assert_eq!(gb300.host_link_bytes_per_s, 225e9);
        assert_eq!(gb200.host_link_bytes_per_s, 225e9);
        assert!(gb200.host_link_bytes_per_s > 3.0 * b200.host_link_bytes_per_s);
    }

    /// The L40S has no NVLink: peer traffic crosses its PCIe Gen4 x16 slot, so its "NVLink"
    /// figure is that slot's 64 GB/s both ways, 28× below an H100's NVLink.
    #[test]
    fn the_l40s_is_pcie_only() {
        let g = gpu_preset("l40s").unwrap();
        assert_eq!(g.nvlink_bytes_per_s, 2.0 * g.host_link_bytes_per_s);
        assert_eq!(g.host_link_bytes_per_s, 32e9);
        assert_eq!((g.bf16_tflops, g.fp8_tflops), (362.05, Some(733.0)));
        assert_eq!(g.hbm_bytes, 46_068 * MIB);
        assert_eq!(g.hbm_bytes_per_s, 864e9);
    }
}
