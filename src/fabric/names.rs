//! The names users write for links and NICs (`links.csv`, `[[faults]]` targets), in one place:
//! [`LinkName`] and [`NicName`] format and parse them, and [`NameBounds`] converts them to and
//! from the fabric's [`Link`] and [`NicId`], rejecting anything outside the topology.
//!
//! # The forms
//! | name                     | link                                         |
//! |--------------------------|----------------------------------------------|
//! | `node<N>.nic<I>.tx`      | what NIC `I` of node `N` sends               |
//! | `node<N>.nic<I>.rx`      | what NIC `I` of node `N` receives            |
//! | `node<N>.gpu<G>.nvlink_tx` | what GPU `G` of node `N` sends over NVLink |
//! | `node<N>.gpu<G>.nvlink_rx` | what it receives over NVLink               |
//! | `node<N>.gpu<G>.rdma_tx` | what GPU `G`'s transfer engine sends to the NICs (PCIe / GPUDirect) |
//! | `node<N>.gpu<G>.rdma_rx` | what it receives from them                   |
//! | `switch<S>.up`           | first-tier switch `S` (rail or leaf) to the spine |
//! | `switch<S>.down`         | the spine to switch `S`                      |
//!
//! A NIC (both directions) is `node<N>.nic<I>`. Indices are decimal, from 0, local to their node
//! (`I < nics_per_node`, `G < gpus_per_node`), so a name reads the same whatever the cluster size.
//!
//! Why two steps (parse, then check against [`NameBounds`]): the syntax does not depend on the
//! cluster, so a name can be parsed before the topology is known and the two kinds of mistake
//! get their own message ("this is not a link name" vs "this fabric has no switch 8").

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::topology::{Layout, TopologyConfig};
use super::{GpuId, Link, NicId};

/// The valid link forms, quoted in errors.
const LINK_FORMS: &str = "node<N>.nic<I>.tx|rx, node<N>.gpu<G>.nvlink_tx|nvlink_rx|rdma_tx|rdma_rx \
     or switch<S>.up|down";
/// The valid NIC form, quoted in errors.
const NIC_FORMS: &str = "node<N>.nic<I>";

/// A NIC by name: NIC `nic` of node `node` (`node<N>.nic<I>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NicName {
    /// Node index.
    pub node: u32,
    /// NIC index within the node.
    pub nic: u32,
}

/// Which way a link carries bytes, seen from the NIC, GPU or switch it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// Out of it: a NIC's or GPU's TX, a switch's uplink to the spine.
    Out,
    /// Into it: a NIC's or GPU's RX, a switch's downlink from the spine.
    In,
}

/// A link by name (see the module documentation for the forms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkName {
    /// `node<N>.nic<I>.tx` (`Out`) or `.rx` (`In`).
    Nic(NicName, Direction),
    /// `node<N>.gpu<G>.nvlink_tx` (`Out`) or `.nvlink_rx` (`In`); `gpu.local` is `G`.
    Nvlink(GpuId, Direction),
    /// `node<N>.gpu<G>.rdma_tx` (`Out`) or `.rdma_rx` (`In`): the GPU's transfer-engine path
    /// to its NICs.
    GpuRdma(GpuId, Direction),
    /// `switch<S>.up` (`Out`) or `.down` (`In`).
    Switch(u32, Direction),
}

/// A name that is not a link or NIC name, or names one this fabric does not have. The message
/// quotes the name and says what is valid.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum NameError {
    /// Not of any valid form.
    #[error("{name:?} is not a {what} name: write {forms}")]
    Syntax {
        /// The text given.
        name: String,
        /// `"link"` or `"NIC"`.
        what: &'static str,
        /// The valid forms.
        forms: &'static str,
    },
    /// Well formed, but an index is past the end of the topology.
    #[error("{name:?}: {part} {index} does not exist, this fabric has {count} ({part}0..{part}{last})", last = count.saturating_sub(1))]
    OutOfRange {
        /// The name, formatted.
        name: String,
        /// Which index: `"node"`, `"nic"`, `"gpu"` or `"switch"`.
        part: &'static str,
        /// The index given.
        index: u32,
        /// How many there are (valid indices are `0..count`).
        count: u32,
    },
}

/// The sizes a name is checked against: what [`LinkName::to_link`] and friends need to know of
/// the topology. Build it with [`NameBounds::of`] (or [`super::Fabric::name_bounds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameBounds {
    /// Nodes in the cluster.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// NICs per node.
    pub nics_per_node: u32,
    /// First-tier switches (one per rail, or one per leaf).
    pub switches: u32,
}

