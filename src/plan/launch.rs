//! A plan's deployment: the sglang launch line of every instance and the router's, as
//! `launch.txt` beside `best.toml` (`pdsim plan`). What was simulated is what is launched: every
//! server flag pdsim models is written with the value the simulation used (sglang computes
//! some of them from the GPU's memory when they are left out — `mem_fraction_static`,
//! `chunked_prefill_size`, `max_running_requests` — and would then serve something else).
//!
//! Lines are for sglang's PD mode with the Mooncake transfer backend
//! (`python -m sglang.launch_server … --disaggregation-mode prefill|decode`,
//! `python -m sglang_router.launch_router --pd-disaggregation …`: sglang `ServerArgs` and
//! sgl-model-gateway `RouterArgs`, the versions `docs/sglang-pd.md` §17 cites). Hosts are
//! written `nodeN` for node `N` of pdsim's placement; replace them with the nodes' addresses.
//! An instance spanning nodes gets one line per node (`--nnodes`, `--node-rank`,
//! `--dist-init-addr`); instances sharing a node get their own `--base-gpu-id`, `--port` and
//! `--disaggregation-bootstrap-port`.

use std::fmt::Write as _;

use crate::config::{Role, RouterPolicy, Scenario};

/// The first HTTP port of the servers on a node (one more per further server on it).
pub const BASE_PORT: u32 = 30000;
/// The first bootstrap port of the prefill servers on a node (sglang's default, 8998).
pub const BASE_BOOTSTRAP_PORT: u32 = 8998;
/// The port the rank-0 node of a multi-node instance listens on for its peers.
pub const DIST_INIT_PORT: u32 = 50000;
/// The router's port.
pub const ROUTER_PORT: u32 = 8000;

/// The Hugging Face id sglang's `--model-path` takes for a pdsim model preset (the one
/// `pdsim lint` maps back to the preset).
pub fn hf_model_path(preset: &str) -> Option<&'static str> {
    Some(match preset {
        "llama-3.1-8b" => "meta-llama/Llama-3.1-8B-Instruct",
        "llama-3.1-70b" => "meta-llama/Llama-3.1-70B-Instruct",
        "qwen3-8b" => "Qwen/Qwen3-8B",
        "deepseek-v3" => "deepseek-ai/DeepSeek-V3",
        "qwen3-next-80b-a3b" => "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "nemotron-h-8b" => "nvidia/Nemotron-H-8B-Base-8K",
        "llama2-70b" => "meta-llama/Llama-2-70b-hf",
        "bloom-176b" => "bigscience/bloom",
        "gpt-oss-120b" => "openai/gpt-oss-120b",
        "qwen3-235b-a22b" => "Qwen/Qwen3-235B-A22B",
        "kimi-linear-48b-a3b" => "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        "kimi-k2" => "moonshotai/Kimi-K2-Instruct",
        _ => return None,
    })
}

/// Server keys that are pdsim's own, with why no sglang flag is written for them.
const PDSIM_ONLY: &[(&str, &str)] = &[
    (
        "radix_cache_tokens",
        "pdsim's cap on the radix cache; sglang's cache takes the pool's free pages",
    ),
    (
        "attn_tp_size",
        "sglang derives attention TP from --tp-size and --dp-size",
    ),
];

/// Server values that are sglang's defaults as well as pdsim's, left out for short lines.
fn is_quiet(key: &str, v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (key, v) {
        (_, Value::Null) | (_, Value::Bool(false)) => true,
        ("kv_cache_dtype" | "load_balance_method", Value::String(s)) => s == "auto",
        ("moe_a2a_backend", Value::String(s)) => s == "none",
        ("dp_size" | "ep_size", Value::Number(n)) => n.as_u64() == Some(1),
        ("ep_num_redundant_experts", Value::Number(n)) => n.as_u64() == Some(0),
        ("num_reserved_decode_tokens", Value::Number(n)) => n.as_u64() == Some(512),
        _ => false,
    }
}

