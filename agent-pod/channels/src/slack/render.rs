//! The model's Markdown in Slack's mrkdwn: `**bold**` → `*bold*`, `*italic*` →
//! `_italic_`, `~~strike~~` → `~strike~`, `[text](url)` → `<url|text>`, headings →
//! bold lines, bullets → `•`, and `&`, `<`, `>` escaped as Slack requires (its own
//! markup — links, the leading `>` of a quote — stays literal).
//!
//! The output is also safe to split: the agent cuts replies with
//! [`split_message`](crate::format::split_message) at [`MAX_TEXT_CHARS`](super::MAX_TEXT_CHARS),
//! which prefers blank lines. Blank lines here only ever separate blocks (paragraphs
//! and code blocks, never inside one: an empty code line becomes a single space), and
//! no block is longer than [`MAX_BLOCK_CHARS`] — longer code is closed and reopened,
//! longer paragraphs are broken where no link or code span is open. A window of 4,000
//! characters then always holds a blank line past its first fifth, so every part the
//! agent sends is whole mrkdwn, every code block closed.

use crate::format::map_links;

/// Longest block between blank lines. Under half the part limit, so a part always ends
/// at a block boundary (even when the rest of its window is four-byte characters).
pub const MAX_BLOCK_CHARS: usize = 1_800;

const FENCE: &str = "```";

enum Block {
    Prose(Vec<String>),
    Code(Vec<String>),
}

/// Markdown → mrkdwn, in blocks no longer than [`MAX_BLOCK_CHARS`].
pub fn markdown_to_mrkdwn(markdown: &str) -> String {
    let mut rendered = Vec::new();
    for block in blocks(markdown) {
        match block {
            Block::Prose(lines) => {
                let lines: Vec<String> = lines.iter().map(|line| prose_line(line)).collect();
                rendered.extend(cut_prose(&lines));
            }
            Block::Code(lines) => rendered.extend(cut_code(&lines)),
        }
    }
    rendered.join("\n\n")
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut paragraph: Vec<String> = Vec::new();
    let mut code: Option<Vec<String>> = None;
    let flush = |paragraph: &mut Vec<String>, blocks: &mut Vec<Block>| {
        if !paragraph.is_empty() {
            blocks.push(Block::Prose(std::mem::take(paragraph)));
        }
    };
    for line in markdown.lines() {
        let trimmed = line.trim();
        if let Some(lines) = code.as_mut() {
            if trimmed.starts_with(FENCE) {
                blocks.push(Block::Code(code.take().unwrap_or_default()));
            } else {
                lines.push(line.to_string());
            }
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix(FENCE) {
            flush(&mut paragraph, &mut blocks);
            // ```one line``` is a whole block; otherwise the rest is a language tag,
            // which Slack would show as code.
            match rest.strip_suffix(FENCE) {
                Some(inline) if !inline.is_empty() => {
                    blocks.push(Block::Code(vec![inline.to_string()]))
                }
                _ => code = Some(Vec::new()),
            }
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut paragraph, &mut blocks);
        } else {
            paragraph.push(line.trim_end().to_string());
        }
    }
    flush(&mut paragraph, &mut blocks);
    // An unclosed fence runs to the end, as Markdown reads it.
    if let Some(lines) = code {
        blocks.push(Block::Code(lines));
    }
    blocks
}

/// `&`, `<` and `>` as Slack requires them in text.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn prose_line(line: &str) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let body = line.trim_start();
    if let Some(title) = body
        .strip_prefix('#')
        .map(|rest| rest.trim_start_matches('#'))
        .filter(|rest| rest.starts_with(' '))
    {
        let title = inline(title.trim()).replace('*', "");
        return format!("*{title}*");
    }
    for bullet in ["* ", "- ", "+ "] {
        if let Some(item) = body.strip_prefix(bullet) {
            return format!("{indent}• {}", inline(item));
        }
    }
    // A quote's `>` is Slack's own markup.
    if let Some(quoted) = body.strip_prefix("> ") {
        return format!("> {}", inline(quoted));
    }
    format!("{indent}{}", inline(body))
}

// One line's inline markup; code spans are only escaped.
fn inline(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 16);
    let segments: Vec<&str> = line.split('`').collect();
    // An unpaired last backtick is text, not a code span.
    let paired = segments.len() % 2 == 1;
    for (index, segment) in segments.iter().enumerate() {
        if index > 0 {
            out.push('`');
        }
        if index % 2 == 1 && (paired || index + 1 < segments.len()) {
            out.push_str(&escape(segment));
        } else {
            out.push_str(&links_and_emphasis(segment));
        }
    }
    out
}

