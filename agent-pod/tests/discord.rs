//! The Discord channel end to end: the real agent binary, the scripted model and a
//! scripted Discord (REST and Gateway) that records every request. Ana (owner) and
//! Ivan (employee) are Contacts with their Discord user ids.

mod common;

use std::{path::PathBuf, time::Duration};

use common::*;
use saint_scripted::discord::{
    BOT_USER_ID, Failure, ScriptedDiscord, direct_message, guild_message,
};
use saint_scripted::llm::{RecordedRequest, Reply, ScriptedLlm};
use serde_json::json;

const BOT_TOKEN: &str = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.G1a2b3.agent-test-token";
const ANA: &str = "80351110224678912";
const IVAN: &str = "80351110224678913";
const IVAN_DM: &str = "1200000000000000002";
const GUILD: &str = "1000000000000000001";
const GENERAL: &str = "1000000000000000002";
const WAIT: Duration = Duration::from_secs(30);

struct Bot {
    llm: ScriptedLlm,
    discord: ScriptedDiscord,
    // Before the directory: the agent stops before its files go.
    agent: Option<AgentProcess>,
    config_path: PathBuf,
    workspace: PathBuf,
    _directory: tempfile::TempDir,
}

impl Bot {
    async fn start() -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let discord = ScriptedDiscord::start(BOT_TOKEN, Duration::from_millis(500))
            .await
            .unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace: PathBuf = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "discord", "kind": "discord",
             "settings": {"apiBaseUrl": discord.api_base_url()},
             "secretEnv": {"botToken": "DISCORD_BOT_TOKEN"}},
        ]);
        add_identity(&mut config, "ana", &format!("discord:{ANA}"));
        add_identity(&mut config, "ivan", &format!("discord:{IVAN}"));
        write_config(&config_path, &config);
        let mut bot = Self {
            llm,
            discord,
            agent: None,
            config_path,
            workspace,
            _directory: directory,
        };
        bot.spawn();
        assert!(
            bot.discord
                .wait_until(WAIT, |discord| discord.connected())
                .await,
            "the agent never identified; gateway saw {:?}",
            bot.discord.gateway_log()
        );
        bot
    }

    fn spawn(&mut self) {
        self.agent = Some(spawn_agent(
            &self.config_path,
            &self.workspace,
            &[("DISCORD_BOT_TOKEN", BOT_TOKEN)],
        ));
    }

    fn count(&self, sql: &str) -> i64 {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(sql, [], |row| row.get(0))
            .unwrap()
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.child.kill().unwrap(); // SIGKILL
            agent.child.wait().unwrap();
        }
    }

    async fn wait_for_posted(&self, count: usize) {
        assert!(
            self.discord.wait_for_posted(count, WAIT).await,
            "timed out waiting for {count} posts; REST saw {:#?}",
            self.discord.requests()
        );
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
async fn an_employee_s_direct_message_is_answered_in_the_dm_in_their_role() {
    let bot = Bot::start().await;
    bot.llm.push(Reply::text(
        "Hi Ivan, **lunch** is at noon. Ping @everyone?",
    ));
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000001",
            IVAN_DM,
            IVAN,
            "When is lunch?",
        ))
        .unwrap();
    bot.wait_for_posted(1).await;
    let posted = bot.discord.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].channel_id, IVAN_DM);
    assert_eq!(
        posted[0].content(),
        "Hi Ivan, **lunch** is at noon. Ping @\u{200B}everyone?"
    );
    assert!(
        posted[0].body["message_reference"].is_null(),
        "a DM answer needs no quote"
    );
    assert_eq!(posted[0].body["allowed_mentions"], json!({"parse": []}));
    let sends: Vec<_> = bot
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/messages"))
        .collect();
    assert_eq!(
        sends[0].authorization.as_deref(),
        Some(format!("Bot {BOT_TOKEN}").as_str())
    );
    // Ivan is an employee: his turn is not offered the owner's session tools.
    let turn = bot.turn_for("When is lunch?");
    let tools = turn.tool_names();
    assert!(tools.contains(&"web_fetch".to_string()), "{tools:?}");
    assert!(!tools.contains(&"sessions_list".to_string()), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_guild_channel_each_mention_is_answered_with_its_sender_s_role() {
    let bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("Noted."));
    let dispatch = |message| bot.discord.dispatch_message(message).unwrap();
    // Not addressed to the bot: never reaches the model.
    dispatch(guild_message(
        "1300000000000000101",
        GUILD,
        GENERAL,
        IVAN,
        "just chatting about anvils",
        &[],
    ));
    dispatch(guild_message(
        "1300000000000000102",
        GUILD,
        GENERAL,
        ANA,
        &format!("<@{BOT_USER_ID}> which sessions are open?"),
        &[BOT_USER_ID],
    ));
    dispatch(guild_message(
        "1300000000000000103",
        GUILD,
        GENERAL,
        IVAN,
        &format!("<@{BOT_USER_ID}> and what is for lunch?"),
        &[BOT_USER_ID],
    ));
    bot.wait_for_posted(2).await;
    let posted = bot.discord.posted();
    let mut quoted: Vec<&str> = posted
        .iter()
        .map(|message| {
            assert_eq!(message.channel_id, GENERAL);
            assert_eq!(message.content(), "Noted.");
            message.body["message_reference"]["message_id"]
                .as_str()
                .unwrap()
        })
        .collect();
    quoted.sort_unstable();
    assert_eq!(quoted, vec!["1300000000000000102", "1300000000000000103"]);
    // The owner's turn offers the owner's tools; the employee's, in the same channel,
    // does not.
    let owner_turn = bot.turn_for("which sessions are open?");
    assert!(
        owner_turn
            .tool_names()
            .contains(&"sessions_list".to_string())
    );
    let employee_turn = bot.turn_for("what is for lunch?");
    assert!(
        !employee_turn
            .tool_names()
            .contains(&"sessions_list".to_string()),
        "{:?}",
        employee_turn.tool_names()
    );
    // The mention is stripped from what the model reads, and the chatter never arrives.
    let texts: Vec<String> = bot
        .llm
        .requests()
        .iter()
        .flat_map(|request| request.user_texts())
        .collect();
    assert!(
        texts
            .iter()
            .all(|text| !text.contains(&format!("<@{BOT_USER_ID}>"))),
        "{texts:#?}"
    );
    assert!(
        texts.iter().all(|text| !text.contains("just chatting")),
        "{texts:#?}"
    );
    assert_eq!(bot.llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_said_while_the_agent_is_down_is_replayed_by_the_resume_and_answered() {
    let mut bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("On it."));
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000201",
            IVAN_DM,
            IVAN,
            "first",
        ))
        .unwrap();
    bot.wait_for_posted(1).await;
    // Killed once the reply is marked sent (a kill before that re-sends it, by design).
    for _ in 0..600 {
        if bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'"),
        1
    );
    bot.kill();
    assert!(
        bot.discord
            .wait_until(WAIT, |discord| !discord.connected())
            .await
    );
    // Said while the bot was down; Discord keeps it for the session.
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000202",
            IVAN_DM,
            IVAN,
            "said while you were down",
        ))
        .unwrap();
    bot.spawn();
    bot.wait_for_posted(2).await;
    let log = bot.discord.gateway_log();
    assert_eq!(log.identifies.len(), 1, "the restarted agent resumed");
    assert_eq!(log.resumes.len(), 1);
    assert_eq!(log.resumes[0]["session_id"], "session-1");
    bot.turn_for("said while you were down");
    // Each message was answered once.
    assert_eq!(bot.discord.posted().len(), 2);
    assert_eq!(bot.llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_reply_is_sent_after_discord_s_retry_after() {
    let bot = Bot::start().await;
    bot.discord.fail_next_sends([Failure::rate_limited(0.8)]);
    bot.llm.push(Reply::text("After the wait."));
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000301",
            IVAN_DM,
            IVAN,
            "quick question",
        ))
        .unwrap();
    bot.wait_for_posted(1).await;
    let sends: Vec<_> = bot
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/messages"))
        .collect();
    assert_eq!(
        sends
            .iter()
            .map(|request| request.status)
            .collect::<Vec<_>>(),
        vec![429, 200]
    );
    assert!(
        sends[1].at - sends[0].at >= Duration::from_millis(800),
        "retried after {:?}",
        sends[1].at - sends[0].at
    );
    assert_eq!(bot.discord.posted()[0].content(), "After the wait.");
}

