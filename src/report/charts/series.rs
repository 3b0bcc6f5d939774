//! 2–5. Time series over simulated seconds: throughput, and per-instance queue depth, KV
//! usage and utilisation (one line per instance, or pool mean and max past
//! [`MAX_INSTANCE_LINES`](super::MAX_INSTANCE_LINES)).

use std::collections::BTreeMap;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::metrics::TimeseriesRow;

use super::style::*;
use super::*;

// ---------------------------------------------------------------------------------------------
// 2–5. Time series.

pub(super) struct Line {
    label: String,
    color: RGBColor,
    /// Secondary line (a pool's max), drawn 1 px.
    thin: bool,
    points: Vec<(f64, f64)>,
}

/// `c` halfway to white.
pub(super) fn lighten(c: RGBColor) -> RGBColor {
    let h = |v: u8| v + (255 - v) / 2;
    RGBColor(h(c.0), h(c.1), h(c.2))
}

/// One panel of lines over simulated seconds.
pub(super) struct Panel<'s> {
    y_desc: &'s str,
    /// Fixed y range (fractions), else 0 to a nice maximum of the data.
    y_fixed: Option<Range<f64>>,
    /// Whole-number y labels only.
    counts: bool,
    /// The bottom panel carries the x labels and description.
    x_axis: bool,
}

pub(super) fn x_range(lines: &[Line]) -> Range<f64> {
    let max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(0.0, f64::max);
    0.0..max.max(1.0)
}

pub(super) fn line_panel<DB: DrawingBackend>(
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
pub(super) fn throughput_chart<DB: DrawingBackend>(
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
pub(super) enum Metric {
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
pub(super) fn instance_chart<DB: DrawingBackend>(
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
