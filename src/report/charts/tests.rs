//! Tests of the charts: texts promised by each chart, byte stability, edge cases.

use super::fixture::{empty, synthetic, temp_dir};
use crate::vocab::Outcome;

use super::cdf::*;
use super::style::*;
use super::timeline::*;
use super::*;
use crate::report::markers::MarkerKind;

/// Undoes the five XML entities plotters writes.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The contents of every `<text …>…</text>` element, in document order.
fn texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find("<text") {
        rest = &rest[i..];
        let open_end = rest.find('>').expect("unterminated <text> tag");
        let close = rest.find("</text>").expect("no </text>");
        out.push(unescape(rest[open_end + 1..close].trim()));
        rest = &rest[close + "</text>".len()..];
    }
    out
}

/// A tiny XML checker: tags balance and nest, attribute quotes close, entities are known,
/// the root is `<svg>`, and no coordinate is NaN or infinite.
fn assert_well_formed(svg: &str) {
    assert!(
        !svg.contains("NaN") && !svg.contains("inf"),
        "non-finite number"
    );
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        check_entities(&rest[..i]);
        rest = &rest[i..];
        if rest.starts_with("<?") {
            rest = &rest[rest.find("?>").expect("unterminated <?") + 2..];
            continue;
        }
        if rest.starts_with("<!--") {
            rest = &rest[rest.find("-->").expect("unterminated comment") + 3..];
            continue;
        }
        // Find the tag's end outside quotes.
        let mut quote = None;
        let mut end = None;
        for (k, c) in rest.char_indices().skip(1) {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '>') => {
                    end = Some(k);
                    break;
                }
                (None, '<') => panic!("'<' inside a tag: {}", &rest[..k]),
                _ => {}
            }
        }
        let end = end.expect("unterminated tag");
        let tag = &rest[1..end];
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().expect("close without open");
            assert_eq!(open, name.trim(), "mis-nested tags");
        } else {
            let name = tag
                .split(|c: char| c.is_whitespace() || c == '/')
                .next()
                .unwrap();
            assert!(!name.is_empty(), "empty tag name");
            if stack.is_empty() {
                roots += 1;
                assert_eq!(name, "svg", "root element");
            }
            check_entities(tag);
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    assert_eq!(roots, 1, "one root element");
}

fn check_entities(s: &str) {
    for (i, _) in s.match_indices('&') {
        let tail = &s[i..];
        assert!(
            ["&lt;", "&gt;", "&amp;", "&quot;", "&apos;", "&#39;"]
                .iter()
                .any(|e| tail.starts_with(e)),
            "bare '&' in {s:?}"
        );
    }
}

fn svg(chart: Chart, f: &fixture::Fixture) -> String {
    render_svg(chart, &f.input("unit-run")).expect("render")
}

fn assert_texts(chart: Chart, svg: &str, expected: &[&str]) {
    let t = texts(svg);
    for e in expected {
        assert!(
            t.iter().any(|x| x == e),
            "{}: no text {e:?} in {t:?}",
            chart.name()
        );
    }
}

