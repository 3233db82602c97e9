//! Plain text: UTF-8 as it is, anything else decoded lossily.

use super::{Cut, TextBudget};

/// Text is what decodes as UTF-8 and holds no NUL bytes; judged on the first 8 KiB
/// so a large file is not scanned whole.
pub(super) fn looks_like_text(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return false;
    }
    match std::str::from_utf8(head) {
        Ok(_) => true,
        // A multi-byte character cut by the 8 KiB window is still text.
        Err(error) => error.error_len().is_none(),
    }
}

pub(super) fn extract(bytes: &[u8], text: &mut TextBudget) -> Vec<Cut> {
    text.push(&String::from_utf8_lossy(bytes));
    Vec::new()
}
