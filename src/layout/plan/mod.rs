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
    /// `send_kvcache_dcp` into a decode with context parallelism (docs/sglang-pd.md §28):
    /// the target's decode rank owns the chunk's tokens `p` with `p % dcp_size == dcp_rank`,
    /// at its local slot `p / dcp_size` (`build_dcp_token_transfer_plan`). One block per
    /// (region, group of `group_concurrent_contiguous`): per owned token without packing
    /// (the source rows are `dcp_size` apart), per run of destination-contiguous slots when
    /// the prefill packed the rows first (PR #35762, [`DcpPack`]).
    Dcp {
        runs: Vec<RegionRun>,
        /// Bytes of one token's row in one region (`dcp_token_item_lens`: `item_len /
        /// page_size`).
        token_item: u64,
        /// Physical tokens per page, both sides.
        page_size: u32,
        dcp_size: u32,
        dcp_rank: u32,
        /// The first of its prefill rank's targets with this DCP rank: it packs the rows, the
        /// others reuse them (`_pack_dcp_rank_once`: "TP ranks may share a DCP rank ... so they
        /// reuse one packed source").
        packs: bool,
    },
}

/// Where a chunk sits in its request, which only a decode with context parallelism reads
/// ([`PairPlan::dcp_size`]; its chunk's `dst_pages` are then the request's whole decode page
/// list, as `send_kvcache_dcp` takes `req.dst_kv_indices` unsliced; docs/sglang-pd.md §28).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DcpSpan {
    /// The chunk's first page position in the request (`kv_chunk.index_slice.start`): its
    /// tokens start at `src_page_offset × page_size`.
    pub src_page_offset: u32,
    /// The KV tokens of this chunk (`kv_chunk.num_kv_tokens`: its pages' tokens, fewer on a
    /// last page the prompt does not fill).
    pub tokens: u32,
}

/// What one DCP target sends of one chunk ([`PairPlan::dcp_chunk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcpChunk {
    /// Tokens of the chunk its decode rank owns.
    pub owned: u64,
    /// KV regions (layers) it writes.
    pub regions: u64,
    /// Blocks (RDMA writes) per region: `owned` per token, or the destination-contiguous runs
    /// when packed.
    pub writes_per_region: u64,
    /// The rows went through the prefill's pack buffer (they fit its rank region).
    pub packed: bool,
    /// Bytes of one owned token over every region.
    pub token_bytes: u64,
}

/// The prefill's DCP pack buffer (sglang PR #35762, `common/dcp_pack.py`): one per transfer
/// worker, `dcp_size × ceil(max_tokens / dcp_size) × Σ token_item_lens` bytes
/// (`dcp_pack_buffer_bytes`), each DCP rank packing at its fixed offset `rank × size /
/// dcp_size` (`_pack_dcp_rank_once`). `try_pack_dcp_src` returns `None` — the per-token RDMA
/// fallback — when `offset + owned × Σ token_item_lens` passes the buffer's end, i.e. when the
/// rank owns more than `(dcp_size − rank) × ceil(max_tokens / dcp_size)` tokens of the chunk
/// (PR #40336 describes exactly this, for chunks larger than `max_prefill_tokens`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DcpPack {
    /// `ceil(max_tokens / dcp_size)`: tokens of one rank region, tokens.
    pub rank_tokens: u64,
    /// Prefill GPU HBM bandwidth, bytes/s (the gather kernel `copy_mla_rows_into_pack` reads
    /// each owned row once and writes it once).
    pub prefill_bytes_per_s: f64,
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
    /// `--disaggregation-enable-kv-checksum` on this pair ([`PairPlan::enable_kv_checksum`]);
    /// `None` when off, so a run without it does no checksum work at all.
    kv_checksum: Option<KvChecksum>,
    /// `SGLANG_DISAGG_STAGING_BUFFER` on this pair's head-sliced path
    /// ([`PairPlan::enable_staging`]); `None` when off or when the pair sends no sliced KV.
    staging: Option<Staging>,
    /// The decode's `--dcp-size` (1 without decode context parallelism).
    dcp_size: u32,
    /// The prefill's DCP pack buffer ([`PairPlan::enable_dcp_pack`]); `None`: every DCP
    /// target sends per token, as before sglang PR #35762.
    dcp_pack: Option<DcpPack>,
    /// `kv_checksum`, `staging` or `dcp_pack` is on: one flag the transfer worker tests per
    /// batch and per concluded chunk, so a pair with none pays one branch for all.
    extras: bool,
}

