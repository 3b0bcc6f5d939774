//! `[pools.server]`'s large-MoE keys: DP attention and expert parallelism, checked against
//! each other, the GPUs of the instance and the model (sglang's own start-up checks in
//! `server_args.py::_handle_data_parallelism` / `_handle_moe_kernel_config`, v0.4.6, and the
//! model files that implement DP attention).

use super::file::ServerSection;
use super::{Checker, ScenarioError, divisors};
use crate::config::Role;
use crate::spec::ModelSpec;
use crate::spec::server::{A2aBackend, LoadBalanceMethod, Parallel};

/// The checked parallelism of one pool and the attention TP it implies.
pub(super) struct Checked {
    /// DP attention and EP.
    pub args: Parallel,
    /// Attention TP (`tp_size / dp_size` with DP attention).
    pub attn_tp: u32,
}

/// Checks the DP/EP keys of pool `key` (`pools.<name>`): data-parallel attention first (it
/// fixes the attention TP), then expert parallelism; the first broken rule is the error.
pub(super) fn check(
    c: &Checker,
    key: &str,
    s: &ServerSection,
    domain_gpus: u32,
) -> Result<Checked, ScenarioError> {
    let attn_tp = check_dp(c, key, s, domain_gpus)?;
    check_ep(c, key, s, domain_gpus)?;
    Ok(Checked {
        args: Parallel {
            dp_size: s.dp_size,
            enable_dp_attention: s.enable_dp_attention,
            ep_size: s.ep_size,
            moe_a2a_backend: s.moe_a2a_backend,
            ep_num_redundant_experts: s.ep_num_redundant_experts,
            enable_eplb: s.enable_eplb,
            enable_two_batch_overlap: s.enable_two_batch_overlap,
            load_balance_method: s.load_balance_method,
        },
        attn_tp,
    })
}

/// Checks `dp_size`, `enable_dp_attention` and `attn_tp_size` against `tp_size` and the
/// node, and returns the attention TP they give.
fn check_dp(
    c: &Checker,
    key: &str,
    s: &ServerSection,
    domain_gpus: u32,
) -> Result<u32, ScenarioError> {
    let k = |f: &str| format!("{key}.server.{f}");
    let tp = s.tp_size;
    if s.dp_size == 0 || !tp.is_multiple_of(s.dp_size) {
        return Err(c.err(
            &k("dp_size"),
            format!(
                "{} does not divide tp_size = {tp} (each DP rank runs attention on tp_size / dp_size GPUs); use one of {}",
                s.dp_size,
                divisors(tp)
            ),
        ));
    }
    if s.dp_size > 1 && !s.enable_dp_attention {
        return Err(c.err(
            &k("dp_size"),
            format!(
                "dp_size = {} without enable_dp_attention = true is sglang's replicated data parallelism, which pdsim models as more instances: set enable_dp_attention = true, or dp_size = 1 and instances × {}",
                s.dp_size, s.dp_size
            ),
        ));
    }
    let dp = if s.enable_dp_attention { s.dp_size } else { 1 };
    let attn_tp = tp / dp;
    if let Some(a) = s.attn_tp_size
        && s.enable_dp_attention
        && a != attn_tp
    {
        return Err(c.err(
            &k("attn_tp_size"),
            format!(
                "{a} contradicts enable_dp_attention: attention TP is tp_size / dp_size = {tp} / {dp} = {attn_tp}; leave attn_tp_size out"
            ),
        ));
    }
    let attn_tp = s.attn_tp_size.unwrap_or(attn_tp);
    if attn_tp == 0 || !tp.is_multiple_of(attn_tp) {
        return Err(c.err(
            &k("attn_tp_size"),
            format!(
                "{attn_tp} must divide tp_size = {tp} (attention TP = tp_size / dp); use one of {}",
                divisors(tp)
            ),
        ));
    }
    // Attention TP may span NVLink domains: sglang runs a dense model at tp_size = 16 over two
    // 8-GPU nodes (`--nnodes 2 --node-rank r --dist-init-addr`), one TP group across both,
    // its all-reduces crossing the inter-node network (priced hierarchically:
    // `compute::model::Interconnect`). An instance spans whole nodes (`check_shape`).
    let _ = domain_gpus;
    let max = crate::vocab::limits::MAX_ATTN_TP;
    if attn_tp > max {
        return Err(c.err(
            &k("tp_size"),
            format!(
                "attention TP tp_size / dp_size = {attn_tp} is above {max} ranks, pdsim's bound for one instance; use dp_size ≥ {} with enable_dp_attention, or a smaller tp_size",
                tp.div_ceil(max)
            ),
        ));
    }
    Ok(attn_tp)
}

