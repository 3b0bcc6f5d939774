//! A plan's deployment: the sglang launch line of every instance and the router's, as
//! `launch.txt` beside `best.toml` (`pdsim plan`). What was simulated is what is launched: every
//! server flag pdsim models is written with the value the simulation used (sglang computes
//! some of them from the GPU's memory when they are left out — `mem_fraction_static`,
//! `chunked_prefill_size`, `max_running_requests` — and would then serve something else).
//!
//! Lines are for sglang's PD mode with the Mooncake transfer backend
//! (`python -m sglang.launch_server … --disaggregation-mode prefill|decode`,
//! `python -m sglang_router.launch_router --pd-disaggregation …`: sglang `ServerArgs` and
//! sgl-model-gateway `RouterArgs`, the versions `docs/sglang-pd.md` §17 cites). What pdsim
//! cannot know — the nodes' host names, their RDMA devices, the network interface, the DRAM an
//! unbounded Mooncake Store gets — is a shell variable ([`cluster_names`]: `${NODE0}`,
//! `${IB_DEVICES}`, `${IFNAME}`, `${STORE_SEGMENT_BYTES}`) declared once at the
//! top of the file with what to put there; nothing else needs a hand edit. An instance spanning
//! nodes gets one line per node (`--nnodes`, `--node-rank`, `--dist-init-addr`); instances
//! sharing a node get their own `--base-gpu-id`, `--port` and `--disaggregation-bootstrap-port`.
//! Every line is preceded by `# on nodeN:`, the router's too, which `slurm.sh`
//! ([`slurm_script`]) runs on the allocation's `N`-th host.

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
/// `mooncake_master`'s port (its default, 50051); see [`MOONCAKE_STORE_PORT`].
pub const MOONCAKE_MASTER_PORT: u32 = 50051;
/// The port of `mooncake_master`'s embedded metadata server; see [`MOONCAKE_STORE_PORT`].
pub const MOONCAKE_METADATA_PORT: u32 = 8080;
/// The store service's port. All three as Mooncake's guide writes them:
/// `docs/source/deployment/integrations/sglang/hicache-integration-v1.md` at kvcache-ai/Mooncake
/// 3b5a594 ("The default port is 50051"; `--http_metadata_server_port=8080`; `--port=8081`).
pub const MOONCAKE_STORE_PORT: u32 = 8081;
/// The variable holding the DRAM each store node gives an unbounded Mooncake Store, bytes.
pub const STORE_SEGMENT_BYTES: &str = "STORE_SEGMENT_BYTES";

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
    // The seed reads the decode's extra rows from the environment ([`server_env`]).
    if !sc.sglang.version.has_decode_extra_slots_flag() {
        server.remove("disaggregation_decode_extra_slots");
    }
    server_flags(&server, notes)
}

/// How a line refers to a cluster name pdsim leaves to the user ([`cluster_names`]): a shell
/// variable in `launch.txt` and `slurm.sh`, a container variable in `k8s.yaml` (Kubernetes
/// expands `$(NAME)` in a container's command and env from the variables defined before it,
/// its `envFrom` ConfigMap included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vars {
    /// `${NAME}`.
    Shell,
    /// `$(NAME)`.
    Kubernetes,
}

impl Vars {
    /// A reference to variable `name`.
    pub fn var(self, name: &str) -> String {
        match self {
            Vars::Shell => format!("${{{name}}}"),
            Vars::Kubernetes => format!("$({name})"),
        }
    }
}

/// The variable holding a node's RDMA devices ([`cluster_names`]).
pub const IB_DEVICES: &str = "IB_DEVICES";
/// The variable holding the nodes' network interface ([`cluster_names`]).
pub const IFNAME: &str = "IFNAME";

/// The shell variable holding node `n`'s host name ([`cluster_names`]).
pub fn node_var(n: u32) -> String {
    format!("NODE{n}")
}

/// A name of the cluster pdsim cannot know, left to the user as a variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterName {
    /// The variable (`NODE0`, `IB_DEVICES`, `IFNAME`).
    pub var: String,
    /// What to put there, for the comment beside it.
    pub what: String,
}

/// Whether some instance of the placement spans nodes.
pub(crate) fn any_multi_node(sc: &Scenario) -> bool {
    sc.placement
        .gpus
        .iter()
        .any(|g| g.first().map(|a| a.node) != g.last().map(|b| b.node))
}

/// Whether the deployment moves KV with Mooncake (some pool is a prefill or a decode pool).
pub(crate) fn is_pd(sc: &Scenario) -> bool {
    sc.pools.iter().any(|p| p.role != Role::Colocated)
}

