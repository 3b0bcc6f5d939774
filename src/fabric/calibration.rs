//! Every fitted or borrowed parameter of the fabric, with its source: [`FabricParams`].
//!
//! # A transfer's achieved rate
//!
//! What a transfer gets is not a fixed fraction of line rate: it depends on what is on the NIC
//! and on who feeds it. The model has four limits, each a named parameter, each where it
//! physically is:
//!
//! ```text
//! NIC (TX, RX)      = nic_efficiency × line rate                 shared max-min by all flows
//! GPU engine (TX/RX)= engine_bytes_per_ns per GPU                 Mooncake batches only
//! one batch         ≤ min(batch_rate_bytes_per_ns, bytes / (work_requests × per_wr_ns))
//! one batch         pays base_latency + batch_overhead before its first byte
//! ```
//!
//! * **Wire efficiency** (`nic_efficiency`, fitted 0.9225): what a NIC carries when enough
//!   batches keep it busy — headers, acknowledgements, retransmission slack.
//! * **The GPU's engine** (`engine_bytes_per_ns`, fitted 23.75 B/ns): the most one GPU's
//!   Mooncake transfer engine moves between GPU memory and its NICs — the PCIe / GPUDirect path
//!   and the engine's posting threads (sglang runs one engine per TP rank process). Mooncake's
//!   8 × 400 Gb/s RoCE figure shows it (190 GB/s at concurrency 64 is 47.5 % of line while the
//!   same engine reaches 87 % on 200 Gb/s NICs). It is a link of the GPU, not of the NIC: on a
//!   host whose GPUs share NICs (4 × 400 Gb/s for 8 GPUs) each GPU brings its own engine and
//!   the NIC carries their sum up to its wire rate (~41 GB/s measured by Mooncake's sglang
//!   table); DeepEP's all-to-all (GPU-initiated, NVSHMEM/IBGDA, 43–58 GB/s per 400 Gb/s NIC in
//!   DeepEP's README) does not cross it. Until issue 22 this was a cap on each NIC
//!   (`hardware.nic_host_gbps`), which halved shared-NIC hosts and throttled DeepEP. On
//!   `fabric.transport = "efa"` (Mooncake's EFA transport) there is no engine limit: the EFA
//!   tables reach 91–97.5 % of line with two NICs per GPU ([`Transport`]).
//! * **One batch** (`batch_rate_bytes_per_ns`, fitted 18.3 B/ns): a single Mooncake batch (one
//!   request's KV of one rank: sglang makes one `batch_transfer_sync` per chunk and decode
//!   rank, every layer in it — `_send_kvcache_generic`, conn.py @ 0005973a) is driven by one
//!   engine's workers posting its 64 KiB slices; alone it reaches 18.3 B/ns whatever the NIC can
//!   carry (the vLLM 1P1D table, one request at a time on 25 B/ns NICs). Several batches on one
//!   engine add up to the engine's limit.
//! * **Per work request** (`per_wr_ns`, borrowed 1 µs): batches of many small writes
//!   (head-sliced TP reslicing) are bound by the sender's cost per work request.
//! * **Per-batch floor** (`base_latency_ns + batch_overhead_ns` = 386 µs, fitted): segment
//!   lookup, request building, submission and completion polling of one batch. sglang's own
//!   cost around it (its worker's bookkeeping, the aux call) is `sglang::transfer`'s
//!   `SEND_OVERHEAD_NS`, fitted to the sglang table below.
//! * Over NVLink (two GPUs of one node: co-located prefill and decode) a batch is a device copy
//!   (Mooncake's NVLink transport): neither the per-batch nor the per-WR cap applies, only the
//!   GPUs' NVLink links.
//!
//! # What was fitted, and to what (`tests/fabric/fabric_calibration.rs` and
//! `tests/fabric/fabric_scenarios.rs` print every row)
//!
//! 1. **vLLM 1P1D table** (`docs/numbers.md` §4.1; Mooncake docs
//!    `performance/vllm/vllm-v1-pd-performance.md`: Qwen3-8B TP8 on H800, 8 × ConnectX-7 at
//!    **200 Gb/s**, one request at a time). Each of the 8 ranks sends `18,432 × tokens` bytes as
//!    one batch of 72 writes on its own NIC. Alone on a 25 B/ns NIC the batch limit binds, so the
//!    table identifies the floor (386 µs) and the batch rate (18.3 B/ns); the minimax fit over
//!    its 9 rows leaves every row within ±5.6 %.
//! 2. **Mooncake FAST'25 §5.4.1**, concurrency 64, ≥ 128 KB blocks: 87 GB/s over 4 × 200 Gb/s
//!    (NIC-bound: sets the wire efficiency) and 190 GB/s over 8 × 400 Gb/s (engine-bound: sets
//!    `engine_bytes_per_ns` = 190 / 8).
//! 3. **Mooncake over AWS EFA** (`design/transfer-engine/efa_transport.md`, 1 MB blocks,
//!    GPU→GPU write, every NIC busy): p6-b300 16 × 400 Gb/s 780 GB/s, p5en 16 × 200 Gb/s
//!    365 GB/s (both fitted) and p5 32 × 100 Gb/s 389 GB/s (held out). `nic_efficiency` =
//!    0.9225 is the minimax of the 87 %, 91.25 % and 97.5 % rows (±6 %); the held-out p5 row
//!    lands at −5.5 %.
//! 4. **Mooncake's sglang PD table** (`docs/numbers.md` §4.3; Mooncake docs
//!    `performance/sglang/sglang-benchmark-results-v1.md`, kvcache-ai/Mooncake PR #2972,
//!    2026-07: sglang 43124cdd, Qwen3-235B-A22B TP8 on H20-3e, **4 × 400 Gb/s for 8 GPUs**, one
//!    request at a time): its 128–1,024-token rows fit sglang's send cost (0.88 ms; every
//!    in-sample row within ±9.8 %); its 2k–32k rows are **held out** — nothing was fitted to a
//!    shared-NIC host — and land at +10 … +15 % (one batch's 18.3 B/ns reads ~14 % slow against
//!    the ~21 GB/s per GPU that 2026 Mooncake reached there).
//!
//! # Held out besides
//! - Mooncake issue #1158 (two H20 servers, 8 × 200 GbE bonds, transfer_engine_bench, 12
//!   threads): 186.55 GB/s — the model's NIC-bound 184.5 GB/s (−1 %).
//! - Mooncake issue #570 (8 × 400 Gb/s InfiniBand, transfer_engine_bench tuned): 163.7 GB/s
//!   over 8 cards — the model's engine-bound 190 GB/s (+16 %).
//!
//! # What was borrowed
//! - `per_wr_ns` (1 µs per work request) cannot be fitted on the tables (large slices there).
//!   It comes from reports of batches of many small blocks: kvcache-ai/Mooncake#826 (a 500 MB
//!   KV batch of 119,296 entries took 93 ms and of 270,000 entries 360 ms: 0.6–1.2 µs per entry
//!   once the bytes' own time is taken off) and #2693 (4 KiB messages, one QP: 0.9–2.7 GB/s per
//!   GPU, i.e. 1.5–4.5 µs per WR). 1 µs is the low end: head-sliced transfers are at least this
//!   slow. With it, 1 KiB head-sliced writes run at 1.02 B/ns, 18× slower than page writes.
//! - Mooncake's engine constants (`MC_SLICE_SIZE`, `MC_RETRY_CNT`, `MC_TRANSFER_TIMEOUT`) are
//!   its defaults (`docs/sglang-pd.md` §3.8).
//! - `remote_detect_ns`: a slice lost on a path that died silently completes with an error only
//!   when the RC transport gives up: ACK timeout `4.096 µs × 2^14` (Mooncake sets `timeout = 14`,
//!   `retry_cnt = 7` in `rdma_endpoint.cpp`) times 8 tries = 537 ms.
//! - `local_detect_ns`: when the sender's own port goes down the driver raises a port-error
//!   event and flushes the QP's work requests at once; 1 ms is an assumption (no measurement
//!   found), small next to `remote_detect_ns`, which is what matters.
//!
//! # Known limits
//! - A host with PCIe relaxed ordering tuned moves ~47 GB/s per GPU over RDMA (Mooncake
//!   `docs/source/performance/gpu-rdma-bandwidth-optimization.md`; ~15 GB/s untuned): such a
//!   host is twice the default engine; set `hardware.rdma_engine_gbps`.
//! - A GPU with two NICs of its own (nics_per_node > gpus_per_node) sends each batch on its
//!   preferred NIC; Mooncake sprays a batch's slices over all of the GPU's preferred NICs.

