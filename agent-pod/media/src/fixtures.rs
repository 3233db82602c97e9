//! Real files for tests and the benchmark, made on the spot: a photo with EXIF, PDFs
//! of any page count, DOCX and XLSX archives, and hostile ones (zip bombs, deep
//! XML, an inflating PDF stream). Feature `fixtures` only.

use std::io::{Cursor, Write};

use image::{RgbImage, codecs::jpeg::JpegEncoder};
use lopdf::{Document, Object, Stream, dictionary};
use zip::{CompressionMethod, ZipWriter, write::SimpleFileOptions};

/// A marker in the photo's EXIF description, to look for after preparation.
pub const EXIF_MARKER: &[u8] = b"SAINT-EXIF-MARKER GPS 52.5200N 13.4050E";

/// A JPEG photo of `width` × `height` with an APP1 EXIF segment holding an
/// orientation tag and [`EXIF_MARKER`]. The pixels are a gradient with noise, so
/// the file is as large as a camera's (a flat image would compress to nothing).
pub fn photo_with_exif(width: u32, height: u32, orientation: u16) -> Vec<u8> {
    let mut state: u32 = 0x9E37_79B9;
    let image = RgbImage::from_fn(width, height, |x, y| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let noise = (state % 48) as u8;
        let red = ((x * 200) / width.max(1)) as u8;
        let green = ((y * 200) / height.max(1)) as u8;
        image::Rgb([
            red.saturating_add(noise),
            green.saturating_add(noise),
            128u8.saturating_add(noise / 2),
        ])
    });
    let mut jpeg = Vec::new();
    image
        .write_with_encoder(JpegEncoder::new_with_quality(&mut jpeg, 92))
        .expect("encode the photo");
    let exif = exif_segment(orientation);
    // APP1 right after SOI, where cameras put it.
    let mut out = Vec::with_capacity(jpeg.len() + exif.len());
    out.extend_from_slice(&jpeg[..2]);
    out.extend_from_slice(&exif);
    out.extend_from_slice(&jpeg[2..]);
    out
}

/// APP1 "Exif": a little-endian TIFF header and one IFD with ImageDescription
/// (the marker) and Orientation.
fn exif_segment(orientation: u16) -> Vec<u8> {
    let mut description = EXIF_MARKER.to_vec();
    description.push(0);
    let mut tiff = Vec::new();
    tiff.extend_from_slice(b"II*\0");
    tiff.extend_from_slice(&8u32.to_le_bytes());
    tiff.extend_from_slice(&2u16.to_le_bytes());
    // Header, entry count, two entries and the next-IFD offset come before the string.
    let string_offset: u32 = 8 + 2 + 2 * 12 + 4;
    tiff.extend_from_slice(&0x010Eu16.to_le_bytes());
    tiff.extend_from_slice(&2u16.to_le_bytes());
    tiff.extend_from_slice(&(description.len() as u32).to_le_bytes());
    tiff.extend_from_slice(&string_offset.to_le_bytes());
    tiff.extend_from_slice(&0x0112u16.to_le_bytes());
    tiff.extend_from_slice(&3u16.to_le_bytes());
    tiff.extend_from_slice(&1u32.to_le_bytes());
    tiff.extend_from_slice(&u32::from(orientation).to_le_bytes());
    tiff.extend_from_slice(&0u32.to_le_bytes());
    tiff.extend_from_slice(&description);
    let mut segment = vec![0xFF, 0xE1];
    segment.extend_from_slice(&((2 + 6 + tiff.len()) as u16).to_be_bytes());
    segment.extend_from_slice(b"Exif\0\0");
    segment.extend_from_slice(&tiff);
    segment
}

