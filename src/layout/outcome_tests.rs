//! `docs/sglang-pd.md` §5.3: every row of the outcome table, under the profile its column names
//! (the "version read" column is `slice_dispatch`, the seeds' column is `guarded`), with the
//! error kinds and full messages compared character for character; and the two seed messages.

use super::checks::{Effect, PdError, Profile};
use super::oracle::{DecodeMemory, RequestId, Verdict};
use super::plan::{ChunkRequest, ErrorTiming, PairPlan};
use super::rank::{Capacity, RankLayout};
use crate::spec::{KvAttention, ModelSpec, ServerArgs, preset};
use crate::vocab::ErrorKind;

/// (unified, page size, attention TP).
type Side = (bool, u32, u32);
const U: bool = true;
const N: bool = false;

fn args((unified, ps, tp): Side, dtype: &str) -> ServerArgs {
    super::test_args(tp, ps, dtype, unified)
}

fn plan2(
    pm: &ModelSpec,
    dm: &ModelSpec,
    dtype: &str,
    p: Side,
    d: Side,
    profile: Profile,
) -> PairPlan {
    PairPlan::compile((pm, &args(p, dtype)), (dm, &args(d, dtype)), profile).unwrap()
}

fn plan(model: &str, dtype: &str, p: Side, d: Side, profile: Profile) -> PairPlan {
    let m = preset(model).unwrap();
    plan2(&m, &m, dtype, p, d, profile)
}

const QWEN: &str = "qwen3-next-80b-a3b";
const NEM: &str = "nemotron-h-8b";

/// The first error a request on this pair meets, and when.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// No error, and the plan is exact.
    Pass,
    /// Decode raises at first contact.
    FirstContact(ErrorKind, String),
    /// Every chunk raises before its first write.
    BeforeWrites(ErrorKind, String, Effect),
    /// The last chunk raises after its KV.
    AfterKv(ErrorKind, String),
}

fn outcome(p: &PairPlan) -> Outcome {
    let o = if let Some(e) = p.first_contact() {
        Outcome::FirstContact(e.kind, e.message.clone())
    } else if let Some(e) = p.chunk_error() {
        Outcome::BeforeWrites(e.kind, e.message.clone(), e.effect)
    } else if let Some(e) = p.last_chunk_error() {
        assert_eq!(e.effect, Effect::WorkerDies);
        Outcome::AfterKv(e.kind, e.message.clone())
    } else {
        assert!(p.is_exact(), "a passing pair must place every byte exactly");
        Outcome::Pass
    };
    // What the simulator sees per chunk agrees with the plan's summary.
    let pages = [1u32, 2];
    let req = |last| ChunkRequest {
        src_pages: &pages,
        dst_pages: &pages,
        last,
        src_slot: Some(1),
        dst_slot: Some(1),
        src_aux: 0,
        dst_aux: 0,
    };
    let (mid, last) = (p.chunk(&req(false)), p.chunk(&req(true)));
    match &o {
        Outcome::BeforeWrites(..) => {
            for t in [&mid, &last] {
                assert!(t.flows.is_empty());
                assert_eq!(t.error.as_ref().unwrap().1, ErrorTiming::BeforeAnyWrite);
            }
        }
        Outcome::AfterKv(k, _) => {
            assert_eq!(mid.error, None);
            let (e, timing) = last.error.clone().unwrap();
            assert_eq!((e.kind, timing), (*k, ErrorTiming::AfterKv));
            // No state, no aux after the raise: the last chunk moves what a middle chunk moves.
            assert_eq!(last.flows, mid.flows);
        }
        Outcome::Pass => assert_eq!(last.error, None),
        // The simulator never asks for chunks after a first-contact failure.
        Outcome::FirstContact(..) => {}
    }
    o
}

fn e1(src: u64, regions: usize, dst: u64) -> String {
    format!(
        "PD KV layout mismatch on the whole-envelope path: prefill has 1 KV region(s) with item_lens=[{src}], decode has {regions} with item_len={dst}. With --enable-unified-memory both sides must enable it and use the same page size and model spec."
    )
}

fn e2(a: u32, b: u32) -> String {
    format!(
        "--enable-unified-memory does not support different prefill / decode attention TP sizes (prefill={a}, decode={b}): the whole-envelope state cannot be TP-resliced."
    )
}

