//! Imports a Hugging Face `config.json` (or DeepSeek's own inference config) as a [`ModelSpec`].
//!
//! Supported: `model_type` `llama`, `qwen2`, `qwen3` (dense GQA), `deepseek_v3` (MLA + MoE),
//! `qwen3_next` (GDN hybrid + MoE), `nemotron_h` (Mamba2 hybrid), `qwen3_moe` (GQA + MoE) and
//! `kimi_linear` (MLA + KDA hybrid + MoE; `moe.rs`), and DeepSeek's reference
//! inference schema (`dim`, `n_layers`, `inter_dim`, `n_dense_layers`, …; no `model_type`),
//! recognised by its keys. Field meanings follow `docs/sglang-pd.md` §5 and the model
//! presets, so a config and the preset of the same model agree field for field (but `name`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

mod moe;

use super::model::{
    Gqa, KvAttention, MambaKind, MambaSpec, ModelSpec, MoeSpec, WeightDtype, WeightFormat,
    dense_gqa, parse_hybrid_pattern,
};

/// The `model_type`s sglang loads through its DeepSeek-V2/V3 model code, read with DeepSeek's
/// Hugging Face schema (MLA + MoE: `kv_lora_rank`, `first_k_dense_replace`,
/// `n_routed_experts`, …). sglang picks the model class by `architectures`, not `model_type`:
/// `deepseek_v2.py`'s `EntryClass = [DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, …]`;
/// Moonshot's Kimi-K2 declares `"architectures": ["DeepseekV3ForCausalLM"]` with
/// `"model_type": "kimi_k2"` "so that inference engines can tell it from DeepSeek-V3"
/// (Kimi-K2's deployment guide); `glm4_moe_lite.py`'s `Glm4MoeLiteForCausalLM` subclasses
/// `DeepseekV2ForCausalLM`. A config of another `model_type` whose `architectures` names one of
/// [`DEEPSEEK_ARCHITECTURES`] is read the same way.
pub const DEEPSEEK_MODEL_TYPES: &[&str] =
    &["deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe_lite"];

/// The `architectures` entries sglang serves with its DeepSeek-V2/V3 code (MLA, dense
/// attention over every token).
pub const DEEPSEEK_ARCHITECTURES: &[&str] = &[
    "DeepseekV3ForCausalLM",
    "DeepseekV2ForCausalLM",
    "Glm4MoeLiteForCausalLM",
];

/// DeepSeek-architecture models with DeepSeek Sparse Attention (an indexer and its own KV
/// rows, `NSATokenToKVPool`): their layout is not pdsim's MLA layout.
const DSA: &[&str] = &["deepseek_v32", "glm_moe_dsa"];

/// The architectures [`load_model_config`] imports.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "llama",
    "qwen2",
    "qwen3",
    "deepseek_v3",
    "deepseek_v2",
    "kimi_k2",
    "glm4_moe_lite",
    "qwen3_next",
    "nemotron_h",
    "qwen3_moe",
    "kimi_linear",
    "DeepSeek inference config (dim, n_layers, inter_dim, n_dense_layers, ...)",
];

/// Largest size any one field (or a width derived from two) may give: 2²⁴, far above any real
/// model's widths (hidden ≤ 2¹⁵, vocab ≤ 2¹⁹), low enough that products of a few stay in `u64`.
pub const MAX_DIM: u32 = 1 << 24;
/// Most layers a config may have (the largest models have ~128).
pub const MAX_LAYERS: u32 = 4096;

/// Why a config file could not be imported. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read the model config: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid JSON.
    #[error("{path}:{line}:{column}: invalid JSON: {message}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// A field the architecture needs is absent (or null).
    #[error(
        "{path}: missing field `{field}`, which a {model_type} config needs; add it (see the model's config.json on Hugging Face)"
    )]
    MissingField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// The architecture being read.
        model_type: String,
    },
    /// A field has the wrong type or an impossible value.
    #[error("{path}: field `{field}` {problem}")]
    BadField {
        /// The file.
        path: PathBuf,
        /// The field.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// `model_type` is not one pdsim imports.
    #[error(
        "{path}: unsupported architecture: model_type {found}; pdsim imports {supported}. Use a preset or a supported config"
    )]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The `model_type` found, as written (`none` when absent).
        found: String,
        /// The supported list.
        supported: String,
    },
}

