//! The real-text corpus of the memory benchmarks: English documentation Debian ships
//! (the Python 3.11 reference and tutorials, Perl's manual pages, Git's and Django's
//! documentation), cut into
//! paragraph-sized memory notes, embedded once with the real model and cached under
//! `~/.cache/saint/corpus/`.
//!
//! Layout of the cache directory (`real-text-<key>/`, the key hashing the package
//! files, the cutting rules and the model id):
//! - `sections.jsonl`: one `{"heading", "text"}` per note section, in index order;
//! - `queries.jsonl`: distinct headings of the source documents, as search queries;
//! - `vectors.f32`, `query-vectors.f32`: little-endian f32 rows, one per line above.
//!
//! Embedding ~100k sections takes about an hour on two cores. It runs in batches that
//! are appended and synced, so an interrupted run resumes where it stopped; progress
//! is logged with a rate and an estimate of the time left.

use std::{
    collections::HashSet,
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Read, Seek, Write},
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use saint_memory::{ChunkingOptions, Embedder};
use serde::{Deserialize, Serialize};

/// Debian packages whose documentation is the corpus (bookworm; `apt-get download`).
pub const PACKAGES: [&str; 4] = ["python3.11-doc", "perl-doc", "git-doc", "python-django-doc"];
/// Sections in the full corpus; the small index takes the first tenth.
pub const SECTIONS: usize = 100_000;
/// Sections per memory file (`##` each).
pub const SECTIONS_PER_FILE: usize = 10;
/// User directories the files are spread over; one of them is the 5% scope.
pub const USER_DIRECTORIES: usize = 20;
/// Search queries kept from the documents' headings.
pub const QUERIES: usize = 200;
/// Bump when the cutting rules change.
const CUTTING_VERSION: u32 = 2;
/// A paragraph needs this many words to be a note (shorter ones are mostly markup).
const MIN_WORDS: usize = 8;
/// Longer paragraphs are cut at word boundaries into pieces of at most this size.
const MAX_SECTION_CHARS: usize = 600;
/// Sections embedded per appended batch.
const EMBED_BATCH: usize = 512;

/// Chunking for the corpus: every `##` section is its own chunk (sections are short
/// notes, so the default's 300-character minimum would pair them up).
pub fn chunking() -> ChunkingOptions {
    ChunkingOptions {
        min_chars: 0,
        ..ChunkingOptions::default()
    }
}

/// One note section.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Section {
    /// The heading of the document section the paragraph comes from.
    pub heading: String,
    /// The paragraph, whitespace collapsed.
    pub text: String,
}

impl Section {
    /// The section as it is written in a memory file.
    pub fn markdown(&self) -> String {
        format!("## {}\n\n{}\n\n", self.heading, self.text)
    }

    /// The chunk text the index embeds for this section: the product's chunker run
    /// on the section, which must give exactly one chunk.
    pub fn chunk_text(&self) -> String {
        let mut chunks = saint_memory::chunk_markdown(&self.markdown(), chunking());
        assert_eq!(
            chunks.len(),
            1,
            "a corpus section must be one chunk: {:?}",
            self.text
        );
        chunks.remove(0).text
    }
}

/// The corpus, loaded from the cache.
pub struct Corpus {
    pub sections: Vec<Section>,
    pub vectors: Vec<Vec<f32>>,
    pub queries: Vec<String>,
    pub query_vectors: Vec<Vec<f32>>,
    pub directory: PathBuf,
}

impl Corpus {
    /// The memory file path of section `index` (relative to the workspace).
    pub fn file_of(section: usize) -> String {
        let file = section / SECTIONS_PER_FILE;
        format!(
            "memory/users/u{:02}/doc-{file:05}.md",
            file % USER_DIRECTORIES
        )
    }

    /// Writes the first `count` sections as memory files under `workspace`.
    pub fn write_files(&self, workspace: &Path, count: usize) {
        assert!(count.is_multiple_of(SECTIONS_PER_FILE) && count <= self.sections.len());
        for (file, sections) in self.sections[..count].chunks(SECTIONS_PER_FILE).enumerate() {
            let path = workspace.join(Self::file_of(file * SECTIONS_PER_FILE));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            let text: String = sections.iter().map(Section::markdown).collect();
            std::fs::write(path, text).expect("write a memory file");
        }
    }
}

