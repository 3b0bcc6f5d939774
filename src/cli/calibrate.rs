//! `pdsim calibrate MEASUREMENTS... --model M --gpu G [--tp N] [--kv-cache-dtype D]
//! [--base NAME] --out FILE`: fits the step-time model to a user's measurements, prints the
//! error per regime before and after, and writes a calibration file that
//! `hardware.calibration` names. Formats: `compute::measure`; the fit: `compute::fit`. The fit
//! is of the roofline (a base with kernel tables starts from its roofline parameters); a
//! scenario that names the written file prices its steps by that roofline.
//!
//! `pdsim calibrate --from-aiconfigurator DIR --gpu G --sglang-version V --out FILE`: derives
//! one GPU's kernel tables from AIConfigurator's measured sglang database
//! (`compute::kernels::derive`) into the file `hardware.calibration` names (the files in
//! `kernels/` were made this way).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::CliError;
use crate::compute::fit::{self, RegimeError, Setup, StepPoint};
use crate::compute::measure;
use crate::spec::calibration::{self as cal, CalibrationFile, ComputeParams, MeasuredOn};
use crate::spec::{gpu, server};

/// Arguments of `pdsim calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Measurement files: a step-time CSV (phase,tokens,batch_size,context_tokens,time_ms),
    /// sglang bench_one_batch result JSON lines, sglang bench_serving result JSON lines, an
    /// sglang server log (its `Prefill batch` / `Decode batch` lines), or scrapes of a running
    /// sglang's Prometheus /metrics one after another.
    #[arg(required_unless_present = "from_aiconfigurator")]
    pub measurements: Vec<PathBuf>,
    /// The model measured: a preset or a Hugging Face config.json.
    #[arg(long, required_unless_present = "from_aiconfigurator")]
    pub model: Option<String>,
    /// The GPU measured (a preset; with --from-aiconfigurator also AIConfigurator's system
    /// name, e.g. h100_sxm).
    #[arg(long)]
    pub gpu: String,
    /// Derive kernel tables from AIConfigurator's database instead of fitting measurements:
    /// its `systems` folder (`pip install aiconfigurator-core`, then
    /// `.../site-packages/aiconfigurator_core/systems`).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["measurements", "model", "tp", "kv_cache_dtype", "base"])]
    pub from_aiconfigurator: Option<PathBuf>,
    /// With --from-aiconfigurator: the sglang version whose kernels to take (each op at that
    /// version, or the newest older one measured).
    #[arg(long, requires = "from_aiconfigurator")]
    pub sglang_version: Option<String>,
    /// GPUs per instance (tensor parallel size) of the measured server.
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// `--kv-cache-dtype` of the measured server.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: String,
    /// The calibration to start from; parameters the measurements cannot see keep its values.
    #[arg(long, default_value = cal::DEFAULT_CALIBRATION)]
    pub base: String,
    /// Where to write the calibration file (TOML).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs the fit (or the derivation), prints the report and writes the file.
