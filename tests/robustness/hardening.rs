//! Issue 15's reproducers: every input that once panicked, hung, aborted on allocation or gave a
//! silent wrong answer now ends in a clean exit with a message that names the file and the key
//! and says what is valid.

use crate::common;
use common::*;
use std::process::{Command, Stdio};

const QUICKSTART: &str = "scenarios/quickstart.toml";

/// Loads the quickstart with `sets` and returns the error it must be rejected with.
fn rejected(sets: &[&str]) -> pdsim::scenario::ScenarioError {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    match pdsim::scenario::load(&repo().join(QUICKSTART), &sets) {
        Ok(_) => panic!("{sets:?} loaded, but should be rejected"),
        Err(e) => e,
    }
}

fn os(args: &[&str]) -> Vec<std::ffi::OsString> {
    args.iter().map(std::ffi::OsString::from).collect()
}

fn pdsim_str(args: &[&str]) -> (i32, String, String) {
    let a = os(args);
    pdsim(&a.iter().map(|s| s.as_os_str()).collect::<Vec<_>>())
}

#[test]
fn every_bound_names_its_key_and_states_the_bound() {
    // (--set, key, fragment of the message)
    let clock = "bound of 1e9 s";
    let cases: &[(&[&str], &str, &str)] = &[
        // Item 1: durations past the u64-ns clock ("event scheduled in the past" before).
        (
            &["sglang.waiting_timeout_s=2e10"],
            "sglang.waiting_timeout_s",
            clock,
        ),
        (
            &["sglang.bootstrap_timeout_s=1.8e10"],
            "sglang.bootstrap_timeout_s",
            clock,
        ),
        (&["run.duration_s=1e12"], "run.duration_s", clock),
        (&["run.drain_timeout_s=1e10"], "run.drain_timeout_s", clock),
        (
            &["faults=[{kind=\"instance_crash\",pool=\"decode\",at_s=1e10}]"],
            "faults[0].at_s",
            clock,
        ),
        (
            &["faults=[{kind=\"instance_crash\",pool=\"decode\",at_s=1,restart_after_s=1e10}]"],
            "faults[0].restart_after_s",
            clock,
        ),
        (
            &["faults=[{kind=\"nic_flap\",nic=\"node0.nic0\",at_s=1,duration_s=1e10}]"],
            "faults[0].duration_s",
            clock,
        ),
        (
            &["workload.arrival={process=\"on_off\",rate_per_s=1,on_s=1e10,off_s=1}"],
            "workload.arrival.on_s",
            clock,
        ),
        (
            &["workload.arrival={process=\"on_off\",rate_per_s=1,on_s=1,off_s=1e10}"],
            "workload.arrival.off_s",
            clock,
        ),
        (
            &["workload.arrival={process=\"schedule\",steps=[{until_s=1e10,rate_per_s=1}]}"],
            "workload.arrival.steps",
            clock,
        ),
        (&["slo.ttft_ms=1e13"], "slo.ttft_ms", "bound of 1e12 ms"),
        // Item 2: a latency that wrapped silently.
        (
            &["fabric.base_latency_us=1.845e16"],
            "fabric.base_latency_us",
            "bound of 1e15 µs",
        ),
        // Item 3: sizes that aborted on allocation.
        (
            &["fabric.nics_per_node=4294967295"],
            "fabric.nics_per_node",
            "must be in 1..=64",
        ),
        (
            &["sglang.queue_size=4294967295"],
            "sglang.queue_size",
            "must be in 1..=4096",
        ),
        (
            &["pools.decode.instances=4294967295"],
            "pools.decode.instances",
            "above the bound of 65536 GPUs",
        ),
        (
            &["hardware.gpus_per_node=4294967295"],
            "hardware.gpus_per_node",
            "must be in 1..=1024",
        ),
        (
            &["hardware.hbm_gb=1e7"],
            "hardware.hbm_gb",
            "above the bound of 4096 GB",
        ),
        // Item 5: a gamma CV whose sampler never returned.
        (
            &["workload.arrival={process=\"gamma\",rate_per_s=5,cv=1e-160}"],
            "workload.arrival.cv",
            "must be in [1e-3, 1e3], got 1e-160",
        ),
        // Item 10: pools sharing GPUs; a node index whose check disagreed with its message.
        (
            &["pools.prefill.node=0", "pools.decode.node=0"],
            "pools.decode.node",
            "pools \"prefill\" and \"decode\" are both placed on GPU 0 of node 0",
        ),
        (
            &["pools.decode.node=4096"],
            "pools.decode.node",
            "below 4096 (0..=4095), got 4096",
        ),
    ];
    for (sets, key, fragment) in cases {
        let e = rejected(sets);
        let shown = e.to_string();
        assert!(
            shown.starts_with(QUICKSTART) || shown.contains("quickstart.toml"),
            "{shown}"
        );
        assert_eq!(e.key, *key, "{sets:?}: {shown}");
        assert!(
            shown.contains(fragment),
            "{sets:?}: {shown}\n  should contain {fragment:?}"
        );
    }
    // The largest accepted node index runs (the bound and its message agree).
    let sets = vec!["pools.decode.node=4095".to_string()];
    pdsim::scenario::load(&repo().join(QUICKSTART), &sets).unwrap();
}

