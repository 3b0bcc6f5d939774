//! Applying planned writes to the oracle's view of decode memory: where each piece lands, whether
//! it carries the owner's expected bytes (by comparing [labels](crate::layout::rank::Label) of the
//! source and destination layouts), and whom it hits.
//!
//! Units: bytes for every offset and length; unit ids are page, slot or aux-row indices.

use std::collections::BTreeSet;

use super::boxes::{Box3, byte_boxes};
use super::{ApplyOutcome, DecodeMemory, Family, Frag, RequestId, family};
use crate::layout::checks::{self, PdError};
use crate::layout::rank::{CellFormat, RankLayout, Space};
use crate::layout::write::{Write, WriteDst};

impl DecodeMemory {
    /// Applies one chunk's planned writes of `writer`, sent from the prefill ranks `prefill`
    /// (whose layouts say what the source bytes are). [`DecodeMemory::apply`] is the same with
    /// the layouts taken from a [`crate::layout::PairPlan`].
    pub fn apply_writes(
        &mut self,
        prefill: &[RankLayout],
        writer: RequestId,
        writes: &[Write],
    ) -> ApplyOutcome {
        let mut out = ApplyOutcome::default();
        let mut victims = BTreeSet::new();
        for w in writes {
            if let Err(e) = self.apply_write(prefill, writer, w, &mut victims)
                && out.error.is_none()
            {
                out.error = Some(e);
            }
        }
        if let Some(e) = &out.error
            && let Some(r) = self.reqs.get_mut(&writer)
            && r.error.is_none()
        {
            r.error = Some(e.clone());
        }
        out.victims = victims.into_iter().collect();
        out
    }

    fn apply_write(
        &mut self,
        prefill: &[RankLayout],
        writer: RequestId,
        w: &Write,
        victims: &mut BTreeSet<RequestId>,
    ) -> Result<(), PdError> {
        let rank = w.decode_rank as usize;
        let layout = &self.layouts[rank];
        let reg = &self.regs[rank];
        let (space, first, count, buf_idx) = match w.dst {
            WriteDst::Kv { first, count } => {
                (Space::Kv, first, count, reg.kv_buffer[first as usize])
            }
            WriteDst::State { first, count } => {
                let (g, idx) = layout.state_group(first);
                (
                    Space::State(g),
                    idx,
                    count,
                    reg.state_buffer[first as usize],
                )
            }
            WriteDst::Aux { index } => (Space::Aux(index), 0, 1, reg.aux_buffer[index as usize]),
        };
        let buffer = reg.buffers[buf_idx as usize].clone();
        let p = w.pattern;
        if p.pieces() == 0 || w.len == 0 {
            return Ok(());
        }
        let end = w.dst_offset
            + u64::from(p.units - 1) * p.dst_unit_stride
            + u64::from(p.rows - 1) * p.dst_row_stride
            + w.len;
        let result = if end > buffer.len {
            Err(checks::out_of_bounds(
                w.decode_rank,
                &buffer.name,
                end,
                buffer.len,
            ))
        } else {
            Ok(())
        };
        let compatible = pair_compatible(&prefill[w.prefill_rank as usize], &self.layouts[rank], w);
        for map in &buffer.maps {
            let same = map.space == space;
            let regions = if same {
                (first, first + count)
            } else {
                (map.region, map.region + 1)
            };
            let g = self.geom(rank, map.space);
            let aligned = same
                && p.pieces() > 1
                && map.stride == p.dst_unit_stride
                && g.rows == p.rows
                && g.row_len == p.dst_row_stride
                && (w.dst_offset % map.stride) + w.len <= g.row_len
                && end <= buffer.len;
            if aligned {
                // Head-sliced rows that line up with the decode's token rows: one box per unit.
                let u0 = (w.dst_offset / map.stride) as u32;
                let c = w.dst_offset % map.stride;
                for u in 0..p.units {
                    let unit = u0 + u;
                    if !map.units.contains(&unit) {
                        continue;
                    }
                    let ok = compatible && self.rows_ok(prefill, writer, w, u, unit, c);
                    let bx = Box3 {
                        regions,
                        rows: (0, p.rows),
                        cols: (c, c + w.len),
                    };
                    self.put(rank, map.space, unit, bx, writer, ok, victims);
                }
                continue;
            }
            for u in 0..p.units {
                for r in 0..p.rows {
                    let a = w.dst_offset
                        + u64::from(u) * p.dst_unit_stride
                        + u64::from(r) * p.dst_row_stride;
                    let b = (a + w.len).min(buffer.len);
                    let src_pos = w.src_offset
                        + u64::from(u) * w.src_unit_len
                        + u64::from(r) * p.src_row_stride;
                    if a >= b {
                        continue;
                    }
                    if map.units.is_empty() {
                        continue;
                    }
                    let lo_unit = (a / map.stride).max(u64::from(map.units.start));
                    let hi_unit = ((b - 1) / map.stride).min(u64::from(map.units.end) - 1);
                    if lo_unit > hi_unit {
                        continue;
                    }
                    for unit in lo_unit as u32..=hi_unit as u32 {
                        let base = u64::from(unit) * map.stride;
                        let (la, lb) = (a.max(base) - base, b.min(base + map.stride) - base);
                        let sp = src_pos + (base + la - a);
                        let ok = same
                            && compatible
                            && self.piece_ok(prefill, writer, w, sp, unit, la, lb - la);
                        for bx in byte_boxes(regions, g, la, lb) {
                            self.put(rank, map.space, unit, bx, writer, ok, victims);
                        }
                    }
                }
            }
        }
        result
    }

