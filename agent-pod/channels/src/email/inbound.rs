//! Turning a raw message into an inbox entry: the sender, the subject and thread, the
//! new text without the quoted history, HTML-only mail as text, attachments, and the
//! mail that must never be answered (auto-replies, bounces, lists), so two bots never
//! write to each other forever.

use mail_parser::{MessageParser, MimeHeaders};
use saint_config::{ChannelIdentity, ChannelKind, IdentityError};

use super::EmailSettings;
use crate::{
    attachments,
    message::{AttachmentRef, InboundMessage, ReplyContext},
};

/// Largest attachment kept; bigger ones are named in the text but not saved.
pub const MAX_ATTACHMENT_BYTES: usize = 16 * 1024 * 1024;
/// Attachments kept per message.
const MAX_ATTACHMENTS: usize = 20;
/// Characters of body text kept (a 10,000-line mail is cut with a note).
const MAX_TEXT_CHARS: usize = 20_000;

/// A parsed message.
#[derive(Debug)]
pub struct ParsedMail {
    /// The inbox entry (`sender_verified` is false until the sender check ran).
    pub message: InboundMessage,
    /// Attachments to save, by their workspace-relative path.
    pub attachments: Vec<(std::path::PathBuf, Vec<u8>)>,
    /// Why it must not be answered, if so.
    pub ignore: Option<String>,
}

/// Why bytes are not a mail with a sender (the message is skipped, with this reason).
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("not a MIME message")]
    NotMime,
    #[error("no From: address")]
    NoSender,
    #[error("From: {from:?}: {error}")]
    BadSender { from: String, error: IdentityError },
}