impl NameBounds {
    /// The bounds of the fabric `topo` describes (its switch count follows from its kind).
    pub fn of(topo: &TopologyConfig) -> Self {
        Self {
            nodes: topo.nodes,
            gpus_per_node: topo.gpus_per_node,
            nics_per_node: topo.nics_per_node,
            switches: Layout::switch_count(topo),
        }
    }

    /// Parses a link name and checks it against these bounds.
    pub fn parse_link(&self, s: &str) -> Result<Link, NameError> {
        s.parse::<LinkName>()?.to_link(self)
    }

    /// Parses a NIC name and checks it against these bounds.
    pub fn parse_nic(&self, s: &str) -> Result<NicId, NameError> {
        s.parse::<NicName>()?.to_nic(self)
    }

    /// `Ok` iff `index < count`; the error names `name` and `part`.
    fn check(
        name: &dyn fmt::Display,
        part: &'static str,
        index: u32,
        count: u32,
    ) -> Result<(), NameError> {
        if index < count {
            Ok(())
        } else {
            Err(NameError::OutOfRange {
                name: name.to_string(),
                part,
                index,
                count,
            })
        }
    }
}

impl NicName {
    /// The fabric's id of this NIC (`node × nics_per_node + nic`), if `bounds` has it.
    pub fn to_nic(self, bounds: &NameBounds) -> Result<NicId, NameError> {
        NameBounds::check(&self, "node", self.node, bounds.nodes)?;
        NameBounds::check(&self, "nic", self.nic, bounds.nics_per_node)?;
        Ok(NicId(self.node * bounds.nics_per_node + self.nic))
    }

    /// The name of NIC `nic`, if `bounds` has it.
    pub fn of(nic: NicId, bounds: &NameBounds) -> Result<Self, NameError> {
        // Checked on the global id first: dividing by a zero NIC count would panic.
        let total = bounds.nodes.saturating_mul(bounds.nics_per_node);
        NameBounds::check(&format_args!("NIC {}", nic.0), "NIC", nic.0, total)?;
        Ok(Self {
            node: nic.0 / bounds.nics_per_node,
            nic: nic.0 % bounds.nics_per_node,
        })
    }
}

impl LinkName {
    /// The fabric's link of this name, if `bounds` has it.
    pub fn to_link(self, bounds: &NameBounds) -> Result<Link, NameError> {
        Ok(match self {
            LinkName::Nic(nic, dir) => {
                let id = nic.to_nic(bounds).map_err(|e| self.rename(e))?;
                match dir {
                    Direction::Out => Link::NicTx(id),
                    Direction::In => Link::NicRx(id),
                }
            }
            LinkName::Nvlink(gpu, dir) | LinkName::GpuRdma(gpu, dir) => {
                NameBounds::check(&self, "node", gpu.node, bounds.nodes)?;
                NameBounds::check(&self, "gpu", gpu.local, bounds.gpus_per_node)?;
                match (self, dir) {
                    (LinkName::Nvlink(..), Direction::Out) => Link::NvlinkTx(gpu),
                    (LinkName::Nvlink(..), Direction::In) => Link::NvlinkRx(gpu),
                    (_, Direction::Out) => Link::GpuRdmaTx(gpu),
                    (_, Direction::In) => Link::GpuRdmaRx(gpu),
                }
            }
            LinkName::Switch(s, dir) => {
                NameBounds::check(&self, "switch", s, bounds.switches)?;
                match dir {
                    Direction::Out => Link::Uplink(s),
                    Direction::In => Link::Downlink(s),
                }
            }
        })
    }

    /// The name of `link`, if `bounds` has it.
    pub fn of(link: Link, bounds: &NameBounds) -> Result<Self, NameError> {
        let name = match link {
            Link::NicTx(n) => LinkName::Nic(NicName::of(n, bounds)?, Direction::Out),
            Link::NicRx(n) => LinkName::Nic(NicName::of(n, bounds)?, Direction::In),
            Link::NvlinkTx(g) => LinkName::Nvlink(g, Direction::Out),
            Link::NvlinkRx(g) => LinkName::Nvlink(g, Direction::In),
            Link::GpuRdmaTx(g) => LinkName::GpuRdma(g, Direction::Out),
            Link::GpuRdmaRx(g) => LinkName::GpuRdma(g, Direction::In),
            Link::Uplink(s) => LinkName::Switch(s, Direction::Out),
            Link::Downlink(s) => LinkName::Switch(s, Direction::In),
        };
        // Checks the GPU and switch indices (NICs were checked above).
        name.to_link(bounds)?;
        Ok(name)
    }

    /// An out-of-range error of the NIC inside a link name, reported with the link's name.
    fn rename(self, e: NameError) -> NameError {
        match e {
            NameError::OutOfRange {
                part, index, count, ..
            } => NameError::OutOfRange {
                name: self.to_string(),
                part,
                index,
                count,
            },
            syntax => syntax,
        }
    }
}

