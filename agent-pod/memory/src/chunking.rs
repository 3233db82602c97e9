//! Splits a markdown file into overlapping chunks along headings and paragraphs.
//! Pure: no I/O, no database, no model.
//!
//! Sizes are in characters, not model tokens, so chunking needs no tokenizer and gives
//! the same chunks whatever embedder is configured. English markdown averages about
//! four characters per word-piece, so the default of 1,000 characters is ~250 tokens:
//! it fits the 256-token window all-MiniLM-L6-v2 was trained with, where OpenClaw's
//! larger default (400 tokens) would be silently truncated by this model.
//!
//! The rules, in order:
//! 1. The text is cut into blocks: a heading line, a paragraph (lines up to a blank
//!    line), or a fenced code block (never split on its blank lines).
//! 2. Blocks are packed into a chunk while it stays within `max_chars`.
//! 3. A heading starts a new chunk once the current one holds at least `min_chars`,
//!    so sections stay apart but tiny sections are not embedded on their own.
//! 4. When a chunk is closed because it is full (not at a heading), its trailing
//!    blocks, up to `overlap_chars`, are repeated at the start of the next one, so a
//!    passage cut at a boundary is still found whole in one of the two.
//! 5. A single block longer than `max_chars` is cut at line ends, and a single line
//!    longer than `max_chars` at character boundaries.

/// Chunk size settings, in characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkingOptions {
    /// Largest chunk.
    pub max_chars: usize,
    /// Smallest chunk a heading may close.
    pub min_chars: usize,
    /// How much of a full chunk's tail is repeated in the next one.
    pub overlap_chars: usize,
}

impl Default for ChunkingOptions {
    fn default() -> Self {
        Self {
            max_chars: 1000,
            min_chars: 300,
            overlap_chars: 200,
        }
    }
}

/// One chunk of a file; line numbers are 1-based and inclusive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// First line of the chunk.
    pub start_line: usize,
    /// Last line of the chunk.
    pub end_line: usize,
    /// The chunk's lines joined by `\n`.
    pub text: String,
}

/// A run of lines that belongs together.
#[derive(Clone, Debug)]
struct Block {
    start_line: usize,
    lines: Vec<String>,
    is_heading: bool,
}

impl Block {
    fn char_count(&self) -> usize {
        self.lines.iter().map(|line| line.chars().count() + 1).sum()
    }
}

/// Splits `text` into chunks; blank-only files give no chunks.
pub fn chunk_markdown(text: &str, options: ChunkingOptions) -> Vec<Chunk> {
    let max_chars = options.max_chars.max(1);
    let blocks = split_long_blocks(split_blocks(text), max_chars);
    let mut chunks = Vec::new();
    let mut current: Vec<Block> = Vec::new();
    let mut current_chars = 0;
    for block in blocks {
        let block_chars = block.char_count();
        let heading_break = block.is_heading && current_chars >= options.min_chars;
        let full = current_chars + block_chars > max_chars;
        if !current.is_empty() && (heading_break || full) {
            chunks.push(make_chunk(&current));
            current = if heading_break {
                Vec::new()
            } else {
                overlap_tail(
                    &current,
                    options.overlap_chars,
                    max_chars - block_chars.min(max_chars),
                )
            };
            current_chars = current.iter().map(Block::char_count).sum();
        }
        current_chars += block_chars;
        current.push(block);
    }
    if !current.is_empty() {
        chunks.push(make_chunk(&current));
    }
    chunks
}

/// The last blocks of a closed chunk to repeat, at most `overlap_chars` and leaving
/// room for the next block; headings are not repeated alone at the end of a chunk.
fn overlap_tail(blocks: &[Block], overlap_chars: usize, room: usize) -> Vec<Block> {
    let budget = overlap_chars.min(room);
    let mut taken = Vec::new();
    let mut used = 0;
    for block in blocks.iter().rev() {
        let size = block.char_count();
        if used + size > budget {
            break;
        }
        used += size;
        taken.push(block.clone());
    }
    taken.reverse();
    taken
}

fn make_chunk(blocks: &[Block]) -> Chunk {
    let start_line = blocks[0].start_line;
    let last = &blocks[blocks.len() - 1];
    let end_line = last.start_line + last.lines.len() - 1;
    // Blocks are separated by the blank lines between them in the file, which are not
    // stored; a single newline keeps the text compact, and line numbers stay exact.
    let text = blocks
        .iter()
        .flat_map(|block| block.lines.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    Chunk {
        start_line,
        end_line,
        text,
    }
}

fn is_heading(line: &str) -> bool {
    let trimmed = line.trim_start();
    let hashes = trimmed
        .chars()
        .take_while(|character| *character == '#')
        .count();
    let rest = &trimmed[hashes..];
    (1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with([' ', '\t']))
}

fn is_fence(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.starts_with("```") || trimmed.starts_with("~~~")
}

fn split_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    let mut in_fence = false;
    for (index, raw_line) in text.lines().enumerate() {
        let line_number = index + 1;
        let line = raw_line.trim_end_matches('\r');
        if in_fence {
            if let Some(block) = current.as_mut() {
                block.lines.push(line.to_string());
            }
            if is_fence(line) {
                in_fence = false;
                blocks.extend(current.take());
            }
            continue;
        }
        if is_fence(line) {
            blocks.extend(current.take());
            current = Some(Block {
                start_line: line_number,
                lines: vec![line.to_string()],
                is_heading: false,
            });
            in_fence = true;
            continue;
        }
        if line.trim().is_empty() {
            blocks.extend(current.take());
            continue;
        }
        if is_heading(line) {
            blocks.extend(current.take());
            blocks.push(Block {
                start_line: line_number,
                lines: vec![line.to_string()],
                is_heading: true,
            });
            continue;
        }
        match current.as_mut() {
            Some(block) => block.lines.push(line.to_string()),
            None => {
                current = Some(Block {
                    start_line: line_number,
                    lines: vec![line.to_string()],
                    is_heading: false,
                })
            }
        }
    }
    blocks.extend(current.take());
    blocks
}

