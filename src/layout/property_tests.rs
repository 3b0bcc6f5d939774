//! Property tests: plans are complete for identical peers, and the fast oracle never
//! contradicts a slow reference that tracks every written byte range with its source.
//!
//! The reference keeps, per registered buffer, an interval map of written byte ranges (later
//! writes replace earlier ones byte for byte), each remembering its writer and the source
//! stream position it carries. At landing it walks every byte of every owned unit, run by run,
//! comparing the label the decode layout expects there with the label the source layout gives
//! the stored bytes. It shares only the layouts' label functions with the oracle — none of the
//! oracle's shortcuts (format equality, row alignment, boxes, exact fills).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::checks::{PdError, Profile};
use super::oracle::{DecodeMemory, RequestId, Verdict};
use super::plan::{ChunkRequest, PairPlan};
use super::rank::{Capacity, CellFormat, RankLayout, Registration, Space};
use super::write::{Write, WriteDst};
use crate::spec::model::MODEL_PRESETS;
use crate::spec::{ServerArgs, preset};
use crate::vocab::ErrorKind;

// ------------------------------------------------------------------------------------------
// The slow reference.

#[derive(Clone, Copy, Debug)]
struct Piece {
    end: u64,
    writer: RequestId,
    prefill_rank: u32,
    kind: u8, // 0 KV, 1 state, 2 aux
    src_region: u32,
    src_unit_len: u64,
    intended: u32,
    src_pos: u64,
}

#[derive(Default, Debug)]
struct RefReq {
    pages: Vec<u32>,
    slot: Option<u32>,
    aux: Option<u32>,
    landed: bool,
    corrupted: bool,
    victims: BTreeSet<RequestId>,
    error: Option<ErrorKind>,
}

struct Reference<'a> {
    plan: &'a PairPlan,
    regs: Vec<Registration>,
    bufs: Vec<Vec<BTreeMap<u64, Piece>>>,
    owner: BTreeMap<(u8, u32), (RequestId, u32)>, // (family, unit) -> (owner, position)
    reqs: BTreeMap<RequestId, RefReq>,
    /// Bytes the writes put inside units their writer owns.
    own_bytes: u64,
}

fn fam(s: Space) -> u8 {
    match s {
        Space::Kv | Space::KvScale => 0,
        Space::State(_) => 1,
        Space::Aux(_) => 2,
    }
}

fn dst_cell(l: &RankLayout, s: Space, region_in_space: u32) -> &CellFormat {
    match s {
        Space::Kv => &l.kv_regions[region_in_space as usize].cell,
        Space::KvScale => &l.kv_scale_regions[region_in_space as usize].cell,
        Space::State(g) => {
            let (first, _, _) = l.state_group_regions(g);
            &l.state_regions[(first + region_in_space) as usize].cell
        }
        Space::Aux(i) => &l.aux[i as usize].cell,
    }
}

impl<'a> Reference<'a> {
    fn new(plan: &'a PairPlan, cap: Capacity) -> Self {
        let regs: Vec<Registration> = plan
            .decode_layouts()
            .iter()
            .map(|l| l.registration(&cap))
            .collect();
        let bufs = regs
            .iter()
            .map(|r| vec![BTreeMap::new(); r.buffers.len()])
            .collect();
        Reference {
            plan,
            regs,
            bufs,
            owner: BTreeMap::new(),
            reqs: BTreeMap::new(),
            own_bytes: 0,
        }
    }

    fn alloc(&mut self, req: RequestId, pages: &[u32], slot: Option<u32>, aux: Option<u32>) {
        for (i, &p) in pages.iter().enumerate() {
            self.owner.insert((0, p), (req, i as u32));
        }
        if let Some(s) = slot {
            self.owner.insert((1, s), (req, 0));
        }
        if let Some(a) = aux {
            self.owner.insert((2, a), (req, 0));
        }
        self.reqs.insert(
            req,
            RefReq {
                pages: pages.to_vec(),
                slot,
                aux,
                ..RefReq::default()
            },
        );
    }

