//! Every bad scenario exits with a clear error that names the file, the line where one can be
//! found, the key, and what would be valid. Each file in `tests/bad_scenarios/` states what it
//! expects in its first lines: `# expect-key: KEY` (empty when TOML itself reports the line) and
//! `# expect: FRAGMENT` of the message.

use crate::common;
use common::*;

#[test]
fn every_bad_scenario_gets_a_clear_error() {
    let dir = repo().join("tests/bad_scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "at least ten bad files, found {}",
        files.len()
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let header = |tag: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(tag))
                .unwrap_or_else(|| panic!("{}: no `{tag}` line", path.display()))
                .trim()
                .to_string()
        };
        let (key, fragment) = (header("# expect-key:"), header("# expect:"));
        let err = match pdsim::scenario::load(&path, &[]) {
            Ok(_) => panic!("{} loaded, but should be rejected", path.display()),
            Err(e) => e,
        };
        let shown = err.to_string();
        assert!(
            shown.starts_with(&path.display().to_string()),
            "{shown}: the message must start with the file"
        );
        assert!(
            shown.contains(&fragment),
            "{}: {shown}\n  should contain {fragment:?}",
            path.display()
        );
        assert_eq!(err.key, key, "{}: {shown}", path.display());
        let line = err
            .line
            .unwrap_or_else(|| panic!("{}: no line in {shown}", path.display()));
        let at = text.lines().nth(line - 1).unwrap_or_default();
        // The line points at the key itself, or its table when the key is missing (a
        // `[table]` header, or the line of the inline table that lacks it).
        let mut segs = key
            .rsplit('.')
            .map(|s| s.split('[').next().unwrap_or_default());
        let leaf = segs.next().unwrap_or_default();
        let table = segs.next().filter(|_| shown.contains("missing field"));
        if !key.is_empty() {
            assert!(
                at.contains(leaf)
                    || table.is_some_and(|t| at.contains(t))
                    || at.trim_start().starts_with('['),
                "{}: line {line} is {at:?}, not the line of {key}",
                path.display()
            );
        }
    }
}

#[test]
fn set_overrides_are_validated_too() {
    let q = repo().join("scenarios/quickstart.toml");
    let e = pdsim::scenario::load(&q, &["pools.decode.server.tp_size=3".into()]).unwrap_err();
    assert!(e.to_string().contains("neither divides"), "{e}");
    let e = pdsim::scenario::load(&q, &["pools.nope.instances=1".into()]).unwrap_err();
    assert!(
        e.to_string().contains("valid names: prefill, decode"),
        "{e}"
    );
    let e = pdsim::scenario::load(&q, &["run.bogus=1".into()]).unwrap_err();
    assert!(
        e.to_string().contains("unknown field `bogus`") && e.to_string().contains("after --set"),
        "{e}"
    );
    // Typos get the nearest valid name; the key is named even for --set values.
    for (set, key, hint) in [
        (
            "hardware.gpu=h100",
            "hardware.gpu",
            "did you mean `h100-sxm`?",
        ),
        (
            "model.preset=llama-3.1-8B",
            "model.preset",
            "did you mean `llama-3.1-8b`?",
        ),
        (
            "router.policy=least_load",
            "router.policy",
            "did you mean `least_loaded`?",
        ),
        (
            "sglang.profile=guard",
            "sglang.profile",
            "did you mean `guarded`?",
        ),
    ] {
        let e = pdsim::scenario::load(&q, &[set.into()]).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains(hint), "{e}");
    }
    let e = pdsim::scenario::load(&q, &["pools.nope.instances=1".into()]).unwrap_err();
    assert_eq!(e.key, "pools.nope.instances", "{e}");
    let ok = pdsim::scenario::load(&q, &["pools.decode.instances=3".into()]).unwrap();
    assert_eq!(
        ok.pools
            .iter()
            .find(|p| p.name == "decode")
            .unwrap()
            .instances,
        3
    );
}

