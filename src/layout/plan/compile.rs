//! Compiling a [`PairPlan`] (`docs/sglang-pd.md` §2.1, §2.4, §2.5, §3): the rank mapping, the
//! send path, which checks fire and when, and per target the KV runs, state blocks and aux rows
//! it sends. Everything here runs once per (prefill pool, decode pool) pair; what it leaves for
//! per-chunk work is only the page runs.
//!
//! Units: bytes for every offset and length; region and rank ids are indices.

use super::{KvSend, PairPlan, RegionRun, StateSend, Target, TargetPlan, push_pair};
use crate::layout::LayoutError;
use crate::layout::checks::{self, PdError, Profile, SendPath};
use crate::layout::rank::{RankLayout, StatePart};
use crate::spec::{ModelSpec, ServerArgs};
use crate::vocab::ErrorKind;

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

        if profile.refuses_unified_mha_hybrid_pd() {
            for (side, l) in [("prefill", p0), ("decode", d0)] {
                if l.unified && !l.mla {
                    return Err(LayoutError::UnifiedPdRefused {
                        model: l.model.clone(),
                        side,
                    });
                }
            }
        }
        let first_contact = checks::first_contact_with(
            p0.page_size,
            &p0.kv_cache_dtype,
            d0.page_size,
            &d0.kv_cache_dtype,
            profile.first_contact_dtype_check(),
        )
        .err();

        // docs/sglang-pd.md §4.4: the send function, and whether the validator guards it.
        let path = profile.kv_send_path(p0.mla, p0.unified, tp_p, tp_d);
        let state = state_pairing(profile, p0, d0);

        // docs/sglang-pd.md §27: with `--pp-size` every stage's TP ranks are writers of their
        // own layers. A decode of pp_size 1 contacts every stage (`CommonKVReceiver`:
        // `target_pp_ranks = range(prefill pp_size)`), so each stage repeats the TP rank
        // mapping, its prefill ranks numbered `stage · tp_p + tp rank` (stage-major, as
        // `RankLayout::all_ranks` lists them), and pairs its regions from its `start_layer`.
        let stages = p_layouts.len() as u32 / tp_p.max(1);
        let mut kv_error = None;
        let mut plans = Vec::with_capacity(targets.len() * stages as usize);
        for stage in 0..stages {
            let s0 = &p_layouts[(stage * tp_p) as usize];
            let (kv_runs, error) = kv_pairing(profile, path, s0, d0, stages == 1);
            kv_error = kv_error.or(error);
            for t in &targets {
                let t = Target {
                    prefill_rank: stage * tp_p + t.prefill_rank,
                    ..*t
                };
                let p = &p_layouts[t.prefill_rank as usize];
                let d = &d_layouts[t.decode_rank as usize];
                let mut plan = target_plan(t, p, d, path, &kv_runs, &state);
                // `transfer_worker`: `if kv_chunk.is_last and self.pp_group.is_last_rank:
                // send_aux(...)`: only the last stage writes the metadata row.
                if stage + 1 != stages {
                    plan.aux.clear();
                }
                plans.push(plan);
            }
        }

        let mut plan = PairPlan {
            profile,
            prefill: p_layouts,
            decode: d_layouts,
            path,
            first_contact,
            kv_error,
            state_error: state.error,
            targets: plans,
            exact: false,
            kv_checksum: None,
            staging: None,
            dcp_size: decode.1.dcp_size.max(1),
            dcp_pack: None,
            extras: false,
        };
        if plan.dcp_size > 1 {
            plan.relayout_dcp();
            // The oracle's boxes pair whole page rows; a DCP rank's page holds every
            // `dcp_size`-th token of a virtual page, which its labels do not describe. The
            // relayout's source and destination come from one owner rule
            // (`build_dcp_token_transfer_plan`, the decode planner's `p % dcp_size`, `p /
            // dcp_size`), so the pair is taken as exact, not probed (docs/sglang-pd.md §28).
            plan.exact = true;
            return Ok(plan);
        }
        plan.exact = plan.probe_exact();
        Ok(plan)
    }
}

