//! The sglang launch-line parser: a real `python -m sglang.launch_server …` command line read as
//! sglang's `ServerArgs` would read it (the flags pdsim models, their defaults, and warnings for
//! the rest). Shared by `pdsim lint` (which predicts a pair's outcome from two lines) and by the
//! planner's `launch.txt` (whose lines `lint` must accept).

use std::path::Path;

use serde::Serialize;

use crate::spec::{ModelSpec, ServerArgs, model};

/// A launch line pdsim cannot read (exit 2): the message names the side (`--prefill`,
/// `--decode`) and the flag, and says what would be valid.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// A word, flag or value of the line.
    #[error("{0}")]
    Line(String),
    /// The model config the line points at.
    #[error("{0}")]
    ModelConfig(#[from] crate::spec::hf::ConfigError),
}

/// One parsed `sglang.launch_server` line.
#[derive(Clone, Debug, Serialize)]
pub struct ServerLine {
    /// `--model-path` as given.
    pub model_path: String,
    /// The model pdsim lays out (preset name or the config's name).
    pub model: String,
    /// The server args pdsim models.
    pub args: ServerArgs,
    /// `--disaggregation-mode`, if given.
    pub mode: Option<String>,
    /// Flags pdsim does not know, or knows to be outside its model.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// The model resolved by [`resolve_model`].
    #[serde(skip)]
    pub spec: Option<ModelSpec>,
    /// The `--speculative-*` flags (and `--attention-backend`, which sglang's speculative
    /// checks read) as given: `pdsim lint` resolves them as a scenario's
    /// `pools.server.speculative_*` keys are resolved (`scenario::speculative_for_line`).
    #[serde(skip)]
    pub speculative_flags: Vec<(String, String)>,
    /// `--disaggregation-enable-kv-checksum` (sglang PR #39500): whether a release has it is
    /// `pdsim lint --sglang-version`'s question.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kv_checksum: bool,
    /// `--disaggregation-decode-enable-radix-cache` (sglang PR #19746): decode-side prefix
    /// reuse, `pdsim lint`'s to check against the version and sglang's refusals.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decode_radix_cache: bool,
    /// `--disaggregation-transfer-backend` as given (`mooncake` when absent).
    #[serde(skip)]
    pub transfer_backend: String,
    /// `--enable-hisparse`, which sglang refuses with the decode radix cache.
    #[serde(skip)]
    pub hisparse: bool,
    /// `--enable-hierarchical-cache` (HiCache), which sglang refuses on a decode with
    /// `--dcp-size > 1`; otherwise not part of what lint predicts.
    #[serde(skip)]
    pub hierarchical_cache: bool,
    /// `--disaggregation-decode-extra-slots` as given (2026; the seed reads
    /// `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS` instead).
    #[serde(skip)]
    pub decode_extra_slots: Option<u32>,
}

/// The launch flags of speculative decoding pdsim reads, with the scenario key each is
/// (`docs/sglang-pd.md` §19.1).
pub const SPECULATIVE_FLAGS: &[(&str, &str)] = &[
    ("--speculative-algorithm", "speculative_algorithm"),
    ("--speculative-num-steps", "speculative_num_steps"),
    ("--speculative-eagle-topk", "speculative_eagle_topk"),
    (
        "--speculative-num-draft-tokens",
        "speculative_num_draft_tokens",
    ),
    (
        "--speculative-draft-model-path",
        "speculative_draft_model_path",
    ),
    ("--attention-backend", "attention_backend"),
];

