//! HiCache on a prefill instance: sglang's hierarchical cache (`--enable-hierarchical-cache`,
//! `python/sglang/srt/mem_cache/hiradix_cache.py`), tiers GPU radix cache → host memory →
//! storage (the shared Mooncake Store, [`super::kv_store`]); `docs/sglang-pd.md` §18.
//!
//! # The model
//!
//! - **Host tier**: an LRU over prefix blocks of `host_tokens` (`hicache_size` GB per rank, or
//!   `hicache_ratio` × the GPU pool), fed the same lookups as the GPU radix cache. Being larger
//!   and fed the same stream, it holds everything the GPU cache holds (LRU's inclusion
//!   property), as HiCache's host pool backs up what the GPU computed. pdsim uses this one
//!   inclusive model for every write policy: what the policies change here is what reaches the
//!   store, and when.
//! - **A hit** is the longest cached prefix over the tiers: GPU blocks need nothing; host blocks
//!   (and store blocks, which land in host memory first) are loaded to the GPU over PCIe, layer
//!   by layer while the forward runs (`load_back` with HiCache's layer-wise overlap), so a
//!   forward takes the longer of its compute and its loads.
//! - **Prefetch** (`prefetch_from_storage`, when the scheduler receives the request): the blocks
//!   beyond the local tiers that the store holds then, if at least [`PREFETCH_THRESHOLD_TOKENS`],
//!   are read into host memory as Mooncake Store batches **on the fabric** (`sglang::mooncake_store`): RDMA
//!   reads from the store nodes' DRAM through their NICs to this instance's NICs, sharing
//!   them with KV transfers; a replica on the instance's own node is a local copy. The policy
//!   decides how long the request waits (`can_terminate_prefetch`): `best_effort` not at all
//!   (the blocks that have arrived when it is scheduled count), `wait_complete` until all is
//!   in, `timeout` at most [`prefetch_timeout_ns`]. [`Prefetch`] holds what the fabric has
//!   delivered so far.
//! - **Write-back to the store** when the request's prefill ends (`write_backup_storage` after
//!   the host copy): `write_through` writes every block, `write_through_selective` only blocks
//!   used a second time on this instance (those its lookup found locally); blocks the store
//!   holds or is already being written are skipped (sglang's Mooncake backend puts only keys
//!   `batch_is_exist` does not find: `MooncakeStore._batch_set_v2_aggregated`). The write is
//!   the GPU → host copy then RDMA writes on the fabric, and only when they land can any
//!   instance read the block.

use super::prefix_cache::PrefixCache;
use crate::config::{HiCacheParams, PrefetchPolicy, WritePolicy};
use crate::engine::Nanos;
use crate::vocab::requests::Prefetch;
use crate::workload::trace::HASH_BLOCK_TOKENS;

/// sglang's `prefetch_threshold` default (256 tokens, `hiradix_cache.py`
/// `_parse_storage_backend_extra_config`): a smaller storage hit is not prefetched.
pub const PREFETCH_THRESHOLD_TOKENS: u64 = 256;

/// sglang's `prefetch_timeout_base` default, s.
const PREFETCH_TIMEOUT_BASE_S: f64 = 1.0;
/// sglang's `prefetch_timeout_per_ki_token` default, s per 1024 tokens.
const PREFETCH_TIMEOUT_PER_KI_TOKEN_S: f64 = 0.25;

/// The `timeout` policy's limit for a prefetch of `tokens` tokens, ns.
pub fn prefetch_timeout_ns(tokens: u64) -> Nanos {
    crate::engine::ns_from_secs_ceil(
        PREFETCH_TIMEOUT_BASE_S + PREFETCH_TIMEOUT_PER_KI_TOKEN_S * tokens as f64 / 1024.0,
    )
}

/// sglang's rules on a request's store prefetch ([`Prefetch`], the data the request table
/// keeps): its `timeout` deadline and whether the prefetch policy holds the request back.
pub trait PrefetchRules {
    /// The `timeout` policy's deadline: the read's start plus [`prefetch_timeout_ns`] of its
    /// tokens, ns.
    fn timeout_at(&self) -> Nanos;
    /// Whether `policy` holds the request back from the prefill's scheduler while the read
    /// moves (`can_terminate_prefetch`): `best_effort` never does.
    fn holds(&self, policy: PrefetchPolicy) -> bool;
}

impl PrefetchRules for Prefetch {
    fn timeout_at(&self) -> Nanos {
        self.start_ns.saturating_add(prefetch_timeout_ns(
            u64::from(self.blocks) * u64::from(HASH_BLOCK_TOKENS),
        ))
    }

