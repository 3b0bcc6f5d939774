//! How a request ended and the row it leaves in `requests.csv`: the record every floor above
//! the simulation reads (metrics aggregates it, report writes it, diagnose reads it back).

use serde::{Deserialize, Serialize};

use crate::engine::Nanos;

use super::ErrorKind;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Finished decoding from its own bytes.
    Completed,
    /// Ended with an error (see `error_kind`).
    Failed,
    /// Finished with no error but decoded from bytes that were not its own.
    Corrupted,
    /// Still in flight when the run stopped.
    Unfinished,
    /// Its client disconnected (`[workload.client_timeout]`) before it finished, and the
    /// servers aborted it.
    Aborted,
}

impl Outcome {
    /// All outcomes, in report order.
    pub const ALL: [Outcome; 5] = [
        Outcome::Completed,
        Outcome::Failed,
        Outcome::Corrupted,
        Outcome::Unfinished,
        Outcome::Aborted,
    ];
}

/// One row of `requests.csv`: field order is column order; times are integer ns of simulated
/// time, empty where the stage was never reached.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RequestRow {
    /// Request id, in arrival order from 0.
    pub id: u64,
    /// Arrival at the router.
    pub arrival_ns: Nanos,
    /// Global index of the prefill instance (empty if the router had no live one).
    pub prefill_instance: Option<u32>,
    /// Global index of the decode instance (empty if the router had no live one).
    pub decode_instance: Option<u32>,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens requested.
    pub output_tokens: u32,
    /// Entered the prefill waiting queue (decode's page ids had arrived).
    pub prefill_queued_ns: Option<Nanos>,
    /// First chunk's forward started.
    pub prefill_start_ns: Option<Nanos>,
    /// Last chunk's forward ended.
    pub prefill_end_ns: Option<Nanos>,
    /// First chunk's transfer started.
    pub transfer_start_ns: Option<Nanos>,
    /// Last chunk's transfer ended.
    pub transfer_end_ns: Option<Nanos>,
    /// Joined a decode batch.
    pub decode_start_ns: Option<Nanos>,
    /// First token delivered (decode received KV and the prefill's first token).
    pub first_token_ns: Option<Nanos>,
    /// Last token, or the failure.
    pub finish_ns: Option<Nanos>,
    /// KV and state bytes moved for this request.
    pub kv_bytes: u64,
    /// RDMA writes posted for this request.
    pub rdma_writes: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Error kind of a failed request (docs/architecture.md §4), empty otherwise.
    pub error_kind: Option<ErrorKind>,
    /// Requests whose pages or slots this request's writes landed on (space-separated ids);
    /// its own id when its own transfer left its own pages or slots wrong.
    pub victims: String,
    /// The culprits of a corrupted request: requests whose writes left foreign bytes in its
    /// pages or slots, or its own id when its own transfer is to blame (never empty for a
    /// `corrupted` row; every id listed names this request among its `victims`).
    pub corrupted_by: String,
    /// Times decode retracted it (ran out of pages mid-generation) and it was re-transferred.
    pub retractions: u32,
    /// sglang's bootstrap room of the request (the id sglang's messages print; 63-bit, drawn
    /// from the seed and the request id). Last column, so earlier column positions hold.
    pub bootstrap_room: u64,
    /// The conversation it is a turn of (`[workload.sessions]`, or a trace's `session_id`).
    /// A column only in runs with sessions (written through [`SessionCells`]), so other
    /// runs' files keep their bytes.
    #[serde(default, skip_serializing)]
    pub session_id: Option<u64>,
    /// Its turn in that conversation, from 0 (a column only in runs with sessions).
    #[serde(default, skip_serializing)]
    pub turn: Option<u32>,
    /// Prompt tokens its prefill found cached on any tier at its first admission (a column
    /// only in runs with sessions).
    #[serde(default, skip_serializing)]
    pub cached_tokens: Option<u32>,
    /// When the server produced the first token, where `first_token_ns` is the client's later
    /// time (`first_token_path_s`); not a column. The decode-queue wait is measured from it.
    #[serde(skip)]
    pub server_first_token_ns: Option<Nanos>,
    /// Its inter-token gaps as they went: the worst one and where decoding resumes from after
    /// a retraction; not a column (`summary.json` `latency_ms.tbt` aggregates them).
    #[serde(skip)]
    pub gaps: TokenGaps,
}

