//! `pdsim lint`'s analysis: two sglang launch lines parsed (`spec::launch`), their models
//! resolved, and the pair's outcome predicted (`diagnose::outcome`), with the flags that fix it
//! (`diagnose::kinds`). `cli/lint.rs` parses the command line and prints.

use std::path::PathBuf;

use serde::Serialize;

use super::kinds;
use super::outcome::{Prediction, predict};
use crate::layout::{PairPlan, Profile, SendPath};
use crate::spec::launch::{LaunchError, ServerLine, parse_line, resolve_model};
use crate::spec::{ServerArgs, SglangVersion};
use crate::vocab::ErrorKind;

/// What `lint` is asked: two launch lines, the model config they serve (when their
/// `--model-path` is not enough) and the sglang behaviour to predict.
#[derive(Clone, Debug)]
pub struct LintQuestion {
    /// The prefill server's command line.
    pub prefill: String,
    /// The decode server's command line.
    pub decode: String,
    /// A Hugging Face config.json for the model both lines serve.
    pub model_config: Option<PathBuf>,
    /// `guarded`, `slice_dispatch` or `unguarded`.
    pub profile: String,
    /// The sglang release (`spec::SglangVersion`'s names; `seed` when `None`).
    pub version: Option<String>,
}

/// Why `lint` could not predict (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// `--profile` is not one pdsim knows.
    #[error("{0}")]
    Profile(String),
    /// `--sglang-version` is not one pdsim knows, or a line sets a flag that version lacks.
    #[error("{0}")]
    Version(String),
    /// A launch line pdsim cannot read.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// A server of the pair would not start (sglang refuses the flags).
    #[error("{0}")]
    Unstartable(String),
    /// The server args have no layout.
    #[error(transparent)]
    Layout(#[from] crate::layout::LayoutError),
}

/// A full lint report.
#[derive(Clone, Debug, Serialize)]
pub struct LintReport {
    /// The prefill line as understood.
    pub prefill: ServerLine,
    /// The decode line as understood.
    pub decode: ServerLine,
    /// The sglang behaviour predicted.
    pub profile: Profile,
    /// The sglang release predicted (left out at the seed's, so older reports keep their
    /// bytes).
    #[serde(skip_serializing_if = "is_seed")]
    pub version: SglangVersion,
    /// The prediction.
    pub prediction: Prediction,
    /// The flags that fix it (empty when compatible).
    pub fix: Option<String>,
    /// Warnings about the lines.
    pub warnings: Vec<String>,
    /// What the decode's radix cache (`--disaggregation-decode-enable-radix-cache`) does to
    /// the pair's transfers, when the decode line sets it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_prefix_reuse: Option<String>,
    /// The prefill's pipeline stages and what each writes, when its line sets `--pp-size` > 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<String>,
    /// What the decode's context parallelism (`--dcp-size` > 1) does to its KV and the
    /// pair's transfers (docs/sglang-pd.md §28).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_context_parallel: Option<String>,
}

fn is_seed(v: &SglangVersion) -> bool {
    *v == SglangVersion::Seed
}

