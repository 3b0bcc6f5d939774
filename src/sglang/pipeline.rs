//! Pipeline-parallel prefill (`--pp-size`, `docs/sglang-pd.md` §27): what a micro-batch pays
//! to cross its stages ([`PpForward`], a pure cost) and the micro-batches in flight
//! ([`Pipeline`], sglang's `event_loop_pp` rotation).
//!
//! sglang runs a PP prefill server with `event_loop_pp_disagg_prefill`
//! (`managers/scheduler_pp_mixin.py`, read at sgl-project/sglang 00ff98d3, stored id
//! 53639497341): every stage's scheduler loops over `mb_id in range(pp_loop_size)`,
//! `pp_loop_size = pp_size + pp_async_batch_depth` (`init_pp_loop_state`; the flag's default
//! is 0, `server_args.py`). Each turn forms micro-batch `mb_id` (`get_new_batch_prefill`,
//! the chunked request first), launches its layers on it, then blocks on the output of
//! micro-batch `(mb_id + 1) % pp_loop_size` — the one launched `pp_loop_size − 1` turns
//! before — coming round from the last stage, processes that result (the KV of its chunks is
//! sent then) and sends micro-batch `mb_id`'s hidden states and residual (`PPProxyTensors`)
//! on to the next stage (async send, sync receive). So stage `k` runs micro-batch `i` while
//! stage `k + 1` runs `i − 1`, at most `pp_loop_size` micro-batches are in flight, and a new
//! one enters the first stage when the first stage is free and the oldest of a full ring has
//! come out of the last.
//!
//! pdsim's model ([`Pipeline`]): a micro-batch's stage times are the step model's forward of
//! the whole model at the stage TP split by layers ([`Pipeline::stage_ns`]): the GPU part in
//! proportion to each stage's layers (`get_pp_indices`; the embedding and the LM head — in a
//! prefill only each sequence's last token goes through it — count with the layers they sit
//! beside, a fraction of a percent), the per-forward host cost (`prefill_overhead_s` and its
//! per-sequence part) on stage 0 alone: every stage's scheduler forms the batch, but a later
//! stage does it while it waits for the previous stage's hidden states
//! (`_pp_recv_proxy_tensors` comes after `get_new_batch_prefill`), so only the first stage's
//! lies on the micro-batch's path. A stage but the last also pays the hand-off to the next
//! ([`PpForward::hop_ns`]). Stage `k` starts a micro-batch when stage `k − 1` handed it on and
//! stage `k` finished the one before; the micro-batch's chunks are computed (their KV queued
//! to send) when it leaves the last stage. A lone prompt takes the sum of its stages: the
//! whole forward plus `pp − 1` hand-offs, as one batch at a time would.

use std::collections::VecDeque;

use crate::engine::{EventKey, EventQueue, Nanos};
use crate::vocab::event::Event;
use crate::vocab::ids::PrefillId;
use crate::vocab::requests::ReqRef;

/// What one forward of a PP prefill instance pays to hand its activations from stage to
/// stage.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PpForward {
    /// Hand-offs per forward: `pp_size − 1`.
    pub hops: u32,
    /// Bytes one token carries across a hop: the hidden states and the residual,
    /// `2 × hidden_size × activation bytes`.
    pub bytes_per_token: u64,
    /// The stage's TP ranks: each sends its `1/tp` share in parallel.
    pub tp: u32,
    /// One rank's one-way link to the next stage, bytes/s, after the link efficiency: NVLink
    /// when the instance sits in one NVLink domain, else the GPU's share of its NICs.
    pub link_bytes_per_s: f64,
    /// Fixed latency of one hop, ns: one step of a collective (`allreduce_step_latency_s`),
    /// plus the network latency when the stages are on different nodes.
    pub latency_ns: Nanos,
}

impl PpForward {
    /// The activation hand-off of one hop for a forward of `tokens` tokens, ns (rounded up).
    pub fn hop_ns(&self, tokens: u64) -> Nanos {
        let bytes = (tokens * self.bytes_per_token) as f64 / f64::from(self.tp.max(1));
        self.latency_ns + (bytes / self.link_bytes_per_s * 1e9).ceil() as Nanos
    }

    /// What a forward of `tokens` tokens adds over the same forward on one stage, ns: `hops`
    /// hand-offs.
    pub fn extra_ns(&self, tokens: u64) -> Nanos {
        u64::from(self.hops) * self.hop_ns(tokens)
    }
}

/// A micro-batch in the pipeline.
#[derive(Debug)]
pub struct MicroBatch {
    /// Its requests and the prompt tokens each computes in it.
    pub batch: Vec<(ReqRef, u32)>,
    /// Its stages' times summed (the whole forward plus the hand-offs), ns: what it would take
    /// alone.
    pub forward_ns: Nanos,
    /// When it leaves the last stage, ns.
    pub exit_ns: Nanos,
    /// Its `PrefillStepDone` at `exit_ns` (a crash cancels it).
    key: EventKey,
}

