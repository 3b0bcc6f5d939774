//! `summary.json` (docs/architecture.md §4): counts, errors, latencies, throughput over the whole run and
//! over the arrival window, the `[slo]` verdict with each target's value, per-pool utilisation
//! and what bound each pool, and the cluster's size and cost.
//!
//! A figure with no data behind it is `None` (JSON `null`, a blank CSV cell), never 0: an
//! all-failed run has no TTFT, not a TTFT of 0 ms.

use serde::{Deserialize, Serialize};

use super::{Collector, Counts, ErrorCount, Latencies, Stats};
use crate::config::{Role, Scenario};
use crate::engine::{NS_PER_S, Nanos};

/// Throughput over the whole simulated span (arrivals and the drain tail) and, apart, over the
/// arrival window, which is what a server sustains in steady state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// Finished (completed + corrupted) requests per simulated second, whole run.
    pub requests_per_s: f64,
    /// Prompt tokens of finished requests per second, whole run.
    pub input_tokens_per_s: f64,
    /// Output tokens of finished requests per second, whole run.
    pub output_tokens_per_s: f64,
    /// The same over the arrival window.
    pub arrival_window: WindowThroughput,
}

/// Throughput over the arrival window `[0, end_s]`: from the start until arrivals stop
/// (`run.duration_s`, or the last arrival when `max_requests` or the trace ended them first).
/// The drain tail after it, when the cluster empties, would dilute every rate.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WindowThroughput {
    /// End of the window, simulated seconds.
    pub end_s: f64,
    /// Requests that finished (completed or corrupted) inside the window, per second.
    pub requests_per_s: f64,
    /// Prompt tokens whose first token came inside the window, per second.
    pub input_tokens_per_s: f64,
    /// Tokens generated inside the window (each decode step's batch, each prefill's first
    /// token), per second.
    pub output_tokens_per_s: f64,
    /// Requests that met every per-request SLO threshold and finished inside the window, per
    /// second.
    pub goodput_requests_per_s: f64,
}

pub use super::slo::{SloSummary, SloTarget};

/// Transfer totals.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TransferSummary {
    /// `--disaggregation-transfer-backend` when it is not `mooncake` (left out then, so runs
    /// that do not set it keep their bytes; docs/sglang-pd.md §26.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// KV and state bytes moved.
    pub bytes: u64,
    /// RDMA writes posted.
    pub writes: u64,
    /// Achieved bandwidth per Mooncake batch (one prefill rank → one decode rank, latency
    /// included), GB/s.
    pub bandwidth_gbps: Stats,
    /// Bytes sent again after packet loss.
    pub retransmitted_bytes: u64,
    /// RDMA writes per request and transfer time early and late in the run (absent without
    /// transfers: a colocated run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmentation: Option<super::fragmentation::FragmentationSummary>,
    /// DeepEP all-to-all on the fabric, per pool that ran some (`sglang::a2a`); left out of
    /// runs without any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a: Vec<A2aSummary>,
}

/// What sharing the NICs with KV transfers cost the DeepEP all-to-all of EP instances that
/// span nodes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct A2aSummary {
    /// The pool.
    pub pool: String,
    /// Forwards whose inter-node all-to-all ran as fabric flows.
    pub forwards: u64,
    /// Mean time of a forward's inter-node all-to-all on the fabric (contention included), ms.
    pub fabric_ms_mean: f64,
    /// The same at DeepEP's uncontended NIC rate, ms.
    pub uncontended_ms_mean: f64,
    /// `fabric / uncontended − 1`: how much longer contention made it.
    pub slowdown: f64,
}

/// Simulation totals.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SimSummary {
    /// Events handled.
    pub events: u64,
    /// Simulated span, seconds.
    pub simulated_s: f64,
    /// Whether the run stopped at `duration_s + drain_timeout_s` with requests in flight.
    pub cut_by_drain_timeout: bool,
}

/// What sgl-model-gateway's `cache_aware` policy decided on one side of the router.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RouterDecisions {
    /// Routed by prefix affinity (balanced, match rate above `cache_threshold`).
    pub affinity: u64,
    /// Routed to the least loaded instance because load was imbalanced.
    pub imbalanced: u64,
    /// Routed to the least loaded instance because the match was at or below the threshold.
    pub low_match: u64,
    /// The instance the match named was out of rotation: the first instance in rotation.
    pub fallback: u64,
    /// Largest `max − min` outstanding requests over the side's instances seen at a pick.
    pub peak_load_gap: u32,
    /// Instance holds dropped from the router's tree by its periodic eviction.
    pub evicted: u64,
}

/// `summary.json` `router`: `cache_aware`'s decisions per side that uses it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RouterSummary {
    /// The prefill (or colocated) side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<RouterDecisions>,
    /// The decode side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<RouterDecisions>,
}

/// Prefix-cache figures of one prefill instance.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CacheStats {
    /// Global instance index.
    pub instance: u32,
    /// Pool name.
    pub pool: String,
    /// Prompts looked up (those with prefix information).
    pub lookups: u64,
    /// Prompt tokens found cached.
    pub hit_tokens: u64,
    /// Prompt tokens looked up.
    pub input_tokens: u64,
    /// `hit_tokens / input_tokens` (0 with no lookup).
    pub hit_rate: f64,
    /// HiCache's tiers (absent without `enable_hierarchical_cache`); `hit_tokens` is their sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tiers: Option<TierStats>,
}

