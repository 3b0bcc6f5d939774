//! Where instances sit and how much KV they hold.
//!
//! Placement rule: pools are laid out in scenario order (prefill pools first), each instance on
//! `tp_size` consecutive GPUs (`tp_size × pp_size` for a pipeline-parallel prefill, stage-major;
//! `tp_size` below stands for that): an instance no larger than a node starts at a multiple of
//! `tp_size` and never spans two nodes (`tp_size` divides `gpus_per_node`); one larger than a
//! node takes `tp_size / gpus_per_node` whole nodes (a multiple of `gpus_per_node`, checked at
//! validation) starting at the next node boundary — any free node, not only a multiple of its
//! node count (issue 43: a TP16 decode after a TP8 prefill took nodes 2–3 and left node 1
//! idle, billed); its collectives then cross the fabric. GPU `g` of a node uses NIC
//! `g × nics_per_node / gpus_per_node` of that node: one NIC per GPU by default, shared by
//! neighbouring GPUs when a node has fewer NICs.

use crate::config::Pool;
use crate::fabric::GpuId;
use crate::spec::GpuSpec;

/// Where every instance's ranks sit.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    /// `gpus[instance][rank]`.
    pub gpus: Vec<Vec<GpuId>>,
    /// Nodes in the cluster.
    pub nodes: u32,
}

/// Places the instances of `pools` (in scenario order, prefill pools first): each pool starts
/// on the next node no earlier pool uses (prefill and decode never share a node unless a pool
/// says so with `pools.node`, and then at GPU `pools.gpu` of it), and each instance takes
/// `tp_size` consecutive GPUs aligned to `tp_size` within a node, or to a node boundary when it
/// is larger than a node, so an instance never spans nodes unless it is larger than one, and
/// then spans whole nodes with none skipped. Where NVLink domains join several nodes
/// (`domain_gpus` above `gpus_per_node`: the trays of an NVL72 rack), [`domain_start`] places
/// each instance.
pub fn place_pools(pools: &[Pool], gpus_per_node: u32, domain_gpus: u32) -> Placement {
    let g = gpus_per_node;
    let mut next_free_node = 0u32;
    let mut gpus = Vec::new();
    let mut max_node = 0u32;
    for pool in pools {
        // An instance's GPUs: `tp_size` per pipeline stage (`--pp-size`), stage-major.
        let tp = pool.server.gpus();
        // `tp` divides `g`, or `g` divides `tp` (validated): the smaller is the alignment.
        let align = tp.min(g);
        let mut cursor = pool.node.unwrap_or(next_free_node) * g + pool.gpu;
        for _ in 0..pool.instances {
            cursor = if domain_gpus > g {
                domain_start(cursor, tp, g, domain_gpus)
            } else {
                cursor.div_ceil(align) * align
            };
            let ranks: Vec<GpuId> = (0..tp).map(|r| GpuId::from_global(cursor + r, g)).collect();
            max_node = max_node.max(ranks[ranks.len() - 1].node);
            gpus.push(ranks);
            cursor += tp;
        }
        next_free_node = next_free_node.max(cursor.div_ceil(g));
    }
    Placement {
        gpus,
        nodes: max_node + 1,
    }
}

/// The first GPU of an instance of `tp` GPUs placed at or after global GPU `cursor`, on nodes
/// of `g` GPUs joined into NVLink domains of `d` GPUs (a multiple of `g`): an instance within
/// a node (`tp` divides `g`) is aligned to `tp`, as on any cluster; one of whole nodes starts
/// on a node boundary and, when it fits in a domain, inside one domain — if the rest of the
/// current domain is too small it moves to the next domain, so its all-reduce, DeepEP and KV
/// stay on NVLink (two 48-GPU instances take two NVL72 racks, the first leaving 6 trays for
/// smaller ones); one larger than a domain starts on a domain boundary and spans whole
/// domains from there.
pub fn domain_start(cursor: u32, tp: u32, g: u32, d: u32) -> u32 {
    if tp <= g {
        return cursor.div_ceil(tp) * tp;
    }
    let c = cursor.div_ceil(g) * g;
    if tp > d || c / d != (c + tp - 1) / d {
        c.div_ceil(d) * d
    } else {
        c
    }
}

