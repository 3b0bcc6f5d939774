//! The decode side's offload of generated KV to the store: sglang's
//! `--disaggregation-decode-enable-offload-kvcache` (`DecodeKVCacheOffloadManager`,
//! `python/sglang/srt/disaggregation/decode_kvcache_offload_manager.py`, sglang main 2026 @
//! 0122d6f; `docs/sglang-pd.md` §18.1).
//!
//! # What sglang does
//!
//! - **When**: after every decode step, for every request of the batch
//!   (`SchedulerBatchResultProcessor._handle_finish_state_updated_req` calls `offload_kv_cache`
//!   for an unfinished request, and once more for a finished one before its KV is released).
//!   `offload_kv_cache` takes the tokens whose KV exists (`origin_input_ids +
//!   output_ids[:-1]`) past the page-aligned prompt (`_prefill_offloaded_len`: the prefill
//!   instance wrote that part) and past what it offloaded before (`OffloadedState.inc_len`),
//!   rounded down to whole strides (`SGLANG_HICACHE_DECODE_OFFLOAD_STRIDE`, default the page
//!   size): the increment that filled since the last step, if any.
//! - **What, how**: the increment's pages are copied GPU → the offload's own host pool on the
//!   cache controller's write stream (`HiCacheController.write` → `start_writing`, at once); if
//!   the host pool has no room, nothing is copied and the same pages are tried again at the
//!   next step ("Not enough host memory"; at the request's end they are dropped). The next
//!   scheduler iteration (`check_offload_progress`, first thing in `process_decode_queue`)
//!   waits for the copy and hands the pages to the backup thread (`write_storage` →
//!   `backup_thread_func` → `_page_backup`, `batch_set_v1`), with page hashes chained from
//!   the prompt's last page hash (`_compute_prefix_hash(tokens, prior_hash)`), so the written
//!   pages extend the prefill's chain. The host pages are freed when the backup ends
//!   (`_check_backup_progress`).
//! - **Holds**: a finished request's GPU pages are released when its copies to host are done
//!   (`_release_finished_req` from `_check_offload_progress`), before the iteration's prealloc
//!   runs; the store write does not hold them.
//!
//! # pdsim's model
//!
//! Blocks are the trace's 512-token blocks, not sglang's pages: a request offloads block `k`
//! (from its first incomplete prompt block on) at the end of the step after which its KV
//! covers `(k + 1) × 512` tokens, with the ids the trace layer derived for the blocks its
//! output completes (`workload::trace::answers`). Each offload is a GPU → host copy over the
//! instance's PCIe links (off the fabric), then a Mooncake Store write of the blocks from the
//! decode node's NICs (`sglang::mooncake_store`), sharing them with the KV transfers coming in. The copy
//! runs beside the next forward (the overlapped scheduler launches it before it waits for the
//! copy, which takes a few ms for a block against a step of tens), so it delays nothing, and
//! a finished request's pages go back at its end as without the offload. This component keeps
//! the schedule (who has a block due at which step), the ids of the blocks each request's
//! output completes and the host pool's room; it asks the store to move the bytes
//! ([`Effect::Offload`], one at a time: a write that puts nothing frees its host room at once,
//! and the next offload's room is looked at after that, [`Effect::OffloadGoOn`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use super::Effect;
use crate::config::DecodeOffloadParams;
use crate::vocab::ids::DecodeId;
use crate::vocab::requests::{Req, ReqRef, Requests};
use crate::workload::trace::HASH_BLOCK_TOKENS;

