//! The Slack channel against a scripted Slack on loopback: Socket Mode (acknowledged
//! only after the inbox commit, redelivery after a drop or a failed commit, refreshes),
//! the signed Events API webhook, and the Web API transport (threads, direct messages,
//! rate limits, mrkdwn, long answers).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use pretty_assertions::assert_eq;
use saint_channels::{
    AttachmentRef, ChannelState, InboundMessage, InboxError, InboxSink, OpenedChannel,
    ReplyContext, SendError, WebhookRefusal, format::split_message, slack,
};
use saint_config::{ChannelConfig, ChannelIdentity, ChannelKind};
use saint_scripted::slack::{
    self as scripted, BOT_USER_ID, Failure, ScriptedSlack, app_mention_event, message_event,
};
use serde_json::json;
use tokio::sync::{Notify, watch};

const BOT_TOKEN: &str = "xoxb-1111-2222-scripted";
const APP_TOKEN: &str = "xapp-1-A0SAINT-3333-scripted";
const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const IVAN: &str = "U024BK3";
const WAIT: Duration = Duration::from_secs(15);

/// The inbox as the agent's is: unique platform ids, one transaction per commit.
#[derive(Default)]
struct Inbox {
    server: Mutex<Option<Arc<ScriptedSlack>>>,
    stored: Mutex<Vec<InboundMessage>>,
    /// Per commit: (envelope id, whether Slack already had its acknowledgement).
    commits: Mutex<Vec<(String, bool)>>,
    failing: AtomicBool,
    /// When set, commits wait for `release`.
    gated: AtomicBool,
    release: Notify,
    entered: Notify,
    states: Mutex<Vec<ChannelState>>,
    contacts: Vec<String>,
    changed: watch::Sender<u64>,
}

impl Inbox {
    fn stored(&self) -> Vec<InboundMessage> {
        self.stored.lock().unwrap().clone()
    }

    fn states(&self) -> Vec<ChannelState> {
        self.states.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut changes = self.changed.subscribe();
        loop {
            changes.mark_unchanged();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                assert!(
                    done(self),
                    "timed out waiting for {what}; inbox: {:#?}, states: {:?}",
                    self.stored(),
                    self.states()
                );
                return;
            }
        }
    }
}

impl InboxSink for Inbox {
    fn cursor<'a>(
        &'a self,
        _channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, InboxError>> {
        Box::pin(async { Ok(None) })
    }

    fn commit<'a>(
        &'a self,
        _channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        Box::pin(async move {
            if self.gated.load(Ordering::SeqCst) {
                self.entered.notify_one();
                self.release.notified().await;
            }
            let acked = self
                .server
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|server| server.acked(&cursor));
            self.commits.lock().unwrap().push((cursor, acked));
            let result = if self.failing.load(Ordering::SeqCst) {
                Err(InboxError::storage("database is locked"))
            } else {
                let mut stored = self.stored.lock().unwrap();
                for (message, ignored) in messages {
                    assert_eq!(ignored, None, "skipped messages are not stored");
                    if !stored
                        .iter()
                        .any(|known| known.platform_id == message.platform_id)
                    {
                        stored.push(message);
                    }
                }
                Ok(())
            };
            self.changed.send_modify(|version| *version += 1);
            result
        })
    }

    fn report(&self, _channel: &str, state: ChannelState) {
        self.states.lock().unwrap().push(state);
        self.changed.send_modify(|version| *version += 1);
    }

    fn is_contact(&self, identity: &ChannelIdentity) -> bool {
        self.contacts.iter().any(|contact| identity == contact)
    }
}

