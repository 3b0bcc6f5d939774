//! The sections around the failures: what happened and the cluster that ran it, prefix
//! reuse, and capacity (the SLO verdict, the binding pool and the levers, each run).

use super::read::{Run, rebuild};
use super::{Block, Section, instances, secs};
use crate::diagnose::outcome::LayoutFacts;
use crate::report::schema::Summary;
use crate::scenario::{Role, Scenario};
use crate::vocab::ErrorKind;

/// The first sections: what happened, the cluster, per instance (the last two only when the
/// scenario could be rebuilt), and prefix reuse when the run had any.
pub(super) fn overview(run: &Run) -> Vec<Section> {
    let mut out = vec![what_happened(&run.summary)];
    let Some(sc) = &run.sc else {
        out.push(Section {
            title: "Cluster".into(),
            blocks: vec![Block::Para(format!(
                "The scenario could not be rebuilt from run.json ({}), so layouts are not shown.",
                run.sc_note.as_deref().unwrap_or("unknown reason")
            ))],
        });
        return out;
    };
    out.push(cluster_section(sc));
    out.push(per_instance_section(run, sc));
    out.extend(reuse_section(&run.summary));
    out.extend(sessions_section(&run.summary));
    out.extend(decode_prefix_section(&run.summary));
    out
}

/// Decode-side prefix reuse (`--disaggregation-decode-enable-radix-cache`): what the decodes'
/// radix trees held of the prompts they admitted, and the transfer bytes that did not move.
fn decode_prefix_section(s: &Summary) -> Option<Section> {
    let d = s.decode_prefix.as_ref()?;
    let moved = s.transfer.bytes;
    let would = moved + d.bytes_not_transferred;
    Some(Section {
        title: "Decode prefix reuse".into(),
        blocks: vec![Block::Para(format!(
            "The decodes' radix trees (--disaggregation-decode-enable-radix-cache, sglang PR #19746) held a prefix of {} of the {} requests they admitted: {} of {} prompt tokens ({}), {} pages the prefills did not send. The transfers moved {:.3} GB instead of {:.3} GB ({:.3} GB not transferred, {:.1} % less); the prefills still computed what their own caches lacked. The trees took {} blocks of 512 tokens from finished requests (prompt and answer), held at most {} at once, and evicted {} to make room.",
            d.requests_hit,
            d.requests_admitted,
            d.hit_tokens,
            d.prompt_tokens,
            d.hit_share
                .map_or("–".to_string(), |v| format!("{:.1} %", 100.0 * v)),
            d.hit_pages,
            moved as f64 / 1e9,
            would as f64 / 1e9,
            d.bytes_not_transferred as f64 / 1e9,
            if would > 0 {
                100.0 * d.bytes_not_transferred as f64 / would as f64
            } else {
                0.0
            },
            d.inserted_blocks,
            d.peak_blocks,
            d.evicted_blocks,
        ))],
    })
}

/// Conversations: how sessions ended, and the prefix hit share by turn — the prefill work the
/// growing context would cost and what the caches saved of it.
fn sessions_section(s: &Summary) -> Option<Section> {
    let x = s.sessions.as_ref()?;
    let pct = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{:.1} %", 100.0 * v));
    let mut blocks = vec![Block::Para(format!(
        "{} sessions started: {} completed every turn ({} of them ended early at max_context_tokens), {} ended by a failed turn (the client does not send the next message), {} cut by the run's end. {} turns in all, {:.2} per session; a turn's prompt re-sends the whole conversation so far: {:.0} tokens on average.",
        x.started,
        x.completed,
        x.context_full,
        x.failed,
        x.cut,
        x.turns,
        x.mean_turns_per_session.unwrap_or(0.0),
        x.mean_context_tokens.unwrap_or(0.0),
    ))];
    let offload = s
        .kv_store
        .as_ref()
        .is_some_and(|k| k.traffic.decode_offload.is_some());
    blocks.push(Block::Para(format!(
        "The prefills found {} prompt tokens cached ({} of the turns' prompts) and did not recompute them. {}",
        x.prefill_tokens_saved,
        pct(x.hit_share),
        if offload {
            "The decodes offload the answers' blocks to the Mooncake Store, so a turn can hit its previous prompt and its previous answer."
        } else {
            "In PD the prefill never sees the answer (decode generates it), so a turn hits at most its previous prompt's full 512-token blocks; the answer is recomputed unless the decodes offload it to the store (disaggregation_decode_enable_offload_kvcache)."
        }
    )));
    let header = [
        "turn",
        "requests",
        "completed",
        "mean prompt",
        "cached tokens",
        "hit share",
    ]
    .map(String::from)
    .to_vec();
    let rows = x
        .by_turn
        .iter()
        .map(|t| {
            vec![
                if t.and_later {
                    format!("{}+", t.turn)
                } else {
                    t.turn.to_string()
                },
                t.requests.to_string(),
                t.completed.to_string(),
                t.mean_context_tokens
                    .map_or("–".to_string(), |m| format!("{m:.0}")),
                t.cached_tokens.to_string(),
                pct(t.hit_share),
            ]
        })
        .collect();
    blocks.push(Block::Table(header, rows));
    Some(Section {
        title: "Sessions".into(),
        blocks,
    })
}

