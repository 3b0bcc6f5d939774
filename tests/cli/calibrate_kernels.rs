//! `pdsim calibrate --from-aiconfigurator` (issue 42): the shipped `kernels/` files are what the
//! command derives from AIConfigurator's database (`../shared/aiconfigurator/systems`), a
//! derived file named by `hardware.calibration` gives the run the built-in default gives, and
//! every bad input is exit 2 naming what is wrong and what would be valid.

use crate::common;

use common::{pdsim, repo, shared, tmpdir};

/// A derived file without its `#` header lines and its `source` line (which names the
/// installed package's version, unknown for a bare `systems` folder).
fn body(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("source "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shipped_tables_are_what_the_command_derives() {
    let systems = shared("aiconfigurator").join("systems");
    let dir = tmpdir("kernels-regen");
    // Each GPU at the newest sglang version AIConfigurator measured for it.
    for (gpu, version) in [("h100-sxm", "0.5.14"), ("a100-sxm", "0.5.10")] {
        let out = dir.join(format!("{gpu}.txt"));
        let (code, stdout, err) = pdsim(&[
            "calibrate",
            "--from-aiconfigurator",
            systems.to_str().unwrap(),
            "--gpu",
            gpu,
            "--sglang-version",
            version,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(
            stdout.contains("derived") && stdout.contains(&format!("sglang {version}")),
            "{stdout}"
        );
        let got = std::fs::read_to_string(&out).unwrap();
        let want = std::fs::read_to_string(repo().join(format!("kernels/{gpu}.txt"))).unwrap();
        assert!(
            got.contains("SPDX-License-Identifier: Apache-2.0"),
            "the licence line"
        );
        assert!(
            body(&got) == body(&want),
            "{gpu}: kernels/{gpu}.txt is not what the command derives"
        );
    }
    // The derived file as the calibration: the same bytes as the built-in default's run.
    let file = dir.join("h100-sxm.txt");
    let (a, b) = (dir.join("run-file"), dir.join("run-default"));
    let set = format!("hardware.calibration={}", file.display());
    for (out, sets) in [(&a, vec!["--set", set.as_str()]), (&b, vec![])] {
        let mut args = vec![
            "run",
            "scenarios/quickstart.toml",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(sets);
        let (code, _, err) = pdsim(&args);
        assert_eq!(code, 0, "{err}");
    }
    for f in ["requests.csv", "summary.json"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn bad_kernel_inputs_are_exit_2_naming_what_is_missing() {
    let systems = shared("aiconfigurator").join("systems");
    let s = systems.to_str().unwrap();
    let out_dir = tmpdir("kernels-bad");
    let out = out_dir.join("k.txt");
    let o = out.to_str().unwrap();
    let cases: [(Vec<&str>, &[&str]); 4] = [
        (
            vec![
                "--from-aiconfigurator",
                s,
                "--gpu",
                "h20",
                "--sglang-version",
                "0.5.14",
            ],
            &[
                "--gpu \"h20\"",
                "AIConfigurator measured no such GPU",
                "h100-sxm",
            ],
        ),
        (
            vec![
                "--from-aiconfigurator",
                s,
                "--gpu",
                "h100-sxm",
                "--sglang-version",
                "0.1.0",
            ],
            &["--sglang-version", "0.5.14"],
        ),
        (
            vec!["--from-aiconfigurator", s, "--gpu", "h100-sxm"],
            &["--sglang-version is required", "0.5.14"],
        ),
        (
            vec![
                "--from-aiconfigurator",
                "/nonexistent/systems",
                "--gpu",
                "h100-sxm",
                "--sglang-version",
                "0.5.14",
            ],
            &["/nonexistent/systems", "not a folder"],
        ),
    ];
    for (flags, says) in cases {
        let mut args = vec!["calibrate"];
        args.extend(flags.iter().copied());
        args.extend(["--out", o]);
        let (code, _, err) = pdsim(&args);
        assert_eq!(code, 2, "{flags:?}: {err}");
        for w in says {
            assert!(err.contains(w), "{flags:?}: {err}\n  should say {w:?}");
        }
        assert!(!out.exists(), "{flags:?} wrote a file");
    }
    // A kernel file for another GPU than the scenario's.
    let a100 = repo().join("kernels/a100-sxm.txt");
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--set",
        &format!("hardware.calibration={}", a100.display()),
        "--out",
        tmpdir("kernels-wrong-gpu").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hardware.calibration"), "{err}");
    assert!(
        err.contains("a100-sxm") && err.contains("h100-sxm"),
        "{err}"
    );
    // A file that is not a kernel table at all.
    let junk_dir = tmpdir("kernels-junk");
    let junk = junk_dir.join("junk.txt");
    std::fs::write(
        &junk,
        "pdsim-kernels 1\ngpu h100-sxm\ntable gemm\naxis m 1 x\n",
    )
    .unwrap();
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--set",
        &format!("hardware.calibration={}", junk.display()),
        "--out",
        tmpdir("kernels-junk-run").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("hardware.calibration") && err.contains("junk.txt"),
        "{err}"
    );
}

/// What the tables lack is said where the user looks: `run.json`'s `step_time_fallbacks` and
/// the report's configuration line, by pool — Qwen3-Next's routed experts (512 of width 512,
/// top-10) have no MoE table on H200, so both pools price them as one grouped GEMM; the
/// quickstart's dense model is fully tabled and says nothing.
#[test]
fn the_ops_the_tables_lack_are_named_in_run_json_and_the_report() {
    let dir = tmpdir("kernels-fallbacks");
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/pd/unified-healthy.toml",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    let lacking: Vec<&str> = run["step_time_fallbacks"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(lacking.len(), 2, "{lacking:?}");
    for (f, pool) in lacking.iter().zip(["prefill", "decode"]) {
        assert!(
            f.starts_with(&format!(
                "{pool}: routed experts (hidden 2048, inter 512, top-10 of 512"
            )) && f.contains("one grouped GEMM"),
            "{f}"
        );
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("Not in the tables, priced otherwise: prefill: routed experts"));
    let q = tmpdir("kernels-no-fallbacks");
    let (code, _, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "-q",
        "--out",
        q.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let run = std::fs::read_to_string(q.join("run.json")).unwrap();
    assert!(!run.contains("step_time_fallbacks"), "{run}");
}

/// DeepEP's dispatch and combine tables (`deepep`, docs/performance-model.md §7.10): each
/// shape from the newest version at or below the one asked, and an older version's table only
/// where it measures more nodes — on H100, 0.5.12's one-node tables of every shape and
/// 0.5.6.post2's one-to-eight-node tables of DeepSeek's (hidden 7,168, top-8), for both
/// kernels and both legs; on B200 (no multi-node measurement) one node only.
#[test]
fn deepep_tables_take_more_nodes_only_from_an_older_version() {
    let text =
        |gpu: &str| std::fs::read_to_string(repo().join(format!("kernels/{gpu}.txt"))).unwrap();
    // (the table line, its first axis line) of every `deepep` table.
    let tables = |t: &str| -> Vec<(String, String)> {
        let lines: Vec<&str> = t.lines().collect();
        (0..lines.len())
            .filter(|&i| lines[i].starts_with("table deepep "))
            .map(|i| (lines[i].to_string(), lines[i + 1].to_string()))
            .collect()
    };
    let h100 = tables(&text("h100-sxm"));
    let older: Vec<_> = h100
        .iter()
        .filter(|(t, _)| t.ends_with("version=0.5.6.post2"))
        .collect();
    assert_eq!(older.len(), 4, "{older:?}");
    for (t, nodes) in &older {
        assert!(t.contains("hidden=7168") && t.contains("topk=8"), "{t}");
        assert_eq!(nodes, "axis nodes 1 2 4 8", "{t}");
    }
    for kernel in ["ll", "normal"] {
        for leg in ["dispatch", "combine"] {
            let newest =
                format!("table deepep hidden=7168 kernel={kernel} leg={leg} topk=8 version=0.5.12");
            let found = h100.iter().find(|(t, _)| *t == newest);
            assert_eq!(
                found.map(|(_, a)| a.as_str()),
                Some("axis nodes 1"),
                "{newest}"
            );
        }
    }
    let b200 = tables(&text("b200"));
    assert!(!b200.is_empty());
    assert!(
        b200.iter()
            .all(|(t, a)| t.ends_with("version=0.5.12") && a == "axis nodes 1")
    );
}
