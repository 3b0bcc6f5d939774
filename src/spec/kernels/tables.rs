//! The kernel-table file: one GPU's measured sglang kernels, derived from AIConfigurator's
//! database by `pdsim calibrate --from-aiconfigurator` ([`super::derive`]) and read here.
//!
//! # Format (`pdsim-kernels 1`)
//!
//! Text, one GPU per file; `#` starts a comment line. A header of `key value…` lines, then
//! tables:
//!
//! ```text
//! pdsim-kernels 1
//! gpu h100-sxm                      # pdsim's GPU preset
//! system h100_sxm                   # AIConfigurator's system folder
//! device NVIDIA H100 80GB HBM3      # as the measurements name it
//! sglang 0.5.14                     # the version asked for (ops older where newer is missing)
//! source aiconfigurator-core 0.12.0 systems/data/h100_sxm
//! table gemm dtype=bfloat16 version=0.5.14 kernel=sglang_torch_linear
//! axis m 1 2 4 8 …
//! axis n 32 64 …
//! axis k 32 64 …
//! values
//! 3.1 3.2 … (row-major, last axis fastest, microseconds, `-` where not measured)
//! end
//! ```
//!
//! A table is named by its first word and its `key=value` attributes other than `version`
//! and `kernel`, which only record provenance (the sglang version it was measured at and the
//! kernel that ran). What each table's axes mean is [`super::derive`]'s module doc.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use super::grid::{Axis, Grid};

/// The magic first line's word and the format's version.
pub const MAGIC: &str = "pdsim-kernels";
/// The format version this build reads and writes.
pub const FORMAT: u32 = 1;

/// Where a kernel-table file's numbers come from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Meta {
    /// pdsim's GPU preset the tables are for.
    pub gpu: String,
    /// AIConfigurator's system name (its folder under `systems/data`).
    pub system: String,
    /// The device the measurements name.
    pub device: String,
    /// The sglang version asked for when deriving (each table says its own).
    pub sglang: String,
    /// The package, version and folder the tables were derived from.
    pub source: String,
}

/// One table: its name, its attributes and its grid.
#[derive(Clone, Debug)]
pub struct Table {
    /// What the table measures (`gemm`, `context_attention`, …).
    pub name: String,
    /// Its attributes, `version` and `kernel` included.
    pub attrs: BTreeMap<String, String>,
    /// The latencies, microseconds: set when read, or on first use for a shipped file.
    grid: OnceLock<Grid>,
    /// A shipped file's table not read yet: its lines, read on first use.
    body: Option<Body>,
}

/// The text of a table (its `axis` lines to its `end`) in a file compiled into the binary,
/// read on first use: a run prices a handful of a GPU's 125 tables, and reading all of them
/// was the largest part of a short run's cost. Only the shipped files are read this way; a
/// test reads each of them whole.
#[derive(Clone, Debug)]
struct Body {
    /// The file's name, for the message should a shipped file not read.
    origin: &'static str,
    /// The `table` line's number, for that message.
    line: usize,
    /// The lines after the `table` line up to and including `end`.
    text: &'static str,
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.attrs == other.attrs && self.grid() == other.grid()
    }
}

impl Table {
    /// A table over `grid` (the calibrate command's).
    pub fn new(name: String, attrs: BTreeMap<String, String>, grid: Grid) -> Self {
        Self {
            name,
            attrs,
            grid: OnceLock::from(grid),
            body: None,
        }
    }

    /// The latencies, microseconds; a shipped file's table is read on the first call.
    pub fn grid(&self) -> &Grid {
        self.grid.get_or_init(|| {
            let b = self
                .body
                .as_ref()
                .expect("a table is read when parsed or has its body");
            read_body(b.origin, b.line, b.text, &self.name)
                .unwrap_or_else(|e| panic!("a shipped kernel table reads: {e}"))
        })
    }

    /// The attribute `key`, if set.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }

    /// Whether the table is `name` with every `(key, value)` of `want` among its attributes.
    pub fn is(&self, name: &str, want: &[(&str, &str)]) -> bool {
        self.name == name && want.iter().all(|(k, v)| self.attr(k) == Some(*v))
    }
}

