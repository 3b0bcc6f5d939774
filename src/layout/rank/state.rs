//! Mamba / GDN state regions of one rank (`docs/sglang-pd.md` §1.4, §1.6): the per-rank
//! `Mamba2StateShape`, then per mamba layer a conv and a temporal region, or one slot envelope
//! holding every mamba layer when `--enable-unified-memory` is on.
//!
//! Units: `item_len` and row lengths in bytes; `shape` in elements; widths and heads in
//! channels and heads per rank.

use serde::Serialize;

use crate::layout::LayoutError;
use crate::layout::rank::cell::{Block, CellFormat, KvDtype, KvPart, StatePart, Stream};
use crate::spec::{MambaKind, ModelSpec};

/// One state region (one entry of `state_item_lens`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateRegion {
    /// Conv, temporal or the unified slot envelope.
    pub part: StatePart,
    /// Global layer id (`None` for the envelope).
    pub layer: Option<u32>,
    /// Bytes of one slot of this region.
    pub item_len: u64,
    /// The TP-sliced outermost dimension (`get_state_dim_per_tensor`): `conv_dim/tp` or
    /// `num_heads/tp`. `None` for the unified envelope, which publishes no dims (docs/sglang-pd.md §1.6).
    pub dim_per_tensor: Option<u32>,
    /// Per-slot shape, elements (`[conv_dim/tp, conv_kernel-1]`, `[heads/tp, head_dim, state]`).
    pub shape: Vec<u64>,
    /// Bytes per element.
    pub dtype_bytes: u32,
    /// `get_state_slice_outer_counts`: how many times the TP-sliced dimension repeats within
    /// one slot (the product of the axes before it). 1 except Kimi-Linear's transposed conv
    /// state `[conv_kernel - 1, channels/tp]` (`conv_slice_axis = 1`), where it is
    /// `conv_kernel - 1`: a TP reslice cuts every window row.
    #[serde(skip_serializing_if = "is_one")]
    pub outer_count: u32,
    #[serde(skip)]
    pub(crate) cell: CellFormat,
}

