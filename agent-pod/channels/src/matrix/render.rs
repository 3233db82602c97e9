//! The model's Markdown as a Matrix message: a plain `body` and an HTML
//! `formatted_body` in the subset Matrix clients render (`org.matrix.custom.html`).
//!
//! The agent renders a reply once, splits it at the platform limit and sends the parts
//! one by one, so every part must stand on its own. [`render`] therefore marks each
//! line of a fenced code block (an invisible separator in front): a part that starts
//! or ends in the middle of a block still knows which of its lines are code, and no
//! fence is ever left open. [`markdown_to_html`] converts one part with every tag it
//! opens closed in the same part, and escapes all text.

use crate::format::map_links;

/// Marks a line of a fenced code block in the rendered text (U+2063 INVISIBLE
/// SEPARATOR: not whitespace, so trimming a part keeps it).
const CODE_LINE: char = '\u{2063}';

/// The model's Markdown with fenced code blocks turned into marked lines (the fences
/// themselves are dropped and restored per part). Blank lines inside a block are
/// marked too, so a split prefers the paragraph breaks outside code.
pub fn render(markdown: &str) -> String {
    let mut out = Vec::new();
    let mut in_fence = false;
    for line in markdown.split('\n') {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            out.push(format!("{CODE_LINE}{line}"));
        } else {
            out.push(line.to_string());
        }
    }
    out.join("\n")
}

/// One rendered part as the plain-text `body`: Markdown, with its code lines fenced
/// again.
pub fn plain_body(part: &str) -> String {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in part.split('\n') {
        match line.strip_prefix(CODE_LINE) {
            Some(code) => {
                if !in_code {
                    out.push("```".to_string());
                    in_code = true;
                }
                out.push(code.to_string());
            }
            None => {
                if in_code {
                    out.push("```".to_string());
                    in_code = false;
                }
                out.push(line.to_string());
            }
        }
    }
    if in_code {
        out.push("```".to_string());
    }
    out.join("\n")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    None,
    Paragraph,
    Code,
    Quote,
    Bullets,
    Numbers,
}

impl Block {
    fn close(self) -> &'static str {
        match self {
            Block::None => "",
            Block::Paragraph => "</p>",
            Block::Code => "</code></pre>",
            Block::Quote => "</blockquote>",
            Block::Bullets => "</ul>",
            Block::Numbers => "</ol>",
        }
    }

    fn open(self) -> &'static str {
        match self {
            Block::None => "",
            Block::Paragraph => "<p>",
            Block::Code => "<pre><code>",
            Block::Quote => "<blockquote>",
            Block::Bullets => "<ul>",
            Block::Numbers => "<ol>",
        }
    }
}

/// One rendered part (or any Markdown) as Matrix HTML: headings, paragraphs, line
/// breaks, code blocks and spans, quotes, lists, bold, italics, strike-through and
/// http(s)/mailto links. Everything else is escaped text.
pub fn markdown_to_html(part: &str) -> String {
    let mut html = String::with_capacity(part.len() + part.len() / 4);
    let mut block = Block::None;
    let mut in_fence = false;
    for line in part.split('\n') {
        // Fences in Markdown that did not go through `render` (and marked lines).
        let code = if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            if !in_fence || block == Block::Code {
                continue;
            }
            html.push_str(block.close());
            block = Block::None;
            continue;
        } else if in_fence {
            Some(line)
        } else {
            line.strip_prefix(CODE_LINE)
        };
        let (kind, content) = match code {
            Some(code) => (Block::Code, code),
            None => classify(line),
        };
        if kind != block || matches!(kind, Block::None) {
            html.push_str(block.close());
            if kind == Block::None {
                block = Block::None;
                if let Some(heading) = heading(line) {
                    html.push_str(&heading);
                } else if let Some(rule) = rule(line) {
                    html.push_str(rule);
                }
                continue;
            }
            html.push_str(kind.open());
        } else {
            match kind {
                Block::Code => html.push('\n'),
                Block::Paragraph | Block::Quote => html.push_str("<br>"),
                _ => {}
            }
        }
        block = kind;
        match kind {
            Block::Code => html.push_str(&escape(content)),
            Block::Bullets | Block::Numbers => {
                html.push_str("<li>");
                html.push_str(&inline(content));
                html.push_str("</li>");
            }
            _ => html.push_str(&inline(content)),
        }
    }
    html.push_str(block.close());
    html
}

