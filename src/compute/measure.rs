//! Reading a user's measurements for `pdsim calibrate`: text in, [`StepPoint`]s out (the
//! command reads the files; this module only parses).
//!
//! Three shapes are recognised, by content:
//!
//! 1. **A step-time CSV** (a header naming `phase` and `time_ms`): the profile format of
//!    [`crate::compute::profile`] — `phase,tokens,batch_size,context_tokens,time_ms`. For a
//!    prefill row `batch_size`, when given, is the number of prompts sharing `tokens`
//!    (default 1); `context_tokens` is their cached prefix. For a decode row it is the batch
//!    and `context_tokens` the KV summed over it.
//! 2. **sglang `bench_one_batch` results** (JSON lines with `batch_size`, `input_len`,
//!    `output_len`, `prefill_latency` in seconds, `median_decode_latency` in seconds — what
//!    `python -m sglang.bench_one_batch --result-filename F` appends). A record gives a prefill
//!    point (one forward over `batch_size` prompts of `input_len`: bench_one_batch extends
//!    the whole batch at once) and a decode point (batch `batch_size` at the median step's
//!    context, `input_len + output_len / 2` per sequence).
//! 3. **sglang `bench_serving` results** (JSON lines with `median_itl_ms`, `completed`,
//!    `total_input_tokens`, `total_output_tokens` — what `--output-file F` appends). A record
//!    gives a decode point: the median inter-token latency is one decode step of the batch the
//!    server held, `request_throughput × (mean E2E − mean TTFT)` by Little's law (or
//!    `concurrency` when that is all there is), at the mean context `input + output / 2`. With
//!    `max_concurrency = 1` it also gives a TTFT point: the median TTFT is the tokenizer, one
//!    forward of the mean input and the first token's path to the client (`fit::Phase::Ttft`). Run it against **one** instance (one colocated server, or the decode
//!    server of a 1P1D pair for ITL), at a steady load.
//!
//! 4. **An sglang server log** (its `Prefill batch` / `Decode batch` lines) and 5. **scrapes of
//!    a running sglang's Prometheus `/metrics`**, one after another in a file: what a served
//!    deployment shows about its own steps ([`super::observe`], where each line's reading and
//!    what is left out are spelled out).
//!
//! Every error names the file, the line and the field, and what would be valid.

use super::fit::{Phase, StepPoint};
use super::observe::{self, Observed};

/// Parses one measurement file's text; `name` names it in origins and errors.
pub fn parse(name: &str, text: &str) -> Result<Vec<StepPoint>, String> {
    Ok(read(name, text)?.points)
}

/// Parses one measurement file's text — any of the shapes above or an sglang server log or
/// Prometheus scrapes ([`super::observe`]) — with a note for whatever a log or a scrape
/// series left out.
pub fn read(name: &str, text: &str) -> Result<Observed, String> {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| format!("{name}: empty file; expected a step-time CSV, sglang bench_one_batch / bench_serving JSON lines, an sglang server log or Prometheus scrapes of its /metrics"))?;
    let read = if first.starts_with('{') {
        Observed {
            points: parse_jsonl(name, text)?,
            notes: Vec::new(),
        }
    } else if observe::is_prometheus(first) {
        observe::parse_prometheus(name, text)?
    } else if observe::is_log(text) {
        observe::parse_log(name, text)?
    } else {
        Observed {
            points: parse_csv(name, text)?,
            notes: Vec::new(),
        }
    };
    if read.points.is_empty() {
        let why = if read.notes.is_empty() {
            String::new()
        } else {
            format!(": {}", read.notes.join("; "))
        };
        return Err(format!("{name}: no measurement in the file{why}"));
    }
    Ok(read)
}

/// What a file that is neither a step-time CSV nor JSON lines is told, after `{name}:1: ` and
/// before the header it has (kept out of the `format!` so its `{` needs no escape).
const NOT_A_STEP_CSV: &str = "not a step-time CSV (the header must name phase, tokens, \
     batch_size, context_tokens and time_ms), nor JSON lines (a line starting with '{'), nor an \
     sglang server log (`Prefill batch` / `Decode batch` lines), nor Prometheus scrapes (`# HELP`, \
     `sglang:` metrics); found: ";

