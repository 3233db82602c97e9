//! Which `settings` and `secrets` keys each channel kind takes: one list for the
//! operator (CRD validation, so a typo is refused at `kubectl apply`) and the agent (the
//! channel's reader, which refuses unknown keys too).

use crate::ChannelKind;

/// The keys of one channel kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelKeys {
    /// Settings the kind reads.
    pub settings: &'static [&'static str],
    /// Settings it cannot work without.
    pub required_settings: &'static [&'static str],
    /// Secrets the kind reads.
    pub secrets: &'static [&'static str],
    /// Secrets it cannot work without.
    pub required_secrets: &'static [&'static str],
}

/// WhatsApp Cloud API.
pub const WHATSAPP: ChannelKeys = ChannelKeys {
    settings: &["phoneNumberId", "apiBaseUrl"],
    required_settings: &["phoneNumberId"],
    secrets: &["accessToken", "appSecret", "verifyToken"],
    required_secrets: &["accessToken", "appSecret", "verifyToken"],
};

/// E-mail over IMAP and SMTP.
pub const EMAIL: ChannelKeys = ChannelKeys {
    settings: &[
        "address",
        "imapHost",
        "imapPort",
        "imapSecurity",
        "smtpHost",
        "smtpPort",
        "smtpSecurity",
        "username",
        "mailbox",
        "authservId",
        "pollSeconds",
        "dnsServer",
        "replyLimitPerHour",
    ],
    required_settings: &["address", "imapHost", "smtpHost"],
    secrets: &["password"],
    required_secrets: &["password"],
};

/// Settings every group-capable kind (Telegram, Slack, Discord, Matrix) reads: whether
/// the bot serves group conversations (`open`, `contacts`, `disabled`) and whether it
/// answers there only when addressed (`true`, the default, or `false`).
pub const GROUP_SETTINGS: [&str; 2] = ["groupPolicy", "requireMention"];

/// Telegram Bot API: long polling by default, `mode: webhook` with a secret token.
pub const TELEGRAM: ChannelKeys = ChannelKeys {
    settings: &["apiBaseUrl", "mode", "groupPolicy", "requireMention"],
    required_settings: &[],
    secrets: &["botToken", "webhookSecret"],
    required_secrets: &["botToken"],
};

/// Slack: Socket Mode by default (`appToken`), `mode: events` for the Events API over
/// HTTP (`signingSecret`).
pub const SLACK: ChannelKeys = ChannelKeys {
    settings: &["apiBaseUrl", "mode", "groupPolicy", "requireMention"],
    required_settings: &[],
    secrets: &["botToken", "appToken", "signingSecret"],
    required_secrets: &["botToken"],
};

/// Discord: the Gateway for inbound, the REST API for sending.
pub const DISCORD: ChannelKeys = ChannelKeys {
    settings: &["apiBaseUrl", "groupPolicy", "requireMention"],
    required_settings: &[],
    secrets: &["botToken"],
    required_secrets: &["botToken"],
};

/// Matrix: the client-server API (`/sync`) with an access token.
pub const MATRIX: ChannelKeys = ChannelKeys {
    settings: &["homeserverUrl", "userId", "groupPolicy", "requireMention"],
    required_settings: &["homeserverUrl", "userId"],
    secrets: &["accessToken"],
    required_secrets: &["accessToken"],
};

/// The built-in HTTP API.
pub const HTTP: ChannelKeys = ChannelKeys {
    settings: &["port", "chatPage"],
    required_settings: &[],
    secrets: &["token"],
    required_secrets: &["token"],
};

/// The keys of `kind`, for the kinds this version serves.
pub fn keys(kind: ChannelKind) -> Option<ChannelKeys> {
    match kind {
        ChannelKind::Http => Some(HTTP),
        ChannelKind::Whatsapp => Some(WHATSAPP),
        ChannelKind::Email => Some(EMAIL),
        ChannelKind::Telegram => Some(TELEGRAM),
        ChannelKind::Slack => Some(SLACK),
        ChannelKind::Discord => Some(DISCORD),
        ChannelKind::Matrix => Some(MATRIX),
    }
}
