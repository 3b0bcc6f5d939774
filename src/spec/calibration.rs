//! Step-time calibrations as data: [`ComputeParams`] (every constant of the step-time model in
//! `compute::model`, each named for what it costs) and the named calibrations a scenario's
//! `hardware.calibration` selects, each parameter with its source beside it.
//!
//! * `sglang-2025` (the default): today's sglang — CUDA-graph decode, overlapped scheduling,
//!   custom all-reduce — fitted to the public measurements in `calibration/modern-engines.md`
//!   (`compute::modern` prints each row's error). No launch floor: a CUDA graph replays a
//!   whole decode step as one launch.
//! * `vllm-2023`: the Splitwise fit to vLLM 2023 (`calibration/perf_model.csv`), kept so the
//!   numbers pdsim printed before stay reachable. Its A100 and H100 rows are separate fits.
//!
//! A third kind is a file written by `pdsim calibrate` ([`CalibrationFile`]): the same
//! parameters fitted to a user's own measurements.

use serde::{Deserialize, Serialize};

use super::GpuSpec;
use super::kernels::Kernels;

/// The parameters of the step-time model. Efficiencies are fractions in (0, 1] of the GPU's
/// own peaks (so a faster GPU is faster where its datasheet is); times are seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeParams {
    /// Fraction of peak tensor FLOP/s a large prefill forward achieves (the MFU ceiling).
    pub prefill_flops_efficiency: f64,
    /// Tokens in one forward at which prefill MFU reaches half its ceiling: MFU =
    /// `ceiling × T / (T + half)` for a forward of `T` tokens (small GEMMs fill the GPU
    /// poorly). 0 keeps MFU flat at the ceiling.
    #[serde(default)]
    pub prefill_mfu_half_tokens: f64,
    /// Fraction of peak tensor FLOP/s a decode step achieves where it is compute-bound.
    pub decode_flops_efficiency: f64,
    /// Fraction of peak HBM bandwidth streaming the weights achieves.
    pub hbm_efficiency: f64,
    /// Fraction of peak HBM bandwidth reading the KV cache (and recurrent state) achieves:
    /// attention kernels gather pages and rarely stream as well as a GEMM reads weights.
    pub kv_hbm_efficiency: f64,
    /// Fixed host cost of one prefill forward, seconds (scheduling, input preparation).
    pub prefill_overhead_s: f64,
    /// Host cost per request in a prefill forward, seconds (per-request scheduling, radix
    /// matching, sampling its first token).
    #[serde(default)]
    pub prefill_per_seq_overhead_s: f64,
    /// Fixed cost of one decode step, seconds (what the GPU-side graph replay and the
    /// non-overlapped part of scheduling leave).
    pub decode_overhead_s: f64,
    /// Cost per running sequence in one decode step, seconds (per-sequence metadata, sampling).
    pub decode_per_seq_overhead_s: f64,
    /// Latency of one step of an all-reduce, seconds; a forward runs one all-reduce per block.
    pub allreduce_step_latency_s: f64,
    /// How many latency steps an all-reduce over `n` GPUs takes: `false` — a ring, `2(n − 1)`
    /// (NCCL's ring, the 2023 fit); `true` — `2⌈log2 n⌉` (sglang's custom all-reduce, one- or
    /// two-shot through peer memory, and NCCL's tree: latency grows with log n).
    #[serde(default)]
    pub allreduce_log_steps: bool,
    /// Fraction of a link's one-way bandwidth (NVLink, or the NIC across nodes) an all-reduce
    /// achieves.
    pub nvlink_efficiency: f64,
    /// Host time to launch one block's kernels, seconds: a forward takes at least
    /// `blocks × launch_per_block_s`. 0 under CUDA graphs.
    pub launch_per_block_s: f64,
    /// Per-request serving costs outside the forward (`docs/performance-model.md` §1.1).
    /// Tokenization, fixed part per request, seconds: the tokenizer manager's parse,
    /// normalisation and send to the scheduler (`TokenizerManager._tokenize_one_request`). A
    /// server's tokenizer manager is one process: requests queue for it in arrival order.
    #[serde(default)]
    pub tokenize_per_request_s: f64,
    /// Tokenization per input token, seconds (the HF tokenizer's `encode`).
    #[serde(default)]
    pub tokenize_per_token_s: f64,
    /// PD only: the decode side's bootstrap handshake per request, seconds — its KV receiver
    /// resolving the prefill's bootstrap info and registering before the request may be
    /// preallocated (`DecodePreallocQueue`: "the request handshakes first"). The page ids
    /// then travel to the prefill over the control network as before.
    #[serde(default)]
    pub bootstrap_handshake_s: f64,
    /// The path of every output token to the client, seconds: detokenizer, tokenizer manager,
    /// HTTP/SSE response. It shifts the first token and the end a client sees (TTFT, E2E),
    /// not the interval between tokens.
    #[serde(default)]
    pub first_token_path_s: f64,
    /// Scheduler CPU time per decode step that overlaps the GPU's, seconds: under sglang's
    /// overlap scheduler (`Scheduler.event_loop_overlap`, default since v0.4) the CPU prepares
    /// step `i + 1` and processes step `i − 1`'s results while the GPU runs step `i`, so a step
    /// takes the longer of the two, not their sum. 0: no such floor.
    #[serde(default)]
    pub decode_cpu_s: f64,
    /// The overlapped scheduler CPU time per running sequence of a decode step, seconds.
    #[serde(default)]
    pub decode_cpu_per_seq_s: f64,
    /// The overlapped scheduler CPU time a decode step of a DP-attention rank adds, seconds:
    /// the DP ranks' per-iteration synchronisation (`Scheduler.prepare_mlp_sync_batch` gathers
    /// every rank's batch shape over the CPU process group, across nodes when the instance
    /// spans them, before the MoE layers can meet). Hidden like `decode_cpu_s`; exposed
    /// without the overlap scheduler.
    #[serde(default)]
    pub dp_attention_cpu_s: f64,
    /// CPU time to launch one decoder layer's kernels in a forward that is not replayed from a
    /// CUDA graph (a prefill, or a decode batch above `cuda_graph_max_bs`), seconds: the
    /// launches run ahead of the GPU, so they show only when the GPU's work is shorter.
    #[serde(default)]
    pub eager_launch_per_layer_s: f64,
    /// The same for a layer with a mixture-of-experts block, seconds: the router's top-k, the
    /// fused-MoE kernels (Triton, each launched from Python) and the shared experts add
    /// launches a dense MLP does not have. A MoE model's other layers pay
    /// `eager_launch_per_layer_s`. 0 where a calibration does not separate them: every layer
    /// then pays the dense rate.
    #[serde(default)]
    pub eager_launch_per_moe_layer_s: f64,
    /// PD: the router streams a request's tokens only after the prefill's HTTP response,
    /// which the prefill's event loop sends at its first turn after the KV transfer
    /// concluded — the end of the forward running then (sgl-model-gateway `pd_router.rs`
    /// `execute_dual_dispatch_internal`; sglang issue #22853, "~200ms higher TTFT" under load;
    /// the fixes PR #22856 and PR #24812 closed unmerged). `false`: the first token is seen
    /// when decode has it.
    #[serde(default)]
    pub pd_prefill_response_holdback: bool,
    /// The roofline's FP8 GEMMs' efficiency as a multiple of its BF16 GEMMs' (each a fraction
    /// of its own peak): FP8 weights run at `fp8 peak × this × the FLOP efficiencies`. 1 in
    /// the fitted calibrations; `sglang-2026` takes the tabled GPUs' median
    /// (`spec::kernels::balance`: block-scaled FP8 GEMMs keep ~0.87 of the fraction of peak
    /// BF16 ones do).
    #[serde(default = "unit")]
    pub fp8_gemm_ratio: f64,
    /// Whether the roofline prices a prefill's attention at the KV cache's precision rather
    /// than at the weights': sglang's prefill attention kernels (FlashAttention 3, FlashInfer,
    /// FlashMLA's and TRT-LLM's MLA prefill) take Q, K and V in the KV cache's dtype, so an FP8
    /// checkpoint with a 16-bit KV cache runs them on BF16 tensor cores, and only an FP8 KV
    /// cache (`--kv-cache-dtype fp8_e4m3`) runs them at the FP8 peak. `false` (the fitted
    /// calibrations, whose rows were BF16 models): the body's peak, as they were fitted.
    /// `sglang-2026` sets it; under its kernel tables the attention is measured and this only
    /// reaches GPUs without tables.
    #[serde(default)]
    pub attention_at_kv_precision: bool,
    /// Measured kernel tables the step model composes forwards from (`compute::kernels`):
    /// `sglang-2026` on a GPU AIConfigurator measured, or a file `pdsim calibrate
    /// --from-aiconfigurator` wrote. `None`: the roofline. Not part of a calibration file's
    /// TOML (the tables are their own file).
    #[serde(skip)]
    pub kernels: Option<Kernels>,
}

