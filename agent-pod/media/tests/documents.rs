//! Documents a person sends, as text: real PDF, DOCX, XLSX and CSV files made here,
//! their caps, and malformed or hostile files refused with a clear reason.

use std::path::PathBuf;

use saint_media::{
    Cut, DocumentCaps, DocumentError, DocumentKind, Extractor, IsolatedError,
    documents::extract,
    fixtures::{self, Cell},
};

fn extractor() -> Extractor {
    Extractor::new(
        env!("CARGO_BIN_EXE_saint-media-extract"),
        Vec::<String>::new(),
    )
}

/// Writes `bytes` as `name` in a fresh directory, kept alive by the returned guard.
fn saved(name: &str, bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join(name);
    std::fs::write(&path, bytes).expect("write the file");
    (directory, path)
}

#[test]
fn a_pdf_becomes_its_pages_text() {
    let pdf = fixtures::pdf(3, |number| format!("Quarterly report page {number}"));
    let (_directory, path) = saved("report.pdf", &pdf);

    let extracted = extractor()
        .document(&path, "report.pdf", &DocumentCaps::default())
        .expect("extract the PDF");

    assert_eq!(extracted.kind, DocumentKind::Pdf);
    for number in 1..=3 {
        assert!(
            extracted
                .text
                .contains(&format!("Quarterly report page {number}")),
            "{:?}",
            extracted.text
        );
    }
    assert_eq!(extracted.cuts, []);
    assert_eq!(extracted.note(), "PDF text, complete");
}

#[test]
fn a_docx_becomes_one_line_per_paragraph() {
    let docx = fixtures::docx(&["Dear Ana,", "Fish & chips at <noon>.", "Best, Bo"]);

    let extracted = extract(DocumentKind::Docx, &docx, &DocumentCaps::default()).expect("extract");

    assert_eq!(
        extracted.text,
        "Dear Ana,\nFish & chips at <noon>.\nBest, Bo\n"
    );
}

#[test]
fn an_xlsx_becomes_comma_separated_rows_per_sheet() {
    let xlsx = fixtures::xlsx(&[
        (
            "Budget",
            vec![
                vec![Cell::Text("item"), Cell::Text("cost")],
                vec![Cell::Text("tent, large"), Cell::Number(249.5)],
            ],
        ),
        ("Notes", vec![vec![Cell::Text("bring water")]]),
    ]);
    let (_directory, path) = saved("trip.xlsx", &xlsx);

    let extracted = extractor()
        .document(&path, "trip.xlsx", &DocumentCaps::default())
        .expect("extract the workbook");

    assert_eq!(extracted.kind, DocumentKind::Xlsx);
    assert_eq!(
        extracted.text,
        "## Sheet: Budget\nitem,cost\n\"tent, large\",249.5\n\n## Sheet: Notes\nbring water\n\n"
    );
}

#[test]
fn csv_and_plain_text_pass_through_within_caps() {
    let caps = DocumentCaps {
        max_rows: 2,
        ..DocumentCaps::default()
    };
    let extracted = extract(DocumentKind::Csv, b"a,b\n1,2\n3,4\n", &caps).expect("extract");
    assert_eq!(extracted.text, "a,b\n1,2\n");
    assert_eq!(
        extracted.cuts,
        [Cut::Rows {
            sheet: "csv".into(),
            extracted: 2
        }]
    );

    let caps = DocumentCaps {
        max_chars: 10,
        ..DocumentCaps::default()
    };
    let extracted = extract(
        DocumentKind::Text,
        "naïve text, longer than ten".as_bytes(),
        &caps,
    )
    .expect("extract");
    assert_eq!(extracted.text, "naïve text");
    assert_eq!(extracted.cuts, [Cut::Characters { kept: 10 }]);
    assert!(
        extracted
            .note()
            .ends_with("the whole file can be read with `read`")
    );
}

#[test]
fn a_10000_page_pdf_gives_its_first_pages_and_says_how_many_are_left() {
    let pdf = fixtures::pdf(10_000, |number| format!("page {number} of the manual"));
    let (_directory, path) = saved("manual.pdf", &pdf);

    let extracted = extractor()
        .document(&path, "manual.pdf", &DocumentCaps::default())
        .expect("extract the first pages");

    assert_eq!(
        extracted.cuts,
        [Cut::Pages {
            extracted: 100,
            total: 10_000
        }]
    );
    assert!(extracted.text.contains("page 100 of the manual"));
    assert!(!extracted.text.contains("page 101 of the manual"));
    assert!(extracted.note().contains("first 100 of 10000 pages"));
}

