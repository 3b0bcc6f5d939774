//! The sweep report, `index.html`: the plan's answer on top, then latency against load, a
//! throughput-per-GPU vs p99-TTFT Pareto chart with the SLO marked, and a prefill × decode
//! heatmap of goodput. Drawn from the rows alone (so a merged sweep draws the same bytes), as
//! inline plotters SVG: the page opens from disk with no script and no external URL.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plotters::prelude::*;

use super::search::{PointVerdict, cheapest, verdicts};
use super::{Grid, Manifest, SweepRow};

const W: u32 = 720;
const H: u32 = 420;
/// The run report's palette (Tableau 10), so both reports read alike.
const COLORS: [RGBColor; 10] = crate::report::charts::PALETTE;
/// Points that meet `[slo]` (Tableau green) and those that miss it (Tableau grey).
const MEETS: RGBColor = COLORS[4];
const MISSES: RGBColor = COLORS[9];

/// The mean of a figure over a point's seeds (`None` when no seed has it).
fn mean(rows: &[SweepRow], f: impl Fn(&SweepRow) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = rows.iter().filter_map(f).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The rate axis: the varied key that sets the arrival rate, if any.
fn rate_axis(grid: &Grid) -> Option<usize> {
    grid.axes.iter().position(|a| a.key.ends_with("rate_per_s"))
}

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
fn latency_chart(vs: &[PointVerdict], grid: &Grid, metric: &str, target: Option<f64>) -> String {
    let ri = rate_axis(grid);
    let pick = |r: &SweepRow| match metric {
        "ttft" => r.ttft_p99_ms,
        _ => r.tpot_p99_ms,
    };
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
                "p99 {} (ms) of each point vs its GPUs",
                metric.to_uppercase()
            )
        } else {
            format!("p99 {} (ms) vs arrival rate", metric.to_uppercase())
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

fn svg_fallback(msg: &str) -> String {
    format!("<p><em>{}</em></p>", esc(msg))
}

/// Output tokens/s per GPU against p99 TTFT: every point, the points that meet `[slo]` in
/// green, the Pareto front (most throughput per GPU for a latency) as a line, the TTFT target
/// as a vertical line.
fn pareto_chart(vs: &[PointVerdict], target: Option<f64>) -> String {
    let pts: Vec<(f64, f64, bool)> = vs
        .iter()
        .filter_map(|v| {
            Some((
                mean(&v.seeds, |r| r.ttft_p99_ms)?,
                mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)?,
                v.meets_slo,
            ))
        })
        .collect();
    if pts.is_empty() {
        return svg_fallback("no point finished a request");
    }
    let mut sorted = pts.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut front = Vec::new();
    let mut best = f64::NEG_INFINITY;
    for &(x, y, _) in &sorted {
        if y > best {
            front.push((x, y));
            best = y;
        }
    }
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
                "output tokens/s per GPU vs p99 TTFT (Pareto front)",
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
            .x_desc("p99 TTFT, ms (log)")
            .y_desc("output tokens/s per GPU")
            .draw();
        let (green, grey) = (MEETS, MISSES);
        let _ = chart.draw_series(
            pts.iter()
                .map(|&(x, y, ok)| Circle::new((x, y), 4, if ok { green } else { grey }.filled())),
        );
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
                s.label(format!("SLO p99 TTFT {t} ms"))
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

/// Goodput (requests/s within the per-request thresholds, arrival window, mean over seeds) for
/// every prefill × decode instance count: the best over the other varied keys.
fn heatmap(vs: &[PointVerdict]) -> Option<String> {
    let mut cells: BTreeMap<(u32, u32), f64> = BTreeMap::new();
    for v in vs {
        let r = &v.seeds[0];
        let (Some(p), Some(d)) = (r.prefill_instances, r.decode_instances) else {
            continue;
        };
        if p == 0 || d == 0 {
            continue;
        }
        if let Some(g) = mean(&v.seeds, |r| r.goodput_requests_per_s) {
            let c = cells.entry((p, d)).or_insert(g);
            *c = c.max(g);
        }
    }
    let ps: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.0).collect();
    let ds: std::collections::BTreeSet<u32> = cells.keys().map(|k| k.1).collect();
    if ps.len() < 2 && ds.len() < 2 {
        return None;
    }
    let (ps, ds): (Vec<u32>, Vec<u32>) = (ps.into_iter().collect(), ds.into_iter().collect());
    let top = cells.values().copied().fold(0.0, f64::max).max(1e-9);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let Ok(mut chart) = ChartBuilder::on(&root)
            .caption(
                "goodput (req/s within SLO thresholds) by prefill × decode instances",
                ("sans-serif", 18),
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
                let Some(&g) = cells.get(&(*p, *d)) else {
                    continue;
                };
                let t = g / top;
                let color = RGBColor(
                    (255.0 - 200.0 * t) as u8,
                    (255.0 - 90.0 * t) as u8,
                    (255.0 - 200.0 * t) as u8,
                );
                let (x, y) = (i as i32, j as i32);
                let _ = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                        (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
                    ],
                    color.filled(),
                )));
                let _ = chart.draw_series(std::iter::once(Text::new(
                    format!("{g:.2}"),
                    (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y)),
                    ("sans-serif", 16),
                )));
            }
        }
        let _ = root.present();
    }
    Some(svg)
}

