//! The inbox's scheduling on a real SQLite file: which waiting messages the dispatcher
//! is handed. A lane is a sender's direct messages or one group conversation.

use rusqlite::Connection;
use saint_channels::{Conversation, InboundMessage, ReplyContext, queue};
use saint_config::{ChannelIdentity, ChannelKind};

fn database() -> (tempfile::TempDir, Connection) {
    let directory = tempfile::tempdir().unwrap();
    let connection = Connection::open(directory.path().join("transcripts.sqlite3")).unwrap();
    connection.execute_batch(queue::SCHEMA).unwrap();
    (directory, connection)
}

fn message(id: &str, sender: &str, conversation: Option<&str>, text: &str) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        kind: ChannelKind::Telegram,
        platform_id: id.into(),
        sender: ChannelIdentity::parse(ChannelKind::Telegram, sender).unwrap(),
        sender_verified: true,
        unverified_origin: None,
        display_name: None,
        text: text.into(),
        attachments: Vec::new(),
        sent_at: "2026-11-25T10:00:00Z".into(),
        context: ReplyContext::default(),
        conversation: conversation.map(|id| Conversation {
            id: id.into(),
            title: None,
        }),
    }
}

fn due_ids(connection: &Connection, limit: usize) -> Vec<String> {
    queue::due_inbound(connection, queue::now_ms(), limit)
        .unwrap()
        .into_iter()
        .map(|row| row.message.platform_id)
        .collect()
}

#[test]
fn a_flooding_sender_holds_one_place_in_the_batch_and_others_are_not_starved() {
    let (_directory, connection) = database();
    for n in 0..600 {
        queue::insert_inbound(
            &connection,
            &message(&format!("flood-{n}"), "999", None, "spam"),
        )
        .unwrap();
    }
    queue::insert_inbound(&connection, &message("ivan-1", "333333333", None, "hello")).unwrap();
    queue::insert_inbound(&connection, &message("ivan-2", "333333333", None, "again")).unwrap();
    // The batch limit is far below the flood: Ivan's oldest message is still in it, each
    // lane once and oldest first.
    assert_eq!(due_ids(&connection, 256), ["flood-0", "ivan-1"]);
}

#[test]
fn a_group_conversation_is_one_lane_whoever_writes_and_runs_in_order() {
    let (_directory, connection) = database();
    let first = queue::insert_inbound(&connection, &message("g-1", "222222222", Some("-100"), "a"))
        .unwrap()
        .unwrap();
    queue::insert_inbound(&connection, &message("g-2", "333333333", Some("-100"), "b")).unwrap();
    queue::insert_inbound(&connection, &message("dm-1", "333333333", None, "c")).unwrap();
    queue::insert_inbound(
        &connection,
        &message("g2-1", "333333333", Some("-200"), "d"),
    )
    .unwrap();
    assert_eq!(due_ids(&connection, 10), ["g-1", "dm-1", "g2-1"]);

    // While the lane's oldest waits for a retry, nothing behind it jumps the queue.
    queue::retry_inbound(&connection, first, queue::now_ms() + 60_000, "model down").unwrap();
    assert_eq!(due_ids(&connection, 10), ["dm-1", "g2-1"]);
    // Once it is done, the next in the lane is due.
    queue::fail_inbound(&connection, first, "gave up").unwrap();
    assert_eq!(due_ids(&connection, 10), ["g-2", "dm-1", "g2-1"]);
}

#[test]
fn a_message_with_nothing_to_answer_is_named() {
    assert_eq!(
        message("e", "999", None, " \n ").unanswerable(),
        Some("empty message: no text and no attachment")
    );
    assert_eq!(message("t", "999", None, "hi").unanswerable(), None);
    assert_ne!(
        message("a", "999", Some("-100"), "x").lane(),
        message("b", "999", None, "x").lane(),
        "a person's group messages and direct messages are different lanes"
    );
}

#[test]
fn answers_are_counted_per_sending_identity_and_ignored_mail_does_not_count() {
    let (_directory, connection) = database();
    let since = queue::now_ms() - 60_000;
    let from = |id: &str, origin: Option<&str>| InboundMessage {
        sender_verified: origin.is_none(),
        unverified_origin: origin.map(str::to_string),
        ..message(id, "42", None, "hello")
    };
    queue::insert_inbound(&connection, &from("real-1", None)).unwrap();
    queue::insert_inbound(&connection, &from("real-2", None)).unwrap();
    queue::insert_ignored(
        &connection,
        &from("real-3", None),
        "Auto-Submitted: auto-replied",
    )
    .unwrap();
    queue::insert_inbound(&connection, &from("forged-1", Some("unsigned"))).unwrap();
    queue::insert_inbound(&connection, &from("signed-1", Some("dkim:evil.example"))).unwrap();
    let count = |origin: Option<&str>| {
        queue::answered_since(&connection, &from("next", origin), since).unwrap()
    };
    assert_eq!(count(None), 2);
    assert_eq!(count(Some("unsigned")), 1);
    assert_eq!(count(Some("dkim:evil.example")), 1);
    assert_eq!(count(Some("dkim:other.example")), 0);
    // Older than the window: not counted.
    assert_eq!(
        queue::answered_since(&connection, &from("next", None), queue::now_ms() + 1).unwrap(),
        0
    );
}