fn parse_csv(name: &str, text: &str) -> Result<Vec<StepPoint>, String> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| format!("{name}:1: malformed CSV: {e}"))?;
    let cols = Columns::find(name, header)?;
    let mut out = Vec::new();
    for rec in reader.records() {
        let rec = rec.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            format!("{name}:{line}: malformed CSV: {e}")
        })?;
        let row = Row {
            name,
            line: rec.position().map_or(0, |p| p.line()),
            rec: &rec,
        };
        out.push(row.point(&cols)?);
    }
    Ok(out)
}

/// Where a step-time CSV's columns are: `phase` and `time_ms` are required (they are what
/// tells a step-time CSV from any other), the rest may be missing and read as empty cells.
struct Columns {
    phase: usize,
    time_ms: usize,
    tokens: Option<usize>,
    batch_size: Option<usize>,
    context_tokens: Option<usize>,
}

impl Columns {
    /// The columns the header names (a UTF-8 byte-order mark before the first is ignored), or
    /// the error for a file that is not a step-time CSV.
    fn find(name: &str, header: &csv::StringRecord) -> Result<Self, String> {
        let col = |c: &str| {
            header
                .iter()
                .position(|h| h.trim_start_matches('\u{feff}') == c)
        };
        let (Some(phase), Some(time_ms)) = (col("phase"), col("time_ms")) else {
            return Err(format!(
                "{name}:1: {NOT_A_STEP_CSV}{}",
                header.iter().collect::<Vec<_>>().join(",")
            ));
        };
        Ok(Self {
            phase,
            time_ms,
            tokens: col("tokens"),
            batch_size: col("batch_size"),
            context_tokens: col("context_tokens"),
        })
    }
}

/// One record of a step-time CSV with the file and line its errors name.
struct Row<'r> {
    name: &'r str,
    line: u64,
    rec: &'r csv::StringRecord,
}

impl Row<'_> {
    /// The cell of column `i`, empty when the header has no such column or the row is short.
    fn cell(&self, i: Option<usize>) -> &str {
        i.and_then(|i| self.rec.get(i)).unwrap_or("")
    }

    /// The integer ≥ `min` in column `i`, `None` for an empty cell.
    fn int(&self, i: Option<usize>, field: &str, min: u64) -> Result<Option<u64>, String> {
        let v = self.cell(i);
        if v.is_empty() {
            return Ok(None);
        }
        match v.parse::<u64>() {
            Ok(n) if n >= min => Ok(Some(n)),
            _ => Err(format!(
                "{}:{}: column `{field}` = {v:?}: expected an integer ≥ {min}",
                self.name, self.line
            )),
        }
    }

    /// The step time, a positive finite number of milliseconds.
    fn time_ms(&self, i: usize) -> Result<f64, String> {
        match self.cell(Some(i)).parse::<f64>() {
            Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
            _ => Err(format!(
                "{}:{}: column `time_ms` = {:?}: expected a positive number of milliseconds",
                self.name,
                self.line,
                self.cell(Some(i))
            )),
        }
    }

    /// The row as a measurement: the time and context first (checked whatever the phase),
    /// then the phase's own key — `tokens` (and the prompts sharing them) for a prefill,
    /// `batch_size` for a decode.
    fn point(&self, cols: &Columns) -> Result<StepPoint, String> {
        let (name, line) = (self.name, self.line);
        let ms = self.time_ms(cols.time_ms)?;
        let context_tokens = self
            .int(cols.context_tokens, "context_tokens", 0)?
            .unwrap_or(0);
        let origin = format!("{name}:{line}");
        let (phase, tokens, seqs) = match self.cell(Some(cols.phase)) {
            "prefill" => {
                let tokens = self.int(cols.tokens, "tokens", 1)?.ok_or_else(|| {
                    format!("{name}:{line}: a prefill row needs `tokens` (an integer ≥ 1)")
                })?;
                let seqs = self.int(cols.batch_size, "batch_size", 1)?.unwrap_or(1);
                (
                    Phase::Prefill,
                    to_u32(name, line, "tokens", tokens)?,
                    to_u32(name, line, "batch_size", seqs)?,
                )
            }
            "decode" => {
                let b = self.int(cols.batch_size, "batch_size", 1)?.ok_or_else(|| {
                    format!("{name}:{line}: a decode row needs `batch_size` (an integer ≥ 1)")
                })?;
                (Phase::Decode, 0, to_u32(name, line, "batch_size", b)?)
            }
            other => {
                return Err(format!(
                    "{name}:{line}: column `phase` = {other:?}: expected `prefill` or `decode`"
                ));
            }
        };
        Ok(StepPoint {
            phase,
            tokens,
            seqs,
            context_tokens,
            ms,
            origin,
        })
    }
}