/// One prefill instance's HiCache tiers.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TierStats {
    /// Prompt tokens found in the GPU radix cache.
    pub device_hit_tokens: u64,
    /// Prompt tokens found only in host memory.
    pub host_hit_tokens: u64,
    /// Prompt tokens found only in the store, prefetched in time.
    pub store_hit_tokens: u64,
    /// Bytes loaded host → GPU over PCIe (host and store hits).
    pub host_to_gpu_bytes: u64,
    /// Bytes prefetched from the store by RDMA reads.
    pub store_read_bytes: u64,
    /// Bytes this instance's write-backs offered to the store.
    pub store_write_bytes: u64,
}

/// `summary.json` `speculative[]`: one pool that runs speculative decoding
/// (`docs/sglang-pd.md` §19). Decode pools report the acceptance and the step's time by part;
/// prefill pools the draft's prefill share.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpecSummary {
    /// The pool.
    pub pool: String,
    /// `prefill` or `decode`.
    pub role: String,
    /// `--speculative-algorithm` as given (`eagle`, `eagle3`, `nextn`).
    pub algorithm: String,
    /// `--speculative-num-steps`, `--speculative-eagle-topk`, `--speculative-num-draft-tokens`
    /// as resolved (auto-chosen or adjusted as sglang does).
    pub num_steps: u32,
    /// See `num_steps`.
    pub eagle_topk: u32,
    /// See `num_steps`.
    pub num_draft_tokens: u32,
    /// The acceptance model's per-position rate α (decode pools).
    pub accept_rate_model: Option<f64>,
    /// The accept length the model predicts, `(1 − α^(k+1)) / (1 − α)` (decode pools).
    pub accept_length_model: Option<f64>,
    /// sglang's "accept len": tokens emitted per request per step, the bonus token included
    /// (`null` without a step).
    pub accept_length_mean: Option<f64>,
    /// sglang's `spec_accept_rate`: accepted drafts over proposed (`num_draft_tokens − 1` a
    /// request a step).
    pub accept_rate: Option<f64>,
    /// Decode steps run (decode pools).
    pub steps: u64,
    /// Shares of the decode steps' time: draft forwards, verify, draft extend, host (decode
    /// pools; `null` without a step).
    pub time_share: Option<SpecTimeShare>,
    /// Share of the prefill forwards' time spent in the draft's prefill (prefill pools).
    pub draft_prefill_share: Option<f64>,
}

/// Where a speculative decode step's time goes, shares of the steps' total.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpecTimeShare {
    /// The `num_steps − 1` draft forwards.
    pub draft: f64,
    /// The target's verify forward.
    pub verify: f64,
    /// The draft's forward over the accepted tokens.
    pub draft_extend: f64,
    /// The scheduler iteration's host cost.
    pub host: f64,
}

/// `summary.json` `kv_store`: the shared Mooncake Store.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KvStoreSummary {
    /// Capacity, tokens (`null`: unbounded).
    pub capacity_tokens: Option<u64>,
    /// Nodes whose DRAM holds it.
    pub nodes: Vec<u32>,
    /// 512-token blocks held at the end.
    pub blocks: u64,
    /// Blocks written (new to the store).
    pub written_blocks: u64,
    /// Bytes of those writes.
    pub write_bytes: u64,
    /// Blocks a full store (`eviction = "none"`) refused.
    pub skipped_blocks: u64,
    /// Blocks evicted (`eviction = "lru"`).
    pub evicted_blocks: u64,
    /// Blocks prefetches asked for.
    pub prefetched_blocks: u64,
    /// Bytes of those blocks.
    pub prefetched_bytes: u64,
    /// What the store's reads and writes put on the fabric.
    pub traffic: KvStoreTraffic,
}

/// `summary.json` `kv_store.traffic`: the store's operations as they moved — RDMA batches on the
/// fabric (sharing NICs with KV transfers) and local copies of replicas on the client's node.
/// Writes are the prefill instances' write-backs and the decode instances' offloads together.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct KvStoreTraffic {
    /// Prefetch reads started.
    pub reads: u64,
    /// Writes started (those with blocks to put): HiCache write-backs and decode offloads.
    pub writes: u64,
    /// Operations with a failed or aborted batch (a read keeps what landed; a write puts
    /// nothing).
    pub failed: u64,
    /// Bytes of read batches started on the fabric.
    pub fabric_read_bytes: u64,
    /// Bytes of write batches started on the fabric.
    pub fabric_write_bytes: u64,
    /// Bytes copied locally (a replica on the client's own node).
    pub local_copy_bytes: u64,
    /// Sum of finished reads' durations, ns (from their start to their last batch's end).
    pub read_ns_total: u64,
    /// Longest finished read, ns.
    pub read_ns_max: u64,
    /// The decode side's offload (`disaggregation_decode_enable_offload_kvcache`), whose
    /// writes the figures above include; absent when no decode pool offloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_offload: Option<DecodeOffloadTraffic>,
}

