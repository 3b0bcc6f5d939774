//! `[workload.client_timeout]`, `router.abort_propagation` and `sglang.decode_queue_abort`,
//! checked into
//! [`AbortParams`] (`docs/sglang-pd.md` §21). Every bad value is an exit-2 error naming the
//! key and what would be valid.

use super::file::{ClientTimeoutSection, ScenarioFile};
use super::{Checker, ScenarioError, suggestion};
use crate::config::aborts::{
    AbortParams, AbortPropagation, DECODE_QUEUE_ABORTS, Deadline, DecodeQueueAbort, PROPAGATIONS,
};

/// Distributions `workload.client_timeout.dist` accepts.
const DISTS: [&str; 2] = ["exponential", "lognormal"];

/// The scenario's abort model, `None` when it sets neither key and its trace (if any) gives
/// no row a deadline (`trace_deadlines`: some row has `timeout_s`) — nothing changes then.
pub(super) fn aborts(
    c: &Checker,
    file: &ScenarioFile,
    colocated: bool,
    trace_deadlines: bool,
) -> Result<Option<AbortParams>, ScenarioError> {
    let timeout = file.workload.client_timeout.as_ref();
    let prop = file.router.abort_propagation.as_deref();
    let queue = file.sglang.decode_queue_abort.as_deref();
    if timeout.is_none() && prop.is_none() && queue.is_none() && !trace_deadlines {
        return Ok(None);
    }
    if colocated {
        let key = if timeout.is_some() {
            "workload.client_timeout"
        } else if prop.is_some() {
            "router.abort_propagation"
        } else if queue.is_some() {
            "sglang.decode_queue_abort"
        } else {
            "workload.trace.path"
        };
        if key == "workload.trace.path" {
            return Err(c.err(
                key,
                "the trace gives client deadlines (a `timeout_s` column or key), and client disconnects are modelled for PD clusters (prefill and decode pools); this cluster has colocated servers: drop the trace's timeout_s",
            ));
        }
        return Err(c.err(
            key,
            "client disconnects and their propagation are modelled for PD clusters (prefill and decode pools); this cluster has colocated servers: remove the key",
        ));
    }
    let propagation = match prop {
        None => AbortPropagation::CancelPaired,
        Some(p) => AbortPropagation::parse(p).ok_or_else(|| {
            c.err(
                "router.abort_propagation",
                format!(
                    "{p:?} is not a propagation profile; valid: \"cancel_paired\" (sgl-model-gateway since PR #29017: a failed prefill drops the decode leg, the default) or \"decode_waits\" (before it, issue #9726: decode holds the request until its waiting timeout){}",
                    suggestion(p, &PROPAGATIONS)
                ),
            )
        })?,
    };
    let decode_queue = match queue {
        None => DecodeQueueAbort::Release,
        Some(q) => DecodeQueueAbort::parse(q).ok_or_else(|| {
            c.err(
                "sglang.decode_queue_abort",
                format!(
                    "{q:?} is not a decode abort behaviour; valid: \"release\" (sglang since PR #9817: an aborted request in decode's waiting queue gives its pages back, the default) or \"leak\" (before it: they are never given back){}",
                    suggestion(q, &DECODE_QUEUE_ABORTS)
                ),
            )
        })?,
    };
    let client_timeout = timeout.map(|t| deadline(c, t)).transpose()?;
    Ok(Some(AbortParams {
        client_timeout,
        propagation,
        trace_deadlines,
        decode_queue,
    }))
}

/// One `[workload.client_timeout]` table.
fn deadline(c: &Checker, t: &ClientTimeoutSection) -> Result<Deadline, ScenarioError> {
    const K: &str = "workload.client_timeout";
    let unused = |key: &str, given: bool, why: &str| {
        if given {
            Err(c.err(&format!("{K}.{key}"), why.to_string()))
        } else {
            Ok(())
        }
    };
    match (t.s, t.dist.as_deref()) {
        (Some(s), None) => {
            unused(
                "mean_s",
                t.mean_s.is_some(),
                "belongs to a distribution (dist = \"exponential\" or \"lognormal\"); a fixed wait is s alone",
            )?;
            unused(
                "cv",
                t.cv.is_some(),
                "belongs to dist = \"lognormal\"; a fixed wait is s alone",
            )?;
            let s = c.duration(&format!("{K}.s"), s, false)?;
            Ok(Deadline::Fixed(crate::engine::ns_from_secs_ceil(s)))
        }
        (None, Some(d)) => {
            let mean_key = format!("{K}.mean_s");
            let Some(mean) = t.mean_s else {
                return Err(c.err(
                    &mean_key,
                    format!("dist = {d:?} needs mean_s, the mean wait in seconds"),
                ));
            };
            let mean_s = c.duration(&mean_key, mean, false)?;
            match d {
                "exponential" => {
                    unused(
                        "cv",
                        t.cv.is_some(),
                        "an exponential wait has cv 1 by definition; remove cv, or use dist = \"lognormal\"",
                    )?;
                    Ok(Deadline::Exponential { mean_s })
                }
                "lognormal" => {
                    let cv_key = format!("{K}.cv");
                    let Some(cv) = t.cv else {
                        return Err(c.err(
                            &cv_key,
                            "dist = \"lognormal\" needs cv, the standard deviation over the mean (e.g. 1.0)",
                        ));
                    };
                    // cv = 0 is a lognormal of no spread: every client waits mean_s (the
                    // README's range is 0 … 100).
                    let cv = c.non_negative(&cv_key, cv, "standard deviation over mean")?;
                    if cv > 100.0 {
                        return Err(c.err(
                            &cv_key,
                            format!("must be at most 100 (a wider lognormal puts nearly every wait at 0 s), got {cv}"),
                        ));
                    }
                    Ok(Deadline::Lognormal { mean_s, cv })
                }
                other => Err(c.err(
                    &format!("{K}.dist"),
                    format!(
                        "{other:?} is not a wait distribution; valid: \"exponential\", \"lognormal\" (or a fixed wait: s = <seconds> without dist){}",
                        suggestion(other, &DISTS)
                    ),
                )),
            }
        }
        (Some(_), Some(_)) => Err(c.err(
            &format!("{K}.dist"),
            "give either s (every client waits s seconds) or dist with mean_s, not both",
        )),
        (None, None) => Err(c.err(
            K,
            "needs s = <seconds> (a fixed wait) or dist = \"exponential\" | \"lognormal\" with mean_s",
        )),
    }
}
