//! E-mail: IMAP (IDLE, polling where the server has no IDLE) for inbound, SMTP
//! submission for replies, and sender authentication — the `From:` address counts only
//! when an aligned DKIM signature verifies, or when the configured receiving server's
//! `Authentication-Results` says DMARC (or aligned DKIM) passed.

mod auth;
mod imap;
mod inbound;
mod smtp;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use saint_config::{ChannelConfig, ErrorChain, channel_settings::EMAIL};

pub use self::{
    auth::{SenderCheck, Verifier, VerifierError, verify_sender},
    inbound::{MAX_ATTACHMENT_BYTES, MailError, ParsedMail, parse_mail},
    smtp::{SmtpSetupError, SmtpTransport},
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    reconnect::{Backoff, Policy, SessionEnd, Sessions},
    transport::{InboxSink, OpenError, OpenedChannel},
};

/// Opens an e-mail channel: SMTP submission for replies, the IMAP poller for inbound
/// (attachments are saved under `workspace`).
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
    workspace: &Path,
) -> Result<OpenedChannel, OpenError> {
    let settings = EmailSettings::read(channel, lookup)?;
    // `OpenError` is `Clone + Eq`, so the cause travels as its text.
    let start = |error: &(dyn std::error::Error + 'static)| OpenError::Start {
        channel: channel.name.clone(),
        reason: ErrorChain(error).to_string(),
    };
    let smtp = SmtpTransport::new(settings.clone()).map_err(|error| start(&error))?;
    let verifier = Verifier::new(&settings).map_err(|error| start(&error))?;
    Ok(OpenedChannel {
        transport: Arc::new(smtp),
        connection: Some(Arc::new(ImapConnection {
            settings,
            verifier: Arc::new(verifier),
            workspace: workspace.to_path_buf(),
        })),
        webhook: None,
    })
}

/// The IMAP side of an e-mail channel.
struct ImapConnection {
    settings: EmailSettings,
    verifier: Arc<Verifier>,
    workspace: PathBuf,
}

impl Sessions for ImapConnection {
    // A refused login is reported, not logged.
    const POLICY: Policy = Policy::quiet().failed("imap: connection lost; reconnecting");

    fn channel(&self) -> &str {
        &self.settings.channel
    }

    async fn run_session(&self, sink: &dyn InboxSink, backoff: &mut Backoff) -> SessionEnd {
        let (settings, verifier, workspace) = (&self.settings, &self.verifier, &self.workspace);
        imap::session(settings, verifier, sink, workspace, backoff).await
    }
}

/// How a connection is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// TLS from the first byte (IMAPS 993, SMTPS 465).
    Tls,
    /// Plain, then STARTTLS before logging in (IMAP 143, submission 587).
    StartTls,
    /// No TLS at all: only for a server on the same host or a trusted network.
    None,
}

impl Security {
    fn parse(reader: &SettingsReader<'_>, key: &'static str) -> Result<Self, SettingsError> {
        match reader.optional(key) {
            None | Some("tls") => Ok(Self::Tls),
            Some("starttls") => Ok(Self::StartTls),
            Some("none") => Ok(Self::None),
            Some(other) => {
                Err(reader.invalid(key, format!("is {other:?}; use tls, starttls or none")))
            }
        }
    }
}

/// An e-mail channel's settings, read and checked.
#[derive(Clone)]
pub struct EmailSettings {
    /// Channel name.
    pub channel: String,
    /// The bot's address (`From:` of replies).
    pub address: String,
    /// IMAP server.
    pub imap_host: String,
    /// IMAP port.
    pub imap_port: u16,
    /// IMAP connection security.
    pub imap_security: Security,
    /// SMTP submission server.
    pub smtp_host: String,
    /// SMTP port.
    pub smtp_port: u16,
    /// SMTP connection security.
    pub smtp_security: Security,
    /// Login name for both (default: the address).
    pub username: String,
    /// Password for both.
    pub password: String,
    /// Mailbox read (default `INBOX`).
    pub mailbox: String,
    /// The receiving server whose `Authentication-Results` header is trusted, if any.
    pub authserv_id: Option<String>,
    /// Poll interval where the server has no IDLE.
    pub poll_interval: Duration,
    /// DNS server for DKIM key lookups (default: the system's resolver).
    pub dns_server: Option<SocketAddr>,
    /// Messages of one correspondent answered per hour, Contacts included
    /// (`replyLimitPerHour`, default [`DEFAULT_REPLY_LIMIT_PER_HOUR`]).
    pub reply_limit_per_hour: u32,
}

