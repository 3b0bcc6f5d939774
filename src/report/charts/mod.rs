//! Charts of one run (docs/architecture.md §4 `charts/`): TTFT and TPOT CDFs, throughput, queue depth, KV
//! usage and utilisation over time, the outcome breakdown, a per-request phase timeline, RDMA
//! writes per transfer over the run and, in runs with sessions only, the prompt cached by turn.
//! The CDFs show the `[slo]` targets; the throughput chart shows failed and corrupted requests
//! per second beside completed ones; every time chart marks the injected faults, recoveries and
//! transfer-worker deaths.
//!
//! Every chart is 900 × 500 px with a title naming the run, axis labels with units, and a legend
//! panel on the right wherever it shows more than one series. Charts read metrics only.
//!
//! **SVG output is byte-stable**: the same input gives the same bytes. Nothing here reads a
//! clock, draws a random number or iterates a `HashMap`; instances are ordered by index
//! (`BTreeMap`), and text is laid out with plotters' built-in width estimate, so no font is
//! needed. With the `png` cargo feature, PNGs are drawn with the bundled DejaVu Sans
//! (`assets/fonts/`), which then also supplies the text metrics of the SVGs: those stay
//! byte-stable for a given build, but differ by a few pixels between builds with and without
//! `png`.

mod cdf;
mod markers;
mod outcomes;
mod series;
mod sessions;
mod style;

/// The colours every chart uses, so the sweep report (`plan::report`) matches the run report.
pub(crate) use style::PALETTE;
mod timeline;

#[cfg(test)]
pub(crate) mod fixture;
#[cfg(test)]
mod tests;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::metrics::fragmentation::TransferShape;
use crate::metrics::{Histogram, TimeseriesRow};

use crate::report::markers::Marker;
use crate::report::rates::FinishRates;
use crate::report::{IoError, Summary};
use crate::vocab::RequestRow;

pub use cdf::{SloMetric, SloTarget};

use cdf::{cdf_chart, slo_lines};
use outcomes::outcomes_chart;
use series::{Metric, fragmentation_chart, instance_chart, pools_chart, throughput_chart};
use sessions::sessions_chart;
use style::*;
use timeline::timeline_chart;

/// What the charts are drawn from.
pub struct ChartInput<'a> {
    /// Run name, shown in every title.
    pub run_name: &'a str,
    /// Time to first token, ns values.
    pub ttft: &'a Histogram,
    /// Time per output token, ns values.
    pub tpot: &'a Histogram,
    /// One row per (simulated second, instance), as in `timeseries.csv`.
    pub timeseries: &'a [TimeseriesRow],
    /// The run's summary (outcome counts and error kinds).
    pub summary: &'a Summary,
    /// A few dozen requests for the timeline (the first [`MAX_TIMELINE_ROWS`] are drawn).
    pub sample: &'a [RequestRow],
    /// Requests finished per second by outcome (the throughput chart's bottom panel).
    pub finish_rates: &'a FinishRates,
    /// Faults, recoveries and transfer-worker deaths, by time: a labelled line on every time
    /// chart.
    pub markers: &'a [Marker],
    /// `[slo]` targets: labelled lines on the CDF of their latency.
    pub slo: &'a [SloTarget],
    /// RDMA writes per request and transfer time by transfer start (the fragmentation chart).
    pub transfer_shape: &'a TransferShape,
}

/// File format of the charts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// `.svg`, byte-stable; always available.
    Svg,
    /// `.png`; needs the `png` cargo feature, else [`render_charts`] returns an
    /// [`io::ErrorKind::Unsupported`] error.
    Png,
}

impl ImageFormat {
    /// File extension without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Svg => "svg",
            ImageFormat::Png => "png",
        }
    }

    /// Whether this build can write the format.
    pub fn supported(self) -> bool {
        match self {
            ImageFormat::Svg => true,
            ImageFormat::Png => cfg!(feature = "png"),
        }
    }
}

