//! Approval buttons on Slack, both ways. Pure.
//!
//! Out: a message asking for an approval gets Block Kit blocks — its text in `section`
//! blocks, then an `actions` block with an Approve and a Reject `button` whose `value`
//! is [`crate::buttons`]' (the code and the decision, nothing else). `text` stays the
//! message's notification and fallback text, and it still says how to answer by typing.
//!
//! In: a press arrives as a `block_actions` interaction (a Socket Mode `interactive`
//! envelope, or the Interactivity request URL's signed form post). It becomes an inbox
//! message from the presser's member id (`user.id`, which Slack vouches for) whose text
//! is the typed answer the button stands for, marked as pressed; anything else — another
//! kind of interaction, an action id or value none of our buttons has, the bot itself —
//! is skipped. The answer to the press is posted in the chat the button was in.

use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::{Value, json};

use super::event_callback::{EventOutcome, EventReader};
use crate::{
    buttons::{self, Decision},
    message::{InboundMessage, ReplyContext},
};

/// Longest text of one `section` block (Slack's limit).
const MAX_SECTION_CHARS: usize = 3_000;

/// The `action_id` of the button giving `decision`.
fn action_id(decision: Decision) -> String {
    format!("approval.{}", decision.verb())
}

/// The blocks of a message asking for approval of request `code`: `text` (mrkdwn) in
/// sections, then the two buttons.
pub fn approval_blocks(text: &str, code: &str) -> Value {
    let characters: Vec<char> = text.chars().collect();
    let mut blocks: Vec<Value> = characters
        .chunks(MAX_SECTION_CHARS)
        .map(|chunk| {
            json!({"type": "section",
                   "text": {"type": "mrkdwn", "text": chunk.iter().collect::<String>()}})
        })
        .collect();
    let elements: Vec<Value> = buttons::buttons(code)
        .iter()
        .map(|button| {
            let style = match button.decision {
                Decision::Approve => "primary",
                Decision::Reject => "danger",
            };
            json!({"type": "button", "action_id": action_id(button.decision),
                   "text": {"type": "plain_text", "text": button.label()},
                   "style": style, "value": button.value})
        })
        .collect();
    blocks.push(
        json!({"type": "actions", "block_id": format!("approval.{code}"),
                       "elements": elements}),
    );
    Value::Array(blocks)
}

