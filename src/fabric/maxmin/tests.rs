//! Tests of the max-min solver: hand cases, and the incremental solver against
//! [`reference_rates`] on random instances and random mutation sequences.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

const REL: f64 = 1e-9;
const ABS: f64 = 1e-12;

fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= ABS || (a - b).abs() <= REL * a.abs().max(b.abs())
}

fn drain(s: &mut Sharing) -> Vec<RateChange> {
    let mut out = Vec::new();
    s.drain_changes(&mut out);
    out
}

fn l(i: u32) -> LinkIdx {
    LinkIdx(i)
}

fn live_ids(s: &Sharing, max_id: u32) -> Vec<FlowId> {
    (0..max_id).map(FlowId).filter(|&f| s.is_live(f)).collect()
}

/// Checks rates against the reference, capacity constraints and the bottleneck property.
fn check_against_reference(s: &Sharing, max_id: u32) {
    let ids = live_ids(s, max_id);
    let caps: Vec<f64> = (0..s.num_links() as u32)
        .map(|i| s.capacity(l(i)))
        .collect();
    let flows: Vec<(Vec<LinkIdx>, f64)> = ids
        .iter()
        .map(|&f| (s.path(f).collect(), s.flow_cap(f)))
        .collect();
    let want = reference_rates(&caps, &flows);
    for (i, &f) in ids.iter().enumerate() {
        let got = s.rate(f);
        assert!(
            close(got, want[i]),
            "flow {f:?}: got {got}, want {}",
            want[i]
        );
    }
    check_invariants(s, max_id);
}

fn check_invariants(s: &Sharing, max_id: u32) {
    let nl = s.num_links() as u32;
    for i in 0..nl {
        let load: f64 = s.flows_on(l(i)).map(|f| s.rate(f)).sum();
        assert!(close(load, s.link_load(l(i))), "link {i} load mismatch");
        let c = s.capacity(l(i));
        assert!(
            load <= c * (1.0 + REL) + ABS,
            "link {i} over capacity: {load} > {c}"
        );
    }
    for f in live_ids(s, max_id) {
        let r = s.rate(f);
        assert!(r >= 0.0 && r.is_finite());
        let cap = s.flow_cap(f);
        assert!(r <= cap * (1.0 + REL) + ABS, "flow {f:?} over its cap");
        if close(r, cap) {
            continue;
        }
        let bottlenecked = s.path(f).any(|link| {
            let c = s.capacity(link);
            let saturated = s.link_load(link) >= c * (1.0 - REL) - ABS;
            let fastest = s.flows_on(link).all(|g| s.rate(g) <= r * (1.0 + REL) + ABS);
            saturated && fastest
        });
        assert!(bottlenecked, "flow {f:?} at {r} has no bottleneck");
    }
}

#[test]
fn two_flows_share_one_link() {
    let mut s = Sharing::new(vec![10.0]);
    let a = s.add_flow(&[l(0)], f64::INFINITY);
    let b = s.add_flow(&[l(0)], f64::INFINITY);
    assert_eq!(s.rate(a), 5.0);
    assert_eq!(s.rate(b), 5.0);
    assert_eq!(s.link_load(l(0)), 10.0);
    check_invariants(&s, 2);
}

#[test]
fn parking_lot() {
    // Links A (cap 1) and B (cap 2). Flow 0 crosses A and B, flow 1 only A, flow 2 only B.
    // A is the tighter link: 1/2 each for flows 0 and 1. Flow 0 is then frozen at 1/2 on B,
    // which leaves 2 - 1/2 = 3/2 to flow 2.
    let mut s = Sharing::new(vec![1.0, 2.0]);
    let f0 = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    let f1 = s.add_flow(&[l(0)], f64::INFINITY);
    let f2 = s.add_flow(&[l(1)], f64::INFINITY);
    assert_eq!(s.rate(f0), 0.5);
    assert_eq!(s.rate(f1), 0.5);
    assert_eq!(s.rate(f2), 1.5);
    assert_eq!(s.link_load(l(1)), 2.0);
    // Equal capacities: the classic parking lot, 1/2 for everyone.
    s.set_capacity(l(1), 1.0);
    assert_eq!([s.rate(f0), s.rate(f1), s.rate(f2)], [0.5, 0.5, 0.5]);
    check_against_reference(&s, 3);
}