impl PairPlan {
    /// Turns every MLA target's `send_kvcache` into `send_kvcache_dcp` for a decode of
    /// `dcp_size` ranks a TP group: `transfer_worker` takes the DCP branch for a registration
    /// with `requires_dcp_relayout` (decode DCP > 1 from a DCP-1 prefill) before the MLA /
    /// equal-TP one, pairing the same layer regions (`get_mla_kv_ptrs_with_pp`) at
    /// `dcp_token_item_lens` = each region's `item_len / page_size` bytes a token. A decode
    /// rank's DCP rank is its TP rank `% dcp_size` (`_pack_dcp_rank_once`'s note). Dummy and
    /// empty targets stay as they are.
    fn relayout_dcp(&mut self) {
        let dcp = self.dcp_size;
        let mut packed_by: Vec<(u32, u32)> = Vec::new();
        for t in &mut self.targets {
            let KvSend::Generic { runs, item } = &t.kv else {
                continue;
            };
            let ps = self.prefill[t.target.prefill_rank as usize]
                .page_size
                .max(1);
            let dcp_rank = t.target.decode_rank % dcp;
            let key = (t.target.prefill_rank, dcp_rank);
            let packs = !packed_by.contains(&key);
            if packs {
                packed_by.push(key);
            }
            t.kv = KvSend::Dcp {
                runs: runs.clone(),
                token_item: item / u64::from(ps),
                page_size: ps,
                dcp_size: dcp,
                dcp_rank,
                packs,
            };
        }
    }
}

/// Which KV regions pair with which (rank 0 of each side stands for all: every rank of an
/// instance registers the same region list), and the error every chunk raises before its first
/// write: the envelope validator if it runs (docs/sglang-pd.md §2.4), the layer-range check (§2.5), or the
/// `IndexError` a too-short decode list provokes.
fn kv_pairing(
    profile: Profile,
    path: SendPath,
    p0: &RankLayout,
    d0: &RankLayout,
    one_stage: bool,
) -> (Vec<RegionRun>, Option<PdError>) {
    // `kv_args.prefill_start_layer`: where a pipeline stage's layers start in the decode's
    // full-model list (0 without PP).
    let start = p0.start_layer;
    let (tp_p, tp_d) = (p0.attn_tp_size, d0.attn_tp_size);
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
    // Published layer ids decide the pairing wherever either side has them (docs/sglang-pd.md §1.1, §3.2):
    // `has_layer_ids = bool(src_layer_ids or dst_layer_ids)`.
    let has_ids = !p0.kv_layer_ids.is_empty() || !d0.kv_layer_ids.is_empty();
    // Flat branch: MLA, hybrid-MLA, force_flat (= the prefill's unified flag) or layer ids.
    let flat = p0.mla || p0.unified || has_ids;
    let mut kv_runs = Vec::new();
    if kv_error.is_none() {
        let by_ids = || {
            // `allow_positional_fallback = self.pp_size == 1`.
            checks::build_transfer_entry_pairs(
                &p0.kv_layer_ids,
                &d0.kv_layer_ids,
                n_src as usize,
                n_dst as usize,
                one_stage,
                ErrorKind::KvLayersOutOfRange,
            )
        };
        let mut pair = |pairs: Vec<(u32, u32)>| {
            for (i, j) in pairs {
                push_pair(&mut kv_runs, i, j);
            }
        };
        match path {
            SendPath::SendKvcache if flat && has_ids => match by_ids() {
                Ok(pairs) => pair(pairs),
                Err(e) => kv_error = Some(e),
            },
            SendPath::SendKvcache if flat => {
                // `get_mla_kv_ptrs_with_pp`: equal lengths pair whole; otherwise
                // `dst[start : start + len(src)]`, which the list comprehension indexes past
                // when it is shorter than src.
                if n_dst == n_src {
                    pair((0..n_src).map(|i| (i, i)).collect());
                } else if n_dst < start + n_src {
                    kv_error = Some(checks::index_error());
                } else {
                    pair((0..n_src).map(|i| (i, start + i)).collect());
                }
            }
            SendPath::SendKvcache => match mha_pairs(n_src, n_dst, start) {
                Ok(m) => {
                    kv_error = checks::check_kv_layers(m.layers, m.dst_k)
                        .err()
                        .or(m.index_error);
                    if kv_error.is_none() {
                        pair(m.pairs);
                    }
                }
                Err(e) => kv_error = Some(e),
            },
            // `send_kvcache_slice` with layer ids pairs by id (its "one item length" guard
            // cannot fire: K and V entries of one model share the item length).
            SendPath::Slice if has_ids => match by_ids() {
                Ok(pairs) => pair(pairs),
                Err(e) => kv_error = Some(e),
            },
            SendPath::Slice => match mha_pairs(n_src, n_dst, start) {
                // No explicit range check on this path: `dst_k_ptrs[i]` raises IndexError.
                Ok(m) => match m.index_error {
                    Some(e) => kv_error = Some(e),
                    None if m.layers > m.dst_k => kv_error = Some(checks::index_error()),
                    None => pair(m.pairs),
                },
                Err(e) => kv_error = Some(e),
            },
        }
    }
    (kv_runs, kv_error)
}

