//! sglang's FP4 KV cache (`--kv-cache-dtype fp4_e2m1`, docs/sglang-pd.md §29): its bytes a
//! token, data and scales, derived by hand from `MHATokenToKVPoolFP4` / `MLATokenToKVPoolFP4`;
//! the tokens a GPU holds against FP8; and the PD hazard — the pools register only their packed
//! data for the transfer, so every transferred request decodes with scales nobody sent.

use crate::common;
use common::*;

use pdsim::config::capacity::{kv_budget_bytes, kv_pages};
use pdsim::spec::model::KvElem;

/// Llama-3.1-8B at TP 1: 32 layers, 8 KV heads of 128. A layer's K row is 8 × 128 = 1,024
/// elements: 512 B of E2M1 pairs and 1,024 / 16 = 64 scale bytes; V alike. 32 × 2 × 576 =
/// 36,864 B a token, against FP8's 32 × 2 × 1,024 = 65,536: 9/16. At TP 8 one head a rank:
/// 32 × 2 × (64 + 8) = 4,608.
#[test]
fn an_fp4_mha_pool_takes_4_5_bits_an_element_with_its_scales() {
    let m = pdsim::spec::preset("llama-3.1-8b").unwrap();
    assert_eq!(m.kv_token_bytes_rank(1, KvElem::Fp4), 36_864);
    assert_eq!(m.kv_token_bytes_rank(1, KvElem::Bytes(1)), 65_536);
    assert_eq!(m.kv_token_bytes_rank(8, KvElem::Fp4), 4_608);
    assert_eq!(m.kv_fp4_bytes_per_token_layer_rank(1), 1_152);
}

/// DeepSeek-V3's MLA latent: 512 + 64 = 576 elements a layer, replicated on every rank:
/// 288 B of pairs and 36 scale bytes, × 61 layers = 19,764 B a token (FP8: 35,136).
#[test]
fn an_fp4_mla_pool_keeps_the_576_element_latent_in_324_bytes_a_layer() {
    let m = pdsim::spec::preset("deepseek-v3").unwrap();
    assert_eq!(m.kv_fp4_bytes_per_token_layer_rank(8), 324);
    assert_eq!(m.kv_token_bytes_rank(8, KvElem::Fp4), 61 * 324);
    assert_eq!(m.kv_token_bytes_rank(8, KvElem::Bytes(1)), 61 * 576);
}

/// The rank layout: the registered regions hold the packed data only (512 B a token a layer),
/// the scale regions (64 B) are allocated beside them and listed apart, unregistered.
#[test]
fn the_layout_registers_the_packed_data_and_lists_the_scales_apart() {
    let m = pdsim::spec::preset("llama-3.1-8b").unwrap();
    let args = pdsim::spec::ServerArgs::sglang_defaults(1, 64, "fp4_e2m1");
    let l = pdsim::layout::RankLayout::new(&m, &args, 0).unwrap();
    assert_eq!(l.kv_regions.len(), 64);
    assert!(l.kv_regions.iter().all(|r| r.item_len == 64 * 512));
    assert_eq!(l.kv_scale_regions.len(), 64);
    assert!(l.kv_scale_regions.iter().all(|r| r.item_len == 64 * 64));
    let reg = l.registration(&pdsim::layout::Capacity {
        pages: 10,
        slots: 0,
        aux_rows: 4,
    });
    // 64 KV buffers and the 10 aux buffers: no scale buffer is registered.
    assert_eq!(reg.buffers.len(), 64 + 10);
    let table = pdsim::layout::render_table(&l);
    assert!(table.contains("KV scale regions (FP4): 64"), "{table}");
    assert!(table.contains("NOT registered for PD transfer"), "{table}");
    // Every other dtype keeps no scale regions.
    let fp8 = pdsim::spec::ServerArgs::sglang_defaults(1, 64, "fp8_e4m3");
    let l8 = pdsim::layout::RankLayout::new(&m, &fp8, 0).unwrap();
    assert!(l8.kv_scale_regions.is_empty());
    assert!(l8.kv_regions.iter().all(|r| r.item_len == 64 * 1024));
}

/// The same GPU budget holds 16/9 the tokens in FP4 as in FP8: pages are
/// `floor(budget / (bytes a token × 64)) − 1` (page 0 is the sink), the budget the same for
/// both (the weights do not change).
#[test]
fn an_fp4_pool_holds_sixteen_ninths_the_tokens_of_fp8() {
    let load = |sets: &[&str]| {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        pdsim::scenario::load(&repo().join("scenarios/pd/fp4-kv-pd.toml"), &sets).unwrap()
    };
    let fp4 = load(&[]);
    let fp8 = load(&[
        "pools.prefill.server.kv_cache_dtype=\"fp8_e4m3\"",
        "pools.decode.server.kv_cache_dtype=\"fp8_e4m3\"",
    ]);
    let (p4, p8) = (&fp4.pools[1], &fp8.pools[1]);
    let budget = kv_budget_bytes(&fp4.gpu, p4);
    assert_eq!(budget, kv_budget_bytes(&fp8.gpu, p8));
    let pages = |per_token: f64| (budget / (per_token * 64.0)).floor() as u32 - 1;
    assert_eq!(kv_pages(&fp4.gpu, p4), pages(36_864.0));
    assert_eq!(kv_pages(&fp8.gpu, p8), pages(65_536.0));
    let ratio = f64::from(kv_pages(&fp4.gpu, p4)) / f64::from(kv_pages(&fp8.gpu, p8));
    assert!((ratio - 16.0 / 9.0).abs() < 1e-3, "{ratio}");
}