#[test]
fn caps_freeze_flows_and_leave_capacity_to_others() {
    let mut s = Sharing::new(vec![9.0]);
    let a = s.add_flow(&[l(0)], 1.0);
    let b = s.add_flow(&[l(0)], f64::INFINITY);
    let c = s.add_flow(&[l(0)], f64::INFINITY);
    assert_eq!([s.rate(a), s.rate(b), s.rate(c)], [1.0, 4.0, 4.0]);
    let z = s.add_flow(&[l(0)], 0.0);
    assert_eq!(s.rate(z), 0.0);
    assert_eq!(s.rate(b), 4.0);
}

#[test]
fn spine_oversubscription_four_gives_a_quarter_of_the_nic() {
    // Two leaves of 4 nodes, one 50 bytes/ns NIC per node (a TX and an RX link each). Each
    // leaf's uplink and downlink carry 4 * 50 / 4 = 50 bytes/ns: oversubscription 4, i.e. a
    // spine capacity of NIC/4 per node. Node i of leaf 0 sends to node i of leaf 1; all four
    // flows cross uplink 0 and downlink 1, which saturate first: 50 / 4 = 12.5 each.
    const NIC: f64 = 50.0;
    let mut s = Sharing::new(Vec::new());
    let tx: Vec<LinkIdx> = (0..8).map(|_| s.add_link(NIC)).collect();
    let rx: Vec<LinkIdx> = (0..8).map(|_| s.add_link(NIC)).collect();
    let up: Vec<LinkIdx> = (0..2).map(|_| s.add_link(4.0 * NIC / 4.0)).collect();
    let down: Vec<LinkIdx> = (0..2).map(|_| s.add_link(4.0 * NIC / 4.0)).collect();
    let flows: Vec<FlowId> = (0..4)
        .map(|i| s.add_flow(&[tx[i], up[0], down[1], rx[4 + i]], f64::INFINITY))
        .collect();
    for &f in &flows {
        assert_eq!(s.rate(f), NIC / 4.0);
    }
    assert_eq!(s.link_load(up[0]), s.capacity(up[0]));
    // An intra-leaf flow from node 0 to node 1 gets what node 0's NIC has left.
    let local = s.add_flow(&[tx[0], rx[1]], f64::INFINITY);
    assert_eq!(s.rate(local), NIC - NIC / 4.0);
    // With a single cross-leaf flow the spine no longer limits it: full NIC rate.
    for &f in &flows[1..] {
        s.remove_flow(f);
    }
    assert_eq!(s.rate(flows[0]), 25.0); // now shares TX 0 with `local`
    s.remove_flow(local);
    assert_eq!(s.rate(flows[0]), NIC);
    check_against_reference(&s, 5);
}

#[test]
fn rates_rise_when_a_flow_ends() {
    let mut s = Sharing::new(vec![30.0, 100.0]);
    let a = s.add_flow(&[l(0)], f64::INFINITY);
    let b = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    let c = s.add_flow(&[l(0)], f64::INFINITY);
    let first = drain(&mut s);
    let expect = |f, o, n| RateChange {
        flow: f,
        old_rate: o,
        new_rate: n,
    };
    assert_eq!(
        first,
        vec![
            expect(a, 0.0, 10.0),
            expect(b, 0.0, 10.0),
            expect(c, 0.0, 10.0)
        ]
    );
    assert!(drain(&mut s).is_empty());
    s.remove_flow(b);
    assert_eq!(
        drain(&mut s),
        vec![expect(a, 10.0, 15.0), expect(c, 10.0, 15.0)]
    );
    // The freed id is reused first; the new flow is reported against 0.0.
    let d = s.add_flow(&[l(1)], f64::INFINITY);
    assert_eq!(d, b);
    assert_eq!(drain(&mut s), vec![expect(d, 0.0, 100.0)]);
}

#[test]
fn link_down_then_up() {
    let mut s = Sharing::new(vec![8.0, 8.0]);
    let a = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    let b = s.add_flow(&[l(1)], f64::INFINITY);
    assert_eq!((s.rate(a), s.rate(b)), (4.0, 4.0));
    drain(&mut s);
    s.set_capacity(l(0), 0.0);
    assert_eq!((s.rate(a), s.rate(b)), (0.0, 8.0));
    assert_eq!(s.link_load(l(0)), 0.0);
    let ch = drain(&mut s);
    assert_eq!(ch.len(), 2);
    assert_eq!((ch[0].old_rate, ch[0].new_rate), (4.0, 0.0));
    assert_eq!((ch[1].old_rate, ch[1].new_rate), (4.0, 8.0));
    // A flow started while the link is down has rate 0.0: nothing to report yet.
    let c = s.add_flow(&[l(0)], f64::INFINITY);
    assert_eq!(s.rate(c), 0.0);
    assert!(drain(&mut s).is_empty());
    s.set_capacity(l(0), 8.0);
    assert_eq!((s.rate(a), s.rate(b), s.rate(c)), (4.0, 4.0, 4.0));
    let ch = drain(&mut s);
    let got: Vec<(u32, f64, f64)> = ch
        .iter()
        .map(|c| (c.flow.0, c.old_rate, c.new_rate))
        .collect();
    assert_eq!(got, vec![(0, 0.0, 4.0), (1, 8.0, 4.0), (2, 0.0, 4.0)]);
    check_invariants(&s, 3);
}

