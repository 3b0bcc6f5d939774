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
//! What is taken from sglang's LWS example (`docs/references/multi_node_deployment/lws_pd/
//! lws-examples/{p,d,lb,p-svc}.yaml`, `docs/sglang-pd.md` §20): the pods run on the host's
//! network (`hostNetwork: true`, `dnsPolicy: ClusterFirstWithHostNet`, `hostIPC: true`),
//! privileged with `IPC_LOCK` (RDMA pins memory), with `/dev/infiniband` and a memory
//! `/dev/shm` mounted; each pod's GPUs are its `nvidia.com/gpu` limit (the example requests no
//! RDMA device resource: the privileged pod opens the host's devices); a Service per LWS on
//! its leaders; the router as a Deployment with a Service. On the host's network two servers
//! on one node need their own ports, so each pool is one LWS per port its instances have in
//! `launch.txt` (instances sharing a node there get the next port; the scheduler keeps pods
//! with the same host port on separate nodes), the port and bootstrap port of `launch.txt`,
//! and the router's URLs name each leader (`x-g.x`). Kubernetes assigns the GPUs: no
//! `--base-gpu-id`. The cluster's names pdsim cannot know are one ConfigMap
//! (`<app>-cluster`: `IB_DEVICES`, `IFNAME`), every server's `envFrom`, referred to as
//! `$(IB_DEVICES)`; the file's header lists what is left to fill in.
//!
//! Probes: the leader (or only) pod of an instance has a startup, readiness and liveness
//! probe on sglang's `/health` (`entrypoints/http_server.py`; with
//! `SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`, on by default in `environ.py`, it generates a
//! token, so it answers only when the server serves); a worker pod of a multi-node instance
//! serves no HTTP and has none, as in the example. The router has sgl-model-gateway's
//! `/readiness` and `/liveness` (`src/server.rs`, its public routes).
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
/// The port of the first server pod on a node (`launch::BASE_PORT`; a server sharing a node
/// in `launch.txt` gets the next one, and its LWS the same).
pub const SERVER_PORT: u32 = launch::BASE_PORT;

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
    /// A boolean (`privileged: true`).
    Bool(bool),
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
        Y::Bool(b) => Some(b.to_string()),
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

/// Reads back the subset of YAML [`to_yaml`] writes: block maps and sequences by
/// indentation, JSON-quoted strings, integers, `{}` and `[]`. Anything else is an error,
/// so a line the writer gets wrong fails here.
pub fn from_yaml(text: &str) -> Result<Y, String> {
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
        "true" => Ok(Y::Bool(true)),
        "false" => Ok(Y::Bool(false)),
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
                || ["{}", "[]", "true", "false"].contains(&rest)
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

/// The documents of a file of YAML documents [`to_yaml`] wrote, each after a `---` line
/// (comment lines before the first are the file's header).
pub fn documents(text: &str) -> Result<Vec<Y>, String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for l in text.lines() {
        if l == "---" {
            if let Some(d) = cur.take() {
                out.push(from_yaml(&d)?);
            }
            cur = Some(String::new());
        } else if let Some(d) = cur.as_mut() {
            d.push_str(l);
            d.push('\n');
        } else if !l.trim().is_empty() && !l.starts_with('#') {
            return Err(format!("a line before the first document: {l}"));
        }
    }
    if let Some(d) = cur {
        out.push(from_yaml(&d)?);
    }
    Ok(out)
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

/// The ports of one LWS: the HTTP port of its servers and, for a prefill, the bootstrap port.
#[derive(Clone, Copy, Debug)]
struct Ports {
    http: u32,
    bootstrap: u32,
}

/// An HTTP GET probe of `path` on `port`, every `period` s, allowed `failures` in a row, each
/// answer within `timeout` s.
fn http_probe(path: &str, port: u32, (period, timeout, failures): (i64, i64, i64)) -> Y {
    map(vec![
        (
            "httpGet",
            map(vec![("path", s(path)), ("port", Y::Int(port.into()))]),
        ),
        ("periodSeconds", Y::Int(period)),
        ("timeoutSeconds", Y::Int(timeout)),
        ("failureThreshold", Y::Int(failures)),
    ])
}

/// What a server container is: its name, its command, its role and ports, its GPUs, whether it
/// answers HTTP (the leader or only pod: probed), whether it is one pod of a multi-node group
/// (it gets its index), its environment and the ConfigMap of cluster names it reads.
struct ContainerSpec<'a> {
    name: &'a str,
    command: Vec<String>,
    role: Role,
    ports: Ports,
    gpus: u32,
    leader: bool,
    multi_node: bool,
    env: &'a [(&'a str, String)],
    config_map: Option<&'a str>,
}

