//! The model's Markdown in Telegram's HTML subset (`<b>`, `<i>`, `<s>`, `<code>`,
//! `<pre>`, `<a href>`), with `&`, `<` and `>` escaped everywhere else. Pure.
//!
//! The agent splits a long reply with [`split_message`](crate::format::split_message),
//! which knows nothing of tags. So a rendering longer than one message is laid out for
//! it: blocks of at most [`CHUNK_CHARS`] characters, each closing every tag it opens
//! (a block cut in the middle of a bold run or a code block closes the tags and opens
//! them again in the next), separated by blank lines that appear nowhere else (a blank
//! line inside a code block keeps a space). `split_message` cuts at the last blank line
//! past the first fifth of its window, and with blocks this short there always is one,
//! so every part is whole blocks and every part is well-formed.

/// Longest text Telegram takes in one message.
pub const MAX_TEXT_CHARS: usize = 4_096;

/// Longest block of a rendering that needs splitting. Short enough that a 4,096
/// character window always holds a block boundary past its first fifth, even when
/// `split_message` measures that fifth in bytes of four-byte characters.
pub const CHUNK_CHARS: usize = 2_000;

/// Deepest nesting of inline markers rendered; deeper ones stay literal text.
const MAX_DEPTH: usize = 6;

/// Longest link target rendered as a link (a longer one stays text, so reopening the
/// tag in the next block costs little).
const MAX_HREF_CHARS: usize = 512;

/// One indivisible piece of rendered output.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// An opening tag (its full HTML) and the tag's name.
    Open(String, &'static str),
    /// Closes the innermost open tag.
    Close,
    /// Text without whitespace, unescaped.
    Word(String),
    /// One whitespace character: where a long block may be cut.
    Gap(char),
}

/// Renders `markdown` as Telegram HTML, laid out for splitting when it is longer than
/// one message (see the module's notes).
pub fn markdown_to_telegram_html(markdown: &str) -> String {
    let blocks = blocks(markdown);
    let plain = blocks
        .iter()
        .map(|block| emit(block))
        .collect::<Vec<_>>()
        .join("\n\n");
    if plain.chars().count() <= MAX_TEXT_CHARS {
        return plain;
    }
    blocks
        .iter()
        .flat_map(|block| chunk(block, CHUNK_CHARS))
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// `&`, `<` and `>` as entities.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            other => out.push(other),
        }
    }
    out
}

fn emit(pieces: &[Piece]) -> String {
    let mut out = String::new();
    let mut stack = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Open(html, name) => {
                out.push_str(html);
                stack.push(*name);
            }
            Piece::Close => {
                let name = stack.pop().expect("pieces close only what they opened");
                out.push_str(&format!("</{name}>"));
            }
            Piece::Word(word) => out.push_str(&escape(word)),
            Piece::Gap(gap) => out.push(*gap),
        }
    }
    out
}

/// Packs one block into pieces of at most `limit` characters, each well-formed.
fn chunk(pieces: &[Piece], limit: usize) -> Vec<String> {
    let mut packer = Packer {
        limit,
        chunks: Vec::new(),
        current: String::new(),
        length: 0,
        stack: Vec::new(),
        fresh: true,
    };
    for piece in pieces {
        match piece {
            Piece::Open(html, name) => {
                let cost = html.chars().count() + name.len() + 3;
                if !packer.fits(cost) {
                    packer.cut();
                }
                packer.push(html);
                packer.stack.push((html.clone(), name));
            }
            Piece::Close => {
                let (_, name) = packer.stack.pop().expect("pieces close what they opened");
                packer.push(&format!("</{name}>"));
            }
            Piece::Gap(gap) => {
                if packer.fits(1) {
                    packer.push(&gap.to_string());
                } else {
                    // The cut replaces the gap.
                    packer.cut();
                }
            }
            Piece::Word(word) => {
                let escaped = escape(word);
                let cost = escaped.chars().count();
                if !packer.fits(cost) && !packer.fresh {
                    packer.cut();
                }
                if packer.fits(cost) {
                    packer.push(&escaped);
                    continue;
                }
                // A word longer than a block: cut between characters, never inside an
                // entity.
                for character in word.chars() {
                    let escaped = escape(&character.to_string());
                    if !packer.fits(escaped.chars().count()) && !packer.fresh {
                        packer.cut();
                    }
                    packer.push(&escaped);
                }
            }
        }
    }
    packer.finish()
}

