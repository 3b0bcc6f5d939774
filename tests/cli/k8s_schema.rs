//! `k8s.yaml` against the schemas Kubernetes validates it with (issue 41 item 5): every object a
//! plan writes is checked against the LeaderWorkerSet CRD's `openAPIV3Schema` and the
//! Kubernetes OpenAPI definitions of the core objects, vendored under `tests/data/k8s/` (see
//! its README for where each comes from).
//!
//! The validator reads the OpenAPI v3 subset those schemas use: `$ref`, `allOf`, `anyOf`,
//! `oneOf`, `type`, `format: int-or-string` and `x-kubernetes-int-or-string`, `enum`,
//! `required`, `properties`, `additionalProperties`, `items`, `minimum`, `maximum`. A field a
//! schema does not declare is an error unless the schema keeps unknown fields
//! (`x-kubernetes-preserve-unknown-fields`) — what the API server does under `kubectl`'s
//! default `--validate=strict` (field validation `Strict`); a duplicate key is one too.
//! `pattern` and `format`s other than int-or-string are not checked (no regex crate).

use std::path::Path;

use pdsim::plan::k8s::{Y, documents};
use serde_json::Value;

use crate::common::{pdsim, repo, tmpdir};

/// The vendored schemas: the LWS CRD's and the core definitions (`components.schemas`).
struct Schemas {
    lws: Value,
    core: Value,
}

impl Schemas {
    fn load() -> Self {
        let read = |f: &str| -> Value {
            let p = repo().join("tests/data/k8s").join(f);
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
        };
        Self {
            lws: read("leaderworkerset.schema.json"),
            core: read("core.schema.json"),
        }
    }

    fn def(&self, name: &str) -> &Value {
        &self.core["components"]["schemas"][name]
    }

