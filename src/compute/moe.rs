//! The routed-expert (MoE) part of a forward on an instance with DP attention and/or expert
//! parallelism (`docs/performance-model.md` §7).
//!
//! With DP attention an instance of `tp` GPUs runs `dp` attention ranks of `tp / dp` GPUs
//! each, every rank with its own batch; at each MoE layer the ranks meet: sglang runs the
//! ranks in lockstep (an idle rank runs an idle batch, `Scheduler.prepare_mlp_sync_batch`,
//! sglang v0.4.6), so one rank's step is the instance's step. pdsim models that step from one
//! rank's batch under the assumption that every rank carries the same load (the dispatcher
//! spreads requests evenly): the MoE layer sees `dp × T` tokens.
//!
//! * **Expert parallelism** (`ep_size = tp`, `moe_a2a_backend = "deepep"`): each GPU holds
//!   `(E + redundant) / ep` experts. Per layer a GPU computes its share of the `dp·T·k`
//!   token-expert pairs times the **imbalance** (the busiest GPU sets the pace): a popularity
//!   skew (`EXPERT_SKEW`, reduced to `EXPERT_SKEW_EPLB` by EPLB, and further by redundant
//!   experts) times the statistical excess of the most loaded of `ep` GPUs over the mean
//!   (`μ + sqrt(2 μ ln ep)` for `μ` pairs per GPU, the Gaussian tail of a sum of routings).
//! * **DeepEP dispatch/combine**: every token travels to the GPUs of its `k` experts (FP8
//!   dispatch, `hidden + hidden/128 × 4` bytes with its scales) and back (BF16 combine,
//!   `2 × hidden`). Copies to a GPU of the same node cross NVLink; copies to another node
//!   cross the RDMA NICs. Prefill uses DeepEP's *normal* kernels, which send a token once per
//!   destination node (the NVLink forward fans it out there); decode uses the *low-latency*
//!   kernels, which send one copy per expert (`deep_ep.Buffer.low_latency_dispatch`).
//!   Each dispatch and combine pays `A2A_LATENCY_S`.
//! * **Two-batch overlap** (`enable_two_batch_overlap`): the batch runs as two micro-batches,
//!   one's all-to-all under the other's compute (sglang `two_batch_overlap.py`).
//!   - *Prefill* (normal kernels, which occupy SMs): the MoE layers take
//!     `max(compute, comm) + min(compute, comm) / 2` instead of the sum (half of the shorter
//!     side cannot hide: the pipeline's fill and drain).
//!   - *Decode* (low-latency kernels with receive hooks, which free every SM once the RDMA
//!     writes are issued: DeepSeek `profile-data` README, "Decoding"): sglang's
//!     `_compute_moe_deepseek_blog_decode` (`srt/operations_strategy.py` since sglang PR
//!     #6598, merged 2025-05-26, the LMSYS blog's month; `srt/batch_overlap/` later) cuts each
//!     MoE layer into five stages — P (the previous layer's output and this one's
//!     projections), C (the attention core, `op_core`, and the router), D (dispatch sent,
//!     shared experts), E (dispatch received, experts, combine sent), W (combine received) —
//!     and `execute_overlapped_operations` runs micro-batch B two stages behind A
//!     (`tbo_delta_stages = 2`) on the one compute stream: A.D, B.P, A.E, B.C, A.W, B.D, A.P,
//!     B.E, A.C, B.W. A dispatch in flight is covered by the micro-batch's own shared experts
//!     and the other's projections, a combine by the other's attention core, and the experts
//!     wait for their own dispatch: `2 × (max(a − c, d) + e + max(c, m))` per layer, with `a`
//!     one micro-batch's attention and dense work of the layer (every micro-batch streams the
//!     layer's weights), `c` of it the attention core (the decode attention and its absorbed
//!     matmuls under measured kernels; the KV read under the roofline), `e` its expert GEMMs,
//!     `d` and `m` its dispatch and combine (half the bytes, a whole kernel latency each).
//!     (pdsim paired each leg with a whole compute part of the other micro-batch before —
//!     DeepEP's four-part picture, `max(a, d) + max(e, d) + max(e, m) + max(a, m)` — which
//!     hid a micro-batch's experts under its own all-to-all.) The first
//!     `first_k_dense_replace` layers run outside it on the
//!     whole batch (`DeepseekV2Model.forward`, `normal_num_layers`).
//! * **Without EP** (`ep_size = 1`) the experts are TP-sharded over all `tp` GPUs: the ranks'
//!   tokens are gathered, every GPU computes `1/tp` of every expert, and the result is
//!   reduce-scattered (one all-reduce's traffic of the `dp·T` tokens over NVLink / the NICs).
//!
//! Every constant is named with its source; none is fitted to the LMSYS figures that
//! `tests/fidelity/moe_lmsys.rs` compares against.

use crate::spec::kernels::grid::Grid;
use crate::spec::kernels::tables::version_key;
use crate::spec::{GpuSpec, ModelSpec, server::A2aBackend, server::Parallel};

/// Popularity skew of DeepSeek-V3's experts without EPLB: the busiest GPU's share over the
/// mean when tokens are plentiful. LMSYS (2025-05-05, "Expert Parallelism Load Balancer")
/// plots a balancedness (mean ÷ max GPU load) near 0.5–0.6 for real traces at EP32+ without
/// EPLB; 1 / 0.6 ≈ 1.7. Borrowed, not fitted.
pub const EXPERT_SKEW: f64 = 1.7;
/// The same with EPLB: LMSYS's balancedness with EPLB is ~0.85–0.9 (1 / 0.87 ≈ 1.15).
/// Redundant experts bring it further towards 1 (see [`skew`]). Borrowed, not fitted.
pub const EXPERT_SKEW_EPLB: f64 = 1.15;
/// Fixed latency of one DeepEP dispatch or combine, seconds: DeepEP's README lists
/// low-latency dispatch at ~77–194 µs for 128 tokens (EP8–EP256), of which ~20 µs is not
/// bandwidth (its EP8 NVLink-only row). Borrowed, not fitted.
pub const A2A_LATENCY_S: f64 = 20e-6;
/// Fraction of NIC line rate DeepEP's RDMA kernels reach: its README reports 43–58 GB/s per
/// 400 Gb/s (50 GB/s) CX7 NIC for normal kernels (0.86–1.0 over the quoted range); 0.9.
/// Borrowed, not fitted.
pub const A2A_RDMA_EFFICIENCY: f64 = 0.9;
/// Fraction of NVLink one-way bandwidth DeepEP's intranode kernels reach: 153–158 GB/s of
/// H800's 160 GB/s (README, "normal kernels with NVLink"); for H100's 450 GB/s one-way pdsim
/// keeps the ratio, 0.95 × `nvlink_efficiency`-free. Borrowed.
pub const A2A_NVLINK_EFFICIENCY: f64 = 0.95;

/// The NIC one GPU had where AIConfigurator measured DeepEP across nodes, bytes/s: one
/// 400 Gb/s ConnectX-7 a GPU, as DeepEP's own figures (`docs/legacy.md`, "CX7 InfiniBand 400
/// Gb/s") and the H100/H200 systems the database describes. The measured tables' scale is taken
/// against the analytic legs on this NIC ([`ExpertCost::measured_scale`]), so an instance on
/// slower or faster NICs keeps its own line rate.
pub const MEASURED_NIC_BYTES_PER_S: f64 = 400e9 / 8.0;

/// The network an instance's all-to-all runs over.
#[derive(Clone, Debug, PartialEq)]
pub struct A2aNetwork {
    /// GPUs per node (the NVLink domain).
    pub gpus_per_node: u32,
    /// RDMA bytes per second one GPU can send (its NIC share), before contention.
    pub nic_bytes_per_s_per_gpu: f64,
    /// One-way NVLink bytes per second of one GPU.
    pub nvlink_one_way_bytes_per_s: f64,
    /// The share of its line rate a NIC carries on this fabric (`FabricParams::nic_efficiency`;
    /// 1 for a bare line rate): the measured DeepEP tables' 400 Gb/s NIC is taken at the same
    /// share, so an instance on that NIC gets the measured time exactly
    /// ([`ExpertCost::measured_scale`]).
    pub nic_efficiency: f64,
}

