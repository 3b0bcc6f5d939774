//! Importers of the large-MoE architectures issue 11 added: `qwen3_moe` (Qwen3-235B-A22B:
//! GQA + MoE) and `kimi_linear` (Kimi-Linear: MLA full-attention layers, KDA linear-attention
//! layers, MoE). Field meanings follow sglang's config classes (`configs/kimi_linear.py`
//! `KimiLinearConfig`, and transformers' `Qwen3MoeConfig`); the presets of
//! `spec::model` equal what these import from `scenarios/models/`.

use serde_json::{Map, Value};

use super::{ConfigError, Fields};
use crate::spec::model::kimi_layer_ids;
use crate::spec::model::{Gqa, KvAttention, MambaKind, MambaSpec, ModelSpec, dense_gqa};

/// `qwen3_moe`: a dense-GQA attention stack whose feed-forward is MoE on every
/// `decoder_sparse_step`-th layer not listed in `mlp_only_layers` (transformers'
/// `Qwen3MoeDecoderLayer`), dense elsewhere.
pub(super) fn qwen3_moe(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let hidden = f.u32("hidden_size")?;
    let q_heads = f.u32("num_attention_heads")?;
    let layers = f.layers("num_hidden_layers")?;
    let mut spec = dense_gqa(
        &name,
        Gqa {
            layers,
            hidden,
            q_heads,
            kv_heads: f.opt_dim("num_key_value_heads")?.unwrap_or(q_heads),
            head_dim: f.head_dim("head_dim", hidden, q_heads)?,
            ffn: 0,
            vocab: f.u32("vocab_size")?,
        },
    );
    let step = f.opt_u32("decoder_sparse_step")?.unwrap_or(1).max(1);
    let mlp_only = f.opt_u32_list("mlp_only_layers")?.unwrap_or_default();
    let moe_layers = (0..layers)
        .filter(|l| !mlp_only.contains(l) && (l + 1) % step == 0)
        .count() as u32;
    spec.moe_layers = moe_layers;
    spec.dense_ffn_layers = layers - moe_layers;
    spec.dense_intermediate = if spec.dense_ffn_layers > 0 {
        f.u32("intermediate_size")?
    } else {
        0
    };
    spec.moe = Some(f.moe(
        "num_experts",
        "num_experts_per_tok",
        f.u32("moe_intermediate_size")?,
        f.opt_u32("shared_expert_intermediate_size")?.unwrap_or(0),
    )?);
    spec.tie_word_embeddings = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    spec.weights = f.weights(true)?;
    spec.activation_bytes = f.dtype_bytes("torch_dtype", 2)?;
    Ok(spec)
}

/// Renames the field of an error raised inside `linear_attn_config` to its dotted path.
fn nested(e: ConfigError) -> ConfigError {
    match e {
        ConfigError::MissingField {
            path,
            field,
            model_type,
        } => ConfigError::MissingField {
            path,
            field: format!("linear_attn_config.{field}"),
            model_type,
        },
        ConfigError::BadField {
            path,
            field,
            problem,
        } => ConfigError::BadField {
            path,
            field: format!("linear_attn_config.{field}"),
            problem,
        },
        other => other,
    }
}