// `[text](url)` → `<url|text>`; emphasis converted in the text around links.
fn links_and_emphasis(segment: &str) -> String {
    map_links(segment, emphasis, |label, url| {
        // Only web and mail links: any other target (`!channel`, `!here`,
        // `!subteam^S…`, `@U…`) would be Slack markup that pings people.
        if !is_link_target(url) {
            return None;
        }
        let label = escape(label);
        let url = escape(url);
        Some(if label.is_empty() || label == url {
            format!("<{url}>")
        } else {
            format!("<{url}|{label}>")
        })
    })
}

/// Whether `url` may become a `<url|text>` link: a whitespace-free `https://`,
/// `http://` or `mailto:` address (any case).
fn is_link_target(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    !url.contains(char::is_whitespace)
        && ["https://", "http://", "mailto:"]
            .iter()
            .any(|scheme| lower.starts_with(scheme) && lower.len() > scheme.len())
}

fn emphasis(text: &str) -> String {
    const BOLD: char = '\u{1}';
    escape(text)
        .replace("**", &BOLD.to_string())
        .replace("__", &BOLD.to_string())
        .replace('*', "_")
        .replace(BOLD, "*")
        .replace("~~", "~")
}

// A paragraph's lines in blocks of at most MAX_BLOCK_CHARS.
fn cut_prose(lines: &[String]) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current = String::new();
    for line in lines {
        for piece in cut_line(line) {
            let extra = usize::from(!current.is_empty()) + piece.chars().count();
            if !current.is_empty() && current.chars().count() + extra > MAX_BLOCK_CHARS {
                blocks.push(std::mem::take(&mut current));
            }
            if !current.is_empty() {
                current.push('\n');
            }
            current.push_str(&piece);
        }
    }
    if !current.is_empty() {
        blocks.push(current);
    }
    blocks
}

// A line longer than a block, cut at spaces outside links and code spans (else
// anywhere outside an entity).
fn cut_line(line: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut rest = line;
    while rest.chars().count() > MAX_BLOCK_CHARS {
        let window_end = rest
            .char_indices()
            .nth(MAX_BLOCK_CHARS)
            .map_or(rest.len(), |(offset, _)| offset);
        let window = &rest[..window_end];
        let spaces: Vec<usize> = window
            .char_indices()
            .rev()
            .filter(|(offset, character)| *character == ' ' && *offset > 0)
            .map(|(offset, _)| offset)
            .collect();
        // Best a space outside links and code spans, then one outside links (a stray
        // backtick upsets the count of spans), then any space.
        let cut = spaces
            .iter()
            .find(|&&offset| !in_link(window, offset) && !in_code_span(window, offset))
            .or_else(|| spaces.iter().find(|&&offset| !in_link(window, offset)))
            .or_else(|| spaces.first())
            .copied()
            .unwrap_or_else(|| {
                // No space: step back out of an `&amp;`-style entity cut short.
                match window.rfind('&') {
                    Some(amp) if window.len() - amp < 5 && !window[amp..].contains(';') => amp,
                    _ => window.len(),
                }
            });
        let cut = if cut == 0 { window.len() } else { cut };
        pieces.push(rest[..cut].trim_end().to_string());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest.to_string());
    }
    pieces
}

// Whether `offset` of `text` lies inside a `<…>` link. Escaped text has no literal `<`
// or `>` but Slack's own markup.
fn in_link(text: &str, offset: usize) -> bool {
    let before = &text[..offset];
    match (before.rfind('<'), before.rfind('>')) {
        (Some(open), Some(close)) => open > close,
        (Some(_), None) => true,
        _ => false,
    }
}

// Whether `offset` of `text` lies inside a `` `…` `` code span.
fn in_code_span(text: &str, offset: usize) -> bool {
    text[..offset].matches('`').count() % 2 == 1
}

// Code lines in closed blocks of at most MAX_BLOCK_CHARS, with no blank line inside.
fn cut_code(lines: &[String]) -> Vec<String> {
    // Room for the fences and their line breaks.
    let room = MAX_BLOCK_CHARS - 2 * (FENCE.len() + 1);
    let mut pieces = Vec::new();
    for line in lines {
        let line = escape(line);
        let line = if line.trim().is_empty() {
            " ".to_string()
        } else {
            line
        };
        let mut rest = line.as_str();
        while rest.chars().count() > room {
            let cut = rest
                .char_indices()
                .nth(room)
                .map_or(rest.len(), |(offset, _)| offset);
            pieces.push(rest[..cut].to_string());
            rest = &rest[cut..];
        }
        pieces.push(rest.to_string());
    }
    let mut blocks = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut length = 0;
    for piece in pieces {
        let extra = piece.chars().count() + 1;
        if !current.is_empty() && length + extra > room {
            blocks.push(fenced(&current));
            current.clear();
            length = 0;
        }
        length += extra;
        current.push(piece);
    }
    if !current.is_empty() || blocks.is_empty() {
        blocks.push(fenced(&current));
    }
    blocks
}