/// serde's default of a ratio: 1.
fn unit() -> f64 {
    1.0
}

impl ComputeParams {
    /// Checks every field's range; the message names the field and what is valid.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.fp8_gemm_ratio.is_finite()
            && self.fp8_gemm_ratio > 0.0
            && self.fp8_gemm_ratio <= 2.0)
        {
            return Err(format!(
                "fp8_gemm_ratio must be in (0, 2] (FP8 GEMMs' efficiency over BF16's), got {}",
                self.fp8_gemm_ratio
            ));
        }
        let fractions = [
            ("prefill_flops_efficiency", self.prefill_flops_efficiency),
            ("decode_flops_efficiency", self.decode_flops_efficiency),
            ("hbm_efficiency", self.hbm_efficiency),
            ("kv_hbm_efficiency", self.kv_hbm_efficiency),
            ("nvlink_efficiency", self.nvlink_efficiency),
        ];
        for (name, v) in fractions {
            if !(v.is_finite() && v > 0.0 && v <= 1.0) {
                return Err(format!(
                    "{name} must be in (0, 1] (a fraction of peak), got {v}"
                ));
            }
        }
        let times = [
            ("prefill_mfu_half_tokens", self.prefill_mfu_half_tokens),
            ("prefill_overhead_s", self.prefill_overhead_s),
            (
                "prefill_per_seq_overhead_s",
                self.prefill_per_seq_overhead_s,
            ),
            ("decode_overhead_s", self.decode_overhead_s),
            ("decode_per_seq_overhead_s", self.decode_per_seq_overhead_s),
            ("allreduce_step_latency_s", self.allreduce_step_latency_s),
            ("launch_per_block_s", self.launch_per_block_s),
            ("tokenize_per_request_s", self.tokenize_per_request_s),
            ("tokenize_per_token_s", self.tokenize_per_token_s),
            ("bootstrap_handshake_s", self.bootstrap_handshake_s),
            ("first_token_path_s", self.first_token_path_s),
            ("decode_cpu_s", self.decode_cpu_s),
            ("decode_cpu_per_seq_s", self.decode_cpu_per_seq_s),
            ("dp_attention_cpu_s", self.dp_attention_cpu_s),
            ("eager_launch_per_layer_s", self.eager_launch_per_layer_s),
            (
                "eager_launch_per_moe_layer_s",
                self.eager_launch_per_moe_layer_s,
            ),
        ];
        for (name, v) in times {
            // 1e3 s per step (or 1e9 tokens) is far beyond any GPU; it bounds the clock.
            let bound = if name.ends_with("_tokens") { 1e9 } else { 1e3 };
            if !(v.is_finite() && (0.0..=bound).contains(&v)) {
                return Err(format!("{name} must be in [0, {bound}], got {v}"));
            }
        }
        Ok(())
    }

    /// Whether any per-request serving cost is set (a calibration without them runs the
    /// request path exactly as before they existed).
    pub fn has_serving_costs(&self) -> bool {
        self.tokenize_per_request_s > 0.0
            || self.tokenize_per_token_s > 0.0
            || self.bootstrap_handshake_s > 0.0
            || self.first_token_path_s > 0.0
    }

    /// Tokenizer-manager time for one request of `input_tokens`, seconds.
    pub fn tokenize_s(&self, input_tokens: u32) -> f64 {
        self.tokenize_per_request_s + self.tokenize_per_token_s * f64::from(input_tokens)
    }
}

