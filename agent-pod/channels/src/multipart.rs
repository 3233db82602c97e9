//! `multipart/form-data` (RFC 7578) for the platforms whose upload calls take it
//! (Telegram `sendVoice`, WhatsApp media, Discord `files[n]`, Matrix needs none), and
//! its reading for the scripted servers. Hand-written because the workspace's reqwest
//! is built without its `multipart` feature (which would add `mime_guess`) and the
//! form here is a few fields and one file.

/// A form being built.
pub struct Form {
    boundary: String,
    body: Vec<u8>,
}

impl Default for Form {
    fn default() -> Self {
        Self::new()
    }
}

/// Characters a field name or file name may not carry into a part header.
fn header_safe(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if matches!(c, '"' | '\r' | '\n' | '\\') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

impl Form {
    /// An empty form with a random boundary.
    pub fn new() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| since.as_nanos())
            .unwrap_or_default();
        Self {
            boundary: format!("saint-{nanos:x}-{:x}", std::process::id()),
            body: Vec::new(),
        }
    }

    fn open_part(&mut self, name: &str) {
        self.body
            .extend_from_slice(format!("--{}\r\n", self.boundary).as_bytes());
        self.body.extend_from_slice(
            format!(
                "Content-Disposition: form-data; name=\"{}\"",
                header_safe(name)
            )
            .as_bytes(),
        );
    }

    /// Adds a text field.
    pub fn text(mut self, name: &str, value: &str) -> Self {
        self.open_part(name);
        self.body.extend_from_slice(b"\r\n\r\n");
        self.body.extend_from_slice(value.as_bytes());
        self.body.extend_from_slice(b"\r\n");
        self
    }

    /// Adds a file field.
    pub fn file(mut self, name: &str, file_name: &str, content_type: &str, data: &[u8]) -> Self {
        self.open_part(name);
        self.body.extend_from_slice(
            format!(
                "; filename=\"{}\"\r\nContent-Type: {}\r\n\r\n",
                header_safe(file_name),
                header_safe(content_type)
            )
            .as_bytes(),
        );
        self.body.extend_from_slice(data);
        self.body.extend_from_slice(b"\r\n");
        self
    }

    /// The `Content-Type` header value and the body.
    pub fn finish(mut self) -> (String, Vec<u8>) {
        self.body
            .extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        (
            format!("multipart/form-data; boundary={}", self.boundary),
            self.body,
        )
    }
}

/// One part of a form read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// The field name.
    pub name: String,
    /// The file name, for a file.
    pub file_name: Option<String>,
    /// The part's `Content-Type`, if it had one.
    pub content_type: Option<String>,
    /// The content.
    pub data: Vec<u8>,
}

impl Part {
    /// The content as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|position| position + from)
}

/// Reads a `multipart/form-data` body given its `Content-Type`; `None` when it is not
/// one or is malformed.
pub fn parse(content_type: &str, body: &[u8]) -> Option<Vec<Part>> {
    let boundary = content_type
        .split(';')
        .map(str::trim)
        .find_map(|parameter| parameter.strip_prefix("boundary="))?
        .trim_matches('"');
    if !content_type.trim_start().starts_with("multipart/form-data") || boundary.is_empty() {
        return None;
    }
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut position = find(body, delimiter.as_bytes(), 0)? + delimiter.len();
    loop {
        if body.get(position..position + 2)? == b"--" {
            return Some(parts);
        }
        position += 2; // CRLF after the delimiter
        let headers_end = find(body, b"\r\n\r\n", position)?;
        let headers = std::str::from_utf8(&body[position..headers_end]).ok()?;
        let content_start = headers_end + 4;
        let next = find(body, format!("\r\n{delimiter}").as_bytes(), content_start)?;
        let mut part = Part {
            name: String::new(),
            file_name: None,
            content_type: None,
            data: body[content_start..next].to_vec(),
        };
        for line in headers.split("\r\n") {
            let Some((header, value)) = line.split_once(':') else {
                continue;
            };
            match header.trim().to_ascii_lowercase().as_str() {
                "content-disposition" => {
                    for parameter in value.split(';').map(str::trim) {
                        if let Some(name) = parameter.strip_prefix("name=") {
                            part.name = name.trim_matches('"').to_string();
                        } else if let Some(name) = parameter.strip_prefix("filename=") {
                            part.file_name = Some(name.trim_matches('"').to_string());
                        }
                    }
                }
                "content-type" => part.content_type = Some(value.trim().to_string()),
                _ => {}
            }
        }
        parts.push(part);
        position = next + 2 + delimiter.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_reads_back_as_it_was_built() {
        let audio = b"OggS\0\x02\r\n--not-a-boundary\r\n".to_vec();
        let (content_type, body) = Form::new()
            .text("chat_id", "111")
            .file("voice", "voice\"note.ogg", "audio/ogg", &audio)
            .finish();
        let parts = parse(&content_type, &body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            (parts[0].name.as_str(), parts[0].text()),
            ("chat_id", "111".to_string())
        );
        assert_eq!(parts[1].name, "voice");
        assert_eq!(parts[1].file_name.as_deref(), Some("voice_note.ogg"));
        assert_eq!(parts[1].content_type.as_deref(), Some("audio/ogg"));
        assert_eq!(parts[1].data, audio);
    }

    #[test]
    fn other_bodies_are_not_forms() {
        assert_eq!(parse("application/json", b"{}"), None);
        assert_eq!(parse("multipart/form-data; boundary=x", b"garbage"), None);
    }
}
