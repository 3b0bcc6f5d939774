//! Speculative decoding on a decode server and its prefill (`docs/sglang-pd.md` §19): what
//! one step of `EAGLEWorker.forward_batch_generation` emits per request, how long it takes,
//! and the draft's prefill on the prefill server.
//!
//! The decode server ([`super::decode::DecodeServer`]) keeps its batch as it does without
//! speculation; where it would advance every request by one token a step it asks this state
//! instead:
//!
//! * **join** — the request's own acceptance rate and its step count to finish are drawn from
//!   its own segment of the `Speculative` RNG stream ([`crate::engine::RngSource`]): the
//!   steps are known at join, as the one-token model knows them (`remaining` steps), so the
//!   finishing order and retraction need nothing new;
//! * **plan** — at the start of each step every running request's emitted tokens (accepted
//!   drafts + 1, at most what it has left) are drawn, in the same order as at its join, and the
//!   KV pages they open are taken: sglang allocates the verified slots before the verify
//!   forward and frees the rejected ones after it (`EagleVerifyInput.verify`: `evict_mask`),
//!   so what a request keeps is its context plus its accepted tokens, at the target's and the
//!   draft's pool alike (one index space); the draft's scratch slots (`bs × num_steps × topk`,
//!   restored after drafting) are the extra room sglang adds to the pool and are not held;
//! * **commit** — at the step's end the drawn tokens count as generated.
//!
//! Steps of a speculative server are never coalesced (every step is an event): a run's steps
//! are arithmetic only when every request advances by one token.

use rand_chacha::ChaCha8Rng;

use crate::compute::StepModel;
use crate::compute::speculative::{self as model, SpecStepModel, SpecStepTime};
use crate::engine::{Nanos, RngSource, rng_stream};
use crate::metrics::summary::SpecSummary;
use crate::spec::speculative::SpeculativeArgs;
use crate::vocab::ids::PoolId;
use crate::vocab::requests::ReqRef;

/// Words of the `Speculative` stream each (request, join) owns: request `id`'s joins start at
/// `id · 2^36`, its `n`-th join (after `n` retractions, modulo 32) at `+ n · 2^31`. A join
/// draws at most `2 (k + 1)` words a step, so a segment holds ~10^7 steps.
const REQUEST_WORDS_SHIFT: u32 = 36;
const JOIN_WORDS_SHIFT: u32 = 31;

/// One running request's speculative state.
#[derive(Clone, Debug)]
struct Entry {
    /// The request.
    r: ReqRef,
    /// Its draws, positioned at its next step's.
    rng: ChaCha8Rng,
    /// Its own acceptance rate.
    alpha: f64,
    /// Tokens of KV it holds on this server (prompt + generated here and before).
    kv_tokens: u32,
    /// Tokens it has still to emit here.
    left: u32,
    /// Tokens it emitted here (committed steps).
    generated: u32,
    /// Tokens the running step emits for it (0 until planned).
    this_step: u32,
    /// Whether the running step's tokens are drawn.
    planned: bool,
}

/// What a speculative decode server has done, for `summary.json`'s `speculative` section.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecStats {
    /// Steps run.
    pub steps: u64,
    /// Requests over steps (Σ batch): sglang's `spec_num_forward_ct`.
    pub request_steps: u64,
    /// Tokens emitted (accepted drafts + bonus tokens): sglang's `spec_num_accept_tokens`.
    pub tokens: u64,
    /// Seconds of draft forwards, verify forwards, draft extends and host, summed over steps.
    pub draft_s: f64,
    /// See `draft_s`.
    pub verify_s: f64,
    /// See `draft_s`.
    pub extend_s: f64,
    /// See `draft_s`.
    pub host_s: f64,
}

impl SpecStats {
    /// Adds `other`'s counts (servers of one pool).
    pub fn add(&mut self, o: &SpecStats) {
        self.steps += o.steps;
        self.request_steps += o.request_steps;
        self.tokens += o.tokens;
        self.draft_s += o.draft_s;
        self.verify_s += o.verify_s;
        self.extend_s += o.extend_s;
        self.host_s += o.host_s;
    }
}

