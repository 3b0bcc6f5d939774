//! `[[faults]]`, checked into [`FaultSpec`]s: fabric faults name a link or NIC of this
//! scenario's topology (parsed by the fabric's own name type), crashes name a pool and an
//! instance in it. Every bad value is an exit-2 error naming `faults[i].<key>`.

use super::{Checker, FaultAction, FaultSpec, Pool, ScenarioError, file};
use crate::engine::ns_from_secs_ceil;
use crate::fabric::{Fault, Link, NameBounds, NicId};
use file::{FaultKind, FaultSection};

/// What the per-kind checks share: the checker, the fault's index and its table, and the
/// topology's name bounds.
struct FaultCtx<'a> {
    c: &'a Checker<'a>,
    i: usize,
    f: &'a FaultSection,
    bounds: NameBounds,
}

impl FaultCtx<'_> {
    /// `faults[i].<k>`.
    fn key(&self, k: &str) -> String {
        format!("faults[{}].{k}", self.i)
    }

    fn err(&self, k: &str, message: impl Into<String>) -> ScenarioError {
        self.c.err(&self.key(k), message)
    }

    /// The fault's `nic`, a NIC this topology has.
    fn nic(&self) -> Result<NicId, ScenarioError> {
        let name = self.f.nic.as_deref().ok_or_else(|| {
            self.err(
                "nic",
                format!("{} needs nic = \"node<N>.nic<I>\"", self.f.kind),
            )
        })?;
        self.bounds
            .parse_nic(name)
            .map_err(|e| self.err("nic", e.to_string()))
    }

    /// The fault's `link`, a link this topology has.
    fn link(&self) -> Result<Link, ScenarioError> {
        let name = self.f.link.as_deref().ok_or_else(|| {
            self.err("link", format!("{} needs link = \"node<N>.nic<I>.tx|rx\", \"node<N>.gpu<G>.nvlink_tx|nvlink_rx\" or \"switch<S>.up|down\"", self.f.kind))
        })?;
        self.bounds
            .parse_link(name)
            .map_err(|e| self.err("link", e.to_string()))
    }

    /// `link_degraded`: the share of capacity left, in (0, 1].
    fn degraded(&self) -> Result<Fault, ScenarioError> {
        let fr = self.f.fraction.ok_or_else(|| {
            self.err(
                "fraction",
                "link_degraded needs fraction = <share of capacity left, in (0, 1]>",
            )
        })?;
        if !(fr > 0.0 && fr <= 1.0) {
            return Err(self.err("fraction", format!("must be in (0, 1], got {fr}")));
        }
        Ok(Fault::Degrade {
            link: self.link()?,
            fraction: fr,
        })
    }

    /// `packet_loss`: the loss rate, in [0, 1).
    fn loss(&self) -> Result<Fault, ScenarioError> {
        let r = self
            .f
            .rate
            .ok_or_else(|| self.err("rate", "packet_loss needs rate = <loss rate in [0, 1)>"))?;
        if !(0.0..1.0).contains(&r) {
            return Err(self.err("rate", format!("must be in [0, 1), got {r}")));
        }
        Ok(Fault::Loss {
            link: self.link()?,
            rate: r,
        })
    }

    /// `nic_flap`: the NIC and how long it stays down.
    fn flap(&self) -> Result<Fault, ScenarioError> {
        let d = self
            .f
            .duration_s
            .ok_or_else(|| self.err("duration_s", "nic_flap needs duration_s = <seconds down>"))?;
        let d = self.c.duration(&self.key("duration_s"), d, false)?;
        Ok(Fault::NicFlap {
            nic: self.nic()?,
            down_ns: ns_from_secs_ceil(d),
        })
    }

    /// `instance_crash`: the instance (by pool and index within it, numbered over all pools in
    /// order as `InstanceId`s are) and its restart, if any.
    fn crash(&self, pools: &[Pool]) -> Result<FaultAction, ScenarioError> {
        let pool = self.f.pool.as_deref().ok_or_else(|| {
            self.err(
                "pool",
                "instance_crash needs pool = \"<pool name>\" (and instance = <index>, default 0)",
            )
        })?;
        let (pi, p) = pools
            .iter()
            .enumerate()
            .find(|(_, p)| p.name == pool)
            .ok_or_else(|| {
                let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
                self.err(
                    "pool",
                    format!("no pool named {pool:?}; pools: {}", names.join(", ")),
                )
            })?;
        let k = self.f.instance.unwrap_or(0);
        if k >= p.servers() {
            return Err(self.err(
                "instance",
                format!(
                    "pool {pool:?} has {} instance(s); use 0..{}",
                    p.servers(),
                    p.servers()
                ),
            ));
        }
        let first: u32 = pools[..pi].iter().map(|p| p.servers()).sum();
        let restart_ns = match self.f.restart_after_s {
            Some(r) => Some(ns_from_secs_ceil(self.c.duration(
                &self.key("restart_after_s"),
                r,
                false,
            )?)),
            None => None,
        };
        Ok(FaultAction::Crash {
            instance: crate::vocab::ids::InstanceId(first + k),
            restart_ns,
        })
    }
}

/// `faults[i]`, against this scenario's pools and fabric.
pub(super) fn fault(
    c: &Checker,
    i: usize,
    f: &FaultSection,
    pools: &[Pool],
    fabric: &crate::config::FabricConfig,
) -> Result<FaultSpec, ScenarioError> {
    let at_s = c.duration(&format!("faults[{i}].at_s"), f.at_s, true)?;
    // Names are parsed and range-checked by the fabric's own name type, against this
    // scenario's topology: a switch or node the fabric does not have is an error here, not later.
    let x = FaultCtx {
        c,
        i,
        f,
        bounds: NameBounds::of(&fabric.topology),
    };
    let action = match f.kind {
        FaultKind::LinkDown => FaultAction::Fabric(Fault::LinkDown(x.link()?)),
        FaultKind::LinkUp => FaultAction::Fabric(Fault::LinkUp(x.link()?)),
        FaultKind::LinkDegraded => FaultAction::Fabric(x.degraded()?),
        FaultKind::PacketLoss => FaultAction::Fabric(x.loss()?),
        FaultKind::NicDown => FaultAction::Fabric(Fault::NicDown(x.nic()?)),
        FaultKind::NicUp => FaultAction::Fabric(Fault::NicUp(x.nic()?)),
        FaultKind::NicFlap => FaultAction::Fabric(x.flap()?),
        FaultKind::InstanceCrash => x.crash(pools)?,
    };
    Ok(FaultSpec {
        at_ns: ns_from_secs_ceil(at_s),
        action,
    })
}
