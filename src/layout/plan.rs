//! The transfer plan of one (prefill instance, decode instance) pair (`domain/sglang-pd.md` §2.1,
//! §3): compiled once, asked per chunk.
//!
//! A [`PairPlan`] holds the rank mapping, the send path per (prefill rank, decode rank) target,
//! and which checks fire and when. Per chunk, [`PairPlan::chunk`] gives the flows (bytes and RDMA
//! write count per target) in O(pages + targets), never per token; [`PairPlan::writes`] gives the
//! concrete writes for the corruption oracle, at run granularity. [`PairPlan::is_exact`] says whether every write
//! lands exactly where the decode layout expects it, so the simulator can skip the oracle.

use serde::Serialize;

use super::LayoutError;
use super::checks::{self, PdError, Profile, SendPath};
use super::oracle::{DecodeMemory, RequestId};
use super::rank::{Capacity, RankLayout, StatePart};
use crate::spec::{ModelSpec, ServerArgs};

/// What the simulator asks per chunk. Page ids are the instance's physical ids: `src_pages` on
/// the prefill, `dst_pages` the decode page ids sglang pairs with them (the slice
/// `dst_kv_indices[index_slice]` of the decode's list, in prefill page positions; §3.1).
#[derive(Clone, Copy, Debug)]
pub struct ChunkRequest<'a> {
    /// Prefill page ids of this chunk.
    pub src_pages: &'a [u32],
    /// Decode page ids paired with them (if shorter, the sender truncates the source list).
    pub dst_pages: &'a [u32],
    /// The request's last chunk: state and aux follow the KV.
    pub last: bool,
    /// Prefill mamba slot (hybrid models).
    pub src_slot: Option<u32>,
    /// Decode mamba slot.
    pub dst_slot: Option<u32>,
    /// Prefill metadata row.
    pub src_aux: u32,
    /// Decode metadata row.
    pub dst_aux: u32,
}

/// The traffic of one chunk, and the error it raises, if any.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkTransfer {
    /// One flow per (prefill rank, decode rank) target that moves bytes, sorted by ranks.
    pub flows: Vec<RankFlow>,
    /// The error of this chunk and when it strikes relative to the writes.
    pub error: Option<(PdError, ErrorTiming)>,
}

/// Bytes and RDMA writes from one prefill rank's NIC to one decode rank's NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct RankFlow {
    /// Sending prefill rank.
    pub prefill_rank: u32,
    /// Receiving decode rank.
    pub decode_rank: u32,
    /// Bytes.
    pub bytes: u64,
    /// RDMA write entries (each pays the per-write cost).
    pub writes: u64,
}

/// When a chunk's error strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorTiming {
    /// Before any write of this chunk (validator, rc −1 layer check): `flows` is empty.
    BeforeAnyWrite,
    /// KV of this chunk went (it is in `flows`), then the state check raised: no state, no aux.
    AfterKv,
}

/// One (prefill rank, decode rank) pair of the rank mapping (§2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Target {
    /// Prefill rank.
    pub prefill_rank: u32,
    /// Decode rank.
    pub decode_rank: u32,
    /// MLA with prefill TP > decode TP: only the first prefill rank of a group is real; the
    /// others get empty metadata and succeed at once.
    pub dummy: bool,
}

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

/// Positional pairs `src..src + count` ↔ `dst..dst + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RegionRun {
    src: u32,
    dst: u32,
    count: u32,
}

fn push_pair(runs: &mut Vec<RegionRun>, src: u32, dst: u32) {
    if let Some(r) = runs.last_mut()
        && r.src + r.count == src
        && r.dst + r.count == dst
    {
        r.count += 1;
        return;
    }
    runs.push(RegionRun { src, dst, count: 1 });
}

#[derive(Clone, Debug, PartialEq)]
enum KvSend {
    /// Dummy target, a hybrid-MLA sub-rank that skips KV, or zero layers to send.
    Nothing,
    /// `_send_kvcache_generic`: one write per (region, contiguous run); destination offsets use
    /// the prefill's `item` (§3.2 step 3).
    Generic { runs: Vec<RegionRun>, item: u64 },
    /// `send_kvcache_slice`: one write per (region, page, token) (§3.3).
    Sliced {
        runs: Vec<RegionRun>,
        src_item: u64,
        dst_item: u64,
        page_size: u32,
        src_off: u64,
        dst_off: u64,
        len: u64,
    },
}

