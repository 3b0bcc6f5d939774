//! What one attention-TP rank of one sglang instance registers for PD transfer
//! (`domain/sglang-pd.md` §1): KV regions, mamba/GDN state regions, aux rows, and — for a given
//! capacity — the registered buffers with their byte lengths.
//!
//! Units: `page_size` in tokens; every `item_len`, `len` and offset in bytes; page, slot and aux
//! row ids are indices (page/slot 0 is the padding sink).

use std::fmt::Write as _;
use std::ops::Range;

use serde::Serialize;

use super::LayoutError;
use crate::spec::{KvAttention, MambaKind, ModelSpec, ServerArgs};

/// The element encoding of the KV cache after the `--kv-cache-dtype` flag is resolved.
///
/// `auto` follows the model's activation dtype. fp8 is stored as `uint8` (1 byte, §1.3). Two flags
/// that resolve to the same encoding store identical bytes (`auto` and `bf16` on a bf16 model),
/// although sglang's first-contact check still compares the flag strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvDtype {
    /// bfloat16, 2 bytes.
    Bf16,
    /// float8 e4m3, 1 byte.
    Fp8E4m3,
    /// float8 e5m2, 1 byte.
    Fp8E5m2,
}

impl KvDtype {
    /// Resolves a `--kv-cache-dtype` flag on a model whose activations are `activation_bytes` wide.
    pub fn resolve(flag: &str, activation_bytes: u32) -> Result<Self, LayoutError> {
        match flag {
            "auto" if activation_bytes == 2 => Ok(Self::Bf16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "fp8_e4m3" => Ok(Self::Fp8E4m3),
            "fp8_e5m2" => Ok(Self::Fp8E5m2),
            _ => Err(LayoutError::UnknownKvDtype {
                flag: flag.to_string(),
            }),
        }
    }

    /// Bytes per element.
    pub fn bytes(self) -> u32 {
        match self {
            Self::Bf16 => 2,
            Self::Fp8E4m3 | Self::Fp8E5m2 => 1,
        }
    }

    /// Short name as printed in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Fp8E4m3 => "fp8_e4m3",
            Self::Fp8E5m2 => "fp8_e5m2",
        }
    }
}

/// Which half of a KV pair, or the MLA latent, or a whole unified page envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvPart {
    /// Keys of one layer.
    K,
    /// Values of one layer.
    V,
    /// MLA compressed latent plus rope key of one layer.
    Latent,
    /// All full-attention layers of one page (`--enable-unified-memory`, §1.6).
    PageEnvelope,
}

/// Which tensor of a mamba/GDN layer, or a whole unified slot envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatePart {
    /// Causal-conv state, `[conv_dim/tp, conv_kernel-1]` per slot.
    Conv,
    /// SSM (temporal) state, `[num_heads/tp, head_dim, state_size]` per slot.
    Temporal,
    /// All mamba layers' conv and temporal state of one slot (unified, §1.6).
    SlotEnvelope,
}

/// The logical stream a run of bytes belongs to. Two bytes are the same content iff they have the
/// same request, stream, token and column (see [`Label`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// K or V rows of one layer; a column is `head * head_bytes + byte`.
    Kv {
        /// Global layer id.
        layer: u32,
        /// K or V.
        part: KvPart,
        /// Element encoding.
        dtype: KvDtype,
        /// Bytes of one head of one token.
        head_bytes: u32,
    },
    /// MLA latent rows of one layer; a column is the byte within the latent row.
    Latent {
        /// Global layer id.
        layer: u32,
        /// Element encoding.
        dtype: KvDtype,
        /// Bytes of one token's latent row.
        row_bytes: u32,
    },
    /// One sub-block of one mamba tensor of one layer; a column is `row * row_bytes + byte` with
    /// `row` the global (unsharded) channel or head index within the sub-block.
    State {
        /// Global layer id.
        layer: u32,
        /// Conv or temporal.
        part: StatePart,
        /// Conv sub-block (`[q|k|v]` for GDN); 0 otherwise.
        group: u32,
        /// Bytes of one channel (conv) or one head (temporal).
        row_bytes: u64,
    },
    /// One metadata buffer (§1.5); a column is the byte within the row.
    Aux {
        /// Index in the aux list.
        index: u32,
        /// Row length.
        len: u64,
    },
}

/// The identity of one byte's content, independent of where a layout stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// Logical stream.
    pub stream: Stream,
    /// Request-relative token (0 for state and aux).
    pub token: u64,
    /// Column within the token's row of the stream, bytes.
    pub col: u64,
}

/// One block of a cell: `rows` rows of `row_bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Block {
    pub stream: Stream,
    pub rows: u32,
    pub row_bytes: u64,
    /// Rows are the page's tokens (KV); otherwise the whole block is one contiguous column run.
    pub token_rows: bool,
    /// Column of the first byte of row 0.
    pub first_col: u64,
}

impl Block {
    fn len(&self) -> u64 {
        u64::from(self.rows) * self.row_bytes
    }

    /// `(label at byte `off` of this block, bytes left in that label-contiguous segment)` for a
    /// unit at request-relative position `pos` with `rows_per_unit` token rows.
    fn label_at(&self, off: u64, pos: u64) -> (Label, u64) {
        if self.token_rows {
            let (r, b) = (off / self.row_bytes, off % self.row_bytes);
            let token = pos * u64::from(self.rows) + r;
            let label = Label {
                stream: self.stream,
                token,
                col: self.first_col + b,
            };
            (label, self.row_bytes - b)
        } else {
            let label = Label {
                stream: self.stream,
                token: 0,
                col: self.first_col + off,
            };
            (label, self.len() - off)
        }
    }
}

/// What one unit (a page of a KV region, a slot of a state region, a row of an aux buffer) holds:
/// its blocks in byte order. Equal formats at the same request position hold equal bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct CellFormat {
    pub blocks: Vec<Block>,
}

impl CellFormat {
    /// Bytes of one unit.
    pub fn len(&self) -> u64 {
        self.blocks.iter().map(Block::len).sum()
    }