fn mlay(src: &[u64], dst: &[u64]) -> String {
    format!(
        "Mamba state layouts differ between prefill and decode (src item_lens={}, dst item_lens={}) and no per-tensor dim metadata is available to reslice. With --enable-unified-memory, prefill and decode must both enable it and use equal attention TP sizes.",
        super::checks::py_list(src),
        super::checks::py_list(dst)
    )
}

fn psm(p: u32, d: u32) -> String {
    format!(
        "Page size mismatch: prefill server has page_size={p}, but decode server has page_size={d}. Both servers must use the same --page-size value."
    )
}

fn before(kind: ErrorKind, msg: String) -> Outcome {
    Outcome::BeforeWrites(kind, msg, Effect::WorkerDies)
}

#[test]
fn seed_messages_verbatim() {
    // The two seed errors as quoted at the top of sglang-pd.md, values filled in.
    let p = plan(QWEN, "auto", (U, 16, 2), (N, 16, 2), Profile::Guarded);
    assert_eq!(
        p.chunk_error().unwrap().message,
        "PD KV layout mismatch on the whole-envelope path: prefill has 1 KV region(s) with item_lens=[196608], decode has 24 with item_len=8192. With --enable-unified-memory both sides must enable it and use the same page size and model spec."
    );
    let p = plan(QWEN, "auto", (U, 16, 1), (U, 16, 2), Profile::Guarded);
    assert_eq!(
        p.chunk_error().unwrap().message,
        "--enable-unified-memory does not support different prefill / decode attention TP sizes (prefill=1, decode=2): the whole-envelope state cannot be TP-resliced."
    );
}

#[test]
fn row_01_qwen_unified_equal_passes() {
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        let p = plan(QWEN, "auto", (U, 16, 2), (U, 16, 2), prof);
        assert_eq!(outcome(&p), Outcome::Pass);
        assert_eq!(p.prefill_layouts()[0].kv_item_lens(), vec![196_608]);
        assert_eq!(p.decode_layouts()[0].state_item_lens(), vec![38_633_472]);
    }
}

#[test]
fn row_02_page_size_differs() {
    let p = plan(QWEN, "auto", (U, 16, 2), (U, 64, 2), Profile::SliceDispatch);
    assert_eq!(
        outcome(&p),
        Outcome::FirstContact(ErrorKind::PageSizeMismatch, psm(16, 64))
    );
    // Seeds' model: were the validator reached, error (1).
    let p = plan(QWEN, "auto", (U, 16, 2), (U, 64, 2), Profile::Guarded);
    assert_eq!(p.first_contact().unwrap().kind, ErrorKind::PageSizeMismatch);
    let e = p.chunk_error().unwrap();
    assert_eq!(e.kind, ErrorKind::EnvelopeLayoutMismatch);
    assert_eq!(e.message, e1(196_608, 1, 786_432));
}

#[test]
fn row_03_qwen_unified_tp1_to_tp2() {
    let p = plan(QWEN, "auto", (U, 16, 1), (U, 16, 2), Profile::SliceDispatch);
    assert_eq!(
        outcome(&p),
        Outcome::AfterKv(
            ErrorKind::MambaLayoutMismatch,
            mlay(&[77_266_944], &[38_633_472])
        )
    );
    // send_kvcache_slice on one region: zero layers, zero KV bytes, rc 0.
    let pages = [1u32, 2, 3];
    let t = p.chunk(&ChunkRequest {
        src_pages: &pages,
        dst_pages: &pages,
        last: false,
        src_slot: None,
        dst_slot: None,
        src_aux: 0,
        dst_aux: 0,
    });
    assert!(t.flows.is_empty() && t.error.is_none());
    let p = plan(QWEN, "auto", (U, 16, 1), (U, 16, 2), Profile::Guarded);
    assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(1, 2)));
}

#[test]
fn row_04_qwen_unified_tp2_to_tp4_equal_kv_items() {
    let p = plan(QWEN, "auto", (U, 16, 2), (U, 16, 4), Profile::SliceDispatch);
    assert_eq!(
        p.prefill_layouts()[0].kv_item_lens(),
        p.decode_layouts()[0].kv_item_lens(),
        "KV items are equal (196608): error (1) alone could not catch it"
    );
    assert_eq!(
        outcome(&p),
        Outcome::AfterKv(
            ErrorKind::MambaLayoutMismatch,
            mlay(&[38_633_472], &[19_316_736])
        )
    );
    let p = plan(QWEN, "auto", (U, 16, 2), (U, 16, 4), Profile::Guarded);
    assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(2, 4)));
}

