//! The checked configuration every part of the simulation reads: what `scenario/` produces
//! after parsing, `--set` and validation, and the pure capacity math on it ([`capacity`]).
//! Nothing here reads a file; everything below `config` in the dependency order
//! (`spec`, `engine`, `layout`, `fabric`) is pure.

pub mod aborts;
pub mod autoscale;
pub mod capacity;
pub mod rate_profile;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::engine::Nanos;
use crate::spec::{GpuSpec, ModelSpec, ServerArgs};

/// The role of a pool.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Computes prompts and pushes their KV.
    Prefill,
    /// Receives KV and generates tokens.
    Decode,
    /// A plain sglang server (no disaggregation): chunked prefill and decode mixed in one batch.
    Colocated,
}

impl Role {
    /// The role as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Prefill => "prefill",
            Role::Decode => "decode",
            Role::Colocated => "colocated",
        }
    }
}

/// How a pool's KV allocator returns freed pages to its free list (`pools.kv_allocator`),
/// after sglang's `need_sort` (`mem_cache/allocator.py::PagedTokenToKVPoolAllocator`;
/// `docs/sglang-pd.md` §22): it decides which page ids a later request gets, so how many
/// contiguous runs — RDMA writes — its transfer has.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum KvAllocator {
    /// `need_sort = True`, what sglang builds for `--disaggregation-mode prefill|decode` since
    /// PR #8133 (July 2025): freed pages wait in a release list, and only when the free list
    /// is too short for an allocation are the two merged and sorted.
    Sorted,
    /// `need_sort = False`, a plain server's allocator (and every PD server's before #8133):
    /// freed pages go straight to the front of the free list and are handed out next.
    Unsorted,
}

impl KvAllocator {
    /// What sglang builds for a server of `role`: sorted in PD mode, unsorted otherwise
    /// (`need_sort = disaggregation_mode in ("decode", "prefill")`, `model_runner.py`).
    pub fn default_for(role: Role) -> Self {
        match role {
            Role::Prefill | Role::Decode => KvAllocator::Sorted,
            Role::Colocated => KvAllocator::Unsorted,
        }
    }

    /// The name as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            KvAllocator::Sorted => "sorted",
            KvAllocator::Unsorted => "unsorted",
        }
    }
}

/// What a cluster is billed by (`hardware.billing`): GPUs, or whole nodes (a cloud instance or
/// a reserved server is rented whole, so a pool that uses 4 of a node's 8 GPUs pays for 8).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Billing {
    /// Every GPU the pools use (the default; a GPU-hour marketplace).
    #[default]
    Gpu,
    /// Every node the pools span, `gpus_per_node` GPUs each, used or idle.
    Node,
}

/// The values `hardware.billing` takes.
pub const BILLINGS: [&str; 2] = ["gpu", "node"];

impl Billing {
    /// The value as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Billing::Gpu => "gpu",
            Billing::Node => "node",
        }
    }

    /// Parses `hardware.billing`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "gpu" => Some(Billing::Gpu),
            "node" => Some(Billing::Node),
            _ => None,
        }
    }

    /// Whether this is GPU billing (serde's `skip_serializing_if` of the default).
    pub fn is_gpu(&self) -> bool {
        *self == Billing::Gpu
    }

    /// The GPUs paid for: the pools' `gpus`, or every GPU of the `nodes` they span.
    pub fn billed_gpus(self, gpus: u32, nodes: u32, gpus_per_node: u32) -> u32 {
        match self {
            Billing::Gpu => gpus,
            Billing::Node => nodes.saturating_mul(gpus_per_node).max(gpus),
        }
    }
}

/// Router policies: sgl-model-gateway's `--policy` / `--prefill-policy` / `--decode-policy`
/// values (`router_args.py` choices at sgl-project/sglang 05e589a), plus pdsim's
/// `least_loaded`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RouterPolicy {
    /// Uniformly at random (its own RNG stream).
    Random,
    /// In turn, per role.
    RoundRobin,
    /// The instance with the fewest requests assigned and not yet done (lowest index on ties).
    LeastLoaded,
    /// sgl-model-gateway's default: prefix affinity on the router's own approximate tree
    /// unless load is unbalanced (`sglang::router` docs).
    #[default]
    CacheAware,
    /// Two distinct instances at random, the less loaded of them (ties to the first drawn).
    PowerOfTwo,
}

impl RouterPolicy {
    /// The policy as written in files.
    pub fn as_str(self) -> &'static str {
        match self {
            RouterPolicy::Random => "random",
            RouterPolicy::RoundRobin => "round_robin",
            RouterPolicy::LeastLoaded => "least_loaded",
            RouterPolicy::CacheAware => "cache_aware",
            RouterPolicy::PowerOfTwo => "power_of_two",
        }
    }
}

