//! One row of results ([`SweepRow`], a point on one seed) and `sweep.csv`, written and read back
//! through the same struct ([`sweep_csv`], [`parse_sweep_csv`]): floats print shortest-round-
//! trip, so rows read back from a shard or a journal equal the in-memory ones, byte for byte.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::PlanError;
use super::grid::Grid;
use crate::config::Role;
use crate::metrics::summary::Summary;
use crate::scenario::{self, Scenario};

/// One row of `sweep.csv`: a point on one seed. Field order is column order (after the varied
/// keys, which come first); `None` is a blank cell (no data, or an infeasible point).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    /// The seed.
    pub seed: u64,
    /// GPUs in all pools.
    pub gpus: Option<u32>,
    /// Nodes the pools span.
    pub nodes: Option<u32>,
    /// GPUs of those nodes no instance uses (`nodes × gpus_per_node − gpus`).
    pub idle_gpus: Option<u32>,
    /// GPUs paid for: `gpus`, or `nodes × gpus_per_node` under `hardware.billing = "node"`.
    pub billed_gpus: Option<u32>,
    /// Prefill instances (all prefill pools).
    pub prefill_instances: Option<u32>,
    /// Decode instances.
    pub decode_instances: Option<u32>,
    /// Colocated instances.
    pub colocated_instances: Option<u32>,
    /// The arrival rate asked for, requests/s (`workload.arrival.rate_per_s` or the trace's
    /// `rate_per_s`; blank for other processes).
    pub rate_per_s: Option<f64>,
    /// Requests that arrived.
    pub arrived: Option<u64>,
    /// Completed.
    pub completed: Option<u64>,
    /// Failed.
    pub failed: Option<u64>,
    /// Corrupted.
    pub corrupted: Option<u64>,
    /// Unfinished.
    pub unfinished: Option<u64>,
    /// Aborted: the client disconnected first (`[workload.client_timeout]`). With it every row
    /// conserves: `arrived = completed + failed + corrupted + unfinished + aborted`.
    pub aborted: Option<u64>,
    /// TTFT median, ms (finished requests).
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p90, ms.
    pub ttft_p90_ms: Option<f64>,
    /// TTFT p99, ms.
    pub ttft_p99_ms: Option<f64>,
    /// TPOT median, ms.
    pub tpot_p50_ms: Option<f64>,
    /// TPOT p90, ms.
    pub tpot_p90_ms: Option<f64>,
    /// TPOT p99, ms.
    pub tpot_p99_ms: Option<f64>,
    /// Inter-token latency median, ms: every gap of every request, all tokens pooled.
    pub itl_p50_ms: Option<f64>,
    /// ITL p90, ms.
    pub itl_p90_ms: Option<f64>,
    /// ITL p99, ms.
    pub itl_p99_ms: Option<f64>,
    /// TBT median, ms: each finished request's worst inter-token gap.
    pub tbt_p50_ms: Option<f64>,
    /// TBT p90, ms.
    pub tbt_p90_ms: Option<f64>,
    /// TBT p99, ms.
    pub tbt_p99_ms: Option<f64>,
    /// End-to-end p99, ms.
    pub e2e_p99_ms: Option<f64>,
    /// End-to-end ÷ output tokens p99, ms (finished requests).
    pub e2e_per_token_p99_ms: Option<f64>,
    /// Finished requests/s over the arrival window.
    pub requests_per_s: Option<f64>,
    /// Output tokens/s over the arrival window.
    pub output_tokens_per_s: Option<f64>,
    /// Output tokens/s per GPU over the arrival window.
    pub output_tokens_per_s_per_gpu: Option<f64>,
    /// Requests/s within the per-request SLO thresholds, over the arrival window.
    pub goodput_requests_per_s: Option<f64>,
    /// Share of arrived requests that completed within the per-request thresholds.
    pub slo_attainment: Option<f64>,
    /// Whether every `[slo]` target holds (blank when `[slo]` sets none).
    pub slo_met: Option<bool>,
    /// The `[slo]` targets missed, space-separated (`ttft_p99_ms attainment_min`); blank when
    /// every target holds or none is set. For a run stopped early, the targets already lost at
    /// the stop (the whole run misses them; the others were undecided).
    pub slo_missed: Option<String>,
    /// Simulated second at which `pdsim plan` stopped the run because `[slo]` could no longer
    /// be met (`metrics::slo::SloWatch`; the verdict is the whole run's, the other figures
    /// are of the requests up to then); blank for a run to its end.
    pub stopped_early_at_s: Option<f64>,
    /// Billed GPUs × `hardware.usd_per_gpu_hour`.
    pub usd_per_hour: Option<f64>,
    /// Dollars per million output tokens.
    pub usd_per_1m_output_tokens: Option<f64>,
    /// What bound each pool, `pool:bottleneck` space-separated.
    pub bottlenecks: Option<String>,
    /// Why the point could not run (an invalid combination), blank otherwise.
    pub error: Option<String>,
}

