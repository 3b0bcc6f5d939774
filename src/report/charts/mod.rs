//! Charts of one run (DESIGN.md §4 `charts/`): TTFT and TPOT CDFs, throughput, queue depth, KV
//! usage and utilisation over time, the outcome breakdown and a per-request phase timeline.
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

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, DefaultFormatting, KeyPointHint, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::engine::NS_PER_S;
use crate::metrics::{Histogram, Outcome, RequestRow, TimeseriesRow};
use crate::report::{IoError, Summary};

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
    /// Output tokens/s, and arrivals and prefills/s, per simulated second.
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
}

impl Chart {
    /// Every chart, in file order.
    pub const ALL: [Chart; 8] = [
        Chart::TtftCdf,
        Chart::TpotCdf,
        Chart::Throughput,
        Chart::QueueDepth,
        Chart::KvUsage,
        Chart::Utilisation,
        Chart::Outcomes,
        Chart::Timeline,
    ];

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
        }
    }

    /// Looks a chart up by its file stem.
    pub fn from_name(name: &str) -> Option<Chart> {
        Chart::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// Width and height of every chart, px.
pub const SIZE: (u32, u32) = (900, 500);
/// Requests drawn on the timeline at most.
pub const MAX_TIMELINE_ROWS: usize = 40;
/// Points per line at most (about one per pixel): longer series are averaged over windows of
/// consecutive seconds.
const MAX_POINTS: usize = 600;
/// Instances drawn one line each at most; with more, each pool is drawn as its mean and max.
pub const MAX_INSTANCE_LINES: usize = 10;
/// Width of the legend panel, px.
const LEGEND_W: u32 = 200;
const FONT: &str = "sans-serif";
// plotters sizes; the SVG font-size is size / 1.24 px.
const TITLE_PT: f64 = 24.0;
const DESC_PT: f64 = 17.0;
const TICK_PT: f64 = 15.0;
const LEGEND_PT: f64 = 15.0;
const NOTE_PT: f64 = 22.0;

/// Tableau 10: distinct, colour-blind-friendlier than the plotters palette.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xBA, 0xB0, 0xAC),
];
const COMPLETED: RGBColor = RGBColor(0x59, 0xA1, 0x4F);
/// Failed requests: shades of red and orange, one per error kind, cycling.
const FAILED: [RGBColor; 4] = [
    RGBColor(0xD6, 0x27, 0x28),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xB2, 0x18, 0x2B),
    RGBColor(0xFF, 0x7F, 0x50),
];
/// The silent hazard gets a colour used for nothing else.
const CORRUPTED: RGBColor = RGBColor(0x7B, 0x32, 0x94);
const UNFINISHED: RGBColor = RGBColor(0x9E, 0x9E, 0x9E);
/// Timeline end marker of a failed request.
const FAILED_MARK: RGBColor = RGBColor(0xD6, 0x27, 0x28);
const GRID_BOLD: RGBColor = RGBColor(0xD8, 0xD8, 0xD8);
const GRID_LIGHT: RGBColor = RGBColor(0xF2, 0xF2, 0xF2);
const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
const MUTED: RGBColor = RGBColor(0x77, 0x77, 0x77);

/// A request phase on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Queue,
    Prefill,
    Transfer,
    Wait,
    Decode,
}

impl Phase {
    const ALL: [Phase; 5] = [
        Phase::Queue,
        Phase::Prefill,
        Phase::Transfer,
        Phase::Wait,
        Phase::Decode,
    ];

    fn label(self) -> &'static str {
        match self {
            Phase::Queue => "queue",
            Phase::Prefill => "prefill",
            Phase::Transfer => "KV transfer",
            Phase::Wait => "waiting",
            Phase::Decode => "decode",
        }
    }

    fn color(self) -> RGBColor {
        match self {
            Phase::Queue => RGBColor(0xBA, 0xB0, 0xAC),
            Phase::Prefill => RGBColor(0x4E, 0x79, 0xA7),
            Phase::Transfer => RGBColor(0xF2, 0x8E, 0x2B),
            Phase::Wait => RGBColor(0xED, 0xC9, 0x48),
            Phase::Decode => RGBColor(0x59, 0xA1, 0x4F),
        }
    }
}

/// Writes `charts/<name>.<ext>` under `dir` for every chart in [`Chart::ALL`] and returns the
/// paths written, relative to `dir`, in that order.
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
    let mut written = Vec::with_capacity(Chart::ALL.len());
    for chart in Chart::ALL {
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
    static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
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
        Chart::TtftCdf => cdf_chart(&body, "TTFT", input.ttft),
        Chart::TpotCdf => cdf_chart(&body, "TPOT", input.tpot),
        Chart::Throughput => throughput_chart(&body, input.timeseries),
        Chart::QueueDepth => instance_chart(
            &body,
            input.timeseries,
            &[Metric::Queued, Metric::Running],
            "no data: no timeseries rows",
        ),
        Chart::KvUsage => instance_chart(
            &body,
            input.timeseries,
            &[Metric::KvFraction],
            "no data: no timeseries rows",
        ),
        Chart::Utilisation => instance_chart(
            &body,
            input.timeseries,
            &[Metric::Busy, Metric::Link],
            "no data: no timeseries rows",
        ),
        Chart::Outcomes => outcomes_chart(&body, input.summary),
        Chart::Timeline => timeline_chart(&body, input.sample),
    }?;
    root.present()
}

// ---------------------------------------------------------------------------------------------
// Shared pieces: text styles, number formats, the legend panel, the "no data" note.

fn text_style(size: f64, color: RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(&color)
}

/// Up to three significant digits, no trailing zeros: 0.0123, 1.5, 250, 12000.
fn fmt_num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (2 - mag).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Axis labels of counts: whole numbers only (no "0.5 requests").
fn fmt_count(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

/// Smallest "nice" number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k) at or above `v`.
fn nice_ceil(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0] {
        if m * p >= v * (1.0 - 1e-12) {
            return m * p;
        }
    }
    10.0 * p
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Swatch {
    Line,
    Dashed,
    Bar,
    Marker,
}

struct LegendEntry {
    label: String,
    color: RGBColor,
    swatch: Swatch,
}

impl LegendEntry {
    fn new(label: impl Into<String>, color: RGBColor, swatch: Swatch) -> Self {
        Self {
            label: label.into(),
            color,
            swatch,
        }
    }
}

/// Splits off the legend panel on the right of `area`; returns (plot area, legend area).
fn with_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = area.dim_in_pixel();
    area.split_horizontally(w.saturating_sub(LEGEND_W))
}

