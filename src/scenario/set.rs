//! `--set KEY=VALUE`: override any scenario key by its dotted path before validation.
//! Pools (and any array of tables with a `name`) are addressed by name:
//! `pools.decode.server.tp_size=8`.

use toml::{Table, Value};

/// Applies one `KEY=VALUE` assignment to the parsed scenario. VALUE is read as a TOML value
/// (`8`, `0.5`, `true`, `"x"`, `{ process = "poisson", rate_per_s = 4 }`); anything that is not
/// a TOML value is taken as a plain string, so `--set model.preset=llama-3.1-70b` works unquoted.
pub fn apply_set(root: &mut Table, assignment: &str) -> Result<(), String> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| format!("--set {assignment:?}: expected KEY=VALUE, e.g. run.seed=3"))?;
    let key = key.trim();
    let path: Vec<&str> = key.split('.').collect();
    // A deep key would build tables nested as deep, which serde and `Drop` walk recursively:
    // 60,000 levels overflow the stack. No scenario key is deeper than a handful of levels.
    let max = crate::config::limits::MAX_SET_KEY_SEGMENTS;
    if path.len() > max {
        return Err(format!(
            "--set {}…: the key has {} dot-separated segments, above the bound of {max} (the deepest scenario key, pools.<name>.server.<key>, has 4)",
            key.chars().take(40).collect::<String>(),
            path.len()
        ));
    }
    if path.iter().any(|s| s.is_empty()) {
        return Err(format!(
            "--set {key:?}: empty segment in the dotted key; write e.g. pools.decode.server.tp_size=8"
        ));
    }
    let value = parse_value(raw.trim());
    let (last, parents) = path
        .split_last()
        .expect("split yields at least one segment");
    let mut table = root;
    for (depth, seg) in parents.iter().enumerate() {
        let walked = path[..=depth].join(".");
        let entry = table
            .entry(seg.to_string())
            .or_insert_with(|| Value::Table(Table::new()));
        table = match entry {
            Value::Table(t) => t,
            Value::Array(items) => {
                let next = path.get(depth + 1).copied().unwrap_or_default();
                let names: Vec<String> = items
                    .iter()
                    .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
                    .collect();
                // Consume the element selector: a name, or a 0-based index.
                return select_in_array(items, next, &names, &walked).and_then(|t| {
                    let rest: Vec<&str> = path[depth + 2..].to_vec();
                    if rest.is_empty() {
                        return Err(format!(
                            "--set {key}: names a whole element of {walked}; name a key inside it"
                        ));
                    }
                    let mut sub = String::new();
                    sub.push_str(&rest.join("."));
                    sub.push('=');
                    sub.push_str(raw.trim());
                    apply_set(t, &sub)
                });
            }
            other => {
                return Err(format!(
                    "--set {key}: {walked} is a {}, not a table",
                    other.type_str()
                ));
            }
        };
    }
    table.insert(last.to_string(), value);
    Ok(())
}

fn select_in_array<'a>(
    items: &'a mut [Value],
    selector: &str,
    names: &[String],
    walked: &str,
) -> Result<&'a mut Table, String> {
    let index = match names.iter().position(|n| n == selector) {
        Some(i) => i,
        None => selector.parse::<usize>().map_err(|_| {
            format!(
                "--set: {walked} has no element named {selector:?}; valid names: {}",
                if names.is_empty() {
                    "(none)".to_string()
                } else {
                    names.join(", ")
                }
            )
        })?,
    };
    let len = items.len();
    match items.get_mut(index) {
        Some(Value::Table(t)) => Ok(t),
        Some(_) => Err(format!("--set: {walked}[{index}] is not a table")),
        None => Err(format!(
            "--set: {walked} has {len} element(s); index {index} is out of range"
        )),
    }
}

fn parse_value(raw: &str) -> Value {
    match toml::from_str::<Table>(&format!("v = {raw}")) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| Value::String(raw.to_string())),
        Err(_) => Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Table {
        toml::from_str(
            r#"
            [run]
            seed = 1
            [[pools]]
            name = "prefill"
            [pools.server]
            tp_size = 4
            [[pools]]
            name = "decode"
            [pools.server]
            tp_size = 4
            "#,
        )
        .unwrap()
    }

    #[test]
    fn sets_plain_and_pool_keys() {
        let mut t = doc();
        apply_set(&mut t, "run.seed=3").unwrap();
        apply_set(&mut t, "pools.decode.server.tp_size=8").unwrap();
        apply_set(&mut t, "model.preset=llama-3.1-70b").unwrap();
        assert_eq!(t["run"]["seed"].as_integer(), Some(3));
        assert_eq!(t["pools"][1]["server"]["tp_size"].as_integer(), Some(8));
        assert_eq!(t["pools"][0]["server"]["tp_size"].as_integer(), Some(4));
        assert_eq!(t["model"]["preset"].as_str(), Some("llama-3.1-70b"));
    }

    #[test]
    fn inline_tables_and_indices() {
        let mut t = doc();
        apply_set(
            &mut t,
            "workload.arrival={ process = \"poisson\", rate_per_s = 2.5 }",
        )
        .unwrap();
        assert_eq!(t["workload"]["arrival"]["rate_per_s"].as_float(), Some(2.5));
        apply_set(&mut t, "pools.0.instances=3").unwrap();
        assert_eq!(t["pools"][0]["instances"].as_integer(), Some(3));
    }

    #[test]
    fn bad_assignments_say_what_is_valid() {
        let mut t = doc();
        let e = apply_set(&mut t, "pools.mystery.instances=2").unwrap_err();
        assert!(e.contains("prefill, decode"), "{e}");
        assert!(
            apply_set(&mut t, "run.seed")
                .unwrap_err()
                .contains("KEY=VALUE")
        );
        assert!(
            apply_set(&mut t, "run..seed=1")
                .unwrap_err()
                .contains("empty segment")
        );
        assert!(
            apply_set(&mut t, "run.seed.x=1")
                .unwrap_err()
                .contains("not a table")
        );
    }
}
