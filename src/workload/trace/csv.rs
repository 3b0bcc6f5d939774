//! The CSV machinery shared by the Azure, Vidur and pdsim CSV formats ([`CsvFile`]: header,
//! columns by name, our own line numbers), the streaming row reader over it, and the pdsim
//! generic CSV's own columns (`arrival_s,input_tokens,output_tokens[,hash_ids]`, and optional
//! `session_id`, `turn` and `timeout_s` in any of the CSV formats).

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::{TraceError, bad};
use super::fields::{AZURE_COLUMNS, Clock, CsvColumns, VIDUR_COLUMNS};
use super::fields::{
    Order, SECONDS_EXPECTED, SESSION_EXPECTED, TIMEOUT_EXPECTED, TOKENS_EXPECTED, TURN_EXPECTED,
    Turns, check_hash_len, parse_seconds_ns, parse_timeout_ns, parse_tokens,
};
use super::lines::{CountingReader, LineTooLong, MAX_LINE_BYTES};
use super::{HASH_BLOCK_TOKENS, TraceFormat, TraceRow, azure};

/// The pdsim generic CSV.
pub(super) const COLUMNS: CsvColumns = CsvColumns {
    arrival: "arrival_s",
    input: "input_tokens",
    output: "output_tokens",
    hash_ids: Some("hash_ids"),
    clock: Clock::Seconds,
};

fn columns(format: TraceFormat) -> &'static CsvColumns {
    match format {
        TraceFormat::Azure => &AZURE_COLUMNS,
        TraceFormat::Vidur => &VIDUR_COLUMNS,
        TraceFormat::Csv => &COLUMNS,
        TraceFormat::Mooncake => unreachable!("Mooncake traces are JSON lines, not CSV"),
    }
}

/// A CSV reader plus its header, with the error plumbing shared by the CSV formats.
pub(super) struct CsvFile<R> {
    path: PathBuf,
    reader: csv::Reader<CountingReader<R>>,
    header: csv::ByteRecord,
    header_line: u64,
    /// Line numbering state: `line` is the 1-based line of absolute byte offset `counted`.
    counted: u64,
    line: u64,
    /// Absolute byte offset where the reader stopped after the previous record.
    end: u64,
}

impl<R: Read> CsvFile<R> {
    pub(super) fn open(path: &Path, source: R) -> Result<Self, TraceError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(true)
            // Short rows are reported by us, naming the missing column.
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(CountingReader::new(source));
        let header = match reader.byte_headers() {
            Ok(h) => h.clone(),
            Err(e) => return Err(csv_error(path, e, 1)),
        };
        if header.is_empty() || (header.len() == 1 && header[0].is_empty()) {
            return Err(TraceError::Empty {
                path: path.to_path_buf(),
                line: 1,
                detail: "the file is empty (not even a header)",
            });
        }
        let mut file = CsvFile {
            path: path.to_path_buf(),
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
    /// by the reader). Counting is incremental over the [`CountingReader`]'s window of the
    /// bytes read, so a whole file costs one pass and the window stays about one record.
    fn record_line(&mut self) -> u64 {
        let prev_end = self.end;
        self.end = self.reader.position().byte();
        let src = self.reader.get_mut();
        let (base, data) = (src.base, &src.window);
        let total = base + data.len() as u64;
        // `counted ≤ prev_end` and the window is never trimmed past `counted`.
        let at = |abs: u64| (abs - base) as usize;
        let from = prev_end.min(total);
        let start = data[at(from)..]
            .iter()
            .position(|&b| b != b'\n' && b != b'\r')
            .map_or(total, |i| from + i as u64);
        for i in self.counted..start {
            // A line ends at `\n`, or at a `\r` not followed by `\n` (old Mac line ends).
            let b = data[at(i)];
            if b == b'\n' || (b == b'\r' && data.get(at(i) + 1) != Some(&b'\n')) {
                self.line += 1;
            }
        }
        self.counted = self.counted.max(start);
        src.trim(self.counted);
        self.line
    }

    pub(super) fn column(&self, name: &'static str) -> Result<usize, TraceError> {
        self.optional_column(name)
            .ok_or_else(|| TraceError::MissingField {
                path: self.path.clone(),
                line: self.header_line,
                field: name,
                detail: format!(
                    "the header, {} columns, has no column of that name",
                    self.header.len()
                ),
            })
    }

    pub(super) fn optional_column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name.as_bytes())
    }

    /// Next record into `rec`: `Ok(Some(line))` with its 1-based line, `Ok(None)` at EOF.
    pub(super) fn next(&mut self, rec: &mut csv::ByteRecord) -> Result<Option<u64>, TraceError> {
        match self.reader.read_byte_record(rec) {
            Ok(true) => Ok(Some(self.record_line())),
            Ok(false) => Ok(None),
            Err(e) => Err(csv_error(&self.path, e, self.line)),
        }
    }

    pub(super) fn field<'r>(
        &self,
        rec: &'r csv::ByteRecord,
        line: u64,
        col: usize,
        name: &'static str,
    ) -> Result<&'r [u8], TraceError> {
        rec.get(col).ok_or_else(|| TraceError::MissingField {
            path: self.path.clone(),
            line,
            field: name,
            detail: format!(
                "the row has {} fields, the header has {}",
                rec.len(),
                self.header.len()
            ),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn empty_error(&self) -> TraceError {
        TraceError::Empty {
            path: self.path.clone(),
            line: self.header_line + 1,
            detail: "only a header",
        }
    }
}

/// A csv crate error as ours: a read error (or our over-long-line guard, which travels
/// inside an `io::Error`) keeps its own variant; the rest is malformed CSV.
fn csv_error(path: &Path, e: csv::Error, fallback_line: u64) -> TraceError {
    let line = e.position().map_or(fallback_line, |p| p.line());
    let message = e.to_string();
    match e.into_kind() {
        csv::ErrorKind::Io(io) => {
            match io.get_ref().and_then(|i| i.downcast_ref::<LineTooLong>()) {
                Some(long) => TraceError::LineTooLong {
                    path: path.to_path_buf(),
                    line: long.line,
                    limit: MAX_LINE_BYTES,
                },
                None => TraceError::io(path, io),
            }
        }
        _ => TraceError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        },
    }
}

