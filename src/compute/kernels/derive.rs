//! Deriving one GPU's kernel tables from AIConfigurator's measured sglang database
//! (`aiconfigurator-core` `systems/data/<system>/<op>/sglang/<version>/*.parquet`, Apache-2.0):
//! what `pdsim calibrate --from-aiconfigurator DIR --gpu G --sglang-version V --out FILE`
//! runs, and how the tables in `kernels/` were made.
//!
//! # Which version
//!
//! For each op the files of version `V` when it has them, otherwise the newest older version
//! that does (never a newer one: a kernel from the future is not what `V` runs). Each table
//! records the version it came from (`version=`), so a file's provenance is exact per op.
//!
//! # What is kept (all latencies in microseconds)
//!
//! | table | axes | kept from the source |
//! |---|---|---|
//! | `gemm dtype=D` | `m, n, k` | every `n`, `k`; `m` at 24 of its 74 points (1 … 32,768: the powers of two with the steps between them the source measures densely below 256; the `+1` points that probe tile boundaries are left out) |
//! | `context_attention head_dim=H attn=A kv=K family=F` | `heads, batch, isl` | the framework's default attention kernel on that GPU (`fa3` on Hopper, `trtllm_mha` on Blackwell, `flash_attention` on A100, `flashinfer` on L40S), no sliding window; per query-head count one configuration: `family=mha` the one with as many KV heads as query heads, `family=gqa` the one with the most KV heads ≤ min(8, heads/2) (prefill attention's time follows the query heads: at 4k tokens 32 query heads take 0.249–0.317 ms over 1–32 KV heads on H100) |
//! | `generation_attention head_dim=H kv=K family=F` | `kv_heads, batch, context` | as above; per KV-head count one configuration: `mha`, or `gqa` with query heads nearest 8 × KV heads (decode attention's time follows the KV heads it reads: at batch 32 × 4k, 1 KV head takes 0.034–0.042 ms over 1–128 query heads); `context` is the sequence's length (the source's `isl + step`) |
//! | `context_mla dtype=D kv=K`, `generation_mla …` | `heads, batch, isl` / `context` | DeepSeek's MLA attention kernel per attention-TP rank (`heads` = 128 / TP) |
//! | `context_mla_module gemm=G kv=K`, `generation_mla_module …` | `heads, batch, isl` / `context` | the whole MLA module as sglang's DeepEP deployments run it — the attention with its `q_b`, `kv_b` (or the absorbed matmuls) and `o` projections — with the GPU's default MLA kernel (FA3 on Hopper, TRT-LLM MLA on Blackwell) |
//! | `moe dtype=D hidden=H inter=I topk=K experts=E split=tp\|ep` | `tp` or `ep`, `tokens` | sglang's fused MoE, `balanced` routing, `tokens` entering the layer over the whole instance; `split=tp` varies `moe_tp` at EP 1, `split=ep` varies `moe_ep` at TP 1 |
//! | `wideep_moe phase=P dtype=D hidden=H inter=I topk=K experts=E` | `ep, tokens` | DeepEP's MoE (DeepGEMM) behind DeepEP, `uniform` routing, `tokens` over the whole instance |
//! | `deepep kernel=ll\|normal leg=dispatch\|combine hidden=H topk=K` | `nodes, tokens` | DeepEP's dispatch or combine per call, nodes of 8 GPUs, tokens per rank (`normal` at DeepEP's default 20 SMs); per shape the experts count 256 (or the largest measured: the bytes do not depend on it); one table per version that adds node counts a newer one lacks (0.5.12 one node; 0.5.6.post2 one to eight on Hopper) |
//! | `allreduce mode=graph\|eager` | `gpus, elements` | sglang's custom all-reduce of `elements` BF16 values; `graph` as a CUDA graph replays it (decode), `eager` as a prefill launches it |
//!
//! Routing skew is pdsim's own (`compute::moe::skew`: EPLB and redundant experts), applied on
//! top of the balanced tables, so the tables' power-law rows are not kept.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::grid::{Axis, Grid};
use super::tables::{KernelTables, Meta, Table, version_key};

/// pdsim's GPU presets that AIConfigurator measured, with its system name for each.
pub const SYSTEMS: &[(&str, &str)] = &[
    ("a100-sxm", "a100_sxm"),
    ("h100-sxm", "h100_sxm"),
    ("h200", "h200_sxm"),
    ("b200", "b200_sxm"),
    ("gb200", "gb200"),
    ("b300", "b300_sxm"),
    ("gb300", "gb300"),
    ("l40s", "l40s"),
];

/// AIConfigurator's system name for a pdsim preset, or the name itself when it already is one.
pub fn system_of(gpu: &str) -> Option<&'static str> {
    SYSTEMS
        .iter()
        .find(|(p, s)| *p == gpu || *s == gpu)
        .map(|(_, s)| *s)
}

/// pdsim's preset for an AIConfigurator system name (or a preset name).
pub fn preset_of(gpu: &str) -> Option<&'static str> {
    SYSTEMS
        .iter()
        .find(|(p, s)| *p == gpu || *s == gpu)
        .map(|(p, _)| *p)
}

