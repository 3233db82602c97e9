//! WhatsApp Cloud API: the webhook (verification handshake, signed deliveries) and the
//! Graph API client (send, read receipts, media).

mod api;
mod webhook;

use std::{sync::Arc, time::Duration};

use http::HeaderMap;
use saint_config::{ChannelConfig, channel_settings::WHATSAPP};

pub use self::{
    api::GraphClient,
    webhook::{WebhookError, parse_delivery, verify_challenge, verify_signature},
};
use crate::{
    channel_settings::{SettingsError, SettingsReader},
    transport::{OpenError, OpenedChannel, Webhook, WebhookDelivery, WebhookRefusal},
};

/// Opens a WhatsApp channel: the Graph API client and the signed webhook.
pub fn open(
    channel: &ChannelConfig,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<OpenedChannel, OpenError> {
    let settings = WhatsappSettings::read(channel, lookup)?;
    Ok(OpenedChannel {
        transport: Arc::new(GraphClient::new(settings.clone())),
        connection: None,
        webhook: Some(Arc::new(settings)),
    })
}

impl Webhook for WhatsappSettings {
    fn handshake(&self, query: &[(String, String)]) -> Result<String, WebhookRefusal> {
        let get = |name: &str| {
            query
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        verify_challenge(
            self,
            get("hub.mode"),
            get("hub.verify_token"),
            get("hub.challenge"),
        )
        .map_err(|error| WebhookRefusal::Forbidden(error.to_string()))
    }

    fn receive(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        _is_contact: &(dyn Fn(&saint_config::ChannelIdentity) -> bool + Sync),
    ) -> Result<WebhookDelivery, WebhookRefusal> {
        let signature = headers
            .get("x-hub-signature-256")
            .and_then(|value| value.to_str().ok());
        verify_signature(&self.app_secret, signature, body)
            .map_err(|error| WebhookRefusal::Unauthorized(error.to_string()))?;
        let delivery = parse_delivery(self, body)
            .map_err(|error| WebhookRefusal::BadRequest(error.to_string()))?;
        Ok(WebhookDelivery {
            messages: delivery.messages,
            skipped: delivery.skipped,
            ..WebhookDelivery::default()
        })
    }
}

/// Longest text body the Cloud API takes.
pub const MAX_TEXT_CHARS: usize = 4_096;

/// How long after a person's last message a free-form message may be sent to them;
/// after that only a pre-approved template may open the conversation.
pub const CUSTOMER_SERVICE_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The Graph API used unless `settings.apiBaseUrl` says otherwise.
pub const DEFAULT_API_BASE_URL: &str = "https://graph.facebook.com/v21.0";

/// A WhatsApp channel's settings, read and checked.
#[derive(Clone)]
pub struct WhatsappSettings {
    /// Channel name.
    pub channel: String,
    /// The business phone number's id (the Graph API's `/<id>/messages`).
    pub phone_number_id: String,
    /// Graph API base, version included (`https://graph.facebook.com/v21.0`).
    pub api_base_url: String,
    /// Bearer token for the Graph API.
    pub access_token: String,
    /// Signs webhook deliveries (`X-Hub-Signature-256`).
    pub app_secret: String,
    /// Answers the webhook verification handshake.
    pub verify_token: String,
}

impl std::fmt::Debug for WhatsappSettings {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("WhatsappSettings")
            .field("channel", &self.channel)
            .field("phone_number_id", &self.phone_number_id)
            .field("api_base_url", &self.api_base_url)
            .finish_non_exhaustive()
    }
}

impl WhatsappSettings {
    /// Reads `channel`'s settings and secrets (through `lookup`).
    pub fn read(
        channel: &ChannelConfig,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let reader = SettingsReader::new(
            channel,
            "whatsapp",
            WHATSAPP.settings,
            WHATSAPP.secrets,
            lookup,
        )?;
        let phone_number_id = reader.required("phoneNumberId")?;
        if !phone_number_id.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(reader.invalid(
                "phoneNumberId",
                "must be the numeric id Meta shows for the number",
            ));
        }
        let api_base_url = reader.http_url("apiBaseUrl", Some(DEFAULT_API_BASE_URL))?;
        Ok(Self {
            channel: channel.name.clone(),
            phone_number_id: phone_number_id.to_string(),
            api_base_url,
            access_token: reader.secret("accessToken")?,
            app_secret: reader.secret("appSecret")?,
            verify_token: reader.secret("verifyToken")?,
        })
    }
}
