//! Mooncake JSON lines: one object per line with `timestamp` (ms from the trace start),
//! `input_length`, `output_length` and `hash_ids` (required), and pdsim's optional
//! `session_id`, `turn` and `timeout_s`, read one line at a time.

use std::fmt;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::TraceRow;
use super::error::{TraceError, bad, describe_line, redact_json_message};
use super::fields::{
    Order, SESSION_EXPECTED, TIMEOUT_EXPECTED, TOKENS_EXPECTED, TURN_EXPECTED, Turns,
    check_hash_len, scaled_round, timeout_ns_of,
};
use super::lines::{LineRead, MAX_LINE_BYTES, read_line_bounded};

/// One JSON line. Scalars are kept as `Value` (no heap allocation for numbers) so that a
/// wrong type becomes our own error naming the key, rather than serde's message without it.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object with keys timestamp, input_length, output_length, hash_ids")]
struct MooncakeLine {
    timestamp: Option<Value>,
    input_length: Option<Value>,
    output_length: Option<Value>,
    hash_ids: Option<HashIds>,
    /// Optional: the conversation (a non-negative integer).
    session_id: Option<Value>,
    /// Optional: the turn in it, from 0.
    turn: Option<Value>,
    /// Optional: the client's deadline, seconds from arrival.
    timeout_s: Option<Value>,
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

/// Streams the rows of a Mooncake JSON-lines trace, one line in memory.
pub(super) struct MooncakeReader<R> {
    path: PathBuf,
    reader: R,
    buf: Vec<u8>,
    /// 1-based line number of the next line to read (lines end at `\n`).
    next_line: u64,
    /// Whether any byte was read: tells "the file is empty" from "only blank lines".
    any_bytes: bool,
    order: Order,
    turns: Turns,
    rows: u64,
}

impl<R: BufRead> MooncakeReader<R> {
    pub(super) fn new(path: &Path, reader: R) -> Self {
        MooncakeReader {
            path: path.to_path_buf(),
            reader,
            buf: Vec::new(),
            next_line: 1,
            any_bytes: false,
            order: Order::default(),
            turns: Turns::default(),
            rows: 0,
        }
    }

    /// The next row, `Ok(None)` at the end; a file without rows is an error at its end.
    pub(super) fn next_row(&mut self) -> Result<Option<TraceRow>, TraceError> {
        loop {
            let read = read_line_bounded(&mut self.reader, &mut self.buf)
                .map_err(|e| TraceError::io(&self.path, e))?;
            let line = self.next_line;
            match read {
                LineRead::Eof => return self.end(),
                LineRead::TooLong => {
                    return Err(TraceError::LineTooLong {
                        path: self.path.clone(),
                        line,
                        limit: MAX_LINE_BYTES,
                    });
                }
                LineRead::Terminated => self.next_line += 1,
                LineRead::Unterminated => {}
            }
            let first = !self.any_bytes;
            self.any_bytes = true;
            let mut raw_line = &self.buf[..];
            if first {
                // Tolerate a UTF-8 byte-order mark, as the CSV reader does.
                raw_line = raw_line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw_line);
            }
            if raw_line.trim_ascii().is_empty() {
                continue;
            }
            let row = parse_line(
                &self.path,
                line,
                raw_line,
                (&mut self.order, &mut self.turns),
            )?;
            self.rows += 1;
            return Ok(Some(row));
        }
    }

    fn end(&self) -> Result<Option<TraceRow>, TraceError> {
        if self.rows > 0 {
            return Ok(None);
        }
        Err(TraceError::Empty {
            path: self.path.clone(),
            // The line after the last `\n`, where a row was still expected.
            line: self.next_line,
            detail: if self.any_bytes {
                "only blank lines"
            } else {
                "the file is empty"
            },
        })
    }
}

/// One non-blank line (without its `\n`) into a row.
fn parse_line(
    path: &Path,
    line: u64,
    raw_line: &[u8],
    (order, turns): (&mut Order, &mut Turns),
) -> Result<TraceRow, TraceError> {
    // serde would also accept a positional array `[ts, in, out, [ids]]` for the struct;
    // the format is objects only.
    if raw_line.trim_ascii_start().first() != Some(&b'{') {
        return Err(TraceError::Json {
            path: path.to_path_buf(),
            line,
            column: raw_line.len() - raw_line.trim_ascii_start().len() + 1,
            message: format!(
                "expected a JSON object `{{...}}`, found {}",
                describe_line(raw_line.trim_ascii())
            ),
        });
    }
    let rec: MooncakeLine = serde_json::from_slice(raw_line).map_err(|e| {
        // serde_json appends " at line 1 column N"; we report our own line number.
        let mut message = e.to_string();
        if let Some(i) = message.rfind(" at line ") {
            message.truncate(i);
        }
        let keys = [
            "timestamp",
            "input_length",
            "output_length",
            "hash_ids",
            "session_id",
            "turn",
            "timeout_s",
        ];
        TraceError::Json {
            path: path.to_path_buf(),
            line,
            column: e.column(),
            message: redact_json_message(&message, &keys),
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
    let id = |field: &'static str, v: &Option<Value>| -> Result<Option<u64>, TraceError> {
        v.as_ref()
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| bad(path, line, field, &json_value_text(v), SESSION_EXPECTED))
            })
            .transpose()
    };
    let session_id = id("session_id", &rec.session_id)?;
    let turn = id("turn", &rec.turn)?
        .map(|t| {
            u32::try_from(t)
                .map_err(|_| bad(path, line, "turn", t.to_string().as_bytes(), TURN_EXPECTED))
        })
        .transpose()?;
    if turn.is_some() && session_id.is_none() {
        return Err(bad(
            path,
            line,
            "turn",
            &json_value_text(rec.turn.as_ref().expect("given")),
            "a `session_id` beside it (a turn of which conversation?)",
        ));
    }
    let turn = match session_id {
        Some(s) => Some(turns.check(path, line, s, turn)?),
        None => None,
    };
    // `null` is a row without a deadline, as an empty CSV cell is.
    let timeout_ns = match &rec.timeout_s {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_f64().and_then(timeout_ns_of).ok_or_else(|| {
            bad(
                path,
                line,
                "timeout_s",
                &json_value_text(v),
                TIMEOUT_EXPECTED,
            )
        })?),
    };
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

#[cfg(test)]
mod tests {
    use super::super::testutil::{TempFile, shared, stats_of};
    use super::super::{TraceFormat, read_trace};
    use super::*;

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

    #[test]
    fn milliseconds_round_to_nearest_ns() {
        assert_eq!(
            json_ms_to_ns(&serde_json::json!(2.0000004)),
            Some(2_000_000)
        );
        assert_eq!(json_ms_to_ns(&serde_json::json!(u64::MAX)), None);
    }
}