#[test]
fn unified_instances_past_the_page_record_bound_are_rejected() {
    // Item 6: ~300 unified Qwen3-Next decode instances took 26 MB each.
    let sets = vec!["pools.decode.instances=300".to_string()];
    let e = pdsim::scenario::load(&repo().join("scenarios/pd/unified-healthy.toml"), &sets)
        .unwrap_err();
    assert_eq!(e.key, "pools.decode.instances", "{e}");
    assert!(e.to_string().contains("above the bound of 2 GiB"), "{e}");
}

#[test]
fn a_deep_set_key_is_an_error_not_a_stack_overflow() {
    // Item 7: 60,000 segments overflowed the stack.
    let key = vec!["a"; 60_000].join(".");
    let (code, _, err) = pdsim_str(&["run", QUICKSTART, "--set", &format!("{key}=1")]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("60000 dot-separated segments, above the bound of 32"),
        "{err}"
    );
}

#[test]
fn a_non_utf8_argument_is_a_usage_error() {
    // Item 8: exit 101 from std::env::args.
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"run.seed=\xff");
    let (code, _, err) = pdsim(&["run".as_ref(), QUICKSTART.as_ref(), "--set".as_ref(), bad]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid UTF-8"), "{err}");
    let path = std::ffi::OsStr::from_bytes(b"x\xff.toml");
    let (code, _, err) = pdsim(&["run".as_ref(), path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot read the scenario file"), "{err}");
}

#[test]
fn stdout_on_a_full_disk_is_io_and_a_closed_pipe_is_quiet() {
    // Item 9: both were exit 4 (a panic in println!).
    let dir = tmpdir("stdout-full");
    let out = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["run", QUICKSTART, "--set", "run.duration_s=1", "--out"])
        .arg(&dir)
        .current_dir(repo())
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("standard output: No space left on device"),
        "{err}"
    );

    // A reader that went away before the summary: exit 0, nothing on stderr.
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["run", QUICKSTART, "--set", "run.duration_s=1", "--out"])
        .arg(&dir)
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

#[test]
fn a_failed_write_names_the_file() {
    // Item 12: the error named the folder. The disk is "full" by RLIMIT_FSIZE (SIGXFSZ
    // ignored, so the write fails with EFBIG instead of killing the process); a link to
    // /dev/full did this before issue 40, which refuses links among the outputs.
    let dir = tmpdir("csv-full");
    let script = format!(
        "trap '' XFSZ; ulimit -f 8; exec {} run {QUICKSTART} --out {} -q",
        env!("CARGO_BIN_EXE_pdsim"),
        dir.display()
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .current_dir(repo())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains("File too large"),
        "{err}"
    );
    let named = [
        "requests.csv",
        "timeseries.csv",
        "links.csv",
        "summary.json",
        "run.json",
    ];
    assert!(named.iter().any(|f| err.contains(f)), "names a file: {err}");
}

