//! Chart 1, latency CDFs: TTFT and TPOT, one curve each, with their percentiles in the legend
//! and the `[slo]` targets of that latency as labelled lines.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::metrics::Histogram;

use super::style::*;

// ---------------------------------------------------------------------------------------------
// 1. Latency CDFs.

/// Piecewise-linear CDF through the histogram buckets: x in ms, y the fraction of values at or
/// below x. Flat between buckets, linear across a bucket (values assumed uniform within it).
pub(super) fn cdf_points(h: &Histogram) -> Vec<(f64, f64)> {
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
pub(super) enum CdfAxis {
    Linear(Range<f64>),
    Log(Range<f64>),
}

impl CdfAxis {
    fn range(&self) -> &Range<f64> {
        match self {
            CdfAxis::Linear(r) | CdfAxis::Log(r) => r,
        }
    }
}

/// The axis of the data, widened to take in the SLO thresholds `slo_ms` that lie near it: on a
/// linear axis, one that at most doubles its span; on a log axis, one within a decade of it.
/// A threshold further out stays off the axis (the chart points to it from the edge), so a
/// 2 s SLO does not squash a 40–200 ms curve into the left tenth of the chart.
pub(super) fn cdf_axis(pts: &[(f64, f64)], slo_ms: &[f64]) -> CdfAxis {
    let positive = pts.iter().map(|p| p.0).filter(|x| *x > 0.0);
    let (Some(lo), Some(hi)) = (positive.clone().reduce(f64::min), positive.reduce(f64::max))
    else {
        return CdfAxis::Linear(0.0..1.0);
    };
    if hi / lo > 100.0 {
        let mut lo = lo.log10().floor();
        let mut hi = hi.log10().ceil();
        for v in slo_ms.iter().filter(|v| **v > 0.0).map(|v| v.log10()) {
            if v > hi && v <= hi + 1.0 {
                hi = v.ceil();
            } else if v < lo && v >= lo - 1.0 {
                lo = v.floor();
            }
        }
        return CdfAxis::Log(10f64.powf(lo)..10f64.powf(hi));
    }
    let xmin = pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let span = hi - xmin;
    let pad = if span > 0.0 { span * 0.05 } else { hi * 0.1 };
    let (mut a, mut b) = ((xmin - pad).max(0.0), hi + pad);
    let width = b - a;
    for &v in slo_ms {
        if v > b && v <= b + width {
            b = v + 0.05 * (v - a);
        } else if v < a && v >= a - width {
            a = (v - 0.05 * (b - v)).max(0.0);
        }
    }
    CdfAxis::Linear(a..b)
}

/// Which latency an SLO target bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SloMetric {
    /// Time to first token.
    Ttft,
    /// Time per output token.
    Tpot,
}

/// An `[slo]` target drawn on a latency CDF.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SloTarget {
    /// The latency it bounds.
    pub metric: SloMetric,
    /// The threshold, ms.
    pub ms: f64,
    /// `None` for a per-request threshold (`ttft_ms`); `Some(0.99)` for a percentile target
    /// (`ttft_p99_ms`): the CDF must reach 0.99 at or before `ms`.
    pub quantile: Option<f64>,
}

/// One SLO line: the targets that share a threshold.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SloLine {
    pub ms: f64,
    /// The percentiles targeted at this threshold, ascending.
    pub quantiles: Vec<f64>,
    /// Whether a per-request threshold is at this value too.
    pub threshold: bool,
}

impl SloLine {
    /// `SLO ≤ 2000 ms`, `SLO p99 ≤ 2000 ms`, `SLO, p99 ≤ 2000 ms`.
    pub(super) fn label(&self) -> String {
        let qs: Vec<String> = self
            .quantiles
            .iter()
            .map(|q| format!("p{}", fmt_num(q * 100.0)))
            .collect();
        let what = match (self.threshold, qs.is_empty()) {
            (true, true) => "SLO".to_string(),
            (true, false) => format!("SLO, {}", qs.join(", ")),
            (false, _) => format!("SLO {}", qs.join(", ")),
        };
        format!("{what} ≤ {} ms", fmt_num(self.ms))
    }
}

impl SloLine {
    /// How the run fares against the line: `(72 % within)` for a threshold (share of the
    /// finished requests the CDF counts), `met` / `missed` for percentile targets.
    pub(super) fn verdict(&self, pts: &[(f64, f64)]) -> String {
        let at = cdf_at(pts, self.ms);
        let mut v = Vec::new();
        if self.threshold {
            v.push(format!("{} % within", fmt_num((at * 100.0).min(100.0))));
        }
        for q in &self.quantiles {
            // Rounding of the piecewise CDF: a hair below q still counts as reaching it.
            let met = at + 1e-9 >= *q;
            v.push(format!(
                "p{} {}",
                fmt_num(q * 100.0),
                if met { "met" } else { "missed" }
            ));
        }
        format!("({})", v.join(", "))
    }
}

/// The targets of one metric as lines, by threshold.
pub(super) fn slo_lines(targets: &[SloTarget], metric: SloMetric) -> Vec<SloLine> {
    let mut lines: Vec<SloLine> = Vec::new();
    for t in targets
        .iter()
        .filter(|t| t.metric == metric && t.ms.is_finite())
    {
        let i = match lines.iter().position(|l| l.ms == t.ms) {
            Some(i) => i,
            None => {
                lines.push(SloLine {
                    ms: t.ms,
                    quantiles: Vec::new(),
                    threshold: false,
                });
                lines.len() - 1
            }
        };
        match t.quantile {
            Some(q) => lines[i].quantiles.push(q),
            None => lines[i].threshold = true,
        }
    }
    for l in &mut lines {
        l.quantiles.sort_by(f64::total_cmp);
        l.quantiles.dedup();
    }
    lines.sort_by(|a, b| a.ms.total_cmp(&b.ms));
    lines
}