/// A PDF of `pages` pages in Helvetica, page `n` (from 1) showing `text(n)`, one
/// line of the page per line of the text.
pub fn pdf(pages: usize, text: impl Fn(usize) -> String) -> Vec<u8> {
    pdf_with_contents(pages, |number| {
        let lines: String = text(number)
            .lines()
            .map(|line| {
                let line = line
                    .replace('\\', "\\\\")
                    .replace('(', "\\(")
                    .replace(')', "\\)");
                format!("({line}) Tj T* ")
            })
            .collect();
        Stream::new(
            dictionary! {},
            format!("BT /F1 11 Tf 14 TL 72 740 Td {lines}ET").into_bytes(),
        )
    })
}

/// A one-page PDF whose content stream is `inflated` zero bytes, deflated: a tiny
/// file that inflates without end if nothing bounds it.
pub fn pdf_with_inflating_stream(inflated_at_least: u64) -> Vec<u8> {
    let (deflated, _) = deflated_zeros(inflated_at_least);
    pdf_with_contents(1, |_| {
        let mut stream = Stream::new(dictionary! { "Filter" => "FlateDecode" }, Vec::new());
        // zlib framing around the raw deflate stream: header, data, (unchecked) Adler-32.
        let mut zlib = vec![0x78, 0x9C];
        zlib.extend_from_slice(&deflated);
        zlib.extend_from_slice(&[0, 0, 0, 0]);
        stream.set_content(zlib);
        stream.allows_compression = false;
        stream
    })
}

fn pdf_with_contents(pages: usize, contents: impl Fn(usize) -> Stream) -> Vec<u8> {
    let mut document = Document::with_version("1.5");
    let pages_id = document.new_object_id();
    let font_id = document.add_object(dictionary! {
        "Type" => "Font",
        "Subtype" => "Type1",
        "BaseFont" => "Helvetica",
        "Encoding" => "WinAnsiEncoding",
    });
    let resources_id = document.add_object(dictionary! {
        "Font" => dictionary! { "F1" => font_id },
    });
    let mut kids: Vec<Object> = Vec::with_capacity(pages);
    for number in 1..=pages {
        let content_id = document.add_object(contents(number));
        let page_id = document.add_object(dictionary! {
            "Type" => "Page",
            "Parent" => pages_id,
            "Contents" => content_id,
        });
        kids.push(page_id.into());
    }
    document.objects.insert(
        pages_id,
        Object::Dictionary(dictionary! {
            "Type" => "Pages",
            "Kids" => kids,
            "Count" => pages as i64,
            "Resources" => resources_id,
            "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
        }),
    );
    let catalog_id = document.add_object(dictionary! {
        "Type" => "Catalog",
        "Pages" => pages_id,
    });
    document.trailer.set("Root", catalog_id);
    let mut out = Vec::new();
    document.save_to(&mut out).expect("write the PDF");
    out
}

/// A DOCX whose body has one paragraph per item.
pub fn docx(paragraphs: &[&str]) -> Vec<u8> {
    let body: String = paragraphs
        .iter()
        .map(|text| format!("<w:p><w:r><w:t>{}</w:t></w:r></w:p>", escape(text)))
        .collect();
    docx_with_body(&format!(
        r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>"#
    ))
}

/// A DOCX around `document_xml` as its `word/document.xml`.
pub fn docx_with_body(document_xml: &str) -> Vec<u8> {
    zip_of(&[
        (
            "[Content_Types].xml",
            r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>"#,
        ),
        (
            "_rels/.rels",
            r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>"#,
        ),
        ("word/document.xml", document_xml),
    ])
}

/// `word/document.xml` nesting `depth` elements.
pub fn deeply_nested_body(depth: usize) -> String {
    format!(
        r#"<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">{}{}</w:document>"#,
        "<w:p>".repeat(depth),
        "</w:p>".repeat(depth)
    )
}

/// A cell of [`xlsx`].
pub enum Cell<'a> {
    Text(&'a str),
    Number(f64),
}