/// One server container.
fn container(c: ContainerSpec) -> Y {
    let mut ports = vec![map(vec![
        ("name", s("http")),
        ("containerPort", Y::Int(c.ports.http.into())),
        ("protocol", s("TCP")),
    ])];
    if c.role == Role::Prefill {
        ports.push(map(vec![
            ("name", s("bootstrap")),
            ("containerPort", Y::Int(c.ports.bootstrap.into())),
            ("protocol", s("TCP")),
        ]));
    }
    let mut out = vec![
        ("name", s(c.name)),
        ("image", s(IMAGE)),
        (
            "command",
            Y::Seq(c.command.into_iter().map(Y::Str).collect()),
        ),
    ];
    if let Some(cm) = c.config_map {
        out.push((
            "envFrom",
            Y::Seq(vec![map(vec![(
                "configMapRef",
                map(vec![("name", s(cm))]),
            )])]),
        ));
    }
    let mut env = Vec::new();
    if c.multi_node {
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
    // What `launch.txt` prefixes the line with (`launch::server_env`).
    for (k, v) in c.env {
        env.push(map(vec![("name", s(*k)), ("value", s(v.clone()))]));
    }
    if !env.is_empty() {
        out.push(("env", Y::Seq(env)));
    }
    out.push(("ports", Y::Seq(ports)));
    if c.leader {
        // Loading a large model takes long: the startup probe allows an hour (120 × 30 s)
        // before the liveness probe may restart the group.
        out.push((
            "startupProbe",
            http_probe("/health", c.ports.http, (30, 30, 120)),
        ));
        out.push((
            "readinessProbe",
            http_probe("/health", c.ports.http, (30, 30, 3)),
        ));
        out.push((
            "livenessProbe",
            http_probe("/health", c.ports.http, (60, 60, 5)),
        ));
    }
    out.push((
        "resources",
        map(vec![(
            "limits",
            map(vec![("nvidia.com/gpu", s(c.gpus.to_string()))]),
        )]),
    ));
    out.push((
        "securityContext",
        map(vec![
            (
                "capabilities",
                map(vec![("add", Y::Seq(vec![s("IPC_LOCK")]))]),
            ),
            ("privileged", Y::Bool(true)),
        ]),
    ));
    out.push((
        "volumeMounts",
        Y::Seq(vec![
            map(vec![("name", s("dshm")), ("mountPath", s("/dev/shm"))]),
            map(vec![("name", s("ib")), ("mountPath", s("/dev/infiniband"))]),
        ]),
    ));
    map(out)
}

/// A pod template of LWS `lws`, on the host's network as sglang's example runs them.
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
                ("hostNetwork", Y::Bool(true)),
                ("hostIPC", Y::Bool(true)),
                ("dnsPolicy", s("ClusterFirstWithHostNet")),
                ("containers", Y::Seq(vec![container])),
                (
                    "volumes",
                    Y::Seq(vec![
                        map(vec![
                            ("name", s("dshm")),
                            ("emptyDir", map(vec![("medium", s("Memory"))])),
                        ]),
                        map(vec![
                            ("name", s("ib")),
                            ("hostPath", map(vec![("path", s("/dev/infiniband"))])),
                        ]),
                    ]),
                ),
            ]),
        ),
    ])
}

/// The cluster's names the server pods read: `launch::cluster_names` but the node host names
/// (Kubernetes' DNS gives them) and the Mooncake Store's (not in these manifests), and the RDMA
/// devices only where a pod names them (a PD server's `--disaggregation-ib-device`, NCCL's
/// devices across nodes).
fn pod_names(sc: &Scenario) -> Vec<launch::ClusterName> {
    let rdma = sc.fabric.transport == crate::fabric::Transport::Rdma;
    let devices = launch::is_pd(sc) || (launch::any_multi_node(sc) && rdma);
    launch::cluster_names(sc)
        .into_iter()
        .filter(|n| {
            !n.var.starts_with("NODE")
                && n.var != launch::STORE_SEGMENT_BYTES
                && (n.var != launch::IB_DEVICES || devices)
        })
        .collect()
}

