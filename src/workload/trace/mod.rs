//! Request traces: readers for the public trace formats, and the statistics
//! printed by `pdsim trace stats FILE`.
//!
//! # Formats
//!
//! | [`TraceFormat`] | file | arrival column | input / output columns | prefix ids |
//! |---|---|---|---|---|
//! | `Mooncake` | JSON lines, one object per line | `timestamp`: ms from trace start | `input_length` / `output_length` | `hash_ids` (required) |
//! | `Azure` | CSV, header `TIMESTAMP,ContextTokens,GeneratedTokens` | `TIMESTAMP`: `YYYY-MM-DD HH:MM:SS[.fffffffff]` | `ContextTokens` / `GeneratedTokens` | none |
//! | `Vidur` | CSV, header `arrived_at,num_prefill_tokens,num_decode_tokens` | `arrived_at`: s from the first request | `num_prefill_tokens` / `num_decode_tokens` | none |
//! | `Csv` | CSV, header `arrival_s,input_tokens,output_tokens[,hash_ids]` | `arrival_s`: s from trace start | `input_tokens` / `output_tokens` | `hash_ids` (optional) |
//!
//! **The pdsim generic CSV (`Csv`)** is this project's own format:
//!
//! ```text
//! arrival_s,input_tokens,output_tokens,hash_ids
//! 0.0,1030,20,0 1 2
//! 0.25,300,7,0
//! 1.5,700,12,
//! ```
//!
//! * `arrival_s`: arrival time in seconds from the trace start, a decimal number ≥ 0
//!   (`1.5`, `2`, `1e-3`); rounded to the nearest nanosecond.
//! * `input_tokens`, `output_tokens`: decimal integers ≥ 1.
//! * `hash_ids` (optional column): space-separated non-negative integers, the ids of the
//!   prompt's [`HASH_BLOCK_TOKENS`]-token blocks, prefix-chained as in Mooncake (equal id ⇒
//!   equal prompt prefix through that block). A non-empty cell must hold exactly
//!   `ceil(input_tokens / 512)` ids; an empty cell means "no prefix information".
//!
//! In every CSV format the columns are found by header name (order is free, extra columns
//! are ignored, fields are trimmed, a UTF-8 BOM and CRLF line ends are accepted). In JSON
//! lines, each line must be an object; extra keys are ignored, and a BOM, CRLF line ends and
//! whitespace-only lines are accepted (line numbers in errors still count blank lines).
//!
//! The lengths-only CSV `arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv` (header
//! `num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio`) has no arrival times:
//! only [`read_lengths`] accepts it.
//!
//! # Validation
//!
//! Nothing is dropped or repaired silently: every malformed row is a [`TraceError`] naming the
//! file, the 1-based line, the column or key, the bad value and what would be valid.
//! * `input_tokens` and `output_tokens` must be integers in `1..=u32::MAX` (a request with
//!   an empty prompt or that generates nothing is not something the simulator can serve).
//! * Arrival times must be ≥ 0 and non-decreasing from row to row (equal times are fine:
//!   the Mooncake conversation trace is quantized to ~3 s steps).
//! * Azure `TIMESTAMP`s are civil date-times without a zone (no leap seconds), converted
//!   exactly (whole days via days-from-civil, so midnight, month and year rollovers are
//!   right) and re-based so the first row arrives at 0 ns. 0–9 fractional digits are
//!   accepted; the files have 7 (100 ns units).
//! * Mooncake `hash_ids` must have `ceil(input_length / 512)` entries (true on every row of
//!   the published traces).
//! * A file with no data rows is an error.
//!
//! # Statistics
//!
//! [`trace_stats`] is exact: lengths are sorted, and percentiles use linear interpolation
//! between closest ranks (Hyndman & Fan type 7, numpy's default, R's default): for `n` sorted
//! values `x[0..n]` and `q ∈ [0, 1]`, `h = (n − 1)·q`, `p(q) = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`.
//! So the median of an even count is the mean of the middle two. With this definition
//! the published Mooncake, Splitwise and Vidur figures are reproduced (see the tests).

use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Tokens per prefix block behind `hash_ids` (Mooncake's block size).
pub const HASH_BLOCK_TOKENS: u32 = 512;

/// A request-trace file format. Serialized as `mooncake`, `azure`, `vidur`, `csv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Mooncake JSON lines (`timestamp` ms, `input_length`, `output_length`, `hash_ids`).
    Mooncake,
    /// Azure LLM inference 2023 CSV (`TIMESTAMP`, `ContextTokens`, `GeneratedTokens`).
    Azure,
    /// Vidur processed-trace CSV (`arrived_at` s, `num_prefill_tokens`, `num_decode_tokens`).
    Vidur,
    /// The pdsim generic CSV (`arrival_s`, `input_tokens`, `output_tokens`, optional `hash_ids`).
    Csv,
}

impl TraceFormat {
    /// Every format, in declaration order.
    pub const ALL: [TraceFormat; 4] = [Self::Mooncake, Self::Azure, Self::Vidur, Self::Csv];

    /// The lower-case name used by serde, the CLI and [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::Azure => "azure",
            Self::Vidur => "vidur",
            Self::Csv => "csv",
        }
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TraceFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                format!("unknown trace format `{s}`: expected mooncake, azure, vidur or csv")
            })
    }
}

/// One request of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRow {
    /// Arrival time in ns from the trace start. Azure: the first row is 0 (absolute
    /// timestamps are re-based). Mooncake (`timestamp` ms × 1e6), Vidur and pdsim CSV
    /// (seconds × 1e9): kept as given, rounded to the nearest ns; these are already
    /// relative to the start.
    pub arrival_ns: u64,
    /// Prompt length in tokens (≥ 1).
    pub input_tokens: u32,
    /// Generated length in tokens (≥ 1).
    pub output_tokens: u32,
    /// Prefix-chained ids of the prompt's 512-token blocks (`ceil(input_tokens / 512)` of
    /// them), or empty when the format has no prefix information.
    pub hash_ids: Vec<u64>,
}

/// Why a trace could not be read. Every variant names the file; row-level variants name
/// the 1-based line and the column (CSV) or key (JSON). `Display` is a one-line message
/// `FILE:LINE: ...` meant for a CLI user.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{path}: cannot read trace file: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file holds no data rows. `line` is where the first row was expected.
    #[error("{path}:{line}: no rows: {detail}; a trace needs at least one request")]
    Empty {
        path: PathBuf,
        line: u64,
        detail: &'static str,
    },
    /// A required CSV column (in the header, or in a short row) or JSON key is absent.
    #[error("{path}:{line}: `{field}` is missing ({detail})")]
    MissingField {
        path: PathBuf,
        line: u64,
        field: &'static str,
        detail: String,
    },
    /// A field is present but its value is not valid.
    #[error("{path}:{line}: invalid `{field}` = {value}: expected {expected}")]
    BadValue {
        path: PathBuf,
        line: u64,
        field: &'static str,
        /// The offending text, quoted and shortened for display.
        value: String,
        expected: String,
    },
    /// An arrival time earlier than the previous row's.
    #[error(
        "{path}:{line}: `{field}` = {value} goes backwards, {behind} before the row on line \
         {previous_line}: rows must be in non-decreasing arrival order"
    )]
    Backwards {
        path: PathBuf,
        line: u64,
        field: &'static str,
        value: String,
        /// How far back, e.g. `0.500000000 s`.
        behind: String,
        previous_line: u64,
    },
    /// `hash_ids` has the wrong number of 512-token block ids for the prompt length.
    #[error(
        "{path}:{line}: `hash_ids` has {got} ids but `{input_field}` = {input_tokens} needs \
         ceil({input_tokens}/512) = {expected}"
    )]
    HashIdsLength {
        path: PathBuf,
        line: u64,
        input_field: &'static str,
        input_tokens: u32,
        got: usize,
        expected: u64,
    },
    /// A JSON-lines row that is not valid JSON or not an object (the key, if any, is unknown).
    #[error("{path}:{line}: bad JSON at column {column}: {message}")]
    Json {
        path: PathBuf,
        line: u64,
        column: usize,
        message: String,
    },
    /// A CSV syntax error reported by the CSV parser.
    #[error("{path}:{line}: malformed CSV: {message}")]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },
    /// [`detect_format`] / [`read_lengths`] did not recognise the file.
    #[error("{path}:1: unknown trace format, first line is {header}: {hint}")]
    UnknownFormat {
        path: PathBuf,
        header: String,
        hint: &'static str,
    },
}