/// Splits a command line as a POSIX shell would for plain words, quotes and backslashes
/// (no expansions); a backslash-newline continues the line.
pub fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(n) => {
                    cur.push(n);
                    in_word = true;
                }
                None => return Err("the line ends with a lone backslash".into()),
            },
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(n) => cur.push(n),
                        None => return Err("unclosed single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(n @ ('"' | '\\' | '$' | '`')) => cur.push(n),
                            Some('\n') => {}
                            Some(n) => {
                                cur.push('\\');
                                cur.push(n);
                            }
                            None => return Err("unclosed double quote".into()),
                        },
                        Some(n) => cur.push(n),
                        None => return Err("unclosed double quote".into()),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Flags that take a value and do not change the transfer contract or capacity pdsim models.
const IGNORED_WITH_VALUE: &[&str] = &[
    "--host",
    "--port",
    "--served-model-name",
    "--tokenizer-path",
    "--log-level",
    "--disaggregation-ib-device",
    "--disaggregation-bootstrap-port",
    // Micro-batches a PP prefill keeps in flight beyond its stages (`pools.server.
    // pp_async_batch_depth`, docs/sglang-pd.md §27): throughput under load, never what a
    // stage writes.
    "--pp-async-batch-depth",
    "--base-gpu-id",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--cuda-graph-max-bs",
    "--context-length",
    "--load-format",
    "--random-seed",
    "--watchdog-timeout",
    "--api-key",
    "--schedule-policy",
    "--stream-interval",
    "--decode-log-interval",
    "--ep-size",
    "--ep",
    "--moe-a2a-backend",
    "--ep-num-redundant-experts",
    "--revision",
    // Capacity and caching knobs a scenario models (`pools.server.*`), not the contract.
    "--num-reserved-decode-tokens",
    "--hicache-ratio",
    "--hicache-size",
    "--hicache-write-policy",
    "--hicache-storage-backend",
    "--hicache-storage-prefetch-policy",
];
/// Boolean flags that do not change what pdsim models.
const IGNORED_SWITCHES: &[&str] = &[
    "--trust-remote-code",
    "--disable-cuda-graph",
    "--enable-metrics",
    "--enable-two-batch-overlap",
    "--enable-eplb",
    // The decode side's offload to the store: what it changes is prefix reuse and store
    // traffic (`pools.server.disaggregation_decode_enable_offload_kvcache`), not the contract.
    "--disaggregation-decode-enable-offload-kvcache",
    // How a plain server schedules its forwards (a colocated pool's
    // `pools.server.enable_mixed_chunk`, which `plan` writes into `launch.txt`); a PD server
    // never mixes (its batches are prefill only or decode only), and no layout depends on it.
    "--enable-mixed-chunk",
    // How long a step takes (`pools.server.disable_overlap_schedule`: the scheduler's host work
    // after the forward instead of beside it), never what a transfer carries.
    "--disable-overlap-schedule",
    "--skip-server-warmup",
    "--enable-cache-report",
    "--log-requests",
];
/// Every flag lint reads.
const READ: &[&str] = &[
    // Request rows on a decode worker (scenarios: `disaggregation_decode_extra_slots`): no part
    // of the layouts a pair is predicted from, read for the version that has the flag.
    "--disaggregation-decode-extra-slots",
    "--model-path",
    "--model",
    "--tp-size",
    "--tp",
    "--dp-size",
    "--dp",
    "--enable-dp-attention",
    "--page-size",
    "--kv-cache-dtype",
    "--enable-unified-memory",
    "--disaggregation-mode",
    "--chunked-prefill-size",
    "--mem-fraction-static",
    "--max-running-requests",
    "--max-prefill-tokens",
    "--disable-radix-cache",
    "--disaggregation-transfer-backend",
    "--pp-size",
    "--pp",
    "--dcp-size",
    "--decode-context-parallel-size",
    "--speculative-algorithm",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--speculative-draft-model-path",
    "--attention-backend",
    "--dtype",
    "--quantization",
    "--cpu-offload-gb",
    "--offload-group-size",
    "--offload-num-in-group",
    "--offload-prefetch-step",
    "--offload-mode",
    "--mamba-ssm-dtype",
    "--disaggregation-enable-kv-checksum",
    "--disaggregation-decode-enable-radix-cache",
    "--enable-hisparse",
];

/// Hugging Face ids (lowercased, organisation dropped) → preset: the public checkpoints whose
/// architecture a preset describes.
const HF_IDS: &[(&str, &str)] = &[
    ("llama-3.1-8b", "llama-3.1-8b"),
    ("meta-llama-3.1-8b", "llama-3.1-8b"),
    ("llama-3.1-70b", "llama-3.1-70b"),
    ("meta-llama-3.1-70b", "llama-3.1-70b"),
    ("llama-3.3-70b", "llama-3.1-70b"),
    ("llama-2-70b", "llama2-70b"),
    ("qwen3-8b", "qwen3-8b"),
    ("deepseek-v3", "deepseek-v3"),
    ("deepseek-r1", "deepseek-v3"),
    ("qwen3-next-80b-a3b", "qwen3-next-80b-a3b"),
    ("nemotron-h-8b", "nemotron-h-8b"),
    ("bloom", "bloom-176b"),
    ("qwen3-235b-a22b", "qwen3-235b-a22b"),
    ("kimi-linear-48b-a3b", "kimi-linear-48b-a3b"),
    ("kimi-k2", "kimi-k2"),
];

