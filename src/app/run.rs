//! `pdsim run SCENARIO.toml [--seed N] [--out DIR] [--set KEY=VALUE]...`

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::CliError;
use crate::report::charts::{ChartInput, ImageFormat, SloMetric, SloTarget, render_charts};
use crate::report::html::write_index_html;
use crate::report::markdown::write_summary_md;
use crate::report::markers::{Marker, MarkerKind};
use crate::report::{CsvSink, IoError, Summary, write_json};
use crate::scenario::Scenario;
use crate::sim::World;

/// What `pdsim run` is asked: the command line's flags (`cli::run`) or a program's call
/// (`crate::api`).
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The scenario: a file, or a program's TOML text.
    pub scenario: super::Source,
    /// Overrides `run.seed`.
    pub seed: Option<u64>,
    /// Output folder (default `results/<run.name>/`).
    pub out: Option<PathBuf>,
    /// Overrides any scenario key by its dotted path, e.g. `pools.decode.server.tp_size=8`.
    pub sets: Vec<String>,
    /// Draw the charts as PNG instead of SVG (needs a build with `--features png`).
    pub png: bool,
    /// Print nothing on success.
    pub quiet: bool,
    /// Write `summary.json` and `run.json` only: no per-request, timeseries or link rows, no
    /// charts (for sweeps; the summary is byte-identical to a full run's).
    pub summary_only: bool,
    /// Also write `trace.json` (Chrome/Perfetto trace events: a track per instance and per
    /// transfer shard, a span per request phase, fault markers) for ui.perfetto.dev.
    pub trace_events: bool,
}

/// What a run produced.
pub struct RunOutput {
    /// The folder written.
    pub dir: PathBuf,
    /// The summary written to `summary.json`.
    pub summary: Summary,
    /// The scenario's warnings (what the CLI prints as `warning: …`).
    pub notes: Vec<String>,
}

/// Peak resident memory of this process (Linux `VmHWM`), bytes.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Loads the scenario (a file, or a program's TOML text) with `--seed` and `--set` applied.
pub fn load(args: &RunRequest) -> Result<Scenario, CliError> {
    let mut sets = args.sets.clone();
    if let Some(seed) = args.seed {
        sets.push(format!("run.seed={seed}"));
    }
    args.scenario.load(&sets)
}

/// Runs the scenario and writes every result file.
pub fn run(args: &RunRequest) -> Result<RunOutput, CliError> {
    let sc = match load(args) {
        Ok(sc) => sc,
        Err(e) => {
            // An invalid scenario is a failed run too: an earlier run's results in the folder
            // named by --out must not pass for this one's.
            // Under the folder's lock: a run another process is writing is not touched.
            if let Some(out) = args.out.as_deref().filter(|o| o.is_dir()) {
                let _ = super::outdir::OutDir::open(out, "run", &RESULT_FILES, false);
            }
            return Err(e);
        }
    };
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| super::default_out(&sc.name));
    // Warnings print under -q too (stderr): they change what the results mean (a
    // calibration measured elsewhere extrapolates every step time), and -q only quiets
    // progress and the summary (issue 40).
    for n in sc
        .notes
        .iter()
        .chain(&crate::assemble::slo_floor_notes(&sc))
    {
        super::sweep::note(&format!("warning: {n}"));
    }
    let format = if args.png {
        if !ImageFormat::Png.supported() {
            return Err(CliError::Flag {
                flag: "--png",
                message:
                    "--png needs a build with PNG support: cargo build --release --features png"
                        .into(),
            });
        }
        ImageFormat::Png
    } else {
        ImageFormat::Svg
    };
    if args.summary_only && args.trace_events {
        return Err(CliError::Conflict {
            flags: &["--trace-events", "--summary-only"],
            message:
                "--trace-events needs the request rows that --summary-only skips; use one of them"
                    .into(),
        });
    }
    let out = if args.summary_only {
        run_summary_only(&sc, &dir, !args.quiet)?
    } else {
        run_scenario_traced(&sc, &dir, !args.quiet, format, args.trace_events)?
    };
    if !args.quiet {
        super::print_out(&format!(
            "{}  results in {}\n",
            out.summary.human(&sc.name),
            dir.display()
        ))?;
    }
    Ok(out)
}

