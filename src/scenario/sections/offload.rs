//! `pools.<name>.server`'s weight-offload keys, sglang's flags: `cpu_offload_gb` (offloader
//! V1) and `offload_group_size`, `offload_num_in_group`, `offload_prefetch_step`,
//! `offload_mode` (V2, layer-wise with prefetch), checked as sglang's `create_offloader`
//! (`python/sglang/srt/utils/offloader.py`, commit 046a9e4) reads them, and turned into what
//! one GPU keeps in host memory (`compute::offload`).

use crate::compute::offload::{Offload, OffloadMode};
use crate::scenario::file;
use crate::scenario::{Checker, ScenarioError};
use crate::spec::{GpuSpec, ModelSpec, ServerArgs, server::Parallel};

/// The offload modes sglang's `--offload-mode` takes, and the one pdsim models.
const MODES: &[&str] = &["cpu", "shm_cpu", "sharded_gpu", "meta"];

/// Most layers a copy may be started ahead, and most layers of a group: far above any model's
/// layer count, low enough that nothing multiplies out of range.
const MAX_LAYERS: u32 = 4096;

/// The offload of pool `key` (`pools.<name>`), or `None` when neither `cpu_offload_gb` nor
/// `offload_group_size` turns it on.
pub(super) fn offload(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    (model, server, parallel): (&ModelSpec, &ServerArgs, &Parallel),
    gpu: &GpuSpec,
) -> Result<Option<Offload>, ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    let v1 = s.cpu_offload_gb.filter(|&g| g > 0);
    let v2 = s.offload_group_size;
    if v2.is_none() {
        for (f, given) in [
            ("offload_num_in_group", s.offload_num_in_group.is_some()),
            ("offload_prefetch_step", s.offload_prefetch_step.is_some()),
            ("offload_mode", s.offload_mode.is_some()),
        ] {
            if given {
                return Err(c.err(
                    &k(f),
                    "configures sglang's layer-wise offload, which offload_group_size turns on: set offload_group_size (e.g. 2: every second layer's experts in host memory) or remove this key",
                ));
            }
        }
    }
    if v1.is_none() && v2.is_none() {
        return Ok(None);
    }
    if p.step_times.is_some() {
        return Err(c.err(
            &k(if v1.is_some() {
                "cpu_offload_gb"
            } else {
                "offload_group_size"
            }),
            "a measured step-time profile (step_times) already holds whatever offload it was measured with; drop step_times or the offload keys",
        ));
    }
    let link = gpu.host_copy_bytes_per_s();
    let layers = model.num_layers;
    if let Some(gb) = v1 {
        if v2.is_some() {
            return Err(c.err(
                &k("cpu_offload_gb"),
                "and offload_group_size are sglang's two offloaders, and it takes one: \"V2 offload does not support cpu_offload_gb yet\" (create_offloader); keep one",
            ));
        }
        // V1 moves the decoder layers' parameters to host memory from the first layer on
        // until `gb` GiB per GPU are there: spread over the layers as their share of the
        // weights one GPU holds (the embedding and LM head stay).
        let weights = crate::config::capacity::weight_bytes_per_gpu(model, server, parallel);
        let vocab = f64::from(model.vocab_size)
            * f64::from(model.hidden_size)
            * if model.tie_word_embeddings { 1.0 } else { 2.0 }
            * model.weights.dense.bytes()
            / f64::from(server.tp_size.max(1));
        let per_layer = ((weights - vocab) / f64::from(layers.max(1))).max(0.0);
        let mut left = f64::from(gb) * f64::from(1u32 << 30);
        let bytes_per_layer: Vec<f64> = (0..layers)
            .map(|_| {
                let b = left.min(per_layer);
                left -= b;
                b
            })
            .collect();
        return Ok(Some(Offload {
            mode: OffloadMode::Sync,
            layers,
            bytes_per_layer,
            link_bytes_per_s: link,
        }));
    }
    let group_size = v2.expect("V2 is on");
    if group_size == 0 || group_size > MAX_LAYERS {
        return Err(c.err(
            &k("offload_group_size"),
            format!(
                "must be 1..={MAX_LAYERS} layers a group (sglang offloads the last offload_num_in_group of each group); got {group_size}; leave it out to keep every weight on the GPU"
            ),
        ));
    }
    let num_in_group = s.offload_num_in_group.unwrap_or(1);
    if num_in_group == 0 || num_in_group > group_size {
        return Err(c.err(
            &k("offload_num_in_group"),
            format!(
                "must be 1..=offload_group_size = {group_size} (sglang: \"Must be <= offload_group_size\"); got {num_in_group}"
            ),
        ));
    }
    let prefetch_step = s.offload_prefetch_step.unwrap_or(1);
    if prefetch_step > MAX_LAYERS {
        return Err(c.err(
            &k("offload_prefetch_step"),
            format!("must be 0..={MAX_LAYERS} offloaded layers ahead; got {prefetch_step}"),
        ));
    }
    match s.offload_mode.as_deref().unwrap_or("cpu") {
        "cpu" => {}
        other => {
            return Err(c.err(
                &k("offload_mode"),
                format!(
                    "{other:?}: pdsim models \"cpu\" (pinned host memory per GPU, sglang's default); sglang's other modes ({}) share one host copy between DP ranks of TP 1 or shard it over GPUs, and are not modelled",
                    MODES[1..].join(", ")
                ),
            ));
        }
    }
    // Only DeepSeek's model code hands the layer-wise offloader what to offload (the routed
    // experts, `deepseek_v2.py` `offloader_kwargs`); other models' `make_layers` pass none
    // and the server fails at start (sgl-project Ascend/sglang issue #64).
    if !(model.is_mla() && model.moe.is_some() && !model.is_hybrid()) {
        return Err(c.err(
            &k("offload_group_size"),
            format!(
                "sglang's layer-wise offload knows what to offload only in DeepSeek-architecture models (MLA + MoE: deepseek-v3, kimi-k2), whose routed experts it moves; {} is not one; use cpu_offload_gb (whole layers, fetched without overlap)",
                model.name
            ),
        ));
    }
    let per_layer =
        crate::config::capacity::routed_expert_bytes_per_layer_gpu(model, server, parallel);
    let offloaded = Offload::prefetch_layers(layers, group_size, num_in_group);
    // The first `dense_ffn_layers` layers have no experts (DeepSeek's first_k_dense_replace):
    // offloaded modules with nothing in them.
    let bytes_per_layer = (0..layers)
        .map(|l| {
            if offloaded.contains(&l) && l >= model.dense_ffn_layers {
                per_layer
            } else {
                0.0
            }
        })
        .collect();
    Ok(Some(Offload {
        mode: OffloadMode::Prefetch {
            group_size,
            num_in_group,
            prefetch_step,
        },
        layers,
        bytes_per_layer,
        link_bytes_per_s: link,
    }))
}