/// Streams the rows of a CSV trace (Azure, Vidur or pdsim CSV), one record in memory.
pub(super) struct CsvTraceReader<R> {
    file: CsvFile<R>,
    names: &'static CsvColumns,
    arrival_col: usize,
    input_col: usize,
    output_col: usize,
    hash_col: Option<(usize, &'static str)>,
    /// Optional `session_id` and `turn` columns.
    session_col: Option<usize>,
    turn_col: Option<usize>,
    /// Optional `timeout_s` column: the client's deadline.
    timeout_col: Option<usize>,
    turns: Turns,
    rec: csv::ByteRecord,
    order: Order,
    /// Azure: the first row's absolute time, in ns since 1970.
    azure_base: Option<i128>,
    rows: u64,
}

impl<R: Read> CsvTraceReader<R> {
    /// Reads the header and finds the columns; errors name the header.
    pub(super) fn new(path: &Path, source: R, format: TraceFormat) -> Result<Self, TraceError> {
        let names = columns(format);
        let file = CsvFile::open(path, source)?;
        let arrival_col = file.column(names.arrival)?;
        let input_col = file.column(names.input)?;
        let output_col = file.column(names.output)?;
        let hash_col = names
            .hash_ids
            .and_then(|n| file.optional_column(n).map(|c| (c, n)));
        let session_col = file.optional_column("session_id");
        let turn_col = file.optional_column("turn");
        let timeout_col = file.optional_column("timeout_s");
        Ok(CsvTraceReader {
            file,
            names,
            arrival_col,
            input_col,
            output_col,
            hash_col,
            session_col,
            turn_col,
            timeout_col,
            turns: Turns::default(),
            rec: csv::ByteRecord::new(),
            order: Order::default(),
            azure_base: None,
            rows: 0,
        })
    }

    /// The next row, `Ok(None)` at the end; a file without rows is an error at its end.
    pub(super) fn next_row(&mut self) -> Result<Option<TraceRow>, TraceError> {
        let Some(line) = self.file.next(&mut self.rec)? else {
            return if self.rows == 0 {
                Err(self.file.empty_error())
            } else {
                Ok(None)
            };
        };
        self.rows += 1;
        self.parse_row(line).map(Some)
    }

