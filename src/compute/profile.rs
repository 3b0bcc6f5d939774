//! Measured step times: a user's profile of prefill forwards and decode steps, interpolated,
//! in place of the roofline model — as Vidur and SplitwiseSim users give theirs.
//!
//! # File format
//!
//! CSV with a header. Columns are found by name (order is free, extra columns are ignored,
//! fields are trimmed):
//!
//! | column | prefill row | decode row |
//! |---|---|---|
//! | `phase` | `prefill` | `decode` |
//! | `tokens` | new tokens in the forward (integer ≥ 1): **key** | ignored (may be empty) |
//! | `batch_size` | ignored (may be empty) | sequences in the step (integer ≥ 1): **key** |
//! | `context_tokens` | prefix tokens already in KV cache that the new tokens attend to, summed over the forward's chunks (integer ≥ 0; 0 for fresh prompts): **key** | context tokens summed over the batch (integer ≥ 0): **key** |
//! | `time_ms` | measured step time, milliseconds (number > 0) | same |
//!
//! A cell in an ignored column, when not empty, must still be a non-negative integer (a typo
//! is reported rather than silently dropped). Both phases must be present; a key pair may
//! appear only once per phase. Example (`tests::EXAMPLE` is this text):
//!
//! ```text
//! phase,tokens,batch_size,context_tokens,time_ms
//! prefill,512,,0,20
//! prefill,2048,,0,60
//! prefill,8192,,0,240
//! prefill,512,,8192,28
//! prefill,2048,,8192,90
//! prefill,8192,,8192,330
//! decode,,1,4096,8.125
//! decode,,1,65536,9.0625
//! decode,,32,65536,11
//! decode,,32,1048576,26
//! decode,,128,262144,20
//! decode,,128,4194304,80
//! ```
//!
//! # Interpolation
//!
//! Each phase is a surface `time(key, context)` with `key` = `tokens` (prefill) or
//! `batch_size` (decode). Rows with the same key form a *line*: time as a function of context.
//! A query `(k, c)`:
//!
//! 1. finds the two lines whose keys bracket `k` (the one nearest below and nearest above; one
//!    line when `k` is at or beyond an end, two last lines above the largest key);
//! 2. evaluates each of them at `c`, piecewise-linearly along its own context points;
//! 3. interpolates linearly in `k` between the two values.
//!
//! On a full grid this is bilinear interpolation; lines may have different context points (a
//! decode profile naturally measures more context at larger batches). Outside the measured
//! range, on either axis:
//!
//! * **below** the smallest point: **clamped** to the smallest point's value (small steps are
//!   overhead-bound, so time is flat there, and extrapolating could go negative);
//! * **above** the largest point: **extrapolated linearly** from the last two points, with the
//!   slope floored at 0 (time grows about linearly in tokens, batch and context, so clamping
//!   would understate it; a noisy last segment never makes time decrease);
//! * a line or axis with a single point is constant.
//!
//! With data non-decreasing along each axis (and a larger key never faster than a smaller one
//! at the same context), interpolated times are non-decreasing in the key everywhere, and in
//! context everywhere up to the largest key. Above the largest key they can dip along context
//! where the two last lines grow at different rates in context (the key slope then shrinks);
//! measure the batch sizes and prompt lengths you simulate to stay inside.
//!
//! The queries from the simulator: a prefill forward over `chunks = [(new, prefix), ...]` asks
//! `(Σ new, Σ prefix)`; a decode step asks `(batch, context_tokens)`. Times round up to
//! whole nanoseconds.

use std::path::{Path, PathBuf};

use crate::compute::model::StepModel;
use crate::engine::{NS_PER_S, Nanos, ceil_ns, ns_from_secs_ceil};

