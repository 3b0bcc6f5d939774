//! Fabric-level properties over random topologies, flow sets and faults:
//! - conservation: every link's byte counter equals the bytes of the flows that crossed it
//!   (retransmissions included), integrated independently from the flows' rates and paths
//!   between events; every flow's goodput + retransmissions equals what it put on the wire;
//! - feasibility: no link carries more than its capacity, a down link carries nothing;
//! - every flow ends exactly once (completed, failed or aborted), with a consistent outcome;
//! - the fast solver against the slow one: after every event, every moving flow's rate equals
//!   the max-min share that `maxmin::reference_rates` (progressive filling from scratch)
//!   computes for the live flows, their paths, caps and the links' current capacities;
//! - determinism: the same case twice gives bit-identical ends.
//!
//! The fabric is driven as the simulator drives it (one timer, `next_due` / `fire_due`),
//! through the harness.

use std::collections::BTreeMap;

use proptest::prelude::*;

use pdsim::fabric::harness::Harness;
use pdsim::fabric::maxmin::{LinkIdx, reference_rates};
use pdsim::fabric::{
    Fabric, FabricParams, FailReason, Fault, FlowEnd, FlowOutcome, GpuId, Link, NicId,
    TopologyConfig, TopologyKind,
};

#[derive(Clone, Debug)]
struct FlowSpec {
    at: u64,
    src: u32,
    dst: u32,
    bytes: u64,
    writes: u64,
    /// An all-to-all flow (DeepEP) instead of a Mooncake batch, where it can be one (other
    /// node, some bytes): it crosses NICs without the GPUs' RDMA links.
    a2a: bool,
}

#[derive(Clone, Debug)]
enum FaultSpec {
    Down(usize),
    Up(usize),
    Flap(u32, u64),
    Degrade(usize, f64),
    Loss(usize, f64),
    Crash(u32),
}

#[derive(Clone, Debug)]
struct Case {
    topo: TopologyConfig,
    params: FabricParams,
    flows: Vec<FlowSpec>,
    faults: Vec<(u64, FaultSpec)>,
}

fn case() -> impl Strategy<Value = Case> {
    let topo = (
        any::<bool>(),
        2u32..=5,
        1u32..=4,
        1u32..=4,
        1u32..=3,
        1.0f64..4.0,
        prop_oneof![Just(50.0), Just(12.5)],
        // NVLink domains of one node (DGX/HGX) or two (trays of a rack, MNNVL).
        1u32..=2,
    )
        .prop_map(
            |(rail, nodes, gpus, nics, per_leaf, oversub, nic, domain)| TopologyConfig {
                nodes,
                gpus_per_node: gpus,
                nics_per_node: nics,
                nic_bytes_per_ns: nic,
                kind: if rail {
                    TopologyKind::Rail
                } else {
                    TopologyKind::LeafSpine
                },
                nodes_per_leaf: per_leaf,
                oversubscription: oversub,
                nvlink_bytes_per_ns: 200.0,
                nodes_per_nvlink_domain: domain,
            },
        );
    let params = (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        0u32..=3,
        prop_oneof![Just(1_000_000u64), Just(30_000_000_000)],
        // The GPUs' engine: the calibrated rate, one below a 12.5 B/ns NIC, or none.
        prop_oneof![Just(23.75), Just(6.0), Just(f64::INFINITY)],
    )
        .prop_map(
            |(latency, wr, eff, retry_cnt, timeout, engine)| FabricParams {
                engine_bytes_per_ns: engine,
                base_latency_ns: if latency { 3_000 } else { 0 },
                batch_overhead_ns: if latency { 20_000 } else { 0 },
                per_wr_ns: if wr { 1000.0 } else { 0.0 },
                nic_efficiency: if eff { 0.366 } else { 1.0 },
                transfer_timeout_ns: timeout,
                retry_cnt,
                local_detect_ns: 1_000,
                remote_detect_ns: 50_000,
                ..FabricParams::default()
            },
        );
    (topo, params).prop_flat_map(|(topo, params)| {
        let gpus = topo.nodes * topo.gpus_per_node;
        let nics = topo.nodes * topo.nics_per_node;
        let flow = (
            0u64..2_000_000,
            0..gpus,
            0..gpus,
            prop_oneof![Just(0u64), 1u64..20_000_000],
            1u64..2_000,
            prop::bool::weighted(0.2),
        )
            .prop_map(|(at, src, dst, bytes, writes, a2a)| FlowSpec {
                at,
                src,
                dst,
                bytes,
                writes,
                a2a,
            });
        // Link indices are drawn in a wide range and reduced modulo the link count in `run`.
        let fault = prop_oneof![
            (0usize..1000).prop_map(FaultSpec::Down),
            (0usize..1000).prop_map(FaultSpec::Up),
            (0..nics, 0u64..1_000_000).prop_map(|(n, d)| FaultSpec::Flap(n, d)),
            (0usize..1000, 0.05f64..=1.0).prop_map(|(l, f)| FaultSpec::Degrade(l, f)),
            (0usize..1000, 0.0f64..0.3).prop_map(|(l, r)| FaultSpec::Loss(l, r)),
            (0..gpus).prop_map(FaultSpec::Crash),
        ];
        (
            Just(topo),
            Just(params),
            prop::collection::vec(flow, 1..40),
            prop::collection::vec((0u64..3_000_000, fault), 0..15),
        )
            .prop_map(|(topo, params, flows, faults)| Case {
                topo,
                params,
                flows,
                faults,
            })
    })
}

