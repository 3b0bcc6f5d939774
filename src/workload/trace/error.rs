//! [`TraceError`], the one error type of every trace reader, and the helpers that render
//! a bad value into a one-line message.

use std::path::{Path, PathBuf};

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
    /// A line longer than [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES). Trace lines are a few
    /// hundred bytes; a longer one means the file is not a trace (`/dev/zero`, a binary),
    /// and reading on would only grow the line buffer until memory runs out.
    #[error(
        "{path}:{line}: line is longer than {limit} bytes: expected a text trace with one \
         request per line"
    )]
    LineTooLong {
        path: PathBuf,
        line: u64,
        /// The bound, in bytes.
        limit: usize,
    },
    /// [`detect_format`](super::detect_format) / [`read_lengths`](super::read_lengths) did
    /// not recognise the file.
    #[error("{path}:1: unknown trace format, the first line is {header}: {hint}")]
    UnknownFormat {
        path: PathBuf,
        /// The first line described, never shown ([`describe_line`]).
        header: String,
        hint: &'static str,
    },
}

impl TraceError {
    /// An I/O error while opening or reading `path`.
    pub(super) fn io(path: &Path, source: std::io::Error) -> Self {
        TraceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A field's text for an error message. A trace's fields are numbers, dates and block ids,
/// so a value made only of their characters (`-5`, `1e300`, `NaN`, `12.5`,
/// `2023-11-16 18:17:03.0`, `1 2 3`) is quoted as it is; anything else is described by its length, never shown: the file given as a trace
/// may not be one (a secrets file, a key), and an error must not print its contents
/// (issue 40). Short either way, so the message stays on one line.
pub(super) fn show(bytes: &[u8]) -> String {
    const MAX: usize = 32;
    if bytes.is_empty() {
        return "(empty)".to_string();
    }
    let numeric = |t: &str| {
        let lower = t.to_ascii_lowercase();
        let word = lower.trim_start_matches(['+', '-']);
        matches!(word, "nan" | "inf" | "infinity")
            || t.bytes()
                .all(|b| b.is_ascii_digit() || b"+-.eE_: TZ/".contains(&b))
    };
    match std::str::from_utf8(bytes) {
        Ok(t) if t.len() <= MAX && numeric(t) => format!("`{t}`"),
        _ if bytes.len() == 1 => "a text of 1 byte (not shown)".to_string(),
        _ => format!("a text of {} bytes (not shown)", bytes.len()),
    }
}

/// A line that is not what was expected, described without its contents (see [`show`]).
pub(super) fn describe_line(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        "an empty line".to_string()
    } else {
        format!("a line of {} bytes (not shown)", bytes.len())
    }
}

/// serde_json's message with every quoted string (a value from the file) elided, and every
/// backquoted name not among `keys` (the format's own) too: `invalid type: string "…",
/// expected u64` keeps its meaning without echoing the file.
pub(super) fn redact_json_message(m: &str, keys: &[&str]) -> String {
    let mut out = String::with_capacity(m.len());
    let mut chars = m.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                for d in chars.by_ref() {
                    if d == '"' {
                        break;
                    }
                }
                out.push_str("\"…\"");
            }
            '`' => {
                let mut name = String::new();
                for d in chars.by_ref() {
                    if d == '`' {
                        break;
                    }
                    name.push(d);
                }
                if keys.contains(&name.as_str()) {
                    out.push('`');
                    out.push_str(&name);
                    out.push('`');
                } else {
                    out.push_str("`…`");
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// `ns` as seconds with all nine decimals, e.g. `0.500000000 s`.
pub(super) fn fmt_ns(ns: u128) -> String {
    format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// A [`TraceError::BadValue`] for the text `raw` of `field`.
pub(super) fn bad(
    path: &Path,
    line: u64,
    field: &'static str,
    raw: &[u8],
    expected: &str,
) -> TraceError {
    TraceError::BadValue {
        path: path.to_path_buf(),
        line,
        field,
        value: show(raw),
        expected: expected.to_string(),
    }
}