fn to_u32(name: &str, line: u64, field: &str, v: u64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{name}:{line}: `{field}` = {v} is above {}", u32::MAX))
}

fn parse_jsonl(name: &str, text: &str) -> Result<Vec<StepPoint>, String> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i as u64 + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(raw)
            .map_err(|e| format!("{name}:{line}: not a JSON object: {e}"))?;
        let obj = v
            .as_object()
            .ok_or_else(|| format!("{name}:{line}: expected a JSON object per line"))?;
        let num = |k: &str| obj.get(k).and_then(serde_json::Value::as_f64);
        let need = |k: &str, what: &str| {
            num(k)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{name}:{line}: field `{k}`: expected {what}"))
        };
        if obj.contains_key("prefill_latency") || obj.contains_key("median_decode_latency") {
            bench_one_batch(name, line, &need, &mut out)?;
        } else if obj.contains_key("median_itl_ms") {
            bench_serving(name, line, &need, &num, &mut out)?;
        } else {
            return Err(format!(
                "{name}:{line}: neither a bench_one_batch record (prefill_latency, \
                 median_decode_latency) nor a bench_serving record (median_itl_ms)"
            ));
        }
    }
    Ok(out)
}

type Need<'a> = dyn Fn(&str, &str) -> Result<f64, String> + 'a;

fn bench_one_batch(
    name: &str,
    line: u64,
    need: &Need<'_>,
    out: &mut Vec<StepPoint>,
) -> Result<(), String> {
    let bs = need("batch_size", "a batch size ≥ 1")?.round() as u32;
    let input = need("input_len", "an input length ≥ 1")?.round() as u32;
    let output = need("output_len", "an output length ≥ 1")?.round() as u64;
    let prefill_s = need("prefill_latency", "seconds > 0")?;
    out.push(StepPoint {
        phase: Phase::Prefill,
        tokens: bs.saturating_mul(input),
        seqs: bs,
        context_tokens: 0,
        ms: prefill_s * 1e3,
        origin: format!("{name}:{line}:prefill_latency"),
    });
    if output > 1 {
        let decode_s = need("median_decode_latency", "seconds > 0 (output_len > 1)")?;
        out.push(StepPoint {
            phase: Phase::Decode,
            tokens: 0,
            seqs: bs,
            context_tokens: u64::from(bs) * (u64::from(input) + output / 2),
            ms: decode_s * 1e3,
            origin: format!("{name}:{line}:median_decode_latency"),
        });
    }
    Ok(())
}