    /// The request position of `unit` if `writer` owns it and the content is meant for it.
    fn owner_matches(&self, f: Family, unit: u32, writer: RequestId, intended: u32) -> Option<u32> {
        let owner = self.units(f).get(unit as usize)?.owner?;
        (owner.0 == writer && unit == intended).then_some(owner.1)
    }

    /// Whether `n` destination bytes at offset `lo` of `unit`, carrying the source stream from
    /// position `src_pos`, are exactly the owner's expected bytes (checked on the first region
    /// pair; [`pair_compatible`] made the others equivalent).
    #[allow(clippy::too_many_arguments)]
    fn piece_ok(
        &self,
        prefill: &[RankLayout],
        writer: RequestId,
        w: &Write,
        src_pos: u64,
        unit: u32,
        lo: u64,
        n: u64,
    ) -> bool {
        let j = src_pos / w.src_unit_len;
        let so = src_pos % w.src_unit_len;
        if so + n > w.src_unit_len {
            return false;
        }
        let (src_fmt, dst_fmt) = formats(
            &prefill[w.prefill_rank as usize],
            &self.layouts[w.decode_rank as usize],
            w,
        );
        let Some(pos) = self.owner_matches(dst_family(w), unit, writer, w.intended + j as u32)
        else {
            return false;
        };
        if so == 0 && lo == 0 && n == dst_fmt.len() && src_fmt == dst_fmt {
            return true;
        }
        labels_equal(src_fmt, so, dst_fmt, lo, n, u64::from(pos))
    }