/// The colour of SLO lines and their labels.
const SLO: RGBColor = RGBColor(0x22, 0x22, 0x22);

pub(super) fn cdf_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    what: &str,
    h: &Histogram,
    slo: &[SloLine],
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
    let thresholds: Vec<f64> = slo.iter().map(|l| l.ms).collect();
    let axis = cdf_axis(&pts, &thresholds);
    let x = axis.range().clone();
    for l in slo {
        let off = if pts.is_empty() || (x.start..=x.end).contains(&l.ms) {
            ""
        } else {
            ", off axis"
        };
        entries.push(LegendEntry::new(
            format!("{}{off}", l.label()),
            SLO,
            Swatch::Line,
        ));
    }
    match axis {
        CdfAxis::Linear(x) => cdf_plot(&plot, x, &format!("{what} (ms)"), &pts, &quantiles, slo)?,
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
                slo,
            )?
        }
    }
    draw_legend(&legend, &entries)
}

pub(super) fn cdf_plot<DB, X>(
    area: &DrawingArea<DB, Shift>,
    x: X,
    x_desc: &str,
    pts: &[(f64, f64)],
    quantiles: &[(f64, RGBColor)],
    slo: &[SloLine],
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
    draw_slo(&chart, pts, slo)
}

/// The fraction of the CDF at or below `x` (linear between points).
fn cdf_at(pts: &[(f64, f64)], x: f64) -> f64 {
    match pts.iter().position(|p| p.0 >= x) {
        None => pts.last().map_or(0.0, |p| p.1),
        Some(0) => 0.0,
        Some(i) => {
            let (a, b) = (pts[i - 1], pts[i]);
            if b.0 > a.0 {
                a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
            } else {
                b.1
            }
        }
    }
}

/// SLO lines: a solid vertical line at each threshold within the axis, a dashed level at each
/// percentile target (the curve must reach it at or left of the line), and a label where the
/// curve is not (at the bottom where the curve has mostly risen, else at the top). A threshold
/// off the axis is named at the edge it lies beyond, with an arrow.
fn draw_slo<DB, X>(
    chart: &ChartContext<'_, DB, Cartesian2d<X, RangedCoordf64>>,
    pts: &[(f64, f64)],
    slo: &[SloLine],
) -> DrawResult<(), DB>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
{
    let area = chart.plotting_area();
    let plain = area.strip_coord_spec();
    let base = area.get_base_pixel();
    let (w, h) = plain.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let x = chart.x_range();
    let px = |v: f64, y: f64| {
        let p = area.map_coordinate(&(v, y));
        (p.0 - base.0, p.1 - base.1)
    };
    // Off-axis labels stack downwards at each edge.
    let (mut left_row, mut right_row) = (0, 0);
    for l in slo {
        let label = format!("{} {}", l.label(), l.verdict(pts));
        if l.ms > x.end || l.ms < x.start {
            // Beyond the right edge the curve has risen to the top there, so the note sits at
            // the bottom; beyond the left edge the curve is still at 0, so at the top.
            let right = l.ms > x.end;
            let row = if right { &mut right_row } else { &mut left_row };
            let (text, y) = if right {
                (format!("{label} →"), h - 26 - *row * 20)
            } else {
                (format!("← {label}"), 6 + *row * 20)
            };
            *row += 1;
            let style = text_style(LEGEND_PT, SLO);
            let (tw, th) = plain.estimate_text_size(&text, &style).unwrap_or((160, 14));
            let (tw, th) = (tw as i32, th as i32);
            let left = if right { w - 6 - tw } else { 6 };
            plain.draw(&Rectangle::new(
                [(left - 2, y - 2), (left + tw + 2, y + th + 2)],
                WHITE.mix(0.85).filled(),
            ))?;
            plain.draw_text(
                &text,
                &style.pos(Pos::new(HPos::Left, VPos::Top)),
                (left, y),
            )?;
            continue;
        }
        let (lx, _) = px(l.ms, 0.0);
        plain.draw(&PathElement::new(
            vec![(lx, 0), (lx, h)],
            SLO.stroke_width(2),
        ))?;
        for &q in &l.quantiles {
            let (_, qy) = px(l.ms, q);
            let mut sx = 0;
            while sx < lx {
                plain.draw(&PathElement::new(
                    vec![(sx, qy), ((sx + 6).min(lx), qy)],
                    SLO.stroke_width(1),
                ))?;
                sx += 10;
            }
            plain.draw(&Circle::new((lx, qy), 4, SLO.filled()))?;
        }
        let style = text_style(LEGEND_PT, SLO);
        let (tw, th) = plain
            .estimate_text_size(&label, &style)
            .unwrap_or((120, 14));
        let (tw, th) = (tw as i32, th as i32);
        let left = if lx + 6 + tw <= w - 2 {
            lx + 6
        } else {
            (lx - 6 - tw).max(2)
        };
        let top = if cdf_at(pts, l.ms) >= 0.5 {
            h - th - 8
        } else {
            6
        };
        plain.draw(&Rectangle::new(
            [(left - 2, top - 2), (left + tw + 2, top + th + 2)],
            WHITE.mix(0.85).filled(),
        ))?;
        plain.draw_text(
            &label,
            &style.pos(Pos::new(HPos::Left, VPos::Top)),
            (left, top),
        )?;
    }
    Ok(())
}
