//! 2–5. Time series over simulated seconds: throughput (with requests finished per second by
//! outcome), and per-instance queue depth, KV usage and utilisation (one line per instance, or
//! pool mean and max past [`MAX_INSTANCE_LINES`](super::MAX_INSTANCE_LINES)). Every panel
//! shows the run's event markers; the first panel of a chart carries their labels.

use std::collections::BTreeMap;
use std::ops::Range;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::metrics::TimeseriesRow;
use crate::metrics::fragmentation::TransferShape;
use crate::report::markers::Marker;
use crate::report::rates::{FinishRates, RatePoint};

use super::markers;
use super::style::*;
use super::*;

// ---------------------------------------------------------------------------------------------
// 2–5. Time series.

pub(super) struct Line {
    label: String,
    color: RGBColor,
    /// Secondary line (a pool's max), drawn 1 px.
    thin: bool,
    /// Drawn only around its non-zero points (failures: a red line along the axis would read
    /// as failing all the time and hide the axis).
    sparse: bool,
    points: Vec<(f64, f64)>,
}

/// The stretches of `points` to draw when only the non-zero ones matter: each non-zero point
/// with its neighbours, so a spike rises from 0 and returns to it.
pub(super) fn nonzero_runs(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let keep = |i: usize| {
        points[i].1 != 0.0
            || (i > 0 && points[i - 1].1 != 0.0)
            || points.get(i + 1).is_some_and(|p| p.1 != 0.0)
    };
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut open = false;
    for (i, p) in points.iter().enumerate() {
        if keep(i) {
            if !open {
                runs.push(Vec::new());
                open = true;
            }
            runs.last_mut().expect("pushed above").push(*p);
        } else {
            open = false;
        }
    }
    runs
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

/// Draws one panel; `marks` are the event markers (lines always, labels when `marks.labels`).
/// Returns how many marker labels did not fit.
pub(super) fn line_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    x: Range<f64>,
    panel: &Panel,
    lines: &[Line],
    empty_note: &str,
    marks: &Marks,
) -> DrawResult<usize, DB> {
    let y = panel.y_fixed.clone().unwrap_or_else(|| {
        let max = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(0.0, f64::max);
        // Room above the data for the marker labels of the top panel.
        let room = if marks.labels && !marks.groups.is_empty() {
            1.3
        } else {
            1.05
        };
        0.0..nice_ceil(max * room)
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
    // Markers under the data, their labels over it.
    markers::draw_lines(&chart, marks.groups)?;
    for l in lines {
        let style = l.color.stroke_width(if l.thin { 1 } else { 2 });
        if l.sparse {
            for run in nonzero_runs(&l.points) {
                chart.draw_series(LineSeries::new(run, style))?;
            }
        } else {
            chart.draw_series(LineSeries::new(l.points.iter().copied(), style))?;
        }
    }
    if lines.iter().all(|l| l.points.is_empty()) {
        draw_note(chart.plotting_area(), empty_note)?;
    }
    if marks.labels {
        return markers::draw_labels(&chart, marks.groups, markers::LABEL_ROWS);
    }
    Ok(0)
}

/// The event markers of a panel.
pub(super) struct Marks<'g> {
    pub groups: &'g [markers::Group],
    /// Whether this panel carries the labels (the top one of a chart).
    pub labels: bool,
}

/// Three panels over simulated seconds: output tokens/s (decode); arrivals/s and prefills
/// done/s; and requests finished per second by outcome — completed, failed and corrupted side
/// by side, so a run whose requests fail looks different from one whose requests complete.
pub(super) fn throughput_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ts: &[TimeseriesRow],
    rates: &FinishRates,
    marks: &[Marker],
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
        sparse: false,
        points: series(|v| v.0),
    }];
    let middle = [
        Line {
            label: "arrivals/s".into(),
            color: PALETTE[1],
            thin: false,
            sparse: false,
            points: series(|v| v.2),
        },
        Line {
            label: "prefills done/s".into(),
            // Not green: green is "completed" in the panel below.
            color: PALETTE[3],
            thin: false,
            sparse: false,
            points: series(|v| v.1),
        },
    ];
    let last_s = per_s.keys().next_back().copied().unwrap_or(0);
    let (bottom, notes) = finished_lines(rates, last_s);
    let panel = |y_desc, x_axis| Panel {
        y_desc,
        y_fixed: None,
        counts: false,
        x_axis,
    };
    let no_rows = "no data: no timeseries rows";
    three_panels(
        area,
        [
            (panel("tokens/s", false), &top, no_rows),
            (panel("requests in/s", false), &middle, no_rows),
            (panel("finished/s", true), &bottom, "no request finished"),
        ],
        notes,
        marks,
    )
}

