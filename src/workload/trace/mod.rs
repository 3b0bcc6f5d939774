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
//!
//! # Streaming
//!
//! [`TraceReader`] yields rows one at a time from any [`BufRead`], holding one line (JSON
//! lines) or one record plus the CSV parser's read-ahead (CSV), so a trace can be replayed
//! without holding it whole; [`read_trace`] collects it. No line may exceed
//! [`MAX_LINE_BYTES`] (1 MiB): a file without line ends (`/dev/zero`) is rejected after
//! 1 MiB rather than read until memory runs out.
//!
//! # Files
//!
//! One file per format ([`mooncake`], [`azure`], [`vidur`], and [`csv`], which also holds
//! the CSV machinery the three CSV formats share), plus `error` (the error type), `fields`
//! (field parsers and row checks), `lines` (bounded line reading), `stats`, and [`answers`]
//! (the ids of the blocks each row's output completes, for the decode side's offload).

pub mod answers;
mod azure;
mod csv;
mod error;
mod fields;
mod lines;
mod mooncake;
mod stats;
mod vidur;

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use error::TraceError;
pub use lines::MAX_LINE_BYTES;
pub use stats::{LengthStats, TraceStats, length_stats, percentile_sorted, trace_stats};

use csv::CsvTraceReader;
use error::describe_line;
use lines::{LineRead, read_line_bounded};
use mooncake::MooncakeReader;

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

pub use crate::config::TraceRow;

/// Streams the rows of a trace from any [`BufRead`], in file order, one at a time: the
/// reader holds one line (JSON lines) or one record plus the CSV parser's read-ahead (CSV),
/// never the whole trace. Yields `Err` at most once, then ends; a trace without rows ends
/// with [`TraceError::Empty`]. Rows and errors are exactly those of [`read_trace`].
pub struct TraceReader<R> {
    inner: Reader<R>,
    /// Set after the end or an error, so that the iterator is fused.
    done: bool,
}

enum Reader<R> {
    Mooncake(MooncakeReader<R>),
    /// Boxed: the CSV reader's state is several times the JSON-lines reader's.
    Csv(Box<CsvTraceReader<R>>),
}

impl TraceReader<BufReader<File>> {
    /// Open `path` to stream it as `format`.
    pub fn open(path: &Path, format: TraceFormat) -> Result<Self, TraceError> {
        let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
        Self::new(path, BufReader::new(file), format)
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Stream `reader` as `format`; `path` names the source in errors. A CSV header is read
    /// here, so a missing column is reported before any row.
    pub fn new(path: &Path, reader: R, format: TraceFormat) -> Result<Self, TraceError> {
        let inner = match format {
            TraceFormat::Mooncake => Reader::Mooncake(MooncakeReader::new(path, reader)),
            TraceFormat::Azure | TraceFormat::Vidur | TraceFormat::Csv => {
                Reader::Csv(Box::new(CsvTraceReader::new(path, reader, format)?))
            }
        };
        Ok(TraceReader { inner, done: false })
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceRow, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = match &mut self.inner {
            Reader::Mooncake(r) => r.next_row(),
            Reader::Csv(r) => r.next_row(),
        };
        self.done = !matches!(next, Ok(Some(_)));
        next.transpose()
    }
}

impl<R: BufRead> std::iter::FusedIterator for TraceReader<R> {}

/// Read a whole trace. Rows come back in file order; see the module docs for what is
/// accepted and for the errors. Built on [`TraceReader`].
pub fn read_trace(path: &Path, format: TraceFormat) -> Result<Vec<TraceRow>, TraceError> {
    TraceReader::open(path, format)?.collect()
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
        Sniffed::Trace(format) => TraceReader::open(path, format)?
            .map(|r| r.map(|r| (r.input_tokens, r.output_tokens)))
            .collect(),
        Sniffed::LengthsOnly(_) => {
            let file = File::open(path).map_err(|e| TraceError::io(path, e))?;
            vidur::read_lengths_csv(path, BufReader::new(file))
        }
        Sniffed::Unknown(header) => Err(TraceError::UnknownFormat {
            path: path.to_path_buf(),
            header,
            hint: "expected a trace (.jsonl, or a CSV with a `TIMESTAMP`, \
                   `arrived_at` or `arrival_s` column) or a lengths-only CSV with \
                   `num_prefill_tokens,num_decode_tokens`",
        }),
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
    let io = |source| TraceError::io(path, source);
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    // The first non-blank line (blank lines are skipped by the CSV reader too), bounded so
    // that a file without line ends is not read whole.
    let mut line = Vec::new();
    let mut line_no = 0;
    loop {
        line_no += 1;
        match read_line_bounded(&mut reader, &mut line).map_err(io)? {
            LineRead::Eof => {
                return Err(TraceError::Empty {
                    path: path.to_path_buf(),
                    line: 1,
                    detail: "the file is empty",
                });
            }
            LineRead::TooLong => {
                return Err(TraceError::LineTooLong {
                    path: path.to_path_buf(),
                    line: line_no,
                    limit: MAX_LINE_BYTES,
                });
            }
            LineRead::Terminated | LineRead::Unterminated => {}
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
        Sniffed::LengthsOnly(describe_line(text.as_bytes()))
    } else {
        Sniffed::Unknown(describe_line(text.as_bytes()))
    })
}

#[cfg(test)]
pub(super) mod testutil {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{TraceFormat, TraceStats, detect_format, read_trace, trace_stats};