/// Names of the built-in calibrations; the first is the default.
pub const CALIBRATIONS: &[&str] = &["sglang-2026", "sglang-2025", "vllm-2023"];

/// The default calibration's name.
pub const DEFAULT_CALIBRATION: &str = "sglang-2026";

/// sglang 0.5 (2026): the step composed from NVIDIA's measured sglang kernel tables on every
/// GPU AIConfigurator measured (`kernels/`, `compute::kernels`), the roofline elsewhere with
/// efficiencies derived from those GPUs by their balance of FLOPs to bytes
/// (`spec::kernels::balance`); host work that overlaps the GPU's (CUDA graphs, the overlap
/// scheduler) priced as a floor, not a sum. The efficiencies here are placeholders that
/// [`sglang_2026`] replaces per GPU; the host costs are this calibration's own (each with its
/// source below).
pub const SGLANG_2026: ComputeParams = ComputeParams {
    // Placeholders: [`sglang_2026`] sets the four efficiencies from the GPU's balance
    // (`spec::kernels::balance`, fitted over the eight tabled GPUs); under kernel tables they
    // price only what no table covers.
    prefill_flops_efficiency: 0.7,
    prefill_mfu_half_tokens: 0.0,
    decode_flops_efficiency: 0.7,
    hbm_efficiency: 0.7,
    kv_hbm_efficiency: 0.86,
    // Assumed: the preparation of a prefill batch the overlap scheduler does not hide (input
    // copies, the radix match's result), 1 ms, and ~50 µs per request in it (sampling the
    // first token, its output); no public row separates them from the measured kernels.
    prefill_overhead_s: 1.0e-3,
    prefill_per_seq_overhead_s: 5.0e-5,
    // Fitted: sglang PR #1401's Llama-3-8B H100 batch-1 decode step under CUDA graphs
    // (7.06 ms) less the measured kernels' 6.46 ms: the step's exposed host work, 0.60 ms
    // (`compute::modern`, in-sample; the same PR's flashinfer row is held out).
    decode_overhead_s: 6.0e-4,
    // With the overlap scheduler the per-request work (output streaming, sampling) runs
    // beside the next forward: in `decode_cpu_per_seq_s`, not here.
    decode_per_seq_overhead_s: 0.0,
    allreduce_step_latency_s: 5.31e-6,
    allreduce_log_steps: true,
    nvlink_efficiency: 0.8,
    launch_per_block_s: 0.0,
    // Borrowed from `sglang-2025` (mini-sglang PR #55; HF tokenizers' single-core rate).
    tokenize_per_request_s: 1.0e-4,
    tokenize_per_token_s: 1.1e-6,
    // Borrowed from `sglang-2025`: one ZMQ round trip plus Python handling on both ends.
    bootstrap_handshake_s: 5.0e-4,
    // Borrowed from `sglang-2025`'s fit to the four median-TTFT rows of sglang's
    // `benchmark_vllm_060/README.md`; under this calibration those rows land within
    // `tests/fidelity/colocated_rows.rs`'s bounds without a refit (each printed there).
    first_token_path_s: 6.9e-3,
    // Assumed: one scheduler iteration's CPU (batch assembly, the overlap thread's bookkeeping,
    // detokenizer hand-off), 1 ms, and 30 µs per running request; hidden behind the GPU's
    // step (a floor) — it binds only small models at small batches. sglang's per-step CPU
    // time vs batch is not published (docs/performance-model.md, "still missing").
    decode_cpu_s: 1.0e-3,
    decode_cpu_per_seq_s: 3.0e-5,
    // Fitted: LMSYS 2025-07-17 ("Accelerating SGLang with Multiple Token Prediction"): a
    // DeepSeek-V3 decode over two H200 nodes (DP attention 16, EP16 over DeepEP), 2 requests
    // per rank at 64K/4K, made 51 output tok/s per rank without the overlap scheduler and 60.4
    // with it — 39.22 against 33.11 ms a step, 6.11 ms of scheduler work the overlap hides, of
    // which `decode_cpu_s` and the two requests' 60 µs price 1.06 ms. The rest, 5.05 ms, is put
    // on the DP ranks' per-iteration synchronisation [INFERRED: the post does not split it].
    // Held out: the same post's MTP row, whose engine (July 2025) turned the overlap off for
    // speculative decoding (docs/performance-model.md §7.7).
    dp_attention_cpu_s: 5.05e-3,
    // Fitted: PR #1401's same decode step without CUDA graphs (8.23 ms): the host launches
    // every kernel, so the CPU binds — (8.23 − 0.60 − 1.03) ms over 32 layers, 0.206 ms per
    // layer (~15 launches of ~14 µs). Paid by prefill forwards and decode batches above
    // `cuda_graph_max_bs`, as a floor.
    eager_launch_per_layer_s: 2.06e-4,
    // Fitted: the same PR's DeepSeek-Coder-V2-Lite decode step at batch 1 (H100, triton
    // attention, `--enable-mla`): 6.22 ms with CUDA graphs, "4x faster" than without, so
    // ~24.9 ms eager, all of it host: (24.88 − 0.60 − 1.03 − 0.206) ms over its 26 MoE
    // layers (its first layer is dense) = 0.886 ms a MoE layer, ~4.3× a dense Llama layer.
    // Its layers are MLA, so the rate holds MLA's extra launches too; a GQA MoE layer
    // launches somewhat fewer [borrowed from MLA]. Held out against it: Mooncake's sglang PD
    // table on H20-3e (Qwen3-235B, chunked prefill off, so every prefill eager), whose
    // short prompts' TTFT is flat at ~125–130 ms (`tests/fidelity/h20_pd_ttft.rs`).
    eager_launch_per_moe_layer_s: 8.86e-4,
    // sgl-model-gateway's PD router (`pd_router.rs::execute_dual_dispatch_internal`) joins the
    // prefill's response before streaming decode's (sglang issue #22853; PRs #22856 and
    // #24812 that would stop it closed unmerged).
    pd_prefill_response_holdback: true,
    fp8_gemm_ratio: 1.0,
    // sglang's prefill attention runs at the KV cache's precision (the field's docs).
    attention_at_kv_precision: true,
    kernels: None,
};