/// `cache_aware`'s parameters, sgl-model-gateway's `CacheAwareConfig` (its flags
/// `--cache-threshold`, `--balance-abs-threshold`, `--balance-rel-threshold`,
/// `--eviction-interval-secs`, `--max-tree-size`). The thresholds are `f32` as in the router.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheAwareParams {
    /// Least prefix match rate (matched ÷ prompt) that routes by affinity (strictly above).
    pub cache_threshold: f32,
    /// Load spread (max − min outstanding requests) above which load may be unbalanced.
    pub balance_abs_threshold: u64,
    /// Load ratio (max ÷ min) above which load may be unbalanced.
    pub balance_rel_threshold: f32,
    /// Period of the tree's LRU eviction, ns (0: never, as the router starts no thread).
    pub eviction_interval_ns: Nanos,
    /// Most characters one instance's share of the tree may hold after an eviction round.
    pub max_tree_size: u64,
}

/// The router of a run: a policy per side and `cache_aware`'s parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterParams {
    /// How prefill (or, for a plain cluster, colocated) instances are picked.
    pub prefill: RouterPolicy,
    /// How decode instances are picked.
    pub decode: RouterPolicy,
    /// `cache_aware`'s parameters (read only by a side that uses it).
    pub cache_aware: CacheAwareParams,
}

impl RouterParams {
    /// The router with `policy` on both sides and `cache_aware` at sgl-model-gateway's defaults.
    pub fn uniform(policy: RouterPolicy) -> Self {
        Self {
            prefill: policy,
            decode: policy,
            cache_aware: CacheAwareParams::default(),
        }
    }
}

impl Default for CacheAwareParams {
    /// sgl-model-gateway's defaults (`RouterArgs` in `router_args.py`, sgl-project/sglang
    /// 05e589a): 0.3, 64, 1.5, 60 s, 2^26 characters.
    fn default() -> Self {
        Self {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval_ns: 60 * crate::engine::NS_PER_S,
            max_tree_size: 1 << 26,
        }
    }
}

pub use crate::layout::Profile;

/// A validated pool.
#[derive(Clone, Debug)]
pub struct Pool {
    /// Unique name.
    pub name: String,
    /// Prefill or decode.
    pub role: Role,
    /// Number of instances (≥ 1).
    pub instances: u32,
    /// Server arguments.
    pub server: ServerArgs,
    /// The model this pool serves.
    pub model: ModelSpec,
    /// Bytes per KV element (from `kv_cache_dtype` and the model); 1 for FP4, the FP8 width
    /// its compute is priced from ([`Pool::kv_elem`] has its true bytes).
    pub kv_dtype_bytes: u32,
    /// Measured step times replacing the roofline model (`pools.step_times`).
    pub step_times: Option<std::sync::Arc<crate::compute::profile::MeasuredProfile>>,
    /// First node of this pool (`pools.node`), or `None` for the next free node.
    pub node: Option<u32>,
    /// First GPU on that node (`pools.gpu`, default 0).
    pub gpu: u32,
    /// How freed KV pages return to the free list (`pools.kv_allocator`; default per role,
    /// [`KvAllocator::default_for`]).
    pub kv_allocator: KvAllocator,
    /// `--num-reserved-decode-tokens` (`pools.server.num_reserved_decode_tokens`, default 512).
    pub num_reserved_decode_tokens: u32,
    /// `--disaggregation-decode-extra-slots` (`pools.server.disaggregation_decode_extra_slots`,
    /// decode pools only): request rows per worker beyond `max_running_requests` for requests
    /// preallocated or in transfer, where that count is above 32 (`None`: sglang's 0).
    pub decode_extra_slots: Option<u32>,
    /// `--enable-mixed-chunk` (`pools.server.enable_mixed_chunk`, colocated pools only; default
    /// off, as in sglang): a forward mixes the running decode batch with the prefill chunk;
    /// off, a prefill batch that forms runs instead of the decode step.
    pub enable_mixed_chunk: bool,
    /// Whether the overlap scheduler runs (sglang's default; `pools.server.disable_overlap_schedule`
    /// turns it off): the scheduler's host work for the next batch hides behind this batch's
    /// forward, and shows only where it is longer ([`crate::compute::StepModel`]).
    pub overlap_schedule: bool,
    /// Rank 0's layout (KV regions, state regions, aux rows).
    pub layout: std::sync::Arc<Vec<crate::layout::RankLayout>>,
    /// Mamba/GDN state slots per instance (0 for models without recurrent layers).
    pub state_slots: u32,
    /// DP attention and expert parallelism (`dp_size`, `ep_size`, …); the default for a
    /// plain TP instance.
    pub parallel: crate::spec::server::Parallel,
    /// HiCache (`enable_hierarchical_cache`) on this prefill pool, if on.
    pub hicache: Option<HiCacheParams>,
    /// The decode side's offload to the store
    /// (`disaggregation_decode_enable_offload_kvcache`) on this decode pool, if on.
    pub decode_offload: Option<DecodeOffloadParams>,
    /// The decode side's radix cache (`disaggregation_decode_enable_radix_cache`) on this
    /// decode pool: matched prefixes are not transferred (`sglang::decode_radix`).
    pub decode_radix: bool,
    /// pdsim's side of speculative decoding on this pool (the acceptance model), when
    /// `server.speculative` is on; sglang's flags are in `server.speculative`.
    pub speculative: Option<SpeculativeParams>,
    /// Weights one GPU keeps in host memory (`cpu_offload_gb`, or the layer-wise
    /// `offload_group_size`), and the link they are fetched over; `None` without offload.
    pub offload: Option<crate::compute::offload::Offload>,
}

