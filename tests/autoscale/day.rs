//! Pools that change size in a run (issue 38, items 2 and 5): the fleet's events and its bill
//! agree, every request is counted once across starts and drains, a run repeats to the byte,
//! cold-start time moves attainment, a live role switch flips in place, and on a diurnal day
//! the SLA planner holds fewer GPU-hours than the static peak at the same `[slo]`.

use super::common::*;
use pdsim::metrics::summary::{AutoscalingSummary, Summary};

/// `scenario` run as `pdsim run --summary-only` would (a day's rows are half a gigabyte).
fn summary_only(scenario: &str, dir: &std::path::Path) -> Summary {
    let sc = pdsim::scenario::load(&repo().join(scenario), &[]).unwrap();
    pdsim::app::run::run_summary_only(&sc, dir, false)
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

fn scaling(s: &Summary) -> &AutoscalingSummary {
    s.autoscaling
        .as_ref()
        .expect("a resizing run has `autoscaling`")
}

fn conserved(s: &Summary, what: &str) {
    let c = &s.requests;
    assert_eq!(
        c.arrived,
        c.completed + c.failed + c.corrupted + c.unfinished + c.aborted,
        "{what}: {c:?}"
    );
}

/// GPU-hours from the events alone: `initial` GPUs held from the start, each event moving what
/// is held (a launch or a switch into a pool adds the instance's GPUs, a removal, a failed or
/// cancelled start takes them away; a switch's drained server leaves as its flip arrives),
/// integrated to `end_s`.
fn gpu_hours_from_events(a: &AutoscalingSummary, initial: f64, gpus: f64, end_s: f64) -> f64 {
    let (mut held, mut since, mut gpu_s) = (initial, 0.0, 0.0);
    for e in &a.events {
        let delta = match e.kind.as_str() {
            "cold_start" => gpus,
            "removed" | "start_failed" | "start_cancelled" => -gpus,
            // The flipped server keeps its GPUs: it leaves one pool as it enters the other.
            _ => 0.0,
        };
        gpu_s += held * (e.at_s - since);
        since = e.at_s;
        held += delta;
    }
    (gpu_s + held * (end_s - since)) / 3600.0
}

#[test]
fn a_resizing_run_conserves_every_request_bills_its_events_and_repeats_to_the_byte() {
    let (a, b) = (tmpdir("ramp-a"), tmpdir("ramp-b"));
    let s = run("scenarios/autoscale/ramp-threshold.toml", &[], &a);
    let again = run("scenarios/autoscale/ramp-threshold.toml", &[], &b);
    conserved(&s, "ramp");
    for f in ["summary.json", "requests.csv", "timeseries.csv"] {
        assert_eq!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f} differs between two runs of one seed"
        );
    }
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    let x = scaling(&s);
    assert!(x.cold_starts >= 2 && x.drains >= 1, "{x:?}");
    // Every launch ends ready (or failed, or cancelled) one cold start later: 8.03 GB a GPU at
    // 1.7 GiB/s is 4.4 s, 12 s of graphs, admitted at the router's 30-s check.
    for (i, e) in x.events.iter().enumerate() {
        if e.kind == "cold_start" {
            let end = x.events[i..]
                .iter()
                .find(|f| f.instance == e.instance && f.kind != "cold_start")
                .expect("a start ends");
            assert_eq!(end.kind, "ready", "{e:?} → {end:?}");
            assert_eq!(end.at_s - e.at_s, 30.0, "{e:?} → {end:?}");
        }
    }
    // The bill is the events' integral: 1 P + 1 D at 2 GPUs each to start.
    let by_hand = gpu_hours_from_events(x, 4.0, 2.0, s.sim.simulated_s);
    println!(
        "ramp: {} cold starts, {} drains, {:.4} GPU-h (from the events {by_hand:.4}), cost ${:.2}, attainment {:.4}",
        x.cold_starts,
        x.drains,
        x.gpu_hours,
        x.cost_usd.unwrap(),
        s.slo.attainment.unwrap_or(f64::NAN)
    );
    assert!(
        (x.gpu_hours - by_hand).abs() < 1e-6,
        "{} vs {by_hand}",
        x.gpu_hours
    );
    assert!((x.cost_usd.unwrap() - 2.0 * x.gpu_hours).abs() < 1e-9);
    // `timeseries.csv`'s pool sizes follow the events: each second's serving count is the
    // initial one plus the instances that became ready, less those drained, by then. At the
    // second itself: a start's end was scheduled at its launch, so it is in that second's row;
    // the fleet's look at the second (a drain) comes after the row (its event was scheduled
    // after the second's sampler tick).
    let rows = read_csv(&a.join("timeseries.csv"));
    let serving_at = |pool: &str, t: f64| {
        let mut n: i64 = 1;
        for e in x.events.iter().filter(|e| e.pool == pool) {
            match e.kind.as_str() {
                "ready" if e.at_s <= t => n += 1,
                "drain" if e.at_s < t => n -= 1,
                _ => {}
            }
        }
        n as u64
    };
    let mut checked = 0;
    for r in rows.iter().filter(|r| r["instance"] == "0") {
        let t = num(r, "second").unwrap() as f64;
        assert_eq!(
            num(r, "prefill_instances"),
            Some(serving_at("prefill", t)),
            "{r:?}"
        );
        assert_eq!(
            num(r, "decode_instances"),
            Some(serving_at("decode", t)),
            "{r:?}"
        );
        checked += 1;
    }
    assert!(checked > 2000, "{checked} seconds");
    // A slot that never started says so, and requests only ever reach a serving instance.
    let states: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["state"].as_str()).collect();
    assert!(
        states.contains("off") && states.contains("serving"),
        "{states:?}"
    );
    for r in &rows {
        if r["state"] == "off" || r["state"] == "starting" {
            assert_eq!(num(r, "arrivals"), Some(0), "{r:?}");
        }
    }
}

