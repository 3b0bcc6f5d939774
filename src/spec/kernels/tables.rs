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

use super::grid::{Axis, Grid};

/// A table being parsed: its header line, the table, its axes, and its values once the
/// `values` line was read.
type Open = (usize, Table, Vec<Axis>, Option<Vec<f64>>);
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
#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// What the table measures (`gemm`, `context_attention`, …).
    pub name: String,
    /// Its attributes, `version` and `kernel` included.
    pub attrs: BTreeMap<String, String>,
    /// The latencies, microseconds.
    pub grid: Grid,
}

impl Table {
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

    /// Parses a file's text; `origin` names it in errors, which also give the line.
    pub fn parse(origin: &str, text: &str) -> Result<Self, String> {
        let err = |line: usize, msg: String| format!("{origin}:{line}: {msg}");
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.trim()))
            .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
        let (n, first) = lines.next().ok_or_else(|| {
            format!("{origin}: empty; a kernel-table file starts `{MAGIC} {FORMAT}`")
        })?;
        let mut w = first.split_whitespace();
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
        let mut out = KernelTables::default();
        // The table being read: (its line, the table, its axes, its values once `values` began).
        let mut cur: Option<Open> = None;
        for (n, line) in lines {
            let (key, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            if let Some((start, ref mut t, ref mut axes, ref mut values)) = cur {
                match (key, values.as_mut()) {
                    ("axis", None) => {
                        let mut parts = rest.split_whitespace();
                        let name = parts
                            .next()
                            .ok_or_else(|| err(n, "`axis` needs a name and its points".into()))?;
                        let points = parts
                            .map(|p| {
                                p.parse::<f64>().map_err(|_| {
                                    err(n, format!("axis {name}: {p:?} is not a number"))
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()?;
                        axes.push(Axis {
                            name: name.to_string(),
                            points,
                        });
                    }
                    ("values", None) => *values = Some(Vec::new()),
                    ("end", Some(v)) => {
                        let mut grid = Grid::new(std::mem::take(axes), std::mem::take(v))
                            .map_err(|e| err(start, format!("table {}: {e}", t.name)))?;
                        grid.fill_missing()
                            .map_err(|e| err(start, format!("table {}: {e}", t.name)))?;
                        t.grid = grid;
                        out.tables.push(t.clone());
                        cur = None;
                    }
                    (_, Some(v)) => {
                        for tok in line.split_whitespace() {
                            v.push(if tok == "-" {
                                f64::NAN
                            } else {
                                let x: f64 = tok.parse().map_err(|_| {
                                    err(n, format!("value {tok:?} is not a number or `-`"))
                                })?;
                                if !(x.is_finite() && x > 0.0) {
                                    return Err(err(
                                        n,
                                        format!("value {tok}: a latency must be a positive number of microseconds"),
                                    ));
                                }
                                x
                            });
                        }
                    }
                    (k, None) => {
                        return Err(err(
                            n,
                            format!("{k:?} inside table {}: expected `axis`, `values`", t.name),
                        ));
                    }
                }
                continue;
            }
            match key {
                "gpu" => out.meta.gpu = rest.to_string(),
                "system" => out.meta.system = rest.to_string(),
                "device" => out.meta.device = rest.to_string(),
                "sglang" => out.meta.sglang = rest.to_string(),
                "source" => out.meta.source = rest.to_string(),
                "table" => {
                    let mut parts = rest.split_whitespace();
                    let name = parts
                        .next()
                        .ok_or_else(|| err(n, "`table` needs a name".into()))?;
                    let mut attrs = BTreeMap::new();
                    for p in parts {
                        let (k, v) = p.split_once('=').ok_or_else(|| {
                            err(n, format!("table attribute {p:?} is not key=value"))
                        })?;
                        attrs.insert(k.to_string(), v.to_string());
                    }
                    cur = Some((
                        n,
                        Table {
                            name: name.to_string(),
                            attrs,
                            grid: Grid {
                                axes: Vec::new(),
                                values: Vec::new(),
                            },
                        },
                        Vec::new(),
                        None,
                    ));
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
        if let Some((start, t, ..)) = cur {
            return Err(err(start, format!("table {} has no `end`", t.name)));
        }
        if out.meta.gpu.is_empty() {
            return Err(format!(
                "{origin}: no `gpu` line: which GPU preset the tables are for"
            ));
        }
        Ok(out)
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
            for a in &t.grid.axes {
                let pts: Vec<String> = a.points.iter().map(|p| fmt_num(*p)).collect();
                let _ = writeln!(s, "axis {} {}", a.name, pts.join(" "));
            }
            let _ = writeln!(s, "values");
            let row = t.grid.axes.last().map_or(1, |a| a.points.len()).max(1);
            for chunk in t.grid.values.chunks(row) {
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
        assert_eq!(g.grid.values, vec![1.0, 2.0, 3.0, 3.0]);
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
