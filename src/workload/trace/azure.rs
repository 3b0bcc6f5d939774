//! The Azure LLM inference 2023 CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`): absolute
//! civil date-times, converted exactly and re-based so the first row arrives at 0 ns.

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

/// Days in month `m` (1-based) of proleptic Gregorian year `y`.
fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

pub(super) const AZURE_TIME_EXPECTED: &str =
    "a date-time `YYYY-MM-DD HH:MM:SS[.fraction]` with 0-9 fractional digits";

/// `YYYY-MM-DD HH:MM:SS[.f…]` (or `T` between date and time; 0–9 fractional digits, the
/// Azure files have 7 = 100 ns units) → ns since 1970-01-01 00:00:00 (no time zone).
pub(super) fn parse_azure_time(raw: &[u8]) -> Option<i128> {
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

#[cfg(test)]
mod tests {
    use super::super::testutil::{TempFile, shared};
    use super::super::{TraceFormat, read_trace, trace_stats};
    use super::*;

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
}