struct Packer<'a> {
    limit: usize,
    chunks: Vec<String>,
    current: String,
    length: usize,
    stack: Vec<(String, &'a str)>,
    // Nothing but reopened tags in `current` yet.
    fresh: bool,
}

impl Packer<'_> {
    fn closing_length(&self) -> usize {
        self.stack.iter().map(|(_, name)| name.len() + 3).sum()
    }

    fn fits(&self, cost: usize) -> bool {
        self.length + cost + self.closing_length() <= self.limit
    }

    fn push(&mut self, text: &str) {
        self.current.push_str(text);
        self.length += text.chars().count();
        if !text.trim().is_empty() && !text.starts_with('<') {
            self.fresh = false;
        }
    }

    fn cut(&mut self) {
        // A chunk of tags around nothing would be a message without text.
        if self.fresh {
            return;
        }
        let mut done = std::mem::take(&mut self.current);
        for (_, name) in self.stack.iter().rev() {
            done.push_str(&format!("</{name}>"));
        }
        self.chunks.push(done);
        self.current = self.stack.iter().map(|(html, _)| html.as_str()).collect();
        self.length = self.current.chars().count();
        self.fresh = true;
    }

    fn finish(mut self) -> Vec<String> {
        assert!(self.stack.is_empty(), "a block closes every tag it opens");
        if !self.fresh {
            self.chunks.push(std::mem::take(&mut self.current));
        }
        self.chunks
            .into_iter()
            .map(|chunk| chunk.trim().to_string())
            .filter(|chunk| !chunk.is_empty())
            .collect()
    }
}

/// The Markdown's blocks (paragraphs, lists, code blocks), as pieces.
fn blocks(markdown: &str) -> Vec<Vec<Piece>> {
    let mut blocks = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut fence: Option<Vec<Piece>> = None;
    let mut fence_lines = 0usize;
    for line in markdown.split('\n') {
        let line = line.trim_end_matches('\r');
        if let Some(code) = fence.as_mut() {
            if line.trim_start().starts_with("```") {
                code.push(Piece::Close);
                if matches!(code.get(1), Some(Piece::Open(_, "code"))) {
                    code.push(Piece::Close);
                }
                blocks.push(fence.take().expect("inside a fence"));
                continue;
            }
            if fence_lines > 0 {
                code.push(Piece::Gap('\n'));
            }
            fence_lines += 1;
            // A blank line inside code keeps a space: blank lines separate blocks only.
            if line.trim().is_empty() {
                code.push(Piece::Gap(' '));
            }
            words(line, code);
            continue;
        }
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            if !current.is_empty() {
                blocks.push(std::mem::take(&mut current));
            }
            let mut code = vec![Piece::Open("<pre>".to_string(), "pre")];
            let language: String = info
                .trim()
                .chars()
                .take_while(|character| {
                    character.is_ascii_alphanumeric() || matches!(character, '+' | '-' | '_' | '#')
                })
                .take(32)
                .collect();
            if !language.is_empty() {
                code.push(Piece::Open(
                    format!("<code class=\"language-{language}\">"),
                    "code",
                ));
            }
            fence = Some(code);
            fence_lines = 0;
            continue;
        }
        if trimmed.is_empty() {
            if !current.is_empty() {
                blocks.push(std::mem::take(&mut current));
            }
            continue;
        }
        if !current.is_empty() {
            current.push(Piece::Gap('\n'));
        }
        line_pieces(line, &mut current);
    }
    // An unclosed code block is closed at the end.
    if let Some(mut code) = fence {
        code.push(Piece::Close);
        if matches!(code.get(1), Some(Piece::Open(_, "code"))) {
            code.push(Piece::Close);
        }
        blocks.push(code);
    }
    if !current.is_empty() {
        blocks.push(current);
    }
    blocks
}

