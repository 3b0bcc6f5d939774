//! Per-request records and streaming aggregates. Nothing here reads the clock or files.

pub mod aborts;
pub mod fragmentation;
pub mod gaps;
pub mod gauges;
pub mod histogram;
pub mod sampler;
pub mod sessions;
pub mod slo;
pub mod summary;

pub use histogram::{Histogram, Stats};
use serde::{Deserialize, Serialize};

use crate::engine::Nanos;
use crate::vocab::{ErrorKind, Outcome, RequestRow};

/// One row of `timeseries.csv`: one simulated second of one instance. A run whose pools change
/// size (`[autoscaler]` with a resizing policy) adds three columns, `state`,
/// `prefill_instances` and `decode_instances` ([`FleetColumns`]); every other run's rows keep
/// the twelve they had.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct TimeseriesRow {
    /// End of the one-second interval, whole simulated seconds.
    pub second: u64,
    /// Global instance index (prefill instances first).
    pub instance: u32,
    /// Pool name.
    pub pool: String,
    /// `prefill` or `decode`.
    pub role: &'static str,
    /// Requests routed to this instance during the interval.
    pub arrivals: u64,
    /// Requests in the running batch at the sample (prefill: in the forward; decode: decoding).
    pub running: u32,
    /// Requests waiting at the sample (prefill: waiting queue; decode: prealloc queue and
    /// transferred requests not yet in the batch).
    pub queued: u32,
    /// KV pages held at the sample.
    pub kv_pages_used: u64,
    /// KV pages the instance has.
    pub kv_pages_total: u64,
    /// Tokens produced during the interval (prefill: first tokens; decode: decoded tokens).
    pub tokens_out: u64,
    /// Share of the interval the instance spent in forward passes, 0–1.
    pub busy_fraction: f64,
    /// Busy share of the instance's NICs in its transfer direction (prefill TX, decode RX), 0–1.
    pub link_utilisation: f64,
    /// The pools' sizes and this instance's slot state, when the pools change size.
    #[serde(skip)]
    pub fleet: Option<FleetColumns>,
}

/// The columns a run whose pools change size adds to `timeseries.csv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetColumns {
    /// This instance's slot at the second's end: `off`, `starting`, `serving` or `draining`.
    pub state: &'static str,
    /// Prefill instances serving (in the router's set) at the second's end.
    pub prefill_instances: u32,
    /// Decode instances serving at the second's end.
    pub decode_instances: u32,
}

impl Serialize for TimeseriesRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let n = if self.fleet.is_some() { 15 } else { 12 };
        let mut st = s.serialize_struct("TimeseriesRow", n)?;
        st.serialize_field("second", &self.second)?;
        st.serialize_field("instance", &self.instance)?;
        st.serialize_field("pool", &self.pool)?;
        st.serialize_field("role", &self.role)?;
        st.serialize_field("arrivals", &self.arrivals)?;
        st.serialize_field("running", &self.running)?;
        st.serialize_field("queued", &self.queued)?;
        st.serialize_field("kv_pages_used", &self.kv_pages_used)?;
        st.serialize_field("kv_pages_total", &self.kv_pages_total)?;
        st.serialize_field("tokens_out", &self.tokens_out)?;
        st.serialize_field("busy_fraction", &self.busy_fraction)?;
        st.serialize_field("link_utilisation", &self.link_utilisation)?;
        if let Some(f) = &self.fleet {
            st.serialize_field("state", f.state)?;
            st.serialize_field("prefill_instances", &f.prefill_instances)?;
            st.serialize_field("decode_instances", &f.decode_instances)?;
        }
        st.end()
    }
}

/// One row of `links.csv`: one simulated second of one fabric link that carried traffic or was
/// not healthy.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LinkRow {
    /// End of the one-second interval, whole simulated seconds.
    pub second: u64,
    /// `node<N>.nic<I>.tx|rx`, `node<N>.gpu<G>.nvlink_tx|nvlink_rx`, `switch<S>.up|down`.
    pub link: String,
    /// Capacity now (after degradation; 0 when down), Gb/s.
    pub capacity_gbps: f64,
    /// Bytes carried in the interval over what the healthy link could carry, 0–1.
    pub utilisation: f64,
    /// Bytes carried in the interval.
    pub bytes: u64,
    /// Bytes sent again after packet loss in the interval.
    pub retransmitted_bytes: u64,
    /// Whether the link is up at the sample.
    pub up: bool,
}