/// The names a deployment of `sc` needs from the cluster, in the order the files declare them:
/// the host name of every node an instance starts on (`NODE0`, … — the router's URLs and
/// `--dist-init-addr` name them; the other nodes of a multi-node instance dial its first);
/// the RDMA devices of a node (`IB_DEVICES`: Mooncake's `--disaggregation-ib-device` on a PD
/// deployment, NCCL's `NCCL_IB_HCA` on an instance spanning nodes) and the network interface
/// of the nodes' addresses (`IFNAME`: NCCL's and Gloo's bootstrap sockets of an instance
/// spanning nodes). Nodes are taken to be alike: one device list serves them all.
pub fn cluster_names(sc: &Scenario) -> Vec<ClusterName> {
    // The nodes the lines name: each instance's head (the router's URLs, `--dist-init-addr`).
    let mut heads: std::collections::BTreeSet<u32> = instance_slots(sc)
        .into_iter()
        .map(|(nodes, _)| nodes[0])
        .collect();
    // A Mooncake Store's nodes run its master and store services under their own names.
    heads.extend(sc.kv_store.iter().flat_map(|k| k.nodes.iter().copied()));
    let mut out: Vec<ClusterName> = heads
        .into_iter()
        .map(|n| ClusterName {
            var: node_var(n),
            what: format!(
                "host name or address of node{n}, as the other nodes and the router reach it"
            ),
        })
        .collect();
    let multi = any_multi_node(sc);
    let rdma = sc.fabric.transport == crate::fabric::Transport::Rdma;
    if is_pd(sc) || (multi && rdma) || sc.kv_store.is_some() {
        let t = &sc.fabric.topology;
        let (n, g) = (t.nics_per_node, t.gpus_per_node);
        let kind = if rdma { "RDMA" } else { "EFA" };
        // Which GPU sits by which NIC in the simulation (`Layout::affinity`), so the list is
        // given in the order that matches it.
        let by = if n == g {
            "one by each GPU (GPU g nearest NIC g)".to_string()
        } else if n < g {
            format!(
                "each shared by {} neighbouring GPUs (GPU g nearest NIC g×{n}/{g})",
                g / n.max(1)
            )
        } else {
            format!("{} by each GPU", n / g.max(1))
        };
        out.push(ClusterName {
            var: IB_DEVICES.into(),
            what: format!(
                "the {n} {kind} devices of a node's GPU fabric, comma-separated, in PCIe order, as `ibv_devices` names them (e.g. mlx5_0,mlx5_1,…; leave out management and storage NICs): pdsim simulated {n} NIC(s) of {} Gb/s per node, {by}, the others taken when it fails — what Mooncake does with the devices given (transfer-engine topology.cpp)",
                t.nic_bytes_per_ns * 8.0
            ),
        });
    }
    if sc
        .kv_store
        .as_ref()
        .is_some_and(|k| k.capacity_tokens.is_none())
    {
        out.push(ClusterName {
            var: STORE_SEGMENT_BYTES.into(),
            what: "the DRAM each Mooncake Store node gives the store, bytes (MOONCAKE_GLOBAL_SEGMENT_SIZE): pdsim simulated the store unbounded (kv_store.capacity_gb left out)".into(),
        });
    }
    if multi {
        out.push(ClusterName {
            var: IFNAME.into(),
            what: "the network interface carrying the NODEn addresses (`ip -br addr`, e.g. eth0 or bond0), for NCCL's and Gloo's bootstrap of instances spanning nodes".into(),
        });
    }
    out
}

/// The launch line of one instance of pool `i`: the model, TP and PD mode, its `port`, its
/// first GPU on the node (`--base-gpu-id`, left out for GPU 0 or `None`), a prefill's
/// bootstrap port, a PD server's RDMA devices (`--disaggregation-ib-device`, as `vars` refers
/// to them), then the pool's `flags` ([`pool_flags`]).
pub fn server_line(
    sc: &Scenario,
    i: usize,
    flags: &str,
    (port, base_gpu, bootstrap_port): (u32, Option<u32>, u32),
    vars: Vars,
    notes: &mut Vec<String>,
) -> String {
    let pool = &sc.pools[i];
    let mut line = format!(
        "python -m sglang.launch_server --model-path {} --tp-size {}",
        model_path(sc, i, notes),
        pool.server.tp_size
    );
    // Pipeline stages of a prefill (docs/sglang-pd.md §27): `tp_size × pp_size` GPUs.
    if pool.server.pp_size > 1 {
        let _ = write!(line, " --pp-size {}", pool.server.pp_size);
        if pool.server.pp_async_batch_depth > 0 {
            let d = pool.server.pp_async_batch_depth;
            let _ = write!(line, " --pp-async-batch-depth {d}");
        }
    }
    // Decode context parallelism (docs/sglang-pd.md §28): ranks of the TP group, no more GPUs.
    if pool.server.dcp_size > 1 {
        let _ = write!(line, " --dcp-size {}", pool.server.dcp_size);
    }
    if pool.role != Role::Colocated {
        let _ = write!(
            line,
            " --disaggregation-mode {} --disaggregation-transfer-backend {}",
            pool.role.as_str(),
            sc.sglang.transfer_backend.as_str()
        );
    }
    let _ = write!(line, " --host 0.0.0.0 --port {port}");
    if let Some(g) = base_gpu.filter(|&g| g != 0) {
        let _ = write!(line, " --base-gpu-id {g}");
    }
    if pool.role == Role::Prefill {
        let _ = write!(line, " --disaggregation-bootstrap-port {bootstrap_port}");
    }
    // `[sglang] kv_checksum`: sglang PR #39500 asks for the flag on both sides of a pair.
    if pool.role != Role::Colocated && sc.sglang.kv_checksum {
        line.push_str(" --disaggregation-enable-kv-checksum");
    }
    if pool.role != Role::Colocated {
        // The devices Mooncake's transfer engine may use (sglang `server_args.py`
        // `disaggregation_ib_device`, handed to `MooncakeTransferEngine` through
        // `kv_args.ib_device` in `disaggregation/prefill.py` and `decode.py`): a comma list
        // is the filter of Mooncake's topology discovery, which prefers the NIC nearest each
        // GPU and retries on the others (`topology.cpp`: `discoverCudaTopology`,
        // `Topology::selectDevice`) — what pdsim simulates. Quoted in a shell so an empty
        // value stays a word.
        let _ = match vars {
            Vars::Shell => write!(
                line,
                " --disaggregation-ib-device \"{}\"",
                vars.var(IB_DEVICES)
            ),
            Vars::Kubernetes => {
                write!(line, " --disaggregation-ib-device {}", vars.var(IB_DEVICES))
            }
        };
    }
    line.push_str(flags);
    line
}