/// Whether instances of decode pool `pool_idx` keep the layout oracle (a record per page, slot
/// and metadata row, to see where every byte lands): unified pools, and decode pools some
/// prefill pool reaches through an inexact plan. Plain allocators otherwise.
pub fn oracle_watched(
    pools: &[Pool],
    plans: &std::collections::BTreeMap<(usize, usize), std::sync::Arc<crate::layout::PairPlan>>,
    pool_idx: usize,
) -> bool {
    let pool = &pools[pool_idx];
    pool.role == crate::config::Role::Decode
        && (pool.server.enable_unified_memory
            || plans
                .iter()
                .any(|(&(_, d), plan)| d == pool_idx && !plan.is_exact()))
}

/// Bytes the page and slot records of one instance of `pool` take: the free lists of the plain
/// allocators (4 B per page and slot), or the oracle's ownership record and free list per page,
/// slot and metadata row (the sizes used by `DecodeMemory::new`). An estimate, within ~20 %.
pub fn page_record_bytes(gpu: &GpuSpec, pool: &Pool, watched: bool) -> u64 {
    let pages = u64::from(kv_pages(gpu, pool));
    let slots = u64::from(pool.state_slots);
    if watched {
        // Pages and metadata rows (one per page) each keep a unit record and a free-list entry;
        // the free lists are `BTreeSet<u32>`, whose nodes cost about 16 B per entry. Checked
        // against the peak RSS of a run: a unified Qwen3-Next decode instance (≈ 200 k pages,
        // 65 k slots) estimates at ≈ 22 MiB and measures ≈ 26 MB.
        let per = crate::layout::ORACLE_UNIT_BYTES + 16;
        (2 * pages + slots + 2) * per
    } else {
        4 * (pages + slots)
    }
}

/// Bytes of HBM per GPU left for the KV cache (and state, for hybrids):
/// `hbm × mem_fraction_static − weights per GPU − activation reserve`.
pub fn kv_budget_bytes(gpu: &GpuSpec, pool: &Pool) -> f64 {
    let budget = gpu.hbm_bytes as f64 * pool.server.mem_fraction_static
        - weight_bytes_per_gpu(&pool.model, &pool.server, &pool.parallel)
        - activation_reserve_bytes(pool);
    // Offloaded weights leave the GPU; the copies in flight come back for a layer or two.
    let budget = match &pool.offload {
        Some(o) => budget + o.bytes_per_forward() - o.transient_bytes(),
        None => budget,
    };
    match &pool.server.speculative {
        None => budget,
        Some(s) => {
            budget - draft_weight_bytes_per_gpu(&pool.model, s, &pool.server, &pool.parallel)
        }
    }
}

/// Weight bytes one GPU holds of the speculative draft beyond the target's (a head it shares
/// with the target is not counted twice), split as the target's are. sglang loads the draft
/// after the target's memory is profiled; pdsim takes its weights, like its KV, from the same
/// `mem_fraction_static` budget (`docs/sglang-pd.md` §19.4: how sglang's versions split it is
/// unverified).
pub fn draft_weight_bytes_per_gpu(
    model: &crate::spec::ModelSpec,
    spec: &crate::spec::speculative::SpeculativeArgs,
    server: &crate::spec::ServerArgs,
    par: &crate::spec::server::Parallel,
) -> f64 {
    let draft = spec.draft_model(model);
    let whole = weight_bytes_per_gpu(&draft, server, par);
    let share = spec.draft_extra_params(model) / draft.total_params().max(1.0);
    whole * share
}

/// Weight bytes one GPU holds. Plain TP: everything ÷ `tp_size`. With DP attention or EP
/// (sglang's DeepSeek deployment): the attention, dense-FFN and shared-expert weights are
/// replicated per DP rank and split over its `attn_tp_size` GPUs; the routed experts are
/// split over `ep_size` GPUs with `ep_num_redundant_experts` extra replicas (or TP-sharded
/// over `tp_size` when `ep_size = 1`); the embedding and LM head stay vocab-parallel over
/// `tp_size`.
pub fn weight_bytes_per_gpu(
    model: &crate::spec::ModelSpec,
    server: &crate::spec::ServerArgs,
    par: &crate::spec::server::Parallel,
) -> f64 {
    let tp = f64::from(server.tp_size.max(1));
    let total = model.weight_bytes_total();
    if par.dp_ranks() == 1 && par.ep_size <= 1 {
        return total / tp * pp_weight_share(model, server);
    }
    let (wd, we) = (model.weights.dense.bytes(), model.weights.experts.bytes());
    let h = f64::from(model.hidden_size);
    let vocab = f64::from(model.vocab_size) * h * if model.tie_word_embeddings { 1.0 } else { 2.0 };
    let (experts, per_expert) = match &model.moe {
        Some(m) => (
            f64::from(m.experts),
            3.0 * h * f64::from(m.expert_intermediate) * f64::from(model.moe_layers),
        ),
        None => (0.0, 0.0),
    };
    let routed = if par.ep_size > 1 {
        per_expert * (experts + f64::from(par.ep_num_redundant_experts)) / f64::from(par.ep_size)
    } else {
        per_expert * experts / tp
    };
    let rest = model.total_params() - vocab - per_expert * experts;
    if wd == we {
        return (rest / f64::from(server.attn_tp_size.max(1)) + routed + vocab / tp) * wd;
    }
    (rest / f64::from(server.attn_tp_size.max(1)) + vocab / tp) * wd + routed * we
}