impl Bot {
    /// Waits until nothing waits in the inbox or the outbox.
    async fn wait_for_empty_queue(&self) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.count("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')") > 0
            || self.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'") > 0
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the queue never emptied"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_reply_waits_for_an_earlier_one_discord_rate_limited() {
    let bot = Bot::start().await;
    bot.discord.fail_next_sends([Failure::rate_limited(1.0)]);
    bot.llm.push(Reply::text("answer one"));
    bot.llm.push(Reply::text("answer two"));
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000401",
            IVAN_DM,
            IVAN,
            "first question",
        ))
        .unwrap();
    // The first reply is refused for a second; the second question comes meanwhile.
    assert!(
        bot.discord
            .wait_until(WAIT, |discord| discord
                .requests()
                .iter()
                .any(|request| request.status == 429))
            .await
    );
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000402",
            IVAN_DM,
            IVAN,
            "second question",
        ))
        .unwrap();
    bot.wait_for_posted(2).await;
    let posted: Vec<String> = bot
        .discord
        .posted()
        .iter()
        .map(|posted| posted.content().to_string())
        .collect();
    assert_eq!(posted, ["answer one", "answer two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_deleted_before_its_turn_is_not_answered() {
    let bot = Bot::start().await;
    let gate = saint_scripted::llm::Gate::new();
    bot.llm.push(Reply::text("answer one").held_until(&gate));
    bot.llm.set_fallback(Reply::text("another answer"));
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000501",
            IVAN_DM,
            IVAN,
            "first question",
        ))
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while bot.llm.request_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first turn never reached the model"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The second waits behind the first, whose turn is held at the model; Ivan deletes
    // it.
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000502",
            IVAN_DM,
            IVAN,
            "my password is hunter2",
        ))
        .unwrap();
    while bot.count("SELECT COUNT(*) FROM inbox WHERE state = 'received'") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second message was never stored"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bot.discord.dispatch(
        "MESSAGE_DELETE",
        json!({"id": "1300000000000000502", "channel_id": IVAN_DM}),
    );
    while bot.count("SELECT COUNT(*) FROM inbox WHERE outcome = 'ignored'") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deletion was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gate.open();
    bot.wait_for_posted(1).await;
    bot.wait_for_empty_queue().await;
    assert_eq!(bot.discord.posted().len(), 1);
    assert_eq!(bot.llm.request_count(), 1);
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM inbox WHERE body LIKE '%hunter2%'"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_resent_after_a_crash_between_send_and_record_is_one_message() {
    let mut bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("Lunch is at noon."));
    // Discord makes the message, and the agent dies before it hears so: its outbox row
    // is still queued, with nothing recorded.
    bot.discord.withhold_next_answer();
    bot.discord
        .dispatch_message(direct_message(
            "1300000000000000601",
            IVAN_DM,
            IVAN,
            "When is lunch?",
        ))
        .unwrap();
    bot.wait_for_posted(1).await;
    bot.kill();
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued' AND parts_sent = 0"),
        1
    );
    assert!(
        bot.discord
            .wait_until(WAIT, |discord| !discord.connected())
            .await
    );
    // The restarted agent sends the row again, with the same nonce: Discord answers with
    // the message it made the first time, and Ivan sees one.
    bot.spawn();
    bot.wait_for_empty_queue().await;
    let posted = bot.discord.posted();
    assert_eq!(posted.len(), 1, "Ivan sees one message: {posted:#?}");
    assert_eq!(posted[0].content(), "Lunch is at noon.");
    let sends: Vec<_> = bot
        .discord
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/messages"))
        .collect();
    assert_eq!(sends.len(), 2, "{sends:#?}");
    assert_eq!(sends[0].body["nonce"], sends[1].body["nonce"]);
    assert!(sends[0].body["nonce"].is_string(), "{:?}", sends[0].body);
    assert_eq!(sends[1].body["enforce_nonce"], true);
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'"),
        1
    );
    let recorded: String =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT json_extract(platform_ids, '$[0]') FROM outbox",
                [],
                |row| row.get(0),
            )
            .unwrap();
    assert_eq!(
        recorded, posted[0].id,
        "the first message is the one recorded"
    );
    assert_eq!(bot.llm.request_count(), 1, "one turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replies_with_the_same_text_are_two_messages() {
    let bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("Noted."));
    for (id, text) in [
        ("1300000000000000701", "first"),
        ("1300000000000000702", "second"),
    ] {
        bot.discord
            .dispatch_message(direct_message(id, IVAN_DM, IVAN, text))
            .unwrap();
    }
    bot.wait_for_posted(2).await;
    bot.wait_for_empty_queue().await;
    let posted = bot.discord.posted();
    assert_eq!(posted.len(), 2);
    assert_ne!(posted[0].body["nonce"], posted[1].body["nonce"]);
}
