//! The GPU budget: Dynamo's `proportional_clamp_pair` (`components/src/dynamo/planner/core/
//! budget.py` @15a72ce), of which `PlannerStateMachine._apply_global_budget`
//! (`core/state_machine.py`, the version that holds `_kv_hit_rate_predictor`) is the ceiling
//! half: the total `P·gpu_p + D·gpu_d` must land in `[min − tolerance, max]`.
//!
//! - **Ceiling** (`max_gpu_budget`, hard, never relaxed): when even `min_endpoint` of each pool
//!   overshoots it, both pools go to 0 (the configuration is infeasible: pdsim refuses such a
//!   scenario before it runs); else a proportional shrink: `scale = max / total`,
//!   `P' = max(min_p, min(⌊(max − min_d·gpu_d)/gpu_p⌋, ⌊P·scale⌋))`, and decode takes what is
//!   left, `D' = max(min_d, ⌊(max − P'·gpu_p)/gpu_d⌋)`.
//! - **Floor** (`min_gpu_budget`, off by default): the tolerance is `max(gpu_p, gpu_d)` when both
//!   bounds are set (integer steps cannot always meet a band exactly), 0 otherwise; below it, a
//!   proportional grow: `scale = min / total`, `P' = max(min_p, ⌈P·scale⌉)`,
//!   `D' = max(min_d, ⌈(min − P'·gpu_p)⁺/gpu_d⌉)` (from nothing, half the floor to prefill); a
//!   grow that would break the ceiling keeps the counts.
//!
//! Not modelled: the later direction-preserving guards (`guard_disagg_scaling_budget`,
//! `fit_directional_budget_pair`, which hold a load decision rather than reverse it) and the
//! power budget (`apply_power_budget`: pdsim has no per-GPU power caps).

/// A GPU band; a bound of `None` is off (Dynamo: negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// `min_gpu_budget`.
    pub min_gpus: Option<u32>,
    /// `max_gpu_budget`.
    pub max_gpus: Option<u32>,
    /// GPUs of a prefill instance.
    pub prefill_gpus: u32,
    /// GPUs of a decode instance.
    pub decode_gpus: u32,
    /// Fewest instances of each pool (`min_endpoint`).
    pub min_endpoint: u32,
}

