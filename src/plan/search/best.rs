//! `best.toml`: the answer of a plan as a scenario that runs as is from the output folder — the
//! user's own tables with the chosen values set and every relative path rewritten
//! ([`best_toml`], [`relative_to`]).

use crate::plan::error::PlanError;
use crate::plan::run::Base;

/// `best.toml`: the scenario with the chosen values and the rate set, every relative path
/// rewritten to be relative to `out_dir` (where the file is written), so it runs as is from
/// there. The chosen values are listed in a comment at the top and written in the tables.
pub fn best_toml(
    base: &Base,
    sets: &[String],
    out_dir: &std::path::Path,
    header: &str,
) -> Result<String, PlanError> {
    // The file as written, not the typed one: best.toml keeps the user's tables and values,
    // with only the chosen ones changed (raw TOML at the edge, where the file is written).
    let mut table: toml::Table = crate::scenario::parse_table(&base.text).map_err(|e| {
        PlanError::Scenario(crate::scenario::ScenarioError {
            file: base.path.clone(),
            line: None,
            key: String::new(),
            message: e.to_string(),
        })
    })?;
    for s in sets {
        crate::scenario::set::apply_set(&mut table, s).map_err(|e| PlanError::flag("--set", e))?;
    }
    let from = base.path.parent().unwrap_or(std::path::Path::new("."));
    rewrite_paths(&mut table, from, out_dir);
    let body = toml::to_string(&table).map_err(|e| PlanError::Io(format!("best.toml: {e}")))?;
    Ok(format!("{header}{body}"))
}

/// The keys whose values are paths relative to the scenario file.
fn is_path_key(path: &[&str]) -> bool {
    matches!(
        path,
        ["model", "config"]
            | ["pools", _, "model", "config"]
            | ["pools", _, "step_times"]
            | ["workload", "trace", "path"]
            | ["workload", "input_tokens", "path"]
            | ["workload", "output_tokens", "path"]
            | ["workload", "lengths", "path"]
            | ["hardware", "calibration_file"]
    )
}

fn rewrite_paths(table: &mut toml::Table, from: &std::path::Path, to: &std::path::Path) {
    fn walk(
        v: &mut toml::Value,
        path: &mut Vec<String>,
        from: &std::path::Path,
        to: &std::path::Path,
    ) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t.iter_mut() {
                    path.push(k.clone());
                    walk(v, path, from, to);
                    path.pop();
                }
            }
            toml::Value::Array(a) => {
                for v in a.iter_mut() {
                    path.push("_".into());
                    walk(v, path, from, to);
                    path.pop();
                }
            }
            toml::Value::String(s) => {
                let keys: Vec<&str> = path.iter().map(String::as_str).collect();
                // `hardware.calibration` is a preset name or a file: a path only if it names
                // one beside the scenario (a name is never rewritten).
                let calibration_file = keys == ["hardware", "calibration"]
                    && std::path::Path::new(s.as_str()).is_relative()
                    && from.join(s.as_str()).is_file();
                if (is_path_key(&keys) || calibration_file)
                    && std::path::Path::new(s.as_str()).is_relative()
                {
                    *s = relative_to(&from.join(s.as_str()), to)
                        .display()
                        .to_string();
                }
            }
            _ => {}
        }
    }
    let mut root = toml::Value::Table(std::mem::take(table));
    walk(&mut root, &mut Vec::new(), from, to);
    if let toml::Value::Table(t) = root {
        *table = t;
    }
}

/// `target` as a path relative to the folder `dir` (both made absolute first).
pub fn relative_to(target: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let abs = |p: &std::path::Path| {
        std::fs::canonicalize(p).unwrap_or_else(|_| {
            std::env::current_dir()
                .map(|c| c.join(p))
                .unwrap_or_else(|_| p.to_path_buf())
        })
    };
    let (t, d) = (abs(target), abs(dir));
    let tc: Vec<_> = t.components().collect();
    let dc: Vec<_> = d.components().collect();
    let common = tc.iter().zip(&dc).take_while(|(a, b)| a == b).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..dc.len() {
        out.push("..");
    }
    for c in &tc[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_and_descend() {
        let base = std::env::temp_dir().join(format!("pdsim-rel-{}", std::process::id()));
        std::fs::create_dir_all(base.join("a/b")).unwrap();
        std::fs::create_dir_all(base.join("c")).unwrap();
        std::fs::write(base.join("a/b/t.csv"), "x").unwrap();
        assert_eq!(
            relative_to(&base.join("a/b/t.csv"), &base.join("c")),
            std::path::PathBuf::from("../a/b/t.csv")
        );
    }
}
