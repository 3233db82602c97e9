//! The Discord channel against the scripted Discord: the Gateway connection (identify,
//! heartbeats, resume after drops, reconnect requests, invalid sessions, refusals) feeding
//! an in-memory inbox, and the REST transport (rate limits, splitting, mentions).

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use pretty_assertions::assert_eq;
use saint_channels::{
    ChannelState, Connection, InboundMessage, InboxError, InboxSink, ReplyContext, SendError,
    Transport,
    discord::{self, GatewayCursor},
    format::split_message,
};
use saint_config::{ChannelConfig, ChannelIdentity, ChannelKind};
use saint_scripted::discord::{
    BOT_USER_ID, Failure, ScriptedDiscord, direct_message, guild_message,
};
use serde_json::json;
use tokio::sync::{Notify, watch};

const TOKEN: &str = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.G1a2b3.test-bot-token";
const ANA: &str = "80351110224678912";
const IVAN: &str = "80351110224678913";
const DM_CHANNEL: &str = "1200000000000000001";
const GUILD: &str = "1000000000000000001";
const GENERAL: &str = "1000000000000000002";
const WAIT: Duration = Duration::from_secs(10);

/// The inbox as the agent keeps it, in memory: commits in order, the saved position,
/// every reported state.
#[derive(Default)]
struct MemorySink {
    state: Mutex<SinkState>,
    changed: Notify,
    contacts: Vec<ChannelIdentity>,
    /// Commits refused before they succeed again (a busy or failing disk).
    failing_commits: AtomicUsize,
}

#[derive(Default)]
struct SinkState {
    cursor: Option<String>,
    commits: Vec<(Vec<InboundMessage>, String)>,
    reports: Vec<ChannelState>,
}

impl MemorySink {
    fn stored(&self) -> Vec<InboundMessage> {
        let state = self.state.lock().unwrap();
        state
            .commits
            .iter()
            .flat_map(|(messages, _)| messages.clone())
            .collect()
    }

    fn stored_ids(&self) -> Vec<String> {
        self.stored()
            .into_iter()
            .map(|message| message.platform_id)
            .collect()
    }

    fn cursor(&self) -> Option<GatewayCursor> {
        let state = self.state.lock().unwrap();
        serde_json::from_str(state.cursor.as_deref()?).ok()
    }

    fn reports(&self) -> Vec<ChannelState> {
        self.state.lock().unwrap().reports.clone()
    }

    async fn wait_until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let notified = self.changed.notified();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                assert!(
                    done(self),
                    "timed out waiting for {what}; stored {:?}, reports {:?}",
                    self.stored_ids(),
                    self.reports()
                );
                return;
            }
        }
    }
}

impl InboxSink for MemorySink {
    fn cursor<'a>(
        &'a self,
        _channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, InboxError>> {
        Box::pin(async move { Ok(self.state.lock().unwrap().cursor.clone()) })
    }

    fn commit<'a>(
        &'a self,
        channel: &'a str,
        messages: Vec<(InboundMessage, Option<String>)>,
        cursor: String,
    ) -> BoxFuture<'a, Result<(), InboxError>> {
        Box::pin(async move {
            assert_eq!(channel, "discord");
            if self
                .failing_commits
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                    left.checked_sub(1)
                })
                .is_ok()
            {
                return Err(InboxError::storage("database is locked"));
            }
            let mut state = self.state.lock().unwrap();
            state.cursor = Some(cursor.clone());
            state.commits.push((
                messages.into_iter().map(|(message, _)| message).collect(),
                cursor,
            ));
            drop(state);
            self.changed.notify_waiters();
            Ok(())
        })
    }

    fn report(&self, channel: &str, state: ChannelState) {
        assert_eq!(channel, "discord");
        self.state.lock().unwrap().reports.push(state);
        self.changed.notify_waiters();
    }

    fn is_contact(&self, identity: &ChannelIdentity) -> bool {
        self.contacts.contains(identity)
    }
}

