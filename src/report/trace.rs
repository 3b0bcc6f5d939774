//! `trace.json` (`pdsim run --trace-events`): the run in Chrome / Perfetto trace-event format
//! (the JSON "Trace Event Format": `{"traceEvents": [...]}`), for ui.perfetto.dev or
//! chrome://tracing. Written from the request rows as the run streams them, so it needs no hook
//! in the simulation and costs nothing unless asked for.
//!
//! Tracks: one process per instance (`prefill 0 (pool prefill)`, …) and one per (prefill
//! instance, rank 0's transfer queue): every prefill rank has its own queues (docs/sglang-pd.md §11.3), and a
//! transfer is drawn on rank 0's, where it is hashed by decode rank 0's session port alone when
//! the attention TPs are equal. Spans are nestable async events (`b`/`e`, one id per
//! request), so concurrent requests stack in lanes: on the prefill, `req N` holds `bootstrap`
//! (arrival → decode's page ids), `queue` and `prefill`; on the shard, `transfer`; on the decode,
//! `req N` holds `wait` (transferred → joined a batch) and `decode`. A failed or corrupted
//! request ends with an instant marker naming its error kind or its culprits; scenario faults
//! and recoveries are global instant markers (`fault: …`, `recovery: …`), and a transfer
//! worker's death (`worker died: …`) an instant on its queue's track (rank 0), or on the prefill
//! instance's track (other ranks). Timestamps are µs of
//! simulated time.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::vocab::{Outcome, RequestRow};

use super::IoError;
use super::markers::{Marker, MarkerKind};

/// One instance as the trace names it.
#[derive(Clone, Debug)]
pub struct TraceInstance {
    /// Global index.
    pub instance: u32,
    /// Pool name.
    pub pool: String,
    /// `prefill` or `decode`.
    pub role: &'static str,
}

/// Streams `trace.json`.
pub struct TraceWriter {
    path: PathBuf,
    w: BufWriter<File>,
    first: bool,
    queue_size: u32,
    instances_total: u32,
    shard_of: fn(u32, u32) -> u32,
}

/// The process id of a shard track (after every instance's).
fn shard_pid(prefill: u32, shard: u32, instances: u32, queue_size: u32) -> u64 {
    1 + u64::from(instances) + u64::from(prefill) * u64::from(queue_size) + u64::from(shard)
}

fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

