//! `pdsim serve` (issue 41 item 7): the binary started on a free port, its pages rendered by a
//! real headless Chromium (the form, a one-line question's answer — the CLI's own answer text —
//! a bad field's message, the editor's error at its line, a run's report), and what it must
//! refuse over plain HTTP (path traversal, hidden files, oversized and malformed input).
//!
//! Without Chromium the browser test fails, saying how to install it, unless
//! `PDSIM_SKIP_BROWSER=1` is set (then it says loudly that it skipped).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::*;

/// A `pdsim serve --port 0` child, killed (by its own id) when dropped.
struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT/`.
    url: String,
    /// `127.0.0.1:PORT`.
    addr: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `pdsim serve --port 0 --dir DIR` and reads the address it prints.
fn serve(dir: &std::path::Path, extra: &[&str]) -> Served {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["serve", "--port", "0", "--dir", dir.to_str().unwrap()])
        .args(extra)
        .current_dir(repo())
        .stdout(Stdio::piped())
        // Its access log, shown when a browser times out.
        .stderr(std::fs::File::create(dir.with_extension("log")).unwrap())
        .spawn()
        .expect("pdsim starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    Served { child, url, addr }
}

/// The Chromium to drive: `PDSIM_CHROMIUM`, else the first of the usual names on `PATH`.
/// Missing, the test fails saying how to install it — or skips, saying so loudly, under
/// `PDSIM_SKIP_BROWSER=1`.
fn chromium() -> Option<std::path::PathBuf> {
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let found = std::env::var_os("PDSIM_CHROMIUM")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .flat_map(|d| names.iter().map(move |n| d.join(n)))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        let why = "no headless Chromium (chromium, chromium-browser or google-chrome on PATH, or PDSIM_CHROMIUM): `pdsim serve`'s pages cannot be rendered in a real browser";
        if std::env::var("PDSIM_SKIP_BROWSER").as_deref() == Ok("1") {
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n!! SKIPPED: {why}; PDSIM_SKIP_BROWSER=1 is set\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
        } else {
            panic!(
                "{why}. Install it (Debian/Ubuntu: apt-get install -y chromium; .ci/run does), or set PDSIM_SKIP_BROWSER=1 to skip this test"
            );
        }
    }
    found
}

/// The DOM headless Chromium renders at `url` (`--dump-dom`), with at most a minute to do it;
/// past it, the test fails with the server's access log (`log`) and Chromium's stderr.
///
/// Images are off: the DOM is what is checked, and Chromium now and then (about one test run
/// in three) never finished loading the nine SVG charts of a run report shown at
/// `/edit?action=run…`, although the server's log has each sent whole and curl fetching them in
/// parallel (with the same long `Referer`) never stalls. Not understood yet.
fn dom(
    browser: &std::path::Path,
    profile: &std::path::Path,
    log: &std::path::Path,
    url: &str,
) -> String {
    let n = PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let chromium_log = log.with_extension(format!("chromium-{n}.log"));
    let mut child = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--blink-settings=imagesEnabled=false",
        ])
        // A profile of its own each time: nothing one run leaves (a lock, a cache) reaches
        // the next.
        .arg(format!(
            "--user-data-dir={}",
            profile.join(n.to_string()).display()
        ))
        .args(["--dump-dom", url])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&chromium_log).unwrap())
        .spawn()
        .expect("chromium starts");
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium {url}: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium took over a minute on {url}\nthe server's log:\n{}\nchromium's stderr:\n{}",
                std::fs::read_to_string(log).unwrap_or_default(),
                std::fs::read_to_string(&chromium_log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// Profiles used so far.
static PROFILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `s` urlencoded as a form value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Text of the DOM's serialization back to characters (`&amp;`, `&lt;`, `&gt;`, `&quot;`).
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// The one-line question's answer page in a real browser holds the CLI's answer for the same
/// question and the plan's own report; a bad field comes back under it with the CLI's message;
/// the editor marks a bad key's line; a run shows its report.
#[test]
fn serve_renders_its_pages_in_headless_chromium() {
    let Some(browser) = chromium() else {
        return;
    };
    let started = Instant::now();
    let dir = tmpdir("serve-browser");
    let profile = dir.join("chromium-profile");
    let s = serve(&dir.join("served"), &[]);
    let log = dir.join("served.log");
    // The form.
    let form = dom(&browser, &profile, &log, &s.url);
    assert!(
        form.contains("<form action=\"/plan\" method=\"get\"") && form.contains("id=\"f-isl\""),
        "{form}"
    );
    assert!(
        form.contains("<option selected=\"\" value=\"h100-sxm\">")
            || form.contains("value=\"h100-sxm\"")
    );
    // An answer, against the CLI's for the same question.
    let q = [
        ("model", "llama-3.1-8b"),
        ("gpu", "h100-sxm"),
        ("isl", "512"),
        ("osl", "128"),
        ("ttft", "500"),
        ("tpot", "30"),
        ("rate", "2"),
        ("gpus", "2"),
    ];
    let query: Vec<String> = q.iter().map(|(k, v)| format!("{k}={}", enc(v))).collect();
    let mut argv = vec!["plan".to_string()];
    for (k, v) in q {
        argv.extend([format!("--{k}"), v.to_string()]);
    }
    argv.extend(["--out".into(), dir.join("cli").display().to_string()]);
    let (code, line, err) = pdsim(&argv);
    assert_eq!(code, 0, "{argv:?}: {err}");
    let cli_answer = line.lines().next().unwrap().to_string();
    assert!(
        cli_answer.starts_with("plan: cheapest point meeting [slo]"),
        "{line}"
    );
    let page = dom(
        &browser,
        &profile,
        &log,
        &format!("{}plan?{}", s.url, query.join("&")),
    );
    let shown = unescape(&page);
    assert!(shown.contains(&cli_answer), "no {cli_answer:?} in {page}");
    // The PD-or-not line too, and the plan's own report below it.
    let pd = line.lines().nth(1).unwrap().trim();
    assert!(pd.starts_with("PD or not:") && shown.contains(pd), "{pd}");
    assert!(
        shown.contains("pdsim plan: the cheapest deployment for 2 req/s"),
        "{page}"
    );
    assert!(page.contains("scenario.toml\">scenario.toml</a>"), "{page}");
    // A bad field: the CLI's message for --isl, under the isl field.
    let bad = query.join("&").replace("isl=512", "isl=0");
    let page = dom(&browser, &profile, &log, &format!("{}plan?{bad}", s.url));
    assert!(page.contains("id=\"err-isl\">--isl 0: give 1 to"), "{page}");
    // The editor: a misspelt key, named, its line marked.
    let quick = std::fs::read_to_string(repo().join("scenarios/quickstart.toml")).unwrap();
    let text = quick.replacen("tp_size = 2", "tp_sise = 2", 1);
    let at = text.lines().position(|l| l == "tp_sise = 2").unwrap() + 1;
    let page = dom(
        &browser,
        &profile,
        &log,
        &format!("{}edit?action=check&scenario={}", s.url, enc(&text)),
    );
    assert!(
        page.contains(&format!(
            "<li id=\"L{at}\" class=\"serve-line-err\">tp_sise = 2</li>"
        )),
        "line {at} not marked: {page}"
    );
    assert!(
        page.contains(&format!("<a href=\"#L{at}\">line {at}</a>"))
            && page.contains("pools.prefill.server.tp_sise"),
        "{page}"
    );
    // A run from the editor: its report, and the summary the CLI prints.
    let page = dom(
        &browser,
        &profile,
        &log,
        &format!("{}edit?action=run&scenario={}", s.url, enc(&quick)),
    );
    let (code, out, err) = pdsim(&[
        "run",
        "scenarios/quickstart.toml",
        "--out",
        dir.join("cli-run").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let summary = out.lines().next().unwrap();
    assert!(
        unescape(&page).contains(summary),
        "no {summary:?} in {page}"
    );
    assert_eq!(
        std::fs::read(dir.join("served/runs/quickstart/summary.json")).unwrap(),
        std::fs::read(dir.join("cli-run/summary.json")).unwrap(),
        "the served run's summary is the CLI's"
    );
    eprintln!(
        "serve in headless Chromium: 5 pages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One raw HTTP request; the status code and the body.
fn http(addr: &str, request: &str) -> (u16, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {out:?}"));
    (status, out)
}

fn get(addr: &str, path: &str) -> (u16, String) {
    http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
    )
}

/// Over plain HTTP: files under the served folder only (a `..` is 400, a hidden file or one
/// not there 404), oversized and malformed input refused, bad fields 400 naming them.
#[test]
fn serve_refuses_what_it_must_not_serve() {
    let dir = tmpdir("serve-http");
    let served = dir.join("served");
    std::fs::create_dir_all(served.join("a")).unwrap();
    std::fs::write(served.join("a/x.csv"), "1,2\n").unwrap();
    std::fs::write(served.join(".secret"), "no").unwrap();
    std::fs::write(dir.join("outside.txt"), "no").unwrap();
    let s = serve(&served, &["--max-requests", "5000"]);
    let (code, body) = get(&s.addr, "/files/a/x.csv");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains("text/plain") && body.ends_with("1,2\n"),
        "{body}"
    );
    for path in [
        "/files/../outside.txt",
        "/files/a/../../outside.txt",
        "/files/%2e%2e/outside.txt",
        "/files/a/%2E%2E/%2E%2E/outside.txt",
        "/files//etc/passwd",
    ] {
        assert_eq!(get(&s.addr, path).0, 400, "{path}");
    }
    for path in [
        "/files/.secret",
        "/files/a",
        "/files/nothing",
        "/nowhere",
        "/jobs/99",
    ] {
        assert_eq!(get(&s.addr, path).0, 404, "{path}");
    }
    // Malformed input: a broken escape, bytes that are not UTF-8, an unknown field.
    assert_eq!(get(&s.addr, "/plan?isl=%zz").0, 400);
    assert_eq!(get(&s.addr, "/edit?scenario=%ff&action=check").0, 400);
    let (code, body) = get(&s.addr, "/plan?model=llama-3.1-8b&colour=red");
    assert_eq!(code, 400);
    assert!(body.contains("unknown field `colour`"), "{body}");
    // A bad field, named with the CLI's message; a rate past --max-requests, named too.
    let q = "model=llama-3.1-8b&gpu=h100-sxm&isl=128&osl=64&ttft=500&tpot=50&gpus=2";
    let (code, body) = get(&s.addr, &format!("/plan?{q}&rate=0"));
    assert_eq!(code, 400);
    assert!(
        body.contains("id=\"err-rate\">--rate 0: must be a positive number"),
        "{body}"
    );
    let (code, body) = get(&s.addr, &format!("/plan?{q}&rate=100"));
    assert_eq!(code, 400);
    assert!(body.contains("--max-requests 5000"), "{body}");
    // A body over the cap is refused before it is read.
    let (code, _) = http(
        &s.addr,
        &format!(
            "POST /edit HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\naction=check",
            2 << 20
        ),
    );
    assert_eq!(code, 413);
    // A scenario that would run past --max-requests, named by its key.
    let big = "[run]\nname = \"big\"\nduration_s = 3600\n[model]\npreset = \"llama-3.1-8b\"\n[hardware]\ngpu = \"h100-sxm\"\n[[pools]]\nname = \"s\"\nrole = \"colocated\"\ninstances = 1\n[workload]\narrival = { process = \"poisson\", rate_per_s = 100 }\ninput_tokens = { dist = \"fixed\", value = 100 }\noutput_tokens = { dist = \"fixed\", value = 10 }\n";
    let (code, body) = http(
        &s.addr,
        &format!(
            "POST /edit HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\naction=run&scenario={}",
            "action=run&scenario=".len() + enc(big).len(),
            enc(big)
        ),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("run.max_requests: this run may have about 360000 arrivals"),
        "{body}"
    );
    assert_eq!(
        http(
            &s.addr,
            "DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .0,
        405
    );
}

/// Bad flags are exit 2 naming the flag, a port in use included.
#[test]
fn serve_bad_flags_exit_2_naming_the_flag() {
    let dir = tmpdir("serve-flags");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let d = dir.join("d");
    let d = d.to_str().unwrap();
    for (flag, args) in [
        ("--bind", vec!["--bind", "localhost:x", "--dir", d]),
        ("--port", vec!["--port", "70000", "--dir", d]),
        ("--port", vec!["--port", &port, "--dir", d]),
        (
            "--dir",
            vec!["--port", "0", "--dir", file.to_str().unwrap()],
        ),
        ("--wait", vec!["--port", "0", "--wait", "0", "--dir", d]),
        (
            "--max-requests",
            vec!["--port", "0", "--max-requests", "0", "--dir", d],
        ),
    ] {
        let mut argv = vec!["serve"];
        argv.extend(&args);
        let (code, _, err) = pdsim(&argv);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}