/// Read a whole trace. Rows come back in file order; see the module docs for what is
/// accepted and for the errors.
pub fn read_trace(path: &Path, format: TraceFormat) -> Result<Vec<TraceRow>, TraceError> {
    let data = read_file(path)?;
    match format {
        TraceFormat::Mooncake => parse_mooncake(path, &data),
        TraceFormat::Azure | TraceFormat::Vidur | TraceFormat::Csv => {
            parse_csv_trace(path, &data, format)
        }
    }
}

/// Guess the format: extension `.jsonl` / `.ndjson` / `.json`, or a first non-blank line
/// starting with `{`, means Mooncake; otherwise the CSV header decides by its arrival
/// column (`TIMESTAMP` → Azure, `arrived_at` → Vidur, `arrival_s` → pdsim CSV). Only the
/// first line is read; [`read_trace`] checks the rest. The error names the file and shows
/// the header it did not recognise.
pub fn detect_format(path: &Path) -> Result<TraceFormat, TraceError> {
    match sniff(path)? {
        Sniffed::Trace(format) => Ok(format),
        Sniffed::LengthsOnly(header) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            header,
            hint: "this is a lengths-only file without arrival times: \
                   use it for length sampling (read_lengths), not as a trace",
        }),
        Sniffed::Unknown(header) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            header,
            hint: UNKNOWN_HINT,
        }),
    }
}

/// `(input_tokens, output_tokens)` of every row, for empirical length sampling. Accepts any
/// trace format (detected as by [`detect_format`]) and the Vidur lengths-only CSV (header
/// `num_prefill_tokens,num_decode_tokens[,num_total_tokens,...]`, without `arrived_at`);
/// there `num_total_tokens`, if present, must equal the sum of the two lengths.
pub fn read_lengths(path: &Path) -> Result<Vec<(u32, u32)>, TraceError> {
    match sniff(path)? {
        Sniffed::Trace(format) => Ok(read_trace(path, format)?
            .into_iter()
            .map(|r| (r.input_tokens, r.output_tokens))
            .collect()),
        Sniffed::LengthsOnly(_) => parse_lengths_csv(path, &read_file(path)?),
        Sniffed::Unknown(header) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            header,
            hint: "expected a trace (.jsonl, or a CSV with a `TIMESTAMP`, \
                   `arrived_at` or `arrival_s` column) or a lengths-only CSV with \
                   `num_prefill_tokens,num_decode_tokens`",
        }),
    }
}

/// Summary of a trace, as printed by `pdsim trace stats`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceStats {
    /// Number of requests.
    pub rows: u64,
    /// Last arrival minus first arrival, in seconds.
    pub span_s: f64,
    /// Mean arrival rate in requests per second, `(rows − 1) / span_s` (= 1 / mean
    /// inter-arrival gap); NaN when the span is 0.
    pub mean_rate_per_s: f64,
    /// Prompt lengths, in tokens.
    pub input: LengthStats,
    /// Generated lengths, in tokens.
    pub output: LengthStats,
}

/// Distribution of a token length, in tokens. Percentiles are type 7 (see the module docs);
/// all fields but `max` are NaN for an empty input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LengthStats {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: u32,
}

impl LengthStats {
    /// Statistics of already sorted (ascending) values.
    pub fn from_sorted(sorted: &[u32]) -> Self {
        debug_assert!(sorted.is_sorted());
        // An exact u64 sum (no rounding drift), divided once.
        let sum: u64 = sorted.iter().map(|&v| u64::from(v)).sum();
        LengthStats {
            mean: sum as f64 / sorted.len() as f64,
            p50: percentile_sorted(sorted, 0.5),
            p90: percentile_sorted(sorted, 0.9),
            p99: percentile_sorted(sorted, 0.99),
            max: sorted.last().copied().unwrap_or(0),
        }
    }
}

/// Exact statistics of a set of lengths (sorts a copy).
pub fn length_stats(values: impl IntoIterator<Item = u32>) -> LengthStats {
    let mut v: Vec<u32> = values.into_iter().collect();
    v.sort_unstable();
    LengthStats::from_sorted(&v)
}

/// Percentile `q ∈ [0, 1]` of ascending `sorted` by linear interpolation between closest
/// ranks (numpy's default): `h = (n − 1)·q`, `x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋])`.
/// NaN if `sorted` is empty.
pub fn percentile_sorted(sorted: &[u32], q: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return f64::NAN;
    };
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    if lo + 1 >= sorted.len() {
        return f64::from(last);
    }
    let (a, b) = (f64::from(sorted[lo]), f64::from(sorted[lo + 1]));
    a + (h - lo as f64) * (b - a)
}

/// Exact statistics of a trace (see [`TraceStats`]). Rows need not be sorted.
pub fn trace_stats(rows: &[TraceRow]) -> TraceStats {
    let first = rows.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
    let last = rows.iter().map(|r| r.arrival_ns).max().unwrap_or(0);
    let span_s = (last - first) as f64 / 1e9;
    let mean_rate_per_s = if span_s > 0.0 {
        (rows.len() - 1) as f64 / span_s
    } else {
        f64::NAN
    };
    TraceStats {
        rows: rows.len() as u64,
        span_s,
        mean_rate_per_s,
        input: length_stats(rows.iter().map(|r| r.input_tokens)),
        output: length_stats(rows.iter().map(|r| r.output_tokens)),
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "rows       {}", self.rows)?;
        writeln!(f, "span       {:.3} s", self.span_s)?;
        if self.mean_rate_per_s.is_nan() {
            writeln!(f, "mean rate  n/a (all arrivals at the same time)")?;
        } else {
            writeln!(f, "mean rate  {:.3} req/s", self.mean_rate_per_s)?;
        }
        writeln!(
            f,
            "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "tokens", "mean", "p50", "p90", "p99", "max"
        )?;
        for (name, s) in [("input", &self.input), ("output", &self.output)] {
            writeln!(
                f,
                "{name:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10}",
                s.mean, s.p50, s.p90, s.p99, s.max
            )?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Format detection

const UNKNOWN_HINT: &str = "expected a Mooncake .jsonl file, or a CSV whose header has \
                            the column `TIMESTAMP` (Azure), `arrived_at` (Vidur) or `arrival_s` (pdsim csv)";

enum Sniffed {
    Trace(TraceFormat),
    /// Vidur lengths-only CSV; carries the displayed header.
    LengthsOnly(String),
    /// Carries the displayed first line.
    Unknown(String),
}

fn sniff(path: &Path) -> Result<Sniffed, TraceError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    if matches!(ext.as_deref(), Some("jsonl" | "ndjson" | "json")) {
        return Ok(Sniffed::Trace(TraceFormat::Mooncake));
    }
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = std::io::BufReader::new(std::fs::File::open(path).map_err(io)?);
    // The first non-blank line (blank lines are skipped by the CSV reader too).
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
                line: 1,
                detail: "the file is empty",
            });
        }
        if !line.trim_ascii().is_empty() {
            break;
        }
    }
    let text = String::from_utf8_lossy(&line);
    let text = text.trim_start_matches('\u{feff}').trim();
    if text.starts_with('{') {
        return Ok(Sniffed::Trace(TraceFormat::Mooncake));
    }
    let cols: Vec<&str> = text
        .split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect();
    let has = |name: &str| cols.contains(&name);
    // Columns are matched by name anywhere in the header, as the readers do.
    Ok(if has("TIMESTAMP") {
        Sniffed::Trace(TraceFormat::Azure)
    } else if has("arrived_at") {
        Sniffed::Trace(TraceFormat::Vidur)
    } else if has("arrival_s") {
        Sniffed::Trace(TraceFormat::Csv)
    } else if has("num_prefill_tokens") && has("num_decode_tokens") {
        Sniffed::LengthsOnly(show(text.as_bytes()))
    } else {
        Sniffed::Unknown(show(text.as_bytes()))
    })
}