    /// The label of byte `off` of a unit at request position `pos`, and how many bytes from there
    /// on continue it contiguously (same stream and token, column +1 per byte).
    pub fn label_at(&self, mut off: u64, pos: u64) -> Option<(Label, u64)> {
        for b in &self.blocks {
            if off < b.len() {
                return Some(b.label_at(off, pos));
            }
            off -= b.len();
        }
        None
    }

    /// The same format with layer ids and K/V erased: two regions of different layers (or K and V
    /// of one layer) with the same geometry compare equal.
    pub fn shape(&self) -> CellFormat {
        let blocks = self
            .blocks
            .iter()
            .map(|b| {
                let stream = match b.stream {
                    Stream::Kv {
                        dtype, head_bytes, ..
                    } => Stream::Kv {
                        layer: 0,
                        part: KvPart::K,
                        dtype,
                        head_bytes,
                    },
                    Stream::Latent {
                        dtype, row_bytes, ..
                    } => Stream::Latent {
                        layer: 0,
                        dtype,
                        row_bytes,
                    },
                    Stream::State {
                        part,
                        group,
                        row_bytes,
                        ..
                    } => Stream::State {
                        layer: 0,
                        part,
                        group,
                        row_bytes,
                    },
                    s @ Stream::Aux { .. } => s,
                };
                Block { stream, ..*b }
            })
            .collect();
        CellFormat { blocks }
    }

    /// What [`CellFormat::shape`] erases, per block: `(layer, K/V)`.
    pub fn ids(&self) -> Vec<(u32, Option<KvPart>)> {
        self.blocks
            .iter()
            .map(|b| match b.stream {
                Stream::Kv { layer, part, .. } => (layer, Some(part)),
                Stream::Latent { layer, .. } | Stream::State { layer, .. } => (layer, None),
                Stream::Aux { index, .. } => (index, None),
            })
            .collect()
    }
}

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
    /// `num_heads/tp`. `None` for the unified envelope, which publishes no dims (§1.6).
    pub dim_per_tensor: Option<u32>,
    /// Per-slot shape, elements (`[conv_dim/tp, conv_kernel-1]`, `[heads/tp, head_dim, state]`).
    pub shape: Vec<u64>,
    /// Bytes per element.
    pub dtype_bytes: u32,
    #[serde(skip)]
    pub(crate) cell: CellFormat,
}

/// One metadata buffer (§1.5): one row per metadata slot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuxRegion {
    /// sglang's buffer name.
    pub name: &'static str,
    /// Bytes of one row.
    pub item_len: u64,
    #[serde(skip)]
    pub(crate) cell: CellFormat,
}

/// The layout one attention-TP rank registers (`kv_args`, §1.1), for one model and server args.
#[derive(Clone, Debug, PartialEq)]
pub struct RankLayout {
    /// Model name.
    pub model: String,
    /// Attention TP of the instance.
    pub attn_tp_size: u32,
    /// This rank.
    pub rank: u32,
    /// Tokens per page.
    pub page_size: u32,
    /// The `--kv-cache-dtype` flag as given (sglang compares peers by this string).
    pub kv_cache_dtype: String,
    /// The resolved encoding.
    pub kv_dtype: KvDtype,
    /// `--enable-unified-memory`.
    pub unified: bool,
    /// KV is an MLA latent.
    pub mla: bool,
    /// The model has mamba/GDN layers.
    pub hybrid: bool,
    /// Total KV heads of the model (`total_kv_head_num`; 1 for MLA).
    pub total_kv_heads: u32,
    /// KV heads this rank stores, `max(1, H_kv / tp)` (§1.2).
    pub kv_heads_per_rank: u32,
    /// First global KV head this rank stores (`r * h_r`, or `r / (tp / H_kv)` when replicated).
    pub first_kv_head: u32,
    /// KV regions in registration order (MHA: all K layers then all V layers).
    pub kv_regions: Vec<KvRegion>,
    /// `kv_layer_ids` as published. pdsim publishes none for every pool (plain MHA and unified
    /// pools publish none in sglang, §1.1; see the module README for hybrids), so peers pair
    /// regions positionally.
    pub kv_layer_ids: Vec<u32>,
    /// State regions (all conv layers then all temporal layers; or one slot envelope).
    pub state_regions: Vec<StateRegion>,
    /// Unsharded conv sub-block widths (`[key_dim, key_dim, value_dim]` for GDN), published with
    /// the per-layer conv regions; empty for Mamba2 and for the unified envelope.
    pub conv_shard_groups: Vec<u32>,
    /// Aux buffers (§1.5), in order.
    pub aux: Vec<AuxRegion>,
}

/// How many pages, state slots and metadata rows an instance holds, beyond the sinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Capacity {
    /// KV pages usable by requests (page 0, the sink, comes on top in non-unified pools).
    pub pages: u32,
    /// Mamba state slots usable by requests (slot 0, the sink, comes on top).
    pub slots: u32,
    /// Metadata rows (`MetadataBuffers` size).
    pub aux_rows: u32,
}

/// Which family of units a byte range holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Space {
    /// KV pages.
    Kv,
    /// State slots of one group of equally sized state regions (conv layers, temporal layers,
    /// or the unified envelope).
    State(u32),
    /// Rows of one aux buffer.
    Aux(u32),
}

/// A unit family laid out inside a registered buffer: unit `u` of `region` (an index within its
/// space) occupies `[u * stride, (u + 1) * stride)` for `u` in `units`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnitMap {
    /// The unit family.
    pub space: Space,
    /// Region index within the space.
    pub region: u32,
    /// Bytes per unit.
    pub stride: u64,
    /// Unit ids that belong to requests (the sink and any gap are excluded).
    pub units: Range<u32>,
}

/// One registered memory region of one rank (after sglang's dedup of identical (ptr, len) pairs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Buffer {
    /// Human name (`kv[3]`, `state[0]`, `raw`, `aux:output_ids`).
    pub name: String,
    /// Registered bytes; a write past this fails the transfer (rc −1).
    pub len: u64,
    /// The unit families stored in it.
    pub maps: Vec<UnitMap>,
}

