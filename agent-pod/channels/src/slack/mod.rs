//! Slack: Socket Mode (the bot connects out; no public endpoint) by default, or the
//! Events API over HTTP (`mode: events`, signed deliveries to the webhook), and the Web
//! API (`chat.postMessage`) for replies in Slack's mrkdwn. An approval request gets
//! Approve and Reject buttons; their presses come back as interactions.

mod api;
mod event_callback;
mod interaction;
mod render;
mod socket;
mod webhook;

use std::sync::Arc;

use saint_config::{ChannelConfig, channel_settings::SLACK};

pub use self::{
    api::{BotIdentity, SlackApi, classify_error},
    event_callback::{EventOutcome, EventReader, parse_event, strip_mentions},
    interaction::{approval_blocks, parse_interaction},
    render::{MAX_BLOCK_CHARS, escape, markdown_to_mrkdwn},
    socket::SocketConnection,
    webhook::{EventsWebhook, SignatureError, verify_request},
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    transport::{GroupRules, OpenError, OpenedChannel},
};

/// The Web API used unless `settings.apiBaseUrl` says otherwise.
pub const DEFAULT_API_BASE_URL: &str = "https://slack.com/api";

/// Longest text part sent: Slack recommends at most 4,000 characters per message (it
/// truncates past 40,000).
pub const MAX_TEXT_CHARS: usize = 4_000;

/// Opens a Slack channel: the Web API client, and Socket Mode or the Events webhook.
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    let settings = SlackSettings::read(channel, lookup)?;
    let api = Arc::new(SlackApi::new(&settings));
    Ok(match &settings.mode {
        Mode::Socket { .. } => OpenedChannel {
            transport: api.clone(),
            connection: Some(Arc::new(SocketConnection::new(settings, api))),
            webhook: None,
        },
        Mode::Events { .. } => OpenedChannel {
            transport: api,
            connection: None,
            webhook: Some(Arc::new(EventsWebhook::new(settings))),
        },
    })
}

