//! What a running sglang says about its own steps, for `pdsim calibrate`: the server log's
//! `Prefill batch` / `Decode batch` lines, and a series of Prometheus `/metrics` snapshots.
//! Text in, [`StepPoint`]s out, with a note for every line or window left out and why (the
//! command prints them; nothing is dropped silently).
//!
//! **The log** (sglang `SchedulerMetricsMixin.log_prefill_stats` / `log_decode_stats`,
//! `python/sglang/srt/managers/scheduler_metrics_mixin.py` at sgl-project/sglang 01bb3c8; the
//! same fields since 0.4, where the lines read `Decode batch.` with a period):
//!
//! - A `Decode batch` line is written every `--decode-log-interval` decode steps (default 40);
//!   its `gen throughput (token/s)` is the tokens generated since the previous line over the
//!   time since it. The tokens are the batch summed over those steps, so one step's time is
//!   the interval's mean batch ÷ the throughput; the mean batch is taken as the mean of this
//!   line's and the previous line's `#running-req`. The interval must hold decode steps only:
//!   on a colocated server a `Prefill batch` line between the two puts a prefill forward into
//!   it, and the line is left out (a PD decode server — its lines carry `#prealloc-req` — never
//!   runs one: its `Prefill batch`-free prebuilt batches join without a forward). The context is
//!   `#token`, the KV in use, less what a PD decode server has pre-allocated for requests still
//!   in transfer (`pre-allocated usage` × the pool, the pool being `#token` ÷ `token usage`).
//!   Speculative lines (`accept len`) and eager ones (`cuda graph: False`) are left out: the fit
//!   prices plain CUDA-graph decode steps.
//! - A `Prefill batch` line is written when a prefill batch is scheduled; since late 2025 it
//!   carries `input throughput (token/s)`: the *previous* prefill batch's new tokens over the
//!   time between the two lines. When the previous line still had work waiting (`#queue-req` or
//!   `#pending-token` above 0) the next batch started as soon as it could, so that time is one
//!   forward (under the overlap scheduler, the forward before it: consecutive batches of a
//!   saturated server are assumed alike). A point is the previous line's batch (`#new-seq`,
//!   `#new-token`, `#cached-token` as the prefix) at that time. Left out: pairs with nothing
//!   waiting (the gap holds idle time), with a `Decode batch` line between, and on a colocated
//!   server with requests running (decode steps may run between the two batches unlogged).
//!   A chunk of a long prompt attends to its earlier chunks, which the line does not show; the
//!   point prices it as a prompt of the chunk's length.
//! - Lines are grouped by the scheduler that wrote them: the tag in the line's bracket after the
//!   time (`TP0`, `DP3 TP3`, `TP0 EP0`), one series each.
//!
//! **Prometheus** (`--enable-metrics`; `SchedulerMetricsCollector`,
//! `python/sglang/srt/metrics/collector.py` at sgl-project/sglang 00ae9c1): a file of several
//! scrapes of `/metrics` one after another (a scrape ends where a series repeats). Per
//! scheduler (its labels without `mode`, `category`, `le`):
//!
//! - With the counters `sglang:realtime_tokens_total{mode}`, `sglang:gpu_execution_seconds_total`
//!   and `sglang:cuda_graph_passes_total` (sglang 2026), two consecutive scrapes give the
//!   window's forwards, their GPU seconds and their tokens: a window with only prefill tokens is
//!   a prefill point (the mean forward: tokens ÷ forwards, cached tokens ÷ forwards as the
//!   prefix), one with only decode tokens a decode point (batch = decode tokens ÷ forwards, the
//!   step = GPU seconds ÷ forwards, the context per sequence from `sglang:decode_sum_seq_lens`
//!   ÷ `sglang:num_running_reqs`). Windows with both, or with no forward, are left out.
//! - Without them, the gauges `sglang:num_running_reqs` and `sglang:gen_throughput` (set at each
//!   `Decode batch` line) give one decode point per scrape whose gauges moved: step =
//!   running ÷ throughput, context `sglang:decode_sum_seq_lens` or `sglang:num_used_tokens`. On
//!   a colocated server these can carry prefill time; the note says so.

use std::collections::BTreeMap;

use super::fit::{Phase, StepPoint};

/// Points read from an observation file and what was left out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The measurements.
    pub points: Vec<StepPoint>,
    /// One line per reason something was left out, with its count and first place.
    pub notes: Vec<String>,
}

