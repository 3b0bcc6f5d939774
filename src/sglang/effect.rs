//! What a component's call asks of what it does not own: a closed set of **effects**, pushed in
//! the order the component meets them and applied by `sim::World` in that order right after the
//! call (`docs/architecture.md` §1). A component changes its own state and the request it
//! handles; an effect is everything beyond that — a request's end, another component's state, a
//! metric kept outside it — so the order in which those happen, and with it the order of
//! events, is the order sglang's code does them in.
//!
//! An effect that hands control back to a component ([`Effect::Kick`]) is applied like any
//! other: the call it makes pushes its own effects, and those are applied before the effects
//! after it (depth first), exactly as if the first call had gone on after the effect. A
//! component that must see an effect applied before it goes on (a failed room leaves the
//! request table, which its next chunk reads) stops after pushing it and pushes the call that
//! goes on.
//!
//! Today the transfer workers (`sglang::transfer`) return effects; the variants are theirs. The
//! store and the all-to-all add theirs here when they move to effects.

use crate::metrics::WorkerDeath;
use crate::vocab::ErrorKind;
use crate::vocab::ids::{PrefillId, ShardId};
use crate::vocab::requests::ReqRef;

/// One thing a component's call asks `World` to do.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// The request fails with this kind and sglang's text: both sides mark the room Failed
    /// and free what they hold, and its row is written (`World::fail`).
    Fail {
        /// The request.
        req: ReqRef,
        /// Its error kind.
        kind: ErrorKind,
        /// sglang's message (`docs/sglang-pd.md` §12).
        message: String,
    },
    /// The transfer of `req` concluded (`conclude_transfer(Success)`: every rank of `prefill`
    /// sent its last chunk): the prefill frees its side of the request
    /// (`PrefillServer::transfer_concluded`), the router hears its new load, and the prefill
    /// may admit more (it is woken).
    Release {
        /// The prefill instance.
        prefill: PrefillId,
        /// The request, its sender now `Success`.
        req: ReqRef,
    },
    /// The worker of `prefill`'s transfer lane `lane` goes on with its next target or chunk
    /// (`TransferWorkers::kick`), its effects applied before the ones after this.
    Kick {
        /// The prefill instance.
        prefill: PrefillId,
        /// Its transfer lane.
        lane: ShardId,
    },
    /// An exception escaped a transfer worker and its thread died: counted as an error of
    /// the raise's kind with the line the prefill logs, and kept for the reports' markers.
    WorkerDied {
        /// Where and when, and the kind raised.
        death: WorkerDeath,
        /// sglang's "Transfer thread failed because of … is dead." line.
        message: String,
    },
}
