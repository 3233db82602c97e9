//! Slack events (the `event_callback` payload, the same in Socket Mode envelopes and
//! Events API requests) turned into inbox messages.
//!
//! `message` and `app_mention` are read. In a channel Slack sends both for one message
//! that mentions the bot; both become the same platform id `<channel>:<ts>`, so the
//! inbox keeps one. Edits, joins and other subtypes, other bots' messages and the
//! bot's own are skipped; channel messages are kept only when the channel's group rules
//! answer them. A deletion (`message_deleted`) withdraws the message it names. In a channel the bot answers in the thread of the message (a thread is
//! its own conversation, `<channel>/<thread ts>`); in a direct message it answers in
//! the direct channel.

use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::Value;

use crate::{
    message::{AttachmentRef, Conversation, InboundMessage, ReplyContext},
    transport::GroupRules,
};

/// Message subtypes that are a person writing (a file with a comment, a thread reply
/// also sent to the channel); every other subtype is an edit, a join, a bot, ….
const SERVED_SUBTYPES: &[&str] = &["file_share", "thread_broadcast"];

/// What one event came to.
#[derive(Debug, PartialEq, Eq)]
pub enum EventOutcome {
    /// A message for the inbox.
    Message(Box<InboundMessage>),
    /// Not answered, and why (for the debug log).
    Skipped(String),
    /// The sender deleted message `platform_id` (`message_deleted`).
    Withdrawn(String),
}

/// What the reader needs to know about the bot and its channel.
pub struct EventReader<'a> {
    /// Channel name.
    pub channel: &'a str,
    /// The bot user's member id, when known (`auth.test`); otherwise the payload's
    /// `authorizations` name it.
    pub bot_user_id: Option<&'a str>,
    /// The channel's group rules.
    pub rules: GroupRules,
    /// Whether a sender is a Contact.
    pub is_contact: &'a (dyn Fn(&ChannelIdentity) -> bool + Sync),
}

/// Reads one `event_callback` payload.
pub fn parse_event(reader: &EventReader<'_>, payload: &Value) -> EventOutcome {
    let skipped = |reason: String| EventOutcome::Skipped(reason);
    if payload["type"] != "event_callback" {
        return skipped(format!("payload type {} is not handled", payload["type"]));
    }
    let event = &payload["event"];
    let kind = event["type"].as_str().unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        return skipped(format!("event type {kind:?} is not handled"));
    }
    let text_of = |key: &str| event[key].as_str().unwrap_or_default();
    let (channel, ts) = (text_of("channel"), text_of("ts"));
    if channel.is_empty() || ts.is_empty() {
        return skipped(format!("{kind} event without a channel or ts"));
    }
    let platform_id = format!("{channel}:{ts}");
    if event["subtype"] == "message_deleted" {
        let deleted = event["deleted_ts"]
            .as_str()
            .or_else(|| event["previous_message"]["ts"].as_str());
        return match deleted {
            Some(deleted) => EventOutcome::Withdrawn(format!("{channel}:{deleted}")),
            None => skipped(format!("{platform_id}: a deletion without deleted_ts")),
        };
    }
    if let Some(subtype) = event["subtype"].as_str()
        && !SERVED_SUBTYPES.contains(&subtype)
    {
        return skipped(format!(
            "{platform_id}: subtype {subtype:?} is not answered"
        ));
    }
    if event.get("bot_id").is_some_and(|id| !id.is_null()) {
        return skipped(format!("{platform_id}: written by a bot"));
    }
    let bot_user = bot_user_id(reader, payload);
    let user = text_of("user");
    if bot_user.as_deref() == Some(user) {
        return skipped(format!("{platform_id}: the bot's own message"));
    }
    let sender = match ChannelIdentity::parse(ChannelKind::Slack, user) {
        Ok(sender) => sender,
        Err(error) => return skipped(format!("{platform_id}: sender {user:?}: {error}")),
    };
    // `app_mention` carries no channel_type; only direct channels start with D.
    let direct = match event["channel_type"].as_str() {
        Some(channel_type) => channel_type == "im",
        None => channel.starts_with('D'),
    };
    let mention = bot_user.as_deref().map(|bot| format!("<@{bot}"));
    let raw_text = text_of("text");
    let mentioned = mention
        .as_deref()
        .is_some_and(|mention| raw_text.contains(mention));
    let thread = event["thread_ts"].as_str().filter(|thread| *thread != ts);
    let replies_to_bot = thread.is_some()
        && bot_user.is_some()
        && event["parent_user_id"].as_str() == bot_user.as_deref();
    let addressed = kind == "app_mention" || mentioned || replies_to_bot;
    if !direct
        && let Some(reason) = reader
            .rules
            .skip_reason(addressed, (reader.is_contact)(&sender))
    {
        return skipped(format!("{platform_id}: {reason}"));
    }
    let text = match &bot_user {
        Some(bot) => strip_mentions(raw_text, bot),
        None => raw_text.trim().to_string(),
    };
    let attachments = files(event);
    if text.is_empty() && attachments.is_empty() {
        return skipped(format!("{platform_id}: no text and no files"));
    }
    let sent_at = sent_at(ts);
    let Answered {
        conversation,
        thread,
    } = answered_in(direct, channel, ts, thread);
    let display_name = display_name(event);
    EventOutcome::Message(Box::new(InboundMessage {
        channel: reader.channel.to_string(),
        kind: ChannelKind::Slack,
        platform_id: platform_id.clone(),
        sender,
        // Slack authenticates its members and the event is signed or on the app's socket.
        sender_verified: true,
        unverified_origin: None,
        display_name,
        text,
        attachments,
        sent_at,
        context: ReplyContext {
            reply_to: Some(platform_id),
            chat: Some(channel.to_string()),
            thread,
            ..Default::default()
        },
        conversation,
        pressed: false,
    }))
}