// A line outside code: its block kind and text. Blank lines, headings and rules are
// `Block::None` (they end the block before them).
fn classify(line: &str) -> (Block, &str) {
    let trimmed = line.trim_start();
    if trimmed.is_empty() || heading(line).is_some() || rule(line).is_some() {
        return (Block::None, "");
    }
    if let Some(rest) = trimmed.strip_prefix('>') {
        return (Block::Quote, rest.strip_prefix(' ').unwrap_or(rest));
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(rest) = trimmed.strip_prefix(bullet) {
            return (Block::Bullets, rest);
        }
    }
    let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
    if (1..=9).contains(&digits)
        && let Some(rest) = trimmed[digits..]
            .strip_prefix(". ")
            .or_else(|| trimmed[digits..].strip_prefix(") "))
    {
        return (Block::Numbers, rest);
    }
    (Block::Paragraph, line)
}

fn heading(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    let level = trimmed.bytes().take_while(|byte| *byte == b'#').count();
    let title = trimmed[level..].strip_prefix(' ')?;
    (1..=6)
        .contains(&level)
        .then(|| format!("<h{level}>{}</h{level}>", inline(title.trim())))
}

fn rule(line: &str) -> Option<&'static str> {
    let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    let is_rule = compact.len() >= 3
        && ["-", "*", "_"]
            .iter()
            .any(|mark| compact.chars().all(|c| c.to_string() == *mark));
    is_rule.then_some("<hr>")
}

/// Escapes text for HTML content and attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            other => out.push(other),
        }
    }
    out
}

// One line's inline Markdown: code spans verbatim (escaped), links, emphasis.
fn inline(line: &str) -> String {
    let segments: Vec<&str> = line.split('`').collect();
    let mut out = String::with_capacity(line.len());
    let mut index = 0;
    while index < segments.len() {
        // A code span needs its closing backtick; an odd one out stays literal.
        if index % 2 == 1 && index + 1 < segments.len() {
            out.push_str("<code>");
            out.push_str(&escape(segments[index]));
            out.push_str("</code>");
        } else {
            if index % 2 == 1 {
                out.push('`');
            }
            out.push_str(&links(segments[index]));
        }
        index += 1;
    }
    out
}

