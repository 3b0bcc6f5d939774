//! Cluster assembly: every server of every pool built from the checked scenario — its step
//! model (composed once per pool), KV pool, radix cache and speculative state — placed on the
//! fabric's GPUs, and the prefills' transfer workers wired to the decodes. `sim::World` runs
//! what this builds; nothing here runs. A room of its own, above the components and below
//! `sim`, so building a cluster and running it are read apart (`docs/architecture.md` §1).

use std::sync::Arc;

use crate::compute::{Interconnect, StepModel, StepTimes};
use crate::config::{Role, Scenario, capacity};
use crate::engine::Nanos;
use crate::sglang::colocated::ColocatedServer;
use crate::sglang::decode::DecodeServer;
use crate::sglang::memory::{KvPool, PageAllocator, Shared, Store};
use crate::sglang::prefill::PrefillServer;
use crate::sglang::prefix_cache::PrefixCache;
use crate::sglang::transfer::{DecodeEndpoint, PrefillSide, TransferWorkers, session_port};
use crate::sglang::{Core, CoreSpec};
use crate::vocab::flow::FlowTag;
use crate::vocab::ids::{ColocatedId, DecodeId, IdVec, InstanceId, PoolId, PrefillId};

use crate::config::Pool;
use crate::sglang::speculative::{SpecDecode, SpecPrefill};

/// The fabric as the simulator runs it: each flow tagged with its owner ([`FlowTag`]).
type Fabric = crate::fabric::Fabric<FlowTag>;

/// The servers of a scenario, placed and wired.
pub struct Cluster {
    /// The fabric, every GPU's NIC and link placed.
    pub fabric: Fabric,
    /// The prefill servers, global instance numbers first.
    pub prefills: IdVec<PrefillId, PrefillServer>,
    /// Every prefill's transfer workers, wired to the decodes.
    pub transfer: TransferWorkers,
    /// The decode servers, numbered after the prefills.
    pub decodes: IdVec<DecodeId, DecodeServer>,
    /// Plain sglang servers (a colocated scenario has only these).
    pub colocated: IdVec<ColocatedId, ColocatedServer>,
    /// Servers built (global instance numbers `0..instances`; a DP rank is one).
    pub instances: u32,
    /// DeepEP all-to-all on the fabric (`sglang::a2a`).
    pub a2a: crate::sglang::a2a::A2aFlows,
}

