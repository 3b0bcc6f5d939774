//! `pdsim serve [--port N] [--bind ADDR] [--dir DIR]`: the verbs as a local web app. `/` asks
//! the one-line question (a form; its answer is `app::plan`'s, the same files as `pdsim plan
//! --model … --out DIR`, shown as the plan's own report); `/edit` is a scenario editor whose
//! check shows a validation error at its line and whose run shows the run's report (`app::run`,
//! the same files as `pdsim run`); `/files/…` serves what those wrote, and nothing outside the
//! served folder.
//!
//! Synchronous (`tiny_http`, a thread per connection, at most [`MAX_CONNECTIONS`] at once): a
//! plan or run is CPU-bound, so an async runtime would buy nothing. Plans and runs go one at a
//! time (a second is told the server is busy, with a link to the first): two would only share
//! the cores and both take twice as long. A page waits for its job at most `--wait` seconds,
//! then answers "still running" and reloads itself on `/jobs/N`, so no request hangs on a long
//! run; the job itself cannot be stopped midway (the simulation takes no cancellation), so
//! what a job may simulate is bounded before it starts: at most `--max-requests` arrivals a run
//! (`run.max_requests`, or the arrival rate × `run.duration_s`).

pub mod http;
pub mod pages;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use self::http::{Body, Refused, Reply};
use self::pages::Checked;
use super::CliError;
use crate::app::oneline::{DEFAULT_GPUS, Question};
use crate::scenario::Scenario;

/// What `pdsim serve` is asked.
#[derive(Debug, Clone)]
pub struct ServeRequest {
    /// The address to listen on (`--bind`; 127.0.0.1 by default: only this machine).
    pub bind: IpAddr,
    /// The port (`--port`; 0 picks a free one, printed with the address).
    pub port: u16,
    /// Where plans and runs write their results (`--dir`); the only folder files are served from.
    pub dir: PathBuf,
    /// Wall-clock seconds a page waits for its plan or run before answering "still running"
    /// (`--wait`).
    pub wait_s: u64,
    /// The most arrivals one simulated run may have (`--max-requests`): a scenario or a
    /// question that may exceed it is refused before it runs, naming the key or field.
    pub max_requests: u64,
}

/// `--wait` by default, seconds: long enough for a small plan, short of a browser's patience.
pub const DEFAULT_WAIT_S: u64 = 120;
/// `--wait` at most, seconds (a day).
pub const MAX_WAIT_S: u64 = 86_400;
/// `--max-requests` by default: arrivals a run may have (the quickstart has about 600).
pub const DEFAULT_MAX_REQUESTS: u64 = 1_000_000;
/// `--max-requests` at most: a billion arrivals, hours of simulation.
pub const MAX_MAX_REQUESTS: u64 = 1_000_000_000;
/// Connections served at once; past it a connection gets 503 at once.
pub const MAX_CONNECTIONS: usize = 32;
/// Finished jobs whose pages are kept for `/jobs/N`.
const KEPT_JOBS: usize = 64;
/// The seeds a plan runs per point (the CLI's default `--seeds`).
const PLAN_SEEDS: u32 = 3;
/// The scenario the editor opens with.
const QUICKSTART: &str = include_str!("../../../scenarios/quickstart.toml");

/// The server's state, shared by the connection threads.
struct State {
    /// The served folder, canonical: what a requested path must resolve under.
    dir: PathBuf,
    /// The same folder as `--dir` gave it: plans and runs write under it, so their files and
    /// messages name the paths a CLI line run from the same folder names.
    out: PathBuf,
    wait: Duration,
    max_requests: u64,
    jobs: Mutex<Jobs>,
    /// Signalled when a job finishes.
    finished: Condvar,
}

/// The plan or run going on, and the pages of those finished.
#[derive(Default)]
struct Jobs {
    /// The last job's number.
    last: u64,
    /// The running job: its number and what it is.
    running: Option<(u64, String)>,
    /// Finished jobs' pages by number (the last [`KEPT_JOBS`]).
    done: BTreeMap<u64, Reply>,
}

/// A bound server, not yet serving: its address is known (for `--port 0`).
pub struct Bound {
    server: tiny_http::Server,
    state: Arc<State>,
    /// The address it listens on.
    pub addr: SocketAddr,
}

