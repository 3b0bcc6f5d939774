//! `[[pools]]`: each pool's server flags, model and parallelism checked and resolved into a
//! [`Pool`], then the checks across pools (KV room, PD or colocated).

use crate::config::{DEFAULT_STATE_SLOTS, MAX_UNIFIED_SLOTS, Pool, Role, limits};
use crate::scenario::file::{self, ScenarioFile};
use crate::scenario::{Checker, ScenarioError, divisors};
use crate::spec::{GpuSpec, ServerArgs, server};

use super::hicache::{decode_offload, hicache};

/// `[[pools]]`: every pool checked, prefill pools first.
pub(in crate::scenario) fn pools(
    c: &Checker,
    file: &ScenarioFile,
    gpu: &GpuSpec,
    domain_gpus: u32,
) -> Result<Vec<Pool>, ScenarioError> {
    let default_model = match &file.model {
        Some(r) => Some(c.model("model", r)?),
        None => None,
    };
    let mut pools = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for p in &file.pools {
        let key = format!("pools.{}", p.name);
        if p.name.is_empty() {
            return Err(c.err("pools", "every pool needs a non-empty name"));
        }
        if seen.contains(&p.name.as_str()) {
            return Err(c.err(
                &key,
                format!(
                    "duplicate pool name {:?}; pool names must be unique",
                    p.name
                ),
            ));
        }
        seen.push(&p.name);
        pools.push(pool(
            c,
            p,
            &key,
            default_model.as_ref(),
            gpu,
            (file.hardware.gpus_per_node, domain_gpus),
        )?);
    }
    for p in pools
        .iter_mut()
        .filter(|p| p.server.enable_unified_memory && p.state_slots > 0)
    {
        // One shared pool: slots and pages compete for the same bytes (`docs/sglang-pd.md` §1.6).
        p.state_slots = crate::config::capacity::unified_slots(gpu, p, MAX_UNIFIED_SLOTS);
    }
    for p in &pools {
        if crate::config::capacity::kv_pages(gpu, p) == 0 {
            let key = format!("pools.{}.server.mem_fraction_static", p.name);
            return Err(c.err(
                &key,
                format!(
                    "leaves no room for KV cache: {:.2} GB per GPU after weights ({:.2} GB at tp_size {}) and activations; raise mem_fraction_static or tp_size",
                    crate::config::capacity::kv_budget_bytes(gpu, p).max(0.0) / 1e9,
                    crate::config::capacity::weight_bytes_per_gpu(&p.model, &p.server, &p.parallel) / 1e9,
                    p.server.tp_size
                ),
            ));
        }
    }
    let colocated = pools.iter().find(|p| p.role == Role::Colocated);
    let pd = pools.iter().find(|p| p.role != Role::Colocated);
    if let (Some(co), Some(other)) = (colocated, pd) {
        // A colocated server is the baseline a PD cluster is compared with, not a part of one:
        // the router of a PD cluster picks a (prefill, decode) pair, a plain server's picks one.
        return Err(c.err(
            &format!("pools.{}.role", co.name),
            format!(
                "a scenario is either a PD cluster (prefill and decode pools) or colocated servers (only role = \"colocated\" pools); pool {:?} is {} — compare the two with `pdsim sweep --vary` over two scenarios' pools",
                other.name,
                other.role.as_str()
            ),
        ));
    }
    if colocated.is_none() {
        for role in [Role::Prefill, Role::Decode] {
            if !pools.iter().any(|p| p.role == role) {
                return Err(c.err(
                    "pools",
                    format!(
                        "no {} pool: a PD cluster needs at least one [[pools]] with role = \"prefill\" and one with role = \"decode\" (or use only role = \"colocated\" pools for plain sglang servers)",
                        role.as_str()
                    ),
                ));
            }
        }
    }
    pools.sort_by_key(|p| p.role);
    Ok(pools)
}