impl SweepRow {
    /// A point that could not run.
    pub(super) fn infeasible(seed: u64, error: String) -> Self {
        Self {
            seed,
            gpus: None,
            nodes: None,
            idle_gpus: None,
            billed_gpus: None,
            prefill_instances: None,
            decode_instances: None,
            colocated_instances: None,
            rate_per_s: None,
            arrived: None,
            completed: None,
            failed: None,
            corrupted: None,
            unfinished: None,
            aborted: None,
            ttft_p50_ms: None,
            ttft_p90_ms: None,
            ttft_p99_ms: None,
            tpot_p50_ms: None,
            tpot_p90_ms: None,
            tpot_p99_ms: None,
            itl_p50_ms: None,
            itl_p90_ms: None,
            itl_p99_ms: None,
            tbt_p50_ms: None,
            tbt_p90_ms: None,
            tbt_p99_ms: None,
            e2e_p99_ms: None,
            e2e_per_token_p99_ms: None,
            requests_per_s: None,
            output_tokens_per_s: None,
            output_tokens_per_s_per_gpu: None,
            goodput_requests_per_s: None,
            slo_attainment: None,
            slo_met: None,
            slo_missed: None,
            stopped_early_at_s: None,
            usd_per_hour: None,
            usd_per_1m_output_tokens: None,
            bottlenecks: None,
            error: Some(error),
        }
    }

