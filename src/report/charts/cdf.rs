//! 1. Latency CDFs: TTFT and TPOT, one curve each, with their percentiles in the legend.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

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

pub(super) fn cdf_axis(pts: &[(f64, f64)]) -> CdfAxis {
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

pub(super) fn cdf_chart<DB: DrawingBackend>(
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

pub(super) fn cdf_plot<DB, X>(
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
