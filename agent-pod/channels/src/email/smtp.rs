//! Replies by SMTP submission: `From:` the bot's address, threaded with `In-Reply-To`
//! and `References`, `Re:` on the subject, and `Auto-Submitted: auto-replied` so other
//! robots know not to answer it. Each mail's `Message-ID` is derived from its outbox
//! row: a resend after a crash (sent, but not yet recorded as sent) is the same message
//! to the recipient's client, which shows it once.

use futures::future::BoxFuture;
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Attachment, Mailbox, MessageBuilder, MultiPart, SinglePart, header::ContentType},
    transport::smtp::authentication::Credentials,
};
use saint_config::{ChannelIdentity, ChannelKind};

use super::{EmailSettings, Security};
use crate::{
    message::{AttachmentRef, FileKind, FilePayload, ReplyContext},
    transport::{ReplyLimit, SendError, Transport},
};

/// The SMTP transport could not be built (its TLS setup, for one).
#[derive(Debug, thiserror::Error)]
#[error("failed to set up SMTP to {host}")]
pub struct SmtpSetupError {
    host: String,
    #[source]
    source: lettre::transport::smtp::Error,
}

/// Sends for one e-mail channel.
pub struct SmtpTransport {
    settings: EmailSettings,
    mailer: AsyncSmtpTransport<Tokio1Executor>,
}

impl SmtpTransport {
    /// A transport for `settings`.
    pub fn new(settings: EmailSettings) -> Result<Self, SmtpSetupError> {
        let host = settings.smtp_host.as_str();
        let builder = match settings.smtp_security {
            Security::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(host),
            Security::StartTls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host),
            Security::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                host,
            )),
        }
        .map_err(|source| SmtpSetupError {
            host: host.to_owned(),
            source,
        })?;
        let mailer = builder
            .port(settings.smtp_port)
            .credentials(Credentials::new(
                settings.username.clone(),
                settings.password.clone(),
            ))
            .timeout(Some(std::time::Duration::from_secs(60)))
            .build();
        Ok(Self { settings, mailer })
    }

    fn build(
        &self,
        to: &ChannelIdentity,
        text: &str,
        context: &ReplyContext,
        part: usize,
    ) -> Result<Message, SendError> {
        let message_id = context
            .outbox_id
            .map(|outbox_id| self.message_id(outbox_id, part, to, text));
        self.headers(to, context, message_id)?
            .header(ContentType::TEXT_PLAIN)
            .body(text.to_string())
            .map_err(|error| SendError::Permanent {
                reason: format!("email: cannot build the message: {error}"),
            })
    }

    /// A mail of its own carrying `file` as an attachment (MIME `multipart/mixed`), in
    /// the same thread as the reply's text.
    fn build_file(
        &self,
        to: &ChannelIdentity,
        file: &FilePayload,
        context: &ReplyContext,
    ) -> Result<Message, SendError> {
        let permanent = |reason: String| SendError::Permanent { reason };
        let digest = {
            use sha2::{Digest, Sha256};
            hex::encode(Sha256::digest(&file.bytes))
        };
        let message_id = context
            .outbox_id
            .map(|outbox_id| self.message_id(outbox_id, usize::MAX, to, &digest));
        let content_type = ContentType::parse(&file.mime_type)
            .map_err(|error| permanent(format!("email: {:?}: {error}", file.mime_type)))?;
        let note = match file.kind {
            FileKind::Voice => "A voice note is attached.",
            FileKind::Audio => "An audio file is attached.",
        };
        self.headers(to, context, message_id)?
            .multipart(
                MultiPart::mixed()
                    .singlepart(SinglePart::plain(note.to_string()))
                    .singlepart(
                        Attachment::new(file.file_name.clone())
                            .body(file.bytes.clone(), content_type),
                    ),
            )
            .map_err(|error| permanent(format!("email: cannot build the message: {error}")))
    }

    /// From, To, Subject, threading and `Auto-Submitted` of a reply.
    fn headers(
        &self,
        to: &ChannelIdentity,
        context: &ReplyContext,
        message_id: Option<String>,
    ) -> Result<MessageBuilder, SendError> {
        let permanent = |reason: String| SendError::Permanent { reason };
        let from: Mailbox = self
            .settings
            .address
            .parse()
            .map_err(|error| permanent(format!("email: the bot's address: {error}")))?;
        let recipient: Mailbox = to
            .peer()
            .parse()
            .map_err(|error| permanent(format!("email: recipient {}: {error}", to.peer())))?;
        let subject = match context
            .subject
            .as_deref()
            .map(str::trim)
            .filter(|subject| !subject.is_empty())
        {
            Some(subject) if subject.to_lowercase().starts_with("re:") => subject.to_string(),
            Some(subject) => format!("Re: {subject}"),
            None => format!("Message from {}", self.settings.address),
        };
        let mut builder = Message::builder()
            .message_id(message_id)
            .from(from)
            .to(recipient)
            .subject(subject)
            .header(AutoSubmitted);
        if let Some(parent) = &context.reply_to {
            builder = builder.in_reply_to(parent.clone());
        }
        if !context.references.is_empty() {
            builder = builder.references(context.references.join(" "));
        }
        Ok(builder)
    }
}

