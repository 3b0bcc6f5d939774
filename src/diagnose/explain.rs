//! The narrative of a finished run, for people (`pdsim explain`, docs/architecture.md §2): what happened to
//! requests, by outcome and error kind; then for every failure kind sglang's text, the check
//! that raised it and where in sglang, the two layouts or sizes that differed (rank 0's regions,
//! from `layout/`), who was hurt — the healthy decode instances stalled behind a dead
//! transfer-queue shard, the victims of corrupted writes — the sglang flags that fix it, and the
//! capacity analysis ([`super::capacity`]).
//!
//! A results folder is read back through the results schema (`report::schema`: `summary.json`,
//! `requests.csv`, `run.json`); the scenario is rebuilt from the resolved copy in `run.json` to
//! lay out each pool.

use std::collections::BTreeMap;
use std::path::Path;

use super::kinds;
use super::outcome::{LayoutFacts, predict};
use crate::layout::{Effect, PairPlan};
use crate::report::schema::{self, ReadError, RequestRow, RunRecord, Summary};
use crate::scenario::{self, Role, Scenario};
use crate::vocab::{ErrorKind, Outcome};

/// One part of the narrative, rendered as text or Markdown.
#[derive(Clone, Debug)]
enum Block {
    Para(String),
    Bullets(Vec<String>),
    Table(Vec<String>, Vec<Vec<String>>),
    /// sglang's own words.
    Quote(String),
}

struct Section {
    title: String,
    blocks: Vec<Block>,
}

/// Outcome counts of a group of requests.
#[derive(Clone, Debug, Default)]
struct Counts {
    routed: u64,
    completed: u64,
    failed: u64,
    corrupted: u64,
    unfinished: u64,
    kinds: BTreeMap<String, u64>,
    /// The earliest end of a prefill forward among them, ns (when a dead shard stopped).
    first_prefill_end_ns: Option<u64>,
}