    fn resolve<'a>(&'a self, r: &str) -> &'a Value {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a $ref outside components: {r}"));
        let d = self.def(name);
        assert!(!d.is_null(), "{r} is not vendored");
        d
    }

    /// The errors of object `doc` (one document of `k8s.yaml`), each with its path.
    fn validate(&self, doc: &Y) -> Vec<String> {
        let field = |k: &str| match doc {
            Y::Map(m) => m.iter().find(|(key, _)| key == k).map(|(_, v)| v),
            _ => None,
        };
        let s = |v: Option<&Y>| match v {
            Some(Y::Str(t)) => t.clone(),
            _ => String::new(),
        };
        let (api, kind) = (s(field("apiVersion")), s(field("kind")));
        let schema = match (api.as_str(), kind.as_str()) {
            ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet") => &self.lws,
            ("apps/v1", "Deployment") => self.def("io.k8s.api.apps.v1.Deployment"),
            ("v1", "Service") => self.def("io.k8s.api.core.v1.Service"),
            ("v1", "ConfigMap") => self.def("io.k8s.api.core.v1.ConfigMap"),
            other => return vec![format!("no schema for {other:?}")],
        };
        let mut errs = Vec::new();
        self.check(schema, doc, &kind, &mut errs);
        // The API server checks every object's metadata as ObjectMeta (the CRD's top-level
        // `metadata` is a bare object); a name is required to create one.
        match field("metadata") {
            Some(m) => {
                let om = self.def("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta");
                self.check(om, m, &format!("{kind}.metadata"), &mut errs);
                if !matches!(m, Y::Map(e) if e.iter().any(|(k, _)| k == "name")) {
                    errs.push(format!("{kind}.metadata: no name"));
                }
            }
            None => errs.push(format!("{kind}: no metadata")),
        }
        errs
    }

    fn check(&self, schema: &Value, v: &Y, path: &str, errs: &mut Vec<String>) {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            self.check(self.resolve(r), v, path, errs);
        }
        for sub in schema["allOf"].as_array().into_iter().flatten() {
            self.check(sub, v, path, errs);
        }
        let passes = |sub: &Value| {
            let mut e = Vec::new();
            self.check(sub, v, path, &mut e);
            e.is_empty()
        };
        if let Some(any) = schema["anyOf"].as_array()
            && !any.iter().any(passes)
        {
            errs.push(format!("{path}: matches none of anyOf {any:?}"));
        }
        if let Some(one) = schema["oneOf"].as_array()
            && one.iter().filter(|s| passes(s)).count() != 1
        {
            errs.push(format!("{path}: matches not exactly one of oneOf"));
        }
        let int_or_string = schema["x-kubernetes-int-or-string"] == Value::Bool(true)
            || schema["format"] == "int-or-string";
        if int_or_string {
            if !matches!(v, Y::Int(_) | Y::Str(_)) {
                errs.push(format!(
                    "{path}: an integer or a string expected, got {v:?}"
                ));
            }
            return;
        }
        if let Some(t) = schema["type"].as_str() {
            let ok = matches!(
                (t, v),
                ("object", Y::Map(_))
                    | ("array", Y::Seq(_))
                    | ("string", Y::Str(_))
                    | ("integer", Y::Int(_))
                    | ("number", Y::Int(_))
                    | ("boolean", Y::Bool(_))
            );
            if !ok {
                errs.push(format!("{path}: type {t} expected, got {v:?}"));
                return;
            }
        }
        if let Some(e) = schema["enum"].as_array() {
            let as_json = match v {
                Y::Str(s) => Value::from(s.clone()),
                Y::Int(i) => Value::from(*i),
                Y::Bool(b) => Value::from(*b),
                _ => Value::Null,
            };
            if !e.contains(&as_json) {
                errs.push(format!("{path}: {as_json} is not one of {e:?}"));
            }
        }
        if let Y::Int(i) = v {
            if let Some(min) = schema["minimum"].as_i64()
                && *i < min
            {
                errs.push(format!("{path}: {i} < minimum {min}"));
            }
            if let Some(max) = schema["maximum"].as_i64()
                && *i > max
            {
                errs.push(format!("{path}: {i} > maximum {max}"));
            }
        }
        match v {
            Y::Map(entries) => {
                for r in schema["required"].as_array().into_iter().flatten() {
                    let r = r.as_str().unwrap();
                    if !entries.iter().any(|(k, _)| k == r) {
                        errs.push(format!("{path}: required field {r} missing"));
                    }
                }
                let props = schema["properties"].as_object();
                let extra = schema.get("additionalProperties");
                let keep = schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true);
                let mut seen = std::collections::BTreeSet::new();
                for (k, val) in entries {
                    if !seen.insert(k.as_str()) {
                        errs.push(format!("{path}: duplicate field {k}"));
                    }
                    let p = format!("{path}.{k}");
                    match (props.and_then(|m| m.get(k)), extra) {
                        (Some(s), _) => self.check(s, val, &p, errs),
                        (None, Some(s)) if s.is_object() => self.check(s, val, &p, errs),
                        (None, Some(Value::Bool(true))) => {}
                        _ if keep => {}
                        // An object schema without properties (`type: object` alone) says
                        // nothing of its fields; one with properties names them all.
                        _ if props.is_none() && extra.is_none() => {}
                        _ => errs.push(format!("{p}: unknown field")),
                    }
                }
            }
            Y::Seq(items) => {
                if let Some(s) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(s, item, &format!("{path}[{i}]"), errs);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every document of the `k8s.yaml` text `yaml` passes; returns the documents.
fn assert_valid(schemas: &Schemas, yaml: &str, what: &str) -> Vec<Y> {
    let docs = documents(yaml).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(!docs.is_empty(), "{what}: no documents");
    for d in &docs {
        let errs = schemas.validate(d);
        assert!(
            errs.is_empty(),
            "{what}: {}\n{}",
            errs.join("\n"),
            pdsim::plan::k8s::to_yaml(d)
        );
    }
    docs
}

fn kinds(docs: &[Y]) -> Vec<String> {
    docs.iter()
        .map(|d| match d {
            Y::Map(m) => match m.iter().find(|(k, _)| k == "kind") {
                Some((_, Y::Str(k))) => k.clone(),
                _ => String::new(),
            },
            _ => String::new(),
        })
        .collect()
}

fn plan(dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["plan"];
    all.extend(args);
    all.extend(["--out", dir.to_str().unwrap(), "-q"]);
    let (code, out, err) = pdsim(&all);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::read_to_string(dir.join("k8s.yaml")).unwrap()
}

/// The 70B PD plan and a DeepSeek-V3 plan with a DP-attention + EP decode across two nodes:
/// every object they write passes the schemas.
#[test]
fn plans_write_manifests_the_schemas_accept() {
    let schemas = Schemas::load();
    let d = tmpdir("k8s-schema");
    let yaml = plan(
        &d.join("70b"),
        &[
            "scenarios/plan/llama70b-azure-conv.toml",
            "--rate",
            "20",
            "--set",
            "hardware.calibration=sglang-2025",
            "--vary",
            "pools.prefill.instances=1,2,3,4",
            "--vary",
            "pools.decode.instances=1,2,3,4",
            "--vary",
            "pools.prefill.server.tp_size=4,8",
            "--vary",
            "pools.decode.server.tp_size=4,8",
        ],
    );
    let docs = assert_valid(&schemas, &yaml, "70B");
    let k = kinds(&docs);
    assert_eq!(k[0], "ConfigMap");
    assert!(
        k.iter().filter(|k| *k == "LeaderWorkerSet").count() >= 2,
        "{k:?}"
    );
    assert_eq!(&k[k.len() - 2..], ["Deployment", "Service"]);
    let yaml = plan(
        &d.join("dsv3"),
        &[
            "scenarios/moe/mtp-deepep-two-nodes.toml",
            "--rate",
            "2",
            "--seeds",
            "1",
            "--set",
            "run.duration_s=10",
            "--set",
            "slo.ttft_p99_ms=100000",
            "--set",
            "slo.tpot_p99_ms=10000",
            "--vary",
            "pools.decode.server.tp_size,pools.decode.server.dp_size,pools.decode.server.ep_size=(16,16,16)",
        ],
    );
    let docs = assert_valid(&schemas, &yaml, "DeepSeek-V3 EP16");
    // The decode is one instance of two pods: a leader and a worker template, the group's
    // size 2, NCCL's interface and devices from the ConfigMap.
    assert!(yaml.contains("    size: 2\n"), "{yaml}");
    assert!(yaml.contains("leaderTemplate:") && yaml.contains("\"--enable-dp-attention\""));
    assert!(
        yaml.contains("IFNAME: \"\"") && yaml.contains("\"=$(IFNAME)\""),
        "{yaml}"
    );
    assert!(kinds(&docs).contains(&"LeaderWorkerSet".to_string()));
}

/// The library's manifests of the repository's deployment scenarios pass too: TP spanning
/// nodes, MNNVL racks, colocated servers, a Mooncake Store.
#[test]
fn every_deployment_scenarios_manifests_pass() {
    let schemas = Schemas::load();
    for rel in [
        "scenarios/quickstart.toml",
        "scenarios/moe/lmsys-prefill-ep32.toml",
        "scenarios/moe/gb200-nvl72-fp4-decode.toml",
        "scenarios/plan/colocated-8b.toml",
        "scenarios/placement/same-node-nvlink.toml",
        "scenarios/store/decode-offload.toml",
    ] {
        let sc = pdsim::scenario::load(&repo().join(rel), &[]).unwrap();
        assert_valid(&schemas, &pdsim::plan::k8s::k8s_yaml(&sc), rel);
    }
}

/// The check can fail: a required field dropped, a field misspelt, a wrong type, a value out
/// of an enum — each is caught, and named.
#[test]
fn the_schema_check_catches_a_broken_manifest() {
    let schemas = Schemas::load();
    let sc =
        pdsim::scenario::load(&repo().join("scenarios/moe/lmsys-prefill-ep32.toml"), &[]).unwrap();
    let good = pdsim::plan::k8s::k8s_yaml(&sc);
    assert_valid(&schemas, &good, "as written");
    let broken = |from: &str, to: &str| -> Vec<String> {
        assert!(good.contains(from), "{from}");
        let text = good.replacen(from, to, 1);
        documents(&text)
            .unwrap()
            .iter()
            .flat_map(|d| schemas.validate(d))
            .collect()
    };
    let has = |errs: &[String], want: &str| errs.iter().any(|e| e.contains(want));
    // LWS: the group's size renamed (misspelt), its containers' image field misspelt.
    let e = broken("    size: 4\n", "    sise: 4\n");
    assert!(has(&e, "leaderWorkerTemplate.sise: unknown field"), "{e:?}");
    let e = broken("image: \"", "imagee: \"");
    assert!(has(&e, "imagee: unknown field"), "{e:?}");
    // A container without its name (required by the PodSpec schema).
    let e = broken("- name: \"sglang-leader\"\n", "- ");
    assert!(has(&e, "required field name missing"), "{e:?}");
    // A wrong type and an enum the CRD does not allow.
    let e = broken("  replicas: ", "  replicas: \"x\"\n  r: ");
    assert!(has(&e, "type integer expected"), "{e:?}");
    let e = broken("subdomainPolicy: \"Shared\"", "subdomainPolicy: \"Shard\"");
    assert!(has(&e, "is not one of"), "{e:?}");
    // The router's Deployment without its selector (required by DeploymentSpec), a Service
    // port without its port.
    let e = broken(
        "  selector:\n    matchLabels:",
        "  selectr:\n    matchLabels:",
    );
    assert!(
        has(&e, "required field selector missing") && has(&e, "selectr: unknown field"),
        "{e:?}"
    );
    let e = broken(
        "\"TCP\"\n      port: 8000\n      targetPort: 8000",
        "\"TCP\"\n      targetPort: 8000",
    );
    assert!(has(&e, "required field port missing"), "{e:?}");
    // hostNetwork as a string is a type error, not a boolean.
    let e = broken("hostNetwork: true", "hostNetwork: \"true\"");
    assert!(has(&e, "type boolean expected"), "{e:?}");
}
