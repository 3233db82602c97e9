//! The channels a bot serves besides HTTP, started from the config: one transport per
//! channel, its live health, and the wake-ups that connect the inbox (webhooks, pollers)
//! to the dispatcher and the outbox to each channel's sender.
//!
//! Channels are read once at start: a channel whose settings cannot work is left out
//! and reported (startup log, `/readyz`), never half-started.

use std::{
    collections::BTreeMap,
    num::NonZeroU32,
    path::{Path, PathBuf},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use saint_channels::{
    Connection, InboundMessage, ReplyLimit, Transport, Webhook, open, queue,
    transport::ChannelState,
};
use saint_config::{BotConfig, ChannelIdentity, ChannelKind, ErrorChain};
use tokio::sync::Notify;

use crate::{config_watch::ConfigStore, metering::Metering, session::SessionStore};
use parking_lot::Mutex;

/// One served channel.
pub struct ServedChannel {
    /// Channel name.
    pub name: String,
    /// Its kind.
    pub kind: ChannelKind,
    /// Sends, reads receipts, fetches media.
    pub transport: Arc<dyn Transport>,
    /// Wakes this channel's sender when a row is queued.
    pub outbox_ready: Arc<Notify>,
    /// Platform deliveries to `/channels/<name>/webhook`, for channels the platform calls.
    pub webhook: Option<Arc<dyn Webhook>>,
    /// The outbound connection feeding the inbox, for channels that connect out.
    pub(super) connection: Option<Arc<dyn Connection>>,
    state: Mutex<ChannelState>,
    /// Messages given up on since the agent started, and the last one's reason.
    dead_letters: Mutex<Option<(u64, String)>>,
}

/// Every served channel and the shared wake-ups.
pub struct ChannelHub {
    channels: BTreeMap<String, Arc<ServedChannel>>,
    /// Wakes the dispatcher when an inbound message is stored.
    pub inbox_ready: Arc<Notify>,
    pub(crate) store: Arc<SessionStore>,
    pub(crate) metering: Arc<Metering>,
    pub(crate) workspace: PathBuf,
    /// The bot's config, read anew by connections that ask who is a Contact.
    config: Option<Arc<ConfigStore>>,
    /// Channels whose transport could not be built from complete settings.
    start_problems: Vec<String>,
    /// Events on the SaintBot, in a cluster.
    events: OnceLock<Arc<super::events::ChannelEvents>>,
    /// Each sender's message rate, on every channel.
    pub sender_limits: SenderLimits,
    /// Wakes the task that tells the owners about dead letters.
    pub(crate) dead_letter_ready: Arc<Notify>,
    /// The loop and ordering guards (always on, but for a benchmark).
    pub(crate) guards: Guards,
}

/// The guards on a message's way to its reply: the loop guard (a correspondent's
/// answers per window, on channels that cap them: e-mail) and the ordering guard (one
/// turn at a time per lane, and a conversation's replies sent in order). Always on in a
/// bot: without the loop guard two robots can answer each other without end, without
/// the ordering guard a reply can overtake an earlier one. Only
/// [`ChannelHub::set_guards_for_benchmarks`] turns them off, so
/// `benches/channel_guards.rs` can measure what they cost.
#[derive(Debug)]
pub(crate) struct Guards {
    loop_guard: AtomicBool,
    order_guard: AtomicBool,
}

impl Default for Guards {
    fn default() -> Self {
        Self {
            loop_guard: AtomicBool::new(true),
            order_guard: AtomicBool::new(true),
        }
    }
}

impl Guards {
    /// Whether a correspondent's answers per window are capped.
    pub(crate) fn loop_guard(&self) -> bool {
        self.loop_guard.load(Ordering::Relaxed)
    }

    /// Which rows the dispatcher and the senders are handed.
    pub(crate) fn order(&self) -> queue::Order {
        if self.order_guard.load(Ordering::Relaxed) {
            queue::Order::PerConversation
        } else {
            queue::Order::Unordered
        }
    }
}

impl ChannelHub {
    /// Opens `config`'s channels whose settings and secrets are complete; the others are
    /// skipped (`startup::channel_problems` says why, a part that failed to build is
    /// logged here). `live_config` answers "is this a Contact" for connections.
    pub fn from_config(
        config: &BotConfig,
        live_config: Option<Arc<ConfigStore>>,
        lookup: &dyn Fn(&str) -> Option<String>,
        store: Arc<SessionStore>,
        metering: Arc<Metering>,
        workspace: &Path,
    ) -> Self {
        let mut channels = BTreeMap::new();
        let mut start_problems = Vec::new();
        for channel in &config.channels {
            let opened = match open::open(channel, lookup, workspace) {
                Ok(Some(opened)) => opened,
                // The HTTP channel is the agent's own; settings problems are reported by
                // `startup::channel_problems`.
                Ok(None) | Err(saint_channels::OpenError::Settings(_)) => continue,
                Err(error @ saint_channels::OpenError::Start { .. }) => {
                    let line = format!("{error}: the channel is not started");
                    tracing::error!("{line}");
                    start_problems.push(line);
                    continue;
                }
            };
            metering
                .metrics
                .channel_up(&channel.name, channel.kind.prefix(), true);
            channels.insert(
                channel.name.clone(),
                Arc::new(ServedChannel {
                    name: channel.name.clone(),
                    kind: channel.kind,
                    transport: opened.transport,
                    outbox_ready: Arc::new(Notify::new()),
                    webhook: opened.webhook,
                    connection: opened.connection,
                    state: Mutex::new(ChannelState::Up),
                    dead_letters: Mutex::new(None),
                }),
            );
        }
        Self {
            channels,
            inbox_ready: Arc::new(Notify::new()),
            store,
            metering,
            workspace: workspace.to_path_buf(),
            config: live_config,
            start_problems,
            events: OnceLock::new(),
            sender_limits: SenderLimits::default(),
            dead_letter_ready: Arc::new(Notify::new()),
            guards: Guards::default(),
        }
    }

    /// **Benchmarks only**: switches the loop and ordering guards ([`Guards`]) on or off,
    /// so `benches/channel_guards.rs` can measure message → reply with and without them
    /// in one run. A bot never calls it; its guards are always on.
    #[doc(hidden)]
    pub fn set_guards_for_benchmarks(&self, on: bool) {
        self.guards.loop_guard.store(on, Ordering::Relaxed);
        self.guards.order_guard.store(on, Ordering::Relaxed);
    }

    /// The bot's config as it is now, when the hub reads it live.
    pub(crate) fn live_config(&self) -> Option<Arc<BotConfig>> {
        self.config.as_ref().map(|config| config.current())
    }

    /// Reports refused credentials as Events on the SaintBot too.
    pub fn set_events(&self, events: super::events::ChannelEvents) {
        let _ = self.events.set(Arc::new(events));
    }

    /// Why an inbound message is to be recorded but not answered, if it is: nothing to
    /// answer (ignored), or a sender who is not a (verified) Contact over their message
    /// rate (refused: they are told, once per window). A Contact is not rate-limited:
    /// their role's budget bounds what they cost, and a backlog delivered after downtime
    /// is not a flood.
    pub fn not_to_answer(&self, message: &InboundMessage) -> Option<NotAnswered> {
        if let Some(reason) = message.unanswerable() {
            return Some(NotAnswered::Ignored(reason.to_string()));
        }
        let contact = message.sender_verified && self.is_contact(&message.sender);
        if !contact && !self.sender_limits.sender_allowed(message.sender.as_ref()) {
            tracing::warn!(channel = %message.channel, sender = %message.sender, platform_id = %message.platform_id,
                "sender over their message rate limit; message recorded, not answered");
            return Some(NotAnswered::Refused(
                "sender over their message rate limit".to_string(),
            ));
        }
        None
    }

    /// Removes the files saved from messages of `channel` their senders withdrew
    /// (`inbox/<channel>/<message>/` in the workspace), if any were saved.
    pub fn forget_attachments(&self, channel: &str, withdrawn: &[String]) {
        for platform_id in withdrawn {
            let folder = self
                .workspace
                .join("inbox")
                .join(saint_channels::attachments::safe_name(channel))
                .join(saint_channels::attachments::safe_name(platform_id));
            match std::fs::remove_dir_all(&folder) {
                Ok(()) => {
                    tracing::info!(%channel, %platform_id, "removed the files of a withdrawn message")
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::warn!(%channel, %platform_id, %error, path = %folder.display(), "failed to remove the files of a withdrawn message")
                }
            }
        }
    }

    /// The lane `message` waits in for its turn: its session ([`identity::caller_for_message`]),
    /// by the bot's current config, so a person's messages on every channel are answered
    /// one at a time, in order. A sender the config cannot resolve (their turn will say
    /// why) waits in their channel's lane.
    ///
    /// [`identity::caller_for_message`]: crate::identity::caller_for_message
    pub fn lane_of(&self, message: &InboundMessage) -> String {
        let Some(config) = self.live_config() else {
            return message.lane();
        };
        let sender = crate::identity::MessageSender {
            identity: &message.sender,
            verified: message.sender_verified,
            unverified_origin: message.unverified_origin.as_deref(),
            conversation: message
                .conversation
                .as_ref()
                .map(|conversation| (message.channel.as_str(), conversation.id.as_str())),
        };
        match crate::identity::caller_for_message(&config, &sender) {
            Ok(caller) => caller.session_key,
            Err(_) => message.lane(),
        }
    }

    /// Whether `identity` belongs to a Contact, by the bot's current config.
    pub fn is_contact(&self, identity: &ChannelIdentity) -> bool {
        self.config.as_ref().is_some_and(|config| {
            crate::identity::linked_slug(&config.current(), identity).is_some()
        })
    }

    /// The served channel called `name`.
    pub fn channel(&self, name: &str) -> Option<&Arc<ServedChannel>> {
        self.channels.get(name)
    }

    /// Every served channel.
    pub fn channels(&self) -> impl Iterator<Item = &Arc<ServedChannel>> {
        self.channels.values()
    }

    /// Records a channel's state (logged when it changes, and in `saint_channel_up`).
    pub fn set_state(&self, channel: &ServedChannel, state: ChannelState) {
        let mut current = channel.state.lock();
        if *current == state {
            return;
        }
        match &state {
            ChannelState::Up => tracing::info!(channel = %channel.name, "channel is up"),
            ChannelState::Retrying(reason) => {
                tracing::warn!(channel = %channel.name, %reason, "channel: send failed, retrying")
            }
            ChannelState::CredentialsRefused(reason) => {
                tracing::error!(
                    channel = %channel.name, %reason,
                    "channel: the platform refused the bot's credentials; replies wait until they are fixed"
                );
                if let Some(events) = self.events.get().cloned() {
                    let (name, reason) = (channel.name.clone(), reason.clone());
                    tokio::spawn(async move {
                        if let Err(error) = events.credentials_refused(&name, &reason).await {
                            tracing::warn!(error = %ErrorChain(&error), "failed to publish a channel Event");
                        }
                    });
                }
            }
        }
        self.metering.metrics.channel_up(
            &channel.name,
            channel.kind.prefix(),
            !matches!(state, ChannelState::CredentialsRefused(_)),
        );
        *current = state;
    }

    /// Records a message given up on for good (its outbox row is already `failed`):
    /// `saint_channel_dead_letters`, the channel's `/readyz` line, a Warning Event, and
    /// the owners are told in a chat notice ([`super::dead_letters`]).
    pub fn record_dead_letter(&self, channel: &ServedChannel, recipient: &str, reason: &str) {
        self.metering.metrics.dead_letter(&channel.name);
        self.dead_letter_ready.notify_one();
        let mut dead_letters = channel.dead_letters.lock();
        let count = dead_letters.as_ref().map_or(0, |(count, _)| *count) + 1;
        *dead_letters = Some((count, format!("to {recipient}: {reason}")));
        if let Some(events) = self.events.get().cloned() {
            let (name, note) = (channel.name.clone(), format!("to {recipient}: {reason}"));
            tokio::spawn(async move {
                if let Err(error) = events.message_undeliverable(&name, &note).await {
                    tracing::warn!(error = %ErrorChain(&error), "failed to publish a channel Event");
                }
            });
        }
    }

    /// `/readyz` lines for channels that are not simply up, or that gave up on a message.
    pub fn health_lines(&self) -> Vec<String> {
        let live = self
            .channels
            .values()
            .filter_map(|channel| match &*channel.state.lock() {
                ChannelState::Up => None,
                ChannelState::Retrying(reason) => {
                    Some(format!("channel {:?}: retrying: {reason}", channel.name))
                }
                ChannelState::CredentialsRefused(reason) => Some(format!(
                    "channel {:?}: credentials refused by the platform: {reason}",
                    channel.name
                )),
            });
        let dead = self.channels.values().filter_map(|channel| {
            let dead_letters = channel.dead_letters.lock();
            let (count, last) = dead_letters.as_ref()?;
            Some(format!(
                "channel {:?}: {count} message(s) undeliverable since start (dead letters); last {last}",
                channel.name
            ))
        });
        self.start_problems
            .iter()
            .cloned()
            .chain(live)
            .chain(dead)
            .collect()
    }
}

/// Why an inbound message is not answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotAnswered {
    /// Recorded with the reason; nothing is sent (an auto-reply, an empty message).
    Ignored(String),
    /// Recorded with the reason, and the sender is told [`RATE_LIMIT_NOTICE`] once per
    /// [`RATE_LIMIT_NOTICE_WINDOW`].
    Refused(String),
}