    /// Applies writes byte range by byte range; returns whether one ran out of bounds.
    fn apply(&mut self, writer: RequestId, writes: &[Write]) -> bool {
        let mut oob = false;
        for w in writes {
            let rank = w.decode_rank as usize;
            let (kind, first, count) = match w.dst {
                WriteDst::Kv { first, count } => (0u8, first, count),
                WriteDst::State { first, count } => (1, first, count),
                WriteDst::Aux { index } => (2, index, 1),
            };
            for x in 0..count {
                let reg = &self.regs[rank];
                let buf = match kind {
                    0 => reg.kv_buffer[(first + x) as usize],
                    1 => reg.state_buffer[(first + x) as usize],
                    _ => reg.aux_buffer[(first + x) as usize],
                } as usize;
                let len = reg.buffers[buf].len;
                let p = w.pattern;
                for u in 0..p.units {
                    for r in 0..p.rows {
                        let a = w.dst_offset
                            + u64::from(u) * p.dst_unit_stride
                            + u64::from(r) * p.dst_row_stride;
                        let src_pos = w.src_offset
                            + u64::from(u) * w.src_unit_len
                            + u64::from(r) * p.src_row_stride;
                        if a + w.len > len {
                            oob = true;
                        }
                        let b = (a + w.len).min(len);
                        if a >= b {
                            continue;
                        }
                        let piece = Piece {
                            end: b,
                            writer,
                            prefill_rank: w.prefill_rank,
                            kind,
                            src_region: w.src_first_region + x,
                            src_unit_len: w.src_unit_len,
                            intended: w.intended,
                            src_pos,
                        };
                        self.store(rank, buf, a, piece);
                    }
                }
            }
        }
        if oob && let Some(r) = self.reqs.get_mut(&writer) {
            r.error.get_or_insert(ErrorKind::TransferOutOfBounds);
        }
        oob
    }

    fn store(&mut self, rank: usize, buf: usize, a: u64, piece: Piece) {
        let b = piece.end;
        // Victims: every owned unit the range touches.
        for map in &self.regs[rank].buffers[buf].maps {
            for unit in map.units.clone() {
                let (s, e) = (
                    u64::from(unit) * map.stride,
                    u64::from(unit + 1) * map.stride,
                );
                if s >= b || e <= a {
                    continue;
                }
                if let Some(&(o, _)) = self.owner.get(&(fam(map.space), unit)) {
                    if o == piece.writer {
                        self.own_bytes += b.min(e) - a.max(s);
                    } else {
                        self.reqs.get_mut(&piece.writer).unwrap().victims.insert(o);
                        let v = self.reqs.get_mut(&o).unwrap();
                        if v.landed {
                            v.corrupted = true;
                        }
                    }
                }
            }
        }
        // Overwrite: cut every stored piece that overlaps [a, b).
        let map = &mut self.bufs[rank][buf];
        let hits: Vec<u64> = map
            .range(..b)
            .filter(|(_, p)| p.end > a)
            .map(|(&s, _)| s)
            .collect();
        for s in hits {
            let old = map.remove(&s).unwrap();
            if s < a {
                map.insert(s, Piece { end: a, ..old });
            }
            if old.end > b {
                map.insert(
                    b,
                    Piece {
                        src_pos: old.src_pos + (b - s),
                        ..old
                    },
                );
            }
        }
        map.insert(a, piece);
    }

