//! The Telegram channel against the scripted Bot API: the poller drives a real SQLite
//! inbox through the queue's own SQL, so what is stored, what is skipped and when the
//! offset moves are what the agent would see.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use http::HeaderMap;
use pretty_assertions::assert_eq;
use saint_channels::{
    AttachmentRef, ChannelState, InboundMessage, InboxError, InboxSink, OpenedChannel,
    ReplyContext, SendError, WebhookRefusal, format::split_message, open, queue,
};
use saint_config::{ChannelConfig, ChannelIdentity, ChannelKind};
use saint_scripted::telegram::{
    self as scripted, BOT_USERNAME, Failure, Group, Person, ScriptedTelegram, check_html,
};
use serde_json::{Value, json};
use tokio::sync::watch;

const TOKEN: &str = "7700000001:AAH-test-bot-token_xyz";
const SECRET: &str = "hook-secret_0123";
const WAIT: Duration = Duration::from_secs(15);

fn ivan() -> Person {
    Person::new(333333333, "Ivan")
}

fn marko() -> Person {
    Person::new(222222222, "Marko")
}

fn stranger() -> Person {
    Person::new(444444444, "Eve")
}

fn ops() -> Group {
    Group::new(-1001234567890, "Acme Ops")
}

fn identity(person: &Person) -> ChannelIdentity {
    ChannelIdentity::parse(ChannelKind::Telegram, &person.id.to_string()).unwrap()
}

/// An inbox over a real SQLite file, with the agent's queue SQL.
struct SqliteSink {
    _directory: tempfile::TempDir,
    database: Mutex<rusqlite::Connection>,
    contacts: Vec<ChannelIdentity>,
    failing_commits: AtomicUsize,
    commits: AtomicUsize,
    states: Mutex<Vec<ChannelState>>,
}

impl SqliteSink {
    fn new(contacts: Vec<ChannelIdentity>) -> Arc<Self> {
        let directory = tempfile::tempdir().unwrap();
        let database = rusqlite::Connection::open(directory.path().join("inbox.sqlite3")).unwrap();
        database.execute_batch(queue::SCHEMA).unwrap();
        Arc::new(Self {
            _directory: directory,
            database: Mutex::new(database),
            contacts,
            failing_commits: AtomicUsize::new(0),
            commits: AtomicUsize::new(0),
            states: Mutex::default(),
        })
    }

    fn messages(&self) -> Vec<InboundMessage> {
        let database = self.database.lock().unwrap();
        let mut statement = database
            .prepare("SELECT body FROM inbox ORDER BY id")
            .unwrap();
        statement
            .query_map([], |row| row.get::<_, String>(0))
            .unwrap()
            .map(|body| serde_json::from_str(&body.unwrap()).unwrap())
            .collect()
    }

    fn saved_cursor(&self) -> Option<String> {
        queue::cursor(&self.database.lock().unwrap(), "tg").unwrap()
    }

    fn states(&self) -> Vec<ChannelState> {
        self.states.lock().unwrap().clone()
    }
}

impl InboxSink for SqliteSink {
    fn cursor<'a>(&'a self, channel: &'a str) -> BoxFuture<'a, Result<Option<String>, InboxError>> {
        Box::pin(async move {
            queue::cursor(&self.database.lock().unwrap(), channel).map_err(InboxError::storage)
        })
    }

