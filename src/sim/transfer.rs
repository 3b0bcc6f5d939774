//! `World`'s side of the transfer: queueing chunks on every prefill rank's transfer queues,
//! driving the lanes' workers of [`crate::sglang::transfer`], keeping one fabric timer, and
//! landing finished batches in decode memory, where the corruption oracle judges them
//! (`docs/sglang-pd.md` §2.4–§2.6, §3.1, §3.8).

use super::FlowEnd;
use crate::layout::{PdError, RequestId};
use crate::metrics::WorkerDeath;
use crate::sglang::transfer::{Kick, KickEnv, Landed, chunk_request};
use crate::vocab::flow::FlowTag;

use super::World;
use crate::vocab::event::{Event, Wake, lane};
use crate::vocab::ids::{PrefillId, ShardId};
use crate::vocab::requests::{ChunkJob, KvPoll};

use crate::sglang::transfer::BOOTSTRAP_PORT;

/// The line sglang logs when an exception escapes `transfer_worker` (0005973a):
/// `f"Transfer thread failed because of {e}. Prefill instance with
/// bootstrap_port={self.bootstrap_port} is dead."` — the thread dies with it.
pub fn transfer_thread_failed(e: &str) -> String {
    format!(
        "Transfer thread failed because of {e}. Prefill instance with bootstrap_port={BOOTSTRAP_PORT} is dead."
    )
}

