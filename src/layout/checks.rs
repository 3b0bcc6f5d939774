//! sglang's PD checks (`docs/sglang-pd.md` §2.1, §2.4, §2.5, §3.5) with its message text,
//! character for character, and the behaviour profiles of docs/sglang-pd.md §9.
//!
//! Each check is a pure function of the values sglang compares; [`crate::layout::PairPlan`]
//! decides which ones run, and where, from the [`Profile`].

use std::fmt::Display;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::vocab::ErrorKind;

/// What a failed check does to the request and the instances (docs/sglang-pd.md §2.4, §2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Raised by decode at first contact with the prefill: the request fails on decode.
    RaisedOnDecode,
    /// A RuntimeError in the prefill transfer worker: that queue shard's worker thread dies, and
    /// every later chunk hashed to it waits until the decode waiting timeout.
    WorkerDies,
    /// Return code −1: the room fails and the decode session is blacklisted.
    ReturnCodeFailure,
    /// The prefill rejected the decode session's registered layout (sglang PR #37840): every
    /// room to that session fails with this error before any write, the worker lives on, and
    /// the session stays failed (a liveness probe does not clear it; a valid re-registration
    /// would).
    SessionRejected,
}

/// A typed PD failure with sglang's own message text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct PdError {
    /// Stable kind.
    pub kind: ErrorKind,
    /// The message as sglang prints it (values filled in as Python prints them).
    pub message: String,
    /// What it does.
    pub effect: Effect,
}

impl PdError {
    fn new(kind: ErrorKind, message: String, effect: Effect) -> Self {
        Self {
            kind,
            message,
            effect,
        }
    }
}

/// Which sglang behaviour pdsim reproduces (`[sglang] profile`, docs/sglang-pd.md §9). Every profile uses the same
/// layout math and the same oracle; only which checks run, and where, differ.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The seeds' sglang: first-contact checks; the envelope validator whenever the prefill has
    /// unified memory on, whatever the send path; mamba checks after KV.
    #[default]
    Guarded,
    /// sglang 0005973a as read (docs/sglang-pd.md §4.4): the validator only on the `send_kvcache` path, so an
    /// unequal-TP MHA-hybrid unified prefill takes `send_kvcache_slice` (0 KV bytes) and fails at
    /// the mamba check after KV.
    SliceDispatch,
    /// Before the validator existed: decode's first-contact page-size check (PR #14474, which
    /// predates unified memory) and nothing else; unified prefills always take the
    /// whole-envelope copy; only a write past a registered region fails (rc −1).
    Unguarded,
    /// sglang at the seeds' commit (0132848349, 2026-08-27): `guarded`, plus the start-up
    /// refusal of `--enable-unified-memory` with PD for MHA-attention hybrids (lifted by PR
    /// #37506), so only MLA hybrids (Kimi-Linear type) reach the validator.
    SeedCommit,
}

impl Profile {
    /// All profiles.
    pub const ALL: [Profile; 4] = [
        Self::Guarded,
        Self::SliceDispatch,
        Self::Unguarded,
        Self::SeedCommit,
    ];