/// The registered buffers of one rank for a given capacity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Registration {
    /// Registered buffers.
    pub buffers: Vec<Buffer>,
    /// Buffer of each KV region.
    pub kv_buffer: Vec<u32>,
    /// Buffer of each state region.
    pub state_buffer: Vec<u32>,
    /// Buffer of each aux region.
    pub aux_buffer: Vec<u32>,
    /// Page ids requests may own. Unified pools keep KV at the high end of the raw buffer, so
    /// these start above the mamba sub-pool (§1.6).
    pub page_ids: Range<u32>,
    /// Slot ids requests may own (slot 0 is the sink).
    pub slot_ids: Range<u32>,
}

/// Rows of `MetadataBuffers` (§1.5), with their padded byte lengths. `output_hidden_states` is
/// `hidden_size * activation bytes`.
fn aux_regions(model: &ModelSpec) -> Vec<AuxRegion> {
    let row = |name: &'static str, item_len: u64| (name, item_len);
    let rows = [
        row("output_ids", 64),
        row("cached_tokens", 64),
        row("output_token_logprobs_val", 64),
        row("output_token_logprobs_idx", 64),
        row("output_top_logprobs_val", 512),
        row("output_top_logprobs_idx", 512),
        row("output_topk_p", 64),
        row("output_topk_index", 128),
        row(
            "output_hidden_states",
            u64::from(model.hidden_size) * u64::from(model.activation_bytes),
        ),
        row("bootstrap_room", 64),
    ];
    rows.into_iter()
        .enumerate()
        .map(|(i, (name, item_len))| AuxRegion {
            name,
            item_len,
            cell: CellFormat {
                blocks: vec![Block {
                    stream: Stream::Aux {
                        index: i as u32,
                        len: item_len,
                    },
                    rows: 1,
                    row_bytes: item_len,
                    token_rows: false,
                    first_col: 0,
                }],
            },
        })
        .collect()
}

/// Mamba2StateShape per rank (§1.4).
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
    ssm_b: u32,
    head_dim: u32,
    state_size: u32,
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
    // sglang pads n_groups up to a multiple of TP (`extra_groups_for_head_shards`).
    let n_groups = m.n_groups.div_ceil(tp) * tp;
    let conv_groups_global: Vec<u32> = match m.kind {
        MambaKind::Gdn if !m.conv_shard_groups.is_empty() => m.conv_shard_groups.clone(),
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
        ssm_b: m.ssm_dtype_bytes,
        head_dim: m.head_dim,
        state_size: m.state_size,
    }))
}