/// The PD hazard: every request moves its nibbles (14 pages of 64 tokens × 64 regions × 32 KiB
/// for an 853-token prompt, plus its 9,728-byte metadata row — no scales) and finishes
/// corrupted, naming its own transfer; no error is raised; conservation holds. With FP8 on both
/// sides the same traffic completes.
#[test]
fn every_transferred_request_of_an_fp4_pd_pair_is_corrupted_silently() {
    let (s, rows) = run_rows("scenarios/pd/fp4-kv-pd.toml", &[], "fp4-kv-pd");
    let r = &s.requests;
    assert!(r.arrived >= 10, "{r:?}");
    assert_eq!(r.corrupted, r.arrived, "{r:?}");
    assert_eq!(
        r.arrived,
        r.completed + r.failed + r.corrupted + r.unfinished + r.aborted
    );
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    for row in &rows {
        assert_eq!(row["outcome"], "corrupted");
        assert_eq!(row["corrupted_by"], row["id"], "its own transfer");
        let pages = num(row, "input_tokens").unwrap().div_ceil(64);
        assert_eq!(
            num(row, "kv_bytes").unwrap(),
            pages * 64 * 64 * 512 + 9_728,
            "{row:?}"
        );
    }
    let (s8, _) = run_rows(
        "scenarios/pd/fp4-kv-pd.toml",
        &[
            "pools.prefill.server.kv_cache_dtype=\"fp8_e4m3\"",
            "pools.decode.server.kv_cache_dtype=\"fp8_e4m3\"",
        ],
        "fp4-kv-pd-fp8",
    );
    assert_eq!(s8.requests.completed, s8.requests.arrived);
    assert_eq!(s8.requests.corrupted, 0);
}

/// Colocated, the server that writes the FP4 KV and its scales is the one that reads them:
/// nothing is transferred, everything completes.
#[test]
fn colocated_fp4_kv_completes() {
    let dir = tmpdir("fp4-kv-colocated");
    let path = dir.join("colocated.toml");
    std::fs::write(
        &path,
        r#"[run]
name = "fp4-kv-colocated"
seed = 3
duration_s = 10
drain_timeout_s = 60

[model]
preset = "llama-3.1-8b"

[hardware]
gpu = "b200"

[[pools]]
name = "servers"
role = "colocated"
instances = 1
[pools.server]
tp_size = 1
page_size = 64
kv_cache_dtype = "fp4_e2m1"

[workload]
arrival = { process = "poisson", rate_per_s = 2.0 }
input_tokens = { dist = "lognormal", mean = 1024, cv = 0.5, max = 4096 }
output_tokens = { dist = "fixed", value = 32 }

[router]
policy = "round_robin"
"#,
    )
    .unwrap();
    let sc = pdsim::scenario::load(&path, &[]).unwrap();
    let s = pdsim::app::run::run_scenario(&sc, &dir.join("out"))
        .unwrap()
        .summary;
    assert!(s.requests.arrived >= 10);
    assert_eq!(s.requests.completed, s.requests.arrived, "{:?}", s.requests);
    assert_eq!(s.requests.corrupted, 0);
}

