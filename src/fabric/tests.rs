//! Unit tests of the fabric's bookkeeping through the harness (the hand-computed sharing cases
//! are in `tests/fabric/fabric_hand.rs`).

use super::harness::Harness;
use super::*;

/// One GPU and one NIC per node, NICs of `bytes_per_ns`, latency 0: a flow from node `a` to node
/// `b` crosses exactly `a`'s NIC TX and `b`'s NIC RX (all NICs on one rail switch).
fn one_gpu_per_node(nodes: u32, bytes_per_ns: f64) -> Harness {
    let topo = TopologyConfig {
        nodes,
        gpus_per_node: 1,
        nics_per_node: 1,
        nic_bytes_per_ns: bytes_per_ns,
        ..TopologyConfig::default()
    };
    Harness::new(Fabric::build(topo, FabricParams::ideal()).unwrap())
}

fn node(n: u32) -> GpuId {
    GpuId { node: n, local: 0 }
}

/// `(token, end_ns)` of every end, in the order they happened.
fn run_to_end(h: &mut Harness) -> Vec<(u64, Nanos)> {
    h.run();
    h.ended.iter().map(|e| (e.token, e.end_ns)).collect()
}

#[test]
fn two_flows_on_one_nic_share_it_then_the_survivor_speeds_up() {
    // 50 bytes/ns NICs (400 Gb/s). Flow a: 1000 B, flow b: 3000 B, both leave NIC 0.
    let mut h = one_gpu_per_node(3, 50.0);
    h.start_at(0, node(0), node(1), 1000, 1, 1);
    h.start_at(0, node(0), node(2), 3000, 1, 2);
    // a: 1000 B at 25 B/ns = 40 ns; b then has 2000 B left at 50 B/ns = 40 ns more.
    assert_eq!(run_to_end(&mut h), vec![(1, 40), (2, 80)]);
    let (tx, _) = h.fabric.nic_bytes(NicId(0));
    assert!((tx - 4000.0).abs() < 1e-6);
}

#[test]
fn independent_flows_do_not_slow_each_other() {
    let mut h = one_gpu_per_node(4, 50.0);
    h.start_at(0, node(0), node(1), 5000, 1, 1);
    h.start_at(0, node(2), node(3), 5000, 1, 2);
    assert_eq!(run_to_end(&mut h), vec![(1, 100), (2, 100)]);
}

#[test]
fn a_flow_crosses_its_sender_tx_and_its_receiver_rx_only() {
    // 500 B at 50 B/ns: 10 ns; the bytes show on NIC 0's TX and NIC 1's RX, nowhere else.
    let mut h = one_gpu_per_node(2, 50.0);
    h.start_at(0, node(0), node(1), 500, 1, 7);
    assert_eq!(run_to_end(&mut h), vec![(7, 10)]);
    assert_eq!(h.fabric.nic_bytes(NicId(0)), (500.0, 0.0));
    assert_eq!(h.fabric.nic_bytes(NicId(1)), (0.0, 500.0));
}

#[test]
fn ids_are_reused_lowest_first_and_live_counts_follow() {
    let mut h = one_gpu_per_node(2, 50.0);
    h.start_at(0, node(0), node(1), 500, 1, 1);
    h.start_at(0, node(1), node(0), 1000, 1, 2);
    h.run_until(0);
    assert_eq!(h.fabric.live_flows(), 2);
    h.run_until(10);
    // Token 1 ended at 10 ns: its id 0 is free again.
    assert_eq!(
        h.fabric.live_flow_ids().collect::<Vec<_>>(),
        vec![FlowId(1)]
    );
    h.start_at(10, node(0), node(1), 500, 1, 3);
    assert_eq!(h.step(), Some(harness::Stepped::Started(FlowId(0))));
    h.run();
    assert_eq!(h.fabric.live_flows(), 0);
    assert_eq!(h.stats().completed, 3);
}