impl World<'_> {
    /// `add_transfer_request` on every rank of prefill `p`: each rank puts the chunk on its
    /// queue `sum(session ports of the decode ranks it serves for the room) % queue_size`.
    /// The request counts one chunk in flight per rank.
    pub(super) fn enqueue_chunk(&mut self, p: PrefillId, job: ChunkJob) {
        let decode = self.decodes[job.decode].core.instance.0;
        let ranks = self.plans[p][job.decode].prefill_layouts().len() as u32;
        if let Some(req) = self.reqs.get_mut(job.req) {
            // `on_prefill_step_done` counted the chunk once; every further rank adds one.
            req.chunks_in_flight += ranks - 1;
        }
        // Every rank's lane gets the chunk before any worker moves (the lane is recomputed,
        // cheaply, rather than kept in a list allocated per chunk).
        for rank in 0..ranks {
            let l = self.chunk_lane(p, job, decode, rank);
            self.transfers[p].push(l, job);
        }
        for rank in 0..ranks {
            let l = self.chunk_lane(p, job, decode, rank);
            self.kick_shard(p, l);
        }
    }

    /// The lane of prefill `p`'s rank `rank` that a chunk to decode instance number `decode`
    /// goes on.
    fn chunk_lane(&self, p: PrefillId, job: ChunkJob, decode: u32, rank: u32) -> ShardId {
        let plan = &self.plans[p][job.decode];
        let queue = super::rank_queue(plan, decode, rank, self.sc.sglang.queue_size);
        self.transfers[p].lane(rank, queue)
    }

    /// Lets the lane's worker send its next batch, failing rooms as it meets errors.
    pub(super) fn kick_shard(&mut self, p: PrefillId, shard: ShardId) {
        if !self.prefills[p].core.alive() {
            return;
        }
        loop {
            let mut env = KickEnv {
                reqs: &mut self.reqs,
                fabric: &mut self.fabric,
                q: &mut self.q,
                decodes: &self.endpoints,
                plans: &self.plans[p],
                gpus: &self.prefills[p].core.gpus,
                base_latency_ns: self.sc.fabric.model.base_latency_ns,
            };
            match self.transfers[p].kick(p, shard, &mut env) {
                Kick::Done => return,
                Kick::Started => {
                    self.fabric_sync();
                    return;
                }
                Kick::Fail { req, kind, message } => self.fail(req, kind, &message),
                Kick::FailWith { req, error } => self.fail_with(req, &error),
                Kick::WorkerDied(e) => {
                    self.worker_died(p, shard, &e);
                    return;
                }
                Kick::ChunkDone(job) => {
                    self.rank_chunk_done(p, job);
                    // The usual end of a chunk: nothing queued behind it, so the next kick
                    // would find the worker idle (skipped, not paid for).
                    if self.transfers[p].is_idle(shard) {
                        return;
                    }
                }
            }
        }
    }

    /// An exception escaped `transfer_worker`: the lane's worker thread died with sglang's
    /// "Transfer thread failed because of … is dead." — the line the prefill's operator sees,
    /// so it is the message the summary shows. Its queued and future chunks never move; their
    /// rooms wait for the decode waiting timeout. Counted once per raise, i.e. per rank, and the
    /// death recorded for the reports' markers.
    fn worker_died(&mut self, p: PrefillId, lane: ShardId, e: &PdError) {
        self.collector
            .raised(e.kind, &transfer_thread_failed(&e.message));
        let t = &self.transfers[p];
        self.collector.worker_deaths.push(WorkerDeath {
            at_ns: self.q.now(),
            // Prefills come first among the global instances: `PrefillId(i)` is instance i.
            prefill_instance: p.0,
            rank: t.rank_of(lane),
            shard: lane.0 - t.lane(t.rank_of(lane), 0).0,
            kind: e.kind,
        });
    }

    /// Keeps exactly one `FabricDue` event pending, at the fabric's next due time.
    pub(super) fn fabric_sync(&mut self) {
        self.fabric_timer.sync(&mut self.q, &mut self.fabric);
    }

    pub(super) fn on_fabric_due(&mut self) {
        let now = self.q.now();
        self.fabric_timer.fired();
        let mut ends = std::mem::take(&mut self.scratch.ends);
        ends.clear();
        self.fabric.fire_due(now, &mut ends);
        for end in &ends {
            self.flow_ended(end);
        }
        self.scratch.ends = ends;
        self.fabric_sync();
    }

    /// One fabric flow ended: routed to its owner by its tag. A KV batch's flow is counted
    /// against its target by the lane's worker ([`TransferQueues::flow_ended`]); a −1 fails
    /// the room (the TP group's MIN poll fails the whole request).
    pub(super) fn flow_ended(&mut self, end: &FlowEnd) {
        let (p, lane) = match end.token {
            FlowTag::A2a(i) => return self.a2a_flow_ended(end, i),
            FlowTag::Store { op, part } => return self.store_flow_ended(end, op, part),
            FlowTag::Kv { prefill, lane } => (prefill, lane),
        };
        let Some(v) =
            self.transfers[p].flow_ended(lane, end, &self.reqs, &self.endpoints, self.sc.seed)
        else {
            return;
        };
        if let Some(mb_s) = v.bandwidth_mb_s {
            self.collector.bandwidth.record(mb_s);
        }
        if let Some((r, kind, message)) = v.fail {
            self.fail(r, kind, &message);
        }
        self.collector.retransmitted_bytes += end.retransmitted_bytes;
        if v.last {
            self.chunk_done(p, lane);
        }
    }

    /// Every flow of the lane's current batch ended: the bytes land in decode memory, where
    /// the oracle sees whose pages they landed on ([`TransferQueues::batch_done`] keeps the
    /// worker's rules). Then the worker goes on with its next target.
    pub(super) fn chunk_done(&mut self, p: PrefillId, lane: ShardId) {
        let (decodes, endpoints) = (&mut self.decodes, &self.endpoints);
        let landed = self.transfers[p].batch_done(
            lane,
            &self.reqs,
            (&self.plans[p], endpoints),
            self.sc.seed,
            |req, plan, landing| {
                let d = req.decode;
                if let Some(writes) = &landing.writes {
                    let mem = decodes[d].core.pages.oracle().expect("watched");
                    mem.apply(plan, RequestId(req.id), writes).error
                } else {
                    if endpoints[d].watched {
                        let c = chunk_request(req, &landing.job, endpoints[d].page_size);
                        let mem = decodes[d].core.pages.oracle().expect("watched");
                        mem.apply_exact(
                            RequestId(req.id),
                            c.dst_pages,
                            c.dst_slot.filter(|_| landing.whole),
                            landing.whole.then_some(c.dst_aux),
                        );
                    }
                    None
                }
            },
        );
        match landed {
            Landed::Next => {}
            Landed::Fail { req, kind, message } => self.fail(req, kind, &message),
            Landed::WorkerDied(e) => return self.worker_died(p, lane, &e),
        }
        self.kick_shard(p, lane);
    }

    /// One prefill rank sent the chunk to all its targets: once the last chunk's last rank is
    /// done the prefill concludes the transfer (`PrefillServer::rank_chunk_sent`), the router
    /// hears its new load and decode is told over the control plane.
    fn rank_chunk_done(&mut self, p: PrefillId, job: ChunkJob) {
        let now = self.q.now();
        let r = job.req;
        let Some(req) = self.reqs.get_mut(r).filter(|q| q.sender != KvPoll::Failed) else {
            return;
        };
        let holdback = self.sc.compute.pd_prefill_response_holdback;
        if !self.prefills[p].rank_chunk_sent(req, job, now, holdback) {
            return;
        }
        self.sync_prefill(p);
        self.q.schedule_lane(
            lane::CONTROL,
            self.sc.fabric.control_latency_ns,
            Event::TransferSucceeded { req: r },
        );
        self.wake.push(Wake::Prefill(p));
    }
}

