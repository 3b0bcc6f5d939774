//! What a plan's answer rests on (issue 41): the user's own measurements (a `pdsim calibrate`
//! file, a measured step-time profile) or pdsim's defaults, and — for measurements — whether
//! the answer's steps fall inside the shapes measured or are the fit's extrapolation.
//!
//! The step times are the one part of a plan a user can calibrate; the transfers (Mooncake's
//! calibrated model), the router and the host costs outside a forward are always pdsim's own,
//! and the note says so.

use serde::Serialize;

use super::PointVerdict;
use crate::config::{Lengths, Role, Scenario, Workload};

/// How much of the answer's step times rests on the user's measurements.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Grounding {
    /// `calibrated` (every pool's steps from the user's measurements, inside the shapes
    /// measured), `extrapolated` (from them, but some of the answer's shapes lie outside),
    /// `default` (pdsim's built-in calibration), or `mixed` (some pools one, some the other).
    pub source: String,
    /// The same in words, for the CLI line and the report.
    pub note: String,
}

/// A span of sizes in words, `a–b` or `a`.
fn span(lo: u32, hi: u32) -> String {
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

/// Where `[lo, hi]` lies against the measured `[m0, m1]`: inside, or how it leaves it.
fn against(lo: f64, hi: f64, m: [u32; 2]) -> Option<&'static str> {
    let (m0, m1) = (f64::from(m[0]), f64::from(m[1]));
    if lo >= m0 && hi <= m1 {
        None
    } else if hi < m0 || lo > m1 {
        Some("outside")
    } else {
        Some("partly outside")
    }
}

/// The smallest and largest prompt the workload draws, when its distribution says.
fn prompt_span(sc: &Scenario) -> Option<(u32, u32)> {
    let input = match &sc.workload {
        Workload::Synthetic { input, .. } | Workload::Sessions { input, .. } => input,
        Workload::Trace { .. } => return None,
    };
    Some(match input {
        Lengths::Fixed(v) => (*v, *v),
        Lengths::Uniform { min, max } | Lengths::Lognormal { min, max, .. } => (*min, *max),
        Lengths::Empirical(v) => (
            v.iter().copied().min().unwrap_or(0),
            v.iter().copied().max().unwrap_or(0),
        ),
        Lengths::PairedInput(v) => (
            v.iter().map(|p| p.0).min().unwrap_or(0),
            v.iter().map(|p| p.0).max().unwrap_or(0),
        ),
        Lengths::PairedOutput(_) => return None,
    })
}