#[test]
fn an_all_to_all_flow_shares_a_nic_with_a_kv_transfer_and_both_slow_down() {
    // NIC 1 receives an all-to-all aggregate (3000 B from node 0, capped at DeepEP's 45 B/ns)
    // and a KV transfer (1000 B from node 2). Alone: 3000 / 45 = 66.7 ns and 1000 / 50 = 20 ns.
    // Together on NIC 1's RX (50 B/ns): 25 B/ns each, so the transfer ends at 40 ns; the
    // all-to-all has 2000 B left at its 45 B/ns cap: 40 + 44.4 = 84.4, ends at 85 ns.
    let mut h = one_gpu_per_node(3, 50.0);
    h.fabric.start_a2a(0, node(0), node(1), 3000, 45.0, 9);
    h.start_at(0, node(2), node(1), 1000, 1, 1);
    assert_eq!(run_to_end(&mut h), vec![(1, 40), (9, 85)]);
    // Alone, the all-to-all pays no Mooncake latency and moves at its cap.
    let mut alone = one_gpu_per_node(2, 50.0);
    alone.fabric.start_a2a(0, node(0), node(1), 3000, 45.0, 9);
    alone.start_at(0, node(1), node(0), 0, 1, 1);
    let ends = run_to_end(&mut alone);
    assert!(ends.contains(&(9, 67)), "{ends:?}");
    assert_eq!(alone.fabric.nic_bytes(NicId(0)).0, 3000.0);
}

#[test]
fn a_store_batch_skips_the_gpu_engines_but_shares_the_nics() {
    // Engines of 20 B/ns behind 50 B/ns NICs. A KV batch of 1000 B is bound by its engines:
    // 50 ns. A store batch (host memory on both ends) is bound by the NICs only: 20 ns.
    let topo = TopologyConfig {
        nodes: 3,
        gpus_per_node: 1,
        nics_per_node: 1,
        nic_bytes_per_ns: 50.0,
        ..TopologyConfig::default()
    };
    let params = FabricParams {
        engine_bytes_per_ns: 20.0,
        ..FabricParams::ideal()
    };
    let mut h = Harness::new(Fabric::build(topo.clone(), params.clone()).unwrap());
    h.start_at(0, node(0), node(1), 1000, 1, 1);
    h.store_at(0, (node(2), node(1), node(1)), 1000, 2);
    // Both enter NIC 1's RX (50 B/ns): the batch takes its 20 B/ns engine share, the store
    // batch the other 30 B/ns; at 33.3 ns the store batch is done, the batch alone at 20 B/ns.
    let ends = run_to_end(&mut h);
    assert_eq!(ends, vec![(2, 34), (1, 50)], "{ends:?}");
    assert_eq!(h.fabric.nic_bytes(NicId(1)).1, 2000.0);
    let engine_rx = h.fabric.link_bytes(Link::GpuRdmaRx(node(1)));
    assert!(
        (engine_rx - 1000.0).abs() < 1e-6,
        "only the KV batch: {engine_rx}"
    );
    // A crash of the store's node does not abort its batches; one of the client's does.
    let mut c = Harness::new(Fabric::build(topo, params).unwrap());
    let f = c
        .fabric
        .start_store(0, 0, (node(2), node(1), node(1)), (1000, 1), 3);
    assert!(c.fabric.abort_flows_touching(0, &[node(2)]).is_empty());
    let ended = c.fabric.abort_flows_touching(0, &[node(1)]);
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].flow, ended[0].outcome), (f, FlowOutcome::Aborted));
}

#[test]
fn a_flows_landed_bytes_follow_its_rate_between_events() {
    let mut h = one_gpu_per_node(2, 50.0);
    h.store_at(0, (node(0), node(1), node(1)), 1000, 4);
    let Some(harness::Stepped::Started(f)) = h.step() else {
        panic!("the batch starts first")
    };
    h.run_until(0);
    assert_eq!(h.fabric.flow_landed_bytes_at(f, 0), 0.0);
    assert!((h.fabric.flow_landed_bytes_at(f, 10) - 500.0).abs() < 1e-9);
    assert_eq!(
        h.fabric.flow_landed_bytes_at(f, 1000),
        1000.0,
        "never past its bytes"
    );
}

mod routing {
    use super::*;
    use proptest::prelude::*;

