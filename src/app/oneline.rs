//! The planner in one line: `pdsim plan --model M --gpu G --isl I --osl O --ttft MS --tpot MS
//! --rate R [--gpus N]`. The question is written as a scenario (the model and GPU presets,
//! Poisson arrivals at `R` of `I`-token prompts and `O`-token answers, `[slo]` with the two
//! per-request thresholds at DistServe's 90 % attainment) and a grid of whole deployments —
//! disaggregated (prefill and decode instances × their TP) and colocated (servers × TP), for a
//! MoE model with DP attention and expert parallelism moving with TP — of at most `N` GPUs. Only
//! deployments that validate (the weights fit, the heads split) are in the grid. The plan then
//! runs as any other (`app::plan`), so its answer says PD or not; the scenario is written beside
//! the results.

use std::path::PathBuf;

use super::CliError;
use crate::spec;

/// The one-line question.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Model preset or Hugging Face id (`--model`).
    pub model: String,
    /// GPU preset (`--gpu`).
    pub gpu: String,
    /// Prompt tokens (`--isl`).
    pub isl: u32,
    /// Output tokens (`--osl`).
    pub osl: u32,
    /// Each request's TTFT target, ms (`--ttft`).
    pub ttft_ms: f64,
    /// Each request's TPOT target, ms (`--tpot`).
    pub tpot_ms: f64,
    /// The GPUs a deployment may use at most (`--gpus`).
    pub gpus: u32,
}

/// `--gpus` when left out: a deployment of up to four 8-GPU nodes.
pub const DEFAULT_GPUS: u32 = 32;
/// `--gpus` at most: the grid holds every split up to it.
pub const MAX_GPUS: u32 = 256;
/// `--isl` and `--osl` at most (the model's context length is checked with the scenario).
const MAX_TOKENS: u32 = 10_000_000;
/// GPUs per node of the deployments (the scenario's default `hardware.gpus_per_node`).
const GPUS_PER_NODE: u32 = 8;
/// The most points the grid may hold (each a whole deployment).
const MAX_DEPLOYMENTS: usize = 4_000;

