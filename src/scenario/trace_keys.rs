//! `[workload.trace]`, checked into a [`Workload::Trace`]: the format, one pass over every row
//! (count, span, sessions, deadlines, and with a decode offload the blocks each row's output
//! completes), the time scale and the session replay. Every bad value is an exit-2 error
//! naming the key, or the trace's file and line.

use super::{Checker, ScenarioError, Workload, file};
use crate::workload::trace;

/// What the checking pass over a trace learned; nothing of the rows themselves is kept.
struct Pass {
    /// Rows to replay (at most `limit`).
    count: u64,
    /// Arrival of the first row, ns (`None`: no row).
    first: Option<u64>,
    /// Arrival of the last row, ns.
    last: u64,
    /// With a decode offload, the deriver of each row's answer blocks.
    answers: Option<trace::answers::AnswerDeriver>,
    /// Whether some row has `hash_ids`.
    prefixed: bool,
    /// Whether some row has a `session_id`.
    sessions: bool,
    /// The largest block id of any row.
    max_id: Option<u64>,
    /// Whether some row gives its client's deadline (`timeout_s`).
    deadlines: bool,
}

/// A `[workload.trace]`. With `offload` (the key of a decode pool that offloads to the store),
/// the checking pass also derives the blocks each row's output completes
/// ([`crate::workload::trace::answers`]).
pub(super) fn trace_workload(
    c: &Checker,
    t: &file::TraceSection,
    offload: Option<&str>,
) -> Result<Workload, ScenarioError> {
    let path = c.resolve_path(&t.path);
    let format = format(c, t, &path)?;
    if t.limit == Some(0) {
        return Err(c.err(
            "workload.trace.limit",
            "must be ≥ 1 row (or left out for all rows)",
        ));
    }
    let mut pass = check_rows(c, &path, format, t.limit.unwrap_or(u64::MAX), offload)?;
    let answers = finish_answers(c, &path, pass.answers.take(), pass.prefixed, offload)?;
    let base = pass.first.unwrap_or(0);
    let scale = scale(c, t, &pass, base)?;
    let sessions = replay_sessions(c, t, &path, &pass)?;
    let open_path = path.clone();
    let open = move || -> crate::config::TraceRows {
        match trace::TraceReader::open(&open_path, format) {
            Ok(reader) => Box::new(reader.map(|row| row.map_err(|e| e.to_string()))),
            Err(e) => Box::new(std::iter::once(Err(e.to_string()))),
        }
    };
    Ok(Workload::Trace {
        source: crate::config::TraceSource {
            open: std::sync::Arc::new(open),
            rows: pass.count,
            base_ns: base,
            scale,
            path,
            answers,
            sessions,
            deadlines: pass.deadlines,
        },
    })
}

/// `workload.trace.format`, or the format detected from the file.
fn format(
    c: &Checker,
    t: &file::TraceSection,
    path: &std::path::Path,
) -> Result<trace::TraceFormat, ScenarioError> {
    match &t.format {
        Some(f) => f.parse::<trace::TraceFormat>().map_err(|_| {
            c.err(
                "workload.trace.format",
                format!("unknown trace format {f:?}; valid: mooncake, azure, vidur, csv (or leave it out to detect)"),
            )
        }),
        None => trace::detect_format(path).map_err(|e| c.err("workload.trace.path", e.to_string())),
    }
}

/// One pass to check every row and learn the count and the span; nothing is kept, so a trace
/// of any length costs the memory of one row (with a decode offload, a short list of ids per
/// row as well). The run reads the rows again.
fn check_rows(
    c: &Checker,
    path: &std::path::Path,
    format: trace::TraceFormat,
    limit: u64,
    offload: Option<&str>,
) -> Result<Pass, ScenarioError> {
    let mut p = Pass {
        count: 0,
        first: None,
        last: 0,
        answers: offload.map(|_| trace::answers::AnswerDeriver::default()),
        prefixed: false,
        sessions: false,
        max_id: None,
        deadlines: false,
    };
    for row in trace::TraceReader::open(path, format)
        .map_err(|e| c.err("workload.trace.path", e.to_string()))?
    {
        if p.count == limit {
            break;
        }
        let row = row.map_err(|e| c.err("workload.trace.path", e.to_string()))?;
        p.first.get_or_insert(row.arrival_ns);
        p.last = row.arrival_ns;
        p.count += 1;
        p.sessions |= row.session_id.is_some();
        p.deadlines |= row.timeout_ns.is_some();
        if let Some(&m) = row.hash_ids.iter().max() {
            p.max_id = Some(p.max_id.map_or(m, |x| x.max(m)));
        }
        if let Some(a) = p.answers.as_mut() {
            p.prefixed |= !row.hash_ids.is_empty();
            a.push(&row);
        }
    }
    Ok(p)
}