#[test]
fn a_failure_during_a_scale_up_fails_the_start_and_loses_nothing() {
    let dir = tmpdir("scale-up-failure");
    let s = run("scenarios/autoscale/scale-up-failure.toml", &[], &dir);
    conserved(&s, "scale-up failure");
    let x = scaling(&s);
    assert_eq!(x.starts_failed, 1, "{:?}", x.events);
    let failed = x.events.iter().find(|e| e.kind == "start_failed").unwrap();
    // Launched at 480 s, crashed at 495 s, due at 510 s: the start fails then, and the
    // crashed-and-restarted server never joins the router's set on its own.
    assert_eq!(
        (failed.pool.as_str(), failed.slot, failed.at_s),
        ("prefill", 2, 510.0)
    );
    let relaunch = x
        .events
        .iter()
        .find(|e| e.kind == "cold_start" && e.at_s > 510.0 && e.pool == "prefill")
        .expect("the policy launches again");
    println!(
        "start failed at {} s, relaunched at {} s; {} GPU-h, attainment {:.4}",
        failed.at_s,
        relaunch.at_s,
        x.gpu_hours,
        s.slo.attainment.unwrap_or(f64::NAN)
    );
    let rows = read_csv(&dir.join("timeseries.csv"));
    for r in rows.iter().filter(|r| r["instance"] == "2") {
        let t = num(r, "second").unwrap() as f64;
        if t > 510.0 && t < relaunch.at_s {
            assert_eq!(r["state"], "off", "{r:?}");
            assert_eq!(num(r, "arrivals"), Some(0), "{r:?}");
        }
    }
}

#[test]
fn cold_start_time_shifts_attainment() {
    let dir = tmpdir("startup-sweep");
    let mut seen = Vec::new();
    for startup in [0, 120, 600] {
        let set = format!("autoscaler.startup_s={startup}");
        let s = run("scenarios/autoscale/ramp-threshold.toml", &[&set], &dir);
        conserved(&s, &set);
        let x = scaling(&s);
        let att = s.slo.attainment.unwrap();
        println!(
            "startup {startup:>4} s: attainment {att:.4}, TTFT p99 {:.0} ms, {:.3} GPU-h, {} cold starts",
            s.latency_ms.ttft.p99.unwrap_or(f64::NAN),
            x.gpu_hours,
            x.cold_starts
        );
        // A start's end is the stated start-up rounded up to the router's 30-s check.
        let first = x
            .events
            .iter()
            .position(|e| e.kind == "cold_start")
            .unwrap();
        let ready = x.events[first..]
            .iter()
            .find(|e| e.kind == "ready")
            .unwrap();
        let want = (startup as f64 / 30.0).ceil() * 30.0;
        assert_eq!(ready.at_s - x.events[first].at_s, want, "{set}");
        seen.push(att);
    }
    assert!(
        seen[0] > seen[2] + 0.02,
        "a 600-s start-up must cost attainment: {seen:?}"
    );
}

