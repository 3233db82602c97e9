//! An image a person sent, made fit for a provider: decoded under limits, turned
//! upright, scaled to fit, and re-encoded. Pure: bytes in, bytes out, no files.
//!
//! Re-encoding from decoded pixels is what strips metadata: the encoders here write
//! no EXIF, XMP or comment segments, so GPS positions and camera serial numbers
//! never reach a provider.

use std::io::Cursor;

use image::{
    DynamicImage, ImageDecoder, ImageFormat, ImageReader, Limits,
    codecs::{jpeg::JpegEncoder, png::PngEncoder},
    imageops::FilterType,
};
use serde::{Deserialize, Serialize};

/// What a provider accepts, and what this side is willing to decode.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageLimits {
    /// The longest edge sent. Anthropic recommends at most 1568 px (larger images
    /// are scaled down by the provider anyway, after costing upload and latency).
    pub max_long_edge: u32,
    /// Encoded bytes sent. Anthropic refuses an image over 5 MB in base64, which is
    /// 3.75 MB of raw bytes.
    pub max_output_bytes: usize,
    /// The file as received; larger ones are refused before decoding.
    pub max_input_bytes: usize,
    /// Width or height the decoder accepts: a header claiming more is refused
    /// before any pixel buffer is allocated (a decompression bomb).
    pub max_input_edge: u32,
    /// Bytes the decoder may allocate at once.
    pub max_decoder_allocation: u64,
    /// JPEG quality of the first attempt; lower ones follow if the output is too big.
    pub jpeg_quality: u8,
}

impl Default for ImageLimits {
    fn default() -> Self {
        Self {
            max_long_edge: 1568,
            max_output_bytes: 3_750_000,
            max_input_bytes: 32 * 1024 * 1024,
            max_input_edge: 12_000,
            // A 50-megapixel RGBA photo; anything larger is not a photo a person sent.
            max_decoder_allocation: 200 * 1024 * 1024,
            jpeg_quality: 85,
        }
    }
}

/// An image ready for a content block.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreparedImage {
    /// `image/jpeg` or `image/png`.
    pub media_type: String,
    /// Base64 on the wire between the extraction child and the agent: the size
    /// providers take it in, and a quarter of JSON's array of numbers.
    #[serde(with = "base64_bytes")]
    pub bytes: Vec<u8>,
    pub width: u32,
    pub height: u32,
    pub original_format: String,
    pub original_width: u32,
    pub original_height: u32,
    pub original_bytes: usize,
}

impl PreparedImage {
    /// Whether scaling or re-encoding changed what the person sent, for the note
    /// beside the block.
    pub fn was_resized(&self) -> bool {
        (self.width, self.height) != (self.original_width, self.original_height)
    }

    /// The bytes as both wire formats carry them.
    pub fn base64(&self) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(&self.bytes)
    }
}

/// Why an image was not prepared. Crosses from the extraction child to the agent as
/// JSON.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageError {
    #[error("image is {actual} bytes, over the {limit}-byte limit")]
    TooLarge { actual: usize, limit: usize },
    #[error("unsupported image format{}: only JPEG, PNG, GIF and WebP are accepted", .0.as_deref().map(|name| format!(" ({name})")).unwrap_or_default())]
    Unsupported(Option<String>),
    #[error("image refused by the decoder's limits: {0}")]
    Limits(String),
    #[error("failed to decode image: {0}")]
    Decode(String),
    #[error("failed to encode image: {0}")]
    Encode(String),
    #[error("image does not fit in {limit} bytes even at the smallest size tried")]
    CannotFit { limit: usize },
}

/// The formats providers accept as input, and so the only decoders compiled in.
fn accepted(format: ImageFormat) -> bool {
    matches!(
        format,
        ImageFormat::Jpeg | ImageFormat::Png | ImageFormat::Gif | ImageFormat::WebP
    )
}

/// Decodes `bytes` under `limits`, scales it to fit and re-encodes it: JPEG for
/// opaque images, PNG for ones with transparency (JPEG has no alpha channel).
pub fn prepare_image(bytes: &[u8], limits: &ImageLimits) -> Result<PreparedImage, ImageError> {
    if bytes.len() > limits.max_input_bytes {
        return Err(ImageError::TooLarge {
            actual: bytes.len(),
            limit: limits.max_input_bytes,
        });
    }
    let (mut image, format) = decode(bytes, limits)?;
    let (original_width, original_height) = (image.width(), image.height());

    let (width, height) = fit(original_width, original_height, limits.max_long_edge);
    if (width, height) != (original_width, original_height) {
        // Area averaging: every source pixel counts once, which is what a downscale
        // needs to stay free of aliasing, and in integers it is about three times
        // faster than a separable triangle filter on a 12-megapixel photo.
        image = image.thumbnail_exact(width, height);
    }

    let (media_type, encoded, image) = encode_within(image, limits)?;
    Ok(PreparedImage {
        media_type: media_type.to_owned(),
        bytes: encoded,
        width: image.width(),
        height: image.height(),
        original_format: format!("{format:?}").to_lowercase(),
        original_width,
        original_height,
        original_bytes: bytes.len(),
    })
}