    /// The scenario-file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Guarded => "guarded",
            Self::SliceDispatch => "slice_dispatch",
            Self::Unguarded => "unguarded",
            Self::SeedCommit => "seed_commit",
        }
    }

    /// Whether a server with `--enable-unified-memory` on an MHA-attention hybrid model is
    /// refused at start-up in PD mode (the seeds' commit; lifted by PR #37506).
    pub fn refuses_unified_mha_hybrid_pd(self) -> bool {
        self == Self::SeedCommit
    }

    /// Whether decode checks the KV dtype string at first contact (docs/sglang-pd.md §2.1). The page-size check
    /// runs in every profile: it predates unified memory (PR #14474).
    pub fn first_contact_dtype_check(self) -> bool {
        self != Self::Unguarded
    }

    /// Whether the mamba checks of docs/sglang-pd.md §2.5 ("Mamba state layouts differ", "slot size mismatch") run.
    pub fn state_checks(self) -> bool {
        self != Self::Unguarded
    }

    /// docs/sglang-pd.md §3.1 step 3 / §4.4: which KV send function the prefill transfer worker calls for one
    /// target. sglang dispatches to `send_kvcache` for MLA, hybrid-MLA or equal attention TP, and
    /// to `send_kvcache_slice` otherwise (staging and DCP are not modelled). `unguarded` sends a
    /// unified prefill's envelope whole whatever the TP (docs/sglang-pd.md §9 table, last column).
    pub fn kv_send_path(
        self,
        prefill_mla: bool,
        prefill_unified: bool,
        prefill_tp: u32,
        decode_tp: u32,
    ) -> SendPath {
        let generic = prefill_mla || prefill_tp == decode_tp;
        match self {
            Self::Unguarded if prefill_unified => SendPath::SendKvcache,
            _ if generic => SendPath::SendKvcache,
            _ => SendPath::Slice,
        }
    }

    /// docs/sglang-pd.md §2.4 / §9: whether `_validate_envelope_kv_layout` runs for a chunk sent on `path`.
    /// It keys on the prefill's unified flag; `guarded` runs it whatever the path,
    /// `slice_dispatch` only inside `send_kvcache`, `unguarded` never.
    pub fn validator_runs(self, path: SendPath, prefill_unified: bool) -> bool {
        prefill_unified
            && match self {
                Self::Guarded | Self::SeedCommit => true,
                Self::SliceDispatch => path == SendPath::SendKvcache,
                Self::Unguarded => false,
            }
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown sglang profile {s:?}: use guarded, slice_dispatch, unguarded or seed_commit"
                )
            })
    }
}

/// The KV send function the prefill worker calls for one target (docs/sglang-pd.md §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SendPath {
    /// `send_kvcache` → `_send_kvcache_generic`: contiguous runs per region (docs/sglang-pd.md §3.2, §3.4, §3.7).
    SendKvcache,
    /// `send_kvcache_slice`: one write per token per layer, head-sliced (docs/sglang-pd.md §3.3).
    Slice,
}

/// Formats a list as Python prints it: `[196608]`, `[1, 2]`, `[]`.
pub fn py_list<T: Display>(xs: &[T]) -> String {
    let inner: Vec<String> = xs.iter().map(ToString::to_string).collect();
    format!("[{}]", inner.join(", "))
}

/// Formats an optional value as Python prints it (`None`).
pub fn py_opt<T: Display>(x: Option<T>) -> String {
    x.map_or_else(|| "None".to_string(), |v| v.to_string())
}

/// Decode first contact (docs/sglang-pd.md §2.1, `try_ensure_parallel_info`): page size, then the KV dtype flag
/// string. Raised on decode (the RuntimeError kills the decode server). The dtype check is
/// skipped when `dtype_check` is false (profile `unguarded`).
pub fn first_contact(
    prefill_page_size: u32,
    prefill_kv_dtype: &str,
    decode_page_size: u32,
    decode_kv_dtype: &str,
) -> Result<(), PdError> {
    first_contact_with(
        prefill_page_size,
        prefill_kv_dtype,
        decode_page_size,
        decode_kv_dtype,
        true,
    )
}

/// [`first_contact`] with the dtype check optional.
pub fn first_contact_with(
    prefill_page_size: u32,
    prefill_kv_dtype: &str,
    decode_page_size: u32,
    decode_kv_dtype: &str,
    dtype_check: bool,
) -> Result<(), PdError> {
    if prefill_page_size != decode_page_size {
        return Err(PdError::new(
            ErrorKind::PageSizeMismatch,
            format!(
                "Page size mismatch: prefill server has page_size={prefill_page_size}, but decode server has page_size={decode_page_size}. Both servers must use the same --page-size value."
            ),
            Effect::RaisedOnDecode,
        ));
    }
    if dtype_check && prefill_kv_dtype != decode_kv_dtype {
        return Err(PdError::new(
            ErrorKind::KvCacheDtypeMismatch,
            format!(
                "KV cache dtype mismatch: prefill server has kv_cache_dtype={prefill_kv_dtype}, but decode server has kv_cache_dtype={decode_kv_dtype}. Both servers must use the same --kv-cache-dtype value."
            ),
            Effect::RaisedOnDecode,
        ));
    }
    Ok(())
}