    /// The row of a finished run.
    pub fn of(sc: &Scenario, s: &Summary) -> Self {
        let count = |role: Role| -> u32 {
            sc.pools
                .iter()
                .filter(|p| p.role == role)
                .map(|p| p.instances)
                .sum()
        };
        let w = &s.throughput.arrival_window;
        let l = &s.latency_ms;
        let gpus = s.cluster.gpus;
        let nodes = s.cluster.nodes;
        let missed: Vec<&str> = s
            .slo
            .targets
            .iter()
            .filter(|t| !t.met)
            .map(|t| t.key.as_str())
            .collect();
        Self {
            seed: sc.seed,
            gpus: Some(gpus),
            nodes: Some(nodes),
            idle_gpus: Some((nodes * sc.gpus_per_node).saturating_sub(gpus)),
            billed_gpus: Some(sc.billing.billed_gpus(gpus, nodes, sc.gpus_per_node)),
            prefill_instances: Some(count(Role::Prefill)),
            decode_instances: Some(count(Role::Decode)),
            colocated_instances: Some(count(Role::Colocated)),
            rate_per_s: rate_of(sc),
            arrived: Some(s.requests.arrived),
            completed: Some(s.requests.completed),
            failed: Some(s.requests.failed),
            corrupted: Some(s.requests.corrupted),
            unfinished: Some(s.requests.unfinished),
            aborted: Some(s.requests.aborted),
            ttft_p50_ms: l.ttft.p50,
            ttft_p90_ms: l.ttft.p90,
            ttft_p99_ms: l.ttft.p99,
            tpot_p50_ms: l.tpot.p50,
            tpot_p90_ms: l.tpot.p90,
            tpot_p99_ms: l.tpot.p99,
            itl_p50_ms: l.itl.p50,
            itl_p90_ms: l.itl.p90,
            itl_p99_ms: l.itl.p99,
            tbt_p50_ms: l.tbt.p50,
            tbt_p90_ms: l.tbt.p90,
            tbt_p99_ms: l.tbt.p99,
            e2e_p99_ms: l.e2e.p99,
            e2e_per_token_p99_ms: l.e2e_per_token.p99,
            requests_per_s: Some(w.requests_per_s),
            output_tokens_per_s: Some(w.output_tokens_per_s),
            output_tokens_per_s_per_gpu: Some(w.output_tokens_per_s / f64::from(gpus.max(1))),
            goodput_requests_per_s: Some(w.goodput_requests_per_s),
            slo_attainment: s.slo.attainment,
            slo_met: s.slo.met,
            slo_missed: (!missed.is_empty()).then(|| missed.join(" ")),
            stopped_early_at_s: None,
            usd_per_hour: s.cluster.usd_per_hour,
            usd_per_1m_output_tokens: s.cluster.usd_per_1m_output_tokens,
            bottlenecks: Some(
                s.pools
                    .iter()
                    .map(|p| format!("{}:{}", p.pool, p.bottleneck))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            error: None,
        }
    }
}

/// The arrival rate of a scenario, when its process has one.
fn rate_of(sc: &Scenario) -> Option<f64> {
    scenario::resolved_file(sc).workload.rate_per_s()
}

/// `sweep.csv`'s bytes: the varied keys, then [`SweepRow`]'s columns.
pub fn sweep_csv(grid: &Grid, rows: &[(usize, SweepRow)]) -> Result<Vec<u8>, PlanError> {
    let err = |e: csv::Error| PlanError::Io(format!("sweep.csv: {e}"));
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    let mut header = grid.columns();
    header.extend(row_columns());
    w.write_record(&header).map_err(err)?;
    for (i, row) in rows {
        let p = i / grid.seeds.len();
        let mut rec: Vec<String> = grid.assignments(p).into_iter().map(|(_, v)| v).collect();
        rec.extend(row_cells(row).map_err(err)?);
        w.write_record(&rec).map_err(err)?;
    }
    w.into_inner()
        .map_err(|e| PlanError::Io(format!("sweep.csv: {e}")))
}

/// The column names of [`SweepRow`].
pub fn row_columns() -> Vec<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(SweepRow::infeasible(0, String::new()))
        .expect("a row serializes");
    let bytes = w.into_inner().expect("in memory");
    let text = String::from_utf8(bytes).expect("csv is UTF-8");
    text.lines()
        .next()
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect()
}

fn row_cells(row: &SweepRow) -> Result<Vec<String>, csv::Error> {
    Ok(crate::report::first_csv_record(row, false)?
        .iter()
        .map(str::to_string)
        .collect())
}

/// Reads a `sweep.csv` back: each line's varied values and row.
pub fn read_sweep_csv(path: &Path, axes: usize) -> Result<Vec<(Vec<String>, SweepRow)>, PlanError> {
    let bytes =
        std::fs::read(path).map_err(|e| PlanError::Io(format!("{}: {e}", path.display())))?;
    parse_sweep_csv(path, &bytes, axes)
}

/// Refuses CSV bytes whose last line has no end: pdsim ends every line with a newline, and the
/// csv reader takes a field cut inside its quotes (`"infeasible, ""q`) as a whole field, so a
/// file cut there would otherwise read back as a row with a shorter value.
pub(crate) fn whole_lines(path: &Path, bytes: &[u8]) -> Result<(), PlanError> {
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        Ok(())
    } else {
        Err(PlanError::file(
            path,
            format!(
                "{}: cut short: its last line has no end (pdsim ends every line with a newline), so the file is unfinished or damaged",
                path.display()
            ),
        ))
    }
}