/// One decode instance's offload manager.
#[derive(Debug)]
pub struct DecodeOffload {
    /// The pool's flags, checked.
    pub params: DecodeOffloadParams,
    /// (step after which the request's next block is complete, its join step, request): the
    /// offloads due, earliest first. An entry whose request left the batch is stale (its join
    /// step no longer matches).
    due: BinaryHeap<Reverse<(u64, u64, ReqRef)>>,
    /// The next block to offload of every request in flight here that has one (block index in
    /// the request's tokens: from its first incomplete prompt block), by request id. It
    /// survives a retraction, as sglang's `offloaded_state` does.
    next: BTreeMap<u64, u32>,
    /// Host-pool tokens held: copied from the GPU, not yet written to the store.
    host_used: u64,
    /// Blocks never offloaded because the host pool was full at their request's end.
    pub host_full_blocks: u64,
    /// Steps at which an offload waited for host room (it is tried again at the next step).
    pub host_waits: u64,
    /// The ids of the blocks each request in flight here completes with its output, by
    /// request id (a trace's derived table, or a session's own ids).
    answers: BTreeMap<u64, Vec<u64>>,
    /// The offloads due after the step that just ended, not yet looked at: each with its
    /// request's join step and whether the step was its last.
    pending: VecDeque<(Due, u64, bool)>,
}

/// What is due for one request at a step end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Due {
    /// The request.
    pub req: ReqRef,
    /// Blocks `[first, end)` of its tokens are complete and not yet offloaded.
    pub first: u32,
    /// End of the range (exclusive).
    pub end: u32,
}

/// The step (counted as `steps_done`) after which a request that joined at `join_step` with
/// `prompt` tokens of KV covers `tokens` tokens: its KV grows by one token a step.
fn step_covering(join_step: u64, prompt: u32, tokens: u64) -> u64 {
    join_step + tokens.saturating_sub(u64::from(prompt)).max(1)
}

impl DecodeOffload {
    /// An idle manager with an empty host pool.
    pub fn new(params: DecodeOffloadParams) -> Self {
        Self {
            params,
            due: BinaryHeap::new(),
            next: BTreeMap::new(),
            host_used: 0,
            host_full_blocks: 0,
            host_waits: 0,
            answers: BTreeMap::new(),
            pending: VecDeque::new(),
        }
    }

    /// Request `id`, routed here, completes the blocks `answer` with its output.
    pub fn remember(&mut self, id: u64, answer: Vec<u64>) {
        self.answers.insert(id, answer);
    }

    /// The block after request `q`'s last: its full prompt blocks and its answer's.
    fn end_block(answers: &BTreeMap<u64, Vec<u64>>, q: &Req) -> u32 {
        q.input / HASH_BLOCK_TOKENS + answers.get(&q.id).map_or(0, |a| a.len() as u32)
    }

    /// The requests `joined` joined the batch at the step that just started: each has its
    /// next block scheduled ([`DecodeOffload::joined`]).
    #[inline(never)]
    pub fn batch_joined(&mut self, joined: &[ReqRef], reqs: &Requests) {
        for &r in joined {
            let Some(q) = reqs.get(r) else {
                continue;
            };
            let end = Self::end_block(&self.answers, q);
            self.joined(r, q.join_step, (q.prompt(), q.input), end);
        }
    }

    /// Decode `me`'s step `steps_done` ended (`finished`: the requests that produced their
    /// last token in it, which offload what is left before they end): the offloads due are
    /// taken, then looked at in order ([`DecodeOffload::go_on`];
    /// `DecodeKVCacheOffloadManager.offload_kv_cache`).
    #[inline(never)]
    pub fn step_ended(
        &mut self,
        (me, steps_done): (DecodeId, u64),
        reqs: &Requests,
        finished: &[ReqRef],
        fx: &mut Vec<Effect>,
    ) {
        let mut due = Vec::new();
        // Out for the call, so `take_due` may borrow the rest of `self` (no allocation).
        let answers = std::mem::take(&mut self.answers);
        self.take_due(
            steps_done,
            |r| {
                let q = reqs.get(r)?;
                let kv = u64::from(q.prompt()) + steps_done.saturating_sub(q.join_step);
                Some((q.join_step, kv, Self::end_block(&answers, q)))
            },
            &mut due,
        );
        self.answers = answers;
        debug_assert!(
            self.pending.is_empty(),
            "the last step's offloads were all looked at"
        );
        self.pending.extend(
            due.into_iter()
                .map(|(item, join)| (item, join, finished.contains(&item.req))),
        );
        self.go_on((me, steps_done), reqs, fx);
    }

