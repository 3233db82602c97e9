//! PDF: the text of the first pages, page by page, each page's content streams
//! inflated to at most `max_stream_bytes` (lopdf's own default is 256 MiB).
//!
//! lopdf walks the whole page tree for every page it extracts, so the cost is
//! `max_pages` × pages: the page cap bounds it, and the child's CPU limit bounds
//! a caller who lifts the cap (the bounds test measures exactly that).

use lopdf::{Document, LoadOptions};

use super::{Cut, DocumentCaps, DocumentError, DocumentKind, TextBudget};

pub(super) fn extract(
    bytes: &[u8],
    caps: &DocumentCaps,
    text: &mut TextBudget,
) -> Result<Vec<Cut>, DocumentError> {
    let options = LoadOptions::with_max_decompressed_size(caps.max_stream_bytes);
    let document = Document::load_mem_with_options(bytes, options)
        .map_err(|error| DocumentError::malformed(DocumentKind::Pdf, error))?;
    let pages = document.get_pages();
    let total = pages.len();
    let mut extracted = 0;
    let mut unreadable = 0;
    let mut first_failure = None;
    for &number in pages.keys().take(caps.max_pages) {
        if text.is_full() {
            break;
        }
        extracted += 1;
        match document.extract_text_with_limit(&[number], caps.max_stream_bytes) {
            Ok(page) => {
                text.push(&page);
                text.push("\n");
            }
            // One damaged or over-limit page should not cost the others.
            Err(error) => {
                unreadable += 1;
                first_failure.get_or_insert_with(|| error.to_string());
            }
        }
    }
    if document.is_encrypted() && unreadable == extracted && extracted > 0 {
        return Err(DocumentError::Encrypted);
    }
    if extracted > 0 && unreadable == extracted {
        let reason = first_failure.unwrap_or_default();
        return Err(DocumentError::malformed(
            DocumentKind::Pdf,
            format!("no page's text could be read ({reason})"),
        ));
    }
    let mut cuts = Vec::new();
    if extracted < total {
        cuts.push(Cut::Pages { extracted, total });
    }
    Ok(cuts)
}