/// `_validate_envelope_kv_layout` (docs/sglang-pd.md §2.4), run by the prefill worker before the first write of a
/// chunk. `dst_kv_ptrs` is the number of decode KV regions; `dst_kv_item_len` is the single
/// item length decode registered (`None` when unknown). Errors (1) and (2) kill the worker.
pub fn validate_envelope(
    prefill_unified: bool,
    prefill_tp: u32,
    decode_tp: Option<u32>,
    src_item_lens: &[u64],
    dst_kv_ptrs: usize,
    dst_kv_item_len: Option<u64>,
) -> Result<(), PdError> {
    if !prefill_unified {
        return Ok(());
    }
    if let Some(d) = decode_tp
        && d != prefill_tp
    {
        return Err(PdError::new(
            ErrorKind::EnvelopeTpMismatch,
            format!(
                "--enable-unified-memory does not support different prefill / decode attention TP sizes (prefill={prefill_tp}, decode={d}): the whole-envelope state cannot be TP-resliced."
            ),
            Effect::WorkerDies,
        ));
    }
    let ok = src_item_lens.len() == 1
        && dst_kv_ptrs == 1
        && dst_kv_item_len.is_some_and(|d| d == src_item_lens[0]);
    if !ok {
        return Err(PdError::new(
            ErrorKind::EnvelopeLayoutMismatch,
            format!(
                "PD KV layout mismatch on the whole-envelope path: prefill has {} KV region(s) with item_lens={}, decode has {} with item_len={}. With --enable-unified-memory both sides must enable it and use the same page size and model spec.",
                src_item_lens.len(),
                py_list(src_item_lens),
                dst_kv_ptrs,
                py_opt(dst_kv_item_len)
            ),
            Effect::WorkerDies,
        ));
    }
    Ok(())
}

/// `maybe_send_extra`, MAMBA (docs/sglang-pd.md §2.5): with per-tensor dims missing on either side, the item
/// lengths must be equal, or the layouts cannot be resliced.
pub fn check_mamba_layouts(
    src_dims: &[u32],
    dst_dims: &[u32],
    src_item_lens: &[u64],
    dst_item_lens: &[u64],
) -> Result<(), PdError> {
    if (src_dims.is_empty() || dst_dims.is_empty()) && src_item_lens != dst_item_lens {
        return Err(PdError::new(
            ErrorKind::MambaLayoutMismatch,
            format!(
                "Mamba state layouts differ between prefill and decode (src item_lens={}, dst item_lens={}) and no per-tensor dim metadata is available to reslice. With --enable-unified-memory, prefill and decode must both enable it and use equal attention TP sizes.",
                py_list(src_item_lens),
                py_list(dst_item_lens)
            ),
            Effect::WorkerDies,
        ));
    }
    Ok(())
}

/// `_send_mamba_state` (docs/sglang-pd.md §3.5): each paired entry must have the same slot size.
pub fn check_mamba_slot_size(src_len: u64, dst_len: u64) -> Result<(), PdError> {
    if src_len != dst_len {
        return Err(PdError::new(
            ErrorKind::MambaSlotSizeMismatch,
            format!(
                "Prefill/Decode Mamba slot size mismatch (src={src_len}, dst={dst_len}). Configure matching persistent state layouts on both peers."
            ),
            Effect::WorkerDies,
        ));
    }
    Ok(())
}

/// `maybe_send_extra` for SWA-type state (docs/sglang-pd.md §2.5, §11.7): a non-MLA SWA hybrid (gpt-oss) cannot
/// be sent between different attention TP sizes. Raised after the last chunk's KV.
pub fn check_swa_hetero_tp(
    state_type: &str,
    prefill_mla: bool,
    prefill_tp: u32,
    decode_tp: u32,
) -> Result<(), PdError> {
    if !prefill_mla && prefill_tp != decode_tp {
        return Err(PdError::new(
            ErrorKind::HeteroTpUnsupported,
            format!(
                "PD Disaggregation does NOT support PD different TP sizes for non-MLA {} hybrid models yet.",
                state_type.to_uppercase()
            ),
            Effect::WorkerDies,
        ));
    }
    Ok(())
}

