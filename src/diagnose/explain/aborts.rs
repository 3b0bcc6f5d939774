//! The "Aborts" section of `pdsim explain`: how many clients gave up and where the servers
//! aborted their requests, the prefill work wasted, the pages doomed requests held per side
//! and for how long, the orphans of a failed prefill under the old router, and what fixes it
//! (`docs/sglang-pd.md` §21).

use super::read::Run;
use super::{Block, Section};
use crate::metrics::aborts::{HeldPages, LeakedPages};

/// One side's row: requests, page-s held after doom, the longest and mean doom → release.
fn row(side: &str, h: &HeldPages) -> Vec<String> {
    let s = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1} s"));
    vec![
        side.to_string(),
        h.requests.to_string(),
        format!("{:.0}", h.page_s),
        format!("{:.0}", h.page_s_after_doom),
        s(h.max_held_after_doom_s),
        s(h.mean_held_after_doom_s),
    ]
}

/// The section, when the run modelled aborts.
pub(super) fn aborts_section(run: &Run) -> Option<Section> {
    let s = &run.summary;
    let a = s.aborts.as_ref()?;
    let mut blocks = Vec::new();
    let deadline = a
        .client_timeout
        .as_deref()
        .unwrap_or("none: clients wait for ever");
    if a.disconnected > 0 {
        let stages: Vec<String> = a
            .by_stage
            .iter()
            .map(|c| format!("{} {}", c.count, c.stage.as_str()))
            .collect();
        blocks.push(Block::Para(format!(
            "Client deadline: {deadline}. {} clients disconnected before their request ended. The router dropped both legs of each; every server's TokenizerManager saw the closed connection at its next 4-s poll (`_wait_one_response`, SGLANG_REQUEST_STATE_WAIT_TIMEOUT) — at once when decode was already streaming tokens — and the scheduler's `abort_request` took the request out of its PD queues or marked it to finish: {} aborted ({}).",
            a.disconnected,
            a.aborted,
            if stages.is_empty() { "none".into() } else { stages.join(", ") }
        )));
        if a.disconnected > a.aborted {
            blocks.push(Block::Para(format!(
                "{} of them ended on their own between the disconnect and the servers' next look, their output unread.",
                a.disconnected - a.aborted
            )));
        }
        blocks.push(Block::Para(format!(
            "Prefill computed {} prompt tokens ({:.2} GPU-s) for requests later aborted: work done for nobody.",
            a.wasted_prefill_tokens, a.wasted_prefill_gpu_s
        )));
    } else {
        blocks.push(Block::Para(format!(
            "Client deadline: {deadline}. No client disconnected."
        )));
    }
    blocks.push(Block::Para(
        "Pages held by doomed requests (doomed: from the client's disconnect, or the prefill's failure for an orphan, to the request's end):".into(),
    ));
    blocks.push(Block::Table(
        vec![
            "side".into(),
            "requests".into(),
            "page-s held".into(),
            "page-s after doom".into(),
            "longest doom → release".into(),
            "mean doom → release".into(),
        ],
        vec![row("prefill", &a.prefill), row("decode", &a.decode)],
    ));
    let decode = s.pools.iter().find(|p| p.role == "decode");
    if let Some(l) = a.decode_leaked {
        blocks.extend(leak_blocks(run, &l));
    }
    if a.orphaned > 0 {
        let occ = decode
            .and_then(|p| p.kv_occupancy)
            .map_or("—".to_string(), |v| format!("{:.0} %", v * 100.0));
        let batch = decode
            .and_then(|p| p.batch_mean)
            .map_or("—".to_string(), |v| format!("{v:.1}"));
        blocks.push(Block::Para(format!(
            "{} requests were orphaned: their prefill timed out in KVPoll.Bootstrapping (decode had not sent its page ids in time, because decode was full), and with router.abort_propagation = \"{}\" the router kept waiting on the decode leg (sgl-model-gateway before PR #29017, sglang issue #9726). Decode kept each in its prealloc queue, preallocated its pages when some came free, and held them in WaitingForInput for KV that would never come, until its own waiting timeout or the client's disconnect: {:.0} page-s held for nothing, up to {:.0} s after the prefill had given up. That is the \"decode full, nothing running\" incident: decode KV occupancy {occ}, a mean batch of {batch}, while orphans hold the pages new requests need, so more prefills time out and the loop feeds itself.",
            a.orphaned,
            a.propagation,
            a.decode.page_s_after_doom,
            a.decode.max_held_after_doom_s.unwrap_or(0.0)
        )));
        if let Some(m) = &a.orphan_message {
            blocks.push(Block::Quote(m.clone()));
        }
        blocks.push(Block::Bullets(vec![
            "Run a router with PR #29017 (router.abort_propagation = \"cancel_paired\", sglang main): a failed prefill leg drops the decode leg, and decode aborts the request out of its prealloc queue before it holds a page.".into(),
            "Until then, a shorter SGLANG_DISAGGREGATION_WAITING_TIMEOUT (sglang.waiting_timeout_s) bounds how long an orphan holds its pages.".into(),
            "Decode capacity (more instances or KV pages) keeps prefills from timing out while they wait for decode's page ids at all.".into(),
        ]));
    } else if a.aborted > 0 && a.decode_leaked.is_some_and(|l| l.requests > 0) {
        blocks.push(Block::Para(format!(
            "With router.abort_propagation = \"{}\" nothing is orphaned, and every other aborted request's pages were freed when its server saw the disconnect; the leak above is the one place pages outlived their request.",
            a.propagation
        )));
    } else if a.aborted > 0 {
        let worst = a
            .by_stage
            .iter()
            .max_by_key(|c| c.count)
            .map_or("—", |c| c.stage.as_str());
        blocks.push(Block::Para(format!(
            "With router.abort_propagation = \"{}\" nothing is orphaned: each side frees an aborted request's pages when it sees the disconnect, at most one 4-s poll after it. The cost of aborts is the work done before it; most were aborted at {worst}. Deadlines longer than the run's p99 end-to-end latency, or capacity at that stage, abort fewer.",
            a.propagation
        )));
    }
    Some(Section {
        title: "Aborts".into(),
        blocks,
    })
}