/// Reads one interaction payload (`block_actions`) into a pressed message.
pub fn parse_interaction(reader: &EventReader<'_>, payload: &Value) -> EventOutcome {
    let skipped = |reason: String| EventOutcome::Skipped(reason);
    if payload["type"] != "block_actions" {
        return skipped(format!(
            "interaction type {} is not handled",
            payload["type"]
        ));
    }
    let action = &payload["actions"][0];
    let (action_id, value) = (
        action["action_id"].as_str().unwrap_or_default(),
        action["value"].as_str().unwrap_or_default(),
    );
    // Both must be one of our buttons, and agree: a value under another action id is
    // not a press of ours.
    let Some(text) = buttons::pressed_text(value).filter(|text| {
        text.split_whitespace()
            .next()
            .is_some_and(|verb| action_id == format!("approval.{verb}"))
    }) else {
        return skipped(format!(
            "a press of {action_id:?} with value {value:?} is not one of the bot's buttons"
        ));
    };
    let user = payload["user"]["id"].as_str().unwrap_or_default();
    if reader.bot_user_id == Some(user) {
        return skipped("a press by the bot itself".to_string());
    }
    let sender = match ChannelIdentity::parse(ChannelKind::Slack, user) {
        Ok(sender) => sender,
        Err(error) => return skipped(format!("a press by {user:?}: {error}")),
    };
    let container = &payload["container"];
    let Some(chat) = container["channel_id"]
        .as_str()
        .or_else(|| payload["channel"]["id"].as_str())
    else {
        return skipped("a press without a channel".to_string());
    };
    let message_ts = container["message_ts"].as_str().unwrap_or_default();
    let action_ts = action["action_ts"].as_str().unwrap_or_default();
    let sent_at = action_ts
        .split('.')
        .next()
        .and_then(|seconds| seconds.parse::<i64>().ok())
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or_else(jiff::Timestamp::now)
        .to_string();
    EventOutcome::Message(Box::new(InboundMessage {
        channel: reader.channel.to_string(),
        kind: ChannelKind::Slack,
        // One press: a redelivered envelope is the same press, a second press is not.
        platform_id: format!("press:{chat}:{message_ts}:{user}:{action_ts}"),
        sender,
        // Slack names the presser; the payload is on the app's socket or signed.
        sender_verified: true,
        unverified_origin: None,
        display_name: payload["user"]["name"].as_str().map(str::to_string),
        text,
        attachments: Vec::new(),
        sent_at,
        context: ReplyContext {
            chat: Some(chat.to_string()),
            thread: container["thread_ts"].as_str().map(str::to_string),
            ..Default::default()
        },
        // A decision is the presser's own, wherever the button was.
        conversation: None,
        pressed: true,
    }))
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;
    use crate::transport::GroupRules;

    fn reader() -> EventReader<'static> {
        EventReader {
            channel: "slack",
            bot_user_id: Some("UBOT"),
            rules: GroupRules::default(),
            is_contact: &|_| false,
        }
    }

    fn press(user: &str, action_id: &str, value: &str) -> Value {
        json!({"type": "block_actions", "user": {"id": user, "name": "ana"},
               "container": {"type": "message", "message_ts": "1700009000.000001",
                             "channel_id": "D0ANA", "is_ephemeral": false},
               "channel": {"id": "D0ANA", "name": "directmessage"},
               "response_url": "https://hooks.slack.com/actions/T0/1/abc",
               "actions": [{"type": "button", "action_id": action_id, "block_id": "approval.K7QX2P",
                            "value": value, "action_ts": "1700009001.000200"}]})
    }

    #[test]
    fn the_buttons_carry_the_code_and_the_decision_only() {
        let blocks = approval_blocks("Approval needed: *Ivan* asks", "K7QX2P");
        assert_eq!(
            blocks,
            json!([
                {"type": "section", "text": {"type": "mrkdwn", "text": "Approval needed: *Ivan* asks"}},
                {"type": "actions", "block_id": "approval.K7QX2P", "elements": [
                    {"type": "button", "action_id": "approval.approve",
                     "text": {"type": "plain_text", "text": "Approve"}, "style": "primary",
                     "value": "approve:K7QX2P"},
                    {"type": "button", "action_id": "approval.reject",
                     "text": {"type": "plain_text", "text": "Reject"}, "style": "danger",
                     "value": "reject:K7QX2P"},
                ]},
            ])
        );
        let long = "x".repeat(MAX_SECTION_CHARS + 1);
        assert_eq!(
            approval_blocks(&long, "K7QX2P").as_array().unwrap().len(),
            3
        );
    }

    #[test]
    fn a_press_is_the_pressers_typed_answer() {
        let outcome = parse_interaction(
            &reader(),
            &press("U0ANA", "approval.approve", "approve:K7QX2P"),
        );
        let EventOutcome::Message(message) = outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(message.sender.as_str(), "slack:U0ANA");
        assert_eq!(message.text, "approve K7QX2P");
        assert!(message.pressed);
        assert_eq!(message.context.chat.as_deref(), Some("D0ANA"));
        assert_eq!(
            message.platform_id,
            "press:D0ANA:1700009000.000001:U0ANA:1700009001.000200"
        );
    }

    #[test]
    fn a_press_that_is_not_one_of_our_buttons_is_skipped() {
        for (user, action_id, value) in [
            ("U0ANA", "approval.approve", "reject:K7QX2P"),
            ("U0ANA", "approval.approve", "approve:K7QX2P {\"to\":\"x\"}"),
            ("U0ANA", "other.button", "approve:K7QX2P"),
            ("U0ANA", "approval.approve", "hello model"),
            ("UBOT", "approval.approve", "approve:K7QX2P"),
        ] {
            let outcome = parse_interaction(&reader(), &press(user, action_id, value));
            assert!(
                matches!(outcome, EventOutcome::Skipped(_)),
                "{action_id} {value}: {outcome:?}"
            );
        }
        let modal = json!({"type": "view_submission", "user": {"id": "U0ANA"}});
        assert!(matches!(
            parse_interaction(&reader(), &modal),
            EventOutcome::Skipped(_)
        ));
    }
}