/// Issue 40: a link planted as `DIR/summary.json` is refused by name (exit 2) and the file it
/// points to, outside the folder, is untouched.
#[test]
fn a_link_planted_among_the_outputs_is_refused_and_not_written_through() {
    let dir = tmpdir("planted-link");
    let victim_dir = tmpdir("planted-link-victim");
    let victim = victim_dir.join("secret.txt");
    std::fs::write(&victim, "keep me").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("summary.json")).unwrap();
    let (code, _, err) = pdsim_str(&["run", QUICKSTART, "--out", dir.to_str().unwrap(), "-q"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&dir.join("summary.json").display().to_string())
            && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

#[test]
fn a_run_with_no_arrivals_writes_csv_headers() {
    // Item 11: the csv crate only wrote a header with the first row.
    let dir = tmpdir("no-arrivals");
    let s = run(
        QUICKSTART,
        &[
            "run.duration_s=0.001",
            "workload.arrival={process=\"poisson\",rate_per_s=0.001}",
        ],
        &dir,
    );
    assert_eq!(s.requests.arrived, 0);
    for (file, first) in [
        ("requests.csv", "id,arrival_ns,"),
        ("timeseries.csv", "second,instance,pool,"),
        ("links.csv", "second,link,capacity_gbps,"),
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.starts_with(first), "{file}: {text:?}");
        assert_eq!(text.lines().count(), 1, "{file}: {text:?}");
    }
}

/// The shared model configs (beside the repository, as `spec::hf`'s tests use them).
fn model_dir() -> std::path::PathBuf {
    common::shared("models")
}

#[test]
fn model_configs_with_a_zero_size_are_rejected_naming_file_and_field() {
    // Item 4: num_key_value_heads = 0 divided by zero, num_hidden_layers = 0 indexed out of
    // bounds, hidden_size = 0 aborted; the other sizes were accepted.
    let dir = tmpdir("zero-fields");
    let configs = [
        "Llama-3.3-70B-Instruct.config.json",
        "Qwen3-Next-80B-A3B.config.json",
        "DeepSeek-V3.inference-config_671B.json",
        "Nemotron-H-8B-Base-8K.config.reconstructed.json",
    ];
    // Fields that may be 0 (counts of optional parts) or that pdsim does not read.
    let zero_ok = [
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "max_position_embeddings",
        "pretraining_tp",
        "rope_theta",
        "decoder_sparse_step",
        "shared_expert_intermediate_size",
        "n_dense_layers",
        "n_shared_experts",
        "n_expert_groups",
        "n_limited_groups",
        "q_lora_rank",
        "chunk_size",
        "expand",
        "num_logits_to_keep",
    ];
    let mut rejected_fields = 0;
    for name in configs {
        let text = std::fs::read_to_string(model_dir().join(name)).unwrap();
        let base: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
        for (field, v) in &base {
            // Qwen3-Next has no dense-MLP layer, so its intermediate_size is never read.
            let unread = name.starts_with("Qwen3-Next") && field == "intermediate_size";
            if !v.is_u64() || zero_ok.contains(&field.as_str()) || unread {
                continue;
            }
            let mut m = base.clone();
            m.insert(field.clone(), 0.into());
            let path = dir.join(format!("{field}-{name}"));
            std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
            let e = pdsim::spec::hf::load_model_config(&path)
                .map(|_| ())
                .expect_err(&format!("{name}: {field} = 0 accepted"));
            let shown = e.to_string();
            assert!(
                shown.contains(&path.display().to_string())
                    && shown.contains(&format!("`{field}`"))
                    && shown.contains("must be at least 1"),
                "{name}: {field} = 0: {shown}"
            );
            rejected_fields += 1;
        }
    }
    assert!(rejected_fields >= 40, "{rejected_fields} fields checked");
}