/// [`SGLANG_2026`] for `gpu`: its shipped kernel tables where it has them, and in any case
/// the efficiencies its balance gives (what the roofline uses for the ops no table covers).
pub fn sglang_2026(gpu: &GpuSpec) -> ComputeParams {
    let e = super::kernels::balance::efficiencies(gpu);
    ComputeParams {
        prefill_flops_efficiency: e.prefill_flops,
        decode_flops_efficiency: e.decode_flops,
        hbm_efficiency: e.hbm,
        kv_hbm_efficiency: e.kv_hbm,
        fp8_gemm_ratio: e.fp8_gemm,
        kernels: super::kernels::builtin::tables(&gpu.name).map(super::kernels::Kernels),
        ..SGLANG_2026
    }
}

/// Today's sglang, one set for every GPU (efficiencies are fractions of each GPU's own peaks;
/// host costs do not scale with the GPU). Fitted by `compute::modern::tests::fit_sglang_2025`
/// (six free parameters, weak priors) to the six in-sample rows of
/// `calibration/modern-engines.md` (A100 and H100, TP1 and TP4): all within 6 %; each row's
/// error is printed by `compute::modern::tests::sglang_2025_matches_modern_engines`.
pub const SGLANG_2025: ComputeParams = ComputeParams {
    // Fitted: the 8B H100 prefill row (27,670 input tok/s in ~8k-token forwards; the run also
    // decoded, so this MFU ceiling is conservative). Refitted with the ramp below at 0: the
    // MFU at 8,192 tokens is unchanged (0.444 × 8192/8576 before).
    prefill_flops_efficiency: 0.4241,
    // Fitted to the median TTFT rows of sglang's `benchmark_vllm_060/README.md` (ShareGPT,
    // ~215-token prompts): with a ramp (384 was assumed before) a 215-token prefill ran at a
    // sixth of the ceiling and TTFT came out 2.2× the published 31.98 ms; the roofline's
    // memory bound already prices small forwards, and 0 fits best (docs/performance-model.md §2, TTFT table).
    prefill_mfu_half_tokens: 0.0,
    // Assumed: no public decode row is compute-bound (the offline-throughput estimates are the
    // only ones that reach it); 0.55 of peak.
    decode_flops_efficiency: 0.55,
    // Fitted: 8B on H100 at batch 1 (7.06 ms, sglang PR #1401) with the median ITL rows.
    hbm_efficiency: 0.678,
    // Fitted: the ITL rows' growth with batch (paged attention over ~300-token contexts).
    kv_hbm_efficiency: 0.563,
    // Assumed: the one public prefill row cannot separate a fixed cost from MFU; 2 ms of
    // preparation per forward that the overlapped scheduler does not hide.
    prefill_overhead_s: 2.0e-3,
    // Assumed: ~50 µs per request in a forward (input copy, radix match, first-token
    // sampling); not separable in the public rows.
    prefill_per_seq_overhead_s: 5.0e-5,
    // Fitted: the 8B H100 batch-1 row together with hbm_efficiency.
    decode_overhead_s: 4.60e-4,
    // Fitted: the growth of median ITL with load (4 → 8 req/s) on A100 TP1 and H100 TP4 —
    // output streaming and sampling per sequence, far below the 2023 fit's 0.29 ms.
    decode_per_seq_overhead_s: 9.43e-5,
    // Fitted: 70B H100 TP4 ITL rows (TP1 rows have no all-reduce): 21 µs per all-reduce at
    // TP4, 32 µs at TP8.
    allreduce_step_latency_s: 5.31e-6,
    // sglang's custom all-reduce (`custom_all_reduce.cuh`): one-shot below 512 KB, two-shot
    // above; its latency grows far slower than a ring's with TP.
    allreduce_log_steps: true,
    // Borrowed: nccl-tests all-reduce bus bandwidth on 8 × H100 NVLink is commonly reported at
    // ~360 GB/s or more of 450 GB/s one-way for large messages; 0.8.
    nvlink_efficiency: 0.8,
    // CUDA graphs replay a decode step as one launch: no per-block floor.
    launch_per_block_s: 0.0,
    // Borrowed: a Python call into the HF fast tokenizer costs ~130 µs per short prompt
    // (sgl-project/mini-sglang PR #55: sequential encode, batch 1, 13.0 ms per 100 prompts);
    // 100 µs fixed plus the per-token rate below.
    tokenize_per_request_s: 1.0e-4,
    // Borrowed: HF tokenizers encode ~1M tokens (4 MB) in 1.1 s on one core ("3.3x Faster
    // HuggingFace Tokenizers for Single Sequence", charlesxu.io/parallel-tokenizer).
    tokenize_per_token_s: 1.1e-6,
    // Set by hand (no public row isolates it): one ZMQ round trip between the decode's KV
    // receiver and the prefill's bootstrap thread plus Python handling on both ends, ~0.5 ms
    // (sglang `disaggregation/decode.py` DecodePreallocQueue, `common/conn.py`).
    bootstrap_handshake_s: 5.0e-4,
    // Fitted (least squares in log, one constant for four rows): the residual of the four
    // median-TTFT rows of `benchmark_vllm_060/README.md` (31.98 / 35.68 ms 8B A100, 53.94 /
    // 58.11 ms 70B H100 TP4) once the forward, the wait for the running step and the
    // tokenizer are priced; errors +3.8 / +10.1 / −11.4 / −5.1 %
    // (`tests/fidelity/colocated_rows.rs` prints them). It holds everything per request those rows
    // cannot separate: detokenizer, tokenizer manager and HTTP/SSE through sglang 0.3.0's Python
    // path, and bench_serving's own aiohttp client.
    first_token_path_s: 6.9e-3,
    // The roofline calibrations price host costs serially (above): no overlap floor.
    decode_cpu_s: 0.0,
    decode_cpu_per_seq_s: 0.0,
    dp_attention_cpu_s: 0.0,
    eager_launch_per_layer_s: 0.0,
    eager_launch_per_moe_layer_s: 0.0,
    pd_prefill_response_holdback: false,
    fp8_gemm_ratio: 1.0,
    attention_at_kv_precision: false,
    kernels: None,
};

