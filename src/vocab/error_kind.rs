//! The one vocabulary of request failures (docs/architecture.md §4): every place that fails a request —
//! the layout checks, the transfer engine, the scheduler — names the failure with an
//! [`ErrorKind`], and every result file prints it with [`ErrorKind::as_str`].
//!
//! The snake_case names are a stable contract: scenario `expect.error_kinds`, `requests.csv`
//! and `summary.json` all carry them, so a rename is a breaking change of docs/architecture.md §4.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a request failed, as one stable snake_case name per sglang failure (docs/architecture.md §4).
///
/// The order of the variants is the order of `ALL` and of docs/architecture.md §4; it decides nothing
/// that reaches output (error lists are keyed by the name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Decode's first contact with the prefill (`try_ensure_parallel_info`): the two servers'
    /// `--page-size` differ. Raised on decode.
    PageSizeMismatch,
    /// Decode's first contact: the `--kv-cache-dtype` flag strings differ (compared as strings,
    /// so `auto` and `bf16` differ although both store bf16). Raised on decode.
    KvCacheDtypeMismatch,
    /// `_validate_envelope_kv_layout`, error (1): the prefill sends whole unified page envelopes
    /// but the decode registered a different region shape. Kills the prefill transfer worker.
    EnvelopeLayoutMismatch,
    /// `_validate_envelope_kv_layout`, error (2): unified memory with different prefill and
    /// decode attention TP; the envelope cannot be TP-resliced. Kills the transfer worker.
    EnvelopeTpMismatch,
    /// `maybe_send_extra` (MAMBA): the state item lengths differ and neither side published
    /// per-tensor dims to reslice by ("Mamba state layouts differ …"). Kills the worker.
    MambaLayoutMismatch,
    /// `_send_mamba_state`: a paired state entry has a different slot size on each side
    /// ("Prefill/Decode Mamba slot size mismatch …"). Kills the worker.
    MambaSlotSizeMismatch,
    /// `_send_kvcache_generic`: "layers_current_pp_stage is out of range" (return code −1), or a
    /// Python `IndexError` from a layer list the sender indexes past.
    KvLayersOutOfRange,
    /// An RDMA write ends past the decode's registered region: the Mooncake slice fails and the
    /// batch returns −1; the session is blacklisted.
    TransferOutOfBounds,
    /// A Mooncake batch transfer did not finish within its timeout.
    TransferTimeout,
    /// The decode waited in `WaitingForInput` past `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`
    /// (typically behind a dead transfer worker).
    WaitingTimeout,
    /// The prefill waited in `Bootstrapping` past `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`.
    BootstrapTimeout,
    /// The decode's heartbeat to the prefill failed: the peer is gone.
    PeerLost,
    /// The decode session was blacklisted by an earlier failed transfer; later rooms to it fail
    /// at once.
    SessionBlacklisted,
    /// `maybe_send_extra` (SWA): "PD Disaggregation does NOT support PD different TP sizes for
    /// non-MLA … hybrid models yet". Kills the worker.
    HeteroTpUnsupported,
    /// A Mooncake batch transfer returned −1 for a network reason other than a timeout (retries
    /// exhausted, no route).
    TransferFailed,
    /// The request needs more KV pages than the prefill or decode instance holds; sglang rejects
    /// it before scheduling.
    RequestTooLong,
    /// The instance died under the request: an exception escaped sglang's scheduler loop.
    ServerCrashed,
    /// sglang PR #37840 (`[sglang] version = "2026-09+pr37840"`): the prefill compared the
    /// layout the decode session registered (page size, state components, per-entry strides at
    /// equal attention TP) with its own and rejected it; every room to that session fails
    /// before any write, and the session stays failed until it re-registers.
    PeerLayoutRejected,
    /// `--disaggregation-enable-kv-checksum` (sglang PR #39500): the Adler-32 digest decode
    /// computed over the request's landed KV and state pages differs from the one prefill sent
    /// with the last chunk; decode aborts the request before it joins a batch.
    KvChecksumMismatch,
}

