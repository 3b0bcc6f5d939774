//! The `vllm-2023` calibration against the data it was fitted to: `calibration/perf_model.csv`
//! (vLLM 2023, Splitwise ISCA'24: Llama2-70B TP2/4/8 and BLOOM-176B TP8 on A100-80GB and
//! H100-80GB SXM). These tests keep the old numbers reachable and checked.
//!
//! Its `prompt_time` is one forward over all `batch_size × prompt_size` prompt tokens: the
//! data say so (H100 TP8: 8 prompts of 512 take 377.6 ms, one prompt of 4096 takes 378.6 ms;
//! 16 × 512 and 1 × 8192 agree within 6 %), which is vLLM 2023's scheduler batching every
//! waiting prompt into one forward. Its `token_time` is the mean of the `token_size − 1` decode
//! steps (`e2e = prompt_time + (token_size − 1) × token_time`), evaluated at the mean context
//! `prompt_size + token_size / 2` per sequence — exact while the step is linear in context.
//!
//! Known misfits (printed by `calibration_error_is_within_15_percent`): prompts of ≤ 256 tokens
//! at TP4–8 (measured ≈ 50 ms whatever the length, predicted 30–35 ms), and H100 TP8 prefill,
//! which is super-linear between 2k and 4k tokens where the model is linear (±25 %). The TP2
//! batch-64 rows are not what they say (see `kv_starved`) and are off by 10×; the median is
//! robust to them. The overheads are vLLM 2023's (Python scheduling and sampling, no CUDA
//! graphs: a per-block launch floor, NCCL all-reduce without overlap).

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::compute::StepModel;
    use crate::spec::calibration::{ComputeParams, VLLM_2023_A100, VLLM_2023_H100, named};
    use crate::spec::{GpuSpec, gpu_preset, preset};

    /// One measured configuration of `perf_model.csv`: the mean of its repeats.
    #[derive(Clone, Debug)]
    struct Point {
        model: String,
        hardware: String,
        tp: u32,
        prompt_size: u32,
        batch_size: u32,
        token_size: u32,
        prompt_ms: f64,
        token_ms: f64,
    }

    #[derive(serde::Deserialize)]
    struct Row {
        model: String,
        hardware: String,
        prompt_size: u32,
        batch_size: u32,
        token_size: u32,
        prompt_time: f64,
        token_time: f64,
        tensor_parallel: u32,
    }

    /// Configurations in (model, hardware, tp, prompt, batch, tokens) order, repeats averaged.
    fn load_points() -> Vec<Point> {
        let mut reader = csv::Reader::from_path(crate::shared_path("calibration/perf_model.csv"))
            .expect("perf_model.csv");
        type Key = (String, String, u32, u32, u32, u32);
        let mut sums: BTreeMap<Key, (f64, f64, f64)> = BTreeMap::new();
        for row in reader.deserialize() {
            let r: Row = row.expect("a perf_model.csv row");
            let key = (
                r.model,
                r.hardware,
                r.tensor_parallel,
                r.prompt_size,
                r.batch_size,
                r.token_size,
            );
            let e = sums.entry(key).or_default();
            *e = (e.0 + r.prompt_time, e.1 + r.token_time, e.2 + 1.0);
        }
        sums.into_iter()
            .map(|((model, hardware, tp, p, b, t), (pt, tt, n))| Point {
                model,
                hardware,
                tp,
                prompt_size: p,
                batch_size: b,
                token_size: t,
                prompt_ms: pt / n,
                token_ms: tt / n,
            })
            .collect()
    }

    /// The pdsim GPU preset a `perf_model.csv` hardware name was measured on (Azure ND A100 v4
    /// and ND H100 v5 are SXM parts).
    fn gpu_of(hardware: &str) -> GpuSpec {
        let name = if hardware.starts_with("a100") {
            "a100-sxm"
        } else {
            "h100-sxm"
        };
        gpu_preset(name).unwrap()
    }

    /// Predicted (prompt_time, token_time) in ms for one point: the prompt phase is one
    /// forward over `batch` prompts; the token time is a decode step at the mean context.
    fn predict(params: &ComputeParams, pt: &Point) -> (f64, f64) {
        let model = preset(&pt.model).unwrap();
        let s = StepModel::new(&gpu_of(&pt.hardware), &model, pt.tp, 2, params.clone());
        let prompt = s.prefill_ns(&vec![(pt.prompt_size, 0); pt.batch_size as usize]);
        let ctx_per_seq = u64::from(pt.prompt_size) + u64::from(pt.token_size) / 2;
        let token = s.decode_ns(pt.batch_size, u64::from(pt.batch_size) * ctx_per_seq);
        (prompt as f64 / 1e6, token as f64 / 1e6)
    }

    /// Absolute percentage errors of prompt and token times, each with its point.
    fn errors<'a>(params: &ComputeParams, points: &'a [Point]) -> Vec<(f64, f64, &'a Point)> {
        points
            .iter()
            .map(|pt| {
                let (p, t) = predict(params, pt);
                let ape = |pred: f64, meas: f64| (pred - meas).abs() / meas;
                (ape(p, pt.prompt_ms), ape(t, pt.token_ms), pt)
            })
            .collect()
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    /// vLLM did not run the TP2 batch-64 configurations as asked: 64 sequences' KV does not fit
    /// beside 138 GB of Llama2-70B weights on two 80 GB GPUs, and the recorded prompt time is
    /// below batch 32's (796 vs 6,607 ms on A100). They stay in the error figures; the report
    /// also names the worst point outside them.
    fn kv_starved(pt: &Point) -> bool {
        pt.tp == 2 && pt.batch_size == 64
    }

    /// Prints the median APE of prompt and token times for one hardware and its worst points
    /// (overall and outside [`kv_starved`]); returns (median prompt APE, median token APE).
    fn report(params: &ComputeParams, hardware: &str) -> (f64, f64) {
        let points: Vec<Point> = load_points()
            .into_iter()
            .filter(|p| p.hardware == hardware)
            .collect();
        let errs = errors(params, &points);
        let mp = median(errs.iter().map(|e| e.0).collect());
        let mt = median(errs.iter().map(|e| e.1).collect());
        println!(
            "{hardware} ({} points): median APE prompt {:.1} %, token {:.1} %",
            points.len(),
            100.0 * mp,
            100.0 * mt
        );
        for (phase, prompt) in [("prompt", true), ("token", false)] {
            let ape = |e: &(f64, f64, &Point)| if prompt { e.0 } else { e.1 };
            for (label, skip_starved) in [("worst", false), ("worst outside TP2 batch 64", true)] {
                let (e, pt) = errs
                    .iter()
                    .filter(|e| !(skip_starved && kv_starved(e.2)))
                    .map(|e| (ape(e), e.2))
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .unwrap();
                let (pp, pk) = predict(params, pt);
                let (pred, meas) = if prompt {
                    (pp, pt.prompt_ms)
                } else {
                    (pk, pt.token_ms)
                };
                println!(
                    "  {label} {phase}: {} tp{} prompt {} batch {} tokens {}: \
                     predicted {pred:.1} ms, measured {meas:.1} ms ({:.1} %)",
                    pt.model,
                    pt.tp,
                    pt.prompt_size,
                    pt.batch_size,
                    pt.token_size,
                    100.0 * e
                );
            }
        }
        (mp, mt)
    }

    #[test]
    fn calibration_error_is_within_15_percent() {
        for (hardware, gpu) in [("a100-80gb", "a100-sxm"), ("h100-80gb", "h100-sxm")] {
            let params = named("vllm-2023", &gpu_preset(gpu).unwrap()).unwrap();
            let (mp, mt) = report(&params, hardware);
            assert!(mp <= 0.15, "{hardware}: median prompt APE {mp}");
            assert!(mt <= 0.15, "{hardware}: median token APE {mt}");
        }
        // Power-capped H100: not fitted, reported against the H100 fit.
        report(&VLLM_2023_H100, "h100-80gb-pcap");
        // The constants are the fit's A100 and H100 rows.
        assert_eq!(
            named("vllm-2023", &gpu_preset("a100-sxm").unwrap()),
            Some(VLLM_2023_A100)
        );
    }

    /// The fitted parameters, in a fixed order, as a vector (log space in the search).
    fn to_vec(p: &ComputeParams) -> Vec<f64> {
        vec![
            p.prefill_flops_efficiency,
            p.hbm_efficiency,
            p.prefill_overhead_s,
            p.decode_overhead_s,
            p.decode_per_seq_overhead_s,
            p.allreduce_step_latency_s,
            p.nvlink_efficiency,
            p.launch_per_block_s,
        ]
    }

    fn from_vec(v: &[f64]) -> ComputeParams {
        ComputeParams {
            prefill_flops_efficiency: v[0].min(1.0),
            prefill_mfu_half_tokens: 0.0,
            prefill_per_seq_overhead_s: 0.0,
            kv_hbm_efficiency: v[1].min(1.0),
            allreduce_log_steps: false,
            // Not identifiable from this data (no decode step is compute-bound at batch ≤ 64):
            // tied to the prefill efficiency.
            decode_flops_efficiency: v[0].min(1.0),
            hbm_efficiency: v[1].min(1.0),
            prefill_overhead_s: v[2],
            decode_overhead_s: v[3],
            decode_per_seq_overhead_s: v[4],
            allreduce_step_latency_s: v[5],
            nvlink_efficiency: v[6].min(1.0),
            launch_per_block_s: v[7],
            ..VLLM_2023_A100
        }
    }

    /// Mean absolute log error of prompt and token times: symmetric in over/under-prediction
    /// and robust to the few rows vLLM did not run as configured (TP2, batch 64: the KV cache
    /// could not hold 64 sequences next to 138 GB of weights, and both times drop).
    fn loss(params: &ComputeParams, points: &[Point]) -> f64 {
        let mut sum = 0.0;
        for pt in points {
            let (p, t) = predict(params, pt);
            sum += (p / pt.prompt_ms).ln().abs() + (t / pt.token_ms).ln().abs();
        }
        sum / (2.0 * points.len() as f64)
    }

    /// Pattern search in log space from `start`: each coordinate is tried ×/÷ `e^step`; the
    /// step halves when no coordinate improves. Returns (loss, parameters).
    fn pattern_search(start: &ComputeParams, points: &[Point]) -> (f64, ComputeParams) {
        let eval = |x: &[f64]| {
            let v: Vec<f64> = x.iter().map(|l| l.exp()).collect();
            loss(&from_vec(&v), points)
        };
        let mut x: Vec<f64> = to_vec(start).iter().map(|v| v.ln()).collect();
        let mut best = eval(&x);
        let mut step = 0.5;
        while step > 1e-4 {
            let mut improved = false;
            for i in 0..x.len() {
                for dir in [1.0, -1.0] {
                    let mut y = x.clone();
                    y[i] += dir * step;
                    let l = eval(&y);
                    if l < best {
                        (best, x, improved) = (l, y, true);
                    }
                }
            }
            if !improved {
                step /= 2.0;
            }
        }
        (
            best,
            from_vec(&x.iter().map(|l| l.exp()).collect::<Vec<_>>()),
        )
    }

    /// Fits the parameters per GPU and prints them as Rust constants. The loss surface has
    /// shallow local minima along the launch-floor / HBM-efficiency ridge (both explain flat
    /// decode times), so the search starts from several launch costs and keeps the best.
    /// Run: `cargo test --release --lib fit_to_perf_model -- --ignored --nocapture` (< 1 s).
    #[test]
    #[ignore]
    fn fit_to_perf_model() {
        let all = load_points();
        for hardware in ["a100-80gb", "h100-80gb"] {
            let points: Vec<Point> = all
                .iter()
                .filter(|p| p.hardware == hardware)
                .cloned()
                .collect();
            let (best, p) = [5e-5, 1e-4, 2e-4, 3e-4, 4e-4]
                .into_iter()
                .map(|launch| {
                    let start = ComputeParams {
                        prefill_flops_efficiency: 0.5,
                        prefill_mfu_half_tokens: 0.0,
                        prefill_per_seq_overhead_s: 0.0,
                        kv_hbm_efficiency: 0.7,
                        allreduce_log_steps: false,
                        decode_flops_efficiency: 0.5,
                        hbm_efficiency: 0.7,
                        prefill_overhead_s: 0.02,
                        decode_overhead_s: 0.01,
                        decode_per_seq_overhead_s: 3e-4,
                        allreduce_step_latency_s: 1e-5,
                        nvlink_efficiency: 0.1,
                        launch_per_block_s: launch,
                        ..VLLM_2023_A100
                    };
                    pattern_search(&start, &points)
                })
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .unwrap();
            println!("{hardware}: mean |ln error| {best:.4}");
            println!(
                "    prefill_flops_efficiency: {:.3},",
                p.prefill_flops_efficiency
            );
            println!(
                "    decode_flops_efficiency: {:.3},",
                p.decode_flops_efficiency
            );
            println!("    hbm_efficiency: {:.3},", p.hbm_efficiency);
            println!("    prefill_overhead_s: {:.3e},", p.prefill_overhead_s);
            println!("    decode_overhead_s: {:.3e},", p.decode_overhead_s);
            println!(
                "    decode_per_seq_overhead_s: {:.3e},",
                p.decode_per_seq_overhead_s
            );
            println!(
                "    allreduce_step_latency_s: {:.3e},",
                p.allreduce_step_latency_s
            );
            println!("    nvlink_efficiency: {:.3},", p.nvlink_efficiency);
            println!("    launch_per_block_s: {:.3e},", p.launch_per_block_s);
            report(&p, hardware);
        }
    }
}