/// Counts of what was left out, by reason, with the first `file:line` of each.
#[derive(Default)]
struct LeftOut(BTreeMap<&'static str, (u32, String)>);

impl LeftOut {
    fn add(&mut self, why: &'static str, at: String) {
        self.0.entry(why).or_insert((0, at)).0 += 1;
    }

    fn notes(self, name: &str) -> Vec<String> {
        self.0
            .into_iter()
            .map(|(why, (n, at))| format!("{name}: {n} left out ({why}; first at {at})"))
            .collect()
    }
}

/// Whether `text` is an sglang server log: a line with a `Prefill batch` or `Decode batch`
/// entry among its first 10,000.
pub fn is_log(text: &str) -> bool {
    text.lines()
        .take(10_000)
        .any(|l| l.contains("Decode batch") || l.contains("Prefill batch"))
}

/// Whether `first` (a file's first non-empty line) opens a Prometheus exposition of sglang's
/// metrics.
pub fn is_prometheus(first: &str) -> bool {
    first.starts_with("# HELP ") || first.starts_with("# TYPE ") || first.starts_with("sglang:")
}

/// One log entry's fields: `key: value` pairs after the entry's name.
struct Fields<'a> {
    map: Vec<(&'a str, &'a str)>,
    name: &'a str,
    line: usize,
}

impl<'a> Fields<'a> {
    /// Splits `rest` (the text after `Decode batch.` / `Prefill batch,`) into `key: value`
    /// pairs; text that is no pair (a trailing comma's empty piece) is ignored.
    fn parse(rest: &'a str, name: &'a str, line: usize) -> Self {
        let map = rest
            .split(", ")
            .filter_map(|kv| kv.split_once(": "))
            .map(|(k, v)| (k.trim(), v.trim().trim_end_matches(',')))
            .collect();
        Self { map, name, line }
    }

