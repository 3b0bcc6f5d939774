//! Outcome prediction for a prefill/decode pair, from the layouts and the transfer contract
//! alone (`layout/`), without simulating traffic: the first-contact error, the chunk error, the
//! last-chunk error, or — for writes that are not exact — a probe through the corruption oracle.
//! `pdsim lint` reports it; `pdsim explain` prints the layout facts of each pool.

use serde::Serialize;

use crate::layout::{
    Capacity, ChunkRequest, DecodeMemory, Effect, PairPlan, PdError, RankLayout, RequestId,
    SendPath, Verdict,
};
use crate::vocab::ErrorKind;

/// The outcome pdsim predicts for a pair.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// Whether requests complete from their own bytes.
    pub compatible: bool,
    /// `completed`, `failed` or `corrupted`.
    pub outcome: &'static str,
    /// The error kind, when one is raised.
    pub kind: Option<ErrorKind>,
    /// sglang's message, word for word.
    pub message: Option<String>,
    /// Who raises it and when.
    pub raised: Option<String>,
    /// The KV send function of the pair.
    pub send_path: SendPath,
    /// Prefill rank 0: KV item_lens and state item_lens (bytes).
    pub prefill_layout: LayoutFacts,
    /// Decode rank 0: the same.
    pub decode_layout: LayoutFacts,
}

/// The sizes a check compares, for one side (rank 0).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LayoutFacts {
    /// Attention TP.
    pub attn_tp_size: u32,
    /// Tokens per page.
    pub page_size: u32,
    /// `--kv-cache-dtype` string.
    pub kv_cache_dtype: String,
    /// Unified memory.
    pub unified: bool,
    /// KV regions.
    pub kv_regions: usize,
    /// Distinct KV item lengths, bytes.
    pub kv_item_lens: Vec<u64>,
    /// State regions.
    pub state_regions: usize,
    /// Distinct state item lengths, bytes.
    pub state_item_lens: Vec<u64>,
    /// Whether per-tensor dims are published (sliced state transfer possible).
    pub state_dims: bool,
    /// FP4 KV only: the scale regions the pool allocates and does not register
    /// (docs/sglang-pd.md §29); absent (0) otherwise.
    #[serde(skip_serializing_if = "is_zero")]
    pub kv_scale_regions_unregistered: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The fix for a pair corrupted by FP4 scales that no transfer sends (docs/sglang-pd.md §29).
pub const FP4_FIX: &str = "--kv-cache-dtype fp8_e4m3 on both sides (sglang's FP8 pools register the whole KV, one byte an element with no scales apart; 16/9 the bytes of FP4), or serve the FP4 KV cache colocated, where no PD transfer happens";

/// Whether `pr` is the corruption of FP4 scales that no transfer sends, and nothing else.
pub fn fp4_scales_only(pr: &Prediction) -> bool {
    pr.outcome == "corrupted" && pr.raised.as_deref() == Some(FP4_SCALES_RAISED)
}

/// The sentence `raised` carries for a pair whose only fault is FP4 scales that no transfer
/// sends (docs/sglang-pd.md §29).
pub const FP4_SCALES_RAISED: &str = "nobody: no check fires; sglang's FP4 KV pools (MHATokenToKVPoolFP4, MLATokenToKVPoolFP4) register no scale buffer for PD (get_contiguous_buf_infos is the base class's), so the decode dequantises every transferred token with its own zero-filled, never-written scale buffers";

impl LayoutFacts {
    /// The facts of one rank layout.
    pub fn of(l: &RankLayout) -> Self {
        let dedup = |mut v: Vec<u64>| {
            v.dedup();
            v
        };
        let kv = l.kv_item_lens();
        let st = l.state_item_lens();
        Self {
            attn_tp_size: l.attn_tp_size,
            page_size: l.page_size,
            kv_cache_dtype: l.kv_cache_dtype.clone(),
            unified: l.unified,
            kv_regions: kv.len(),
            kv_item_lens: dedup(kv),
            state_regions: st.len(),
            state_item_lens: dedup(st),
            state_dims: !l.state_dim_per_tensor().is_empty(),
            kv_scale_regions_unregistered: l.kv_scale_regions.len(),
        }
    }

