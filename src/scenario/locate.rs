//! Finds the line of a dotted key in a scenario's text, so that a validation error can point at
//! it. A small line scanner over TOML's table headers: enough for the keys a scenario has
//! (`[table]`, `[[array]]` elements named by `name = "..."`, `key = value` and inline tables).

/// 1-based line of `key_path` (as `pools.decode.server.tp_size` or `workload.arrival.rate_per_s`)
/// in `text`, or of the closest enclosing key or table that exists. `None` when nothing matches.
pub fn line_of(text: &str, key_path: &str) -> Option<usize> {
    let want: Vec<&str> = key_path.split('.').collect();
    let mut header: Vec<String> = Vec::new();
    // For `[[pools]]` elements: the element's name, so `pools.decode` resolves.
    let mut element_name: Option<String> = None;
    // Whether the current header is (inside) an array-of-tables element.
    let mut in_array = false;
    // Elements seen so far of each array of tables, so `faults[2].link` resolves.
    let mut seen: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let mut elem: Option<usize> = None;
    let mut best: Option<(usize, usize)> = None; // (matched segments, line)
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix("[[").and_then(|l| l.strip_suffix("]]")) {
            header = h.split('.').map(|s| s.trim().to_string()).collect();
            element_name = None;
            in_array = true;
            let n = seen.entry(header.join(".")).or_insert(0);
            elem = Some(*n);
            *n += 1;
            consider(&mut best, &want, &header, i + 1);
            consider(&mut best, &want, &resolve_indexed(&header, elem), i + 1);
            continue;
        }
        if let Some(h) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let parts: Vec<String> = h.split('.').map(|s| s.trim().to_string()).collect();
            // `[pools.server]` continues the current `[[pools]]` element.
            if !(in_array && parts.first() == header.first()) {
                element_name = None;
                in_array = false;
            }
            header = parts;
            consider(&mut best, &want, &resolve(&header, &element_name), i + 1);
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim().trim_matches('"');
        if k == "name" && in_array && header.len() == 1 {
            element_name = Some(v.trim().trim_matches('"').to_string());
            // The element itself (`pools.decode`) is found at its name line.
            consider(&mut best, &want, &resolve(&header, &element_name), i + 1);
        }
        let mut path = resolve(&header, &element_name);
        path.extend(k.split('.').map(|s| s.trim().to_string()));
        consider(&mut best, &want, &path, i + 1);
        if in_array && header.first().is_some_and(|h| h != "pools") {
            let mut indexed = resolve_indexed(&header, elem);
            indexed.extend(k.split('.').map(|s| s.trim().to_string()));
            consider(&mut best, &want, &indexed, i + 1);
        }
        // Inline table: `arrival = { process = "poisson", rate_per_s = 8 }`.
        let v = v.trim();
        if v.starts_with('{') {
            for part in v.trim_matches(|c| c == '{' || c == '}').split(',') {
                if let Some((ik, _)) = part.split_once('=') {
                    let mut p = path.clone();
                    p.push(ik.trim().to_string());
                    consider(&mut best, &want, &p, i + 1);
                }
            }
        }
    }
    best.map(|(_, line)| line)
}

/// The dotted path of an array-of-tables element addressed by index: `faults[2]`.
fn resolve_indexed(header: &[String], elem: Option<usize>) -> Vec<String> {
    let mut p: Vec<String> = header.to_vec();
    if let (Some(first), Some(i)) = (p.first_mut(), elem) {
        *first = format!("{first}[{i}]");
    }
    p
}

/// The dotted path a header denotes, with `[[pools]]` elements named by their `name`.
fn resolve(header: &[String], element_name: &Option<String>) -> Vec<String> {
    let mut p = Vec::with_capacity(header.len() + 1);
    for (i, h) in header.iter().enumerate() {
        p.push(h.clone());
        if i == 0 && header[0] == "pools" {
            p.push(element_name.clone().unwrap_or_default());
        }
    }
    p
}

fn consider(best: &mut Option<(usize, usize)>, want: &[&str], path: &[String], line: usize) {
    let matched = want
        .iter()
        .zip(path.iter())
        .take_while(|(w, p)| *w == p)
        .count();
    // Only a path that is a prefix of the wanted key counts (an enclosing table or the key).
    // On ties the later line wins: a duplicate is reported where it repeats.
    if matched == path.len() && matched > 0 && best.is_none_or(|(m, _)| matched >= m) {
        *best = Some((matched, line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"[run]
name = "x"
duration_s = 10

[[pools]]
name = "prefill"
[pools.server]
tp_size = 4

[[pools]]
name = "decode"
instances = 0
[pools.server]
tp_size = 3

[workload]
arrival = { process = "poisson", rate_per_s = -1 }
"#;

    #[test]
    fn finds_keys_tables_and_pool_elements() {
        assert_eq!(line_of(TEXT, "run.duration_s"), Some(3));
        assert_eq!(line_of(TEXT, "pools.decode.server.tp_size"), Some(14));
        assert_eq!(line_of(TEXT, "pools.prefill.server.tp_size"), Some(8));
        assert_eq!(line_of(TEXT, "pools.decode.instances"), Some(12));
        assert_eq!(line_of(TEXT, "workload.arrival.rate_per_s"), Some(17));
        // A missing key points at its enclosing table.
        assert_eq!(line_of(TEXT, "run.seed"), Some(1));
        assert_eq!(line_of(TEXT, "slo.ttft_ms"), None);
    }
}