/// The texts each chart promises on the synthetic input: axis labels and legend entries.
fn promised(chart: Chart) -> Vec<&'static str> {
    let time = "simulated time (s)";
    let instances = ["prefill #0", "decode #1", "decode #2"];
    let mut v = match chart {
        Chart::TtftCdf => vec![
            "TTFT (ms, log scale)",
            "fraction of requests ≤ x",
            "TTFT, n = 200",
        ],
        Chart::TpotCdf => vec!["TPOT (ms)", "fraction of requests ≤ x", "TPOT, n = 200"],
        Chart::Throughput => vec![
            time,
            "tokens/s",
            "requests in/s",
            "finished/s",
            "output tokens/s (decode)",
            "arrivals/s",
            "prefills done/s",
        ],
        Chart::QueueDepth => vec![time, "queued requests", "running batch (requests)"],
        Chart::KvUsage => vec![time, "KV pages used / total"],
        Chart::Utilisation => {
            vec![time, "compute busy (0–1)", "link utilisation (0–1)"]
        }
        Chart::Outcomes => vec![
            "requests",
            "completed",
            "failed: envelope_tp_mismatch",
            "corrupted (silent)",
            "unfinished",
            "50 (83.3%)",
        ],
        Chart::Timeline => vec![
            time,
            "request id",
            "queue",
            "prefill",
            "KV transfer",
            "waiting",
            "decode",
            "failed (end)",
            "corrupted (end)",
            "#0",
            "#4",
        ],
        Chart::Fragmentation => vec![
            "simulated time (s)",
            "RDMA writes per request",
            "transfer time (ms)",
            "writes p50",
            "writes p99",
            "transfer p50",
            "transfer p99",
        ],
        Chart::Sessions => vec![
            "turn index (0 = a session's first request)",
            "mean prompt tokens per request",
        ],
        Chart::Pools => vec![
            time,
            "instances",
            "requests in/s",
            "TTFT met",
            "prefill serving",
            "decode serving",
            "starting",
            "arrivals/s",
        ],
    };
    if matches!(
        chart,
        Chart::QueueDepth | Chart::KvUsage | Chart::Utilisation
    ) {
        v.extend(instances);
    }
    v
}

#[test]
fn every_chart_has_its_title_axis_labels_and_legend() {
    let f = synthetic();
    for chart in Chart::ALL {
        let s = svg(chart, &f);
        assert_well_formed(&s);
        let title = format!("{} — unit-run", chart.title());
        let mut expected = vec![title.as_str()];
        expected.extend(promised(chart));
        assert_texts(chart, &s, &expected);
        assert!(
            !texts(&s).iter().any(|t| t.starts_with("no data")),
            "{}: data present but 'no data' drawn",
            chart.name()
        );
    }
}

#[test]
fn cdf_legends_give_the_percentiles() {
    let f = synthetic();
    let t = texts(&svg(Chart::TtftCdf, &f));
    for p in ["p50", "p90", "p99"] {
        let want = format!(
            "{p} = {} ms",
            fmt_num(f.ttft.quantile(p[1..].parse::<f64>().unwrap() / 100.0) / 1e6)
        );
        assert!(t.contains(&want), "no {want:?} in {t:?}");
    }
}

#[test]
fn lines_are_drawn_one_per_instance() {
    let f = synthetic();
    let s = svg(Chart::QueueDepth, &f);
    let stroke = |c: RGBColor| format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
    // Each of the 3 instances: its line in both panels and its legend swatch; no fourth
    // colour.
    for c in &PALETTE[..3] {
        assert_eq!(s.matches(&stroke(*c)).count(), 3, "{}", stroke(*c));
    }
    assert_eq!(s.matches(&stroke(PALETTE[3])).count(), 0);
}

#[test]
fn many_instances_are_drawn_as_pool_mean_and_max() {
    let mut f = synthetic();
    f.timeseries = (0..12u32)
        .flat_map(|i| {
            (1..=5u64).map(move |second| TimeseriesRow {
                second,
                instance: i,
                pool: if i < 4 { "prefill" } else { "decode" }.into(),
                role: if i < 4 { "prefill" } else { "decode" },
                arrivals: 1,
                running: i,
                queued: i,
                kv_pages_used: 1,
                kv_pages_total: 2,
                tokens_out: 1,
                link_utilisation: 0.5,
                busy_fraction: 0.25,
                fleet: None,
            })
        })
        .collect();
    let s = svg(Chart::QueueDepth, &f);
    assert_texts(
        Chart::QueueDepth,
        &s,
        &[
            "prefill: mean of 4",
            "prefill: max",
            "decode: mean of 8",
            "decode: max",
        ],
    );
    assert!(!texts(&s).iter().any(|t| t == "decode #11"));
}

#[test]
fn corrupted_and_failed_get_their_own_colours() {
    let f = synthetic();
    let hex = |c: RGBColor| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
    let outcomes = svg(Chart::Outcomes, &f);
    assert!(outcomes.contains(&hex(CORRUPTED)), "no corrupted bar");
    assert!(!outcomes.contains(&hex(PALETTE[6])));
    let timeline = svg(Chart::Timeline, &f);
    assert!(timeline.contains(&hex(FAILED_MARK)), "no failed end marker");
    assert!(
        timeline.contains(&hex(CORRUPTED)),
        "no corrupted end marker"
    );
    // Without failed or corrupted requests in the sample, no marker but the legend's.
    let mut calm = synthetic();
    for r in &mut calm.sample {
        r.outcome = Outcome::Completed;
    }
    let calm = svg(Chart::Timeline, &calm);
    assert_eq!(calm.matches(&hex(FAILED_MARK)).count(), 1);
}

