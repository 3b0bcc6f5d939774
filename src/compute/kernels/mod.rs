//! Step times from measured kernels: NVIDIA's measured sglang kernel tables (AIConfigurator's
//! database, Apache-2.0), derived into one compact file per GPU (`kernels/` at the repository
//! root, [`crate::spec::kernels`]) by [`derive`] (`pdsim calibrate --from-aiconfigurator`),
//! and composed into a forward as sglang runs it ([`compose`]).

pub mod compose;
pub mod derive;

pub use crate::spec::kernels::{KernelTables, builtin, grid, tables};
#[cfg(test)]
mod probe {
    use super::compose::{KernelStep, Setup};
    use crate::spec::{gpu_preset, preset};

    #[test]
    #[ignore]
    fn print_steps() {
        for (gpu, model, tp) in [("h100-sxm", "llama-3.1-8b", 1), ("h100-sxm", "llama-3.1-70b", 4), ("a100-sxm", "llama-3.1-8b", 1)] {
            let t = super::builtin::tables(gpu).unwrap();
            let m = preset(model).unwrap();
            let g = gpu_preset(gpu).unwrap();
            let k = KernelStep::new(&Setup { tables: &t, model: &m, attn_tp: tp, experts_tp: Some(tp), kv_dtype_bytes: 2, allreduces: 2.0 * f64::from(m.num_layers), span: None, hbm_bytes_per_s: g.hbm_bytes_per_s, peak_flops: g.bf16_tflops * 1e12, analytic: (0.7, 0.7, 0.86) }).unwrap();
            println!("{gpu} {model} tp{tp}: {}", k.source);
            for b in [1u32, 8, 32, 64, 128, 256, 512, 1024] {
                let ctx = f64::from(b) * 1152.0;
                let d = k.dense_s(f64::from(b), true) + k.lm_head_s(f64::from(b));
                let a = k.decode_attention_s(b, ctx);
                let (fl, aa, be) = k.decode_attention(b);
                println!("  decode b={b:5} ctx/seq 1152: dense+lm {:.3} ms attn {:.3} ms total {:.3} ms  (floor {:.3} a {:.3} beta {:.3e})", d*1e3, a*1e3, (d+a)*1e3, fl*1e3, aa*1e3, be);
            }
            for n in [128u32, 512, 1024, 2048, 4096, 8192, 16384] {
                let d = k.dense_s(f64::from(n), false) + k.lm_head_s(1.0);
                let a = k.prefill_attention_s(&[(n, 0)]);
                println!("  prefill {n:6}: dense {:.2} ms attn {:.2} ms total {:.2} ms", d*1e3, a*1e3, (d+a)*1e3);
            }
        }
    }
}

#[cfg(test)]
mod probe2 {
    use super::compose::{KernelStep, Setup};
    use crate::spec::{gpu_preset, preset};

    #[test]
    #[ignore]
    fn decode_attention_fit_error() {
        for (gpu, model, tp) in [("h100-sxm", "llama-3.1-8b", 1), ("h100-sxm", "llama-3.1-70b", 4), ("a100-sxm", "llama-3.1-8b", 1), ("b200", "llama-3.1-70b", 8)] {
            let t = super::builtin::tables(gpu).unwrap();
            let m = preset(model).unwrap();
            let g = gpu_preset(gpu).unwrap();
            let k = KernelStep::new(&Setup { tables: &t, model: &m, attn_tp: tp, experts_tp: Some(tp), kv_dtype_bytes: 2, allreduces: 2.0 * f64::from(m.num_layers), span: None, hbm_bytes_per_s: g.hbm_bytes_per_s, peak_flops: g.bf16_tflops * 1e12, analytic: (0.7, 0.7, 0.86) }).unwrap();
            let mut worst = (0.0f64, 0u32, 0.0f64);
            for b in [1u32, 4, 16, 32, 64, 128, 256, 512, 1024] {
                let mut line = String::new();
                for s in [128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 32768.0] {
                    let exact = k.decode_attn_grid_eval(b, s);
                    let fit = k.decode_attention_s(b, f64::from(b) * s);
                    let e = fit / exact - 1.0;
                    line += &format!(" {s}:{:+.0}%", e * 100.0);
                    if s >= 512.0 && e.abs() > worst.0.abs() { worst = (e, b, s); }
                }
                println!("{gpu} {model} tp{tp} b={b}:{line}");
            }
            println!("worst (ctx>=512) {:+.1}% at b={} s={}", worst.0*100.0, worst.1, worst.2);
        }
    }
}