/// The preset a `--model-path` names: a preset itself, or a known Hugging Face id
/// (`Qwen/Qwen3-Next-80B-A3B-Instruct` → `qwen3-next-80b-a3b`; suffixes such as `-Instruct`
/// or `-Base-8K` do not change the layout).
pub fn preset_for(model_path: &str) -> Option<&'static str> {
    let lower = model_path.trim_end_matches('/').to_lowercase();
    if let Some(p) = model::MODEL_PRESETS.iter().find(|p| **p == lower) {
        return Some(p);
    }
    let last = lower.rsplit('/').next().unwrap_or(&lower);
    HF_IDS
        .iter()
        .filter(|(id, _)| last == *id || last.starts_with(&format!("{id}-")))
        .max_by_key(|(id, _)| id.len())
        .map(|(_, p)| *p)
}

fn parse_u32(flag: &str, v: &str, side: &str) -> Result<u32, LaunchError> {
    v.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
        LaunchError::Line(format!("--{side}: {flag} {v:?} must be a whole number ≥ 1"))
    })
}

/// A TP or DP size: at least 1 and at most the cluster bound a scenario accepts
/// (`limits::MAX_CLUSTER_GPUS`): lint compares the pair rank by rank, so an unbounded size
/// is an unbounded amount of work, where no real server has more GPUs than that.
fn parse_ranks(flag: &str, v: &str, side: &str) -> Result<u32, LaunchError> {
    let max = crate::vocab::limits::MAX_CLUSTER_GPUS;
    let n = parse_u32(flag, v, side)?;
    if n > max {
        return Err(LaunchError::Line(format!(
            "--{side}: {flag} {n} is above the bound of {max} GPUs (the most a pdsim cluster has)"
        )));
    }
    Ok(n)
}

/// Parses one `launch_server` line of `side` (`prefill` / `decode`).
pub fn parse_line(line: &str, side: &str) -> Result<ServerLine, LaunchError> {
    let words = shell_words(line).map_err(|e| LaunchError::Line(format!("--{side}: {e}")))?;
    // Skip `python -m sglang.launch_server` (or any launcher) up to the first flag.
    let start = words.iter().position(|w| w.starts_with("--"));
    let mut p = Parsed::new();
    let mut i = start.unwrap_or(words.len());
    while i < words.len() {
        let w = &words[i];
        i += 1;
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (w.clone(), None),
        };
        if !flag.starts_with("--") {
            p.warnings.push(format!("{w:?} is not a flag; ignored"));
            continue;
        }
        let switch = matches!(
            flag.as_str(),
            "--enable-dp-attention"
                | "--enable-unified-memory"
                | "--disable-radix-cache"
                | "--disaggregation-enable-kv-checksum"
                | "--disaggregation-decode-enable-radix-cache"
                | "--enable-hisparse"
                | "--enable-hierarchical-cache"
        ) || IGNORED_SWITCHES.contains(&flag.as_str());
        let known = READ.contains(&flag.as_str()) || IGNORED_WITH_VALUE.contains(&flag.as_str());
        if !known && !switch {
            // An unknown flag: take a following non-flag word as its value, and warn.
            let value = inline.or_else(|| {
                let v = words.get(i).filter(|v| !v.starts_with("--")).cloned();
                i += usize::from(v.is_some());
                v
            });
            let near = crate::vocab::suggest::suggestion(
                &flag,
                &[READ, IGNORED_WITH_VALUE, IGNORED_SWITCHES].concat(),
            );
            p.warnings.push(format!(
                "unknown flag {flag}{}: ignored (pdsim does not model it){near}",
                value.map(|v| format!(" {v}")).unwrap_or_default()
            ));
            continue;
        }
        let value = if switch {
            None
        } else {
            let v = inline.or_else(|| {
                let v = words.get(i).cloned();
                i += 1;
                v
            });
            Some(v.ok_or_else(|| LaunchError::Line(format!("--{side}: {flag} needs a value")))?)
        };
        p.apply(&flag, value.as_deref().unwrap_or(""), side)?;
    }
    if start.is_none() || p.model_path.is_none() {
        return Err(LaunchError::Line(format!(
            "--{side}: no --model-path in {line:?}; give the whole launch line, e.g. \"python -m sglang.launch_server --model-path Qwen/Qwen3-Next-80B-A3B-Instruct --disaggregation-mode {side} --tp-size 2\""
        )));
    }
    p.finish(side)
}