impl Counts {
    fn add(&mut self, r: &RequestRow) {
        self.routed += 1;
        match r.outcome {
            Outcome::Completed => self.completed += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Corrupted => self.corrupted += 1,
            Outcome::Unfinished => self.unfinished += 1,
        }
        if let Some(k) = r.error_kind {
            *self.kinds.entry(k.as_str().to_string()).or_insert(0) += 1;
        }
        if let Some(t) = r.prefill_end_ns {
            self.first_prefill_end_ns = Some(self.first_prefill_end_ns.map_or(t, |m| m.min(t)));
        }
    }
    fn kinds_text(&self) -> String {
        self.kinds
            .iter()
            .map(|(k, n)| format!("{k} ×{n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A corrupted request and who it names.
struct Corrupted {
    id: u64,
    victims: String,
    corrupted_by: String,
}

/// How many corrupted requests are listed one by one.
const CORRUPTED_LISTED: usize = 10;

/// Everything read from a run.
struct Run {
    name: String,
    seed: u64,
    sc: Option<Scenario>,
    /// Why the scenario could not be rebuilt, if it could not.
    sc_note: Option<String>,
    summary: Summary,
    /// `run.json`, from which capacity levers rebuild the scenario with their changes.
    record: RunRecord,
    per_instance: BTreeMap<u32, Counts>,
    per_pair: BTreeMap<(u32, u32), Counts>,
    corrupted: Vec<Corrupted>,
    corrupted_total: u64,
    corrupted_named: u64,
}

/// The scenario a results folder ran, rebuilt from `run.json` (paths resolve against the
/// original scenario file's folder), with `sets` applied as `--set` would (capacity levers).
fn rebuild(record: &RunRecord, sets: &[String]) -> Result<Scenario, String> {
    let text = toml::to_string(&record.scenario).map_err(|e| e.to_string())?;
    let mut sc = scenario::from_str(&text, Path::new(&record.scenario_file), sets)
        .map_err(|e| e.to_string())?;
    // The run's own seed: `run.seed` in the resolved file may differ when `--seed` was given.
    sc.seed = record.seed;
    Ok(sc)
}

fn read_run(dir: &Path) -> Result<Run, ReadError> {
    let summary = schema::read_summary(&dir.join("summary.json"))?;
    let record = schema::read_run(&dir.join("run.json"))?;
    let (sc, sc_note) = match rebuild(&record, &[]) {
        Ok(sc) => (Some(sc), None),
        Err(e) => (None, Some(e)),
    };
    let csv_path = dir.join("requests.csv");
    if !csv_path.is_file() {
        return Err(ReadError::Shape {
            path: csv_path,
            field: ".".into(),
            message:
                "missing (a --summary-only run has no requests.csv; run it without --summary-only)"
                    .into(),
            what: "requests.csv",
        });
    }
    let rows = schema::read_requests(&csv_path)?;
    let mut run = Run {
        name: record.name().to_string(),
        seed: record.seed,
        sc,
        sc_note,
        summary,
        record,
        per_instance: BTreeMap::new(),
        per_pair: BTreeMap::new(),
        corrupted: Vec::new(),
        corrupted_total: 0,
        corrupted_named: 0,
    };
    for r in &rows {
        for i in [r.prefill_instance, r.decode_instance]
            .into_iter()
            .flatten()
        {
            run.per_instance.entry(i).or_default().add(r);
        }
        if let (Some(p), Some(d)) = (r.prefill_instance, r.decode_instance) {
            run.per_pair.entry((p, d)).or_default().add(r);
        }
        if r.outcome == Outcome::Corrupted {
            run.corrupted_total += 1;
            if !r.corrupted_by.is_empty() || !r.victims.is_empty() {
                run.corrupted_named += 1;
            }
            if run.corrupted.len() < CORRUPTED_LISTED {
                run.corrupted.push(Corrupted {
                    id: r.id,
                    victims: r.victims.clone(),
                    corrupted_by: r.corrupted_by.clone(),
                });
            }
        }
    }
    Ok(run)
}

/// Pool index, pool name and role of every global instance, in instance order.
fn instances(sc: &Scenario) -> Vec<(usize, String, Role)> {
    let mut v = Vec::new();
    for (pi, p) in sc.pools.iter().enumerate() {
        for _ in 0..p.servers() {
            v.push((pi, p.name.clone(), p.role));
        }
    }
    v
}

fn secs(ns: u64) -> String {
    format!("{:.2} s", ns as f64 / 1e9)
}

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

/// The plan of a (prefill pool, decode pool) pair.
fn plan(sc: &Scenario, p: usize, d: usize) -> Option<&PairPlan> {
    sc.plans.get(&(p, d)).map(|a| a.as_ref())
}

/// The error of a plan that kills the worker, if any.
fn worker_killer(plan: &PairPlan) -> Option<&crate::layout::PdError> {
    plan.chunk_error()
        .or(plan.last_chunk_error())
        .filter(|e| e.effect == Effect::WorkerDies)
}

/// The first sections: what happened, the cluster, per instance.
fn overview(run: &Run) -> Vec<Section> {
    let s = &run.summary;
    let r = &s.requests;
    let mut blocks = vec![Block::Para(format!(
        "{} requests arrived: {} completed, {} failed, {} corrupted, {} unfinished.",
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
    let mut out = vec![Section {
        title: "What happened".into(),
        blocks,
    }];
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
    let mut rows = Vec::new();
    let mut first = 0u32;
    for p in &sc.pools {
        let last = first + p.servers() - 1;
        rows.push(vec![
            p.name.clone(),
            p.role.as_str().into(),
            if first == last {
                format!("{first}")
            } else {
                format!("{first}–{last}")
            },
            p.model.name.clone(),
            format!("--tp-size {}", p.server.tp_size),
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
    blocks.push(Block::Para(format!(
        "sglang behaviour: profile `{}`; {} transfer-queue shards per prefill; waiting timeout {}.",
        sc.sglang.profile.as_str(),
        sc.sglang.queue_size,
        secs(sc.sglang.waiting_timeout_ns)
    )));
    out.push(Section {
        title: "Cluster".into(),
        blocks,
    });
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
    out.push(Section {
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
    });
    out.extend(reuse_section(&run.summary));
    out.extend(speculative_section(&run.summary));
    out
}

/// Speculative decoding per pool that ran it (`docs/sglang-pd.md` §19): the accept length the
/// model set and the run reached, where a decode step's time went, the draft's prefill share.
fn speculative_section(s: &Summary) -> Option<Section> {
    let pct = |x: f64| x * 100.0;
    let bullets: Vec<String> = s
        .speculative
        .iter()
        .map(|p| {
            let flags = format!(
                "{} ({} steps, top-{}, {} draft tokens)",
                p.algorithm, p.num_steps, p.eagle_topk, p.num_draft_tokens
            );
            match (p.accept_length_mean, p.time_share, p.draft_prefill_share) {
                (Some(got), Some(t), _) => format!(
                    "Pool {:?} decodes with {flags}: {got:.2} tokens per request per step (sglang's accept len; the model's α = {:.3} predicts {:.2}) over {} steps; a step's time went {:.0} % to the verify forward, {:.0} % to the draft forwards, {:.0} % to the draft extend and {:.0} % to host and tree work. TPOT is a step over its accept length.",
                    p.pool,
                    p.accept_rate_model.unwrap_or(f64::NAN),
                    p.accept_length_model.unwrap_or(f64::NAN),
                    p.steps,
                    pct(t.verify),
                    pct(t.draft),
                    pct(t.draft_extend),
                    pct(t.host)
                ),
                (_, _, Some(d)) => format!(
                    "Pool {:?} prefills with {flags}: the draft's prefill over each prompt took {:.1} % of its forwards, and every transfer carried the draft's KV layer beside the target's.",
                    p.pool,
                    pct(d)
                ),
                _ => format!("Pool {:?} runs {flags}: it ran no step.", p.pool),
            }
        })
        .collect();
    (!bullets.is_empty()).then(|| Section {
        title: "Speculative decoding".into(),
        blocks: vec![Block::Bullets(bullets)],
    })
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

/// The dead transfer queues of one prefill instance: every (rank, queue) whose worker a pair's
/// error killed — each prefill rank has its own queues and raises on its own (docs/sglang-pd.md §11.3) — the
/// decode instances whose chunks killed them, and when.
struct DeadShard {
    prefill: u32,
    /// (prefill rank, queue) of each dead worker, ascending.
    lanes: Vec<(u32, u32)>,
    culprits: Vec<u32>,
    by_ns: Option<u64>,
    kind: ErrorKind,
}

impl DeadShard {
    /// `rank 0 queue 1, rank 1 queue 3`.
    fn lanes_text(&self) -> String {
        self.lanes
            .iter()
            .map(|(r, q)| format!("rank {r} queue {q}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The (rank, queue) lanes prefill ranks put a room to decode instance `d` on through `plan`.
fn lanes_of(plan: &PairPlan, d: u32, queue_size: u32) -> Vec<(u32, u32)> {
    (0..plan.prefill_layouts().len() as u32)
        .map(|rank| (rank, crate::sim::rank_queue(plan, d, rank, queue_size)))
        .collect()
}

/// Every prefill instance's transfer queues whose worker a pair's error killed, from the
/// requests routed to such pairs.
fn dead_shards(run: &Run, sc: &Scenario) -> Vec<DeadShard> {
    let names = instances(sc);
    let mut out: Vec<DeadShard> = Vec::new();
    for (&(p, d), c) in &run.per_pair {
        let (Some(pp), Some(dp)) = (names.get(p as usize), names.get(d as usize)) else {
            continue;
        };
        let Some(pl) = plan(sc, pp.0, dp.0) else {
            continue;
        };
        let Some(e) = worker_killer(pl) else {
            continue;
        };
        let lanes = lanes_of(pl, d, sc.sglang.queue_size);
        match out.iter_mut().find(|s| s.prefill == p && s.kind == e.kind) {
            Some(s) => {
                s.culprits.push(d);
                s.lanes.extend(lanes);
                s.lanes.sort_unstable();
                s.lanes.dedup();
                s.by_ns = match (s.by_ns, c.first_prefill_end_ns) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            None => out.push(DeadShard {
                prefill: p,
                lanes,
                culprits: vec![d],
                by_ns: c.first_prefill_end_ns,
                kind: e.kind,
            }),
        }
    }
    out
}

/// The knock-on of dead queues: per prefill, the healthy decode instances one of whose lanes
/// is dead (a chunk completes only when every rank has sent its part).
fn knock_on(run: &Run, sc: &Scenario, dead: &[DeadShard], kind: ErrorKind) -> Vec<String> {
    let names = instances(sc);
    let mut lines = Vec::new();
    for s in dead.iter().filter(|s| s.kind == kind) {
        let culprits: Vec<String> = s.culprits.iter().map(|d| d.to_string()).collect();
        lines.push(format!(
            "prefill instance {} ({}): the transfer workers of {} died{} on the first chunk for decode instance {} — every later chunk hashed to those queues waits in WaitingForInput until the waiting timeout ({}).",
            s.prefill,
            names[s.prefill as usize].1,
            s.lanes_text(),
            s.by_ns.map_or(String::new(), |t| format!(" by t = {}", secs(t))),
            culprits.join(", "),
            secs(sc.sglang.waiting_timeout_ns)
        ));
        for (&(p, d), c) in run.per_pair.range((s.prefill, 0)..=(s.prefill, u32::MAX)) {
            debug_assert_eq!(p, s.prefill);
            if s.culprits.contains(&d) {
                continue;
            }
            let Some(pl) = plan(sc, names[p as usize].0, names[d as usize].0) else {
                continue;
            };
            if worker_killer(pl).is_some() {
                continue;
            }
            let shared: Vec<String> = lanes_of(pl, d, sc.sglang.queue_size)
                .into_iter()
                .filter(|l| s.lanes.contains(l))
                .map(|(r, q)| format!("rank {r} queue {q}"))
                .collect();
            if shared.is_empty() {
                continue;
            }
            let stalled = c.kinds.get("waiting_timeout").copied().unwrap_or(0);
            lines.push(format!(
                "decode instance {d} (pool {}) passes every check with prefill {p}, yet its rooms hash to dead {}: {stalled} of its {} requests through prefill {p} failed with waiting_timeout ({} completed before the workers died).",
                names[d as usize].1,
                shared.join(", "),
                c.routed,
                c.completed
            ));
        }
    }
    lines
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

fn kind_section(
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
    let dead = dead_shards(run, sc);
    let pairs = pairs_with(run, sc, kind);
    if !i.knock_on {
        for &(p, d) in &pairs {
            blocks.extend(pair_blocks(sc, p, d));
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
        blocks.push(Block::Para(format!(
            "Fix: {}.",
            kinds::fix(kind, &sc.pools[p].server, &sc.pools[d].server)
        )));
    }
    Section {
        title: format!("{kind} ×{n}"),
        blocks,
    }
}

fn faults_line(faults: &[crate::scenario::file::FaultSection]) -> Option<String> {
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

fn corruption_section(run: &Run) -> Option<Section> {
    if run.corrupted_total == 0 {
        return None;
    }
    let mut blocks = vec![Block::Para(format!(
        "{} request(s) finished with no error but decoded from bytes that were not their own. No check fired: the writes landed, in bounds, on pages or slots another request owns. {} of them name a culprit or victims.",
        run.corrupted_total, run.corrupted_named
    ))];
    if let Some(sc) = &run.sc {
        let names = instances(sc);
        let mut pairs = std::collections::BTreeSet::new();
        for (&(p, d), c) in &run.per_pair {
            if c.corrupted > 0 {
                pairs.insert((names[p as usize].0, names[d as usize].0));
            }
        }
        for (p, d) in pairs {
            blocks.extend(pair_blocks(sc, p, d));
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

/// Error kinds an overloaded cluster raises by itself (requests waited too long): they do not
/// stop the capacity levers from running.
fn is_overload_kind(k: &str) -> bool {
    matches!(
        k,
        "waiting_timeout" | "bootstrap_timeout" | "transfer_timeout" | "request_too_long"
    )
}

/// The SLO verdict target by target, what the latencies are taken over, which pool binds on
/// which resource (with the figures), and the levers — each run on the same seed, ranked by its
/// measured effect (`diagnose::capacity`).
fn capacity_section(run: &Run) -> Section {
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

/// The whole narrative.
fn narrative(run: &Run) -> Vec<Section> {
    let mut out = overview(run);
    out.push(capacity_section(run));
    // Every kind parses: `schema::read_summary` refused any other.
    let mut errors: Vec<(ErrorKind, u64, String)> = run
        .summary
        .errors
        .iter()
        .filter_map(|e| {
            Some((
                e.kind.parse::<ErrorKind>().ok()?,
                e.count,
                e.message.clone(),
            ))
        })
        .collect();
    // Causes first, then their knock-on.
    errors.sort_by_key(|(k, ..)| (kinds::info(*k).knock_on, *k));
    for (k, n, m) in &errors {
        out.push(kind_section(run, run.sc.as_ref(), *k, *n, m));
    }
    out.extend(corruption_section(run));
    if let Some(f) = run
        .sc
        .as_ref()
        .and_then(|_| faults_line(&run.record.scenario.faults))
        && errors.iter().all(|(k, ..)| !kinds::info(*k).knock_on)
    {
        out.push(Section {
            title: "Faults".into(),
            blocks: vec![Block::Para(format!(
                "Injected: {f}. No request failed because of them: sglang's retries and the router's health check absorbed them (see links.csv and the charts)."
            ))],
        });
    }
    out
}

fn render_text(title: &str, sections: &[Section]) -> String {
    let mut s = format!("{title}\n{}\n", "=".repeat(title.chars().count()));
    for sec in sections {
        s += &format!(
            "\n{}\n{}\n",
            sec.title,
            "-".repeat(sec.title.chars().count())
        );
        for b in &sec.blocks {
            match b {
                Block::Para(p) => s += &format!("{p}\n"),
                Block::Quote(q) => s += &format!("  sglang: \"{q}\"\n"),
                Block::Bullets(v) => {
                    for l in v {
                        s += &format!("  - {l}\n");
                    }
                }
                Block::Table(head, rows) => {
                    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
                    for r in rows {
                        for (i, c) in r.iter().enumerate() {
                            w[i] = w[i].max(c.chars().count());
                        }
                    }
                    let line = |cells: &[String]| {
                        let mut l = String::from(" ");
                        for (i, c) in cells.iter().enumerate() {
                            let pad = w[i] - c.chars().count();
                            l += &format!(" {c}{}", " ".repeat(pad));
                            l += if i + 1 < cells.len() { " " } else { "" };
                        }
                        l.trim_end().to_string() + "\n"
                    };
                    s += &line(head);
                    for r in rows {
                        s += &line(r);
                    }
                }
            }
        }
    }
    s
}

fn render_markdown(title: &str, sections: &[Section]) -> String {
    let cell = |c: &str| c.replace('|', "\\|");
    let mut s = format!("# {title}\n");
    for sec in sections {
        s += &format!("\n## {}\n\n", sec.title);
        for b in &sec.blocks {
            match b {
                Block::Para(p) => s += &format!("{p}\n\n"),
                Block::Quote(q) => s += &format!("> sglang: `{q}`\n\n"),
                Block::Bullets(v) => {
                    for l in v {
                        s += &format!("- {l}\n");
                    }
                    s += "\n";
                }
                Block::Table(head, rows) => {
                    s += &format!(
                        "| {} |\n|{}\n",
                        head.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "),
                        "---|".repeat(head.len())
                    );
                    for r in rows {
                        s += &format!(
                            "| {} |\n",
                            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                        );
                    }
                    s += "\n";
                }
            }
        }
    }
    s
}

/// The explanation of the results in `dir`, as text or Markdown.
pub fn explain_dir(dir: &Path, markdown: bool) -> Result<String, ReadError> {
    let run = read_run(dir)?;
    let title = format!("pdsim explain: {} (seed {})", run.name, run.seed);
    let sections = narrative(&run);
    Ok(if markdown {
        render_markdown(&title, &sections)
    } else {
        render_text(&title, &sections)
    })
}
