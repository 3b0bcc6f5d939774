//! sglang's KV transfer backends (`--disaggregation-transfer-backend`, `[sglang]
//! transfer_backend`): the choices sglang offers and which of them pdsim runs
//! (`docs/sglang-pd.md` §26.3).
//!
//! sglang's choices (`server_args.py` / `arg_groups/choices.py::DISAGG_TRANSFER_BACKEND_CHOICES`,
//! the 2026 tree): `mooncake`, `nixl`, `ascend`, `fake`, `mori`, `mooncake_tcp`. `mooncake_tcp`
//! arrived with PR #26346 (merged 2026-05-26) and `mori` before it, so every pdsim version
//! (the seed, 2026-08-27, and later) has all six. pdsim's transfer worker is Mooncake's
//! (`MooncakeKVManager`, docs/sglang-pd.md §2–§3); `mooncake_tcp` is the same manager over
//! Mooncake's TCP transport (`handle_pd_disaggregation` rewrites it to `mooncake`, sets
//! `MC_FORCE_TCP=1` and clears the IB device), so pdsim runs it with the engine's rate capped
//! at the TCP rate the scenario states. The others have managers of their own whose costs pdsim
//! has not read; a scenario naming them is refused with what each would need.
//!
//! Pure data: no I/O.

use serde::{Deserialize, Serialize};

/// A `--disaggregation-transfer-backend` value.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TransferBackend {
    /// Mooncake's transfer engine over RDMA (sglang's default): the prefill pushes RDMA
    /// WRITEs (`MooncakeKVManager.transfer_worker`, `batch_transfer_sync`). What pdsim has
    /// always modelled.
    #[default]
    Mooncake,
    /// Mooncake over TCP (PR #26346): `MC_FORCE_TCP=1`, backend rewritten to `mooncake`.
    MooncakeTcp,
    /// NVIDIA NIXL (`disaggregation/nixl/conn.py::NixlKVManager`).
    Nixl,
    /// AMD MORI (`disaggregation/mori/conn.py`).
    Mori,
    /// Huawei Ascend (`disaggregation/ascend/`).
    Ascend,
    /// No transfer (decode fakes the KV; warm-up and tests).
    Fake,
}

impl TransferBackend {
    /// Every backend, in sglang's order of the choices list (mooncake first).
    pub const ALL: [TransferBackend; 6] = [
        Self::Mooncake,
        Self::Nixl,
        Self::Ascend,
        Self::Fake,
        Self::Mori,
        Self::MooncakeTcp,
    ];

    /// The flag's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mooncake => "mooncake",
            Self::MooncakeTcp => "mooncake_tcp",
            Self::Nixl => "nixl",
            Self::Mori => "mori",
            Self::Ascend => "ascend",
            Self::Fake => "fake",
        }
    }

    /// Whether it is the default (for `skip_serializing_if`: older scenarios keep their bytes).
    pub fn is_mooncake(&self) -> bool {
        *self == Self::Mooncake
    }

    /// Whether `SGLANG_DISAGG_STAGING_BUFFER` may be set with it (`handle_pd_disaggregation`:
    /// "SGLANG_DISAGG_STAGING_BUFFER requires disaggregation_transfer_backend='mooncake' or
    /// 'nixl'"). `mooncake_tcp` counts as `mooncake`: the same function rewrites it
    /// [UNCHECKED: the order of the rewrite and the check].
    pub fn allows_staging(self) -> bool {
        matches!(self, Self::Mooncake | Self::MooncakeTcp | Self::Nixl)
    }

    /// Why pdsim does not run this backend (`None` for the ones it runs), for the error that
    /// refuses it.
    pub fn not_modelled(self) -> Option<&'static str> {
        match self {
            Self::Mooncake | Self::MooncakeTcp => None,
            Self::Nixl => Some(
                "NIXL's manager is not Mooncake's: the prefill posts prepared WRITE descriptor lists (`make_prepped_xfer`) and decode learns of each chunk from NIXL notifications, not from a status sync; its per-descriptor cost has not been measured, and its prefill had no bootstrap timeout until PR #34692 (its predecessor #34686 names the gap)",
            ),
            Self::Mori => Some("MORI's manager (`disaggregation/mori/conn.py`) has not been read"),
            Self::Ascend => Some(
                "Ascend's manager moves KV between NPUs (`disaggregation/ascend/`), which pdsim's GPU fabric does not model",
            ),
            Self::Fake => Some(
                "sglang refuses it on a prefill server: \"Prefill server does not support 'fake' as the transfer backend\" (`handle_pd_disaggregation`)",
            ),
        }
    }

    /// Every value's name, for "valid: …".
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|b| b.as_str()).collect()
    }
}

impl std::str::FromStr for TransferBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown transfer backend {s:?}: valid: {}",
                    Self::names().join(", ")
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_only_mooncake_runs() {
        for b in TransferBackend::ALL {
            assert_eq!(b.as_str().parse::<TransferBackend>(), Ok(b));
        }
        assert_eq!(TransferBackend::default(), TransferBackend::Mooncake);
        let run: Vec<_> = TransferBackend::ALL
            .into_iter()
            .filter(|b| b.not_modelled().is_none())
            .collect();
        assert_eq!(
            run,
            [TransferBackend::Mooncake, TransferBackend::MooncakeTcp]
        );
        let staged: Vec<_> = TransferBackend::ALL
            .into_iter()
            .filter(|b| b.allows_staging())
            .map(TransferBackend::as_str)
            .collect();
        assert_eq!(staged, ["mooncake", "nixl", "mooncake_tcp"]);
        assert!("tcp".parse::<TransferBackend>().is_err());
    }
}
