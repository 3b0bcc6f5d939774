//! Event markers on the time charts: a dashed vertical line per fault, recovery or transfer-
//! worker death, and its label near the top of the chart's first panel. Labels never overlap:
//! each goes in the first of a few text rows where it fits (right of its line, or left of it
//! near the right edge); one that fits nowhere is left out and the legend says so (the
//! "Events" table of `index.html` lists every marker).

use plotters::coord::Shift;
use plotters::coord::cartesian::Cartesian2d;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::markers::{Marker, MarkerKind};

use super::style::*;

/// Injected faults: near-black, apart from the red of failed requests.
pub(super) const FAULT: RGBColor = RGBColor(0x22, 0x22, 0x22);
/// Recoveries (restart, link up, …).
pub(super) const RECOVERY: RGBColor = RGBColor(0x1B, 0x7F, 0x3B);
/// Transfer-worker deaths.
pub(super) const WORKER_DEATH: RGBColor = RGBColor(0x8C, 0x51, 0x0A);
/// plotters size of the marker labels (SVG font-size 13 / 1.24 ≈ 10.5 px).
const LABEL_PT: f64 = 13.0;
/// Text rows for labels at most on a line panel.
pub(super) const LABEL_ROWS: usize = 4;
/// Height of one label row, px (a 10.5 px font with its white backing).
pub(super) const LABEL_ROW_PX: f64 = 18.0;

fn color(k: MarkerKind) -> RGBColor {
    match k {
        MarkerKind::Fault => FAULT,
        MarkerKind::Recovery => RECOVERY,
        MarkerKind::WorkerDeath { .. } => WORKER_DEATH,
    }
}

/// A line drawn for one or more markers at the same time and of the same kind (four links
/// losing packets at once are one line, "2% loss node1.nic0.rx (+3 more)").
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Group {
    pub at_s: f64,
    pub color: RGBColor,
    pub label: String,
}

/// The markers within `x` (seconds), grouped by time and kind, in time order.
pub(super) fn groups(markers: &[Marker], x: &std::ops::Range<f64>) -> Vec<Group> {
    let mut out: Vec<(Group, usize, u64, &'static str)> = Vec::new();
    for m in markers {
        let at = m.at_s();
        if at < x.start || at > x.end {
            continue;
        }
        let kind = m.kind.as_str();
        match out.last_mut() {
            Some((_, n, t, k)) if *t == m.at_ns && *k == kind => *n += 1,
            _ => out.push((
                Group {
                    at_s: at,
                    color: color(m.kind),
                    label: m.label.clone(),
                },
                1,
                m.at_ns,
                kind,
            )),
        }
    }
    out.into_iter()
        .map(|(mut g, n, _, _)| {
            if n > 1 {
                g.label = format!("{} (+{} more)", g.label, n - 1);
            }
            g
        })
        .collect()
}

/// Legend entries: one per marker kind present within `x`, then how many labels were left out.
pub(super) fn legend_entries(
    markers: &[Marker],
    x: &std::ops::Range<f64>,
    hidden: usize,
) -> Vec<LegendEntry> {
    let mut entries = Vec::new();
    for (name, c) in [
        ("fault", FAULT),
        ("recovery", RECOVERY),
        ("worker died", WORKER_DEATH),
    ] {
        let n = markers
            .iter()
            .filter(|m| m.kind.as_str() == name && (x.start..=x.end).contains(&m.at_s()))
            .count();
        if n > 0 {
            entries.push(LegendEntry::new(
                if n == 1 {
                    name.to_string()
                } else {
                    format!("{name} ×{n}")
                },
                c,
                Swatch::Dashed,
            ));
        }
    }
    if hidden > 0 {
        entries.push(LegendEntry::new(
            format!("{hidden} labels: see Events"),
            MUTED,
            Swatch::Dashed,
        ));
    }
    entries
}

/// A chart whose x axis is simulated seconds.
pub(super) type TimeChart<'a, 'b, DB, Y> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Y>>;

/// Pixel x of each group within the plotting area (relative to its left edge).
fn pixel_xs<DB, Y>(chart: &TimeChart<'_, '_, DB, Y>, groups: &[Group]) -> Vec<i32>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    let area = chart.plotting_area();
    let base = area.get_base_pixel().0;
    let y0 = chart.y_range().start;
    groups
        .iter()
        .map(|g| area.map_coordinate(&(g.at_s, y0)).0 - base)
        .collect()
}

/// The dashed vertical lines (drawn under the data).
pub(super) fn draw_lines<DB, Y>(
    chart: &TimeChart<'_, '_, DB, Y>,
    groups: &[Group],
) -> DrawResult<(), DB>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    let area: DrawingArea<DB, Shift> = chart.plotting_area().strip_coord_spec();
    let (_, h) = area.dim_in_pixel();
    for (g, x) in groups.iter().zip(pixel_xs(chart, groups)) {
        let mut y = 0;
        while y < h as i32 {
            let end = (y + 6).min(h as i32);
            area.draw(&PathElement::new(
                vec![(x, y), (x, end)],
                g.color.stroke_width(2),
            ))?;
            y += 10;
        }
    }
    Ok(())
}