fn gpu(g: u32, topo: &TopologyConfig) -> GpuId {
    GpuId::from_global(g, topo.gpus_per_node)
}

/// The fault `spec` describes, in case `c` (link indices are taken modulo the link count).
fn fault(spec: &FaultSpec, c: &Case, links: &[Link]) -> Fault {
    let link = |i: usize| links[i % links.len()];
    match *spec {
        FaultSpec::Down(l) => Fault::LinkDown(link(l)),
        FaultSpec::Up(l) => Fault::LinkUp(link(l)),
        FaultSpec::Flap(n, d) => Fault::NicFlap {
            nic: NicId(n),
            down_ns: d,
        },
        FaultSpec::Degrade(l, fr) => Fault::Degrade {
            link: link(l),
            fraction: fr,
        },
        FaultSpec::Loss(l, r) => Fault::Loss {
            link: link(l),
            rate: r,
        },
        FaultSpec::Crash(g) => {
            // The instance holding GPU g and its neighbour on the node.
            let a = gpu(g, &c.topo);
            let b = GpuId {
                local: (a.local + 1) % c.topo.gpus_per_node,
                ..a
            };
            Fault::Crash { gpus: vec![a, b] }
        }
    }
}

/// Runs the case, checking feasibility, rates against the reference solver and conservation;
/// returns the ends.
fn run(c: &Case) -> Result<Vec<FlowEnd>, TestCaseError> {
    let fabric = Fabric::build(c.topo.clone(), c.params.clone()).unwrap();
    let links: Vec<Link> = fabric.links().collect();
    let pos: BTreeMap<Link, usize> = links.iter().enumerate().map(|(i, &l)| (l, i)).collect();
    let mut h = Harness::new(fabric);
    for (i, f) in c.flows.iter().enumerate() {
        let (src, dst) = (gpu(f.src, &c.topo), gpu(f.dst, &c.topo));
        if f.a2a && src.node != dst.node && f.bytes > 0 {
            // Capped at a few bytes/ns below some NICs' capacity, as DeepEP's flows are.
            h.a2a_at(f.at, src, dst, f.bytes, 30.0, i as u64);
        } else {
            h.start_at(f.at, src, dst, f.bytes, f.writes, i as u64);
        }
    }
    for (at, f) in &c.faults {
        h.fault_at(*at, fault(f, c, &links));
    }

    // The oracle: bytes per link and per flow (by token), integrated from the rates and paths
    // the fabric reports between events; the slack a completion may add (its event time is
    // rounded up to the ns, so the oracle may count up to `rate × 1 ns` too much).
    let mut link_bytes = vec![0.0f64; links.len()];
    let mut link_slack = vec![0.0f64; links.len()];
    let mut wire: BTreeMap<u64, f64> = BTreeMap::new();
    let mut good: BTreeMap<u64, f64> = BTreeMap::new();
    // Per live token: (wire rate, goodput rate, path) as of the last event.
    let mut moving: BTreeMap<u64, (f64, f64, Vec<Link>)> = BTreeMap::new();
    let mut t_prev = 0u64;
    let mut seen_ends = 0;
    while let Some(t) = h.next_time() {
        let dt = (t - t_prev) as f64;
        for (token, (r, g, path)) in &moving {
            for l in path {
                link_bytes[pos[l]] += r * dt;
            }
            *wire.entry(*token).or_default() += r * dt;
            *good.entry(*token).or_default() += g * dt;
        }
        h.step();
        t_prev = t;
        for e in &h.ended[seen_ends..] {
            if e.outcome == FlowOutcome::Completed
                && let Some((r, _, path)) = moving.get(&e.token)
            {
                for l in path {
                    link_slack[pos[l]] += r;
                }
            }
        }
        seen_ends = h.ended.len();
        // Rates and paths until the next event.
        moving.clear();
        let mut load = vec![0.0f64; links.len()];
        let f = &h.fabric;
        let mut shares: Vec<(Vec<LinkIdx>, f64)> = Vec::new();
        let mut rates: Vec<f64> = Vec::new();
        for id in f.live_flow_ids() {
            let path = f.flow_path(id);
            let r = f.flow_rate(id);
            if path.is_empty() {
                continue;
            }
            prop_assert!(r > 0.0, "a moving flow has a positive rate");
            for l in &path {
                load[pos[l]] += r;
            }
            // The fabric's link order is the solver's: position i is LinkIdx(i).
            shares.push((
                path.iter().map(|l| LinkIdx(pos[l] as u32)).collect(),
                f.flow_cap(id),
            ));
            rates.push(r);
            moving.insert(f.flow_token(id), (r, f.flow_goodput_rate(id), path));
        }
        let capacities: Vec<f64> = links.iter().map(|&l| f.link_capacity(l)).collect();
        for (i, want) in reference_rates(&capacities, &shares)
            .into_iter()
            .enumerate()
        {
            prop_assert!(
                (rates[i] - want).abs() <= 1e-9 * want.max(1.0),
                "at {t} ns a flow on {:?} moves at {} B/ns, the reference share is {want}",
                shares[i].0,
                rates[i]
            );
        }
        for (i, &l) in links.iter().enumerate() {
            let cap = f.link_capacity(l);
            prop_assert!(
                load[i] <= cap * (1.0 + 1e-9) + 1e-9,
                "{l:?} carries {} > capacity {cap} at {t} ns",
                load[i]
            );
            if !f.link_is_up(l) {
                prop_assert_eq!(load[i], 0.0, "down link {:?} carries flows", l);
            }
        }
    }

    let now = h.now();
    let f = &mut h.fabric;
    f.settle_all(now);
    for (i, &l) in links.iter().enumerate() {
        let (got, want) = (f.link_bytes(l), link_bytes[i]);
        let tol = 1e-9 * want.max(1.0) + link_slack[i] + 1e-6;
        prop_assert!(
            (got - want).abs() <= tol,
            "{l:?}: fabric counted {got} B, flows crossing it moved {want} B"
        );
        prop_assert!(f.link_retransmitted_bytes(l) <= got * (1.0 + 1e-12));
    }
    for e in &h.ended {
        let w = wire.get(&e.token).copied().unwrap_or(0.0);
        let moved = e.delivered_bytes + e.retransmitted_bytes;
        // A completion may be counted up to 1 ns of wire rate too much by the oracle.
        let slack = if e.outcome == FlowOutcome::Completed {
            1000.0
        } else {
            0.0
        };
        prop_assert!(
            (moved - w).abs() <= 1e-9 * w.max(1.0) + 1e-6 + slack,
            "flow {}: delivered + retransmitted {moved} B, put on the wire {w} B",
            e.token
        );
        let g = good.get(&e.token).copied().unwrap_or(0.0);
        prop_assert!((e.delivered_bytes - g).abs() <= 1e-9 * g.max(1.0) + 1e-6 + slack);
    }
    Ok(h.ended.clone())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn fabric_conservation_feasibility_and_one_end_per_flow(c in case()) {
        let ends = run(&c)?;
        // Every flow ended exactly once.
        let mut tokens: Vec<u64> = ends.iter().map(|e| e.token).collect();
        tokens.sort_unstable();
        let all: Vec<u64> = (0..c.flows.len() as u64).collect();
        prop_assert_eq!(tokens, all);
        for e in &ends {
            let spec = &c.flows[e.token as usize];
            prop_assert_eq!(e.bytes, spec.bytes);
            prop_assert_eq!(e.start_ns, spec.at);
            prop_assert!(e.end_ns >= e.start_ns);
            match e.outcome {
                FlowOutcome::Completed => {
                    prop_assert!((e.delivered_bytes - spec.bytes as f64).abs() < 1e-6);
                }
                FlowOutcome::Failed(FailReason::Timeout) => {
                    prop_assert_eq!(e.end_ns, spec.at + c.params.timeout_ns(spec.bytes));
                }
                FlowOutcome::Failed(_) => {
                    prop_assert!(e.failed_attempts > c.params.retry_cnt);
                }
                FlowOutcome::Aborted => {}
            }
            prop_assert!(e.delivered_bytes <= spec.bytes as f64 + 1e-6);
        }
        // Deterministic.
        prop_assert_eq!(run(&c)?, ends);
    }
}
