//! What a sweep or a plan shows while it runs: one line on stderr counting the finished grid
//! rows (or a `--max-rate` plan's searched points) against the total, only when stderr is a
//! terminal and `-q` is not given (indicatif); nothing in a pipe, a file or Python.

use std::io::IsTerminal;

/// A counter of finished rows, drawn on stderr when it is a terminal.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// `what` (`sweep`, `plan`) over `total` rows (`points`: the unit's name), `done` of them
    /// already finished (a resume); hidden under `quiet` or when stderr is not a terminal.
    pub fn new(what: &str, unit: &str, total: usize, done: usize, quiet: bool) -> Self {
        if quiet || !std::io::stderr().is_terminal() {
            return Self { bar: None };
        }
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "{what}: {{pos}}/{{len}} {unit} {{bar:30}} {{elapsed}}{{msg}}"
            ))
            .expect("a valid template"),
        );
        bar.set_position(done as u64);
        // Drawn at once: the count is there before the first row ends.
        bar.tick();
        Self { bar: Some(bar) }
    }

    /// One more finished.
    pub fn inc(&self) {
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    /// The work is done: the line gives way to the summary.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