/// Parses both lines and predicts their outcome.
pub fn lint(a: &LintQuestion) -> Result<LintReport, LintError> {
    let profile: Profile = a.profile.parse().map_err(|e: String| {
        LintError::Profile(format!(
            "--profile: {e}{}",
            crate::vocab::suggest::suggestion(
                &a.profile,
                &["guarded", "slice_dispatch", "unguarded"]
            )
        ))
    })?;
    let mut warnings_pre: Vec<String> = Vec::new();
    let version: SglangVersion = match a.version.as_deref() {
        None => SglangVersion::default(),
        Some(v) => v.parse().map_err(|e: String| {
            LintError::Version(format!(
                "--sglang-version: {e}{}",
                crate::vocab::suggest::suggestion(v, &SglangVersion::names())
            ))
        })?,
    };
    let mut p = parse_line(&a.prefill, "prefill")?;
    let mut d = parse_line(&a.decode, "decode")?;
    for (l, side) in [(&p, "prefill"), (&d, "decode")] {
        if l.kv_checksum && !version.has_kv_checksum() {
            return Err(LintError::Version(format!(
                "--{side}: --disaggregation-enable-kv-checksum does not exist in sglang version {:?} (it came with PR #39500); versions that have it: {}; pass --sglang-version",
                version.as_str(),
                SglangVersion::names_where(SglangVersion::has_kv_checksum)
            )));
        }
    }
    if d.decode_radix_cache && !version.has_decode_radix_cache() {
        return Err(LintError::Version(format!(
            "--decode: --disaggregation-decode-enable-radix-cache does not exist in sglang version {:?} (it came with PR #19746); versions that have it: {}; pass --sglang-version",
            version.as_str(),
            SglangVersion::names_where(SglangVersion::has_decode_radix_cache)
        )));
    }
    for (l, side) in [(&p, "prefill"), (&d, "decode")] {
        if l.decode_extra_slots.is_some() && !version.has_decode_extra_slots_flag() {
            return Err(LintError::Version(format!(
                "--{side}: --disaggregation-decode-extra-slots does not exist in sglang version {:?} (the seed reads SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS from the environment); versions that have it: {}; pass --sglang-version",
                version.as_str(),
                SglangVersion::names_where(SglangVersion::has_decode_extra_slots_flag)
            )));
        }
    }
    if p.decode_extra_slots.is_some() {
        warnings_pre.push(
            "prefill: --disaggregation-decode-extra-slots is read only with --disaggregation-mode decode".to_string(),
        );
    }
    if p.decode_radix_cache {
        warnings_pre.push(
            "prefill: --disaggregation-decode-enable-radix-cache is read only with --disaggregation-mode decode; the prefill's own prefix cache is its radix cache".to_string(),
        );
    }
    if p.kv_checksum != d.kv_checksum {
        warnings_pre.push(format!(
            "--disaggregation-enable-kv-checksum on the {} line only: sglang PR #39500 asks for it on both; the side without it sends or checks no digest, so the prediction has no checksum",
            if p.kv_checksum { "prefill" } else { "decode" }
        ));
    }
    resolve_model(&mut p, a.model_config.as_deref(), "prefill")?;
    resolve_model(&mut d, a.model_config.as_deref(), "decode")?;
    let mut warnings: Vec<String> = std::mem::take(&mut warnings_pre);
    warnings.extend(
        p.warnings
            .iter()
            .map(|w| format!("prefill: {w}"))
            .chain(d.warnings.iter().map(|w| format!("decode: {w}"))),
    );
    if p.model != d.model {
        warnings.push(format!(
            "the two lines serve different models ({} and {}): sglang does not check this; the layouts below are each side's own",
            p.model, d.model
        ));
    }
    if p.args.quantization != d.args.quantization {
        let q = |a: &ServerArgs| a.quantization.map_or("none", |q| q.as_str());
        warnings.push(format!(
            "the two lines quantize differently (--quantization {} and {}): sglang does not check this and the KV layout does not depend on it, but decode then continues from a prefill computed with other weights",
            q(&p.args),
            q(&d.args)
        ));
    }
    for (line, side) in [(&mut p, "prefill"), (&mut d, "decode")] {
        let model = line.spec.clone().expect("resolved");
        let notes = crate::scenario::speculative_for_line(
            side,
            &model,
            &mut line.args,
            &line.speculative_flags,
        )
        .map_err(LintError::Unstartable)?;
        warnings.extend(notes.into_iter().map(|n| format!("{side}: {n}")));
    }
    // Each side registers and sizes by its own flags; sglang's PD deployments launch both
    // alike, and pdsim's scenarios refuse anything else (`docs/sglang-pd.md` §19.5).
    let alg = |a: &ServerArgs| {
        a.speculative
            .as_ref()
            .map(|s| (s.algorithm.as_str(), s.eagle_topk))
    };
    if alg(&p.args) != alg(&d.args) {
        let say = |a: &ServerArgs| {
            alg(a).map_or("no speculative decoding".to_string(), |(n, k)| {
                format!("--speculative-algorithm {n} with --speculative-eagle-topk {k}")
            })
        };
        warnings.push(format!(
            "the prefill runs {} and the decode {}: the prefill registers the draft's KV after the target's and fills the draft's hidden states and top-k for the decode's first step, so sglang's PD examples launch both sides with the same speculative flags; pdsim does not model a one-sided setting (a scenario with it is refused); the outcome compares the two layouts as given",
            say(&p.args),
            say(&d.args)
        ));
    }
    let (ps, ds) = (
        p.spec.as_ref().expect("resolved"),
        d.spec.as_ref().expect("resolved"),
    );
    let decode_prefix_reuse = if d.decode_radix_cache {
        decode_radix_refusal(&d, ds).map_err(LintError::Unstartable)?;
        if d.args.attn_tp_size < d.args.tp_size {
            warnings.push("decode: sglang warns \"EXPERIMENTAL: Decode radix cache with DP attention. Requires prefix-aware DP rank routing for optimal cache hits.\" (handle_pd_disaggregation): each DP rank keeps its own tree".to_string());
        }
        Some("on: decode matches each request's prompt against the KV of the requests it finished (page-aligned), locks it, preallocates only the rest and sends the prefill decode_prefix_len; the prefill still computes what its own cache lacks but sends only the suffix pages (fewer bytes and, on a fragmented pool, fewer RDMA writes); a full hit still sends the aux row. Multi-turn traffic re-uses the previous turn's prompt and answer".to_string())
    } else {
        None
    };
    if p.args.enable_unified_memory && !ps.is_hybrid()
        || d.args.enable_unified_memory && !ds.is_hybrid()
    {
        return Err(LintError::Unstartable(format!(
            "--enable-unified-memory on a model without hybrid (mamba/GDN/SWA) layers ({}): sglang's unified pool needs at least two sub-pools, so that server would not start",
            if p.args.enable_unified_memory && !ps.is_hybrid() {
                &p.model
            } else {
                &d.model
            }
        )));
    }
    let decode_context_parallel = dcp_check(
        (
            &mut d.args,
            &d.transfer_backend,
            (d.decode_radix_cache, d.hierarchical_cache),
            d.kv_checksum,
        ),
        ds,
        &mut warnings,
    )?;
    let pipeline = pipeline_check(&mut p.args, p.kv_checksum, ps, (version, &mut warnings))?;
    let mut plan = PairPlan::compile((ps, &p.args), (ds, &d.args), profile)?;
    if version.validates_registration() {
        plan.validate_registration();
    }
    if p.kv_checksum && d.kv_checksum {
        // The rates do not change the verdict lint predicts.
        plan.enable_kv_checksum(1.0, 1.0);
    }
    let prediction = predict(&plan);
    let pipeline = pipeline.map(|s| {
        let w = plan.targets().len() as u32 / plan.pp_size();
        format!(
            "{s}; {w} writer target(s) a stage, {} in all",
            plan.targets().len()
        )
    });
    let fix = match (prediction.kind, prediction.outcome) {
        // A stage whose layer count does not divide the decode's: `get_mha_kv_ptrs_with_pp`
        // takes it for a decode with draft layers and puts its V regions at the wrong offset.
        (None, "corrupted") if p.args.pp_size > 1 => Some(format!(
            "a --pp-size whose every stage's layer count divides the model's {} layers (get_pp_indices gives the last num_layers % pp_size stages one more): get_mha_kv_ptrs_with_pp reads a stage of {} layers into a decode of {} as the \"decode has draft model KV\" case and writes its V at the wrong layers",
            ps.num_layers,
            crate::spec::server::pp_indices(ps.num_layers, 0, p.args.pp_size).1,
            ps.num_layers
        )),
        (Some(k), _) => Some(kinds::fix(k, &p.args, &d.args)),
        (None, "corrupted") if super::outcome::fp4_scales_only(&prediction) => {
            Some(super::outcome::FP4_FIX.to_string())
        }
        (None, "corrupted") => Some(kinds::fix(ErrorKind::TransferOutOfBounds, &p.args, &d.args)),
        _ => None,
    };
    Ok(LintReport {
        prefill: p,
        decode: d,
        profile,
        version,
        prediction,
        fix,
        warnings,
        decode_prefix_reuse,
        pipeline,
        decode_context_parallel,
    })
}