/// The plan's answer for the sweep's rows: the cheapest point meeting `[slo]` on every seed.
fn answer_html(vs: &[PointVerdict], m: &Manifest) -> String {
    if !m.slo.any() {
        return "<p class=\"answer\">The scenario sets no <code>[slo]</code> target: no plan answer (add <code>ttft_p99_ms</code>, <code>tpot_p99_ms</code>, … to get one).</p>".into();
    }
    let ok = vs.iter().filter(|v| v.meets_slo).count();
    match cheapest(vs) {
        None => format!(
            "<p class=\"answer bad\"><b>No grid point meets [slo] on every seed</b> ({} points, {} seeds).</p>",
            vs.len(),
            m.grid.seeds.len()
        ),
        Some(b) => {
            let vals: Vec<String> = b
                .values
                .iter()
                .map(|(k, v)| format!("<code>{}={}</code>", esc(k), esc(v)))
                .collect();
            // A plan's search runs points cheapest first and stops at this one.
            let searched = match vs.len() < m.grid.points() {
                true => format!(
                    " (a search: the grid has {}, run cheapest first up to this one)",
                    m.grid.points()
                ),
                false => String::new(),
            };
            let cost = mean(&b.seeds, |r| r.usd_per_hour)
                .map_or(String::new(), |c| format!(", ${c:.2}/hour"));
            format!(
                "<p class=\"answer\"><b>Cheapest point meeting [slo] on all {} seeds:</b> {} — {} GPUs on {} nodes{cost}. {ok} of {} points meet it{searched}.</p>",
                m.grid.seeds.len(),
                vals.join(" "),
                b.gpus.unwrap_or(0),
                b.nodes.unwrap_or(0),
                vs.len()
            )
        }
    }
}

/// `index.html` of a whole sweep (its rows `(row index, row)`, in row order: every row of the
/// grid, or those a plan's search ran).
pub fn index_html(m: &Manifest, rows: &[(usize, SweepRow)], title: &str) -> String {
    let vs = verdicts(&m.grid, rows);
    let ttft_t = m.slo.ttft_pct_ms[2]
        .or(m.slo.ttft_pct_ms[1])
        .or(m.slo.ttft_pct_ms[0]);
    let tpot_t = m.slo.tpot_pct_ms[2]
        .or(m.slo.tpot_pct_ms[1])
        .or(m.slo.tpot_pct_ms[0]);
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;max-width:960px;margin:2rem auto;color:#222}}.answer{{font-size:1.1rem;padding:.8rem;background:#eef7ee;border-left:4px solid #2ca02c}}.bad{{background:#fbeeee;border-color:#d62728}}table{{border-collapse:collapse;font-size:.85rem}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}figure{{margin:1rem 0}}</style></head><body>\n<h1>{t}</h1>\n",
        t = esc(title)
    );
    h += &answer_html(&vs, m);
    let _ = write!(
        h,
        "\n<p>{} points × {} seeds from <code>{}</code>; varied: {}. Figures are means over seeds; rates and throughput over the arrival window. <code>sweep.csv</code> has every row.</p>\n",
        vs.len(),
        m.grid.seeds.len(),
        esc(&m.scenario),
        m.grid
            .axes
            .iter()
            .map(|a| format!("<code>{}</code>", esc(&a.key)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (metric, t) in [("ttft", ttft_t), ("tpot", tpot_t)] {
        h += "<figure>";
        h += &latency_chart(&vs, &m.grid, metric, t);
        h += "</figure>\n";
    }
    h += "<figure>";
    h += &pareto_chart(&vs, ttft_t);
    h += "</figure>\n";
    if let Some(svg) = heatmap(&vs) {
        h += "<figure>";
        h += &svg;
        h += "</figure>\n";
    }
    h += "<h2>Points</h2>\n<table><tr>";
    for a in &m.grid.axes {
        let _ = write!(h, "<th>{}</th>", esc(&a.key));
    }
    h += "<th>GPUs</th><th>nodes</th><th>p99 TTFT ms</th><th>p99 TPOT ms</th><th>out tok/s/GPU</th><th>goodput req/s</th><th>meets SLO</th><th>bottlenecks (seed 1)</th></tr>\n";
    let f = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{v:.1}"));
    for v in &vs {
        h += "<tr>";
        for (_, val) in &v.values {
            let _ = write!(h, "<td>{}</td>", esc(val));
        }
        let r = &v.seeds[0];
        let _ = writeln!(
            h,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.gpus.map_or("—".into(), |g| g.to_string()),
            r.nodes.map_or("—".into(), |g| g.to_string()),
            f(mean(&v.seeds, |r| r.ttft_p99_ms)),
            f(mean(&v.seeds, |r| r.tpot_p99_ms)),
            f(mean(&v.seeds, |r| r.output_tokens_per_s_per_gpu)),
            mean(&v.seeds, |r| r.goodput_requests_per_s)
                .map_or("—".into(), |g| format!("{g:.2}")),
            if v.meets_slo { "yes" } else { "no" },
            esc(r
                .bottlenecks
                .as_deref()
                .or(r.error.as_deref())
                .unwrap_or(""))
        );
    }
    h += "</table>\n</body></html>\n";
    h
}
