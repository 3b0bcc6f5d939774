//! Issue 40's classes: outputs that could be redirected (a symbolic link, a dangling link or a
//! FIFO planted where a verb writes), very long names, integer extremes at every flag and key
//! that takes one, and sweep rows that must conserve with every outcome (completed, failed,
//! corrupted, unfinished, aborted). Each line knows what it must do: the exit codes allowed,
//! what the refusal names, the files it must leave untouched whatever it exits with
//! (`CliLine::keep`), and the `sweep.csv` whose rows must conserve (`CliLine::conserve`).

use std::ffi::OsString;

use super::{CliLine, Corpus, Rng};

/// What a planted entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// A symbolic link to the canary file (`c/canary.txt`).
    LinkToCanary,
    /// A symbolic link to a folder outside the output folder (`c/elsewhere/`).
    LinkToFolder,
    /// A link to nothing.
    Dangling,
    /// A FIFO (a special file: writing into it would block or go nowhere).
    Fifo,
}

/// The canary a planted link points to: it must hold these bytes after the line.
pub const CANARY: &str = "c/canary.txt";
const CANARY_BYTES: &[u8] = b"not pdsim's: must never be overwritten\n";

fn quickstart(corpus: &Corpus) -> OsString {
    corpus
        .root
        .join("scenarios/quickstart.toml")
        .into_os_string()
}

/// Sets that keep a quickstart run well under a second.
fn short(args: &mut Vec<OsString>) {
    for s in ["run.duration_s=3", "run.drain_timeout_s=30"] {
        args.extend(["--set".into(), s.into()]);
    }
}

/// One of issue 40's lines.
pub fn gen_edge(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    match rng.below(4) {
        0 => planted_output(rng, corpus),
        1 => long_name(rng, corpus),
        2 => integer_extreme(rng, corpus),
        _ => sweep_rows(rng, corpus),
    }
}

