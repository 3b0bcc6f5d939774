//! KV regions of one rank (`docs/sglang-pd.md` §1.2, §1.3, §1.6): which KV heads the rank
//! holds, and the regions it registers — per layer K and V (MHA) or latent (MLA), or one page
//! envelope holding every full-attention layer when `--enable-unified-memory` is on.
//!
//! Units: `page_size` in tokens; `item_len` and every row length in bytes.

use serde::Serialize;

use crate::layout::LayoutError;
use crate::layout::rank::cell::{Block, CellFormat, KvDtype, KvPart, Stream};
use crate::spec::{KvAttention, ModelSpec};

/// One KV region (one entry of `kv_item_lens`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvRegion {
    /// K, V, latent or the unified page envelope.
    pub part: KvPart,
    /// Global layer id (`None` for the envelope, which holds all full-attention layers).
    pub layer: Option<u32>,
    /// Bytes of one page of this region.
    pub item_len: u64,
    #[serde(skip)]
    pub(crate) cell: CellFormat,
}

/// docs/sglang-pd.md §1.2: `(total KV heads, KV heads per rank, first global KV head of this rank)` for rank
/// `rank` of attention TP `tp`. MLA has one replicated latent "head".
pub(super) fn kv_heads(
    model: &ModelSpec,
    tp: u32,
    rank: u32,
) -> Result<(u32, u32, u32), LayoutError> {
    Ok(match model.attention {
        KvAttention::Mha {
            kv_heads,
            head_dim,
            v_head_dim,
        } => {
            if head_dim != v_head_dim {
                return Err(LayoutError::Unsupported {
                    model: model.name.clone(),
                    what: "MHA with different K and V head dims",
                });
            }
            if !(kv_heads.is_multiple_of(tp) || tp.is_multiple_of(kv_heads)) {
                return Err(LayoutError::TpDoesNotDivide {
                    model: model.name.clone(),
                    what: "the KV head count",
                    value: kv_heads,
                    tp,
                });
            }
            let h_r = model.kv_heads_per_rank(tp);
            let first = if tp <= kv_heads {
                rank * h_r
            } else {
                // Replicated heads: QKVParallelLinear gives rank r head r / (tp / H).
                rank / (tp / kv_heads)
            };
            (kv_heads, h_r, first)
        }
        KvAttention::Mla { .. } => (1, 1, 0),
    })
}

/// One page of one layer's `part` as token rows of `heads` head slices of `head_bytes` each,
/// starting at global head `first` (the rank's columns of the full row): a KV buffer of an MHA
/// pool, or an FP4 pool's scale buffer.
fn head_rows_block(
    layer: u32,
    part: KvPart,
    dtype: KvDtype,
    head_bytes: u32,
    ps: u32,
    (heads, first): (u32, u32),
) -> Block {
    Block {
        stream: Stream::Kv {
            layer,
            part,
            dtype,
            head_bytes,
        },
        rows: ps,
        row_bytes: u64::from(heads) * u64::from(head_bytes),
        token_rows: true,
        first_col: u64::from(first) * u64::from(head_bytes),
    }
}

