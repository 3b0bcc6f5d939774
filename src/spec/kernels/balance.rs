//! Efficiencies for GPUs the kernel tables do not cover (H20, H20-3e, H800, MI300X, and any
//! preset AIConfigurator did not measure), derived from the GPUs it did: each efficiency the
//! roofline needs, measured on every tabled GPU at reference shapes; the FLOP efficiencies
//! fitted as a line in the logarithm of the GPU's balance (peak BF16 FLOP/s per HBM byte/s)
//! and held within the range the tabled GPUs span (no extrapolation past the data), the
//! memory efficiencies — which follow the generation's kernels, not the balance — at the
//! tabled GPUs' median.
//!
//! What is measured on each tabled GPU (its shipped tables, [`measure`]):
//!
//! | efficiency | reference | as a fraction of |
//! |---|---|---|
//! | prefill FLOPs | the four linear layers of a Llama-3.1-8B layer (qkv 6,144 × 4,096, o 4,096², gate-up 28,672 × 4,096, down 4,096 × 14,336) at 8,192 tokens | BF16 peak |
//! | decode FLOPs | the same at 1,024 tokens | BF16 peak |
//! | weight streaming | the same at 1 token (weight bytes over time) | HBM |
//! | KV reading | decode attention, 8 KV heads × 128, BF16, batch 64 × 4,096 tokens | HBM |
//! | FP8 GEMMs over BF16 | the prefill reference in the block-scaled FP8 table (DeepGEMM on Hopper, sglang's FP8 checkpoints' kernel) | its fraction of FP8 peak ÷ the BF16 fraction of BF16 peak |
//!
//! The FP8 ratio is the median of the GPUs with a block-scaled FP8 GEMM table (not the A100
//! or the L40S): 0.82–0.87 on Hopper and Blackwell, 0.99 on the GB200. Without it an FP8
//! model on a GPU without tables ran its GEMMs at the BF16 fraction of the FP8 peak.
//! The constants below are that fit; `balance_fit_is_the_tables` recomputes it from the
//! shipped files and fails if they drift apart.

use super::tables::KernelTables;
use crate::spec::GpuSpec;

/// One GPU's measured efficiencies (fractions of its peaks).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Efficiencies {
    /// Large prefill GEMMs: achieved FLOP/s over BF16 peak.
    pub prefill_flops: f64,
    /// Mid-size GEMMs (a large decode batch): achieved FLOP/s over BF16 peak.
    pub decode_flops: f64,
    /// Weight streaming of a batch-1 GEMM: bytes/s over HBM peak.
    pub hbm: f64,
    /// Decode attention's KV reads: bytes/s over HBM peak.
    pub kv_hbm: f64,
    /// Large block-scaled FP8 GEMMs' fraction of FP8 peak over `prefill_flops` (NaN where the
    /// GPU has no such table).
    pub fp8_gemm: f64,
}

/// A line in ln(balance) and the range it is held within: `(intercept, slope, min, max)`.
pub type Line = (f64, f64, f64, f64);

/// The fit over the tabled GPUs, one line per efficiency (prefill, decode, weights, KV, FP8
/// over BF16). Recomputed by `balance_fit_is_the_tables`.
pub const FIT: [Line; 5] = [
    (1.8496, -0.2062, 0.5223, 0.7910),
    (1.7626, -0.1917, 0.5735, 0.7783),
    (0.6818, 0.0000, 0.6818, 0.6818),
    (0.8376, 0.0000, 0.8376, 0.8376),
    (0.8647, 0.0000, 0.8647, 0.8647),
];

/// A GPU's balance: BF16 peak FLOP/s per HBM byte/s.
pub fn balance(gpu: &GpuSpec) -> f64 {
    gpu.bf16_tflops * 1e12 / gpu.hbm_bytes_per_s
}

/// The efficiencies [`FIT`] gives a GPU of `gpu`'s balance.
pub fn efficiencies(gpu: &GpuSpec) -> Efficiencies {
    efficiencies_from(&FIT, balance(gpu))
}

fn efficiencies_from(fit: &[Line; 5], balance: f64) -> Efficiencies {
    let at = |(c0, c1, lo, hi): Line| (c0 + c1 * balance.ln()).clamp(lo, hi);
    Efficiencies {
        prefill_flops: at(fit[0]),
        decode_flops: at(fit[1]),
        hbm: at(fit[2]),
        kv_hbm: at(fit[3]),
        fp8_gemm: at(fit[4]),
    }
}

/// The linear layers of one Llama-3.1-8B layer, `(n, k)`.
const REF_LINEAR: [(f64, f64); 4] = [
    (6144.0, 4096.0),
    (4096.0, 4096.0),
    (28672.0, 4096.0),
    (4096.0, 14336.0),
];