/// The micro-batches of one PP prefill instance in flight (module docs): at most `loop_size`,
/// each stage running them in the order they entered, so they leave in that order too.
#[derive(Debug)]
pub struct Pipeline {
    /// The hand-off between stages.
    pub fwd: PpForward,
    /// Each stage's layers (`get_pp_indices`), stage 0 first.
    layers: Vec<u32>,
    /// `pp_loop_size = pp_size + pp_async_batch_depth`: micro-batches in flight at most.
    loop_size: u32,
    /// When each stage finishes the last micro-batch handed to it, ns.
    free_at: Vec<Nanos>,
    /// Micro-batches in flight, the next to leave first.
    in_flight: VecDeque<MicroBatch>,
    /// When the first stage may take the next micro-batch, ns: it is free, and fewer than
    /// `loop_size` are in flight.
    open_at: Nanos,
    /// The pending `PrefillStageFree` at `open_at`, when no micro-batch leaves then.
    wake: Option<EventKey>,
    /// Emptied batches, reused.
    spare: Vec<Vec<(ReqRef, u32)>>,
}

impl Pipeline {
    /// An empty pipeline over `num_layers` layers, `fwd.hops + 1` stages, with
    /// `--pp-async-batch-depth` `depth`.
    pub fn new(fwd: PpForward, num_layers: u32, depth: u32) -> Self {
        let pp = fwd.hops + 1;
        let layers = (0..pp)
            .map(|r| {
                let (a, b) = crate::spec::server::pp_indices(num_layers, r, pp);
                b - a
            })
            .collect();
        Self {
            fwd,
            layers,
            loop_size: pp + depth,
            free_at: vec![0; pp as usize],
            in_flight: VecDeque::new(),
            open_at: 0,
            wake: None,
            spare: Vec::new(),
        }
    }

    /// Stage `k`'s time for a micro-batch of `tokens` tokens whose one-stage forward is
    /// `forward_ns`, `host_ns` of it the per-forward host cost, ns: the GPU part
    /// (`forward_ns − host_ns`) in proportion to the stage's layers (cut at whole nanoseconds
    /// of the running sum, so the stages add up to it exactly), the host cost on stage 0, the
    /// hand-off to the next stage on every stage but the last.
    pub fn stage_ns(&self, k: usize, forward_ns: Nanos, host_ns: Nanos, tokens: u64) -> Nanos {
        let host = host_ns.min(forward_ns);
        let gpu = u128::from(forward_ns - host);
        let total: u32 = self.layers.iter().sum();
        let before: u32 = self.layers[..k].iter().sum();
        let cut = |l: u32| (gpu * u128::from(l) / u128::from(total.max(1))) as Nanos;
        let mut t = cut(before + self.layers[k]) - cut(before);
        if k == 0 {
            t += host;
        }
        if k + 1 < self.layers.len() {
            t += self.fwd.hop_ns(tokens);
        }
        t
    }

    /// When the first stage may take a micro-batch, ns.
    #[inline]
    pub fn open_at(&self) -> Nanos {
        self.open_at
    }

    /// Whether the first stage may take a micro-batch at `now`.
    #[inline]
    pub fn open(&self, now: Nanos) -> bool {
        now >= self.open_at
    }

    /// Micro-batch `batch` (`tokens` tokens, one-stage forward `forward_ns` of which
    /// `host_ns` host cost) enters the first stage at `now` (the caller checked
    /// [`Pipeline::open`]): its stages are booked, its `PrefillStepDone` scheduled at its
    /// exit, and a `PrefillStageFree` when the first stage opens before any exit. Returns when
    /// the first stage opens again and the event that opens it.
    pub fn enter(
        &mut self,
        (me, q): (PrefillId, &mut EventQueue<Event>),
        batch: Vec<(ReqRef, u32)>,
        (forward_ns, host_ns, tokens): (Nanos, Nanos, u64),
    ) -> (Nanos, EventKey) {
        let now = q.now();
        // The stage was open, so a pending wake is stale (an exit at the same nanosecond opened
        // it first): left pending it would close the ring this entry books.
        if let Some(k) = self.wake.take() {
            q.cancel(k);
        }
        let (mut at, mut sum, mut first_free) = (now, 0, now);
        for k in 0..self.layers.len() {
            let t = self.stage_ns(k, forward_ns, host_ns, tokens);
            at = at.max(self.free_at[k]) + t;
            self.free_at[k] = at;
            sum += t;
            if k == 0 {
                first_free = at;
            }
        }
        let key = q.schedule_keyed(at, Event::PrefillStepDone { prefill: me });
        self.in_flight.push_back(MicroBatch {
            batch,
            forward_ns: sum,
            exit_ns: at,
            key,
        });
        // A full ring opens when its oldest leaves, if that is after the first stage is free.
        let oldest = self.in_flight.front().map_or(0, |m| m.exit_ns);
        if self.in_flight.len() as u32 >= self.loop_size && oldest > first_free {
            self.open_at = oldest;
            let key = self.in_flight.front().map(|m| m.key).expect("in flight");
            return (oldest, key);
        }
        self.open_at = first_free;
        let wake = q.schedule_keyed(first_free, Event::PrefillStageFree { prefill: me });
        self.wake = Some(wake);
        (first_free, wake)
    }

