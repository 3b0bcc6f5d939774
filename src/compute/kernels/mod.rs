//! Step times from measured kernels: NVIDIA's measured sglang kernel tables (AIConfigurator's
//! database, Apache-2.0), derived into one compact file per GPU (`kernels/` at the repository
//! root, [`crate::spec::kernels`]) by [`derive`] (`pdsim calibrate --from-aiconfigurator`),
//! and composed into a forward as sglang runs it ([`compose`]).

pub mod compose;
pub mod derive;

pub use crate::spec::kernels::{KernelTables, builtin, grid, tables};
