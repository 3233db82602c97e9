//! The Gateway connection: a WebSocket the bot opens to Discord (`GET /gateway/bot`
//! names it). Discord says Hello with a heartbeat interval; the bot beats at that
//! interval (the first beat after a random fraction of it) and treats a beat without
//! an ACK before the next one as a dead ("zombie") connection. It identifies with the
//! message intents, or resumes a session it had: Discord then replays what happened
//! after the last sequence number the bot saw.
//!
//! Discord has no acknowledgement, so a message is safe once it is in the inbox: each
//! MESSAGE_CREATE is committed with the session's position (session id, sequence
//! number, resume address) in the same transaction, and a restarted bot resumes from
//! that position, so what was said while it was down is replayed. Only when Discord
//! refuses the resume does the bot identify afresh, and it says in the log that
//! messages sent meanwhile may be missed. A button press (INTERACTION_CREATE) is
//! committed the same way and then acknowledged.

use std::{
    collections::{HashSet, VecDeque},
    hash::{BuildHasher, Hasher},
    sync::Arc,
    time::Duration,
};

use futures::{SinkExt, StreamExt};
use saint_config::{ChannelIdentity, ChannelKind};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::Mutex, time::Instant};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{
        Message,
        protocol::{CloseFrame, frame::coding::CloseCode},
    },
};

use super::{DiscordSettings, RestClient, interaction::display_name, read_interaction};
use crate::{
    message::{AttachmentRef, Conversation, InboundMessage, ReplyContext},
    reconnect::{self, Backoff, Policy, Sessions},
    transport::{ChannelState, InboxSink, SendError},
};

/// GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT (the last is privileged: it must
/// be enabled for the bot in the Developer Portal, or Discord closes with 4014).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

/// How long to wait for the socket to open and for Hello.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long before trying again after Discord refused the token or the intents: a
/// fix in the Developer Portal needs no restart, but the bot must not hammer Discord
/// (which limits identifies per day).
const REFUSED_RETRY: Duration = Duration::from_secs(10 * 60);
/// Message ids remembered to skip a replayed MESSAGE_CREATE without a commit.
const RECENT_IDS: usize = 1_024;

/// The channel's position as the inbox stores it: enough to resume the session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayCursor {
    /// The session to resume.
    pub session_id: String,
    /// The last sequence number handled.
    pub seq: u64,
    /// Where to resume (READY's `resume_gateway_url`).
    pub resume_url: String,
    /// The bot's own user id (READY's `user.id`), to recognise mentions after a resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// The inbound side of a Discord channel.
pub struct GatewayConnection {
    settings: DiscordSettings,
    rest: Arc<RestClient>,
    /// What the sessions keep between them (one session at a time holds it).
    state: Mutex<State>,
}

impl GatewayConnection {
    /// A connection for `settings`, finding the Gateway through `rest`.
    pub fn new(settings: DiscordSettings, rest: Arc<RestClient>) -> Self {
        Self {
            settings,
            rest,
            state: Mutex::new(State::default()),
        }
    }
}

impl Sessions for GatewayConnection {
    const POLICY: Policy = Policy::quiet()
        .refused("discord: the gateway refused the bot; trying again in 10 minutes")
        .failed("discord: gateway connection failed; reconnecting")
        .throttled("discord: rate-limited asking for the gateway; waiting Discord's retry_after")
        .credentials_retry(REFUSED_RETRY);

    fn channel(&self) -> &str {
        &self.settings.channel
    }

    async fn run_session(
        &self,
        sink: &dyn InboxSink,
        backoff: &mut Backoff,
    ) -> reconnect::SessionEnd {
        let mut state = self.state.lock().await;
        self.next_session(&mut state, sink, backoff).await
    }
}

/// Why a session ended.
enum SessionEnd {
    /// Discord refused the token or intents: wait long before trying again.
    Refused(String),
    /// Discord refused the connection's parameters (shards, version): the same.
    Unservable(String),
    /// The connection dropped or was closed; resume if there is a session.
    Lost(String),
    /// Discord rate-limited `GET /gateway/bot` (429): try again after the backoff, but
    /// no sooner than its `retry_after`.
    Throttled(String, Duration),
}

/// What the loop keeps between sessions.
#[derive(Default)]
struct State {
    /// Whether the saved position was read (before the first session).
    loaded: bool,
    /// The session to resume, if any.
    cursor: Option<GatewayCursor>,
    /// The last sequence number received (handled) on the current session.
    seq: Option<u64>,
    /// Whether the last session reached READY or RESUMED.
    up: bool,
    recent: RecentIds,
}

