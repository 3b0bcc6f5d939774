//! Every message pdsim attributes to sglang, compared character for character with the
//! template `docs/sglang-pd.md` §12 quotes: the test fills each template's placeholders with
//! the sample values pdsim was given and checks pdsim's rendering equals it. A template in the
//! table without a rendering here, or the reverse, fails the test.

use std::collections::BTreeMap;

use crate::layout::checks;
use crate::sglang::decode::scheduler_hit_an_exception;
use crate::sglang::decode_radix::{Refusal, refusal};
use crate::sglang::heartbeat::lost_prefill;
use crate::sglang::transfer::{
    DecodeEndpoint, failed_to_send, session_not_alive, timed_out, transfer_thread_failed,
};
use crate::spec::TransferBackend;
use crate::vocab::ErrorKind;
use crate::vocab::ids::InstanceId;

const DOC: &str = include_str!("../../docs/sglang-pd.md");

/// `(id, template)` of every row of docs/sglang-pd.md §12's table.
fn templates() -> BTreeMap<String, String> {
    let start = DOC
        .find("## 12. Every message pdsim attributes to sglang")
        .expect("§12 exists");
    // §12 only: its table ends where §13 begins (later tables have backticked cells too).
    let end = DOC[start..]
        .find("\n## 13.")
        .map_or(DOC.len(), |e| start + e);
    let mut out = BTreeMap::new();
    for line in DOC[start..end].lines() {
        let cells: Vec<&str> = line.split(" | ").collect();
        if cells.len() < 3 || !cells[1].starts_with('`') {
            continue;
        }
        let id = cells[0].trim_start_matches('|').trim();
        let t = cells[1].trim().trim_matches('`');
        assert!(
            out.insert(id.to_string(), t.to_string()).is_none(),
            "id {id} twice"
        );
    }
    out
}

/// Fills `{expr}` placeholders (the whole text between the braces, format spec included).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let j = rest[i..].find('}').expect("closed placeholder") + i;
        let key = &rest[i + 1..j];
        let v = values
            .iter()
            .find(|(k, _)| *k == key)
            .unwrap_or_else(|| panic!("no sample value for {{{key}}} in {template:?}"));
        out.push_str(v.1);
        rest = &rest[j + 1..];
    }
    out + rest
}

fn err<T>(r: Result<T, checks::PdError>) -> String {
    r.err().expect("the check raises").message
}