/// Decodes with the decoder's limits set before any pixel is read, then applies the
/// EXIF orientation so a phone photo taken sideways arrives upright.
fn decode(bytes: &[u8], limits: &ImageLimits) -> Result<(DynamicImage, ImageFormat), ImageError> {
    let reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|error| ImageError::Decode(error.to_string()))?;
    let format = match reader.format() {
        Some(format) if accepted(format) => format,
        Some(format) => return Err(ImageError::Unsupported(Some(format!("{format:?}")))),
        None => return Err(ImageError::Unsupported(None)),
    };
    let mut decoder_limits = Limits::default();
    decoder_limits.max_image_width = Some(limits.max_input_edge);
    decoder_limits.max_image_height = Some(limits.max_input_edge);
    decoder_limits.max_alloc = Some(limits.max_decoder_allocation);
    let mut reader = reader;
    reader.limits(decoder_limits);
    let mut decoder = reader.into_decoder().map_err(decode_error)?;
    // A missing or unreadable orientation is not worth refusing the image for.
    let orientation = decoder.orientation().ok();
    let mut image = DynamicImage::from_decoder(decoder).map_err(decode_error)?;
    if let Some(orientation) = orientation {
        image.apply_orientation(orientation);
    }
    Ok((image, format))
}

fn decode_error(error: image::ImageError) -> ImageError {
    match error {
        image::ImageError::Limits(limit) => ImageError::Limits(limit.to_string()),
        image::ImageError::Unsupported(unsupported) => {
            ImageError::Unsupported(Some(unsupported.to_string()))
        }
        other => ImageError::Decode(other.to_string()),
    }
}

/// The largest size with the same aspect ratio whose long edge is at most
/// `max_long_edge`; never enlarges.
pub fn fit(width: u32, height: u32, max_long_edge: u32) -> (u32, u32) {
    let long_edge = width.max(height);
    if long_edge <= max_long_edge || long_edge == 0 {
        return (width, height);
    }
    let scale = |edge: u32| {
        let scaled = (u64::from(edge) * u64::from(max_long_edge) + u64::from(long_edge) / 2)
            / u64::from(long_edge);
        u32::try_from(scaled.max(1)).unwrap_or(max_long_edge)
    };
    (scale(width), scale(height))
}

/// Encodes, lowering JPEG quality and then the size until the bytes fit. A photo at
/// 1568 px is a few hundred kilobytes, so the loop is for pathological noise images.
fn encode_within(
    mut image: DynamicImage,
    limits: &ImageLimits,
) -> Result<(&'static str, Vec<u8>, DynamicImage), ImageError> {
    let qualities = [limits.jpeg_quality, 70, 55, 40];
    for _attempt in 0..4 {
        if image.color().has_alpha() {
            let encoded = encode_png(&image)?;
            if encoded.len() <= limits.max_output_bytes {
                return Ok(("image/png", encoded, image));
            }
        } else {
            for quality in qualities {
                let encoded = encode_jpeg(&image, quality)?;
                if encoded.len() <= limits.max_output_bytes {
                    return Ok(("image/jpeg", encoded, image));
                }
            }
        }
        let (width, height) = (image.width() * 3 / 4, image.height() * 3 / 4);
        if width == 0 || height == 0 {
            break;
        }
        image = image.resize_exact(width, height, FilterType::Triangle);
    }
    Err(ImageError::CannotFit {
        limit: limits.max_output_bytes,
    })
}

fn encode_jpeg(image: &DynamicImage, quality: u8) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    let rgb = image.to_rgb8();
    rgb.write_with_encoder(JpegEncoder::new_with_quality(&mut out, quality))
        .map_err(|error| ImageError::Encode(error.to_string()))?;
    Ok(out)
}

fn encode_png(image: &DynamicImage) -> Result<Vec<u8>, ImageError> {
    let mut out = Vec::new();
    let rgba = image.to_rgba8();
    rgba.write_with_encoder(PngEncoder::new(&mut out))
        .map_err(|error| ImageError::Encode(error.to_string()))?;
    Ok(out)
}

mod base64_bytes {
    use base64::{Engine, engine::general_purpose::STANDARD};
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let encoded = String::deserialize(deserializer)?;
        STANDARD.decode(encoded).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_the_aspect_ratio_and_never_enlarges() {
        assert_eq!(fit(4000, 3000, 1568), (1568, 1176));
        assert_eq!(fit(3000, 4000, 1568), (1176, 1568));
        assert_eq!(fit(800, 600, 1568), (800, 600));
        assert_eq!(fit(100_000, 1, 1568), (1568, 1));
    }
}