/// The routed-expert cost model of one instance.
#[derive(Clone, Debug)]
pub struct ExpertCost {
    /// Routed experts per MoE layer, and each token's active count.
    experts: f64,
    active: f64,
    /// Weight bytes of one routed expert over all MoE layers.
    expert_bytes: f64,
    /// FLOPs of one token through one expert over all MoE layers.
    pair_flops: f64,
    /// MoE layers.
    layers: f64,
    /// Hidden width.
    hidden: f64,
    /// Attention DP ranks whose tokens meet at each MoE layer.
    dp: f64,
    /// GPUs of the instance.
    gpus: f64,
    /// Expert-parallel degree (1: TP-sharded experts).
    ep: f64,
    /// Experts one GPU holds (with redundant replicas) under EP.
    experts_per_gpu: f64,
    skew: f64,
    deepep: bool,
    tbo: bool,
    net: A2aNetwork,
    peak_flops: f64,
    hbm_bytes_per_s: f64,
    /// The experts' kernel time from the MoE tables, when the calibration has them and a
    /// table measures this model's expert shape ([`ExpertCost::with_tables`]).
    measured: Option<MeasuredExperts>,
    /// DeepEP's dispatch and combine as measured, when the calibration has tables of this
    /// hidden width and top-k ([`ExpertCost::with_tables`]).
    measured_a2a: Option<MeasuredA2a>,
    /// Why the experts' time is not this model's own measured table, for the fallbacks a run
    /// lists ([`ExpertCost::with_tables`]).
    experts_fallback: Option<String>,
}

/// DeepEP's dispatch and combine per call as AIConfigurator measured them (`deepep` tables:
/// nodes of 8 GPUs × tokens per rank, microseconds), per kernel newest version first, each a
/// (dispatch, combine) pair. They set the legs' rate: the analytic legs (bytes over the NIC
/// and NVLink, [`A2A_LATENCY_S`] a kernel) are scaled so that one call of a forward's token
/// count takes the measured time ([`ExpertCost::measured_scale`]); past the tables' largest
/// node count the scale there carries over (the analytic legs follow the nodes).
#[derive(Clone, Debug)]
pub struct MeasuredA2a {
    /// The low-latency kernels (decode).
    ll: Vec<(Grid, Grid)>,
    /// The normal kernels (prefill) at DeepEP's default 20 SMs.
    normal: Vec<(Grid, Grid)>,
}

/// One MoE layer's routed-expert kernels as measured (`compute::kernels`): per phase a grid
/// over (parallel degree, tokens entering the layer over the whole instance), microseconds.
#[derive(Clone, Debug)]
pub struct MeasuredExperts {
    /// A prefill's (DeepEP's normal-mode MoE, or the fused MoE).
    prefill: crate::spec::kernels::grid::Grid,
    /// A decode's (DeepEP's low-latency MoE, or the fused MoE).
    decode: crate::spec::kernels::grid::Grid,
    /// The grid's first coordinate: the EP degree, or the TP degree of TP-sharded experts.
    degree: f64,
    /// DeepEP's tables (`wideep_moe`): the routed experts of the model the table measured (no
    /// redundant replicas) and this instance's physical experts (routed experts and their
    /// redundant replicas), read by each rank's shape ([`MeasuredExperts::layer_us`]); `None`
    /// for the fused-MoE tables, read at (degree, tokens).
    per_rank: Option<(f64, f64)>,
    /// Which table, for provenance.
    pub source: String,
}

impl MeasuredExperts {
    /// One MoE layer's routed experts, µs, when `tokens` enter it over the whole instance
    /// (the busiest rank's load, skew included) from `grid`.
    ///
    /// The fused-MoE tables are read at (degree, tokens). DeepEP's are read by the shape one
    /// rank runs — DeepGEMM's grouped GEMM over the experts the rank holds (`experts ÷ ep`,
    /// redundant replicas included: EPLB places `experts + ep_num_redundant_experts` physical
    /// experts) and the token-expert rows it receives (`tokens × top-k ÷ ep`) — which is what the
    /// table measures at each of its EP degrees: the rank's experts fix the EP degree `e*`
    /// of the table's model with that many a rank, and the table is read at each bracketing
    /// degree `e` with the same rows a rank (`tokens ÷ ep × e`), weighted linearly in the
    /// experts a rank holds (`experts ÷ e`). So a model whose expert count no table has (Kimi
    /// K2's 384 beside DeepSeek-V3's 256, the same width and top-k) takes the measured kernel
    /// at its own rank shape, and a degree between the table's points (EP72) is read at that
    /// shape rather than at the same total tokens (which holds a rank's rows ∝ 1/ep, not
    /// linear in ep). Past the table's degrees: the nearest degree at the same rows a rank.
    fn layer_us(&self, grid: &crate::spec::kernels::grid::Grid, tokens: f64) -> f64 {
        let Some((table_experts, experts)) = self.per_rank else {
            return grid.eval(&[self.degree, tokens]);
        };
        let per_rank = tokens / self.degree;
        let at = |e: f64| grid.eval(&[e, per_rank * e]);
        let degree = table_experts * self.degree / experts;
        let points = &grid.axes[0].points;
        let i = points.partition_point(|&e| e <= degree);
        if i == 0 {
            return at(points[0]);
        }
        if i == points.len() || points[i - 1] == degree {
            return at(points[i - 1]);
        }
        let (lo, hi) = (points[i - 1], points[i]);
        // Linear in the experts a rank holds (`table_experts ÷ e`).
        let w = (1.0 / lo - 1.0 / degree) / (1.0 / lo - 1.0 / hi);
        at(lo) + (at(hi) - at(lo)) * w
    }
}

/// What the MoE layers of one forward cost on the busiest GPU, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeTime {
    /// Expert GEMMs (compute or weight streaming, whichever binds).
    pub compute_s: f64,
    /// Dispatch + combine (or gather + reduce-scatter without EP).
    pub comm_s: f64,
    /// What the forward pays: the sum, or the overlapped time under two-batch overlap.
    pub total_s: f64,
    /// Inter-node bytes one GPU sends per forward (to load the fabric with).
    pub rdma_bytes_per_gpu: f64,
    /// The NIC part of `comm_s` at the uncontended DeepEP rate, seconds.
    pub rdma_s: f64,
    /// The NVLink part of `comm_s`, seconds.
    pub nvlink_s: f64,
    /// The fixed kernel latencies in `comm_s`, seconds.
    pub latency_s: f64,
    /// Whether two-batch overlap hides communication behind compute.
    pub tbo: bool,
    /// A decode forward under two-batch overlap with DeepEP's low-latency kernels: the
    /// micro-batches' compute parts sglang's two-micro-batch schedule pairs with their
    /// communication (`total_s` is that schedule and includes `MicroBatches::attn_s` twice).
    pub stages: Option<MicroBatches>,
    /// How much longer than the analytic legs (at [`A2A_RDMA_EFFICIENCY`] of the NIC) the
    /// measured DeepEP tables make the legs' bytes take (`rdma_s` and `nvlink_s` include
    /// it); `None` for analytic legs. The fabric caps the forward's flows at the rate this
    /// leaves (`sglang::a2a`).
    pub a2a_scale: Option<f64>,
}

/// One micro-batch's compute in a decode forward under two-batch overlap, summed over the MoE
/// layers, seconds (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MicroBatches {
    /// Attention and dense work of one micro-batch (half the rank's batch) in the MoE layers.
    pub attn_s: f64,
    /// Of `attn_s`, the attention core: the stage sglang runs between a micro-batch's
    /// projections and its router (`self_attn.op_core`: the attention kernel, its absorbed
    /// matmuls and `o_proj`), seconds over the MoE layers.
    pub core_s: f64,
    /// Expert GEMMs of one micro-batch on the busiest GPU.
    pub experts_s: f64,
    /// MoE layers.
    pub layers: f64,
    /// Dispatch's share of the bytes of one token copy (FP8 out, BF16 back).
    pub dispatch_share: f64,
}

impl MicroBatches {
    /// The MoE layers of a decode under two-batch overlap when the whole forward's
    /// communication (both micro-batches, dispatch + combine, kernel latencies excluded)
    /// takes `bytes_s`, and each kernel pays `latency_s` once per micro-batch and layer, as
    /// sglang schedules them: `_compute_moe_deepseek_blog_decode` cuts a layer into five
    /// stages — P (the previous layer's output, this one's projections), C (`op_core`, the
    /// router), D (dispatch sent, shared experts), E (dispatch received, experts, combine
    /// sent), W (combine received) — and `execute_overlapped_operations` runs micro-batch B
    /// two stages behind A on the one compute stream (`tbo_delta_stages = 2`): A.D, B.P, A.E,
    /// B.C, A.W, B.D, A.P, B.E, A.C, B.W. A dispatch in flight is covered by its own shared
    /// experts and the other micro-batch's projections, a combine by the other's attention
    /// core; a micro-batch's experts wait for its own dispatch. Per layer
    /// `2 × (max(a − c, d) + e + max(c, m))`, seconds.
    fn pipeline_s(&self, bytes_s: f64, latency_s: f64) -> f64 {
        let l = self.layers.max(1.0);
        let (a, c, e) = (self.attn_s / l, self.core_s / l, self.experts_s / l);
        // One micro-batch's half of the bytes, per layer.
        let per = bytes_s / 2.0 / l;
        let d = per * self.dispatch_share + latency_s;
        let m = per * (1.0 - self.dispatch_share) + latency_s;
        l * 2.0 * ((a - c).max(d) + e + c.max(m))
    }
}