fn fenced(lines: &[String]) -> String {
    format!("{FENCE}\n{}\n{FENCE}", lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;
    use crate::format::split_message;

    fn block() -> impl Strategy<Value = String> {
        prop_oneof![
            // Prose: words (some multi-byte) with emphasis, links and code spans.
            proptest::collection::vec(
                "[a-zž€😀]{1,9}|\\*\\*b\\*\\*|`c<d`|\\[l\\]\\(https://x\\.example/a_b\\)|<|&|`",
                1..900
            )
            .prop_map(|words| words.join(" ")),
            // Code: lines, some empty, some long.
            proptest::collection::vec("[a-z =<>&;😀]{0,120}", 1..120)
                .prop_map(|lines| format!("```rust\n{}\n```", lines.join("\n"))),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn every_split_part_is_whole_mrkdwn(blocks in proptest::collection::vec(block(), 1..12)) {
            let rendered = markdown_to_mrkdwn(&blocks.join("\n\n"));
            for part in split_message(&rendered, super::super::MAX_TEXT_CHARS) {
                prop_assert!(part.chars().count() <= super::super::MAX_TEXT_CHARS);
                prop_assert_eq!(part.matches(FENCE).count() % 2, 0, "a code block left open: {}", part);
                for block in part.split("\n\n") {
                    let fences = block.matches(FENCE).count();
                    prop_assert!(fences == 0 || (fences == 2 && block.starts_with("```\n") && block.ends_with("\n```")), "{}", block);
                    prop_assert_eq!(block.matches('<').count(), block.matches('>').count(), "a link cut: {}", block);
                }
            }
        }
    }

    #[test]
    fn markdown_becomes_mrkdwn() {
        assert_eq!(
            markdown_to_mrkdwn(
                "## Plan & goals\n**Due** *today*, _soon_, ~~not~~ [the docs](https://x.example/a?b=1&c=2)\n* item\n- other\n`a<b>*c*`"
            ),
            "*Plan &amp; goals*\n*Due* _today_, _soon_, ~not~ <https://x.example/a?b=1&amp;c=2|the docs>\n• item\n• other\n`a&lt;b&gt;*c*`"
        );
    }

    #[test]
    fn text_that_looks_like_slack_markup_is_escaped() {
        assert_eq!(
            markdown_to_mrkdwn("if a < b && c > d then <!channel> <@U024BK3>"),
            "if a &lt; b &amp;&amp; c &gt; d then &lt;!channel&gt; &lt;@U024BK3&gt;"
        );
        assert_eq!(
            markdown_to_mrkdwn("> quoted <b>\n[https://a.example](https://a.example)"),
            "> quoted &lt;b&gt;\n<https://a.example>"
        );
    }

    #[test]
    fn links_to_anything_but_web_and_mail_addresses_cannot_ping() {
        for markdown in [
            "[ping](!channel)",
            "[!here](!here)",
            "[x](!subteam^S123)",
            "[x](@U123)",
            "[x](!everyone)",
            "[x](#C123)",
        ] {
            let rendered = markdown_to_mrkdwn(markdown);
            assert!(
                !rendered.contains("<!") && !rendered.contains("<@") && !rendered.contains("<#"),
                "{markdown} → {rendered}"
            );
        }
        assert_eq!(markdown_to_mrkdwn("[ping](!channel)"), "[ping](!channel)");
        assert_eq!(
            markdown_to_mrkdwn("[a](HTTPS://x.example) [m](mailto:a@x.example)"),
            "<HTTPS://x.example|a> <mailto:a@x.example|m>"
        );
    }

    #[test]
    fn code_blocks_lose_their_language_and_keep_their_text() {
        assert_eq!(
            markdown_to_mrkdwn("Run:\n\n```rust\nlet x = a < b;\n\n**not bold**\n```\nDone."),
            "Run:\n\n```\nlet x = a &lt; b;\n \n**not bold**\n```\n\nDone."
        );
        // An unclosed fence is closed.
        assert_eq!(markdown_to_mrkdwn("```\ncode"), "```\ncode\n```");
    }

    #[test]
    fn long_blocks_are_cut_into_closed_blocks() {
        let code = format!("```\n{}\n```", vec!["x = 1 + 2"; 400].join("\n"));
        let rendered = markdown_to_mrkdwn(&code);
        let blocks: Vec<&str> = rendered.split("\n\n").collect();
        assert!(blocks.len() > 1);
        for block in &blocks {
            assert!(
                block.starts_with("```\n") && block.ends_with("\n```"),
                "{block}"
            );
            assert!(block.chars().count() <= MAX_BLOCK_CHARS);
        }
        let words = vec!["word"; 1000].join(" ") + " [a link](https://x.example)";
        for block in markdown_to_mrkdwn(&words).split("\n\n") {
            assert!(block.chars().count() <= MAX_BLOCK_CHARS);
        }
    }
}