    fn fabric(kind: TopologyKind) -> Fabric {
        let topo = TopologyConfig {
            nodes: 4,
            gpus_per_node: 4,
            nics_per_node: 2,
            kind,
            nodes_per_leaf: 2,
            oversubscription: 2.0,
            ..TopologyConfig::default()
        };
        Fabric::build(topo, FabricParams::ideal()).unwrap()
    }

    /// For every GPU pair: the routing fast paths (`choose_path`, `resolve`) against the general
    /// ones (`select_path`, `keep_of`, the healthy-capacity minimum, `binding_links`), and the
    /// count of down links against a recount.
    fn check_every_pair(fab: &mut Fabric, now: Nanos) -> Result<(), TestCaseError> {
        let recount = fab.links.iter().filter(|l| l.down > 0).count() as u32;
        prop_assert_eq!(fab.links_down, recount);
        let gpus: Vec<GpuId> = (0..4)
            .flat_map(|node| (0..4).map(move |local| GpuId { node, local }))
            .collect();
        for &src in &gpus {
            for &dst in &gpus {
                let id = fab.start_transfer(now, src, dst, 1000, 1, 0);
                let fi = id.0 as usize;
                let general = fab.select_path(fi);
                prop_assert_eq!(fab.choose_path(fi), general);
                if let Some(path) = general {
                    let (keep, floor, binding, n) = fab.resolve(&path);
                    prop_assert_eq!(keep.to_bits(), fab.keep_of(path).to_bits());
                    let want_floor = path
                        .links()
                        .iter()
                        .map(|l| fab.links[l.0 as usize].nominal)
                        .fold(f64::INFINITY, f64::min);
                    prop_assert_eq!(floor.to_bits(), want_floor.to_bits());
                    let (want, wn) = fab.binding_links(&path);
                    prop_assert_eq!(&binding[..n], &want[..wn]);
                }
                fab.abort_flow(now, id);
            }
        }
        Ok(())
    }

    proptest! {
        /// Faults in any order (nested downs, flaps coming back, loss, degradation that
        /// un-slacks switch links): the fast paths always agree with the general ones,
        /// including right after a down moves a path off the preferred NIC pair.
        #[test]
        fn fast_routing_agrees_with_the_search(
            leaf in any::<bool>(),
            ops in prop::collection::vec((0u8..7, 0u32..64, 0u32..4), 1..40),
        ) {
            let kind = if leaf { TopologyKind::LeafSpine } else { TopologyKind::Rail };
            let mut fab = fabric(kind);
            let links: Vec<Link> = fab.links().collect();
            let nics = fab.num_nics();
            let mut now = 0;
            check_every_pair(&mut fab, now)?;
            for (op, a, b) in ops {
                now += 10;
                let link = links[a as usize % links.len()];
                let nic = NicId(a % nics);
                match op {
                    0 => { fab.link_down(now, link); }
                    1 => { fab.link_up(now, link); }
                    2 => { fab.nic_down(now, nic); }
                    3 => { fab.nic_up(now, nic); }
                    4 => { fab.nic_flap(now, nic, 15); }
                    5 => { fab.set_link_loss(now, link, f64::from(b) / 8.0); }
                    _ => { fab.degrade_link(now, link, f64::from(b + 1) / 4.0); }
                }
                fab.next_due(now);
                check_every_pair(&mut fab, now)?;
            }
        }
    }

    /// The invalidation case by hand: a down preferred NIC moves the path to the next NIC pair.
    #[test]
    fn a_down_nic_moves_the_path_off_the_fast_path() {
        let mut fab = fabric(TopologyKind::Rail);
        let (src, dst) = (GpuId { node: 0, local: 0 }, GpuId { node: 1, local: 0 });
        let id = fab.start_transfer(0, src, dst, 1000, 1, 0);
        let fi = id.0 as usize;
        let before = fab.choose_path(fi).unwrap();
        fab.nic_down(0, fab.nic_of(src));
        assert_eq!(fab.links_down, 2);
        let after = fab.choose_path(fi).unwrap();
        assert_ne!(after, before);
        assert_eq!(Some(after), fab.select_path(fi));
        fab.nic_up(0, fab.nic_of(src));
        assert_eq!(fab.links_down, 0);
        assert_eq!(fab.choose_path(fi), Some(before));
    }
}