/// Checks the request, creates the folder and binds the port.
pub fn bind(req: &ServeRequest) -> Result<Bound, CliError> {
    if !(1..=MAX_WAIT_S).contains(&req.wait_s) {
        return Err(CliError::flag(
            "--wait",
            format!(
                "--wait {}: seconds a page waits for its plan or run, 1 to {MAX_WAIT_S}",
                req.wait_s
            ),
        ));
    }
    if req.max_requests == 0 || req.max_requests > MAX_MAX_REQUESTS {
        return Err(CliError::flag(
            "--max-requests",
            format!(
                "--max-requests {}: the most arrivals one run may have, 1 to {}",
                req.max_requests, MAX_MAX_REQUESTS
            ),
        ));
    }
    std::fs::create_dir_all(&req.dir)
        .and_then(|()| req.dir.canonicalize())
        .and_then(|d| {
            if d.is_dir() {
                Ok(d)
            } else {
                Err(std::io::Error::other("not a folder"))
            }
        })
        .map_err(|e| {
            CliError::flag(
                "--dir",
                format!(
                    "--dir {}: cannot be made the results folder: {e}",
                    req.dir.display()
                ),
            )
        })
        .and_then(|dir| {
            let addr = SocketAddr::new(req.bind, req.port);
            let server = tiny_http::Server::http(addr).map_err(|e| {
                // In use or not ours to bind: name the flag that picks another.
                let in_use = e
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse);
                CliError::flag(
                    if in_use { "--port" } else { "--bind" },
                    format!(
                        "cannot listen on {addr}: {e}{}",
                        if in_use {
                            "; give another --port (0 picks a free one)"
                        } else {
                            "; give an address of this machine with --bind"
                        }
                    ),
                )
            })?;
            let addr = server.server_addr().to_ip().unwrap_or(addr);
            Ok(Bound {
                server,
                state: Arc::new(State {
                    dir,
                    out: req.dir.clone(),
                    wait: Duration::from_secs(req.wait_s),
                    max_requests: req.max_requests,
                    jobs: Mutex::new(Jobs::default()),
                    finished: Condvar::new(),
                }),
                addr,
            })
        })
}

/// Runs `pdsim serve`: binds, prints the address, serves until the process is stopped.
pub fn run(req: &ServeRequest) -> Result<(), CliError> {
    let bound = bind(req)?;
    // A plan installs a handler that prints a `--resume` line on Ctrl-C: meaningless for a
    // server, whose Ctrl-C should simply stop it.
    super::signals::keep_host_handlers();
    super::print_out(&format!(
        "pdsim serve: http://{}/ (results in {}; Ctrl-C stops)\n",
        bound.addr,
        bound.state.out.display()
    ))?;
    bound.serve();
    Ok(())
}

impl Bound {
    /// Serves until the process ends: each connection on its own thread, at most
    /// [`MAX_CONNECTIONS`] at once.
    pub fn serve(self) {
        let open = Arc::new(AtomicUsize::new(0));
        for mut rq in self.server.incoming_requests() {
            if open.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                let _ = rq.respond(to_response(Reply::html(
                    503,
                    pages::message(
                        "busy",
                        &format!("{MAX_CONNECTIONS} requests are open; try again shortly"),
                    ),
                )));
                continue;
            }
            open.fetch_add(1, Ordering::AcqRel);
            let (state, open) = (Arc::clone(&self.state), Arc::clone(&open));
            std::thread::spawn(move || {
                let started = Instant::now();
                let reply = read_and_route(&state, &mut rq);
                let status = reply.status;
                let (method, url) = (rq.method().to_string(), rq.url().to_string());
                let sent = rq.respond(to_response(reply));
                open.fetch_sub(1, Ordering::AcqRel);
                // One line a request on stderr, as a web server's access log: what was asked
                // (its address cut short: a scenario's text can ride in it), how it ended.
                let shown: String = url.chars().take(120).collect();
                let _ = writeln!(
                    std::io::stderr(),
                    "pdsim serve: {method} {shown}{} {status} {:.0} ms{}",
                    if shown.len() < url.len() { "…" } else { "" },
                    started.elapsed().as_secs_f64() * 1e3,
                    sent.err()
                        .map_or(String::new(), |e| format!(" (not sent: {e})"))
                );
            });
        }
    }
}

/// The HTTP response of a reply (a file body streamed, a page from memory).
fn to_response(r: Reply) -> tiny_http::Response<Box<dyn std::io::Read + Send>> {
    let header = |k: &str, v: &str| {
        tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("an ASCII header")
    };
    let (data, len): (Box<dyn std::io::Read + Send>, Option<usize>) = match r.body {
        Body::Bytes(b) => {
            let n = b.len();
            (Box::new(std::io::Cursor::new(b)), Some(n))
        }
        Body::File(p) => match std::fs::File::open(&p) {
            Ok(f) => {
                let n = f.metadata().ok().map(|m| m.len() as usize);
                (Box::new(f), n)
            }
            // Gone between the check and the read (a run rewriting its folder).
            Err(_) => (Box::new(std::io::empty()), Some(0)),
        },
    };
    tiny_http::Response::new(
        tiny_http::StatusCode(r.status),
        vec![
            header("Content-Type", r.content_type),
            header("X-Content-Type-Options", "nosniff"),
            header("Cache-Control", "no-store"),
        ],
        data,
        len,
        None,
    )
    // Always a Content-Length, never chunked (tiny_http's default past 32 KiB): the length is
    // known, and loading a run report from `/files/` in headless Chromium hung now and then
    // with chunked charts (2 loads in 15) and never without (0 in 40).
    .with_chunked_threshold(usize::MAX)
}

