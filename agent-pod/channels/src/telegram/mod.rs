//! Telegram (being built: opening one is refused until its module lands).

use saint_config::ChannelConfig;

use crate::transport::{OpenError, OpenedChannel};

/// Opens a telegram channel.
pub fn open(
    channel: &ChannelConfig,
    _lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    Err(OpenError::Start {
        channel: channel.name.clone(),
        reason: "telegram channels are not served by this build yet".into(),
    })
}

/// Checks a telegram channel's settings and secrets.
pub fn check(
    _channel: &ChannelConfig,
    _lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), crate::SettingsError> {
    Ok(())
}