/// The acceptance model of a pool that decodes speculatively (`docs/sglang-pd.md` §19.3;
/// `compute::speculative`).
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculativeParams {
    /// Mean per-position acceptance rate α: the chance that the next draft position is
    /// accepted given the one before it was (a chain; for a tree, per depth).
    pub accept_rate: f64,
    /// Standard deviation of a request's own α around `accept_rate` (0: every request draws
    /// its steps from the same α).
    pub accept_rate_sd: f64,
    /// Where `accept_rate` came from: the key that set it, or the published figure of the
    /// default.
    pub source: String,
    /// What sglang changed on its own when it resolved the flags (forced
    /// `max_running_requests`, an adjusted `num_draft_tokens`), as sglang logs them.
    pub notes: Vec<String>,
}

/// `--hicache-write-policy`: when a block computed on the GPU is backed up to host memory
/// (and, with a storage backend, from there to the store).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WritePolicy {
    /// sglang's default: every block on its first use (`write_through_threshold` 1).
    #[default]
    WriteThrough,
    /// Only blocks used a second time (`write_through_threshold` 2).
    WriteThroughSelective,
    /// Only blocks evicted from the GPU (not modelled with a storage backend).
    WriteBack,
}

/// `--hicache-storage-prefetch-policy`: how long a request waits for its prefetch from storage.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, Default, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PrefetchPolicy {
    /// sglang's default: the request is scheduled whenever it would be; what has arrived by
    /// then counts.
    #[default]
    BestEffort,
    /// The request waits until the whole prefetch is in host memory.
    WaitComplete,
    /// It waits at most `prefetch_timeout_base + prefetch_timeout_per_ki_token × tokens/1024`.
    Timeout,
}

/// A prefill pool's HiCache, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HiCacheParams {
    /// Host-memory tier per instance, tokens.
    pub host_tokens: u64,
    /// `--hicache-write-policy`.
    pub write_policy: WritePolicy,
    /// `--hicache-storage-backend mooncake`: the shared `[kv_store]` is the third tier.
    pub storage: bool,
    /// `--hicache-storage-prefetch-policy`.
    pub prefetch: PrefetchPolicy,
    /// KV bytes of one token over the instance's attention-TP ranks (what a tier moves).
    pub bytes_per_token: u64,
    /// GPU ↔ host bandwidth of the instance (its attention-TP ranks' PCIe links), bytes/ns.
    pub pcie_bytes_per_ns: f64,
}

/// A decode pool's offload of its generated KV to the store
/// (`--disaggregation-decode-enable-offload-kvcache`: sglang's `DecodeKVCacheOffloadManager`),
/// checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeOffloadParams {
    /// The offload's own host pool per instance, tokens (`hicache_size` GB per rank, or
    /// `hicache_ratio` × the GPU KV pool): a block stays there from its GPU → host copy until
    /// its write to the store ends.
    pub host_tokens: u64,
    /// KV bytes of one token over the instance's attention-TP ranks (what a block moves).
    pub bytes_per_token: u64,
    /// GPU → host bandwidth of the instance (its attention-TP ranks' PCIe links), bytes/ns.
    pub pcie_bytes_per_ns: f64,
}

/// The ids of the 512-token blocks each trace row's *output* completes (the prompt's last
/// partial block filled up by generated tokens, then whole blocks of them), derived from the
/// trace at load time (`workload::trace::answers`): what a decode that offloads its KV
/// (`disaggregation_decode_enable_offload_kvcache`) writes to the store, named as the later
/// turn that reuses them names them. Indexed by row (= request id: requests are numbered in
/// trace order from 0).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnswerBlocks {
    /// `ends[i]`: end of row `i`'s ids in `ids` (row `i` has `ids[ends[i-1]..ends[i]]`).
    ends: Vec<u32>,
    ids: Vec<u64>,
    /// Rows whose blocks a later row names (the rest have fresh ids nothing will hit).
    pub continued: u64,
}

impl AnswerBlocks {
    /// A table from each row's ids, in row order, and the count of rows a later row continues.
    pub fn new(rows: impl IntoIterator<Item = Vec<u64>>, continued: u64) -> Self {
        let mut t = Self {
            continued,
            ..Self::default()
        };
        for r in rows {
            t.ids.extend_from_slice(&r);
            t.ends
                .push(u32::try_from(t.ids.len()).expect("fewer than 2^32 answer blocks"));
        }
        t
    }

    /// The answer blocks of row (request) `row`, in order; empty past the table.
    pub fn of(&self, row: u64) -> &[u64] {
        let Ok(i) = usize::try_from(row) else {
            return &[];
        };
        let Some(&end) = self.ends.get(i) else {
            return &[];
        };
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.ids[start as usize..end as usize]
    }

