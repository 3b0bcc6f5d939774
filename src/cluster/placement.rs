//! Where instances sit and how much KV they hold.
//!
//! Placement rule: pools are laid out in scenario order (prefill pools first), each instance on
//! `tp_size` consecutive GPUs starting at a multiple of `tp_size`, so an instance never spans two
//! nodes (`tp_size` divides `gpus_per_node`, checked at validation). GPU `g` of a node uses NIC
//! `g × nics_per_node / gpus_per_node` of that node: one NIC per GPU by default, shared by
//! neighbouring GPUs when a node has fewer NICs.

use crate::fabric::NicId;
use crate::scenario::{Pool, Scenario};

/// NICs of every instance's ranks, and how many NICs the cluster has.
pub struct Placement {
    /// `nics[instance][rank]`.
    pub nics: Vec<Vec<NicId>>,
    /// NICs in the cluster.
    pub total_nics: u32,
}

/// Places every instance of `sc`.
pub fn place(sc: &Scenario) -> Placement {
    let g = sc.gpus_per_node;
    let n = sc.fabric.nics_per_node;
    let mut cursor = 0u32;
    let mut nics = Vec::new();
    for pool in &sc.pools {
        let tp = pool.server.tp_size;
        for _ in 0..pool.instances {
            cursor = cursor.div_ceil(tp) * tp;
            let ranks = (0..tp)
                .map(|r| {
                    let gpu = cursor + r;
                    let (node, local) = (gpu / g, gpu % g);
                    NicId(node * n + local * n / g)
                })
                .collect();
            nics.push(ranks);
            cursor += tp;
        }
    }
    let nodes = cursor.div_ceil(g).max(1);
    Placement {
        nics,
        total_nics: nodes * n,
    }
}

/// Bytes of HBM per GPU left for the KV cache: `hbm × mem_fraction_static − weights ÷ tp`.
pub fn kv_budget_bytes(sc: &Scenario, pool: &Pool) -> f64 {
    sc.gpu.hbm_bytes as f64 * pool.server.mem_fraction_static
        - pool.model.weight_bytes_total() / f64::from(pool.server.tp_size)
}

/// Usable KV pages of one instance of `pool` (page 0, the padding sink, excluded).
pub fn kv_pages(sc: &Scenario, pool: &Pool) -> u32 {
    let per_page = pool
        .model
        .kv_bytes_per_token_rank(pool.server.attn_tp_size, pool.kv_dtype_bytes)
        * u64::from(pool.server.page_size);
    let pages = (kv_budget_bytes(sc, pool) / per_page as f64).floor();
    (pages as u64).saturating_sub(1).min(u64::from(u32::MAX)) as u32
}