/// `summary.json` `kv_store.traffic.decode_offload`: what the decode instances' offload of
/// generated KV moved (sglang's `DecodeKVCacheOffloadManager`; `docs/sglang-pd.md` §18.1).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DecodeOffloadTraffic {
    /// Offloads: one request's blocks completed by one step, copied GPU → host together.
    pub offloads: u64,
    /// 512-token blocks copied GPU → host.
    pub blocks: u64,
    /// Bytes copied GPU → host (over PCIe, off the fabric).
    pub d2h_bytes: u64,
    /// Store writes started (offloads with blocks the store neither held nor was being written).
    pub writes: u64,
    /// Blocks those writes put.
    pub put_blocks: u64,
    /// Mooncake batches they put on the fabric (one per TP rank and store node).
    pub batches: u64,
    /// Bytes of those batches: what the decode nodes' NICs send for the offload.
    pub fabric_write_bytes: u64,
    /// Bytes copied locally (a store node that is the decode's own).
    pub local_copy_bytes: u64,
    /// Writes with a failed or aborted batch (nothing they put is readable).
    pub failed: u64,
    /// Blocks that landed under a prompt the store did not hold (so no prefetch can reach
    /// them: sglang's storage lookup stops at the first missing page) and were dropped.
    pub orphaned_blocks: u64,
    /// Blocks never offloaded: the host pool was full when their request ended.
    pub host_full_blocks: u64,
    /// Times an offload waited a step for host-pool room.
    pub host_waits: u64,
}

/// Time-weighted utilisation of one pool over the arrival window (the steady state; the drain
/// tail would dilute it) and what bound it. Shares are 0–1, averaged over the pool's
/// instances; `null` when the window has no simulated time.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PoolUsage {
    /// Pool name.
    pub pool: String,
    /// `prefill`, `decode` or `colocated`.
    pub role: String,
    /// Instances.
    pub instances: u32,
    /// GPUs (instances × tp_size).
    pub gpus: u32,
    /// Share of time a server's forward runs. For decode this is 1 whenever it holds a request (a
    /// continuous batch steps while it has anyone), so it is no bottleneck signal there.
    pub busy: Option<f64>,
    /// Mean requests in the running batch per server (an instance, or one DP rank of it under
    /// DP attention: each rank has its own scheduler, batch and KV pool).
    pub batch_mean: Option<f64>,
    /// `batch_mean` ÷ a server's `max_running_requests` (its share per DP rank; `null` with no
    /// cap).
    pub batch_occupancy: Option<f64>,
    /// Mean share of a server's KV pages held.
    pub kv_occupancy: Option<f64>,
    /// Mean requests waiting per server (prefill: waiting queue; decode: prealloc and ready
    /// queues; colocated: waiting queue).
    pub queue_mean: Option<f64>,
    /// Share of time a server had a request waiting.
    pub queue_nonempty: Option<f64>,
    /// Mean busy share of the pool's NICs in its transfer direction (prefill TX, decode RX).
    pub link_utilisation: Option<f64>,
    /// What bound the pool: `fabric`, `kv_memory`, `batch_cap`, `queue`, `compute`, or `none`
    /// (headroom everywhere); see [`bottleneck`].
    pub bottleneck: String,
}

/// Time integrals of one pool's gauges, summed over its instances, from the simulation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolGauges {
    /// Pool name.
    pub pool: String,
    /// Role.
    pub role: Option<Role>,
    /// Instances.
    pub instances: u32,
    /// Servers the integrals are summed over: one per instance, or one per DP rank of each
    /// instance under DP attention (`Pool::servers`: each rank has its own scheduler, batch
    /// and KV pool). The shares are per server.
    pub servers: u32,
    /// GPUs.
    pub gpus: u32,
    /// One server's cap on its batch, when `max_running_requests` is set: the flag's value, or
    /// its share per DP rank (sglang divides it over the ranks).
    pub batch_cap: Option<u32>,
    /// ∫ busy dt, ns.
    pub busy_ns: f64,
    /// ∫ running requests dt, request·ns.
    pub running_ns: f64,
    /// ∫ (pages used ÷ pages total) dt, ns.
    pub kv_ns: f64,
    /// ∫ queued requests dt, request·ns.
    pub queued_ns: f64,
    /// ∫ [queue non-empty] dt, ns.
    pub queue_nonempty_ns: f64,
    /// Bytes the pool's NICs moved in its transfer direction.
    pub nic_bytes: f64,
    /// The pool's NIC capacity, bytes/ns.
    pub nic_bytes_per_ns: f64,
    /// Times a decode server's prealloc queue stopped because every request row was held
    /// (`[0]`) or because the head request's pages did not fit (`[1]`), over its servers.
    pub prealloc_stops: [u64; 2],
}

impl PoolGauges {
    /// Pool `p`'s figures before any integral is added: its name, role and sizes.
    pub fn of_pool(p: &crate::config::Pool) -> Self {
        Self {
            pool: p.name.clone(),
            role: Some(p.role),
            instances: p.instances,
            servers: p.servers(),
            gpus: p.instances * p.server.gpus(),
            // Per server, as sglang caps each DP rank.
            batch_cap: p
                .server
                .max_running_requests
                .map(|m| (m / p.parallel.dp_ranks()).max(1)),
            ..Default::default()
        }
    }

    /// Whether a decode pool's waiting requests waited for request rows more often than for
    /// pages: sglang's decode shares `--max-running-requests` rows between the running batch
    /// and the requests preallocated or in transfer (`DecodeReqToTokenPool`,
    /// `docs/sglang-pd.md` §16.1), so the rows can bind with the batch below its cap and the KV
    /// half empty.
    pub fn rows_bound(&self) -> bool {
        self.prealloc_stops[0] > self.prealloc_stops[1]
    }
}

/// The threshold at which a utilisation counts as binding: past it, a little more load makes
/// queueing delay grow quickly (an M/D/1 queue at 80 % load already waits 2 service times).
pub const BINDING: f64 = 0.8;