fn channel_config(discord: &ScriptedDiscord, settings: &[(&str, &str)]) -> ChannelConfig {
    let mut all: BTreeMap<String, String> =
        BTreeMap::from([("apiBaseUrl".to_string(), discord.api_base_url())]);
    for (key, value) in settings {
        all.insert(key.to_string(), value.to_string());
    }
    ChannelConfig {
        name: "discord".to_string(),
        kind: ChannelKind::Discord,
        settings: all,
        secret_env: BTreeMap::from([("botToken".to_string(), "DISCORD_BOT_TOKEN".to_string())]),
    }
}

fn lookup(name: &str) -> Option<String> {
    (name == "DISCORD_BOT_TOKEN").then(|| TOKEN.to_string())
}

/// The scripted Discord and one running connection into a memory inbox.
struct Harness {
    discord: ScriptedDiscord,
    sink: Arc<MemorySink>,
    transport: Arc<dyn Transport>,
    connection: Arc<dyn Connection>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Harness {
    async fn start() -> Self {
        Self::start_with(&[], Vec::new(), |_| {}).await
    }

    async fn start_with(
        settings: &[(&str, &str)],
        contacts: Vec<ChannelIdentity>,
        prepare: impl FnOnce(&ScriptedDiscord),
    ) -> Self {
        let discord = ScriptedDiscord::start(TOKEN, Duration::from_millis(300))
            .await
            .unwrap();
        prepare(&discord);
        let opened = discord::open(&channel_config(&discord, settings), &lookup).unwrap();
        let sink = Arc::new(MemorySink {
            contacts,
            ..MemorySink::default()
        });
        let (stop, _) = watch::channel(false);
        let mut harness = Self {
            discord,
            sink,
            transport: opened.transport,
            connection: opened.connection.expect("discord connects out"),
            stop,
            task: None,
        };
        harness.run();
        harness
    }

    fn run(&mut self) {
        self.stop.send_replace(false);
        self.task = Some(tokio::spawn(
            self.connection
                .clone()
                .run(self.sink.clone(), self.stop.subscribe()),
        ));
    }

    /// Stops the connection as the agent does at shutdown, and waits for it to end.
    async fn stop(&mut self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .expect("the connection stops promptly")
            .unwrap();
    }

    async fn ready(&self) {
        self.sink
            .wait_until("READY", |sink| sink.reports().contains(&ChannelState::Up))
            .await;
        assert!(
            self.discord
                .wait_until(WAIT, |discord| discord.connected())
                .await
        );
    }

    async fn stored(&self, id: &str) {
        self.sink
            .wait_until(&format!("message {id} stored"), |sink| {
                sink.stored_ids().iter().any(|stored| stored == id)
            })
            .await;
    }

    fn dm(&self, id: &str, text: &str) -> u64 {
        self.discord
            .dispatch_message(direct_message(id, DM_CHANNEL, ANA, text))
            .expect("a session to dispatch on")
    }
}

fn fences_balanced(part: &str) -> bool {
    part.lines()
        .filter(|line| line.trim_start().starts_with("```"))
        .count()
        % 2
        == 0
}

#[tokio::test]
async fn identify_then_ready_then_a_direct_message_is_stored_with_the_session_position() {
    let harness = Harness::start().await;
    harness.ready().await;
    let seq = harness.dm("1300000000000000101", "What is the plan?");
    harness.stored("1300000000000000101").await;
    let log = harness.discord.gateway_log();
    assert_eq!(log.connections, vec!["v=10&encoding=json".to_string()]);
    assert_eq!(log.identifies.len(), 1);
    let identify = &log.identifies[0];
    assert_eq!(identify["token"], TOKEN);
    assert_eq!(identify["intents"], (1 << 9) | (1 << 12) | (1 << 15));
    assert!(identify["properties"]["os"].is_string());
    let rest = harness.discord.requests();
    assert_eq!(rest[0].path, "/api/v10/gateway/bot");
    assert_eq!(
        rest[0].authorization.as_deref(),
        Some(format!("Bot {TOKEN}").as_str())
    );
    let message = &harness.sink.stored()[0];
    assert_eq!(message.kind, ChannelKind::Discord);
    assert_eq!(message.sender.as_str(), format!("discord:{ANA}"));
    assert!(message.sender_verified);
    assert_eq!(message.text, "What is the plan?");
    assert_eq!(message.conversation, None);
    assert_eq!(message.context.chat.as_deref(), Some(DM_CHANNEL));
    assert_eq!(message.context.reply_to, None);
    assert_eq!(
        message.display_name.as_deref(),
        Some(&*format!("user{ANA}"))
    );
    assert_eq!(
        harness.sink.cursor().unwrap(),
        GatewayCursor {
            session_id: "session-1".to_string(),
            seq,
            resume_url: resume_url(&harness),
            user_id: Some(BOT_USER_ID.to_string()),
        }
    );
}

fn resume_url(harness: &Harness) -> String {
    harness
        .discord
        .api_base_url()
        .replace("http://", "ws://")
        .replace("/api/v10", "/gateway")
}

#[tokio::test]
async fn heartbeats_follow_the_interval_and_a_missing_ack_resumes_the_session() {
    let harness = Harness::start().await;
    harness.ready().await;
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| discord.gateway_log().heartbeats.len() >= 4)
            .await
    );
    let beats = harness.discord.gateway_log().heartbeats;
    // Beats keep the announced cadence (300 ms): three intervals take about 900 ms.
    let three_intervals = beats[3].0 - beats[0].0;
    assert!(
        three_intervals >= Duration::from_millis(800)
            && three_intervals <= Duration::from_millis(1_300),
        "{three_intervals:?}"
    );
    // The beat carries the last sequence number (READY's 1).
    assert_eq!(beats[0].1, json!(1));
    let seq = harness.dm("1300000000000000102", "hi");
    harness.stored("1300000000000000102").await;
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| discord
                .gateway_log()
                .heartbeats
                .iter()
                .any(|(_, sent)| *sent == json!(seq)))
            .await
    );
    // No ACK: the next beat finds the last one unanswered, and the bot resumes.
    harness.discord.acknowledge_heartbeats(false);
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| !discord.gateway_log().resumes.is_empty())
            .await
    );
    harness.discord.acknowledge_heartbeats(true);
    let log = harness.discord.gateway_log();
    assert_eq!(log.resumes[0]["session_id"], "session-1");
    assert_eq!(log.resumes[0]["seq"], json!(seq));
    assert_eq!(log.identifies.len(), 1);
}