    /// Rows in the table.
    pub fn rows(&self) -> usize {
        self.ends.len()
    }

    /// Answer blocks over all rows.
    pub fn blocks(&self) -> usize {
        self.ids.len()
    }
}

/// `[kv_store]`: the Mooncake Store shared by every prefill instance whose pool sets
/// `hicache_storage_backend = "mooncake"`, and every decode instance whose pool sets
/// `disaggregation_decode_enable_offload_kvcache`.
#[derive(Clone, Debug, PartialEq)]
pub struct KvStoreParams {
    /// Capacity, tokens (`None`: unbounded).
    pub capacity_tokens: Option<u64>,
    /// Nodes whose DRAM holds it.
    pub nodes: Vec<u32>,
    /// Least recently used blocks make room (`lru`); otherwise a full store takes no more.
    pub evict: bool,
}

impl Pool {
    /// This pool's instances in words, with the global numbers of its servers (`first` the
    /// first's): `1 (instance 4)`, `4 (instances 0–3)`, DP ranks as servers of an instance, a
    /// resizing pool's slots and starting count (`initial`, this role's of `[autoscaler]`).
    /// The reports and `pdsim explain` say it alike.
    pub fn instances_text(&self, first: u32, initial: Option<u32>) -> String {
        let last = first + self.servers().max(1) - 1;
        match (self.instances, self.servers() / self.instances.max(1)) {
            // Each DP rank is a server of its own (its batch, queue and KV pool), not an
            // instance: an instance of 16 ranks is one sglang server of 16 GPUs' ranks.
            (_, ranks) if ranks > 1 => format!(
                "{} × {ranks} DP ranks (servers {first}–{last})",
                self.instances
            ),
            _ if first == last => format!("1 (instance {first})"),
            _ if let Some(n) = initial => format!(
                "up to {} ({n} at the start; instances {first}–{last})",
                self.servers()
            ),
            _ => format!("{} (instances {first}–{last})", self.servers()),
        }
    }

    /// Servers the simulation runs for this pool: one per instance, or one per DP rank of
    /// each instance with DP attention (each rank has its own batch and KV pool). Results,
    /// faults and the timeseries number these.
    pub fn servers(&self) -> u32 {
        self.instances * self.parallel.dp_ranks()
    }

    /// How this pool stores a KV element, for the bytes a token takes
    /// ([`crate::spec::ModelSpec::kv_token_bytes_rank`]): sglang's FP4 pool under
    /// `--kv-cache-dtype fp4_e2m1`, whole bytes otherwise.
    pub fn kv_elem(&self) -> crate::spec::model::KvElem {
        if crate::spec::server::is_fp4_kv(&self.server.kv_cache_dtype) {
            crate::spec::model::KvElem::Fp4
        } else {
            crate::spec::model::KvElem::Bytes(self.kv_dtype_bytes)
        }
    }
}

/// A validated arrival process.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// Exponential gaps, `rate_per_s` > 0.
    Poisson {
        /// Mean arrivals per second.
        rate_per_s: f64,
    },
    /// Even gaps of `1 / rate_per_s`.
    Constant {
        /// Arrivals per second.
        rate_per_s: f64,
    },
    /// Gamma gaps with mean `1 / rate_per_s` and coefficient of variation `cv`.
    Gamma {
        /// Mean arrivals per second.
        rate_per_s: f64,
        /// Coefficient of variation of the gaps.
        cv: f64,
    },
    /// Poisson at `rate_per_s` during `on_ns`, silent during `off_ns`, repeating.
    OnOff {
        /// Arrivals per second while on.
        rate_per_s: f64,
        /// Burst length, ns.
        on_ns: Nanos,
        /// Silence length, ns.
        off_ns: Nanos,
    },
    /// `base` (Poisson, constant or gamma) run in operational time under a rate profile
    /// (`workload.arrival.rate_profile`, [`rate_profile`]): the rate at `t` is the
    /// base's times the profile's factor at `t`.
    Profiled {
        /// The process in operational time.
        base: Box<Arrival>,
        /// The factor over time.
        profile: std::sync::Arc<rate_profile::RateProfile>,
    },
    /// Non-homogeneous Poisson with a piecewise-constant rate: `(until_ns, rate_per_s)` steps.
    Schedule {
        /// Steps in increasing `until_ns`; the last rate holds afterwards.
        steps: std::sync::Arc<Vec<(Nanos, f64)>>,
    },
}

impl Arrival {
    /// The highest rate the process reaches, requests per second: its rate, a schedule's
    /// largest step, a profiled process's rate at the profile's largest factor.
    pub fn peak_rate_per_s(&self) -> f64 {
        match self {
            Arrival::Poisson { rate_per_s }
            | Arrival::Constant { rate_per_s }
            | Arrival::Gamma { rate_per_s, .. }
            | Arrival::OnOff { rate_per_s, .. } => *rate_per_s,
            Arrival::Profiled { base, profile } => base.peak_rate_per_s() * profile.max_factor(),
            Arrival::Schedule { steps } => steps.iter().map(|s| s.1).fold(0.0, f64::max),
        }
    }
}