/// Draws the entries one per row; when they do not fit, the last row says how many are left.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
) -> DrawResult<(), DB> {
    const ROW: i32 = 22;
    const TOP: i32 = 24;
    const MAX_CHARS: usize = 24;
    if entries.is_empty() {
        return Ok(());
    }
    let (w, h) = area.dim_in_pixel();
    let fit = (((h as i32 - TOP - 40) / ROW).max(2)) as usize;
    let (shown, rest) = if entries.len() > fit {
        (fit - 1, entries.len() - (fit - 1))
    } else {
        (entries.len(), 0)
    };
    let rows = shown + usize::from(rest > 0);
    area.draw(&Rectangle::new(
        [(2, TOP - 16), (w as i32 - 10, TOP + rows as i32 * ROW - 6)],
        GRID_BOLD.stroke_width(1),
    ))?;
    let style = text_style(LEGEND_PT, TEXT).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, e) in entries[..shown].iter().enumerate() {
        let y = TOP + i as i32 * ROW;
        match e.swatch {
            Swatch::Line => area.draw(&PathElement::new(
                vec![(10, y), (34, y)],
                e.color.stroke_width(3),
            ))?,
            Swatch::Dashed => {
                for x in [10, 20, 30] {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 5, y)],
                        e.color.stroke_width(2),
                    ))?;
                }
            }
            Swatch::Bar => area.draw(&Rectangle::new(
                [(12, y - 6), (32, y + 6)],
                e.color.filled(),
            ))?,
            Swatch::Marker => area.draw(&Rectangle::new(
                [(20, y - 8), (24, y + 8)],
                e.color.filled(),
            ))?,
        }
        let label = if e.label.chars().count() > MAX_CHARS {
            let cut: String = e.label.chars().take(MAX_CHARS - 1).collect();
            format!("{cut}…")
        } else {
            e.label.clone()
        };
        area.draw_text(&label, &style, (42, y))?;
    }
    if rest > 0 {
        let y = TOP + shown as i32 * ROW;
        area.draw_text(
            &format!("… and {rest} more"),
            &text_style(LEGEND_PT, MUTED).pos(Pos::new(HPos::Left, VPos::Center)),
            (42, y),
        )?;
    }
    Ok(())
}

/// Writes `note` in the middle of a chart's plotting area.
fn draw_note<DB: DrawingBackend, CT: CoordTranslate>(
    plot: &DrawingArea<DB, CT>,
    note: &str,
) -> DrawResult<(), DB> {
    let (w, h) = plot.dim_in_pixel();
    plot.strip_coord_spec().draw_text(
        note,
        &text_style(NOTE_PT, MUTED).pos(Pos::new(HPos::Center, VPos::Center)),
        (w as i32 / 2, h as i32 / 2),
    )
}

/// Averages consecutive points in windows so that at most [`MAX_POINTS`] remain.
fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let k = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(k)
        .map(|c| {
            let n = c.len() as f64;
            (
                c.iter().map(|p| p.0).sum::<f64>() / n,
                c.iter().map(|p| p.1).sum::<f64>() / n,
            )
        })
        .collect()
}

/// A vertical axis of `n` rows, `0..n`, with ticks exactly at the given row centres (plotters'
/// `with_key_points` offers no label formatter).
struct RowAxis {
    n: f64,
    keys: Vec<f64>,
}

impl RowAxis {
    fn new(n: usize, keys: Vec<f64>) -> Self {
        Self { n: n as f64, keys }
    }
}

impl Ranged for RowAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = if self.n > 0.0 { v / self.n } else { 0.5 };
        limit.0 + (t * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, _: H) -> Vec<f64> {
        self.keys.clone()
    }

    fn range(&self) -> Range<f64> {
        0.0..self.n
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Latency CDFs.

/// Piecewise-linear CDF through the histogram buckets: x in ms, y the fraction of values at or
/// below x. Flat between buckets, linear across a bucket (values assumed uniform within it).
fn cdf_points(h: &Histogram) -> Vec<(f64, f64)> {
    let n = h.count();
    let mut pts: Vec<(f64, f64)> = Vec::new();
    let mut seen = 0u64;
    let ms = |ns: u64| ns as f64 / 1e6;
    for (lo, hi, c) in h.buckets() {
        let before = seen as f64 / n as f64;
        if pts.last().is_none_or(|p| p.0 < ms(lo)) {
            pts.push((ms(lo), before));
        }
        seen += c;
        pts.push((ms(hi), seen as f64 / n as f64));
    }
    pts
}

/// X axis of a CDF: log when the values span more than two decades.
enum CdfAxis {
    Linear(Range<f64>),
    Log(Range<f64>),
}

fn cdf_axis(pts: &[(f64, f64)]) -> CdfAxis {
    let positive = pts.iter().map(|p| p.0).filter(|x| *x > 0.0);
    let (Some(lo), Some(hi)) = (positive.clone().reduce(f64::min), positive.reduce(f64::max))
    else {
        return CdfAxis::Linear(0.0..1.0);
    };
    if hi / lo > 100.0 {
        let lo = 10f64.powf(lo.log10().floor());
        let hi = 10f64.powf(hi.log10().ceil());
        return CdfAxis::Log(lo..hi);
    }
    let xmin = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let span = hi - xmin;
    let pad = if span > 0.0 { span * 0.05 } else { hi * 0.1 };
    CdfAxis::Linear((xmin - pad).max(0.0)..hi + pad)
}

fn cdf_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    what: &str,
    h: &Histogram,
) -> DrawResult<(), DB> {
    let (plot, legend) = with_legend(area);
    let pts = cdf_points(h);
    let marks = [
        ("p50", 0.50, PALETTE[4]),
        ("p90", 0.90, PALETTE[1]),
        ("p99", 0.99, PALETTE[2]),
    ];
    let mut entries = vec![LegendEntry::new(
        format!("{what}, n = {}", h.count()),
        PALETTE[0],
        Swatch::Line,
    )];
    let quantiles: Vec<(f64, RGBColor)> = if h.count() == 0 {
        Vec::new()
    } else {
        marks
            .iter()
            .map(|(name, q, color)| {
                let v = h.quantile(*q) / 1e6;
                entries.push(LegendEntry::new(
                    format!("{name} = {} ms", fmt_num(v)),
                    *color,
                    Swatch::Dashed,
                ));
                (v, *color)
            })
            .collect()
    };
    match cdf_axis(&pts) {
        CdfAxis::Linear(x) => cdf_plot(&plot, x, &format!("{what} (ms)"), &pts, &quantiles)?,
        CdfAxis::Log(x) => {
            let lo = x.start;
            // Log axes cannot show 0: a zero-latency bucket is drawn at the axis' left edge.
            let pts: Vec<(f64, f64)> = pts.iter().map(|&(a, b)| (a.max(lo), b)).collect();
            let q: Vec<(f64, RGBColor)> = quantiles.iter().map(|&(v, c)| (v.max(lo), c)).collect();
            cdf_plot(
                &plot,
                x.log_scale(),
                &format!("{what} (ms, log scale)"),
                &pts,
                &q,
            )?
        }
    }
    draw_legend(&legend, &entries)
}