#[test]
fn row_05_qwen_fp8_unified_tp4_to_tp8() {
    let p = plan(
        QWEN,
        "fp8_e4m3",
        (U, 64, 4),
        (U, 64, 8),
        Profile::SliceDispatch,
    );
    assert_eq!(p.prefill_layouts()[0].kv_item_lens(), vec![393_216]);
    assert_eq!(p.decode_layouts()[0].kv_item_lens(), vec![393_216]);
    assert_eq!(
        outcome(&p),
        Outcome::AfterKv(
            ErrorKind::MambaLayoutMismatch,
            mlay(&[19_316_736], &[9_658_368])
        )
    );
    let p = plan(QWEN, "fp8_e4m3", (U, 64, 4), (U, 64, 8), Profile::Guarded);
    assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(4, 8)));
}

#[test]
fn row_06_unified_prefill_to_non_unified_decode() {
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        let p = plan(QWEN, "auto", (U, 16, 2), (N, 16, 2), prof);
        assert_eq!(
            outcome(&p),
            before(ErrorKind::EnvelopeLayoutMismatch, e1(196_608, 24, 8192))
        );
    }
}

#[test]
fn row_07_non_unified_prefill_to_unified_decode() {
    // The validator keys on the prefill's flag: no E1/E2 in either column. The non-unified
    // hybrid pool publishes its 24 KV layer ids, the unified one none (`get_kv_layer_ids`
    // returns []), so `build_transfer_entry_pairs` falls back to positions, finds 1 decode
    // entry for 24 source entries and raises: the worker dies. The same at unequal TP, where
    // `send_kvcache_slice` pairs by the same function.
    let msg =
        "PP-heterogeneous transfer requires layer ids on both peers; got src=24 dst=1 entries";
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        for d_tp in [2, 4] {
            let p = plan(QWEN, "auto", (N, 16, 2), (U, 16, d_tp), prof);
            assert_eq!(
                p.prefill_layouts()[0].kv_layer_ids,
                [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47].repeat(2)
            );
            assert!(p.decode_layouts()[0].kv_layer_ids.is_empty());
            assert_eq!(
                outcome(&p),
                Outcome::BeforeWrites(
                    ErrorKind::KvLayersOutOfRange,
                    msg.to_string(),
                    Effect::WorkerDies
                )
            );
            // Were KV to get through, the state check would raise Mlay.
            assert_eq!(
                p.last_chunk_error().unwrap().kind,
                ErrorKind::MambaLayoutMismatch
            );
        }
    }
}

/// `len(dst_k_ptrs)` is a Python slice: `dst_kv_ptrs[0:80]` of a 64-entry list has 64 entries,
/// not `64 / 2`. Llama-3.1-70B (80 layers) into Llama-3.1-8B (32 layers), same head shape,
/// neither publishing layer ids: the MHA branch returns −1 with sglang's text.
#[test]
fn the_layer_range_check_reports_pythons_slice_length() {
    let big = preset("llama-3.1-70b").unwrap();
    let small = preset("llama-3.1-8b").unwrap();
    let p = plan2(
        &big,
        &small,
        "auto",
        (N, 16, 8),
        (N, 16, 8),
        Profile::Guarded,
    );
    assert_eq!(
        outcome(&p),
        Outcome::BeforeWrites(
            ErrorKind::KvLayersOutOfRange,
            "Prefill transfer kvcache error, layers_current_pp_stage is out of range: layers_current_pp_stage=80, len(dst_k_ptrs)=64".to_string(),
            Effect::ReturnCodeFailure
        )
    );
    // The other way round the K pairs fit but the V slice `dst[80:112]` of a 160-entry list
    // pairs V of layer i with decode V region 80 + i: every write lands on a real region, so
    // the plan goes through (and the oracle judges the bytes).
    let p = plan2(
        &small,
        &big,
        "auto",
        (N, 16, 8),
        (N, 16, 8),
        Profile::Guarded,
    );
    assert!(p.chunk_error().is_none());
    // At unequal TP the slice path indexes `dst_k_ptrs[i]` past its end: IndexError.
    let p = plan2(
        &big,
        &small,
        "auto",
        (N, 16, 4),
        (N, 16, 8),
        Profile::Guarded,
    );
    assert_eq!(
        outcome(&p),
        Outcome::BeforeWrites(
            ErrorKind::KvLayersOutOfRange,
            "list index out of range".to_string(),
            Effect::WorkerDies
        )
    );
}