#[test]
fn only_touched_components_are_recomputed_and_batched() {
    let mut s = Sharing::new(vec![10.0; 6]);
    let a = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    let _b = s.add_flow(&[l(1)], f64::INFINITY);
    let c = s.add_flow(&[l(2), l(3)], f64::INFINITY);
    drain(&mut s);
    // `a` and `c` were solved when added (alone on quiet links); `b` joined `a`: one re-solve.
    assert_eq!(s.recomputations(), 1);
    // Four mutations: three on the component {a, b}, one on an independent pair of links.
    let before = (s.recomputations(), s.recomputed_flows());
    let d = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    s.remove_flow(a);
    s.set_capacity(l(1), 4.0);
    let e = s.add_flow(&[l(4), l(5)], f64::INFINITY);
    assert_eq!(s.rate(e), 10.0);
    // One solve for {d, b} (however many mutations hit it); `e`, alone, was solved when added;
    // the component of `c` was not visited.
    assert_eq!(s.recomputations() - before.0, 1);
    assert_eq!(s.recomputed_flows() - before.1, 2);
    assert_eq!((s.rate(c), s.rate(d)), (10.0, 2.0));
    // Removing `d` splits the component: link 0, left empty, needs no solve; {b} is re-solved.
    s.remove_flow(d);
    assert_eq!(s.rate(c), 10.0);
    assert_eq!(s.recomputations() - before.0, 2);
    assert_eq!(s.link_load(l(0)), 0.0);
    // Without the shortcuts, every touched component is re-solved at the next query.
    let mut g = Sharing::new(vec![10.0; 6]);
    g.general_only();
    g.add_flow(&[l(0), l(1)], f64::INFINITY);
    g.add_flow(&[l(2), l(3)], f64::INFINITY);
    drain(&mut g);
    assert_eq!(g.recomputations(), 2);
}

/// `has_pending` says whether `drain_changes` has anything to do: not after a lone flow left.
#[test]
fn pending_work_after_mutations() {
    let mut s = Sharing::new(vec![10.0; 3]);
    assert!(!s.has_pending());
    let a = s.add_flow(&[l(0), l(1)], f64::INFINITY);
    assert!(s.has_pending(), "a new flow's rate is to be reported");
    assert_eq!(drain(&mut s).len(), 1);
    assert!(!s.has_pending());
    let b = s.add_flow(&[l(1), l(2)], f64::INFINITY);
    assert_eq!(drain(&mut s).len(), 2);
    s.remove_flow(b);
    assert!(s.has_pending(), "`a` gets link 1 back");
    assert_eq!(drain(&mut s).len(), 1);
    s.remove_flow(a);
    assert!(
        !s.has_pending(),
        "a flow alone on its links leaves nothing to solve"
    );
    assert!(drain(&mut s).is_empty());
}

#[test]
fn full_recomputation_is_bit_identical() {
    let mut s = Sharing::new(vec![3.0, 7.0, 1.0 / 3.0, 11.0]);
    let paths: [&[LinkIdx]; 5] = [
        &[l(0), l(1)],
        &[l(1), l(2)],
        &[l(1)],
        &[l(3), l(0)],
        &[l(2)],
    ];
    for (i, p) in paths.iter().enumerate() {
        s.add_flow(p, if i == 2 { 0.7 } else { f64::INFINITY });
    }
    drain(&mut s);
    s.invalidate_all();
    assert!(drain(&mut s).is_empty());
    // Add and remove in one batch: same content, nothing to report.
    let f = s.add_flow(&[l(1), l(3)], f64::INFINITY);
    s.remove_flow(f);
    assert!(drain(&mut s).is_empty());
}

#[test]
fn ids_are_reused_lowest_first() {
    let mut s = Sharing::new(vec![1.0]);
    let ids: Vec<FlowId> = (0..5).map(|_| s.add_flow(&[l(0)], 1.0)).collect();
    s.remove_flow(ids[3]);
    s.remove_flow(ids[1]);
    assert_eq!(s.add_flow(&[l(0)], 1.0), FlowId(1));
    assert_eq!(s.add_flow(&[l(0)], 1.0), FlowId(3));
    assert_eq!(s.add_flow(&[l(0)], 1.0), FlowId(5));
    assert_eq!(s.live_flows(), 6);
}