/// Runs a loaded scenario into `dir`.
pub fn run_scenario(sc: &Scenario, dir: &Path) -> Result<RunOutput, CliError> {
    run_scenario_with(sc, dir, false, ImageFormat::Svg)
}

/// A progress bar on stderr for runs longer than about a second, only when stderr is a
/// terminal (indicatif); silent otherwise.
struct Progress {
    enabled: bool,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    duration_ns: u64,
    max_requests: Option<u64>,
}

impl Progress {
    fn new(sc: &Scenario, show: bool) -> Self {
        use std::io::IsTerminal;
        Self {
            enabled: show && std::io::stderr().is_terminal(),
            started: Instant::now(),
            bar: None,
            duration_ns: sc.duration_ns,
            max_requests: sc.max_requests,
        }
    }

    fn update(&mut self, sim_ns: u64, events: u64, arrived: u64) {
        if !self.enabled || self.started.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let b = indicatif::ProgressBar::new(1000);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:40} {percent:>3}% of arrivals ({elapsed}) {msg}",
                )
                .expect("a valid template"),
            );
            b
        });
        // Arrivals end at the duration or at max_requests, whichever comes first.
        let by_time = sim_ns as f64 / self.duration_ns.max(1) as f64;
        let by_count = self
            .max_requests
            .map_or(0.0, |m| arrived as f64 / m.max(1) as f64);
        bar.set_position((by_time.max(by_count).min(1.0) * 1000.0) as u64);
        bar.set_message(format!(
            "{:.0} simulated s, {events} events",
            sim_ns as f64 / 1e9
        ));
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The files a run writes. A run removes them from its folder before it starts (and writes
/// the new ones beside, in staging), so a failed run never leaves an earlier run's
/// `summary.json` looking like its own.
pub const RESULT_FILES: [&str; 9] = [
    "summary.json",
    "run.json",
    "requests.csv",
    "timeseries.csv",
    "links.csv",
    "index.html",
    "summary.md",
    "trace.json",
    "charts",
];

/// Runs `body` into the staging folder of a locked `dir` (see [`super::outdir`]): earlier
/// results are cleared first, and the new files appear in `dir` only when the run succeeded,
/// `summary.json` last. If it fails, what it wrote is removed and `dir` holds no result.
fn fresh_run(
    dir: &Path,
    body: impl FnOnce(&Path) -> Result<RunOutput, CliError>,
) -> Result<RunOutput, CliError> {
    let out = super::outdir::OutDir::open(dir, "run", &RESULT_FILES, false)?;
    let mut done = body(out.staging()).map_err(|e| out.rename_error(e))?;
    out.install(&["run.json", "summary.json"])?;
    done.dir = dir.to_path_buf();
    Ok(done)
}

/// Runs a loaded scenario into `dir`, with a progress bar if `show_progress` and stderr is a
/// terminal.
pub fn run_scenario_with(
    sc: &Scenario,
    dir: &Path,
    show_progress: bool,
    charts: ImageFormat,
) -> Result<RunOutput, CliError> {
    run_scenario_traced(sc, dir, show_progress, charts, false)
}

/// The router's policies in words: one name when both sides share it.
fn router_words(r: &crate::config::RouterParams) -> String {
    if r.prefill == r.decode {
        r.prefill.as_str().to_string()
    } else {
        format!(
            "prefill {}, decode {}",
            r.prefill.as_str(),
            r.decode.as_str()
        )
    }
}

/// Both pools' configuration, the SLO and an empty per-instance table for the reports.
fn report_context(sc: &Scenario) -> crate::report::context::RunContext {
    use crate::report::context::{InstanceOutcomes, PoolFacts, RunContext};
    let mut ctx = RunContext {
        setup: format!(
            "router {}{}, sglang profile {}, {} transfer-queue shards per prefill, waiting timeout {} s",
            router_words(&sc.router),
            sc.aborts.map_or(String::new(), |a| format!(
                " (abort propagation {})",
                a.propagation.as_str()
            )),
            sc.sglang.profile.as_str(),
            sc.sglang.queue_size,
            sc.sglang.waiting_timeout_ns as f64 / 1e9
        ),
        ..RunContext::default()
    };
    // Where the step times come from: what every number of the report rests on.
    let _ = write!(
        ctx.setup,
        ". Step times: {}",
        crate::spec::calibration::describe(&sc.calibration, &sc.compute, &sc.gpu)
    );
    let profiled = sc.profiled_pools();
    if !profiled.is_empty() {
        let _ = write!(
            ctx.setup,
            " (pools {} read their measured profile instead)",
            profiled.join(", ")
        );
    }
    for (pi, p) in sc.pools.iter().enumerate() {
        let first = ctx.instances.len();
        let a = &p.server;
        let mut flags = format!(
            "--tp-size {} --page-size {} --kv-cache-dtype {} --chunked-prefill-size {} --mem-fraction-static {}",
            a.tp_size, a.page_size, a.kv_cache_dtype, a.chunked_prefill_size, a.mem_fraction_static
        );
        if a.attn_tp_size != a.tp_size {
            flags += &format!(" (attention TP {})", a.attn_tp_size);
        }
        if a.enable_unified_memory {
            flags += " --enable-unified-memory";
        }
        let par = &p.parallel;
        if par.enable_dp_attention {
            flags += &format!(" --enable-dp-attention --dp-size {}", par.dp_size);
        }
        if par.ep_size > 1 {
            flags += &format!(" --ep-size {}", par.ep_size);
            if par.moe_a2a_backend == crate::spec::server::A2aBackend::Deepep {
                flags += " --moe-a2a-backend deepep";
            }
            if par.enable_eplb {
                flags += &format!(
                    " --enable-eplb --ep-num-redundant-experts {}",
                    par.ep_num_redundant_experts
                );
            }
        }
        if par.enable_two_batch_overlap {
            flags += " --enable-two-batch-overlap";
        }
        if par.load_balance_method != crate::spec::server::LoadBalanceMethod::Auto {
            let name = serde_json::to_value(par.load_balance_method).unwrap_or_default();
            flags += &format!(" --load-balance-method {}", name.as_str().unwrap_or("auto"));
        }
        if let Some(m) = a.max_running_requests {
            flags += &format!(" --max-running-requests {m}");
        }
        // Every other flag the scenario sets (HiCache and its storage backend, the decode
        // offload, speculative decoding, …), as the launch line writes it.
        let set = crate::plan::launch::pool_flags(sc, pi, &mut Vec::new());
        for flag in set.split(" --").map(str::trim).filter(|f| !f.is_empty()) {
            let name = flag.split_whitespace().next().unwrap_or_default();
            let named = |f: &str| {
                f.split(" --")
                    .any(|g| g.trim_start_matches("--").split_whitespace().next() == Some(name))
            };
            if !named(&flags) {
                flags += &format!(" --{flag}");
            }
        }
        for _ in 0..p.servers() {
            ctx.instances.push(InstanceOutcomes {
                pool: p.name.clone(),
                role: p.role.as_str().into(),
                ..InstanceOutcomes::default()
            });
        }
        ctx.pools.push(PoolFacts {
            name: p.name.clone(),
            role: p.role.as_str().into(),
            // A pool that changes size: its slots, and how many serve at the start.
            instances: p.instances_text(
                first as u32,
                sc.lifecycle.as_ref().map(|lc| lc.initial_of(p.role)),
            ),
            model: p.model.name.clone(),
            flags,
        });
    }
    ctx
}

/// The instances and fault markers `trace.json` names.
fn trace_writer(sc: &Scenario, dir: &Path) -> Result<crate::report::trace::TraceWriter, IoError> {
    use crate::report::trace::{TraceInstance, TraceWriter};
    let mut instances = Vec::new();
    for p in &sc.pools {
        for _ in 0..p.servers() {
            instances.push(TraceInstance {
                instance: instances.len() as u32,
                pool: p.name.clone(),
                role: p.role.as_str(),
            });
        }
    }
    TraceWriter::create(
        &dir.join("trace.json"),
        &instances,
        sc.sglang.queue_size,
        crate::sglang::transfer::transfer_shard,
    )
}

/// `v` × 100 as a short percentage: `2`, `12.5`.
fn percent(v: f64) -> String {
    format!("{}", (v * 1e4).round() / 1e2)
}

/// The markers of `sc`'s faults and of what undoes them (a restart, a flap's end), by time,
/// for the charts, `trace.json` and the reports' events table. Times come from the validated
/// faults; names (links, NICs, pools) as the scenario wrote them.
fn fault_markers(sc: &Scenario) -> Vec<Marker> {
    use crate::config::FaultAction;
    use crate::fabric::Fault;
    let file = crate::scenario::resolved_file(sc);
    // `sc.faults` is the file's list stably sorted by time: sort the file's entries alike.
    let mut files: Vec<&crate::scenario::file::FaultSection> = file.faults.iter().collect();
    files.sort_by_key(|f| crate::engine::ns_from_secs_ceil(f.at_s));
    let mut out = Vec::new();
    let mut push = |at_ns, kind, label: String| out.push(Marker { at_ns, kind, label });
    for (spec, f) in sc.faults.iter().zip(files) {
        let at = spec.at_ns;
        let name = |v: &Option<String>| v.as_deref().unwrap_or("?").to_string();
        match &spec.action {
            FaultAction::Crash {
                instance,
                restart_ns,
            } => {
                let who = format!("{} #{}", name(&f.pool), instance.0);
                push(at, MarkerKind::Fault, format!("crash {who}"));
                if let Some(r) = restart_ns {
                    push(at + r, MarkerKind::Recovery, format!("restart {who}"));
                }
            }
            FaultAction::Fabric(fault) => match fault {
                Fault::LinkDown(_) => push(
                    at,
                    MarkerKind::Fault,
                    format!("link down {}", name(&f.link)),
                ),
                Fault::LinkUp(_) => push(
                    at,
                    MarkerKind::Recovery,
                    format!("link up {}", name(&f.link)),
                ),
                Fault::NicDown(_) => {
                    push(at, MarkerKind::Fault, format!("NIC down {}", name(&f.nic)))
                }
                Fault::NicUp(_) => {
                    push(at, MarkerKind::Recovery, format!("NIC up {}", name(&f.nic)))
                }
                Fault::NicFlap { down_ns, .. } => {
                    push(at, MarkerKind::Fault, format!("NIC flap {}", name(&f.nic)));
                    push(
                        at + down_ns,
                        MarkerKind::Recovery,
                        format!("NIC up {} (flap over)", name(&f.nic)),
                    );
                }
                Fault::Degrade { fraction, .. } if *fraction >= 1.0 => push(
                    at,
                    MarkerKind::Recovery,
                    format!("{} at full capacity", name(&f.link)),
                ),
                Fault::Degrade { fraction, .. } => push(
                    at,
                    MarkerKind::Fault,
                    format!("{} at {} % capacity", name(&f.link), percent(*fraction)),
                ),
                Fault::Loss { rate, .. } if *rate == 0.0 => push(
                    at,
                    MarkerKind::Recovery,
                    format!("no loss on {}", name(&f.link)),
                ),
                Fault::Loss { rate, .. } => push(
                    at,
                    MarkerKind::Fault,
                    format!("{} % loss on {}", percent(*rate), name(&f.link)),
                ),
                // Not written by scenarios (the simulation's own crash of an instance's
                // flows); named by the file's kind should one ever come from a file.
                _ => push(at, MarkerKind::Fault, f.kind.as_str().to_string()),
            },
        }
    }
    // Restarts and flap ends land later than their fault: back in time order (stable).
    out.sort_by_key(|m| m.at_ns);
    out
}

/// The `[slo]` targets the CDFs draw.
fn slo_targets(sc: &Scenario) -> Vec<SloTarget> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut v = Vec::new();
    if let Some(t) = sc.slo.ttft_ns {
        v.push(SloTarget {
            metric: SloMetric::Ttft,
            ms: ms(t),
            quantile: None,
        });
    }
    if let Some(t) = sc.slo.tpot_ns {
        v.push(SloTarget {
            metric: SloMetric::Tpot,
            ms: ms(t),
            quantile: None,
        });
    }
    v
}