/// One chart; [`Chart::ALL`] is the order [`render_charts`] writes them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Chart {
    /// CDF of time to first token, ms.
    TtftCdf,
    /// CDF of time per output token, ms.
    TpotCdf,
    /// Output tokens/s; arrivals and prefills/s; completed, failed and corrupted requests/s.
    Throughput,
    /// Queued requests and running batch per instance over time.
    QueueDepth,
    /// KV pages used / total per instance over time.
    KvUsage,
    /// Compute busy fraction and link utilisation per instance over time.
    Utilisation,
    /// Requests by outcome and error kind.
    Outcomes,
    /// Phases of sampled requests on a time axis.
    Timeline,
    /// RDMA writes per request and transfer time by when the transfer started: the decay a
    /// fragmenting KV free list causes.
    Fragmentation,
    /// Mean prompt per turn index, cached and recomputed, with the hit share: only in runs
    /// with sessions ([`Chart::for_summary`]), so other runs keep their files.
    Sessions,
    /// Instances serving and starting per pool, arrivals/s and TTFT attainment over time: only
    /// in runs whose pools change size.
    Pools,
}

impl Chart {
    /// Every chart, in file order.
    pub const ALL: [Chart; 9] = [
        Chart::TtftCdf,
        Chart::TpotCdf,
        Chart::Throughput,
        Chart::QueueDepth,
        Chart::KvUsage,
        Chart::Utilisation,
        Chart::Outcomes,
        Chart::Timeline,
        Chart::Fragmentation,
    ];

    /// Charts drawn only when the run has what they show, in file order after [`Chart::ALL`].
    pub const CONDITIONAL: [Chart; 2] = [Chart::Sessions, Chart::Pools];

    /// The charts of a run with summary `s`: [`Chart::ALL`], then each of
    /// [`Chart::CONDITIONAL`] whose data the run has.
    pub fn for_summary(s: &Summary) -> Vec<Chart> {
        let mut charts = Chart::ALL.to_vec();
        if s.sessions.is_some() {
            charts.push(Chart::Sessions);
        }
        if s.autoscaling.is_some() {
            charts.push(Chart::Pools);
        }
        charts
    }

    /// File stem under `charts/`.
    pub fn name(self) -> &'static str {
        match self {
            Chart::TtftCdf => "ttft_cdf",
            Chart::TpotCdf => "tpot_cdf",
            Chart::Throughput => "throughput",
            Chart::QueueDepth => "queue_depth",
            Chart::KvUsage => "kv_usage",
            Chart::Utilisation => "utilisation",
            Chart::Outcomes => "outcomes",
            Chart::Timeline => "timeline",
            Chart::Fragmentation => "transfer_writes",
            Chart::Sessions => "sessions",
            Chart::Pools => "pools",
        }
    }

    /// Title without the run name.
    pub fn title(self) -> &'static str {
        match self {
            Chart::TtftCdf => "Time to first token (TTFT), CDF",
            Chart::TpotCdf => "Time per output token (TPOT), CDF",
            Chart::Throughput => "Throughput over time",
            Chart::QueueDepth => "Queue depth and running batch per instance",
            Chart::KvUsage => "KV cache usage per instance",
            Chart::Utilisation => "Compute and link utilisation per instance",
            Chart::Outcomes => "Request outcomes",
            Chart::Timeline => "Request timeline (sampled requests)",
            Chart::Fragmentation => "RDMA writes and transfer time per request over the run",
            Chart::Sessions => "Prompt tokens cached and recomputed by turn",
            Chart::Pools => "Pools, demand and TTFT attainment over time",
        }
    }

    /// Looks a chart up by its file stem.
    pub fn from_name(name: &str) -> Option<Chart> {
        Chart::ALL
            .into_iter()
            .chain(Chart::CONDITIONAL)
            .find(|c| c.name() == name)
    }
}

/// Width and height of every chart, px.
pub const SIZE: (u32, u32) = (900, 500);
/// Requests drawn on the timeline at most.
pub const MAX_TIMELINE_ROWS: usize = 40;
/// Instances drawn one line each at most; with more, each pool is drawn as its mean and max.
pub const MAX_INSTANCE_LINES: usize = 10;