fn cache_root() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/root".into());
    home.join(".cache/saint/corpus")
}

fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("failed to run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Downloads (once) and unpacks the packages; returns the unpacked root and a key
/// naming the exact package files.
fn packages() -> (PathBuf, String) {
    let debs = cache_root().join("debs");
    std::fs::create_dir_all(&debs).expect("create the corpus cache");
    let have = |name: &str| -> Option<String> {
        std::fs::read_dir(&debs)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .find(|file| {
                file.starts_with(&format!("{name}_"))
                    && std::path::Path::new(file)
                        .extension()
                        .is_some_and(|extension| extension.eq_ignore_ascii_case("deb"))
            })
    };
    let mut files = Vec::new();
    for name in PACKAGES {
        if have(name).is_none() {
            eprintln!("corpus: apt-get download {name}");
            run(Command::new("apt-get")
                .args(["download", "-q", name])
                .current_dir(&debs));
        }
        files.push(have(name).unwrap_or_else(|| panic!("apt-get download {name} left no .deb")));
    }
    let key = files.join(",");
    let unpacked = cache_root().join(format!("unpacked-{:016x}", fnv(key.as_bytes())));
    if !unpacked.join(".done").exists() {
        let partial = unpacked.with_extension("partial");
        let _ = std::fs::remove_dir_all(&partial);
        for file in &files {
            run(Command::new("dpkg-deb")
                .arg("-x")
                .arg(debs.join(file))
                .arg(&partial));
        }
        std::fs::write(partial.join(".done"), &key).expect("mark unpacked");
        let _ = std::fs::remove_dir_all(&unpacked);
        std::fs::rename(&partial, &unpacked).expect("publish the unpacked packages");
    }
    (unpacked, key)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3)
    })
}

fn source_files(root: &Path) -> Vec<PathBuf> {
    fn walk(directory: &Path, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(directory) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, found);
            } else {
                let name = path.to_string_lossy();
                if name.ends_with(".txt")
                    || name.ends_with(".pod")
                    || (name.ends_with(".html") && name.contains("python-django-doc"))
                {
                    found.push(path);
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(root, &mut found);
    found.sort();
    found
}

/// A heading line of reStructuredText (`Title` over `=====`) or POD (`=head1 Title`).
fn heading(lines: &[&str]) -> Option<String> {
    if let [only] = lines
        && let Some(rest) = only.strip_prefix("=head")
    {
        return Some(rest.get(1..).unwrap_or("").trim().to_string());
    }
    if let [title, underline] = lines {
        let underline = underline.trim();
        let marker = underline.chars().next()?;
        if underline.len() >= 3
            && "=-~^*#\"'".contains(marker)
            && underline.chars().all(|character| character == marker)
            && !title.trim().is_empty()
        {
            return Some(title.trim().to_string());
        }
    }
    None
}

/// The headings (`<h1>`–`<h3>`) and paragraphs (`<p>`) of an HTML page as text in
/// the reStructuredText shape [`heading`] and [`paragraphs`] read: tags dropped,
/// the common entities decoded, a blank line after each.
fn html_to_text(html: &str) -> String {
    let mut text = String::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        rest = &rest[start..];
        let element = ["<p>", "<h1", "<h2", "<h3"]
            .into_iter()
            .find(|tag| rest.starts_with(tag));
        let Some(element) = element else {
            rest = &rest[1..];
            continue;
        };
        let close = if element == "<p>" {
            "</p>".to_string()
        } else {
            format!("</{}", &element[1..])
        };
        let Some(end) = rest.find(&close) else { break };
        let inner = &rest[rest.find('>').map_or(0, |gt| gt + 1).min(end)..end];
        rest = &rest[end..];
        let mut plain = String::new();
        let mut in_tag = false;
        for character in inner.chars() {
            match character {
                '<' => in_tag = true,
                '>' => in_tag = false,
                '¶' => {}
                _ if !in_tag => plain.push(character),
                _ => {}
            }
        }
        let plain = plain
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&#x27;", "'")
            .replace("&amp;", "&");
        let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
        if plain.is_empty() {
            continue;
        }
        if element == "<p>" {
            text.push_str(&plain);
        } else {
            text.push_str(&format!(
                "{plain}\n{}",
                "=".repeat(plain.chars().count().max(3))
            ));
        }
        text.push_str("\n\n");
    }
    text
}

