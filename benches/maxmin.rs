//! Throughput of incremental max-min sharing on a two-tier leaf/spine fabric.
//!
//! 64 nodes x 8 NICs; each NIC has a TX and an RX link of 50 bytes/ns; 8 nodes per leaf, each
//! leaf has one uplink and one downlink of `8 * 8 * 50 / oversub` bytes/ns. About `--flows` flows
//! stay alive while flows end and start alternately (random pairs from a xorshift generator), and
//! rates are drained after every mutation, as the simulator does. Each traffic pattern is run
//! incrementally and with a naive full recomputation (every link marked dirty) after every
//! mutation. Mutation counts differ per pattern so that the whole run stays around 20 s on two
//! cores; `--scale X` multiplies them all.
//!
//! `cargo bench --bench maxmin -- [--flows N] [--oversub X] [--scale X] [--seed N]`

use pdsim::fabric::maxmin::{FlowId, LinkIdx, RateChange, Sharing};

use std::time::Instant;

const NODES: usize = 64;
const NICS: usize = 8;
const NODES_PER_LEAF: usize = 8;
const LEAVES: usize = NODES / NODES_PER_LEAF;
/// Bytes per nanosecond, each direction (400 Gb/s).
const NIC_RATE: f64 = 50.0;

struct Config {
    flows: usize,
    oversub: f64,
    scale: f64,
    seed: u64,
}

impl Config {
    fn from_args() -> Config {
        let mut cfg = Config {
            flows: 10_000,
            oversub: 2.0,
            scale: 1.0,
            seed: 0x2545_F491_4F6C_DD1D,
        };
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut i = 0;
        while i < args.len() {
            let value = || {
                args.get(i + 1)
                    .unwrap_or_else(|| panic!("{} needs a value", args[i]))
            };
            match args[i].as_str() {
                "--flows" => cfg.flows = value().parse().expect("--flows N"),
                "--scale" => cfg.scale = value().parse().expect("--scale X"),
                "--oversub" => cfg.oversub = value().parse().expect("--oversub X"),
                "--seed" => cfg.seed = value().parse().expect("--seed N"),
                _ => {
                    i += 1; // e.g. the `--bench` that cargo passes
                    continue;
                }
            }
            i += 2;
        }
        cfg
    }
}

/// Marsaglia's xorshift64: tiny, deterministic, good enough to pick endpoints.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

struct Fabric {
    /// Indexed by `node * NICS + nic`.
    tx: Vec<LinkIdx>,
    rx: Vec<LinkIdx>,
    /// Indexed by leaf.
    up: Vec<LinkIdx>,
    down: Vec<LinkIdx>,
}

impl Fabric {
    fn build(s: &mut Sharing, oversub: f64) -> Fabric {
        let spine = NODES_PER_LEAF as f64 * NICS as f64 * NIC_RATE / oversub;
        Fabric {
            tx: (0..NODES * NICS).map(|_| s.add_link(NIC_RATE)).collect(),
            rx: (0..NODES * NICS).map(|_| s.add_link(NIC_RATE)).collect(),
            up: (0..LEAVES).map(|_| s.add_link(spine)).collect(),
            down: (0..LEAVES).map(|_| s.add_link(spine)).collect(),
        }
    }

    fn path(
        &self,
        (src_node, src_nic): (usize, usize),
        (dst_node, dst_nic): (usize, usize),
    ) -> Vec<LinkIdx> {
        let (src_leaf, dst_leaf) = (src_node / NODES_PER_LEAF, dst_node / NODES_PER_LEAF);
        let mut p = vec![self.tx[src_node * NICS + src_nic]];
        if src_leaf != dst_leaf {
            p.push(self.up[src_leaf]);
            p.push(self.down[dst_leaf]);
        }
        p.push(self.rx[dst_node * NICS + dst_nic]);
        p
    }
}

#[derive(Clone, Copy, Debug)]
enum Traffic {
    /// Any NIC to any NIC of another node: most flows cross the spine, and all flows form a
    /// single component.
    Random,
    /// NIC `r` to NIC `r` of another node on the same leaf: never crosses the spine, one
    /// component per (leaf, rail).
    LeafLocalRail,
}