pub fn run(a: &CalibrateArgs) -> Result<(), CliError> {
    if let Some(dir) = &a.from_aiconfigurator {
        return from_aiconfigurator(a, dir);
    }
    let model = a
        .model
        .as_deref()
        .expect("clap requires --model without --from-aiconfigurator");
    let gpu = gpu::gpu_preset(&a.gpu).ok_or_else(|| {
        CliError::flag(
            "--gpu",
            format!(
                "--gpu {:?}: unknown GPU preset; valid presets: {}",
                a.gpu,
                gpu::GPU_PRESETS.join(", ")
            ),
        )
    })?;
    let spec = crate::app::layout::load_model(model)?;
    if a.tp == 0 || a.tp > 1024 {
        return Err(CliError::flag(
            "--tp",
            format!("--tp {}: must be in 1..=1024 (GPUs per instance)", a.tp),
        ));
    }
    if !server::KV_CACHE_DTYPES.contains(&a.kv_cache_dtype.as_str()) {
        return Err(CliError::flag(
            "--kv-cache-dtype",
            format!(
                "--kv-cache-dtype {:?}: valid values are {}",
                a.kv_cache_dtype,
                server::KV_CACHE_DTYPES.join(", ")
            ),
        ));
    }
    let mut base = cal::named(&a.base, &gpu).ok_or_else(|| {
        CliError::flag(
            "--base",
            format!(
                "--base {:?}: valid calibrations are {}",
                a.base,
                cal::CALIBRATIONS.join(", ")
            ),
        )
    })?;
    // The fit moves the roofline's parameters, and the file it writes is a roofline
    // calibration: a base with kernel tables starts from its roofline (the efficiencies its
    // GPU's balance gives), or the fit would tune parameters the tables override.
    base.kernels = None;
    let args = crate::spec::ServerArgs {
        radix_cache: None,
        ..crate::spec::ServerArgs::sglang_defaults(a.tp, 1, &a.kv_cache_dtype)
    };
    let kv_dtype_bytes = args
        .kv_dtype_bytes(spec.activation_bytes)
        .expect("a checked dtype");
    if let Some(m) = a.measurements.iter().find(|m| super::same_file(m, &a.out)) {
        return Err(CliError::flag(
            "--out",
            format!(
                "--out {}: is the measurement file {}; writing the calibration there would destroy the measurements — give another --out",
                a.out.display(),
                m.display()
            ),
        ));
    }
    let mut points: Vec<StepPoint> = Vec::new();
    for path in &a.measurements {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::input(path, format!("{name}: cannot read measurements: {e}")))?;
        let read = measure::read(&name, &text).map_err(|m| CliError::input(path, m))?;
        for n in &read.notes {
            crate::app::sweep::note(&format!("note: {n}"));
        }
        points.extend(read.points);
    }
    physical(&points)?;
    let setup = Setup {
        gpu,
        model: spec,
        tp: a.tp,
        kv_dtype_bytes,
    };
    let fitted = fit::fit(&setup, &base, &points);
    let before = fit::report(&setup, &base, &points);
    let after = fit::report(&setup, &fitted, &points);
    let file = CalibrationFile {
        measured: MeasuredOn {
            model: model.to_string(),
            gpu: a.gpu.clone(),
            tp: a.tp,
            files: a
                .measurements
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            points: u32::try_from(points.len()).unwrap_or(u32::MAX),
            prefill_tokens: range(
                points
                    .iter()
                    .filter(|p| p.phase != fit::Phase::Decode)
                    .map(|p| p.tokens),
            ),
            decode_batch: range(
                points
                    .iter()
                    .filter(|p| p.phase == fit::Phase::Decode)
                    .map(|p| p.seqs),
            ),
        },
        params: fitted.clone(),
    };
    // Atomic: a crash or a full disk leaves the previous calibration whole, never half of one.
    crate::app::outdir::write_atomic(&a.out, file.to_toml().as_bytes())?;
    for w in on_bounds(&fitted) {
        crate::app::sweep::note(&format!("warning: {w}"));
    }
    super::print_out(&render(
        &a.base,
        &base,
        &fitted,
        &before,
        &after,
        points.len(),
        a,
    ))
}

/// The smallest and largest of `xs`, `None` for none.
fn range(xs: impl Iterator<Item = u32>) -> Option<[u32; 2]> {
    xs.fold(None, |r, x| match r {
        None => Some([x, x]),
        Some([lo, hi]) => Some([lo.min(x), hi.max(x)]),
    })
}