/// vLLM 2023, A100-80GB SXM fit. Source: `calibration/perf_model.csv`, rows `a100-80gb` (76
/// points: Llama2-70B TP2/4/8, BLOOM-176B TP8), fitted by `compute::vllm2023::fit_to_perf_model`;
/// median absolute error 5.4 % (prompt) and 1.4 % (token). `decode_flops_efficiency` is not
/// identifiable (no measured decode step is compute-bound at batch ≤ 64) and is tied to the
/// prefill one; KV reads share the weights' HBM efficiency (one `hbm_efficiency` was fitted).
pub const VLLM_2023_A100: ComputeParams = ComputeParams {
    prefill_flops_efficiency: 0.690,
    prefill_mfu_half_tokens: 0.0,
    decode_flops_efficiency: 0.690,
    hbm_efficiency: 0.650,
    kv_hbm_efficiency: 0.650,
    prefill_overhead_s: 9.844e-3,
    prefill_per_seq_overhead_s: 0.0,
    decode_overhead_s: 5.635e-3,
    decode_per_seq_overhead_s: 3.013e-4,
    allreduce_step_latency_s: 4.701e-6,
    allreduce_log_steps: false,
    nvlink_efficiency: 0.217,
    launch_per_block_s: 2.430e-4,
    // The 2023 fit priced no serving cost outside the forward: 0 keeps its numbers.
    tokenize_per_request_s: 0.0,
    tokenize_per_token_s: 0.0,
    bootstrap_handshake_s: 0.0,
    first_token_path_s: 0.0,
    decode_cpu_s: 0.0,
    decode_cpu_per_seq_s: 0.0,
    dp_attention_cpu_s: 0.0,
    eager_launch_per_layer_s: 0.0,
    eager_launch_per_moe_layer_s: 0.0,
    pd_prefill_response_holdback: false,
    fp8_gemm_ratio: 1.0,
    attention_at_kv_precision: false,
    kernels: None,
};

