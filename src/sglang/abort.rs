//! sglang's abort path in PD, as rules `sim::abort` applies (`docs/sglang-pd.md` §21); what
//! aborts cost is kept by the observer `metrics::aborts::Aborts`.
//!
//! - **Noticing the disconnect.** The client's connection closes; sgl-model-gateway's PD
//!   router drops the dual-dispatch future that holds both legs (`pd_router.rs`
//!   `execute_dual_dispatch_internal`), so both servers' connections close. Each server's
//!   `TokenizerManager._wait_one_response` (sglang c60799d) waits on the request's event with
//!   `asyncio.wait_for(..., timeout=SGLANG_REQUEST_STATE_WAIT_TIMEOUT)` (4 s, `environ.py`)
//!   and, on each timeout, checks `request.is_disconnected()`, then calls `abort_request`
//!   (the "type 1" disconnect). A request with no output yet is seen on that 4-s poll,
//!   anchored at its arrival; once decode streams tokens the event fires on every output and
//!   the closed connection is seen at once ([`detect_at`]).
//! - **The scheduler's `abort_request`** (`managers/scheduler.py`; the PD queues since PR
//!   #8352, the decode waiting queue's pages since PR #9817): a request still queued is
//!   popped and its pages go back (`release_kv_cache`); a running one is marked
//!   `to_finish = FINISH_ABORT()` and freed at the end of the forward in progress. pdsim frees
//!   both sides' pages at the detection; the running prefill forward is still paid for (it
//!   completes), and its tokens count as wasted prefill work.
//! - **An in-flight KV transfer** is not recalled: the chunks already posted move on (their
//!   bytes still cross the fabric); the room is Failed, so the rest are never sent (Mooncake's
//!   transfer worker skips a failed room's chunks).
//! - **What the router propagates** of a failure ([`AbortPropagation`]): a client disconnect
//!   closes both legs in every profile; a failed *prefill* leg cancels the decode leg only
//!   since PR #29017.

use crate::config::aborts::{AbortPropagation, DecodeQueueAbort};
use crate::engine::{NS_PER_S, Nanos};
use crate::vocab::abort::AbortStage;
use crate::vocab::requests::{KvPoll, NOT_RUNNING, Req};

/// `SGLANG_REQUEST_STATE_WAIT_TIMEOUT`'s default, ns: how often a waiting
/// `_wait_one_response` wakes to check `request.is_disconnected()` (sglang `environ.py`).
pub const DISCONNECT_POLL_NS: Nanos = 4 * NS_PER_S;

/// When the servers abort a request whose client disconnected at `disconnect_ns`: at once if
/// decode is already streaming its tokens (`streaming`), else at the first 4-s poll of
/// `_wait_one_response` at or after the disconnect, counted from the arrival.
pub fn detect_at(arrival_ns: Nanos, disconnect_ns: Nanos, streaming: bool) -> Nanos {
    if streaming || disconnect_ns <= arrival_ns {
        return disconnect_ns;
    }
    let waited = disconnect_ns - arrival_ns;
    arrival_ns + waited.div_ceil(DISCONNECT_POLL_NS) * DISCONNECT_POLL_NS
}

/// Where `req` is in sglang's PD queues (the stage its abort is counted at).
pub fn stage(req: &Req) -> AbortStage {
    if req.abort.as_deref().is_some_and(|a| a.prefill_released) {
        return AbortStage::Orphaned;
    }
    if !req.decode_allocated {
        return AbortStage::Bootstrap;
    }
    if req.join_step != NOT_RUNNING {
        return AbortStage::Decode;
    }
    if req.receiver == KvPoll::Success {
        return AbortStage::DecodeQueue;
    }
    if req.row.prefill_start_ns.is_none() {
        return AbortStage::PrefillQueue;
    }
    if req.row.prefill_end_ns.is_none() {
        return AbortStage::Prefill;
    }
    AbortStage::Transfer
}

/// Whether a failure raised on the prefill side (its `Bootstrapping` timeout) leaves the
/// decode side holding the request: before PR #29017 the router's `tokio::join!` waited for
/// the decode leg, which kept its prealloc-queue entry and, once admitted, its pages until
/// decode's own `WaitingForInput` timeout (issue #9726).
pub fn decode_outlives_prefill_failure(p: AbortPropagation) -> bool {
    p == AbortPropagation::DecodeWaits
}

/// Whether decode gives back the pages of a request aborted at `stage` (PR #9817, merged
/// 2025-08-30, "Fix memory leak when aborting decode request in PD-Disagg": before it, a
/// request "already pre-allocated and transferred, queueing to be added" — decode's waiting
/// queue — was popped by `abort_request` without `release_kv_cache`, so its KV pages and its
/// `req_to_token_pool` slot were never freed). Every other stage frees in both versions.
pub fn decode_releases(stage: AbortStage, q: DecodeQueueAbort) -> bool {
    !(stage == AbortStage::DecodeQueue && q == DecodeQueueAbort::Leak)
}

/// sglang's log line when a request is aborted for a closed connection
/// (`TokenizerManager._wait_one_response`, "type 1").
pub fn disconnected(rid: u64) -> String {
    format!("Request is disconnected from the client side (type 1). Abort request rid={rid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 4-s poll, by hand: arrival at 1 s, disconnect at 10 s → polls at 5, 9, 13 s → 13 s;
    /// a disconnect on a poll is seen on it; a streaming request at once.
    #[test]
    fn detection_waits_for_the_next_poll() {
        let s = NS_PER_S;
        assert_eq!(detect_at(s, 10 * s, false), 13 * s);
        assert_eq!(detect_at(s, 9 * s, false), 9 * s);
        assert_eq!(detect_at(s, 9 * s + 1, false), 13 * s);
        assert_eq!(detect_at(s, 10 * s, true), 10 * s);
    }

    #[test]
    fn only_the_old_router_orphans_the_decode_leg() {
        assert!(decode_outlives_prefill_failure(
            AbortPropagation::DecodeWaits
        ));
        assert!(!decode_outlives_prefill_failure(
            AbortPropagation::CancelPaired
        ));
    }
}
