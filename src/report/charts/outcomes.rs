//! 6. Outcomes: one bar per outcome — completed, each error kind, corrupted, unfinished.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::Summary;

use super::style::*;

// ---------------------------------------------------------------------------------------------
// 6. Outcomes.

/// Bars top to bottom: completed, one per error kind, corrupted, unfinished.
pub(super) fn outcome_bars(s: &Summary) -> Vec<(String, u64, RGBColor)> {
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
    if s.aborts.is_some() || s.requests.aborted > 0 {
        bars.push(("aborted (client left)".into(), s.requests.aborted, ABORTED));
    }
    bars
}

pub(super) fn outcomes_chart<DB: DrawingBackend>(
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
    let y_fmt = move |v: &f64| row_label(&labels, n as f64 - 0.5 - v);
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
