//! DeepEP's inter-node all-to-all as fabric flows (`docs/performance-model.md` §7.3): the
//! component that owns the ring of senders, the forwards waiting for their flows and the
//! per-pool totals. At a forward's start on a server whose all-to-all crosses the fabric, the
//! server describes the forward ([`take_forward`]: its price, its MoE parts, its end taken
//! back; `PrefillServer::a2a_forward`, `DecodeServer::a2a_forward`) and `World`
//! (`sim/transfer.rs`) hands that to [`A2aFlows::start`]; when the flows land, the component
//! pushes the forward's re-priced end ([`Effect::ForwardEnds`]) and `World` applies it.
//!
//! An expert-parallel instance that spans nodes dispatches each token to its experts' GPUs and
//! combines the results back at every MoE layer; the copies that leave a node cross the RDMA
//! NICs — the same NICs that carry the KV transfers of PD disaggregation. pdsim puts that
//! traffic on the fabric as **one aggregated flow per GPU per forward**: at the start of a
//! forward of a DP rank, each of its GPUs sends the forward's inter-node dispatch + combine
//! bytes ([`crate::compute::moe::MoeTime::rdma_bytes_per_gpu`], summed over the layers) from
//! its NIC to the GPU of the same local index on the next node of the instance (a ring over
//! the instance's nodes). Why one flow is a faithful aggregation:
//!
//! * **Per NIC, the load is the real one.** Routing is uniform over the instance's GPUs and
//!   every rank carries the same batch (`compute::moe`), so in the all-to-all every NIC sends
//!   and receives the same bytes per forward. The ring gives every NIC exactly one outgoing
//!   and one incoming aggregated flow of that size: what each NIC's TX and RX carry is what
//!   DeepEP puts on it. DeepEP's normal kernels send RDMA only between same-index GPUs
//!   (rail-aligned, then NVLink inside the node), which is the ring's path too.
//! * **Per layer vs per forward.** The layers' all-to-alls follow one another within the
//!   forward; what a concurrent KV transfer sees is the NIC busy with all-to-all for the
//!   forward's communication time, which the aggregate reproduces at the same average rate.
//!   What it smooths away is the gaps between layers (the KV flow gets the whole NIC there
//!   rather than a share): an approximation in favour of KV, stated here. Per-layer flows
//!   would cost 2 × layers × GPUs fabric mutations per forward (58 layers on DeepSeek-V3).
//!
//! The forward cannot end before its communication does. The component priced the forward at
//! the uncontended DeepEP rate (`compute::moe`) and scheduled its end; a server whose
//! all-to-all crosses the fabric hands each forward it starts on
//! (`crate::sglang::Effect::ForwardStarted`), and `World` has it describe the forward with
//! that end taken back ([`take_forward`]) and starts the flows; when the last one lands
//! [`A2aFlows`] re-prices the MoE layers with the fabric's time for the NIC leg
//! ([`crate::compute::moe::MoeTime::total_with_rdma_s`]: NVLink and NIC legs concurrent; under
//! two-batch overlap the shorter of compute and communication hidden as before) and schedules
//! the end. Uncontended, the fabric takes the priced time (the flows are capped at DeepEP's
//! RDMA rate, or at the rate the measured DeepEP tables leave: `MoeTime::a2a_scale`), so the
//! step is the same; contended, it grows — and so do the KV transfers
//! sharing those NICs.
//!
//! Measured step profiles keep their times (they already contain whatever communication the
//! measured deployment did); colocated servers keep the analytic price (no KV transfers to
//! share with); `fabric.a2a_flows = false` keeps it everywhere (the counterfactual).

use std::collections::BTreeMap;

use super::{Core, Effect, FabricTimer};
use crate::compute::moe::{A2A_RDMA_EFFICIENCY, MoeTime};
use crate::config::{Role, Scenario};
use crate::engine::{EventKey, EventQueue, Nanos};
use crate::fabric::GpuId;
use crate::metrics::summary::A2aSummary;
use crate::spec::server::A2aBackend;
use crate::vocab::event::Event;
use crate::vocab::flow::FlowTag;
use crate::vocab::ids::InstanceId;

type Fabric = crate::fabric::Fabric<FlowTag>;

/// A forward waiting for its all-to-all.
#[derive(Clone, Debug)]
struct Pending {
    /// When the forward started, ns.
    start: Nanos,
    /// Its analytic length (uncontended all-to-all), ns.
    dt: Nanos,
    /// Its MoE layers' cost, with the uncontended NIC leg, each with how many times the step
    /// runs it: one plain forward, or a speculative step's draft, verify and draft-extend
    /// forwards (`SpecStepModel::moe_parts`).
    parts: Vec<(MoeTime, f64)>,
    /// The server's pool (an index into the scenario's pools), for its totals.
    pool: usize,
    /// Flows still moving.
    left: u32,
    /// The event that ends the forward.
    done: Event,
}