impl SmtpTransport {
    /// The `Message-ID` of part `part` of outbox row `outbox_id`: the same on every
    /// attempt. The hash of what is sent keeps it unique when a rebuilt database
    /// numbers its rows from 1 again.
    fn message_id(&self, outbox_id: i64, part: usize, to: &ChannelIdentity, text: &str) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for field in [self.settings.address.as_str(), to.as_str(), text] {
            hasher.update(field.as_bytes());
            hasher.update([0]);
        }
        let digest = hex::encode(&hasher.finalize()[..8]);
        let domain = self
            .settings
            .address
            .rsplit_once('@')
            .map_or("saint.invalid", |(_, domain)| domain);
        format!("<saint.{outbox_id}.{part}.{digest}@{domain}>")
    }

    /// Submits a built `message`; returns its `Message-ID`.
    async fn submit(&self, message: Message) -> Result<String, SendError> {
        let id = message
            .headers()
            .get_raw("Message-ID")
            .map(str::to_string)
            .unwrap_or_default();
        self.mailer.send(message).await.map_err(classify)?;
        Ok(id)
    }
}

/// `Auto-Submitted: auto-replied` (RFC 3834): other bots and vacation responders must
/// not answer it.
#[derive(Clone, Debug)]
struct AutoSubmitted;

impl lettre::message::header::Header for AutoSubmitted {
    fn name() -> lettre::message::header::HeaderName {
        lettre::message::header::HeaderName::new_from_ascii_str("Auto-Submitted")
    }

    fn parse(_: &str) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        Ok(Self)
    }

    fn display(&self) -> lettre::message::header::HeaderValue {
        lettre::message::header::HeaderValue::new(Self::name(), "auto-replied".to_string())
    }
}

fn classify(error: lettre::transport::smtp::Error) -> SendError {
    let reason = format!("email: {error}");
    let code = error.status().map(|code| code.to_string());
    if code
        .as_deref()
        .is_some_and(|code| code.starts_with("535") || code.starts_with("530"))
    {
        return SendError::Credentials { reason };
    }
    // A 5xx, or what the client refuses to send at all (an address that needs SMTPUTF8
    // on a server without it): trying again changes nothing.
    if error.is_permanent() || error.is_client() {
        return SendError::Permanent { reason };
    }
    SendError::Retry {
        reason,
        after: None,
    }
}

impl Transport for SmtpTransport {
    fn kind(&self) -> ChannelKind {
        ChannelKind::Email
    }

    fn max_chars(&self) -> usize {
        // One mail carries any answer; nothing is split.
        1_000_000
    }

    fn render(&self, markdown: &str) -> String {
        markdown.to_string()
    }