/// Builds every server of `sc`, in pool order (prefill pools first), global instance numbers
/// in that order.
pub fn assemble(sc: &Scenario) -> Cluster {
    let placement = &sc.placement;
    let fabric = build_fabric(sc);
    let mut prefills = IdVec::default();
    let mut decodes = IdVec::default();
    let mut colocated = IdVec::default();
    let mut global = 0u32;
    let interconnect = interconnect(sc, &fabric);
    let a2a = crate::sglang::a2a::A2aFlows::new(
        sc,
        &placement.gpus,
        interconnect.nic_bytes_per_s_per_gpu,
    );
    let mut placed = 0usize;
    for (pool_idx, pool) in sc.pools.iter().enumerate() {
        // With DP attention every DP rank is its own server (`sglang::dp`).
        let dp = pool.parallel.dp_ranks();
        // Every server of a pool runs the same forward: its model is composed once (the
        // kernel composition is the costliest part of assembling a cluster) and copied.
        let pool_step = step_times(sc, pool, &interconnect);
        let units: Vec<Vec<crate::fabric::GpuId>> = (0..pool.instances)
            .flat_map(|_| {
                placed += 1;
                crate::sglang::dp::rank_gpus(&placement.gpus[placed - 1], dp)
            })
            .collect();
        for gpus in units {
            let id = global;
            global += 1;
            let tp = gpus.len() as u32;
            let pages = capacity::kv_pages(&sc.gpu, pool);
            let step = pool_step.clone();
            let spec_decode = (pool.role == Role::Decode)
                .then(|| decode_state(sc, pool, &interconnect, &step))
                .flatten();
            let a2a_on_fabric = a2a.on_fabric(&gpus);
            let core = Core::new(CoreSpec {
                instance: InstanceId(id),
                pool: PoolId::from(pool_idx),
                nics: gpus.iter().map(|&g| fabric.nic_of(g)).collect(),
                gpus,
                step,
                // A DCP decode's allocator hands out virtual pages of `page_size × dcp_size`
                // tokens (each rank holds its `page_size` of them at the same page id).
                page_size: pool.server.tokens_per_page(),
                hybrid: pool.state_slots > 0,
                pages: kv_pool(sc, pool_idx, pages),
                a2a_on_fabric,
            });
            match pool.role {
                Role::Prefill => {
                    assert!(
                        decodes.is_empty(),
                        "pools are ordered prefill first (seed {})",
                        sc.seed
                    );
                    prefills.push(prefill_server(sc, pool, core, pages, &interconnect));
                }
                Role::Decode => {
                    let ports = (0..tp).map(|r| session_port(id, r)).collect();
                    let mut d = decode_server(pool, core, ports, spec_decode);
                    d.sender_timeout_ns = sc.sglang.sender_timeout_ns();
                    decodes.push(d);
                }
                Role::Colocated => {
                    let budget = pool
                        .server
                        .chunked_prefill_size
                        .min(pool.server.max_prefill_tokens);
                    // Per DP rank, as sglang divides it (and as `decode_server` does).
                    let max_running = pool
                        .server
                        .max_running_requests
                        .map_or(u32::MAX, |m| (m / dp).max(1));
                    colocated.push(ColocatedServer::new(
                        core,
                        budget,
                        max_running,
                        pool.enable_mixed_chunk,
                    ));
                }
            }
        }
    }
    let transfer = transfer_workers(sc, &prefills, &decodes);
    Cluster {
        fabric,
        prefills,
        transfer,
        decodes,
        colocated,
        instances: global,
        a2a,
    }
}

/// Every prefill's transfer workers, wired to the decodes: each decode's transfer endpoint,
/// and the compiled transfer plan of every (prefill, decode) pair of instances.
fn transfer_workers(
    sc: &Scenario,
    prefills: &IdVec<PrefillId, PrefillServer>,
    decodes: &IdVec<DecodeId, DecodeServer>,
) -> TransferWorkers {
    let mut endpoints = IdVec::default();
    for d in decodes.iter() {
        let d: &DecodeServer = d;
        endpoints.push(DecodeEndpoint {
            instance: d.core.instance,
            gpus: d.core.gpus.clone(),
            page_size: d.core.page_size,
            watched: d.core.pages.is_oracle(),
            ports: d.ports.clone(),
        });
    }
    let sides = prefills
        .iter()
        .map(|p| {
            let p: &PrefillServer = p;
            let mut plans = IdVec::default();
            for d in decodes.iter() {
                let d: &DecodeServer = d;
                plans.push(Arc::clone(
                    &sc.plans[&(p.core.pool.idx(), d.core.pool.idx())],
                ));
            }
            PrefillSide {
                // Every TP rank of every pipeline stage runs its own manager and queues.
                ranks: sc.pools[p.core.pool.idx()].server.attn_tp_size
                    * sc.pools[p.core.pool.idx()].server.pp_size,
                gpus: p.core.gpus.clone(),
                plans,
            }
        })
        .collect();
    let mut workers = TransferWorkers::new(
        sides,
        endpoints,
        sc.sglang.queue_size,
        sc.fabric.control_latency_ns,
    );
    if let Some(every) = sc.sglang.failed_session_probe_ns {
        workers.set_failed_session_probe(every);
    }
    workers.set_backend(sc.sglang.transfer_backend);
    workers
}

/// The fabric of `sc` over `nodes` nodes, with the calibrated Mooncake parameters
/// (`fabric/calibration.rs`) and the scenario's network latency.
fn build_fabric(sc: &Scenario) -> Fabric {
    Fabric::build(sc.fabric.topology.clone(), sc.fabric.model.clone()).unwrap_or_else(|e| {
        panic!(
            "a validated scenario builds its fabric: {e} (seed {})",
            sc.seed
        )
    })
}

