//! Spreadsheets: XLSX through calamine after the archive checks, CSV through the
//! csv crate; both as comma-separated rows, one block per sheet.

use std::io::Cursor;

use calamine::{Data, Reader, Xlsx};

use super::{Cut, DocumentCaps, DocumentError, DocumentKind, TextBudget, archive};

pub(super) fn extract_xlsx(
    bytes: &[u8],
    caps: &DocumentCaps,
    text: &mut TextBudget,
) -> Result<Vec<Cut>, DocumentError> {
    // calamine opens the archive itself and inflates as it likes: it only gets
    // bytes whose every entry and XML part has passed the checks.
    let mut checked = archive::open(bytes, &caps.archive)?;
    archive::check_xml_parts(&mut checked, &caps.archive)?;
    let mut workbook: Xlsx<_> = Xlsx::new(Cursor::new(bytes))
        .map_err(|error| DocumentError::malformed(DocumentKind::Xlsx, error))?;
    let names = workbook.sheet_names();
    let mut cuts = Vec::new();
    if names.len() > caps.max_sheets {
        cuts.push(Cut::Sheets {
            extracted: caps.max_sheets,
            total: names.len(),
        });
    }
    for name in names.iter().take(caps.max_sheets) {
        if text.is_full() {
            break;
        }
        let range = workbook
            .worksheet_range(name)
            .map_err(|error| DocumentError::malformed(DocumentKind::Xlsx, error))?;
        text.push(&format!("## Sheet: {name}\n"));
        for (rows, row) in range.rows().enumerate() {
            if rows == caps.max_rows {
                cuts.push(Cut::Rows {
                    sheet: name.clone(),
                    extracted: rows,
                });
                break;
            }
            let cells: Vec<String> = row.iter().map(cell).collect();
            if !text.push(&csv_line(&cells)) {
                break;
            }
        }
        text.push("\n");
    }
    Ok(cuts)
}

fn cell(data: &Data) -> String {
    match data {
        Data::Empty => String::new(),
        other => other.to_string(),
    }
}

pub(super) fn extract_csv(
    bytes: &[u8],
    caps: &DocumentCaps,
    text: &mut TextBudget,
) -> Result<Vec<Cut>, DocumentError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    for (rows, record) in reader.records().enumerate() {
        let record = record.map_err(|error| DocumentError::malformed(DocumentKind::Csv, error))?;
        if rows == caps.max_rows {
            return Ok(vec![Cut::Rows {
                sheet: "csv".to_owned(),
                extracted: rows,
            }]);
        }
        let cells: Vec<String> = record.iter().map(str::to_owned).collect();
        if !text.push(&csv_line(&cells)) {
            break;
        }
    }
    Ok(Vec::new())
}

/// One row, quoted where a cell needs it, so commas in cells stay unambiguous.
fn csv_line(cells: &[String]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|cell| {
            if cell.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", cell.replace('"', "\"\""))
            } else {
                cell.clone()
            }
        })
        .collect();
    let mut line = quoted.join(",");
    line.push('\n');
    line
}