impl fmt::Display for NicName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}.nic{}", self.node, self.nic)
    }
}

impl fmt::Display for LinkName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LinkName::Nic(nic, Direction::Out) => write!(f, "{nic}.tx"),
            LinkName::Nic(nic, Direction::In) => write!(f, "{nic}.rx"),
            LinkName::Nvlink(g, Direction::Out) => {
                write!(f, "node{}.gpu{}.nvlink_tx", g.node, g.local)
            }
            LinkName::Nvlink(g, Direction::In) => {
                write!(f, "node{}.gpu{}.nvlink_rx", g.node, g.local)
            }
            LinkName::GpuRdma(g, Direction::Out) => {
                write!(f, "node{}.gpu{}.rdma_tx", g.node, g.local)
            }
            LinkName::GpuRdma(g, Direction::In) => {
                write!(f, "node{}.gpu{}.rdma_rx", g.node, g.local)
            }
            LinkName::Switch(s, Direction::Out) => write!(f, "switch{s}.up"),
            LinkName::Switch(s, Direction::In) => write!(f, "switch{s}.down"),
        }
    }
}

/// `prefix<digits>` → the number. Digits only: no sign, no spaces, no empty index.
fn index(part: &str, prefix: &str) -> Option<u32> {
    let digits = part.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl FromStr for NicName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let syntax = || NameError::Syntax {
            name: s.to_string(),
            what: "NIC",
            forms: NIC_FORMS,
        };
        let (node, nic) = s.split_once('.').ok_or_else(syntax)?;
        match (index(node, "node"), index(nic, "nic")) {
            (Some(node), Some(nic)) => Ok(NicName { node, nic }),
            _ => Err(syntax()),
        }
    }
}

