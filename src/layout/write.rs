//! The vocabulary of one planned RDMA write group, shared by its producer and its consumer:
//! [`crate::layout::PairPlan::writes`] emits [`Write`]s, the corruption oracle
//! ([`crate::layout::DecodeMemory`]) applies them. It sits below both so that neither has to
//! know the other to speak about a write.
//!
//! Units: every offset, stride and length in bytes; region, page, slot and aux-row ids are
//! indices.

use serde::Serialize;

/// Which destination regions a [`Write`] covers (indices into the decode rank's lists).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteDst {
    /// KV regions `first..first + count`.
    Kv {
        /// First region.
        first: u32,
        /// Regions.
        count: u32,
    },
    /// State regions `first..first + count` (all in one state group).
    State {
        /// First region.
        first: u32,
        /// Regions.
        count: u32,
    },
    /// Aux buffer `index`.
    Aux {
        /// Buffer.
        index: u32,
    },
}

impl WriteDst {
    /// Number of regions.
    pub fn count(&self) -> u32 {
        match *self {
            Self::Kv { count, .. } | Self::State { count, .. } => count,
            Self::Aux { .. } => 1,
        }
    }
}

/// How the pieces of a [`Write`] repeat: piece `(u, r)` for `u < units`, `r < rows` starts at
/// destination byte `dst_offset + u * dst_unit_stride + r * dst_row_stride` and carries the
/// source stream from position `src_offset + u * src_unit_len + r * src_row_stride`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Pattern {
    /// Source units (pages) covered.
    pub units: u32,
    /// Pieces per unit (tokens, for the head-sliced path).
    pub rows: u32,
    /// Destination bytes between rows.
    pub dst_row_stride: u64,
    /// Destination bytes between units.
    pub dst_unit_stride: u64,
    /// Source bytes between rows.
    pub src_row_stride: u64,
}

impl Pattern {
    /// A single contiguous piece.
    pub const ONE: Pattern = Pattern {
        units: 1,
        rows: 1,
        dst_row_stride: 0,
        dst_unit_stride: 0,
        src_row_stride: 0,
    };

    /// Pieces in the pattern.
    pub fn pieces(&self) -> u64 {
        u64::from(self.units) * u64::from(self.rows)
    }
}

/// A group of RDMA writes at run granularity, as the oracle needs them.
///
/// The same pattern is written into each destination region of `dst` (region `dst.first + x`
/// receives source region `src_first_region + x` of `prefill_rank`). The source is a stream of
/// consecutive source units (pages, a slot or an aux row) of `src_unit_len` bytes each; source
/// unit `j` holds the content the sender pairs with destination unit `intended + j` — its
/// request-relative identity. Offsets are bytes from the start of each region's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Write {
    /// Receiving decode rank.
    pub decode_rank: u32,
    /// Sending prefill rank.
    pub prefill_rank: u32,
    /// Destination regions.
    pub dst: WriteDst,
    /// Source region paired with `dst`'s first.
    pub src_first_region: u32,
    /// Destination byte offset of piece (0, 0).
    pub dst_offset: u64,
    /// Source stream position of piece (0, 0), bytes from the start of source unit 0.
    pub src_offset: u64,
    /// The decode page / slot / aux row the sender pairs with source unit 0.
    pub intended: u32,
    /// Bytes of one source unit (the prefill's item_len).
    pub src_unit_len: u64,
    /// Bytes per piece.
    pub len: u64,
    /// How pieces repeat.
    pub pattern: Pattern,
}

impl Write {
    /// Bytes this write group moves (all regions).
    pub fn bytes(&self) -> u64 {
        self.len * self.pattern.pieces() * u64::from(self.dst.count())
    }

    /// RDMA write entries (all regions).
    pub fn entries(&self) -> u64 {
        self.pattern.pieces() * u64::from(self.dst.count())
    }
}