fn cdf_plot<DB, X>(
    area: &DrawingArea<DB, Shift>,
    x: X,
    x_desc: &str,
    pts: &[(f64, f64)],
    quantiles: &[(f64, RGBColor)],
) -> DrawResult<(), DB>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("fraction of requests ≤ x")
        .label_style(text_style(TICK_PT, TEXT))
        .axis_desc_style(text_style(DESC_PT, TEXT))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .x_label_formatter(&|v| fmt_num(*v))
        .y_label_formatter(&|v| fmt_num(*v))
        .draw()?;
    if pts.is_empty() {
        return draw_note(chart.plotting_area(), "no data: no request finished");
    }
    for &(v, color) in quantiles {
        chart.draw_series(DashedLineSeries::new(
            vec![(v, 0.0), (v, 1.0)],
            6,
            4,
            color.stroke_width(2),
        ))?;
    }
    chart.draw_series(LineSeries::new(
        pts.iter().copied(),
        PALETTE[0].stroke_width(3),
    ))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2–5. Time series.

struct Line {
    label: String,
    color: RGBColor,
    /// Secondary line (a pool's max), drawn 1 px.
    thin: bool,
    points: Vec<(f64, f64)>,
}

/// `c` halfway to white.
fn lighten(c: RGBColor) -> RGBColor {
    let h = |v: u8| v + (255 - v) / 2;
    RGBColor(h(c.0), h(c.1), h(c.2))
}

/// One panel of lines over simulated seconds.
struct Panel<'s> {
    y_desc: &'s str,
    /// Fixed y range (fractions), else 0 to a nice maximum of the data.
    y_fixed: Option<Range<f64>>,
    /// Whole-number y labels only.
    counts: bool,
    /// The bottom panel carries the x labels and description.
    x_axis: bool,
}

fn x_range(lines: &[Line]) -> Range<f64> {
    let max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    0.0..max.max(1.0)
}

fn line_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: Range<f64>,
    panel: &Panel,
    lines: &[Line],
    empty_note: &str,
) -> DrawResult<(), DB> {
    let y = panel.y_fixed.clone().unwrap_or_else(|| {
        let max = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        0.0..nice_ceil(max * 1.05)
    });
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(if panel.x_axis { 48 } else { 0 })
        .y_label_area_size(72)
        .build_cartesian_2d(x, y)?;
    let mut mesh = chart.configure_mesh();
    mesh.y_desc(panel.y_desc)
        .label_style(text_style(TICK_PT, TEXT))
        .axis_desc_style(text_style(DESC_PT, TEXT))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .x_label_formatter(&|v| fmt_num(*v))
        .y_labels(if panel.x_axis { 8 } else { 5 });
    if panel.counts {
        mesh.y_label_formatter(&|v| fmt_count(*v));
    } else {
        mesh.y_label_formatter(&|v| fmt_num(*v));
    }
    if panel.x_axis {
        mesh.x_desc("simulated time (s)");
    }
    mesh.draw()?;
    for l in lines {
        chart.draw_series(LineSeries::new(
            l.points.iter().copied(),
            l.color.stroke_width(if l.thin { 1 } else { 2 }),
        ))?;
    }
    if lines.iter().all(|l| l.points.is_empty()) {
        draw_note(chart.plotting_area(), empty_note)?;
    }
    Ok(())
}

/// Output tokens/s (decode) on top; arrivals/s and prefills/s below.
fn throughput_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ts: &[TimeseriesRow],
) -> DrawResult<(), DB> {
    // second → (decode tokens out, prefill first tokens, arrivals at prefill instances)
    let mut per_s: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for r in ts {
        let e = per_s.entry(r.second).or_default();
        if r.role == "decode" {
            e.0 += r.tokens_out;
        } else {
            e.1 += r.tokens_out;
            // A request is routed to one prefill and one decode instance: count it once.
            e.2 += r.arrivals;
        }
    }
    let series = |f: fn(&(u64, u64, u64)) -> u64| {
        downsample(
            per_s
                .iter()
                .map(|(s, v)| (*s as f64, f(v) as f64))
                .collect(),
        )
    };
    let top = [Line {
        label: "output tokens/s (decode)".into(),
        color: PALETTE[0],
        thin: false,
        points: series(|v| v.0),
    }];
    let bottom = [
        Line {
            label: "arrivals/s".into(),
            color: PALETTE[1],
            thin: false,
            points: series(|v| v.2),
        },
        Line {
            label: "prefills done/s".into(),
            color: PALETTE[4],
            thin: false,
            points: series(|v| v.1),
        },
    ];
    let (plot, legend) = with_legend(area);
    let x = x_range(&bottom);
    let (upper, lower) = plot.split_vertically(plot.dim_in_pixel().1 * 9 / 20);
    line_panel(
        &upper,
        x.clone(),
        &Panel {
            y_desc: "tokens/s",
            y_fixed: None,
            counts: false,
            x_axis: false,
        },
        &top,
        "no data: no timeseries rows",
    )?;
    line_panel(
        &lower,
        x,
        &Panel {
            y_desc: "requests/s",
            y_fixed: None,
            counts: false,
            x_axis: true,
        },
        &bottom,
        "no data: no timeseries rows",
    )?;
    let entries: Vec<LegendEntry> = top
        .iter()
        .chain(&bottom)
        .map(|l| LegendEntry::new(l.label.clone(), l.color, Swatch::Line))
        .collect();
    draw_legend(&legend, &entries)
}

/// A per-instance quantity of a timeseries row.
#[derive(Clone, Copy)]
enum Metric {
    Queued,
    Running,
    KvFraction,
    Busy,
    Link,
}

impl Metric {
    fn value(self, r: &TimeseriesRow) -> f64 {
        match self {
            Metric::Queued => f64::from(r.queued),
            Metric::KvFraction if r.kv_pages_total == 0 => 0.0,
            Metric::KvFraction => r.kv_pages_used as f64 / r.kv_pages_total as f64,
            Metric::Busy => r.busy_fraction,
            Metric::Link => r.link_utilisation,
            Metric::Running => f64::from(r.running),
        }
    }