    /// The label of the source byte at stream position `sp` of a stored piece, and how many
    /// bytes continue it.
    fn src_label(&self, p: &Piece, sp: u64) -> Option<(super::rank::Label, u64)> {
        let src = &self.plan.prefill_layouts()[p.prefill_rank as usize];
        let j = (sp / p.src_unit_len) as u32;
        let so = sp % p.src_unit_len;
        let unit = p.intended + j;
        let w = &self.reqs[&p.writer];
        let (cell, pos) = match p.kind {
            0 => (
                &src.kv_regions.get(p.src_region as usize)?.cell,
                w.pages.iter().position(|&x| x == unit)? as u64,
            ),
            1 => {
                (w.slot == Some(unit)).then_some(())?;
                (&src.state_regions.get(p.src_region as usize)?.cell, 0)
            }
            _ => {
                (w.aux == Some(unit)).then_some(())?;
                (&src.aux.get(p.src_region as usize)?.cell, 0)
            }
        };
        let (l, rem) = cell.label_at(so, pos)?;
        Some((l, rem.min(p.src_unit_len - so)))
    }

    /// Whether every byte of `req`'s units holds its own content.
    fn landed(&mut self, req: RequestId) -> bool {
        let r = &self.reqs[&req];
        let mut units: Vec<(u8, u32, u64)> = r
            .pages
            .iter()
            .enumerate()
            .map(|(i, &p)| (0, p, i as u64))
            .collect();
        units.extend(r.slot.map(|s| (1, s, 0)));
        units.extend(r.aux.map(|a| (2, a, 0)));
        let mut whole = true;
        // Its own transfer is to blame for a byte nobody wrote, or for its own byte with the
        // wrong content: it then names itself as culprit and victim.
        let mut own = false;
        for (rank, reg) in self.regs.iter().enumerate() {
            let layout = &self.plan.decode_layouts()[rank];
            for (bi, buf) in reg.buffers.iter().enumerate() {
                for map in &buf.maps {
                    for &(f, unit, pos) in &units {
                        if fam(map.space) != f || !map.units.contains(&unit) {
                            continue;
                        }
                        let cell = dst_cell(layout, map.space, map.region);
                        let start = u64::from(unit) * map.stride;
                        let end = start + map.stride;
                        let mut x = start;
                        while x < end {
                            let (want, rem_d) = cell.label_at(x - start, pos).unwrap();
                            let hit = self.bufs[rank][bi]
                                .range(..=x)
                                .next_back()
                                .filter(|(_, p)| p.end > x);
                            let Some((&ps, piece)) = hit else {
                                // Written by nobody up to the next piece.
                                whole = false;
                                own = true;
                                let next = self.bufs[rank][bi]
                                    .range(x + 1..)
                                    .next()
                                    .map_or(end, |(&s, _)| s);
                                x = next.min(end);
                                continue;
                            };
                            if piece.writer != req {
                                whole = false;
                                x = piece.end.min(end);
                                continue;
                            }
                            match self.src_label(piece, piece.src_pos + (x - ps)) {
                                Some((got, rem_s)) => {
                                    if got != want {
                                        whole = false;
                                        own = true;
                                    }
                                    x += rem_d.min(rem_s).min(piece.end - x);
                                }
                                None => {
                                    whole = false;
                                    own = true;
                                    x = piece.end.min(end);
                                }
                            }
                        }
                    }
                }
            }
        }
        let r = self.reqs.get_mut(&req).unwrap();
        r.landed = true;
        if !whole {
            r.corrupted = true;
        }
        if own {
            r.victims.insert(req);
        }
        whole
    }

    fn release(&mut self, req: RequestId, failure: Option<ErrorKind>) -> (u8, Vec<RequestId>) {
        let r = self.reqs.remove(&req).unwrap();
        self.owner.retain(|_, o| o.0 != req);
        let verdict = if failure.or(r.error).is_some() {
            0
        } else if r.corrupted {
            1
        } else {
            2
        };
        (verdict, r.victims.into_iter().collect())
    }
}

fn verdict_code(v: &Verdict) -> u8 {
    match v {
        Verdict::Failed { .. } => 0,
        Verdict::Corrupted { .. } => 1,
        Verdict::Completed => 2,
    }
}

// ------------------------------------------------------------------------------------------
// Scenarios.

fn args(tp: u32, ps: u32, dtype: &str, unified: bool) -> ServerArgs {
    crate::layout::test_args(tp, ps, dtype, unified)
}