/// A prefill transfer worker that died: a raise escaped `send_kvcache` (sglang's
/// `transfer_worker` thread ends; "Transfer thread failed because of … is dead."). Kept so the
/// reports can mark when and where it happened; a run has at most one per shard and crash.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerDeath {
    /// Simulated time of the raise, ns.
    pub at_ns: Nanos,
    /// Global index of the prefill instance.
    pub prefill_instance: u32,
    /// The prefill TP rank whose worker died (every rank has its own queues, docs/sglang-pd.md §11.3).
    pub rank: u32,
    /// The rank's transfer queue (shard) whose worker died.
    pub shard: u32,
    /// The check that raised.
    pub kind: ErrorKind,
}

/// Where the simulation streams its rows. The report layer implements it over files; tests
/// implement it over vectors. Rows of `requests` arrive in request-id order.
pub trait Sink {
    /// One finished (or unfinished, at the end) request.
    fn request(&mut self, row: &RequestRow) -> std::io::Result<()>;
    /// One instance-second.
    fn timeseries(&mut self, row: &TimeseriesRow) -> std::io::Result<()>;
    /// One link-second.
    fn link(&mut self, row: &LinkRow) -> std::io::Result<()>;
    /// Whether this sink keeps rows at all: a sink that drops them (`--summary-only`, sweeps)
    /// spares the simulation building them and holding finished rows back for id order.
    fn wants_rows(&self) -> bool {
        true
    }
}

/// A [`Sink`] that drops every row: `pdsim run --summary-only` and sweeps, where only the
/// aggregates (which the [`Collector`] keeps) are wanted.
#[derive(Default, Debug, Clone, Copy)]
pub struct NullSink;

impl Sink for NullSink {
    fn request(&mut self, _: &RequestRow) -> std::io::Result<()> {
        Ok(())
    }
    fn timeseries(&mut self, _: &TimeseriesRow) -> std::io::Result<()> {
        Ok(())
    }
    fn link(&mut self, _: &LinkRow) -> std::io::Result<()> {
        Ok(())
    }
    fn wants_rows(&self) -> bool {
        false
    }
}

/// A [`Sink`] that keeps everything in memory (tests, small runs).
#[derive(Default, Debug)]
pub struct VecSink {
    /// Request rows in id order.
    pub requests: Vec<RequestRow>,
    /// Timeseries rows in time order.
    pub timeseries: Vec<TimeseriesRow>,
    /// Link rows in time order.
    pub links: Vec<LinkRow>,
}

impl Sink for VecSink {
    fn request(&mut self, row: &RequestRow) -> std::io::Result<()> {
        self.requests.push(row.clone());
        Ok(())
    }
    fn timeseries(&mut self, row: &TimeseriesRow) -> std::io::Result<()> {
        self.timeseries.push(row.clone());
        Ok(())
    }
    fn link(&mut self, row: &LinkRow) -> std::io::Result<()> {
        self.links.push(row.clone());
        Ok(())
    }
}

/// Latency aggregates, in ms.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Latencies {
    /// Arrival → first token.
    pub ttft: Stats,
    /// (finish − first token) ÷ (output − 1), requests with ≥ 2 output tokens.
    pub tpot: Stats,
    /// Gap between consecutive tokens of a request, over every gap of every request (all
    /// tokens pooled, whatever the request's outcome).
    pub itl: Stats,
    /// Arrival → last token.
    pub e2e: Stats,
    /// Prefill waiting queue → first prefill forward.
    pub queue: Stats,
    /// Arrival → the prefill holds decode's page ids (decode prealloc queue plus the metadata
    /// message): the bootstrap stage.
    pub bootstrap: Stats,
    /// First token → joining a decode batch.
    pub decode_queue: Stats,
    /// First chunk's transfer start → last chunk's transfer end.
    pub transfer: Stats,
    /// Each request's worst inter-token gap (Mooncake's TBT), over finished requests with ≥ 2
    /// output tokens. Absent from summaries written before it (read back as no data).
    #[serde(default = "Stats::none")]
    pub tbt: Stats,
    /// Each request's end-to-end latency ÷ its output tokens, over finished requests (absent
    /// from older summaries, read back as no data).
    #[serde(default = "Stats::none")]
    pub e2e_per_token: Stats,
}

