//! The inbox's scheduling on a real SQLite file: which waiting messages the dispatcher
//! is handed. A lane is one session (the agent names it; by default a sender's direct
//! messages on one channel) or one group conversation.

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
        pressed: false,
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
fn one_persons_messages_on_two_channels_wait_in_one_lane_when_stored_in_it() {
    let (_directory, connection) = database();
    // The agent stores a Contact's direct messages in their session's lane, whatever
    // channel they came on.
    let mut on_slack = message("s-1", "222222222", None, "question B");
    on_slack.channel = "slack".into();
    let first = queue::insert_inbound_in_lane(
        &connection,
        &message("t-1", "222222222", None, "question A"),
        "person:marko",
    )
    .unwrap()
    .unwrap();
    queue::insert_inbound_in_lane(&connection, &on_slack, "person:marko").unwrap();
    queue::insert_inbound(&connection, &message("ivan-1", "333333333", None, "hi")).unwrap();
    assert_eq!(due_ids(&connection, 10), ["t-1", "ivan-1"]);
    // Telegram's turn failed and waits for its retry: Marko's Slack message waits too,
    // so the retried turn never finds a newer message of its session answered.
    queue::retry_inbound(&connection, first, queue::now_ms() + 60_000, "model down").unwrap();
    assert_eq!(due_ids(&connection, 10), ["ivan-1"]);
    queue::fail_inbound(&connection, first, "gave up").unwrap();
    assert_eq!(due_ids(&connection, 10), ["s-1", "ivan-1"]);
    let lanes: Vec<String> = queue::due_inbound(&connection, queue::now_ms(), 10)
        .unwrap()
        .into_iter()
        .map(|row| row.lane)
        .collect();
    assert_eq!(lanes[0], "person:marko");
    assert_eq!(lanes[1], message("x", "333333333", None, "").lane());
}