/// Three stacked panels over simulated seconds — each `(panel, lines, note when empty)`, the
/// last with the x axis — sharing the x range and the event markers (labelled on the top
/// panel), and the legend: every line, then `extra`, then the markers.
fn three_panels<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panels: [(Panel, &[Line], &str); 3],
    extra: Vec<LegendEntry>,
    marks: &[Marker],
) -> DrawResult<(), DB> {
    let (plot, legend) = with_legend(area);
    let end = (panels.iter()).fold(0.0f64, |m, p| m.max(x_range(p.1).end));
    let x = 0.0..end;
    let groups = markers::groups(marks, &x);
    let h = plot.dim_in_pixel().1;
    // Panels without the x axis are shorter by its 48 px.
    let (upper, rest) = plot.split_vertically((h.saturating_sub(48)) / 3);
    let (mid, lower) = rest.split_vertically((h.saturating_sub(48)) / 3);
    let mut hidden = 0;
    for (k, (area, (panel, lines, empty))) in [upper, mid, lower].iter().zip(&panels).enumerate() {
        let marks = Marks {
            groups: &groups,
            labels: k == 0,
        };
        hidden += line_panel(area, x.clone(), panel, lines, empty, &marks)?;
    }
    let mut entries: Vec<LegendEntry> = (panels.iter())
        .flat_map(|p| p.1.iter())
        .map(|l| LegendEntry::new(l.label.clone(), l.color, Swatch::Line))
        .collect();
    entries.extend(extra);
    entries.extend(markers::legend_entries(marks, &x, hidden));
    draw_legend(&legend, &entries)
}

/// RDMA writes per request (p50, p99) over transfer time (p50, p99), each point one bucket of
/// transfer starts (chart 9): writes that climb while the load stays level are the free list
/// fragmenting (`docs/sglang-pd.md` §22).
pub(super) fn fragmentation_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    shape: &TransferShape,
    marks: &[Marker],
) -> DrawResult<(), DB> {
    let line =
        |label: &str, color, thin, f: &dyn Fn(&crate::metrics::fragmentation::Span) -> f64| Line {
            label: label.to_string(),
            color,
            thin,
            sparse: false,
            points: downsample(shape.series().map(|(x, s)| (x, f(s))).collect()),
        };
    let top = [
        line("writes p50", PALETTE[0], false, &|s| s.writes.quantile(0.5)),
        line("writes p99", PALETTE[0], true, &|s| s.writes.quantile(0.99)),
    ];
    let bottom = [
        line("transfer p50", PALETTE[1], false, &|s| {
            s.transfer_us.quantile(0.5) / 1e3
        }),
        line("transfer p99", PALETTE[1], true, &|s| {
            s.transfer_us.quantile(0.99) / 1e3
        }),
    ];
    let (plot, legend) = with_legend(area);
    // The whole arrival window, so a run whose transfers stop early shows where they stopped.
    let x = 0.0..x_range(&top).end.max(shape.window_s());
    let groups = markers::groups(marks, &x);
    let h = plot.dim_in_pixel().1;
    let (upper, lower) = plot.split_vertically((h.saturating_sub(48)) / 2);
    let panel = |y_desc, x_axis| Panel {
        y_desc,
        y_fixed: None,
        counts: false,
        x_axis,
    };
    let none = "no data: no transfers (a colocated run, or none finished)";
    let mut hidden = line_panel(
        &upper,
        x.clone(),
        &panel("RDMA writes per request", false),
        &top,
        none,
        &Marks {
            groups: &groups,
            labels: true,
        },
    )?;
    hidden += line_panel(
        &lower,
        x.clone(),
        &panel("transfer time (ms)", true),
        &bottom,
        none,
        &Marks {
            groups: &groups,
            labels: false,
        },
    )?;
    let mut entries: Vec<LegendEntry> = top
        .iter()
        .chain(&bottom)
        .map(|l| LegendEntry::new(l.label.clone(), l.color, Swatch::Line))
        .collect();
    entries.push(LegendEntry::new(
        format!("{} s buckets", fmt_num(shape.bucket_s())),
        lighten(PALETTE[0]),
        Swatch::Line,
    ));
    entries.extend(markers::legend_entries(marks, &x, hidden));
    draw_legend(&legend, &entries)
}

