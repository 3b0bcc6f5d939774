//! The corruption oracle of one decode instance (DESIGN.md §5, `domain/sglang-pd.md` §4).
//!
//! [`DecodeMemory`] knows, per decode rank, the registered buffers and which request owns which
//! page, state slot and metadata row. Planned writes ([`super::Write`]) are applied to it at
//! unit granularity; whether a byte range holds the right content follows from the addresses and
//! the two layouts' [labels](super::rank::Label), never from comparing configurations. A write
//! past a registered buffer fails the transfer (rc −1, `transfer_out_of_bounds`).
//!
//! Definitions (the oracle's contract):
//!
//! * A request's **units** are the pages, slot and metadata row the simulator allocated to it.
//!   On each decode rank, a unit holds one page (slot, row) of every region of its space.
//! * A write lands **on a victim** when it touches a unit owned by another request. The writer's
//!   report lists every victim.
//! * A request **lands** when decode polls Success ([`DecodeMemory::landed`]). At that moment
//!   every byte of every unit it owns, on every rank, must hold its own expected content,
//!   written by its own transfer; an unwritten, foreign or misplaced byte makes it corrupted
//!   (it decodes from stale or foreign bytes).
//! * A victim hit **after it landed and before it is released** (still decoding) is corrupted.
//!   A victim hit before it landed is corrupted only if its own later writes do not overwrite
//!   the foreign bytes, which the landing check sees.
//! * A write extending past its buffer's registered length lands its in-bounds bytes (RDMA
//!   slices are independent) and fails the writer's transfer.
//!
//! Cost: O(units touched + write groups) per apply; per-token work only for a head-sliced write
//! whose rows do not line up with the decode's token rows (a garbage case of `unguarded`).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::checks::{self, PdError};
use super::rank::{Capacity, CellFormat, RankLayout, Registration, Space};
use super::write::{Write, WriteDst};
use crate::metrics::ErrorKind;

/// A request, as the simulator numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RequestId(pub u64);

/// The outcome of one request as far as its bytes are concerned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Verdict {
    /// Every byte it decoded from was its own.
    Completed,
    /// The transfer failed.
    Failed {
        /// Error kind.
        kind: ErrorKind,
        /// sglang's message.
        message: String,
    },
    /// It finished but decoded from bytes that were not its own; `victims` are the requests its
    /// own writes clobbered.
    Corrupted {
        /// Requests whose units this request's writes touched.
        victims: Vec<RequestId>,
    },
}

/// Everything the oracle knows about a released request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestReport {
    /// The verdict.
    pub verdict: Verdict,
    /// Requests whose units this request's writes touched (live or not).
    pub victims: Vec<RequestId>,
    /// Requests whose writes left foreign bytes in this request's units.
    pub corrupted_by: Vec<RequestId>,
}

/// What applying one batch of writes found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ApplyOutcome {
    /// `transfer_out_of_bounds` when a write ran past a registered buffer (rc −1).
    pub error: Option<PdError>,
    /// Requests touched by these writes that are not the writer.
    pub victims: Vec<RequestId>,
}

/// Rows × columns of one unit of one region, and the region range, half-open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Box3 {
    regions: (u32, u32),
    rows: (u32, u32),
    cols: (u64, u64),
}

impl Box3 {
    fn volume(&self) -> u64 {
        u64::from(self.regions.1 - self.regions.0)
            * u64::from(self.rows.1 - self.rows.0)
            * (self.cols.1 - self.cols.0)
    }

    fn intersects(&self, o: &Box3) -> bool {
        self.regions.0 < o.regions.1
            && o.regions.0 < self.regions.1
            && self.rows.0 < o.rows.1
            && o.rows.0 < self.rows.1
            && self.cols.0 < o.cols.1
            && o.cols.0 < self.cols.1
    }

