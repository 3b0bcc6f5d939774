//! Faults: Mooncake's retry on another NIC, rc −1 when no path is left or the timeout passes,
//! degraded and lossy links, crashed instances. Times are derived by hand in the comments.
//!
//! Parameters: ideal (no latency, full line rate 50 B/ns, no per-WR cost) with Mooncake's
//! constants: 10 attempts (1 + `MC_RETRY_CNT` 9), a failure seen after 1 ms when the sender's
//! own NIC died (`L`) and after the RC retry timeout 536,870,912 ns otherwise (`R`).

use pdsim::fabric::harness::Harness;
use pdsim::fabric::{
    Fabric, FabricParams, FailReason, Fault, FlowOutcome, GpuId, Link, NicId, TopologyConfig,
};

const L: u64 = 1_000_000;
const R: u64 = 536_870_912;

fn gpu(node: u32, local: u32) -> GpuId {
    GpuId { node, local }
}

/// 2 nodes × 2 GPUs × 2 NICs, rail: node 0 has NICs 0, 1; node 1 has NICs 2, 3.
fn small() -> Harness {
    let topo = TopologyConfig {
        nodes: 2,
        gpus_per_node: 2,
        nics_per_node: 2,
        ..Default::default()
    };
    let p = FabricParams::ideal();
    assert_eq!(
        (p.local_detect_ns, p.remote_detect_ns, p.retry_cnt),
        (L, R, 9)
    );
    Harness::new(Fabric::build(topo, p).unwrap())
}

#[test]
fn fabric_remote_nic_down_mid_transfer_retries_on_the_other_nic_and_completes_later() {
    // 50 MB from GPU 0 of node 0 (NIC 0) to GPU 0 of node 1 (NIC 2): 1 ms at 50 B/ns.
    // NIC 2 dies at 0.4 ms (20 MB landed). The sender sees it after R, then re-posts on its
    // preferred NIC 0 → the receiver's next NIC 3 (across rails, via the spine) and moves the
    // remaining 30 MB in 0.6 ms.
    let mut h = small();
    h.start_at(0, gpu(0, 0), gpu(1, 0), 50_000_000, 72, 1);
    h.fault_at(400_000, Fault::NicDown(NicId(2)));
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Completed);
    assert_eq!(e.end_ns, 400_000 + R + 600_000);
    assert_eq!(e.failed_attempts, 1);
    let f = &h.fabric;
    assert_eq!(f.link_bytes(Link::NicRx(NicId(2))), 20e6);
    assert_eq!(f.link_bytes(Link::NicRx(NicId(3))), 30e6);
    assert_eq!(f.link_bytes(Link::Uplink(0)), 30e6);
    assert_eq!(f.link_bytes(Link::NicTx(NicId(0))), 50e6);
}

#[test]
fn fabric_local_nic_down_is_seen_at_once_and_the_sender_switches_nic() {
    // Same transfer; the sender's own NIC 0 dies at 0.4 ms: seen after L, re-posted from NIC 1
    // (rail 1) to NIC 2 (rail 0) through the spine.
    let mut h = small();
    h.start_at(0, gpu(0, 0), gpu(1, 0), 50_000_000, 72, 1);
    h.fault_at(400_000, Fault::NicDown(NicId(0)));
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Completed);
    assert_eq!(e.end_ns, 400_000 + L + 600_000);
    assert_eq!(h.fabric.link_bytes(Link::NicTx(NicId(1))), 30e6);
    assert_eq!(h.fabric.link_bytes(Link::Downlink(0)), 30e6);
}

#[test]
fn fabric_a_dead_spine_uplink_sends_the_retry_along_the_rail() {
    // GPU 0 of node 0 → GPU 1 of node 1: NIC 0 → NIC 3 crosses rail 0's uplink. When it dies,
    // the first pair whose path is up is NIC 0 → NIC 2, on rail 0 alone.
    let mut h = small();
    h.start_at(0, gpu(0, 0), gpu(1, 1), 50_000_000, 72, 1);
    h.fault_at(400_000, Fault::LinkDown(Link::Uplink(0)));
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.end_ns, 400_000 + R + 600_000);
    assert_eq!(h.fabric.link_bytes(Link::NicRx(NicId(2))), 30e6);
    assert_eq!(h.fabric.link_bytes(Link::Uplink(0)), 20e6);
}