    fn panel(self, x_axis: bool) -> Panel<'static> {
        let (y_desc, y_fixed, counts) = match self {
            Metric::Queued => ("queued requests", None, true),
            Metric::KvFraction => ("KV pages used / total", Some(0.0..1.0), false),
            Metric::Busy => ("compute busy (0–1)", Some(0.0..1.0), false),
            Metric::Link => ("link utilisation (0–1)", Some(0.0..1.0), false),
            Metric::Running => ("running batch (requests)", None, true),
        };
        Panel {
            y_desc,
            y_fixed,
            counts,
            x_axis,
        }
    }
}

/// One line per instance, legend "pool #instance"; one panel per metric, stacked.
fn instance_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ts: &[TimeseriesRow],
    metrics: &[Metric],
    empty_note: &str,
) -> DrawResult<(), DB> {
    let mut by_instance: BTreeMap<u32, (&str, Vec<&TimeseriesRow>)> = BTreeMap::new();
    for r in ts {
        by_instance
            .entry(r.instance)
            .or_insert_with(|| (r.pool.as_str(), Vec::new()))
            .1
            .push(r);
    }
    for (_, rows) in by_instance.values_mut() {
        rows.sort_by_key(|r| r.second);
    }
    let per_instance = by_instance.len() <= MAX_INSTANCE_LINES;
    // Pools in order of their first instance.
    let mut pools: Vec<&str> = Vec::new();
    for (pool, _) in by_instance.values() {
        if !pools.contains(pool) {
            pools.push(pool);
        }
    }
    let lines_of = |m: Metric| -> Vec<Line> {
        if per_instance {
            return by_instance
                .iter()
                .enumerate()
                .map(|(i, (id, (pool, rows)))| Line {
                    label: format!("{pool} #{id}"),
                    color: PALETTE[i % PALETTE.len()],
                    thin: false,
                    points: downsample(
                        rows.iter().map(|r| (r.second as f64, m.value(r))).collect(),
                    ),
                })
                .collect();
        }
        // Too many instances for one line each: the mean and the max of each pool.
        let mut lines = Vec::new();
        for (i, pool) in pools.iter().enumerate() {
            let mut per_s: BTreeMap<u64, (f64, f64, u32)> = BTreeMap::new();
            let mut members = 0;
            for (p, rows) in by_instance.values() {
                if p != pool {
                    continue;
                }
                members += 1;
                for r in rows {
                    let v = m.value(r);
                    let e = per_s.entry(r.second).or_insert((0.0, f64::MIN, 0));
                    e.0 += v;
                    e.1 = e.1.max(v);
                    e.2 += 1;
                }
            }
            let color = PALETTE[i % PALETTE.len()];
            lines.push(Line {
                label: format!("{pool}: mean of {members}"),
                color,
                thin: false,
                points: downsample(
                    per_s
                        .iter()
                        .map(|(s, v)| (*s as f64, v.0 / f64::from(v.2)))
                        .collect(),
                ),
            });
            lines.push(Line {
                label: format!("{pool}: max"),
                color: lighten(color),
                thin: true,
                points: downsample(per_s.iter().map(|(s, v)| (*s as f64, v.1)).collect()),
            });
        }
        lines
    };
    let (plot, legend) = with_legend(area);
    let panels: Vec<Vec<Line>> = metrics.iter().map(|m| lines_of(*m)).collect();
    let x = x_range(&panels[0]);
    let mut rest = plot;
    for (k, (m, lines)) in metrics.iter().zip(&panels).enumerate() {
        let last = k + 1 == metrics.len();
        let this = if last {
            rest.clone()
        } else {
            let (h_total, left) = (rest.dim_in_pixel().1, metrics.len() - k);
            // Panels without the x axis are shorter by its 48 px.
            let h = (h_total.saturating_sub(48)) / left as u32;
            let (a, b) = rest.split_vertically(h);
            rest = b;
            a
        };
        line_panel(&this, x.clone(), &m.panel(last), lines, empty_note)?;
    }
    let entries: Vec<LegendEntry> = panels[0]
        .iter()
        .map(|l| LegendEntry::new(l.label.clone(), l.color, Swatch::Line))
        .collect();
    draw_legend(&legend, &entries)
}

// ---------------------------------------------------------------------------------------------
// 6. Outcomes.

/// Bars top to bottom: completed, one per error kind, corrupted, unfinished.
fn outcome_bars(s: &Summary) -> Vec<(String, u64, RGBColor)> {
    let mut bars = vec![("completed".to_string(), s.requests.completed, COMPLETED)];
    if s.errors.is_empty() {
        bars.push(("failed".into(), s.requests.failed, FAILED[0]));
    } else {
        for (i, e) in s.errors.iter().enumerate() {
            bars.push((
                format!("failed: {}", e.kind),
                e.count,
                FAILED[i % FAILED.len()],
            ));
        }
    }
    bars.push(("corrupted (silent)".into(), s.requests.corrupted, CORRUPTED));
    bars.push(("unfinished".into(), s.requests.unfinished, UNFINISHED));
    bars
}

