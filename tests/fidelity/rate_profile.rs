//! Time-varying traffic (issue 38, item 1): `workload.arrival.rate_profile` moves any process's
//! rate over the run. Each test derives what must come out from the profile's definition
//! (`src/config/rate_profile.rs`) and prints the rows it compares.

use crate::common;

/// Arrival times, s, of a run's requests.
fn arrivals(dir: &std::path::Path) -> Vec<f64> {
    common::read_csv(&dir.join("requests.csv"))
        .iter()
        .map(|r| common::num(r, "arrival_ns").expect("arrival_ns") as f64 / 1e9)
        .collect()
}

/// The diurnal factor as the docs define it.
fn diurnal(t: f64, period: f64, peak: f64, trough: f64) -> f64 {
    trough + (1.0 - trough) * (1.0 + (std::f64::consts::TAU * (t - peak) / period).cos()) / 2.0
}

/// Poisson arrivals under a diurnal profile: each 10-second bin holds about `rate · ∫ factor`
/// requests. Over 48 bins the squared deviations in units of the expected count (a χ² with 48
/// degrees of freedom, mean 48) stay below 96; a profile applied backwards, shifted by a
/// quarter period or ignored puts it in the thousands. The peak bins hold ~8× the troughs'.
#[test]
fn poisson_arrivals_follow_a_diurnal_profile() {
    let dir = common::tmpdir("rate-profile-diurnal");
    let (rate, period, peak, trough) = (10.0, 120.0, 30.0, 0.1);
    let s = common::run(
        "scenarios/quickstart.toml",
        &[
            "run.duration_s=480",
            "workload.arrival={ process = \"poisson\", rate_per_s = 10.0, rate_profile = { shape = \"diurnal\", period_s = 120, peak_s = 30, trough = 0.1 } }",
        ],
        &dir,
    );
    let a = arrivals(&dir);
    assert_eq!(s.requests.arrived as usize, a.len());
    let mut chi2 = 0.0;
    let (mut peak_n, mut trough_n) = (0usize, 0usize);
    for b in 0..48 {
        let (lo, hi) = (b as f64 * 10.0, b as f64 * 10.0 + 10.0);
        let n = a.iter().filter(|&&t| t >= lo && t < hi).count();
        // ∫ factor over the bin, by the midpoint rule on 1 s steps (the cosine's error there
        // is far below a count).
        let want: f64 = (0..10)
            .map(|k| rate * diurnal(lo + k as f64 + 0.5, period, peak, trough))
            .sum();
        chi2 += (n as f64 - want).powi(2) / want;
        if (lo % period - peak).abs() < 6.0 {
            peak_n += n;
        }
        if (lo % period - (peak + period / 2.0)).abs() < 6.0 {
            trough_n += n;
        }
        println!("{lo:>5.0}–{hi:<5.0} s  arrivals {n:>4}  expected {want:>6.1}");
    }
    println!("χ² over 48 bins: {chi2:.1}; peak bins {peak_n}, trough bins {trough_n}");
    assert!(
        chi2 < 96.0,
        "χ² {chi2:.1}: the arrivals do not follow the profile"
    );
    assert!(peak_n > 5 * trough_n, "peak {peak_n} vs trough {trough_n}");
}

/// A factor of 1 everywhere is the process itself: the same arrivals draw for draw, so every
/// result file is byte-identical to the run without a profile; and a constant process under a
/// step profile with a pause has no arrival in the pause and twice the rate where the factor
/// is 2 (its gaps are the process's in operational time, so exact).
#[test]
fn a_unit_profile_changes_nothing_and_steps_are_exact() {
    let plain = common::tmpdir("rate-profile-none");
    let unit = common::tmpdir("rate-profile-unit");
    common::run("scenarios/quickstart.toml", &[], &plain);
    common::run(
        "scenarios/quickstart.toml",
        &[
            "workload.arrival={ process = \"poisson\", rate_per_s = 10.0, rate_profile = { shape = \"piecewise\", at_s = [0], factor = [1.0] } }",
        ],
        &unit,
    );
    for f in ["summary.json", "requests.csv", "timeseries.csv"] {
        let (a, b) = (
            std::fs::read(plain.join(f)).unwrap(),
            std::fs::read(unit.join(f)).unwrap(),
        );
        assert!(a == b, "{f} differs under a factor of 1");
    }
    let dir = common::tmpdir("rate-profile-steps");
    common::run(
        "scenarios/quickstart.toml",
        &[
            "run.duration_s=60",
            "workload.arrival={ process = \"constant\", rate_per_s = 5.0, rate_profile = { shape = \"piecewise\", at_s = [0, 20, 40], factor = [1.0, 0.0, 2.0] } }",
        ],
        &dir,
    );
    let a = arrivals(&dir);
    let count = |lo: f64, hi: f64| a.iter().filter(|&&t| t >= lo && t < hi).count();
    println!(
        "constant 5/s, factors 1 | 0 | 2: {} | {} | {} arrivals",
        count(0.0, 20.0),
        count(20.0, 40.0),
        count(40.0, 60.0)
    );
    // Operational gaps of 0.2 s: arrivals at 0.2 … 19.8 s; the 100th (operational 20 s) at
    // the pause's first instant, where Λ first reaches it; operational time then stands still
    // until 40 s and runs twice as fast after, so operational 20.2 … 59.8 s (199 of them)
    // land at 40.1 … 59.9 s.
    assert_eq!(count(0.0, 20.0), 99);
    assert_eq!(
        count(20.0, 40.0),
        1,
        "only the arrival at the pause's first instant"
    );
    assert_eq!(count(40.0, 60.0), 199);
}