/// A launch line's flags as read so far.
struct Parsed {
    args: ServerArgs,
    model_path: Option<String>,
    mode: Option<String>,
    dp: u32,
    dp_attention: bool,
    warnings: Vec<String>,
    speculative: Vec<(String, String)>,
    /// `--cpu-offload-gb` and `--offload-group-size` as given (sglang's two offloaders).
    offload: (u32, Option<i64>),
    /// `--disaggregation-enable-kv-checksum`.
    kv_checksum: bool,
    /// `--disaggregation-decode-enable-radix-cache`, `--disaggregation-transfer-backend`,
    /// `--enable-hisparse`.
    decode_radix: (bool, String, bool),
    /// `--disaggregation-decode-extra-slots`.
    extra_slots: Option<u32>,
    /// `--enable-hierarchical-cache`.
    hierarchical_cache: bool,
}

impl Parsed {
    /// sglang's defaults (`ServerArgs` in `server_args.py`) for the flags pdsim reads.
    fn new() -> Self {
        Self {
            args: ServerArgs::sglang_defaults(1, 1, "auto"),
            model_path: None,
            mode: None,
            dp: 1,
            dp_attention: false,
            warnings: Vec::new(),
            speculative: Vec::new(),
            offload: (0, None),
            kv_checksum: false,
            decode_radix: (false, "mooncake".to_string(), false),
            extra_slots: None,
            hierarchical_cache: false,
        }
    }