/// Reads fields of one config with the file and architecture at hand for error messages.
struct Fields<'a> {
    path: &'a Path,
    model_type: &'a str,
    map: &'a Map<String, Value>,
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn missing(&self, key: &str) -> ConfigError {
        ConfigError::MissingField {
            path: self.path.to_path_buf(),
            field: key.to_string(),
            model_type: self.model_type.to_string(),
        }
    }

    fn bad(&self, key: &str, problem: impl Into<String>) -> ConfigError {
        ConfigError::BadField {
            path: self.path.to_path_buf(),
            field: key.to_string(),
            problem: problem.into(),
        }
    }

    fn opt_u32(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| self.bad(key, format!("must be a non-negative integer, found {v}"))),
        }
    }

    /// A required size (heads, dims, vocab, experts, layers...): at least 1, since a zero
    /// divides by zero or leaves an empty model downstream, and at most [`MAX_DIM`].
    fn u32(&self, key: &str) -> Result<u32, ConfigError> {
        let v = self.count(key)?;
        self.positive(key, v)
    }

    /// A required count that may be 0 (dense layers before the first MoE layer).
    fn count(&self, key: &str) -> Result<u32, ConfigError> {
        let v = self.opt_u32(key)?.ok_or_else(|| self.missing(key))?;
        if v > MAX_DIM {
            return Err(self.bad(key, format!("is {v}, above the bound of {MAX_DIM}")));
        }
        Ok(v)
    }

    /// An optional size: at least 1 when given.
    fn opt_dim(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        match self.opt_u32(key)? {
            None => Ok(None),
            Some(v) if v > MAX_DIM => {
                Err(self.bad(key, format!("is {v}, above the bound of {MAX_DIM}")))
            }
            Some(v) => self.positive(key, v).map(Some),
        }
    }

    /// The MoE block: `active` routed experts per token out of `experts`; a token cannot route
    /// to more experts than there are.
    fn moe(
        &self,
        experts_key: &str,
        active_key: &str,
        expert_intermediate: u32,
        shared_intermediate: u32,
    ) -> Result<MoeSpec, ConfigError> {
        let experts = self.u32(experts_key)?;
        let active = self.u32(active_key)?;
        if active > experts {
            return Err(self.bad(
                active_key,
                format!(
                    "is {active}, more than the {experts} routed experts of `{experts_key}`; a token routes to at most every expert"
                ),
            ));
        }
        Ok(MoeSpec {
            experts,
            active,
            expert_intermediate,
            shared_intermediate,
        })
    }

    fn positive(&self, key: &str, v: u32) -> Result<u32, ConfigError> {
        if v == 0 {
            Err(self.bad(key, "is 0; it must be at least 1 (a size of zero leaves nothing to compute or divides by zero)"))
        } else {
            Ok(v)
        }
    }

    /// A layer count: 1..=[`MAX_LAYERS`] (per-layer tables are allocated from it).
    fn layers(&self, key: &str) -> Result<u32, ConfigError> {
        let v = self.u32(key)?;
        if v > MAX_LAYERS {
            return Err(self.bad(
                key,
                format!("is {v}, above the bound of {MAX_LAYERS} layers"),
            ));
        }
        Ok(v)
    }

    /// `a × b`, a width derived from two fields, which must fit in 32 bits.
    fn product(&self, key: &str, a: u32, b: u32) -> Result<u32, ConfigError> {
        a.checked_mul(b).filter(|&p| p <= MAX_DIM).ok_or_else(|| {
            self.bad(
                key,
                format!("gives a width of {a} × {b}, above the bound of {MAX_DIM}"),
            )
        })
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.bad(key, format!("must be true or false, found {v}"))),
        }
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.bad(key, format!("must be a string, found {v}"))),
        }
    }

    fn opt_u32_list(&self, key: &str) -> Result<Option<Vec<u32>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(xs)) => xs
                .iter()
                .map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<Vec<u32>>>()
                .map(Some)
                .ok_or_else(|| self.bad(key, "must be a list of non-negative integers")),
            Some(v) => Err(self.bad(key, format!("must be a list, found {v}"))),
        }
    }

    /// Bytes per element of a dtype name (`torch_dtype`, `dtype`, `mamba_ssm_dtype`).
    fn dtype_bytes(&self, key: &str, default: u32) -> Result<u32, ConfigError> {
        match self.opt_str(key)? {
            None => Ok(default),
            Some("bfloat16" | "bf16" | "float16" | "fp16" | "half") => Ok(2),
            Some("float32" | "fp32" | "float") => Ok(4),
            Some("fp8" | "float8_e4m3fn" | "float8_e5m2") => Ok(1),
            Some(other) => Err(self.bad(key, format!("has an unknown dtype {other:?}"))),
        }
    }

    /// The weights as served, from `quantization_config` (what sglang's `ModelConfig` reads
    /// to pick its `--quantization` method, `_parse_quant_hf_config`):
    /// * `quant_method = "fp8"` (DeepSeek's and Kimi's block-FP8 checkpoints): every weight one
    ///   byte;
    /// * ModelOpt NVFP4 — `quant_method = "modelopt"` with `quant_algo = "NVFP4"` (what
    ///   NVIDIA's `hf_quant_config.json` says and sglang maps to `modelopt_fp4`), or
    ///   `quant_method = "modelopt_fp4"` — and compressed-tensors' `nvfp4-pack-quantized`
    ///   format: NVFP4 routed experts ([`WeightDtype::Nvfp4`], 4.5 bits), the rest in the
    ///   torch dtype (NVIDIA's NVFP4 checkpoints keep attention, embedding and LM head in
    ///   BF16); on a model without experts every linear layer is NVFP4;
    /// * ModelOpt FP8 (`quant_algo = "FP8"`): FP8;
    /// * anything else (or none): the torch dtype for every weight.
    fn weights(&self, moe: bool) -> Result<WeightFormat, ConfigError> {
        let base = self.dtype_bytes("torch_dtype", 2)?;
        let base = WeightDtype::from_bytes(base).unwrap_or(WeightDtype::Bf16);
        let q = self.get("quantization_config");
        let s = |k: &str| q.and_then(|q| q.get(k)).and_then(Value::as_str);
        let method = s("quant_method").unwrap_or("");
        let algo = s("quant_algo").unwrap_or("").to_ascii_uppercase();
        let format = s("format").unwrap_or("");
        let nvfp4 = (method == "modelopt" && algo == "NVFP4")
            || method == "modelopt_fp4"
            || (method == "compressed-tensors" && format == "nvfp4-pack-quantized");
        Ok(
            if method == "fp8" || (method == "modelopt" && algo == "FP8") {
                WeightFormat::uniform(WeightDtype::Fp8)
            } else if nvfp4 && moe {
                WeightFormat {
                    dense: base,
                    experts: WeightDtype::Nvfp4,
                }
            } else if nvfp4 {
                WeightFormat::uniform(WeightDtype::Nvfp4)
            } else {
                WeightFormat::uniform(base)
            },
        )
    }

    /// `head_dim`, else `hidden_size / num_attention_heads`.
    fn head_dim(&self, key: &str, hidden: u32, heads: u32) -> Result<u32, ConfigError> {
        match self.opt_dim(key)? {
            Some(h) => Ok(h),
            None if heads > 0 && hidden.is_multiple_of(heads) => Ok(hidden / heads),
            None => Err(self.missing(key)),
        }
    }
}

