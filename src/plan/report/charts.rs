//! The report's charts, inline plotters SVG drawn from the points alone: latency against the
//! arrival rate, throughput per GPU against TTFT with the Pareto front, every point's latency
//! in cost order (the ladder), and the prefill × decode split map.

use std::collections::BTreeMap;

use plotters::prelude::*;

use super::figures::{binding, esc, mean, pick, rate_axis, short_label, target_of, worst};
use crate::metrics::slo::fmt_ms;
use crate::plan::Grid;
use crate::plan::SweepRow;
use crate::plan::search::PointVerdict;
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::RangedCoordi32;

const W: u32 = 720;
const H: u32 = 420;
/// The run report's palette (Tableau 10), so both reports read alike.
const COLORS: [RGBColor; 10] = crate::report::charts::PALETTE;
/// Points that meet `[slo]` (Tableau green) and those that miss it (Tableau grey).
const MEETS: RGBColor = COLORS[4];
const MISSES: RGBColor = COLORS[9];

/// A label of a point's values other than the axis `skip`.
fn label(v: &PointVerdict, skip: Option<usize>) -> String {
    let parts: Vec<String> = v
        .values
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, (k, val))| {
            format!(
                "{}={val}",
                k.rsplit('.')
                    .take(2)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join(".")
            )
        })
        .collect();
    if parts.is_empty() {
        "all".into()
    } else {
        parts.join(" ")
    }
}

/// A round axis end at least 5 % above `v`: 1, 2, 2.5 or 5 times a power of ten (1 for an
/// empty or non-finite axis).
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * e >= v * 1.05 {
            return m * e;
        }
    }
    10.0 * e
}

/// One latency figure against the arrival rate (or, with no varied rate, the achieved rate),
/// one line per combination of the other varied keys.
pub(super) fn latency_chart(
    vs: &[PointVerdict],
    grid: &Grid,
    metric: &str,
    (q, target): (u32, Option<f64>),
) -> String {
    let (series, by_gpus) = latency_series(vs, grid, metric, q);
    let legend = series.len() <= 12;
    let xmax = nice_max(series.values().flatten().map(|p| p.0).fold(0.0, f64::max));
    // Latency past saturation grows by orders of magnitude: a log axis keeps the knee visible.
    let ys = || series.values().flatten().map(|p| p.1).chain(target);
    let ymax = nice_max(ys().fold(0.0, f64::max));
    let ymin = ys().fold(f64::INFINITY, f64::min).max(1e-3) / 2.0;
    let ymin = 10f64.powf(ymin.log10().floor()).min(ymax / 10.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let caption = if by_gpus {
            format!(
                "p{q} {} (ms) of each point vs its GPUs",
                metric.to_uppercase()
            )
        } else {
            format!("p{q} {} (ms) vs arrival rate", metric.to_uppercase())
        };
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, (ymin..ymax).log_scale())
        else {
            return svg_fallback("no data");
        };
        let _ = chart
            .configure_mesh()
            .x_desc(if by_gpus { "GPUs" } else { "requests/s" })
            .y_desc("ms (log)")
            .draw();
        for (k, (name, mut pts)) in series.into_iter().enumerate() {
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = if by_gpus {
                if name.starts_with("meets") {
                    MEETS
                } else {
                    MISSES
                }
            } else {
                COLORS[k % COLORS.len()]
            };
            if by_gpus {
                if let Ok(s) = chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                {
                    s.label(name)
                        .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
                }
                continue;
            }
            if let Ok(s) = chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                && legend
            {
                s.label(name).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            }
            let _ = chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())));
        }
        if let Some(t) = target {
            let red = RGBColor(200, 0, 0);
            if let Ok(s) = chart.draw_series(LineSeries::new(
                vec![(0.0, t), (xmax, t)],
                red.stroke_width(1),
            )) {
                s.label(format!("SLO {t} ms"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red));
            }
        }
        let _ = chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperLeft)
            .draw();
        let _ = root.present();
    }
    svg
}

