//! The HTTP side of `pdsim serve` that needs no simulation: a reply, form decoding, and a
//! request path resolved to a file under the served folder (never outside it). Pure functions
//! of their inputs, so the refusals (traversal, bad encoding) are unit-tested without a socket.

use std::path::{Component, Path, PathBuf};

/// The most bytes a request's query string or body may hold (1 MiB): a scenario text is a few
/// KiB; anything larger is refused with 413 before it is decoded.
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// What the server sends back: a status, a content type and the body.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type` header's value.
    pub content_type: &'static str,
    /// The body, or the file to stream it from.
    pub body: Body,
}

/// A reply's body.
#[derive(Clone, Debug)]
pub enum Body {
    /// Bytes in memory (a page).
    Bytes(Vec<u8>),
    /// A results file under the served folder, streamed from disk (a `requests.csv` may be
    /// tens of MB).
    File(PathBuf),
}

/// The content type of HTML pages.
pub const HTML: &str = "text/html; charset=utf-8";

impl Reply {
    /// An HTML page with `status`.
    pub fn html(status: u16, page: String) -> Self {
        Reply {
            status,
            content_type: HTML,
            body: Body::Bytes(page.into_bytes()),
        }
    }

    /// The body as text, for tests and for splicing a report (a file body is read).
    pub fn text(&self) -> String {
        match &self.body {
            Body::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
            Body::File(p) => std::fs::read_to_string(p).unwrap_or_default(),
        }
    }
}

/// Decodes one `application/x-www-form-urlencoded` component (`+` is a space, `%XX` a byte);
/// the result must be UTF-8. `Err` says what is wrong, for a 400 naming the field.
pub fn decode_component(s: &str, plus_is_space: bool) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' if plus_is_space => out.push(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => {
                        return Err(format!("a % at byte {i} not followed by two hex digits"));
                    }
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded".to_string())
}

/// A form's fields in order (`a=1&b=2`), each name and value decoded. A malformed pair is
/// `Err` naming it.
pub fn parse_form(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for pair in s.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let name = decode_component(k, true).map_err(|e| format!("a field name: {e}"))?;
        let value = decode_component(v, true).map_err(|e| format!("field `{name}`: {e}"))?;
        out.push((name, value));
    }
    Ok(out)
}

/// Why a path cannot be served: a traversal attempt (400) or nothing there to serve (404).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The path steps out of the served folder (`..`), or is not a plain relative path.
    BadPath(String),
    /// No such file under the served folder (a hidden file, a folder, a link leading out of
    /// it, or nothing at all).
    NotFound,
}

/// The file `rel` (already percent-decoded, `/`-separated) names under `root` (canonical).
/// `..`, `.`, empty segments, backslashes and NUL are refused as bad paths; a hidden name
/// (`.pdsim-lock`, a staging folder), a folder, or a link that resolves outside `root` is not
/// found.
pub fn file_under(root: &Path, rel: &str) -> Result<PathBuf, Refused> {
    if rel.is_empty() {
        return Err(Refused::NotFound);
    }
    for seg in rel.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." || seg.contains(['\\', '\0']) {
            return Err(Refused::BadPath(format!(
                "{rel:?}: a path under the served folder, without `..`, `.` or empty parts"
            )));
        }
        if seg.starts_with('.') {
            return Err(Refused::NotFound);
        }
    }
    let joined = root.join(rel);
    // Every component is normal by the checks above; say so where it matters.
    debug_assert!(
        Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
    );
    // Resolved, a link cannot lead out: the canonical path must still be under the root.
    match joined.canonicalize() {
        Ok(p) if p.starts_with(root) && p.is_file() => Ok(p),
        _ => Err(Refused::NotFound),
    }
}

/// The content type of a results file, by its extension; text files are shown as text.
pub fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => HTML,
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "json" => "application/json",
        "csv" | "toml" | "txt" | "yaml" | "md" | "log" | "sh" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deploy_files_are_shown_as_text() {
        for f in [
            "launch.txt",
            "k8s.yaml",
            "slurm.sh",
            "best.toml",
            "sweep.csv",
        ] {
            assert_eq!(
                content_type(Path::new(f)),
                "text/plain; charset=utf-8",
                "{f}"
            );
        }
        assert_eq!(content_type(Path::new("index.html")), HTML);
        assert_eq!(content_type(Path::new("x.bin")), "application/octet-stream");
    }

    #[test]
    fn forms_decode_and_malformed_ones_are_named() {
        assert_eq!(
            parse_form("a=1+2&b=%3Cx%3E&c&=z").unwrap(),
            vec![
                ("a".into(), "1 2".into()),
                ("b".into(), "<x>".into()),
                ("c".into(), String::new()),
                (String::new(), "z".into()),
            ]
        );
        assert!(parse_form("isl=%zz").unwrap_err().contains("field `isl`"));
        assert!(parse_form("isl=%4").unwrap_err().contains("hex"));
        assert!(parse_form("isl=%ff").unwrap_err().contains("UTF-8"));
        assert_eq!(decode_component("a+b", false).unwrap(), "a+b");
    }

    #[test]
    fn only_files_under_the_root_are_served() {
        let root = std::env::temp_dir().join(format!("pdsim-serve-http-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::write(root.join("run/index.html"), "x").unwrap();
        std::fs::write(root.join(".pdsim-lock"), "x").unwrap();
        let root = root.canonicalize().unwrap();
        assert_eq!(
            file_under(&root, "run/index.html").unwrap(),
            root.join("run/index.html")
        );
        for bad in [
            "../etc/passwd",
            "run/../../x",
            "./run",
            "run//index.html",
            "a\\b",
        ] {
            assert!(
                matches!(file_under(&root, bad), Err(Refused::BadPath(_))),
                "{bad}"
            );
        }
        for missing in ["", "run", ".pdsim-lock", "run/nothing.csv"] {
            assert_eq!(
                file_under(&root, missing),
                Err(Refused::NotFound),
                "{missing}"
            );
        }
        // A link out of the root is not followed out.
        std::os::unix::fs::symlink("/etc/hostname", root.join("out")).unwrap();
        assert_eq!(file_under(&root, "out"), Err(Refused::NotFound));
        let _ = std::fs::remove_dir_all(&root);
    }
}
