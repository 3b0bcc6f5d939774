//! Result files (docs/architecture.md §4): `summary.json`, `requests.csv`, `timeseries.csv`, `run.json`,
//! and the human summary. Reports read metrics only; they never touch the simulation.

mod aborts;
pub mod baseline;
pub mod charts;
pub mod context;
pub mod escape;
pub mod html;
pub mod markdown;
pub mod markers;
pub mod rates;
pub mod schema;
pub mod trace;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::metrics::{LinkRow, Sink, TimeseriesRow};

use crate::vocab::{Outcome, RequestRow};

// The summary's types live in `metrics::summary` (the simulation's aggregates); the report
// writes them and renders them for humans.
pub use crate::metrics::summary::{
    CacheStats, ClusterSummary, PoolUsage, SimSummary, SloSummary, SloTarget, Summary, Throughput,
    TransferSummary, WindowThroughput,
};

impl Summary {
    /// The short summary printed on stdout.
    pub fn human(&self, name: &str) -> String {
        let r = &self.requests;
        let l = &self.latency_ms;
        let t = &self.throughput;
        // Aborted requests close the count where the run models aborts (or has any), so the
        // line always adds up to `arrived`.
        let aborted = if self.aborts.is_some() || r.aborted > 0 {
            format!(", {} aborted", r.aborted)
        } else {
            String::new()
        };
        let mut s = format!(
            "{name}: {} arrived — {} completed, {} failed, {} corrupted, {} unfinished{aborted} ({:.1} s simulated, {} events)\n",
            r.arrived,
            r.completed,
            r.failed,
            r.corrupted,
            r.unfinished,
            self.sim.simulated_s,
            self.sim.events
        );
        let f = |v: Option<f64>, d: usize| match v {
            Some(v) => format!("{v:>9.d$}"),
            None => format!("{:>9}", "—"),
        };
        s += &format!(
            "  TTFT ms  p50 {}  p99 {}\n  TPOT ms  p50 {}  p99 {}\n  ITL  ms  p50 {}  p99 {}  (every gap of every request)\n  TBT  ms  p50 {}  p99 {}  (each request's worst gap)\n  E2E  ms  p50 {}  p99 {}\n",
            f(l.ttft.p50, 1),
            f(l.ttft.p99, 1),
            f(l.tpot.p50, 2),
            f(l.tpot.p99, 2),
            f(l.itl.p50, 2),
            f(l.itl.p99, 2),
            f(l.tbt.p50, 2),
            f(l.tbt.p99, 2),
            f(l.e2e.p50, 1),
            f(l.e2e.p99, 1)
        );
        if r.failed + r.unfinished > 0 {
            s += &format!("  latencies {}\n", crate::metrics::slo::latency_basis(r));
        }
        let w = &t.arrival_window;
        s += &format!(
            "  throughput {:.2} req/s, {:.0} input tok/s, {:.0} output tok/s (arrival window: {:.2} req/s, {:.0} output tok/s)\n",
            t.requests_per_s,
            t.input_tokens_per_s,
            t.output_tokens_per_s,
            w.requests_per_s,
            w.output_tokens_per_s,
        );
        s += &format!(
            "  SLO attainment {}: {}\n",
            self.slo
                .attainment
                .map_or("—".to_string(), |a| format!("{:.1} %", 100.0 * a)),
            self.slo.attainment_basis()
        );
        if self.slo.met.is_some() {
            let each: Vec<String> = self.slo.targets.iter().map(|t| t.line()).collect();
            s += &format!("  SLO {}: {}\n", self.slo.verdict_text(), each.join("; "));
        }
        if let Some(h) = self.cluster.usd_per_hour {
            s += &format!(
                "  cost ${h:.2}/hour for {} GPUs{}\n",
                self.cluster.gpus,
                self.cluster
                    .usd_per_1m_output_tokens
                    .map_or(String::new(), |c| format!(", ${c:.2} per 1M output tokens"))
            );
        }
        for p in &self.pools {
            s += &format!(
                "  pool {} ({}): bound by {}\n",
                p.pool, p.role, p.bottleneck
            );
        }
        for e in &self.errors {
            s += &format!("  error {} ×{}: {}\n", e.kind, e.count, e.message);
        }
        s
    }
}

/// An I/O failure on a named file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct IoError {
    /// The file.
    pub path: PathBuf,
    /// What failed.
    #[source]
    pub source: std::io::Error,
}

