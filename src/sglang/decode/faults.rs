//! A decode server going down and coming back: an injected crash, the exception of its first
//! contact with a mismatched prefill that kills it, and its restart (`docs/sglang-pd.md` §2.1,
//! §2.6, §11.1).
//!
//! A crash is two calls, because the requests it fails must leave the batch while the batch
//! is still there: [`DecodeServer::crash`] takes the server down and says what that does
//! beyond it ([`DecodeCrash`]: the flows to abort, the sessions every prefill blacklists, how
//! each request routed here fails); `World` applies that, then [`DecodeServer::lose_state`]
//! drops the running step and the queues.

use crate::engine::EventQueue;
use crate::fabric::GpuId;
use crate::layout::{PairPlan, PdError};
use crate::vocab::ErrorKind;
use crate::vocab::event::Event;

use super::DecodeServer;
use crate::sglang::Failure;
use crate::sglang::transfer::host_of;

/// What `run_scheduler_process` logs before it sends SIGQUIT to its parent and the server
/// exits (`managers/scheduler.py`): `f"Scheduler hit an exception: {traceback}"`. pdsim fills
/// `{traceback}` with the traceback's last line, `RuntimeError: {e}` (the frames above it are
/// not modelled).
pub fn scheduler_hit_an_exception(e: &str) -> String {
    format!("Scheduler hit an exception: RuntimeError: {e}")
}

/// Why a decode server goes down.
#[derive(Clone, Copy, Debug)]
pub enum CrashCause<'e> {
    /// An injected `instance_crash` fault.
    Injected,
    /// Its scheduler raised this and nothing caught it (`run_scheduler_process`).
    Exception(&'e PdError),
}

/// What a decode crash does beyond the server, for `World` to apply in this order: abort the
/// flows touching `gpus`, blacklist the server's `ranks` sessions on every prefill, fail every
/// request routed here with `failure`.
#[derive(Debug)]
pub struct DecodeCrash {
    /// The server's GPUs.
    pub gpus: Vec<GpuId>,
    /// Its TP ranks (one Mooncake session each).
    pub ranks: u32,
    /// How each request routed here fails: `peer_lost` for an injected crash (the prefill's
    /// next transfer to it returns −1; its batch is gone), `server_crashed` with
    /// "Scheduler hit an exception" when its own scheduler died.
    pub failure: Failure,
}

impl DecodeServer {
    /// Decode's first contact with a prefill (`_ensure_prefill_info` in the decode event loop
    /// calls `try_ensure_parallel_info`, sglang `disaggregation/decode.py` and
    /// `common/conn.py` at 0005973a): the page-size and KV-dtype checks of `plan`
    /// (`layout::checks::first_contact`). Their `RuntimeError` has no try/except on the way up:
    /// the caller crashes this server with [`CrashCause::Exception`].
    pub fn ensure_prefill_info(&self, plan: &PairPlan) -> Result<(), PdError> {
        match plan.first_contact() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// The server goes down for `cause`: dead first, so that nothing the crash sets off starts
    /// new work on it. `None` if it was already down.
    pub fn crash(&mut self, cause: CrashCause<'_>) -> Option<DecodeCrash> {
        if !self.core.go_down() {
            return None;
        }
        let failure = match cause {
            CrashCause::Injected => Failure::new(
                ErrorKind::PeerLost,
                format!(
                    "Lost connection with decode instance {}: it crashed",
                    host_of(self.core.instance)
                ),
            ),
            CrashCause::Exception(e) => Failure::new(
                ErrorKind::ServerCrashed,
                scheduler_hit_an_exception(&e.message),
            ),
        };
        Some(DecodeCrash {
            gpus: self.core.gpus.clone(),
            ranks: self.ports.len() as u32,
            failure,
        })
    }

    /// After its requests failed: the running step, both queues, the offload's pending work
    /// and speculative state are lost.
    pub fn lose_state(&mut self, q: &mut EventQueue<Event>) {
        self.virtual_left = 0;
        self.planned.clear();
        self.next_planned = 0;
        if let Some(k) = self.core.step_key.take() {
            q.cancel(k);
        }
        self.core.busy = false;
        self.prealloc.clear();
        self.ready.clear();
        if let Some(o) = self.offload.as_mut() {
            o.crash();
        }
        if let Some(s) = self.spec.as_deref_mut() {
            s.clear();
        }
        self.forget_caches();
    }

    /// A new process on this slot (a restart, an autoscaler's launch): the decode radix tree
    /// starts empty, its pages back in the pool.
    pub fn forget_caches(&mut self) {
        if let Some(t) = self.radix.as_deref_mut() {
            t.crash(&mut self.core.pages);
        }
    }

    /// The server is back, empty; false if it was up. It registers with the prefills again,
    /// which clears their blacklist entries for it (the caller's part).
    pub fn restart(&mut self) -> bool {
        self.core.come_up()
    }
}
