//! The inbound side: `/sync` long polling from the saved since token. Each answer's
//! messages are stored with its `next_batch` in one transaction, and only then is the
//! next sync asked for, so a crash redelivers (and the inbox's unique event ids make
//! that harmless). The very first start takes the current position without answering
//! history.
//!
//! A room is direct only when the bot's `m.direct` account data marks it direct with
//! the sender (the bot marks a Contact's `is_direct` invitation before it joins) and
//! the two of them are alone in it; every other room, two members or not, is a group.
//!
//! Invitations are accepted only from Contacts (others are declined). Rooms with
//! end-to-end encryption are not supported: the bot says so there once and never
//! answers in them (their messages are recorded as ignored, with that reason).
//!
//! A redaction (`m.room.redaction`) withdraws its message: stored with the same batch
//! (or the message never stored, when the homeserver already serves it redacted), it
//! is not answered; stored earlier, the inbox forgets its text and the transcript
//! holds a placeholder instead.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use reqwest::Method;
use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{MatrixApi, MatrixSettings, transaction_id};
use crate::{
    message::{AttachmentRef, Conversation, InboundMessage, ReplyContext},
    reconnect::{Backoff, Policy, SessionEnd, Sessions},
    transport::{ChannelState, InboxSink, SendError},
};

/// How long the homeserver holds a sync open when nothing happens.
const LONG_POLL: Duration = Duration::from_secs(30);
/// Pages of a room's history read to close a gap in a limited timeline.
const MAX_GAP_PAGES: usize = 10;
/// Syncs in a row that may fail on one room's members, name or encryption notice (a
/// homeserver error) before that room's extras are passed over for a batch, so one
/// broken room does not hold up the whole channel.
const ROOM_FAILURES_BEFORE_SKIP: u32 = 3;

/// What the bot says in an end-to-end encrypted room, once.
pub const ENCRYPTED_ROOM_NOTICE: &str = "This room is end-to-end encrypted, which this assistant does not support: \
     it cannot read messages here and will not answer them. Please write to it in an \
     unencrypted room.";

/// Event types the syncs ask for: messages, memberships (invitations, who is in a room,
/// its name), encryption and redactions.
const EVENT_TYPES: [&str; 6] = [
    "m.room.message",
    "m.room.member",
    "m.room.encryption",
    "m.room.encrypted",
    "m.room.name",
    "m.room.redaction",
];

/// Why a message of an encrypted room is not answered.
const ENCRYPTED_REASON: &str = "end-to-end encrypted room: the bot cannot read it";
/// Why a message redacted before the bot read it is not answered.
const REDACTED_REASON: &str = "withdrawn by its sender before the bot read it";

/// What one sync answer brought for the inbox: messages (each with a reason not to
/// answer it, if it is not to be answered) and the event ids of redacted messages.
#[derive(Default)]
struct Batch {
    messages: Vec<(InboundMessage, Option<String>)>,
    withdrawn: Vec<String>,
}

fn filter(timeline_limit: u32) -> String {
    json!({
        "presence": {"types": []},
        "account_data": {"types": ["m.direct"]},
        "room": {
            "timeline": {"types": EVENT_TYPES, "limit": timeline_limit},
            "state": {"types": EVENT_TYPES, "lazy_load_members": true},
            "ephemeral": {"types": []},
            "account_data": {"types": []},
        },
    })
    .to_string()
}

/// What the bot knows about a room it is in.
#[derive(Clone, Debug)]
struct RoomInfo {
    /// Joined members with their display names.
    members: HashMap<String, Option<String>>,
    /// The room's name, if it has one.
    name: Option<String>,
    /// Whether the room has `m.room.encryption` state.
    encrypted: bool,
}

#[derive(Default)]
struct SyncState {
    /// Rooms looked up, until their membership, name or encryption changes.
    rooms: HashMap<String, RoomInfo>,
    /// Encrypted rooms told (since this process started) that the bot cannot read them.
    told_encrypted: HashSet<String>,
    /// The bot's display name, for mentions by name.
    display_name: Option<String>,
    /// Failed syncs in a row on a room's extras, by room.
    room_failures: HashMap<String, u32>,
}

/// The `/sync` connection of one Matrix channel.
pub struct SyncConnection {
    settings: MatrixSettings,
    api: Arc<MatrixApi>,
    state: Mutex<SyncState>,
}

impl Sessions for SyncConnection {
    // A refused token is reported, not logged.
    const POLICY: Policy = Policy::quiet()
        .failed("matrix: sync failed; retrying")
        .in_millis();

    fn channel(&self) -> &str {
        &self.settings.channel
    }