/// `_send_kvcache_generic`, MHA branch (docs/sglang-pd.md §2.5): the prefill stage has more layers than decode
/// registered K regions; rc −1.
pub fn check_kv_layers(layers_current_pp_stage: usize, dst_k_ptrs: usize) -> Result<(), PdError> {
    if layers_current_pp_stage > dst_k_ptrs {
        return Err(PdError::new(
            ErrorKind::KvLayersOutOfRange,
            format!(
                "Prefill transfer kvcache error, layers_current_pp_stage is out of range: layers_current_pp_stage={layers_current_pp_stage}, len(dst_k_ptrs)={dst_k_ptrs}"
            ),
            Effect::ReturnCodeFailure,
        ));
    }
    Ok(())
}

/// The state components a rank registers, as PR #37840's registration lists them
/// (`state_types`, the per-component schema of PR #24932): `[]`, `["mamba"]` or `["swa"]`.
pub fn state_components(has_state: bool, swa: bool) -> &'static [&'static str] {
    match (has_state, swa) {
        (false, _) => &[],
        (true, true) => &["swa"],
        (true, false) => &["mamba"],
    }
}

/// One side of a registration as sglang PR #37840 compares it: what the decode session
/// registers and what the prefill holds (rank 0 of each stands for all: every rank of an
/// instance registers the same list). Item lengths in bytes.
#[derive(Clone, Copy, Debug)]
pub struct RegisteredLayout<'a> {
    /// Attention TP size.
    pub attn_tp: u32,
    /// `--page-size`, tokens.
    pub page_size: u32,
    /// Ordered state component types.
    pub state_components: &'static [&'static str],
    /// Per-entry KV strides (`kv_item_lens`), bytes.
    pub kv_item_lens: &'a [u64],
    /// Per-entry state strides (`state_item_lens`), bytes.
    pub state_item_lens: &'a [u64],
}

/// Registration-time layout validation (sglang PR #37840, "[PD] Validate Mooncake peer
/// layouts before state transfer", open; its description: "Reject incompatible page sizes,
/// state component lists, and incomplete pointer/stride metadata. For equal attention TP,
/// compare strides using existing global-layer pairing … Heterogeneous TP does not use the
/// equal-stride check", and "return the registration error through the existing failure
/// path, before transfer"). Checked in that order; pdsim pairs entries positionally (pp = 1,
/// no DCP), as sglang's pairing does without layer ids.
///
/// The wording is pdsim's: the PR's message text was not in the stored sources
/// (`docs/sglang-pd.md` §12, §24.3). It names what differs and both values.
pub fn validate_registration(
    prefill: RegisteredLayout<'_>,
    decode: RegisteredLayout<'_>,
) -> Result<(), PdError> {
    let reject = |what: &str, p: String, d: String| {
        Err(PdError::new(
            ErrorKind::PeerLayoutRejected,
            format!(
                "PD peer layout rejected at registration: {what} (prefill={p}, decode={d}). The decode session stays failed until it re-registers with a matching layout."
            ),
            Effect::SessionRejected,
        ))
    };
    if prefill.page_size != decode.page_size {
        return reject(
            "page sizes differ",
            prefill.page_size.to_string(),
            decode.page_size.to_string(),
        );
    }
    if prefill.state_components != decode.state_components {
        let list = |c: &[&str]| {
            let q: Vec<String> = c.iter().map(|s| format!("'{s}'")).collect();
            format!("[{}]", q.join(", "))
        };
        return reject(
            "state component lists differ",
            list(prefill.state_components),
            list(decode.state_components),
        );
    }
    if prefill.attn_tp != decode.attn_tp {
        return Ok(());
    }
    // The first entry whose stride differs (or the counts), not the whole lists: a hybrid
    // registers one entry per layer and tensor, and one differing entry is the story.
    let strides = |what: &str, p: &[u64], d: &[u64]| {
        if p.len() != d.len() {
            return reject(
                &format!("{what} counts differ"),
                p.len().to_string(),
                d.len().to_string(),
            );
        }
        match p.iter().zip(d).position(|(a, b)| a != b) {
            Some(i) => reject(
                &format!("{what} {i} of {} has another stride", p.len()),
                p[i].to_string(),
                d[i].to_string(),
            ),
            None => Ok(()),
        }
    };
    strides("KV entry", prefill.kv_item_lens, decode.kv_item_lens)?;
    strides(
        "state entry",
        prefill.state_item_lens,
        decode.state_item_lens,
    )?;
    Ok(())
}

