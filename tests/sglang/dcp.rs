//! Decode context parallelism (`--dcp-size` on a PD decode, sglang PR #35762; `docs/sglang-pd.md`
//! §28) on DeepSeek-V3 (61 MLA layers, latent 512 + rope 64, BF16: 1,152 B a token and layer,
//! 73,728 B a 64-token page and layer): what `send_kvcache_dcp` writes per target, packed and
//! per token, counted by hand; the pack buffer's fallback for its top rank; the decode's KV
//! room; the decode step's merge and its KV read; the refusals with sglang's texts; the
//! teaching scenario `scenarios/transfer/decode-dcp.toml`, twice for determinism.

use crate::common;
use common::*;

use pdsim::layout::{ChunkRequest, DcpSpan, PairPlan, Profile};
use pdsim::spec::ServerArgs;

const TEACH: &str = "scenarios/transfer/decode-dcp.toml";
/// Bytes of one token's latent in one layer: (512 + 64) × 2.
const TOKEN_LAYER: u64 = 1_152;
const LAYERS: u64 = 61;

fn deepseek() -> pdsim::spec::ModelSpec {
    pdsim::spec::model::preset("deepseek-v3").expect("a preset")
}

fn args(tp: u32, dcp: u32) -> ServerArgs {
    ServerArgs {
        dcp_size: dcp,
        radix_cache: None,
        ..ServerArgs::sglang_defaults(tp, 64, "auto")
    }
}

/// Prefill TP 8 → decode TP 8 with `dcp` ranks a group; with the prefill's pack buffer for
/// `pack` tokens when given.
fn plan(dcp: u32, pack: Option<u32>) -> PairPlan {
    let m = deepseek();
    let mut p = PairPlan::compile((&m, &args(8, 1)), (&m, &args(8, dcp)), Profile::Guarded)
        .expect("the pair compiles");
    if let Some(t) = pack {
        p.enable_dcp_pack(t, 4.8e12);
    }
    p
}

fn chunk<'a>(src: &'a [u32], dst: &'a [u32]) -> ChunkRequest<'a> {
    ChunkRequest {
        src_pages: src,
        dst_pages: dst,
        last: false,
        src_slot: None,
        dst_slot: None,
        src_aux: 0,
        dst_aux: 1,
    }
}

/// (decode rank, bytes, writes) of each flow.
fn flows(p: &PairPlan, req: &ChunkRequest, span: DcpSpan) -> Vec<(u32, u64, u64)> {
    let t = p.chunk_dcp(req, span);
    assert!(t.error.is_none(), "{:?}", t.error);
    t.flows
        .iter()
        .map(|f| (f.decode_rank, f.bytes, f.writes))
        .collect()
}

