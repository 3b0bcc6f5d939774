//! The tree's structural bounds, held by CI (issue 37): `sim::World` stays a switchboard — at
//! most [`MAX_WORLD_METHODS`] methods across its `impl World` blocks, at most
//! [`MAX_SIM_LINES`] non-test lines in `src/sim/`. A rule that grows `World` belongs in a
//! component (`docs/architecture.md` §1); a test failing here says which bound and the counts.
//!
//! Counted as the commands count them (`awk` over `src/sim/*.rs`), a little wider so
//! that no form escapes — every `.rs` file under `src/sim/`, its folders too:
//! - a method is a line `    fn …` (with `pub`, `pub(…)`, `const`, `async` or `unsafe`
//!   before it) inside a block opened by a line `impl World…` or `impl<…> World…` and closed
//!   by a line `}`;
//! - a non-test line is a line of a file not named `*_tests.rs` before its `#[cfg(test)]`
//!   `mod tests` block; the line after any other `#[cfg(test)]` (a test module's
//!   declaration) is not counted, as `awk`'s `getline` skips it.

use std::path::{Path, PathBuf};

/// The most methods `World` may have (issue 37: 106 when it was filed).
const MAX_WORLD_METHODS: usize = 35;
/// The most non-test lines `src/sim/` may have (issue 37: 4,190 when it was filed).
const MAX_SIM_LINES: usize = 2_000;

/// Every `.rs` file under `dir`, in path order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `line` opens an `impl World` block: `impl World…` or `impl<…> World…`.
fn opens_world_impl(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("impl") else {
        return false;
    };
    let rest = match rest.strip_prefix('<') {
        Some(generics) => match generics.find('>') {
            Some(end) => &generics[end + 1..],
            None => return false,
        },
        None => rest,
    };
    rest.starts_with(" World")
}

/// Whether `line` declares a method at an `impl` block's indentation.
fn declares_method(line: &str) -> bool {
    let Some(mut rest) = line.strip_prefix("    ") else {
        return false;
    };
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(scope) => match scope.find(')') {
                Some(end) => &scope[end + 1..],
                None => return false,
            },
            None => r,
        };
        let Some(r) = rest.strip_prefix(' ') else {
            return false;
        };
        rest = r;
    }
    for qualifier in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    rest.starts_with("fn ")
}

/// The methods of `World` in `text`, as `name (first line)` for the report.
fn world_methods(text: &str) -> Vec<String> {
    let (mut inside, mut found) = (false, Vec::new());
    for line in text.lines() {
        if opens_world_impl(line) {
            inside = true;
        }
        if inside && declares_method(line) {
            found.push(line.trim().to_string());
        }
        if line.starts_with('}') {
            inside = false;
        }
    }
    found
}

/// The non-test lines of a file's `text` (see the module docs).
fn non_test_lines(text: &str) -> usize {
    let (mut count, mut lines) = (0, text.lines());
    while let Some(line) = lines.next() {
        if line.starts_with("#[cfg(test)]") {
            match lines.next() {
                Some(next) if next.starts_with("mod tests") => break,
                _ => {
                    count += 1;
                    continue;
                }
            }
        }
        count += 1;
    }
    count
}

/// `World` keeps at most [`MAX_WORLD_METHODS`] methods and `src/sim/` at most
/// [`MAX_SIM_LINES`] non-test lines; the counts are printed either way.
#[test]
fn world_stays_a_switchboard() {
    let sim = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sim");
    let mut files = Vec::new();
    rust_files(&sim, &mut files);
    assert!(!files.is_empty(), "no source under {}", sim.display());
    let (mut methods, mut lines) = (Vec::new(), 0);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let name = f.strip_prefix(&sim).unwrap_or(f).display().to_string();
        methods.extend(
            world_methods(&text)
                .into_iter()
                .map(|m| format!("{name}: {m}")),
        );
        if !name.ends_with("_tests.rs") {
            lines += non_test_lines(&text);
        }
    }
    println!(
        "World: {} methods (at most {MAX_WORLD_METHODS}); src/sim/: {lines} non-test lines \
         (at most {MAX_SIM_LINES})",
        methods.len()
    );
    assert!(
        methods.len() <= MAX_WORLD_METHODS,
        "World has {} methods, more than {MAX_WORLD_METHODS}: a rule that grows it belongs in a \
         component (docs/architecture.md §1). Its methods:\n{}",
        methods.len(),
        methods.join("\n")
    );
    assert!(
        lines <= MAX_SIM_LINES,
        "src/sim/ has {lines} non-test lines, more than {MAX_SIM_LINES} (docs/architecture.md §1)"
    );
}

/// The counters on hand-made text: what is a method of `World` and what is not, what is a
/// test line and what is not.
#[test]
fn the_counters_count_what_the_bounds_say() {
    let text = "\
impl<'a> World<'a> {
    pub fn new() -> Self {}
    fn run(&mut self) {}
    pub(super) fn handle(&mut self) {}
    pub(crate) const fn quick(&self) {}
        fn nested() {}
    // fn commented() {}
}

fn free() {}

impl World<'_> {
    #[inline]
    pub(in crate::sim) fn scoped(&mut self) {}
}

impl Other {
    pub fn not_world(&self) {}
}

#[cfg(test)]
mod coalesce_tests;

#[cfg(test)]
mod tests {
    fn in_tests() {}
}
";
    let methods = world_methods(text);
    assert_eq!(
        methods,
        [
            "pub fn new() -> Self {}",
            "fn run(&mut self) {}",
            "pub(super) fn handle(&mut self) {}",
            "pub(crate) const fn quick(&self) {}",
            "pub(in crate::sim) fn scoped(&mut self) {}",
        ]
    );
    // The 23 lines before the test module, less `mod coalesce_tests;`.
    assert_eq!(non_test_lines(text), 22);
}
