//! Speculative decoding's cost and acceptance (`docs/sglang-pd.md` §19.2–§19.3).
//!
//! # One step
//!
//! sglang's `EAGLEWorker.forward_batch_generation` (`speculative/eagle_worker.py`) runs, per
//! decode step of a batch of `b` requests:
//!
//! ```text
//! draft   (num_steps − 1) draft forwards of b·topk tokens   ("we get 1 token from draft
//!                                                             prefill and (#spec steps − 1)
//!                                                             tokens here")
//! verify  1 target forward (TARGET_VERIFY) of b·num_draft_tokens tokens, tree-masked
//! extend  1 draft forward over the tokens the step emitted     (`forward_draft_extend_after_decode`)
//! host    one scheduler iteration: decode_overhead + b × per-sequence cost, and for a tree
//!         (topk > 1) sglang's tree work, SPEC_TREE_STEP_S (fitted)
//! ```
//!
//! each forward priced by the step model's own roofline ([`StepModel::multi_token_gpu_s`]):
//! the draft model is a [`StepModel`] of the draft's shape
//! (`spec::speculative::SpeculativeArgs::draft_model`). The host cost is paid once a step,
//! as sglang's scheduler runs one iteration per step and its sub-forwards replay CUDA graphs.
//! A prefill with speculation also runs the draft over the prompt (`forward_draft_extend`):
//! [`SpecStepModel::draft_prefill_s`].
//!
//! # Acceptance
//!
//! A request's draft positions are accepted in order; position `i` (1-based) is reached with
//! probability `α^i` given a per-position acceptance `α` (a chain: topk = 1), so the draft
//! tokens accepted per step `a` have `P(a ≥ i) = α^i` for `i ≤ k`, `k` the most a step can
//! accept (`num_steps`, at most `num_draft_tokens − 1`), and the tokens emitted per step are
//! `a + 1` (the bonus token the verify samples after the last accepted one). sglang's logged
//! "accept len" is exactly that mean: `spec_num_accept_tokens / spec_num_forward_ct`, with
//! `num_accepted + bs` added per step (`update_spec_metrics`). Its mean is the chain formula
//! (Leviathan et al. 2023, i.i.d. positions)
//!
//! ```text
//! τ = E[a + 1] = (1 − α^(k+1)) / (1 − α)
//! ```
//!
//! For a tree (topk > 1) pdsim uses the same formula with `α` the per-depth acceptance of the
//! tree (the chance that some branch at the next depth is accepted): a wider tree raises it;
//! the default rates are fitted to published accept lengths at a stated configuration.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::compute::StepModel;

