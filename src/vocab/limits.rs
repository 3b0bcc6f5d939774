//! Validation bounds: what the simulator can represent and hold in memory. Each is stated in
//! the error that enforces it. On the ground floor because every floor that reads an input
//! (the scenario checker, the launch-line parser, the planner) enforces them.

/// Longest duration any one key may give, seconds (≈ 31.7 years). The clock is `u64` ns,
/// which holds 2⁶⁴ ns ≈ 1.8·10¹⁰ s; a run's span is the sum of a handful of durations
/// (arrivals + drain, a fault time + a restart delay, a timer set at the last moment), so
/// each is kept to 1/18 of the clock and no sum of them can overflow it.
pub const MAX_DURATION_S: f64 = 1e9;
/// Most attention-TP ranks of one instance (`tp_size / dp_size`): the transfer oracle keeps
/// which ranks wrote a page in a 64-bit set. Above any deployment: 16 is two 8-GPU nodes.
pub const MAX_ATTN_TP: u32 = 64;
/// Most `--jobs` (worker threads) of a sweep or plan: far above any machine's cores, and low
/// enough that the thread pool starts at once (a million spent minutes spawning threads).
pub const MAX_JOBS: usize = 1024;
/// Longest `run.name`, characters: it names the default output folder (`results/<name>/`,
/// `results/<name>-sweep/`, `-plan/`, and `check --out`'s `<name>-<n>/` for a repeated name),
/// and a path component may hold at most 255 bytes (Linux `NAME_MAX`, macOS too); 200 leaves
/// room for every suffix pdsim adds.
pub const MAX_RUN_NAME: usize = 200;
/// GPUs per node: the largest NVLink domains sold are 72–576 GPUs; 1024 leaves room.
pub const MAX_GPUS_PER_NODE: u32 = 1024;
/// Most `num_reserved_decode_tokens`: far beyond any context length, so that the budget's
/// products stay far from overflow.
pub const MAX_RESERVED_DECODE_TOKENS: u32 = 1 << 24;
/// Most `disaggregation_decode_extra_slots` per decode worker: a request row each, far beyond
/// any batch a worker holds.
pub const MAX_DECODE_EXTRA_SLOTS: u32 = 1 << 20;
/// NICs per node, per GPU of the node (a rail design has 1–2; 8 leaves room).
pub const MAX_NICS_PER_GPU: u32 = 8;
/// GPUs in the whole cluster (instances × tp_size summed over pools): the fabric, the
/// placement and the per-instance state all grow with it.
pub const MAX_CLUSTER_GPUS: u32 = 65_536;
/// `pools.node` must be below this many nodes.
pub const MAX_NODES: u32 = 4096;
/// HBM per GPU, GB: today's parts carry 80–288 GB; 4 TB leaves room without letting the
/// KV page count (and the allocators sized by it) run out of memory.
pub const MAX_HBM_GB: f64 = 4096.0;
/// Upper bound on a GPU's dense peak, TFLOP/s (B200: ~2,250 BF16): far above any GPU, low
/// enough that every step time stays a finite number of nanoseconds.
pub const MAX_TFLOPS: f64 = 1e6;
/// Upper bound on HBM bandwidth, TB/s (B200: 8).
pub const MAX_HBM_TB_S: f64 = 1e4;
/// Upper bound on NVLink or NIC host-side bandwidth, GB/s or Gb/s (NVLink 5: 1,800 GB/s).
pub const MAX_LINK_RATE: f64 = 1e7;
/// Transfer-queue shards per prefill instance (`sglang.queue_size`, sglang's default 4):
/// each shard is a queue object per prefill instance.
pub const MAX_QUEUE_SIZE: u32 = 4096;
/// The gamma arrival's CV must lie in this range: below it the gaps are constant to one
/// part in 10⁶ (use `constant`), and Marsaglia–Tsang's shape 1/cv² stops being a finite
/// number of draws long before cv reaches 1e-154; above it nearly every gap is 0 ns.
pub const GAMMA_CV_RANGE: (f64, f64) = (1e-3, 1e3);
/// The largest `cv` of a log-normal length or think time. Its σ² = ln(1 + cv²) (13.8 at 1,000)
/// must be finite: past ~1.3e154, cv² overflows, σ is infinite and every draw is NaN (a length
/// of 0, which then wraps into an endless request).
pub const MAX_LOGNORMAL_CV: f64 = 1e3;
/// Memory the per-page and per-slot records of all instances may take together, bytes
/// (plain allocators keep 4 B per page; the layout oracle of a watched decode instance
/// keeps about 56 B per page, slot and metadata row: ≈ 26 MB for a unified Qwen3-Next
/// instance, so about 80 of them). 2 GiB keeps a run within a laptop's memory.
pub const MAX_PAGE_RECORD_BYTES: u64 = 2 << 30;
/// Segments of a `--set` key (the deepest scenario key has 5).
pub const MAX_SET_KEY_SEGMENTS: usize = 32;

/// The most requests a synthetic workload may be asked for without `run.max_requests`
/// (its peak rate × `run.duration_s`): ~10⁸ is hours of simulation at pdsim's ~0.25 M requests
/// a second, and a rate written by mistake (1e300 req/s) would otherwise run for ever.
pub const MAX_UNBOUNDED_ARRIVALS: f64 = 1e9;