/// [`run_scenario_with`], also writing `trace.json` when `trace` is set. Result files of an
/// earlier run in `dir` are removed first, and again if this run fails, so a failed run never
/// leaves a stale summary behind.
pub fn run_scenario_traced(
    sc: &Scenario,
    dir: &Path,
    show_progress: bool,
    charts: ImageFormat,
    trace: bool,
) -> Result<RunOutput, CliError> {
    fresh_run(dir, |staging| {
        write_full_run(sc, staging, show_progress, charts, trace)
    })
}

fn write_full_run(
    sc: &Scenario,
    dir: &Path,
    show_progress: bool,
    charts: ImageFormat,
    trace: bool,
) -> Result<RunOutput, CliError> {
    let started = Instant::now();
    let mut sink = CsvSink::create(dir)?;
    if sc.workload.has_sessions() {
        sink = sink.with_sessions(dir)?;
    }
    if sc.lifecycle.is_some() {
        sink = sink.with_fleet(dir)?;
        // The pools chart draws attainment over the day.
        sink.finish_rates =
            crate::report::rates::FinishRates::with_ttft_target(sc.slo.thresholds().ttft_ns);
    }
    if trace {
        sink.trace = Some(trace_writer(sc, dir)?);
    }
    sink.context = report_context(sc);
    let io = in_dir(dir);
    let sim = simulate(sc, &mut sink, show_progress).map_err(&io)?;
    // What the step models the run used could not price: the setup line's last sentence.
    if !sim.step_time_fallbacks.is_empty() {
        let _ = write!(
            sink.context.setup,
            ". Not in the tables, priced otherwise: {}",
            sim.step_time_fallbacks.join("; ")
        );
    }
    sink.context.events = crate::report::markers::merge(fault_markers(sc), &sim.worker_deaths);
    if let Some(t) = sink.trace.take() {
        t.finish(&sink.context.events)?;
    }
    let (stats, summary, pages) = (sim.stats, sim.summary, sim.kv_pages);
    let fallbacks = sim.step_time_fallbacks;
    let (ttft, tpot, transfer_shape) = (sim.ttft, sim.tpot, sim.transfer_shape);
    sink.flush().map_err(io)?;
    write_json(&dir.join("summary.json"), &summary)?;
    let charts = render_charts(
        &ChartInput {
            run_name: &sc.name,
            ttft: &ttft,
            tpot: &tpot,
            timeseries: &sink.timeseries_rows,
            summary: &summary,
            sample: &sink.sample(),
            finish_rates: &sink.finish_rates,
            markers: &sink.context.events,
            slo: &slo_targets(sc),
            transfer_shape: &transfer_shape,
        },
        dir,
        charts,
    )?;
    write_index_html(dir, &sc.name, &summary, &charts, &sink.context)?;
    write_summary_md(dir, &sc.name, &summary, &sink.context)?;
    write_run_json(sc, dir, &pages, fallbacks, stats.events, started)?;
    Ok(RunOutput {
        dir: dir.to_path_buf(),
        summary,
        notes: sc.notes.clone(),
    })
}