impl MoeTime {
    /// What the forward's MoE layers take when their inter-node all-to-all takes `rdma_s`
    /// seconds (as the fabric measured it, contention included) instead of the uncontended
    /// [`MoeTime::rdma_s`]: the same composition as `total_s` — NVLink and NIC legs run
    /// concurrently, the kernel latencies add, two-batch overlap hides the shorter side.
    pub fn total_with_rdma_s(&self, rdma_s: f64) -> f64 {
        if let Some(mb) = &self.stages {
            return mb.pipeline_s(rdma_s.max(self.nvlink_s), A2A_LATENCY_S);
        }
        let comm = rdma_s.max(self.nvlink_s) + self.latency_s;
        combine(self.compute_s, comm, self.tbo)
    }
}

/// Compute and communication of the MoE layers as one forward pays them: the sum, or under
/// two-batch overlap `max + min / 2` (one micro-batch's all-to-all under the other's compute;
/// half of the shorter side cannot hide: the pipeline's fill and drain).
fn combine(compute_s: f64, comm_s: f64, tbo: bool) -> f64 {
    if tbo {
        compute_s.max(comm_s) + compute_s.min(comm_s) / 2.0
    } else {
        compute_s + comm_s
    }
}

/// The legs of one forward's all-to-all (see [`MoeTime`]).
#[derive(Clone, Copy, Debug, Default)]
struct A2a {
    rdma_s: f64,
    nvlink_s: f64,
    latency_s: f64,
    rdma_bytes: f64,
    /// The measured tables' scale on the bytes' time ([`MoeTime::a2a_scale`]).
    scale: Option<f64>,
}

/// EP degree at which [`EXPERT_SKEW`] and [`EXPERT_SKEW_EPLB`] hold: the smallest of the
/// "EP32+" deployments LMSYS measured them on.
pub const SKEW_ANCHOR_EP: u32 = 32;
/// Routed experts of the model they were measured on (DeepSeek-V3: 256).
pub const SKEW_ANCHOR_EXPERTS: u32 = 256;

/// How far the busiest of `ep` GPUs, each holding `experts / ep` experts, sits above the mean
/// load in units of one expert's popularity spread: a GPU's load is the sum of its experts'
/// popularities, so its relative spread is the experts' own over `sqrt(experts / ep)`, and the
/// most loaded of `ep` such sums lies `sqrt(2 ln ep)` of those above the mean (the Gaussian
/// maximum). 0 at one GPU.
fn popularity_excess(ep: f64, experts: f64) -> f64 {
    if ep <= 1.0 {
        return 0.0;
    }
    (2.0 * ep * ep.ln() / experts.max(1.0)).sqrt()
}

/// The popularity skew an instance's busiest GPU sees (busiest ÷ mean load): LMSYS's figure
/// at [`SKEW_ANCHOR_EP`] GPUs over [`SKEW_ANCHOR_EXPERTS`] experts — without EPLB, or EPLB's
/// with `ep_num_redundant_experts` spare replicas (each replica splits a hot expert's load:
/// the excess shrinks by the share of experts that can be doubled) — carried to this
/// instance's EP degree and expert count by [`popularity_excess`]: 1 on one GPU, growing with
/// the GPUs the experts are spread over (fewer experts per GPU average less of the
/// popularity out), and never more than `ep` (every pair on one GPU).
pub fn skew(p: &Parallel, experts: u32) -> f64 {
    let at_anchor = if p.enable_eplb {
        let spare = f64::from(p.ep_num_redundant_experts) / f64::from(experts.max(1));
        1.0 + (EXPERT_SKEW_EPLB - 1.0) / (1.0 + spare)
    } else {
        EXPERT_SKEW
    };
    let ep = f64::from(p.ep_size.max(1));
    let scale = popularity_excess(ep, f64::from(experts))
        / popularity_excess(f64::from(SKEW_ANCHOR_EP), f64::from(SKEW_ANCHOR_EXPERTS));
    (1.0 + (at_anchor - 1.0) * scale).min(ep)
}

impl ExpertCost {
    /// The model for `model` (which must have a MoE block) on an instance of `p` over `tp`
    /// GPUs; `None` for a model without routed experts.
    pub fn new(
        gpu: &GpuSpec,
        model: &ModelSpec,
        tp: u32,
        p: &Parallel,
        net: A2aNetwork,
        peak_flops: f64,
    ) -> Option<Self> {
        let moe = model.moe.as_ref()?;
        let h = f64::from(model.hidden_size);
        let layers = f64::from(model.moe_layers);
        let one = 3.0 * h * f64::from(moe.expert_intermediate);
        let ep = f64::from(p.ep_size.max(1));
        Some(Self {
            experts: f64::from(moe.experts),
            active: f64::from(moe.active),
            expert_bytes: one * layers * model.weights.experts.bytes(),
            pair_flops: 2.0 * one * layers,
            layers,
            hidden: h,
            dp: f64::from(p.dp_ranks()),
            gpus: f64::from(tp.max(1)),
            ep,
            experts_per_gpu: f64::from(moe.experts + p.ep_num_redundant_experts) / ep,
            skew: skew(p, moe.experts),
            deepep: p.moe_a2a_backend == A2aBackend::Deepep && p.ep_size > 1,
            tbo: p.enable_two_batch_overlap,
            net,
            peak_flops,
            hbm_bytes_per_s: gpu.hbm_bytes_per_s,
            measured: None,
            measured_a2a: None,
            experts_fallback: None,
        })
    }

    /// The same cost with the experts' kernel time taken from `tables` where one measures this
    /// model's expert shape (hidden, expert width, top-k, experts) in its precision: DeepEP's
    /// MoE tables (`wideep_moe`, one per phase) under DeepEP, the fused-MoE tables split by
    /// EP or TP otherwise. Tables have balanced routing; pdsim's skew ([`skew`]) then sets
    /// the busiest GPU's tokens. Without such a table the roofline stays.
    pub fn with_tables(
        mut self,
        tables: &crate::spec::kernels::KernelTables,
        model: &ModelSpec,
    ) -> Self {
        let Some(moe) = &model.moe else { return self };
        let prec = crate::compute::kernels::compose::Precision::of_experts(model);
        let shape = [
            ("hidden", model.hidden_size.to_string()),
            ("inter", moe.expert_intermediate.to_string()),
            ("topk", moe.active.to_string()),
            ("experts", moe.experts.to_string()),
        ];
        let fits = |t: &&crate::spec::kernels::tables::Table| {
            shape.iter().all(|(k, v)| t.attr(k) == Some(v.as_str()))
        };
        let dtype = prec.moe();
        let experts = f64::from(moe.experts);
        let found = if self.deepep {
            // This model's shape, else DeepEP's MoE of the same width and top-k over another
            // expert count, read at this model's rank shape ([`MeasuredExperts::layer_us`]).
            let width = |t: &&crate::spec::kernels::tables::Table| {
                shape[..3]
                    .iter()
                    .all(|(k, v)| t.attr(k) == Some(v.as_str()))
            };
            let phase = |phase: &str| {
                let all = tables.all("wideep_moe", &[("phase", phase), ("dtype", dtype)]);
                let first = |f: &dyn Fn(&&crate::spec::kernels::tables::Table) -> bool| {
                    all.iter().copied().find(|t| f(t))
                };
                first(&fits).or_else(|| first(&width))
            };
            phase("context")
                .zip(phase("generation"))
                .and_then(|(p, d)| {
                    let of = |t: &crate::spec::kernels::tables::Table| {
                        t.attr("experts")?.parse::<f64>().ok().filter(|e| *e > 0.0)
                    };
                    let table_experts = of(p)?;
                    // A rank holds its share of the physical experts (redundant replicas
                    // included); the table's ranks held `table_experts ÷ e`, none redundant.
                    (of(d)? == table_experts).then_some((
                        p,
                        d,
                        self.ep,
                        Some((table_experts, self.experts_per_gpu * self.ep)),
                    ))
                })
        } else {
            let split = if self.ep > 1.0 { "ep" } else { "tp" };
            let degree = if self.ep > 1.0 { self.ep } else { self.gpus };
            tables
                .all("moe", &[("dtype", dtype), ("split", split)])
                .into_iter()
                .find(fits)
                .map(|t| (t, t, degree, None))
        };
        let what = format!(
            "routed experts (hidden {}, inter {}, top-{} of {}, {dtype}{})",
            model.hidden_size,
            moe.expert_intermediate,
            moe.active,
            moe.experts,
            if self.deepep { ", DeepEP" } else { "" }
        );
        self.experts_fallback = match &found {
            None => Some(format!(
                "{what}: no MoE table of that shape; priced by the roofline (their FLOPs, or their weights' bytes, on the busiest GPU)"
            )),
            Some((p, _, _, Some((table_experts, _)))) if *table_experts != experts => {
                Some(format!(
                    "{what}: no DeepEP MoE table of {} experts; the {}-expert table ({}) read at this instance's rank shape: {:.1} experts and the same token-expert rows a rank, as at EP {:.1} of that model",
                    moe.experts,
                    table_experts,
                    p.attr("version")
                        .map_or("?".to_string(), |v| format!("sglang {v}")),
                    self.experts_per_gpu,
                    table_experts / self.experts_per_gpu,
                ))
            }
            _ => None,
        };
        if let Some((p, d, degree, per_rank)) = found {
            self.measured = Some(MeasuredExperts {
                prefill: p.grid().clone(),
                decode: d.grid().clone(),
                degree,
                per_rank,
                source: format!(
                    "{} {} (sglang {}, {} experts)",
                    p.name,
                    p.attr("kernel").unwrap_or("?"),
                    p.attr("version").unwrap_or("?"),
                    p.attr("experts").unwrap_or("?"),
                ),
            });
        }
        if self.deepep {
            let hidden = model.hidden_size.to_string();
            let topk = moe.active.to_string();
            let legs = |kernel: &str| -> Vec<(Grid, Grid)> {
                let of = |leg: &str| {
                    tables.all(
                        "deepep",
                        &[
                            ("kernel", kernel),
                            ("leg", leg),
                            ("hidden", &hidden),
                            ("topk", &topk),
                        ],
                    )
                };
                // Each version's dispatch and combine tables, newest first (derived so).
                let mut pairs: Vec<_> = of("dispatch")
                    .into_iter()
                    .filter_map(|d| {
                        let v = d.attr("version")?;
                        let c = of("combine")
                            .into_iter()
                            .find(|c| c.attr("version") == Some(v))?;
                        Some((v, d, c))
                    })
                    .collect();
                pairs.sort_by_cached_key(|p| std::cmp::Reverse(version_key(p.0)));
                pairs
                    .into_iter()
                    .map(|(_, d, c)| (d.grid().clone(), c.grid().clone()))
                    .collect()
            };
            let (ll, normal) = (legs("ll"), legs("normal"));
            if !ll.is_empty() || !normal.is_empty() {
                self.measured_a2a = Some(MeasuredA2a { ll, normal });
            }
        }
        self
    }