#[test]
fn fabric_all_nics_of_the_receiving_node_down_fails_with_rc_minus_1_after_the_retries() {
    // Attempt 1 fails at 0.4 ms, seen after R; attempts 2..10 find no path (each seen after R
    // too). After the 10th failure is seen (0.4 ms + 10 R) the batch returns −1.
    let mut h = small();
    h.start_at(0, gpu(0, 0), gpu(1, 0), 50_000_000, 72, 1);
    h.fault_at(400_000, Fault::NicDown(NicId(2)));
    h.fault_at(400_000, Fault::NicDown(NicId(3)));
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Failed(FailReason::NoRoute));
    assert_eq!(e.rc(), -1);
    assert_eq!(e.end_ns, 400_000 + 10 * R);
    assert_eq!(e.failed_attempts, 10);
    assert_eq!(e.delivered_bytes, 20e6);
}

#[test]
fn fabric_all_nics_of_the_sending_node_down_fails_fast() {
    // The sender's own ports are down: every failure is seen after L.
    let mut h = small();
    h.start_at(0, gpu(0, 1), gpu(1, 1), 50_000_000, 72, 1);
    h.fault_at(400_000, Fault::NicDown(NicId(0)));
    h.fault_at(400_000, Fault::NicDown(NicId(1)));
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Failed(FailReason::NoRoute));
    assert_eq!(e.end_ns, 400_000 + 10 * L);
}

#[test]
fn fabric_a_transfer_started_while_no_path_is_up_fails_after_its_attempts() {
    let mut h = small();
    h.fault_at(0, Fault::NicDown(NicId(2)));
    h.fault_at(0, Fault::NicDown(NicId(3)));
    h.start_at(5, gpu(0, 0), gpu(1, 0), 1_000, 1, 1);
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Failed(FailReason::NoRoute));
    assert_eq!(e.end_ns, 5 + 10 * R);
}

#[test]
fn fabric_a_flap_shorter_than_the_retries_is_survived() {
    // One NIC per node. The receiver's NIC flaps for 1.2 s at 0.4 ms: the attempt fails (seen at
    // +R), the retries at +R and +2R find it still down (2R = 1.07 s < 1.2 s) and the one at +3R
    // (1.61 s) goes through: 30 MB in 0.6 ms.
    let topo = TopologyConfig {
        nodes: 2,
        gpus_per_node: 1,
        nics_per_node: 1,
        ..Default::default()
    };
    let mut h = Harness::new(Fabric::build(topo, FabricParams::ideal()).unwrap());
    h.start_at(0, gpu(0, 0), gpu(1, 0), 50_000_000, 72, 1);
    h.fault_at(
        400_000,
        Fault::NicFlap {
            nic: NicId(1),
            down_ns: 1_200_000_000,
        },
    );
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Completed);
    assert_eq!(e.failed_attempts, 3);
    assert_eq!(e.end_ns, 400_000 + 3 * R + 600_000);
    assert!(h.fabric.link_is_up(Link::NicRx(NicId(1))));
}

#[test]
fn fabric_a_transfer_slower_than_its_timeout_fails_at_the_deadline() {
    // 1 GB on a NIC degraded to 1/10,000 (0.005 B/ns) would take 200 s; Mooncake gives it
    // 30 s + 1 ns per byte = 31 s, and it has moved 0.005 × 31e9 bytes by then.
    let mut h = small();
    h.fault_at(
        0,
        Fault::Degrade {
            link: Link::NicTx(NicId(0)),
            fraction: 1e-4,
        },
    );
    h.start_at(0, gpu(0, 0), gpu(1, 0), 1_000_000_000, 72, 1);
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.outcome, FlowOutcome::Failed(FailReason::Timeout));
    assert_eq!(e.end_ns, 31_000_000_000);
    assert!((e.delivered_bytes - 0.005 * 31e9).abs() < 1.0);
}

#[test]
fn fabric_a_degraded_link_is_proportionally_slower() {
    // 10 MB at 50 B/ns = 200 µs. Receiver NIC at a quarter: 800 µs.
    let mut h = small();
    h.fault_at(
        0,
        Fault::Degrade {
            link: Link::NicRx(NicId(2)),
            fraction: 0.25,
        },
    );
    h.start_at(0, gpu(0, 0), gpu(1, 0), 10_000_000, 72, 1);
    h.run();
    assert_eq!(h.end_of(1).unwrap().end_ns, 800_000);

    // Halved at 100 µs (5 MB landed): the other 5 MB at 25 B/ns take 200 µs. Restored at
    // 200 µs (2.5 MB more): the last 2.5 MB take 50 µs.
    let mut h = small();
    h.start_at(0, gpu(0, 0), gpu(1, 0), 10_000_000, 72, 1);
    let rx = Link::NicRx(NicId(2));
    h.fault_at(
        100_000,
        Fault::Degrade {
            link: rx,
            fraction: 0.5,
        },
    );
    h.fault_at(
        200_000,
        Fault::Degrade {
            link: rx,
            fraction: 1.0,
        },
    );
    h.run();
    assert_eq!(h.end_of(1).unwrap().end_ns, 250_000);
}