/// The `m` points kept of the GEMM tables.
const GEMM_M: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 192.0, 224.0, 256.0, 512.0,
    768.0, 1024.0, 1536.0, 2048.0, 3072.0, 4096.0, 8192.0, 16384.0, 32768.0,
];

/// Attention kernels in the order sglang's default picks them (`server_args.py`,
/// `ServerArgs._handle_attention_backend_compatibility` at v0.5.x: FlashAttention 3 on Hopper,
/// TRT-LLM MHA on Blackwell, FlashInfer elsewhere; the A100 tables name FlashAttention).
const ATTENTION_LANES: &[&str] = &[
    "fa3",
    "trtllm_mha",
    "flash_attention",
    "flashinfer",
    "triton",
];

/// MLA kernels in order of preference (the only lane the tables have on most GPUs first).
const MLA_LANES: &[&str] = &[
    "flash_attention",
    "trtllm_mla",
    "flashmla",
    "flashinfer",
    "fa3",
    "triton",
];

/// Fused-MoE kernels in order of preference: sglang's Triton fused MoE (the default runner
/// for BF16 and FP8 block weights), then FlashInfer's TRT-LLM MoE (the one the tables have
/// for NVFP4 on Blackwell), then the rest.
const MOE_LANES: &[&str] = &[
    "sglang_fused_moe_triton",
    "sglang_flashinfer_trtllm_moe",
    "sglang_flashinfer_cutlass_moe",
];

/// One column of a Parquet file read whole.
#[derive(Clone, Debug)]
enum Col {
    Num(Vec<f64>),
    Str(Vec<String>),
}

/// A Parquet file read into columns by name.
struct Frame {
    path: PathBuf,
    rows: usize,
    cols: BTreeMap<String, Col>,
}

impl Frame {
    /// Reads every row of `path`.
    fn read(path: &Path) -> Result<Self, String> {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use parquet::record::Field;
        let shown = path.display();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
        let reader = SerializedFileReader::new(file)
            .map_err(|e| format!("{shown}: not a Parquet file: {e}"))?;
        let mut cols: BTreeMap<String, Col> = BTreeMap::new();
        let mut rows = 0;
        let iter = reader
            .get_row_iter(None)
            .map_err(|e| format!("{shown}: cannot read its rows: {e}"))?;
        for row in iter {
            let row = row.map_err(|e| format!("{shown}: row {rows}: {e}"))?;
            for (name, field) in row.get_column_iter() {
                let col = cols.entry(name.clone()).or_insert_with(|| match field {
                    Field::Str(_) => Col::Str(Vec::new()),
                    _ => Col::Num(Vec::new()),
                });
                match (col, field) {
                    (Col::Str(v), Field::Str(s)) => v.push(s.clone()),
                    (Col::Str(v), other) => v.push(other.to_string()),
                    (Col::Num(v), f) => v.push(match f {
                        Field::Double(x) => *x,
                        Field::Float(x) => f64::from(*x),
                        Field::Long(x) => *x as f64,
                        Field::Int(x) => f64::from(*x),
                        Field::Short(x) => f64::from(*x),
                        Field::ULong(x) => *x as f64,
                        Field::UInt(x) => f64::from(*x),
                        Field::Bool(b) => f64::from(u8::from(*b)),
                        _ => f64::NAN,
                    }),
                }
            }
            rows += 1;
        }
        Ok(Self {
            path: path.to_path_buf(),
            rows,
            cols,
        })
    }