/// The GPU staging buffer on one heterogeneous-TP pair (`SGLANG_DISAGG_STAGING_BUFFER=1`,
/// sglang PR #19890 for Mooncake, #22536 for NIXL): what it changes and what it costs.
/// `MooncakeKVManager.transfer_worker` takes `_do_staging_transfer` where it would take
/// `send_kvcache_slice` (attention TP differs, not MLA, the decode registered a ring);
/// `send_kvcache_staged` gathers the target's head slices of every layer into the prefill
/// queue's staging buffer (`gather_all_layers_to_staging`, one fused Triton kernel) and makes
/// **one** `_transfer_data` call with **one** block per (chunk, target); decode scatters the
/// ring region into its pages once every writer of the chunk arrived
/// (`DecodeStagingHandler.handle_chunk_arrived` → `scatter_staging_to_kv`). Both copies are
/// priced as HBM-bound device copies (every byte read once and written once), a lower bound
/// stated as one: the kernels' achieved bandwidth was not measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Staging {
    /// `SGLANG_DISAGG_STAGING_POOL_SIZE_MB` × 2^20: each decode rank's ring, bytes.
    pub pool_bytes: u64,
    /// Bytes one decode rank receives per page of a chunk, summed over its writers
    /// (`compute_staging_layout`'s total: the decode rank's own KV page), bytes.
    pub decode_page_bytes: u64,
    /// Writers of each decode rank's chunk region (`DecodeStagingHandler.num_writers_for`:
    /// `tp_P / tp_D` when the prefill is wider, else 1), by decode rank.
    pub writers: Vec<u32>,
    /// Prefill GPU HBM bandwidth, bytes/s.
    pub prefill_bytes_per_s: f64,
    /// Decode GPU HBM bandwidth, bytes/s.
    pub decode_bytes_per_s: f64,
}

impl Staging {
    /// A device copy of `bytes` (read once, written once) at `bytes_per_s`, ns, rounded up.
    fn copy_ns(bytes: u64, bytes_per_s: f64) -> u64 {
        (2.0 * bytes as f64 / bytes_per_s * 1e9).ceil() as u64
    }

    /// The prefill's gather of `bytes` of one target into its staging buffer, ns.
    pub fn gather_ns(&self, bytes: u64) -> u64 {
        Self::copy_ns(bytes, self.prefill_bytes_per_s)
    }

    /// What one decode rank's ring region of a chunk of `pages` pages holds, bytes.
    pub fn region_bytes(&self, pages: u64) -> u64 {
        pages * self.decode_page_bytes
    }

    /// The decode's scatter of a chunk of `pages` pages from its ring region, ns.
    pub fn scatter_ns(&self, pages: u64) -> u64 {
        Self::copy_ns(self.region_bytes(pages), self.decode_bytes_per_s)
    }
}

/// What `--disaggregation-enable-kv-checksum` (sglang PR #39500) costs and decides on one
/// pair. Prefill digests the request's KV pages and state slot
/// (`disaggregation/checksum.py::KvChecksumComputer.compute`: Adler-32 over every registered
/// region's `item_len` bytes at the request's page indices, then the state regions at its
/// state indices) before the last chunk goes out; decode digests what landed in its own pages
/// before the request joins a batch (`get_new_prebuilt_batch`).
///
/// Priced as a read of every digested byte at the GPU's HBM bandwidth: the kernel
/// (`adler32_strided_checksum`) reads each byte once and does two integer adds per byte, far
/// below any GPU's integer throughput, so HBM bounds it. That is a lower bound, stated as one:
/// the kernel's achieved bandwidth was not measured. The ranks of an instance digest their own
/// bytes in parallel, so one rank's bytes price the instance.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KvChecksum {
    /// Bytes one prefill rank digests per KV page (all its KV regions), bytes.
    pub prefill_page_bytes: u64,
    /// Bytes one prefill rank digests per request's state slot, bytes.
    pub prefill_state_bytes: u64,
    /// Bytes one decode rank digests per KV page, bytes.
    pub decode_page_bytes: u64,
    /// Bytes one decode rank digests per state slot, bytes.
    pub decode_state_bytes: u64,
    /// Prefill GPU HBM bandwidth, bytes/s.
    pub prefill_bytes_per_s: f64,
    /// Decode GPU HBM bandwidth, bytes/s.
    pub decode_bytes_per_s: f64,
    /// Whether a healthy transfer digests to the same value on both sides: both register the
    /// same per-entry item lengths. Where they differ (unequal attention TP on a non-MLA
    /// model, a different state dtype) each side digests other bytes and every request
    /// mismatches — the false aborts on "several supported topologies" that sglang's open
    /// follow-up PR #39729 reports for #39500 as merged and answers by skipping the check.
    pub comparable: bool,
}

