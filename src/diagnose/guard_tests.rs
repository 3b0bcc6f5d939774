//! The guards sglang grew after the seed (`docs/sglang-pd.md` §24): registration-time layout
//! validation (PR #37840) and the KV checksum's pricing and comparability (PR #39500), on the
//! Mamba-state dtype pair of issue #36371 — Qwen3-Next at equal attention TP 2, FP32 state on
//! the prefill, BF16 on the decode. Expected values are derived by hand from the model's
//! figures, never read back from the code.

use crate::diagnose::outcome::predict;
use crate::layout::checks::{self, Effect, Profile, RegisteredLayout};
use crate::layout::{PairPlan, RankLayout, test_args};
use crate::spec::{ModelSpec, preset};
use crate::vocab::ErrorKind;

/// Qwen3-Next with its SSM state stored `bytes` wide.
fn qwen(bytes: u32) -> ModelSpec {
    let mut m = preset("qwen3-next-80b-a3b").unwrap();
    m.mamba.as_mut().unwrap().ssm_dtype_bytes = bytes;
    m
}

/// The FP32-prefill, BF16-decode pair at attention TP 2, page 16, not unified.
fn dtype_pair(profile: Profile) -> PairPlan {
    let a = test_args(2, 16, "auto", false);
    PairPlan::compile((&qwen(4), &a), (&qwen(2), &a), profile).unwrap()
}

/// One temporal state row a rank: 32 value heads / TP 2 × 128 × 128 elements — 1,048,576 B in
/// FP32 and 524,288 B in BF16, the pair PR #37840's motivation names.
#[test]
fn the_dtype_pair_has_the_rows_pr_37840_names() {
    let p = dtype_pair(Profile::Guarded);
    let temporal = |l: &RankLayout| l.state_item_lens().into_iter().max().unwrap();
    assert_eq!(temporal(&p.prefill_layouts()[0]), 16 * 128 * 128 * 4);
    assert_eq!(temporal(&p.prefill_layouts()[0]), 1_048_576);
    assert_eq!(temporal(&p.decode_layouts()[0]), 524_288);
}

/// The seed raises after KV (the worker dies); `unguarded` copies in silence; PR #37840
/// rejects the session before any write, naming the first differing entry.
#[test]
fn the_dtype_pair_under_each_sglang() {
    let guarded = predict(&dtype_pair(Profile::Guarded));
    assert_eq!(guarded.kind, Some(ErrorKind::MambaSlotSizeMismatch));
    assert_eq!(
        guarded.message.as_deref(),
        Some(
            "Prefill/Decode Mamba slot size mismatch (src=1048576, dst=524288). Configure matching persistent state layouts on both peers."
        )
    );

    let silent = predict(&dtype_pair(Profile::Unguarded));
    assert_eq!((silent.outcome, silent.kind), ("corrupted", None));

    let mut plan = dtype_pair(Profile::Unguarded);
    plan.validate_registration();
    let e = plan.chunk_error().expect("rejected at registration");
    assert_eq!(e.kind, ErrorKind::PeerLayoutRejected);
    assert_eq!(e.effect, Effect::SessionRejected);
    // The conv rows come first and keep their dtype; the first temporal row differs.
    let n = plan.prefill_layouts()[0].state_item_lens().len();
    let conv = n / 2;
    assert_eq!(
        e.message,
        format!(
            "PD peer layout rejected at registration: state entry {conv} of {n} has another stride (prefill=1048576, decode=524288). The decode session stays failed until it re-registers with a matching layout."
        )
    );
    assert!(plan.last_chunk_error().is_none(), "no chunk reaches it");
    let p = predict(&plan);
    assert_eq!(
        (p.outcome, p.kind),
        ("failed", Some(ErrorKind::PeerLayoutRejected))
    );

    // The same servers with the same dtype register alike: nothing to reject.
    let a = test_args(2, 16, "auto", false);
    let mut same = PairPlan::compile((&qwen(4), &a), (&qwen(4), &a), Profile::Guarded).unwrap();
    same.validate_registration();
    assert!(same.chunk_error().is_none() && same.is_exact());
}

/// What the registration check compares, and what it leaves alone.
#[test]
fn registration_checks_page_size_components_then_strides_at_equal_tp() {
    let side = |tp, ps, comps, kv: &'static [u64], st: &'static [u64]| RegisteredLayout {
        attn_tp: tp,
        page_size: ps,
        state_components: comps,
        kv_item_lens: kv,
        state_item_lens: st,
    };
    let m = checks::state_components(true, false);
    assert_eq!(m, ["mamba"]);
    let ok = side(2, 16, m, &[8192, 8192], &[10, 20]);
    assert!(checks::validate_registration(ok, ok).is_ok());
    let msg = |p, d| checks::validate_registration(p, d).unwrap_err().message;
    assert!(
        msg(ok, side(2, 64, m, &[8192, 8192], &[10, 20])).starts_with(
            "PD peer layout rejected at registration: page sizes differ (prefill=16, decode=64)."
        )
    );
    assert!(
        msg(ok, side(2, 16, &[], &[8192, 8192], &[]))
            .contains("state component lists differ (prefill=['mamba'], decode=[])")
    );
    assert!(
        msg(ok, side(2, 16, m, &[8192], &[10, 20]))
            .contains("KV entry counts differ (prefill=2, decode=1)")
    );
    assert!(
        msg(ok, side(2, 16, m, &[8192, 4096], &[10, 20]))
            .contains("KV entry 1 of 2 has another stride (prefill=8192, decode=4096)")
    );
    // Heterogeneous TP does not use the equal-stride check (PR #37840).
    assert!(checks::validate_registration(ok, side(4, 16, m, &[4096, 4096], &[5, 10])).is_ok());
}

