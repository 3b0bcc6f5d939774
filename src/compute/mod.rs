//! Step-time models: how long a prefill forward or a decode step takes on an instance.
//! [`model`] is the calibrated roofline with named overheads; [`profile`] interpolates a user's
//! measured step times in its place.

pub mod model;
pub mod profile;

pub use model::{ComputeParams, StepModel, calibrated_params};
pub use profile::{MeasuredProfile, StepTimes};
