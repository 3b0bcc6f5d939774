//! The deployments of 2026 (issue 43, item 3) end to end: NVL72 racks (trays as nodes, the
//! rack as the NVLink domain, KV over Mooncake's multi-node NVLink transport), NVFP4 weights,
//! weight offload to host memory, MTP with DeepEP across nodes, and the DeepSeek-architecture
//! model types. Every expected figure is derived in a comment.

use crate::common;
use common::*;

use pdsim::spec::{WeightDtype, preset};

/// Bytes of one routed expert of DeepSeek-V3 in one layer: gate, up and down, 3 × 7168 × 2048.
const EXPERT_LAYER_PARAMS: f64 = 3.0 * 7168.0 * 2048.0;

fn load(
    rel: &str,
    sets: &[&str],
) -> Result<pdsim::config::Scenario, pdsim::scenario::ScenarioError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    pdsim::scenario::load(&repo().join(rel), &sets)
}

/// `hardware.system = "gb200-nvl72"` is a GB200 on 4-GPU trays in a 72-GPU NVLink domain, its
/// NICs ConnectX-7 at 400 Gb/s (`gb300-nvl72`: ConnectX-8 at 800); the 48-rank decode sits on
/// trays 0-11 of rack 0, and the resolved file (what `best.toml` and `run.json` record) names
/// everything the system filled in, so it loads again to the same cluster.
#[test]
fn an_nvl72_system_is_trays_in_one_nvlink_domain() {
    let sc = load("scenarios/moe/gb200-nvl72-decode.toml", &[]).unwrap();
    assert_eq!(sc.gpu.name, "gb200");
    assert_eq!((sc.gpus_per_node, sc.nvlink_domain_gpus), (4, 72));
    assert_eq!(sc.fabric.topology.nodes_per_nvlink_domain, 18);
    assert_eq!(sc.fabric.topology.nic_bytes_per_ns, 400.0 / 8.0);
    let decode = sc.pools.iter().position(|p| p.name == "decode").unwrap();
    let first_decode: usize = sc.pools[..decode]
        .iter()
        .map(|p| p.instances as usize)
        .sum();
    let d = &sc.placement.gpus[first_decode];
    assert_eq!((d[0].node, d[47].node), (0, 11));
    let file = pdsim::scenario::resolved_file(&sc);
    assert_eq!(file.hardware.gpu.as_deref(), Some("gb200"));
    assert_eq!(
        (
            file.hardware.gpus_per_node,
            file.hardware.nvlink_domain_gpus
        ),
        (4, Some(72))
    );
    let gb300 = load(
        "scenarios/moe/gb200-nvl72-decode.toml",
        &["hardware.system=\"gb300-nvl72\""],
    )
    .unwrap();
    assert_eq!(gb300.gpu.name, "gb300");
    assert_eq!(gb300.fabric.topology.nic_bytes_per_ns, 800.0 / 8.0);
    // fabric.mnnvl = false: the rack is still one NVLink domain for TP and DeepEP, but KV
    // between its trays leaves by the NICs.
    let rdma = load(
        "scenarios/moe/gb200-nvl72-decode.toml",
        &["fabric.mnnvl=false"],
    )
    .unwrap();
    assert_eq!(rdma.nvlink_domain_gpus, 72);
    assert_eq!(rdma.fabric.topology.nodes_per_nvlink_domain, 1);
}

/// Inside the rack the KV moves over NVLink: in the FP4 prefill scenario every prefill tray
/// shares rack 0 with the decode, so no NIC carries a byte (DeepEP inside the rack is NVLink
/// too), while the same run with `fabric.mnnvl = false` puts every transfer on the NICs — and
/// since one Mooncake RDMA batch moves at most 18.3 GB/s where the NVLink copy is bounded by
/// NVLink alone, the mean transfer is shorter over NVLink.
#[test]
fn kv_inside_the_rack_goes_over_nvlink() {
    let over = |sets: &[&str], name: &str| {
        let dir = tmpdir(name);
        let s = run("scenarios/moe/gb200-fp4-offload-prefill.toml", sets, &dir);
        let links = read_csv(&dir.join("links.csv"));
        let nic: f64 = links
            .iter()
            .filter(|r| r["link"].contains(".nic"))
            .map(|r| r["bytes"].parse::<f64>().unwrap())
            .sum();
        let nvlink: f64 = links
            .iter()
            .filter(|r| r["link"].contains("nvlink"))
            .map(|r| r["bytes"].parse::<f64>().unwrap())
            .sum();
        let _ = std::fs::remove_dir_all(&dir);
        (s, nic, nvlink)
    };
    let sets = ["run.duration_s=4"];
    let (s, nic, nvlink) = over(&sets, "nvl72-mnnvl");
    assert!(s.requests.completed > 0);
    assert_eq!(nic, 0.0, "a NIC carried bytes inside the rack");
    assert!(nvlink > 0.0);
    let (r, nic, nvlink) = over(&["run.duration_s=4", "fabric.mnnvl=false"], "nvl72-rdma");
    assert!(nic > 0.0 && nvlink == 0.0, "{nic} {nvlink}");
    let (a, b) = (
        s.latency_ms.transfer.mean.unwrap(),
        r.latency_ms.transfer.mean.unwrap(),
    );
    assert!(a < b, "transfer over NVLink {a} ms, over RDMA {b} ms");
}