#[derive(Default)]
struct RecentIds {
    order: VecDeque<String>,
    set: HashSet<String>,
}

impl RecentIds {
    fn contains(&self, id: &str) -> bool {
        self.set.contains(id)
    }

    fn insert(&mut self, id: String) {
        if self.set.insert(id.clone()) {
            self.order.push_back(id);
            if self.order.len() > RECENT_IDS
                && let Some(oldest) = self.order.pop_front()
            {
                self.set.remove(&oldest);
            }
        }
    }
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A random fraction in [0, 1), from the standard library's per-process random keys.
fn jitter() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `ws(s)://host/…?v=10&encoding=json`.
fn gateway_address(url: &str) -> Result<String, String> {
    let mut parsed = reqwest::Url::parse(url)
        .map_err(|error| format!("discord: the gateway address {url:?} is not a URL: {error}"))?;
    if !matches!(parsed.scheme(), "wss" | "ws") {
        return Err(format!(
            "discord: the gateway address {url:?} is not a WebSocket URL"
        ));
    }
    parsed.set_query(Some("v=10&encoding=json"));
    Ok(parsed.to_string())
}

/// Closes with a code other than 1000 or 1001 (which would end the session), so it
/// stays resumable; bounded, since the peer may be gone.
async fn close_resumable(socket: &mut Socket, reason: &'static str) {
    let frame = CloseFrame {
        code: CloseCode::from(4000),
        reason: reason.into(),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), socket.close(Some(frame))).await;
}

async fn send_json(socket: &mut Socket, payload: Value) -> Result<(), String> {
    socket
        .send(Message::text(payload.to_string()))
        .await
        .map_err(|error| format!("discord: gateway write failed: {error}"))
}

impl GatewayConnection {
    /// Reads the saved position (once), runs a session and says how it ended.
    async fn next_session(
        &self,
        state: &mut State,
        sink: &dyn InboxSink,
        backoff: &mut Backoff,
    ) -> reconnect::SessionEnd {
        let channel = &self.settings.channel;
        if !state.loaded {
            // Unreadable storage is retried like a lost connection, without the log line.
            match sink.cursor(channel).await {
                Ok(saved) => {
                    state.cursor = saved
                        .as_deref()
                        .and_then(|text| serde_json::from_str::<GatewayCursor>(text).ok());
                    state.seq = state.cursor.as_ref().map(|cursor| cursor.seq);
                    state.loaded = true;
                }
                Err(error) => {
                    let wait = backoff.fail(None);
                    return reconnect::SessionEnd::Retrying {
                        reason: error.to_string(),
                        wait,
                    };
                }
            }
        }
        state.up = false;
        match self.session(state, sink).await {
            SessionEnd::Refused(reason) => reconnect::SessionEnd::CredentialsRefused(reason),
            SessionEnd::Unservable(reason) => {
                tracing::error!(%channel, %reason, "discord: the gateway refused the connection; trying again in 10 minutes");
                let wait = REFUSED_RETRY;
                reconnect::SessionEnd::Retrying { reason, wait }
            }
            SessionEnd::Lost(reason) if state.up => {
                // A served session dropped (a Reconnect, a zombie, a network blip):
                // resume straight away.
                tracing::info!(%channel, %reason, resume = state.cursor.is_some(), "discord: gateway connection ended; reconnecting");
                backoff.reset();
                let wait = Duration::ZERO;
                reconnect::SessionEnd::Reconnect { wait }
            }
            SessionEnd::Lost(reason) => reconnect::SessionEnd::failed(reason),
            SessionEnd::Throttled(reason, after) => reconnect::SessionEnd::Failed {
                reason,
                after: Some(after),
            },
        }
    }