/// One GPU's kernel tables.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelTables {
    /// Provenance.
    pub meta: Meta,
    /// Every table, in file order.
    pub tables: Vec<Table>,
}

/// A `table` line found by [`scan`]: its line number, name, attributes, and its body's text.
type Found<'a> = (usize, String, BTreeMap<String, String>, &'a str);

impl KernelTables {
    /// The first table named `name` with every attribute of `want`.
    pub fn find(&self, name: &str, want: &[(&str, &str)]) -> Option<&Table> {
        self.tables.iter().find(|t| t.is(name, want))
    }

    /// Every table named `name` with every attribute of `want`.
    pub fn all(&self, name: &str, want: &[(&str, &str)]) -> Vec<&Table> {
        self.tables.iter().filter(|t| t.is(name, want)).collect()
    }

    /// The sglang versions the tables were measured at, each with what it covers, for
    /// provenance lines (`gemm 0.5.14, mla 0.5.10, …`).
    pub fn versions(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &self.tables {
            let v = t.attr("version").unwrap_or("?").to_string();
            let names = out.entry(v).or_default();
            if !names.contains(&t.name) {
                names.push(t.name.clone());
            }
        }
        out
    }

    /// Parses a file's text, every table read; `origin` names it in errors, which also give
    /// the line.
    pub fn parse(origin: &str, text: &str) -> Result<Self, String> {
        let (meta, found) = scan(origin, text)?;
        let tables = found
            .into_iter()
            .map(|(line, name, attrs, body)| {
                let grid = read_body(origin, line, body, &name)?;
                Ok(Table::new(name, attrs, grid))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { meta, tables })
    }

    /// Parses a file compiled into the binary: its header and table lines now, each table's
    /// values on first use ([`Table::grid`]).
    pub fn parse_shipped(origin: &'static str, text: &'static str) -> Result<Self, String> {
        let (meta, found) = scan(origin, text)?;
        let tables = found
            .into_iter()
            .map(|(line, name, attrs, body)| Table {
                name,
                attrs,
                grid: OnceLock::new(),
                body: Some(Body {
                    origin,
                    line,
                    text: body,
                }),
            })
            .collect();
        Ok(Self { meta, tables })
    }

    /// The file's text: a header comment with `header`'s lines, then the tables; values to
    /// four significant digits (a measurement's own noise is larger).
    pub fn to_text(&self, header: &[String]) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for h in header {
            let _ = writeln!(s, "# {h}");
        }
        let _ = writeln!(s, "{MAGIC} {FORMAT}");
        let m = &self.meta;
        for (k, v) in [
            ("gpu", &m.gpu),
            ("system", &m.system),
            ("device", &m.device),
            ("sglang", &m.sglang),
            ("source", &m.source),
        ] {
            let _ = writeln!(s, "{k} {v}");
        }
        for t in &self.tables {
            let attrs: Vec<String> = t.attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(s, "table {} {}", t.name, attrs.join(" "));
            let grid = t.grid();
            for a in &grid.axes {
                let pts: Vec<String> = a.points.iter().map(|p| fmt_num(*p)).collect();
                let _ = writeln!(s, "axis {} {}", a.name, pts.join(" "));
            }
            let _ = writeln!(s, "values");
            let row = grid.axes.last().map_or(1, |a| a.points.len()).max(1);
            for chunk in grid.values.chunks(row) {
                let vals: Vec<String> = chunk
                    .iter()
                    .map(|v| if v.is_finite() { sig4(*v) } else { "-".into() })
                    .collect();
                let _ = writeln!(s, "{}", vals.join(" "));
            }
            let _ = writeln!(s, "end");
        }
        s
    }
}