#[test]
fn a_role_switch_flips_in_place_holds_fewer_gpu_hours_and_serves_first_when_weights_load_slowly() {
    let (a, b) = (tmpdir("switch"), tmpdir("cold"));
    let sw = run("scenarios/autoscale/mix-shift-role-switch.toml", &[], &a);
    let cold = run("scenarios/autoscale/mix-shift-cold-start.toml", &[], &b);
    conserved(&sw, "role switch");
    conserved(&cold, "cold start");
    let (x, y) = (scaling(&sw), scaling(&cold));
    assert!(x.role_switches >= 1, "{:?}", x.events);
    assert_eq!(y.role_switches, 0);
    assert!(
        x.cold_starts < y.cold_starts,
        "{} vs {}",
        x.cold_starts,
        y.cold_starts
    );
    // The flip lands on the other pool with no weight reload: becoming prefill it captures no
    // decode graphs, so the router's next check admits it.
    for (i, e) in x
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == "role_switch")
    {
        let ready = x.events[i..]
            .iter()
            .find(|f| f.instance == e.instance && f.kind == "ready")
            .unwrap();
        assert!(ready.at_s - e.at_s <= 30.0, "{e:?} → {ready:?}");
    }
    // When the pool that grows gets its new instance: after a drain, or after a cold start.
    let joined = |s: &AutoscalingSummary| {
        s.events
            .iter()
            .find(|e| e.kind == "ready" && e.pool == "prefill" && e.at_s > 1200.0)
            .map(|e| e.at_s)
    };
    println!(
        "role switch: {:.3} GPU-h, new prefill serving at {:?} s, attainment {:.4}; cold start: {:.3} GPU-h, at {:?} s, attainment {:.4}",
        x.gpu_hours,
        joined(x),
        sw.slo.attainment.unwrap_or(f64::NAN),
        y.gpu_hours,
        joined(y),
        cold.slo.attainment.unwrap_or(f64::NAN)
    );
    assert!(
        x.gpu_hours < y.gpu_hours,
        "a flip holds no second set of GPUs while it starts: {} vs {}",
        x.gpu_hours,
        y.gpu_hours
    );
    // A flip waits for its drain, a cold start for the weights: from storage twenty times
    // slower (0.05 GB/s a GPU: 35.3 GB in 706 s, plus the graphs, admitted at 720 s) the flip
    // serves first and fails fewer requests.
    let slow = ["autoscaler.weight_load_gb_per_s=0.05"];
    let (c, d) = (tmpdir("switch-slow"), tmpdir("cold-slow"));
    let sw = run("scenarios/autoscale/mix-shift-role-switch.toml", &slow, &c);
    let cold = run("scenarios/autoscale/mix-shift-cold-start.toml", &slow, &d);
    conserved(&sw, "role switch, slow storage");
    conserved(&cold, "cold start, slow storage");
    let (x, y) = (scaling(&sw), scaling(&cold));
    let (tx, ty) = (joined(x).unwrap(), joined(y).unwrap());
    println!(
        "slow storage: role switch serves at {tx} s ({} failed, {:.3} GPU-h); cold start at {ty} s ({} failed, {:.3} GPU-h)",
        sw.requests.failed, x.gpu_hours, cold.requests.failed, y.gpu_hours
    );
    assert!(tx < ty, "{tx} vs {ty}");
    assert!(sw.requests.failed < cold.requests.failed);
    assert!(x.gpu_hours < y.gpu_hours);
}