/// Why a profile could not be loaded. Row-level errors name the file, the 1-based line, the
/// column (by name and 1-based position) and what would be valid.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("{path}: cannot read step-time profile: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The CSV parser rejected the text (e.g. a row with a different number of fields).
    #[error("{path}:{line}: malformed CSV: {message}")]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// The header lacks a required column.
    #[error(
        "{path}:1: missing column `{column}`; the header must name phase, tokens, batch_size, \
         context_tokens and time_ms (found: {found})"
    )]
    MissingColumn {
        path: PathBuf,
        column: &'static str,
        found: String,
    },
    /// `phase` is neither `prefill` nor `decode`.
    #[error(
        "{path}:{line}: column `phase` (column {column}) = {value:?}: expected `prefill` or `decode`"
    )]
    UnknownPhase {
        path: PathBuf,
        line: u64,
        column: usize,
        value: String,
    },
    /// A cell is not the number its column needs.
    #[error("{path}:{line}: column `{name}` (column {column}) = {value:?}: expected {expected}")]
    BadNumber {
        path: PathBuf,
        line: u64,
        name: &'static str,
        column: usize,
        value: String,
        expected: &'static str,
    },
    /// `time_ms` is zero, negative or not finite.
    #[error(
        "{path}:{line}: column `time_ms` (column {column}) = {value:?}: a step time must be a \
         positive number of milliseconds"
    )]
    BadTime {
        path: PathBuf,
        line: u64,
        column: usize,
        value: String,
    },
    /// No row of a phase: the profile must measure both.
    #[error(
        "{path}: no `{phase}` rows; a profile needs at least one prefill and one decode row \
         (phase,tokens,batch_size,context_tokens,time_ms)"
    )]
    MissingPhase { path: PathBuf, phase: &'static str },
    /// The same (key, context) point appears twice in a phase.
    #[error(
        "{path}:{line}: duplicate {phase} point ({key_name} = {key}, context_tokens = {context}), \
         first given on line {first_line}; each point may appear once"
    )]
    Duplicate {
        path: PathBuf,
        line: u64,
        first_line: u64,
        phase: &'static str,
        key_name: &'static str,
        key: u64,
        context: u64,
    },
}

/// One phase's measurements: lines of constant key, each a sorted list of (context, ms).
#[derive(Clone, Debug, PartialEq)]
struct Surface {
    /// (key, [(context, ms)]) sorted by key; every line holds ≥ 1 point, sorted by context,
    /// contexts distinct. Stored as `f64` (exact for integers below 2^53) so that a query
    /// allocates nothing.
    lines: Vec<(f64, Vec<(f64, f64)>)>,
}

/// Piecewise-linear interpolation over points sorted by distinct x: clamped below the first,
/// extrapolated from the last two above the last with the slope floored at 0.
fn interp(points: &[(f64, f64)], x: f64) -> f64 {
    let (x0, y0) = points[0];
    if points.len() == 1 || x <= x0 {
        return y0;
    }
    let i = points.partition_point(|p| p.0 <= x);
    let (a, b) = if i >= points.len() {
        (points[points.len() - 2], points[points.len() - 1])
    } else {
        (points[i - 1], points[i])
    };
    let slope = (b.1 - a.1) / (b.0 - a.0);
    if i >= points.len() {
        b.1 + slope.max(0.0) * (x - b.0)
    } else {
        a.1 + slope * (x - a.0)
    }
}

impl Surface {
    /// Milliseconds at (key, context), by the rules of the module docs.
    fn eval(&self, key: f64, context: f64) -> f64 {
        let at = |i: usize| (self.lines[i].0, interp(&self.lines[i].1, context));
        let n = self.lines.len();
        // Only the bracketing lines matter: the last line at or below `key` and the next.
        let i = self.lines.partition_point(|l| l.0 <= key);
        match (i, n) {
            (_, 1) | (0, _) => at(0).1,
            (i, n) if i >= n => interp(&[at(n - 2), at(n - 1)], key),
            (i, _) => interp(&[at(i - 1), at(i)], key),
        }
    }
}

/// A measured step-time profile: prefill and decode surfaces, interpolated.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredProfile {
    prefill: Surface,
    decode: Surface,
}

/// Parses profile text; `path` only names the source in errors.
pub fn parse_profile(path: &Path, text: &str) -> Result<MeasuredProfile, ProfileError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let csv_err = |e: csv::Error| ProfileError::Csv {
        path: path.to_path_buf(),
        line: e.position().map_or(1, |pos| pos.line()),
        message: e.to_string(),
    };
    let header = reader.headers().map_err(csv_err)?;
    let cols = Columns::find(path, header)?;
    let mut points: [Points; 2] = Default::default();
    for record in reader.records() {
        let record = record.map_err(csv_err)?;
        let row = Row {
            path,
            line: record.position().map_or(0, |pos| pos.line()),
            record: &record,
        };
        let m = row.point(&cols)?;
        add_point(path, &mut points[m.phase], &m, row.line)?;
    }
    let [prefill, decode] = points;
    Ok(MeasuredProfile {
        prefill: surface(path, prefill, PHASES[PREFILL])?,
        decode: surface(path, decode, PHASES[DECODE])?,
    })
}

/// One phase's points while reading: (key, context) → (ms, line). A `BTreeMap` gives the
/// sorted lines of a [`Surface`] directly, and the line names the first of two duplicates.
type Points = std::collections::BTreeMap<(u64, u64), (f64, u64)>;

