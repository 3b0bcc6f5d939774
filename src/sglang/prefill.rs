//! The prefill server: its waiting queue, sglang's `PrefillAdder` batch formation with chunked
//! prefill, and the radix prefix cache (`docs/sglang-pd.md` §2).

use std::collections::VecDeque;

use crate::engine::{EventQueue, Nanos};
use crate::sim::event::Event;
use crate::sim::ids::PrefillId;
use crate::sim::requests::{ChunkJob, KvPoll, ReqRef, Requests};

use super::Core;
use super::prefix_cache::PrefixCache;

/// One prefill instance.
pub struct PrefillServer {
    /// What every server has.
    pub core: Core,
    /// Requests whose metadata arrived, in order.
    pub waiting: VecDeque<ReqRef>,
    /// The request whose prompt is being chunked (it goes first in the next batch).
    pub chunked: Option<ReqRef>,
    /// The running forward: requests and the tokens each computes.
    pub batch: Vec<(ReqRef, u32)>,
    /// Radix prefix cache, if enabled.
    pub cache: Option<PrefixCache>,
    /// Tokens in one batch: `chunked_prefill_size` within `--max-prefill-tokens`.
    pub budget: u32,
    /// The forward's shape, `(new tokens, cached context)` per request (scratch, reused).
    shape: Vec<(u32, u32)>,
}

impl PrefillServer {
    /// A prefill server with an empty queue.
    pub fn new(core: Core, cache: Option<PrefixCache>, budget: u32) -> Self {
        Self {
            core,
            waiting: VecDeque::new(),
            chunked: None,
            batch: Vec::new(),
            cache,
            budget,
            shape: Vec::new(),
        }
    }

    /// Forms the next batch if the instance is idle and alive: the chunked request first, then
    /// waiting requests in order, up to the token budget; a request that does not fit whole is
    /// chunked and ends the batch (sglang's `PrefillAdder`). Schedules the forward's end.
    pub fn try_schedule(&mut self, me: PrefillId, reqs: &mut Requests, q: &mut EventQueue<Event>) {
        let now = q.now();
        if self.core.busy || !self.core.alive {
            return;
        }
        let mut budget = self.budget;
        self.shape.clear();
        let ps = self.core.page_size;
        while budget > 0 {
            let (r, from_chunked) = match self.chunked.take() {
                Some(r) => (r, true),
                None => match self.waiting.front() {
                    Some(&r) => (r, false),
                    None => break,
                },
            };
            let Some(req) = reqs.get_mut(r).filter(|q| q.sender != KvPoll::Failed) else {
                if !from_chunked {
                    self.waiting.pop_front();
                }
                continue;
            };
            if !from_chunked {
                // Admission needs the prompt's pages on the prefill.
                let need = req.prompt().div_ceil(ps);
                let Some(holding) = self.core.pages.alloc(req.id, need, self.core.hybrid) else {
                    break;
                };
                self.waiting.pop_front();
                req.on_prefill = holding;
                req.row.prefill_start_ns = Some(now);
                // Cached prefix blocks are not recomputed (their KV is still sent: the decode
                // has none of it). The last token is always computed, for its logits.
                if let Some(cache) = self.cache.as_mut()
                    && !req.hash_ids.is_empty()
                {
                    let hit = cache.lookup_and_insert(&req.hash_ids, req.input, now);
                    req.prefilled = hit.min(req.prompt() - 1);
                }
            }
            let n = (req.prompt() - req.prefilled).min(budget);
            self.shape.push((n, req.prefilled));
            self.batch.push((r, n));
            budget -= n;
            if req.prefilled + n < req.prompt() {
                self.chunked = Some(r);
                break;
            }
        }
        if self.batch.is_empty() {
            return;
        }
        let dt: Nanos = self.core.step.prefill_ns(&self.shape);
        self.core.start_busy(now);
        self.core.step_key = Some(q.schedule_keyed_in(dt, Event::PrefillStepDone { prefill: me }));
    }

    /// The forward ended: each request's computed tokens become KV to send. Non-last chunks
    /// send only whole pages; the partial page waits (sglang `send_kv_chunk` rounds `end` down
    /// to a page boundary). The chunks to queue go to `jobs`, in batch order.
    pub fn step_done(&mut self, now: Nanos, reqs: &mut Requests, jobs: &mut Vec<ChunkJob>) {
        self.core.end_busy(now);
        let ps = self.core.page_size;
        for (r, n) in self.batch.drain(..) {
            let Some(req) = reqs.get_mut(r) else { continue };
            if req.sender == KvPoll::Failed {
                continue;
            }
            req.prefilled += n;
            let last = req.prefilled == req.prompt();
            let end = if last {
                req.prompt()
            } else {
                req.prefilled / ps * ps
            };
            if last {
                req.row.prefill_end_ns.get_or_insert(now);
            }
            if end > req.sent || last {
                jobs.push(ChunkJob {
                    req: r,
                    decode: req.decode,
                    first_page: req.sent / ps,
                    end_page: end.div_ceil(ps),
                    last,
                });
                req.sent = end;
                req.chunks_in_flight += 1;
                req.last_queued |= last;
                req.sender = KvPoll::Transferring.max(req.sender);
                if last {
                    self.core.tick.tokens += 1;
                }
            }
        }
    }

    /// A crash: the running forward, the chunked request and the queue are lost.
    pub fn crash(&mut self, q: &mut EventQueue<Event>) {
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        self.core.busy = false;
        self.batch.clear();
        self.chunked = None;
        self.waiting.clear();
    }
}