    fn commit<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        Box::pin(async move {
            if self
                .failing_commits
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
            {
                return Err(InboxError::storage("disk I/O error (scripted)"));
            }
            let mut database = self.database.lock().unwrap();
            let transaction = database.transaction().map_err(InboxError::storage)?;
            for (message, ignore) in &messages {
                match ignore {
                    None => queue::insert_inbound(&transaction, message).map(drop),
                    Some(reason) => queue::insert_ignored(&transaction, message, reason).map(drop),
                }
                .map_err(InboxError::storage)?;
            }
            queue::set_cursor(&transaction, channel, &cursor).map_err(InboxError::storage)?;
            transaction.commit().map_err(InboxError::storage)?;
            self.commits.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    fn report(&self, _channel: &str, state: ChannelState) {
        self.states.lock().unwrap().push(state);
    }

    fn is_contact(&self, identity: &ChannelIdentity) -> bool {
        self.contacts.contains(identity)
    }
}

fn config(server: &ScriptedTelegram, settings: &[(&str, &str)], webhook: bool) -> ChannelConfig {
    let mut all: BTreeMap<String, String> = settings
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    all.insert("apiBaseUrl".to_string(), server.base_url());
    let mut secrets = BTreeMap::from([("botToken".to_string(), "TG_TOKEN".to_string())]);
    if webhook {
        all.insert("mode".to_string(), "webhook".to_string());
        secrets.insert("webhookSecret".to_string(), "TG_SECRET".to_string());
    }
    ChannelConfig {
        name: "tg".to_string(),
        kind: ChannelKind::Telegram,
        settings: all,
        secret_env: secrets,
    }
}

fn opened(config: &ChannelConfig, token: &str) -> OpenedChannel {
    let token = token.to_string();
    let lookup = move |variable: &str| match variable {
        "TG_TOKEN" => Some(token.clone()),
        "TG_SECRET" => Some(SECRET.to_string()),
        _ => None,
    };
    open::open(config, &lookup, Path::new("/nonexistent"))
        .unwrap()
        .unwrap()
}

/// A polling channel running against the server until dropped.
struct Polling {
    channel: OpenedChannel,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Polling {
    fn start(server: &ScriptedTelegram, settings: &[(&str, &str)], sink: Arc<SqliteSink>) -> Self {
        Self::start_with_token(server, settings, sink, TOKEN)
    }

    fn start_with_token(
        server: &ScriptedTelegram,
        settings: &[(&str, &str)],
        sink: Arc<SqliteSink>,
        token: &str,
    ) -> Self {
        let channel = opened(&config(server, settings, false), token);
        let (stop, stopped) = watch::channel(false);
        let connection = channel
            .connection
            .clone()
            .expect("polling has a connection");
        let task = tokio::spawn(connection.run(sink.clone(), stopped));
        Self {
            channel,
            stop,
            task: Some(task),
        }
    }

    async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(2), task)
                .await
                .expect("the poller stops promptly")
                .unwrap();
        }
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until a `getUpdates` asked for `offset` (which confirms everything below it).
async fn wait_for_offset(server: &ScriptedTelegram, offset: i64) {
    assert!(
        server
            .wait_for_requests(WAIT, |requests| requests
                .iter()
                .any(
                    |request| request.method == "getUpdates" && request.body["offset"] == offset
                ))
            .await,
        "no getUpdates with offset {offset}: {:#?}",
        server.requests_of("getUpdates")
    );
}

#[tokio::test]
async fn a_private_message_is_stored_with_its_offset_and_answered_in_the_private_chat() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let (update_id, message_id) =
        server.push_message(scripted::private_text(&ivan(), "Hi <bot> & co"));
    let sink = SqliteSink::new(vec![]);
    let mut polling = Polling::start(&server, &[], sink.clone());
    wait_until("the message", || sink.messages().len() == 1).await;
    let message = &sink.messages()[0];
    assert_eq!(message.platform_id, format!("{}:{message_id}", ivan().id));
    assert_eq!(message.sender, identity(&ivan()));
    assert!(message.sender_verified);
    assert_eq!(message.text, "Hi <bot> & co");
    assert_eq!(message.display_name.as_deref(), Some("Ivan"));
    assert_eq!(message.conversation, None);
    assert_eq!(
        message.context,
        ReplyContext {
            reply_to: Some(message_id.to_string()),
            ..ReplyContext::default()
        }
    );
    assert_eq!(sink.saved_cursor(), Some((update_id + 1).to_string()));
    // The next poll confirms the batch, and only updates past it are asked for.
    wait_for_offset(&server, update_id + 1).await;
    assert!(server.pending_updates().is_empty());
    let first_poll = &server.requests_of("getUpdates")[0];
    assert_eq!(
        first_poll.body["allowed_updates"],
        json!(["message", "callback_query"])
    );
    assert!((25..=50).contains(&first_poll.body["timeout"].as_u64().unwrap()));
    assert_eq!(server.requests_of("getMe").len(), 1);
    assert!(sink.states().contains(&ChannelState::Up));

    // The reply goes to Ivan's private chat (his user id), without quoting.
    let transport = polling.channel.transport.clone();
    let sent = transport
        .send(&message.sender, "Hello **Ivan**", &message.context, 0)
        .await
        .unwrap();
    let body = &server.sent()[0];
    assert_eq!(body["chat_id"], ivan().id.to_string());
    assert_eq!(body["parse_mode"], "HTML");
    assert_eq!(
        body["text"], "Hello **Ivan**",
        "send takes rendered text as is"
    );
    assert!(body.get("reply_parameters").is_none());
    assert!(sent.starts_with(&format!("{}:", ivan().id)), "{sent}");
    polling.stop().await;
}

#[tokio::test]
async fn a_duplicated_update_is_stored_once() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let message = scripted::private_text(&ivan(), "only once");
    let (update_id, message_id) = server.push_message(message.clone());
    // Telegram delivering the same message again, under a new update and as the same
    // update.
    let mut again = message.clone();
    again["message_id"] = json!(message_id);
    server.push_message(again.clone());
    server.push_update(json!({"update_id": update_id, "message": again}));
    let sink = SqliteSink::new(vec![]);
    let _polling = Polling::start(&server, &[], sink.clone());
    wait_for_offset(&server, update_id + 2).await;
    assert_eq!(sink.messages().len(), 1);
    assert_eq!(sink.messages()[0].text, "only once");
}

