//! The sessions chart (runs with `[workload.sessions]` or a session trace only): one bar per turn
//! index, the mean prompt split into its cached part and the part prefill recomputed, the hit
//! share written above it. It tells the multi-turn story at a glance: turn 0 recomputes
//! everything, later turns find most of their growing context in the cache tiers.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::metrics::sessions::{SessionSummary, TurnRow};

use super::style::*;

/// Colour of the cached part of a turn's prompt.
pub(super) const CACHED: RGBColor = PALETTE[4];
/// Colour of the recomputed part.
pub(super) const COMPUTED: RGBColor = PALETTE[1];

/// A turn's mean prompt as (cached, recomputed) tokens per request. The cached part is the
/// turn's hit share of its mean prompt: `hit_share` counts admitted requests only, so for a
/// turn with refused prompts this is the admitted requests' share drawn over all of them.
pub(super) fn turn_split(t: &TurnRow) -> (f64, f64) {
    let mean = t.mean_context_tokens.unwrap_or(0.0);
    let cached = mean * t.hit_share.unwrap_or(0.0);
    (cached, mean - cached)
}

/// The x tick label of a turn row: its index, `k+` for the row holding every later turn.
fn turn_label(t: &TurnRow) -> String {
    if t.and_later {
        format!("{}+", t.turn)
    } else {
        t.turn.to_string()
    }
}

pub(super) fn sessions_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sessions: Option<&SessionSummary>,
) -> DrawResult<(), DB> {
    let rows: &[TurnRow] = sessions.map_or(&[], |s| &s.by_turn);
    let (plot, legend) = with_legend(area);
    let n = rows.len();
    let max = rows
        .iter()
        .map(|t| t.mean_context_tokens.unwrap_or(0.0))
        .fold(0.0, f64::max);
    // Room above the tallest bar for its hit-share label.
    let y_max = nice_ceil(max.max(1.0) * 1.15);
    let keys: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
    let labels: Vec<String> = rows.iter().map(turn_label).collect();
    let x_fmt = move |v: &f64| row_label(&labels, v - 0.5);
    let mut chart = ChartBuilder::on(&plot)
        .margin(10)
        .margin_right(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(RowAxis::new(n.max(1), keys), 0f64..y_max)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(1)
        .x_desc("turn index (0 = a session's first request)")
        .y_desc("mean prompt tokens per request")
        .label_style(text_style(TICK_PT, TEXT))
        .axis_desc_style(text_style(DESC_PT, TEXT))
        .bold_line_style(GRID_BOLD)
        .light_line_style(GRID_LIGHT)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| fmt_count(*v))
        .draw()?;
    for (i, t) in rows.iter().enumerate() {
        let (cached, computed) = turn_split(t);
        let (l, r) = (i as f64 + 0.18, i as f64 + 0.82);
        chart.draw_series([
            Rectangle::new([(l, 0.0), (r, cached)], CACHED.filled()),
            Rectangle::new([(l, cached), (r, cached + computed)], COMPUTED.filled()),
        ])?;
        if let Some(share) = t.hit_share {
            chart.draw_series(std::iter::once(
                EmptyElement::at((i as f64 + 0.5, cached + computed))
                    + Text::new(
                        format!("{}%", fmt_num(100.0 * share)),
                        (0, -4),
                        text_style(TICK_PT, TEXT).pos(Pos::new(HPos::Center, VPos::Bottom)),
                    ),
            ))?;
        }
    }
    if rows.is_empty() {
        draw_note(chart.plotting_area(), "no data: no session turn arrived")?;
    }
    let mut entries = vec![
        LegendEntry::new("cached (not recomputed)", CACHED, Swatch::Bar),
        LegendEntry::new("recomputed by prefill", COMPUTED, Swatch::Bar),
    ];
    if let Some(s) = sessions {
        // The run's totals, so the bars' shares can be read against the whole.
        entries.push(LegendEntry::new(
            format!("{} sessions, {} turns", s.started, s.turns),
            MUTED,
            Swatch::Marker,
        ));
        if let Some(share) = s.hit_share {
            entries.push(LegendEntry::new(
                format!("all turns: {}% hit", fmt_num(100.0 * share)),
                MUTED,
                Swatch::Marker,
            ));
        }
    }
    draw_legend(&legend, &entries)
}
