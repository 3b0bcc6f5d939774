//! Decode context parallelism (`--dcp-size`, `docs/sglang-pd.md` §28) in the decode step: each
//! rank of a DCP group reads its `1/dcp` of every sequence's KV, and the group merges the
//! partial attention outputs by their log-sum-exp.
//!
//! What sglang runs for MLA with the default `--dcp-comm-backend ag_rs` [READ in a study of
//! sglang's DCP code, stored id 67368088472, §6 and §9.1, which cites
//! `layers/dcp/comm.py::all_gather_q_for_mla_decode` and `cp_lse_ag_out_rs_mla`; the sglang
//! files themselves were not read], per MLA layer of a decode step:
//!
//! 1. **Q all-gather** over the DCP group along the head dimension: each rank computed its
//!    `H / tp` absorbed query heads (`kv_lora_rank + qk_rope_head_dim` wide, activation
//!    dtype); after it every rank holds the group's `H · dcp / tp` heads, so it attends the
//!    same heads as its group peers over its own tokens. Attention FLOPs per rank are
//!    unchanged (`dcp` times the heads over `1/dcp` of the context); its KV reads fall `dcp`
//!    times.
//! 2. **LSE all-gather**: one FP32 log-sum-exp per (sequence, group head).
//! 3. **Output reduce-scatter** in FP32 of the corrected partial outputs (`kv_lora_rank` wide,
//!    before `w_vc`), each rank keeping its own heads.
//!
//! Each collective is priced as half of the step model's all-reduce over the group (an
//! all-reduce is a reduce-scatter and an all-gather): `(n − 1)/n` of the gathered (or reduced)
//! message over the all-reduce's link at its efficiency (`ComputeParams::nvlink_efficiency`),
//! and half its latency steps — `⌈log2 n⌉` where the calibration prices the all-reduce with
//! `2⌈log2 n⌉` (`allreduce_log_steps`), else the ring's `n − 1`. `a2a` / `fi_a2a` and the replicated-Q
//! projection (`--dcp-replicate-q-proj`) are not modelled: pdsim prices the default.

/// The cross-rank merge of a DCP decode step: its collectives' sizes and the group's link.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcpMerge {
    /// `--dcp-size`: ranks of a group.
    pub size: u32,
    /// MLA layers (each runs the three collectives).
    pub layers: u32,
    /// Query heads of one DCP group (`q_heads · dcp / tp`).
    pub group_heads: u32,
    /// Bytes of one absorbed query head of one sequence (`(kv_lora_rank + qk_rope_head_dim) ×
    /// activation bytes`).
    pub q_head_bytes: u64,
    /// Bytes of one head's partial output of one sequence in FP32 (`kv_lora_rank × 4`).
    pub out_head_bytes: u64,
    /// One-way link bytes/s of one GPU toward its group peers, at the link's efficiency.
    pub link_bytes_per_s: f64,
    /// Latency of one collective step, seconds (`allreduce_step_latency_s`, plus the
    /// network's across nodes).
    pub step_latency_s: f64,
    /// `allreduce_log_steps`: `⌈log2 n⌉` latency steps a collective, else `n − 1`.
    pub log_steps: bool,
}

/// Bytes of one head's log-sum-exp of one sequence (FP32).
const LSE_BYTES: u64 = 4;

impl DcpMerge {
    /// The group's view of an MLA model served at `tp` with `dcp` ranks a group, over a link
    /// of `link_bytes_per_s` (one-way, at its efficiency) with `step_latency_s` a step and
    /// `log_steps` as the calibration's all-reduce: `None` for a model without MLA.
    pub fn mla(
        model: &crate::spec::ModelSpec,
        tp: u32,
        dcp: u32,
        (link_bytes_per_s, step_latency_s, log_steps): (f64, f64, bool),
    ) -> Option<Self> {
        let crate::spec::KvAttention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } = model.attention
        else {
            return None;
        };
        Some(Self {
            size: dcp,
            layers: model.kv_layers(),
            group_heads: (model.q_heads * dcp / tp.max(1)).max(1),
            q_head_bytes: u64::from(kv_lora_rank + qk_rope_head_dim)
                * u64::from(model.activation_bytes),
            out_head_bytes: u64::from(kv_lora_rank) * 4,
            link_bytes_per_s,
            step_latency_s,
            log_steps,
        })
    }

    /// Seconds one decode step of `batch` sequences spends merging: per layer a Q all-gather,
    /// an LSE all-gather and an output reduce-scatter, each a ring of `size` ranks.
    pub fn secs(&self, batch: f64) -> f64 {
        if batch <= 0.0 || self.size <= 1 {
            return 0.0;
        }
        let n = f64::from(self.size);
        let steps = if self.log_steps {
            n.log2().ceil()
        } else {
            n - 1.0
        };
        let heads = batch * f64::from(self.group_heads);
        let ring = |bytes: f64| {
            steps * self.step_latency_s + (n - 1.0) / n * bytes / self.link_bytes_per_s
        };
        let per_layer = ring(heads * self.q_head_bytes as f64)
            + ring(heads * LSE_BYTES as f64)
            + ring(heads * self.out_head_bytes as f64);
        f64::from(self.layers) * per_layer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DeepSeek-V3 (128 heads, latent 512 + rope 64, BF16, 61 MLA layers) at TP 8 / DCP 8 on
    /// a 450 GB/s link at 0.8 and 5 µs a step, batch 1: every rank gathers the group's 128
    /// heads. Q: 128 × 576 × 2 = 147,456 B; LSE: 512 B; output: 128 × 2,048 = 262,144 B.
    /// Ring steps: per layer 3 × 7 × 5 µs + 7/8 × 410,112 B / 360e9 B/s = 105 µs + 0.99676 µs;
    /// log steps: 3 × 3 × 5 µs = 45 µs of latency instead.
    #[test]
    fn deepseek_tp8_dcp8_by_hand() {
        let m = crate::spec::model::preset("deepseek-v3").expect("a preset");
        let d = DcpMerge::mla(&m, 8, 8, (450e9 * 0.8, 5e-6, false)).expect("MLA");
        assert_eq!(
            (d.group_heads, d.q_head_bytes, d.out_head_bytes),
            (128, 1152, 2048)
        );
        assert_eq!(d.layers, 61);
        let wire = 7.0 / 8.0 * 410_112.0 / 360e9;
        assert!((d.secs(1.0) - 61.0 * (3.0 * 7.0 * 5e-6 + wire)).abs() < 1e-12);
        let log = DcpMerge {
            log_steps: true,
            ..d
        };
        assert!((log.secs(1.0) - 61.0 * (3.0 * 3.0 * 5e-6 + wire)).abs() < 1e-12);
        assert_eq!(d.secs(0.0), 0.0);
        // Llama has no latent: no merge model.
        let l = crate::spec::model::preset("llama-3.1-8b").expect("a preset");
        assert!(DcpMerge::mla(&l, 8, 2, (1.0, 0.0, false)).is_none());
    }
}