/// An 8,192-token prompt as one chunk: 128 prefill pages of 64 tokens; on the DCP-8 decode 16
/// virtual pages of 512 tokens, each rank holding 64 of each in its page of the same id.
/// Every rank owns 8,192 / 8 = 1,024 tokens (`p % 8 == rank`), at its local slots 0..1,023:
/// 1,024 × 61 × 1,152 = 71,958,528 B a target, the whole prompt's latent once over the 8
/// ranks (575,668,224 B). Packed (the buffer holds `max_prefill_tokens` 16,384: 2,048 tokens
/// a rank region) the rows are contiguous and the 16 decode pages too: **1** block per layer,
/// 61 writes a target, 488 in all. Per token (no pack buffer, sglang before PR #35762): the
/// source rows are 8 slots apart, so **1,024** blocks per layer, 62,464 writes a target,
/// 499,712 in all. Without DCP the TP-8 decode replicates the latent: each of the 8 targets
/// gets 128 × 73,728 × 61 = 575,668,224 B in 61 writes.
#[test]
fn one_chunk_by_hand_packed_per_token_and_without_dcp() {
    let src: Vec<u32> = (1..=128).collect();
    let dst: Vec<u32> = (1..=16).collect();
    let span = DcpSpan {
        src_page_offset: 0,
        tokens: 8_192,
    };
    let per_rank_bytes = 1_024 * LAYERS * TOKEN_LAYER;
    assert_eq!(per_rank_bytes, 71_958_528);
    let packed = flows(&plan(8, Some(16_384)), &chunk(&src, &dst), span);
    assert_eq!(
        packed,
        (0..8)
            .map(|r| (r, per_rank_bytes, LAYERS))
            .collect::<Vec<_>>()
    );
    let per_token = flows(&plan(8, None), &chunk(&src, &dst), span);
    assert_eq!(
        per_token,
        (0..8)
            .map(|r| (r, per_rank_bytes, 1_024 * LAYERS))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        per_token.iter().map(|f| f.2).sum::<u64>(),
        499_712,
        "per-token writes of the request"
    );
    // Without DCP: `send_kvcache`, the prefill's page list against the decode's.
    let dst8: Vec<u32> = (1..=128).collect();
    let plain = plan(1, None).chunk(&chunk(&src, &dst8));
    let total: u64 = plain.flows.iter().map(|f| f.bytes).sum();
    assert_eq!(total, 8 * 575_668_224);
    assert!(plain.flows.iter().all(|f| f.writes == LAYERS));
}

/// The second 8,192-token chunk of a 16,384-token prompt (`src_page_offset` 128): rank `r`
/// owns positions 8,192 + r, + 8, …, at local slots 1,024..2,047 — decode pages 16..31 of the
/// request's 32 (the whole list goes to `send_kvcache_dcp`, unsliced). A break in those
/// pages (id 21 → 40 between ordinals 20 and 21) splits each packed layer in 2 blocks; a break
/// in pages 0..15 (the first chunk's) does not touch this chunk.
#[test]
fn a_later_chunk_lands_past_the_first_and_splits_where_the_decode_pages_jump() {
    let src: Vec<u32> = (129..=256).collect();
    let mut dst: Vec<u32> = (1..=32).collect();
    let span = DcpSpan {
        src_page_offset: 128,
        tokens: 8_192,
    };
    let p = plan(8, Some(16_384));
    let clean = flows(&p, &chunk(&src, &dst), span);
    assert!(clean.iter().all(|f| f.2 == LAYERS), "{clean:?}");
    dst[5] = 100; // the first chunk's pages only
    assert_eq!(flows(&p, &chunk(&src, &dst), span), clean);
    for d in dst.iter_mut().skip(21) {
        *d += 40;
    }
    let split = flows(&p, &chunk(&src, &dst), span);
    assert!(split.iter().all(|f| f.2 == 2 * LAYERS), "{split:?}");
    assert_eq!(
        split.iter().map(|f| f.1).collect::<Vec<_>>(),
        clean.iter().map(|f| f.1).collect::<Vec<_>>()
    );
}

