//! Where `World` meets the fabric and the components that start flows: the one `FabricDue`
//! timer, each ended flow routed to its owner by its tag (the transfer workers,
//! `sglang::transfer`, `docs/sglang-pd.md` §2.4–§2.6, §3.1, §3.8; the Mooncake Store,
//! `sglang::mooncake_store`, §18; DeepEP's all-to-all, `sglang::a2a`, performance-model
//! §7.3), and the effects components return applied in their order (`sglang::effect`). The
//! rules — the workers' queues, what fails and blacklists, the landing and the oracle, the
//! conclusion; the store's operations and a decode's offloads; a forward's all-to-all and its
//! re-priced end — are the components'.

use super::FlowEnd;
use super::World;
use super::sampler::CoreRef;
use crate::sglang::Effect;
use crate::vocab::Outcome;
use crate::vocab::event::Wake;
use crate::vocab::flow::FlowTag;

impl World<'_> {
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
        // Exactly one `FabricDue` stays pending, at the fabric's next due time.
        self.fabric_timer.sync(&mut self.q, &mut self.fabric);
    }

    /// One fabric flow ended: routed to its owner by its tag.
    pub(super) fn flow_ended(&mut self, end: &FlowEnd) {
        match end.token {
            FlowTag::A2a(i) => {
                let alive = match self.core_of(i) {
                    CoreRef::Prefill(p) => self.prefills[p].core.alive(),
                    CoreRef::Decode(d) => self.decodes[d].core.alive(),
                    CoreRef::Colocated(c) => self.colocated[c].core.alive(),
                };
                let base = self.scratch.fx.len();
                let at = (end.end_ns, self.q.now());
                self.a2a.flow_ended(i, at, alive, &mut self.scratch.fx);
                if self.scratch.fx.len() > base {
                    self.apply_effects(base);
                }
            }
            FlowTag::Store { op, part } => store!(
                self,
                flow_ended((op, part), end.outcome, (end.delivered_bytes, end.bytes))
            ),
            FlowTag::Kv { prefill, lane } => transfer!(self, flow_ended(prefill, lane, end)),
        }
    }

    /// Applies the effects a component's call pushed above `base` (what is below is waiting
    /// in an application this one runs inside), in their order: a request fails, the prefill
    /// frees the side of a request whose transfer concluded (the router hears its load; it may
    /// admit more), a worker's death is counted, a decode's offload frees host blocks, a
    /// prefill's write-back is counted, a forward whose all-to-all landed ends. A `Kick`, an
    /// `Offload` or an `OffloadGoOn` calls the component right there, and what that call
    /// pushes is applied before the effects still waiting — as if the call that pushed it had
    /// gone on.
    #[inline]
    pub(super) fn apply_effects(&mut self, base: usize) {
        // The buffer is a stack, the next effect on top: a call's effects, pushed in their
        // order, are turned over.
        self.scratch.fx[base..].reverse();
        while self.scratch.fx.len() > base {
            let e = self.scratch.fx.pop().expect("above the base");
            match e {
                Effect::Fail { req, kind, message } => {
                    self.end(req, Outcome::Failed, Some((kind, &message)))
                }
                Effect::Release { prefill, req } => {
                    let (now, seed) = (self.q.now(), self.sc.seed);
                    let holdback = self.sc.compute.pd_prefill_response_holdback;
                    let r = self.reqs.get_mut(req).unwrap_or_else(|| {
                        panic!("request {} concluded after its end (seed {seed})", req.id)
                    });
                    self.prefills[prefill].transfer_concluded(r, now, holdback);
                    self.sync(CoreRef::Prefill(prefill));
                    self.wake.push(Wake::Prefill(prefill));
                }
                Effect::Kick { prefill, lane } => {
                    let waiting = self.scratch.fx.len();
                    self.transfer.kick(prefill, lane, &mut transfer_cx!(self));
                    // The kick's effects go on top of the waiting ones, the first on top.
                    self.scratch.fx[waiting..].reverse();
                }
                Effect::WorkerDied { death, message } => {
                    self.collector.raised(death.kind, &message);
                    self.collector.worker_deaths.push(death);
                }
                Effect::Offload {
                    decode,
                    path,
                    start,
                    blocks,
                } => {
                    let waiting = self.scratch.fx.len();
                    self.store
                        .offload(decode, (path, start, blocks), &mut store_cx!(self));
                    self.scratch.fx[waiting..].reverse();
                }
                Effect::OffloadGoOn { decode } => {
                    let waiting = self.scratch.fx.len();
                    self.decodes[decode].offload_go_on(decode, &self.reqs, &mut self.scratch.fx);
                    self.scratch.fx[waiting..].reverse();
                }
                Effect::OffloadWritten { decode, blocks } => {
                    self.decodes[decode].offload_written(blocks);
                }
                Effect::StoreWriteCounted { prefill, bytes } => {
                    self.prefills[prefill].wrote_to_store(bytes);
                }
                Effect::Retracted { prefill, .. } => {
                    self.prefills[prefill].request_returned();
                    self.sync(CoreRef::Prefill(prefill));
                }
                Effect::ForwardStarted { instance, before } => {
                    let (c, q) = (self.core_of(instance), &mut self.q);
                    let f = match c {
                        CoreRef::Prefill(p) => self.prefills[p].a2a_forward(p, before, q),
                        CoreRef::Decode(d) => self.decodes[d].a2a_forward(d, before, q),
                        CoreRef::Colocated(_) => None,
                    };
                    if let Some(f) = f {
                        let cx = (&mut self.q, &mut self.fabric, &mut self.fabric_timer);
                        self.a2a.start(cx, f);
                    }
                }
                Effect::ForwardEnds { instance, at, done } => {
                    let key = self.q.schedule_keyed(at, done);
                    match self.core_of(instance) {
                        CoreRef::Prefill(p) => self.prefills[p].forward_ends(at, key),
                        CoreRef::Decode(d) => self.decodes[d].forward_ends(at, key),
                        CoreRef::Colocated(c) => self.colocated[c].forward_ends(at, key),
                    }
                }
            }
        }
    }
}