use crate::engine::{NS_PER_MS, NS_PER_S, NS_PER_US, Nanos};

/// Mooncake 1P1D measurements (`docs/numbers.md`; 8 × 200 Gb/s): `(prompt tokens, transfer ms)`.
pub const MOONCAKE_1P1D: [(u64, f64); 9] = [
    (128, 0.54),
    (256, 0.61),
    (512, 0.92),
    (1024, 1.50),
    (2048, 2.51),
    (4096, 4.75),
    (8192, 8.84),
    (16384, 16.43),
    (32768, 31.65),
];

/// Qwen3-8B KV bytes per token, whole model, bf16 (`docs/numbers.md`).
pub const QWEN3_8B_KV_BYTES_PER_TOKEN: u64 = 147_456;

/// Writes of one rank's whole-prompt transfer in sglang's generic path: one per K and V region
/// of each of Qwen3-8B's 36 layers, the prompt's pages forming one contiguous run.
pub const QWEN3_8B_WRITES_PER_RUN: u64 = 2 * 36;

/// Line rate of the vLLM 1P1D table's NICs, bytes/ns (200 Gb/s ConnectX-7).
pub const MOONCAKE_1P1D_NIC_BYTES_PER_NS: f64 = 25.0;

/// Aggregate-bandwidth measurements at high concurrency: `(label, NICs, line Gb/s per NIC,
/// Mooncake transport, measured GB/s, fitted)`. Sources in the module docs.
pub const AGGREGATE_RATES: [(&str, u32, f64, Transport, f64, bool); 7] = [
    (
        "FAST'25 RoCE 4 x 200 Gb/s, concurrency 64",
        4,
        200.0,
        Transport::Rdma,
        87.0,
        true,
    ),
    (
        "FAST'25 RoCE 8 x 400 Gb/s, concurrency 64",
        8,
        400.0,
        Transport::Rdma,
        190.0,
        true,
    ),
    (
        "EFA p6-b300 16 x 400 Gb/s, 1 MB blocks",
        16,
        400.0,
        Transport::Efa,
        780.0,
        true,
    ),
    (
        "EFA p5en 16 x 200 Gb/s, 1 MB blocks",
        16,
        200.0,
        Transport::Efa,
        365.0,
        true,
    ),
    (
        "EFA p5 32 x 100 Gb/s, 1 MB blocks (held out)",
        32,
        100.0,
        Transport::Efa,
        389.0,
        false,
    ),
    (
        "Mooncake #1158 H20 8 x 200 GbE bonds (held out)",
        8,
        200.0,
        Transport::Rdma,
        186.55,
        false,
    ),
    (
        "Mooncake #570 8 x 400 Gb/s IB, tuned (held out)",
        8,
        400.0,
        Transport::Rdma,
        163.744,
        false,
    ),
];