/// The ConfigMap of the cluster's names the servers read ([`pod_names`]), empty values to
/// fill in; `None` when there are none.
fn cluster_config_map(sc: &Scenario, name: &str) -> Option<Y> {
    let names = pod_names(sc);
    if names.is_empty() {
        return None;
    }
    Some(map(vec![
        ("apiVersion", s("v1")),
        ("kind", s("ConfigMap")),
        ("metadata", map(vec![("name", s(name))])),
        (
            "data",
            Y::Map(names.into_iter().map(|n| (n.var, s(""))).collect()),
        ),
    ]))
}

/// The manifests of `sc` as Kubernetes objects, in order: the ConfigMap of cluster names (if
/// any), per pool one LeaderWorkerSet per port its instances use and a Service on its leaders,
/// the router's Deployment and its Service.
pub fn manifests(sc: &Scenario) -> (Vec<Y>, Vec<String>) {
    let mut notes = Vec::new();
    let app = dns(&sc.name, 30);
    let mut docs = Vec::new();
    let cm_name = format!("{app}-cluster");
    let cm = cluster_config_map(sc, &cm_name);
    let cm_ref = cm.as_ref().map(|_| cm_name.as_str());
    if let Some(c) = &cm {
        docs.push(c.clone());
    }
    let slots = launch::instance_slots(sc);
    let (mut prefill, mut decode, mut workers) = (Vec::new(), Vec::new(), Vec::new());
    let mut first = 0usize;
    for (i, pool) in sc.pools.iter().enumerate() {
        // Instances by the slot (port) launch.txt gives them: one LWS per slot.
        let mut groups: std::collections::BTreeMap<u32, u32> = Default::default();
        for (_, slot) in &slots[first..first + pool.instances as usize] {
            *groups.entry(*slot).or_default() += 1;
        }
        first += pool.instances as usize;
        let single = groups.len() == 1;
        for (k, (&slot, &replicas)) in groups.iter().enumerate() {
            let lws = if single {
                dns(&format!("{app}-{}", pool.name), 45)
            } else {
                dns(&format!("{app}-{}-{k}", pool.name), 45)
            };
            let ports = Ports {
                http: SERVER_PORT + slot,
                bootstrap: launch::BASE_BOOTSTRAP_PORT + slot,
            };
            docs.push(leader_worker_set(
                sc,
                (i, replicas),
                (&app, &lws, ports),
                cm_ref,
                &mut notes,
            ));
            docs.push(leader_service(&lws, pool.role, ports));
            for g in 0..replicas {
                let url = format!("http://{lws}-{g}.{lws}:{}", ports.http);
                match pool.role {
                    Role::Prefill => prefill.push(format!("{url} {}", ports.bootstrap)),
                    Role::Decode => decode.push(url),
                    Role::Colocated => workers.push(url),
                }
            }
        }
    }
    let router = format!("{app}-router");
    let line = launch::router_line(sc, &prefill, &decode, &workers, &mut notes);
    docs.push(router_deployment(&router, &line));
    docs.push(router_service(&router));
    if sc.kv_store.is_some() {
        notes.push("the Mooncake Store (mooncake_master and its store service) is not in these manifests: deploy it as launch.txt does and give the HiCache servers the MOONCAKE_* environment launch.txt gives them".into());
    }
    (docs, notes)
}