/// A validated length distribution, tokens.
#[derive(Clone, Debug, PartialEq)]
pub enum Lengths {
    /// Always this many tokens.
    Fixed(u32),
    /// Uniform on `[min, max]`.
    Uniform {
        /// Tokens.
        min: u32,
        /// Tokens.
        max: u32,
    },
    /// Log-normal with the given mean and coefficient of variation, clamped to `[min, max]`.
    Lognormal {
        /// Mean, tokens.
        mean: f64,
        /// Coefficient of variation.
        cv: f64,
        /// Tokens.
        min: u32,
        /// Tokens.
        max: u32,
    },
    /// Uniform choice among these lengths (from a file).
    Empirical(std::sync::Arc<Vec<u32>>),
    /// `workload.lengths = { path }`: the prompt of a uniformly chosen (input, output) pair of
    /// a trace. The workload draws the pair once and takes its output from the same pair
    /// ([`Lengths::PairedOutput`]), so the correlation of the two survives.
    PairedInput(std::sync::Arc<Vec<(u32, u32)>>),
    /// The output of the pair drawn for [`Lengths::PairedInput`].
    PairedOutput(std::sync::Arc<Vec<(u32, u32)>>),
}

impl Lengths {
    /// The largest length this distribution can produce.
    pub fn max(&self) -> u32 {
        match self {
            Lengths::Fixed(v) => *v,
            Lengths::Uniform { max, .. } | Lengths::Lognormal { max, .. } => *max,
            Lengths::Empirical(v) => v.iter().copied().max().unwrap_or(0),
            Lengths::PairedInput(v) => v.iter().map(|p| p.0).max().unwrap_or(0),
            Lengths::PairedOutput(v) => v.iter().map(|p| p.1).max().unwrap_or(0),
        }
    }
}

/// A validated workload.
#[derive(Clone, Debug)]
pub enum Workload {
    /// Generated from an arrival process and two length distributions.
    Synthetic {
        /// Arrival process.
        arrival: Arrival,
        /// Prompt lengths.
        input: Lengths,
        /// Output lengths.
        output: Lengths,
    },
    /// Replayed from a trace, streamed: rows are read as the run reaches them.
    Trace {
        /// Where the rows come from and how their times are rescaled.
        source: TraceSource,
    },
    /// Conversations (`[workload.sessions]`): session starts follow `arrival`; a session's
    /// first prompt is drawn from `input`, every turn's output from `output`, and each later
    /// turn re-sends the growing context after a think time (`workload::sessions`).
    Sessions {
        /// When sessions start.
        arrival: Arrival,
        /// First-turn prompt lengths.
        input: Lengths,
        /// Output lengths of every turn.
        output: Lengths,
        /// Turns, think times, context growth and the context cap.
        sessions: SessionParams,
    },
}

impl Workload {
    /// Whether requests are turns of conversations (`[workload.sessions]`, or a trace with
    /// `session_id`s).
    pub fn has_sessions(&self) -> bool {
        match self {
            Workload::Sessions { .. } => true,
            Workload::Trace { source } => source.sessions.is_some(),
            Workload::Synthetic { .. } => false,
        }
    }
}

/// `[workload.sessions]`, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionParams {
    /// Turns per session (≥ 1).
    pub turns: Lengths,
    /// Time between a turn's completion (as the client sees it) and the next turn's arrival.
    pub think: ThinkTime,
    /// New user tokens each later turn appends after the previous answer.
    pub user_tokens: Lengths,
    /// The model's context length, tokens: a turn's prompt plus its output must fit.
    pub max_context_tokens: u32,
    /// What happens to a turn that would not fit.
    pub on_context_full: ContextFull,
}

/// A think-time distribution, ns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ThinkTime {
    /// Always this long.
    Fixed(Nanos),
    /// Exponential with this mean.
    Exponential {
        /// Mean, ns.
        mean_ns: f64,
    },
    /// Log-normal with this mean and coefficient of variation.
    Lognormal {
        /// Mean, ns.
        mean_ns: f64,
        /// Standard deviation ÷ mean.
        cv: f64,
    },
}

/// `on_context_full`: what a chat front-end does with a conversation that outgrew the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextFull {
    /// The session ends ("this conversation is too long; start a new chat").
    End,
    /// The oldest tokens are dropped to fit (a sliding window): the prompt no longer starts
    /// with the previous one, so no block of it is reused.
    Truncate,
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    /// Arrival time in ns from the trace start. Azure: the first row is 0 (absolute
    /// timestamps are re-based). Mooncake (`timestamp` ms × 1e6), Vidur and pdsim CSV
    /// (seconds × 1e9): kept as given, rounded to the nearest ns; these are already
    /// relative to the start.
    pub arrival_ns: u64,
    /// Prompt length in tokens (≥ 1).
    pub input_tokens: u32,
    /// Generated length in tokens (≥ 1).
    pub output_tokens: u32,
    /// Prefix-chained ids of the prompt's 512-token blocks (`ceil(input_tokens / 512)` of
    /// them), or empty when the format has no prefix information.
    pub hash_ids: Vec<u64>,
    /// The conversation the row belongs to (`session_id`, pdsim CSV and Mooncake JSON lines
    /// only; `None` when the trace has none).
    pub session_id: Option<u64>,
    /// Its turn in that conversation, from 0 (`turn`, optional even with `session_id`:
    /// file order numbers the turns then).
    pub turn: Option<u32>,
    /// How long its client waits, ns from its arrival, before it disconnects (`timeout_s`,
    /// pdsim CSV and Mooncake JSON lines only; `None`: the row gives no deadline, and
    /// `[workload.client_timeout]`, if set, draws one).
    pub timeout_ns: Option<u64>,
}

