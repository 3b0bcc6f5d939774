//! Pipeline-parallel prefill with per-stage writers (`--pp-size`, sglang PR #33807;
//! `docs/sglang-pd.md` §27) on Llama-3.1-8B (32 layers, 8 KV heads of 128, hidden 4,096,
//! BF16): what each stage writes, counted by hand against the PP-1 pair; the staging
//! buffer's writers; a prefill GPU's KV capacity; a lone prompt's forward; micro-batches in
//! flight under a burst and under saturation (sglang's `event_loop_pp`); the refusals; the
//! launch line; and the teaching scenario `scenarios/transfer/pp-prefill.toml`.

use crate::common;
use common::*;

use std::collections::BTreeMap;

use pdsim::layout::{ChunkRequest, PairPlan, Profile, Write, WriteDst};
use pdsim::spec::ServerArgs;

const TEACH: &str = "scenarios/transfer/pp-prefill.toml";

fn llama() -> pdsim::spec::ModelSpec {
    pdsim::spec::model::preset("llama-3.1-8b").expect("a preset")
}

fn args(tp: u32, pp: u32) -> ServerArgs {
    ServerArgs {
        pp_size: pp,
        radix_cache: None,
        ..ServerArgs::sglang_defaults(tp, 64, "auto")
    }
}

fn plan(p: (u32, u32), d_tp: u32) -> PairPlan {
    let m = llama();
    PairPlan::compile(
        (&m, &args(p.0, p.1)),
        (&m, &args(d_tp, 1)),
        Profile::Guarded,
    )
    .expect("the pair compiles")
}

/// A 2,048-token prompt as one chunk: 32 pages of 64 tokens, contiguous on both sides.
fn chunk<'a>(src: &'a [u32], dst: &'a [u32], last: bool) -> ChunkRequest<'a> {
    ChunkRequest {
        src_pages: src,
        dst_pages: dst,
        last,
        src_slot: None,
        dst_slot: None,
        src_aux: 0,
        dst_aux: 1,
    }
}

/// The decode KV regions a prefill rank's writes land in.
fn kv_regions_by_rank(writes: &[Write]) -> BTreeMap<u32, Vec<u32>> {
    let mut out: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for w in writes {
        if let WriteDst::Kv { first, count } = w.dst {
            out.entry(w.prefill_rank)
                .or_default()
                .extend(first..first + count);
        }
    }
    for v in out.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    out
}

/// Equal attention TP (`send_kvcache`, whole pages a region). A decode rank of TP 2 holds 4
/// heads: a page of one region is 64 tokens × 4 × 128 × 2 B = 65,536 B; a 32-page run is one
/// write a region.
///
/// * PP 1: 2 targets (rank r → decode rank r), each 64 regions (32 K, 32 V): 64 writes of
///   2,097,152 B, **134,217,728 B** a target, 268,435,456 B in all.
/// * PP 2 (TP 2 a stage): 4 targets (ranks 0, 1 of stage 0 and 2, 3 of stage 1 → decode
///   ranks 0, 1, 0, 1), each its stage's 32 regions: 32 writes, **67,108,864 B** a target —
///   the same 128 writes and 268,435,456 B in all. Stage 0 lands in decode regions 0–15 (K of
///   layers 0–15) and 32–47 (their V), stage 1 in 16–31 and 48–63: each only its layers,
///   together every region once. Both plans are exact (every byte where the decode expects
///   it), and on the last chunk only stage 1 writes the metadata row.
#[test]
fn each_stage_writes_its_own_layers_and_together_what_pp1_writes() {
    let src: Vec<u32> = (1..=32).collect();
    let dst: Vec<u32> = (101..=132).collect();
    let (one, two) = (plan((2, 1), 2), plan((2, 2), 2));
    assert_eq!((one.pp_size(), two.pp_size()), (1, 2));
    assert!(one.is_exact() && two.is_exact());
    let f1 = one.chunk(&chunk(&src, &dst, false)).flows;
    let f2 = two.chunk(&chunk(&src, &dst, false)).flows;
    let pairs = |f: &[pdsim::layout::RankFlow]| {
        f.iter()
            .map(|x| (x.prefill_rank, x.decode_rank, x.bytes, x.writes))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        pairs(&f1),
        [(0, 0, 134_217_728, 64), (1, 1, 134_217_728, 64)]
    );
    assert_eq!(
        pairs(&f2),
        [
            (0, 0, 67_108_864, 32),
            (1, 1, 67_108_864, 32),
            (2, 0, 67_108_864, 32),
            (3, 1, 67_108_864, 32)
        ]
    );
    let total = |f: &[pdsim::layout::RankFlow]| {
        (
            f.iter().map(|x| x.bytes).sum::<u64>(),
            f.iter().map(|x| x.writes).sum::<u64>(),
        )
    };
    assert_eq!(total(&f1), (268_435_456, 128));
    assert_eq!(total(&f2), total(&f1));

    let mut w = Vec::new();
    two.writes(&chunk(&src, &dst, true), &mut w);
    let by_rank = kv_regions_by_rank(&w);
    let stage0: Vec<u32> = (0..16).chain(32..48).collect();
    let stage1: Vec<u32> = (16..32).chain(48..64).collect();
    assert_eq!(by_rank[&0], stage0);
    assert_eq!(by_rank[&1], stage0);
    assert_eq!(by_rank[&2], stage1);
    assert_eq!(by_rank[&3], stage1);
    let aux_ranks: std::collections::BTreeSet<u32> = w
        .iter()
        .filter(|x| matches!(x.dst, WriteDst::Aux { .. }))
        .map(|x| x.prefill_rank)
        .collect();
    assert_eq!(aux_ranks.into_iter().collect::<Vec<_>>(), [2, 3]);
}