/// `gpu`'s efficiencies measured in its tables `t` (see the module docs); `None` when the
/// tables lack the reference (no BF16 GEMM, no BF16 GQA decode attention at head dim 128).
pub fn measure(t: &KernelTables, gpu: &GpuSpec) -> Option<Efficiencies> {
    let gemm = &t.find("gemm", &[("dtype", "bfloat16")])?.grid();
    let peak = gpu.bf16_tflops * 1e12;
    let eff_of = |gemm: &crate::spec::kernels::grid::Grid, peak: f64, m: f64| {
        let (mut flops, mut secs) = (0.0, 0.0);
        for (n, k) in REF_LINEAR {
            flops += 2.0 * m * n * k;
            secs += gemm.eval(&[m, n, k]) * 1e-6;
        }
        flops / secs / peak
    };
    let flops_eff = |m: f64| eff_of(gemm, peak, m);
    let fp8_gemm = match (t.find("gemm", &[("dtype", "fp8_block")]), gpu.fp8_tflops) {
        (Some(f), Some(fp8)) => eff_of(f.grid(), fp8 * 1e12, 8192.0) / flops_eff(8192.0),
        _ => f64::NAN,
    };
    let (mut bytes, mut secs) = (0.0, 0.0);
    for (n, k) in REF_LINEAR {
        bytes += 2.0 * n * k;
        secs += gemm.eval(&[1.0, n, k]) * 1e-6;
    }
    let hbm = bytes / secs / gpu.hbm_bytes_per_s;
    let attn = t
        .find(
            "generation_attention",
            &[("head_dim", "128"), ("kv", "bfloat16"), ("family", "gqa")],
        )?
        .grid()
        .clone();
    let (b, s, g, d) = (64.0, 4096.0, 8.0, 128.0);
    let kv_bytes = b * s * g * d * 2.0 * 2.0;
    let kv_s = attn.eval(&[g, b, s]) * 1e-6;
    Some(Efficiencies {
        prefill_flops: flops_eff(8192.0),
        decode_flops: flops_eff(1024.0),
        hbm,
        kv_hbm: kv_bytes / kv_s / gpu.hbm_bytes_per_s,
        fp8_gemm,
    })
}

/// The least-squares line of `ys` in ln(`xs`), held within `ys`' range.
pub fn fit_line(xs: &[f64], ys: &[f64]) -> Line {
    let n = xs.len() as f64;
    let lx: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
    let mx = lx.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxx: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    let sxy: f64 = lx.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let lo = ys.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (my - slope * mx, slope, lo, hi)
}

/// A flat line at the median of `ys`.
pub fn median_line(ys: &[f64]) -> Line {
    let mut v = ys.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (m, 0.0, m, m)
}

/// The fit over every tabled GPU pdsim has a preset for.
pub fn fit_from_tables() -> ([Line; 5], Vec<(String, f64, Efficiencies)>) {
    let mut rows = Vec::new();
    for g in super::builtin::gpus() {
        let (Some(t), Some(gpu)) = (super::builtin::tables(g), crate::spec::gpu_preset(g)) else {
            continue;
        };
        if let Some(e) = measure(&t, &gpu) {
            rows.push((g.to_string(), balance(&gpu), e));
        }
    }
    let xs: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let col = |f: fn(&Efficiencies) -> f64| -> Vec<f64> { rows.iter().map(|r| f(&r.2)).collect() };
    // FLOP efficiency falls with balance (a GPU with more FLOPs per byte keeps fewer of
    // them busy: 0.79 of peak on the A100 at 153 FLOP/B, 0.63–0.73 on Hopper and Blackwell
    // at 280–310); the memory efficiencies follow the generation's kernels, not the
    // balance (the A100's older attention kernel reads KV at 0.61, every newer GPU at
    // 0.84–0.90), so they are the tabled GPUs' median.
    let fit = [
        fit_line(&xs, &col(|e| e.prefill_flops)),
        fit_line(&xs, &col(|e| e.decode_flops)),
        median_line(&col(|e| e.hbm)),
        median_line(&col(|e| e.kv_hbm)),
        // The FP8 kernels' standing against the BF16 ones is the kernel library's, not the
        // balance's: the median of the GPUs that have a block-scaled FP8 table.
        median_line(
            &col(|e| e.fp8_gemm)
                .into_iter()
                .filter(|r| r.is_finite())
                .collect::<Vec<_>>(),
        ),
    ];
    (fit, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants are the fit of the shipped tables (printed, so a refit can copy them).
    #[test]
    fn balance_fit_is_the_tables() {
        let (fit, rows) = fit_from_tables();
        for (g, b, e) in &rows {
            println!(
                "{g:<10} balance {b:6.1}  prefill {:.3}  decode {:.3}  weights {:.3}  kv {:.3}  fp8/bf16 {:.3}",
                e.prefill_flops, e.decode_flops, e.hbm, e.kv_hbm, e.fp8_gemm
            );
        }
        println!("pub const FIT: [Line; 5] = [");
        for l in &fit {
            println!("    ({:.4}, {:.4}, {:.4}, {:.4}),", l.0, l.1, l.2, l.3);
        }
        println!("];");
        assert!(rows.len() >= 5, "tabled GPUs with presets: {}", rows.len());
        for (i, (got, want)) in fit.iter().zip(FIT.iter()).enumerate() {
            for (a, b) in [
                (got.0, want.0),
                (got.1, want.1),
                (got.2, want.2),
                (got.3, want.3),
            ] {
                assert!(
                    (a - b).abs() < 5e-4,
                    "line {i}: {got:?} vs the constant {want:?}"
                );
            }
        }
    }
}
