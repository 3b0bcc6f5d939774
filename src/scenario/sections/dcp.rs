//! `pools.<name>.server.dcp_size` (sglang `--dcp-size`): decode context parallelism on a PD
//! decode pool (`docs/sglang-pd.md` §28). What pdsim models, and the refusals of what sglang or
//! pdsim does not run, each naming the key. The checks that need the `[sglang]` section (the
//! transfer backend, the KV checksum) are in `sections::plans`, where both are known.

use crate::config::Role;
use crate::scenario::file;
use crate::scenario::{Checker, ScenarioError, divisors};
use crate::sglang::dcp::{HICACHE_REFUSAL, RADIX_REFUSAL};
use crate::spec::server::Parallel;
use crate::spec::{ModelSpec, ServerArgs};

/// Checks `dcp_size` on pool `p` (key `key`, `pools.<name>`) with its resolved model, server
/// args and parallelism. Without decode context parallelism (`dcp_size = 1`) nothing is checked.
pub(super) fn check(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    (model, server, parallel): (&ModelSpec, &ServerArgs, &Parallel),
) -> Result<(), ScenarioError> {
    let k = format!("{key}.server.dcp_size");
    let dcp = server.dcp_size;
    if dcp == 0 {
        return Err(c.err(
            &k,
            "must be ≥ 1 (sglang --dcp-size: decode context-parallel ranks per TP group, 1 = none)",
        ));
    }
    if dcp == 1 {
        return Ok(());
    }
    match p.role {
        Role::Decode => {}
        Role::Prefill => {
            return Err(c.err(
                &k,
                format!(
                    "pdsim takes --dcp-size on decode pools only (pool {:?} is prefill): sglang runs a DCP prefill only into a decode of the same DCP layout and warns that it \"usually adds communication overhead without improving prefill performance\" (handle_pd_disaggregation); pdsim models the DCP1 → DCP-N relayout. Leave dcp_size out (1) here",
                    p.name
                ),
            ));
        }
        Role::Colocated => {
            return Err(c.err(
                &k,
                format!(
                    "pdsim takes --dcp-size on PD decode pools only (pool {:?} is colocated): a plain server's DCP extend (the prefix all-gather of its MLA prefill) is not modelled. Leave dcp_size out (1) here",
                    p.name
                ),
            ));
        }
    }
    let tp = server.tp_size;
    if !tp.is_multiple_of(dcp) {
        return Err(c.err(
            &k,
            format!(
                "{dcp} does not divide tp_size {tp}: sglang takes the DCP ranks from inside each TP group (tp_size % dcp_size == 0 at distributed initialisation); use one of {}",
                divisors(tp)
            ),
        ));
    }
    let refuse = |what: &str| -> Result<(), ScenarioError> {
        Err(c.err(
            &k,
            format!("decode context parallelism is not modelled {what}; leave dcp_size out (1)"),
        ))
    };
    if !model.is_mla() || model.is_hybrid() {
        return refuse(&format!(
            "for {}: sglang's DCP1 → DCP-N relayout (build_dcp_token_transfer_plan, send_kvcache_dcp) sends MLA latent rows only (MLA or hybrid-MLA pools; PR #35762 packs \"owned MLA rows\"), and pdsim models plain MLA models (a hybrid-MLA model's state keeps its own attention-TP mapping, not read here)",
            model.name
        ));
    }
    let s = &p.server;
    if s.disaggregation_decode_enable_radix_cache {
        return Err(c.err(&k, format!("{RADIX_REFUSAL} (sglang handle_pd_disaggregation; set disaggregation_decode_enable_radix_cache = false or dcp_size = 1)")));
    }
    if s.enable_hierarchical_cache {
        return Err(c.err(&k, format!("{HICACHE_REFUSAL} (sglang handle_pd_disaggregation; set enable_hierarchical_cache = false or dcp_size = 1)")));
    }
    if server.speculative.is_some() {
        return refuse(
            "with speculative decoding: the draft's KV is replicated on every DCP rank, not sharded, and its relayout (PR #40500, draft head slices) and the DCP-aware target verify were not read",
        );
    }
    if parallel.dp_ranks() > 1 || parallel.ep_size > 1 || server.attn_tp_size != tp {
        return refuse(
            "with DP attention or expert parallelism (enable_dp_attention, ep_size, attn_tp_size below tp_size): the DCP groups are slices of the attention TP group, modelled for plain TP",
        );
    }
    if s.disaggregation_decode_enable_offload_kvcache
        || s.cpu_offload_gb.is_some()
        || s.offload_group_size.is_some()
        || s.enable_unified_memory
    {
        return refuse(
            "with decode KV offload, weight offload or the unified memory pool: their per-rank copies of a DCP-sharded pool were not read (sglang asserts the unified pool has no DCP write path)",
        );
    }
    if p.step_times.is_some() {
        return refuse(
            "with measured step times (step_times): a profile measures one attention layout, not a context split over ranks",
        );
    }
    Ok(())
}