    /// The aligned head-sliced case: every row of source unit `u` lands on the same columns of
    /// the same row of destination `unit`.
    fn rows_ok(
        &self,
        prefill: &[RankLayout],
        writer: RequestId,
        w: &Write,
        u: u32,
        unit: u32,
        c: u64,
    ) -> bool {
        let (src_fmt, dst_fmt) = formats(
            &prefill[w.prefill_rank as usize],
            &self.layouts[w.decode_rank as usize],
            w,
        );
        let Some(pos) = self.owner_matches(dst_family(w), unit, writer, w.intended + u) else {
            return false;
        };
        let p = w.pattern;
        let so = w.src_offset;
        // Both sides must step exactly one token row per piece, inside one block.
        let step_ok = |fmt: &CellFormat, off: u64, stride: u64| -> bool {
            let mut o = off;
            for b in &fmt.blocks {
                let len = u64::from(b.rows) * b.row_bytes;
                if o < len {
                    return b.token_rows
                        && b.row_bytes == stride
                        && o / b.row_bytes + u64::from(p.rows) <= u64::from(b.rows);
                }
                o -= len;
            }
            false
        };
        step_ok(src_fmt, so, p.src_row_stride)
            && step_ok(dst_fmt, c, p.dst_row_stride)
            && labels_equal(src_fmt, so, dst_fmt, c, w.len, u64::from(pos))
    }

    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        rank: usize,
        space: Space,
        unit: u32,
        bx: Box3,
        writer: RequestId,
        ok: bool,
        victims: &mut BTreeSet<RequestId>,
    ) {
        let f = family(space);
        let Some(owner) = self.units(f).get(unit as usize).and_then(|u| u.owner) else {
            return; // free unit, sink or gap: nobody reads it
        };
        // `ok` was decided against the current owner; a foreign owner's bytes are never ok.
        let ok = ok && owner.0 == writer;
        if owner.0 != writer {
            victims.insert(owner.0);
            if let Some(r) = self.reqs.get_mut(&writer) {
                r.victims.insert(owner.0);
            }
            if let Some(v) = self.reqs.get_mut(&owner.0)
                && v.landed
            {
                v.corrupted = true;
                v.corrupted_by.insert(writer);
            }
        }
        let list = self.frags[rank].entry((space, unit)).or_default();
        let mut next = Vec::with_capacity(list.len() + 1);
        for fr in list.iter() {
            let mut parts = Vec::new();
            fr.bx.minus(&bx, &mut parts);
            next.extend(parts.into_iter().map(|b| Frag { bx: b, ..*fr }));
        }
        next.push(Frag { bx, writer, ok });
        *list = next;
        self.units_mut(f)[unit as usize].dirty |= 1 << rank;
    }
}

fn dst_family(w: &Write) -> Family {
    match w.dst {
        WriteDst::Kv { .. } => Family::Page,
        WriteDst::State { .. } => Family::Slot,
        WriteDst::Aux { .. } => Family::Aux,
    }
}

/// The cell formats of the first region pair of `w`.
fn formats<'a>(
    src: &'a RankLayout,
    dst: &'a RankLayout,
    w: &Write,
) -> (&'a CellFormat, &'a CellFormat) {
    fmt_pair(src, dst, w, 0).expect("pair_compatible checked the indices")
}

fn fmt_pair<'a>(
    src: &'a RankLayout,
    dst: &'a RankLayout,
    w: &Write,
    x: u32,
) -> Option<(&'a CellFormat, &'a CellFormat)> {
    let si = (w.src_first_region + x) as usize;
    match w.dst {
        WriteDst::Kv { first, .. } => Some((
            &src.kv_regions.get(si)?.cell,
            &dst.kv_regions.get((first + x) as usize)?.cell,
        )),
        WriteDst::State { first, .. } => Some((
            &src.state_regions.get(si)?.cell,
            &dst.state_regions.get((first + x) as usize)?.cell,
        )),
        WriteDst::Aux { index } => {
            Some((&src.aux.get(si)?.cell, &dst.aux.get(index as usize)?.cell))
        }
    }
}

/// Whether every region pair of `w` relates like its first pair: equal geometry up to layer
/// ids and K/V, and the same (layer, K/V) on both sides of each pair.
fn pair_compatible(src: &RankLayout, dst: &RankLayout, w: &Write) -> bool {
    let Some((s0, d0)) = fmt_pair(src, dst, w, 0) else {
        return false;
    };
    let count = w.dst.count();
    if count == 1 {
        return true;
    }
    let (s0s, d0s) = (s0.shape(), d0.shape());
    (0..count).all(|x| {
        fmt_pair(src, dst, w, x).is_some_and(|(s, d)| {
            let one_id = |f: &CellFormat| f.ids().windows(2).all(|p| p[0] == p[1]);
            one_id(s)
                && one_id(d)
                && s.ids().first() == d.ids().first()
                && s.shape() == s0s
                && d.shape() == d0s
        })
    })
}