/// The share of the model's weights the fullest pipeline stage holds (1 without `--pp-size`):
/// its layers' (`max_stage_layers / num_layers` of everything but the vocabulary matrices)
/// and one vocabulary matrix — the embedding on the first stage, the LM head on the last
/// (sglang's models build `PPMissingLayer` for what a stage does not own: `embed_tokens` off
/// the first rank, `lm_head` off the last; a tied head is loaded on the last rank as its own
/// copy). Counted in parameters, as a share of the weight bytes. A stage's memory bounds the
/// instance: every stage's KV pool holds the same tokens (one scheduler allocates the page ids
/// of all stages). docs/sglang-pd.md §27.
pub fn pp_weight_share(model: &crate::spec::ModelSpec, server: &crate::spec::ServerArgs) -> f64 {
    if server.pp_size <= 1 {
        return 1.0;
    }
    let all = model.total_params().max(1.0);
    let one_vocab = f64::from(model.vocab_size) * f64::from(model.hidden_size);
    let vocab = one_vocab * if model.tie_word_embeddings { 1.0 } else { 2.0 };
    let layers =
        f64::from(server.max_stage_layers(model.num_layers)) / f64::from(model.num_layers.max(1));
    (((all - vocab).max(0.0) * layers + one_vocab) / all).min(1.0)
}

/// Bytes one GPU holds of the routed experts of one MoE layer: its `(E + redundant) / ep`
/// experts under expert parallelism, else `1/tp` of every expert; 0 without experts. What
/// sglang's layer-wise offload moves to host memory for an offloaded layer.
pub fn routed_expert_bytes_per_layer_gpu(
    model: &crate::spec::ModelSpec,
    server: &crate::spec::ServerArgs,
    par: &crate::spec::server::Parallel,
) -> f64 {
    let Some(m) = &model.moe else {
        return 0.0;
    };
    let one = 3.0 * f64::from(model.hidden_size) * f64::from(m.expert_intermediate);
    let experts = if par.ep_size > 1 {
        f64::from(m.experts + par.ep_num_redundant_experts) / f64::from(par.ep_size)
    } else {
        f64::from(m.experts) / f64::from(server.tp_size.max(1))
    };
    one * experts * model.weights.experts.bytes()
}

/// Activations of the largest forward one GPU must hold inside the static pool: a chunk of
/// `chunked_prefill_size` tokens through the widest layer (hidden plus the FFN intermediate
/// split over TP), in bf16, twice (input and output of the layer). An estimate: sglang sizes
/// this from a profiling run; here it is derived from the shapes so that larger chunks cost KV.
pub fn activation_reserve_bytes(pool: &Pool) -> f64 {
    let m = &pool.model;
    let ffn = match &m.moe {
        Some(moe) => {
            f64::from(moe.expert_intermediate) * f64::from(moe.active)
                + f64::from(moe.shared_intermediate)
        }
        None => f64::from(m.dense_intermediate),
    };
    let width = f64::from(m.hidden_size) + ffn / f64::from(pool.server.tp_size);
    2.0 * f64::from(pool.server.chunked_prefill_size) * width * 2.0
}

