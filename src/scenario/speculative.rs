//! `[pools.server]`'s speculative-decoding keys (sglang's flag names) and the pool's
//! acceptance keys, checked as sglang checks them at start-up
//! (`server_args.py::ServerArgs._handle_speculative_decoding`, v0.5.4 era; `docs/sglang-pd.md`
//! §19.1): every refusal there is an exit-2 error here naming the flag, every silent
//! adjustment is made the same way and recorded as a note (printed by the verbs that run the
//! scenario), with sglang's own log line.

use super::file::{PoolSection, ServerSection};
use super::{Checker, ScenarioError, suggestion};
use crate::compute::speculative::{chain_accept_length, rate_for_length};
use crate::config::{Pool, Role, SpeculativeParams};
use crate::spec::ModelSpec;
use crate::spec::speculative::{
    Algorithm, Draft, EAGLE3_DRAFT_VOCAB, MAX_TOPK_PD, SpeculativeArgs, auto_params, has_mtp_layers,
};

/// sglang's `ATTENTION_BACKEND_CHOICES` (v0.5.4 era `server_args.py`).
const ATTENTION_BACKENDS: &[&str] = &[
    "triton",
    "torch_native",
    "flex_attention",
    "nsa",
    "cutlass_mla",
    "fa3",
    "fa4",
    "flashinfer",
    "flashmla",
    "trtllm_mla",
    "trtllm_mha",
    "dual_chunk_flash_attn",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "intel_xpu",
];

/// The attention backend taken when `attention_backend` is unset: what sglang's own docs run
/// logs for Llama on an H100 ("Attention backend not specified. Use flashinfer backend by
/// default.", `docs/advanced_features/speculative_decoding.md`, 2026-02 build). sglang's
/// automatic choice depends on the GPU, the model and the version; set the key to pin it.
pub const DEFAULT_ATTENTION_BACKEND: &str = "flashinfer";

/// The most draft steps pdsim accepts: each step of a request draws at most this many
/// positions (sglang has no bound; published configurations use 1–8).
pub const MAX_NUM_STEPS: u32 = 32;

/// Default per-position acceptance for EAGLE-3: the chain formula's α for the accept length
/// 4.68 that sglang PR #4247 (2025-03-10, "[Feature] Support EAGLE 3") measured for
/// Llama-3.1-8B-Instruct on MT-bench with `--speculative-num-steps 5` (CUDA graphs, 361.7
/// tok/s). The same PR's 5.39 at 8 steps fits α = 0.865: the i.i.d. chain over-predicts deep
/// positions, so with more steps set `speculative_accept_length` from a measurement.
pub const EAGLE3_ACCEPT_RATE: f64 = 0.90;
/// Default for EAGLE(-2) heads: the same PR's EAGLE-2 accept length 3.76 at 8 steps.
pub const EAGLE_ACCEPT_RATE: f64 = 0.755;
/// Default for DeepSeek's MTP layer: the DeepSeek-V3 technical report (arXiv 2412.19437,
/// §5.4.3): "the acceptance rate of the second token prediction ranges between 85% and 90%",
/// the lower end.
pub const MTP_ACCEPT_RATE: f64 = 0.85;

/// The flags of pool `key`, resolved as sglang resolves them, and what sglang logged while
/// doing so; `None` when speculation is off. `page_size` and `max_running_requests` are the
/// pool's own.
pub(super) fn server_args(
    c: &Checker,
    p: &PoolSection,
    key: &str,
    model: &ModelSpec,
) -> Result<Option<(SpeculativeArgs, Vec<String>)>, ScenarioError> {
    let s = &p.server;
    let algorithm = algorithm(c, s, key)?;
    check_attention_backend(c, s, key)?;
    // Without an algorithm sglang reads none of the other speculative flags; pdsim's
    // acceptance keys are ignored with them, so that one key turns the feature off.
    let Some(algorithm) = algorithm else {
        return Ok(None);
    };
    check_modelled(c, p, key, model)?;
    let mut notes = Vec::new();
    let path = s.speculative_draft_model_path.clone();
    let mtp = has_mtp_layers(model);
    let draft = draft(c, key, algorithm, model, path.as_deref(), &mut notes)?;
    let (num_steps, topk, ndt) = tree_shape(c, s, key, model, &mut notes)?;
    check_backend_topk(c, s, key, topk)?;
    if s.max_running_requests.is_none() {
        notes.push(format!(
            "{}: sglang logs \"Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.\"",
            flag(key, "max_running_requests")
        ));
    }
    Ok(Some((
        SpeculativeArgs {
            algorithm,
            num_steps,
            eagle_topk: topk,
            num_draft_tokens: ndt,
            draft_model_path: path.filter(|_| !mtp),
            draft,
        },
        notes,
    )))
}