fn outcomes_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &Summary,
) -> DrawResult<(), DB> {
    let bars = outcome_bars(s);
    let n = bars.len();
    let max = bars.iter().map(|b| b.1).max().unwrap_or(0);
    let longest = bars.iter().map(|b| b.0.chars().count()).max().unwrap_or(0);
    let label_w = (longest as u32 * 8 + 24).clamp(110, 340);
    // Row i's centre, first row at the top.
    let pos = |i: usize| (n - i) as f64 - 0.5;
    let keys: Vec<f64> = (0..n).map(pos).collect();
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let y_fmt = move |v: &f64| {
        let i = (n as f64 - 0.5 - v).round();
        if i >= 0.0 && (i as usize) < n {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    };
    // Room right of the longest bar for its count.
    let x_max = nice_ceil(max.max(1) as f64 * 1.25);
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .margin_right(24)
        .x_label_area_size(48)
        .y_label_area_size(label_w)
        .build_cartesian_2d(0f64..x_max, RowAxis::new(n, keys))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(1)
        .x_desc("requests")
        .label_style(text_style(TICK_PT, TEXT))
        .axis_desc_style(text_style(DESC_PT, TEXT))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .x_label_formatter(&|v| fmt_count(*v))
        .y_label_formatter(&y_fmt)
        .draw()?;
    let arrived = s.requests.arrived;
    for (i, (_, count, color)) in bars.iter().enumerate() {
        let y = pos(i);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y - 0.32), (*count as f64, y + 0.32)],
            color.filled(),
        )))?;
        let label = if arrived > 0 {
            format!(
                "{count} ({}%)",
                fmt_num(100.0 * *count as f64 / arrived as f64)
            )
        } else {
            format!("{count}")
        };
        chart.draw_series(std::iter::once(
            EmptyElement::at((*count as f64, y))
                + Text::new(
                    label,
                    (6, 0),
                    text_style(TICK_PT, TEXT).pos(Pos::new(HPos::Left, VPos::Center)),
                ),
        ))?;
    }
    if arrived == 0 && max == 0 {
        draw_note(chart.plotting_area(), "no data: no request arrived")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 7. Timeline.

/// The phase bars of one request, in seconds: `(phase, start, end)`. A phase whose end was
/// never reached runs to the request's finish (the failure), if it has one.
fn phases(r: &RequestRow) -> Vec<(Phase, f64, f64)> {
    let s = |ns: u64| ns as f64 / NS_PER_S as f64;
    let spans = [
        (Phase::Queue, Some(r.arrival_ns), r.prefill_start_ns),
        (Phase::Prefill, r.prefill_start_ns, r.prefill_end_ns),
        (Phase::Transfer, r.transfer_start_ns, r.transfer_end_ns),
        (Phase::Wait, r.transfer_end_ns, r.decode_start_ns),
        // Prefilled but never transferred (its chunk sits on a dead or blocked shard): the wait
        // runs from the end of prefill to the failure.
        (
            Phase::Wait,
            r.prefill_end_ns.filter(|_| r.transfer_start_ns.is_none()),
            None,
        ),
        (Phase::Decode, r.decode_start_ns, r.finish_ns),
    ];
    spans
        .into_iter()
        .filter_map(|(p, a, b)| {
            let a = a?;
            let b = b.or(r.finish_ns).filter(|b| *b >= a)?;
            Some((p, s(a), s(b)))
        })
        .collect()
}

/// The last time known of a request, ns.
fn last_time(r: &RequestRow) -> u64 {
    [
        r.prefill_queued_ns,
        r.prefill_start_ns,
        r.prefill_end_ns,
        r.transfer_start_ns,
        r.transfer_end_ns,
        r.decode_start_ns,
        r.first_token_ns,
        r.finish_ns,
    ]
    .into_iter()
    .flatten()
    .fold(r.arrival_ns, u64::max)
}

fn timeline_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sample: &[RequestRow],
) -> DrawResult<(), DB> {
    let (plot, legend) = with_legend(area);
    let rows = &sample[..sample.len().min(MAX_TIMELINE_ROWS)];
    let n = rows.len().max(1);
    let pos = |i: usize| (n - i) as f64 - 0.5;
    let secs = |ns: u64| ns as f64 / NS_PER_S as f64;
    let (x, y_desc) = if rows.is_empty() {
        (0.0..1.0, "request".to_string())
    } else {
        let t0 = rows.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
        let t1 = rows.iter().map(last_time).max().unwrap_or(0);
        let pad = (secs(t1 - t0) * 0.03).max(1e-3);
        let desc = if sample.len() > rows.len() {
            format!("request id (first {} of {})", rows.len(), sample.len())
        } else {
            "request id".to_string()
        };
        ((secs(t0) - pad).max(0.0)..secs(t1) + pad, desc)
    };
    // Label every row while they fit (about 16 px per label), else every k-th.
    let step = rows.len().div_ceil(24).max(1);
    let keys: Vec<f64> = (0..rows.len()).step_by(step).map(pos).collect();
    let ids: Vec<String> = rows.iter().map(|r| format!("#{}", r.id)).collect();
    let y_fmt = move |v: &f64| {
        let i = (n as f64 - 0.5 - v).round();
        if i >= 0.0 && (i as usize) < ids.len() {
            ids[i as usize].clone()
        } else {
            String::new()
        }
    };
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, RowAxis::new(n, keys))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(1)
        .x_desc("simulated time (s)")
        .y_desc(y_desc)
        .label_style(text_style(TICK_PT, TEXT))
        .axis_desc_style(text_style(DESC_PT, TEXT))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .x_label_formatter(&|v| fmt_num(*v))
        .y_label_formatter(&y_fmt)
        .draw()?;
    for (i, r) in rows.iter().enumerate() {
        let y = pos(i);
        let bars = phases(r);
        // Transfer overlaps prefill (chunks are sent as they finish): draw it last, thinner.
        for (p, a, b) in bars.iter().filter(|b| b.0 != Phase::Transfer) {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, y - 0.36), (*b, y + 0.36)],
                p.color().filled(),
            )))?;
        }
        for (p, a, b) in bars.iter().filter(|b| b.0 == Phase::Transfer) {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, y - 0.16), (*b, y + 0.16)],
                p.color().filled(),
            )))?;
        }
        let mark = match r.outcome {
            Outcome::Failed => Some(FAILED_MARK),
            Outcome::Corrupted => Some(CORRUPTED),
            Outcome::Completed | Outcome::Unfinished => None,
        };
        if let Some(color) = mark {
            let end = secs(r.finish_ns.unwrap_or_else(|| last_time(r)));
            chart.draw_series(std::iter::once(
                EmptyElement::at((end, y)) + Rectangle::new([(-2, -9), (2, 9)], color.filled()),
            ))?;
        }
    }
    if rows.is_empty() {
        draw_note(chart.plotting_area(), "no data: no sampled requests")?;
    }
    let mut entries: Vec<LegendEntry> = Phase::ALL
        .iter()
        .map(|p| LegendEntry::new(p.label(), p.color(), Swatch::Bar))
        .collect();
    entries.push(LegendEntry::new(
        "failed (end)",
        FAILED_MARK,
        Swatch::Marker,
    ));
    entries.push(LegendEntry::new(
        "corrupted (end)",
        CORRUPTED,
        Swatch::Marker,
    ));
    draw_legend(&legend, &entries)
}

/// A small synthetic run for the tests of this module and of `html`.
#[cfg(test)]
pub(crate) mod fixture {
    use std::path::PathBuf;

    use crate::metrics::{
        Counts, ErrorCount, Histogram, Latencies, Outcome, RequestRow, TimeseriesRow,
    };
    use crate::report::{SimSummary, SloSummary, Summary, Throughput, TransferSummary};

    use super::ChartInput;

