//! A plan's deployment on Slurm: `slurm.sh` beside `launch.txt` (`pdsim plan`), one batch
//! script that runs, on every node of its allocation, that node's lines of `launch.txt`.
//!
//! **Why one script, one task per node.** It is how sglang's own docs launch a server across
//! nodes on Slurm (`docs/references/multi_node_deployment/multi_node.md`, "Multi-Node Inference
//! on SLURM": `#SBATCH --nodes=N --ntasks-per-node=1 --gres=gpu:G`, the head node from
//! `scontrol show hostname "$SLURM_NODELIST" | head -n 1`, one `srun` task per node with
//! `--node-rank "$SLURM_NODEID"`). pdsim's node `N` is the allocation's `N`-th host in that
//! order, the order `SLURM_NODEID` counts in: the script sets `NODE0`, `NODE1`, … from
//! `scontrol show hostnames "$SLURM_JOB_NODELIST"` and each task runs the `case` branch of its
//! `SLURM_NODEID` — exactly the lines `launch.txt` puts under `# on nodeN:`, the router's on
//! node 0, each in the background, the task waiting for them. The branches are a shell
//! function handed to every task as text (`bash -c "$(declare -f …)"`): the batch script's own
//! file exists only on the first node.
//!
//! What is left to the user is said in the header: the partition and account (given on the
//! `sbatch` line, which overrides nothing in the file) and the cluster names `launch.txt`
//! declares but the allocation does not give (`IB_DEVICES`, `IFNAME`).

use std::fmt::Write as _;

use super::launch::{self, Launch};
use crate::config::Scenario;

/// A Slurm job name from the scenario's name: letters, digits, `-`, `_` and `.`.
fn job_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("pdsim-{clean}")
}

/// `slurm.sh` for `sc` ([`slurm_text`] of its [`launch::launch`]).
pub fn slurm_script(sc: &Scenario) -> String {
    slurm_text(sc, &launch::launch(sc))
}

/// `slurm.sh` for the deployment `l` of `sc`.
pub fn slurm_text(sc: &Scenario, l: &Launch) -> String {
    let nodes = sc.placement.nodes;
    let left: Vec<&str> = l
        .names
        .iter()
        .map(|n| n.var.as_str())
        .filter(|v| !v.starts_with("NODE"))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#!/bin/bash\n\
         # Slurm batch script for scenario {:?} (pdsim {}): the deployment of launch.txt on {nodes}\n\
         # node(s) of {} GPUs, one task per node running that node's lines of launch.txt (the\n\
         # router's on node0). pdsim's nodeN is the allocation's N-th host (`scontrol show hostnames`,\n\
         # the order SLURM_NODEID counts in, as sglang's Slurm example relies on).\n\
         # Submit from any folder: sbatch --partition=PARTITION --account=ACCOUNT slurm.sh\n\
         # Placeholders left: the partition and the account (on the sbatch line){}.",
        sc.name,
        env!("CARGO_PKG_VERSION"),
        sc.gpus_per_node,
        if left.is_empty() {
            String::new()
        } else {
            format!(", {} (below)", left.join(", "))
        }
    );
    let _ = writeln!(
        out,
        "#SBATCH --job-name={}\n#SBATCH --nodes={nodes}\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:{}\n#SBATCH --exclusive\n#SBATCH --output=slurm-%x-%j.out",
        job_name(&sc.name),
        sc.gpus_per_node
    );
    out += "set -euo pipefail\n";
    let rest: Vec<launch::ClusterName> = l
        .names
        .iter()
        .filter(|n| !n.var.starts_with("NODE"))
        .cloned()
        .collect();
    if !rest.is_empty() {
        out += "\n# The cluster's own names the allocation does not give: fill them in once.\n";
        for n in &rest {
            let _ = writeln!(out, "export {}= # {}", n.var, n.what);
        }
    }
    let _ = writeln!(
        out,
        "\n# pdsim's nodeN is the allocation's N-th host.\n\
         mapfile -t HOSTS < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n\
         if [ \"${{#HOSTS[@]}}\" -ne {nodes} ]; then\n\
         \x20 echo \"slurm.sh: the plan runs on {nodes} node(s), the allocation has ${{#HOSTS[@]}}\" >&2\n\
         \x20 exit 1\n\
         fi"
    );
    for n in 0..nodes {
        let _ = writeln!(out, "export {}=\"${{HOSTS[{n}]}}\"", launch::node_var(n));
    }
    // Each node's commands in launch.txt's order: the Mooncake Store's, the pools', then the
    // router's.
    let mut by_node: Vec<Vec<&str>> = vec![Vec::new(); nodes as usize];
    for (_, lines) in l.store.iter().chain(&l.pools) {
        for nl in lines {
            by_node[nl.node as usize].push(&nl.line);
        }
    }
    by_node[l.router.node as usize].push(&l.router.line);
    out += "\n# Every node's lines of launch.txt, chosen by SLURM_NODEID; the task waits for its servers.\nrun_node() {\n  case \"$SLURM_NODEID\" in\n";
    for (n, lines) in by_node.iter().enumerate() {
        let _ = writeln!(out, "    {n})");
        for line in lines {
            let _ = writeln!(out, "      {line} &");
        }
        out += "      ;;\n";
    }
    out += "  esac\n  wait\n}\n";
    let _ = writeln!(
        out,
        "\nsrun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 bash -c \"$(declare -f run_node); run_node\""
    );
    out
}

