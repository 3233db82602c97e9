//! What the model sees of the files a person sent with a message, beyond the note
//! the channel left in its text: an image as an image block (for roles whose tools
//! include `image`; others keep the note only), a document as its text wrapped as
//! untrusted content, anything else nothing more. Every file is parsed by
//! saint-media's extraction child, never in the agent's own process.

use std::path::{Path, PathBuf};

use saint_llm::{ChatRole, ContentBlock, Message};
use saint_media::{DocumentCaps, Extractor, ImageLimits, MediaKind};
use saint_tools::untrusted;
use tokio::io::AsyncReadExt;

/// The tool whose permission lets a role see images.
pub(super) const IMAGE_TOOL: &str = crate::image_tool::IMAGE_TOOL;

/// How much of a file `classify` needs to tell its kind.
const HEAD_BYTES: u64 = 8 * 1024;

/// A file saved from an inbound message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboundAttachment {
    /// Where the channel saved it, under the workspace (`inbox/<channel>/<message>/…`).
    pub path: PathBuf,
}

/// The message the person's turn stores: their text, then what the attachments show.
pub(super) fn user_message(text: String, attached: Vec<ContentBlock>) -> Message {
    let mut content = vec![ContentBlock::Text { text }];
    content.extend(attached);
    Message {
        role: ChatRole::User,
        content,
    }
}

/// The blocks `attachments` add to the message, in order. A file that cannot be read
/// or shown adds a line saying why; its note in the text still says where it is.
pub(super) async fn blocks(
    extractor: &Extractor,
    workspace: &Path,
    attachments: &[InboundAttachment],
    images: bool,
) -> Vec<ContentBlock> {
    let mut blocks = Vec::new();
    for attachment in attachments {
        let path = workspace.join(&attachment.path);
        let shown = attachment.path.display().to_string();
        let Some(kind) = kind_of(&path).await else {
            continue;
        };
        match kind {
            MediaKind::Image if images => match run(extractor, path, kind).await {
                Ok(Extracted::Image { block, note }) => {
                    blocks.push(ContentBlock::Text {
                        text: format!("\n[{shown}: {note}; shown below]"),
                    });
                    blocks.push(block);
                }
                Ok(Extracted::Document(_)) => {}
                Err(reason) => blocks.push(ContentBlock::Text {
                    text: format!("\n[{shown} could not be shown: {reason}]"),
                }),
            },
            MediaKind::Image => {}
            MediaKind::Document(_) => match run(extractor, path, kind).await {
                Ok(Extracted::Document(document)) => blocks.push(ContentBlock::Text {
                    text: format!(
                        "\n{}",
                        untrusted::wrap(
                            &format!("the file {shown} ({})", document.note()),
                            &document.text
                        )
                    ),
                }),
                Ok(Extracted::Image { .. }) => {}
                Err(reason) => blocks.push(ContentBlock::Text {
                    text: format!("\n[{shown}: no text could be read: {reason}]"),
                }),
            },
        }
    }
    blocks
}

async fn kind_of(path: &Path) -> Option<MediaKind> {
    let file = tokio::fs::File::open(path).await.ok()?;
    let mut head = Vec::with_capacity(HEAD_BYTES as usize);
    file.take(HEAD_BYTES).read_to_end(&mut head).await.ok()?;
    let name = path.file_name()?.to_string_lossy();
    saint_media::classify(&name, &head)
}

enum Extracted {
    Image { block: ContentBlock, note: String },
    Document(saint_media::Extracted),
}

/// Runs the child on a blocking thread: it waits for a process for up to the
/// extractor's wall-clock limit.
async fn run(extractor: &Extractor, path: PathBuf, kind: MediaKind) -> Result<Extracted, String> {
    let extractor = extractor.clone();
    let outcome = tokio::task::spawn_blocking(move || match kind {
        MediaKind::Image => extractor
            .image(&path, &ImageLimits::default())
            .map(|prepared| {
                let note = if prepared.was_resized() {
                    format!(
                        "image, {} × {} scaled to {} × {}",
                        prepared.original_width,
                        prepared.original_height,
                        prepared.width,
                        prepared.height
                    )
                } else {
                    format!("image, {} × {}", prepared.width, prepared.height)
                };
                Extracted::Image {
                    block: ContentBlock::Image {
                        media_type: prepared.media_type.clone(),
                        data: prepared.base64(),
                    },
                    note,
                }
            }),
        MediaKind::Document(_) => {
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default();
            extractor
                .document(&path, &name, &DocumentCaps::default())
                .map(Extracted::Document)
        }
    })
    .await;
    match outcome {
        Ok(result) => result.map_err(|error| error.to_string()),
        Err(error) => Err(format!("the extraction task failed: {error}")),
    }
}