/// One message: its docs/sglang-pd.md §12 id, pdsim's text, and the values its f-string is filled with.
type Case = (&'static str, String, Vec<(&'static str, &'static str)>);

/// The layout checks' messages (`checks`), filled from the values that raise them.
fn check_cases() -> Vec<Case> {
    let k = ErrorKind::KvLayersOutOfRange;
    let ids: Vec<u32> = (0..24).collect();
    vec![
        (
            "page_size",
            err(checks::first_contact(16, "auto", 64, "auto")),
            vec![("prefill_page_size", "16"), ("decode_page_size", "64")],
        ),
        (
            "kv_dtype",
            err(checks::first_contact(16, "auto", 16, "bf16")),
            vec![
                ("prefill_kv_cache_dtype", "auto"),
                ("decode_kv_cache_dtype", "bf16"),
            ],
        ),
        (
            "envelope_tp",
            err(checks::validate_envelope(
                true,
                2,
                Some(4),
                &[196_608],
                1,
                Some(196_608),
            )),
            vec![("self.attn_tp_size", "2"), ("dst_attn_tp_size", "4")],
        ),
        (
            "envelope_layout",
            err(checks::validate_envelope(
                true,
                2,
                Some(2),
                &[196_608],
                24,
                Some(8192),
            )),
            vec![
                ("len(src_item_lens)", "1"),
                ("src_item_lens", "[196608]"),
                ("len(dst_kv_ptrs)", "24"),
                ("dst_kv_item_len", "8192"),
            ],
        ),
        (
            "mamba_layouts",
            err(checks::check_mamba_layouts(
                &[],
                &[],
                &[77_266_944],
                &[38_633_472, 1],
            )),
            vec![
                ("src_item_lens", "[77266944]"),
                ("dst_item_lens", "[38633472, 1]"),
            ],
        ),
        (
            "mamba_slot",
            err(checks::check_mamba_slot_size(16, 32)),
            vec![("length", "16"), ("dst_state_item_lens[j]", "32")],
        ),
        (
            "swa_tp",
            err(checks::check_swa_hetero_tp("swa", false, 1, 4)),
            vec![("st.upper()", "SWA")],
        ),
        (
            "layers_range",
            err(checks::check_kv_layers(80, 64)),
            vec![("layers_current_pp_stage", "80"), ("len(dst_k_ptrs)", "64")],
        ),
        (
            "pairs_both",
            err(checks::build_transfer_entry_pairs(
                &[1],
                &[],
                1,
                1,
                false,
                k,
            )),
            vec![],
        ),
        (
            "pairs_len",
            err(checks::build_transfer_entry_pairs(
                &[3],
                &[3, 7],
                2,
                2,
                true,
                k,
            )),
            vec![
                ("len(src_layer_ids)", "1"),
                ("n_src", "2"),
                ("len(dst_layer_ids)", "2"),
                ("n_dst", "2"),
            ],
        ),
        (
            "pairs_missing",
            err(checks::build_transfer_entry_pairs(
                &[3, 9],
                &[3, 7],
                2,
                2,
                true,
                k,
            )),
            vec![("layer_id", "9")],
        ),
        (
            "pairs_pp",
            err(checks::build_transfer_entry_pairs(
                &ids,
                &[],
                24,
                1,
                true,
                k,
            )),
            vec![("n_src", "24"), ("n_dst", "1")],
        ),
        (
            "kv_checksum",
            checks::kv_checksum_mismatch(4_793_981_895_866_140_836),
            vec![("bootstrap_room", "4793981895866140836")],
        ),
    ]
}

/// The transfer path's messages (`conn.py`, the scheduler), from a decode endpoint.
fn conn_cases() -> Vec<Case> {
    let ep = DecodeEndpoint {
        instance: InstanceId(258),
        gpus: vec![],
        page_size: 16,
        watched: false,
        ports: vec![17_000, 17_001],
    };
    vec![
        (
            "send_failed",
            failed_to_send(5_946_051_343_055_743_272, &ep, 1),
            vec![
                ("kv_chunk.room", "5946051343055743272"),
                (
                    "NetworkAddress(req.endpoint, req.dst_port).to_host_port_str()",
                    "10.0.1.2:17001",
                ),
            ],
        ),
        (
            "not_alive",
            session_not_alive(&ep.session(0)),
            vec![("req.mooncake_session_id", "10.0.1.2:17000")],
        ),
        (
            "thread_failed",
            transfer_thread_failed("boom."),
            vec![("e", "boom."), ("self.bootstrap_port", "8998")],
        ),
        (
            "waiting_timeout",
            timed_out(42, 300.0, "WaitingForInput"),
            vec![("self.bootstrap_room", "42"), ("elapsed:.1f", "300.0")],
        ),
        (
            "bootstrap_timeout",
            timed_out(7, 29.96, "Bootstrapping"),
            vec![("self.bootstrap_room", "7"), ("elapsed:.1f", "30.0")],
        ),
        (
            "lost_prefill",
            lost_prefill("10.0.0.1:8998"),
            vec![("failed_bootstrap_addr", "10.0.0.1:8998")],
        ),
        (
            "scheduler",
            scheduler_hit_an_exception("Page size mismatch"),
            vec![("traceback", "RuntimeError: Page size mismatch")],
        ),
        ("radix_hisparse", refusal(Refusal::Hisparse), vec![]),
        ("radix_fake", refusal(Refusal::FakeBackend), vec![]),
        (
            "radix_speculative",
            refusal(Refusal::Speculative("EAGLE3")),
            vec![("server_args.speculative_algorithm", "EAGLE3")],
        ),
        ("radix_swa", refusal(Refusal::Swa), vec![]),
        ("radix_mamba", refusal(Refusal::MambaSsm), vec![]),
        (
            "staging_oversized",
            crate::sglang::staging::oversized(5_946_051_343_055_743_272),
            vec![("kv_chunk.room", "5946051343055743272")],
        ),
        (
            "nixl_err",
            TransferBackend::Nixl.write_failed_text(42, || unreachable!()),
            vec![("room", "42")],
        ),
        (
            "mori_bootstrap_timeout",
            TransferBackend::Mori.bootstrap_timeout_text(7, 29.96),
            vec![("self.bootstrap_room", "7"), ("elapsed:.1f", "30.0")],
        ),
        (
            "mori_submission",
            TransferBackend::Mori.raised_text("boom"),
            vec![("e", "boom")],
        ),
        (
            "mori_failed",
            TransferBackend::Mori.write_failed_text(42, || unreachable!()),
            vec![("status.Message()", "write failed")],
        ),
        ("index_error", checks::index_error().message, vec![]),
        (
            "zero_division",
            checks::zero_division_error().message,
            vec![],
        ),
    ]
}

#[test]
fn every_sglang_message_is_its_f_string_filled_as_python_fills_it() {
    let cases: Vec<Case> = check_cases().into_iter().chain(conn_cases()).collect();
    let table = templates();
    let rendered: BTreeMap<&str, ()> = cases.iter().map(|c| (c.0, ())).collect();
    assert_eq!(
        table.keys().map(String::as_str).collect::<Vec<_>>(),
        rendered.keys().copied().collect::<Vec<_>>(),
        "§12 and this test cover the same messages"
    );
    for (id, got, values) in &cases {
        assert_eq!(got, &fill(&table[*id], values), "message {id}");
    }
}