#[test]
fn rendering_is_byte_stable() {
    let f = synthetic();
    for chart in Chart::ALL {
        assert_eq!(svg(chart, &f), svg(chart, &f), "{}", chart.name());
    }
    let (a, b) = (temp_dir("charts-det-a"), temp_dir("charts-det-b"));
    let pa = render_charts(&f.input("unit-run"), &a, ImageFormat::Svg).unwrap();
    let pb = render_charts(&f.input("unit-run"), &b, ImageFormat::Svg).unwrap();
    assert_eq!(pa, pb);
    for p in &pa {
        assert_eq!(
            fs::read(a.join(p)).unwrap(),
            fs::read(b.join(p)).unwrap(),
            "{p:?}"
        );
    }
    let _ = (fs::remove_dir_all(a), fs::remove_dir_all(b));
}

#[test]
fn render_charts_writes_every_chart_in_order() {
    let f = synthetic();
    let dir = temp_dir("charts-files");
    let paths = render_charts(&f.input("unit-run"), &dir, ImageFormat::Svg).unwrap();
    let want: Vec<PathBuf> = Chart::ALL
        .iter()
        .map(|c| PathBuf::from(format!("charts/{}.svg", c.name())))
        .collect();
    assert_eq!(paths, want);
    for p in &paths {
        let s = fs::read_to_string(dir.join(p)).unwrap();
        assert!(s.starts_with("<svg") && s.contains("width=\"900\" height=\"500\""));
    }
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn empty_inputs_render_valid_svgs_that_say_so() {
    let f = empty();
    for chart in Chart::ALL {
        let s = svg(chart, &f);
        assert_well_formed(&s);
        let t = texts(&s);
        assert!(
            t.iter().any(|x| x.starts_with("no data")),
            "{}: no 'no data' note in {t:?}",
            chart.name()
        );
        assert!(t.contains(&format!("{} — unit-run", chart.title())));
    }
}

#[test]
fn a_single_value_histogram_renders() {
    let mut f = empty();
    f.ttft.record(0);
    f.tpot.record_n(30_000_000, 7);
    for chart in [Chart::TtftCdf, Chart::TpotCdf] {
        let s = svg(chart, &f);
        assert_well_formed(&s);
        assert!(!texts(&s).iter().any(|t| t.starts_with("no data")));
    }
}

#[test]
fn cdf_points_rise_from_0_to_1() {
    let f = synthetic();
    let pts = cdf_points(&f.ttft);
    assert_eq!(pts.first().unwrap().1, 0.0);
    assert_eq!(pts.last().unwrap().1, 1.0);
    assert!(pts.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    assert!(matches!(cdf_axis(&pts, &[]), CdfAxis::Log(_)));
    assert!(matches!(
        cdf_axis(&cdf_points(&f.tpot), &[]),
        CdfAxis::Linear(_)
    ));
    assert!(cdf_points(&Histogram::new()).is_empty());
}

#[test]
fn a_failed_requests_open_phase_runs_to_its_failure() {
    let f = synthetic();
    let failed = &f.sample[3];
    let p = phases(failed);
    let end = failed.finish_ns.unwrap() as f64 / 1e9;
    let transfer = p.iter().find(|x| x.0 == Phase::Transfer).unwrap();
    assert_eq!(transfer.2, end);
    assert!(!p.iter().any(|x| x.0 == Phase::Decode || x.0 == Phase::Wait));
    let done = phases(&f.sample[0]);
    assert_eq!(done.len(), 5);
}

#[test]
fn long_series_are_averaged_down() {
    let pts: Vec<(f64, f64)> = (0..3600).map(|i| (i as f64, 2.0)).collect();
    let d = downsample(pts);
    assert!(d.len() <= MAX_POINTS && d.len() >= MAX_POINTS / 2);
    assert!(d.iter().all(|p| p.1 == 2.0));
}

#[test]
fn number_formats() {
    assert_eq!(fmt_num(0.0), "0");
    assert_eq!(fmt_num(0.0123), "0.0123");
    assert_eq!(fmt_num(1.5), "1.5");
    assert_eq!(fmt_num(250.0), "250");
    assert_eq!(fmt_num(12_345.0), "12345");
    assert_eq!(fmt_count(3.0), "3");
    assert_eq!(fmt_count(2.5), "");
    assert_eq!(nice_ceil(3.6), 4.0);
    assert_eq!(nice_ceil(1000.0), 1000.0);
    assert_eq!(nice_ceil(0.0), 1.0);
}

#[cfg(not(feature = "png"))]
#[test]
fn png_without_the_feature_is_a_clear_error() {
    let f = synthetic();
    let dir = temp_dir("charts-nopng");
    let e = render_charts(&f.input("x"), &dir, ImageFormat::Png).unwrap_err();
    assert_eq!(e.source.kind(), io::ErrorKind::Unsupported);
    assert!(e.to_string().contains("--features png"));
    let _ = fs::remove_dir_all(dir);
}

#[cfg(feature = "png")]
#[test]
fn png_charts_are_pngs() {
    let f = synthetic();
    let dir = temp_dir("charts-png");
    let paths = render_charts(&f.input("unit-run"), &dir, ImageFormat::Png).unwrap();
    assert_eq!(paths.len(), Chart::ALL.len());
    for p in &paths {
        let bytes = fs::read(dir.join(p)).unwrap();
        assert!(bytes.len() > 4096, "{p:?} is {} bytes", bytes.len());
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{p:?}");
    }
    // SVG still works with the bundled font registered.
    assert_well_formed(&svg(Chart::Timeline, &f));
    let _ = fs::remove_dir_all(dir);
}

/// The charts with a time axis, which mark the run's events.
const TIME_CHARTS: [Chart; 6] = [
    Chart::Throughput,
    Chart::QueueDepth,
    Chart::KvUsage,
    Chart::Utilisation,
    Chart::Timeline,
    Chart::Fragmentation,
];

fn stroke(c: RGBColor) -> String {
    format!("stroke=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2)
}

#[test]
fn every_time_chart_marks_faults_recoveries_and_worker_deaths() {
    let f = synthetic();
    let labels = [
        "crash decode #2",
        "restart decode #2",
        "worker died: prefill #0 rank 0 queue 1 (envelope_tp_mismatch)",
    ];
    for chart in Chart::ALL {
        let s = svg(chart, &f);
        assert_well_formed(&s);
        let t = texts(&s);
        if TIME_CHARTS.contains(&chart) {
            assert_texts(chart, &s, &labels);
            assert_texts(chart, &s, &["fault", "recovery", "worker died"]);
            // Each label once (on the top panel), each line in every panel.
            for l in labels {
                assert_eq!(t.iter().filter(|x| *x == l).count(), 1, "{l}");
            }
            assert!(s.contains(&stroke(super::markers::WORKER_DEATH)));
            assert!(s.contains(&stroke(super::markers::RECOVERY)));
        } else {
            assert!(!t.iter().any(|x| labels.contains(&x.as_str())), "{t:?}");
            assert!(!s.contains(&stroke(super::markers::WORKER_DEATH)));
        }
    }
    // No markers, no marker legend.
    let mut calm = synthetic();
    calm.markers.clear();
    for chart in TIME_CHARTS {
        let t = texts(&svg(chart, &calm));
        assert!(
            !t.iter().any(|x| x == "fault" || x == "worker died"),
            "{t:?}"
        );
    }
}

#[test]
fn markers_at_one_time_share_a_line_and_crowded_labels_defer_to_the_events_table() {
    let mut f = synthetic();
    // Twelve faults a few ms apart: far more labels than fit at one spot.
    f.markers = (0..12)
        .map(|i| {
            fixture::marker(
                2_000 + i,
                MarkerKind::Fault,
                &format!("link down node{i}.nic0.rx"),
            )
        })
        .collect();
    let t = texts(&svg(Chart::Throughput, &f));
    let shown = t.iter().filter(|x| x.starts_with("link down")).count();
    assert!((1..12).contains(&shown), "{shown} labels shown");
    assert!(
        t.contains(&format!("{} labels: see Events", 12 - shown)),
        "{t:?}"
    );
    assert!(t.contains(&"fault ×12".to_string()), "{t:?}");
    // At one time, one line and one label for all.
    for m in &mut f.markers {
        m.at_ns = 2_000_000_000;
    }
    let t = texts(&svg(Chart::Throughput, &f));
    assert_texts(
        Chart::Throughput,
        &svg(Chart::Throughput, &f),
        &["link down node0.nic0.rx (+11 more)"],
    );
    assert!(!t.iter().any(|x| x.contains("see Events")), "{t:?}");
}

#[test]
fn throughput_shows_failed_and_corrupted_beside_completed() {
    let f = synthetic();
    let s = svg(Chart::Throughput, &f);
    assert_texts(
        Chart::Throughput,
        &s,
        &[
            "completed/s (3 in all)",
            "failed/s (1 in all)",
            "corrupted/s (1 in all)",
        ],
    );
    // A line and a legend swatch each.
    assert!(s.matches(&stroke(FAILED[0])).count() >= 2);
    assert!(s.matches(&stroke(CORRUPTED)).count() >= 2);
    // A run where nothing fails: no failure line, and the legend says so.
    let mut calm = synthetic();
    calm.finish_rates = Default::default();
    for r in &mut calm.sample {
        r.outcome = Outcome::Completed;
        calm.finish_rates.record(r);
    }
    let s = svg(Chart::Throughput, &calm);
    assert_texts(
        Chart::Throughput,
        &s,
        &[
            "completed/s (5 in all)",
            "failed/s: none",
            "corrupted/s: none",
        ],
    );
    assert_eq!(s.matches(&stroke(FAILED[0])).count(), 0);
    assert_eq!(s.matches(&stroke(CORRUPTED)).count(), 0);
}

#[test]
fn cdfs_draw_their_slo_targets_with_a_verdict() {
    let mut f = synthetic();
    let ttft = texts(&svg(Chart::TtftCdf, &f));
    // Threshold and p99 target at 2 s share one line; about half the TTFTs are within it.
    assert!(ttft.contains(&"SLO, p99 ≤ 2000 ms".to_string()), "{ttft:?}");
    let on_chart = ttft
        .iter()
        .find(|t| t.starts_with("SLO, p99 ≤ 2000 ms ("))
        .unwrap_or_else(|| panic!("{ttft:?}"));
    assert!(on_chart.ends_with("% within, p99 missed)"), "{on_chart}");
    let tpot = texts(&svg(Chart::TpotCdf, &f));
    assert!(tpot.contains(&"SLO ≤ 30 ms".to_string()), "{tpot:?}");
    assert!(!tpot.iter().any(|t| t.contains("2000")), "TTFT SLO on TPOT");
    // Far beyond the data, the axis is not stretched: the edge names the target.
    f.slo[2].ms = 500.0;
    let s = svg(Chart::TpotCdf, &f);
    assert_texts(
        Chart::TpotCdf,
        &s,
        &["SLO ≤ 500 ms, off axis", "SLO ≤ 500 ms (100 % within) →"],
    );
    assert!(
        !texts(&s).contains(&"500".to_string()),
        "axis stretched to 500"
    );
    // Just past the data, it is.
    f.slo[2].ms = 45.0;
    assert_texts(Chart::TpotCdf, &svg(Chart::TpotCdf, &f), &["SLO ≤ 45 ms"]);
    // No SLO, no SLO text.
    f.slo.clear();
    assert!(
        !texts(&svg(Chart::TtftCdf, &f))
            .iter()
            .any(|t| t.starts_with("SLO"))
    );
}

#[test]
fn slo_targets_at_one_threshold_share_a_line() {
    let t = |ms, quantile| SloTarget {
        metric: SloMetric::Ttft,
        ms,
        quantile,
    };
    let lines = slo_lines(
        &[
            t(200.0, Some(0.99)),
            t(100.0, None),
            t(200.0, Some(0.9)),
            SloTarget {
                metric: SloMetric::Tpot,
                ms: 5.0,
                quantile: None,
            },
        ],
        SloMetric::Ttft,
    );
    let labels: Vec<String> = lines.iter().map(|l| l.label()).collect();
    assert_eq!(labels, ["SLO ≤ 100 ms", "SLO p90, p99 ≤ 200 ms"]);
    // A CDF through (100, 0.5) and (200, 0.95).
    let pts = [(0.0, 0.0), (100.0, 0.5), (200.0, 0.95), (300.0, 1.0)];
    assert_eq!(lines[0].verdict(&pts), "(50 % within)");
    assert_eq!(lines[1].verdict(&pts), "(p90 met, p99 missed)");
}

#[test]
fn zero_stretches_of_sparse_lines_are_left_out() {
    use super::series::nonzero_runs;
    let pts: Vec<(f64, f64)> = [0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 1.0]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as f64, *v))
        .collect();
    let runs = nonzero_runs(&pts);
    let xs: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| r.iter().map(|p| p.0).collect())
        .collect();
    assert_eq!(xs, [vec![2.0, 3.0, 4.0], vec![6.0, 7.0, 8.0]]);
    assert!(nonzero_runs(&[(0.0, 0.0), (1.0, 0.0)]).is_empty());
}

