//! A forward priced from measured kernel tables ([`crate::compute::kernels::compose`]): the
//! kernels' GPU time, the host's work overlapping it, and what the host adds on top.
//!
//! ```text
//! gpu  = per-token ops (GEMMs, elementwise, all-reduce, TP experts) + LM head
//!      + attention (prefill per-pair rate; decode max(floor, a + β·C) per batch size)
//!      + MLA decompress / absorb + recurrent scan (analytic) + routed experts (compute::moe)
//!      − the shorter of the shared experts and router + routed experts where sglang runs
//!        them on two streams (DeepSeek's block up to 1,024 tokens: `dual_stream_hidden_s`)
//! cpu  = eager launches (dense layers × eager_launch_per_layer_s + MoE layers ×
//!        eager_launch_per_moe_layer_s; a prefill, or a decode batch above cuda_graph_max_bs)
//!        + decode scheduling (decode_cpu_s + b × decode_cpu_per_seq_s)
//! step = exposed host + max(gpu, cpu)
//! exposed host = prefill_overhead_s + seqs × prefill_per_seq_overhead_s   (a prefill)
//!              = decode_overhead_s + b × decode_per_seq_overhead_s         (a decode)
//! ```
//!
//! The overlap is sglang's: CUDA-graph replay and the overlap scheduler
//! (`Scheduler.event_loop_overlap`) run the CPU's work for the next step while the GPU runs
//! this one, so host work shows only where it is longer than the GPU's.

use super::{DecodeTerms, Forward, StepModel};
use crate::compute::kernels::compose::KernelStep;

impl StepModel {
    /// Seconds of the recurrent scan and state traffic of `tokens` tokens in `seqs`
    /// sequences (hybrid models; 0 otherwise): the roofline of the calibration's
    /// efficiencies, as no table measures every mixer pdsim supports.
    fn mixer_s(&self, tokens: f64, seqs: f64, prefill: bool) -> f64 {
        if self.scan_flops_per_token_gpu == 0.0 && self.state_bytes_per_seq_gpu == 0.0 {
            return 0.0;
        }
        let p = &self.params;
        let eff = if prefill {
            p.prefill_flops_efficiency
        } else {
            p.decode_flops_efficiency
        };
        let compute = self.scan_flops_per_token_gpu * tokens / (self.peak_flops * eff);
        let memory = 2.0 * self.state_bytes_per_seq_gpu * seqs
            / (self.hbm_bytes_per_s * p.kv_hbm_efficiency);
        compute.max(memory)
    }

    /// The host time a decode step of `b` sequences hides behind its GPU work, seconds: what
    /// [`StepModel::forward_s`] takes as the step's floor (0 in the calibrations that price
    /// host costs serially). A speculative step's forwards share one.
    pub fn decode_cpu_floor_s(&self, b: u32) -> f64 {
        self.decode_cpu_s(b)
    }

    /// The host time a forward hides behind its GPU's, seconds: a prefill's eager launches
    /// (and the scheduling of the decode batch riding with it, if any); a decode's scheduling
    /// and, above the CUDA-graph limit, its eager launches.
    pub(super) fn hidden_host_s(&self, prefill: bool, batch: u32) -> f64 {
        if !prefill {
            return self.decode_cpu_s(batch);
        }
        self.eager_launch_s()
            + if batch > 0 && self.overlap {
                self.decode_sched_s(batch)
            } else {
                0.0
            }
    }

    /// The host time a decode of `b` sequences overlaps with the GPU's: scheduling (under the
    /// overlap scheduler), and the eager launches of a batch above the CUDA-graph limit.
    /// Seconds.
    pub(super) fn decode_cpu_s(&self, b: u32) -> f64 {
        let eager = if b > self.graph_max_bs {
            self.eager_launch_s()
        } else {
            0.0
        };
        if self.overlap {
            self.decode_sched_s(b) + eager
        } else {
            eager
        }
    }

    /// The scheduler's host work for a decode batch of `b` sequences, seconds
    /// (`decode_cpu_s + b × decode_cpu_per_seq_s`, and `dp_attention_cpu_s` on a DP-attention
    /// rank): hidden under the overlap scheduler, exposed without it.
    pub(super) fn decode_sched_s(&self, b: u32) -> f64 {
        let p = &self.params;
        let sched = p.decode_cpu_s + p.decode_cpu_per_seq_s * f64::from(b);
        if self.dp_attention {
            sched + p.dp_attention_cpu_s
        } else {
            sched
        }
    }