/// `quantization = "modelopt_fp4"` on DeepSeek-V3: the routed experts in NVFP4 (4.5 bits a
/// weight with the FP8 scale of every 16), the rest as the preset stores it (FP8). One GPU of
/// a DP4/EP4 instance then holds 64 experts × 58 layers × 44,040,192 params × 0.5625 B of
/// experts instead of × 1 B: 70.77 GB less. And the GPU needs FP4 tensor cores: an H200 is
/// refused with the key and the Blackwell presets that have them.
#[test]
fn nvfp4_experts_take_nine_sixteenths_of_fp8_and_need_blackwell() {
    let fp4 = load("scenarios/moe/gb200-fp4-offload-prefill.toml", &[]).unwrap();
    let fp8 = load(
        "scenarios/moe/gb200-fp4-offload-prefill.toml",
        &[
            "pools.prefill.server.quantization=\"fp8\"",
            "pools.decode.server.quantization=\"fp8\"",
        ],
    )
    .unwrap();
    let pf = |sc: &pdsim::config::Scenario| {
        sc.pools
            .iter()
            .find(|p| p.name == "prefill")
            .unwrap()
            .clone()
    };
    let (a, b) = (pf(&fp4), pf(&fp8));
    assert_eq!(a.model.weights.experts, WeightDtype::Nvfp4);
    assert_eq!(a.model.weights.dense, WeightDtype::Fp8);
    let w = |p: &pdsim::config::Pool| {
        pdsim::config::capacity::weight_bytes_per_gpu(&p.model, &p.server, &p.parallel)
    };
    let saved = 64.0 * 58.0 * EXPERT_LAYER_PARAMS * (1.0 - 0.5625);
    assert!(
        ((w(&b) - w(&a)) / saved - 1.0).abs() < 1e-9,
        "{} vs {saved}",
        w(&b) - w(&a)
    );
    // The FP4 peak for the experts: GB200's 10 PFLOPS dense.
    assert_eq!(
        pdsim::compute::StepModel::expert_peak_flops_for(&fp4.gpu, &a.model, &fp4.compute),
        10_000e12
    );
    let e = load(
        "scenarios/quickstart.toml",
        &["pools.prefill.server.quantization=\"modelopt_fp4\""],
    )
    .unwrap_err();
    assert_eq!(e.key, "pools.prefill.server.quantization");
    assert!(
        e.message.contains("FP4 tensor cores") && e.message.contains("gb200"),
        "{e}"
    );
    // Dense model: every linear layer NVFP4, 9/32 of its BF16 bytes.
    let l = load(
        "scenarios/quickstart.toml",
        &[
            "hardware.gpu=\"b200\"",
            "pools.prefill.server.quantization=\"modelopt_fp4\"",
        ],
    )
    .unwrap();
    let m = &l.pools[0].model;
    assert_eq!(m.weights.experts, WeightDtype::Nvfp4);
    let bf16 = preset("llama-3.1-8b").unwrap().weight_bytes_total();
    assert!((m.weight_bytes_total() / bf16 - 4.5 / 16.0).abs() < 1e-12);
}

