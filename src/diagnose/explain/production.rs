//! What production PD runs add to the narrative: speculative decoding per pool
//! (`docs/sglang-pd.md` §19) and the transfers' decay as the KV free list fragments (§22).

use super::read::Run;
use super::{Block, Section};
use crate::compute::StepModel;
use crate::compute::speculative::SpecStepModel;
use crate::config::{KvAllocator, Role};
use crate::scenario::Scenario;

/// Speculative decoding per pool that ran it: the algorithm, the acceptance model's mean
/// accepted length, the TPOT factor it predicts at low load, what the run reached, and what
/// PD transfers for it.
pub(super) fn speculative_section(run: &Run) -> Option<Section> {
    let s = &run.summary;
    let pct = |x: f64| x * 100.0;
    let bullets: Vec<String> = s
        .speculative
        .iter()
        .map(|p| {
            let flags = format!(
                "{} ({} steps, top-{}, {} draft tokens)",
                p.algorithm, p.num_steps, p.eagle_topk, p.num_draft_tokens
            );
            if p.role == Role::Prefill.as_str() {
                let share = p
                    .draft_prefill_share
                    .map_or("no".into(), |d| format!("{:.1} %", pct(d)));
                return format!(
                    "Pool {:?} prefills with {flags}: the draft's prefill over each prompt took {share} of its forwards, and every transfer carried the draft's KV layer at the target's page ids (+1 K and 1 V region per page run: two more RDMA writes a run) beside the same metadata row, as sglang's PD path sends it.",
                    p.pool
                );
            }
            let model = match (p.accept_rate_model, p.accept_length_model) {
                (Some(a), Some(t)) => {
                    let factor = run
                        .sc
                        .as_ref()
                        .and_then(|sc| tpot_factor(sc, &p.pool, t))
                        .map_or(String::new(), |f| {
                            format!(
                                ", so at batch 1 a step of {:.2} ms against a plain {:.2} ms predicts TPOT × {:.2}",
                                f.1, f.2, f.0
                            )
                        });
                    format!("the acceptance model (α = {a:.3}) predicts a mean accepted length of {t:.2} tokens per request per step{factor}")
                }
                _ => "no acceptance model".into(),
            };
            let got = match (p.accept_length_mean, p.time_share) {
                (Some(got), Some(t)) => format!(
                    " The run reached {got:.2} (sglang's accept len) over {} steps; a step's time went {:.0} % to the verify forward, {:.0} % to the draft forwards, {:.0} % to the draft extend and {:.0} % to host and tree work.",
                    p.steps,
                    pct(t.verify),
                    pct(t.draft),
                    pct(t.draft_extend),
                    pct(t.host)
                ),
                _ => " It ran no step.".into(),
            };
            format!("Pool {:?} decodes with {flags}: {model}.{got}", p.pool)
        })
        .collect();
    (!bullets.is_empty()).then(|| Section {
        title: "Speculative decoding".into(),
        blocks: vec![Block::Bullets(bullets)],
    })
}

/// `(TPOT factor, speculative step ms, plain step ms)` at batch 1 for decode pool `pool` of
/// `sc` at accept length `tau`: one speculative step over `tau` plain steps, at a context of
/// the workload's mean prompt (the figure `tests/sglang/speculative.rs` derives by hand).
fn tpot_factor(sc: &Scenario, pool: &str, tau: f64) -> Option<(f64, f64, f64)> {
    let p = sc.pools.iter().find(|p| p.name == pool)?;
    let spec = p.server.speculative.as_ref()?;
    let tp = p.server.tp_size;
    let target = StepModel::new(&sc.gpu, &p.model, tp, p.kv_dtype_bytes, sc.compute.clone());
    let draft = StepModel::new(
        &sc.gpu,
        &spec.draft_model(&p.model),
        tp,
        p.kv_dtype_bytes,
        sc.compute.clone(),
    );
    let ctx = 1024;
    let plain = target.decode_ns(1, ctx) as f64 / 1e6;
    let m = SpecStepModel {
        target,
        draft,
        num_steps: spec.num_steps,
        topk: spec.eagle_topk,
        num_draft_tokens: spec.num_draft_tokens,
    };
    let step = m.step(1, ctx, tau.round() as u64).ns() as f64 / 1e6;
    (plain > 0.0 && tau > 0.0).then(|| (step / (tau * plain), step, plain))
}

