//! The ground floor: the words every floor shares — typed ids, the closed [`event::Event`] enum,
//! the request table, and how a request ended ([`Outcome`], [`ErrorKind`], [`RequestRow`]).
//!
//! Nothing here knows a rule of sglang or of the fabric: these are data and their bookkeeping
//! (a slab, an id vector), so that `layout`, `fabric`, `sglang`, `metrics` and `sim` can all name
//! them without an import running back up (`docs/architecture.md`, "Layers").

pub mod abort;
pub mod error_kind;
pub mod event;
pub mod flow;
pub mod ids;
pub mod limits;
mod record;
pub mod requests;
pub mod scale;
pub mod suggest;

pub use error_kind::ErrorKind;
pub use record::{GapKind, Outcome, RequestRow, SessionCells, TokenGaps};