/// A trace's own counts shape the day: the trace here has 10 arrivals in its first 10 s and
/// 30 in its next 10 s; as a profile of 10-second bins stretched to 200 s, a constant process
/// at a mean of 4/s sends 2/s for the first 100 s and 6/s for the next 100.
#[test]
fn a_trace_profile_follows_the_traces_counts() {
    let dir = common::tmpdir("rate-profile-trace");
    let data = common::repo().join("tests/data/rate_profile/two-rates.csv");
    let set = format!(
        "workload.arrival={{ process = \"constant\", rate_per_s = 4.0, rate_profile = {{ shape = \"trace\", path = \"{}\", bin_s = 10, span_s = 200 }} }}",
        data.display()
    );
    common::run(
        "scenarios/quickstart.toml",
        &["run.duration_s=200", &set],
        &dir,
    );
    let a = arrivals(&dir);
    let first = a.iter().filter(|&&t| t < 100.0).count();
    let second = a.iter().filter(|&&t| t >= 100.0).count();
    println!("trace-shaped constant 4/s: {first} in 0–100 s, {second} in 100–200 s");
    assert!((199..=200).contains(&first), "{first}");
    assert!((599..=601).contains(&second), "{second}");
}

/// Sessions start as the profile says (their later turns follow think time): with the
/// profile's second half at factor 0, no session starts there.
#[test]
fn session_starts_follow_the_profile() {
    let dir = common::tmpdir("rate-profile-sessions");
    common::run(
        "tests/scenarios/one-session.toml",
        &[
            "run.duration_s=40",
            "run.max_requests=100000",
            "workload.arrival={ process = \"poisson\", rate_per_s = 2.0, rate_profile = { shape = \"piecewise\", at_s = [0, 20], factor = [1.0, 0.0] } }",
        ],
        &dir,
    );
    let rows = common::read_csv(&dir.join("requests.csv"));
    let starts = rows
        .iter()
        .filter(|r| r.get("turn").map(String::as_str) == Some("0"));
    let late: Vec<u64> = starts
        .filter_map(|r| common::num(r, "arrival_ns"))
        .filter(|&t| t >= 20_000_000_000)
        .collect();
    println!("first turns after 20 s: {}", late.len());
    assert!(late.is_empty(), "{late:?}");
}

/// `explain` says where a moving rate peaks: on the compressed day (peak at 840 s of a
/// 1,440 s period, 24 req/s), the busiest of 24 one-minute windows is the one at the peak,
/// at about the peak rate, against a mean of `24 · (1 + 0.2) / 2 = 14.4`; a run whose rate does
/// not move has no such paragraph.
#[test]
fn explain_names_the_busiest_window_of_a_moving_rate() {
    let dir = common::tmpdir("rate-profile-explain");
    common::run("scenarios/traffic/diurnal-day.toml", &[], &dir);
    let text = pdsim::diagnose::explain::explain_dir(&dir, false).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("The arrival rate moves over the run"))
        .unwrap_or_else(|| panic!("no busiest-window paragraph:\n{text}"));
    println!("{line}");
    let num = |after: &str| -> f64 {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (from, peak, mean) = (num("span ("), num("took "), num("against "));
    assert!((810.0..=870.0).contains(&from), "window from {from} s");
    assert!((21.0..=27.0).contains(&peak), "peak {peak} req/s");
    assert!((13.5..=15.3).contains(&mean), "mean {mean} req/s");
    let flat = common::tmpdir("rate-profile-explain-flat");
    common::run("scenarios/quickstart.toml", &[], &flat);
    let text = pdsim::diagnose::explain::explain_dir(&flat, false).unwrap();
    assert!(!text.contains("The arrival rate moves"), "{text}");
}

/// `plan --rate` on a profiled workload says what its rate is (the process's, multiplied by
/// the profile over the run) and the profile's largest factor; a flat workload's plan does not.
#[test]
fn plan_says_what_the_rate_of_a_profile_is() {
    let out = common::tmpdir("rate-profile-plan");
    let (code, stdout, stderr) = common::pdsim(&[
        "plan",
        "scenarios/traffic/diurnal-day.toml",
        "--rate",
        "20",
        "--vary",
        "pools.prefill.instances=1,2",
        "--seeds",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("rate profile multiplies"))
        .unwrap_or_else(|| panic!("no line on the rate:\n{stdout}"));
    println!("{line}");
    assert!(line.contains("largest factor 1.000"), "{line}");
    let flat = common::tmpdir("rate-profile-plan-flat");
    let (code, stdout, stderr) = common::pdsim(&[
        "plan",
        "scenarios/quickstart.toml",
        "--rate",
        "5",
        "--vary",
        "pools.prefill.instances=2",
        "--seeds",
        "1",
        "--set",
        "run.duration_s=10",
        "--out",
        flat.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("rate profile"), "{stdout}");
}