/// sglang's default `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` and
/// `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, s (`environ.py`, `EnvInt(300)` each).
const SGLANG_DEFAULT_TIMEOUT_S: u64 = 300;
/// sglang's default `SGLANG_DISAGGREGATION_QUEUE_SIZE` (`environ.py`, `EnvInt(4)`).
const SGLANG_DEFAULT_QUEUE_SIZE: u32 = 4;

/// Whole seconds of `ns`, rounded up (sglang reads its timeouts as integers: `EnvInt`).
fn whole_s(ns: u64) -> u64 {
    ns.div_ceil(1_000_000_000)
}

/// The environment a server of pool `i` needs beyond its flags, as `(name, value)` (values
/// refer to cluster names as `vars` does), in a fixed order:
///
/// - on a PD server, what the scenario simulated that sglang reads from the environment: a
///   `[sglang]` timeout or queue count other than sglang's default (`environ.py`:
///   `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT` and `SGLANG_DISAGGREGATION_QUEUE_SIZE`, read by
///   the prefill's `MooncakeKVManager`; `SGLANG_DISAGGREGATION_WAITING_TIMEOUT`, by the
///   decode's; under the seed, a decode's extra request rows as
///   `SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS`), and Mooncake's EFA transport where `fabric.transport = "efa"`
///   (`MOONCAKE_PROTOCOL=efa`: `MooncakeTransferEngine.initialize` in sglang
///   `distributed/device_communicators/mooncake_transfer_engine.py`, default `rdma`);
/// - where NVLink domains join several nodes (an NVL72 rack's trays) and `fabric.mnnvl` is on,
///   Mooncake's multi-node NVLink transport for the KV — `SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK`
///   (sglang allocates its KV pool from Mooncake's `NVLinkAllocator`, fabric memory other trays
///   can map: `disaggregation/mooncake/utils.py::init_mooncake_custom_mem_pool`) and
///   `MC_FORCE_MNNVL=1` (Mooncake takes its NVLink transport although RDMA NICs are present:
///   Mooncake `docs/source/getting_started/supported-protocols.md`, "NVLink (nvlink)");
/// - for an instance spanning nodes (`multi_node`): the interface NCCL and Gloo bootstrap on
///   (`NCCL_SOCKET_IFNAME`, exact with NCCL's `=` prefix, and `GLOO_SOCKET_IFNAME`: NCCL's
///   "Environment Variables" and PyTorch's `torch.distributed` docs), the RDMA devices NCCL may
///   use on an RDMA fabric (`NCCL_IB_HCA`, exact as well, the devices Mooncake gets), and, on
///   trays of one NVLink domain, NCCL's multi-node NVLink (`NCCL_MNNVL_ENABLE=1`,
///   `NCCL_CUMEM_ENABLE=1`, as LMSYS's GB200 NVL72 recipes set them).
pub fn server_env(
    sc: &Scenario,
    i: usize,
    multi_node: bool,
    vars: Vars,
) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = Vec::new();
    let role = sc.pools[i].role;
    let p = &sc.sglang;
    if role == Role::Prefill {
        let t = whole_s(p.bootstrap_timeout_ns);
        if t != SGLANG_DEFAULT_TIMEOUT_S {
            env.push(("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", t.to_string()));
        }
        if p.queue_size != SGLANG_DEFAULT_QUEUE_SIZE {
            env.push(("SGLANG_DISAGGREGATION_QUEUE_SIZE", p.queue_size.to_string()));
        }
        // `[sglang] failed_session_probe`: the prefill's `MooncakeKVManager` reads both.
        if let Some(every) = p.failed_session_probe_ns {
            env.push(("SGLANG_ENABLE_FAILED_SESSION_PROBE", "1".into()));
            let s = every as f64 / 1e9;
            if s != crate::sglang::staging::DEFAULT_PROBE_INTERVAL_S {
                env.push(("SGLANG_FAILED_SESSION_PROBE_INTERVAL_S", s.to_string()));
            }
        }
    }
    if role == Role::Decode {
        let t = whole_s(p.waiting_timeout_ns);
        if t != SGLANG_DEFAULT_TIMEOUT_S {
            env.push(("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", t.to_string()));
        }
        // The seed's name for `--disaggregation-decode-extra-slots` (`model_runner.py`).
        if let Some(n) = sc.pools[i].decode_extra_slots
            && !p.version.has_decode_extra_slots_flag()
        {
            env.push(("SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS", n.to_string()));
        }
    }
    // `[sglang] staging_buffer` (docs/sglang-pd.md §26): both sides read the flag
    // (`MooncakeKVManager.__init__`: prefill staging buffers, decode ring); the ring's size is
    // decode's, written only when it is not sglang's 4096 MiB.
    if let Some(mb) = p.staging_pool_mb.filter(|_| role != Role::Colocated) {
        env.push(("SGLANG_DISAGG_STAGING_BUFFER", "1".into()));
        if role == Role::Decode && mb != crate::sglang::staging::DEFAULT_POOL_MB {
            env.push(("SGLANG_DISAGG_STAGING_POOL_SIZE_MB", mb.to_string()));
        }
    }
    if role != Role::Colocated && sc.fabric.transport == crate::fabric::Transport::Efa {
        env.push(("MOONCAKE_PROTOCOL", "efa".into()));
    }
    if sc.fabric.topology.nodes_per_nvlink_domain > 1 && role != Role::Colocated {
        env.push(("SGLANG_MOONCAKE_CUSTOM_MEM_POOL", "NVLINK".into()));
        env.push(("MC_FORCE_MNNVL", "1".into()));
    }
    if multi_node {
        env.push(("NCCL_SOCKET_IFNAME", format!("={}", vars.var(IFNAME))));
        env.push(("GLOO_SOCKET_IFNAME", vars.var(IFNAME)));
        if sc.fabric.transport == crate::fabric::Transport::Rdma {
            env.push(("NCCL_IB_HCA", format!("={}", vars.var(IB_DEVICES))));
        }
        if sc.nvlink_domain_gpus > sc.gpus_per_node {
            env.push(("NCCL_MNNVL_ENABLE", "1".into()));
            env.push(("NCCL_CUMEM_ENABLE", "1".into()));
        }
    }
    env
}