/// The latency chart's series, name → (x, mean p`q` `metric` ms) points: one per combination of
/// the varied keys other than the rate, x the mean arrival rate — or, with one rate for every
/// point (`true`, a plan), two series (meets / misses `[slo]`) with x the point's GPUs.
fn latency_series(
    vs: &[PointVerdict],
    grid: &Grid,
    metric: &str,
    q: u32,
) -> (BTreeMap<String, Vec<(f64, f64)>>, bool) {
    let ri = rate_axis(grid);
    let pick = |r: &SweepRow| pick(r, metric, q);
    // With one arrival rate for every point (a plan), load is not an axis: the chart shows
    // each point's latency against its GPUs instead, split by whether it meets [slo].
    let rates: std::collections::BTreeSet<u64> = vs
        .iter()
        .filter_map(|v| mean(&v.seeds, |r| r.rate_per_s.or(r.requests_per_s)))
        .map(f64::to_bits)
        .collect();
    let by_gpus = rates.len() < 2;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for v in vs {
        let x = if by_gpus {
            v.gpus.map(f64::from)
        } else {
            mean(&v.seeds, |r| r.rate_per_s.or(r.requests_per_s))
        };
        let y = mean(&v.seeds, pick);
        let name = if by_gpus {
            if v.meets_slo {
                "meets [slo]"
            } else {
                "misses [slo]"
            }
            .to_string()
        } else {
            label(v, ri)
        };
        if let (Some(x), Some(y)) = (x, y) {
            series.entry(name).or_default().push((x, y));
        }
    }
    (series, by_gpus)
}

/// What a chart shows instead of itself when it has nothing to draw.
fn svg_fallback(msg: &str) -> String {
    format!("<p><em>{}</em></p>", esc(msg))
}

/// Output tokens/s per GPU against p99 TTFT: every point, the points that meet `[slo]` in
/// green, the Pareto front (most throughput per GPU for a latency) as a line, the TTFT target
/// as a vertical line.
pub(super) fn pareto_chart(vs: &[PointVerdict], (q, target): (u32, Option<f64>)) -> String {
    let pts: Vec<(f64, f64, bool, String)> = vs
        .iter()
        .filter_map(|v| {
            Some((
                mean(&v.seeds, |r| pick(r, "ttft", q))?,
                mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)?,
                v.meets_slo,
                short_label(&v.values),
            ))
        })
        .collect();
    if pts.is_empty() {
        return svg_fallback("no point finished a request");
    }
    let front_labels = pareto_front(&pts);
    let front: Vec<(f64, f64)> = front_labels.iter().map(|f| f.0).collect();
    // A log latency axis: the points that miss an SLO often sit 100× past it, and a linear
    // axis would squeeze the front (the interesting part) against zero.
    let xs = pts.iter().map(|p| p.0).chain(target).filter(|x| *x > 0.0);
    let xmin = 10f64.powf(xs.clone().fold(f64::INFINITY, f64::min).log10().floor());
    let xmax = 10f64.powf(xs.fold(1.0, f64::max).log10().ceil());
    let xmin = if xmin.is_finite() && xmin < xmax {
        xmin
    } else {
        xmax / 10.0
    };
    let ymax = nice_max(pts.iter().map(|p| p.1).fold(0.0, f64::max));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                format!("output tokens/s per GPU vs p{q} TTFT (Pareto front)"),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((xmin..xmax).log_scale(), 0.0..ymax)
        else {
            return svg_fallback("no data");
        };
        let _ = chart
            .configure_mesh()
            .x_label_formatter(&|x| axis_ms(*x))
            .x_desc(format!(
                "p{q} TTFT, ms (log; mean over seeds, finished requests)"
            ))
            .y_desc("output tokens/s per GPU")
            .draw();
        let (green, grey) = (MEETS, MISSES);
        let _ = chart.draw_series(pts.iter().map(|(x, y, ok, _)| {
            Circle::new((*x, *y), 4, if *ok { green } else { grey }.filled())
        }));
        // The front's points are the ones worth naming.
        for (p, l) in &front_labels {
            let _ = chart.draw_series(std::iter::once(
                EmptyElement::at(*p) + Text::new(l.clone(), (6, -14), ("sans-serif", 11)),
            ));
        }
        if let Ok(s) = chart.draw_series(LineSeries::new(front, COLORS[0].stroke_width(2))) {
            s.label("Pareto front").legend(|(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], COLORS[0].stroke_width(2))
            });
        }
        if let Some(t) = target {
            let red = RGBColor(200, 0, 0);
            if let Ok(s) = chart.draw_series(LineSeries::new(
                vec![(t, 0.0), (t, ymax)],
                red.stroke_width(1),
            )) {
                s.label(format!("SLO p{q} TTFT {t} ms"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red));
            }
        }
        let _ = chart
            .configure_series_labels()
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .position(SeriesLabelPosition::UpperRight)
            .draw();
        let _ = root.present();
    }
    svg
}