    /// The owned data a [`ChartInput`] borrows.
    pub(crate) struct Fixture {
        pub ttft: Histogram,
        pub tpot: Histogram,
        pub timeseries: Vec<TimeseriesRow>,
        pub summary: Summary,
        pub sample: Vec<RequestRow>,
    }

    impl Fixture {
        pub(crate) fn input<'a>(&'a self, run_name: &'a str) -> ChartInput<'a> {
            ChartInput {
                run_name,
                ttft: &self.ttft,
                tpot: &self.tpot,
                timeseries: &self.timeseries,
                summary: &self.summary,
                sample: &self.sample,
            }
        }
    }

    /// An error message with every character HTML must escape.
    pub(crate) const NASTY_MESSAGE: &str =
        "Envelope <tp_size> mismatch: prefill \"4\" & decode '8' | see `docs`";

    pub(crate) fn summary(ttft: &Histogram, tpot: &Histogram, counts: Counts) -> Summary {
        let s = 1e-6;
        Summary {
            errors: if counts.failed > 0 {
                vec![ErrorCount {
                    kind: "envelope_tp_mismatch".into(),
                    count: counts.failed,
                    message: NASTY_MESSAGE.into(),
                }]
            } else {
                Vec::new()
            },
            requests: counts,
            latency_ms: Latencies {
                ttft: ttft.summary(s),
                tpot: tpot.summary(s),
                itl: tpot.summary(s),
                e2e: ttft.summary(s),
                queue: ttft.summary(s),
                bootstrap: ttft.summary(s),
                decode_queue: tpot.summary(s),
                transfer: tpot.summary(s),
            },
            throughput: Throughput {
                requests_per_s: 4.2,
                input_tokens_per_s: 8600.0,
                output_tokens_per_s: 1075.5,
            },
            slo: SloSummary {
                attainment: 0.875,
                goodput_requests_per_s: 3.5,
            },
            transfer: TransferSummary {
                bytes: 3 << 30,
                writes: 12_345,
                bandwidth_gbps: ttft.summary(1e-6),
                retransmitted_bytes: 0,
            },
            sim: SimSummary {
                events: 98_765,
                simulated_s: 10.0,
                cut_by_drain_timeout: false,
            },
            prefix_cache: Vec::new(),
        }
    }

    fn row(id: u64, outcome: Outcome) -> RequestRow {
        let ms = 1_000_000;
        let a = id * 700 * ms;
        RequestRow {
            id,
            arrival_ns: a,
            prefill_instance: Some(0),
            decode_instance: Some(1 + (id % 2) as u32),
            input_tokens: 1024,
            output_tokens: 64,
            prefill_queued_ns: Some(a + 5 * ms),
            prefill_start_ns: Some(a + 50 * ms),
            prefill_end_ns: Some(a + 350 * ms),
            transfer_start_ns: Some(a + 200 * ms),
            transfer_end_ns: Some(a + 380 * ms),
            decode_start_ns: Some(a + 420 * ms),
            first_token_ns: Some(a + 430 * ms),
            finish_ns: Some(a + 2_400 * ms),
            kv_bytes: 1 << 20,
            rdma_writes: 40,
            outcome,
            error_kind: None,
            victims: String::new(),
            corrupted_by: String::new(),
            retractions: 0,
        }
    }

    /// Three instances over 10 s, 5 sampled requests (one failed mid-transfer, one corrupted),
    /// TTFT over three decades (log axis), TPOT within one (linear axis).
    pub(crate) fn synthetic() -> Fixture {
        let ms = 1_000_000;
        let mut ttft = Histogram::new();
        let mut tpot = Histogram::new();
        for i in 0..200u64 {
            ttft.record(5 * ms + i * i * 200 * ms / 1000); // 5 ms .. ~7.9 s
            tpot.record(20 * ms + i * 100_000); // 20 .. 40 ms
        }
        let mut timeseries = Vec::new();
        for second in 1..=10u64 {
            for (instance, pool, role) in [
                (0u32, "prefill", "prefill"),
                (1, "decode", "decode"),
                (2, "decode", "decode"),
            ] {
                let k = second + u64::from(instance);
                timeseries.push(TimeseriesRow {
                    second,
                    instance,
                    pool: pool.into(),
                    role,
                    arrivals: 3 + k % 3,
                    running: (k % 5) as u32,
                    queued: (k % 4) as u32,
                    kv_pages_used: 100 * (k % 7),
                    kv_pages_total: 1000,
                    tokens_out: if role == "decode" { 200 + 10 * k } else { 3 },
                    link_utilisation: (k % 10) as f64 / 10.0,
                    busy_fraction: (k % 4) as f64 / 4.0,
                });
            }
        }
        let mut sample: Vec<RequestRow> = (0..5).map(|i| row(i, Outcome::Completed)).collect();
        sample[2].outcome = Outcome::Corrupted;
        let failed = &mut sample[3];
        failed.outcome = Outcome::Failed;
        failed.error_kind = Some("envelope_tp_mismatch");
        failed.transfer_end_ns = None;
        failed.decode_start_ns = None;
        failed.first_token_ns = None;
        failed.finish_ns = Some(failed.arrival_ns + 500 * ms);
        let counts = Counts {
            arrived: 60,
            completed: 50,
            failed: 4,
            corrupted: 2,
            unfinished: 4,
        };
        Fixture {
            summary: summary(&ttft, &tpot, counts),
            ttft,
            tpot,
            timeseries,
            sample,
        }
    }

    /// Nothing happened: no rows, empty histograms, zero counts.
    pub(crate) fn empty() -> Fixture {
        let (ttft, tpot) = (Histogram::new(), Histogram::new());
        Fixture {
            summary: summary(&ttft, &tpot, Counts::default()),
            ttft,
            tpot,
            timeseries: Vec::new(),
            sample: Vec::new(),
        }
    }

    /// A fresh, empty scratch folder for one test.
    pub(crate) fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pdsim-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temp dir");
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::{empty, synthetic, temp_dir};
    use super::*;

    /// Undoes the five XML entities plotters writes.
    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    /// The contents of every `<text …>…</text>` element, in document order.
    fn texts(svg: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = svg;
        while let Some(i) = rest.find("<text") {
            rest = &rest[i..];
            let open_end = rest.find('>').expect("unterminated <text> tag");
            let close = rest.find("</text>").expect("no </text>");
            out.push(unescape(rest[open_end + 1..close].trim()));
            rest = &rest[close + "</text>".len()..];
        }
        out
    }

