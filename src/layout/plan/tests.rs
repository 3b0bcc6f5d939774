//! End-to-end checks of compiled plans: bytes, write counts and exactness per docs/sglang-pd.md §3 case.

use super::*;
use crate::layout::write::Write;
use crate::spec::{ServerArgs, preset};

fn args(tp: u32, ps: u32, dtype: &str, unified: bool) -> ServerArgs {
    crate::layout::test_args(tp, ps, dtype, unified)
}

fn plan(model: &str, p: ServerArgs, d: ServerArgs, profile: Profile) -> PairPlan {
    let m = preset(model).unwrap();
    PairPlan::compile((&m, &p), (&m, &d), profile).unwrap()
}

fn pages(n: u32) -> Vec<u32> {
    (1..=n).collect()
}

/// A non-last chunk of `src` into `dst` pages, without state slots or metadata rows.
fn plain<'a>(src: &'a [u32], dst: &'a [u32]) -> ChunkRequest<'a> {
    ChunkRequest {
        src_pages: src,
        dst_pages: dst,
        last: false,
        src_slot: None,
        dst_slot: None,
        src_aux: 0,
        dst_aux: 0,
    }
}

#[test]
fn mha_equal_tp_bytes_and_writes() {
    // Llama-3.1-8B, tp 2 both sides, ps 16: 64 regions of 16384 B per rank.
    let pl = plan(
        "llama-3.1-8b",
        args(2, 16, "auto", false),
        args(2, 16, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
    let src = [10, 11, 12, 20];
    let dst = [3, 4, 5, 6];
    let req = plain(&src, &dst);
    let t = pl.chunk(&req);
    assert_eq!(t.error, None);
    assert_eq!(t.flows.len(), 2);
    // Two runs (src jumps 12 → 20).
    assert_eq!(t.flows[0].writes, 64 * 2);
    assert_eq!(t.flows[0].bytes, 64 * 4 * 16384);
    // Across the instance: layers × max(kv_heads, tp) × head_dim × 2 × dtype per token.
    let total: u64 = t.flows.iter().map(|f| f.bytes).sum();
    let m = preset("llama-3.1-8b").unwrap();
    assert_eq!(total, 4 * 16 * m.kv_bytes_per_token_instance(2, 2));
}

#[test]
fn head_sliced_write_count_is_arithmetic() {
    // docs/sglang-pd.md §3.3 example: Llama-3.1-8B, ps 16, 8192-token chunk, tp 1 → 2: per decode rank
    // 64 × 512 × 16 = 524 288 writes of 1024 B.
    let pl = plan(
        "llama-3.1-8b",
        args(1, 16, "auto", false),
        args(2, 16, "auto", false),
        Profile::SliceDispatch,
    );
    assert_eq!(pl.send_path(), SendPath::Slice);
    assert!(pl.is_exact());
    let src = pages(512);
    let dst = pages(512);
    let req = plain(&src, &dst);
    let t = pl.chunk(&req);
    assert_eq!(t.flows.len(), 2);
    for f in &t.flows {
        assert_eq!(f.writes, 524_288);
        assert_eq!(f.bytes, 524_288 * 1024);
    }
    let mut w = Vec::new();
    pl.writes(&req, &mut w);
    assert_eq!(w.iter().map(Write::entries).sum::<u64>(), 2 * 524_288);
    assert_eq!(w.iter().map(Write::bytes).sum::<u64>(), 2 * 524_288 * 1024);
}

#[test]
fn many_prefill_ranks_to_one_decode_rank() {
    // Replicated heads on prefill (tp 16 > 8 heads), decode tp 2.
    let pl = plan(
        "llama-3.1-8b",
        args(4, 16, "auto", false),
        args(2, 16, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
    let pl = plan(
        "llama-3.1-8b",
        args(16, 1, "auto", false),
        args(2, 1, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
    let pl = plan(
        "qwen3-next-80b-a3b",
        args(8, 16, "auto", false),
        args(2, 16, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
    let pl = plan(
        "qwen3-next-80b-a3b",
        args(1, 16, "auto", false),
        args(4, 16, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
}

#[test]
fn mla_replicates_the_latent_and_uses_dummies() {
    let pl = plan(
        "deepseek-v3",
        args(2, 64, "auto", false),
        args(8, 64, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact());
    let src = pages(3);
    let req = plain(&src, &src);
    let t = pl.chunk(&req);
    // Every decode rank gets the whole latent: 61 × 3 × 73728 B.
    assert_eq!(t.flows.len(), 8);
    assert!(
        t.flows
            .iter()
            .all(|f| f.bytes == 61 * 3 * 73728 && f.writes == 61)
    );
    let pl = plan(
        "deepseek-v3",
        args(8, 64, "auto", false),
        args(2, 64, "auto", false),
        Profile::Guarded,
    );
    assert_eq!(pl.targets().iter().filter(|t| t.dummy).count(), 6);
    assert_eq!(pl.chunk(&req).flows.len(), 2);
    assert!(pl.is_exact());
}

#[test]
fn hybrid_state_and_aux_on_the_last_chunk() {
    let pl = plan(
        "qwen3-next-80b-a3b",
        args(2, 16, "auto", false),
        args(4, 16, "auto", false),
        Profile::Guarded,
    );
    assert!(pl.is_exact(), "sliced mamba state with conv shard groups");
    let src = pages(2);
    let req = ChunkRequest {
        src_pages: &src,
        dst_pages: &src,
        last: true,
        src_slot: Some(1),
        dst_slot: Some(2),
        src_aux: 0,
        dst_aux: 1,
    };
    let t = pl.chunk(&req);
    assert_eq!(t.error, None);
    // Per decode rank: KV 24 × 2 pages × 16 tokens, state 36 × 3 conv + 36 temporal, aux 10.
    let f = t.flows[0];
    assert_eq!(f.writes, 24 * 2 * 16 + 36 * 3 + 36 + 10);
    // State bytes per decode rank = one decode slot (12288 + 524288 per layer).
    let aux: u64 = pl.decode_layouts()[0].aux_row_bytes();
    let kv = 24 * 2 * 16 * 512;
    assert_eq!(f.bytes, kv + 36 * (12288 + 524_288) + aux);
}

/// `SGLANG_DISAGG_STAGING_BUFFER` (docs/sglang-pd.md §26), counted by hand: Llama-3.1-8B,
/// page 16, prefill TP 2 → decode TP 4, a 3-page chunk (48 tokens). Each prefill rank owes
/// each of its 2 decode ranks 2 heads × 128 × 2 B = 512 B per token per layer region.
/// Sliced: 64 regions × 48 tokens = 3,072 writes a target; staged: 1 write a target, the same
/// 3,072 × 512 = 1,572,864 bytes. The decode rank's ring region holds its whole KV for the
/// chunk, 3 pages × 64 regions × 8,192 B = 1,572,864 B, from its 1 writer (a decode rank has
/// one prefill rank writing to it when the decode is wider). An equal-TP pair and an MLA pair
/// keep their plan.
#[test]
fn the_staging_buffer_sends_one_write_per_target_and_chunk() {
    let mut pl = plan(
        "llama-3.1-8b",
        args(2, 16, "auto", false),
        args(4, 16, "auto", false),
        Profile::Guarded,
    );
    let src = [7, 9, 11];
    let dst = [1, 2, 3];
    let req = plain(&src, &dst);
    let sliced = pl.chunk(&req);
    assert_eq!(sliced.flows.len(), 4);
    assert!(
        sliced
            .flows
            .iter()
            .all(|f| f.writes == 3_072 && f.bytes == 1_572_864)
    );
    assert!(pl.staging().is_none() && !pl.has_extras());
    pl.enable_staging(4096 << 20, 3.35e12, 3.35e12);
    let staged = pl.chunk(&req);
    assert!(
        staged
            .flows
            .iter()
            .all(|f| f.writes == 1 && f.bytes == 1_572_864)
    );
    let s = pl.staging().unwrap();
    assert_eq!(s.writers, vec![1, 1, 1, 1]);
    assert_eq!(s.region_bytes(3), 1_572_864);
    assert_eq!(pl.sliced_kv_bytes(0, 3), 1_572_864);
    // Gather: 1,572,864 B read and written at 3.35 TB/s = 939.02… ns, rounded up.
    assert_eq!(s.gather_ns(1_572_864), 940);
    // The concrete writes the oracle applies are the sliced path's: the scatter puts the
    // bytes exactly where `send_kvcache_slice` would.
    let mut w = Vec::new();
    pl.writes(&req, &mut w);
    assert!(!w.is_empty());

    // A wider prefill: TP 4 → TP 2, two writers a decode rank.
    let mut wide = plan(
        "llama-3.1-8b",
        args(4, 16, "auto", false),
        args(2, 16, "auto", false),
        Profile::Guarded,
    );
    wide.enable_staging(4096 << 20, 3.35e12, 3.35e12);
    assert_eq!(wide.staging().unwrap().writers, vec![2, 2]);

    for (model, p, d) in [("llama-3.1-8b", 2, 2), ("deepseek-v3", 8, 16)] {
        let mut same = plan(
            model,
            args(p, 64, "auto", false),
            args(d, 64, "auto", false),
            Profile::Guarded,
        );
        same.enable_staging(4096 << 20, 3.35e12, 3.35e12);
        assert!(same.staging().is_none(), "{model} {p} → {d}");
    }
}