#[test]
fn empty_path_and_duplicate_links() {
    let mut s = Sharing::new(vec![6.0]);
    let e = s.add_flow(&[], 2.5);
    let d = s.add_flow(&[l(0), l(0), l(0)], f64::INFINITY);
    let o = s.add_flow(&[l(0)], f64::INFINITY);
    assert_eq!(s.rate(e), 2.5);
    assert_eq!((s.rate(d), s.rate(o)), (3.0, 3.0));
    assert_eq!(s.path(d).collect::<Vec<_>>(), vec![l(0)]);
    assert_eq!(drain(&mut s).len(), 3);
}

#[test]
#[should_panic(expected = "unbounded rate")]
fn empty_path_without_cap_panics() {
    Sharing::new(vec![1.0]).add_flow(&[], f64::INFINITY);
}

/// Larger random instances than the proptest explores, against the reference.
#[test]
fn random_medium_instances_match_reference() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..20 {
        let nl = 10 + round * 2;
        let caps: Vec<f64> = (0..nl).map(|_| (next() % 1000) as f64 / 7.0).collect();
        let mut s = Sharing::new(caps);
        for _ in 0..150 {
            let len = 1 + next() % 4;
            let path: Vec<LinkIdx> = (0..len).map(|_| l((next() % nl as u64) as u32)).collect();
            let cap = if next() % 5 == 0 {
                (next() % 100) as f64 / 3.0
            } else {
                f64::INFINITY
            };
            s.add_flow(&path, cap);
        }
        for _ in 0..40 {
            let f = FlowId((next() % 150) as u32);
            if s.is_live(f) {
                s.remove_flow(f);
            }
        }
        check_against_reference(&s, 150);
    }
}

