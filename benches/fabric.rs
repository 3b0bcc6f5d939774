//! Throughput of the fabric driven exactly as the simulator drives it: an event queue holding one
//! timer for the whole fabric, `start_transfer` / `next_due` / `fire_due`, calibrated parameters (latency, per-WR cap, NIC
//! efficiency), on a 64-node leaf/spine fabric (8 GPUs and 8 × 400 Gb/s NICs per node, 8 nodes
//! per leaf, oversubscription 2).
//!
//! About `--flows` transfers (default 10,000) stay alive: each one that ends is replaced at the
//! same instant by a new one, so flows start and end continuously. Each transfer costs two solver
//! mutations (its flow joins the sharing when its latency is paid, and leaves when it ends) and
//! a component re-solve after each event that touched the sharing. Two traffic patterns, each at
//! `--flows` and at a fifth of it (how the cost per end grows with the number of live flows):
//! - `rail-local`: GPU g of a node → GPU g of another node of the same leaf; paths never cross
//!   the spine, so components are small (one per leaf and rail);
//! - `random`: any GPU → any GPU of another node; most paths cross the spine and all flows form
//!   one component.
//!
//! `cargo bench --bench fabric -- [--flows N] [--scale X] [--seed N]`

use std::time::Instant;

use pdsim::engine::{EventQueue, Nanos};
use pdsim::fabric::{
    Fabric, FabricParams, FlowEnd, FlowOutcome, GpuId, TopologyConfig, TopologyKind,
};

const NODES: u32 = 64;
const GPUS: u32 = 8;
const NODES_PER_LEAF: u32 = 8;

struct Config {
    /// Live transfers of the main runs.
    flows: usize,
    scale: f64,
    seed: u64,
}