impl RankLayout {
    /// The layout attention-TP rank `rank` of an instance of `model` with `server` registers.
    ///
    /// Errors: an unknown KV dtype flag, unified memory on a model without hybrid layers (§9),
    /// a TP that neither divides nor is a multiple of the KV head count, a mamba dimension TP does
    /// not divide, or MHA with different K and V head dims (no preset has one).
    pub fn new(model: &ModelSpec, server: &ServerArgs, rank: u32) -> Result<Self, LayoutError> {
        let tp = server.attn_tp_size;
        let ps = server.page_size;
        if tp == 0 {
            return Err(LayoutError::ZeroTp);
        }
        if ps == 0 {
            return Err(LayoutError::ZeroPageSize);
        }
        if rank >= tp {
            return Err(LayoutError::RankOutOfRange { rank, tp });
        }
        let hybrid = model.is_hybrid();
        if server.enable_unified_memory && !hybrid {
            return Err(LayoutError::UnifiedNeedsHybrid {
                model: model.name.clone(),
            });
        }
        let dtype = KvDtype::resolve(&server.kv_cache_dtype, model.activation_bytes)?;
        let b = dtype.bytes();
        let ps64 = u64::from(ps);
        let layers = &model.attention_layers;

        // §1.2: heads per rank and which global heads this rank holds.
        let (total_heads, h_r, first_head) = match model.attention {
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
        };

        // Per-layer KV blocks (one page of one layer), §1.3.
        let kv_block = |layer: u32, part: KvPart| -> Block {
            match model.attention {
                KvAttention::Mha { head_dim, .. } => {
                    let head_bytes = head_dim * b;
                    Block {
                        stream: Stream::Kv {
                            layer,
                            part,
                            dtype,
                            head_bytes,
                        },
                        rows: ps,
                        row_bytes: u64::from(h_r) * u64::from(head_bytes),
                        token_rows: true,
                        first_col: u64::from(first_head) * u64::from(head_bytes),
                    }
                }
                KvAttention::Mla {
                    kv_lora_rank,
                    qk_rope_head_dim,
                    ..
                } => {
                    let row_bytes = (kv_lora_rank + qk_rope_head_dim) * b;
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
        let mla = model.is_mla();
        let per_layer_parts: &[KvPart] = if mla {
            &[KvPart::Latent]
        } else {
            &[KvPart::K, KvPart::V]
        };

        let kv_regions: Vec<KvRegion> = if server.enable_unified_memory {
            // §1.6: one page envelope [L0_K·ps | L0_V·ps | L1_K·ps | …].
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

        // §1.4 / §1.6: mamba state.
        let shape = mamba_shape(model, tp)?;
        let mut state_regions = Vec::new();
        let mut conv_shard_groups = Vec::new();
        if let Some(s) = &shape {
            let conv_blocks = |layer: u32| -> Vec<Block> {
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
                        first_col: u64::from(rank * w) * s.conv_row,
                    })
                    .collect()
            };
            let temporal_block = |layer: u32| Block {
                stream: Stream::State {
                    layer,
                    part: StatePart::Temporal,
                    group: 0,
                    row_bytes: s.temporal_row,
                },
                rows: s.heads_rank,
                row_bytes: s.temporal_row,
                token_rows: false,
                first_col: u64::from(rank * s.heads_rank) * s.temporal_row,
            };
            let conv_dim_rank: u32 = s.conv_groups_rank.iter().sum();
            if server.enable_unified_memory {
                // [conv rows × layers][temporal rows × layers], shapes already divided by TP.
                let mut blocks = Vec::new();
                for &l in &model.mamba_layers {
                    blocks.extend(conv_blocks(l));
                }
                for &l in &model.mamba_layers {
                    blocks.push(temporal_block(l));
                }
                let cell = CellFormat { blocks };
                state_regions.push(StateRegion {
                    part: StatePart::SlotEnvelope,
                    layer: None,
                    item_len: cell.len(),
                    dim_per_tensor: None,
                    shape: vec![cell.len()],
                    dtype_bytes: 1,
                    cell,
                });
            } else {
                for &l in &model.mamba_layers {
                    let cell = CellFormat {
                        blocks: conv_blocks(l),
                    };
                    state_regions.push(StateRegion {
                        part: StatePart::Conv,
                        layer: Some(l),
                        item_len: cell.len(),
                        dim_per_tensor: Some(conv_dim_rank),
                        shape: vec![u64::from(conv_dim_rank), u64::from(s.conv_cols)],
                        dtype_bytes: s.conv_b,
                        cell,
                    });
                }
                for &l in &model.mamba_layers {
                    let cell = CellFormat {
                        blocks: vec![temporal_block(l)],
                    };
                    state_regions.push(StateRegion {
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
                        cell,
                    });
                }
                conv_shard_groups = s.conv_groups_global.clone();
            }
        }

        Ok(RankLayout {
            model: model.name.clone(),
            attn_tp_size: tp,
            rank,
            page_size: ps,
            kv_cache_dtype: server.kv_cache_dtype.clone(),
            kv_dtype: dtype,
            unified: server.enable_unified_memory,
            mla,
            hybrid,
            total_kv_heads: total_heads,
            kv_heads_per_rank: h_r,
            first_kv_head: first_head,
            kv_regions,
            kv_layer_ids: Vec::new(),
            state_regions,
            conv_shard_groups,
            aux: aux_regions(model),
        })
    }

    /// Layouts of every attention-TP rank of an instance, rank order.
    pub fn all_ranks(model: &ModelSpec, server: &ServerArgs) -> Result<Vec<Self>, LayoutError> {
        (0..server.attn_tp_size.max(1))
            .map(|r| Self::new(model, server, r))
            .collect()
    }

    /// MLA attention on a model with mamba layers (Kimi-Linear type, `is_hybrid_mla_backend`).
    pub fn hybrid_mla(&self) -> bool {
        self.mla && self.hybrid
    }

    /// `kv_item_lens`, bytes.
    pub fn kv_item_lens(&self) -> Vec<u64> {
        self.kv_regions.iter().map(|r| r.item_len).collect()
    }

    /// `state_item_lens` of the MAMBA component, bytes.
    pub fn state_item_lens(&self) -> Vec<u64> {
        self.state_regions.iter().map(|r| r.item_len).collect()
    }

    /// `state_dim_per_tensor` of the MAMBA component (empty for the unified envelope).
    pub fn state_dim_per_tensor(&self) -> Vec<u32> {
        self.state_regions
            .iter()
            .filter_map(|r| r.dim_per_tensor)
            .collect()
    }

    /// `aux_item_lens`, bytes.
    pub fn aux_item_lens(&self) -> Vec<u64> {
        self.aux.iter().map(|a| a.item_len).collect()
    }

    /// Bytes of one page across all KV regions of this rank.
    pub fn kv_page_bytes(&self) -> u64 {
        self.kv_regions.iter().map(|r| r.item_len).sum()
    }

    /// Bytes of one state slot across all state regions of this rank.
    pub fn state_slot_bytes(&self) -> u64 {
        self.state_regions.iter().map(|r| r.item_len).sum()
    }

    /// Bytes of one metadata row across all aux buffers.
    pub fn aux_row_bytes(&self) -> u64 {
        self.aux.iter().map(|a| a.item_len).sum()
    }

    /// The state group of each state region: regions of one group share their item length
    /// (non-unified: conv layers are group 0, temporal layers group 1; unified: the envelope).
    pub fn state_group(&self, region: u32) -> (u32, u32) {
        let n_conv = self
            .state_regions
            .iter()
            .filter(|r| r.part == StatePart::Conv)
            .count() as u32;
        match self.state_regions[region as usize].part {
            StatePart::Conv | StatePart::SlotEnvelope => (0, region),
            StatePart::Temporal => (1, region - n_conv),
        }
    }

    /// Number of state groups (see [`RankLayout::state_group`]).
    pub fn state_groups(&self) -> u32 {
        match self.state_regions.first().map(|r| r.part) {
            None => 0,
            Some(StatePart::SlotEnvelope) => 1,
            Some(_) => 2,
        }
    }

    /// Regions of one state group: `(first region index, count, item_len)`.
    pub fn state_group_regions(&self, group: u32) -> (u32, u32, u64) {
        let idx: Vec<u32> = (0..self.state_regions.len() as u32)
            .filter(|&i| self.state_group(i).0 == group)
            .collect();
        let first = idx.first().copied().unwrap_or(0);
        let item = self
            .state_regions
            .get(first as usize)
            .map_or(0, |r| r.item_len);
        (first, idx.len() as u32, item)
    }

    /// The registered buffers of this rank for `cap`, with the unit families each stores.
    ///
    /// Non-unified: every KV and state region is its own tensor of `(units + 1) * item_len` bytes
    /// (unit 0 is the sink). Unified (§1.6, §4 "shared geometry"): one raw buffer; slot `s` of the
    /// mamba sub-pool at `s * M` from the low end (slot 0 the sink), KV page `p` at `p * E`, the
    /// KV sub-pool at the high end: its first page is the first multiple of `E` above the last
    /// slot, so page ids start at `ceil((slots + 1) * M / E)`. Aux buffers hold `aux_rows` rows.
    pub fn registration(&self, cap: &Capacity) -> Registration {
        let mut buffers = Vec::new();
        let mut kv_buffer = Vec::new();
        let mut state_buffer = Vec::new();
        let slot_ids = 1..cap.slots + 1;
        let page_ids;
        if self.unified {
            let e = self.kv_regions[0].item_len;
            let m = self.state_regions.first().map_or(0, |r| r.item_len);
            let low = u64::from(cap.slots + 1) * m;
            let first_page = u32::try_from(low.div_ceil(e)).expect("page id fits u32");
            page_ids = first_page..first_page + cap.pages;
            let mut maps = vec![UnitMap {
                space: Space::Kv,
                region: 0,
                stride: e,
                units: page_ids.clone(),
            }];
            if m > 0 {
                maps.push(UnitMap {
                    space: Space::State(0),
                    region: 0,
                    stride: m,
                    units: slot_ids.clone(),
                });
                state_buffer.push(0);
            }
            buffers.push(Buffer {
                name: "raw".into(),
                len: u64::from(page_ids.end) * e,
                maps,
            });
            kv_buffer.push(0);
        } else {
            page_ids = 1..cap.pages + 1;
            for (j, r) in self.kv_regions.iter().enumerate() {
                kv_buffer.push(buffers.len() as u32);
                buffers.push(Buffer {
                    name: format!("kv[{j}]"),
                    len: u64::from(cap.pages + 1) * r.item_len,
                    maps: vec![UnitMap {
                        space: Space::Kv,
                        region: j as u32,
                        stride: r.item_len,
                        units: page_ids.clone(),
                    }],
                });
            }
            for (j, r) in self.state_regions.iter().enumerate() {
                let (group, idx) = self.state_group(j as u32);
                state_buffer.push(buffers.len() as u32);
                buffers.push(Buffer {
                    name: format!("state[{j}]"),
                    len: u64::from(cap.slots + 1) * r.item_len,
                    maps: vec![UnitMap {
                        space: Space::State(group),
                        region: idx,
                        stride: r.item_len,
                        units: slot_ids.clone(),
                    }],
                });
            }
        }
        let mut aux_buffer = Vec::new();
        for (i, a) in self.aux.iter().enumerate() {
            aux_buffer.push(buffers.len() as u32);
            buffers.push(Buffer {
                name: format!("aux:{}", a.name),
                len: u64::from(cap.aux_rows) * a.item_len,
                maps: vec![UnitMap {
                    space: Space::Aux(i as u32),
                    region: 0,
                    stride: a.item_len,
                    units: 0..cap.aux_rows,
                }],
            });
        }
        Registration {
            buffers,
            kv_buffer,
            state_buffer,
            aux_buffer,
            page_ids,
            slot_ids: if self.state_regions.is_empty() {
                0..0
            } else {
                slot_ids
            },
        }
    }
}

// ----------------------------------------------------------------------------------------------
// Rendering: `pdsim layout` table and JSON.

/// One named dimension of an item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dim {
    /// What it counts (`tokens`, `heads`, `head_dim`, `bytes`, …).
    pub name: String,
    /// How many.
    pub size: u64,
}

fn dims(pairs: &[(&str, u64)]) -> Vec<Dim> {
    pairs
        .iter()
        .map(|&(n, size)| Dim {
            name: n.to_string(),
            size,
        })
        .collect()
}

/// A run of consecutive regions with the same kind, item length and dims (for display).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegionGroup {
    /// `k`, `v`, `latent`, `page_envelope`, `conv`, `temporal`, `slot_envelope`.
    pub kind: String,
    /// Regions in the group.
    pub count: u32,
    /// Global layer ids (empty for envelopes).
    pub layers: Vec<u32>,
    /// Bytes of one page/slot of one region.
    pub item_len: u64,
    /// Dims of one page/slot of one region, outermost first; their product is `item_len`.
    pub dims: Vec<Dim>,
    /// TP-sliced dim published for state (`state_dim_per_tensor`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dim_per_tensor: Option<u32>,
}