#[tokio::test]
async fn a_dropped_socket_is_resumed_and_what_was_said_meanwhile_arrives_once() {
    let harness = Harness::start().await;
    harness.ready().await;
    let first = harness.dm("1300000000000000201", "one");
    harness.stored("1300000000000000201").await;
    harness.discord.drop_connection();
    harness.dm("1300000000000000202", "two");
    harness.dm("1300000000000000203", "three");
    harness.stored("1300000000000000203").await;
    harness.dm("1300000000000000204", "four");
    harness.stored("1300000000000000204").await;
    assert_eq!(
        harness.sink.stored_ids(),
        vec![
            "1300000000000000201",
            "1300000000000000202",
            "1300000000000000203",
            "1300000000000000204"
        ]
    );
    let log = harness.discord.gateway_log();
    assert_eq!(log.identifies.len(), 1, "resumed, not identified again");
    assert_eq!(log.resumes.len(), 1);
    assert_eq!(log.resumes[0]["session_id"], "session-1");
    assert_eq!(log.resumes[0]["seq"], json!(first));
    assert_eq!(log.resumes[0]["token"], TOKEN);
}

#[tokio::test]
async fn reconnect_op_7_resumes_the_session() {
    let harness = Harness::start().await;
    harness.ready().await;
    harness.discord.send_reconnect();
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| discord.gateway_log().resumes.len() == 1
                && discord.connected())
            .await
    );
    harness.dm("1300000000000000301", "after the reconnect");
    harness.stored("1300000000000000301").await;
    let log = harness.discord.gateway_log();
    assert_eq!(log.connections.len(), 2);
    assert_eq!(log.identifies.len(), 1);
}

