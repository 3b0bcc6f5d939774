//! What pdsim teaches about each failure kind (`pdsim explain`, `pdsim lint`): where in sglang it
//! is raised (file and function, as `docs/sglang-pd.md` records them for commit 0005973a), which
//! check raises it, what it does to the instances, and the launch flags that fix it.

use crate::spec::ServerArgs;
use crate::vocab::ErrorKind;

/// Teaching facts of one error kind.
#[derive(Clone, Copy, Debug)]
pub struct KindInfo {
    /// Where sglang raises it: file under `python/sglang/srt/` and function.
    pub raised_in: &'static str,
    /// The check, in words.
    pub check: &'static str,
    /// What happens to the request and the instances.
    pub effect: &'static str,
    /// The `docs/sglang-pd.md` section that explains it.
    pub doc: &'static str,
    /// Whether it is a consequence of another failure rather than a cause.
    pub knock_on: bool,
}

/// The facts of `kind`.
pub fn info(kind: ErrorKind) -> KindInfo {
    use ErrorKind as K;
    match kind {
        K::PageSizeMismatch => PAGE_SIZE_MISMATCH,
        K::KvCacheDtypeMismatch => KV_CACHE_DTYPE_MISMATCH,
        K::EnvelopeLayoutMismatch => ENVELOPE_LAYOUT_MISMATCH,
        K::EnvelopeTpMismatch => ENVELOPE_TP_MISMATCH,
        K::MambaLayoutMismatch => MAMBA_LAYOUT_MISMATCH,
        K::MambaSlotSizeMismatch => MAMBA_SLOT_SIZE_MISMATCH,
        K::KvLayersOutOfRange => KV_LAYERS_OUT_OF_RANGE,
        K::TransferOutOfBounds => TRANSFER_OUT_OF_BOUNDS,
        K::TransferTimeout => TRANSFER_TIMEOUT,
        K::WaitingTimeout => WAITING_TIMEOUT,
        K::BootstrapTimeout => BOOTSTRAP_TIMEOUT,
        K::PeerLost => PEER_LOST,
        K::SessionBlacklisted => SESSION_BLACKLISTED,
        K::HeteroTpUnsupported => HETERO_TP_UNSUPPORTED,
        K::TransferFailed => TRANSFER_FAILED,
        K::RequestTooLong => REQUEST_TOO_LONG,
        K::ServerCrashed => SERVER_CRASHED,
        K::PeerLayoutRejected => PEER_LAYOUT_REJECTED,
        K::KvChecksumMismatch => KV_CHECKSUM_MISMATCH,
    }
}

/// What a run on `--disaggregation-transfer-backend` `backend` does differently for `kind`
/// from the Mooncake facts of [`info`] (`docs/sglang-pd.md` §26.3), or `None` where it does the
/// same (every kind on `mooncake` / `mooncake_tcp`).
pub fn backend_note(backend: crate::spec::TransferBackend, kind: ErrorKind) -> Option<String> {
    use crate::spec::TransferBackend as B;
    use ErrorKind as K;
    let b = backend.as_str();
    match (backend, kind) {
        (B::Mooncake | B::MooncakeTcp, _) => None,
        (B::Nixl, K::TransferFailed | K::TransferTimeout) => Some(format!(
            "On {b}: NixlKVManager.transfer_worker polls the chunk's transfer handles (check_xfer_state) and raises \"NIXL transfer encountered ERR room=…\" when one is ERR; it records that as the room's failure and goes on. No session is blacklisted: the next room to the same decode tries again."
        )),
        (B::Mori, K::TransferFailed | K::TransferTimeout) => Some(format!(
            "On {b}: MoriKVSender.poll finds a failed batch_write status and fails the room with \"KV transfer failed: …\", then tells decode over ZMQ (notify_decode_status). No session is blacklisted: the next room to the same decode tries again."
        )),
        (B::Nixl, K::BootstrapTimeout) => Some(format!(
            "On {b}: NixlKVSender.poll calls _check_bootstrap_timeout only since sglang PR #34692 (in pdsim's 2026-09 versions); before it a room whose decode metadata never came stayed Bootstrapping for ever."
        )),
        (B::Mori, K::BootstrapTimeout) => Some(format!(
            "On {b}: MoriKVSender.poll checks its own deadline (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT) with its own text, \"… waiting for decode handshake\"."
        )),
        (B::Nixl | B::Mori, k)
            if info(k).effect.contains("worker") || info(k).effect.contains("thread") =>
        {
            Some(format!(
                "On {b}: the raise does not kill a transfer thread — NIXL's transfer_worker catches every exception (MORI's add_transfer_request: \"Transfer submission failed: …\") and fails the room only."
            ))
        }
        _ => None,
    }
}

