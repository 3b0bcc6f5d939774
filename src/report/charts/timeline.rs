//! Chart 7, timeline: the phases of a sample of requests, one row each, with how each ended,
//! and the run's event markers.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::engine::NS_PER_S;
use crate::report::markers::Marker;
use crate::vocab::{Outcome, RequestRow};

use super::markers;
use super::style::*;
use super::*;

/// A request phase on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
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

// ---------------------------------------------------------------------------------------------
// 7. Timeline.

/// The phase bars of one request, in seconds: `(phase, start, end)`. A phase whose end was
/// never reached runs to the request's finish (the failure), if it has one.
pub(super) fn phases(r: &RequestRow) -> Vec<(Phase, f64, f64)> {
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
pub(super) fn last_time(r: &RequestRow) -> u64 {
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

pub(super) fn timeline_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sample: &[RequestRow],
    marks: &[Marker],
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
    let groups = markers::groups(marks, &x);
    let x_marks = x.clone();
    // With markers, empty rows on top hold their labels (about one label row of height),
    // so no label covers a request's bars.
    let plot_h = f64::from(plot.dim_in_pixel().1) - 68.0;
    let extra = if groups.is_empty() {
        0
    } else {
        ((n as f64 * markers::LABEL_ROW_PX) / (plot_h - markers::LABEL_ROW_PX).max(1.0)).ceil()
            as usize
    };
    let label_rows =
        ((extra as f64 * plot_h / (n + extra) as f64) / markers::LABEL_ROW_PX).floor() as usize;
    // Label every row while they fit (about 16 px per label), else every k-th.
    let step = rows.len().div_ceil(24).max(1);
    let keys: Vec<f64> = (0..rows.len()).step_by(step).map(pos).collect();
    let ids: Vec<String> = rows.iter().map(|r| format!("#{}", r.id)).collect();
    let y_fmt = move |v: &f64| row_label(&ids, n as f64 - 0.5 - v);
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x, RowAxis::new(n + extra, keys))?;
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
    markers::draw_lines(&chart, &groups)?;
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
            Outcome::Completed | Outcome::Unfinished | Outcome::Aborted => None,
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
    let hidden = markers::draw_labels(&chart, &groups, label_rows.max(1))?;
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
    entries.extend(markers::legend_entries(marks, &x_marks, hidden));
    draw_legend(&legend, &entries)
}
