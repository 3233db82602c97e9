//! Fitting a reply to a platform: splitting long text at the platform's limit on the
//! best boundary available, and turning the model's Markdown into the markup the
//! platform renders.

/// Splits `text` into parts of at most `limit` characters. Cuts at the last paragraph
/// break that fits, else the last line break, else the last sentence end or space,
/// and only as a last resort inside a word. Parts are trimmed; none is empty.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    assert!(limit > 0, "a platform limit is at least one character");
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if rest.chars().count() <= limit {
            parts.push(rest.to_string());
            break;
        }
        // Byte offset just past the `limit`-th character.
        let window_end = rest
            .char_indices()
            .nth(limit)
            .map_or(rest.len(), |(offset, _)| offset);
        let window = &rest[..window_end];
        let boundaries = [
            window.rfind("\n\n"),
            window.rfind('\n'),
            last_sentence_end(window),
            window.rfind(' '),
        ];
        // A cut in the first fifth would leave a tiny part: a coarser boundary further on
        // is better than a finer one at the very start, and any boundary is better than
        // cutting inside a word.
        let cut = boundaries
            .iter()
            .flatten()
            .copied()
            .find(|&offset| offset > window.len() / 5)
            .or_else(|| {
                boundaries
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&offset| offset > 0)
                    .max()
            })
            .unwrap_or(window_end);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        if !head.is_empty() {
            parts.push(head.to_string());
        }
        rest = tail.trim_start();
    }
    parts
}

fn last_sentence_end(window: &str) -> Option<usize> {
    [". ", "! ", "? "]
        .iter()
        .filter_map(|end| window.rfind(end).map(|offset| offset + 1))
        .max()
}

/// Markdown → WhatsApp's markup: `**bold**` → `*bold*`, `*italic*` → `_italic_`,
/// `~~strike~~` → `~strike~`, headings → bold lines, `[text](url)` → `text (url)`.
/// Code spans and fenced blocks are left as they are (WhatsApp renders both).
pub fn markdown_to_whatsapp(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut in_fence = false;
    for (index, line) in markdown.split('\n').enumerate() {
        if index > 0 {
            out.push('\n');
        }
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            out.push_str(line);
            continue;
        }
        if in_fence {
            out.push_str(line);
            continue;
        }
        let heading = line
            .trim_start()
            .strip_prefix('#')
            .map(|rest| rest.trim_start_matches('#'))
            .filter(|rest| rest.starts_with(' '));
        match heading {
            Some(title) => {
                out.push('*');
                out.push_str(&inline_to_whatsapp(title.trim()).replace('*', ""));
                out.push('*');
            }
            None => out.push_str(&inline_to_whatsapp(line)),
        }
    }
    out
}

// One line outside code fences; code spans are copied verbatim.
fn inline_to_whatsapp(line: &str) -> String {
    // A `* ` or `- ` bullet at the start stays a bullet (WhatsApp renders `- `).
    let (bullet, body) = match line.trim_start().strip_prefix("* ") {
        Some(rest) => (
            format!("{}- ", &line[..line.len() - line.trim_start().len()]),
            rest,
        ),
        None => (String::new(), line),
    };
    let mut out = bullet;
    for (index, segment) in body.split('`').enumerate() {
        if index > 0 {
            out.push('`');
        }
        if index % 2 == 1 {
            out.push_str(segment);
            continue;
        }
        const BOLD: char = '\u{1}';
        let text = links_to_text(segment)
            .replace("**", &BOLD.to_string())
            .replace("__", &BOLD.to_string())
            .replace('*', "_")
            .replace(BOLD, "*")
            .replace("~~", "~");
        out.push_str(&text);
    }
    out
}

// `[text](url)` → `text (url)`; anything else is copied.
fn links_to_text(segment: &str) -> String {
    map_links(segment, str::to_string, |label, url| {
        if url.contains(char::is_whitespace) {
            None
        } else if label == url {
            Some(url.to_string())
        } else {
            Some(format!("{label} ({url})"))
        }
    })
}

/// `segment` (a line's text outside code spans) with each Markdown link
/// `[label](url)` as `link(label, url)` makes it — `None` leaves it text — and the text
/// around the links as `text` makes it: the one link scanner every renderer uses.
pub(crate) fn map_links(
    segment: &str,
    text: impl Fn(&str) -> String,
    link: impl Fn(&str, &str) -> Option<String>,
) -> String {
    let mut out = String::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let found = after.find("](").and_then(|close| {
            let url_part = &after[close + 2..];
            let url = &url_part[..url_part.find(')')?];
            Some((close, url, link(&after[..close], url)?))
        });
        match found {
            Some((close, url, rendered)) => {
                out.push_str(&text(&rest[..open]));
                out.push_str(&rendered);
                rest = &after[close + 2 + url.len() + 1..];
            }
            None => {
                out.push_str(&text(&rest[..=open]));
                rest = after;
            }
        }
    }
    out.push_str(&text(rest));
    out
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn splits_on_paragraphs_before_lines_and_words() {
        let text = format!(
            "{}\n\n{}\n{}",
            "a".repeat(30),
            "b".repeat(20),
            "c".repeat(20)
        );
        assert_eq!(
            split_message(&text, 50),
            vec![
                "a".repeat(30),
                format!("{}\n{}", "b".repeat(20), "c".repeat(20))
            ]
        );
        assert_eq!(
            split_message("one two three four", 9),
            vec!["one two", "three", "four"]
        );
        assert_eq!(
            split_message("First one. Second one.", 15),
            vec!["First one.", "Second one."]
        );
    }

    #[test]
    fn cuts_inside_a_word_only_when_nothing_else_fits() {
        assert_eq!(split_message("abcdefghij", 4), vec!["abcd", "efgh", "ij"]);
        // Multi-byte characters count as one and are never cut in half.
        assert_eq!(split_message("žžžžž", 2), vec!["žž", "žž", "ž"]);
    }

    proptest! {
        #[test]
        fn parts_fit_and_keep_every_word(words in proptest::collection::vec("[a-zčž]{1,12}", 1..80), limit in 12usize..60) {
            let text = words.join(" ");
            let parts = split_message(&text, limit);
            prop_assert!(parts.iter().all(|part| part.chars().count() <= limit && !part.is_empty()));
            let joined = parts.join(" ");
            prop_assert_eq!(joined.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
        }
    }

    #[test]
    fn markdown_becomes_whatsapp_markup() {
        assert_eq!(
            markdown_to_whatsapp(
                "## Plan\n**Due** *today*, ~~not~~ [docs](https://x.example/a)\n* item\n`a*b*c`"
            ),
            "*Plan*\n*Due* _today_, ~not~ docs (https://x.example/a)\n- item\n`a*b*c`"
        );
        assert_eq!(
            markdown_to_whatsapp("```\n**kept**\n```\n[https://a.example](https://a.example)"),
            "```\n**kept**\n```\nhttps://a.example"
        );
        // Brackets that are not links are copied.
        assert_eq!(
            markdown_to_whatsapp("a [b] c (d) [e](f g)"),
            "a [b] c (d) [e](f g)"
        );
    }
}