impl Config {
    fn from_args() -> Config {
        let mut cfg = Config {
            flows: 10_000,
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

    fn below(&mut self, n: u32) -> u32 {
        (self.next() % u64::from(n)) as u32
    }
}

#[derive(Clone, Copy, Debug)]
enum Traffic {
    RailLocal,
    Random,
}

/// The fabric's timer event, by number: stale unless it is the current one.
#[derive(Clone, Copy, Debug)]
struct Timer(u64);

impl Traffic {
    fn pick(self, rng: &mut XorShift) -> (GpuId, GpuId) {
        let src = GpuId {
            node: rng.below(NODES),
            local: rng.below(GPUS),
        };
        let dst = match self {
            Traffic::RailLocal => {
                let base = src.node / NODES_PER_LEAF * NODES_PER_LEAF;
                let off = (src.node - base + 1 + rng.below(NODES_PER_LEAF - 1)) % NODES_PER_LEAF;
                GpuId {
                    node: base + off,
                    local: src.local,
                }
            }
            Traffic::Random => GpuId {
                node: (src.node + 1 + rng.below(NODES - 1)) % NODES,
                local: rng.below(GPUS),
            },
        };
        (src, dst)
    }
}

struct Run {
    fabric: Fabric,
    q: EventQueue<Timer>,
    ends: Vec<FlowEnd>,
    rng: XorShift,
    traffic: Traffic,
    /// Number and time (ns) of the live timer event.
    timer: (u64, Option<Nanos>),
    next_token: u64,
}

impl Run {
    /// One transfer of 1–32 MiB (a chunk of one rank), as 72 page writes.
    fn start(&mut self, now: Nanos) {
        let (src, dst) = self.traffic.pick(&mut self.rng);
        let bytes = (1 + u64::from(self.rng.below(32))) << 20;
        self.fabric
            .start_transfer(now, src, dst, bytes, 72, self.next_token);
        self.next_token += 1;
    }

    /// After every call that changed the fabric: move the timer if its time changed.
    fn schedule(&mut self, now: Nanos) {
        let due = self.fabric.next_due(now);
        if due != self.timer.1 {
            self.timer = (self.timer.0 + 1, due);
            if let Some(at) = due {
                self.q.schedule_at(at, Timer(self.timer.0));
            }
        }
    }
}

struct Stats {
    ends: usize,
    events: u64,
    secs: f64,
    sim_ns: Nanos,
    mutations: u64,
    recomputations: u64,
    recomputed_flows: u64,
    /// Events pending in the queue at the end (stale ones included).
    queued: usize,
}

/// Fills the fabric with about `flows` transfers, lets every initial one pay its latency, then
/// measures the next `ends` transfer ends.
fn run(flows: usize, seed: u64, traffic: Traffic, ends: usize) -> Stats {
    let topo = TopologyConfig {
        nodes: NODES,
        gpus_per_node: GPUS,
        nics_per_node: GPUS,
        kind: TopologyKind::LeafSpine,
        nodes_per_leaf: NODES_PER_LEAF,
        oversubscription: 2.0,
        ..TopologyConfig::default()
    };
    let params = FabricParams::default();
    let latency = params.base_latency_ns + params.batch_overhead_ns;
    let mut r = Run {
        fabric: Fabric::build(topo, params).expect("valid topology"),
        q: EventQueue::new(),
        ends: Vec::new(),
        rng: XorShift(seed),
        traffic,
        timer: (0, None),
        next_token: 0,
    };
    // Starts spread over 1 ms, so that ends do not come in lockstep.
    let mut starts: Vec<Nanos> = (0..flows)
        .map(|_| u64::from(r.rng.below(1_000_000)))
        .collect();
    starts.sort_unstable();
    for at in starts {
        while r.q.peek_time().is_some_and(|t| t <= at) {
            step(&mut r);
        }
        r.start(at);
        r.schedule(at);
    }
    while r.q.peek_time().is_some_and(|t| t <= 1_000_000 + latency) {
        step(&mut r);
    }

    let w0 = r.fabric.solver_work();
    let (ev0, s0, t0) = (r.q.events_popped(), r.fabric.stats(), r.q.now());
    let wall = Instant::now();
    while (r.fabric.stats().completed - s0.completed) < ends as u64 {
        step(&mut r);
    }
    let secs = wall.elapsed().as_secs_f64();
    let w1 = r.fabric.solver_work();
    assert_eq!(r.fabric.stats().failed, 0, "no faults, no failures");
    Stats {
        ends,
        events: r.q.events_popped() - ev0,
        secs,
        sim_ns: r.q.now() - t0,
        mutations: w1.mutations - w0.mutations,
        recomputations: w1.recomputations - w0.recomputations,
        recomputed_flows: w1.recomputed_flows - w0.recomputed_flows,
        queued: r.q.len(),
    }
}

/// Handles one event; a transfer that ends is replaced by a new one at the same instant.
fn step(r: &mut Run) {
    let (now, Timer(n)) = r.q.pop().expect("events left");
    if n == r.timer.0 {
        r.timer.1 = None;
        r.fabric.fire_due(now, &mut r.ends);
    }
    let ended = std::mem::take(&mut r.ends);
    for end in &ended {
        assert_eq!(end.outcome, FlowOutcome::Completed);
        r.start(now);
    }
    r.ends = ended;
    r.ends.clear();
    r.schedule(now);
}

fn header() {
    println!(
        "{:<10} {:>6} {:>7} {:>6} {:>10} {:>8} {:>12} {:>10} {:>9} {:>7} {:>9}",
        "traffic",
        "flows",
        "ends",
        "secs",
        "events/s",
        "ends/s",
        "mutations/s",
        "recomps/s",
        "comp size",
        "sim ms",
        "queued"
    );
}

fn row(cfg: &Config, flows: usize, traffic: Traffic, ends: usize) {
    let n = ((ends as f64 * cfg.scale) as usize).max(1);
    let st = run(flows, cfg.seed, traffic, n);
    println!(
        "{:<10} {:>6} {:>7} {:>6.2} {:>10.0} {:>8.0} {:>12.0} {:>10.0} {:>9.1} {:>7.1} {:>9}",
        format!("{traffic:?}"),
        flows,
        st.ends,
        st.secs,
        st.events as f64 / st.secs,
        st.ends as f64 / st.secs,
        st.mutations as f64 / st.secs,
        st.recomputations as f64 / st.secs,
        st.recomputed_flows as f64 / st.recomputations.max(1) as f64,
        st.sim_ns as f64 / 1e6,
        st.queued,
    );
}

fn main() {
    let cfg = Config::from_args();
    println!(
        "fabric: {NODES} nodes x {GPUS} GPUs/NICs, leaf/spine ({NODES_PER_LEAF} nodes per leaf, \
         oversubscription 2), calibrated parameters, transfers of 1-32 MiB replaced as they end"
    );
    let start = Instant::now();
    header();
    for (traffic, ends) in [(Traffic::RailLocal, 100_000), (Traffic::Random, 3_000)] {
        row(&cfg, cfg.flows, traffic, ends);
    }
    // A fifth of the flows: in `random` traffic every end re-solves the one big component, so
    // the cost per end should fall about five-fold; in `rail-local` it should barely move.
    let small = (cfg.flows / 5).max(1);
    for (traffic, ends) in [(Traffic::RailLocal, 30_000), (Traffic::Random, 3_000)] {
        row(&cfg, small, traffic, ends);
    }
    println!(
        "mutations = solver mutations (a transfer's flow joins the sharing when its latency is \
         paid, leaves when it ends); recomps = component re-solves; comp size = mean flows per \
         re-solve; events = timer events popped, stale ones included; queued = events left in \
         the queue at the end (one live timer at most, plus stale ones); total {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
