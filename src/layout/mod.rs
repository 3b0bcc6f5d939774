//! Pure KV / state layout math and the PD transfer contract (`docs/sglang-pd.md`).
//!
//! Layers, each a pure function of values (no clock, no RNG, no I/O), listed bottom up; each
//! uses only the ones above it in this list, never one below:
//!
//! * [`rank`]: what one attention-TP rank registers — KV regions, mamba/GDN state regions, aux
//!   rows, and for a given [`Capacity`] the registered buffers and their byte lengths (docs/sglang-pd.md §1).
//! * [`checks`]: sglang's validations with its message text, the typed [`PdError`] (its kind
//!   is the crate-wide [`ErrorKind`] of `metrics`), and the behaviour [`Profile`]s of docs/sglang-pd.md §9
//!   (docs/sglang-pd.md §2, §4.4).
//! * [`write`]: the vocabulary of one planned RDMA write group ([`Write`]), spoken by the plan
//!   that emits it and the oracle that applies it.
//! * [`oracle`]: [`DecodeMemory`], the corruption oracle of one decode instance: it applies
//!   writes at page/slot granularity against the source and destination layouts and derives
//!   completed / failed / corrupted from the addresses alone (docs/architecture.md §5). It knows layouts
//!   and writes, not plans.
//! * [`plan`]: the [`PairPlan`] compiled once per (prefill, decode) instance pair: the rank
//!   mapping, the send path per target, which checks fire and when, and per chunk the flows
//!   (bytes, RDMA writes) and concrete writes (docs/sglang-pd.md §3). It runs the oracle on a probe request to
//!   decide [`PairPlan::is_exact`], and provides [`DecodeMemory::apply`] for a plan's writes.
//!
//! Units: tokens for `page_size`; bytes for every `item_len`, length and offset; page, slot and
//! aux-row ids are indices. See `README.md` beside this file for the model and for how the
//! simulator calls it per chunk and per request.

pub mod checks;
pub mod oracle;
pub mod plan;
pub mod rank;
pub mod write;

#[cfg(test)]
mod outcome_tests;
#[cfg(test)]
mod property_tests;

/// Server args for tests: attention TP = `tp`, the rest sglang's defaults.
#[cfg(test)]
pub(crate) fn test_args(tp: u32, ps: u32, dtype: &str, unified: bool) -> crate::spec::ServerArgs {
    crate::spec::ServerArgs {
        enable_unified_memory: unified,
        radix_cache: None,
        ..crate::spec::ServerArgs::sglang_defaults(tp, ps, dtype)
    }
}

/// The failure vocabulary lives in `metrics` (every component fails requests with it); layout
/// re-exports it so `crate::layout::ErrorKind` keeps naming the kinds its checks raise.
pub use crate::vocab::ErrorKind;
pub use checks::{Effect, PdError, Profile, SendPath};
pub use oracle::{
    ApplyOutcome, DecodeMemory, ORACLE_UNIT_BYTES, RequestId, RequestReport, Verdict,
};
pub use plan::{
    ChunkRequest, ChunkTransfer, DcpChunk, DcpPack, DcpSpan, ErrorTiming, KvChecksum, PairPlan,
    RankFlow, Staging, Target,
};
pub use rank::{Capacity, KvDtype, RankLayout, Registration, render_table};
pub use write::{Pattern, Write, WriteDst};

/// A layout that cannot be built: a server start-up or scenario-validation error, not a
/// transfer-time failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The `--kv-cache-dtype` flag is not one pdsim models.
    #[error(
        "unknown --kv-cache-dtype {flag:?}: pdsim models auto, bf16, bfloat16, fp8_e4m3 and fp8_e5m2 (auto needs a bf16 model)"
    )]
    UnknownKvDtype {
        /// The flag as given.
        flag: String,
    },
    /// docs/sglang-pd.md §9: sglang's unified pool needs at least two sub-pools.
    #[error(
        "--enable-unified-memory needs a hybrid (mamba/GDN/SWA) model, but {model} has no hybrid layers: sglang's unified pool needs at least two sub-pools; set enable_unified_memory = false"
    )]
    UnifiedNeedsHybrid {
        /// The model.
        model: String,
    },
    /// Profile `seed_commit`: unified memory with PD on an MHA-attention hybrid is refused at
    /// start-up (the refusal PR #37506 lifted). pdsim's wording: the stored sglang sources do
    /// not hold the assertion text of that commit.
    #[error(
        "the {side} server refuses to start: --enable-unified-memory with PD disaggregation supports only MLA hybrid models (Kimi-Linear type) in sglang at the seeds' commit (profile seed_commit; PR #37506 lifted this for MHA hybrids), and {model} uses MHA attention; set enable_unified_memory = false, or use profile guarded"
    )]
    UnifiedPdRefused {
        /// The model.
        model: String,
        /// `prefill` or `decode`.
        side: &'static str,
    },
    /// Attention TP must be at least 1.
    #[error("attention TP must be at least 1")]
    ZeroTp,
    /// Page size must be at least 1.
    #[error("page size must be at least 1 token")]
    ZeroPageSize,
    /// A rank past the TP size.
    #[error("rank {rank} is out of range for attention TP {tp}")]
    RankOutOfRange {
        /// The rank asked for.
        rank: u32,
        /// The TP size.
        tp: u32,
    },
    /// A dimension TP must split evenly.
    #[error(
        "{model}: attention TP {tp} does not split {what} ({value}) evenly; use a TP that divides it (or, for KV heads, a multiple of it)"
    )]
    TpDoesNotDivide {
        /// The model.
        model: String,
        /// Which dimension.
        what: &'static str,
        /// Its size.
        value: u32,
        /// The TP size.
        tp: u32,
    },
    /// Prefill and decode TP must be multiples of each other (docs/sglang-pd.md §2.1 rank mapping).
    #[error(
        "prefill attention TP {prefill} and decode attention TP {decode} are not multiples of each other: sglang maps ranks by their ratio"
    )]
    TpRatio {
        /// Prefill attention TP.
        prefill: u32,
        /// Decode attention TP.
        decode: u32,
    },
    /// A model feature pdsim does not lay out.
    #[error("{model}: pdsim does not model {what}")]
    Unsupported {
        /// The model.
        model: String,
        /// The feature.
        what: &'static str,
    },
}
