//! `[workload]`: a trace, a synthetic generator, or synthetic sessions (multi-turn
//! conversations).

use crate::config::Workload;
use crate::engine::{NS_PER_S, ns_from_secs_ceil};
use crate::scenario::file;
use crate::scenario::{Checker, ScenarioError};

/// `[workload]`: a trace or a synthetic generator. `offload`: the key of a decode pool that offloads to the store, which needs
/// a trace with prefix ids (a synthetic workload has none).
pub(in crate::scenario) fn workload(
    c: &Checker,
    w: &file::WorkloadSection,
    offload: Option<&str>,
) -> Result<Workload, ScenarioError> {
    if let (Some(key), None, None) = (offload, &w.trace, &w.sessions) {
        return Err(c.err(
            key,
            "needs requests with prefix ids: a trace with hash_ids (as the Mooncake traces have) or [workload.sessions] (conversations name their blocks); the store names a block by its prefix, and a plain synthetic workload's requests have none",
        ));
    }
    if let (Some(_), Some(_)) = (&w.sessions, &w.trace) {
        return Err(c.err(
            "workload.sessions",
            "is for synthetic workloads; a trace gives its conversations by a session_id column (pdsim CSV) or key (Mooncake JSON lines), replayed closed loop with workload.trace.think_time_s",
        ));
    }
    if w.lengths.is_some() && (w.input_tokens.is_some() || w.output_tokens.is_some()) {
        return Err(c.err(
            "workload.lengths",
            "lengths = { path } gives input and output lengths together: remove input_tokens and output_tokens, or remove lengths",
        ));
    }
    let workload = match (
        &w.trace,
        &w.arrival,
        &w.input_tokens,
        &w.output_tokens,
        &w.lengths,
    ) {
        (Some(t), None, None, None, None) => crate::scenario::trace_workload(c, t, offload)?,
        (Some(_), ..) => {
            return Err(c.err(
                "workload.trace",
                "a trace gives arrivals and lengths itself: remove arrival, input_tokens, output_tokens and lengths, or remove trace",
            ));
        }
        (None, Some(a), None, None, Some(l)) => {
            let pairs = paired_lengths(c, &l.path)?;
            Workload::Synthetic {
                arrival: crate::scenario::arrival(c, a)?,
                input: crate::config::Lengths::PairedInput(pairs.clone()),
                output: crate::config::Lengths::PairedOutput(pairs),
            }
        }
        (None, Some(a), Some(i), Some(o), None) => Workload::Synthetic {
            arrival: crate::scenario::arrival(c, a)?,
            input: crate::scenario::lengths(c, "workload.input_tokens", i)?,
            output: crate::scenario::lengths(c, "workload.output_tokens", o)?,
        },
        _ => {
            return Err(c.err(
                "workload",
                "give either trace = { path = \"...\" }, or arrival with input_tokens and output_tokens, or arrival with lengths = { path = \"...\" } (paired), e.g. arrival = { process = \"poisson\", rate_per_s = 8 }",
            ));
        }
    };
    let Some(s) = &w.sessions else {
        return Ok(workload);
    };
    let Workload::Synthetic {
        arrival,
        input,
        output,
    } = workload
    else {
        unreachable!("a trace with sessions was refused above");
    };
    let sessions = sessions(c, s, &input, &output)?;
    Ok(Workload::Sessions {
        arrival,
        input,
        output,
        sessions,
    })
}

/// Most turns one session may plan (its plan is held while it runs).
const MAX_TURNS: u32 = 10_000;

/// `[workload.sessions]`, given the first-turn prompt and output distributions.
fn sessions(
    c: &Checker,
    s: &file::SessionsSection,
    input: &crate::config::Lengths,
    output: &crate::config::Lengths,
) -> Result<crate::config::SessionParams, ScenarioError> {
    use crate::config::ThinkTime;
    let turns = crate::scenario::lengths(c, "workload.sessions.turns", &s.turns)?;
    if turns.max() > MAX_TURNS {
        return Err(c.err(
            "workload.sessions.turns",
            format!(
                "at most {MAX_TURNS} turns per session, got a maximum of {} (published chat logs average 2–4 turns; agentic sessions tens)",
                turns.max()
            ),
        ));
    }
    let user_tokens = crate::scenario::lengths(c, "workload.sessions.user_tokens", &s.user_tokens)?;
    let key = "workload.sessions.think_time_s";
    let ns = |v: f64| (v * NS_PER_S as f64).ceil();
    let think = match s.think_time_s {
        file::ThinkSection::Fixed { value } => {
            let k = format!("{key}.value");
            let v = c.non_negative(&k, value, "seconds")?;
            ThinkTime::Fixed(ns_from_secs_ceil(c.within_clock(&k, v, 1.0, "s")?))
        }
        file::ThinkSection::Exponential { mean } => {
            let k = format!("{key}.mean");
            let v = c.positive(&k, mean, "seconds")?;
            ThinkTime::Exponential {
                mean_ns: ns(c.within_clock(&k, v, 1.0, "s")?),
            }
        }
        file::ThinkSection::Lognormal { mean, cv } => {
            let k = format!("{key}.mean");
            let v = c.positive(&k, mean, "seconds")?;
            let cv = c.lognormal_cv(&format!("{key}.cv"), cv)?;
            ThinkTime::Lognormal {
                mean_ns: ns(c.within_clock(&k, v, 1.0, "s")?),
                cv,
            }
        }
    };
    let cap = s.max_context_tokens;
    let first = u64::from(input.max()) + u64::from(output.max());
    if first > u64::from(cap) {
        return Err(c.err(
            "workload.sessions.max_context_tokens",
            format!(
                "{cap} tokens cannot hold a first turn: workload.input_tokens and workload.output_tokens reach {} + {} = {first}; raise it to the model's context length (sglang's --context-length) or lower their max",
                input.max(),
                output.max()
            ),
        ));
    }
    Ok(crate::config::SessionParams {
        turns,
        think,
        user_tokens,
        max_context_tokens: cap,
        on_context_full: s.on_context_full,
    })
}

/// The (input, output) pairs of `workload.lengths.path`; every pair ≥ 1 token each.
fn paired_lengths(
    c: &Checker,
    rel: &str,
) -> Result<std::sync::Arc<Vec<(u32, u32)>>, ScenarioError> {
    let key = "workload.lengths.path";
    let pairs = crate::workload::trace::read_lengths(&c.resolve_path(rel))
        .map_err(|e| c.err(key, e.to_string()))?;
    if pairs.is_empty() {
        return Err(c.err(key, "the file has no rows: nothing to sample lengths from"));
    }
    if let Some(i) = pairs.iter().position(|p| p.0 == 0 || p.1 == 0) {
        return Err(c.err(
            key,
            format!("row {} has a length of 0 tokens (input {}, output {}); every request needs ≥ 1 of each", i + 1, pairs[i].0, pairs[i].1),
        ));
    }
    Ok(std::sync::Arc::new(pairs))
}