impl ErrorKind {
    /// Every kind, in the order of docs/architecture.md §4.
    pub const ALL: &'static [ErrorKind] = &[
        Self::PageSizeMismatch,
        Self::KvCacheDtypeMismatch,
        Self::EnvelopeLayoutMismatch,
        Self::EnvelopeTpMismatch,
        Self::MambaLayoutMismatch,
        Self::MambaSlotSizeMismatch,
        Self::KvLayersOutOfRange,
        Self::TransferOutOfBounds,
        Self::TransferTimeout,
        Self::WaitingTimeout,
        Self::BootstrapTimeout,
        Self::PeerLost,
        Self::SessionBlacklisted,
        Self::HeteroTpUnsupported,
        Self::TransferFailed,
        Self::RequestTooLong,
        Self::ServerCrashed,
        Self::PeerLayoutRejected,
        Self::KvChecksumMismatch,
    ];

    /// The stable snake_case name (the serde name too).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PageSizeMismatch => "page_size_mismatch",
            Self::KvCacheDtypeMismatch => "kv_cache_dtype_mismatch",
            Self::EnvelopeLayoutMismatch => "envelope_layout_mismatch",
            Self::EnvelopeTpMismatch => "envelope_tp_mismatch",
            Self::MambaLayoutMismatch => "mamba_layout_mismatch",
            Self::MambaSlotSizeMismatch => "mamba_slot_size_mismatch",
            Self::KvLayersOutOfRange => "kv_layers_out_of_range",
            Self::TransferOutOfBounds => "transfer_out_of_bounds",
            Self::TransferTimeout => "transfer_timeout",
            Self::WaitingTimeout => "waiting_timeout",
            Self::BootstrapTimeout => "bootstrap_timeout",
            Self::PeerLost => "peer_lost",
            Self::SessionBlacklisted => "session_blacklisted",
            Self::HeteroTpUnsupported => "hetero_tp_unsupported",
            Self::TransferFailed => "transfer_failed",
            Self::RequestTooLong => "request_too_long",
            Self::ServerCrashed => "server_crashed",
            Self::PeerLayoutRejected => "peer_layout_rejected",
            Self::KvChecksumMismatch => "kv_checksum_mismatch",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the [`ErrorKind`]s; its message lists the valid names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownErrorKind {
    /// The name as given.
    pub name: String,
}

impl fmt::Display for UnknownErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown error kind {:?}: use one of ", self.name)?;
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(k.as_str())?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownErrorKind {}

impl FromStr for ErrorKind {
    type Err = UnknownErrorKind;
    fn from_str(s: &str) -> Result<Self, UnknownErrorKind> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownErrorKind {
                name: s.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names of docs/architecture.md §4, pinned: output files carry them, so they never change.
    const NAMES: [(ErrorKind, &str); 19] = [
        (ErrorKind::PageSizeMismatch, "page_size_mismatch"),
        (ErrorKind::KvCacheDtypeMismatch, "kv_cache_dtype_mismatch"),
        (
            ErrorKind::EnvelopeLayoutMismatch,
            "envelope_layout_mismatch",
        ),
        (ErrorKind::EnvelopeTpMismatch, "envelope_tp_mismatch"),
        (ErrorKind::MambaLayoutMismatch, "mamba_layout_mismatch"),
        (ErrorKind::MambaSlotSizeMismatch, "mamba_slot_size_mismatch"),
        (ErrorKind::KvLayersOutOfRange, "kv_layers_out_of_range"),
        (ErrorKind::TransferOutOfBounds, "transfer_out_of_bounds"),
        (ErrorKind::TransferTimeout, "transfer_timeout"),
        (ErrorKind::WaitingTimeout, "waiting_timeout"),
        (ErrorKind::BootstrapTimeout, "bootstrap_timeout"),
        (ErrorKind::PeerLost, "peer_lost"),
        (ErrorKind::SessionBlacklisted, "session_blacklisted"),
        (ErrorKind::HeteroTpUnsupported, "hetero_tp_unsupported"),
        (ErrorKind::TransferFailed, "transfer_failed"),
        (ErrorKind::RequestTooLong, "request_too_long"),
        (ErrorKind::ServerCrashed, "server_crashed"),
        (ErrorKind::PeerLayoutRejected, "peer_layout_rejected"),
        (ErrorKind::KvChecksumMismatch, "kv_checksum_mismatch"),
    ];

    #[test]
    fn names_are_pinned_and_all_is_complete() {
        assert_eq!(ErrorKind::ALL.len(), NAMES.len());
        for (i, (k, name)) in NAMES.iter().enumerate() {
            assert_eq!(
                ErrorKind::ALL[i],
                *k,
                "ALL follows docs/architecture.md §4 order"
            );
            assert_eq!(k.as_str(), *name);
            assert_eq!(k.to_string(), *name);
        }
    }

    #[test]
    fn every_kind_round_trips() {
        for &k in ErrorKind::ALL {
            assert_eq!(k.as_str().parse::<ErrorKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.as_str()));
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), k);
        }
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let e = "page_size".parse::<ErrorKind>().unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("unknown error kind \"page_size\": use one of page_size_mismatch, ")
        );
        assert!(msg.ends_with("server_crashed, peer_layout_rejected, kv_checksum_mismatch"));
        assert!(serde_json::from_str::<ErrorKind>("\"PeerLost\"").is_err());
    }
}