/// Reads a file's header and finds its tables: each `table` line with the text of its body
/// (the lines after it up to its `end`), not read yet.
fn scan<'a>(origin: &str, text: &'a str) -> Result<(Meta, Vec<Found<'a>>), String> {
    let err = |line: usize, msg: String| format!("{origin}:{line}: {msg}");
    let mut meta = Meta::default();
    let mut found = Vec::new();
    // Line by line with each line's byte offset, so a table's body is a slice of the text.
    let mut n = 0;
    let mut at = 0;
    let mut magic = false;
    // The open table: its line, name, attributes, and where its body starts.
    let mut open: Option<(usize, String, BTreeMap<String, String>, usize)> = None;
    while at < text.len() {
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        let raw = &text[at..end];
        let next = end + 1;
        n += 1;
        let line = raw.trim();
        let line_start = at;
        at = next;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !magic {
            let mut w = line.split_whitespace();
            if w.next() != Some(MAGIC) {
                return Err(err(
                    n,
                    format!(
                        "not a pdsim kernel-table file: it must start `{MAGIC} {FORMAT}` (write one with `pdsim calibrate --from-aiconfigurator`)"
                    ),
                ));
            }
            match w.next().map(str::parse::<u32>) {
                Some(Ok(FORMAT)) => {}
                other => {
                    return Err(err(
                        n,
                        format!("format version {other:?}: this pdsim reads `{MAGIC} {FORMAT}`"),
                    ));
                }
            }
            magic = true;
            continue;
        }
        if let Some((start, ..)) = open {
            // Inside a table only its `end` matters here; the body is read by `read_body`.
            if line == "end" {
                let (start, name, attrs, from) = open.take().expect("open");
                found.push((start, name, attrs, &text[from..line_start + raw.len()]));
            } else if line.starts_with("table ") {
                return Err(err(
                    start,
                    "a table has no `end` before the next `table`".into(),
                ));
            }
            continue;
        }
        let (key, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match key {
            "gpu" => meta.gpu = rest.to_string(),
            "system" => meta.system = rest.to_string(),
            "device" => meta.device = rest.to_string(),
            "sglang" => meta.sglang = rest.to_string(),
            "source" => meta.source = rest.to_string(),
            "table" => {
                let mut parts = rest.split_whitespace();
                let name = parts
                    .next()
                    .ok_or_else(|| err(n, "`table` needs a name".into()))?;
                let mut attrs = BTreeMap::new();
                for p in parts {
                    let (k, v) = p
                        .split_once('=')
                        .ok_or_else(|| err(n, format!("table attribute {p:?} is not key=value")))?;
                    attrs.insert(k.to_string(), v.to_string());
                }
                open = Some((n, name.to_string(), attrs, next.min(text.len())));
            }
            other => {
                return Err(err(
                    n,
                    format!(
                        "unknown line {other:?}: expected gpu, system, device, sglang, source or table"
                    ),
                ));
            }
        }
    }
    if !magic {
        return Err(format!(
            "{origin}: empty; a kernel-table file starts `{MAGIC} {FORMAT}`"
        ));
    }
    if let Some((start, name, ..)) = open {
        return Err(err(start, format!("table {name} has no `end`")));
    }
    if meta.gpu.is_empty() {
        return Err(format!(
            "{origin}: no `gpu` line: which GPU preset the tables are for"
        ));
    }
    Ok((meta, found))
}

/// Reads a table's body (its `axis` lines, `values`, the rows, `end`) into its grid, filling
/// what was not measured; `line` is the `table` line's number, for errors.
fn read_body(origin: &str, line: usize, body: &str, table: &str) -> Result<Grid, String> {
    let err = |line: usize, msg: String| format!("{origin}:{line}: {msg}");
    let mut axes = Vec::new();
    let mut values: Option<Vec<f64>> = None;
    for (i, raw) in body.lines().enumerate() {
        let n = line + 1 + i;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(v) = values.as_mut() {
            if l == "end" {
                break;
            }
            for tok in l.split_ascii_whitespace() {
                v.push(if tok == "-" {
                    f64::NAN
                } else {
                    let x = number(tok)
                        .ok_or_else(|| err(n, format!("value {tok:?} is not a number or `-`")))?;
                    if !(x.is_finite() && x > 0.0) {
                        return Err(err(
                            n,
                            format!(
                                "value {tok}: a latency must be a positive number of microseconds"
                            ),
                        ));
                    }
                    x
                });
            }
            continue;
        }
        let (key, rest) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
        match key {
            "axis" => {
                let mut parts = rest.split_whitespace();
                let name = parts
                    .next()
                    .ok_or_else(|| err(n, "`axis` needs a name and its points".into()))?;
                let points = parts
                    .map(|p| {
                        number(p)
                            .ok_or_else(|| err(n, format!("axis {name}: {p:?} is not a number")))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                axes.push(Axis {
                    name: name.to_string(),
                    points,
                });
            }
            "values" => values = Some(Vec::new()),
            k => {
                return Err(err(
                    n,
                    format!("{k:?} inside table {table}: expected `axis`, `values`"),
                ));
            }
        }
    }
    let Some(values) = values else {
        return Err(err(line, format!("table {table} has no `values`")));
    };
    let mut grid = Grid::new(axes, values).map_err(|e| err(line, format!("table {table}: {e}")))?;
    grid.fill_missing()
        .map_err(|e| err(line, format!("table {table}: {e}")))?;
    Ok(grid)
}

/// A number as the files write it. Plain decimals (`3.237`, `512`) are read by hand: with at
/// most 15 digits and 22 decimals both the digits and the power of ten are exact doubles, so
/// one division rounds correctly and gives what `str::parse` gives (Clinger's fast path),
/// at a tenth of its cost on a run's hot start. Anything else goes to `str::parse`.
fn number(tok: &str) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let b = tok.as_bytes();
    let (mut m, mut digits, mut frac, mut dot) = (0u64, 0u32, 0usize, false);
    for &c in b {
        match c {
            b'0'..=b'9' => {
                m = m * 10 + u64::from(c - b'0');
                digits += 1;
                if dot {
                    frac += 1;
                }
            }
            b'.' if !dot => dot = true,
            _ => return tok.parse().ok(),
        }
        if digits > 15 {
            return tok.parse().ok();
        }
    }
    if digits == 0 || frac >= POW10.len() {
        return tok.parse().ok();
    }
    Some(m as f64 / POW10[frac])
}

/// An axis point as written: integers without a fraction.
fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x}")
    }
}