/// The step-time model of one server of `pool`: the whole instance, or one DP rank of an
/// instance with DP attention / expert parallelism (its routed experts priced over the
/// instance by `compute::moe`, its all-to-all over NVLink and the NICs).
fn step_model(sc: &Scenario, pool: &crate::config::Pool, ic: &Interconnect) -> StepModel {
    let mut m = step_model_of(sc, pool, ic);
    // sglang sizes its CUDA graphs by the whole server's TP, DP ranks included.
    m.set_graph_max_bs(crate::spec::server::cuda_graph_max_bs(
        &sc.gpu,
        pool.server.tp_size,
    ));
    m.set_overlap_schedule(pool.overlap_schedule);
    m.set_dp_attention(pool.parallel.dp_ranks() > 1);
    if pool.kv_elem() == crate::spec::model::KvElem::Fp4 {
        m = m.with_fp4_kv(&pool.model, pool.server.attn_tp_size);
    }
    if pool.server.dcp_size > 1 {
        m = m.with_dcp(dcp_merge(sc, pool, ic));
    }
    m
}

/// The cross-rank merge of a DCP decode of `pool` (`compute::model::dcp`): a DCP group is
/// `dcp_size` consecutive GPUs of a TP group, so it talks over NVLink (one-way, at the
/// all-reduce's link efficiency and step latency) when the instance fits an NVLink domain,
/// else over the GPU's share of its NICs with the network's latency.
fn dcp_merge(
    sc: &Scenario,
    pool: &Pool,
    ic: &Interconnect,
) -> crate::compute::model::dcp::DcpMerge {
    let s = &pool.server;
    let p = &sc.compute;
    let link = if s.tp_size <= sc.nvlink_domain_gpus {
        (
            sc.gpu.nvlink_bytes_per_s / 2.0 * p.nvlink_efficiency,
            p.allreduce_step_latency_s,
        )
    } else {
        (
            ic.nic_bytes_per_s_per_gpu * p.nvlink_efficiency,
            p.allreduce_step_latency_s + ic.network_latency_s,
        )
    };
    let link = (link.0, link.1, p.allreduce_log_steps);
    crate::compute::model::dcp::DcpMerge::mla(&pool.model, s.tp_size, s.dcp_size, link)
        .unwrap_or_else(|| {
            panic!(
                "a validated DCP pool serves an MLA model (seed {})",
                sc.seed
            )
        })
}

/// [`step_model`] before the server-wide settings.
fn step_model_of(sc: &Scenario, pool: &crate::config::Pool, ic: &Interconnect) -> StepModel {
    let par = &pool.parallel;
    if par.dp_ranks() == 1 && par.ep_size <= 1 {
        return StepModel::with_interconnect(
            &sc.gpu,
            &pool.model,
            pool.server.tp_size,
            pool.kv_dtype_bytes,
            sc.compute.clone(),
            Some(ic),
        )
        .with_offload(pool.offload.clone());
    }
    let net = crate::compute::moe::A2aNetwork {
        // DeepEP stays on NVLink inside an NVLink domain (a node, or an NVL72 rack's trays).
        gpus_per_node: sc.nvlink_domain_gpus,
        nic_bytes_per_s_per_gpu: ic.nic_bytes_per_s_per_gpu,
        nvlink_one_way_bytes_per_s: sc.gpu.nvlink_bytes_per_s / 2.0,
        nic_efficiency: sc.fabric.model.nic_efficiency,
    };
    let moe = crate::compute::moe::ExpertCost::new(
        &sc.gpu,
        &pool.model,
        pool.server.tp_size,
        par,
        net,
        StepModel::expert_peak_flops_for(&sc.gpu, &pool.model, &sc.compute),
    );
    StepModel::with_parallel(
        &sc.gpu,
        &pool.model,
        pool.server.attn_tp_size,
        pool.kv_dtype_bytes,
        sc.compute.clone(),
        Some(ic),
        moe,
    )
    .with_offload(pool.offload.clone())
}

