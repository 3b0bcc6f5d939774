//! Presets of the large MoE models issue 11 added: Qwen3-235B-A22B (GQA + MoE) and Kimi-Linear
//! 48B-A3B (an MLA hybrid: MLA full-attention layers, KDA linear-attention layers, MoE).
//!
//! Each preset equals, field for field but `name`, what [`crate::spec::hf`] imports from the
//! config copied into `scenarios/models/` (see its README for provenance and license); a test
//! in `hf` pins that.

use super::model::{Gqa, KvAttention, MambaKind, MambaSpec, ModelSpec, MoeSpec, dense_gqa};

/// Qwen3-235B-A22B (`Qwen/Qwen3-235B-A22B`, Apache-2.0): 94 layers of GQA attention (64 query
/// heads, 4 KV heads of 128) and a MoE block on every layer (128 experts of width 1536, 8
/// active, no shared expert); bf16 weights. `scenarios/models/qwen3-235b-a22b.config.json`.
pub(super) fn qwen3_235b_a22b(name: &str) -> ModelSpec {
    let mut s = dense_gqa(
        name,
        Gqa {
            layers: 94,
            hidden: 4096,
            q_heads: 64,
            kv_heads: 4,
            head_dim: 128,
            ffn: 12288,
            vocab: 151_936,
        },
    );
    // `decoder_sparse_step = 1`, `mlp_only_layers = []`: every layer is MoE, none dense; the
    // dense width only matters where a layer has a dense MLP (as the importer records it).
    s.dense_ffn_layers = 0;
    s.dense_intermediate = 0;
    s.moe = Some(MoeSpec {
        experts: 128,
        active: 8,
        expert_intermediate: 1536,
        shared_intermediate: 0,
    });
    s.moe_layers = 94;
    s
}

/// The 0-based ids of Kimi-Linear's layers from its 1-based `kda_layers` list (sglang
/// `KimiLinearConfig.is_kda_layer`: `(layer_idx + 1) in kda_layers`): `(kda, full attention)`.
pub(crate) fn kimi_layer_ids(layers: u32, kda_one_based: &[u32]) -> (Vec<u32>, Vec<u32>) {
    (0..layers).partition(|l| kda_one_based.contains(&(l + 1)))
}

/// Kimi-Linear-48B-A3B (`moonshotai/Kimi-Linear-48B-A3B-Instruct`, MIT): 27 layers, 7 of them
/// MLA full attention (1-based 4, 8, …, 24, 27) and 20 KDA linear attention (32 heads of 128,
/// short conv 4); MoE (256 experts of 1024, 8 active, 1 shared) on every layer after the first,
/// which is dense (9216). `scenarios/models/kimi-linear-48b-a3b.config.json` (reconstructed).
pub(super) fn kimi_linear_48b_a3b(name: &str) -> ModelSpec {
    let kda_one_based: Vec<u32> = (1..=26).filter(|l| l % 4 != 0).collect();
    let (mamba_layers, attention_layers) = kimi_layer_ids(27, &kda_one_based);
    ModelSpec {
        name: name.to_string(),
        num_layers: 27,
        hidden_size: 2304,
        q_heads: 32,
        attention: KvAttention::Mla {
            kv_lora_rank: 512,
            qk_rope_head_dim: 64,
            qk_nope_head_dim: 128,
            v_head_dim: 128,
            q_lora_rank: None,
        },
        attention_layers,
        mamba: Some(MambaSpec {
            kind: MambaKind::Kda,
            intermediate_size: 32 * 128,
            n_groups: 32,
            num_heads: 32,
            head_dim: 128,
            state_size: 128,
            conv_kernel: 4,
            // `KimiLinearStateShape.conv_shard_groups = [proj_size, proj_k_size, proj_k_size]`.
            conv_shard_groups: vec![32 * 128, 32 * 128, 32 * 128],
            conv_dtype_bytes: 2,
            ssm_dtype_bytes: 4,
        }),
        mamba_layers,
        swa: None,
        dense_ffn_layers: 1,
        dense_intermediate: 9216,
        dense_ffn_gated: true,
        moe: Some(MoeSpec {
            experts: 256,
            active: 8,
            expert_intermediate: 1024,
            shared_intermediate: 1024,
        }),
        moe_layers: 26,
        vocab_size: 163_840,
        tie_word_embeddings: false,
        weight_bytes: 2,
        activation_bytes: 2,
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::preset;

    #[test]
    fn parameter_counts_are_near_the_published_sizes() {
        // Published: Qwen3-235B-A22B 235B total / 22B active; Kimi-Linear 48B / 3B active.
        let near = |x: f64, want: f64, tol: f64| (x / want - 1.0).abs() < tol;
        let q = preset("qwen3-235b-a22b").unwrap();
        assert!(near(q.total_params(), 235e9, 0.02), "{}", q.total_params());
        assert!(near(q.active_params(), 22e9, 0.05), "{}", q.active_params());
        let k = preset("kimi-linear-48b-a3b").unwrap();
        assert!(near(k.total_params(), 48e9, 0.05), "{}", k.total_params());
        assert!(near(k.active_params(), 3e9, 0.2), "{}", k.active_params());
    }

    #[test]
    fn kimi_layer_sets_follow_the_config() {
        let k = preset("kimi-linear-48b-a3b").unwrap();
        assert_eq!(k.attention_layers, vec![3, 7, 11, 15, 19, 23, 26]);
        assert_eq!(k.mamba_layers.len(), 20);
        assert_eq!(k.mamba_layers[..4], [0, 1, 2, 4]);
        assert!(k.is_mla() && k.is_hybrid());
        // MLA latent over the 7 full-attention layers: 7 × 576 × 2 bytes a token, every rank.
        assert_eq!(k.kv_bytes_per_token_rank(4, 2), 8064);
    }
}