/// Usable KV pages of one instance of `pool` (page 0, the padding sink, excluded); 0 when
/// nothing is left for KV.
pub fn kv_pages(gpu: &GpuSpec, pool: &Pool) -> u32 {
    let mut per_token = pool
        .model
        .kv_token_bytes_rank(pool.server.attn_tp_size, pool.kv_elem());
    // A pipeline stage's GPUs keep its layers' KV only: the fullest stage bounds the tokens
    // (pdsim takes PP on models whose every layer is full attention: exact division).
    if pool.server.pp_size > 1 {
        let layers = u64::from(pool.model.num_layers.max(1));
        per_token =
            per_token / layers * u64::from(pool.server.max_stage_layers(pool.model.num_layers));
    }
    // The draft's KV pool has as many tokens as the target's, at the same page indices
    // (docs/sglang-pd.md §19.4): a page costs both.
    if let Some(s) = &pool.server.speculative {
        per_token += s
            .draft_model(&pool.model)
            .kv_token_bytes_rank(pool.server.attn_tp_size, pool.kv_elem());
    }
    let per_page = per_token * u64::from(pool.server.page_size);
    // Hybrid models keep one recurrent-state slot per request (plus the sink) beside the KV;
    // a unified pool shares one budget between pages and slots instead, so its page count is
    // the most that fit when no slot is held (the shared budget is checked per allocation).
    let state = if pool.server.enable_unified_memory {
        0.0
    } else {
        f64::from(pool.state_slots + u32::from(pool.state_slots > 0))
            * pool.layout[0].state_slot_bytes() as f64
    };
    let pages = ((kv_budget_bytes(gpu, pool) - state).max(0.0) / per_page as f64).floor();
    (pages as u64).saturating_sub(1).min(u64::from(u32::MAX)) as u32
}