/// sglang's `get_pp_indices` gives the last `32 % 3 = 2` of three stages one more layer: 10,
/// 11, 11. A stage of 10 (or 11) layers into a 32-layer decode is, for
/// `get_mha_kv_ptrs_with_pp`, the "decode has draft model KV" case (`32 % 10 != 0`): its V
/// goes to `dst[10 · 3 + start : …]` — the last K layers and the first V layers — so the pair
/// is not exact (its requests corrupt); 2 and 4 stages divide 32 and are exact.
#[test]
fn three_stages_of_a_32_layer_model_write_their_v_to_the_wrong_layers() {
    assert_eq!(
        (0..3)
            .map(|r| pdsim::spec::server::pp_indices(32, r, 3))
            .collect::<Vec<_>>(),
        [(0, 10), (10, 21), (21, 32)]
    );
    assert!(!plan((2, 3), 2).is_exact());
    assert!(plan((2, 4), 2).is_exact());
    assert!(plan((1, 2), 4).is_exact());
}

/// `num_writers_for` counts TP × PP writers (PR #33807): a decode rank's staged region is
/// scattered once every writer arrived. p2d4: one prefill TP rank a decode rank (TP ratio 1)
/// × 2 stages = **2**; p4d2: 2 TP ranks × 2 stages = **4**; without PP 1 and 2.
#[test]
fn staging_counts_tp_times_pp_writers() {
    let writers = |p: (u32, u32), d: u32| {
        let mut plan = plan(p, d);
        plan.enable_staging(4096 << 20, 3.35e12, 3.35e12);
        plan.staging()
            .expect("heterogeneous TP stages")
            .writers
            .clone()
    };
    assert_eq!(writers((2, 1), 4), [1, 1, 1, 1]);
    assert_eq!(writers((2, 2), 4), [2, 2, 2, 2]);
    assert_eq!(writers((4, 1), 2), [2, 2]);
    assert_eq!(writers((4, 2), 2), [4, 4]);
}

fn load(sets: &[&str]) -> Result<pdsim::config::Scenario, String> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    pdsim::scenario::load(&repo().join(TEACH), &sets).map_err(|e| e.to_string())
}