/// vLLM 2023, H100-80GB SXM fit. Source: `calibration/perf_model.csv`, rows `h100-80gb` (76
/// points; `h100-80gb-pcap`, power-capped, excluded); median absolute error 8.4 % (prompt) and
/// 1.6 % (token). Used for H200 and B200 as well (efficiencies scale with their peaks; the
/// host- and latency-bound overheads do not).
pub const VLLM_2023_H100: ComputeParams = ComputeParams {
    prefill_flops_efficiency: 0.566,
    prefill_mfu_half_tokens: 0.0,
    decode_flops_efficiency: 0.566,
    hbm_efficiency: 0.614,
    kv_hbm_efficiency: 0.614,
    prefill_overhead_s: 6.654e-3,
    prefill_per_seq_overhead_s: 0.0,
    decode_overhead_s: 1.507e-3,
    decode_per_seq_overhead_s: 2.896e-4,
    allreduce_step_latency_s: 6.119e-6,
    allreduce_log_steps: false,
    nvlink_efficiency: 0.254,
    launch_per_block_s: 1.752e-4,
    // The 2023 fit priced no serving cost outside the forward: 0 keeps its numbers.
    tokenize_per_request_s: 0.0,
    tokenize_per_token_s: 0.0,
    bootstrap_handshake_s: 0.0,
    first_token_path_s: 0.0,
    decode_cpu_s: 0.0,
    decode_cpu_per_seq_s: 0.0,
    dp_attention_cpu_s: 0.0,
    eager_launch_per_layer_s: 0.0,
    eager_launch_per_moe_layer_s: 0.0,
    pd_prefill_response_holdback: false,
    fp8_gemm_ratio: 1.0,
    attention_at_kv_precision: false,
    kernels: None,
};