/// Every message pdsim attributes to sglang, compared character for character with the
/// template `docs/sglang-pd.md` §12 quotes: the test fills each template's placeholders with
/// the sample values pdsim was given and checks pdsim's rendering equals it. A template in the
/// table without a rendering here, or the reverse, fails the test.
#[cfg(test)]
mod template_tests {
    use std::collections::BTreeMap;

    use crate::layout::checks;
    use crate::sglang::decode::scheduler_hit_an_exception;
    use crate::sglang::heartbeat::lost_prefill;
    use crate::sglang::transfer::{DecodeEndpoint, failed_to_send, session_not_alive, timed_out};
    use crate::vocab::ErrorKind;
    use crate::vocab::ids::InstanceId;

    const DOC: &str = include_str!("../../docs/sglang-pd.md");

    /// `(id, template)` of every row of docs/sglang-pd.md §12's table.
    fn templates() -> BTreeMap<String, String> {
        let start = DOC
            .find("## 12. Every message pdsim attributes to sglang")
            .expect("§12 exists");
        let mut out = BTreeMap::new();
        for line in DOC[start..].lines() {
            let cells: Vec<&str> = line.split(" | ").collect();
            if cells.len() < 3 || !cells[1].starts_with('`') {
                continue;
            }
            let id = cells[0].trim_start_matches('|').trim();
            let t = cells[1].trim().trim_matches('`');
            assert!(
                out.insert(id.to_string(), t.to_string()).is_none(),
                "id {id} twice"
            );
        }
        out
    }