    /// A file of the shared trace folder (`/work/shared/traces`, beside the repository).
    pub fn shared(name: &str) -> PathBuf {
        crate::shared_path("traces").join(name)
    }

    /// A uniquely named file in the temp dir, removed on drop.
    pub struct TempFile(pub PathBuf);

    impl TempFile {
        pub fn new(name: &str, contents: &[u8]) -> Self {
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

    /// Statistics of a shared trace, checking that its format is detected.
    pub fn stats_of(name: &str, format: TraceFormat) -> TraceStats {
        let path = shared(name);
        assert_eq!(detect_format(&path).unwrap(), format, "{name}");
        trace_stats(&read_trace(&path, format).unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::{TempFile, shared};
    use super::*;

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
            // The file and what was expected are named; its header is not shown (issue 40).
            let msg = detect_format(&shared(file)).unwrap_err().to_string();
            assert!(msg.contains(file) && !msg.contains(header), "{msg}");
            assert!(
                msg.contains("expected") || msg.contains("lengths-only"),
                "{msg}"
            );
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
        assert!(msg.contains("l.csv:1") && !msg.contains("x,y"), "{msg}");
    }

    /// Issue 40: a file that is not a trace (a secrets file) is refused naming the file, the
    /// line and what was expected, and nothing it holds is printed, in every format.
    #[test]
    fn a_non_trace_file_is_refused_without_echoing_it() {
        let secret = "SECRET_TOKEN=hunter2";
        for (name, body) in [
            ("s.env", format!("{secret}\nmore\n")),
            ("s.jsonl", format!("{{\"timestamp\": \"{secret}\"}}\n")),
            (
                "s.json",
                format!("{{\"{secret}\": 1, \"timestamp\": [\"{secret}\"]}}\n"),
            ),
            (
                "s.csv",
                format!("arrival_s,input_tokens,output_tokens\n0,{secret},5\n"),
            ),
        ] {
            let f = TempFile::new(name, body.as_bytes());
            let mut msgs = vec![];
            msgs.extend(read_lengths(&f.0).err().map(|e| e.to_string()));
            for fmt in [
                TraceFormat::Mooncake,
                TraceFormat::Azure,
                TraceFormat::Vidur,
                TraceFormat::Csv,
            ] {
                msgs.extend(read_trace(&f.0, fmt).err().map(|e| e.to_string()));
            }
            msgs.extend(detect_format(&f.0).err().map(|e| e.to_string()));
            assert!(!msgs.is_empty(), "{name}");
            for m in msgs {
                assert!(
                    !m.contains("SECRET") && !m.contains("hunter2"),
                    "{name}: {m}"
                );
                assert!(m.contains(name) && m.contains(':'), "{name}: {m}");
            }
        }
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
            "`ContextTokens` = a text of 3 bytes (not shown)",
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
            "`hash_ids` = a text of 3 bytes (not shown)",
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
            "`input_length` = a text of 4 bytes (not shown)",
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
            "`num_decode_tokens` = a text of 1 byte (not shown)",
        ),
        // unknown format
        (
            "u.csv",
            "when,in,out\n0,1,1\n",
            None,
            1,
            "the first line is a line of 11 bytes (not shown)",
        ),
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

    // ---- streaming -----------------------------------------------------------------------

    /// A `Read` that counts the bytes handed out, to see how far a reader has read.
    struct Counted<R> {
        inner: R,
        bytes: std::rc::Rc<std::cell::Cell<u64>>,
    }

    impl<R: std::io::Read> std::io::Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.bytes.set(self.bytes.get() + n as u64);
            Ok(n)
        }
    }