/// A row of the table below, positionally (the fields in [`KindInfo`]'s order).
const fn row(
    raised_in: &'static str,
    check: &'static str,
    effect: &'static str,
    doc: &'static str,
    knock_on: bool,
) -> KindInfo {
    KindInfo {
        raised_in,
        check,
        effect,
        doc,
        knock_on,
    }
}

// The table, one row per kind, by family.

// Refused at first contact: decode compares the prefill's published parameters with its own
// (`try_ensure_parallel_info`) before it sends any page id.
const PAGE_SIZE_MISMATCH: KindInfo = row(
    "disaggregation/common/conn.py, CommonKVManager.try_ensure_parallel_info (decode side)",
    "at first contact with a prefill, decode compares the prefill's --page-size with its own",
    "decode fails the request before sending its page ids; every request of this prefill/decode pair fails the same way, nothing is transferred",
    "§2.1",
    false,
);
const KV_CACHE_DTYPE_MISMATCH: KindInfo = row(
    "disaggregation/common/conn.py, CommonKVManager.try_ensure_parallel_info (decode side)",
    "at first contact, decode compares the --kv-cache-dtype flag strings (as strings: `auto` and `bf16` differ although both store bf16)",
    "decode fails the request before sending its page ids; every request of the pair fails",
    "§2.1",
    false,
);

// Raised in the prefill's transfer worker: the worker thread of that queue shard dies, and
// every request hashed to the shard waits until the waiting timeout.
const ENVELOPE_LAYOUT_MISMATCH: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager._validate_envelope_kv_layout, called by send_kvcache in transfer_worker (prefill side)",
    "a prefill with --enable-unified-memory sends whole page envelopes, so it requires exactly one KV region on each side with equal item_len (error (1))",
    "a RuntimeError before the chunk's first RDMA write: the transfer worker thread of that queue shard dies (\"Transfer thread failed because of … is dead.\"); its requests and every later one hashed to the shard wait in WaitingForInput until the waiting timeout",
    "§2.4, §4(a), §4(c)",
    false,
);
const ENVELOPE_TP_MISMATCH: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager._validate_envelope_kv_layout, called by send_kvcache in transfer_worker (prefill side)",
    "a prefill with --enable-unified-memory refuses a decode whose attention TP differs: the whole-envelope state cannot be TP-resliced (error (2))",
    "a RuntimeError before the chunk's first RDMA write: the transfer worker thread of that queue shard dies; every request hashed to the shard waits until the waiting timeout",
    "§2.4, §4(b)",
    false,
);
const MAMBA_LAYOUT_MISMATCH: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager.maybe_send_extra (MAMBA branch), in transfer_worker after the last chunk's KV",
    "mamba/GDN state item_lens differ and one side published no per-tensor dims to reslice by",
    "a RuntimeError after the last chunk's KV went: the transfer worker thread of that queue shard dies; the shard's requests wait until the waiting timeout",
    "§2.5, §3.5, §4.4",
    false,
);
const MAMBA_SLOT_SIZE_MISMATCH: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager._send_mamba_state",
    "a paired mamba state entry has a different slot size on each side",
    "a RuntimeError: the transfer worker thread of that queue shard dies",
    "§2.5, §3.5",
    false,
);
// The guards sglang grew after the seed (`[sglang] version`, docs/sglang-pd.md §24).
const PEER_LAYOUT_REJECTED: KindInfo = row(
    "disaggregation/mooncake/conn.py, registration of the decode's KVArgs (sglang PR #37840, open; [sglang] version \"2026-09+pr37840\")",
    "when a decode session registers, the prefill compares page size, the state component list and, at equal attention TP, every KV and state entry's stride with its own",
    "the session is rejected before any write: every request to it fails at once with the registration error; the transfer worker lives on",
    "§24.3",
    false,
);
const KV_CHECKSUM_MISMATCH: KindInfo = row(
    "disaggregation/decode.py, the decode scheduler before batching (sglang PR #39500, --disaggregation-enable-kv-checksum; [sglang] version \"2026-09\" or later)",
    "decode's Adler-32 over the request's landed KV and state pages differs from the digest the prefill sent with the last chunk",
    "decode aborts the request (HTTP 500) before its first decode step and counts a failed transfer; a request already decoding is never re-checked",
    "§24.2",
    false,
);
const HETERO_TP_UNSUPPORTED: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager.maybe_send_extra (SWA branch)",
    "a non-MLA SWA hybrid with different prefill and decode attention TP",
    "a RuntimeError: the transfer worker thread of that queue shard dies",
    "§2.5, §5.1",
    false,
);