/// Cuts blocks longer than `max_chars` at line ends, and lines longer than that at
/// character boundaries, so every block fits in one chunk.
fn split_long_blocks(blocks: Vec<Block>, max_chars: usize) -> Vec<Block> {
    let mut result = Vec::with_capacity(blocks.len());
    for block in blocks {
        if block.char_count() <= max_chars {
            result.push(block);
            continue;
        }
        let mut piece = Block {
            start_line: block.start_line,
            lines: Vec::new(),
            is_heading: block.is_heading,
        };
        let mut piece_chars = 0;
        for (offset, line) in block.lines.into_iter().enumerate() {
            let line_number = block.start_line + offset;
            let line_chars = line.chars().count() + 1;
            if piece_chars + line_chars > max_chars && !piece.lines.is_empty() {
                result.push(std::mem::replace(
                    &mut piece,
                    Block {
                        start_line: line_number,
                        lines: Vec::new(),
                        is_heading: false,
                    },
                ));
                piece_chars = 0;
            }
            if line_chars > max_chars {
                // One very long line: several one-line blocks with the same line number.
                let characters: Vec<char> = line.chars().collect();
                for part in characters.chunks(max_chars.saturating_sub(1).max(1)) {
                    result.push(Block {
                        start_line: line_number,
                        lines: vec![part.iter().collect()],
                        is_heading: false,
                    });
                }
                piece = Block {
                    start_line: line_number + 1,
                    lines: Vec::new(),
                    is_heading: false,
                };
                continue;
            }
            piece_chars += line_chars;
            piece.lines.push(line);
        }
        if !piece.lines.is_empty() {
            result.push(piece);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_chars: usize, min_chars: usize, overlap_chars: usize) -> ChunkingOptions {
        ChunkingOptions {
            max_chars,
            min_chars,
            overlap_chars,
        }
    }

    #[test]
    fn blank_file_has_no_chunks() {
        assert!(chunk_markdown("\n\n  \n", ChunkingOptions::default()).is_empty());
    }

    #[test]
    fn small_file_is_one_chunk_with_its_line_range() {
        let chunks = chunk_markdown(
            "# Title\n\nfirst para\nsecond line\n\nlast\n",
            ChunkingOptions::default(),
        );
        assert_eq!(chunks.len(), 1);
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 6));
        assert_eq!(chunks[0].text, "# Title\nfirst para\nsecond line\nlast");
    }

    #[test]
    fn headings_split_sections_once_the_chunk_is_big_enough() {
        let section_a = "alpha ".repeat(10);
        let section_b = "beta ".repeat(10);
        let text = format!("# A\n{section_a}\n# B\n{section_b}\n");
        let chunks = chunk_markdown(&text, options(1000, 50, 0));
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 2));
        assert_eq!((chunks[1].start_line, chunks[1].end_line), (3, 4));
        assert!(chunks[1].text.starts_with("# B"));
        // A tiny section stays with the next one.
        let chunks = chunk_markdown("# A\nx\n# B\ny\n", options(1000, 50, 0));
        assert_eq!(chunks.len(), 1);
    }

    #[test]
    fn full_chunks_overlap_by_trailing_paragraphs() {
        let paragraphs: Vec<String> = (0..6)
            .map(|index| format!("paragraph {index} {}", "word ".repeat(8)))
            .collect();
        let text = paragraphs.join("\n\n");
        let chunks = chunk_markdown(&text, options(120, 10, 60));
        assert!(chunks.len() >= 3, "{chunks:#?}");
        for pair in chunks.windows(2) {
            // The next chunk starts at or before the previous chunk's last line.
            assert!(pair[1].start_line <= pair[0].end_line, "{pair:#?}");
            assert!(pair[1].end_line > pair[0].end_line);
        }
        for chunk in &chunks {
            assert!(chunk.text.chars().count() <= 120, "{chunk:#?}");
        }
    }

    #[test]
    fn code_fences_are_not_split_on_blank_lines() {
        let text = "intro\n\n```\nline one\n\nline two\n```\n\nafter\n";
        let blocks = split_blocks(text);
        assert_eq!(blocks.len(), 3);
        assert_eq!(
            blocks[1].lines,
            vec!["```", "line one", "", "line two", "```"]
        );
    }

    #[test]
    fn long_lines_and_blocks_are_cut_to_fit() {
        let long_line = "x".repeat(250);
        let text = format!("{long_line}\nshort\n");
        let chunks = chunk_markdown(&text, options(100, 10, 0));
        assert!(chunks.len() >= 3);
        for chunk in &chunks {
            assert!(chunk.text.chars().count() <= 100);
        }
        let total: usize = chunks
            .iter()
            .map(|chunk| chunk.text.matches('x').count())
            .sum();
        assert_eq!(total, 250);
        assert_eq!(chunks.last().map(|chunk| chunk.end_line), Some(2));
    }

    #[test]
    fn every_line_is_covered() {
        let text: String = (1..=200)
            .map(|index| format!("line {index} {}\n", "y".repeat(index % 37)))
            .collect();
        let chunks = chunk_markdown(&text, ChunkingOptions::default());
        let mut covered = vec![false; 201];
        for chunk in &chunks {
            covered[chunk.start_line..=chunk.end_line].fill(true);
        }
        assert!(covered[1..].iter().all(|seen| *seen));
    }
}
