//! Faults: fabric faults, instance crashes and restarts, a server killed by an exception that
//! escaped its scheduler loop, the decode heartbeat that notices a dead prefill, and the
//! router's health check that takes a dead server out of rotation (`docs/sglang-pd.md` §2.6,
//! docs/sglang-pd.md §2.7; sglang `CommonKVReceiver` heartbeat and `_handle_node_failure` in
//! `disaggregation/common/conn.py`; `run_scheduler_process` in `managers/scheduler.py`).

use crate::config::FaultAction;
use crate::engine::{NS_PER_S, Nanos};
use crate::layout::PdError;
use crate::sglang::router::HEALTH_CHECK_INTERVAL_NS;
use crate::vocab::ErrorKind;

use super::World;
use crate::vocab::event::Event;
use crate::vocab::ids::{DecodeId, InstanceId, PrefillId};
use crate::vocab::requests::KvPoll;

/// What `run_scheduler_process` logs before it sends SIGQUIT to its parent and the server
/// exits (`managers/scheduler.py`): `f"Scheduler hit an exception: {traceback}"`. pdsim fills
/// `{traceback}` with the traceback's last line, `RuntimeError: {e}` (the frames above it are
/// not modelled).
pub fn scheduler_hit_an_exception(e: &str) -> String {
    format!("Scheduler hit an exception: RuntimeError: {e}")
}

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
                self.crash(instance);
                if let Some(r) = restart_ns {
                    self.q.schedule_in(r, Event::Restart { instance });
                }
            }
        }
    }

    /// Decode `d`'s scheduler raised `e` (decode's first contact with a prefill whose page size
    /// or KV dtype differs: `try_ensure_parallel_info` inside `_ensure_prefill_info`, with no
    /// try/except on the way up): the scheduler process logs "Scheduler hit an exception",
    /// SIGQUITs its parent and the whole server exits (docs/sglang-pd.md §2.1). Every request it holds is lost
    /// with it (`server_crashed`); the router keeps sending it requests until its health check
    /// catches it.
    pub(super) fn server_died(&mut self, d: DecodeId, e: &PdError) {
        if !self.decodes[d].core.alive {
            return;
        }
        let k = self.dispatch.instance_of(super::dispatch::DECODE, d.idx());
        self.router.decode_died_unseen(k);
        let msg = scheduler_hit_an_exception(&e.message);
        self.crash_as(
            self.decodes[d].core.instance,
            Some((ErrorKind::ServerCrashed, msg)),
        );
        if !self.health_check_pending {
            self.health_check_pending = true;
            let now = self.q.now();
            let next = (now / HEALTH_CHECK_INTERVAL_NS + 1) * HEALTH_CHECK_INTERVAL_NS;
            self.q.schedule_at(next, Event::RouterHealthCheck);
        }
    }

    /// Why a request routed to `(p, d)` fails at once: one of them is a server that died under
    /// an exception and is still in rotation. `None` when both are up.
    pub(super) fn dead_pick(&self, p: PrefillId, d: DecodeId) -> Option<String> {
        let (pc, dc) = (&self.prefills[p].core, &self.decodes[d].core);
        let dead = if !dc.alive {
            format!("decode server {}", self.endpoints[d].host())
        } else if !pc.alive {
            format!("prefill server {}", bootstrap_addr(p))
        } else {
            return None;
        };
        Some(format!(
            "The router sent the request to {dead}, which is dead: its health check has not yet taken it out of rotation"
        ))
    }

    /// The router's health check: a dead server still in rotation fails one more check; the
    /// next round is scheduled while any remains.
    pub(super) fn on_router_health_check(&mut self) {
        if self.router.health_check() {
            self.q
                .schedule_in(HEALTH_CHECK_INTERVAL_NS, Event::RouterHealthCheck);
        } else {
            self.health_check_pending = false;
        }
    }

    /// An injected crash (see [`World::crash_as`]).
    fn crash(&mut self, i: InstanceId) {
        if let Some(c) = self.colocated_of(i) {
            self.crash_colocated(c);
            return;
        }
        self.crash_as(i, None);
    }

    /// An instance crashes: its flows are aborted and its state is lost. A decode's requests
    /// fail at once — `peer_lost` for an injected crash (the prefill's next transfer to it
    /// returns −1 and blacklists it; its batch is gone), or `cause` when its own server died
    /// under an exception. A prefill's rooms are failed by the decodes' heartbeat
    /// (`HEARTBEAT_INTERVAL` × `HEARTBEAT_MAX_FAILURE` misses) as `peer_lost`.
    fn crash_as(&mut self, i: InstanceId, cause: Option<(ErrorKind, String)>) {
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
            let ranks = self.endpoints[d].ports.len() as u32;
            for t in self.transfers.iter_mut() {
                t.blacklist_everywhere(d, ranks);
            }
            let (kind, msg) = cause.unwrap_or_else(|| {
                let host = self.endpoints[d].host();
                (
                    ErrorKind::PeerLost,
                    format!("Lost connection with decode instance {host}: it crashed"),
                )
            });
            for r in self.reqs.matching(|q| q.decode == d) {
                self.fail(r, kind, &msg);
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
            self.fail(r, ErrorKind::PeerLost, &lost_prefill(&addr));
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
                    t.unblacklist(d);
                }
                self.try_prealloc(d);
            }
        }
    }
}

/// `_handle_node_failure`'s failure reason (`common/conn.py`):
/// `f"Lost connection with prefill instance (bootstrap_addr: {failed_bootstrap_addr})"`.
pub fn lost_prefill(bootstrap_addr: &str) -> String {
    format!("Lost connection with prefill instance (bootstrap_addr: {bootstrap_addr})")
}

/// The bootstrap address of prefill instance `p` (prefills come first in the global
/// numbering, so its instance number is its prefill index), for messages.
fn bootstrap_addr(p: PrefillId) -> String {
    format!(
        "10.0.{}.{}:{}",
        p.0 / 256,
        p.0 % 256,
        super::transfer::BOOTSTRAP_PORT
    )
}
