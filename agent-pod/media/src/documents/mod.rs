//! Documents a person sent, as text for the model: which kind a file is, the caps
//! that bound what is extracted, and what was cut. Pure over bytes; the hostile-input
//! bound on time and memory is the child process's (`crate::isolated`), these caps
//! only decide how much text is worth giving the model.

mod archive;
mod docx;
mod pdf;
mod sheet;
mod text;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use archive::ArchiveCaps;

/// The kinds of document turned into text.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DocumentKind {
    Pdf,
    Docx,
    Xlsx,
    Csv,
    Text,
}

impl DocumentKind {
    /// Decides from the content first (a name can lie), the file name second.
    /// `None`: not a document this crate reads (an image, an archive, a binary).
    pub fn detect(file_name: &str, bytes: &[u8]) -> Option<Self> {
        let extension = file_name
            .rsplit_once('.')
            .map(|(_, extension)| extension.to_ascii_lowercase())
            .unwrap_or_default();
        if bytes.starts_with(b"%PDF-") {
            return Some(Self::Pdf);
        }
        if bytes.starts_with(b"PK\x03\x04") {
            // Office files are zip archives; the extension says which, and the
            // extractor checks the archive holds the part it needs.
            return match extension.as_str() {
                "docx" => Some(Self::Docx),
                "xlsx" | "xlsm" => Some(Self::Xlsx),
                _ => None,
            };
        }
        match extension.as_str() {
            "pdf" => Some(Self::Pdf),
            "docx" => Some(Self::Docx),
            "xlsx" | "xlsm" => Some(Self::Xlsx),
            "csv" | "tsv" => Some(Self::Csv),
            _ if text::looks_like_text(bytes) => Some(Self::Text),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Pdf => "PDF",
            Self::Docx => "DOCX",
            Self::Xlsx => "XLSX",
            Self::Csv => "CSV",
            Self::Text => "text",
        }
    }
}

impl fmt::Display for DocumentKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// How much of a document becomes text. The rest stays in the saved file, for the
/// model to `read` if it needs it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DocumentCaps {
    /// The file as received; larger ones are refused unread.
    pub max_input_bytes: usize,
    /// PDF pages extracted.
    pub max_pages: usize,
    /// Characters of text given to the model (about a quarter as many tokens).
    pub max_chars: usize,
    /// Spreadsheet sheets, and rows of each.
    pub max_sheets: usize,
    pub max_rows: usize,
    /// Bytes any one PDF stream may inflate to.
    pub max_stream_bytes: usize,
    pub archive: ArchiveCaps,
}

impl Default for DocumentCaps {
    fn default() -> Self {
        Self {
            max_input_bytes: 32 * 1024 * 1024,
            max_pages: 100,
            max_chars: 100_000,
            max_sheets: 10,
            max_rows: 1_000,
            max_stream_bytes: 16 * 1024 * 1024,
            archive: ArchiveCaps::default(),
        }
    }
}

/// What was left out of the text, for the note beside it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "cut")]
pub enum Cut {
    Pages { extracted: usize, total: usize },
    Sheets { extracted: usize, total: usize },
    Rows { sheet: String, extracted: usize },
    Characters { kept: usize },
}

impl fmt::Display for Cut {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pages { extracted, total } => {
                write!(formatter, "first {extracted} of {total} pages")
            }
            Self::Sheets { extracted, total } => {
                write!(formatter, "first {extracted} of {total} sheets")
            }
            Self::Rows { sheet, extracted } => {
                write!(formatter, "first {extracted} rows of sheet {sheet:?}")
            }
            Self::Characters { kept } => write!(formatter, "first {kept} characters"),
        }
    }
}

/// A document's text and what was cut from it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Extracted {
    pub kind: DocumentKind,
    pub text: String,
    pub cuts: Vec<Cut>,
}

impl Extracted {
    /// One line for the model: what it is looking at and what it is not.
    pub fn note(&self) -> String {
        if self.cuts.is_empty() {
            return format!("{} text, complete", self.kind.name());
        }
        let cuts: Vec<String> = self.cuts.iter().map(ToString::to_string).collect();
        format!(
            "{} text, cut to the {}; the whole file can be read with `read`",
            self.kind.name(),
            cuts.join(", ")
        )
    }
}