/// The scenario key of server flag `f` in pool `key` (`pools.NAME.server.FLAG`), as the errors
/// name it.
fn flag(key: &str, f: &str) -> String {
    format!("{key}.server.{f}")
}

/// `speculative_algorithm` parsed; `None` when unset. sglang's algorithms pdsim does not model
/// get their own message, so that a valid sglang flag is not reported as a typo.
fn algorithm(
    c: &Checker,
    s: &ServerSection,
    key: &str,
) -> Result<Option<Algorithm>, ScenarioError> {
    let Some(v) = s.speculative_algorithm.as_deref() else {
        return Ok(None);
    };
    match Algorithm::parse(v) {
        Ok(a) => Ok(a),
        Err(()) if ["standalone", "ngram"].contains(&v.to_ascii_lowercase().as_str()) => {
            Err(c.err(
                &flag(key, "speculative_algorithm"),
                format!(
                    "{v:?} is an sglang algorithm pdsim does not model (a separate small draft LLM, or n-gram matching); valid: {}",
                    Algorithm::NAMES.join(", ")
                ),
            ))
        }
        Err(()) => Err(c.err(
            &flag(key, "speculative_algorithm"),
            format!(
                "unknown speculative algorithm {v:?}; valid: {}{}",
                Algorithm::NAMES.join(", "),
                suggestion(&v.to_ascii_lowercase(), Algorithm::NAMES)
            ),
        )),
    }
}

/// `attention_backend`, when set, is one of sglang's choices (checked with speculation on or
/// off, as sglang's argument parser does).
fn check_attention_backend(c: &Checker, s: &ServerSection, key: &str) -> Result<(), ScenarioError> {
    if let Some(b) = s.attention_backend.as_deref()
        && !ATTENTION_BACKENDS.contains(&b)
    {
        return Err(c.err(
            &flag(key, "attention_backend"),
            format!(
                "unknown attention backend {b:?}; valid (sglang's choices): {}{}",
                ATTENTION_BACKENDS.join(", "),
                suggestion(b, ATTENTION_BACKENDS)
            ),
        ));
    }
    Ok(())
}

/// Refuses the pools and models on which pdsim does not model a speculative step (sglang
/// may run them; pdsim has no cost or memory model for them).
fn check_modelled(
    c: &Checker,
    p: &PoolSection,
    key: &str,
    model: &ModelSpec,
) -> Result<(), ScenarioError> {
    let s = &p.server;
    let alg_key = flag(key, "speculative_algorithm");
    if p.role == Role::Colocated {
        return Err(c.err(
            &alg_key,
            "pdsim models speculative decoding on PD pools (a decode pool's steps and its prefill's draft prefill), not on colocated servers; remove it here",
        ));
    }
    if p.step_times.is_some() {
        return Err(c.err(
            &alg_key,
            "a measured step-time profile (step_times) has no draft or verify rows to price a speculative step; drop step_times or speculative_algorithm",
        ));
    }
    if model.is_hybrid() || s.enable_unified_memory {
        return Err(c.err(
            &alg_key,
            format!(
                "pdsim models speculative decoding on attention-only models (dense or MoE, MHA or MLA); {} has recurrent or sliding-window layers, whose draft state sglang keeps in pools pdsim does not model",
                model.name
            ),
        ));
    }
    // DeepEP across nodes (Ant Group's production decode: MTP on a multi-node EP instance) is
    // modelled: each draft, verify and draft-extend forward prices its own dispatch and
    // combine legs (`SpecStepModel::moe_parts`), and the step's inter-node bytes go on the
    // fabric as one flow per GPU (`sglang::a2a`).
    Ok(())
}

