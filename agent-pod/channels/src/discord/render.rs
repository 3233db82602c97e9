//! The model's Markdown for Discord, which renders Markdown nearly as is. Two things
//! change: `@everyone` and `@here` are broken with a zero-width space (the REST call
//! also allows no mentions), and fenced code blocks are laid out so that splitting the
//! reply at the 2,000-character limit never cuts one: each block is cut into closed
//! pieces of at most [`CODE_PIECE_CHARS`] characters, blank lines inside them become a
//! single space, and every piece stands between blank lines. `split_message` cuts at
//! the last blank line of its window when it is past the first fifth, and with pieces
//! this short there always is one — between two pieces or a piece and text.

/// Longest fenced piece, fences included: under half the platform's limit, so a
/// window of 2,000 characters always holds a blank line past its first fifth.
pub const CODE_PIECE_CHARS: usize = 1_000;

const ZERO_WIDTH_SPACE: char = '\u{200B}';

/// Markdown → Discord's Markdown (see the module comment).
pub fn markdown_to_discord(markdown: &str) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let mut text: Vec<&str> = Vec::new();
    let mut code: Option<(String, Vec<String>)> = None;
    for line in markdown.split('\n') {
        let fence = line.trim_start().starts_with("```");
        match code.take() {
            None if fence => {
                push_text(&mut blocks, &mut text);
                code = Some((line.trim().to_string(), Vec::new()));
            }
            None => text.push(line),
            Some((opening, lines)) if fence => code_pieces(&mut blocks, &opening, &lines),
            Some((opening, mut lines)) => {
                lines.push(line.trim_end_matches('\r').to_string());
                code = Some((opening, lines));
            }
        }
    }
    push_text(&mut blocks, &mut text);
    // A block the model left open is closed.
    if let Some((opening, lines)) = code {
        code_pieces(&mut blocks, &opening, &lines);
    }
    blocks.join("\n\n")
}

fn push_text(blocks: &mut Vec<String>, lines: &mut Vec<&str>) {
    let joined = lines.join("\n");
    lines.clear();
    let trimmed = joined.trim_matches(|character| character == '\n' || character == '\r');
    if !trimmed.trim().is_empty() {
        blocks.push(escape_mass_mentions(trimmed));
    }
}

/// `@everyone` and `@here` as text that pings no one.
fn escape_mass_mentions(text: &str) -> String {
    text.replace("@everyone", &format!("@{ZERO_WIDTH_SPACE}everyone"))
        .replace("@here", &format!("@{ZERO_WIDTH_SPACE}here"))
}

fn code_pieces(blocks: &mut Vec<String>, opening: &str, lines: &[String]) {
    // The opening fence with its language, kept short enough to leave room for code.
    let opening: String = opening.chars().take(40).collect();
    let overhead = opening.chars().count() + "\n".len() + "\n```".len();
    let budget = CODE_PIECE_CHARS - overhead;
    let mut piece: Vec<String> = Vec::new();
    let mut used = 0;
    let mut flush = |piece: &mut Vec<String>, used: &mut usize| {
        if !piece.is_empty() {
            blocks.push(format!("{opening}\n{}\n```", piece.join("\n")));
            piece.clear();
            *used = 0;
        }
    };
    for line in lines {
        // A blank line would be a paragraph break the splitter could cut at.
        let line = if line.trim().is_empty() {
            " ".to_string()
        } else {
            line.clone()
        };
        let mut rest: &str = &line;
        loop {
            let length = rest.chars().count();
            let separator = usize::from(!piece.is_empty());
            if used + separator + length <= budget {
                piece.push(rest.to_string());
                used += separator + length;
                break;
            }
            if !piece.is_empty() {
                flush(&mut piece, &mut used);
                continue;
            }
            // One line longer than a whole piece: cut it.
            let cut = rest
                .char_indices()
                .nth(budget)
                .map_or(rest.len(), |(offset, _)| offset);
            piece.push(rest[..cut].to_string());
            used = budget;
            rest = &rest[cut..];
            flush(&mut piece, &mut used);
            if rest.is_empty() {
                break;
            }
        }
    }
    flush(&mut piece, &mut used);
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::format::split_message;

    #[test]
    fn markdown_passes_through_and_mass_mentions_are_broken() {
        assert_eq!(
            markdown_to_discord("## Plan\n**Due** *today* [docs](https://x.example)\n- item"),
            "## Plan\n**Due** *today* [docs](https://x.example)\n- item"
        );
        let rendered = markdown_to_discord("Hey @everyone and @here, ask <@123>");
        assert!(!rendered.contains("@everyone") && !rendered.contains("@here"));
        assert_eq!(
            rendered.replace(ZERO_WIDTH_SPACE, ""),
            "Hey @everyone and @here, ask <@123>"
        );
    }

    #[test]
    fn code_blocks_stand_between_blank_lines_and_an_open_one_is_closed() {
        assert_eq!(
            markdown_to_discord("Look:\n```rust\nfn a() {}\n\nfn b() {}\n```\nDone.\n```\nopen"),
            "Look:\n\n```rust\nfn a() {}\n \nfn b() {}\n```\n\nDone.\n\n```\nopen\n```"
        );
    }

    fn fences_balanced(part: &str) -> bool {
        part.lines()
            .filter(|line| line.trim_start().starts_with("```"))
            .count()
            % 2
            == 0
    }

    #[test]
    fn a_long_answer_with_long_code_blocks_splits_without_cutting_a_block() {
        let mut answer = String::new();
        for index in 0..8 {
            answer.push_str(&format!("Step {index}: {}\n", "explain ".repeat(40)));
            answer.push_str("```python\n");
            for line in 0..(20 + index * 7) {
                answer.push_str(&format!("value_{line} = compute({line}) * {index}\n"));
                if line % 9 == 0 {
                    answer.push('\n');
                }
            }
            answer.push_str("```\n");
        }
        answer.push_str(&"x".repeat(1_500));
        assert!(answer.chars().count() > 10_000, "{}", answer.len());
        let parts = split_message(&markdown_to_discord(&answer), 2_000);
        assert!(parts.len() >= 5);
        for part in &parts {
            assert!(part.chars().count() <= 2_000);
            assert!(fences_balanced(part), "a part cuts a code block:\n{part}");
        }
        // Nothing is lost: every line of code arrives.
        let joined = parts.join("\n");
        for line in 0..69 {
            assert!(joined.contains(&format!("value_{line} = compute({line}) * 7")));
        }
    }
}