/// How much longer a decode step at a pool's mean batch takes than the step of one of those
/// requests alone, past which the batch itself is the binding resource: at 2× more than half
/// of every step is per-sequence work (KV reads, per-sequence host cost), so each request added
/// to an instance slows every other one — the decode roofline's knee, where throughput per
/// instance stops growing with load and TPOT grows instead.
pub const DECODE_STEP_GROWTH_BINDING: f64 = 2.0;

/// What bound a pool, first match in this order:
/// - `fabric`: NIC utilisation ≥ [`BINDING`];
/// - `batch_cap`: the batch at ≥ 90 % of `max_running_requests`; or, on decode, requests
///   waited in the prealloc queue ≥ 10 % of the time and mostly for a request row
///   (`rows_bound`: the rows are shared with the requests preallocated and in transfer, so
///   they bind with the batch below its cap);
/// - `kv_memory`: KV occupancy ≥ [`BINDING`]; or, on decode, requests waited in the prealloc
///   queue ≥ 10 % of the time for pages, including sglang's reserved tokens per request held,
///   so the pool is full before its pages are;
/// - `compute`: a prefill's forwards ran ≥ [`BINDING`] of the time; or, on a colocated server,
///   requests waited ≥ 10 % of the time (its waiting queue waits for the step's token budget);
///   or a decode or colocated pool stepped ≥ [`BINDING`] of the time at a batch whose step is
///   ≥ [`DECODE_STEP_GROWTH_BINDING`] × a lone request's (`step_growth`: saturated — e.g. 99.9 %
///   busy at batch 170 — not idle);
/// - `queue`: requests waited more than half the time without any of those (admission is the
///   limit, e.g. a dead transfer shard);
/// - else `none`.
///
/// Decode's and a colocated server's busy share alone is not a signal (see [`PoolUsage::busy`]):
/// a continuous batch steps whenever it holds anyone, at batch 3 as at batch 300; the step's
/// growth with the batch tells the two apart.
pub fn bottleneck(
    role: Role,
    u: &PoolUsage,
    step_growth: Option<f64>,
    rows_bound: bool,
) -> &'static str {
    let at = |v: Option<f64>, t: f64| v.is_some_and(|v| v >= t);
    let batch_bound =
        role != Role::Prefill && at(u.busy, BINDING) && at(step_growth, DECODE_STEP_GROWTH_BINDING);
    let decode_waits = role == Role::Decode && at(u.queue_nonempty, 0.1);
    if at(u.link_utilisation, BINDING) {
        "fabric"
    } else if at(u.batch_occupancy, 0.9) || (decode_waits && rows_bound) {
        "batch_cap"
    } else if at(u.kv_occupancy, BINDING) || decode_waits {
        "kv_memory"
    } else if (role == Role::Prefill && at(u.busy, BINDING))
        || (role == Role::Colocated && at(u.queue_nonempty, 0.1))
        || batch_bound
    {
        "compute"
    } else if at(u.queue_nonempty, 0.5) {
        "queue"
    } else {
        "none"
    }
}

impl PoolGauges {
    /// The pool's utilisation over `span_ns`, per server: the integrals are sums over every
    /// server (DP rank) of the pool, so they are divided by the servers, not the instances — an
    /// EP72 decode instance of 72 DP ranks each 1.4 % full once read 72 × 1.4 % → 100 % "KV
    /// full" (issue 43).
    pub fn usage(&self, span_ns: Nanos) -> PoolUsage {
        let per = (span_ns as f64) * f64::from(self.servers.max(1));
        let share = |v: f64| (span_ns > 0).then(|| (v / per).clamp(0.0, f64::MAX));
        let batch_mean = share(self.running_ns);
        let role = self.role.unwrap_or(Role::Decode);
        let mut u = PoolUsage {
            pool: self.pool.clone(),
            role: role.as_str().to_string(),
            instances: self.instances,
            gpus: self.gpus,
            busy: share(self.busy_ns).map(|v| v.min(1.0)),
            batch_mean,
            batch_occupancy: self
                .batch_cap
                .and_then(|cap| batch_mean.map(|b| (b / f64::from(cap.max(1))).min(1.0))),
            kv_occupancy: share(self.kv_ns).map(|v| v.min(1.0)),
            queue_mean: share(self.queued_ns),
            queue_nonempty: share(self.queue_nonempty_ns).map(|v| v.min(1.0)),
            link_utilisation: (span_ns > 0 && self.nic_bytes_per_ns > 0.0)
                .then(|| (self.nic_bytes / (self.nic_bytes_per_ns * span_ns as f64)).min(1.0)),
            bottleneck: "none".to_string(),
        };
        u.bottleneck = bottleneck(role, &u, None, self.rows_bound()).to_string();
        u
    }
}

/// How many times longer one decode step of `pool` at its mean batch and KV occupancy takes
/// than one of those requests' step alone (`None` for a prefill pool, a measured step-time
/// profile, or no batch). An estimate from the roofline of one attention-TP group with the
/// interconnect and expert parallelism left out: a ratio of two steps of the same model, which
/// those terms shift alike, not a time.
pub fn step_growth(sc: &Scenario, pool: &crate::config::Pool, u: &PoolUsage) -> Option<f64> {
    if pool.role == Role::Prefill || pool.step_times.is_some() {
        return None;
    }
    let batch = u.batch_mean?.round();
    if batch < 1.0 {
        return None;
    }
    let mut model = crate::compute::StepModel::new(
        &sc.gpu,
        &pool.model,
        pool.server.attn_tp_size,
        pool.kv_dtype_bytes,
        sc.compute.clone(),
    );
    if pool.kv_elem() == crate::spec::model::KvElem::Fp4 {
        model = model.with_fp4_kv(&pool.model, pool.server.attn_tp_size);
    }
    // Tokens the batch holds: the occupied share of the instance's KV pages.
    let pages = f64::from(crate::config::capacity::kv_pages(&sc.gpu, pool));
    let held = u.kv_occupancy.unwrap_or(0.0) * pages * f64::from(pool.server.tokens_per_page());
    let b = batch.min(f64::from(u32::MAX)) as u32;
    let all = model.decode_ns(b, held as u64) as f64;
    let one = model.decode_ns(1, (held / batch) as u64) as f64;
    (one > 0.0).then(|| all / one)
}