#[tokio::test]
async fn an_invalid_session_that_cannot_resume_identifies_afresh() {
    let harness = Harness::start().await;
    harness.ready().await;
    harness.discord.send_invalid_session(false);
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| discord.gateway_log().identifies.len() == 2
                && discord.connected())
            .await
    );
    assert!(harness.discord.gateway_log().resumes.is_empty());
    harness.dm("1300000000000000401", "new session");
    harness.stored("1300000000000000401").await;
    assert_eq!(harness.sink.cursor().unwrap().session_id, "session-2");
}

#[tokio::test]
async fn close_4014_reports_the_missing_intent_and_does_not_reconnect() {
    let harness = Harness::start_with(&[], Vec::new(), |discord| {
        discord.disable_message_content_intent()
    })
    .await;
    harness
        .sink
        .wait_until("the refusal", |sink| {
            sink.reports()
                .iter()
                .any(|state| matches!(state, ChannelState::CredentialsRefused(_)))
        })
        .await;
    let reason = harness
        .sink
        .reports()
        .into_iter()
        .find_map(|state| match state {
            ChannelState::CredentialsRefused(reason) => Some(reason),
            _ => None,
        })
        .unwrap();
    assert!(reason.contains("4014"), "{reason}");
    assert!(
        reason.contains("enable the Message Content intent") && reason.contains("Developer Portal"),
        "{reason}"
    );
    assert_eq!(harness.discord.gateway_log().closes_sent, vec![4014]);
    // No storm: nothing more within a few heartbeat intervals.
    assert!(
        !harness
            .discord
            .wait_until(Duration::from_secs(2), |discord| discord
                .gateway_log()
                .connections
                .len()
                > 1)
            .await
    );
}

#[tokio::test]
async fn close_4004_on_resume_reports_the_token_refused_and_does_not_reconnect() {
    let harness = Harness::start().await;
    harness.ready().await;
    // The token is reset in the portal; the next connection is refused.
    harness.discord.set_token("reset-token");
    harness.discord.close_with(4000);
    harness
        .sink
        .wait_until("the refusal", |sink| {
            sink.reports()
                .iter()
                .any(|state| matches!(state, ChannelState::CredentialsRefused(reason) if reason.contains("4004")))
        })
        .await;
    assert_eq!(harness.discord.gateway_log().closes_sent, vec![4000, 4004]);
    assert!(
        !harness
            .discord
            .wait_until(Duration::from_secs(2), |discord| discord
                .gateway_log()
                .connections
                .len()
                > 2)
            .await
    );
}

#[tokio::test]
async fn a_refused_token_on_gateway_bot_is_reported() {
    let harness = Harness::start_with(&[], Vec::new(), |discord| discord.set_token("other")).await;
    harness
        .sink
        .wait_until("the refusal", |sink| {
            sink.reports().iter().any(|state| {
                matches!(state, ChannelState::CredentialsRefused(reason)
                    if reason.contains("401: Unauthorized") && reason.contains("HTTP 401"))
            })
        })
        .await;
    assert!(harness.discord.gateway_log().connections.is_empty());
    assert!(
        !harness
            .discord
            .wait_until(Duration::from_secs(2), |discord| discord.requests().len()
                > 1)
            .await
    );
}

#[tokio::test]
async fn a_message_the_inbox_could_not_store_is_replayed_by_the_resume() {
    let harness = Harness::start().await;
    harness.ready().await;
    let stored = harness.dm("1300000000000001101", "stored");
    harness.stored("1300000000000001101").await;
    harness.sink.failing_commits.store(1, Ordering::SeqCst);
    harness.dm("1300000000000001102", "the inbox is busy");
    harness.stored("1300000000000001102").await;
    assert_eq!(
        harness.sink.stored_ids(),
        vec!["1300000000000001101", "1300000000000001102"]
    );
    // The position stayed at the last stored message, so the resume replayed the rest.
    let log = harness.discord.gateway_log();
    assert_eq!(log.resumes.len(), 1);
    assert_eq!(log.resumes[0]["seq"], json!(stored));
    assert_eq!(log.identifies.len(), 1);
}

