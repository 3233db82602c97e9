//! Telegram Bot API: long polling with `getUpdates` (the default: no public endpoint
//! needed) or webhook deliveries authenticated by their secret token header; replies
//! with `sendMessage` in Telegram's HTML; files with `getFile`.
//!
//! In webhook mode the webhook itself is registered by the operator (`setWebhook` with
//! the bot's `/channels/<name>/webhook` URL and `secret_token` = the webhook secret);
//! the bot only checks its token and learns its username with `getMe`.

mod api;
mod poll;
mod render;
mod update;

use std::sync::{Arc, OnceLock};

use http::HeaderMap;
use saint_config::{ChannelConfig, channel_settings::TELEGRAM};
use subtle::ConstantTimeEq;

pub use self::{
    api::{ApiError, BotApi, BotUser},
    poll::{IdentityCheck, Poller},
    render::{CHUNK_CHARS, MAX_TEXT_CHARS, escape, markdown_to_telegram_html},
    update::{BotIdentity, Received, Update, read_update},
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    transport::{GroupRules, OpenError, OpenedChannel, Webhook, WebhookDelivery, WebhookRefusal},
};

/// The Bot API used unless `settings.apiBaseUrl` says otherwise.
pub const DEFAULT_API_BASE_URL: &str = "https://api.telegram.org";

/// The header Telegram puts the webhook's secret token in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// How updates reach the bot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `getUpdates` long polling.
    Polling,
    /// Telegram posts each update to the bot's webhook.
    Webhook,
}

/// A telegram channel's settings, read and checked.
#[derive(Clone)]
pub struct TelegramSettings {
    /// Channel name.
    pub channel: String,
    /// Bot API base (`https://api.telegram.org`), without a trailing slash.
    pub api_base_url: String,
    /// Polling or webhook.
    pub mode: Mode,
    /// Which group messages are answered.
    pub group_rules: GroupRules,
    /// The token BotFather gave (`123456:ABC…`); part of every request's path.
    pub bot_token: String,
    /// The secret token Telegram sends with each webhook delivery (webhook mode).
    pub webhook_secret: Option<String>,
}

impl std::fmt::Debug for TelegramSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TelegramSettings")
            .field("channel", &self.channel)
            .field("api_base_url", &self.api_base_url)
            .field("mode", &self.mode)
            .field("group_rules", &self.group_rules)
            .finish_non_exhaustive()
    }
}

impl TelegramSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader = SettingsReader::new(
            channel,
            "telegram",
            TELEGRAM.settings,
            TELEGRAM.secrets,
            lookup,
        )?;
        let api_base_url = reader.http_url("apiBaseUrl", Some(DEFAULT_API_BASE_URL))?;
        let mode = match reader.optional("mode").map(str::trim) {
            None | Some("polling") => Mode::Polling,
            Some("webhook") => Mode::Webhook,
            Some(other) => {
                return Err(reader.invalid("mode", format!("is {other:?}; use polling or webhook")));
            }
        };
        let group_rules = GroupRules::read(&reader)?;
        let bot_token = reader.secret("botToken")?;
        let webhook_secret = match mode {
            Mode::Webhook => Some(reader.secret("webhookSecret")?),
            // A secret that nothing would check is refused rather than silently unused.
            Mode::Polling if channel.secret_env.contains_key("webhookSecret") => {
                return Err(reader.invalid(
                    "mode",
                    "is polling, but secrets.webhookSecret is set: it is used only with \
                     mode: webhook (set mode: webhook, or remove the secret)",
                ));
            }
            Mode::Polling => None,
        };
        Ok(Self {
            channel: channel.name.clone(),
            api_base_url,
            mode,
            group_rules,
            bot_token,
            webhook_secret,
        })
    }

    /// The bot's user id: the number before the token's colon.
    pub fn bot_id(&self) -> Option<i64> {
        self.bot_token.split_once(':')?.0.parse().ok()
    }
}

