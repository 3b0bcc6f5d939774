//! A small synthetic run for the tests of the charts and of `html`.

use std::path::PathBuf;

use crate::metrics::{Counts, ErrorCount, Histogram, Latencies, TimeseriesRow};

use crate::report::markers::{Marker, MarkerKind};
use crate::report::rates::FinishRates;
use crate::report::{SimSummary, SloSummary, Summary, Throughput, TransferSummary};
use crate::vocab::{Outcome, RequestRow};

use super::{ChartInput, SloMetric, SloTarget};

/// The owned data a [`ChartInput`] borrows.
pub(crate) struct Fixture {
    pub ttft: Histogram,
    pub tpot: Histogram,
    pub timeseries: Vec<TimeseriesRow>,
    pub summary: Summary,
    pub sample: Vec<RequestRow>,
    pub finish_rates: FinishRates,
    pub markers: Vec<Marker>,
    pub slo: Vec<SloTarget>,
    pub transfer_shape: crate::metrics::fragmentation::TransferShape,
}

impl Fixture {
    pub(crate) fn input<'a>(&'a self, run_name: &'a str) -> ChartInput<'a> {
        ChartInput {
            run_name,
            ttft: &self.ttft,
            tpot: &self.tpot,
            timeseries: &self.timeseries,
            summary: &self.summary,
            sample: &self.sample,
            finish_rates: &self.finish_rates,
            markers: &self.markers,
            slo: &self.slo,
            transfer_shape: &self.transfer_shape,
        }
    }
}

/// An error message with every character HTML must escape.
pub(crate) const NASTY_MESSAGE: &str =
    "Envelope <tp_size> mismatch: prefill \"4\" & decode '8' | see `docs`";

pub(crate) fn summary(ttft: &Histogram, tpot: &Histogram, counts: Counts) -> Summary {
    let s = 1e-6;
    Summary {
        errors: if counts.failed > 0 {
            vec![ErrorCount {
                kind: "envelope_tp_mismatch".into(),
                count: counts.failed,
                message: NASTY_MESSAGE.into(),
            }]
        } else {
            Vec::new()
        },
        requests: counts,
        latency_ms: Latencies {
            ttft: ttft.summary(s),
            tpot: tpot.summary(s),
            itl: tpot.summary(s),
            tbt: tpot.summary(s),
            e2e: ttft.summary(s),
            e2e_per_token: tpot.summary(s),
            queue: ttft.summary(s),
            bootstrap: ttft.summary(s),
            decode_queue: tpot.summary(s),
            transfer: tpot.summary(s),
        },
        throughput: Throughput {
            requests_per_s: 4.2,
            input_tokens_per_s: 8600.0,
            output_tokens_per_s: 1075.5,
            arrival_window: crate::report::WindowThroughput {
                end_s: 9.0,
                requests_per_s: 4.4,
                input_tokens_per_s: 9000.0,
                output_tokens_per_s: 1100.0,
                goodput_requests_per_s: 3.7,
            },
        },
        slo: SloSummary {
            attainment: Some(0.875),
            goodput_requests_per_s: 3.5,
            met: None,
            targets: Vec::new(),
            ttft_ms: None,
            tpot_ms: None,
            tbt_ms: None,
            e2e_per_token_ms: None,
        },
        transfer: TransferSummary {
            backend: None,
            bytes: 3 << 30,
            writes: 12_345,
            bandwidth_gbps: ttft.summary(1e-6),
            retransmitted_bytes: 0,
            fragmentation: None,
            a2a: Vec::new(),
        },
        pools: Vec::new(),
        cluster: crate::report::ClusterSummary {
            gpus: 3,
            nodes: 1,
            usd_per_hour: None,
            usd_per_1m_output_tokens: None,
            node_billing: None,
        },
        sim: SimSummary {
            events: 98_765,
            simulated_s: 10.0,
            cut_by_drain_timeout: false,
        },
        prefix_cache: Vec::new(),
        router: None,
        kv_store: None,
        speculative: Vec::new(),
        aborts: None,
        sessions: None,
        autoscaling: None,
        decode_prefix: None,
    }
}

fn row(id: u64, outcome: Outcome) -> RequestRow {
    let ms = 1_000_000;
    let a = id * 700 * ms;
    RequestRow {
        id,
        arrival_ns: a,
        prefill_instance: Some(0),
        decode_instance: Some(1 + (id % 2) as u32),
        input_tokens: 1024,
        output_tokens: 64,
        prefill_queued_ns: Some(a + 5 * ms),
        prefill_start_ns: Some(a + 50 * ms),
        prefill_end_ns: Some(a + 350 * ms),
        transfer_start_ns: Some(a + 200 * ms),
        transfer_end_ns: Some(a + 380 * ms),
        decode_start_ns: Some(a + 420 * ms),
        first_token_ns: Some(a + 430 * ms),
        finish_ns: Some(a + 2_400 * ms),
        kv_bytes: 1 << 20,
        rdma_writes: 40,
        outcome,
        error_kind: None,
        victims: String::new(),
        corrupted_by: String::new(),
        retractions: 0,
        bootstrap_room: 0,
        session_id: None,
        turn: None,
        cached_tokens: None,
        server_first_token_ns: None,
        gaps: Default::default(),
    }
}