/// What a sender over their message rate is told.
pub const RATE_LIMIT_NOTICE: &str = "You are sending messages faster than I can answer them, so I am \
     not answering for a little while. Please wait a minute and write again.";
/// A sender over their rate is told at most once in this long.
pub const RATE_LIMIT_NOTICE_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// Stores `message` in the inbox as its decision says, in the caller's transaction,
/// waiting in `lane` ([`ChannelHub::lane_of`]); whether it is new and waits for a turn.
pub fn store_inbound(
    transaction: &rusqlite::Transaction<'_>,
    message: &InboundMessage,
    lane: &str,
    decision: Option<&NotAnswered>,
) -> rusqlite::Result<bool> {
    match decision {
        None => Ok(queue::insert_inbound_in_lane(transaction, message, lane)?.is_some()),
        Some(NotAnswered::Ignored(reason)) => {
            queue::insert_ignored(transaction, message, reason)?;
            Ok(false)
        }
        Some(NotAnswered::Refused(reason)) => {
            queue::insert_refused(
                transaction,
                message,
                reason,
                RATE_LIMIT_NOTICE,
                RATE_LIMIT_NOTICE_WINDOW,
            )?;
            Ok(false)
        }
    }
}

/// Records in the caller's transaction that the senders withdrew messages `withdrawn`
/// of `channel`: not answered if their turn has not started, their text replaced in
/// the transcript if it has. Whether a stored message was rewritten (call
/// [`SessionStore::note_rewrite`] before the commit).
pub fn withdraw_inbound(
    transaction: &rusqlite::Transaction<'_>,
    channel: &str,
    withdrawn: &[String],
) -> rusqlite::Result<bool> {
    let mut rewritten = false;
    for platform_id in withdrawn {
        let outcome =
            queue::withdraw_inbound(transaction, channel, platform_id, "withdrawn by its sender")?;
        match outcome {
            queue::Withdrawn::Unknown => {}
            queue::Withdrawn::Stored { message_id } => {
                tracing::info!(%channel, %platform_id, "message withdrawn by its sender; its text leaves the transcript");
                crate::session::withdraw_message(transaction, message_id)?;
                rewritten = true;
            }
            queue::Withdrawn::BeforeTurn | queue::Withdrawn::NotAnswered => {
                tracing::info!(%channel, %platform_id, "message withdrawn by its sender; not answered")
            }
        }
    }
    Ok(rewritten)
}