/// The abort decode gives a request whose landed pages do not digest to what the prefill sent
/// (`--disaggregation-enable-kv-checksum`, sglang PR #39500: "Abort a mismatching request and
/// increment the transfer-failure counter"; HTTP 500). The leading words are sglang's: every
/// test of the feature matches them (`assertRaisesRegex(RuntimeError, "KV checksum
/// mismatch")` in CI, `assertIn("KV checksum mismatch", response.text)` over HTTP); the room
/// that follows is pdsim's rendering (the full f-string was not in the stored sources).
pub fn kv_checksum_mismatch(bootstrap_room: u64) -> String {
    KV_CHECKSUM_MISMATCH_TEMPLATE.replace("{bootstrap_room}", &bootstrap_room.to_string())
}

/// [`kv_checksum_mismatch`]'s template, as `pdsim lint` and `docs/sglang-pd.md` §12 print it.
pub const KV_CHECKSUM_MISMATCH_TEMPLATE: &str =
    "KV checksum mismatch for bootstrap_room={bootstrap_room}";

/// A Python `IndexError` raised while the worker builds a transfer (a layer list shorter than
/// the one it walks): it escapes the worker like a RuntimeError. pdsim files it under
/// `kv_layers_out_of_range`, the nearest stable kind, with Python's own text.
pub fn index_error() -> PdError {
    PdError::new(
        ErrorKind::KvLayersOutOfRange,
        "list index out of range".to_string(),
        Effect::WorkerDies,
    )
}

/// The Python `ZeroDivisionError` `get_mha_kv_ptrs_with_pp` meets when the source has no K/V
/// layer pair (`dst_num_total_layers % num_kv_layers` with `num_kv_layers == 0`).
pub fn zero_division_error() -> PdError {
    PdError::new(
        ErrorKind::KvLayersOutOfRange,
        "integer division or modulo by zero".to_string(),
        Effect::WorkerDies,
    )
}

/// `build_transfer_entry_pairs(src_layer_ids, dst_layer_ids, n_src, n_dst,
/// allow_positional_fallback)` (`disaggregation/utils.py`, docs/sglang-pd.md §2.5): pairs transfer entries by
/// global layer id, or positionally. Its RuntimeErrors escape the transfer worker, so they
/// kill it; they are filed under `kind` (the entries' family).
pub fn build_transfer_entry_pairs(
    src_layer_ids: &[u32],
    dst_layer_ids: &[u32],
    n_src: usize,
    n_dst: usize,
    allow_positional_fallback: bool,
    kind: ErrorKind,
) -> Result<Vec<(u32, u32)>, PdError> {
    let raise = |m: String| Err(PdError::new(kind, m, Effect::WorkerDies));
    if n_src == 0 {
        return Ok(Vec::new());
    }
    let (mut src, mut dst) = (src_layer_ids, dst_layer_ids);
    if src.is_empty() != dst.is_empty() {
        if !allow_positional_fallback {
            return raise(
                "Layer metadata must be provided by both PD peers or neither".to_string(),
            );
        }
        src = &[];
        dst = &[];
    }
    if !src.is_empty() {
        if src.len() != n_src || dst.len() != n_dst {
            return raise(format!(
                "Layer metadata length must match transfer entries: src metadata={} entries={n_src}, dst metadata={} entries={n_dst}",
                src.len(),
                dst.len()
            ));
        }
        // Each destination position is used once, in order, per layer id (a deque per id).
        let mut used = vec![false; n_dst];
        let mut pairs = Vec::with_capacity(n_src);
        for (i, id) in src.iter().enumerate() {
            let Some(j) = (0..n_dst).find(|&j| !used[j] && dst[j] == *id) else {
                return raise(format!(
                    "Decode peer is missing a transfer entry for model layer {id}"
                ));
            };
            used[j] = true;
            pairs.push((i as u32, j as u32));
        }
        return Ok(pairs);
    }
    if n_dst < n_src || (n_src != n_dst && !allow_positional_fallback) {
        return raise(format!(
            "PP-heterogeneous transfer requires layer ids on both peers; got src={n_src} dst={n_dst} entries"
        ));
    }
    Ok((0..n_src as u32).map(|i| (i, i)).collect())
}

