//! The pages of `pdsim serve`, as HTML strings: the one-line question's form, the scenario
//! editor, the bar put above a report, and the short pages (busy, still running, not found).
//! Every value echoed back is escaped here (`report::escape`); the pages need no script (the
//! editor's one line of script only moves the cursor to the error) and no external URL.

use std::fmt::Write as _;

use crate::report::escape::escape_html as esc;

/// The stylesheet of every page of the server and of the bar put above a report; its classes
/// start with `serve-` so they never meet a report's own.
const STYLE: &str = "<style>
.serve-page{font-family:system-ui,sans-serif;max-width:1100px;margin:1.5em auto;padding:0 1em;color:#222}
.serve-bar{font-family:system-ui,sans-serif;background:#f3f5f9;border-bottom:1px solid #ccd;padding:.6em 1em;margin:0 0 1em 0}
.serve-links a{margin-right:.9em}
.serve-nav{margin:0 0 .4em 0}
.serve-answer{background:#fff;border:1px solid #ccd;border-left:4px solid #2a6;padding:.6em .8em;white-space:pre-wrap;font-size:14px;margin:.5em 0}
.serve-answer.serve-no{border-left-color:#c33}
.serve-form{display:grid;grid-template-columns:9em 16em auto;gap:.45em .8em;align-items:center}
.serve-form input,.serve-form select{font:inherit;padding:.2em .3em}
.serve-hint{color:#666;font-size:90%}
.serve-err{color:#b00;font-weight:600}
.serve-banner{background:#fdecea;border:1px solid #e3a0a0;padding:.5em .8em;margin:.6em 0}
.serve-ok{background:#eaf6ec;border:1px solid #9c9;padding:.5em .8em;margin:.6em 0}
.serve-page textarea{width:100%;font:13px/1.35 ui-monospace,monospace;box-sizing:border-box}
.serve-src{font:13px/1.35 ui-monospace,monospace;background:#fafafa;border:1px solid #ddd;padding:.4em 0 .4em 3.5em;margin:.6em 0;white-space:pre}
.serve-src li{padding-left:.5em}
.serve-src li.serve-line-err{background:#fdd;outline:1px solid #e88}
.serve-page code,.serve-bar code{background:#eef;padding:0 .25em}
</style>";

/// A whole page: `title` and `body` (HTML) inside the server's frame, under the links to the
/// other pages.
pub fn page(title: &str, body: &str) -> String {
    bare(title, &format!("{}\n{body}", nav()))
}

/// [`page`] without the links (a body that brings its own, as [`report_bar`] does).
pub fn bare(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>{STYLE}</head>\n<body><div class=\"serve-page\">\n{body}\n</div></body></html>\n",
        esc(title)
    )
}

/// The links at the top of every page.
fn nav() -> String {
    "<div class=\"serve-nav\"><strong>pdsim serve</strong> — <a href=\"/\">the one-line question</a> · <a href=\"/edit\">the scenario editor</a></div>".to_string()
}

/// One field of the question's form: its name (the flag without `--`), the label, the unit.
pub struct Field {
    /// The form field's name, the `pdsim plan` flag without its dashes.
    pub name: &'static str,
    /// What it asks.
    pub label: &'static str,
    /// The unit and what leaving it empty means.
    pub hint: &'static str,
}

/// The question's fields, in the CLI's order.
pub const FIELDS: [Field; 8] = [
    Field {
        name: "model",
        label: "model",
        hint: "a preset or the Hugging Face id of one",
    },
    Field {
        name: "gpu",
        label: "GPU",
        hint: "a GPU preset",
    },
    Field {
        name: "isl",
        label: "prompt (isl)",
        hint: "tokens per request",
    },
    Field {
        name: "osl",
        label: "output (osl)",
        hint: "tokens per request",
    },
    Field {
        name: "ttft",
        label: "TTFT target",
        hint: "ms, each request (90 % must meet both targets)",
    },
    Field {
        name: "tpot",
        label: "TPOT target",
        hint: "ms, each request",
    },
    Field {
        name: "rate",
        label: "rate",
        hint: "requests/s; empty: the most the GPUs serve (each deployment's highest rate)",
    },
    Field {
        name: "gpus",
        label: "GPUs at most",
        hint: "per deployment; empty: 32",
    },
];

/// The one-line question as a form (GET, so an answer's address can be bookmarked and loaded
/// again), filled with `values` (field → text), each error (field → message) under its field;
/// `general` errors (an unknown field) above the form.
pub fn question_form(
    values: &[(String, String)],
    errors: &[(String, String)],
    general: &[String],
    earlier: &[(String, String)],
) -> String {
    let value = |f: &str| {
        values
            .iter()
            .find(|(k, _)| k == f)
            .map_or("", |(_, v)| v.as_str())
    };
    let mut b = String::new();
    b += "<h1>How many GPUs, and PD or not?</h1>\n<p>The planner in one line: the same as <code>pdsim plan --model M --gpu G --isl I --osl O --ttft MS --tpot MS (--rate R [--gpus N] | --gpus N)</code>. It builds the scenario (the presets, Poisson arrivals at the rate, fixed lengths, each request's TTFT and TPOT within the targets at 90 % attainment) and a grid of disaggregated and colocated deployments, simulates them and answers with the cheapest that meets the targets. A plan takes seconds to minutes; one runs at a time.</p>\n";
    for g in general {
        let _ = writeln!(b, "<p class=\"serve-banner serve-err\">{}</p>", esc(g));
    }
    b += "<form action=\"/plan\" method=\"get\" class=\"serve-form\">\n";
    for f in &FIELDS {
        let v = value(f.name);
        let input = match f.name {
            "model" => {
                let mut s = format!(
                    "<input id=\"f-model\" name=\"model\" list=\"models\" value=\"{}\"><datalist id=\"models\">",
                    esc(v)
                );
                for m in crate::spec::model::MODEL_PRESETS {
                    let _ = write!(s, "<option value=\"{}\">", esc(m));
                }
                s + "</datalist>"
            }
            "gpu" => {
                let mut s = "<select id=\"f-gpu\" name=\"gpu\">".to_string();
                let known = crate::spec::gpu::GPU_PRESETS.contains(&v);
                if !known {
                    // A value the list lacks (typed into the address) stays visible beside
                    // its message rather than silently becoming the first preset.
                    let _ = write!(s, "<option selected value=\"{0}\">{0}</option>", esc(v));
                }
                for g in crate::spec::gpu::GPU_PRESETS {
                    let _ = write!(
                        s,
                        "<option{} value=\"{g}\">{g}</option>",
                        if *g == v { " selected" } else { "" },
                        g = esc(g)
                    );
                }
                s + "</select>"
            }
            name => format!(
                "<input id=\"f-{name}\" name=\"{name}\" inputmode=\"decimal\" value=\"{}\">",
                esc(v)
            ),
        };
        let err = errors
            .iter()
            .filter(|(k, _)| k == f.name)
            .map(|(_, m)| {
                format!(
                    "<div class=\"serve-err\" id=\"err-{}\">{}</div>",
                    f.name,
                    esc(m)
                )
            })
            .collect::<String>();
        let _ = writeln!(
            b,
            "<label for=\"f-{n}\">{}</label><span>{input}</span><span class=\"serve-hint\">{}{err}</span>",
            esc(f.label),
            esc(f.hint),
            n = f.name
        );
    }
    b += "<span></span><span><button type=\"submit\">plan</button></span><span></span>\n</form>\n";
    if !earlier.is_empty() {
        b += "<h2>Earlier answers in this folder</h2>\n<ul>\n";
        for (href, label) in earlier {
            let _ = writeln!(b, "<li><a href=\"{}\">{}</a></li>", esc(href), esc(label));
        }
        b += "</ul>\n";
    }
    page("pdsim serve: the one-line question", &b)
}

/// What checking the editor's scenario found.
pub enum Checked {
    /// Not checked (the editor just opened).
    Nothing,
    /// Valid, with what to say about it (the name, the expected arrivals, warnings).
    Valid(Vec<String>),
    /// Invalid: the message, the key it names and its 1-based line.
    Invalid {
        /// The whole message, as `pdsim run` prints it.
        message: String,
        /// The dotted key (`pools.prefill.server.tp_size`), empty for the whole file.
        key: String,
        /// The line, where known.
        line: Option<usize>,
    },
}

/// The scenario editor: `text` in a textarea, the check and run buttons, and what a check
/// found — an error with its line marked in a numbered listing of the text.
pub fn editor(text: &str, checked: &Checked) -> String {
    let mut b = String::from(
        "<h1>Scenario editor</h1>\n<p><em>check</em> validates the scenario as <code>pdsim run</code> does (an error names its key and line); <em>run</em> runs it and shows the run's report (the same files as <code>pdsim run FILE --out DIR</code>; relative paths resolve from the served folder's <code>runs/</code>).</p>\n",
    );
    let err_line = match checked {
        Checked::Nothing => None,
        Checked::Valid(notes) => {
            b += "<div class=\"serve-ok\" id=\"valid\"><strong>valid</strong>";
            for n in notes {
                let _ = write!(b, "<br>{}", esc(n));
            }
            b += "</div>\n";
            None
        }
        Checked::Invalid { message, key, line } => {
            let _ = writeln!(
                b,
                "<div class=\"serve-banner\" id=\"error\"><span class=\"serve-err\">{}</span>{}<br>{}</div>",
                match line {
                    Some(l) => format!("<a href=\"#L{l}\">line {l}</a>"),
                    None => "the scenario".to_string(),
                },
                if key.is_empty() {
                    String::new()
                } else {
                    format!(", key <code id=\"error-key\">{}</code>", esc(key))
                },
                esc(message)
            );
            *line
        }
    };
    b += "<form action=\"/edit\" method=\"post\">\n";
    let _ = writeln!(
        b,
        "<textarea id=\"scenario\" name=\"scenario\" rows=\"28\" spellcheck=\"false\">{}</textarea>",
        esc(text)
    );
    b += "<p><button type=\"submit\" name=\"action\" value=\"check\">check</button> <button type=\"submit\" name=\"action\" value=\"run\">run</button></p>\n</form>\n";
    if let Some(l) = err_line {
        // The text again, numbered, the error's line marked and anchored (#L12): a textarea
        // cannot colour one of its lines.
        b += "<ol class=\"serve-src\" id=\"listing\">";
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let _ = write!(
                b,
                "<li id=\"L{n}\"{}>{}</li>",
                if n == l {
                    " class=\"serve-line-err\""
                } else {
                    ""
                },
                if line.is_empty() {
                    " ".to_string()
                } else {
                    esc(line)
                }
            );
        }
        b += "</ol>\n";
        // Puts the cursor on the error's line in the textarea; the page works without it.
        let _ = writeln!(
            b,
            "<script>(function(){{var t=document.getElementById('scenario'),l={l},p=0;for(var i=1;i<l;i++){{p=t.value.indexOf('\\n',p)+1;if(p<=0)return;}}var e=t.value.indexOf('\\n',p);t.focus();t.setSelectionRange(p,e<0?t.value.length:e);t.scrollTop=Math.max(0,(l-5)*17);}})();</script>"
        );
    }
    page("pdsim serve: scenario editor", &b)
}

/// The bar put above a report a plan or run wrote: what was asked (`command`, the CLI line
/// that writes the same files), the answer's text as the CLI prints it, and `links` (href,
/// label). `ok` colours the answer.
pub fn report_bar(command: &str, answer: &str, ok: bool, links: &[(String, String)]) -> String {
    let mut b = format!(
        "{STYLE}<div class=\"serve-bar\">{}<span class=\"serve-links\">files: ",
        nav()
    );
    for (href, label) in links {
        let _ = write!(b, "<a href=\"{}\">{}</a>", esc(href), esc(label));
    }
    b += "</span>";
    let _ = writeln!(
        b,
        "<pre class=\"serve-answer{}\" id=\"answer\">{}</pre><span class=\"serve-hint\">the same files as <code>{}</code></span></div>",
        if ok { "" } else { " serve-no" },
        esc(answer.trim_end()),
        esc(command)
    );
    b
}

/// `report` (a whole HTML page a plan or run wrote) with `bar` at the top of its body and a
/// base address `base` (`/files/DIR/`), so the report's own relative links (charts, files)
/// still resolve when it is shown at the question's address.
pub fn splice(report: &str, base: &str, bar: &str) -> String {
    let head = report.find("<head>").map(|i| i + "<head>".len());
    let body = report
        .find("<body")
        .and_then(|i| report[i..].find('>').map(|j| i + j + 1));
    match (head, body) {
        (Some(h), Some(b)) if h <= b => format!(
            "{}<base href=\"{}\">{}{bar}{}",
            &report[..h],
            esc(base),
            &report[h..b],
            &report[b..]
        ),
        // Not the page pdsim writes: the bar alone above a link to it.
        _ => bare(
            "pdsim serve",
            &format!(
                "{bar}<p><a href=\"{}index.html\">the report</a></p>",
                esc(base)
            ),
        ),
    }
}

/// A page with one message (`title` and `message` escaped).
pub fn message(title: &str, message: &str) -> String {
    page(
        title,
        &format!(
            "<h1>{}</h1>\n<p class=\"serve-banner\" id=\"message\">{}</p>",
            esc(title),
            esc(message)
        ),
    )
}

/// The page of a job still running after the wait: it reloads itself on the job's address.
pub fn running(id: u64, what: &str, wait_s: u64) -> String {
    let refresh = wait_s.clamp(2, 10);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{refresh};url=/jobs/{id}\"><title>pdsim serve: running</title>{STYLE}</head>\n<body><div class=\"serve-page\">{}<h1>Still running</h1><p id=\"running\">{} — this page reloads every {refresh} s until the answer is ready (<a href=\"/jobs/{id}\">job {id}</a>).</p></div></body></html>\n",
        nav(),
        esc(what)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything echoed is escaped: a value, an error, the scenario text and its listing.
    #[test]
    fn echoed_input_is_escaped() {
        let evil = "<script>alert(1)</script>\"'&";
        let f = question_form(
            &[("model".into(), evil.into()), ("gpu".into(), evil.into())],
            &[("isl".into(), evil.into())],
            &[evil.into()],
            &[(evil.into(), evil.into())],
        );
        assert!(!f.contains("<script>alert"), "{f}");
        assert!(f.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"));
        let e = editor(
            evil,
            &Checked::Invalid {
                message: evil.into(),
                key: evil.into(),
                line: Some(1),
            },
        );
        assert!(!e.contains("<script>alert"), "{e}");
        assert!(e.contains("<li id=\"L1\" class=\"serve-line-err\">&lt;script&gt;"));
        let r = report_bar(evil, evil, false, &[(evil.into(), evil.into())]);
        assert!(!r.contains("<script>alert"), "{r}");
        assert!(!message(evil, evil).contains("<script>alert"));
        assert!(!running(1, evil, 5).contains("<script>alert"));
    }

    /// The bar goes at the top of the report's body and its base address before its links.
    #[test]
    fn the_bar_is_spliced_into_the_report() {
        let r = "<!DOCTYPE html><html><head><title>t</title></head><body class=\"x\"><p>report</p></body></html>";
        let s = splice(r, "/files/a/", "<div>BAR</div>");
        assert!(s.starts_with("<!DOCTYPE html><html><head><base href=\"/files/a/\"><title>"));
        assert!(
            s.contains("<body class=\"x\"><div>BAR</div><p>report</p>"),
            "{s}"
        );
        let odd = splice("no html", "/files/a/", "<div>BAR</div>");
        assert!(odd.contains("BAR") && odd.contains("/files/a/index.html"));
    }
}