/// One state block kind per (group of layers): `count` consecutive entries with equal offsets.
#[derive(Clone, Copy, Debug, PartialEq)]
struct StateSend {
    run: RegionRun,
    src_item: u64,
    /// Destination slot stride: the source length on the unsliced path (§3.5), the decode's
    /// item on the sliced path.
    dst_stride: u64,
    src_off: u64,
    dst_off: u64,
    len: u64,
}

#[derive(Clone, Debug, PartialEq)]
struct TargetPlan {
    target: Target,
    kv: KvSend,
    state: Vec<StateSend>,
    /// `(aux index, len)`: one write each.
    aux: Vec<(u32, u64)>,
}

/// The compiled transfer contract of one (prefill instance, decode instance) pair.
#[derive(Clone, Debug)]
pub struct PairPlan {
    profile: Profile,
    prefill: Vec<RankLayout>,
    decode: Vec<RankLayout>,
    path: SendPath,
    first_contact: Option<PdError>,
    kv_error: Option<PdError>,
    state_error: Option<PdError>,
    targets: Vec<TargetPlan>,
    exact: bool,
}

/// `group_concurrent_contiguous` (§3.2 step 1): `(src start, dst start, pages)` runs where both
/// lists advance by one. O(pages).
pub fn contiguous_runs(src: &[u32], dst: &[u32]) -> Vec<(u32, u32, u32)> {
    let n = src.len().min(dst.len());
    let mut runs: Vec<(u32, u32, u32)> = Vec::new();
    for i in 0..n {
        if let Some(r) = runs.last_mut()
            && src[i] == r.0 + r.2
            && dst[i] == r.1 + r.2
        {
            r.2 += 1;
            continue;
        }
        runs.push((src[i], dst[i], 1));
    }
    runs
}

/// §2.1 `_resolve_rank_mapping`: every (prefill rank, decode rank) target.
fn rank_mapping(
    tp_p: u32,
    tp_d: u32,
    prefill_mla: bool,
    hybrid_mla: bool,
) -> Result<Vec<Target>, LayoutError> {
    if !tp_p.max(tp_d).is_multiple_of(tp_p.min(tp_d)) {
        return Err(LayoutError::TpRatio {
            prefill: tp_p,
            decode: tp_d,
        });
    }
    let mut out = Vec::new();
    if tp_d >= tp_p {
        // Decode rank d targets prefill rank d / k; equal TP is k = 1.
        let k = tp_d / tp_p;
        for d in 0..tp_d {
            out.push(Target {
                prefill_rank: d / k,
                decode_rank: d,
                dummy: false,
            });
        }
    } else {
        // Decode rank d contacts prefill ranks [d·k, (d+1)·k). For plain MLA only the first is
        // real; hybrid-MLA keeps them real (they send TP-sharded state, §3.4).
        let k = tp_p / tp_d;
        for d in 0..tp_d {
            for p in d * k..(d + 1) * k {
                out.push(Target {
                    prefill_rank: p,
                    decode_rank: d,
                    dummy: prefill_mla && !hybrid_mla && p != d * k,
                });
            }
        }
    }
    out.sort_by_key(|t| (t.prefill_rank, t.decode_rank));
    Ok(out)
}

/// `get_mha_kv_ptrs_with_pp` (pp = 1): K pairs then V pairs, and the stage's layer count and
/// the number of decode K regions (for the out-of-range check).
fn mha_pairs(n_src: u32, n_dst: u32) -> (Vec<RegionRun>, usize, usize) {
    let layers = n_src / 2;
    let dst_k = if n_src == n_dst { n_src / 2 } else { n_dst / 2 };
    let mut runs = Vec::new();
    if layers <= dst_k {
        for i in 0..layers {
            push_pair(&mut runs, i, i);
        }
        for i in 0..layers {
            push_pair(&mut runs, layers + i, dst_k + i);
        }
    }
    (runs, layers as usize, dst_k as usize)
}