/// Mooncake's transport between nodes (`fabric.transport`): which engine moves the bytes, and
/// so what one GPU's engine reaches ([`FabricParams::engine_bytes_per_ns`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// `RdmaTransport` (ibverbs over RoCE or InfiniBand): one engine per GPU process, its
    /// limit the fitted [`FabricParams::engine_bytes_per_ns`].
    #[default]
    Rdma,
    /// `EfaTransport` (libfabric over AWS EFA): the EFA tables reach 91–97.5 % of line on every
    /// NIC of a 2-NICs-per-GPU host, so its engine is not the limit (unbounded).
    Efa,
}

impl Transport {
    /// Whether this is the default, [`Transport::Rdma`] (for `skip_serializing_if`).
    pub fn is_rdma(&self) -> bool {
        *self == Transport::Rdma
    }

    /// What one GPU's engine moves each way on this transport, bytes/ns, given the calibrated
    /// `params` (whose `engine_bytes_per_ns` is the RDMA transport's).
    pub fn engine_bytes_per_ns(&self, params: &FabricParams) -> f64 {
        match self {
            Transport::Rdma => params.engine_bytes_per_ns,
            Transport::Efa => f64::INFINITY,
        }
    }
}

/// Parameters of the fabric model (the hardware itself is [`super::TopologyConfig`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FabricParams {
    /// Network latency before a transfer's first byte lands, ns. Default 3 µs (the scenario's
    /// `fabric.base_latency_us`).
    pub base_latency_ns: Nanos,
    /// Fixed cost of one Mooncake batch (one `start_transfer`) on top of `base_latency_ns`:
    /// segment lookup, request building, submission and completion polling, ns.
    /// **Fitted**: 383 µs (floor 386 µs − 3 µs).
    pub batch_overhead_ns: Nanos,
    /// Fraction of the NIC line rate a busy NIC carries, in `(0, 1]` (wire efficiency).
    /// **Fitted**: 0.9225.
    pub nic_efficiency: f64,
    /// Most one GPU's Mooncake transfer engine moves each way between GPU memory and its NICs
    /// (the PCIe / GPUDirect path and the engine's posting threads), bytes/ns, summed over the
    /// batches it has in flight; `INFINITY` for no limit. A link of the GPU's own, so GPUs
    /// sharing a NIC each bring theirs and DeepEP's all-to-all does not cross it.
    /// **Fitted**: 23.75 (Mooncake FAST'25, 8 × 400 Gb/s RoCE, one NIC per GPU).
    pub engine_bytes_per_ns: f64,
    /// Most one batch (one request's KV of one rank) moves on its own, bytes/ns; `INFINITY`
    /// for no limit. **Fitted**: 18.3 (vLLM 1P1D table).
    pub batch_rate_bytes_per_ns: f64,
    /// Sender time per work request (one slice or one small write), ns: caps a flow at
    /// `bytes / (work_requests × per_wr_ns)`. 0 disables the cap. **Borrowed**: 1000.
    pub per_wr_ns: f64,
    /// `MC_SLICE_SIZE`: a write is cut into work requests of at most this many bytes. 65,536.
    pub slice_bytes: u64,
    /// `MC_TRANSFER_TIMEOUT`: a batch fails if not done this long after it was submitted, plus
    /// `timeout_ns_per_byte × bytes`, ns. 30 s.
    pub transfer_timeout_ns: Nanos,
    /// Per-byte extension of the timeout, ns per byte. 1 (Mooncake adds `total_length` ns).
    pub timeout_ns_per_byte: f64,
    /// `MC_RETRY_CNT`: a slice is retried this many times after its first failure. 9.
    pub retry_cnt: u32,
    /// Time for the sender to see a slice fail when its own NIC went down, ns. 1 ms (assumed).
    pub local_detect_ns: Nanos,
    /// Time for the sender to see a slice fail when a remote NIC or a switch link died, ns:
    /// the RC retry timeout, 537 ms.
    pub remote_detect_ns: Nanos,
}