    fn reply_limit(&self) -> Option<ReplyLimit> {
        Some(ReplyLimit {
            replies: self.settings.reply_limit_per_hour,
            window: std::time::Duration::from_secs(3600),
        })
    }

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move { self.submit(self.build(to, text, context, part)?).await })
    }

    fn send_file<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        file: &'a FilePayload,
        context: &'a ReplyContext,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move { self.submit(self.build_file(to, file, context)?).await })
    }

    // `mark_read`: the default, nothing (mail has no read receipt the bot sends).

    fn fetch_attachment<'a>(
        &'a self,
        attachment: &'a AttachmentRef,
        _max_bytes: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, SendError>> {
        // The poller saves attachments with the message; one missing was not saved.
        Box::pin(async move {
            Err(SendError::Permanent {
                reason: format!("email: attachment {:?} was not saved", attachment.file_name),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transport() -> SmtpTransport {
        let channel: saint_config::ChannelConfig = serde_json::from_value(serde_json::json!({
            "name": "mail", "kind": "email",
            "settings": {"address": "saint@acme.example", "imapHost": "127.0.0.1",
                         "smtpHost": "127.0.0.1", "smtpSecurity": "none"},
            "secretEnv": {"password": "P"},
        }))
        .unwrap();
        SmtpTransport::new(EmailSettings::read(&channel, &|_| Some("pw".to_string())).unwrap())
            .unwrap()
    }

    fn message_id(transport: &SmtpTransport, outbox_id: i64, text: &str) -> String {
        let ana = ChannelIdentity::parse(ChannelKind::Email, "ana@acme.example").unwrap();
        let context = ReplyContext {
            reply_to: Some("<m1@acme.example>".to_string()),
            outbox_id: Some(outbox_id),
            ..Default::default()
        };
        let message = transport.build(&ana, text, &context, 0).unwrap();
        message.headers().get_raw("Message-ID").unwrap().to_string()
    }

    #[test]
    fn a_voice_note_is_a_mail_of_its_own_with_the_file_attached() {
        let transport = transport();
        let ana = ChannelIdentity::parse(ChannelKind::Email, "ana@acme.example").unwrap();
        let context = ReplyContext {
            reply_to: Some("<m1@acme.example>".to_string()),
            subject: Some("Plans".to_string()),
            outbox_id: Some(9),
            ..Default::default()
        };
        let file = FilePayload {
            bytes: b"OggS\0\x02voice".to_vec(),
            mime_type: "audio/ogg".to_string(),
            kind: FileKind::Voice,
            file_name: "voice-note.ogg".to_string(),
        };
        let message = transport.build_file(&ana, &file, &context).unwrap();
        let raw = String::from_utf8(message.formatted()).unwrap();
        assert!(raw.contains("Subject: Re: Plans"), "{raw}");
        assert!(raw.contains("In-Reply-To: <m1@acme.example>"), "{raw}");
        assert!(raw.contains("Content-Type: multipart/mixed"), "{raw}");
        assert!(raw.contains("Content-Type: audio/ogg"), "{raw}");
        assert!(
            raw.contains("Content-Disposition: attachment; filename=\"voice-note.ogg\""),
            "{raw}"
        );
        let formatted = message.formatted();
        let parsed = mail_parser::MessageParser::default()
            .parse(formatted.as_slice())
            .unwrap();
        let attachment = parsed.attachments().next().unwrap();
        assert_eq!(attachment.contents(), file.bytes.as_slice());
        // The same row and file are the same mail on a resend; the reply's text is not.
        let again = transport.build_file(&ana, &file, &context).unwrap();
        let id = |message: &Message| message.headers().get_raw("Message-ID").unwrap().to_string();
        assert_eq!(id(&again), id(&message));
        assert_ne!(
            id(&transport.build(&ana, "Noted.", &context, 0).unwrap()),
            id(&message)
        );
    }

    #[test]
    fn a_resent_outbox_row_is_the_same_message_and_another_row_is_not() {
        let transport = transport();
        let first = message_id(&transport, 7, "Noted.");
        assert!(
            first.starts_with("<saint.7.0.") && first.ends_with("@acme.example>"),
            "{first}"
        );
        assert_eq!(message_id(&transport, 7, "Noted."), first, "a resend");
        assert_ne!(message_id(&transport, 8, "Noted."), first, "the next row");
        // A rebuilt database numbers rows from 1 again; another text is another mail.
        assert_ne!(message_id(&transport, 7, "Other."), first);
    }
}