#[derive(Clone, Debug)]
struct SideCfg {
    model: &'static str,
    tp: u32,
    ps: u32,
    dtype: &'static str,
    unified: bool,
}

fn side() -> impl Strategy<Value = SideCfg> {
    (
        prop::sample::select(MODEL_PRESETS.to_vec()),
        prop::sample::select(vec![1u32, 2, 4]),
        prop::sample::select(vec![1u32, 2, 4, 16]),
        prop::sample::select(vec!["auto", "bf16", "fp8_e4m3", "fp8_e5m2"]),
        any::<bool>(),
    )
        .prop_map(|(model, tp, ps, dtype, unified)| SideCfg {
            model,
            tp,
            ps,
            dtype,
            unified: unified && preset(model).unwrap().is_hybrid(),
        })
}

#[derive(Clone, Debug)]
struct ReqCfg {
    /// Decode pages the request needs.
    pages: u32,
    /// Tokens beyond the previous pages (1..=page size of decode).
    tail: u32,
    /// Split point of the prefill's page list (fraction in 1/4).
    split: u32,
    /// Release right after landing.
    early_release: bool,
}

fn reqs() -> impl Strategy<Value = Vec<ReqCfg>> {
    prop::collection::vec(
        (1u32..=3, 1u32..=64, 0u32..4, any::<bool>()).prop_map(|(pages, tail, split, e)| ReqCfg {
            pages,
            tail,
            split,
            early_release: e,
        }),
        2..=4,
    )
}

struct Outcome {
    fast: Vec<(u8, Vec<RequestId>)>,
    slow: Vec<(u8, Vec<RequestId>)>,
}

