//! Matrix (being built: opening one is refused until its module lands).

use saint_config::ChannelConfig;

use crate::transport::{OpenError, OpenedChannel};

/// Opens a matrix channel.
pub fn open(
    channel: &ChannelConfig,
    _lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    Err(OpenError::Start {
        channel: channel.name.clone(),
        reason: "matrix channels are not served by this build yet".into(),
    })
}

/// Checks a matrix channel's settings and secrets.
pub fn check(
    _channel: &ChannelConfig,
    _lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), crate::SettingsError> {
    Ok(())
}
