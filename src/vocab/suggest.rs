//! "Did you mean" for every error that names a valid set: the closest valid name to a typo
//! (Jaro-Winkler, `strsim`). On the ground floor because scenario keys, launch-line flags and
//! CLI values all use it.

/// The name in `valid` closest to `given` (Jaro-Winkler ≥ 0.8), if any is a likely typo of it.
pub fn closest<'v>(given: &str, valid: impl IntoIterator<Item = &'v str>) -> Option<&'v str> {
    valid
        .into_iter()
        .map(|v| (strsim::jaro_winkler(&given.to_lowercase(), v), v))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v)
}

/// `"; did you mean `x`?"` for the closest valid name, or nothing.
pub fn suggestion(given: &str, valid: &[&str]) -> String {
    closest(given, valid.iter().copied())
        .map(|v| format!("; did you mean `{v}`?"))
        .unwrap_or_default()
}