/// Writes `charts/<name>.<ext>` under `dir` for every chart of the run
/// ([`Chart::for_summary`]) and returns the paths written, relative to `dir`, in that order.
pub fn render_charts(
    input: &ChartInput,
    dir: &Path,
    format: ImageFormat,
) -> Result<Vec<PathBuf>, IoError> {
    let charts_dir = dir.join("charts");
    if !format.supported() {
        return Err(IoError {
            path: charts_dir,
            source: io::Error::new(
                io::ErrorKind::Unsupported,
                "PNG charts need pdsim built with `--features png`; use SVG",
            ),
        });
    }
    fs::create_dir_all(&charts_dir).map_err(|source| IoError {
        path: charts_dir.clone(),
        source,
    })?;
    let charts = Chart::for_summary(input.summary);
    let mut written = Vec::with_capacity(charts.len());
    for chart in charts {
        let rel = Path::new("charts").join(format!("{}.{}", chart.name(), format.extension()));
        let path = dir.join(&rel);
        let wrap = |source| IoError {
            path: path.clone(),
            source,
        };
        match format {
            ImageFormat::Svg => {
                let svg = render_svg(chart, input).map_err(wrap)?;
                fs::write(&path, svg).map_err(wrap)?;
            }
            ImageFormat::Png => render_png(chart, input, &path).map_err(wrap)?,
        }
        written.push(rel);
    }
    Ok(written)
}

/// One chart as an SVG document (bytes out: the caller decides where they go).
pub fn render_svg(chart: Chart, input: &ChartInput) -> io::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw(chart, input, &root).map_err(|e| io::Error::other(e.to_string()))?;
    }
    Ok(svg)
}

#[cfg(feature = "png")]
fn render_png(chart: Chart, input: &ChartInput, path: &Path) -> io::Result<()> {
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    draw(chart, input, &root).map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(not(feature = "png"))]
fn render_png(_: Chart, _: &ChartInput, _: &Path) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "PNG charts need the `png` feature",
    ))
}

/// With `ab_glyph`, plotters finds fonts only in its own table, for SVG text metrics too.
#[cfg(feature = "png")]
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    static DEJAVU_SANS: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, DEJAVU_SANS).is_err() {
            panic!("the bundled DejaVuSans.ttf does not parse");
        }
    });
}

fn draw<DB: DrawingBackend>(
    chart: Chart,
    input: &ChartInput,
    root: &DrawingArea<DB, Shift>,
) -> DrawResult<(), DB> {
    #[cfg(feature = "png")]
    register_font();
    root.fill(&WHITE)?;
    let title = format!("{} — {}", chart.title(), input.run_name);
    let body = root.titled(&title, text_style(TITLE_PT, TEXT))?;
    match chart {
        Chart::TtftCdf => cdf_chart(
            &body,
            "TTFT",
            input.ttft,
            &slo_lines(input.slo, SloMetric::Ttft),
        ),
        Chart::TpotCdf => cdf_chart(
            &body,
            "TPOT",
            input.tpot,
            &slo_lines(input.slo, SloMetric::Tpot),
        ),
        Chart::Throughput => {
            throughput_chart(&body, input.timeseries, input.finish_rates, input.markers)
        }
        Chart::QueueDepth => instance_chart(
            &body,
            input.timeseries,
            &[Metric::Queued, Metric::Running],
            "no data: no timeseries rows",
            input.markers,
        ),
        Chart::KvUsage => instance_chart(
            &body,
            input.timeseries,
            &[Metric::KvFraction],
            "no data: no timeseries rows",
            input.markers,
        ),
        Chart::Utilisation => instance_chart(
            &body,
            input.timeseries,
            &[Metric::Busy, Metric::Link],
            "no data: no timeseries rows",
            input.markers,
        ),
        Chart::Outcomes => outcomes_chart(&body, input.summary),
        Chart::Timeline => timeline_chart(&body, input.sample, input.markers),
        Chart::Fragmentation => fragmentation_chart(&body, input.transfer_shape, input.markers),
        Chart::Sessions => sessions_chart(&body, input.summary.sessions.as_ref()),
        Chart::Pools => pools_chart(&body, input.timeseries, input.finish_rates, input.markers),
    }?;
    root.present()
}