/// Notes on the environment of [`server_env`]: a `[sglang]` timeout that is not whole seconds
/// is written rounded up (sglang reads whole seconds).
fn env_notes(sc: &Scenario, notes: &mut Vec<String>) {
    let p = &sc.sglang;
    for (key, ns) in [
        ("bootstrap_timeout_s", p.bootstrap_timeout_ns),
        ("waiting_timeout_s", p.waiting_timeout_ns),
    ] {
        if ns % 1_000_000_000 != 0 {
            notes.push(format!(
                "sglang.{key} = {} s is written as {} s: sglang reads its timeouts as whole seconds (EnvInt)",
                ns as f64 / 1e9,
                whole_s(ns)
            ));
        }
    }
}

/// `env` as the `NAME=value ` words a shell line starts with (a value naming a variable
/// double-quoted, so it expands and stays one word).
fn env_prefix(env: &[(&str, String)]) -> String {
    env.iter()
        .map(|(k, v)| {
            if v.contains('$') {
                format!("{k}=\"{v}\" ")
            } else {
                format!("{k}={v} ")
            }
        })
        .collect()
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

/// Where each instance runs, in placement order: the nodes it spans (its first is its head,
/// whose address the router and `--dist-init-addr` use) and its slot on its head node — the
/// how-manieth server there, which sets its `--port` (`BASE_PORT + slot`) and a prefill's
/// bootstrap port (`BASE_BOOTSTRAP_PORT + slot`).
pub fn instance_slots(sc: &Scenario) -> Vec<(Vec<u32>, u32)> {
    // Servers per node so far: their ports and bootstrap ports follow one another.
    let mut on_node = vec![0u32; sc.placement.nodes as usize];
    let mut out = Vec::new();
    for gpus in &sc.placement.gpus {
        let mut nodes: Vec<u32> = gpus.iter().map(|g| g.node).collect();
        nodes.dedup();
        let slot = nodes.first().map_or(0, |&h| on_node[h as usize]);
        for &n in &nodes {
            on_node[n as usize] += 1;
        }
        out.push((nodes, slot));
    }
    out
}

/// One command of a deployment and the node it runs on (pdsim's node index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLine {
    /// The node.
    pub node: u32,
    /// The shell command.
    pub line: String,
}

/// A plan's deployment as launch lines: what `launch.txt` and `slurm.sh` write.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The opening comment lines: the scenario, NVLink domains, nodes used, billing.
    pub header: String,
    /// The cluster's names left to the user ([`cluster_names`]).
    pub names: Vec<ClusterName>,
    /// Per pool, its comment line and its commands in instance order.
    pub pools: Vec<(String, Vec<NodeLine>)>,
    /// The Mooncake Store, when the scenario has one: its comment line and its commands (the
    /// master on its first node, a store service on each of its nodes).
    pub store: Option<(String, Vec<NodeLine>)>,
    /// The router's command (on node 0).
    pub router: NodeLine,
    /// What is not written and why.
    pub notes: Vec<String>,
}

