//! Topology: nodes of GPUs, NICs with GPU affinity, switch tiers, NVLink, and the links a transfer
//! crosses.
//!
//! # Links
//! Every link is one direction of one physical resource, with a capacity in **bytes per ns**:
//! - each NIC has a TX and an RX link (full duplex);
//! - each GPU has an NVLink TX and RX link, each half the GPU's bidirectional NVLink bandwidth
//!   (a same-node transfer crosses the sender's TX and the receiver's RX, never a NIC);
//! - each first-tier switch (a rail switch, or a leaf) has an uplink to the spine and a downlink
//!   from it. Switches themselves are non-blocking: only these uplinks and downlinks are
//!   oversubscribed;
//! - each GPU has an RDMA TX and RX link: what its Mooncake transfer engine moves between GPU
//!   memory and its NICs (the PCIe / GPUDirect path and the engine's posting threads). A KV
//!   transfer crosses the sender's and the receiver's; DeepEP's all-to-all (GPU-initiated,
//!   NVSHMEM/IBGDA) does not. Why here and not on the NIC: the limit is per engine, so GPUs that
//!   share a NIC each bring their own, and the NIC carries their sum up to its wire rate.
//!
//! # Paths between NICs
//! - `rail`: NIC `i` of every node hangs off rail switch `i`. NIC `i` → NIC `i` of another node
//!   stays on the rail: `[TX, RX]`. NIC `i` → NIC `j ≠ i` goes up rail `i` to the spine and down
//!   rail `j`: `[TX, up(i), down(j), RX]`.
//! - `leaf_spine`: nodes `[k·nodes_per_leaf, (k+1)·nodes_per_leaf)` hang off leaf `k`. Within a
//!   leaf: `[TX, RX]`; across leaves: `[TX, up(leaf a), down(leaf b), RX]`.
//!
//! The uplink and the downlink of a switch each carry the line rate of the NICs under it divided
//! by `oversubscription` (1 = non-blocking).

use thiserror::Error;

use super::maxmin::LinkIdx;

/// Index of a NIC in the cluster: `node × nics_per_node + local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NicId(pub u32);

/// A GPU, the endpoint of every transfer: `local` is its index within `node`.
/// The global index used by the placement is `node × gpus_per_node + local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId {
    /// Node index.
    pub node: u32,
    /// GPU index within the node.
    pub local: u32,
}

impl GpuId {
    /// The GPU with global index `gpu` on nodes of `gpus_per_node` GPUs.
    pub fn from_global(gpu: u32, gpus_per_node: u32) -> Self {
        Self {
            node: gpu / gpus_per_node,
            local: gpu % gpus_per_node,
        }
    }
}

/// The switch tier of the fabric (`fabric.topology` in a scenario: `rail` or `leaf_spine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    /// Rail-optimised: same-index NICs of all nodes share one rail switch; crossing rails goes
    /// through the spine.
    Rail,
    /// Two tiers: `nodes_per_leaf` nodes per leaf switch, leaves joined by a spine.
    LeafSpine,
}

/// One direction of one physical resource (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    /// What a NIC sends.
    NicTx(NicId),
    /// What a NIC receives.
    NicRx(NicId),
    /// What a GPU sends over NVLink.
    NvlinkTx(GpuId),
    /// What a GPU receives over NVLink.
    NvlinkRx(GpuId),
    /// First-tier switch (rail or leaf) `s` to the spine.
    Uplink(u32),
    /// Spine to first-tier switch (rail or leaf) `s`.
    Downlink(u32),
    /// What a GPU's transfer engine sends to its NICs (PCIe / GPUDirect).
    GpuRdmaTx(GpuId),
    /// What a GPU's transfer engine receives from its NICs.
    GpuRdmaRx(GpuId),
}