/// A chunk larger than the pack buffer was sized for: with `max_prefill_tokens` 4,096 a rank
/// region holds ceil(4,096 / 8) = 512 tokens and rank `r` packs at offset `r` regions, so it
/// may pack `(8 − r) × 512` tokens. Each rank owns 1,024 of an 8,192-token chunk: ranks 0–6
/// pack (1,024 ≤ 1,024 at rank 6), rank 7 falls back to per-token RDMA (PR #40336: "fits()
/// leaves the highest rank exactly one stride"). A 5-token last piece: ranks 0–4 own one token
/// each, ranks 5–7 none (no flow).
#[test]
fn the_top_rank_falls_back_per_token_when_the_chunk_outgrows_its_region() {
    let src: Vec<u32> = (1..=128).collect();
    let dst: Vec<u32> = (1..=16).collect();
    let span = DcpSpan {
        src_page_offset: 0,
        tokens: 8_192,
    };
    let p = plan(8, Some(4_096));
    let f = flows(&p, &chunk(&src, &dst), span);
    let writes: Vec<u64> = f.iter().map(|x| x.2).collect();
    assert_eq!(
        writes,
        [61, 61, 61, 61, 61, 61, 61, 1_024 * 61],
        "ranks 0–6 packed, 7 per token"
    );
    // The gather: rank 7 packs nothing; the others read and write their 71,958,528 B once at
    // the given 4.8 TB/s.
    let gathers: Vec<u64> = (0..8)
        .map(|i| p.dcp_gather_ns(i, &chunk(&src, &dst), span))
        .collect();
    let by_hand = (2.0 * 71_958_528.0 / 4.8e12 * 1e9_f64).ceil() as u64;
    assert_eq!(&gathers[..7], &[by_hand; 7]);
    assert_eq!(gathers[7], 0);
    let tail = DcpSpan {
        src_page_offset: 0,
        tokens: 5,
    };
    let f = flows(&p, &chunk(&src[..1], &dst[..1]), tail);
    assert_eq!(
        f,
        (0..5)
            .map(|r| (r, LAYERS * TOKEN_LAYER, LAYERS))
            .collect::<Vec<_>>()
    );
}

fn load(sets: &[&str]) -> Result<pdsim::config::Scenario, String> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    pdsim::scenario::load(&repo().join(TEACH), &sets).map_err(|e| e.to_string())
}

/// A decode GPU's KV pages do not change with DCP (a rank's page is 64 tokens of one latent row
/// a layer either way), but each page id now stands for a virtual page of 64 × 8 tokens: the
/// instance holds 8× the tokens. The prefill, without DCP, is unchanged.
#[test]
fn the_decode_holds_dcp_times_the_tokens() {
    use pdsim::config::capacity;
    let (off, on) = (
        load(&["pools.decode.server.dcp_size=1"]).unwrap(),
        load(&[]).unwrap(),
    );
    let (d0, d8) = (&off.pools[1], &on.pools[1]);
    assert_eq!(d8.server.dcp_size, 8);
    let (pages0, pages8) = (
        capacity::kv_pages(&off.gpu, d0),
        capacity::kv_pages(&on.gpu, d8),
    );
    assert_eq!(pages0, pages8);
    assert!(pages0 > 1_000, "{pages0}");
    assert_eq!(d0.server.tokens_per_page(), 64);
    assert_eq!(d8.server.tokens_per_page(), 512);
    assert_eq!(
        u64::from(pages8) * u64::from(d8.server.tokens_per_page()),
        8 * u64::from(pages0) * 64
    );
}

/// The decode step: at no context, DCP adds exactly its merge (61 layers × a Q all-gather, an
/// LSE all-gather and an output reduce-scatter over 8 ranks, `compute::model::dcp`); at long
/// contexts the 1/8 KV read wins; at short ones the merge costs more than it saves.
#[test]
fn the_step_pays_the_merge_and_reads_an_eighth_of_the_kv() {
    use pdsim::compute::StepModel;
    use pdsim::compute::model::dcp::DcpMerge;
    let sc = load(&[]).unwrap();
    let m = deepseek();
    let c = &sc.compute;
    let base = StepModel::new(&sc.gpu, &m, 8, 2, c.clone());
    let link = (
        sc.gpu.nvlink_bytes_per_s / 2.0 * c.nvlink_efficiency,
        c.allreduce_step_latency_s,
        c.allreduce_log_steps,
    );
    let merge = DcpMerge::mla(&m, 8, 8, link).expect("MLA");
    let dcp = base.clone().with_dcp(merge);
    for b in [1u32, 8, 64] {
        let diff = dcp.decode_ns(b, 0) as f64 - base.decode_ns(b, 0) as f64;
        let secs = merge.secs(f64::from(b)) * 1e9;
        assert!((diff - secs).abs() <= 1.0, "batch {b}: {diff} vs {secs}");
    }
    // 32 sequences of 100,000 tokens: the KV read dominates, DCP is faster.
    let long = 32 * 100_000;
    assert!(
        dcp.decode_ns(32, long) < base.decode_ns(32, long),
        "{} vs {}",
        dcp.decode_ns(32, long),
        base.decode_ns(32, long)
    );
    // 8 sequences of 2,000 tokens: the merge dominates, DCP is slower.
    assert!(dcp.decode_ns(8, 16_000) > base.decode_ns(8, 16_000));
}