/// Whether `n` bytes from offset `so` of a source unit equal `n` bytes from offset `lo` of a
/// destination unit, both at request position `pos`: same label at the start, and contiguous on
/// both sides (a label run continues byte for byte).
fn labels_equal(src: &CellFormat, so: u64, dst: &CellFormat, lo: u64, n: u64, pos: u64) -> bool {
    let (Some((ls, rs)), Some((ld, rd))) = (src.label_at(so, pos), dst.label_at(lo, pos)) else {
        return false;
    };
    ls == ld && n <= rs && n <= rd
}

#[cfg(test)]
mod contract_tests {
    //! The oracle's contract on hand-made writes.
    use super::*;
    use crate::layout::checks::Profile;
    use crate::layout::rank::Capacity;
    use crate::layout::write::Pattern;
    use crate::layout::{PairPlan, Verdict};
    use crate::spec::preset;

    fn setup() -> (PairPlan, DecodeMemory) {
        let m = preset("llama-3.1-8b").unwrap();
        let a = crate::layout::test_args(1, 2, "auto", false);
        let plan = PairPlan::compile((&m, &a), (&m, &a), Profile::Guarded).unwrap();
        let cap = Capacity {
            pages: 8,
            slots: 0,
            aux_rows: 2,
        };
        let mem = DecodeMemory::new(plan.decode_layouts(), cap);
        (plan, mem)
    }

    /// One page of all 64 KV regions: the content meant for `intended`, landing on `at`.
    fn page_write(intended: u32, at: u32, regions: (u32, u32)) -> Write {
        let item = 2 * 8 * 128 * 2;
        Write {
            decode_rank: 0,
            prefill_rank: 0,
            dst: WriteDst::Kv {
                first: regions.0,
                count: regions.1 - regions.0,
            },
            src_first_region: regions.0,
            dst_offset: u64::from(at) * item,
            src_offset: 0,
            intended,
            src_unit_len: item,
            len: item,
            pattern: Pattern::ONE,
        }
    }

    #[test]
    fn own_content_on_the_wrong_own_page_is_not_its_content() {
        let (plan, mut mem) = setup();
        let r = RequestId(1);
        mem.alloc(r, &[3, 5], None, None).unwrap();
        // Page 5's content written on both pages: page 3 holds the wrong tokens.
        let w = [page_write(5, 3, (0, 64)), page_write(5, 5, (0, 64))];
        assert_eq!(mem.apply(&plan, r, &w).error, None);
        assert!(!mem.landed(r));
    }

    #[test]
    fn foreign_bytes_survive_until_overwritten() {
        let (plan, mut mem) = setup();
        let (a, b) = (RequestId(1), RequestId(2));
        mem.alloc(a, &[1], None, None).unwrap();
        mem.alloc(b, &[2], None, None).unwrap();
        // a's page lands on b's page, region 0 only, before b's transfer.
        let out = mem.apply(&plan, a, &[page_write(1, 2, (0, 1))]);
        assert_eq!(out.victims, vec![b]);
        // b's own transfer covers regions 1..64: region 0 still holds a's bytes.
        mem.apply(&plan, b, &[page_write(2, 2, (1, 64))]);
        assert!(!mem.landed(b));
        let rb = mem.release(b, None);
        assert_eq!(rb.corrupted_by, vec![a]);
        // The same with b's transfer covering everything: a's bytes are gone.
        mem.alloc(b, &[2], None, None).unwrap();
        mem.apply(&plan, a, &[page_write(1, 2, (0, 1))]);
        mem.apply(&plan, b, &[page_write(2, 2, (0, 64))]);
        assert!(mem.landed(b));
        assert_eq!(mem.release(b, None).verdict, Verdict::Completed);
    }
}