/// The hardware the scenario describes. Every field has a default (see [`Default`]); build it
/// with `TopologyConfig { nodes: 4, ..Default::default() }`.
#[derive(Clone, Debug, PartialEq)]
pub struct TopologyConfig {
    /// Nodes in the cluster. Default 2.
    pub nodes: u32,
    /// GPUs per node. Default 8 (HGX H100).
    pub gpus_per_node: u32,
    /// NICs per node; GPU `g` uses NIC `g × nics_per_node / gpus_per_node` of its node.
    /// Default 8: one per GPU, as on DGX/HGX H100 (docs/numbers.md §1.1).
    pub nics_per_node: u32,
    /// NIC line rate, bytes per ns, each direction. Default 50 (ConnectX-7, 400 Gb/s).
    pub nic_bytes_per_ns: f64,
    /// Switch tier. Default [`TopologyKind::Rail`].
    pub kind: TopologyKind,
    /// Nodes under one leaf (`LeafSpine` only; the last leaf may hold fewer). Default 8.
    pub nodes_per_leaf: u32,
    /// Line rate of the NICs under a switch ÷ capacity of its uplink (and of its downlink);
    /// `>= 1`. Default 1 (non-blocking).
    pub oversubscription: f64,
    /// Bidirectional NVLink bandwidth of one GPU, bytes per ns; each direction gets half.
    /// Default 900 (H100 SXM, docs/numbers.md §1).
    pub nvlink_bytes_per_ns: f64,
    /// Consecutive nodes whose GPUs share one NVLink domain that KV transfers may cross
    /// (Mooncake's multi-node NVLink transport on an NVL72 rack of 4-GPU trays: 18). Default 1:
    /// only GPUs of one node reach each other over NVLink.
    pub nodes_per_nvlink_domain: u32,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        Self {
            nodes: 2,
            gpus_per_node: 8,
            nics_per_node: 8,
            nic_bytes_per_ns: 50.0,
            kind: TopologyKind::Rail,
            nodes_per_leaf: 8,
            oversubscription: 1.0,
            nvlink_bytes_per_ns: 900.0,
            nodes_per_nvlink_domain: 1,
        }
    }
}

/// A topology that cannot be built; the message names the field and the fix.
#[derive(Debug, Error, PartialEq)]
pub enum TopologyError {
    /// A count is zero.
    #[error("fabric.{field} must be >= 1, got 0")]
    Zero {
        /// Field name.
        field: &'static str,
    },
    /// A rate is not a positive finite number.
    #[error("fabric.{field} must be a positive finite number of bytes/ns, got {value}")]
    Rate {
        /// Field name.
        field: &'static str,
        /// Value given.
        value: f64,
    },
    /// Oversubscription below 1.
    #[error("fabric.oversubscription must be >= 1 (1 = non-blocking), got {0}")]
    Oversubscription(f64),
    /// A model parameter out of range (see `FabricParams::validate`).
    #[error("fabric.{0}")]
    Param(String),
}

impl TopologyConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), TopologyError> {
        for (field, v) in [
            ("nodes", self.nodes),
            ("gpus_per_node", self.gpus_per_node),
            ("nics_per_node", self.nics_per_node),
            ("nodes_per_leaf", self.nodes_per_leaf),
            ("nodes_per_nvlink_domain", self.nodes_per_nvlink_domain),
        ] {
            if v == 0 {
                return Err(TopologyError::Zero { field });
            }
        }
        for (field, value) in [
            ("nic_bytes_per_ns", self.nic_bytes_per_ns),
            ("nvlink_bytes_per_ns", self.nvlink_bytes_per_ns),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(TopologyError::Rate { field, value });
            }
        }
        if !(self.oversubscription.is_finite() && self.oversubscription >= 1.0) {
            return Err(TopologyError::Oversubscription(self.oversubscription));
        }
        Ok(())
    }
}

/// At most this many links on a path (`[rdma TX, TX, up, down, RX, rdma RX]`).
pub(crate) const MAX_PATH: usize = 6;

/// A route: the links a flow crosses, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Path {
    links: [LinkIdx; MAX_PATH],
    len: u8,
}

impl Path {
    /// No links: the path of a flow that is not moving (never read until it moves).
    pub(crate) const EMPTY: Path = Path {
        links: [LinkIdx(0); MAX_PATH],
        len: 0,
    };

    fn new(links: &[LinkIdx]) -> Self {
        let mut p = Self {
            links: [LinkIdx(0); MAX_PATH],
            len: links.len() as u8,
        };
        p.links[..links.len()].copy_from_slice(links);
        p
    }