/// The Service on the leaders of LWS `lws` (sglang's `p-svc.yaml` / `d-svc.yaml`): one
/// address for the pool's instances on this port, for clients other than the router (which
/// names each leader). Selected by the labels LWS gives every pod (the leader's index is 0).
fn leader_service(lws: &str, role: Role, p: Ports) -> Y {
    let mut ports = vec![map(vec![
        ("name", s("http")),
        ("protocol", s("TCP")),
        ("port", Y::Int(p.http.into())),
        ("targetPort", Y::Int(p.http.into())),
    ])];
    if role == Role::Prefill {
        ports.push(map(vec![
            ("name", s("bootstrap")),
            ("protocol", s("TCP")),
            ("port", Y::Int(p.bootstrap.into())),
            ("targetPort", Y::Int(p.bootstrap.into())),
        ]));
    }
    map(vec![
        ("apiVersion", s("v1")),
        ("kind", s("Service")),
        ("metadata", map(vec![("name", s(format!("{lws}-leaders")))])),
        (
            "spec",
            map(vec![
                (
                    "selector",
                    map(vec![
                        ("leaderworkerset.sigs.k8s.io/name", s(lws)),
                        ("leaderworkerset.sigs.k8s.io/worker-index", s("0")),
                    ]),
                ),
                ("ports", Y::Seq(ports)),
            ]),
        ),
    ])
}

/// Pool `i`'s LeaderWorkerSet `lws` (part of `app`) of `replicas` instances on `ports`: a pod
/// per node an instance spans, each pod running the pool's launch line with its share of the
/// GPUs.
fn leader_worker_set(
    sc: &Scenario,
    (i, replicas): (usize, u32),
    (app, lws, ports): (&str, &str, Ports),
    config_map: Option<&str>,
    notes: &mut Vec<String>,
) -> Y {
    let pool = &sc.pools[i];
    // An instance's GPUs (`tp_size × pp_size`); one larger than a node takes whole nodes: one
    // pod per node.
    let tp = pool.server.gpus();
    let size = tp.div_ceil(sc.gpus_per_node).max(1);
    let per_pod = tp / size;
    let command = server_command(sc, i, size, ports, notes);
    let env = launch::server_env(sc, i, size > 1, launch::Vars::Kubernetes);
    let spec = |name: &'static str, leader: bool, command: Vec<String>| ContainerSpec {
        name,
        command,
        role: pool.role,
        ports,
        gpus: per_pod,
        leader,
        multi_node: size > 1,
        env: &env,
        config_map,
    };
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
                container(spec("sglang-leader", true, command.clone())),
            ),
        ));
    }
    template.push((
        "workerTemplate",
        pod(
            lws,
            &pool.name,
            pool.role,
            container(spec(
                if size > 1 { "sglang-worker" } else { "sglang" },
                size == 1,
                command,
            )),
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
                ("replicas", Y::Int(replicas.into())),
                ("startupPolicy", s("LeaderCreated")),
                ("networkConfig", map(vec![("subdomainPolicy", s("Shared"))])),
                ("leaderWorkerTemplate", map(template)),
            ]),
        ),
    ])
}

/// Pool `i`'s server command as words: its launch line on `ports`, and for an instance of
/// `size` > 1 pods the multi-node flags LWS fills in per pod (group size, worker index, the
/// leader's address for `--dist-init-addr`).
fn server_command(
    sc: &Scenario,
    i: usize,
    size: u32,
    ports: Ports,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let flags = launch::pool_flags(sc, i, notes);
    let line = launch::server_line(
        sc,
        i,
        &flags,
        (ports.http, None, ports.bootstrap),
        launch::Vars::Kubernetes,
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

/// The router's Deployment `router`: one replica running launch line `line`, probed on
/// sgl-model-gateway's `/readiness` (some worker of each kind is healthy) and `/liveness`.
fn router_deployment(router: &str, line: &str) -> Y {
    let port = launch::ROUTER_PORT;
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
                                        Y::Seq(vec![map(vec![
                                            ("name", s("http")),
                                            ("containerPort", Y::Int(port.into())),
                                            ("protocol", s("TCP")),
                                        ])]),
                                    ),
                                    (
                                        "readinessProbe",
                                        http_probe("/readiness", port, (10, 10, 3)),
                                    ),
                                    ("livenessProbe", http_probe("/liveness", port, (30, 10, 3))),
                                ])]),
                            )]),
                        ),
                    ]),
                ),
            ]),
        ),
    ])
}

