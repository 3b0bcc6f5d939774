//! The command line: one file per verb, each parsing its flags into the application layer's
//! request (`crate::app`). `main.rs` only parses and maps errors to exit codes.

pub mod calibrate;
pub mod check;
pub mod explain;
pub mod layout;
pub mod lint;
pub mod merge;
pub mod plan;
pub mod run;
pub mod serve;
pub mod sweep;
pub mod trace;

use clap::{Parser, Subcommand};

pub use crate::app::{CliError, default_out, print_out, same_file, shown};

/// pdsim — a deterministic simulator of prefill/decode-disaggregated LLM serving.
#[derive(Parser, Debug)]
#[command(name = "pdsim", version, about, long_about = None)]
pub struct Cli {
    /// The verb.
    #[command(subcommand)]
    pub command: Command,
}

/// Verbs.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one scenario and write its results.
    Run(run::RunArgs),
    /// Inspect a request trace.
    Trace(trace::TraceArgs),
    /// Print the KV and state regions one rank registers (sglang's kv_args).
    Layout(layout::LayoutArgs),
    /// Run scenarios with an [expect] table and check it (exit 1 when any expectation fails).
    Check(check::CheckArgs),
    /// Explain a run (a results folder, or a scenario it runs first): what failed, why, where
    /// in sglang, who was hurt, and the flags that fix it.
    Explain(explain::ExplainArgs),
    /// Predict a prefill/decode pair's outcome from two `sglang.launch_server` command lines.
    Lint(lint::LintArgs),
    /// Fit the step-time model to measurements and write a calibration file.
    Calibrate(calibrate::CalibrateArgs),
    /// Run a grid of scenario values × seeds in parallel (summary only per point).
    Sweep(sweep::SweepArgs),
    /// Join the shards of a sweep (`pdsim sweep --shard I/N`).
    Merge(merge::MergeArgs),
    /// The cheapest grid point meeting [slo] at a rate, or each point's highest rate.
    Plan(plan::PlanArgs),
    /// A local web app: the one-line question as a form, a scenario editor, the reports.
    Serve(serve::ServeArgs),
}

/// Runs the parsed command.
pub fn dispatch(cli: Cli) -> Result<(), CliError> {
    match cli.command {
        Command::Run(args) => crate::app::run::run(&args.request()).map(|_| ()),
        Command::Trace(args) => trace::run(&args),
        Command::Layout(args) => crate::app::layout::run(&args.request()),
        Command::Check(args) => match check::run(&args)? {
            true => Ok(()),
            false => Err(CliError::Failed(
                "check failed: at least one expectation did not hold (see above)".into(),
            )),
        },
        Command::Explain(args) => crate::app::explain::run(&args.request()),
        Command::Lint(args) => lint::run(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Sweep(args) => crate::app::sweep::run(&args.request()),
        Command::Merge(args) => merge::run(&args),
        Command::Plan(args) => crate::app::plan::run(&args.request()),
        Command::Serve(args) => crate::app::serve::run(&args.request()?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command line makes the application layer's request from every flag it parses.
    #[test]
    fn flags_become_the_verbs_request() {
        let run = |argv: &[&str]| Cli::try_parse_from(argv).expect("parses").command;
        let Command::Run(a) = run(&[
            "pdsim",
            "run",
            "s.toml",
            "--seed",
            "7",
            "--out",
            "o",
            "--set",
            "run.name=x",
            "-q",
            "--summary-only",
        ]) else {
            panic!("not run")
        };
        let r = a.request();
        assert_eq!(r.scenario.path(), std::path::Path::new("s.toml"));
        assert!(matches!(r.scenario, crate::app::Source::File(_)));
        assert_eq!(
            (r.seed, r.out.as_deref(), &r.sets[..]),
            (
                Some(7),
                Some(std::path::Path::new("o")),
                &["run.name=x".to_string()][..]
            )
        );
        assert!(r.quiet && r.summary_only && !r.png && !r.trace_events);
        let Command::Plan(a) = run(&[
            "pdsim",
            "plan",
            "s.toml",
            "--max-rate",
            "--vary",
            "pools.decode.instances=1,2",
            "--seeds",
            "2",
            "--jobs",
            "3",
            "--tolerance",
            "0.05",
            "--resume",
            "--no-early-stop",
        ]) else {
            panic!("not plan")
        };
        let p = a.request();
        assert_eq!(
            (
                p.rate,
                p.max_rate,
                &p.vary[..],
                p.seeds,
                p.jobs,
                p.tolerance
            ),
            (
                None,
                true,
                &["pools.decode.instances=1,2".to_string()][..],
                2,
                Some(3),
                0.05
            )
        );
        assert!(p.resume && p.no_early_stop && !p.full_grid && !p.quiet);
        assert_eq!(p.question, None);
        // The one-line question: every flag reaches it.
        let Command::Plan(a) = run(&[
            "pdsim", "plan", "--model", "m", "--gpu", "g", "--isl", "11", "--osl", "22", "--ttft",
            "33", "--tpot", "44", "--gpus", "55", "--rate", "6",
        ]) else {
            panic!("not plan")
        };
        let p = a.request();
        assert_eq!(
            p.question,
            Some(crate::app::oneline::Question {
                model: "m".into(),
                gpu: "g".into(),
                isl: 11,
                osl: 22,
                ttft_ms: 33.0,
                tpot_ms: 44.0,
                gpus: 55,
            })
        );
        assert_eq!(p.rate, Some(6.0));
        let Command::Layout(a) = run(&[
            "pdsim",
            "layout",
            "--model",
            "m",
            "--tp",
            "4",
            "--page-size",
            "64",
            "--rank",
            "2",
        ]) else {
            panic!("not layout")
        };
        let l = a.request();
        assert_eq!(
            (l.model.as_str(), l.tp, l.page_size, l.rank),
            ("m", 4, 64, 2)
        );
    }

    /// The two faces of the verbs stand side by side on the application layer: the Python API
    /// (and its binding) never names the command line's types, and the command line never
    /// calls the API.
    #[test]
    fn neither_face_builds_the_others_types() {
        for (name, text) in [
            ("src/api.rs", include_str!("../api.rs")),
            ("python/src/lib.rs", include_str!("../../python/src/lib.rs")),
        ] {
            assert!(
                !text.contains(concat!("crate::", "cli"))
                    && !text.contains(concat!("pdsim::", "cli")),
                "{name} names the command line"
            );
        }
        for (name, text) in [
            ("src/cli/mod.rs", include_str!("mod.rs")),
            ("src/cli/run.rs", include_str!("run.rs")),
            ("src/cli/sweep.rs", include_str!("sweep.rs")),
            ("src/cli/plan.rs", include_str!("plan.rs")),
            ("src/cli/check.rs", include_str!("check.rs")),
            ("src/cli/merge.rs", include_str!("merge.rs")),
            ("src/cli/serve.rs", include_str!("serve.rs")),
        ] {
            assert!(
                !text.contains(concat!("crate::", "api")),
                "{name} calls the Python API"
            );
        }
    }
}