    pub(crate) fn links(&self) -> &[LinkIdx] {
        &self.links[..self.len as usize]
    }
}

/// The built topology: link numbering, capacities and routes. Pure: no state changes after
/// construction (link health lives in the fabric).
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) cfg: TopologyConfig,
    /// First NVLink link index (NIC links come first: TX of NIC `n` at `2n`, RX at `2n + 1`).
    nv_base: u32,
    /// First switch link index (uplink of switch `s` at `sw_base + 2s`, downlink at `+ 1`).
    sw_base: u32,
    switches: u32,
    /// First GPU RDMA link index (TX of GPU `g` at `rdma_base + 2g`, RX at `+ 1`): after the
    /// switches, so the older links keep their numbers (and `links.csv` its first rows).
    rdma_base: u32,
}

impl Layout {
    pub(crate) fn new(cfg: TopologyConfig) -> Self {
        let nics = cfg.nodes * cfg.nics_per_node;
        let gpus = cfg.nodes * cfg.gpus_per_node;
        let switches = Self::switch_count(&cfg);
        Self {
            nv_base: 2 * nics,
            sw_base: 2 * nics + 2 * gpus,
            switches,
            rdma_base: 2 * nics + 2 * gpus + 2 * switches,
            cfg,
        }
    }

    /// First-tier switches of `cfg`: one per rail, or one per leaf (the last may be partial).
    pub(crate) fn switch_count(cfg: &TopologyConfig) -> u32 {
        match cfg.kind {
            TopologyKind::Rail => cfg.nics_per_node,
            TopologyKind::LeafSpine => cfg.nodes.div_ceil(cfg.nodes_per_leaf.max(1)),
        }
    }

    pub(crate) fn num_links(&self) -> u32 {
        self.rdma_base + 2 * self.cfg.nodes * self.cfg.gpus_per_node
    }

    pub(crate) fn num_nics(&self) -> u32 {
        self.cfg.nodes * self.cfg.nics_per_node
    }

    pub(crate) fn num_switches(&self) -> u32 {
        self.switches
    }

    fn gpu_index(&self, g: GpuId) -> u32 {
        g.node * self.cfg.gpus_per_node + g.local
    }

    pub(crate) fn check_gpu(&self, g: GpuId) {
        assert!(
            g.node < self.cfg.nodes && g.local < self.cfg.gpus_per_node,
            "GPU {g:?} outside the fabric ({} nodes x {} GPUs)",
            self.cfg.nodes,
            self.cfg.gpus_per_node
        );
    }

    pub(crate) fn check_nic(&self, n: NicId) {
        assert!(
            n.0 < self.num_nics(),
            "NIC {} outside the fabric ({} NICs)",
            n.0,
            self.num_nics()
        );
    }

    /// Index of `link` in the solver.
    pub(crate) fn index(&self, link: Link) -> LinkIdx {
        match link {
            Link::NicTx(n) => {
                self.check_nic(n);
                Self::nic_link(n, false)
            }
            Link::NicRx(n) => {
                self.check_nic(n);
                Self::nic_link(n, true)
            }
            Link::NvlinkTx(g) => {
                self.check_gpu(g);
                LinkIdx(self.nv_base + 2 * self.gpu_index(g))
            }
            Link::NvlinkRx(g) => {
                self.check_gpu(g);
                LinkIdx(self.nv_base + 2 * self.gpu_index(g) + 1)
            }
            Link::Uplink(s) | Link::Downlink(s) => {
                assert!(s < self.switches, "switch {s} outside the fabric");
                self.switch_link(s, matches!(link, Link::Downlink(_)))
            }
            Link::GpuRdmaTx(g) => {
                self.check_gpu(g);
                self.rdma_link(g, false)
            }
            Link::GpuRdmaRx(g) => {
                self.check_gpu(g);
                self.rdma_link(g, true)
            }
        }
    }

    /// The solver index of GPU `g`'s RDMA TX link (its RX link when `rx`), unchecked.
    #[inline(always)]
    fn rdma_link(&self, g: GpuId, rx: bool) -> LinkIdx {
        LinkIdx(self.rdma_base + 2 * self.gpu_index(g) + u32::from(rx))
    }