/// The leak of sglang before PR #9817 (`sglang.decode_queue_abort = "leak"`): what decode lost
/// and what it did to the run.
fn leak_blocks(run: &Run, l: &LeakedPages) -> Vec<Block> {
    if l.requests == 0 {
        return vec![Block::Para(
            "With sglang.decode_queue_abort = \"leak\" (sglang before PR #9817) a request aborted in decode's waiting queue keeps its pages for good; no request was aborted there in this run, so nothing leaked.".into(),
        )];
    }
    let total: u64 = run
        .record
        .instances
        .iter()
        .filter(|i| i.role == "decode")
        .map(|i| u64::from(i.kv_pages))
        .sum();
    let share = if total > 0 {
        format!(
            " ({:.0} % of decode's {total})",
            100.0 * l.pages as f64 / total as f64
        )
    } else {
        String::new()
    };
    vec![
        Block::Para(format!(
            "{} requests were aborted in decode's waiting queue (transferred, waiting for a place in the running batch) and, with sglang.decode_queue_abort = \"leak\" (sglang before PR #9817, merged 2025-08-30), popped by `abort_request` without `release_kv_cache`: {} pages{share} never came back, {:.0} page-s lost by the end of the run. Decode runs on what is left: its prealloc queue waits for pages that will not come free, prefills time out waiting for its page ids, and only a restart gives the pages back.",
            l.requests, l.pages, l.page_s
        )),
        Block::Bullets(vec![
            "Run an sglang with PR #9817 (sglang.decode_queue_abort = \"release\", the default): the aborted request's KV is released when it is popped.".into(),
            "Until then, a larger max_running_requests keeps fewer requests waiting in that queue, and restarting decode returns what leaked.".into(),
        ]),
    ]
}