/// A decode line's `--dcp-size` (docs/sglang-pd.md §28): sglang's start-up refusals
/// (`handle_pd_disaggregation`: a backend other than mooncake or nixl, the decode radix cache,
/// HiCache; the DCP group inside the TP group), then what it does, or `None` without DCP. A
/// line pdsim does not model with DCP (a model without MLA, a draft, DP attention, the KV
/// checksum) is read with `--dcp-size 1` and a warning.
fn dcp_check(
    (args, transfer_backend, (decode_radix_cache, hicache), kv_checksum): (
        &mut ServerArgs,
        &str,
        (bool, bool),
        bool,
    ),
    model: &crate::spec::ModelSpec,
    warnings: &mut Vec<String>,
) -> Result<Option<String>, LintError> {
    use crate::sglang::dcp as refusal;
    let dcp = args.dcp_size;
    if dcp <= 1 {
        return Ok(None);
    }
    // `handle_pd_disaggregation` rewrites `mooncake_tcp` to `mooncake` before this check.
    let backend = if transfer_backend == "mooncake_tcp" {
        "mooncake"
    } else {
        transfer_backend
    };
    if !matches!(backend, "mooncake" | "nixl") {
        return Err(LintError::Unstartable(format!(
            "--decode: {}",
            refusal::backend_refusal(transfer_backend)
        )));
    }
    if decode_radix_cache {
        return Err(LintError::Unstartable(format!(
            "--decode: {}",
            refusal::RADIX_REFUSAL
        )));
    }
    if hicache {
        return Err(LintError::Unstartable(format!(
            "--decode: {}",
            refusal::HICACHE_REFUSAL
        )));
    }
    let tp = args.tp_size;
    if !tp.is_multiple_of(dcp) {
        return Err(LintError::Unstartable(format!(
            "--decode: --dcp-size {dcp} does not divide --tp-size {tp}: sglang takes the DCP ranks from inside each TP group (tp_size % dcp_size == 0)"
        )));
    }
    let why = if !model.is_mla() || model.is_hybrid() {
        Some("a model without plain MLA (sglang's relayout sends MLA latent rows)")
    } else if args.speculative.is_some() {
        Some("speculative decoding (the draft's DCP relayout, PR #40500, was not read)")
    } else if args.attn_tp_size != tp {
        Some("DP attention")
    } else if kv_checksum {
        Some("--disaggregation-enable-kv-checksum (its digest of a token shard was not read)")
    } else {
        None
    };
    if let Some(why) = why {
        warnings.push(format!(
            "decode: --dcp-size {dcp} is not modelled with {why}; the prediction reads the decode with --dcp-size 1"
        ));
        args.dcp_size = 1;
        return Ok(None);
    }
    Ok(Some(format!(
        "--dcp-size {dcp}: each decode rank keeps the tokens p with p % {dcp} == its TP rank % {dcp} (pages of {} tokens a rank, virtual pages of {}), so the instance holds {dcp}× the tokens of its latent; the prefill relays each chunk out with send_kvcache_dcp, one block per layer and run of destination pages when it packs (PR #35762), one per token and layer when a rank's rows outgrow its pack region (max_prefill_tokens / {dcp} tokens); a decode step reads 1/{dcp} of the context a GPU and merges by LSE (Q all-gather, LSE all-gather, output reduce-scatter per layer)",
        args.page_size,
        args.tokens_per_page()
    )))
}