#[tokio::test]
async fn a_duplicate_message_create_is_stored_once() {
    let harness = Harness::start().await;
    harness.ready().await;
    let message = direct_message("1300000000000000501", DM_CHANNEL, ANA, "once");
    harness.discord.dispatch_message(message.clone());
    harness.discord.dispatch_message(message);
    harness.dm("1300000000000000502", "after");
    harness.stored("1300000000000000502").await;
    assert_eq!(
        harness.sink.stored_ids(),
        vec!["1300000000000000501", "1300000000000000502"]
    );
}

#[tokio::test]
async fn guild_messages_are_stored_only_when_addressed_and_bots_are_ignored() {
    let harness = Harness::start().await;
    harness.ready().await;
    let dispatch = |message| harness.discord.dispatch_message(message).unwrap();
    dispatch(guild_message(
        "1300000000000000601",
        GUILD,
        GENERAL,
        ANA,
        "talking among ourselves",
        &[],
    ));
    let mut from_bot = guild_message(
        "1300000000000000602",
        GUILD,
        GENERAL,
        "1400000000000000001",
        &format!("<@{BOT_USER_ID}> hello fellow bot"),
        &[BOT_USER_ID],
    );
    from_bot["author"]["bot"] = json!(true);
    dispatch(from_bot);
    let mut own = direct_message(
        "1300000000000000603",
        DM_CHANNEL,
        BOT_USER_ID,
        "my own echo",
    );
    own["author"]["bot"] = json!(true);
    dispatch(own);
    dispatch(guild_message(
        "1300000000000000604",
        GUILD,
        GENERAL,
        ANA,
        &format!("<@{BOT_USER_ID}> what is the plan?"),
        &[BOT_USER_ID],
    ));
    dispatch(guild_message(
        "1300000000000000605",
        GUILD,
        GENERAL,
        IVAN,
        &format!("and for me <@!{BOT_USER_ID}>?"),
        &[],
    ));
    let mut reply = guild_message(
        "1300000000000000606",
        GUILD,
        GENERAL,
        IVAN,
        "thanks, and tomorrow?",
        &[],
    );
    reply["type"] = json!(19);
    reply["message_reference"] =
        json!({"message_id": "1300000000000000900", "channel_id": GENERAL});
    reply["referenced_message"] = json!({"id": "1300000000000000900",
        "author": {"id": BOT_USER_ID, "username": "acme-assistant", "bot": true}});
    dispatch(reply);
    harness.stored("1300000000000000606").await;
    assert_eq!(
        harness.sink.stored_ids(),
        vec![
            "1300000000000000604",
            "1300000000000000605",
            "1300000000000000606"
        ]
    );
    let stored = harness.sink.stored();
    assert_eq!(stored[0].text, "what is the plan?");
    assert_eq!(stored[1].text, "and for me ?");
    assert_eq!(stored[2].text, "thanks, and tomorrow?");
    for message in &stored {
        assert_eq!(message.conversation.as_ref().unwrap().id, GENERAL);
        assert_eq!(message.context.chat.as_deref(), Some(GENERAL));
        assert_eq!(
            message.context.reply_to.as_deref(),
            Some(message.platform_id.as_str())
        );
    }
    assert_eq!(stored[1].sender.as_str(), format!("discord:{IVAN}"));
}