/// Opens a telegram channel: the Bot API client, and the poller or the webhook.
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    let settings = TelegramSettings::read(channel, lookup)?;
    let api = Arc::new(BotApi::new(settings.clone()));
    Ok(match settings.mode {
        Mode::Polling => OpenedChannel {
            transport: api.clone(),
            connection: Some(Arc::new(Poller::new(api))),
            webhook: None,
        },
        Mode::Webhook => {
            let identity = Arc::new(OnceLock::new());
            OpenedChannel {
                transport: api.clone(),
                connection: Some(Arc::new(IdentityCheck::new(api, identity.clone()))),
                webhook: Some(Arc::new(TelegramWebhook { settings, identity })),
            }
        }
    })
}

/// Checks a telegram channel's settings and secrets.
pub fn check(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), SettingsError> {
    TelegramSettings::read(channel, lookup).map(drop)
}

/// Webhook deliveries: one `Update` per request, with the secret token header.
pub struct TelegramWebhook {
    settings: TelegramSettings,
    // The bot's username, once `getMe` told it.
    identity: Arc<OnceLock<BotUser>>,
}

impl TelegramWebhook {
    /// A webhook for `settings`, knowing the bot as `identity` once that is set.
    pub fn new(settings: TelegramSettings, identity: Arc<OnceLock<BotUser>>) -> Self {
        Self { settings, identity }
    }
}

impl Webhook for TelegramWebhook {
    fn receive(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        is_contact: &(dyn Fn(&saint_config::ChannelIdentity) -> bool + Sync),
    ) -> Result<WebhookDelivery, WebhookRefusal> {
        let expected = self.settings.webhook_secret.as_deref().unwrap_or_default();
        let presented = headers
            .get(SECRET_HEADER)
            .map(|value| value.as_bytes())
            .unwrap_or_default();
        if expected.is_empty() || !bool::from(presented.ct_eq(expected.as_bytes())) {
            return Err(WebhookRefusal::Unauthorized(
                "telegram: missing or wrong X-Telegram-Bot-Api-Secret-Token".to_string(),
            ));
        }
        let update: Update = serde_json::from_slice(body).map_err(|error| {
            WebhookRefusal::BadRequest(format!("telegram: not an update: {error}"))
        })?;
        let bot = match self.identity.get() {
            Some(user) => BotIdentity {
                id: user.id,
                username: user.username.clone(),
            },
            None => {
                // Until getMe answered, a mention by username cannot be recognised;
                // Telegram redelivers a refused update, by which time it can.
                if update_mentions_someone(body) {
                    return Err(WebhookRefusal::BadRequest(
                        "telegram: the bot's username is not known yet (getMe has not \
                         answered); Telegram will deliver this update again"
                            .to_string(),
                    ));
                }
                BotIdentity {
                    id: self.settings.bot_id().unwrap_or_default(),
                    username: None,
                }
            }
        };
        // A button press is acknowledged in the answer to the delivery itself (the Bot
        // API takes one method call there), sent once the press is stored.
        let response = update.callback_query_id().map(|id| {
            let call =
                serde_json::json!({"method": "answerCallbackQuery", "callback_query_id": id});
            ("application/json", call.to_string())
        });
        match read_update(
            &self.settings.channel,
            &update,
            &bot,
            &self.settings.group_rules,
            is_contact,
        ) {
            Received::Message(message) => Ok(WebhookDelivery {
                messages: vec![*message],
                response,
                ..WebhookDelivery::default()
            }),
            Received::Skipped(reason) => Ok(WebhookDelivery {
                skipped: vec![reason],
                response,
                ..WebhookDelivery::default()
            }),
        }
    }
}