fn kv_dims(l: &RankLayout, r: &KvRegion) -> Vec<Dim> {
    let ps = u64::from(l.page_size);
    let b = u64::from(l.kv_dtype.bytes());
    match r.cell.blocks.as_slice() {
        [blk] => match blk.stream {
            Stream::Kv { head_bytes, .. } => dims(&[
                ("tokens", ps),
                ("heads", u64::from(l.kv_heads_per_rank)),
                ("head_dim", u64::from(head_bytes) / b),
                ("bytes", b),
            ]),
            _ => dims(&[("tokens", ps), ("latent", blk.row_bytes / b), ("bytes", b)]),
        },
        _ => dims(&[("tokens", ps), ("entry_bytes", r.item_len / ps)]),
    }
}

fn state_dims(r: &StateRegion) -> Vec<Dim> {
    let names: &[&str] = match r.part {
        StatePart::Conv => &["channels", "kernel-1"],
        StatePart::Temporal => &["heads", "head_dim", "state"],
        StatePart::SlotEnvelope => &["entry_bytes"],
    };
    let mut out: Vec<(&str, u64)> = names.iter().copied().zip(r.shape.iter().copied()).collect();
    if r.part != StatePart::SlotEnvelope {
        out.push(("bytes", u64::from(r.dtype_bytes)));
    }
    dims(&out)
}

/// `(kind, layer, item_len, dims, dim_per_tensor)` of one region.
type RegionRow = (String, Option<u32>, u64, Vec<Dim>, Option<u32>);

fn group_regions(items: impl Iterator<Item = RegionRow>) -> Vec<RegionGroup> {
    let mut out: Vec<RegionGroup> = Vec::new();
    for (kind, layer, item_len, dims, dpt) in items {
        if let Some(last) = out.last_mut()
            && last.kind == kind
            && last.item_len == item_len
            && last.dims == dims
            && last.dim_per_tensor == dpt
        {
            last.count += 1;
            last.layers.extend(layer);
            continue;
        }
        out.push(RegionGroup {
            kind,
            count: 1,
            layers: layer.into_iter().collect(),
            item_len,
            dims,
            dim_per_tensor: dpt,
        });
    }
    out
}

fn snake<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