#[tokio::test]
async fn a_contacts_only_channel_skips_strangers_in_guilds_but_not_in_dms() {
    let ana = ChannelIdentity::parse(ChannelKind::Discord, ANA).unwrap();
    let harness = Harness::start_with(
        &[("groupPolicy", "contacts"), ("requireMention", "false")],
        vec![ana],
        |_| {},
    )
    .await;
    harness.ready().await;
    let dispatch = |message| harness.discord.dispatch_message(message).unwrap();
    dispatch(guild_message(
        "1300000000000000701",
        GUILD,
        GENERAL,
        IVAN,
        "stranger",
        &[],
    ));
    dispatch(direct_message(
        "1300000000000000702",
        DM_CHANNEL,
        IVAN,
        "stranger in a DM",
    ));
    dispatch(guild_message(
        "1300000000000000703",
        GUILD,
        GENERAL,
        ANA,
        "no mention needed",
        &[],
    ));
    harness.stored("1300000000000000703").await;
    assert_eq!(
        harness.sink.stored_ids(),
        vec!["1300000000000000702", "1300000000000000703"]
    );
}

#[tokio::test]
async fn a_restart_resumes_from_the_committed_position_and_a_refused_resume_identifies() {
    let mut harness = Harness::start().await;
    harness.ready().await;
    harness.dm("1300000000000000801", "before the restart");
    harness.stored("1300000000000000801").await;
    harness.stop().await;
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| !discord.connected())
            .await
    );
    // Said while the bot was down: replayed by the resume.
    harness.dm("1300000000000000802", "while you were away");
    harness.run();
    harness.stored("1300000000000000802").await;
    let log = harness.discord.gateway_log();
    assert_eq!(log.identifies.len(), 1);
    assert_eq!(log.resumes.len(), 1);
    assert_eq!(log.resumes[0]["session_id"], "session-1");
    // The REST API was asked for the gateway only once: the resume went to READY's
    // resume address.
    assert_eq!(
        harness
            .discord
            .requests()
            .iter()
            .filter(|request| request.path.ends_with("/gateway/bot"))
            .count(),
        1
    );
    // Discord has forgotten the session: the bot identifies anew and carries on.
    harness.stop().await;
    harness.discord.refuse_resumes(true);
    harness.run();
    assert!(
        harness
            .discord
            .wait_until(WAIT, |discord| discord.gateway_log().identifies.len() == 2
                && discord.connected())
            .await
    );
    harness.dm("1300000000000000803", "new session");
    harness.stored("1300000000000000803").await;
    assert_eq!(harness.sink.cursor().unwrap().session_id, "session-2");
}