#[test]
fn row_08_unified_prefill_to_non_unified_decode_unequal_tp() {
    let p = plan(QWEN, "auto", (U, 16, 2), (N, 16, 4), Profile::SliceDispatch);
    let dst = p.decode_layouts()[0].state_item_lens();
    assert_eq!(dst.len(), 72);
    assert_eq!(
        outcome(&p),
        Outcome::AfterKv(ErrorKind::MambaLayoutMismatch, mlay(&[38_633_472], &dst))
    );
    let p = plan(QWEN, "auto", (U, 16, 2), (N, 16, 4), Profile::Guarded);
    assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(2, 4)));
}

#[test]
fn row_09_nemotron_unified_equal_passes() {
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        let p = plan(NEM, "auto", (U, 64, 2), (U, 64, 2), prof);
        assert_eq!(outcome(&p), Outcome::Pass);
        assert_eq!(p.decode_layouts()[0].kv_item_lens(), vec![524_288]);
        assert_eq!(p.decode_layouts()[0].state_item_lens(), vec![51_068_928]);
    }
}

#[test]
fn row_10_nemotron_unified_tp1_to_tp2() {
    let p = plan(NEM, "auto", (U, 64, 1), (U, 64, 2), Profile::SliceDispatch);
    assert_eq!(
        outcome(&p),
        Outcome::AfterKv(
            ErrorKind::MambaLayoutMismatch,
            mlay(&[102_137_856], &[51_068_928])
        )
    );
    let p = plan(NEM, "auto", (U, 64, 1), (U, 64, 2), Profile::Guarded);
    assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(1, 2)));
    // KV differs too (1048576 vs 524288), so E1 would also catch it.
    assert_eq!(p.prefill_layouts()[0].kv_item_lens(), vec![1_048_576]);
    assert_eq!(p.decode_layouts()[0].kv_item_lens(), vec![524_288]);
}

#[test]
fn row_11_nemotron_unified_to_non_unified() {
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        let p = plan(NEM, "auto", (U, 64, 4), (N, 64, 4), prof);
        assert_eq!(
            outcome(&p),
            before(ErrorKind::EnvelopeLayoutMismatch, e1(262_144, 8, 32_768))
        );
    }
}

#[test]
fn row_12_nemotron_spec_mismatch() {
    // Prefill folds one more attention layer into the envelope (an MTP draft layer), decode not.
    let d = preset(NEM).unwrap();
    let mut p = d.clone();
    p.attention_layers.push(51);
    for prof in [Profile::SliceDispatch, Profile::Guarded] {
        let plan = plan2(&p, &d, "auto", (U, 64, 2), (U, 64, 2), prof);
        assert_eq!(
            outcome(&plan),
            before(ErrorKind::EnvelopeLayoutMismatch, e1(655_360, 1, 524_288))
        );
    }
}

/// A Kimi-Linear-type MLA hybrid: MLA attention on Qwen3-Next's layer pattern.
fn mla_hybrid() -> ModelSpec {
    let mut m = preset(QWEN).unwrap();
    m.name = "mla-hybrid".into();
    m.attention = KvAttention::Mla {
        kv_lora_rank: 512,
        qk_rope_head_dim: 64,
        qk_nope_head_dim: 128,
        v_head_dim: 128,
        q_lora_rank: None,
    };
    m
}

#[test]
fn row_13_mla_hybrid_unequal_tp() {
    let m = mla_hybrid();
    for ps in [1, 16, 64] {
        // The KV envelope ps·L_full·576·b is TP-invariant: only E2 protects.
        let l1 = RankLayout::new(&m, &args((U, ps, 1), "auto"), 0).unwrap();
        let l2 = RankLayout::new(&m, &args((U, ps, 2), "auto"), 0).unwrap();
        assert_eq!(l1.kv_item_lens(), vec![u64::from(ps) * 12 * 576 * 2]);
        assert_eq!(l1.kv_item_lens(), l2.kv_item_lens());
        assert_ne!(l1.state_item_lens(), l2.state_item_lens());
        for prof in [Profile::SliceDispatch, Profile::Guarded] {
            let p = plan2(&m, &m, "auto", (U, ps, 1), (U, ps, 2), prof);
            assert_eq!(outcome(&p), before(ErrorKind::EnvelopeTpMismatch, e2(1, 2)));
        }
    }
}