    // Runs until something fails: checks the token, then syncs forever.
    async fn run_session(&self, sink: &dyn InboxSink, backoff: &mut Backoff) -> SessionEnd {
        let Err(end) = self.sync_loop(sink, backoff).await;
        end
    }
}

impl SyncConnection {
    /// The connection for `settings`, sending its notices through `api`.
    pub fn new(settings: MatrixSettings, api: Arc<MatrixApi>) -> Self {
        Self {
            settings,
            api,
            state: Mutex::new(SyncState::default()),
        }
    }

    async fn sync_loop(
        &self,
        sink: &dyn InboxSink,
        backoff: &mut Backoff,
    ) -> Result<std::convert::Infallible, SessionEnd> {
        let channel = &self.settings.channel;
        let whoami = self.api.get(&["account", "whoami"]).await?;
        let owner = whoami["user_id"].as_str().unwrap_or_default();
        if owner != self.settings.user() {
            return Err(SessionEnd::CredentialsRefused(format!(
                "matrix: the access token belongs to {owner:?}, not to settings.userId {:?}",
                self.settings.user()
            )));
        }
        let display_name = self
            .api
            .get(&["profile", self.settings.user(), "displayname"])
            .await
            .ok()
            .and_then(|profile| profile["displayname"].as_str().map(str::to_string))
            .filter(|name| !name.trim().is_empty());
        self.state.lock().await.display_name = display_name;
        // The rooms marked direct; later changes arrive with the syncs.
        self.api.load_marked_direct().await?;
        let saved = sink.cursor(channel).await.map_err(SessionEnd::failed)?;
        let mut since = match saved {
            Some(since) => since,
            None => {
                // First start: begin from now. History is not answered, but
                // invitations waiting for the bot are.
                let first = self.sync(None, Duration::ZERO, &filter(1)).await?;
                self.account_data(&first);
                self.handle_invites(sink, &first).await?;
                let next = next_batch(&first)?;
                sink.commit(channel, Vec::new(), next.clone())
                    .await
                    .map_err(SessionEnd::failed)?;
                tracing::info!(%channel, "matrix: first start; answering messages from now on");
                next
            }
        };
        sink.report(channel, ChannelState::Up);
        let filter = filter(100);
        // A session's first sync does not wait. The homeserver keeps a finished sync's
        // answer for its key (since, timeout, filter) for a while (Synapse: 2 minutes),
        // and the poll of the session that ended (a crash, a dropped connection) may
        // have finished after it went: asking again with that key would hand back that
        // old answer, say a message without the redaction that followed it.
        let mut wait = Duration::ZERO;
        loop {
            let response = self.sync(Some(&since), wait, &filter).await?;
            wait = LONG_POLL;
            backoff.reset();
            let next = next_batch(&response)?;
            self.account_data(&response);
            self.handle_invites(sink, &response).await?;
            let Batch {
                messages,
                withdrawn,
            } = self.messages(sink, &response, &since).await?;
            let count = messages.len();
            // The position moves only with what was stored.
            sink.commit_with_withdrawals(channel, messages, withdrawn, next.clone())
                .await
                .map_err(SessionEnd::failed)?;
            if count > 0 {
                tracing::debug!(%channel, count, "matrix: messages stored");
            }
            since = next;
        }
    }

