//! `pdsim lint` against a full simulation: for every row of the outcome table in
//! `../shared/domain/sglang-pd.md` §5.3 (and every sglang profile), lint's prediction from two
//! `sglang.launch_server` lines is what a simulation of the same pair gives.
//!
//! Row 13 (an MLA hybrid) uses the Kimi-Linear preset (issue 11), by its Hugging Face id and by
//! its config.json.

use crate::common;

use pdsim::diagnose::lint::{LintQuestion, lint};
use pdsim::scenario;

/// One side of a row: (unified, page size, attention TP, kv dtype, model path).
type Side = (bool, u32, u32, &'static str, &'static str);

const QWEN: &str = "Qwen/Qwen3-Next-80B-A3B-Instruct";
const NEMO: &str = "nvidia/Nemotron-H-8B-Base-8K";
const NEMO_SPEC: &str = "scenarios/models/nemotron-h-8b-extra-attention.config.json";
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";
const DSV3: &str = "deepseek-ai/DeepSeek-V3";
const KIMI: &str = "moonshotai/Kimi-Linear-48B-A3B-Instruct";
const KIMI_CONFIG: &str = "scenarios/models/kimi-linear-48b-a3b.config.json";

/// docs/sglang-pd.md §5.3, prefill → decode.
const ROWS: &[(&str, Side, Side)] = &[
    (
        "1",
        (true, 16, 2, "auto", QWEN),
        (true, 16, 2, "auto", QWEN),
    ),
    (
        "2",
        (true, 16, 2, "auto", QWEN),
        (true, 64, 2, "auto", QWEN),
    ),
    (
        "3",
        (true, 16, 1, "auto", QWEN),
        (true, 16, 2, "auto", QWEN),
    ),
    (
        "4",
        (true, 16, 2, "auto", QWEN),
        (true, 16, 4, "auto", QWEN),
    ),
    (
        "5",
        (true, 64, 4, "fp8_e4m3", QWEN),
        (true, 64, 8, "fp8_e4m3", QWEN),
    ),
    (
        "6",
        (true, 16, 2, "auto", QWEN),
        (false, 16, 2, "auto", QWEN),
    ),
    (
        "7",
        (false, 16, 2, "auto", QWEN),
        (true, 16, 2, "auto", QWEN),
    ),
    (
        "8",
        (true, 16, 2, "auto", QWEN),
        (false, 16, 4, "auto", QWEN),
    ),
    (
        "9",
        (true, 64, 2, "auto", NEMO),
        (true, 64, 2, "auto", NEMO),
    ),
    (
        "10",
        (true, 64, 1, "auto", NEMO),
        (true, 64, 2, "auto", NEMO),
    ),
    (
        "11",
        (true, 64, 4, "auto", NEMO),
        (false, 64, 4, "auto", NEMO),
    ),
    (
        "12",
        (true, 64, 2, "auto", NEMO_SPEC),
        (true, 64, 2, "auto", NEMO),
    ),
    (
        "13",
        (true, 16, 2, "auto", KIMI),
        (true, 16, 4, "auto", KIMI),
    ),
    (
        "13 config",
        (true, 16, 4, "auto", KIMI_CONFIG),
        (true, 16, 1, "auto", KIMI_CONFIG),
    ),
    (
        "13 equal TP",
        (true, 16, 2, "auto", KIMI),
        (true, 16, 2, "auto", KIMI),
    ),
    (
        "13 not unified",
        (false, 16, 2, "auto", KIMI),
        (false, 16, 4, "auto", KIMI),
    ),
    (
        "14 page size",
        (false, 16, 2, "auto", LLAMA),
        (false, 64, 2, "auto", LLAMA),
    ),
    (
        "14 kv dtype",
        (false, 16, 2, "auto", LLAMA),
        (false, 16, 2, "bf16", LLAMA),
    ),
    (
        "14 TP (slice)",
        (false, 16, 2, "auto", LLAMA),
        (false, 16, 4, "auto", LLAMA),
    ),
    (
        "14 MLA TP",
        (false, 64, 8, "auto", DSV3),
        (false, 64, 4, "auto", DSV3),
    ),
];

fn launch_line(s: &Side, mode: &str) -> String {
    format!(
        "python -m sglang.launch_server --model-path {} --disaggregation-mode {mode} --tp-size {} --page-size {} --kv-cache-dtype {}{} --host 0.0.0.0 --port 30000 --trust-remote-code",
        s.4,
        s.2,
        s.1,
        s.3,
        if s.0 { " --enable-unified-memory" } else { "" }
    )
}

fn model_key(path: &str) -> String {
    if path.ends_with(".json") {
        // Relative to the scenario, written in the repository root.
        format!("model = {{ config = \"{path}\" }}")
    } else {
        let preset = pdsim::spec::launch::preset_for(path).unwrap();
        format!("model = {{ preset = \"{preset}\" }}")
    }
}