/// What a client waited through between two tokens of one request: the three places a gap
/// comes from (`summary.json` `slo.targets[].late`, `pdsim explain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum GapKind {
    /// The first token of a decoding stint that did not follow its previous token by one
    /// forward: in PD the prefill's token → the first decoded token (KV transfer, the wait to
    /// join a decode batch, one step); after a retraction, the last token before it → the
    /// first after it (the prefill and transfer again); on a colocated server, a computed
    /// request that waited for a place in the batch.
    #[default]
    Handoff,
    /// One forward that decoded only (a decode server's step, a colocated forward without
    /// prefill work).
    DecodeStep,
    /// One colocated forward that also ran prefill chunks: the prefill interference PD removes.
    MixedStep,
}

impl GapKind {
    /// Every kind, in report order.
    pub const ALL: [GapKind; 3] = [GapKind::Handoff, GapKind::DecodeStep, GapKind::MixedStep];

    /// Its place in [`GapKind::ALL`].
    #[inline]
    pub fn index(self) -> usize {
        self as usize
    }

    /// The snake_case name reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            GapKind::Handoff => "handoff",
            GapKind::DecodeStep => "decode_step",
            GapKind::MixedStep => "mixed_step",
        }
    }

    /// A step's kind: mixed when the forward also ran prefill work.
    #[inline]
    pub fn step(mixed: bool) -> Self {
        if mixed {
            GapKind::MixedStep
        } else {
            GapKind::DecodeStep
        }
    }
}

/// One request's inter-token gaps, kept as they go: two words a request, never a record per
/// token (the servers fold in a whole stint's steps when the request leaves its batch:
/// `metrics::gaps::StepGaps`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TokenGaps {
    /// Its worst gap so far, ns, with its kind (the first of equal ones); `None` before its
    /// second token.
    pub worst: Option<(Nanos, GapKind)>,
    /// When its last token came before it left a batch with tokens still to make (a
    /// retraction), server time, ns: the gap to its next token runs from here, not from its
    /// first token.
    pub resumed_from: Option<Nanos>,
}

impl TokenGaps {
    /// A gap of `gap` ns of kind `kind` was seen.
    #[inline]
    pub fn saw(&mut self, gap: Nanos, kind: GapKind) {
        if self.worst.is_none_or(|w| gap > w.0) {
            self.worst = Some((gap, kind));
        }
    }
}

/// The columns `requests.csv` adds after [`RequestRow`]'s in a run with sessions (written
/// as the pair `(row, cells)`: one header, one record).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SessionCells {
    /// [`RequestRow::session_id`].
    pub session_id: Option<u64>,
    /// [`RequestRow::turn`].
    pub turn: Option<u32>,
    /// [`RequestRow::cached_tokens`].
    pub cached_tokens: Option<u32>,
}

impl SessionCells {
    /// The session columns of `row`.
    pub fn of(row: &RequestRow) -> Self {
        Self {
            session_id: row.session_id,
            turn: row.turn,
            cached_tokens: row.cached_tokens,
        }
    }
}

impl RequestRow {
    /// The instances that served the request, each once: its prefill and its decode, or the
    /// one server of a colocated pool (which the row names as both).
    pub fn instances(&self) -> impl Iterator<Item = u32> {
        let decode = self
            .decode_instance
            .filter(|&d| Some(d) != self.prefill_instance);
        self.prefill_instance.into_iter().chain(decode)
    }

    /// A request that just arrived: every stage still ahead of it.
    pub fn arrived(
        id: u64,
        arrival_ns: Nanos,
        instances: Option<(u32, u32)>,
        input_tokens: u32,
        output_tokens: u32,
    ) -> Self {
        Self {
            id,
            arrival_ns,
            prefill_instance: instances.map(|i| i.0),
            decode_instance: instances.map(|i| i.1),
            input_tokens,
            output_tokens,
            prefill_queued_ns: None,
            prefill_start_ns: None,
            prefill_end_ns: None,
            transfer_start_ns: None,
            transfer_end_ns: None,
            decode_start_ns: None,
            first_token_ns: None,
            finish_ns: None,
            kv_bytes: 0,
            rdma_writes: 0,
            outcome: Outcome::Unfinished,
            error_kind: None,
            victims: String::new(),
            corrupted_by: String::new(),
            retractions: 0,
            bootstrap_room: 0,
            session_id: None,
            turn: None,
            cached_tokens: None,
            server_first_token_ns: None,
            gaps: TokenGaps::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RequestRow;

    /// A PD request names two instances, a colocated one its server twice (counted once), an
    /// unrouted one none.
    #[test]
    fn a_rows_instances_are_each_named_once() {
        let of = |i| {
            RequestRow::arrived(0, 0, i, 10, 10)
                .instances()
                .collect::<Vec<_>>()
        };
        assert_eq!(of(Some((3, 7))), vec![3, 7]);
        assert_eq!(of(Some((4, 4))), vec![4]);
        assert_eq!(of(None), Vec::<u32>::new());
    }
}