/// Found by the fuzzer (seed 2031, case 60643): a huge hardware rate became an infinite fabric
/// rate and panicked at run time. Every hardware rate is bounded at load time instead.
#[test]
fn huge_hardware_rates_are_refused_with_their_key() {
    let q = repo().join("scenarios/quickstart.toml");
    for key in [
        "hardware.nvlink_gb_s",
        "hardware.rdma_engine_gbps",
        "hardware.bf16_tflops",
        "hardware.fp8_tflops",
        "hardware.hbm_tb_s",
    ] {
        let e = pdsim::scenario::load(&q, &[format!("{key}=1e300")]).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains(key) && m.contains("above the bound"),
            "{key}: {m}"
        );
    }
}

/// Every `[router]` key rejects a bad value naming the key and what is valid.
#[test]
fn router_keys_name_themselves_and_what_is_valid() {
    let q = repo().join("scenarios/quickstart.toml");
    for (set, key, hint) in [
        ("router.policy=cache_awar", "router.policy", "cache_aware"),
        (
            "router.prefill_policy=po2",
            "router.prefill_policy",
            "power_of_two",
        ),
        (
            "router.decode_policy=x",
            "router.decode_policy",
            "round_robin",
        ),
        (
            "router.cache_threshold=1.5",
            "router.cache_threshold",
            "[0, 1]",
        ),
        (
            "router.cache_threshold=-0.1",
            "router.cache_threshold",
            "[0, 1]",
        ),
        (
            "router.balance_rel_threshold=0.5",
            "router.balance_rel_threshold",
            "≥ 1",
        ),
        (
            "router.balance_abs_threshold=-1",
            "router.balance_abs_threshold",
            "",
        ),
        (
            "router.balance_abs_threshold=99999999999",
            "router.balance_abs_threshold",
            "≤",
        ),
        (
            "router.max_tree_size=0",
            "router.max_tree_size",
            "≥ 1 character",
        ),
        (
            "router.eviction_interval_secs=99999999999",
            "router.eviction_interval_secs",
            "at most",
        ),
        (
            "router.eviction_interval_secs=1.5",
            "router.eviction_interval_secs",
            "",
        ),
    ] {
        let e = pdsim::scenario::load(&q, &[set.into()]).unwrap_err();
        assert_eq!(e.key, key, "{set}: {e}");
        assert!(e.to_string().contains(hint), "{set}: {e}");
    }
    // A plain cluster has no prefill or decode side to give a policy to.
    let c = repo().join("scenarios/calibration/sharegpt-colocated.toml");
    let e = pdsim::scenario::load(&c, &["router.decode_policy=random".into()]).unwrap_err();
    assert_eq!(e.key, "router.decode_policy", "{e}");
    assert!(e.to_string().contains("set router.policy instead"), "{e}");
    // Good values load, per side.
    let ok = pdsim::scenario::load(
        &q,
        &[
            "router.policy=power_of_two".into(),
            "router.decode_policy=cache_aware".into(),
            "router.cache_threshold=0.5".into(),
        ],
    )
    .unwrap();
    assert_eq!(ok.router.prefill, pdsim::config::RouterPolicy::PowerOfTwo);
    assert_eq!(ok.router.decode, pdsim::config::RouterPolicy::CacheAware);
    assert_eq!(ok.router.cache_aware.cache_threshold, 0.5);
}

