//! Zip archives (DOCX, XLSX) opened defensively: every entry's declared size and
//! compression ratio is checked from the central directory before anything is
//! inflated, entries are read through a reader that stops one byte past what they
//! declared (an entry that lies about its size is caught, not inflated to the end),
//! and XML nesting is capped before a parser that recurses or builds a tree sees it.

use std::io::{Cursor, Read};

use quick_xml::{Reader, events::Event};
use serde::{Deserialize, Serialize};
use zip::ZipArchive;

use super::DocumentError;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ArchiveCaps {
    pub max_entries: usize,
    /// Declared uncompressed size of one entry.
    pub max_entry_bytes: u64,
    /// Declared uncompressed size of all entries together.
    pub max_total_bytes: u64,
    /// Uncompressed over compressed size: markup compresses 5–50×, deflate's maximum
    /// is about 1,030×, which is what a bomb uses.
    pub max_ratio: u64,
    /// Element nesting in any XML part; real Office documents stay under 30.
    pub max_xml_depth: usize,
}

impl Default for ArchiveCaps {
    fn default() -> Self {
        Self {
            max_entries: 10_000,
            max_entry_bytes: 64 * 1024 * 1024,
            max_total_bytes: 256 * 1024 * 1024,
            max_ratio: 500,
            max_xml_depth: 256,
        }
    }
}

/// Entries smaller than this are not ratio-checked: a few kilobytes of repeated
/// markup legitimately compress far beyond any sane ratio, and cost nothing.
const RATIO_EXEMPT_BYTES: u64 = 1024 * 1024;

pub(crate) type Archive<'a> = ZipArchive<Cursor<&'a [u8]>>;

/// Opens `bytes` as a zip archive after checking every entry's declared sizes.
pub(crate) fn open<'a>(bytes: &'a [u8], caps: &ArchiveCaps) -> Result<Archive<'a>, DocumentError> {
    let mut archive = ZipArchive::new(Cursor::new(bytes))
        .map_err(|error| DocumentError::Archive(format!("not a readable zip archive: {error}")))?;
    if archive.len() > caps.max_entries {
        return Err(DocumentError::Archive(format!(
            "{} entries, over the limit of {}",
            archive.len(),
            caps.max_entries
        )));
    }
    let mut total: u64 = 0;
    for index in 0..archive.len() {
        // Raw access reads the header only; nothing is inflated here.
        let entry = archive
            .by_index_raw(index)
            .map_err(|error| DocumentError::Archive(error.to_string()))?;
        let name = entry
            .name()
            .map(|name| name.into_owned())
            .unwrap_or_default();
        let (size, compressed) = (entry.size(), entry.compressed_size());
        if entry.encrypted() {
            return Err(DocumentError::Archive(format!("{name} is encrypted")));
        }
        if size > RATIO_EXEMPT_BYTES && size / compressed.max(1) > caps.max_ratio {
            return Err(DocumentError::Archive(format!(
                "{name} inflates {}× (from {compressed} to {size} bytes), a zip bomb",
                size / compressed.max(1)
            )));
        }
        if size > caps.max_entry_bytes {
            return Err(DocumentError::Archive(format!(
                "{name} inflates to {size} bytes, over the limit of {}",
                caps.max_entry_bytes
            )));
        }
        total = total.saturating_add(size);
        if total > caps.max_total_bytes {
            return Err(DocumentError::Archive(format!(
                "entries inflate to more than {} bytes together",
                caps.max_total_bytes
            )));
        }
    }
    Ok(archive)
}

/// Reads one entry, refusing it if it inflates past its declared size.
pub(crate) fn read_entry(
    archive: &mut Archive<'_>,
    name: &str,
    caps: &ArchiveCaps,
) -> Result<Option<Vec<u8>>, DocumentError> {
    // The zip crate also stops an entry at its declared size; this cap is ours, so
    // the bound does not rest on a dependency's behaviour.
    let entry = match archive.by_name(name) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(error) => return Err(DocumentError::Archive(format!("{name}: {error}"))),
    };
    let declared = entry.size().min(caps.max_entry_bytes);
    let mut content = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    entry
        .take(declared + 1)
        .read_to_end(&mut content)
        .map_err(|error| DocumentError::Archive(format!("{name}: {error}")))?;
    if content.len() as u64 > declared {
        return Err(DocumentError::Archive(format!(
            "{name} inflates past the {declared} bytes it declares, a zip bomb"
        )));
    }
    Ok(Some(content))
}

/// Checks every XML part of the archive for nesting depth, reading each through
/// `read_entry`, so a parser given the archive afterwards meets no hostile XML.
pub(crate) fn check_xml_parts(
    archive: &mut Archive<'_>,
    caps: &ArchiveCaps,
) -> Result<(), DocumentError> {
    let names: Vec<String> = archive
        .file_names()
        .filter_map(Result::ok)
        .map(|name| name.into_owned())
        .filter(|name| {
            let extension = std::path::Path::new(name).extension();
            extension.is_some_and(|extension| {
                extension.eq_ignore_ascii_case("xml") || extension.eq_ignore_ascii_case("rels")
            })
        })
        .collect();
    for name in names {
        if let Some(content) = read_entry(archive, &name, caps)? {
            check_xml_depth(&name, &content, caps.max_xml_depth)?;
        }
    }
    Ok(())
}

/// Streams through `content` counting open elements; refuses past `max_depth`.
pub(crate) fn check_xml_depth(
    name: &str,
    content: &[u8],
    max_depth: usize,
) -> Result<(), DocumentError> {
    let text = std::str::from_utf8(content)
        .map_err(|_| DocumentError::Archive(format!("{name} is not UTF-8 XML")))?;
    let mut reader = Reader::from_str(text);
    let mut depth = 0usize;
    loop {
        match reader.read_event() {
            Ok(Event::Start(_)) => {
                depth += 1;
                if depth > max_depth {
                    return Err(DocumentError::Archive(format!(
                        "{name} nests elements deeper than {max_depth}"
                    )));
                }
            }
            Ok(Event::End(_)) => depth = depth.saturating_sub(1),
            Ok(Event::Eof) => return Ok(()),
            Ok(_) => {}
            Err(error) => {
                return Err(DocumentError::Archive(format!(
                    "{name}: malformed XML: {error}"
                )));
            }
        }
    }
}