/// Which GPUs send all-to-all over the fabric, and the forwards waiting for theirs.
#[derive(Default)]
pub struct A2aFlows {
    /// Each sending GPU's ring peer: the same local index on the instance's next node.
    peer: BTreeMap<GpuId, GpuId>,
    /// DeepEP's RDMA rate per GPU, bytes/ns: the cap of one flow.
    cap: f64,
    /// Forwards waiting, by instance number.
    pending: BTreeMap<u32, Pending>,
    /// Per pool: forwards whose all-to-all ran on the fabric, their NIC legs on the fabric
    /// summed (ns), and the same at the uncontended rate (ns).
    totals: BTreeMap<usize, (u64, u128, u128)>,
}

impl A2aFlows {
    /// The all-to-all senders of `sc` placed on `gpus` (`gpus[instance][rank]`, pools in
    /// order), with `nic_bytes_per_s_per_gpu` of NIC per GPU (bytes/s).
    pub fn new(sc: &Scenario, gpus: &[Vec<GpuId>], nic_bytes_per_s_per_gpu: f64) -> Self {
        let mut peer = BTreeMap::new();
        let mut placed = 0usize;
        for pool in &sc.pools {
            let on_fabric = sc.fabric.a2a_flows
                && pool.role != Role::Colocated
                && pool.step_times.is_none()
                && pool.parallel.ep_size > 1
                && pool.parallel.moe_a2a_backend == A2aBackend::Deepep
                && pool.model.moe.is_some();
            // The NIC legs run between NVLink domains: nodes, or the trays of an NVL72 rack.
            let npd = (sc.nvlink_domain_gpus / sc.gpus_per_node.max(1)).max(1);
            for inst in &gpus[placed..placed + pool.instances as usize] {
                if on_fabric {
                    ring(inst, npd, &mut peer);
                }
            }
            placed += pool.instances as usize;
        }
        Self {
            peer,
            // Bytes/s to bytes/ns.
            cap: nic_bytes_per_s_per_gpu / 1e9 * A2A_RDMA_EFFICIENCY,
            ..Self::default()
        }
    }

    /// The run's figures for `summary.json`: one row per pool whose forwards' all-to-all ran
    /// on the fabric.
    pub fn summary(&self, sc: &Scenario) -> Vec<A2aSummary> {
        self.totals
            .iter()
            .map(|(&pool, &(n, fabric, uncontended))| {
                let n = n.max(1) as f64;
                let (f, u) = (fabric as f64 / n / 1e6, uncontended as f64 / n / 1e6);
                A2aSummary {
                    pool: sc.pools[pool].name.clone(),
                    forwards: n as u64,
                    fabric_ms_mean: f,
                    uncontended_ms_mean: u,
                    slowdown: f / u.max(1e-12) - 1.0,
                }
            })
            .collect()
    }

    /// Whether the forwards of a server on `gpus` put all-to-all bytes on the fabric: the
    /// test that decides whether a step may be coalesced with the next (one that puts bytes
    /// on the fabric may not: its end depends on the flows).
    pub fn on_fabric(&self, gpus: &[GpuId]) -> bool {
        gpus.first().is_some_and(|g| self.peer.contains_key(g))
    }
}

/// Adds the ring peers of one instance's GPUs when it spans NVLink domains of `npd` nodes
/// each (1: every node is its own domain): each GPU sends to the GPU at its own place (node
/// within the domain, index within the node) in the instance's next domain.
fn ring(inst: &[GpuId], npd: u32, peer: &mut BTreeMap<GpuId, GpuId>) {
    let mut domains: Vec<u32> = inst.iter().map(|g| g.node / npd).collect();
    domains.sort_unstable();
    domains.dedup();
    if domains.len() < 2 {
        return;
    }
    for &g in inst {
        let at = domains
            .binary_search(&(g.node / npd))
            .expect("its own domain");
        let next = domains[(at + 1) % domains.len()];
        let same = GpuId {
            node: next * npd + g.node % npd,
            local: g.local,
        };
        // Whole domains per instance: the same place is there; otherwise the domain's first
        // GPU of the instance.
        let to = if inst.contains(&same) {
            same
        } else {
            *inst
                .iter()
                .find(|h| h.node / npd == next)
                .expect("a GPU there")
        };
        peer.insert(g, to);
    }
}

