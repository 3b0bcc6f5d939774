//! sglang's PD components, one file each: [`prefill`] (the prefill server's scheduler and its
//! prefix cache), [`decode`] (prealloc queue, continuous batch, retraction), [`transfer`] (the
//! Mooncake transfer queues, their shards and worker threads, and the session blacklist), the
//! [`router`], HiCache ([`hicache`]) with the shared Mooncake Store ([`kv_store`]), and the
//! decode side's offload to it ([`decode_offload`]). Each owns its state and answers its events; **a component never calls another
//! component** — what crosses from one to another (a freed page that may admit a request, a
//! request that ended) goes through the simulator's `World` (`sim/`), which drains a wake set after every
//! event. See `README.md` beside this file for the request lifecycle.

pub mod abort;
pub mod approx_tree;
pub mod colocated;
pub mod decode;
pub mod decode_offload;
pub mod dp;
pub mod hicache;
pub mod kv_store;
pub mod memory;
pub mod prefill;
pub mod prefix_cache;
pub mod router;
pub mod speculative;
pub mod transfer;

use crate::compute::StepTimes;
use crate::engine::{EventKey, Nanos};
use crate::fabric::{GpuId, NicId};
use crate::vocab::ids::{InstanceId, PoolId};
use memory::KvPool;

/// What every sglang server has, whatever its role.
pub struct Core {
    /// The instance's number in the results.
    pub instance: InstanceId,
    /// Its pool.
    pub pool: PoolId,
    /// GPU of each TP rank.
    pub gpus: Vec<GpuId>,
    /// NIC of each TP rank (its GPU's preferred NIC).
    pub nics: Vec<NicId>,
    /// False between a crash and its restart.
    pub alive: bool,
    /// Step-time model.
    pub step: StepTimes,
    /// `--page-size`, tokens.
    pub page_size: u32,
    /// Whether requests also hold a mamba/GDN state slot.
    pub hybrid: bool,
    /// KV pages, state slots and (on oracle-watched decode instances) ownership.
    pub pages: KvPool,
    /// Requests assigned and not yet done with this instance (least-loaded routing).
    pub outstanding: u32,
    /// Whether a forward is running.
    pub busy: bool,
    /// The pending end of the running forward (cancelled by a crash).
    pub step_key: Option<EventKey>,
    /// Per-second counters for the timeseries.
    pub tick: TickCounters,
}

/// Counters of the current simulated second.
#[derive(Default, Clone, Copy, Debug)]
pub struct TickCounters {
    /// Requests routed here.
    pub arrivals: u64,
    /// Tokens produced (decode) or prompts finished (prefill).
    pub tokens: u64,
    /// Start of the running step, or of the current tick if the step began earlier, ns.
    pub busy_since: Nanos,
    /// Nanoseconds spent computing in the current tick.
    pub busy_ns: u64,
}

impl Core {
    /// A forward starts at `now`.
    pub fn start_busy(&mut self, now: Nanos) {
        self.busy = true;
        self.tick.busy_since = now;
    }

    /// The running forward ended at `now`.
    pub fn end_busy(&mut self, now: Nanos) {
        self.busy = false;
        self.step_key = None;
        self.tick.busy_ns += now - self.tick.busy_since;
    }
}

/// Builders for the components' unit tests: a server core over a plain page pool, and requests.
#[cfg(test)]
pub(crate) mod testkit {
    use super::memory::{KvPool, PageAllocator, Store};
    use super::{Core, TickCounters};
    use crate::compute::{StepModel, StepTimes, calibrated_params};
    use crate::vocab::RequestRow;
    use crate::vocab::ids::{DecodeId, InstanceId, PoolId, PrefillId};
    use crate::vocab::requests::{Req, ReqRef, Requests};

    /// A live, idle Llama-3.1-8B TP1 H100 server with `pages` KV pages of `page_size` tokens.
    pub fn core(pages: u32, page_size: u32) -> Core {
        let gpu = crate::spec::gpu::gpu_preset("h100-sxm").unwrap();
        let model = crate::spec::model::preset("llama-3.1-8b").unwrap();
        Core {
            instance: InstanceId(0),
            pool: PoolId(0),
            gpus: Vec::new(),
            nics: Vec::new(),
            alive: true,
            step: StepTimes::Model(StepModel::new(&gpu, &model, 1, 2, calibrated_params(&gpu))),
            page_size,
            hybrid: false,
            pages: KvPool::new(
                Store::Plain {
                    pages: PageAllocator::new(pages),
                    slots: PageAllocator::new(0),
                    grown: Vec::new(),
                },
                None,
            ),
            outstanding: 0,
            busy: false,
            step_key: None,
            tick: TickCounters::default(),
        }
    }

    /// A request of `input` prompt and `output` generated tokens, just routed to P0/D0.
    pub fn request(reqs: &mut Requests, id: u64, input: u32, output: u32) -> ReqRef {
        reqs.insert(Req::routed(
            id,
            input,
            output,
            (PrefillId(0), DecodeId(0)),
            Vec::new(),
            RequestRow::arrived(id, 0, Some((0, 1)), input, output),
        ))
    }
}