impl StateRegion {
    /// The unified pool's slot envelope around `cell`: one byte-addressed region of the
    /// cell's length, publishing no dims (docs/sglang-pd.md §1.6).
    fn envelope(cell: CellFormat) -> Self {
        Self {
            part: StatePart::SlotEnvelope,
            layer: None,
            item_len: cell.len(),
            dim_per_tensor: None,
            shape: vec![cell.len()],
            dtype_bytes: 1,
            outer_count: 1,
            cell,
        }
    }
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

/// Mamba2StateShape per rank (docs/sglang-pd.md §1.4).
struct MambaShape {
    /// Conv sub-block widths per rank (one entry for Mamba2).
    conv_groups_rank: Vec<u32>,
    /// Unsharded conv sub-block widths (published `conv_shard_groups`).
    conv_groups_global: Vec<u32>,
    conv_cols: u32,
    heads_rank: u32,
    temporal_row: u64,
    conv_row: u64,
    conv_b: u32,
    /// GDN key groups before padding (0 for Mamba2): when padding made every rank hold one
    /// replicated key group, rank `r` holds key head `r · n_groups / tp`.
    real_groups: u32,
    /// Channels of one GDN key group.
    head_k: u32,
    ssm_b: u32,
    head_dim: u32,
    state_size: u32,
    /// KDA: conv state stored `[conv_kernel - 1, channels]` (`conv_slice_axis = 1`).
    transposed: bool,
}

impl MambaShape {
    /// The first global channel of conv sub-block `g` on rank `rank` (width `w`): contiguous
    /// shards, except the GDN key sub-blocks (q, k) padded past their head count, where a rank
    /// holds a replica of key head `rank · n_groups / tp` (the channels that give the bytes
    /// their meaning, so the oracle compares replicas as equal content).
    fn conv_first_channel(&self, g: usize, rank: u32, tp: u32, w: u32) -> u32 {
        let padded = self.real_groups > 0 && !self.real_groups.is_multiple_of(tp);
        if padded && g < 2 {
            (u64::from(rank) * u64::from(self.real_groups) / u64::from(tp)) as u32 * self.head_k
        } else {
            rank * w
        }
    }
}

/// `n_groups + extra_groups_for_head_shards(n_groups, tp)` (sglang `configs/mamba_utils.py`,
/// the vLLM helper it copies).
pub(crate) fn padded_groups(n_groups: u32, tp: u32) -> u32 {
    if n_groups.is_multiple_of(tp) {
        n_groups
    } else {
        // n_groups + (tp - n_groups)
        tp
    }
}

fn mamba_shape(model: &ModelSpec, tp: u32) -> Result<Option<MambaShape>, LayoutError> {
    let Some(m) = &model.mamba else {
        return Ok(None);
    };
    if model.mamba_layers.is_empty() {
        return Ok(None);
    }
    let div = |what: &'static str, value: u32| -> Result<u32, LayoutError> {
        if value.is_multiple_of(tp) {
            Ok(value / tp)
        } else {
            Err(LayoutError::TpDoesNotDivide {
                model: model.name.clone(),
                what,
                value,
                tp,
            })
        }
    };
    // `Mamba2StateShape.create` pads the group count with `extra_groups_for_head_shards`:
    // `0 if n_groups % tp == 0 else tp - n_groups`, so a TP that does not divide the groups
    // gets exactly `tp` groups, each rank one (replicated) group. This is what Qwen3-Next at
    // attention TP 32 meets: 16 key heads, 32 ranks, each rank holds one key head replicated.
    // `KimiLinearStateShape.create` divides every width by TP (`divide` asserts), no padding.
    let n_groups = if m.kind == MambaKind::Kda {
        m.n_groups
    } else {
        padded_groups(m.n_groups, tp)
    };
    let conv_groups_global: Vec<u32> = match m.kind {
        MambaKind::Kda => m.conv_shard_groups.clone(),
        MambaKind::Gdn if !m.conv_shard_groups.is_empty() => {
            // [q | k | v]: the key sub-blocks are n_groups key heads wide, padded the same way.
            let head_k = m.conv_shard_groups[0] / m.n_groups.max(1);
            let mut g = m.conv_shard_groups.clone();
            g[0] = n_groups * head_k;
            g[1] = n_groups * head_k;
            g
        }
        _ => vec![m.intermediate_size + 2 * n_groups * m.state_size],
    };
    let conv_groups_rank = conv_groups_global
        .iter()
        .map(|&w| div("a conv sub-block width", w))
        .collect::<Result<Vec<_>, _>>()?;
    let heads_rank = div("the SSM head count", m.num_heads)?;
    let conv_row = u64::from(m.conv_kernel - 1) * u64::from(m.conv_dtype_bytes);
    let temporal_row =
        u64::from(m.head_dim) * u64::from(m.state_size) * u64::from(m.ssm_dtype_bytes);
    Ok(Some(MambaShape {
        conv_cols: m.conv_kernel - 1,
        conv_groups_global: if m.conv_shard_groups.is_empty() {
            Vec::new()
        } else {
            conv_groups_global
        },
        conv_groups_rank,
        heads_rank,
        temporal_row,
        conv_row,
        conv_b: m.conv_dtype_bytes,
        real_groups: if m.kind == MambaKind::Gdn && !m.conv_shard_groups.is_empty() {
            m.n_groups
        } else {
            0
        },
        head_k: m.conv_shard_groups.first().copied().unwrap_or(0) / m.n_groups.max(1),
        ssm_b: m.ssm_dtype_bytes,
        head_dim: m.head_dim,
        state_size: m.state_size,
        transposed: m.kind == MambaKind::Kda,
    }))
}

