//! What the reports say beyond the summary: both pools' configuration and each
//! instance's outcomes (so a healthy decode stalled behind a dead shard stands out). The CLI
//! fills [`RunContext`] from the scenario; reports never read the scenario themselves.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::vocab::{Outcome, RequestRow};

use super::markers::Marker;

use super::escape::escape_html;

/// One pool's configuration, as the reports print it.
#[derive(Clone, Debug, Default)]
pub struct PoolFacts {
    /// Pool name.
    pub name: String,
    /// `prefill` or `decode`.
    pub role: String,
    /// Instances, and their global indices (`0–1`).
    pub instances: String,
    /// Model name.
    pub model: String,
    /// sglang flags: `--tp-size 2 --page-size 64 --kv-cache-dtype auto …`.
    pub flags: String,
}

/// Outcomes of the requests one instance served (prefill or decode side).
#[derive(Clone, Debug, Default)]
pub struct InstanceOutcomes {
    /// Pool name.
    pub pool: String,
    /// `prefill` or `decode`.
    pub role: String,
    /// Requests routed to it.
    pub requests: u64,
    /// By outcome, in [`Outcome::ALL`] order.
    pub outcomes: [u64; Outcome::ALL.len()],
    /// Failed requests by error kind.
    pub errors: BTreeMap<String, u64>,
}

/// The reports' context of a run.
#[derive(Clone, Debug, Default)]
pub struct RunContext {
    /// Pools in scenario order.
    pub pools: Vec<PoolFacts>,
    /// Router policy and sglang profile, in words.
    pub setup: String,
    /// Per global instance.
    pub instances: Vec<InstanceOutcomes>,
    /// Faults, recoveries and transfer-worker deaths, by time (also marked on the charts).
    pub events: Vec<Marker>,
}

impl RunContext {
    /// Counts one finished request on its instances.
    pub fn count(&mut self, r: &RequestRow) {
        let slot = Outcome::ALL
            .iter()
            .position(|o| *o == r.outcome)
            .unwrap_or(3);
        // A colocated server is both of a row's instances: counted once.
        for i in r.instances() {
            if let Some(inst) = self.instances.get_mut(i as usize) {
                inst.requests += 1;
                inst.outcomes[slot] += 1;
                if let Some(k) = r.error_kind {
                    *inst.errors.entry(k.as_str().to_string()).or_insert(0) += 1;
                }
            }
        }
    }

    /// A flag an instance stands out by: healthy pool, yet most of its requests failed.
    fn stands_out(i: &InstanceOutcomes) -> bool {
        i.requests > 0 && i.outcomes[1] + i.outcomes[2] > 0 && i.outcomes[0] > 0
    }