    fn raw(&self, key: &str) -> Option<&'a str> {
        self.map.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// A non-negative number under `key`, `None` when the line has no such field.
    fn num(&self, key: &str) -> Result<Option<f64>, String> {
        match self.raw(key) {
            None => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
                _ => Err(format!(
                    "{}:{}: field `{key}` = {v:?}: expected a number ≥ 0",
                    self.name, self.line
                )),
            },
        }
    }

    /// A number the entry must carry.
    fn need(&self, key: &str) -> Result<f64, String> {
        self.num(key)?.ok_or_else(|| {
            format!(
                "{}:{}: no `{key}` field in this entry; sglang writes it on every such line — is the line cut?",
                self.name, self.line
            )
        })
    }

    /// The first of `keys` the entry carries (hybrid models name the full-attention pool
    /// `#full token` / `full token usage`).
    fn first_num(&self, keys: &[&str]) -> Result<Option<f64>, String> {
        for k in keys {
            if let Some(v) = self.num(k)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
}

/// A log entry: which scheduler wrote it and which kind it is.
enum Entry<'a> {
    Prefill(Fields<'a>),
    Decode(Fields<'a>),
}

/// The entry on `raw`, if it is one: the scheduler's tag (what follows the time in the leading
/// bracket, empty without one) and the fields.
fn entry<'a>(raw: &'a str, name: &'a str, line: usize) -> Option<(String, Entry<'a>)> {
    let (at, kind) = if let Some(i) = raw.find("Decode batch") {
        (i, true)
    } else {
        (raw.find("Prefill batch")?, false)
    };
    let head = &raw[..at];
    // `[2026-04-05 20:02:51 DP0 TP0] `: the words after the date and time are the tag.
    let tag = head
        .rfind('[')
        .and_then(|o| head[o..].find(']').map(|c| &head[o + 1..o + c]))
        .map_or_else(String::new, |inside| {
            inside
                .split_whitespace()
                .filter(|w| !w.starts_with(|c: char| c.is_ascii_digit()))
                .collect::<Vec<_>>()
                .join(" ")
        });
    let mut rest = &raw[at + "Decode batch".len()..];
    // An optional forward count (`SGLANG_LOG_FORWARD_ITERS`), then `.` (0.4) or `,`.
    rest = rest.trim_start();
    if rest.starts_with('[') {
        rest = rest.find(']').map_or(rest, |c| &rest[c + 1..]);
    }
    let rest = rest.trim_start_matches(['.', ',']).trim_start();
    let fields = Fields::parse(rest, name, line);
    Some((
        tag,
        if kind {
            Entry::Decode(fields)
        } else {
            Entry::Prefill(fields)
        },
    ))
}

/// The previous entries of one scheduler that a new entry is read against.
#[derive(Default)]
struct Series {
    /// The last decode line's `#running-req`.
    last_decode_running: Option<f64>,
    /// A prefill line since the last decode line.
    prefill_since_decode: bool,
    /// The last prefill line: (new tokens, new sequences, cached tokens, work waiting after it,
    /// a PD prefill server, requests running, line) and whether a decode line came since.
    last_prefill: Option<(PrefillLine, bool)>,
}

#[derive(Clone, Copy)]
struct PrefillLine {
    tokens: f64,
    seqs: f64,
    cached: f64,
    waiting: bool,
    pd_prefill: bool,
    running: f64,
    line: usize,
}

/// Parses an sglang server log.
pub fn parse_log(name: &str, text: &str) -> Result<Observed, String> {
    let mut series: BTreeMap<String, Series> = BTreeMap::new();
    let mut left = LeftOut::default();
    let mut points = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let Some((tag, e)) = entry(raw, name, line) else {
            continue;
        };
        let s = series.entry(tag).or_default();
        let at = format!("{name}:{line}");
        match e {
            Entry::Decode(f) => {
                let running = f.need("#running-req")?;
                let gen_tps = f.need("gen throughput (token/s)")?;
                let prev = s.last_decode_running.replace(running);
                let prefill_between = std::mem::take(&mut s.prefill_since_decode);
                if let Some((_, decode_since)) = &mut s.last_prefill {
                    *decode_since = true;
                }
                let pd_decode = f.has("#prealloc-req") || f.has("#transfer-req");
                if f.has("accept len") {
                    left.add(
                        "speculative decode lines: a verify step is no plain decode step",
                        at,
                    );
                } else if ["cuda graph", "cpu graph", "npu graph"]
                    .iter()
                    .any(|k| f.raw(k) == Some("False"))
                {
                    left.add("eager decode lines (cuda graph: False)", at);
                } else if prev.is_none() {
                    left.add("a scheduler's first decode line: its interval starts at the server's start", at);
                } else if prefill_between && !pd_decode {
                    left.add(
                        "decode lines with a prefill batch in their interval (colocated server)",
                        at,
                    );
                } else if running < 1.0 || gen_tps <= 0.0 {
                    left.add(
                        "idle decode lines (no request running or no throughput)",
                        at,
                    );
                } else {
                    let batch = (prev.unwrap_or(running) + running) / 2.0;
                    let token = f.first_num(&["#token", "#full token"])?.unwrap_or(0.0);
                    let usage = f.first_num(&["token usage", "full token usage"])?;
                    let pre = f.num("pre-allocated usage")?;
                    let held = match (pre, usage) {
                        (Some(pre), Some(u)) if u > 0.0 => token * (1.0 - pre / u).max(0.0),
                        _ => token,
                    };
                    let seqs = batch.round().max(1.0);
                    points.push(StepPoint {
                        phase: Phase::Decode,
                        tokens: 0,
                        seqs: seqs as u32,
                        context_tokens: (held * seqs / running).round() as u64,
                        ms: batch / gen_tps * 1e3,
                        origin: format!("{name}:{line}:decode"),
                    });
                }
            }
            Entry::Prefill(f) => {
                s.prefill_since_decode = true;
                let this = PrefillLine {
                    tokens: f.need("#new-token")?,
                    seqs: f.need("#new-seq")?,
                    cached: f.num("#cached-token")?.unwrap_or(0.0),
                    waiting: f.num("#queue-req")?.unwrap_or(0.0) > 0.0
                        || f.num("#pending-token")?.unwrap_or(0.0) > 0.0,
                    pd_prefill: f.has("#inflight-req") || f.has("#prealloc-req"),
                    running: f.num("#running-req")?.unwrap_or(0.0),
                    line,
                };
                let thr = f.num("input throughput (token/s)")?;
                if let Some((prev, decode_since)) = s.last_prefill.replace((this, false)) {
                    let at = format!("{name}:{}", prev.line);
                    if thr.is_none() {
                        left.add(
                            "prefill lines without `input throughput` (sglang before late 2025)",
                            at,
                        );
                    } else if !prev.waiting {
                        left.add("prefill batches with nothing waiting after them: the gap to the next holds idle time", at);
                    } else if decode_since {
                        left.add("prefill batches with a decode line before the next", at);
                    } else if !prev.pd_prefill && prev.running > 0.0 {
                        left.add("prefill batches on a colocated server with requests running: decode steps may run before the next", at);
                    } else if prev.tokens < 1.0 || prev.seqs < 1.0 || thr <= Some(0.0) {
                        left.add("empty prefill batches", at);
                    } else {
                        let thr = thr.unwrap_or(1.0);
                        points.push(StepPoint {
                            phase: Phase::Prefill,
                            tokens: prev.tokens.min(f64::from(u32::MAX)) as u32,
                            seqs: prev.seqs.min(f64::from(u32::MAX)) as u32,
                            context_tokens: prev.cached as u64,
                            ms: prev.tokens / thr * 1e3,
                            origin: format!("{name}:{}:prefill", prev.line),
                        });
                    }
                }
            }
        }
    }
    for s in series.values() {
        if let Some((last, _)) = &s.last_prefill {
            left.add(
                "a scheduler's last prefill batch: no later line times it",
                format!("{name}:{}", last.line),
            );
        }
    }
    Ok(Observed {
        points,
        notes: left.notes(name),
    })
}

