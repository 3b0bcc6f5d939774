//! Speculative decoding's `summary.json` section, from the state each server keeps
//! (`sglang::speculative`; built with the draft's step model by `cluster.rs`). Nothing here
//! runs for a pool without `speculative_algorithm`.

use super::World;
use crate::config::Role;
use crate::metrics::summary::{SpecSummary, SpecTimeShare};
use crate::sglang::speculative::SpecStats;

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
