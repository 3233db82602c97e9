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

use futures::{SinkExt, StreamExt, future::BoxFuture};
use serde_json::{Value, json};
use tokio::{sync::watch, time::Instant};
use tokio_tungstenite::{Connector, tungstenite::Message};

use super::{
    Mode, SlackSettings,
    api::SlackApi,
    event_callback::{EventOutcome, EventReader, parse_event},
    interaction::parse_interaction,
};
use crate::transport::{ChannelState, Connection, InboxSink, SendError};

/// How often the bot pings the socket.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Silence (no frame, no pong) after which the socket is taken for dead.
const SILENCE_LIMIT: Duration = Duration::from_secs(90);
/// Longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Wait after refused credentials before trying again.
const CREDENTIALS_RETRY: Duration = Duration::from_secs(60);

/// The Socket Mode side of a Slack channel.
pub struct SocketConnection {
    settings: SlackSettings,
    api: Arc<SlackApi>,
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

/// Why a connection ended.
enum SessionEnd {
    /// Asked to stop.
    Stopped,
    /// Slack refused a token.
    Refused(String),
    /// Slack asked for a new connection (`disconnect`).
    Refresh(String),
    /// Anything else; try again after the backoff.
    Failed(String),
    /// Slack rate-limited a call (HTTP 429): try again after the backoff, but no
    /// sooner than its `Retry-After`.
    Throttled(String, Duration),
}

use crate::http_client::reconnect_wait;

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

    async fn run_loop(self: Arc<Self>, sink: Arc<dyn InboxSink>, stop: watch::Receiver<bool>) {
        let channel = self.settings.channel.clone();
        let mut backoff = Duration::from_secs(1);
        loop {
            let mut stop_signal = stop.clone();
            let end = tokio::select! {
                end = self.session(sink.as_ref(), &mut backoff) => end,
                _ = stop_signal.wait_for(|stopped| *stopped) => SessionEnd::Stopped,
            };
            let wait = match end {
                SessionEnd::Stopped => return,
                SessionEnd::Refused(reason) => {
                    tracing::error!(%channel, %reason, "slack: a token was refused");
                    sink.report(&channel, ChannelState::CredentialsRefused(reason));
                    CREDENTIALS_RETRY
                }
                SessionEnd::Refresh(reason) => {
                    tracing::info!(%channel, %reason, "slack: socket refresh asked; reconnecting");
                    Duration::from_millis(100)
                }
                SessionEnd::Failed(reason) => {
                    tracing::warn!(%channel, %reason, retry_in_s = backoff.as_secs(), "slack: socket lost; reconnecting");
                    sink.report(&channel, ChannelState::Retrying(reason));
                    let wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
                SessionEnd::Throttled(reason, after) => {
                    let wait = reconnect_wait(backoff, Some(after));
                    tracing::warn!(%channel, %reason, retry_in_s = wait.as_secs(), "slack: rate-limited while connecting; waiting Slack's Retry-After");
                    sink.report(&channel, ChannelState::Retrying(reason));
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    wait
                }
            };
            let mut stop_signal = stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop_signal.wait_for(|stopped| *stopped) => return,
            }
        }
    }

    async fn session(&self, sink: &dyn InboxSink, backoff: &mut Duration) -> SessionEnd {
        let failed = |error: SendError| match error {
            SendError::Credentials { reason } => SessionEnd::Refused(reason),
            SendError::Retry {
                reason,
                after: Some(after),
            } => SessionEnd::Throttled(reason, after),
            SendError::Retry { reason, .. } | SendError::Permanent { reason } => {
                SessionEnd::Failed(reason)
            }
        };
        let bot = match self.api.auth_test().await {
            Ok(bot) => bot,
            Err(error) => return failed(error),
        };
        let url = match self.api.open_connection(self.app_token()).await {
            Ok(url) => url,
            Err(error) => return failed(error),
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
                return SessionEnd::Failed(format!("slack: socket connect failed: {error}"));
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
                        return SessionEnd::Failed(format!("slack: ping failed: {error}"));
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(heard + SILENCE_LIMIT) => {
                    return SessionEnd::Failed(format!("slack: no frame for {}s", SILENCE_LIMIT.as_secs()));
                }
            };
            heard = Instant::now();
            let text = match frame {
                None => return SessionEnd::Failed("slack: socket ended".to_string()),
                Some(Err(error)) => {
                    return SessionEnd::Failed(format!("slack: socket failed: {error}"));
                }
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    return SessionEnd::Failed(format!(
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
                    *backoff = Duration::from_secs(1);
                    sink.report(&self.settings.channel, ChannelState::Up);
                    continue;
                }
                Some("disconnect") => {
                    let reason = envelope["reason"].as_str().unwrap_or("unknown").to_string();
                    let _ = socket.close(None).await;
                    // Socket Mode was switched off for the app: wait as after a failure.
                    return if reason == "link_disabled" {
                        SessionEnd::Failed(
                            "slack: Socket Mode is disabled for the app (link_disabled)"
                                .to_string(),
                        )
                    } else {
                        SessionEnd::Refresh(reason)
                    };
                }
                _ => {}
            }
            let Some(envelope_id) = envelope["envelope_id"].as_str() else {
                tracing::debug!(channel = %self.settings.channel, kind = %envelope["type"], "slack: frame without an envelope ignored");
                continue;
            };
            if let Err(reason) = self.deliver(sink, &reader, &envelope, envelope_id).await {
                // No acknowledgement: Slack delivers the envelope again.
                return SessionEnd::Failed(reason);
            }
            let ack = json!({"envelope_id": envelope_id}).to_string();
            if let Err(error) = socket.send(Message::Text(ack.into())).await {
                return SessionEnd::Failed(format!("slack: acknowledgement failed: {error}"));
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

impl Connection for SocketConnection {
    fn run(
        self: Arc<Self>,
        sink: Arc<dyn InboxSink>,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(self.run_loop(sink, stop))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reconnect_waits_at_least_slacks_retry_after() {
        let second = Duration::from_secs(1);
        assert_eq!(reconnect_wait(second, None), second);
        assert_eq!(reconnect_wait(second, Some(30 * second)), 30 * second);
        assert_eq!(reconnect_wait(8 * second, Some(second)), 8 * second);
    }
}