/// The Pareto front of (p`q` TTFT ms, output tokens/s per GPU, meets, label) points: by rising
/// latency, each point with more throughput than every faster one, with its label.
fn pareto_front(pts: &[(f64, f64, bool, String)]) -> Vec<((f64, f64), String)> {
    let mut sorted = pts.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut front_labels = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for (x, y, _, l) in &sorted {
        if *y > best {
            front_labels.push(((*x, *y), l.clone()));
            best = *y;
        }
    }
    front_labels
}

/// A log axis' tick in ms: `100`, `2k`, `1.5M`.
fn axis_ms(x: f64) -> String {
    let (v, unit) = if x >= 1e6 {
        (x / 1e6, "M")
    } else if x >= 1e3 {
        (x / 1e3, "k")
    } else {
        (x, "")
    };
    let t = format!("{v:.1}");
    format!("{}{unit}", t.trim_end_matches(".0"))
}

/// The ladder's chart: a log latency axis (ms) against one segment per point.
type LadderChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<LogCoord<f64>, SegmentedCoord<RangedCoordi32>>>;

/// Every point in cost order (cheapest at the top), its worst seed's latency at the target's
/// percentile on a log axis, green when it meets `[slo]`, grey when it misses, hollow when
/// its run stopped early (a figure of the requests up to the stop), a red ring when it is
/// against the trend (`figures::off_trend`). Each row is labelled with its point.
pub(super) fn ladder_chart(
    order: &[&PointVerdict],
    metric: &str,
    slo: &crate::config::Slo,
    outliers: &[usize],
) -> String {
    let (q, target) = target_of(slo, metric);
    let n = order.len();
    if n == 0 {
        return svg_fallback("no point ran");
    }
    let (xmin, xmax) = ladder_range(order, metric, q, target);
    let labels: Vec<String> = order
        .iter()
        .map(|v| {
            format!(
                "{}  ({} GPUs)",
                short_label(&v.values),
                v.billed_gpus
                    .or(v.gpus)
                    .map_or("—".into(), |g| g.to_string())
            )
        })
        .collect();
    let height = 90 + 18 * n as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (940, height)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                format!(
                    "p{q} {} of every point, cheapest at the top (worst seed; ms, log)",
                    metric.to_uppercase()
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(330)
            .build_cartesian_2d((xmin..xmax).log_scale(), (0..n as i32 - 1).into_segmented())
        else {
            return svg_fallback("no data");
        };
        // Row `i` from the top is segment `n - 1 - i`.
        let row_of = |s: &SegmentValue<i32>| match s {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                let k = n as i32 - 1 - *i;
                usize::try_from(k).ok().and_then(|k| labels.get(k).cloned())
            }
            SegmentValue::Last => None,
        };
        let _ = chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n + 1)
            .y_label_formatter(&|s| row_of(s).unwrap_or_default())
            .y_label_style(("sans-serif", 12))
            .x_labels(8)
            .x_label_formatter(&|x| axis_ms(*x))
            .x_desc(format!(
                "p{q} {}, ms ({}; log)",
                metric.to_uppercase(),
                match metric {
                    "itl" => "every gap of every request",
                    "tbt" => "each finished request's worst gap",
                    _ => "finished requests",
                }
            ))
            .draw();
        draw_ladder_points(&mut chart, order, (metric, q), (xmin, xmax), outliers);
        if let Some(t) = target {
            let red = RGBColor(200, 0, 0);
            let _ = chart.draw_series(std::iter::once(PathElement::new(
                vec![
                    (t, SegmentValue::Exact(0)),
                    (t, SegmentValue::Exact(n as i32)),
                ],
                red.stroke_width(1),
            )));
            let _ = chart.draw_series(std::iter::once(Text::new(
                format!("target {} ms", fmt_ms(t)),
                (t * 1.05, SegmentValue::Exact(n as i32)),
                ("sans-serif", 12).into_font().color(&red),
            )));
        }
        let _ = root.present();
    }
    svg
}