/// A leaf/spine fabric at a scale where every flow is in one component, with link failures.
#[test]
fn leaf_spine_fabric_matches_reference() {
    const NODES: u32 = 16;
    const NICS: u32 = 4;
    const PER_LEAF: u32 = 4;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(n)) as u32
    };
    let mut s = Sharing::new(Vec::new());
    let tx: Vec<LinkIdx> = (0..NODES * NICS).map(|_| s.add_link(50.0)).collect();
    let rx: Vec<LinkIdx> = (0..NODES * NICS).map(|_| s.add_link(50.0)).collect();
    let spine = f64::from(PER_LEAF * NICS) * 50.0 / 2.0;
    let up: Vec<LinkIdx> = (0..NODES / PER_LEAF).map(|_| s.add_link(spine)).collect();
    let down: Vec<LinkIdx> = (0..NODES / PER_LEAF).map(|_| s.add_link(spine)).collect();
    let mut random_flow = |s: &mut Sharing| {
        let (a, b) = (next(NODES), next(NODES));
        let (na, nb) = (next(NICS), next(NICS));
        let mut path = vec![tx[(a * NICS + na) as usize], rx[(b * NICS + nb) as usize]];
        if a / PER_LEAF != b / PER_LEAF {
            path.push(up[(a / PER_LEAF) as usize]);
            path.push(down[(b / PER_LEAF) as usize]);
        }
        let cap = if next(8) == 0 { 7.5 } else { f64::INFINITY };
        s.add_flow(&path, cap)
    };
    let mut live: Vec<FlowId> = (0..1500).map(|_| random_flow(&mut s)).collect();
    check_against_reference(&s, 1500);
    for step in 0..400 {
        match step % 4 {
            0 | 2 => {
                let f = live.swap_remove(step % live.len());
                s.remove_flow(f);
            }
            1 => live.push(random_flow(&mut s)),
            _ => {
                let link = up[step % up.len()];
                let c = if s.capacity(link) == 0.0 { spine } else { 0.0 };
                s.set_capacity(link, c);
            }
        }
        if step % 100 == 99 {
            check_against_reference(&s, 1500);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(Vec<usize>, Option<f64>),
    Remove(usize),
    SetCap(usize, f64),
    AddLink(f64),
}

fn capacity_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![1 => Just(0.0), 1 => Just(1.0), 8 => 0.001f64..100.0]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (
            prop::collection::vec(0usize..64, 0..5),
            prop::option::weighted(0.3, prop_oneof![Just(0.0), 0.01f64..50.0]),
        )
            .prop_map(|(p, c)| Op::Add(p, c)),
        3 => (0usize..1000).prop_map(Op::Remove),
        2 => (0usize..64, capacity_strategy()).prop_map(|(l, c)| Op::SetCap(l, c)),
        1 => capacity_strategy().prop_map(Op::AddLink),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The shortcuts for components of at most one flow (at refresh, and at once for a flow
    /// alone on quiet links or a link left empty) give the bits progressive filling gives: same rates, loads and change reports after every batch of mutations. Few flows on
    /// a few links, so lone flows, emptied links and capped flows are frequent.
    #[test]
    fn small_components_match_progressive_filling(
        caps in prop::collection::vec(capacity_strategy(), 1..10),
        ops in prop::collection::vec((op_strategy(), any::<bool>()), 1..60),
    ) {
        let mut fast = Sharing::new(caps.clone());
        let mut slow = Sharing::new(caps);
        slow.general_only();
        let mut live: Vec<FlowId> = Vec::new();
        let mut max_id = 0u32;
        for (op, check) in ops {
            let nl = fast.num_links();
            match op {
                Op::Add(p, cap) => {
                    let path: Vec<LinkIdx> = p.iter().take(2).map(|&x| l((x % nl) as u32)).collect();
                    let cap = match cap {
                        Some(c) => c,
                        None if path.is_empty() => 1.0,
                        None => f64::INFINITY,
                    };
                    let f = fast.add_flow(&path, cap);
                    prop_assert_eq!(slow.add_flow(&path, cap), f);
                    live.push(f);
                    max_id = max_id.max(f.0 + 1);
                }
                Op::Remove(k) => {
                    if !live.is_empty() {
                        let f = live.swap_remove(k % live.len());
                        fast.remove_flow(f);
                        slow.remove_flow(f);
                    }
                }
                Op::SetCap(x, c) => {
                    fast.set_capacity(l((x % nl) as u32), c);
                    slow.set_capacity(l((x % nl) as u32), c);
                }
                Op::AddLink(c) => {
                    fast.add_link(c);
                    slow.add_link(c);
                }
            }
            if check {
                prop_assert_eq!(drain(&mut fast), drain(&mut slow));
                for f in live_ids(&fast, max_id) {
                    prop_assert_eq!(fast.rate(f).to_bits(), slow.rate(f).to_bits());
                }
                for i in 0..fast.num_links() as u32 {
                    prop_assert_eq!(fast.link_load(l(i)).to_bits(), slow.link_load(l(i)).to_bits());
                }
            }
        }
    }

    #[test]
    fn incremental_matches_reference(
        caps in prop::collection::vec(capacity_strategy(), 1..10),
        ops in prop::collection::vec((op_strategy(), any::<bool>()), 1..60),
    ) {
        let mut s = Sharing::new(caps);
        let mut live: Vec<FlowId> = Vec::new();
        let mut max_id = 0u32;
        // Model of what the previous drain reported, per live flow.
        let mut drained: BTreeMap<FlowId, f64> = BTreeMap::new();
        let n = ops.len();
        for (i, (op, check)) in ops.into_iter().enumerate() {
            let nl = s.num_links();
            match op {
                Op::Add(p, cap) => {
                    let path: Vec<LinkIdx> = p.iter().map(|&x| l((x % nl) as u32)).collect();
                    let cap = match cap {
                        Some(c) => c,
                        None if path.is_empty() => 1.0,
                        None => f64::INFINITY,
                    };
                    let f = s.add_flow(&path, cap);
                    prop_assert!(!live.contains(&f));
                    live.push(f);
                    max_id = max_id.max(f.0 + 1);
                }
                Op::Remove(k) => {
                    if !live.is_empty() {
                        let f = live.swap_remove(k % live.len());
                        s.remove_flow(f);
                        drained.remove(&f);
                    }
                }
                Op::SetCap(x, c) => s.set_capacity(l((x % nl) as u32), c),
                Op::AddLink(c) => {
                    s.add_link(c);
                }
            }
            // Checks (which refresh) only now and then, so mutations also get batched.
            if check || i + 1 == n {
                check_against_reference(&s, max_id);
                let mut expected = Vec::new();
                for f in live_ids(&s, max_id) {
                    let old = drained.get(&f).copied().unwrap_or(0.0);
                    let new = s.rate(f);
                    if old != new {
                        expected.push(RateChange { flow: f, old_rate: old, new_rate: new });
                    }
                }
                let got = drain(&mut s);
                prop_assert_eq!(&got, &expected);
                for c in got {
                    drained.insert(c.flow, c.new_rate);
                }
            }
        }
    }
}