/// Request counts by outcome.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Default)]
pub struct Counts {
    /// Requests that arrived.
    pub arrived: u64,
    /// Finished from their own bytes.
    pub completed: u64,
    /// Ended with an error.
    pub failed: u64,
    /// Finished from foreign or stale bytes.
    pub corrupted: u64,
    /// In flight when the run stopped.
    pub unfinished: u64,
    /// Aborted after their client disconnected (absent when 0, so runs without client
    /// deadlines keep their bytes): `arrived = completed + failed + corrupted + unfinished +
    /// aborted`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub aborted: u64,
}

impl Counts {
    /// Whether every arrived request is counted once by outcome (what a pdsim writer
    /// guarantees, and what readers of `summary.json` check): the outcomes sum, without
    /// overflow, to `arrived`.
    pub fn conserved(&self) -> bool {
        [
            self.completed,
            self.failed,
            self.corrupted,
            self.unfinished,
            self.aborted,
        ]
        .iter()
        .try_fold(0u64, |a, &b| a.checked_add(b))
            == Some(self.arrived)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One error kind: how often, and sglang's message the first time it happened.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ErrorCount {
    /// Stable snake_case kind.
    pub kind: String,
    /// Requests that failed with it.
    pub count: u64,
    /// The message, quoted once.
    pub message: String,
}

/// An empty slot of the id-order ring.
const NO_ROW: u32 = u32::MAX;

/// Streaming aggregates over request rows: bounded memory whatever the number of requests,
/// except the id-order buffer, which holds only rows that finished ahead of an earlier request.
#[derive(Default)]
pub struct Collector {
    /// TTFT of corrupted requests, ns: with [`Collector::ttft_completed`], every answered
    /// request's ([`Collector::ttft`]). Kept apart so a request is recorded once, not in an
    /// "all" histogram and again in its outcome's.
    ttft_corrupted: Histogram,
    /// TPOT of corrupted requests with ≥ 2 output tokens, ns (as `ttft_corrupted`).
    tpot_corrupted: Histogram,
    /// Inter-token gaps by kind, ns (fed by the servers, one record per step and kind).
    pub itl: gaps::Gaps,
    /// Each corrupted request's worst inter-token gap, ns (with [`Collector::tbt_completed`]:
    /// every finished request's, `latency_ms.tbt`).
    pub tbt_corrupted: Histogram,
    /// Each finished request's end-to-end latency ÷ output tokens, ns.
    pub e2e_per_token: Histogram,
    /// End-to-end, ns.
    pub e2e: Histogram,
    /// Prefill queueing, ns.
    pub queue: Histogram,
    /// Bootstrap stage, ns.
    pub bootstrap: Histogram,
    /// Decode queueing, ns.
    pub decode_queue: Histogram,
    /// Transfer, ns.
    pub transfer: Histogram,
    /// Counts by outcome.
    pub counts: Counts,
    /// Error kinds in first-seen order of kind name (BTreeMap: stable output order).
    pub errors: std::collections::BTreeMap<&'static str, (u64, String)>,
    /// Input and output tokens of finished requests.
    pub tokens_in: u64,
    /// Output tokens of finished requests.
    pub tokens_out: u64,
    /// Requests that **completed** (not corrupted) within every per-request SLO threshold.
    pub slo_met: u64,
    /// TTFT of completed (uncorrupted) requests, ns: the population of SLO percentiles.
    pub ttft_completed: Histogram,
    /// TPOT of completed requests with ≥ 2 output tokens, ns.
    pub tpot_completed: Histogram,
    /// Completed requests with one output token (they have no TPOT).
    pub one_token_completed: u64,
    /// Worst inter-token gap of completed requests with ≥ 2 output tokens, ns, by the kind of
    /// that gap: the population of TBT targets.
    pub tbt_completed: gaps::Gaps,
    /// Completed requests past each per-request threshold set, `[ttft, tpot, tbt,
    /// e2e_per_token]` (a request past two counts in both): why attainment fell short.
    pub past_threshold: [u64; 4],
    /// Says when `[slo]` can no longer be met (installed by `pdsim plan` to stop a run early;
    /// `None` everywhere else, and then nothing changes).
    pub slo_watch: Option<slo::SloWatch>,
    /// When arrivals stopped (the arrival window's end), ns; `None` while they go on.
    pub window_end_ns: Option<Nanos>,
    /// Counts inside the arrival window.
    pub window: WindowCounts,
    /// KV and state bytes moved.
    pub kv_bytes: u64,
    /// RDMA writes posted.
    pub rdma_writes: u64,
    /// RDMA writes per request and transfer time by when the transfer started.
    pub transfer_shape: fragmentation::TransferShape,
    /// Achieved bandwidth of each completed Mooncake batch (latency included), MB/s.
    pub bandwidth: Histogram,
    /// Bytes sent again after packet loss.
    pub retransmitted_bytes: f64,
    /// Transfer workers that died, in time order (for the reports' markers).
    pub worker_deaths: Vec<WorkerDeath>,
    /// Request `next_id + k` finished ahead of an earlier one iff `order[k]` names its row in
    /// `rows` ([`NO_ROW`] otherwise). A ring of 4-byte indices, not of rows: under overload
    /// thousands of requests wait for their timeouts, and each would cost a whole row here.
    order: std::collections::VecDeque<u32>,
    /// Rows held back, by slot; freed slots are reused.
    rows: Vec<Option<RequestRow>>,
    free_rows: Vec<u32>,
    /// Rows held back.
    held: usize,
    next_id: u64,
}

/// What happened inside the arrival window (see `summary::WindowThroughput`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WindowCounts {
    /// Requests finished (completed or corrupted).
    pub finished: u64,
    /// Completed requests within every per-request SLO threshold.
    pub slo_met: u64,
    /// Prompt tokens whose first token came.
    pub input_tokens: u64,
    /// Tokens generated.
    pub output_tokens: u64,
}

