//! Vidur's CSVs: the processed trace (`arrived_at,num_prefill_tokens,num_decode_tokens`,
//! seconds from the first request) and the lengths-only file without arrival times
//! (`num_prefill_tokens,num_decode_tokens[,num_total_tokens,...]`), which only
//! [`read_lengths`](super::read_lengths) accepts.

use std::io::Read;
use std::path::Path;

use super::csv::CsvFile;
use super::error::{TraceError, bad};
use super::fields::{TOKENS_EXPECTED, parse_tokens};

/// `(input_tokens, output_tokens)` of every row of a lengths-only CSV, streamed from
/// `source`; `num_total_tokens`, if present, must equal their sum.
pub(super) fn read_lengths_csv<R: Read>(
    path: &Path,
    source: R,
) -> Result<Vec<(u32, u32)>, TraceError> {
    const IN: &str = "num_prefill_tokens";
    const OUT: &str = "num_decode_tokens";
    const TOTAL: &str = "num_total_tokens";
    let mut file = CsvFile::open(path, source)?;
    let input_col = file.column(IN)?;
    let output_col = file.column(OUT)?;
    let total_col = file.optional_column(TOTAL);
    let mut out = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::super::testutil::shared;
    use super::super::{length_stats, read_lengths};

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
}