    #[test]
    fn streaming_yields_the_rows_of_the_whole_file_loader() {
        for (file, format, rows) in [
            ("conversation_trace.jsonl", TraceFormat::Mooncake, 12_031),
            ("AzureLLMInferenceTrace_code.csv", TraceFormat::Azure, 8_819),
            ("splitwise_conv.csv", TraceFormat::Vidur, 19_366),
        ] {
            let path = shared(file);
            let whole = read_trace(&path, format).unwrap();
            assert_eq!(whole.len(), rows, "{file}");
            // From memory through a 7-byte buffer: every line and record crosses a refill.
            let data = std::fs::read(&path).unwrap();
            let small = BufReader::with_capacity(7, &data[..]);
            let streamed: Vec<TraceRow> = TraceReader::new(&path, small, format)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(streamed == whole, "{file}: streamed rows differ");

            // Replaying the first rows reads only the start of the file.
            let bytes = std::rc::Rc::new(std::cell::Cell::new(0));
            let counted = Counted {
                inner: File::open(&path).unwrap(),
                bytes: bytes.clone(),
            };
            let mut reader = TraceReader::new(&path, BufReader::new(counted), format).unwrap();
            let first: Vec<TraceRow> = reader.by_ref().take(10).map(Result::unwrap).collect();
            assert_eq!(first, whole[..10], "{file}");
            assert!(
                bytes.get() < 64 * 1024 && (bytes.get() as usize) < data.len() / 4,
                "{file}: read {} of {} bytes for 10 rows",
                bytes.get(),
                data.len()
            );
            assert_eq!(reader.count(), rows - 10, "{file}");
        }
    }

    #[test]
    fn streaming_errors_once_then_ends() {
        let f = TempFile::new(
            "s.csv",
            b"arrival_s,input_tokens,output_tokens\n0,1,1\n0,0,1\n",
        );
        let mut r = TraceReader::open(&f.0, TraceFormat::Csv).unwrap();
        assert!(r.next().unwrap().is_ok());
        let err = r.next().unwrap().unwrap_err().to_string();
        assert!(err.contains("s.csv:3: invalid `input_tokens`"), "{err}");
        assert!(r.next().is_none());
        let f = TempFile::new("s.csv", b"arrival_s,input_tokens,output_tokens\n");
        let mut r = TraceReader::open(&f.0, TraceFormat::Csv).unwrap();
        let err = r.next().unwrap().unwrap_err().to_string();
        assert!(err.contains("s.csv:2: no rows: only a header"), "{err}");
        assert!(r.next().is_none());
    }

    #[test]
    fn a_line_over_1_mib_is_an_error_naming_file_and_line() {
        let long = "9".repeat(MAX_LINE_BYTES + 1);
        let want = |name: &str, line: u64| {
            format!("{name}:{line}: line is longer than 1048576 bytes: expected a text trace")
        };
        let csv = format!("arrival_s,input_tokens,output_tokens\n0,1,1\n\n0,{long},1\n");
        let f = TempFile::new("long.csv", csv.as_bytes());
        for err in [
            read_trace(&f.0, TraceFormat::Csv).unwrap_err(),
            read_lengths(&f.0).unwrap_err(),
        ] {
            let msg = err.to_string();
            assert!(msg.contains(&want("long.csv", 4)), "{msg}");
        }
        let jsonl = format!(
            "{{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}}\r\n\n{long}"
        );
        let f = TempFile::new("long.jsonl", jsonl.as_bytes());
        let msg = read_trace(&f.0, TraceFormat::Mooncake)
            .unwrap_err()
            .to_string();
        assert!(msg.contains(&want("long.jsonl", 3)), "{msg}");
        let f = TempFile::new("long", format!("\n{long}").as_bytes());
        let msg = detect_format(&f.0).unwrap_err().to_string();
        assert!(msg.contains(&want("long", 2)), "{msg}");
        // Exactly the cap is still a line.
        let at_cap = format!(
            "arrival_s,input_tokens,output_tokens\n0,1,1,{}\n",
            "x".repeat(MAX_LINE_BYTES - 8)
        );
        let f = TempFile::new("cap.csv", at_cap.as_bytes());
        assert_eq!(read_trace(&f.0, TraceFormat::Csv).unwrap().len(), 1);
    }

    #[test]
    fn dev_zero_is_rejected_after_1_mib() {
        let zero = Path::new("/dev/zero");
        if !zero.exists() {
            return;
        }
        let msg = detect_format(zero).unwrap_err().to_string();
        assert!(msg.contains("/dev/zero:1: line is longer than"), "{msg}");
        for format in TraceFormat::ALL {
            let err = read_trace(zero, format).unwrap_err();
            assert!(
                matches!(err, TraceError::LineTooLong { line: 1, .. }),
                "{format}: {err}"
            );
        }
    }
}