/// Reads the request (its query or form body, capped at [`http::MAX_INPUT_BYTES`]) and routes
/// it.
fn read_and_route(state: &Arc<State>, rq: &mut tiny_http::Request) -> Reply {
    let method = rq.method().as_str().to_ascii_uppercase();
    let url = rq.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    if url.len() > http::MAX_INPUT_BYTES {
        return too_large();
    }
    let mut input = query.to_string();
    if method == "POST" {
        if rq.body_length().unwrap_or(0) > http::MAX_INPUT_BYTES {
            return too_large();
        }
        let mut body = Vec::new();
        use std::io::Read;
        if rq
            .as_reader()
            .take(http::MAX_INPUT_BYTES as u64 + 1)
            .read_to_end(&mut body)
            .is_err()
        {
            return bad_request("the request's body could not be read");
        }
        if body.len() > http::MAX_INPUT_BYTES {
            return too_large();
        }
        let Ok(body) = String::from_utf8(body) else {
            return bad_request("the form's body is not UTF-8");
        };
        if !input.is_empty() && !body.is_empty() {
            input.push('&');
        }
        input += &body;
    }
    route(state, &method, path, &input)
}

fn too_large() -> Reply {
    Reply::html(
        413,
        pages::message(
            "too large",
            &format!(
                "the request's address or body is over {} bytes (a scenario is a few KiB)",
                http::MAX_INPUT_BYTES
            ),
        ),
    )
}

fn bad_request(why: &str) -> Reply {
    Reply::html(400, pages::message("bad request", why))
}

fn not_found(path: &str) -> Reply {
    Reply::html(
        404,
        pages::message(
            "not found",
            &format!("{path}: no such page or file under the served folder"),
        ),
    )
}

/// The reply to `method path?input` (`input`: the query and a form body, urlencoded).
fn route(state: &Arc<State>, method: &str, path: &str, input: &str) -> Reply {
    if !matches!(method, "GET" | "HEAD" | "POST") {
        return Reply::html(
            405,
            pages::message("method not allowed", &format!("{method}: use GET or POST")),
        );
    }
    let fields = match http::parse_form(input) {
        Ok(f) => f,
        Err(e) => return bad_request(&format!("the form: {e}")),
    };
    match path {
        "/" | "/index.html" => Reply::html(
            200,
            pages::question_form(&defaults(), &[], &[], &earlier(&state.dir)),
        ),
        // HEAD asks about a page without wanting it: it must not start a plan or a run.
        "/plan" | "/edit"
            if method == "HEAD"
                && (path == "/plan" || fields.iter().any(|(k, v)| k == "action" && v == "run")) =>
        {
            Reply::html(
                405,
                pages::message(
                    "method not allowed",
                    &format!("HEAD {path}: would start a plan or run; use GET or POST"),
                ),
            )
        }
        "/plan" => plan_page(state, &fields),
        "/edit" => edit_page(state, &fields),
        _ => {
            if let Some(id) = path.strip_prefix("/jobs/") {
                return match id.parse::<u64>() {
                    Ok(id) => wait_for(state, id),
                    Err(_) => bad_request(&format!("{id:?}: a job is a number")),
                };
            }
            let Some(rel) = path.strip_prefix("/files/") else {
                return not_found(path);
            };
            let rel = match http::decode_component(rel, false) {
                Ok(r) => r,
                Err(e) => return bad_request(&format!("the path: {e}")),
            };
            match http::file_under(&state.dir, &rel) {
                Ok(p) => Reply {
                    status: 200,
                    content_type: http::content_type(&p),
                    body: Body::File(p),
                },
                Err(Refused::BadPath(why)) => bad_request(&why),
                Err(Refused::NotFound) => not_found(path),
            }
        }
    }
}