/// Three turn rows: turn 0 recomputes all of 600 tokens, turn 1 finds half of 1,200 cached,
/// the last row (turns 2 and later) three quarters of 2,000.
fn with_sessions() -> fixture::Fixture {
    use crate::metrics::sessions::{SessionSummary, TurnRow};
    let turn = |turn, and_later, mean: f64, share: f64| TurnRow {
        turn,
        and_later,
        requests: 10,
        completed: 10,
        mean_context_tokens: Some(mean),
        cached_tokens: (10.0 * mean * share) as u64,
        hit_share: Some(share),
    };
    let mut f = synthetic();
    f.summary.sessions = Some(SessionSummary {
        started: 10,
        completed: 10,
        context_full: 0,
        failed: 0,
        cut: 0,
        turns: 30,
        truncated_turns: 0,
        rows_dropped: 0,
        mean_turns_per_session: Some(3.0),
        mean_context_tokens: Some(1266.7),
        prefill_tokens_saved: 21_000,
        hit_share: Some(0.5526),
        by_turn: vec![
            turn(0, false, 600.0, 0.0),
            turn(1, false, 1200.0, 0.5),
            turn(2, true, 2000.0, 0.75),
        ],
    });
    f
}

/// `(y, height)` of every `<rect>` filled with `c`, in document order.
fn filled_rects(svg: &str, c: RGBColor) -> Vec<(f64, f64)> {
    let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
    let attr = |tag: &str, name: &str| -> f64 {
        let key = format!(" {name}=\"");
        let i = tag.find(&key).expect("attribute") + key.len();
        tag[i..i + tag[i..].find('"').unwrap()].parse().unwrap()
    };
    svg.split("<rect")
        .skip(1)
        .map(|r| &r[..r.find("/>").unwrap()])
        .filter(|r| r.contains(&fill))
        .map(|r| (attr(r, "y"), attr(r, "height")))
        .collect()
}