/// The memory of one instance of pool `pool_idx` with `pages` usable KV pages: the oracle for a
/// decode pool that some prefill pool reaches through an inexact plan, or that is unified;
/// plain allocators otherwise (no write can land wrong there, so no ownership is tracked).
fn kv_pool(sc: &Scenario, pool_idx: usize, pages: u32) -> KvPool {
    let pool = &sc.pools[pool_idx];
    let watched = capacity::oracle_watched(&sc.pools, &sc.plans, pool_idx);
    let store = if watched {
        let cap = crate::layout::Capacity {
            pages,
            slots: pool.state_slots,
            // One metadata row per request that can hold pages at once.
            aux_rows: pages.max(1),
        };
        Store::Oracle {
            mem: crate::layout::DecodeMemory::new(&pool.layout, cap),
            used: 0,
            total: pages,
        }
    } else {
        Store::Plain {
            pages: PageAllocator::with_policy(pages, pool.kv_allocator),
            slots: PageAllocator::new(pool.state_slots),
            grown: Vec::new(),
        }
    };
    let shared = pool.server.enable_unified_memory.then(|| Shared {
        budget: capacity::kv_budget_bytes(&sc.gpu, pool).max(0.0),
        page_bytes: pool.layout[0].kv_page_bytes() as f64,
        slot_bytes: pool.layout[0].state_slot_bytes() as f64,
        used: 0.0,
    });
    KvPool::new(store, shared)
}

/// What an instance spanning NVLink domains all-reduces over: its GPUs' NICs (one NIC share
/// per GPU). Inside a domain (a node, or the trays of an NVL72 rack) it stays on NVLink.
fn interconnect(sc: &Scenario, fabric: &Fabric) -> Interconnect {
    Interconnect {
        gpus_per_node: sc.nvlink_domain_gpus,
        nic_bytes_per_s_per_gpu: fabric.nic_capacity_bytes_per_ns()
            * 1e9
            * f64::from(sc.fabric.topology.nics_per_node)
            / f64::from(sc.gpus_per_node),
        network_latency_s: sc.fabric.model.base_latency_ns as f64 / 1e9,
    }
}