/// A prefill GPU of the PP-2 instance holds half the weights and the KV of 16 layers, derived
/// by hand: H100 80 GiB × `mem_fraction_static` 0.85, less the weights (Llama-3.1-8B's
/// embedding and LM head are separate, so a stage of 16 layers and one vocabulary matrix is
/// exactly half the model: W / 4 a GPU at TP 2 × PP 2, W / 2 at TP 2), less the activation
/// reserve (the same); a token's KV on a rank is 32 layers × 2 × 4 heads × 128 × 2 B =
/// 65,536 B at PP 1 and half that at PP 2; a page is 64 tokens, page 0 the sink. The PP-2
/// instance holds more than twice the pages (its weights free room too).
#[test]
fn a_stage_holds_half_the_weights_and_half_the_kv_per_token() {
    use pdsim::config::capacity;
    let (one, two) = (
        load(&["pools.prefill.server.pp_size=1"]).unwrap(),
        load(&[]).unwrap(),
    );
    let (p1, p2) = (&one.pools[0], &two.pools[0]);
    let m = llama();
    assert!(!m.tie_word_embeddings);
    let w = m.weight_bytes_total();
    let w2 = capacity::weight_bytes_per_gpu(&p2.model, &p2.server, &p2.parallel);
    assert!((w2 / (w / 4.0) - 1.0).abs() < 1e-12, "{w2} vs {}", w / 4.0);
    let by_hand = |weights: f64, per_token: u64, p: &pdsim::config::Pool| {
        let budget =
            two.gpu.hbm_bytes as f64 * 0.85 - weights - capacity::activation_reserve_bytes(p);
        ((budget / (per_token * 64) as f64).floor() as u64 - 1) as u32
    };
    let pages1 = capacity::kv_pages(&one.gpu, p1);
    let pages2 = capacity::kv_pages(&two.gpu, p2);
    assert_eq!(pages1, by_hand(w / 2.0, 65_536, p1));
    assert_eq!(pages2, by_hand(w / 4.0, 32_768, p2));
    assert!(pages2 > 2 * pages1, "{pages2} vs {pages1}");
    // The GPUs an instance takes, as placed and billed.
    assert_eq!(two.placement.gpus[0].len(), 4);
    assert_eq!(one.placement.gpus[0].len(), 2);
}

/// A lone 2,048-token prompt: the PP-2 forward is the PP-1 forward at the same stage TP (every
/// layer once on 2 GPUs) plus one hand-off of the hidden states and residual, 2,048 × 2 ×
/// 4,096 × 2 B = 33,554,432 B, each of the 2 ranks sending half over NVLink (H100: 900 GB/s,
/// one way half, at the calibration's link efficiency) after one collective step's latency.
/// That is ~0.05 ms on a ~29 ms forward: PP buys memory and, with micro-batches in flight,
/// throughput under load, not a lone prompt's latency. The stages of a lone micro-batch add
/// up to exactly this (as when pdsim ran one batch at a time).
#[test]
fn a_lone_prompt_pays_one_hand_off_per_stage_boundary() {
    let sets = ["run.max_requests=1"];
    let sc = load(&[]).unwrap();
    let dir1 = tmpdir("pp-lone-1");
    let dir2 = tmpdir("pp-lone-2");
    run(
        TEACH,
        &["run.max_requests=1", "pools.prefill.server.pp_size=1"],
        &dir1,
    );
    run(TEACH, &sets, &dir2);
    let r1 = &read_csv(&dir1.join("requests.csv"))[0];
    let r2 = &read_csv(&dir2.join("requests.csv"))[0];
    let t = |r: &BTreeMap<String, String>| {
        num(r, "prefill_end_ns").unwrap() - num(r, "prefill_start_ns").unwrap()
    };
    let c = &sc.compute;
    let bytes = 2048.0 * 2.0 * 4096.0 * 2.0 / 2.0;
    let link = sc.gpu.nvlink_bytes_per_s / 2.0 * c.nvlink_efficiency;
    let hop = (c.allreduce_step_latency_s * 1e9).ceil() as u64 + (bytes / link * 1e9).ceil() as u64;
    assert_eq!(t(r2) - t(r1), hop, "PP 1 {} ns, PP 2 {} ns", t(r1), t(r2));
    assert!(hop > 10_000 && hop < 200_000, "{hop}");
    assert!(t(r1) > 10_000_000, "{}", t(r1));
}

/// A lone 2,048-token prompt's prefill (start to end) on the teaching pair with `sets`, ns.
fn lone_prefill_ns(sets: &[&str], tag: &str) -> u64 {
    let mut all = vec!["run.max_requests=1"];
    all.extend_from_slice(sets);
    let (_, rows) = run_rows(TEACH, &all, tag);
    ns(&rows[0], "prefill_end_ns") - ns(&rows[0], "prefill_start_ns")
}

/// One hand-off of a 2,048-token micro-batch between two TP-2 stages over NVLink, ns (as
/// `a_lone_prompt_pays_one_hand_off_per_stage_boundary` derives it).
fn hop_ns(sc: &pdsim::config::Scenario) -> u64 {
    let c = &sc.compute;
    let bytes = 2048.0 * 2.0 * 4096.0 * 2.0 / 2.0;
    let link = sc.gpu.nvlink_bytes_per_s / 2.0 * c.nvlink_efficiency;
    (c.allreduce_step_latency_s * 1e9).ceil() as u64 + (bytes / link * 1e9).ceil() as u64
}