/// HiCache's flags and `[kv_store]` reject bad values naming the key and what is valid.
#[test]
fn hicache_and_kv_store_keys_name_themselves() {
    let q = repo().join("tests/scenarios/kv-store.toml");
    let ok = pdsim::scenario::load(&q, &[]).unwrap();
    let h = ok.pools[0].hicache.unwrap();
    assert!(h.storage && h.host_tokens > 0);
    assert_eq!(ok.kv_store.as_ref().unwrap().nodes, vec![0, 1]);
    let p = "pools.prefill.server";
    for (set, key, hint) in [
        (
            format!("{p}.hicache_ratio=1"),
            format!("{p}.hicache_ratio"),
            "above 1",
        ),
        (
            format!("{p}.hicache_size=-2"),
            format!("{p}.hicache_size"),
            "GB",
        ),
        (
            format!("{p}.hicache_storage_backend=hf3fs"),
            format!("{p}.hicache_storage_backend"),
            "valid: \"mooncake\"",
        ),
        (
            format!("{p}.hicache_write_policy=write_back"),
            format!("{p}.hicache_write_policy"),
            "write_through_selective",
        ),
        (
            format!("{p}.hicache_write_policy=sometimes"),
            format!("{p}.hicache_write_policy"),
            "write_through",
        ),
        (
            format!("{p}.hicache_storage_prefetch_policy=eager"),
            format!("{p}.hicache_storage_prefetch_policy"),
            "best_effort",
        ),
        (
            format!("{p}.disable_radix_cache=true"),
            format!("{p}.enable_hierarchical_cache"),
            "radix cache",
        ),
        (
            "pools.decode.server.enable_hierarchical_cache=true".into(),
            "pools.decode.server.enable_hierarchical_cache".into(),
            "--disaggregation-decode-enable-offload-kvcache",
        ),
        (
            "kv_store.capacity_gb=0".into(),
            "kv_store.capacity_gb".into(),
            "positive",
        ),
        (
            "kv_store.nodes=[0, 99]".into(),
            "kv_store.nodes".into(),
            "not in the cluster",
        ),
        (
            "kv_store.nodes=[1, 1]".into(),
            "kv_store.nodes".into(),
            "twice",
        ),
        (
            "kv_store.eviction=fifo".into(),
            "kv_store.eviction".into(),
            "\"lru\"",
        ),
        (
            format!("{p}.hicache_storage_backend=none"),
            format!("{p}.hicache_storage_backend"),
            "mooncake",
        ),
    ] {
        let e = pdsim::scenario::load(&q, std::slice::from_ref(&set)).unwrap_err();
        assert_eq!(e.key, key, "{set}: {e}");
        assert!(e.to_string().contains(hint), "{set}: {e}");
    }
    // HiCache flags without HiCache, the store without a user, a user without the store.
    let plain = repo().join("scenarios/quickstart.toml");
    let e = pdsim::scenario::load(&plain, &["pools.prefill.server.hicache_ratio=3".into()])
        .unwrap_err();
    assert!(
        e.to_string().contains("enable_hierarchical_cache = true"),
        "{e}"
    );
    let e =
        pdsim::scenario::load(&q, &[format!("{p}.enable_hierarchical_cache=false")]).unwrap_err();
    assert!(e.key.starts_with(p), "{e}");
    let e = pdsim::scenario::load(
        &plain,
        &[
            "pools.prefill.server.enable_hierarchical_cache=true".into(),
            "pools.prefill.server.hicache_storage_backend=mooncake".into(),
        ],
    )
    .unwrap_err();
    assert!(e.to_string().contains("add a [kv_store] section"), "{e}");
}