    /// The exposed host seconds of a forward with `seqs` prefill chunks (`prefill`: any) and a
    /// decode batch of `batch` (both step paths): the calibration's per-forward and
    /// per-sequence costs, through [`StepModel::exposed_host_s`].
    #[inline]
    pub(super) fn forward_host_s(&self, prefill: bool, seqs: f64, batch: u32) -> f64 {
        let p = &self.params;
        let serial = if prefill {
            p.prefill_overhead_s + p.prefill_per_seq_overhead_s * seqs
        } else {
            p.decode_overhead_s
        } + p.decode_per_seq_overhead_s * f64::from(batch);
        self.exposed_host_s(serial, batch)
    }

    /// A forward's exposed host seconds: `serial` (the calibration's per-forward and
    /// per-sequence costs), plus, without the overlap scheduler, the scheduling of the
    /// `batch` decode sequences it carries. With the scheduler on it is `serial` itself (the
    /// bit-identical results of every scenario that does not set the flag).
    #[inline]
    pub(super) fn exposed_host_s(&self, serial: f64, batch: u32) -> f64 {
        if self.overlap || batch == 0 {
            serial
        } else {
            serial + self.decode_sched_s(batch)
        }
    }

    /// The batch-size terms of a decode under measured kernels, in the roofline's form so the
    /// cached and coalesced paths evaluate them unchanged: the attention's floor in the
    /// compute slot (`flops0` over a denominator of 1), its line `a + β·C` in the memory slot,
    /// everything else of the GPU in the additive slot, the overlapped host work as the
    /// floor.
    pub(super) fn kernel_decode_terms(&self, k: &KernelStep, batch: u32) -> DecodeTerms {
        let p = &self.params;
        let b = f64::from(batch);
        let pipelined = self.decode_pipelined();
        let (floor, a, beta) = k.decode_attention(batch);
        let graph = batch <= self.graph_max_bs;
        let moe = if pipelined {
            0.0
        } else {
            self.moe.as_ref().map_or(0.0, |m| {
                m.time(b, false, p.decode_flops_efficiency, p.hbm_efficiency)
                    .total_s
            })
        };
        let fixed =
            k.dense_s(b, graph) + k.lm_head_s(b) + k.mla_absorb_s(b) + self.mixer_s(b, b, false)
                - self.shared_hidden_s(k, b, moe);
        DecodeTerms {
            flops0: floor,
            pair_flops: 0.0,
            // A DCP rank's attention reads its `1/dcp` token shard: the measured line's
            // per-context-token slope falls with it [INFERRED: the decode kernel's time per
            // context token tracks the KV it reads, as for a memory-bound kernel; the group's
            // `dcp`-times wider heads were not measured] (docs/sglang-pd.md §28).
            kv_per_token: match &self.dcp {
                Some(d) => beta / f64::from(d.size),
                None => beta,
            },
            compute_denom: 1.0,
            state_bytes: 0.0,
            t_weights: a,
            kv_denom: 1.0,
            allreduce: fixed + self.dcp_merge_s(b),
            moe,
            pipelined,
            batch,
            host: self.decode_host_s(batch),
            floor: self.decode_cpu_s(batch),
            empty: batch == 0,
            offloaded: self.offload.is_some(),
        }
    }

    /// One forward of any shape under measured kernels, seconds before rounding (see the
    /// module docs). A decode-only forward is [`StepModel::decode_s_with`] of its terms, so
    /// the cached path and this one agree to the bit.
    pub(super) fn kernel_forward_s(&self, k: &KernelStep, f: &Forward<'_>) -> f64 {
        let (mut new, mut prefix, mut seqs) = (0.0, 0.0, 0.0);
        for &(n, p) in f.chunks.iter().filter(|c| c.0 > 0) {
            new += f64::from(n);
            prefix += f64::from(p);
            seqs += 1.0;
        }
        let b = f64::from(f.batch);
        let tokens = new + b;
        if tokens == 0.0 {
            return 0.0;
        }
        if new == 0.0 && !self.decode_pipelined() {
            let t = self.kernel_decode_terms(k, f.batch);
            if !t.offloaded {
                return self.decode_s_with(&t, f.context_tokens);
            }
            // The terms' step with the offloaded weights' fetches in the GPU time.
            let ctx = f.context_tokens as f64;
            let gpu = t.flops0.max(t.t_weights + t.kv_per_token * ctx) + t.allreduce + t.moe;
            return t.host + self.offloaded(gpu).max(t.floor);
        }
        let p = &self.params;
        let ctx = f.context_tokens as f64;
        let graph = new == 0.0 && f.batch <= self.graph_max_bs;
        let decode_attn = if f.batch > 0 {
            k.decode_attention_s(f.batch, ctx)
        } else {
            0.0
        };
        // Everything of the forward but the routed experts of an expert model.
        let body = k.dense_s(tokens, graph)
            + k.prefill_attention_s(f.chunks)
            + decode_attn
            + k.mla_decompress_s(new + prefix)
            + k.mla_absorb_s(b)
            + self.mixer_s(tokens, seqs + b, new > 0.0);
        let lm = k.lm_head_s(seqs + b);
        let gpu = if new == 0.0 {
            // A pipelined decode (two-batch overlap over DeepEP's low-latency kernels): the
            // MoE layers' share of the body runs inside sglang's two-micro-batch schedule, one
            // micro-batch (half the batch and its context) against the other's all-to-all.
            let (half, core) = self.kernel_half_batch_s(k, b, ctx);
            let m = self
                .moe
                .as_ref()
                .expect("a pipelined decode has an expert model")
                .decode_time(b, p.decode_flops_efficiency, p.hbm_efficiency, half, core);
            body * (1.0 - self.tbo_share) + lm + m.total_s
        } else {
            let moe = self.moe.as_ref().map_or(0.0, |m| {
                m.time(tokens, true, p.prefill_flops_efficiency, p.hbm_efficiency)
                    .total_s
            });
            body + lm + moe - self.shared_hidden_s(k, tokens, moe)
        };
        let gpu = self.offloaded(gpu);
        let host = self.forward_host_s(new > 0.0, seqs, f.batch);
        let cpu = self.hidden_host_s(new > 0.0, f.batch);
        host + gpu.max(cpu)
    }