impl RankLayout {
    /// KV regions grouped for display.
    pub fn kv_groups(&self) -> Vec<RegionGroup> {
        group_regions(
            self.kv_regions
                .iter()
                .map(|r| (snake(&r.part), r.layer, r.item_len, kv_dims(self, r), None)),
        )
    }

    /// State regions grouped for display.
    pub fn state_groups_display(&self) -> Vec<RegionGroup> {
        group_regions(self.state_regions.iter().map(|r| {
            (
                snake(&r.part),
                r.layer,
                r.item_len,
                state_dims(r),
                r.dim_per_tensor,
            )
        }))
    }
}

#[derive(Serialize)]
struct RegionsView<'a> {
    count: usize,
    order: &'static str,
    layer_ids_published: &'a [u32],
    item_lens_distinct: Vec<u64>,
    groups: Vec<RegionGroup>,
}

#[derive(Serialize)]
struct StateView {
    count: usize,
    conv_shard_groups: Vec<u32>,
    groups: Vec<RegionGroup>,
}

#[derive(Serialize)]
struct RankLayoutView<'a> {
    model: &'a str,
    attn_tp_size: u32,
    rank: u32,
    page_size: u32,
    kv_cache_dtype: &'a str,
    kv_dtype: KvDtype,
    kv_dtype_bytes: u32,
    unified: bool,
    mla: bool,
    hybrid: bool,
    kv_heads_per_rank: u32,
    first_kv_head: u32,
    kv: RegionsView<'a>,
    state: StateView,
    aux: &'a [AuxRegion],
}

impl RankLayout {
    fn kv_order(&self) -> &'static str {
        if self.unified {
            "page envelope: [L0_K|L0_V|L1_K|...] per page, all layers in one region"
        } else if self.mla {
            "one latent region per layer"
        } else {
            "all K layers, then all V layers"
        }
    }
}

impl Serialize for RankLayout {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut distinct: Vec<u64> = self.kv_item_lens();
        distinct.dedup();
        RankLayoutView {
            model: &self.model,
            attn_tp_size: self.attn_tp_size,
            rank: self.rank,
            page_size: self.page_size,
            kv_cache_dtype: &self.kv_cache_dtype,
            kv_dtype: self.kv_dtype,
            kv_dtype_bytes: self.kv_dtype.bytes(),
            unified: self.unified,
            mla: self.mla,
            hybrid: self.hybrid,
            kv_heads_per_rank: self.kv_heads_per_rank,
            first_kv_head: self.first_kv_head,
            kv: RegionsView {
                count: self.kv_regions.len(),
                order: self.kv_order(),
                layer_ids_published: &self.kv_layer_ids,
                item_lens_distinct: distinct,
                groups: self.kv_groups(),
            },
            state: StateView {
                count: self.state_regions.len(),
                conv_shard_groups: self.conv_shard_groups.clone(),
                groups: self.state_groups_display(),
            },
            aux: &self.aux,
        }
        .serialize(s)
    }
}

fn layer_list(layers: &[u32]) -> String {
    if layers.is_empty() {
        return "-".into();
    }
    let contiguous = layers.windows(2).all(|w| w[1] == w[0] + 1);
    if contiguous && layers.len() > 2 {
        return format!("{}-{}", layers[0], layers[layers.len() - 1]);
    }
    if layers.len() <= 6 {
        return layers
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
    }
    format!(
        "{},{},...,{} ({} layers)",
        layers[0],
        layers[1],
        layers[layers.len() - 1],
        layers.len()
    )
}

fn dims_text(dims: &[Dim]) -> String {
    dims.iter()
        .map(|d| format!("{} {}", d.size, d.name))
        .collect::<Vec<_>>()
        .join(" x ")
}