/// The per-NIC host cap was replaced by a per-GPU engine limit (issue 22): a scenario that
/// still sets it is told what replaced it, and a bad engine rate or transport names its key.
#[test]
fn the_removed_nic_host_cap_and_the_engine_keys_are_explained() {
    let q = repo().join("scenarios/quickstart.toml");
    let m = pdsim::scenario::load(&q, &["hardware.nic_host_gbps=400".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("hardware.nic_host_gbps")
            && m.contains("hardware.rdma_engine_gbps")
            && m.contains("fabric.transport"),
        "{m}"
    );
    for bad in ["0", "-5", "nan"] {
        let m = pdsim::scenario::load(&q, &[format!("hardware.rdma_engine_gbps={bad}")])
            .unwrap_err()
            .to_string();
        assert!(m.contains("hardware.rdma_engine_gbps"), "{bad}: {m}");
    }
    let m = pdsim::scenario::load(&q, &["fabric.transport=\"tcp\"".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("transport") && m.contains("rdma") && m.contains("efa"),
        "{m}"
    );
    let ok = pdsim::scenario::load(&q, &["fabric.transport=\"efa\"".to_string()]).unwrap();
    assert_eq!(ok.fabric.transport, pdsim::fabric::Transport::Efa);
}

/// `pools.gpu` (issue 22, placement): needs `pools.node`, is a GPU index of the node, is
/// aligned to `tp_size`, and two pools still cannot share a GPU.
#[test]
fn pool_gpu_placement_is_checked_by_key() {
    let q = repo().join("scenarios/placement/same-node-nvlink.toml");
    let cases: [(&[&str], &str); 4] = [
        (&["pools.decode.gpu=8"], "0..7"),
        (
            &["pools.decode.gpu=3", "pools.decode.server.tp_size=2"],
            "multiple of tp_size",
        ),
        (&["pools.decode.gpu=2"], "cannot share GPUs"),
        (&["pools.prefill.gpu=2"], "cannot share GPUs"),
    ];
    for (sets, want) in cases {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let m = pdsim::scenario::load(&q, &sets).unwrap_err().to_string();
        assert!(m.contains(".gpu") || m.contains(".node"), "{sets:?}: {m}");
        assert!(m.contains(want), "{sets:?}: {m}");
    }
    let q = repo().join("scenarios/quickstart.toml");
    let m = pdsim::scenario::load(&q, &["pools.decode.gpu=4".to_string()])
        .unwrap_err()
        .to_string();
    assert!(
        m.contains("pools.decode.gpu") && m.contains("pools.node"),
        "{m}"
    );
}

/// Issue 43's deployment keys (`hardware.system`, `hardware.nvlink_domain_gpus`,
/// `hardware.fp4_tflops`, `hardware.host_link_gb_s`, `quantization = "modelopt_fp4"`, the
/// offload flags): each bad value is exit 2 naming its key and what is valid.
#[test]
fn deployment_keys_name_themselves_and_what_is_valid() {
    let nvl = "scenarios/moe/gb200-fp4-offload-prefill.toml";
    let quick = "scenarios/quickstart.toml";
    let p = "pools.prefill.server";
    let cases: Vec<(&str, Vec<String>, String, &str)> = vec![
        (
            nvl,
            vec!["hardware.system=\"gb400-nvl144\"".into()],
            "hardware.system".into(),
            "gb200-nvl72, gb300-nvl72",
        ),
        (
            nvl,
            vec!["hardware.gpu=\"h100-sxm\"".into()],
            "hardware.gpu".into(),
            "contradicts hardware.system",
        ),
        (
            nvl,
            vec!["hardware.gpus_per_node=8".into()],
            "hardware.gpus_per_node".into(),
            "compute tray of 4 GPUs",
        ),
        (
            nvl,
            vec!["hardware.nvlink_domain_gpus=80".into()],
            "hardware.nvlink_domain_gpus".into(),
            "at most the rack's 72",
        ),
        (
            nvl,
            vec!["hardware.nvlink_domain_gpus=30".into()],
            "hardware.nvlink_domain_gpus".into(),
            "whole trays of 4",
        ),
        (
            quick,
            vec!["hardware.nvlink_domain_gpus=12".into()],
            "hardware.nvlink_domain_gpus".into(),
            "multiple of hardware.gpus_per_node = 8",
        ),
        (
            quick,
            vec!["hardware.fp4_tflops=-1".into()],
            "hardware.fp4_tflops".into(),
            "TFLOP/s",
        ),
        (
            quick,
            vec!["hardware.host_link_gb_s=0".into()],
            "hardware.host_link_gb_s".into(),
            "GB/s",
        ),
        (
            quick,
            vec![format!("{p}.quantization=\"modelopt_fp4\"")],
            format!("{p}.quantization"),
            "FP4 tensor cores",
        ),
        (
            quick,
            vec![format!("{p}.quantization=\"nvfp4\"")],
            format!("{p}.quantization"),
            "modelopt_fp4",
        ),
        (
            nvl,
            vec![format!("{p}.offload_group_size=0")],
            format!("{p}.offload_group_size"),
            "1..=4096",
        ),
        (
            nvl,
            vec![format!("{p}.offload_num_in_group=3")],
            format!("{p}.offload_num_in_group"),
            "Must be <= offload_group_size",
        ),
        (
            nvl,
            vec![format!("{p}.offload_mode=\"shm_cpu\"")],
            format!("{p}.offload_mode"),
            "pdsim models \"cpu\"",
        ),
        (
            nvl,
            vec![format!("{p}.cpu_offload_gb=10")],
            format!("{p}.cpu_offload_gb"),
            "V2 offload does not support cpu_offload_gb yet",
        ),
        (
            quick,
            vec![format!("{p}.offload_group_size=2")],
            format!("{p}.offload_group_size"),
            "DeepSeek-architecture",
        ),
        (
            nvl,
            vec![format!("{p}.kv_cache_dtype=\"nvfp4\"")],
            format!("{p}.kv_cache_dtype"),
            "recipe-based FP4 KV cache (KV_CACHE_QUANT_REGISTRY",
        ),
        // sglang's FP4 KV cache where pdsim does not model it (docs/sglang-pd.md §29).
        (
            quick,
            vec![
                "hardware.gpu=\"mi300x\"".into(),
                format!("{p}.kv_cache_dtype=\"fp4_e2m1\""),
            ],
            format!("{p}.kv_cache_dtype"),
            "CUDA 12.8+ and PyTorch 2.8.0+ (server_args.py), and mi300x is a ROCm GPU",
        ),
        (
            "scenarios/guards/mamba-state-dtype-silent.toml",
            vec![format!("{p}.kv_cache_dtype=\"fp4_e2m1\"")],
            format!("{p}.kv_cache_dtype"),
            "has mamba or sliding-window layers",
        ),
        (
            "scenarios/production/speculative-decoding.toml",
            vec![format!("{p}.kv_cache_dtype=\"fp4_e2m1\"")],
            format!("{p}.kv_cache_dtype"),
            "not with speculative decoding",
        ),
        (
            quick,
            vec![format!("{p}.offload_prefetch_step=2")],
            format!("{p}.offload_prefetch_step"),
            "offload_group_size turns on",
        ),
    ];
    for (file, sets, key, hint) in cases {
        let e = pdsim::scenario::load(&repo().join(file), &sets).unwrap_err();
        assert_eq!(e.key, key, "{sets:?}: {e}");
        assert!(
            e.message.contains(hint),
            "{sets:?}: {e}\n  should say {hint:?}"
        );
    }
    // `cpu_offload_gb` works on any model: 2 GiB of an 8B model's layers leave each GPU.
    let ok =
        pdsim::scenario::load(&repo().join(quick), &[format!("{p}.cpu_offload_gb=2")]).unwrap();
    let o = ok.pools[0].offload.as_ref().unwrap();
    assert_eq!(o.bytes_per_forward(), 2.0 * f64::from(1u32 << 30));
}

/// `pools.server.enable_mixed_chunk` (sglang's `--enable-mixed-chunk`, issue 43): a value that
/// is not a boolean, a PD pool (whose servers never have both a decode and a prefill batch to
/// mix) and a typo are each exit 2 naming the key and what is valid.
#[test]
fn enable_mixed_chunk_names_itself_and_what_is_valid() {
    let colo = repo().join("scenarios/plan/colocated-8b.toml");
    let q = repo().join("scenarios/quickstart.toml");
    for (path, set, key, says) in [
        (
            &colo,
            "pools.servers.server.enable_mixed_chunk=\"yes\"",
            "pools.servers.server.enable_mixed_chunk",
            "expected a boolean",
        ),
        (
            &colo,
            "pools.servers.server.enable_mixed_chunk=1",
            "pools.servers.server.enable_mixed_chunk",
            "expected a boolean",
        ),
        (
            &q,
            "pools.decode.server.enable_mixed_chunk=true",
            "pools.decode.server.enable_mixed_chunk",
            "applies to role = \"colocated\" pools only",
        ),
        (
            &q,
            "pools.prefill.server.enable_mixed_chunk=true",
            "pools.prefill.server.enable_mixed_chunk",
            "applies to role = \"colocated\" pools only",
        ),
        (
            &colo,
            "pools.servers.server.enable_mixed_chunks=true",
            "pools.servers.server.enable_mixed_chunks",
            "did you mean `enable_mixed_chunk`?",
        ),
    ] {
        let e = pdsim::scenario::load(path, &[set.into()]).unwrap_err();
        assert_eq!(e.key, key, "{e}");
        assert!(e.to_string().contains(says), "{set}: {e}");
    }
    // Off on a PD pool is what it is anyway: accepted.
    pdsim::scenario::load(&q, &["pools.decode.server.enable_mixed_chunk=false".into()]).unwrap();
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--set",
        "pools.prefill.server.enable_mixed_chunk=true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("pools.prefill.server.enable_mixed_chunk"),
        "{err}"
    );
}

/// Every `[slo]` key on inter-token gaps (and E2E per token) refuses what is not a positive
/// number of milliseconds the clock can hold — naming the key, what it bounds and the value —
/// and a typo gets the nearest key, as every other table does; `[expect]`'s bounds on them
/// too.
#[test]
fn gap_slo_keys_refuse_bad_values_by_name() {
    let q = repo().join("scenarios/quickstart.toml");
    let keys = [
        ("itl_p50_ms", "inter-token latency"),
        ("itl_p90_ms", "inter-token latency"),
        ("itl_p99_ms", "inter-token latency"),
        ("tbt_ms", "worst inter-token gap"),
        ("tbt_p50_ms", "worst inter-token gap"),
        ("tbt_p90_ms", "worst inter-token gap"),
        ("tbt_p99_ms", "worst inter-token gap"),
        ("e2e_per_token_ms", "end-to-end latency ÷ its output tokens"),
    ];
    for (key, meaning) in keys {
        for (value, fragment) in [
            ("-5", "must be a positive number of milliseconds"),
            ("0", "must be a positive number of milliseconds"),
            ("nan", "got NaN"),
            ("inf", "got inf"),
            ("1e13", "bound of 1e12 ms"),
            ("\"fast\"", "invalid type: string \"fast\", expected f64"),
            ("true", "invalid type: boolean `true`"),
        ] {
            let set = format!("slo.{key}={value}");
            let e = pdsim::scenario::load(&q, std::slice::from_ref(&set)).unwrap_err();
            assert_eq!(e.key, format!("slo.{key}"), "{set}: {e}");
            assert!(e.to_string().contains(fragment), "{set}: {e}");
            if fragment.starts_with("must be") {
                assert!(e.to_string().contains(meaning), "{set}: {e}");
            }
        }
        // A good value loads and lands in the checked [slo].
        let ok = pdsim::scenario::load(&q, &[format!("slo.{key}=25")]).unwrap();
        assert!(
            ok.slo.any() && ok.slo.on_gaps() != key.starts_with("e2e"),
            "{key}"
        );
    }
    for (typo, hint) in [
        ("slo.tbt_p95_ms=5", "did you mean `tbt_p99_ms`?"),
        ("slo.itl_p99=5", "did you mean `itl_p99_ms`?"),
        ("slo.tbt=5", "did you mean `tbt_ms`?"),
        ("slo.e2e_per_token=5", "did you mean `e2e_per_token_ms`?"),
        ("expect.tbt_p99_ms=5", "did you mean `tbt_p99_ms_max`?"),
        ("expect.itl_p99_max=5", "did you mean `itl_p99_ms_max`?"),
    ] {
        let e = pdsim::scenario::load(&q, &[typo.into()]).unwrap_err();
        assert!(e.to_string().contains(hint), "{typo}: {e}");
        assert_eq!(e.key, typo.split('=').next().unwrap(), "{typo}: {e}");
    }
    for bad in ["expect.tbt_p99_ms_max=-1", "expect.itl_p50_ms_max=nan"] {
        let e = pdsim::scenario::load(&q, &[bad.into()]).unwrap_err();
        assert_eq!(e.key, bad.split('=').next().unwrap(), "{bad}: {e}");
        assert!(e.to_string().contains("finite number ≥ 0"), "{bad}: {e}");
    }
}