    /// One connection, from the Gateway's address to its end.
    async fn session(&self, state: &mut State, sink: &dyn InboxSink) -> SessionEnd {
        let resuming = state.cursor.clone();
        let (mut socket, interval) = match self.connect(state, resuming.as_ref()).await {
            Ok(connected) => connected,
            Err(end) => return end,
        };
        if let Err(reason) = send_json(&mut socket, self.opening(state, resuming.as_ref())).await {
            return SessionEnd::Lost(reason);
        }
        let mut next_beat = Instant::now() + interval.mul_f64(jitter());
        let mut awaiting_ack = false;
        loop {
            let frame = tokio::select! {
                _ = tokio::time::sleep_until(next_beat) => {
                    if awaiting_ack {
                        // No ACK since the last beat: the connection is dead though open.
                        // Closing with a code other than 1000 keeps the session resumable.
                        close_resumable(&mut socket, "zombie").await;
                        return SessionEnd::Lost("discord: no heartbeat ACK before the next beat (zombie connection)".into());
                    }
                    if let Err(reason) = send_json(&mut socket, json!({"op": 1, "d": state.seq})).await {
                        return SessionEnd::Lost(reason);
                    }
                    awaiting_ack = true;
                    next_beat += interval;
                    continue;
                }
                frame = socket.next() => frame,
            };
            let text = match frame {
                None => {
                    return SessionEnd::Lost("discord: the gateway closed the connection".into());
                }
                Some(Err(error)) => {
                    return SessionEnd::Lost(format!("discord: gateway read failed: {error}"));
                }
                Some(Ok(Message::Close(frame))) => return closed(frame, state),
                Some(Ok(Message::Text(text))) => text,
                // Pings are answered by the library; nothing else is expected.
                Some(Ok(_)) => continue,
            };
            let payload: Value = match serde_json::from_str(text.as_str()) {
                Ok(payload) => payload,
                Err(error) => {
                    let channel = &self.settings.channel;
                    tracing::warn!(%channel, %error, "discord: unreadable gateway payload skipped");
                    continue;
                }
            };
            if payload["op"].as_u64() == Some(11) {
                awaiting_ack = false;
                continue;
            }
            let resumed = resuming.is_some();
            if let Some(end) = self
                .handle_op(&mut socket, &payload, state, sink, resumed)
                .await
            {
                return end;
            }
        }
    }

    /// Finds the Gateway (the session's resume address, else a new one), connects and
    /// reads its Hello; returns the socket and the heartbeat interval.
    async fn connect(
        &self,
        state: &mut State,
        resuming: Option<&GatewayCursor>,
    ) -> Result<(Socket, Duration), SessionEnd> {
        let url = match resuming {
            Some(cursor) => cursor.resume_url.clone(),
            None => match self.rest.gateway_url().await {
                Ok(url) => url,
                Err(SendError::Credentials { reason }) => return Err(SessionEnd::Refused(reason)),
                Err(SendError::Retry {
                    reason,
                    after: Some(after),
                }) => return Err(SessionEnd::Throttled(reason, after)),
                Err(error) => return Err(SessionEnd::Lost(error.to_string())),
            },
        };
        let address = match gateway_address(&url) {
            Ok(address) => address,
            Err(reason) => {
                // A stored address that is unusable: start a new session instead.
                state.cursor = None;
                state.seq = None;
                return Err(SessionEnd::Lost(reason));
            }
        };
        let mut socket = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async(address.as_str()),
        )
        .await
        {
            Ok(Ok((socket, _))) => socket,
            Ok(Err(error)) => {
                return Err(SessionEnd::Lost(format!(
                    "discord: cannot connect to the gateway: {error}"
                )));
            }
            Err(_) => {
                return Err(SessionEnd::Lost(
                    "discord: connecting to the gateway timed out".into(),
                ));
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, read_hello(&mut socket, state)).await {
            Ok(Ok(interval)) => Ok((socket, interval)),
            Ok(Err(end)) => Err(end),
            Err(_) => Err(SessionEnd::Lost(
                "discord: no Hello from the gateway".into(),
            )),
        }
    }

    /// The session's first payload: Resume a stored session, else Identify.
    fn opening(&self, state: &State, resuming: Option<&GatewayCursor>) -> Value {
        match resuming {
            Some(cursor) => json!({"op": 6, "d": {
                "token": self.settings.bot_token,
                "session_id": cursor.session_id,
                "seq": state.seq.unwrap_or(cursor.seq),
            }}),
            None => json!({"op": 2, "d": {
                "token": self.settings.bot_token,
                "intents": INTENTS,
                "properties": {"os": std::env::consts::OS, "browser": "saint", "device": "saint"},
            }}),
        }
    }