fn scenario_text(p: &Side, d: &Side, profile: &str) -> String {
    let pool = |name: &str, s: &Side| {
        format!(
            "[[pools]]\nname = \"{name}\"\nrole = \"{name}\"\ninstances = 1\n{}\n[pools.server]\ntp_size = {}\npage_size = {}\nkv_cache_dtype = \"{}\"\nenable_unified_memory = {}\n\n",
            model_key(s.4),
            s.2,
            s.1,
            s.3,
            s.0
        )
    };
    // DeepSeek-V3 at TP 4 needs more memory than an H100 has; a large HBM keeps every row
    // about the transfer contract, not capacity.
    format!(
        "[run]\nname = \"lint-row\"\nseed = 1\nduration_s = 4\ndrain_timeout_s = 60\n\n[hardware]\ngpu = \"b200\"\nhbm_gb = 300\n\n{}{}[workload]\narrival = {{ process = \"constant\", rate_per_s = 2.0 }}\ninput_tokens = {{ dist = \"fixed\", value = 600 }}\noutput_tokens = {{ dist = \"fixed\", value = 8 }}\n\n[sglang]\nprofile = \"{profile}\"\nwaiting_timeout_s = 5\n",
        pool("prefill", p),
        pool("decode", d)
    )
}

/// The simulation's outcome as lint names it: the first causing error kind, else corrupted,
/// else completed.
fn simulated(p: &Side, d: &Side, profile: &str) -> (String, Option<String>) {
    let text = scenario_text(p, d, profile);
    let path = common::repo().join("lint-row.toml");
    let sc = scenario::from_str(&text, &path, &[])
        .unwrap_or_else(|e| panic!("row scenario does not load: {e}\n{text}"));
    let s = pdsim::app::run::summarize(&sc).unwrap();
    let cause = s
        .errors
        .iter()
        .map(|e| e.kind.clone())
        .find(|k| !["waiting_timeout", "session_blacklisted"].contains(&k.as_str()));
    let outcome = if cause.is_some() {
        "failed"
    } else if s.requests.corrupted > 0 {
        "corrupted"
    } else {
        assert_eq!(s.requests.completed, s.requests.arrived, "{text}");
        "completed"
    };
    (outcome.to_string(), cause)
}

#[test]
fn lint_predicts_what_the_simulation_gives_for_every_outcome_table_row() {
    let mut checked = 0;
    let mut table = String::new();
    for profile in ["guarded", "slice_dispatch", "unguarded"] {
        for (row, p, d) in ROWS {
            let args = LintQuestion {
                prefill: launch_line(p, "prefill"),
                decode: launch_line(d, "decode"),
                model_config: None,
                profile: profile.into(),
                version: None,
            };
            // The config.json path of rows 12 and 13 is relative to the repository root.
            let cwd = std::env::current_dir().unwrap();
            std::env::set_current_dir(common::repo()).unwrap();
            let r = lint(&args);
            std::env::set_current_dir(cwd).unwrap();
            let r = r.unwrap_or_else(|e| panic!("row {row}: lint failed: {e}"));
            let predicted = (
                r.prediction.outcome.to_string(),
                r.prediction.kind.map(|k| k.to_string()),
            );
            let sim = simulated(p, d, profile);
            table += &format!("{profile:>14} row {row:<14} lint {predicted:?} sim {sim:?}\n");
            assert_eq!(
                predicted, sim,
                "row {row} ({profile}): lint and simulation disagree\n{table}"
            );
            // Every failed prediction quotes sglang's text, as the simulation's summary does.
            if let Some(k) = &predicted.1 {
                let m = r.prediction.message.as_deref().unwrap();
                assert!(!m.is_empty(), "row {row}: {k} without a message");
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * ROWS.len());
    println!("{table}");
}

#[test]
fn lint_exit_codes_and_sglang_text() {
    let (code, out, err) = common::pdsim(&[
        "lint",
        "--prefill",
        &launch_line(&ROWS[1].1, "prefill"),
        "--decode",
        &launch_line(&ROWS[1].2, "decode"),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("Page size mismatch: prefill server has page_size=16, but decode server has page_size=64. Both servers must use the same --page-size value."), "{out}");
    assert!(out.contains("fix: use the same --page-size"), "{out}");
    let (code, out, err) = common::pdsim(&[
        "lint",
        "--prefill",
        &launch_line(&ROWS[0].1, "prefill"),
        "--decode",
        &(launch_line(&ROWS[0].2, "decode") + " --made-up-flag 3"),
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["prediction"]["compatible"], true);
    assert!(
        v["warnings"][0]
            .as_str()
            .unwrap()
            .contains("unknown flag --made-up-flag"),
        "{v}"
    );
    let (code, _, err) = common::pdsim(&[
        "lint",
        "--prefill",
        "python -m sglang.launch_server --model-path some/unknown-model",
        "--decode",
        &launch_line(&ROWS[0].2, "decode"),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--model-config"), "{err}");
}