// A batch that returned −1: the room fails and the decode session is blacklisted.
const KV_LAYERS_OUT_OF_RANGE: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager._send_kvcache_generic (MHA branch)",
    "the prefill stage has more KV layers than the decode registered K regions (or a layer list is indexed past its end)",
    "return code −1: the room fails and the prefill blacklists the decode session, so later chunks to it fail at once (session_blacklisted)",
    "§2.5, §4(c)",
    false,
);
const TRANSFER_OUT_OF_BOUNDS: KindInfo = row(
    "Mooncake transfer engine (batch_transfer_sync), seen by MooncakeKVManager.transfer_worker",
    "an RDMA write ends past the decode's registered buffer; the slice fails and the batch returns −1",
    "the room fails and the decode session is blacklisted (later rooms to it fail as session_blacklisted); in-bounds bytes of the batch still landed",
    "§3.8, §4",
    false,
);
const TRANSFER_TIMEOUT: KindInfo = row(
    "Mooncake transfer engine (batch_transfer_sync timeout), seen by MooncakeKVManager.transfer_worker",
    "a batch did not complete within its timeout (a link or NIC down, or starved)",
    "the room fails and the decode session is blacklisted",
    "§3.8",
    false,
);
const TRANSFER_FAILED: KindInfo = row(
    "Mooncake transfer engine (batch_transfer_sync returned −1 after its retries), seen by MooncakeKVManager.transfer_worker",
    "a batch found no route or exhausted its retries (links or NICs down)",
    "the room fails and the decode session is blacklisted",
    "§3.8",
    false,
);

// Knock-on: a timeout, a lost peer or a blacklist, the consequence of another failure.
const WAITING_TIMEOUT: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVReceiver.poll (decode side; SGLANG_DISAGGREGATION_WAITING_TIMEOUT)",
    "decode waited in KVPoll.WaitingForInput longer than the waiting timeout",
    "decode fails the room and sends ABORT to the prefill; usually the knock-on of a dead transfer worker or a dead prefill",
    "§2.6",
    true,
);
const BOOTSTRAP_TIMEOUT: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVSender.poll (prefill side; SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT)",
    "prefill waited in KVPoll.Bootstrapping for decode's page ids longer than the bootstrap timeout",
    "the room fails; decode could not preallocate in time (its KV pool or prealloc queue is full)",
    "§2.6",
    true,
);
const PEER_LOST: KindInfo = row(
    "disaggregation/common/conn.py, the heartbeat checker's _handle_node_failure (decode side)",
    "the peer stopped answering: a prefill missed two heartbeats, or the decode itself died",
    "every room not yet Success on that peer fails (\"Lost connection with prefill instance …\")",
    "§2.6",
    true,
);
const SESSION_BLACKLISTED: KindInfo = row(
    "disaggregation/mooncake/conn.py, MooncakeKVManager.transfer_worker (failed_sessions)",
    "an earlier transfer to this decode session returned −1, so the prefill blacklisted it",
    "later chunks to that decode fail at once (\"Decode instance could be dead, remote mooncake session … is not alive\") until decode re-registers, or the failed-session probe (SGLANG_ENABLE_FAILED_SESSION_PROBE) finds its path back",
    "§2.6",
    true,
);

// The instance itself: a request that can never fit, a scheduler that died.
const REQUEST_TOO_LONG: KindInfo = row(
    "managers/tokenizer_manager.py (request validation before scheduling)",
    "the prompt plus output can never fit the instance's KV pages",
    "the request is rejected on arrival",
    "README \"Compute, memory and the prefix cache\"",
    false,
);
const SERVER_CRASHED: KindInfo = row(
    "managers/scheduler.py, the scheduler event loop",
    "an exception escaped the scheduler loop: the instance died under the request",
    "every request on the instance fails",
    "§2.6",
    false,
);