/// The phases' names as the `phase` column spells them, indexed by [`PREFILL`] and [`DECODE`].
const PHASES: [&str; 2] = ["prefill", "decode"];
/// Index of the prefill phase in [`PHASES`].
const PREFILL: usize = 0;
/// Index of the decode phase in [`PHASES`].
const DECODE: usize = 1;

/// Where the five columns of a profile are (found by name: order is free).
struct Columns {
    phase: usize,
    tokens: usize,
    batch_size: usize,
    context_tokens: usize,
    time_ms: usize,
}

impl Columns {
    /// The header's columns (a UTF-8 byte-order mark before the first is ignored); every one
    /// is required.
    fn find(path: &Path, header: &csv::StringRecord) -> Result<Self, ProfileError> {
        const COLUMNS: [&str; 5] = ["phase", "tokens", "batch_size", "context_tokens", "time_ms"];
        let mut idx = [0usize; 5];
        for (slot, name) in idx.iter_mut().zip(COLUMNS) {
            *slot = header
                .iter()
                .position(|h| h.trim_start_matches('\u{feff}') == name)
                .ok_or_else(|| ProfileError::MissingColumn {
                    path: path.to_path_buf(),
                    column: name,
                    found: header.iter().collect::<Vec<_>>().join(","),
                })?;
        }
        let [phase, tokens, batch_size, context_tokens, time_ms] = idx;
        Ok(Self {
            phase,
            tokens,
            batch_size,
            context_tokens,
            time_ms,
        })
    }
}

/// One measured step, checked: its phase (an index into [`PHASES`]), key and context, and
/// the time.
struct Measured {
    phase: usize,
    key_name: &'static str,
    key: u64,
    context: u64,
    ms: f64,
}

/// One record of a profile with the file and line its errors name.
struct Row<'r> {
    path: &'r Path,
    line: u64,
    record: &'r csv::StringRecord,
}

impl Row<'_> {
    /// The cell of column `i` (empty when the row is short).
    fn cell(&self, i: usize) -> &str {
        self.record.get(i).unwrap_or("")
    }

    /// The integer ≥ `min` in column `i`, or `None` for an empty cell when `optional`.
    fn int(
        &self,
        i: usize,
        name: &'static str,
        min: u64,
        optional: bool,
    ) -> Result<Option<u64>, ProfileError> {
        let v = self.cell(i);
        if optional && v.is_empty() {
            return Ok(None);
        }
        match v.parse::<u64>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(ProfileError::BadNumber {
                path: self.path.to_path_buf(),
                line: self.line,
                name,
                column: i + 1,
                value: v.to_string(),
                expected: match (min, optional) {
                    (0, true) => "empty, or an integer ≥ 0 (this phase ignores it)",
                    (0, false) => "an integer ≥ 0",
                    _ => "an integer ≥ 1",
                },
            }),
        }
    }

    /// The step time in column `i`: a positive finite number of milliseconds (a number that
    /// is not positive is a [`ProfileError::BadTime`], text that is no number a `BadNumber`).
    fn time_ms(&self, i: usize) -> Result<f64, ProfileError> {
        let text = self.cell(i);
        match text.parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
            Ok(_) => Err(ProfileError::BadTime {
                path: self.path.to_path_buf(),
                line: self.line,
                column: i + 1,
                value: text.to_string(),
            }),
            Err(_) => Err(ProfileError::BadNumber {
                path: self.path.to_path_buf(),
                line: self.line,
                name: "time_ms",
                column: i + 1,
                value: text.to_string(),
                expected: "a positive number of milliseconds, e.g. 12.5",
            }),
        }
    }

    /// The row checked cell by cell, the first bad cell reported: the phase, its key
    /// (`tokens` for a prefill, `batch_size` for a decode), the column the phase ignores
    /// (which must still be empty or an integer, so a typo is not dropped), the context and
    /// the time.
    fn point(&self, c: &Columns) -> Result<Measured, ProfileError> {
        let (phase, key_col, key_name, other_col, other_name) = match self.cell(c.phase) {
            "prefill" => (PREFILL, c.tokens, "tokens", c.batch_size, "batch_size"),
            "decode" => (DECODE, c.batch_size, "batch_size", c.tokens, "tokens"),
            other => {
                return Err(ProfileError::UnknownPhase {
                    path: self.path.to_path_buf(),
                    line: self.line,
                    column: c.phase + 1,
                    value: other.to_string(),
                });
            }
        };
        let key = self.int(key_col, key_name, 1, false)?.expect("required");
        self.int(other_col, other_name, 0, true)?;
        let context = self
            .int(c.context_tokens, "context_tokens", 0, false)?
            .expect("required");
        let ms = self.time_ms(c.time_ms)?;
        Ok(Measured {
            phase,
            key_name,
            key,
            context,
            ms,
        })
    }
}

