//! Images a person sends, prepared for a provider: scaled, upright, without EXIF,
//! within the byte limit; formats providers do not take and bombs refused.

use saint_media::{Extractor, ImageError, ImageLimits, IsolatedError, fixtures, prepare_image};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[test]
fn a_12_megapixel_photo_is_scaled_to_1568_and_loses_its_exif() {
    let photo = fixtures::photo_with_exif(4000, 3000, 1);
    assert!(contains(&photo, b"Exif\0\0") && contains(&photo, fixtures::EXIF_MARKER));

    let prepared = prepare_image(&photo, &ImageLimits::default()).expect("prepare the photo");

    assert_eq!(prepared.media_type, "image/jpeg");
    assert_eq!((prepared.width, prepared.height), (1568, 1176));
    assert_eq!(
        (prepared.original_width, prepared.original_height),
        (4000, 3000)
    );
    assert_eq!(prepared.original_bytes, photo.len());
    assert!(prepared.was_resized());
    assert!(prepared.bytes.len() <= ImageLimits::default().max_output_bytes);
    assert!(
        prepared.bytes.len() < photo.len() / 2,
        "{} bytes",
        prepared.bytes.len()
    );
    assert!(
        !contains(&prepared.bytes, b"Exif"),
        "an EXIF segment survived"
    );
    assert!(!contains(&prepared.bytes, fixtures::EXIF_MARKER));
    let decoded = image::load_from_memory(&prepared.bytes).expect("the output decodes");
    assert_eq!((decoded.width(), decoded.height()), (1568, 1176));
}

#[test]
fn a_photo_taken_sideways_arrives_upright() {
    // EXIF orientation 6: the camera was turned 90° clockwise.
    let photo = fixtures::photo_with_exif(400, 300, 6);

    let prepared = prepare_image(&photo, &ImageLimits::default()).expect("prepare the photo");

    assert_eq!((prepared.width, prepared.height), (300, 400));
    assert!(!contains(&prepared.bytes, fixtures::EXIF_MARKER));
}

#[test]
fn output_bytes_are_capped_by_lowering_quality_then_size() {
    let photo = fixtures::photo_with_exif(1600, 1200, 1);
    let limits = ImageLimits {
        max_output_bytes: 40_000,
        ..ImageLimits::default()
    };

    let prepared = prepare_image(&photo, &limits).expect("prepare the photo");

    assert!(
        prepared.bytes.len() <= 40_000,
        "{} bytes",
        prepared.bytes.len()
    );
    assert!(prepared.width <= 1568);
}

#[test]
fn transparency_keeps_png() {
    let mut png = Vec::new();
    image::RgbaImage::from_pixel(64, 32, image::Rgba([10, 20, 30, 128]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("encode a PNG");

    let prepared = prepare_image(&png, &ImageLimits::default()).expect("prepare the PNG");

    assert_eq!(prepared.media_type, "image/png");
    assert_eq!((prepared.width, prepared.height), (64, 32));
    assert!(!prepared.was_resized());
}

#[test]
fn formats_providers_do_not_take_are_refused_by_name() {
    // A 1×1 BMP and a little-endian TIFF header.
    let bmp: &[u8] = b"BM\x3a\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0\x01\0\0\0\x01\0\0\0\x01\0\x18\0\0\0\0\0\x04\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\xff\xff\xff\0";
    let tiff: &[u8] = b"II*\0\x08\0\0\0\0\0";
    for bytes in [bmp, tiff] {
        let error = prepare_image(bytes, &ImageLimits::default()).unwrap_err();
        assert!(matches!(error, ImageError::Unsupported(_)), "{error:?}");
        assert!(
            error.to_string().starts_with("unsupported image format"),
            "{error}"
        );
    }
    let error = prepare_image(b"just some text", &ImageLimits::default()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unsupported image format: only JPEG, PNG, GIF and WebP are accepted"
    );
}

/// A PNG whose header claims 40,000 × 40,000 pixels (6.4 GB as RGBA) over a few bytes
/// of data: refused from the header, before the decoder allocates.
#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    let bomb = png_claiming(40_000, 40_000);

    let error = prepare_image(&bomb, &ImageLimits::default()).unwrap_err();

    assert!(matches!(error, ImageError::Limits(_)), "{error:?}");
}

#[test]
fn a_truncated_image_is_a_clear_decode_error() {
    let mut png = Vec::new();
    image::RgbImage::from_fn(200, 200, |x, y| image::Rgb([x as u8, y as u8, 7]))
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .expect("encode a PNG");
    png.truncate(png.len() / 2);

    let error = prepare_image(&png, &ImageLimits::default()).unwrap_err();

    assert!(
        error.to_string().starts_with("failed to decode image"),
        "{error}"
    );
}

#[test]
fn the_child_prepares_images_too() {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let path = directory.path().join("photo.jpg");
    std::fs::write(&path, fixtures::photo_with_exif(2000, 1500, 1)).expect("write the photo");
    let extractor = Extractor::new(
        env!("CARGO_BIN_EXE_saint-media-extract"),
        Vec::<String>::new(),
    );

    let prepared = extractor
        .image(&path, &ImageLimits::default())
        .expect("prepare in the child");
    assert_eq!((prepared.width, prepared.height), (1568, 1176));
    assert!(!contains(&prepared.bytes, fixtures::EXIF_MARKER));

    std::fs::write(&path, b"not an image").expect("write a non-image");
    let error = extractor.image(&path, &ImageLimits::default()).unwrap_err();
    assert!(matches!(error, IsolatedError::Refused(_)), "{error:?}");
    assert!(
        error.to_string().contains("unsupported image format"),
        "{error}"
    );
}

fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&width.to_be_bytes());
    header.extend_from_slice(&height.to_be_bytes());
    // 8-bit RGBA, deflate, adaptive filtering, no interlace.
    header.extend_from_slice(&[8, 6, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    chunk(&mut png, b"IHDR", &header);
    // A valid zlib stream of nothing: a decoder that allocated first would have.
    chunk(
        &mut png,
        b"IDAT",
        &[0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