    /// Handles one Gateway payload other than a heartbeat ACK; `Some` when it ends the
    /// session. `resumed`: the session began as a resume.
    async fn handle_op(
        &self,
        socket: &mut Socket,
        payload: &Value,
        state: &mut State,
        sink: &dyn InboxSink,
        resumed: bool,
    ) -> Option<SessionEnd> {
        match payload["op"].as_u64() {
            Some(0) => {
                if let Err(reason) = self.dispatch(payload, state, sink).await {
                    // Not stored: the event is replayed on resume, after a backoff
                    // (storage that keeps failing must not spin the connection).
                    state.up = false;
                    return Some(SessionEnd::Lost(reason));
                }
            }
            // Discord asks for a beat now.
            Some(1) => {
                if let Err(reason) = send_json(socket, json!({"op": 1, "d": state.seq})).await {
                    return Some(SessionEnd::Lost(reason));
                }
            }
            Some(7) => {
                close_resumable(socket, "reconnect").await;
                return Some(SessionEnd::Lost(
                    "discord: the gateway asked to reconnect".into(),
                ));
            }
            Some(9) => {
                let resumable = payload["d"].as_bool() == Some(true);
                if resumable && state.cursor.is_some() {
                    return Some(SessionEnd::Lost(
                        "discord: invalid session (resumable); resuming".into(),
                    ));
                }
                if resumed {
                    let channel = &self.settings.channel;
                    tracing::warn!(%channel,
                        "discord: the gateway refused to resume the session; identifying afresh. \
                         Messages sent while the bot was disconnected may be missed");
                }
                state.cursor = None;
                state.seq = None;
                // Discord asks for a random wait of 1 to 5 seconds before identifying.
                tokio::time::sleep(Duration::from_secs_f64(1.0 + 4.0 * jitter())).await;
                return Some(SessionEnd::Lost(
                    "discord: invalid session; identifying afresh".into(),
                ));
            }
            _ => {}
        }
        None
    }

    /// Handles one dispatch; `Err` when the inbox could not store it (the session ends
    /// so the event is replayed on resume).
    async fn dispatch(
        &self,
        payload: &Value,
        state: &mut State,
        sink: &dyn InboxSink,
    ) -> Result<(), String> {
        let channel = &self.settings.channel;
        let seq = payload["s"].as_u64();
        let data = &payload["d"];
        match payload["t"].as_str() {
            Some("READY") => {
                let (Some(session_id), Some(resume_url)) = (
                    data["session_id"].as_str(),
                    data["resume_gateway_url"].as_str(),
                ) else {
                    return Err("discord: READY without a session".into());
                };
                let cursor = GatewayCursor {
                    session_id: session_id.to_string(),
                    seq: seq.unwrap_or(0),
                    resume_url: resume_url.to_string(),
                    user_id: data["user"]["id"].as_str().map(str::to_string),
                };
                // Saved at once, so a restart resumes even before the first message.
                sink.commit(channel, Vec::new(), cursor_text(&cursor))
                    .await
                    .map_err(|error| error.to_string())?;
                tracing::info!(%channel, user = ?cursor.user_id, "discord: gateway session ready");
                state.cursor = Some(cursor);
                state.seq = seq;
                state.up = true;
                sink.report(channel, ChannelState::Up);
                return Ok(());
            }
            Some("RESUMED") => {
                tracing::info!(%channel, "discord: gateway session resumed");
                state.up = true;
                sink.report(channel, ChannelState::Up);
            }
            Some("MESSAGE_CREATE") => {
                if let Some(message) = self.message(data, state, sink) {
                    let id = message.platform_id.clone();
                    if !state.recent.contains(&id) {
                        let mut cursor = state.cursor.clone().ok_or_else(|| {
                            "discord: a message before the session was ready".to_string()
                        })?;
                        cursor.seq = seq.or(state.seq).unwrap_or(cursor.seq);
                        sink.commit(channel, vec![(message, None)], cursor_text(&cursor))
                            .await
                            .map_err(|error| error.to_string())?;
                        state.recent.insert(id);
                        state.cursor = Some(cursor);
                    }
                }
            }
            // A button pressed: stored like a message, then acknowledged (Discord waits
            // three seconds for that, so it goes off the Gateway's loop).
            Some("INTERACTION_CREATE") => {
                let bot_id = state
                    .cursor
                    .as_ref()
                    .and_then(|cursor| cursor.user_id.as_deref());
                let (interaction, message) = read_interaction(channel, data, bot_id);
                match message {
                    Ok(message) if !state.recent.contains(&message.platform_id) => {
                        let id = message.platform_id.clone();
                        let mut cursor = state.cursor.clone().ok_or_else(|| {
                            "discord: a press before the session was ready".to_string()
                        })?;
                        cursor.seq = seq.or(state.seq).unwrap_or(cursor.seq);
                        sink.commit(channel, vec![(message, None)], cursor_text(&cursor))
                            .await
                            .map_err(|error| error.to_string())?;
                        state.recent.insert(id);
                        state.cursor = Some(cursor);
                    }
                    Ok(_) => {}
                    Err(reason) => {
                        tracing::info!(%channel, %reason, "discord: interaction not answered");
                    }
                }
                if let Some(interaction) = interaction {
                    let (rest, channel) = (self.rest.clone(), channel.clone());
                    tokio::spawn(async move {
                        if let Err(error) = rest.acknowledge(&interaction).await {
                            tracing::debug!(%channel, %error, "discord: a button press was not acknowledged");
                        }
                    });
                }
            }
            // A deleted message is withdrawn: not answered if it still waits, its text
            // gone from the transcript if it does not.
            Some("MESSAGE_DELETE") => {
                if let Some(id) = data["id"].as_str() {
                    let mut cursor = state.cursor.clone().ok_or_else(|| {
                        "discord: a deletion before the session was ready".to_string()
                    })?;
                    cursor.seq = seq.or(state.seq).unwrap_or(cursor.seq);
                    sink.commit_with_withdrawals(
                        channel,
                        Vec::new(),
                        vec![id.to_string()],
                        cursor_text(&cursor),
                    )
                    .await
                    .map_err(|error| error.to_string())?;
                    state.cursor = Some(cursor);
                }
            }
            _ => {}
        }
        if seq.is_some() {
            state.seq = seq;
        }
        Ok(())
    }

