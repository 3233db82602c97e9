//! The Slack channel end to end: the real agent binary, the scripted model and a
//! scripted Slack (Web API and Socket Mode) that records every request. Ivan (employee)
//! is a Contact with his Slack member id in the fixture; Ana (owner) gets one here.

mod common;

use std::{path::PathBuf, time::Duration};

use common::*;
use saint_scripted::llm::{RecordedRequest, Reply, ScriptedLlm};
use saint_scripted::slack::{
    BOT_USER_ID, ScriptedSlack, app_mention_event, event_callback, message_event, signed_headers,
};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "xoxb-1111-2222-agent-test";
const APP_TOKEN: &str = "xapp-1-A0SAINT-3333-agent-test";
const SIGNING_SECRET: &str = "e2e-signing-secret-0123456789abcdef";
const IVAN: &str = "U024BK3";
const ANA: &str = "U0ANA0001";
const IVAN_DM: &str = "D0IVAN";
const GENERAL: &str = "C0GENERAL";
const WAIT: Duration = Duration::from_secs(30);

struct Bot {
    llm: ScriptedLlm,
    slack: ScriptedSlack,
    directory: tempfile::TempDir,
    agent: AgentProcess,
}

impl Bot {
    async fn start() -> Self {
        Self::start_in(false).await
    }