/// The form's values when it opens: a small question that answers in seconds.
fn defaults() -> Vec<(String, String)> {
    [
        ("model", "llama-3.1-8b"),
        ("gpu", "h100-sxm"),
        ("isl", "1024"),
        ("osl", "256"),
        ("ttft", "1000"),
        ("tpot", "50"),
        ("rate", "4"),
        ("gpus", "4"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec()
}

/// The plans and runs already in the served folder (their report or answer), newest name
/// order: (href, label).
fn earlier(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut look = |sub: &str| {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else {
            return;
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort();
        for n in names {
            let rel = if sub.is_empty() {
                n.clone()
            } else {
                format!("{sub}/{n}")
            };
            for f in ["index.html", "plan.json"] {
                if dir.join(&rel).join(f).is_file() {
                    out.push((format!("/files/{rel}/{f}"), rel.clone()));
                    break;
                }
            }
        }
    };
    look("");
    look("runs");
    out
}

/// The one-line question read from the form: its fields checked as `pdsim plan`'s flags are
/// (the same messages, each under its field), then planned as a job.
fn plan_page(state: &Arc<State>, fields: &[(String, String)]) -> Reply {
    let (q, rate, errors, general) = question_of(state, fields);
    let Some(q) = q.filter(|_| errors.is_empty() && general.is_empty()) else {
        return Reply::html(
            400,
            pages::question_form(fields, &errors, &general, &earlier(&state.dir)),
        );
    };
    let model = crate::spec::launch::preset_for(&q.model).unwrap_or("model");
    // One folder per question: asking it again rewrites the same files.
    let name = format!(
        "plan-{model}-{}-i{}-o{}-ttft{}-tpot{}-{}-g{}",
        q.gpu,
        q.isl,
        q.osl,
        q.ttft_ms,
        q.tpot_ms,
        rate.map_or("max".to_string(), |r| format!("r{r}")),
        q.gpus
    );
    let out = state.out.join(&name);
    let command = format!(
        "pdsim plan --model {} --gpu {} --isl {} --osl {} --ttft {} --tpot {}{} --gpus {} --out {}",
        q.model,
        q.gpu,
        q.isl,
        q.osl,
        q.ttft_ms,
        q.tpot_ms,
        rate.map_or(String::new(), |r| format!(" --rate {r}")),
        q.gpus,
        out.display()
    );
    let what = format!("planning: {command}");
    start_job(state, what, move || {
        let req = super::plan::PlanRequest {
            scenario: super::Source::File(PathBuf::new()),
            rate,
            max_rate: rate.is_none(),
            vary: Vec::new(),
            seeds: PLAN_SEEDS,
            jobs: None,
            out: Some(out.clone()),
            sets: Vec::new(),
            tolerance: 0.02,
            quiet: false,
            full_grid: false,
            resume: false,
            no_early_stop: false,
            question: Some(q),
        };
        let mut said = String::new();
        let done = super::plan::run_saying(&req, &mut |t| {
            said.push_str(t);
            Ok(())
        });
        let ok = match done {
            Ok(()) => true,
            // No deployment meets [slo]: every file is written; the answer says so.
            Err(CliError::Failed(m)) => {
                said += &m;
                false
            }
            Err(e) => return job_error(&e),
        };
        let links = [
            ("scenario.toml", "scenario.toml"),
            ("index.html", "report"),
            ("plan.json", "plan.json"),
            ("plan.csv", "plan.csv"),
            ("sweep.csv", "sweep.csv"),
            ("best.toml", "best.toml"),
            ("launch.txt", "launch.txt"),
            ("k8s.yaml", "k8s.yaml"),
            ("slurm.sh", "slurm.sh"),
        ];
        let mut hrefs: Vec<(String, String)> = links
            .iter()
            .filter(|(f, _)| out.join(f).is_file())
            .map(|(f, label)| (format!("/files/{name}/{f}"), (*label).to_string()))
            .collect();
        hrefs.push((
            format!("/edit?from={name}/scenario.toml"),
            "edit the scenario".to_string(),
        ));
        report_reply(&out, &name, &command, &said, ok, &hrefs)
    })
}

/// The page of a plan or run written to `out` (`/files/{name}/`): its report with the bar
/// above it, or the bar alone when it wrote no report (`--max-rate` plans write `plan.csv`).
fn report_reply(
    out: &Path,
    name: &str,
    command: &str,
    said: &str,
    ok: bool,
    links: &[(String, String)],
) -> Reply {
    let bar = pages::report_bar(command, said, ok, links);
    let base = format!("/files/{name}/");
    let page = match std::fs::read_to_string(out.join("index.html")) {
        Ok(report) => pages::splice(&report, &base, &bar),
        Err(_) => pages::bare("pdsim serve: the answer", &bar),
    };
    Reply::html(200, page)
}

/// A verb's error as a page (the CLI's message; 400 for bad input, 409 for a folder another
/// pdsim holds, 500 otherwise).
fn job_error(e: &CliError) -> Reply {
    let status = match e.exit_code() {
        2 => 400,
        3 if matches!(e, CliError::Busy(_)) => 409,
        _ => 500,
    };
    Reply::html(status, pages::message("pdsim: error", &e.to_string()))
}

/// The form's question, its rate, the errors by field and the errors of no field.
#[allow(clippy::type_complexity)]
fn question_of(
    state: &State,
    fields: &[(String, String)],
) -> (
    Option<Question>,
    Option<f64>,
    Vec<(String, String)>,
    Vec<String>,
) {
    let mut errors: Vec<(String, String)> = Vec::new();
    let mut general = Vec::new();
    let names: Vec<&str> = pages::FIELDS.iter().map(|f| f.name).collect();
    for (i, (k, _)) in fields.iter().enumerate() {
        if !names.contains(&k.as_str()) {
            general.push(format!(
                "unknown field `{k}`; expected one of {}",
                names.join(", ")
            ));
        } else if fields[..i].iter().any(|(e, _)| e == k) {
            errors.push((k.clone(), format!("{k}: given twice; give it once")));
        }
    }
    let get = |k: &str| {
        fields
            .iter()
            .find(|(f, _)| f == k)
            .map_or("", |(_, v)| v.trim())
    };
    let mut whole = |k: &'static str, what: &str, default: Option<u32>| -> u32 {
        let v = get(k);
        match (v.is_empty(), default) {
            (true, Some(d)) => d,
            (true, None) => {
                errors.push((k.into(), format!("{k}: give {what}")));
                0
            }
            _ => v.parse().unwrap_or_else(|_| {
                errors.push((k.into(), format!("{k} {v:?}: not a whole number of {what}")));
                0
            }),
        }
    };
    let isl = whole("isl", "tokens", None);
    let osl = whole("osl", "tokens", None);
    let gpus = whole("gpus", "GPUs", Some(DEFAULT_GPUS));
    let mut real = |k: &'static str, what: &str| -> Option<f64> {
        let v = get(k);
        if v.is_empty() {
            return None;
        }
        match v.parse::<f64>() {
            Ok(x) => Some(x),
            Err(_) => {
                errors.push((k.into(), format!("{k} {v:?}: not a number of {what}")));
                None
            }
        }
    };
    let ttft = real("ttft", "milliseconds");
    let tpot = real("tpot", "milliseconds");
    let rate = real("rate", "requests per second");
    for (k, v) in [("model", get("model")), ("gpu", get("gpu"))] {
        if v.is_empty() {
            errors.push((k.into(), format!("{k}: give a preset")));
        }
    }
    for (k, v) in [("ttft", ttft), ("tpot", tpot)] {
        if v.is_none() && get(k).is_empty() {
            errors.push((k.into(), format!("{k}: give a target in milliseconds")));
        }
    }
    if !errors.is_empty() || !general.is_empty() {
        return (None, rate, errors, general);
    }
    let q = Question {
        model: get("model").to_string(),
        gpu: get("gpu").to_string(),
        isl,
        osl,
        ttft_ms: ttft.unwrap_or_default(),
        tpot_ms: tpot.unwrap_or_default(),
        gpus,
    };
    // The CLI's checks and messages: a flag's name is the field's with two dashes.
    let field = |e: &CliError| {
        e.key()
            .and_then(|k| k.strip_prefix("--").map(str::to_string))
            .filter(|k| names.contains(&k.as_str()))
    };
    let checked = rate
        .map_or(Ok(()), |r| {
            super::plan::check_rate(r, "workload.arrival.rate_per_s")
        })
        .and_then(|()| super::oneline::plan_of(&q, rate.unwrap_or(1.0)));
    match checked {
        Ok((text, _)) => {
            // Bounded before it runs: a run at this rate over the scenario's duration.
            if let Some(r) = rate
                && let Ok(sc) = crate::scenario::from_str(&text, Path::new("scenario.toml"), &[])
                && let Some(n) = expected_arrivals(&sc)
                && n > state.max_requests as f64
            {
                errors.push((
                    "rate".into(),
                    format!(
                        "rate {r}: each run would have about {n:.0} arrivals ({r} req/s for {} s), more than this server's --max-requests {}",
                        sc.duration_ns / 1_000_000_000,
                        state.max_requests
                    ),
                ));
            }
        }
        Err(e) => match field(&e) {
            Some(f) => errors.push((f, e.to_string())),
            None => general.push(e.to_string()),
        },
    }
    (Some(q), rate, errors, general)
}

/// The arrivals a run of `sc` may have at most: `run.max_requests`, or the arrival rate ×
/// `run.duration_s` when that is fewer; `None` when neither bounds it ahead (a trace or a
/// schedule, whose rows bound it).
fn expected_arrivals(sc: &Scenario) -> Option<f64> {
    let by_rate = crate::scenario::resolved_file(sc)
        .workload
        .rate_per_s()
        .map(|r| r * sc.duration_ns as f64 / 1e9);
    match (sc.max_requests.map(|m| m as f64), by_rate) {
        (Some(m), Some(r)) => Some(m.min(r)),
        (m, r) => m.or(r),
    }
}

/// The editor: opened (from the quickstart, or `from=` a scenario under the served folder),
/// checked (`action=check`) or run (`action=run`).
fn edit_page(state: &Arc<State>, fields: &[(String, String)]) -> Reply {
    for (k, _) in fields {
        if !["scenario", "action", "from"].contains(&k.as_str()) {
            return Reply::html(
                400,
                pages::editor(
                    QUICKSTART,
                    &Checked::Invalid {
                        message: format!(
                            "unknown field `{k}`; expected one of scenario, action, from"
                        ),
                        key: k.clone(),
                        line: None,
                    },
                ),
            );
        }
    }
    let get = |k: &str| fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str());
    let text = match (get("scenario"), get("from")) {
        (Some(t), _) => t.replace("\r\n", "\n"),
        (None, Some(from)) => match http::file_under(&state.dir, from) {
            // A results file (a requests.csv) is no scenario to edit: refused before it is read.
            Ok(p) if p.metadata().map_or(0, |m| m.len()) > http::MAX_INPUT_BYTES as u64 => {
                return bad_request(&format!(
                    "from {from:?}: over {} bytes, no scenario to edit",
                    http::MAX_INPUT_BYTES
                ));
            }
            Ok(p) => match std::fs::read_to_string(&p) {
                Ok(t) => t,
                Err(e) => return bad_request(&format!("from {from:?}: {e}")),
            },
            Err(Refused::BadPath(why)) => return bad_request(&format!("from: {why}")),
            Err(Refused::NotFound) => {
                return Reply::html(
                    404,
                    pages::message(
                        "not found",
                        &format!("from {from:?}: no such file under the served folder"),
                    ),
                );
            }
        },
        (None, None) => QUICKSTART.to_string(),
    };
    let action = get("action").unwrap_or("");
    if action.is_empty() {
        return Reply::html(200, pages::editor(&text, &Checked::Nothing));
    }
    if !["check", "run"].contains(&action) {
        return Reply::html(
            400,
            pages::editor(
                &text,
                &Checked::Invalid {
                    message: format!("action {action:?}: check or run"),
                    key: "action".into(),
                    line: None,
                },
            ),
        );
    }
    // Relative paths in the text resolve as they will when it runs from `runs/`.
    let runs = state.out.join("runs");
    let stand_in = runs.join("scenario.toml");
    let sc = match crate::scenario::from_str(&text, &stand_in, &[]) {
        Ok(sc) => sc,
        Err(e) => {
            return Reply::html(
                400,
                pages::editor(
                    &text,
                    &Checked::Invalid {
                        message: e.to_string(),
                        key: e.key.clone(),
                        line: e.line,
                    },
                ),
            );
        }
    };
    let arrivals = expected_arrivals(&sc);
    if let Some(n) = arrivals.filter(|&n| n > state.max_requests as f64) {
        return Reply::html(
            400,
            pages::editor(
                &text,
                &Checked::Invalid {
                    message: format!(
                        "run.max_requests: this run may have about {n:.0} arrivals (the arrival rate × run.duration_s), more than this server's --max-requests {}; set run.max_requests or shorten run.duration_s",
                        state.max_requests
                    ),
                    key: "run.max_requests".into(),
                    line: line_of(&text, "max_requests").or_else(|| line_of(&text, "duration_s")),
                },
            ),
        );
    }
    if action == "check" {
        let mut notes = vec![format!(
            "run.name = {:?}, {}",
            sc.name,
            arrivals.map_or(
                "arrivals bounded by its trace or schedule".to_string(),
                |n| { format!("about {n:.0} arrivals") }
            )
        )];
        notes.extend(sc.notes.iter().map(|n| format!("warning: {n}")));
        return Reply::html(200, pages::editor(&text, &Checked::Valid(notes)));
    }
    let name = sc.name.clone();
    let file = runs.join(format!("{name}.toml"));
    let out = runs.join(&name);
    let command = format!("pdsim run {} --out {}", file.display(), out.display());
    start_job(state, format!("running: {command}"), move || {
        // The text as a file, so the run is the CLI's on that file (written whole or not).
        let tmp = runs.join(format!(".{name}.toml.partial"));
        let written = std::fs::create_dir_all(&runs)
            .and_then(|()| std::fs::write(&tmp, text.as_bytes()))
            .and_then(|()| std::fs::rename(&tmp, &file));
        if let Err(source) = written {
            return job_error(&CliError::Io(crate::report::IoError {
                path: file.clone(),
                source,
            }));
        }
        let req = super::run::RunRequest {
            scenario: super::Source::File(file.clone()),
            seed: None,
            out: Some(out.clone()),
            sets: Vec::new(),
            png: false,
            quiet: true,
            summary_only: false,
            trace_events: false,
        };
        let done = match super::run::run(&req) {
            Ok(done) => done,
            Err(e) => return job_error(&e),
        };
        // What `pdsim run` prints.
        let said = format!(
            "{}  results in {}\n",
            done.summary.human(&name),
            out.display()
        );
        let rel = format!("runs/{name}");
        let mut links: Vec<(String, String)> = [
            "summary.json",
            "summary.md",
            "requests.csv",
            "timeseries.csv",
            "links.csv",
            "run.json",
        ]
        .iter()
        .filter(|f| out.join(f).is_file())
        .map(|f| (format!("/files/{rel}/{f}"), (*f).to_string()))
        .collect();
        links.insert(
            0,
            (format!("/files/runs/{name}.toml"), format!("{name}.toml")),
        );
        links.push((
            format!("/edit?from=runs/{name}.toml"),
            "edit this scenario".to_string(),
        ));
        report_reply(&out, &rel, &command, &said, true, &links)
    })
}

