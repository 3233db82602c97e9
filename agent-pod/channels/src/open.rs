//! Opening a declared channel: its kind's settings are read and its parts built, or
//! the reason it cannot be served is returned (naming the channel and the field).
//! Opening does no I/O: connections start when the agent runs them.

use std::path::Path;

use saint_config::{ChannelConfig, ChannelKind};

use crate::{
    discord, email, matrix, slack, telegram,
    transport::{OpenError, OpenedChannel},
    whatsapp,
};

/// The kinds served through this crate (the HTTP API is the agent's own).
pub const KINDS: &[ChannelKind] = &[
    ChannelKind::Whatsapp,
    ChannelKind::Email,
    ChannelKind::Telegram,
    ChannelKind::Slack,
    ChannelKind::Discord,
    ChannelKind::Matrix,
];

/// Opens `channel`, reading its secrets through `lookup`; files it receives are saved
/// under `workspace`. `Ok(None)` for the HTTP channel, which the agent serves itself.
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
    workspace: &Path,
) -> Result<Option<OpenedChannel>, OpenError> {
    let opened = match channel.kind {
        ChannelKind::Http => return Ok(None),
        ChannelKind::Whatsapp => whatsapp::open(channel, lookup)?,
        ChannelKind::Email => email::open(channel, lookup, workspace)?,
        ChannelKind::Telegram => telegram::open(channel, lookup)?,
        ChannelKind::Slack => slack::open(channel, lookup)?,
        ChannelKind::Discord => discord::open(channel, lookup)?,
        ChannelKind::Matrix => matrix::open(channel, lookup)?,
    };
    Ok(Some(opened))
}

/// Checks `channel`'s settings and secrets without building anything: what `open`
/// would refuse for them. `Ok` for the HTTP channel (the agent checks its token).
pub fn check(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), crate::SettingsError> {
    match channel.kind {
        ChannelKind::Http => Ok(()),
        ChannelKind::Whatsapp => whatsapp::WhatsappSettings::read(channel, lookup).map(drop),
        ChannelKind::Email => email::EmailSettings::read(channel, lookup).map(drop),
        ChannelKind::Telegram => telegram::check(channel, lookup),
        ChannelKind::Slack => slack::check(channel, lookup),
        ChannelKind::Discord => discord::check(channel, lookup),
        ChannelKind::Matrix => matrix::check(channel, lookup),
    }
}