impl Default for FabricParams {
    fn default() -> Self {
        Self {
            base_latency_ns: 3 * NS_PER_US,
            batch_overhead_ns: 383 * NS_PER_US,
            nic_efficiency: 0.9225,
            engine_bytes_per_ns: 23.75,
            batch_rate_bytes_per_ns: 18.3,
            per_wr_ns: 1000.0,
            slice_bytes: 65_536,
            transfer_timeout_ns: 30 * NS_PER_S,
            timeout_ns_per_byte: 1.0,
            retry_cnt: 9,
            local_detect_ns: NS_PER_MS,
            // 4.096 µs × 2^14 × (7 + 1), rounded up to the ns.
            remote_detect_ns: 536_870_912,
        }
    }
}

impl FabricParams {
    /// An ideal fabric for hand calculations: no latency, full line rate, no host, batch or
    /// per-WR limit; the Mooncake timeout and retry constants keep their defaults.
    pub fn ideal() -> Self {
        Self {
            base_latency_ns: 0,
            batch_overhead_ns: 0,
            nic_efficiency: 1.0,
            engine_bytes_per_ns: f64::INFINITY,
            batch_rate_bytes_per_ns: f64::INFINITY,
            per_wr_ns: 0.0,
            ..Self::default()
        }
    }

    /// Work requests of a transfer of `bytes` in `writes` writes: every write is at least one
    /// work request, and none is longer than a slice.
    pub fn work_requests(&self, bytes: u64, writes: u64) -> u64 {
        writes.max(bytes.div_ceil(self.slice_bytes.max(1)))
    }