    /// The oldest micro-batch leaves the last stage (its `PrefillStepDone` fired).
    pub fn leave(&mut self) -> MicroBatch {
        self.in_flight.pop_front().expect("a micro-batch in flight")
    }

    /// A left micro-batch's emptied vector, for the next batch.
    pub fn recycle(&mut self, mut batch: Vec<(ReqRef, u32)>) {
        batch.clear();
        self.spare.push(batch);
    }

    /// An empty vector for the next batch.
    pub fn spare(&mut self) -> Vec<(ReqRef, u32)> {
        self.spare.pop().unwrap_or_default()
    }

    /// The next micro-batch to leave.
    pub fn head(&self) -> Option<&MicroBatch> {
        self.in_flight.front()
    }

    /// Requests in flight, over every micro-batch. Out of line: the sampler's look at a
    /// server (every step end) stays small enough to inline where there is no pipeline.
    #[inline(never)]
    pub fn running(&self) -> u32 {
        self.in_flight.iter().map(|m| m.batch.len() as u32).sum()
    }

    /// Prompt tokens of `r` in flight and not yet computed (a chunked request's earlier
    /// chunks: sglang puts its next chunk in the next micro-batch without waiting for them).
    pub fn in_flight_tokens(&self, r: ReqRef) -> u32 {
        self.in_flight
            .iter()
            .flat_map(|m| m.batch.iter())
            .filter(|&&(x, _)| x == r)
            .map(|&(_, n)| n)
            .sum()
    }

