//! The tiers of a pool's KV beyond its GPUs: HiCache's host pool on prefill pools, the decode
//! side's offload, and the `[kv_store]` (Mooncake Store) both write to.

use crate::config::{Pool, Role};
use crate::scenario::file::{self, ScenarioFile};
use crate::scenario::{Checker, ScenarioError};
use crate::spec::GpuSpec;

/// GPU → host bandwidth of one GPU, bytes/s, one direction: its host link (PCIe x16, or
/// NVLink-C2C on a Grace superchip: `GpuSpec::host_link_bytes_per_s`, `docs/numbers.md` §1)
/// at the share bulk copies reach (`spec::gpu::HOST_LINK_EFFICIENCY`).
fn pcie_bytes_per_s(gpu: &GpuSpec) -> f64 {
    gpu.host_copy_bytes_per_s()
}

/// `pools.<name>.server.enable_hierarchical_cache` and the `hicache_*` flags (sglang
/// `server_args.py` defaults: ratio 2.0, size 0, `write_through`, no storage backend,
/// `best_effort`).
pub(super) fn hicache(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<Option<crate::config::HiCacheParams>, ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    if !s.enable_hierarchical_cache {
        // A decode pool's offload takes the host-pool and backend flags too
        // (`decode_offload` checks them).
        if s.disaggregation_decode_enable_offload_kvcache {
            return Ok(None);
        }
        refuse_hicache_flags(c, p, key)?;
        return Ok(None);
    }
    if p.role == Role::Decode {
        // sglang main also has a decode-side radix cache with HiCache
        // (`--disaggregation-decode-enable-radix-cache` with `--enable-hierarchical-cache`:
        // `enable_decode_hicache` in the scheduler), which pdsim does not model.
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            format!(
                "pdsim models HiCache on prefill pools only (pool {:?} is decode): sglang's decode side writes its KV to the store through its own flag, --disaggregation-decode-enable-offload-kvcache (DecodeKVCacheOffloadManager): remove enable_hierarchical_cache and set disaggregation_decode_enable_offload_kvcache = true (with a [kv_store]; sglang's decode radix cache with HiCache, --disaggregation-decode-enable-radix-cache, is not modelled)",
                p.name
            ),
        ));
    }
    if p.role != Role::Prefill {
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            format!(
                "pdsim models HiCache on prefill pools only (pool {:?} is {}); remove enable_hierarchical_cache here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if s.disable_radix_cache {
        return Err(c.err(
            &k("enable_hierarchical_cache"),
            "needs the radix cache (sglang refuses --enable-hierarchical-cache with --disable-radix-cache); set disable_radix_cache = false",
        ));
    }
    let (host_tokens, per_rank) = host_pool(c, key, p, pool, gpu)?;
    let attn_tp = pool.server.attn_tp_size;
    let storage = match s.hicache_storage_backend.as_deref() {
        None => false,
        Some("mooncake") => true,
        Some(other) => {
            return Err(c.err(
                &k("hicache_storage_backend"),
                format!("{other:?} is not modelled; valid: \"mooncake\" (the scenario's [kv_store]), or leave it out"),
            ));
        }
    };
    let write_policy = s.hicache_write_policy.unwrap_or_default();
    if storage && write_policy == crate::config::WritePolicy::WriteBack {
        return Err(c.err(
            &k("hicache_write_policy"),
            "write_back with a storage backend is not modelled (blocks would reach the store only when the GPU evicts them); valid with hicache_storage_backend: write_through, write_through_selective",
        ));
    }
    let prefetch = s.hicache_storage_prefetch_policy.unwrap_or_default();
    if !storage && s.hicache_storage_prefetch_policy.is_some() {
        return Err(c.err(
            &k("hicache_storage_prefetch_policy"),
            "only matters with a storage backend: set hicache_storage_backend = \"mooncake\", or drop it",
        ));
    }
    Ok(Some(crate::config::HiCacheParams {
        host_tokens,
        write_policy,
        storage,
        prefetch,
        bytes_per_token: per_rank * u64::from(attn_tp),
        pcie_bytes_per_ns: pcie_bytes_per_s(gpu) * f64::from(attn_tp) / 1e9,
    }))
}

