//! The checked form of client disconnects and of what the router propagates of a failure
//! (`[workload.client_timeout]`, `router.abort_propagation`; `docs/sglang-pd.md` §21).

use serde::Serialize;

use crate::engine::Nanos;

/// How long a client waits for its request before it disconnects, measured from arrival.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Deadline {
    /// Every client waits this long, ns.
    Fixed(Nanos),
    /// Exponentially distributed waits with this mean, s (memoryless impatience).
    Exponential {
        /// Mean wait, s.
        mean_s: f64,
    },
    /// Lognormal waits with this mean, s, and coefficient of variation.
    Lognormal {
        /// Mean wait, s.
        mean_s: f64,
        /// Standard deviation over mean.
        cv: f64,
    },
}

/// What sgl-model-gateway's PD router does with the other leg when one fails
/// (`router.abort_propagation`; `docs/sglang-pd.md` §21.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum AbortPropagation {
    /// sglang main since PR #29017 (merged 2026-06-23): a failed prefill leg drops the paired
    /// decode leg at once; decode aborts the request and frees its pages.
    CancelPaired,
    /// Before PR #29017 (issue #9726): `tokio::join!` waits for the decode leg, which keeps
    /// the request — preallocating pages when it can and holding them in `WaitingForInput`
    /// until `SGLANG_DISAGGREGATION_WAITING_TIMEOUT` (`sglang.waiting_timeout_s`).
    DecodeWaits,
}

/// Names of [`AbortPropagation`] in scenario files, in its order.
pub const PROPAGATIONS: [&str; 2] = ["cancel_paired", "decode_waits"];

impl AbortPropagation {
    /// The value of a scenario's `router.abort_propagation`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cancel_paired" => Some(Self::CancelPaired),
            "decode_waits" => Some(Self::DecodeWaits),
            _ => None,
        }
    }

    /// The scenario file's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CancelPaired => "cancel_paired",
            Self::DecodeWaits => "decode_waits",
        }
    }
}

/// What decode's `Scheduler.abort_request` does with an aborted request in its waiting queue
/// (preallocated and transferred, not yet in the running batch): `sglang.decode_queue_abort`,
/// `docs/sglang-pd.md` §21.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Default)]
pub enum DecodeQueueAbort {
    /// Since PR #9817 (merged 2025-08-30, "Fix memory leak when aborting decode request in
    /// PD-Disagg"): the request is popped and its KV released (`release_kv_cache`).
    #[default]
    Release,
    /// Before it: the request is popped and the client told, but its pages and state slot are
    /// never given back; decode's pool shrinks by them for the rest of the run.
    Leak,
}

/// Names of [`DecodeQueueAbort`] in scenario files, in its order.
pub const DECODE_QUEUE_ABORTS: [&str; 2] = ["release", "leak"];

impl DecodeQueueAbort {
    /// The value of a scenario's `sglang.decode_queue_abort`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "release" => Some(Self::Release),
            "leak" => Some(Self::Leak),
            _ => None,
        }
    }

    /// The scenario file's name of it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Leak => "leak",
        }
    }

    fn is_release(&self) -> bool {
        *self == Self::Release
    }
}

/// Client disconnects and the router's propagation, checked.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AbortParams {
    /// Each client's deadline; `None`: clients wait for ever (only the propagation is set).
    pub client_timeout: Option<Deadline>,
    /// What the router does with the decode leg when the prefill leg fails.
    pub propagation: AbortPropagation,
    /// Whether trace rows give their own deadlines (`timeout_s`), which take the place of
    /// `client_timeout`'s draw for those rows.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub trace_deadlines: bool,
    /// What decode does with an aborted request's pages in its waiting queue.
    #[serde(skip_serializing_if = "DecodeQueueAbort::is_release")]
    pub decode_queue: DecodeQueueAbort,
}
