//! `--disaggregation-enable-kv-checksum` on decode (sglang PR #39500, "[PD] Add optional KV
//! transfer checksums", merged 2026-09-15; `[sglang] kv_checksum`, versions `2026-09` and
//! later): before a transferred request joins a batch, decode re-digests the KV and state
//! pages that landed in its own memory and compares the Adler-32 with the one the prefill
//! wrote into the request's metadata row with its last chunk
//! (`disaggregation/checksum.py::KvChecksumComputer.compute`; decode:
//! `SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch`). A mismatch aborts the request
//! (`prepare_abort`, HTTP 500) and counts a failed transfer; in sglang's CI it raises instead,
//! which pdsim does not model (no CI run is a deployment).
//!
//! What the digests see is the corruption oracle's judgment: the request's own bytes landed
//! exactly where its decode layout expects them (`DecodeMemory::landed`), or not. Two more
//! facts bound the guard, both modelled:
//! - the digests only agree on a healthy transfer when both sides register the same item
//!   lengths (`layout::KvChecksum::comparable`); where they differ — unequal attention TP on a
//!   non-MLA model, another state dtype — every request aborts (PR #39729, open, reports these
//!   false aborts of #39500 as merged);
//! - the check runs once, when the request lands. A request already decoding that a later,
//!   stray write hits is never re-checked: the checksum turns the writer's corruption into an
//!   abort, not its victim's (PR #39500's motivation: "Detection happens before the request
//!   emits a token").
//!
//! Its cost is priced where it is paid: the prefill's digest before the last chunk's first
//! batch (`sglang::transfer`), decode's before `Success` is handled (`transfer::conclude`).

use super::Failure;
use super::bootstrap::Handoff;
use super::decode::DecodeServer;
use super::transfer::TransferWorkers;
use super::transfer::bootstrap_room;
use crate::layout::{DecodeMemory, PairPlan, RequestId, checks};
use crate::vocab::ErrorKind;
use crate::vocab::ids::{DecodeId, IdVec};
use crate::vocab::requests::Requests;

/// Decode's verdict on a `Landed` handoff `h` (`World::handle` at `TransferSucceeded`, the
/// flag on): the pair's plan from the transfer workers, the decode's oracle from its server.
/// Out of line, so the event loop carries one call, not the look-ups.
#[inline(never)]
pub fn verdict(
    h: Handoff,
    transfer: &TransferWorkers,
    decodes: &mut IdVec<DecodeId, DecodeServer>,
    reqs: &mut Requests,
    seed: u64,
) -> Handoff {
    let Handoff::Landed { req: r, .. } = h else {
        return h;
    };
    let Some((p, d)) = reqs.get(r).map(|q| (q.prefill, q.decode)) else {
        return h;
    };
    verify(
        h,
        transfer.plan(p, d),
        decodes[d].core.pages.oracle(),
        reqs,
        seed,
    )
}

/// Decode's verdict on a `Landed` handoff `h` of a pair whose `plan` has the checksum on:
/// the handoff itself when the digests agree, else the request's abort (handed on as a
/// failure of the decode's receiver: `World::hand_on` ends it failed with sglang's text).
/// `mem` is the decode's corruption oracle, when it watches this decode (an exact plan's
/// bytes are the request's own by construction: `PairPlan::is_exact`). Anything else passes.
pub fn verify(
    h: Handoff,
    plan: &PairPlan,
    mem: Option<&mut DecodeMemory>,
    reqs: &mut Requests,
    seed: u64,
) -> Handoff {
    let Handoff::Landed {
        req: r,
        first_token,
        ..
    } = h
    else {
        return h;
    };
    let Some(c) = plan.kv_checksum() else {
        return h;
    };
    let Some(req) = reqs.get_mut(r) else {
        return h;
    };
    // `landed` marks the request as decoding in the oracle; an aborted one is released right
    // after, as sglang's `release_kv_cache` does.
    let own_bytes = match mem {
        Some(m) if !plan.is_exact() => m.landed(RequestId(req.id)),
        _ => true,
    };
    if own_bytes && c.comparable {
        return h;
    }
    // The abort comes before the request's first token reaches the client: it has none.
    if first_token.is_some() {
        req.row.first_token_ns = None;
    }
    Handoff::TimedOut {
        req: r,
        failure: Failure {
            kind: ErrorKind::KvChecksumMismatch,
            message: checks::kv_checksum_mismatch(bootstrap_room(seed, req.id)),
        },
        sender: false,
    }
}