impl KvChecksum {
    /// The digest times of a request of `pages` KV pages (with a state slot when the pair has
    /// state): prefill's and decode's, ns, each rounded up to a whole nanosecond.
    pub fn digest_ns(&self, pages: u64) -> (u64, u64) {
        let ns = |bytes: u64, rate: f64| (bytes as f64 / rate * 1e9).ceil() as u64;
        (
            ns(
                pages * self.prefill_page_bytes + self.prefill_state_bytes,
                self.prefill_bytes_per_s,
            ),
            ns(
                pages * self.decode_page_bytes + self.decode_state_bytes,
                self.decode_bytes_per_s,
            ),
        )
    }
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

    /// The prefill's pipeline stages (`--pp-size`; 1 without PP): its ranks are
    /// `stage · attn_tp + tp rank`, each stage writing its own layers (docs/sglang-pd.md §27).
    #[inline]
    pub fn pp_size(&self) -> u32 {
        self.prefill.len() as u32 / self.prefill[0].attn_tp_size.max(1)
    }

    /// Whether target `i` writes the metadata (aux) row on the last chunk: every target
    /// without PP; with PP only the last stage's (`transfer_worker`: `if kv_chunk.is_last and
    /// self.pp_group.is_last_rank: send_aux`).
    #[inline]
    pub fn target_sends_aux(&self, i: usize) -> bool {
        !self.targets[i].aux.is_empty()
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

    /// Turns on `--disaggregation-enable-kv-checksum` for this pair (both servers set it, as
    /// sglang PR #39500 requires), with each side's GPU HBM bandwidth in bytes/s.
    pub fn enable_kv_checksum(&mut self, prefill_bytes_per_s: f64, decode_bytes_per_s: f64) {
        let (p, d) = (&self.prefill[0], &self.decode[0]);
        self.kv_checksum = Some(KvChecksum {
            prefill_page_bytes: p.kv_page_bytes(),
            prefill_state_bytes: p.state_slot_bytes(),
            decode_page_bytes: d.kv_page_bytes(),
            decode_state_bytes: d.state_slot_bytes(),
            prefill_bytes_per_s,
            decode_bytes_per_s,
            comparable: p.kv_item_lens() == d.kv_item_lens()
                && p.state_item_lens() == d.state_item_lens(),
        });
        self.extras = true;
    }

    /// Turns on `SGLANG_DISAGG_STAGING_BUFFER` for this pair with each decode rank's ring of
    /// `pool_bytes` and each side's GPU HBM bandwidth in bytes/s. Only the head-sliced path
    /// changes (docs/sglang-pd.md §26): a pair of equal attention TP, or MLA, keeps
    /// `send_kvcache` (`transfer_worker` tests that branch first), so its plan is untouched.
    pub fn enable_staging(
        &mut self,
        pool_bytes: u64,
        prefill_bytes_per_s: f64,
        decode_bytes_per_s: f64,
    ) {
        if self.path != SendPath::Slice
            || !self
                .targets
                .iter()
                .any(|t| matches!(t.kv, KvSend::Sliced { .. }))
        {
            return;
        }
        let mut writers = vec![0u32; self.decode.len()];
        for t in self.targets.iter().filter(|t| !t.target.dummy) {
            writers[t.target.decode_rank as usize] += 1;
        }
        self.staging = Some(Staging {
            pool_bytes,
            decode_page_bytes: self.decode[0].kv_page_bytes(),
            writers,
            prefill_bytes_per_s,
            decode_bytes_per_s,
        });
        self.extras = true;
    }

    /// The decode's `--dcp-size` (1 without decode context parallelism): its chunks take
    /// `send_kvcache_dcp` and their `dst_pages` are the request's whole decode list.
    #[inline]
    pub fn dcp_size(&self) -> u32 {
        self.dcp_size
    }

    /// Gives the prefill of a DCP pair its pack buffer (sglang PR #35762), sized for
    /// `max_tokens` tokens a chunk (`init_dcp_pack_buffers`), with the prefill GPU's HBM
    /// bandwidth in bytes/s for the gather. Nothing changes on a pair without DCP.
    pub fn enable_dcp_pack(&mut self, max_tokens: u32, prefill_bytes_per_s: f64) {
        if self.dcp_size <= 1 {
            return;
        }
        self.dcp_pack = Some(DcpPack {
            rank_tokens: u64::from(max_tokens).div_ceil(u64::from(self.dcp_size)),
            prefill_bytes_per_s,
        });
        self.extras = true;
    }

    /// The DCP pack buffer of this pair, when on.
    #[inline]
    pub fn dcp_pack(&self) -> Option<&DcpPack> {
        self.dcp_pack.as_ref()
    }

    /// The prefill's gather of target `i`'s owned rows of `req` (at `span`) into its pack
    /// buffer, ns
    /// (rounded up): read once and written once at HBM speed, a lower bound as for the
    /// staging buffer's gather; 0 when the target does not pack (no buffer, another target
    /// of its rank packed the same DCP rank, or the rows do not fit and go per token).
    pub fn dcp_gather_ns(&self, i: usize, req: &ChunkRequest, span: DcpSpan) -> u64 {
        let (Some(pack), Some(c)) = (&self.dcp_pack, self.dcp_chunk(i, req, span)) else {
            return 0;
        };
        let packs = matches!(self.targets[i].kv, KvSend::Dcp { packs: true, .. });
        if !packs || !c.packed {
            return 0;
        }
        let bytes = c.owned * c.token_bytes;
        (2.0 * bytes as f64 / pack.prefill_bytes_per_s * 1e9).ceil() as u64
    }

    /// Whether the pair has the KV checksum, the staging buffer or the DCP pack buffer on
    /// ([`PairPlan::kv_checksum`], [`PairPlan::staging`]).
    #[inline]
    pub fn has_extras(&self) -> bool {
        self.extras
    }

    /// The staging buffer of this pair, when on and used.
    #[inline]
    pub fn staging(&self) -> Option<&Staging> {
        self.staging.as_ref()
    }

    /// The KV bytes target `i` sends for a chunk of `pages` pages on the head-sliced path
    /// (what its gather copies), bytes; 0 on another path.
    pub fn sliced_kv_bytes(&self, i: usize, pages: u64) -> u64 {
        match &self.targets[i].kv {
            KvSend::Sliced {
                runs,
                page_size,
                len,
                ..
            } => {
                let regions: u64 = runs.iter().map(|r| u64::from(r.count)).sum();
                regions * pages * u64::from(*page_size) * len
            }
            _ => 0,
        }
    }

    /// The KV checksum of this pair, when on.
    #[inline]
    pub fn kv_checksum(&self) -> Option<&KvChecksum> {
        self.kv_checksum.as_ref()
    }

    /// Registration-time layout validation (sglang PR #37840,
    /// [`crate::layout::checks::validate_registration`]): a rejected pair fails every chunk
    /// before its first write with [`crate::layout::Effect::SessionRejected`]. Decode's own
    /// first-contact check (page size, KV dtype) runs before registration and keeps its
    /// precedence; the rejection replaces any later per-chunk or post-KV error, which no chunk
    /// reaches any more.
    pub fn validate_registration(&mut self) {
        if self.first_contact.is_some() {
            return;
        }
        let (p, d) = (&self.prefill[0], &self.decode[0]);
        fn side<'a>(
            l: &RankLayout,
            kv: &'a [u64],
            st: &'a [u64],
        ) -> crate::layout::checks::RegisteredLayout<'a> {
            crate::layout::checks::RegisteredLayout {
                attn_tp: l.attn_tp_size,
                page_size: l.page_size,
                state_components: crate::layout::checks::state_components(
                    !l.state_regions.is_empty(),
                    l.swa,
                ),
                kv_item_lens: kv,
                state_item_lens: st,
            }
        }
        let (pk, ps, dk, ds) = (
            p.kv_item_lens(),
            p.state_item_lens(),
            d.kv_item_lens(),
            d.state_item_lens(),
        );
        if let Err(e) =
            crate::layout::checks::validate_registration(side(p, &pk, &ps), side(d, &dk, &ds))
        {
            self.kv_error = Some(e);
            self.state_error = None;
            // Nothing is ever written (`probe_exact`'s first case).
            self.exact = true;
        }
    }

    /// Whether every write the plan issues lands exactly where its request's decode layout
    /// expects it, and a request that completes has every byte written: the simulator may skip
    /// the oracle for requests on this pair (it still tells the oracle which units were filled,
    /// with [`crate::layout::DecodeMemory::apply_exact`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }
}