/// One pass over a trace's rows in file order; an unreadable row is its error message (which
/// names the file and line).
pub type TraceRows = Box<dyn Iterator<Item = Result<TraceRow, String>> + Send>;

/// A validated trace to replay without holding it in memory: `scenario/` checked every row
/// once and hands the simulation a way to read them again. Replayed arrival of a row:
/// `round((arrival_ns - base_ns) × scale)`.
#[derive(Clone)]
pub struct TraceSource {
    /// Opens a fresh pass over the rows (the scenario layer's reader; the simulation never
    /// opens a file itself).
    pub open: std::sync::Arc<dyn Fn() -> TraceRows + Send + Sync>,
    /// Rows to replay (the trace's, or `limit`'s).
    pub rows: u64,
    /// Arrival of the first row, ns: replayed times start at 0.
    pub base_ns: Nanos,
    /// Factor on arrival gaps (`time_scale`, or what `rate_per_s` implies).
    pub scale: f64,
    /// The file, for messages.
    pub path: PathBuf,
    /// The blocks each row's output completes, when a decode pool offloads to the store
    /// (derived at load time; `None` otherwise, and nothing is derived).
    pub answers: Option<std::sync::Arc<AnswerBlocks>>,
    /// Closed-loop replay of the rows' sessions, when the trace has `session_id`s.
    pub sessions: Option<TraceSessions>,
    /// Whether some row gives its client's deadline (`timeout_s`): the run then tracks
    /// client disconnects even without `[workload.client_timeout]`.
    pub deadlines: bool,
}

/// How a trace with `session_id`s is replayed (`workload::sessions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceSessions {
    /// A later turn arrives at `max(its replayed time, previous turn's end + think_ns)`.
    pub think_ns: Nanos,
    /// One past the trace's largest block id: ids the replay makes up (for rows without
    /// `hash_ids`) start here.
    pub first_fresh_id: u64,
}

impl std::fmt::Debug for TraceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSource")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .field("base_ns", &self.base_ns)
            .field("scale", &self.scale)
            .finish()
    }
}

/// The fabric of a scenario, built once by `scenario/` (from `[fabric]`, `[hardware]` and the
/// placement) in the fabric's own types, so the simulation hands them to `Fabric::build` as
/// they are.
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// Switch tier, NICs and NVLink, over the nodes the placement uses.
    pub topology: crate::fabric::TopologyConfig,
    /// Mooncake's transfer model (`fabric/calibration.rs`): the calibrated parameters with the
    /// scenario's network latency and RDMA engine rate.
    pub model: crate::fabric::FabricParams,
    /// Latency of a control message, ns.
    pub control_latency_ns: Nanos,
    /// Whether DeepEP's inter-node all-to-all runs as fabric flows (`fabric.a2a_flows`).
    pub a2a_flows: bool,
    /// Mooncake's transport (`fabric.transport`).
    pub transport: crate::fabric::Transport,
}

fn is_seed(v: &crate::spec::SglangVersion) -> bool {
    *v == crate::spec::SglangVersion::Seed
}

/// sglang's PD knobs.
#[derive(Clone, Debug, Serialize)]
pub struct SglangParams {
    /// Behaviour profile.
    pub profile: Profile,
    /// The sglang release (`[sglang] version`): which flags exist and which guards run.
    /// Left out of serialized results at the default, so older scenarios keep their bytes.
    #[serde(skip_serializing_if = "crate::config::is_seed")]
    pub version: crate::spec::SglangVersion,
    /// `--disaggregation-enable-kv-checksum` on every server. Left out when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub kv_checksum: bool,
    /// `SGLANG_DISAGG_STAGING_BUFFER=1` with `SGLANG_DISAGG_STAGING_POOL_SIZE_MB` of this many
    /// MiB per decode rank; `None` when off (left out of results then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staging_pool_mb: Option<u64>,
    /// `--disaggregation-transfer-backend`. Left out at the default (`mooncake`).
    #[serde(skip_serializing_if = "crate::spec::TransferBackend::is_mooncake")]
    pub transfer_backend: crate::spec::TransferBackend,
    /// `mooncake_tcp`'s per-GPU TCP rate, bytes/ns (`None` otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_bytes_per_ns: Option<f64>,
    /// `SGLANG_ENABLE_FAILED_SESSION_PROBE` with a pass every this many ns; `None` when off
    /// (left out of results then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_session_probe_ns: Option<Nanos>,
    /// Decode `WaitingForInput` timeout, ns.
    pub waiting_timeout_ns: Nanos,
    /// Prefill `Bootstrapping` timeout, ns.
    pub bootstrap_timeout_ns: Nanos,
    /// Transfer-queue shards per prefill instance.
    pub queue_size: u32,
}