/// A prefill line's `--pp-size` (docs/sglang-pd.md §27): what its stages hold, or `None`
/// without PP. A line pdsim cannot predict with PP (more stages than layers is refused; a
/// model with state, a draft, the checksum or registration validation) is read with
/// `--pp-size 1` and a warning.
fn pipeline_check(
    args: &mut ServerArgs,
    kv_checksum: bool,
    model: &crate::spec::ModelSpec,
    (version, warnings): (SglangVersion, &mut Vec<String>),
) -> Result<Option<String>, LintError> {
    let pp = args.pp_size;
    if pp <= 1 {
        return Ok(None);
    }
    if pp > model.num_layers {
        return Err(LintError::Unstartable(format!(
            "--prefill: --pp-size {pp} for the {} layers of {}: sglang's get_pp_indices would leave a stage without a layer",
            model.num_layers, model.name
        )));
    }
    let why = if model.is_hybrid() || model.is_swa() {
        Some(
            "a model with recurrent or sliding-window state (each stage's state pairing was not read)",
        )
    } else if args.speculative.is_some() {
        Some("speculative decoding (prefill PP with EAGLE is sglang PR #33584, open)")
    } else if kv_checksum {
        Some("--disaggregation-enable-kv-checksum (its digest of a stage's layers was not read)")
    } else if version.validates_registration() {
        Some(
            "registration-time validation (PR #37840 on a stage's partial layer list was not read)",
        )
    } else {
        None
    };
    if let Some(why) = why {
        warnings.push(format!(
            "prefill: --pp-size {pp} is not modelled with {why}; the prediction reads the prefill with --pp-size 1"
        ));
        args.pp_size = 1;
        return Ok(None);
    }
    let stages: Vec<String> = (0..pp)
        .map(|r| {
            let (a, b) = crate::spec::server::pp_indices(model.num_layers, r, pp);
            format!("{a}..{b}")
        })
        .collect();
    Ok(Some(format!(
        "{pp} stages of TP {} hold layers {} (get_pp_indices); each stage's ranks write their own layers to the decode ranks (get_mha_kv_ptrs_with_pp), the last stage the metadata row",
        args.tp_size,
        stages.join(", ")
    )))
}