/// The bot user's member id: the reader's, else the one the payload's
/// `authorizations` name.
fn bot_user_id(reader: &EventReader<'_>, payload: &Value) -> Option<String> {
    reader.bot_user_id.map(str::to_string).or_else(|| {
        payload["authorizations"]
            .as_array()?
            .iter()
            .find(|authorization| authorization["is_bot"] == true)?["user_id"]
            .as_str()
            .map(str::to_string)
    })
}

/// When the message was sent: the seconds of its `ts`, else now.
fn sent_at(ts: &str) -> String {
    ts.split('.')
        .next()
        .and_then(|seconds| seconds.parse::<i64>().ok())
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .to_string()
}

/// Where a message is answered: its conversation (none for a direct message) and the
/// thread the answer goes to.
struct Answered {
    conversation: Option<Conversation>,
    thread: Option<String>,
}

fn answered_in(direct: bool, channel: &str, ts: &str, thread: Option<&str>) -> Answered {
    if direct {
        // A direct message is answered in the direct channel, in its thread if it had one.
        return Answered {
            conversation: None,
            thread: thread.map(str::to_string),
        };
    }
    // In a channel the bot answers in the thread the message started or is in.
    let root = thread.unwrap_or(ts);
    Answered {
        conversation: Some(Conversation {
            id: format!("{channel}/{root}"),
            title: None,
        }),
        thread: Some(root.to_string()),
    }
}

/// The sender's display name, else their real name, from the event's profile.
fn display_name(event: &Value) -> Option<String> {
    ["display_name", "real_name"]
        .iter()
        .find_map(|key| {
            event["user_profile"][key]
                .as_str()
                .filter(|name| !name.is_empty())
        })
        .map(str::to_string)
}