/// `pools.<name>.server.disable_overlap_schedule` where it can change something: the step
/// model hides the decode scheduling's host work only under a calibration that prices it
/// apart (`decode_cpu_s`, `decode_cpu_per_seq_s`: `sglang-2026`); the serial calibrations
/// fitted their host costs with the overlap as it ran, and a measured profile already holds
/// the engine's host time. Refused there rather than ignored.
pub(in crate::scenario) fn overlap_schedule(
    c: &Checker,
    pools: &[Pool],
    calibration: &str,
    compute: &crate::spec::ComputeParams,
) -> Result<(), ScenarioError> {
    for p in pools.iter().filter(|p| !p.overlap_schedule) {
        let key = format!("pools.{}.server.disable_overlap_schedule", p.name);
        if p.step_times.is_some() {
            return Err(c.err(
                &key,
                "pools.step_times is a measured profile, whose step times already hold the host work the engine ran with: measure the profile with --disable-overlap-schedule instead, and leave the key out here",
            ));
        }
        if compute.decode_cpu_s == 0.0 && compute.decode_cpu_per_seq_s == 0.0 {
            return Err(c.err(
                &key,
                format!(
                    "hardware.calibration {calibration:?} prices the host's work serially (decode_cpu_s = decode_cpu_per_seq_s = 0: its per-step costs were fitted with the overlap scheduler as it ran), so there is no hidden scheduling work to expose; use calibration \"sglang-2026\" (or a file with decode_cpu_s set) for this flag, or leave it out"
                ),
            ));
        }
    }
    Ok(())
}

/// One `[[pools]]` entry, its key `key` (`pools.<name>`).
fn pool(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    default_model: Option<&crate::spec::ModelSpec>,
    gpu: &GpuSpec,
    (gpus_per_node, domain_gpus): (u32, u32),
) -> Result<Pool, ScenarioError> {
    check_shape(c, p, key, gpus_per_node)?;
    let s = &p.server;
    // Attention groups and expert parallelism without an all-to-all backend stay inside one
    // NVLink domain (a node, or an NVL72 rack of trays).
    let parallel = crate::scenario::parallel::check(c, key, s, domain_gpus)?;
    crate::scenario::parallel::check_role(c, key, &parallel.args, p.role)?;
    let attn_tp = parallel.attn_tp;
    let parallel = parallel.args;
    check_server_limits(c, s, key)?;
    check_mixed_chunk(c, p, key)?;
    let (model, quantization) = model(c, p, key, default_model)?;
    crate::scenario::parallel::check_model(c, key, &parallel, &model)?;
    check_weights_on_gpu(c, p, key, &model, gpu)?;
    let (speculative, spec_notes) =
        match crate::scenario::speculative::server_args(c, p, key, &model)? {
            Some((a, n)) => (Some(a), n),
            None => (None, Vec::new()),
        };
    let server = ServerArgs {
        tp_size: s.tp_size,
        attn_tp_size: attn_tp,
        page_size: s.page_size,
        kv_cache_dtype: s.kv_cache_dtype.clone(),
        enable_unified_memory: s.enable_unified_memory,
        chunked_prefill_size: s.chunked_prefill_size,
        max_prefill_tokens: s.max_prefill_tokens,
        mem_fraction_static: s.mem_fraction_static,
        // sglang: "Max running requests is reset to 48 for speculative decoding".
        max_running_requests: s.max_running_requests.or(speculative.as_ref().map(|_| 48)),
        radix_cache: (!s.disable_radix_cache).then_some(s.radix_cache_tokens),
        quantization,
        speculative,
        mamba_ssm_dtype: s.mamba_ssm_dtype.clone(),
        pp_size: s.pp_size,
        pp_async_batch_depth: s.pp_async_batch_depth,
        dcp_size: s.dcp_size,
    };
    super::pipeline::check(c, p, key, (&model, &server, &parallel))?;
    super::dcp::check(c, p, key, (&model, &server, &parallel))?;
    let kv_dtype_bytes = server
        .kv_dtype_bytes(model.activation_bytes)
        .ok_or_else(|| {
            c.err(
                &format!("{key}.server.kv_cache_dtype"),
                match server::unmodelled_kv_dtype(&s.kv_cache_dtype) {
                    Some(why) => format!(
                        "{:?}: {why}; valid: {}",
                        s.kv_cache_dtype,
                        server::KV_CACHE_DTYPES.join(", ")
                    ),
                    None => format!(
                        "unknown KV cache dtype {:?}; valid: {}",
                        s.kv_cache_dtype,
                        server::KV_CACHE_DTYPES.join(", ")
                    ),
                },
            )
        })?;
    if server::is_fp4_kv(&server.kv_cache_dtype) {
        fp4_kv_check(c, p, key, (&model, &server), gpu)?;
    }
    let offload = super::offload::offload(c, p, key, (&model, &server, &parallel), gpu)?;
    check_weights_fit(c, key, (&model, &server, &parallel), offload.as_ref(), gpu)?;
    let layouts = crate::layout::RankLayout::all_ranks(&model, &server)
        .map_err(|e| c.err(&format!("{key}.server"), e.to_string()))?;
    let state_slots = if model.is_hybrid() {
        server.max_running_requests.unwrap_or(DEFAULT_STATE_SLOTS)
    } else {
        0
    };
    let step_times = match &p.step_times {
        Some(path) => Some(std::sync::Arc::new(step_times(c, key, path)?)),
        None => None,
    };
    let mut pool = Pool {
        name: p.name.clone(),
        role: p.role,
        instances: p.instances,
        server,
        model,
        kv_dtype_bytes,
        step_times,
        layout: std::sync::Arc::new(layouts),
        state_slots,
        node: p.node,
        gpu: p.gpu.unwrap_or(0),
        kv_allocator: p
            .kv_allocator
            .unwrap_or(crate::config::KvAllocator::default_for(p.role)),
        num_reserved_decode_tokens: s.num_reserved_decode_tokens,
        decode_extra_slots: s.disaggregation_decode_extra_slots,
        enable_mixed_chunk: s.enable_mixed_chunk,
        overlap_schedule: !s.disable_overlap_schedule,
        parallel,
        hicache: None,
        decode_offload: None,
        speculative: None,
        offload,
        decode_radix: false,
    };
    pool.hicache = hicache(c, p, key, &pool, gpu)?;
    pool.decode_offload = decode_offload(c, p, key, &pool, gpu)?;
    pool.speculative = crate::scenario::speculative::params(c, p, key, &pool, spec_notes)?;
    pool.decode_radix = super::hicache::decode_radix(c, p, key, &pool)?;
    Ok(pool)
}

