//! sglang releases as pdsim models them (`[sglang] version`, `pdsim lint --sglang-version`):
//! which PD flags each release has and which guards it runs by default. Every behaviour is
//! attached to the release that introduced it, with the PR or commit it was read from
//! (`docs/sglang-pd.md` §24). `[sglang] profile` stays what it was: which of the seed-era
//! transfer checks run and where (§9); a version adds what sglang grew after the seed.
//!
//! Pure data: no I/O.

use serde::{Deserialize, Serialize};

/// An sglang release (`[sglang] version`). The default is the seed's: every scenario written
/// before versions existed keeps its results byte for byte.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum SglangVersion {
    /// The commit the project grew from: `disaggregation/mooncake/conn.py` at 0132848349
    /// (2026-08-27), read at 0005973a (`docs/sglang-pd.md` "Sources, versions and tags").
    /// No KV checksum, no registration-time layout validation.
    #[default]
    #[serde(rename = "seed")]
    Seed,
    /// sglang main after PR #39500 ("[PD] Add optional KV transfer checksums", merged
    /// 2026-09-15): `--disaggregation-enable-kv-checksum` exists (off by default). Adler-32
    /// over the request's KV (and state) pages on prefill, sent with the last chunk, verified
    /// on decode before batching; a mismatch aborts the request
    /// (`disaggregation/checksum.py::KvChecksumComputer.compute`).
    #[serde(rename = "2026-09")]
    V2026_09,
    /// `2026-09` with PR #37840 ("[PD] Validate Mooncake peer layouts before state transfer",
    /// open since 2026-09-03) applied: registration carries per-entry KV strides, the state
    /// component list, page size and a layout protocol version, and the prefill rejects a
    /// mismatched decode session before any write.
    #[serde(rename = "2026-09+pr37840")]
    V2026_09Pr37840,
}

impl SglangVersion {
    /// Every version, oldest first.
    pub const ALL: [SglangVersion; 3] = [Self::Seed, Self::V2026_09, Self::V2026_09Pr37840];

    /// The scenario-file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seed => "seed",
            Self::V2026_09 => "2026-09",
            Self::V2026_09Pr37840 => "2026-09+pr37840",
        }
    }

    /// Whether the release has `--disaggregation-enable-kv-checksum` (PR #39500).
    pub fn has_kv_checksum(self) -> bool {
        self != Self::Seed
    }

    /// Whether the release has `--disaggregation-decode-enable-radix-cache` (PR #19746, with
    /// Mooncake's incremental transfer: `TransferInfo.decode_prefix_len`,
    /// `pop_decode_prefix_len()`). Every 2026-09 build has it (the flag is in that era's
    /// `arg_groups/fields/disagg.py` and `handle_pd_disaggregation`); the seed's commit is
    /// modelled without it.
    pub fn has_decode_radix_cache(self) -> bool {
        self != Self::Seed
    }

    /// Whether the prefill validates a decode's registered layout before any write
    /// (PR #37840; always on in the releases that have it: it is not a flag).
    pub fn validates_registration(self) -> bool {
        self == Self::V2026_09Pr37840
    }

    /// Whether the seeds' start-up refusal of `--enable-unified-memory` with PD for
    /// MHA-attention hybrids (`[sglang] profile = "seed_commit"`) can hold: PR #37506 lifted it
    /// on 2026-09-02, before every later version.
    pub fn allows_seed_commit_profile(self) -> bool {
        self == Self::Seed
    }

    /// The versions that have a flag, by name, for an error naming where it exists.
    pub fn names_where(has: impl Fn(SglangVersion) -> bool) -> String {
        let names: Vec<String> = Self::ALL
            .into_iter()
            .filter(|v| has(*v))
            .map(|v| format!("{:?}", v.as_str()))
            .collect();
        names.join(", ")
    }

    /// Whether the release reads the decode's extra request rows from
    /// `--disaggregation-decode-extra-slots` (2026 `server_args` fields, `handle_pd_disaggregation`)
    /// rather than from `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS` (`environ.py`, the seed).
    pub fn has_decode_extra_slots_flag(self) -> bool {
        self != Self::Seed
    }

    /// Whether NIXL's prefill sender has the bootstrap timeout (sglang PR #34692, "[PD] Add the
    /// missing Prefill bootstrap timeout for NIXL": `NixlKVSender.__init__` records
    /// `init_time`, `poll` calls `_check_bootstrap_timeout()` while `Bootstrapping`). The PR
    /// (and #34686 before it, filed 2026-08-13) names the gap; the store marks #34692 merged but
    /// holds no merge date, and every stored `nixl/conn.py` read (2026 versions with the decode
    /// radix cache and the staging buffer) lacks the check. The seed (2026-08-27, two weeks after
    /// the PR was opened) is modelled without it; the 2026-09 builds (sglang main after
    /// 2026-09-15) with it [INFERRED: merged between 2026-08-13 and 2026-09-15].
    pub fn has_nixl_bootstrap_timeout(self) -> bool {
        self != Self::Seed
    }

    /// Every version's name, for "valid: …".
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|v| v.as_str()).collect()
    }
}

impl std::str::FromStr for SglangVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown sglang version {s:?}: valid: {}",
                    Self::names().join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_is_the_default_and_has_no_new_guard() {
        let v = SglangVersion::default();
        assert_eq!(v, SglangVersion::Seed);
        assert!(!v.has_kv_checksum());
        assert!(!v.has_decode_radix_cache());
        assert!(!v.validates_registration());
        assert!(v.allows_seed_commit_profile());
        assert!(!v.has_nixl_bootstrap_timeout());
    }

    #[test]
    fn names_round_trip_and_flags_name_their_versions() {
        for v in SglangVersion::ALL {
            assert_eq!(v.as_str().parse::<SglangVersion>(), Ok(v));
            let toml = format!("v = {:?}", v.as_str());
            #[derive(Deserialize)]
            struct T {
                v: SglangVersion,
            }
            assert_eq!(toml::from_str::<T>(&toml).unwrap().v, v);
        }
        assert_eq!(
            SglangVersion::names_where(SglangVersion::has_kv_checksum),
            "\"2026-09\", \"2026-09+pr37840\""
        );
        assert_eq!(
            SglangVersion::names_where(SglangVersion::validates_registration),
            "\"2026-09+pr37840\""
        );
        assert!("2026".parse::<SglangVersion>().is_err());
    }
}
