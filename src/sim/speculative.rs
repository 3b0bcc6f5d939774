//! Speculative decoding's servers and its summary: the draft's step model of a pool that
//! runs it (built as the target's, `step_model`), the state each server keeps
//! (`sglang::speculative`), and `summary.json`'s `speculative` section. Nothing here runs for
//! a pool without `speculative_algorithm`.

use super::{Interconnect, World, step_model};
use crate::compute::StepTimes;
use crate::config::{Pool, Role, Scenario};
use crate::metrics::summary::{SpecSummary, SpecTimeShare};
use crate::sglang::speculative::{SpecDecode, SpecPrefill, SpecStats};

/// The draft's step model on a server of `pool` (same GPUs, TP, DP/EP and KV dtype).
fn draft_model(sc: &Scenario, pool: &Pool, ic: &Interconnect) -> Option<crate::compute::StepModel> {
    let spec = pool.server.speculative.as_ref()?;
    let mut draft = pool.clone();
    draft.model = spec.draft_model(&pool.model);
    // The draft (an MTP layer, an EAGLE head) keeps its weights on the GPU whatever the
    // target offloads.
    draft.offload = None;
    Some(step_model(sc, &draft, ic))
}

/// A decode server's speculative state, if its pool runs speculative decoding.
pub(super) fn decode_state(
    sc: &Scenario,
    pool: &Pool,
    ic: &Interconnect,
    step: &StepTimes,
) -> Option<Box<SpecDecode>> {
    let spec = pool.server.speculative.as_ref()?;
    let p = pool.speculative.as_ref()?;
    // A measured profile is refused with speculation at validation.
    let StepTimes::Model(target) = step else {
        return None;
    };
    let draft = draft_model(sc, pool, ic)?;
    Some(Box::new(SpecDecode::new(
        target.clone(),
        draft,
        spec,
        (p.accept_rate, p.accept_rate_sd),
        sc.seed,
    )))
}

/// A prefill server's speculative state (its draft prefill), if its pool runs it.
pub(super) fn prefill_state(
    sc: &Scenario,
    pool: &Pool,
    ic: &Interconnect,
) -> Option<Box<SpecPrefill>> {
    draft_model(sc, pool, ic).map(|d| Box::new(SpecPrefill::new(d)))
}

impl World<'_> {
    /// `summary.json` `speculative`: one entry per pool that runs speculative decoding, in
    /// scenario order; empty when none does.
    pub(super) fn speculative_summary(&self) -> Vec<SpecSummary> {
        let mut out = Vec::new();
        for (i, pool) in self.sc.pools.iter().enumerate() {
            let Some(spec) = &pool.server.speculative else {
                continue;
            };
            let mine = |p: crate::vocab::ids::PoolId| p.idx() == i;
            let mut entry = SpecSummary {
                pool: pool.name.clone(),
                role: pool.role.as_str().to_string(),
                algorithm: spec.algorithm.as_str().to_string(),
                num_steps: spec.num_steps,
                eagle_topk: spec.eagle_topk,
                num_draft_tokens: spec.num_draft_tokens,
                accept_rate_model: None,
                accept_length_model: None,
                accept_length_mean: None,
                accept_rate: None,
                steps: 0,
                time_share: None,
                draft_prefill_share: None,
            };
            match pool.role {
                Role::Decode => {
                    let mut s = SpecStats::default();
                    for d in self.decodes.iter().filter(|d| mine(d.core.pool)) {
                        if let Some(x) = d.spec.as_deref() {
                            s.add(&x.stats);
                        }
                    }
                    let k = spec.max_accepted();
                    let alpha = pool.speculative.as_ref().map(|p| p.accept_rate);
                    entry.accept_rate_model = alpha;
                    entry.accept_length_model =
                        alpha.map(|a| crate::compute::speculative::chain_accept_length(a, k));
                    entry.steps = s.steps;
                    if s.request_steps > 0 {
                        let n = s.request_steps as f64;
                        entry.accept_length_mean = Some(s.tokens as f64 / n);
                        let proposed = n * f64::from(spec.proposed_per_step());
                        entry.accept_rate =
                            (proposed > 0.0).then(|| (s.tokens as f64 - n) / proposed);
                        let all = s.draft_s + s.verify_s + s.extend_s + s.host_s;
                        entry.time_share = (all > 0.0).then(|| SpecTimeShare {
                            draft: s.draft_s / all,
                            verify: s.verify_s / all,
                            draft_extend: s.extend_s / all,
                            host: s.host_s / all,
                        });
                    }
                }
                Role::Prefill => {
                    let (mut d, mut f) = (0.0, 0.0);
                    for p in self.prefills.iter().filter(|p| mine(p.core.pool)) {
                        if let Some(x) = p.spec.as_deref() {
                            d += x.draft_s;
                            f += x.forward_s;
                        }
                    }
                    entry.draft_prefill_share = (f > 0.0).then(|| d / f);
                }
                Role::Colocated => {}
            }
            out.push(entry);
        }
        out
    }
}