fn create(path: &Path) -> Result<BufWriter<File>, IoError> {
    File::create(path)
        .map(BufWriter::new)
        .map_err(|source| IoError {
            path: path.to_path_buf(),
            source,
        })
}

/// Streams `requests.csv` and `timeseries.csv` as the run produces rows, and keeps what the
/// charts need: the timeseries (one row per instance-second: bounded by duration, not by
/// requests) and a small sample of requests for the timeline.
pub struct CsvSink {
    requests: CsvFile,
    /// Whether `requests.csv` has the session columns ([`CsvSink::with_sessions`]).
    sessions: bool,
    timeseries: CsvFile,
    links: CsvFile,
    /// Timeseries rows for the charts: every second's, thinned to every `stride`-th second once
    /// a run is long (the charts draw at most a few hundred points per series), so memory stays
    /// bounded however long the run.
    pub timeseries_rows: Vec<TimeseriesRow>,
    stride: u64,
    /// The timeline's candidates: typical (the first completed by id), the slowest by
    /// end-to-end time, and the first failed, corrupted and unfinished ones.
    picks: Picks,
    /// Requests finished per second by outcome, for the throughput chart.
    pub finish_rates: rates::FinishRates,
    /// Per-instance outcomes and the configuration, for `index.html` and `summary.md`.
    pub context: context::RunContext,
    /// `trace.json`, when `--trace-events` asked for it.
    pub trace: Option<trace::TraceWriter>,
}

/// One CSV file being streamed, with its path for error messages.
struct CsvFile {
    path: PathBuf,
    w: csv::Writer<BufWriter<File>>,
}

impl CsvFile {
    /// Creates the file and writes its header now, so a run with no row still gets one
    /// (the csv crate would only write it with the first row). `sample` is any row: only its
    /// field names are used.
    fn create<T: Serialize>(path: PathBuf, sample: &T) -> Result<Self, IoError> {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(create(&path)?);
        let header = header_of(sample).map_err(|e| IoError {
            path: path.clone(),
            source: csv_io(e),
        })?;
        w.write_record(&header).map_err(|e| IoError {
            path: path.clone(),
            source: csv_io(e),
        })?;
        Ok(Self { path, w })
    }

    fn write<T: Serialize>(&mut self, row: &T) -> std::io::Result<()> {
        let path = &self.path;
        self.w.serialize(row).map_err(|e| named_io(path, csv_io(e)))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let path = &self.path;
        self.w.flush().map_err(|e| named_io(path, e))
    }
}

/// The column names the csv crate derives from `sample`'s fields (the header it would write).
fn header_of<T: Serialize>(sample: &T) -> Result<csv::StringRecord, csv::Error> {
    first_csv_record(sample, true)
}

/// The first record the csv crate writes for `v`: its header when `header`, else its cells —
/// exactly the bytes a CSV writer of `T` would produce, read back as fields.
pub(crate) fn first_csv_record<T: Serialize>(
    v: &T,
    header: bool,
) -> Result<csv::StringRecord, csv::Error> {
    let mut w = csv::WriterBuilder::new()
        .has_headers(header)
        .from_writer(Vec::new());
    w.serialize(v)?;
    let bytes = w
        .into_inner()
        .map_err(|e| csv::Error::from(e.into_error()))?;
    let mut r = csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(bytes.as_slice());
    let mut rec = csv::StringRecord::new();
    r.read_record(&mut rec)?;
    Ok(rec)
}

/// An I/O error carrying the file it happened on, for [`IoError::from_io`] to recover.
fn named_io(path: &Path, source: std::io::Error) -> std::io::Error {
    std::io::Error::other(IoError {
        path: path.to_path_buf(),
        source,
    })
}

impl IoError {
    /// `e` as an error on its file when a sink named one, else on `fallback` (the folder).
    pub fn from_io(e: std::io::Error, fallback: &Path) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<IoError>()) {
            let inner = e.into_inner().expect("checked to hold an error just above");
            return *inner
                .downcast::<IoError>()
                .expect("checked to be an IoError just above");
        }
        IoError {
            path: fallback.to_path_buf(),
            source: e,
        }
    }
}

/// Seconds of timeseries the charts keep before thinning (they draw at most 600 points).
const CHART_SECONDS: u64 = 1200;

