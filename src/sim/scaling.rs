//! Pools that change size (issue 38, item 2), as `World` routes them: the controller
//! (`autoscale::controller`: the policy, the fleet, the window of requests) decides; `World`
//! shows it the servers and carries out its actions — an instance joins or leaves the router's
//! set (`Core::set_member`, read through `dispatch::server_state`), a decode that joins
//! registers with the prefills' bootstrap (their blacklist entries for it cleared). A draining
//! instance finishes what it holds before it is off: nothing in flight is lost. One
//! `Event::ScaleTick` is pending while the run lasts (every simulated second, and at the
//! policy's ticks); a launch schedules its `Event::InstanceReady`. A fixed pool has neither.

use crate::autoscale::controller::{Controller, Steps};
use crate::autoscale::fleet::Action;
use crate::config::Scenario;
use crate::config::autoscale::{DECODE, Lifecycle, PREFILL};
use crate::sglang::decode::DecodeServer;
use crate::sglang::prefill::PrefillServer;
use crate::vocab::event::Event;
use crate::vocab::ids::{DecodeId, IdVec, InstanceId, PrefillId};

use super::World;

/// The core of instance `$c` (a `CoreRef`) in `World` `$w`'s server tables (disjoint fields,
/// so the controller may be borrowed beside it).
macro_rules! core {
    ($w:expr, $c:expr) => {
        super::sampler::state_of(&mut $w.prefills, &mut $w.decodes, &mut $w.colocated, $c).0
    };
}
use super::sampler::CoreRef;

/// The controller of `sc` over the servers as assembled (every slot built); the slots beyond
/// each pool's initial count leave the router's set here.
pub(super) fn controller(
    sc: &Scenario,
    lc: &Lifecycle,
    prefills: &mut IdVec<PrefillId, PrefillServer>,
    decodes: &mut IdVec<DecodeId, DecodeServer>,
) -> Box<Controller> {
    let kv: Vec<u64> = (prefills.iter().map(|p| &p.core))
        .chain(decodes.iter().map(|d| &d.core))
        .map(|c| u64::from(c.pages.total()) * u64::from(c.page_size))
        .collect();
    let steps = Steps {
        prefill: &prefills[PrefillId(0)].core.step,
        decode: &decodes[DecodeId(0)].core.step,
    };
    let c = Box::new(Controller::new(sc, lc, &kv, &steps));
    for (s, p) in prefills.iter_mut().enumerate() {
        p.core.set_member((s as u32) < lc.initial[PREFILL]);
    }
    for (s, d) in decodes.iter_mut().enumerate() {
        d.core.set_member((s as u32) < lc.initial[DECODE]);
    }
    c
}

/// The core of `(role, slot)`.
fn core_ref(role: usize, slot: u32) -> CoreRef {
    if role == PREFILL {
        CoreRef::Prefill(PrefillId(slot))
    } else {
        CoreRef::Decode(DecodeId(slot))
    }
}

impl World<'_> {
    /// The controller's look: the scrape, draining instances that hold nothing any more (off,
    /// or flipped into the other pool), the policy when its tick is due, the actions; then the
    /// next look.
    pub(super) fn on_scale_tick(&mut self) {
        let now = self.q.now();
        let Some(mut c) = self.scaling.take() else {
            return;
        };
        // The decodes' coalesced steps up to now: the scrape reads their batches.
        (self.decodes).touch_all(&mut self.q, &mut self.reqs, watchers!(self));
        for p in self.prefills.iter().filter(|p| p.core.member()) {
            c.scrape(p.core.instance.idx(), p.queued(), p.core.kv_share());
        }
        for d in self.decodes.iter().filter(|d| d.core.member()) {
            c.scrape(d.core.instance.idx(), d.queued(), d.core.kv_share());
        }
        let mut actions: Vec<Action> = (c.fleet.draining().into_iter())
            .filter(|&(role, slot)| core!(self, core_ref(role, slot)).outstanding == 0)
            .filter_map(|(role, slot)| c.fleet.drained(role, slot, now))
            .collect();
        if let Some(tick) = c.due(now) {
            let since = c.last_look_ns();
            let (mut prefill, mut decode) = (Vec::new(), Vec::new());
            if tick.needs_load {
                prefill = (self.prefills.iter().filter(|p| p.core.member()))
                    .map(|p| p.load(since, &self.reqs))
                    .collect();
                decode = (self.decodes.iter().filter(|d| d.core.member()))
                    .map(|d| d.load(since, now))
                    .collect();
            }
            actions.extend(c.decide(now, tick, prefill, decode));
        }
        // A drain that finds its instance empty ends at once (and may flip it).
        let mut i = 0;
        while let Some(&a) = actions.get(i) {
            match a {
                Action::Launch {
                    role,
                    slot,
                    ready_ns,
                } => {
                    // A new process (a cold start, or a server flipping in): empty caches.
                    match core_ref(role, slot) {
                        CoreRef::Prefill(p) => self.prefills[p].forget_caches(),
                        CoreRef::Decode(d) => self.decodes[d].forget_caches(),
                        CoreRef::Colocated(_) => {}
                    }
                    let instance = InstanceId(c.fleet.instance(role, slot));
                    self.q
                        .schedule_at(ready_ns, Event::InstanceReady { instance });
                }
                Action::Drain { role, slot } => {
                    let core = core!(self, core_ref(role, slot));
                    core.set_member(false);
                    let held = core.outstanding;
                    let k = self.sync(core_ref(role, slot));
                    self.router.forget_worker(role == DECODE, k);
                    if held == 0 {
                        actions.extend(c.fleet.drained(role, slot, now));
                    }
                }
            }
            i += 1;
        }
        if !(self.feed.done() && self.live() == 0) {
            self.q.schedule_at(c.next_look(now), Event::ScaleTick);
        }
        self.scaling = Some(c);
    }

    /// Instance `i`'s start is due: it joins the router's set unless its start was called
    /// off or it crashed while starting (the start failed). A decode that joins registers with
    /// the prefills (their blacklist entries for it cleared).
    pub(super) fn on_instance_ready(&mut self, i: InstanceId) {
        let now = self.q.now();
        let Some(c) = self.scaling.as_deref_mut() else {
            return;
        };
        let (role, slot) = c.fleet.slot_of(i.0);
        let core = core_ref(role, slot);
        let up = core!(self, core).alive();
        if c.fleet.ready(role, slot, now, up) {
            if let CoreRef::Decode(d) = core {
                self.transfer.decode_registered(d);
            }
            core!(self, core).set_member(true);
            self.sync(core);
        }
    }
}