/// Adds a measured step (from `line`) to its phase's points; a (key, context) pair given twice
/// is an error naming both lines.
fn add_point(
    path: &Path,
    points: &mut Points,
    m: &Measured,
    line: u64,
) -> Result<(), ProfileError> {
    if let Some(&(_, first_line)) = points.get(&(m.key, m.context)) {
        return Err(ProfileError::Duplicate {
            path: path.to_path_buf(),
            line,
            first_line,
            phase: PHASES[m.phase],
            key_name: m.key_name,
            key: m.key,
            context: m.context,
        });
    }
    points.insert((m.key, m.context), (m.ms, line));
    Ok(())
}

/// One phase's points as a [`Surface`]: consecutive points of one key (the map is sorted by
/// key, then context) form a line. A phase with no point is an error: a profile measures both.
fn surface(path: &Path, points: Points, phase: &'static str) -> Result<Surface, ProfileError> {
    if points.is_empty() {
        return Err(ProfileError::MissingPhase {
            path: path.to_path_buf(),
            phase,
        });
    }
    let mut lines: Vec<(f64, Vec<(f64, f64)>)> = Vec::new();
    for ((key, context), (ms, _)) in points {
        let (key, context) = (key as f64, context as f64);
        match lines.last_mut() {
            Some((k, pts)) if *k == key => pts.push((context, ms)),
            _ => lines.push((key, vec![(context, ms)])),
        }
    }
    Ok(Surface { lines })
}

impl MeasuredProfile {
    /// One prefill forward over `chunks`, each `(new_tokens, prefix_tokens)`: the profile at
    /// (Σ new, Σ prefix). Nanoseconds, rounded up; 0 when there are no new tokens.
    pub fn prefill_ns(&self, chunks: &[(u32, u32)]) -> Nanos {
        let (mut tokens, mut prefix) = (0u64, 0u64);
        for &(n, p) in chunks.iter().filter(|c| c.0 > 0) {
            tokens += u64::from(n);
            prefix += u64::from(p);
        }
        if tokens == 0 {
            return 0;
        }
        ns_from_secs_ceil(self.prefill.eval(tokens as f64, prefix as f64) / 1e3)
    }

    /// One decode step of `batch` sequences whose contexts sum to `context_tokens`: the
    /// profile at (batch, context_tokens). Nanoseconds, rounded up; 0 for an empty batch.
    pub fn decode_ns(&self, batch: u32, context_tokens: u64) -> Nanos {
        if batch == 0 {
            return 0;
        }
        ns_from_secs_ceil(self.decode.eval(f64::from(batch), context_tokens as f64) / 1e3)
    }
}

/// Per-batch-size terms of the calibrated decode step, filled lazily by
/// [`StepTimes::decode_ns_cached`]; one per decode server (index: batch size).
#[derive(Clone, Debug, Default)]
pub struct DecodeCache {
    /// The batch's terms, and whether they allow the plain evaluation
    /// ([`StepModel::decode_plain_ok`]).
    terms: Vec<Option<(crate::compute::model::DecodeTerms, bool)>>,
}

/// One batch size's decode step, from [`StepTimes::decode_step`].
#[derive(Clone, Copy, Debug)]
pub enum DecodeStep<'a> {
    /// The calibrated model with the batch's cached terms, and whether they allow the plain
    /// evaluation ([`StepModel::decode_plain_ok`]).
    Model(&'a StepModel, &'a crate::compute::model::DecodeTerms, bool),
    /// A measured profile and the batch size.
    Measured(&'a MeasuredProfile, u32),
}