/// The paragraphs of `text`: runs of lines between blank (or whitespace-only) lines.
fn paragraphs(text: &str) -> Vec<Vec<&str>> {
    let mut result = vec![Vec::new()];
    for line in text.lines() {
        if line.trim().is_empty() {
            if !result.last().is_some_and(Vec::is_empty) {
                result.push(Vec::new());
            }
        } else if let Some(current) = result.last_mut() {
            current.push(line);
        }
    }
    result.retain(|lines| !lines.is_empty());
    result
}

/// Cuts `text` at word boundaries into pieces of at most [`MAX_SECTION_CHARS`].
fn pieces(text: &str) -> Vec<String> {
    let mut result = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        if !current.is_empty() && current.len() + 1 + word.len() > MAX_SECTION_CHARS {
            result.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    if !current.is_empty() {
        result.push(current);
    }
    result
}

/// Every section and heading of the documentation, in a pseudo-random but fixed order
/// (by a hash of the text), so any prefix is a sample of the whole.
fn cut(root: &Path) -> (Vec<Section>, Vec<String>) {
    let mut sections = Vec::new();
    let mut seen = HashSet::new();
    let mut headings = Vec::new();
    let mut seen_headings = HashSet::new();
    for path in source_files(root) {
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        if path
            .extension()
            .is_some_and(|extension| extension == "html")
        {
            text = html_to_text(&text);
        }
        let mut current = path
            .file_stem()
            .map(|stem| stem.to_string_lossy().trim_end_matches(".rst").to_string())
            .unwrap_or_default();
        for lines in paragraphs(&text) {
            let paragraph = lines.join("\n");
            if let Some(title) = heading(&lines) {
                let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
                if title.split(' ').count() >= 2 && seen_headings.insert(title.to_lowercase()) {
                    headings.push(title.clone());
                }
                if !title.is_empty() {
                    current = title;
                }
                continue;
            }
            if paragraph.split_whitespace().count() < MIN_WORDS {
                continue;
            }
            for piece in pieces(&paragraph) {
                let section = Section {
                    heading: current.clone(),
                    text: piece,
                };
                // A paragraph that reads as markdown structure (a `#` line, a fence)
                // would not stay one chunk.
                if section.text.split(' ').count() >= MIN_WORDS
                    && saint_memory::chunk_markdown(&section.markdown(), chunking()).len() == 1
                    && seen.insert(section.text.clone())
                {
                    sections.push(section);
                }
            }
        }
    }
    sections.sort_by_key(|section| fnv(section.text.as_bytes()));
    headings.sort_by_key(|heading| fnv(heading.as_bytes()));
    (sections, headings)
}

fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) {
    let partial = path.with_extension("partial");
    let mut file = File::create(&partial).expect("create a corpus file");
    for row in rows {
        serde_json::to_writer(&mut file, row).expect("serialise");
        file.write_all(b"\n").expect("write");
    }
    file.sync_all().expect("sync");
    std::fs::rename(&partial, path).expect("publish a corpus file");
}

fn read_jsonl<T: for<'de> Deserialize<'de>>(path: &Path) -> Vec<T> {
    BufReader::new(File::open(path).expect("open a corpus file"))
        .lines()
        .map(|line| serde_json::from_str(&line.expect("read")).expect("parse"))
        .collect()
}

fn read_vectors(path: &Path, dimensions: usize) -> Vec<Vec<f32>> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .expect("read vectors");
    bytes
        .chunks_exact(dimensions * 4)
        .map(|row| {
            row.chunks_exact(4)
                .map(|value| f32::from_le_bytes([value[0], value[1], value[2], value[3]]))
                .collect()
        })
        .collect()
}