#[test]
fn row_14_dense_and_mla_never_raise_envelope_errors() {
    for model in ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"] {
        for prof in [Profile::SliceDispatch, Profile::Guarded] {
            // Different page size: decode's first-contact check.
            let p = plan(model, "auto", (N, 16, 2), (N, 64, 2), prof);
            assert_eq!(
                outcome(&p),
                Outcome::FirstContact(ErrorKind::PageSizeMismatch, psm(16, 64))
            );
            // Different KV dtype string (even one that stores the same bytes).
            let pm = preset(model).unwrap();
            let p = PairPlan::compile(
                (&pm, &args((N, 16, 2), "auto")),
                (&pm, &args((N, 16, 2), "bf16")),
                prof,
            )
            .unwrap();
            assert_eq!(
                outcome(&p),
                Outcome::FirstContact(
                    ErrorKind::KvCacheDtypeMismatch,
                    "KV cache dtype mismatch: prefill server has kv_cache_dtype=auto, but decode server has kv_cache_dtype=bf16. Both servers must use the same --kv-cache-dtype value.".into()
                )
            );
            // Different TP: slice (MHA) or replicate (MLA), exact either way.
            for (a, b) in [(1, 2), (2, 8), (8, 2), (4, 1)] {
                let p = plan(model, "auto", (N, 16, a), (N, 16, b), prof);
                assert_eq!(outcome(&p), Outcome::Pass, "{model} {a}->{b}");
                let want = if model == "deepseek-v3" {
                    super::SendPath::SendKvcache
                } else {
                    super::SendPath::Slice
                };
                assert_eq!(p.send_path(), want);
            }
        }
    }
}

#[test]
fn mamba_slot_size_check_fires_on_equal_tp_with_different_state() {
    // Same TP, non-unified, but decode keeps its SSM state in bf16: dims are published on both
    // sides (no Mlay), and `_send_mamba_state` compares each entry's slot size.
    let p = preset(NEM).unwrap();
    let mut d = p.clone();
    d.mamba.as_mut().unwrap().ssm_dtype_bytes = 2;
    let plan = plan2(
        &p,
        &d,
        "auto",
        (N, 64, 2),
        (N, 64, 2),
        Profile::SliceDispatch,
    );
    assert_eq!(
        outcome(&plan),
        Outcome::AfterKv(
            ErrorKind::MambaSlotSizeMismatch,
            "Prefill/Decode Mamba slot size mismatch (src=30720, dst=30720). Configure matching persistent state layouts on both peers.".replace("src=30720, dst=30720", "src=2097152, dst=1048576")
        )
    );
}

// ------------------------------------------------------------------------------------------
// `unguarded`: no check fires; the oracle finds what the addresses do.

struct Run {
    mem: DecodeMemory,
    plan: PairPlan,
}

impl Run {
    fn new(model: &str, p: Side, d: Side) -> Run {
        let plan = plan(model, "auto", p, d, Profile::Unguarded);
        let cap = Capacity {
            pages: 6,
            slots: 4,
            aux_rows: 4,
        };
        let mem = DecodeMemory::new(plan.decode_layouts(), cap);
        Run { mem, plan }
    }

    /// Transfers a request of `pages` pages in one chunk; returns the oracle's apply error.
    fn transfer(&mut self, id: u64, pages: &[u32], slot: u32, aux: u32) -> Option<PdError> {
        let req = ChunkRequest {
            src_pages: pages,
            dst_pages: pages,
            last: true,
            src_slot: Some(slot),
            dst_slot: Some(slot),
            src_aux: aux,
            dst_aux: aux,
        };
        let mut w = Vec::new();
        self.plan.writes(&req, &mut w);
        self.mem.apply(&self.plan, RequestId(id), &w).error
    }
}