    /// Expert-parallel GPUs (1 when the experts are TP-sharded).
    pub fn ep_size(&self) -> u32 {
        self.ep as u32
    }

    /// Whether the tokens reach the experts through DeepEP's all-to-all.
    pub fn deepep(&self) -> bool {
        self.deepep
    }

    /// Tokens entering each MoE block when one DP rank carries `tokens`: every DP rank's
    /// (under DP attention without DeepEP the block runs on the gathered batch).
    pub fn block_tokens(&self, tokens: f64) -> f64 {
        tokens * self.dp
    }

    /// Why DeepEP's dispatch and combine are priced analytically on this instance, for the
    /// fallbacks a run lists (`None` without DeepEP, or where [`ExpertCost::measured_scale`]
    /// applies: tables for this hidden width and top-k, on whole 8-GPU nodes).
    pub fn a2a_fallback(&self) -> Option<String> {
        if !self.deepep {
            return None;
        }
        let why = if self.measured_a2a.is_none() {
            format!(
                "no DeepEP table for hidden {} and top-{}",
                self.hidden, self.active
            )
        } else if self.net.gpus_per_node != 8 || self.gpus % 8.0 != 0.0 {
            format!(
                "the tables measure 8-GPU nodes, this instance's NVLink domain is {} GPUs",
                self.net.gpus_per_node
            )
        } else {
            return None;
        };
        Some(format!(
            "DeepEP dispatch and combine: {why}; priced analytically (its bytes over NVLink and the NICs)"
        ))
    }

    /// Why the routed experts are not priced from this model's own MoE table, for the
    /// fallbacks a run lists (`None` where one measures its shape, or without tables).
    pub fn experts_fallback(&self) -> Option<&str> {
        self.experts_fallback.as_deref()
    }

    /// Whether DeepEP's legs take their rate from measured tables.
    pub fn a2a_is_measured(&self) -> bool {
        self.measured_a2a.is_some()
    }

    /// Whether the experts' time comes from measured tables.
    pub fn is_measured(&self) -> bool {
        self.measured.is_some()
    }

    /// Weight bytes of routed experts one GPU holds (with redundant replicas under EP).
    pub fn resident_bytes_per_gpu(&self) -> f64 {
        if self.ep > 1.0 {
            self.expert_bytes * self.experts_per_gpu
        } else {
            self.expert_bytes * self.experts / self.gpus
        }
    }

    /// The MoE layers of one forward in which one DP rank carries `tokens` tokens (prefill
    /// when `prefill`), at compute efficiency `eff` and weight-streaming efficiency `hbm_eff`.
    pub fn time(&self, tokens: f64, prefill: bool, eff: f64, hbm_eff: f64) -> MoeTime {
        if tokens <= 0.0 {
            return MoeTime::default();
        }
        let all_tokens = tokens * self.dp;
        let pairs = all_tokens * self.active;
        let (compute_s, a2a) = if self.ep > 1.0 {
            // The busiest GPU: skewed mean plus the statistical excess of the max of `ep`.
            let mean = pairs / self.ep;
            let busiest = mean * self.skew + (2.0 * mean * self.skew * self.ep.ln()).sqrt();
            if let Some(m) = &self.measured {
                // The balanced table at the tokens that would give every GPU the busiest
                // one's load.
                let grid = if prefill { &m.prefill } else { &m.decode };
                let tokens_eff = all_tokens * busiest / mean.max(f64::MIN_POSITIVE);
                let compute = self.layers * m.layer_us(grid, tokens_eff) * 1e-6;
                return self.finish(compute, self.ep_comm(tokens, prefill));
            }
            let flops = busiest * self.pair_flops;
            let touched = self.experts_per_gpu
                * (1.0 - (1.0 - 1.0 / self.experts_per_gpu.max(1.0)).powf(busiest));
            let weights = touched * self.expert_bytes;
            let compute =
                (flops / (self.peak_flops * eff)).max(weights / (self.hbm_bytes_per_s * hbm_eff));
            (compute, self.ep_comm(tokens, prefill))
        } else if let Some(m) = &self.measured {
            let grid = if prefill { &m.prefill } else { &m.decode };
            let compute = self.layers * m.layer_us(grid, all_tokens) * 1e-6;
            let a2a = A2a {
                latency_s: self.gather_scatter_s(all_tokens),
                ..A2a::default()
            };
            (compute, a2a)
        } else {
            // TP-sharded experts: every GPU computes 1/tp of each touched expert.
            let flops = pairs * self.pair_flops / self.gpus;
            let touched =
                self.experts * (1.0 - (1.0 - self.active / self.experts).powf(all_tokens));
            let weights = touched * self.expert_bytes / self.gpus;
            let compute =
                (flops / (self.peak_flops * eff)).max(weights / (self.hbm_bytes_per_s * hbm_eff));
            let a2a = A2a {
                latency_s: self.gather_scatter_s(all_tokens),
                ..A2a::default()
            };
            (compute, a2a)
        };
        self.finish(compute_s, a2a)
    }

    /// The forward's MoE time from its expert compute and all-to-all legs.
    fn finish(&self, compute_s: f64, a2a: A2a) -> MoeTime {
        let comm_s = a2a.rdma_s.max(a2a.nvlink_s) + a2a.latency_s;
        MoeTime {
            compute_s,
            comm_s,
            total_s: combine(compute_s, comm_s, self.tbo),
            rdma_bytes_per_gpu: a2a.rdma_bytes,
            rdma_s: a2a.rdma_s,
            nvlink_s: a2a.nvlink_s,
            latency_s: a2a.latency_s,
            tbo: self.tbo,
            stages: None,
            a2a_scale: a2a.scale,
        }
    }

    /// Whether the routed experts' outputs are combined by the TP group's all-reduce rather
    /// than by an all-to-all: expert parallelism without DeepEP under TP attention (no DP
    /// attention). Every rank then holds every token (the attention's all-reduce left them
    /// there), runs its own experts on the tokens routed to them, and the MoE block's
    /// all-reduce sums the ranks' partial outputs with the shared expert's — sglang's
    /// `DeepseekV2MoE.forward_normal` (`tensor_model_parallel_all_reduce(final_hidden_states)`
    /// when `tp_size > 1`), as a TP-sharded MoE does. No dispatch or combine runs, so the
    /// body keeps the block's all-reduce ([`crate::compute::StepModel::with_parallel`]).
    pub fn combines_by_allreduce(&self) -> bool {
        self.ep > 1.0 && !self.deepep && self.dp <= 1.0
    }

    /// Whether a decode forward runs sglang's two-micro-batch schedule (two-batch
    /// overlap over DeepEP's low-latency kernels), so that its attention and dense work is
    /// priced inside the MoE layers ([`ExpertCost::decode_time`]).
    pub fn decode_pipelined(&self) -> bool {
        self.tbo && self.deepep
    }