impl Question {
    /// The question's checks, each naming its flag and what is valid; the model as its preset.
    fn checked(&self) -> Result<&'static str, CliError> {
        let model = spec::launch::preset_for(&self.model).ok_or_else(|| {
            CliError::flag(
                "--model",
                format!(
                    "--model {:?}: not a model preset or the Hugging Face id of one; valid presets: {}",
                    self.model,
                    spec::model::MODEL_PRESETS.join(", ")
                ),
            )
        })?;
        spec::gpu_preset(&self.gpu).ok_or_else(|| {
            CliError::flag(
                "--gpu",
                format!(
                    "--gpu {:?}: not a GPU preset; valid: {}",
                    self.gpu,
                    spec::gpu::GPU_PRESETS.join(", ")
                ),
            )
        })?;
        for (flag, v) in [("--isl", self.isl), ("--osl", self.osl)] {
            if v == 0 || v > MAX_TOKENS {
                return Err(CliError::flag(
                    flag,
                    format!("{flag} {v}: give 1 to {MAX_TOKENS} tokens"),
                ));
            }
        }
        for (flag, v) in [("--ttft", self.ttft_ms), ("--tpot", self.tpot_ms)] {
            if !(v.is_finite() && v > 0.0 && v <= 3.6e6) {
                return Err(CliError::flag(
                    flag,
                    format!("{flag} {v}: a target in milliseconds, above 0 and at most an hour"),
                ));
            }
        }
        if self.gpus == 0 || self.gpus > MAX_GPUS {
            return Err(CliError::flag(
                "--gpus",
                format!(
                    "--gpus {}: the most GPUs a deployment may use, 1 to {MAX_GPUS}",
                    self.gpus
                ),
            ));
        }
        Ok(model)
    }

    /// The scenario the question asks about (its pools are `pools`, a deployment that
    /// validates), at `rate` requests/s.
    fn scenario(&self, model: &str, pools: &str, rate: f64) -> String {
        format!(
            "# The one-line question: pdsim plan --model {model} --gpu {gpu} --isl {isl} --osl {osl} --ttft {ttft} --tpot {tpot} --rate {rate} --gpus {gpus}.\n\
             # The deployments tried are sweep.json's grid (`pools`); this file runs the first of them.\n\
             pools = {pools}\n\n\
             [run]\nname = \"plan-{model}-{gpu}\"\nseed = 1\nduration_s = 120\ndrain_timeout_s = 120\n\n\
             [model]\npreset = \"{model}\"\n\n[hardware]\ngpu = \"{gpu}\"\n\n\
             [workload]\narrival = {{ process = \"poisson\", rate_per_s = {rate} }}\n\
             input_tokens = {{ dist = \"fixed\", value = {isl} }}\n\
             output_tokens = {{ dist = \"fixed\", value = {osl} }}\n\n\
             # Each request within both (DistServe's goodput), at the default 90 % attainment.\n\
             [slo]\nttft_ms = {ttft}\ntpot_ms = {tpot}\n",
            gpu = self.gpu,
            isl = self.isl,
            osl = self.osl,
            ttft = self.ttft_ms,
            tpot = self.tpot_ms,
            gpus = self.gpus,
        )
    }

    /// The deployments of at most `gpus` GPUs, as `pools` TOML arrays: disaggregated first
    /// (prefill TP, decode TP, then instances), then colocated.
    fn deployments(&self, moe: bool, gpus_per_node: u32) -> Vec<(u32, String)> {
        let server = |tp: u32| {
            if moe {
                // sglang's large-MoE recipe: DP attention over the instance's GPUs, the
                // experts spread over them (ep_size = tp_size), DeepEP's all-to-all.
                format!(
                    "{{tp_size={tp},dp_size={tp},enable_dp_attention=true,ep_size={tp},moe_a2a_backend=\"deepep\"}}"
                )
            } else {
                format!("{{tp_size={tp}}}")
            }
        };
        let tps: Vec<u32> = if moe {
            [8, 16, 32, 64]
                .into_iter()
                .filter(|&t| t <= self.gpus)
                .collect()
        } else {
            [1, 2, 4, 8, 16]
                .into_iter()
                .filter(|&t| t <= self.gpus && (t <= gpus_per_node || t % gpus_per_node == 0))
                .collect()
        };
        let mut out = Vec::new();
        for &tp_p in &tps {
            for &tp_d in &tps {
                for n_p in 1..=self.gpus / tp_p {
                    for n_d in 1..=(self.gpus - n_p * tp_p) / tp_d {
                        out.push((
                            n_p * tp_p + n_d * tp_d,
                            format!(
                                "[{{name=\"prefill\",role=\"prefill\",instances={n_p},server={}}},{{name=\"decode\",role=\"decode\",instances={n_d},server={}}}]",
                                server(tp_p),
                                server(tp_d)
                            ),
                        ));
                    }
                }
            }
        }
        for &tp in &tps {
            for n in 1..=self.gpus / tp {
                out.push((
                    n * tp,
                    format!(
                        "[{{name=\"servers\",role=\"colocated\",instances={n},server={}}}]",
                        server(tp)
                    ),
                ));
            }
        }
        out
    }
}