/// The cluster's size and, when `hardware.usd_per_gpu_hour` is given, its cost.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ClusterSummary {
    /// GPUs in all pools (under a resizing `[autoscaler]`: every slot placed, serving or not).
    pub gpus: u32,
    /// Nodes the pools are placed on.
    pub nodes: u32,
    /// The billed GPUs × `usd_per_gpu_hour`, US dollars per hour: `gpus` under GPU billing,
    /// `nodes × gpus_per_node` under `hardware.billing = "node"`; under a resizing
    /// `[autoscaler]`, `autoscaling.cost_usd` over the run's hours.
    pub usd_per_hour: Option<f64>,
    /// Dollars per million output tokens at the arrival window's output rate (`null` without a
    /// price or with no token generated); under a resizing `[autoscaler]`,
    /// `autoscaling.cost_usd` over every output token of the run.
    pub usd_per_1m_output_tokens: Option<f64>,
    /// Whole-node billing (`hardware.billing = "node"`); absent under GPU billing, so those
    /// summaries read as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_billing: Option<NodeBilling>,
}

/// What whole-node billing pays for (`summary.json` `cluster.node_billing`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NodeBilling {
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// GPUs paid for: `nodes × gpus_per_node`.
    pub billed_gpus: u32,
    /// Billed GPUs no instance uses.
    pub idle_gpus: u32,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Counts by outcome.
    pub requests: Counts,
    /// Error kinds, sorted by kind, each with sglang's message quoted once.
    pub errors: Vec<ErrorCount>,
    /// Latencies, ms, over finished (completed and corrupted) requests.
    pub latency_ms: Latencies,
    /// Throughput.
    pub throughput: Throughput,
    /// SLO attainment, goodput and the verdict.
    pub slo: SloSummary,
    /// Transfer totals.
    pub transfer: TransferSummary,
    /// Per pool: utilisation and what bound it.
    pub pools: Vec<PoolUsage>,
    /// GPUs, nodes and cost.
    pub cluster: ClusterSummary,
    /// Simulation totals.
    pub sim: SimSummary,
    /// Prefix cache per prefill instance (empty when no request carried prefix information).
    pub prefix_cache: Vec<CacheStats>,
    /// The router's `cache_aware` decisions (absent when no side uses `cache_aware`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterSummary>,
    /// The shared Mooncake Store (absent without `[kv_store]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_store: Option<KvStoreSummary>,
    /// Speculative decoding per pool that runs it (absent when no pool does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub speculative: Vec<SpecSummary>,
    /// Client disconnects and aborts (absent unless the scenario models them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborts: Option<super::aborts::AbortSummary>,
    /// Conversations (absent without sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<super::sessions::SessionSummary>,
    /// Pools that changed size (absent unless `[autoscaler]` names a policy that resizes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSummary>,
    /// Decode-side prefix reuse (absent unless a decode pool sets
    /// `disaggregation_decode_enable_radix_cache`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_prefix: Option<DecodePrefixSummary>,
}

/// `summary.json` `decode_prefix`: what the decode instances' radix trees
/// (`--disaggregation-decode-enable-radix-cache`, `sglang::decode_radix`) matched and what the
/// transfers therefore did not move, summed over the instances.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DecodePrefixSummary {
    /// Requests decode admitted (a retracted request counts at each admission).
    pub requests_admitted: u64,
    /// Of those, requests whose prompt began with KV the tree held.
    pub requests_hit: u64,
    /// Prompt tokens admitted.
    pub prompt_tokens: u64,
    /// Prompt tokens the tree held at admission (page-aligned): KV the prefill did not send.
    pub hit_tokens: u64,
    /// `hit_tokens ÷ prompt_tokens` (`null` before any admission).
    pub hit_share: Option<f64>,
    /// Pages of the hit tokens.
    pub hit_pages: u64,
    /// Bytes of those pages over every attention rank of the decode: KV bytes not transferred.
    pub bytes_not_transferred: u64,
    /// 512-token blocks finished requests added to the trees.
    pub inserted_blocks: u64,
    /// Blocks evicted to make room for requests.
    pub evicted_blocks: u64,
    /// The most blocks each tree held at once, summed over the instances.
    pub peak_blocks: u64,
}

/// `summary.json` `autoscaling`: what a run whose pools changed size held and did (issue 38).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AutoscalingSummary {
    /// `autoscaler.policy`.
    pub policy: String,
    /// GPUs held over the run, from the start to its end: an instance holds its GPUs from its
    /// launch (or the start) until it is off, drains and switches included, GPU-hours.
    pub gpu_hours: f64,
    /// `gpu_hours × hardware.usd_per_gpu_hour`, US dollars (absent without a price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Instances launched cold (weights, CUDA graphs, the router's check).
    pub cold_starts: u64,
    /// Drained instances flipped live into the other pool.
    pub role_switches: u64,
    /// Instances taken out of the router's set to drain (removals and switches).
    pub drains: u64,
    /// Starts called off before they ended.
    pub starts_cancelled: u64,
    /// Starts that failed (the server crashed while starting).
    pub starts_failed: u64,
    /// The policy's decisions that moved the pools.
    pub decisions: u64,
    /// Every change of every slot, in time order.
    pub events: Vec<crate::vocab::scale::ScaleEvent>,
}

