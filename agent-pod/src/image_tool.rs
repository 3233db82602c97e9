//! The `image` tool: the model looks at an image file the caller may read, or at an
//! image on the web, fetched through the same SSRF guard as `web_fetch`.
//!
//! The bytes are read with the caller's read rules (the workspace's containment: no
//! symlink out, no special file) or fetched by the guard (every hop checked, DNS
//! pinned), then copied into a private temporary file that saint-media's extraction
//! child decodes under its own memory and CPU limits, scales to the provider's size and
//! re-encodes without metadata. The agent never decodes an image itself. The result is
//! an image block beside the tool's result ([`saint_tools::ToolImage`]).

use std::{io::Write, sync::Arc};

use futures::future::BoxFuture;
use saint_media::{Extractor, ImageLimits, IsolatedError};
use saint_tools::{
    Permit, Tool, ToolContext, ToolError, ToolImage, ToolOutput,
    browser::ScreenshotError,
    files::{FileAccess, path_error},
    guard::ssrf::{FetchLimits, SsrfGuard},
    typed,
};
use serde::Deserialize;
use serde_json::{Value, json};

/// The tool's name in roles and the catalog; it also lets a role see the images people
/// send (`runtime::attachments`).
pub const IMAGE_TOOL: &str = "image";

/// What the model sends: exactly one of the two.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageInput {
    /// A workspace path the caller may read.
    #[serde(default)]
    path: Option<String>,
    /// A public http or https URL.
    #[serde(default)]
    url: Option<String>,
}

/// Why an image could not be prepared.
#[derive(Debug, thiserror::Error)]
enum PrepareError {
    /// No private copy for the child to read: the agent's fault.
    #[error("no temporary file: {0}")]
    TemporaryFile(std::io::Error),
    /// The blocking task ended without an answer: the agent's fault.
    #[error("the image task failed")]
    Task,
    /// The child refused or could not read the image.
    #[error("{0}")]
    Image(IsolatedError),
}

/// Prepares `bytes` in the extraction child: decoded, scaled and re-encoded there, never
/// in the agent. The child opens a path: a private copy, so what it decodes is exactly
/// what the caller handed over.
async fn prepare(
    extractor: &Extractor,
    limits: &ImageLimits,
    bytes: Vec<u8>,
) -> Result<saint_media::PreparedImage, PrepareError> {
    let mut copy = tempfile::NamedTempFile::new().map_err(PrepareError::TemporaryFile)?;
    copy.write_all(&bytes)
        .map_err(PrepareError::TemporaryFile)?;
    let (extractor, limits) = (extractor.clone(), limits.clone());
    tokio::task::spawn_blocking(move || {
        let prepared = extractor.image(copy.path(), &limits);
        drop(copy);
        prepared
    })
    .await
    .map_err(|_| PrepareError::Task)?
    .map_err(PrepareError::Image)
}

/// The browser's screenshots prepared like every image the model sees: a PNG from the
/// sandbox's Chromium is decoded and re-encoded by the extraction child, never passed
/// on as the sandbox made it.
pub fn screenshot_preparer(extractor: Extractor) -> saint_tools::browser::ImagePreparer {
    Arc::new(move |bytes: Vec<u8>| {
        let extractor = extractor.clone();
        Box::pin(async move {
            let prepared = prepare(&extractor, &ImageLimits::default(), bytes)
                .await
                .map_err(|error| ScreenshotError(Box::new(error)))?;
            Ok(ToolImage {
                media_type: prepared.media_type.clone(),
                base64: prepared.base64(),
            })
        })
    })
}

/// Shows the model an image.
pub struct ImageTool {
    extractor: Extractor,
    guard: Arc<SsrfGuard>,
    limits: ImageLimits,
}

impl ImageTool {
    /// The tool, decoding with `extractor`'s child and fetching through `guard`.
    pub fn new(extractor: Extractor, guard: Arc<SsrfGuard>) -> Self {
        Self {
            extractor,
            guard,
            limits: ImageLimits::default(),
        }
    }

    /// The bytes of the image `input` names, and how to name it to the model.
    async fn source(
        &self,
        context: &ToolContext,
        input: ImageInput,
    ) -> Result<(Vec<u8>, String), ToolError> {
        let max_bytes = self.limits.max_input_bytes;
        match (input.path, input.url) {
            (Some(raw), None) => {
                let context = context.clone();
                saint_tools::files::blocking(move || {
                    let access = FileAccess::for_caller(&context)?;
                    let path = access.readable(&context, &raw)?;
                    let bytes = access
                        .workspace
                        .read(&path, max_bytes as u64)
                        .map_err(path_error)?;
                    Ok((bytes, path.as_str().to_string()))
                })
                .await
            }
            (None, Some(url)) => {
                let limits = FetchLimits {
                    max_bytes: max_bytes + 1,
                    ..FetchLimits::default()
                };
                let fetched = self
                    .guard
                    .fetch(&url, &context.config.web.url_blocklist, limits)
                    .await
                    .map_err(|error| ToolError::Denied(format!("not fetched: {error}")))?;
                if fetched.truncated || fetched.body.len() > max_bytes {
                    return Err(ToolError::InvalidInput(format!(
                        "the image at {url} is larger than {} MiB",
                        max_bytes / (1024 * 1024)
                    )));
                }
                if !(200..300).contains(&fetched.status) {
                    return Err(ToolError::Failed(format!(
                        "{url} answered HTTP {}",
                        fetched.status
                    )));
                }
                Ok((fetched.body, fetched.final_url.to_string()))
            }
            _ => Err(ToolError::InvalidInput(
                "give exactly one of path (a workspace file) or url".to_string(),
            )),
        }
    }
}

impl Tool for ImageTool {
    fn name(&self) -> &'static str {
        IMAGE_TOOL
    }

    fn description(&self) -> &str {
        "Look at an image: a workspace file you may read (`path`) or a public http or https \
         URL (`url`). JPEG, PNG, GIF and WebP; it is scaled down to at most 1568 px on its \
         longer side and shown to you after the result."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Image file path relative to the workspace"},
                "url": {"type": "string", "description": "Public http or https URL of an image"},
            },
            "additionalProperties": false,
        })
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            permit.covers(IMAGE_TOOL, &context.caller)?;
            let input: ImageInput = typed::decode(input)?;
            let (bytes, shown) = self.source(context, input).await?;
            let size = bytes.len();
            let prepared = prepare(&self.extractor, &self.limits, bytes)
                .await
                .map_err(|error| match error {
                    PrepareError::TemporaryFile(_) | PrepareError::Task => {
                        ToolError::Failed(error.to_string())
                    }
                    PrepareError::Image(error) => {
                        ToolError::InvalidInput(format!("{shown}: {error}"))
                    }
                })?;
            let note = if prepared.was_resized() {
                format!(
                    "{shown}: {} image, {} × {} scaled to {} × {}, shown below",
                    prepared.original_format,
                    prepared.original_width,
                    prepared.original_height,
                    prepared.width,
                    prepared.height
                )
            } else {
                format!(
                    "{shown}: {} image, {} × {}, shown below",
                    prepared.original_format, prepared.width, prepared.height
                )
            };
            let mut output = ToolOutput::text(note);
            output.metering.insert("bytesIn".to_string(), json!(size));
            output
                .metering
                .insert("bytesOut".to_string(), json!(prepared.bytes.len()));
            output.image = Some(ToolImage {
                media_type: prepared.media_type.clone(),
                base64: prepared.base64(),
            });
            Ok(output)
        })
    }
}