/// The text without the bot's mentions (`<@U…>`, `<@U…|name>`), each with one adjacent
/// space, and with Slack's escapes (`&amp;`, `&lt;`, `&gt;`) read back. All other
/// whitespace stays as written (pasted code keeps its indentation); only blank lines
/// before the first text and whitespace after the last are dropped.
pub fn strip_mentions(text: &str, bot_user_id: &str) -> String {
    let mention = format!("<@{bot_user_id}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(&mention) {
        let after = &rest[start + mention.len()..];
        match after.find('>') {
            // `<@UBOT>` or `<@UBOT|name>`, not `<@UBOTX>`.
            Some(end) if end == 0 || after.starts_with('|') => {
                out.push_str(&rest[..start]);
                rest = &after[end + 1..];
                // One space goes with the mention: the one after it, else the one before.
                if let Some(stripped) = rest.strip_prefix(' ') {
                    rest = stripped;
                } else if out.ends_with(' ') {
                    out.pop();
                }
            }
            _ => {
                out.push_str(&rest[..start + mention.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    let first_line = match out.find(|character: char| !character.is_whitespace()) {
        Some(first) => out[..first].rfind('\n').map_or(0, |newline| newline + 1),
        None => out.len(),
    };
    out[first_line..]
        .trim_end()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn files(event: &Value) -> Vec<AttachmentRef> {
    let Some(files) = event["files"].as_array() else {
        return Vec::new();
    };
    files
        .iter()
        .filter_map(|file| {
            let url = file["url_private_download"]
                .as_str()
                .or_else(|| file["url_private"].as_str())?;
            let mime_type = file["mimetype"]
                .as_str()
                .filter(|mime| !mime.is_empty())
                .unwrap_or("application/octet-stream")
                .to_string();
            let file_name = file["name"].as_str().map(str::to_string);
            Some(AttachmentRef::of_mime_type(url, mime_type, file_name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    fn reader(
        is_contact: &'static (dyn Fn(&ChannelIdentity) -> bool + Sync),
    ) -> EventReader<'static> {
        EventReader {
            channel: "slack",
            bot_user_id: Some("UBOT"),
            rules: GroupRules::default(),
            is_contact,
        }
    }

    fn callback(event: Value) -> Value {
        json!({"type": "event_callback", "event_id": "Ev1", "event": event})
    }

    #[test]
    fn mentions_of_the_bot_are_stripped_and_escapes_read_back() {
        assert_eq!(
            strip_mentions("<@UBOT> what is  1 &lt; 2?", "UBOT"),
            "what is  1 < 2?"
        );
        assert_eq!(
            strip_mentions("hi <@UBOT|saint>, ask <@UBOTX> &amp; <@U024BK3>", "UBOT"),
            "hi, ask <@UBOTX> & <@U024BK3>"
        );
        assert_eq!(strip_mentions("  <@UBOT>  ", "UBOT"), "");
    }

    #[test]
    fn stripping_a_mention_keeps_the_indentation_of_pasted_code() {
        let yaml = "server:\n  port: 8080\n  hosts:\n    - a  # first\n\n    - b";
        assert_eq!(
            strip_mentions(&format!("<@UBOT> check this:\n{yaml}"), "UBOT"),
            format!("check this:\n{yaml}")
        );
        assert_eq!(strip_mentions(&format!("<@UBOT>\n{yaml}\n"), "UBOT"), yaml);
        assert_eq!(
            strip_mentions(
                &format!("is this right <@UBOT|saint>\n```\n{yaml}\n```"),
                "UBOT"
            ),
            format!("is this right\n```\n{yaml}\n```")
        );
        let outcome = parse_event(
            &reader(&|_| false),
            &callback(
                json!({"type": "message", "channel": "D0DM", "channel_type": "im",
                "user": "U024BK3", "text": format!("<@UBOT> {yaml}"), "ts": "1.6"}),
            ),
        );
        let EventOutcome::Message(message) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(message.text, yaml);
    }

    #[test]
    fn a_direct_message_is_answered_in_its_direct_channel() {
        let outcome = parse_event(
            &reader(&|_| false),
            &callback(
                json!({"type": "message", "channel": "D0DM", "channel_type": "im",
                "user": "U024BK3", "text": "hello", "ts": "1700000000.000100"}),
            ),
        );
        let EventOutcome::Message(message) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(message.platform_id, "D0DM:1700000000.000100");
        assert_eq!(message.sender.as_str(), "slack:U024BK3");
        assert_eq!(message.conversation, None);
        assert_eq!(message.context.chat.as_deref(), Some("D0DM"));
        assert_eq!(message.context.thread, None);
        assert_eq!(message.sent_at, "2023-11-14T22:13:20Z");
    }

    #[test]
    fn channel_messages_need_a_mention_and_are_answered_in_their_thread() {
        let unaddressed = parse_event(
            &reader(&|_| false),
            &callback(
                json!({"type": "message", "channel": "C0ACME", "channel_type": "channel",
                "user": "U024BK3", "text": "lunch?", "ts": "1700000000.000200"}),
            ),
        );
        assert!(
            matches!(unaddressed, EventOutcome::Skipped(reason) if reason.contains("not addressed"))
        );
        let in_thread = parse_event(
            &reader(&|_| false),
            &callback(
                json!({"type": "message", "channel": "C0ACME", "channel_type": "channel",
                "user": "U024BK3", "text": "and you?", "ts": "1700000000.000300",
                "thread_ts": "1700000000.000100", "parent_user_id": "UBOT"}),
            ),
        );
        let EventOutcome::Message(message) = in_thread else {
            panic!("{in_thread:?}")
        };
        assert_eq!(message.conversation.unwrap().id, "C0ACME/1700000000.000100");
        assert_eq!(message.context.thread.as_deref(), Some("1700000000.000100"));
        assert_eq!(message.context.chat.as_deref(), Some("C0ACME"));
    }

    #[test]
    fn edits_bots_and_the_bot_itself_are_skipped() {
        for event in [
            json!({"type": "message", "subtype": "message_changed", "channel": "D1", "ts": "1.2"}),
            json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U024BK3",
                   "bot_id": "B9", "text": "x", "ts": "1.3"}),
            json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "UBOT",
                   "text": "x", "ts": "1.4"}),
            json!({"type": "reaction_added", "user": "U024BK3", "ts": "1.5"}),
        ] {
            assert!(matches!(
                parse_event(&reader(&|_| false), &callback(event)),
                EventOutcome::Skipped(_)
            ));
        }
    }

    #[test]
    fn a_deletion_withdraws_the_message_it_names() {
        let deleted = json!({"type": "message", "subtype": "message_deleted", "channel": "D1",
                             "ts": "1700000001.000200", "deleted_ts": "1700000000.000100",
                             "hidden": true});
        assert_eq!(
            parse_event(&reader(&|_| false), &callback(deleted)),
            EventOutcome::Withdrawn("D1:1700000000.000100".to_string())
        );
    }
}