/// The KDA state geometry of `linear_attn_config` (sglang `KimiLinearConfig.mamba2_cache_params`
/// → `KimiLinearStateShape.create(num_heads, head_dim, conv_kernel_size=short_conv_kernel_size)`;
/// key heads and key head dim default to the value ones) and the 1-based KDA layer list.
fn kda(f: &Fields, layers: u32) -> Result<(MambaSpec, Vec<u32>), ConfigError> {
    let cfg: &Map<String, Value> = match f.get("linear_attn_config") {
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(f.bad(
                "linear_attn_config",
                format!("must be an object, found {v}"),
            ));
        }
        None => return Err(f.missing("linear_attn_config")),
    };
    let g = Fields {
        path: f.path,
        model_type: f.model_type,
        map: cfg,
    };
    let heads = g.u32("num_heads").map_err(nested)?;
    let head_dim = g.u32("head_dim").map_err(nested)?;
    let k_heads = g.opt_dim("num_k_heads").map_err(nested)?.unwrap_or(heads);
    let k_dim = g.opt_dim("head_k_dim").map_err(nested)?.unwrap_or(head_dim);
    let conv_kernel = g.u32("short_conv_kernel_size").map_err(nested)?;
    if conv_kernel < 2 {
        return Err(nested(g.bad(
            "short_conv_kernel_size",
            format!("is {conv_kernel}; the conv state keeps kernel − 1 columns, so it must be at least 2"),
        )));
    }
    let value = g.product("head_dim", heads, head_dim).map_err(nested)?;
    let key = g.product("head_k_dim", k_heads, k_dim).map_err(nested)?;
    let kda_layers = g
        .opt_u32_list("kda_layers")
        .map_err(nested)?
        .ok_or_else(|| nested(g.missing("kda_layers")))?;
    if let Some(&bad) = kda_layers.iter().find(|&&l| l == 0 || l > layers) {
        return Err(nested(g.bad(
            "kda_layers",
            format!("lists layer {bad}, but the list is 1-based (sglang: `(layer_idx + 1) in kda_layers`) and num_hidden_layers is {layers}: use 1..={layers}"),
        )));
    }
    // sglang derives the full-attention layers as "not KDA"; a config that lists them too must
    // agree, or the file describes a different model than sglang would build.
    if let Some(full) = g.opt_u32_list("full_attn_layers").map_err(nested)? {
        let derived: Vec<u32> = (1..=layers).filter(|l| !kda_layers.contains(l)).collect();
        let mut given = full.clone();
        given.sort_unstable();
        given.dedup();
        if given != derived {
            return Err(nested(g.bad(
                "full_attn_layers",
                format!("is {full:?}, but the layers not in kda_layers are {derived:?} (sglang uses every non-KDA layer as full attention)"),
            )));
        }
    }
    let spec = MambaSpec {
        kind: MambaKind::Kda,
        intermediate_size: value,
        n_groups: k_heads,
        num_heads: heads,
        head_dim,
        state_size: k_dim,
        conv_kernel,
        // `conv_shard_groups = [proj_size, proj_k_size, proj_k_size]`.
        conv_shard_groups: vec![value, key, key],
        conv_dtype_bytes: 2,
        ssm_dtype_bytes: f.dtype_bytes("mamba_ssm_dtype", 4)?,
    };
    Ok((spec, kda_layers))
}

/// `kimi_linear`: MLA attention on the layers not in `linear_attn_config.kda_layers`, KDA
/// state on those; MoE on layer `l` when `l >= first_k_dense_replace` and
/// `l % moe_layer_freq == 0` (the DeepSeek-style rule Kimi-Linear's decoder layer uses), a
/// dense `intermediate_size` MLP elsewhere.
pub(super) fn kimi_linear(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let layers = f.layers("num_hidden_layers")?;
    let (mamba, kda_one_based) = kda(f, layers)?;
    let (mamba_layers, attention_layers) = kimi_layer_ids(layers, &kda_one_based);
    let first_dense = f.opt_u32("first_k_dense_replace")?.unwrap_or(0);
    let freq = f.opt_u32("moe_layer_freq")?.unwrap_or(1).max(1);
    let moe_layers = (0..layers)
        .filter(|&l| l >= first_dense && l % freq == 0)
        .count() as u32;
    let expert_inter = f.u32("moe_intermediate_size")?;
    let shared = f.opt_u32("num_shared_experts")?.unwrap_or(0);
    let shared_inter = f.product("num_shared_experts", shared, expert_inter)?;
    // sglang `KimiLinearConfig.is_mla`: any MLA field set; Kimi-Linear's full layers are MLA.
    let q_lora_rank = f.opt_u32("q_lora_rank")?.filter(|&r| r > 0);
    Ok(ModelSpec {
        name,
        num_layers: layers,
        hidden_size: f.u32("hidden_size")?,
        q_heads: f.u32("num_attention_heads")?,
        attention: KvAttention::Mla {
            kv_lora_rank: f.u32("kv_lora_rank")?,
            qk_rope_head_dim: f.u32("qk_rope_head_dim")?,
            qk_nope_head_dim: f.u32("qk_nope_head_dim")?,
            v_head_dim: f.u32("v_head_dim")?,
            q_lora_rank,
        },
        attention_layers,
        mamba: Some(mamba),
        mamba_layers,
        swa: None,
        dense_ffn_layers: layers - moe_layers,
        dense_intermediate: f.u32("intermediate_size")?,
        dense_ffn_gated: true,
        moe: Some(f.moe(
            "num_experts",
            "num_experts_per_token",
            expert_inter,
            shared_inter,
        )?),
        moe_layers,
        vocab_size: f.u32("vocab_size")?,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        weights: f.weights(true)?,
        activation_bytes: f.dtype_bytes("torch_dtype", 2)?,
    })
}