    /// Starts the agent in Socket Mode, or in events mode (`events`).
    async fn start_in(events: bool) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let slack = ScriptedSlack::start(BOT_TOKEN, APP_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace: PathBuf = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        let slack_channel = if events {
            json!({"name": "slack", "kind": "slack",
             "settings": {"apiBaseUrl": slack.api_url(), "mode": "events"},
             "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "signingSecret": "SLACK_SIGNING_SECRET"}})
        } else {
            json!({"name": "slack", "kind": "slack",
             "settings": {"apiBaseUrl": slack.api_url()},
             "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "appToken": "SLACK_APP_TOKEN"}})
        };
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            slack_channel,
        ]);
        add_identity(&mut config, "ana", &format!("slack:{ANA}"));
        write_config(&config_path, &config);
        let agent = spawn_agent(
            &config_path,
            &workspace,
            &[
                ("SLACK_BOT_TOKEN", BOT_TOKEN),
                ("SLACK_APP_TOKEN", APP_TOKEN),
                ("SLACK_SIGNING_SECRET", SIGNING_SECRET),
            ],
        );
        let bot = Self {
            llm,
            slack,
            directory,
            agent,
        };
        assert!(
            events || bot.slack.wait_for_connections(1, WAIT).await,
            "the agent never opened a socket; slack saw {:#?}",
            bot.slack.requests()
        );
        bot
    }

    async fn wait_for_posted(&self, count: usize) {
        assert!(
            self.slack.wait_for_posted(count, WAIT).await,
            "timed out waiting for {count} posts; slack saw {:#?}",
            self.slack.requests()
        );
    }

    /// Posts `payload` to the Slack webhook, signed at `timestamp` with `secret`;
    /// returns the status, content type and body.
    async fn post_event(
        &self,
        payload: &Value,
        secret: &str,
        timestamp: i64,
    ) -> (u16, String, String) {
        let body = serde_json::to_vec(payload).unwrap();
        let response = reqwest::Client::new()
            .post(format!("{}/channels/slack/webhook", self.agent.http))
            .headers(signed_headers(secret, timestamp, &body))
            .body(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|value| value.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, content_type, response.text().await.unwrap())
    }

    /// The model request of the turn whose newest user text contains `text`.
    fn turn_for(&self, text: &str) -> RecordedRequest {
        self.llm
            .requests()
            .into_iter()
            .find(|request| {
                request
                    .user_texts()
                    .last()
                    .is_some_and(|last| last.contains(text))
            })
            .unwrap_or_else(|| panic!("no model request for {text:?}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ivan_s_direct_message_is_answered_in_his_direct_channel_in_his_role() {
    let bot = Bot::start().await;
    bot.llm.push(Reply::text(
        "Hi Ivan, **lunch** is at noon & <b>late</b>: [menu](https://acme.example/menu)",
    ));
    let envelope = bot.slack.push_event(message_event(
        IVAN_DM,
        "im",
        IVAN,
        "1700000100.000100",
        "When is lunch?",
    ));
    bot.wait_for_posted(1).await;
    let posted = bot.slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].channel, IVAN_DM);
    assert_eq!(
        posted[0].thread_ts, None,
        "a direct message is answered in place"
    );
    assert_eq!(
        posted[0].text,
        "Hi Ivan, *lunch* is at noon &amp; &lt;b&gt;late&lt;/b&gt;: <https://acme.example/menu|menu>"
    );
    assert!(bot.slack.acked(&envelope), "the envelope was acknowledged");
    let post = bot
        .slack
        .requests()
        .into_iter()
        .find(|request| request.method == "chat.postMessage")
        .unwrap();
    assert_eq!(post.bearer.as_deref(), Some(BOT_TOKEN));
    // Ivan is an employee: his turn is not offered the owner's tools.
    let tools = bot.turn_for("When is lunch?").tool_names();
    assert!(tools.contains(&"web_fetch".to_string()), "{tools:?}");
    for owner_only in ["write", "sessions_list"] {
        assert!(!tools.contains(&owner_only.to_string()), "{tools:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_channel_each_mention_is_answered_in_its_thread_with_its_sender_s_role() {
    let bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("Noted."));
    // Chatter without a mention never reaches the model.
    bot.slack.push_event(message_event(
        GENERAL,
        "channel",
        IVAN,
        "1700000200.000100",
        "just chatting about anvils",
    ));
    // Ana mentions the bot: Slack sends the message and the app_mention.
    let ana_text = format!("<@{BOT_USER_ID}> which sessions are open?");
    let ana_ts = "1700000200.000200";
    bot.slack
        .push_event(message_event(GENERAL, "channel", ANA, ana_ts, &ana_text));
    bot.slack
        .push_event(app_mention_event(GENERAL, ANA, ana_ts, &ana_text));
    // Ivan asks in a thread of his own.
    let ivan_ts = "1700000200.000300";
    let ivan_text = format!("<@{BOT_USER_ID}> and what is for lunch?");
    bot.slack
        .push_event(message_event(GENERAL, "channel", IVAN, ivan_ts, &ivan_text));
    bot.slack
        .push_event(app_mention_event(GENERAL, IVAN, ivan_ts, &ivan_text));
    bot.wait_for_posted(2).await;
    let mut threads: Vec<String> = bot
        .slack
        .posted()
        .iter()
        .map(|posted| {
            assert_eq!(posted.channel, GENERAL);
            assert_eq!(posted.text, "Noted.");
            posted.thread_ts.clone().expect("answered in the thread")
        })
        .collect();
    threads.sort();
    assert_eq!(threads, vec![ana_ts.to_string(), ivan_ts.to_string()]);
    let ana_turn = bot.turn_for("which sessions are open?");
    let ivan_turn = bot.turn_for("and what is for lunch?");
    assert!(
        ana_turn.tool_names().contains(&"sessions_list".to_string()),
        "the owner's turn has the owner's tools: {:?}",
        ana_turn.tool_names()
    );
    let ivan_tools = ivan_turn.tool_names();
    for owner_only in ["write", "sessions_list"] {
        assert!(
            !ivan_tools.contains(&owner_only.to_string()),
            "{ivan_tools:?}"
        );
    }
    // One model turn per mention: the message/app_mention pairs were stored once, and
    // the chatter never reached the model.
    assert_eq!(bot.llm.requests().len(), 2, "{:#?}", bot.llm.requests());
    assert!(
        bot.llm.requests().iter().all(|request| request
            .user_texts()
            .iter()
            .all(|text| !text.contains("anvils") && !text.contains(BOT_USER_ID))),
        "no chatter, and the mention is stripped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_events_mode_only_signed_recent_requests_are_taken_and_answered() {
    let bot = Bot::start_in(true).await;
    bot.llm.push(Reply::text("Noon."));
    let now = jiff::Timestamp::now().as_second();
    let challenge = json!({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "type": "url_verification",
        "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"});
    let (status, content_type, body) = bot.post_event(&challenge, SIGNING_SECRET, now).await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert_eq!(body, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P");
    let forged = event_callback(message_event(
        IVAN_DM,
        "im",
        IVAN,
        "1700000300.000100",
        "forged",
    ));
    assert_eq!(bot.post_event(&forged, "not-the-secret", now).await.0, 401);
    assert_eq!(
        bot.post_event(&forged, SIGNING_SECRET, now - 10 * 60)
            .await
            .0,
        401,
        "a replay"
    );
    let genuine = event_callback(message_event(
        IVAN_DM,
        "im",
        IVAN,
        "1700000300.000200",
        "When is lunch?",
    ));
    assert_eq!(bot.post_event(&genuine, SIGNING_SECRET, now).await.0, 200);
    // Slack retries a delivery it thinks failed: answered once.
    assert_eq!(bot.post_event(&genuine, SIGNING_SECRET, now).await.0, 200);
    bot.wait_for_posted(1).await;
    let posted = bot.slack.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].channel, IVAN_DM);
    assert_eq!(posted[0].text, "Noon.");
    assert_eq!(
        bot.llm.requests().len(),
        1,
        "the forged and replayed requests never reached the model"
    );
    assert!(
        bot.llm.requests()[0]
            .user_texts()
            .iter()
            .all(|text| !text.contains("forged"))
    );
    assert_eq!(bot.slack.connections(), 0, "events mode opens no socket");
    let inbox = rusqlite::Connection::open(
        bot.directory
            .path()
            .join("workspace/sessions/transcripts.sqlite3"),
    )
    .unwrap();
    let stored: i64 = inbox
        .query_row("SELECT COUNT(*) FROM inbox", [], |row| row.get(0))
        .unwrap();
    assert_eq!(stored, 1, "the redelivery was not stored again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_deleted_after_its_answer_leaves_the_transcript() {
    let bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("Noted."));
    let ts = "1700000900.000100";
    bot.slack.push_event(message_event(
        IVAN_DM,
        "im",
        IVAN,
        ts,
        "my door code is 4821",
    ));
    bot.wait_for_posted(1).await;
    bot.slack.push_event(json!({
        "type": "message", "subtype": "message_deleted", "hidden": true,
        "channel": IVAN_DM, "channel_type": "im", "ts": "1700000901.000200",
        "deleted_ts": ts,
    }));
    let database = bot
        .directory
        .path()
        .join("workspace/sessions/transcripts.sqlite3");
    let count = |sql: &str| -> i64 {
        rusqlite::Connection::open(&database)
            .unwrap()
            .query_row(sql, [], |row| row.get(0))
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while count("SELECT COUNT(*) FROM messages WHERE content LIKE '%4821%'") > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted text stayed in the transcript"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        count("SELECT COUNT(*) FROM inbox WHERE body LIKE '%4821%'"),
        0
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM inbox WHERE outcome = 'answered' \
             AND outcome_reason = 'withdrawn by its sender after it was answered'"
        ),
        1
    );
}