/// Typical requests of the timeline sample: the first completed ones by id.
const SAMPLE_TYPICAL: usize = 16;
/// The slowest requests (end to end) the timeline shows.
const SAMPLE_SLOWEST: usize = 8;
/// Failed, corrupted and unfinished requests the timeline shows, each.
const SAMPLE_TROUBLE: usize = 6;

/// The timeline sample, bounded whatever the run's length.
#[derive(Default)]
struct Picks {
    typical: Vec<RequestRow>,
    /// Sorted slowest first.
    slowest: Vec<(u64, RequestRow)>,
    failed: Vec<RequestRow>,
    corrupted: Vec<RequestRow>,
    unfinished: Vec<RequestRow>,
}

impl Picks {
    fn offer(&mut self, row: &RequestRow) {
        let keep = |v: &mut Vec<RequestRow>| {
            if v.len() < SAMPLE_TROUBLE {
                v.push(row.clone());
            }
        };
        match row.outcome {
            Outcome::Failed | Outcome::Aborted => keep(&mut self.failed),
            Outcome::Corrupted => keep(&mut self.corrupted),
            Outcome::Unfinished => keep(&mut self.unfinished),
            Outcome::Completed if self.typical.len() < SAMPLE_TYPICAL => {
                self.typical.push(row.clone());
                return;
            }
            Outcome::Completed => {}
        }
        if let (Some(f), true) = (row.finish_ns, row.outcome != Outcome::Unfinished) {
            let e2e = f.saturating_sub(row.arrival_ns);
            // Ties keep the earlier id (rows arrive in id order), so the sample is stable.
            if self.slowest.len() < SAMPLE_SLOWEST || e2e > self.slowest[SAMPLE_SLOWEST - 1].0 {
                let at = self.slowest.partition_point(|(t, _)| *t >= e2e);
                self.slowest.insert(at, (e2e, row.clone()));
                self.slowest.truncate(SAMPLE_SLOWEST);
            }
        }
    }

    /// Every pick once, in id order.
    fn rows(&self) -> Vec<RequestRow> {
        let mut all: Vec<RequestRow> = self
            .typical
            .iter()
            .chain(self.slowest.iter().map(|(_, r)| r))
            .chain(&self.failed)
            .chain(&self.corrupted)
            .chain(&self.unfinished)
            .cloned()
            .collect();
        all.sort_by_key(|r| r.id);
        all.dedup_by_key(|r| r.id);
        all
    }
}

/// A `timeseries.csv` row whose only use is its header (with the fleet's columns or not).
fn header_row(fleet: Option<crate::metrics::FleetColumns>) -> TimeseriesRow {
    TimeseriesRow {
        second: 0,
        instance: 0,
        pool: String::new(),
        role: "",
        arrivals: 0,
        running: 0,
        queued: 0,
        kv_pages_used: 0,
        kv_pages_total: 0,
        tokens_out: 0,
        busy_fraction: 0.0,
        link_utilisation: 0.0,
        fleet,
    }
}

impl CsvSink {
    /// Creates the three files in `dir`, each with its header.
    pub fn create(dir: &Path) -> Result<Self, IoError> {
        let ts = header_row(None);
        let link = LinkRow {
            second: 0,
            link: String::new(),
            capacity_gbps: 0.0,
            utilisation: 0.0,
            bytes: 0,
            retransmitted_bytes: 0,
            up: true,
        };
        Ok(Self {
            requests: CsvFile::create(
                dir.join("requests.csv"),
                &RequestRow::arrived(0, 0, None, 0, 0),
            )?,
            sessions: false,
            timeseries: CsvFile::create(dir.join("timeseries.csv"), &ts)?,
            links: CsvFile::create(dir.join("links.csv"), &link)?,
            timeseries_rows: Vec::new(),
            stride: 1,
            picks: Picks::default(),
            finish_rates: rates::FinishRates::default(),
            context: context::RunContext::default(),
            trace: None,
        })
    }

    /// `requests.csv` gets the session columns (`session_id`, `turn`, `cached_tokens`) after
    /// the others: a run with sessions. Call before any row is written.
    pub fn with_sessions(mut self, dir: &Path) -> Result<Self, IoError> {
        let sample = RequestRow::arrived(0, 0, None, 0, 0);
        self.requests = CsvFile::create(
            dir.join("requests.csv"),
            &(&sample, crate::vocab::SessionCells::of(&sample)),
        )?;
        self.sessions = true;
        Ok(self)
    }