/// The ladder's latency axis, ms: from the power of ten below the fastest worst seed to one
/// at least ten times that, above the slowest and with room right of the target for its label.
fn ladder_range(order: &[&PointVerdict], metric: &str, q: u32, target: Option<f64>) -> (f64, f64) {
    let xs: Vec<f64> = order
        .iter()
        .filter_map(|v| worst(v, metric, q))
        .chain(target)
        .filter(|x| *x > 0.0)
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(0.0, f64::max);
    let xmin = if lo.is_finite() {
        10f64.powf(lo.log10().floor())
    } else {
        0.1
    };
    // Room right of the target for its label.
    let xmax = 10f64.powf(
        hi.max(xmin * 10.0)
            .max(target.unwrap_or(0.0) * 2.0)
            .log10()
            .ceil(),
    );
    (xmin, xmax)
}

/// One marker per ladder row: the point's worst seed (filled, or hollow when a run stopped
/// early), ringed red when the point is in `outliers`; a note at the right when no request
/// finished.
fn draw_ladder_points(
    chart: &mut LadderChart,
    order: &[&PointVerdict],
    (metric, q): (&str, u32),
    (xmin, xmax): (f64, f64),
    outliers: &[usize],
) {
    let n = order.len();
    let y = |i: usize| SegmentValue::CenterOf(n as i32 - 1 - i as i32);
    let red = RGBColor(200, 0, 0);
    for (i, v) in order.iter().enumerate() {
        let c = if v.meets_slo { MEETS } else { MISSES };
        let stopped = v.seeds.iter().any(|r| r.stopped_early_at_s.is_some());
        match worst(v, metric, q) {
            Some(x) => {
                let x = x.max(xmin);
                let style = if stopped {
                    c.stroke_width(2)
                } else {
                    c.filled()
                };
                let _ = chart.draw_series(std::iter::once(Circle::new((x, y(i)), 5, style)));
                if outliers.contains(&v.point) {
                    let _ = chart.draw_series(std::iter::once(Circle::new(
                        (x, y(i)),
                        8,
                        red.stroke_width(2),
                    )));
                }
            }
            None => {
                // No request finished: the figure is off the chart to the right.
                let _ = chart.draw_series(std::iter::once(Text::new(
                    "▶ none finished",
                    (xmax / 3.0, y(i)),
                    ("sans-serif", 11).into_font().color(&c),
                )));
            }
        }
    }
}