    /// Looks at the offloads due in order: one whose blocks the host pool has no room for
    /// waits ([`DecodeOffload::wait`]); the first that fits is copied GPU → host
    /// ([`DecodeOffload::offloaded`]) and handed to the store ([`Effect::Offload`]; its
    /// `_trigger_backup` once the copy is done), and the rest wait for
    /// [`Effect::OffloadGoOn`].
    #[inline(never)]
    pub fn go_on(
        &mut self,
        (me, steps_done): (DecodeId, u64),
        reqs: &Requests,
        fx: &mut Vec<Effect>,
    ) {
        while let Some((item, join, last)) = self.pending.pop_front() {
            let q = reqs.get(item.req).expect("due requests are live");
            let blocks = item.end - item.first;
            if !self.has_room(blocks) {
                self.wait(item, join, steps_done, last);
                continue;
            }
            let (prompt, last_block) = (q.prompt(), Self::end_block(&self.answers, q));
            self.offloaded(item, join, prompt, last_block);
            let full = (q.input / HASH_BLOCK_TOKENS) as usize;
            let answer =
                &self.answers.get(&q.id).map_or(&[][..], Vec::as_slice)[..item.end as usize - full];
            let mut path = Vec::with_capacity(full + answer.len());
            path.extend_from_slice(&q.hash_ids[..full]);
            path.extend_from_slice(answer);
            fx.push(Effect::Offload {
                decode: me,
                path,
                start: item.first as usize,
                blocks,
            });
            if !self.pending.is_empty() {
                fx.push(Effect::OffloadGoOn { decode: me });
            }
            return;
        }
    }

    /// Request `req` joined the batch after `join_step` steps with `prompt` tokens of KV (its
    /// prompt plus what it generated before a retraction); its prompt has `input` tokens and
    /// its output completes blocks up to `end_block` (exclusive; `input / 512` on when it
    /// completes none). Schedules its next block.
    pub fn joined(
        &mut self,
        req: ReqRef,
        join_step: u64,
        (prompt, input): (u32, u32),
        end_block: u32,
    ) {
        let first = input / HASH_BLOCK_TOKENS;
        if end_block <= first {
            return;
        }
        let next = *self.next.entry(req.id).or_insert(first);
        if next >= end_block {
            return;
        }
        let at = step_covering(
            join_step,
            prompt,
            u64::from(next + 1) * u64::from(HASH_BLOCK_TOKENS),
        );
        self.due.push(Reverse((at, join_step, req)));
    }

    /// Takes the offloads due after step `steps_done`: for each live entry (`live(req)` is the
    /// request's join step and KV tokens now, if it is still in the batch), the blocks
    /// complete and not yet offloaded, capped at `end_block(req)`. The caller offloads them
    /// ([`DecodeOffload::offloaded`]) or puts them back ([`DecodeOffload::wait`]).
    pub fn take_due(
        &mut self,
        steps_done: u64,
        mut live: impl FnMut(ReqRef) -> Option<(u64, u64, u32)>,
        out: &mut Vec<(Due, u64)>,
    ) {
        while let Some(&Reverse((at, join, r))) = self.due.peek() {
            if at > steps_done {
                break;
            }
            self.due.pop();
            let Some((now_join, kv, end_block)) = live(r) else {
                continue;
            };
            if now_join != join {
                continue;
            }
            let Some(&first) = self.next.get(&r.id) else {
                continue;
            };
            let done = u32::try_from(kv / u64::from(HASH_BLOCK_TOKENS)).unwrap_or(u32::MAX);
            let end = done.min(end_block);
            if end > first {
                out.push((Due { req: r, first, end }, join));
            }
        }
    }

    /// Whether the host pool has room for `blocks` more blocks now.
    pub fn has_room(&self, blocks: u32) -> bool {
        self.host_used + u64::from(blocks) * u64::from(HASH_BLOCK_TOKENS) <= self.params.host_tokens
    }

    /// `due`'s blocks were copied to host (they hold host room until [`DecodeOffload::written`])
    /// and go to the store; the request's next block is scheduled (it joined at `join_step`
    /// with `prompt` tokens of KV) unless `due.end` is its last.
    pub fn offloaded(&mut self, due: Due, join_step: u64, prompt: u32, end_block: u32) {
        self.host_used += u64::from(due.end - due.first) * u64::from(HASH_BLOCK_TOKENS);
        self.next.insert(due.req.id, due.end);
        if due.end < end_block {
            let at = step_covering(
                join_step,
                prompt,
                u64::from(due.end + 1) * u64::from(HASH_BLOCK_TOKENS),
            );
            self.due.push(Reverse((at, join_step, due.req)));
        }
    }