/// The commands of each node's branch of `slurm.sh`, by node (the trailing ` &` dropped).
pub fn node_sections(text: &str) -> std::collections::BTreeMap<u32, Vec<String>> {
    let mut out: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    let mut node = None;
    for l in text.lines() {
        let t = l.trim();
        if let Some(n) = t.strip_suffix(')').and_then(|n| n.parse::<u32>().ok()) {
            node = Some(n);
            out.entry(n).or_default();
        } else if t == ";;" {
            node = None;
        } else if let Some(n) = node {
            out.entry(n)
                .or_default()
                .push(t.strip_suffix(" &").unwrap_or(t).to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(rel: &str) -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    /// `bash -n` parses the script and the function every task runs.
    fn bash_n(text: &str) {
        let dir = std::env::temp_dir().join(format!("pdsim-slurm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{:x}.sh", text.len()));
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "bash -n: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Each node's branch carries exactly the lines `launch.txt` puts on that node, in its
    /// order, and the script parses.
    #[test]
    fn each_nodes_branch_is_its_lines_of_launch_txt() {
        for rel in [
            "scenarios/quickstart.toml",
            "scenarios/placement/same-node-nvlink.toml",
            "scenarios/moe/lmsys-prefill-ep32.toml",
            "scenarios/plan/colocated-8b.toml",
            "scenarios/store/decode-offload.toml",
        ] {
            let sc = load(rel);
            let text = slurm_script(&sc);
            bash_n(&text);
            let want = launch::node_lines(&launch::launch_text(&sc));
            let got = node_sections(&text);
            assert_eq!(got.len() as u32, sc.placement.nodes, "{rel}:\n{text}");
            for (n, lines) in &got {
                let w = want.get(n).cloned().unwrap_or_default();
                assert_eq!(lines, &w, "{rel}: node{n}");
            }
            assert!(text.contains(&format!("#SBATCH --nodes={}\n", sc.placement.nodes)));
            // The header lists exactly the names left: those the lines use that the script
            // does not set from its allocation.
            let listed: Vec<String> = text
                .lines()
                .find_map(|l| {
                    l.strip_prefix(
                        "# Placeholders left: the partition and the account (on the sbatch line)",
                    )
                })
                .unwrap()
                .trim_start_matches(", ")
                .trim_end_matches(" (below).")
                .trim_end_matches('.')
                .split(", ")
                .filter(|v| !v.is_empty())
                .map(String::from)
                .collect();
            let used: Vec<String> = crate::plan::launch::tests::referenced(&text, "${", '}')
                .into_iter()
                .filter(|v| {
                    !v.starts_with("NODE") && !v.starts_with("HOSTS") && v != "SLURM_JOB_NODELIST"
                })
                .collect();
            assert_eq!(listed, used, "{rel}");
        }
    }

    #[test]
    fn job_names_are_plain() {
        assert_eq!(job_name("llama 70B/azure"), "pdsim-llama-70B-azure");
    }
}