impl Budget {
    /// `(P, D)` moved into the band, proportionally.
    pub fn clamp(&self, p: u32, d: u32) -> (u32, u32) {
        let (min_ep, gp, gd) = (
            u64::from(self.min_endpoint),
            u64::from(self.prefill_gpus),
            u64::from(self.decode_gpus),
        );
        if (self.min_gpus.is_none() && self.max_gpus.is_none()) || gp == 0 || gd == 0 {
            return (p, d);
        }
        let (pu, du) = (u64::from(p), u64::from(d));
        let total = pu * gp + du * gd;
        let tolerance = if self.min_gpus.is_some() && self.max_gpus.is_some() {
            gp.max(gd)
        } else {
            0
        };
        let above = self.max_gpus.is_some_and(|m| total > u64::from(m));
        let below = self
            .min_gpus
            .is_some_and(|m| (total as i64) < i64::from(m) - tolerance as i64);
        if !above && !below {
            return (p, d);
        }
        let to_u32 = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        if let Some(max) = self.max_gpus.filter(|_| above) {
            let max = u64::from(max);
            if max < min_ep * gp + min_ep * gd {
                return (0, 0);
            }
            let scale = max as f64 / total as f64;
            let max_p = (max - min_ep * gd) / gp;
            let new_p = min_ep.max(max_p.min((pu as f64 * scale).floor() as u64));
            let remaining = max - new_p * gp;
            let new_d = min_ep.max(remaining / gd);
            return (to_u32(new_p), to_u32(new_d));
        }
        let floor = u64::from(self.min_gpus.expect("below the floor"));
        let (new_p, new_d) = if total == 0 {
            let new_p = min_ep.max((floor as f64 / 2.0 / gp as f64).ceil() as u64);
            let remaining = floor.saturating_sub(new_p * gp);
            (new_p, min_ep.max(remaining.div_ceil(gd)))
        } else {
            let scale = floor as f64 / total as f64;
            let new_p = min_ep.max((pu as f64 * scale).ceil() as u64);
            let remaining = floor.saturating_sub(new_p * gp);
            (new_p, min_ep.max(remaining.div_ceil(gd)))
        };
        if self
            .max_gpus
            .is_some_and(|m| new_p * gp + new_d * gd > u64::from(m))
        {
            return (p, d);
        }
        (to_u32(new_p), to_u32(new_d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max: Option<u32>, min: Option<u32>, gp: u32, gd: u32) -> Budget {
        Budget {
            min_gpus: min,
            max_gpus: max,
            prefill_gpus: gp,
            decode_gpus: gd,
            min_endpoint: 1,
        }
    }

    #[test]
    fn within_the_budget_nothing_moves() {
        assert_eq!(budget(Some(8), None, 1, 1).clamp(3, 5), (3, 5));
        assert_eq!(budget(None, None, 1, 1).clamp(30, 50), (30, 50));
    }

    #[test]
    fn the_ceiling_shrinks_both_pools_in_proportion() {
        // Dynamo's default budget 8 GPUs, 1 GPU each: P = 6, D = 10 → total 16, scale 0.5:
        // P' = max(1, min(⌊(8 − 1)/1⌋ = 7, ⌊3.0⌋)) = 3, D' = ⌊(8 − 3)/1⌋ = 5.
        assert_eq!(budget(Some(8), None, 1, 1).clamp(6, 10), (3, 5));
        // TP 2 prefill, TP 4 decode, 16 GPUs: P = 4 (8 GPUs), D = 5 (20): 28 → scale 16/28:
        // P' = min(⌊(16 − 4)/2⌋ = 6, ⌊4·0.5714⌋ = 2) = 2, D' = ⌊(16 − 4)/4⌋ = 3 → 4 + 12 = 16.
        assert_eq!(budget(Some(16), None, 2, 4).clamp(4, 5), (2, 3));
        // The decode floor binds the prefill share: P = 9, D = 1 at 1 GPU each, budget 4:
        // scale 0.4 → ⌊3.6⌋ = 3, max_p = 4 − 1 = 3 → P' = 3, D' = 1.
        assert_eq!(budget(Some(4), None, 1, 1).clamp(9, 1), (3, 1));
        // A budget below one instance of each: both to zero.
        assert_eq!(budget(Some(5), None, 2, 4).clamp(3, 3), (0, 0));
    }

    #[test]
    fn the_floor_grows_both_pools_and_never_breaks_the_ceiling() {
        // min 10, max off, 1 GPU each: P = 1, D = 2 → total 3 < 10: scale 10/3:
        // P' = ⌈3.33⌉ = 4, D' = ⌈(10 − 4)/1⌉ = 6.
        assert_eq!(budget(None, Some(10), 1, 1).clamp(1, 2), (4, 6));
        // Both bounds: tolerance max(1, 1) = 1, so 9 ≥ 10 − 1 is in band.
        assert_eq!(budget(Some(12), Some(10), 1, 1).clamp(4, 5), (4, 5));
        // From nothing: half the floor to prefill: ⌈10/2/2⌉ = 3 prefill (6 GPUs), the rest
        // ⌈4/4⌉ = 1 decode.
        assert_eq!(budget(None, Some(10), 2, 4).clamp(0, 0), (3, 1));
        // A grow past the ceiling keeps the counts: min = max = 5 at 2 + 2 GPUs, P = D = 1
        // (4 < 5 − 2? no: 4 ≥ 3, in band).
        assert_eq!(budget(Some(5), Some(5), 2, 2).clamp(1, 1), (1, 1));
        // min = max = 10 at 4 GPUs each, from nothing: 2 prefill + 1 decode = 12 > 10: kept.
        assert_eq!(budget(Some(10), Some(10), 4, 4).clamp(0, 0), (0, 0));
    }
}
