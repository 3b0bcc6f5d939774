//! sglang's speculative-decoding flags (`--speculative-algorithm`, `--speculative-num-steps`,
//! `--speculative-eagle-topk`, `--speculative-num-draft-tokens`, `--speculative-draft-model-path`)
//! as one instance resolves them, and the shape of the draft model they imply
//! (`docs/sglang-pd.md` §19).
//!
//! The resolution follows `python/sglang/srt/server_args.py::ServerArgs._handle_speculative_decoding`
//! and `auto_choose_speculative_params` (the v0.5.4-era version, `docs/sglang-pd.md` §19.1);
//! the scenario layer (`scenario::speculative`) turns every refusal there into an exit-2 error
//! naming the flag. Pure data: no I/O.

use serde::Serialize;

use crate::spec::ModelSpec;

/// `--speculative-algorithm` values pdsim models. sglang's `NEXTN` is rewritten to `EAGLE`
/// at start-up (`if self.speculative_algorithm == "NEXTN": self.speculative_algorithm =
/// "EAGLE"`); pdsim keeps the spelling the user gave for the summary and treats it as EAGLE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// EAGLE(-2): a feature-level draft head over the target's top hidden state.
    Eagle,
    /// EAGLE-3: a token-level draft head over three fused target layers, its own small LM head.
    Eagle3,
    /// `NEXTN`: sglang's alias of EAGLE, used for DeepSeek's multi-token-prediction layers.
    Nextn,
}

impl Algorithm {
    /// The values the key takes (sglang's choices, lower case; `"none"` turns it off).
    pub const NAMES: &[&str] = &["none", "eagle", "eagle3", "nextn"];

    /// The algorithm a key value names (case-insensitive, as sglang's are upper case), or
    /// `Ok(None)` for `"none"`; `Err(())` for a value pdsim does not model.
    #[allow(clippy::result_unit_err)]
    pub fn parse(v: &str) -> Result<Option<Self>, ()> {
        match v.to_ascii_lowercase().as_str() {
            "none" => Ok(None),
            "eagle" => Ok(Some(Self::Eagle)),
            "eagle3" => Ok(Some(Self::Eagle3)),
            "nextn" => Ok(Some(Self::Nextn)),
            _ => Err(()),
        }
    }

    /// The value as the key spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eagle => "eagle",
            Self::Eagle3 => "eagle3",
            Self::Nextn => "nextn",
        }
    }
}

/// What the draft model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Draft {
    /// An EAGLE / EAGLE-3 head: one decoder layer of the target's shape (attention and a dense
    /// gated FFN; for a MoE target, a dense FFN of the target's active expert width), an input
    /// projection `fc` from `fc_inputs × hidden` to `hidden`, and an LM head of `vocab` rows
    /// (EAGLE-3 heads carry their own `draft_vocab_size` head; EAGLE-2 heads read the target's).
    EagleHead {
        /// Hidden states concatenated into `fc` (EAGLE: the token embedding and the target's
        /// top feature, 2; EAGLE-3: three fused target layers, 3).
        fc_inputs: u32,
        /// Rows of the LM head the draft runs every draft step.
        vocab: u32,
        /// Whether the head is the target's own (EAGLE-2 shares it: no extra memory).
        shared_head: bool,
    },
    /// DeepSeek's multi-token-prediction layer (`num_nextn_predict_layers = 1`), shipped in the
    /// target checkpoint: one decoder layer of the target's own shape (MLA + MoE), the `eh_proj`
    /// projection from `2 × hidden` to `hidden`, and the target's shared embedding and head.
    Mtp,
}

/// `draft_vocab_size` of the public EAGLE-3 heads for Llama-3.1 (`yuhuili/EAGLE3-LLaMA3.1-Instruct-8B`,
/// `lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B`: 32,000 of Llama-3's 128,256 tokens).
pub const EAGLE3_DRAFT_VOCAB: u32 = 32_000;

/// `speculative_eagle_topk`'s ceiling in PD: the metadata buffer that carries the prefill's
/// top-k to the decode has 16 slots (`MetadataBuffers.output_topk_p = torch.zeros((size, 16))`,
/// "speculative_eagle_topk should not be greater than 16 currently", `disaggregation/utils.py`).
pub const MAX_TOPK_PD: u32 = 16;