/// What one simulation produced, before any file but the streamed rows is written.
struct Simulated {
    stats: crate::metrics::summary::RunTotals,
    summary: Summary,
    kv_pages: Vec<u32>,
    step_time_fallbacks: Vec<String>,
    ttft: crate::metrics::histogram::Histogram,
    tpot: crate::metrics::histogram::Histogram,
    /// RDMA writes and transfer time by transfer start, for the fragmentation chart.
    transfer_shape: crate::metrics::fragmentation::TransferShape,
    /// Transfer workers that died, for the reports' markers.
    worker_deaths: Vec<crate::metrics::WorkerDeath>,
}

/// Runs `sc` to the end, streaming rows to `sink`.
fn simulate(
    sc: &Scenario,
    sink: &mut dyn crate::metrics::Sink,
    show_progress: bool,
) -> std::io::Result<Simulated> {
    let mut world = World::new(sc, sink);
    let mut bar = Progress::new(sc, show_progress);
    let crate::sim::RunResult {
        stats,
        summary,
        kv_pages,
        step_time_fallbacks,
    } = world.run_with_progress(&mut |t, events, arrived| bar.update(t, events, arrived))?;
    bar.finish();
    Ok(Simulated {
        summary,
        kv_pages,
        step_time_fallbacks,
        ttft: world.collector.ttft(),
        tpot: world.collector.tpot(),
        transfer_shape: world.collector.transfer_shape.clone(),
        worker_deaths: world.collector.worker_deaths.clone(),
        stats,
    })
}

