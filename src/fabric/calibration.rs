//! Every fitted or borrowed parameter of the fabric, with its source: [`FabricParams`].
//!
//! # A NIC's achieved rate
//!
//! What a transfer gets is not a fixed fraction of line rate: it depends on what is on the NIC.
//! The model has three limits, each a named parameter:
//!
//! ```text
//! NIC capacity  = min(nic_efficiency × line rate, nic_host_bytes_per_ns)   (shared max-min)
//! one batch     ≤ min(batch_rate_bytes_per_ns, bytes / (work_requests × per_wr_ns))
//! one batch     pays base_latency + batch_overhead before its first byte
//! ```
//!
//! * **Wire efficiency** (`nic_efficiency`, fitted 0.9225): what a NIC carries when enough
//!   batches keep it busy — headers, acknowledgements, retransmission slack.
//! * **Host side** (`nic_host_bytes_per_ns`, fitted 23.75 B/ns): the most a NIC moves between
//!   GPU memory and the wire on the PCIe / GPU side of the node. Only Mooncake's 8 × 400 Gb/s
//!   RoCE figure shows it (190 GB/s at concurrency 64 is 47.5 % of line while the same engine
//!   reaches 87 % on 200 Gb/s NICs and 97.5 % on EFA 400 Gb/s hosts), so it is one parameter
//!   fitted to one row: a hardware property of that testbed, not of Mooncake. A scenario sets
//!   its own with `hardware.nic_host_gbps`; `FabricParams::default` keeps that testbed's.
//! * **One batch** (`batch_rate_bytes_per_ns`, fitted 18.3 B/ns): a single Mooncake batch (one
//!   request's KV of one rank) is driven by one sender thread posting its slices; alone on a
//!   NIC it reaches 18.3 B/ns whatever the NIC can carry (the vLLM 1P1D table, one request at a
//!   time on 25 B/ns NICs). Several batches on one NIC add up to the NIC's capacity.
//! * **Per work request** (`per_wr_ns`, borrowed 1 µs): batches of many small writes
//!   (head-sliced TP reslicing) are bound by the sender's cost per work request.
//! * **Per-request floor** (`base_latency_ns + batch_overhead_ns` = 386 µs, fitted): segment
//!   lookup, request building, submission and completion polling of one batch.
//!
//! # What was fitted, and to what (`tests/fabric_calibration.rs` prints every row)
//!
//! 1. **vLLM 1P1D table** (`docs/numbers.md`; Mooncake docs
//!    `performance/vllm/vllm-v1-pd-performance.md`: Qwen3-8B TP8 on H800, 8 × ConnectX-7 at
//!    **200 Gb/s** — the source's ≈200 GB/s aggregate and its 71.1 % utilisation column say so —
//!    one request at a time). Each of the 8 ranks sends `18,432 × tokens` bytes as one batch
//!    of 72 writes on its own NIC. Alone on a 25 B/ns NIC the batch limit binds, so the table
//!    identifies the floor (386 µs) and the batch rate (18.3 B/ns); the minimax fit over its 9
//!    rows leaves every row within ±5.6 %. (The earlier fit read the NICs as 400 Gb/s and
//!    learnt "36.6 % of line rate" for every NIC: right on this table, 1.3–2.4× too slow
//!    everywhere else.)
//! 2. **Mooncake FAST'25 §5.4.1**, concurrency 64, ≥ 128 KB blocks: 87 GB/s over 4 × 200 Gb/s
//!    (NIC-bound: sets the wire efficiency) and 190 GB/s over 8 × 400 Gb/s (host-bound: sets
//!    `nic_host_bytes_per_ns`).
//! 3. **Mooncake over AWS EFA** (`design/transfer-engine/efa_transport.md`, 1 MB blocks,
//!    GPU→GPU write, the benchmark keeping every NIC busy): p6-b300 16 × 400 Gb/s 780 GB/s,
//!    p5en 16 × 200 Gb/s 365 GB/s (both fitted) and p5 32 × 100 Gb/s 389 GB/s (held out).
//!    These hosts are not host-bound (the EFA figures reach 91–97.5 % of line).
//!    `nic_efficiency` = 0.9225 is the minimax of the 87 %, 91.25 % and 97.5 % rows (±6 %);
//!    the held-out p5 row lands at −5 %.
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
/// host-bound testbed, measured GB/s, fitted)`. Sources in the module docs.
pub const AGGREGATE_RATES: [(&str, u32, f64, bool, f64, bool); 5] = [
    (
        "FAST'25 RoCE 4 x 200 Gb/s, concurrency 64",
        4,
        200.0,
        false,
        87.0,
        true,
    ),
    (
        "FAST'25 RoCE 8 x 400 Gb/s, concurrency 64",
        8,
        400.0,
        true,
        190.0,
        true,
    ),
    (
        "EFA p6-b300 16 x 400 Gb/s, 1 MB blocks",
        16,
        400.0,
        false,
        780.0,
        true,
    ),
    (
        "EFA p5en 16 x 200 Gb/s, 1 MB blocks",
        16,
        200.0,
        false,
        365.0,
        true,
    ),
    (
        "EFA p5 32 x 100 Gb/s, 1 MB blocks (held out)",
        32,
        100.0,
        false,
        389.0,
        false,
    ),
];

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
    /// Most one NIC moves between GPU memory and the wire (PCIe / GPU side), bytes/ns;
    /// `INFINITY` for no limit. **Fitted**: 23.75 (Mooncake FAST'25, 8 × 400 Gb/s RoCE).
    pub nic_host_bytes_per_ns: f64,
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
            nic_host_bytes_per_ns: 23.75,
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
            nic_host_bytes_per_ns: f64::INFINITY,
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
    /// efficiency, within the host side's limit.
    pub fn nic_capacity(&self, line_bytes_per_ns: f64) -> f64 {
        (line_bytes_per_ns * self.nic_efficiency).min(self.nic_host_bytes_per_ns)
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
            ("nic_host_bytes_per_ns", self.nic_host_bytes_per_ns),
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