/// An XLSX workbook with one worksheet per `(name, rows)`, strings inline.
pub fn xlsx(sheets: &[(&str, Vec<Vec<Cell<'_>>>)]) -> Vec<u8> {
    let mut entries: Vec<(String, String)> = Vec::new();
    let overrides: String = (1..=sheets.len())
        .map(|number| format!(r#"<Override PartName="/xl/worksheets/sheet{number}.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>"#))
        .collect();
    entries.push(("[Content_Types].xml".into(), format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>{overrides}</Types>"#
    )));
    entries.push(("_rels/.rels".into(), r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#.into()));
    let sheet_list: String = sheets
        .iter()
        .enumerate()
        .map(|(index, (name, _))| {
            format!(
                r#"<sheet name="{}" sheetId="{n}" r:id="rId{n}"/>"#,
                escape(name),
                n = index + 1
            )
        })
        .collect();
    entries.push(("xl/workbook.xml".into(), format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets>{sheet_list}</sheets></workbook>"#
    )));
    let relationships: String = (1..=sheets.len())
        .map(|number| format!(r#"<Relationship Id="rId{number}" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet{number}.xml"/>"#))
        .collect();
    entries.push(("xl/_rels/workbook.xml.rels".into(), format!(
        r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">{relationships}</Relationships>"#
    )));
    for (index, (_, rows)) in sheets.iter().enumerate() {
        let mut data = String::new();
        for (row_index, row) in rows.iter().enumerate() {
            let row_number = row_index + 1;
            data.push_str(&format!(r#"<row r="{row_number}">"#));
            for (column, cell) in row.iter().enumerate() {
                let reference = format!("{}{row_number}", column_name(column));
                match cell {
                    Cell::Text(text) => data.push_str(&format!(
                        r#"<c r="{reference}" t="inlineStr"><is><t>{}</t></is></c>"#,
                        escape(text)
                    )),
                    Cell::Number(number) => {
                        data.push_str(&format!(r#"<c r="{reference}"><v>{number}</v></c>"#))
                    }
                }
            }
            data.push_str("</row>");
        }
        entries.push((format!("xl/worksheets/sheet{}.xml", index + 1), format!(
            r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>{data}</sheetData></worksheet>"#
        )));
    }
    let borrowed: Vec<(&str, &str)> = entries
        .iter()
        .map(|(name, content)| (name.as_str(), content.as_str()))
        .collect();
    zip_of(&borrowed)
}

fn column_name(index: usize) -> String {
    let mut name = String::new();
    let mut rest = index + 1;
    while rest > 0 {
        let digit = (rest - 1) % 26;
        name.insert(0, (b'A' + digit as u8) as char);
        rest = (rest - 1) / 26;
    }
    name
}

fn zip_of(entries: &[(&str, &str)]) -> Vec<u8> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    for (name, content) in entries {
        writer
            .start_file(*name, options)
            .expect("start a zip entry");
        writer
            .write_all(content.as_bytes())
            .expect("write a zip entry");
    }
    writer.finish().expect("finish the zip").into_inner()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A DOCX whose `word/document.xml` inflates to at least `inflated_at_least` bytes
/// of zeros at deflate's maximum ratio (about 1,000:1). With `lie`, its headers
/// declare 1,000 bytes instead, as bombs aimed at size checks do.
pub fn zip_bomb_docx(inflated_at_least: u64, lie: bool) -> Vec<u8> {
    let (deflated, inflated) = deflated_zeros(inflated_at_least);
    let declared = if lie { 1_000 } else { inflated };
    raw_zip(&[("word/document.xml", 8, &deflated, declared)])
}

/// A raw deflate stream of zeros, one dynamic-Huffman block in which a 258-byte
/// match costs two bits: literal 0, then matches of length 258 at distance 1.
/// Returns the stream and the exact inflated size (1 + 258 × matches).
fn deflated_zeros(inflated_at_least: u64) -> (Vec<u8>, u64) {
    let matches = inflated_at_least.saturating_sub(1).div_ceil(258);
    let mut bits = BitWriter::default();
    bits.put(1, 1); // last block
    bits.put(2, 2); // dynamic Huffman
    bits.put(29, 5); // HLIT: 286 literal/length codes, up to 285 (length 258)
    bits.put(0, 5); // HDIST: one distance code
    bits.put(14, 4); // HCLEN: 18 code length codes, up to code 1 in the order below
    // Code length code lengths in RFC 1951's order 16,17,18,0,8,7,9,6,10,5,11,4,12,3,13,2,14,1:
    // 18 gets 1 bit, 1 and 2 get 2 bits each.
    for length in [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2] {
        bits.put(length, 3);
    }
    // Canonical codes: 18 → 0, 1 → 10, 2 → 11 (Huffman codes go most significant bit first).
    let length_two = |bits: &mut BitWriter| bits.code(0b11, 2);
    let length_one = |bits: &mut BitWriter| bits.code(0b10, 2);
    let zeros = |bits: &mut BitWriter, count: u32| {
        bits.code(0, 1);
        bits.put(count - 11, 7);
    };
    length_two(&mut bits); // literal 0: 2 bits
    zeros(&mut bits, 138); // literals 1..=138
    zeros(&mut bits, 117); // literals 139..=255
    length_two(&mut bits); // end of block: 2 bits
    zeros(&mut bits, 28); // lengths 257..=284
    length_one(&mut bits); // length 258 (code 285): 1 bit
    length_one(&mut bits); // distance 1 (code 0): 1 bit
    // Literal/length codes: 285 → 0, 0 → 10, 256 → 11; distance 0 → 0.
    bits.code(0b10, 2);
    for _ in 0..matches {
        bits.code(0, 1);
        bits.code(0, 1);
    }
    bits.code(0b11, 2);
    (bits.finish(), 1 + 258 * matches)
}

#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    current: u32,
    filled: u32,
}

impl BitWriter {
    /// A value, least significant bit first (deflate's header fields).
    fn put(&mut self, value: u32, count: u32) {
        for bit in 0..count {
            self.current |= ((value >> bit) & 1) << self.filled;
            self.filled += 1;
            if self.filled == 8 {
                self.bytes.push(self.current as u8);
                (self.current, self.filled) = (0, 0);
            }
        }
    }

    /// A Huffman code, most significant bit first.
    fn code(&mut self, code: u32, length: u32) {
        for bit in (0..length).rev() {
            self.put((code >> bit) & 1, 1);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.filled > 0 {
            self.bytes.push(self.current as u8);
        }
        self.bytes
    }
}

/// A zip archive written field by field, so headers can say what a bomb wants.
/// Entries: (name, method, data, declared uncompressed size); CRCs are zero, which
/// no size check reads.
fn raw_zip(entries: &[(&str, u16, &[u8], u64)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, method, data, declared) in entries {
        let offset = out.len() as u32;
        let header = |signature: u32, central_directory: bool| {
            let mut header = Vec::new();
            header.extend_from_slice(&signature.to_le_bytes());
            if central_directory {
                header.extend_from_slice(&20u16.to_le_bytes());
            }
            header.extend_from_slice(&20u16.to_le_bytes());
            header.extend_from_slice(&0u16.to_le_bytes());
            header.extend_from_slice(&method.to_le_bytes());
            header.extend_from_slice(&[0; 4]); // time, date
            header.extend_from_slice(&0u32.to_le_bytes()); // CRC-32
            header.extend_from_slice(&(data.len() as u32).to_le_bytes());
            header.extend_from_slice(&(*declared as u32).to_le_bytes());
            header.extend_from_slice(&(name.len() as u16).to_le_bytes());
            header.extend_from_slice(&0u16.to_le_bytes()); // extra field
            if central_directory {
                header.extend_from_slice(&[0; 6]); // comment, disk, internal attributes
                header.extend_from_slice(&0u32.to_le_bytes()); // external attributes
                header.extend_from_slice(&offset.to_le_bytes());
            }
            header.extend_from_slice(name.as_bytes());
            header
        };
        out.extend_from_slice(&header(0x0403_4b50, false));
        out.extend_from_slice(data);
        central.extend_from_slice(&header(0x0201_4b50, true));
    }
    let central_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}
