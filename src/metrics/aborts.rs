//! `summary.json` `aborts`: client disconnects, where the servers aborted the requests, the
//! prefill work they wasted, and the pages they held for nothing, per side (present only when
//! the scenario models aborts: `[workload.client_timeout]`, `router.abort_propagation`, or a
//! trace whose rows give `timeout_s`).

use serde::{Deserialize, Serialize};

use crate::vocab::abort::AbortStage;

/// `summary.json` `aborts`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AbortSummary {
    /// `router.abort_propagation` in force (`cancel_paired` or `decode_waits`).
    pub propagation: String,
    /// The clients' deadline, in words (`null`: clients wait for ever).
    pub client_timeout: Option<String>,
    /// Requests whose client deadline passed before they ended.
    pub disconnected: u64,
    /// Requests the servers aborted for it (`requests.aborted`).
    pub aborted: u64,
    /// Aborted requests by where they were, in pipeline order; stages with none left out.
    pub by_stage: Vec<StageCount>,
    /// Requests whose prefill failed while the decode side kept them (`decode_waits`).
    pub orphaned: u64,
    /// sglang's message of the first prefill failure that orphaned a request.
    pub orphan_message: Option<String>,
    /// Prompt tokens prefill computed for requests later aborted.
    pub wasted_prefill_tokens: u64,
    /// GPU-seconds of those prefill forwards (each forward's time shared by tokens, times the
    /// instance's GPUs).
    pub wasted_prefill_gpu_s: f64,
    /// Pages the doomed requests (aborted or orphaned) held on the prefill side.
    pub prefill: HeldPages,
    /// Pages the doomed requests held on the decode side (leaked pages not included: they
    /// were never released).
    pub decode: HeldPages,
    /// Pages decode never gave back (`sglang.decode_queue_abort = "leak"`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_leaked: Option<LeakedPages>,
}

/// KV pages decode lost to aborted requests it dropped from its waiting queue without freeing
/// them (sglang before PR #9817).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct LeakedPages {
    /// Aborted requests whose pages leaked.
    pub requests: u64,
    /// Pages lost, all decode instances together (still lost at the run's end).
    pub pages: u64,
    /// Page-seconds they stayed lost, from each abort to the run's end.
    pub page_s: f64,
}

/// Aborted requests at one stage.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct StageCount {
    /// The stage.
    pub stage: AbortStage,
    /// Requests aborted there.
    pub count: u64,
}

/// What doomed requests held on one side: a request is doomed from its client's disconnect
/// (or its prefill's failure, for an orphan) to its end.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct HeldPages {
    /// Doomed requests that still held pages here when they were released.
    pub requests: u64,
    /// KV page-seconds they held here, from allocation to release.
    pub page_s: f64,
    /// Of those, page-seconds held after they were doomed.
    pub page_s_after_doom: f64,
    /// Longest time from a request's doom to the release of its pages here, s (`null` when
    /// none held any).
    pub max_held_after_doom_s: Option<f64>,
    /// Mean of that time over `requests`, s.
    pub mean_held_after_doom_s: Option<f64>,
}
