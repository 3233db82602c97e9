//! Socket Mode: `auth.test` (who the bot is, so mentions of it are recognised), then
//! `apps.connections.open` with the app-level token for a one-use WebSocket URL, then
//! envelopes until the socket ends.
//!
//! Each `events_api` envelope's message (and each `interactive` envelope's button
//! press) is committed to the inbox first and only then acknowledged
//! (`{"envelope_id": …}`): Slack redelivers an unacknowledged envelope
//! (`retry_attempt` > 0), and the inbox's unique platform ids make the redelivery
//! harmless, so a crash or a failed commit loses nothing. A failed commit ends the
//! connection without the acknowledgement. `disconnect` (Slack refreshing the link) is
//! answered with a new connection at once; a dropped socket, a refused connection or
//! silence is retried with backoff (1 s doubling to 60 s, reset once Slack says hello).

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_tungstenite::{Connector, tungstenite::Message};

use super::{
    Mode, SlackSettings,
    api::SlackApi,
    event_callback::{EventOutcome, EventReader, parse_event},
    interaction::parse_interaction,
};
use crate::{
    reconnect::{Backoff, Policy, SessionEnd, Sessions},
    transport::{ChannelState, InboxSink},
};

/// How often the bot pings the socket.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Silence (no frame, no pong) after which the socket is taken for dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(90);
/// The wait before a connection Slack asked for (`disconnect`).
const REFRESH_WAIT: Duration = Duration::from_millis(100);

