//! Multi-turn sessions (`docs/sglang-pd.md` §23): every turn's prefix hit and arrival derived by
//! hand from the session's structure, the decode offload's answer blocks reaching the next
//! turn through the store, closed-loop trace replay of session ids, determinism, and bad input.
//!
//! `cargo test --release --test sglang sessions -- --nocapture` prints each turn's expected and
//! simulated hit.

use crate::common;
use common::*;

const ONE: &str = "tests/scenarios/one-session.toml";

/// The turns of the one-session scenario: prompt `n_k = 1000 + 500 k`, output 300.
fn prompt(k: u64) -> u64 {
    1000 + 500 * k
}

/// Rows of the session's turns, in id order.
fn turns(dir: &std::path::Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let rows = read_csv(&dir.join("requests.csv"));
    assert_eq!(rows.len(), 6, "one session of six turns");
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(num(r, "session_id"), Some(0));
        assert_eq!(num(r, "turn"), Some(k as u64));
        assert_eq!(num(r, "input_tokens"), Some(prompt(k as u64)));
        assert_eq!(r["outcome"], "completed");
    }
    rows
}

/// Checks every turn's `cached_tokens` against `expect(k)` and the summary's hit share by turn
/// and overall against the same numbers; prints the table.
fn check_hits(
    s: &pdsim::report::Summary,
    rows: &[std::collections::BTreeMap<String, String>],
    expect: impl Fn(u64) -> u64,
) {
    let x = s.sessions.as_ref().expect("a sessions summary");
    let (mut saved, mut all) = (0, 0);
    println!("turn  prompt  expected hit  simulated hit");
    for (k, r) in rows.iter().enumerate() {
        let k = k as u64;
        let want = expect(k);
        let got = num(r, "cached_tokens").expect("admitted");
        println!("{k:>4}  {:>6}  {want:>12}  {got:>13}", prompt(k));
        assert_eq!(got, want, "turn {k}");
        saved += want;
        all += prompt(k);
        let t = &x.by_turn[k as usize];
        assert_eq!(t.cached_tokens, want);
        assert_eq!(t.hit_share, Some(want as f64 / prompt(k) as f64));
    }
    assert_eq!(x.prefill_tokens_saved, saved);
    assert_eq!(x.hit_share, Some(saved as f64 / all as f64));
    assert_eq!((x.started, x.completed, x.failed, x.cut), (1, 1, 0, 0));
    assert_eq!(x.turns, 6);
}

/// Without a decode offload the prefill holds only prompts (in PD it never sees the answer):
/// turn k hits the previous prompt's full 512-token blocks, `512 ⌊n₍ₖ₋₁₎ / 512⌋`.
#[test]
fn a_turn_hits_the_previous_prompts_full_blocks() {
    let dir = tmpdir("one-session");
    let s = run(ONE, &[], &dir);
    let rows = turns(&dir);
    check_hits(&s, &rows, |k| {
        if k == 0 {
            0
        } else {
            512 * (prompt(k - 1) / 512)
        }
    });
}

/// With HiCache, the store and the decode offload, the store also holds the blocks the
/// previous answer completed: turn k hits `512 ⌊(n₍ₖ₋₁₎ + o − 1) / 512⌋` (the KV of the
/// prompt and all but the last output token), every one of them read back.
#[test]
fn with_the_decode_offload_a_turn_also_hits_the_previous_answer() {
    let dir = tmpdir("one-session-offload");
    let s = run(
        ONE,
        &[
            "pools.prefill.server.enable_hierarchical_cache=true",
            "pools.prefill.server.hicache_storage_backend=\"mooncake\"",
            "pools.prefill.server.hicache_storage_prefetch_policy=\"wait_complete\"",
            "pools.decode.server.disaggregation_decode_enable_offload_kvcache=true",
            "kv_store={ eviction = \"lru\" }",
        ],
        &dir,
    );
    let rows = turns(&dir);
    check_hits(&s, &rows, |k| {
        if k == 0 {
            0
        } else {
            512 * ((prompt(k - 1) + 300 - 1) / 512)
        }
    });
}

