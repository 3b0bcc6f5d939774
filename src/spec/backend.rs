//! sglang's KV transfer backends (`--disaggregation-transfer-backend`, `[sglang]
//! transfer_backend`): the choices sglang offers, which of them pdsim runs, and where the ones
//! it runs differ (`docs/sglang-pd.md` §26.3).
//!
//! sglang's choices (`server_args.py` / `arg_groups/choices.py::DISAGG_TRANSFER_BACKEND_CHOICES`,
//! the 2026 tree): `mooncake`, `nixl`, `ascend`, `fake`, `mori`, `mooncake_tcp`. `mooncake_tcp`
//! arrived with PR #26346 (merged 2026-05-26) and `mori` before it, so every pdsim version
//! (the seed, 2026-08-27, and later) has all six. pdsim's transfer worker is Mooncake's
//! (`MooncakeKVManager`, docs/sglang-pd.md §2–§3); `mooncake_tcp` is the same manager over
//! Mooncake's TCP transport (`handle_pd_disaggregation` rewrites it to `mooncake`, sets
//! `MC_FORCE_TCP=1` and clears the IB device), so pdsim runs it with the engine's rate capped
//! at the TCP rate the scenario states.
//!
//! `nixl` and `mori` run as profiles of the same worker: the prefill pushes in all three (no
//! backend pulls), the KV is cut into the same descriptors (one per contiguous page run of each
//! layer region; one per token per region on the head-sliced path), and what differs is read off
//! their managers (`disaggregation/nixl/conn.py::NixlKVManager.transfer_worker`,
//! `disaggregation/mori/conn.py::MoriKVManager.add_transfer_request`, stored 2026 versions):
//! whether the aux and state writes of the last chunk are synchronous calls of their own after
//! the KV ([`TransferBackend::aux_after_kv`]), whether a failed write blacklists the decode
//! session ([`TransferBackend::blacklists_sessions`]), whether an exception kills the worker
//! thread ([`TransferBackend::raise_kills_worker`]), how many threads post a head-sliced
//! target's descriptors ([`TransferBackend::slice_posting_threads`]), whether the prefill's
//! sender has a bootstrap timeout ([`TransferBackend::has_sender_bootstrap_timeout`]) and the
//! texts of their failures. `ascend` and `fake` stay refused.
//!
//! Pure data: no I/O.

use serde::{Deserialize, Serialize};

/// Threads that post one NIXL transfer's descriptors: the worker thread that calls
/// `initialize_xfer` / `transfer` for the target (`NixlKVManager.transfer_worker`).
/// [INFERRED] NIXL's UCX backend runs `num_threads = 8` on prefill (`nixl_agent_config`), but
/// how it spreads one request's descriptors over them is not read; 1 is the assumption.
pub const NIXL_SLICE_POSTING_THREADS: u64 = 1;

/// `SGLANG_MORI_NUM_WORKERS`' default: the MORI `IOEngine`'s RDMA worker threads
/// (`MoriKVManager._init_engine`, `RdmaBackendConfig(qp_per_transfer=4, post_batch_size=-1,
/// num_worker_threads=4, …)`).
pub const MORI_NUM_WORKERS: u64 = 4;

/// A `--disaggregation-transfer-backend` value.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TransferBackend {
    /// Mooncake's transfer engine over RDMA (sglang's default): the prefill pushes RDMA
    /// WRITEs (`MooncakeKVManager.transfer_worker`, `batch_transfer_sync`). What pdsim has
    /// always modelled.
    #[default]
    Mooncake,
    /// Mooncake over TCP (PR #26346): `MC_FORCE_TCP=1`, backend rewritten to `mooncake`.
    MooncakeTcp,
    /// NVIDIA NIXL (`disaggregation/nixl/conn.py::NixlKVManager`): the prefill's
    /// `transfer_worker` posts one NIXL WRITE transfer per (chunk, decode peer)
    /// (`initialize_xfer("WRITE", …)` over a descriptor list) plus the state and aux transfers of
    /// the last chunk, then polls every handle together (`check_xfer_state`); decode learns of
    /// each from a NIXL notification (`update_transfer_status`, `get_new_notifs`).
    Nixl,
    /// AMD MORI (`disaggregation/mori/conn.py::MoriKVManager`): the prefill's scheduler
    /// submits one `IOEngine.batch_write` per layer region (asynchronous), sends the aux row
    /// over ZMQ (TCP) by default, and tells decode of the outcome with a status message
    /// (`notify_decode_status`) once its statuses are done.
    Mori,
    /// Huawei Ascend (`disaggregation/ascend/`).
    Ascend,
    /// No transfer (decode fakes the KV; warm-up and tests).
    Fake,
}

