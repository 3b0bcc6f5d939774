//! Routing the faults: `World` hands a fault to the component it hits and applies what the
//! component says the fault does beyond itself. The rules live in the components
//! (`docs/architecture.md` §8): a decode's crash, first-contact exception and restart in
//! `sglang/decode/faults.rs`; a prefill's in `sglang/prefill.rs`; its transfer workers' in
//! `sglang/transfer.rs`; a colocated server's in `sglang/colocated.rs`; the decodes' heartbeat
//! to the prefills in `sglang/heartbeat.rs` (its verdict's failures are effects `World`
//! applies as it routes the event); the router's health check in `sglang/router.rs`.

use crate::config::FaultAction;
use crate::sglang::decode::{CrashCause, DecodeCrash};
use crate::sglang::dp::DECODE;
use crate::vocab::Outcome;

use super::World;
use super::sampler::CoreRef;
use crate::vocab::event::Event;
use crate::vocab::ids::InstanceId;

impl World<'_> {
    pub(super) fn on_fault(&mut self, index: usize) {
        let now = self.q.now();
        match self.sc.faults[index].action.clone() {
            FaultAction::Fabric(f) => {
                let effect = self.fabric.apply_fault(now, &f);
                for end in &effect.ended {
                    self.flow_ended(end);
                }
                self.fabric_timer.sync(&mut self.q, &mut self.fabric);
            }
            FaultAction::Crash {
                instance,
                restart_ns,
            } => {
                self.crash(self.core_of(instance), CrashCause::Injected);
                if let Some(r) = restart_ns {
                    self.q.schedule_in(r, Event::Restart { instance });
                }
            }
        }
    }

    /// Instance `c` goes down of `cause`, and `World` applies what its component's crash says,
    /// in the order the outcome's doc gives:
    /// - a decode (`DecodeCrash`): the flows touching it are aborted, every prefill blacklists
    ///   its sessions, every request routed to it fails as the crash says, then its state is
    ///   lost (after the failures: they leave the batch it still has). Only a decode dies of
    ///   an exception (its scheduler raised at first contact with a mismatched prefill): the
    ///   router keeps sending it requests until its health check catches it;
    /// - a prefill (`PrefillCrash`): its transfer workers go down (their queues lost), the
    ///   flows touching it are aborted, its state is lost, and the decodes' heartbeat will
    ///   declare it lost;
    /// - a colocated server (`ColocatedCrash`): the rows of what it held are written, failed.
    pub(super) fn crash(&mut self, c: CoreRef, cause: CrashCause<'_>) {
        match c {
            CoreRef::Decode(d) => {
                let exception = matches!(cause, CrashCause::Exception(_));
                let Some(DecodeCrash {
                    gpus,
                    ranks,
                    failure,
                }) = self.decodes[d].crash(cause)
                else {
                    return;
                };
                if exception {
                    let k = self.dispatch.instance_of(DECODE, d.idx());
                    self.router.decode_died_unseen(k);
                }
                self.sync(c);
                for end in &self.fabric.abort_flows_touching(self.q.now(), &gpus) {
                    self.flow_ended(end);
                }
                self.fabric_timer.sync(&mut self.q, &mut self.fabric);
                self.transfer.decode_down(d, ranks);
                for r in self.reqs.matching(|q| q.decode == d) {
                    self.end(r, Outcome::Failed, Some((failure.kind, &failure.message)));
                }
                self.decodes[d].lose_state(&mut self.q);
                if exception {
                    self.router.arm_health_check(&mut self.q);
                }
            }
            CoreRef::Prefill(p) => {
                let Some(crash) = self.prefills[p].crash() else {
                    return;
                };
                self.transfer.crash(p, &mut self.q);
                self.sync(CoreRef::Prefill(p));
                for end in &self.fabric.abort_flows_touching(self.q.now(), &crash.gpus) {
                    self.flow_ended(end);
                }
                self.fabric_timer.sync(&mut self.q, &mut self.fabric);
                self.prefills[p].lose_state(&mut self.q);
                self.heartbeat.prefill_down(p, &mut self.q);
            }
            CoreRef::Colocated(c) => {
                let Some(crash) = self.colocated[c].crash(c, &mut self.q) else {
                    return;
                };
                self.sync(CoreRef::Colocated(c));
                let slo = self.slo;
                for row in &crash.failed {
                    if let Err(e) = self
                        .collector
                        .finish(row, Some(&crash.message), slo, self.sink)
                    {
                        self.io_error.get_or_insert(e);
                    }
                    self.turn_ended(row);
                }
                self.observe(CoreRef::Colocated(c));
            }
        }
    }

    pub(super) fn on_restart(&mut self, i: InstanceId) {
        match self.core_of(i) {
            CoreRef::Colocated(k) => {
                if self.colocated[k].restart() {
                    self.sync(CoreRef::Colocated(k));
                }
            }
            CoreRef::Prefill(p) => {
                if !self.prefills[p].restart() {
                    return;
                }
                self.transfer.restart(p);
                self.sync(CoreRef::Prefill(p));
                self.heartbeat.prefill_up(p, &mut self.q);
            }
            CoreRef::Decode(d) => {
                if !self.decodes[d].restart() {
                    return;
                }
                self.sync(CoreRef::Decode(d));
                // A restarted decode registers again, which clears its blacklist entries.
                self.transfer.decode_registered(d);
                self.try_prealloc(d);
            }
        }
    }
}