    /// `self \ o` as at most six disjoint boxes.
    fn minus(&self, o: &Box3, out: &mut Vec<Box3>) {
        if !self.intersects(o) {
            out.push(*self);
            return;
        }
        let mut rest = *self;
        // Split off the parts outside `o` along each axis in turn.
        if rest.regions.0 < o.regions.0 {
            out.push(Box3 {
                regions: (rest.regions.0, o.regions.0),
                ..rest
            });
            rest.regions.0 = o.regions.0;
        }
        if rest.regions.1 > o.regions.1 {
            out.push(Box3 {
                regions: (o.regions.1, rest.regions.1),
                ..rest
            });
            rest.regions.1 = o.regions.1;
        }
        if rest.rows.0 < o.rows.0 {
            out.push(Box3 {
                rows: (rest.rows.0, o.rows.0),
                ..rest
            });
            rest.rows.0 = o.rows.0;
        }
        if rest.rows.1 > o.rows.1 {
            out.push(Box3 {
                rows: (o.rows.1, rest.rows.1),
                ..rest
            });
            rest.rows.1 = o.rows.1;
        }
        if rest.cols.0 < o.cols.0 {
            out.push(Box3 {
                cols: (rest.cols.0, o.cols.0),
                ..rest
            });
        }
        if rest.cols.1 > o.cols.1 {
            out.push(Box3 {
                cols: (o.cols.1, rest.cols.1),
                ..rest
            });
        }
    }
}

/// A written part of one unit on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frag {
    bx: Box3,
    writer: RequestId,
    /// The bytes are exactly the owner's expected content.
    ok: bool,
}

/// Ownership and fill state of one unit id, shared by all ranks and regions.
#[derive(Clone, Copy, Debug, Default)]
struct Unit {
    owner: Option<(RequestId, u32)>,
    /// Filled by an exact plan ([`DecodeMemory::apply_exact`]).
    exact: bool,
    /// Ranks holding fragments for this unit (bit per rank).
    dirty: u64,
}

#[derive(Clone, Debug, Default)]
struct Req {
    pages: Vec<u32>,
    slot: Option<u32>,
    aux: Option<u32>,
    landed: bool,
    corrupted: bool,
    victims: BTreeSet<RequestId>,
    corrupted_by: BTreeSet<RequestId>,
    error: Option<PdError>,
}

/// Per-rank geometry of one unit space: regions, and the row structure of one unit.
#[derive(Clone, Copy, Debug)]
struct SpaceGeom {
    regions: u32,
    rows: u32,
    row_len: u64,
}

/// Which unit family a [`Space`] indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Page,
    Slot,
    Aux,
}

fn family(s: Space) -> Family {
    match s {
        Space::Kv => Family::Page,
        Space::State(_) => Family::Slot,
        Space::Aux(_) => Family::Aux,
    }
}

/// The decode instance's memory as the oracle sees it.
#[derive(Clone, Debug)]
pub struct DecodeMemory {
    layouts: Vec<RankLayout>,
    regs: Vec<Registration>,
    pages: Vec<Unit>,
    slots: Vec<Unit>,
    aux: Vec<Unit>,
    free_pages: BTreeSet<u32>,
    free_slots: BTreeSet<u32>,
    free_aux: BTreeSet<u32>,
    frags: Vec<BTreeMap<(Space, u32), Vec<Frag>>>,
    reqs: BTreeMap<RequestId, Req>,
    unified: bool,
}

impl DecodeMemory {
    /// Empty memory of a decode instance with these rank layouts and capacity.
    pub fn new(layouts: &[RankLayout], cap: Capacity) -> Self {
        assert!(
            !layouts.is_empty() && layouts.len() <= 64,
            "1..=64 decode ranks"
        );
        let regs: Vec<Registration> = layouts.iter().map(|l| l.registration(&cap)).collect();
        let r0 = &regs[0];
        DecodeMemory {
            layouts: layouts.to_vec(),
            pages: vec![Unit::default(); r0.page_ids.end as usize],
            slots: vec![Unit::default(); r0.slot_ids.end.max(1) as usize],
            aux: vec![Unit::default(); cap.aux_rows as usize],
            free_pages: r0.page_ids.clone().collect(),
            free_slots: r0.slot_ids.clone().collect(),
            free_aux: (0..cap.aux_rows).collect(),
            frags: vec![BTreeMap::new(); layouts.len()],
            reqs: BTreeMap::new(),
            unified: layouts[0].unified,
            regs,
        }
    }