/// Completed, failed and corrupted requests per second. An outcome that never happened gets
/// no line (it would lie on the axis) but a legend entry saying so.
fn finished_lines(rates: &FinishRates, last_s: u64) -> (Vec<Line>, Vec<LegendEntry>) {
    let pts = rates.series(last_s);
    let totals = rates.totals();
    type Rate = fn(&RatePoint) -> f64;
    let kinds: [(&str, RGBColor, Rate); 3] = [
        ("completed", COMPLETED, |p| p.completed),
        ("failed", FAILED[0], |p| p.failed),
        ("corrupted", CORRUPTED, |p| p.corrupted),
    ];
    let mut lines = Vec::new();
    let mut notes = Vec::new();
    for ((name, color, f), total) in kinds.into_iter().zip(totals) {
        if total == 0 {
            notes.push(LegendEntry::new(
                format!("{name}/s: none"),
                lighten(color),
                Swatch::Line,
            ));
            continue;
        }
        lines.push(Line {
            label: format!("{name}/s ({total} in all)"),
            color,
            thin: false,
            sparse: name != "completed",
            points: downsample(pts.iter().map(|p| (p.second, f(p))).collect()),
        });
    }
    (lines, notes)
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
    marks: &[Marker],
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
                    sparse: false,
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
                sparse: false,
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
                sparse: false,
                points: downsample(per_s.iter().map(|(s, v)| (*s as f64, v.1)).collect()),
            });
        }
        lines
    };
    let (plot, legend) = with_legend(area);
    let panels: Vec<Vec<Line>> = metrics.iter().map(|m| lines_of(*m)).collect();
    let x = x_range(&panels[0]);
    let groups = markers::groups(marks, &x);
    let mut hidden = 0;
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
        let labels = Marks {
            groups: &groups,
            labels: k == 0,
        };
        hidden += line_panel(&this, x.clone(), &m.panel(last), lines, empty_note, &labels)?;
    }
    let mut entries: Vec<LegendEntry> = panels[0]
        .iter()
        .map(|l| LegendEntry::new(l.label.clone(), l.color, Swatch::Line))
        .collect();
    entries.extend(markers::legend_entries(marks, &x, hidden));
    draw_legend(&legend, &entries)
}

/// Pools that change size (issue 38, item 4): instances serving and starting per pool, the
/// demand (arrivals/s), and the share of each bucket's completed requests whose TTFT met
/// `slo.ttft_ms` — capacity against demand, and what the lag of a scale-up costs.
pub(super) fn pools_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    ts: &[TimeseriesRow],
    rates: &FinishRates,
    marks: &[Marker],
) -> DrawResult<(), DB> {
    // second → (prefill serving, decode serving, starting, arrivals)
    type Second = (u32, u32, u32, u64);
    let mut per_s: BTreeMap<u64, Second> = BTreeMap::new();
    for r in ts {
        let e = per_s.entry(r.second).or_default();
        if let Some(f) = &r.fleet {
            (e.0, e.1) = (f.prefill_instances, f.decode_instances);
            e.2 += u32::from(f.state == "starting");
        }
        if r.role != "decode" {
            e.3 += r.arrivals;
        }
    }
    let line = |label: &str, color, f: &dyn Fn(&Second) -> f64| Line {
        label: label.into(),
        color,
        thin: false,
        sparse: false,
        points: downsample(per_s.iter().map(|(s, v)| (*s as f64, f(v))).collect()),
    };
    let top = [
        line("prefill serving", PALETTE[0], &|v| f64::from(v.0)),
        line("decode serving", PALETTE[1], &|v| f64::from(v.1)),
        line("starting", PALETTE[3], &|v| f64::from(v.2)),
    ];
    let middle = [line("arrivals/s", PALETTE[2], &|v| v.3 as f64)];
    let last_s = per_s.keys().next_back().copied().unwrap_or(0);
    let attained: Vec<(f64, f64)> = (rates.series(last_s).iter())
        .filter(|p| p.completed > 0.0)
        .map(|p| (p.second, p.ttft_met / p.completed))
        .collect();
    let bottom = [Line {
        label: "TTFT within slo.ttft_ms (share of completed)".into(),
        color: PALETTE[4],
        thin: false,
        sparse: false,
        points: downsample(attained),
    }];
    let panel = |y_desc, y_fixed, counts, x_axis| Panel {
        y_desc,
        y_fixed,
        counts,
        x_axis,
    };
    let no_rows = "no data: no timeseries rows";
    three_panels(
        area,
        [
            (panel("instances", None, true, false), &top, no_rows),
            (panel("requests in/s", None, false, false), &middle, no_rows),
            (
                panel("TTFT met", Some(0.0..1.0), false, true),
                &bottom,
                "no request completed, or no slo.ttft_ms",
            ),
        ],
        Vec::new(),
        marks,
    )
}