/// `τ`: mean tokens emitted per step (accepted drafts plus the bonus token) under a
/// per-position acceptance `alpha` with at most `k` accepted drafts.
pub fn chain_accept_length(alpha: f64, k: u32) -> f64 {
    if alpha >= 1.0 {
        return f64::from(k) + 1.0;
    }
    (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
}

/// The per-position acceptance `α` whose chain gives mean accept length `tau` at depth `k`
/// (bisection; [`chain_accept_length`] is increasing in `α`); `None` unless `1 ≤ tau < k + 1`.
pub fn rate_for_length(tau: f64, k: u32) -> Option<f64> {
    if !(tau.is_finite() && tau >= 1.0 && tau < f64::from(k) + 1.0) {
        return None;
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if chain_accept_length(mid, k) < tau {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(0.5 * (lo + hi))
}

/// Draft tokens one step accepts for a request of acceptance `alpha`: position after
/// position while a uniform draw falls below `alpha`, at most `k`.
pub fn draw_accepted(rng: &mut ChaCha8Rng, alpha: f64, k: u32) -> u32 {
    let mut a = 0;
    while a < k && rng.random::<f64>() < alpha {
        a += 1;
    }
    a
}

/// A request's own acceptance rate: `mean` when `sd` is 0; otherwise logit-normal around it
/// (`logit α = logit mean + s·z`, `z` standard normal by Box–Muller, `s = sd / (mean(1 −
/// mean))` so that the spread near the mean is `sd`), which stays inside (0, 1) without
/// clipping.
pub fn request_rate(rng: &mut ChaCha8Rng, mean: f64, sd: f64) -> f64 {
    if sd <= 0.0 || mean <= 0.0 || mean >= 1.0 {
        return mean;
    }
    let (u1, u2) = (rng.random::<f64>(), rng.random::<f64>());
    let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let s = sd / (mean * (1.0 - mean));
    let logit = (mean / (1.0 - mean)).ln() + s * z;
    1.0 / (1.0 + (-logit).exp())
}

/// sglang's cost of one **tree** step (`speculative_eagle_topk > 1`) beyond its forwards'
/// roofline and the scheduler's visible host cost, seconds: top-k selection over `topk²`
/// candidates at every draft step (`select_top_k_tokens`), the tree's construction and
/// reranking (`build_tree_kernel_efficient`, `organize_draft_results`), the tree-masked
/// verify and its greedy walk (`verify_tree_greedy`), the accepted path's bookkeeping — with
/// the overlap scheduler off, as `_handle_speculative_decoding` turns it off for EAGLE-3
/// ("Overlap scheduler is disabled because of using eagle3 …"). **Fitted**: the residual of
/// sglang PR #4247's EAGLE-3 row (Llama-3.1-8B-Instruct, 1 × H100, MT-bench, 5 steps,
/// 361.70 tok/s at accept length 4.68: 12.94 ms a step, of which the forwards and host price
/// 8.63 ms under the default `sglang-2026` step times — 8.96 ms under `sglang-2025`, where this
/// was 3.98 ms); held out, the same PR's EAGLE-3 8-step and EAGLE-2 8-step rows land within 2 %
/// (`tests/sglang/speculative.rs`). A chain (topk = 1) pays none: with it the DeepSeek MTP rows of
/// sglang's docs (H200 TP8, 1.8× at batch 1, 1.5× at batch 32) land within 11 %; charging it
/// there too would put them at 1.0× and 1.3×.
pub const SPEC_TREE_STEP_S: f64 = 4.31e-3;

/// The time of one speculative decode step by part, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecStepTime {
    /// The `num_steps − 1` draft forwards.
    pub draft_s: f64,
    /// The target's verify forward.
    pub verify_s: f64,
    /// The draft's forward over the emitted tokens.
    pub extend_s: f64,
    /// The scheduler iteration's host cost, and for a tree step [`SPEC_TREE_STEP_S`].
    pub host_s: f64,
}

impl SpecStepTime {
    /// The step's duration, ns, rounded up.
    pub fn ns(&self) -> crate::engine::Nanos {
        crate::engine::ns_from_secs_ceil(self.draft_s + self.verify_s + self.extend_s + self.host_s)
    }
}

/// The step model of a speculative decode instance: the target's and the draft's rooflines
/// and sglang's three shape flags.
#[derive(Clone, Debug)]
pub struct SpecStepModel {
    /// The target model's step model.
    pub target: StepModel,
    /// The draft model's step model (same GPUs, TP and KV dtype).
    pub draft: StepModel,
    /// `--speculative-num-steps`.
    pub num_steps: u32,
    /// `--speculative-eagle-topk`.
    pub topk: u32,
    /// `--speculative-num-draft-tokens`.
    pub num_draft_tokens: u32,
}

impl SpecStepModel {
    /// One step of `batch` requests whose contexts (each request's next position included)
    /// sum to `context_tokens`, emitting `emitted` tokens in all (what the draft's extend
    /// forward runs over). The draft's KV covers the same tokens as the target's (one pool
    /// index space), so every draft forward attends to the same context.
    pub fn step(&self, batch: u32, context_tokens: u64, emitted: u64) -> SpecStepTime {
        if batch == 0 {
            return SpecStepTime::default();
        }
        let b = u64::from(batch);
        let draft_one =
            self.draft
                .multi_token_gpu_s(batch, b * u64::from(self.topk), context_tokens);
        let draft_s = f64::from(self.num_steps.saturating_sub(1)) * draft_one;
        let verify_s = self.target.multi_token_gpu_s(
            batch,
            b * u64::from(self.num_draft_tokens),
            context_tokens,
        );
        let extend_s = self
            .draft
            .multi_token_gpu_s(batch, emitted.max(b), context_tokens);
        // The scheduler's hidden host work is one iteration's, whatever the forwards it
        // launches (the draft steps replay one CUDA graph): exposed only past the GPU's.
        let hidden = self.target.decode_cpu_floor_s(batch);
        SpecStepTime {
            draft_s,
            verify_s,
            extend_s,
            host_s: self.target.decode_host_s(batch)
                + (hidden - (draft_s + verify_s + extend_s)).max(0.0)
                + if self.topk > 1 { SPEC_TREE_STEP_S } else { 0.0 },
        }
    }

    /// GPU seconds of the draft's prefill over a prefill forward's `chunks` (the draft fills
    /// its own KV over the prompt, `forward_draft_extend`, after the target's forward).
    pub fn draft_prefill_s(&self, chunks: &[(u32, u32)]) -> f64 {
        self.draft.prefill_gpu_s(chunks)
    }

    /// The MoE layers of the forwards of one [`SpecStepModel::step`] as the expert-parallel
    /// model prices them (`compute::moe`), each with how many times the step runs it: the
    /// `num_steps − 1` draft forwards of `batch × topk` tokens through the draft's MoE layer
    /// (DeepSeek's MTP layer is a MoE layer of the target's shape), the verify of
    /// `batch × num_draft_tokens` tokens through the target's, the draft extend over the
    /// emitted tokens. What a step puts on DeepEP's inter-node legs (`sglang::a2a`); empty
    /// without an expert-parallel model.
    pub fn moe_parts(
        &self,
        batch: u32,
        context_tokens: u64,
        emitted: u64,
    ) -> Vec<(crate::compute::moe::MoeTime, f64)> {
        if batch == 0 {
            return Vec::new();
        }
        let b = u64::from(batch);
        let mut out = Vec::new();
        let mut add = |m: &StepModel, tokens: u64, times: f64| {
            if times > 0.0
                && let Some(t) = m.moe_time_at(tokens as f64, false, context_tokens)
            {
                out.push((t, times));
            }
        };
        add(
            &self.draft,
            b * u64::from(self.topk),
            f64::from(self.num_steps.saturating_sub(1)),
        );
        add(&self.target, b * u64::from(self.num_draft_tokens), 1.0);
        add(&self.draft, emitted.max(b), 1.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// A chain step of Llama-3.1-8B with a one-layer draft on an H100: without the overlap
    /// scheduler (sglang before spec v2 ran EAGLE so) its host time holds the iteration's
    /// scheduling on top of the forwards, where with it the scheduling hid under them.
    #[test]
    fn a_speculative_step_without_the_overlap_scheduler_adds_its_scheduling() {
        let gpu = crate::spec::gpu_preset("h100-sxm").unwrap();
        let p = crate::compute::calibrated_params(&gpu);
        let target_model = crate::spec::preset("llama-3.1-8b").unwrap();
        let mut draft_model = target_model.clone();
        draft_model.num_layers = 1;
        let target = StepModel::new(&gpu, &target_model, 1, 2, p.clone());
        let draft = StepModel::new(&gpu, &draft_model, 1, 2, p.clone());
        let on = SpecStepModel {
            target: target.clone(),
            draft: draft.clone(),
            num_steps: 3,
            topk: 1,
            num_draft_tokens: 4,
        };
        let mut off = on.clone();
        off.target.set_overlap_schedule(false);
        off.draft.set_overlap_schedule(false);
        let (b, ctx) = (16u32, 16 * 2_000u64);
        let (a, z) = (on.step(b, ctx, 40), off.step(b, ctx, 40));
        let sched = p.decode_cpu_s + p.decode_cpu_per_seq_s * f64::from(b);
        assert_eq!(
            (a.draft_s, a.verify_s, a.extend_s),
            (z.draft_s, z.verify_s, z.extend_s)
        );
        let gpu_s = a.draft_s + a.verify_s + a.extend_s;
        assert!(
            gpu_s > sched,
            "the forwards ({gpu_s} s) hide the scheduling"
        );
        assert!(
            (z.host_s - a.host_s - sched).abs() < 1e-12,
            "{} − {} vs {sched}",
            z.host_s,
            a.host_s
        );
    }

    #[test]
    fn the_chain_formula_and_its_inverse() {
        // DeepSeek-V3's MTP at one draft token: τ = 1 + α.
        assert!((chain_accept_length(0.85, 1) - 1.85).abs() < 1e-12);
        // α = 0.9, k = 5: (1 − 0.9^6) / 0.1 = 4.68559.
        assert!((chain_accept_length(0.9, 5) - 4.68559).abs() < 1e-9);
        assert_eq!(chain_accept_length(1.0, 3), 4.0);
        assert_eq!(chain_accept_length(0.0, 3), 1.0);
        let a = rate_for_length(4.68, 5).unwrap();
        assert!((chain_accept_length(a, 5) - 4.68).abs() < 1e-9);
        assert!(rate_for_length(6.0, 5).is_none() && rate_for_length(0.9, 5).is_none());
    }

    /// The draws' mean is the formula's (200,000 steps: within 0.5 %).
    #[test]
    fn draws_average_to_the_chain_formula() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for (alpha, k) in [(0.9, 5u32), (0.6, 3), (0.85, 1)] {
            let n = 200_000;
            let sum: u64 = (0..n)
                .map(|_| u64::from(draw_accepted(&mut rng, alpha, k)) + 1)
                .sum();
            let mean = sum as f64 / n as f64;
            let want = chain_accept_length(alpha, k);
            assert!(
                (mean / want - 1.0).abs() < 0.005,
                "{alpha} {k}: {mean} vs {want}"
            );
        }
        // A request's rate keeps its mean's neighbourhood and stays in (0, 1).
        let rates: Vec<f64> = (0..20_000)
            .map(|_| request_rate(&mut rng, 0.8, 0.05))
            .collect();
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let sd =
            (rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / rates.len() as f64).sqrt();
        assert!(
            (mean - 0.8).abs() < 0.01 && (sd - 0.05).abs() < 0.01,
            "{mean} {sd}"
        );
        assert!(rates.iter().all(|r| (0.0..1.0).contains(r)));
        assert_eq!(request_rate(&mut rng, 0.8, 0.0), 0.8);
    }
}