    fn num(&self, name: &str) -> Result<&[f64], String> {
        match self.cols.get(name) {
            Some(Col::Num(v)) => Ok(v),
            Some(Col::Str(_)) => Err(format!(
                "{}: column `{name}` holds text where a number was expected",
                self.path.display()
            )),
            None => Err(format!(
                "{}: no column `{name}` (columns: {})",
                self.path.display(),
                self.cols.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }

    fn str(&self, name: &str) -> Result<&[String], String> {
        match self.cols.get(name) {
            Some(Col::Str(v)) => Ok(v),
            Some(Col::Num(_)) => Err(format!(
                "{}: column `{name}` holds numbers where text was expected",
                self.path.display()
            )),
            None => Err(format!(
                "{}: no column `{name}` (columns: {})",
                self.path.display(),
                self.cols.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        }
    }

    /// The text column `name`, or `default` on every row when the file has no such column
    /// (older tables lack `window_size`, `kernel_source`).
    fn str_or(&self, name: &str, default: &str) -> Vec<String> {
        match self.cols.get(name) {
            Some(Col::Str(v)) => v.clone(),
            Some(Col::Num(v)) => v.iter().map(|x| format!("{x}")).collect(),
            None => vec![default.to_string(); self.rows],
        }
    }

    fn num_or(&self, name: &str, default: f64) -> Vec<f64> {
        match self.cols.get(name) {
            Some(Col::Num(v)) => v.clone(),
            _ => vec![default; self.rows],
        }
    }
}

/// The numeric columns `names` of the Parquet file `path`, row by row: what a test reads to
/// check a model against a table this module does not derive (AIConfigurator's DeepEP
/// dispatch/combine tables, `tests/fidelity/deepep_tables.rs`). A missing or text column is an
/// error naming the file and the columns it has.
pub fn numeric_columns(path: &Path, names: &[&str]) -> Result<Vec<Vec<f64>>, String> {
    let f = Frame::read(path)?;
    names
        .iter()
        .map(|n| f.num(n).map(<[f64]>::to_vec))
        .collect()
}

/// What a derivation read, for the command's report and the file's header.
#[derive(Clone, Debug, Default)]
pub struct Derivation {
    /// The tables.
    pub tables: KernelTables,
    /// Per source file used: the path relative to the system folder.
    pub files: Vec<String>,
    /// Ops the database does not have for this GPU at or below the version (pdsim prices
    /// them analytically).
    pub missing: Vec<String>,
}

/// The system folder under `dir`: `dir` may be AIConfigurator's `systems` folder, its parent
/// (the package root), or `systems/data`.
fn data_dir(dir: &Path, system: &str) -> Result<PathBuf, String> {
    for cand in [
        dir.join("data").join(system),
        dir.join("systems").join("data").join(system),
        dir.join(system),
    ] {
        if cand.is_dir() {
            return Ok(cand);
        }
    }
    Err(format!(
        "{}: no measurements for `{system}` here; give AIConfigurator's `systems` folder (it holds data/{system}/gemm/sglang/…)",
        dir.display()
    ))
}

/// The sglang versions measured for `op` under `data`, each with its files.
fn versions(data: &Path, op: &str) -> Vec<String> {
    let dir = data.join(op).join("sglang");
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|s| version_key(s));
    v
}

/// Every sglang version measured for any op of `system` under `dir`, oldest first.
pub fn available_versions(dir: &Path, gpu: &str) -> Result<Vec<String>, String> {
    let system = system_of(gpu).ok_or_else(|| unknown_gpu(gpu))?;
    let data = data_dir(dir, system)?;
    let mut all = BTreeSet::new();
    for op in ["gemm", "attention", "mla", "moe", "comm"] {
        all.extend(versions(&data, op));
    }
    let mut v: Vec<String> = all.into_iter().collect();
    v.sort_by_key(|s| version_key(s));
    Ok(v)
}

fn unknown_gpu(gpu: &str) -> String {
    format!(
        "--gpu {gpu:?}: AIConfigurator measured no such GPU; valid: {}",
        SYSTEMS
            .iter()
            .map(|(p, s)| format!("{p} ({s})"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The file `file` of op `op` at `version`, or at the newest older version that has it.
fn pick(data: &Path, op: &str, file: &str, version: &str) -> Option<(String, PathBuf)> {
    let want = version_key(version);
    versions(data, op)
        .into_iter()
        .rev()
        .filter(|v| version_key(v) <= want)
        .map(|v| {
            let p = data.join(op).join("sglang").join(&v).join(file);
            (v, p)
        })
        .find(|(_, p)| p.is_file())
}

/// A table file's parser: the frame and its sglang version to pdsim's tables.
type Parse = dyn Fn(&Frame, &str) -> Result<Vec<Table>, String>;

/// Derives the tables of `gpu` (a pdsim preset or AIConfigurator system name) at sglang
/// `version` from the database under `dir`.
pub fn derive(dir: &Path, gpu: &str, version: &str) -> Result<Derivation, String> {
    let system = system_of(gpu).ok_or_else(|| unknown_gpu(gpu))?;
    let data = data_dir(dir, system)?;
    let known = available_versions(dir, gpu)?;
    if !known.iter().any(|v| v == version) {
        return Err(format!(
            "--sglang-version {version:?}: no table of {system} was measured at that version; measured: {}",
            known.join(", ")
        ));
    }
    let mut d = Derivation::default();
    let mut device = String::new();
    let rel = |p: &Path| {
        p.strip_prefix(&data)
            .map(|r| format!("{system}/{}", r.display()))
            .unwrap_or_else(|_| p.display().to_string())
    };

    // GEMMs: required.
    let (v, path) = pick(&data, "gemm", "gemm_perf.parquet", version).ok_or_else(|| {
        format!(
            "{system}: no GEMM table at or below sglang {version}: pdsim needs it for every forward"
        )
    })?;
    let f = Frame::read(&path)?;
    device = f.str_or("device", "").first().cloned().unwrap_or(device);
    d.files.push(rel(&path));
    d.tables.tables.extend(gemm(&f, &v)?);

    // Attention: required.
    for (file, is_gen) in [
        ("context_attention_perf.parquet", false),
        ("generation_attention_perf.parquet", true),
    ] {
        let (v, path) = pick(&data, "attention", file, version).ok_or_else(|| {
            format!(
                "{system}: no {file} at or below sglang {version}: pdsim needs it for every forward"
            )
        })?;
        let f = Frame::read(&path)?;
        d.files.push(rel(&path));
        d.tables.tables.extend(attention(&f, &v, is_gen)?);
    }

    // Optional tables: MLA (DeepSeek-architecture attention), the DeepEP-era MLA modules
    // (attention with its q_b, kv_b and o projections), MoE, DeepEP's MoE, and the custom
    // all-reduce (a GPU without NVLink peers has none).
    let mut optional = |op: &str, file: &str, parse: &Parse| {
        match pick(&data, op, file, version) {
            Some((v, path)) => {
                let f = Frame::read(&path)?;
                d.files.push(rel(&path));
                d.tables.tables.extend(parse(&f, &v)?);
            }
            None => d.missing.push(format!("{op}/{file}")),
        }
        Ok::<(), String>(())
    };
    optional("mla", "context_mla_perf.parquet", &|f, v| mla(f, v, false))?;
    optional("mla", "generation_mla_perf.parquet", &|f, v| {
        mla(f, v, true)
    })?;
    optional("mla", "wideep_context_mla_perf.parquet", &|f, v| {
        mla_module(f, v, false)
    })?;
    optional("mla", "wideep_generation_mla_perf.parquet", &|f, v| {
        mla_module(f, v, true)
    })?;
    optional("moe", "moe_perf.parquet", &moe)?;
    optional("moe", "wideep_context_moe_perf.parquet", &|f, v| {
        wideep_moe(f, v, "context")
    })?;
    optional("moe", "wideep_generation_moe_perf.parquet", &|f, v| {
        wideep_moe(f, v, "generation")
    })?;
    optional("comm", "custom_allreduce_perf.parquet", &allreduce)?;

    // DeepEP's dispatch and combine (`comm/…/wideep_deepep_{ll,normal}_perf.parquet`): every
    // version at or below `version` that measures node counts a newer one lacks (0.5.12
    // measures one node, 0.5.6.post2 one to eight on Hopper), each table its own version.
    for (kind, file) in [
        ("ll", "wideep_deepep_ll_perf.parquet"),
        ("normal", "wideep_deepep_normal_perf.parquet"),
    ] {
        let want = version_key(version);
        let mut covered: BTreeMap<(u64, u64), f64> = BTreeMap::new();
        let mut any = false;
        for v in versions(&data, "comm").into_iter().rev() {
            let path = data.join("comm").join("sglang").join(&v).join(file);
            if version_key(&v) > want || !path.is_file() {
                continue;
            }
            let f = Frame::read(&path)?;
            let tables = deepep(&f, &v, kind, &mut covered)?;
            if !tables.is_empty() {
                any = true;
                d.files.push(rel(&path));
                d.tables.tables.extend(tables);
            }
        }
        if !any {
            d.missing.push(format!("comm/{file}"));
        }
    }

    d.tables.meta = Meta {
        gpu: preset_of(gpu).unwrap_or(gpu).to_string(),
        system: system.to_string(),
        device,
        sglang: version.to_string(),
        source: String::new(),
    };
    Ok(d)
}

/// The distinct values of `v`, sorted.
fn uniq(v: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut u: Vec<f64> = v.into_iter().filter(|x| x.is_finite()).collect();
    u.sort_by(f64::total_cmp);
    u.dedup();
    u
}

/// A grid over `axes` filled from `(coordinates, latency ms)` points: each point at its cell,
/// microseconds; cells with no point stay `NaN`. Points off the axes are skipped.
fn grid_of(axes: Vec<Axis>, points: impl IntoIterator<Item = (Vec<f64>, f64)>) -> Grid {
    let n: usize = axes.iter().map(|a| a.points.len()).product();
    let mut values = vec![f64::NAN; n];
    let index: Vec<BTreeMap<u64, usize>> = axes
        .iter()
        .map(|a| {
            a.points
                .iter()
                .enumerate()
                .map(|(i, p)| (p.to_bits(), i))
                .collect()
        })
        .collect();
    'points: for (x, ms) in points {
        let mut off = 0;
        for (d, xd) in x.iter().enumerate() {
            let Some(&i) = index[d].get(&xd.to_bits()) else {
                continue 'points;
            };
            off = off * axes[d].points.len() + i;
        }
        if ms.is_finite() && ms > 0.0 {
            // Repeated measurements of one point: keep the first (the sources have none).
            if values[off].is_nan() {
                values[off] = ms * 1e3;
            }
        }
    }
    Grid { axes, values }
}

fn axis(name: &str, points: Vec<f64>) -> Axis {
    Axis {
        name: name.to_string(),
        points,
    }
}

fn table(name: &str, attrs: &[(&str, String)], grid: Grid) -> Table {
    Table::new(
        name.to_string(),
        attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
        grid,
    )
}

fn gemm(f: &Frame, version: &str) -> Result<Vec<Table>, String> {
    let (dt, ks) = (f.str("gemm_dtype")?, f.str_or("kernel_source", "sglang"));
    let (m, n, k, lat) = (f.num("m")?, f.num("n")?, f.num("k")?, f.num("latency")?);
    let mut out = Vec::new();
    for dtype in uniq_str(dt) {
        let rows: Vec<usize> = (0..f.rows).filter(|&i| dt[i] == dtype).collect();
        let ms = uniq(rows.iter().map(|&i| m[i]));
        let ms: Vec<f64> = GEMM_M.iter().copied().filter(|x| ms.contains(x)).collect();
        let ns = uniq(rows.iter().map(|&i| n[i]));
        let kk = uniq(rows.iter().map(|&i| k[i]));
        let grid = grid_of(
            vec![axis("m", ms), axis("n", ns), axis("k", kk)],
            rows.iter().map(|&i| (vec![m[i], n[i], k[i]], lat[i])),
        );
        out.push(table(
            "gemm",
            &[
                ("dtype", dtype.clone()),
                ("version", version.to_string()),
                ("kernel", ks[rows[0]].clone()),
            ],
            grid,
        ));
    }
    Ok(out)
}

fn uniq_str(v: &[String]) -> Vec<String> {
    let s: BTreeSet<&String> = v.iter().collect();
    s.into_iter().cloned().collect()
}

/// The first of `lanes` that `have` holds, else the first of `have` in sorted order.
fn lane<'a>(have: &'a BTreeSet<String>, lanes: &[&str]) -> Option<&'a String> {
    lanes
        .iter()
        .find_map(|l| have.get(*l))
        .or_else(|| have.iter().next())
}

fn attention(f: &Frame, version: &str, generation: bool) -> Result<Vec<Table>, String> {
    let ks = f.str_or("kernel_source", "flash_attention");
    let window = f.num_or("window_size", 0.0);
    let (b, isl, h, g, d) = (
        f.num("batch_size")?,
        f.num("isl")?,
        f.num("num_heads")?,
        f.num("num_key_value_heads")?,
        f.num("head_dim")?,
    );
    let step = f.num_or("step", 0.0);
    let attn_dt = f.str_or("attn_dtype", "bfloat16");
    let kv_dt = f.str_or("kv_cache_dtype", "bfloat16");
    let lat = f.num("latency")?;
    let full: Vec<usize> = (0..f.rows).filter(|&i| window[i] == 0.0).collect();
    let have: BTreeSet<String> = full.iter().map(|&i| ks[i].clone()).collect();
    let Some(kernel) = lane(&have, ATTENTION_LANES).cloned() else {
        return Err(format!(
            "{}: no attention rows without a sliding window",
            f.path.display()
        ));
    };
    let rows: Vec<usize> = full.into_iter().filter(|&i| ks[i] == kernel).collect();
    // The groups: (head_dim, attn dtype (context only), kv dtype).
    let mut groups: BTreeSet<(u64, String, String)> = BTreeSet::new();
    for &i in &rows {
        let a = if generation {
            String::new()
        } else {
            attn_dt[i].clone()
        };
        groups.insert((d[i] as u64, a, kv_dt[i].clone()));
    }
    let mut out = Vec::new();
    for (hd, a, kv) in groups {
        let here: Vec<usize> = rows
            .iter()
            .copied()
            .filter(|&i| d[i] as u64 == hd && (generation || attn_dt[i] == a) && kv_dt[i] == kv)
            .collect();
        // The configurations measured: (query heads, kv heads).
        let configs: BTreeSet<(u64, u64)> =
            here.iter().map(|&i| (h[i] as u64, g[i] as u64)).collect();
        for family in ["mha", "gqa"] {
            // One configuration per key: query heads (context) or KV heads (generation).
            let mut chosen: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
            for &(qh, kh) in &configs {
                let key = if generation { kh } else { qh };
                let ok = match family {
                    "mha" => qh == kh,
                    _ => qh > kh,
                };
                if !ok {
                    continue;
                }
                let better = |cur: (u64, u64)| -> bool {
                    if family == "mha" {
                        return false;
                    }
                    if generation {
                        // Query heads nearest 8 × KV heads.
                        let t = 8.0 * kh as f64;
                        (qh as f64 / t).ln().abs() < (cur.0 as f64 / t).ln().abs()
                    } else {
                        // The most KV heads ≤ min(8, heads / 2); else the fewest.
                        let cap = 8.min(qh / 2).max(1);
                        let score = |k: u64| if k <= cap { k as i64 } else { -(k as i64) };
                        score(kh) > score(cur.1)
                    }
                };
                match chosen.get(&key) {
                    Some(cur) if !better(*cur) => {}
                    _ => {
                        chosen.insert(key, (qh, kh));
                    }
                }
            }
            if chosen.is_empty() {
                continue;
            }
            let keys: Vec<f64> = chosen.keys().map(|&k| k as f64).collect();
            let sel: Vec<usize> = here
                .iter()
                .copied()
                .filter(|&i| {
                    let key = if generation { g[i] } else { h[i] } as u64;
                    chosen.get(&key) == Some(&(h[i] as u64, g[i] as u64))
                })
                .collect();
            let bs = uniq(sel.iter().map(|&i| b[i]));
            let ctx = |i: usize| if generation { isl[i] + step[i] } else { isl[i] };
            let ls = uniq(sel.iter().map(|&i| ctx(i)));
            let grid = grid_of(
                vec![
                    axis(if generation { "kv_heads" } else { "heads" }, keys),
                    axis("batch", bs),
                    axis(if generation { "context" } else { "isl" }, ls),
                ],
                sel.iter().map(|&i| {
                    let key = if generation { g[i] } else { h[i] };
                    (vec![key, b[i], ctx(i)], lat[i])
                }),
            );
            let mut attrs = vec![("head_dim", hd.to_string())];
            if !generation {
                attrs.push(("attn", a.clone()));
            }
            attrs.extend([
                ("kv", kv.clone()),
                ("family", family.to_string()),
                ("version", version.to_string()),
                ("kernel", kernel.clone()),
            ]);
            let name = if generation {
                "generation_attention"
            } else {
                "context_attention"
            };
            out.push(table(name, &attrs, grid));
        }
    }
    Ok(out)
}

fn mla(f: &Frame, version: &str, generation: bool) -> Result<Vec<Table>, String> {
    let ks = f.str_or("kernel_source", "flash_attention");
    let have: BTreeSet<String> = ks.iter().cloned().collect();
    let Some(kernel) = lane(&have, MLA_LANES).cloned() else {
        return Ok(Vec::new());
    };
    let (h, b, isl, lat) = (
        f.num("num_heads")?,
        f.num("batch_size")?,
        f.num("isl")?,
        f.num("latency")?,
    );
    let step = f.num_or("step", 0.0);
    let dt = f.str_or("mla_dtype", "bfloat16");
    let kv = f.str_or("kv_cache_dtype", "bfloat16");
    let mut out = Vec::new();
    let groups: BTreeSet<(String, String)> = (0..f.rows)
        .filter(|&i| ks[i] == kernel)
        .map(|i| (dt[i].clone(), kv[i].clone()))
        .collect();
    for (mdt, kvt) in groups {
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| ks[i] == kernel && dt[i] == mdt && kv[i] == kvt)
            .collect();
        let ctx = |i: usize| if generation { isl[i] + step[i] } else { isl[i] };
        let grid = grid_of(
            vec![
                axis("heads", uniq(rows.iter().map(|&i| h[i]))),
                axis("batch", uniq(rows.iter().map(|&i| b[i]))),
                axis(
                    if generation { "context" } else { "isl" },
                    uniq(rows.iter().map(|&i| ctx(i))),
                ),
            ],
            rows.iter().map(|&i| (vec![h[i], b[i], ctx(i)], lat[i])),
        );
        out.push(table(
            if generation {
                "generation_mla"
            } else {
                "context_mla"
            },
            &[
                ("dtype", mdt.clone()),
                ("kv", kvt.clone()),
                ("version", version.to_string()),
                ("kernel", kernel.clone()),
            ],
            grid,
        ));
    }
    Ok(out)
}

/// MLA module kernels in order of preference: FlashAttention 3 on Hopper (sglang's default MLA
/// backend there), TRT-LLM MLA on Blackwell, then FlashInfer.
const MLA_MODULE_LANES: &[&str] = &["fa3", "trtllm_mla", "flashinfer"];

fn mla_module(f: &Frame, version: &str, generation: bool) -> Result<Vec<Table>, String> {
    let ks = f.str_or("kernel_source", "fa3");
    let have: BTreeSet<String> = ks.iter().cloned().collect();
    let Some(kernel) = lane(&have, MLA_MODULE_LANES).cloned() else {
        return Ok(Vec::new());
    };
    let (h, b, isl, lat) = (
        f.num("num_heads")?,
        f.num("batch_size")?,
        f.num("isl")?,
        f.num("latency")?,
    );
    let step = f.num_or("step", 0.0);
    let gemm = f.str_or("gemm_type", "fp8_block");
    let kv = f.str_or("kv_cache_dtype", "fp8");
    let groups: BTreeSet<(String, String)> = (0..f.rows)
        .filter(|&i| ks[i] == kernel)
        .map(|i| (gemm[i].clone(), kv[i].clone()))
        .collect();
    let mut out = Vec::new();
    for (g, k) in groups {
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| ks[i] == kernel && gemm[i] == g && kv[i] == k)
            .collect();
        let ctx = |i: usize| isl[i] + step[i];
        let grid = grid_of(
            vec![
                axis("heads", uniq(rows.iter().map(|&i| h[i]))),
                axis("batch", uniq(rows.iter().map(|&i| b[i]))),
                axis(
                    if generation { "context" } else { "isl" },
                    uniq(rows.iter().map(|&i| ctx(i))),
                ),
            ],
            rows.iter().map(|&i| (vec![h[i], b[i], ctx(i)], lat[i])),
        );
        out.push(table(
            if generation {
                "generation_mla_module"
            } else {
                "context_mla_module"
            },
            &[
                (
                    "gemm",
                    if g == "-" {
                        "fp8_block".to_string()
                    } else {
                        g.clone()
                    },
                ),
                ("kv", k.clone()),
                ("version", version.to_string()),
                ("kernel", kernel.clone()),
            ],
            grid,
        ));
    }
    Ok(out)
}

fn moe(f: &Frame, version: &str) -> Result<Vec<Table>, String> {
    let ks = f.str_or("kernel_source", "sglang");
    let dt = f.str("moe_dtype")?;
    let dist = f.str("distribution")?;
    let (tok, hid, inter, topk, e, tp, ep, lat) = (
        f.num("num_tokens")?,
        f.num("hidden_size")?,
        f.num("inter_size")?,
        f.num("topk")?,
        f.num("num_experts")?,
        f.num("moe_tp_size")?,
        f.num("moe_ep_size")?,
        f.num("latency")?,
    );
    type Shape = (String, u64, u64, u64, u64);
    let mut shapes: BTreeMap<Shape, BTreeSet<String>> = BTreeMap::new();
    for i in (0..f.rows).filter(|&i| dist[i] == "balanced") {
        shapes
            .entry((
                dt[i].clone(),
                hid[i] as u64,
                inter[i] as u64,
                topk[i] as u64,
                e[i] as u64,
            ))
            .or_default()
            .insert(ks[i].clone());
    }
    let mut out = Vec::new();
    for (shape, lanes) in shapes {
        let kernel = lane(&lanes, MOE_LANES).expect("a shape has a lane").clone();
        let (ref d, hh, ii, kk, ee) = shape;
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| {
                dist[i] == "balanced"
                    && ks[i] == kernel
                    && &dt[i] == d
                    && hid[i] as u64 == hh
                    && inter[i] as u64 == ii
                    && topk[i] as u64 == kk
                    && e[i] as u64 == ee
            })
            .collect();
        for split in ["tp", "ep"] {
            let sel: Vec<usize> = rows
                .iter()
                .copied()
                .filter(|&i| {
                    if split == "tp" {
                        ep[i] == 1.0
                    } else {
                        tp[i] == 1.0
                    }
                })
                .collect();
            let par = |i: usize| if split == "tp" { tp[i] } else { ep[i] };
            let ps = uniq(sel.iter().map(|&i| par(i)));
            if ps.len() < 2 && split == "ep" {
                continue;
            }
            let grid = grid_of(
                vec![
                    axis(split, ps),
                    axis("tokens", uniq(sel.iter().map(|&i| tok[i]))),
                ],
                sel.iter().map(|&i| (vec![par(i), tok[i]], lat[i])),
            );
            out.push(table(
                "moe",
                &[
                    ("dtype", d.clone()),
                    ("hidden", hh.to_string()),
                    ("inter", ii.to_string()),
                    ("topk", kk.to_string()),
                    ("experts", ee.to_string()),
                    ("split", split.to_string()),
                    ("version", version.to_string()),
                    ("kernel", kernel.clone()),
                ],
                grid,
            ));
        }
    }
    Ok(out)
}

fn wideep_moe(f: &Frame, version: &str, phase: &str) -> Result<Vec<Table>, String> {
    let dt = f.str("moe_dtype")?;
    let dist = f.str("distribution")?;
    let ks = f.str_or("kernel_source", "deepepmoe");
    let (tok, hid, inter, topk, e, ep, lat) = (
        f.num("num_tokens")?,
        f.num("hidden_size")?,
        f.num("inter_size")?,
        f.num("topk")?,
        f.num("num_experts")?,
        f.num("moe_ep_size")?,
        f.num("latency")?,
    );
    type Shape = (String, u64, u64, u64, u64);
    let shapes: BTreeSet<Shape> = (0..f.rows)
        .filter(|&i| dist[i] == "uniform")
        .map(|i| {
            (
                dt[i].clone(),
                hid[i] as u64,
                inter[i] as u64,
                topk[i] as u64,
                e[i] as u64,
            )
        })
        .collect();
    let mut out = Vec::new();
    for (d, hh, ii, kk, ee) in shapes {
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| {
                dist[i] == "uniform"
                    && dt[i] == d
                    && hid[i] as u64 == hh
                    && inter[i] as u64 == ii
                    && topk[i] as u64 == kk
                    && e[i] as u64 == ee
            })
            .collect();
        let grid = grid_of(
            vec![
                axis("ep", uniq(rows.iter().map(|&i| ep[i]))),
                axis("tokens", uniq(rows.iter().map(|&i| tok[i]))),
            ],
            rows.iter().map(|&i| (vec![ep[i], tok[i]], lat[i])),
        );
        out.push(table(
            "wideep_moe",
            &[
                ("phase", phase.to_string()),
                ("dtype", d.clone()),
                ("hidden", hh.to_string()),
                ("inter", ii.to_string()),
                ("topk", kk.to_string()),
                ("experts", ee.to_string()),
                ("version", version.to_string()),
                ("kernel", ks[rows[0]].clone()),
            ],
            grid,
        ));
    }
    Ok(out)
}

/// DeepEP's dispatch and combine per call (`kind` `ll`: the low-latency kernels a decode runs,
/// `avg_t_us`; `normal`: the normal kernels a prefill runs at DeepEP's default 20 SMs,
/// `transmit_us`), one table per leg and (hidden, top-k) over (nodes of 8 GPUs, tokens per
/// rank), microseconds — only where this version measures more nodes than `covered` (what
/// newer versions already gave) holds for that shape. The experts' count does not change the
/// bytes a token sends (one copy per expert in `ll`, per node in `normal`): of the counts
/// measured, 256 is kept, or else the largest.
fn deepep(
    f: &Frame,
    version: &str,
    kind: &str,
    covered: &mut BTreeMap<(u64, u64), f64>,
) -> Result<Vec<Table>, String> {
    let (dispatch, combine) = if kind == "ll" {
        (f.num("dispatch_avg_t_us")?, f.num("combine_avg_t_us")?)
    } else {
        (
            f.num("dispatch_transmit_us")?,
            f.num("combine_transmit_us")?,
        )
    };
    let (nodes, hid, topk, e, tok) = (
        f.num("node_num")?,
        f.num("hidden_size")?,
        f.num("num_topk")?,
        f.num("num_experts")?,
        f.num("num_token")?,
    );
    let sms = f.num_or("dispatch_sms", 20.0);
    let csms = f.num_or("combine_sms", 20.0);
    let ok = |i: usize| sms[i] == 20.0 && csms[i] == 20.0;
    let shapes: BTreeSet<(u64, u64)> = (0..f.rows)
        .filter(|&i| ok(i))
        .map(|i| (hid[i] as u64, topk[i] as u64))
        .collect();
    let mut out = Vec::new();
    for (hh, kk) in shapes {
        let of_shape = |i: usize| ok(i) && hid[i] as u64 == hh && topk[i] as u64 == kk;
        let counts = uniq((0..f.rows).filter(|&i| of_shape(i)).map(|i| e[i]));
        let experts = if counts.contains(&256.0) {
            256.0
        } else {
            counts[counts.len() - 1]
        };
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| of_shape(i) && e[i] == experts)
            .collect();
        let most = rows.iter().map(|&i| nodes[i]).fold(0.0, f64::max);
        let seen = covered.entry((hh, kk)).or_insert(0.0);
        if most <= *seen {
            continue;
        }
        *seen = most;
        for (leg, lat) in [("dispatch", dispatch), ("combine", combine)] {
            let grid = grid_of(
                vec![
                    axis("nodes", uniq(rows.iter().map(|&i| nodes[i]))),
                    axis("tokens", uniq(rows.iter().map(|&i| tok[i]))),
                ],
                // `grid_of` takes milliseconds.
                rows.iter().map(|&i| (vec![nodes[i], tok[i]], lat[i] / 1e3)),
            );
            out.push(table(
                "deepep",
                &[
                    ("kernel", kind.to_string()),
                    ("leg", leg.to_string()),
                    ("hidden", hh.to_string()),
                    ("topk", kk.to_string()),
                    ("version", version.to_string()),
                ],
                grid,
            ));
        }
    }
    Ok(out)
}