    /// Fills `{expr}` placeholders (the whole text between the braces, format spec included).
    fn fill(template: &str, values: &[(&str, &str)]) -> String {
        let mut out = String::new();
        let mut rest = template;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let j = rest[i..].find('}').expect("closed placeholder") + i;
            let key = &rest[i + 1..j];
            let v = values
                .iter()
                .find(|(k, _)| *k == key)
                .unwrap_or_else(|| panic!("no sample value for {{{key}}} in {template:?}"));
            out.push_str(v.1);
            rest = &rest[j + 1..];
        }
        out + rest
    }

    fn err<T>(r: Result<T, checks::PdError>) -> String {
        r.err().expect("the check raises").message
    }

    /// One message: its docs/sglang-pd.md §12 id, pdsim's text, and the values its f-string is filled with.
    type Case = (&'static str, String, Vec<(&'static str, &'static str)>);

    /// The layout checks' messages (`checks`), filled from the values that raise them.
    fn check_cases() -> Vec<Case> {
        let k = ErrorKind::KvLayersOutOfRange;
        let ids: Vec<u32> = (0..24).collect();
        vec![
            (
                "page_size",
                err(checks::first_contact(16, "auto", 64, "auto")),
                vec![("prefill_page_size", "16"), ("decode_page_size", "64")],
            ),
            (
                "kv_dtype",
                err(checks::first_contact(16, "auto", 16, "bf16")),
                vec![
                    ("prefill_kv_cache_dtype", "auto"),
                    ("decode_kv_cache_dtype", "bf16"),
                ],
            ),
            (
                "envelope_tp",
                err(checks::validate_envelope(
                    true,
                    2,
                    Some(4),
                    &[196_608],
                    1,
                    Some(196_608),
                )),
                vec![("self.attn_tp_size", "2"), ("dst_attn_tp_size", "4")],
            ),
            (
                "envelope_layout",
                err(checks::validate_envelope(
                    true,
                    2,
                    Some(2),
                    &[196_608],
                    24,
                    Some(8192),
                )),
                vec![
                    ("len(src_item_lens)", "1"),
                    ("src_item_lens", "[196608]"),
                    ("len(dst_kv_ptrs)", "24"),
                    ("dst_kv_item_len", "8192"),
                ],
            ),
            (
                "mamba_layouts",
                err(checks::check_mamba_layouts(
                    &[],
                    &[],
                    &[77_266_944],
                    &[38_633_472, 1],
                )),
                vec![
                    ("src_item_lens", "[77266944]"),
                    ("dst_item_lens", "[38633472, 1]"),
                ],
            ),
            (
                "mamba_slot",
                err(checks::check_mamba_slot_size(16, 32)),
                vec![("length", "16"), ("dst_state_item_lens[j]", "32")],
            ),
            (
                "swa_tp",
                err(checks::check_swa_hetero_tp("swa", false, 1, 4)),
                vec![("st.upper()", "SWA")],
            ),
            (
                "layers_range",
                err(checks::check_kv_layers(80, 64)),
                vec![("layers_current_pp_stage", "80"), ("len(dst_k_ptrs)", "64")],
            ),
            (
                "pairs_both",
                err(checks::build_transfer_entry_pairs(
                    &[1],
                    &[],
                    1,
                    1,
                    false,
                    k,
                )),
                vec![],
            ),
            (
                "pairs_len",
                err(checks::build_transfer_entry_pairs(
                    &[3],
                    &[3, 7],
                    2,
                    2,
                    true,
                    k,
                )),
                vec![
                    ("len(src_layer_ids)", "1"),
                    ("n_src", "2"),
                    ("len(dst_layer_ids)", "2"),
                    ("n_dst", "2"),
                ],
            ),
            (
                "pairs_missing",
                err(checks::build_transfer_entry_pairs(
                    &[3, 9],
                    &[3, 7],
                    2,
                    2,
                    true,
                    k,
                )),
                vec![("layer_id", "9")],
            ),
            (
                "pairs_pp",
                err(checks::build_transfer_entry_pairs(
                    &ids,
                    &[],
                    24,
                    1,
                    true,
                    k,
                )),
                vec![("n_src", "24"), ("n_dst", "1")],
            ),
        ]
    }

    /// The transfer path's messages (`conn.py`, the scheduler), from a decode endpoint.
    fn conn_cases() -> Vec<Case> {
        let ep = DecodeEndpoint {
            instance: InstanceId(258),
            gpus: vec![],
            page_size: 16,
            watched: false,
            ports: vec![17_000, 17_001],
        };
        vec![
            (
                "send_failed",
                failed_to_send(5_946_051_343_055_743_272, &ep, 1),
                vec![
                    ("kv_chunk.room", "5946051343055743272"),
                    (
                        "NetworkAddress(req.endpoint, req.dst_port).to_host_port_str()",
                        "10.0.1.2:17001",
                    ),
                ],
            ),
            (
                "not_alive",
                session_not_alive(&ep.session(0)),
                vec![("req.mooncake_session_id", "10.0.1.2:17000")],
            ),
            (
                "thread_failed",
                super::transfer_thread_failed("boom."),
                vec![("e", "boom."), ("self.bootstrap_port", "8998")],
            ),
            (
                "waiting_timeout",
                timed_out(42, 300.0, "WaitingForInput"),
                vec![("self.bootstrap_room", "42"), ("elapsed:.1f", "300.0")],
            ),
            (
                "bootstrap_timeout",
                timed_out(7, 29.96, "Bootstrapping"),
                vec![("self.bootstrap_room", "7"), ("elapsed:.1f", "30.0")],
            ),
            (
                "lost_prefill",
                lost_prefill("10.0.0.1:8998"),
                vec![("failed_bootstrap_addr", "10.0.0.1:8998")],
            ),
            (
                "scheduler",
                scheduler_hit_an_exception("Page size mismatch"),
                vec![("traceback", "RuntimeError: Page size mismatch")],
            ),
            ("index_error", checks::index_error().message, vec![]),
            (
                "zero_division",
                checks::zero_division_error().message,
                vec![],
            ),
        ]
    }

    #[test]
    fn every_sglang_message_is_its_f_string_filled_as_python_fills_it() {
        let cases: Vec<Case> = check_cases().into_iter().chain(conn_cases()).collect();
        let table = templates();
        let rendered: BTreeMap<&str, ()> = cases.iter().map(|c| (c.0, ())).collect();
        assert_eq!(
            table.keys().map(String::as_str).collect::<Vec<_>>(),
            rendered.keys().copied().collect::<Vec<_>>(),
            "§12 and this test cover the same messages"
        );
        for (id, got, values) in &cases {
            assert_eq!(got, &fill(&table[*id], values), "message {id}");
        }
    }
}