    /// The registration of decode rank `rank`.
    pub fn registration(&self, rank: u32) -> &Registration {
        &self.regs[rank as usize]
    }

    fn units(&self, f: Family) -> &Vec<Unit> {
        match f {
            Family::Page => &self.pages,
            Family::Slot => &self.slots,
            Family::Aux => &self.aux,
        }
    }

    fn units_mut(&mut self, f: Family) -> &mut Vec<Unit> {
        match f {
            Family::Page => &mut self.pages,
            Family::Slot => &mut self.slots,
            Family::Aux => &mut self.aux,
        }
    }

    fn spaces_of(&self, rank: usize, f: Family) -> Vec<Space> {
        let l = &self.layouts[rank];
        match f {
            Family::Page => vec![Space::Kv],
            Family::Slot => (0..l.state_groups()).map(Space::State).collect(),
            Family::Aux => (0..l.aux.len() as u32).map(Space::Aux).collect(),
        }
    }

    fn geom(&self, rank: usize, s: Space) -> SpaceGeom {
        let l = &self.layouts[rank];
        match s {
            Space::Kv => {
                let item = l.kv_regions[0].item_len;
                if l.unified {
                    SpaceGeom {
                        regions: 1,
                        rows: 1,
                        row_len: item,
                    }
                } else {
                    SpaceGeom {
                        regions: l.kv_regions.len() as u32,
                        rows: l.page_size,
                        row_len: item / u64::from(l.page_size),
                    }
                }
            }
            Space::State(g) => {
                let (_, count, item) = l.state_group_regions(g);
                SpaceGeom {
                    regions: count,
                    rows: 1,
                    row_len: item,
                }
            }
            Space::Aux(i) => SpaceGeom {
                regions: 1,
                rows: 1,
                row_len: l.aux[i as usize].item_len,
            },
        }
    }

    /// Gives `req` these units (page ids in request order, optional slot and metadata row).
    /// Errors if a unit is out of range or owned.
    pub fn alloc(
        &mut self,
        req: RequestId,
        pages: &[u32],
        slot: Option<u32>,
        aux: Option<u32>,
    ) -> Result<(), String> {
        if self.reqs.contains_key(&req) {
            return Err(format!("request {} already holds units", req.0));
        }
        let check = |set: &BTreeSet<u32>, id: u32, what: &str| {
            if set.contains(&id) {
                Ok(())
            } else {
                Err(format!("{what} {id} is not free for request {}", req.0))
            }
        };
        let mut seen = BTreeSet::new();
        for &p in pages {
            check(&self.free_pages, p, "page")?;
            if !seen.insert(p) {
                return Err(format!("page {p} listed twice for request {}", req.0));
            }
        }
        if let Some(s) = slot {
            check(&self.free_slots, s, "slot")?;
        }
        if let Some(a) = aux {
            check(&self.free_aux, a, "aux row")?;
        }
        for (pos, &p) in pages.iter().enumerate() {
            self.free_pages.remove(&p);
            self.take(Family::Page, p, req, pos as u32);
        }
        if let Some(s) = slot {
            self.free_slots.remove(&s);
            self.take(Family::Slot, s, req, 0);
        }
        if let Some(a) = aux {
            self.free_aux.remove(&a);
            self.take(Family::Aux, a, req, 0);
        }
        self.reqs.insert(
            req,
            Req {
                pages: pages.to_vec(),
                slot,
                aux,
                ..Req::default()
            },
        );
        Ok(())
    }

    /// Allocates free units the way sglang's allocators hand them out: unified KV from the high
    /// end down (§1.6), other pools lowest id first. `None` if there is not enough room.
    pub fn alloc_fresh(
        &mut self,
        req: RequestId,
        n_pages: usize,
        slot: bool,
    ) -> Option<(Vec<u32>, Option<u32>, u32)> {
        if self.free_pages.len() < n_pages
            || (slot && self.free_slots.is_empty())
            || self.free_aux.is_empty()
        {
            return None;
        }
        let pages: Vec<u32> = if self.unified {
            // The KV sub-pool grows down from the high end, but one allocation is a block of
            // ascending ids, as a down-growing frontier hands it out: contiguous runs stay runs.
            let mut top: Vec<u32> = self
                .free_pages
                .iter()
                .rev()
                .take(n_pages)
                .copied()
                .collect();
            top.reverse();
            top
        } else {
            self.free_pages.iter().take(n_pages).copied().collect()
        };
        let s = if slot {
            self.free_slots.first().copied()
        } else {
            None
        };
        let a = *self.free_aux.first()?;
        self.alloc(req, &pages, s, Some(a)).ok()?;
        Some((pages, s, a))
    }