/// Why a document gave no text. Crosses from the extraction child to the agent as JSON.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DocumentError {
    #[error("file is {actual} bytes, over the {limit}-byte limit")]
    TooLarge { actual: usize, limit: usize },
    #[error("malformed {kind}: {reason}")]
    Malformed { kind: DocumentKind, reason: String },
    #[error("encrypted PDF: no text can be read without the password")]
    Encrypted,
    #[error("refused archive: {0}")]
    Archive(String),
}

impl DocumentError {
    fn malformed(kind: DocumentKind, reason: impl fmt::Display) -> Self {
        Self::Malformed {
            kind,
            reason: reason.to_string(),
        }
    }
}

/// Extracts `kind` from `bytes` within `caps`. Runs in the extraction child; call it
/// directly only on trusted input.
pub fn extract(
    kind: DocumentKind,
    bytes: &[u8],
    caps: &DocumentCaps,
) -> Result<Extracted, DocumentError> {
    if bytes.len() > caps.max_input_bytes {
        return Err(DocumentError::TooLarge {
            actual: bytes.len(),
            limit: caps.max_input_bytes,
        });
    }
    let mut text = TextBudget::new(caps.max_chars);
    let mut cuts = match kind {
        DocumentKind::Pdf => pdf::extract(bytes, caps, &mut text)?,
        DocumentKind::Docx => docx::extract(bytes, caps, &mut text)?,
        DocumentKind::Xlsx => sheet::extract_xlsx(bytes, caps, &mut text)?,
        DocumentKind::Csv => sheet::extract_csv(bytes, caps, &mut text)?,
        DocumentKind::Text => text::extract(bytes, &mut text),
    };
    if text.full {
        cuts.push(Cut::Characters { kept: text.kept });
    }
    Ok(Extracted {
        kind,
        text: text.text,
        cuts,
    })
}

/// Text gathered up to a character cap; extractors stop once it is full.
pub(crate) struct TextBudget {
    text: String,
    kept: usize,
    limit: usize,
    full: bool,
}

impl TextBudget {
    fn new(limit: usize) -> Self {
        Self {
            text: String::new(),
            kept: 0,
            limit,
            full: false,
        }
    }

    /// Appends what fits; false once the cap is reached.
    pub(crate) fn push(&mut self, piece: &str) -> bool {
        if self.full {
            return false;
        }
        let room = self.limit - self.kept;
        let mut taken = 0;
        for (count, character) in piece.chars().enumerate() {
            if count == room {
                self.full = true;
                break;
            }
            self.text.push(character);
            taken += 1;
        }
        self.kept += taken;
        !self.full
    }

    pub(crate) fn is_full(&self) -> bool {
        self.full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_decides_before_the_name() {
        assert_eq!(
            DocumentKind::detect("notes.txt", b"%PDF-1.7\n"),
            Some(DocumentKind::Pdf)
        );
        assert_eq!(
            DocumentKind::detect("report.docx", b"PK\x03\x04rest"),
            Some(DocumentKind::Docx)
        );
        assert_eq!(DocumentKind::detect("archive.zip", b"PK\x03\x04rest"), None);
        assert_eq!(
            DocumentKind::detect("data.csv", b"a,b\n1,2\n"),
            Some(DocumentKind::Csv)
        );
        assert_eq!(
            DocumentKind::detect("README", b"plain words\n"),
            Some(DocumentKind::Text)
        );
        assert_eq!(DocumentKind::detect("blob.bin", b"\x00\x01\x02\xff"), None);
    }

    #[test]
    fn the_budget_stops_at_the_cap_and_says_so() {
        let mut budget = TextBudget::new(5);
        assert!(budget.push("abc"));
        assert!(!budget.push("défg"));
        assert_eq!(budget.text, "abcdé");
        assert!(budget.is_full());
    }

    #[test]
    fn the_note_names_every_cut() {
        let extracted = Extracted {
            kind: DocumentKind::Pdf,
            text: String::new(),
            cuts: vec![
                Cut::Pages {
                    extracted: 100,
                    total: 10_000,
                },
                Cut::Characters { kept: 100_000 },
            ],
        };
        assert_eq!(
            extracted.note(),
            "PDF text, cut to the first 100 of 10000 pages, first 100000 characters; \
             the whole file can be read with `read`"
        );
    }
}