#[tokio::test]
async fn the_offset_moves_only_after_the_batch_is_committed() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let (first, _) = server.push_message(scripted::private_text(&ivan(), "one"));
    let (second, _) = server.push_message(scripted::private_text(&marko(), "two"));
    let sink = SqliteSink::new(vec![]);
    sink.failing_commits.store(2, Ordering::SeqCst);
    let _polling = Polling::start(&server, &[], sink.clone());
    wait_until("both messages", || sink.messages().len() == 2).await;
    wait_for_offset(&server, second + 1).await;
    let polls = server.requests_of("getUpdates");
    // Three sessions got the batch (two failed commits, one that stored it), and none
    // of them confirmed it before it was stored.
    let before_commit: Vec<&Value> = polls
        .iter()
        .map(|request| &request.body["offset"])
        .take_while(|offset| **offset != json!(second + 1))
        .collect();
    assert_eq!(before_commit, vec![&Value::Null; 3], "{polls:#?}");
    assert!(first < second);
    assert_eq!(sink.commits.load(Ordering::SeqCst), 1);
    assert_eq!(
        sink.messages()
            .iter()
            .map(|message| message.text.as_str())
            .collect::<Vec<_>>(),
        ["one", "two"]
    );
    assert!(sink.states().iter().any(|state| matches!(state,
        ChannelState::Retrying(reason) if reason.contains("failed to store received messages: disk I/O error"))));
}

#[tokio::test]
async fn a_rate_limited_poll_waits_for_retry_after_and_loses_nothing() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    server.fail_next("getUpdates", [Failure::too_many_requests(2)]);
    server.push_message(scripted::private_text(&ivan(), "after the limit"));
    let sink = SqliteSink::new(vec![]);
    let _polling = Polling::start(&server, &[], sink.clone());
    wait_until("the message", || sink.messages().len() == 1).await;
    let polls = server.requests_of("getUpdates");
    assert_eq!(polls[0].status, 429);
    assert!(
        polls[1].at - polls[0].at >= Duration::from_secs(2),
        "retried after {:?}",
        polls[1].at - polls[0].at
    );
    assert!(sink.states().iter().any(|state| matches!(state,
        ChannelState::Retrying(reason) if reason.contains("Too Many Requests: retry after 2 (HTTP 429)"))));
}

