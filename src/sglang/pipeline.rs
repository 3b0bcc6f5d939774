//! Pipeline-parallel prefill (`--pp-size`, `docs/sglang-pd.md` §27): what a forward pays to
//! cross its stages. A pure cost: no clock, no state.
//!
//! sglang runs a PP prefill server with `event_loop_pp_disagg_prefill`
//! (`managers/scheduler_pp_mixin.py`): stage `k` runs its layers of a micro-batch, then sends
//! the hidden states and the residual (`PPProxyTensors`) to stage `k + 1`
//! (`pp_group.send_tensor_dict`, each TP rank its `1/tp` share, all-gathered on the receiving
//! stage). A micro-batch's forward is the sum of its stages' layers plus `pp − 1` such sends.
//!
//! pdsim's model: the forward of a batch is the step model's forward of the whole model at the
//! stage's TP (every layer once, on `tp_size` GPUs: the sum of the stages' layers, the
//! embedding and LM head once, the per-forward host cost once) plus `pp − 1` hops of
//! [`PpForward::hop_ns`]. One batch is in the pipeline at a time [simplification]: sglang
//! keeps `pp_loop_size = pp_size + pp_async_batch_depth` micro-batches in flight
//! (`init_pp_loop_state`), so under load its stages overlap and its throughput approaches
//! `pp_size` batches per forward time; pdsim's PP prefill serves one batch per forward time, a
//! lower bound on its throughput (a lone prompt's time is the same either way).

use crate::engine::Nanos;

/// What one forward of a PP prefill instance pays to hand its activations from stage to
/// stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PpForward {
    /// Hand-offs per forward: `pp_size − 1`.
    pub hops: u32,
    /// Bytes one token carries across a hop: the hidden states and the residual,
    /// `2 × hidden_size × activation bytes`.
    pub bytes_per_token: u64,
    /// The stage's TP ranks: each sends its `1/tp` share in parallel.
    pub tp: u32,
    /// One rank's one-way link to the next stage, bytes/s, after the link efficiency: NVLink
    /// when the instance sits in one NVLink domain, else the GPU's share of its NICs.
    pub link_bytes_per_s: f64,
    /// Fixed latency of one hop, ns: one step of a collective (`allreduce_step_latency_s`),
    /// plus the network latency when the stages are on different nodes.
    pub latency_ns: Nanos,
}

impl PpForward {
    /// The activation hand-off of one hop for a forward of `tokens` tokens, ns (rounded up).
    pub fn hop_ns(&self, tokens: u64) -> Nanos {
        let bytes = (tokens * self.bytes_per_token) as f64 / f64::from(self.tp.max(1));
        self.latency_ns + (bytes / self.link_bytes_per_s * 1e9).ceil() as Nanos
    }

    /// What a forward of `tokens` tokens adds over the same forward on one stage, ns: `hops`
    /// hand-offs.
    pub fn extra_ns(&self, tokens: u64) -> Nanos {
        u64::from(self.hops) * self.hop_ns(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B (hidden 4,096, BF16) over two TP-1 stages: 2,048 tokens carry
    /// 2 × 4,096 × 2 B = 16,384 B each, 33,554,432 B in all; at 100 GB/s that is 335,545 ns
    /// (rounded up), plus a 10 µs latency.
    #[test]
    fn one_hop_by_hand() {
        let f = PpForward {
            hops: 1,
            bytes_per_token: 16_384,
            tp: 1,
            link_bytes_per_s: 100e9,
            latency_ns: 10_000,
        };
        assert_eq!(f.hop_ns(2048), 10_000 + 335_545);
        assert_eq!(f.extra_ns(2048), f.hop_ns(2048));
        let four = PpForward {
            hops: 3,
            tp: 2,
            ..f
        };
        assert_eq!(four.extra_ns(2048), 3 * (10_000 + 167_773));
    }
}