/// The checksum reads every byte it digests once at HBM bandwidth: Llama-3.1-8B at TP 2 and
/// page 64 holds 32 layers × 2 × 4 heads × 128 × 2 B = 64 KiB a token a rank, 4 MiB a page; a
/// 2,048-token prompt (32 pages) is 134,217,728 B, at the H100's 3.35 TB/s 40,064.993 ns,
/// rounded up to 40,065 ns on each side.
#[test]
fn checksum_prices_the_bytes_each_side_reads() {
    let m = preset("llama-3.1-8b").unwrap();
    let a = test_args(2, 64, "auto", false);
    let mut plan = PairPlan::compile((&m, &a), (&m, &a), Profile::Guarded).unwrap();
    assert!(plan.kv_checksum().is_none(), "off unless enabled");
    plan.enable_kv_checksum(3.35e12, 3.35e12);
    let c = *plan.kv_checksum().unwrap();
    assert_eq!(c.prefill_page_bytes, 4_194_304);
    assert_eq!((c.prefill_state_bytes, c.decode_state_bytes), (0, 0));
    assert!(c.comparable);
    assert_eq!(c.digest_ns(32), (40_065, 40_065));
    // A decode twice as fast digests in half the time (rounded up).
    plan.enable_kv_checksum(3.35e12, 6.7e12);
    assert_eq!(plan.kv_checksum().unwrap().digest_ns(32), (40_065, 20_033));
    // A healthy equal pair stays compatible with the checksum on.
    assert!(predict(&plan).compatible);
}

/// Different item lengths can never digest alike: with the checksum on, the dtype pair aborts
/// every request on decode. Where a transfer check raises first (the seed's after-KV slot-size
/// check, before decode ever sees `Success`) that check keeps its precedence.
#[test]
fn checksum_on_the_dtype_pair() {
    let mut silent = dtype_pair(Profile::Unguarded);
    silent.enable_kv_checksum(4.8e12, 4.8e12);
    assert!(!silent.kv_checksum().unwrap().comparable);
    let p = predict(&silent);
    assert_eq!(
        (p.outcome, p.kind),
        ("failed", Some(ErrorKind::KvChecksumMismatch))
    );
    assert_eq!(
        p.message.as_deref(),
        Some("KV checksum mismatch for bootstrap_room={bootstrap_room}")
    );
    let mut guarded = dtype_pair(Profile::Guarded);
    guarded.enable_kv_checksum(4.8e12, 4.8e12);
    assert_eq!(
        predict(&guarded).kind,
        Some(ErrorKind::MambaSlotSizeMismatch)
    );
    assert_eq!(
        checks::kv_checksum_mismatch(7),
        "KV checksum mismatch for bootstrap_room=7"
    );
}

/// `pdsim lint` predicts both guards from two launch lines: the dtype pair raises after KV
/// at the seed, is rejected at registration under PR #37840, and with the checksum on both
/// lines (unguarded transfer checks) aborts on decode; the checksum flag under the seed is a
/// usage error naming the versions that have it.
#[test]
fn lint_predicts_both_guards() {
    use crate::diagnose::lint::{LintError, LintQuestion, lint};
    let line = |side: &str, dtype: &str, extra: &str| {
        format!(
            "python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --disaggregation-mode {side} --tp-size 2 --page-size 16 --mamba-ssm-dtype {dtype} {extra}"
        )
    };
    let ask = |profile: &str, version: Option<&str>, extra: &str| LintQuestion {
        prefill: line("prefill", "float32", extra),
        decode: line("decode", "bfloat16", extra),
        model_config: None,
        profile: profile.into(),
        version: version.map(String::from),
    };
    let kind = |q: &LintQuestion| lint(q).unwrap().prediction.kind;
    assert_eq!(
        kind(&ask("guarded", None, "")),
        Some(ErrorKind::MambaSlotSizeMismatch)
    );
    let silent = lint(&ask("unguarded", None, "")).unwrap();
    assert_eq!(
        (silent.prediction.outcome, silent.prediction.compatible),
        ("corrupted", false)
    );
    assert_eq!(
        kind(&ask("unguarded", Some("2026-09+pr37840"), "")),
        Some(ErrorKind::PeerLayoutRejected)
    );
    let flag = "--disaggregation-enable-kv-checksum";
    assert_eq!(
        kind(&ask("unguarded", Some("2026-09"), flag)),
        Some(ErrorKind::KvChecksumMismatch)
    );
    match lint(&ask("unguarded", None, flag)) {
        Err(LintError::Version(m)) => assert!(
            m.contains("does not exist in sglang version \"seed\"") && m.contains("\"2026-09\""),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        lint(&ask("guarded", Some("2027"), "")),
        Err(LintError::Version(_))
    ));
}