impl DecodeStep<'_> {
    /// [`StepTimes::decode_ns`] of this batch over `context_tokens`, bit for bit, ns.
    #[inline(always)]
    pub fn ns(&self, context_tokens: u64) -> Nanos {
        match self {
            // Plain terms give a finite, non-negative duration: nothing to check.
            Self::Model(m, t, true) => {
                ceil_ns(m.decode_s_plain(t, context_tokens) * NS_PER_S as f64)
            }
            _ => self.ns_checked(context_tokens),
        }
    }

    /// Whether the step never shortens as its context grows: plain terms (every operation of
    /// [`StepModel::decode_s_plain`] is non-decreasing in the context, and so is the ceiling
    /// to ns). A measured profile interpolates rows that need not rise.
    #[inline(always)]
    pub fn rises(&self) -> bool {
        matches!(self, Self::Model(_, _, true))
    }

    /// The durations of the steps after one at context `ctx`, the context growing by
    /// `per_step` tokens a step: [`DecodeStep::ns`] of `ctx + per_step`, `ctx + 2·per_step`, …,
    /// written to `out` in order, one step a slot (a run's plan reuses its buffer). Returns
    /// their sum, ns (saturating). The plain model steps its context in `f64` (exact below 2^53 tokens) instead
    /// of converting it at every step, with the batch's terms held by value
    /// ([`crate::compute::model::PlainStep`]) below 2^52 ns a step. Inlined into the one hot
    /// caller (a run's plan), where a call costs as much as a short run's planning.
    #[inline(always)]
    pub fn fill_run(&self, ctx: u64, per_step: u64, out: &mut [Nanos]) -> Nanos {
        if let Self::Model(m, t, true) = self
            && let Some(sum) = m.plain_step(t).fill_run(ctx, per_step, out)
        {
            return sum;
        }
        let n = out.len() as u64;
        let mut sum: Nanos = 0;
        let exact = per_step
            .checked_mul(n)
            .and_then(|g| g.checked_add(ctx))
            .is_some_and(|last| last < 1 << 53);
        match self {
            Self::Model(m, t, true) if exact => {
                let (mut c, step) = (ctx as f64, per_step as f64);
                for slot in out {
                    c += step;
                    let dt = ceil_ns(m.decode_s_plain_f(t, c) * NS_PER_S as f64);
                    sum = sum.saturating_add(dt);
                    *slot = dt;
                }
            }
            _ => {
                let mut c = ctx;
                for slot in out {
                    c += per_step;
                    let dt = self.ns(c);
                    sum = sum.saturating_add(dt);
                    *slot = dt;
                }
            }
        }
        sum
    }

    /// [`DecodeStep::ns`] off the plain path.
    #[inline(never)]
    fn ns_checked(&self, context_tokens: u64) -> Nanos {
        match self {
            Self::Model(m, t, _) => ns_from_secs_ceil(m.decode_s_with(t, context_tokens)),
            Self::Measured(p, batch) => p.decode_ns(*batch, context_tokens),
        }
    }
}

/// Where an instance's step times come from: the calibrated model or a measured profile.
#[derive(Clone, Debug)]
// One per instance, never moved in a hot path: boxing the model would only add an indirection
// to every step-time query.
#[allow(clippy::large_enum_variant)]
pub enum StepTimes {
    /// The roofline model of [`crate::compute::model`].
    Model(StepModel),
    /// A user's measurements, interpolated.
    Measured(MeasuredProfile),
}

impl StepTimes {
    /// What the kernel tables could not price for this model
    /// ([`StepModel::kernel_fallbacks`]; none for a measured profile).
    pub fn kernel_fallbacks(&self) -> &[String] {
        match self {
            Self::Model(m) => m.kernel_fallbacks(),
            Self::Measured(_) => &[],
        }
    }

    /// One prefill forward over `chunks`, each `(new_tokens, prefix_tokens)`, nanoseconds.
    pub fn prefill_ns(&self, chunks: &[(u32, u32)]) -> Nanos {
        match self {
            Self::Model(m) => m.prefill_ns(chunks),
            Self::Measured(p) => p.prefill_ns(chunks),
        }
    }

    /// The host part of a prefill forward over `seqs` sequences, ns
    /// ([`StepModel::prefill_host_ns`]); 0 for a measured profile, whose times do not
    /// separate it.
    pub fn prefill_host_ns(&self, seqs: u32) -> Nanos {
        match self {
            Self::Model(m) => m.prefill_host_ns(seqs),
            Self::Measured(_) => 0,
        }
    }

    /// The routed-expert part of a forward over `tokens` tokens (`prefill` when it computes
    /// prompt tokens): the roofline model's, `None` for a measured profile (its times already
    /// contain whatever communication the measured deployment did). `context_tokens`: the
    /// decode sequences' contexts summed (a pipelined decode forward's attention is inside
    /// its MoE layers, [`StepModel::moe_time_at`]).
    pub fn moe_time(
        &self,
        tokens: u64,
        prefill: bool,
        context_tokens: u64,
    ) -> Option<crate::compute::moe::MoeTime> {
        match self {
            Self::Model(m) => m.moe_time_at(tokens as f64, prefill, context_tokens),
            Self::Measured(_) => None,
        }
    }

    /// One decode step of `batch` sequences with `context_tokens` in total, nanoseconds.
    pub fn decode_ns(&self, batch: u32, context_tokens: u64) -> Nanos {
        match self {
            Self::Model(m) => m.decode_ns(batch, context_tokens),
            Self::Measured(p) => p.decode_ns(batch, context_tokens),
        }
    }

