//! What the bytes of one unit (a page of a KV region, a slot of a state region, a row of an aux
//! buffer) are: the KV element encoding, the logical streams, and per-unit cell formats whose
//! [`Label`]s let the oracle compare two layouts byte for byte without comparing configurations.
//!
//! Units: bytes for every length, offset and column; `rows` count token rows (KV) or channel /
//! head rows (state).

use serde::Serialize;

use crate::layout::LayoutError;

/// The element encoding of the KV cache after the `--kv-cache-dtype` flag is resolved.
///
/// `auto` follows the model's activation dtype. fp8 is stored as `uint8` (1 byte, docs/sglang-pd.md §1.3). Two flags
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
    /// sglang's FP4 KV cache (`fp4_e2m1`): E2M1 nibbles, two a byte, in the registered K, V or
    /// latent regions, and one `uint8` scale per 16 elements in scale buffers the pool
    /// allocates but does not register (`RankLayout::kv_scale_regions`, docs/sglang-pd.md §29).
    Fp4E2m1,
}

impl KvDtype {
    /// Resolves a `--kv-cache-dtype` flag on a model whose activations are `activation_bytes` wide.
    pub fn resolve(flag: &str, activation_bytes: u32) -> Result<Self, LayoutError> {
        match flag {
            "auto" if activation_bytes == 2 => Ok(Self::Bf16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "fp8_e4m3" => Ok(Self::Fp8E4m3),
            "fp8_e5m2" => Ok(Self::Fp8E5m2),
            "fp4_e2m1" => Ok(Self::Fp4E2m1),
            _ => Err(LayoutError::UnknownKvDtype {
                flag: flag.to_string(),
            }),
        }
    }

    /// Bits per stored element of the registered data (scales apart): 16, 8, or 4 for FP4.
    pub fn bits(self) -> u32 {
        match self {
            Self::Bf16 => 16,
            Self::Fp8E4m3 | Self::Fp8E5m2 => 8,
            Self::Fp4E2m1 => 4,
        }
    }

    /// Bytes of `elems` stored elements of the registered data: `elems · bits / 8` (FP4 packs
    /// two a byte; sglang's FP4 rows are `head_dim // 2` bytes, every dim pdsim knows even).
    pub fn bytes_of(self, elems: u32) -> u32 {
        elems * self.bits() / 8
    }

    /// Whole bytes per element: 0 for FP4, which packs two elements a byte (sizes go through
    /// [`KvDtype::bytes_of`]).
    pub fn bytes(self) -> u32 {
        self.bits() / 8
    }

    /// Short name as printed in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bf16 => "bf16",
            Self::Fp8E4m3 => "fp8_e4m3",
            Self::Fp8E5m2 => "fp8_e5m2",
            Self::Fp4E2m1 => "fp4_e2m1",
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
    /// All full-attention layers of one page (`--enable-unified-memory`, docs/sglang-pd.md §1.6).
    PageEnvelope,
    /// FP4 only: the `uint8` scales of one layer's keys (`k_scale_buffer`), allocated, not
    /// registered for PD transfer.
    KScale,
    /// FP4 only: the scales of one layer's values (`v_scale_buffer`).
    VScale,
    /// FP4 MLA only: the scales of one layer's latent (`kv_scale_buffer`).
    LatentScale,
}

/// Which tensor of a mamba/GDN layer, or a whole unified slot envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatePart {
    /// Causal-conv state, `[conv_dim/tp, conv_kernel-1]` per slot.
    Conv,
    /// SSM (temporal) state, `[num_heads/tp, head_dim, state_size]` per slot.
    Temporal,
    /// All mamba layers' conv and temporal state of one slot (unified, docs/sglang-pd.md §1.6); for an SWA
    /// hybrid, all sliding-window layers' window of one request.
    SlotEnvelope,
    /// K or V of one sliding-window layer over one request's window (`StateType.SWA`): the
    /// last `ceil(window / page_size) + 1` pages of tokens, held as one per-request unit.
    SwaWindow,
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
    /// One metadata buffer (docs/sglang-pd.md §1.5); a column is the byte within the row.
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