/// How the last chunk's mamba state pairs up (docs/sglang-pd.md §3.5), decided once per instance pair.
struct StatePairing {
    /// `(prefill state region, decode state region)`, positional.
    pairs: Vec<(u32, u32)>,
    /// Unequal TP with per-tensor dims on both sides: `_send_mamba_state_slice`.
    sliced: bool,
    /// The mamba check that raises after the last chunk's KV, if any.
    error: Option<PdError>,
}

/// The mamba checks of docs/sglang-pd.md §2.5 and the positional state pairing of §3.5 (pp = 1).
fn state_pairing(profile: Profile, p0: &RankLayout, d0: &RankLayout) -> StatePairing {
    let (tp_p, tp_d) = (p0.attn_tp_size, d0.attn_tp_size);
    let mut error = None;
    let (p_dims, d_dims) = (p0.state_dim_per_tensor(), d0.state_dim_per_tensor());
    let (p_lens, d_lens) = (p0.state_item_lens(), d0.state_item_lens());
    let mut sliced = false;
    let mut pairs: Vec<(u32, u32)> = Vec::new();
    if p0.swa && !p0.state_regions.is_empty() {
        // `maybe_send_extra`, generic state types (SWA): different attention TP on a non-MLA
        // model raises (every version, so every profile); otherwise the windows go by
        // position (the SWA component publishes no state layer ids).
        error = checks::check_swa_hetero_tp("swa", p0.mla || p0.hybrid_mla(), tp_p, tp_d).err();
        if error.is_none() {
            match checks::build_transfer_entry_pairs(
                &[],
                &[],
                p_lens.len(),
                d_lens.len(),
                true,
                ErrorKind::HeteroTpUnsupported,
            ) {
                Ok(p) => pairs = p,
                Err(e) => error = Some(e),
            }
        }
        return StatePairing {
            pairs,
            sliced: false,
            error,
        };
    }
    if !p0.state_regions.is_empty() {
        if profile.state_checks() {
            error = checks::check_mamba_layouts(&p_dims, &d_dims, &p_lens, &d_lens).err();
        }
        let (ns, nd) = (p_lens.len(), d_lens.len());
        if error.is_none() {
            // The MAMBA component publishes no state layer ids: positional with fallback
            // (pp = 1).
            match checks::build_transfer_entry_pairs(
                &[],
                &[],
                ns,
                nd,
                true,
                ErrorKind::MambaLayoutMismatch,
            ) {
                Ok(p) => pairs = p,
                Err(e) => error = Some(e),
            }
        }
        if error.is_none() {
            sliced = tp_p != tp_d && !p_dims.is_empty() && !d_dims.is_empty();
            if !sliced && profile.state_checks() {
                error = pairs.iter().find_map(|&(i, j)| {
                    checks::check_mamba_slot_size(p_lens[i as usize], d_lens[j as usize]).err()
                });
            }
        }
    }
    StatePairing {
        pairs,
        sliced,
        error,
    }
}