/// Runs a loaded scenario and returns its summary, writing nothing (`pdsim check` without
/// `--out`, `pdsim explain` of a scenario): the same summary a run would write.
pub fn summarize(sc: &Scenario) -> Result<Summary, CliError> {
    let sim = simulate(sc, &mut crate::metrics::NullSink, false)
        .map_err(|e| IoError::from_io(e, &sc.source))?;
    Ok(sim.summary)
}

/// Runs a loaded scenario into `dir`, writing `summary.json` and `run.json` only.
pub fn run_summary_only(
    sc: &Scenario,
    dir: &Path,
    show_progress: bool,
) -> Result<RunOutput, CliError> {
    fresh_run(dir, |staging| {
        write_summary_only(sc, staging, show_progress)
    })
}

fn write_summary_only(
    sc: &Scenario,
    dir: &Path,
    show_progress: bool,
) -> Result<RunOutput, CliError> {
    let started = Instant::now();
    let sim = simulate(sc, &mut crate::metrics::NullSink, show_progress).map_err(in_dir(dir))?;
    write_json(&dir.join("summary.json"), &sim.summary)?;
    write_run_json(
        sc,
        dir,
        &sim.kv_pages,
        sim.step_time_fallbacks,
        sim.stats.events,
        started,
    )?;
    Ok(RunOutput {
        dir: dir.to_path_buf(),
        summary: sim.summary,
        notes: sc.notes.clone(),
    })
}