    /// `KV 24 region(s) × 8192 B; state 1 region(s) × 38633472 B (no dims)`.
    pub fn line(&self) -> String {
        let list = |v: &[u64]| {
            v.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("/")
        };
        let mut s = format!(
            "attention TP {}, page {}, kv {}, {}: KV {} region(s) × {} B",
            self.attn_tp_size,
            self.page_size,
            self.kv_cache_dtype,
            if self.unified {
                "unified"
            } else {
                "not unified"
            },
            self.kv_regions,
            list(&self.kv_item_lens)
        );
        if self.kv_scale_regions_unregistered > 0 {
            s += &format!(
                "; {} FP4 scale region(s) not registered",
                self.kv_scale_regions_unregistered
            );
        }
        if self.state_regions > 0 {
            s += &format!(
                "; state {} region(s) × {} B{}",
                self.state_regions,
                list(&self.state_item_lens),
                if self.state_dims {
                    ""
                } else {
                    " (no per-tensor dims)"
                }
            );
        }
        s
    }
}

/// What a failed check's effect means, for `raised`.
fn raised_text(e: &PdError, when: &str) -> String {
    match e.effect {
        Effect::RaisedOnDecode => "decode, at first contact with the prefill".into(),
        Effect::WorkerDies => {
            format!("the prefill transfer worker, {when}; the worker thread dies")
        }
        Effect::ReturnCodeFailure => {
            format!("the prefill transfer worker, {when}; return code −1, session blacklisted")
        }
        Effect::SessionRejected => "the prefill, when the decode session registers (sglang PR #37840): the session is rejected before any write; every request to it fails, the worker lives on".into(),
    }
}

/// Predicts the outcome of `plan` as the simulator would meet it: first-contact error, the
/// chunk error, the last-chunk error, then — for a plan whose writes are not exact — a probe
/// request through the corruption oracle decides between an out-of-bounds write (rc −1) and
/// silent corruption.
pub fn predict(plan: &PairPlan) -> Prediction {
    let facts = (
        LayoutFacts::of(&plan.prefill_layouts()[0]),
        LayoutFacts::of(&plan.decode_layouts()[0]),
    );
    let failed = |e: &PdError, when: &str| Prediction {
        compatible: false,
        outcome: "failed",
        kind: Some(e.kind),
        message: Some(e.message.clone()),
        raised: Some(raised_text(e, when)),
        send_path: plan.send_path(),
        prefill_layout: facts.0.clone(),
        decode_layout: facts.1.clone(),
    };
    if let Some(e) = plan.first_contact() {
        return failed(e, "");
    }
    if let Some(e) = plan.chunk_error() {
        return failed(e, "before the chunk's first RDMA write");
    }
    if let Some(e) = plan.last_chunk_error() {
        return failed(e, "after the last chunk's KV was sent");
    }
    let (outcome, err, registered_clean) = if plan.is_exact() {
        ("completed", None, true)
    } else {
        probe(plan)
    };
    // `--disaggregation-enable-kv-checksum` (sglang PR #39500, `sglang::checksum`): a request
    // whose landed bytes are not its own, or a pair whose sides digest different item
    // lengths, aborts on decode before its first token instead of finishing. It digests the
    // registered pages: FP4 scales nobody sent pass it (docs/sglang-pd.md §29).
    if let Some(c) = plan.kv_checksum()
        && err.is_none()
        && ((outcome == "corrupted" && !registered_clean) || !c.comparable)
    {
        return Prediction {
            compatible: false,
            outcome: "failed",
            kind: Some(ErrorKind::KvChecksumMismatch),
            message: Some(crate::layout::checks::KV_CHECKSUM_MISMATCH_TEMPLATE.into()),
            raised: Some(if c.comparable {
                "decode, before the request joins a batch (--disaggregation-enable-kv-checksum): its landed pages are not the ones the prefill digested, so it aborts (HTTP 500) instead of finishing corrupted; a request already decoding that a later stray write hits is not re-checked".into()
            } else {
                "decode, before the request joins a batch (--disaggregation-enable-kv-checksum): the two sides register different item lengths, so their digests differ on every request, clean or not (the false aborts sglang PR #39729 reports); every request aborts".into()
            }),
            send_path: plan.send_path(),
            prefill_layout: facts.0,
            decode_layout: facts.1,
        };
    }
    match err {
        Some(e) => failed(&e, "when the RDMA batch returns"),
        None => Prediction {
            compatible: outcome == "completed",
            outcome,
            kind: None,
            message: None,
            raised: (outcome == "corrupted").then(|| {
                if registered_clean && facts.1.kv_scale_regions_unregistered > 0 {
                    FP4_SCALES_RAISED.into()
                } else {
                    "nobody: no check fires; the writes land on bytes the request does not own"
                        .into()
                }
            }),
            send_path: plan.send_path(),
            prefill_layout: facts.0,
            decode_layout: facts.1,
        },
    }
}