#[test]
fn unguarded_unsliced_mamba_copy_clobbers_neighbour_slots() {
    // docs/sglang-pd.md §4(b) tp 2 → 4: KV envelopes are equal (one replicated head per rank, and decode ranks
    // 2r, 2r+1 hold prefill rank r's head), so KV lands right; the unsliced mamba copy writes
    // M_P = 2·M_D bytes at M_P·s, over decode slots 2s and 2s+1, and slot s gets nothing.
    let mut r = Run::new(QWEN, (U, 16, 2), (U, 16, 4));
    assert!(!r.plan.is_exact());
    let pages: Vec<u32> = r.mem.registration(0).page_ids.clone().collect();
    let (a, b, c) = (RequestId(1), RequestId(2), RequestId(3));
    r.mem.alloc(a, &pages[0..2], Some(1), Some(0)).unwrap();
    r.mem.alloc(b, &pages[2..4], Some(2), Some(1)).unwrap();
    r.mem.alloc(c, &pages[4..6], Some(3), Some(2)).unwrap();
    // b came from a healthy (exact) prefill and is decoding when a's transfer arrives.
    r.mem.apply_exact(b, &pages[2..4], Some(2), Some(1));
    assert!(r.mem.landed(b));
    assert_eq!(r.transfer(1, &pages[0..2], 1, 0), None);
    // a wrote its state over slots 2 and 3 (b live, c waiting); its own slot 1 got nothing.
    assert!(!r.mem.landed(a));
    let ra = r.mem.release(a, None);
    // Its own slot got nothing, so its own transfer is its culprit: it names itself on both
    // sides, beside the two requests it hit.
    assert_eq!(
        ra.verdict,
        Verdict::Corrupted {
            victims: vec![a, b, c]
        }
    );
    assert_eq!(ra.corrupted_by, vec![a]);
    let rb = r.mem.release(b, None);
    assert_eq!(rb.verdict, Verdict::Corrupted { victims: vec![] });
    assert_eq!(rb.corrupted_by, vec![a]);
    // c was hit before its own transfer; an exact transfer then overwrites the foreign bytes.
    assert!(!r.mem.is_corrupted(c));
    r.mem.apply_exact(c, &pages[4..6], Some(3), Some(2));
    assert!(r.mem.landed(c));
    assert_eq!(r.mem.release(c, None).verdict, Verdict::Completed);
}

#[test]
fn unguarded_larger_envelope_runs_past_the_raw_buffer() {
    // docs/sglang-pd.md §4(a)/(b) tp 1 → 2: E_P = 2·E_D; KV pages at the high end land beyond `raw`: rc −1.
    let mut r = Run::new(QWEN, (U, 16, 1), (U, 16, 2));
    let pages: Vec<u32> = r.mem.registration(0).page_ids.clone().collect();
    let top = &pages[4..6];
    r.mem.alloc(RequestId(1), top, Some(1), Some(0)).unwrap();
    let e = r
        .transfer(1, top, 1, 0)
        .expect("past the registered raw buffer");
    assert_eq!(e.kind, ErrorKind::TransferOutOfBounds);
    assert_eq!(e.effect, Effect::ReturnCodeFailure);
    let rep = r.mem.release(RequestId(1), None);
    assert!(matches!(
        rep.verdict,
        Verdict::Failed {
            kind: ErrorKind::TransferOutOfBounds,
            ..
        }
    ));
}

#[test]
fn unguarded_unified_to_layer0_buffer_is_out_of_bounds_or_garbage() {
    // docs/sglang-pd.md §4(c): the whole envelope stream goes to decode's layer-0 K buffer at Kbuf0 + d·E_P.
    let mut r = Run::new(QWEN, (U, 16, 2), (N, 16, 2));
    let (a, b) = (RequestId(1), RequestId(2));
    r.mem.alloc(a, &[1], Some(1), Some(0)).unwrap();
    r.mem.alloc(b, &[2, 3, 4, 5, 6], Some(2), Some(1)).unwrap();
    // 196608 / 8192 = 24 decode pages per envelope page: page 1 lands on pages 24..48 of a
    // 7-page buffer: out of bounds.
    let e = r.transfer(1, &[1], 1, 0).unwrap();
    assert_eq!(e.kind, ErrorKind::TransferOutOfBounds);
}

#[test]
fn unguarded_equal_configs_complete() {
    let mut r = Run::new(NEM, (U, 64, 2), (U, 64, 2));
    assert!(r.plan.is_exact());
    let pages: Vec<u32> = r.mem.registration(0).page_ids.clone().collect();
    r.mem
        .alloc(RequestId(7), &pages[1..3], Some(2), Some(3))
        .unwrap();
    assert_eq!(r.transfer(7, &pages[1..3], 2, 3), None);
    assert!(r.mem.landed(RequestId(7)));
    assert_eq!(
        r.mem.release(RequestId(7), None).verdict,
        Verdict::Completed
    );
}