    fn parse_row(&mut self, line: u64) -> Result<TraceRow, TraceError> {
        let (file, rec, names) = (&self.file, &self.rec, self.names);
        let path = file.path();
        let raw_t = file.field(rec, line, self.arrival_col, names.arrival)?;
        // Time as i128 ns, relative to the first row for Azure (which is absolute).
        let t: i128 = match names.clock {
            Clock::AzureDateTime => {
                let abs = azure::parse_azure_time(raw_t).ok_or_else(|| {
                    bad(path, line, names.arrival, raw_t, azure::AZURE_TIME_EXPECTED)
                })?;
                abs - *self.azure_base.get_or_insert(abs)
            }
            Clock::Seconds => {
                let ns = parse_seconds_ns(raw_t)
                    .ok_or_else(|| bad(path, line, names.arrival, raw_t, SECONDS_EXPECTED))?;
                i128::from(ns)
            }
        };
        self.order.check(path, line, names.arrival, || raw_t, t)?;
        let arrival_ns = u64::try_from(t).map_err(|_| {
            bad(
                path,
                line,
                names.arrival,
                raw_t,
                "a time within 584 years of the first row",
            )
        })?;

        let raw_in = file.field(rec, line, self.input_col, names.input)?;
        let input_tokens = parse_tokens(raw_in)
            .ok_or_else(|| bad(path, line, names.input, raw_in, TOKENS_EXPECTED))?;
        let raw_out = file.field(rec, line, self.output_col, names.output)?;
        let output_tokens = parse_tokens(raw_out)
            .ok_or_else(|| bad(path, line, names.output, raw_out, TOKENS_EXPECTED))?;

        let mut hash_ids = Vec::new();
        if let Some((col, name)) = self.hash_col {
            let raw = file.field(rec, line, col, name)?;
            if !raw.is_empty() {
                hash_ids = parse_hash_ids(path, line, name, raw, input_tokens)?;
                check_hash_len(path, line, names.input, input_tokens, &hash_ids)?;
            }
        }
        // An empty cell is a row outside any conversation.
        let mut session_id = None;
        if let Some(col) = self.session_col {
            let raw = file.field(rec, line, col, "session_id")?;
            if !raw.is_empty() {
                session_id = Some(
                    parse_u64(raw)
                        .ok_or_else(|| bad(path, line, "session_id", raw, SESSION_EXPECTED))?,
                );
            }
        }
        let mut turn = None;
        if let Some(col) = self.turn_col {
            let raw = file.field(rec, line, col, "turn")?;
            if !raw.is_empty() {
                let t = parse_u64(raw)
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(|| bad(path, line, "turn", raw, TURN_EXPECTED))?;
                if session_id.is_none() {
                    return Err(bad(
                        path,
                        line,
                        "turn",
                        raw,
                        "a `session_id` beside it (a turn of which conversation?)",
                    ));
                }
                turn = Some(t);
            }
        }
        if let Some(s) = session_id {
            turn = Some(self.turns.check(path, line, s, turn)?);
        }
        // An empty cell: this client gives no deadline of its own.
        let mut timeout_ns = None;
        if let Some(col) = self.timeout_col {
            let raw = file.field(rec, line, col, "timeout_s")?;
            if !raw.is_empty() {
                timeout_ns = Some(
                    parse_timeout_ns(raw)
                        .ok_or_else(|| bad(path, line, "timeout_s", raw, TIMEOUT_EXPECTED))?,
                );
            }
        }
        Ok(TraceRow {
            arrival_ns,
            input_tokens,
            output_tokens,
            hash_ids,
            session_id,
            turn,
            timeout_ns,
        })
    }
}

/// A decimal non-negative integer cell.
fn parse_u64(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse::<u64>().ok()
}

/// The generic CSV's `hash_ids` cell: space-separated block ids.
fn parse_hash_ids(
    path: &Path,
    line: u64,
    name: &'static str,
    raw: &[u8],
    input_tokens: u32,
) -> Result<Vec<u64>, TraceError> {
    let mut ids = Vec::with_capacity(input_tokens.div_ceil(HASH_BLOCK_TOKENS) as usize);
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
        ids.push(id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::TempFile;
    use super::super::{TraceFormat, TraceRow, detect_format, read_trace};

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
            session_id: None,
            turn: None,
            timeout_ns: None,
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
            msg.contains("q.csv:2: invalid `input_tokens` = a text of 3 bytes (not shown)"),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1);
        let long = format!(
            "arrival_s,input_tokens,output_tokens\n0,{},1\n",
            "9".repeat(500)
        );
        let f = TempFile::new("q.csv", long.as_bytes());
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(
            msg.contains("a text of 500 bytes (not shown)") && msg.len() < 300,
            "{msg}"
        );
        let f = TempFile::new("n.csv", b"\r\n\r\nx,y\r\n");
        let msg = read_trace(&f.0, TraceFormat::Csv).unwrap_err().to_string();
        assert!(
            msg.contains("n.csv:3: `arrival_s` is missing (the header, 2 columns,"),
            "{msg}"
        );
    }
}
