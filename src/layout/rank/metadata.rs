//! The metadata ("aux") buffers of one rank (`docs/sglang-pd.md` §1.5): one row per metadata
//! slot, sent with a request's last chunk.
//!
//! Units: `item_len` in bytes.

use serde::Serialize;

use crate::layout::rank::cell::{Block, CellFormat, Stream};
use crate::spec::ModelSpec;

/// One metadata buffer (docs/sglang-pd.md §1.5): one row per metadata slot.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuxRegion {
    /// sglang's buffer name.
    pub name: &'static str,
    /// Bytes of one row.
    pub item_len: u64,
    #[serde(skip)]
    pub(crate) cell: CellFormat,
}

/// Rows of `MetadataBuffers` (docs/sglang-pd.md §1.5), with their padded byte lengths. `output_hidden_states` is
/// `hidden_size * activation bytes`.
pub(super) fn aux_regions(model: &ModelSpec) -> Vec<AuxRegion> {
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
