//! `pools.<name>.server.pp_size` (sglang `--pp-size`): pipeline-parallel prefill
//! (`docs/sglang-pd.md` §27). What pdsim models, and the refusals of what it does not, each
//! naming the key.

use crate::config::Role;
use crate::scenario::file;
use crate::scenario::{Checker, ScenarioError, divisors};
use crate::spec::server::Parallel;
use crate::spec::{ModelSpec, ServerArgs};

/// The most micro-batches beyond `pp_size` pdsim keeps in flight (`pp_async_batch_depth`):
/// sglang sets no bound; one keeps `pp_size + depth` within `u32` and a ring of that many
/// buffers a GPU could hold.
const MAX_ASYNC_DEPTH: u32 = 64;

/// Checks `pp_size` on pool `p` (key `key`, `pools.<name>`) with its resolved model, server
/// args and parallelism. Without pipeline parallelism (`pp_size = 1`) nothing is checked.
pub(super) fn check(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    (model, server, parallel): (&ModelSpec, &ServerArgs, &Parallel),
) -> Result<(), ScenarioError> {
    let k = format!("{key}.server.pp_size");
    let pp = server.pp_size;
    if pp == 0 {
        return Err(c.err(
            &k,
            "must be ≥ 1 (sglang --pp-size: pipeline stages, 1 = no pipeline parallelism)",
        ));
    }
    let depth = server.pp_async_batch_depth;
    let dk = format!("{key}.server.pp_async_batch_depth");
    if pp == 1 && depth > 0 {
        return Err(c.err(
            &dk,
            "takes effect only with pp_size > 1 (sglang's pp_loop_size = pp_size + pp_async_batch_depth rotates a PP server's micro-batches; without stages it is never read): leave it out (0) or set pp_size",
        ));
    }
    if depth > MAX_ASYNC_DEPTH {
        return Err(c.err(
            &dk,
            format!(
                "{depth} is more than pdsim's bound of {MAX_ASYNC_DEPTH} micro-batches beyond pp_size (sglang's own PD tests run 2); use 0..={MAX_ASYNC_DEPTH}"
            ),
        ));
    }
    if pp == 1 {
        return Ok(());
    }
    match p.role {
        Role::Prefill => {}
        Role::Decode => {
            return Err(c.err(
                &k,
                format!(
                    "pdsim takes --pp-size on prefill pools only (pool {:?} is decode): sglang's CommonKVReceiver accepts a decode pp_size only equal to the prefill's (\"Decode pp size should be equal to prefill pp size or 1\") and then runs event_loop_pp_disagg_decode, whose stage-by-stage decode pdsim does not model; a PP prefill sends every stage's layers to a decode of pp_size 1. Leave pp_size out (1) here",
                    p.name
                ),
            ));
        }
        Role::Colocated => {
            return Err(c.err(
                &k,
                format!(
                    "pdsim takes --pp-size on PD prefill pools only (pool {:?} is colocated): sglang's event_loop_pp for a plain server, with decode batches in the pipeline, is not modelled. Leave pp_size out (1) here",
                    p.name
                ),
            ));
        }
    }
    let layers = model.num_layers;
    if pp > layers {
        return Err(c.err(
            &k,
            format!(
                "{pp} stages for the {layers} layers of {}: sglang's get_pp_indices would leave a stage without a layer; use at most {layers}",
                model.name
            ),
        ));
    }
    let refuse = |what: &str| -> Result<(), ScenarioError> {
        Err(c.err(
            &k,
            format!("pipeline-parallel prefill is not modelled {what}; leave pp_size out (1)"),
        ))
    };
    if model.is_hybrid() || model.is_swa() {
        return refuse(&format!(
            "for {}, a model with recurrent or sliding-window state: each stage would send the state of its own layers (the state pairing per stage was not read)",
            model.name
        ));
    }
    if server.speculative.is_some() {
        return refuse(
            "with speculative decoding: prefill-side PP with EAGLE is sglang PR #33584, open (not merged)",
        );
    }
    if parallel.dp_ranks() > 1 || parallel.ep_size > 1 || server.attn_tp_size != server.tp_size {
        return refuse(
            "with DP attention, expert parallelism or an attention TP below tp_size (enable_dp_attention, ep_size, attn_tp_size)",
        );
    }
    let s = &p.server;
    if s.enable_hierarchical_cache || s.cpu_offload_gb.is_some() || s.offload_group_size.is_some() {
        return refuse(
            "with HiCache or weight offload (enable_hierarchical_cache, cpu_offload_gb, offload_group_size): their per-GPU tiers and copies are priced for one stage",
        );
    }
    if p.step_times.is_some() {
        return refuse(
            "with measured step times (step_times): a profile measures one stage layout, not a pipeline",
        );
    }
    Ok(())
}

/// The pool's GPUs per instance, `tp_size × pp_size`, pack into a node or span whole nodes
/// (as `tp_size` alone must without PP).
pub(super) fn check_shape(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    gpus_per_node: u32,
) -> Result<(), ScenarioError> {
    let s = &p.server;
    if s.pp_size <= 1 {
        return Ok(());
    }
    let gpus = s.tp_size.saturating_mul(s.pp_size);
    if !(gpus_per_node.is_multiple_of(gpus) || gpus.is_multiple_of(gpus_per_node)) {
        return Err(c.err(
            &format!("{key}.server.pp_size"),
            format!(
                "tp_size {} × pp_size {} = {gpus} GPUs an instance neither divides hardware.gpus_per_node = {gpus_per_node} nor is a multiple of it (an instance spans whole nodes); make tp_size × pp_size one of {} or a multiple of {gpus_per_node}",
                s.tp_size,
                s.pp_size,
                divisors(gpus_per_node),
            ),
        ));
    }
    Ok(())
}