fn bench_serving(
    name: &str,
    line: u64,
    need: &Need<'_>,
    num: &dyn Fn(&str) -> Option<f64>,
    out: &mut Vec<StepPoint>,
) -> Result<(), String> {
    let completed = need("completed", "the number of completed requests (≥ 1)")?;
    let input = need("total_input_tokens", "total input tokens (> 0)")? / completed;
    let output = need("total_output_tokens", "total output tokens (> 0)")? / completed;
    let itl = need("median_itl_ms", "milliseconds > 0")?;
    // Little's law on the decode phase; `concurrency` (mean requests in flight) as a fallback.
    let batch = match (
        num("request_throughput"),
        num("mean_e2e_latency_ms"),
        num("mean_ttft_ms"),
    ) {
        (Some(x), Some(e2e), Some(ttft)) if x > 0.0 && e2e > ttft => x * (e2e - ttft) / 1e3,
        _ => need(
            "concurrency",
            "mean concurrency (or request_throughput, mean_e2e_latency_ms and mean_ttft_ms)",
        )?,
    };
    let b = batch.round().max(1.0) as u32;
    out.push(StepPoint {
        phase: Phase::Decode,
        tokens: 0,
        seqs: b,
        context_tokens: (f64::from(b) * (input + output / 2.0)).round() as u64,
        ms: itl,
        origin: format!("{name}:{line}:median_itl_ms"),
    });
    if num("max_concurrency") == Some(1.0) {
        let ttft = need("median_ttft_ms", "milliseconds > 0")?;
        out.push(StepPoint {
            phase: Phase::Ttft,
            tokens: input.round().max(1.0) as u32,
            seqs: 1,
            context_tokens: 0,
            ms: ttft,
            origin: format!("{name}:{line}:median_ttft_ms"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_csv_rows_become_points() {
        let text = "phase,tokens,batch_size,context_tokens,time_ms\n\
                    prefill,4096,2,0,150\n\
                    decode,,32,65536,11\n";
        let p = parse("m.csv", text).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(
            (p[0].phase, p[0].tokens, p[0].seqs),
            (Phase::Prefill, 4096, 2)
        );
        assert_eq!(
            (p[1].phase, p[1].seqs, p[1].context_tokens),
            (Phase::Decode, 32, 65536)
        );
        assert_eq!(p[1].origin, "m.csv:3");
    }

    #[test]
    fn bench_one_batch_records_give_a_prefill_and_a_decode_point() {
        let text = r#"{"run_name": "x", "batch_size": 8, "input_len": 1024, "output_len": 16, "prefill_latency": 0.25, "median_decode_latency": 0.012}"#;
        let p = parse("one.jsonl", text).unwrap();
        assert_eq!(p[0].tokens, 8192);
        assert_eq!(p[0].ms, 250.0);
        assert_eq!(p[1].context_tokens, 8 * (1024 + 8));
        assert!((p[1].ms - 12.0).abs() < 1e-12);
    }

    #[test]
    fn bench_serving_records_use_littles_law() {
        let text = r#"{"completed": 100, "total_input_tokens": 100000, "total_output_tokens": 20000, "median_itl_ms": 10.0, "request_throughput": 4.0, "mean_e2e_latency_ms": 2100.0, "mean_ttft_ms": 100.0, "max_concurrency": 1, "median_ttft_ms": 90.0}"#;
        let p = parse("serve.jsonl", text).unwrap();
        assert_eq!(p[0].seqs, 8);
        assert_eq!(p[0].context_tokens, 8 * 1100);
        assert_eq!(
            (p[1].phase, p[1].tokens, p[1].ms),
            (Phase::Ttft, 1000, 90.0)
        );
    }

    #[test]
    fn errors_name_the_file_line_and_field() {
        let e = parse(
            "m.csv",
            "phase,tokens,batch_size,context_tokens,time_ms\nprefil,1,,0,3\n",
        )
        .unwrap_err();
        assert!(e.contains("m.csv:2") && e.contains("phase"), "{e}");
        let e = parse(
            "m.csv",
            "phase,tokens,batch_size,context_tokens,time_ms\ndecode,,4,0,-3\n",
        )
        .unwrap_err();
        assert!(e.contains("m.csv:2") && e.contains("time_ms"), "{e}");
        let e = parse("b.jsonl", "{\"batch_size\": 1, \"prefill_latency\": 0.1}\n").unwrap_err();
        assert!(e.contains("b.jsonl:1") && e.contains("input_len"), "{e}");
        let e = parse("b.jsonl", "{\"foo\": 1}\n").unwrap_err();
        assert!(e.contains("b.jsonl:1"), "{e}");
        let e = parse("x.txt", "hello\n").unwrap_err();
        assert!(e.contains("x.txt:1"), "{e}");
        assert!(parse("e.csv", "\n").unwrap_err().contains("empty"));
    }
}