#[tokio::test]
async fn attachments_are_referenced_by_url_and_fetched_within_the_limit() {
    let harness = Harness::start().await;
    harness.ready().await;
    let mut message = direct_message("1300000000000000901", DM_CHANNEL, ANA, "the receipt");
    message["attachments"] = json!([{
        "id": "1500000000000000001", "filename": "receipt.png", "size": 5000,
        "url": harness.discord.cdn_url("receipt.png", 5000),
        "proxy_url": harness.discord.cdn_url("receipt.png", 5000),
        "content_type": "image/png",
    }]);
    harness.discord.dispatch_message(message);
    harness.stored("1300000000000000901").await;
    let stored = harness.sink.stored();
    let attachment = &stored[0].attachments[0];
    assert_eq!(attachment.kind, "image");
    assert_eq!(attachment.mime_type, "image/png");
    assert_eq!(attachment.file_name.as_deref(), Some("receipt.png"));
    let data = harness
        .transport
        .fetch_attachment(attachment, 10_000)
        .await
        .unwrap();
    assert_eq!(data.len(), 5000);
    match harness.transport.fetch_attachment(attachment, 4_000).await {
        Err(SendError::Permanent { reason }) => {
            assert!(reason.contains("over the 4000-byte limit"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

fn ana() -> ChannelIdentity {
    ChannelIdentity::parse(ChannelKind::Discord, ANA).unwrap()
}

fn in_guild(reply_to: &str) -> ReplyContext {
    ReplyContext {
        reply_to: Some(reply_to.to_string()),
        chat: Some(GENERAL.to_string()),
        ..ReplyContext::default()
    }
}

#[tokio::test]
async fn replies_quote_the_message_in_part_zero_and_never_ping() {
    let harness = Harness::start().await;
    let context = in_guild("1300000000000001001");
    let text = harness
        .transport
        .render("Hey @everyone and @here, **done**.");
    harness
        .transport
        .send(&ana(), &text, &context, 0)
        .await
        .unwrap();
    harness
        .transport
        .send(&ana(), "second part", &context, 1)
        .await
        .unwrap();
    let posted = harness.discord.posted();
    assert_eq!(posted.len(), 2);
    assert_eq!(posted[0].channel_id, GENERAL);
    assert!(!posted[0].content().contains("@everyone") && !posted[0].content().contains("@here"));
    assert!(posted[0].content().contains("**done**"));
    assert_eq!(
        posted[0].body["message_reference"]["message_id"],
        "1300000000000001001"
    );
    assert!(posted[1].body["message_reference"].is_null());
    for message in &posted {
        assert_eq!(message.body["allowed_mentions"], json!({"parse": []}));
    }
    let requests = harness.discord.requests();
    let request = requests
        .iter()
        .find(|request| request.path.ends_with("/messages"))
        .unwrap();
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bot {TOKEN}").as_str())
    );
}

#[tokio::test]
async fn a_message_to_a_person_opens_a_dm_channel_once() {
    let harness = Harness::start().await;
    let first = harness
        .transport
        .send(&ana(), "Meeting at 3", &ReplyContext::default(), 0)
        .await
        .unwrap();
    harness
        .transport
        .send(&ana(), "and bring the anvil", &ReplyContext::default(), 0)
        .await
        .unwrap();
    let opened: Vec<_> = harness
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path == "/api/v10/users/@me/channels")
        .collect();
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0].body, json!({"recipient_id": ANA}));
    let posted = harness.discord.posted();
    assert_eq!(posted[0].id, first);
    assert_eq!(posted[0].channel_id, posted[1].channel_id);
    assert_ne!(posted[0].channel_id, ANA);
    // A handle cannot be reached: Discord needs the numeric id.
    let handle = ChannelIdentity::parse(ChannelKind::Discord, "ana.h").unwrap();
    assert!(matches!(
        harness
            .transport
            .send(&handle, "x", &ReplyContext::default(), 0)
            .await,
        Err(SendError::Permanent { .. })
    ));
}

#[tokio::test]
async fn a_429_asks_to_retry_after_discord_s_retry_after() {
    let harness = Harness::start().await;
    harness
        .discord
        .fail_next_sends([Failure::rate_limited(0.5), Failure::server_error()]);
    let context = in_guild("1");
    match harness.transport.send(&ana(), "hi", &context, 0).await {
        Err(SendError::Retry { reason, after }) => {
            assert_eq!(after, Some(Duration::from_millis(500)));
            assert!(reason.contains("You are being rate limited."), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        harness.transport.send(&ana(), "hi", &context, 0).await,
        Err(SendError::Retry { after: None, .. })
    ));
    harness
        .transport
        .send(&ana(), "hi", &context, 0)
        .await
        .unwrap();
}

#[tokio::test]
async fn an_empty_bucket_makes_the_next_send_on_the_route_wait_for_its_reset() {
    let harness = Harness::start().await;
    harness.discord.exhaust_bucket_after_next_send(0.6);
    let context = in_guild("1");
    harness
        .transport
        .send(&ana(), "first", &context, 0)
        .await
        .unwrap();
    harness
        .transport
        .send(&ana(), "second", &context, 1)
        .await
        .unwrap();
    let requests: Vec<_> = harness
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/messages"))
        .collect();
    assert_eq!(
        requests
            .iter()
            .map(|request| request.status)
            .collect::<Vec<_>>(),
        vec![200, 200],
        "the second send waited instead of being refused"
    );
    assert!(requests[1].at - requests[0].at >= Duration::from_millis(550));
}

#[tokio::test]
async fn refusals_are_classified_with_discord_s_reason() {
    let harness = Harness::start().await;
    harness
        .discord
        .fail_next_sends([Failure::missing_access(), Failure::unknown_channel()]);
    let context = in_guild("1");
    for expected in [
        "Missing Access (HTTP 403, code 50001)",
        "Unknown Channel (HTTP 404, code 10003)",
    ] {
        match harness.transport.send(&ana(), "hi", &context, 0).await {
            Err(SendError::Permanent { reason }) => assert!(reason.contains(expected), "{reason}"),
            other => panic!("{other:?}"),
        }
    }
    harness.discord.set_token("rotated");
    match harness.transport.send(&ana(), "hi", &context, 0).await {
        Err(SendError::Credentials { reason }) => {
            assert!(reason.contains("401: Unauthorized"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_ten_thousand_character_answer_goes_out_in_parts_that_keep_code_blocks_whole() {
    let harness = Harness::start().await;
    let mut answer = String::new();
    let mut index = 0;
    while answer.chars().count() < 10_000 {
        answer.push_str(&format!(
            "Section {index}. {}\n\n```rust\n",
            "Some explanation of the next function. ".repeat(6)
        ));
        for line in 0..(10 + index % 4 * 12) {
            answer.push_str(&format!(
                "    let value_{line} = compute({line}, {index});\n"
            ));
        }
        answer.push_str("```\n");
        index += 1;
    }
    let parts = split_message(
        &harness.transport.render(&answer),
        harness.transport.max_chars(),
    );
    assert!(parts.len() >= 5, "{} parts", parts.len());
    let context = in_guild("1");
    for (part, text) in parts.iter().enumerate() {
        assert!(text.chars().count() <= 2_000);
        assert!(
            fences_balanced(text),
            "part {part} cuts a code block:\n{text}"
        );
        harness
            .transport
            .send(&ana(), text, &context, part)
            .await
            .unwrap();
    }
    assert!(
        harness
            .discord
            .wait_for_posted(parts.len(), Duration::from_secs(1))
            .await
    );
    let posted = harness.discord.posted();
    assert!(
        posted
            .iter()
            .all(|message| fences_balanced(message.content()))
    );
    // Every line of code arrived.
    let all: String = posted.iter().map(|message| message.content()).collect();
    for section in 0..index {
        assert!(all.contains(&format!("let value_9 = compute(9, {section});")));
    }
}

#[tokio::test]
async fn a_bare_mention_and_sticker_or_embed_only_messages_are_not_stored() {
    let harness = Harness::start().await;
    harness.ready().await;
    let dispatch = |message| harness.discord.dispatch_message(message).unwrap();
    dispatch(guild_message(
        "1300000000000001201",
        GUILD,
        GENERAL,
        ANA,
        &format!("<@{BOT_USER_ID}>  "),
        &[BOT_USER_ID],
    ));
    let mut sticker = direct_message("1300000000000001202", DM_CHANNEL, ANA, "");
    sticker["sticker_items"] =
        json!([{"id": "749054660769218631", "name": "Wave", "format_type": 3}]);
    dispatch(sticker);
    let mut embed = direct_message("1300000000000001203", DM_CHANNEL, ANA, " ");
    embed["embeds"] = json!([{"type": "rich", "title": "A card"}]);
    dispatch(embed);
    harness.dm("1300000000000001204", "and a real question");
    harness.stored("1300000000000001204").await;
    assert_eq!(harness.sink.stored_ids(), vec!["1300000000000001204"]);
}

#[tokio::test]
async fn a_rate_limited_gateway_request_is_retried_after_discords_retry_after() {
    let harness = Harness::start_with(&[], Vec::new(), |discord| {
        discord.fail_next_gateway_requests([Failure::rate_limited(2.5)]);
    })
    .await;
    harness.ready().await;
    let asked: Vec<_> = harness
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/gateway/bot"))
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[0].status, 429);
    let waited = asked[1].at - asked[0].at;
    assert!(
        waited >= Duration::from_millis(2_400),
        "asked again after {waited:?}, before Discord's retry_after of 2.5 s"
    );
}
