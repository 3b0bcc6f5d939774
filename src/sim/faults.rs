//! Faults: fabric faults, instance crashes and restarts, and the decode heartbeat that notices a
//! dead prefill (`docs/sglang-pd.md` §2.6; sglang `CommonKVReceiver` heartbeat and
//! `_handle_node_failure` in `disaggregation/common/conn.py`).

use crate::config::FaultAction;
use crate::engine::{NS_PER_S, Nanos};
use crate::metrics::ErrorKind;

use super::World;
use super::event::Event;
use super::ids::{InstanceId, PrefillId};
use super::requests::KvPoll;

/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL` (5 s), in ns.
const HEARTBEAT_INTERVAL_NS: Nanos = 5 * NS_PER_S;
/// sglang's `SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE`.
const HEARTBEAT_MAX_FAILURE: u64 = 2;

impl World<'_> {
    pub(super) fn on_fault(&mut self, index: usize) {
        let now = self.q.now();
        match self.sc.faults[index].action.clone() {
            FaultAction::Fabric(f) => {
                let effect = self.fabric.apply_fault(now, &f);
                for end in &effect.ended {
                    self.flow_ended(end);
                }
                self.fabric_sync();
            }
            FaultAction::Crash {
                instance,
                restart_ns,
            } => {
                let instance = InstanceId(instance);
                self.crash(instance);
                if let Some(r) = restart_ns {
                    self.q.schedule_in(r, Event::Restart { instance });
                }
            }
        }
    }

    /// An instance crashes: its flows are aborted and its state is lost. A decode's requests
    /// fail at once (the prefill's next transfer to it returns −1 and blacklists it; its batch
    /// is gone). A prefill's rooms are failed by the decodes' heartbeat (`HEARTBEAT_INTERVAL`
    /// × `HEARTBEAT_MAX_FAILURE` misses) as `peer_lost`.
    fn crash(&mut self, i: InstanceId) {
        if let Some(c) = self.colocated_of(i) {
            self.crash_colocated(c);
            return;
        }
        let now = self.q.now();
        let role = self.role_of(i);
        let core = match role {
            Ok(p) => &mut self.prefills[p].core,
            Err(d) => &mut self.decodes[d].core,
        };
        if !core.alive {
            return;
        }
        // Dead first, so that nothing the aborts set off starts new work on it.
        core.alive = false;
        let gpus = core.gpus.clone();
        match role {
            Ok(p) => self.sync_prefill(p),
            Err(d) => self.sync_decode(d),
        }
        let ended = self.fabric.abort_flows_touching(now, &gpus);
        for end in &ended {
            self.flow_ended(end);
        }
        self.fabric_sync();
        if let Err(d) = role {
            for t in self.transfers.iter_mut() {
                t.blacklist.insert(d);
            }
            let session = self.endpoints[d].session();
            for r in self.reqs.matching(|q| q.decode == d) {
                let msg = format!("Lost connection with decode instance {session}: it crashed");
                self.fail(r, ErrorKind::PeerLost, &msg);
            }
        }
        // Its running step, queues and transfer workers are lost.
        match role {
            Err(d) => self.decodes[d].crash(&mut self.q),
            Ok(p) => {
                self.prefills[p].crash(&mut self.q);
                self.transfers[p].crash(&mut self.q);
                // Heartbeats go out every HEARTBEAT_INTERVAL_NS from time 0; the second one to
                // miss marks the prefill dead.
                let next = now.div_ceil(HEARTBEAT_INTERVAL_NS).max(1) * HEARTBEAT_INTERVAL_NS;
                let detect = next + (HEARTBEAT_MAX_FAILURE - 1) * HEARTBEAT_INTERVAL_NS;
                let key = self
                    .q
                    .schedule_keyed(detect, Event::HeartbeatLost { prefill: p });
                if let Some(old) = self.heartbeat[p].replace(key) {
                    self.q.cancel(old);
                }
            }
        }
    }

    /// `_handle_node_failure`: every room of the dead prefill not yet Success fails.
    pub(super) fn on_heartbeat_lost(&mut self, p: PrefillId) {
        self.heartbeat[p] = None;
        let addr = bootstrap_addr(p);
        for r in self
            .reqs
            .matching(|q| q.prefill == p && q.receiver != KvPoll::Success)
        {
            self.fail(
                r,
                ErrorKind::PeerLost,
                &format!("Lost connection with prefill instance {addr}"),
            );
        }
    }

    pub(super) fn on_restart(&mut self, i: InstanceId) {
        if let Some(c) = self.colocated_of(i) {
            self.restart_colocated(c);
            return;
        }
        match self.role_of(i) {
            Ok(p) => {
                if self.prefills[p].core.alive {
                    return;
                }
                self.prefills[p].core.alive = true;
                self.sync_prefill(p);
                // Back before the heartbeat gave up: the decodes never notice.
                if let Some(k) = self.heartbeat[p].take() {
                    self.q.cancel(k);
                }
            }
            Err(d) => {
                if self.decodes[d].core.alive {
                    return;
                }
                self.decodes[d].core.alive = true;
                self.sync_decode(d);
                // A restarted decode registers again, which clears its blacklist entries.
                for t in self.transfers.iter_mut() {
                    t.blacklist.remove(&d);
                }
                self.try_prealloc(d);
            }
        }
    }
}

/// The bootstrap address of prefill instance `p` (prefills come first in the global
/// numbering, so its instance number is its prefill index), for messages.
fn bootstrap_addr(p: PrefillId) -> String {
    format!("10.0.{}.{}:8998", p.0 / 256, p.0 % 256)
}
