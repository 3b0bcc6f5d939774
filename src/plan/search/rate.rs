//! The arrival rate a plan sets: its `--set` key in the scenario ([`rate_key`]), a rate written
//! so TOML reads the same number back ([`rate_value`]), and the highest rate a plan goes to
//! ([`MAX_PLAN_RATE`]). Shared by both searches and by `app::plan`.

use crate::plan::error::PlanError;
use crate::plan::run::Base;

/// The `--set` key that gives a scenario's arrival rate: the synthetic arrival's or the trace's
/// `rate_per_s`. A rate schedule has no single rate to set.
pub fn rate_key(base: &Base) -> Result<&'static str, PlanError> {
    use crate::scenario::file::NoSingleRate;
    let at = |key: &str, message: String| {
        PlanError::Scenario(crate::scenario::ScenarioError {
            file: base.path.clone(),
            line: None,
            key: key.into(),
            message,
        })
    };
    base.file.workload.rate_key().map_err(|why| match why {
        NoSingleRate::Process(p) => at(
            "workload.arrival.process",
            format!(
                "{p:?} has no single rate for --rate or --max-rate to set; use poisson, constant, gamma, on_off or a trace"
            ),
        ),
        NoSingleRate::Missing => at(
            "workload",
            "the workload has no arrival rate to set (workload.arrival or workload.trace)".into(),
        ),
    })
}

/// The highest arrival rate a plan asks about or searches to, requests/s: one arrival per
/// nanosecond, the simulated clock's resolution (a faster rate is the same run).
pub const MAX_PLAN_RATE: f64 = 1e9;

/// A rate as a `--set` value that parses back to the same number as a TOML float (`14.0`,
/// `1e19`): Rust's `{:?}` of an `f64` is the shortest round-trip form and always has a `.` or
/// an exponent, where `{}` would write `10000000000000000000`, an integer TOML cannot hold.
pub fn rate_value(r: f64) -> String {
    format!("{r:?}")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::scenario;

    /// `--rate` sets the typed workload's rate key; a schedule has none, and the error names
    /// `workload.arrival.process`.
    #[test]
    fn the_rate_key_comes_from_the_typed_workload() {
        let dir = std::env::temp_dir().join(format!("pdsim-ratekey-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let quick = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml"),
        )
        .unwrap();
        let path = dir.join("q.toml");
        std::fs::write(&path, &quick).unwrap();
        let base = Base::load(&path).unwrap();
        assert_eq!(rate_key(&base).unwrap(), "workload.arrival.rate_per_s");
        let mut sched = base.clone();
        sched.file.workload.arrival = Some(scenario::ArrivalSection::Schedule {
            steps: vec![],
            rate_profile: None,
        });
        let e = rate_key(&sched).unwrap_err();
        assert_eq!(e.key().as_deref(), Some("workload.arrival.process"));
        assert!(
            e.to_string().contains("\"schedule\" has no single rate"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