/// Closed loop: turn k + 1 arrives exactly the think time (2 s) after turn k ended as the client
/// saw it, and the first turn at the arrival process's first arrival (64 s).
#[test]
fn the_next_turn_arrives_a_think_time_after_the_previous_ended() {
    let dir = tmpdir("one-session-timing");
    run(ONE, &[], &dir);
    let rows = turns(&dir);
    assert_eq!(num(&rows[0], "arrival_ns"), Some(64_000_000_000));
    for w in rows.windows(2) {
        assert_eq!(
            num(&w[1], "arrival_ns").unwrap(),
            num(&w[0], "finish_ns").unwrap() + 2_000_000_000
        );
    }
    // With a longer think time the same turns move by exactly the difference per turn.
    let dir2 = tmpdir("one-session-timing-5s");
    run(
        ONE,
        &["workload.sessions.think_time_s={ dist = \"fixed\", value = 5.0 }"],
        &dir2,
    );
    let rows2 = turns(&dir2);
    for w in rows2.windows(2) {
        assert_eq!(
            num(&w[1], "arrival_ns").unwrap(),
            num(&w[0], "finish_ns").unwrap() + 5_000_000_000
        );
    }
}

/// The context cap: a session ends (`end`) or its prompt is cut to the newest tokens
/// (`truncate`, and then no block of it is reused).
#[test]
fn the_context_cap_ends_or_truncates_a_session() {
    // Turn k needs n_k + 300 ≤ cap: with 2799, turns 0–2 fit (2000 + 300), turn 3 (2500 + 300)
    // does not.
    let dir = tmpdir("one-session-cap");
    let s = run(ONE, &["workload.sessions.max_context_tokens=2799"], &dir);
    let x = s.sessions.unwrap();
    assert_eq!((x.turns, x.completed, x.context_full), (3, 1, 1));
    let dir = tmpdir("one-session-truncate");
    let s = run(
        ONE,
        &[
            "workload.sessions.max_context_tokens=2799",
            "workload.sessions.on_context_full=\"truncate\"",
        ],
        &dir,
    );
    let x = s.sessions.unwrap();
    assert_eq!((x.turns, x.truncated_turns), (6, 3));
    let rows = read_csv(&dir.join("requests.csv"));
    for r in &rows[3..] {
        assert_eq!(num(r, "input_tokens"), Some(2499), "2799 − 300 output");
        assert_eq!(
            num(r, "cached_tokens"),
            Some(0),
            "a slid window reuses nothing"
        );
    }
}

/// A trace with session ids is replayed closed loop: a later turn arrives at
/// max(its time, previous end + think_time_s); rows without hash_ids get the session's ids.
#[test]
fn trace_sessions_replay_closed_loop() {
    let dir = tmpdir("trace-sessions");
    let trace = dir.join("t.csv");
    std::fs::write(
        &trace,
        "arrival_s,input_tokens,output_tokens,session_id,turn\n\
         0.0,1000,300,7,0\n\
         0.05,600,20,9,\n\
         0.1,1500,300,7,1\n\
         30.0,2000,300,7,2\n",
    )
    .unwrap();
    let out = dir.join("out");
    let toml = with_trace(&dir, &trace, "think_time_s = 0.5");
    let s = run(toml.to_str().unwrap(), &["run.duration_s=60"], &out);
    let rows = read_csv(&out.join("requests.csv"));
    assert_eq!(rows.len(), 4);
    // In arrival order: 7/0, 9/0, 7/1, 7/2.
    let by = |sess: u64, turn: u64| {
        rows.iter()
            .find(|r| num(r, "session_id") == Some(sess) && num(r, "turn") == Some(turn))
            .unwrap_or_else(|| panic!("session {sess} turn {turn}"))
    };
    let t0 = by(7, 0);
    let t1 = by(7, 1);
    assert_eq!(
        num(t1, "arrival_ns").unwrap(),
        num(t0, "finish_ns").unwrap() + 500_000_000,
        "recorded at 0.1 s, but never before turn 0 ended + 0.5 s"
    );
    assert_eq!(
        num(by(7, 2), "arrival_ns"),
        Some(30_000_000_000),
        "its own time is later"
    );
    assert_eq!(num(by(9, 0), "arrival_ns"), Some(50_000_000));
    assert_eq!(
        num(t1, "cached_tokens"),
        Some(512),
        "the session's first prompt block"
    );
    let x = s.sessions.unwrap();
    assert_eq!((x.started, x.completed, x.turns), (2, 2, 4));
}