#[tokio::test]
async fn sends_are_classified_by_telegrams_answer() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let channel = opened(&config(&server, &[], false), TOKEN);
    let to = identity(&ivan());
    let context = ReplyContext::default();
    server.fail_next(
        "sendMessage",
        [
            Failure::too_many_requests(7),
            Failure::bad_gateway(),
            Failure::blocked_by_user(),
            Failure::chat_not_found(),
        ],
    );
    let mut results = Vec::new();
    for _ in 0..4 {
        results.push(channel.transport.send(&to, "hi", &context, 0).await);
    }
    assert_eq!(
        results,
        vec![
            Err(SendError::Retry {
                reason: "telegram: Too Many Requests: retry after 7 (HTTP 429)".to_string(),
                after: Some(Duration::from_secs(7)),
            }),
            Err(SendError::Retry {
                reason: "telegram: Bad Gateway (HTTP 502)".to_string(),
                after: None,
            }),
            Err(SendError::Permanent {
                reason: "telegram: Forbidden: bot was blocked by the user (HTTP 403)".to_string()
            }),
            Err(SendError::Permanent {
                reason: "telegram: Bad Request: chat not found (HTTP 400)".to_string()
            }),
        ]
    );
    // Nothing scripted is left: the same send now goes out.
    assert!(channel.transport.send(&to, "hi", &context, 0).await.is_ok());
    assert_eq!(server.sent().len(), 1);
    // A revoked token stops the channel instead of failing the message.
    server.set_token("7700000001:rotated");
    assert_eq!(
        channel.transport.send(&to, "hi", &context, 0).await,
        Err(SendError::Credentials {
            reason: "telegram: Unauthorized (HTTP 401)".to_string()
        })
    );
    // An unreachable API is retried, and the token in the URL is never in the reason.
    drop(server);
    match channel.transport.send(&to, "hi", &context, 0).await {
        Err(SendError::Retry { reason, .. }) => {
            assert!(reason.contains("bot api unreachable"), "{reason}");
            assert!(!reason.contains("AAH-test-bot-token"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_refused_token_is_reported_and_a_webhook_conflict_is_explained() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let sink = SqliteSink::new(vec![]);
    let _refused = Polling::start_with_token(&server, &[], sink.clone(), "7700000001:wrong");
    wait_until("the refusal", || {
        sink.states()
            .iter()
            .any(|state| matches!(state, ChannelState::CredentialsRefused(_)))
    })
    .await;
    assert_eq!(
        sink.states(),
        vec![ChannelState::CredentialsRefused(
            "telegram: Unauthorized (HTTP 401)".to_string()
        )]
    );
    assert!(server.requests_of("getUpdates").is_empty());

    let hooked = ScriptedTelegram::start(TOKEN).await.unwrap();
    let client = reqwest::Client::new();
    let set: Value = client
        .post(format!("{}/bot{TOKEN}/setWebhook", hooked.base_url()))
        .json(&json!({"url": "https://bot.acme.example/channels/tg/webhook"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(set["ok"], true);
    let sink = SqliteSink::new(vec![]);
    let _conflict = Polling::start(&hooked, &[], sink.clone());
    wait_until("the conflict", || !sink.states().is_empty()).await;
    match &sink.states()[0] {
        ChannelState::Retrying(reason) => {
            assert!(reason.contains("(HTTP 409)"), "{reason}");
            assert!(reason.contains("a webhook is set for this bot"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        hooked.requests_of("deleteWebhook").is_empty(),
        "never deleted for the user"
    );
}

#[tokio::test]
async fn group_messages_are_stored_only_when_they_address_the_bot() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let group = ops();
    server.push_message(scripted::group_text(&group, &marko(), "lunch anyone?"));
    let (_, mention_id) = server.push_message(scripted::group_text(
        &group,
        &marko(),
        &format!("@{} what is on the agenda?", BOT_USERNAME.to_uppercase()),
    ));
    server.push_message(scripted::group_text(&group, &ivan(), "@someone_else hello"));
    let (_, reply_id) = server.push_message(scripted::replying_to(
        scripted::group_text(&group, &ivan(), "and the budget?"),
        55,
        server.bot_user(),
    ));
    let (_, command_id) = server.push_message(scripted::group_text(
        &group,
        &ivan(),
        &format!("/report@{BOT_USERNAME} weekly"),
    ));
    // A photo whose caption mentions the bot.
    let (last, photo_id) = server.push_message(scripted::photo(
        json!({"id": group.id, "type": "supergroup", "title": group.title}),
        &marko(),
        "AgACAgIAAxk-photo",
        &format!("see this @{BOT_USERNAME}"),
    ));
    let sink = SqliteSink::new(vec![]);
    let polling = Polling::start(&server, &[], sink.clone());
    wait_for_offset(&server, last + 1).await;
    let stored = sink.messages();
    let summary: Vec<(String, String, String)> = stored
        .iter()
        .map(|message| {
            (
                message.platform_id.clone(),
                message.sender.to_string(),
                message.text.clone(),
            )
        })
        .collect();
    let chat = group.id.to_string();
    assert_eq!(
        summary,
        vec![
            (
                format!("{chat}:{mention_id}"),
                "telegram:222222222".to_string(),
                "what is on the agenda?".to_string()
            ),
            (
                format!("{chat}:{reply_id}"),
                "telegram:333333333".to_string(),
                "and the budget?".to_string()
            ),
            (
                format!("{chat}:{command_id}"),
                "telegram:333333333".to_string(),
                "/report weekly".to_string()
            ),
            (
                format!("{chat}:{photo_id}"),
                "telegram:222222222".to_string(),
                "see this".to_string()
            ),
        ]
    );
    for message in &stored {
        assert_eq!(
            message.conversation,
            Some(saint_channels::Conversation {
                id: chat.clone(),
                title: Some("Acme Ops".to_string())
            })
        );
        assert_eq!(message.context.chat.as_deref(), Some(chat.as_str()));
    }
    assert_eq!(
        stored[3].attachments,
        vec![AttachmentRef {
            id: "AgACAgIAAxk-photo".to_string(),
            kind: "image".to_string(),
            mime_type: "image/jpeg".to_string(),
            file_name: None,
        }]
    );
    // The reply goes to the group, quoting the message in its first part only.
    let transport = polling.channel.transport.clone();
    let message = &stored[0];
    transport
        .send(&message.sender, "first", &message.context, 0)
        .await
        .unwrap();
    transport
        .send(&message.sender, "second", &message.context, 1)
        .await
        .unwrap();
    let sent = server.sent();
    assert_eq!(sent[0]["chat_id"], chat);
    assert_eq!(
        sent[0]["reply_parameters"],
        json!({"message_id": mention_id, "allow_sending_without_reply": true})
    );
    assert_eq!(sent[1]["chat_id"], chat);
    assert!(sent[1].get("reply_parameters").is_none());
}

#[tokio::test]
async fn group_policies_decide_who_is_answered_in_groups() {
    let group = ops();
    let addressed =
        |person: &Person| scripted::group_text(&group, person, &format!("@{BOT_USERNAME} status?"));
    let run = |settings: &'static [(&'static str, &'static str)]| {
        let group = group.clone();
        async move {
            let server = ScriptedTelegram::start(TOKEN).await.unwrap();
            server.push_message(addressed(&ivan()));
            server.push_message(addressed(&stranger()));
            server.push_message(scripted::group_text(&group, &ivan(), "no mention"));
            let (last, _) = server.push_message(scripted::private_text(&stranger(), "in private"));
            let sink = SqliteSink::new(vec![identity(&ivan())]);
            let _polling = Polling::start(&server, settings, sink.clone());
            wait_for_offset(&server, last + 1).await;
            sink.messages()
                .into_iter()
                .map(|message| format!("{}: {}", message.sender, message.text))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        run(&[("groupPolicy", "disabled")]).await,
        vec!["telegram:444444444: in private"]
    );
    assert_eq!(
        run(&[("groupPolicy", "contacts")]).await,
        vec![
            "telegram:333333333: status?",
            "telegram:444444444: in private"
        ]
    );
    assert_eq!(
        run(&[]).await,
        vec![
            "telegram:333333333: status?",
            "telegram:444444444: status?",
            "telegram:444444444: in private"
        ]
    );
    assert_eq!(
        run(&[("requireMention", "false")]).await,
        vec![
            "telegram:333333333: status?",
            "telegram:444444444: status?",
            "telegram:333333333: no mention",
            "telegram:444444444: in private"
        ]
    );
}

#[tokio::test]
async fn the_bots_own_and_other_bots_messages_are_skipped_but_confirmed() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let mut from_bot = scripted::private_text(&ivan(), "beep");
    from_bot["from"]["is_bot"] = json!(true);
    server.push_message(from_bot);
    let mut sticker = scripted::private_text(&ivan(), "");
    sticker.as_object_mut().unwrap().remove("text");
    sticker["sticker"] = json!({"file_id": "CAAC", "width": 512, "height": 512});
    let (last, _) = server.push_message(sticker);
    let sink = SqliteSink::new(vec![]);
    let _polling = Polling::start(&server, &[], sink.clone());
    wait_for_offset(&server, last + 1).await;
    assert!(sink.messages().is_empty());
    assert_eq!(sink.saved_cursor(), Some((last + 1).to_string()));
}

#[tokio::test]
async fn attachments_are_fetched_with_get_file_and_refused_over_the_limit() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let data: Vec<u8> = (0..40_000u32).map(|index| (index % 253) as u8).collect();
    server.add_file("BQACAgIAAxk-doc", "documents/file_7.pdf", data.clone());
    let channel = opened(&config(&server, &[], false), TOKEN);
    let document = AttachmentRef {
        id: "BQACAgIAAxk-doc".to_string(),
        kind: "document".to_string(),
        mime_type: "application/pdf".to_string(),
        file_name: Some("report.pdf".to_string()),
    };
    assert_eq!(
        channel
            .transport
            .fetch_attachment(&document, 1_000_000)
            .await
            .unwrap(),
        data
    );
    assert_eq!(
        channel.transport.fetch_attachment(&document, 10_000).await,
        Err(SendError::Permanent {
            reason: "telegram: document is 40000 bytes, over the 10000-byte limit".to_string()
        })
    );
    let missing = AttachmentRef {
        id: "nope".to_string(),
        ..document
    };
    assert_eq!(
        channel.transport.fetch_attachment(&missing, 1_000).await,
        Err(SendError::Permanent {
            reason: "telegram: Bad Request: invalid file_id (HTTP 400)".to_string()
        })
    );
    let downloads = server.requests_of("file/documents/file_7.pdf");
    assert_eq!(
        downloads.len(),
        1,
        "the oversized file was never downloaded"
    );
    assert!(downloads[0].authorised);
}

#[tokio::test]
async fn webhook_deliveries_need_the_secret_token() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let channel = opened(&config(&server, &[], true), TOKEN);
    let webhook = channel.webhook.clone().expect("webhook mode has a webhook");
    let update = json!({"update_id": 5, "message": {
        "message_id": 9, "date": 1_700_000_000,
        "from": {"id": ivan().id, "is_bot": false, "first_name": "Ivan"},
        "chat": {"id": ivan().id, "type": "private"}, "text": "via webhook"}});
    let body = serde_json::to_vec(&update).unwrap();
    let headers = |secret: Option<&str>| {
        let mut headers = HeaderMap::new();
        if let Some(secret) = secret {
            headers.insert("x-telegram-bot-api-secret-token", secret.parse().unwrap());
        }
        headers
    };
    for wrong in [
        None,
        Some(""),
        Some("hook-secret_012"),
        Some("hook-secret_01234"),
    ] {
        assert!(
            matches!(
                webhook.receive(&headers(wrong), &body, &|_| false),
                Err(WebhookRefusal::Unauthorized(_))
            ),
            "{wrong:?}"
        );
    }
    assert!(matches!(
        webhook.receive(&headers(Some(SECRET)), b"{\"update_id\": ", &|_| false),
        Err(WebhookRefusal::BadRequest(_))
    ));
    let delivery = webhook
        .receive(&headers(Some(SECRET)), &body, &|_| false)
        .unwrap();
    assert_eq!(delivery.messages.len(), 1);
    assert_eq!(delivery.messages[0].platform_id, format!("{}:9", ivan().id));
    assert_eq!(delivery.messages[0].text, "via webhook");
    // An edited message is acknowledged and skipped.
    let edited =
        serde_json::to_vec(&json!({"update_id": 6, "edited_message": update["message"]})).unwrap();
    let delivery = webhook
        .receive(&headers(Some(SECRET)), &edited, &|_| false)
        .unwrap();
    assert!(delivery.messages.is_empty());
    assert_eq!(
        delivery.skipped,
        vec!["update 6: a edited_message update is not handled"]
    );

    // Its connection only checks the token and learns the username; until it has, a
    // group message with a mention is refused (Telegram delivers it again), after that
    // the mention is recognised.
    let mention = serde_json::to_vec(&json!({"update_id": 7, "message": {
        "message_id": 10, "date": 1_700_000_000,
        "from": {"id": marko().id, "is_bot": false, "first_name": "Marko"},
        "chat": {"id": -100777, "type": "supergroup", "title": "T"},
        "text": format!("@{BOT_USERNAME} ping"),
        "entities": [{"type": "mention", "offset": 0, "length": BOT_USERNAME.len() + 1}]}}))
    .unwrap();
    match webhook.receive(&headers(Some(SECRET)), &mention, &|_| false) {
        Err(WebhookRefusal::BadRequest(reason)) => {
            assert!(reason.contains("username is not known yet"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let sink = SqliteSink::new(vec![]);
    let (_stop, stopped) = watch::channel(false);
    tokio::spawn(
        channel
            .connection
            .clone()
            .unwrap()
            .run(sink.clone(), stopped),
    );
    wait_until("getMe", || sink.states() == vec![ChannelState::Up]).await;
    let delivery = webhook
        .receive(&headers(Some(SECRET)), &mention, &|_| false)
        .unwrap();
    assert_eq!(delivery.messages[0].text, "ping");
    assert!(server.requests_of("getUpdates").is_empty());
}

/// 10,000 characters of everything the model writes: headings, bold, italics, code
/// spans and blocks, links, lists, and text that must be escaped.
fn mixed_markdown() -> String {
    // A bold run and a code block (with blank lines) each longer than one message: no
    // boundary the splitter knows lies outside their tags.
    let mut text = format!(
        "**{}**\n\n```\n{}```\n\n",
        "bold & words ".repeat(400).trim_end(),
        "let x = a < b;\n\n".repeat(300)
    );
    let mut index = 0;
    while text.chars().count() < 12_000 {
        text.push_str(&format!(
            "## Section {index} & <notes>\n\
             **Bold {index}** with *italic* and `code <{index}> && x`, a [link](https://acme.example/?a={index}&b=2) \
             and ~~old~~ text; 5 > 3 & 2 < 4.\n\
             * item one with **bold _nested_ words**\n\
             - item two: čćžšđ 😀 emoji\n\n\
             ```rust\nfn main() {{\n    let a = b && c < d;\n\n    println!(\"<{index}>\");\n}}\n```\n\n\
             A paragraph that runs on {} **and ends bold**.\n\n",
            "and on ".repeat(index % 40)
        ));
        index += 1;
    }
    text
}

#[tokio::test]
async fn a_ten_thousand_character_reply_splits_into_well_formed_parts_telegram_accepts() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let channel = opened(&config(&server, &[], false), TOKEN);
    let transport = channel.transport.clone();
    let markdown = mixed_markdown();
    assert!(markdown.chars().count() >= 10_000);
    let rendered = transport.render(&markdown);
    let parts = split_message(&rendered, transport.max_chars());
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let to = identity(&ivan());
    for (index, part) in parts.iter().enumerate() {
        assert!(part.chars().count() <= 4_096, "part {index} is too long");
        if let Err(problem) = check_html(part) {
            panic!("part {index} is not well-formed: {problem}\n{part}");
        }
        transport
            .send(&to, part, &ReplyContext::default(), index)
            .await
            .unwrap_or_else(|error| panic!("part {index} refused: {error}"));
    }
    assert_eq!(server.sent().len(), parts.len());
    // Nothing was lost: the words shown are the words of the whole rendering.
    let shown = |html: &str| {
        let mut text = String::new();
        let mut in_tag = false;
        for character in html.chars() {
            match character {
                '<' => in_tag = true,
                '>' if in_tag => {
                    in_tag = false;
                    text.push(' ');
                }
                _ if !in_tag => text.push(character),
                _ => {}
            }
        }
        text.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(shown(&parts.join("\n\n")), shown(&rendered));
}

#[tokio::test]
async fn text_from_the_model_is_escaped_and_telegram_accepts_it() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let channel = opened(&config(&server, &[], false), TOKEN);
    let transport = channel.transport.clone();
    let rendered =
        transport.render("<script>alert('x')</script> & **Tom & Jerry** <b>not a tag</b>");
    assert_eq!(
        rendered,
        "&lt;script&gt;alert('x')&lt;/script&gt; &amp; <b>Tom &amp; Jerry</b> &lt;b&gt;not a tag&lt;/b&gt;"
    );
    transport
        .send(&identity(&ivan()), &rendered, &ReplyContext::default(), 0)
        .await
        .unwrap();
    // Unescaped text is what Telegram refuses: the server checks like Telegram does.
    assert_eq!(
        transport
            .send(&identity(&ivan()), "<script>x</script>", &ReplyContext::default(), 0)
            .await,
        Err(SendError::Permanent {
            reason: "telegram: Bad Request: can't parse entities: unsupported start tag \"script\" (HTTP 400)".to_string()
        })
    );
    assert_eq!(server.sent().len(), 1);
}

#[tokio::test]
async fn the_poller_stops_promptly_in_the_middle_of_a_long_poll() {
    let server = ScriptedTelegram::start(TOKEN).await.unwrap();
    let sink = SqliteSink::new(vec![]);
    let mut polling = Polling::start(&server, &[], sink.clone());
    assert!(
        server
            .wait_for_requests(WAIT, |requests| requests
                .iter()
                .any(|request| request.method == "getUpdates"))
            .await
    );
    // The long poll is waiting for updates (up to 30 s); stopping does not wait for it.
    polling.stop().await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever mix of Markdown the model writes, every part of a long rendering is
    /// within the limit and is HTML Telegram parses.
    #[test]
    fn every_part_of_any_long_rendering_is_well_formed(
        fragments in proptest::collection::vec(
            proptest::sample::select(vec![
                "**", "*", "_", "__", "~~", "`", "```", "```python\n", "\n", "\n\n", " ",
                "[a](https://x.example/?q=1&r=2)", "[", "](", ")", "<", ">", "&", "&amp;",
                "# ", "* ", "- ", "😀", "č", "word", "longerword", "x_y", "2*3", "\"",
            ]),
            2_000..4_000,
        ),
    ) {
        let markdown: String = fragments.concat();
        let rendered = saint_channels::telegram::markdown_to_telegram_html(&markdown);
        for part in split_message(&rendered, saint_channels::telegram::MAX_TEXT_CHARS) {
            proptest::prop_assert!(part.chars().count() <= 4_096);
            if let Err(problem) = check_html(&part) {
                proptest::prop_assert!(false, "{problem}\n{part}");
            }
        }
    }
}
