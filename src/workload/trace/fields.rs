//! Field parsers and row checks shared by every format: token counts, seconds, the
//! non-decreasing arrival order and the `hash_ids` length.

use std::path::Path;

use super::HASH_BLOCK_TOKENS;
use super::error::{TraceError, fmt_ns, show};

/// Tracks the previous row's arrival to reject time going backwards. Arrivals are i128 ns
/// so that Azure rows before the first one (negative after re-basing) are caught here too.
#[derive(Default)]
pub(super) struct Order {
    /// Arrival (ns) and 1-based line of the previous row.
    prev: Option<(i128, u64)>,
}

impl Order {
    /// `raw` renders the field's text only on error, keeping the per-row path allocation-free.
    pub(super) fn check<R: AsRef<[u8]>>(
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

/// Numbers the turns of each session in file order, and checks a given `turn` against it:
/// a session's turns are 0, 1, 2, … in file order (one map entry per session seen, allocated
/// only when a row names a session).
#[derive(Default)]
pub(super) struct Turns {
    /// Per session: its next turn and the line of its last row.
    next: std::collections::BTreeMap<u64, (u32, u64)>,
}

impl Turns {
    /// The turn of a row of `session` at `line`: `given` if it is the session's next, its
    /// file-order index if not given.
    pub(super) fn check(
        &mut self,
        path: &Path,
        line: u64,
        session: u64,
        given: Option<u32>,
    ) -> Result<u32, TraceError> {
        let (next, last_line) = self.next.get(&session).copied().unwrap_or((0, 0));
        let turn = given.unwrap_or(next);
        if turn != next {
            let expected = if next == 0 {
                format!("0: this is the first row of session {session}")
            } else {
                format!(
                    "{next}: session {session}'s previous row (line {last_line}) is turn {}; turns count up by one in file order",
                    next - 1
                )
            };
            return Err(TraceError::BadValue {
                path: path.to_path_buf(),
                line,
                field: "turn",
                value: turn.to_string(),
                expected,
            });
        }
        self.next.insert(session, (next + 1, line));
        Ok(turn)
    }
}

pub(super) const TOKENS_EXPECTED: &str = "an integer token count from 1 to 4294967295";

/// What a `session_id` must be.
pub(super) const SESSION_EXPECTED: &str =
    "a non-negative integer naming the conversation (e.g. 17)";

/// What a `turn` must be.
pub(super) const TURN_EXPECTED: &str = "the turn's index in its conversation, an integer from 0";
pub(super) const SECONDS_EXPECTED: &str = "a number of seconds ≥ 0 (e.g. `12.5`)";

/// What a `timeout_s` must be.
pub(super) const TIMEOUT_EXPECTED: &str = "the client's wait in seconds from the request's arrival, > 0 and at most 1e9 (e.g. `30`); an empty CSV cell or a JSON `null` for none";

/// A client deadline in decimal seconds → ns, rounded up (a client never leaves before its
/// request arrived, so 0 and below are refused rather than clamped).
pub(super) fn parse_timeout_ns(raw: &[u8]) -> Option<u64> {
    let x: f64 = std::str::from_utf8(raw).ok()?.trim().parse().ok()?;
    timeout_ns_of(x)
}

/// [`parse_timeout_ns`] of a number already parsed (JSON).
pub(super) fn timeout_ns_of(seconds: f64) -> Option<u64> {
    (seconds > 0.0 && seconds <= crate::vocab::limits::MAX_DURATION_S)
        .then(|| crate::engine::ns_from_secs_ceil(seconds).max(1))
}

/// A token count: a decimal integer in `1..=u32::MAX`.
pub(super) fn parse_tokens(raw: &[u8]) -> Option<u32> {
    std::str::from_utf8(raw)
        .ok()?
        .parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
}

/// `x · scale` rounded to the nearest integer, if `x` is finite, ≥ 0 and the result fits u64.
pub(super) fn scaled_round(x: f64, scale: f64) -> Option<u64> {
    if !x.is_finite() || x < 0.0 {
        return None;
    }
    let v = (x * scale).round();
    // 2^64 is exactly representable; anything at or above it does not fit.
    (v < 18_446_744_073_709_551_616.0).then_some(v as u64)
}

/// Decimal seconds ≥ 0 → ns, rounded to the nearest ns.
pub(super) fn parse_seconds_ns(raw: &[u8]) -> Option<u64> {
    let x: f64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    scaled_round(x, 1e9)
}

/// `ids` must hold one id per started [`HASH_BLOCK_TOKENS`]-token block of the prompt.
pub(super) fn check_hash_len(
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

/// How a CSV format writes its arrival column.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Clock {
    /// Decimal seconds from the trace start (Vidur, pdsim CSV).
    Seconds,
    /// Absolute civil date-times, re-based so the first row is 0 (Azure).
    AzureDateTime,
}

/// The header names a CSV trace format reads, and how its arrival column is written.
pub(super) struct CsvColumns {
    pub arrival: &'static str,
    pub input: &'static str,
    pub output: &'static str,
    /// Optional column.
    pub hash_ids: Option<&'static str>,
    pub clock: Clock,
}

/// The columns of the Azure LLM inference 2023 CSV.
pub(super) const AZURE_COLUMNS: CsvColumns = CsvColumns {
    arrival: "TIMESTAMP",
    input: "ContextTokens",
    output: "GeneratedTokens",
    hash_ids: None,
    clock: Clock::AzureDateTime,
};

/// The columns of Vidur's processed-trace CSV.
pub(super) const VIDUR_COLUMNS: CsvColumns = CsvColumns {
    arrival: "arrived_at",
    input: "num_prefill_tokens",
    output: "num_decode_tokens",
    hash_ids: None,
    clock: Clock::Seconds,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_to_nearest_ns() {
        assert_eq!(parse_seconds_ns(b"5.8926549999999995"), Some(5_892_655_000));
        assert_eq!(parse_seconds_ns(b"0.052"), Some(52_000_000));
        assert_eq!(parse_seconds_ns(b"1e-3"), Some(1_000_000));
        assert_eq!(parse_seconds_ns(b"-0.0"), Some(0));
        for bad in [&b"inf"[..], b"-1", b"1e30", b"", b"1s"] {
            assert_eq!(parse_seconds_ns(bad), None);
        }
    }

    #[test]
    fn timeouts_round_up_and_refuse_what_no_client_waits() {
        assert_eq!(parse_timeout_ns(b"30"), Some(30_000_000_000));
        assert_eq!(
            parse_timeout_ns(b"1e-10"),
            Some(1),
            "rounded up to a whole ns"
        );
        assert_eq!(parse_timeout_ns(b"0.0000000015"), Some(2));
        assert_eq!(parse_timeout_ns(b"1e9"), Some(1_000_000_000_000_000_000));
        for bad in [&b"0"[..], b"-1", b"1e10", b"inf", b"NaN", b"", b"30s"] {
            assert_eq!(
                parse_timeout_ns(bad),
                None,
                "{:?}",
                std::str::from_utf8(bad)
            );
        }
    }
}