fn channel_config(settings: &[(&str, &str)], secrets: &[&str]) -> ChannelConfig {
    ChannelConfig {
        name: "acme-slack".to_string(),
        kind: ChannelKind::Slack,
        settings: settings
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        secret_env: secrets
            .iter()
            .map(|key| (key.to_string(), format!("SLACK_{}", key.to_uppercase())))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn lookup(variable: &str) -> Option<String> {
    match variable {
        "SLACK_BOTTOKEN" => Some(BOT_TOKEN.to_string()),
        "SLACK_APPTOKEN" => Some(APP_TOKEN.to_string()),
        "SLACK_SIGNINGSECRET" => Some(SIGNING_SECRET.to_string()),
        _ => None,
    }
}

fn open(server: &ScriptedSlack, settings: &[(&str, &str)], secrets: &[&str]) -> OpenedChannel {
    let api = server.api_url();
    let mut all = vec![("apiBaseUrl", api.as_str())];
    all.extend_from_slice(settings);
    slack::open(&channel_config(&all, secrets), &lookup).expect("complete settings")
}

/// A Socket Mode channel running against the scripted Slack.
struct Running {
    server: Arc<ScriptedSlack>,
    inbox: Arc<Inbox>,
    opened: OpenedChannel,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(inbox: Inbox, settings: &[(&str, &str)]) -> Self {
        let server = Arc::new(ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap());
        let inbox = Arc::new(inbox);
        *inbox.server.lock().unwrap() = Some(server.clone());
        let opened = open(&server, settings, &["botToken", "appToken"]);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(
            opened
                .connection
                .clone()
                .expect("socket mode connects out")
                .run(inbox.clone(), stopped),
        );
        Self {
            server,
            inbox,
            opened,
            stop,
            task,
        }
    }

    async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the connection stops promptly")
            .unwrap();
    }
}

fn dm(ts: &str, text: &str) -> serde_json::Value {
    message_event("D0IVAN", "im", IVAN, ts, text)
}

#[tokio::test]
async fn a_duplicate_envelope_and_a_message_with_its_app_mention_are_stored_once_each_after_commit()
{
    let running = Running::start(Inbox::default(), &[]).await;
    let server = &running.server;
    let first = server.push_event(dm("1700000001.000100", "hello there"));
    let again = server.push_event(dm("1700000001.000100", "hello there"));
    let mention = format!("<@{BOT_USER_ID}> what's the plan &amp; who owns it?");
    let as_message = server.push_event(message_event(
        "C0ACME",
        "channel",
        IVAN,
        "1700000002.000200",
        &mention,
    ));
    let as_mention = server.push_event(app_mention_event(
        "C0ACME",
        IVAN,
        "1700000002.000200",
        &mention,
    ));
    for id in [&first, &again, &as_message, &as_mention] {
        assert!(server.wait_for_ack(id, WAIT).await, "{id} acknowledged");
    }
    let stored = running.inbox.stored();
    assert_eq!(stored.len(), 2, "{stored:#?}");
    // Every acknowledgement followed its commit.
    let commits = running.inbox.commits.lock().unwrap().clone();
    assert_eq!(commits.len(), 4);
    assert!(
        commits.iter().all(|(_, acked_before)| !acked_before),
        "{commits:?}"
    );

    let direct = &stored[0];
    assert_eq!(direct.platform_id, "D0IVAN:1700000001.000100");
    assert_eq!(direct.sender.as_str(), "slack:U024BK3");
    assert!(direct.sender_verified);
    assert_eq!(direct.text, "hello there");
    assert_eq!(direct.conversation, None);
    assert_eq!(direct.context.chat.as_deref(), Some("D0IVAN"));
    assert_eq!(direct.context.thread, None);

    let group = &stored[1];
    assert_eq!(group.platform_id, "C0ACME:1700000002.000200");
    assert_eq!(group.text, "what's the plan & who owns it?");
    assert_eq!(
        group
            .conversation
            .as_ref()
            .map(|conversation| conversation.id.as_str()),
        Some("C0ACME/1700000002.000200")
    );
    assert_eq!(group.context.chat.as_deref(), Some("C0ACME"));
    assert_eq!(group.context.thread.as_deref(), Some("1700000002.000200"));
    assert!(running.inbox.states().contains(&ChannelState::Up));
    // auth.test with the bot token, then apps.connections.open with the app token.
    let requests = server.requests();
    assert_eq!(requests[0].method, "auth.test");
    assert_eq!(requests[0].bearer.as_deref(), Some(BOT_TOKEN));
    assert_eq!(requests[1].method, "apps.connections.open");
    assert_eq!(requests[1].bearer.as_deref(), Some(APP_TOKEN));
    running.stop().await;
}

#[tokio::test]
async fn unaddressed_channel_messages_bots_and_edits_are_acknowledged_but_not_stored() {
    let inbox = Inbox {
        contacts: vec![format!("slack:{IVAN}")],
        ..Inbox::default()
    };
    let running = Running::start(inbox, &[("groupPolicy", "contacts")]).await;
    let server = &running.server;
    let mut bot_message =
        message_event("C0ACME", "channel", "U0OTHER", "1700000003.000100", "beep");
    bot_message["bot_id"] = json!("B0OTHER");
    let mut edit = dm("1700000003.000200", "edited");
    edit["subtype"] = json!("message_changed");
    let ids = [
        server.push_event(message_event(
            "C0ACME",
            "channel",
            IVAN,
            "1700000003.000300",
            "lunch?",
        )),
        server.push_event(bot_message),
        server.push_event(edit),
        // A stranger mentions the bot where only contacts are answered.
        server.push_event(app_mention_event(
            "C0ACME",
            "U0STRANGER",
            "1700000003.000400",
            &format!("<@{BOT_USER_ID}> hi"),
        )),
        server.push_payload("slash_commands", json!({"command": "/saint", "text": "x"})),
        // Ivan, a contact, replies in a thread the bot started: addressed.
        server.push_event({
            let mut reply = message_event(
                "C0ACME",
                "channel",
                IVAN,
                "1700000003.000600",
                "and Friday?",
            );
            reply["thread_ts"] = json!("1700000003.000500");
            reply["parent_user_id"] = json!(BOT_USER_ID);
            reply
        }),
    ];
    for id in &ids {
        assert!(server.wait_for_ack(id, WAIT).await, "{id} acknowledged");
    }
    let stored = running.inbox.stored();
    assert_eq!(
        stored
            .iter()
            .map(|message| message.platform_id.as_str())
            .collect::<Vec<_>>(),
        vec!["C0ACME:1700000003.000600"]
    );
    assert_eq!(
        stored[0].context.thread.as_deref(),
        Some("1700000003.000500")
    );
    assert_eq!(
        stored[0].conversation.as_ref().unwrap().id,
        "C0ACME/1700000003.000500"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_dropped_socket_is_reconnected_and_the_unacknowledged_envelope_comes_again_stored_once() {
    let inbox = Inbox::default();
    inbox.gated.store(true, Ordering::SeqCst);
    let running = Running::start(inbox, &[]).await;
    let server = &running.server;
    let id = server.push_event(dm("1700000004.000100", "are you there?"));
    // The message is being committed when the network fails.
    tokio::time::timeout(WAIT, running.inbox.entered.notified())
        .await
        .expect("the commit began");
    server.drop_sockets();
    running.inbox.gated.store(false, Ordering::SeqCst);
    running.inbox.release.notify_one();
    assert!(server.wait_for_connections(2, WAIT).await, "reconnected");
    assert!(
        server.wait_for_ack(&id, WAIT).await,
        "acknowledged on the new socket"
    );
    assert_eq!(server.deliveries(&id), 2, "delivered again after the drop");
    let stored = running.inbox.stored();
    assert_eq!(stored.len(), 1, "{stored:#?}");
    assert_eq!(stored[0].text, "are you there?");
    assert!(
        running
            .inbox
            .states()
            .iter()
            .any(|state| matches!(state, ChannelState::Retrying(_))),
        "the drop was reported"
    );
    running.stop().await;
}

#[tokio::test]
async fn a_failed_commit_is_not_acknowledged_so_slack_delivers_it_again() {
    let inbox = Inbox::default();
    inbox.failing.store(true, Ordering::SeqCst);
    let running = Running::start(inbox, &[]).await;
    let server = &running.server;
    let id = server.push_event(dm("1700000005.000100", "remember this"));
    running
        .inbox
        .wait_for("a refused commit", |inbox| {
            !inbox.commits.lock().unwrap().is_empty()
                && inbox
                    .states()
                    .iter()
                    .any(|state| matches!(state, ChannelState::Retrying(reason) if reason.contains("database is locked")))
        })
        .await;
    assert!(!server.acked(&id), "nothing stored, nothing acknowledged");
    running.inbox.failing.store(false, Ordering::SeqCst);
    assert!(server.wait_for_ack(&id, WAIT).await);
    assert!(server.deliveries(&id) >= 2);
    assert_eq!(
        server.acks(),
        vec![id.clone()],
        "acknowledged once, after the stored commit"
    );
    assert_eq!(running.inbox.stored().len(), 1);
    running.stop().await;
}

#[tokio::test]
async fn a_disconnect_opens_a_new_connection_and_messages_keep_coming() {
    let running = Running::start(Inbox::default(), &[]).await;
    let server = &running.server;
    assert!(server.wait_for_connections(1, WAIT).await);
    server.disconnect("refresh_requested");
    assert!(
        server.wait_for_connections(2, WAIT).await,
        "a new connection"
    );
    let id = server.push_event(dm("1700000006.000100", "after the refresh"));
    assert!(server.wait_for_ack(&id, WAIT).await);
    assert_eq!(server.deliveries(&id), 1);
    let opens = server
        .requests()
        .iter()
        .filter(|request| request.method == "apps.connections.open")
        .count();
    assert_eq!(opens, 2, "each connection asks for a new URL");
    assert_eq!(running.inbox.stored().len(), 1);
    running.stop().await;
}

#[tokio::test]
async fn a_refused_bot_token_is_reported_as_refused_credentials() {
    let server = ScriptedSlack::start("xoxb-the-right-one", APP_TOKEN)
        .await
        .unwrap();
    let inbox = Arc::new(Inbox::default());
    let opened = open(&server, &[], &["botToken", "appToken"]);
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(opened.connection.unwrap().run(inbox.clone(), stopped));
    inbox
        .wait_for("refused credentials", |inbox| {
            inbox.states().iter().any(|state| {
                matches!(state, ChannelState::CredentialsRefused(reason) if reason.contains("invalid_auth"))
            })
        })
        .await;
    assert_eq!(server.connections(), 0);
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
}

fn events_webhook(server: &ScriptedSlack) -> Arc<dyn saint_channels::Webhook> {
    open(
        server,
        &[("mode", "events")],
        &["botToken", "signingSecret"],
    )
    .webhook
    .expect("events mode takes webhooks")
}

#[tokio::test]
async fn events_api_requests_count_only_when_signed_recently() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let webhook = events_webhook(&server);
    let body =
        serde_json::to_vec(&scripted::event_callback(dm("1700000007.000100", "signed"))).unwrap();
    let now = jiff::Timestamp::now().as_second();

    let delivery = webhook
        .receive(
            &scripted::signed_headers(SIGNING_SECRET, now, &body),
            &body,
            &|_| false,
        )
        .expect("a signed request");
    assert_eq!(delivery.messages.len(), 1);
    assert_eq!(delivery.messages[0].platform_id, "D0IVAN:1700000007.000100");
    assert_eq!(delivery.response, None);

    let unauthorized =
        |headers: http::HeaderMap, body: &[u8]| match webhook.receive(&headers, body, &|_| false) {
            Err(WebhookRefusal::Unauthorized(reason)) => reason,
            other => panic!("expected Unauthorized, got {other:?}"),
        };
    let wrong_secret = scripted::signed_headers("another-secret", now, &body);
    assert!(unauthorized(wrong_secret, &body).contains("does not match"));
    let stale = scripted::signed_headers(SIGNING_SECRET, now - 6 * 60, &body);
    assert!(unauthorized(stale, &body).contains("stale"));
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    assert!(
        unauthorized(
            scripted::signed_headers(SIGNING_SECRET, now, &body),
            &tampered
        )
        .contains("does not match")
    );
    let mut unsigned = scripted::signed_headers(SIGNING_SECRET, now, &body);
    unsigned.remove("x-slack-signature");
    assert!(unauthorized(unsigned, &body).contains("X-Slack-Signature"));
    let mut undated = scripted::signed_headers(SIGNING_SECRET, now, &body);
    undated.remove("x-slack-request-timestamp");
    assert!(unauthorized(undated, &body).contains("X-Slack-Request-Timestamp"));
}

#[tokio::test]
async fn url_verification_is_answered_with_its_challenge() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let webhook = events_webhook(&server);
    let body = serde_json::to_vec(&json!({
        "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
        "type": "url_verification",
    }))
    .unwrap();
    let now = jiff::Timestamp::now().as_second();
    let delivery = webhook
        .receive(
            &scripted::signed_headers(SIGNING_SECRET, now, &body),
            &body,
            &|_| false,
        )
        .unwrap();
    assert!(delivery.messages.is_empty());
    assert_eq!(
        delivery.response,
        Some((
            "text/plain",
            "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".to_string()
        ))
    );
}

fn ivan() -> ChannelIdentity {
    ChannelIdentity::parse(ChannelKind::Slack, IVAN).unwrap()
}

#[tokio::test]
async fn replies_go_in_their_thread_and_a_new_message_opens_the_direct_channel() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let transport = open(&server, &[], &["botToken", "appToken"]).transport;
    let in_thread = ReplyContext {
        reply_to: Some("C0ACME:1700000008.000100".to_string()),
        chat: Some("C0ACME".to_string()),
        thread: Some("1700000008.000100".to_string()),
        ..Default::default()
    };
    let id = transport
        .send(&ivan(), "On it.", &in_thread, 0)
        .await
        .unwrap();
    assert_eq!(id, "C0ACME:1700009000.000001");
    // Proactive: an empty context reaches the person in their direct channel.
    transport
        .send(&ivan(), "Reminder", &ReplyContext::default(), 0)
        .await
        .unwrap();
    transport
        .send(&ivan(), "Again", &ReplyContext::default(), 0)
        .await
        .unwrap();
    assert!(server.wait_for_posted(3, WAIT).await);
    let posted = server.posted();
    assert_eq!(posted[0].channel, "C0ACME");
    assert_eq!(posted[0].thread_ts.as_deref(), Some("1700000008.000100"));
    assert_eq!(posted[1].channel, "D024BK3");
    assert_eq!(posted[1].thread_ts, None);
    assert_eq!(posted[2].channel, "D024BK3");
    let requests = server.requests();
    let opens: Vec<_> = requests
        .iter()
        .filter(|request| request.method == "conversations.open")
        .collect();
    assert_eq!(opens.len(), 1, "the direct channel is remembered");
    assert_eq!(opens[0].body["users"], IVAN);
    let post = requests
        .iter()
        .find(|request| request.method == "chat.postMessage")
        .unwrap();
    assert_eq!(post.bearer.as_deref(), Some(BOT_TOKEN));
    assert_eq!(
        post.content_type.as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(post.body["text"], "On it.");
}

#[tokio::test]
async fn rate_limits_are_retried_after_slacks_wait_and_refusals_classified() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let transport = open(&server, &[], &["botToken", "appToken"]).transport;
    let context = ReplyContext {
        chat: Some("C0ACME".to_string()),
        ..Default::default()
    };
    server.fail_next(
        "chat.postMessage",
        [
            Failure::rate_limited(7),
            Failure::error("ratelimited"),
            Failure::server_error(),
            Failure::error("token_revoked"),
            Failure::error("channel_not_found"),
            Failure::error("not_in_channel"),
            Failure::error("msg_too_long"),
        ],
    );
    let to = ivan();
    let send = || transport.send(&to, "hi", &context, 0);
    assert_eq!(
        send().await,
        Err(SendError::Retry {
            reason: "slack: chat.postMessage rate limited (HTTP 429)".to_string(),
            after: Some(Duration::from_secs(7)),
        })
    );
    assert!(matches!(send().await, Err(SendError::Retry { .. })));
    assert!(matches!(send().await, Err(SendError::Retry { .. })));
    assert!(
        matches!(send().await, Err(SendError::Credentials { reason }) if reason.contains("token_revoked"))
    );
    for code in ["channel_not_found", "not_in_channel", "msg_too_long"] {
        assert!(
            matches!(send().await, Err(SendError::Permanent { reason }) if reason.contains(code))
        );
    }
    assert!(send().await.is_ok(), "sent once Slack takes it");
    assert_eq!(server.posted().len(), 1);
    // Unreachable: retried.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let unreachable = slack::open(
        &channel_config(
            &[("apiBaseUrl", &format!("http://{closed}/api"))],
            &["botToken", "appToken"],
        ),
        &lookup,
    )
    .unwrap()
    .transport;
    assert!(matches!(
        unreachable.send(&ivan(), "hi", &context, 0).await,
        Err(SendError::Retry { .. })
    ));
}