    /// The host pool had no room for `due` after step `steps_done`: it is tried again after the
    /// next step (with whatever else has filled by then), or, at the request's `last` step,
    /// dropped.
    pub fn wait(&mut self, due: Due, join_step: u64, steps_done: u64, last: bool) {
        if last {
            self.host_full_blocks += u64::from(due.end - due.first);
            self.next.remove(&due.req.id);
        } else {
            self.host_waits += 1;
            self.due.push(Reverse((steps_done + 1, join_step, due.req)));
        }
    }

    /// A write of `blocks` blocks ended (landed or not): their host room is free again.
    pub fn written(&mut self, blocks: u32) {
        self.host_used = self
            .host_used
            .saturating_sub(u64::from(blocks) * u64::from(HASH_BLOCK_TOKENS));
    }

    /// Request `id` ended: it offloads no more.
    // Out of line: `DecodeServer::request_ended` runs at every request's end and stays small
    // enough to be inlined there (callgrind, foundation-100k).
    #[inline(never)]
    pub fn forget(&mut self, id: u64) {
        self.next.remove(&id);
        self.answers.remove(&id);
    }

    /// A crash: the schedule and the host pool are lost (the writes in flight fail and give
    /// their room back through [`DecodeOffload::written`]).
    pub fn crash(&mut self) {
        self.due.clear();
        self.next.clear();
    }