/// GB200's 4-GPU prefill of the 671B model: DeepSeek-V3 in FP8 on one tray (DP4, EP4) holds
/// 64 experts × 58 layers × 44,040,192 B = 163.5 GB of routed experts per GPU plus ~15 GB of
/// attention and dense weights, above GB200's 189,471 MiB × 0.84 = 166.9 GB: refused, and the
/// message points at offload. sglang's layer-wise offload with group 2 keeps the experts of
/// every second layer in the tray's Grace memory: odd layers 1..59, of which 3..59 (29) have
/// experts (0-2 are dense), 29 × 64 × 44,040,192 B = 81.74 GB off each GPU, with 2 layers'
/// worth (prefetch step 1 + the one in use) in flight: it fits.
#[test]
fn a_four_gpu_gb200_prefill_of_the_671b_model_needs_offload_and_gets_it() {
    let fp8 = [
        "pools.prefill.server.quantization=\"fp8\"",
        "pools.decode.server.quantization=\"fp8\"",
    ];
    let mut no_offload: Vec<&str> = fp8.to_vec();
    no_offload.extend(["pools.prefill.server.offload_group_size=0"]);
    let e = load("scenarios/moe/gb200-fp4-offload-prefill.toml", &no_offload).unwrap_err();
    assert_eq!(e.key, "pools.prefill.server.offload_group_size", "{e}");
    // Without the offload keys at all: over the budget.
    let text = std::fs::read_to_string(repo().join("scenarios/moe/gb200-fp4-offload-prefill.toml"))
        .unwrap();
    let stripped: String = text
        .lines()
        .filter(|l| !l.starts_with("offload_"))
        .collect::<Vec<_>>()
        .join("\n");
    let path = repo().join("scenarios/moe/gb200-fp4-offload-prefill.toml");
    let sets: Vec<String> = fp8.iter().map(|s| s.to_string()).collect();
    let e = pdsim::scenario::from_str(&stripped, &path, &sets).unwrap_err();
    assert_eq!(e.key, "pools.prefill.server.tp_size");
    assert!(e.message.contains("offload"), "{e}");
    let sc = load("scenarios/moe/gb200-fp4-offload-prefill.toml", &fp8).unwrap();
    let p = sc.pools.iter().find(|p| p.name == "prefill").unwrap();
    let o = p.offload.as_ref().unwrap();
    let layer = 64.0 * EXPERT_LAYER_PARAMS;
    assert_eq!(o.bytes_per_forward(), 29.0 * layer);
    assert_eq!(o.transient_bytes(), 2.0 * layer);
    assert!(pdsim::config::capacity::kv_pages(&sc.gpu, p) > 0);
    // Each GPU's C2C share, 450 GB/s each way over 2 GPUs, at 80 % of line rate.
    assert_eq!(o.link_bytes_per_s, 225e9 * 0.8);
}

/// The V2 offloader's fetches hide under compute when the layers between are long enough:
/// a big prefill forward pays nothing for them, a one-token decode of the same instance pays
/// the link (each of the 29 copies, 2.82 GB at 180 GB/s = 15.7 ms, can hide only under one
/// layer's compute).
#[test]
fn offload_hides_under_a_long_forward_and_not_under_a_short_one() {
    let sc = load(
        "scenarios/moe/gb200-fp4-offload-prefill.toml",
        &[
            "pools.prefill.server.quantization=\"fp8\"",
            "pools.decode.server.quantization=\"fp8\"",
        ],
    )
    .unwrap();
    let p = sc.pools.iter().find(|p| p.name == "prefill").unwrap();
    let o = p.offload.as_ref().unwrap();
    let copy = 64.0 * EXPERT_LAYER_PARAMS / (225e9 * 0.8);
    // A 61-layer forward of 61 s: one second a layer, far above a copy.
    assert_eq!(o.forward_s(61.0).stall_s, 0.0);
    // A forward of 61 ms: 1 ms a layer; the copies bind: each offloaded layer waits for its
    // copy, started when the one before ended, with its own 1 ms of compute after it.
    let t = o.forward_s(0.061);
    assert!(t.stall_s > 29.0 * (copy - 0.002), "{t:?}");
    assert!(t.total_s < 29.0 * (copy + 0.001) + 0.061, "{t:?}");
}

/// MTP on a decode instance spanning two H200 nodes with DeepEP — refused before issue 43 —
/// runs: its steps' inter-node all-to-all goes on the fabric (`transfer.a2a` counts the decode
/// pool's steps), the accept length is the one set, and every request completes.
#[test]
fn mtp_with_deepep_across_nodes_runs_its_steps_on_the_fabric() {
    let dir = tmpdir("mtp-deepep");
    let s = run(
        "scenarios/moe/mtp-deepep-two-nodes.toml",
        &["run.max_requests=8"],
        &dir,
    );
    assert_eq!(s.requests.completed, 8, "{:?}", s.requests);
    let d = s
        .transfer
        .a2a
        .iter()
        .find(|r| r.pool == "decode")
        .expect("a2a on the fabric");
    assert!(d.forwards > 100, "{d:?}");
    let spec = s.speculative.iter().find(|x| x.pool == "decode").unwrap();
    assert!(
        (spec.accept_length_mean.unwrap() - 2.18).abs() < 0.05,
        "{spec:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Kimi-K2's config (`model_type` `kimi_k2`, `architectures` DeepseekV3ForCausalLM) imports
/// as the `kimi-k2` preset, and a launch line naming Moonshot's checkpoint resolves to it.
#[test]
fn kimi_k2_loads_from_its_config_and_its_hub_id() {
    let sc = load(
        "scenarios/quickstart.toml",
        &[
            "model={ config = \"models/kimi-k2-instruct.config.json\" }",
            "hardware.gpu=\"b200\"",
            "pools.prefill.server.tp_size=8",
            "pools.decode.server.tp_size=8",
        ],
    )
    .unwrap();
    let mut m = sc.pools[0].model.clone();
    m.name = "kimi-k2".into();
    assert_eq!(m, preset("kimi-k2").unwrap());
    assert_eq!(
        pdsim::spec::launch::preset_for("moonshotai/Kimi-K2-Instruct"),
        Some("kimi-k2")
    );
}