/// Imports one `config.json` (see the module docs for what is supported).
pub fn load_model_config(path: &Path) -> Result<ModelSpec, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    let Value::Object(map) = &value else {
        return Err(ConfigError::Json {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            message: "the top level must be an object".into(),
        });
    };
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let model_type = map.get("model_type").and_then(Value::as_str);
    let is_deepseek_inference = model_type.is_none()
        && ["dim", "n_layers", "inter_dim", "n_dense_layers"]
            .iter()
            .all(|k| map.contains_key(*k));
    let mt = match (model_type, is_deepseek_inference) {
        (_, true) => "deepseek inference",
        (Some(t), false) => t,
        (None, false) => "none",
    };
    let f = Fields {
        path,
        model_type: mt,
        map,
    };
    let deepseek_arch = map
        .get("architectures")
        .and_then(Value::as_array)
        .is_some_and(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .any(|x| DEEPSEEK_ARCHITECTURES.contains(&x))
        });
    if DSA.contains(&mt) {
        return Err(f.bad(
            "model_type",
            format!(
                "is {mt:?}: DeepSeek Sparse Attention (an indexer with its own FP8 key rows per token beside the MLA latent, sglang's NSATokenToKVPool), whose KV layout and transfer pdsim does not model; pdsim imports the dense-MLA DeepSeek family ({})",
                DEEPSEEK_MODEL_TYPES.join(", ")
            ),
        ));
    }
    let spec = match mt {
        "llama" | "qwen2" | "qwen3" => dense(&f, name),
        t if DEEPSEEK_MODEL_TYPES.contains(&t) => deepseek_hf(&f, name),
        _ if deepseek_arch && !is_deepseek_inference => deepseek_hf(&f, name),
        "deepseek inference" => deepseek_inference(&f, name),
        "qwen3_next" => qwen3_next(&f, name),
        "nemotron_h" => nemotron_h(&f, name),
        "qwen3_moe" => moe::qwen3_moe(&f, name),
        "kimi_linear" => moe::kimi_linear(&f, name),
        other => Err(ConfigError::Unsupported {
            path: path.to_path_buf(),
            found: if model_type.is_some() {
                format!("{other:?}")
            } else {
                "none (no model_type key)".into()
            },
            supported: SUPPORTED_MODEL_TYPES.join(", "),
        }),
    }?;
    // Every layout pdsim models registers at least one KV layer (sglang's hybrid pools too);
    // a config whose layer pattern leaves none is refused here, not deep in the layout code.
    if spec.attention_layers.is_empty() {
        return Err(f.bad(
            "num_hidden_layers",
            format!(
                "is {}, which leaves no attention layer in this model's layer pattern; pdsim needs at least one",
                spec.num_layers
            ),
        ));
    }
    Ok(spec)
}

fn dense(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let hidden = f.u32("hidden_size")?;
    let q_heads = f.u32("num_attention_heads")?;
    let mut spec = dense_gqa(
        &name,
        Gqa {
            layers: f.layers("num_hidden_layers")?,
            hidden,
            q_heads,
            kv_heads: f.opt_dim("num_key_value_heads")?.unwrap_or(q_heads),
            head_dim: f.head_dim("head_dim", hidden, q_heads)?,
            ffn: f.u32("intermediate_size")?,
            vocab: f.u32("vocab_size")?,
        },
    );
    spec.tie_word_embeddings = f.opt_bool("tie_word_embeddings")?.unwrap_or(false);
    spec.weights = f.weights(false)?;
    spec.activation_bytes = f.dtype_bytes("torch_dtype", 2)?;
    Ok(spec)
}