/// A burst of `k` 2,048-token prompts, 10 µs apart, each prefill batch holding one (the chunk
/// and the input budget are one prompt: sglang's `PrefillAdder` closes the batch when the
/// chunk is spent).
fn burst(k: u32) -> Vec<String> {
    vec![
        format!("run.max_requests={k}"),
        "workload.arrival={ process = \"constant\", rate_per_s = 100000 }".into(),
        "pools.prefill.server.chunked_prefill_size=2048".into(),
        "pools.prefill.server.max_prefill_tokens=2048".into(),
    ]
}

/// Each request's `(prefill_start_ns, prefill_end_ns)` in a burst of `k` with `sets` more.
fn burst_prefills(k: u32, sets: &[&str], tag: &str) -> Vec<(u64, u64)> {
    let mut all = burst(k);
    all.extend(sets.iter().map(|s| s.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (s, rows) = run_rows(TEACH, &all, tag);
    assert_eq!(s.requests.completed, u64::from(k), "{tag}");
    rows.iter()
        .map(|r| (ns(r, "prefill_start_ns"), ns(r, "prefill_end_ns")))
        .collect()
}

/// The two stages of a 2,048-token micro-batch on TP 2 × PP 2, by hand from the step model:
/// the forward `f` (a lone prompt's at PP 1, every layer at TP 2) less its host cost
/// (`prefill_overhead_s` + one sequence's `prefill_per_seq_overhead_s`, rounded up) is the GPU
/// time, half on each stage (16 of the 32 layers each); stage 0 adds the host cost and the
/// hand-off, stage 1 neither.
fn stages(sc: &pdsim::config::Scenario, f: u64) -> (u64, u64) {
    let c = &sc.compute;
    let host =
        pdsim::engine::ns_from_secs_ceil(c.prefill_overhead_s + c.prefill_per_seq_overhead_s * 1.0);
    let gpu = f - host;
    (host + gpu / 2 + hop_ns(sc), gpu - gpu / 2)
}

/// sglang's `event_loop_pp` keeps `pp_loop_size` = 2 micro-batches in flight on two stages: a
/// burst of 6 equal prompts, one a micro-batch, leaves the pipeline first after the whole
/// forward plus one hand-off (`t0 + t1`), then one every `max(t0, t1)` — stage 0's time,
/// which carries the host cost and the hand-off — and each enters when stage 0 is free, one
/// `t0` after the one before. On the H100 calibration: the forward, 29,106,609 ns at TP 2,
/// less its host cost, 1,050,000 ns (1 ms + 50 µs for one sequence), is 28,056,609 ns of GPU
/// time: stage 0 takes 1,050,000 + 14,028,304 + a 51,914-ns hand-off = 15,130,218 ns, stage 1
/// 14,028,305 ns. The first prompt leaves after 29,158,523 ns, the next ones 15,130,218 ns
/// apart, where one batch at a time leaves them 29,106,609 ns apart.
#[test]
fn a_burst_leaves_the_pipeline_one_stage_time_apart() {
    let sc = load(&[]).unwrap();
    let f = lone_prefill_ns(&["pools.prefill.server.pp_size=1"], "pp-burst-f");
    let (t0, t1) = stages(&sc, f);
    assert!(t0 > t1, "{t0} vs {t1}");
    let rows = burst_prefills(6, &[], "pp-burst");
    let (s0, e0) = rows[0];
    assert_eq!(e0 - s0, t0 + t1, "first: the forward plus one hand-off");
    assert_eq!(e0 - s0, f + hop_ns(&sc));
    for (j, &(s, e)) in rows.iter().enumerate() {
        let j = j as u64;
        assert_eq!(s - s0, j * t0, "request {j} enters when stage 0 is free");
        assert_eq!(
            e - e0,
            j * t0,
            "request {j} leaves one stage time after the one before"
        );
    }
    // One batch at a time (PP 1) leaves them one whole forward apart.
    let one = burst_prefills(6, &["pools.prefill.server.pp_size=1"], "pp-burst-1");
    for (j, &(_, e)) in one.iter().enumerate() {
        assert_eq!(e - one[0].1, j as u64 * f, "PP 1, request {j}");
    }
}

/// Under a saturating burst (8 prompts, one a batch), prefill throughput follows the
/// pipeline formula: one batch every `F(TP 2)` on TP 2 alone, every `max(t0, t1)` on TP 2 ×
/// PP 2 (the same GPUs a stage), every `F(TP 4)` on TP 4 (the four GPUs as one stage). With
/// the H100 calibration: `F(TP 2)` = 29,106,609 ns; `max(t0, t1)` = `t0` = host +
/// (`F(TP 2)` − host) / 2 + hop = 15,130,218 ns; `F(TP 4)` = 21,971,193 ns (its all-reduces
/// over four ranks and its fixed costs keep it well above half of `F(TP 2)`). So 34.4 prompts a second on TP 2, 66.1
/// on TP 2 × PP 2 and 45.5 on TP 4: on the same four GPUs the pipeline serves more, and
/// nearly twice TP 2 (one batch at a time, as pdsim modelled PP before, it served 34.3 — less
/// than TP 2 alone).
#[test]
fn saturated_throughput_follows_the_pipeline_formula() {
    let sc = load(&[]).unwrap();
    let k = 8;
    let f2 = lone_prefill_ns(&["pools.prefill.server.pp_size=1"], "pp-sat-f2");
    let f4 = lone_prefill_ns(
        &[
            "pools.prefill.server.pp_size=1",
            "pools.prefill.server.tp_size=4",
        ],
        "pp-sat-f4",
    );
    let (t0, t1) = stages(&sc, f2);
    let period =
        |rows: &[(u64, u64)]| (rows[rows.len() - 1].1 - rows[0].1) / (rows.len() as u64 - 1);
    let tp2 = period(&burst_prefills(
        k,
        &["pools.prefill.server.pp_size=1"],
        "pp-sat-tp2",
    ));
    let pp2 = period(&burst_prefills(k, &[], "pp-sat-pp2"));
    let tp4 = period(&burst_prefills(
        k,
        &[
            "pools.prefill.server.pp_size=1",
            "pools.prefill.server.tp_size=4",
        ],
        "pp-sat-tp4",
    ));
    assert_eq!(tp2, f2);
    assert_eq!(pp2, t0.max(t1));
    assert_eq!(tp4, f4);
    assert!(
        pp2 < tp4 && tp4 < tp2,
        "TP 2 × PP 2 {pp2}, TP 4 {tp4}, TP 2 {tp2} ns a prompt"
    );
    assert!(
        2 * pp2 < tp2 + tp2 / 10,
        "nearly twice TP 2's throughput: {pp2} vs {tp2}"
    );
}

/// `pp_async_batch_depth` 1 (a ring of 3) runs the same burst the same way here — stage 0 is
/// the longer stage, so the ring never fills — and, like every run, gives the same bytes
/// twice.
#[test]
fn a_deeper_ring_changes_nothing_when_stage_0_sets_the_pace_and_runs_repeat() {
    let two = burst_prefills(6, &[], "pp-depth-0");
    let sets = ["pools.prefill.server.pp_async_batch_depth=1"];
    let three = burst_prefills(6, &sets, "pp-depth-1");
    assert_eq!(two, three);
    let mut all = burst(6);
    all.push(sets[0].into());
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (a, b) = (tmpdir("pp-det-a"), tmpdir("pp-det-b"));
    run(TEACH, &all, &a);
    run(TEACH, &all, &b);
    for f in [
        "requests.csv",
        "summary.json",
        "timeseries.csv",
        "links.csv",
    ] {
        let x = std::fs::read(a.join(f)).unwrap();
        let y = std::fs::read(b.join(f)).unwrap();
        assert!(
            x == y,
            "{f} differs between two runs of one scenario and seed"
        );
    }
}

/// The teaching scenario end to end: every request completes; each moves the PP-1 pair's KV
/// bytes, in 8 bulk KV writes (4 targets × 2 stages) where PP 1 issues 4; the metadata row's
/// writes (10 aux buffers × 4 targets) are the same, the last stage's alone.
#[test]
fn the_teaching_pair_moves_the_same_bytes_in_twice_the_bulk_writes() {
    let dir1 = tmpdir("pp-teach-1");
    let dir2 = tmpdir("pp-teach-2");
    let s1 = run(TEACH, &["pools.prefill.server.pp_size=1"], &dir1);
    let s2 = run(TEACH, &[], &dir2);
    assert_eq!(s2.requests.failed + s2.requests.corrupted, 0);
    assert_eq!(s1.requests.completed, s2.requests.completed);
    let rows1 = read_csv(&dir1.join("requests.csv"));
    let rows2 = read_csv(&dir2.join("requests.csv"));
    let aux_writes = 10 * 4;
    for (a, b) in rows1.iter().zip(&rows2) {
        assert_eq!(
            num(a, "kv_bytes"),
            num(b, "kv_bytes"),
            "request {}",
            a["id"]
        );
        assert_eq!(
            num(a, "rdma_writes"),
            Some(4 + aux_writes),
            "request {}",
            a["id"]
        );
        assert_eq!(
            num(b, "rdma_writes"),
            Some(8 + aux_writes),
            "request {}",
            b["id"]
        );
    }
}

/// Bad values are refused naming the key and what is valid.
#[test]
fn bad_pp_sizes_are_refused_naming_the_key() {
    let err = |sets: &[&str]| load(sets).expect_err("refused");
    let e = err(&["pools.prefill.server.pp_size=0"]);
    assert!(
        e.contains("pools.prefill.server.pp_size") && e.contains("≥ 1"),
        "{e}"
    );
    let e = err(&["pools.decode.server.pp_size=2"]);
    assert!(
        e.contains("pools.decode.server.pp_size")
            && e.contains("prefill pools only")
            && e.contains("Decode pp size should be equal to prefill pp size or 1"),
        "{e}"
    );
    let e = err(&[
        "pools.prefill.server.tp_size=1",
        "pools.prefill.server.pp_size=40",
    ]);
    assert!(
        e.contains("pools.prefill.server.pp_size") && e.contains("32 layers"),
        "{e}"
    );
    let e = err(&["pools.prefill.server.pp_size=3"]);
    assert!(
        e.contains("pools.prefill.server.pp_size") && e.contains("gpus_per_node"),
        "{e}"
    );
    let e = err(&[
        "model.preset=qwen3-next-80b-a3b",
        "pools.prefill.server.tp_size=4",
    ]);
    assert!(
        e.contains("pools.prefill.server.pp_size") && e.contains("state"),
        "{e}"
    );
    let e = err(&["pools.prefill.server.pp_async_batch_depth=65"]);
    assert!(
        e.contains("pools.prefill.server.pp_async_batch_depth") && e.contains("0..=64"),
        "{e}"
    );
    let e = err(&[
        "pools.prefill.server.pp_size=1",
        "pools.prefill.server.pp_async_batch_depth=1",
    ]);
    assert!(
        e.contains("pools.prefill.server.pp_async_batch_depth") && e.contains("pp_size > 1"),
        "{e}"
    );
    let e = err(&["sglang.version=2026-09", "sglang.kv_checksum=true"]);
    assert!(
        e.contains("pools.prefill.server.pp_size") && e.contains("kv_checksum"),
        "{e}"
    );
}

/// `launch.txt` gives the prefill `--pp-size 2` after its `--tp-size`, the decode none, and a
/// scenario without PP no `--pp-size` at all; `--pp-async-batch-depth` only when set.
#[test]
fn the_launch_line_carries_the_pp_size() {
    let text = pdsim::plan::launch::launch_text(&load(&[]).unwrap());
    let lines: Vec<&str> = pdsim::plan::launch::commands(&text).collect();
    let prefill: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("--disaggregation-mode prefill"))
        .collect();
    assert!(!prefill.is_empty());
    assert!(
        prefill
            .iter()
            .all(|l| l.contains("--tp-size 2 --pp-size 2")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| l.contains("--disaggregation-mode decode"))
            .all(|l| !l.contains("--pp-size")),
        "{text}"
    );
    let plain =
        pdsim::plan::launch::launch_text(&load(&["pools.prefill.server.pp_size=1"]).unwrap());
    assert!(!plain.contains("--pp-size"), "{plain}");
    assert!(!text.contains("--pp-async-batch-depth"), "{text}");
    let deep = load(&["pools.prefill.server.pp_async_batch_depth=2"]).unwrap();
    let deep = pdsim::plan::launch::launch_text(&deep);
    assert!(
        deep.contains("--pp-size 2 --pp-async-batch-depth 2"),
        "{deep}"
    );
}
