//! DP attention: how an instance's DP ranks become what the simulation schedules.
//!
//! With `enable_dp_attention`, an sglang instance of `tp_size` GPUs runs `dp_size` attention
//! ranks of `tp_size / dp_size` GPUs each; every rank has its own scheduler, running batch and
//! KV pool (`DataParallelController`, sglang v0.4.6 `managers/data_parallel_controller.py`),
//! and a request lives on exactly one rank: its KV is on that rank's GPUs and its PD transfer
//! runs between the prefill rank's and the decode rank's GPUs (the transfer contract sees the
//! attention TP, `get_attention_tp_size()`). pdsim therefore simulates each DP rank as its own
//! server (its own `Core`: GPUs, pages, batch) and the router dispatches to DP ranks directly,
//! as sgl-router does in its DP-aware mode (`--dp-aware`: each `(worker, dp_rank)` is a routing
//! target). The ranks of one instance step in lockstep in sglang (an idle rank runs an idle
//! batch so the MoE layers meet); the step-time model prices that by assuming the ranks carry
//! equal load (`compute::moe`).

use crate::fabric::GpuId;

/// The GPUs of each DP rank of an instance placed on `gpus` (rank order), each rank taking
/// `gpus.len() / dp` consecutive GPUs: sglang's attention TP groups are consecutive ranks.
pub fn rank_gpus(gpus: &[GpuId], dp: u32) -> Vec<Vec<GpuId>> {
    let dp = dp.max(1) as usize;
    let per = (gpus.len() / dp).max(1);
    gpus.chunks(per).map(<[GpuId]>::to_vec).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_take_consecutive_gpus() {
        let gpus: Vec<GpuId> = (0..16).map(|g| GpuId::from_global(g, 8)).collect();
        let r = rank_gpus(&gpus, 4);
        assert_eq!(r.len(), 4);
        assert_eq!(r[1], gpus[4..8].to_vec());
        assert_eq!(rank_gpus(&gpus, 16)[15], vec![gpus[15]]);
        assert_eq!(rank_gpus(&gpus, 1)[0], gpus);
    }
}
