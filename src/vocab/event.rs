//! The one closed set of things that can happen in a run. Requests to do something are named
//! as commands, facts in the past tense. Every handler is in [`super::World::handle`].

use super::ids::{ColocatedId, DecodeId, InstanceId, PrefillId, ShardId};
use super::requests::ReqRef;

/// Everything that can happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The next request of the workload arrives at the router.
    Arrival,
    /// A session's next turn, due a think time after its previous turn ended, arrives
    /// (`sim::sessions`).
    TurnDue {
        /// The session.
        session: u64,
    },
    /// Decode's page ids (the per-request metadata) reached the prefill.
    MetadataArrived {
        /// The request.
        req: ReqRef,
    },
    /// The decode side has tokenized the request and finished its bootstrap handshake: the
    /// request enters decode's prealloc queue (only with per-request serving costs).
    Bootstrapped {
        /// The request.
        req: ReqRef,
    },
    /// A colocated server's tokenizer manager handed a request to its scheduler.
    Tokenized {
        /// The instance.
        colocated: ColocatedId,
    },
    /// A prefill forward finished (with `--pp-size`, a micro-batch left the last stage).
    PrefillStepDone {
        /// The instance.
        prefill: PrefillId,
    },
    /// A PP prefill's first stage may take its next micro-batch (`sglang::pipeline`).
    PrefillStageFree {
        /// The instance.
        prefill: PrefillId,
    },
    /// The fabric's next flow phase change or end is due.
    FabricDue,
    /// A chunk with no bytes to move returned from its (empty) batch call.
    EmptyChunkSent {
        /// The sending instance.
        prefill: PrefillId,
        /// Its transfer-queue shard.
        shard: ShardId,
    },
    /// The scenario's fault number `index` happens.
    Fault {
        /// Index into the scenario's faults.
        index: usize,
    },
    /// A crashed instance comes back.
    Restart {
        /// The instance.
        instance: InstanceId,
    },
    /// Decode's heartbeat has missed a crashed prefill twice: its rooms are failed.
    HeartbeatLost {
        /// The crashed prefill.
        prefill: PrefillId,
    },
    /// The fleet's look at the pools that change size (`sim::scaling`): every simulated second
    /// and at the policy's ticks, while the run lasts.
    ScaleTick,
    /// A launched instance's cold start (or live role switch) is due to end.
    InstanceReady {
        /// The instance.
        instance: InstanceId,
    },
    /// The router's periodic health check (every sgl-router `health_check_interval_secs`),
    /// scheduled only while a dead server is still in rotation.
    RouterHealthCheck,
    /// Prefill's `conclude_transfer(Success)` reached the decode.
    TransferSucceeded {
        /// The request.
        req: ReqRef,
    },
    /// A colocated server's mixed (chunked prefill + decode) step finished.
    ColocatedStepDone {
        /// The instance.
        colocated: ColocatedId,
    },
    /// A decode step finished.
    DecodeStepDone {
        /// The instance.
        decode: DecodeId,
    },
    /// Decode's `WaitingForInput` timeout for a request.
    WaitingTimeout {
        /// The request.
        req: ReqRef,
    },
    /// Prefill's `Bootstrapping` timeout for a request.
    BootstrapTimeout {
        /// The request.
        req: ReqRef,
    },
    /// A local copy of a Mooncake Store operation ended (a replica on the reader's or
    /// writer's own node: `sglang::mooncake_store`).
    StoreCopied {
        /// The store operation.
        op: u32,
        /// Its batch.
        part: u32,
    },
    /// The request's client deadline passed (`detected: false`), or the servers' next look
    /// at the closed connection came (`detected: true`): `sim::abort`.
    ClientDisconnected {
        /// The request.
        req: ReqRef,
        /// Whether the servers see the disconnect now.
        detected: bool,
    },
    /// One simulated second passed: sample the timeseries.
    Tick,
}

/// Work a handler leaves for [`super::World`] to do once the event is handled: a component that
/// frees pages or ends a request marks the instances that may now admit work, instead of
/// calling into them. Drained in ascending order (prefills by id, then decodes by id, then
/// colocated servers by id), so the order never depends on which handler marked first — as
/// sglang's scheduler loop frees every finished room before it forms its next batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wake {
    /// The prefill may form a batch (pages freed, requests failed).
    Prefill(PrefillId),
    /// The decode may preallocate: a request gave back its pages, its request row or its
    /// place in the prealloc queue anywhere but in the batch at a step end (a failure, an
    /// abort, a one-token request completing as its KV lands), or a retraction emptied the
    /// batch (`DecodeServer::request_ended`, `start_step`).
    Decode(DecodeId),
    /// The colocated server may step (`ColocatedServer::try_step`): a request arrived, its
    /// tokenizer manager handed one over (`Event::Tokenized`), or its step ended. A plain
    /// cluster has no other kind, so the mark is drained right after the event as it was made.
    Colocated(ColocatedId),
}

/// Event-queue lanes (`EventQueue::schedule_lane`): events always scheduled a fixed delay from
/// now, which therefore arrive in order and need no heap.
pub mod lane {
    /// Prefill `Bootstrapping` timeouts (`sglang.bootstrap_timeout_s` from now).
    pub const BOOTSTRAP_TIMEOUT: usize = 0;
    /// Decode `WaitingForInput` timeouts (`sglang.waiting_timeout_s` from now).
    pub const WAITING_TIMEOUT: usize = 1;
    /// Control messages between prefill and decode (`fabric.control_latency_us` from now).
    pub const CONTROL: usize = 2;
}
