//! `hardware.system`: rack-scale systems whose NVLink domain is larger than one node.
//!
//! A GB200 or GB300 NVL72 rack is one NVLink domain of 72 GPUs (NVLink 5 through nine
//! NVSwitch trays) built from 18 compute trays of 4 GPUs; each tray is a host of its own —
//! two Grace CPUs, its own NICs (one per GPU), its own DRAM. pdsim's node is the tray: the
//! unit of placement and billing, the owner of NICs; `hardware.nvlink_domain_gpus` groups
//! consecutive nodes into the domain inside which TP all-reduce, DeepEP's all-to-all and (with
//! Mooncake's multi-node NVLink transport) KV transfers stay on NVLink. A system fills in the
//! `[hardware]` keys that describe it and the NICs' line rate; keys the file also gives must
//! agree with it (exit 2 naming the key otherwise).

use super::file::ScenarioFile;
use super::{Checker, ScenarioError, suggestion};

/// One rack-scale system.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct System {
    /// `hardware.system`.
    pub name: &'static str,
    /// Its GPU preset.
    pub gpu: &'static str,
    /// GPUs of one compute tray (pdsim's node).
    pub tray_gpus: u32,
    /// GPUs of one NVLink domain.
    pub domain_gpus: u32,
    /// Line rate of a tray's NICs (one per GPU), Gb/s.
    pub nic_gbps: f64,
}

/// The systems `hardware.system` names. Sources: NVIDIA's DGX GB200 and DGX GB300 datasheets
/// (72 Blackwell / Blackwell Ultra GPUs and 36 Grace CPUs in one NVLink domain; 18 compute
/// trays of 2 Grace + 4 GPUs; "72 OSFP single-port NVIDIA ConnectX-7 VPI with 400 Gb/s
/// InfiniBand" on GB200, ConnectX-8 at 800 Gb/s on GB300), and AIConfigurator 0.12's
/// `systems/gb200.yaml` / `gb300.yaml` ("4 GPUs per physical node", "72 GPUs per rack (18
/// compute trays x 4 GPUs each)").
pub const SYSTEMS: &[System] = &[
    System {
        name: "gb200-nvl72",
        gpu: "gb200",
        tray_gpus: 4,
        domain_gpus: 72,
        nic_gbps: 400.0,
    },
    System {
        name: "gb300-nvl72",
        gpu: "gb300",
        tray_gpus: 4,
        domain_gpus: 72,
        nic_gbps: 800.0,
    },
];

/// Names of the systems.
pub fn names() -> Vec<&'static str> {
    SYSTEMS.iter().map(|s| s.name).collect()
}

/// Resolves `hardware.system` into `file`: the GPU, the tray as the node and the NVLink
/// domain, and the NICs' rate unless `fabric.nic_gbps` is given. `given(key)` says whether the
/// scenario (after `--set`) writes a dotted key itself. Does nothing without a system.
pub(super) fn resolve(
    c: &Checker,
    file: &mut ScenarioFile,
    given: &dyn Fn(&str) -> bool,
) -> Result<(), ScenarioError> {
    let Some(name) = file.hardware.system.clone() else {
        return Ok(());
    };
    let all = names();
    let sys = SYSTEMS.iter().find(|s| s.name == name).ok_or_else(|| {
        c.err(
            "hardware.system",
            format!(
                "unknown system {name:?}; valid: {} (or leave it out and give hardware.gpu, hardware.gpus_per_node and hardware.nvlink_domain_gpus){}",
                all.join(", "),
                suggestion(&name, &all)
            ),
        )
    })?;
    let hw = &mut file.hardware;
    match hw.gpu.as_deref() {
        Some(g) if g != sys.gpu => {
            return Err(c.err(
                "hardware.gpu",
                format!(
                    "{g:?} contradicts hardware.system = {name:?}, whose GPUs are {:?}; leave hardware.gpu out (the system names it), or leave the system out",
                    sys.gpu
                ),
            ));
        }
        _ => hw.gpu = Some(sys.gpu.to_string()),
    }
    if given("hardware.gpus_per_node") && hw.gpus_per_node != sys.tray_gpus {
        return Err(c.err(
            "hardware.gpus_per_node",
            format!(
                "{} contradicts hardware.system = {name:?}: a node is one compute tray of {} GPUs (its own host and NICs; the NVLink domain is hardware.nvlink_domain_gpus); leave it out",
                hw.gpus_per_node, sys.tray_gpus
            ),
        ));
    }
    hw.gpus_per_node = sys.tray_gpus;
    match hw.nvlink_domain_gpus {
        Some(d) if d == 0 || d > sys.domain_gpus || !d.is_multiple_of(sys.tray_gpus) => {
            return Err(c.err(
                "hardware.nvlink_domain_gpus",
                format!(
                    "{d} does not fit hardware.system = {name:?}: a domain is whole trays of {} GPUs, at most the rack's {}; leave it out for the whole rack, or use e.g. 36 (NVL36)",
                    sys.tray_gpus, sys.domain_gpus
                ),
            ));
        }
        Some(_) => {}
        None => hw.nvlink_domain_gpus = Some(sys.domain_gpus),
    }
    if !given("fabric.nic_gbps") {
        file.fabric.nic_gbps = sys.nic_gbps;
    }
    Ok(())
}
