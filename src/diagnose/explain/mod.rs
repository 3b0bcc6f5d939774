//! The narrative of a finished run, for people (`pdsim explain`, docs/architecture.md §2): what happened to
//! requests, by outcome and error kind; then for every failure kind sglang's text, the check
//! that raised it and where in sglang, the two layouts or sizes that differed (rank 0's regions,
//! from `layout/`), who was hurt — the healthy decode instances stalled behind a dead
//! transfer-queue shard, the victims of corrupted writes — the sglang flags that fix it, and the
//! capacity analysis ([`super::capacity`]).
//!
//! A results folder is read back through the results schema (`report::schema`: `summary.json`,
//! `requests.csv`, `run.json`); the scenario is rebuilt from the resolved copy in `run.json` to
//! lay out each pool.
//!
//! The parts: [`read`] reads the folder back and counts requests per instance and pair;
//! [`sections`] writes the overview, prefix reuse and capacity; [`failures`] a section per
//! error kind and one for corruption, with [`shards`] for the dead transfer queues and who
//! stalled behind them; [`render`] turns the sections into text or Markdown.

mod aborts;
mod failures;
mod production;
mod read;
mod render;
mod scaling;
mod sections;
mod shards;

use std::path::Path;

use super::kinds;
use crate::layout::{Effect, PairPlan};
use crate::report::schema::ReadError;
use crate::scenario::{Role, Scenario};
use crate::vocab::ErrorKind;
use failures::{corruption_section, faults_line, kind_section};
use read::{Run, read_run};
use render::{render_markdown, render_text};
use sections::{capacity_section, overview};

/// One part of the narrative, rendered as text or Markdown.
#[derive(Clone, Debug)]
enum Block {
    Para(String),
    Bullets(Vec<String>),
    Table(Vec<String>, Vec<Vec<String>>),
    /// sglang's own words.
    Quote(String),
}

/// One titled section of the narrative.
struct Section {
    title: String,
    blocks: Vec<Block>,
}

/// Pool index, pool name and role of every global instance, in instance order.
fn instances(sc: &Scenario) -> Vec<(usize, String, Role)> {
    let mut v = Vec::new();
    for (pi, p) in sc.pools.iter().enumerate() {
        for _ in 0..p.servers() {
            v.push((pi, p.name.clone(), p.role));
        }
    }
    v
}

/// Nanoseconds as seconds, two decimals (`1.50 s`).
fn secs(ns: u64) -> String {
    format!("{:.2} s", ns as f64 / 1e9)
}

/// The plan of a (prefill pool, decode pool) pair.
fn plan(sc: &Scenario, p: usize, d: usize) -> Option<&PairPlan> {
    sc.plans.get(&(p, d)).map(|a| a.as_ref())
}

/// The error of a plan that kills the worker, if any.
fn worker_killer(plan: &PairPlan) -> Option<&crate::layout::PdError> {
    plan.chunk_error()
        .or(plan.last_chunk_error())
        .filter(|e| e.effect == Effect::WorkerDies)
}

/// The whole narrative.
fn narrative(run: &Run) -> Vec<Section> {
    let mut out = overview(run);
    out.extend(production::speculative_section(run));
    out.extend(production::fragmentation_section(run));
    out.push(capacity_section(run));
    out.extend(aborts::aborts_section(run));
    out.extend(scaling::scaling_section(run));
    // Every kind parses: `schema::read_summary` refused any other.
    let mut errors: Vec<(ErrorKind, u64, String)> = run
        .summary
        .errors
        .iter()
        .filter_map(|e| {
            Some((
                e.kind.parse::<ErrorKind>().ok()?,
                e.count,
                e.message.clone(),
            ))
        })
        .collect();
    // Causes first, then their knock-on.
    errors.sort_by_key(|(k, ..)| (kinds::info(*k).knock_on, *k));
    for (k, n, m) in &errors {
        out.push(kind_section(run, run.sc.as_ref(), *k, *n, m));
    }
    out.extend(corruption_section(run));
    if let Some(f) = run
        .sc
        .as_ref()
        .and_then(|_| faults_line(&run.record.scenario.faults))
        && errors.iter().all(|(k, ..)| !kinds::info(*k).knock_on)
    {
        out.push(Section {
            title: "Faults".into(),
            blocks: vec![Block::Para(format!(
                "Injected: {f}. No request failed because of them: sglang's retries and the router's health check absorbed them (see links.csv and the charts)."
            ))],
        });
    }
    out
}

/// The explanation of the results in `dir`, as text or Markdown.
pub fn explain_dir(dir: &Path, markdown: bool) -> Result<String, ReadError> {
    let run = read_run(dir)?;
    let title = format!("pdsim explain: {} (seed {})", run.name, run.seed);
    let sections = narrative(&run);
    Ok(if markdown {
        render_markdown(&title, &sections)
    } else {
        render_text(&title, &sections)
    })
}