    /// [`StepModel::multi_token_gpu_s`] under measured kernels: the per-token work of all
    /// `tokens`, the LM head on each, and the decode attention of the batch over its contexts
    /// and the new tokens before each (the KV is read once per sequence: the queries of one
    /// sequence share it, so the attention is the decode kernel's at the longer context),
    /// floored by the host work it overlaps. With one token per sequence it is the decode
    /// forward less its exposed host time.
    pub(super) fn kernel_multi_token_gpu_s(
        &self,
        k: &KernelStep,
        batch: u32,
        tokens: u64,
        context_tokens: u64,
    ) -> f64 {
        let p = &self.params;
        if tokens == u64::from(batch) && !self.decode_pipelined() {
            let mut t = self.kernel_decode_terms(k, batch);
            t.floor = 0.0;
            return self.decode_s_with(&t, context_tokens) - t.host;
        }
        let (b, t, ctx) = (f64::from(batch), tokens as f64, context_tokens as f64);
        let graph = batch <= self.graph_max_bs;
        let attn = k.decode_attention_s(batch, ctx + (t - b));
        let body = k.dense_s(t, graph) + attn + k.mla_absorb_s(t) + self.mixer_s(t, b, false);
        let gpu = if self.decode_pipelined() {
            let (half, core) = self.kernel_half_batch_s(k, t, ctx + (t - b));
            let m = self
                .moe
                .as_ref()
                .expect("a pipelined decode has an expert model")
                .decode_time(t, p.decode_flops_efficiency, p.hbm_efficiency, half, core);
            body * (1.0 - self.tbo_share) + k.lm_head_s(t) + m.total_s
        } else {
            let moe = self.moe.as_ref().map_or(0.0, |m| {
                m.time(t, false, p.decode_flops_efficiency, p.hbm_efficiency)
                    .total_s
            });
            body + k.lm_head_s(t) + moe - self.shared_hidden_s(k, t, moe)
        };
        self.offloaded(gpu)
    }

    /// Seconds of a forward over `tokens` tokens on this rank that sglang's second stream
    /// hides: the shorter of the shared experts and the router with the routed experts
    /// (`moe_s` of them priced by the expert model), where the model runs them side by side
    /// ([`KernelStep::dual_stream_hidden_s`]); 0 elsewhere.
    #[inline]
    fn shared_hidden_s(&self, k: &KernelStep, tokens: f64, moe_s: f64) -> f64 {
        let block = self.moe.as_ref().map_or(tokens, |m| m.block_tokens(tokens));
        k.dual_stream_hidden_s(tokens, block, moe_s)
    }

    /// Under measured kernels, one micro-batch's attention and dense seconds inside the MoE
    /// layers of a pipelined decode of `b` sequences over `ctx` context tokens, and of them
    /// its attention core (the decode attention — the MLA module table's projections with
    /// it, which it does not split — and the absorbed matmuls).
    pub(super) fn kernel_half_batch_s(&self, k: &KernelStep, b: f64, ctx: f64) -> (f64, f64) {
        let graph = (b as u32) <= self.graph_max_bs;
        let core =
            k.decode_attention_s(((b / 2.0).ceil()) as u32, ctx / 2.0) + k.mla_absorb_s(b / 2.0);
        (
            (k.dense_s(b / 2.0, graph) + core) * self.tbo_share,
            core * self.tbo_share,
        )
    }
}