/// The MLA + MoE fields shared by both DeepSeek schemas, by their key names in each.
struct DeepSeekKeys {
    layers: &'static str,
    hidden: &'static str,
    heads: &'static str,
    dense_layers: &'static str,
    dense_inter: &'static str,
    experts: &'static str,
    active: &'static str,
    expert_inter: &'static str,
}

fn deepseek(
    f: &Fields,
    name: String,
    k: &DeepSeekKeys,
    weights: WeightFormat,
) -> Result<ModelSpec, ConfigError> {
    let layers = f.layers(k.layers)?;
    let dense_layers = f.count(k.dense_layers)?;
    if dense_layers > layers {
        return Err(f.bad(
            k.dense_layers,
            format!("({dense_layers}) exceeds the layer count ({layers})"),
        ));
    }
    let expert_inter = f.u32(k.expert_inter)?;
    let shared = f.opt_u32("n_shared_experts")?.unwrap_or(0);
    let shared_inter = f.product("n_shared_experts", shared, expert_inter)?;
    // DeepSeek's inference config writes q_lora_rank = 0 for "no query compression".
    let q_lora_rank = f.opt_u32("q_lora_rank")?.filter(|&r| r > 0);
    Ok(ModelSpec {
        name,
        num_layers: layers,
        hidden_size: f.u32(k.hidden)?,
        q_heads: f.u32(k.heads)?,
        attention: KvAttention::Mla {
            kv_lora_rank: f.u32("kv_lora_rank")?,
            qk_rope_head_dim: f.u32("qk_rope_head_dim")?,
            qk_nope_head_dim: f.u32("qk_nope_head_dim")?,
            v_head_dim: f.u32("v_head_dim")?,
            q_lora_rank,
        },
        attention_layers: (0..layers).collect(),
        mamba: None,
        mamba_layers: Vec::new(),
        swa: None,
        dense_ffn_layers: dense_layers,
        dense_intermediate: f.u32(k.dense_inter)?,
        dense_ffn_gated: true,
        moe: Some(f.moe(k.experts, k.active, expert_inter, shared_inter)?),
        moe_layers: layers - dense_layers,
        vocab_size: f.u32("vocab_size")?,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        weights,
        activation_bytes: 2,
    })
}

fn deepseek_hf(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let keys = DeepSeekKeys {
        layers: "num_hidden_layers",
        hidden: "hidden_size",
        heads: "num_attention_heads",
        dense_layers: "first_k_dense_replace",
        dense_inter: "intermediate_size",
        experts: "n_routed_experts",
        active: "num_experts_per_tok",
        expert_inter: "moe_intermediate_size",
    };
    // num_nextn_predict_layers (MTP) is a separate draft pool in sglang (docs/sglang-pd.md §5), not counted.
    // sglang's DeepSeek code places a MoE block on every layer from `first_k_dense_replace`
    // on when `moe_layer_freq` is 1 (`DeepseekV2DecoderLayer._is_layer_sparse`); every
    // released DeepSeek, Kimi-K2 and GLM-4.7-Flash config has 1, and pdsim's MoE layer count
    // assumes it.
    if let Some(freq) = f.opt_u32("moe_layer_freq")?
        && freq != 1
    {
        return Err(f.bad(
            "moe_layer_freq",
            format!("is {freq}; pdsim models a MoE block on every layer after first_k_dense_replace (moe_layer_freq = 1, every released DeepSeek-architecture config)"),
        ));
    }
    deepseek(f, name, &keys, f.weights(true)?)
}

fn deepseek_inference(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let keys = DeepSeekKeys {
        layers: "n_layers",
        hidden: "dim",
        heads: "n_heads",
        dense_layers: "n_dense_layers",
        dense_inter: "inter_dim",
        experts: "n_routed_experts",
        active: "n_activated_experts",
        expert_inter: "moe_inter_dim",
    };
    let bytes = f.dtype_bytes("dtype", 2)?;
    let weights =
        WeightFormat::uniform(WeightDtype::from_bytes(bytes).unwrap_or(WeightDtype::Bf16));
    deepseek(f, name, &keys, weights)
}