/// State slots of a unified pool: as many as the whole shared budget could hold (pages and
/// slots then compete for it), at most `cap`.
pub fn unified_slots(gpu: &GpuSpec, pool: &Pool, cap: u32) -> u32 {
    let m = pool.layout[0].state_slot_bytes().max(1) as f64;
    ((kv_budget_bytes(gpu, pool).max(0.0) / m).floor() as u64)
        .saturating_sub(1)
        .min(u64::from(cap)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Scenario;
    use crate::scenario;

    fn load(sets: &[&str]) -> Scenario {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let path = std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scenarios/quickstart.toml"
        ));
        scenario::load(path, &sets).unwrap()
    }

    /// The nodes each instance's ranks sit on, in placement order.
    fn nodes_of(sc: &Scenario) -> Vec<Vec<u32>> {
        sc.placement
            .gpus
            .iter()
            .map(|r| {
                let mut n: Vec<u32> = r.iter().map(|g| g.node).collect();
                n.dedup();
                n
            })
            .collect()
    }

    /// Issue 43, the second defect, by hand on 8-GPU nodes (Qwen3-235B-A22B: a TP16 instance
    /// here with DP attention, its attention groups inside a node). A TP8 prefill takes node 0 (GPUs
    /// 0–7); a TP16 decode then starts at the next free node, 1, and takes nodes 1 and 2 (GPUs
    /// 8–23): 3 nodes, 24 GPUs, none idle. Aligned to its GPU count (a multiple of 16) it
    /// started at GPU 16, on nodes 2–3, and left node 1 idle: 4 nodes billed, 32 GPUs. The
    /// same with three TP8 prefills (nodes 0–2) and two TP16 decodes: nodes 3–4 and 5–6, 7
    /// nodes (formerly 4–5 and 6–7, 8 nodes); `pools.node = 1` on a TP16 pool is node 1 (it
    /// was moved to node 2). Instances no larger than a node are placed as before: a TP2 pool
    /// after a TP4 one packs node 0.
    #[test]
    fn an_instance_spanning_nodes_takes_the_next_free_node() {
        let moe = [
            "model.preset=qwen3-235b-a22b",
            "pools.decode.server.dp_size=2",
            "pools.decode.server.enable_dp_attention=true",
        ];
        let sc = load(&[
            moe[0],
            moe[1],
            moe[2],
            "pools.prefill.instances=1",
            "pools.prefill.server.tp_size=8",
            "pools.decode.instances=1",
            "pools.decode.server.tp_size=16",
        ]);
        assert_eq!(nodes_of(&sc), [vec![0], vec![1, 2]]);
        assert_eq!(sc.placement.nodes, 3);
        let first = sc.placement.gpus[1][0];
        assert_eq!((first.node, first.local), (1, 0));
        let gpus: usize = sc.placement.gpus.iter().map(Vec::len).sum();
        assert_eq!(gpus, 24);

        let sc = load(&[
            moe[0],
            moe[1],
            moe[2],
            "pools.prefill.instances=3",
            "pools.prefill.server.tp_size=8",
            "pools.decode.instances=2",
            "pools.decode.server.tp_size=16",
        ]);
        assert_eq!(
            nodes_of(&sc),
            [vec![0], vec![1], vec![2], vec![3, 4], vec![5, 6]]
        );
        assert_eq!(sc.placement.nodes, 7);

        let sc = load(&[
            moe[0],
            moe[1],
            moe[2],
            "pools.prefill.instances=1",
            "pools.prefill.server.tp_size=8",
            "pools.decode.instances=1",
            "pools.decode.server.tp_size=16",
            "pools.decode.node=1",
        ]);
        assert_eq!(nodes_of(&sc), [vec![0], vec![1, 2]]);

        let sc = load(&[
            "pools.prefill.instances=1",
            "pools.prefill.server.tp_size=4",
            "pools.decode.instances=2",
            "pools.decode.server.tp_size=2",
            "pools.decode.node=0",
            "pools.decode.gpu=4",
        ]);
        let locals: Vec<Vec<u32>> = sc
            .placement
            .gpus
            .iter()
            .map(|r| r.iter().map(|g| g.local).collect())
            .collect();
        assert_eq!(locals, [vec![0, 1, 2, 3], vec![4, 5], vec![6, 7]]);
        assert_eq!(sc.placement.nodes, 1);
    }

    #[test]
    fn kv_pages_match_a_hand_computation() {
        // Llama-3.1-8B, TP2, page 64, H100 80 GB (81,559 MiB), mem_fraction_static 0.85, chunk
        // 8192:
        //   budget  = 81,559 × 2^20 × 0.85 = 72,692,688,486.4 B
        //   weights = 8,030,261,248 params × 2 B ÷ 2 = 8,030,261,248 B
        //   reserve = 2 × 8192 × (4096 + 14336 / 2) × 2 B = 369,098,752 B
        //   KV      = 64,293,328,486.4 B ÷ (64 tokens × 65,536 B) = 15,328.7 → 15,328 pages, −1 sink.
        let sc = load(&[]);
        let p = &sc.pools[0];
        assert_eq!(p.model.total_params(), 8_030_261_248.0);
        assert_eq!(kv_pages(&sc.gpu, p), 15_327);
        // Llama-3.1-70B, TP8, page 16, H200 141 GB (143,771 MiB), fp8 KV (1 B), chunk 4096:
        //   budget  = 143,771 × 2^20 × 0.9 = 135,679,338,086.4
        //   weights = 70,553,706,496 × 2 ÷ 8 = 17,638,426,624
        //   reserve = 2 × 4096 × (8192 + 28672 / 8) × 2 = 192,937,984
        //   KV per token per rank = 80 layers × 1 head × 256 B = 20,480 B; per page × 16 = 327,680
        //   pages = 117,847,973,478.4 ÷ 327,680 = 359,643.5 → 359,643 − 1.
        let sc = load(&[
            "model.preset=llama-3.1-70b",
            "hardware.gpu=h200",
            "pools.prefill.server.tp_size=8",
            "pools.prefill.server.page_size=16",
            "pools.prefill.server.kv_cache_dtype=fp8_e4m3",
            "pools.prefill.server.mem_fraction_static=0.9",
            "pools.prefill.server.chunked_prefill_size=4096",
        ]);
        let p = &sc.pools[0];
        assert_eq!(p.model.total_params(), 70_553_706_496.0);
        assert_eq!(kv_pages(&sc.gpu, p), 359_642);
    }

    /// `quantization = "fp8"` (sglang's `--quantization fp8`) halves a BF16 model's weight
    /// memory, so the KV pool grows by what the weights gave back; and a weight-bound decode
    /// step streams half the bytes.
    #[test]
    fn fp8_weights_free_kv_pages_and_speed_up_a_weight_bound_decode() {
        // As the hand computation above, with 1 B weights:
        //   weights = 8,030,261,248 × 1 B ÷ 2 = 4,015,130,624 B
        //   KV      = (72,692,688,486.4 − 4,015,130,624 − 369,098,752) ÷ 4,194,304
        //           = 16,286.006 → 16,286 pages, −1 sink.
        let bf16 = load(&[]);
        let fp8 = load(&["pools.prefill.server.quantization=\"fp8\""]);
        let (pb, pf) = (&bf16.pools[0], &fp8.pools[0]);
        assert_eq!(
            pf.server.quantization,
            Some(crate::spec::server::Quantization::Fp8)
        );
        assert_eq!(
            (
                pb.model.weights.dense.bytes(),
                pf.model.weights.dense.bytes()
            ),
            (2.0, 1.0)
        );
        assert_eq!(kv_pages(&bf16.gpu, pb), 15_327);
        assert_eq!(kv_pages(&fp8.gpu, pf), 16_285);
        // The decode pool was not given the key: its weights and pages are unchanged.
        assert_eq!(
            kv_pages(&fp8.gpu, &fp8.pools[1]),
            kv_pages(&bf16.gpu, &bf16.pools[1])
        );
        // Batch 1 at 1k tokens of context: the step streams the weights (8 GB ÷ TP 2 in BF16).
        let step = |sc: &Scenario, p: &Pool| {
            let m = crate::compute::StepModel::new(
                &sc.gpu,
                &p.model,
                p.server.tp_size,
                p.kv_dtype_bytes,
                sc.compute.clone(),
            );
            m.decode_ns(1, 1024) as f64
        };
        let (tb, tf) = (step(&bf16, pb), step(&fp8, pf));
        assert!(
            tf < 0.8 * tb && tf > 0.4 * tb,
            "FP8 decode step {tf} ns vs BF16 {tb} ns: about half the weight bytes"
        );
    }

    /// Where an instance starts in NVLink domains of 72 GPUs on 4-GPU trays (an NVL72 rack),
    /// by hand: a tray-sized or smaller one as anywhere; a 48-GPU one at a tray boundary of
    /// the current rack while it fits (0, or 12 after a 12-GPU start), else the next rack
    /// (GPU 72); one larger than the rack at a rack boundary.
    #[test]
    fn instances_stay_inside_an_nvlink_domain_when_they_fit() {
        let (g, d) = (4, 72);
        assert_eq!(domain_start(0, 48, g, d), 0);
        assert_eq!(domain_start(12, 48, g, d), 12);
        assert_eq!(
            domain_start(13, 48, g, d),
            16,
            "tray-aligned, 16 + 48 = 64 ≤ 72"
        );
        assert_eq!(
            domain_start(28, 48, g, d),
            72,
            "28 + 48 would cross the rack"
        );
        assert_eq!(domain_start(48, 8, g, d), 48);
        assert_eq!(domain_start(70, 8, g, d), 72, "two trays from GPU 72 on");
        assert_eq!(
            domain_start(66, 2, g, d),
            66,
            "within a tray: aligned to its size"
        );
        assert_eq!(
            domain_start(4, 96, g, d),
            72,
            "larger than a rack: from a rack start"
        );
        assert_eq!(domain_start(72, 72, g, d), 72);
    }

    /// Two 48-rank decode instances and eight 8-GPU prefills on GB200 NVL72 racks: each
    /// decode inside one rack (trays 0-11 and 18-29), the prefills in the trays left between
    /// and after them; the cluster counts trays (nodes of 4 GPUs), every one of them used.
    #[test]
    fn an_nvl72_placement_counts_trays() {
        let mut sc = load(&[
            "hardware.system=\"gb200-nvl72\"",
            "hardware.gpu=\"gb200\"",
            "hardware.gpus_per_node=4",
            "model.preset=\"deepseek-v3\"",
            "pools.prefill.instances=8",
            "pools.prefill.server.tp_size=8",
            "pools.decode.instances=2",
            "pools.decode.server.tp_size=48",
        ]);
        assert_eq!((sc.gpus_per_node, sc.nvlink_domain_gpus), (4, 72));
        // Prefills first (pool order): 8 × 8 GPUs = trays 0-15; the first decode does not
        // fit in trays 16-17 of rack 0 and takes trays 18-29 of rack 1; from tray 30 the
        // second would cross into rack 2, so it takes trays 36-47 there.
        let p = &sc.placement;
        let first = |i: usize| p.gpus[i][0].node;
        assert_eq!(
            (0..8).map(first).collect::<Vec<_>>(),
            [0, 2, 4, 6, 8, 10, 12, 14]
        );
        assert_eq!((first(8), first(9)), (18, 36));
        assert_eq!(p.gpus[8].last().unwrap().node, 29);
        assert_eq!(p.nodes, 48, "trays 0..=47");
        // The same pools on 8-GPU H100 nodes: domains are nodes, nothing moves for them.
        sc = load(&[
            "pools.prefill.instances=2",
            "pools.prefill.server.tp_size=8",
        ]);
        assert_eq!(sc.nvlink_domain_gpus, sc.gpus_per_node);
    }
}