impl Collector {
    /// A collector for a run whose arrivals are planned to last `window_ns` (`run.duration_s`):
    /// the transfer shape's buckets span it.
    pub fn for_window(window_ns: Nanos) -> Self {
        Self {
            transfer_shape: fragmentation::TransferShape::new(window_ns),
            ..Self::default()
        }
    }

    /// Whether time `t` lies inside the arrival window.
    fn in_window(&self, t: Nanos) -> bool {
        self.window_end_ns.is_none_or(|end| t <= end)
    }

    /// `n` tokens were generated at `now` (a decode step's batch, a prefill's first token).
    pub fn tokens_generated(&mut self, now: Nanos, n: u64) {
        if self.in_window(now) {
            self.window.output_tokens += n;
        }
    }

    /// A prompt of `input` tokens got its first token at `now` (counted once per request).
    pub fn prompt_done(&mut self, now: Nanos, input: u32) {
        if self.in_window(now) {
            self.window.input_tokens += u64::from(input);
        }
    }

    /// Counts an error raised in a prefill transfer worker (it fails no request by itself: the
    /// rooms behind it time out), quoting its message the first time.
    pub fn raised(&mut self, kind: ErrorKind, message: &str) {
        self.errors
            .entry(kind.as_str())
            .or_insert_with(|| (0, message.to_string()))
            .0 += 1;
    }