/// The draft that `algorithm` runs on `model`: the model's own MTP layer when it has one
/// (sglang's nextn, and eagle on such models), else an EAGLE head sized from the target's
/// shape, which needs `speculative_draft_model_path`. A path given with MTP is noted, as
/// sglang warns about it.
fn draft(
    c: &Checker,
    key: &str,
    algorithm: Algorithm,
    model: &ModelSpec,
    path: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<Draft, ScenarioError> {
    let alg_key = flag(key, "speculative_algorithm");
    let path_key = flag(key, "speculative_draft_model_path");
    let draft = match algorithm {
        Algorithm::Eagle3 => {
            if model.is_mla() {
                return Err(c.err(
                    &alg_key,
                    format!(
                        "pdsim sizes EAGLE-3 heads for MHA models (one Llama-style layer of the target's shape); {} is MLA: use nextn (its MTP layers)",
                        model.name
                    ),
                ));
            }
            Draft::EagleHead {
                fc_inputs: 3,
                vocab: EAGLE3_DRAFT_VOCAB.min(model.vocab_size),
                shared_head: false,
            }
        }
        Algorithm::Eagle | Algorithm::Nextn if has_mtp_layers(model) => {
            if path.is_some() {
                // sglang: `logger.warning("DeepSeek MTP does not require setting
                // speculative_draft_model_path.")`, and it uses the given path.
                notes.push(format!(
                    "{path_key}: sglang logs \"DeepSeek MTP does not require setting speculative_draft_model_path.\"; pdsim drafts with the model's own MTP layer"
                ));
            }
            Draft::Mtp
        }
        Algorithm::Nextn => {
            return Err(c.err(
                &alg_key,
                format!(
                    "nextn drafts with the model's own multi-token-prediction layers, and {} has none (sglang sets the draft path to the model only for DeepSeek-V3/V3.2, GLM-4-MoE and Bailing MoE); use eagle or eagle3 with speculative_draft_model_path",
                    model.name
                ),
            ));
        }
        Algorithm::Eagle => {
            if model.is_mla() {
                return Err(c.err(
                    &alg_key,
                    format!(
                        "pdsim sizes EAGLE heads for MHA models; {} is MLA",
                        model.name
                    ),
                ));
            }
            Draft::EagleHead {
                fc_inputs: 2,
                vocab: model.vocab_size,
                shared_head: true,
            }
        }
    };
    if matches!(draft, Draft::EagleHead { .. }) && path.is_none_or(str::is_empty) {
        return Err(c.err(
            &path_key,
            format!(
                "{} needs a draft model: sglang's speculative_draft_model_path \"Specifies draft model. This parameter is required.\" (e.g. \"lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B\"); pdsim sizes the head from the target's shape and records the name",
                algorithm.as_str()
            ),
        ));
    }
    Ok(draft)
}

/// The draft tree's shape `(num_steps, eagle_topk, num_draft_tokens)`: sglang's auto choice
/// when all three flags are unset, the given values checked otherwise; with top-1 the draft
/// tokens are replaced by steps + 1 (noted, as sglang warns).
fn tree_shape(
    c: &Checker,
    s: &ServerSection,
    key: &str,
    model: &ModelSpec,
    notes: &mut Vec<String>,
) -> Result<(u32, u32, u32), ScenarioError> {
    let k = |f: &str| flag(key, f);
    // `auto_choose_speculative_params` when all three are unset; sglang asserts that topk and
    // draft tokens are unset when the steps are.
    let (num_steps, topk, ndt) = match (
        s.speculative_num_steps,
        s.speculative_eagle_topk,
        s.speculative_num_draft_tokens,
    ) {
        (None, None, None) => {
            let (n, t, d) = auto_params(model);
            (n, t, Some(d))
        }
        (None, t, _) => {
            let f = if t.is_some() {
                "speculative_eagle_topk"
            } else {
                "speculative_num_draft_tokens"
            };
            return Err(c.err(
                &k(f),
                "is set without speculative_num_steps: sglang asserts `self.speculative_eagle_topk is None and self.speculative_num_draft_tokens is None` when the steps are left to its auto choice (the server does not start); set all three, or none",
            ));
        }
        (Some(_), None, _) => {
            return Err(c.err(
                &k("speculative_eagle_topk"),
                "must be set with speculative_num_steps: sglang compares it with 1 (`self.speculative_eagle_topk > 1`) and fails on None; set it (1 for a chain), or leave the steps unset too for sglang's auto choice",
            ));
        }
        (Some(n), Some(t), d) => (n, t, d),
    };
    if !(1..=MAX_NUM_STEPS).contains(&num_steps) {
        return Err(c.err(
            &k("speculative_num_steps"),
            format!("must be 1 to {MAX_NUM_STEPS} draft steps (pdsim's bound; published configurations use 1–8), got {num_steps}"),
        ));
    }
    if !(1..=MAX_TOPK_PD).contains(&topk) {
        return Err(c.err(
            &k("speculative_eagle_topk"),
            format!(
                "must be 1 to {MAX_TOPK_PD} in PD, got {topk}: the metadata buffer that carries the prefill's top-k to the decode has 16 slots (sglang `MetadataBuffers.output_topk_p`, \"speculative_eagle_topk should not be greater than 16 currently\")"
            ),
        ));
    }
    let ndt = num_draft_tokens(c, key, num_steps, topk, ndt, notes)?;
    Ok((num_steps, topk, ndt))
}

/// `speculative_num_draft_tokens` resolved: steps + 1 for a chain (top-1; sglang replaces any
/// other value with a warning, noted here), else required and bounded by the tree's nodes.
fn num_draft_tokens(
    c: &Checker,
    key: &str,
    num_steps: u32,
    topk: u32,
    ndt: Option<u32>,
    notes: &mut Vec<String>,
) -> Result<u32, ScenarioError> {
    let ndt_key = flag(key, "speculative_num_draft_tokens");
    if topk == 1 {
        let want = num_steps + 1;
        if ndt != Some(want) {
            // sglang: a warning, and the value replaced.
            notes.push(format!(
                "{ndt_key}: sglang logs \"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1\" and uses {want}{}",
                ndt.map_or(String::new(), |d| format!(" instead of {d}"))
            ));
        }
        return Ok(want);
    }
    let Some(d) = ndt else {
        return Err(c.err(
            &ndt_key,
            format!("must be set with speculative_eagle_topk = {topk} > 1: the tree's node count the target verifies per request (sglang has no default for it then)"),
        ));
    };
    let nodes = 1 + num_steps * topk;
    if !(2..=nodes).contains(&d) {
        return Err(c.err(
            &ndt_key,
            format!("must be 2 to {nodes} with {num_steps} steps of top-{topk}: the verified tree's nodes, its root included, are chosen from the 1 + steps × topk the draft proposes; got {d}"),
        ));
    }
    Ok(d)
}

/// sglang's refusals of a top-k > 1 tree on attention backends that cannot verify it
/// (`DEFAULT_ATTENTION_BACKEND` when `attention_backend` is unset).
fn check_backend_topk(
    c: &Checker,
    s: &ServerSection,
    key: &str,
    topk: u32,
) -> Result<(), ScenarioError> {
    let backend = s
        .attention_backend
        .as_deref()
        .unwrap_or(DEFAULT_ATTENTION_BACKEND);
    if backend == "trtllm_mha" && topk > 1 {
        return Err(c.err(
            &flag(key, "speculative_eagle_topk"),
            "sglang: \"trtllm_mha backend only supports topk = 1 for speculative decoding.\" (attention_backend = \"trtllm_mha\"); set speculative_eagle_topk = 1 or another backend",
        ));
    }
    if topk > 1 && s.page_size > 1 && backend != "flashinfer" {
        return Err(c.err(
            &flag(key, "speculative_eagle_topk"),
            format!(
                "sglang: \"speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged attention backends. This combination is only supported for the 'flashinfer' backend.\" (topk {topk}, page_size {}, attention_backend {backend:?}); set speculative_eagle_topk = 1, page_size = 1 or attention_backend = \"flashinfer\"",
                s.page_size
            ),
        ));
    }
    Ok(())
}

/// The pool's acceptance model (decode pools) once its flags are resolved; the notes go with
/// it. `None` when speculation is off.
pub(super) fn params(
    c: &Checker,
    p: &PoolSection,
    key: &str,
    pool: &Pool,
    notes: Vec<String>,
) -> Result<Option<SpeculativeParams>, ScenarioError> {
    let Some(spec) = &pool.server.speculative else {
        return Ok(None);
    };
    let k = |f: &str| format!("{key}.{f}");
    if p.role != Role::Decode {
        for (f, set) in [
            (
                "speculative_accept_rate",
                p.speculative_accept_rate.is_some(),
            ),
            (
                "speculative_accept_length",
                p.speculative_accept_length.is_some(),
            ),
            (
                "speculative_accept_rate_sd",
                p.speculative_accept_rate_sd.is_some(),
            ),
        ] {
            if set {
                return Err(c.err(
                    &k(f),
                    "only a decode pool verifies draft tokens: set the acceptance on the decode pool",
                ));
            }
        }
    }
    let depth = spec.max_accepted();
    let (rate, source) = match (p.speculative_accept_rate, p.speculative_accept_length) {
        (Some(_), Some(_)) => {
            return Err(c.err(
                &k("speculative_accept_length"),
                "give one of speculative_accept_rate (α per position) or speculative_accept_length (τ per step), not both",
            ));
        }
        (Some(a), None) => {
            if !(a.is_finite() && a > 0.0 && a < 1.0) {
                return Err(c.err(
                    &k("speculative_accept_rate"),
                    format!("must be a per-position acceptance rate in (0, 1), got {a}"),
                ));
            }
            (a, k("speculative_accept_rate"))
        }
        (None, Some(t)) => {
            let Some(a) = rate_for_length(t, depth) else {
                return Err(c.err(
                    &k("speculative_accept_length"),
                    format!(
                        "must be a mean accept length in [1, {}) (tokens per request per step, the bonus token included; at most {depth} drafts are accepted a step with these flags), got {t}",
                        depth + 1
                    ),
                ));
            };
            (a.max(1e-9), k("speculative_accept_length"))
        }
        (None, None) => match (spec.algorithm, spec.draft) {
            (_, Draft::Mtp) => (
                MTP_ACCEPT_RATE,
                "default for DeepSeek MTP: DeepSeek-V3 technical report §5.4.3, 85–90 % second-token acceptance (lower end)".to_string(),
            ),
            (Algorithm::Eagle3, _) => (
                EAGLE3_ACCEPT_RATE,
                "default for EAGLE-3: sglang PR #4247, Llama-3.1-8B-Instruct MT-bench, accept length 4.68 at 5 steps".to_string(),
            ),
            _ => (
                EAGLE_ACCEPT_RATE,
                "default for EAGLE-2: sglang PR #4247, Llama-3.1-8B-Instruct MT-bench, accept length 3.76 at 8 steps".to_string(),
            ),
        },
    };
    let sd = p.speculative_accept_rate_sd.unwrap_or(0.0);
    if !(sd.is_finite() && (0.0..=0.5).contains(&sd)) {
        return Err(c.err(
            &k("speculative_accept_rate_sd"),
            format!("must be a standard deviation of α between 0 and 0.5, got {sd}"),
        ));
    }
    let mut notes = notes;
    if p.role == Role::Decode {
        notes.push(format!(
            "{key}: speculative acceptance α = {rate:.4} per position ({source}) → {:.2} tokens per step at depth {depth}",
            chain_accept_length(rate, depth)
        ));
    }
    Ok(Some(SpeculativeParams {
        accept_rate: rate,
        accept_rate_sd: sd,
        source,
        notes,
    }))
}

/// Every prefill pool pairs with every decode pool (each compiles a transfer plan): they must
/// run the same speculative algorithm and top-k, as sglang's PD deployments launch both sides
/// with the same flags. Each side sizes what it registers by its own flag — the prefill
/// appends the draft's KV buffers to the list it writes from (`kv_data_ptrs +=
/// draft_kv_data_ptrs`), the decode sizes the metadata row of hidden states by its own
/// `spec_algorithm` — so a one-sided setting changes one side's registered KV list and its
/// first decode step's draft input; which sglang versions tolerate that is unverified
/// (`docs/sglang-pd.md` §19.5), and pdsim refuses it.
pub(super) fn check_pairs(c: &Checker, pools: &[Pool]) -> Result<(), ScenarioError> {
    let shape = |p: &Pool| {
        p.server
            .speculative
            .as_ref()
            .map(|s| (s.algorithm, s.eagle_topk, s.draft))
    };
    for pp in pools.iter().filter(|p| p.role == Role::Prefill) {
        for dp in pools.iter().filter(|p| p.role == Role::Decode) {
            let (a, b) = (shape(pp), shape(dp));
            if a == b {
                continue;
            }
            let name = |x: Option<(Algorithm, u32, Draft)>| match x {
                None => "none".to_string(),
                Some((al, t, _)) => format!("{} (topk {t})", al.as_str()),
            };
            let key = if b.is_some() { &dp.name } else { &pp.name };
            return Err(c.err(
                &format!("pools.{key}.server.speculative_algorithm"),
                format!(
                    "prefill pool {:?} runs {} and decode pool {:?} runs {}: in PD sglang launches both sides with the same speculative flags — the prefill registers the draft's KV after the target's and fills the draft's hidden states and top-k for the decode's first step — and pdsim does not model a one-sided setting; set the same speculative_algorithm and speculative_eagle_topk on both",
                    pp.name,
                    name(a),
                    dp.name,
                    name(b)
                ),
            ));
        }
    }
    Ok(())
}

/// What sglang changed or logged on its own for every pool, in pool order.
pub(super) fn notes(pools: &[Pool]) -> Vec<String> {
    pools
        .iter()
        .filter_map(|p| p.speculative.as_ref())
        .flat_map(|s| s.notes.iter().cloned())
        .collect()
}