/// One instance's resolved speculative flags.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SpeculativeArgs {
    /// `--speculative-algorithm`.
    pub algorithm: Algorithm,
    /// `--speculative-num-steps`: draft depth (autoregressive draft steps per decode step).
    pub num_steps: u32,
    /// `--speculative-eagle-topk`: branches kept per draft step.
    pub eagle_topk: u32,
    /// `--speculative-num-draft-tokens`: tokens the target verifies per request per step (the
    /// tree's nodes, its root included).
    pub num_draft_tokens: u32,
    /// `--speculative-draft-model-path` as given (a label: pdsim sizes the draft from the
    /// target's shape, `draft`); `None` for DeepSeek MTP, whose path sglang sets to the model's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_model_path: Option<String>,
    /// The draft's shape.
    pub draft: Draft,
}

/// Whether `model` ships multi-token-prediction layers that sglang uses as the draft when
/// `--speculative-draft-model-path` is unset: sglang lists the architectures
/// (`DeepseekV3ForCausalLM`, `DeepseekV32ForCausalLM`, `Glm4MoeForCausalLM`, `BailingMoe…`);
/// pdsim's DeepSeek-shaped models (MLA attention with routed experts, no recurrent layers)
/// stand for them.
pub fn has_mtp_layers(model: &ModelSpec) -> bool {
    model.is_mla() && model.moe.is_some() && !model.is_hybrid()
}

/// `auto_choose_speculative_params`: `(num_steps, eagle_topk, num_draft_tokens)` when none of
/// the three is set — `(3, 1, 4)` for DeepSeek V2/V3 (`DeepseekV3ForCausalLM`), `(5, 4, 8)` for
/// Llama and every other architecture.
pub fn auto_params(model: &ModelSpec) -> (u32, u32, u32) {
    if has_mtp_layers(model) {
        (3, 1, 4)
    } else {
        (5, 4, 8)
    }
}

impl SpeculativeArgs {
    /// The draft model as a [`ModelSpec`] pdsim's step model and memory accounting read: one
    /// decoder layer (id `target.num_layers`, after the target's, so its KV bytes are labelled
    /// apart from the target's) whose FFN also holds the input projection's weights (`fc` /
    /// `eh_proj`: the same parameters and FLOPs per token, folded in rather than modelled as a
    /// block of their own).
    pub fn draft_model(&self, target: &ModelSpec) -> ModelSpec {
        let h = target.hidden_size;
        let mut m = target.clone();
        m.name = format!("{} draft ({})", target.name, self.algorithm.as_str());
        m.num_layers = 1;
        m.attention_layers = vec![target.num_layers];
        m.mamba = None;
        m.mamba_layers = Vec::new();
        m.swa = None;
        m.tie_word_embeddings = true;
        match self.draft {
            Draft::EagleHead {
                fc_inputs, vocab, ..
            } => {
                // A gated FFN of width w has 3·h·w parameters: `fc` (fc_inputs·h·h) adds
                // fc_inputs·h/3 to the width.
                let ffn = if target.dense_intermediate > 0 && target.moe.is_none() {
                    target.dense_intermediate
                } else {
                    target.moe.as_ref().map_or(target.dense_intermediate, |e| {
                        e.expert_intermediate * e.active
                    })
                };
                m.dense_ffn_layers = 1;
                m.dense_intermediate = ffn + (fc_inputs * h).div_ceil(3);
                m.dense_ffn_gated = true;
                m.moe = None;
                m.moe_layers = 0;
                m.vocab_size = vocab;
            }
            Draft::Mtp => {
                // The MoE layer as the target's; `eh_proj` (2·h·h) as a plain two-matrix block
                // of width h (2·h·h parameters).
                m.dense_ffn_layers = 1;
                m.dense_intermediate = h;
                m.dense_ffn_gated = false;
                m.moe_layers = u32::from(target.moe.is_some());
            }
        }
        m
    }

    /// Parameters of the draft the server loads beyond the target's: the whole draft less the
    /// head when it is the target's own (EAGLE-2 heads and DeepSeek MTP share it).
    pub fn draft_extra_params(&self, target: &ModelSpec) -> f64 {
        let d = self.draft_model(target);
        let shared = match self.draft {
            Draft::EagleHead { shared_head, .. } => shared_head,
            Draft::Mtp => true,
        };
        let head = if shared {
            f64::from(d.vocab_size) * f64::from(d.hidden_size)
        } else {
            0.0
        };
        d.total_params() - head
    }