#[tokio::test]
async fn a_ten_thousand_character_answer_is_sent_in_whole_mrkdwn_parts() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let transport = open(&server, &[], &["botToken", "appToken"]).transport;
    let lines = |section: usize| if section == 1 { 160 } else { 40 };
    let mut answer = String::from("## Report\n\nHere is **everything** you asked for.\n\n");
    let mut section = 0;
    while answer.chars().count() < 10_000 {
        section += 1;
        answer.push_str(&format!(
            "Section {section}: *notes* on a < b & c > d, see [the doc](https://acme.example/{section}).\n\n"
        ));
        answer.push_str("```python\n");
        // The first block alone is longer than a part.
        for line in 0..lines(section) {
            answer.push_str(&format!("value_{section}_{line} = compute({line}) * 2\n"));
            if line % 13 == 0 {
                answer.push('\n');
            }
        }
        answer.push_str("```\n\n");
    }
    assert!(answer.chars().count() >= 10_000);
    let parts = split_message(&transport.render(&answer), transport.max_chars());
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for (index, part) in parts.iter().enumerate() {
        assert!(part.chars().count() <= 4_000);
        assert_eq!(
            part.matches("```").count() % 2,
            0,
            "part {index} leaves a code block open:\n{part}"
        );
        for block in part.split("\n\n") {
            if block.contains("```") {
                assert!(
                    block.starts_with("```\n") && block.ends_with("\n```"),
                    "{block}"
                );
            }
        }
        let context = ReplyContext {
            chat: Some("C0ACME".to_string()),
            thread: Some("1700000009.000100".to_string()),
            ..Default::default()
        };
        transport
            .send(&ivan(), part, &context, index)
            .await
            .unwrap();
    }
    assert!(server.wait_for_posted(parts.len(), WAIT).await);
    let posted: String = server
        .posted()
        .iter()
        .map(|posted| posted.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    // Every code line arrived, inside a code block, escaped once.
    for section in 1..=section {
        for line in 0..lines(section) {
            assert!(posted.contains(&format!("value_{section}_{line} = compute({line}) * 2")));
        }
        assert!(posted.contains(&format!("<https://acme.example/{section}|the doc>")));
    }
    assert!(posted.starts_with("*Report*\n\nHere is *everything* you asked for."));
    assert!(posted.contains("_notes_ on a &lt; b &amp; c &gt; d"));
    assert!(
        !posted.contains("python"),
        "the language tag is not shown as code"
    );
}

