//! Events the reports mark on every time axis: injected faults and their recoveries (the CLI
//! turns the scenario's `[[faults]]` into markers, since reports never read the scenario) and
//! transfer-worker deaths (from the run's records, [`WorkerDeath`]). The time charts draw them
//! as labelled vertical lines, `trace.json` as instant events, `index.html` and `summary.md` as
//! an "Events" table.

use crate::engine::NS_PER_S;
use crate::metrics::WorkerDeath;

/// What a marker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MarkerKind {
    /// An injected fault: something breaks (a crash, a link or NIC down, loss, degradation).
    Fault,
    /// Something comes back: a restart, a link or NIC up, the end of a flap, a fault undone.
    Recovery,
    /// A prefill transfer worker died: every chunk hashed to its shard waits from then on.
    WorkerDeath {
        /// Global index of the prefill instance.
        prefill: u32,
        /// The prefill TP rank whose worker died.
        rank: u32,
        /// The rank's transfer queue (shard) whose worker died.
        shard: u32,
    },
}

impl MarkerKind {
    /// The kind in words, for tables and legends.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerKind::Fault => "fault",
            MarkerKind::Recovery => "recovery",
            MarkerKind::WorkerDeath { .. } => "worker died",
        }
    }
}

/// One event on the time axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    /// Simulated time, ns.
    pub at_ns: u64,
    /// What it is.
    pub kind: MarkerKind,
    /// Short text drawn beside the line: `crash decode #2`, `link down node1.nic0.rx`, …
    pub label: String,
}

impl Marker {
    /// The marker of a transfer-worker death.
    pub fn worker_death(d: &WorkerDeath) -> Self {
        Marker {
            at_ns: d.at_ns,
            kind: MarkerKind::WorkerDeath {
                prefill: d.prefill_instance,
                rank: d.rank,
                shard: d.shard,
            },
            label: format!(
                "worker died: prefill #{} rank {} queue {} ({})",
                d.prefill_instance,
                d.rank,
                d.shard,
                d.kind.as_str()
            ),
        }
    }

    /// Time in simulated seconds.
    pub fn at_s(&self) -> f64 {
        self.at_ns as f64 / NS_PER_S as f64
    }
}

/// Fault markers and worker deaths in one list, by time; markers at the same time keep their
/// given order (faults in file order, then deaths in the order they happened).
pub fn merge(mut faults: Vec<Marker>, deaths: &[WorkerDeath]) -> Vec<Marker> {
    faults.extend(deaths.iter().map(Marker::worker_death));
    // A stable sort: equal times keep the order above.
    faults.sort_by_key(|m| m.at_ns);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::ErrorKind;

    #[test]
    fn deaths_interleave_with_faults_by_time_stably() {
        let fault = |at_ns, label: &str| Marker {
            at_ns,
            kind: MarkerKind::Fault,
            label: label.into(),
        };
        let deaths = [WorkerDeath {
            at_ns: 5,
            prefill_instance: 1,
            rank: 0,
            shard: 3,
            kind: ErrorKind::EnvelopeTpMismatch,
        }];
        let m = merge(vec![fault(9, "b"), fault(5, "a")], &deaths);
        let labels: Vec<&str> = m.iter().map(|m| m.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "a",
                "worker died: prefill #1 rank 0 queue 3 (envelope_tp_mismatch)",
                "b"
            ]
        );
        assert_eq!(
            m[1].kind,
            MarkerKind::WorkerDeath {
                prefill: 1,
                rank: 0,
                shard: 3
            }
        );
    }
}