    /// The instance crashed: every micro-batch is lost, its events cancelled; the stages are
    /// free.
    pub fn clear(&mut self, q: &mut EventQueue<Event>) {
        for m in self.in_flight.drain(..) {
            q.cancel(m.key);
        }
        if let Some(k) = self.wake.take() {
            q.cancel(k);
        }
        self.free_at.fill(0);
        self.open_at = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-8B (hidden 4,096, BF16) over two TP-1 stages: 2,048 tokens carry
    /// 2 × 4,096 × 2 B = 16,384 B each, 33,554,432 B in all; at 100 GB/s that is 335,545 ns
    /// (rounded up), plus a 10 µs latency.
    #[test]
    fn one_hop_by_hand() {
        let f = PpForward {
            hops: 1,
            bytes_per_token: 16_384,
            tp: 1,
            link_bytes_per_s: 100e9,
            latency_ns: 10_000,
        };
        assert_eq!(f.hop_ns(2048), 10_000 + 335_545);
        assert_eq!(f.extra_ns(2048), f.hop_ns(2048));
        let four = PpForward {
            hops: 3,
            tp: 2,
            ..f
        };
        assert_eq!(four.extra_ns(2048), 3 * (10_000 + 167_773));
    }

    /// Two stages (a 1 µs hop, no bytes), a pipeline of `depth` extra micro-batches over
    /// 32 layers.
    fn two(depth: u32) -> Pipeline {
        let fwd = PpForward {
            hops: 1,
            bytes_per_token: 0,
            tp: 1,
            link_bytes_per_s: 1e9,
            latency_ns: 1_000,
        };
        Pipeline::new(fwd, 32, depth)
    }

    /// 32 layers over 3 stages are 10, 11, 11: a 10,001-ns forward with 1 ns of host cost
    /// puts 10,000 ns of GPU time at 3,125, 3,437 and 3,438 ns (cut at the running sums 3,125,
    /// 6,562 and 10,000), the host on stage 0 and a hop after each stage but the last: the
    /// stages add up to the forward plus two hops.
    #[test]
    fn stage_times_split_the_forward_by_layers() {
        let p = Pipeline::new(
            PpForward {
                hops: 2,
                ..two(0).fwd
            },
            32,
            0,
        );
        assert_eq!(p.layers, [10, 11, 11]);
        let t: Vec<Nanos> = (0..3).map(|k| p.stage_ns(k, 10_001, 1, 64)).collect();
        assert_eq!(t, [3_125 + 1 + 1_000, 3_437 + 1_000, 3_438]);
        assert_eq!(t.iter().sum::<Nanos>(), 10_001 + 2 * 1_000);
    }

    /// Stages of 6,000 ns (host 2,000 + GPU 3,000 + hop 1,000) and 3,000 ns: a lone
    /// micro-batch leaves at 9,000 (the forward, 8,000, plus a hop) and the first stage opens
    /// at 6,000. The second enters then, runs stage 0 over 6,000–12,000 and stage 1 over
    /// 12,000–15,000; the depth-0 ring (2) is full, but its oldest left at 9,000, so the first
    /// stage opens when it is free, at 12,000.
    #[test]
    fn micro_batches_overlap_in_the_stages() {
        let mut q = EventQueue::new();
        let mut p = two(0);
        let me = PrefillId(0);
        let (open, _) = p.enter((me, &mut q), Vec::new(), (8_000, 2_000, 64));
        assert_eq!((open, p.head().unwrap().exit_ns), (6_000, 9_000));
        assert_eq!(p.head().unwrap().forward_ns, 9_000);
        assert!(!p.open(5_999) && p.open(6_000));
        let ev = q.pop().unwrap();
        assert_eq!(ev, (6_000, Event::PrefillStageFree { prefill: me }));
        let (open, _) = p.enter((me, &mut q), Vec::new(), (8_000, 2_000, 64));
        assert_eq!((open, p.in_flight[1].exit_ns), (12_000, 15_000));
        let ev = q.pop().unwrap();
        assert_eq!(ev, (9_000, Event::PrefillStepDone { prefill: me }));
        assert_eq!(p.leave().exit_ns, 9_000);
        let ev = q.pop().unwrap();
        assert_eq!(ev, (12_000, Event::PrefillStageFree { prefill: me }));
    }

    /// An entry cancels a wake still pending: a micro-batch entering at 0 leaves a wake at
    /// 4,000 (stages of 4,000 and 6,000, as below); a second entering at once fills the ring,
    /// which opens at the first's exit, 10,000 — and no wake is left to open it earlier.
    #[test]
    fn an_entry_cancels_a_pending_wake() {
        let me = PrefillId(0);
        let mut q = EventQueue::new();
        let mut p = Pipeline::new(two(0).fwd, 3, 0);
        p.enter((me, &mut q), Vec::new(), (9_000, 0, 64));
        let (open, _) = p.enter((me, &mut q), Vec::new(), (9_000, 0, 64));
        assert_eq!(open, 10_000);
        let mut left = Vec::new();
        while let Some(e) = q.pop() {
            left.push(e);
        }
        assert_eq!(
            left,
            [
                (10_000, Event::PrefillStepDone { prefill: me }),
                (16_000, Event::PrefillStepDone { prefill: me })
            ]
        );
    }

    /// 3 layers over 2 stages are 1 and 2: a 9,000-ns forward without host cost gives stages
    /// of 4,000 (3,000 + a 1,000 hop) and 6,000. Depth 0 (a ring of 2): the second
    /// micro-batch enters at 4,000, waits for stage 1 until 10,000 and leaves at 16,000; the
    /// ring is full and its oldest leaves at 10,000, after stage 0 is free (8,000): the first
    /// stage opens at 10,000 on that exit, and a third leaves at 22,000 — one every 6,000,
    /// the longer stage. Depth 1 (a ring of 3): the first stage opens at 8,000, the third
    /// enters then and the ring reopens at 12,000, when stage 0 is free (its oldest left at
    /// 10,000); the exits are the same, the longer stage decides them.
    #[test]
    fn a_full_ring_waits_for_its_oldest_and_the_longer_stage_sets_the_pace() {
        let me = PrefillId(0);
        let uneven = |depth| Pipeline::new(two(0).fwd, 3, depth);
        let step = |p: &mut Pipeline, q: &mut EventQueue<Event>| {
            let (open, _) = p.enter((me, q), Vec::new(), (9_000, 0, 64));
            while q.now() < open {
                if let Some((_, Event::PrefillStepDone { .. })) = q.pop() {
                    p.leave();
                }
            }
            (open, p.in_flight.back().unwrap().exit_ns)
        };
        let mut q = EventQueue::new();
        let mut p = uneven(0);
        assert_eq!(p.layers, [1, 2]);
        assert_eq!(step(&mut p, &mut q), (4_000, 10_000));
        assert_eq!(step(&mut p, &mut q), (10_000, 16_000));
        assert_eq!(step(&mut p, &mut q), (16_000, 22_000));
        let mut q = EventQueue::new();
        let mut p = uneven(1);
        assert_eq!(step(&mut p, &mut q), (4_000, 10_000));
        assert_eq!(step(&mut p, &mut q), (8_000, 16_000));
        assert_eq!(step(&mut p, &mut q), (12_000, 22_000));
    }
}