/// Runs the requests through both the fast oracle (using `apply_exact` when the plan is exact,
/// as the simulator does) and the reference (always the concrete writes).
fn run(plan: &PairPlan, requests: &[ReqCfg], perm: &[u32], force_writes: bool) -> Outcome {
    let cap = Capacity {
        pages: 12,
        slots: 4,
        aux_rows: 4,
    };
    let mut fast = DecodeMemory::new(plan.decode_layouts(), cap);
    let mut slow = Reference::new(plan, cap);
    let reg = fast.registration(0).clone();
    let d0 = &plan.decode_layouts()[0];
    let p0 = &plan.prefill_layouts()[0];
    let (ps_p, ps_d) = (p0.page_size, d0.page_size);
    let mut free_pages: Vec<u32> = reg.page_ids.clone().collect();
    // A deterministic shuffle of the free pages from `perm`.
    for (i, &k) in perm.iter().enumerate() {
        if !free_pages.is_empty() {
            let n = free_pages.len();
            free_pages.swap(i % n, k as usize % n);
        }
    }
    let mut free_slots: Vec<u32> = reg.slot_ids.clone().collect();
    let mut free_aux: Vec<u32> = (0..cap.aux_rows).collect();
    let mut out = Outcome {
        fast: Vec::new(),
        slow: Vec::new(),
    };
    let mut live: Vec<(RequestId, Option<ErrorKind>)> = Vec::new();
    let mut writes = Vec::new();
    // Decode preallocates every request's units first (its prealloc queue), then transfers
    // arrive in order: a later transfer can hit an earlier request that is already decoding.
    let mut allocated = Vec::new();
    for (i, rc) in requests.iter().enumerate() {
        let id = RequestId(i as u64 + 1);
        let n_d = rc.pages as usize;
        if free_pages.len() < n_d || free_aux.is_empty() {
            continue;
        }
        let pages: Vec<u32> = free_pages.drain(..n_d).collect();
        // Slots lowest-first or highest-first: low slots put unsliced state copies on
        // neighbours' slots, high ones into the KV sub-pool or past the buffer.
        let slot = if d0.state_regions.is_empty() || free_slots.is_empty() {
            None
        } else if perm.first().is_some_and(|k| k % 2 == 0) {
            Some(free_slots.remove(0))
        } else {
            free_slots.pop()
        };
        let aux = free_aux.pop();
        fast.alloc(id, &pages, slot, aux).unwrap();
        slow.alloc(id, &pages, slot, aux);
        allocated.push((i, rc, id, pages, slot, aux));
    }
    for (i, rc, id, pages, slot, aux) in allocated {
        let tokens = (rc.pages - 1) * ps_d + 1 + (rc.tail - 1) % ps_d;
        let n_p = tokens.div_ceil(ps_p);
        // Prefill page ids: distinct, partly contiguous, from a per-request base.
        let src: Vec<u32> = (0..n_p)
            .map(|k| 1000 * (i as u32 + 1) + k + (k / 2) * (perm.first().copied().unwrap_or(0) % 3))
            .collect();
        let split = ((n_p * rc.split) / 4).clamp(0, n_p);
        let chunks: Vec<(usize, usize)> = if split == 0 || split == n_p {
            vec![(0, n_p as usize)]
        } else {
            vec![(0, split as usize), (split as usize, n_p as usize)]
        };
        let mut failure: Option<PdError> = plan.first_contact().cloned();
        if failure.is_none() {
            for (ci, &(c0, c1)) in chunks.iter().enumerate() {
                let last = ci + 1 == chunks.len();
                let dst_hi = c1.min(pages.len());
                let dst_chunk: &[u32] = if c0 < dst_hi { &pages[c0..dst_hi] } else { &[] };
                let req = ChunkRequest {
                    src_pages: &src[c0..c1],
                    dst_pages: dst_chunk,
                    last,
                    src_slot: (!p0.state_regions.is_empty()).then_some(1),
                    dst_slot: slot,
                    src_aux: 0,
                    dst_aux: aux.unwrap(),
                };
                let t = plan.chunk(&req);
                plan.writes(&req, &mut writes);
                // Flows and writes agree.
                let fb: u64 = t.flows.iter().map(|f| f.bytes).sum();
                let fw: u64 = t.flows.iter().map(|f| f.writes).sum();
                assert_eq!(fb, writes.iter().map(Write::bytes).sum::<u64>());
                assert_eq!(fw, writes.iter().map(Write::entries).sum::<u64>());
                let slow_oob = slow.apply(id, &writes);
                let fast_err = if plan.is_exact() && !force_writes {
                    let n = req.src_pages.len().min(req.dst_pages.len());
                    let extra = last && t.error.is_none();
                    fast.apply_exact(
                        id,
                        &req.dst_pages[..n],
                        if extra { slot } else { None },
                        if extra { aux } else { None },
                    );
                    None
                } else {
                    fast.apply(plan, id, &writes).error
                };
                assert_eq!(
                    fast_err.is_some(),
                    slow_oob,
                    "out-of-bounds verdicts differ"
                );
                if let Some(e) = fast_err {
                    failure = Some(e);
                    break;
                }
                if slow_oob {
                    failure = Some(super::checks::out_of_bounds(0, "", 0, 0));
                    break;
                }
                if let Some((e, _)) = t.error {
                    failure = Some(e);
                    break;
                }
            }
        }
        let kind = failure.as_ref().map(|e| e.kind);
        if failure.is_none() {
            let (a, b) = (fast.landed(id), slow.landed(id));
            assert_eq!(a, b, "landing checks differ for request {}", id.0);
        }
        if rc.early_release {
            let f = fast.release(id, failure.as_ref());
            out.fast.push((verdict_code(&f.verdict), f.victims));
            out.slow.push(slow.release(id, kind));
        } else {
            live.push((id, kind));
        }
    }
    for (id, kind) in live {
        let f = fast.release(
            id,
            kind.map(|k| PdError {
                kind: k,
                message: String::new(),
                effect: super::checks::Effect::WorkerDies,
            })
            .as_ref(),
        );
        out.fast.push((verdict_code(&f.verdict), f.victims));
        out.slow.push(slow.release(id, kind));
    }
    out
}