/// sglang's refusals of `--disaggregation-decode-enable-radix-cache` on decode line `d`
/// serving `model`, with its texts: `handle_pd_disaggregation`
/// (`arg_groups/pd_disaggregation_hook.py`) for HiSparse, the `fake` backend and speculative
/// decoding; `build_kv_cache` (`mem_cache/kv_cache_builder.py`) for SWA and Mamba/SSM models.
fn decode_radix_refusal(d: &ServerLine, model: &crate::spec::ModelSpec) -> Result<(), String> {
    use crate::sglang::decode_radix::{Refusal, refusal};
    let alg = d
        .speculative_flags
        .iter()
        .find(|(f, v)| f == "--speculative-algorithm" && !v.eq_ignore_ascii_case("none"));
    let r = if d.hisparse {
        Refusal::Hisparse
    } else if d.transfer_backend == "fake" {
        Refusal::FakeBackend
    } else if let Some((_, alg)) = alg {
        Refusal::Speculative(alg)
    } else if model.is_swa() {
        Refusal::Swa
    } else if model.is_hybrid() {
        Refusal::MambaSsm
    } else {
        return Ok(());
    };
    Err(refusal(r))
}

/// The text form of a report.
pub fn render(r: &LintReport) -> String {
    let pr = &r.prediction;
    let mut s = format!(
        "prefill: {} ({})\n  {}\ndecode:  {} ({})\n  {}\nsend path: {} (sglang profile {})\n",
        r.prefill.model,
        r.prefill.model_path,
        pr.prefill_layout.line(),
        r.decode.model,
        r.decode.model_path,
        pr.decode_layout.line(),
        match pr.send_path {
            SendPath::SendKvcache if r.decode_context_parallel.is_some() =>
                "send_kvcache_dcp (each decode rank's tokens, relaid out per DCP rank)",
            SendPath::SendKvcache =>
                "send_kvcache → _send_kvcache_generic (whole pages per region)",
            SendPath::Slice =>
                "send_kvcache_slice (one RDMA write per token per layer: heterogeneous TP)",
        },
        r.profile.as_str()
    );
    if r.version != SglangVersion::Seed {
        s += &format!("sglang version: {}\n", r.version.as_str());
    }
    if pr.compatible {
        s += "outcome: COMPATIBLE — requests complete from their own bytes\n";
    } else if let (Some(k), Some(m)) = (pr.kind, &pr.message) {
        let i = kinds::info(k);
        s += &format!("outcome: INCOMPATIBLE — {k}\n  sglang: {m}\n");
        s += &format!(
            "  raised by: {}\n  where: {}\n  check: {}\n  effect: {}\n  see: docs/sglang-pd.md {}\n",
            pr.raised.as_deref().unwrap_or(""),
            i.raised_in,
            i.check,
            i.effect,
            i.doc
        );
    } else if super::outcome::fp4_scales_only(pr) {
        s += "outcome: INCOMPATIBLE — silent corruption: no error is raised, but the decode dequantises the transferred FP4 KV with scales nobody sent (requests finish corrupted; see docs/sglang-pd.md §29)\n";
        s += &format!("  raised by: {}\n", pr.raised.as_deref().unwrap_or(""));
    } else {
        s += "outcome: INCOMPATIBLE — silent corruption: no error is raised, but the writes land on bytes the request does not own (requests finish corrupted; see docs/sglang-pd.md §4)\n";
    }
    if let Some(f) = &r.fix {
        s += &format!("  fix: {f}\n");
    }
    if let Some(x) = &r.decode_prefix_reuse {
        s += &format!("decode prefix reuse: {x}\n");
    }
    if let Some(x) = &r.decode_context_parallel {
        s += &format!("decode context parallel: {x}\n");
    }
    if let Some(x) = &r.pipeline {
        s += &format!("pipeline: {x}\n");
    }
    for w in &r.warnings {
        s += &format!("warning: {w}\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decode radix cache: refused at the seed's version, refused with sglang's texts
    /// beside HiSparse, the fake backend, speculative decoding and a Mamba model; warned with
    /// DP attention; predicted otherwise.
    /// `--pp-size` on the prefill line (docs/sglang-pd.md §27): Llama-3.1-8B's 32 layers over 2
    /// stages of TP 2 into a TP-4 decode are compatible, each stage's 2 ranks serving 2 decode
    /// ranks: 4 targets a stage, 8 in all; 3 stages (10, 11, 11 layers) are silent corruption
    /// with a fix naming the stage's layer count; a decode line's `--pp-size` is read as 1 with
    /// sglang's assert text; more stages than layers cannot start.
    #[test]
    fn a_pp_prefill_line_is_read_stage_by_stage() {
        let q = |p: &str, d: &str| LintQuestion {
            prefill: format!(
                "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode prefill --page-size 64 {p}"
            ),
            decode: format!(
                "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode decode --page-size 64 {d}"
            ),
            model_config: None,
            profile: "guarded".into(),
            version: None,
        };
        let r = lint(&q("--tp-size 2 --pp-size 2", "--tp-size 4")).unwrap();
        assert!(r.prediction.compatible);
        let pipe = r.pipeline.as_deref().expect("a pipeline line");
        assert!(
            pipe.contains("layers 0..16, 16..32")
                && pipe.contains("4 writer target(s) a stage, 8 in all"),
            "{pipe}"
        );
        assert!(render(&r).contains("pipeline: 2 stages of TP 2"));
        let r = lint(&q("--tp-size 2 --pp-size 3", "--tp-size 2 --pp-size 2")).unwrap();
        assert_eq!(r.prediction.outcome, "corrupted");
        let fix = r.fix.as_deref().unwrap_or_default();
        assert!(
            fix.contains("--pp-size") && fix.contains("10 layers"),
            "{fix}"
        );
        assert!(
            r.warnings.iter().any(|w| w.contains("decode: --pp-size 2")
                && w.contains("Decode pp size should be equal to prefill pp size or 1")),
            "{:?}",
            r.warnings
        );
        assert_eq!(r.decode.args.pp_size, 1);
        let e = lint(&q("--tp-size 1 --pp-size 40", "--tp-size 1")).expect_err("too many stages");
        assert!(e.to_string().contains("--pp-size 40"), "{e}");
        let r = lint(&q("--tp-size 2", "--tp-size 2")).unwrap();
        assert!(r.pipeline.is_none());
    }

    #[test]
    fn decode_extra_slots_exist_from_2026_09() {
        let q = |extra: &str, version: Option<&str>| {
            LintQuestion {
            prefill: "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode prefill --tp-size 2".into(),
            decode: format!("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode decode --tp-size 2 {extra}"),
            model_config: None,
            profile: "guarded".into(),
            version: version.map(String::from),
        }
        };
        let e = lint(&q("--disaggregation-decode-extra-slots 48", None)).expect_err("seed");
        let e = e.to_string();
        assert!(
            e.contains("does not exist in sglang version \"seed\"")
                && e.contains("SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS")
                && e.contains("\"2026-09\""),
            "{e}"
        );
        let r = lint(&q(
            "--disaggregation-decode-extra-slots 48",
            Some("2026-09"),
        ))
        .unwrap();
        assert!(r.prediction.compatible);
        assert!(
            !r.warnings.iter().any(|w| w.contains("extra-slots")),
            "{:?}",
            r.warnings
        );
        let e = lint(&q(
            "--disaggregation-decode-extra-slots lots",
            Some("2026-09"),
        ))
        .expect_err("not a number")
        .to_string();
        assert!(e.contains("must be a whole number"), "{e}");
    }

    #[test]
    fn the_decode_radix_cache_is_checked_as_sglang_checks_it() {
        let line = |side: &str, model: &str, extra: &str| {
            format!(
                "python -m sglang.launch_server --model-path {model} --disaggregation-mode {side} --tp-size 2 {extra}"
            )
        };
        let ask = |model: &str, extra: &str, version: Option<&str>| {
            lint(&LintQuestion {
                prefill: line("prefill", model, ""),
                decode: line(
                    "decode",
                    model,
                    &format!("--disaggregation-decode-enable-radix-cache {extra}"),
                ),
                model_config: None,
                profile: "guarded".into(),
                version: version.map(String::from),
            })
        };
        let llama = "meta-llama/Llama-3.1-8B-Instruct";
        let v = Some("2026-09");
        let err = |r: Result<LintReport, LintError>| r.expect_err("refused").to_string();
        assert!(err(ask(llama, "", None)).contains("does not exist in sglang version \"seed\""));
        for (extra, text) in [
            (
                "--enable-hisparse",
                "is incompatible with --enable-hisparse",
            ),
            (
                "--disaggregation-transfer-backend fake",
                "is incompatible with --disaggregation-transfer-backend fake",
            ),
            (
                "--speculative-algorithm EAGLE --speculative-draft-model-path lmsys/sglang-EAGLE-LLaMA3-Instruct-8B",
                "is incompatible with speculative decoding (--speculative-algorithm EAGLE)",
            ),
        ] {
            assert!(err(ask(llama, extra, v)).contains(text), "{extra}");
        }
        assert!(
            err(ask("Qwen/Qwen3-Next-80B-A3B-Instruct", "", v))
                .contains("is incompatible with Mamba/SSM models")
        );
        let ok = ask(llama, "", v).unwrap();
        assert!(ok.decode_prefix_reuse.is_some() && ok.warnings.is_empty());
        assert!(render(&ok).contains("decode prefix reuse: on"));
        let dp = ask(llama, "--dp-size 2 --enable-dp-attention", v).unwrap();
        assert!(
            dp.warnings
                .iter()
                .any(|w| w.contains("EXPERIMENTAL: Decode radix cache with DP attention"))
        );
    }

    /// A pair quantized alike is compatible and unwarned; one that differs is compatible (the KV
    /// layout does not depend on it) but warned.
    #[test]
    fn quantization_of_a_pair_is_compared() {
        let line = |side: &str, q: &str| {
            format!(
                "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode {side} --tp-size 2 {q}"
            )
        };
        let lint_pair = |pq: &str, dq: &str| {
            lint(&LintQuestion {
                prefill: line("prefill", pq),
                decode: line("decode", dq),
                model_config: None,
                profile: "guarded".into(),
                version: None,
            })
            .unwrap()
        };
        let both = lint_pair("--quantization fp8", "--quantization fp8");
        assert!(both.prediction.compatible);
        assert!(both.warnings.is_empty(), "{:?}", both.warnings);
        assert_eq!(
            both.prefill.spec.as_ref().unwrap().weights.dense,
            crate::spec::WeightDtype::Fp8
        );
        let mixed = lint_pair("--quantization fp8", "");
        assert!(
            mixed.prediction.compatible,
            "the KV layout does not depend on it"
        );
        assert!(
            mixed
                .warnings
                .iter()
                .any(|w| w.contains("quantize differently")),
            "{:?}",
            mixed.warnings
        );
    }
}