impl TransferBackend {
    /// Every backend, in sglang's order of the choices list (mooncake first).
    pub const ALL: [TransferBackend; 6] = [
        Self::Mooncake,
        Self::Nixl,
        Self::Ascend,
        Self::Fake,
        Self::Mori,
        Self::MooncakeTcp,
    ];

    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::MooncakeTcp => "mooncake_tcp",
            Self::Nixl => "nixl",
            Self::Mori => "mori",
            Self::Ascend => "ascend",
            Self::Fake => "fake",
        }
    }

    /// Whether it is the default (for `skip_serializing_if`: older scenarios keep their bytes).
    #[inline]
    pub fn is_mooncake(&self) -> bool {
        *self == Self::Mooncake
    }

    /// Whether `SGLANG_DISAGG_STAGING_BUFFER` may be set with it (`handle_pd_disaggregation`:
    /// "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or
    /// 'nixl'"). `mooncake_tcp` counts as `mooncake`: the same function rewrites it
    /// [UNCHECKED: the order of the rewrite and the check].
    #[inline]
    pub fn allows_staging(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp | Self::Nixl)
    }

    /// Why pdsim does not run this backend (`None` for the ones it runs), for the error that
    /// refuses it.
    pub fn not_modelled(self) -> Option<&'static str> {
        match self {
            Self::Mooncake | Self::MooncakeTcp | Self::Nixl | Self::Mori => None,
            Self::Ascend => Some(
                "Ascend's manager moves KV between NPUs (`disaggregation/ascend/`), which pdsim's GPU fabric does not model",
            ),
            Self::Fake => Some(
                "sglang refuses it on a prefill server: \"Prefill server does not support 'fake' as the transfer backend\" (`handle_pd_disaggregation`)",
            ),
        }
    }

    /// Whether sglang runs Mooncake's manager (`MooncakeKVManager`: `mooncake`, and
    /// `mooncake_tcp`, which `handle_pd_disaggregation` rewrites to it): what reads Mooncake's
    /// own settings (`SGLANG_ENABLE_FAILED_SESSION_PROBE`, `MOONCAKE_PROTOCOL=efa`).
    pub fn mooncake_manager(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp)
    }

    /// Whether the last chunk's aux (and state) writes are synchronous calls of their own made
    /// after its KV batch returned, each paying a batch's floor: Mooncake's `transfer_worker`
    /// calls `send_kvcache` (→ `batch_transfer_sync`), then `maybe_send_extra`, then
    /// `send_aux`, one after another. NIXL's `transfer_worker` appends the KV, state and aux
    /// transfer handles of a chunk to one list and polls them together (`while handles:
    /// check_xfer_state`), and MORI's `add_transfer_request` collects the asynchronous
    /// `batch_write` statuses and sends the aux row over ZMQ (`send_aux_tcp`, the default
    /// without `SGLANG_MORI_SEND_AUX_RDMA`): neither waits for the KV before the aux goes.
    #[inline]
    pub fn aux_after_kv(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp)
    }

    /// Whether a failed write puts the decode session on the prefill rank's blacklist, failing
    /// later rooms to it at once (Mooncake: `transfer_worker` adds
    /// `req.mooncake_session_id` to `failed_sessions` on a return code −1, §2.6). NIXL's worker
    /// records the room's failure and goes on (`except Exception: record_failure;
    /// update_status(room, KVPoll.Failed)`), MORI's poll fails the room (`_has_transfer_error`):
    /// neither keeps a list, so the next room to the same decode tries again.
    #[inline]
    pub fn blacklists_sessions(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp)
    }

    /// Whether an exception raised while sending kills the transfer thread (Mooncake at the
    /// seed: it escapes `transfer_worker`, "Transfer thread failed because of …", §2.4). NIXL's
    /// `transfer_worker` catches every exception ("Catch all exceptions to prevent silently
    /// killing this worker thread") and fails the room only; MORI has no transfer thread (the
    /// scheduler submits in `add_transfer_request`, whose `except Exception` fails the room with
    /// "Transfer submission failed: {e}").
    #[inline]
    pub fn raise_kills_worker(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp)
    }

    /// Whether a room's chunks go to transfer queue `bootstrap_room % queue_size` (NIXL's
    /// `add_transfer_request`: `shard_idx = bootstrap_room % len(self.transfer_queues)`)
    /// rather than Mooncake's sum of the decode session ports (§11.3). MORI has no transfer
    /// queues — its scheduler submits in `add_transfer_request` — and pdsim gives it NIXL's
    /// [simplified: one lane still sends one target at a time].
    #[inline]
    pub fn queues_by_room(self) -> bool {
        matches!(self, Self::Nixl | Self::Mori)
    }

    /// The threads that post one head-sliced target's descriptors, or `None` for Mooncake's
    /// executor (`sglang::transfer::SLICE_EXECUTOR_THREADS`). NIXL builds the
    /// target's whole list and posts it as **one** transfer from the worker thread
    /// (`send_kvcache_slice` → `initialize_xfer` → `transfer`): 1 [INFERRED: that NIXL's UCX
    /// backend does not spread one request's descriptors over its threads]. MORI submits one
    /// `batch_write` per layer region, executed by `SGLANG_MORI_NUM_WORKERS` (default 4)
    /// worker threads over `SGLANG_MORI_QP_PER_TRANSFER` (default 4) queue pairs
    /// (`MoriKVManager._init_engine`): 4 [INFERRED: the workers post in parallel].
    #[inline]
    pub fn slice_posting_threads(self) -> Option<u64> {
        match self {
            Self::Nixl => Some(NIXL_SLICE_POSTING_THREADS),
            Self::Mori => Some(MORI_NUM_WORKERS),
            _ => None,
        }
    }

    /// Whether the prefill's KV sender fails a room whose decode metadata never came, after
    /// `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` (`CommonKVSender._check_bootstrap_timeout`), in
    /// sglang version `v`. Mooncake's sender always had it; MORI's `poll` has its own check;
    /// NIXL's `NixlKVSender.poll` had none — a room stayed `Bootstrapping` for ever — until PR
    /// #34692 ([`crate::spec::SglangVersion::has_nixl_bootstrap_timeout`]).
    #[inline]
    pub fn has_sender_bootstrap_timeout(self, v: crate::spec::SglangVersion) -> bool {
        match self {
            Self::Nixl => v.has_nixl_bootstrap_timeout(),
            _ => true,
        }
    }

    /// sglang's text for the sender's bootstrap timeout of room `room` after `elapsed_s`:
    /// `CommonKVSender._check_bootstrap_timeout`'s "Request {room} timed out after {elapsed:.1f}s
    /// in KVPoll.Bootstrapping" (Mooncake, NIXL with PR #34692), or MORI's own
    /// (`MoriKVSender.poll`): "Request {room} timed out after {elapsed:.1f}s waiting for decode
    /// handshake".
    pub fn bootstrap_timeout_text(self, room: u64, elapsed_s: f64) -> String {
        match self {
            Self::Mori => {
                format!(
                    "Request {room} timed out after {elapsed_s:.1}s waiting for decode handshake"
                )
            }
            _ => format!("Request {room} timed out after {elapsed_s:.1}s in KVPoll.Bootstrapping"),
        }
    }

    /// sglang's text for a room whose write failed on the wire (a fabric path down, the
    /// transport's timeout, a write out of bounds), `mooncake` the Mooncake text
    /// (`sglang::transfer::failed_to_send`). NIXL: the worker raises
    /// `RuntimeError(f"NIXL transfer encountered ERR room={room}")` when a handle's state is
    /// `ERR` and records it as the room's failure. MORI: `_collect_failure_reason`,
    /// `f"KV transfer failed: {status.Message()}"`, the status message MORI's engine gives
    /// [UNCHECKED: that message is not read; pdsim writes "write failed"].
    pub fn write_failed_text(self, room: u64, mooncake: impl FnOnce() -> String) -> String {
        match self {
            Self::Nixl => format!("NIXL transfer encountered ERR room={room}"),
            Self::Mori => "KV transfer failed: write failed".to_string(),
            _ => mooncake(),
        }
    }

    /// sglang's text for a room failed by an exception `e` raised while sending, on a backend
    /// whose worker survives it ([`Self::raise_kills_worker`] false): NIXL records `str(e)`,
    /// MORI "Transfer submission failed: {e}" (`add_transfer_request`).
    pub fn raised_text(self, e: &str) -> String {
        match self {
            Self::Mori => format!("Transfer submission failed: {e}"),
            _ => e.to_string(),
        }
    }

    /// Every value's name, for "valid: …".
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|b| b.as_str()).collect()
    }
}