/// A value as a shell word: plain when it is safe, single-quoted otherwise.
fn word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=+,@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The flags of one pool's `[pools.server]` as resolved (`Scenario::resolved`), in key order.
fn server_flags(
    server: &serde_json::Map<String, serde_json::Value>,
    notes: &mut Vec<String>,
) -> String {
    let mut out = String::new();
    for (key, v) in server {
        if let Some((_, why)) = PDSIM_ONLY.iter().find(|(k, _)| k == key) {
            if !v.is_null() {
                notes.push(format!("{key} = {v} is not written: {why}"));
            }
            continue;
        }
        if key == "tp_size" || is_quiet(key, v) {
            continue;
        }
        let flag = format!("--{}", key.replace('_', "-"));
        match v {
            serde_json::Value::Bool(true) => {
                let _ = write!(out, " {flag}");
            }
            serde_json::Value::String(s) => {
                let _ = write!(out, " {flag} {}", word(s));
            }
            other => {
                let _ = write!(out, " {flag} {other}");
            }
        }
    }
    out
}

/// The file's section of pool `i` of the checked scenario: found by name, since the checked
/// pools are ordered by role (prefill first) and the file's are not.
fn pool_section<'f>(
    file: &'f crate::scenario::ScenarioFile,
    sc: &Scenario,
    i: usize,
) -> Option<&'f crate::scenario::file::PoolSection> {
    file.pools.iter().find(|p| p.name == sc.pools[i].name)
}

/// `--model-path` of pool `i`: the pool's own model or the scenario's — a preset's Hugging Face
/// id; for a config file, the checkpoint folder it stands for: the folder of a `config.json`
/// (absolute, so the line runs from anywhere), else the config's own `_name_or_path`, else a
/// placeholder `CHECKPOINT_OF_FILE` with a note (sglang loads a folder, not a config file).
fn model_path(sc: &Scenario, i: usize, notes: &mut Vec<String>) -> String {
    let file = crate::scenario::resolved_file(sc);
    let own = pool_section(&file, sc, i).and_then(|p| p.model.clone());
    let m = own.or(file.model).unwrap_or_default();
    if let Some(p) = m.preset.as_deref() {
        return hf_model_path(p).map_or_else(|| p.to_string(), str::to_string);
    }
    let Some(c) = m.config.as_deref() else {
        return sc.pools[i].model.name.clone();
    };
    let given = std::path::Path::new(c);
    let path = if given.is_relative() {
        sc.source
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join(given)
    } else {
        given.to_path_buf()
    };
    let path = std::fs::canonicalize(&path)
        .or_else(|_| std::path::absolute(&path))
        .unwrap_or(path);
    if path.file_name().is_some_and(|n| n == "config.json") {
        return word(&path.parent().unwrap_or(&path).display().to_string());
    }
    let named = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("_name_or_path")?.as_str().map(str::to_string))
        .filter(|n| !n.trim().is_empty());
    if let Some(n) = named {
        return word(&n);
    }
    let name = path
        .file_name()
        .map_or_else(|| c.to_string(), |n| n.to_string_lossy().to_string());
    // A placeholder a shell passes through as a word, and sglang refuses loudly if left.
    let placeholder = word(&format!("CHECKPOINT_OF_{name}"));
    let note = format!(
        "the model is the config file {name}: sglang loads a checkpoint folder (its config.json and weights), so replace {placeholder} with yours"
    );
    if !notes.contains(&note) {
        notes.push(note);
    }
    placeholder
}

/// The policy flag value sgl-model-gateway takes for `p`, and a note when it has none.
fn gateway_policy(p: RouterPolicy, notes: &mut Vec<String>) -> &'static str {
    if p == RouterPolicy::LeastLoaded {
        notes.push(
            "router policy least_loaded is pdsim's; sgl-model-gateway's closest is power_of_two (the less loaded of two random instances), written here: set router.policy = \"power_of_two\" and plan again to simulate exactly this line".into(),
        );
        "power_of_two"
    } else {
        p.as_str()
    }
}