    /// [`StepTimes::decode_ns`] through `cache`, which keeps the batch-size terms of the
    /// calibrated model per batch size (filled on first use): the same nanoseconds, bit for
    /// bit, without recomputing what only the batch decides at every step.
    pub fn decode_ns_cached(
        &self,
        cache: &mut DecodeCache,
        batch: u32,
        context_tokens: u64,
    ) -> Nanos {
        self.decode_step(cache, batch).ns(context_tokens)
    }

    /// The decode step of `batch` sequences at any context ([`DecodeStep::ns`]), its
    /// batch-size terms taken from `cache` once: a coalesced run's steps share one batch.
    pub fn decode_step<'a>(&'a self, cache: &'a mut DecodeCache, batch: u32) -> DecodeStep<'a> {
        match self {
            Self::Model(m) => {
                let i = batch as usize;
                if i >= cache.terms.len() {
                    cache.terms.resize(i + 1, None);
                }
                let (t, plain) = cache.terms[i].get_or_insert_with(|| {
                    let t = m.decode_terms(batch);
                    (t, m.decode_plain_ok(&t))
                });
                DecodeStep::Model(m, t, *plain)
            }
            Self::Measured(p) => DecodeStep::Measured(p, batch),
        }
    }

    /// One mixed forward of a colocated server: prefill `chunks` and `batch` decode sequences
    /// with `context_tokens` in total, nanoseconds. A measured profile has no mixed rows, so
    /// there the decode sequences enter as one chunk of `batch` tokens over their mean context
    /// (it adds a `batch²/2` attention term, small beside the contexts).
    pub fn mixed_ns(&self, chunks: &[(u32, u32)], batch: u32, context_tokens: u64) -> Nanos {
        match self {
            Self::Model(m) => m.mixed_ns(chunks, batch, context_tokens),
            Self::Measured(p) => {
                let mut all = chunks.to_vec();
                if batch > 0 {
                    let mean = context_tokens / u64::from(batch);
                    all.push((batch, u32::try_from(mean).unwrap_or(u32::MAX)));
                }
                p.prefill_ns(&all)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads and parses a profile file, as the scenario layer does.
    fn load_profile(path: &Path) -> Result<MeasuredProfile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        parse_profile(path, &text)
    }
    use crate::compute::model::{ComputeParams, StepModel};
    use crate::spec::{gpu_preset, preset};

    /// The example of the module docs (a test below keeps the two identical). Prefill:
    /// 20/60/240 ms at 512/2048/8192 tokens, more with 8192 prefix tokens; decode:
    /// `8 + batch/16 + context/65536` ms, each batch measured over its own context range.
    const EXAMPLE: &str = "\
phase,tokens,batch_size,context_tokens,time_ms
prefill,512,,0,20
prefill,2048,,0,60
prefill,8192,,0,240
prefill,512,,8192,28
prefill,2048,,8192,90
prefill,8192,,8192,330
decode,,1,4096,8.125
decode,,1,65536,9.0625
decode,,32,65536,11
decode,,32,1048576,26
decode,,128,262144,20
decode,,128,4194304,80
";

    fn example() -> MeasuredProfile {
        parse_profile(Path::new("example.csv"), EXAMPLE).unwrap()
    }

    fn ms(ns: Nanos) -> f64 {
        ns as f64 / 1e6
    }

    #[test]
    fn the_docs_show_the_fixture() {
        let docs: String = include_str!("profile.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//! "))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            docs.contains(EXAMPLE.trim_end()),
            "module docs and EXAMPLE differ"
        );
    }