/// Embeds `texts` into `path`, resuming after the rows already there.
fn embed_resumably(embedder: &dyn Embedder, texts: &[String], path: &Path, what: &str) {
    let row_bytes = (embedder.dimensions() * 4) as u64;
    let mut file = OpenOptions::new()
        .create(true)
        .append(false)
        .write(true)
        .truncate(false)
        .open(path)
        .expect("open vectors");
    let length = file.metadata().expect("stat").len();
    let done = (length / row_bytes) as usize;
    // A batch cut short by a crash leaves a partial row: drop it.
    file.set_len(done as u64 * row_bytes)
        .expect("truncate a partial row");
    file.seek(std::io::SeekFrom::End(0)).expect("seek");
    if done < texts.len() {
        eprintln!(
            "corpus: embedding {what}: {done} of {} done, resuming",
            texts.len()
        );
    }
    let started = Instant::now();
    let mut embedded = 0usize;
    for batch_start in (done..texts.len()).step_by(EMBED_BATCH) {
        let batch: Vec<&str> = texts[batch_start..(batch_start + EMBED_BATCH).min(texts.len())]
            .iter()
            .map(String::as_str)
            .collect();
        let vectors = embedder.embed(&batch).expect("embed the corpus");
        let bytes: Vec<u8> = vectors
            .iter()
            .flatten()
            .flat_map(|value| value.to_le_bytes())
            .collect();
        file.write_all(&bytes).expect("append vectors");
        file.sync_data().expect("sync vectors");
        embedded += batch.len();
        let rate = embedded as f64 / started.elapsed().as_secs_f64();
        let left = texts.len() - batch_start - batch.len();
        eprintln!(
            "corpus: {what}: {}/{} embedded, {rate:.1}/s, about {:.0} min left",
            batch_start + batch.len(),
            texts.len(),
            left as f64 / rate / 60.0
        );
    }
}

/// The corpus, prepared and embedded with `embedder` if the cache does not hold it;
/// with `partial`, only the sections already embedded (nothing more is embedded).
pub fn load_or_prepare(embedder: &dyn Embedder, partial: bool) -> Corpus {
    let (root, package_key) = packages();
    let key = format!(
        "{package_key}|cut{CUTTING_VERSION}|{SECTIONS}|{QUERIES}|{}",
        embedder.model_id()
    );
    let directory = cache_root().join(format!("real-text-{:016x}", fnv(key.as_bytes())));
    std::fs::create_dir_all(&directory).expect("create the corpus directory");
    let sections_path = directory.join("sections.jsonl");
    let queries_path = directory.join("queries.jsonl");
    if !sections_path.exists() || !queries_path.exists() {
        let (mut sections, mut headings) = cut(&root);
        assert!(
            sections.len() >= SECTIONS && headings.len() >= QUERIES,
            "the documentation gives {} sections and {} headings; {SECTIONS} and {QUERIES} are needed",
            sections.len(),
            headings.len()
        );
        sections.truncate(SECTIONS);
        headings.truncate(QUERIES);
        write_jsonl(&sections_path, &sections);
        write_jsonl(&queries_path, &headings);
        std::fs::write(directory.join("key"), &key).expect("write the key");
    }
    let mut sections: Vec<Section> = read_jsonl(&sections_path);
    let queries: Vec<String> = read_jsonl(&queries_path);
    embed_resumably(
        embedder,
        &queries,
        &directory.join("query-vectors.f32"),
        "queries",
    );
    let dimensions = embedder.dimensions();
    if partial {
        // The sections embedded so far, in whole files: the cache stays as it is.
        let embedded = read_vectors(&directory.join("vectors.f32"), dimensions).len();
        sections.truncate(embedded - embedded % SECTIONS_PER_FILE);
        eprintln!(
            "corpus: SAINT_CORPUS_PARTIAL: using the {} sections embedded so far of {SECTIONS}",
            sections.len()
        );
    } else {
        let chunk_texts: Vec<String> = sections.iter().map(Section::chunk_text).collect();
        embed_resumably(
            embedder,
            &chunk_texts,
            &directory.join("vectors.f32"),
            "sections",
        );
    }
    let mut vectors = read_vectors(&directory.join("vectors.f32"), dimensions);
    vectors.truncate(sections.len());
    let query_vectors = read_vectors(&directory.join("query-vectors.f32"), dimensions);
    assert_eq!(vectors.len(), sections.len(), "one vector per section");
    assert_eq!(query_vectors.len(), queries.len(), "one vector per query");
    Corpus {
        sections,
        vectors,
        queries,
        query_vectors,
        directory,
    }
}
