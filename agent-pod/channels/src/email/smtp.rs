//! Replies by SMTP submission: `From:` the bot's address, threaded with `In-Reply-To`
//! and `References`, `Re:` on the subject, and `Auto-Submitted: auto-replied` so other
//! robots know not to answer it.

use futures::future::BoxFuture;
use lettre::{
    AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor,
    message::{Mailbox, header::ContentType},
    transport::smtp::authentication::Credentials,
};
use saint_config::{ChannelIdentity, ChannelKind};

use super::{EmailSettings, Security};
use crate::{
    message::{AttachmentRef, InboundMessage, ReplyContext},
    transport::{SendError, Transport},
};

/// Sends for one e-mail channel.
pub struct SmtpTransport {
    settings: EmailSettings,
    mailer: AsyncSmtpTransport<Tokio1Executor>,
}

impl SmtpTransport {
    /// A transport for `settings`.
    pub fn new(settings: EmailSettings) -> Result<Self, String> {
        let host = settings.smtp_host.as_str();
        let builder = match settings.smtp_security {
            Security::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(host),
            Security::StartTls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host),
            Security::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                host,
            )),
        }
        .map_err(|error| format!("smtp: {error}"))?;
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
    ) -> Result<Message, SendError> {
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
            .from(from)
            .to(recipient)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .header(AutoSubmitted);
        if let Some(parent) = &context.reply_to {
            builder = builder.in_reply_to(parent.clone());
        }
        if !context.references.is_empty() {
            builder = builder.references(context.references.join(" "));
        }
        builder
            .body(text.to_string())
            .map_err(|error| permanent(format!("email: cannot build the message: {error}")))
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
    if error.is_permanent() {
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

    fn send<'a>(
        &'a self,
        to: &'a ChannelIdentity,
        text: &'a str,
        context: &'a ReplyContext,
        _part: usize,
    ) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let message = self.build(to, text, context)?;
            let id = message
                .headers()
                .get_raw("Message-ID")
                .map(str::to_string)
                .unwrap_or_default();
            self.mailer.send(message).await.map_err(classify)?;
            Ok(id)
        })
    }

    fn mark_read<'a>(
        &'a self,
        _message: &'a InboundMessage,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async { Ok(()) })
    }

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