    fn take(&mut self, f: Family, id: u32, req: RequestId, pos: u32) {
        self.clear_frags(f, id);
        let u = &mut self.units_mut(f)[id as usize];
        *u = Unit {
            owner: Some((req, pos)),
            exact: false,
            dirty: 0,
        };
    }

    fn clear_frags(&mut self, f: Family, id: u32) {
        let dirty = self.units(f)[id as usize].dirty;
        if dirty == 0 {
            return;
        }
        for rank in 0..self.layouts.len() {
            if dirty & (1 << rank) != 0 {
                for s in self.spaces_of(rank, f) {
                    self.frags[rank].remove(&(s, id));
                }
            }
        }
        self.units_mut(f)[id as usize].dirty = 0;
    }

    /// Records that an exact plan ([`crate::layout::PairPlan::is_exact`]) filled these units of `req` on every
    /// rank: O(units). Overwrites whatever foreign bytes were there.
    pub fn apply_exact(
        &mut self,
        req: RequestId,
        pages: &[u32],
        slot: Option<u32>,
        aux: Option<u32>,
    ) {
        let ids = pages
            .iter()
            .map(|&p| (Family::Page, p))
            .chain(slot.map(|s| (Family::Slot, s)))
            .chain(aux.map(|a| (Family::Aux, a)));
        for (f, id) in ids.collect::<Vec<_>>() {
            if self
                .units(f)
                .get(id as usize)
                .and_then(|u| u.owner)
                .map(|o| o.0)
                == Some(req)
            {
                self.clear_frags(f, id);
                self.units_mut(f)[id as usize].exact = true;
            }
        }
    }

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

    /// The decode polled Success for `req`: from now on it decodes from its units. Checks that
    /// every byte of them holds its own content; returns whether it does.
    pub fn landed(&mut self, req: RequestId) -> bool {
        let Some(r) = self.reqs.get(&req) else {
            return false;
        };
        let units: Vec<(Family, u32)> = r
            .pages
            .iter()
            .map(|&p| (Family::Page, p))
            .chain(r.slot.map(|s| (Family::Slot, s)))
            .chain(r.aux.map(|a| (Family::Aux, a)))
            .collect();
        let mut whole = true;
        let mut by = BTreeSet::new();
        for (f, id) in units {
            let u = self.units(f)[id as usize];
            for rank in 0..self.layouts.len() {
                let dirty = u.dirty & (1 << rank) != 0;
                if u.exact && !dirty {
                    continue;
                }
                for s in self.spaces_of(rank, f) {
                    let g = self.geom(rank, s);
                    let full = u64::from(g.regions) * u64::from(g.rows) * g.row_len;
                    let frags = self.frags[rank]
                        .get(&(s, id))
                        .map_or(&[][..], Vec::as_slice);
                    let mut vol = 0;
                    for fr in frags {
                        if fr.ok {
                            vol += fr.bx.volume();
                        } else {
                            whole = false;
                            if fr.writer != req {
                                by.insert(fr.writer);
                            }
                        }
                    }
                    if !u.exact && vol != full {
                        whole = false;
                    }
                }
            }
        }
        let r = self.reqs.get_mut(&req).expect("checked above");
        r.landed = true;
        if !whole {
            r.corrupted = true;
        }
        r.corrupted_by.extend(by);
        whole
    }