#[tokio::test]
async fn render_escapes_what_slack_would_read_as_markup() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let transport = open(&server, &[], &["botToken", "appToken"]).transport;
    assert_eq!(
        transport.render(
            "**Alert** <!channel> & <@U024BK3>: _see_ [x](https://a.example/?q=1&r=2) `a<b`"
        ),
        "*Alert* &lt;!channel&gt; &amp; &lt;@U024BK3&gt;: _see_ <https://a.example/?q=1&amp;r=2|x> `a&lt;b`"
    );
    assert_eq!(transport.max_chars(), 4_000);
    assert_eq!(transport.kind(), ChannelKind::Slack);
}

#[tokio::test]
async fn files_are_fetched_with_the_bot_token_within_the_size_limit() {
    let running = Running::start(Inbox::default(), &[]).await;
    let server = &running.server;
    let file = server.add_file("plan.pdf", "application/pdf", vec![7u8; 3_000]);
    let mut event = dm("1700000010.000100", "see attached");
    event["subtype"] = json!("file_share");
    event["files"] = json!([file]);
    let id = server.push_event(event);
    assert!(server.wait_for_ack(&id, WAIT).await);
    let stored = running.inbox.stored();
    let attachment = &stored[0].attachments[0];
    assert_eq!(attachment.kind, "document");
    assert_eq!(attachment.mime_type, "application/pdf");
    assert_eq!(attachment.file_name.as_deref(), Some("plan.pdf"));
    let transport = &running.opened.transport;
    assert_eq!(
        transport
            .fetch_attachment(attachment, 10_000)
            .await
            .unwrap(),
        vec![7u8; 3_000]
    );
    let download = server
        .requests()
        .into_iter()
        .find(|request| request.method.starts_with("GET /files/"))
        .unwrap();
    assert_eq!(download.bearer.as_deref(), Some(BOT_TOKEN));
    assert!(matches!(
        transport.fetch_attachment(attachment, 2_999).await,
        Err(SendError::Permanent { reason }) if reason.contains("over the 2999-byte limit")
    ));
    // The bot token never goes to a host that is not Slack's.
    let elsewhere = AttachmentRef {
        id: "https://attacker.example/files/F1/download/x".to_string(),
        ..attachment.clone()
    };
    assert!(matches!(
        transport.fetch_attachment(&elsewhere, 10_000).await,
        Err(SendError::Permanent { .. })
    ));
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|request| request.method.starts_with("GET "))
            .count(),
        2
    );
    running.stop().await;
}