/// docs/sglang-pd.md §1.4 / §1.6: the state regions of rank `rank` of attention TP `tp` (empty without mamba
/// layers), and the `conv_shard_groups` it publishes with them.
pub(super) fn state_regions(
    model: &ModelSpec,
    tp: u32,
    rank: u32,
    unified: bool,
) -> Result<(Vec<StateRegion>, Vec<u32>), LayoutError> {
    let Some(s) = mamba_shape(model, tp)? else {
        return Ok((Vec::new(), Vec::new()));
    };
    let slot = RankSlot { s: &s, rank, tp };
    Ok(if unified {
        // The envelope publishes no dims, so no `conv_shard_groups` either.
        (vec![slot.envelope(&model.mamba_layers)], Vec::new())
    } else {
        (
            slot.per_layer_regions(&model.mamba_layers),
            s.conv_groups_global.clone(),
        )
    })
}

/// One rank's share of a mamba state slot: the blocks of its conv and temporal states, laid
/// out as one envelope or as one region per (layer, part).
struct RankSlot<'s> {
    s: &'s MambaShape,
    rank: u32,
    tp: u32,
}

impl RankSlot<'_> {
    /// The conv state of `layer`: one block per conv sub-block (`[q | k | v]` for GDN, one
    /// for Mamba2), each the rank's channels × the conv window.
    fn conv_blocks(&self, layer: u32) -> Vec<Block> {
        let s = self.s;
        if s.transposed {
            return self.transposed_conv_blocks(layer);
        }
        s.conv_groups_rank
            .iter()
            .enumerate()
            .map(|(g, &w)| Block {
                stream: Stream::State {
                    layer,
                    part: StatePart::Conv,
                    group: g as u32,
                    row_bytes: s.conv_row,
                },
                rows: w,
                row_bytes: s.conv_row,
                token_rows: false,
                first_col: u64::from(s.conv_first_channel(g, self.rank, self.tp, w)) * s.conv_row,
            })
            .collect()
    }

    /// KDA's conv state of `layer`: `[conv_kernel - 1, q_r | k_r | v_r]` per slot; each window
    /// row holds one element of every channel this rank owns. A (window row, sub-block) pair is
    /// its own stream, so a layout that kept channels outermost would label differently.
    fn transposed_conv_blocks(&self, layer: u32) -> Vec<Block> {
        let s = self.s;
        let n_groups = s.conv_groups_rank.len() as u32;
        (0..s.conv_cols)
            .flat_map(|w| {
                s.conv_groups_rank
                    .iter()
                    .enumerate()
                    .map(move |(g, &width)| (w, g, width))
            })
            .map(|(w, g, width)| Block {
                stream: Stream::State {
                    layer,
                    part: StatePart::Conv,
                    group: w * n_groups + g as u32,
                    row_bytes: u64::from(s.conv_b),
                },
                rows: width,
                row_bytes: u64::from(s.conv_b),
                token_rows: false,
                first_col: u64::from(self.rank * width) * u64::from(s.conv_b),
            })
            .collect()
    }

    /// The temporal (SSM) state of `layer`: the rank's heads, one row each.
    fn temporal_block(&self, layer: u32) -> Block {
        let s = self.s;
        Block {
            stream: Stream::State {
                layer,
                part: StatePart::Temporal,
                group: 0,
                row_bytes: s.temporal_row,
            },
            rows: s.heads_rank,
            row_bytes: s.temporal_row,
            token_rows: false,
            first_col: u64::from(self.rank * s.heads_rank) * s.temporal_row,
        }
    }

    /// With unified memory, one envelope: [conv rows × layers][temporal rows × layers], shapes
    /// already divided by TP.
    fn envelope(&self, layers: &[u32]) -> StateRegion {
        let mut blocks = Vec::new();
        for &l in layers {
            blocks.extend(self.conv_blocks(l));
        }
        for &l in layers {
            blocks.push(self.temporal_block(l));
        }
        StateRegion::envelope(CellFormat { blocks })
    }

    /// Without unified memory, every layer's conv region, then every layer's temporal region,
    /// each publishing its TP-sliced dims (`get_state_dim_per_tensor`).
    fn per_layer_regions(&self, layers: &[u32]) -> Vec<StateRegion> {
        let s = self.s;
        let conv_dim_rank: u32 = s.conv_groups_rank.iter().sum();
        let (conv_shape, conv_outer) = if s.transposed {
            (
                vec![u64::from(s.conv_cols), u64::from(conv_dim_rank)],
                s.conv_cols,
            )
        } else {
            (vec![u64::from(conv_dim_rank), u64::from(s.conv_cols)], 1)
        };
        let mut regions = Vec::with_capacity(2 * layers.len());
        for &l in layers {
            let cell = CellFormat {
                blocks: self.conv_blocks(l),
            };
            regions.push(StateRegion {
                part: StatePart::Conv,
                layer: Some(l),
                item_len: cell.len(),
                dim_per_tensor: Some(conv_dim_rank),
                shape: conv_shape.clone(),
                dtype_bytes: s.conv_b,
                outer_count: conv_outer,
                cell,
            });
        }
        for &l in layers {
            let cell = CellFormat {
                blocks: vec![self.temporal_block(l)],
            };
            regions.push(StateRegion {
                part: StatePart::Temporal,
                layer: Some(l),
                item_len: cell.len(),
                dim_per_tensor: Some(s.heads_rank),
                shape: vec![
                    u64::from(s.heads_rank),
                    u64::from(s.head_dim),
                    u64::from(s.state_size),
                ],
                dtype_bytes: s.ssm_b,
                outer_count: 1,
                cell,
            });
        }
        regions
    }
}