/// Two requests on a small decode memory, each sending a two-chunk transfer: an out-of-bounds
/// write, or the first request's verdict (corrupted when its bytes are not its own or it
/// clobbered its neighbour), and whether every registered byte landed as its owner's (false
/// only when the corruption is more than an FP4 pool's unsent scales).
fn probe(plan: &PairPlan) -> (&'static str, Option<PdError>, bool) {
    let cap = Capacity {
        // Room past the probe's units, as a real pool has: a write that lands beyond its own
        // unit (an unsliced copy into smaller slots) stays in bounds unless it would in any
        // pool, which is what the simulation meets for all but the last units.
        pages: 64,
        slots: 8,
        aux_rows: 8,
    };
    let decode = plan.decode_layouts();
    let mut mem = DecodeMemory::new(decode, cap);
    let reg = decode[0].registration(&cap);
    let hybrid = !decode[0].state_item_lens().is_empty();
    let mut reqs = Vec::new();
    for r in 0..2u64 {
        let Some((pages, slot, aux)) = mem.alloc_fresh(RequestId(r + 1), 3, hybrid) else {
            return ("completed", None, true);
        };
        reqs.push((RequestId(r + 1), pages, slot, aux));
    }
    let _ = reg;
    let mut registered_clean = true;
    let mut writes = Vec::new();
    for (id, pages, slot, aux) in &reqs {
        let src: Vec<u32> = (1..=pages.len() as u32)
            .map(|p| p + 10 * id.0 as u32)
            .collect();
        for (range, last) in [(0..2, false), (2..3, true)] {
            let req = ChunkRequest {
                src_pages: &src[range.clone()],
                dst_pages: &pages[range],
                last,
                src_slot: slot.map(|_| id.0 as u32),
                dst_slot: *slot,
                src_aux: id.0 as u32,
                dst_aux: *aux,
            };
            writes.clear();
            plan.writes(&req, &mut writes);
            let out = mem.apply(plan, *id, &writes);
            if let Some(e) = out.error {
                return ("failed", Some(e), false);
            }
        }
        registered_clean &= mem.landed(*id);
    }
    let mut corrupted = false;
    for (id, ..) in &reqs {
        let rep = mem.release(*id, None);
        corrupted |= !matches!(rep.verdict, Verdict::Completed) || !rep.victims.is_empty();
        // A neighbour hit after it landed is corrupted by a registered write.
        registered_clean &= rep.corrupted_by.iter().all(|b| b == id);
    }
    if corrupted {
        ("corrupted", None, registered_clean)
    } else {
        ("completed", None, true)
    }
}