    /// The solver index of NIC `n`'s TX link (its RX link when `rx`), unchecked: the
    /// numbering [`Layout::index`] and the hot [`Layout::nic_path`] share.
    #[inline(always)]
    fn nic_link(n: NicId, rx: bool) -> LinkIdx {
        LinkIdx(2 * n.0 + u32::from(rx))
    }

    /// The solver index of switch `s`'s uplink (its downlink when `down`), unchecked.
    #[inline(always)]
    fn switch_link(&self, s: u32, down: bool) -> LinkIdx {
        LinkIdx(self.sw_base + 2 * s + u32::from(down))
    }

    /// The link at solver index `i`.
    pub(crate) fn link(&self, i: LinkIdx) -> Link {
        let i = i.0;
        if i < self.nv_base {
            let n = NicId(i / 2);
            if i.is_multiple_of(2) {
                Link::NicTx(n)
            } else {
                Link::NicRx(n)
            }
        } else if i < self.sw_base {
            let g = GpuId::from_global((i - self.nv_base) / 2, self.cfg.gpus_per_node);
            if i.is_multiple_of(2) {
                Link::NvlinkTx(g)
            } else {
                Link::NvlinkRx(g)
            }
        } else if i < self.rdma_base {
            let s = (i - self.sw_base) / 2;
            if (i - self.sw_base).is_multiple_of(2) {
                Link::Uplink(s)
            } else {
                Link::Downlink(s)
            }
        } else {
            let g = GpuId::from_global((i - self.rdma_base) / 2, self.cfg.gpus_per_node);
            if (i - self.rdma_base).is_multiple_of(2) {
                Link::GpuRdmaTx(g)
            } else {
                Link::GpuRdmaRx(g)
            }
        }
    }

    /// Capacity of `link` when healthy, bytes/ns. NIC links carry `nic_bytes_per_ns` (what a
    /// NIC achieves, [`super::FabricParams::nic_capacity`]); a GPU's RDMA links carry
    /// `engine_bytes_per_ns` ([`super::FabricParams::engine_bytes_per_ns`]); switch links carry
    /// the wire rate of their members ÷ oversubscription.
    pub(crate) fn nominal_capacity(
        &self,
        link: Link,
        nic_bytes_per_ns: f64,
        engine_bytes_per_ns: f64,
    ) -> f64 {
        let c = &self.cfg;
        match link {
            Link::NicTx(_) | Link::NicRx(_) => nic_bytes_per_ns,
            Link::GpuRdmaTx(_) | Link::GpuRdmaRx(_) => engine_bytes_per_ns,
            Link::NvlinkTx(_) | Link::NvlinkRx(_) => c.nvlink_bytes_per_ns / 2.0,
            Link::Uplink(s) | Link::Downlink(s) => {
                let members = match c.kind {
                    // One NIC of every node.
                    TopologyKind::Rail => c.nodes,
                    TopologyKind::LeafSpine => {
                        let first = s * c.nodes_per_leaf;
                        let nodes = (c.nodes - first).min(c.nodes_per_leaf);
                        nodes * c.nics_per_node
                    }
                };
                f64::from(members) * c.nic_bytes_per_ns / c.oversubscription
            }
        }
    }

    /// The NIC GPU `g` is attached to (its preferred NIC).
    pub(crate) fn affinity(&self, g: GpuId) -> NicId {
        let c = &self.cfg;
        let local =
            (u64::from(g.local) * u64::from(c.nics_per_node) / u64::from(c.gpus_per_node)) as u32;
        NicId(g.node * c.nics_per_node + local)
    }

    /// NICs every GPU has to itself when a node has more NICs than GPUs (`nics_per_node ÷
    /// gpus_per_node`, rounded down; 1 otherwise): the NICs on its PCIe switch, which
    /// Mooncake's topology discovery lists as the GPU's preferred devices. They are the NICs
    /// `candidate(g, 0..rails)`.
    pub(crate) fn rails(&self) -> u32 {
        (self.cfg.nics_per_node / self.cfg.gpus_per_node.max(1)).max(1)
    }