/// Requests by outcome and the error kinds raised (a kind whose count is raises, not
/// requests, says so).
fn what_happened(s: &Summary) -> Section {
    let r = &s.requests;
    let aborted = if s.aborts.is_some() || r.aborted > 0 {
        format!(", {} aborted (their client disconnected)", r.aborted)
    } else {
        String::new()
    };
    let mut blocks = vec![Block::Para(format!(
        "{} requests arrived: {} completed, {} failed, {} corrupted, {} unfinished{aborted}.",
        r.arrived, r.completed, r.failed, r.corrupted, r.unfinished
    ))];
    let errors: Vec<String> = s
        .errors
        .iter()
        .map(|e| {
            let raised = e
                .kind
                .parse::<ErrorKind>()
                .ok()
                .filter(|k| is_raise_counted(*k))
                .map_or("", |_| " (raised; counts raises, not requests)");
            format!("{} ×{}{raised}", e.kind, e.count)
        })
        .collect();
    if errors.is_empty() && r.corrupted == 0 {
        blocks.push(Block::Para(
            "No error was raised and no request was corrupted.".into(),
        ));
    } else if !errors.is_empty() {
        blocks.push(Block::Para("Errors, by kind:".into()));
        blocks.push(Block::Bullets(errors));
    }
    Section {
        title: "What happened".into(),
        blocks,
    }
}

/// The pools — role, global instance numbers, model, TP and rank 0's layout — and the sglang
/// behaviour the run simulated.
fn cluster_section(sc: &Scenario) -> Section {
    let mut rows = Vec::new();
    let mut first = 0u32;
    for p in &sc.pools {
        let last = first + p.servers() - 1;
        rows.push(vec![
            p.name.clone(),
            p.role.as_str().into(),
            p.instances_text(
                first,
                sc.lifecycle
                    .as_ref()
                    .map(|lc| lc.initial_of(p.role)),
            ),
            p.model.name.clone(),
            if p.server.pp_size > 1 {
                // docs/sglang-pd.md §27: every stage's TP ranks write their own layers.
                let stages: Vec<String> = (0..p.server.pp_size)
                    .map(|r| {
                        let (a, b) =
                            crate::spec::server::pp_indices(p.model.num_layers, r, p.server.pp_size);
                        format!("{a}..{b}")
                    })
                    .collect();
                format!(
                    "--tp-size {} --pp-size {} (stages hold layers {}; each stage's ranks write their own layers)",
                    p.server.tp_size,
                    p.server.pp_size,
                    stages.join(", ")
                )
            } else {
                format!("--tp-size {}", p.server.tp_size)
            },
            LayoutFacts::of(&p.layout[0]).line(),
        ]);
        first = last + 1;
    }
    let mut blocks = vec![Block::Table(
        ["pool", "role", "instances", "model", "tp", "rank 0 layout"]
            .map(String::from)
            .to_vec(),
        rows,
    )];
    // The version and its guards only when they are not the seed's, so the explanation of a
    // scenario written before versions existed reads as it did.
    let version = match (sc.sglang.version, sc.sglang.kv_checksum) {
        (crate::spec::SglangVersion::Seed, _) => String::new(),
        (v, checksum) => format!(
            "; sglang version `{}`{}{}",
            v.as_str(),
            if checksum {
                ", --disaggregation-enable-kv-checksum on (PR #39500)"
            } else {
                ""
            },
            if v.validates_registration() {
                ", peer layouts validated at registration (PR #37840)"
            } else {
                ""
            }
        ),
    };
    blocks.push(Block::Para(format!(
        "sglang behaviour: profile `{}`{version}; {} transfer-queue shards per prefill; waiting timeout {}.",
        sc.sglang.profile.as_str(),
        sc.sglang.queue_size,
        secs(sc.sglang.waiting_timeout_ns)
    )));
    Section {
        title: "Cluster".into(),
        blocks,
    }
}