/// `run.json`: the resolved scenario, the instances, and host facts of this run.
fn write_run_json(
    sc: &Scenario,
    dir: &Path,
    pages: &[u32],
    step_time_fallbacks: Vec<String>,
    events: u64,
    started: Instant,
) -> Result<(), CliError> {
    use crate::report::schema::{HostFacts, InstanceFacts, RunRecord};
    use serde::Deserialize;
    let wall = started.elapsed().as_secs_f64();
    let mut instances = Vec::new();
    let mut i = 0u32;
    for pool in &sc.pools {
        for _ in 0..pool.servers() {
            instances.push(InstanceFacts {
                instance: i,
                pool: pool.name.clone(),
                role: pool.role.as_str().to_string(),
                kv_pages: pages[i as usize],
            });
            i += 1;
        }
    }
    // The resolved scenario as its typed file, so `run.json` is written and read back through
    // one type (`report::schema::RunRecord`).
    let scenario = crate::scenario::file::ScenarioFile::deserialize(&sc.resolved)
        .expect("the resolved scenario is a scenario file");
    let facts = RunRecord {
        pdsim_version: env!("CARGO_PKG_VERSION").to_string(),
        // Absolute, so `explain` run from another folder rebuilds the scenario (its relative
        // paths resolve against this file's folder).
        scenario_file: std::path::absolute(&sc.source)
            .unwrap_or_else(|_| sc.source.clone())
            .display()
            .to_string(),
        seed: sc.seed,
        scenario,
        instances,
        step_times: crate::spec::calibration::describe(&sc.calibration, &sc.compute, &sc.gpu),
        step_time_fallbacks,
        host: HostFacts {
            wall_s: wall,
            events_per_s: events as f64 / wall.max(1e-9),
            peak_rss_bytes: peak_rss_bytes(),
        },
    };
    write_json(&dir.join("run.json"), &facts)?;
    Ok(())
}

/// An I/O error in the output folder `dir`: on the file the sink named, else on `dir`.
fn in_dir(dir: &Path) -> impl Fn(std::io::Error) -> IoError + '_ {
    move |e| IoError::from_io(e, dir)
}