fn allreduce(f: &Frame, version: &str) -> Result<Vec<Table>, String> {
    let (n, size, lat) = (
        f.num("num_gpus")?,
        f.num("message_size")?,
        f.num("latency")?,
    );
    let dt = f.str_or("allreduce_dtype", "bfloat16");
    // 0.5.9+: `backend` sglang_graph / sglang_eager; 0.5.6: `implementation`.
    let mode: Vec<String> = if f.cols.contains_key("backend") {
        f.str_or("backend", "")
            .into_iter()
            .map(|b| {
                if b.contains("graph") {
                    "graph".to_string()
                } else {
                    "eager".to_string()
                }
            })
            .collect()
    } else {
        vec!["eager".to_string(); f.rows]
    };
    let mut out = Vec::new();
    for m in ["graph", "eager"] {
        let rows: Vec<usize> = (0..f.rows)
            .filter(|&i| mode[i] == m && dt[i] == "bfloat16")
            .collect();
        if rows.is_empty() {
            continue;
        }
        let grid = grid_of(
            vec![
                axis("gpus", uniq(rows.iter().map(|&i| n[i]))),
                axis("elements", uniq(rows.iter().map(|&i| size[i]))),
            ],
            rows.iter().map(|&i| (vec![n[i], size[i]], lat[i])),
        );
        out.push(table(
            "allreduce",
            &[("mode", m.to_string()), ("version", version.to_string())],
            grid,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numerically_with_post_releases_after() {
        let mut v = vec!["0.5.10", "0.5.6.post2", "0.5.9", "0.5.6", "0.5.14"];
        v.sort_by_key(|s| version_key(s));
        assert_eq!(v, ["0.5.6", "0.5.6.post2", "0.5.9", "0.5.10", "0.5.14"]);
    }

    #[test]
    fn gpus_map_both_ways() {
        assert_eq!(system_of("h100-sxm"), Some("h100_sxm"));
        assert_eq!(system_of("h100_sxm"), Some("h100_sxm"));
        assert_eq!(preset_of("b300_sxm"), Some("b300"));
        assert_eq!(system_of("h20"), None);
    }
}