    /// Tokens the draft proposes per request per step and the verify forward checks beyond
    /// the step's first (`num_draft_tokens − 1`): sglang's "proposed" count for its
    /// `spec_accept_rate` metric.
    pub fn proposed_per_step(&self) -> u32 {
        self.num_draft_tokens.saturating_sub(1)
    }

    /// The most draft tokens one step can accept: the tree's depth (`num_steps`), and no more
    /// than it verifies.
    pub fn max_accepted(&self) -> u32 {
        self.num_steps.min(self.proposed_per_step())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::preset;

    fn eagle3() -> SpeculativeArgs {
        SpeculativeArgs {
            algorithm: Algorithm::Eagle3,
            num_steps: 5,
            eagle_topk: 8,
            num_draft_tokens: 32,
            draft_model_path: Some("lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B".into()),
            draft: Draft::EagleHead {
                fc_inputs: 3,
                vocab: EAGLE3_DRAFT_VOCAB,
                shared_head: false,
            },
        }
    }

    /// The EAGLE-3 head for Llama-3.1-8B by hand: one layer (attention 4096·(32 + 2·8 + 32)·128
    /// = 41.9 M, FFN 3·4096·14336 = 176.2 M, two norms), `fc` 3·4096·4096 = 50.3 M, LM head
    /// 32,000·4096 = 131.1 M, a final norm: ≈ 399.5 M parameters (the checkpoint is ~0.8 GB in
    /// bf16).
    #[test]
    fn the_eagle3_head_of_llama_8b_has_its_published_size() {
        let t = preset("llama-3.1-8b").unwrap();
        let d = eagle3().draft_model(&t);
        assert_eq!(d.kv_layers(), 1);
        assert_eq!(d.attention_layers, vec![32]);
        let attn = 4096.0 * 32.0 * 128.0 * 2.0 + 4096.0 * 8.0 * 256.0;
        let ffn = 3.0 * 4096.0 * 14336.0;
        let fc = 3.0 * 4096.0 * 4096.0;
        let head = 32_000.0 * 4096.0;
        let want = attn + ffn + fc + head + 3.0 * 4096.0;
        assert!(
            (d.total_params() / want - 1.0).abs() < 1e-6,
            "{}",
            d.total_params()
        );
        assert_eq!(eagle3().draft_extra_params(&t), d.total_params());
        // Its KV per token is one layer of the target's.
        assert_eq!(
            d.kv_bytes_per_token_rank(1, 2) * 32,
            t.kv_bytes_per_token_rank(1, 2)
        );
    }

    /// DeepSeek-V3's MTP layer: one MLA + MoE layer (~11.6 B of the checkpoint's 14 B MTP
    /// weights; the rest is the embedding and head it shares with the main model).
    #[test]
    fn deepseek_mtp_is_one_moe_layer_sharing_the_head() {
        let t = preset("deepseek-v3").unwrap();
        assert!(has_mtp_layers(&t));
        assert_eq!(auto_params(&t), (3, 1, 4));
        assert_eq!(auto_params(&preset("llama-3.1-8b").unwrap()), (5, 4, 8));
        let s = SpeculativeArgs {
            algorithm: Algorithm::Nextn,
            num_steps: 3,
            eagle_topk: 1,
            num_draft_tokens: 4,
            draft_model_path: None,
            draft: Draft::Mtp,
        };
        let extra = s.draft_extra_params(&t);
        assert!((11.0e9..12.5e9).contains(&extra), "{extra}");
        assert_eq!(s.max_accepted(), 3);
        assert_eq!(s.draft_model(&t).attention_layers, vec![61]);
    }

    #[test]
    fn algorithm_names_parse_as_sglang_spells_them() {
        assert_eq!(Algorithm::parse("EAGLE3"), Ok(Some(Algorithm::Eagle3)));
        assert_eq!(Algorithm::parse("NEXTN"), Ok(Some(Algorithm::Nextn)));
        assert_eq!(Algorithm::parse("none"), Ok(None));
        assert_eq!(Algorithm::parse("ngram"), Err(()));
    }
}