/// One sample of a scrape: metric name, its labels in order, the value.
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses one exposition line (`name{a="x",b="y"} value [timestamp]`).
fn sample(raw: &str, name: &str, line: usize) -> Result<Sample, String> {
    let bad = |what: &str| {
        format!(
            "{name}:{line}: {what}; expected `metric{{label=\"value\",…}} number` (Prometheus text format)"
        )
    };
    let (metric, rest) = match raw.find(['{', ' ']) {
        Some(i) => (&raw[..i], &raw[i..]),
        None => return Err(bad("no value")),
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    if let Some(body) = rest.strip_prefix('{') {
        let mut chars = body.char_indices().peekable();
        let mut end = None;
        loop {
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            match chars.peek() {
                Some((i, '}')) => {
                    end = Some(*i);
                    break;
                }
                None => break,
                _ => {}
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err(bad(&format!("label `{key}` has no quoted value")));
            }
            let mut val = String::new();
            let mut closed = false;
            while let Some((_, c)) = chars.next() {
                match c {
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => val.push('\n'),
                        Some(c) => val.push(c),
                        None => break,
                    },
                    '"' => {
                        closed = true;
                        break;
                    }
                    c => val.push(c),
                }
            }
            if !closed {
                return Err(bad(&format!("label `{key}`'s value is not closed")));
            }
            labels.push((key.trim().to_string(), val));
        }
        let Some(end) = end else {
            return Err(bad("labels not closed by `}`"));
        };
        rest = &body[end + 1..];
    }
    let value = rest
        .split_whitespace()
        .next()
        .ok_or_else(|| bad("no value"))?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v
            .parse::<f64>()
            .map_err(|_| bad(&format!("value {v:?} is not a number")))?,
    };
    Ok(Sample {
        name: metric.to_string(),
        labels,
        value,
    })
}

/// Labels that tell one scheduler's series apart from another's part (a counter's `mode`).
const PART_LABELS: [&str; 6] = [
    "mode",
    "category",
    "le",
    "quantile",
    "stage",
    "num_prefill_ranks",
];

/// What one scrape says of one scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Scrape {
    running: Option<f64>,
    gen_tps: Option<f64>,
    seq_lens: Option<f64>,
    used: Option<f64>,
    accept: Option<f64>,
    cuda_graph: Option<f64>,
    prefill_tokens: Option<f64>,
    cached_tokens: Option<f64>,
    decode_tokens: Option<f64>,
    gpu_s: Option<f64>,
    passes: Option<f64>,
    line: usize,
}

fn add(slot: &mut Option<f64>, v: f64) {
    *slot = Some(slot.unwrap_or(0.0) + v);
}