/// With HiCache and the decode offload both off, no `hicache_*` flag may be set: the error
/// names the switch that would make it count on this pool's role.
fn refuse_hicache_flags(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
) -> Result<(), ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    for (f, set) in [
        ("hicache_ratio", s.hicache_ratio.is_some()),
        ("hicache_size", s.hicache_size.is_some()),
        ("hicache_write_policy", s.hicache_write_policy.is_some()),
        (
            "hicache_storage_backend",
            s.hicache_storage_backend.is_some(),
        ),
        (
            "hicache_storage_prefetch_policy",
            s.hicache_storage_prefetch_policy.is_some(),
        ),
    ] {
        if set {
            let on = if p.role == Role::Decode {
                "disaggregation_decode_enable_offload_kvcache = true (the decode side's offload to the store)"
            } else {
                "enable_hierarchical_cache = true"
            };
            return Err(c.err(
                &k(f),
                format!("is a HiCache flag: set {on} on this pool, or drop it"),
            ));
        }
    }
    Ok(())
}

/// A host pool of `hicache_size` GB per rank or (size 0) `hicache_ratio` × the GPU KV pool, as
/// sglang sizes HiCache's host pool and the decode offload's (`HostKVCache.__init__`): its
/// tokens per instance, and the KV bytes of one token on one attention-TP rank.
fn host_pool(
    c: &Checker,
    key: &str,
    p: &file::PoolSection,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<(u64, u64), ScenarioError> {
    let s = &p.server;
    let k = |f: &str| format!("{key}.server.{f}");
    let per_rank = pool
        .model
        .kv_token_bytes_rank(pool.server.attn_tp_size, pool.kv_elem())
        .max(1);
    let size_gb = s.hicache_size.unwrap_or(0.0);
    if !(size_gb.is_finite() && (0.0..=1e6).contains(&size_gb)) {
        return Err(c.err(
            &k("hicache_size"),
            format!("must be host memory per rank in GB, 0 to 1e6 (0: from hicache_ratio), got {size_gb}"),
        ));
    }
    let ratio = s.hicache_ratio.unwrap_or(2.0);
    if !(ratio.is_finite() && ratio > 1.0 && ratio <= 1e4) {
        return Err(c.err(
            &k("hicache_ratio"),
            format!("must be above 1 (the host tier is larger than the GPU pool; sglang's default: 2.0) and at most 1e4, got {ratio}"),
        ));
    }
    let device_tokens =
        u64::from(crate::config::capacity::kv_pages(gpu, pool)) * u64::from(pool.server.page_size);
    let host_tokens = if size_gb > 0.0 {
        (size_gb * 1e9 / per_rank as f64) as u64
    } else {
        (ratio * device_tokens as f64) as u64
    };
    Ok((host_tokens, per_rank))
}

/// `pools.<name>.server.disaggregation_decode_enable_offload_kvcache` (sglang's
/// `--disaggregation-decode-enable-offload-kvcache`, default false): a decode pool writes the
/// blocks its requests' outputs complete to the storage backend through a host pool of its
/// own (`DecodeKVCacheOffloadManager`, sglang main 2026 @ 0122d6f; `docs/sglang-pd.md` §18.1).
/// It takes `hicache_storage_backend` (the offload's `HiCacheController` writes through it;
/// `"mooncake"`, the default here) and the host pool's `hicache_ratio` / `hicache_size`, not
/// `enable_hierarchical_cache`; `[kv_store]` is checked by [`kv_store`].
pub(super) fn decode_offload(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    pool: &Pool,
    gpu: &GpuSpec,
) -> Result<Option<crate::config::DecodeOffloadParams>, ScenarioError> {
    let s = &p.server;
    if !s.disaggregation_decode_enable_offload_kvcache {
        return Ok(None);
    }
    let k = |f: &str| format!("{key}.server.{f}");
    let flag = k("disaggregation_decode_enable_offload_kvcache");
    if p.role != Role::Decode {
        return Err(c.err(
            &flag,
            format!(
                "only a decode pool offloads (sglang builds its DecodeKVCacheOffloadManager only with --disaggregation-mode decode; pool {:?} is {}): a prefill pool writes to the store with enable_hierarchical_cache = true and hicache_storage_backend = \"mooncake\"; set it to false here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if pool.model.is_hybrid() {
        return Err(c.err(
            &flag,
            format!(
                "model {} keeps recurrent state beside its KV: sglang's decode offload supports MHA and MLA KV pools only (DecodeKVCacheOffloadManager raises \"Unsupported KV cache type for decode offload\"), so the server would not start; set it to false",
                pool.model.name
            ),
        ));
    }
    for (f, set) in [
        ("hicache_write_policy", s.hicache_write_policy.is_some()),
        (
            "hicache_storage_prefetch_policy",
            s.hicache_storage_prefetch_policy.is_some(),
        ),
    ] {
        if set {
            return Err(c.err(
                &k(f),
                "does nothing on a decode pool: its offload writes every block a request's output completes, as it fills, and never prefetches; drop it",
            ));
        }
    }
    // sglang's offload writes through `--hicache-storage-backend`, which it needs; pdsim's one
    // backend is the scenario's Mooncake Store, so leaving it out here means that one (and
    // `plan`'s launch line writes it).
    if let Some(other) = s
        .hicache_storage_backend
        .as_deref()
        .filter(|b| *b != "mooncake")
    {
        return Err(c.err(
            &k("hicache_storage_backend"),
            format!("{other:?} is not modelled; valid: \"mooncake\" (the scenario's [kv_store]), or leave it out (the same)"),
        ));
    }
    let (host_tokens, per_rank) = host_pool(c, key, p, pool, gpu)?;
    let attn_tp = pool.server.attn_tp_size;
    Ok(Some(crate::config::DecodeOffloadParams {
        host_tokens,
        bytes_per_token: per_rank * u64::from(attn_tp),
        pcie_bytes_per_ns: pcie_bytes_per_s(gpu) * f64::from(attn_tp) / 1e9,
    }))
}

/// `pools.<name>.server.disaggregation_decode_enable_radix_cache` (sglang's
/// `--disaggregation-decode-enable-radix-cache`, default false; `docs/sglang-pd.md` §25): a
/// decode pool's radix tree over finished requests' KV. sglang refuses it where
/// `handle_pd_disaggregation` (`arg_groups/pd_disaggregation_hook.py`) or `build_kv_cache`
/// (`mem_cache/kv_cache_builder.py`) do, with their texts; the sglang version and the
/// corruption oracle are checked with the whole scenario (`scenario::check_decode_radix`).
pub(super) fn decode_radix(
    c: &Checker,
    p: &file::PoolSection,
    key: &str,
    pool: &Pool,
) -> Result<bool, ScenarioError> {
    use crate::sglang::decode_radix::{Refusal, refusal};
    let s = &p.server;
    if !s.disaggregation_decode_enable_radix_cache {
        return Ok(false);
    }
    let flag = format!("{key}.server.disaggregation_decode_enable_radix_cache");
    if p.role != Role::Decode {
        return Err(c.err(
            &flag,
            format!(
                "only a decode pool has it (sglang reads --disaggregation-decode-enable-radix-cache only with --disaggregation-mode decode; pool {:?} is {}): a prefill pool's prefix cache is its radix cache (disable_radix_cache = false, the default); set it to false here",
                p.name,
                p.role.as_str()
            ),
        ));
    }
    if let Some(spec) = &pool.server.speculative {
        return Err(c.err(
            &flag,
            format!(
                "sglang refuses it: {:?} (handle_pd_disaggregation); drop speculative_algorithm on this pool or set it to false",
                refusal(Refusal::Speculative(&spec.algorithm.as_str().to_uppercase()))
            ),
        ));
    }
    if pool.model.is_swa() {
        return Err(c.err(
            &flag,
            format!(
                "model {} has sliding-window layers: sglang refuses it: {:?} (build_kv_cache; PR #27770), which pdsim does not model; set it to false",
                pool.model.name,
                refusal(Refusal::Swa)
            ),
        ));
    }
    if pool.model.is_hybrid() {
        return Err(c.err(
            &flag,
            format!(
                "model {} keeps recurrent state beside its KV: sglang refuses it: {:?} (build_kv_cache); set it to false",
                pool.model.name,
                refusal(Refusal::MambaSsm)
            ),
        ));
    }
    let ps = s.page_size;
    if ps == 0 || !crate::workload::trace::HASH_BLOCK_TOKENS.is_multiple_of(ps) {
        return Err(c.err(
            &format!("{key}.server.page_size"),
            format!(
                "is {ps}: with disaggregation_decode_enable_radix_cache pdsim names prefixes in the traces' 512-token blocks and keeps whole pages per block, so page_size must divide 512 (1, 2, 4, … 512); sglang itself matches page by page"
            ),
        ));
    }
    Ok(true)
}

/// The decode pools with `disaggregation_decode_enable_radix_cache`, against the whole
/// scenario: the sglang release must have the flag, and pdsim's corruption oracle must not
/// watch the pool (it follows request-owned pages; the tree's pages are no request's, so a
/// pool with an inexact plan into it, or a unified one, is refused here as not modelled).
/// Returns sglang's warnings for DP attention, as notes.
pub(in crate::scenario) fn decode_radix_scenario(
    c: &Checker,
    pools: &[Pool],
    version: crate::spec::SglangVersion,
    plans: &std::collections::BTreeMap<(usize, usize), std::sync::Arc<crate::layout::PairPlan>>,
) -> Result<Vec<String>, ScenarioError> {
    let mut notes = Vec::new();
    for (i, p) in pools.iter().enumerate().filter(|(_, p)| p.decode_radix) {
        let flag = format!(
            "pools.{}.server.disaggregation_decode_enable_radix_cache",
            p.name
        );
        if !version.has_decode_radix_cache() {
            return Err(c.err(
                &flag,
                format!(
                    "--disaggregation-decode-enable-radix-cache does not exist in sglang version {:?} (it came with PR #19746 and Mooncake's incremental transfer); versions that have it: {}. Set sglang.version to one of them, or leave it out",
                    version.as_str(),
                    crate::spec::SglangVersion::names_where(
                        crate::spec::SglangVersion::has_decode_radix_cache
                    )
                ),
            ));
        }
        if crate::config::capacity::oracle_watched(pools, plans, i) {
            return Err(c.err(
                &flag,
                format!(
                    "pdsim's corruption oracle watches pool {:?} (a prefill's transfer plan into it is not exact, or its pool is unified) and follows request-owned pages only, not a radix tree's: decode prefix reuse with a layout hazard is not modelled; set it to false, or make every prefill match this pool's layout",
                    p.name
                ),
            ));
        }
        if p.parallel.enable_dp_attention {
            notes.push(format!(
                "pool {:?}: sglang warns \"EXPERIMENTAL: Decode radix cache with DP attention. Requires prefix-aware DP rank routing for optimal cache hits.\" (handle_pd_disaggregation); each DP rank keeps its own tree, and the DP controller's load_balance_method does not look at prefixes",
                p.name
            ));
        }
    }
    Ok(notes)
}

/// `[kv_store]`: needed by, and only by, prefill pools with `hicache_storage_backend =
/// "mooncake"` and decode pools that offload (`disaggregation_decode_enable_offload_kvcache`). Its capacity is counted in the
/// tokens of the first such pool (every such pool must store the same KV bytes per token: the
/// store's blocks are shared between them).
pub(in crate::scenario) fn kv_store(
    c: &Checker,
    file: &ScenarioFile,
    pools: &[Pool],
    nodes: u32,
) -> Result<Option<crate::config::KvStoreParams>, ScenarioError> {
    let users = store_users(pools);
    let Some(ks) = &file.kv_store else {
        if let Some((p, _, key)) = users.first() {
            let what = if p.hicache.is_some() {
                "\"mooncake\" needs the store"
            } else {
                "writes to the Mooncake Store"
            };
            return Err(c.err(
                key,
                format!("{what}: add a [kv_store] section (capacity_gb, nodes, eviction)"),
            ));
        }
        return Ok(None);
    };
    let Some((first, bpt, _)) = users.first() else {
        return Err(c.err(
            "kv_store",
            "no pool uses it: set enable_hierarchical_cache = true and hicache_storage_backend = \"mooncake\" on a prefill pool (or disaggregation_decode_enable_offload_kvcache = true on a decode pool), or drop [kv_store]",
        ));
    };
    let bpt = *bpt;
    if let Some((other, other_bpt, key)) = users.iter().find(|u| u.1 != bpt) {
        return Err(c.err(
            key,
            format!(
                "pools sharing the [kv_store] must store the same KV bytes per token; pool {:?} has {} and pool {:?} {}",
                first.name, bpt, other.name, other_bpt
            ),
        ));
    }
    let capacity_tokens = match ks.capacity_gb {
        None => None,
        Some(gb) => {
            if !(gb.is_finite() && gb > 0.0 && gb <= 1e9) {
                return Err(c.err(
                    "kv_store.capacity_gb",
                    format!("must be a positive number of GB, at most 1e9 (leave it out for an unbounded store), got {gb}"),
                ));
            }
            Some((gb * 1e9 / bpt as f64) as u64)
        }
    };
    let store_nodes = if ks.nodes.is_empty() {
        vec![0]
    } else {
        ks.nodes.clone()
    };
    if let Some(&n) = store_nodes.iter().find(|&&n| n >= nodes) {
        return Err(c.err(
            "kv_store.nodes",
            format!(
                "node {n} is not in the cluster, which has nodes 0 to {}",
                nodes - 1
            ),
        ));
    }
    let mut sorted = store_nodes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != store_nodes.len() {
        return Err(c.err("kv_store.nodes", "lists a node twice"));
    }
    let evict = match ks.eviction.as_str() {
        "lru" => true,
        "none" => false,
        other => {
            return Err(c.err(
                "kv_store.eviction",
                format!("{other:?} is not an eviction policy; valid: \"lru\" (least recently used blocks make room), \"none\" (a full store takes no more)"),
            ));
        }
    };
    Ok(Some(crate::config::KvStoreParams {
        capacity_tokens,
        nodes: store_nodes,
        evict,
    }))
}

/// The pools that use the store, in pool order: (pool, KV bytes per token, the key that
/// makes it a user).
fn store_users(pools: &[Pool]) -> Vec<(&Pool, u64, String)> {
    pools
        .iter()
        .filter_map(|p| {
            if let Some(h) = p.hicache.filter(|h| h.storage) {
                Some((
                    p,
                    h.bytes_per_token,
                    format!("pools.{}.server.hicache_storage_backend", p.name),
                ))
            } else {
                p.decode_offload.map(|o| {
                    (
                        p,
                        o.bytes_per_token,
                        format!(
                            "pools.{}.server.disaggregation_decode_enable_offload_kvcache",
                            p.name
                        ),
                    )
                })
            }
        })
        .collect()
}