/// docs/sglang-pd.md §1.4 / item 6 of issue 14: GDN `n_groups` padding. Qwen3-Next has 16 key heads
/// (`n_groups`); at attention TP 32 `extra_groups_for_head_shards` pads them to 32, so each rank
/// holds one replicated key head for q and for k (128 channels each) plus 128 value channels:
/// conv_dim / tp = (4096 + 2·32·128) / 32 = 384, not (2048 + 2048 + 4096) / 32 = 256.
#[test]
fn gdn_groups_are_padded_when_tp_exceeds_them() {
    let m = preset(QWEN).unwrap();
    let at = |tp: u32, rank: u32| {
        RankLayout::new(&m, &super::test_args(tp, 16, "auto", false), rank).unwrap()
    };
    let l32 = at(32, 5);
    let conv = &l32.state_regions[0];
    assert_eq!(conv.dim_per_tensor, Some(384));
    assert_eq!(
        conv.item_len,
        384 * 3 * 2,
        "[384 channels, kernel 4 − 1] bf16"
    );
    assert_eq!(l32.conv_shard_groups, vec![32 * 128, 32 * 128, 32 * 128]);
    let temporal = &l32.state_regions[36];
    assert_eq!(temporal.dim_per_tensor, Some(1));
    assert_eq!(temporal.item_len, 128 * 128 * 4);
    // Ranks 4 and 5 hold replicas of key head 2 in q and k (the same content, so the same
    // labels); their value channels differ.
    let (c4, c6) = (at(32, 4), at(32, 6));
    let blocks = |l: &RankLayout| l.state_regions[0].cell.blocks.clone();
    assert_eq!(blocks(&c4)[..2], blocks(&l32)[..2], "replicated key groups");
    assert_ne!(blocks(&c4)[2], blocks(&l32)[2]);
    assert_ne!(blocks(&c6)[..2], blocks(&l32)[..2]);
    // Where TP divides the groups nothing is padded (the published widths are the model's).
    let l16 = at(16, 0);
    assert_eq!(l16.state_regions[0].dim_per_tensor, Some(128 + 128 + 256));
    assert_eq!(l16.conv_shard_groups, vec![16 * 128, 16 * 128, 32 * 128]);
    assert_eq!(super::rank::padded_groups(16, 32), 32);
    assert_eq!(super::rank::padded_groups(16, 8), 16);
    assert_eq!(super::rank::padded_groups(1, 4), 4);
}

/// docs/sglang-pd.md §3.4 / §11.6: a hybrid-MLA prefill at attention TP 4 into a decode at TP 2. Plain MLA makes
/// prefill ranks 1 and 3 dummies; hybrid-MLA keeps them real (`_get_dsa_cache_transfer_skip_
/// flags`): they skip the replicated KV (`sub_rank = (rank % 4) % 2 != 0`) but send their
/// TP-sharded mamba state and the aux row on the last chunk.
#[test]
fn hybrid_mla_sub_ranks_skip_kv_but_send_state() {
    let mut m = preset("deepseek-v3").unwrap();
    let nem = preset(NEM).unwrap();
    m.name = "mla-hybrid-test".into();
    m.num_layers = 16;
    m.attention_layers = (0..8).collect();
    m.mamba = nem.mamba.clone();
    m.mamba_layers = (8..16).collect();
    let p = plan2(&m, &m, "auto", (N, 16, 4), (N, 16, 2), Profile::Guarded);
    assert!(
        p.targets().iter().all(|t| !t.dummy),
        "no dummies for hybrid-MLA"
    );
    assert_eq!(p.targets().len(), 4);
    let pages = [1u32, 2];
    let req = |last| ChunkRequest {
        src_pages: &pages,
        dst_pages: &pages,
        last,
        src_slot: Some(1),
        dst_slot: Some(1),
        src_aux: 0,
        dst_aux: 0,
    };
    let senders = |t: &super::plan::ChunkTransfer| -> Vec<u32> {
        t.flows.iter().map(|f| f.prefill_rank).collect()
    };
    // A middle chunk is KV only: ranks 0 and 2 send it, ranks 1 and 3 skip.
    let mid = p.chunk(&req(false));
    assert_eq!(senders(&mid), vec![0, 2]);
    // The last chunk: every rank sends its state; ranks 1 and 3 send no KV bytes.
    let last = p.chunk(&req(true));
    assert_eq!(senders(&last), vec![0, 1, 2, 3]);
    let kv = mid.flows[0].bytes;
    assert_eq!(last.flows[0].bytes - last.flows[1].bytes, kv);
    assert!(p.is_exact(), "every byte lands where the decode expects it");
    // Plain MLA at the same TPs: ranks 1 and 3 are dummies and send nothing at all.
    let plain = preset("deepseek-v3").unwrap();
    let p = plan2(
        &plain,
        &plain,
        "auto",
        (N, 16, 4),
        (N, 16, 2),
        Profile::Guarded,
    );
    assert_eq!(p.targets().iter().filter(|t| t.dummy).count(), 2);
    assert_eq!(senders(&p.chunk(&req(true))), vec![0, 2]);
}