#[test]
fn fabric_a_lossy_link_retransmits_about_loss_times_the_bytes() {
    // 1% loss on the sender's NIC: the wire runs at 50 B/ns, goodput 49.5 B/ns, so 99 MB take
    // 2 ms and put 100 MB on the wire: 1 MB retransmitted = 99 MB × 0.01 / 0.99 ≈ loss × bytes.
    let mut h = small();
    h.fault_at(
        0,
        Fault::Loss {
            link: Link::NicTx(NicId(0)),
            rate: 0.01,
        },
    );
    h.start_at(0, gpu(0, 0), gpu(1, 0), 99_000_000, 72, 1);
    h.run();
    let e = h.end_of(1).unwrap();
    assert_eq!(e.end_ns, 2_000_000);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b;
    assert!(close(e.retransmitted_bytes, 1e6), "{e:?}");
    assert!(close(e.retransmitted_bytes / 99e6, 0.01 / 0.99));
    for link in [Link::NicTx(NicId(0)), Link::NicRx(NicId(2))] {
        assert!(close(h.fabric.link_bytes(link), 100e6));
        assert!(close(h.fabric.link_retransmitted_bytes(link), 1e6));
    }
}

#[test]
fn fabric_a_crash_aborts_the_instance_flows_once_and_spares_the_others() {
    let topo = TopologyConfig {
        nodes: 3,
        gpus_per_node: 2,
        nics_per_node: 2,
        ..Default::default()
    };
    let mut h = Harness::new(Fabric::build(topo, FabricParams::ideal()).unwrap());
    // Instance A on node 0 sends to instance B on node 1 (2 ranks) and C on node 2 (1 rank).
    h.start_at(0, gpu(0, 0), gpu(1, 0), 50_000_000, 72, 1);
    h.start_at(0, gpu(0, 1), gpu(1, 1), 50_000_000, 72, 2);
    h.start_at(0, gpu(0, 0), gpu(2, 0), 50_000_000, 72, 3);
    // B crashes at 0.3 ms.
    h.fault_at(
        300_000,
        Fault::Crash {
            gpus: vec![gpu(1, 0), gpu(1, 1)],
        },
    );
    h.run();
    let mut outcomes: Vec<_> = h.ended.iter().map(|e| (e.token, e.outcome)).collect();
    outcomes.sort_by_key(|o| o.0);
    assert_eq!(
        outcomes,
        vec![
            (1, FlowOutcome::Aborted),
            (2, FlowOutcome::Aborted),
            (3, FlowOutcome::Completed)
        ]
    );
    let s = h.stats();
    assert_eq!((s.started, s.completed, s.aborted, s.failed), (3, 1, 2, 0));
    // Token 3 shared NIC 0 with token 1 (25 B/ns each) until 0.3 ms: 7.5 MB; the rest at 50.
    assert_eq!(h.end_of(3).unwrap().end_ns, 300_000 + 850_000);
}

#[test]
fn fabric_downs_nest_and_a_flap_comes_back_by_itself() {
    let mut f = Fabric::<u64>::build(TopologyConfig::default(), FabricParams::ideal()).unwrap();
    let rx = Link::NicRx(NicId(3));
    f.link_down(0, rx);
    f.link_down(0, rx);
    f.link_up(10, rx);
    assert!(!f.link_is_up(rx), "two downs need two ups");
    assert_eq!(f.link_capacity(rx), 0.0);
    f.link_up(20, rx);
    assert!(f.link_is_up(rx));
    assert_eq!(f.link_capacity(rx), 50.0);
    // An unmatched up is ignored: the next down takes the link down.
    f.link_up(30, rx);
    f.link_down(40, rx);
    assert!(!f.link_is_up(rx));
    f.link_up(50, rx);

    // A flap's up is applied at the first call at or after its time.
    f.nic_flap(100, NicId(3), 1_000);
    assert!(!f.link_is_up(Link::NicTx(NicId(3))));
    f.next_due(1_099);
    assert!(!f.link_is_up(rx));
    f.next_due(1_100);
    assert!(f.link_is_up(rx) && f.link_is_up(Link::NicTx(NicId(3))));
}

#[test]
fn fabric_invalid_parameters_are_an_error_naming_the_field() {
    let p = FabricParams {
        nic_efficiency: 1.5,
        ..FabricParams::default()
    };
    let err = Fabric::<u64>::build(TopologyConfig::default(), p)
        .err()
        .unwrap();
    assert!(err.to_string().contains("nic_efficiency"), "{err}");
}
