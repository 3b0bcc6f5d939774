//! Where `World` meets DeepEP's all-to-all on the fabric (`sglang::a2a`,
//! `docs/performance-model.md` §7.3): at a forward's start on an expert-parallel server whose
//! all-to-all crosses NVLink domains, the forward's MoE parts (the server's step model: one
//! forward, or a speculative step's draft, verify and draft extend) go to the component with
//! the end taken back; when the flows land, the forward ends at the component's re-priced time.

use super::FlowEnd;
use crate::compute::moe::MoeTime;
use crate::engine::EventKey;
use crate::vocab::event::Event;
use crate::vocab::ids::{InstanceId, PrefillId};

use super::World;
use super::sampler::CoreRef;

impl World<'_> {
    /// Whether server `c`'s forwards put all-to-all bytes on the fabric (see
    /// `A2aFlows::on_fabric`).
    pub(super) fn forward_uses_fabric(&self, c: CoreRef) -> bool {
        let gpus = match c {
            CoreRef::Prefill(p) => &self.prefills[p].core.gpus,
            CoreRef::Decode(d) => &self.decodes[d].core.gpus,
            CoreRef::Colocated(_) => return false,
        };
        self.a2a.on_fabric(gpus)
    }

    /// `try_schedule` on prefill `p`, then the all-to-all hook if a forward started.
    pub(super) fn schedule_prefill(&mut self, p: PrefillId) {
        let core = &self.prefills[p].core;
        // Only an idle, live prefill starts a forward (`try_schedule` returns at once on any
        // other): the common wake of a busy one costs no call.
        if core.busy || !core.alive() {
            return;
        }
        let before = core.step_key;
        // What the prefetches from the store have landed by now is what admission finds.
        let now = self.q.now();
        self.store.refresh(&self.fabric, &mut self.reqs, p, now);
        self.prefills[p].try_schedule(p, &mut ctx!(self));
        self.a2a_forward_started(CoreRef::Prefill(p), before);
    }

    /// The hook at a forward's start: called after a component may have started one (its
    /// `step_key` was `before`). If one started on a server whose all-to-all crosses the
    /// fabric, its end is taken back and its flows start (module docs). Does nothing for any
    /// other server, so results of scenarios without such a server are unchanged.
    #[inline(always)]
    pub(super) fn a2a_forward_started(&mut self, c: CoreRef, before: Option<EventKey>) {
        // Most clusters have no such server: the common forward costs one test.
        if self.a2a.any_on_fabric() {
            self.a2a_forward_on_fabric(c, before);
        }
    }

    /// [`World::a2a_forward_started`] where some server's all-to-all crosses the fabric.
    #[inline(never)]
    fn a2a_forward_on_fabric(&mut self, c: CoreRef, before: Option<EventKey>) {
        if !self.forward_uses_fabric(c) {
            return;
        }
        let now = self.q.now();
        // The forward's MoE layers (each with how many times it runs) when a speculative
        // step or a draft prefill brings more than the target's one forward; `None`: the
        // target's forward alone, priced below.
        let (core, tokens, prefill, ctx, dt, done, spec) = match c {
            CoreRef::Prefill(p) => {
                let s = &mut self.prefills[p];
                let shape = s.forward_shape();
                let tokens: u64 = shape.iter().map(|&(n, _)| u64::from(n)).sum();
                let (dt, spec) = match s.spec.as_deref() {
                    None => (s.core.step.prefill_ns(shape), None),
                    // The forward the server scheduled: the target's and the draft's prefill.
                    Some(sp) => (
                        s.forward_ns,
                        Some(sp.moe_time(tokens).map(|m| (m, 1.0)).into_iter().collect()),
                    ),
                };
                (
                    &mut s.core,
                    tokens,
                    true,
                    0,
                    dt,
                    Event::PrefillStepDone { prefill: p },
                    spec,
                )
            }
            CoreRef::Decode(d) => {
                let s = &mut self.decodes[d];
                let (dt, spec) = match s.spec.as_deref() {
                    None => (s.core.step.decode_ns(s.running(), s.context_tokens()), None),
                    // A speculative step: draft forwards, verify, draft extend, as scheduled.
                    Some(sp) => (s.step_span().1.saturating_sub(now), Some(sp.moe_parts())),
                };
                let done = Event::DecodeStepDone { decode: d };
                let (ctx, running) = (s.context_tokens(), u64::from(s.running()));
                (&mut s.core, running, false, ctx, dt, done, spec)
            }
            CoreRef::Colocated(_) => return,
        };
        let Some(key) = core.step_key.filter(|&k| Some(k) != before && core.alive()) else {
            return;
        };
        let parts: Vec<(MoeTime, f64)> = match spec {
            None => match core.step.moe_time(tokens, prefill, ctx) {
                Some(moe) => vec![(moe, 1.0)],
                None => return,
            },
            Some(mut extra) => {
                // A speculative prefill also runs the target's forward; a decode step's
                // parts are its whole step.
                if prefill && let Some(moe) = core.step.moe_time(tokens, prefill, ctx) {
                    extra.insert(0, (moe, 1.0));
                }
                extra
            }
        };
        let bytes: f64 = parts.iter().map(|(m, w)| w * m.rdma_bytes_per_gpu).sum();
        let bytes = bytes.round() as u64;
        if bytes == 0 {
            return;
        }
        // The end the component scheduled is taken back: the flows' landing sets it.
        debug_assert_eq!(core.step_key, Some(key));
        core.take_back_forward_end(&mut self.q);
        self.a2a.start(
            (&mut self.q, &mut self.fabric, &mut self.fabric_timer),
            (core.instance.0, &core.gpus),
            (now, dt, parts, done),
            bytes,
        );
    }

    /// An all-to-all flow of instance `i` ended. When its forward's last one has, the forward
    /// ends at its re-priced time; a crashed server's forward is dropped (its flows were
    /// aborted by the crash).
    pub(super) fn a2a_flow_ended(&mut self, end: &FlowEnd, i: InstanceId) {
        let Some(landed) = self.a2a.flow_ended(i) else {
            return;
        };
        let core = match self.role_of(i) {
            Ok(pf) => &mut self.prefills[pf].core,
            Err(d) => &mut self.decodes[d].core,
        };
        if !core.alive() {
            return;
        }
        let now = self.q.now();
        let (at, done) = self.a2a.reprice(landed, core.pool.idx(), end.end_ns, now);
        core.forward_ends(at, self.q.schedule_keyed(at, done));
    }
}