// `[label](url)` with an http(s) or mailto URL becomes a link; the rest is text.
fn links(segment: &str) -> String {
    map_links(segment, emphasis, |label, url| {
        let web_or_mail = !url.contains(char::is_whitespace)
            && ["https://", "http://", "mailto:"]
                .iter()
                .any(|scheme| url.to_ascii_lowercase().starts_with(scheme));
        web_or_mail.then(|| format!("<a href=\"{}\">{}</a>", escape(url), emphasis(label)))
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Pending,
    Open,
    Close,
}

// Escapes `text` and turns `**bold**`, `*italic*` and `~~strike~~` into tags. Only a
// delimiter that closes the innermost open one closes, so tags always nest; one
// without a partner stays literal.
fn emphasis(text: &str) -> String {
    const MARKERS: [(&str, &str); 3] = [("**", "strong"), ("~~", "del"), ("*", "em")];
    enum Piece {
        Text(String),
        Marker(usize, Role),
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut plain = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut position = 0;
    'scan: while position < chars.len() {
        for (marker_index, (marker, _)) in MARKERS.iter().enumerate() {
            let length = marker.chars().count();
            let matches = chars[position..]
                .iter()
                .take(length)
                .copied()
                .eq(marker.chars())
                && position + length <= chars.len();
            if !matches {
                continue;
            }
            let before = position.checked_sub(1).map(|at| chars[at]);
            let after = chars.get(position + length).copied();
            let closes_top = stack.last().is_some_and(
                |&top| matches!(pieces[top], Piece::Marker(index, _) if index == marker_index),
            );
            let open_elsewhere = stack
                .iter()
                .any(|&at| matches!(pieces[at], Piece::Marker(index, _) if index == marker_index));
            let can_close = before.is_some_and(|c| !c.is_whitespace());
            let can_open = after.is_some_and(|c| !c.is_whitespace());
            if closes_top && can_close {
                pieces.push(Piece::Text(std::mem::take(&mut plain)));
                let top = stack.pop().expect("checked above");
                pieces[top] = Piece::Marker(marker_index, Role::Open);
                pieces.push(Piece::Marker(marker_index, Role::Close));
            } else if !open_elsewhere && can_open {
                pieces.push(Piece::Text(std::mem::take(&mut plain)));
                stack.push(pieces.len());
                pieces.push(Piece::Marker(marker_index, Role::Pending));
            } else {
                plain.push_str(marker);
            }
            position += length;
            continue 'scan;
        }
        plain.push(chars[position]);
        position += 1;
    }
    pieces.push(Piece::Text(plain));
    let mut out = String::with_capacity(text.len());
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(&escape(&text)),
            Piece::Marker(index, Role::Pending) => out.push_str(MARKERS[index].0),
            Piece::Marker(index, Role::Open) => {
                out.push('<');
                out.push_str(MARKERS[index].1);
                out.push('>');
            }
            Piece::Marker(index, Role::Close) => {
                out.push_str("</");
                out.push_str(MARKERS[index].1);
                out.push('>');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::format::split_message;

    #[test]
    fn markdown_becomes_matrix_html_with_everything_escaped() {
        assert_eq!(
            markdown_to_html(
                "## Plan <b>\n**Due** *today*, ~~not~~ [docs](https://x.example/a?b=1&c=2)\n- one\n- `a<b>`\n\n> quoted\n1. first"
            ),
            "<h2>Plan &lt;b&gt;</h2><p><strong>Due</strong> <em>today</em>, <del>not</del> \
             <a href=\"https://x.example/a?b=1&amp;c=2\">docs</a></p><ul><li>one</li><li>\
             <code>a&lt;b&gt;</code></li></ul><blockquote>quoted</blockquote><ol><li>first</li></ol>"
        );
        // No javascript: links, no raw HTML, stray markers stay literal, tags nest.
        assert_eq!(
            markdown_to_html("[x](javascript:alert(1)) <script> 2 * 3 * 4 **a *b** c*"),
            "<p>[x](javascript:alert(1)) &lt;script&gt; 2 * 3 * 4 **a <em>b** c</em></p>"
        );
        assert_eq!(
            markdown_to_html("```rust\nlet a = \"<x>\";\n\nb\n```\nafter"),
            "<pre><code>let a = &quot;&lt;x&gt;&quot;;\n\nb</code></pre><p>after</p>"
        );
    }

    // Tags opened minus tags closed, and whether a closing tag ever came first.
    fn balanced(html: &str) -> bool {
        let mut stack = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find('<') {
            let Some(end) = rest[start..].find('>') else {
                return false;
            };
            let tag = &rest[start + 1..start + end];
            rest = &rest[start + end + 1..];
            let name = tag
                .split([' ', '/'])
                .find(|part| !part.is_empty())
                .unwrap_or("");
            if matches!(name, "br" | "hr") {
                continue;
            }
            if tag.starts_with('/') {
                if stack.pop() != Some(name.to_string()) {
                    return false;
                }
            } else {
                stack.push(name.to_string());
            }
        }
        stack.is_empty()
    }

    #[test]
    fn a_long_reply_split_anywhere_keeps_every_part_valid_and_its_code_as_code() {
        let code: Vec<String> = (0..200)
            .map(|index| format!("    let value_{index} = compute(\"<{index}>\");"))
            .collect();
        let markdown = format!(
            "# Report\n\n{}\n\n```rust\n{}\n```\n\n**Done** with *all* of it.",
            "Some **words** here. ".repeat(200),
            code.join("\n")
        );
        assert!(markdown.chars().count() > 10_000);
        let parts = split_message(&render(&markdown), super::super::MAX_TEXT_CHARS);
        assert!(parts.len() >= 2, "{} parts", parts.len());
        let mut code_lines_seen = 0;
        for part in &parts {
            assert!(part.chars().count() <= super::super::MAX_TEXT_CHARS);
            let html = markdown_to_html(part);
            assert!(balanced(&html), "unbalanced part: {html}");
            let body = plain_body(part);
            assert_eq!(body.matches("```").count() % 2, 0, "an open fence: {body}");
            assert!(!body.contains(CODE_LINE));
            for line in &code {
                if body.contains(line.as_str()) {
                    code_lines_seen += 1;
                    let escaped = escape(line);
                    let inside = html.split("<pre><code>").skip(1).any(|block| {
                        block
                            .split("</code></pre>")
                            .next()
                            .unwrap()
                            .contains(&escaped)
                    });
                    assert!(inside, "{line} is outside a code block in {html}");
                }
            }
        }
        assert_eq!(code_lines_seen, code.len());
        // Nothing is lost between the parts.
        let words = |text: &str| {
            text.split_whitespace()
                .filter(|word| *word != "```" && !word.starts_with("```"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let joined: Vec<String> = parts
            .iter()
            .flat_map(|part| words(&plain_body(part)))
            .collect();
        assert_eq!(joined, words(&markdown));
    }

    #[test]
    fn a_part_cut_inside_a_code_block_reopens_and_closes_it() {
        let rendered = render("intro\n```\nline one\n\nline two\n```\nafter");
        assert_eq!(
            rendered,
            format!("intro\n{CODE_LINE}line one\n{CODE_LINE}\n{CODE_LINE}line two\nafter")
        );
        let (first, second) = rendered.split_at(rendered.find("\n\u{2063}\n").unwrap());
        assert_eq!(
            markdown_to_html(first),
            "<p>intro</p><pre><code>line one</code></pre>"
        );
        assert_eq!(
            markdown_to_html(second.trim()),
            "<pre><code>\nline two</code></pre><p>after</p>"
        );
        assert_eq!(plain_body(first), "intro\n```\nline one\n```");
    }
}