/// The pool's size on the GPUs: at least one instance, and a `tp_size` that packs whole
/// instances into a node or spans whole nodes (checked before the parallel flags, which
/// divide it).
fn check_shape(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    gpus_per_node: u32,
) -> Result<(), ScenarioError> {
    if p.instances == 0 {
        return Err(c.err(&format!("{key}.instances"), "must be ≥ 1"));
    }
    let s = &p.server;
    if s.tp_size == 0
        || !(gpus_per_node.is_multiple_of(s.tp_size) || s.tp_size.is_multiple_of(gpus_per_node))
    {
        return Err(c.err(
            &format!("{key}.server.tp_size"),
            format!(
                "{} neither divides hardware.gpus_per_node = {} nor is a multiple of it (an instance spans whole nodes); use one of {} or a multiple of {}",
                s.tp_size,
                gpus_per_node,
                divisors(gpus_per_node),
                gpus_per_node
            ),
        ));
    }
    super::pipeline::check_shape(c, p, key, gpus_per_node)
}

/// The server's scheduling and memory flags in range: page size, prefill token budgets,
/// `mem_fraction_static`, the radix cache's size, running requests and reserved decode
/// tokens.
/// `enable_mixed_chunk` (sglang's `--enable-mixed-chunk`) is a colocated server's: it mixes
/// the running decode batch into the forward of a prefill chunk. A PD prefill server has no
/// decode batch to mix (its batches are prefill only) and a PD decode server forms no prefill
/// batch, so on their pools the flag would change nothing: refused rather than ignored.
fn check_mixed_chunk(c: &Checker, p: &file::PoolSection, key: &str) -> Result<(), ScenarioError> {
    check_extra_slots(c, p, key)?;
    if p.server.enable_mixed_chunk && p.role != Role::Colocated {
        return Err(c.err(
            &format!("{key}.server.enable_mixed_chunk"),
            format!(
                "applies to role = \"colocated\" pools only (pool {:?} is {}): a PD {} server never has both a decode batch and a prefill batch to mix; leave it out (false) here",
                p.name,
                p.role.as_str(),
                p.role.as_str()
            ),
        ));
    }
    Ok(())
}

