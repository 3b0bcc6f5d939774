//! The sections as plain text (underlined titles, aligned tables) or as Markdown.

use super::{Block, Section};

/// The narrative as plain text: titles underlined, bullets and quotes indented, tables in
/// aligned columns.
pub(super) fn render_text(title: &str, sections: &[Section]) -> String {
    let mut s = format!("{title}\n{}\n", "=".repeat(title.chars().count()));
    for sec in sections {
        s += &format!(
            "\n{}\n{}\n",
            sec.title,
            "-".repeat(sec.title.chars().count())
        );
        for b in &sec.blocks {
            match b {
                Block::Para(p) => s += &format!("{p}\n"),
                Block::Quote(q) => s += &format!("  sglang: \"{q}\"\n"),
                Block::Bullets(v) => {
                    for l in v {
                        s += &format!("  - {l}\n");
                    }
                }
                Block::Table(head, rows) => {
                    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
                    for r in rows {
                        for (i, c) in r.iter().enumerate() {
                            w[i] = w[i].max(c.chars().count());
                        }
                    }
                    let line = |cells: &[String]| {
                        let mut l = String::from(" ");
                        for (i, c) in cells.iter().enumerate() {
                            let pad = w[i] - c.chars().count();
                            l += &format!(" {c}{}", " ".repeat(pad));
                            l += if i + 1 < cells.len() { " " } else { "" };
                        }
                        l.trim_end().to_string() + "\n"
                    };
                    s += &line(head);
                    for r in rows {
                        s += &line(r);
                    }
                }
            }
        }
    }
    s
}

/// The narrative as Markdown: one `##` per section, sglang's words as a quote, tables with
/// `|` escaped in cells.
pub(super) fn render_markdown(title: &str, sections: &[Section]) -> String {
    let cell = |c: &str| c.replace('|', "\\|");
    let mut s = format!("# {title}\n");
    for sec in sections {
        s += &format!("\n## {}\n\n", sec.title);
        for b in &sec.blocks {
            match b {
                Block::Para(p) => s += &format!("{p}\n\n"),
                Block::Quote(q) => s += &format!("> sglang: `{q}`\n\n"),
                Block::Bullets(v) => {
                    for l in v {
                        s += &format!("- {l}\n");
                    }
                    s += "\n";
                }
                Block::Table(head, rows) => {
                    s += &format!(
                        "| {} |\n|{}\n",
                        head.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "),
                        "---|".repeat(head.len())
                    );
                    for r in rows {
                        s += &format!(
                            "| {} |\n",
                            r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
                        );
                    }
                    s += "\n";
                }
            }
        }
    }
    s
}