    async fn sync(
        &self,
        since: Option<&str>,
        timeout: Duration,
        filter: &str,
    ) -> Result<Value, SendError> {
        let mut url = self.api.url("v3", &["sync"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("filter", filter);
            query.append_pair("timeout", &timeout.as_millis().to_string());
            if let Some(since) = since {
                query.append_pair("since", since);
            }
        }
        self.api
            .call(Method::GET, url, None, timeout + Duration::from_secs(30))
            .await
    }

    /// Takes a changed `m.direct` from the bot's account data in a sync answer.
    fn account_data(&self, response: &Value) {
        let events = response["account_data"]["events"].as_array();
        if let Some(direct) = events
            .into_iter()
            .flatten()
            .rfind(|event| event["type"] == "m.direct")
        {
            self.api.set_marked_direct(&direct["content"]);
        }
    }

    /// Joins rooms a Contact invited the bot to; declines the others. Runs before the
    /// position moves past the invitation, so a failure here retries it.
    async fn handle_invites(
        &self,
        sink: &dyn InboxSink,
        response: &Value,
    ) -> Result<(), SendError> {
        let channel = &self.settings.channel;
        let Some(invites) = response["rooms"]["invite"].as_object() else {
            return Ok(());
        };
        for (room, invite) in invites {
            let events = invite["invite_state"]["events"].as_array();
            let invitation = invitation(events.map_or(&[], Vec::as_slice), self.settings.user());
            let inviter = invitation
                .and_then(|event| event["sender"].as_str())
                .unwrap_or_default();
            let known = ChannelIdentity::parse(ChannelKind::Matrix, inviter)
                .is_ok_and(|identity| sink.is_contact(&identity));
            let result = if known {
                tracing::info!(%channel, %room, %inviter, "matrix: joining a room a contact invited the bot to");
                // A direct room is marked before joining, so a crash between the two
                // never leaves it taken for a group.
                if invitation.is_some_and(|event| event["content"]["is_direct"] == true) {
                    match self.api.mark_direct(inviter, room).await {
                        Ok(()) => {}
                        Err(SendError::Permanent { reason }) => {
                            tracing::warn!(%channel, %room, %reason, "matrix: could not mark a direct room in the account data")
                        }
                        Err(error) => return Err(error),
                    }
                }
                self.api.post(&["join", room], &json!({})).await
            } else {
                tracing::info!(%channel, %room, %inviter, "matrix: declining an invitation from someone who is not a contact");
                self.api.post(&["rooms", room, "leave"], &json!({})).await
            };
            match result {
                Ok(_) => {}
                // The room is gone or the invitation withdrawn: nothing to retry.
                Err(SendError::Permanent { reason }) => {
                    tracing::warn!(%channel, %room, %reason, "matrix: could not answer an invitation")
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// The messages of a sync answer to store: from other people, in rooms that are
    /// not encrypted, direct or addressing the bot by the group rules; and the messages
    /// redacted.
    async fn messages(
        &self,
        sink: &dyn InboxSink,
        response: &Value,
        since: &str,
    ) -> Result<Batch, SendError> {
        let mut batch = Batch::default();
        let Some(joined) = response["rooms"]["join"].as_object() else {
            return Ok(batch);
        };
        for (room, update) in joined {
            self.room_messages(sink, room, update, since, &mut batch)
                .await?;
        }
        Ok(batch)
    }

    /// One joined room's part of a sync answer, added to `batch`.
    async fn room_messages(
        &self,
        sink: &dyn InboxSink,
        room: &str,
        update: &Value,
        since: &str,
        batch: &mut Batch,
    ) -> Result<(), SendError> {
        let timeline = self.timeline(room, update, since).await?;
        let encryption_seen = self.note_room_changes(room, update, &timeline).await;
        let new = &timeline[first_new(&timeline, self.settings.user())..];
        let from_others: Vec<&Value> = new
            .iter()
            .filter(|event| {
                matches!(
                    event["type"].as_str(),
                    Some("m.room.message" | "m.room.encrypted")
                ) && event["sender"] != self.settings.user()
            })
            .collect();
        batch
            .withdrawn
            .extend(redacted_ids(new).iter().map(|id| id.to_string()));
        if from_others.is_empty() && !encryption_seen {
            return Ok(());
        }
        let Some(LookedUp { info, looked_up }) = self.looked_up(room).await? else {
            return Ok(());
        };
        if info.encrypted || encryption_seen {
            match self.tell_encrypted(room).await {
                Ok(()) if looked_up => self.room_succeeded(room).await,
                Ok(()) => {}
                // The notice is told next time.
                Err(error) => self.room_failed(room, error).await?,
            }
            // Recorded, so each has its outcome; never answered.
            batch.messages.extend(
                from_others
                    .iter()
                    .filter_map(|event| self.unread(room, event, ENCRYPTED_REASON)),
            );
            return Ok(());
        }
        if looked_up {
            self.room_succeeded(room).await;
        }
        for event in from_others {
            if event["type"] != "m.room.message" {
                continue;
            }
            if let Some(message) = self.inbound(sink, room, &info, event).await {
                batch.messages.push(message);
            }
        }
        Ok(())
    }

    /// A room's timeline in the sync answer, with the gap before it filled when the
    /// answer was limited.
    async fn timeline(
        &self,
        room: &str,
        update: &Value,
        since: &str,
    ) -> Result<Vec<Value>, SendError> {
        let mut timeline: Vec<Value> = update["timeline"]["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if update["timeline"]["limited"] == true
            && let Some(previous) = update["timeline"]["prev_batch"].as_str()
        {
            match self.gap(room, previous, since).await {
                Ok(mut gap) => {
                    gap.append(&mut timeline);
                    timeline = gap;
                }
                // Refused for good (the bot left the room meanwhile): what the sync
                // brought is still read.
                Err(SendError::Permanent { reason }) => {
                    tracing::warn!(channel = %self.settings.channel, %room, %reason, "matrix: a gap in a room's timeline could not be read")
                }
                Err(error) => return Err(error),
            }
        }
        Ok(timeline)
    }

    /// Forgets what a room's state events changed (its cached members, name and
    /// encryption; whether it is direct); returns whether the batch shows encryption.
    async fn note_room_changes(&self, room: &str, update: &Value, timeline: &[Value]) -> bool {
        let state_events = update["state"]["events"].as_array().into_iter().flatten();
        let changed = state_events.clone().chain(timeline.iter()).any(|event| {
            matches!(
                event["type"].as_str(),
                Some("m.room.member" | "m.room.name" | "m.room.encryption")
            )
        });
        if changed {
            self.state.lock().await.rooms.remove(room);
        }
        if state_events.clone().chain(timeline.iter()).any(|event| {
            event["type"] == "m.room.member" && event["state_key"] != self.settings.user()
        }) {
            // Someone joined or left: a direct room found for a message may no
            // longer be one.
            self.api.forget_direct_room(room);
        }
        state_events
            .chain(timeline.iter())
            .any(|event| event["type"] == "m.room.encryption")
            || timeline
                .iter()
                .any(|event| event["type"] == "m.room.encrypted")
    }

    /// The room's members, name and encryption; `None` when its messages are skipped.
    async fn looked_up(&self, room: &str) -> Result<Option<LookedUp>, SendError> {
        match self.room_info(room).await {
            Ok(info) => Ok(Some(LookedUp {
                info,
                looked_up: true,
            })),
            // A room the bot can no longer read (it left or was removed) must not
            // hold up every other room: its messages are skipped.
            Err(SendError::Permanent { reason }) => {
                tracing::warn!(channel = %self.settings.channel, %room, %reason, "matrix: a room's members could not be read; its messages are skipped");
                Ok(None)
            }
            // A homeserver error on this room alone, again and again: its messages
            // are read without what could not be looked up (a room not known to be
            // direct is a group; not known to be encrypted unless the batch shows
            // it), and it is looked up again next time.
            Err(error) => {
                self.room_failed(room, error).await?;
                Ok(Some(LookedUp {
                    info: RoomInfo {
                        members: HashMap::new(),
                        name: None,
                        encrypted: false,
                    },
                    looked_up: false,
                }))
            }
        }
    }

    /// A message that is recorded but cannot be read (`reason` says why), with no text.
    fn unread(
        &self,
        room: &str,
        event: &Value,
        reason: &str,
    ) -> Option<(InboundMessage, Option<String>)> {
        let sender = ChannelIdentity::parse(ChannelKind::Matrix, event["sender"].as_str()?).ok()?;
        let message = InboundMessage {
            channel: self.settings.channel.clone(),
            kind: ChannelKind::Matrix,
            platform_id: event["event_id"].as_str()?.to_string(),
            sender,
            sender_verified: true,
            unverified_origin: None,
            display_name: None,
            text: String::new(),
            attachments: Vec::new(),
            sent_at: sent_at(event),
            context: ReplyContext {
                chat: Some(room.to_string()),
                ..ReplyContext::default()
            },
            conversation: None,
            pressed: false,
        };
        Some((message, Some(reason.to_string())))
    }

    /// A failed lookup for `room`: the error while the room has failed fewer than
    /// `ROOM_FAILURES_BEFORE_SKIP` syncs in a row (the sync is retried), then `Ok` (the
    /// lookup is passed over for this batch). A refused token always ends the sync.
    async fn room_failed(&self, room: &str, error: SendError) -> Result<(), SendError> {
        if matches!(error, SendError::Credentials { .. }) {
            return Err(error);
        }
        let mut state = self.state.lock().await;
        let failures = state.room_failures.entry(room.to_string()).or_default();
        *failures += 1;
        if *failures < ROOM_FAILURES_BEFORE_SKIP {
            return Err(error);
        }
        tracing::warn!(channel = %self.settings.channel, %room, %error, failures = *failures, "matrix: a room keeps failing; passing over its lookups for this batch");
        Ok(())
    }

    async fn room_succeeded(&self, room: &str) {
        self.state.lock().await.room_failures.remove(room);
    }

    /// A limited timeline's missing events, oldest first: the room's history from the
    /// timeline's start back to the position the sync started from.
    async fn gap(&self, room: &str, previous: &str, since: &str) -> Result<Vec<Value>, SendError> {
        let mut events = Vec::new();
        let mut from = previous.to_string();
        for _ in 0..MAX_GAP_PAGES {
            let mut url = self.api.url("v3", &["rooms", room, "messages"]);
            url.query_pairs_mut()
                .append_pair("dir", "b")
                .append_pair("from", &from)
                .append_pair("to", since)
                .append_pair("limit", "100")
                .append_pair("filter", &json!({"types": EVENT_TYPES}).to_string());
            let page = self
                .api
                .call(Method::GET, url, None, Duration::from_secs(60))
                .await?;
            let chunk = page["chunk"].as_array().cloned().unwrap_or_default();
            let end = page["end"].as_str().map(str::to_string);
            let done = chunk.is_empty() || end.is_none();
            events.extend(chunk);
            match end {
                Some(end) if !done => from = end,
                _ => break,
            }
        }
        if events.len() >= MAX_GAP_PAGES * 100 {
            tracing::warn!(channel = %self.settings.channel, %room, "matrix: a gap longer than {} events; older messages are not answered", MAX_GAP_PAGES * 100);
        }
        events.reverse();
        Ok(events)
    }

    async fn room_info(&self, room: &str) -> Result<RoomInfo, SendError> {
        if let Some(info) = self.state.lock().await.rooms.get(room) {
            return Ok(info.clone());
        }
        let joined = self.api.get(&["rooms", room, "joined_members"]).await?;
        let members = joined["joined"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(user, profile)| {
                (
                    user.clone(),
                    profile["display_name"].as_str().map(str::to_string),
                )
            })
            .collect();
        let name = self
            .api
            .state(room, "m.room.name")
            .await?
            .and_then(|content| content["name"].as_str().map(str::to_string))
            .filter(|name| !name.trim().is_empty());
        let encrypted = self.api.state(room, "m.room.encryption").await?.is_some();
        let info = RoomInfo {
            members,
            name,
            encrypted,
        };
        self.state
            .lock()
            .await
            .rooms
            .insert(room.to_string(), info.clone());
        Ok(info)
    }

    /// Tells an encrypted room, once, that the bot cannot read it.
    async fn tell_encrypted(&self, room: &str) -> Result<(), SendError> {
        if self.state.lock().await.told_encrypted.contains(room) {
            return Ok(());
        }
        let content = json!({"msgtype": "m.notice", "body": ENCRYPTED_ROOM_NOTICE});
        let transaction = transaction_id(room, ENCRYPTED_ROOM_NOTICE, 0, &ReplyContext::default());
        match self.api.send_message(room, &transaction, &content).await {
            Ok(_) => {}
            // Not allowed to write there: say nothing, but answer nothing either.
            Err(SendError::Permanent { reason }) => {
                tracing::warn!(channel = %self.settings.channel, %room, %reason, "matrix: could not tell an encrypted room it is not supported")
            }
            Err(error) => return Err(error),
        }
        tracing::info!(channel = %self.settings.channel, %room, "matrix: an end-to-end encrypted room; its messages are not answered");
        self.state
            .lock()
            .await
            .told_encrypted
            .insert(room.to_string());
        Ok(())
    }

    /// One message event as an inbound message (with a reason not to answer it: a
    /// direct message redacted before the bot read it), or `None` if it is not stored (a
    /// notice from a bot, an edit, a group message the rules skip).
    async fn inbound(
        &self,
        sink: &dyn InboxSink,
        room: &str,
        info: &RoomInfo,
        event: &Value,
    ) -> Option<(InboundMessage, Option<String>)> {
        let channel = &self.settings.channel;
        let content = &event["content"];
        // Redacted before this sync: the homeserver serves it without its content.
        let redacted = event["unsigned"]["redacted_because"].is_object();
        let msgtype = if redacted {
            ""
        } else {
            content["msgtype"].as_str()?
        };
        let relates = &content["m.relates_to"];
        // Bots write notices; edits are not new questions; redacted events are empty.
        if msgtype == "m.notice" || relates["rel_type"] == "m.replace" {
            return None;
        }
        let event_id = event["event_id"].as_str()?;
        let sender_id = event["sender"].as_str()?;
        let sender = ChannelIdentity::parse(ChannelKind::Matrix, sender_id).ok()?;
        let thread = (relates["rel_type"] == "m.thread")
            .then(|| relates["event_id"].as_str().map(str::to_string))
            .flatten();
        // In a thread, `m.in_reply_to` is only a fallback for clients without threads
        // unless `is_falling_back` is false.
        let replied = relates["m.in_reply_to"]["event_id"]
            .as_str()
            .filter(|_| thread.is_none() || relates["is_falling_back"] == false);
        let body = content["body"].as_str().unwrap_or_default();
        let body = if relates["m.in_reply_to"].is_object() {
            strip_reply_fallback(body, content["formatted_body"].as_str())
        } else {
            body
        };
        let MessageBody { text, attachments } = message_body(content, msgtype, body);
        if text.trim().is_empty() && attachments.is_empty() && !redacted {
            return None;
        }
        // Direct only when marked so (when the bot joined, or by a client) and the two of
        // them alone: any other room, two members or not, is a group.
        let direct = info.members.len() == 2
            && info.members.contains_key(sender_id)
            && info.members.contains_key(self.settings.user())
            && self.api.is_marked_direct(sender_id, room);
        if !direct && redacted {
            // Whether it addressed the bot is gone with its content.
            return None;
        }
        if redacted {
            return self.unread(room, event, REDACTED_REASON);
        }
        if !direct {
            let addressed = self.addressed(room, content, &text, replied).await;
            let known = sink.is_contact(&sender);
            if let Some(reason) = self.settings.group_rules.skip_reason(addressed, known) {
                tracing::debug!(%channel, %room, %event_id, %reason, "matrix: room message skipped");
                return None;
            }
        }
        let sent_at = sent_at(event);
        let message = InboundMessage {
            channel: channel.clone(),
            kind: ChannelKind::Matrix,
            platform_id: event_id.to_string(),
            sender,
            sender_verified: true,
            unverified_origin: None,
            display_name: info.members.get(sender_id).cloned().flatten(),
            text,
            attachments,
            sent_at,
            context: ReplyContext {
                reply_to: Some(event_id.to_string()),
                chat: Some(room.to_string()),
                thread: thread.clone(),
                ..ReplyContext::default()
            },
            conversation: (!direct).then(|| Conversation {
                id: match &thread {
                    Some(root) => format!("{room}/{root}"),
                    None => room.to_string(),
                },
                title: info.name.clone(),
            }),
            pressed: false,
        };
        Some((message, None))
    }

    /// Whether a room message addresses the bot: it mentions the bot, or replies to a
    /// message the bot sent.
    async fn addressed(
        &self,
        room: &str,
        content: &Value,
        text: &str,
        replied: Option<&str>,
    ) -> bool {
        let display_name = self.state.lock().await.display_name.clone();
        let mut addressed = mentions(content, text, self.settings.user(), display_name.as_deref());
        if !addressed && let Some(replied) = replied {
            addressed = self.api.sent_by_bot(room, replied).await;
        }
        addressed
    }
}

/// A room's information for reading its messages, and whether it could be looked up
/// (otherwise it is blank).
struct LookedUp {
    info: RoomInfo,
    looked_up: bool,
}

/// The events that `events` redact. A redaction's target is `redacts` (room versions
/// up to 10) or `content.redacts` (11 and later).
fn redacted_ids(events: &[Value]) -> HashSet<&str> {
    events
        .iter()
        .filter(|event| event["type"] == "m.room.redaction")
        .filter_map(|event| {
            event["redacts"]
                .as_str()
                .or_else(|| event["content"]["redacts"].as_str())
        })
        .collect()
}

/// A message's text and attachment: a file's caption and the file, else its body.
struct MessageBody {
    text: String,
    attachments: Vec<AttachmentRef>,
}

fn message_body(content: &Value, msgtype: &str, body: &str) -> MessageBody {
    let (text, attachments) = match msgtype {
        "m.image" | "m.file" | "m.audio" | "m.video" => {
            let file_name = content["filename"].as_str();
            // With a `filename`, a different `body` is the caption.
            let caption = match file_name {
                Some(name) if name != body => body.to_string(),
                _ => String::new(),
            };
            let attachment = content["url"]
                .as_str()
                .filter(|url| url.starts_with("mxc://"))
                .map(|url| AttachmentRef {
                    id: url.to_string(),
                    kind: match msgtype {
                        "m.image" => "image",
                        "m.audio" => "audio",
                        "m.video" => "video",
                        _ => "document",
                    }
                    .to_string(),
                    mime_type: content["info"]["mimetype"]
                        .as_str()
                        .unwrap_or("application/octet-stream")
                        .to_string(),
                    file_name: file_name.or(Some(body)).map(str::to_string),
                });
            (caption, attachment.into_iter().collect())
        }
        _ => (body.to_string(), Vec::new()),
    };
    MessageBody { text, attachments }
}

/// When the homeserver says an event was sent (RFC 3339).
fn sent_at(event: &Value) -> String {
    event["origin_server_ts"]
        .as_i64()
        .and_then(|millis| jiff::Timestamp::from_millisecond(millis).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .to_string()
}

/// Where new messages start in a room's timeline: after the bot's invitation (or its
/// join) when the bot joined in this batch — what came before is the room's history —
/// else at the start. A change of the bot's display name is a `join` too, but its
/// previous membership was already `join`: it is not a join.
fn first_new(timeline: &[Value], user: &str) -> usize {
    let own_membership = |event: &Value, membership: &str| {
        event["type"] == "m.room.member"
            && event["state_key"] == user
            && event["content"]["membership"] == membership
            && event["unsigned"]["prev_content"]["membership"] != membership
    };
    let Some(joined_at) = timeline
        .iter()
        .rposition(|event| own_membership(event, "join"))
    else {
        return 0;
    };
    let invited_at = timeline[..joined_at]
        .iter()
        .rposition(|event| own_membership(event, "invite"));
    invited_at.unwrap_or(joined_at) + 1
}

fn next_batch(response: &Value) -> Result<String, SessionEnd> {
    response["next_batch"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| SessionEnd::failed("matrix: a sync answer without next_batch"))
}

/// A reply's body without the quoted fallback (`> <@ana:x> earlier text` lines and the
/// blank line after them) older clients put in front. Only a fallback is removed: the
/// HTML has its `<mx-reply>`, or the quote starts with the quoted sender; a quote the
/// person wrote themselves stays.
fn strip_reply_fallback<'a>(body: &'a str, formatted: Option<&str>) -> &'a str {
    let fallback =
        formatted.is_some_and(|html| html.contains("<mx-reply>")) || body.starts_with("> <@");
    match body.split_once("\n\n") {
        Some((quote, rest)) if fallback && quote.lines().all(|line| line.starts_with('>')) => rest,
        _ => body,
    }
}

/// The invitation of `user` among an invite's state events: the member event inviting
/// them, the last one with an event id (the invite event itself) before stripped state
/// (which a remote server can fill with any sender).
fn invitation<'a>(events: &'a [Value], user: &str) -> Option<&'a Value> {
    let mut invites = events.iter().rev().filter(|event| {
        event["type"] == "m.room.member"
            && event["state_key"] == user
            && event["content"]["membership"] == "invite"
    });
    let last = invites.clone().next();
    invites.find(|event| event["event_id"].is_string()).or(last)
}

/// Whether a room message addresses the bot: it lists the bot in `m.mentions`, names
/// its user id (in the text or a `matrix.to` link) or its display name as a word.
fn mentions(content: &Value, text: &str, user: &str, display_name: Option<&str>) -> bool {
    let listed = content["m.mentions"]["user_ids"]
        .as_array()
        .is_some_and(|ids| ids.iter().any(|id| id == user));
    let formatted = content["formatted_body"].as_str().unwrap_or_default();
    let encoded = user.replace('@', "%40").replace(':', "%3A");
    let by_id = text.contains(user)
        || formatted.contains(user)
        || formatted.contains(&encoded)
        || formatted.contains(&user.replace('@', "%40"));
    let by_name = display_name.is_some_and(|name| contains_word(text, name));
    listed || by_id || by_name
}

// `needle` in `haystack`, ignoring case, not inside a longer word.
fn contains_word(haystack: &str, needle: &str) -> bool {
    let haystack = haystack.to_lowercase();
    let needle = needle.to_lowercase();
    let mut start = 0;
    while let Some(found) = haystack[start..].find(&needle) {
        let at = start + found;
        let end = at + needle.len();
        let before = haystack[..at].chars().next_back();
        let after = haystack[end..].chars().next();
        if !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric) {
            return true;
        }
        start = at + needle.chars().next().map_or(1, char::len_utf8);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_by_list_id_link_or_name() {
        let user = "@saint:acme.example";
        assert!(mentions(
            &json!({"m.mentions": {"user_ids": [user]}}),
            "hi",
            user,
            None
        ));
        assert!(mentions(&json!({}), "@saint:acme.example: hi", user, None));
        assert!(mentions(
            &json!({"formatted_body": "<a href=\"https://matrix.to/#/%40saint%3Aacme.example\">Saint</a> hi"}),
            "Saint hi",
            user,
            None
        ));
        assert!(mentions(
            &json!({}),
            "Acme Bot, please",
            user,
            Some("acme bot")
        ));
        assert!(!mentions(
            &json!({}),
            "the acme botany club",
            user,
            Some("acme bot")
        ));
        assert!(!mentions(
            &json!({"m.mentions": {"user_ids": ["@ana:acme.example"]}}),
            "hi all",
            user,
            Some("Saint")
        ));
    }

    #[test]
    fn messages_before_the_bots_own_join_are_history_but_a_profile_change_is_no_join() {
        let bot = "@saint:x";
        let member = |membership: &str, previous: Option<&str>| {
            let mut event = json!({"type": "m.room.member", "state_key": bot,
                                   "content": {"membership": membership}});
            if let Some(previous) = previous {
                event["unsigned"] = json!({"prev_content": {"membership": previous}});
            }
            event
        };
        let message = json!({"type": "m.room.message", "sender": "@ana:x"});
        // Old message, invitation, message while invited, join, message.
        let joined = [
            message.clone(),
            member("invite", None),
            message.clone(),
            member("join", Some("invite")),
            message.clone(),
        ];
        assert_eq!(first_new(&joined, bot), 2);
        // Joined without an invitation in view: after the join.
        assert_eq!(first_new(&joined[3..], bot), 1);
        // A display name change in the middle of a batch: everything is new.
        let renamed = [message.clone(), member("join", Some("join")), message];
        assert_eq!(first_new(&renamed, bot), 0);
    }

    #[test]
    fn the_reply_fallback_is_not_part_of_the_question_but_a_quote_of_ones_own_is() {
        assert_eq!(
            strip_reply_fallback(
                "> <@saint:x> the plan is\n> two lines\n\nand the budget?",
                None
            ),
            "and the budget?"
        );
        assert_eq!(
            strip_reply_fallback(
                "> the plan is\n\nand the budget?",
                Some("<mx-reply><blockquote>the plan is</blockquote></mx-reply>and the budget?")
            ),
            "and the budget?"
        );
        assert_eq!(strip_reply_fallback("plain\n\ntext", None), "plain\n\ntext");
        // A reply (without a fallback) that starts with a quote of the person's own.
        let own = "> the contract says 30 days\n\nis that right?";
        assert_eq!(strip_reply_fallback(own, None), own);
        assert_eq!(
            strip_reply_fallback(
                own,
                Some("<blockquote>the contract says 30 days</blockquote>")
            ),
            own
        );
    }

    #[tokio::test]
    async fn a_room_that_keeps_failing_is_passed_over_after_a_few_syncs() {
        let settings = MatrixSettings {
            channel: "matrix".into(),
            homeserver_url: "http://127.0.0.1:9".into(),
            user_id: ChannelIdentity::parse(ChannelKind::Matrix, "@saint:x").unwrap(),
            access_token: "token".into(),
            group_rules: Default::default(),
        };
        let connection = SyncConnection::new(settings.clone(), Arc::new(MatrixApi::new(settings)));
        let failure = || SendError::Retry {
            reason: "matrix: Internal error (HTTP 500)".into(),
            after: None,
        };
        // The first failures retry the sync; then the room no longer holds it up.
        for _ in 1..ROOM_FAILURES_BEFORE_SKIP {
            assert!(connection.room_failed("!a:x", failure()).await.is_err());
        }
        assert!(connection.room_failed("!a:x", failure()).await.is_ok());
        assert!(connection.room_failed("!a:x", failure()).await.is_ok());
        // Another room counts on its own; a refused token always ends the sync.
        assert!(connection.room_failed("!b:x", failure()).await.is_err());
        let refused = SendError::Credentials {
            reason: "matrix: refused".into(),
        };
        assert!(connection.room_failed("!a:x", refused).await.is_err());
        // A room read again starts over.
        connection.room_succeeded("!a:x").await;
        assert!(connection.room_failed("!a:x", failure()).await.is_err());
    }

    #[test]
    fn the_inviter_is_the_sender_of_the_invite_event_not_of_stripped_state() {
        let bot = "@saint:x";
        let invite = |sender: &str, event_id: Option<&str>| {
            let mut event = json!({"type": "m.room.member", "state_key": bot, "sender": sender,
                                   "content": {"membership": "invite"}});
            if let Some(id) = event_id {
                event["event_id"] = json!(id);
            }
            event
        };
        // Stripped state from a remote server claims a contact invited the bot; the
        // invite event itself is the stranger's.
        let events = [
            invite("@ana:x", None),
            json!({"type": "m.room.name", "state_key": "", "sender": "@ana:x",
                   "content": {"name": "Team"}}),
            invite("@stranger:evil", Some("$invite")),
        ];
        assert_eq!(
            invitation(&events, bot).unwrap()["sender"],
            "@stranger:evil"
        );
        // Even when the forged one comes last, the event with an id wins.
        let reversed = [events[2].clone(), events[0].clone()];
        assert_eq!(
            invitation(&reversed, bot).unwrap()["sender"],
            "@stranger:evil"
        );
        // Another user's invitation is not the bot's.
        let other = [
            json!({"type": "m.room.member", "state_key": "@ivan:x", "sender": "@ana:x",
                            "event_id": "$other", "content": {"membership": "invite"}}),
        ];
        assert!(invitation(&other, bot).is_none());
        // Without event ids (stripped only), the last one.
        let stripped = [invite("@ana:x", None), invite("@stranger:evil", None)];
        assert_eq!(
            invitation(&stripped, bot).unwrap()["sender"],
            "@stranger:evil"
        );
    }
}