/// A forward whose all-to-all goes on the fabric, its end taken back ([`take_forward`]).
pub struct Forward<'a> {
    /// The server's instance number.
    pub instance: u32,
    /// Its pool (an index into the scenario's pools).
    pub pool: usize,
    /// Its GPUs, each sending `bytes` to its ring peer.
    pub gpus: &'a [GpuId],
    /// When the forward started, ns.
    pub start: Nanos,
    /// Its analytic length (uncontended all-to-all), ns.
    pub dt: Nanos,
    /// Its MoE layers' cost at the uncontended rate, each with how many times it runs.
    pub parts: Vec<(MoeTime, f64)>,
    /// The event that ends it once the flows land.
    pub done: Event,
    /// Inter-node dispatch + combine bytes per GPU over the forward's layers.
    pub bytes: u64,
}

/// The forward server `core` started at `now` if it started one (its `step_key` was
/// `before`, it is now another) and it is up: priced `dt`, ended by `done`, with its MoE
/// layers — the target's forward of `tokens` (`prefill` or a decode step over `ctx` context
/// tokens), and `spec`'s parts when a speculative step or a draft prefill brings more
/// (`None`: the target's forward alone; for a decode step the parts are its whole step). If
/// it moves bytes across the fabric its end is taken back (the flows' landing sets it) and
/// it is returned for [`A2aFlows::start`]; otherwise nothing changes.
pub fn take_forward<'a>(
    core: &'a mut Core,
    (before, q): (Option<EventKey>, &mut EventQueue<Event>),
    (now, dt, done): (Nanos, Nanos, Event),
    (tokens, prefill, ctx): (u64, bool, u64),
    spec: Option<Vec<(MoeTime, f64)>>,
) -> Option<Forward<'a>> {
    let key = core
        .step_key
        .filter(|&k| Some(k) != before && core.alive())?;
    let parts: Vec<(MoeTime, f64)> = match spec {
        None => vec![(core.step.moe_time(tokens, prefill, ctx)?, 1.0)],
        Some(mut extra) => {
            // A speculative prefill also runs the target's forward; a decode step's parts
            // are its whole step.
            if prefill && let Some(moe) = core.step.moe_time(tokens, prefill, ctx) {
                extra.insert(0, (moe, 1.0));
            }
            extra
        }
    };
    let bytes: f64 = parts.iter().map(|(m, w)| w * m.rdma_bytes_per_gpu).sum();
    let bytes = bytes.round() as u64;
    if bytes == 0 {
        return None;
    }
    debug_assert_eq!(core.step_key, Some(key));
    core.take_back_forward_end(q);
    Some(Forward {
        instance: core.instance.0,
        pool: core.pool.idx(),
        gpus: &core.gpus,
        start: now,
        dt,
        parts,
        done,
        bytes,
    })
}

impl A2aFlows {
    /// Starts the all-to-all of forward `f` (its end taken back, [`take_forward`]): `f.bytes`
    /// per GPU to its ring peer; `f.done` ends it once the flows land
    /// ([`A2aFlows::flow_ended`]).
    pub fn start(
        &mut self,
        (q, fabric, timer): (&mut EventQueue<Event>, &mut Fabric, &mut FabricTimer),
        f: Forward<'_>,
    ) {
        let Forward {
            instance,
            pool,
            gpus,
            start,
            dt,
            parts,
            done,
            bytes,
        } = f;
        // Legs priced from measured DeepEP tables run at the rate those leave (the parts'
        // bytes over their scaled times); analytic legs at DeepEP's RDMA rate, exactly.
        let cap = if parts.iter().any(|(m, _)| m.a2a_scale.is_some()) {
            let (b, scaled) = parts.iter().fold((0.0, 0.0), |(b, s), (m, w)| {
                let x = w * m.rdma_bytes_per_gpu;
                (b + x, s + x * m.a2a_scale.unwrap_or(1.0))
            });
            if scaled > 0.0 {
                self.cap * b / scaled
            } else {
                self.cap
            }
        } else {
            self.cap
        };
        for &g in gpus {
            let to = self.peer[&g];
            fabric.start_a2a(start, g, to, bytes, cap, FlowTag::A2a(InstanceId(instance)));
        }
        let left = gpus.len() as u32;
        let old = self.pending.insert(
            instance,
            Pending {
                start,
                dt,
                parts,
                pool,
                left,
                done,
            },
        );
        debug_assert!(old.is_none(), "one forward at a time per server");
        timer.sync(q, fabric);
    }