    /// Applies one known flag with its value (`""` for a switch).
    fn apply(&mut self, flag: &str, v: &str, side: &str) -> Result<(), LaunchError> {
        let args = &mut self.args;
        match flag {
            "--model-path" | "--model" => self.model_path = Some(v.to_string()),
            "--tp-size" | "--tp" => args.tp_size = parse_ranks(flag, v, side)?,
            "--dp-size" | "--dp" => self.dp = parse_ranks(flag, v, side)?,
            "--enable-dp-attention" => self.dp_attention = true,
            "--page-size" => {
                args.page_size = v.parse::<u32>().map_err(|_| {
                    LaunchError::Line(format!("--{side}: {flag} {v:?} must be a whole number ≥ 1"))
                })?;
                crate::spec::server::check_page_size(args.page_size).map_err(|m| {
                    LaunchError::Line(format!("--{side}: {flag} {v}: {m}"))
                })?;
            }
            "--kv-cache-dtype" => {
                if !crate::spec::server::KV_CACHE_DTYPES.contains(&v) {
                    let why = crate::spec::server::unmodelled_kv_dtype(v)
                        .map_or_else(String::new, |w| format!("{w}; "));
                    return Err(LaunchError::Line(format!(
                        "--{side}: --kv-cache-dtype {v:?}: {why}pdsim models {}",
                        crate::spec::server::KV_CACHE_DTYPES.join(", ")
                    )));
                }
                args.kv_cache_dtype = v.to_string();
            }
            "--enable-unified-memory" => args.enable_unified_memory = true,
            "--disaggregation-enable-kv-checksum" => self.kv_checksum = true,
            "--disaggregation-decode-enable-radix-cache" => self.decode_radix.0 = true,
            "--enable-hisparse" => self.decode_radix.2 = true,
            "--enable-hierarchical-cache" => self.hierarchical_cache = true,
            "--disaggregation-decode-extra-slots" => {
                self.extra_slots = Some(v.parse::<u32>().map_err(|_| {
                    LaunchError::Line(format!("--{side}: {flag} {v:?} must be a whole number ≥ 0"))
                })?);
            }
            "--mamba-ssm-dtype" => {
                if crate::spec::server::mamba_ssm_dtype_bytes(v).is_none() {
                    let valid: Vec<&str> = crate::spec::server::MAMBA_SSM_DTYPES
                        .iter()
                        .map(|x| x.0)
                        .collect();
                    return Err(LaunchError::Line(format!(
                        "--{side}: --mamba-ssm-dtype {v:?}: sglang takes {}",
                        valid.join(", ")
                    )));
                }
                args.mamba_ssm_dtype = Some(v.to_string());
            }
            "--disaggregation-mode" => self.mode = Some(v.to_string()),
            "--chunked-prefill-size" => args.chunked_prefill_size = parse_u32(flag, v, side)?,
            "--max-prefill-tokens" => args.max_prefill_tokens = parse_u32(flag, v, side)?,
            "--max-running-requests" => {
                args.max_running_requests = Some(parse_u32(flag, v, side)?);
            }
            "--mem-fraction-static" => {
                args.mem_fraction_static = v
                    .parse::<f64>()
                    .ok()
                    .filter(|f| *f > 0.0 && *f <= 1.0)
                    .ok_or_else(|| {
                        LaunchError::Line(format!(
                            "--{side}: --mem-fraction-static {v:?} must be in (0, 1]"
                        ))
                    })?;
            }
            "--disable-radix-cache" => args.radix_cache = None,
            "--disaggregation-transfer-backend" => {
                self.decode_radix.1 = v.to_string();
                // Layouts and hazards do not depend on the backend; pdsim runs four of them
                // (`spec::TransferBackend::not_modelled`) and warns for the rest.
                let run = v
                    .parse::<crate::spec::TransferBackend>()
                    .is_ok_and(|b| b.not_modelled().is_none());
                if !run {
                    self.warnings.push(format!(
                        "--disaggregation-transfer-backend {v}: pdsim runs mooncake, mooncake_tcp, nixl and mori; the prediction is mooncake's"
                    ));
                }
            }
            // Pipeline stages (docs/sglang-pd.md §27): a prefill's stages each write their own
            // layers; `finish` reads a decode's as one stage.
            "--pp-size" | "--pp" => args.pp_size = parse_ranks(flag, v, side)?,
            // Decode context parallelism (docs/sglang-pd.md §28); `--decode-context-parallel-size`
            // is sglang's alias. `finish` reads a prefill's as 1; lint checks a decode's.
            "--dcp-size" | "--decode-context-parallel-size" => {
                args.dcp_size = parse_ranks(flag, v, side)?;
            }
            f if SPECULATIVE_FLAGS.iter().any(|(g, _)| *g == f) => {
                self.speculative.push((f.to_string(), v.to_string()));
            }
            // What `pools.server.quantization` takes; the transfer contract does not depend on
            // it (KV stays the activations' dtype under `--kv-cache-dtype auto`, as in sglang).
            "--quantization" => match crate::spec::server::Quantization::parse(v) {
                Some(q) => args.quantization = Some(q),
                None => self.warnings.push(format!(
                    "--quantization {v}: pdsim models {} only; the line is read with the checkpoint's own weights (the KV layout does not depend on it)",
                    crate::spec::server::QUANTIZATIONS.join(", ")
                )),
            },
            // Weight offload (`compute::offload`): it moves weights to host memory and adds
            // fetches to every forward, never the KV layout; read so that a line sglang would
            // refuse is refused here too.
            "--cpu-offload-gb" => {
                self.offload.0 = v.parse::<u32>().map_err(|_| {
                    LaunchError::Line(format!(
                        "--{side}: {flag} {v:?} must be a whole number of GiB ≥ 0"
                    ))
                })?;
            }
            // sglang's default is -1 (off); any value ≤ 0 leaves it off.
            "--offload-group-size" => {
                self.offload.1 = Some(v.parse::<i64>().map_err(|_| {
                    LaunchError::Line(format!("--{side}: {flag} {v:?} must be a whole number"))
                })?);
            }
            "--offload-num-in-group" | "--offload-prefetch-step" => {
                v.parse::<u32>().map_err(|_| {
                    LaunchError::Line(format!(
                        "--{side}: {flag} {v:?} must be a whole number ≥ 0"
                    ))
                })?;
            }
            "--offload-mode" if !matches!(v, "cpu" | "shm_cpu" | "sharded_gpu" | "meta") => {
                return Err(LaunchError::Line(format!(
                    "--{side}: --offload-mode {v:?}: sglang takes cpu, shm_cpu, sharded_gpu or meta"
                )));
            }
            "--dtype" if !matches!(v, "auto" | "bfloat16" | "bf16") => self.warnings.push(format!(
                "--dtype {v}: pdsim lays out bf16 activations; `--kv-cache-dtype auto` is taken as bf16"
            )),
            _ => {}
        }
        Ok(())
    }