    /// A tiny XML checker: tags balance and nest, attribute quotes close, entities are known,
    /// the root is `<svg>`, and no coordinate is NaN or infinite.
    fn assert_well_formed(svg: &str) {
        assert!(
            !svg.contains("NaN") && !svg.contains("inf"),
            "non-finite number"
        );
        let mut stack: Vec<&str> = Vec::new();
        let mut roots = 0;
        let mut rest = svg;
        while let Some(i) = rest.find('<') {
            check_entities(&rest[..i]);
            rest = &rest[i..];
            if rest.starts_with("<?") {
                rest = &rest[rest.find("?>").expect("unterminated <?") + 2..];
                continue;
            }
            if rest.starts_with("<!--") {
                rest = &rest[rest.find("-->").expect("unterminated comment") + 3..];
                continue;
            }
            // Find the tag's end outside quotes.
            let mut quote = None;
            let mut end = None;
            for (k, c) in rest.char_indices().skip(1) {
                match (quote, c) {
                    (None, '"' | '\'') => quote = Some(c),
                    (Some(q), c) if c == q => quote = None,
                    (None, '>') => {
                        end = Some(k);
                        break;
                    }
                    (None, '<') => panic!("'<' inside a tag: {}", &rest[..k]),
                    _ => {}
                }
            }
            let end = end.expect("unterminated tag");
            let tag = &rest[1..end];
            if let Some(name) = tag.strip_prefix('/') {
                let open = stack.pop().expect("close without open");
                assert_eq!(open, name.trim(), "mis-nested tags");
            } else {
                let name = tag
                    .split(|c: char| c.is_whitespace() || c == '/')
                    .next()
                    .unwrap();
                assert!(!name.is_empty(), "empty tag name");
                if stack.is_empty() {
                    roots += 1;
                    assert_eq!(name, "svg", "root element");
                }
                check_entities(tag);
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed tags: {stack:?}");
        assert_eq!(roots, 1, "one root element");
    }

    fn check_entities(s: &str) {
        for (i, _) in s.match_indices('&') {
            let tail = &s[i..];
            assert!(
                ["&lt;", "&gt;", "&amp;", "&quot;", "&apos;", "&#39;"]
                    .iter()
                    .any(|e| tail.starts_with(e)),
                "bare '&' in {s:?}"
            );
        }
    }

    fn svg(chart: Chart, f: &fixture::Fixture) -> String {
        render_svg(chart, &f.input("unit-run")).expect("render")
    }

    fn assert_texts(chart: Chart, svg: &str, expected: &[&str]) {
        let t = texts(svg);
        for e in expected {
            assert!(
                t.iter().any(|x| x == e),
                "{}: no text {e:?} in {t:?}",
                chart.name()
            );
        }
    }

    /// The texts each chart promises on the synthetic input: axis labels and legend entries.
    fn promised(chart: Chart) -> Vec<&'static str> {
        let time = "simulated time (s)";
        let instances = ["prefill #0", "decode #1", "decode #2"];
        let mut v = match chart {
            Chart::TtftCdf => vec![
                "TTFT (ms, log scale)",
                "fraction of requests ≤ x",
                "TTFT, n = 200",
            ],
            Chart::TpotCdf => vec!["TPOT (ms)", "fraction of requests ≤ x", "TPOT, n = 200"],
            Chart::Throughput => vec![
                time,
                "tokens/s",
                "requests/s",
                "output tokens/s (decode)",
                "arrivals/s",
                "prefills done/s",
            ],
            Chart::QueueDepth => vec![time, "queued requests", "running batch (requests)"],
            Chart::KvUsage => vec![time, "KV pages used / total"],
            Chart::Utilisation => {
                vec![time, "compute busy (0–1)", "link utilisation (0–1)"]
            }
            Chart::Outcomes => vec![
                "requests",
                "completed",
                "failed: envelope_tp_mismatch",
                "corrupted (silent)",
                "unfinished",
                "50 (83.3%)",
            ],
            Chart::Timeline => vec![
                time,
                "request id",
                "queue",
                "prefill",
                "KV transfer",
                "waiting",
                "decode",
                "failed (end)",
                "corrupted (end)",
                "#0",
                "#4",
            ],
        };
        if matches!(
            chart,
            Chart::QueueDepth | Chart::KvUsage | Chart::Utilisation
        ) {
            v.extend(instances);
        }
        v
    }

    #[test]
    fn every_chart_has_its_title_axis_labels_and_legend() {
        let f = synthetic();
        for chart in Chart::ALL {
            let s = svg(chart, &f);
            assert_well_formed(&s);
            let title = format!("{} — unit-run", chart.title());
            let mut expected = vec![title.as_str()];
            expected.extend(promised(chart));
            assert_texts(chart, &s, &expected);
            assert!(
                !texts(&s).iter().any(|t| t.starts_with("no data")),
                "{}: data present but 'no data' drawn",
                chart.name()
            );
        }
    }

    #[test]
    fn cdf_legends_give_the_percentiles() {
        let f = synthetic();
        let t = texts(&svg(Chart::TtftCdf, &f));
        for p in ["p50", "p90", "p99"] {
            let want = format!(
                "{p} = {} ms",
                fmt_num(f.ttft.quantile(p[1..].parse::<f64>().unwrap() / 100.0) / 1e6)
            );
            assert!(t.contains(&want), "no {want:?} in {t:?}");
        }
    }

    #[test]
    fn lines_are_drawn_one_per_instance() {
        let f = synthetic();
        let s = svg(Chart::QueueDepth, &f);
        let stroke = |c: RGBColor| format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        // Each of the 3 instances: its line in both panels and its legend swatch; no fourth
        // colour.
        for c in &PALETTE[..3] {
            assert_eq!(s.matches(&stroke(*c)).count(), 3, "{}", stroke(*c));
        }
        assert_eq!(s.matches(&stroke(PALETTE[3])).count(), 0);
    }

    #[test]
    fn many_instances_are_drawn_as_pool_mean_and_max() {
        let mut f = synthetic();
        f.timeseries = (0..12u32)
            .flat_map(|i| {
                (1..=5u64).map(move |second| TimeseriesRow {
                    second,
                    instance: i,
                    pool: if i < 4 { "prefill" } else { "decode" }.into(),
                    role: if i < 4 { "prefill" } else { "decode" },
                    arrivals: 1,
                    running: i,
                    queued: i,
                    kv_pages_used: 1,
                    kv_pages_total: 2,
                    tokens_out: 1,
                    link_utilisation: 0.5,
                    busy_fraction: 0.25,
                })
            })
            .collect();
        let s = svg(Chart::QueueDepth, &f);
        assert_texts(
            Chart::QueueDepth,
            &s,
            &[
                "prefill: mean of 4",
                "prefill: max",
                "decode: mean of 8",
                "decode: max",
            ],
        );
        assert!(!texts(&s).iter().any(|t| t == "decode #11"));
    }

    #[test]
    fn corrupted_and_failed_get_their_own_colours() {
        let f = synthetic();
        let hex = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        let outcomes = svg(Chart::Outcomes, &f);
        assert!(outcomes.contains(&hex(CORRUPTED)), "no corrupted bar");
        assert!(!outcomes.contains(&hex(PALETTE[6])));
        let timeline = svg(Chart::Timeline, &f);
        assert!(timeline.contains(&hex(FAILED_MARK)), "no failed end marker");
        assert!(
            timeline.contains(&hex(CORRUPTED)),
            "no corrupted end marker"
        );
        // Without failed or corrupted requests in the sample, no marker but the legend's.
        let mut calm = synthetic();
        for r in &mut calm.sample {
            r.outcome = Outcome::Completed;
        }
        let calm = svg(Chart::Timeline, &calm);
        assert_eq!(calm.matches(&hex(FAILED_MARK)).count(), 1);
    }

    #[test]
    fn rendering_is_byte_stable() {
        let f = synthetic();
        for chart in Chart::ALL {
            assert_eq!(svg(chart, &f), svg(chart, &f), "{}", chart.name());
        }
        let (a, b) = (temp_dir("charts-det-a"), temp_dir("charts-det-b"));
        let pa = render_charts(&f.input("unit-run"), &a, ImageFormat::Svg).unwrap();
        let pb = render_charts(&f.input("unit-run"), &b, ImageFormat::Svg).unwrap();
        assert_eq!(pa, pb);
        for p in &pa {
            assert_eq!(
                fs::read(a.join(p)).unwrap(),
                fs::read(b.join(p)).unwrap(),
                "{p:?}"
            );
        }
        let _ = (fs::remove_dir_all(a), fs::remove_dir_all(b));
    }

    #[test]
    fn render_charts_writes_every_chart_in_order() {
        let f = synthetic();
        let dir = temp_dir("charts-files");
        let paths = render_charts(&f.input("unit-run"), &dir, ImageFormat::Svg).unwrap();
        let want: Vec<PathBuf> = Chart::ALL
            .iter()
            .map(|c| PathBuf::from(format!("charts/{}.svg", c.name())))
            .collect();
        assert_eq!(paths, want);
        for p in &paths {
            let s = fs::read_to_string(dir.join(p)).unwrap();
            assert!(s.starts_with("<svg") && s.contains("width=\"900\" height=\"500\""));
        }
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn empty_inputs_render_valid_svgs_that_say_so() {
        let f = empty();
        for chart in Chart::ALL {
            let s = svg(chart, &f);
            assert_well_formed(&s);
            let t = texts(&s);
            assert!(
                t.iter().any(|x| x.starts_with("no data")),
                "{}: no 'no data' note in {t:?}",
                chart.name()
            );
            assert!(t.contains(&format!("{} — unit-run", chart.title())));
        }
    }

    #[test]
    fn a_single_value_histogram_renders() {
        let mut f = empty();
        f.ttft.record(0);
        f.tpot.record_n(30_000_000, 7);
        for chart in [Chart::TtftCdf, Chart::TpotCdf] {
            let s = svg(chart, &f);
            assert_well_formed(&s);
            assert!(!texts(&s).iter().any(|t| t.starts_with("no data")));
        }
    }

    #[test]
    fn cdf_points_rise_from_0_to_1() {
        let f = synthetic();
        let pts = cdf_points(&f.ttft);
        assert_eq!(pts.first().unwrap().1, 0.0);
        assert_eq!(pts.last().unwrap().1, 1.0);
        assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        assert!(matches!(cdf_axis(&pts), CdfAxis::Log(_)));
        assert!(matches!(cdf_axis(&cdf_points(&f.tpot)), CdfAxis::Linear(_)));
        assert!(cdf_points(&Histogram::new()).is_empty());
    }

    #[test]
    fn a_failed_requests_open_phase_runs_to_its_failure() {
        let f = synthetic();
        let failed = &f.sample[3];
        let p = phases(failed);
        let end = failed.finish_ns.unwrap() as f64 / 1e9;
        let transfer = p.iter().find(|x| x.0 == Phase::Transfer).unwrap();
        assert_eq!(transfer.2, end);
        assert!(!p.iter().any(|x| x.0 == Phase::Decode || x.0 == Phase::Wait));
        let done = phases(&f.sample[0]);
        assert_eq!(done.len(), 5);
    }

    #[test]
    fn long_series_are_averaged_down() {
        let pts: Vec<(f64, f64)> = (0..3600).map(|i| (i as f64, 2.0)).collect();
        let d = downsample(pts);
        assert!(d.len() <= MAX_POINTS && d.len() >= MAX_POINTS / 2);
        assert!(d.iter().all(|p| p.1 == 2.0));
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(0.0123), "0.0123");
        assert_eq!(fmt_num(1.5), "1.5");
        assert_eq!(fmt_num(250.0), "250");
        assert_eq!(fmt_num(12_345.0), "12345");
        assert_eq!(fmt_count(3.0), "3");
        assert_eq!(fmt_count(2.5), "");
        assert_eq!(nice_ceil(3.6), 4.0);
        assert_eq!(nice_ceil(1000.0), 1000.0);
        assert_eq!(nice_ceil(0.0), 1.0);
    }

    #[cfg(not(feature = "png"))]
    #[test]
    fn png_without_the_feature_is_a_clear_error() {
        let f = synthetic();
        let dir = temp_dir("charts-nopng");
        let e = render_charts(&f.input("x"), &dir, ImageFormat::Png).unwrap_err();
        assert_eq!(e.source.kind(), io::ErrorKind::Unsupported);
        assert!(e.to_string().contains("--features png"));
        let _ = fs::remove_dir_all(dir);
    }

    #[cfg(feature = "png")]
    #[test]
    fn png_charts_are_pngs() {
        let f = synthetic();
        let dir = temp_dir("charts-png");
        let paths = render_charts(&f.input("unit-run"), &dir, ImageFormat::Png).unwrap();
        assert_eq!(paths.len(), Chart::ALL.len());
        for p in &paths {
            let bytes = fs::read(dir.join(p)).unwrap();
            assert!(bytes.len() > 4096, "{p:?} is {} bytes", bytes.len());
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{p:?}");
        }
        // SVG still works with the bundled font registered.
        assert_well_formed(&svg(Chart::Timeline, &f));
        let _ = fs::remove_dir_all(dir);
    }
}