    /// Sender-side rate cap of such a transfer, bytes/ns (`INFINITY` when there is none).
    pub fn wr_cap(&self, bytes: u64, writes: u64) -> f64 {
        let wr = self.work_requests(bytes, writes);
        if self.per_wr_ns <= 0.0 || wr == 0 {
            f64::INFINITY
        } else {
            bytes as f64 / (wr as f64 * self.per_wr_ns)
        }
    }

    /// What one healthy NIC of `line_bytes_per_ns` moves each way, bytes/ns: its wire
    /// efficiency (the engines that feed it have their own links).
    pub fn nic_capacity(&self, line_bytes_per_ns: f64) -> f64 {
        line_bytes_per_ns * self.nic_efficiency
    }

    /// The most one batch of `bytes` in `writes` writes moves, bytes/ns: the per-batch limit
    /// and the per-work-request cap (`INFINITY` when there is neither).
    pub fn flow_cap(&self, bytes: u64, writes: u64) -> f64 {
        self.wr_cap(bytes, writes).min(self.batch_rate_bytes_per_ns)
    }

    /// Mooncake's deadline for a batch of `bytes`, relative to its submission, ns.
    pub fn timeout_ns(&self, bytes: u64) -> Nanos {
        self.transfer_timeout_ns
            .saturating_add((bytes as f64 * self.timeout_ns_per_byte).ceil() as Nanos)
    }

    /// Checks the ranges the model relies on; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.nic_efficiency > 0.0 && self.nic_efficiency <= 1.0) {
            return Err(format!(
                "nic_efficiency must be in (0, 1], got {}",
                self.nic_efficiency
            ));
        }
        for (name, v) in [
            ("engine_bytes_per_ns", self.engine_bytes_per_ns),
            ("batch_rate_bytes_per_ns", self.batch_rate_bytes_per_ns),
        ] {
            if v.is_nan() || v <= 0.0 {
                return Err(format!(
                    "{name} must be > 0 bytes/ns (INFINITY: no limit), got {v}"
                ));
            }
        }
        if !(self.per_wr_ns.is_finite() && self.per_wr_ns >= 0.0) {
            return Err(format!("per_wr_ns must be >= 0 ns, got {}", self.per_wr_ns));
        }
        if self.slice_bytes == 0 {
            return Err("slice_bytes must be >= 1".into());
        }
        if !(self.timeout_ns_per_byte.is_finite() && self.timeout_ns_per_byte >= 0.0) {
            return Err(format!(
                "timeout_ns_per_byte must be >= 0, got {}",
                self.timeout_ns_per_byte
            ));
        }
        Ok(())
    }
}