/// `x` to four significant digits, without trailing zeros.
fn sig4(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let digits = 3 - x.abs().log10().floor() as i32;
    let s = if digits > 0 {
        format!("{:.*}", digits as usize, x)
    } else {
        let p = 10f64.powi(-digits);
        format!("{}", (x / p).round() * p)
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# a comment\npdsim-kernels 1\ngpu h100-sxm\nsystem h100_sxm\n\
        device NVIDIA H100\nsglang 0.5.14\nsource test\n\
        table gemm dtype=bfloat16 version=0.5.14 kernel=k\naxis m 1 2\naxis n 32 64\n\
        values\n1 2\n3 -\nend\n";

    #[test]
    fn a_file_round_trips_and_fills_its_gaps() {
        let t = KernelTables::parse("x", TEXT).unwrap();
        assert_eq!(t.meta.gpu, "h100-sxm");
        let g = t.find("gemm", &[("dtype", "bfloat16")]).unwrap();
        assert_eq!(g.grid().values, vec![1.0, 2.0, 3.0, 3.0]);
        assert_eq!(g.attr("version"), Some("0.5.14"));
        let again = KernelTables::parse("y", &t.to_text(&["h".into()])).unwrap();
        assert_eq!(again, t);
    }

    #[test]
    fn bad_files_name_the_line() {
        let e = KernelTables::parse("f.txt", "hello").unwrap_err();
        assert!(e.contains("f.txt:1") && e.contains("pdsim-kernels"), "{e}");
        let e = KernelTables::parse("f.txt", &TEXT.replace("3 -", "3 x")).unwrap_err();
        assert!(e.contains("f.txt:13") && e.contains("\"x\""), "{e}");
        let e = KernelTables::parse("f.txt", &TEXT.replace("3 -", "3 -2")).unwrap_err();
        assert!(e.contains("positive"), "{e}");
        let e = KernelTables::parse("f.txt", &TEXT.replace("end\n", "")).unwrap_err();
        assert!(e.contains("no `end`"), "{e}");
        let e = KernelTables::parse("f.txt", &TEXT.replace("1 2\n3 -", "1 2 3")).unwrap_err();
        assert!(e.contains("3 values"), "{e}");
    }

    #[test]
    fn four_significant_digits() {
        assert_eq!(sig4(123.456), "123.5");
        assert_eq!(sig4(0.0012346), "0.001235");
        assert_eq!(sig4(98765.0), "98770");
        assert_eq!(sig4(2.0), "2");
    }
}
