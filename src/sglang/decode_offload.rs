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
//! the schedule (who has a block due at which step) and the host pool's room; `World` moves
//! the bytes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::config::DecodeOffloadParams;
use crate::vocab::requests::ReqRef;
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
    pub fn forget(&mut self, id: u64) {
        self.next.remove(&id);
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
