//! What happened to an instance of a pool that changes size (issue 38): the record the fleet
//! (`autoscale::fleet`) keeps and `summary.json` `autoscaling.events`, `explain` and the report
//! show.

use serde::{Deserialize, Serialize};

/// One change of one slot of a pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScaleEvent {
    /// When, seconds from the start.
    pub at_s: f64,
    /// `cold_start`, `ready`, `start_cancelled`, `start_failed`, `drain`, `removed`,
    /// `role_switch` (a drained server flipped into the other pool) or `no_slot`.
    pub kind: String,
    /// `prefill` or `decode`.
    pub pool: String,
    /// The slot, in its pool's order.
    pub slot: u32,
    /// The global instance number of the slot (prefill slots first), as in `timeseries.csv`.
    pub instance: u32,
    /// Why, in words: the policy's reason for a decision, the mechanism for the rest.
    pub why: String,
}
