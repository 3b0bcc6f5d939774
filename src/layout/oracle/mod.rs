//! The corruption oracle of one decode instance (docs/architecture.md §5, `docs/sglang-pd.md` §4).
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

use super::checks::PdError;
use super::rank::{Capacity, RankLayout, Registration, Space};
use crate::vocab::ErrorKind;

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
    /// Requests whose units this request's writes touched (live or not); itself when its own
    /// transfer left its own units wrong (bytes misplaced, or never written).
    pub victims: Vec<RequestId>,
    /// Requests whose writes left foreign bytes in this request's units; itself when its own
    /// transfer is to blame. Never empty for a corrupted request.
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

mod apply;
mod boxes;

use boxes::{Box3, SpaceGeom};

/// A written part of one unit on one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Frag {
    bx: Box3,
    writer: RequestId,
    /// The bytes are exactly the owner's expected content.
    ok: bool,
}

/// Bytes of one unit's record: the oracle keeps one per page, slot and metadata row, so
/// validation bounds the total (`config::limits::MAX_PAGE_RECORD_BYTES`).
pub const ORACLE_UNIT_BYTES: u64 = std::mem::size_of::<Unit>() as u64;

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

/// Which unit family a [`Space`] indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Page,
    Slot,
    Aux,
}

fn family(s: Space) -> Family {
    match s {
        Space::Kv | Space::KvScale => Family::Page,
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
            // FP4 pools' scale pages go with the KV pages (docs/sglang-pd.md §29).
            Family::Page if !l.kv_scale_regions.is_empty() => vec![Space::Kv, Space::KvScale],
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
            Space::KvScale => SpaceGeom {
                regions: l.kv_scale_regions.len() as u32,
                rows: l.page_size,
                row_len: l.kv_scale_regions[0].item_len / u64::from(l.page_size),
            },
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
    /// end down (docs/sglang-pd.md §1.6), other pools lowest id first. `None` if there is not enough room.
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

    /// The decode polled Success for `req`: from now on it decodes from its units. Checks that
    /// every byte of them holds its own content; returns whether its registered bytes do (what
    /// a digest of the registered pages sees, `sglang::checksum`). An FP4 pool's scale pages
    /// (docs/sglang-pd.md §29), which no transfer writes, make it corrupted by its own transfer
    /// without changing the return value.
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
        // Its own transfer is to blame when its own bytes sit at the wrong place in its unit,
        // or when part of a unit was written by nobody (its bytes went elsewhere).
        let mut own_fault = false;
        let mut stale_scales = false;
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
                    if s == Space::KvScale {
                        // No registered buffer holds them: the decode's own scale bytes, which
                        // sglang's FP4 pool zero-fills and only a forward on this server writes.
                        stale_scales |= full > 0;
                        continue;
                    }
                    let frags = self.frags[rank]
                        .get(&(s, id))
                        .map_or(&[][..], Vec::as_slice);
                    let (mut vol, mut covered) = (0, 0);
                    for fr in frags {
                        // Fragments are disjoint (a later write cuts the earlier ones).
                        covered += fr.bx.volume();
                        if fr.ok {
                            vol += fr.bx.volume();
                        } else {
                            whole = false;
                            if fr.writer == req {
                                own_fault = true;
                            } else {
                                by.insert(fr.writer);
                            }
                        }
                    }
                    if !u.exact && vol != full {
                        whole = false;
                        own_fault |= covered != full;
                    }
                }
            }
        }
        let r = self.reqs.get_mut(&req).expect("checked above");
        r.landed = true;
        if !whole || stale_scales {
            r.corrupted = true;
        }
        if own_fault || stale_scales {
            // Every corrupted request names a culprit, and every culprit its victims: a
            // request its own transfer failed names itself on both sides.
            by.insert(req);
            r.victims.insert(req);
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