/// Each refusal names `pools.decode.server.dcp_size`, with sglang's text where sglang refuses.
#[test]
fn bad_dcp_sizes_are_refused_naming_the_key() {
    let err = |sets: &[&str]| load(sets).expect_err("refused");
    let key = "pools.decode.server.dcp_size";
    let e = err(&["pools.decode.server.dcp_size=0"]);
    assert!(e.contains(key) && e.contains("≥ 1"), "{e}");
    let e = err(&["pools.decode.server.dcp_size=3"]);
    assert!(e.contains(key) && e.contains("1, 2, 4, 8"), "{e}");
    let e = err(&["pools.prefill.server.dcp_size=2"]);
    assert!(
        e.contains("pools.prefill.server.dcp_size") && e.contains("decode pools only"),
        "{e}"
    );
    let e = err(&["sglang.transfer_backend=mori"]);
    assert!(
        e.contains(key)
            && e.contains(
                "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'mori'."
            ),
        "{e}"
    );
    for ok in ["nixl", "mooncake_tcp"] {
        let mut sets = vec![format!("sglang.transfer_backend={ok}")];
        if ok == "mooncake_tcp" {
            sets.push("sglang.tcp_gbps=100".into());
        }
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        load(&sets).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    let e = err(&[
        "sglang.version=2026-09",
        "pools.decode.server.disaggregation_decode_enable_radix_cache=true",
    ]);
    assert!(
        e.contains(key)
            && e.contains("PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported."),
        "{e}"
    );
    let e = err(&[
        "model.preset=llama-3.1-70b",
        "pools.decode.server.dcp_size=2",
    ]);
    assert!(e.contains(key) && e.contains("MLA"), "{e}");
    let e = err(&["sglang.version=2026-09", "sglang.kv_checksum=true"]);
    assert!(e.contains(key) && e.contains("kv_checksum"), "{e}");
}

/// The teaching scenario: every request completes; each moves its latent once over the 8 DCP
/// ranks (16,384 × 61 × 1,152 = 1,151,336,448 B) where the TP-8 decode without DCP takes it 8
/// times, in 976 KV writes (8 ranks × 2 chunks × 61 layers, packed) plus the metadata rows'
/// 80 (10 aux buffers × 8 targets) either way. The same seed twice gives the same rows.
#[test]
fn the_teaching_pair_moves_the_latent_once_in_packed_blocks() {
    let (s0, off) = run_rows(TEACH, &["pools.decode.server.dcp_size=1"], "dcp-off");
    let (s8, on) = run_rows(TEACH, &[], "dcp-on");
    let (_, again) = run_rows(TEACH, &[], "dcp-again");
    assert_eq!(on, again, "same seed, same rows");
    assert_eq!(s8.requests.failed + s8.requests.corrupted, 0);
    assert_eq!(s0.requests.completed, s8.requests.completed);
    assert!(s8.requests.completed >= 10);
    let latent = 16_384 * LAYERS * TOKEN_LAYER;
    assert_eq!(latent, 1_151_336_448);
    for (a, b) in off.iter().zip(&on) {
        let (bytes0, bytes8) = (ns(a, "kv_bytes"), ns(b, "kv_bytes"));
        assert_eq!(bytes0 - bytes8, 7 * latent, "request {}", a["id"]);
        assert_eq!(ns(b, "rdma_writes"), 976 + 80, "request {}", b["id"]);
        assert_eq!(ns(a, "rdma_writes"), 976 + 80, "request {}", a["id"]);
    }
}

fn lint(prefill: &str, decode: &str) -> Result<pdsim::diagnose::lint::LintReport, String> {
    pdsim::diagnose::lint::lint(&pdsim::diagnose::lint::LintQuestion {
        prefill: format!(
            "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --disaggregation-mode prefill {prefill}"
        ),
        decode: format!(
            "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --disaggregation-mode decode {decode}"
        ),
        model_config: None,
        profile: "guarded".into(),
        version: None,
    })
    .map_err(|e| e.to_string())
}

/// `pdsim lint` reads `--dcp-size` (and sglang's alias) on the decode line: the pair is
/// compatible, the report says what DCP does; sglang's start-up refusals (the backend, HiCache,
/// the TP group) stop it; a prefill's
/// DCP and a model without MLA are read as 1 with a warning.
#[test]
fn lint_reads_the_dcp_size() {
    let r = lint(
        "--tp-size 8 --page-size 64",
        "--tp-size 8 --page-size 64 --dcp-size 8",
    )
    .expect("predicted");
    assert_eq!(r.decode.args.dcp_size, 8);
    assert_eq!(r.prediction.outcome, "completed");
    let x = r.decode_context_parallel.as_deref().expect("a DCP line");
    assert!(
        x.contains("virtual pages of 512") && x.contains("8×"),
        "{x}"
    );
    let text = pdsim::diagnose::lint::render(&r);
    assert!(text.contains("send_kvcache_dcp"), "{text}");
    let alias = lint(
        "--tp-size 8",
        "--tp-size 8 --decode-context-parallel-size 4",
    )
    .unwrap();
    assert_eq!(alias.decode.args.dcp_size, 4);
    let e = lint(
        "--tp-size 8",
        "--tp-size 8 --dcp-size 8 --disaggregation-transfer-backend mori",
    )
    .expect_err("refused");
    assert!(
        e.contains(
            "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got 'mori'."
        ),
        "{e}"
    );
    let e = lint(
        "--tp-size 8",
        "--tp-size 8 --dcp-size 8 --enable-hierarchical-cache",
    )
    .expect_err("refused");
    assert!(
        e.contains(
            "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported."
        ),
        "{e}"
    );
    // HiCache without DCP is a flag lint reads quietly.
    let h = lint("--tp-size 8", "--tp-size 8 --enable-hierarchical-cache").unwrap();
    assert!(
        !h.warnings.iter().any(|w| w.contains("hierarchical")),
        "{:?}",
        h.warnings
    );
    let e = lint("--tp-size 8", "--tp-size 8 --dcp-size 3").expect_err("refused");
    assert!(e.contains("does not divide --tp-size 8"), "{e}");
    let p = lint("--tp-size 8 --dcp-size 8", "--tp-size 8").unwrap();
    assert_eq!(p.prefill.args.dcp_size, 1);
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("usually adds communication overhead")),
        "{:?}",
        p.warnings
    );
    assert!(p.decode_context_parallel.is_none());
}

/// `launch.txt` gives the decode `--dcp-size 8` after its `--tp-size` (no more GPUs), the
/// prefill none, and a scenario without DCP no `--dcp-size` at all.
#[test]
fn the_launch_line_carries_the_dcp_size() {
    let text = pdsim::plan::launch::launch_text(&load(&[]).unwrap());
    let lines: Vec<&str> = pdsim::plan::launch::commands(&text).collect();
    let decode: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("--disaggregation-mode decode"))
        .collect();
    assert!(!decode.is_empty());
    assert!(
        decode
            .iter()
            .all(|l| l.contains("--tp-size 8 --dcp-size 8")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("--disaggregation-mode prefill"))
            .all(|l| !l.contains("--dcp-size")),
        "{text}"
    );
    let plain =
        pdsim::plan::launch::launch_text(&load(&["pools.decode.server.dcp_size=1"]).unwrap());
    assert!(!plain.contains("--dcp-size"), "{plain}");
}
