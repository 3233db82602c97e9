//! DOCX: the text of `word/document.xml`, one line per paragraph, read in one
//! streaming pass that also caps element nesting.

use quick_xml::{Reader, escape::resolve_predefined_entity, events::Event};

use super::{Cut, DocumentCaps, DocumentError, DocumentKind, TextBudget, archive};

const BODY: &str = "word/document.xml";

pub(super) fn extract(
    bytes: &[u8],
    caps: &DocumentCaps,
    text: &mut TextBudget,
) -> Result<Vec<Cut>, DocumentError> {
    let mut archive = archive::open(bytes, &caps.archive)?;
    let body = archive::read_entry(&mut archive, BODY, &caps.archive)?
        .ok_or_else(|| DocumentError::malformed(DocumentKind::Docx, format!("no {BODY}")))?;
    let body = std::str::from_utf8(&body).map_err(|_| {
        DocumentError::malformed(DocumentKind::Docx, format!("{BODY} is not UTF-8"))
    })?;
    paragraphs(body, caps.archive.max_xml_depth, text)?;
    Ok(Vec::new())
}

/// Text runs (`w:t`) joined, paragraphs (`w:p`) and breaks on their own lines, tabs
/// kept. Everything else in WordprocessingML is layout.
fn paragraphs(body: &str, max_depth: usize, text: &mut TextBudget) -> Result<(), DocumentError> {
    let malformed = |reason: String| DocumentError::malformed(DocumentKind::Docx, reason);
    let mut reader = Reader::from_str(body);
    let mut depth = 0usize;
    let mut in_text = false;
    while !text.is_full() {
        match reader.read_event() {
            Ok(Event::Start(start)) => {
                depth += 1;
                if depth > max_depth {
                    return Err(DocumentError::Archive(format!(
                        "{BODY} nests elements deeper than {max_depth}"
                    )));
                }
                in_text = start.local_name().as_ref() == "t";
            }
            Ok(Event::End(end)) => {
                depth = depth.saturating_sub(1);
                in_text = false;
                if end.local_name().as_ref() == "p" {
                    text.push("\n");
                }
            }
            Ok(Event::Empty(empty)) => match empty.local_name().as_ref() {
                "tab" => _ = text.push("\t"),
                "br" | "cr" => _ = text.push("\n"),
                _ => {}
            },
            Ok(Event::Text(run)) if in_text => _ = text.push(&run.xml10_content()),
            Ok(Event::GeneralRef(reference)) if in_text => {
                if let Ok(Some(character)) = reference.resolve_char_ref() {
                    text.push(character.encode_utf8(&mut [0; 4]));
                } else if let Some(entity) = resolve_predefined_entity(&reference.xml10_content()) {
                    text.push(entity);
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(error) => return Err(malformed(format!("{BODY}: {error}"))),
        }
    }
    Ok(())
}