    fn holds(&self, policy: PrefetchPolicy) -> bool {
        self.done_ns.is_none() && policy != PrefetchPolicy::BestEffort
    }
}

/// Hits per tier and the bytes they moved, summed over an instance's lookups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// Prompt tokens found in the GPU radix cache.
    pub device_hit_tokens: u64,
    /// Prompt tokens found (only) in host memory.
    pub host_hit_tokens: u64,
    /// Prompt tokens found (only) in the store and prefetched in time.
    pub store_hit_tokens: u64,
    /// Bytes loaded host → GPU for host and store hits.
    pub load_bytes: u64,
    /// Bytes prefetched from the store.
    pub store_read_bytes: u64,
    /// Bytes offered to the store by write-backs.
    pub store_write_bytes: u64,
}

/// One prefill instance's HiCache.
#[derive(Debug)]
pub struct HiCache {
    /// The pool's flags, checked.
    pub params: HiCacheParams,
    host: PrefixCache,
    /// Hits and bytes so far.
    pub counts: TierCounts,
}

/// What one admission found, tier by tier (prompt tokens, cumulative: `device ≤ local ≤ all`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// In the GPU cache.
    pub device: u32,
    /// In the GPU cache or host memory.
    pub local: u32,
    /// With the store blocks prefetched in time.
    pub all: u32,
}

impl HiCache {
    /// An empty host tier for `params`.
    pub fn new(params: HiCacheParams) -> Self {
        Self {
            params,
            host: PrefixCache::new(Some(params.host_tokens)),
            counts: TierCounts::default(),
        }
    }

    /// The host tier is the process's pinned memory: a new process starts with it empty. The
    /// store, another service, keeps what it holds.
    pub fn forget_host(&mut self) {
        self.host.forget();
    }

    /// Leading prompt blocks in host memory (no touch).
    pub fn host_blocks(&self, hash_ids: &[u64]) -> u32 {
        self.host.peek_blocks(hash_ids)
    }

    /// Prompt tokens the tiers would give now, as the scheduler sees them before admitting the
    /// request: the GPU's `device` tokens, host memory, the prefetch's arrived blocks.
    pub fn peek(
        &self,
        hash_ids: &[u64],
        input: u32,
        device: u32,
        prefetch: Option<&Prefetch>,
    ) -> u32 {
        let host = self.host.peek(hash_ids, input);
        let store = prefetch.map_or(0, |p| blocks_tokens(p.from_block + p.arrived, input));
        device.max(host).max(store)
    }

    /// The admission's lookup past the GPU cache (which found `device` tokens and cached the
    /// prompt): host memory caches the prompt too, the prefetch gives what arrived by `now`.
    /// Counts the tiers and returns what was found and the ns the loads to the GPU take.
    pub fn admit(
        &mut self,
        hash_ids: &[u64],
        input: u32,
        device: u32,
        prefetch: Option<&Prefetch>,
        now: Nanos,
    ) -> (Found, Nanos) {
        let host = self.host.lookup_and_insert(hash_ids, input, now);
        let local = device.max(host);
        let (store, read) = match prefetch {
            Some(p) => {
                let n = p.arrived;
                (
                    blocks_tokens(p.from_block + n, input),
                    u64::from(n) * p.block_bytes,
                )
            }
            None => (0, 0),
        };
        let all = local.max(store);
        let c = &mut self.counts;
        c.device_hit_tokens += u64::from(device);
        c.host_hit_tokens += u64::from(local - device);
        c.store_hit_tokens += u64::from(all - local);
        c.store_read_bytes += read;
        let load = u64::from(all - device) * self.params.bytes_per_token;
        c.load_bytes += load;
        let load_ns = crate::engine::ceil_ns(load as f64 / self.params.pcie_bytes_per_ns);
        (Found { device, local, all }, load_ns)
    }

    /// How many of a finished prefill's `blocks` leading prompt blocks its write policy backs
    /// up to the store: `write_through` all of them, `write_through_selective` those found
    /// locally (`local_tokens`: their second use here), `write_back` none (refused with a
    /// storage backend by the scenario checks).
    pub fn blocks_to_store(&self, blocks: usize, local_tokens: u32) -> usize {
        match self.params.write_policy {
            WritePolicy::WriteThrough => blocks,
            WritePolicy::WriteThroughSelective => (local_tokens / HASH_BLOCK_TOKENS) as usize,
            WritePolicy::WriteBack => 0,
        }
        .min(blocks)
    }