    /// The inbox message for a MESSAGE_CREATE, or `None` when it is not to be stored.
    fn message(&self, data: &Value, state: &State, sink: &dyn InboxSink) -> Option<InboundMessage> {
        let channel = &self.settings.channel;
        let bot_id = state
            .cursor
            .as_ref()
            .and_then(|cursor| cursor.user_id.as_deref());
        let author = &data["author"];
        let author_id = author["id"].as_str()?;
        let id = data["id"].as_str()?;
        let chat = data["channel_id"].as_str()?;
        if author["bot"].as_bool() == Some(true)
            || data.get("webhook_id").is_some_and(|value| !value.is_null())
            || Some(author_id) == bot_id
        {
            tracing::debug!(%channel, message = id, "discord: message from a bot skipped");
            return None;
        }
        // 0 is a plain message, 19 a reply; the rest are system notices (joins, pins).
        if !matches!(data["type"].as_u64(), None | Some(0 | 19)) {
            return None;
        }
        let sender = match ChannelIdentity::parse(ChannelKind::Discord, author_id) {
            Ok(sender) => sender,
            Err(error) => {
                tracing::warn!(%channel, %error, "discord: message with an unreadable author skipped");
                return None;
            }
        };
        let mut text = data["content"].as_str().unwrap_or_default().to_string();
        let guild = data["guild_id"].as_str().filter(|guild| !guild.is_empty());
        let conversation = match guild {
            None => None,
            Some(_) => {
                let mentioned = bot_id.is_some_and(|bot_id| {
                    data["mentions"].as_array().is_some_and(|mentions| {
                        mentions
                            .iter()
                            .any(|user| user["id"].as_str() == Some(bot_id))
                    }) || text.contains(&format!("<@{bot_id}>"))
                        || text.contains(&format!("<@!{bot_id}>"))
                });
                let replied = bot_id.is_some_and(|bot_id| {
                    data["referenced_message"]["author"]["id"].as_str() == Some(bot_id)
                });
                if let Some(reason) = self
                    .settings
                    .group_rules
                    .skip_reason(mentioned || replied, sink.is_contact(&sender))
                {
                    tracing::debug!(%channel, message = id, %reason, "discord: guild message not answered");
                    return None;
                }
                if let Some(bot_id) = bot_id {
                    text = text
                        .replace(&format!("<@!{bot_id}>"), "")
                        .replace(&format!("<@{bot_id}>"), "")
                        .trim()
                        .to_string();
                }
                Some(Conversation {
                    id: chat.to_string(),
                    title: None,
                })
            }
        };
        let attachments: Vec<AttachmentRef> = data["attachments"]
            .as_array()
            .map(|attachments| attachments.iter().filter_map(attachment).collect())
            .unwrap_or_default();
        // A bare mention, a sticker, an embed: nothing for the model to answer.
        if text.trim().is_empty() && attachments.is_empty() {
            tracing::debug!(%channel, message = id, reason = "empty message", "discord: message not answered");
            return None;
        }
        let display_name = display_name(data, author);
        Some(InboundMessage {
            channel: channel.clone(),
            kind: ChannelKind::Discord,
            platform_id: id.to_string(),
            sender,
            sender_verified: true,
            unverified_origin: None,
            display_name,
            text,
            attachments,
            sent_at: data["timestamp"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| jiff::Timestamp::now().to_string()),
            context: ReplyContext {
                // In a guild the reply quotes the message it answers; in a DM it needs not.
                reply_to: conversation.as_ref().map(|_| id.to_string()),
                chat: Some(chat.to_string()),
                ..ReplyContext::default()
            },
            conversation,
            pressed: false,
        })
    }
}