/// A figure of a summary that `[expect]` bounds and `check --baseline` compares, read from the
/// typed [`Summary`] (never by a JSON path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Figure {
    /// `requests.arrived`.
    Arrived,
    /// `requests.completed`.
    Completed,
    /// `requests.failed`.
    Failed,
    /// `requests.corrupted`.
    Corrupted,
    /// `requests.unfinished`.
    Unfinished,
    /// `latency_ms.ttft.p50`, ms.
    TtftP50,
    /// `latency_ms.ttft.p99`, ms.
    TtftP99,
    /// `latency_ms.tpot.p50`, ms.
    TpotP50,
    /// `latency_ms.tpot.p99`, ms.
    TpotP99,
    /// `latency_ms.e2e.p99`, ms.
    E2eP99,
    /// `latency_ms.itl.p50`, ms (every gap of every request).
    ItlP50,
    /// `latency_ms.itl.p99`, ms.
    ItlP99,
    /// `latency_ms.tbt.p50`, ms (each request's worst gap).
    TbtP50,
    /// `latency_ms.tbt.p90`, ms.
    TbtP90,
    /// `latency_ms.tbt.p99`, ms.
    TbtP99,
    /// `latency_ms.e2e_per_token.p99`, ms.
    E2ePerTokenP99,
    /// `throughput.requests_per_s` (the whole run).
    RequestsPerS,
    /// `throughput.arrival_window.requests_per_s`.
    WindowRequestsPerS,
    /// `throughput.arrival_window.output_tokens_per_s`.
    WindowOutputTokensPerS,
    /// `throughput.arrival_window.goodput_requests_per_s`.
    WindowGoodputPerS,
    /// `slo.goodput_requests_per_s` (the whole run).
    GoodputPerS,
    /// `slo.attainment`, 0–1.
    SloAttainment,
}

impl Figure {
    /// The figure's value in `s`; `None` where the summary has no data (`null`).
    pub fn of(self, s: &Summary) -> Option<f64> {
        let (r, l, t) = (&s.requests, &s.latency_ms, &s.throughput);
        let n = |v: u64| Some(v as f64);
        match self {
            Figure::Arrived => n(r.arrived),
            Figure::Completed => n(r.completed),
            Figure::Failed => n(r.failed),
            Figure::Corrupted => n(r.corrupted),
            Figure::Unfinished => n(r.unfinished),
            Figure::TtftP50 => l.ttft.p50,
            Figure::TtftP99 => l.ttft.p99,
            Figure::TpotP50 => l.tpot.p50,
            Figure::TpotP99 => l.tpot.p99,
            Figure::E2eP99 => l.e2e.p99,
            Figure::ItlP50 => l.itl.p50,
            Figure::ItlP99 => l.itl.p99,
            Figure::TbtP50 => l.tbt.p50,
            Figure::TbtP90 => l.tbt.p90,
            Figure::TbtP99 => l.tbt.p99,
            Figure::E2ePerTokenP99 => l.e2e_per_token.p99,
            Figure::RequestsPerS => Some(t.requests_per_s),
            Figure::WindowRequestsPerS => Some(t.arrival_window.requests_per_s),
            Figure::WindowOutputTokensPerS => Some(t.arrival_window.output_tokens_per_s),
            Figure::WindowGoodputPerS => Some(t.arrival_window.goodput_requests_per_s),
            Figure::GoodputPerS => Some(s.slo.goodput_requests_per_s),
            Figure::SloAttainment => s.slo.attainment,
        }
    }

    /// Whether the figure is a latency of finished requests, which has data only when some
    /// request finished (completed or corrupted): with none, it is "no data" whatever the file
    /// holds. ITL is not: its gaps are every request's, whatever its outcome.
    pub fn needs_finished(self) -> bool {
        matches!(
            self,
            Figure::TtftP50
                | Figure::TtftP99
                | Figure::TpotP50
                | Figure::TpotP99
                | Figure::E2eP99
                | Figure::TbtP50
                | Figure::TbtP90
                | Figure::TbtP99
                | Figure::E2ePerTokenP99
        )
    }

    /// [`Figure::of`], and no data for a latency of a run where no request finished.
    pub fn read(self, s: &Summary) -> Option<f64> {
        let finished = s.requests.completed + s.requests.corrupted > 0;
        self.of(s).filter(|_| finished || !self.needs_finished())
    }
}

/// What the run loop reports besides the collector.
#[derive(Clone, Debug, Default)]
pub struct RunTotals {
    /// Events handled.
    pub events: u64,
    /// Simulated time at the end, ns.
    pub end_ns: Nanos,
    /// Whether the drain timeout cut the run.
    pub cut: bool,
    /// Time-weighted gauges per pool, in scenario pool order.
    pub pools: Vec<PoolGauges>,
    /// Nodes the cluster spans.
    pub nodes: u32,
    /// DeepEP all-to-all on the fabric, per pool that ran some.
    pub a2a: Vec<A2aSummary>,
}