/// The 1-based line of the first `key =` in `text`, to point at a key the validator names
/// without a line.
fn line_of(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// Starts `work` as the one job running, or says the server is busy with another; then waits
/// for it as [`wait_for`] does.
fn start_job(
    state: &Arc<State>,
    what: String,
    work: impl FnOnce() -> Reply + Send + 'static,
) -> Reply {
    let id = {
        let mut jobs = state.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((id, running)) = &jobs.running {
            return Reply::html(
                503,
                pages::page(
                    "pdsim serve: busy",
                    &format!(
                        "<h1>Busy</h1><p class=\"serve-banner\" id=\"busy\">One plan or run at a time, and one is going on: {} (<a href=\"/jobs/{id}\">job {id}</a>). Ask again when it is done.</p>",
                        crate::report::escape::escape_html(running)
                    ),
                ),
            );
        }
        jobs.last += 1;
        let id = jobs.last;
        jobs.running = Some((id, what));
        id
    };
    let st = Arc::clone(state);
    std::thread::spawn(move || {
        // A panic is a pdsim bug (the binary's hook reports it and exits 4); caught here only
        // so a server embedded without that hook does not stay busy for ever.
        let reply =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
                Reply::html(
                    500,
                    pages::message("internal error", "the job panicked: a bug in pdsim"),
                )
            });
        let mut jobs = st.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.running = None;
        jobs.done.insert(id, reply);
        while jobs.done.len() > KEPT_JOBS {
            jobs.done.pop_first();
        }
        st.finished.notify_all();
    });
    wait_for(state, id)
}