#[test]
fn a_database_from_before_lanes_puts_its_waiting_rows_in_their_senders_lanes() {
    let directory = tempfile::tempdir().unwrap();
    let connection = Connection::open(directory.path().join("old.sqlite3")).unwrap();
    connection
        .execute_batch(&queue::SCHEMA.replace("    lane TEXT,\n", ""))
        .unwrap();
    let old_insert = |id: &str, sender: &str| {
        let message = message(id, sender, None, "waiting since before the upgrade");
        connection
            .execute(
                "INSERT INTO inbox (channel, platform_id, sender, body, state, next_attempt_at, received_at)
                 VALUES ('telegram', ?1, ?2, ?3, 'received', 0, 0)",
                rusqlite::params![id, message.sender.as_ref(), serde_json::to_string(&message).unwrap()],
            )
            .unwrap();
    };
    old_insert("old-1", "222222222");
    old_insert("old-2", "222222222");
    old_insert("old-3", "333333333");
    queue::migrate(&connection).unwrap();
    queue::migrate(&connection).unwrap();
    assert_eq!(due_ids(&connection, 10), ["old-1", "old-3"]);
    let unlaned: i64 = connection
        .query_row("SELECT COUNT(*) FROM inbox WHERE lane IS NULL", [], |row| {
            row.get(0)
        })
        .unwrap();
    assert_eq!(unlaned, 0);
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

fn reply_to(chat: &str, text: &str) -> saint_channels::OutboundBody {
    saint_channels::OutboundBody {
        text: text.into(),
        files: Vec::new(),
        context: ReplyContext {
            chat: Some(chat.into()),
            ..ReplyContext::default()
        },
    }
}

fn due_texts(connection: &Connection, order: queue::Order) -> Vec<String> {
    queue::due_outbound_with(connection, "telegram", queue::now_ms(), 32, order)
        .unwrap()
        .into_iter()
        .map(|row| row.body.text)
        .collect()
}

#[test]
fn a_later_reply_waits_while_an_earlier_one_of_its_conversation_is_put_off() {
    let (_directory, connection) = database();
    let enqueue = |chat: &str, text: &str| {
        queue::enqueue(
            &connection,
            "telegram",
            "telegram:42",
            &reply_to(chat, text),
            "reply",
            None,
        )
        .unwrap()
    };
    let first = enqueue("room-a", "a1");
    enqueue("room-a", "a2");
    enqueue("room-b", "b1");
    assert_eq!(
        due_texts(&connection, queue::Order::PerConversation),
        ["a1", "b1"]
    );

    // The platform's rate limit puts the first reply off: the second waits behind it,
    // and the sender's next wake-up is when the first is due, not now.
    let later = queue::now_ms() + 60_000;
    queue::retry_outbound(&connection, first, later, "429: slow down").unwrap();
    assert_eq!(
        due_texts(&connection, queue::Order::PerConversation),
        ["b1"]
    );
    assert_eq!(
        due_texts(&connection, queue::Order::Unordered),
        ["a2", "b1"],
        "without the order the second reply would overtake the first"
    );
    assert!(
        queue::next_outbound_due(&connection, "telegram")
            .unwrap()
            .unwrap()
            <= queue::now_ms(),
        "b1 is due"
    );
    let b1 = queue::due_outbound(&connection, "telegram", queue::now_ms(), 32).unwrap()[0].id;
    queue::mark_sent(&connection, b1).unwrap();
    assert_eq!(
        queue::next_outbound_due(&connection, "telegram").unwrap(),
        Some(later)
    );

    // Sent (or given up on), the first lets the second go.
    queue::mark_sent(&connection, first).unwrap();
    assert_eq!(
        due_texts(&connection, queue::Order::PerConversation),
        ["a2"]
    );
}

fn outcome_of(connection: &Connection, id: i64) -> (String, Option<String>) {
    let outcome = queue::outcomes(connection, id - 1, 1).unwrap().remove(0);
    assert_eq!(outcome.id, id);
    (outcome.outcome, outcome.reason)
}

#[test]
fn a_withdrawn_message_is_not_answered_and_its_text_is_forgotten() {
    let (_directory, connection) = database();
    // Waiting for its turn: never answered.
    let waiting = queue::insert_inbound(&connection, &message("w", "42", None, "secret one"))
        .unwrap()
        .unwrap();
    assert_eq!(
        queue::withdraw_inbound(&connection, "telegram", "w", "withdrawn by its sender").unwrap(),
        queue::Withdrawn::BeforeTurn
    );
    assert!(due_ids(&connection, 10).is_empty());
    assert!(queue::inbound_settled(&connection, waiting).unwrap());
    // A turn that picked it up just before cannot store it.
    assert!(queue::mark_accepted(&connection, waiting, 7).is_err());
    assert_eq!(
        outcome_of(&connection, waiting),
        (
            "ignored".to_string(),
            Some("withdrawn by its sender".to_string())
        )
    );

    // Its turn running: the transcript message is named, and no reply can be queued.
    let running = queue::insert_inbound(&connection, &message("r", "42", None, "secret two"))
        .unwrap()
        .unwrap();
    queue::mark_accepted(&connection, running, 8).unwrap();
    assert_eq!(
        queue::withdraw_inbound(&connection, "telegram", "r", "withdrawn by its sender").unwrap(),
        queue::Withdrawn::Stored { message_id: 8 }
    );
    let body = reply_to("c", "the answer");
    assert!(queue::queue_reply(&connection, running, "telegram", "telegram:42", &body).is_err());

    // Answered: it stays answered, and says it was withdrawn since.
    let answered = queue::insert_inbound(&connection, &message("a", "42", None, "secret three"))
        .unwrap()
        .unwrap();
    queue::mark_accepted(&connection, answered, 9).unwrap();
    queue::queue_reply(&connection, answered, "telegram", "telegram:42", &body).unwrap();
    assert_eq!(
        queue::withdraw_inbound(&connection, "telegram", "a", "withdrawn by its sender").unwrap(),
        queue::Withdrawn::Stored { message_id: 9 }
    );
    assert_eq!(
        outcome_of(&connection, answered),
        (
            "answered".to_string(),
            Some("withdrawn by its sender after it was answered".to_string())
        )
    );
    // No row keeps a withdrawn text; an unknown id changes nothing.
    let texts: i64 = connection
        .query_row(
            "SELECT COUNT(*) FROM inbox WHERE body LIKE '%secret%'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(texts, 0);
    assert_eq!(
        queue::withdraw_inbound(&connection, "telegram", "never-seen", "withdrawn").unwrap(),
        queue::Withdrawn::Unknown
    );
}

#[test]
fn every_message_has_one_outcome_and_a_flooding_sender_is_told_once_per_window() {
    let (_directory, connection) = database();
    let window = std::time::Duration::from_secs(60);
    let answered = queue::insert_inbound(&connection, &message("1", "42", None, "hi"))
        .unwrap()
        .unwrap();
    queue::mark_accepted(&connection, answered, 1).unwrap();
    queue::queue_reply(
        &connection,
        answered,
        "telegram",
        "telegram:42",
        &reply_to("c", "hello"),
    )
    .unwrap();
    let ignored =
        queue::insert_ignored(&connection, &message("2", "42", None, "ooo"), "auto-reply")
            .unwrap()
            .unwrap();
    let refused = [("3", "flood"), ("4", "flood again")].map(|(id, text)| {
        queue::insert_refused(
            &connection,
            &message(id, "999", None, text),
            "over the rate",
            "slow down, please",
            window,
        )
        .unwrap()
        .unwrap()
    });
    let failed = queue::insert_inbound(&connection, &message("5", "42", None, "x"))
        .unwrap()
        .unwrap();
    queue::fail_inbound(&connection, failed, "channel gone").unwrap();
    let pending = queue::insert_inbound(&connection, &message("6", "42", None, "y"))
        .unwrap()
        .unwrap();

    let outcomes: Vec<(String, Option<String>)> = queue::outcomes(&connection, 0, 100)
        .unwrap()
        .into_iter()
        .map(|outcome| (outcome.outcome, outcome.reason))
        .collect();
    let expected =
        |outcome: &str, reason: Option<&str>| (outcome.to_string(), reason.map(str::to_string));
    assert_eq!(
        outcomes,
        [
            expected("answered", None),
            expected("ignored", Some("auto-reply")),
            expected("refused", Some("over the rate (the sender was told)")),
            expected(
                "refused",
                Some("over the rate (the sender was already told in this window)")
            ),
            expected("failed", Some("channel gone")),
            expected("pending", None),
        ]
    );
    assert_eq!(
        [answered, ignored, refused[0], refused[1], failed, pending],
        [1, 2, 3, 4, 5, 6]
    );
    // One notice, in reply to the first refused message, queued to the sender.
    let notices: Vec<(String, i64)> = connection
        .prepare("SELECT recipient, inbox_id FROM outbox WHERE origin = 'refusal'")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(notices, [("telegram:999".to_string(), refused[0])]);
    let reply = queue::outcomes(&connection, refused[0] - 1, 1).unwrap()[0]
        .reply
        .clone();
    assert_eq!(reply.as_deref(), Some("queued"));
}

#[test]
fn a_database_from_before_outcomes_gets_the_columns() {
    let directory = tempfile::tempdir().unwrap();
    let connection = Connection::open(directory.path().join("old.sqlite3")).unwrap();
    connection
        .execute_batch(&queue::SCHEMA.replace(
            "outcome TEXT CHECK (outcome IN ('answered', 'refused', 'ignored', 'failed')),\n    outcome_reason TEXT,\n",
            "",
        ))
        .unwrap();
    let columns = |connection: &Connection| -> i64 {
        connection
            .query_row(
                "SELECT COUNT(*) FROM pragma_table_info('inbox') WHERE name LIKE 'outcome%'",
                [],
                |row| row.get(0),
            )
            .unwrap()
    };
    assert_eq!(columns(&connection), 0, "the old shape");
    queue::migrate(&connection).unwrap();
    queue::migrate(&connection).unwrap();
    assert_eq!(columns(&connection), 2);
}

#[test]
fn a_database_from_before_owner_notices_does_not_tell_its_old_dead_letters() {
    let directory = tempfile::tempdir().unwrap();
    let connection = Connection::open(directory.path().join("old.sqlite3")).unwrap();
    connection
        .execute_batch(&queue::SCHEMA.replace(
            "updated_at INTEGER NOT NULL,\n    owner_notice INTEGER\n",
            "updated_at INTEGER NOT NULL\n",
        ))
        .unwrap();
    let old = queue::enqueue(
        &connection,
        "telegram",
        "telegram:1",
        &reply_to("c", "x"),
        "reply",
        None,
    )
    .unwrap();
    queue::fail_outbound(&connection, old, "blocked").unwrap();
    queue::migrate(&connection).unwrap();
    queue::migrate(&connection).unwrap();
    assert_eq!(queue::unreported_dead_letters(&connection).unwrap(), []);
    // One given up on from now on is told once.
    let new = queue::enqueue(
        &connection,
        "telegram",
        "telegram:2",
        &reply_to("c", "the text"),
        "reply",
        None,
    )
    .unwrap();
    queue::fail_outbound(&connection, new, "blocked").unwrap();
    let unreported = queue::unreported_dead_letters(&connection).unwrap();
    assert_eq!(unreported.len(), 1);
    assert_eq!(
        (
            unreported[0].id,
            unreported[0].recipient.as_str(),
            unreported[0].reason.as_str(),
            unreported[0].text.as_str()
        ),
        (new, "telegram:2", "blocked", "the text")
    );
    let notice = queue::enqueue(
        &connection,
        "telegram",
        "telegram:3",
        &reply_to("", "told"),
        queue::DEAD_LETTER_NOTICE,
        None,
    )
    .unwrap();
    queue::mark_dead_letters_reported(&connection, &[new], notice).unwrap();
    assert_eq!(queue::unreported_dead_letters(&connection).unwrap(), []);
    assert!(
        queue::last_dead_letter_notice_at(&connection)
            .unwrap()
            .is_some()
    );
    // A notice that fails is never told about in turn.
    queue::fail_outbound(&connection, notice, "blocked too").unwrap();
    assert_eq!(queue::unreported_dead_letters(&connection).unwrap(), []);
}

#[test]
fn without_the_order_every_due_row_is_handed_out() {
    let (_directory, connection) = database();
    queue::insert_inbound(&connection, &message("a-1", "333333333", None, "a")).unwrap();
    queue::insert_inbound(&connection, &message("a-2", "333333333", None, "b")).unwrap();
    queue::insert_inbound(&connection, &message("g-1", "222222222", Some("-100"), "c")).unwrap();
    queue::insert_inbound(&connection, &message("g-2", "333333333", Some("-100"), "d")).unwrap();
    let ids = |order| -> Vec<String> {
        queue::due_inbound_with(&connection, queue::now_ms(), 10, order)
            .unwrap()
            .into_iter()
            .map(|row| row.message.platform_id)
            .collect()
    };
    assert_eq!(ids(queue::Order::PerConversation), ["a-1", "g-1"]);
    assert_eq!(ids(queue::Order::Unordered), ["a-1", "a-2", "g-1", "g-2"]);
    let first = queue::enqueue(
        &connection,
        "matrix",
        "matrix:@a:x",
        &reply_to("!r:x", "one"),
        "reply",
        None,
    )
    .unwrap();
    queue::enqueue(
        &connection,
        "matrix",
        "matrix:@a:x",
        &reply_to("!r:x", "two"),
        "reply",
        None,
    )
    .unwrap();
    let later = queue::now_ms() + 60_000;
    queue::retry_outbound(&connection, first, later, "429").unwrap();
    assert_eq!(
        queue::next_outbound_due(&connection, "matrix").unwrap(),
        Some(later)
    );
    assert!(
        queue::next_outbound_due_with(&connection, "matrix", queue::Order::Unordered)
            .unwrap()
            .is_some_and(|due| due < later)
    );
}

#[test]
fn a_message_handled_at_once_has_one_row_with_its_outcome_and_no_text() {
    let (_directory, connection) = database();
    let handled = |platform_id: &str, outcome, reason: Option<&str>, message_id| queue::Handled {
        channel: "api".into(),
        platform_id: platform_id.into(),
        sender: "telegram:333333333".into(),
        received_at: queue::now_ms(),
        message_id,
        outcome,
        reason: reason.map(str::to_string),
    };
    queue::record_handled(
        &connection,
        &[
            handled("http-1-0", "answered", None, Some(7)),
            handled("http-1-1", "refused", Some("unknown channel \"fax\""), None),
        ],
    )
    .unwrap();
    // Written again (a retried commit): still one row each.
    queue::record_handled(
        &connection,
        &[handled("http-1-0", "failed", Some("?"), None)],
    )
    .unwrap();
    let outcomes = queue::outcomes(&connection, 0, 10).unwrap();
    assert_eq!(
        outcomes
            .iter()
            .map(|row| (
                row.platform_id.as_str(),
                row.outcome.as_str(),
                row.reason.as_deref()
            ))
            .collect::<Vec<_>>(),
        [
            ("http-1-0", "answered", None),
            ("http-1-1", "refused", Some("unknown channel \"fax\"")),
        ]
    );
    // Never handed to the dispatcher, never counted as waiting.
    assert_eq!(
        queue::due_inbound(&connection, queue::now_ms(), 10).unwrap(),
        []
    );
    assert_eq!(queue::next_inbound_due(&connection).unwrap(), None);
}
