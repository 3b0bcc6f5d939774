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
    /// A shipped file's table not decoded yet: its grid in the compiled form, decoded on
    /// first use.
    body: Option<&'static [u8]>,
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
                .expect("a table is read when parsed or has its compiled body");
            Compiled(b).grid().unwrap_or_else(|e| {
                panic!("a shipped kernel table decodes: table {}: {e}", self.name)
            })
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

    /// The sglang versions the tables were measured at, oldest first ([`version_key`]), each
    /// with what it covers, for provenance lines (`gemm 0.5.14, mla 0.5.10, …`).
    pub fn versions(&self) -> Vec<(String, Vec<String>)> {
        // Gathered borrowed, owned once at the end: 125 tables, a handful of versions.
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for t in &self.tables {
            let names = by.entry(t.attr("version").unwrap_or("?")).or_default();
            if !names.contains(&t.name.as_str()) {
                names.push(&t.name);
            }
        }
        let mut out: Vec<(String, Vec<String>)> = by
            .into_iter()
            .map(|(v, names)| {
                (
                    v.to_string(),
                    names.into_iter().map(str::to_string).collect(),
                )
            })
            .collect();
        out.sort_by_cached_key(|(v, _)| version_key(v));
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

    /// The compiled form of these tables (`build.rs` writes one per shipped file; see
    /// [`KernelTables::from_compiled`]): every table's grid as read, filled
    /// ([`Grid::fill_missing`]), in little-endian binary. Nothing is rounded: a compiled file
    /// decodes to exactly the tables its text parses to (a test compares them).
    pub fn to_compiled(&self) -> Vec<u8> {
        let mut out = COMPILED_MAGIC.to_vec();
        let m = &self.meta;
        for s in [&m.gpu, &m.system, &m.device, &m.sglang, &m.source] {
            put_str(&mut out, s);
        }
        put_len(&mut out, self.tables.len());
        for t in &self.tables {
            put_str(&mut out, &t.name);
            put_len(&mut out, t.attrs.len());
            for (k, v) in &t.attrs {
                put_str(&mut out, k);
                put_str(&mut out, v);
            }
            // The grid's part is prefixed with its length, so the index can skip it.
            let g = t.grid();
            let mut body = Vec::new();
            put_len(&mut body, g.axes.len());
            for a in &g.axes {
                put_str(&mut body, &a.name);
                put_f64s(&mut body, &a.points);
            }
            put_f64s(&mut body, &g.values);
            put_len(&mut out, body.len());
            out.extend_from_slice(&body);
        }
        out
    }

    /// Reads a shipped file in its compiled form ([`KernelTables::to_compiled`], made from the
    /// text at build time): its header and table index now, each table's grid on first use
    /// ([`Table::grid`]). A run prices a handful of a GPU's 125 tables; parsing the text of
    /// the file and of those tables at every start was most of a short run's cost.
    pub fn from_compiled(origin: &str, bytes: &'static [u8]) -> Result<Self, String> {
        let err = |e: String| format!("{origin} (compiled): {e}");
        let mut c = Compiled(bytes);
        if c.take(COMPILED_MAGIC.len()).map_err(err)? != COMPILED_MAGIC {
            return Err(err("not a compiled kernel-table file".into()));
        }
        let mut meta = Meta::default();
        for f in [
            &mut meta.gpu,
            &mut meta.system,
            &mut meta.device,
            &mut meta.sglang,
            &mut meta.source,
        ] {
            *f = c.str().map_err(err)?.to_string();
        }
        let n = c.len().map_err(err)?;
        let mut tables = Vec::with_capacity(n);
        for _ in 0..n {
            let name = c.str().map_err(err)?.to_string();
            let mut attrs = BTreeMap::new();
            for _ in 0..c.len().map_err(err)? {
                let k = c.str().map_err(err)?.to_string();
                attrs.insert(k, c.str().map_err(err)?.to_string());
            }
            let len = c.len().map_err(err)?;
            tables.push(Table {
                name,
                attrs,
                grid: OnceLock::new(),
                body: Some(c.take(len).map_err(err)?),
            });
        }
        if !c.0.is_empty() {
            return Err(err(format!("{} bytes after the last table", c.0.len())));
        }
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

/// The first bytes of a compiled kernel-table file and its version.
const COMPILED_MAGIC: &[u8; 8] = b"pdsimkt1";

/// A length or count, as a little-endian `u32`.
fn put_len(out: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("a kernel table's sizes fit in u32");
    out.extend_from_slice(&n.to_le_bytes());
}

/// A string: its length, then its UTF-8 bytes.
fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

/// Numbers: their count, then each as its little-endian IEEE bits.
fn put_f64s(out: &mut Vec<u8>, xs: &[f64]) {
    put_len(out, xs.len());
    for x in xs {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

/// What is left to read of a compiled file.
struct Compiled(&'static [u8]);

impl Compiled {
    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&'static [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "truncated: {n} bytes wanted, {} left",
                self.0.len()
            ));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A length or count.
    fn len(&mut self) -> Result<usize, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// A string.
    fn str(&mut self) -> Result<&'static str, String> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).map_err(|e| format!("a name is not UTF-8: {e}"))
    }

    /// Numbers.
    fn f64s(&mut self) -> Result<Vec<f64>, String> {
        let n = self.len()?;
        let b = self.take(n.checked_mul(8).ok_or("a count overflows")?)?;
        Ok(b.chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// A table's grid part: its axes, then its values.
    fn grid(mut self) -> Result<Grid, String> {
        let n = self.len()?;
        let mut axes = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.str()?.to_string();
            axes.push(Axis {
                name,
                points: self.f64s()?,
            });
        }
        let values = self.f64s()?;
        if !self.0.is_empty() {
            return Err(format!("{} bytes after the grid", self.0.len()));
        }
        Grid::new(axes, values)
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

/// A version string's order: numeric parts compare as numbers; a `postN` suffix sorts after the
/// release it follows (`0.5.6 < 0.5.6.post2 < 0.5.10`).
pub fn version_key(v: &str) -> Vec<(u64, u64)> {
    v.split('.')
        .map(|p| {
            if let Some(n) = p.strip_prefix("post") {
                (u64::MAX, n.parse().unwrap_or(0))
            } else {
                (p.parse().unwrap_or(0), 0)
            }
        })
        .collect()
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

    /// The compiled form decodes to the very tables the text reads (values filled), and a
    /// cut or foreign one is an error naming the file, not a panic.
    #[test]
    fn the_compiled_form_round_trips() {
        let t = KernelTables::parse("x", TEXT).unwrap();
        let bytes: &'static [u8] = Box::leak(t.to_compiled().into_boxed_slice());
        let back = KernelTables::from_compiled("x.kt", bytes).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.meta, t.meta);
        assert_eq!(back.tables[0].attrs, t.tables[0].attrs);
        for cut in [3, 20, bytes.len() - 1] {
            let e = KernelTables::from_compiled("x.kt", &bytes[..cut]).unwrap_err();
            assert!(e.starts_with("x.kt (compiled): "), "{e}");
        }
        let e = KernelTables::from_compiled("y.kt", b"not a compiled file").unwrap_err();
        assert!(e.contains("not a compiled kernel-table file"), "{e}");
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