/// Writes per request that grew this much from the first tenth of the window to the last tell
/// a fragmenting free list.
const GROWTH: f64 = 1.1;

/// An arrival window this long (s) is a long run: its flat transfers are worth a word.
const LONG_RUN_S: f64 = 3600.0;

/// The transfers over run time (`summary.json` `transfer.fragmentation`): whether RDMA writes
/// per request grew, what it cost in transfer time, and the allocator that decides it.
pub(super) fn fragmentation_section(run: &Run) -> Option<Section> {
    let f = run.summary.transfer.fragmentation.as_ref()?;
    let (a, b) = (&f.first_tenth, &f.last_tenth);
    let (Some(w0), Some(w1)) = (a.writes_p50, b.writes_p50) else {
        return None;
    };
    let sc = run.sc.as_ref()?;
    let pools = |k: KvAllocator| {
        let names: Vec<String> = sc
            .pools
            .iter()
            .filter(|p| p.role != Role::Colocated && p.kv_allocator == k)
            .map(|p| format!("{:?}", p.name))
            .collect();
        match names.len() {
            0 => String::new(),
            1 => format!("pool {}", names[0]),
            _ => format!("pools {}", names.join(" and ")),
        }
    };
    let (unsorted, sorted) = (pools(KvAllocator::Unsorted), pools(KvAllocator::Sorted));
    let ms = |x: Option<f64>| x.map_or("–".into(), |v| format!("{v:.2} ms"));
    let figures = format!(
        "RDMA writes per request went from a median of {w0:.0} (p99 {:.0}) in the first tenth of the run ({:.0}–{:.0} s) to {w1:.0} (p99 {:.0}) in the last ({:.0}–{:.0} s); the median transfer took {} then and {} at the end (p99 {} → {}).",
        a.writes_p99.unwrap_or(f64::NAN),
        a.from_s,
        a.to_s,
        b.writes_p99.unwrap_or(f64::NAN),
        b.from_s,
        b.to_s,
        ms(a.transfer_ms_p50),
        ms(b.transfer_ms_p50),
        ms(a.transfer_ms_p99),
        ms(b.transfer_ms_p99),
    );
    let regions: u32 = sc
        .pools
        .iter()
        .filter(|p| p.role == Role::Decode)
        .map(|p| p.layout[0].kv_regions.len() as u32)
        .max()
        .unwrap_or(1)
        .max(1);
    // Writes per request depend on the plan too (a head-sliced transfer writes per token), so
    // only their drift over the run says something about the free list.
    let grew = w1 > GROWTH * w0;
    // A sorted run that stayed flat has nothing to say unless it was long.
    if unsorted.is_empty() && !grew && b.to_s < LONG_RUN_S {
        return None;
    }
    let story = if !unsorted.is_empty() {
        format!(
            "{}{unsorted} runs sglang's unsorted allocator (need_sort = False, every PD server before sglang PR #8133 and every plain server now), which hands a finished request's pages straight to the next one, so after the pool has churned a request's pages are the scattered leftovers of several and its transfer breaks into one RDMA write per contiguous run and region ({regions} regions here; Mooncake posts each as its own work request). The fix is what sglang builds for PD servers since #8133: freed pages wait in a release list and are merged and sorted back only when the free list runs short (`kv_allocator = \"sorted\"`, the default for prefill and decode pools). A larger --page-size is the older workaround: fewer, longer pages.",
            if grew {
                "The free list fragmented: "
            } else {
                "Writes per request did not grow in this run, but "
            }
        )
    } else if grew {
        "Writes per request grew although every PD pool sorts its free list: the pages are scattered by something else (a unified pool, or a pool full enough that merges find no free stretch).".into()
    } else if !sorted.is_empty() {
        format!(
            "Writes per request stayed flat: the free list of {sorted} is sorted as sglang does it in PD mode since PR #8133 (`kv_allocator = \"sorted\"`), so pages are handed out in ascending runs however long the run."
        )
    } else {
        "Writes per request stayed flat.".into()
    };
    Some(Section {
        title: "Transfers over the run (KV fragmentation)".into(),
        blocks: vec![Block::Para(figures), Block::Para(story)],
    })
}
