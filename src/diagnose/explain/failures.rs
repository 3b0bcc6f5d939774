//! A section per failure kind — sglang's text, the check and where it is raised, the two
//! layouts that differed, who was hurt, the fix — and one for the requests corrupted in
//! silence.

use super::read::Run;
use super::shards::{dead_shards, knock_on};
use super::{Block, Section, instances, plan};
use crate::diagnose::kinds;
use crate::diagnose::outcome::{FP4_FIX, LayoutFacts, fp4_scales_only, predict};
use crate::layout::PairPlan;
use crate::scenario::Scenario;
use crate::vocab::ErrorKind;

/// The ways two sides' layouts differ, in words.
fn differences(p: &LayoutFacts, d: &LayoutFacts) -> Vec<String> {
    let mut v = Vec::new();
    if p.attn_tp_size != d.attn_tp_size {
        v.push(format!(
            "attention TP {} vs {}",
            p.attn_tp_size, d.attn_tp_size
        ));
    }
    if p.page_size != d.page_size {
        v.push(format!("page size {} vs {}", p.page_size, d.page_size));
    }
    if p.kv_cache_dtype != d.kv_cache_dtype {
        v.push(format!(
            "--kv-cache-dtype {:?} vs {:?}",
            p.kv_cache_dtype, d.kv_cache_dtype
        ));
    }
    if p.unified != d.unified {
        v.push(format!(
            "unified memory {} vs {}",
            if p.unified { "on" } else { "off" },
            if d.unified { "on" } else { "off" }
        ));
    }
    if (p.kv_regions, &p.kv_item_lens) != (d.kv_regions, &d.kv_item_lens) {
        v.push(format!(
            "KV regions {} × {:?} B vs {} × {:?} B",
            p.kv_regions, p.kv_item_lens, d.kv_regions, d.kv_item_lens
        ));
    }
    if (p.state_regions, &p.state_item_lens) != (d.state_regions, &d.state_item_lens) {
        v.push(format!(
            "state regions {} × {:?} B vs {} × {:?} B",
            p.state_regions, p.state_item_lens, d.state_regions, d.state_item_lens
        ));
    }
    v
}

/// The pool pairs whose requests met `kind` (by request), or whose plan raises it.
fn pairs_with(run: &Run, sc: &Scenario, kind: ErrorKind) -> Vec<(usize, usize)> {
    let names = instances(sc);
    let mut pairs = std::collections::BTreeSet::new();
    for (&(p, d), c) in &run.per_pair {
        let (pp, dp) = (names[p as usize].0, names[d as usize].0);
        let by_plan = plan(sc, pp, dp).is_some_and(|pl| {
            [pl.first_contact(), pl.chunk_error(), pl.last_chunk_error()]
                .into_iter()
                .flatten()
                .any(|e| e.kind == kind)
        });
        if by_plan || c.kinds.contains_key(kind.as_str()) {
            pairs.insert((pp, dp));
        }
    }
    pairs.into_iter().collect()
}

/// The layouts of a pool pair and how they differ.
fn pair_blocks(sc: &Scenario, p: usize, d: usize) -> Vec<Block> {
    let (pp, dp) = (&sc.pools[p], &sc.pools[d]);
    let (pf, df) = (
        LayoutFacts::of(&pp.layout[0]),
        LayoutFacts::of(&dp.layout[0]),
    );
    let diff = differences(&pf, &df);
    vec![
        Block::Bullets(vec![
            format!("prefill pool {:?}: {}", pp.name, pf.line()),
            format!("decode pool {:?}: {}", dp.name, df.line()),
        ]),
        Block::Para(if diff.is_empty() {
            "The two layouts are identical.".into()
        } else {
            format!("They differ in: {}.", diff.join("; "))
        }),
    ]
}