/// The nodes a placement uses, the GPUs each leaves idle, and what is billed
/// (`hardware.billing`), as `#` lines:
/// `# nodes used: 3 (node0, node1, node2); GPUs used 20 of 24, idle 4 (node2: GPUs 4-7)`.
pub fn nodes_comment(sc: &Scenario, placement: &crate::config::capacity::Placement) -> String {
    let g = sc.gpus_per_node;
    let mut used = vec![vec![false; g as usize]; sc.placement.nodes as usize];
    for inst in &placement.gpus {
        for gpu in inst {
            used[gpu.node as usize][gpu.local as usize] = true;
        }
    }
    let total: u32 = used.iter().flatten().filter(|u| **u).count() as u32;
    let idle: Vec<String> = used
        .iter()
        .enumerate()
        .filter_map(|(n, gpus)| {
            let free: Vec<u32> = (0..g).filter(|&i| !gpus[i as usize]).collect();
            (!free.is_empty()).then(|| {
                format!(
                    "node{n}: GPU{} {}",
                    if free.len() == 1 { "" } else { "s" },
                    ranges(&free)
                )
            })
        })
        .collect();
    let all = sc.placement.nodes * g;
    let mut s = format!(
        "# nodes used: {} ({}); GPUs used {total} of {all}, idle {}{}\n",
        sc.placement.nodes,
        (0..sc.placement.nodes)
            .map(|n| format!("node{n}"))
            .collect::<Vec<_>>()
            .join(", "),
        all - total,
        if idle.is_empty() {
            String::new()
        } else {
            format!(" ({})", idle.join("; "))
        }
    );
    let billed = sc.billing.billed_gpus(total, sc.placement.nodes, g);
    let price = sc.usd_per_gpu_hour.map_or(String::new(), |u| {
        format!(": ${:.2}/hour at ${u}/GPU-hour", u * f64::from(billed))
    });
    s += &match sc.billing {
        crate::config::Billing::Node => format!(
            "# billed per node (hardware.billing = \"node\"): {} nodes × {g} GPUs = {billed} GPUs{price}\n",
            sc.placement.nodes
        ),
        crate::config::Billing::Gpu => format!(
            "# billed per GPU (hardware.billing = \"gpu\"): {billed} GPUs{price}; rented as whole nodes this is {} GPUs\n",
            all
        ),
    };
    s
}

/// `0-3,6`: sorted integers as ranges.
fn ranges(v: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The server flags of pool `i` as one string (` --page-size 64 …`), and the notes on what
/// is not written.
pub fn pool_flags(sc: &Scenario, i: usize, notes: &mut Vec<String>) -> String {
    let file = crate::scenario::resolved_file(sc);
    // The typed server table, as a map of flag names: every flag the scenario sets is written.
    let mut server = pool_section(&file, sc, i)
        .and_then(|p| match serde_json::to_value(&p.server) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => None,
        })
        .unwrap_or_default();
    // sglang's decode offload writes through `--hicache-storage-backend`, which a scenario
    // may leave out there (pdsim's one backend is the `[kv_store]`): the line names it.
    if sc.pools[i].decode_offload.is_some() {
        server
            .entry("hicache_storage_backend")
            .or_insert_with(|| "mooncake".into());
    }
    server_flags(&server, notes)
}