/// Job `id`'s page: when it is done (waiting for it at most `--wait`), else a page that says it
/// is still running and reloads itself; 404 for a job not known.
fn wait_for(state: &State, id: u64) -> Reply {
    let deadline = Instant::now() + state.wait;
    let mut jobs = state.jobs.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if let Some(r) = jobs.done.get(&id) {
            return r.clone();
        }
        let Some((_, what)) = jobs.running.as_ref().filter(|(r, _)| *r == id) else {
            return not_found(&format!("/jobs/{id}"));
        };
        let now = Instant::now();
        if now >= deadline {
            return Reply::html(202, pages::running(id, what, state.wait.as_secs()));
        }
        jobs = state
            .finished
            .wait_timeout(jobs, deadline - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str) -> Arc<State> {
        let dir = std::env::temp_dir().join(format!("pdsim-serve-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Arc::new(State {
            dir: dir.canonicalize().unwrap(),
            out: dir.clone(),
            wait: Duration::from_secs(60),
            max_requests: 10_000,
            jobs: Mutex::new(Jobs::default()),
            finished: Condvar::new(),
        })
    }

    /// Each bad field of the question comes back on the form with the CLI's message under it.
    #[test]
    fn bad_fields_come_back_on_the_form_named() {
        let s = state("fields");
        let ask = |q: &str| route(&s, "GET", "/plan", q);
        let good = "model=llama-3.1-8b&gpu=h100-sxm&isl=128&osl=64&ttft=500&tpot=50&rate=2&gpus=2";
        for (bad, field, says) in [
            ("isl=0", "isl", "--isl 0: give 1 to"),
            ("isl=x", "isl", "not a whole number"),
            (
                "model=gpt-9",
                "model",
                "--model \"gpt-9\": not a model preset",
            ),
            ("gpu=h1000", "gpu", "--gpu \"h1000\": not a GPU preset"),
            ("tpot=-1", "tpot", "--tpot -1: a target in milliseconds"),
            ("rate=0", "rate", "--rate 0: must be a positive number"),
            (
                "rate=1000",
                "rate",
                "more than this server's --max-requests",
            ),
            ("gpus=0", "gpus", "--gpus 0:"),
        ] {
            let q = good
                .split('&')
                .map(|p| {
                    if p.split('=').next() == Some(field) {
                        bad
                    } else {
                        p
                    }
                })
                .collect::<Vec<_>>()
                .join("&");
            let r = ask(&q);
            assert_eq!(r.status, 400, "{q}");
            let t = r.text();
            let err = format!("id=\"err-{field}\"");
            assert!(t.contains(&err), "{q}: {t}");
            let esc = crate::report::escape::escape_html(says);
            assert!(t.contains(&esc), "{q}: no {esc} in {t}");
        }
        let t = ask(&format!("{good}&colour=red")).text();
        assert!(t.contains("unknown field `colour`"), "{t}");
        assert_eq!(ask("isl=%zz").status, 400);
    }

    /// The editor's check names the key and marks its line; a valid scenario says so.
    #[test]
    fn the_editor_marks_the_errors_line() {
        let s = state("editor");
        let bad = QUICKSTART.replace(
            "tp_size = 2\npage_size = 64\nchunked",
            "tp_sise = 2\npage_size = 64\nchunked",
        );
        let line = bad.lines().position(|l| l.starts_with("tp_sise")).unwrap() + 1;
        let body = format!(
            "action=check&scenario={}",
            bad.replace('%', "%25")
                .replace('&', "%26")
                .replace('+', "%2B")
                .replace('=', "%3D")
        );
        let r = route(&s, "POST", "/edit", &body);
        assert_eq!(r.status, 400);
        let t = r.text();
        assert!(
            t.contains(&format!("<li id=\"L{line}\" class=\"serve-line-err\">")),
            "{t}"
        );
        assert!(t.contains("tp_sise"), "{t}");
        let ok = route(&s, "GET", "/edit", "action=check").text();
        assert!(ok.contains("id=\"valid\""), "{ok}");
        assert_eq!(route(&s, "GET", "/edit", "action=fly").status, 400);
        assert_eq!(route(&s, "GET", "/edit", "from=../x").status, 400);
        assert_eq!(route(&s, "GET", "/edit", "from=nothing.toml").status, 404);
        assert_eq!(route(&s, "GET", "/files/%2e%2e/x", "").status, 400);
        assert_eq!(route(&s, "GET", "/files/nothing", "").status, 404);
        assert_eq!(route(&s, "DELETE", "/", "").status, 405);
        assert_eq!(route(&s, "HEAD", "/plan", "model=x").status, 405);
        assert_eq!(route(&s, "HEAD", "/edit", "action=run").status, 405);
        assert_eq!(route(&s, "HEAD", "/edit", "").status, 200);
        std::fs::write(
            s.dir.join("big.toml"),
            vec![b'#'; http::MAX_INPUT_BYTES + 1],
        )
        .unwrap();
        assert_eq!(route(&s, "GET", "/edit", "from=big.toml").status, 400);
        assert_eq!(route(&s, "GET", "/jobs/7", "").status, 404);
        assert_eq!(route(&s, "GET", "/jobs/x", "").status, 400);
    }

    /// A second job while one runs is told the server is busy; the first's page is kept.
    #[test]
    fn jobs_go_one_at_a_time() {
        let s = state("jobs");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let s2 = Arc::clone(&s);
        let first = std::thread::spawn(move || {
            start_job(&s2, "a slow one".into(), move || {
                let _ = rx.recv();
                Reply::html(200, "done".into())
            })
        });
        while s.jobs.lock().unwrap().running.is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let busy = start_job(&s, "another".into(), || Reply::html(200, "x".into()));
        assert_eq!(busy.status, 503);
        assert!(busy.text().contains("a slow one"));
        tx.send(()).unwrap();
        assert_eq!(first.join().unwrap().text(), "done");
        assert_eq!(wait_for(&s, 1).text(), "done");
    }
}