/// A write past a registered region (docs/sglang-pd.md §3.8: the RDMA slice fails, the batch returns −1; the
/// worker then records "Failed to send kv chunk of {room} to {endpoint}:{port}").
pub fn out_of_bounds(decode_rank: u32, buffer: &str, end: u64, len: u64) -> PdError {
    PdError::new(
        ErrorKind::TransferOutOfBounds,
        format!(
            "Failed to send kv chunk: RDMA write to decode rank {decode_rank} {buffer} ends at byte {end}, past its registered length {len} (transfer returned -1; session blacklisted)"
        ),
        Effect::ReturnCodeFailure,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_formatting() {
        assert_eq!(py_list(&[196_608u64]), "[196608]");
        assert_eq!(py_list(&[1u64, 2]), "[1, 2]");
        assert_eq!(py_list::<u64>(&[]), "[]");
        assert_eq!(py_opt::<u64>(None), "None");
        assert_eq!(py_opt(Some(8192u64)), "8192");
    }

    #[test]
    fn effects_and_profiles_serialize_to_design_names() {
        assert_eq!(
            serde_json::to_value(Effect::ReturnCodeFailure).unwrap(),
            "return_code_failure"
        );
        assert_eq!(
            "slice_dispatch".parse::<Profile>(),
            Ok(Profile::SliceDispatch)
        );
        assert!("fast".parse::<Profile>().is_err());
    }

    #[test]
    fn first_contact_messages() {
        let e = first_contact(16, "auto", 64, "auto").unwrap_err();
        assert_eq!(
            e.message,
            "Page size mismatch: prefill server has page_size=16, but decode server has page_size=64. Both servers must use the same --page-size value."
        );
        assert_eq!(e.effect, Effect::RaisedOnDecode);
        // String comparison: `auto` and `bf16` differ although both store bf16.
        let e = first_contact(16, "auto", 16, "bf16").unwrap_err();
        assert_eq!(
            e.message,
            "KV cache dtype mismatch: prefill server has kv_cache_dtype=auto, but decode server has kv_cache_dtype=bf16. Both servers must use the same --kv-cache-dtype value."
        );
        assert_eq!(e.kind, ErrorKind::KvCacheDtypeMismatch);
        assert!(first_contact(16, "fp8_e4m3", 16, "fp8_e4m3").is_ok());
    }

    #[test]
    fn envelope_validator_logic() {
        // Flag off on prefill: returns at once, whatever decode registered.
        assert!(validate_envelope(false, 1, Some(2), &[1, 2], 24, Some(9)).is_ok());
        // TP is checked before the region shape.
        let e = validate_envelope(true, 2, Some(4), &[196_608], 1, Some(196_608)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::EnvelopeTpMismatch);
        // Unknown decode TP: only the shape check.
        assert!(validate_envelope(true, 2, None, &[5], 1, Some(5)).is_ok());
        let e = validate_envelope(true, 2, Some(2), &[5], 1, None).unwrap_err();
        assert!(e.message.ends_with(
            "decode has 1 with item_len=None. With --enable-unified-memory both sides must enable it and use the same page size and model spec."
        ));
        assert!(validate_envelope(true, 2, Some(2), &[5], 1, Some(5)).is_ok());
    }

    #[test]
    fn state_and_layer_messages() {
        let e = check_mamba_layouts(&[], &[], &[77_266_944], &[38_633_472]).unwrap_err();
        assert_eq!(
            e.message,
            "Mamba state layouts differ between prefill and decode (src item_lens=[77266944], dst item_lens=[38633472]) and no per-tensor dim metadata is available to reslice. With --enable-unified-memory, prefill and decode must both enable it and use equal attention TP sizes."
        );
        // Dims on both sides: resliceable, no error even if lengths differ.
        assert!(check_mamba_layouts(&[8, 4], &[4, 2], &[10, 20], &[5, 10]).is_ok());
        let e = check_mamba_slot_size(16, 32).unwrap_err();
        assert_eq!(
            e.message,
            "Prefill/Decode Mamba slot size mismatch (src=16, dst=32). Configure matching persistent state layouts on both peers."
        );
        let e = check_swa_hetero_tp("swa", false, 1, 2).unwrap_err();
        assert_eq!(
            e.message,
            "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."
        );
        assert_eq!(e.kind, ErrorKind::HeteroTpUnsupported);
        assert!(check_swa_hetero_tp("swa", true, 1, 2).is_ok());
        let e = check_kv_layers(12, 0).unwrap_err();
        assert_eq!(
            e.message,
            "Prefill transfer kvcache error, layers_current_pp_stage is out of range: layers_current_pp_stage=12, len(dst_k_ptrs)=0"
        );
        assert_eq!(e.effect, Effect::ReturnCodeFailure);
    }

    #[test]
    fn entry_pairs_follow_build_transfer_entry_pairs() {
        let k = ErrorKind::KvLayersOutOfRange;
        // Ids on both sides: paired by id, each destination used once, in order.
        assert_eq!(
            build_transfer_entry_pairs(&[3, 7, 3, 7], &[3, 7, 3, 7], 4, 4, true, k).unwrap(),
            vec![(0, 0), (1, 1), (2, 2), (3, 3)]
        );
        assert_eq!(
            build_transfer_entry_pairs(&[7, 3], &[3, 7, 11], 2, 3, true, k).unwrap(),
            vec![(0, 1), (1, 0)]
        );
        let e = build_transfer_entry_pairs(&[3, 9], &[3, 7], 2, 2, true, k).unwrap_err();
        assert_eq!(
            e.message,
            "Decode peer is missing a transfer entry for model layer 9"
        );
        let e = build_transfer_entry_pairs(&[3], &[3, 7], 2, 2, true, k).unwrap_err();
        assert_eq!(
            e.message,
            "Layer metadata length must match transfer entries: src metadata=1 entries=2, dst metadata=2 entries=2"
        );
        // Ids on one side only: positional fallback (pp = 1), which needs n_dst >= n_src.
        let ids: Vec<u32> = (0..24).collect();
        let e = build_transfer_entry_pairs(&ids, &[], 24, 1, true, k).unwrap_err();
        assert_eq!(
            e.message,
            "PP-heterogeneous transfer requires layer ids on both peers; got src=24 dst=1 entries"
        );
        assert_eq!(e.effect, Effect::WorkerDies);
        assert_eq!(
            build_transfer_entry_pairs(&[], &ids, 1, 24, true, k).unwrap(),
            vec![(0, 0)]
        );
        let e = build_transfer_entry_pairs(&[1], &[], 1, 1, false, k).unwrap_err();
        assert_eq!(
            e.message,
            "Layer metadata must be provided by both PD peers or neither"
        );
        assert!(
            build_transfer_entry_pairs(&[], &[], 0, 5, false, k)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn dispatch_rule_of_section_4_4() {
        use SendPath::*;
        // MHA hybrid, unified, unequal TP.
        assert_eq!(Profile::Guarded.kv_send_path(false, true, 1, 2), Slice);
        assert!(Profile::Guarded.validator_runs(Slice, true));
        assert_eq!(
            Profile::SliceDispatch.kv_send_path(false, true, 1, 2),
            Slice
        );
        assert!(!Profile::SliceDispatch.validator_runs(Slice, true));
        assert_eq!(
            Profile::Unguarded.kv_send_path(false, true, 1, 2),
            SendKvcache
        );
        assert!(!Profile::Unguarded.validator_runs(SendKvcache, true));
        // MLA always takes send_kvcache; equal TP too.
        assert_eq!(
            Profile::SliceDispatch.kv_send_path(true, true, 1, 2),
            SendKvcache
        );
        assert!(Profile::SliceDispatch.validator_runs(SendKvcache, true));
        assert_eq!(
            Profile::Guarded.kv_send_path(false, false, 2, 2),
            SendKvcache
        );
        // Non-unified MHA with unequal TP slices in every profile; the validator never runs.
        for p in Profile::ALL {
            assert_eq!(p.kv_send_path(false, false, 1, 2), Slice);
            assert!(!p.validator_runs(Slice, false));
        }
    }
}