impl SglangParams {
    /// The prefill sender's `Bootstrapping` clock, ns, or `None` where the backend's sender has
    /// none in this version (NIXL before sglang PR #34692:
    /// [`crate::spec::TransferBackend::has_sender_bootstrap_timeout`]).
    #[inline]
    pub fn sender_timeout_ns(&self) -> Option<Nanos> {
        self.transfer_backend
            .has_sender_bootstrap_timeout(self.version)
            .then_some(self.bootstrap_timeout_ns)
    }
}

/// Latency targets (`[slo]`): per-request thresholds for attainment, percentile targets, and
/// the least attainment a run must reach to meet them. Each target's population is stated
/// where it is evaluated (`metrics::slo`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, Default, PartialEq)]
pub struct Slo {
    /// Per-request TTFT threshold, ns.
    pub ttft_ns: Option<Nanos>,
    /// Per-request TPOT threshold, ns.
    pub tpot_ns: Option<Nanos>,
    /// TTFT percentile targets, ms, at [`SLO_PERCENTILES`] (p50, p90, p99).
    pub ttft_pct_ms: [Option<f64>; 3],
    /// TPOT percentile targets, ms, at [`SLO_PERCENTILES`].
    pub tpot_pct_ms: [Option<f64>; 3],
    /// Least share of arrived requests that must meet the per-request thresholds, 0–1.
    pub attainment_min: Option<f64>,
    /// Per-request threshold on the request's worst inter-token gap (Mooncake's TBT), ns.
    /// Left out of `plan.json` and `sweep.json` when not set, so their bytes hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tbt_ns: Option<Nanos>,
    /// Per-request threshold on end-to-end latency ÷ output tokens, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_per_token_ns: Option<Nanos>,
    /// ITL percentile targets over every inter-token gap of every request, ms, at
    /// [`SLO_PERCENTILES`].
    #[serde(default, skip_serializing_if = "no_target")]
    pub itl_pct_ms: [Option<f64>; 3],
    /// TBT percentile targets over requests (each request's worst gap), ms.
    #[serde(default, skip_serializing_if = "no_target")]
    pub tbt_pct_ms: [Option<f64>; 3],
}

fn no_target(t: &[Option<f64>; 3]) -> bool {
    t.iter().all(Option::is_none)
}

/// The percentiles an `[slo]` target may name (`ttft_p50_ms`, `ttft_p90_ms`, `ttft_p99_ms`).
pub const SLO_PERCENTILES: [u32; 3] = [50, 90, 99];

/// The per-request thresholds of `[slo]`, ns: a request attains the SLO when it completed
/// within every one set (DistServe's goodput counts such requests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Thresholds {
    /// `slo.ttft_ms`.
    pub ttft_ns: Option<Nanos>,
    /// `slo.tpot_ms`.
    pub tpot_ns: Option<Nanos>,
    /// `slo.tbt_ms`: the request's worst inter-token gap.
    pub tbt_ns: Option<Nanos>,
    /// `slo.e2e_per_token_ms`: end-to-end latency ÷ output tokens.
    pub e2e_per_token_ns: Option<Nanos>,
}

impl Thresholds {
    /// Whether any threshold is set.
    pub fn any(&self) -> bool {
        self.ttft_ns.is_some()
            || self.tpot_ns.is_some()
            || self.tbt_ns.is_some()
            || self.e2e_per_token_ns.is_some()
    }
}

impl Slo {
    /// Whether any target is set (a run with none has no verdict).
    pub fn any(&self) -> bool {
        self.thresholds().any()
            || self.attainment_min.is_some()
            || self
                .ttft_pct_ms
                .iter()
                .chain(&self.tpot_pct_ms)
                .chain(&self.itl_pct_ms)
                .chain(&self.tbt_pct_ms)
                .any(Option::is_some)
    }

    /// The per-request thresholds.
    #[inline]
    pub fn thresholds(&self) -> Thresholds {
        Thresholds {
            ttft_ns: self.ttft_ns,
            tpot_ns: self.tpot_ns,
            tbt_ns: self.tbt_ns,
            e2e_per_token_ns: self.e2e_per_token_ns,
        }
    }

    /// Whether a target on inter-token gaps (ITL or TBT) is set.
    pub fn on_gaps(&self) -> bool {
        self.tbt_ns.is_some()
            || self
                .itl_pct_ms
                .iter()
                .chain(&self.tbt_pct_ms)
                .any(Option::is_some)
    }
}

