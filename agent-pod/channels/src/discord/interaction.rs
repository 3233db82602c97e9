//! Approval buttons on Discord, both ways. Pure.
//!
//! Out: a message asking for an approval gets an action row of two buttons, Approve
//! (success style) and Reject (danger style), whose `custom_id` is
//! [`crate::buttons`]' value (the code and the decision, nothing else).
//!
//! In: a press arrives over the Gateway as INTERACTION_CREATE of type 3
//! (MESSAGE_COMPONENT). It becomes an inbox message from the presser (`member.user` in
//! a guild, `user` in a DM: Discord names them), whose text is the typed answer the
//! button stands for, marked as pressed; anything else is skipped. Either way the
//! Gateway connection acknowledges the interaction (callback type 6, "deferred update":
//! the message stays as it is) once it is stored, and the decision is answered as a
//! message in the channel the button was in.

use saint_config::{ChannelIdentity, ChannelKind};
use serde_json::{Value, json};

use crate::{
    buttons::{self, Decision},
    message::{InboundMessage, ReplyContext},
};

/// MESSAGE_COMPONENT, the interaction type of a button press.
const MESSAGE_COMPONENT: u64 = 3;
/// The component type of a button.
const BUTTON: u64 = 2;

/// The `components` of a message asking for approval of request `code`.
pub fn approval_components(code: &str) -> Value {
    let row: Vec<Value> = buttons::buttons(code)
        .iter()
        .map(|button| {
            // Success (green) and Danger (red).
            let style = match button.decision {
                Decision::Approve => 3,
                Decision::Reject => 4,
            };
            json!({"type": BUTTON, "style": style, "label": button.label(),
                   "custom_id": button.value})
        })
        .collect();
    json!([{"type": 1, "components": row}])
}

/// An interaction to acknowledge: its id and token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interaction {
    pub id: String,
    pub token: String,
}

/// Reads an INTERACTION_CREATE: the interaction to acknowledge (if it is a component
/// interaction with an id and token), and the pressed message or why there is none.
pub fn read_interaction(
    channel: &str,
    data: &Value,
    bot_id: Option<&str>,
) -> (Option<Interaction>, Result<InboundMessage, String>) {
    if data["type"].as_u64() != Some(MESSAGE_COMPONENT) {
        return (
            None,
            Err(format!("interaction type {} is not handled", data["type"])),
        );
    }
    let interaction = match (data["id"].as_str(), data["token"].as_str()) {
        (Some(id), Some(token)) => Some(Interaction {
            id: id.to_string(),
            token: token.to_string(),
        }),
        _ => None,
    };
    (interaction, read_press(channel, data, bot_id))
}

fn read_press(channel: &str, data: &Value, bot_id: Option<&str>) -> Result<InboundMessage, String> {
    let id = data["id"].as_str().ok_or("an interaction without an id")?;
    let custom_id = data["data"]["custom_id"].as_str().unwrap_or_default();
    let text = buttons::pressed_text(custom_id)
        .filter(|_| data["data"]["component_type"].as_u64() == Some(BUTTON))
        .ok_or_else(|| format!("a press of {custom_id:?} is not one of the bot's buttons"))?;
    let user = if data["member"]["user"].is_object() {
        &data["member"]["user"]
    } else {
        &data["user"]
    };
    let user_id = user["id"].as_str().ok_or("a press without a user")?;
    if user["bot"].as_bool() == Some(true) || Some(user_id) == bot_id {
        return Err("a press by a bot".to_string());
    }
    let sender = ChannelIdentity::parse(ChannelKind::Discord, user_id)
        .map_err(|error| format!("a press by {user_id:?}: {error}"))?;
    let chat = data["channel_id"]
        .as_str()
        .or_else(|| data["channel"]["id"].as_str())
        .ok_or("a press without a channel")?;
    let display_name = display_name(data, user);
    Ok(InboundMessage {
        channel: channel.to_string(),
        kind: ChannelKind::Discord,
        // Interaction ids are snowflakes of their own; a replayed dispatch is the same.
        platform_id: format!("press:{id}"),
        sender,
        // Discord names the presser.
        sender_verified: true,
        unverified_origin: None,
        display_name,
        text,
        attachments: Vec::new(),
        sent_at: jiff::Timestamp::now().to_string(),
        context: ReplyContext {
            chat: Some(chat.to_string()),
            ..ReplyContext::default()
        },
        // A decision is the presser's own, wherever the button was.
        conversation: None,
        pressed: true,
    })
}

/// The name a person goes by in a message or press `data` by `user`: their nickname
/// in the guild, else their display name, else their username.
pub(super) fn display_name(data: &Value, user: &Value) -> Option<String> {
    [
        &data["member"]["nick"],
        &user["global_name"],
        &user["username"],
    ]
    .into_iter()
    .find_map(|name| name.as_str().filter(|name| !name.is_empty()))
    .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn press(user: Value, custom_id: &str) -> Value {
        json!({"id": "1400000000000000001", "application_id": "1100000000000000001",
               "type": 3, "token": "aW50ZXJhY3Rpb24", "version": 1,
               "channel_id": "1200000000000000042",
               "data": {"custom_id": custom_id, "component_type": 2},
               "user": user,
               "message": {"id": "1300000000000000005", "channel_id": "1200000000000000042"}})
    }

    #[test]
    fn the_buttons_carry_the_code_and_the_decision_only() {
        assert_eq!(
            approval_components("K7QX2P"),
            json!([{"type": 1, "components": [
                {"type": 2, "style": 3, "label": "Approve", "custom_id": "approve:K7QX2P"},
                {"type": 2, "style": 4, "label": "Reject", "custom_id": "reject:K7QX2P"},
            ]}])
        );
    }

    #[test]
    fn a_press_is_the_pressers_typed_answer_and_is_acknowledged() {
        let data = press(
            json!({"id": "1000000000000000007", "username": "ana"}),
            "approve:K7QX2P",
        );
        let (interaction, message) = read_interaction("discord", &data, None);
        assert_eq!(
            interaction,
            Some(Interaction {
                id: "1400000000000000001".to_string(),
                token: "aW50ZXJhY3Rpb24".to_string()
            })
        );
        let message = message.unwrap();
        assert_eq!(message.sender.as_str(), "discord:1000000000000000007");
        assert_eq!(message.text, "approve K7QX2P");
        assert!(message.pressed);
        assert_eq!(message.context.chat.as_deref(), Some("1200000000000000042"));
    }

    #[test]
    fn a_press_that_is_not_one_of_our_buttons_is_acknowledged_and_skipped() {
        let ana = json!({"id": "1000000000000000007", "username": "ana"});
        for custom_id in ["approve K7QX2P", "open:K7QX2P", "tell the model to approve"] {
            let (interaction, message) =
                read_interaction("discord", &press(ana.clone(), custom_id), None);
            assert!(interaction.is_some());
            assert!(message.is_err(), "{custom_id}");
        }
        let bot = json!({"id": "1100000000000000001", "username": "acme", "bot": true});
        assert!(
            read_interaction("discord", &press(bot, "approve:K7QX2P"), None)
                .1
                .is_err()
        );
    }
}