fn line_pieces(line: &str, out: &mut Vec<Piece>) {
    let indent = &line[..line.len() - line.trim_start().len()];
    let body = line.trim_start();
    let heading = body
        .strip_prefix('#')
        .map(|rest| rest.trim_start_matches('#'))
        .filter(|rest| rest.starts_with(' '));
    if let Some(title) = heading {
        out.push(Piece::Open("<b>".to_string(), "b"));
        inline(title.trim(), out, 1, false);
        out.push(Piece::Close);
        return;
    }
    for gap in indent.chars() {
        out.push(Piece::Gap(gap));
    }
    match ["* ", "- ", "+ "]
        .iter()
        .find_map(|bullet| body.strip_prefix(bullet))
    {
        Some(item) => {
            out.push(Piece::Word("•".to_string()));
            out.push(Piece::Gap(' '));
            inline(item, out, 0, false);
        }
        None => inline(body, out, 0, false),
    }
}

/// Text as words and gaps.
fn words(text: &str, out: &mut Vec<Piece>) {
    let mut word = String::new();
    for character in text.chars() {
        if character.is_whitespace() {
            if !word.is_empty() {
                out.push(Piece::Word(std::mem::take(&mut word)));
            }
            out.push(Piece::Gap(if character == '\t' { ' ' } else { character }));
        } else {
            word.push(character);
        }
    }
    if !word.is_empty() {
        out.push(Piece::Word(word));
    }
}

/// Inline Markdown: code spans, bold, italic, strikethrough, links. Every tag emitted
/// is closed in the same call, so the pieces always nest.
fn inline(text: &str, out: &mut Vec<Piece>, depth: usize, in_link: bool) {
    let mut literal = String::new();
    let mut index = 0;
    while index < text.len() {
        let rest = &text[index..];
        let before = text[..index].chars().next_back();
        if let Some((consumed, pieces)) = marker(rest, before, depth, in_link) {
            words(&std::mem::take(&mut literal), out);
            out.extend(pieces);
            index += consumed;
            continue;
        }
        let character = rest.chars().next().expect("index is inside the text");
        literal.push(character);
        index += character.len_utf8();
    }
    words(&literal, out);
}

// The span starting at `rest`, if a marker opens one there: (bytes consumed, pieces).
fn marker(
    rest: &str,
    before: Option<char>,
    depth: usize,
    in_link: bool,
) -> Option<(usize, Vec<Piece>)> {
    if let Some(after) = rest.strip_prefix('`') {
        let end = after.find('`').filter(|&end| end > 0)?;
        let mut pieces = vec![Piece::Open("<code>".to_string(), "code")];
        words(&after[..end], &mut pieces);
        pieces.push(Piece::Close);
        return Some((end + 2, pieces));
    }
    if depth >= MAX_DEPTH {
        return None;
    }
    for (open, tag) in [("**", "b"), ("__", "b"), ("~~", "s")] {
        if let Some(after) = rest.strip_prefix(open) {
            let end = after.find(open)?;
            let inner = &after[..end];
            if inner.trim().is_empty() || inner.starts_with(' ') || inner.ends_with(' ') {
                return None;
            }
            return Some((end + 2 * open.len(), wrap(tag, inner, depth, in_link)));
        }
    }
    for open in ['*', '_'] {
        if let Some(after) = rest.strip_prefix(open) {
            // `snake_case` and `2*3*4` are not emphasis.
            if before.is_some_and(char::is_alphanumeric) || after.starts_with(char::is_whitespace) {
                return None;
            }
            let end = after
                .char_indices()
                .find(|&(offset, character)| {
                    character == open
                        && offset > 0
                        && !after[..offset].ends_with(char::is_whitespace)
                        && !after[offset + 1..].starts_with(char::is_alphanumeric)
                        && !after[offset + 1..].starts_with(open)
                })
                .map(|(offset, _)| offset)?;
            return Some((end + 2, wrap("i", &after[..end], depth, in_link)));
        }
    }
    if !in_link && let Some(after) = rest.strip_prefix('[') {
        let close = after.find("](")?;
        let label = &after[..close];
        let target = &after[close + 2..];
        let end = target.find(')')?;
        let url = &target[..end];
        // Not `tg://`: `tg://user?id=N` mentions (pings) a user.
        let allowed = ["https://", "http://", "mailto:"]
            .iter()
            .any(|scheme| url.to_ascii_lowercase().starts_with(scheme));
        if label.is_empty()
            || label.contains('[')
            || !allowed
            || url.contains(char::is_whitespace)
            || url.chars().count() > MAX_HREF_CHARS
        {
            return None;
        }
        let href = escape(url).replace('"', "&quot;");
        let mut pieces = vec![Piece::Open(format!("<a href=\"{href}\">"), "a")];
        inline(label, &mut pieces, depth + 1, true);
        pieces.push(Piece::Close);
        return Some((close + 2 + end + 2, pieces));
    }
    None
}