/// [`read_sweep_csv`] of bytes (`path` names them in errors).
pub fn parse_sweep_csv(
    path: &Path,
    bytes: &[u8],
    axes: usize,
) -> Result<Vec<(Vec<String>, SweepRow)>, PlanError> {
    whole_lines(path, bytes)?;
    let err = |e: csv::Error| PlanError::file(path, format!("{}: {e}", path.display()));
    let mut r = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(bytes);
    let header: csv::StringRecord = r.headers().map_err(err)?.clone();
    let tail: csv::StringRecord = header.iter().skip(axes).collect();
    if tail.iter().map(str::to_string).collect::<Vec<_>>() != row_columns() {
        return Err(PlanError::file(
            path,
            format!(
                "{}: not a sweep.csv of this pdsim (its columns after the {axes} varied key(s) differ)",
                path.display()
            ),
        ));
    }
    let columns: csv::StringRecord = row_columns().into();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(err)?;
        let values: Vec<String> = rec.iter().take(axes).map(str::to_string).collect();
        let tail: csv::StringRecord = rec.iter().skip(axes).collect();
        rows.push((
            values,
            tail.deserialize::<SweepRow>(Some(&columns)).map_err(err)?,
        ));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{parse_axis, search};

    #[test]
    fn rows_read_back_as_written() {
        let g = Grid::new(vec![parse_axis("a=1,2").unwrap()], vec![0], vec![]).unwrap();
        let mut r = SweepRow::infeasible(0, "no, \"really\"".into());
        r.ttft_p99_ms = Some(0.1 + 0.2);
        r.slo_met = Some(false);
        let rows = vec![(0, r.clone()), (1, SweepRow::infeasible(0, String::new()))];
        let bytes = sweep_csv(&g, &rows).unwrap();
        let dir = std::env::temp_dir().join(format!("pdsim-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("sweep.csv");
        std::fs::write(&p, &bytes).unwrap();
        let back: Vec<SweepRow> = read_sweep_csv(&p, 1)
            .unwrap()
            .into_iter()
            .map(|r| r.1)
            .collect();
        assert_eq!(back[0], r);
        assert_eq!(
            sweep_csv(&g, &[(0, back[0].clone()), (1, back[1].clone())]).unwrap(),
            bytes
        );
    }

    #[test]
    fn a_csv_cut_inside_a_quoted_field_is_refused_not_read_short() {
        // The fuzzer's find (seed 2, case 4335): a shard cut inside `"no, ""really"""` read back
        // as a row whose error was `no, "r`, and the merge exited 0 with it.
        let g = Grid::new(vec![parse_axis("a=1,2").unwrap()], vec![0], vec![]).unwrap();
        let rows = vec![
            (0, SweepRow::infeasible(0, String::new())),
            (1, SweepRow::infeasible(0, "no, \"really\"".into())),
        ];
        let bytes = sweep_csv(&g, &rows).unwrap();
        let p = Path::new("shard/sweep.csv");
        assert_eq!(parse_sweep_csv(p, &bytes, 1).unwrap().len(), 2);
        let end = String::from_utf8_lossy(&bytes).rfind("\"\"really").unwrap();
        let cut = end + 4;
        assert!(bytes[..cut].ends_with(b"\"\"re"), "cut inside the quotes");
        let e = parse_sweep_csv(p, &bytes[..cut], 1)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("shard/sweep.csv") && e.contains("cut short"),
            "{e}"
        );
        // The same for plan.csv.
        let e = search::parse_plan_csv(p, b"a,b\n1,\"x", 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cut short"), "{e}");
    }
}
