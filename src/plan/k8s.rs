//! A plan's deployment on Kubernetes: `k8s.yaml` beside `launch.txt` (`pdsim plan`), one
//! LeaderWorkerSet per pool and the router as a Deployment with its Service, built from the
//! same launch lines (`plan::launch::server_line`, `router_line`).
//!
//! **Why LeaderWorkerSet.** It is the format sglang's own docs use for PD on Kubernetes
//! (`docs/sglang-pd.md` §20; `docs/references/multi_node_deployment/lws_pd/lws_pd_deploy.md` at
//! sgl-project/sglang 59e5475: one LWS for prefill, one for decode, the router `sglang_router.launch_router
//! --pd-disaggregation` as a Deployment): an LWS replica is one sglang instance, a group of
//! `size` pods — one per node the instance spans — started together and restarted together
//! (`RecreateGroupOnPodRestart`), the leader's address handed to the workers as
//! `$(LWS_LEADER_ADDRESS)` for `--dist-init-addr`. A plain Deployment or StatefulSet cannot
//! express an instance spanning nodes; LWS does, and for one-node instances it is a
//! StatefulSet-like set with stable pod names, which the router needs: with
//! `subdomainPolicy: Shared` the leader of replica `g` of LWS `x` answers at `x-g.x`, so the
//! router's `--prefill` / `--decode` URLs are known before anything runs.
//!
//! What changes from `launch.txt`: Kubernetes assigns the GPUs (`nvidia.com/gpu` limits; no
//! `--base-gpu-id`) and every pod has its own network namespace (every server on port 30000,
//! bootstrap port 8998). What pdsim cannot know is left to the operator and said in the
//! file's header: the image tag, the model volume, the RDMA devices Mooncake needs (sglang's
//! example runs `hostNetwork: true`, privileged, with `/dev/infiniband` mounted) and node
//! affinity (pdsim's placement puts pools on separate nodes; the scheduler does not unless
//! told).
//!
//! **Why YAML, written here.** kubectl takes JSON as well, but the sglang and LWS examples an
//! operator edits are YAML. No YAML crate is a dependency: the manifests are a small tree
//! ([`Y`]) written in block style with every string a JSON string literal (JSON's escapes
//! are a subset of YAML's double-quoted ones, so no value can be misread as a number, a
//! boolean or a comment); a test reads the file back with a parser of exactly that subset and
//! gets the tree again.

use std::fmt::Write as _;

use super::launch;
use crate::config::{Role, Scenario};

/// The sglang image the manifests name (pin a release tag for production).
pub const IMAGE: &str = "lmsysorg/sglang:latest";
/// Port of every server pod.
pub const SERVER_PORT: u32 = 30000;

/// A YAML value: maps keep their key order (Kubernetes readers expect `apiVersion`, `kind`,
/// `metadata`, `spec` first).
#[derive(Clone, Debug, PartialEq)]
pub enum Y {
    /// A mapping, in order.
    Map(Vec<(String, Y)>),
    /// A sequence.
    Seq(Vec<Y>),
    /// A string (always written quoted).
    Str(String),
    /// An integer.
    Int(i64),
}