/// The Socket Mode side of a Slack channel.
pub struct SocketConnection {
    settings: SlackSettings,
    api: Arc<SlackApi>,
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl SocketConnection {
    /// The connection for `settings` (in socket mode), sending through `api`.
    pub fn new(settings: SlackSettings, api: Arc<SlackApi>) -> Self {
        Self {
            settings,
            api,
            tls: OnceLock::new(),
        }
    }

    fn app_token(&self) -> &str {
        match &self.settings.mode {
            Mode::Socket { app_token } => app_token,
            Mode::Events { .. } => "",
        }
    }

    // The system's roots, read at the first connection (opening does no I/O).
    fn tls(&self) -> Arc<rustls::ClientConfig> {
        self.tls
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                for certificate in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(certificate);
                }
                Arc::new(
                    rustls::ClientConfig::builder()
                        .with_root_certificates(roots)
                        .with_no_client_auth(),
                )
            })
            .clone()
    }

    async fn session(&self, sink: &dyn InboxSink, backoff: &mut Backoff) -> SessionEnd {
        let bot = match self.api.auth_test().await {
            Ok(bot) => bot,
            Err(error) => return error.into(),
        };
        let url = match self.api.open_connection(self.app_token()).await {
            Ok(url) => url,
            Err(error) => return error.into(),
        };
        let connected = tokio_tungstenite::connect_async_tls_with_config(
            url.as_str(),
            None,
            true,
            Some(Connector::Rustls(self.tls())),
        )
        .await;
        let mut socket = match connected {
            Ok((socket, _)) => socket,
            Err(error) => {
                return SessionEnd::failed(format!("slack: socket connect failed: {error}"));
            }
        };
        let reader = EventReader {
            channel: &self.settings.channel,
            bot_user_id: Some(&bot.user_id),
            rules: self.settings.groups,
            is_contact: &|identity| sink.is_contact(identity),
        };
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        let mut heard = Instant::now();
        loop {
            let frame = tokio::select! {
                frame = socket.next() => frame,
                _ = ping.tick() => {
                    if let Err(error) = socket.send(Message::Ping(Vec::new().into())).await {
                        return SessionEnd::failed(format!("slack: ping failed: {error}"));
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(heard + SILENCE_LIMIT) => {
                    return SessionEnd::failed(format!("slack: no frame for {}s", SILENCE_LIMIT.as_secs()));
                }
            };
            heard = Instant::now();
            let text = match frame {
                None => return SessionEnd::failed("slack: socket ended"),
                Some(Err(error)) => {
                    return SessionEnd::failed(format!("slack: socket failed: {error}"));
                }
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    return SessionEnd::failed(format!(
                        "slack: socket closed by Slack ({})",
                        frame.map_or_else(|| "no reason".to_string(), |frame| frame.to_string())
                    ));
                }
                // Pings are answered by the socket itself; pongs and binary carry nothing.
                Some(Ok(_)) => continue,
            };
            let Ok(envelope) = serde_json::from_str::<Value>(&text) else {
                tracing::warn!(channel = %self.settings.channel, "slack: a socket frame is not JSON; ignored");
                continue;
            };
            match envelope["type"].as_str() {
                Some("hello") => {
                    backoff.reset();
                    sink.report(&self.settings.channel, ChannelState::Up);
                    continue;
                }
                Some("disconnect") => {
                    let reason = envelope["reason"].as_str().unwrap_or("unknown").to_string();
                    let _ = socket.close(None).await;
                    // Socket Mode was switched off for the app: wait as after a failure.
                    if reason == "link_disabled" {
                        return SessionEnd::failed(
                            "slack: Socket Mode is disabled for the app (link_disabled)",
                        );
                    }
                    let channel = &self.settings.channel;
                    tracing::info!(%channel, %reason, "slack: socket refresh asked; reconnecting");
                    return SessionEnd::Reconnect { wait: REFRESH_WAIT };
                }
                _ => {}
            }
            let Some(envelope_id) = envelope["envelope_id"].as_str() else {
                tracing::debug!(channel = %self.settings.channel, kind = %envelope["type"], "slack: frame without an envelope ignored");
                continue;
            };
            if let Err(reason) = self.deliver(sink, &reader, &envelope, envelope_id).await {
                // No acknowledgement: Slack delivers the envelope again.
                return SessionEnd::failed(reason);
            }
            let ack = json!({"envelope_id": envelope_id}).to_string();
            if let Err(error) = socket.send(Message::Text(ack.into())).await {
                return SessionEnd::failed(format!("slack: acknowledgement failed: {error}"));
            }
        }
    }

    // Commits what the envelope holds; `Ok` once it is safe to acknowledge.
    async fn deliver(
        &self,
        sink: &dyn InboxSink,
        reader: &EventReader<'_>,
        envelope: &Value,
        envelope_id: &str,
    ) -> Result<(), String> {
        let channel = &self.settings.channel;
        let outcome = match envelope["type"].as_str() {
            Some("events_api") => parse_event(reader, &envelope["payload"]),
            // A button pressed (Slack waits three seconds for the acknowledgement).
            Some("interactive") => parse_interaction(reader, &envelope["payload"]),
            _ => {
                tracing::debug!(%channel, kind = %envelope["type"], "slack: envelope type not served; acknowledged");
                return Ok(());
            }
        };
        let attempt = envelope["retry_attempt"].as_u64().unwrap_or(0);
        if attempt > 0 {
            tracing::debug!(%channel, envelope_id, attempt, reason = %envelope["retry_reason"], "slack: redelivered envelope");
        }
        match outcome {
            EventOutcome::Skipped(reason) => {
                tracing::debug!(%channel, envelope_id, %reason, "slack: event skipped");
                Ok(())
            }
            EventOutcome::Message(message) => sink
                .commit(channel, vec![(*message, None)], envelope_id.to_string())
                .await
                .map_err(|error| format!("slack: failed to store a message: {error}")),
            EventOutcome::Withdrawn(platform_id) => sink
                .commit_with_withdrawals(
                    channel,
                    Vec::new(),
                    vec![platform_id],
                    envelope_id.to_string(),
                )
                .await
                .map_err(|error| format!("slack: failed to record a deletion: {error}")),
        }
    }
}

impl Sessions for SocketConnection {
    const POLICY: Policy = Policy::quiet()
        .refused("slack: a token was refused")
        .failed("slack: socket lost; reconnecting")
        .throttled("slack: rate-limited while connecting; waiting Slack's Retry-After");

    fn channel(&self) -> &str {
        &self.settings.channel
    }

    async fn run_session(&self, sink: &dyn InboxSink, backoff: &mut Backoff) -> SessionEnd {
        self.session(sink, backoff).await
    }
}