/// `--from-aiconfigurator DIR`: derives `--gpu`'s kernel tables at `--sglang-version` and
/// writes them (atomically) to `--out`, with the licence and provenance lines in its header;
/// prints what was read and what the database lacks.
fn from_aiconfigurator(a: &CalibrateArgs, dir: &std::path::Path) -> Result<(), CliError> {
    use crate::compute::kernels::derive;
    if !dir.is_dir() {
        return Err(CliError::input(
            dir,
            format!(
                "--from-aiconfigurator {}: not a folder; give AIConfigurator's `systems` folder (pip install aiconfigurator-core==0.12.0; it is site-packages/aiconfigurator_core/systems)",
                dir.display()
            ),
        ));
    }
    if derive::system_of(&a.gpu).is_none() {
        return Err(CliError::flag(
            "--gpu",
            format!(
                "--gpu {:?}: AIConfigurator measured no such GPU; valid: {}",
                a.gpu,
                derive::SYSTEMS
                    .iter()
                    .map(|(p, s)| format!("{p} ({s})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    let Some(version) = a.sglang_version.as_deref() else {
        let known = derive::available_versions(dir, &a.gpu).map_err(|m| CliError::input(dir, m))?;
        return Err(CliError::flag(
            "--sglang-version",
            format!(
                "--sglang-version is required with --from-aiconfigurator; measured for {}: {}",
                a.gpu,
                known.join(", ")
            ),
        ));
    };
    let d = derive::derive(dir, &a.gpu, version).map_err(|m| {
        if m.starts_with("--sglang-version") {
            CliError::flag("--sglang-version", m)
        } else {
            CliError::input(dir, m)
        }
    })?;
    let mut tables = d.tables;
    tables.meta.source = format!(
        "aiconfigurator-core {} systems/data/{}",
        aiconfigurator_version(dir),
        tables.meta.system
    );
    let header = provenance_header(&tables.meta.source, &d.files);
    let text = tables.to_text(&header);
    crate::app::outdir::write_atomic(&a.out, text.as_bytes())?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "derived {} tables for {} ({}) at sglang {version} from {} files:",
        tables.tables.len(),
        tables.meta.gpu,
        tables.meta.device,
        d.files.len()
    );
    for (v, names) in tables.versions() {
        let _ = writeln!(s, "  sglang {v}: {}", names.join(", "));
    }
    if !d.missing.is_empty() {
        let _ = writeln!(
            s,
            "not measured for this GPU at or below {version} (priced by the analytic model): {}",
            d.missing.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "wrote {} ({} bytes); use it with hardware.calibration = \"{}\"",
        a.out.display(),
        text.len(),
        a.out.display()
    );
    super::print_out(&s)
}

/// The package version beside `systems` (`aiconfigurator_core-X.dist-info` in site-packages),
/// or "(version unknown)".
fn aiconfigurator_version(systems: &std::path::Path) -> String {
    let site = systems
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().and_then(|q| q.parent()).map(|q| q.to_path_buf()));
    site.and_then(|s| std::fs::read_dir(s).ok())
        .and_then(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find_map(|n| {
                    n.strip_prefix("aiconfigurator_core-")
                        .and_then(|r| r.strip_suffix(".dist-info"))
                        .map(str::to_string)
                })
        })
        .unwrap_or_else(|| "(version unknown)".into())
}

/// The licence and provenance lines every derived file carries.
pub fn provenance_header(source: &str, files: &[String]) -> Vec<String> {
    let mut h = vec![
        "pdsim kernel tables: measured sglang kernel latencies (microseconds) for one GPU.".into(),
        format!("Derived by `pdsim calibrate --from-aiconfigurator` from {source}"),
        "(NVIDIA's AIConfigurator performance database). SPDX-License-Identifier: Apache-2.0"
            .into(),
        "Copyright (c) 2025-2026 NVIDIA CORPORATION & AFFILIATES; derived subset and format".into(),
        "by pdsim. Licence text: kernels/LICENSE.Apache-2.0.txt. Files read:".into(),
    ];
    h.extend(files.iter().map(|f| format!("  {f}")));
    h
}

/// The shortest and longest step time `calibrate` accepts, ms: 1 µs is below any GPU kernel
/// launch (a value in seconds or nanoseconds written as ms, or a typo); an hour is no step.
pub const STEP_MS_RANGE: (f64, f64) = (1e-3, 3.6e6);

/// Refuses measurements no GPU produced (exit 2 naming the file and line): a step time that is
/// not finite, ≤ 0, below 1 µs or above an hour, or a step with no tokens.
fn physical(points: &[StepPoint]) -> Result<(), CliError> {
    let (lo, hi) = STEP_MS_RANGE;
    for p in points {
        if !(p.ms.is_finite() && p.ms >= lo && p.ms <= hi) {
            return Err(CliError::input(
                &p.origin,
                format!(
                    "{}: step time {} ms is not a physical measurement; it must be between {lo} ms (1 µs) and {hi} ms (an hour) — are the times in another unit?",
                    p.origin, p.ms
                ),
            ));
        }
    }
    Ok(())
}

/// Fitted parameters that ended on a bound of the fit (the bounds of `compute::fit`'s
/// parameters: efficiencies in (1e-4, 1], times up to 1 s): the data pushed the model past
/// what it can express, so the fit there is a clamp, not a measurement.
fn on_bounds(p: &ComputeParams) -> Vec<String> {
    let mut out = Vec::new();
    let fractions = [
        ("prefill_flops_efficiency", p.prefill_flops_efficiency),
        ("decode_flops_efficiency", p.decode_flops_efficiency),
        ("hbm_efficiency", p.hbm_efficiency),
        ("kv_hbm_efficiency", p.kv_hbm_efficiency),
    ];
    for (name, v) in fractions {
        if v >= 1.0 - 1e-9 {
            out.push(format!("the fit put {name} at its upper bound 1.0 (the measurements are faster than the roofline allows: check --gpu, --tp and the model)"));
        } else if v <= 1e-4 * (1.0 + 1e-6) {
            out.push(format!("the fit put {name} at its lower bound 1e-4 (the measurements are far slower than the hardware: check the time unit and --gpu)"));
        }
    }
    let times = [
        ("prefill_overhead_s", p.prefill_overhead_s),
        ("prefill_per_seq_overhead_s", p.prefill_per_seq_overhead_s),
        ("decode_overhead_s", p.decode_overhead_s),
        ("decode_per_seq_overhead_s", p.decode_per_seq_overhead_s),
        ("first_token_path_s", p.first_token_path_s),
    ];
    for (name, v) in times {
        if v >= 1.0 - 1e-9 {
            out.push(format!(
                "the fit put {name} at its upper bound of 1 s per step: check the time unit"
            ));
        }
    }
    if p.prefill_mfu_half_tokens >= 1e6 * (1.0 - 1e-9) {
        out.push("the fit put prefill_mfu_half_tokens at its upper bound 1e6".into());
    }
    out
}

/// The report: error per regime under the base calibration and the fit, and the fitted
/// parameters next to the base's.
fn render(
    base_name: &str,
    base: &ComputeParams,
    fitted: &ComputeParams,
    before: &[RegimeError],
    after: &[RegimeError],
    n: usize,
    a: &CalibrateArgs,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{n} measurements of {} on {} × {}; error per regime (|predicted / measured − 1|):",
        a.model.as_deref().unwrap_or("?"),
        a.tp,
        a.gpu
    );
    let _ = writeln!(
        s,
        "{:<26} {:>6} {:>12} {:>12} {:>12} {:>12}  worst point (fit)",
        "regime", "points", "base median", "base worst", "fit median", "fit worst"
    );
    for (b, f) in before.iter().zip(after) {
        let _ = writeln!(
            s,
            "{:<26} {:>6} {:>11.1}% {:>11.1}% {:>11.1}% {:>11.1}%  {}",
            f.regime,
            f.points,
            100.0 * b.median,
            100.0 * b.worst,
            100.0 * f.median,
            100.0 * f.worst,
            f.worst_at
        );
    }
    let _ = writeln!(s, "\nparameters ({base_name} → fitted):");
    let (bt, ft) = (
        toml::to_string(base).unwrap_or_default(),
        toml::to_string(fitted).unwrap_or_default(),
    );
    for (bl, fl) in bt.lines().zip(ft.lines()) {
        let value = |l: &str| {
            l.split_once(" = ")
                .map(|x| x.1.to_string())
                .unwrap_or_default()
        };
        let key = bl.split_once(" = ").map_or(bl, |x| x.0);
        let (bv, fv) = (value(bl), value(fl));
        let mark = if bv == fv { "" } else { "  *" };
        let _ = writeln!(s, "  {key:<28} {bv:>24} → {fv:<24}{mark}");
    }
    let _ = writeln!(
        s,
        "\nwrote {} (use it with hardware.calibration = \"{}\")",
        a.out.display(),
        a.out.display()
    );
    s
}