    /// The GPU → host copy of `bytes` (all ranks) before a write to the store can start, ns:
    /// each rank copies its share over its own PCIe link.
    pub fn copy_ns(&self, bytes: u64) -> Nanos {
        crate::engine::ceil_ns(bytes as f64 / self.params.pcie_bytes_per_ns)
    }

    /// A write-back of `bytes` (all ranks) to the store: counted (the store copies them GPU →
    /// host at `params.pcie_bytes_per_ns`, [`HiCache::copy_ns`]'s rule).
    pub fn wrote_to_store(&mut self, bytes: u64) {
        self.counts.store_write_bytes += bytes;
    }
}

/// Prompt tokens of `blocks` leading blocks of a prompt of `input` tokens.
fn blocks_tokens(blocks: u32, input: u32) -> u32 {
    (u64::from(blocks) * u64::from(HASH_BLOCK_TOKENS)).min(u64::from(input)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(policy: WritePolicy) -> HiCacheParams {
        HiCacheParams {
            host_tokens: 1 << 30,
            write_policy: policy,
            storage: true,
            prefetch: PrefetchPolicy::BestEffort,
            bytes_per_token: 1000,
            pcie_bytes_per_ns: 10.0,
        }
    }

    #[test]
    fn the_policy_decides_whether_a_moving_prefetch_holds_the_request() {
        let mut p = Prefetch::new(1000, 2, 4, 512_000);
        assert!(!p.holds(PrefetchPolicy::BestEffort));
        assert!(p.holds(PrefetchPolicy::WaitComplete));
        assert!(p.holds(PrefetchPolicy::Timeout));
        // 2048 tokens: 1 s + 0.25 s × 2.
        assert_eq!(p.timeout_at(), 1000 + 1_500_000_000);
        p.done_ns = Some(5000);
        assert!(!p.holds(PrefetchPolicy::WaitComplete));
        assert!(!p.holds(PrefetchPolicy::Timeout));
    }

    #[test]
    fn tiers_count_what_only_they_had_and_loads_take_pcie_time() {
        let mut h = HiCache::new(params(WritePolicy::WriteThrough));
        // First sight: nothing anywhere; host now holds [1, 2, 3].
        let (f, ns) = h.admit(&[1, 2, 3], 1400, 0, None, 0);
        assert_eq!((f.device, f.local, f.all, ns), (0, 0, 0, 0));
        // The GPU lost it all (device 0), host has 3 blocks: 1400 host tokens, loaded at
        // 10 bytes/ns: 1400 × 1000 / 10 ns.
        let (f, ns) = h.admit(&[1, 2, 3], 1400, 0, None, 1);
        assert_eq!((f.local, f.all), (1400, 1400));
        assert_eq!(ns, 140_000);
        // The GPU holds 1 block, host 3, a prefetch brought blocks 3..5 of [1, 2, 3, 4, 5]
        // (from block 3, 2 arrived): all 2400 tokens.
        let p = Prefetch {
            arrived: 2,
            ..Prefetch::new(0, 3, 2, 512_000)
        };
        let (f, _) = h.admit(&[1, 2, 3, 4, 5], 2400, 512, Some(&p), 10);
        assert_eq!((f.device, f.local, f.all), (512, 1536, 2400));
        let c = h.counts;
        assert_eq!(c.device_hit_tokens, 512);
        assert_eq!(c.host_hit_tokens, 1400 + 1024);
        assert_eq!(c.store_hit_tokens, 864);
        assert_eq!(c.store_read_bytes, 2 * 512_000);
        assert_eq!(c.load_bytes, (1400 + 1888) * 1000);
    }

    #[test]
    fn write_policies_choose_what_reaches_the_store() {
        let wt = HiCache::new(params(WritePolicy::WriteThrough));
        assert_eq!(wt.blocks_to_store(3, 0), 3);
        // 3 blocks of 512 000 bytes copied at 10 B/ns.
        assert_eq!(wt.copy_ns(3 * 512_000), 153_600);
        let sel = HiCache::new(params(WritePolicy::WriteThroughSelective));
        assert_eq!(sel.blocks_to_store(3, 0), 0, "first use: nothing");
        assert_eq!(sel.blocks_to_store(3, 1100), 2);
        assert_eq!(
            sel.blocks_to_store(1, 1100),
            1,
            "never more than the prompt's blocks"
        );
        let wb = HiCache::new(params(WritePolicy::WriteBack));
        assert_eq!(wb.blocks_to_store(3, 3000), 0);
    }
}