fn map(entries: Vec<(&str, Y)>) -> Y {
    Y::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn s(v: impl Into<String>) -> Y {
    Y::Str(v.into())
}

/// A string as a JSON (and so YAML double-quoted) literal.
fn quoted(v: &str) -> String {
    serde_json::to_string(v).expect("a string serializes")
}

/// A key plain when it is a safe YAML plain scalar (letters, digits, `_./-`, not starting
/// with `-`), quoted otherwise.
fn key(k: &str) -> String {
    if !k.is_empty()
        && !k.starts_with('-')
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./-".contains(c))
    {
        k.to_string()
    } else {
        quoted(k)
    }
}

/// `v` in YAML block style at `indent` spaces.
pub fn to_yaml(v: &Y) -> String {
    let mut out = String::new();
    write_value(&mut out, v, 0);
    out
}

fn inline(v: &Y) -> Option<String> {
    match v {
        Y::Str(t) => Some(quoted(t)),
        Y::Int(i) => Some(i.to_string()),
        Y::Map(m) if m.is_empty() => Some("{}".into()),
        Y::Seq(q) if q.is_empty() => Some("[]".into()),
        _ => None,
    }
}

fn write_value(out: &mut String, v: &Y, indent: usize) {
    let pad = " ".repeat(indent);
    match v {
        Y::Map(m) if !m.is_empty() => {
            for (k, v) in m {
                match inline(v) {
                    Some(t) => {
                        let _ = writeln!(out, "{pad}{}: {t}", key(k));
                    }
                    None => {
                        let _ = writeln!(out, "{pad}{}:", key(k));
                        write_value(out, v, indent + 2);
                    }
                }
            }
        }
        Y::Seq(q) if !q.is_empty() => {
            for v in q {
                match inline(v) {
                    Some(t) => {
                        let _ = writeln!(out, "{pad}- {t}");
                    }
                    None => {
                        // The item's block at indent + 2, its first line after the dash.
                        let mut inner = String::new();
                        write_value(&mut inner, v, indent + 2);
                        let _ = write!(out, "{pad}- {}", &inner[indent + 2..]);
                    }
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", inline(other).expect("a scalar"));
        }
    }
}

/// The words of a launch line (`plan::launch` quotes with `'…'` and `'\''` only).
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quote, mut any, mut escaped) = (false, false, false);
    for c in line.chars() {
        match (quote, c) {
            (false, c) if escaped => {
                cur.push(c);
                escaped = false;
            }
            (true, '\'') => quote = false,
            (true, c) => cur.push(c),
            (false, '\'') => (quote, any) = (true, true),
            (false, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (false, '\\') => escaped = true,
            (false, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A DNS-1035 label from `name`: lowercase letters, digits and `-`, starting with a letter,
/// at most `max` characters.
fn dns(name: &str, max: usize) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out = out.trim_matches('-').to_string();
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "x-");
    }
    out.truncate(max);
    out.trim_end_matches('-').to_string()
}

/// One server container: its launch line's words as the command, its ports, its GPUs; the
/// leader (or the only pod) gets the readiness probe, the pods of a multi-node group their
/// index.
fn container(
    name: &str,
    command: Vec<String>,
    role: Role,
    gpus: u32,
    leader: bool,
    (multi_node, extra_env): (bool, &[(&str, &str)]),
) -> Y {
    let mut ports = vec![map(vec![("containerPort", Y::Int(SERVER_PORT.into()))])];
    if role == Role::Prefill {
        ports.push(map(vec![(
            "containerPort",
            Y::Int(launch::BASE_BOOTSTRAP_PORT.into()),
        )]));
    }
    let mut c = vec![
        ("name", s(name)),
        ("image", s(IMAGE)),
        ("command", Y::Seq(command.into_iter().map(Y::Str).collect())),
    ];
    let mut env = Vec::new();
    if multi_node {
        // `--node-rank $(LWS_WORKER_INDEX)`: LWS labels each pod with its index in the group
        // (sglang's LWS example passes it down the same way).
        env.push(map(vec![
            ("name", s("LWS_WORKER_INDEX")),
            (
                "valueFrom",
                map(vec![(
                    "fieldRef",
                    map(vec![(
                        "fieldPath",
                        s("metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"),
                    )]),
                )]),
            ),
        ]));
    }
    // What `launch.txt` prefixes the line with (`launch::server_env`: MNNVL on NVL72 racks).
    for (k, v) in extra_env {
        env.push(map(vec![("name", s(*k)), ("value", s(*v))]));
    }
    if !env.is_empty() {
        c.push(("env", Y::Seq(env)));
    }
    c.push(("ports", Y::Seq(ports)));
    if leader {
        c.push((
            "readinessProbe",
            map(vec![
                ("tcpSocket", map(vec![("port", Y::Int(SERVER_PORT.into()))])),
                ("periodSeconds", Y::Int(30)),
            ]),
        ));
    }
    c.push((
        "resources",
        map(vec![(
            "limits",
            map(vec![("nvidia.com/gpu", s(gpus.to_string()))]),
        )]),
    ));
    c.push((
        "volumeMounts",
        Y::Seq(vec![map(vec![
            ("name", s("dshm")),
            ("mountPath", s("/dev/shm")),
        ])]),
    ));
    map(c)
}

/// A pod template of LWS `lws`.
fn pod(lws: &str, pool: &str, role: Role, container: Y) -> Y {
    map(vec![
        (
            "metadata",
            map(vec![(
                "labels",
                map(vec![
                    ("app.kubernetes.io/name", s(lws)),
                    ("pdsim.io/pool", s(pool)),
                    ("pdsim.io/role", s(role.as_str())),
                ]),
            )]),
        ),
        (
            "spec",
            map(vec![
                ("containers", Y::Seq(vec![container])),
                (
                    "volumes",
                    Y::Seq(vec![map(vec![
                        ("name", s("dshm")),
                        ("emptyDir", map(vec![("medium", s("Memory"))])),
                    ])]),
                ),
            ]),
        ),
    ])
}

/// The manifests of `sc` as Kubernetes objects, in order: one LeaderWorkerSet per pool, the
/// router's Deployment and its Service.
pub fn manifests(sc: &Scenario) -> (Vec<Y>, Vec<String>) {
    let mut notes = Vec::new();
    let app = dns(&sc.name, 30);
    let mut docs = Vec::new();
    let (mut prefill, mut decode, mut workers) = (Vec::new(), Vec::new(), Vec::new());
    for (i, pool) in sc.pools.iter().enumerate() {
        let lws = dns(&format!("{app}-{}", pool.name), 45);
        docs.push(leader_worker_set(sc, i, &app, &lws, &mut notes));
        for g in 0..pool.instances {
            let url = format!("http://{lws}-{g}.{lws}:{SERVER_PORT}");
            match pool.role {
                Role::Prefill => prefill.push(format!("{url} {}", launch::BASE_BOOTSTRAP_PORT)),
                Role::Decode => decode.push(url),
                Role::Colocated => workers.push(url),
            }
        }
    }
    let router = format!("{app}-router");
    let line = launch::router_line(sc, &prefill, &decode, &workers, &mut notes);
    docs.push(router_deployment(&router, &line));
    docs.push(router_service(&router));
    if sc.kv_store.is_some() {
        notes.push("the Mooncake Store (mooncake_master and its store service) is not in these manifests: deploy it as launch.txt says and set MOONCAKE_MASTER in the prefill pods".into());
    }
    (docs, notes)
}

/// Pool `i`'s LeaderWorkerSet `lws` (part of `app`): a replica per instance, a pod per node
/// the instance spans, each pod running the pool's launch line with its share of the GPUs.
fn leader_worker_set(sc: &Scenario, i: usize, app: &str, lws: &str, notes: &mut Vec<String>) -> Y {
    let pool = &sc.pools[i];
    let tp = pool.server.tp_size;
    // An instance larger than a node takes whole nodes: one pod per node.
    let size = tp.div_ceil(sc.gpus_per_node).max(1);
    let per_pod = tp / size;
    let command = server_command(sc, i, size, notes);
    let env = launch::server_env(sc, i, size > 1);
    let mut template = vec![
        ("size", Y::Int(size.into())),
        ("restartPolicy", s("RecreateGroupOnPodRestart")),
    ];
    if size > 1 {
        template.push((
            "leaderTemplate",
            pod(
                lws,
                &pool.name,
                pool.role,
                container(
                    "sglang-leader",
                    command.clone(),
                    pool.role,
                    per_pod,
                    true,
                    (true, &env),
                ),
            ),
        ));
    }
    template.push((
        "workerTemplate",
        pod(
            lws,
            &pool.name,
            pool.role,
            container(
                if size > 1 { "sglang-worker" } else { "sglang" },
                command,
                pool.role,
                per_pod,
                size == 1,
                (size > 1, &env),
            ),
        ),
    ));
    map(vec![
        ("apiVersion", s("leaderworkerset.x-k8s.io/v1")),
        ("kind", s("LeaderWorkerSet")),
        (
            "metadata",
            map(vec![
                ("name", s(lws)),
                (
                    "labels",
                    map(vec![
                        ("app.kubernetes.io/part-of", s(app)),
                        ("pdsim.io/pool", s(pool.name.clone())),
                        ("pdsim.io/role", s(pool.role.as_str())),
                    ]),
                ),
            ]),
        ),
        (
            "spec",
            map(vec![
                ("replicas", Y::Int(pool.instances.into())),
                ("startupPolicy", s("LeaderCreated")),
                ("networkConfig", map(vec![("subdomainPolicy", s("Shared"))])),
                ("leaderWorkerTemplate", map(template)),
            ]),
        ),
    ])
}

/// Pool `i`'s server command as words: its launch line on [`SERVER_PORT`], and for an
/// instance of `size` > 1 pods the multi-node flags LWS fills in per pod (group size, worker
/// index, the leader's address for `--dist-init-addr`).
fn server_command(sc: &Scenario, i: usize, size: u32, notes: &mut Vec<String>) -> Vec<String> {
    let flags = launch::pool_flags(sc, i, notes);
    let line = launch::server_line(
        sc,
        i,
        &flags,
        (SERVER_PORT, None, launch::BASE_BOOTSTRAP_PORT),
        notes,
    );
    let mut command = words(&line);
    if size > 1 {
        command.extend(
            [
                "--nnodes",
                "$(LWS_GROUP_SIZE)",
                "--node-rank",
                "$(LWS_WORKER_INDEX)",
                "--dist-init-addr",
            ]
            .map(String::from),
        );
        command.push(format!("$(LWS_LEADER_ADDRESS):{}", launch::DIST_INIT_PORT));
    }
    command
}

/// The pod labels that tie the router's Deployment to its Service.
fn router_labels(router: &str) -> Y {
    map(vec![("app.kubernetes.io/name", s(router))])
}

/// The router's Deployment `router`: one replica running launch line `line`.
fn router_deployment(router: &str, line: &str) -> Y {
    map(vec![
        ("apiVersion", s("apps/v1")),
        ("kind", s("Deployment")),
        ("metadata", map(vec![("name", s(router))])),
        (
            "spec",
            map(vec![
                ("replicas", Y::Int(1)),
                (
                    "selector",
                    map(vec![("matchLabels", router_labels(router))]),
                ),
                (
                    "template",
                    map(vec![
                        ("metadata", map(vec![("labels", router_labels(router))])),
                        (
                            "spec",
                            map(vec![(
                                "containers",
                                Y::Seq(vec![map(vec![
                                    ("name", s("router")),
                                    ("image", s(IMAGE)),
                                    (
                                        "command",
                                        Y::Seq(words(line).into_iter().map(Y::Str).collect()),
                                    ),
                                    (
                                        "ports",
                                        Y::Seq(vec![map(vec![(
                                            "containerPort",
                                            Y::Int(launch::ROUTER_PORT.into()),
                                        )])]),
                                    ),
                                ])]),
                            )]),
                        ),
                    ]),
                ),
            ]),
        ),
    ])
}

/// The Service in front of the router's Deployment, on the router's port.
fn router_service(router: &str) -> Y {
    map(vec![
        ("apiVersion", s("v1")),
        ("kind", s("Service")),
        ("metadata", map(vec![("name", s(router))])),
        (
            "spec",
            map(vec![
                ("selector", router_labels(router)),
                (
                    "ports",
                    Y::Seq(vec![map(vec![
                        ("port", Y::Int(launch::ROUTER_PORT.into())),
                        ("targetPort", Y::Int(launch::ROUTER_PORT.into())),
                    ])]),
                ),
            ]),
        ),
    ])
}

/// `k8s.yaml` for `sc`: a header saying what to fill in, then the manifests as YAML
/// documents.
pub fn k8s_yaml(sc: &Scenario) -> String {
    let (docs, notes) = manifests(sc);
    let mut out = format!(
        "# Kubernetes manifests for scenario {:?} (pdsim {}), from the launch lines of launch.txt:\n\
         # one LeaderWorkerSet per pool (a replica is one sglang instance, one pod per node it spans;\n\
         # needs the LWS controller, https://github.com/kubernetes-sigs/lws) and the router as a\n\
         # Deployment with a Service on port {}. `kubectl apply -f k8s.yaml`. Fill in before applying:\n\
         # - the image ({IMAGE}: pin a release) and where the model weights come from (a volume or\n\
         #   the Hugging Face cache; --model-path is the model's id);\n\
         # - the RDMA devices Mooncake moves KV over: sglang's LWS example runs the pods with\n\
         #   hostNetwork: true, privileged, /dev/infiniband mounted and --disaggregation-ib-device;\n\
         # - node affinity: pdsim placed {} nodes of {} GPUs, pools on nodes of their own; the scheduler\n\
         #   packs pods wherever their nvidia.com/gpu limits fit unless told otherwise.\n",
        sc.name,
        env!("CARGO_PKG_VERSION"),
        launch::ROUTER_PORT,
        sc.placement.nodes,
        sc.gpus_per_node,
    );
    out += &launch::notes_block(notes, "#");
    for d in &docs {
        out += "---\n";
        out += &to_yaml(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back the subset of YAML [`to_yaml`] writes: block maps and sequences by
    /// indentation, JSON-quoted strings, integers, `{}` and `[]`. Anything else is an error,
    /// so a line the writer gets wrong fails here.
    fn parse(text: &str) -> Result<Y, String> {
        let lines: Vec<(usize, &str)> = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
            .collect();
        let mut i = 0;
        let v = block(&lines, &mut i, 0)?;
        if i != lines.len() {
            return Err(format!("line {i} not read: {:?}", lines[i]));
        }
        Ok(v)
    }

    fn scalar(t: &str) -> Result<Y, String> {
        match t {
            "{}" => Ok(Y::Map(Vec::new())),
            "[]" => Ok(Y::Seq(Vec::new())),
            t if t.starts_with('"') => serde_json::from_str::<String>(t)
                .map(Y::Str)
                .map_err(|e| format!("{t}: {e}")),
            t => t
                .parse::<i64>()
                .map(Y::Int)
                .map_err(|e| format!("{t}: {e}")),
        }
    }

    fn block(lines: &[(usize, &str)], i: &mut usize, indent: usize) -> Result<Y, String> {
        let Some(&(ind, first)) = lines.get(*i) else {
            return Err("a block expected".into());
        };
        if ind != indent {
            return Err(format!("indent {ind}, expected {indent}: {first}"));
        }
        if first.starts_with("- ") {
            let mut items = Vec::new();
            while let Some(&(ind, t)) = lines.get(*i) {
                if ind != indent || !t.starts_with("- ") {
                    break;
                }
                let rest = &t[2..];
                if rest.starts_with('"')
                    || rest.parse::<i64>().is_ok()
                    || rest == "{}"
                    || rest == "[]"
                {
                    items.push(scalar(rest)?);
                    *i += 1;
                } else {
                    // A map item: its first line after the dash, at indent + 2.
                    let mut owned: Vec<(usize, &str)> = lines.to_vec();
                    owned[*i] = (indent + 2, rest);
                    items.push(block(&owned, i, indent + 2)?);
                }
            }
            return Ok(Y::Seq(items));
        }
        let mut entries = Vec::new();
        while let Some(&(ind, t)) = lines.get(*i) {
            if ind != indent || t.starts_with("- ") {
                break;
            }
            let (k, rest) = if let Some(body) = t.strip_prefix('"') {
                let end = body.find("\":").ok_or(format!("bad key: {t}"))? + 2;
                (
                    serde_json::from_str::<String>(&t[..end]).map_err(|e| e.to_string())?,
                    &t[end + 1..],
                )
            } else {
                let (k, r) = t.split_once(':').ok_or(format!("no key: {t}"))?;
                (k.to_string(), r)
            };
            *i += 1;
            let v = match rest.strip_prefix(' ') {
                Some(r) => scalar(r)?,
                None if rest.is_empty() => block(lines, i, indent + 2)?,
                None => return Err(format!("bad entry: {t}")),
            };
            entries.push((k, v));
        }
        Ok(Y::Map(entries))
    }

    fn load(rel: &str) -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    #[test]
    fn the_yaml_reads_back_as_the_tree_it_was_written_from() {
        let tricky = map(vec![
            ("a", s("yes")),
            ("b", s("0x10 # not a comment: \"quoted\"\n'x'")),
            (
                "c",
                Y::Seq(vec![
                    Y::Int(-3),
                    s(""),
                    Y::Map(Vec::new()),
                    Y::Seq(Vec::new()),
                ]),
            ),
            (
                "nested seq",
                Y::Seq(vec![
                    Y::Seq(vec![s("x")]),
                    map(vec![("k", Y::Seq(vec![s("y")]))]),
                ]),
            ),
        ]);
        assert_eq!(
            parse(&to_yaml(&tricky)).unwrap(),
            tricky,
            "{}",
            to_yaml(&tricky)
        );
        for rel in [
            "scenarios/quickstart.toml",
            "scenarios/moe/lmsys-prefill-ep32.toml",
            "scenarios/plan/colocated-8b.toml",
        ] {
            let (docs, _) = manifests(&load(rel));
            for d in &docs {
                let text = to_yaml(d);
                assert_eq!(&parse(&text).unwrap(), d, "{rel}:\n{text}");
            }
        }
    }

    #[test]
    fn words_undo_the_launch_lines_quoting() {
        assert_eq!(words("a 'b c' 'it'\\''s' ''"), vec!["a", "b c", "it's", ""]);
    }

    #[test]
    fn an_instance_spanning_nodes_is_a_group_of_pods_one_per_node() {
        // LMSYS prefill: instances of 32 GPUs on 8-GPU nodes.
        let sc = load("scenarios/moe/lmsys-prefill-ep32.toml");
        let text = k8s_yaml(&sc);
        let (docs, _) = manifests(&sc);
        let Y::Map(lws) = &docs[0] else { panic!() };
        let spec = &lws.iter().find(|e| e.0 == "spec").unwrap().1;
        let text0 = to_yaml(spec);
        assert!(text0.contains("size: 4\n"), "{text0}");
        assert!(text0.contains("leaderTemplate:"), "{text0}");
        assert!(
            text0.contains("\"nvidia.com/gpu\"") || text0.contains("nvidia.com/gpu: \"8\""),
            "{text0}"
        );
        assert!(text.contains("- \"$(LWS_LEADER_ADDRESS):50000\""), "{text}");
        assert!(!text.contains("--base-gpu-id"), "{text}");
    }

    #[test]
    fn names_are_dns_labels() {
        assert_eq!(dns("Llama70B_azure conv", 63), "llama70b-azure-conv");
        assert_eq!(dns("70b", 63), "x-70b");
        assert_eq!(dns("abc-def", 4), "abc", "no trailing dash after the cut");
    }
}