/// The deployment of `sc` as launch lines ([`Launch`]).
pub fn launch(sc: &Scenario) -> Launch {
    let placement = &sc.placement;
    let mut header = String::new();
    let mut notes = Vec::new();
    let vars = Vars::Shell;
    let _ = writeln!(
        header,
        "# sglang launch lines for scenario {:?} (pdsim {}); nodeN is node N of pdsim's placement ({} nodes of {} GPUs).",
        sc.name,
        env!("CARGO_PKG_VERSION"),
        sc.placement.nodes,
        sc.gpus_per_node
    );
    if sc.nvlink_domain_gpus > sc.gpus_per_node {
        let _ = writeln!(
            header,
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
    header.push_str(&nodes_comment(sc, placement));
    env_notes(sc, &mut notes);
    let slots = instance_slots(sc);
    let (mut prefill_urls, mut decode_urls, mut worker_urls) = (Vec::new(), Vec::new(), Vec::new());
    let mut pools = Vec::new();
    let mut inst = 0usize;
    for (i, pool) in sc.pools.iter().enumerate() {
        let flags = pool_flags(sc, i, &mut notes);
        let title = format!(
            "# pool {:?} ({}): {} instance(s) × {} GPU(s)",
            pool.name,
            pool.role.as_str(),
            pool.instances,
            pool.server.gpus()
        );
        let mut lines = Vec::new();
        for _ in 0..pool.instances {
            let gpus = &placement.gpus[inst];
            let (nodes, slot) = &slots[inst];
            inst += 1;
            let head = nodes[0];
            let port = BASE_PORT + slot;
            let line = server_line(
                sc,
                i,
                &flags,
                (port, Some(gpus[0].local), BASE_BOOTSTRAP_PORT + slot),
                vars,
                &mut notes,
            );
            let url = format!("http://{}:{port}", vars.var(&node_var(head)));
            match pool.role {
                Role::Prefill => prefill_urls.push(format!("{url} {}", BASE_BOOTSTRAP_PORT + slot)),
                Role::Decode => decode_urls.push(url),
                Role::Colocated => worker_urls.push(url),
            }
            let mut env = server_env(sc, i, nodes.len() > 1, vars);
            if flags.contains(" --hicache-storage-backend mooncake") {
                // The store's client settings; the transport is already there on EFA.
                for e in store_client_env(sc, vars) {
                    if !env.iter().any(|(k, _)| *k == e.0) {
                        env.push(e);
                    }
                }
            }
            let line = env_prefix(&env) + &line;
            if nodes.len() == 1 {
                lines.push(NodeLine { node: head, line });
            } else {
                for (rank, &n) in nodes.iter().enumerate() {
                    lines.push(NodeLine {
                        node: n,
                        line: format!(
                            "{line} --nnodes {} --node-rank {rank} --dist-init-addr {}:{DIST_INIT_PORT}",
                            nodes.len(),
                            vars.var(&node_var(head))
                        ),
                    });
                }
            }
        }
        pools.push((title, lines));
    }
    let store = sc.kv_store.as_ref().map(|k| store_lines(sc, k, vars));
    let router = NodeLine {
        node: 0,
        line: router_line(sc, &prefill_urls, &decode_urls, &worker_urls, &mut notes),
    };
    Launch {
        header,
        names: cluster_names(sc),
        pools,
        store,
        router,
        notes,
    }
}

/// Where a Mooncake Store's master runs: the store's first node.
fn store_master(sc: &Scenario) -> Option<u32> {
    sc.kv_store.as_ref().and_then(|k| k.nodes.first().copied())
}

/// The environment of a Mooncake Store client (a store service, or a HiCache server with
/// `--hicache-storage-backend mooncake`): the master and the metadata server it registers
/// with, the transport and its devices — the variables sglang's Mooncake store backend and
/// `mooncake_store_service` read (Mooncake `hicache-integration-v1.md`, "configuration can also
/// be provided via environment variables"). A server contributes no DRAM of its own
/// (`MOONCAKE_GLOBAL_SEGMENT_SIZE=0`, as the guide allows once a store service runs): the
/// store's DRAM is the store nodes', as simulated.
fn store_client_env(sc: &Scenario, vars: Vars) -> Vec<(&'static str, String)> {
    let Some(m) = store_master(sc) else {
        return Vec::new();
    };
    let host = vars.var(&node_var(m));
    let protocol = match sc.fabric.transport {
        crate::fabric::Transport::Rdma => "rdma",
        crate::fabric::Transport::Efa => "efa",
    };
    vec![
        ("MOONCAKE_MASTER", format!("{host}:{MOONCAKE_MASTER_PORT}")),
        (
            "MOONCAKE_TE_META_DATA_SERVER",
            format!("http://{host}:{MOONCAKE_METADATA_PORT}/metadata"),
        ),
        ("MOONCAKE_PROTOCOL", protocol.to_string()),
        ("MOONCAKE_DEVICE", vars.var(IB_DEVICES)),
        ("MOONCAKE_GLOBAL_SEGMENT_SIZE", "0".to_string()),
    ]
}

/// The Mooncake Store of `sc` as commands: `mooncake_master` with its embedded metadata
/// server on the store's first node, and on each store node a store service contributing its
/// share of `kv_store.capacity_gb` (GB of 1e9 bytes, as the scenario counts them) — Mooncake's
/// `hicache-integration-v1.md` (`mooncake_master --enable_http_metadata_server=true
/// --http_metadata_server_port=8080`; `python -m mooncake.mooncake_store_service --port=8081`
/// configured by `MOONCAKE_*`).
fn store_lines(
    sc: &Scenario,
    k: &crate::config::KvStoreParams,
    vars: Vars,
) -> (String, Vec<NodeLine>) {
    let nodes: Vec<String> = k.nodes.iter().map(|n| format!("node{n}")).collect();
    let capacity_gb = crate::scenario::resolved_file(sc)
        .kv_store
        .and_then(|s| s.capacity_gb);
    let segment = match capacity_gb {
        Some(gb) => format!("{}", (gb * 1e9 / k.nodes.len().max(1) as f64).ceil() as u64),
        None => vars.var(STORE_SEGMENT_BYTES),
    };
    let title = format!(
        "# Mooncake Store on {} ({}): its master on {}, a store service on each of its nodes; the HiCache servers reach it through MOONCAKE_MASTER.",
        nodes.join(", "),
        capacity_gb.map_or(
            "unbounded in the simulation: STORE_SEGMENT_BYTES sizes it".into(),
            |g| format!("{g} GB in all")
        ),
        nodes.first().map_or("node0", String::as_str)
    );
    let mut lines = Vec::new();
    if let Some(&m) = k.nodes.first() {
        lines.push(NodeLine {
            node: m,
            line: format!(
                "mooncake_master --enable_http_metadata_server=true --http_metadata_server_port={MOONCAKE_METADATA_PORT}"
            ),
        });
    }
    for &n in &k.nodes {
        let mut env = store_client_env(sc, vars);
        for e in env.iter_mut() {
            if e.0 == "MOONCAKE_GLOBAL_SEGMENT_SIZE" {
                e.1 = segment.clone();
            }
        }
        env.push(("MOONCAKE_LOCAL_HOSTNAME", vars.var(&node_var(n))));
        lines.push(NodeLine {
            node: n,
            line: env_prefix(&env)
                + &format!(
                    "python -m mooncake.mooncake_store_service --port={MOONCAKE_STORE_PORT}"
                ),
        });
    }
    (title, lines)
}

/// The `export` block declaring `names` (empty values to fill in), `#`-commented.
fn names_block(names: &[ClusterName]) -> String {
    let width = names.iter().map(|n| n.var.len()).max().unwrap_or(0);
    let mut out = String::new();
    for n in names {
        let _ = writeln!(
            out,
            "export {}={:pad$} # {}",
            n.var,
            "",
            n.what,
            pad = width - n.var.len()
        );
    }
    out
}

/// `launch.txt` for `sc`: comment lines (`#`), the `export` block of the cluster's names to
/// fill in, and one command per line, each under `# on nodeN:`.
pub fn launch_text(sc: &Scenario) -> String {
    let l = launch(sc);
    let mut out = l.header.clone();
    let _ = writeln!(
        out,
        "#\n# The cluster's own names, the only edits: fill them in once here and run this block in each\n# node's shell before that node's lines (slurm.sh sets the NODEn itself from its allocation).\n# Placeholders left: {}.",
        l.names
            .iter()
            .map(|n| n.var.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    out += &names_block(&l.names);
    if let Some((title, lines)) = &l.store {
        let _ = writeln!(out, "\n{title}");
        for nl in lines {
            let _ = writeln!(out, "# on node{}:\n{}", nl.node, nl.line);
        }
    }
    for (title, lines) in &l.pools {
        let _ = writeln!(out, "\n{title}");
        for nl in lines {
            let _ = writeln!(out, "# on node{}:\n{}", nl.node, nl.line);
        }
    }
    let _ = writeln!(out, "\n# router (sgl-model-gateway)");
    let _ = writeln!(out, "# on node{}:\n{}", l.router.node, l.router.line);
    out + &notes_block(l.notes, "#")
}

/// The commands of `launch.txt` by node, in file order: each command under the `# on nodeN:`
/// line before it (the reading `slurm.sh` is tested against).
pub fn node_lines(text: &str) -> std::collections::BTreeMap<u32, Vec<String>> {
    let mut out: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    let mut node = None;
    for l in text.lines() {
        if let Some(n) = l
            .strip_prefix("# on node")
            .and_then(|r| r.strip_suffix(':'))
            .and_then(|r| r.parse::<u32>().ok())
        {
            node = Some(n);
        } else if let Some(n) = node.take()
            && !l.starts_with('#')
            && !l.trim().is_empty()
        {
            out.entry(n).or_default().push(l.to_string());
        }
    }
    out
}

/// The command lines of `launch.txt` (its comments, blank lines and the `export` block of
/// the cluster's names dropped).
pub fn commands(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("export "))
}

#[cfg(test)]
pub(crate) mod tests {
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

    /// `[sglang] staging_buffer`, `staging_pool_mb`, `transfer_backend` and
    /// `failed_session_probe` (docs/sglang-pd.md §26): both servers get
    /// `SGLANG_DISAGG_STAGING_BUFFER=1`, only the decode the ring's size (not sglang's 4096),
    /// only the prefill the probe, and both lines name the backend.
    #[test]
    fn launch_lines_carry_the_staging_buffer_and_the_backend() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/transfer/hetero-tp-staged.toml");
        let sets = [
            "sglang.staging_pool_mb=2048".to_string(),
            "sglang.transfer_backend=mooncake_tcp".to_string(),
            "sglang.tcp_gbps=100".to_string(),
            "sglang.failed_session_probe=true".to_string(),
            "sglang.failed_session_probe_interval_s=5".to_string(),
        ];
        let text = launch_text(&crate::scenario::load(&path, &sets).unwrap());
        let (p, d) = pd_lines(&text);
        let (p, d) = (p.as_str(), d.as_str());
        for l in [p, d] {
            assert!(l.contains("SGLANG_DISAGG_STAGING_BUFFER=1"), "{l}");
            assert!(
                l.contains("--disaggregation-transfer-backend mooncake_tcp "),
                "{l}"
            );
        }
        assert!(d.contains("SGLANG_DISAGG_STAGING_POOL_SIZE_MB=2048"), "{d}");
        assert!(!p.contains("SGLANG_DISAGG_STAGING_POOL_SIZE_MB"), "{p}");
        // The probe is the prefill's (`MooncakeKVManager` in prefill mode).
        assert!(
            p.contains("SGLANG_ENABLE_FAILED_SESSION_PROBE=1")
                && p.contains("SGLANG_FAILED_SESSION_PROBE_INTERVAL_S=5 "),
            "{p}"
        );
        assert!(!d.contains("PROBE"), "{d}");
        // sglang's defaults write nothing.
        let plain = launch_text(&load("scenarios/transfer/hetero-tp-sliced.toml"));
        assert!(!plain.contains("STAGING"), "{plain}");
        assert!(plain.contains("--disaggregation-transfer-backend mooncake "));
    }

    /// `transfer_backend = "nixl"` (docs/sglang-pd.md §26.3): both lines name it.
    #[test]
    fn launch_lines_name_the_nixl_backend() {
        let text = launch_text(&load("scenarios/transfer/backend-nixl.toml"));
        let (p, d) = pd_lines(&text);
        for l in [p, d] {
            assert!(l.contains("--disaggregation-transfer-backend nixl "), "{l}");
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
            router.contains("--prefill http://${NODE0}:30003 9001"),
            "{router}"
        );
        assert!(
            router.contains("--decode http://${NODE0}:30007"),
            "{router}"
        );
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
            assert!(l.contains("--dist-init-addr ${NODE0}:50000"), "{l}");
            // NCCL and Gloo bootstrap on the interface the user names; NCCL's RDMA devices are
            // Mooncake's.
            assert!(
                l.starts_with(
                    "NCCL_SOCKET_IFNAME=\"=${IFNAME}\" GLOO_SOCKET_IFNAME=\"${IFNAME}\" NCCL_IB_HCA=\"=${IB_DEVICES}\" python"
                ),
                "{l}"
            );
            assert!(l.contains("--enable-dp-attention") && l.contains("--moe-a2a-backend deepep"));
            assert!(l.contains("--model-path deepseek-ai/DeepSeek-V3 "), "{l}");
        }
    }

    /// A decode pool with the radix cache gets sglang's flag on its decode lines only, and
    /// `pdsim lint` reads the pair back with the reuse predicted.
    #[test]
    fn a_decode_radix_cache_writes_its_flag() {
        let text = launch_text(&load("scenarios/sessions/decode-prefix-reuse.toml"));
        let flag = " --disaggregation-decode-enable-radix-cache";
        let decode: Vec<&str> = commands(&text)
            .filter(|l| l.contains("--disaggregation-mode decode"))
            .collect();
        assert_eq!(decode.len(), 2, "{text}");
        assert!(decode.iter().all(|l| l.contains(flag)), "{text}");
        let prefill = commands(&text)
            .find(|l| l.contains("--disaggregation-mode prefill"))
            .unwrap();
        assert!(!prefill.contains(flag), "{prefill}");
        let cmd = |l: &str| l[l.find("python").unwrap()..].to_string();
        let r = crate::diagnose::lint::lint(&crate::diagnose::lint::LintQuestion {
            prefill: cmd(prefill),
            decode: cmd(decode[0]),
            model_config: None,
            profile: "guarded".into(),
            version: Some("2026-09".into()),
        })
        .unwrap();
        assert!(r.decode.decode_radix_cache && r.decode_prefix_reuse.is_some());
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
        // The store itself: its master on its first node, a store service on each of its
        // nodes sized as the user says (the scenario's store is unbounded), and every HiCache
        // server pointed at the master, contributing no DRAM of its own.
        let nodes = node_lines(&text);
        assert_eq!(
            nodes[&3][0],
            "mooncake_master --enable_http_metadata_server=true --http_metadata_server_port=8080"
        );
        for n in [3, 4] {
            let service = nodes[&n]
                .iter()
                .find(|l| l.ends_with("python -m mooncake.mooncake_store_service --port=8081"))
                .unwrap();
            assert!(
                service.contains("MOONCAKE_GLOBAL_SEGMENT_SIZE=\"${STORE_SEGMENT_BYTES}\"")
                    && service.contains(&format!("MOONCAKE_LOCAL_HOSTNAME=\"${{NODE{n}}}\"")),
                "{service}"
            );
        }
        for l in commands(&text).filter(|l| l.contains("sglang.launch_server")) {
            assert!(
                l.starts_with("MOONCAKE_MASTER=\"${NODE3}:50051\" MOONCAKE_TE_META_DATA_SERVER=\"http://${NODE3}:8080/metadata\"")
                    && l.contains(" MOONCAKE_GLOBAL_SEGMENT_SIZE=0 "),
                "{l}"
            );
        }
        // A sized store: each node's share of capacity_gb, in bytes.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scenarios/store/decode-offload.toml");
        let sc = crate::scenario::load(&path, &["kv_store.capacity_gb=100".into()]).unwrap();
        let text = launch_text(&sc);
        assert!(
            text.contains("MOONCAKE_GLOBAL_SEGMENT_SIZE=50000000000 "),
            "{text}"
        );
        assert!(!text.contains("STORE_SEGMENT_BYTES"), "{text}");
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
                l.starts_with("SGLANG_MOONCAKE_CUSTOM_MEM_POOL=NVLINK MC_FORCE_MNNVL=1 NCCL_SOCKET_IFNAME=\"=${IFNAME}\" GLOO_SOCKET_IFNAME=\"${IFNAME}\" NCCL_IB_HCA=\"=${IB_DEVICES}\" NCCL_MNNVL_ENABLE=1 NCCL_CUMEM_ENABLE=1 python -m sglang.launch_server"),
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
            version: None,
        })
        .unwrap();
        assert!(report.prediction.compatible, "{:?}", report.prediction);
    }

    /// The variables a file's lines refer to (`${NAME}` in a shell, `$(NAME)` in a pod).
    pub(crate) fn referenced(
        text: &str,
        open: &str,
        close: char,
    ) -> std::collections::BTreeSet<String> {
        let mut out = std::collections::BTreeSet::new();
        for l in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            let mut rest = l;
            while let Some(i) = rest.find(open) {
                let tail = &rest[i + open.len()..];
                let Some(j) = tail.find(close) else { break };
                let name = &tail[..j];
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                {
                    out.insert(name.to_string());
                }
                rest = &tail[j..];
            }
        }
        out
    }

    /// Issue 41 item 5, "say what still needs the user's hand": the names `launch.txt` says
    /// are left are exactly those it declares and exactly those its lines use — on one node,
    /// across nodes with DP attention and EP, on an NVL72 rack, colocated.
    #[test]
    fn the_placeholders_listed_are_exactly_the_ones_used() {
        for rel in [
            "scenarios/quickstart.toml",
            "scenarios/moe/lmsys-prefill-ep32.toml",
            "scenarios/moe/gb200-nvl72-fp4-decode.toml",
            "scenarios/plan/colocated-8b.toml",
            "scenarios/store/decode-offload.toml",
            "scenarios/store/store-on-decode-node.toml",
        ] {
            let sc = load(rel);
            let text = launch_text(&sc);
            let listed: std::collections::BTreeSet<String> = text
                .lines()
                .find_map(|l| l.strip_prefix("# Placeholders left: "))
                .unwrap()
                .trim_end_matches('.')
                .split(", ")
                .map(String::from)
                .collect();
            let declared: std::collections::BTreeSet<String> = text
                .lines()
                .filter_map(|l| l.strip_prefix("export "))
                .map(|l| l.split('=').next().unwrap().to_string())
                .collect();
            let used = referenced(&text, "${", '}');
            assert_eq!(listed, declared, "{rel}");
            assert_eq!(declared, used, "{rel}");
            let multi = sc
                .placement
                .gpus
                .iter()
                .any(|g| g[0].node != g[g.len() - 1].node);
            assert_eq!(used.contains(IFNAME), multi, "{rel}");
            assert_eq!(
                used.contains(IB_DEVICES),
                is_pd(&sc) || multi || sc.kv_store.is_some(),
                "{rel}"
            );
        }
    }

    /// The first prefill and the first decode line of a `launch.txt`.
    fn pd_lines(text: &str) -> (String, String) {
        let line = |mode: &str| {
            commands(text)
                .find(|l| l.contains(&format!("--disaggregation-mode {mode}")))
                .unwrap()
                .to_string()
        };
        (line("prefill"), line("decode"))
    }

    /// What the scenario simulated that sglang reads from its environment is on the lines of
    /// the side that reads it, and only when it is not sglang's default: `[sglang]` timeouts
    /// (whole seconds, rounded up with a note) and transfer queues, EFA.
    #[test]
    fn simulated_sglang_and_mooncake_settings_are_in_the_environment() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
        let text = launch_text(&crate::scenario::load(&path, &[]).unwrap());
        assert!(!text.contains("SGLANG_DISAGGREGATION_") && !text.contains("MOONCAKE_PROTOCOL"));
        let sets: Vec<String> = [
            "sglang.bootstrap_timeout_s=30",
            "sglang.waiting_timeout_s=12.5",
            "sglang.queue_size=8",
            "fabric.transport=\"efa\"",
        ]
        .map(String::from)
        .to_vec();
        let text = launch_text(&crate::scenario::load(&path, &sets).unwrap());
        let (p, d) = pd_lines(&text);
        assert!(
            p.starts_with("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=30 SGLANG_DISAGGREGATION_QUEUE_SIZE=8 MOONCAKE_PROTOCOL=efa python"),
            "{p}"
        );
        assert!(
            d.starts_with("SGLANG_DISAGGREGATION_WAITING_TIMEOUT=13 MOONCAKE_PROTOCOL=efa python"),
            "{d}"
        );
        assert!(
            text.contains("sglang.waiting_timeout_s = 12.5 s is written as 13 s"),
            "{text}"
        );
        assert!(text.contains("EFA devices"), "{text}");
    }

    /// A decode's extra request rows go where the release reads them: the seed's environment
    /// variable (`model_runner.py`), 2026's flag; never on a prefill's line.
    #[test]
    fn decode_extra_slots_are_the_seeds_variable_and_2026s_flag() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
        let lines = |version: &str| {
            let sets = vec![
                "pools.decode.server.disaggregation_decode_extra_slots=48".to_string(),
                format!("sglang.version={version:?}"),
            ];
            pd_lines(&launch_text(&crate::scenario::load(&path, &sets).unwrap()))
        };
        let (p, d) = lines("seed");
        assert!(
            d.starts_with("SGLANG_DISAGGREGATION_NUM_PRE_ALLOCATE_REQS=48 python"),
            "{d}"
        );
        assert!(!d.contains("--disaggregation-decode-extra-slots"), "{d}");
        assert!(
            !p.contains("PRE_ALLOCATE") && !p.contains("extra-slots"),
            "{p}"
        );
        let (p, d) = lines("2026-09");
        assert!(d.contains(" --disaggregation-decode-extra-slots 48"), "{d}");
        assert!(!d.contains("PRE_ALLOCATE"), "{d}");
        assert!(
            !p.contains("PRE_ALLOCATE") && !p.contains("extra-slots"),
            "{p}"
        );
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