impl Summary {
    /// Builds the summary from the run's aggregates.
    pub fn new(
        c: &Collector,
        sc: &Scenario,
        run: &RunTotals,
        prefix_cache: Vec<CacheStats>,
    ) -> Self {
        let secs = |ns: Nanos| ns as f64 / NS_PER_S as f64;
        let span = secs(run.end_ns).max(1e-9);
        let window_end = c.window_end_ns.unwrap_or(run.end_ns).min(run.end_ns.max(1));
        let wspan = secs(window_end).max(1e-9);
        let finished = c.counts.completed + c.counts.corrupted;
        let w = &c.window;
        let window = WindowThroughput {
            end_s: secs(window_end),
            requests_per_s: w.finished as f64 / wspan,
            input_tokens_per_s: w.input_tokens as f64 / wspan,
            output_tokens_per_s: w.output_tokens as f64 / wspan,
            goodput_requests_per_s: w.slo_met as f64 / wspan,
        };
        let gpus: u32 = sc.pools.iter().map(|p| p.instances * p.server.gpus()).sum();
        let billed = sc.billing.billed_gpus(gpus, run.nodes, sc.gpus_per_node);
        let usd_per_hour = sc.usd_per_gpu_hour.map(|u| u * f64::from(billed));
        let usd_per_1m_output_tokens = usd_per_hour
            .filter(|_| window.output_tokens_per_s > 0.0)
            .map(|h| h / (window.output_tokens_per_s * 3600.0) * 1e6);
        Summary {
            requests: c.counts.clone(),
            errors: c
                .errors
                .iter()
                .map(|(k, (n, m))| ErrorCount {
                    kind: (*k).to_string(),
                    count: *n,
                    message: m.clone(),
                })
                .collect(),
            latency_ms: c.latencies(),
            throughput: Throughput {
                requests_per_s: finished as f64 / span,
                input_tokens_per_s: c.tokens_in as f64 / span,
                output_tokens_per_s: c.tokens_out as f64 / span,
                arrival_window: window,
            },
            slo: super::slo::evaluate(c, &sc.slo, span),
            transfer: TransferSummary {
                backend: (!sc.sglang.transfer_backend.is_mooncake())
                    .then(|| sc.sglang.transfer_backend.as_str().to_string()),
                bytes: c.kv_bytes,
                writes: c.rdma_writes,
                bandwidth_gbps: c.bandwidth.summary(1e-3),
                retransmitted_bytes: c.retransmitted_bytes.round() as u64,
                fragmentation: c.transfer_shape.summary(),
                a2a: run.a2a.clone(),
            },
            pools: run
                .pools
                .iter()
                .map(|g| {
                    let mut u = g.usage(window_end);
                    if let (Some(role), Some(pool)) =
                        (g.role, sc.pools.iter().find(|p| p.name == g.pool))
                    {
                        u.bottleneck =
                            bottleneck(role, &u, step_growth(sc, pool, &u), g.rows_bound())
                                .to_string();
                    }
                    u
                })
                .collect(),
            cluster: ClusterSummary {
                gpus,
                nodes: run.nodes,
                usd_per_hour,
                usd_per_1m_output_tokens,
                node_billing: (sc.billing == crate::config::Billing::Node).then_some(NodeBilling {
                    gpus_per_node: sc.gpus_per_node,
                    billed_gpus: billed,
                    idle_gpus: billed - gpus,
                }),
            },
            sim: SimSummary {
                events: run.events,
                simulated_s: secs(run.end_ns),
                cut_by_drain_timeout: run.cut,
            },
            prefix_cache: prefix_cache.into_iter().filter(|c| c.lookups > 0).collect(),
            router: None,
            kv_store: None,
            speculative: Vec::new(),
            aborts: None,
            sessions: None,
            autoscaling: None,
            decode_prefix: None,
        }
    }

    /// The summary with the abort figures.
    pub fn with_aborts(mut self, a: Option<super::aborts::AbortSummary>) -> Self {
        self.aborts = a;
        self
    }

    /// The summary with the autoscaling figures. The pools changed size, so the cluster's
    /// cost is what the GPUs held cost over the run (`cost_usd`), not its slots' price: its
    /// `usd_per_hour` is the run's mean and `usd_per_1m_output_tokens` that cost over every
    /// output token.
    pub fn with_autoscaling(mut self, a: Option<AutoscalingSummary>) -> Self {
        if let Some(cost) = a.as_ref().and_then(|a| a.cost_usd) {
            let secs = self.sim.simulated_s.max(f64::MIN_POSITIVE);
            let tokens = self.throughput.output_tokens_per_s * secs;
            self.cluster.usd_per_hour = Some(cost * 3600.0 / secs);
            self.cluster.usd_per_1m_output_tokens = (tokens > 0.0).then(|| cost / tokens * 1e6);
        }
        self.autoscaling = a;
        self
    }

    /// The summary with the decode trees' figures.
    pub fn with_decode_prefix(mut self, d: Option<DecodePrefixSummary>) -> Self {
        self.decode_prefix = d;
        self
    }

    /// The summary with the sessions' figures.
    pub fn with_sessions(mut self, s: Option<super::sessions::SessionSummary>) -> Self {
        self.sessions = s;
        self
    }

    /// The summary with the speculative pools' figures.
    pub fn with_speculative(mut self, s: Vec<SpecSummary>) -> Self {
        self.speculative = s;
        self
    }

    /// The summary with the shared store's figures.
    pub fn with_kv_store(mut self, s: Option<KvStoreSummary>) -> Self {
        self.kv_store = s;
        self
    }