/// The launch flags that fix `kind` for this prefill/decode pair (`p`, `d`: their args).
pub fn fix(kind: ErrorKind, p: &ServerArgs, d: &ServerArgs) -> String {
    use ErrorKind as K;
    let tp = |a: &ServerArgs| {
        if a.attn_tp_size == a.tp_size {
            format!("--tp-size {}", a.tp_size)
        } else {
            format!(
                "--tp-size {} --dp-size {} --enable-dp-attention (attention TP {})",
                a.tp_size,
                a.tp_size / a.attn_tp_size.max(1),
                a.attn_tp_size
            )
        }
    };
    let unified = |a: &ServerArgs| {
        if a.enable_unified_memory {
            "--enable-unified-memory"
        } else {
            "no --enable-unified-memory"
        }
    };
    match kind {
        K::PageSizeMismatch => format!(
            "use the same --page-size on both servers (prefill has --page-size {}, decode --page-size {})",
            p.page_size, d.page_size
        ),
        K::KvCacheDtypeMismatch => format!(
            "use the same --kv-cache-dtype string on both servers (prefill {:?}, decode {:?}; `auto` and `bf16` count as different)",
            p.kv_cache_dtype, d.kv_cache_dtype
        ),
        K::EnvelopeLayoutMismatch => format!(
            "give both servers the same unified-memory setting, --page-size and model (prefill: {}, --page-size {}; decode: {}, --page-size {}); or drop --enable-unified-memory on both",
            unified(p),
            p.page_size,
            unified(d),
            d.page_size
        ),
        K::EnvelopeTpMismatch | K::MambaLayoutMismatch | K::MambaSlotSizeMismatch => format!(
            "with --enable-unified-memory use equal attention TP on both servers (prefill {}, decode {}); or drop --enable-unified-memory on both, so sglang reslices KV and mamba state per rank (send_kvcache_slice, _send_mamba_state_slice)",
            tp(p),
            tp(d)
        ),
        K::HeteroTpUnsupported => format!(
            "use equal attention TP on both servers (prefill {}, decode {})",
            tp(p),
            tp(d)
        ),
        K::KvLayersOutOfRange | K::TransferOutOfBounds => format!(
            "make both servers lay out KV alike: the same --model-path, --page-size, --kv-cache-dtype, unified-memory setting and attention TP (prefill: {}, {}, --page-size {}; decode: {}, {}, --page-size {}); a guarded sglang (with _validate_envelope_kv_layout) raises instead of writing out of place",
            tp(p),
            unified(p),
            p.page_size,
            tp(d),
            unified(d),
            d.page_size
        ),
        K::WaitingTimeout => "fix the error that killed the transfer worker (above); a timeout alone means the prefill is overloaded: add prefill instances, or raise SGLANG_DISAGGREGATION_WAITING_TIMEOUT".into(),
        K::BootstrapTimeout => "give decode room to preallocate: more decode instances, a larger --mem-fraction-static, or a lower --max-running-requests on prefill; SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT bounds the wait".into(),
        K::PeerLayoutRejected | K::KvChecksumMismatch => {
            let ssm = |a: &ServerArgs| {
                a.mamba_ssm_dtype
                    .as_deref()
                    .map_or("the model's own".to_string(), |d| format!("{d:?}"))
            };
            format!(
                "make both servers register the same layout: the same --page-size, --kv-cache-dtype and --mamba-ssm-dtype (prefill {}, decode {}), and equal attention TP where the state cannot be resliced (prefill {}, decode {})",
                ssm(p),
                ssm(d),
                tp(p),
                tp(d)
            )
        }
        K::PeerLost | K::ServerCrashed => "not a flag: restart the dead instance; the router's health check keeps new requests away meanwhile".into(),
        K::SessionBlacklisted => "fix the transfer that returned −1 first; SGLANG_ENABLE_FAILED_SESSION_PROBE=1 lets the prefill probe and clear the blacklist".into(),
        K::TransferTimeout | K::TransferFailed => "not a launch flag: a network fault (link or NIC down, lossy link); check --disaggregation-ib-device and the fabric".into(),
        K::RequestTooLong => "raise KV capacity: a larger --mem-fraction-static or --tp-size, or cap prompts with --context-length".into(),
    }
}