/// The launch line of one instance of pool `i`: the model, TP and PD mode, its `port`, its
/// first GPU on the node (`--base-gpu-id`, left out for GPU 0 or `None`), a prefill's
/// bootstrap port, then the pool's `flags` ([`pool_flags`]).
pub fn server_line(
    sc: &Scenario,
    i: usize,
    flags: &str,
    (port, base_gpu, bootstrap_port): (u32, Option<u32>, u32),
    notes: &mut Vec<String>,
) -> String {
    let pool = &sc.pools[i];
    let mut line = format!(
        "python -m sglang.launch_server --model-path {} --tp-size {}",
        model_path(sc, i, notes),
        pool.server.tp_size
    );
    if pool.role != Role::Colocated {
        let _ = write!(
            line,
            " --disaggregation-mode {} --disaggregation-transfer-backend mooncake",
            pool.role.as_str()
        );
    }
    let _ = write!(line, " --host 0.0.0.0 --port {port}");
    if let Some(g) = base_gpu.filter(|&g| g != 0) {
        let _ = write!(line, " --base-gpu-id {g}");
    }
    if pool.role == Role::Prefill {
        let _ = write!(line, " --disaggregation-bootstrap-port {bootstrap_port}");
    }
    line.push_str(flags);
    line
}

/// The environment a server of pool `i` needs beyond its flags, as `(name, value)`: where
/// NVLink domains join several nodes (an NVL72 rack's trays) and `fabric.mnnvl` is on,
/// Mooncake's multi-node NVLink transport for the KV — `SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK`
/// (sglang allocates its KV pool from Mooncake's `NVLinkAllocator`, fabric memory other trays
/// can map: `disaggregation/mooncake/utils.py::init_mooncake_custom_mem_pool`) and
/// `MC_FORCE_MNNVL=1` (Mooncake takes its NVLink transport although RDMA NICs are present:
/// Mooncake `docs/source/getting_started/supported-protocols.md`, "NVLink (nvlink)"); and, for
/// an instance spanning trays of one domain (`multi_node`), NCCL's multi-node NVLink
/// (`NCCL_MNNVL_ENABLE=1`, `NCCL_CUMEM_ENABLE=1`, as LMSYS's GB200 NVL72 recipes set them).
pub fn server_env(sc: &Scenario, i: usize, multi_node: bool) -> Vec<(&'static str, &'static str)> {
    let mut env = Vec::new();
    if sc.fabric.topology.nodes_per_nvlink_domain > 1 && sc.pools[i].role != Role::Colocated {
        env.push(("SGLANG_MOONCAKE_CUSTOM_MEM_POOL", "NVLINK"));
        env.push(("MC_FORCE_MNNVL", "1"));
    }
    if multi_node && sc.nvlink_domain_gpus > sc.gpus_per_node {
        env.push(("NCCL_MNNVL_ENABLE", "1"));
        env.push(("NCCL_CUMEM_ENABLE", "1"));
    }
    env
}

/// `env` as the `NAME=value ` words a shell line starts with.
fn env_prefix(env: &[(&str, &str)]) -> String {
    env.iter().map(|(k, v)| format!("{k}={v} ")).collect()
}

/// The router's launch line for the servers at `prefill` (`URL BOOTSTRAP_PORT` each),
/// `decode` and, for a colocated deployment, `workers`.
pub fn router_line(
    sc: &Scenario,
    prefill: &[String],
    decode: &[String],
    workers: &[String],
    notes: &mut Vec<String>,
) -> String {
    let r = &sc.router;
    let pd = sc.pools.iter().any(|p| p.role != Role::Colocated);
    let mut line = String::from("python -m sglang_router.launch_router --host 0.0.0.0");
    let _ = write!(line, " --port {ROUTER_PORT}");
    if pd {
        line.push_str(" --pd-disaggregation");
        for u in prefill {
            let _ = write!(line, " --prefill {u}");
        }
        for u in decode {
            let _ = write!(line, " --decode {u}");
        }
        let (p, d) = (
            gateway_policy(r.prefill, notes),
            gateway_policy(r.decode, notes),
        );
        if p == d {
            let _ = write!(line, " --policy {p}");
        } else {
            let _ = write!(line, " --prefill-policy {p} --decode-policy {d}");
        }
    } else {
        let _ = write!(line, " --worker-urls {}", workers.join(" "));
        let _ = write!(line, " --policy {}", gateway_policy(r.prefill, notes));
    }
    if r.prefill == RouterPolicy::CacheAware || r.decode == RouterPolicy::CacheAware {
        let c = &r.cache_aware;
        let _ = write!(
            line,
            " --cache-threshold {} --balance-abs-threshold {} --balance-rel-threshold {} --eviction-interval-secs {} --max-tree-size {}",
            c.cache_threshold,
            c.balance_abs_threshold,
            c.balance_rel_threshold,
            c.eviction_interval_ns / 1_000_000_000,
            c.max_tree_size
        );
    }
    line
}