/// The Service in front of the router's Deployment, on the router's port (a `ClusterIP`:
/// sglang's `lb.yaml` makes it a `NodePort` "easy to test"; expose it as the cluster does).
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
                        ("name", s("http")),
                        ("protocol", s("TCP")),
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
    let app = dns(&sc.name, 30);
    let names: Vec<String> = pod_names(sc)
        .into_iter()
        .map(|n| format!("#   {}: {}\n", n.var, n.what))
        .collect();
    let mut out = format!(
        "# Kubernetes manifests for scenario {:?} (pdsim {}), from the launch lines of launch.txt, laid out\n\
         # as sglang's LeaderWorkerSet example: per pool one LeaderWorkerSet per port (a replica is one sglang\n\
         # instance, one pod per node it spans, on the host's network with /dev/infiniband; needs the LWS\n\
         # controller, https://github.com/kubernetes-sigs/lws) and a Service on its leaders, the router as a\n\
         # Deployment with a Service on port {}. `kubectl apply -f k8s.yaml`.\n\
         # Placeholders left: {}.\n{}\
         # Yours to decide as well (nothing fails without it):\n\
         # - the image ({IMAGE}: pin a release);\n\
         # - where the weights come from: each pod downloads --model-path into its own cache unless you\n\
         #   mount one at /root/.cache/huggingface (sglang's example mounts a host path);\n\
         # - node affinity: pdsim placed {} nodes of {} GPUs, pools on nodes of their own; the scheduler\n\
         #   packs pods wherever their nvidia.com/gpu limits and host ports fit unless told otherwise.\n",
        sc.name,
        env!("CARGO_PKG_VERSION"),
        launch::ROUTER_PORT,
        if names.is_empty() {
            "none".to_string()
        } else {
            format!("the values of ConfigMap {app}-cluster (every server reads them)")
        },
        names.concat(),
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

    fn load(rel: &str) -> Scenario {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
        crate::scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    #[test]
    fn the_yaml_reads_back_as_the_tree_it_was_written_from() {
        let tricky = map(vec![
            ("a", s("yes")),
            ("t", Y::Bool(true)),
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
            from_yaml(&to_yaml(&tricky)).unwrap(),
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
                assert_eq!(&from_yaml(&text).unwrap(), d, "{rel}:\n{text}");
            }
        }
    }

    /// The file read back is its manifests, whatever the header says; the same scenario
    /// gives the same bytes.
    #[test]
    fn the_file_reads_back_as_its_manifests() {
        let sc = load("scenarios/moe/gb200-nvl72-fp4-decode.toml");
        let text = k8s_yaml(&sc);
        assert_eq!(documents(&text).unwrap(), manifests(&sc).0);
        assert_eq!(text, k8s_yaml(&sc));
        assert!(
            documents("kind: x\n---\n").is_err(),
            "a line before the first document"
        );
    }

    /// The header names the ConfigMap whose keys are exactly the variables the servers use
    /// (LWS's own aside), each with what to put there.
    #[test]
    fn the_config_map_holds_exactly_the_names_the_pods_use() {
        for rel in [
            "scenarios/quickstart.toml",
            "scenarios/moe/lmsys-prefill-ep32.toml",
            "scenarios/plan/colocated-8b.toml",
            "scenarios/store/decode-offload.toml",
        ] {
            let sc = load(rel);
            let text = k8s_yaml(&sc);
            let used: Vec<String> = crate::plan::launch::tests::referenced(&text, "$(", ')')
                .into_iter()
                .filter(|v| !v.starts_with("LWS_"))
                .collect();
            let docs = documents(&text).unwrap();
            let keys: Vec<String> = docs
                .iter()
                .find_map(|d| match d {
                    Y::Map(m) if m.contains(&("kind".into(), s("ConfigMap"))) => {
                        m.iter().find(|(k, _)| k == "data").map(|(_, v)| match v {
                            Y::Map(d) => d.iter().map(|(k, _)| k.clone()).collect(),
                            _ => Vec::new(),
                        })
                    }
                    _ => None,
                })
                .unwrap_or_default();
            assert_eq!(keys, used, "{rel}");
            for k in &keys {
                assert!(text.contains(&format!("#   {k}: ")), "{rel}: {k} explained");
            }
            assert_eq!(
                text.contains("# Placeholders left: none."),
                keys.is_empty(),
                "{rel}"
            );
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
        // The ConfigMap of cluster names first, then the prefill's LeaderWorkerSet.
        let Y::Map(lws) = &docs[1] else { panic!() };
        assert!(lws.contains(&("kind".to_string(), s("LeaderWorkerSet"))));
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