impl TraceWriter {
    /// Creates the file with its track names. `shard_of(decode instance, queue_size)` is the
    /// simulation's shard hash (`sglang::transfer::transfer_shard`), passed in because reports never reach
    /// into the simulation.
    pub fn create(
        path: &Path,
        instances: &[TraceInstance],
        queue_size: u32,
        shard_of: fn(u32, u32) -> u32,
    ) -> Result<Self, IoError> {
        let f = File::create(path).map_err(|source| IoError {
            path: path.to_path_buf(),
            source,
        })?;
        let mut t = Self {
            path: path.to_path_buf(),
            w: BufWriter::new(f),
            first: true,
            queue_size: queue_size.max(1),
            instances_total: instances.len() as u32,
            shard_of,
        };
        t.raw("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        let n = instances.len() as u32;
        t.event("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"cluster (faults)\"}}")?;
        for i in instances {
            let pid = u64::from(i.instance) + 1;
            t.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                json_str(&format!("{} {} (pool {})", i.role, i.instance, i.pool))
            ))?;
            t.event(&format!(
                "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{pid},\"tid\":0,\"args\":{{\"sort_index\":{pid}}}}}"
            ))?;
            if i.role == "prefill" {
                for s in 0..t.queue_size {
                    let sp = shard_pid(i.instance, s, n, t.queue_size);
                    t.event(&format!(
                        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{sp},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                        json_str(&format!("prefill {} rank 0 transfer queue {s}", i.instance))
                    ))?;
                    t.event(&format!(
                        "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{sp},\"tid\":0,\"args\":{{\"sort_index\":{sp}}}}}"
                    ))?;
                }
            }
        }
        Ok(t)
    }

    fn raw(&mut self, s: &str) -> Result<(), IoError> {
        self.w.write_all(s.as_bytes()).map_err(|source| IoError {
            path: self.path.clone(),
            source,
        })
    }

    fn event(&mut self, e: &str) -> Result<(), IoError> {
        let sep = if self.first { "" } else { ",\n" };
        self.first = false;
        self.raw(&format!("{sep}{e}"))
    }

    fn span(
        &mut self,
        pid: u64,
        cat: &str,
        id: u64,
        name: &str,
        from: u64,
        to: u64,
    ) -> Result<(), IoError> {
        let name = json_str(name);
        self.event(&format!(
            "{{\"ph\":\"b\",\"cat\":\"{cat}\",\"id2\":{{\"local\":{id}}},\"name\":{name},\"pid\":{pid},\"tid\":0,\"ts\":{}}}",
            us(from)
        ))?;
        self.event(&format!(
            "{{\"ph\":\"e\",\"cat\":\"{cat}\",\"id2\":{{\"local\":{id}}},\"name\":{name},\"pid\":{pid},\"tid\":0,\"ts\":{}}}",
            us(to)
        ))
    }

    fn open(
        &mut self,
        pid: u64,
        cat: &str,
        id: u64,
        name: &str,
        at: u64,
        args: &str,
    ) -> Result<(), IoError> {
        self.event(&format!(
            "{{\"ph\":\"b\",\"cat\":\"{cat}\",\"id2\":{{\"local\":{id}}},\"name\":{},\"pid\":{pid},\"tid\":0,\"ts\":{},\"args\":{args}}}",
            json_str(name),
            us(at)
        ))
    }

    fn close(&mut self, pid: u64, cat: &str, id: u64, name: &str, at: u64) -> Result<(), IoError> {
        self.event(&format!(
            "{{\"ph\":\"e\",\"cat\":\"{cat}\",\"id2\":{{\"local\":{id}}},\"name\":{},\"pid\":{pid},\"tid\":0,\"ts\":{}}}",
            json_str(name),
            us(at)
        ))
    }

    /// One finished (or unfinished) request's spans and markers.
    pub fn request(&mut self, r: &RequestRow) -> Result<(), IoError> {
        let name = format!("req {}", r.id);
        let args = format!(
            "{{\"input_tokens\":{},\"output_tokens\":{},\"outcome\":\"{}\",\"error_kind\":{}}}",
            r.input_tokens,
            r.output_tokens,
            outcome(r.outcome),
            r.error_kind
                .map_or("null".to_string(), |k| json_str(k.as_str()))
        );
        let reached_decode = r.transfer_end_ns.is_some() || r.decode_start_ns.is_some();
        if let Some(p) = r.prefill_instance {
            let pid = u64::from(p) + 1;
            let ends = [r.prefill_queued_ns, r.prefill_start_ns, r.prefill_end_ns];
            let mut end = ends.iter().flatten().copied().max().unwrap_or(r.arrival_ns);
            if !reached_decode {
                end = end.max(r.finish_ns.unwrap_or(end));
            }
            self.open(pid, "request", r.id, &name, r.arrival_ns, &args)?;
            let phases = [
                ("bootstrap", Some(r.arrival_ns), r.prefill_queued_ns),
                ("queue", r.prefill_queued_ns, r.prefill_start_ns),
                ("prefill", r.prefill_start_ns, r.prefill_end_ns),
            ];
            for (what, a, b) in phases {
                if let (Some(a), Some(b)) = (a, b) {
                    self.span(pid, "request", r.id, what, a, b)?;
                }
            }
            self.close(pid, "request", r.id, &name, end)?;
            if let (Some(d), Some(a)) = (r.decode_instance, r.transfer_start_ns) {
                let b = r.transfer_end_ns.or(r.finish_ns).unwrap_or(a).max(a);
                let shard = (self.shard_of)(d, self.queue_size);
                let sp = shard_pid(p, shard, self.instances_total, self.queue_size);
                self.span(
                    sp,
                    "transfer",
                    r.id,
                    &format!("transfer req {} → decode {d}", r.id),
                    a,
                    b,
                )?;
            }
        }
        if let (Some(d), true) = (r.decode_instance, reached_decode) {
            let pid = u64::from(d) + 1;
            let start = r
                .transfer_end_ns
                .or(r.decode_start_ns)
                .expect("reached decode");
            let end = r
                .finish_ns
                .unwrap_or(start)
                .max(r.decode_start_ns.unwrap_or(start));
            self.open(pid, "request", r.id, &name, start, &args)?;
            if let Some(j) = r.decode_start_ns {
                self.span(pid, "request", r.id, "wait", start, j)?;
                self.span(pid, "request", r.id, "decode", j, end)?;
            }
            self.close(pid, "request", r.id, &name, end)?;
        }
        let marker = match r.outcome {
            Outcome::Failed => Some(format!(
                "failed: {}",
                r.error_kind.map_or("?", |k| k.as_str())
            )),
            Outcome::Corrupted => Some(format!(
                "corrupted req {} (by: {}; victims: {})",
                r.id,
                if r.corrupted_by.is_empty() {
                    "?"
                } else {
                    &r.corrupted_by
                },
                if r.victims.is_empty() {
                    "none"
                } else {
                    &r.victims
                }
            )),
            _ => None,
        };
        if let (Some(m), Some(at)) = (marker, r.finish_ns) {
            let inst = r
                .decode_instance
                .filter(|_| reached_decode)
                .or(r.prefill_instance);
            if let Some(i) = inst {
                self.event(&format!(
                    "{{\"ph\":\"i\",\"s\":\"p\",\"name\":{},\"pid\":{},\"tid\":0,\"ts\":{},\"args\":{args}}}",
                    json_str(&m),
                    u64::from(i) + 1,
                    us(at)
                ))?;
            }
        }
        Ok(())
    }

    /// The run's event markers, then the closing bracket. Faults and recoveries are global
    /// instants (a line across every track); a transfer-worker death is an instant on its
    /// shard's track, which is where the knock-on shows: nothing moves on it afterwards.
    pub fn finish(mut self, markers: &[Marker]) -> Result<(), IoError> {
        for m in markers {
            let e = match m.kind {
                MarkerKind::Fault | MarkerKind::Recovery => format!(
                    "{{\"ph\":\"i\",\"s\":\"g\",\"name\":{},\"pid\":0,\"tid\":0,\"ts\":{}}}",
                    json_str(&format!("{}: {}", m.kind.as_str(), m.label)),
                    us(m.at_ns)
                ),
                MarkerKind::WorkerDeath {
                    prefill,
                    rank,
                    shard,
                } => format!(
                    "{{\"ph\":\"i\",\"s\":\"p\",\"name\":{},\"pid\":{},\"tid\":0,\"ts\":{}}}",
                    json_str(&m.label),
                    if rank == 0 {
                        shard_pid(prefill, shard, self.instances_total, self.queue_size)
                    } else {
                        u64::from(prefill) + 1
                    },
                    us(m.at_ns)
                ),
            };
            self.event(&e)?;
        }
        self.raw("\n]}\n")?;
        self.w.flush().map_err(|source| IoError {
            path: self.path.clone(),
            source,
        })
    }
}

fn outcome(o: Outcome) -> &'static str {
    match o {
        Outcome::Completed => "completed",
        Outcome::Failed => "failed",
        Outcome::Corrupted => "corrupted",
        Outcome::Unfinished => "unfinished",
        Outcome::Aborted => "aborted",
    }
}
