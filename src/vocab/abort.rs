//! What a request carries when a scenario models client disconnects and aborts
//! (`[workload.client_timeout]`, `router.abort_propagation`): its deadline, when it became
//! doomed, and the prefill work and pages it held. Bookkeeping only: the rules are
//! `sglang::abort`, the routing `sim::abort`.

use serde::{Deserialize, Serialize};

use crate::engine::Nanos;

/// Where a request was when it was aborted (or, for an orphan, when its prefill failed), by
/// sglang's PD queues (`docs/sglang-pd.md` §21.2). Serialized in `summary.json`
/// `aborts.by_stage` by these snake_case names, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortStage {
    /// Decode's prealloc queue / prefill's bootstrap queue: no decode pages yet.
    Bootstrap,
    /// Decode pages preallocated; waiting in the prefill's waiting queue (nothing computed).
    PrefillQueue,
    /// Its prompt was being computed (a chunk ran or is running).
    Prefill,
    /// Prompt computed; its KV was moving (decode's transfer queue, prefill's inflight queue).
    Transfer,
    /// KV landed; waiting to join a decode batch.
    DecodeQueue,
    /// In a decode batch, generating.
    Decode,
    /// Its prefill had already failed and the decode side kept it (`decode_waits`).
    Orphaned,
}

impl AbortStage {
    /// Every stage, in report order.
    pub const ALL: [AbortStage; 7] = [
        AbortStage::Bootstrap,
        AbortStage::PrefillQueue,
        AbortStage::Prefill,
        AbortStage::Transfer,
        AbortStage::DecodeQueue,
        AbortStage::Decode,
        AbortStage::Orphaned,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AbortStage::Bootstrap => "bootstrap",
            AbortStage::PrefillQueue => "prefill_queue",
            AbortStage::Prefill => "prefill",
            AbortStage::Transfer => "transfer",
            AbortStage::DecodeQueue => "decode_queue",
            AbortStage::Decode => "decode",
            AbortStage::Orphaned => "orphaned",
        }
    }
}

/// A request's abort bookkeeping (boxed in `Req::abort`, present only when a scenario models
/// aborts, so other runs pay one null pointer per request).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AbortTrack {
    /// When its client disconnects, ns (absolute); `None`: the client waits for ever.
    pub deadline_ns: Option<Nanos>,
    /// When it could no longer succeed, ns: its client disconnected, or its prefill failed
    /// while the decode side kept it. Pages held from then on are held for nothing.
    pub doomed_ns: Option<Nanos>,
    /// The prefill side already gave back its pages and its load (an orphan: `decode_waits`).
    pub prefill_released: bool,
    /// When its decode pages were preallocated, ns.
    pub decode_alloc_ns: Option<Nanos>,
    /// Prompt tokens its prefill forwards computed (cached prefix not counted).
    pub prefill_tokens: u64,
    /// GPU time of those forwards, GPU·ns: each forward's time shared by tokens, times the
    /// instance's GPUs.
    pub prefill_gpu_ns: f64,
    /// Decode dropped it from its waiting queue without giving its pages back
    /// (`sglang.decode_queue_abort = "leak"`, sglang before PR #9817).
    pub decode_leaked: bool,
}