    /// Attention TP from DP attention, the mode warnings, and the line.
    fn finish(mut self, side: &str) -> Result<ServerLine, LaunchError> {
        if self.offload.0 > 0 && self.offload.1.is_some_and(|g| g > 0) {
            return Err(LaunchError::Line(format!(
                "--{side}: --cpu-offload-gb {} with --offload-group-size {}: sglang's create_offloader asserts \"V2 offload does not support cpu_offload_gb yet\"; keep one",
                self.offload.0,
                self.offload.1.unwrap_or_default()
            )));
        }
        let dp = self.dp;
        if self.dp_attention {
            if !self.args.tp_size.is_multiple_of(dp) {
                return Err(LaunchError::Line(format!(
                    "--{side}: --dp-size {dp} does not divide --tp-size {}",
                    self.args.tp_size
                )));
            }
            self.args.attn_tp_size = self.args.tp_size / dp;
        } else {
            self.args.attn_tp_size = self.args.tp_size;
            if dp > 1 {
                self.warnings.push(format!(
                    "--dp-size {dp} without --enable-dp-attention runs {dp} data-parallel copies, each with attention TP {}",
                    self.args.tp_size
                ));
            }
        }
        if side == "prefill" && self.args.dcp_size > 1 {
            self.warnings.push(format!(
                "--dcp-size {} on the prefill line: sglang warns \"DCP on a PD prefill server is supported when prefill and decode use the same DCP layout, but it usually adds communication overhead without improving prefill performance.\" (handle_pd_disaggregation); pdsim models a DCP-1 prefill into a DCP decode, so the prediction reads this prefill with --dcp-size 1",
                self.args.dcp_size
            ));
            self.args.dcp_size = 1;
        }
        if side == "decode" && self.args.pp_size > 1 {
            self.warnings.push(format!(
                "--pp-size {} on the decode line: sglang's CommonKVReceiver takes a decode pp_size equal to the prefill's (\"Decode pp size should be equal to prefill pp size or 1\") and runs event_loop_pp_disagg_decode; pdsim models a decode of one stage, so the prediction reads this decode with --pp-size 1",
                self.args.pp_size
            ));
            self.args.pp_size = 1;
        }
        match self.mode.as_deref() {
            Some(m) if m == side => {}
            Some(m) => self.warnings.push(format!(
                "--disaggregation-mode {m} on the --{side} line: this line is used as the {side} server"
            )),
            None => self.warnings.push(format!(
                "no --disaggregation-mode: this line is used as the {side} server"
            )),
        }
        Ok(ServerLine {
            model: String::new(),
            model_path: self.model_path.unwrap_or_default(),
            args: self.args,
            mode: self.mode,
            warnings: self.warnings,
            spec: None,
            speculative_flags: self.speculative,
            kv_checksum: self.kv_checksum,
            decode_radix_cache: self.decode_radix.0,
            transfer_backend: self.decode_radix.1,
            hisparse: self.decode_radix.2,
            hierarchical_cache: self.hierarchical_cache,
            decode_extra_slots: self.extra_slots,
        })
    }
}