/// The byte blocks of `_send_mamba_state_slice` for one entry (§3.5, older inline formula,
/// applied per GDN conv sub-block): `(src_off, dst_off, len)`.
#[allow(clippy::too_many_arguments)]
fn mamba_slice_blocks(
    src_item: u64,
    dst_item: u64,
    src_dim: u32,
    dst_dim: u32,
    groups: &[u32],
    tp_p: u32,
    tp_d: u32,
    p_rank: u32,
    d_rank: u32,
) -> Vec<(u64, u64, u64)> {
    let src_bpd = src_item / u64::from(src_dim);
    let dst_bpd = dst_item / u64::from(dst_dim);
    // Sub-block widths per rank on each side; one block of the whole dim without shard groups.
    let (src_w, dst_w): (Vec<u32>, Vec<u32>) = if groups.is_empty() {
        (vec![src_dim], vec![dst_dim])
    } else {
        (
            groups.iter().map(|g| g / tp_p).collect(),
            groups.iter().map(|g| g / tp_d).collect(),
        )
    };
    let mut out = Vec::new();
    let (mut src_base, mut dst_base) = (0u64, 0u64);
    for (&sw, &dw) in src_w.iter().zip(&dst_w) {
        let (src_start, n, dst_start) = if tp_p > tp_d {
            let writers = tp_p / tp_d;
            (0, sw, (p_rank % writers) * sw)
        } else {
            ((d_rank * dw) % sw, dw, 0)
        };
        out.push((
            (src_base + u64::from(src_start)) * src_bpd,
            (dst_base + u64::from(dst_start)) * dst_bpd,
            u64::from(n) * src_bpd,
        ));
        src_base += u64::from(sw);
        dst_base += u64::from(dw);
    }
    out
}