/// The answer blocks of every row, with a decode offload (`offload`: its key); the store names
/// a block by its prefix, so the trace must have prefix ids.
fn finish_answers(
    c: &Checker,
    path: &std::path::Path,
    answers: Option<trace::answers::AnswerDeriver>,
    prefixed: bool,
    offload: Option<&str>,
) -> Result<Option<std::sync::Arc<crate::config::AnswerBlocks>>, ScenarioError> {
    let (Some(a), Some(key)) = (answers, offload) else {
        return Ok(None);
    };
    if !prefixed {
        return Err(c.err(
            key,
            format!(
                "needs a trace with prefix ids (hash_ids: Mooncake traces, or pdsim CSV with the column): the store and a decode's radix tree name a block by its prefix, and {} has none",
                path.display()
            ),
        ));
    }
    let blocks = a.finish().ok_or_else(|| {
        c.err(
            "workload.trace.path",
            "block ids reach u64::MAX: no room for the fresh ids of answer blocks no later row names (renumber the hash_ids)",
        )
    })?;
    Ok(Some(std::sync::Arc::new(blocks)))
}

/// The factor on arrival gaps: `time_scale`, or what `rate_per_s` implies from the trace's
/// own rate over its span.
fn scale(
    c: &Checker,
    t: &file::TraceSection,
    pass: &Pass,
    base: u64,
) -> Result<f64, ScenarioError> {
    let Some(rate) = t.rate_per_s else {
        return c.positive(
            "workload.trace.time_scale",
            t.time_scale,
            "a factor on arrival times",
        );
    };
    if t.time_scale != 1.0 {
        return Err(c.err(
            "workload.trace.rate_per_s",
            "give rate_per_s or time_scale, not both",
        ));
    }
    let rate = c.positive("workload.trace.rate_per_s", rate, "requests per second")?;
    let span = pass.last - base;
    if pass.count < 2 || span == 0 {
        return Err(c.err(
            "workload.trace.rate_per_s",
            "the trace has no time span to rescale (fewer than two distinct arrival times)",
        ));
    }
    let observed = (pass.count - 1) as f64 / (span as f64 / 1e9);
    Ok(observed / rate)
}

/// The closed-loop replay of a trace with `session_id`s (`think_time_s`); `None` without them,
/// where `think_time_s` is an error.
fn replay_sessions(
    c: &Checker,
    t: &file::TraceSection,
    path: &std::path::Path,
    pass: &Pass,
) -> Result<Option<crate::config::TraceSessions>, ScenarioError> {
    let think_key = "workload.trace.think_time_s";
    if !pass.sessions {
        return match t.think_time_s {
            Some(_) => Err(c.err(
                think_key,
                format!(
                    "{} has no session_id: think_time_s spaces the turns of a conversation, and this trace has none (add a session_id column or key, or remove think_time_s)",
                    path.display()
                ),
            )),
            None => Ok(None),
        };
    }
    let think = c.non_negative(think_key, t.think_time_s.unwrap_or(0.0), "seconds")?;
    let think = c.within_clock(think_key, think, 1.0, "s")?;
    let first_fresh_id = match pass.max_id {
        None => 0,
        Some(m) => m.checked_add(1).ok_or_else(|| {
            c.err(
                "workload.trace.path",
                "block ids reach u64::MAX: no room for the ids a session replay gives rows without hash_ids (renumber the hash_ids)",
            )
        })?,
    };
    Ok(Some(crate::config::TraceSessions {
        think_ns: crate::engine::ns_from_secs_ceil(think),
        first_fresh_id,
    }))
}