#[test]
fn only_a_run_with_sessions_gets_the_sessions_chart_after_the_others() {
    let f = with_sessions();
    let dir = temp_dir("charts-sessions");
    let paths = render_charts(&f.input("unit-run"), &dir, ImageFormat::Svg).unwrap();
    assert_eq!(paths.len(), Chart::ALL.len() + 1);
    assert_eq!(paths.last().unwrap(), &PathBuf::from("charts/sessions.svg"));
    assert_eq!(Chart::from_name("sessions"), Some(Chart::Sessions));
    assert_eq!(
        Chart::for_summary(&synthetic().summary),
        Chart::ALL.to_vec(),
        "a run without sessions keeps its nine files"
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn the_sessions_chart_splits_each_turn_by_its_hit_share() {
    let f = with_sessions();
    let s = svg(Chart::Sessions, &f);
    assert_well_formed(&s);
    assert_texts(
        Chart::Sessions,
        &s,
        &[
            "turn index (0 = a session's first request)",
            "mean prompt tokens per request",
            "0",
            "1",
            "2+",
            "0%",
            "50%",
            "75%",
            "cached (not recomputed)",
            "recomputed by prefill",
            "10 sessions, 30 turns",
            "all turns: 55.3% hit",
        ],
    );
    // One bar per turn (turn 0's cached part has no height), then the legend's swatch.
    let cached = filled_rects(&s, super::sessions::CACHED);
    let computed = filled_rects(&s, super::sessions::COMPUTED);
    assert_eq!(
        (cached.len(), computed.len()),
        (4, 4),
        "{cached:?} {computed:?}"
    );
    let px_per_token = computed[0].1 / 600.0;
    for (i, (mean, share)) in [(600.0, 0.0), (1200.0, 0.5), (2000.0, 0.75)]
        .iter()
        .enumerate()
    {
        let (c, r) = (cached[i], computed[i]);
        assert!(
            (c.1 - mean * share * px_per_token).abs() <= 1.0,
            "turn {i} cached {c:?}"
        );
        assert!(
            (r.1 - mean * (1.0 - share) * px_per_token).abs() <= 1.0,
            "turn {i} recomputed {r:?}"
        );
        // The recomputed part sits on the cached part.
        assert!(
            (r.0 + r.1 - c.0).abs() <= 1.0,
            "turn {i}: {r:?} not on {c:?}"
        );
    }
    let none = svg(Chart::Sessions, &synthetic());
    assert!(texts(&none).contains(&"no data: no session turn arrived".to_string()));
}

/// The synthetic run with pools that changed size: rows carry the fleet columns (one prefill
/// serving for 3 s, two from second 4, one decode starting in seconds 2–3), the summary an
/// `autoscaling` section, and the finish rates count against a 500-ms TTFT target.
fn with_fleet() -> fixture::Fixture {
    use crate::metrics::FleetColumns;
    let mut f = synthetic();
    for r in &mut f.timeseries {
        let prefills = if r.second >= 4 { 2 } else { 1 };
        let starting = r.instance == 2 && (2..=3).contains(&r.second);
        r.fleet = Some(FleetColumns {
            state: if starting { "starting" } else { "serving" },
            prefill_instances: prefills,
            decode_instances: 1,
        });
    }
    f.summary.autoscaling = Some(crate::metrics::summary::AutoscalingSummary {
        policy: "threshold".into(),
        gpu_hours: 1.0,
        cost_usd: None,
        cold_starts: 1,
        role_switches: 0,
        drains: 0,
        starts_cancelled: 0,
        starts_failed: 0,
        decisions: 1,
        events: Vec::new(),
    });
    let mut rates = crate::report::rates::FinishRates::with_ttft_target(Some(500_000_000));
    for (i, ttft_ms) in [100u64, 900, 200, 300].into_iter().enumerate() {
        let mut row = RequestRow::arrived(i as u64, 0, None, 10, 10);
        row.outcome = Outcome::Completed;
        row.first_token_ns = Some(ttft_ms * 1_000_000);
        row.finish_ns = Some(2_000_000_000);
        rates.record(&row);
    }
    f.finish_rates = rates;
    f
}

#[test]
fn only_a_run_whose_pools_changed_size_gets_the_pools_chart() {
    let f = with_fleet();
    assert_eq!(
        Chart::for_summary(&f.summary).last(),
        Some(&Chart::Pools),
        "drawn after the others"
    );
    assert!(!Chart::for_summary(&synthetic().summary).contains(&Chart::Pools));
    assert_eq!(Chart::from_name("pools"), Some(Chart::Pools));
    let s = svg(Chart::Pools, &f);
    assert_well_formed(&s);
    assert_texts(Chart::Pools, &s, &promised(Chart::Pools));
    // Without fleet columns the instance lines have nothing to draw: no panic, a note.
    let none = svg(Chart::Pools, &synthetic());
    assert_well_formed(&none);
}