/// A link or FIFO planted as one of a verb's outputs (or its lock or staging folder): the
/// line is refused by name (exit 2) and the canary is untouched.
fn planted_output(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    let plant = *rng.pick(&[
        Plant::LinkToCanary,
        Plant::LinkToFolder,
        Plant::Dangling,
        Plant::Fifo,
    ]);
    let mut args: Vec<OsString>;
    let (verb, target): (&'static str, String);
    match rng.below(3) {
        0 => {
            verb = "run";
            let name = *rng.pick(&[
                "summary.json",
                "run.json",
                "requests.csv",
                "timeseries.csv",
                "links.csv",
                "index.html",
                "summary.md",
                "charts",
                ".pdsim-lock",
                ".pdsim-partial",
            ]);
            target = format!("c/out/{name}");
            args = vec![
                "run".into(),
                quickstart(corpus),
                "--out".into(),
                "c/out".into(),
            ];
            if rng.chance(0.3) {
                args.push("--summary-only".into());
            }
            args.push("-q".into());
            short(&mut args);
        }
        1 => {
            verb = "sweep";
            let name = *rng.pick(&["sweep.csv", "sweep.json", "index.html", ".pdsim-lock"]);
            target = format!("c/out/{name}");
            args = vec![
                "sweep".into(),
                quickstart(corpus),
                "--vary".into(),
                "pools.decode.instances=1,2".into(),
                "--out".into(),
                "c/out".into(),
                "-q".into(),
            ];
            short(&mut args);
        }
        _ => {
            verb = "check";
            target = "c/junit.xml".into();
            args = vec![
                "check".into(),
                corpus
                    .root
                    .join("scenarios/regression/healthy-2p2d-8b.toml")
                    .into_os_string(),
                "--junit".into(),
                "c/junit.xml".into(),
                "-q".into(),
            ];
        }
    }
    // The staging folder as a FIFO is removed and rebuilt like any leftover (it is pdsim's
    // own name); every other plant is refused.
    let staging_fifo = plant == Plant::Fifo && target.ends_with(".pdsim-partial");
    CliLine {
        files: vec![
            (CANARY.into(), CANARY_BYTES.to_vec()),
            ("c/elsewhere/keep.txt".into(), CANARY_BYTES.to_vec()),
            ("c/out/.keep".into(), Vec::new()),
        ],
        plants: vec![(target.clone(), plant)],
        keep: vec![
            (CANARY.into(), CANARY_BYTES.to_vec()),
            ("c/elsewhere/keep.txt".into(), CANARY_BYTES.to_vec()),
        ],
        codes: if staging_fifo { vec![0] } else { vec![2] },
        names: (!staging_fifo).then(|| target.clone()),
        muts: vec![format!("{target} planted as {plant:?}")],
        ..CliLine::new(verb, args)
    }
}

/// `run.name` (or a pool name) of extreme length or odd characters, with the default output
/// folder it names: a name pdsim accepts must be writable (exit 0), any other is refused at
/// validation naming the key (exit 2), never exit 3 "File name too long".
fn long_name(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    let len = *rng.pick(&[1usize, 64, 199, 200, 201, 255, 256, 300, 4096, 100_000]);
    let ch = *rng.pick(&["n", "é", "-", "a/b", "."]);
    let mut name: String = ch.repeat(len.div_ceil(ch.len()).max(1));
    name.truncate(name.char_indices().nth(len).map_or(name.len(), |(i, _)| i));
    let valid = name.len() <= 200
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let sweep = rng.chance(0.3);
    let mut args: Vec<OsString> = if sweep {
        vec![
            "sweep".into(),
            quickstart(corpus),
            "--vary".into(),
            "pools.decode.instances=1".into(),
        ]
    } else {
        vec!["run".into(), quickstart(corpus), "--summary-only".into()]
    };
    args.push("-q".into());
    short(&mut args);
    args.extend(["--set".into(), format!("run.name={name:?}").into()]);
    CliLine {
        codes: if valid { vec![0] } else { vec![2] },
        names: (!valid).then(|| "run.name".to_string()),
        muts: vec![format!("run.name of {len} × {ch:?}")],
        ..CliLine::new(if sweep { "sweep" } else { "run" }, args)
    }
}

/// Seeds, `--seeds`, `--jobs` and integer keys at and past their bounds: in range runs
/// (exit 0), past it is refused naming what (exit 2) — and at once, never after minutes of
/// spawning threads (the case timeout sees that).
fn integer_extreme(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    const U64_MAX: &str = "18446744073709551615";
    let mut args: Vec<OsString>;
    let mut codes = vec![];
    let mut names = None;
    let mut muts = vec![];
    match rng.below(4) {
        0 | 1 => {
            let (v, ok) = *rng.pick(&[
                ("0", true),
                ("9223372036854775807", true),
                ("9223372036854775808", true),
                (U64_MAX, true),
                ("18446744073709551616", false),
                ("-1", false),
                ("-9223372036854775809", false),
                ("1e19", false),
                ("\"12\"", true),
            ]);
            args = vec![
                "run".into(),
                quickstart(corpus),
                "--summary-only".into(),
                "-q".into(),
            ];
            short(&mut args);
            let by_flag = rng.chance(0.5) && !v.starts_with('"') && !v.contains('e');
            if by_flag {
                args.extend(["--seed".into(), v.into()]);
                // clap refuses what is not a u64 naming --seed; its own text.
                codes = if ok { vec![0] } else { vec![2] };
            } else {
                args.extend(["--set".into(), format!("run.seed={v}").into()]);
                codes = if ok { vec![0] } else { vec![2] };
                names = (!ok).then(|| "run.seed".to_string());
            }
            muts.push(format!(
                "seed {v} by {}",
                if by_flag { "--seed" } else { "--set" }
            ));
        }
        2 => {
            let (j, ok) = *rng.pick(&[
                ("1", true),
                ("2", true),
                ("1025", false),
                ("1000000", false),
                ("4294967296", false),
                (U64_MAX, false),
                ("0", false),
            ]);
            args = vec![
                "sweep".into(),
                quickstart(corpus),
                "--vary".into(),
                "pools.decode.instances=1".into(),
                "--jobs".into(),
                j.into(),
                "--out".into(),
                "c/out".into(),
                "-q".into(),
            ];
            short(&mut args);
            codes = if ok { vec![0] } else { vec![2] };
            names = (!ok).then(|| "--jobs".to_string());
            muts.push(format!("--jobs {j}"));
        }
        _ => {
            // The seeds a sweep takes: run.seed + k must not pass u64.
            let (seed, seeds, ok) = *rng.pick(&[
                (U64_MAX, "1", true),
                (U64_MAX, "2", false),
                ("18446744073709551614", "2", true),
                ("0", "4294967295", false),
                ("0", "4294967296", false),
            ]);
            args = vec![
                "sweep".into(),
                quickstart(corpus),
                "--vary".into(),
                "pools.decode.instances=1".into(),
                "--seeds".into(),
                seeds.into(),
                "--set".into(),
                format!("run.seed={seed}").into(),
                "--out".into(),
                "c/out".into(),
                "-q".into(),
            ];
            short(&mut args);
            codes = if ok { vec![0] } else { vec![2] };
            muts.push(format!("run.seed {seed} with --seeds {seeds}"));
        }
    }
    CliLine {
        codes,
        names,
        muts,
        ..CliLine::new("integers", args)
    }
}

/// A sweep whose runs end in every outcome — client timeouts (aborted), crashes (failed),
/// unguarded corruption, a short drain (unfinished) — whose `sweep.csv` rows must each
/// conserve: arrived = completed + failed + corrupted + unfinished + aborted.
fn sweep_rows(rng: &mut Rng, corpus: &Corpus) -> CliLine {
    let mut args: Vec<OsString> = vec![
        "sweep".into(),
        quickstart(corpus),
        "--out".into(),
        "c/out".into(),
        "-q".into(),
        "--set".into(),
        format!("run.duration_s={}", 2 + rng.below(4)).into(),
        "--set".into(),
        format!("run.drain_timeout_s={}", rng.pick(&["0", "1", "5", "30"])).into(),
    ];
    let mut muts = vec![];
    if rng.chance(0.7) {
        let s = format!(
            "workload.client_timeout={{ s = {} }}",
            rng.pick(&["0.05", "0.3", "1", "4"])
        );
        muts.push(s.clone());
        args.extend(["--set".into(), s.into()]);
    }
    if rng.chance(0.5) {
        let f = format!(
            "faults=[{{ kind = \"instance_crash\", pool = \"{}\", at_s = {} }}]",
            rng.pick(&["decode", "prefill"]),
            rng.pick(&["0.5", "1", "2"])
        );
        muts.push(f.clone());
        args.extend(["--set".into(), f.into()]);
    }
    if rng.chance(0.3) {
        let p = "sglang.profile=\"unguarded\"";
        muts.push(p.into());
        args.extend(["--set".into(), p.into()]);
        args.extend(["--set".into(), "pools.decode.server.page_size=16".into()]);
    }
    args.extend([
        "--vary".into(),
        format!(
            "workload.arrival.rate_per_s={}",
            rng.pick(&["2,40", "8", "1,20,80"])
        )
        .into(),
    ]);
    if rng.chance(0.3) {
        args.extend(["--seeds".into(), "2".into()]);
    }
    CliLine {
        conserve: Some("c/out/sweep.csv".into()),
        muts,
        ..CliLine::new("sweep-rows", args)
    }
}