/// `disaggregation_decode_extra_slots` sizes a decode worker's request rows
/// (`DecodeReqToTokenPool`): a prefill or colocated server has none to size, so the key is
/// refused there rather than ignored, and a count is bounded.
fn check_extra_slots(c: &Checker, p: &file::PoolSection, key: &str) -> Result<(), ScenarioError> {
    let Some(n) = p.server.disaggregation_decode_extra_slots else {
        return Ok(());
    };
    let k = format!("{key}.server.disaggregation_decode_extra_slots");
    if p.role != Role::Decode {
        return Err(c.err(
            &k,
            format!(
                "applies to role = \"decode\" pools only (pool {:?} is {}): it adds request rows for the requests a decode worker preallocates or receives; leave it out here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if n > limits::MAX_DECODE_EXTRA_SLOTS {
        return Err(c.err(
            &k,
            format!(
                "must be at most {} rows per decode worker (sglang's default is 0), got {n}",
                limits::MAX_DECODE_EXTRA_SLOTS
            ),
        ));
    }
    Ok(())
}

fn check_server_limits(
    c: &Checker,
    s: &file::ServerSection,
    key: &str,
) -> Result<(), ScenarioError> {
    let k = |f: &str| format!("{key}.server.{f}");
    crate::spec::server::check_page_size(s.page_size).map_err(|m| c.err(&k("page_size"), m))?;
    if s.max_prefill_tokens == 0 {
        return Err(c.err(&k("max_prefill_tokens"), "must be ≥ 1 token, e.g. 16384"));
    }
    if s.chunked_prefill_size == 0 {
        return Err(c.err(&k("chunked_prefill_size"), "must be ≥ 1 token, e.g. 8192"));
    }
    if !(s.mem_fraction_static > 0.0 && s.mem_fraction_static <= 1.0) {
        return Err(c.err(
            &k("mem_fraction_static"),
            format!("must be in (0, 1], got {}", s.mem_fraction_static),
        ));
    }
    if s.radix_cache_tokens == Some(0) {
        return Err(c.err(
            &k("radix_cache_tokens"),
            "must be ≥ 1 token; to turn the cache off set disable_radix_cache = true",
        ));
    }
    if s.max_running_requests == Some(0) {
        return Err(c.err(&k("max_running_requests"), "must be ≥ 1 (or left out)"));
    }
    if s.num_reserved_decode_tokens > limits::MAX_RESERVED_DECODE_TOKENS {
        return Err(c.err(
            &k("num_reserved_decode_tokens"),
            format!(
                "must be at most {} tokens (sglang's default is 512), got {}",
                limits::MAX_RESERVED_DECODE_TOKENS,
                s.num_reserved_decode_tokens
            ),
        ));
    }
    Ok(())
}

/// The model the pool serves (its own `model`, else the scenario's `[model]`) with the
/// server's `quantization` applied to it, and that quantization.
fn model(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    default_model: Option<&crate::spec::ModelSpec>,
) -> Result<(crate::spec::ModelSpec, Option<server::Quantization>), ScenarioError> {
    let mut model = match (&p.model, default_model) {
        (Some(r), _) => c.model(&format!("{key}.model"), r)?,
        (None, Some(m)) => m.clone(),
        (None, None) => {
            return Err(c.err(
                "model",
                format!(
                    "no [model] table and pool {:?} sets no model; add [model] preset = \"llama-3.1-8b\"",
                    p.name
                ),
            ));
        }
    };
    let quantization = match p.server.quantization.as_deref() {
        None => None,
        Some(q) => Some(server::Quantization::parse(q).ok_or_else(|| {
            c.err(
                &format!("{key}.server.quantization"),
                format!(
                    "{q:?} is not a quantization pdsim models; valid: {} (sglang's online FP8 \
                     weights, and an NVFP4 checkpoint from NVIDIA's ModelOpt on Blackwell). \
                     sglang's other --quantization methods (awq, gptq, marlin, bitsandbytes, \
                     gguf, modelopt_fp8, w8a8_int8, mxfp4, …) are not modelled; leave the key \
                     out to serve the checkpoint's own dtype{}",
                    server::QUANTIZATIONS.join(", "),
                    crate::vocab::suggest::suggestion(q, server::QUANTIZATIONS)
                ),
            )
        })?),
    };
    if let Some(q) = quantization {
        q.apply(&mut model);
    }
    if let Some(dt) = p.server.mamba_ssm_dtype.as_deref() {
        let k = format!("{key}.server.mamba_ssm_dtype");
        let valid: Vec<&str> = server::MAMBA_SSM_DTYPES.iter().map(|x| x.0).collect();
        let Some(bytes) = server::mamba_ssm_dtype_bytes(dt) else {
            return Err(c.err(
                &k,
                format!(
                    "{dt:?} is not a --mamba-ssm-dtype sglang takes; valid: {}{}",
                    valid.join(", "),
                    crate::vocab::suggest::suggestion(dt, &valid)
                ),
            ));
        };
        // sglang's flag sets the temporal (SSM) state's dtype of a mamba/GDN hybrid; a model
        // without such state has nothing for it to set.
        let Some(m) = model.mamba.as_mut() else {
            return Err(c.err(
                &k,
                format!(
                    "model {:?} has no mamba/linear-attention state for --mamba-ssm-dtype to set; leave the key out",
                    model.name
                ),
            ));
        };
        m.ssm_dtype_bytes = bytes;
    }
    Ok((model, quantization))
}

/// The GPU has tensor cores for every weight format the model is served in: NVFP4 needs FP4
/// (Blackwell), which sglang checks when it loads the checkpoint
/// (`ModelOptFp4Config.get_min_capability` returns 100: "compute capability 10.0"). The
/// error names the key that asked for FP4: the pool's `quantization`, else its model.
fn check_weights_on_gpu(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    model: &crate::spec::ModelSpec,
    gpu: &GpuSpec,
) -> Result<(), ScenarioError> {
    for d in model.weights.dtypes() {
        if gpu.gemm_tflops(d).is_some() {
            continue;
        }
        let k = if p.server.quantization.is_some() {
            format!("{key}.server.quantization")
        } else if p.model.is_some() {
            format!("{key}.model")
        } else {
            "model".to_string()
        };
        let blackwell: Vec<&str> = crate::spec::gpu::GPU_PRESETS
            .iter()
            .copied()
            .filter(|g| crate::spec::gpu_preset(g).is_some_and(|s| s.fp4_tflops.is_some()))
            .collect();
        return Err(c.err(
            &k,
            format!(
                "model {} is served with {} weights, whose GEMMs run on FP4 tensor cores, and {} has none (sglang refuses the checkpoint: ModelOptFp4Config needs compute capability 10.0, Blackwell); use a GPU with FP4 ({}), set hardware.fp4_tflops, or serve FP8 weights (quantization = \"fp8\")",
                model.name,
                d.name(),
                gpu.name,
                blackwell.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The server starts on this GPU: a unified pool has hybrid layers to share it with, and the
/// weights on one GPU (the draft's included) fit under `mem_fraction_static` of its HBM.
fn check_weights_fit(
    c: &Checker,
    key: &str,
    (model, server, parallel): (&crate::spec::ModelSpec, &ServerArgs, &server::Parallel),
    offload: Option<&crate::compute::offload::Offload>,
    gpu: &GpuSpec,
) -> Result<(), ScenarioError> {
    let k = |f: &str| format!("{key}.server.{f}");
    if server.enable_unified_memory && !model.is_hybrid() {
        return Err(c.err(
            &k("enable_unified_memory"),
            format!(
                "model {} has no hybrid (mamba/GDN/SWA) layers: sglang's unified pool needs at least two sub-pools, so the server would not start; set it to false",
                model.name
            ),
        ));
    }
    let mut per_gpu_weights =
        crate::config::capacity::weight_bytes_per_gpu(model, server, parallel);
    if let Some(spec) = &server.speculative {
        per_gpu_weights +=
            crate::config::capacity::draft_weight_bytes_per_gpu(model, spec, server, parallel);
    }
    // What offload keeps in host memory is not on the GPU (the copies in flight are).
    if let Some(o) = offload {
        per_gpu_weights -= o.bytes_per_forward() - o.transient_bytes();
    }
    let budget = gpu.hbm_bytes as f64 * server.mem_fraction_static;
    if per_gpu_weights >= budget {
        return Err(c.err(
            &k("tp_size"),
            format!(
                "model {} needs {:.1} GB of weights per GPU at tp_size = {} (dp_size {}, ep_size {}), more than {:.1} GB ({} HBM × mem_fraction_static {}); raise tp_size or ep_size, or offload weights to host memory (offload_group_size, cpu_offload_gb)",
                model.name,
                per_gpu_weights / 1e9,
                server.tp_size,
                parallel.dp_ranks(),
                parallel.ep_size,
                budget / 1e9,
                gpu.name,
                server.mem_fraction_static
            ),
        ));
    }
    Ok(())
}

/// `pools.<name>.step_times`: the scenario layer reads the file; `compute/` only parses text.
fn step_times(
    c: &Checker,
    key: &str,
    path: &str,
) -> Result<crate::compute::MeasuredProfile, ScenarioError> {
    use crate::compute::profile::{ProfileError, parse_profile};
    let path = c.resolve_path(path);
    std::fs::read_to_string(&path)
        .map_err(|source| ProfileError::Io {
            path: path.clone(),
            source,
        })
        .and_then(|text| parse_profile(&path, &text))
        .map_err(|e| c.err(&format!("{key}.step_times"), e.to_string()))
}

/// `--kv-cache-dtype fp4_e2m1` where pdsim models it (docs/sglang-pd.md §29): sglang documents
/// it for "CUDA 12.8+ and PyTorch 2.8.0+" (`server_args.py`, the flag's help), so a ROCm GPU
/// (the MI300X) is refused; and only on the plain pools whose FP4 classes pdsim read
/// (`MHATokenToKVPoolFP4`, `MLATokenToKVPoolFP4`). Hybrid models are refused (sglang's
/// `HybridLinearKVPool` builds the plain `MHATokenToKVPool` / `MLATokenToKVPool`, never the
/// FP4 ones), and so are the features whose FP4 buffers pdsim has not read: the speculative
/// draft's pool, pipeline stages, decode context parallelism and HiCache's host pool.
fn fp4_kv_check(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    (model, server): (&crate::spec::ModelSpec, &ServerArgs),
    gpu: &GpuSpec,
) -> Result<(), ScenarioError> {
    let k = format!("{key}.server.kv_cache_dtype");
    let refuse = |why: String| {
        Err(c.err(
            &k,
            format!("\"fp4_e2m1\": {why}; valid here: auto, bf16, bfloat16, fp8_e4m3, fp8_e5m2"),
        ))
    };
    if gpu.name == "mi300x" {
        return refuse(format!(
            "sglang's FP4 KV cache is documented for CUDA 12.8+ and PyTorch 2.8.0+ (server_args.py), and {} is a ROCm GPU",
            gpu.name
        ));
    }
    if model.is_hybrid() {
        return refuse(format!(
            "model {} has mamba or sliding-window layers, whose pool (HybridLinearKVPool, SWAKVPool) builds the plain MHATokenToKVPool / MLATokenToKVPool, not the FP4 classes pdsim models",
            model.name
        ));
    }
    let unmodelled = if server.speculative.is_some() {
        Some("speculative decoding (the draft's KV pool)")
    } else if server.pp_size > 1 {
        Some("--pp-size > 1")
    } else if server.dcp_size > 1 {
        Some("--dcp-size > 1")
    } else if p.server.enable_hierarchical_cache || p.server.hicache_size.is_some() {
        Some("HiCache (its host pool)")
    } else {
        None
    };
    match unmodelled {
        Some(what) => refuse(format!(
            "pdsim models sglang's FP4 KV pools (MHATokenToKVPoolFP4, MLATokenToKVPoolFP4) on their own, not with {what}, whose FP4 buffers it has not read"
        )),
        None => Ok(()),
    }
}