    #[test]
    fn exact_at_every_measured_point() {
        let p = example();
        for line in EXAMPLE.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let want = ns_from_secs_ceil(f[4].parse::<f64>().unwrap() / 1e3);
            let got = match f[0] {
                "prefill" => p.prefill_ns(&[(f[1].parse().unwrap(), f[3].parse().unwrap())]),
                _ => p.decode_ns(f[2].parse().unwrap(), f[3].parse().unwrap()),
            };
            assert_eq!(got, want, "{line}");
        }
    }

    #[test]
    fn linear_between_points_on_each_axis_and_bilinear_inside_a_cell() {
        let p = example();
        // Tokens halfway from 512 to 2048 at context 0: halfway from 20 to 60 ms.
        assert_eq!(ms(p.prefill_ns(&[(1280, 0)])), 40.0);
        // Context halfway at 512 tokens: halfway from 20 to 28.
        assert_eq!(ms(p.prefill_ns(&[(512, 4096)])), 24.0);
        // Cell centre: the mean of the four corners.
        assert_eq!(
            ms(p.prefill_ns(&[(1280, 4096)])),
            (20.0 + 60.0 + 28.0 + 90.0) / 4.0
        );
        // Chunks add up: two chunks of 640 new tokens after 2048 prefix tokens each.
        assert_eq!(
            p.prefill_ns(&[(640, 2048), (640, 2048)]),
            p.prefill_ns(&[(1280, 4096)])
        );
        // Decode lines with their own context ranges: batch 1 at 32768 is on its segment
        // (8.125 → 9.0625); batch 32 at 32768 is below its range, so clamped to 11; batch 16
        // is 15/31 of the way from the first to the second.
        let b1 = 8.125 + (9.0625 - 8.125) * (32768.0 - 4096.0) / (65536.0 - 4096.0);
        assert!((ms(p.decode_ns(1, 32768)) - b1).abs() < 1e-6);
        assert_eq!(ms(p.decode_ns(32, 32768)), 11.0);
        let b16 = b1 + (11.0 - b1) * 15.0 / 31.0;
        assert!((ms(p.decode_ns(16, 32768)) - b16).abs() < 1e-6);
    }

    #[test]
    fn clamped_below_and_extrapolated_above() {
        let p = example();
        // Below the smallest tokens and context: the smallest point's value.
        assert_eq!(ms(p.prefill_ns(&[(100, 0)])), 20.0);
        assert_eq!(ms(p.decode_ns(1, 10)), 8.125);
        // Above the largest tokens: the last segment's slope (180 ms per 6144 tokens).
        assert_eq!(ms(p.prefill_ns(&[(14336, 0)])), 240.0 + 180.0);
        // Above the largest batch and context: the last segments' slopes on both axes.
        let want = 80.0 + (8_388_608.0 - 4_194_304.0) / 65536.0;
        assert!((ms(p.decode_ns(128, 8_388_608)) - want).abs() < 1e-6);
        assert!(p.decode_ns(256, 4_194_304) > p.decode_ns(128, 4_194_304));
        // A falling last segment (noise) is extended flat, never downwards.
        let noisy = "phase,tokens,batch_size,context_tokens,time_ms\n\
                     prefill,100,,0,10\nprefill,200,,0,9\ndecode,,1,0,5\n";
        let q = parse_profile(Path::new("noisy.csv"), noisy).unwrap();
        assert_eq!(ms(q.prefill_ns(&[(400, 0)])), 9.0);
        // A single point is constant everywhere.
        assert_eq!(ms(q.decode_ns(64, 1_000_000)), 5.0);
        assert_eq!(q.decode_ns(0, 0), 0);
        assert_eq!(q.prefill_ns(&[]), 0);
    }

    #[test]
    fn monotone_data_interpolates_monotonically() {
        let p = example();
        let tokens: Vec<u32> = (0..60).map(|i| 64 + i * 300).collect();
        let contexts: Vec<u32> = (0..40).map(|i| i * 500).collect();
        for &c in &contexts {
            let row: Vec<Nanos> = tokens.iter().map(|&t| p.prefill_ns(&[(t, c)])).collect();
            assert!(row.windows(2).all(|w| w[0] <= w[1]), "prefill, context {c}");
        }
        // Along context: up to the largest key (8192 tokens, batch 128); see the module docs.
        for &t in tokens.iter().filter(|&&t| t <= 8192) {
            let col: Vec<Nanos> = contexts.iter().map(|&c| p.prefill_ns(&[(t, c)])).collect();
            assert!(col.windows(2).all(|w| w[0] <= w[1]), "prefill, tokens {t}");
        }
        let batches: Vec<u32> = (1..=300).step_by(7).collect();
        let ctxs: Vec<u64> = (0..50).map(|i| i * 200_000).collect();
        for &c in &ctxs {
            let row: Vec<Nanos> = batches.iter().map(|&b| p.decode_ns(b, c)).collect();
            assert!(row.windows(2).all(|w| w[0] <= w[1]), "decode, context {c}");
        }
        for &b in batches.iter().filter(|&&b| b <= 128) {
            let col: Vec<Nanos> = ctxs.iter().map(|&c| p.decode_ns(b, c)).collect();
            assert!(col.windows(2).all(|w| w[0] <= w[1]), "decode, batch {b}");
        }
    }

    #[test]
    fn loads_from_a_file_with_columns_in_any_order_and_extra_columns() {
        let text = "time_ms , note, context_tokens,phase,batch_size,tokens\r\n\
                    20,a,0,prefill,,512\r\n7,b,100,decode,3,\r\n";
        let path = std::env::temp_dir().join(format!("pdsim-profile-{}.csv", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let p = load_profile(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(ms(p.prefill_ns(&[(512, 0)])), 20.0);
        assert_eq!(ms(p.decode_ns(3, 100)), 7.0);
    }

    /// Parses `rows` under the standard header and returns the error message.
    fn error(rows: &str) -> String {
        let text = format!("phase,tokens,batch_size,context_tokens,time_ms\n{rows}");
        parse_profile(Path::new("prof.csv"), &text)
            .unwrap_err()
            .to_string()
    }

    const OK_ROWS: &str = "prefill,512,,0,20\ndecode,,1,100,8\n";

    #[test]
    fn every_bad_input_is_an_error_naming_file_line_column_and_what_is_valid() {
        let cases: Vec<(String, &str)> = vec![
            (
                error(&format!("{OK_ROWS}prefil,512,,0,20\n")),
                "prof.csv:4: column `phase` (column 1) = \"prefil\": expected `prefill` or `decode`",
            ),
            (
                error(&format!("{OK_ROWS}prefill,5k,,0,20\n")),
                "prof.csv:4: column `tokens` (column 2) = \"5k\": expected an integer ≥ 1",
            ),
            (
                error(&format!("{OK_ROWS}decode,,0,0,20\n")),
                "prof.csv:4: column `batch_size` (column 3) = \"0\": expected an integer ≥ 1",
            ),
            (
                error(&format!("{OK_ROWS}decode,,2,-5,20\n")),
                "prof.csv:4: column `context_tokens` (column 4) = \"-5\": expected an integer ≥ 0",
            ),
            (
                error(&format!("{OK_ROWS}decode,x,2,5,20\n")),
                "prof.csv:4: column `tokens` (column 2) = \"x\": expected empty, or an integer ≥ 0 \
                 (this phase ignores it)",
            ),
            (
                error(&format!("{OK_ROWS}decode,,2,5,fast\n")),
                "prof.csv:4: column `time_ms` (column 5) = \"fast\": expected a positive number of \
                 milliseconds, e.g. 12.5",
            ),
            (
                error(&format!("{OK_ROWS}decode,,2,5,-1.5\n")),
                "prof.csv:4: column `time_ms` (column 5) = \"-1.5\": a step time must be a positive \
                 number of milliseconds",
            ),
            (
                error(&format!("{OK_ROWS}decode,,2,5,0\n")),
                "prof.csv:4: column `time_ms` (column 5) = \"0\": a step time must be a positive \
                 number of milliseconds",
            ),
            (
                error("prefill,512,,0,20\n"),
                "prof.csv: no `decode` rows; a profile needs at least one prefill and one decode \
                 row (phase,tokens,batch_size,context_tokens,time_ms)",
            ),
            (error("decode,,1,0,20\n"), "prof.csv: no `prefill` rows"),
            (
                error(&format!("{OK_ROWS}prefill,512,,0,21\n")),
                "prof.csv:4: duplicate prefill point (tokens = 512, context_tokens = 0), first \
                 given on line 2; each point may appear once",
            ),
            (
                error(&format!("{OK_ROWS}decode,,2,5\n")),
                "prof.csv:4: malformed CSV",
            ),
            (
                parse_profile(
                    Path::new("prof.csv"),
                    "phase,tokens,batch,context_tokens,time_ms\n",
                )
                .unwrap_err()
                .to_string(),
                "prof.csv:1: missing column `batch_size`; the header must name phase, tokens, \
                 batch_size, context_tokens and time_ms (found: phase,tokens,batch,context_tokens,time_ms)",
            ),
            (
                load_profile(Path::new("/nonexistent/prof.csv"))
                    .unwrap_err()
                    .to_string(),
                "/nonexistent/prof.csv: cannot read step-time profile",
            ),
        ];
        for (got, want) in cases {
            assert!(got.starts_with(want), "got:  {got}\nwant: {want}");
        }
    }

    #[test]
    fn step_times_dispatch_to_model_or_profile() {
        let gpu = gpu_preset("h100-sxm").unwrap();
        let model = StepModel::new(
            &gpu,
            &preset("llama-3.1-8b").unwrap(),
            1,
            2,
            ComputeParams::default(),
        );
        let m = StepTimes::Model(model.clone());
        assert_eq!(m.prefill_ns(&[(1000, 10)]), model.prefill_ns(&[(1000, 10)]));
        assert_eq!(m.decode_ns(8, 8000), model.decode_ns(8, 8000));
        let p = StepTimes::Measured(example());
        assert_eq!(ms(p.prefill_ns(&[(512, 0)])), 20.0);
        assert_eq!(ms(p.decode_ns(32, 65536)), 11.0);
    }
}