/// Every instance that served a request: its pool and role, and its requests by outcome and
/// error kind.
fn per_instance_section(run: &Run, sc: &Scenario) -> Section {
    let names = instances(sc);
    let rows = run
        .per_instance
        .iter()
        .map(|(i, c)| {
            let (_, pool, role) =
                names
                    .get(*i as usize)
                    .cloned()
                    .unwrap_or((0, "?".into(), Role::Decode));
            vec![
                i.to_string(),
                pool,
                role.as_str().into(),
                c.routed.to_string(),
                c.completed.to_string(),
                c.failed.to_string(),
                c.corrupted.to_string(),
                c.unfinished.to_string(),
                c.kinds_text(),
            ]
        })
        .collect();
    Section {
        title: "Per instance".into(),
        blocks: vec![Block::Table(
            [
                "instance",
                "pool",
                "role",
                "requests",
                "completed",
                "failed",
                "corrupted",
                "unfinished",
                "errors",
            ]
            .map(String::from)
            .to_vec(),
            rows,
        )],
    }
}

/// Prefix reuse: hits per HiCache tier, the router's `cache_aware` decisions, the shared store
/// (only when the run had any of them).
fn reuse_section(s: &Summary) -> Option<Section> {
    let mut bullets = Vec::new();
    let (mut hit, mut input) = (0, 0);
    let mut tiers = [0u64; 3];
    let mut with_tiers = false;
    for c in &s.prefix_cache {
        hit += c.hit_tokens;
        input += c.input_tokens;
        if let Some(t) = &c.tiers {
            with_tiers = true;
            tiers[0] += t.device_hit_tokens;
            tiers[1] += t.host_hit_tokens;
            tiers[2] += t.store_hit_tokens;
        }
    }
    let share = |x: u64| 100.0 * x as f64 / input.max(1) as f64;
    if with_tiers {
        bullets.push(format!(
            "HiCache: {:.1} % of {input} prompt tokens hit — {:.1} % on the GPU, {:.1} % in host memory, {:.1} % from the Mooncake Store — and were not recomputed.",
            share(hit),
            share(tiers[0]),
            share(tiers[1]),
            share(tiers[2])
        ));
    }
    if let Some(r) = &s.router {
        for (side, d) in [("prefill", &r.prefill), ("decode", &r.decode)] {
            if let Some(d) = d {
                bullets.push(format!(
                    "Router cache_aware, {side} side: {} requests by prefix affinity, {} to the least loaded instance because the match was at or below cache_threshold, {} because load was imbalanced (spread > balance_abs_threshold and ratio > balance_rel_threshold), {} fallbacks; the largest load spread at a pick was {} requests.",
                    d.affinity, d.low_match, d.imbalanced, d.fallback, d.peak_load_gap
                ));
            }
        }
    }
    if let Some(k) = &s.kv_store {
        bullets.push(format!(
            "Mooncake Store: {} blocks held at the end, {} written ({:.1} GB), {} evicted, {} refused as full; prefetches read {} blocks ({:.1} GB).",
            k.blocks,
            k.written_blocks,
            k.write_bytes as f64 / 1e9,
            k.evicted_blocks,
            k.skipped_blocks,
            k.prefetched_blocks,
            k.prefetched_bytes as f64 / 1e9
        ));
        let t = &k.traffic;
        bullets.push(format!(
            "On the fabric, sharing NICs with the KV transfers: {} prefetch reads ({:.1} GB, {:.1} ms each on average, {:.1} ms the longest) and {} write-backs ({:.1} GB); {:.1} GB copied locally (replicas on the client's node); {} operations failed.",
            t.reads,
            t.fabric_read_bytes as f64 / 1e9,
            t.read_ns_total as f64 / t.reads.max(1) as f64 / 1e6,
            t.read_ns_max as f64 / 1e6,
            t.writes,
            t.fabric_write_bytes as f64 / 1e9,
            t.local_copy_bytes as f64 / 1e9,
            t.failed
        ));
        if let Some(o) = &t.decode_offload {
            bullets.push(format!(
                "Decode offload (--disaggregation-decode-enable-offload-kvcache): {} blocks of generated tokens copied to host ({:.1} GB over PCIe), {} of them put to the store in {} writes ({:.1} GB from the decode nodes' NICs in {} batches, {:.1} GB copied locally); {} landed under a prompt the store did not hold (unreachable, dropped), {} were never offloaded for want of host memory.",
                o.blocks,
                o.d2h_bytes as f64 / 1e9,
                o.put_blocks,
                o.writes,
                o.fabric_write_bytes as f64 / 1e9,
                o.batches,
                o.local_copy_bytes as f64 / 1e9,
                o.orphaned_blocks,
                o.host_full_blocks
            ));
        }
    }
    (!bullets.is_empty()).then(|| Section {
        title: "Prefix reuse".into(),
        blocks: vec![Block::Bullets(bullets)],
    })
}