    /// The HTML sections: configuration and SLO, then per-instance outcomes.
    pub fn html(&self) -> String {
        let mut h = String::new();
        if self.pools.is_empty() {
            return h;
        }
        h.push_str("<h2>Configuration</h2>\n<table>\n<tr><th>pool</th><th>role</th><th>instances</th><th>model</th><th>sglang flags</th></tr>\n");
        for p in &self.pools {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
                escape_html(&p.name),
                escape_html(&p.role),
                escape_html(&p.instances),
                escape_html(&p.model),
                escape_html(&p.flags)
            );
        }
        // The SLO has its own section, from the summary's verdict (`metrics::slo`).
        let _ = writeln!(h, "</table>\n<p>{}.</p>", escape_html(&self.setup));
        // The aborted column only where a run has aborts, so other reports keep their shape.
        let ab = self.instances.iter().any(|i| i.outcomes[4] > 0);
        let _ = writeln!(
            h,
            "<h2>Per instance</h2>\n<table>\n<tr><th>instance</th><th>pool</th><th>role</th><th class=\"n\">requests</th><th class=\"n\">completed</th><th class=\"n\">failed</th><th class=\"n\">corrupted</th><th class=\"n\">unfinished</th>{}<th>errors</th></tr>",
            if ab {
                "<th class=\"n\">aborted</th>"
            } else {
                ""
            }
        );
        for (n, i) in self.instances.iter().enumerate() {
            let errors: Vec<String> = i.errors.iter().map(|(k, c)| format!("{k} ×{c}")).collect();
            let class = if Self::stands_out(i) {
                " class=\"failed\""
            } else {
                ""
            };
            let _ = writeln!(
                h,
                "<tr{class}><td>{n}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>{}<td>{}</td></tr>",
                escape_html(&i.pool),
                escape_html(&i.role),
                i.requests,
                i.outcomes[0],
                i.outcomes[1],
                i.outcomes[2],
                i.outcomes[3],
                if ab {
                    format!("<td class=\"n\">{}</td>", i.outcomes[4])
                } else {
                    String::new()
                },
                escape_html(&errors.join(", "))
            );
        }
        h.push_str("</table>\n");
        if !self.events.is_empty() {
            h.push_str("<h2>Events</h2>\n<p>Marked on every time chart.</p>\n<table>\n<tr><th class=\"n\">time (s)</th><th>kind</th><th>what</th></tr>\n");
            for e in &self.events {
                let _ = writeln!(
                    h,
                    "<tr><td class=\"n\">{:.3}</td><td>{}</td><td>{}</td></tr>",
                    e.at_s(),
                    e.kind.as_str(),
                    escape_html(&e.label)
                );
            }
            h.push_str("</table>\n");
        }
        h
    }

    /// The Markdown sections of `summary.md`.
    pub fn markdown(&self) -> String {
        let mut m = String::new();
        if self.pools.is_empty() {
            return m;
        }
        let cell = |s: &str| s.replace('|', "\\|");
        m.push_str("\n## Configuration\n\n| pool | role | instances | model | sglang flags |\n|---|---|---|---|---|\n");
        for p in &self.pools {
            let _ = writeln!(
                m,
                "| {} | {} | {} | {} | `{}` |",
                cell(&p.name),
                p.role,
                p.instances,
                cell(&p.model),
                p.flags
            );
        }
        let _ = writeln!(m, "\n{}.", self.setup);
        let ab = self.instances.iter().any(|i| i.outcomes[4] > 0);
        let _ = writeln!(
            m,
            "\n## Per instance\n\n| instance | pool | role | requests | completed | failed | corrupted | unfinished |{} errors |\n|---:|---|---|---:|---:|---:|---:|---:|{}---|",
            if ab { " aborted |" } else { "" },
            if ab { "---:|" } else { "" }
        );
        for (n, i) in self.instances.iter().enumerate() {
            let errors: Vec<String> = i.errors.iter().map(|(k, c)| format!("{k} ×{c}")).collect();
            let _ = writeln!(
                m,
                "| {n} | {} | {} | {} | {} | {} | {} | {} |{} {} |",
                cell(&i.pool),
                i.role,
                i.requests,
                i.outcomes[0],
                i.outcomes[1],
                i.outcomes[2],
                i.outcomes[3],
                if ab {
                    format!(" {} |", i.outcomes[4])
                } else {
                    String::new()
                },
                errors.join(", ")
            );
        }
        if !self.events.is_empty() {
            m.push_str("\n## Events\n\n| time (s) | kind | what |\n|---:|---|---|\n");
            for e in &self.events {
                let _ = writeln!(
                    m,
                    "| {:.3} | {} | {} |",
                    e.at_s(),
                    e.kind.as_str(),
                    cell(&e.label)
                );
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::markers::MarkerKind;

    #[test]
    fn events_are_listed_escaped_and_only_when_there_are_some() {
        let mut ctx = RunContext {
            pools: vec![PoolFacts {
                name: "p".into(),
                role: "prefill".into(),
                ..PoolFacts::default()
            }],
            ..RunContext::default()
        };
        assert!(!ctx.html().contains("Events"));
        assert!(!ctx.markdown().contains("Events"));
        ctx.events = vec![
            Marker {
                at_ns: 1_500_000_000,
                kind: MarkerKind::Fault,
                label: "link down <a|b>".into(),
            },
            Marker {
                at_ns: 2_000_000_001,
                kind: MarkerKind::WorkerDeath {
                    prefill: 0,
                    rank: 0,
                    shard: 2,
                },
                label: "worker died: prefill #0 rank 0 queue 2 (x)".into(),
            },
        ];
        let h = ctx.html();
        assert!(h.contains("<h2>Events</h2>"));
        assert!(
            h.contains("<td class=\"n\">1.500</td><td>fault</td><td>link down &lt;a|b&gt;</td>")
        );
        assert!(
            h.contains("<td>worker died</td><td>worker died: prefill #0 rank 0 queue 2 (x)</td>")
        );
        let m = ctx.markdown();
        assert!(m.contains("| 1.500 | fault | link down <a\\|b> |"), "{m}");
        assert!(m.contains("| 2.000 | worker died |"), "{m}");
    }
}