/// `notes` as the `# notes` block that ends a file of launch lines (nothing when empty).
pub fn notes_block(mut notes: Vec<String>, comment: &str) -> String {
    notes.sort();
    notes.dedup();
    let mut out = String::new();
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{comment} notes");
        for n in notes {
            let _ = writeln!(out, "{comment} - {n}");
        }
    }
    out
}

/// `launch.txt` for `sc`: comment lines (`#`) and one command per line.
pub fn launch_text(sc: &Scenario) -> String {
    let placement = &sc.placement;
    let mut out = String::new();
    let mut notes = Vec::new();
    let _ = writeln!(
        out,
        "# sglang launch lines for scenario {:?} (pdsim {}); nodeN is node N of pdsim's placement ({} nodes of {} GPUs).",
        sc.name,
        env!("CARGO_PKG_VERSION"),
        sc.placement.nodes,
        sc.gpus_per_node
    );
    if sc.nvlink_domain_gpus > sc.gpus_per_node {
        let _ = writeln!(
            out,
            "# NVLink domains of {} GPUs ({} nodes each{}): node0..node{} share the first; an instance inside one keeps its all-reduce, DeepEP{} on NVLink.",
            sc.nvlink_domain_gpus,
            sc.nvlink_domain_gpus / sc.gpus_per_node,
            crate::scenario::resolved_file(sc)
                .hardware
                .system
                .map_or(String::new(), |s| format!(", hardware.system = {s}")),
            sc.nvlink_domain_gpus / sc.gpus_per_node - 1,
            if sc.fabric.topology.nodes_per_nvlink_domain > 1 {
                " and KV transfers (Mooncake MNNVL)"
            } else {
                ""
            }
        );
    }
    out.push_str(&nodes_comment(sc, placement));
    // Servers per node so far: their ports and bootstrap ports follow one another.
    let mut on_node = vec![0u32; sc.placement.nodes as usize];
    let (mut prefill_urls, mut decode_urls, mut worker_urls) = (Vec::new(), Vec::new(), Vec::new());
    let mut inst = 0usize;
    for (i, pool) in sc.pools.iter().enumerate() {
        let flags = pool_flags(sc, i, &mut notes);
        let _ = writeln!(
            out,
            "\n# pool {:?} ({}): {} instance(s) × {} GPU(s)",
            pool.name,
            pool.role.as_str(),
            pool.instances,
            pool.server.tp_size
        );
        for _ in 0..pool.instances {
            let gpus = &placement.gpus[inst];
            inst += 1;
            let mut nodes: Vec<u32> = gpus.iter().map(|g| g.node).collect();
            nodes.dedup();
            let head = nodes[0];
            let slot = on_node[head as usize];
            for &n in &nodes {
                on_node[n as usize] += 1;
            }
            let port = BASE_PORT + slot;
            let line = server_line(
                sc,
                i,
                &flags,
                (port, Some(gpus[0].local), BASE_BOOTSTRAP_PORT + slot),
                &mut notes,
            );
            let url = format!("http://node{head}:{port}");
            match pool.role {
                Role::Prefill => prefill_urls.push(format!("{url} {}", BASE_BOOTSTRAP_PORT + slot)),
                Role::Decode => decode_urls.push(url),
                Role::Colocated => worker_urls.push(url),
            }
            let line = env_prefix(&server_env(sc, i, nodes.len() > 1)) + &line;
            if nodes.len() == 1 {
                // Where it runs, as the router's URLs and a multi-node instance's lines say.
                let _ = writeln!(out, "# on node{head}:\n{line}");
            } else {
                for (rank, n) in nodes.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "# on node{n}:\n{line} --nnodes {} --node-rank {rank} --dist-init-addr node{head}:{DIST_INIT_PORT}",
                        nodes.len()
                    );
                }
            }
        }
    }
    if let Some(k) = &sc.kv_store {
        let nodes: Vec<String> = k.nodes.iter().map(|n| format!("node{n}")).collect();
        let _ = writeln!(
            out,
            "\n# Mooncake Store: mooncake_master once, and a store service contributing DRAM on {} ({}); the HiCache servers reach it through MOONCAKE_MASTER and MOONCAKE_TE_META_DATA_SERVER.",
            nodes.join(", "),
            k.capacity_tokens.map_or(
                "unbounded in the simulation: size it to the DRAM you give it".into(),
                |t| format!("{t} tokens in all")
            )
        );
    }
    let _ = writeln!(out, "\n# router (sgl-model-gateway)");
    let _ = writeln!(
        out,
        "{}",
        router_line(sc, &prefill_urls, &decode_urls, &worker_urls, &mut notes)
    );
    out + &notes_block(notes, "#")
}