impl Scrape {
    /// Takes one sample in; `false` for a metric the reading does not use.
    fn take(&mut self, s: &Sample) -> bool {
        let label = |k: &str| {
            s.labels
                .iter()
                .find(|(l, _)| l == k)
                .map(|(_, v)| v.as_str())
        };
        let v = s.value;
        match s.name.as_str() {
            "sglang:num_running_reqs" => self.running = Some(v),
            "sglang:gen_throughput" => self.gen_tps = Some(v),
            "sglang:decode_sum_seq_lens" => self.seq_lens = Some(v),
            "sglang:num_used_tokens" => self.used = Some(v),
            "sglang:spec_accept_length" => self.accept = Some(v),
            "sglang:is_cuda_graph" => self.cuda_graph = Some(v),
            "sglang:realtime_tokens_total" => match label("mode") {
                Some("prefill_compute") => add(&mut self.prefill_tokens, v),
                Some("prefill_cache") => add(&mut self.cached_tokens, v),
                Some("decode") => add(&mut self.decode_tokens, v),
                _ => return false,
            },
            "sglang:gpu_execution_seconds_total" => add(&mut self.gpu_s, v),
            "sglang:cuda_graph_passes_total" => add(&mut self.passes, v),
            _ => return false,
        }
        true
    }
}

/// Parses a series of Prometheus scrapes of sglang's `/metrics`.
pub fn parse_prometheus(name: &str, text: &str) -> Result<Observed, String> {
    // Scrapes in order; each a map from the scheduler's labels to what it said.
    let mut scrapes: Vec<BTreeMap<String, Scrape>> = vec![BTreeMap::new()];
    let mut seen: std::collections::HashSet<String> = Default::default();
    let mut any_sglang = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() || raw.starts_with('#') {
            continue;
        }
        let s = sample(raw, name, line)?;
        any_sglang |= s.name.starts_with("sglang:");
        // A series seen again opens the next scrape.
        let key = format!("{}{:?}", s.name, s.labels);
        if !seen.insert(key.clone()) {
            seen.clear();
            seen.insert(key);
            scrapes.push(BTreeMap::new());
        }
        let mut who: Vec<&(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| !PART_LABELS.contains(&k.as_str()))
            .collect();
        who.sort();
        let who = who
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let scrape = scrapes.last_mut().expect("one scrape at least");
        let mut entry = scrape.get(&who).copied().unwrap_or_default();
        if entry.take(&s) {
            if entry.line == 0 {
                entry.line = line;
            }
            scrape.insert(who, entry);
        }
    }
    if !any_sglang {
        return Err(format!(
            "{name}: no `sglang:` metric in the file; expected scrapes of a running sglang's /metrics (launched with --enable-metrics)"
        ));
    }
    let mut left = LeftOut::default();
    let mut points = Vec::new();
    let mut counters_seen = false;
    let mut whos: Vec<&String> = scrapes.iter().flat_map(|s| s.keys()).collect();
    whos.sort();
    whos.dedup();
    for who in whos {
        let mut prev: Option<Scrape> = None;
        for scrape in &scrapes {
            let Some(now) = scrape.get(who).copied() else {
                continue;
            };
            let at = format!("{name}:{}", now.line);
            let before = prev.replace(now);
            let Some(before) = before else {
                if now.gpu_s.is_none() {
                    gauge_point(name, &now, None, &mut points, &mut left);
                }
                continue;
            };
            let delta = |f: fn(&Scrape) -> Option<f64>| Some(f(&now)? - f(&before)?);
            let counters = (
                delta(|s| s.prefill_tokens),
                delta(|s| s.decode_tokens),
                delta(|s| s.gpu_s),
                delta(|s| s.passes),
            );
            if let (Some(dp), Some(dd), Some(ds), Some(dn)) = counters {
                counters_seen = true;
                let dc = delta(|s| s.cached_tokens).unwrap_or(0.0);
                if dn < 0.0 || dp < 0.0 || dd < 0.0 || ds < 0.0 {
                    left.add(
                        "windows where a counter went down (the server restarted)",
                        at,
                    );
                } else if dn == 0.0 || ds == 0.0 {
                    left.add("windows with no forward", at);
                } else if now.accept.unwrap_or(0.0) > 0.0 {
                    left.add(
                        "speculative windows: a verify step is no plain decode step",
                        at,
                    );
                } else if dp > 0.0 && dd > 0.0 {
                    left.add("windows with prefill and decode forwards both", at);
                } else if dp > 0.0 {
                    points.push(StepPoint {
                        phase: Phase::Prefill,
                        tokens: (dp / dn).round().max(1.0) as u32,
                        seqs: 1,
                        context_tokens: (dc / dn).round() as u64,
                        ms: ds / dn * 1e3,
                        origin: format!("{name}:{}:window", now.line),
                    });
                } else {
                    let batch = dd / dn;
                    let per_seq = match (now.seq_lens.or(now.used), now.running) {
                        (Some(l), Some(r)) if r >= 1.0 => l / r,
                        _ => 0.0,
                    };
                    let seqs = batch.round().max(1.0);
                    points.push(StepPoint {
                        phase: Phase::Decode,
                        tokens: 0,
                        seqs: seqs as u32,
                        context_tokens: (per_seq * seqs).round() as u64,
                        ms: ds / dn * 1e3,
                        origin: format!("{name}:{}:window", now.line),
                    });
                }
            } else {
                gauge_point(name, &now, Some(&before), &mut points, &mut left);
            }
        }
    }
    let mut notes = left.notes(name);
    if !counters_seen && points.iter().any(|p| p.phase == Phase::Decode) {
        notes.push(format!(
            "{name}: decode points from the gauges (sglang:num_running_reqs ÷ sglang:gen_throughput): on a colocated server their interval may include prefill forwards — scrape a PD decode server, or an sglang with sglang:gpu_execution_seconds_total"
        ));
    }
    Ok(Observed { points, notes })
}