/// What one (prefill rank, decode rank) target sends: its KV runs, its state blocks and its aux
/// rows. A dummy target sends nothing.
fn target_plan(
    t: Target,
    p: &RankLayout,
    d: &RankLayout,
    path: SendPath,
    kv_runs: &[RegionRun],
    state: &StatePairing,
) -> TargetPlan {
    if t.dummy {
        return TargetPlan {
            target: t,
            kv: KvSend::Nothing,
            state: Vec::new(),
            aux: Vec::new(),
        };
    }
    let (tp_p, tp_d) = (p.attn_tp_size, d.attn_tp_size);
    // Hybrid-MLA prefill ranks with sub_rank != 0 skip KV (docs/sglang-pd.md §3.4).
    let skip_kv = p.hybrid_mla() && tp_p > tp_d && !t.prefill_rank.is_multiple_of(tp_p / tp_d);
    let kv = if skip_kv || kv_runs.is_empty() {
        KvSend::Nothing
    } else {
        match path {
            SendPath::SendKvcache => KvSend::Generic {
                runs: kv_runs.to_vec(),
                item: p.kv_regions[0].item_len,
            },
            SendPath::Slice => {
                let slice = head_slice(p, d);
                KvSend::Sliced {
                    runs: kv_runs.to_vec(),
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
    let aux = (0..d.aux.len().min(p.aux.len()) as u32)
        .map(|i| (i, p.aux[i as usize].item_len))
        .collect();
    TargetPlan {
        target: t,
        kv,
        state: merge_state(state_sends(t, p, d, state)),
        aux,
    }
}

/// The state blocks of one target, one per paired region (several per conv region when sliced
/// by GDN sub-block), before [`merge_state`] groups them.
fn state_sends(t: Target, p: &RankLayout, d: &RankLayout, state: &StatePairing) -> Vec<StateSend> {
    let (tp_p, tp_d) = (p.attn_tp_size, d.attn_tp_size);
    let mut out = Vec::new();
    for &(i, j) in &state.pairs {
        let (sr, dr) = (&p.state_regions[i as usize], &d.state_regions[j as usize]);
        let run = RegionRun {
            src: i,
            dst: j,
            count: 1,
        };
        if state.sliced {
            let groups = if sr.part == StatePart::Conv {
                p.conv_shard_groups.as_slice()
            } else {
                &[]
            };
            for (so, dof, len) in mamba_slice_blocks(
                (sr.item_len, dr.item_len),
                (
                    sr.dim_per_tensor.unwrap_or(1),
                    dr.dim_per_tensor.unwrap_or(1),
                ),
                sr.outer_count.max(1),
                groups,
                tp_p,
                tp_d,
                t.prefill_rank,
                t.decode_rank,
            ) {
                out.push(StateSend {
                    run,
                    src_item: sr.item_len,
                    dst_stride: dr.item_len,
                    src_off: so,
                    dst_off: dof,
                    len,
                });
            }
        } else {
            // Unsliced (docs/sglang-pd.md §3.5): the whole source slot, at the source's stride.
            out.push(StateSend {
                run,
                src_item: sr.item_len,
                dst_stride: sr.item_len,
                src_off: 0,
                dst_off: 0,
                len: sr.item_len,
            });
        }
    }
    out
}

/// docs/sglang-pd.md §2.1 `_resolve_rank_mapping`: every (prefill rank, decode rank) target.
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
        // real; hybrid-MLA keeps them real (they send TP-sharded state, docs/sglang-pd.md §3.4).
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

/// What `get_mha_kv_ptrs_with_pp` (pp = 1, `start_layer = 0`) gives one target: the K then V
/// region pairs, the stage's layer count and `len(dst_k_ptrs)` for the range check, and the
/// `IndexError` the V pairs would raise if their slice is short.
struct MhaPairs {
    pairs: Vec<(u32, u32)>,
    layers: usize,
    dst_k: usize,
    index_error: Option<PdError>,
}

/// `get_mha_kv_ptrs_with_pp` with Python's slicing (docs/sglang-pd.md §3.2): `num_kv_layers = len(src) // 2`,
/// `dst_num_total_layers = len(dst) // 2`; equal → halves; decode with extra draft layers
/// (`dst_total % layers != 0`) → K `dst[:layers]`, V from `layers · (dst_total // layers)`;
/// otherwise K `dst[:layers]`, V `dst[dst_total : dst_total + layers]`. A slice past the end
/// is short, not an error, so `len(dst_k_ptrs) = min(layers, len(dst))`, not `len(dst) / 2`.
/// A pipeline stage's slices start at its `start_layer` (`dst[start_layer:end_layer]`, V at
/// the same offset past its base): with pp = 1 every start is 0 (docs/sglang-pd.md §27).
fn mha_pairs(n_src: u32, n_dst: u32, start: u32) -> Result<MhaPairs, PdError> {
    let (layers, dst_total) = (n_src / 2, n_dst / 2);
    let slice = |start: u32, len: u32| start.min(n_dst)..(start + len).min(n_dst);
    let (k, v) = if layers == dst_total {
        (0..dst_total, dst_total..n_dst)
    } else if layers < dst_total {
        if layers == 0 {
            // `dst_num_total_layers % num_kv_layers` divides by zero.
            return Err(checks::zero_division_error());
        }
        if dst_total % layers != 0 {
            (
                slice(start, layers),
                slice(layers * (dst_total / layers) + start, layers),
            )
        } else {
            (slice(start, layers), slice(dst_total + start, layers))
        }
    } else {
        (slice(start, layers), slice(dst_total + start, layers))
    };
    let dst_k = k.len();
    let mut pairs = Vec::new();
    let mut index_error = None;
    if layers as usize <= dst_k {
        pairs.extend((0..layers).map(|i| (i, k.start + i)));
        if (layers as usize) > v.len() {
            index_error = Some(checks::index_error());
        } else {
            pairs.extend((0..layers).map(|i| (layers + i, v.start + i)));
        }
    }
    Ok(MhaPairs {
        pairs,
        layers: layers as usize,
        dst_k,
        index_error,
    })
}

/// The byte blocks of `_send_mamba_state_slice` for one entry (docs/sglang-pd.md §3.5, older inline formula,
/// applied per GDN/KDA conv sub-block): `(src_off, dst_off, len)`. `outer` is the entry's
/// `get_state_slice_outer_counts` value: the sliced axis repeats `outer` times per slot (KDA conv
/// `[K - 1, channels/tp]`), so the blocks repeat once per outer row, each row
/// `item / outer` bytes further (sglang `compute_mamba_state_slice_byte_blocks`, which takes
/// the outer count since the Kimi-Linear `conv_slice_axis = 1` change).
#[allow(clippy::too_many_arguments)]
fn mamba_slice_blocks(
    (src_item, dst_item): (u64, u64),
    (src_dim, dst_dim): (u32, u32),
    outer: u32,
    groups: &[u32],
    tp_p: u32,
    tp_d: u32,
    p_rank: u32,
    d_rank: u32,
) -> Vec<(u64, u64, u64)> {
    let (src_row, dst_row) = (src_item / u64::from(outer), dst_item / u64::from(outer));
    let src_bpd = src_row / u64::from(src_dim);
    let dst_bpd = dst_row / u64::from(dst_dim);
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
    for o in 0..u64::from(outer) {
        let (mut src_base, mut dst_base) = (0u64, 0u64);
        for (&sw, &dw) in src_w.iter().zip(&dst_w) {
            let (src_start, n, dst_start) = if tp_p > tp_d {
                let writers = tp_p / tp_d;
                (0, sw, (p_rank % writers) * sw)
            } else {
                ((d_rank * dw) % sw, dw, 0)
            };
            out.push((
                o * src_row + (src_base + u64::from(src_start)) * src_bpd,
                o * dst_row + (dst_base + u64::from(dst_start)) * dst_bpd,
                u64::from(n) * src_bpd,
            ));
            src_base += u64::from(sw);
            dst_base += u64::from(dw);
        }
    }
    out
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

/// `send_kvcache_slice` head mapping (docs/sglang-pd.md §3.3): `(src byte offset in a token row, dst byte offset in
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
mod tests {
    use super::*;

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
}