impl PairPlan {
    /// Compiles the plan for a prefill instance `(model, server args)` sending to a decode
    /// instance, under `profile`.
    ///
    /// Errors are start-up errors of either instance ([`RankLayout::new`]) or TP sizes that are
    /// not multiples of each other.
    pub fn compile(
        prefill: (&ModelSpec, &ServerArgs),
        decode: (&ModelSpec, &ServerArgs),
        profile: Profile,
    ) -> Result<PairPlan, LayoutError> {
        let p_layouts = RankLayout::all_ranks(prefill.0, prefill.1)?;
        let d_layouts = RankLayout::all_ranks(decode.0, decode.1)?;
        let (p0, d0) = (&p_layouts[0], &d_layouts[0]);
        let (tp_p, tp_d) = (p0.attn_tp_size, d0.attn_tp_size);
        let targets = rank_mapping(tp_p, tp_d, p0.mla, p0.hybrid_mla())?;

        let first_contact = if profile.first_contact_checks() {
            checks::first_contact(
                p0.page_size,
                &p0.kv_cache_dtype,
                d0.page_size,
                &d0.kv_cache_dtype,
            )
            .err()
        } else {
            None
        };

        // §4.4: the send function, and whether the validator guards it.
        let path = profile.kv_send_path(p0.mla, p0.unified, tp_p, tp_d);
        let mut kv_error = None;
        if profile.validator_runs(path, p0.unified) {
            kv_error = checks::validate_envelope(
                p0.unified,
                tp_p,
                Some(tp_d),
                &p0.kv_item_lens(),
                d0.kv_regions.len(),
                Some(d0.kv_item_lens().first().copied().unwrap_or(0)),
            )
            .err();
        }

        let (n_src, n_dst) = (p0.kv_regions.len() as u32, d0.kv_regions.len() as u32);
        // Flat branch: MLA, hybrid-MLA or force_flat (= the prefill's unified flag); no pool
        // publishes layer ids in pdsim, so pairing is positional (`get_mla_kv_ptrs_with_pp`).
        let flat = p0.mla || p0.unified;
        let mut kv_runs = Vec::new();
        if kv_error.is_none() {
            match path {
                SendPath::SendKvcache if flat => {
                    if n_dst < n_src {
                        // dst[start : start + len(src)] is shorter than src: the list
                        // comprehension indexes past it.
                        kv_error = Some(checks::index_error());
                    } else {
                        for i in 0..n_src {
                            push_pair(&mut kv_runs, i, i);
                        }
                    }
                }
                SendPath::SendKvcache => {
                    let (runs, layers, dst_k) = mha_pairs(n_src, n_dst);
                    kv_error = checks::check_kv_layers(layers, dst_k).err();
                    kv_runs = runs;
                }
                SendPath::Slice => {
                    let (runs, layers, dst_k) = mha_pairs(n_src, n_dst);
                    // No explicit check on this path: `dst_k_ptrs[i]` raises IndexError.
                    if layers > dst_k {
                        kv_error = Some(checks::index_error());
                    }
                    kv_runs = runs;
                }
            }
        }

        // Last chunk, state (§3.5) then aux (§3.6).
        let mut state_error = None;
        let (p_dims, d_dims) = (p0.state_dim_per_tensor(), d0.state_dim_per_tensor());
        let (p_lens, d_lens) = (p0.state_item_lens(), d0.state_item_lens());
        let has_state = !p0.state_regions.is_empty();
        let mut sliced_state = false;
        let mut state_pairs: Vec<(u32, u32)> = Vec::new();
        if has_state {
            if profile.state_checks() {
                state_error = checks::check_mamba_layouts(&p_dims, &d_dims, &p_lens, &d_lens).err();
            }
            let (ns, nd) = (p_lens.len(), d_lens.len());
            if state_error.is_none() && nd < ns {
                // build_transfer_entry_pairs with positional fallback (pp = 1).
                state_error = Some(PdError {
                    kind: checks::ErrorKind::MambaLayoutMismatch,
                    message: format!(
                        "PP-heterogeneous transfer requires layer ids on both peers; got src={ns} dst={nd} entries"
                    ),
                    effect: checks::Effect::WorkerDies,
                });
            }
            if state_error.is_none() {
                state_pairs = (0..ns as u32).map(|i| (i, i)).collect();
                sliced_state = tp_p != tp_d && !p_dims.is_empty() && !d_dims.is_empty();
                if !sliced_state && profile.state_checks() {
                    state_error = state_pairs.iter().find_map(|&(i, j)| {
                        checks::check_mamba_slot_size(p_lens[i as usize], d_lens[j as usize]).err()
                    });
                }
            }
        }

        let mut plans = Vec::new();
        for t in targets {
            let p = &p_layouts[t.prefill_rank as usize];
            let d = &d_layouts[t.decode_rank as usize];
            if t.dummy {
                plans.push(TargetPlan {
                    target: t,
                    kv: KvSend::Nothing,
                    state: Vec::new(),
                    aux: Vec::new(),
                });
                continue;
            }
            // Hybrid-MLA prefill ranks with sub_rank != 0 skip KV (§3.4).
            let skip_kv = p.hybrid_mla() && tp_p > tp_d && t.prefill_rank % (tp_p / tp_d) != 0;
            let kv = if skip_kv || kv_runs.is_empty() {
                KvSend::Nothing
            } else {
                match path {
                    SendPath::SendKvcache => KvSend::Generic {
                        runs: kv_runs.clone(),
                        item: p.kv_regions[0].item_len,
                    },
                    SendPath::Slice => {
                        let slice = head_slice(p, d);
                        KvSend::Sliced {
                            runs: kv_runs.clone(),
                            src_item: p.kv_regions[0].item_len,
                            dst_item: d.kv_regions.first().map_or(0, |r| r.item_len),
                            page_size: p.page_size,
                            src_off: slice.0,
                            dst_off: slice.1,
                            len: slice.2,
                        }
                    }
                }
            };
            let mut state = Vec::new();
            for &(i, j) in &state_pairs {
                let (sr, dr) = (&p.state_regions[i as usize], &d.state_regions[j as usize]);
                let run = RegionRun {
                    src: i,
                    dst: j,
                    count: 1,
                };
                if sliced_state {
                    let groups = if sr.part == StatePart::Conv {
                        p.conv_shard_groups.as_slice()
                    } else {
                        &[]
                    };
                    for (so, dof, len) in mamba_slice_blocks(
                        sr.item_len,
                        dr.item_len,
                        sr.dim_per_tensor.unwrap_or(1),
                        dr.dim_per_tensor.unwrap_or(1),
                        groups,
                        tp_p,
                        tp_d,
                        t.prefill_rank,
                        t.decode_rank,
                    ) {
                        state.push(StateSend {
                            run,
                            src_item: sr.item_len,
                            dst_stride: dr.item_len,
                            src_off: so,
                            dst_off: dof,
                            len,
                        });
                    }
                } else {
                    state.push(StateSend {
                        run,
                        src_item: sr.item_len,
                        dst_stride: sr.item_len,
                        src_off: 0,
                        dst_off: 0,
                        len: sr.item_len,
                    });
                }
            }
            let state = merge_state(state);
            let aux = (0..d.aux.len().min(p.aux.len()) as u32)
                .map(|i| (i, p.aux[i as usize].item_len))
                .collect();
            plans.push(TargetPlan {
                target: t,
                kv,
                state,
                aux,
            });
        }

        let mut plan = PairPlan {
            profile,
            prefill: p_layouts,
            decode: d_layouts,
            path,
            first_contact,
            kv_error,
            state_error,
            targets: plans,
            exact: false,
        };
        plan.exact = plan.probe_exact();
        Ok(plan)
    }

    /// The profile the plan was compiled under.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The prefill instance's rank layouts.
    pub fn prefill_layouts(&self) -> &[RankLayout] {
        &self.prefill
    }

    /// The decode instance's rank layouts.
    pub fn decode_layouts(&self) -> &[RankLayout] {
        &self.decode
    }

    /// The KV send function the prefill workers call (§3.1 step 3).
    pub fn send_path(&self) -> SendPath {
        self.path
    }