/// The plan's scenario text and its `--vary pools=...` axis: every deployment of the question
/// that validates at `rate`. No deployment that validates is exit 2 naming `--gpus`.
pub fn plan_of(q: &Question, rate: f64) -> Result<(String, String), CliError> {
    let model = q.checked()?;
    let spec = spec::preset(model).expect("a preset preset_for named");
    let moe = spec.moe.is_some();
    let path = PathBuf::from("scenario.toml");
    let candidates = q.deployments(moe, GPUS_PER_NODE);
    if candidates.len() > MAX_DEPLOYMENTS {
        return Err(CliError::flag(
            "--gpus",
            format!(
                "--gpus {}: {} deployments to try; at most {MAX_DEPLOYMENTS}: give fewer GPUs",
                q.gpus,
                candidates.len()
            ),
        ));
    }
    // Each deployment validated as its own scenario: one that cannot launch (the weights do not
    // fit at that TP, the heads do not split) is no point of the plan.
    let mut refused = None;
    let valid: Vec<String> = candidates
        .into_iter()
        .map(|(_, pools)| pools)
        .filter(|pools| {
            match crate::scenario::from_str(&q.scenario(model, pools, rate), &path, &[]) {
                Ok(_) => true,
                Err(e) => {
                    refused = Some(e.to_string());
                    false
                }
            }
        })
        .collect();
    let Some(first) = valid.first() else {
        return Err(CliError::flag(
            "--gpus",
            format!(
                "no deployment of {model} on {} within {} GPUs validates (disaggregated or colocated); the last tried, colocated servers at the largest TP, was refused with: {}; give more --gpus if the weights do not fit",
                q.gpu,
                q.gpus,
                refused.unwrap_or_default()
            ),
        ));
    };
    Ok((
        q.scenario(model, first, rate),
        format!("pools={}", valid.join(",")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(model: &str, gpus: u32) -> Question {
        Question {
            model: model.into(),
            gpu: "h100-sxm".into(),
            isl: 1024,
            osl: 256,
            ttft_ms: 1000.0,
            tpot_ms: 50.0,
            gpus,
        }
    }

    /// The grid counts by hand: 8 GPUs, TP 1, 2, 4, 8 on each side.
    #[test]
    fn the_deployments_are_every_split_within_the_gpus() {
        let d = q("llama-3.1-8b", 8).deployments(false, 8);
        // PD: for each TP pair, instance pairs with n_p·tp_p + n_d·tp_d ≤ 8.
        let mut pd = 0;
        for tp_p in [1, 2, 4, 8] {
            for tp_d in [1, 2, 4, 8] {
                for n_p in 1..=8 / tp_p {
                    for n_d in 1..=8 {
                        if n_p * tp_p + n_d * tp_d <= 8 {
                            pd += 1;
                        }
                    }
                }
            }
        }
        // Colocated: 8 + 4 + 2 + 1.
        assert_eq!(d.len(), pd + 15);
        assert!(d.iter().all(|(g, _)| *g <= 8));
        // A MoE model moves DP attention and EP with TP, from 8 GPUs.
        let m = q("deepseek-v3", 16).deployments(true, 8);
        assert!(
            m.iter()
                .all(|(_, p)| p.contains("ep_size=") && !p.contains("tp_size=4"))
        );
    }

    /// Only what validates is a point; a question nothing can serve is exit 2 naming --gpus.
    #[test]
    fn only_deployments_that_validate_are_planned() {
        let (_, axis) = plan_of(&q("llama-3.1-70b", 8), 4.0).unwrap();
        // 70B does not fit one H100: no TP 1 server anywhere.
        assert!(!axis.contains("tp_size=1}"), "{axis}");
        assert!(axis.contains("tp_size=2}") || axis.contains("tp_size=4}"));
        let e = plan_of(&q("llama-3.1-70b", 1), 4.0).unwrap_err();
        assert_eq!(e.key().as_deref(), Some("--gpus"), "{e}");
        for (bad, flag) in [
            (
                Question {
                    model: "gpt-9".into(),
                    ..q("x", 8)
                },
                "--model",
            ),
            (
                Question {
                    gpu: "h1000".into(),
                    ..q("llama-3.1-8b", 8)
                },
                "--gpu",
            ),
            (
                Question {
                    isl: 0,
                    ..q("llama-3.1-8b", 8)
                },
                "--isl",
            ),
            (
                Question {
                    tpot_ms: -1.0,
                    ..q("llama-3.1-8b", 8)
                },
                "--tpot",
            ),
            (
                Question {
                    gpus: 0,
                    ..q("llama-3.1-8b", 8)
                },
                "--gpus",
            ),
        ] {
            let e = plan_of(&bad, 4.0).unwrap_err();
            assert_eq!(e.key().as_deref(), Some(flag), "{e}");
        }
    }
}