// ---------------------------------------------------------------------------------------
// Shared helpers

fn read_file(path: &Path) -> Result<Vec<u8>, TraceError> {
    std::fs::read(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Quote a field for an error message: control characters escaped (a quoted CSV field may
/// hold a newline) and shortened, so a runaway value keeps the message on one line.
fn show(bytes: &[u8]) -> String {
    const MAX: usize = 80;
    if bytes.is_empty() {
        return "(empty)".to_string();
    }
    let mut out = String::from("`");
    for (i, c) in String::from_utf8_lossy(bytes).chars().enumerate() {
        if i == MAX {
            out.push_str(&format!("…` ({} bytes)", bytes.len()));
            return out;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out.push('`');
    out
}

fn fmt_ns(ns: u128) -> String {
    format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// Tracks the previous row's arrival to reject time going backwards. Arrivals are i128 ns
/// so that Azure rows before the first one (negative after re-basing) are caught here too.
struct Order {
    prev: Option<(i128, u64)>,
}

impl Order {
    /// `raw` renders the field's text only on error, keeping the per-row path allocation-free.
    fn check<R: AsRef<[u8]>>(
        &mut self,
        path: &Path,
        line: u64,
        field: &'static str,
        raw: impl FnOnce() -> R,
        t: i128,
    ) -> Result<(), TraceError> {
        if let Some((prev, previous_line)) = self.prev
            && t < prev
        {
            return Err(TraceError::Backwards {
                path: path.to_path_buf(),
                line,
                field,
                value: show(raw().as_ref()),
                behind: fmt_ns((prev - t) as u128),
                previous_line,
            });
        }
        self.prev = Some((t, line));
        Ok(())
    }
}

fn bad(path: &Path, line: u64, field: &'static str, raw: &[u8], expected: &str) -> TraceError {
    TraceError::BadValue {
        path: path.to_path_buf(),
        line,
        field,
        value: show(raw),
        expected: expected.to_string(),
    }
}

const TOKENS_EXPECTED: &str = "an integer token count from 1 to 4294967295";
const SECONDS_EXPECTED: &str = "a number of seconds ≥ 0 (e.g. `12.5`)";

fn parse_tokens(raw: &[u8]) -> Option<u32> {
    std::str::from_utf8(raw)
        .ok()?
        .parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
}

/// `x · scale` rounded to the nearest integer, if `x` is finite, ≥ 0 and the result fits u64.
fn scaled_round(x: f64, scale: f64) -> Option<u64> {
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    let v = (x * scale).round();
    // 2^64 is exactly representable; anything at or above it does not fit.
    (v < 18_446_744_073_709_551_616.0).then_some(v as u64)
}

fn parse_seconds_ns(raw: &[u8]) -> Option<u64> {
    let x: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    scaled_round(x, 1e9)
}

fn check_hash_len(
    path: &Path,
    line: u64,
    input_field: &'static str,
    input_tokens: u32,
    ids: &[u64],
) -> Result<(), TraceError> {
    let expected = u64::from(input_tokens.div_ceil(HASH_BLOCK_TOKENS));
    if ids.len() as u64 != expected {
        return Err(TraceError::HashIdsLength {
            path: path.to_path_buf(),
            line,
            input_field,
            input_tokens,
            got: ids.len(),
            expected,
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Azure timestamps

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
/// Working in whole days makes month, year and leap-day rollovers between two rows exact.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    // Shift the year to start in March so the leap day is the last day of the year.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400; // [0, 399]
    let mp = i64::from((m + 9) % 12); // March = 0
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1; // [0, 365]
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy; // [0, 146096]
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

const AZURE_TIME_EXPECTED: &str =
    "a date-time `YYYY-MM-DD HH:MM:SS[.fraction]` with 0-9 fractional digits";

/// `YYYY-MM-DD HH:MM:SS[.f…]` (or `T` between date and time; 0–9 fractional digits, the
/// Azure files have 7 = 100 ns units) → ns since 1970-01-01 00:00:00 (no time zone).
fn parse_azure_time(raw: &[u8]) -> Option<i128> {
    fn num(b: &[u8]) -> Option<u32> {
        if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(b.iter().fold(0, |acc, &c| acc * 10 + u32::from(c - b'0')))
    }
    if raw.len() < 19
        || raw[4] != b'-'
        || raw[7] != b'-'
        || !matches!(raw[10], b' ' | b'T')
        || raw[13] != b':'
        || raw[16] != b':'
    {
        return None;
    }
    let year = i64::from(num(&raw[0..4])?);
    let (month, day) = (num(&raw[5..7])?, num(&raw[8..10])?);
    let (hour, min, sec) = (num(&raw[11..13])?, num(&raw[14..16])?, num(&raw[17..19])?);
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || min > 59
        || sec > 59
    {
        return None;
    }
    let frac_ns = match &raw[19..] {
        [] => 0,
        [b'.', digits @ ..] if digits.len() <= 9 => {
            // Scale the digits to 9 places: "98" = 980_000_000 ns, "9799600" = 979_960_000.
            let v = if digits.is_empty() { 0 } else { num(digits)? };
            i128::from(v) * 10i128.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    let days = i128::from(days_from_civil(year, month, day));
    let secs = days * 86_400 + i128::from(hour * 3600 + min * 60 + sec);
    Some(secs * 1_000_000_000 + frac_ns)
}

// ---------------------------------------------------------------------------------------
// CSV formats

struct CsvColumns {
    arrival: &'static str,
    input: &'static str,
    output: &'static str,
    /// Optional column.
    hash_ids: Option<&'static str>,
}

fn csv_columns(format: TraceFormat) -> CsvColumns {
    match format {
        TraceFormat::Azure => CsvColumns {
            arrival: "TIMESTAMP",
            input: "ContextTokens",
            output: "GeneratedTokens",
            hash_ids: None,
        },
        TraceFormat::Vidur => CsvColumns {
            arrival: "arrived_at",
            input: "num_prefill_tokens",
            output: "num_decode_tokens",
            hash_ids: None,
        },
        TraceFormat::Mooncake => unreachable!("Mooncake traces are JSON lines, not CSV"),
        TraceFormat::Csv => CsvColumns {
            arrival: "arrival_s",
            input: "input_tokens",
            output: "output_tokens",
            hash_ids: Some("hash_ids"),
        },
    }
}

/// A CSV reader over `data` plus its header, with the error plumbing shared by the CSV
/// formats.
struct CsvFile<'a> {
    path: &'a Path,
    data: &'a [u8],
    reader: csv::Reader<&'a [u8]>,
    header: csv::ByteRecord,
    header_line: u64,
    /// Line numbering state: `line` is the 1-based line of byte `counted`.
    counted: usize,
    line: u64,
    /// Byte offset where the reader stopped after the previous record.
    end: usize,
}

impl<'a> CsvFile<'a> {
    fn open(path: &'a Path, data: &'a [u8]) -> Result<Self, TraceError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            // Short rows are reported by us, naming the missing column.
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(data);
        let header = match reader.byte_headers() {
            Ok(h) => h.clone(),
            Err(e) => return Err(csv_error(path, &e, 1)),
        };
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
                line: 1,
                detail: "the file is empty (not even a header)",
            });
        }
        let mut file = CsvFile {
            path,
            data,
            reader,
            header,
            header_line: 1,
            counted: 0,
            line: 1,
            end: 0,
        };
        file.header_line = file.record_line();
        Ok(file)
    }

    /// The 1-based line on which the record just read starts.
    ///
    /// The csv crate's own record positions are off after blank lines and with CRLF line
    /// ends (csv 1.4), so we count lines ourselves. What is reliable is the reader's byte
    /// offset after each record: the record starts at the first byte after the previous
    /// offset that is not a line terminator (blank lines and the `\n` of a CRLF are skipped
    /// by the reader). Counting is incremental, so a whole file costs one pass.
    fn record_line(&mut self) -> u64 {
        let prev_end = self.end;
        self.end = usize::try_from(self.reader.position().byte()).unwrap_or(usize::MAX);
        let start = self.data[prev_end.min(self.data.len())..]
            .iter()
            .position(|&b| b != b'\n' && b != b'\r')
            .map_or(self.data.len(), |i| prev_end + i);
        for i in self.counted..start {
            // A line ends at `\n`, or at a `\r` not followed by `\n` (old Mac line ends).
            let b = self.data[i];
            if b == b'\n' || (b == b'\r' && self.data.get(i + 1) != Some(&b'\n')) {
                self.line += 1;
            }
        }
        self.counted = self.counted.max(start);
        self.line
    }

    fn column(&self, name: &'static str) -> Result<usize, TraceError> {
        self.optional_column(name)
            .ok_or_else(|| TraceError::MissingField {
                path: self.path.to_path_buf(),
                line: self.header_line,
                field: name,
                detail: format!("the header is {}", show(&joined(&self.header))),
            })
    }

    fn optional_column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name.as_bytes())
    }

    /// Next record into `rec`: `Ok(Some(line))` with its 1-based line, `Ok(None)` at EOF.
    fn next(&mut self, rec: &mut csv::ByteRecord) -> Result<Option<u64>, TraceError> {
        match self.reader.read_byte_record(rec) {
            Ok(true) => Ok(Some(self.record_line())),
            Ok(false) => Ok(None),
            Err(e) => Err(csv_error(self.path, &e, self.line)),
        }
    }

    fn field<'r>(
        &self,
        rec: &'r csv::ByteRecord,
        line: u64,
        col: usize,
        name: &'static str,
    ) -> Result<&'r [u8], TraceError> {
        rec.get(col).ok_or_else(|| TraceError::MissingField {
            path: self.path.to_path_buf(),
            line,
            field: name,
            detail: format!(
                "the row has {} fields, the header has {}",
                rec.len(),
                self.header.len()
            ),
        })
    }

    fn empty_error(&self) -> TraceError {
        TraceError::Empty {
            path: self.path.to_path_buf(),
            line: self.header_line + 1,
            detail: "only a header",
        }
    }
}

/// A record joined back with commas, for messages.
fn joined(rec: &csv::ByteRecord) -> Vec<u8> {
    rec.iter().collect::<Vec<_>>().join(&b","[..])
}

fn csv_error(path: &Path, e: &csv::Error, fallback_line: u64) -> TraceError {
    TraceError::Csv {
        path: path.to_path_buf(),
        line: e.position().map_or(fallback_line, |p| p.line()),
        message: e.to_string(),
    }
}

fn parse_csv_trace(
    path: &Path,
    data: &[u8],
    format: TraceFormat,
) -> Result<Vec<TraceRow>, TraceError> {
    let names = csv_columns(format);
    let mut file = CsvFile::open(path, data)?;
    let arrival_col = file.column(names.arrival)?;
    let input_col = file.column(names.input)?;
    let output_col = file.column(names.output)?;
    let hash_col = names
        .hash_ids
        .and_then(|n| file.optional_column(n).map(|c| (c, n)));

    let mut rows = Vec::with_capacity(data.len() / 24);
    let mut rec = csv::ByteRecord::new();
    let mut order = Order { prev: None };
    let mut azure_base: Option<i128> = None;
    while let Some(line) = file.next(&mut rec)? {
        let raw_t = file.field(&rec, line, arrival_col, names.arrival)?;
        // Time as i128 ns, relative to the first row for Azure (which is absolute).
        let t: i128 = if format == TraceFormat::Azure {
            let abs = parse_azure_time(raw_t)
                .ok_or_else(|| bad(path, line, names.arrival, raw_t, AZURE_TIME_EXPECTED))?;
            abs - *azure_base.get_or_insert(abs)
        } else {
            let ns = parse_seconds_ns(raw_t)
                .ok_or_else(|| bad(path, line, names.arrival, raw_t, SECONDS_EXPECTED))?;
            i128::from(ns)
        };
        order.check(path, line, names.arrival, || raw_t, t)?;
        let arrival_ns = u64::try_from(t).map_err(|_| {
            bad(
                path,
                line,
                names.arrival,
                raw_t,
                "a time within 584 years of the first row",
            )
        })?;

        let raw_in = file.field(&rec, line, input_col, names.input)?;
        let input_tokens = parse_tokens(raw_in)
            .ok_or_else(|| bad(path, line, names.input, raw_in, TOKENS_EXPECTED))?;
        let raw_out = file.field(&rec, line, output_col, names.output)?;
        let output_tokens = parse_tokens(raw_out)
            .ok_or_else(|| bad(path, line, names.output, raw_out, TOKENS_EXPECTED))?;

        let mut hash_ids = Vec::new();
        if let Some((col, name)) = hash_col {
            let raw = file.field(&rec, line, col, name)?;
            if !raw.is_empty() {
                hash_ids.reserve_exact(input_tokens.div_ceil(HASH_BLOCK_TOKENS) as usize);
                for tok in raw.split(u8::is_ascii_whitespace).filter(|t| !t.is_empty()) {
                    let id = std::str::from_utf8(tok)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| {
                            bad(
                                path,
                                line,
                                name,
                                raw,
                                "space-separated non-negative integer block ids",
                            )
                        })?;
                    hash_ids.push(id);
                }
                check_hash_len(path, line, names.input, input_tokens, &hash_ids)?;
            }
        }
        rows.push(TraceRow {
            arrival_ns,
            input_tokens,
            output_tokens,
            hash_ids,
        });
    }
    if rows.is_empty() {
        return Err(file.empty_error());
    }
    Ok(rows)
}

fn parse_lengths_csv(path: &Path, data: &[u8]) -> Result<Vec<(u32, u32)>, TraceError> {
    const IN: &str = "num_prefill_tokens";
    const OUT: &str = "num_decode_tokens";
    const TOTAL: &str = "num_total_tokens";
    let mut file = CsvFile::open(path, data)?;
    let input_col = file.column(IN)?;
    let output_col = file.column(OUT)?;
    let total_col = file.optional_column(TOTAL);
    let mut out = Vec::with_capacity(data.len() / 16);
    let mut rec = csv::ByteRecord::new();
    while let Some(line) = file.next(&mut rec)? {
        let raw_in = file.field(&rec, line, input_col, IN)?;
        let input =
            parse_tokens(raw_in).ok_or_else(|| bad(path, line, IN, raw_in, TOKENS_EXPECTED))?;
        let raw_out = file.field(&rec, line, output_col, OUT)?;
        let output =
            parse_tokens(raw_out).ok_or_else(|| bad(path, line, OUT, raw_out, TOKENS_EXPECTED))?;
        if let Some(col) = total_col {
            // A derived column, but a mismatch means swapped or corrupted columns.
            let raw = file.field(&rec, line, col, TOTAL)?;
            let sum = u64::from(input) + u64::from(output);
            let ok = std::str::from_utf8(raw)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                == Some(sum);
            if !ok {
                return Err(bad(
                    path,
                    line,
                    TOTAL,
                    raw,
                    &format!("{IN} + {OUT} = {sum}"),
                ));
            }
        }
        out.push((input, output));
    }
    if out.is_empty() {
        return Err(file.empty_error());
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Mooncake JSON lines

/// One JSON line. Scalars are kept as `Value` (no heap allocation for numbers) so that a
/// wrong type becomes our own error naming the key, rather than serde's message without it.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object with keys timestamp, input_length, output_length, hash_ids")]
struct MooncakeLine {
    timestamp: Option<Value>,
    input_length: Option<Value>,
    output_length: Option<Value>,
    hash_ids: Option<HashIds>,
}

/// `hash_ids` parsed straight into `Vec<u64>` (one allocation per row), or a description of
/// what was found instead of an array of non-negative integers.
enum HashIds {
    Ids(Vec<u64>),
    Bad(String),
}

impl<'de> Deserialize<'de> for HashIds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(HashIdsVisitor)
    }
}

struct HashIdsVisitor;

impl<'de> Visitor<'de> for HashIdsVisitor {
    type Value = HashIds;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of non-negative integers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<HashIds, A::Error> {
        let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(32));
        let mut first_bad = None;
        // Keep consuming after a bad element: the deserializer requires the whole array read.
        while let Some(v) = seq.next_element::<Value>()? {
            match (v.as_u64(), &first_bad) {
                (Some(id), None) => ids.push(id),
                (None, None) => first_bad = Some(format!("element {} is {v}", ids.len())),
                _ => {}
            }
        }
        Ok(first_bad.map_or(HashIds::Ids(ids), HashIds::Bad))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HashIds, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(HashIds::Bad("an object".to_string()))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<HashIds, E> {
        Ok(HashIds::Bad(v.to_string()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<HashIds, E> {
        Ok(HashIds::Bad(v.to_string()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<HashIds, E> {
        Ok(HashIds::Bad(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<HashIds, E> {
        Ok(HashIds::Bad(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<HashIds, E> {
        Ok(HashIds::Bad(format!("{v:?}")))
    }
    fn visit_unit<E: de::Error>(self) -> Result<HashIds, E> {
        Ok(HashIds::Bad("null".to_string()))
    }
}

fn json_value_text(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

fn required<T>(path: &Path, line: u64, field: &'static str, v: Option<T>) -> Result<T, TraceError> {
    v.ok_or_else(|| TraceError::MissingField {
        path: path.to_path_buf(),
        line,
        field,
        detail: "key absent or null".to_string(),
    })
}

fn json_tokens(path: &Path, line: u64, field: &'static str, v: &Value) -> Result<u32, TraceError> {
    v.as_u64()
        .filter(|&n| n >= 1)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| bad(path, line, field, &json_value_text(v), TOKENS_EXPECTED))
}

/// Mooncake `timestamp` (ms) → ns: integers exactly, fractional ms rounded to nearest ns.
fn json_ms_to_ns(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else { return None };
    if let Some(ms) = n.as_u64() {
        return ms.checked_mul(1_000_000);
    }
    if n.is_i64() {
        return None; // negative integer
    }
    scaled_round(n.as_f64()?, 1e6)
}

fn parse_mooncake(path: &Path, data: &[u8]) -> Result<Vec<TraceRow>, TraceError> {
    let mut rows = Vec::with_capacity(data.len() / 200);
    let mut order = Order { prev: None };
    let mut line_no = 0u64;
    // Tolerate a UTF-8 byte-order mark, as the CSV reader does.
    let body = data.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(data);
    for raw_line in body.split(|&b| b == b'\n') {
        line_no += 1;
        if raw_line.trim_ascii().is_empty() {
            continue;
        }
        let line = line_no;
        // serde would also accept a positional array `[ts, in, out, [ids]]` for the struct;
        // the format is objects only.
        if raw_line.trim_ascii_start().first() != Some(&b'{') {
            return Err(TraceError::Json {
                path: path.to_path_buf(),
                line,
                column: raw_line.len() - raw_line.trim_ascii_start().len() + 1,
                message: format!(
                    "expected a JSON object `{{...}}`, found {}",
                    show(raw_line.trim_ascii())
                ),
            });
        }
        let rec: MooncakeLine = serde_json::from_slice(raw_line).map_err(|e| {
            // serde_json appends " at line 1 column N"; we report our own line number.
            let mut message = e.to_string();
            if let Some(i) = message.rfind(" at line ") {
                message.truncate(i);
            }
            TraceError::Json {
                path: path.to_path_buf(),
                line,
                column: e.column(),
                message,
            }
        })?;
        let ts = required(path, line, "timestamp", rec.timestamp)?;
        let arrival_ns = json_ms_to_ns(&ts).ok_or_else(|| {
            bad(
                path,
                line,
                "timestamp",
                &json_value_text(&ts),
                "a number of milliseconds ≥ 0",
            )
        })?;
        order.check(
            path,
            line,
            "timestamp",
            || json_value_text(&ts),
            i128::from(arrival_ns),
        )?;
        let input = required(path, line, "input_length", rec.input_length)?;
        let input_tokens = json_tokens(path, line, "input_length", &input)?;
        let output = required(path, line, "output_length", rec.output_length)?;
        let output_tokens = json_tokens(path, line, "output_length", &output)?;
        let hash_ids = match required(path, line, "hash_ids", rec.hash_ids)? {
            HashIds::Ids(ids) => ids,
            HashIds::Bad(what) => {
                return Err(TraceError::BadValue {
                    path: path.to_path_buf(),
                    line,
                    field: "hash_ids",
                    value: what,
                    expected: "an array of non-negative integer block ids".to_string(),
                });
            }
        };
        check_hash_len(path, line, "input_length", input_tokens, &hash_ids)?;
        rows.push(TraceRow {
            arrival_ns,
            input_tokens,
            output_tokens,
            hash_ids,
        });
    }
    if rows.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
            line: line_no.max(1),
            detail: if data.is_empty() {
                "the file is empty"
            } else {
                "only blank lines"
            },
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn shared(name: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/traces")).join(name)
    }

    /// A uniquely named file in the temp dir, removed on drop.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &[u8]) -> Self {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("pdsim-trace-{}-{n}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn stats_of(name: &str, format: TraceFormat) -> TraceStats {
        let path = shared(name);
        assert_eq!(detect_format(&path).unwrap(), format, "{name}");
        trace_stats(&read_trace(&path, format).unwrap())
    }

    // ---- published figures -------------------------------------------------------------

    #[test]
    fn mooncake_table2_conversation() {
        let s = stats_of("conversation_trace.jsonl", TraceFormat::Mooncake);
        assert_eq!(s.rows, 12_031);
        assert_eq!(s.input.mean.round(), 12_035.0);
        assert_eq!(s.output.mean.round(), 343.0);
    }

    #[test]
    fn mooncake_table2_synthetic() {
        let s = stats_of("synthetic_trace.jsonl", TraceFormat::Mooncake);
        assert_eq!(s.rows, 3_993);
        assert_eq!(s.input.mean.round(), 15_325.0);
        assert_eq!(s.output.mean.round(), 149.0);
    }

    #[test]
    fn splitwise_medians_azure_and_vidur() {
        for (file, format, rows, p_in, p_out) in [
            (
                "AzureLLMInferenceTrace_code.csv",
                TraceFormat::Azure,
                8_819,
                1_469.0,
                13.0,
            ),
            (
                "splitwise_code.csv",
                TraceFormat::Vidur,
                8_819,
                1_469.0,
                13.0,
            ),
            (
                "AzureLLMInferenceTrace_conv.csv",
                TraceFormat::Azure,
                19_366,
                1_020.0,
                129.0,
            ),
            (
                "splitwise_conv.csv",
                TraceFormat::Vidur,
                19_366,
                1_020.0,
                129.0,
            ),
        ] {
            let s = stats_of(file, format);
            assert_eq!(
                (s.rows, s.input.p50, s.output.p50),
                (rows, p_in, p_out),
                "{file}"
            );
        }
    }

    #[test]
    fn vidur_arxiv_4k_table1() {
        let lengths = read_lengths(&shared(
            "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        ))
        .unwrap();
        assert_eq!(lengths.len(), 28_257);
        let p = length_stats(lengths.iter().map(|l| l.0));
        let d = length_stats(lengths.iter().map(|l| l.1));
        assert_eq!((p.mean.round(), p.p50, p.p90), (2_588.0, 2_730.0, 3_702.0));
        assert_eq!((d.mean.round(), d.p50), (291.0, 167.0));
        assert!(p.max <= 4096 && u64::from(p.max) + u64::from(d.max) > 4000);
    }

    // ---- readers on the shared files -----------------------------------------------------

    #[test]
    fn conversation_arrivals_are_timestamps_times_1e6() {
        let path = shared("conversation_trace.jsonl");
        let rows = read_trace(&path, TraceFormat::Mooncake).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let ts: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["timestamp"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(rows.len(), 12_031);
        assert_eq!(ts.len(), rows.len());
        for (r, t) in rows.iter().zip(&ts) {
            assert_eq!(r.arrival_ns, t * 1_000_000);
            assert_eq!(r.hash_ids.len() as u32, r.input_tokens.div_ceil(512));
        }
        assert_eq!(rows[0].hash_ids[0], 0);
        assert_eq!(rows.last().unwrap().arrival_ns, 3_536_999 * 1_000_000);
    }

    #[test]
    fn azure_rebased_matches_vidur_to_the_ns() {
        for (azure, vidur) in [
            ("AzureLLMInferenceTrace_code.csv", "splitwise_code.csv"),
            ("AzureLLMInferenceTrace_conv.csv", "splitwise_conv.csv"),
        ] {
            let a = read_trace(&shared(azure), TraceFormat::Azure).unwrap();
            let v = read_trace(&shared(vidur), TraceFormat::Vidur).unwrap();
            assert_eq!(a, v, "{azure} vs {vidur}");
            assert_eq!(a[0].arrival_ns, 0);
            // 2023-11-16 18:17:03.9799600 -> 18:17:04.0319600
            if azure.contains("code") {
                assert_eq!(a[1].arrival_ns, 52_000_000);
            }
            let span = trace_stats(&a).span_s;
            assert!((3000.0..3600.0).contains(&span), "{azure}: span {span}");
        }
    }

    #[test]
    fn detect_format_on_shared_traces() {
        for (file, format) in [
            ("conversation_trace.jsonl", TraceFormat::Mooncake),
            ("synthetic_trace.jsonl", TraceFormat::Mooncake),
            ("AzureLLMInferenceTrace_code.csv", TraceFormat::Azure),
            ("AzureLLMInferenceTrace_conv.csv", TraceFormat::Azure),
            ("splitwise_code.csv", TraceFormat::Vidur),
            ("splitwise_conv.csv", TraceFormat::Vidur),
        ] {
            assert_eq!(detect_format(&shared(file)).unwrap(), format, "{file}");
        }
        for (file, header) in [
            (
                "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
                "num_prefill_tokens",
            ),
            ("test_trace.csv", "request_id,request_type"),
        ] {
            let msg = detect_format(&shared(file)).unwrap_err().to_string();
            assert!(msg.contains(file) && msg.contains(header), "{msg}");
        }
    }

    #[test]
    fn read_lengths_accepts_every_trace_format() {
        let l = read_lengths(&shared("splitwise_code.csv")).unwrap();
        assert_eq!((l.len(), l[0]), (8_819, (4808, 10)));
        let l = read_lengths(&shared("synthetic_trace.jsonl")).unwrap();
        assert_eq!((l.len(), l[0]), (3_993, (40_160, 6)));
        let l = read_lengths(&shared("AzureLLMInferenceTrace_conv.csv")).unwrap();
        assert_eq!((l.len(), l[0]), (19_366, (374, 44)));
        let f = TempFile::new("l.csv", b"arrival_s,input_tokens,output_tokens\n0,5,6\n");
        assert_eq!(read_lengths(&f.0).unwrap(), vec![(5, 6)]);
        let f = TempFile::new("l.csv", b"x,y\n1,2\n");
        let msg = read_lengths(&f.0).unwrap_err().to_string();
        assert!(msg.contains("l.csv:1") && msg.contains("`x,y`"), "{msg}");
    }

    // ---- the generic CSV -----------------------------------------------------------------

    #[test]
    fn generic_csv_round_trip() {
        let f = TempFile::new(
            "g.csv",
            b"\xEF\xBB\xBFarrival_s, input_tokens ,output_tokens,hash_ids,extra\r\n\
              0.0,1030,20,0 1 2,x\r\n\
              \r\n\
              0.25,512,7,0,y\r\n\
              1e-3,700,12,,z\r\n",
        );
        // 1e-3 s after 0.25 s is backwards: fix the order and check the error line first.
        let err = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(
            err.contains("g.csv:5") && err.contains("`arrival_s`") && err.contains("line 4"),
            "{err}"
        );
        let f = TempFile::new(
            "g.csv",
            b"output_tokens,input_tokens,arrival_s,hash_ids\n20,1030,0.0,0 1 2\n7,512,0.25,0\n12,700,1.5,\n",
        );
        assert_eq!(detect_format(&f.0).unwrap(), TraceFormat::Csv);
        let rows = read_trace(&f.0, TraceFormat::Csv).unwrap();
        let row = |arrival_ns, input_tokens, output_tokens, hash_ids: &[u64]| TraceRow {
            arrival_ns,
            input_tokens,
            output_tokens,
            hash_ids: hash_ids.to_vec(),
        };
        assert_eq!(
            rows,
            vec![
                row(0, 1030, 20, &[0, 1, 2]),
                row(250_000_000, 512, 7, &[0]),
                row(1_500_000_000, 700, 12, &[]),
            ]
        );
    }

    #[test]
    fn generic_csv_without_hash_ids_column_and_equal_times() {
        let f = TempFile::new(
            "h.csv",
            b"arrival_s,input_tokens,output_tokens\n2,1,1\n2,3,4\n",
        );
        assert_eq!(detect_format(&f.0).unwrap(), TraceFormat::Csv);
        let rows = read_trace(&f.0, TraceFormat::Csv).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(
            rows.iter()
                .all(|r| r.arrival_ns == 2_000_000_000 && r.hash_ids.is_empty())
        );
    }

    #[test]
    fn mooncake_fractional_ms_blank_lines_and_crlf() {
        let f = TempFile::new(
            "m.jsonl",
            b"\xEF\xBB\xBF{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [7]}\r\n\
              \n   \n\
              {\"hash_ids\": [7, 8], \"extra\": {\"a\": 1}, \"output_length\": 3, \"input_length\": 513, \"timestamp\": 2}",
        );
        let rows = read_trace(&f.0, TraceFormat::Mooncake).unwrap();
        assert_eq!(rows[0].arrival_ns, 1_500_000);
        assert_eq!(rows[1].arrival_ns, 2_000_000);
        assert_eq!(rows[1].hash_ids, vec![7, 8]);
    }

    // ---- malformed input -----------------------------------------------------------------

    /// (file name, contents, format (None = read_lengths), line, field or phrase).
    type BadCase = (
        &'static str,
        &'static str,
        Option<TraceFormat>,
        u64,
        &'static str,
    );

    const BAD_CASES: &[BadCase] = &[
        // missing column in the header
        (
            "v.csv",
            "arrived_at,num_prefill_tokens\n0.0,5\n",
            Some(TraceFormat::Vidur),
            1,
            "`num_decode_tokens` is missing",
        ),
        (
            "wrong.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0,1,1\n",
            Some(TraceFormat::Azure),
            1,
            "`TIMESTAMP`",
        ),
        // short row
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,6\n0.1,5\n",
            Some(TraceFormat::Vidur),
            3,
            "`num_decode_tokens` is missing",
        ),
        // non-numeric, negative, zero, too large, non-UTF-8
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,abc,10\n",
            Some(TraceFormat::Azure),
            2,
            "`ContextTokens` = `abc`",
        ),
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,6\n0.1,-5,6\n",
            Some(TraceFormat::Vidur),
            3,
            "`num_prefill_tokens` = `-5`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\n0,0,6\n",
            Some(TraceFormat::Csv),
            2,
            "`input_tokens` = `0`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\n0,4,0\n",
            Some(TraceFormat::Csv),
            2,
            "`output_tokens` = `0`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\n0,4,4294967296\n",
            Some(TraceFormat::Csv),
            2,
            "`output_tokens`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\n0,4,\n",
            Some(TraceFormat::Csv),
            2,
            "`output_tokens` = (empty)",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\n0,4,5\n1,4,2.5\n",
            Some(TraceFormat::Csv),
            3,
            "`output_tokens` = `2.5`",
        ),
        // arrival times: negative, NaN, backwards, bad Azure date-times
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n-1.0,5,6\n",
            Some(TraceFormat::Vidur),
            2,
            "`arrived_at` = `-1.0`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens\nNaN,5,6\n",
            Some(TraceFormat::Csv),
            2,
            "`arrival_s` = `NaN`",
        ),
        (
            "v.csv",
            "arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,5,6\n0.25,5,6\n",
            Some(TraceFormat::Vidur),
            3,
            "goes backwards, 0.250000000 s before the row on line 2",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,5,6\n2023-11-16 18:17:03.0,5,6\n",
            Some(TraceFormat::Azure),
            3,
            "`TIMESTAMP` = `2023-11-16 18:17:03.0` goes backwards, 0.979960000 s",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:17:03.9799600,5,6\n",
            Some(TraceFormat::Azure),
            2,
            "`TIMESTAMP`",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 00:00:00,5,6\n",
            Some(TraceFormat::Azure),
            2,
            "`TIMESTAMP` = `2023-02-29 00:00:00`",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.1234567890,5,6\n",
            Some(TraceFormat::Azure),
            2,
            "0-9 fractional digits",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 24:00:00,5,6\n",
            Some(TraceFormat::Azure),
            2,
            "`TIMESTAMP`",
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,5,6\n",
            Some(TraceFormat::Azure),
            2,
            "`TIMESTAMP` = `1700000000`",
        ),
        // generic CSV hash_ids
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens,hash_ids\n0,600,1,0 x\n",
            Some(TraceFormat::Csv),
            2,
            "`hash_ids` = `0 x`",
        ),
        (
            "g.csv",
            "arrival_s,input_tokens,output_tokens,hash_ids\n0,600,1,0\n",
            Some(TraceFormat::Csv),
            2,
            "`hash_ids` has 1 ids but `input_tokens` = 600 needs ceil(600/512) = 2",
        ),
        // empty files
        ("e.csv", "", Some(TraceFormat::Csv), 1, "no rows"),
        (
            "e.csv",
            "arrival_s,input_tokens,output_tokens\n",
            Some(TraceFormat::Csv),
            2,
            "no rows",
        ),
        ("e.jsonl", "", Some(TraceFormat::Mooncake), 1, "no rows"),
        ("e.jsonl", "\n\n", Some(TraceFormat::Mooncake), 3, "no rows"),
        ("e.csv", "", None, 1, "no rows"),
        // Mooncake
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n{\"timestamp\": 5, \"input_length\": }\n",
            Some(TraceFormat::Mooncake),
            2,
            "bad JSON at column",
        ),
        (
            "m.jsonl",
            "[1, 2]\n",
            Some(TraceFormat::Mooncake),
            1,
            "bad JSON",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`hash_ids` is missing",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": \"12\", \"output_length\": 1, \"hash_ids\": [0]}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`input_length` = `\"12\"`",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 0, \"hash_ids\": [0]}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`output_length` = `0`",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": -3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`timestamp` = `-3`",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 9, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n\n{\"timestamp\": 8, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
            Some(TraceFormat::Mooncake),
            3,
            "`timestamp` = `8` goes backwards, 0.001000000 s before the row on line 1",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1025, \"output_length\": 1, \"hash_ids\": [0, 1]}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`hash_ids` has 2 ids but `input_length` = 1025 needs ceil(1025/512) = 3",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [-1]}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`hash_ids` = element 0 is -1",
        ),
        (
            "m.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": \"0\"}\n",
            Some(TraceFormat::Mooncake),
            1,
            "`hash_ids`",
        ),
        // lengths-only
        (
            "l.csv",
            "num_prefill_tokens,num_decode_tokens,num_total_tokens\n3,4,7\n3,4,8\n",
            None,
            3,
            "`num_total_tokens` = `8`: expected num_prefill_tokens + num_decode_tokens = 7",
        ),
        (
            "l.csv",
            "num_prefill_tokens,num_decode_tokens\n3,x\n",
            None,
            2,
            "`num_decode_tokens` = `x`",
        ),
        // unknown format
        ("u.csv", "when,in,out\n0,1,1\n", None, 1, "`when,in,out`"),
    ];

    #[test]
    fn every_bad_input_names_file_line_and_field() {
        for &(name, contents, format, line, needle) in BAD_CASES {
            let f = TempFile::new(name, contents.as_bytes());
            let err = match format {
                Some(format) => read_trace(&f.0, format).map(drop),
                None => read_lengths(&f.0).map(drop),
            }
            .unwrap_err();
            let msg = err.to_string();
            let file_name = f.0.file_name().unwrap().to_str().unwrap();
            let at = format!("{}:{line}: ", f.0.display());
            assert!(
                msg.contains(file_name) && msg.contains(&at),
                "want {at}: {msg}"
            );
            assert!(msg.contains(needle), "want {needle:?} in: {msg}");
            assert!(msg.lines().count() <= 2, "{msg}");
        }
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let f = TempFile::new(
            "b.csv",
            b"arrival_s,input_tokens,output_tokens\n0,\xff\xfe,1\n",
        );
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(msg.contains("b.csv:2: invalid `input_tokens`"), "{msg}");
        let f = TempFile::new("b.jsonl", b"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\xff\n");
        let msg = read_trace(&f.0, TraceFormat::Mooncake)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("b.jsonl:1: bad JSON"), "{msg}");
    }

    #[test]
    fn csv_line_numbers_count_blank_lines_crlf_cr_and_quoted_newlines() {
        for (contents, line) in [
            (
                &b"\n\narrival_s,input_tokens,output_tokens\n0,1,1\n\n\n0,0,1\n"[..],
                7,
            ),
            (
                b"arrival_s,input_tokens,output_tokens\r\n0,1,1\r\n\r\n\r\n0,0,1\r\n",
                5,
            ),
            (b"arrival_s,input_tokens,output_tokens\r0,1,1\r\r0,0,1", 4),
            (
                b"arrival_s,input_tokens,output_tokens,note\n0,1,1,\"a\nb\"\n0,0,1,x",
                4,
            ),
            (
                b"\xEF\xBB\xBFarrival_s,input_tokens,output_tokens\n0,0,1",
                2,
            ),
        ] {
            let f = TempFile::new("n.csv", contents);
            let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("n.csv:{line}: invalid `input_tokens`")),
                "{msg}"
            );
        }
        let f = TempFile::new(
            "q.csv",
            b"arrival_s,input_tokens,output_tokens\n0,\"1\n2\",1\n",
        );
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(
            msg.contains("q.csv:2: invalid `input_tokens` = `1\\n2`"),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1);
        let long = format!(
            "arrival_s,input_tokens,output_tokens\n0,{},1\n",
            "9".repeat(500)
        );
        let f = TempFile::new("q.csv", long.as_bytes());
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(msg.contains("…` (500 bytes)") && msg.len() < 300, "{msg}");
        let f = TempFile::new("n.csv", b"\r\n\r\nx,y\r\n");
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(
            msg.contains("n.csv:3: `arrival_s` is missing (the header is `x,y`)"),
            "{msg}"
        );
    }

    #[test]
    fn unreadable_file() {
        let missing = std::env::temp_dir().join(format!(
            "pdsim-trace-{}-does-not-exist.csv",
            std::process::id()
        ));
        for format in TraceFormat::ALL {
            let msg = read_trace(&missing, format).unwrap_err().to_string();
            assert!(
                msg.contains("does-not-exist.csv") && msg.contains("cannot read"),
                "{msg}"
            );
        }
        assert!(matches!(
            detect_format(&missing),
            Err(TraceError::Io { .. })
        ));
        assert!(matches!(read_lengths(&missing), Err(TraceError::Io { .. })));
        // A directory cannot be read as a file either.
        let msg = read_trace(&std::env::temp_dir(), TraceFormat::Csv)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("cannot read"), "{msg}");
    }

    #[test]
    fn detect_format_by_header_and_extension() {
        for (name, contents, format) in [
            (
                "d.csv",
                "TIMESTAMP,ContextTokens,GeneratedTokens\n",
                TraceFormat::Azure,
            ),
            (
                "d.txt",
                "\n\"arrived_at\",num_prefill_tokens,num_decode_tokens\n",
                TraceFormat::Vidur,
            ),
            (
                "d.csv",
                "\u{feff}arrival_s,input_tokens,output_tokens\r\n",
                TraceFormat::Csv,
            ),
            ("d.log", "{\"timestamp\": 0}\n", TraceFormat::Mooncake),
            ("d.JSONL", "not even read", TraceFormat::Mooncake),
        ] {
            let f = TempFile::new(name, contents.as_bytes());
            assert_eq!(detect_format(&f.0).unwrap(), format, "{contents}");
        }
        let f = TempFile::new("d.csv", b"");
        let msg = detect_format(&f.0).unwrap_err().to_string();
        assert!(msg.contains("d.csv:1: no rows"), "{msg}");
    }

    // ---- parsing details -----------------------------------------------------------------

    #[test]
    fn days_from_civil_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2023, 11, 16), 19_677);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert_eq!(
            days_from_civil(2024, 3, 1) - days_from_civil(2024, 2, 28),
            2
        );
        assert_eq!(
            days_from_civil(2023, 3, 1) - days_from_civil(2023, 2, 28),
            1
        );
        assert_eq!(
            days_from_civil(2100, 3, 1) - days_from_civil(2100, 2, 28),
            1
        );
    }

    #[test]
    fn azure_time_rollovers_and_fraction_digits() {
        let t = |s: &str| parse_azure_time(s.as_bytes()).unwrap();
        assert_eq!(
            t("2023-12-31 23:59:59.9") + 200_000_000,
            t("2024-01-01 00:00:00.1")
        );
        assert_eq!(
            t("2024-02-28 12:00:00") + 2 * 86_400_000_000_000,
            t("2024-03-01T12:00:00")
        );
        assert_eq!(
            t("2023-11-16 18:17:04.0319600") - t("2023-11-16 18:17:03.9799600"),
            52_000_000
        );
        assert_eq!(t("1970-01-01 00:00:00"), 0);
        for (digits, ns) in [
            ("", 0),
            (".", 0),
            (".5", 500_000_000),
            (".0000001", 100),
            (".123456789", 123_456_789),
        ] {
            assert_eq!(t(&format!("1970-01-01 00:00:00{digits}")), ns, "{digits}");
        }
        for bad in [
            "2023-11-16",
            "2023-11-16 18:17:03,5",
            "2023-11-16 18:17:03.5x",
            "2023/11/16 18:17:03",
            "2023-11-16 18:17:60",
            "2023-00-10 00:00:00",
            "+023-11-16 18:17:03",
        ] {
            assert_eq!(parse_azure_time(bad.as_bytes()), None, "{bad}");
        }
        // A trace spanning midnight and a month end re-bases across the rollover.
        let f = TempFile::new(
            "r.csv",
            b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-30 23:59:59.5000000,1,1\n2023-12-01 00:00:00.2500000,1,1\n",
        );
        let rows = read_trace(&f.0, TraceFormat::Azure).unwrap();
        assert_eq!((rows[0].arrival_ns, rows[1].arrival_ns), (0, 750_000_000));
    }

    #[test]
    fn seconds_round_to_nearest_ns() {
        assert_eq!(parse_seconds_ns(b"5.8926549999999995"), Some(5_892_655_000));
        assert_eq!(parse_seconds_ns(b"0.052"), Some(52_000_000));
        assert_eq!(parse_seconds_ns(b"1e-3"), Some(1_000_000));
        assert_eq!(parse_seconds_ns(b"-0.0"), Some(0));
        for bad in [&b"inf"[..], b"-1", b"1e30", b"", b"1s"] {
            assert_eq!(parse_seconds_ns(bad), None);
        }
        assert_eq!(
            json_ms_to_ns(&serde_json::json!(2.0000004)),
            Some(2_000_000)
        );
        assert_eq!(json_ms_to_ns(&serde_json::json!(u64::MAX)), None);
    }

    #[test]
    fn percentile_is_numpy_linear() {
        let v = [1, 2, 3, 4];
        assert_eq!(percentile_sorted(&v, 0.5), 2.5);
        assert!((percentile_sorted(&v, 0.9) - 3.7).abs() < 1e-12);
        assert_eq!(percentile_sorted(&v, 0.0), 1.0);
        assert_eq!(percentile_sorted(&v, 1.0), 4.0);
        assert_eq!(percentile_sorted(&[7], 0.99), 7.0);
        assert!(percentile_sorted(&[], 0.5).is_nan());
        let s = length_stats([10, 1, 4, 3, 2]);
        assert_eq!((s.mean, s.p50, s.max), (4.0, 3.0, 10));
    }

    #[test]
    fn stats_display_and_rate() {
        let row = |ms: u64, i, o| TraceRow {
            arrival_ns: ms * 1_000_000,
            input_tokens: i,
            output_tokens: o,
            hash_ids: vec![],
        };
        let s = trace_stats(&[row(1000, 10, 1), row(2000, 20, 2), row(3000, 30, 3)]);
        assert_eq!((s.rows, s.span_s, s.mean_rate_per_s), (3, 2.0, 1.0));
        let text = s.to_string();
        for needle in [
            "rows       3",
            "span       2.000 s",
            "1.000 req/s",
            "input",
            "20.0",
            "30",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
        let one = trace_stats(&[row(5, 1, 1)]);
        assert!(one.mean_rate_per_s.is_nan());
        assert!(one.to_string().contains("n/a"));
    }

    #[test]
    fn trace_format_names() {
        for f in TraceFormat::ALL {
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("\"{f}\""));
            assert_eq!(f.name().parse::<TraceFormat>().unwrap(), f);
        }
        assert!(
            "json"
                .parse::<TraceFormat>()
                .unwrap_err()
                .contains("mooncake")
        );
    }
}