/// A decode server's speculative state.
#[derive(Clone, Debug)]
pub struct SpecDecode {
    /// The step's cost.
    model: SpecStepModel,
    /// The most draft tokens a step accepts.
    k: u32,
    /// The pool's mean acceptance rate and its per-request spread.
    accept: (f64, f64),
    /// The run's seed (for the per-request segments).
    seed: u64,
    /// Running requests, in join order.
    running: Vec<Entry>,
    /// Tokens the running step emits in all (its planned entries).
    pending: u64,
    /// The last step started: its batch, context tokens and emitted tokens.
    last: (u32, u64, u64),
    /// Counts so far.
    pub stats: SpecStats,
}

impl SpecDecode {
    /// The state of a decode server of `spec` whose target and draft step models are given,
    /// with acceptance `rate` (mean) and `sd` (per request), for a run with `seed`.
    pub fn new(
        target: StepModel,
        draft: StepModel,
        spec: &SpeculativeArgs,
        (rate, sd): (f64, f64),
        seed: u64,
    ) -> Self {
        Self {
            model: SpecStepModel {
                target,
                draft,
                num_steps: spec.num_steps,
                topk: spec.eagle_topk,
                num_draft_tokens: spec.num_draft_tokens,
            },
            k: spec.max_accepted(),
            accept: (rate, sd),
            seed,
            running: Vec::new(),
            pending: 0,
            last: (0, 0, 0),
            stats: SpecStats::default(),
        }
    }

    /// Request `r` (id `id`, `retractions` so far) joins the batch with `kv_tokens` of KV and
    /// `remaining` tokens to emit here: returns the steps it will take, from its own draws.
    pub fn join(
        &mut self,
        r: ReqRef,
        id: u64,
        retractions: u32,
        kv_tokens: u32,
        remaining: u32,
    ) -> u64 {
        let mut rng = rng_stream(self.seed, RngSource::Speculative);
        rng.set_word_pos(
            (u128::from(id) << REQUEST_WORDS_SHIFT)
                + (u128::from(retractions % 32) << JOIN_WORDS_SHIFT),
        );
        let alpha = model::request_rate(&mut rng, self.accept.0, self.accept.1);
        // The same draws the steps will make, in order: how many steps emit `remaining`.
        let mut ahead = rng.clone();
        let (mut left, mut steps) = (remaining, 0u64);
        while left > 0 {
            let e = model::draw_accepted(&mut ahead, alpha, self.k) + 1;
            left = left.saturating_sub(e);
            steps += 1;
        }
        self.running.push(Entry {
            r,
            rng,
            alpha,
            kv_tokens,
            left: remaining,
            generated: 0,
            this_step: 0,
            planned: false,
        });
        steps
    }

    /// Draws the running step's tokens for every request not yet planned, and returns the KV
    /// pages (of `page_size` tokens) they open beyond what the requests hold.
    pub fn plan(&mut self, page_size: u32) -> u32 {
        let mut pages = 0;
        for e in self.running.iter_mut().filter(|e| !e.planned) {
            let drawn = model::draw_accepted(&mut e.rng, e.alpha, self.k) + 1;
            e.this_step = drawn.min(e.left);
            e.planned = true;
            self.pending += u64::from(e.this_step);
            let held = e.kv_tokens + e.generated;
            pages += (held + e.this_step).div_ceil(page_size) - held.div_ceil(page_size);
        }
        pages
    }

    /// Tokens the running step emits (the planned requests').
    pub fn step_tokens(&self) -> u64 {
        self.pending
    }

    /// The running step's time for `batch` requests over `context_tokens`, counted in the
    /// stats (the step runs).
    pub fn start(&mut self, batch: u32, context_tokens: u64) -> Nanos {
        self.last = (batch, context_tokens, self.pending);
        let t: SpecStepTime = self.model.step(batch, context_tokens, self.pending);
        let s = &mut self.stats;
        s.steps += 1;
        s.request_steps += u64::from(batch);
        s.draft_s += t.draft_s;
        s.verify_s += t.verify_s;
        s.extend_s += t.extend_s;
        s.host_s += t.host_s;
        t.ns()
    }

