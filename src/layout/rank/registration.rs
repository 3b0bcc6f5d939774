//! What one rank registers with the transfer engine for a given [`Capacity`]: its buffers and
//! their byte lengths, and which unit families (KV pages, state slots, aux rows) each holds —
//! including the unified pool, where KV and mamba state share one raw buffer (docs/sglang-pd.md §1.6, §4).
//!
//! Units: bytes for every length and stride; page, slot and row ids are indices (page/slot 0 is
//! the padding sink).

use std::ops::Range;

use serde::Serialize;

use crate::layout::rank::RankLayout;

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
    /// FP4 KV only: the pages of the scale buffers (`RankLayout::kv_scale_regions`). They are
    /// no registered buffer's — nothing is ever written to them by a transfer — but they are
    /// part of every page a request decodes from, so the oracle checks them at landing.
    KvScale,
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
    /// these start above the mamba sub-pool (docs/sglang-pd.md §1.6).
    pub page_ids: Range<u32>,
    /// Slot ids requests may own (slot 0 is the sink).
    pub slot_ids: Range<u32>,
}

impl RankLayout {
    /// The registered buffers of this rank for `cap`, with the unit families each stores.
    ///
    /// Non-unified: every KV and state region is its own tensor of `(units + 1) * item_len` bytes
    /// (unit 0 is the sink). Unified (docs/sglang-pd.md §1.6, §4 "shared geometry"): one raw buffer; slot `s` of the
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::rank::tests::layout;

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
}
