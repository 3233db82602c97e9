//! Benchmark: what preparing an inbound image and extracting a document cost.
//! A 12-megapixel photo with EXIF (4000 × 3000, camera-sized JPEG) prepared for a
//! provider, against copying its bytes and against decoding it alone; a 100-page
//! PDF of 40 lines a page turned into text, against reading its bytes and against
//! lopdf's parse alone. Both in-process and through the extraction child (the
//! agent's path: spawn, limits, JSON reply). Reports medians from one run.
//!
//! Run: `cargo bench -p saint-media --bench media`.

use std::{
    hint::black_box,
    time::{Duration, Instant},
};

use saint_media::{
    DocumentCaps, DocumentKind, Extractor, ImageLimits, documents::extract, fixtures, prepare_image,
};

const RUNS: usize = 15;

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

/// The median of `RUNS` runs of `run`, after one unmeasured warm-up.
fn measure<T>(mut run: impl FnMut() -> T) -> Duration {
    black_box(run());
    median(
        (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                black_box(run());
                started.elapsed()
            })
            .collect(),
    )
}

fn milliseconds(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

/// The child's own peak memory (its `VmHWM`), in MiB.
fn peak_mib(usage: saint_media::Usage) -> f64 {
    usage.peak_memory_kib.expect("the child's peak") as f64 / 1024.0
}

fn main() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let extractor = Extractor::new(
        env!("CARGO_BIN_EXE_saint-media-extract"),
        Vec::<String>::new(),
    );

    let pdf = fixtures::pdf(100, |page| {
        (1..=40)
            .map(|line| {
                format!(
                    "Page {page}, line {line}: the quarterly figures for the northern region.\n"
                )
            })
            .collect()
    });
    let pdf_path = directory.path().join("report.pdf");
    std::fs::write(&pdf_path, &pdf).expect("write the PDF");
    // Every page: the default character cap would stop at page 39 of these full pages.
    let caps = DocumentCaps {
        max_chars: 1_000_000,
        ..DocumentCaps::default()
    };
    let text = extract(DocumentKind::Pdf, &pdf, &caps).expect("extract the PDF");
    println!(
        "100-page PDF: {} KiB, {} characters of text ({})",
        pdf.len() / 1024,
        text.text.chars().count(),
        text.note()
    );
    let read = measure(|| std::fs::read(&pdf_path).expect("read"));
    let parse = measure(|| {
        lopdf::Document::load_mem(&pdf)
            .expect("parse")
            .get_pages()
            .len()
    });
    let in_process = measure(|| extract(DocumentKind::Pdf, &pdf, &caps).expect("extract"));
    let in_child = measure(|| {
        extractor
            .document(&pdf_path, "report.pdf", &caps)
            .expect("extract in the child")
    });
    println!(
        "  median: read {}, lopdf parse {}, extract {}, extract in the child {}",
        milliseconds(read),
        milliseconds(parse),
        milliseconds(in_process),
        milliseconds(in_child),
    );
    let (_, usage) = extractor.document_with_usage(&pdf_path, "report.pdf", &caps);
    println!("  the child's peak memory: {:.1} MiB", peak_mib(usage));

    let photo = fixtures::photo_with_exif(4000, 3000, 1);
    let photo_path = directory.path().join("photo.jpg");
    std::fs::write(&photo_path, &photo).expect("write the photo");
    let limits = ImageLimits::default();
    let prepared = prepare_image(&photo, &limits).expect("prepare the photo");
    println!(
        "12-megapixel photo: {} KiB in, {} × {} {} of {} KiB out ({:.1}% of the input)",
        photo.len() / 1024,
        prepared.width,
        prepared.height,
        prepared.media_type,
        prepared.bytes.len() / 1024,
        100.0 * prepared.bytes.len() as f64 / photo.len() as f64,
    );
    let copy = measure(|| photo.clone());
    let decode = measure(|| image::load_from_memory(&photo).expect("decode"));
    let in_process = measure(|| prepare_image(&photo, &limits).expect("prepare"));
    let in_child = measure(|| {
        extractor
            .image(&photo_path, &limits)
            .expect("prepare in the child")
    });
    println!(
        "  median: copy {}, decode alone {}, prepare {}, prepare in the child {}",
        milliseconds(copy),
        milliseconds(decode),
        milliseconds(in_process),
        milliseconds(in_child),
    );
    let (_, usage) = extractor.image_with_usage(&photo_path, &limits);
    println!("  the child's peak memory: {:.1} MiB", peak_mib(usage));

    // Where prepare's time goes beyond the decode: the scaling, by the filter used and
    // by the separable triangle filter it replaced.
    let decoded = image::load_from_memory(&photo).expect("decode");
    let area = measure(|| decoded.thumbnail_exact(prepared.width, prepared.height));
    let triangle = measure(|| {
        decoded.resize_exact(
            prepared.width,
            prepared.height,
            image::imageops::FilterType::Triangle,
        )
    });
    println!(
        "  scaling alone: area averaging {}, triangle filter {}",
        milliseconds(area),
        milliseconds(triangle)
    );
}