/// Which prefill × decode instance counts meet `[slo]` (with some value of the other keys):
/// green with the cheapest such point's label and GPUs; grey naming what the cheapest point
/// missed; blank for splits the plan's search never ran. `None` when there are not two
/// splits to compare.
pub(super) fn split_map(vs: &[PointVerdict]) -> Option<String> {
    let (cells, ps, ds) = split_cells(vs)?;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                "meets [slo]? by prefill × decode instances (cheapest point of each split)",
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            // A segmented i32 range has one segment per value of `0..=n-1`.
            .build_cartesian_2d(
                (0..ps.len() as i32 - 1).into_segmented(),
                (0..ds.len() as i32 - 1).into_segmented(),
            )
        else {
            return None;
        };
        let name = |v: &[u32], s: &SegmentValue<i32>| match s {
            SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => {
                v.get(*i as usize).map_or(String::new(), |x| x.to_string())
            }
            SegmentValue::Last => String::new(),
        };
        let _ = chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("prefill instances")
            .y_desc("decode instances")
            .x_labels(ps.len() + 1)
            .y_labels(ds.len() + 1)
            .x_label_formatter(&|s| name(&ps, s))
            .y_label_formatter(&|s| name(&ds, s))
            .draw();
        for (i, p) in ps.iter().enumerate() {
            for (j, d) in ds.iter().enumerate() {
                let Some(points) = cells.get(&(*p, *d)) else {
                    continue;
                };
                let (fill, lines) = split_cell(points);
                let (x, y) = (i as i32, j as i32);
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                    ],
                    fill.filled(),
                )));
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                    ],
                    WHITE.stroke_width(2),
                )));
                for (k, line) in lines.into_iter().enumerate() {
                    let _ = chart.draw_series(std::iter::once(
                        EmptyElement::at((SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)))
                            + Text::new(line, (-50, -20 + 14 * k as i32), ("sans-serif", 11)),
                    ));
                }
            }
        }
        let _ = root.present();
    }
    Some(svg)
}

/// The points of each (prefill, decode) instance split.
type SplitCells<'a> = BTreeMap<(u32, u32), Vec<&'a PointVerdict>>;

/// The points of each (prefill, decode) instance split (pools with no instances left out),
/// and the prefill and decode counts present, ascending; `None` with fewer than two of
/// either.
fn split_cells(vs: &[PointVerdict]) -> Option<(SplitCells<'_>, Vec<u32>, Vec<u32>)> {
    let mut cells: SplitCells = BTreeMap::new();
    for v in vs {
        let r = &v.seeds[0];
        let (Some(p), Some(d)) = (r.prefill_instances, r.decode_instances) else {
            continue;
        };
        if p == 0 || d == 0 {
            continue;
        }
        cells.entry((p, d)).or_default().push(v);
    }
    let ps: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.0).collect();
    let ds: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.1).collect();
    // One row or one column of splits compares nothing (and has no cell to fill).
    if ps.len() < 2 || ds.len() < 2 {
        return None;
    }
    Some((cells, ps.into_iter().collect(), ds.into_iter().collect()))
}

/// One split's cell: green with the cheapest point meeting `[slo]` (its GPUs and label), else
/// grey with what the cheapest point missed and the pools that bind.
fn split_cell(points: &[&PointVerdict]) -> (RGBColor, Vec<String>) {
    let billed = |v: &PointVerdict| v.billed_gpus.or(v.gpus).unwrap_or(u32::MAX);
    let green = RGBColor(190, 228, 190);
    let grey = RGBColor(225, 225, 225);
    let meeting = points
        .iter()
        .filter(|v| v.meets_slo)
        .min_by_key(|v| (billed(v), v.point));
    let cheapest = points
        .iter()
        .min_by_key(|v| (billed(v), v.point))
        .expect("a cell has a point");
    match meeting {
        Some(v) => (
            green,
            vec![
                "meets".to_string(),
                format!("{} GPUs", billed(v)),
                short_label(&v.values),
            ],
        ),
        None => (
            grey,
            vec![
                "misses".to_string(),
                cheapest.seeds[0]
                    .slo_missed
                    .clone()
                    .unwrap_or_else(|| "[slo]".into()),
                binding(&cheapest.seeds[0]).unwrap_or_default(),
            ],
        ),
    }
}