fn attachment(value: &Value) -> Option<AttachmentRef> {
    let url = value["url"].as_str()?;
    let mime_type = value["content_type"]
        .as_str()
        .unwrap_or("application/octet-stream")
        .to_string();
    let file_name = value["filename"].as_str().map(str::to_string);
    Some(AttachmentRef::of_mime_type(url, mime_type, file_name))
}

fn cursor_text(cursor: &GatewayCursor) -> String {
    serde_json::to_string(cursor).expect("a cursor serialises")
}

/// Waits for Hello; its heartbeat interval.
async fn read_hello(socket: &mut Socket, state: &mut State) -> Result<Duration, SessionEnd> {
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(text))) => {
                let payload: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                if payload["op"].as_u64() == Some(10) {
                    let interval = payload["d"]["heartbeat_interval"]
                        .as_u64()
                        .filter(|milliseconds| *milliseconds > 0)
                        .ok_or_else(|| {
                            SessionEnd::Lost("discord: Hello without an interval".into())
                        })?;
                    return Ok(Duration::from_millis(interval));
                }
            }
            Some(Ok(Message::Close(frame))) => return Err(closed(frame, state)),
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                return Err(SessionEnd::Lost(format!(
                    "discord: gateway read failed: {error}"
                )));
            }
            None => {
                return Err(SessionEnd::Lost(
                    "discord: the gateway closed before Hello".into(),
                ));
            }
        }
    }
}

/// What a close frame from Discord means.
fn closed(frame: Option<CloseFrame>, state: &mut State) -> SessionEnd {
    let (code, reason) = frame
        .map(|frame| (u16::from(frame.code), frame.reason.to_string()))
        .unwrap_or((1005, String::new()));
    match code {
        4004 => SessionEnd::Refused(format!(
            "discord: the gateway refused the bot token (close code 4004, authentication failed): {reason}"
        )),
        4014 => SessionEnd::Refused(

            "discord: the gateway refused the bot's intents (close code 4014, disallowed intents): \
             enable the Message Content intent for the bot in the Discord Developer Portal \
             (Bot → Privileged Gateway Intents)"
                .to_string(),
        ),
        4010..=4013 => SessionEnd::Unservable(format!(
            "discord: the gateway refused the connection (close code {code}: {}): {reason}",
            match code {
                4010 => "invalid shard",
                4011 => "sharding required: the bot is in too many guilds for one connection",
                4012 => "invalid API version",
                _ => "invalid intents",
            }
        )),
        // Invalid sequence, session timed out, not or already authenticated: the
        // session cannot be resumed.
        4003 | 4005 | 4007 | 4009 => {
            state.cursor = None;
            state.seq = None;
            SessionEnd::Lost(format!(
                "discord: the gateway ended the session (close code {code}): {reason}"
            ))
        }
        _ => SessionEnd::Lost(format!(
            "discord: the gateway closed the connection (close code {code}): {reason}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_address_gets_the_version_and_encoding() {
        assert_eq!(
            gateway_address("wss://gateway.discord.gg").unwrap(),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
        assert_eq!(
            gateway_address("ws://127.0.0.1:9/gateway?v=9").unwrap(),
            "ws://127.0.0.1:9/gateway?v=10&encoding=json"
        );
        assert!(gateway_address("https://discord.com").is_err());
        assert_eq!(INTENTS, 37_376);
    }

    #[test]
    fn jitter_stays_in_the_unit_interval() {
        for _ in 0..1000 {
            let value = jitter();
            assert!((0.0..1.0).contains(&value), "{value}");
        }
    }
}