#[test]
fn a_zip_bomb_docx_is_refused_from_its_headers() {
    // 1 GiB of zeros in about a megabyte.
    let bomb = fixtures::zip_bomb_docx(1 << 30, false);
    assert!(bomb.len() < 2 << 20, "{} bytes", bomb.len());

    let error = extract(DocumentKind::Docx, &bomb, &DocumentCaps::default()).unwrap_err();

    assert!(matches!(error, DocumentError::Archive(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("refused archive: word/document.xml inflates 10"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .ends_with("to 1073742079 bytes), a zip bomb"),
        "{error}"
    );
}

#[test]
fn a_zip_bomb_that_lies_about_its_size_is_caught_while_reading() {
    let bomb = fixtures::zip_bomb_docx(1 << 30, true);

    let error = extract(DocumentKind::Docx, &bomb, &DocumentCaps::default()).unwrap_err();

    // Caught by the zip crate's own check or, were it gone, by the capped reader.
    let message = error.to_string();
    assert!(
        message
            == "refused archive: word/document.xml inflates past the 1000 bytes it declares, a zip bomb"
            || message
                == "refused archive: word/document.xml: File is larger than its declared uncompressed size",
        "{message}"
    );
}

#[test]
fn deeply_nested_xml_is_refused_in_docx_and_xlsx() {
    let docx = fixtures::docx_with_body(&fixtures::deeply_nested_body(50_000));
    let error = extract(DocumentKind::Docx, &docx, &DocumentCaps::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "refused archive: word/document.xml nests elements deeper than 256"
    );

    // The same body inside a workbook: checked before calamine sees it.
    let xlsx = fixtures::xlsx(&[("Sheet1", vec![vec![Cell::Number(1.0)]])]);
    let error = extract(
        DocumentKind::Xlsx,
        &xlsx,
        &DocumentCaps {
            archive: saint_media::documents::ArchiveCaps {
                max_xml_depth: 2,
                ..Default::default()
            },
            ..DocumentCaps::default()
        },
    )
    .unwrap_err();
    assert!(
        error.to_string().contains("nests elements deeper than 2"),
        "{error}"
    );
}

#[test]
fn a_pdf_stream_that_inflates_without_end_is_refused() {
    // 64 MiB of content from 32 KiB, over the 16 MiB stream cap.
    let pdf = fixtures::pdf_with_inflating_stream(64 << 20);
    assert!(pdf.len() < 100_000, "{} bytes", pdf.len());
    let (_directory, path) = saved("bomb.pdf", &pdf);

    let error = extractor()
        .document(&path, "bomb.pdf", &DocumentCaps::default())
        .unwrap_err();

    let message = error.to_string();
    assert!(
        message.starts_with("refused: malformed PDF: no page's text could be read ("),
        "{message}"
    );
}

#[test]
fn malformed_and_truncated_files_are_clear_refusals() {
    let mut pdf = fixtures::pdf(20, |number| format!("page {number}"));
    pdf.truncate(pdf.len() / 3);
    let (_pdf_directory, pdf_path) = saved("cut.pdf", &pdf);
    // lopdf repairs what it can; whatever it cannot is a refusal, never a crash.
    match extractor().document(&pdf_path, "cut.pdf", &DocumentCaps::default()) {
        Ok(extracted) => assert!(extracted.text.contains("page 1")),
        Err(error) => assert!(matches!(error, IsolatedError::Refused(_)), "{error:?}"),
    }

    let (_docx_directory, docx_path) = saved("letter.docx", b"this is not a zip archive");
    let error = extractor()
        .document(&docx_path, "letter.docx", &DocumentCaps::default())
        .unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("refused: refused archive: not a readable zip archive"),
        "{error}"
    );

    let mut docx = fixtures::docx(&["hello"]);
    docx.truncate(docx.len() - 30);
    let error = extract(DocumentKind::Docx, &docx, &DocumentCaps::default()).unwrap_err();
    assert!(
        error.to_string().contains("not a readable zip archive"),
        "{error}"
    );

    let (_bin_directory, bin_path) = saved("blob.bin", b"\x7fELF\x02\x01\x01\0\0\0\0");
    let error = extractor()
        .document(&bin_path, "blob.bin", &DocumentCaps::default())
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "refused: not a document kind this agent reads"
    );
}

#[test]
fn a_file_over_the_byte_cap_is_refused_unread() {
    let caps = DocumentCaps {
        max_input_bytes: 1_000,
        ..DocumentCaps::default()
    };
    let (_directory, path) = saved("big.txt", &[b'a'; 5_000]);

    let error = extractor().document(&path, "big.txt", &caps).unwrap_err();

    assert_eq!(
        error.to_string(),
        "refused: file is over the 1000-byte limit"
    );
}
