//! Inbound images and documents made ready for the model. Images are decoded under
//! limits, scaled to the provider's size and re-encoded without metadata
//! (`image_prep`); documents become capped text (`documents`). Both run on hostile
//! input in a child process that limits its own memory and CPU time (`child`),
//! started and timed by the agent (`isolated`).

mod child;
pub mod documents;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod image_prep;
mod isolated;
pub mod job;

pub use child::child_main;

/// The agent binary's hidden subcommand that runs [`child_main`].
pub const CHILD_SUBCOMMAND: &str = "extract-document";
pub use documents::{Cut, DocumentCaps, DocumentError, DocumentKind, Extracted};
pub use image_prep::{ImageError, ImageLimits, PreparedImage, prepare_image};
pub use isolated::{Extractor, IsolatedError, Usage};
pub use job::{ChildLimits, Refusal};

/// What an attachment is, judged from its first bytes and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediaKind {
    /// A format providers accept as an image block.
    Image,
    Document(DocumentKind),
}

/// Classifies an attachment from its name and its first few kilobytes (8 KiB are
/// enough for every check), without parsing it.
pub fn classify(file_name: &str, head: &[u8]) -> Option<MediaKind> {
    const SIGNATURES: [&[u8]; 4] = [b"\xFF\xD8\xFF", b"\x89PNG\r\n\x1a\n", b"GIF87a", b"GIF89a"];
    let webp = head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP";
    if webp
        || SIGNATURES
            .iter()
            .any(|signature| head.starts_with(signature))
    {
        return Some(MediaKind::Image);
    }
    DocumentKind::detect(file_name, head).map(MediaKind::Document)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_told_by_their_signature_not_their_name() {
        assert_eq!(
            classify("photo.pdf", b"\xFF\xD8\xFF\xE0rest"),
            Some(MediaKind::Image)
        );
        assert_eq!(
            classify("x", b"RIFF\0\0\0\0WEBPVP8 "),
            Some(MediaKind::Image)
        );
        assert_eq!(
            classify("scan.pdf", b"%PDF-1.4"),
            Some(MediaKind::Document(DocumentKind::Pdf))
        );
        assert_eq!(classify("tool", b"\x7fELF\x02\x01\x01\0\0\0"), None);
    }
}