/// Where each label goes: `Some((left x, row))` in pixels of the plotting area, or `None` when
/// it fits in no row. `widths` are the labels' estimated widths, `xs` their lines' positions.
pub(super) fn place_labels(
    xs: &[i32],
    widths: &[i32],
    plot_w: i32,
    rows: usize,
) -> Vec<Option<(i32, usize)>> {
    const GAP: i32 = 4;
    let mut taken: Vec<Vec<(i32, i32)>> = vec![Vec::new(); rows];
    xs.iter()
        .zip(widths)
        .map(|(&x, &w)| {
            // Right of the line when it fits, else left of it, else flush with the left edge.
            let left = if x + GAP + w <= plot_w - 2 {
                x + GAP
            } else {
                (x - GAP - w).max(2)
            };
            let span = (left - GAP, left + w + GAP);
            let row = taken
                .iter()
                .position(|r| r.iter().all(|&(a, b)| span.1 <= a || span.0 >= b))?;
            taken[row].push(span);
            Some((left, row))
        })
        .collect()
}

/// The labels, on a white backing, near the top of the plotting area (drawn over the data).
/// Returns how many did not fit.
pub(super) fn draw_labels<DB, Y>(
    chart: &TimeChart<'_, '_, DB, Y>,
    groups: &[Group],
    max_rows: usize,
) -> DrawResult<usize, DB>
where
    DB: DrawingBackend,
    Y: Ranged<ValueType = f64>,
{
    let area: DrawingArea<DB, Shift> = chart.plotting_area().strip_coord_spec();
    let (w, h) = area.dim_in_pixel();
    let style = |c: RGBColor| text_style(LABEL_PT, c).pos(Pos::new(HPos::Left, VPos::Top));
    let mut widths = Vec::with_capacity(groups.len());
    let mut row_h = 12;
    for g in groups {
        let (tw, th) = area
            .estimate_text_size(&g.label, &style(g.color))
            .unwrap_or((g.label.chars().count() as u32 * 7, 12));
        widths.push(tw as i32);
        row_h = row_h.max(th as i32);
    }
    let row_h = row_h + 4;
    let rows = max_rows.min(((h as i32 - 8) / row_h).max(1) as usize);
    let xs = pixel_xs(chart, groups);
    let places = place_labels(&xs, &widths, w as i32, rows);
    let mut hidden = 0;
    for ((g, tw), place) in groups.iter().zip(&widths).zip(places) {
        let Some((left, row)) = place else {
            hidden += 1;
            continue;
        };
        let top = 4 + row as i32 * row_h;
        area.draw(&Rectangle::new(
            [(left - 2, top - 1), (left + tw + 2, top + row_h - 3)],
            WHITE.mix(0.85).filled(),
        ))?;
        area.draw_text(&g.label, &style(g.color), (left, top))?;
    }
    Ok(hidden)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(at_s: u64, kind: MarkerKind, label: &str) -> Marker {
        Marker {
            at_ns: at_s * 1_000_000_000,
            kind,
            label: label.into(),
        }
    }

    #[test]
    fn same_time_same_kind_share_a_line() {
        let ms = [
            m(5, MarkerKind::Fault, "loss a"),
            m(5, MarkerKind::Fault, "loss b"),
            m(5, MarkerKind::Recovery, "up c"),
            m(9, MarkerKind::Fault, "d"),
            m(99, MarkerKind::Fault, "beyond the axis"),
        ];
        let g = groups(&ms, &(0.0..60.0));
        let labels: Vec<&str> = g.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(labels, ["loss a (+1 more)", "up c", "d"]);
        assert_eq!(g[1].color, RECOVERY);
        let legend = legend_entries(&ms, &(0.0..60.0), 2);
        let texts: Vec<&str> = legend.iter().map(|e| e.label()).collect();
        assert_eq!(texts, ["fault ×3", "recovery", "2 labels: see Events"]);
    }

    #[test]
    fn labels_never_overlap_and_flip_left_at_the_right_edge() {
        // Three labels 100 px wide at 10, 50 and 590 px of a 600 px plot, two rows.
        let p = place_labels(&[10, 50, 590], &[100, 100, 100], 600, 2);
        assert_eq!(p[0], Some((14, 0)));
        assert_eq!(
            p[1],
            Some((54, 1)),
            "the second overlaps the first: next row"
        );
        assert_eq!(p[2], Some((486, 0)), "flipped left of its line");
        // A fourth at 30 px fits in neither row.
        let p = place_labels(&[10, 50, 30], &[100, 100, 100], 600, 2);
        assert_eq!(p[2], None);
    }
}