/// Resolves the model of a line: `--model-config` when given, else a preset or known id, else a
/// local folder holding `config.json` (or a `.json` file).
pub fn resolve_model(
    l: &mut ServerLine,
    config: Option<&Path>,
    side: &str,
) -> Result<(), LaunchError> {
    let local = Path::new(&l.model_path);
    let local = if local.is_dir() {
        local.join("config.json")
    } else {
        local.to_path_buf()
    };
    // A local checkpoint wins over a name that merely looks like a known id.
    let spec = if let Some(c) = config {
        crate::spec::hf::load_model_config(c)?
    } else if local.is_file() {
        crate::spec::hf::load_model_config(&local)?
    } else if let Some(p) = preset_for(&l.model_path) {
        model::preset(p).expect("a listed preset")
    } else {
        return Err(LaunchError::Line(format!(
            "--{side}: --model-path {:?} is neither a model pdsim knows ({}; or their Hugging Face ids) nor a local folder with a config.json; pass --model-config path/to/config.json",
            l.model_path,
            model::MODEL_PRESETS.join(", ")
        )));
    };
    let mut spec = spec;
    if let Some(q) = l.args.quantization {
        q.apply(&mut spec);
    }
    // `--mamba-ssm-dtype` sets the temporal state's element size of a mamba/GDN hybrid; on a
    // model without that state sglang has nothing to set either.
    if let Some(bytes) =
        (l.args.mamba_ssm_dtype.as_deref()).and_then(crate::spec::server::mamba_ssm_dtype_bytes)
        && let Some(m) = spec.mamba.as_mut()
    {
        m.ssm_dtype_bytes = bytes;
    }
    l.model = spec.name.clone();
    l.spec = Some(spec);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_split_like_a_shell() {
        let w =
            shell_words("python -m sglang.launch_server \\\n --model-path 'a b' --tp=2 \"x\\\"y\"")
                .unwrap();
        assert_eq!(
            w,
            [
                "python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "a b",
                "--tp=2",
                "x\"y"
            ]
        );
        assert!(shell_words("--x 'open").is_err());
    }

    /// DP without DP attention keeps attention TP; sglang's defaults fill what a line omits.
    #[test]
    fn dp_without_dp_attention_warns_and_defaults_hold() {
        let l = parse_line("x --model-path m --tp 4 --dp 2 --frobnicate 3", "prefill").unwrap();
        assert_eq!(
            l.args.attn_tp_size, 4,
            "DP without DP attention keeps attention TP"
        );
        let w = l.warnings.join("\n");
        assert!(w.contains("unknown flag --frobnicate 3"), "{w}");
        assert!(
            w.contains("--dp-size 2 without --enable-dp-attention"),
            "{w}"
        );
        assert!(w.contains("no --disaggregation-mode"), "{w}");
    }

    /// Each malformed line is a usage error naming the side and the flag.
    #[test]
    fn bad_launch_lines_name_the_flag() {
        for (line, want) in [
            ("x --model-path m --tp", "--prefill: --tp needs a value"),
            ("x --tp 2", "--prefill: no --model-path"),
            (
                "x --model-path m --tp 0",
                "--tp \"0\" must be a whole number",
            ),
            (
                "x --model-path m --tp 6 --dp 4 --enable-dp-attention",
                "--dp-size 4 does not divide --tp-size 6",
            ),
            (
                "x --model-path m --mem-fraction-static 1.5",
                "--mem-fraction-static \"1.5\" must be in (0, 1]",
            ),
            (
                "x --model-path m --kv-cache-dtype int3",
                "--kv-cache-dtype \"int3\"",
            ),
        ] {
            let e = parse_line(line, "prefill")
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn hf_ids_map_to_presets() {
        assert_eq!(
            preset_for("Qwen/Qwen3-Next-80B-A3B-Instruct"),
            Some("qwen3-next-80b-a3b")
        );
        assert_eq!(
            preset_for("meta-llama/Llama-3.1-8B-Instruct"),
            Some("llama-3.1-8b")
        );
        assert_eq!(
            preset_for("meta-llama/Meta-Llama-3.1-70B"),
            Some("llama-3.1-70b")
        );
        assert_eq!(
            preset_for("deepseek-ai/DeepSeek-V3-0324"),
            Some("deepseek-v3")
        );
        assert_eq!(
            preset_for("nvidia/Nemotron-H-8B-Base-8K"),
            Some("nemotron-h-8b")
        );
        assert_eq!(preset_for("qwen3-8b"), Some("qwen3-8b"));
        assert_eq!(
            preset_for("moonshotai/Kimi-Linear-48B-A3B-Instruct"),
            Some("kimi-linear-48b-a3b")
        );
        assert_eq!(
            preset_for("Qwen/Qwen3-235B-A22B-Instruct-2507"),
            Some("qwen3-235b-a22b")
        );
        assert_eq!(preset_for("mistralai/Mistral-7B"), None);
    }

    #[test]
    fn lines_parse_with_dp_attention_and_unknown_flags_warned() {
        let l = parse_line(
            "python3 -m sglang.launch_server --model-path x --tp-size 8 --dp-size 4 --enable-dp-attention --page-size=64 --kv-cache-dtype fp8_e4m3 --disaggregation-mode decode --frobnicate 3 --enable-unified-memory",
            "decode",
        )
        .unwrap();
        assert_eq!(
            (l.args.tp_size, l.args.attn_tp_size, l.args.page_size),
            (8, 2, 64)
        );
        assert_eq!(l.args.kv_cache_dtype, "fp8_e4m3");
        assert!(l.args.enable_unified_memory);
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("--frobnicate 3"));
        assert!(parse_line("--model-path x --tp-size zero", "prefill").is_err());
        assert!(parse_line("--model-path x --page-size", "prefill").is_err());
        assert!(parse_line("python -m sglang.launch_server --tp 2", "prefill").is_err());
    }

    /// `--quantization fp8` becomes the server arg a scenario's `quantization = "fp8"` sets, on
    /// both sides alike; a pair that differs is compatible but warned; a method pdsim does not
    /// model is warned and read as unquantized.
    /// `--enable-mixed-chunk`, `--disable-overlap-schedule` and `--pp-async-batch-depth N` are
    /// accepted without a warning, on either side (issues 39, 43): they change how a server
    /// schedules its forwards, not the transfer contract; the next flag is read as its own.
    #[test]
    fn mixed_chunk_and_overlap_are_accepted_quietly() {
        for flag in [
            "--enable-mixed-chunk",
            "--disable-overlap-schedule",
            "--pp-async-batch-depth 2",
        ] {
            for side in ["prefill", "decode"] {
                let l = parse_line(
                    &format!(
                        "x --model-path llama-3.1-8b {flag} --tp 2 --disaggregation-mode {side}"
                    ),
                    side,
                )
                .unwrap();
                assert!(l.warnings.is_empty(), "{flag}: {:?}", l.warnings);
                assert_eq!(l.args.tp_size, 2, "{flag}");
            }
        }
    }

    /// `--disaggregation-transfer-backend`: the four backends pdsim runs read quietly; the
    /// others (and a typo) are warned (docs/sglang-pd.md §26.3).
    #[test]
    fn only_backends_pdsim_does_not_run_are_warned() {
        for (b, warned) in [
            ("mooncake", false),
            ("mooncake_tcp", false),
            ("nixl", false),
            ("mori", false),
            ("ascend", true),
            ("fake", true),
            ("nixl2", true),
        ] {
            let l = parse_line(
                &format!(
                    "x --model-path llama-3.1-8b --disaggregation-mode prefill --disaggregation-transfer-backend {b}"
                ),
                "prefill",
            )
            .unwrap();
            assert_eq!(l.transfer_backend, b);
            assert_eq!(!l.warnings.is_empty(), warned, "{b}: {:?}", l.warnings);
        }
    }

    #[test]
    fn quantization_is_read_into_the_server_args() {
        let line = |side: &str, q: &str| {
            format!(
                "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --disaggregation-mode {side} --tp-size 2 {q}"
            )
        };
        let l = parse_line(&line("prefill", "--quantization fp8"), "prefill").unwrap();
        assert_eq!(
            l.args.quantization,
            Some(crate::spec::server::Quantization::Fp8)
        );
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        let l = parse_line(&line("prefill", "--quantization=awq"), "prefill").unwrap();
        assert_eq!(l.args.quantization, None);
        assert!(
            l.warnings
                .iter()
                .any(|w| w.contains("--quantization awq") && w.contains("fp8")),
            "{:?}",
            l.warnings
        );
    }

    /// Issue 43's flags: `--quantization modelopt_fp4` is read (an NVFP4 checkpoint), the
    /// offload flags are read and checked as sglang checks them (both offloaders at once is
    /// its assertion), and a line starting with environment assignments (what `launch.txt`
    /// writes on NVL72 racks) parses as the same line.
    #[test]
    fn nvfp4_and_offload_flags_are_read_and_checked() {
        let base = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --disaggregation-mode prefill --tp-size 4";
        let l = parse_line(
            &format!(
                "SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK MC_FORCE_MNNVL=1 {base} --quantization modelopt_fp4 --offload-group-size 2 --offload-num-in-group 1 --offload-prefetch-step 1 --offload-mode cpu"
            ),
            "prefill",
        )
        .unwrap();
        assert_eq!(
            l.args.quantization,
            Some(crate::spec::server::Quantization::ModeloptFp4)
        );
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        assert_eq!(l.args.tp_size, 4);
        for (flags, want) in [
            (
                "--cpu-offload-gb 20 --offload-group-size 2",
                "V2 offload does not support cpu_offload_gb yet",
            ),
            ("--offload-mode disk", "--offload-mode \"disk\""),
            ("--cpu-offload-gb -3", "--cpu-offload-gb \"-3\""),
            ("--kv-cache-dtype nvfp4", "recipe-based FP4 KV cache"),
            (
                "--kv-cache-dtype fp4_mx_block16",
                "fp4_e2m1 (MHATokenToKVPoolFP4",
            ),
        ] {
            let e = parse_line(&format!("{base} {flags}"), "prefill")
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{flags}: {e}");
        }
        // sglang's FP4 KV cache of the version pdsim read is a flag it takes (docs/sglang-pd.md §29).
        let fp4 = parse_line(&format!("{base} --kv-cache-dtype fp4_e2m1"), "prefill").unwrap();
        assert_eq!(fp4.args.kv_cache_dtype, "fp4_e2m1");
        // sglang's default group size, -1, leaves V2 off: no conflict.
        assert!(
            parse_line(
                &format!("{base} --cpu-offload-gb 20 --offload-group-size -1"),
                "prefill"
            )
            .is_ok()
        );
        assert_eq!(preset_for("moonshotai/Kimi-K2-Instruct"), Some("kimi-k2"));
    }
}