    /// Every (prefill rank, decode rank) target, dummies included.
    pub fn targets(&self) -> Vec<Target> {
        self.targets.iter().map(|t| t.target).collect()
    }

    /// Decode's first-contact error (page size, KV dtype string), raised on decode before the
    /// request's metadata is sent (§2.1). `None` under `unguarded`.
    pub fn first_contact(&self) -> Option<&PdError> {
        self.first_contact.as_ref()
    }

    /// The error every chunk raises before its first write (envelope validator, layer range),
    /// if any.
    pub fn chunk_error(&self) -> Option<&PdError> {
        self.kv_error.as_ref()
    }

    /// The error the last chunk raises after its KV (mamba checks), if any.
    pub fn last_chunk_error(&self) -> Option<&PdError> {
        self.state_error.as_ref()
    }

    /// Whether every write the plan issues lands exactly where its request's decode layout
    /// expects it, and a request that completes has every byte written: the simulator may skip
    /// the oracle for requests on this pair (it still tells the oracle which units were filled,
    /// with [`DecodeMemory::apply_exact`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The flows of one chunk and its error. O(pages) to group the contiguous runs, then O(1) per
    /// target (a target's region groups are few): the head-sliced write count is
    /// `2L × pages × page_size` per target, computed, not enumerated.
    pub fn chunk(&self, req: &ChunkRequest) -> ChunkTransfer {
        if let Some(e) = &self.kv_error {
            return ChunkTransfer {
                flows: Vec::new(),
                error: Some((e.clone(), ErrorTiming::BeforeAnyWrite)),
            };
        }
        let runs = contiguous_runs(req.src_pages, req.dst_pages);
        let n_pages: u64 = runs.iter().map(|r| u64::from(r.2)).sum();
        let n_runs = runs.len() as u64;
        let state_error = if req.last {
            self.state_error.clone()
        } else {
            None
        };
        let send_extra = req.last && state_error.is_none();
        let mut flows = Vec::new();
        for t in &self.targets {
            let (mut bytes, mut writes) = (0u64, 0u64);
            match &t.kv {
                KvSend::Nothing => {}
                KvSend::Generic { runs: rr, item } => {
                    let regions: u64 = rr.iter().map(|r| u64::from(r.count)).sum();
                    writes += regions * n_runs;
                    bytes += regions * n_pages * item;
                }
                KvSend::Sliced {
                    runs: rr,
                    page_size,
                    len,
                    ..
                } => {
                    let regions: u64 = rr.iter().map(|r| u64::from(r.count)).sum();
                    let w = regions * n_pages * u64::from(*page_size);
                    writes += w;
                    bytes += w * len;
                }
            }
            if send_extra {
                if req.src_slot.is_some() && req.dst_slot.is_some() {
                    for s in &t.state {
                        writes += u64::from(s.run.count);
                        bytes += u64::from(s.run.count) * s.len;
                    }
                }
                writes += t.aux.len() as u64;
                bytes += t.aux.iter().map(|a| a.1).sum::<u64>();
            }
            if writes > 0 {
                flows.push(RankFlow {
                    prefill_rank: t.target.prefill_rank,
                    decode_rank: t.target.decode_rank,
                    bytes,
                    writes,
                });
            }
        }
        ChunkTransfer {
            flows,
            error: state_error.map(|e| (e, ErrorTiming::AfterKv)),
        }
    }