fn compile(p: &SideCfg, d: &SideCfg, profile: Profile) -> Option<PairPlan> {
    let (pm, dm) = (preset(p.model).unwrap(), preset(d.model).unwrap());
    PairPlan::compile(
        (&pm, &args(p.tp, p.ps, p.dtype, p.unified)),
        (&dm, &args(d.tp, d.ps, d.dtype, d.unified)),
        profile,
    )
    .ok()
}

/// Mostly `unguarded`, where nothing stops a mismatched pair and the oracle does the work.
fn profile() -> impl Strategy<Value = Profile> {
    prop::sample::select(vec![
        Profile::Unguarded,
        Profile::Unguarded,
        Profile::Guarded,
        Profile::SliceDispatch,
    ])
}

/// A decode side that differs from `p` in a few fields (or in none), and sometimes a
/// different model altogether.
fn decode_side(p: SideCfg) -> impl Strategy<Value = SideCfg> {
    (side(), prop::collection::vec(0u8..6, 0..=2)).prop_map(move |(other, changes)| {
        let mut d = p.clone();
        for c in changes {
            match c {
                0 => d.tp = other.tp,
                1 => d.ps = other.ps,
                2 => d.dtype = other.dtype,
                3 => d.unified = !d.unified,
                4 => d.model = other.model,
                _ => d.tp = d.tp * 2 % 8,
            }
        }
        if d.tp == 0 {
            d.tp = 1;
        }
        d.unified = d.unified && preset(d.model).unwrap().is_hybrid();
        d
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Identical peers: exact, error-free, and every byte of every unit written exactly once
    /// into its own place (the reference sees full coverage and no byte written twice).
    #[test]
    fn identical_peers_are_complete(s in side().prop_flat_map(|s| (Just(s), prop::sample::select(vec![1u32, 2, 4, 8]))).prop_map(|(s, tp)| SideCfg { tp, ..s }), prof in profile(), n in 1u32..=3, perm in prop::collection::vec(0u32..16, 4)) {
        let plan = compile(&s, &s, prof).unwrap();
        prop_assert!(plan.is_exact());
        prop_assert!(plan.first_contact().is_none() && plan.chunk_error().is_none());
        prop_assert!(plan.last_chunk_error().is_none());
        let d0 = &plan.decode_layouts()[0];
        let cap = Capacity { pages: 6, slots: 3, aux_rows: 3 };
        let mut slow = Reference::new(&plan, cap);
        let mut fast = DecodeMemory::new(plan.decode_layouts(), cap);
        let reg = fast.registration(0).clone();
        let mut ids: Vec<u32> = reg.page_ids.clone().collect();
        for (i, &k) in perm.iter().enumerate() { let l = ids.len(); ids.swap(i % l, k as usize % l); }
        let pages = &ids[..n as usize];
        let slot = reg.slot_ids.clone().next();
        let id = RequestId(9);
        slow.alloc(id, pages, slot, Some(2));
        fast.alloc(id, pages, slot, Some(2)).unwrap();
        let src: Vec<u32> = (0..n).map(|k| 40 + 2 * k).collect();
        let req = ChunkRequest { src_pages: &src, dst_pages: pages, last: true,
            src_slot: slot.map(|_| 5), dst_slot: slot, src_aux: 1, dst_aux: 2 };
        let mut w = Vec::new();
        plan.writes(&req, &mut w);
        prop_assert!(!slow.apply(id, &w));
        prop_assert!(fast.apply(&plan, id, &w).error.is_none());
        prop_assert!(slow.landed(id));
        prop_assert!(fast.landed(id));
        let tp = u64::from(d0.attn_tp_size);
        let want = tp * (u64::from(n) * d0.kv_page_bytes()
            + slot.map_or(0, |_| d0.state_slot_bytes()) + d0.aux_row_bytes());
        prop_assert_eq!(slow.own_bytes, want, "every owned byte written exactly once");
        prop_assert_eq!(w.iter().map(Write::bytes).sum::<u64>(), want);
        prop_assert_eq!(fast.release(id, None).verdict, Verdict::Completed);
    }

    /// Random pairs on a small instance: the oracle's verdicts and victims equal the
    /// reference's, with `apply_exact` standing in for the writes whenever the plan is exact.
    #[test]
    fn oracle_agrees_with_reference(
        (p, d) in side().prop_flat_map(|p| (Just(p.clone()), decode_side(p))), prof in profile(),
        rs in reqs(), perm in prop::collection::vec(0u32..16, 4), force in any::<bool>(),
    ) {
        let Some(plan) = compile(&p, &d, prof) else { return Ok(()) };
        let o = run(&plan, &rs, &perm, force);
        prop_assert_eq!(o.fast, o.slow);
    }
}

/// Hand-picked hazard pairs under `unguarded` (the random search reaches them rarely).
#[test]
fn oracle_agrees_on_the_hazard_pairs() {
    /// (tp, page size, unified).
    type Side = (u32, u32, bool);
    let cases: &[(&str, Side, Side)] = &[
        ("qwen3-next-80b-a3b", (1, 16, true), (2, 16, true)),
        ("qwen3-next-80b-a3b", (2, 16, true), (4, 16, true)),
        ("qwen3-next-80b-a3b", (4, 16, true), (2, 16, true)),
        ("qwen3-next-80b-a3b", (2, 16, true), (2, 4, true)),
        ("qwen3-next-80b-a3b", (2, 4, true), (2, 16, true)),
        ("qwen3-next-80b-a3b", (2, 16, true), (2, 16, false)),
        ("qwen3-next-80b-a3b", (2, 16, false), (2, 16, true)),
        ("qwen3-next-80b-a3b", (1, 16, false), (2, 16, false)),
        ("nemotron-h-8b", (2, 2, true), (1, 2, true)),
        ("nemotron-h-8b", (2, 16, false), (2, 4, false)),
        ("llama-3.1-8b", (2, 2, false), (1, 4, false)),
        ("llama-3.1-8b", (1, 4, false), (2, 1, false)),
        ("llama-3.1-8b", (1, 4, false), (2, 4, false)),
        ("llama-3.1-70b", (4, 2, false), (2, 2, false)),
        ("nemotron-h-8b", (2, 4, false), (4, 4, false)),
        ("qwen3-next-80b-a3b", (4, 2, false), (1, 2, false)),
        ("deepseek-v3", (2, 4, false), (2, 1, false)),
    ];
    let rs = vec![
        ReqCfg {
            pages: 2,
            tail: 1,
            split: 2,
            early_release: false,
        },
        ReqCfg {
            pages: 1,
            tail: 3,
            split: 0,
            early_release: false,
        },
        ReqCfg {
            pages: 2,
            tail: 2,
            split: 1,
            early_release: true,
        },
    ];
    for &(m, (tp_p, ps_p, u_p), (tp_d, ps_d, u_d)) in cases {
        for (dtype, d_dtype) in [
            ("auto", "auto"),
            ("fp8_e4m3", "fp8_e4m3"),
            ("auto", "fp8_e5m2"),
        ] {
            let p = SideCfg {
                model: m,
                tp: tp_p,
                ps: ps_p,
                dtype,
                unified: u_p,
            };
            let d = SideCfg {
                model: m,
                tp: tp_d,
                ps: ps_d,
                dtype: d_dtype,
                unified: u_d,
            };
            let plan = compile(&p, &d, Profile::Unguarded).unwrap();
            for perm in [[0u32, 1, 2, 3], [5, 3, 9, 1], [2, 2, 7, 0], [1, 0, 3, 2]] {
                let o = run(&plan, &rs, &perm, false);
                assert_eq!(o.fast, o.slow, "{m} {p:?} -> {d:?} perm {perm:?}");
            }
        }
    }
}