/// `sglang-2025` on an A100. An A100 reaches a larger share of its datasheet FLOP/s than an
/// H100 (which power and clock limits hold further below its peak under full tensor load): the
/// same engine measured on both GPUs (`calibration/perf_model.csv`, the vLLM 2023 fits above)
/// reached 0.690 of peak on A100 against 0.566 on H100. `sglang-2025`'s FLOP efficiencies were
/// fitted on H100 rows, so on an A100 they are scaled by that ratio (×1.219); bandwidth and host
/// costs are unchanged. Checked by the A100 rows of `tests/fidelity/colocated_rows.rs` (TTFT, ITL
/// and the offline throughput, which was −32 % without it: pure compute at the H100 share would
/// take longer than sglang's whole measured run).
pub fn sglang_2025_a100() -> ComputeParams {
    let k = VLLM_2023_A100.prefill_flops_efficiency / VLLM_2023_H100.prefill_flops_efficiency;
    ComputeParams {
        prefill_flops_efficiency: (SGLANG_2025.prefill_flops_efficiency * k).min(1.0),
        decode_flops_efficiency: (SGLANG_2025.decode_flops_efficiency * k).min(1.0),
        ..SGLANG_2025
    }
}

/// The parameters of the named calibration `name` for `gpu`, or `None` for an unknown name.
pub fn named(name: &str, gpu: &GpuSpec) -> Option<ComputeParams> {
    match name {
        "sglang-2026" => Some(sglang_2026(gpu)),
        "sglang-2025" => Some(match gpu.name.as_str() {
            "a100-sxm" => sglang_2025_a100(),
            _ => SGLANG_2025,
        }),
        "vllm-2023" => Some(match gpu.name.as_str() {
            "a100-sxm" => VLLM_2023_A100,
            _ => VLLM_2023_H100,
        }),
        _ => None,
    }
}

impl Default for ComputeParams {
    /// `sglang-2025`'s parameters: the roofline calibration a model is checked against when
    /// no GPU is named (the default calibration, `sglang-2026`, depends on the GPU:
    /// [`named`]).
    fn default() -> Self {
        SGLANG_2025
    }
}

/// What a run's step times come from, in one line for `run.json` and reports: the measured
/// kernel tables with their provenance, or the roofline with the calibration's name.
pub fn describe(name: &str, params: &ComputeParams, gpu: &GpuSpec) -> String {
    match &params.kernels {
        Some(k) => {
            let t = k.tables();
            let versions: Vec<String> = t
                .versions()
                .into_iter()
                .map(|(v, names)| format!("{} at sglang {v}", names.join(", ")))
                .collect();
            format!(
                "{name}: measured kernels for {} ({}): {}; from {}",
                t.meta.gpu,
                t.meta.device,
                versions.join("; "),
                t.meta.source
            )
        }
        None if name == "sglang-2026" => format!(
            "{name}: roofline on {} (no kernel tables for it), efficiencies from its balance of {:.0} FLOP/B: prefill {:.3}, decode {:.3}, weights {:.3}, KV {:.3} of peak",
            gpu.name,
            super::kernels::balance::balance(gpu),
            params.prefill_flops_efficiency,
            params.decode_flops_efficiency,
            params.hbm_efficiency,
            params.kv_hbm_efficiency
        ),
        None => format!("{name}: roofline"),
    }
}

/// A calibration file written by `pdsim calibrate` and read by `hardware.calibration`:
/// what it was measured on (for the reader; a scenario may use it on another GPU, since the
/// efficiencies are fractions of that GPU's peaks) and the fitted parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationFile {
    /// What was measured.
    pub measured: MeasuredOn,
    /// The fitted parameters.
    pub params: ComputeParams,
}

/// Where a calibration file's measurements come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredOn {
    /// Model preset or config path given to `pdsim calibrate`.
    pub model: String,
    /// GPU preset.
    pub gpu: String,
    /// GPUs per instance.
    pub tp: u32,
    /// Measurement files, as given.
    pub files: Vec<String>,
    /// Measurements fitted.
    pub points: u32,
    /// The smallest and largest prefill forward measured, new tokens (absent in files written
    /// before the planner asked; then nothing is known of the range).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens: Option<[u32; 2]>,
    /// The smallest and largest decode batch measured, sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_batch: Option<[u32; 2]>,
}