/// Checks `ep_size` and the MoE features that need expert parallelism (the all-to-all
/// backend, redundant experts, EPLB, two-batch overlap) against `tp_size` and the node.
fn check_ep(
    c: &Checker,
    key: &str,
    s: &ServerSection,
    domain_gpus: u32,
) -> Result<(), ScenarioError> {
    let k = |f: &str| format!("{key}.server.{f}");
    let tp = s.tp_size;
    if s.ep_size == 0 || s.ep_size > tp {
        return Err(c.err(
            &k("ep_size"),
            format!(
                "{} is beyond the instance's {tp} GPUs (tp_size): experts are spread over the instance's own GPUs; use 1 or {tp}",
                s.ep_size
            ),
        ));
    }
    if s.ep_size != 1 && s.ep_size != tp {
        return Err(c.err(
            &k("ep_size"),
            format!(
                "{} must be 1 or tp_size = {tp} (sglang sets ep_size = tp_size when expert parallelism is on)",
                s.ep_size
            ),
        ));
    }
    if s.moe_a2a_backend == A2aBackend::Deepep && s.ep_size == 1 {
        return Err(c.err(
            &k("moe_a2a_backend"),
            format!("\"deepep\" needs expert parallelism: set ep_size = tp_size = {tp}"),
        ));
    }
    if s.ep_size > 1 && s.moe_a2a_backend == A2aBackend::None && tp > domain_gpus {
        return Err(c.err(
            &k("moe_a2a_backend"),
            "expert parallelism across NVLink domains (nodes, unless hardware.nvlink_domain_gpus joins them) needs an all-to-all backend: set moe_a2a_backend = \"deepep\"",
        ));
    }
    if s.ep_num_redundant_experts > 0 && s.ep_size == 1 {
        return Err(c.err(
            &k("ep_num_redundant_experts"),
            "redundant experts need expert parallelism (ep_size = tp_size); set it to 0",
        ));
    }
    if s.enable_eplb && s.ep_size == 1 {
        return Err(c.err(
            &k("enable_eplb"),
            "EPLB balances experts over EP ranks: it needs ep_size = tp_size; set it to false",
        ));
    }
    if s.enable_two_batch_overlap && s.moe_a2a_backend != A2aBackend::Deepep {
        return Err(c.err(
            &k("enable_two_batch_overlap"),
            "two-batch overlap hides DeepEP's all-to-all: it needs moe_a2a_backend = \"deepep\" (sglang asserts the same)",
        ));
    }
    Ok(())
}

/// Checks `load_balance_method` against the pool's role: `follow_bootstrap_room` needs a
/// bootstrap room, which only PD requests carry (sglang's `follow_bootstrap_room_scheduler`
/// asserts "req.bootstrap_room should not be None" on a plain server).
pub(super) fn check_role(
    c: &Checker,
    key: &str,
    p: &Parallel,
    role: Role,
) -> Result<(), ScenarioError> {
    if role == Role::Colocated && p.load_balance_method == LoadBalanceMethod::FollowBootstrapRoom {
        return Err(c.err(
            &format!("{key}.server.load_balance_method"),
            format!(
                "follow_bootstrap_room needs the bootstrap room of a PD request; a colocated server has none (sglang asserts it): use one of {}",
                LoadBalanceMethod::NAMES
                    .iter()
                    .filter(|n| **n != "follow_bootstrap_room")
                    .map(|n| format!("\"{n}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    Ok(())
}

/// Checks that `model` supports what `p` asks: DP attention only on the MoE models whose
/// sglang model files implement it (DeepSeek-V2/V3 MLA, Qwen2/3-MoE, Kimi-Linear; not dense
/// Llama/Qwen3 nor the GDN/Mamba2 hybrids); EP only on a MoE model, with at least one expert
/// per GPU.
pub(super) fn check_model(
    c: &Checker,
    key: &str,
    p: &Parallel,
    model: &ModelSpec,
) -> Result<(), ScenarioError> {
    let k = |f: &str| format!("{key}.server.{f}");
    let dp_capable = model.moe.is_some() && (model.is_mla() || !model.is_hybrid());
    if p.enable_dp_attention && !dp_capable {
        return Err(c.err(
            &k("enable_dp_attention"),
            format!(
                "sglang has no DP attention for {} ({}); DP attention serves MoE models with MLA or plain attention (deepseek-v3, qwen3-235b-a22b, kimi-linear-48b-a3b): set enable_dp_attention = false",
                model.name,
                if model.moe.is_none() {
                    "a dense model"
                } else {
                    "a GDN/Mamba hybrid"
                }
            ),
        ));
    }
    if p.ep_size > 1 {
        let Some(moe) = &model.moe else {
            return Err(c.err(
                &k("ep_size"),
                format!(
                    "model {} has no experts to spread: set ep_size = 1",
                    model.name
                ),
            ));
        };
        if p.ep_size > moe.experts + p.ep_num_redundant_experts {
            return Err(c.err(
                &k("ep_size"),
                format!(
                    "{} GPUs for {} experts (+{} redundant): every EP rank needs an expert; use at most {}",
                    p.ep_size,
                    moe.experts,
                    p.ep_num_redundant_experts,
                    moe.experts + p.ep_num_redundant_experts
                ),
            ));
        }
        if !(moe.experts + p.ep_num_redundant_experts).is_multiple_of(p.ep_size) {
            return Err(c.err(
                &k("ep_num_redundant_experts"),
                format!(
                    "{} experts + {} redundant do not split evenly over ep_size = {}; choose ep_num_redundant_experts so that the sum is a multiple of {}",
                    moe.experts, p.ep_num_redundant_experts, p.ep_size, p.ep_size
                ),
            ));
        }
    }
    Ok(())
}