#[test]
fn on_a_diurnal_day_the_planner_holds_fewer_gpu_hours_than_static_peak_at_the_same_slo() {
    let (a, b) = (tmpdir("day-peak"), tmpdir("day-planner"));
    let peak = summary_only("scenarios/autoscale/day-static-peak.toml", &a);
    let planner = summary_only("scenarios/autoscale/day-sla-planner.toml", &b);
    conserved(&peak, "static peak");
    conserved(&planner, "planner");
    assert!(
        peak.requests.arrived > 1_000_000,
        "{}",
        peak.requests.arrived
    );
    assert_eq!(
        peak.requests.arrived, planner.requests.arrived,
        "the same day"
    );
    let static_gpu_h = f64::from(peak.cluster.gpus) * peak.sim.simulated_s / 3600.0;
    let x = scaling(&planner);
    println!(
        "static peak: {static_gpu_h:.1} GPU-h, attainment {:.4}; SLA planner: {:.1} GPU-h ({} cold starts, {} drains), attainment {:.4}",
        peak.slo.attainment.unwrap(),
        x.gpu_hours,
        x.cold_starts,
        x.drains,
        planner.slo.attainment.unwrap()
    );
    // Both meet `[slo]` (attainment_min 0.95); the planner on fewer GPU-hours.
    assert!(
        peak.slo.met == Some(true) && planner.slo.met == Some(true),
        "{:?} / {:?}",
        peak.slo,
        planner.slo
    );
    assert!(
        x.gpu_hours < 0.8 * static_gpu_h,
        "{} vs {static_gpu_h}",
        x.gpu_hours
    );
}

#[test]
fn a_sweep_of_a_resizing_scenario_is_the_same_bytes_on_any_number_of_threads() {
    let (a, b) = (tmpdir("sweep-1"), tmpdir("sweep-2"));
    let sweep = |jobs: &str, dir: &std::path::Path| {
        let (code, _, err) = pdsim(&[
            "sweep",
            "scenarios/autoscale/ramp-threshold.toml",
            "--vary",
            "autoscaler.startup_s=0,90",
            "--seeds",
            "2",
            "--jobs",
            jobs,
            "-q",
            "--out",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        std::fs::read(dir.join("sweep.csv")).unwrap()
    };
    let one = sweep("1", &a);
    assert_eq!(one, sweep("2", &b), "sweep.csv differs with --jobs 2");
    // Each row's cost per hour is the GPU-hours it held, priced, over the run's hours.
    let rows = read_csv(&a.join("sweep.csv"));
    assert_eq!(rows.len(), 4);
    let hours: Vec<f64> = rows
        .iter()
        .map(|r| r["usd_per_hour"].parse().unwrap())
        .collect();
    assert!(
        hours.iter().all(|h| *h > 0.0 && *h < 2.0 * 16.0),
        "{hours:?}"
    );
}

#[test]
fn plan_compares_policy_settings_by_what_their_gpu_hours_cost() {
    let dir = tmpdir("plan-policies");
    let (code, out, err) = pdsim(&[
        "plan",
        "scenarios/autoscale/ramp-threshold.toml",
        "--rate",
        "60",
        "--vary",
        "autoscaler.max_replicas=3,4",
        "--vary",
        "autoscaler.startup_s=0,300",
        "--set",
        "slo.attainment_min=0.7",
        "--seeds",
        "1",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    // Every point ran (their cost is known only after the run), and the answer is the one
    // meeting [slo] whose GPU-hours cost least.
    let rows = read_csv(&dir.join("sweep.csv"));
    assert_eq!(rows.len(), 4, "{out}");
    let cheapest = rows
        .iter()
        .filter(|r| r["slo_met"] == "true")
        .min_by(|a, b| {
            let (x, y): (f64, f64) = (
                a["usd_per_hour"].parse().unwrap(),
                b["usd_per_hour"].parse().unwrap(),
            );
            x.total_cmp(&y)
        })
        .expect("a point meets [slo]");
    let want = format!(
        "autoscaler.max_replicas={} autoscaler.startup_s={}",
        cheapest["autoscaler.max_replicas"], cheapest["autoscaler.startup_s"]
    );
    println!("{out}");
    assert!(out.contains(&want), "{want} not the answer:\n{out}");
    // Without a price there is nothing to rank by: exit 2 naming the key.
    let text = std::fs::read_to_string(repo().join("scenarios/autoscale/ramp-threshold.toml"))
        .unwrap()
        .replace("usd_per_gpu_hour = 2.0\n", "");
    let unpriced = dir.join("unpriced.toml");
    std::fs::write(&unpriced, text).unwrap();
    let (code, _, err) = pdsim(&[
        "plan",
        unpriced.to_str().unwrap(),
        "--rate",
        "60",
        "--vary",
        "autoscaler.max_replicas=3,4",
        "--seeds",
        "1",
        "--out",
        dir.join("unpriced").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("hardware.usd_per_gpu_hour"), "{err}");
}