impl Grounding {
    /// From the scenario and the point the answer rests on (or the closest).
    pub fn of(sc: &Scenario, point: Option<&PointVerdict>) -> Self {
        let profiled = sc.profiled_pools();
        let outside_forward =
            "transfers, routing and host costs outside a forward are pdsim's defaults";
        let Some(m) = &sc.calibration_measured else {
            let default = format!(
                "pdsim's default calibration `{}`{}",
                sc.calibration,
                if sc.compute.kernels.is_some() {
                    format!(
                        " (measured kernel tables for {}, not your cluster)",
                        sc.gpu.name
                    )
                } else {
                    format!(" (a roofline for {}, not your cluster)", sc.gpu.name)
                }
            );
            return if profiled.is_empty() {
                Self {
                    source: "default".into(),
                    note: format!(
                        "step times: {default}; nothing in this answer is calibrated on your cluster — `pdsim calibrate` your logs or benchmarks to ground it; {outside_forward}"
                    ),
                }
            } else {
                Self {
                    source: if profiled.len() == sc.pools.len() {
                        "calibrated"
                    } else {
                        "mixed"
                    }
                    .into(),
                    note: format!(
                        "step times: measured profiles (`step_times`) for pool{} {}{}; {outside_forward}",
                        if profiled.len() == 1 { "" } else { "s" },
                        profiled.join(", "),
                        if profiled.len() == sc.pools.len() {
                            String::new()
                        } else {
                            format!(", {default} for the others")
                        }
                    ),
                }
            };
        };
        let mut said = vec![format!(
            "step times: your measurements `{}` ({} points of {} on {} × {}",
            sc.calibration, m.points, m.model, m.tp, m.gpu
        )];
        if let Some([a, b]) = m.prefill_tokens {
            said.push(format!("prefill forwards of {} tokens", span(a, b)));
        }
        if let Some([a, b]) = m.decode_batch {
            said.push(format!("decode batches of {}", span(a, b)));
        }
        let mut note = said.join(", ") + ")";
        let mut outside = Vec::new();
        // Prefill forwards: prompts up to the chunk size (longer ones are chunked).
        let chunk = sc
            .pools
            .iter()
            .filter(|p| p.role != Role::Decode)
            .map(|p| p.server.chunked_prefill_size)
            .max();
        if let (Some(measured), Some((lo, hi)), Some(chunk)) =
            (m.prefill_tokens, prompt_span(sc), chunk)
        {
            let (lo, hi) = (lo.min(chunk), hi.min(chunk));
            if let Some(w) = against(f64::from(lo), f64::from(hi), measured) {
                outside.push(format!(
                    "the answer's prefill forwards of {} tokens are {w} them",
                    span(lo, hi)
                ));
            }
        } else if m.prefill_tokens.is_none() {
            outside.push("no prefill was measured: its steps are the base calibration's".into());
        }
        // Decode batch per scheduler, by Little's law on the point's output rate and TPOT.
        let row = point.and_then(|p| p.seeds.first());
        let dp = sc
            .pools
            .iter()
            .find(|p| p.role != Role::Prefill)
            .map_or(1, |p| p.parallel.dp_ranks().max(1));
        let batch = row.and_then(|r| {
            let servers = r.decode_instances.or(r.colocated_instances)? * dp;
            let tokens_s = r.output_tokens_per_s?;
            let tpot_s = r.tpot_p50_ms? / 1e3;
            (servers > 0).then(|| tokens_s * tpot_s / f64::from(servers))
        });
        match (m.decode_batch, batch) {
            (Some(measured), Some(b)) => {
                if let Some(w) = against(b, b, measured) {
                    outside.push(format!(
                        "its decode batch, ≈ {b:.0} per scheduler (output rate × TPOT p50), is {w} them"
                    ));
                }
            }
            (None, _) => outside
                .push("no decode step was measured: its steps are the base calibration's".into()),
            (Some(_), None) => {}
        }
        let source = if outside.is_empty() {
            note +=
                "; the answer's prefill forwards and decode batches lie inside what was measured";
            "calibrated"
        } else {
            note += &format!("; {} — extrapolated by the fit", outside.join("; "));
            "extrapolated"
        };
        Self {
            source: source.into(),
            note: format!("{note}; {outside_forward}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::rows::SweepRow;
    use crate::spec::calibration::{CalibrationFile, MeasuredOn, SGLANG_2025};

    /// A 2P2D 8B scenario on `input` prompts, with a calibration file measured on prefill
    /// forwards of 512–4,096 tokens and decode batches of 1–32 when `calibrated`.
    fn scenario(calibrated: bool, input: &str) -> Scenario {
        let dir = std::env::temp_dir().join(format!("pdsim-grounding-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cal = CalibrationFile {
            measured: MeasuredOn {
                model: "llama-3.1-8b".into(),
                gpu: "h100-sxm".into(),
                tp: 1,
                files: vec!["server.log".into()],
                points: 40,
                prefill_tokens: Some([512, 4096]),
                decode_batch: Some([1, 32]),
            },
            params: SGLANG_2025,
        };
        std::fs::write(dir.join("cal.toml"), cal.to_toml()).unwrap();
        let text = format!(
            "[run]\nname = \"g\"\nduration_s = 5\n[model]\npreset = \"llama-3.1-8b\"\n\
             [hardware]\ngpu = \"h100-sxm\"\n{}\
             [[pools]]\nname = \"p\"\nrole = \"prefill\"\ninstances = 2\n\
             [[pools]]\nname = \"d\"\nrole = \"decode\"\ninstances = 2\n\
             [workload]\narrival = {{ process = \"poisson\", rate_per_s = 4 }}\n\
             input_tokens = {input}\noutput_tokens = {{ dist = \"fixed\", value = 64 }}\n",
            if calibrated {
                "calibration = \"cal.toml\"\n"
            } else {
                ""
            }
        );
        crate::scenario::from_str(&text, &dir.join("s.toml"), &[]).unwrap()
    }

    /// A point whose row serves `tokens_s` output tokens/s at TPOT p50 `tpot_ms` on 2 decode
    /// instances: by Little's law `tokens_s × tpot / 2` sequences per decode scheduler.
    fn point(tokens_s: f64, tpot_ms: f64) -> PointVerdict {
        let mut r = SweepRow::infeasible(0, String::new());
        r.error = None;
        (r.decode_instances, r.output_tokens_per_s, r.tpot_p50_ms) =
            (Some(2), Some(tokens_s), Some(tpot_ms));
        PointVerdict {
            point: 0,
            values: vec![],
            gpus: Some(4),
            nodes: Some(1),
            idle_gpus: Some(4),
            billed_gpus: Some(4),
            usd_per_hour: None,
            meets_slo: true,
            seeds: vec![r],
        }
    }

    #[test]
    fn the_answer_says_what_its_step_times_rest_on() {
        let fixed = "{ dist = \"fixed\", value = 1024 }";
        let g = Grounding::of(&scenario(false, fixed), Some(&point(1000.0, 40.0)));
        assert_eq!(g.source, "default");
        assert!(
            g.note.contains("`sglang-2026`") && g.note.contains("not your cluster"),
            "{}",
            g.note
        );
        // 1,000 tokens/s × 40 ms ÷ 2 decodes = 20 sequences, inside 1–32; 1,024-token
        // prompts inside 512–4,096.
        let g = Grounding::of(&scenario(true, fixed), Some(&point(1000.0, 40.0)));
        assert_eq!(g.source, "calibrated", "{}", g.note);
        assert!(
            g.note.contains("40 points") && g.note.contains("decode batches of 1–32"),
            "{}",
            g.note
        );
        // At 100 ms: 50 a scheduler, outside 1–32.
        let g = Grounding::of(&scenario(true, fixed), Some(&point(1000.0, 100.0)));
        assert_eq!(g.source, "extrapolated");
        assert!(
            g.note.contains("≈ 50 per scheduler") && g.note.contains("is outside them"),
            "{}",
            g.note
        );
        // Prompts of 256–16,384 tokens are forwards of 256–8,192 (the default chunk): partly
        // outside 512–4,096.
        let wide = "{ dist = \"uniform\", min = 256, max = 16384 }";
        let g = Grounding::of(&scenario(true, wide), Some(&point(1000.0, 40.0)));
        assert_eq!(g.source, "extrapolated");
        assert!(
            g.note
                .contains("prefill forwards of 256–8192 tokens are partly outside"),
            "{}",
            g.note
        );
    }

    #[test]
    fn a_span_inside_partly_outside_or_outside_the_measured_one() {
        assert_eq!(against(100.0, 200.0, [64, 8192]), None);
        assert_eq!(against(32.0, 200.0, [64, 8192]), Some("partly outside"));
        assert_eq!(against(9000.0, 9000.0, [64, 8192]), Some("outside"));
        assert_eq!(span(3, 3), "3");
        assert_eq!(span(3, 9), "3–9");
    }
}