impl FromStr for LinkName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let syntax = || NameError::Syntax {
            name: s.to_string(),
            what: "link",
            forms: LINK_FORMS,
        };
        let parts: Vec<&str> = s.split('.').collect();
        match parts.as_slice() {
            [n, x, d] => {
                let node = index(n, "node").ok_or_else(syntax)?;
                if let Some(nic) = index(x, "nic") {
                    let dir = match *d {
                        "tx" => Direction::Out,
                        "rx" => Direction::In,
                        _ => return Err(syntax()),
                    };
                    Ok(LinkName::Nic(NicName { node, nic }, dir))
                } else if let Some(local) = index(x, "gpu") {
                    let g = GpuId { node, local };
                    match *d {
                        "nvlink_tx" => Ok(LinkName::Nvlink(g, Direction::Out)),
                        "nvlink_rx" => Ok(LinkName::Nvlink(g, Direction::In)),
                        "rdma_tx" => Ok(LinkName::GpuRdma(g, Direction::Out)),
                        "rdma_rx" => Ok(LinkName::GpuRdma(g, Direction::In)),
                        _ => Err(syntax()),
                    }
                } else {
                    Err(syntax())
                }
            }
            [sw, d] => {
                let s = index(sw, "switch").ok_or_else(syntax)?;
                match *d {
                    "up" => Ok(LinkName::Switch(s, Direction::Out)),
                    "down" => Ok(LinkName::Switch(s, Direction::In)),
                    _ => Err(syntax()),
                }
            }
            _ => Err(syntax()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{Fabric, FabricParams, TopologyKind};

    fn topologies() -> Vec<TopologyConfig> {
        vec![
            TopologyConfig::default(),
            TopologyConfig {
                nodes: 3,
                gpus_per_node: 4,
                nics_per_node: 2,
                kind: TopologyKind::LeafSpine,
                nodes_per_leaf: 2,
                ..Default::default()
            },
            TopologyConfig {
                nodes: 1,
                gpus_per_node: 1,
                nics_per_node: 1,
                ..Default::default()
            },
            TopologyConfig {
                nodes: 12,
                gpus_per_node: 8,
                nics_per_node: 4,
                kind: TopologyKind::LeafSpine,
                nodes_per_leaf: 5,
                ..Default::default()
            },
        ]
    }

    #[test]
    fn every_link_round_trips_through_its_name() {
        for topo in topologies() {
            let fabric: Fabric = Fabric::build(topo.clone(), FabricParams::ideal()).unwrap();
            let b = NameBounds::of(&topo);
            assert_eq!(b, fabric.name_bounds());
            assert_eq!(b.switches, fabric.num_switches());
            let mut names = std::collections::BTreeSet::new();
            for link in fabric.links() {
                let name = LinkName::of(link, &b).unwrap();
                let text = name.to_string();
                assert_eq!(text.parse::<LinkName>(), Ok(name), "{text}");
                assert_eq!(b.parse_link(&text), Ok(link), "{text}");
                assert_eq!(fabric.link_name(link), name);
                assert!(names.insert(text), "two links share a name");
            }
            for n in 0..fabric.num_nics() {
                let name = NicName::of(NicId(n), &b).unwrap();
                assert_eq!(b.parse_nic(&name.to_string()), Ok(NicId(n)));
            }
        }
    }

    #[test]
    fn names_read_as_documented() {
        let b = NameBounds::of(&TopologyConfig::default());
        let cases = [
            ("node1.nic3.tx", Link::NicTx(NicId(11))),
            ("node0.nic7.rx", Link::NicRx(NicId(7))),
            (
                "node1.gpu2.nvlink_tx",
                Link::NvlinkTx(GpuId { node: 1, local: 2 }),
            ),
            (
                "node0.gpu0.nvlink_rx",
                Link::NvlinkRx(GpuId { node: 0, local: 0 }),
            ),
            (
                "node1.gpu3.rdma_tx",
                Link::GpuRdmaTx(GpuId { node: 1, local: 3 }),
            ),
            (
                "node0.gpu7.rdma_rx",
                Link::GpuRdmaRx(GpuId { node: 0, local: 7 }),
            ),
            ("switch7.up", Link::Uplink(7)),
            ("switch0.down", Link::Downlink(0)),
        ];
        for (text, link) in cases {
            assert_eq!(b.parse_link(text), Ok(link));
            assert_eq!(LinkName::of(link, &b).unwrap().to_string(), text);
        }
        assert_eq!(b.parse_nic("node1.nic2"), Ok(NicId(10)));
    }

    #[test]
    fn out_of_range_names_are_errors_that_say_what_exists() {
        // 2 rail nodes of 8 GPUs and 8 NICs: 8 switches.
        let b = NameBounds::of(&TopologyConfig::default());
        let err = b.parse_link("switch8.up").unwrap_err();
        assert_eq!(
            err,
            NameError::OutOfRange {
                name: "switch8.up".into(),
                part: "switch",
                index: 8,
                count: 8
            }
        );
        assert_eq!(
            err.to_string(),
            "\"switch8.up\": switch 8 does not exist, this fabric has 8 (switch0..switch7)"
        );
        // Leaf/spine with one leaf: switch 1 does not exist either.
        let leaf = NameBounds::of(&TopologyConfig {
            kind: TopologyKind::LeafSpine,
            ..Default::default()
        });
        assert!(leaf.parse_link("switch1.down").is_err());
        for (text, part) in [
            ("node4096.nic0.tx", "node"),
            ("node2.nic0.rx", "node"),
            ("node0.nic8.rx", "nic"),
            ("node0.gpu8.nvlink_tx", "gpu"),
            ("node9.gpu0.nvlink_rx", "node"),
        ] {
            match b.parse_link(text) {
                Err(NameError::OutOfRange { name, part: p, .. }) => {
                    assert_eq!((name.as_str(), p), (text, part));
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        assert!(matches!(
            b.parse_nic("node4096.nic0"),
            Err(NameError::OutOfRange { part: "node", .. })
        ));
        assert!(matches!(
            b.parse_nic("node0.nic9"),
            Err(NameError::OutOfRange { part: "nic", .. })
        ));
        // From the fabric's side: ids past the end have no name.
        assert!(NicName::of(NicId(16), &b).is_err());
        assert!(LinkName::of(Link::Downlink(8), &b).is_err());
        assert!(LinkName::of(Link::NvlinkTx(GpuId { node: 0, local: 8 }), &b).is_err());
    }

    #[test]
    fn malformed_names_are_errors_that_list_the_forms() {
        for text in [
            "",
            "node0",
            "node0.nic0",
            "node0.nic0.up",
            "node0.gpu0.tx",
            "node.nic0.tx",
            "node-1.nic0.tx",
            "node+1.nic0.tx",
            "node 1.nic0.tx",
            "node0.nic0.tx.x",
            "switch.up",
            "switch0.tx",
            "spine0.up",
            "node99999999999.nic0.tx",
        ] {
            let err = text.parse::<LinkName>().unwrap_err();
            assert!(
                matches!(err, NameError::Syntax { what: "link", .. }),
                "{text}"
            );
            assert!(err.to_string().contains(LINK_FORMS), "{err}");
        }
        for text in [
            "node0",
            "node0.nic",
            "nic0.node0",
            "node0.gpu0",
            "node0.nic0.tx",
        ] {
            let err = text.parse::<NicName>().unwrap_err();
            assert!(err.to_string().contains("node<N>.nic<I>"), "{err}");
        }
    }
}