    /// Host-pool tokens held now.
    pub fn host_used(&self) -> u64 {
        self.host_used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(host_blocks: u64) -> DecodeOffloadParams {
        DecodeOffloadParams {
            host_tokens: host_blocks * u64::from(HASH_BLOCK_TOKENS),
            bytes_per_token: 1000,
            pcie_bytes_per_ns: 10.0,
        }
    }

    fn r(id: u64) -> ReqRef {
        ReqRef {
            slot: id as u32,
            id,
        }
    }

    /// Two requests of a 512-token prompt and one answer block each, in the batch from step 0
    /// on a decode whose host pool holds `host_blocks` blocks: both have their answer block
    /// (block 1) due after step 512.
    fn two_due(host_blocks: u64) -> (DecodeOffload, Requests, [ReqRef; 2]) {
        let mut reqs = Requests::default();
        let ab = [1, 2].map(|id| crate::sglang::testkit::request(&mut reqs, id, 512, 600));
        let mut o = DecodeOffload::new(params(host_blocks));
        for r in ab {
            let q = reqs.get_mut(r).expect("live");
            q.join_step = 0;
            q.hash_ids = vec![10 + r.id];
            o.remember(r.id, vec![100 + r.id]);
        }
        o.batch_joined(&ab, &reqs);
        (o, reqs, ab)
    }

    /// After a step the offloads due go to the store one at a time: the first that fits is
    /// handed over (`Offload`: the prompt's blocks, then the answer's) and the rest wait for
    /// `OffloadGoOn`, so a write that frees its host room at once (it put nothing) is seen
    /// before the next offload's room is looked at — as sglang's loop over the batch does.
    #[test]
    fn offloads_go_to_the_store_one_at_a_time() {
        let me = DecodeId(3);
        let offload = |id: u64| Effect::Offload {
            decode: me,
            path: vec![10 + id, 100 + id],
            start: 1,
            blocks: 1,
        };
        let (mut o, reqs, _) = two_due(1);
        let mut fx = Vec::new();
        o.step_ended((me, 512), &reqs, &[], &mut fx);
        assert_eq!(fx, [offload(1), Effect::OffloadGoOn { decode: me }]);
        // The first write put nothing: its room is free before the second looks.
        o.written(1);
        fx.clear();
        o.go_on((me, 512), &reqs, &mut fx);
        assert_eq!(fx, [offload(2)], "the last one: no going on after it");
        // Its room still held: the second waits for the next step.
        let (mut o, reqs, _) = two_due(1);
        fx.clear();
        o.step_ended((me, 512), &reqs, &[], &mut fx);
        fx.clear();
        o.go_on((me, 512), &reqs, &mut fx);
        assert!(fx.is_empty());
        assert_eq!(o.host_waits, 1);
    }

    /// A 1000-token prompt (block 1 partial, 488 tokens) that joined after step 10 covers 1024
    /// tokens after step 34 (24 tokens of KV later): block 1 is due then, block 2 512 steps on.
    #[test]
    fn a_block_is_due_at_the_step_that_fills_it() {
        let mut o = DecodeOffload::new(params(100));
        let a = r(0);
        o.joined(a, 10, (1000, 1000), 3);
        let mut out = Vec::new();
        o.take_due(33, |_| Some((10, 1023, 3)), &mut out);
        assert!(out.is_empty(), "not before step 34");
        o.take_due(34, |_| Some((10, 1024, 3)), &mut out);
        assert_eq!(
            out,
            vec![(
                Due {
                    req: a,
                    first: 1,
                    end: 2
                },
                10
            )]
        );
        o.offloaded(out[0].0, 10, 1000, 3);
        assert_eq!(o.host_used(), 512);
        out.clear();
        o.take_due(545, |_| Some((10, 1535, 3)), &mut out);
        assert!(out.is_empty());
        o.take_due(546, |_| Some((10, 1536, 3)), &mut out);
        assert_eq!(
            out[0].0,
            Due {
                req: a,
                first: 2,
                end: 3
            }
        );
        o.offloaded(out[0].0, 10, 1000, 3);
        out.clear();
        // Its last block: nothing more is scheduled.
        o.take_due(10_000, |_| Some((10, 9_000, 3)), &mut out);
        assert!(out.is_empty());
        o.written(2);
        assert_eq!(o.host_used(), 0);
    }

    /// A full host pool: the block waits a step at a time (and what filled meanwhile joins
    /// it); at the request's last step it is dropped. A retracted request's stale entry does
    /// nothing; its rejoin continues from the block it had reached.
    #[test]
    fn a_full_host_pool_delays_then_drops_and_a_retraction_resumes() {
        let mut o = DecodeOffload::new(params(1));
        let (a, b) = (r(1), r(2));
        o.joined(a, 0, (512, 512), 4);
        o.joined(b, 0, (512, 512), 2);
        let mut out = Vec::new();
        o.take_due(512, |_| Some((0, 1024, 4)), &mut out);
        assert_eq!(out.len(), 2);
        let (da, db) = (out[0].0, out[1].0);
        assert!(o.has_room(1));
        o.offloaded(da, 0, 512, 4);
        assert!(!o.has_room(1));
        o.wait(db, 0, 512, false);
        assert_eq!(o.host_waits, 1);
        out.clear();
        o.take_due(513, |_| Some((0, 1025, 2)), &mut out);
        assert_eq!(
            out,
            vec![(
                Due {
                    req: b,
                    first: 1,
                    end: 2
                },
                0
            )]
        );
        o.wait(out[0].0, 0, 513, true);
        assert_eq!(o.host_full_blocks, 1);
        // `a` is retracted after step 600 and rejoins at step 700 with 1112 tokens of KV: its
        // old entry (due at 1024 tokens covered = step 1024) is stale; the new one is due when
        // 1536 tokens are covered, 424 steps after the rejoin.
        o.joined(a, 700, (1112, 512), 4);
        out.clear();
        o.take_due(1024, |_| Some((700, 1436, 4)), &mut out);
        assert!(out.is_empty(), "the stale entry is dropped");
        o.written(1);
        o.take_due(1124, |_| Some((700, 1536, 4)), &mut out);
        assert_eq!(
            out,
            vec![(
                Due {
                    req: a,
                    first: 2,
                    end: 3
                },
                700
            )]
        );
        o.forget(a.id);
        o.joined(a, 2000, (2000, 512), 4);
        assert_eq!(
            o.due.len(),
            1,
            "a forgotten request starts from its prompt again"
        );
    }
}
