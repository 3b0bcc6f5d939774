//! The prefill server: its waiting queue, sglang's `PrefillAdder` batch formation with chunked
//! prefill, and the radix prefix cache (`docs/sglang-pd.md` §2).
//!
//! # Batch admission (sglang `PrefillAdder`)
//!
//! Followed from sglang v0.5 `python/sglang/srt/managers/schedule_policy.py`:
//! `PrefillAdder.add_chunked_req`, `add_one_req`, `_update_prefill_budget` and `budget_state`
//! (the same rules hold at sgl-project/sglang commit 00550cd, around more features). A batch
//! has two budgets: `rem_input_tokens` (`--max-prefill-tokens`) and `rem_chunk_tokens`
//! (`--chunked-prefill-size`).
//!
//! 1. The request being chunked goes first (`add_chunked_req`): it takes
//!    `min(its remaining tokens, rem_chunk_tokens)`, whatever `rem_input_tokens` says.
//! 2. Each waiting request, in order (`add_one_req`), with `input` = its uncached tokens
//!    rounded up to whole pages (`ceil_paged_tokens`):
//!    * refused — the batch closes — if `input >= rem_input_tokens` **and the batch already
//!      holds a request**: a lone request is never refused by `--max-prefill-tokens`, so a
//!      long prompt runs in one forward when it fits the chunk;
//!    * whole if `input <= rem_chunk_tokens`;
//!    * otherwise chunked to `rem_chunk_tokens` rounded down to whole pages (none: the batch
//!      closes), and it becomes the chunked request.
//! 3. Each admission takes its page-rounded tokens off both budgets; the batch closes when
//!    either reaches 0 (`budget_state`).
//!
//! pdsim's memory check (the prompt's pages must be free) stands for `add_one_req`'s
//! `NO_TOKEN`; `ignore_eos` requests are admitted by the same rules.

use std::collections::VecDeque;

use crate::engine::{EventQueue, Nanos};
use crate::vocab::event::Event;
use crate::vocab::ids::PrefillId;
use crate::vocab::requests::{ChunkJob, KvPoll, Req, ReqRef, Requests};

use super::hicache::{HiCache, PrefetchRules};
use super::prefix_cache::PrefixCache;
use super::{Core, Ctx};

/// One prefill instance.
pub struct PrefillServer {
    /// What every server has.
    pub core: Core,
    /// Requests whose metadata arrived, in order.
    waiting: VecDeque<ReqRef>,
    /// The request whose prompt is being chunked (it goes first in the next batch).
    chunked: Option<ReqRef>,
    /// The running forward: requests and the tokens each computes.
    batch: Vec<(ReqRef, u32)>,
    /// Radix prefix cache, if enabled.
    pub cache: Option<PrefixCache>,
    /// HiCache's host and storage tiers past `cache`, if enabled.
    pub hicache: Option<Box<HiCache>>,
    /// `--chunked-prefill-size`: tokens of one forward (`rem_chunk_tokens`).
    pub chunk_tokens: u32,
    /// `--max-prefill-tokens`: the batch's input budget (`rem_input_tokens`).
    pub max_prefill_tokens: u32,
    /// The forward's shape, `(new tokens, cached context)` per request (scratch, reused).
    shape: Vec<(u32, u32)>,
    /// Speculative decoding's draft prefill (`sglang::speculative`), when the pool runs it.
    pub spec: Option<Box<super::speculative::SpecPrefill>>,
    /// The running (or last) forward's time, ns: what an aborted request's share of it is
    /// taken from (`sim::abort`); with `--pp-size`, the next micro-batch to leave's stages
    /// summed.
    pub forward_ns: Nanos,
    /// `--pp-size` > 1: the micro-batches in flight and the stage-to-stage hand-offs
    /// (`sglang::pipeline`); `None` without pipeline parallelism. With it, `core.busy` means
    /// the first stage cannot take a micro-batch (it runs one, or the ring is full), and
    /// `batch` is only the batch being formed.
    pub pp: Option<Box<super::pipeline::Pipeline>>,
}

impl PrefillServer {
    /// A prefill server with an empty queue, `--chunked-prefill-size` and
    /// `--max-prefill-tokens`.
    pub fn new(
        core: Core,
        cache: Option<PrefixCache>,
        chunk_tokens: u32,
        max_prefill_tokens: u32,
    ) -> Self {
        Self {
            core,
            waiting: VecDeque::new(),
            chunked: None,
            batch: Vec::new(),
            cache,
            hicache: None,
            chunk_tokens,
            max_prefill_tokens,
            shape: Vec::new(),
            spec: None,
            forward_ns: 0,
            pp: None,
        }
    }

