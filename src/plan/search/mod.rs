//! SLO searches over a sweep's grid: the cheapest point that meets `[slo]` at a rate, and each
//! point's highest sustainable rate (goodput search, DistServe §4's placement question).
//!
//! By concern: `at_rate` (the cheapest point at a rate, `plan --rate`), `max_rate` and `ladder`
//! (each point's highest rate, `plan --max-rate`, and the pure ladder search under it), `rate`
//! (the rate key and value both set), `best` (`best.toml` of the answer), `grounding` (what
//! the answer's step times rest on). All re-exported here,
//! so callers name `search::cheapest_first`, `search::max_rates`.

mod at_rate;
mod best;
mod grounding;
mod ladder;
mod max_rate;
mod rate;

pub use at_rate::{
    Arch, Cost, CostKey, PdOrNot, PlanAnswer, PointVerdict, TraceSeeds, cheapest, cheapest_first,
    closest, of_arch, point_cost, verdicts,
};
pub use best::{best_toml, relative_to};
pub use grounding::Grounding;
pub use ladder::{Ladder, LadderSearch, MIN_RATE_TOLERANCE, search_ladder};
pub use max_rate::{
    MaxRatePlan, MaxRatePoint, MaxRateRow, RateSearch, max_rate, max_rates, parse_plan_csv,
    plan_csv,
};
pub use rate::{MAX_PLAN_RATE, rate_key, rate_value};
