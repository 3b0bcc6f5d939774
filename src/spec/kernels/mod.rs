//! Measured kernel tables as data: the file format ([`tables`]), the grid and its
//! interpolation ([`grid`]), and the files that ship with pdsim ([`builtin`]). A calibration
//! refers to them ([`crate::spec::calibration::ComputeParams::kernels`]); `compute::kernels`
//! derives them from AIConfigurator's database and composes forwards from them.

pub mod balance;
pub mod builtin;
pub mod grid;
pub mod tables;

pub use tables::KernelTables;

/// A calibration's kernel tables: shared (one parse per process for the shipped files), shown
/// in debug output by provenance rather than by their half-megabyte of numbers.
#[derive(Clone)]
pub struct Kernels(pub std::sync::Arc<KernelTables>);

impl Kernels {
    /// The tables.
    pub fn tables(&self) -> &KernelTables {
        &self.0
    }
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.0.meta;
        write!(f, "Kernels({} at sglang {}, {})", m.gpu, m.sglang, m.source)
    }
}

impl PartialEq for Kernels {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}