/// `pdsim lint` on the two launch lines predicts the corruption, says who raises nothing and
/// why, and gives the fix; the same lines with fp8_e4m3 are compatible.
#[test]
fn lint_predicts_the_fp4_hazard_from_two_launch_lines() {
    let line = |mode: &str, dtype: &str| {
        format!(
            "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --kv-cache-dtype {dtype} --disaggregation-mode {mode}"
        )
    };
    let (code, out, _) = pdsim(&[
        "lint",
        "--prefill",
        &line("prefill", "fp4_e2m1"),
        "--decode",
        &line("decode", "fp4_e2m1"),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("64 FP4 scale region(s) not registered"),
        "{out}"
    );
    assert!(
        out.contains("dequantises the transferred FP4 KV with scales nobody sent"),
        "{out}"
    );
    assert!(out.contains("MHATokenToKVPoolFP4"), "{out}");
    assert!(out.contains("get_contiguous_buf_infos"), "{out}");
    assert!(
        out.contains("fix: --kv-cache-dtype fp8_e4m3 on both sides"),
        "{out}"
    );
    let (code, out, _) = pdsim(&[
        "lint",
        "--prefill",
        &line("prefill", "fp8_e4m3"),
        "--decode",
        &line("decode", "fp8_e4m3"),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("COMPATIBLE"), "{out}");
}

/// `pdsim explain` names sglang's classes and functions and the fix for the corrupted pair.
#[test]
fn explain_names_the_fp4_pools_and_the_fix() {
    let dir = tmpdir("fp4-kv-explain");
    run("scenarios/pd/fp4-kv-pd.toml", &[], &dir);
    let text = pdsim::diagnose::explain::explain_dir(&dir, false).unwrap();
    for want in [
        "decoded from KV dequantised with scales nobody sent",
        "MHATokenToKVPoolFP4",
        "get_contiguous_buf_infos",
        "k_scale_buffer",
        "torch.zeros",
        "Fix: --kv-cache-dtype fp8_e4m3 on both sides",
        "serve the FP4 KV cache colocated",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
}

/// Decode attention streams the KV: under the measured kernel tables (B200, the default
/// calibration) there is no FP4-KV table, so the FP8 one is read and scaled by FP4's bytes over
/// FP8's (36,864 / 65,536 = 0.5625), and the run's step-time fallbacks say so. A long-context
/// decode step is cheaper than FP8's; the FP8 model itself is untouched.
#[test]
fn fp4_decode_attention_reads_its_true_bytes_and_says_how() {
    let sc = pdsim::scenario::load(&repo().join("scenarios/pd/fp4-kv-pd.toml"), &[]).unwrap();
    let m = &sc.pools[1].model;
    let fp8 = pdsim::compute::StepModel::new(&sc.gpu, m, 1, 1, sc.compute.clone());
    let fp4 = fp8.clone().with_fp4_kv(m, 1);
    assert!(
        fp4.kernel_fallbacks()
            .iter()
            .any(|f| f.contains("FP4 KV cache") && f.contains("× 0.5625")),
        "{:?}",
        fp4.kernel_fallbacks()
    );
    assert!(!fp8.kernel_fallbacks().iter().any(|f| f.contains("FP4")));
    let (b, ctx) = (64, 64 * 8192);
    assert!(fp4.decode_ns(b, ctx) < fp8.decode_ns(b, ctx));
    assert_eq!(
        fp8.decode_ns(b, ctx),
        pdsim::compute::StepModel::new(&sc.gpu, m, 1, 1, sc.compute.clone()).decode_ns(b, ctx)
    );
}

/// `launch.txt` writes `--kv-cache-dtype fp4_e2m1` on both servers, and `pdsim lint` reads its
/// two lines back to the same verdict.
#[test]
fn launch_txt_writes_the_flag_and_lint_reads_it_back() {
    let sc = pdsim::scenario::load(&repo().join("scenarios/pd/fp4-kv-pd.toml"), &[]).unwrap();
    let text = pdsim::plan::launch::launch_text(&sc);
    let line = |mode: &str| {
        pdsim::plan::launch::commands(&text)
            .find(|l| l.contains(&format!("--disaggregation-mode {mode}")))
            .unwrap()
            .to_string()
    };
    let (p, d) = (line("prefill"), line("decode"));
    assert!(p.contains("--kv-cache-dtype fp4_e2m1"), "{p}");
    assert!(d.contains("--kv-cache-dtype fp4_e2m1"), "{d}");
    let r = pdsim::diagnose::lint::lint(&pdsim::diagnose::lint::LintQuestion {
        prefill: p,
        decode: d,
        model_config: None,
        profile: "guarded".into(),
        version: None,
    })
    .unwrap();
    assert_eq!(r.prediction.outcome, "corrupted");
    assert!(pdsim::diagnose::outcome::fp4_scales_only(&r.prediction));
}

/// `--disaggregation-enable-kv-checksum` (sglang 2026-09, docs/sglang-pd.md §24) digests the
/// registered pages, which both sides hold alike: the FP4 pair passes it and its requests still
/// finish corrupted — no abort — and lint predicts the same.
#[test]
fn the_kv_checksum_does_not_catch_the_missing_scales() {
    let (s, _) = run_rows(
        "scenarios/pd/fp4-kv-pd.toml",
        &["sglang.version=\"2026-09\"", "sglang.kv_checksum=true"],
        "fp4-kv-pd-checksum",
    );
    assert_eq!(s.requests.corrupted, s.requests.arrived, "{:?}", s.requests);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let line = |mode: &str| {
        format!(
            "python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --kv-cache-dtype fp4_e2m1 --disaggregation-enable-kv-checksum --disaggregation-mode {mode}"
        )
    };
    let r = pdsim::diagnose::lint::lint(&pdsim::diagnose::lint::LintQuestion {
        prefill: line("prefill"),
        decode: line("decode"),
        model_config: None,
        profile: "guarded".into(),
        version: Some("2026-09".into()),
    })
    .unwrap();
    assert_eq!(r.prediction.outcome, "corrupted", "{:?}", r.prediction);
}