/// Three instances over 10 s, 5 sampled requests (one failed mid-transfer, one corrupted),
/// TTFT over three decades (log axis), TPOT within one (linear axis); a crash, a worker death
/// and a restart; TTFT and TPOT thresholds and a TTFT p99 target.
pub(crate) fn synthetic() -> Fixture {
    let ms = 1_000_000;
    let mut ttft = Histogram::new();
    let mut tpot = Histogram::new();
    for i in 0..200u64 {
        ttft.record(5 * ms + i * i * 200 * ms / 1000); // 5 ms .. ~7.9 s
        tpot.record(20 * ms + i * 100_000); // 20 .. 40 ms
    }
    let mut timeseries = Vec::new();
    for second in 1..=10u64 {
        for (instance, pool, role) in [
            (0u32, "prefill", "prefill"),
            (1, "decode", "decode"),
            (2, "decode", "decode"),
        ] {
            let k = second + u64::from(instance);
            timeseries.push(TimeseriesRow {
                second,
                instance,
                pool: pool.into(),
                role,
                arrivals: 3 + k % 3,
                running: (k % 5) as u32,
                queued: (k % 4) as u32,
                kv_pages_used: 100 * (k % 7),
                kv_pages_total: 1000,
                tokens_out: if role == "decode" { 200 + 10 * k } else { 3 },
                link_utilisation: (k % 10) as f64 / 10.0,
                busy_fraction: (k % 4) as f64 / 4.0,
                fleet: None,
            });
        }
    }
    let mut sample: Vec<RequestRow> = (0..5).map(|i| row(i, Outcome::Completed)).collect();
    sample[2].outcome = Outcome::Corrupted;
    let failed = &mut sample[3];
    failed.outcome = Outcome::Failed;
    failed.error_kind = Some(crate::vocab::ErrorKind::EnvelopeTpMismatch);
    failed.transfer_end_ns = None;
    failed.decode_start_ns = None;
    failed.first_token_ns = None;
    failed.finish_ns = Some(failed.arrival_ns + 500 * ms);
    let counts = Counts {
        arrived: 60,
        completed: 50,
        failed: 4,
        corrupted: 2,
        unfinished: 4,
        aborted: 0,
    };
    let mut finish_rates = FinishRates::default();
    let mut transfer_shape = crate::metrics::fragmentation::TransferShape::new(10_000 * ms);
    for r in &sample {
        finish_rates.record(r);
        transfer_shape.record(r);
    }
    Fixture {
        transfer_shape,
        summary: summary(&ttft, &tpot, counts),
        ttft,
        tpot,
        timeseries,
        sample,
        finish_rates,
        markers: vec![
            marker(1_200, MarkerKind::Fault, "crash decode #2"),
            marker(
                1_900,
                MarkerKind::WorkerDeath {
                    prefill: 0,
                    rank: 0,
                    shard: 1,
                },
                "worker died: prefill #0 rank 0 queue 1 (envelope_tp_mismatch)",
            ),
            marker(3_000, MarkerKind::Recovery, "restart decode #2"),
        ],
        slo: vec![
            SloTarget {
                metric: SloMetric::Ttft,
                ms: 2_000.0,
                quantile: None,
            },
            SloTarget {
                metric: SloMetric::Ttft,
                ms: 2_000.0,
                quantile: Some(0.99),
            },
            SloTarget {
                metric: SloMetric::Tpot,
                ms: 30.0,
                quantile: None,
            },
        ],
    }
}

/// A marker at `ms` of simulated time.
pub(crate) fn marker(ms: u64, kind: MarkerKind, label: &str) -> Marker {
    Marker {
        at_ns: ms * 1_000_000,
        kind,
        label: label.into(),
    }
}

/// Nothing happened: no rows, empty histograms, zero counts.
pub(crate) fn empty() -> Fixture {
    let (ttft, tpot) = (Histogram::new(), Histogram::new());
    Fixture {
        summary: summary(&ttft, &tpot, Counts::default()),
        ttft,
        tpot,
        timeseries: Vec::new(),
        sample: Vec::new(),
        finish_rates: FinishRates::default(),
        markers: Vec::new(),
        slo: Vec::new(),
        transfer_shape: Default::default(),
    }
}

/// A fresh, empty scratch folder for one test.
pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pdsim-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}
