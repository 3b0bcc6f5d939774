//! What every chart shares: sizes, fonts and colours, number formats for axes, the legend
//! panel, the "no data" note, series thinning and the row axis of the timeline.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Points per line at most (about one per pixel): longer series are averaged over windows of
/// consecutive seconds.
pub(super) const MAX_POINTS: usize = 600;
/// Width of the legend panel, px.
pub(super) const LEGEND_W: u32 = 200;
pub(super) const FONT: &str = "sans-serif";
// plotters sizes; the SVG font-size is size / 1.24 px.
pub(super) const TITLE_PT: f64 = 24.0;
pub(super) const DESC_PT: f64 = 17.0;
pub(super) const TICK_PT: f64 = 15.0;
pub(super) const LEGEND_PT: f64 = 15.0;
pub(super) const NOTE_PT: f64 = 22.0;

/// Tableau 10: distinct, colour-blind-friendlier than the plotters palette.
pub(crate) const PALETTE: [RGBColor; 10] = [
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
pub(super) const COMPLETED: RGBColor = RGBColor(0x59, 0xA1, 0x4F);
/// Failed requests: shades of red and orange, one per error kind, cycling.
pub(super) const FAILED: [RGBColor; 4] = [
    RGBColor(0xD6, 0x27, 0x28),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0xB2, 0x18, 0x2B),
    RGBColor(0xFF, 0x7F, 0x50),
];
/// The silent hazard gets a colour used for nothing else.
pub(super) const CORRUPTED: RGBColor = RGBColor(0x7B, 0x32, 0x94);
pub(super) const UNFINISHED: RGBColor = RGBColor(0x9E, 0x9E, 0x9E);
/// Requests aborted after their client disconnected.
pub(super) const ABORTED: RGBColor = RGBColor(0x4E, 0x79, 0xA7);
/// Timeline end marker of a failed request.
pub(super) const FAILED_MARK: RGBColor = RGBColor(0xD6, 0x27, 0x28);
pub(super) const GRID_BOLD: RGBColor = RGBColor(0xD8, 0xD8, 0xD8);
pub(super) const GRID_LIGHT: RGBColor = RGBColor(0xF2, 0xF2, 0xF2);
pub(super) const TEXT: RGBColor = RGBColor(0x22, 0x22, 0x22);
pub(super) const MUTED: RGBColor = RGBColor(0x77, 0x77, 0x77);

// ---------------------------------------------------------------------------------------------
// Shared pieces: text styles, number formats, the legend panel, the "no data" note.

pub(super) fn text_style(size: f64, color: RGBColor) -> TextStyle<'static> {
    (FONT, size).into_font().color(&color)
}

/// Up to three significant digits, no trailing zeros: 0.0123, 1.5, 250, 12000.
pub(super) fn fmt_num(v: f64) -> String {
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
pub(super) fn fmt_count(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        String::new()
    }
}

/// Smallest "nice" number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k) at or above `v`.
pub(super) fn nice_ceil(v: f64) -> f64 {
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
pub(super) enum Swatch {
    Line,
    Dashed,
    Bar,
    Marker,
}

pub(super) struct LegendEntry {
    label: String,
    color: RGBColor,
    swatch: Swatch,
}

impl LegendEntry {
    pub(super) fn new(label: impl Into<String>, color: RGBColor, swatch: Swatch) -> Self {
        Self {
            label: label.into(),
            color,
            swatch,
        }
    }

    /// The text shown.
    #[cfg(test)]
    pub(super) fn label(&self) -> &str {
        &self.label
    }
}

/// Splits off the legend panel on the right of `area`; returns (plot area, legend area).
pub(super) fn with_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = area.dim_in_pixel();
    area.split_horizontally(w.saturating_sub(LEGEND_W))
}

/// Draws the entries one per row; when they do not fit, the last row says how many are left.
pub(super) fn draw_legend<DB: DrawingBackend>(
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
pub(super) fn draw_note<DB: DrawingBackend, CT: CoordTranslate>(
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
pub(super) fn downsample(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
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

/// The label of row `i` (a row centre's index, rounded) on a [`RowAxis`], empty off the rows.
pub(super) fn row_label(labels: &[String], i: f64) -> String {
    let i = i.round();
    if i >= 0.0 && (i as usize) < labels.len() {
        labels[i as usize].clone()
    } else {
        String::new()
    }
}

/// A vertical axis of `n` rows, `0..n`, with ticks exactly at the given row centres (plotters'
/// `with_key_points` offers no label formatter).
pub(super) struct RowAxis {
    n: f64,
    keys: Vec<f64>,
}

impl RowAxis {
    pub(super) fn new(n: usize, keys: Vec<f64>) -> Self {
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