#[tokio::test]
async fn a_contacts_only_channel_in_events_mode_answers_contacts_and_skips_strangers() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    let webhook = open(
        &server,
        &[("mode", "events"), ("groupPolicy", "contacts")],
        &["botToken", "signingSecret"],
    )
    .webhook
    .expect("events mode takes webhooks");
    let ivan = ChannelIdentity::parse(ChannelKind::Slack, IVAN).unwrap();
    let is_contact = |identity: &ChannelIdentity| *identity == ivan;
    let now = jiff::Timestamp::now().as_second();
    let mention = |user: &str, ts: &str| {
        serde_json::to_vec(&scripted::event_callback(app_mention_event(
            "C0GENERAL",
            user,
            ts,
            &format!("<@{BOT_USER_ID}> status?"),
        )))
        .unwrap()
    };

    let from_contact = mention(IVAN, "1700000100.000100");
    let delivery = webhook
        .receive(
            &scripted::signed_headers(SIGNING_SECRET, now, &from_contact),
            &from_contact,
            &is_contact,
        )
        .unwrap();
    assert_eq!(delivery.messages.len(), 1, "{:?}", delivery.skipped);
    assert_eq!(delivery.messages[0].sender, ivan);

    let from_stranger = mention("U0STRANGER", "1700000101.000100");
    let delivery = webhook
        .receive(
            &scripted::signed_headers(SIGNING_SECRET, now, &from_stranger),
            &from_stranger,
            &is_contact,
        )
        .unwrap();
    assert!(delivery.messages.is_empty());
    assert!(
        delivery
            .skipped
            .iter()
            .any(|reason| reason.contains("not a contact")),
        "{:?}",
        delivery.skipped
    );
}

#[tokio::test]
async fn a_rate_limited_connections_open_is_retried_after_slacks_retry_after() {
    let server = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
    server.fail_next("apps.connections.open", [Failure::rate_limited(3)]);
    let inbox = Arc::new(Inbox::default());
    let opened = open(&server, &[], &["botToken", "appToken"]);
    let (stop, stopped) = watch::channel(false);
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(opened.connection.unwrap().run(inbox.clone(), stopped));
    while server.connections() == 0 {
        assert!(
            started.elapsed() < WAIT,
            "no connection after the rate limit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(3),
        "connected after {waited:?}, before Slack's Retry-After of 3 s"
    );
    let opens = server
        .requests()
        .iter()
        .filter(|request| request.method == "apps.connections.open")
        .count();
    assert_eq!(opens, 2);
    stop.send(true).unwrap();
    tokio::time::timeout(WAIT, task)
        .await
        .expect("the connection stops promptly")
        .unwrap();
}