impl Traffic {
    /// Mutations for the (incremental, naive) runs at scale 1.
    fn mutations(self) -> (usize, usize) {
        match self {
            Traffic::Random => (20_000, 1_000),
            Traffic::LeafLocalRail => (200_000, 2_000),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Incremental,
    Naive,
}

struct Stats {
    mutations: usize,
    secs: f64,
    recomputations: u64,
    recomputed_flows: u64,
    changes: usize,
}

fn pick_pair(rng: &mut XorShift, traffic: Traffic) -> ((usize, usize), (usize, usize)) {
    let src = (rng.below(NODES), rng.below(NICS));
    let dst = match traffic {
        Traffic::Random => {
            let node = (src.0 + 1 + rng.below(NODES - 1)) % NODES;
            (node, rng.below(NICS))
        }
        Traffic::LeafLocalRail => {
            let leaf_base = src.0 / NODES_PER_LEAF * NODES_PER_LEAF;
            let offset = (src.0 - leaf_base + 1 + rng.below(NODES_PER_LEAF - 1)) % NODES_PER_LEAF;
            (leaf_base + offset, src.1)
        }
    };
    (src, dst)
}

fn add_random_flow(
    s: &mut Sharing,
    fabric: &Fabric,
    rng: &mut XorShift,
    traffic: Traffic,
) -> FlowId {
    let (src, dst) = pick_pair(rng, traffic);
    // One flow in eight is capped (e.g. a slow receiver), to exercise caps as well.
    let cap = if rng.below(8) == 0 {
        10.0
    } else {
        f64::INFINITY
    };
    s.add_flow(&fabric.path(src, dst), cap)
}

fn run(cfg: &Config, traffic: Traffic, mode: Mode, mutations: usize) -> Stats {
    let mut rng = XorShift(cfg.seed);
    let mut s = Sharing::new(Vec::new());
    let fabric = Fabric::build(&mut s, cfg.oversub);
    let mut live: Vec<FlowId> = (0..cfg.flows)
        .map(|_| add_random_flow(&mut s, &fabric, &mut rng, traffic))
        .collect();
    let mut changes: Vec<RateChange> = Vec::new();
    s.drain_changes(&mut changes);
    changes.clear();

    let (recomp0, flows0) = (s.recomputations(), s.recomputed_flows());
    let mut total_changes = 0;
    let start = Instant::now();
    for i in 0..mutations {
        if i % 2 == 0 {
            let f = live.swap_remove(rng.below(live.len()));
            s.remove_flow(f);
        } else {
            live.push(add_random_flow(&mut s, &fabric, &mut rng, traffic));
        }
        if mode == Mode::Naive {
            s.invalidate_all();
        }
        s.drain_changes(&mut changes);
        total_changes += changes.len();
        changes.clear();
    }
    Stats {
        mutations,
        secs: start.elapsed().as_secs_f64(),
        recomputations: s.recomputations() - recomp0,
        recomputed_flows: s.recomputed_flows() - flows0,
        changes: total_changes,
    }
}

fn main() {
    let cfg = Config::from_args();
    println!(
        "fabric: {NODES} nodes x {NICS} NICs ({NIC_RATE} bytes/ns TX+RX), {LEAVES} leaves, \
         oversubscription {}, ~{} live flows, rates drained after every mutation",
        cfg.oversub, cfg.flows
    );
    println!(
        "{:<16} {:<12} {:>9} {:>8} {:>12} {:>12} {:>10} {:>12}",
        "traffic",
        "mode",
        "mutations",
        "secs",
        "mutations/s",
        "recomps/s",
        "comp size",
        "changes/mut"
    );
    let start = Instant::now();
    for traffic in [Traffic::Random, Traffic::LeafLocalRail] {
        let mut per_sec = [0.0; 2];
        for (k, mode) in [Mode::Incremental, Mode::Naive].into_iter().enumerate() {
            let (incremental, naive) = traffic.mutations();
            let n = match mode {
                Mode::Incremental => incremental,
                Mode::Naive => naive,
            };
            let n = ((n as f64 * cfg.scale) as usize).max(2);
            let st = run(&cfg, traffic, mode, n);
            per_sec[k] = st.mutations as f64 / st.secs;
            println!(
                "{:<16} {:<12} {:>9} {:>8.2} {:>12.0} {:>12.0} {:>10.1} {:>12.1}",
                format!("{traffic:?}"),
                format!("{mode:?}"),
                st.mutations,
                st.secs,
                per_sec[k],
                st.recomputations as f64 / st.secs,
                st.recomputed_flows as f64 / st.recomputations.max(1) as f64,
                st.changes as f64 / st.mutations.max(1) as f64,
            );
        }
        println!(
            "{:<16} incremental / naive: {:.1}x",
            format!("{traffic:?}"),
            per_sec[0] / per_sec[1]
        );
    }
    println!(
        "comp size = mean flows per component recomputation; changes/mut = rate changes drained \
         per mutation; total {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
