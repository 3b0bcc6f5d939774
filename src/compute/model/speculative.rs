//! The forwards of a speculative decode step, priced by the same roofline as every other
//! forward ([`StepModel::forward_s`]): a decode-mode forward that computes several new tokens
//! per sequence (the target's verify, each draft step), the GPU part of a prefill forward (the
//! draft's prefill over the prompt), and a decode iteration's host cost on its own
//! (`compute::speculative` composes them; `docs/sglang-pd.md` §19.2).

use super::{Forward, StepModel};

impl StepModel {
    /// Host seconds of one decode scheduler iteration over `batch` sequences: the fixed cost
    /// and the per-sequence cost [`StepModel::forward_s`] adds to a decode forward.
    pub fn decode_host_s(&self, batch: u32) -> f64 {
        let p = &self.params;
        self.exposed_host_s(
            p.decode_overhead_s + p.decode_per_seq_overhead_s * f64::from(batch),
            batch,
        )
    }

    /// GPU seconds (no host cost; the launch floor included) of one decode-mode forward of
    /// `batch` sequences computing `tokens` new tokens in all (`tokens / batch` each, the
    /// first of them the sequence's next position), whose contexts — the first new token
    /// included, as a decode forward counts it — sum to `context_tokens`. Each new token
    /// attends to its sequence's context and to the new tokens before it (the causal / tree
    /// mask: `(q − 1)/2` more pairs each on average); the KV of the context is read once per
    /// sequence, the new tokens' KV written; the LM head runs on every new token (the verify
    /// needs logits at every draft position, a draft step at every branch). With one token
    /// per sequence this is [`StepModel::forward_s`]'s decode forward less
    /// [`StepModel::decode_host_s`]: sglang's `TARGET_VERIFY` and draft forwards replay CUDA
    /// graphs as a decode does, so they take the decode efficiencies.
    pub fn multi_token_gpu_s(&self, batch: u32, tokens: u64, context_tokens: u64) -> f64 {
        if batch == 0 || tokens == 0 {
            return 0.0;
        }
        if let Some(k) = &self.kernels {
            return self.kernel_multi_token_gpu_s(k, batch, tokens, context_tokens);
        }
        let p = &self.params;
        let (b, t, ctx) = (f64::from(batch), tokens as f64, context_tokens as f64);
        let q = t / b;
        let pairs = q * ctx + t * (q - 1.0) / 2.0;
        let flops =
            self.body_flops_per_token * t + self.lm_head_flops * t + self.decode_pair_flops * pairs;
        let t_compute = flops / (self.tp * self.peak_flops * p.decode_flops_efficiency);
        let kv_bytes =
            self.kv_bytes_per_token_gpu * (ctx + (t - b)) + 2.0 * self.state_bytes_per_seq_gpu * b;
        let t_memory = self.weight_bytes_gpu(t) / (self.hbm_bytes_per_s * p.hbm_efficiency)
            + kv_bytes / (self.hbm_bytes_per_s * p.kv_hbm_efficiency);
        let gpu = if self.decode_pipelined() {
            let m = self.decode_moe(t, flops, kv_bytes);
            t_compute.max(t_memory) * (1.0 - self.tbo_share) + self.allreduce_s(t) + m.total_s
        } else {
            let moe = self.moe_time(t, false).map_or(0.0, |m| m.total_s);
            t_compute.max(t_memory) + self.allreduce_s(t) + moe
        };
        self.offloaded(gpu)
            .max(self.allreduces * p.launch_per_block_s)
    }

    /// GPU seconds of a prefill forward over `chunks` (`(new, prefix)` tokens each): what
    /// [`StepModel::forward_s`] prices less its host cost (the scheduler's iteration is paid
    /// once, by the forward it runs beside).
    pub fn prefill_gpu_s(&self, chunks: &[(u32, u32)]) -> f64 {
        let seqs = chunks.iter().filter(|c| c.0 > 0).count() as f64;
        if seqs == 0.0 {
            return 0.0;
        }
        let p = &self.params;
        let host = p.prefill_overhead_s + p.prefill_per_seq_overhead_s * seqs;
        let all = self.forward_s(&Forward {
            chunks,
            ..Forward::default()
        });
        (all - host).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::every_shape;
    use super::*;

    /// One token per sequence is the plain decode forward, on every shape a scenario can
    /// build (dense, MoE, MLA, hybrid, DeepEP pipelined), to rounding.
    #[test]
    fn one_token_per_sequence_is_the_decode_forward() {
        for (i, m) in every_shape().iter().enumerate() {
            for (b, ctx) in [(1u32, 1u64), (7, 7 * 900), (64, 64 * 3000)] {
                let plain = m.forward_s(&Forward {
                    chunks: &[],
                    batch: b,
                    context_tokens: ctx,
                });
                let multi = m
                    .multi_token_gpu_s(b, u64::from(b), ctx)
                    .max(m.decode_cpu_floor_s(b))
                    + m.decode_host_s(b);
                assert!(
                    (multi / plain - 1.0).abs() < 1e-12,
                    "shape {i}: b {b} ctx {ctx}: {multi} vs {plain}"
                );
            }
        }
    }

    /// More tokens per sequence cost more, but far less than as many decode steps while the
    /// forward is weight-bound (8B at batch 1: 32 tokens ≈ one step, not 32).
    #[test]
    fn a_verify_forward_costs_about_one_weight_pass() {
        let m = crate::compute::StepModel::new(
            &crate::spec::gpu_preset("h100-sxm").unwrap(),
            &crate::spec::preset("llama-3.1-8b").unwrap(),
            1,
            2,
            crate::spec::calibration::SGLANG_2025,
        );
        let one = m.multi_token_gpu_s(1, 1, 500);
        let verify = m.multi_token_gpu_s(1, 32, 500);
        assert!(verify > one && verify < 1.2 * one, "{verify} vs {one}");
        // Compute-bound at 64 sequences × 64 tokens: the verify costs several weight passes.
        assert!(
            m.multi_token_gpu_s(64, 64 * 64, 64 * 500)
                > 3.0 * m.multi_token_gpu_s(64, 64, 64 * 500)
        );
        // A prefill's GPU part is its forward less the host cost.
        let chunks = [(512u32, 0u32)];
        let p = crate::spec::calibration::SGLANG_2025;
        let host = p.prefill_overhead_s + p.prefill_per_seq_overhead_s;
        let all = m.prefill_ns(&chunks) as f64 / 1e9;
        assert!((m.prefill_gpu_s(&chunks) + host - all).abs() < 2e-9);
    }
}