    /// The `k`-th NIC Mooncake may use for GPU `g`: `k = 0` is the preferred (affine) NIC, then
    /// the node's other NICs in ring order from it (the "secondary" list).
    pub(crate) fn candidate(&self, g: GpuId, k: u32) -> NicId {
        let n = self.cfg.nics_per_node;
        let a = self.affinity(g).0 - g.node * n;
        NicId(g.node * n + (a + k) % n)
    }

    fn node_of(&self, nic: NicId) -> u32 {
        nic.0 / self.cfg.nics_per_node
    }

    fn switch_of(&self, nic: NicId) -> u32 {
        match self.cfg.kind {
            TopologyKind::Rail => nic.0 % self.cfg.nics_per_node,
            TopologyKind::LeafSpine => self.node_of(nic) / self.cfg.nodes_per_leaf,
        }
    }

    /// Route from `src`'s TX to `dst`'s RX through the switches.
    pub(crate) fn nic_path(&self, src: NicId, dst: NicId) -> Path {
        // [`Layout::index`]'s numbering without its checks and match: every flow start
        // resolves one path, and the checked form costs more than the rest of routing.
        debug_assert!(src.0 < self.num_nics() && dst.0 < self.num_nics());
        let (a, b) = (self.switch_of(src), self.switch_of(dst));
        let tx = Self::nic_link(src, false);
        let rx = Self::nic_link(dst, true);
        let z = LinkIdx(0);
        if a == b {
            Path {
                links: [tx, rx, z, z, z, z],
                len: 2,
            }
        } else {
            let up = self.switch_link(a, false);
            let down = self.switch_link(b, true);
            Path {
                links: [tx, up, down, rx, z, z],
                len: 4,
            }
        }
    }

    /// Route of a Mooncake batch from GPU `src` through NIC `a` to NIC `b` and GPU `dst`: the
    /// NIC route with the two GPUs' RDMA links around it.
    pub(crate) fn rdma_path(&self, src: GpuId, a: NicId, b: NicId, dst: GpuId) -> Path {
        let inner = self.nic_path(a, b);
        let n = inner.len as usize;
        let mut links = [LinkIdx(0); MAX_PATH];
        links[0] = self.rdma_link(src, false);
        links[1..=n].copy_from_slice(inner.links());
        links[n + 1] = self.rdma_link(dst, true);
        Path {
            links,
            len: inner.len + 2,
        }
    }

    /// GPUs of a node attached to (preferring) each of its NICs: the most any NIC has.
    pub(crate) fn gpus_per_nic(&self) -> u32 {
        self.cfg.gpus_per_node.div_ceil(self.cfg.nics_per_node)
    }

    /// Whether a Mooncake batch from `src` to `dst` moves over NVLink: the same node, or two
    /// nodes of one NVLink domain ([`TopologyConfig::nodes_per_nvlink_domain`]).
    #[inline]
    pub(crate) fn nvlink_reach(&self, src: GpuId, dst: GpuId) -> bool {
        let n = self.cfg.nodes_per_nvlink_domain.max(1);
        src.node == dst.node || (n > 1 && src.node / n == dst.node / n)
    }