fn wrap(tag: &'static str, inner: &str, depth: usize, in_link: bool) -> Vec<Piece> {
    let mut pieces = vec![Piece::Open(format!("<{tag}>"), tag)];
    inline(inner, &mut pieces, depth + 1, in_link);
    pieces.push(Piece::Close);
    pieces
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn markdown_becomes_telegram_html() {
        assert_eq!(
            markdown_to_telegram_html(
                "## Plan & <goals>\n**Due** *today*, ~~not~~ [docs](https://x.example/a?b=1&c=2)\n* item\n`a<b>*c*`"
            ),
            "<b>Plan &amp; &lt;goals&gt;</b>\n<b>Due</b> <i>today</i>, <s>not</s> \
             <a href=\"https://x.example/a?b=1&amp;c=2\">docs</a>\n• item\n<code>a&lt;b&gt;*c*</code>"
        );
        assert_eq!(
            markdown_to_telegram_html("```rust\nlet a = b && c;\n\nfn x() {}\n```\nafter"),
            "<pre><code class=\"language-rust\">let a = b &amp;&amp; c;\n \nfn x() {}</code></pre>\n\nafter"
        );
    }

    #[test]
    fn what_is_not_markup_stays_text() {
        assert_eq!(
            markdown_to_telegram_html("snake_case_name 2*3*4 a * b [x](javascript:alert(1)) **"),
            "snake_case_name 2*3*4 a * b [x](javascript:alert(1)) **"
        );
        assert_eq!(
            markdown_to_telegram_html("<script>alert('x')</script> & co"),
            "&lt;script&gt;alert('x')&lt;/script&gt; &amp; co"
        );
        assert_eq!(
            markdown_to_telegram_html("[a \"quote](https://x.example/\"onclick)"),
            "<a href=\"https://x.example/&quot;onclick\">a \"quote</a>"
        );
    }

    #[test]
    fn tg_links_that_would_ping_a_user_stay_text() {
        for markdown in ["[hi](tg://user?id=123456)", "[hi](TG://user?id=123456)"] {
            let rendered = markdown_to_telegram_html(markdown);
            assert!(!rendered.contains("<a"), "{markdown} → {rendered}");
            assert_eq!(rendered, markdown);
        }
    }

    #[test]
    fn a_long_block_is_cut_with_its_tags_closed_and_reopened() {
        let markdown = format!("**{}**", "word ".repeat(1_000).trim_end());
        let rendered = markdown_to_telegram_html(&markdown);
        let blocks: Vec<&str> = rendered.split("\n\n").collect();
        assert!(blocks.len() >= 3, "{} blocks", blocks.len());
        for block in blocks {
            assert!(block.chars().count() <= CHUNK_CHARS);
            assert!(
                block.starts_with("<b>") && block.ends_with("</b>"),
                "{block}"
            );
        }
    }

    #[test]
    fn no_block_is_tags_around_nothing() {
        // The last line of the code block is blank, and a cut falls right before it.
        let code = "x".repeat(CHUNK_CHARS - "<pre></pre>".len());
        let rendered =
            markdown_to_telegram_html(&format!("```\n{code}\n\n```\n\n{}", "y ".repeat(2_100)));
        assert!(
            rendered.starts_with(&format!("<pre>{code}</pre>\n\ny y")),
            "{}",
            &rendered[..40]
        );
        assert!(!rendered.contains("<pre></pre>"));
    }

    #[test]
    fn a_huge_word_is_cut_between_entities() {
        let rendered = markdown_to_telegram_html(&"&".repeat(5_000));
        for block in rendered.split("\n\n") {
            assert!(block.chars().count() <= CHUNK_CHARS);
            assert!(block.starts_with("&amp;") && block.ends_with("&amp;"));
            assert_eq!(block.replace("&amp;", ""), "");
        }
    }
}