#[cfg(test)]
mod probe3 {
    use crate::compute::moe::{A2aNetwork, ExpertCost};
    use crate::compute::StepModel;
    use crate::spec::server::{A2aBackend, Parallel};
    use crate::spec::{gpu_preset, preset};

    #[test]
    #[ignore]
    fn deepseek_prefill_breakdown() {
        let gpu = gpu_preset("h100-sxm").unwrap();
        let m = preset("deepseek-v3").unwrap();
        for (name, cal) in [("2026", "sglang-2026"), ("2025", "sglang-2025")] {
            let params = crate::spec::calibration::named(cal, &gpu).unwrap();
            let p = Parallel { dp_size: 32, enable_dp_attention: true, ep_size: 32, moe_a2a_backend: A2aBackend::Deepep, ep_num_redundant_experts: 32, enable_eplb: true, enable_two_batch_overlap: true, ..Parallel::default() };
            let net = A2aNetwork { gpus_per_node: 8, nic_bytes_per_s_per_gpu: 50e9, nvlink_one_way_bytes_per_s: 450e9 };
            let e = ExpertCost::new(&gpu, &m, 32, &p, net, StepModel::peak_flops_for(&gpu, &m));
            let s = StepModel::with_parallel(&gpu, &m, 1, 2, params, None, e);
            for chunks in [vec![(8192u32, 0u32)], vec![(4096, 0), (4096, 0)], vec![(1024, 0); 8]] {
                let t = s.prefill_ns(&chunks) as f64 / 1e6;
                let mt = s.moe_time(8192.0, true).unwrap();
                println!("{name} chunks {:?}x{}: forward {t:.1} ms; moe compute {:.1} comm {:.1} total {:.1} (measured {})", chunks[0], chunks.len(), mt.compute_s*1e3, mt.comm_s*1e3, mt.total_s*1e3, s.kernel_source().unwrap_or("-"));
            }
            for b in [64u32, 128, 256] {
                let t = s.decode_ns(b, u64::from(b) * 2000) as f64 / 1e6;
                println!("{name} decode b={b}: {t:.1} ms");
            }
        }
    }
}

#[cfg(test)]
mod probe4 {
    use super::compose::{KernelStep, Setup};
    use crate::spec::{gpu_preset, preset};

    #[test]
    #[ignore]
    fn deepseek_parts() {
        let g = gpu_preset("h100-sxm").unwrap();
        let t = super::builtin::tables("h100-sxm").unwrap();
        let m = preset("deepseek-v3").unwrap();
        let k = KernelStep::new(&Setup { tables: &t, model: &m, attn_tp: 1, experts_tp: None, kv_dtype_bytes: 2, allreduces: 0.0, span: None, hbm_bytes_per_s: g.hbm_bytes_per_s, peak_flops: 1979e12, analytic: (0.7, 0.7, 0.86) }).unwrap();
        for n in [1024u32, 4096, 8192, 16384] {
            let nf = f64::from(n);
            println!("n={n}: dense {:.1} ms, attn {:.1} ms, decompress {:.1} ms, lm {:.2} ms", k.dense_s(nf, false)*1e3, k.prefill_attention_s(&[(n, 0)])*1e3, k.mla_decompress_s(nf)*1e3, k.lm_head_s(1.0)*1e3);
        }
        println!("fallbacks {:?}", k.fallbacks);
    }
}