/// Kinds whose `summary.json` count is raises (a worker death), not failed requests.
fn is_raise_counted(k: ErrorKind) -> bool {
    matches!(
        k,
        ErrorKind::EnvelopeLayoutMismatch
            | ErrorKind::EnvelopeTpMismatch
            | ErrorKind::MambaLayoutMismatch
            | ErrorKind::MambaSlotSizeMismatch
            | ErrorKind::HeteroTpUnsupported
    )
}

/// Error kinds an overloaded cluster raises by itself (requests waited too long): they do not
/// stop the capacity levers from running.
fn is_overload_kind(k: &str) -> bool {
    matches!(
        k,
        "waiting_timeout" | "bootstrap_timeout" | "transfer_timeout" | "request_too_long"
    )
}

/// Why a missed target on inter-token gaps (`itl_*`, `tbt_*`, or `attainment_min` past
/// `tbt_ms`) is missed: what lies past it by kind of gap (`slo.targets[].late`) and the phase
/// that binds — the handoff from prefill to decode (transfer and the wait to join a batch),
/// the decode steps themselves (the decode pool's batch), or a colocated server's forwards
/// that mix prefill chunks into decoding. `None` for other targets.
fn gap_why(t: &crate::metrics::slo::SloTarget, s: &Summary) -> Option<String> {
    let gaps = t.key.starts_with("itl_") || t.key.starts_with("tbt_");
    let tbt_ms = t.key == "attainment_min" && s.slo.tbt_ms.is_some();
    if !(gaps || tbt_ms) || t.late.is_empty() {
        return None;
    }
    let count = |w: &str| t.late.iter().find(|l| l.what == w).map_or(0, |l| l.count);
    let kinds = ["handoff", "decode_step", "mixed_step"];
    let (top, n) = kinds
        .iter()
        .map(|&k| (k, count(k)))
        .max_by_key(|&(k, n)| (n, std::cmp::Reverse(k)))?;
    let total: u64 = kinds.iter().map(|&k| count(k)).sum();
    let (what, limit) = if tbt_ms {
        (
            format!(
                "{} completed requests have a worst gap past tbt_ms = {} ms",
                count("tbt_ms"),
                crate::metrics::slo::fmt_ms(s.slo.tbt_ms.unwrap_or(0.0))
            ),
            "tbt_ms",
        )
    } else if t.key.starts_with("itl_") {
        (
            format!(
                "≈ {total} of the {} gaps lie past {} ms",
                t.population,
                crate::metrics::slo::fmt_ms(t.target)
            ),
            t.key.as_str(),
        )
    } else {
        (
            format!(
                "≈ {total} of the {} requests have a worst gap past {} ms{}",
                t.population,
                crate::metrics::slo::fmt_ms(t.target),
                match count("not_completed") {
                    0 => String::new(),
                    n => format!(" and {n} never completed (infinitely late)"),
                }
            ),
            t.key.as_str(),
        )
    };
    if total == 0 {
        return Some(format!(
            "Why {limit} is missed: {what}; the requests that never completed decide it (see the failures below)."
        ));
    }
    let share = 100.0 * n as f64 / total as f64;
    let l = &s.latency_ms;
    let ms = |v: Option<f64>| {
        v.map_or("—".to_string(), |v| {
            format!("{} ms", crate::metrics::slo::fmt_ms(v))
        })
    };
    let pool = |roles: &[&str]| {
        s.pools
            .iter()
            .filter(|p| roles.contains(&p.role.as_str()))
            .map(|p| {
                format!(
                    "`{}` ({}: mean batch {}, bottleneck {})",
                    p.pool,
                    p.role,
                    p.batch_mean.map_or("—".into(), |b| format!("{b:.1}")),
                    p.bottleneck.replace('_', " ")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let colocated = s.pools.iter().any(|p| p.role == "colocated");
    let phase = match top {
        "handoff" if colocated => "the handoff: a request's first token after it waited outside the batch (a full batch, or its prompt computed again after a retraction)".to_string(),
        "handoff" => format!(
            "the handoff from prefill to decode: the prefill's first token → the first decoded token, which waits for the KV transfer (p99 {}) and for a place in a decode batch (decode queue p99 {}){}",
            ms(l.transfer.p99),
            ms(l.decode_queue.p99),
            if s.requests.arrived > 0 && s.pools.iter().any(|p| p.bottleneck == "kv_memory") {
                "; decode's KV memory binds admission"
            } else {
                ""
            }
        ),
        "mixed_step" => format!(
            "prefill interference: colocated forwards that also ran prefill chunks, so every running request waits out the chunk — what PD removes ({})",
            pool(&["colocated"])
        ),
        _ => format!(
            "the decode steps themselves: one forward of the whole batch per token ({})",
            pool(&["decode", "colocated"])
        ),
    };
    Some(format!(
        "Why {limit} is missed: {what}; {share:.0} % of those are {} gaps — the binding phase is {phase}.",
        top.replace('_', "-")
    ))
}

/// The SLO verdict target by target, what the latencies are taken over, which pool binds on
/// which resource (with the figures), and the levers — each run on the same seed, ranked by its
/// measured effect (`diagnose::capacity`).
pub(super) fn capacity_section(run: &Run) -> Section {
    use crate::diagnose::capacity;
    let s = &run.summary;
    let mut blocks = Vec::new();
    {
        let slo = &s.slo;
        blocks.push(Block::Para(format!(
            "{}. Attainment {}: {}.",
            match slo.met {
                None => "No [slo] target set".to_string(),
                Some(_) => format!("[slo] {}", slo.verdict_text()),
            },
            slo.attainment
                .map_or("—".into(), |a| format!("{:.1} %", 100.0 * a)),
            slo.attainment_basis()
        )));
        if !slo.targets.is_empty() {
            blocks.push(Block::Bullets(
                slo.targets.iter().map(|t| t.line()).collect(),
            ));
        }
        for t in slo.targets.iter().filter(|t| !t.met) {
            if let Some(why) = gap_why(t, s) {
                blocks.push(Block::Para(why));
            }
        }
    }
    let counts = s.requests.clone();
    blocks.push(Block::Para(format!(
        "Latency figures are {}.",
        crate::metrics::slo::latency_basis(&counts)
    )));
    let Some(sc) = &run.sc else {
        blocks.push(Block::Para(
            "The scenario could not be rebuilt, so no lever was run.".into(),
        ));
        return Section {
            title: "Capacity".into(),
            blocks,
        };
    };
    let faults: Vec<&str> = s
        .errors
        .iter()
        .map(|e| e.kind.as_str())
        .filter(|k| !is_overload_kind(k))
        .collect();
    if !faults.is_empty() || counts.corrupted > 0 || !sc.faults.is_empty() {
        blocks.push(Block::Para(format!(
            "Requests failed or were hurt for reasons other than load ({}): fix those first (below); no capacity lever was run.",
            if faults.is_empty() {
                "corruption or injected faults".to_string()
            } else {
                faults.join(", ")
            }
        )));
        return Section {
            title: "Capacity".into(),
            blocks,
        };
    }
    if let Some(p) = busiest_window(run, sc) {
        blocks.push(Block::Para(p));
    }
    let with = |sets: &[String]| rebuild(&run.record, sets);
    let d = capacity::diagnose(s, sc, &with);
    match d.binding.first() {
        None => blocks.push(Block::Para(format!(
            "No pool binds: headroom everywhere (the highest figure: {}).",
            d.headroom.as_deref().unwrap_or("none")
        ))),
        Some(b) => {
            blocks.push(Block::Para(format!(
                "Binding: pool `{}` ({}) on {} — {}.",
                b.pool, b.role, b.resource, b.evidence
            )));
            for o in &d.binding[1..] {
                blocks.push(Block::Para(format!(
                    "Also bound: pool `{}` ({}) on {} — {}.",
                    o.pool, o.role, o.resource, o.evidence
                )));
            }
        }
    }
    if d.levers.is_empty() {
        if d.base.strained() {
            blocks.push(Block::Para("No lever applies.".into()));
        }
    } else {
        blocks.push(Block::Para(format!(
            "Levers, each run on seed {} and ranked by its measured effect ([slo] met first, then fewer requests failed or unfinished, then more goodput):",
            run.seed
        )));
        blocks.push(Block::Bullets(
            d.levers
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    format!(
                        "({}) {} (`--set {}`): {}",
                        i + 1,
                        l.what,
                        l.sets.join(" --set "),
                        l.effect(&d.base)
                    )
                })
                .collect(),
        ));
    }
    Section {
        title: "Capacity".into(),
        blocks,
    }
}

/// Windows a run whose rate moves is cut into to find its busiest stretch.
const RATE_WINDOWS: u64 = 24;

/// Under a rate profile (`workload.arrival.rate_profile`), where the run's figures hide the
/// peak: the busiest of [`RATE_WINDOWS`] equal windows of the arrival span, its arrival rate
/// against the run's mean and its requests' TTFT p90 against the whole run's. `None` for a
/// workload whose rate does not move or a run too short to cut.
fn busiest_window(run: &super::read::Run, sc: &crate::config::Scenario) -> Option<String> {
    let profiled = match &sc.workload {
        crate::config::Workload::Synthetic { arrival, .. }
        | crate::config::Workload::Sessions { arrival, .. } => {
            matches!(arrival, crate::config::Arrival::Profiled { .. })
        }
        crate::config::Workload::Trace { .. } => false,
    };
    let a = &run.arrivals;
    let (first, last) = (a.iter().map(|x| x.0).min()?, a.iter().map(|x| x.0).max()?);
    if !profiled || a.len() < 2 * RATE_WINDOWS as usize || last <= first {
        return None;
    }
    let width = (last - first).div_ceil(RATE_WINDOWS).max(1);
    let mut count = vec![0u64; RATE_WINDOWS as usize];
    for &(t, _) in a {
        count[((t - first) / width).min(RATE_WINDOWS - 1) as usize] += 1;
    }
    let (w, &n) = count
        .iter()
        .enumerate()
        .max_by_key(|&(i, c)| (*c, std::cmp::Reverse(i)))?;
    let (lo, hi) = (first + w as u64 * width, first + (w as u64 + 1) * width);
    let p90 = |mut v: Vec<u64>| -> Option<f64> {
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(v[((v.len() - 1) as f64 * 0.9).round() as usize] as f64 / 1e6)
    };
    let all = p90(a.iter().filter_map(|x| x.1).collect());
    let peak = p90(a
        .iter()
        .filter(|x| x.0 >= lo && x.0 < hi)
        .filter_map(|x| x.1)
        .collect());
    let rate = |n: u64, ns: u64| n as f64 / (ns as f64 / 1e9);
    let ms = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.0} ms"));
    Some(format!(
        "The arrival rate moves over the run (workload.arrival.rate_profile), so the figures here are means over it: the busiest 1/{RATE_WINDOWS} of the arrivals' span ({:.0}–{:.0} s) took {:.2} req/s against {:.2} on average, and its requests' TTFT p90 was {} (the whole run's {}). Size for that window.",
        lo as f64 / 1e9,
        hi as f64 / 1e9,
        rate(n, width),
        rate(a.len() as u64, last - first),
        ms(peak),
        ms(all),
    ))
}