    /// The summary with the router's `cache_aware` decisions per side (`[prefill, decode]`).
    pub fn with_router(mut self, sides: [Option<RouterDecisions>; 2]) -> Self {
        if sides.iter().any(Option::is_some) {
            self.router = Some(RouterSummary {
                prefill: sides[0],
                decode: sides[1],
            });
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(busy: f64, kv: f64, batch: Option<f64>, queue: f64, link: f64) -> PoolUsage {
        PoolUsage {
            pool: "p".into(),
            role: "decode".into(),
            instances: 1,
            gpus: 1,
            busy: Some(busy),
            batch_mean: Some(1.0),
            batch_occupancy: batch,
            kv_occupancy: Some(kv),
            queue_mean: Some(queue),
            queue_nonempty: Some(queue),
            link_utilisation: Some(link),
            bottleneck: "none".to_string(),
        }
    }

    #[test]
    fn bottlenecks_follow_the_binding_signal() {
        // Decode busy all the time with headroom everywhere: no bottleneck (busy is no signal).
        assert_eq!(
            bottleneck(Role::Decode, &usage(1.0, 0.3, None, 0.0, 0.1), None, false),
            "none"
        );
        // Saturated: busy at a batch whose step is 3× a lone request's (the batch binds) — never
        // `none`; at 1.2× the same busy share is headroom.
        assert_eq!(
            bottleneck(
                Role::Decode,
                &usage(0.999, 0.5, None, 0.0, 0.1),
                Some(3.0),
                false
            ),
            "compute"
        );
        assert_eq!(
            bottleneck(
                Role::Decode,
                &usage(0.999, 0.5, None, 0.0, 0.1),
                Some(1.2),
                false
            ),
            "none"
        );
        // The same busy share on a prefill is compute.
        assert_eq!(
            bottleneck(
                Role::Prefill,
                &usage(0.95, 0.3, None, 0.9, 0.1),
                None,
                false
            ),
            "compute"
        );
        // A decode whose prealloc queue is often non-empty waits for KV pages — or, when it
        // stopped mostly at a held request row, for a row of max_running_requests, with the
        // batch below its cap and the KV 17 % used (the GB200 NVFP4 decode's case).
        assert_eq!(
            bottleneck(Role::Decode, &usage(1.0, 0.6, None, 0.2, 0.1), None, false),
            "kv_memory"
        );
        assert_eq!(
            bottleneck(
                Role::Decode,
                &usage(1.0, 0.17, Some(0.7), 0.9, 0.1),
                None,
                true
            ),
            "batch_cap"
        );
        // A colocated server always busy with an empty queue has headroom; with a queue, not.
        assert_eq!(
            bottleneck(
                Role::Colocated,
                &usage(1.0, 0.3, None, 0.0, 0.0),
                None,
                false
            ),
            "none"
        );
        assert_eq!(
            bottleneck(
                Role::Colocated,
                &usage(1.0, 0.3, None, 0.3, 0.0),
                None,
                false
            ),
            "compute"
        );
        assert_eq!(
            bottleneck(
                Role::Decode,
                &usage(1.0, 0.6, Some(0.95), 0.7, 0.1),
                None,
                false
            ),
            "batch_cap"
        );
        assert_eq!(
            bottleneck(Role::Prefill, &usage(0.5, 0.1, None, 0.1, 0.9), None, false),
            "fabric"
        );
        assert_eq!(
            bottleneck(Role::Prefill, &usage(0.3, 0.1, None, 0.8, 0.1), None, false),
            "queue"
        );
    }

    #[test]
    fn gauges_become_shares_and_no_time_is_null() {
        let g = PoolGauges {
            pool: "d".into(),
            role: Some(Role::Decode),
            instances: 2,
            servers: 2,
            gpus: 2,
            batch_cap: Some(10),
            busy_ns: 2e9,
            running_ns: 20e9,
            kv_ns: 1e9,
            queued_ns: 0.0,
            queue_nonempty_ns: 0.0,
            nic_bytes: 50.0,
            nic_bytes_per_ns: 1.0,
            prealloc_stops: [0; 2],
        };
        let u = g.usage(1_000_000_000);
        assert_eq!(u.busy, Some(1.0));
        assert_eq!(u.batch_mean, Some(10.0));
        assert_eq!(u.batch_occupancy, Some(1.0));
        assert_eq!(u.kv_occupancy, Some(0.5));
        assert_eq!(u.bottleneck, "batch_cap");
        let none = g.usage(0);
        assert_eq!(
            (none.busy, none.kv_occupancy, none.link_utilisation),
            (None, None, None)
        );
        // One instance of 72 DP ranks for 1 s, each rank 12.5 % full, 3 waiting, busy half the
        // time: the sums over the ranks are shared out per rank, not per instance (which read
        // 72 × 12.5 % → 100 % full).
        let dp = PoolGauges {
            instances: 1,
            servers: 72,
            busy_ns: 72.0 * 0.5e9,
            running_ns: 0.0,
            kv_ns: 72.0 * 0.125e9,
            queued_ns: 72.0 * 3e9,
            queue_nonempty_ns: 72.0 * 0.25e9,
            batch_cap: Some(256),
            ..g
        };
        let u = dp.usage(1_000_000_000);
        assert_eq!(
            (u.busy, u.kv_occupancy, u.queue_mean, u.queue_nonempty),
            (Some(0.5), Some(0.125), Some(3.0), Some(0.25))
        );
        assert_eq!(u.bottleneck, "kv_memory", "decode waited 25 % of the time");
    }
}