/// Tokens one request's sliding window occupies in the SWA pool: the window rounded up to
/// whole pages plus the page the newest token is on (`ceil(window / ps) + 1` pages).
pub(super) fn swa_window_tokens(window: u32, ps: u32) -> u32 {
    (window.div_ceil(ps) + 1) * ps
}

/// The `StateType.SWA` component of an SWA hybrid (docs/sglang-pd.md §1.1: `get_state_buf_infos()` of the SWA
/// sub-pool): per sliding-window layer a K and a V region (all K, then all V), each unit one
/// request's window; with unified memory one envelope holding every window (docs/sglang-pd.md §1.6). Empty for
/// other models.
pub(super) fn swa_regions(
    model: &ModelSpec,
    dtype: KvDtype,
    ps: u32,
    (h_r, first_head): (u32, u32),
    unified: bool,
) -> Vec<StateRegion> {
    let (Some(swa), crate::spec::KvAttention::Mha { head_dim, .. }) =
        (&model.swa, &model.attention)
    else {
        return Vec::new();
    };
    let tokens = swa_window_tokens(swa.window, ps);
    let head_bytes = head_dim * dtype.bytes();
    let block = |layer: u32, part: KvPart| Block {
        stream: Stream::Kv {
            layer,
            part,
            dtype,
            head_bytes,
        },
        rows: tokens,
        row_bytes: u64::from(h_r) * u64::from(head_bytes),
        token_rows: true,
        first_col: u64::from(first_head) * u64::from(head_bytes),
    };
    let shape = vec![u64::from(tokens), u64::from(h_r), u64::from(*head_dim)];
    if unified {
        let blocks: Vec<Block> = swa
            .layers
            .iter()
            .flat_map(|&l| [block(l, KvPart::K), block(l, KvPart::V)])
            .collect();
        let cell = CellFormat { blocks };
        return vec![StateRegion::envelope(cell)];
    }
    [KvPart::K, KvPart::V]
        .into_iter()
        .flat_map(|p| swa.layers.iter().map(move |&l| (l, p)))
        .map(|(l, p)| {
            let cell = CellFormat {
                blocks: vec![block(l, p)],
            };
            StateRegion {
                part: StatePart::SwaWindow,
                layer: Some(l),
                item_len: cell.len(),
                dim_per_tensor: None,
                shape: shape.clone(),
                dtype_bytes: dtype.bytes(),
                outer_count: 1,
                cell,
            }
        })
        .collect()
}