    /// Frees `req`'s units and gives its verdict. `failure` is the error the simulator saw for
    /// it (first contact, validator, timeout, …); an out-of-bounds write the oracle saw is a
    /// failure too. A request released without landing or failure is checked as if it landed.
    pub fn release(&mut self, req: RequestId, failure: Option<&PdError>) -> RequestReport {
        let failure = failure
            .cloned()
            .or_else(|| self.reqs.get(&req).and_then(|r| r.error.clone()));
        if failure.is_none() && self.reqs.get(&req).is_some_and(|r| !r.landed) {
            self.landed(req);
        }
        let r = self.reqs.remove(&req).unwrap_or_default();
        for &p in &r.pages {
            self.clear_frags(Family::Page, p);
            self.pages[p as usize] = Unit::default();
            self.free_pages.insert(p);
        }
        if let Some(s) = r.slot {
            self.clear_frags(Family::Slot, s);
            self.slots[s as usize] = Unit::default();
            self.free_slots.insert(s);
        }
        if let Some(a) = r.aux {
            self.clear_frags(Family::Aux, a);
            self.aux[a as usize] = Unit::default();
            self.free_aux.insert(a);
        }
        let victims: Vec<RequestId> = r.victims.iter().copied().collect();
        let verdict = match failure {
            Some(e) => Verdict::Failed {
                kind: e.kind,
                message: e.message,
            },
            None if r.corrupted => Verdict::Corrupted {
                victims: victims.clone(),
            },
            None => Verdict::Completed,
        };
        RequestReport {
            verdict,
            victims,
            corrupted_by: r.corrupted_by.into_iter().collect(),
        }
    }

    /// Whether `req` is known and already marked corrupted.
    pub fn is_corrupted(&self, req: RequestId) -> bool {
        self.reqs.get(&req).is_some_and(|r| r.corrupted)
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

/// The boxes of bytes `[la, lb)` of one unit with geometry `g`, over `regions`.
fn byte_boxes(regions: (u32, u32), g: SpaceGeom, la: u64, lb: u64) -> Vec<Box3> {
    let rl = g.row_len;
    let (r0, c0) = ((la / rl) as u32, la % rl);
    let (r1, c1) = (((lb - 1) / rl) as u32, (lb - 1) % rl + 1);
    let b = |rows: (u32, u32), cols: (u64, u64)| Box3 {
        regions,
        rows,
        cols,
    };
    if r0 == r1 {
        return vec![b((r0, r0 + 1), (c0, c1))];
    }
    let mut out = Vec::new();
    let mut mid0 = r0;
    if c0 > 0 {
        out.push(b((r0, r0 + 1), (c0, rl)));
        mid0 = r0 + 1;
    }
    let mut mid1 = r1 + 1;
    if c1 < rl {
        out.push(b((r1, r1 + 1), (0, c1)));
        mid1 = r1;
    }
    if mid0 < mid1 {
        out.push(b((mid0, mid1), (0, rl)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_difference_is_exact() {
        let a = Box3 {
            regions: (0, 4),
            rows: (0, 4),
            cols: (0, 10),
        };
        let b = Box3 {
            regions: (1, 2),
            rows: (1, 3),
            cols: (2, 5),
        };
        let mut out = Vec::new();
        a.minus(&b, &mut out);
        let vol: u64 = out.iter().map(Box3::volume).sum();
        assert_eq!(vol, a.volume() - b.volume());
        for (i, x) in out.iter().enumerate() {
            assert!(!x.intersects(&b));
            for y in &out[i + 1..] {
                assert!(!x.intersects(y));
            }
        }
    }

    #[test]
    fn byte_ranges_become_row_boxes() {
        let g = SpaceGeom {
            regions: 1,
            rows: 4,
            row_len: 10,
        };
        let vol = |v: Vec<Box3>| v.iter().map(Box3::volume).sum::<u64>();
        assert_eq!(vol(byte_boxes((0, 1), g, 3, 37)), 34);
        assert_eq!(byte_boxes((0, 1), g, 0, 40).len(), 1);
        assert_eq!(byte_boxes((0, 1), g, 12, 18).len(), 1);
        assert_eq!(vol(byte_boxes((0, 3), g, 5, 15)), 30);
    }
}

#[cfg(test)]
mod contract_tests {
    //! The oracle's contract on hand-made writes.
    use super::*;
    use crate::layout::PairPlan;
    use crate::layout::checks::Profile;
    use crate::layout::write::Pattern;
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