/// The `[slo]` targets of `sc` no request can meet, each as a warning naming its key: a TTFT
/// target below the fastest first token any pool can give (a one-token prefill plus the
/// calibration's first-token path), a TPOT, ITL or TBT target below the fastest decode step
/// (one request at a one-token context). A floor, not an estimate: a target above it may
/// still be out of reach under load.
pub fn slo_floor_notes(sc: &Scenario) -> Vec<String> {
    use crate::config::{Role, SLO_PERCENTILES};
    let slo = &sc.slo;
    // Most scenarios set no latency target: nothing to build step models for.
    let gap_pct = [slo.tpot_pct_ms, slo.itl_pct_ms, slo.tbt_pct_ms];
    if slo.ttft_ns.is_none()
        && slo.tpot_ns.is_none()
        && slo.tbt_ns.is_none()
        && slo
            .ttft_pct_ms
            .iter()
            .chain(gap_pct.iter().flatten())
            .all(Option::is_none)
    {
        return Vec::new();
    }
    let ic = interconnect(sc, &build_fabric(sc));
    // The fastest (ms, pool) of each kind.
    let mut first: Option<(f64, &str)> = None;
    let mut step: Option<(f64, &str)> = None;
    let path_ms = sc.compute.first_token_path_s * 1e3;
    for pool in &sc.pools {
        let t = step_times(sc, pool, &ic);
        if matches!(pool.role, Role::Prefill | Role::Colocated) {
            let ms = t.prefill_ns(&[(1, 0)]) as f64 / 1e6 + path_ms;
            if first.is_none_or(|(f, _)| ms < f) {
                first = Some((ms, pool.name.as_str()));
            }
        }
        if matches!(pool.role, Role::Decode | Role::Colocated) {
            let ms = t.decode_ns(1, 2) as f64 / 1e6;
            if step.is_none_or(|(f, _)| ms < f) {
                step = Some((ms, pool.name.as_str()));
            }
        }
    }
    let ms = |ns: Option<Nanos>| ns.map(|n| n as f64 / 1e6);
    let mut ttft: Vec<(String, f64)> = ms(slo.ttft_ns)
        .map(|v| ("slo.ttft_ms".to_string(), v))
        .into_iter()
        .collect();
    let mut gaps: Vec<(String, f64)> = [
        ("slo.tpot_ms", ms(slo.tpot_ns)),
        ("slo.tbt_ms", ms(slo.tbt_ns)),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k.to_string(), v)))
    .collect();
    for (i, p) in SLO_PERCENTILES.iter().enumerate() {
        if let Some(v) = slo.ttft_pct_ms[i] {
            ttft.push((format!("slo.ttft_p{p}_ms"), v));
        }
        for (name, t) in [
            ("tpot", slo.tpot_pct_ms),
            ("itl", slo.itl_pct_ms),
            ("tbt", slo.tbt_pct_ms),
        ] {
            if let Some(v) = t[i] {
                gaps.push((format!("slo.{name}_p{p}_ms"), v));
            }
        }
    }
    let mut out = Vec::new();
    if let Some((floor, pool)) = first {
        for (key, v) in ttft.iter().filter(|(_, v)| *v < floor) {
            out.push(format!(
                "{key} = {v} is below the fastest first token this deployment can give ({floor:.2} ms: pool {pool}'s prefill of one token and the first token's path to the client): no request can meet it"
            ));
        }
    }
    if let Some((floor, pool)) = step {
        for (key, v) in gaps.iter().filter(|(_, v)| *v < floor) {
            out.push(format!(
                "{key} = {v} is below the fastest decode step this deployment can run ({floor:.2} ms: pool {pool} with one request): no request can meet it"
            ));
        }
    }
    out
}

/// The step times of a server of `pool`: its measured profile, or the model.
fn step_times(sc: &Scenario, pool: &crate::config::Pool, ic: &Interconnect) -> StepTimes {
    match &pool.step_times {
        Some(measured) => StepTimes::Measured(measured.as_ref().clone()),
        None => StepTimes::Model(step_model(sc, pool, ic)),
    }
}

/// A prefill server of `pool` over `core` (`pages` KV pages): its radix cache, HiCache and
/// speculative draft as the pool configures them.
fn prefill_server(
    sc: &Scenario,
    pool: &crate::config::Pool,
    core: Core,
    pages: u32,
    interconnect: &Interconnect,
) -> PrefillServer {
    let cache = pool.server.radix_cache.map(|cap| {
        PrefixCache::new(Some(
            cap.unwrap_or(u64::from(pages) * u64::from(pool.server.page_size)),
        ))
    });
    let mut server = PrefillServer::new(
        core,
        cache,
        pool.server.chunked_prefill_size,
        pool.server.max_prefill_tokens,
    );
    server.hicache = pool
        .hicache
        .map(|h| Box::new(crate::sglang::hicache::HiCache::new(h)));
    server.spec = prefill_state(sc, pool, interconnect);
    server.pp = pp_forward(sc, pool, interconnect).map(|f| {
        let depth = pool.server.pp_async_batch_depth;
        Box::new(crate::sglang::pipeline::Pipeline::new(
            f,
            pool.model.num_layers,
            depth,
        ))
    });
    server
}

