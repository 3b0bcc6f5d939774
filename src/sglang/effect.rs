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
//! Who pushes what: the transfer workers (`sglang::transfer`) `Fail`, `Release`, `Kick` and
//! `WorkerDied`; the Mooncake Store (`sglang::mooncake_store`) `OffloadWritten` and
//! `StoreWriteCounted`; a decode's offload manager (`sglang::decode_offload`) `Offload` and
//! `OffloadGoOn`; a decode's step (`sglang::decode`) `Retracted`; a server whose all-to-all
//! crosses the fabric `ForwardStarted` (`Core::forward_started`); DeepEP's all-to-all
//! (`sglang::a2a`) `ForwardEnds`.

use crate::engine::{EventKey, Nanos};
use crate::metrics::WorkerDeath;
use crate::vocab::ErrorKind;
use crate::vocab::event::Event;
use crate::vocab::ids::{DecodeId, InstanceId, PrefillId, ShardId};
use crate::vocab::requests::ReqRef;

/// One thing a component's call asks `World` to do.
#[derive(Debug, PartialEq)]
pub enum Effect {
    /// The request fails with this kind and sglang's text: both sides mark the room Failed
    /// and free what they hold, and its row is written (`World::end`).
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
    /// Decode `decode`'s offload manager copied `blocks` blocks GPU → host: the Mooncake
    /// Store puts `path[start..]` from its host pool (`MooncakeStore::offload`; the store's
    /// `batch_set_v1` from the backup thread, `_page_backup`), its effects applied before the
    /// ones after this.
    Offload {
        /// The decode instance.
        decode: DecodeId,
        /// The request's full prompt blocks, then its answer blocks up to this offload's.
        path: Vec<u64>,
        /// The first block of `path` this offload copied.
        start: usize,
        /// Blocks it holds in the decode's host pool until the write ends.
        blocks: u32,
    },
    /// Decode `decode`'s offload manager goes on with its next offload due after the step
    /// (`DecodeServer::offload_go_on`): it stopped after an `Offload`, whose write may free
    /// host room at once, so the next one's room is looked at after that.
    OffloadGoOn {
        /// The decode instance.
        decode: DecodeId,
    },
    /// A store write of decode `decode`'s offload ended, or put nothing: its `blocks` blocks of
    /// host pool are free again (`_check_backup_progress`; `DecodeServer::offload_written`).
    OffloadWritten {
        /// The decode instance.
        decode: DecodeId,
        /// Blocks freed.
        blocks: u32,
    },
    /// Prefill `prefill`'s HiCache writes `bytes` (all ranks) back to the store: counted in its
    /// tier figures (`PrefillServer::wrote_to_store`).
    StoreWriteCounted {
        /// The prefill instance.
        prefill: PrefillId,
        /// Bytes put, all ranks.
        bytes: u64,
    },
    /// Decode retracted `req` (`retract_decode`: the pool ran dry), which goes back to the
    /// front of its prealloc queue: its prefill `prefill` computes it again and counts it
    /// again (`PrefillServer::request_returned`), and the router hears the prefill's load.
    Retracted {
        /// The request.
        req: ReqRef,
        /// Its prefill instance.
        prefill: PrefillId,
    },
    /// A forward started on instance `instance` (a prefill or a decode, its running forward's
    /// event was `before`), whose DeepEP all-to-all crosses the fabric: the server describes
    /// it with its end taken back (`PrefillServer::a2a_forward`, `DecodeServer::a2a_forward`)
    /// and `sglang::a2a` starts its flows (`A2aFlows::start`), whose landing sets its end
    /// (`ForwardEnds`).
    ForwardStarted {
        /// The server.
        instance: InstanceId,
        /// Its forward's event before this one started.
        before: Option<EventKey>,
    },
    /// The forward of instance `instance` whose all-to-all landed ends at `at`, ns, with the
    /// event `done` (`A2aFlows::flow_ended`): scheduled, and the server's forward end set
    /// (`Core::forward_ends`).
    ForwardEnds {
        /// The server (a prefill or a decode instance).
        instance: InstanceId,
        /// When its forward ends, ns.
        at: Nanos,
        /// The event that ends it.
        done: Event,
    },
}
