//! Decode context parallelism (`--dcp-size` on a PD decode; `docs/sglang-pd.md` §28): sglang's
//! start-up refusals, word for word, shared by the scenario checks (`scenario::sections::dcp`)
//! and `pdsim lint`. The model itself lives where each effect is: the relayout in the pair plan
//! (`layout::plan`, `KvSend::Dcp`), the KV room in the decode's virtual pages
//! (`ServerArgs::tokens_per_page`), the step in `compute::model::dcp`.

/// sglang's refusal when a PD decode with `--dcp-size > 1` keeps a radix cache
/// (`arg_groups/pd_disaggregation_hook.py::handle_pd_disaggregation`, stored id 57404440577;
/// lifted by PR #40263 in later versions, which pdsim does not model).
pub const RADIX_REFUSAL: &str = "PD decode DCP currently requires chunk cache; --disaggregation-decode-enable-radix-cache is not supported.";

/// sglang's refusal when a PD decode with `--dcp-size > 1` enables HiCache (same function).
pub const HICACHE_REFUSAL: &str =
    "PD decode DCP currently requires chunk cache; --enable-hierarchical-cache is not supported.";

/// sglang's refusal of a transfer backend without a DCP relayout path (same function, the
/// version that names mooncake and nixl only; later versions also let `fake` through for
/// synthetic benchmarks). `backend` is the flag's value as sglang prints it (`repr`).
pub fn backend_refusal(backend: &str) -> String {
    format!(
        "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got '{backend}'."
    )
}