    /// The concrete writes of one chunk at run granularity, appended to `out` (cleared first),
    /// for the oracle. Empty when the chunk raises before any write; without state and aux
    /// when the last chunk raises after KV.
    pub fn writes(&self, req: &ChunkRequest, out: &mut Vec<Write>) {
        out.clear();
        if self.kv_error.is_some() {
            return;
        }
        let runs = contiguous_runs(req.src_pages, req.dst_pages);
        let send_extra = req.last && self.state_error.is_none();
        for t in &self.targets {
            let (prefill_rank, decode_rank) = (t.target.prefill_rank, t.target.decode_rank);
            match &t.kv {
                KvSend::Nothing => {}
                KvSend::Generic { runs: rr, item } => {
                    for g in rr {
                        for &(_, d0, n) in &runs {
                            out.push(Write {
                                decode_rank,
                                prefill_rank,
                                dst: WriteDst::Kv {
                                    first: g.dst,
                                    count: g.count,
                                },
                                src_first_region: g.src,
                                dst_offset: u64::from(d0) * item,
                                src_offset: 0,
                                intended: d0,
                                src_unit_len: *item,
                                len: u64::from(n) * item,
                                pattern: Pattern::ONE,
                            });
                        }
                    }
                }
                KvSend::Sliced {
                    runs: rr,
                    src_item,
                    dst_item,
                    page_size,
                    src_off,
                    dst_off,
                    len,
                } => {
                    let ps = u64::from(*page_size);
                    for g in rr {
                        for &(_, d0, n) in &runs {
                            out.push(Write {
                                decode_rank,
                                prefill_rank,
                                dst: WriteDst::Kv {
                                    first: g.dst,
                                    count: g.count,
                                },
                                src_first_region: g.src,
                                dst_offset: u64::from(d0) * dst_item + dst_off,
                                src_offset: *src_off,
                                intended: d0,
                                src_unit_len: *src_item,
                                len: *len,
                                pattern: Pattern {
                                    units: n,
                                    rows: *page_size,
                                    // Both token strides divide by the prefill's page size.
                                    dst_row_stride: dst_item / ps,
                                    dst_unit_stride: *dst_item,
                                    src_row_stride: src_item / ps,
                                },
                            });
                        }
                    }
                }
            }
            if !send_extra {
                continue;
            }
            if let (Some(_), Some(dst_slot)) = (req.src_slot, req.dst_slot) {
                for s in &t.state {
                    out.push(Write {
                        decode_rank,
                        prefill_rank,
                        dst: WriteDst::State {
                            first: s.run.dst,
                            count: s.run.count,
                        },
                        src_first_region: s.run.src,
                        dst_offset: s.dst_stride * u64::from(dst_slot) + s.dst_off,
                        src_offset: s.src_off,
                        intended: dst_slot,
                        src_unit_len: s.src_item,
                        len: s.len,
                        pattern: Pattern::ONE,
                    });
                }
            }
            for &(i, len) in &t.aux {
                out.push(Write {
                    decode_rank,
                    prefill_rank,
                    dst: WriteDst::Aux { index: i },
                    src_first_region: i,
                    dst_offset: len * u64::from(req.dst_aux),
                    src_offset: 0,
                    intended: req.dst_aux,
                    src_unit_len: len,
                    len,
                    pattern: Pattern::ONE,
                });
            }
        }
    }

    /// Decides [`PairPlan::is_exact`] by running a probe request through the oracle: two page
    /// runs (one of them split on the decode side), a state slot and an aux row, with every
    /// other unit owned by a neighbour. The writes are a function of the runs' structure, not
    /// of the ids, so a clean probe — no foreign or out-of-bounds byte, and the request whole
    /// if no error — means every request on this pair is clean.
    fn probe_exact(&self) -> bool {
        if self.first_contact.is_some() || self.kv_error.is_some() {
            return true; // nothing is ever written
        }
        let cap = Capacity {
            pages: 8,
            slots: 3,
            aux_rows: 3,
        };
        let mut mem = DecodeMemory::new(&self.decode, cap);
        let reg = self.decode[0].registration(&cap);
        let p = reg.page_ids.start;
        let dst = [p + 1, p + 2, p + 4];
        let src = [10, 11, 12];
        let slot = reg.slot_ids.clone().nth(1);
        let (me, other) = (RequestId(1), RequestId(2));
        let others: Vec<u32> = reg.page_ids.clone().filter(|x| !dst.contains(x)).collect();
        let other_slots: Vec<u32> = reg.slot_ids.clone().filter(|s| Some(*s) != slot).collect();
        mem.alloc(me, &dst, slot, Some(1))
            .expect("probe units are free");
        mem.alloc(other, &others, other_slots.first().copied(), Some(0))
            .expect("probe units are free");
        let mut writes = Vec::new();
        for (range, last) in [(0..2, false), (2..3, true)] {
            let req = ChunkRequest {
                src_pages: &src[range.clone()],
                dst_pages: &dst[range],
                last,
                src_slot: slot.map(|_| 1),
                dst_slot: slot,
                src_aux: 0,
                dst_aux: 1,
            };
            self.writes(&req, &mut writes);
            let out = mem.apply(self, me, &writes);
            if out.error.is_some() {
                return false;
            }
        }
        let failed = self.state_error.is_some();
        mem.landed(me);
        let report = mem.release(me, None);
        report.victims.is_empty() && (failed || report.verdict == super::oracle::Verdict::Completed)
    }
}

/// Groups state sends of consecutive layers with identical offsets into one block kind.
fn merge_state(sends: Vec<StateSend>) -> Vec<StateSend> {
    let mut out: Vec<StateSend> = Vec::new();
    for s in sends {
        // A send joins an earlier one with the same offsets whose run it extends.
        if let Some(prev) = out.iter_mut().rev().find(|p| {
            p.src_item == s.src_item
                && p.dst_stride == s.dst_stride
                && p.src_off == s.src_off
                && p.dst_off == s.dst_off
                && p.len == s.len
                && p.run.src + p.run.count == s.run.src
                && p.run.dst + p.run.count == s.run.dst
        }) {
            prev.run.count += 1;
            continue;
        }
        out.push(s);
    }
    out
}