/// Checks a Slack channel's settings and secrets.
pub fn check(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SettingsError> {
    SlackSettings::read(channel, lookup).map(drop)
}

/// How events reach the bot.
#[derive(Clone)]
pub enum Mode {
    /// Socket Mode: `apps.connections.open` with the app-level token, then a WebSocket.
    Socket {
        /// The app-level token (`xapp-…`, scope `connections:write`).
        app_token: String,
    },
    /// The Events API: Slack posts signed requests to the bot's webhook.
    Events {
        /// Signs every request (`X-Slack-Signature`).
        signing_secret: String,
    },
}

/// A Slack channel's settings, read and checked.
#[derive(Clone)]
pub struct SlackSettings {
    /// Channel name.
    pub channel: String,
    /// Web API base (`https://slack.com/api`), without a trailing slash.
    pub api_base_url: String,
    /// The bot token (`xoxb-…`) for the Web API.
    pub bot_token: String,
    /// Socket Mode or the Events API, with the secret that goes with it.
    pub mode: Mode,
    /// Which channel messages are answered.
    pub groups: GroupRules,
}

impl std::fmt::Debug for SlackSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            Mode::Socket { .. } => "socket",
            Mode::Events { .. } => "events",
        };
        formatter
            .debug_struct("SlackSettings")
            .field("channel", &self.channel)
            .field("api_base_url", &self.api_base_url)
            .field("mode", &mode)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl SlackSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader = SettingsReader::new(channel, "slack", SLACK.settings, SLACK.secrets, lookup)?;
        let api_base_url = reader.http_url("apiBaseUrl", Some(DEFAULT_API_BASE_URL))?;
        let groups = GroupRules::read(&reader)?;
        let named = |key: &str| channel.secret_env.contains_key(key);
        // A secret of the other mode would be silently unused: refuse it by name.
        let mode = match reader.optional("mode").map(str::trim) {
            None | Some("socket") => {
                if named("signingSecret") {
                    return Err(reader.invalid(
                        "mode",
                        "is socket (the default), where secrets.signingSecret is not used: \
                         remove it, or set mode: events",
                    ));
                }
                Mode::Socket {
                    app_token: reader.secret("appToken")?,
                }
            }
            Some("events") => {
                if named("appToken") {
                    return Err(reader.invalid(
                        "mode",
                        "is events, where secrets.appToken (Socket Mode's token) is not used: \
                         remove it, or set mode: socket",
                    ));
                }
                Mode::Events {
                    signing_secret: reader.secret("signingSecret")?,
                }
            }
            Some(other) => {
                return Err(reader.invalid("mode", format!("is {other:?}; use socket or events")));
            }
        };
        Ok(Self {
            channel: channel.name.clone(),
            api_base_url,
            bot_token: reader.secret("botToken")?,
            mode,
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use saint_config::ChannelKind;

    use super::*;

    fn channel(settings: &[(&str, &str)], secrets: &[&str]) -> ChannelConfig {
        ChannelConfig {
            name: "slack".to_string(),
            kind: ChannelKind::Slack,
            settings: settings
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect(),
            secret_env: secrets
                .iter()
                .map(|key| (key.to_string(), format!("SLACK_{}", key.to_uppercase())))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    fn lookup(variable: &str) -> Option<String> {
        Some(format!("value-of-{variable}"))
    }

    #[test]
    fn socket_mode_is_the_default_and_needs_both_tokens() {
        let settings = SlackSettings::read(&channel(&[], &["botToken", "appToken"]), &lookup)
            .expect("complete");
        assert!(
            matches!(settings.mode, Mode::Socket { ref app_token } if app_token == "value-of-SLACK_APPTOKEN")
        );
        assert_eq!(settings.api_base_url, DEFAULT_API_BASE_URL);
        assert_eq!(
            SlackSettings::read(&channel(&[], &["botToken"]), &lookup)
                .unwrap_err()
                .to_string(),
            "channel \"slack\": secrets.appToken is required"
        );
    }

    #[test]
    fn a_secret_of_the_other_mode_is_refused_by_name() {
        let socket = SlackSettings::read(
            &channel(&[], &["botToken", "appToken", "signingSecret"]),
            &lookup,
        )
        .unwrap_err()
        .to_string();
        assert!(
            socket.contains("secrets.signingSecret is not used"),
            "{socket}"
        );
        let events = SlackSettings::read(
            &channel(
                &[("mode", "events")],
                &["botToken", "appToken", "signingSecret"],
            ),
            &lookup,
        )
        .unwrap_err()
        .to_string();
        assert!(events.contains("secrets.appToken"), "{events}");
        assert_eq!(
            SlackSettings::read(&channel(&[("mode", "events")], &["botToken"]), &lookup)
                .unwrap_err()
                .to_string(),
            "channel \"slack\": secrets.signingSecret is required"
        );
        let events = SlackSettings::read(
            &channel(&[("mode", "events")], &["botToken", "signingSecret"]),
            &lookup,
        )
        .expect("complete");
        assert!(matches!(events.mode, Mode::Events { .. }));
    }

    #[test]
    fn wrong_values_name_their_setting() {
        let error = |settings: &[(&str, &str)]| {
            SlackSettings::read(&channel(settings, &["botToken", "appToken"]), &lookup)
                .unwrap_err()
                .to_string()
        };
        assert!(error(&[("mode", "rtm")]).contains("settings.mode is \"rtm\""));
        assert!(error(&[("apiBaseUrl", "ftp://x")]).contains("settings.apiBaseUrl"));
        assert!(error(&[("groupPolicy", "everyone")]).contains("settings.groupPolicy"));
        assert!(error(&[("channelId", "C1")]).contains("settings.channelId is not a setting"));
        assert!(error(&[("requireMention", "yes")]).contains("settings.requireMention"));
    }
}