fn update_mentions_someone(body: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let message = &value["message"];
    if !matches!(
        message["chat"]["type"].as_str(),
        Some("group" | "supergroup")
    ) {
        return false;
    }
    ["entities", "caption_entities"].iter().any(|key| {
        message[key].as_array().is_some_and(|entities| {
            entities
                .iter()
                .any(|entity| matches!(entity["type"].as_str(), Some("mention" | "bot_command")))
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use saint_config::ChannelKind;

    use super::*;

    fn channel(settings: &[(&str, &str)], secrets: &[(&str, &str)]) -> ChannelConfig {
        ChannelConfig {
            name: "tg".to_string(),
            kind: ChannelKind::Telegram,
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

    fn lookup(variable: &str) -> Option<String> {
        Some(format!("value-of-{variable}"))
    }

    #[test]
    fn settings_are_checked_with_the_field_named() {
        let read = |settings: &[(&str, &str)], secrets: &[(&str, &str)]| {
            TelegramSettings::read(&channel(settings, secrets), &lookup)
                .map(|settings| settings.mode)
                .map_err(|error| error.to_string())
        };
        assert_eq!(read(&[], &[("botToken", "T")]), Ok(Mode::Polling));
        assert_eq!(
            read(&[], &[]),
            Err("channel \"tg\": secrets.botToken is required".to_string())
        );
        assert_eq!(
            read(&[("mode", "webhook")], &[("botToken", "T")]),
            Err("channel \"tg\": secrets.webhookSecret is required".to_string())
        );
        assert_eq!(
            read(
                &[("mode", "webhook")],
                &[("botToken", "T"), ("webhookSecret", "S")]
            ),
            Ok(Mode::Webhook)
        );
        let unused = read(&[], &[("botToken", "T"), ("webhookSecret", "S")]).unwrap_err();
        assert!(
            unused.contains("settings.mode is polling, but secrets.webhookSecret is set"),
            "{unused}"
        );
        assert!(
            read(&[("mode", "push")], &[("botToken", "T")])
                .unwrap_err()
                .contains("settings.mode is \"push\"")
        );
        assert!(
            read(&[("apiBaseUrl", "ftp://x")], &[("botToken", "T")])
                .unwrap_err()
                .contains("settings.apiBaseUrl")
        );
        // Contacts-only groups are served in both modes.
        assert!(
            read(
                &[("mode", "webhook"), ("groupPolicy", "contacts")],
                &[("botToken", "T"), ("webhookSecret", "S")]
            )
            .is_ok()
        );
        assert!(
            read(&[("chatId", "1")], &[("botToken", "T")])
                .unwrap_err()
                .contains("settings.chatId is not a setting of telegram channels")
        );
    }

    #[test]
    fn a_webhook_press_is_stored_and_acknowledged_in_the_answer() {
        let settings = TelegramSettings::read(
            &channel(
                &[("mode", "webhook")],
                &[("botToken", "T"), ("webhookSecret", "S")],
            ),
            &lookup,
        )
        .unwrap();
        let webhook = TelegramWebhook::new(settings, Arc::new(OnceLock::new()));
        let body = serde_json::json!({"update_id": 5, "callback_query": {
            "id": "77001", "chat_instance": "-1",
            "from": {"id": 111, "is_bot": false, "first_name": "Ana"},
            "message": {"message_id": 9, "date": 1_700_000_000, "text": "Approval needed",
                        "chat": {"id": 111, "type": "private"}},
            "data": "approve:K7QX2P"}})
        .to_string();
        let mut headers = HeaderMap::new();
        headers.insert(SECRET_HEADER, "value-of-S".parse().unwrap());
        let delivery = webhook
            .receive(&headers, body.as_bytes(), &|_| false)
            .unwrap();
        assert_eq!(delivery.messages[0].text, "approve K7QX2P");
        assert!(delivery.messages[0].pressed);
        assert_eq!(
            delivery.response,
            Some((
                "application/json",
                r#"{"callback_query_id":"77001","method":"answerCallbackQuery"}"#.to_string()
            ))
        );
    }

    #[test]
    fn the_debug_form_never_shows_the_token() {
        let settings =
            TelegramSettings::read(&channel(&[], &[("botToken", "SECRET_VARIABLE")]), &lookup)
                .unwrap();
        assert!(!format!("{settings:?}").contains("value-of-SECRET_VARIABLE"));
    }
}
