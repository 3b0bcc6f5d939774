//! The transfer plan of one (prefill instance, decode instance) pair (`docs/sglang-pd.md` §2.1,
//! docs/sglang-pd.md §3): compiled once, asked per chunk.
//!
//! A [`PairPlan`] holds the rank mapping, the send path per (prefill rank, decode rank) target,
//! and which checks fire and when. Per chunk, [`PairPlan::chunk`] gives the flows (bytes and RDMA
//! write count per target) in O(pages + targets), never per token; [`PairPlan::writes`] gives the
//! concrete writes for the corruption oracle, at run granularity. [`PairPlan::is_exact`] says
//! whether every write lands exactly where the decode layout expects it, so the simulator can
//! skip the oracle.
//!
//! Files, in dependency order: this one holds the plan's data and accessors; `compile.rs` builds
//! it from two instances' layouts; `chunk.rs` answers per chunk; `probe.rs` runs the plan's
//! writes through the oracle (the plan depends on the oracle, never the reverse).
//!
//! Units: bytes for every length, offset and stride; page, slot, aux-row and region ids are
//! indices.

use serde::Serialize;

use crate::layout::checks::{PdError, Profile, SendPath};
use crate::layout::rank::RankLayout;

mod chunk;
mod compile;
mod probe;
#[cfg(test)]
mod tests;

pub use chunk::contiguous_runs;

/// What the simulator asks per chunk. Page ids are the instance's physical ids: `src_pages` on
/// the prefill, `dst_pages` the decode page ids sglang pairs with them (the slice
/// `dst_kv_indices[index_slice]` of the decode's list, in prefill page positions; docs/sglang-pd.md §3.1).
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

/// One (prefill rank, decode rank) pair of the rank mapping (docs/sglang-pd.md §2.1).
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
    /// the prefill's `item` (docs/sglang-pd.md §3.2 step 3).
    Generic { runs: Vec<RegionRun>, item: u64 },
    /// `send_kvcache_slice`: one write per (region, page, token) (docs/sglang-pd.md §3.3).
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
    /// Destination slot stride: the source length on the unsliced path (docs/sglang-pd.md §3.5), the decode's
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

impl PairPlan {
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

    /// Whether the prefill registers state regions (Mamba / GDN / SWA state), which its last
    /// chunk sends with a call of their own.
    pub fn has_state(&self) -> bool {
        !self.prefill_layouts()[0].state_regions.is_empty()
    }

    /// Which of sglang's send paths the KV takes (`send_kvcache` or `send_kvcache_slice`).
    pub fn send_path(&self) -> SendPath {
        self.path
    }

    /// Every (prefill rank, decode rank) target, dummies included, sorted by (prefill rank,
    /// decode rank).
    pub fn targets(&self) -> Vec<Target> {
        self.targets.iter().map(|t| t.target).collect()
    }

    /// Target number `i` (an index into [`PairPlan::targets`]).
    pub fn target(&self, i: usize) -> Target {
        self.targets[i].target
    }

    /// The indices of prefill rank `rank`'s targets: the decode ranks whose metadata that
    /// rank's `transfer_infos[room]` holds, in decode-rank order (docs/sglang-pd.md §2.1, §3.1).
    pub fn rank_targets(&self, rank: u32) -> std::ops::Range<usize> {
        let start = self
            .targets
            .partition_point(|t| t.target.prefill_rank < rank);
        let end = self
            .targets
            .partition_point(|t| t.target.prefill_rank <= rank);
        start..end
    }

    /// Decode's first-contact error (page size, KV dtype string), raised on decode before the
    /// request's metadata is sent (docs/sglang-pd.md §2.1). `None` under `unguarded`.
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
    /// with [`crate::layout::DecodeMemory::apply_exact`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }
}