fn qwen3_next(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let layers = f.layers("num_hidden_layers")?;
    let hidden = f.u32("hidden_size")?;
    let q_heads = f.u32("num_attention_heads")?;
    let head_dim = f.head_dim("head_dim", hidden, q_heads)?;
    // Which layers are full attention: `layer_types` when given, else every
    // `full_attention_interval`-th layer (sglang's Qwen3NextConfig).
    let full: Vec<bool> = match f.get("layer_types") {
        Some(Value::Array(types)) => types
            .iter()
            .map(|t| t.as_str() == Some("full_attention"))
            .collect(),
        Some(_) => return Err(f.bad("layer_types", "must be a list of strings")),
        None => {
            let interval = f.u32("full_attention_interval")?;
            if interval == 0 {
                return Err(f.bad("full_attention_interval", "must be at least 1"));
            }
            (0..layers).map(|l| (l + 1) % interval == 0).collect()
        }
    };
    if full.len() != layers as usize {
        return Err(f.bad(
            "layer_types",
            format!(
                "lists {} layers but num_hidden_layers is {layers}",
                full.len()
            ),
        ));
    }
    let attention_layers: Vec<u32> = (0..layers).filter(|&l| full[l as usize]).collect();
    let mamba_layers: Vec<u32> = (0..layers).filter(|&l| !full[l as usize]).collect();
    let (key_heads, key_dim) = (
        f.u32("linear_num_key_heads")?,
        f.u32("linear_key_head_dim")?,
    );
    let (value_heads, value_dim) = (
        f.u32("linear_num_value_heads")?,
        f.u32("linear_value_head_dim")?,
    );
    let key_width = f.product("linear_key_head_dim", key_heads, key_dim)?;
    let value_width = f.product("linear_value_head_dim", value_heads, value_dim)?;
    // MoE on every `decoder_sparse_step`-th layer not listed in `mlp_only_layers`.
    let experts = f.u32("num_experts")?;
    let step = f.opt_u32("decoder_sparse_step")?.unwrap_or(1).max(1);
    let mlp_only = f.opt_u32_list("mlp_only_layers")?.unwrap_or_default();
    let moe_layers = (0..layers)
        .filter(|l| !mlp_only.contains(l) && experts > 0 && (l + 1) % step == 0)
        .count() as u32;
    let dense_layers = layers - moe_layers;
    Ok(ModelSpec {
        name,
        num_layers: layers,
        hidden_size: hidden,
        q_heads,
        attention: KvAttention::Mha {
            kv_heads: f.u32("num_key_value_heads")?,
            head_dim,
            v_head_dim: head_dim,
        },
        attention_layers,
        mamba: Some(MambaSpec {
            kind: MambaKind::Gdn,
            intermediate_size: value_width,
            n_groups: key_heads,
            num_heads: value_heads,
            head_dim: value_dim,
            state_size: key_dim,
            conv_kernel: f.u32("linear_conv_kernel_dim")?,
            conv_shard_groups: vec![key_width, key_width, value_width],
            conv_dtype_bytes: 2,
            ssm_dtype_bytes: f.dtype_bytes("mamba_ssm_dtype", 4)?,
        }),
        mamba_layers,
        swa: None,
        dense_ffn_layers: dense_layers,
        // The dense width only matters where a layer has a dense MLP.
        dense_intermediate: if dense_layers > 0 {
            f.u32("intermediate_size")?
        } else {
            0
        },
        dense_ffn_gated: true,
        moe: Some(f.moe(
            "num_experts",
            "num_experts_per_tok",
            f.u32("moe_intermediate_size")?,
            f.opt_u32("shared_expert_intermediate_size")?.unwrap_or(0),
        )?),
        moe_layers,
        vocab_size: f.u32("vocab_size")?,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        weights: f.weights(true)?,
        activation_bytes: f.dtype_bytes("torch_dtype", 2)?,
    })
}