    /// Records a request's end and streams every row now in id order to `sink`.
    pub fn finish(
        &mut self,
        row: &RequestRow,
        message: Option<&str>,
        slo: crate::config::Thresholds,
        sink: &mut dyn Sink,
    ) -> std::io::Result<()> {
        self.kv_bytes += row.kv_bytes;
        self.rdma_writes += row.rdma_writes;
        self.transfer_shape.record(row);
        match row.outcome {
            Outcome::Completed | Outcome::Corrupted => self.count_answered(row, slo),
            Outcome::Failed => {
                self.counts.failed += 1;
                self.not_completed();
                let kind = row.error_kind.expect("a failed request has an error kind");
                let e = self
                    .errors
                    .entry(kind.as_str())
                    .or_insert_with(|| (0, message.unwrap_or_default().to_string()));
                e.0 += 1;
            }
            Outcome::Aborted => {
                self.counts.aborted += 1;
                self.not_completed();
            }
            Outcome::Unfinished => {
                self.counts.unfinished += 1;
                self.not_completed();
            }
        }
        self.record_stages(row);
        if !sink.wants_rows() {
            // Nothing is written, so nothing waits for id order.
            return Ok(());
        }
        self.stream_in_order(row, sink)
    }

    /// A request that did not complete, for the SLO watch.
    #[inline]
    fn not_completed(&mut self) {
        if let Some(w) = &mut self.slo_watch {
            w.not_completed();
        }
    }

    /// A request whose client got an answer (completed, or corrupted): tokens, latencies, and
    /// for a completed one its SLO verdict.
    // One call site on the per-request path: split for reading, inlined as it was.
    #[inline(always)]
    fn count_answered(&mut self, row: &RequestRow, slo: crate::config::Thresholds) {
        if row.outcome == Outcome::Completed {
            self.counts.completed += 1;
        } else {
            self.counts.corrupted += 1;
        }
        self.tokens_in += u64::from(row.input_tokens);
        self.tokens_out += u64::from(row.output_tokens);
        let ft = row
            .first_token_ns
            .expect("a finished request has a first token");
        let fin = row.finish_ns.expect("a finished request has a finish time");
        let ttft = ft - row.arrival_ns;
        let e2e = fin - row.arrival_ns;
        self.e2e.record(e2e);
        let e2e_per_token = e2e / u64::from(row.output_tokens.max(1));
        self.e2e_per_token.record(e2e_per_token);
        let tpot = (row.output_tokens > 1).then(|| (fin - ft) / u64::from(row.output_tokens - 1));
        let gap = row.gaps.worst;
        debug_assert!(
            (row.output_tokens > 1) == gap.is_some() || row.outcome != Outcome::Completed,
            "request {}: {} output tokens but worst gap {gap:?}",
            row.id,
            row.output_tokens
        );

        let in_window = self.in_window(fin);
        if in_window {
            self.window.finished += 1;
        }
        // A corrupted request decoded from bytes that were not its own: whatever its
        // latency, it met no SLO (docs/architecture.md §3).
        if row.outcome != Outcome::Completed {
            self.ttft_corrupted.record(ttft);
            if let Some(t) = tpot {
                self.tpot_corrupted.record(t);
            }
            if let Some((g, _)) = gap {
                self.tbt_corrupted.record(g);
            }
            self.not_completed();
            return;
        }
        self.ttft_completed.record(ttft);
        match tpot {
            Some(t) => self.tpot_completed.record(t),
            None => self.one_token_completed += 1,
        }
        if let Some((g, kind)) = gap {
            self.tbt_completed.of(kind).record(g);
        }
        // Each threshold set, against this request's figure (a one-token request has no TPOT
        // and no gap: it is within both).
        let attained = !slo.any() || {
            let past = [
                slo.ttft_ns.is_some_and(|s| ttft > s),
                slo.tpot_ns.is_some_and(|s| tpot.is_some_and(|t| t > s)),
                slo.tbt_ns.is_some_and(|s| gap.is_some_and(|g| g.0 > s)),
                slo.e2e_per_token_ns.is_some_and(|s| e2e_per_token > s),
            ];
            for (n, p) in self.past_threshold.iter_mut().zip(past) {
                *n += u64::from(p);
            }
            !past.contains(&true)
        };
        if let Some(w) = &mut self.slo_watch {
            w.completed(ttft, tpot, gap.map(|g| g.0), attained);
        }
        if attained {
            self.slo_met += 1;
            if in_window {
                self.window.slo_met += 1;
            }
        }
    }