impl CalibrationFile {
    /// Parses a calibration file's TOML; the error names the key at fault.
    pub fn parse(text: &str) -> Result<Self, String> {
        let de = toml::Deserializer::parse(text).map_err(|e| e.message().to_string())?;
        let file: Self = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let msg = inner.message().to_string();
            if path.is_empty() || path == "." {
                msg
            } else {
                format!("{path}: {msg}")
            }
        })?;
        file.params.validate().map_err(|e| format!("params.{e}"))?;
        Ok(file)
    }

    /// The file's text: a header comment and TOML.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).expect("a calibration serializes");
        format!(
            "# pdsim step-time calibration, written by `pdsim calibrate`.\n\
             # Use it with `hardware.calibration = \"<this file>\"` in a scenario.\n\
             # Efficiencies are fractions of the GPU's peaks; times are seconds.\n\n{body}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::gpu_preset;

    #[test]
    fn the_fp8_gemm_ratio_is_checked_and_defaults_to_one() {
        for bad in [0.0, -1.0, 2.5, f64::NAN] {
            let p = ComputeParams {
                fp8_gemm_ratio: bad,
                ..SGLANG_2025
            };
            let e = p.validate().expect_err("out of range");
            assert!(e.contains("fp8_gemm_ratio must be in (0, 2]"), "{e}");
        }
        // A calibration file without the key keeps the datasheet's FP8 peak.
        let text = toml::to_string(&SGLANG_2025).unwrap();
        assert!(text.contains("fp8_gemm_ratio"));
        let without: String = text
            .lines()
            .filter(|l| !l.starts_with("fp8_gemm_ratio"))
            .map(|l| format!("{l}\n"))
            .collect();
        let p: ComputeParams = toml::from_str(&without).unwrap();
        assert_eq!(p.fp8_gemm_ratio, 1.0);
    }

    #[test]
    fn named_calibrations_and_their_gpu_rule() {
        let g = |n: &str| gpu_preset(n).unwrap();
        for gpu in ["h100-sxm", "h200", "b200"] {
            assert_eq!(named("sglang-2025", &g(gpu)), Some(SGLANG_2025));
        }
        // On A100 only the FLOP efficiencies move, by the A100/H100 ratio of the 2023 fits.
        let a100 = named("sglang-2025", &g("a100-sxm")).unwrap();
        assert!(
            (a100.prefill_flops_efficiency / SGLANG_2025.prefill_flops_efficiency - 1.219).abs()
                < 1e-3
        );
        assert_eq!(
            ComputeParams {
                prefill_flops_efficiency: SGLANG_2025.prefill_flops_efficiency,
                decode_flops_efficiency: SGLANG_2025.decode_flops_efficiency,
                ..a100.clone()
            },
            SGLANG_2025
        );
        a100.validate().unwrap();
        assert_eq!(named("vllm-2023", &g("a100-sxm")), Some(VLLM_2023_A100));
        for gpu in ["h100-sxm", "h200", "b200"] {
            assert_eq!(named("vllm-2023", &g(gpu)), Some(VLLM_2023_H100));
        }
        assert_eq!(named("sglang-2024", &g("h100-sxm")), None);
        assert_eq!(ComputeParams::default(), SGLANG_2025);
        for p in [SGLANG_2025, VLLM_2023_A100, VLLM_2023_H100] {
            p.validate().unwrap();
        }
        assert_eq!(CALIBRATIONS[0], DEFAULT_CALIBRATION);
    }

    #[test]
    fn calibration_files_round_trip_and_name_bad_keys() {
        let f = CalibrationFile {
            measured: MeasuredOn {
                model: "llama-3.1-8b".into(),
                gpu: "h100-sxm".into(),
                tp: 1,
                files: vec!["a.csv".into()],
                points: 12,
                prefill_tokens: None,
                decode_batch: None,
            },
            params: SGLANG_2025,
        };
        let text = f.to_toml();
        assert_eq!(CalibrationFile::parse(&text).unwrap(), f);
        let bad = text.replace("hbm_efficiency = 0.678", "hbm_efficiency = 1.7");
        let e = CalibrationFile::parse(&bad).unwrap_err();
        assert!(e.contains("params.hbm_efficiency"), "{e}");
        let typo = text.replace("decode_overhead_s", "decode_overhead");
        let e = CalibrationFile::parse(&typo).unwrap_err();
        assert!(e.contains("decode_overhead"), "{e}");
        // The attention's precision: a flag, named when it is not one; a file written before
        // it keeps one peak.
        let key = "attention_at_kv_precision = false";
        assert!(text.contains(key), "{text}");
        let wrong = text.replace(key, "attention_at_kv_precision = \"bf16\"");
        let e = CalibrationFile::parse(&wrong).unwrap_err();
        assert!(e.contains("params.attention_at_kv_precision"), "{e}");
        let before = CalibrationFile::parse(&text.replace(key, "")).unwrap();
        assert!(!before.params.attention_at_kv_precision);
    }
}