/// A decode point from a scrape's gauges, unless they did not move since `before` (sglang sets
/// them at each `Decode batch` line, every 40 steps; a faster scrape sees the same values).
fn gauge_point(
    name: &str,
    now: &Scrape,
    before: Option<&Scrape>,
    points: &mut Vec<StepPoint>,
    left: &mut LeftOut,
) {
    let at = format!("{name}:{}", now.line);
    let (Some(running), Some(gen_tps)) = (now.running, now.gen_tps) else {
        left.add(
            "scrapes without sglang:num_running_reqs and sglang:gen_throughput",
            at,
        );
        return;
    };
    if before.is_some_and(|b| b.running == now.running && b.gen_tps == now.gen_tps) {
        left.add(
            "scrapes whose gauges had not moved since the previous one",
            at,
        );
    } else if now.accept.unwrap_or(0.0) > 0.0 {
        left.add(
            "speculative scrapes: a verify step is no plain decode step",
            at,
        );
    } else if now.cuda_graph == Some(0.0) {
        left.add("eager decode steps (sglang:is_cuda_graph 0)", at);
    } else if running < 1.0 || gen_tps <= 0.0 {
        left.add("idle scrapes (no request running or no throughput)", at);
    } else {
        points.push(StepPoint {
            phase: Phase::Decode,
            tokens: 0,
            seqs: running.round() as u32,
            context_tokens: now.seq_lens.or(now.used).unwrap_or(0.0).round() as u64,
            ms: running / gen_tps * 1e3,
            origin: format!("{name}:{}:gauges", now.line),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PD_DECODE: &str = "\
[2026-04-05 20:02:50 TP0] Decode batch, #running-req: 30, #token: 40000, token usage: 0.40, pre-allocated usage: 0.10, #prealloc-req: 0, #transfer-req: 2, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 1500.00, #queue-req: 0,
[2026-04-05 20:02:51 TP0] Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.40, #running-req: 30, #queue-req: 0,
[2026-04-05 20:02:51 TP0] Decode batch, #running-req: 34, #token: 40000, token usage: 0.40, pre-allocated usage: 0.10, #prealloc-req: 0, #transfer-req: 2, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 1600.00, #queue-req: 0,
";

    #[test]
    fn a_decode_line_is_one_step_of_its_intervals_mean_batch() {
        let o = parse_log("d.log", PD_DECODE).unwrap();
        assert_eq!(o.points.len(), 1, "{:?}", o.notes);
        let p = &o.points[0];
        // Mean batch (30 + 34) / 2 = 32 at 1,600 tokens/s: 20 ms a step.
        assert_eq!((p.phase, p.seqs), (Phase::Decode, 32));
        assert!((p.ms - 20.0).abs() < 1e-9, "{}", p.ms);
        // 40,000 tokens held less the pre-allocated quarter (0.10 of a pool 0.40 used), for
        // 32 of the 34 running.
        assert_eq!(
            p.context_tokens,
            (30_000.0_f64 * 32.0 / 34.0).round() as u64
        );
        assert_eq!(p.origin, "d.log:3:decode");
        // The first line has no interval of its own, and says so.
        assert!(
            o.notes
                .iter()
                .any(|n| n.contains("first decode line") && n.contains("d.log:1")),
            "{:?}",
            o.notes
        );
    }

    #[test]
    fn a_colocated_decode_interval_with_a_prefill_is_left_out() {
        let text = PD_DECODE.replace(
            "pre-allocated usage: 0.10, #prealloc-req: 0, #transfer-req: 2, #retracted-req: 0, ",
            "",
        );
        let o = parse_log("c.log", &text).unwrap();
        assert!(o.points.is_empty());
        assert!(
            o.notes
                .iter()
                .any(|n| n.contains("prefill batch in their interval") && n.contains("c.log:3")),
            "{:?}",
            o.notes
        );
    }

    #[test]
    fn back_to_back_prefill_lines_time_the_earlier_batch() {
        let text = "\
[2026-07-04 04:31:24 DP1 TP1] Prefill batch, #new-seq: 12, #new-token: 43008, #cached-token: 512, token usage: 0.14, #running-req: 0, #queue-req: 97, #prealloc-req: 0, #inflight-req: 3, input throughput (token/s): 100.00,
[2026-07-04 04:31:27 DP1 TP1] Prefill batch, #new-seq: 12, #new-token: 43264, #cached-token: 0, token usage: 0.20, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 3, input throughput (token/s): 15734.14,
[2026-07-04 04:31:30 DP1 TP1] Prefill batch, #new-seq: 1, #new-token: 800, #cached-token: 0, token usage: 0.20, #running-req: 0, #queue-req: 0, #prealloc-req: 0, #inflight-req: 3, input throughput (token/s): 9000.00,
";
        let o = parse_log("p.log", text).unwrap();
        assert_eq!(o.points.len(), 1, "{:?}", o.notes);
        let p = &o.points[0];
        assert_eq!(
            (p.phase, p.tokens, p.seqs, p.context_tokens),
            (Phase::Prefill, 43008, 12, 512)
        );
        assert!((p.ms - 43008.0 / 15734.14 * 1e3).abs() < 1e-9);
        // The second batch had nothing waiting after it: the third line's gap holds idle time.
        assert!(
            o.notes
                .iter()
                .any(|n| n.contains("nothing waiting") && n.contains("p.log:2")),
            "{:?}",
            o.notes
        );
    }

    #[test]
    fn schedulers_are_read_apart_and_old_lines_with_a_period_parse() {
        let text = "\
[2025-02-27 04:37:29 TP0] Decode batch. #running-req: 8, #token: 67724, token usage: 0.13, gen throughput (token/s): 183.54, #queue-req: 0
[2025-02-27 04:37:29 DP1 TP1] Decode batch. #running-req: 4, #token: 100, token usage: 0.13, gen throughput (token/s): 10.0, #queue-req: 0
[2025-02-27 04:37:31 TP0] Decode batch. #running-req: 8, #token: 68044, token usage: 0.14, gen throughput (token/s): 160.00, #queue-req: 0
";
        let o = parse_log("old.log", text).unwrap();
        assert_eq!(o.points.len(), 1, "{:?}", o.notes);
        assert!((o.points[0].ms - 50.0).abs() < 1e-9);
        assert_eq!(o.points[0].context_tokens, 68044);
    }

    #[test]
    fn speculative_and_eager_lines_are_counted_not_fitted() {
        let text = "\
[x TP0] Decode batch, #running-req: 8, #token: 1, token usage: 0.1, cuda graph: True, gen throughput (token/s): 100.0, #queue-req: 0,
[x TP0] Decode batch, #running-req: 8, #token: 1, token usage: 0.1, accept len: 2.10, accept rate: 0.70, cuda graph: True, gen throughput (token/s): 100.0, #queue-req: 0,
[x TP0] Decode batch, #running-req: 8, #token: 1, token usage: 0.1, cuda graph: False, gen throughput (token/s): 100.0, #queue-req: 0,
";
        let o = parse_log("s.log", text).unwrap();
        assert!(o.points.is_empty());
        let notes = o.notes.join("\n");
        assert!(
            notes.contains("speculative") && notes.contains("s.log:2"),
            "{notes}"
        );
        assert!(
            notes.contains("eager") && notes.contains("s.log:3"),
            "{notes}"
        );
    }

    #[test]
    fn log_errors_name_the_line_and_field() {
        let e = parse_log(
            "e.log",
            "[t TP0] Decode batch, #running-req: 8, #token: 1\n",
        )
        .unwrap_err();
        assert!(e.contains("e.log:1") && e.contains("gen throughput"), "{e}");
        let e = parse_log(
            "e.log",
            "[t TP0] Decode batch, #running-req: many, gen throughput (token/s): 1\n",
        )
        .unwrap_err();
        assert!(e.contains("e.log:1") && e.contains("#running-req"), "{e}");
    }

    fn scrape(
        prefill: f64,
        cache: f64,
        decode: f64,
        secs: f64,
        passes: f64,
        running: f64,
    ) -> String {
        let l = "model_name=\"m\",engine_type=\"unified\",tp_rank=\"0\",pp_rank=\"0\"";
        format!(
            "# HELP sglang:num_running_reqs The number of running requests.\n\
             # TYPE sglang:num_running_reqs gauge\n\
             sglang:num_running_reqs{{{l}}} {running}\n\
             sglang:decode_sum_seq_lens{{{l}}} {}\n\
             sglang:gen_throughput{{{l}}} 1000.0\n\
             sglang:realtime_tokens_total{{{l},mode=\"prefill_compute\"}} {prefill}\n\
             sglang:realtime_tokens_total{{{l},mode=\"prefill_cache\"}} {cache}\n\
             sglang:realtime_tokens_total{{{l},mode=\"decode\"}} {decode}\n\
             sglang:gpu_execution_seconds_total{{{l},category=\"forward\"}} {secs}\n\
             sglang:cuda_graph_passes_total{{{l},mode=\"full\"}} {passes}\n",
            running * 1000.0
        )
    }

    #[test]
    fn counter_windows_give_mean_forwards() {
        let text = [
            scrape(0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
            // 10 prefill forwards of 4,096 new tokens (1,024 cached) in 2 s.
            scrape(40960.0, 10240.0, 0.0, 2.0, 10.0, 0.0),
            // 100 decode steps, 3,200 tokens (batch 32) in 1.5 s.
            scrape(40960.0, 10240.0, 3200.0, 3.5, 110.0, 32.0),
            // Both in one window: left out.
            scrape(50000.0, 10240.0, 4000.0, 4.0, 130.0, 32.0),
        ]
        .concat();
        let o = parse_prometheus("m.prom", &text).unwrap();
        assert_eq!(o.points.len(), 2, "{:?}", o.notes);
        let (p, d) = (&o.points[0], &o.points[1]);
        assert_eq!(
            (p.phase, p.tokens, p.context_tokens),
            (Phase::Prefill, 4096, 1024)
        );
        assert!((p.ms - 200.0).abs() < 1e-9);
        assert_eq!(
            (d.phase, d.seqs, d.context_tokens),
            (Phase::Decode, 32, 32_000)
        );
        assert!((d.ms - 15.0).abs() < 1e-9);
        assert!(
            o.notes.iter().any(|n| n.contains("prefill and decode")),
            "{:?}",
            o.notes
        );
    }

    #[test]
    fn gauges_alone_give_decode_points_once_per_move() {
        let g = |running: f64, gen_tps: f64| {
            format!(
                "sglang:num_running_reqs{{tp_rank=\"0\"}} {running}\nsglang:gen_throughput{{tp_rank=\"0\"}} {gen_tps}\nsglang:num_used_tokens{{tp_rank=\"0\"}} 9000\n"
            )
        };
        let text = [g(16.0, 800.0), g(16.0, 800.0), g(32.0, 1280.0)].concat();
        let o = parse_prometheus("g.prom", &text).unwrap();
        let ms: Vec<f64> = o.points.iter().map(|p| p.ms).collect();
        assert_eq!(ms, vec![20.0, 25.0]);
        assert!(
            o.notes.iter().any(|n| n.contains("had not moved")),
            "{:?}",
            o.notes
        );
        assert!(
            o.notes.iter().any(|n| n.contains("colocated")),
            "{:?}",
            o.notes
        );
    }

    #[test]
    fn prometheus_errors_name_the_line() {
        let e = parse_prometheus("x.prom", "sglang:num_running_reqs{tp_rank=\"0} 3\n").unwrap_err();
        assert!(e.contains("x.prom:1"), "{e}");
        let e = parse_prometheus("x.prom", "sglang:num_running_reqs{tp_rank=\"0\"} lots\n")
            .unwrap_err();
        assert!(e.contains("x.prom:1") && e.contains("lots"), "{e}");
        let e = parse_prometheus("x.prom", "vllm:num_requests_running 3\n").unwrap_err();
        assert!(e.contains("no `sglang:` metric"), "{e}");
    }
}