/// The one-session scenario with `[workload]` replaced by a trace (`extra`: more trace keys),
/// written beside the trace.
fn with_trace(dir: &std::path::Path, trace: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let base = std::fs::read_to_string(repo().join(ONE)).unwrap();
    let cut = base.find("[workload]").unwrap();
    let extra = if extra.is_empty() {
        String::new()
    } else {
        format!(", {extra}")
    };
    let toml = dir.join(format!(
        "{}.toml",
        trace.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(
        &toml,
        format!(
            "{}[workload]\ntrace = {{ path = \"{}\"{extra} }}\n",
            &base[..cut],
            trace.display()
        ),
    )
    .unwrap();
    toml
}

/// Malformed session fields name the file, the line and the field.
#[test]
fn bad_session_fields_name_file_line_and_field() {
    let dir = tmpdir("trace-sessions-bad");
    for (name, body, want) in [
        (
            "id.csv",
            "arrival_s,input_tokens,output_tokens,session_id\n0,10,1,3\n1,10,1,x\n",
            ["id.csv:3:", "session_id", "non-negative integer"],
        ),
        (
            "order.csv",
            "arrival_s,input_tokens,output_tokens,session_id,turn\n0,10,1,3,0\n1,10,1,3,2\n",
            ["order.csv:3:", "turn", "line 2"],
        ),
        (
            "first.jsonl",
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": 4, \"turn\": 1}\n",
            ["first.jsonl:1:", "turn", "first row of session 4"],
        ),
        (
            "orphan.jsonl",
            "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1], \"turn\": 0}\n",
            ["orphan.jsonl:1:", "turn", "session_id"],
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let toml = with_trace(&dir, &p, "");
        let (code, _, err) = pdsim(&["run".as_ref(), toml.as_os_str(), "-q".as_ref()]);
        assert_eq!(code, 2, "{name}: {err}");
        for w in want {
            assert!(err.contains(w), "{name}: {err}\n  should name {w:?}");
        }
        assert!(err.contains(&p.display().to_string()), "{name}: {err}");
    }
}

/// The same scenario and seed give the same bytes; the production scenario's reuse climbs with
/// the turn index.
#[test]
fn sessions_are_deterministic_and_reuse_grows_by_turn() {
    let (a, b) = (tmpdir("sessions-a"), tmpdir("sessions-b"));
    let sa = run("scenarios/production/multi-turn-sessions.toml", &[], &a);
    run("scenarios/production/multi-turn-sessions.toml", &[], &b);
    for f in ["summary.json", "requests.csv", "timeseries.csv"] {
        assert!(
            std::fs::read(a.join(f)).unwrap() == std::fs::read(b.join(f)).unwrap(),
            "{f} differs between two runs of one seed; reproduce: pdsim run scenarios/production/multi-turn-sessions.toml"
        );
    }
    let x = sa.sessions.unwrap();
    let share = |k: usize| x.by_turn[k].hit_share.unwrap();
    println!(
        "hit share by turn: {:?}",
        x.by_turn.iter().map(|t| t.hit_share).collect::<Vec<_>>()
    );
    assert_eq!(share(0), 0.0, "a first turn has nothing to reuse");
    assert!(
        share(1) > 0.3 && share(4) > share(1),
        "reuse grows with the context"
    );
}

/// Issue 40: `run.max_requests` is a bound sessions keep too. A session start the stream drew
/// while the budget had room arrived after later turns had filled it (10 → 11, 30 → 31);
/// now it never arrives. Checked over budgets and seeds, with conservation on each.
#[test]
fn sessions_never_overshoot_max_requests() {
    // (10, seed 2) and (30, seed 1) overshot by one before the fix.
    for m in [1u64, 10, 13, 30] {
        for seed in 1..4u64 {
            let dir = tmpdir(&format!("sessions-max-{m}-{seed}"));
            let max = format!("run.max_requests={m}");
            let seed_set = format!("run.seed={seed}");
            let s = run(
                "scenarios/production/multi-turn-sessions.toml",
                &[&max, &seed_set],
                &dir,
            );
            let r = &s.requests;
            assert!(
                r.arrived <= m,
                "max_requests {m}, seed {seed}: {} arrived",
                r.arrived
            );
            assert!(r.conserved(), "{r:?}");
            assert_eq!(read_csv(&dir.join("requests.csv")).len() as u64, r.arrived);
        }
    }
}