/// The stage-to-stage hand-off of a PP prefill of `pool` (`sglang::pipeline`), `None` without
/// `--pp-size`: over NVLink (one-way, at the all-reduce's link efficiency) when an instance
/// fits an NVLink domain, else over the GPU's share of its NICs with the network's latency.
fn pp_forward(
    sc: &Scenario,
    pool: &Pool,
    ic: &Interconnect,
) -> Option<crate::sglang::pipeline::PpForward> {
    let s = &pool.server;
    if s.pp_size <= 1 {
        return None;
    }
    let p = &sc.compute;
    let one_domain = s.gpus() <= sc.nvlink_domain_gpus;
    let (link, latency_s) = if one_domain {
        (sc.gpu.nvlink_bytes_per_s / 2.0, p.allreduce_step_latency_s)
    } else {
        (
            ic.nic_bytes_per_s_per_gpu,
            p.allreduce_step_latency_s + ic.network_latency_s,
        )
    };
    Some(crate::sglang::pipeline::PpForward {
        hops: s.pp_size - 1,
        bytes_per_token: 2
            * u64::from(pool.model.hidden_size)
            * u64::from(pool.model.activation_bytes),
        tp: s.tp_size,
        link_bytes_per_s: link * p.nvlink_efficiency,
        latency_ns: crate::engine::ns_from_secs_ceil(latency_s),
    })
}

/// A decode server (one DP rank) of `pool` over `core`, its ranks listening on `ports`.
fn decode_server(
    pool: &crate::config::Pool,
    core: Core,
    ports: Vec<u32>,
    spec: Option<Box<crate::sglang::speculative::SpecDecode>>,
) -> DecodeServer {
    // Under DP attention sglang divides `--max-running-requests` over the DP ranks
    // (`Scheduler.init_memory_pool_and_cache`: `max_running_requests // dp_size`).
    let dp = pool.parallel.dp_ranks();
    let max_running = pool
        .server
        .max_running_requests
        .map_or(u32::MAX, |m| (m / dp).max(1));
    let mut d = DecodeServer::new(core, ports, max_running);
    d.reserved_tokens = pool.num_reserved_decode_tokens;
    d.extra_slots = pool.decode_extra_slots;
    d.offload = pool
        .decode_offload
        .map(|o| Box::new(crate::sglang::decode_offload::DecodeOffload::new(o)));
    d.spec = spec;
    d.radix = pool.decode_radix.then(|| {
        // One page over every attention rank: what the prefill would write for it.
        let attn_tp = pool.server.attn_tp_size;
        let page_bytes = pool.model.kv_token_bytes_rank(attn_tp, pool.kv_elem())
            * u64::from(attn_tp)
            * u64::from(pool.server.page_size);
        Box::new(crate::sglang::decode_radix::DecodeRadix::new(
            pool.server.page_size,
            page_bytes,
        ))
    });
    d.set_coalescing(true);
    d
}

/// The draft's step model on a server of `pool` (same GPUs, TP, DP/EP and KV dtype).
fn draft_model(sc: &Scenario, pool: &Pool, ic: &Interconnect) -> Option<crate::compute::StepModel> {
    let spec = pool.server.speculative.as_ref()?;
    let mut draft = pool.clone();
    draft.model = spec.draft_model(&pool.model);
    // The draft (an MTP layer, an EAGLE head) keeps its weights on the GPU whatever the
    // target offloads.
    draft.offload = None;
    Some(step_model(sc, &draft, ic))
}

/// A decode server's speculative state, if its pool runs speculative decoding.
fn decode_state(
    sc: &Scenario,
    pool: &Pool,
    ic: &Interconnect,
    step: &StepTimes,
) -> Option<Box<SpecDecode>> {
    let spec = pool.server.speculative.as_ref()?;
    let p = pool.speculative.as_ref()?;
    // A measured profile is refused with speculation at validation.
    let StepTimes::Model(target) = step else {
        return None;
    };
    let draft = draft_model(sc, pool, ic)?;
    Some(Box::new(SpecDecode::new(
        target.clone(),
        draft,
        spec,
        (p.accept_rate, p.accept_rate_sd),
        sc.seed,
    )))
}

/// A prefill server's speculative state (its draft prefill), if its pool runs it.
fn prefill_state(sc: &Scenario, pool: &Pool, ic: &Interconnect) -> Option<Box<SpecPrefill>> {
    draft_model(sc, pool, ic).map(|d| Box::new(SpecPrefill::new(d)))
}