    /// The forward that just started here (the wake that let it start found `step_key` at
    /// `before`), when its all-to-all goes on the fabric (the caller checked this server's GPUs
    /// send on it): priced as scheduled, with the draft's prefill as a part of its own when
    /// speculative, its end taken back (`sglang::a2a::take_forward`).
    pub fn a2a_forward<'s>(
        &'s mut self,
        me: PrefillId,
        before: Option<crate::engine::EventKey>,
        q: &mut EventQueue<Event>,
    ) -> Option<super::a2a::Forward<'s>> {
        let now = q.now();
        let shape = self.forward_shape();
        let tokens: u64 = shape.iter().map(|&(n, _)| u64::from(n)).sum();
        let (dt, spec) = match self.spec.as_deref() {
            None => (self.core.step.prefill_ns(shape), None),
            // The forward the server scheduled: the target's and the draft's prefill.
            Some(sp) => (
                self.forward_ns,
                Some(sp.moe_time(tokens).map(|m| (m, 1.0)).into_iter().collect()),
            ),
        };
        let done = Event::PrefillStepDone { prefill: me };
        super::a2a::take_forward(
            &mut self.core,
            (before, q),
            (now, dt, done),
            (tokens, true, 0),
            spec,
        )
    }

    /// What the Mooncake Store needs of this instance as its client, if its HiCache has a
    /// storage backend: its ranks' GPUs, HiCache's bytes per token and copy rate, its page
    /// size.
    pub fn store_client(&self) -> Option<super::mooncake_store::ClientShape> {
        let h = self.hicache.as_deref().filter(|h| h.params.storage)?;
        Some(super::mooncake_store::ClientShape {
            gpus: self.core.gpus.clone(),
            bytes_per_token: h.params.bytes_per_token,
            page_size: self.core.page_size,
            pcie_bytes_per_ns: h.params.pcie_bytes_per_ns,
        })
    }

    /// Leading blocks of a prompt (`hash_ids`) that this instance's own tiers (device and
    /// host) hold, from which HiCache's prefetch from the store would start
    /// (`HiRadixCache.prefetch_from_storage`); `None` when it prefetches nothing: no storage
    /// backend, or a prompt without block ids.
    pub fn local_prefix_blocks(&self, hash_ids: &[u64]) -> Option<u32> {
        let h = self.hicache.as_deref().filter(|h| h.params.storage)?;
        if hash_ids.is_empty() {
            return None;
        }
        let device = self.cache.as_ref().map_or(0, |c| c.peek_blocks(hash_ids));
        Some(device.max(h.host_blocks(hash_ids)))
    }

    /// The leading prompt blocks of request `req`, whose prefill just ended, that HiCache's
    /// write policy backs up to the store (`HiCacheController.write_backup_storage`); `None`
    /// when none.
    pub fn blocks_to_store<'r>(&self, req: &'r Req) -> Option<&'r [u64]> {
        let h = self.hicache.as_deref().filter(|h| h.params.storage)?;
        let n = h.blocks_to_store(req.hash_ids.len(), req.local_hit_tokens);
        (n > 0).then(|| &req.hash_ids[..n])
    }

    /// Whether request `req` (`r`)'s prefetch policy holds it back from this scheduler past
    /// `at` (when decode's page ids would be there, ns): `wait_complete` until the prefetch
    /// ends, `timeout` until then or its deadline, whichever is first (sglang's
    /// `can_terminate_prefetch`, checked as the scheduler considers the request). When it
    /// holds, the release is arranged here (the deadline, on `q`) and at the prefetch's end
    /// (`sglang::mooncake_store`).
    pub fn prefetch_holds(
        &self,
        (r, req): (ReqRef, &mut Req),
        at: Nanos,
        q: &mut EventQueue<Event>,
    ) -> bool {
        let Some(policy) = self.hicache.as_deref().map(|h| h.params.prefetch) else {
            return false;
        };
        let Some(pf) = req.prefetch.filter(|pf| pf.holds(policy)) else {
            return false;
        };
        req.metadata_at = Some(at);
        if policy == crate::config::PrefetchPolicy::Timeout {
            // Whichever comes first lets it go; `Handshake::page_ids_arrived` ignores the second.
            q.schedule_at(at.max(pf.timeout_at()), Event::MetadataArrived { req: r });
        }
        true
    }

    /// HiCache wrote `bytes` (all ranks) back to the store (`Effect::StoreWriteCounted`).
    pub fn wrote_to_store(&mut self, bytes: u64) {
        if let Some(h) = self.hicache.as_deref_mut() {
            h.wrote_to_store(bytes);
        }
    }

    /// The running forward's shape, `(new tokens, cached context)` per request (what its
    /// step time was priced on; `sglang::a2a` re-prices its all-to-all from it).
    pub fn forward_shape(&self) -> &[(u32, u32)] {
        &self.shape
    }

    /// Forms the next batch if the instance is idle and alive, by sglang's `PrefillAdder` rules
    /// (module docs). Schedules the forward's end (a forward whose all-to-all crosses the
    /// fabric is handed on: `Core::forward_started`).
    pub fn try_schedule(&mut self, me: PrefillId, ctx: &mut Ctx<'_>) {
        let Ctx { q, reqs, fx, .. } = ctx;
        let now = q.now();
        if self.core.busy || !self.core.alive {
            return;
        }
        let before = self.core.step_key;
        // i64: sglang's budgets go negative after a page-rounded admission.
        let mut rem_input = i64::from(self.max_prefill_tokens);
        let mut rem_chunk = i64::from(self.chunk_tokens);
        self.shape.clear();
        let ps = self.core.page_size;
        let paged = |n: u32| i64::from(n.div_ceil(ps) * ps);
        // HiCache's loads to the GPU for this forward (host and store hits), ns.
        let mut load_ns: Nanos = 0;
        // 1. The chunked request continues (`add_chunked_req`).
        if let Some(r) = self.chunked.take()
            && let Some(req) = reqs.get_mut(r).filter(|q| q.sender != KvPoll::Failed)
        {
            // With PP its earlier chunks may still be in the pipeline (`sglang::pipeline`).
            let done = req.prefilled + self.pp.as_deref().map_or(0, |p| p.in_flight_tokens(r));
            let left = req.prompt() - done;
            let n = left.min(u32::try_from(rem_chunk.max(0)).unwrap_or(u32::MAX));
            if n > 0 {
                self.shape.push((n, done));
                self.batch.push((r, n));
                rem_input -= paged(n);
                rem_chunk -= paged(n);
            }
            if n < left {
                self.chunked = Some(r);
            }
        }
        // 2. Waiting requests in order (`add_one_req`), while neither budget is spent.
        while self.chunked.is_none() && rem_input > 0 && rem_chunk > 0 {
            let Some(&r) = self.waiting.front() else {
                break;
            };
            let Some(req) = reqs.get_mut(r).filter(|q| q.sender != KvPoll::Failed) else {
                self.waiting.pop_front();
                continue;
            };
            // The uncached prompt, as the scheduler knows it before admission (the last token
            // is always computed, for its logits).
            let hit = match self.cache.as_ref() {
                Some(cache) if !req.hash_ids.is_empty() => {
                    let device = cache.peek(&req.hash_ids, req.input);
                    let all = match self.hicache.as_deref() {
                        None => device,
                        Some(h) => h.peek(&req.hash_ids, req.input, device, req.prefetch.as_ref()),
                    };
                    all.min(req.prompt() - 1)
                }
                _ => 0,
            };
            let input = paged(req.prompt() - hit);
            if input >= rem_input && !self.batch.is_empty() {
                break;
            }
            let whole = input <= rem_chunk;
            let trunc = rem_chunk / i64::from(ps) * i64::from(ps);
            if !whole && trunc <= 0 {
                break;
            }
            // Admission needs the prompt's pages on the prefill.
            let need = req.prompt().div_ceil(ps);
            let Some(holding) = self.core.pages.alloc(req.id, need, self.core.hybrid) else {
                break;
            };
            self.waiting.pop_front();
            req.on_prefill = holding;
            req.row.prefill_start_ns = Some(now);
            // Cached prefix blocks are not recomputed (their KV is still sent: the decode
            // has none of it).
            if let Some(cache) = self.cache.as_mut()
                && !req.hash_ids.is_empty()
            {
                let mut got = cache.lookup_and_insert(&req.hash_ids, req.input, now);
                if let Some(h) = self.hicache.as_deref_mut() {
                    let (found, ns) =
                        h.admit(&req.hash_ids, req.input, got, req.prefetch.as_ref(), now);
                    got = found.all;
                    req.local_hit_tokens = found.local;
                    load_ns += ns;
                }
                req.prefilled = got.min(req.prompt() - 1);
                // A session's turn records its hit (a retraction's second admission does not
                // overwrite its first).
                if req.row.session_id.is_some() {
                    req.row.cached_tokens.get_or_insert(req.prefilled);
                }
            }
            let left = req.prompt() - req.prefilled;
            let n = if whole {
                left
            } else {
                left.min(u32::try_from(trunc).unwrap_or(u32::MAX))
            };
            self.shape.push((n, req.prefilled));
            self.batch.push((r, n));
            rem_input -= paged(n);
            rem_chunk -= paged(n);
            if n < left {
                self.chunked = Some(r);
            }
        }
        if self.batch.is_empty() {
            return;
        }
        // HiCache loads layer by layer while the forward computes: the longer of the two.
        let mut dt: Nanos = self.core.step.prefill_ns(&self.shape).max(load_ns);
        if let Some(s) = self.spec.as_deref_mut() {
            dt = s.forward_ns(dt, &self.shape);
        }
        if self.pp.is_some() {
            return self.enter_pipeline(me, q, dt);
        }
        self.core.start_busy(now);
        self.forward_ns = dt;
        let key = q.schedule_keyed_in(dt, Event::PrefillStepDone { prefill: me });
        self.core.forward_ends(now.saturating_add(dt), key);
        self.core.forward_started(before, fx);
    }

    /// [`PrefillServer::try_schedule`] with `--pp-size`: the batch just formed, whose
    /// one-stage forward is `dt`, enters the first stage as a micro-batch
    /// (`sglang::pipeline`); the instance is busy until the first stage opens again.
    #[inline(never)]
    fn enter_pipeline(&mut self, me: PrefillId, q: &mut EventQueue<Event>, dt: Nanos) {
        let now = q.now();
        let pp = self.pp.as_deref_mut().expect("a PP prefill");
        let tokens: u64 = self.shape.iter().map(|&(n, _)| u64::from(n)).sum();
        let host = self.core.step.prefill_host_ns(self.shape.len() as u32);
        let batch = std::mem::replace(&mut self.batch, pp.spare());
        let (open, key) = pp.enter((me, q), batch, (dt, host, tokens));
        self.forward_ns = pp.head().map_or(0, |m| m.forward_ns);
        self.core.start_busy(now);
        self.core.forward_ends(open, key);
    }

    /// The forward ended: each request's computed tokens become KV to send. Non-last chunks
    /// send only whole pages; the partial page waits (sglang `send_kv_chunk` rounds `end` down
    /// to a page boundary). The chunks to queue go to `jobs`, in batch order.
    pub fn step_done(&mut self, now: Nanos, reqs: &mut Requests, jobs: &mut Vec<ChunkJob>) {
        if self.pp.is_some() {
            return self.micro_batch_left(now, reqs, jobs);
        }
        self.core.end_busy(now);
        let ps = self.core.page_size;
        for (r, n) in self.batch.drain(..) {
            computed((r, n), (now, ps), &mut self.core.tick.tokens, reqs, jobs);
        }
    }

    /// [`PrefillServer::step_done`] with `--pp-size`: the oldest micro-batch left the last
    /// stage (its results are processed, its chunks' KV queued, as sglang does once the last
    /// stage's output came round); the first stage takes the next if it is open.
    #[inline(never)]
    fn micro_batch_left(&mut self, now: Nanos, reqs: &mut Requests, jobs: &mut Vec<ChunkJob>) {
        let pp = self.pp.as_deref_mut().expect("a PP prefill");
        let mb = pp.leave();
        self.forward_ns = pp.head().map_or(mb.forward_ns, |m| m.forward_ns);
        if self.core.busy && pp.open(now) {
            self.core.end_busy(now);
        }
        let ps = self.core.page_size;
        for &(r, n) in &mb.batch {
            computed((r, n), (now, ps), &mut self.core.tick.tokens, reqs, jobs);
        }
        pp.recycle(mb.batch);
    }

    /// A PP prefill's first stage may take its next micro-batch (`Event::PrefillStageFree`,
    /// which fires when it opens: a later entry cancels a pending one): it is marked on
    /// `wake` to form one.
    pub fn opened(&mut self, me: PrefillId, wake: &mut Vec<crate::vocab::event::Wake>) {
        if let Some(p) = self.pp.as_deref().filter(|_| self.core.busy) {
            self.core.end_busy(p.open_at());
        }
        wake.push(crate::vocab::event::Wake::Prefill(me));
    }

    /// This instance's prefix-cache figures for `summary.json` `prefix_cache` (its pool named
    /// `pool`), when it has a cache: hits from every tier, the GPU cache's plus HiCache's host
    /// and store hits.
    pub fn cache_stats(&self, pool: String) -> Option<crate::metrics::summary::CacheStats> {
        let c = self.cache.as_ref()?;
        let tiers = self.hicache.as_deref().map(|h| {
            let t = h.counts;
            crate::metrics::summary::TierStats {
                device_hit_tokens: t.device_hit_tokens,
                host_hit_tokens: t.host_hit_tokens,
                store_hit_tokens: t.store_hit_tokens,
                host_to_gpu_bytes: t.load_bytes,
                store_read_bytes: t.store_read_bytes,
                store_write_bytes: t.store_write_bytes,
            }
        });
        let hit_tokens =
            c.hit_tokens() + tiers.map_or(0, |t| t.host_hit_tokens + t.store_hit_tokens);
        let input_tokens = c.input_tokens();
        Some(crate::metrics::summary::CacheStats {
            instance: self.core.instance.0,
            pool,
            lookups: c.lookups(),
            hit_tokens,
            input_tokens,
            hit_rate: if tiers.is_none() {
                c.hit_rate()
            } else if input_tokens == 0 {
                0.0
            } else {
                hit_tokens as f64 / input_tokens as f64
            },
            tiers,
        })
    }

    /// Its running forward's end moved to `at` (its all-to-all landed, `sglang::a2a`), with
    /// the event `key` that ends it.
    #[inline]
    pub fn forward_ends(&mut self, at: crate::engine::Nanos, key: crate::engine::EventKey) {
        self.core.forward_ends(at, key);
    }

    /// A request was routed here: it counts in least-loaded routing until it is done here,
    /// and in this second's arrivals.
    #[inline]
    pub fn request_routed(&mut self) {
        self.core.request_routed();
    }

    /// A decode retracted a request of this prefill: the prefill computes it again, and it
    /// counts here again until it is done.
    #[inline]
    pub fn request_returned(&mut self) {
        self.core.request_returned();
    }

    /// The transfer of `req` concluded (`conclude_transfer(Success)`: its sender is
    /// `Success`, `sglang::transfer`): the prefill frees its side; with `holdback` its HTTP
    /// response goes at its event loop's next turn, after the running forward.
    #[inline]
    pub fn transfer_concluded(&mut self, req: &mut Req, now: Nanos, holdback: bool) {
        if holdback {
            req.prefill_response_ns = self.core.next_turn_ns(now);
        }
        self.free(req);
    }

    /// `req` is done with this prefill before its transfer concluded: it failed or was
    /// aborted, or its decode leg outlives the prefill's failure (an orphan, `sim::abort`).
    /// If the prefill still holds its side ([`Req::prefill_holds`]) it frees it, and the
    /// room's sender is `Failed` from then on. Returns whether it freed it now.
    #[inline]
    pub fn let_go(&mut self, req: &mut Req) -> bool {
        let held = req.prefill_holds();
        if held {
            self.free(req);
            req.sender = KvPoll::Failed;
        }
        held
    }

    /// The one place the prefill gives back a request's side: the KV pages it holds and its
    /// place in the load the router sees. sglang frees them in three places, each reaching
    /// this: `conclude_transfer(Success)` ([`PrefillServer::transfer_concluded`]), a room that
    /// failed and an abort that orphans the decode side ([`PrefillServer::let_go`]).
    #[inline(always)]
    fn free(&mut self, req: &mut Req) {
        let held = std::mem::take(&mut req.on_prefill);
        self.core.pages.free_owned(req.id, held);
        self.core.outstanding -= 1;
    }

    /// Decode's page ids reached this prefill: `r` queues for a batch.
    pub fn enqueue_waiting(&mut self, r: ReqRef) {
        self.waiting.push_back(r);
    }

    /// Requests in the running forward (with `--pp-size`, in every micro-batch in flight).
    #[inline]
    pub fn running(&self) -> u32 {
        match self.pp.as_deref() {
            None => self.batch.len() as u32,
            Some(p) => p.running(),
        }
    }

    /// The running forward: each request and the prompt tokens it computes in it (with
    /// `--pp-size`, the next micro-batch to leave's).
    pub fn batch(&self) -> &[(ReqRef, u32)] {
        match self.pp.as_deref().and_then(|p| p.head()) {
            None => &self.batch,
            Some(m) => &m.batch,
        }
    }

    /// Requests waiting for a batch.
    pub fn queued(&self) -> u32 {
        self.waiting.len() as u32
    }

    /// What its scheduler reports to an autoscaler (Dynamo's forward-pass metrics, sglang's
    /// queue gauges): its queue now, its KV pool, and its last forward if that ended after
    /// `since` (the controller's last look). The window's peaks are the controller's.
    pub fn load(&self, since: Nanos, reqs: &Requests) -> crate::autoscale::InstanceLoad {
        let ran = self.core.forward_end_ns() > since && !self.shape.is_empty();
        crate::autoscale::InstanceLoad {
            instance: self.core.instance,
            queued_prefill_tokens: self.queued_prompt_tokens(reqs),
            queued_requests: self.queued(),
            kv_capacity_tokens: u64::from(self.core.pages.total()) * u64::from(self.core.page_size),
            last_forward: ran.then(|| crate::autoscale::ForwardPass {
                wall_s: self.forward_ns as f64 / 1e9,
                prefill_requests: self.shape.len() as u32,
                prefill_tokens: self.shape.iter().map(|&(n, _)| u64::from(n)).sum(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Prompt tokens waiting to be computed (the waiting queue's and the chunked request's
    /// rest), tokens: what a planner reads as queued prefill tokens.
    pub fn queued_prompt_tokens(&self, reqs: &Requests) -> u64 {
        let left = |r: &ReqRef| {
            reqs.get(*r)
                .map_or(0, |q| u64::from(q.prompt().saturating_sub(q.prefilled)))
        };
        self.waiting
            .iter()
            .chain(self.chunked.iter())
            .map(left)
            .sum()
    }

    /// The server goes down (dead first, so that nothing the crash sets off starts new work
    /// on it): `World` aborts the flows touching its GPUs, then calls
    /// [`PrefillServer::lose_state`] and its transfer workers' `crash`. No request fails now:
    /// the decodes notice through their heartbeat (`sglang::heartbeat`). `None` if it was
    /// already down.
    pub fn crash(&mut self) -> Option<PrefillCrash> {
        self.core.go_down().then(|| PrefillCrash {
            gpus: self.core.gpus.clone(),
        })
    }

    /// After a crash: the running forward, the chunked request and the queue are lost, and
    /// the process's caches with them (a restart is a new process).
    pub fn lose_state(&mut self, q: &mut EventQueue<Event>) {
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        self.core.busy = false;
        self.batch.clear();
        if let Some(p) = self.pp.as_deref_mut() {
            p.clear(q);
        }
        self.chunked = None;
        self.waiting.clear();
        self.forget_caches();
    }

    /// A new process on this slot (a restart, an autoscaler's launch): its radix cache and
    /// HiCache's host tier start empty; a Mooncake Store behind them keeps its blocks.
    pub fn forget_caches(&mut self) {
        if let Some(c) = self.cache.as_mut() {
            c.forget();
        }
        if let Some(h) = self.hicache.as_mut() {
            h.forget_host();
        }
    }

    /// The server is back, empty; false if it was up.
    pub fn restart(&mut self) -> bool {
        self.core.come_up()
    }
}

/// Request `r`'s `n` prompt tokens were computed at `now` (page size `ps`): they become KV to
/// send. Non-last chunks send only whole pages; the partial page waits (sglang `send_kv_chunk`
/// rounds `end` down to a page boundary). Its chunk to queue goes to `jobs`; a finished prompt
/// counts in `done` (the second's prompts finished).
#[inline(always)]
fn computed(
    (r, n): (ReqRef, u32),
    (now, ps): (Nanos, u32),
    done: &mut u64,
    reqs: &mut Requests,
    jobs: &mut Vec<ChunkJob>,
) {
    let Some(req) = reqs.get_mut(r) else { return };
    if req.sender == KvPoll::Failed {
        return;
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
    // What decode's radix cache holds is not sent (sglang `prefill.py`:
    // `req.start_send_idx = pop_decode_prefix_len()`, PR #19746; 0 without it): a chunk
    // wholly inside it queues nothing, the last still carries the aux row.
    let from = req.sent.max(req.decode_prefix);
    if end > from || last {
        jobs.push(ChunkJob {
            req: r,
            decode: req.decode,
            first_page: from / ps,
            end_page: end.div_ceil(ps),
            last,
        });
        req.sent = end;
        req.chunks_in_flight += 1;
        req.last_queued |= last;
        req.sender = KvPoll::Transferring.max(req.sender);
        if last {
            *done += 1;
        }
    }
}

/// What a prefill crash does beyond the server, for `World` to apply: abort the flows
/// touching `gpus` (its transfer workers' batches in flight).
#[derive(Debug)]
pub struct PrefillCrash {
    /// The server's GPUs.
    pub gpus: Vec<crate::fabric::GpuId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sglang::testkit::{core, request};
    use crate::vocab::ids::PrefillId;

    /// `try_schedule` with a context over `reqs` and `q`.
    fn schedule(p: &mut PrefillServer, reqs: &mut Requests, q: &mut EventQueue<Event>) {
        let (mut wake, mut fx) = (Vec::new(), Vec::new());
        let mut ctx = Ctx {
            q,
            reqs,
            wake: &mut wake,
            fx: &mut fx,
            seed: 7,
        };
        p.try_schedule(PrefillId(0), &mut ctx);
    }

    /// Forms one batch over requests of `prompts` tokens on a server with `chunk` and
    /// `max_prefill`, page size `ps`; returns the batch's (request index, tokens) and the
    /// chunked request's index.
    fn batch(
        prompts: &[u32],
        chunk: u32,
        max_prefill: u32,
        ps: u32,
    ) -> (Vec<(usize, u32)>, Option<usize>) {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut p = PrefillServer::new(core(1 << 20, ps), None, chunk, max_prefill);
        let refs: Vec<ReqRef> = prompts
            .iter()
            .enumerate()
            .map(|(i, &n)| request(&mut reqs, i as u64, n, 8))
            .collect();
        p.waiting.extend(refs.iter().copied());
        schedule(&mut p, &mut reqs, &mut q);
        let idx = |r: ReqRef| refs.iter().position(|&x| x == r).unwrap();
        (
            p.batch.iter().map(|&(r, n)| (idx(r), n)).collect(),
            p.chunked.map(idx),
        )
    }

    /// A crash with a forward running and a request waiting: the server is down at once and
    /// names its GPUs for the flows to abort; no request fails here (the decodes' heartbeat
    /// fails them later); losing its state cancels the forward's end and empties the queue;
    /// a dead server forms no batch; a second crash and a second restart change nothing.
    #[test]
    fn a_crash_loses_the_forward_and_the_queue_and_fails_nobody_yet() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut c = core(1 << 10, 16);
        c.gpus = vec![crate::fabric::GpuId { node: 1, local: 4 }];
        let mut p = PrefillServer::new(c, None, 64, 64);
        let a = request(&mut reqs, 0, 64, 8);
        let b = request(&mut reqs, 1, 64, 8);
        p.enqueue_waiting(a);
        p.enqueue_waiting(b);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!((p.running(), p.queued(), q.len()), (1, 1, 1));
        let crash = p.crash().expect("it was up");
        assert_eq!(crash.gpus, [crate::fabric::GpuId { node: 1, local: 4 }]);
        assert!(!p.core.alive() && p.crash().is_none());
        p.lose_state(&mut q);
        assert!(q.pop().is_none(), "the forward's end is cancelled");
        assert_eq!((p.running(), p.queued(), p.core.busy), (0, 0, false));
        assert_eq!(reqs.live(), 2, "its requests are still in flight");
        p.enqueue_waiting(b);
        schedule(&mut p, &mut reqs, &mut q);
        assert!(q.is_empty(), "a dead prefill forms no batch");
        assert!(p.restart() && !p.restart());
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!((p.running(), q.len()), (1, 1), "back, it serves again");
    }

    /// A restarted prefill is a new process: the radix cache and HiCache's host tier lose
    /// every block (a prompt seen before the crash misses), and keep their counts.
    #[test]
    fn a_crash_empties_the_radix_cache_and_the_host_tier() {
        use crate::config::{HiCacheParams, PrefetchPolicy, WritePolicy};
        use crate::sglang::hicache::HiCache;
        let mut q = EventQueue::new();
        let cache = Some(crate::sglang::prefix_cache::PrefixCache::new(None));
        let mut p = PrefillServer::new(core(1 << 10, 16), cache, 64, 64);
        p.hicache = Some(Box::new(HiCache::new(HiCacheParams {
            host_tokens: 1 << 20,
            write_policy: WritePolicy::WriteThrough,
            storage: false,
            prefetch: PrefetchPolicy::BestEffort,
            bytes_per_token: 1000,
            pcie_bytes_per_ns: 10.0,
        })));
        let prompt = [11, 12, 13];
        let c = p.cache.as_mut().unwrap();
        c.lookup_and_insert(&prompt, 1536, 0);
        assert_eq!(c.lookup_and_insert(&prompt, 1536, 1), 1536);
        let h = p.hicache.as_mut().unwrap();
        h.admit(&prompt, 1536, 0, None, 0);
        assert_eq!(h.host_blocks(&prompt), 3);
        p.crash().expect("it was up");
        p.lose_state(&mut q);
        assert!(p.restart());
        let c = p.cache.as_mut().unwrap();
        assert_eq!((c.cached_blocks(), c.hit_tokens()), (0, 1536));
        assert_eq!(
            c.lookup_and_insert(&prompt, 1536, 2),
            0,
            "the prompt misses"
        );
        assert_eq!(p.hicache.as_ref().unwrap().host_blocks(&prompt), 0);
    }

    /// A request that leaves the prefill before its transfer concluded is let go once: its
    /// pages and its place in the load come back, its sender is `Failed`, and a second
    /// `let_go` (or one after `Success`) frees nothing.
    #[test]
    fn a_request_is_let_go_once() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut p = PrefillServer::new(core(64, 16), None, 64, 64);
        let (a, b) = (request(&mut reqs, 0, 64, 8), request(&mut reqs, 1, 64, 8));
        p.core.request_routed();
        p.core.request_routed();
        p.enqueue_waiting(a);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!((p.core.pages.used(), p.core.outstanding), (4, 2));
        let req = reqs.get_mut(a).unwrap();
        assert!(p.let_go(req));
        assert_eq!((p.core.pages.used(), p.core.outstanding), (0, 1));
        assert_eq!(req.sender, KvPoll::Failed);
        assert!(req.on_prefill.pages.is_empty());
        assert!(!p.let_go(req), "once");
        let req = reqs.get_mut(b).unwrap();
        req.sender = KvPoll::Success;
        assert!(
            !p.let_go(req),
            "its transfer concluded: the conclusion freed it"
        );
        assert_eq!(p.core.outstanding, 1);
    }

    /// With `--pp-size 2`, a 10,000-token prompt (chunk 4,096, pages of one token) takes its
    /// prompt's 10,000 pages once, at admission; its second chunk enters the next
    /// micro-batch when the first stage opens, while the first chunk is still in the pipeline
    /// (sglang forms micro-batch `mb_id + 1` before `mb_id`'s output comes round), priced with
    /// the first chunk's 4,096 tokens as its context. Both are in flight (the request counts
    /// twice as running); the first leaves first and queues its KV (4,096 tokens computed,
    /// pages 0..4,096); a crash then cancels the rest.
    #[test]
    fn a_pp_prefill_holds_micro_batches_in_flight() {
        use crate::sglang::pipeline::{Pipeline, PpForward};
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut p = PrefillServer::new(core(1 << 20, 1), None, 4096, 16_384);
        let fwd = PpForward {
            hops: 1,
            bytes_per_token: 16_384,
            tp: 2,
            link_bytes_per_s: 100e9,
            latency_ns: 10_000,
        };
        p.pp = Some(Box::new(Pipeline::new(fwd, 32, 0)));
        let a = request(&mut reqs, 0, 10_000, 8);
        p.enqueue_waiting(a);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!(p.core.pages.used(), 10_000);
        assert_eq!((p.running(), p.chunked, p.core.busy), (1, Some(a), true));
        let whole = p.forward_ns;
        // The first stage opens: the second chunk enters behind the first.
        let (at, ev) = q.pop().unwrap();
        assert_eq!(
            ev,
            Event::PrefillStageFree {
                prefill: PrefillId(0)
            }
        );
        let mut wake = Vec::new();
        p.opened(PrefillId(0), &mut wake);
        assert!(!p.core.busy && p.core.forward_end_ns() == at);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!(p.forward_shape(), [(4096, 4096)]);
        assert_eq!((p.running(), p.core.pages.used()), (2, 10_000));
        assert_eq!(p.batch(), [(a, 4096)], "the next to leave");
        let (left, ev) = q.pop().unwrap();
        assert_eq!(
            ev,
            Event::PrefillStepDone {
                prefill: PrefillId(0)
            }
        );
        assert_eq!(left, whole, "a micro-batch alone takes its stages' sum");
        let mut jobs = Vec::new();
        p.step_done(left, &mut reqs, &mut jobs);
        assert_eq!(
            (jobs.len(), jobs[0].first_page, jobs[0].end_page),
            (1, 0, 4096)
        );
        assert_eq!(reqs.get(a).unwrap().prefilled, 4096);
        assert_eq!(p.running(), 1);
        p.crash().expect("it was up");
        p.lose_state(&mut q);
        assert!(
            q.pop().is_none(),
            "the micro-batch's exit and the stage's wake are cancelled"
        );
        assert_eq!(p.running(), 0);
    }

    #[test]
    fn a_lone_long_prompt_runs_in_one_forward_when_it_fits_the_chunk() {
        // sglang add_one_req: `max_prefill_tokens` refuses only when the batch holds one.
        assert_eq!(
            batch(&[12_000], 16_384, 8_192, 1),
            (vec![(0, 12_000)], None)
        );
        // The next request is refused by the input budget the first one spent.
        assert_eq!(
            batch(&[12_000, 100], 16_384, 8_192, 1),
            (vec![(0, 12_000)], None)
        );
        // Beyond the chunk it is chunked at the chunk size, whatever max_prefill_tokens.
        assert_eq!(
            batch(&[20_000], 16_384, 8_192, 1),
            (vec![(0, 16_384)], Some(0))
        );
    }

    #[test]
    fn the_input_budget_refuses_a_request_that_reaches_it() {
        // 3000 + 3000 leave 2192 of 8192: a 2192-token request reaches it (`>=`) and is
        // refused; a 2191-token one is admitted whole.
        assert_eq!(
            batch(&[3000, 3000, 2192], 16_384, 8_192, 1),
            (vec![(0, 3000), (1, 3000)], None)
        );
        assert_eq!(
            batch(&[3000, 3000, 2191, 5], 16_384, 8_192, 1),
            (vec![(0, 3000), (1, 3000), (2, 2191)], None),
            "the budget is spent (1 token left), then the 5-token request reaches it"
        );
    }

    #[test]
    fn a_request_over_the_remaining_chunk_is_chunked_to_whole_pages() {
        // Chunk 8192, page 64: 5000 whole (5056 paged), 3136 left → the next is cut to 3136.
        assert_eq!(
            batch(&[5000, 6000], 8192, 16_384, 64),
            (vec![(0, 5000), (1, 3136)], Some(1))
        );
        // With 20 tokens of chunk left and 64-token pages nothing fits: the batch closes.
        assert_eq!(batch(&[8172, 100], 8192, 16_384, 64).0, vec![(0, 8172)]);
    }

    #[test]
    fn the_chunked_request_continues_first_within_the_chunk() {
        let mut reqs = Requests::default();
        let mut q = EventQueue::new();
        let mut p = PrefillServer::new(core(1 << 20, 1), None, 4096, 16_384);
        let a = request(&mut reqs, 0, 10_000, 8);
        let b = request(&mut reqs, 1, 1000, 8);
        p.waiting.extend([a, b]);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!((p.batch.clone(), p.chunked), (vec![(a, 4096)], Some(a)));
        // The forward ends; the next batch continues `a`, then `b` would need the chunk.
        let mut jobs = Vec::new();
        p.step_done(q.now(), &mut reqs, &mut jobs);
        schedule(&mut p, &mut reqs, &mut q);
        assert_eq!((p.batch.clone(), p.chunked), (vec![(a, 4096)], Some(a)));
        p.step_done(q.now(), &mut reqs, &mut jobs);
        schedule(&mut p, &mut reqs, &mut q);
        // 1808 left of `a`, then `b` whole (1000 ≤ 4096 − 1808).
        assert_eq!(
            (p.batch.clone(), p.chunked),
            (vec![(a, 1808), (b, 1000)], None)
        );
    }
}