    /// `timeseries.csv` gets the columns of pools that change size (`state`,
    /// `prefill_instances`, `decode_instances`) after the others. Call before any row is
    /// written.
    pub fn with_fleet(mut self, dir: &Path) -> Result<Self, IoError> {
        let sample = header_row(Some(crate::metrics::FleetColumns {
            state: "",
            prefill_instances: 0,
            decode_instances: 0,
        }));
        self.timeseries = CsvFile::create(dir.join("timeseries.csv"), &sample)?;
        Ok(self)
    }

    /// The timeline sample: typical, slowest, failed, corrupted and unfinished requests, in id
    /// order.
    pub fn sample(&self) -> Vec<RequestRow> {
        self.picks.rows()
    }

    /// Flushes the files; an error names the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.requests.flush()?;
        self.links.flush()?;
        self.timeseries.flush()
    }
}

/// The I/O error inside a csv error (so "No space left on device" reads as such), else the
/// csv error itself.
fn csv_io(e: csv::Error) -> std::io::Error {
    if e.is_io_error() {
        if let csv::ErrorKind::Io(io) = e.into_kind() {
            return io;
        }
        unreachable!("is_io_error checked the kind");
    }
    std::io::Error::other(e)
}

impl Sink for CsvSink {
    fn request(&mut self, row: &RequestRow) -> std::io::Result<()> {
        self.picks.offer(row);
        self.finish_rates.record(row);
        self.context.count(row);
        if let Some(t) = &mut self.trace {
            t.request(row).map_err(std::io::Error::other)?;
        }
        if self.sessions {
            return self
                .requests
                .write(&(row, crate::vocab::SessionCells::of(row)));
        }
        self.requests.write(row)
    }
    fn timeseries(&mut self, row: &TimeseriesRow) -> std::io::Result<()> {
        if row.second.is_multiple_of(self.stride) {
            self.timeseries_rows.push(row.clone());
            // Past CHART_SECONDS kept seconds, keep every other one of them.
            if row.second / self.stride > CHART_SECONDS {
                self.stride *= 2;
                let stride = self.stride;
                self.timeseries_rows
                    .retain(|r| r.second.is_multiple_of(stride));
            }
        }
        self.timeseries.write(row)
    }
    fn link(&mut self, row: &LinkRow) -> std::io::Result<()> {
        self.links.write(row)
    }
}

/// Writes `value` as pretty JSON with a trailing newline.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), IoError> {
    let mut w = create(path)?;
    let wrap = |source| IoError {
        path: path.to_path_buf(),
        source,
    };
    serde_json::to_writer_pretty(&mut w, value).map_err(|e| wrap(std::io::Error::other(e)))?;
    w.write_all(b"\n").map_err(wrap)?;
    w.flush().map_err(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(second: u64, instance: u32) -> TimeseriesRow {
        TimeseriesRow {
            second,
            instance,
            pool: "p".into(),
            role: "decode",
            arrivals: 0,
            running: 0,
            queued: 0,
            kv_pages_used: 0,
            kv_pages_total: 1,
            tokens_out: second,
            busy_fraction: 0.0,
            link_utilisation: 0.0,
            fleet: None,
        }
    }

    #[test]
    fn chart_timeseries_stays_bounded_and_evenly_thinned() {
        let dir = std::env::temp_dir().join(format!("pdsim-sink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut sink = CsvSink::create(&dir).unwrap();
        for s in 1..=20_000 {
            for i in 0..3 {
                sink.timeseries(&row(s, i)).unwrap();
            }
        }
        sink.flush().unwrap();
        let kept = &sink.timeseries_rows;
        assert!(
            kept.len() <= 3 * (CHART_SECONDS as usize + 1),
            "{} rows kept",
            kept.len()
        );
        assert!(
            kept.len() >= 3 * (CHART_SECONDS as usize / 2),
            "{} rows kept",
            kept.len()
        );
        let stride = kept[3].second - kept[0].second;
        assert!(kept.iter().all(|r| r.second % stride == 0), "even thinning");
        // The file keeps every row.
        let lines = std::fs::read_to_string(dir.join("timeseries.csv"))
            .unwrap()
            .lines()
            .count();
        assert_eq!(lines, 1 + 3 * 20_000);
    }
}