/// docs/sglang-pd.md §1.3 / §1.6: the KV regions in registration order, for a rank holding `h_r` KV heads from
/// global head `first_head` on, with pages of `ps` tokens.
pub(super) fn kv_regions(
    model: &ModelSpec,
    dtype: KvDtype,
    ps: u32,
    (h_r, first_head): (u32, u32),
    unified: bool,
) -> Vec<KvRegion> {
    let ps64 = u64::from(ps);
    // Sliding-window layers are not in the full-attention pool (they are the SWA state).
    let layers = &model.full_attention_layers();
    // Per-layer KV blocks (one page of one layer), docs/sglang-pd.md §1.3.
    let kv_block = |layer: u32, part: KvPart| -> Block {
        match model.attention {
            KvAttention::Mha { head_dim, .. } => head_rows_block(
                layer,
                part,
                dtype,
                dtype.bytes_of(head_dim),
                ps,
                (h_r, first_head),
            ),
            KvAttention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
                ..
            } => {
                let row_bytes = dtype.bytes_of(kv_lora_rank + qk_rope_head_dim);
                Block {
                    stream: Stream::Latent {
                        layer,
                        dtype,
                        row_bytes,
                    },
                    rows: ps,
                    row_bytes: u64::from(row_bytes),
                    token_rows: true,
                    first_col: 0,
                }
            }
        }
    };
    let per_layer_parts: &[KvPart] = if model.is_mla() {
        &[KvPart::Latent]
    } else {
        &[KvPart::K, KvPart::V]
    };

    let kv_regions: Vec<KvRegion> = if unified {
        // docs/sglang-pd.md §1.6: one page envelope [L0_K·ps | L0_V·ps | L1_K·ps | …].
        let blocks: Vec<Block> = layers
            .iter()
            .flat_map(|&l| per_layer_parts.iter().map(move |&p| (l, p)))
            .map(|(l, p)| kv_block(l, p))
            .collect();
        let cell = CellFormat { blocks };
        vec![KvRegion {
            part: KvPart::PageEnvelope,
            layer: None,
            item_len: cell.len(),
            cell,
        }]
    } else {
        // MHA: all K layers, then all V layers; MLA: one latent region per layer.
        per_layer_parts
            .iter()
            .flat_map(|&p| layers.iter().map(move |&l| (l, p)))
            .map(|(l, p)| {
                let cell = CellFormat {
                    blocks: vec![kv_block(l, p)],
                };
                KvRegion {
                    part: p,
                    layer: Some(l),
                    item_len: cell.len(),
                    cell,
                }
            })
            .collect()
    };
    debug_assert!(kv_regions.iter().all(|r| r.item_len % ps64 == 0));
    kv_regions
}

/// docs/sglang-pd.md §29: the scale buffers of sglang's FP4 KV pools, in allocation order — MHA
/// every layer's `k_scale_buffer`, then every `v_scale_buffer` (`[m, (n · head_dim) // 16]`
/// uint8, `n` the rank's KV heads); MLA every `kv_scale_buffer` (`[m, dim // 16]`). One page of
/// a region is `ps` rows of those bytes. Empty for every other dtype. `get_contiguous_buf_infos`
/// is the base classes' (`MLATokenToKVPool`: the data buffers only; `MHATokenToKVPool`: each
/// layer through the FP4 pool's dequantising `_get_key_buffer`, docs/sglang-pd.md §29.2), so
/// these are allocated, counted in the pool's size, and never registered for PD transfer;
/// pdsim registers the packed data, as the MLA pool does.
pub(super) fn kv_scale_regions(
    model: &ModelSpec,
    dtype: KvDtype,
    ps: u32,
    (h_r, first_head): (u32, u32),
) -> Vec<KvRegion> {
    if dtype != KvDtype::Fp4E2m1 {
        return Vec::new();
    }
    let block = crate::spec::model::FP4_KV_SCALE_BLOCK as u32;
    let (parts, head_bytes, heads): (&[KvPart], u32, u32) = match model.attention {
        // One scale byte per 16 elements of a head row: `head_dim // 16` a head (pdsim's
        // presets have head dims that are multiples of 16, so the row splits by head).
        KvAttention::Mha { head_dim, .. } => {
            (&[KvPart::KScale, KvPart::VScale], head_dim / block, h_r)
        }
        KvAttention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
            ..
        } => (
            &[KvPart::LatentScale],
            (kv_lora_rank + qk_rope_head_dim) / block,
            1,
        ),
    };
    let first = if model.is_mla() { 0 } else { first_head };
    let layers = model.full_attention_layers();
    parts
        .iter()
        .flat_map(|&p| layers.iter().map(move |&l| (l, p)))
        .map(|(layer, part)| {
            let cell = CellFormat {
                blocks: vec![head_rows_block(
                    layer,
                    part,
                    dtype,
                    head_bytes,
                    ps,
                    (heads, first),
                )],
            };
            KvRegion {
                part,
                layer: Some(layer),
                item_len: cell.len(),
                cell,
            }
        })
        .collect()
}