fn nemotron_h(f: &Fields, name: String) -> Result<ModelSpec, ConfigError> {
    let layers = f.layers("num_hidden_layers")?;
    let hidden = f.u32("hidden_size")?;
    let q_heads = f.u32("num_attention_heads")?;
    let pattern = f
        .opt_str("hybrid_override_pattern")?
        .ok_or_else(|| f.missing("hybrid_override_pattern"))?;
    let (mamba_layers, attention_layers, mlp) = parse_hybrid_pattern(pattern).map_err(|c| {
        f.bad(
            "hybrid_override_pattern",
            format!("has {c:?}; only M (mamba), * (attention) and - (MLP) are known"),
        )
    })?;
    if pattern.chars().count() != layers as usize {
        return Err(f.bad(
            "hybrid_override_pattern",
            format!(
                "has {} layers but num_hidden_layers is {layers}",
                pattern.chars().count()
            ),
        ));
    }
    let head_dim = match f.opt_dim("attention_head_dim")? {
        Some(h) => h,
        None => f.head_dim("head_dim", hidden, q_heads)?,
    };
    let heads = f.u32("mamba_num_heads")?;
    let mamba_head_dim = f.u32("mamba_head_dim")?;
    let gated = !matches!(
        f.opt_str("mlp_hidden_act")?,
        Some("relu2") | Some("squared_relu")
    );
    Ok(ModelSpec {
        name,
        num_layers: layers,
        hidden_size: hidden,
        q_heads,
        attention: KvAttention::Mha {
            kv_heads: f.u32("num_key_value_heads")?,
            head_dim,
            v_head_dim: head_dim,
        },
        attention_layers,
        mamba: Some(MambaSpec {
            kind: MambaKind::Mamba2,
            intermediate_size: f.product("mamba_head_dim", heads, mamba_head_dim)?,
            n_groups: f.u32("n_groups")?,
            num_heads: heads,
            head_dim: mamba_head_dim,
            state_size: f.u32("ssm_state_size")?,
            conv_kernel: f.u32("conv_kernel")?,
            conv_shard_groups: Vec::new(),
            conv_dtype_bytes: 2,
            ssm_dtype_bytes: f.dtype_bytes("mamba_ssm_dtype", 4)?,
        }),
        mamba_layers,
        swa: None,
        dense_ffn_layers: mlp.len() as u32,
        dense_intermediate: f.u32("intermediate_size")?,
        dense_ffn_gated: gated,
        moe: None,
        moe_layers: 0,
        vocab_size: f.u32("vocab_size")?,
        tie_word_embeddings: f.opt_bool("tie_word_embeddings")?.unwrap_or(false),
        weights: f.weights(false)?,
        activation_bytes: f.dtype_bytes("torch_dtype", 2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::preset;

    /// `shared/models`, which sits beside the repository (`../shared`).
    fn models_dir() -> PathBuf {
        crate::shared_path("models")
    }

    fn same_but_name(file: &str, preset_name: &str) {
        let path = models_dir().join(file);
        let mut got = load_model_config(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.name, file);
        let want = preset(preset_name).unwrap();
        got.name = want.name.clone();
        assert_eq!(got, want, "{file} vs preset {preset_name}");
    }

    #[test]
    fn shared_configs_match_their_presets() {
        same_but_name("Llama-3.3-70B-Instruct.config.json", "llama-3.1-70b");
        same_but_name("DeepSeek-V3.inference-config_671B.json", "deepseek-v3");
        same_but_name("Qwen3-Next-80B-A3B.config.json", "qwen3-next-80b-a3b");
        same_but_name(
            "Nemotron-H-8B-Base-8K.config.reconstructed.json",
            "nemotron-h-8b",
        );
    }

    #[test]
    fn every_shared_config_loads() {
        // Every architecture in the shared folder is imported (Kimi-Linear since issue 11).
        let mut loaded = 0;
        for e in std::fs::read_dir(models_dir()).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                load_model_config(&p).unwrap_or_else(|e| panic!("{e}"));
                loaded += 1;
            }
        }
        assert!(loaded >= 5, "{loaded} configs loaded");
    }

    /// `scenarios/models/` in this repository.
    fn repo_models() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/models")
    }

    #[test]
    fn repo_moe_configs_match_their_presets() {
        for (file, preset_name) in [
            ("qwen3-235b-a22b.config.json", "qwen3-235b-a22b"),
            ("kimi-linear-48b-a3b.config.json", "kimi-linear-48b-a3b"),
            ("kimi-k2-instruct.config.json", "kimi-k2"),
        ] {
            let mut got = load_model_config(&repo_models().join(file)).unwrap();
            got.name = preset_name.into();
            assert_eq!(got, preset(preset_name).unwrap(), "{file}");
        }
        // The repo copy of Kimi-Linear is the shared reconstruction, unchanged.
        same_but_name(
            "Kimi-Linear-48B-A3B.config.reconstructed.json",
            "kimi-linear-48b-a3b",
        );
    }

    fn kimi_json() -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(repo_models().join("kimi-linear-48b-a3b.config.json"))
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn kimi_linear_bad_fields_are_named() {
        /// (file tag, the edit, what the message must say).
        type Case = (&'static str, Box<dyn Fn(&mut Value)>, &'static str);
        let cases: [Case; 5] = [
            (
                "zero",
                Box::new(|j| j["linear_attn_config"]["kda_layers"][0] = 0.into()),
                "`linear_attn_config.kda_layers` lists layer 0, but the list is 1-based",
            ),
            (
                "full",
                Box::new(|j| j["linear_attn_config"]["full_attn_layers"][0] = 5.into()),
                "`linear_attn_config.full_attn_layers` is [5, 8",
            ),
            (
                "nolac",
                Box::new(|j| {
                    j.as_object_mut().unwrap().remove("linear_attn_config");
                }),
                "missing field `linear_attn_config`, which a kimi_linear config needs",
            ),
            (
                "noheads",
                Box::new(|j| {
                    j["linear_attn_config"]
                        .as_object_mut()
                        .unwrap()
                        .remove("num_heads");
                }),
                "missing field `linear_attn_config.num_heads`",
            ),
            (
                "active",
                Box::new(|j| j["num_experts_per_token"] = 300.into()),
                "`num_experts_per_token` is 300, more than the 256 routed experts",
            ),
        ];
        for (tag, edit, want) in cases {
            let mut j = kimi_json();
            edit(&mut j);
            let t = Temp::new(&format!("kimi-{tag}"), &j.to_string());
            let msg = load_model_config(&t.0).unwrap_err().to_string();
            assert!(msg.contains(&t.0.display().to_string()), "{msg}");
            assert!(msg.contains(want), "{tag}: {msg}");
        }
    }

    #[test]
    fn qwen3_moe_sparse_step_and_mlp_only_layers() {
        let mut j: Value = serde_json::from_str(
            &std::fs::read_to_string(repo_models().join("qwen3-235b-a22b.config.json")).unwrap(),
        )
        .unwrap();
        j["decoder_sparse_step"] = 2.into();
        j["mlp_only_layers"] = serde_json::json!([1, 3]);
        let t = Temp::new("q3moe", &j.to_string());
        let got = load_model_config(&t.0).unwrap();
        // Odd 0-based ids are MoE under step 2 ((l + 1) % 2 == 0), minus layers 1 and 3.
        assert_eq!(got.moe_layers, 47 - 2);
        assert_eq!(got.dense_ffn_layers, 94 - 45);
        assert_eq!(got.dense_intermediate, 12288);
    }

    /// A temp file with `text`, removed on drop.
    struct Temp(PathBuf);
    impl Temp {
        fn new(tag: &str, text: &str) -> Temp {
            let p =
                std::env::temp_dir().join(format!("pdsim-hf-{}-{tag}.json", std::process::id()));
            std::fs::write(&p, text).unwrap();
            Temp(p)
        }
    }
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn llama_json() -> Value {
        serde_json::from_str(
            &std::fs::read_to_string(models_dir().join("Llama-3.3-70B-Instruct.config.json"))
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn dense_hf_schemas_and_deepseek_hf() {
        // qwen3 with an explicit head_dim; qwen2 deriving it.
        let mut q3 = llama_json();
        q3["model_type"] = "qwen3".into();
        q3["num_hidden_layers"] = 36.into();
        q3["hidden_size"] = 4096.into();
        q3["num_attention_heads"] = 32.into();
        q3["head_dim"] = 128.into();
        q3["intermediate_size"] = 12288.into();
        q3["vocab_size"] = 151_936.into();
        let t = Temp::new("qwen3", &q3.to_string());
        let mut got = load_model_config(&t.0).unwrap();
        got.name = "qwen3-8b".into();
        assert_eq!(got, preset("qwen3-8b").unwrap());

        let ds = serde_json::json!({
            "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
            "num_attention_heads": 128, "first_k_dense_replace": 3, "intermediate_size": 18432,
            "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
            "n_shared_experts": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
            "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "vocab_size": 129280, "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}
        });
        let t = Temp::new("dsv3", &ds.to_string());
        let mut got = load_model_config(&t.0).unwrap();
        got.name = "deepseek-v3".into();
        assert_eq!(got, preset("deepseek-v3").unwrap());
    }

    /// The DeepSeek-architecture types sglang serves with its DeepSeek code: `deepseek_v2`
    /// (V2-Lite's `q_lora_rank: null`), `kimi_k2`, any `model_type` whose `architectures`
    /// names DeepseekV3ForCausalLM; DeepSeek Sparse Attention (`deepseek_v32`) and a MoE
    /// layer frequency other than 1 are refused naming the field; a ModelOpt NVFP4
    /// `quantization_config` gives NVFP4 experts beside the torch dtype.
    #[test]
    fn deepseek_architecture_model_types_and_nvfp4_configs() {
        let ds = serde_json::json!({
            "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
            "num_attention_heads": 128, "first_k_dense_replace": 3, "intermediate_size": 18432,
            "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
            "n_shared_experts": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
            "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
            "vocab_size": 129280, "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}
        });
        let load = |j: &Value, tag: &str| {
            let t = Temp::new(tag, &j.to_string());
            load_model_config(&t.0)
        };
        let want = preset("deepseek-v3").unwrap();
        for (mt, arch) in [
            ("kimi_k2", None),
            ("deepseek_v2", None),
            ("my_finetune", Some("DeepseekV3ForCausalLM")),
        ] {
            let mut j = ds.clone();
            j["model_type"] = mt.into();
            if let Some(a) = arch {
                j["architectures"] = serde_json::json!([a]);
            }
            let mut got = load(&j, mt).unwrap();
            got.name = want.name.clone();
            assert_eq!(got, want, "{mt}");
        }
        // V2-Lite: no query compression.
        let mut lite = ds.clone();
        lite["model_type"] = "deepseek_v2".into();
        lite["q_lora_rank"] = Value::Null;
        let got = load(&lite, "v2lite").unwrap();
        assert!(matches!(
            got.attention,
            KvAttention::Mla {
                q_lora_rank: None,
                ..
            }
        ));
        // Unknown type, no DeepSeek architecture: still refused, listing kimi_k2.
        let mut other = ds.clone();
        other["model_type"] = "mystery".into();
        let e = load(&other, "mystery").unwrap_err().to_string();
        assert!(e.contains("kimi_k2") && e.contains("\"mystery\""), "{e}");
        let mut v32 = ds.clone();
        v32["model_type"] = "deepseek_v32".into();
        let e = load(&v32, "v32").unwrap_err().to_string();
        assert!(
            e.contains("model_type") && e.contains("Sparse Attention"),
            "{e}"
        );
        let mut freq = ds.clone();
        freq["moe_layer_freq"] = 2.into();
        let e = load(&freq, "freq").unwrap_err().to_string();
        assert!(e.contains("moe_layer_freq"), "{e}");
        // NVIDIA's NVFP4 checkpoints: ModelOpt's `quant_algo` in quantization_config.
        let mut fp4 = ds.clone();
        fp4["quantization_config"] = serde_json::json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16});
        let got = load(&fp4, "nvfp4").unwrap();
        assert_eq!(
            got.weights,
            WeightFormat {
                dense: WeightDtype::Bf16,
                experts: WeightDtype::Nvfp4
            }
        );
        // A dense model's NVFP4 checkpoint: every weight.
        let mut l = llama_json();
        l["quantization_config"] =
            serde_json::json!({"quant_method": "modelopt", "quant_algo": "NVFP4"});
        let got = load(&l, "llama-nvfp4").unwrap();
        assert_eq!(got.weights, WeightFormat::uniform(WeightDtype::Nvfp4));
    }

    #[test]
    fn missing_field_names_file_and_field() {
        let mut j = llama_json();
        j.as_object_mut().unwrap().remove("num_hidden_layers");
        let t = Temp::new("missing", &j.to_string());
        let e = load_model_config(&t.0).unwrap_err();
        assert!(
            matches!(&e, ConfigError::MissingField { field, .. } if field == "num_hidden_layers")
        );
        let msg = e.to_string();
        assert!(msg.contains(&t.0.display().to_string()), "{msg}");
        assert!(
            msg.contains("`num_hidden_layers`") && msg.contains("llama"),
            "{msg}"
        );
    }

    #[test]
    fn unsupported_architecture_names_type_and_list() {
        let t = Temp::new("gpt2", r#"{"model_type": "gpt2", "n_layer": 12}"#);
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(msg.contains(&t.0.display().to_string()), "{msg}");
        assert!(msg.contains("\"gpt2\""), "{msg}");
        for ty in [
            "llama",
            "qwen2",
            "qwen3",
            "deepseek_v3",
            "qwen3_next",
            "nemotron_h",
            "qwen3_moe",
            "kimi_linear",
        ] {
            assert!(msg.contains(ty), "{msg}");
        }
        let t = Temp::new("notype", r#"{"hidden_size": 12}"#);
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(msg.contains("none (no model_type key)"), "{msg}");
    }

    #[test]
    fn bad_json_names_file_and_line() {
        let t = Temp::new("badjson", "{\n  \"model_type\": \"llama\",\n  oops\n}\n");
        let e = load_model_config(&t.0).unwrap_err();
        assert!(matches!(e, ConfigError::Json { line: 3, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.starts_with(&format!("{}:3:", t.0.display())), "{msg}");
        let e = load_model_config(Path::new("/nonexistent/config.json")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/config.json"));
    }

    #[test]
    fn bad_values_are_named() {
        let mut j = llama_json();
        j["num_attention_heads"] = "sixty-four".into();
        let t = Temp::new("badval", &j.to_string());
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(
            msg.contains("`num_attention_heads`") && msg.contains("integer"),
            "{msg}"
        );
        let n = models_dir().join("Nemotron-H-8B-Base-8K.config.reconstructed.json");
        let mut j: Value = serde_json::from_str(&std::fs::read_to_string(n).unwrap()).unwrap();
        j["hybrid_override_pattern"] = "M*X".into();
        let t = Temp::new("badpattern", &j.to_string());
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(
            msg.contains("hybrid_override_pattern") && msg.contains("'X'"),
            "{msg}"
        );
    }

    /// Found by the fuzzer: Qwen3-Next cut to one layer has no full-attention layer (every 4th
    /// is one), which used to panic in the layout code.
    #[test]
    fn a_layer_pattern_without_attention_is_refused() {
        let mut j: Value = serde_json::from_str(
            &std::fs::read_to_string(models_dir().join("Qwen3-Next-80B-A3B.config.json")).unwrap(),
        )
        .unwrap();
        j["num_hidden_layers"] = 1.into();
        let t = Temp::new("noattn", &j.to_string());
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(
            msg.contains("num_hidden_layers") && msg.contains("no attention layer"),
            "{msg}"
        );
    }

    /// Found by the fuzzer: one routed expert with eight active per token made the MoE step
    /// time infinite.
    #[test]
    fn more_active_experts_than_experts_is_refused() {
        let mut j: Value = serde_json::from_str(
            &std::fs::read_to_string(models_dir().join("Qwen3-Next-80B-A3B.config.json")).unwrap(),
        )
        .unwrap();
        j["num_experts"] = 1.into();
        let t = Temp::new("oneexpert", &j.to_string());
        let msg = load_model_config(&t.0).unwrap_err().to_string();
        assert!(
            msg.contains("num_experts_per_tok") && msg.contains("more than the 1 routed experts"),
            "{msg}"
        );
    }
}