    /// One all-to-all flow of instance `i` ended at `end_ns` (the clock at `now`), its server
    /// `alive` or not. When its forward's last flow has, the forward ends at its re-priced time
    /// ([`Effect::ForwardEnds`]); a crashed server's forward is dropped (its flows were aborted
    /// by the crash). A flow that failed or was aborted because its peer crashed ends the
    /// communication where it stopped: DeepEP's timeout is not modelled.
    pub fn flow_ended(
        &mut self,
        i: InstanceId,
        (end_ns, now): (Nanos, Nanos),
        alive: bool,
        fx: &mut Vec<Effect>,
    ) {
        let Some(p) = self.pending.get_mut(&i.0) else {
            return;
        };
        p.left -= 1;
        if p.left > 0 {
            return;
        }
        let p = self.pending.remove(&i.0).expect("present");
        if !alive {
            return;
        }
        let (at, done) = self.reprice(p, end_ns, now);
        fx.push(Effect::ForwardEnds {
            instance: i,
            at,
            done,
        });
    }

    /// When landed forward `p` ends, its last flow having ended at `end_ns` and the clock at
    /// `now`: the MoE layers re-priced with the fabric's time for the NIC leg (never before
    /// now), and the event that ends it. Counted in its pool's totals.
    fn reprice(&mut self, p: Pending, end_ns: Nanos, now: Nanos) -> (Nanos, Event) {
        let fabric_ns = end_ns.max(now) - p.start;
        let fabric_s = fabric_ns as f64 / 1e9;
        let (delta, uncontended_s) = match p.parts.as_slice() {
            // One forward: its MoE layers re-priced with the fabric's NIC leg.
            [(moe, w)] if *w == 1.0 => (moe.total_with_rdma_s(fabric_s) - moe.total_s, moe.rdma_s),
            // Several (a speculative step): the aggregated flow's time shared out over them
            // as their uncontended NIC legs are, each re-priced as its own composition.
            parts => {
                let all: f64 = parts.iter().map(|(m, w)| w * m.rdma_s).sum();
                let delta = parts
                    .iter()
                    .filter(|(m, _)| m.rdma_s > 0.0)
                    .map(|(m, w)| w * (m.total_with_rdma_s(fabric_s * m.rdma_s / all) - m.total_s))
                    .sum();
                (delta, all)
            }
        };
        let at = (p.start + p.dt)
            .saturating_add_signed((delta * 1e9).round() as i64)
            .max(now);
        let t = self.totals.entry(p.pool).or_default();
        t.0 += 1;
        t.1 += u128::from(fabric_ns);
        t.2 += (uncontended_s * 1e9).round() as u128;
        (at, p.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(node: u32, local: u32) -> GpuId {
        GpuId { node, local }
    }

    #[test]
    fn each_gpu_sends_to_its_index_on_the_next_node_of_its_instance() {
        // An instance on nodes 2..5 (3 nodes × 2 GPUs): a ring 2 → 3 → 4 → 2 per index.
        let inst: Vec<GpuId> = (2..5).flat_map(|n| [gpu(n, 0), gpu(n, 1)]).collect();
        let mut peer = BTreeMap::new();
        ring(&inst, 1, &mut peer);
        assert_eq!(peer[&gpu(2, 0)], gpu(3, 0));
        assert_eq!(peer[&gpu(3, 1)], gpu(4, 1));
        assert_eq!(peer[&gpu(4, 1)], gpu(2, 1));
        // Every GPU receives exactly one aggregate: the ring is a permutation.
        let mut dst: Vec<GpuId> = peer.values().copied().collect();
        dst.sort_unstable();
        assert_eq!(dst, inst);
        // Within one node: nothing on the NICs.
        let mut none = BTreeMap::new();
        ring(&[gpu(0, 0), gpu(0, 1)], 1, &mut none);
        assert!(none.is_empty());
        // The same nodes in NVLink domains of 2 nodes each ({2, 3} and {4}): only the legs
        // between the two domains leave NVLink.
        let mut two = BTreeMap::new();
        ring(&inst, 2, &mut two);
        assert_eq!(two[&gpu(2, 0)], gpu(4, 0));
        assert_eq!(
            two[&gpu(3, 1)],
            gpu(4, 0),
            "no tray 5 in the instance: the domain's first"
        );
        assert_eq!(two[&gpu(4, 1)], gpu(2, 1));
        // An instance inside one NVL72-like domain of 18 nodes puts nothing on the NICs.
        let mut rack = BTreeMap::new();
        ring(&inst, 18, &mut rack);
        assert!(rack.is_empty());
        let flows = A2aFlows {
            peer,
            ..A2aFlows::default()
        };
        assert!(flows.on_fabric(&[gpu(3, 0)]));
        assert!(!flows.on_fabric(&[gpu(0, 0)]));
    }
}
