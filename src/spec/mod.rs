//! Specifications: models, GPUs and sglang server arguments. Pure data; no I/O except the
//! config importer, which reads one file.

pub mod backend;
pub mod calibration;
pub mod gpu;
pub mod hf;
pub mod kernels;
pub mod launch;
pub mod model;
pub mod server;
pub mod speculative;
pub mod version;

pub use backend::TransferBackend;
pub use calibration::{CalibrationFile, ComputeParams};
pub use gpu::{GpuSpec, gpu_preset};
pub use model::{
    KvAttention, MambaKind, MambaSpec, ModelSpec, MoeSpec, SwaSpec, WeightDtype, WeightFormat,
    preset,
};
pub use server::ServerArgs;
pub use version::SglangVersion;
