//! `pdsim._native`: the thin PyO3 layer over `pdsim::api`. Every function releases the GIL
//! while pdsim works (`Python::detach`), catches a panic at the boundary (a bug must not crash
//! the interpreter) and raises one exception type, `NativeError(exit_code, message, key, file,
//! line)`, which the Python package (`python/pdsim/`) turns into `pdsim.Error`'s subclass for
//! that exit code. Arguments arrive already in the CLI's words (`--set`/`--vary` strings); the
//! Python layer does the translating, this file only crosses the boundary.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use pdsim::api::{self, ColumnData, Failure, Source};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

create_exception!(
    _native,
    NativeError,
    PyException,
    "A pdsim error: args = (exit_code, message, key, file, line)."
);

/// Runs `f` without the GIL, a panic caught and an error raised as `NativeError`.
fn guard<T: Send>(
    py: Python<'_>,
    what: &str,
    f: impl FnOnce() -> Result<T, pdsim::app::CliError> + Send,
) -> PyResult<T> {
    let out: Result<T, Failure> = py.detach(|| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Failure::of(&e)),
        Err(payload) => Err(Failure::internal(what, &*payload)),
    });
    out.map_err(|f| {
        NativeError::new_err((
            f.exit_code,
            f.message,
            f.key,
            f.file.map(|p| p.display().to_string()),
            f.line,
        ))
    })
}

/// A scenario: a file, or TOML text named by `path` (its folder resolves relative paths).
fn source(path: String, text: Option<String>) -> Source {
    match text {
        Some(text) => Source::Text {
            text,
            path: PathBuf::from(path),
        },
        None => Source::File(PathBuf::from(path)),
    }
}

/// `pdsim run -q`; returns the scenario's warnings.
#[pyfunction]
#[pyo3(signature = (path, text, seed, sets, out, summary_only, trace_events))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    path: String,
    text: Option<String>,
    seed: Option<u64>,
    sets: Vec<String>,
    out: String,
    summary_only: bool,
    trace_events: bool,
) -> PyResult<Vec<String>> {
    let req = api::RunRequest {
        scenario: source(path, text),
        seed,
        sets,
        out: out.into(),
        summary_only,
        trace_events,
    };
    guard(py, "run", move || api::run(&req).map(|d| d.notes))
}

#[allow(clippy::too_many_arguments)]
fn sweep_request(
    path: String,
    text: Option<String>,
    vary: Vec<String>,
    seeds: u32,
    jobs: Option<usize>,
    shard: Option<String>,
    sets: Vec<String>,
    out: String,
    resume: bool,
) -> api::SweepRequest {
    api::SweepRequest {
        scenario: source(path, text),
        vary,
        seeds,
        jobs,
        shard,
        sets,
        out: out.into(),
        resume,
    }
}

/// `pdsim sweep -q` into `out`.
#[pyfunction]
#[pyo3(signature = (path, text, vary, seeds, jobs, shard, sets, out, resume))]
#[allow(clippy::too_many_arguments)]
fn sweep(
    py: Python<'_>,
    path: String,
    text: Option<String>,
    vary: Vec<String>,
    seeds: u32,
    jobs: Option<usize>,
    shard: Option<String>,
    sets: Vec<String>,
    out: String,
    resume: bool,
) -> PyResult<()> {
    let req = sweep_request(path, text, vary, seeds, jobs, shard, sets, out, resume);
    guard(py, "sweep", move || api::sweep(&req).map(|_| ()))
}

/// `pdsim plan -q` into `out`; `rate = None` is `--max-rate`.
#[pyfunction]
#[pyo3(signature = (path, text, vary, seeds, jobs, sets, out, resume, rate, tolerance, full_grid, no_early_stop))]
#[allow(clippy::too_many_arguments)]
fn plan(
    py: Python<'_>,
    path: String,
    text: Option<String>,
    vary: Vec<String>,
    seeds: u32,
    jobs: Option<usize>,
    sets: Vec<String>,
    out: String,
    resume: bool,
    rate: Option<f64>,
    tolerance: f64,
    full_grid: bool,
    no_early_stop: bool,
) -> PyResult<()> {
    let req = api::PlanRequest {
        sweep: sweep_request(path, text, vary, seeds, jobs, None, sets, out, resume),
        rate,
        tolerance,
        full_grid,
        no_early_stop,
    };
    guard(py, "plan", move || api::plan(&req).map(|_| ()))
}

/// `pdsim plan --model … -q` (the one-line question) into `out`; `rate = None` is
/// `--max-rate`.
#[pyfunction]
#[pyo3(signature = (model, gpu, isl, osl, ttft, tpot, gpus, rate, seeds, jobs, out, resume))]
#[allow(clippy::too_many_arguments)]
fn plan_question(
    py: Python<'_>,
    model: String,
    gpu: String,
    isl: u32,
    osl: u32,
    ttft: f64,
    tpot: f64,
    gpus: u32,
    rate: Option<f64>,
    seeds: u32,
    jobs: Option<usize>,
    out: String,
    resume: bool,
) -> PyResult<()> {
    let q = pdsim::app::oneline::Question {
        model,
        gpu,
        isl,
        osl,
        ttft_ms: ttft,
        tpot_ms: tpot,
        gpus,
    };
    guard(py, "plan", move || {
        api::plan_question(&q, rate, seeds, jobs, std::path::Path::new(&out), resume).map(|_| ())
    })
}