/// The human table of `pdsim layout`: what one rank registers.
pub fn render_table(l: &RankLayout) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: attention TP {} (rank {}), page size {} tokens, --kv-cache-dtype {} ({}, {} B), unified memory {}",
        l.model,
        l.attn_tp_size,
        l.rank,
        l.page_size,
        l.kv_cache_dtype,
        l.kv_dtype.name(),
        l.kv_dtype.bytes(),
        if l.unified { "on" } else { "off" }
    );
    let heads = if l.mla {
        "MLA latent, replicated on every rank".to_string()
    } else if l.attn_tp_size > l.total_kv_heads {
        format!(
            "{} of {} KV heads per rank (head {} here, replicated)",
            l.kv_heads_per_rank, l.total_kv_heads, l.first_kv_head
        )
    } else {
        format!(
            "{} of {} KV heads per rank (heads {}..{} here)",
            l.kv_heads_per_rank,
            l.total_kv_heads,
            l.first_kv_head,
            l.first_kv_head + l.kv_heads_per_rank
        )
    };
    let _ = writeln!(
        s,
        "\nKV regions: {} ({}; layer ids not published; {})",
        l.kv_regions.len(),
        l.kv_order(),
        heads
    );
    if let [r] = l.kv_regions.as_slice()
        && r.part == KvPart::PageEnvelope
    {
        let mut layers: Vec<u32> = r.cell.ids().iter().map(|x| x.0).collect();
        layers.dedup();
        let _ = writeln!(
            s,
            "  the envelope holds {} layer blocks of {} token rows each (layers {})",
            r.cell.blocks.len(),
            l.page_size,
            layer_list(&layers)
        );
    }
    let table = |s: &mut String, groups: &[RegionGroup]| {
        let _ = writeln!(
            s,
            "  {:<14} {:>5}  {:<24} {:>14}  dims of one item",
            "kind", "count", "layers", "item_len (B)"
        );
        for g in groups {
            let _ = writeln!(
                s,
                "  {:<14} {:>5}  {:<24} {:>14}  {}{}",
                g.kind,
                g.count,
                layer_list(&g.layers),
                g.item_len,
                dims_text(&g.dims),
                g.dim_per_tensor
                    .map(|d| format!("  (dim_per_tensor {d})"))
                    .unwrap_or_default()
            );
        }
    };
    table(&mut s, &l.kv_groups());
    if l.state_regions.is_empty() {
        let _ = writeln!(s, "\nState regions: none");
    } else {
        let _ = writeln!(
            s,
            "\nState regions (MAMBA): {}, one slot per request{}",
            l.state_regions.len(),
            if l.unified {
                "; no dim_per_tensor (cannot be TP-resliced)".to_string()
            } else if l.conv_shard_groups.is_empty() {
                String::new()
            } else {
                format!("; conv_shard_groups {:?}", l.conv_shard_groups)
            }
        );
        table(&mut s, &l.state_groups_display());
    }
    if l.unified {
        let _ = writeln!(
            s,
            "  both regions are one raw buffer (registered once): KV grows down from the high end, mamba up from the low end; slot 0 is the sink"
        );
    }
    let _ = writeln!(
        s,
        "\nAux rows: {} buffers, {} B per request",
        l.aux.len(),
        l.aux_row_bytes()
    );
    for a in &l.aux {
        let _ = writeln!(s, "  {:<28} {:>6}", a.name, a.item_len);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::preset;

    pub(crate) fn args(tp: u32, ps: u32, dtype: &str, unified: bool) -> ServerArgs {
        crate::layout::test_args(tp, ps, dtype, unified)
    }

    fn layout(model: &str, tp: u32, ps: u32, dtype: &str, unified: bool) -> RankLayout {
        RankLayout::new(&preset(model).unwrap(), &args(tp, ps, dtype, unified), 0).unwrap()
    }

    const TPS: [u32; 4] = [1, 2, 4, 8];

    /// Asserts every KV region of every TP has the listed item_len (one value per TP).
    fn kv_vector(model: &str, regions: usize, ps: u32, dtype: &str, want: [u64; 4]) {
        for (tp, w) in TPS.iter().zip(want) {
            let l = layout(model, *tp, ps, dtype, false);
            assert_eq!(l.kv_regions.len(), regions, "{model} tp{tp}");
            assert!(
                l.kv_item_lens().iter().all(|&x| x == w),
                "{model} ps{ps} {dtype} tp{tp}: {:?} != {w}",
                &l.kv_item_lens()[..1]
            );
        }
    }

    #[test]
    fn section_5_1_dense_and_mla_item_lens() {
        for (model, regions) in [("llama-3.1-8b", 64), ("llama-3.1-70b", 160)] {
            kv_vector(model, regions, 1, "auto", [2048, 1024, 512, 256]);
            kv_vector(model, regions, 1, "fp8_e4m3", [1024, 512, 256, 128]);
            kv_vector(model, regions, 16, "bf16", [32768, 16384, 8192, 4096]);
            kv_vector(model, regions, 16, "fp8_e5m2", [16384, 8192, 4096, 2048]);
            kv_vector(model, regions, 64, "auto", [131072, 65536, 32768, 16384]);
            kv_vector(model, regions, 64, "fp8_e4m3", [65536, 32768, 16384, 8192]);
        }
        for (ps, bf, fp) in [(1, 1152, 576), (16, 18432, 9216), (64, 73728, 36864)] {
            kv_vector("deepseek-v3", 61, ps, "auto", [bf; 4]);
            kv_vector("deepseek-v3", 61, ps, "fp8_e4m3", [fp; 4]);
        }
    }

    #[test]
    fn section_5_1_hybrid_kv_parts() {
        kv_vector("qwen3-next-80b-a3b", 24, 1, "auto", [1024, 512, 512, 512]);
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            1,
            "fp8_e4m3",
            [512, 256, 256, 256],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            16,
            "auto",
            [16384, 8192, 8192, 8192],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            16,
            "fp8_e4m3",
            [8192, 4096, 4096, 4096],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            64,
            "auto",
            [65536, 32768, 32768, 32768],
        );
        kv_vector(
            "qwen3-next-80b-a3b",
            24,
            64,
            "fp8_e4m3",
            [32768, 16384, 16384, 16384],
        );
        for ps in [1u64, 16, 64] {
            let p = ps as u32;
            kv_vector(
                "nemotron-h-8b",
                8,
                p,
                "auto",
                [2048, 1024, 512, 256].map(|x| x * ps),
            );
            kv_vector(
                "nemotron-h-8b",
                8,
                p,
                "fp8_e4m3",
                [1024, 512, 256, 128].map(|x| x * ps),
            );
        }
        // Replicated heads: Qwen3-Next has 2 KV heads, so tp 4 holds head r / 2.
        let l = RankLayout::new(
            &preset("qwen3-next-80b-a3b").unwrap(),
            &args(4, 16, "auto", false),
            3,
        )
        .unwrap();
        assert_eq!((l.kv_heads_per_rank, l.first_kv_head), (1, 1));
    }

    #[test]
    fn section_5_1_mamba_state() {
        let cases = [
            (
                "qwen3-next-80b-a3b",
                72,
                [49152, 24576, 12288, 6144],
                [8192, 4096, 2048, 1024],
                [2097152, 1048576, 524288, 262144],
                [32, 16, 8, 4],
            ),
            (
                "nemotron-h-8b",
                48,
                [61440, 30720, 15360, 7680],
                [10240, 5120, 2560, 1280],
                [4194304, 2097152, 1048576, 524288],
                [128, 64, 32, 16],
            ),
        ];
        for (model, regions, conv, conv_dim, temporal, heads) in cases {
            for (i, tp) in TPS.iter().enumerate() {
                let l = layout(model, *tp, 16, "auto", false);
                assert_eq!(l.state_regions.len(), regions, "{model}");
                let half = regions / 2;
                for (j, r) in l.state_regions.iter().enumerate() {
                    let (want_len, want_dim, part) = if j < half {
                        (conv[i], conv_dim[i], StatePart::Conv)
                    } else {
                        (temporal[i], heads[i], StatePart::Temporal)
                    };
                    assert_eq!(r.part, part);
                    assert_eq!(r.item_len, want_len, "{model} tp{tp} region {j}");
                    assert_eq!(r.dim_per_tensor, Some(want_dim), "{model} tp{tp}");
                }
                // fp8 KV does not change mamba state.
                let f = layout(model, *tp, 16, "fp8_e4m3", false);
                assert_eq!(f.state_item_lens(), l.state_item_lens());
            }
        }
        let q = layout("qwen3-next-80b-a3b", 2, 16, "auto", false);
        assert_eq!(q.conv_shard_groups, vec![2048, 2048, 4096]);
        assert!(
            layout("nemotron-h-8b", 2, 16, "auto", false)
                .conv_shard_groups
                .is_empty()
        );
    }

    #[test]
    fn section_5_2_unified_envelopes() {
        let qwen_bf16 = [
            (1, [24576, 12288, 12288, 12288]),
            (16, [393216, 196608, 196608, 196608]),
            (64, [1572864, 786432, 786432, 786432]),
        ];
        let nem_bf16 = [
            (1, [16384, 8192, 4096, 2048]),
            (16, [262144, 131072, 65536, 32768]),
            (64, [1048576, 524288, 262144, 131072]),
        ];
        for (model, table, m) in [
            (
                "qwen3-next-80b-a3b",
                qwen_bf16,
                [77_266_944u64, 38_633_472, 19_316_736, 9_658_368],
            ),
            (
                "nemotron-h-8b",
                nem_bf16,
                [102_137_856, 51_068_928, 25_534_464, 12_767_232],
            ),
        ] {
            for (ps, bf) in table {
                for (i, tp) in TPS.iter().enumerate() {
                    for (dtype, div) in [("auto", 1), ("fp8_e5m2", 2)] {
                        let l = layout(model, *tp, ps, dtype, true);
                        assert_eq!(l.kv_item_lens(), vec![bf[i] / div], "{model} ps{ps} tp{tp}");
                        assert_eq!(l.state_item_lens(), vec![m[i]], "{model} tp{tp} M");
                        assert!(l.state_dim_per_tensor().is_empty());
                        assert!(l.conv_shard_groups.is_empty());
                        assert!(l.kv_layer_ids.is_empty());
                    }
                }
            }
        }
    }

    #[test]
    fn aux_rows_follow_section_1_5() {
        let l = layout("qwen3-next-80b-a3b", 1, 16, "auto", false);
        assert_eq!(
            l.aux_item_lens(),
            vec![64, 64, 64, 64, 512, 512, 64, 128, 2048 * 2, 64]
        );
    }

    #[test]
    fn unified_on_a_dense_model_is_an_error() {
        for m in ["llama-3.1-8b", "deepseek-v3"] {
            let e =
                RankLayout::new(&preset(m).unwrap(), &args(1, 16, "auto", true), 0).unwrap_err();
            assert!(matches!(e, LayoutError::UnifiedNeedsHybrid { .. }), "{e}");
            assert!(e.to_string().contains("--enable-unified-memory"));
        }
    }

    #[test]
    fn bad_dtype_and_tp_are_errors() {
        let m = preset("llama-3.1-8b").unwrap();
        let e = RankLayout::new(&m, &args(1, 16, "fp4", false), 0).unwrap_err();
        assert!(e.to_string().contains("fp4"), "{e}");
        assert!(RankLayout::new(&m, &args(3, 16, "auto", false), 0).is_err());
        assert!(RankLayout::new(&m, &args(2, 16, "auto", false), 2).is_err());
    }

    #[test]
    fn registration_lengths_and_unified_geometry() {
        let cap = Capacity {
            pages: 10,
            slots: 3,
            aux_rows: 4,
        };
        let l = layout("llama-3.1-8b", 1, 16, "auto", false);
        let reg = l.registration(&cap);
        assert_eq!(reg.buffers.len(), 64 + 10);
        assert_eq!(reg.buffers[0].len, 11 * 32768);
        assert_eq!(reg.page_ids, 1..11);
        assert_eq!(reg.slot_ids, 0..0);
        assert_eq!(reg.buffers[64 + 4].len, 4 * 512);

        let u = layout("qwen3-next-80b-a3b", 2, 16, "auto", true);
        let reg = u.registration(&cap);
        // One raw buffer holding both sub-pools, registered once, plus 10 aux buffers.
        assert_eq!(reg.buffers.len(), 11);
        let (e, m) = (196_608u64, 38_633_472u64);
        let first = (4 * m).div_ceil(e) as u32;
        assert_eq!(reg.page_ids, first..first + 10);
        assert_eq!(reg.buffers[0].len, u64::from(first + 10) * e);
        assert_eq!(reg.slot_ids, 1..4);
        // KV pages sit strictly above the last slot.
        assert!(u64::from(first) * e >= 4 * m);
    }

    #[test]
    fn table_and_json_show_regions() {
        let l = layout("qwen3-next-80b-a3b", 2, 16, "auto", false);
        let t = render_table(&l);
        assert!(t.contains("KV regions: 24"), "{t}");
        assert!(t.contains("8192"), "{t}");
        assert!(t.contains("State regions (MAMBA): 72"), "{t}");
        assert!(t.contains("dim_per_tensor 4096"), "{t}");
        let j = serde_json::to_value(&l).unwrap();
        assert_eq!(j["kv"]["count"], 24);
        assert_eq!(j["kv"]["groups"][0]["kind"], "k");
        assert_eq!(j["kv"]["groups"][0]["count"], 12);
        assert_eq!(j["kv"]["groups"][0]["item_len"], 8192);
        assert_eq!(j["kv"]["groups"][0]["dims"][1]["name"], "heads");
        assert_eq!(j["kv"]["groups"][0]["dims"][1]["size"], 1);
        assert_eq!(j["state"]["groups"][0]["dim_per_tensor"], 4096);
        assert_eq!(j["state"]["groups"][1]["item_len"], 1_048_576);
        let u = layout("nemotron-h-8b", 2, 64, "auto", true);
        let j = serde_json::to_value(&u).unwrap();
        assert_eq!(j["kv"]["groups"][0]["item_len"], 524_288);
        assert_eq!(j["state"]["groups"][0]["item_len"], 51_068_928);
        assert!(render_table(&u).contains("raw buffer"));
    }
}