const KIMI: &str = "kimi-linear-48b-a3b";

/// Row 13 with the real Kimi-Linear preset (7 MLA layers, 20 KDA layers): unequal attention TP
/// on unified pools always takes `send_kvcache`, so error (2) strikes before any write, under
/// both the version read and the seeds' profile; the KV envelope alone could not tell the
/// sides apart.
#[test]
fn row_13_kimi_linear_unified_unequal_tp() {
    let m = preset(KIMI).unwrap();
    for (a, b) in [(1, 2), (2, 4), (4, 2), (4, 1)] {
        let (lp, ld) = (
            RankLayout::new(&m, &args((U, 16, a), "auto"), 0).unwrap(),
            RankLayout::new(&m, &args((U, 16, b), "auto"), 0).unwrap(),
        );
        assert_eq!(lp.kv_item_lens(), ld.kv_item_lens(), "{a}->{b}");
        assert_ne!(lp.state_item_lens(), ld.state_item_lens(), "{a}->{b}");
        for prof in [
            Profile::SliceDispatch,
            Profile::Guarded,
            Profile::SeedCommit,
        ] {
            let p = plan(KIMI, "auto", (U, 16, a), (U, 16, b), prof);
            assert_eq!(p.send_path(), super::SendPath::SendKvcache);
            assert_eq!(
                outcome(&p),
                before(ErrorKind::EnvelopeTpMismatch, e2(a, b)),
                "{prof:?} {a}->{b}"
            );
        }
    }
    // Equal TP on unified pools passes, byte for byte.
    for tp in [1, 2, 4] {
        let p = plan(
            KIMI,
            "auto",
            (U, 16, tp),
            (U, 16, tp),
            Profile::SliceDispatch,
        );
        assert_eq!(outcome(&p), Outcome::Pass, "tp {tp}");
    }
}

/// Without unified memory, Kimi-Linear at unequal TP is served: the MLA latent is replicated
/// (`send_kvcache`, sub-ranks skip it) and the transposed KDA conv state is resliced per window
/// row and per `[q|k|v]` sub-block (outer count 3), which the oracle proves exact.
#[test]
fn kimi_linear_non_unified_unequal_tp_is_exact() {
    for (a, b) in [(1, 2), (2, 1), (2, 4), (4, 2), (1, 4), (4, 1)] {
        for prof in [Profile::SliceDispatch, Profile::Guarded] {
            let p = plan(KIMI, "auto", (N, 16, a), (N, 16, b), prof);
            assert_eq!(outcome(&p), Outcome::Pass, "{prof:?} {a}->{b}");
            assert_eq!(p.send_path(), super::SendPath::SendKvcache);
        }
    }
}

/// The transposed KDA conv cell: each window row holds every channel the rank owns, sub-block
/// by sub-block. (Reslicing it with outer count 1, as if it were `[channels, K - 1]`, scatters
/// window rows: the exactness test above then fails, which was checked by hand.)
#[test]
fn kimi_conv_cells_hold_window_rows_of_every_sub_block() {
    let m = preset(KIMI).unwrap();
    let l = RankLayout::new(&m, &args((N, 16, 2), "auto"), 1).unwrap();
    let conv = &l.state_regions[0];
    assert_eq!((conv.outer_count, conv.shape.clone()), (3, vec![3, 6144]));
    // Rank 1 of 2, window row 1, sub-block k (g = 1): 2048 channels from global channel 2048.
    let blk = conv.cell.blocks[3 + 1];
    assert_eq!((blk.rows, blk.first_col), (2048, 2048 * 2));
    assert_eq!(
        conv.cell.label_at(6144 * 2 + 2048 * 2, 0).unwrap().0.col,
        2048 * 2
    );
}