impl std::str::FromStr for TransferBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown transfer backend {s:?}: valid: {}",
                    Self::names().join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_ascend_and_fake_stay_refused() {
        for b in TransferBackend::ALL {
            assert_eq!(b.as_str().parse::<TransferBackend>(), Ok(b));
        }
        assert_eq!(TransferBackend::default(), TransferBackend::Mooncake);
        let run: Vec<_> = TransferBackend::ALL
            .into_iter()
            .filter(|b| b.not_modelled().is_none())
            .collect();
        assert_eq!(
            run,
            [
                TransferBackend::Mooncake,
                TransferBackend::Nixl,
                TransferBackend::Mori,
                TransferBackend::MooncakeTcp
            ]
        );
        let staged: Vec<_> = TransferBackend::ALL
            .into_iter()
            .filter(|b| b.allows_staging())
            .map(TransferBackend::as_str)
            .collect();
        assert_eq!(staged, ["mooncake", "nixl", "mooncake_tcp"]);
        assert!("tcp".parse::<TransferBackend>().is_err());
    }

    #[test]
    fn profiles_follow_the_managers() {
        use crate::spec::SglangVersion;
        use TransferBackend::*;
        for b in [Mooncake, MooncakeTcp] {
            assert!(b.aux_after_kv() && b.blacklists_sessions() && b.raise_kills_worker());
            assert_eq!(b.slice_posting_threads(), None);
            assert!(!b.queues_by_room());
        }
        for b in [Nixl, Mori] {
            assert!(!b.aux_after_kv() && !b.blacklists_sessions() && !b.raise_kills_worker());
            assert!(b.queues_by_room());
        }
        assert_eq!(Nixl.slice_posting_threads(), Some(1));
        assert_eq!(Mori.slice_posting_threads(), Some(4));
        assert!(!Nixl.has_sender_bootstrap_timeout(SglangVersion::Seed));
        assert!(Nixl.has_sender_bootstrap_timeout(SglangVersion::V2026_09));
        assert!(Mooncake.has_sender_bootstrap_timeout(SglangVersion::Seed));
        assert!(Mori.has_sender_bootstrap_timeout(SglangVersion::Seed));
        assert_eq!(
            Mori.bootstrap_timeout_text(7, 30.04),
            "Request 7 timed out after 30.0s waiting for decode handshake"
        );
        assert_eq!(
            Nixl.bootstrap_timeout_text(7, 30.04),
            "Request 7 timed out after 30.0s in KVPoll.Bootstrapping"
        );
        assert_eq!(
            Nixl.write_failed_text(7, || unreachable!()),
            "NIXL transfer encountered ERR room=7"
        );
        assert_eq!(Mooncake.write_failed_text(7, || "m".into()), "m");
        assert_eq!(Mori.raised_text("x"), "Transfer submission failed: x");
        assert_eq!(Nixl.raised_text("x"), "x");
    }
}