    /// Route between two GPUs of one node or NVLink domain (or a GPU and itself): their
    /// NVLink links only (the NVSwitch fabric is non-blocking).
    pub(crate) fn nvlink_path(&self, src: GpuId, dst: GpuId) -> Path {
        Path::new(&[
            self.index(Link::NvlinkTx(src)),
            self.index(Link::NvlinkRx(dst)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(kind: TopologyKind) -> Layout {
        Layout::new(TopologyConfig {
            nodes: 4,
            gpus_per_node: 4,
            nics_per_node: 2,
            kind,
            nodes_per_leaf: 2,
            oversubscription: 2.0,
            ..Default::default()
        })
    }

    #[test]
    fn link_numbering_round_trips() {
        for kind in [TopologyKind::Rail, TopologyKind::LeafSpine] {
            let l = layout(kind);
            for i in 0..l.num_links() {
                assert_eq!(l.index(l.link(LinkIdx(i))), LinkIdx(i));
            }
        }
    }

    #[test]
    fn affinity_and_candidates() {
        let l = layout(TopologyKind::Rail);
        // 4 GPUs on 2 NICs: GPUs 0, 1 → NIC 0; GPUs 2, 3 → NIC 1 (of node 1: NICs 2, 3).
        let g = |node, local| GpuId { node, local };
        assert_eq!(l.affinity(g(1, 1)), NicId(2));
        assert_eq!(l.affinity(g(1, 2)), NicId(3));
        assert_eq!(l.candidate(g(1, 2), 1), NicId(2));
        assert_eq!(l.candidate(g(1, 2), 2), NicId(3));
    }

    #[test]
    fn rail_and_leaf_paths() {
        let l = layout(TopologyKind::Rail);
        // Same rail (NIC index 0 on nodes 0 and 3): no spine.
        assert_eq!(l.nic_path(NicId(0), NicId(6)).links().len(), 2);
        // Rail 0 → rail 1 crosses the spine; rail uplink = 4 nodes × 50 / 2.
        let p = l.nic_path(NicId(0), NicId(7));
        assert_eq!(l.link(p.links()[1]), Link::Uplink(0));
        assert_eq!(l.link(p.links()[2]), Link::Downlink(1));
        assert_eq!(l.nominal_capacity(Link::Uplink(0), 1.0, 1.0), 100.0);

        let l = layout(TopologyKind::LeafSpine);
        // Nodes 0 and 1 share leaf 0; node 2 is on leaf 1.
        assert_eq!(l.nic_path(NicId(0), NicId(3)).links().len(), 2);
        let p = l.nic_path(NicId(0), NicId(4));
        assert_eq!(l.link(p.links()[1]), Link::Uplink(0));
        assert_eq!(l.link(p.links()[2]), Link::Downlink(1));
        // 2 nodes × 2 NICs × 50 / 2.
        assert_eq!(l.nominal_capacity(Link::Downlink(1), 1.0, 1.0), 100.0);
        // A GPU's RDMA links carry the engine's rate; a Mooncake route wraps the NIC route.
        let g = |node, local| GpuId { node, local };
        assert_eq!(l.nominal_capacity(Link::GpuRdmaTx(g(0, 1)), 1.0, 7.0), 7.0);
        let p = l.rdma_path(g(0, 1), NicId(0), NicId(4), g(2, 0));
        let names: Vec<Link> = p.links().iter().map(|&i| l.link(i)).collect();
        assert_eq!(
            names,
            [
                Link::GpuRdmaTx(g(0, 1)),
                Link::NicTx(NicId(0)),
                Link::Uplink(0),
                Link::Downlink(1),
                Link::NicRx(NicId(4)),
                Link::GpuRdmaRx(g(2, 0)),
            ]
        );
    }

    /// The written-out numbering of `nic_path` is `index`'s, for every NIC pair of both kinds.
    #[test]
    fn nic_paths_use_the_index_numbering() {
        for kind in [TopologyKind::Rail, TopologyKind::LeafSpine] {
            let l = layout(kind);
            for s in 0..l.num_nics() {
                for d in 0..l.num_nics() {
                    let (src, dst) = (NicId(s), NicId(d));
                    let (a, b) = (l.switch_of(src), l.switch_of(dst));
                    let (tx, rx) = (l.index(Link::NicTx(src)), l.index(Link::NicRx(dst)));
                    let want = if a == b {
                        Path::new(&[tx, rx])
                    } else {
                        Path::new(&[tx, l.index(Link::Uplink(a)), l.index(Link::Downlink(b)), rx])
                    };
                    assert_eq!(l.nic_path(src, dst), want, "{kind:?} {s} -> {d}");
                }
            }
        }
    }

    #[test]
    fn validation_names_the_field() {
        let bad = TopologyConfig {
            oversubscription: 0.5,
            ..Default::default()
        };
        assert_eq!(bad.validate(), Err(TopologyError::Oversubscription(0.5)));
        let bad = TopologyConfig {
            nics_per_node: 0,
            ..Default::default()
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("nics_per_node")
        );
    }
}