    /// The MoE layers of a decode forward of `tokens` tokens per DP rank, as
    /// [`ExpertCost::time`]; where [`ExpertCost::decode_pipelined`], sglang's two-micro-batch
    /// schedule ([`MicroBatches`]) with `attn_s`, one micro-batch's attention and dense
    /// seconds in the MoE layers, `core_s` of them its attention core: `total_s` then holds
    /// both micro-batches' attention, expert and communication time.
    pub fn decode_time(
        &self,
        tokens: f64,
        eff: f64,
        hbm_eff: f64,
        attn_s: f64,
        core_s: f64,
    ) -> MoeTime {
        let mut t = self.time(tokens, false, eff, hbm_eff);
        if !self.decode_pipelined() || tokens <= 0.0 {
            return t;
        }
        let h = self.hidden;
        let dispatch = h + h / 128.0 * 4.0;
        let mb = MicroBatches {
            attn_s,
            core_s: core_s.min(attn_s),
            experts_s: self.time(tokens / 2.0, false, eff, hbm_eff).compute_s,
            layers: self.layers,
            dispatch_share: dispatch / (dispatch + 2.0 * h),
        };
        t.total_s = mb.pipeline_s(t.rdma_s.max(t.nvlink_s), A2A_LATENCY_S);
        t.stages = Some(mb);
        t
    }

    /// The expert-parallel MoE layers' communication when one DP rank carries `tokens`
    /// tokens: DeepEP's (or the gathered tokens') all-to-all legs, or nothing where the TP
    /// all-reduce combines them ([`ExpertCost::combines_by_allreduce`]: the body prices it).
    fn ep_comm(&self, tokens: f64, prefill: bool) -> A2a {
        if self.combines_by_allreduce() {
            A2a::default()
        } else {
            self.a2a_s(tokens * self.dp / self.gpus, prefill)
        }
    }

    /// DeepEP dispatch and combine for `per_gpu` tokens originating on each GPU, over all MoE
    /// layers: seconds on NVLink and on the NIC (uncontended), the kernel latencies, and the
    /// RDMA bytes per GPU.
    fn a2a_s(&self, per_gpu: f64, prefill: bool) -> A2a {
        let per_node = f64::from(self.net.gpus_per_node).min(self.gpus);
        let nodes = (self.gpus / per_node).max(1.0);
        let mut a = self.legs(per_gpu, prefill, nodes, self.net.nic_bytes_per_s_per_gpu);
        if let Some(scale) = self.measured_scale(per_gpu, prefill, nodes) {
            a.rdma_s *= scale;
            a.nvlink_s *= scale;
            a.scale = Some(scale);
        }
        a
    }

    /// The measured tables' scale on the analytic legs' bytes for `per_gpu` tokens a GPU on
    /// `nodes` nodes ([`MeasuredA2a`]): one call's measured dispatch + combine, less the two
    /// kernel latencies the composition adds, over one call's analytic bytes time on the
    /// tables' own NICs ([`MEASURED_NIC_BYTES_PER_S`] at this fabric's NIC efficiency). A call
    /// carries half the tokens under two-batch overlap. `None` without tables for this
    /// kernel, or where the tables' unit does not hold: they measure nodes of 8 GPUs (an
    /// NVL72 rack, a 4-GPU tray or an instance of part of a node keeps the analytic legs).
    fn measured_scale(&self, per_gpu: f64, prefill: bool, nodes: f64) -> Option<f64> {
        let m = self.measured_a2a.as_ref()?;
        if self.net.gpus_per_node != 8 || self.gpus % 8.0 != 0.0 || per_gpu <= 0.0 {
            return None;
        }
        let grids = if prefill { &m.normal } else { &m.ll };
        // The newest version measuring this many nodes, else the one measuring the most.
        let most = |g: &(Grid, Grid)| g.0.axes[0].points.last().copied().unwrap_or(0.0);
        let pair = grids
            .iter()
            .find(|g| most(g) >= nodes)
            .or_else(|| grids.iter().max_by(|a, b| most(a).total_cmp(&most(b))))?;
        let at = nodes.min(most(pair));
        let (d, c) = pair;
        let calls = if self.tbo { 2.0 } else { 1.0 };
        let n = per_gpu / calls;
        let measured_s = (d.eval(&[at, n]) + c.eval(&[at, n])) * 1e-6;
        // Against the legs on the tables' own fabric: the scale is the kernels' efficiency
        // there, carried to this instance's NICs.
        let a = self.legs(
            n,
            prefill,
            at,
            MEASURED_NIC_BYTES_PER_S * self.net.nic_efficiency,
        );
        let analytic_s = a.rdma_s.max(a.nvlink_s) / self.layers;
        (analytic_s > 0.0).then(|| (measured_s - 2.0 * A2A_LATENCY_S).max(0.0) / analytic_s)
    }

    /// The analytic legs ([`ExpertCost::a2a_s`]) over `nodes` nodes with `nic` bytes/s of
    /// NIC a GPU.
    fn legs(&self, per_gpu: f64, prefill: bool, nodes: f64, nic: f64) -> A2a {
        // FP8 dispatch with per-128 scales, BF16 combine.
        let bytes_per_copy = self.hidden + self.hidden / 128.0 * 4.0 + 2.0 * self.hidden;
        let k = self.active;
        // Copies that leave the node: per destination node (normal) or per expert (LL).
        let remote_share = (nodes - 1.0) / nodes;
        let remote_copies = if prefill {
            // Expected distinct other nodes among k experts spread uniformly over `nodes`.
            (nodes - 1.0) * (1.0 - (1.0 - 1.0 / nodes).powf(k))
        } else {
            k * remote_share
        };
        let local_copies = k * (1.0 - remote_share)
            + if prefill {
                // The NVLink fan-out of a remote token to its experts' GPUs in that node.
                k * remote_share
            } else {
                0.0
            };
        let rdma = per_gpu * remote_copies * bytes_per_copy * self.layers;
        let nvlink = per_gpu * local_copies * bytes_per_copy * self.layers;
        let t_rdma = if nodes > 1.0 {
            rdma / (nic * A2A_RDMA_EFFICIENCY)
        } else {
            0.0
        };
        let t_nv = nvlink / (self.net.nvlink_one_way_bytes_per_s * A2A_NVLINK_EFFICIENCY);
        let latency = if self.deepep { 2.0 } else { 4.0 } * A2A_LATENCY_S * self.layers;
        A2a {
            rdma_s: t_rdma,
            nvlink_s: t_nv,
            latency_s: latency,
            rdma_bytes: if nodes > 1.0 { rdma } else { 0.0 },
            scale: None,
        }
    }