    /// The stage histograms: queue, bootstrap, decode queue, transfer.
    // One call site on the per-request path: split for reading, inlined as it was.
    #[inline(always)]
    fn record_stages(&mut self, row: &RequestRow) {
        if let (Some(q), Some(s)) = (row.prefill_queued_ns, row.prefill_start_ns) {
            self.queue.record(s - q);
        }
        if let Some(q) = row.prefill_queued_ns {
            self.bootstrap.record(q - row.arrival_ns);
        }
        // From the server's first token: the client's comes `first_token_path_s` later, after
        // the request may already have joined its decode batch.
        let served = row.server_first_token_ns.or(row.first_token_ns);
        if let (Some(f), Some(d)) = (served, row.decode_start_ns) {
            debug_assert!(
                d >= f,
                "request {} joined decode before its first token",
                row.id
            );
            self.decode_queue.record(d.saturating_sub(f));
        }
        if let (Some(a), Some(b)) = (row.transfer_start_ns, row.transfer_end_ns) {
            self.transfer.record(b - a);
        }
    }

    /// Writes `row` to `sink` if every earlier id is written, then every held row it was
    /// holding back; else holds it.
    fn stream_in_order(&mut self, row: &RequestRow, sink: &mut dyn Sink) -> std::io::Result<()> {
        let k = usize::try_from(row.id - self.next_id).expect("a row's id is ahead of the stream");
        if k > 0 {
            // Ahead of an earlier request: held until that one is written.
            if k >= self.order.len() {
                self.order.resize(k + 1, NO_ROW);
            }
            assert!(self.order[k] == NO_ROW, "request {} finished twice", row.id);
            let slot = match self.free_rows.pop() {
                Some(s) => {
                    self.rows[s as usize] = Some(row.clone());
                    s
                }
                None => {
                    self.rows.push(Some(row.clone()));
                    (self.rows.len() - 1) as u32
                }
            };
            self.order[k] = slot;
            self.held += 1;
            return Ok(());
        }
        // In order: straight out, then every held row it was holding back.
        self.order.pop_front();
        self.next_id += 1;
        sink.request(row)?;
        while let Some(&slot) = self.order.front() {
            if slot == NO_ROW {
                break;
            }
            self.order.pop_front();
            let row = self.rows[slot as usize].take().expect("a held row");
            self.free_rows.push(slot);
            self.held -= 1;
            self.next_id += 1;
            sink.request(&row)?;
        }
        Ok(())
    }

    /// Whether `[slo]` can no longer be met (see [`slo::SloWatch`]; never without a watch).
    pub fn slo_lost(&self) -> bool {
        self.slo_watch.as_ref().is_some_and(slo::SloWatch::lost)
    }

    /// Rows held back waiting for an earlier request (must be 0 after the run).
    pub fn held_back(&self) -> usize {
        self.held
    }

    /// TTFT of every answered request (completed or corrupted), ns.
    pub fn ttft(&self) -> Histogram {
        let mut h = self.ttft_completed.clone();
        h.merge(&self.ttft_corrupted);
        h
    }

    /// TPOT of every answered request with ≥ 2 output tokens, ns.
    pub fn tpot(&self) -> Histogram {
        let mut h = self.tpot_completed.clone();
        h.merge(&self.tpot_corrupted);
        h
    }

    /// Latency aggregates in ms.
    pub fn latencies(&self) -> Latencies {
        let s = 1e-6;
        Latencies {
            ttft: self.ttft().summary(s),
            tpot: self.tpot().summary(s),
            itl: self.itl.merged().summary(s),
            e2e: self.e2e.summary(s),
            queue: self.queue.summary(s),
            bootstrap: self.bootstrap.summary(s),
            decode_queue: self.decode_queue.summary(s),
            transfer: self.transfer.summary(s),
            tbt: {
                let mut h = self.tbt_completed.merged();
                h.merge(&self.tbt_corrupted);
                h.summary(s)
            },
            e2e_per_token: self.e2e_per_token.summary(s),
        }
    }
}