/// Parses `raw`; `fallback_id` names it when it has no `Message-ID`. An error when the
/// bytes are not a message with a sender at all.
pub fn parse_mail(
    settings: &EmailSettings,
    raw: &[u8],
    fallback_id: &str,
) -> Result<ParsedMail, MailError> {
    let mail = MessageParser::default()
        .parse(raw)
        .ok_or(MailError::NotMime)?;
    let from = mail
        .from()
        .and_then(|from| from.first())
        .and_then(|address| address.address())
        .ok_or(MailError::NoSender)?;
    let sender =
        ChannelIdentity::parse(ChannelKind::Email, from).map_err(|error| MailError::BadSender {
            from: from.to_owned(),
            error,
        })?;
    let platform_id = mail
        .message_id()
        .map(|id| format!("<{}>", id.trim_matches(['<', '>'])))
        .unwrap_or_else(|| fallback_id.to_string());
    let subject = mail.subject().unwrap_or("").trim().to_string();
    let references = references(&mail, &platform_id);
    let text = new_text(&mail);
    let kept = keep_attachments(settings, &mail, &platform_id);
    let full = full_text(&subject, &text, kept.notes);

    let ignore = automatic_reason(&mail, from, &settings.address);
    let sent_at = mail
        .date()
        .and_then(|date| jiff::Timestamp::from_second(date.to_timestamp()).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .to_string();
    Ok(ParsedMail {
        message: InboundMessage {
            channel: settings.channel.clone(),
            kind: ChannelKind::Email,
            platform_id: platform_id.clone(),
            sender,
            sender_verified: false,
            unverified_origin: None,
            display_name: mail
                .from()
                .and_then(|from| from.first())
                .and_then(|address| address.name())
                .map(str::to_string),
            text: full,
            attachments: Vec::new(),
            sent_at,
            context: ReplyContext {
                reply_to: Some(platform_id),
                subject: Some(subject),
                references,
                ..Default::default()
            },
            conversation: None,
            pressed: false,
        },
        attachments: kept.saved,
        ignore,
    })
}

/// The thread's message ids, oldest first, ending with the parent and this message.
fn references(mail: &mail_parser::Message<'_>, platform_id: &str) -> Vec<String> {
    let mut references: Vec<String> = mail
        .references()
        .as_text_list()
        .map(|list| {
            list.iter()
                .map(|id| format!("<{}>", id.trim_matches(['<', '>'])))
                .collect()
        })
        .or_else(|| {
            mail.references()
                .as_text()
                .map(|id| vec![format!("<{}>", id.trim_matches(['<', '>']))])
        })
        .unwrap_or_default();
    if let Some(parent) = mail.in_reply_to().as_text()
        && references.last().map(String::as_str)
            != Some(&format!("<{}>", parent.trim_matches(['<', '>'])))
    {
        references.push(format!("<{}>", parent.trim_matches(['<', '>'])));
    }
    references.push(platform_id.to_string());

    references
}

/// The new text of the message, without the quoted history, cut at [`MAX_TEXT_CHARS`].
fn new_text(mail: &mail_parser::Message<'_>) -> String {
    let body = mail
        .body_text(0)
        .map(|text| text.into_owned())
        .unwrap_or_default();
    let mut text = strip_quoted(&body);
    if text.chars().count() > MAX_TEXT_CHARS {
        let total = text.chars().count();
        text = text.chars().take(MAX_TEXT_CHARS).collect();
        text.push_str(&format!(
            "\n[message cut: showing {MAX_TEXT_CHARS} of {total} characters]"
        ));
    }
    text
}

/// The attachments kept, and one note per attachment for the text: where it was saved,
/// or why it was not.
struct KeptAttachments {
    saved: Vec<(std::path::PathBuf, Vec<u8>)>,
    notes: Vec<String>,
}

fn keep_attachments(
    settings: &EmailSettings,
    mail: &mail_parser::Message<'_>,
    platform_id: &str,
) -> KeptAttachments {
    let mut saved = Vec::new();
    let mut notes = Vec::new();
    for (index, part) in mail.attachments().enumerate() {
        let mime_type = part
            .content_type()
            .map(|content_type| match content_type.subtype() {
                Some(subtype) => format!("{}/{subtype}", content_type.ctype()),
                None => content_type.ctype().to_string(),
            })
            .unwrap_or_else(|| "application/octet-stream".to_string());
        let name = part.attachment_name().map(str::to_string);
        let reference = AttachmentRef {
            id: format!("{index}"),
            kind: "file".to_string(),
            mime_type,
            file_name: name.clone(),
        };
        let contents = part.contents();
        if index >= MAX_ATTACHMENTS {
            notes.push(format!(
                "[attachment {} not kept: more than {MAX_ATTACHMENTS} attachments]",
                name.as_deref().unwrap_or("?")
            ));
            continue;
        }
        if contents.len() > MAX_ATTACHMENT_BYTES {
            notes.push(format!(
                "[attachment {} not kept: {} bytes, over the {MAX_ATTACHMENT_BYTES}-byte limit]",
                name.as_deref().unwrap_or("?"),
                contents.len()
            ));
            continue;
        }
        let path = attachments::relative_path(&settings.channel, platform_id, index, &reference);
        notes.push(format!(
            "[file attachment ({}, {} bytes) saved as {}]",
            reference.mime_type,
            contents.len(),
            path.display()
        ));
        saved.push((path, contents.to_vec()));
    }
    KeptAttachments { saved, notes }
}

/// The subject, the text, then the attachment notes.
fn full_text(subject: &str, text: &str, notes: Vec<String>) -> String {
    let mut full = if subject.is_empty() {
        String::new()
    } else {
        format!("Subject: {subject}\n\n")
    };
    full.push_str(text);
    for note in notes {
        full.push('\n');
        full.push_str(&note);
    }
    full
}

/// Why a message is machine-sent and must get no answer, if it is.
fn automatic_reason(
    mail: &mail_parser::Message<'_>,
    from: &str,
    own_address: &str,
) -> Option<String> {
    let header = |name: &str| {
        mail.header_raw(name)
            .map(|value| value.trim().to_lowercase())
    };
    if let Some(value) = header("Auto-Submitted")
        && value != "no"
    {
        return Some(format!("Auto-Submitted: {value}"));
    }
    if let Some(value) = header("Precedence")
        && ["bulk", "junk", "list", "auto_reply"].contains(&value.as_str())
    {
        return Some(format!("Precedence: {value}"));
    }
    for name in [
        "X-Autoreply",
        "X-Autorespond",
        "List-Id",
        "List-Unsubscribe",
    ] {
        if header(name).is_some() {
            return Some(format!("{name} header"));
        }
    }
    if let Some(path) = header("Return-Path")
        && path.trim_matches(['<', '>', ' ']).is_empty()
    {
        return Some("null sender (Return-Path: <>)".to_string());
    }
    let local = from.split('@').next().unwrap_or("").to_lowercase();
    if [
        "mailer-daemon",
        "postmaster",
        "noreply",
        "no-reply",
        "donotreply",
    ]
    .contains(&local.as_str())
    {
        return Some(format!("sent by {from}"));
    }
    if from.eq_ignore_ascii_case(own_address) {
        return Some("sent by this bot's own address".to_string());
    }
    if mail.content_type().is_some_and(|content_type| {
        content_type.ctype().eq_ignore_ascii_case("multipart")
            && content_type
                .subtype()
                .is_some_and(|subtype| subtype.eq_ignore_ascii_case("report"))
    }) {
        return Some("delivery report (multipart/report)".to_string());
    }
    None
}

/// The new text of a reply: cut at the first attribution line (`On … wrote:`) or
/// forwarded-original marker, and without `>` quoted lines.
pub fn strip_quoted(body: &str) -> String {
    let mut kept = Vec::new();
    let lines: Vec<&str> = body.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim();
        let attribution = trimmed.starts_with("On ")
            && (trimmed.ends_with("wrote:")
                || lines
                    .get(index + 1)
                    .is_some_and(|next| next.trim().ends_with("wrote:")));
        if attribution
            || trimmed.starts_with("-----Original Message-----")
            || trimmed.starts_with("________________________________")
        {
            break;
        }
        if trimmed.starts_with('>') {
            continue;
        }
        kept.push(*line);
    }
    kept.join("\n").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> EmailSettings {
        let channel: saint_config::ChannelConfig = serde_json::from_value(serde_json::json!({
            "name": "mail", "kind": "email",
            "settings": {"address": "saint@acme.example", "imapHost": "127.0.0.1", "smtpHost": "127.0.0.1"},
            "secretEnv": {"password": "P"},
        }))
        .unwrap();
        EmailSettings::read(&channel, &|_| Some("pw".to_string())).unwrap()
    }

    #[test]
    fn a_reply_keeps_only_its_new_text_and_joins_the_thread() {
        let raw = b"From: Ana <Ana@Acme.Example>\r\nTo: saint@acme.example\r\nSubject: Re: Plan\r\nMessage-ID: <r2@acme.example>\r\nIn-Reply-To: <r1@acme.example>\r\nReferences: <r0@acme.example> <r1@acme.example>\r\n\r\nYes, go ahead.\r\n\r\nOn Mon, 23 Nov 2026 Saint wrote:\r\n> Shall I?\r\n";
        let parsed = parse_mail(&settings(), raw, "uid:1").unwrap();
        assert_eq!(parsed.message.sender.to_string(), "email:ana@acme.example");
        assert_eq!(parsed.message.platform_id, "<r2@acme.example>");
        assert_eq!(parsed.message.text, "Subject: Re: Plan\n\nYes, go ahead.");
        assert_eq!(
            parsed.message.context.references,
            vec![
                "<r0@acme.example>",
                "<r1@acme.example>",
                "<r2@acme.example>"
            ]
        );
        assert!(parsed.ignore.is_none());
    }

    #[test]
    fn machine_mail_is_never_answered() {
        for header in [
            "Auto-Submitted: auto-replied",
            "Precedence: bulk",
            "X-Autoreply: yes",
            "Return-Path: <>",
            "List-Id: <team.acme.example>",
        ] {
            let raw = format!(
                "From: ana@acme.example\r\n{header}\r\nSubject: Out of office\r\n\r\nI am away.\r\n"
            );
            let parsed = parse_mail(&settings(), raw.as_bytes(), "uid:1").unwrap();
            assert!(parsed.ignore.is_some(), "{header}");
        }
        let daemon = b"From: MAILER-DAEMON@acme.example\r\nSubject: Undelivered\r\n\r\nbounce\r\n";
        assert!(
            parse_mail(&settings(), daemon, "uid:1")
                .unwrap()
                .ignore
                .is_some()
        );
        let own = b"From: saint@acme.example\r\nSubject: loop\r\n\r\nme\r\n";
        assert!(
            parse_mail(&settings(), own, "uid:1")
                .unwrap()
                .ignore
                .is_some()
        );
        let human = b"From: ana@acme.example\r\nAuto-Submitted: no\r\nSubject: hi\r\n\r\nhello\r\n";
        assert!(
            parse_mail(&settings(), human, "uid:1")
                .unwrap()
                .ignore
                .is_none()
        );
    }

    #[test]
    fn html_only_mail_becomes_text_and_huge_mail_is_cut() {
        let raw = b"From: ana@acme.example\r\nContent-Type: text/html\r\n\r\n<html><body><p>Hello <b>bot</b></p><script>x()</script></body></html>\r\n";
        let parsed = parse_mail(&settings(), raw, "uid:9").unwrap();
        assert!(
            parsed.message.text.contains("Hello bot"),
            "{}",
            parsed.message.text
        );
        assert!(!parsed.message.text.contains("<b>"));
        assert_eq!(parsed.message.platform_id, "uid:9");
        let lines = "a line of text\r\n".repeat(10_000);
        let raw = format!("From: ana@acme.example\r\nSubject: long\r\n\r\n{lines}");
        let parsed = parse_mail(&settings(), raw.as_bytes(), "uid:10").unwrap();
        assert!(
            parsed
                .message
                .text
                .ends_with("[message cut: showing 20000 of 149999 characters]"),
            "{}",
            &parsed.message.text[parsed.message.text.len() - 80..]
        );
    }

    /// A DEFLATE stream (fixed Huffman codes) of `matches` × 258 zero bytes plus one:
    /// a literal 0, then back-references of length 258 at distance 1.
    fn deflate_zeros(matches: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut buffer, mut used) = (0u32, 0u32);
        let mut push = |value: u32, bits: u32, out: &mut Vec<u8>| {
            buffer |= value << used;
            used += bits;
            while used >= 8 {
                out.push(buffer as u8);
                buffer >>= 8;
                used -= 8;
            }
        };
        // Huffman codes go most significant bit first.
        let code = |code: u32, bits: u32| {
            (0..bits).fold(0, |reversed, bit| {
                reversed | (((code >> bit) & 1) << (bits - 1 - bit))
            })
        };
        push(0b011, 3, &mut out); // final block, fixed Huffman
        push(code(0x30, 8), 8, &mut out); // literal 0
        for _ in 0..matches {
            push(code(0b1100_0101, 8), 8, &mut out); // length 258 (code 285)
            push(0, 5, &mut out); // distance 1 (code 0)
        }
        push(0, 7, &mut out); // end of block (code 256)
        push(0, 7, &mut out); // flush
        out
    }

    /// A zip holding one entry that inflates to `inflated` bytes.
    fn zip_bomb(inflated: usize) -> Vec<u8> {
        let data = deflate_zeros(inflated / 258);
        let name = b"zeros.bin";
        let mut zip = Vec::new();
        let size = |value: usize| (value as u32).to_le_bytes();
        zip.extend_from_slice(b"PK\x03\x04\x14\x00\x00\x00\x08\x00\x00\x00\x00\x00");
        zip.extend_from_slice(&[0; 4]); // crc (unchecked here)
        zip.extend_from_slice(&size(data.len()));
        zip.extend_from_slice(&size(inflated));
        zip.extend_from_slice(&(name.len() as u16).to_le_bytes());
        zip.extend_from_slice(&[0, 0]);
        zip.extend_from_slice(name);
        zip.extend_from_slice(&data);
        zip
    }

    #[test]
    fn a_zip_bomb_is_kept_as_received_never_inflated() {
        let bomb = zip_bomb(200 * 1024 * 1024);
        assert!(bomb.len() < 2 * 1024 * 1024, "{} bytes", bomb.len());
        let encoded: String = {
            use std::fmt::Write;
            // Base64 by hand would be long; hex-free: the MIME parser decodes base64.
            let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            let mut text = String::new();
            for (index, chunk) in bomb.chunks(3).enumerate() {
                let value = chunk.iter().enumerate().fold(0u32, |value, (at, byte)| {
                    value | (u32::from(*byte) << (16 - 8 * at))
                });
                for position in 0..4 {
                    if position <= chunk.len() {
                        text.push(table[((value >> (18 - 6 * position)) & 63) as usize] as char);
                    } else {
                        text.push('=');
                    }
                }
                if index % 19 == 18 {
                    let _ = write!(text, "\r\n");
                }
            }
            text
        };
        let raw = format!(
            "From: ana@acme.example\r\nSubject: archive\r\nMessage-ID: <bomb@acme.example>\r\nMIME-Version: 1.0\r\n\
             Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nThe archive.\r\n\
             --b\r\nContent-Type: application/zip\r\nContent-Disposition: attachment; filename=\"bomb.zip\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\n{encoded}\r\n--b--\r\n"
        );
        let parsed = parse_mail(&settings(), raw.as_bytes(), "uid:1").unwrap();
        assert_eq!(parsed.attachments.len(), 1);
        let (path, data) = &parsed.attachments[0];
        assert_eq!(
            path,
            &std::path::PathBuf::from("inbox/mail/_bomb_acme.example_/bomb.zip")
        );
        assert_eq!(data, &bomb, "stored byte for byte, never inflated");
        assert!(parsed.message.text.contains(&format!("[file attachment (application/zip, {} bytes) saved as inbox/mail/_bomb_acme.example_/bomb.zip]", bomb.len())), "{}", parsed.message.text);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        assert!(parse_mail(&settings(), b"", "uid:1").is_err());
        assert!(
            parse_mail(&settings(), b"Subject: no sender\r\n\r\nx", "uid:1")
                .unwrap_err()
                .to_string()
                .contains("From")
        );
        assert!(parse_mail(&settings(), b"From: not an address\r\n\r\nx", "uid:1").is_err());
    }
}
