//! Where inbound attachments are kept: `inbox/<channel>/<message>/<file>` under the
//! workspace, every component reduced to safe characters, so a platform's id or a
//! sender's file name never becomes `..` or an absolute path.

use std::path::PathBuf;

use crate::message::AttachmentRef;

/// The workspace-relative path of attachment number `index` (from 0) of message
/// `platform_id` on `channel`. Every attachment after the first is numbered, so two
/// that carry the same name (two pasted `image.png`) are two files.
pub fn relative_path(
    channel: &str,
    platform_id: &str,
    index: usize,
    attachment: &AttachmentRef,
) -> PathBuf {
    let name = match index {
        0 => file_name(attachment),
        _ => format!("{}-{}", index + 1, file_name(attachment)),
    };
    PathBuf::from("inbox")
        .join(safe_name(channel))
        .join(safe_name(platform_id))
        .join(name)
}

/// A path component made only of safe characters (a platform id or a sender's file
/// name never becomes `..` or a path).
pub fn safe_name(raw: &str) -> String {
    let cleaned: String = raw
        .chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() || matches!(character, '-' | '_' | '.') {
                character
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    let cleaned = cleaned.trim_start_matches('.').to_string();
    if cleaned.is_empty() {
        "_".to_string()
    } else {
        cleaned
    }
}

pub fn file_name(attachment: &AttachmentRef) -> String {
    if let Some(name) = attachment.file_name.as_deref() {
        let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
        return safe_name(base);
    }
    let extension = match attachment.mime_type.split(';').next().unwrap_or("").trim() {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/webp" => "webp",
        "audio/ogg" => "ogg",
        "audio/mpeg" => "mp3",
        "audio/mp4" => "m4a",
        "video/mp4" => "mp4",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    };
    format!("{}.{extension}", safe_name(&attachment.kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_platform_never_leave_the_inbox_folder() {
        for hostile in [
            "../../etc/passwd",
            "..",
            "/abs",
            "a/../../b",
            "...",
            "x\0y",
            "",
        ] {
            let name = safe_name(hostile);
            assert!(
                !name.contains('/') && !name.starts_with('.') && !name.is_empty(),
                "{hostile:?} → {name:?}"
            );
        }
        let attachment = AttachmentRef {
            id: "1".into(),
            kind: "document".into(),
            mime_type: "application/pdf".into(),
            file_name: Some("../../../home/owner/.ssh/id_rsa".into()),
        };
        assert_eq!(file_name(&attachment), "id_rsa");
        // Two attachments with one name are two files.
        let pasted = AttachmentRef {
            file_name: Some("image.png".into()),
            ..attachment.clone()
        };
        assert_ne!(
            relative_path("discord", "1", 0, &pasted),
            relative_path("discord", "1", 1, &pasted)
        );
        assert_eq!(
            relative_path("discord", "1", 1, &pasted),
            PathBuf::from("inbox/discord/1/2-image.png")
        );
        assert_eq!(
            file_name(&AttachmentRef {
                file_name: None,
                ..attachment
            }),
            "document.pdf"
        );
    }
}