/// Mails of one correspondent answered per hour unless `replyLimitPerHour` says
/// otherwise: a person rarely writes more, and an auto-responder loop stops there.
pub const DEFAULT_REPLY_LIMIT_PER_HOUR: u32 = 30;

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EmailSettings")
            .field("channel", &self.channel)
            .field("address", &self.address)
            .field("imap_host", &self.imap_host)
            .field("smtp_host", &self.smtp_host)
            .finish_non_exhaustive()
    }
}

fn port(
    reader: &SettingsReader<'_>,
    key: &'static str,
    default: u16,
) -> Result<u16, SettingsError> {
    match reader.optional(key) {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| reader.invalid(key, format!("is {text:?}, not a port number"))),
    }
}

impl EmailSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader = SettingsReader::new(channel, "email", EMAIL.settings, EMAIL.secrets, lookup)?;
        let address = reader.required("address")?.trim().to_lowercase();
        if address.matches('@').count() != 1 || address.starts_with('@') || address.ends_with('@') {
            return Err(reader.invalid("address", format!("is {address:?}, not an e-mail address")));
        }
        let imap_security = Security::parse(&reader, "imapSecurity")?;
        let smtp_security = Security::parse(&reader, "smtpSecurity")?;
        let imap_port = port(
            &reader,
            "imapPort",
            if imap_security == Security::Tls {
                993
            } else {
                143
            },
        )?;
        let smtp_port = port(
            &reader,
            "smtpPort",
            match smtp_security {
                Security::Tls => 465,
                Security::StartTls | Security::None => 587,
            },
        )?;
        let poll_interval = match reader.optional("pollSeconds") {
            None => Duration::from_secs(60),
            Some(text) => text
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|seconds| (5..=3600).contains(seconds))
                .map(Duration::from_secs)
                .ok_or_else(|| {
                    reader.invalid("pollSeconds", format!("is {text:?}; use 5 to 3600"))
                })?,
        };
        let dns_server = reader
            .optional("dnsServer")
            .map(|text| {
                text.trim()
                    .parse::<SocketAddr>()
                    .or_else(|_| format!("{}:53", text.trim()).parse::<SocketAddr>())
                    .map_err(|_| {
                        reader.invalid(
                            "dnsServer",
                            format!("is {text:?}, not an IP address (with optional :port)"),
                        )
                    })
            })
            .transpose()?;
        let reply_limit_per_hour = match reader.optional("replyLimitPerHour") {
            None => DEFAULT_REPLY_LIMIT_PER_HOUR,
            Some(text) => text
                .trim()
                .parse::<u32>()
                .ok()
                .filter(|limit| (1..=10_000).contains(limit))
                .ok_or_else(|| {
                    reader.invalid(
                        "replyLimitPerHour",
                        format!("is {text:?}; use a whole number from 1 to 10000"),
                    )
                })?,
        };
        Ok(Self {
            channel: channel.name.clone(),
            username: reader
                .optional("username")
                .map_or_else(|| address.clone(), str::to_string),
            address,
            imap_host: reader.required("imapHost")?.trim().to_string(),
            imap_port,
            imap_security,
            smtp_host: reader.required("smtpHost")?.trim().to_string(),
            smtp_port,
            smtp_security,
            password: reader.secret("password")?,
            mailbox: reader.optional("mailbox").unwrap_or("INBOX").to_string(),
            authserv_id: reader
                .optional("authservId")
                .map(|id| id.trim().to_lowercase()),
            poll_interval,
            dns_server,
            reply_limit_per_hour,
        })
    }
}
