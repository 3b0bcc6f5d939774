//! Step-time models: how long a prefill forward or a decode step takes on an instance.
//! [`model`] is the roofline with named overheads whose constants are a calibration
//! (`crate::spec::calibration`); [`profile`] interpolates a user's measured step times in its
//! place; [`fit`] and [`measure`] fit a calibration to a user's measurements (`pdsim
//! calibrate`), [`observe`] reading them from a running sglang's log and metrics; [`modern`] holds the public measurements the default calibration matches;
//! [`speculative`] composes a speculative decode step (draft, verify, draft extend) from two
//! step models and holds the acceptance model; [`offload`] prices the weights a forward
//! fetches from host memory (`--cpu-offload-gb`, layer-wise `--offload-group-size`).

pub mod fit;
pub mod kernels;
pub mod measure;
pub mod model;
pub mod modern;
pub mod moe;
pub mod observe;
pub mod offload;
pub mod profile;
pub mod speculative;
mod vllm2023;

pub use model::{ComputeParams, Forward, Interconnect, StepModel, calibrated_params};
pub use profile::{DecodeCache, DecodeStep, MeasuredProfile, StepTimes};