/// `send_kvcache_slice` head mapping (§3.3): `(src byte offset in a token row, dst byte offset in
/// a token row, bytes per token)` for one target.
fn head_slice(p: &RankLayout, d: &RankLayout) -> (u64, u64, u64) {
    let (tp_p, tp_d) = (p.attn_tp_size, d.attn_tp_size);
    let h = p.total_kv_heads;
    let src_heads = (h / tp_p).max(1);
    let dst_heads = (h / tp_d).max(1);
    let ps = u64::from(p.page_size);
    let dst_item = d.kv_regions.first().map_or(0, |r| r.item_len);
    let bph = dst_item / ps / u64::from(dst_heads);
    let src_repl = (tp_p / h).max(1);
    let (src_start, n, dst_start) = if tp_p > tp_d {
        let unique = p.rank / src_repl;
        (0, src_heads, (unique * src_heads) % dst_heads)
    } else {
        let dst_repl = (tp_d / h).max(1);
        let unique_dst = d.rank / dst_repl;
        ((unique_dst * dst_heads) % src_heads, dst_heads, 0)
    };
    (
        u64::from(src_start) * bph,
        u64::from(dst_start) * bph,
        u64::from(n) * bph,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::spec::preset;

    pub(crate) fn args(tp: u32, ps: u32, dtype: &str, unified: bool) -> ServerArgs {
        crate::layout::test_args(tp, ps, dtype, unified)
    }

    fn plan(model: &str, p: ServerArgs, d: ServerArgs, profile: Profile) -> PairPlan {
        let m = preset(model).unwrap();
        PairPlan::compile((&m, &p), (&m, &d), profile).unwrap()
    }

    fn pages(n: u32) -> Vec<u32> {
        (1..=n).collect()
    }

    #[test]
    fn runs_split_where_either_side_jumps() {
        assert_eq!(
            contiguous_runs(&[1, 2, 3, 7, 8], &[4, 5, 9, 10, 11]),
            vec![(1, 4, 2), (3, 9, 1), (7, 10, 2)]
        );
        // The sender truncates the source list to the destination's length.
        assert_eq!(contiguous_runs(&[1, 2, 3], &[5]), vec![(1, 5, 1)]);
    }

    #[test]
    fn rank_mapping_of_section_2_1() {
        let t = rank_mapping(2, 2, false, false).unwrap();
        assert!(
            t.iter()
                .all(|t| t.prefill_rank == t.decode_rank && !t.dummy)
        );
        let t = rank_mapping(1, 4, false, false).unwrap();
        assert_eq!(t.len(), 4);
        assert!(t.iter().all(|t| t.prefill_rank == 0));
        let t = rank_mapping(4, 2, false, false).unwrap();
        assert_eq!(t.len(), 4);
        assert!(
            t.iter()
                .all(|t| t.decode_rank == t.prefill_rank / 2 && !t.dummy)
        );
        let t = rank_mapping(4, 2, true, false).unwrap();
        assert_eq!(t.iter().filter(|t| !t.dummy).count(), 2);
        assert!(
            t.iter()
                .filter(|t| !t.dummy)
                .all(|t| t.prefill_rank % 2 == 0)
        );
        assert!(rank_mapping(3, 2, false, false).is_err());
    }

    #[test]
    fn mha_equal_tp_bytes_and_writes() {
        // Llama-3.1-8B, tp 2 both sides, ps 16: 64 regions of 16384 B per rank.
        let pl = plan(
            "llama-3.1-8b",
            args(2, 16, "auto", false),
            args(2, 16, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
        let src = [10, 11, 12, 20];
        let dst = [3, 4, 5, 6];
        let req = ChunkRequest {
            src_pages: &src,
            dst_pages: &dst,
            last: false,
            src_slot: None,
            dst_slot: None,
            src_aux: 0,
            dst_aux: 0,
        };
        let t = pl.chunk(&req);
        assert_eq!(t.error, None);
        assert_eq!(t.flows.len(), 2);
        // Two runs (src jumps 12 → 20).
        assert_eq!(t.flows[0].writes, 64 * 2);
        assert_eq!(t.flows[0].bytes, 64 * 4 * 16384);
        // Across the instance: layers × max(kv_heads, tp) × head_dim × 2 × dtype per token.
        let total: u64 = t.flows.iter().map(|f| f.bytes).sum();
        let m = preset("llama-3.1-8b").unwrap();
        assert_eq!(total, 4 * 16 * m.kv_bytes_per_token_instance(2, 2));
    }

    #[test]
    fn head_sliced_write_count_is_arithmetic() {
        // §3.3 example: Llama-3.1-8B, ps 16, 8192-token chunk, tp 1 → 2: per decode rank
        // 64 × 512 × 16 = 524 288 writes of 1024 B.
        let pl = plan(
            "llama-3.1-8b",
            args(1, 16, "auto", false),
            args(2, 16, "auto", false),
            Profile::SliceDispatch,
        );
        assert_eq!(pl.send_path(), SendPath::Slice);
        assert!(pl.is_exact());
        let src = pages(512);
        let dst = pages(512);
        let req = ChunkRequest {
            src_pages: &src,
            dst_pages: &dst,
            last: false,
            src_slot: None,
            dst_slot: None,
            src_aux: 0,
            dst_aux: 0,
        };
        let t = pl.chunk(&req);
        assert_eq!(t.flows.len(), 2);
        for f in &t.flows {
            assert_eq!(f.writes, 524_288);
            assert_eq!(f.bytes, 524_288 * 1024);
        }
        let mut w = Vec::new();
        pl.writes(&req, &mut w);
        assert_eq!(w.iter().map(Write::entries).sum::<u64>(), 2 * 524_288);
        assert_eq!(w.iter().map(Write::bytes).sum::<u64>(), 2 * 524_288 * 1024);
    }

    #[test]
    fn many_prefill_ranks_to_one_decode_rank() {
        // Replicated heads on prefill (tp 16 > 8 heads), decode tp 2.
        let pl = plan(
            "llama-3.1-8b",
            args(4, 16, "auto", false),
            args(2, 16, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
        let pl = plan(
            "llama-3.1-8b",
            args(16, 1, "auto", false),
            args(2, 1, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
        let pl = plan(
            "qwen3-next-80b-a3b",
            args(8, 16, "auto", false),
            args(2, 16, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
        let pl = plan(
            "qwen3-next-80b-a3b",
            args(1, 16, "auto", false),
            args(4, 16, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
    }

    #[test]
    fn mla_replicates_the_latent_and_uses_dummies() {
        let pl = plan(
            "deepseek-v3",
            args(2, 64, "auto", false),
            args(8, 64, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact());
        let src = pages(3);
        let req = ChunkRequest {
            src_pages: &src,
            dst_pages: &src,
            last: false,
            src_slot: None,
            dst_slot: None,
            src_aux: 0,
            dst_aux: 0,
        };
        let t = pl.chunk(&req);
        // Every decode rank gets the whole latent: 61 × 3 × 73728 B.
        assert_eq!(t.flows.len(), 8);
        assert!(
            t.flows
                .iter()
                .all(|f| f.bytes == 61 * 3 * 73728 && f.writes == 61)
        );
        let pl = plan(
            "deepseek-v3",
            args(8, 64, "auto", false),
            args(2, 64, "auto", false),
            Profile::Guarded,
        );
        assert_eq!(pl.targets().iter().filter(|t| t.dummy).count(), 6);
        assert_eq!(pl.chunk(&req).flows.len(), 2);
        assert!(pl.is_exact());
    }

    #[test]
    fn hybrid_state_and_aux_on_the_last_chunk() {
        let pl = plan(
            "qwen3-next-80b-a3b",
            args(2, 16, "auto", false),
            args(4, 16, "auto", false),
            Profile::Guarded,
        );
        assert!(pl.is_exact(), "sliced mamba state with conv shard groups");
        let src = pages(2);
        let req = ChunkRequest {
            src_pages: &src,
            dst_pages: &src,
            last: true,
            src_slot: Some(1),
            dst_slot: Some(2),
            src_aux: 0,
            dst_aux: 1,
        };
        let t = pl.chunk(&req);
        assert_eq!(t.error, None);
        // Per decode rank: KV 24 × 2 pages × 16 tokens, state 36 × 3 conv + 36 temporal, aux 10.
        let f = t.flows[0];
        assert_eq!(f.writes, 24 * 2 * 16 + 36 * 3 + 36 + 10);
        // State bytes per decode rank = one decode slot (12288 + 524288 per layer).
        let aux: u64 = pl.decode_layouts()[0].aux_row_bytes();
        let kv = 24 * 2 * 16 * 512;
        assert_eq!(f.bytes, kv + 36 * (12288 + 524_288) + aux);
    }
}