/// A scenario the simulation can trust: every key checked, every path resolved.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// `run.name`: safe as a folder name.
    pub name: String,
    /// Seed of every random stream.
    pub seed: u64,
    /// Arrivals stop at this time, ns.
    pub duration_ns: Nanos,
    /// At most this many arrivals.
    pub max_requests: Option<u64>,
    /// The run stops at `duration_ns + drain_timeout_ns` whatever is in flight.
    pub drain_timeout_ns: Nanos,
    /// The GPU every instance runs on.
    pub gpu: GpuSpec,
    /// `hardware.calibration` as given: a calibration name or the calibration file's path.
    pub calibration: String,
    /// The step-time parameters that calibration gives for `gpu`.
    pub compute: crate::spec::ComputeParams,
    /// What a calibration file (`pdsim calibrate`) says it measured; `None` for a built-in
    /// calibration or a kernel-table file.
    pub calibration_measured: Option<crate::spec::calibration::MeasuredOn>,
    /// GPUs per node: the unit of placement and billing, each node with its own NICs.
    pub gpus_per_node: u32,
    /// GPUs of one NVLink domain: a whole number of nodes (`gpus_per_node` unless
    /// `hardware.nvlink_domain_gpus` or `hardware.system` says more; 72 for an NVL72 rack of
    /// 4-GPU trays). TP all-reduce and DeepEP stay on NVLink inside it.
    pub nvlink_domain_gpus: u32,
    /// Price of one GPU-hour, US dollars (`hardware.usd_per_gpu_hour`): cost figures in the
    /// summary and the plan when given.
    pub usd_per_gpu_hour: Option<f64>,
    /// What is billed (`hardware.billing`): the pools' GPUs, or every GPU of the nodes they span.
    pub billing: Billing,
    /// Prefill pools then decode pools, in file order within each role.
    pub pools: Vec<Pool>,
    /// The fabric.
    pub fabric: FabricConfig,
    /// Faults in time order.
    pub faults: Vec<FaultSpec>,
    /// Where every instance's ranks sit, and the nodes the cluster spans.
    pub placement: capacity::Placement,
    /// Workload.
    pub workload: Workload,
    /// Client disconnects and what the router propagates (`[workload.client_timeout]`,
    /// `router.abort_propagation`); `None` when the scenario sets neither.
    pub aborts: Option<aborts::AbortParams>,
    /// The router: a policy per side and `cache_aware`'s parameters.
    pub router: RouterParams,
    /// The shared Mooncake Store (`[kv_store]`), if any.
    pub kv_store: Option<KvStoreParams>,
    /// sglang knobs.
    pub sglang: SglangParams,
    /// Latency targets.
    pub slo: Slo,
    /// Who sizes the pools during the run (`[autoscaler]`; static when the scenario has none).
    pub autoscaler: autoscale::Autoscaler,
    /// How the pools change size under a resizing policy (`None` under `static`): the slots
    /// each pool's `instances` now counts, its initial size and what starts cost.
    pub lifecycle: Option<autoscale::Lifecycle>,
    /// The transfer plan of every (prefill pool, decode pool) pair, by pool index.
    pub plans: std::collections::BTreeMap<(usize, usize), std::sync::Arc<crate::layout::PairPlan>>,
    /// The file as resolved after `--set`, recorded in `run.json`.
    pub resolved: serde_json::Value,
    /// Where the scenario was read from.
    pub source: PathBuf,
    /// Every file the scenario names (traces, lengths, model configs, calibrations, step
    /// times): the path as written (relative to the scenario) and as resolved. Sweeps
    /// fingerprint their bytes so shards of different inputs never merge.
    pub inputs: Vec<(String, PathBuf)>,
    /// Warnings about legal but doubtful choices (a calibration measured on another GPU,
    /// model or TP), printed by the verbs that run the scenario.
    pub notes: Vec<String>,
}

impl Scenario {
    /// The pools whose step times are a measured profile (`pools.step_times`), by name.
    pub fn profiled_pools(&self) -> Vec<&str> {
        self.pools
            .iter()
            .filter(|p| p.step_times.is_some())
            .map(|p| p.name.as_str())
            .collect()
    }
}

/// A validated fault.
#[derive(Clone, Debug)]
pub struct FaultSpec {
    /// When, ns.
    pub at_ns: Nanos,
    /// What happens.
    pub action: FaultAction,
}

/// What a fault does.
#[derive(Clone, Debug)]
pub enum FaultAction {
    /// Something in the fabric breaks or heals.
    Fabric(crate::fabric::Fault),
    /// A global instance crashes; it restarts after `restart_ns` if given.
    Crash {
        /// The instance, by its global number (prefills first, as `requests.csv` numbers them).
        instance: crate::vocab::ids::InstanceId,
        /// Restart delay, ns.
        restart_ns: Option<Nanos>,
    },
}

/// Upper bound on a unified pool's slot count (its oracle keeps a record per slot).
pub const MAX_UNIFIED_SLOTS: u32 = 65_536;

/// State slots of a hybrid instance when `max_running_requests` is not set: sglang sizes its
/// mamba pool for the running batch; this is the cap on concurrent hybrid requests.
pub const DEFAULT_STATE_SLOTS: u32 = 256;

/// Validation bounds (`vocab::limits`), here too because the checked configuration is where
/// most of them are enforced.
pub use crate::vocab::limits;
