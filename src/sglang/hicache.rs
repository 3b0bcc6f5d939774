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
//!   read over RDMA at the slower of the instance's NICs and the store nodes' NICs (analytic:
//!   no sharing with KV transfers; `docs/performance-model.md` §8 says why). The policy decides
//!   how long the request waits: `best_effort` not at all (what has arrived when it is scheduled
//!   counts), `wait_complete` until all is in, `timeout` at most [`prefetch_timeout_ns`].
//! - **Write-back to the store** when the request's prefill ends (`write_backup_storage` after
//!   the host copy): `write_through` writes every block, `write_through_selective` only blocks
//!   used a second time on this instance (those its lookup found locally); the write completes
//!   after the GPU → host copy and the RDMA write, and only then can any instance read it.

use super::prefix_cache::PrefixCache;
use crate::config::{HiCacheParams, PrefetchPolicy, WritePolicy};
use crate::engine::Nanos;
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

/// A request's prefetch from the store, planned when its prefill's scheduler receives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prefetch {
    /// When the read starts, ns.
    pub start_ns: Nanos,
    /// Prompt blocks the local tiers held then: the read starts after them.
    pub from_block: u32,
    /// Blocks to read.
    pub blocks: u32,
    /// Fixed latency before the first byte, ns.
    pub latency_ns: Nanos,
    /// Read rate, bytes/ns.
    pub bytes_per_ns: f64,
    /// Bytes of one block.
    pub block_bytes: u64,
}

impl Prefetch {
    /// When the whole read is in host memory, ns.
    pub fn done_ns(&self) -> Nanos {
        let bytes = self.block_bytes * u64::from(self.blocks);
        self.start_ns + self.latency_ns + crate::engine::ceil_ns(bytes as f64 / self.bytes_per_ns)
    }

    /// Blocks in host memory by `now` (whole blocks, in prompt order).
    pub fn arrived(&self, now: Nanos) -> u32 {
        let t0 = self.start_ns + self.latency_ns;
        if now < t0 {
            return 0;
        }
        let n = ((now - t0) as f64 * self.bytes_per_ns / self.block_bytes as f64).floor();
        (n.min(f64::from(self.blocks))) as u32
    }

    /// When the policy lets the request be scheduled, ns.
    pub fn ready_ns(&self, policy: PrefetchPolicy) -> Nanos {
        match policy {
            PrefetchPolicy::BestEffort => self.start_ns,
            PrefetchPolicy::WaitComplete => self.done_ns(),
            PrefetchPolicy::Timeout => self.done_ns().min(
                self.start_ns
                    + prefetch_timeout_ns(u64::from(self.blocks) * u64::from(HASH_BLOCK_TOKENS)),
            ),
        }
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
    /// The instance's NICs together, bytes/ns (store reads and writes).
    pub nic_bytes_per_ns: f64,
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
    /// An empty host tier for `params`; the instance's NICs move `nic_bytes_per_ns`.
    pub fn new(params: HiCacheParams, nic_bytes_per_ns: f64) -> Self {
        Self {
            params,
            host: PrefixCache::new(Some(params.host_tokens)),
            nic_bytes_per_ns,
            counts: TierCounts::default(),
        }
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
        now: Nanos,
    ) -> u32 {
        let host = self.host.peek(hash_ids, input);
        let store = prefetch.map_or(0, |p| blocks_tokens(p.from_block + p.arrived(now), input));
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
                let n = p.arrived(now);
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

    /// The blocks a finished prefill writes back to the store and when the write completes:
    /// `write_through` all of them, `write_through_selective` those found locally (their second
    /// use here); `None` when there is nothing to write. The write is the GPU → host copy then
    /// the RDMA write at `store_bytes_per_ns` (the slower of this instance's and the store's
    /// NICs), after `latency_ns`.
    pub fn write_back(
        &mut self,
        blocks: usize,
        local_tokens: u32,
        now: Nanos,
        store_bytes_per_ns: f64,
        latency_ns: Nanos,
    ) -> Option<(usize, Nanos)> {
        let n = match self.params.write_policy {
            WritePolicy::WriteThrough => blocks,
            WritePolicy::WriteThroughSelective => (local_tokens / HASH_BLOCK_TOKENS) as usize,
            WritePolicy::WriteBack => 0,
        }
        .min(blocks);
        if n == 0 {
            return None;
        }
        let bytes = n as u64 * u64::from(HASH_BLOCK_TOKENS) * self.params.bytes_per_token;
        self.counts.store_write_bytes += bytes;
        let copy = bytes as f64 / self.params.pcie_bytes_per_ns;
        let rdma = bytes as f64 / store_bytes_per_ns.min(self.nic_bytes_per_ns);
        Some((n, now + latency_ns + crate::engine::ceil_ns(copy + rdma)))
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
    fn a_prefetch_arrives_block_by_block_and_the_policy_sets_the_wait() {
        let p = Prefetch {
            start_ns: 1000,
            from_block: 2,
            blocks: 4,
            latency_ns: 100,
            bytes_per_ns: 512.0, // one 512 000-byte block per 1000 ns
            block_bytes: 512_000,
        };
        assert_eq!(p.arrived(1099), 0);
        assert_eq!(p.arrived(1100), 0);
        assert_eq!(p.arrived(2100), 1);
        assert_eq!(p.arrived(9_999_999), 4);
        assert_eq!(p.done_ns(), 1000 + 100 + 4000);
        assert_eq!(p.ready_ns(PrefetchPolicy::BestEffort), 1000);
        assert_eq!(p.ready_ns(PrefetchPolicy::WaitComplete), 5100);
        // 2048 tokens: 1 s + 0.5 s, longer than the read.
        assert_eq!(p.ready_ns(PrefetchPolicy::Timeout), 5100);
        let slow = Prefetch {
            bytes_per_ns: 0.0005,
            ..p
        };
        assert_eq!(slow.ready_ns(PrefetchPolicy::Timeout), 1000 + 1_500_000_000);
    }

    #[test]
    fn tiers_count_what_only_they_had_and_loads_take_pcie_time() {
        let mut h = HiCache::new(params(WritePolicy::WriteThrough), 100.0);
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
            start_ns: 0,
            from_block: 3,
            blocks: 2,
            latency_ns: 0,
            bytes_per_ns: 1e9,
            block_bytes: 512_000,
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
        let mut wt = HiCache::new(params(WritePolicy::WriteThrough), 100.0);
        // 3 blocks of 512 000 bytes: copy 153 600 ns at 10 B/ns, RDMA 15 360 ns at 100 B/ns.
        assert_eq!(
            wt.write_back(3, 0, 1000, 1e9, 7),
            Some((3, 1000 + 7 + 153_600 + 15_360))
        );
        let mut sel = HiCache::new(params(WritePolicy::WriteThroughSelective), 100.0);
        assert_eq!(sel.write_back(3, 0, 0, 1e9, 0), None, "first use: nothing");
        assert_eq!(sel.write_back(3, 1100, 0, 1e9, 0).map(|w| w.0), Some(2));
        assert_eq!(sel.counts.store_write_bytes, 2 * 512 * 1000);
    }
}