    /// Without EP: all-gather the ranks' tokens and reduce-scatter the result per MoE layer,
    /// the traffic of one ring all-reduce of `tokens × hidden × 2` bytes over the instance.
    fn gather_scatter_s(&self, tokens: f64) -> f64 {
        if self.gpus <= 1.0 {
            return 0.0;
        }
        let n = self.gpus;
        let per_node = f64::from(self.net.gpus_per_node).min(n);
        let msg = tokens * self.hidden * 2.0;
        let nv = 2.0 * (per_node - 1.0) / per_node * msg / self.net.nvlink_one_way_bytes_per_s;
        let nodes = (n / per_node).max(1.0);
        let nic = if nodes > 1.0 {
            2.0 * (nodes - 1.0) / nodes * msg / per_node / self.net.nic_bytes_per_s_per_gpu
        } else {
            0.0
        };
        self.layers * (nv + nic + 2.0 * A2A_LATENCY_S)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{gpu_preset, preset};

    fn lmsys(ep: u32, eplb: bool, tbo: bool) -> ExpertCost {
        let g = gpu_preset("h100-sxm").unwrap();
        let p = Parallel {
            dp_size: ep,
            enable_dp_attention: true,
            ep_size: ep,
            moe_a2a_backend: A2aBackend::Deepep,
            ep_num_redundant_experts: 32,
            enable_eplb: eplb,
            enable_two_batch_overlap: tbo,
            ..Parallel::default()
        };
        let net = A2aNetwork {
            gpus_per_node: 8,
            nic_bytes_per_s_per_gpu: 50e9,
            nvlink_one_way_bytes_per_s: 225e9,
            nic_efficiency: 1.0,
        };
        ExpertCost::new(&g, &preset("deepseek-v3").unwrap(), ep, &p, net, 1979e12).unwrap()
    }

    /// Expert parallelism without DeepEP under TP attention runs no all-to-all: sglang's
    /// `DeepseekV2MoE.forward_normal` combines the ranks' experts with the block's TP
    /// all-reduce, which the step's body keeps. With DeepEP, or with DP attention (the tokens
    /// gathered across DP ranks), the expert model carries the communication and the body
    /// drops the block's all-reduce.
    #[test]
    fn ep_without_deepep_under_tp_attention_combines_by_the_all_reduce() {
        let g = gpu_preset("b200").unwrap();
        let model = preset("deepseek-v3").unwrap();
        let net = A2aNetwork {
            gpus_per_node: 8,
            nic_bytes_per_s_per_gpu: 50e9,
            nvlink_one_way_bytes_per_s: 900e9,
            nic_efficiency: 1.0,
        };
        let tp_ep = Parallel {
            ep_size: 8,
            ..Parallel::default()
        };
        let deepep = Parallel {
            moe_a2a_backend: A2aBackend::Deepep,
            ..tp_ep.clone()
        };
        let dp = Parallel {
            dp_size: 8,
            enable_dp_attention: true,
            ..tp_ep.clone()
        };
        let cost = |p: &Parallel| ExpertCost::new(&g, &model, 8, p, net.clone(), 4500e12).unwrap();
        let plain = cost(&tp_ep);
        assert!(plain.combines_by_allreduce());
        assert!(!cost(&deepep).combines_by_allreduce());
        assert!(!cost(&dp).combines_by_allreduce());
        for tokens in [1.0, 32.0, 4096.0] {
            let t = plain.time(tokens, tokens > 100.0, 0.7, 0.7);
            assert_eq!(
                (t.comm_s, t.rdma_bytes_per_gpu),
                (0.0, 0.0),
                "{tokens} tokens"
            );
            assert!(t.compute_s > 0.0 && t.total_s == t.compute_s);
            assert!(cost(&deepep).time(tokens, false, 0.7, 0.7).comm_s > 0.0);
        }
        // The step: the TP all-reduce of every MoE layer stays in the body (61 attention + 58
        // MoE blocks + 3 dense MLPs' all-reduces), where DeepEP's step drops the MoE ones.
        let params = crate::spec::calibration::SGLANG_2025;
        let step = |p: &Parallel| {
            crate::compute::StepModel::with_parallel(
                &g,
                &model,
                8,
                2,
                params.clone(),
                None,
                Some(cost(p)),
            )
        };
        let (kept, dropped) = (step(&tp_ep), step(&deepep));
        assert!(kept.decode_ns(1, 1000) > 0 && dropped.decode_ns(1, 1000) > 0);
        assert_eq!(kept.allreduce_count() - dropped.allreduce_count(), 58.0);
    }

    #[test]
    fn eplb_and_redundant_experts_reduce_the_skew() {
        let mut p = Parallel {
            ep_size: 32,
            ..Parallel::default()
        };
        assert_eq!(skew(&p, 256), EXPERT_SKEW);
        p.enable_eplb = true;
        assert_eq!(skew(&p, 256), EXPERT_SKEW_EPLB);
        p.ep_num_redundant_experts = 32;
        assert!(skew(&p, 256) < EXPERT_SKEW_EPLB && skew(&p, 256) > 1.0);
        let (a, b) = (lmsys(32, false, false), lmsys(32, true, false));
        assert!(
            b.time(4096.0, true, 0.4, 0.7).compute_s < a.time(4096.0, true, 0.4, 0.7).compute_s
        );
    }

    /// The skew is LMSYS's at EP32 over 256 experts and follows the EP degree from there,
    /// by hand: the busiest GPU's excess over the mean scales with `sqrt(2·ep·ln ep / E)`, which
    /// is 0.930825 at the anchor, 0.104069 at EP2, 0.360507 at EP8 and 1.551008 at EP72.
    #[test]
    fn the_skew_follows_the_ep_degree_from_lmsys_ep32() {
        let at = |ep: u32, eplb: bool, experts: u32| {
            skew(
                &Parallel {
                    ep_size: ep,
                    enable_eplb: eplb,
                    ..Parallel::default()
                },
                experts,
            )
        };
        assert_eq!(at(1, false, 256), 1.0);
        assert!((at(2, false, 256) - (1.0 + 0.7 * 0.104069 / 0.930825)).abs() < 1e-5);
        assert!((at(8, false, 256) - 1.271111).abs() < 1e-5);
        assert!((at(72, false, 256) - 2.166389).abs() < 1e-5);
        assert!((at(8, true, 256) - (1.0 + 0.15 * 0.360507 / 0.930825)).abs() < 1e-5);
        // Fewer experts per GPU average less popularity out: Qwen3's 128 at EP8 sit between
        // DeepSeek's 256 at EP8 and at EP16.
        assert!(at(8, false, 128) > at(8, false, 256) && at(8, false, 128) < at(16, false, 256));
        // Rising with the EP degree, never above it.
        let mut last = 1.0;
        for ep in 2..=256 {
            let s = at(ep, false, 256);
            assert!(s > last && s <= f64::from(ep), "EP{ep}: {s}");
            last = s;
        }
        assert_eq!(
            at(2, false, 1),
            2.0,
            "one expert: all of it on one GPU at most"
        );
    }

    #[test]
    fn experts_are_sharded_over_ep_with_redundant_replicas() {
        // DeepSeek-V3: 58 layers × 3 × 7168 × 2048 × 1 B = 2.554 GB per expert index;
        // (256 + 32) / 32 = 9 experts per GPU.
        let c = lmsys(32, true, true);
        let one = 58.0 * 3.0 * 7168.0 * 2048.0;
        assert!((c.resident_bytes_per_gpu() / (9.0 * one) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn two_batch_overlap_hides_the_shorter_side() {
        let (plain, tbo) = (lmsys(72, true, false), lmsys(72, true, true));
        let a = plain.time(256.0, false, 0.5, 0.7);
        let b = tbo.time(256.0, false, 0.5, 0.7);
        assert!((a.total_s - (a.compute_s + a.comm_s)).abs() < 1e-15);
        assert!(b.total_s < a.total_s);
        assert!(
            (b.total_s - (b.compute_s.max(b.comm_s) + b.compute_s.min(b.comm_s) / 2.0)).abs()
                < 1e-15
        );
    }

    /// DeepEP's low-latency table (`docs/legacy.md`, "Low-latency kernels with pure RDMA": H800,
    /// CX7 400 Gb/s, 128 tokens per rank, hidden 7168, top-8, FP8 dispatch, BF16 combine):
    /// dispatch and combine latency per call at EP32–EP256 against one layer of pdsim's
    /// low-latency legs (`A2A_RDMA_EFFICIENCY` and `A2A_LATENCY_S` were borrowed from the same
    /// README: the latency from its EP8 row, the efficiency from the normal kernels' table, so
    /// these rows check the composition, not a fit). pdsim sends a GPU's copies for its own
    /// node over NVLink; V1's kernels sent every copy over RDMA, so pdsim may be a little
    /// faster (held within 15 %).
    #[test]
    fn low_latency_legs_match_deepeps_table() {
        for (ep, dispatch_us, combine_us) in [
            (32u32, 155.0, 273.0),
            (64, 173.0, 314.0),
            (128, 192.0, 369.0),
            (256, 194.0, 360.0),
        ] {
            let c = lmsys(ep, true, true);
            let t = c.time(128.0, false, 0.5, 0.7);
            let per_layer = t.rdma_s.max(t.nvlink_s) / 58.0;
            let h = 7168.0;
            let share = (h + h / 128.0 * 4.0) / (h + h / 128.0 * 4.0 + 2.0 * h);
            let d = (per_layer * share + A2A_LATENCY_S) * 1e6;
            let m = (per_layer * (1.0 - share) + A2A_LATENCY_S) * 1e6;
            println!(
                "EP{ep}: dispatch {d:.0} us (DeepEP {dispatch_us}), combine {m:.0} us (DeepEP {combine_us})"
            );
            assert!(
                (d / dispatch_us - 1.0).abs() < 0.15,
                "EP{ep} dispatch {d:.0} us"
            );
            assert!(
                (m / combine_us - 1.0).abs() < 0.15,
                "EP{ep} combine {m:.0} us"
            );
        }
    }

    #[test]
    fn the_decode_pipeline_pairs_each_micro_batchs_comm_with_the_others_compute() {
        let c = lmsys(72, true, true);
        assert!(c.decode_pipelined() && !lmsys(72, true, false).decode_pipelined());
        let (attn, core) = (0.015, 0.009);
        let t = c.decode_time(256.0, 0.5, 0.7, attn, core);
        let mb = t.stages.expect("pipelined");
        // Hand computation of sglang's ten stages a layer (A.D, B.P, A.E, B.C, A.W, B.D, A.P,
        // B.E, A.C, B.W): a dispatch under the projections, a combine under the other
        // micro-batch's attention core, the experts after their own dispatch.
        let l = 58.0;
        let (a, cc, e) = (attn / l, core / l, mb.experts_s / l);
        let per = t.rdma_s.max(t.nvlink_s) / 2.0 / l;
        let d = per * mb.dispatch_share + A2A_LATENCY_S;
        let m = per * (1.0 - mb.dispatch_share) + A2A_LATENCY_S;
        let want = l * 2.0 * ((a - cc).max(d) + e + cc.max(m));
        assert!((t.total_s - want).abs() < 1e-12, "{} vs {want}", t.total_s);
        // The same slots walked one by one on the compute stream, the legs in flight beside it.
        // Each half: one micro-batch's D, E, W against the other's P and C.
        let mut now = 0.0;
        for _ in 0..2 {
            let sent = now; // D: dispatch sent, then its shared experts (part of a − c)
            now += (a - cc) / 2.0;
            now += (a - cc) / 2.0; // the other's P: output and projections
            now = f64::max(now, sent + d) + e; // E: dispatch received, experts, combine sent
            let combined = now;
            now += cc; // the other's C: attention core
            now = f64::max(now, combined + m); // W: combine received
        }
        assert!((now * l - want).abs() < 1e-12, "{} vs {want}", now * l);
        // Never below either resource's busy time, never above running them in sequence.
        let compute = 2.0 * (attn + mb.experts_s);
        let comm = t.rdma_s.max(t.nvlink_s) + 4.0 * l * A2A_LATENCY_S;
        assert!(t.total_s >= compute.max(comm) - 1e-12);
        assert!(t.total_s <= compute + comm + 1e-12);
        // A micro-batch's experts never hide under its own dispatch: more than the four-part
        // picture that paired every leg with a whole compute part of the other.
        let four = l * (a.max(d) + e.max(d) + e.max(m) + a.max(m));
        assert!(t.total_s > four, "{} vs {four}", t.total_s);
        // Half a batch's experts cost more than half the batch's (the busiest GPU's excess
        // over the mean grows slower than the mean).
        assert!(mb.experts_s > t.compute_s / 2.0 && mb.experts_s < t.compute_s);
        // The fabric's time for the NIC leg re-prices the pipeline; uncontended it is the same.
        assert!((t.total_with_rdma_s(t.rdma_s) - t.total_s).abs() < 1e-15);
        assert!(t.total_with_rdma_s(2.0 * t.rdma_s) > t.total_s);
        // Prefill and non-pipelined decode keep the `max + min / 2` composition.
        let plain = lmsys(72, true, false).decode_time(256.0, 0.5, 0.7, attn, core);
        assert!(plain.stages.is_none());
    }

    #[test]
    fn the_fabric_time_of_the_nic_leg_re_prices_the_moe_layers() {
        for tbo in [false, true] {
            let t = lmsys(72, true, tbo).time(256.0, false, 0.5, 0.7);
            assert!(t.rdma_s > 0.0 && t.rdma_s > t.nvlink_s);
            // The uncontended time gives back the analytic total.
            assert!((t.total_with_rdma_s(t.rdma_s) - t.total_s).abs() < 1e-15);
            // Twice the NIC time: communication grows by exactly that much.
            let comm2 = 2.0 * t.rdma_s + t.latency_s;
            let want = if tbo {
                t.compute_s.max(comm2) + t.compute_s.min(comm2) / 2.0
            } else {
                t.compute_s + comm2
            };
            assert!((t.total_with_rdma_s(2.0 * t.rdma_s) - want).abs() < 1e-15);
            // Faster than NVLink on the NIC: NVLink binds.
            assert!((t.total_with_rdma_s(0.0) - t.total_with_rdma_s(t.nvlink_s)).abs() < 1e-15);
        }
    }

    #[test]
    fn deepep_traffic_crosses_the_nics_only_between_nodes() {
        // Hand computation, decode (low-latency: a copy per expert), EP72 over 9 nodes:
        // 256 tokens per GPU × 8 × 8/9 remote × (7168 + 224 + 14336) B × 58 layers.
        let c = lmsys(72, true, true);
        let t = c.time(256.0, false, 0.5, 0.7);
        let want = 256.0 * 8.0 * (8.0 / 9.0) * (7168.0 + 224.0 + 14336.0) * 58.0;
        assert!(
            (t.rdma_bytes_per_gpu / want - 1.0).abs() < 1e-12,
            "{}",
            t.rdma_bytes_per_gpu
        );
        // One node: nothing on the NICs.
        let g = gpu_preset("h100-sxm").unwrap();
        let p = Parallel {
            dp_size: 8,
            enable_dp_attention: true,
            ep_size: 8,
            moe_a2a_backend: A2aBackend::Deepep,
            ..Parallel::default()
        };
        let net = A2aNetwork {
            gpus_per_node: 8,
            nic_bytes_per_s_per_gpu: 50e9,
            nvlink_one_way_bytes_per_s: 225e9,
            nic_efficiency: 1.0,
        };
        let one =
            ExpertCost::new(&g, &preset("deepseek-v3").unwrap(), 8, &p, net, 1979e12).unwrap();
        assert_eq!(one.time(256.0, false, 0.5, 0.7).rdma_bytes_per_gpu, 0.0);
    }
}

#[cfg(test)]
mod measured_legs {
    use super::*;
    use crate::spec::{gpu_preset, preset};

    /// DeepSeek-V3 over `ep / 8` H100 nodes with DP attention and DeepEP, the H100 tables'
    /// DeepEP legs attached or not, on nodes of `per_node` GPUs with 400 Gb/s a GPU.
    fn cost(ep: u32, tbo: bool, tables: bool, per_node: u32) -> ExpertCost {
        cost_on(ep, tbo, tables, per_node, 50e9)
    }

    fn cost_on(ep: u32, tbo: bool, tables: bool, per_node: u32, nic: f64) -> ExpertCost {
        let g = gpu_preset("h100-sxm").unwrap();
        let model = preset("deepseek-v3").unwrap();
        let p = Parallel {
            dp_size: ep,
            enable_dp_attention: true,
            ep_size: ep,
            moe_a2a_backend: A2aBackend::Deepep,
            enable_two_batch_overlap: tbo,
            ..Parallel::default()
        };
        let net = A2aNetwork {
            gpus_per_node: per_node,
            nic_bytes_per_s_per_gpu: nic,
            nvlink_one_way_bytes_per_s: 450e9,
            nic_efficiency: 1.0,
        };
        let c = ExpertCost::new(&g, &model, ep, &p, net, 989e12).unwrap();
        if tables {
            let t = crate::spec::kernels::builtin::tables("h100-sxm").unwrap();
            c.with_tables(&t, &model)
        } else {
            c
        }
    }

    /// A run lists DeepEP's legs among the analytic fallbacks where the tables do not price
    /// them: without tables, or on an NVLink domain other than the tables' 8-GPU node (an
    /// NVL72 rack); not where they do, and not without DeepEP.
    #[test]
    fn analytic_legs_are_named_as_a_fallback() {
        assert_eq!(cost(32, true, true, 8).a2a_fallback(), None);
        let none = cost(32, true, false, 8).a2a_fallback().expect("no tables");
        assert!(
            none.contains("no DeepEP table for hidden 7168 and top-8"),
            "{none}"
        );
        let rack = cost(72, true, true, 72).a2a_fallback().expect("a rack");
        assert!(rack.contains("NVLink domain is 72 GPUs"), "{rack}");
        let g = gpu_preset("h100-sxm").unwrap();
        let p = Parallel {
            ep_size: 8,
            ..Parallel::default()
        };
        let net = A2aNetwork {
            gpus_per_node: 8,
            nic_bytes_per_s_per_gpu: 50e9,
            nvlink_one_way_bytes_per_s: 450e9,
            nic_efficiency: 1.0,
        };
        let plain = ExpertCost::new(&g, &preset("deepseek-v3").unwrap(), 8, &p, net, 989e12);
        assert_eq!(plain.expect("EP8").a2a_fallback(), None);
    }

    /// One call of the measured grid points takes the measured dispatch + combine: EP32 (4
    /// nodes), 128 tokens a rank, the low-latency kernels measure 143.0 + 263.3 µs and the
    /// normal ones 106.9 + 217.5 µs (`h100_sxm/comm/sglang/0.5.6.post2`); EP8 (one node, the
    /// 0.5.12 table) 36.7 + 67.0 µs.
    #[test]
    fn a_call_at_a_measured_point_takes_the_measured_time() {
        for (ep, prefill, want_us) in [
            (32, false, 143.0 + 263.3),
            (32, true, 106.9 + 217.5),
            (8, false, 36.7 + 67.0),
        ] {
            let c = cost(ep, false, true, 8);
            assert!(c.a2a_is_measured());
            let t = c.time(128.0, prefill, 0.5, 0.7);
            let per_layer_us = t.comm_s / 58.0 * 1e6;
            assert!(
                (per_layer_us / want_us - 1.0).abs() < 2e-3,
                "EP{ep} prefill {prefill}: {per_layer_us:.1} µs, measured {want_us:.1}"
            );
            assert!(t.a2a_scale.is_some());
        }
    }

    /// The tables were measured on 400 Gb/s a GPU: on 200 Gb/s NICs the scale is the same
    /// (the kernels' efficiency there), so the NIC leg takes twice as long, not the measured
    /// 400 Gb/s time.
    #[test]
    fn the_scale_is_taken_on_the_tables_own_nics() {
        let at = |nic: f64| cost_on(32, false, true, 8, nic).time(128.0, false, 0.5, 0.7);
        let (fast, slow) = (at(50e9), at(25e9));
        assert_eq!(fast.a2a_scale, slow.a2a_scale);
        assert!((slow.rdma_s / fast.rdma_s - 2.0).abs() < 1e-9);
    }

    /// Past the tables' eight nodes the scale at eight carries over; under two-batch overlap a
    /// call carries half the tokens; without tables, or on nodes that are not of 8 GPUs (an
    /// NVL72 domain), the legs stay analytic and carry no scale.
    #[test]
    fn beyond_the_tables_the_scale_carries_and_elsewhere_the_legs_stay_analytic() {
        let at = |ep: u32, tokens: f64, tbo: bool| {
            let m = cost(ep, tbo, true, 8).time(tokens, false, 0.5, 0.7);
            let a = cost(ep, tbo, false, 8).time(tokens, false, 0.5, 0.7);
            (m.a2a_scale.unwrap(), m.rdma_s / a.rdma_s)
        };
        let (s64, r64) = at(64, 256.0, false);
        let (s96, r96) = at(96, 256.0, false);
        assert!(
            (s64 - s96).abs() < 1e-12 && (r64 - s64).abs() < 1e-12 && (r96 - s96).abs() < 1e-12
        );
        // Two micro-batches of 128: the scale of a 128-token call.
        assert!((at(64, 256.0, true).0 - at(64, 128.0, false).0).abs() < 1e-12);
        let plain = cost(64, false, false, 8).time(256.0, false, 0.5, 0.7);
        assert_eq!(plain.a2a_scale, None);
        let rack = cost(64, false, true, 72).time(256.0, false, 0.5, 0.7);
        let rack_plain = cost(64, false, false, 72).time(256.0, false, 0.5, 0.7);
        // (The experts' own tables still apply: only the legs are compared.)
        assert_eq!(rack.a2a_scale, None);
        assert_eq!(
            (rack.comm_s, rack.rdma_s, rack.nvlink_s),
            (rack_plain.comm_s, rack_plain.rdma_s, rack_plain.nvlink_s)
        );
    }
}

#[cfg(test)]
mod rank_shape {
    use super::*;
    use crate::spec::kernels::grid::{Axis, Grid};
    use crate::spec::{gpu_preset, preset};

    /// A DeepEP MoE table of a 256-expert, top-8 model whose every point is a function of the
    /// shape one rank runs: `alpha` µs per expert it holds (`256 ÷ ep`, the weights it
    /// streams) plus `beta` µs per token-expert row it receives (`tokens × 8 ÷ ep`).
    fn rank_table(alpha: f64, beta: f64) -> Grid {
        let eps = [8.0, 16.0, 32.0, 64.0, 128.0];
        let tokens = [1024.0, 8192.0, 65536.0, 524288.0, 4194304.0];
        let values = eps
            .iter()
            .flat_map(|&e| tokens.map(|t| alpha * 256.0 / e + beta * t * 8.0 / e))
            .collect();
        let axis = |name: &str, p: &[f64]| Axis {
            name: name.into(),
            points: p.to_vec(),
        };
        Grid::new(vec![axis("ep", &eps), axis("tokens", &tokens)], values).unwrap()
    }

    fn measured(grid: &Grid, model_experts: f64, ep: f64) -> MeasuredExperts {
        MeasuredExperts {
            prefill: grid.clone(),
            decode: grid.clone(),
            degree: ep,
            per_rank: Some((256.0, model_experts)),
            source: String::new(),
        }
    }

    /// Where the table's time is a function of a rank's shape, reading it by that shape is
    /// exact at any expert count (physical: redundant replicas included) and EP degree: 384 experts at EP32 (12 a rank, as 256 at
    /// EP 21.3, between the table's 16 and 32) and at EP96 (4 a rank, as 256 at EP 64, a
    /// measured degree), and 256 experts at EP72 (between 64 and 128). Reading the same
    /// total tokens at the EP degree, linearly between degrees, is not: a rank's rows go as
    /// 1/ep, which a line between EP64 and EP128 overstates at EP72.
    #[test]
    fn a_deepep_table_is_read_at_the_ranks_shape() {
        let (alpha, beta) = (40.0, 0.05);
        let g = rank_table(alpha, beta);
        for (experts, ep, tokens) in [
            (384.0, 32.0, 524288.0 * 1.12),
            (384.0, 96.0, 46080.0),
            (256.0, 72.0, 18432.0),
            (256.0, 32.0, 262144.0),
            (160.0, 20.0, 30000.0),
            // Physical experts, redundant replicas included: DeepSeek-V3 at EP72 with 32
            // (4 a rank: the table's EP64 row), Kimi K2 at EP96 with 96 (5 a rank).
            (288.0, 72.0, 18432.0),
            (480.0, 96.0, 46080.0),
        ] {
            let want = alpha * experts / ep + beta * tokens * 8.0 / ep;
            let got = measured(&g, experts, ep).layer_us(&g, tokens);
            assert!(
                (got - want).abs() < 1e-9 * want,
                "{experts} experts at EP{ep}, {tokens} tokens: {got} µs, the rank's shape {want} µs"
            );
        }
        // By hand at 384 experts, EP32, 524,288 tokens: 12 experts and 131,072 rows a rank,
        // 40 × 12 + 0.05 × 131,072 = 7,033.6 µs. The old reading at (32, 524,288) takes the
        // 256-expert rank's 8 experts: 40 × 8 + 6,553.6 = 6,873.6 µs.
        let k2 = measured(&g, 384.0, 32.0).layer_us(&g, 524288.0);
        assert!((k2 - 7033.6).abs() < 1e-6, "{k2}");
        assert!((g.eval(&[32.0, 524288.0]) - 6873.6).abs() < 1e-6);
        // At EP72 the old reading (linear in the degree at the same total tokens) overstated
        // the rank's rows: 18,432 tokens → 2,048 rows a rank; between EP64's 2,304 and
        // EP128's 1,152 at w = 8/64 it read 2,160.
        let old = g.eval(&[72.0, 18432.0]);
        let new = measured(&g, 256.0, 72.0).layer_us(&g, 18432.0);
        assert!(old > new * 1.04, "old {old} new {new}");
        // Past the table's degrees: the nearest degree at the same rows a rank (EP256 of a
        // 256-expert model reads EP128's row, its 2 experts a rank, at EP256's rows a rank).
        let far = measured(&g, 256.0, 256.0).layer_us(&g, 524288.0);
        let rows = 524288.0 * 8.0 / 256.0;
        assert!((far - (alpha * 2.0 + beta * rows)).abs() < 1e-6, "{far}");
    }

    /// Kimi K2 (384 experts, DeepSeek-V3's width and top-k) behind DeepEP on H200 takes
    /// DeepEP's measured MoE at its rank shape, and the run says which table it read; a
    /// model whose width no DeepEP table has is priced by the roofline, said so too.
    #[test]
    fn a_model_without_its_own_deepep_table_names_what_priced_its_experts() {
        let g = gpu_preset("h200").unwrap();
        let t = crate::spec::kernels::builtin::tables("h200").unwrap();
        let p = |ep: u32| Parallel {
            dp_size: ep,
            enable_dp_attention: true,
            ep_size: ep,
            moe_a2a_backend: A2aBackend::Deepep,
            enable_eplb: true,
            ..Parallel::default()
        };
        let net = A2aNetwork {
            gpus_per_node: 8,
            nic_bytes_per_s_per_gpu: 50e9,
            nvlink_one_way_bytes_per_s: 450e9,
            nic_efficiency: 1.0,
        };
        let cost = |model: &str, ep: u32| {
            let m = preset(model).unwrap();
            ExpertCost::new(&g, &m, ep, &p(ep), net.clone(), 989e12)
                .unwrap()
                .with_tables(&t, &m)
        };
        let k2 = cost("kimi-k2", 32);
        assert!(k2.is_measured());
        let why = k2.experts_fallback().expect("K2 has no table of its own");
        assert!(
            why.contains("no DeepEP MoE table of 384 experts")
                && why.contains("12.0 experts")
                && why.contains("EP 21.3"),
            "{why}"
        );
        let v3 = cost("deepseek-v3", 32);
        assert!(v3.is_measured() && v3.experts_fallback().is_none());
        // K2's rank holds 12 experts: halfway in experts a rank between V3's EP16 (16) and
        // EP32 (8), so at the same token-expert rows a rank its layer is the mean of those
        // two measured rows (the table itself is not monotone in the experts a rank: at
        // 131,072 rows a rank EP16 reads faster than EP32).
        let layer = |c: &ExpertCost, tokens: f64| {
            let m = c.measured.as_ref().unwrap();
            m.layer_us(&m.prefill, tokens)
        };
        let tokens = 32.0 * 16384.0;
        let (k, v32) = (layer(&k2, tokens), layer(&v3, tokens));
        let v16 = layer(&cost("deepseek-v3", 16), tokens / 2.0);
        assert!(
            (k - (v16 + v32) / 2.0).abs() < 1e-9 * k,
            "K2 {k} µs, V3 at EP32 {v32} µs, at EP16 {v16} µs"
        );
        let qwen = cost("qwen3-235b-a22b", 16);
        assert!(!qwen.is_measured());
        let why = qwen
            .experts_fallback()
            .expect("no DeepEP table of Qwen3's width");
        assert!(why.contains("priced by the roofline"), "{why}");
    }
}