/// The section of error kind `kind` (`n` in the summary, sglang's `message`): the kind's
/// facts, and with a scenario: for a cause, each pool pair it struck with their layouts and
/// the fix; the healthy instances stalled behind the queues it killed; for a waiting timeout,
/// whether a dead worker explains it; for another knock-on kind, the injected faults; and the
/// fix of a knock-on kind.
pub(super) fn kind_section(
    run: &Run,
    sc: Option<&Scenario>,
    kind: ErrorKind,
    n: u64,
    message: &str,
) -> Section {
    let i = kinds::info(kind);
    let mut blocks = vec![
        Block::Quote(message.to_string()),
        Block::Bullets(vec![
            format!("raised in: {}", i.raised_in),
            format!("check: {}", i.check),
            format!("effect: {}", i.effect),
            format!("see: docs/sglang-pd.md {}", i.doc),
        ]),
    ];
    let Some(sc) = sc else {
        return Section {
            title: format!("{kind} ×{n}"),
            blocks,
        };
    };
    if let Some(note) = kinds::backend_note(sc.sglang.transfer_backend, kind) {
        blocks.push(Block::Para(note));
    }
    let dead = dead_shards(run, sc);
    let pairs = pairs_with(run, sc, kind);
    if !i.knock_on {
        for &(p, d) in &pairs {
            blocks.extend(pair_blocks(sc, p, d));
            if kind == ErrorKind::KvChecksumMismatch {
                blocks.push(Block::Para(checksum_story(sc, p, d)));
            }
            blocks.push(Block::Para(format!(
                "Fix: {}.",
                kinds::fix(kind, &sc.pools[p].server, &sc.pools[d].server)
            )));
        }
    }
    let k = knock_on(run, sc, &dead, kind);
    if !k.is_empty() {
        blocks.push(Block::Para("Knock-on:".into()));
        blocks.push(Block::Bullets(k));
    }
    if kind == ErrorKind::WaitingTimeout {
        let stalled_by_dead = !dead.is_empty();
        blocks.push(Block::Para(if stalled_by_dead {
            format!(
                "These requests are the knock-on of the dead transfer worker(s) above ({}): they were never refused by a check of their own.",
                dead.iter()
                    .map(|s| format!("prefill {}: {}", s.prefill, s.lanes_text()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            "No transfer worker died: the prefill did not transfer in time (overload, a dead prefill, or a stalled fabric).".into()
        }));
        blocks.push(Block::Para(format!(
            "Fix: {}.",
            kinds::fix(kind, &sc.pools[0].server, &sc.pools[0].server)
        )));
    } else if i.knock_on {
        if let Some(f) = faults_line(&run.record.scenario.faults) {
            blocks.push(Block::Para(format!("Injected faults: {f}.")));
        }
        let (p, d) = pairs.first().copied().unwrap_or((0, 0));
        let fix = match sc.sglang.failed_session_probe_ns {
            // The run already probes: the advice is the transfer, and how often it probes.
            Some(every) if kind == ErrorKind::SessionBlacklisted => format!(
                "fix the transfer that returned −1 first; the failed-session probe is on here (every {:.0} s, SGLANG_FAILED_SESSION_PROBE_INTERVAL_S) and clears a session once its path is back: a shorter interval ends the refusals sooner",
                every as f64 / 1e9
            ),
            _ => kinds::fix(kind, &sc.pools[p].server, &sc.pools[d].server),
        };
        blocks.push(Block::Para(format!("Fix: {fix}.")));
    }
    Section {
        title: format!("{kind} ×{n}"),
        blocks,
    }
}

/// What the KV checksum caught on pool pair `(p, d)`: the requests' own bytes were not what
/// landed (without the flag they would have finished corrupted: the oracle's verdict, and
/// what a run without `kv_checksum` shows), or the two sides digest different item lengths,
/// so every request aborts whether or not its bytes were right (`sglang::checksum`).
fn checksum_story(sc: &Scenario, p: usize, d: usize) -> String {
    let comparable = plan(sc, p, d)
        .and_then(PairPlan::kv_checksum)
        .is_none_or(|c| c.comparable);
    let unchecked = predict_without_checksum(sc, p, d);
    let before = match unchecked.as_deref() {
        Some("corrupted") => {
            "Without --disaggregation-enable-kv-checksum these requests finish corrupted in silence (the oracle's verdict for this pair): the checksum turns that into an abort before the first token. A request already decoding when a later stray write hits it is not re-checked, so the checksum stops the writer's corruption, not a running victim's."
        }
        Some("completed") => {
            "Without the checksum this pair's requests complete from their own bytes."
        }
        _ => "",
    };
    if comparable {
        before.to_string()
    } else {
        format!(
            "The two sides register different item lengths, so their Adler-32 digests differ on every request, clean or not: the false aborts sglang's open PR #39729 reports for PR #39500 as merged (it skips the check for such pairs). {before}"
        )
    }
}

/// The outcome `pdsim lint` predicts for pool pair `(p, d)` without the checksum.
fn predict_without_checksum(sc: &Scenario, p: usize, d: usize) -> Option<String> {
    let (pp, dp) = (&sc.pools[p], &sc.pools[d]);
    let mut pl = PairPlan::compile(
        (&pp.model, &pp.server),
        (&dp.model, &dp.server),
        sc.sglang.profile,
    )
    .ok()?;
    if sc.sglang.version.validates_registration() {
        pl.validate_registration();
    }
    Some(predict(&pl).outcome.to_string())
}

/// The injected `[[faults]]` in one line (`t = 2.0 s link_down …; …`), `None` without any.
pub(super) fn faults_line(faults: &[crate::scenario::file::FaultSection]) -> Option<String> {
    if faults.is_empty() {
        return None;
    }
    Some(
        faults
            .iter()
            .map(|f| {
                let target = [&f.link, &f.nic, &f.pool]
                    .into_iter()
                    .flatten()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" ");
                let inst = f.instance.map_or(String::new(), |i| format!("[{i}]"));
                format!("t = {:?} s {} {target}{inst}", f.at_s, f.kind.as_str())
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

/// What happens to an FP4 KV pair, with sglang's classes and functions (docs/sglang-pd.md §29).
const FP4_WHY: &str = "Why: --kv-cache-dtype fp4_e2m1 gives both sides sglang's FP4 KV pool (MHATokenToKVPoolFP4, or MLATokenToKVPoolFP4 for MLA, in mem_cache/memory_pool.py): packed E2M1 nibbles in k_buffer / v_buffer (kv_buffer for MLA) and one uint8 scale per 16 elements in k_scale_buffer / v_scale_buffer (kv_scale_buffer), both zero-filled at start (torch.zeros). The PD transfer registers what get_contiguous_buf_infos returns, and the FP4 pools inherit it from MLATokenToKVPool (the data buffers only) or MHATokenToKVPool (whose layers go through the FP4 pool's dequantising _get_key_buffer / _get_value_buffer: temporaries made at start-up): never the scale buffers. So the prefill's scales never arrive; the decode's set_kv_buffer writes scales only for the tokens it computes itself, and _get_key_buffer / _get_value_buffer (KVFP4QuantizeUtil.batched_dequantize) dequantise the transferred prompt with never-written zero scales: the answer is wrong and nothing says so. Colocated FP4 serving, where the same server writes and reads both buffers, is unaffected.";

/// The requests corrupted in silence (only when there were any): the pool pairs that wrote
/// them, what a guarded sglang does with each pair instead, the fix, and the first victims.
pub(super) fn corruption_section(run: &Run) -> Option<Section> {
    if run.corrupted_total == 0 {
        return None;
    }
    let mut blocks = Vec::new();
    let mut pairs = std::collections::BTreeSet::new();
    if let Some(sc) = &run.sc {
        let names = instances(sc);
        for (&(p, d), c) in &run.per_pair {
            if c.corrupted > 0 {
                pairs.insert((names[p as usize].0, names[d as usize].0));
            }
        }
    }
    // docs/sglang-pd.md §29: a pair whose only fault is the FP4 scales no transfer sends.
    let fp4 = |p: usize, d: usize| {
        run.sc
            .as_ref()
            .and_then(|sc| plan(sc, p, d))
            .is_some_and(|pl| fp4_scales_only(&predict(pl)))
    };
    blocks.push(Block::Para(
        if !pairs.is_empty() && pairs.iter().all(|&(p, d)| fp4(p, d)) {
            format!(
                "{} request(s) finished with no error but decoded from KV dequantised with scales nobody sent. No check fired: every byte the transfer wrote was the request's own, in bounds, but sglang's FP4 KV pool keeps its scales in buffers PD does not register. {} of them name their own transfer as the culprit.",
                run.corrupted_total, run.corrupted_named
            )
        } else {
            format!(
                "{} request(s) finished with no error but decoded from bytes that were not their own. No check fired: the writes landed, in bounds, on pages or slots another request owns. {} of them name a culprit or victims.",
                run.corrupted_total, run.corrupted_named
            )
        },
    ));
    if let Some(sc) = &run.sc {
        for (p, d) in pairs {
            blocks.extend(pair_blocks(sc, p, d));
            if fp4(p, d) {
                blocks.push(Block::Para(FP4_WHY.into()));
                blocks.push(Block::Para(format!("Fix: {FP4_FIX}.")));
                continue;
            }
            if let Some(pl) = plan(sc, p, d) {
                blocks.push(Block::Para(format!(
                    "What a guarded sglang does with this pair instead: {}.",
                    guarded_outcome(sc, p, d).unwrap_or_else(|| predict(pl).outcome.to_string())
                )));
            }
            blocks.push(Block::Para(format!(
                "Fix: {}.",
                kinds::fix(
                    ErrorKind::TransferOutOfBounds,
                    &sc.pools[p].server,
                    &sc.pools[d].server
                )
            )));
        }
    }
    let rows: Vec<Vec<String>> = run
        .corrupted
        .iter()
        .map(|c| {
            let or_none = |s: &str| {
                if s.is_empty() {
                    "—".to_string()
                } else {
                    s.to_string()
                }
            };
            vec![
                c.id.to_string(),
                or_none(&c.corrupted_by),
                or_none(&c.victims),
            ]
        })
        .collect();
    blocks.push(Block::Para(format!(
        "Victims (the first {} corrupted requests; requests.csv lists all):",
        rows.len()
    )));
    blocks.push(Block::Table(
        [
            "request",
            "corrupted by (whose writes landed in it)",
            "its writes landed on",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    ));
    Some(Section {
        title: format!("corrupted ×{}", run.corrupted_total),
        blocks,
    })
}

/// The outcome the `guarded` profile predicts for a pool pair: its error kind and text.
fn guarded_outcome(sc: &Scenario, p: usize, d: usize) -> Option<String> {
    let (pp, dp) = (&sc.pools[p], &sc.pools[d]);
    let pl = PairPlan::compile(
        (&pp.model, &pp.server),
        (&dp.model, &dp.server),
        crate::layout::Profile::Guarded,
    )
    .ok()?;
    let pr = predict(&pl);
    Some(match (pr.kind, pr.message) {
        (Some(k), Some(m)) => format!("{k} — \"{m}\""),
        _ => pr.outcome.to_string(),
    })
}
