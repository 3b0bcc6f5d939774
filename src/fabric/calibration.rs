//! Every fitted or borrowed parameter of the fabric, with its source: [`FabricParams`].
//!
//! # What was fitted, and to what
//! The 1P1D table of `docs/numbers.md` (Mooncake docs, `performance/vllm/vllm-v1-pd-performance.md`:
//! vLLM, Qwen3-8B TP8 on H800, 8× ConnectX-7 400 Gb/s RoCE, one request at a time) gives the
//! transfer time of a whole prompt's KV. Qwen3-8B holds 147,456 B of KV per token (bf16), so each
//! of the 8 ranks sends `18,432 × tokens` bytes over its own NIC, as one Mooncake batch of
//! `2 × 36 = 72` writes (one per K/V region, the prompt being one contiguous page run). The model
//! of one such rank transfer alone on its NICs is
//!
//! ```text
//! time = base_latency + batch_overhead + bytes / min(nic_efficiency × 50 B/ns, per-WR cap)
//! ```
//!
//! The per-WR cap is `bytes / (work_requests × per_wr_ns)`, `work_requests = max(writes,
//! ceil(bytes / slice_bytes))`; with 64 KiB slices and `per_wr_ns = 1000` it is ≥ 32 B/ns on every
//! row, so it never binds there and the table identifies exactly two numbers: the latency floor
//! (`base_latency + batch_overhead` = 386 µs) and the effective per-NIC rate (`0.366 × 50` =
//! 18.3 B/ns ≈ 146 Gb/s). They minimise the largest relative error over the nine rows (a grid
//! search; `tests/fabric_calibration.rs` prints each row's error, all within ±5.6 %).
//!
//! Why the NIC reaches only ~37 % of line rate: that is what Mooncake achieves on this setup —
//! the table's best row is 142 GiB/s over 8 × 50 GB/s. Mooncake's own figure (FAST'25 §5.4.1,
//! 190 GB/s over 8 × 400 Gb/s at concurrency 64) is 47.5 %, of the same order; the gap to line
//! rate is an open question upstream (kvcache-ai/Mooncake#434). It is modelled as a capacity
//! factor on NIC links only (a host-side limit: the engine cannot drive the NIC faster), so
//! switch links keep their wire rate.
//!
//! # What was borrowed
//! - `per_wr_ns` (1 µs per work request) cannot be fitted on the table (large slices there).
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

/// Mooncake 1P1D measurements (`docs/numbers.md`): `(prompt tokens, transfer ms)`.
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
    /// Fraction of the NIC line rate the transfer engine achieves, in `(0, 1]`; applied to NIC
    /// TX/RX capacities. **Fitted**: 0.366.
    pub nic_efficiency: f64,
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
            nic_efficiency: 0.366,
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
    /// An ideal fabric for hand calculations: no latency, full line rate, no per-WR cost; the
    /// Mooncake timeout and retry constants keep their defaults.
    pub fn ideal() -> Self {
        Self {
            base_latency_ns: 0,
            batch_overhead_ns: 0,
            nic_efficiency: 1.0,
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