    /// The MoE layers of the step last started, each with how many times it runs
    /// ([`SpecStepModel::moe_parts`]): what its DeepEP all-to-all moves between nodes.
    pub fn moe_parts(&self) -> Vec<(crate::compute::moe::MoeTime, f64)> {
        let (b, ctx, emitted) = self.last;
        self.model.moe_parts(b, ctx, emitted)
    }

    /// The step ended: its tokens are generated. Returns how many.
    pub fn commit(&mut self) -> u64 {
        for e in &mut self.running {
            e.generated += e.this_step;
            e.left -= e.this_step;
            e.this_step = 0;
            e.planned = false;
        }
        let n = std::mem::take(&mut self.pending);
        self.stats.tokens += n;
        n
    }

    /// Request `r` leaves the batch: returns the tokens it generated here (committed steps;
    /// a step planned and not run does not count).
    pub fn leave(&mut self, r: ReqRef) -> u32 {
        let Some(i) = self.running.iter().position(|e| e.r == r) else {
            return 0;
        };
        let e = self.running.remove(i);
        self.pending -= u64::from(e.this_step);
        e.generated
    }

    /// The batch is lost (a crash).
    pub fn clear(&mut self) {
        self.running.clear();
        self.pending = 0;
    }
}

/// A prefill server's speculative state: the draft's prefill over every forward's chunks.
#[derive(Clone, Debug)]
pub struct SpecPrefill {
    /// The draft's step model.
    draft: StepModel,
    /// Seconds of draft prefill, summed over forwards.
    pub draft_s: f64,
    /// Seconds of whole forwards (target, loads and draft), summed.
    pub forward_s: f64,
}

impl SpecPrefill {
    /// The state of a prefill server whose draft is `draft`.
    pub fn new(draft: StepModel) -> Self {
        Self {
            draft,
            draft_s: 0.0,
            forward_s: 0.0,
        }
    }

    /// The MoE layers of the draft's prefill over `tokens` prompt tokens (one DP rank's), as
    /// the expert-parallel model prices them; `None` without one.
    pub fn moe_time(&self, tokens: u64) -> Option<crate::compute::moe::MoeTime> {
        self.draft.moe_time(tokens as f64, true)
    }

    /// A forward over `chunks` that took `dt` ns without the draft takes this long with it:
    /// sglang's prefill runs the draft's extend after the target's forward, in the same
    /// scheduler iteration (`forward_target_extend` then `forward_draft_extend`).
    pub fn forward_ns(&mut self, dt: Nanos, chunks: &[(u32, u32)]) -> Nanos {
        let d = self.draft.prefill_gpu_s(chunks);
        let all = dt.saturating_add(crate::engine::ns_from_secs_ceil(d));
        self.draft_s += d;
        self.forward_s += all as f64 / crate::engine::NS_PER_S as f64;
        all
    }
}

/// `summary.json` `speculative`: one entry per pool of `sc` that runs speculative decoding, in
/// scenario order, from the state its servers keep (`prefills`' and `decodes`' speculative
/// state, each with its server's pool); empty when none does.
pub fn summary(
    sc: &crate::config::Scenario,
    prefills: &[(PoolId, &SpecPrefill)],
    decodes: &[(PoolId, &SpecDecode)],
) -> Vec<SpecSummary> {
    use crate::config::Role;
    use crate::metrics::summary::SpecTimeShare;
    let mut out = Vec::new();
    for (i, pool) in sc.pools.iter().enumerate() {
        let Some(spec) = &pool.server.speculative else {
            continue;
        };
        let mine = |p: PoolId| p.idx() == i;
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
                for (_, x) in decodes.iter().filter(|(p, _)| mine(*p)) {
                    s.add(&x.stats);
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
                    entry.accept_rate = (proposed > 0.0).then(|| (s.tokens as f64 - n) / proposed);
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
                for (_, x) in prefills.iter().filter(|(p, _)| mine(*p)) {
                    d += x.draft_s;
                    f += x.forward_s;
                }
                entry.draft_prefill_share = (f > 0.0).then(|| d / f);
            }
            Role::Colocated => {}
        }
        out.push(entry);
    }
    out
}