pub(super) fn over_reply_limit(
    transaction: &rusqlite::Transaction<'_>,
    message: &InboundMessage,
    limit: ReplyLimit,
) -> rusqlite::Result<Option<String>> {
    let since = queue::now_ms() - limit.window.as_millis() as i64;
    let answered = queue::answered_since(transaction, message, since)?;
    if answered < limit.replies {
        return Ok(None);
    }
    let minutes = limit.window.as_secs() / 60;
    tracing::warn!(channel = %message.channel, sender = %message.sender, platform_id = %message.platform_id,
        answered, minutes, "sender over the reply limit (a mail loop?); message recorded, not answered");
    Ok(Some(format!(
        "reply limit: {answered} messages of this sender answered in the last {minutes} minutes"
    )))
}

/// The rate limit on messages per sender, on every channel (webhook deliveries after
/// their signature, connection channels as they commit).
pub struct SenderLimits {
    per_sender: DefaultKeyedRateLimiter<String>,
}

impl Default for SenderLimits {
    fn default() -> Self {
        Self::new(
            Quota::per_minute(NonZeroU32::new(20).expect("non-zero"))
                .allow_burst(NonZeroU32::new(10).expect("non-zero")),
        )
    }
}

impl SenderLimits {
    /// Limits with the given per-sender quota.
    pub fn new(per_sender: Quota) -> Self {
        Self {
            per_sender: RateLimiter::keyed(per_sender),
        }
    }

    /// Whether `sender` may send one more message now (and counts it).
    pub fn sender_allowed(&self, sender: &str) -> bool {
        if self.per_sender.len() > 10_000 {
            self.per_sender.retain_recent();
        }
        self.per_sender.check_key(&sender.to_string()).is_ok()
    }
}
