//! Discord: the Gateway (a WebSocket the bot connects out to: heartbeats, identify,
//! resume) for inbound messages, and the REST API for replies. The bot needs no
//! public endpoint. An approval request gets Approve and Reject buttons, whose presses
//! arrive over the Gateway as interactions.

mod api;
mod gateway;
mod interaction;
mod render;

use std::sync::Arc;

use saint_config::{ChannelConfig, channel_settings::DISCORD};

pub use self::{
    api::RestClient,
    gateway::{GatewayConnection, GatewayCursor, INTENTS},
    interaction::{Interaction, approval_components, read_interaction},
    render::markdown_to_discord,
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    transport::{GroupRules, OpenError, OpenedChannel},
};

/// Longest message content the REST API takes.
pub const MAX_TEXT_CHARS: usize = 2_000;

/// The REST API used unless `settings.apiBaseUrl` says otherwise.
pub const DEFAULT_API_BASE_URL: &str = "https://discord.com/api/v10";

/// Opens a Discord channel: the REST client and the Gateway connection (which starts
/// when the agent runs it).
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    let settings = DiscordSettings::read(channel, lookup)?;
    let rest = Arc::new(RestClient::new(settings.clone()));
    Ok(OpenedChannel {
        transport: rest.clone(),
        connection: Some(Arc::new(GatewayConnection::new(settings, rest))),
        webhook: None,
    })
}

/// Checks a Discord channel's settings and secrets.
pub fn check(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SettingsError> {
    DiscordSettings::read(channel, lookup).map(drop)
}

/// A Discord channel's settings, read and checked.
#[derive(Clone)]
pub struct DiscordSettings {
    /// Channel name.
    pub channel: String,
    /// REST API base, version included (`https://discord.com/api/v10`).
    pub api_base_url: String,
    /// The bot's token (`Authorization: Bot <token>`, and the Gateway's identify).
    pub bot_token: String,
    /// Which guild messages are answered.
    pub group_rules: GroupRules,
}

impl std::fmt::Debug for DiscordSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DiscordSettings")
            .field("channel", &self.channel)
            .field("api_base_url", &self.api_base_url)
            .field("group_rules", &self.group_rules)
            .finish_non_exhaustive()
    }
}

impl DiscordSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader = SettingsReader::new(
            channel,
            "discord",
            DISCORD.settings,
            DISCORD.secrets,
            lookup,
        )?;
        let api_base_url = reader.http_url("apiBaseUrl", Some(DEFAULT_API_BASE_URL))?;
        let group_rules = GroupRules::read(&reader)?;
        let bot_token = reader.secret("botToken")?;
        Ok(Self {
            channel: channel.name.clone(),
            api_base_url,
            // A token pasted with the `Bot ` prefix is the same token.
            bot_token: bot_token
                .trim()
                .trim_start_matches("Bot ")
                .trim()
                .to_string(),
            group_rules,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use saint_config::ChannelKind;

    use super::*;

    fn channel(settings: &[(&str, &str)], secrets: &[(&str, &str)]) -> ChannelConfig {
        ChannelConfig {
            name: "discord".to_string(),
            kind: ChannelKind::Discord,
            settings: settings
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect::<BTreeMap<_, _>>(),
            secret_env: secrets
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    fn lookup(name: &str) -> Option<String> {
        (name == "DISCORD_TOKEN").then(|| "Bot abc.def".to_string())
    }

    #[test]
    fn settings_default_the_api_and_require_the_token() {
        let settings =
            DiscordSettings::read(&channel(&[], &[("botToken", "DISCORD_TOKEN")]), &lookup)
                .unwrap();
        assert_eq!(settings.api_base_url, DEFAULT_API_BASE_URL);
        assert_eq!(settings.bot_token, "abc.def");
        assert_eq!(settings.group_rules, GroupRules::default());
        let missing = DiscordSettings::read(&channel(&[], &[]), &lookup).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "channel \"discord\": secrets.botToken is required"
        );
        let unknown = DiscordSettings::read(
            &channel(&[("guildId", "1")], &[("botToken", "DISCORD_TOKEN")]),
            &lookup,
        )
        .unwrap_err();
        assert!(
            unknown.to_string().contains("settings.guildId"),
            "{unknown}"
        );
        let bad = DiscordSettings::read(
            &channel(
                &[("apiBaseUrl", "ftp://x"), ("requireMention", "yes")],
                &[("botToken", "DISCORD_TOKEN")],
            ),
            &lookup,
        )
        .unwrap_err();
        assert!(bad.to_string().contains("settings.apiBaseUrl"), "{bad}");
    }
}
