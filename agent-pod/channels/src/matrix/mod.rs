//! Matrix: the client-server API over plain HTTP with the bot account's access token.
//! `/sync` long polling brings messages and invitations in (the since token is saved
//! with the messages, in one transaction); `PUT /rooms/{room}/send` sends replies with a
//! transaction id derived from the reply, so a send retried after a crash is
//! deduplicated by the homeserver.
//!
//! No Matrix SDK: the few endpoints a bot needs are a handful of JSON requests, and the
//! SDKs bring a store, crypto and a runtime of their own. End-to-end encrypted rooms are
//! not supported: the bot says so in the room, once, and never answers there.

mod api;
mod render;
mod sync;

use std::sync::Arc;

use saint_config::{ChannelConfig, ChannelIdentity, ChannelKind, channel_settings::MATRIX};

pub use self::{
    api::{MatrixApi, transaction_id},
    render::{markdown_to_html, plain_body},
    sync::SyncConnection,
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    transport::{GroupRules, OpenError, OpenedChannel},
};

/// Longest text part sent, in characters. An event may be 65,536 bytes and the plain
/// `body` and the HTML `formatted_body` both count: at this length both fit for text
/// of up to three-byte characters (a part that would not fit goes as plain text).
pub const MAX_TEXT_CHARS: usize = 8_000;

/// Opens a Matrix channel: the client for sending and the `/sync` connection.
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    let settings = MatrixSettings::read(channel, lookup)?;
    let api = Arc::new(MatrixApi::new(settings.clone()));
    Ok(OpenedChannel {
        transport: api.clone(),
        connection: Some(Arc::new(SyncConnection::new(settings, api))),
        webhook: None,
    })
}

/// Checks a Matrix channel's settings and secrets.
pub fn check(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SettingsError> {
    MatrixSettings::read(channel, lookup).map(drop)
}

/// A Matrix channel's settings, read and checked.
#[derive(Clone)]
pub struct MatrixSettings {
    /// Channel name.
    pub channel: String,
    /// The homeserver's client-server API base (`https://matrix.example.org`).
    pub homeserver_url: String,
    /// The bot's user id (`@saint:example.org`), the account the token belongs to.
    pub user_id: ChannelIdentity,
    /// The bot account's access token.
    pub access_token: String,
    /// Which room messages are answered.
    pub group_rules: GroupRules,
}

impl std::fmt::Debug for MatrixSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("MatrixSettings")
            .field("channel", &self.channel)
            .field("homeserver_url", &self.homeserver_url)
            .field("user_id", &self.user_id)
            .finish_non_exhaustive()
    }
}

impl MatrixSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader =
            SettingsReader::new(channel, "matrix", MATRIX.settings, MATRIX.secrets, lookup)?;
        let homeserver_url = reader.http_url("homeserverUrl", None)?;
        let user_id = reader.required("userId")?;
        let user_id = ChannelIdentity::parse(ChannelKind::Matrix, user_id).map_err(|_| {
            reader.invalid(
                "userId",
                format!("is {user_id:?}, not a Matrix user id (@name:server)"),
            )
        })?;
        Ok(Self {
            channel: channel.name.clone(),
            homeserver_url,
            user_id,
            group_rules: GroupRules::read(&reader)?,
            access_token: reader.secret("accessToken")?,
        })
    }

    /// The bot's user id as a string.
    pub fn user(&self) -> &str {
        self.user_id.peer()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn channel(settings: &[(&str, &str)]) -> ChannelConfig {
        serde_json::from_value(serde_json::json!({
            "name": "matrix",
            "kind": "matrix",
            "settings": settings.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect::<BTreeMap<_, _>>(),
            "secretEnv": {"accessToken": "MATRIX_TOKEN"},
        }))
        .unwrap()
    }

    fn read(settings: &[(&str, &str)]) -> Result<MatrixSettings, String> {
        MatrixSettings::read(&channel(settings), &|name| {
            (name == "MATRIX_TOKEN").then(|| "syt_token".to_string())
        })
        .map_err(|error| error.to_string())
    }

    #[test]
    fn settings_are_read_and_each_mistake_is_named() {
        let settings = read(&[
            ("homeserverUrl", "https://matrix.acme.example/"),
            ("userId", "@saint:acme.example"),
            ("groupPolicy", "contacts"),
        ])
        .unwrap();
        assert_eq!(settings.homeserver_url, "https://matrix.acme.example");
        assert_eq!(settings.user(), "@saint:acme.example");
        assert_eq!(settings.access_token, "syt_token");
        assert_eq!(
            settings.group_rules.policy,
            crate::transport::GroupPolicy::Contacts
        );
        assert!(settings.group_rules.require_mention);
        let cases = [
            (
                vec![("userId", "@saint:acme.example")],
                "settings.homeserverUrl is required",
            ),
            (
                vec![("homeserverUrl", "https://m.example")],
                "settings.userId is required",
            ),
            (
                vec![("homeserverUrl", "ftp://m.example"), ("userId", "@s:x")],
                "settings.homeserverUrl must be an http(s) URL",
            ),
            (
                vec![("homeserverUrl", "https://m.example"), ("userId", "saint")],
                "settings.userId is \"saint\", not a Matrix user id",
            ),
            (
                vec![
                    ("homeserverUrl", "https://m.example"),
                    ("userId", "@s:x"),
                    ("requireMention", "sometimes"),
                ],
                "settings.requireMention is \"sometimes\"",
            ),
            (
                vec![
                    ("homeserverUrl", "https://m.example"),
                    ("userId", "@s:x"),
                    ("deviceId", "X"),
                ],
                "settings.deviceId is not a setting of matrix channels",
            ),
        ];
        for (settings, expected) in cases {
            let error = read(&settings).unwrap_err();
            assert!(error.contains(expected), "{error} (expected {expected})");
        }
        let unset = MatrixSettings::read(
            &channel(&[("homeserverUrl", "https://m.example"), ("userId", "@s:x")]),
            &|_| None,
        )
        .unwrap_err();
        assert!(
            unset
                .to_string()
                .contains("secrets.accessToken: variable MATRIX_TOKEN is unset"),
            "{unset}"
        );
    }
}
