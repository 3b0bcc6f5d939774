//! Bandwidth sharing computed by hand: each expected time and rate is derived in a comment.

use pdsim::fabric::harness::{Harness, Stepped};
use pdsim::fabric::{
    Fabric, FabricParams, FlowId, FlowOutcome, FlowPhase, GpuId, Link, NicId, TopologyConfig,
    TopologyKind,
};

fn gpu(node: u32, local: u32) -> GpuId {
    GpuId { node, local }
}

fn ideal(topo: TopologyConfig) -> Harness {
    Harness::new(Fabric::build(topo, FabricParams::ideal()).unwrap())
}

/// Runs to the end and returns `(token, end_ns)` in token order; every flow must complete.
fn ends(h: &mut Harness) -> Vec<(u64, u64)> {
    h.run();
    let mut v: Vec<_> = h
        .ended
        .iter()
        .map(|e| {
            assert_eq!(e.outcome, FlowOutcome::Completed, "{e:?}");
            (e.token, e.end_ns)
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn fabric_two_flows_on_one_nic_get_half_each() {
    // Two GPUs share node 0's only NIC (50 B/ns); each sends 5000 B to its own GPU on node 1.
    let mut h = ideal(TopologyConfig {
        nodes: 2,
        gpus_per_node: 2,
        nics_per_node: 1,
        ..Default::default()
    });
    h.start_at(0, gpu(0, 0), gpu(1, 0), 5000, 1, 1);
    h.start_at(0, gpu(0, 1), gpu(1, 1), 5000, 1, 2);
    h.step();
    h.step();
    for f in h.fabric.live_flow_ids().collect::<Vec<_>>() {
        assert_eq!(h.fabric.flow_phase(f), FlowPhase::Latency);
    }
    // Latency 0: the fabric's timer fires at 0 ns and moves both flows onto the NIC.
    h.run_until(0);
    let rates: Vec<f64> = h
        .fabric
        .live_flow_ids()
        .map(|f| h.fabric.flow_rate(f))
        .collect();
    assert_eq!(rates, vec![25.0, 25.0]);
    // 5000 B at 25 B/ns = 200 ns each.
    assert_eq!(ends(&mut h), vec![(1, 200), (2, 200)]);
    assert_eq!(h.fabric.nic_bytes(NicId(0)), (10_000.0, 0.0));
    assert_eq!(h.fabric.nic_bytes(NicId(1)), (0.0, 10_000.0));
}

#[test]
fn fabric_a_flow_that_ends_frees_its_bandwidth_at_that_instant() {
    // Both leave node 0's one NIC: a = 1000 B, b = 3000 B. Shared: 25 B/ns each; a ends at
    // 1000 / 25 = 40 ns, when b has 2000 B left, which it moves at 50 B/ns: 40 ns more.
    let mut h = ideal(TopologyConfig {
        nodes: 2,
        gpus_per_node: 2,
        nics_per_node: 1,
        ..Default::default()
    });
    h.start_at(0, gpu(0, 0), gpu(1, 0), 1000, 1, 1);
    h.start_at(0, gpu(0, 1), gpu(1, 1), 3000, 1, 2);
    h.run_until(40);
    assert_eq!(h.ended.len(), 1);
    assert_eq!((h.ended[0].token, h.ended[0].end_ns), (1, 40));
    let b = h.fabric.live_flow_ids().next().unwrap();
    assert_eq!(
        h.fabric.flow_rate(b),
        50.0,
        "b speeds up at the instant a ends"
    );
    assert_eq!(ends(&mut h), vec![(1, 40), (2, 80)]);
}

#[test]
fn fabric_a_flow_across_a_saturated_spine_gets_a_quarter_of_its_nic() {
    // Leaf/spine, 2 nodes of 4 NICs per leaf, oversubscription 4: a leaf's uplink carries
    // 8 × 50 / 4 = 100 B/ns. One flow alone crosses it at its NIC rate (50 < 100)...
    let topo = TopologyConfig {
        nodes: 4,
        gpus_per_node: 4,
        nics_per_node: 4,
        kind: TopologyKind::LeafSpine,
        nodes_per_leaf: 2,
        oversubscription: 4.0,
        ..Default::default()
    };
    let mut h = ideal(topo.clone());
    h.start_at(0, gpu(0, 0), gpu(2, 0), 50_000, 1, 0);
    assert_eq!(ends(&mut h), vec![(0, 1000)]);
    assert_eq!(h.fabric.link_bytes(Link::Uplink(0)), 50_000.0);

    // ...but when all 8 NICs of leaf 0 send to leaf 1, the uplink is the bottleneck:
    // 100 / 8 = 12.5 B/ns = 50 / 4 each, and 50,000 B take 4000 ns.
    let mut h = ideal(topo);
    for n in 0..2 {
        for g in 0..4 {
            h.start_at(0, gpu(n, g), gpu(2 + n, g), 50_000, 1, u64::from(4 * n + g));
        }
    }
    while h.fabric.live_flow_ids().count() < 8
        || h.fabric
            .live_flow_ids()
            .any(|f| h.fabric.flow_phase(f) != FlowPhase::Moving)
    {
        h.step();
    }
    for f in h.fabric.live_flow_ids() {
        assert_eq!(h.fabric.flow_rate(f), 12.5);
    }
    let e = ends(&mut h);
    assert!(e.iter().all(|&(_, t)| t == 4000), "{e:?}");
}

#[test]
fn fabric_a_same_node_transfer_uses_nvlink_and_no_nic() {
    // H100: 900 B/ns bidirectional NVLink per GPU, 450 each way: 9 MB in 20,000 ns.
    let mut h = ideal(TopologyConfig::default());
    h.start_at(0, gpu(0, 1), gpu(0, 5), 9_000_000, 72, 0);
    assert_eq!(ends(&mut h), vec![(0, 20_000)]);
    for link in h.fabric.links().collect::<Vec<_>>() {
        let b = h.fabric.link_bytes(link);
        match link {
            Link::NvlinkTx(g) if g == gpu(0, 1) => assert_eq!(b, 9e6),
            Link::NvlinkRx(g) if g == gpu(0, 5) => assert_eq!(b, 9e6),
            _ => assert_eq!(b, 0.0, "{link:?} carried bytes"),
        }
    }
}

/// Trays of one NVLink domain (an NVL72 rack's, Mooncake's multi-node NVLink transport): a
/// KV batch from tray 0 to tray 1 crosses the two GPUs' NVLink links only, at NVLink's rate
/// with no per-batch cap — 1.8 TB/s both ways, 900 B/ns each: 9 MB in 10,000 ns — while the
/// same batch to tray 2, in the next domain, leaves by the NICs (50 B/ns: 180,000 ns). A
/// DeepEP flow between the two trays of a domain still takes the NICs (its inter-domain legs
/// are all it is used for) and a store batch is host DRAM to host DRAM, never NVLink.
#[test]
fn fabric_a_transfer_between_trays_of_one_nvlink_domain_uses_nvlink() {
    let topo = TopologyConfig {
        nodes: 4,
        gpus_per_node: 4,
        nics_per_node: 4,
        nvlink_bytes_per_ns: 1800.0,
        nodes_per_nvlink_domain: 2,
        ..Default::default()
    };
    let mut h = ideal(topo.clone());
    h.start_at(0, gpu(0, 1), gpu(1, 3), 9_000_000, 72, 0);
    h.start_at(0, gpu(1, 2), gpu(2, 2), 9_000_000, 72, 1);
    assert_eq!(ends(&mut h), vec![(0, 10_000), (1, 180_000)]);
    for link in h.fabric.links().collect::<Vec<_>>() {
        let b = h.fabric.link_bytes(link);
        match link {
            Link::NvlinkTx(g) if g == gpu(0, 1) => assert_eq!(b, 9e6),
            Link::NvlinkRx(g) if g == gpu(1, 3) => assert_eq!(b, 9e6),
            Link::GpuRdmaTx(g) if g == gpu(1, 2) => assert_eq!(b, 9e6),
            Link::GpuRdmaRx(g) if g == gpu(2, 2) => assert_eq!(b, 9e6),
            Link::NicTx(NicId(6)) => assert_eq!(b, 9e6),
            Link::NicRx(NicId(10)) => assert_eq!(b, 9e6),
            _ => assert_eq!(b, 0.0, "{link:?} carried bytes"),
        }
    }
    assert_eq!(h.fabric.rails_between(gpu(0, 0), gpu(1, 0)), 1);
    // Without the multi-node transport (fabric.mnnvl = false: one node per domain) the
    // batch between trays leaves by the NICs too.
    let mut h = ideal(TopologyConfig {
        nodes_per_nvlink_domain: 1,
        ..topo.clone()
    });
    h.start_at(0, gpu(0, 1), gpu(1, 3), 9_000_000, 72, 0);
    assert_eq!(ends(&mut h), vec![(0, 180_000)]);
    // DeepEP's aggregated flow between trays of the domain: the NICs.
    let mut h = ideal(topo);
    h.a2a_at(0, gpu(0, 0), gpu(1, 0), 5000, f64::INFINITY, 7);
    h.run();
    assert_eq!(h.fabric.nic_bytes(NicId(0)).0, 5000.0);
    assert_eq!(h.fabric.link_bytes(Link::NvlinkTx(gpu(0, 0))), 0.0);
}

#[test]
fn fabric_rail_crossing_goes_through_the_spine_and_same_rail_does_not() {
    // Rail topology: GPU 0 of node 0 → GPU 3 of node 1 leaves on rail 0 and lands on rail 3.
    let mut h = ideal(TopologyConfig {
        nodes: 2,
        gpus_per_node: 4,
        nics_per_node: 4,
        ..Default::default()
    });
    h.start_at(0, gpu(0, 0), gpu(1, 3), 1000, 1, 0);
    h.start_at(0, gpu(0, 1), gpu(1, 1), 1000, 1, 1);
    h.run();
    assert_eq!(h.fabric.link_bytes(Link::Uplink(0)), 1000.0);
    assert_eq!(h.fabric.link_bytes(Link::Downlink(3)), 1000.0);
    assert_eq!(h.fabric.link_bytes(Link::Uplink(1)), 0.0);
    assert_eq!(h.fabric.link_bytes(Link::Downlink(1)), 0.0);
}

#[test]
fn fabric_latency_then_bandwidth() {
    // Latency 3 µs + 10 µs, then 1 MB at 50 × 0.5 = 25 B/ns: 13,000 + 40,000 ns.
    let params = FabricParams {
        base_latency_ns: 3_000,
        batch_overhead_ns: 10_000,
        nic_efficiency: 0.5,
        ..FabricParams::ideal()
    };
    let fabric = Fabric::build(TopologyConfig::default(), params).unwrap();
    let mut h = Harness::new(fabric);
    h.start_at(1_000, gpu(0, 2), gpu(1, 2), 1_000_000, 72, 9);
    h.run();
    let e = h.end_of(9).unwrap();
    assert_eq!((e.start_ns, e.end_ns), (1_000, 54_000));
    assert!((e.achieved_bytes_per_ns() - 1e6 / 53_000.0).abs() < 1e-12);
}

#[test]
fn fabric_head_sliced_writes_are_slower_than_page_writes_by_the_predicted_factor() {
    // Calibrated parameters. 8 MiB per rank: as 72 page writes it is 128 slices of 64 KiB, so
    // the per-WR cap is 8 MiB / (128 × 1 µs) = 65.5 B/ns and the batch's own limit (18.3 B/ns,
    // below the NIC's min(0.9225 × 50, 23.75)) binds. Head-sliced into 1 KiB writes it is 8192
    // work requests: capped at 1024 B / 1 µs = 1.024 B/ns. Predicted factor (bandwidth phase)
    // 18.3 / 1.024 = 17.87.
    let p = FabricParams::default();
    let bytes: u64 = 8 << 20;
    let latency = p.base_latency_ns + p.batch_overhead_ns;
    let time = |writes: u64| {
        let fabric = Fabric::build(TopologyConfig::default(), p.clone()).unwrap();
        let mut h = Harness::new(fabric);
        h.start_at(0, gpu(0, 0), gpu(1, 0), bytes, writes, 0);
        h.run();
        let e = h.ended[0];
        assert_eq!(e.outcome, FlowOutcome::Completed);
        e.end_ns - latency
    };
    let page = time(72);
    let head = time(bytes / 1024);
    let nic = p.batch_rate_bytes_per_ns.min(p.nic_capacity(50.0));
    assert_eq!(nic, 18.3);
    let cap = 1024.0 / p.per_wr_ns;
    assert_eq!(page, (bytes as f64 / nic).ceil() as u64);
    assert_eq!(head, (bytes as f64 / cap).ceil() as u64);
    let factor = head as f64 / page as f64;
    println!(
        "head-sliced / page writes: {factor:.2} (predicted {:.2})",
        nic / cap
    );
    assert!((factor / (nic / cap) - 1.0).abs() < 1e-6);
}

#[test]
fn fabric_a_rail_crossing_transfer_on_the_default_topology() {
    // GPU 0 of node 0 (NIC 0, rail 0) → GPU 1 of node 1 (NIC 9, rail 1): crosses the sender's
    // RDMA path, rail 0's uplink, rail 1's downlink and the receiver's RDMA path. 500 B at
    // 50 B/ns, no latency: 10 ns.
    let mut h = ideal(TopologyConfig::default());
    h.start_at(0, gpu(0, 0), gpu(1, 1), 500, 1, 42);
    assert_eq!(h.step(), Some(Stepped::Started(FlowId(0))));
    assert_eq!(
        h.next_time(),
        Some(0),
        "the timer: latency 0 is paid at once"
    );
    h.step();
    assert_eq!(
        h.fabric.flow_path(FlowId(0)),
        vec![
            Link::GpuRdmaTx(gpu(0, 0)),
            Link::NicTx(NicId(0)),
            Link::Uplink(0),
            Link::Downlink(1),
            Link::NicRx(NicId(9)),
            Link::GpuRdmaRx(gpu(1, 1)),
        ]
    );
    assert_eq!(h.fabric.link_bytes(Link::GpuRdmaTx(gpu(0, 0))), 0.0);
    assert_eq!(h.next_time(), Some(10));
    assert_eq!(ends(&mut h), vec![(42, 10)]);
    assert_eq!(h.fabric.link_bytes(Link::Uplink(0)), 500.0);
    assert_eq!(h.fabric.link_bytes(Link::Downlink(1)), 500.0);
    assert_eq!(h.fabric.link_bytes(Link::GpuRdmaRx(gpu(1, 1))), 500.0);
    assert_eq!(h.fabric.live_flows(), 0);
}