/// `pdsim lint [--sglang-version V] --json`: (the report's JSON, compatible).
#[pyfunction]
#[pyo3(signature = (prefill, decode, model_config, profile, sglang_version=None))]
fn lint(
    py: Python<'_>,
    prefill: String,
    decode: String,
    model_config: Option<String>,
    profile: String,
    sglang_version: Option<String>,
) -> PyResult<(String, bool)> {
    let q = pdsim::diagnose::lint::LintQuestion {
        prefill,
        decode,
        model_config: model_config.map(PathBuf::from),
        profile,
        version: sglang_version,
    };
    guard(py, "lint", move || api::lint(&q))
}

/// `pdsim layout [--mamba-ssm-dtype T] [--pp-size N --pp-rank S] --json`.
#[pyfunction]
#[pyo3(signature = (model, tp, page_size, kv_cache_dtype, enable_unified_memory, rank, mamba_ssm_dtype=None, pp_size=1, pp_rank=0))]
#[allow(clippy::too_many_arguments)]
fn layout(
    py: Python<'_>,
    model: String,
    tp: u32,
    page_size: u32,
    kv_cache_dtype: String,
    enable_unified_memory: bool,
    rank: u32,
    mamba_ssm_dtype: Option<String>,
    pp_size: u32,
    pp_rank: u32,
) -> PyResult<String> {
    let a = pdsim::app::layout::LayoutRequest {
        model,
        tp,
        page_size,
        kv_cache_dtype,
        enable_unified_memory,
        mamba_ssm_dtype,
        rank,
        pp_size,
        pp_rank,
        json: true,
    };
    guard(py, "layout", move || api::layout(&a))
}

/// `pdsim explain`: its text.
#[pyfunction]
#[pyo3(signature = (path, markdown, out, sets))]
fn explain(
    py: Python<'_>,
    path: String,
    markdown: bool,
    out: Option<String>,
    sets: Vec<String>,
) -> PyResult<String> {
    let a = pdsim::app::explain::ExplainRequest {
        path: path.into(),
        markdown,
        out: out.map(PathBuf::from),
        sets,
    };
    guard(py, "explain", move || api::explain(&a))
}

/// A scenario dictionary (as JSON) as TOML text.
#[pyfunction]
fn toml_of_json(py: Python<'_>, json: String) -> PyResult<String> {
    guard(py, "toml_of_json", move || api::toml_of_json(&json))
}

/// Every `[slo]` key as `(key, kind, meaning, population)` (`pdsim::api::slo_keys`).
#[pyfunction]
fn slo_keys() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    api::slo_keys()
}

/// A results CSV as columns: `(rows, [(name, kind, values, mask, categories)])`, `kind` one of
/// `int`, `float`, `bool`, `text`; `values` bytes for `numpy.frombuffer`, `mask` bytes or
/// `None`, `categories` a list for `text`.
#[pyfunction]
fn read_columns<'py>(py: Python<'py>, path: String) -> PyResult<Bound<'py, PyTuple>> {
    let (columns, rows) = guard(py, "read_columns", move || {
        api::read_columns(std::path::Path::new(&path))
    })?;
    let list = PyList::empty(py);
    for c in columns {
        let none = || py.None().into_bound(py);
        let bytes = |b: &[u8]| PyBytes::new(py, b).into_any();
        let mask = |m: &Option<Vec<u8>>| m.as_deref().map_or_else(none, bytes);
        let item = match &c.data {
            ColumnData::Int { values, mask: m } => (c.name, "int", bytes(values), mask(m), none()),
            ColumnData::Float { values } => (c.name, "float", bytes(values), none(), none()),
            ColumnData::Bool { values, mask: m } => {
                (c.name, "bool", bytes(values), mask(m), none())
            }
            ColumnData::Text { codes, categories } => (
                c.name,
                "text",
                bytes(codes),
                none(),
                PyList::new(py, categories)?.into_any(),
            ),
        };
        list.append(item)?;
    }
    PyTuple::new(py, [rows.into_pyobject(py)?.into_any(), list.into_any()])
}

/// The module. Importing it keeps the interpreter's own SIGINT handling: a sweep never
/// installs pdsim's exit-on-interrupt handler inside Python.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    pdsim::app::signals::keep_host_handlers();
    m.add("NativeError", m.py().get_type::<NativeError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    for f in [
        wrap_pyfunction!(run, m)?,
        wrap_pyfunction!(sweep, m)?,
        wrap_pyfunction!(plan, m)?,
        wrap_pyfunction!(plan_question, m)?,
        wrap_pyfunction!(lint, m)?,
        wrap_pyfunction!(layout, m)?,
        wrap_pyfunction!(explain, m)?,
        wrap_pyfunction!(toml_of_json, m)?,
        wrap_pyfunction!(read_columns, m)?,
        wrap_pyfunction!(slo_keys, m)?,
    ] {
        m.add_function(f)?;
    }
    Ok(())
}