/// The command lines of `launch.txt` (its comments and blank lines dropped).
pub fn commands(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_has_a_model_path() {
        for p in crate::spec::model::MODEL_PRESETS {
            assert!(hf_model_path(p).is_some(), "{p}");
        }
        assert_eq!(hf_model_path("no-such-model"), None);
    }

    #[test]
    fn values_become_shell_words() {
        assert_eq!(word("fp8_e4m3"), "fp8_e4m3");
        assert_eq!(word("a b"), "'a b'");
        assert_eq!(word("it's"), r"'it'\''s'");
    }

    #[test]
    fn server_flags_skip_defaults_and_name_what_pdsim_alone_has() {
        let v: serde_json::Value = serde_json::json!({
            "tp_size": 8, "page_size": 64, "kv_cache_dtype": "auto", "enable_eplb": false,
            "enable_dp_attention": true, "dp_size": 8, "radix_cache_tokens": 1000,
            "mem_fraction_static": 0.85, "hicache_storage_backend": "mooncake",
            "max_running_requests": null
        });
        let mut notes = Vec::new();
        let f = server_flags(v.as_object().unwrap(), &mut notes);
        assert_eq!(
            f,
            " --dp-size 8 --enable-dp-attention --hicache-storage-backend mooncake --mem-fraction-static 0.85 --page-size 64"
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("radix_cache_tokens"));
    }

    fn load(rel: &str) -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// The checked pools are ordered prefill first; a file listing its decode pool first must
    /// still give each line its own pool's flags (the lines once took the file's i-th pool).
    #[test]
    fn each_line_has_its_own_pools_flags_whatever_the_file_order() {
        let quick = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml"),
        )
        .unwrap();
        let (head, rest) = quick.split_once("[[pools]]").unwrap();
        let (prefill, rest) = rest.split_once("[[pools]]").unwrap();
        let (decode, tail) = rest.split_once("[fabric]").unwrap();
        let decode = decode.replace(
            "page_size = 64",
            "page_size = 64\nmem_fraction_static = 0.7",
        );
        let prefill = prefill.replace("chunked_prefill_size = 8192", "chunked_prefill_size = 4096");
        let swapped = format!("{head}[[pools]]{decode}[[pools]]{prefill}[fabric]{tail}");
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
        let sc = crate::scenario::from_str(&swapped, &path, &[]).unwrap();
        assert_eq!(sc.pools[0].role, crate::config::Role::Prefill);
        let text = launch_text(&sc);
        for l in commands(&text) {
            let decode = l.contains("--disaggregation-mode decode");
            let prefill = l.contains("--disaggregation-mode prefill");
            if decode || prefill {
                assert_eq!(l.contains("--mem-fraction-static 0.7"), decode, "{l}");
                assert_eq!(l.contains("--chunked-prefill-size 4096"), prefill, "{l}");
            }
        }
    }

    /// A colocated server's `enable_mixed_chunk` is sglang's `--enable-mixed-chunk` on its
    /// line when on, and nothing when off (sglang's default, so the line runs what was
    /// simulated either way); `pdsim lint` reads the flag.
    #[test]
    fn a_colocated_line_says_whether_it_mixes_chunks() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/plan/colocated-8b.toml");
        for on in [false, true] {
            let set = format!("pools.servers.server.enable_mixed_chunk={on}");
            let sc = crate::scenario::load(&path, &[set]).unwrap();
            let text = launch_text(&sc);
            let servers: Vec<&str> = commands(&text)
                .filter(|l| l.contains("sglang.launch_server"))
                .collect();
            assert_eq!(servers.len(), 4, "{text}");
            for l in servers {
                assert_eq!(l.contains(" --enable-mixed-chunk"), on, "{l}");
                // A plain server's line has no PD mode, which lint (a PD tool) notes; nothing
                // else is warned about.
                let parsed = crate::spec::launch::parse_line(l, "prefill").unwrap();
                let other: Vec<&String> = parsed
                    .warnings
                    .iter()
                    .filter(|w| !w.starts_with("no --disaggregation-mode"))
                    .collect();
                assert!(other.is_empty(), "{other:?}");
            }
        }
    }

    #[test]
    fn instances_sharing_a_node_get_their_own_gpus_and_ports() {
        // Four TP1 prefills on GPUs 0-3 and four TP1 decodes on GPUs 4-7 of node 0.
        let text = launch_text(&load("scenarios/placement/same-node-nvlink.toml"));
        let lines: Vec<&str> = commands(&text).collect();
        let decode: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.contains("--disaggregation-mode decode"))
            .collect();
        assert_eq!(decode.len(), 4, "{text}");
        assert!(decode[0].contains("--base-gpu-id 4 ") && decode[0].contains("--port 30004 "));
        assert!(decode[3].contains("--base-gpu-id 7 ") && decode[3].contains("--port 30007 "));
        let prefill = lines
            .iter()
            .find(|l| l.contains("--disaggregation-mode prefill"))
            .unwrap();
        assert!(
            prefill.contains("--disaggregation-bootstrap-port 8998"),
            "{prefill}"
        );
        assert!(
            !prefill.contains("--base-gpu-id"),
            "GPU 0 needs none: {prefill}"
        );
        let router = lines.last().unwrap();
        assert!(
            router.contains("--prefill http://node0:30003 9001"),
            "{router}"
        );
        assert!(router.contains("--decode http://node0:30007"), "{router}");
        assert!(router.contains("--policy round_robin"), "{router}");
    }

    #[test]
    fn an_instance_spanning_nodes_gets_a_line_per_node() {
        // LMSYS prefill: instances of 32 GPUs (4 nodes), DP attention and EP over DeepEP.
        let text = launch_text(&load("scenarios/moe/lmsys-prefill-ep32.toml"));
        let first: Vec<&str> = commands(&text)
            .filter(|l| l.contains("--disaggregation-mode prefill"))
            .take(4)
            .collect();
        assert_eq!(first.len(), 4);
        for (rank, l) in first.iter().enumerate() {
            assert!(
                l.contains(&format!("--nnodes 4 --node-rank {rank} ")),
                "{l}"
            );
            assert!(l.contains("--dist-init-addr node0:50000"), "{l}");
            assert!(l.contains("--enable-dp-attention") && l.contains("--moe-a2a-backend deepep"));
            assert!(l.contains("--model-path deepseek-ai/DeepSeek-V3 "), "{l}");
        }
    }

    /// A decode pool that offloads gets sglang's flag and the storage backend it needs
    /// (`tests/sglang/kv_store.rs` has `pdsim lint` read the pair back).
    #[test]
    fn a_decode_offload_writes_its_flag_and_backend() {
        let text = launch_text(&load("scenarios/store/decode-offload.toml"));
        let decode: Vec<&str> = commands(&text)
            .filter(|l| l.contains("--disaggregation-mode decode"))
            .collect();
        assert_eq!(decode.len(), 2, "{text}");
        for l in &decode {
            assert!(
                l.contains(" --disaggregation-decode-enable-offload-kvcache")
                    && l.contains(" --hicache-storage-backend mooncake"),
                "{l}"
            );
            assert!(!l.contains("--enable-hierarchical-cache"), "{l}");
        }
        let prefill = commands(&text)
            .find(|l| l.contains("--disaggregation-mode prefill"))
            .unwrap();
        assert!(!prefill.contains("offload"), "{prefill}");
    }

    /// On an NVL72 rack every server line carries the MNNVL environment, the 48-GPU decode is
    /// twelve tray lines with NCCL's multi-node NVLink on, the NVFP4 and offload flags are
    /// written, and `pdsim lint` reads a prefill and a decode line back as a compatible pair.
    #[test]
    fn an_nvl72_deployment_writes_mnnvl_env_and_its_flags() {
        let text = launch_text(&load("scenarios/moe/gb200-nvl72-fp4-decode.toml"));
        assert!(
            text.contains(
                "# NVLink domains of 72 GPUs (18 nodes each, hardware.system = gb200-nvl72)"
            ),
            "{text}"
        );
        let decode: Vec<&str> = commands(&text)
            .filter(|l| l.contains("--disaggregation-mode decode"))
            .collect();
        assert_eq!(decode.len(), 12, "one line per tray");
        for l in &decode {
            assert!(
                l.starts_with("SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK MC_FORCE_MNNVL=1 NCCL_MNNVL_ENABLE=1 NCCL_CUMEM_ENABLE=1 python -m sglang.launch_server"),
                "{l}"
            );
            assert!(
                l.contains(" --quantization modelopt_fp4") && l.contains("--nnodes 12"),
                "{l}"
            );
        }
        let prefill = commands(&text)
            .find(|l| l.contains("--disaggregation-mode prefill"))
            .unwrap();
        assert!(
            prefill.starts_with("SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK MC_FORCE_MNNVL=1 python"),
            "a one-tray prefill needs no NCCL MNNVL: {prefill}"
        );
        for f in [
            "--offload-group-size 2",
            "--offload-num-in-group 1",
            "--offload-prefetch-step 1",
            "--offload-mode cpu",
            "--kv-cache-dtype fp8_e4m3",
        ] {
            assert!(prefill.contains(f), "{f}: {prefill}");
        }
        let report = crate::diagnose::lint::lint(&crate::diagnose::lint::LintQuestion {
            prefill: prefill.to_string(),
            decode: decode[0].to_string(),
            model_config: None,
            profile: "guarded".into(),
        })
        .unwrap();
        assert!(report.prediction.compatible, "{:?}", report.prediction);
    }

    #[test]
    fn least_loaded_is_written_as_the_gateways_closest_policy_with_a_note() {
        let text = launch_text(&load("scenarios/bench/foundation-100k.toml"));
        let router = commands(&text).last().unwrap().to_string();
        assert!(router.contains("--policy power_of_two"), "{router}");
        assert!(
            text.contains("# - router policy least_loaded is pdsim's"),
            "{text}"
        );
    }
}
