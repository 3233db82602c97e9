//! The Matrix channel against a real homeserver: Synapse on loopback (see
//! `synapse/mod.rs`), the real agent binary and the scripted model. People are real
//! Synapse accounts that create rooms, invite the bot and write to it through the
//! client-server API; what the bot sent is read back from the rooms.
//!
//! One homeserver serves the whole file; every test registers its own accounts (named
//! after the test), so the tests run side by side without sharing a room or a user.

mod common;
mod synapse;

use std::{path::PathBuf, time::Duration};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};
use synapse::{Synapse, User};

const BOT_TOKEN_VARIABLE: &str = "MATRIX_ACCESS_TOKEN";

struct Bot {
    llm: ScriptedLlm,
    bot: User,
    ana: User,
    ivan: User,
    stranger: User,
    _directory: tempfile::TempDir,
    config_path: PathBuf,
    workspace: PathBuf,
    agent: Option<AgentProcess>,
}

impl Bot {
    /// Registers `<tag>-bot`, `<tag>-ana` (owner), `<tag>-ivan` (employee) and
    /// `<tag>-stranger`, and starts the agent with a Matrix channel for the bot.
    async fn start(tag: &str) -> Self {
        Self::start_with(tag, json!({})).await
    }

    /// Like `start`, with more channel settings (`groupPolicy`, `requireMention`).
    async fn start_with(tag: &str, settings: Value) -> Self {
        let mut bot = Self::prepare_with(tag, settings).await;
        bot.start_agent().await;
        bot
    }

    /// The accounts and the agent's config, without starting the agent.
    async fn prepare(tag: &str) -> Self {
        Self::prepare_with(tag, json!({})).await
    }

    async fn prepare_with(tag: &str, settings: Value) -> Self {
        let synapse = Synapse::shared();
        let bot = synapse.register(&format!("{tag}-bot")).await;
        let ana = synapse.register(&format!("{tag}-ana")).await;
        let ivan = synapse.register(&format!("{tag}-ivan")).await;
        let stranger = synapse.register(&format!("{tag}-stranger")).await;
        let llm = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        // Ana and Ivan are reachable on Matrix too, in the contacts and their links.
        for (index, user) in [(0, &ana), (1, &ivan)] {
            let identity = json!(format!("matrix:{}", user.id));
            let slug = config["contacts"][index]["slug"]
                .as_str()
                .unwrap()
                .to_string();
            config["contacts"][index]["identities"]
                .as_array_mut()
                .unwrap()
                .push(identity.clone());
            config["identityLinks"][slug]
                .as_array_mut()
                .unwrap()
                .push(identity);
        }
        assert_eq!(config["contacts"][0]["role"], "owner");
        assert_eq!(config["contacts"][1]["role"], "employee");
        let mut channel_settings = json!({"homeserverUrl": synapse.base_url, "userId": bot.id});
        for (key, value) in settings.as_object().unwrap() {
            channel_settings[key] = value.clone();
        }
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "matrix", "kind": "matrix", "settings": channel_settings,
             "secretEnv": {"accessToken": BOT_TOKEN_VARIABLE}},
        ]);
        write_config(&config_path, &config);
        Self {
            llm,
            bot,
            ana,
            ivan,
            stranger,
            _directory: directory,
            config_path,
            workspace,
            agent: None,
        }
    }

    /// Starts the agent; returns once the channel has its first position (from then on
    /// what arrives is answered).
    async fn start_agent(&mut self) {
        self.spawn();
        self.wait_for("the first sync", || async {
            (self.count("SELECT COUNT(*) FROM channel_cursor WHERE channel = 'matrix'") == 1)
                .then_some(())
        })
        .await;
    }

    fn spawn(&mut self) {
        self.agent = Some(spawn_agent(
            &self.config_path,
            &self.workspace,
            &[(BOT_TOKEN_VARIABLE, &self.bot.token)],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.child.kill().unwrap(); // SIGKILL
            agent.child.wait().unwrap();
        }
    }

    /// Stops the agent (SIGSTOP) without closing its connections: a hung process,
    /// whose open long poll the homeserver still answers.
    fn freeze(&self) {
        let agent = self.agent.as_ref().expect("a running agent");
        let stopped = std::process::Command::new("kill")
            .args(["-STOP", &agent.child.id().to_string()])
            .status()
            .unwrap();
        assert!(stopped.success());
    }

    fn count(&self, sql: &str) -> i64 {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
            .and_then(|database| database.query_row(sql, [], |row| row.get(0)))
            .unwrap_or(0)
    }

    /// Waits (bounded) until `probe` gives a value.
    async fn wait_for<T, F, Fut>(&self, what: &str, probe: F) -> T
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() <= deadline,
                "timed out waiting for {what}; model requests: {}; homeserver log:\n{}",
                self.llm.request_count(),
                Synapse::shared().log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A direct room `user` opens with the bot, once the bot has joined it.
    async fn direct_room(&self, user: &User) -> String {
        let room = user
            .create_room(json!({"is_direct": true, "invite": [self.bot.id],
                                "preset": "trusted_private_chat"}))
            .await;
        self.wait_for("the bot to join", || async {
            (user.membership(&room, &self.bot.id).await.as_deref() == Some("join")).then_some(())
        })
        .await;
        room
    }

    /// The bot's messages in `room`, oldest first, as `user` reads them.
    async fn bot_messages(&self, user: &User, room: &str) -> Vec<Value> {
        user.messages(room)
            .await
            .into_iter()
            .filter(|event| event["sender"] == self.bot.id.as_str())
            .collect()
    }

    /// Waits until the bot has sent `count` messages in `room`; returns them.
    async fn wait_for_bot_messages(&self, user: &User, room: &str, count: usize) -> Vec<Value> {
        self.wait_for(&format!("{count} bot messages in {room}"), || async {
            let messages = self.bot_messages(user, room).await;
            (messages.len() >= count).then_some(messages)
        })
        .await
    }
}

fn replied_to(event: &Value) -> Option<&str> {
    event["content"]["m.relates_to"]["m.in_reply_to"]["event_id"].as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contacts_invitation_is_accepted_and_answered_and_a_strangers_is_declined() {
    let bot = Bot::start("invites").await;
    let room = bot.direct_room(&bot.ana).await;
    bot.llm.push(Reply::text(
        "## Plan\n**Done**, see [the doc](https://acme.example/doc?a=1&b=2).",
    ));
    let asked = bot.ana.say(&room, "What is the plan?").await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    let content = &replies[0]["content"];
    assert_eq!(content["msgtype"], "m.text");
    assert_eq!(
        content["body"],
        "## Plan\n**Done**, see [the doc](https://acme.example/doc?a=1&b=2)."
    );
    assert_eq!(content["format"], "org.matrix.custom.html");
    assert_eq!(
        content["formatted_body"],
        "<h2>Plan</h2><p><strong>Done</strong>, see <a href=\"https://acme.example/doc?a=1&amp;b=2\">the doc</a>.</p>"
    );
    assert_eq!(replied_to(&replies[0]), Some(asked.as_str()));
    // A direct room: Ana's own session, in her role (the owner's tools).
    let request = &bot.llm.requests()[0];
    assert!(
        request
            .user_texts()
            .iter()
            .any(|text| text.contains("What is the plan?"))
    );
    assert!(request.tool_names().contains(&"sessions_list".to_string()));
    // The bot marked Ana's message read.
    bot.wait_for("the read receipt", || async {
        let (_, sync) = bot
            .ana
            .call(reqwest::Method::GET, "sync?timeout=0", None)
            .await;
        sync["rooms"]["join"][&room]["ephemeral"]["events"]
            .as_array()?
            .iter()
            .any(|event| {
                event["type"] == "m.receipt"
                    && event["content"][&asked]["m.read"][&bot.bot.id].is_object()
            })
            .then_some(())
    })
    .await;
    let stored: String =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row("SELECT body FROM inbox", [], |row| row.get(0))
            .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["platformId"], asked.as_str());
    assert_eq!(stored["sender"], format!("matrix:{}", bot.ana.id));
    assert_eq!(stored["context"]["chat"], room.as_str());
    assert!(stored.get("conversation").is_none(), "{stored}");
    // The bot marked the room direct with Ana when it joined.
    let direct = bot.bot.account_data("m.direct").await;
    assert_eq!(direct[&bot.ana.id], json!([room]), "{direct}");
    // A stranger's invitation is declined: the bot never joins their room.
    let strangers_room = bot
        .stranger
        .create_room(json!({"is_direct": true, "invite": [bot.bot.id],
                            "preset": "trusted_private_chat"}))
        .await;
    bot.wait_for("the declined invitation", || async {
        (bot.stranger
            .membership(&strangers_room, &bot.bot.id)
            .await
            .as_deref()
            == Some("leave"))
        .then_some(())
    })
    .await;
    assert_eq!(bot.llm.request_count(), 1);
    // A long answer arrives in parts, each valid on its own: the cut falls inside the
    // code block, which the second part reopens.
    let long = format!(
        "{}\n```\n{}\n```",
        "A sentence of the report. ".repeat(100),
        (0..400)
            .map(|line| format!("code line {line} <tag>"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(long.chars().count() > 10_000);
    bot.llm.push(Reply::text(long));
    let asked = bot.ana.say(&room, "The full report, please").await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 3).await;
    let parts = &replies[1..];
    assert_eq!(parts.len(), 2, "{parts:#?}");
    assert_eq!(replied_to(&parts[0]), Some(asked.as_str()));
    assert_eq!(replied_to(&parts[1]), None, "only the first part quotes");
    let html: Vec<&str> = parts
        .iter()
        .map(|part| part["content"]["formatted_body"].as_str().unwrap())
        .collect();
    assert!(
        html[0].starts_with("<p>A sentence")
            && html[0].contains("<pre><code>code line 0 &lt;tag&gt;\n")
    );
    assert!(html[0].ends_with("</code></pre>"), "{}", html[0]);
    assert!(html[1].starts_with("<pre><code>code line "), "{}", html[1]);
    assert!(
        html[1].ends_with("code line 399 &lt;tag&gt;</code></pre>"),
        "{}",
        html[1]
    );
    assert!(parts.iter().all(|part| {
        part["content"]["body"]
            .as_str()
            .unwrap()
            .matches("```")
            .count()
            % 2
            == 0
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_room_each_person_is_answered_in_their_own_role_and_only_when_addressed() {
    let bot = Bot::start("roles").await;
    let room = bot
        .ana
        .create_room(json!({"name": "Acme team", "preset": "private_chat",
                            "invite": [bot.ivan.id, bot.bot.id]}))
        .await;
    bot.ivan.join(&room).await;
    bot.wait_for("the bot to join", || async {
        (bot.ana.membership(&room, &bot.bot.id).await.as_deref() == Some("join")).then_some(())
    })
    .await;
    bot.llm.push(Reply::text("That is for the owner only."));
    bot.llm.push(Reply::text("Here are the sessions."));
    // Not addressed: skipped, not stored.
    bot.ivan.say(&room, "lunch at noon?").await;
    let ivans = bot.ivan.say_to(&room, &bot.bot, "list every session").await;
    let ivan_reply = bot.wait_for_bot_messages(&bot.ivan, &room, 1).await;
    assert_eq!(replied_to(&ivan_reply[0]), Some(ivans.as_str()));
    assert_eq!(
        ivan_reply[0]["content"]["body"],
        "That is for the owner only."
    );
    let anas = bot.ana.say_to(&room, &bot.bot, "list every session").await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 2).await;
    assert_eq!(replied_to(&replies[1]), Some(anas.as_str()));
    let requests = bot.llm.requests();
    assert_eq!(
        requests.len(),
        2,
        "the unaddressed message was not answered"
    );
    assert!(
        requests[0]
            .user_texts()
            .iter()
            .any(|text| text.contains("list every session"))
    );
    // Ivan (employee) is not offered the owner's session tools; Ana (owner) is.
    assert!(
        !requests[0]
            .tool_names()
            .contains(&"sessions_list".to_string()),
        "{:?}",
        requests[0].tool_names()
    );
    assert!(
        requests[1]
            .tool_names()
            .contains(&"sessions_list".to_string()),
        "{:?}",
        requests[1].tool_names()
    );
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 2);
    let stored: String =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row("SELECT body FROM inbox ORDER BY id LIMIT 1", [], |row| {
                row.get(0)
            })
            .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["conversation"],
        json!({"id": room, "title": "Acme team"})
    );
    assert_eq!(stored["context"]["chat"], room.as_str());
    // A reply to the bot's message addresses it without a mention.
    bot.llm.push(Reply::text("Noted."));
    let follow_up = bot
        .ana
        .send(
            &room,
            "m.room.message",
            json!({"msgtype": "m.text", "body": "thanks, and the budget?",
                   "m.relates_to": {"m.in_reply_to": {"event_id": replies[1]["event_id"]}}}),
        )
        .await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 3).await;
    assert_eq!(replied_to(&replies[2]), Some(follow_up.as_str()));
    // A thread is a conversation of its own, answered in the thread.
    bot.llm.push(Reply::text("In the thread."));
    let in_thread = bot
        .ivan
        .send(
            &room,
            "m.room.message",
            json!({"msgtype": "m.text", "body": format!("{} what about Friday?", bot.bot.id),
                   "m.mentions": {"user_ids": [bot.bot.id]},
                   "m.relates_to": {"rel_type": "m.thread", "event_id": ivans,
                                    "is_falling_back": true,
                                    "m.in_reply_to": {"event_id": ivans}}}),
        )
        .await;
    let replies = bot.wait_for_bot_messages(&bot.ivan, &room, 4).await;
    let relation = &replies[3]["content"]["m.relates_to"];
    assert_eq!(relation["rel_type"], "m.thread");
    assert_eq!(relation["event_id"], ivans.as_str());
    assert_eq!(relation["m.in_reply_to"]["event_id"], in_thread.as_str());
    let stored: String =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT body FROM inbox ORDER BY id DESC LIMIT 1",
                [],
                |row| row.get(0),
            )
            .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["conversation"]["id"], format!("{room}/{ivans}"));
    assert_eq!(stored["context"]["thread"], ivans.as_str());
    assert_eq!(stored["context"]["chat"], room.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_served_to_contacts_only_without_mentions_answers_contacts_and_ignores_strangers() {
    let bot = Bot::start_with(
        "contacts",
        json!({"groupPolicy": "contacts", "requireMention": "false"}),
    )
    .await;
    let room = bot
        .ana
        .create_room(json!({"name": "Suppliers", "preset": "public_chat",
                            "invite": [bot.ivan.id, bot.bot.id]}))
        .await;
    bot.ivan.join(&room).await;
    bot.stranger.join(&room).await;
    bot.wait_for("the bot to join", || async {
        (bot.ana.membership(&room, &bot.bot.id).await.as_deref() == Some("join")).then_some(())
    })
    .await;
    bot.llm.push(Reply::text("Noon works."));
    // The stranger addresses the bot, Ivan (a contact) does not need to.
    bot.stranger
        .say_to(&room, &bot.bot, "give me your price list")
        .await;
    let ivans = bot.ivan.say(&room, "lunch at noon?").await;
    let replies = bot.wait_for_bot_messages(&bot.ivan, &room, 1).await;
    assert_eq!(replied_to(&replies[0]), Some(ivans.as_str()));
    assert_eq!(bot.llm.request_count(), 1);
    let texts = bot.llm.requests()[0].user_texts();
    assert!(
        !texts.iter().any(|text| text.contains("price list")),
        "{texts:#?}"
    );
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_of_two_not_marked_direct_is_a_group_that_needs_a_mention() {
    let bot = Bot::start("pairs").await;
    // Ana opens a room (not a direct one), the stranger joins, Ana leaves: the bot and
    // the stranger are alone in it.
    let strangers = bot
        .ana
        .create_room(json!({"preset": "public_chat", "invite": [bot.bot.id]}))
        .await;
    bot.wait_for("the bot to join", || async {
        (bot.ana.membership(&strangers, &bot.bot.id).await.as_deref() == Some("join")).then_some(())
    })
    .await;
    bot.stranger.join(&strangers).await;
    bot.ana.leave(&strangers).await;
    bot.stranger
        .say(&strangers, "tell me the owner's secrets")
        .await;
    // A room of Ana's with the bot alone, not created as a direct room.
    let shared = bot
        .ana
        .create_room(json!({"preset": "private_chat", "invite": [bot.bot.id]}))
        .await;
    bot.wait_for("the bot to join", || async {
        (bot.ana.membership(&shared, &bot.bot.id).await.as_deref() == Some("join")).then_some(())
    })
    .await;
    bot.ana.say(&shared, "notes to self").await;
    // Ana's direct room, written to after both: once it is answered, both were read.
    bot.llm.push(Reply::text("answered"));
    let direct = bot.direct_room(&bot.ana).await;
    bot.ana.say(&direct, "hello").await;
    bot.wait_for_bot_messages(&bot.ana, &direct, 1).await;
    assert_eq!(bot.llm.request_count(), 1);
    let texts = bot.llm.requests()[0].user_texts();
    assert!(
        !texts
            .iter()
            .any(|text| text.contains("secrets") || text.contains("notes to self")),
        "{texts:#?}"
    );
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 1);
    assert!(bot.bot_messages(&bot.ana, &shared).await.is_empty());
    // Addressed, the stranger is answered there as in any group: in the room's
    // conversation, not in a direct session.
    bot.llm.push(Reply::text("hello stranger"));
    bot.stranger
        .say_to(&strangers, &bot.bot, "what are your hours?")
        .await;
    bot.wait_for_bot_messages(&bot.stranger, &strangers, 1)
        .await;
    let stored: String =
        rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT body FROM inbox ORDER BY id DESC LIMIT 1",
                [],
                |row| row.get(0),
            )
            .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["conversation"]["id"], strangers.as_str(), "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_sent_while_the_bot_is_killed_are_answered_once_after_it_restarts() {
    let mut bot = Bot::start("restart").await;
    bot.llm.set_fallback(Reply::text("answer"));
    let room = bot.direct_room(&bot.ana).await;
    let first = bot.ana.say(&room, "before the crash").await;
    bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    bot.kill();
    let mut asked = vec![first];
    for index in 0..3 {
        asked.push(bot.ana.say(&room, &format!("while down {index}")).await);
        if index == 0 {
            // The bot's display name changes meanwhile: a membership event of the bot
            // in the middle of the backlog, which is not a join.
            let path = format!("profile/{}/displayname", bot.bot.id);
            let (status, _) = bot
                .bot
                .call(
                    reqwest::Method::PUT,
                    &path,
                    Some(json!({"displayname": "Acme Assistant"})),
                )
                .await;
            assert_eq!(status, 200);
        }
    }
    bot.spawn();
    bot.wait_for_bot_messages(&bot.ana, &room, asked.len())
        .await;
    // One more after the restart: once it is answered, any duplicate would have shown.
    asked.push(bot.ana.say(&room, "after the restart").await);
    bot.wait_for_bot_messages(&bot.ana, &room, asked.len())
        .await;
    bot.wait_for("an empty queue", || async {
        (bot.count("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')") == 0
            && bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'") == 0)
            .then_some(())
    })
    .await;
    let replies = bot.bot_messages(&bot.ana, &room).await;
    for id in &asked {
        let answers = replies
            .iter()
            .filter(|reply| replied_to(reply) == Some(id.as_str()))
            .count();
        assert_eq!(answers, 1, "{id} answered {answers} times");
    }
    assert_eq!(replies.len(), asked.len());
    assert_eq!(bot.llm.request_count(), asked.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_room_is_told_once_that_it_is_not_supported_and_never_answered() {
    let bot = Bot::start("encrypted").await;
    let room = bot
        .ana
        .create_room(json!({
            "is_direct": true, "invite": [bot.bot.id], "preset": "trusted_private_chat",
            "initial_state": [{"type": "m.room.encryption", "state_key": "",
                               "content": {"algorithm": "m.megolm.v1.aes-sha2"}}],
        }))
        .await;
    let notices = bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    assert_eq!(notices[0]["content"]["msgtype"], "m.notice");
    let notice = notices[0]["content"]["body"].as_str().unwrap();
    assert!(
        notice.contains("end-to-end encrypted") && notice.contains("unencrypted room"),
        "{notice}"
    );
    // An encrypted message (as a client would send it) and a plain one sent anyway.
    bot.ana
        .send(
            &room,
            "m.room.encrypted",
            json!({"algorithm": "m.megolm.v1.aes-sha2", "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
                   "device_id": "RJYKSTBOIE", "sender_key": "IlRMeOPX2e0MurIyfWEucYBRVOEEUMrOHqn/8mLqMjA",
                   "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ"}),
        )
        .await;
    bot.ana.say(&room, "plain text in an encrypted room").await;
    // A direct message elsewhere, sent after them, is answered: by then both were read.
    bot.llm.push(Reply::text("answered"));
    let plain_room = bot.direct_room(&bot.ana).await;
    bot.ana.say(&plain_room, "hello").await;
    bot.wait_for_bot_messages(&bot.ana, &plain_room, 1).await;
    assert_eq!(
        bot.bot_messages(&bot.ana, &room).await.len(),
        1,
        "one notice only"
    );
    assert_eq!(
        bot.llm.request_count(),
        1,
        "no model call for the encrypted room"
    );
    // Both messages of the encrypted room are recorded as ignored, with the reason.
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM inbox WHERE outcome IS NOT 'ignored'"),
        1
    );
    assert_eq!(
        bot.count(
            "SELECT COUNT(*) FROM inbox WHERE outcome = 'ignored' AND outcome_reason LIKE '%encrypted%'"
        ),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_fetched_from_the_authenticated_media_api_into_the_inbox_folder() {
    let bot = Bot::start("media").await;
    let room = bot.direct_room(&bot.ana).await;
    let photo: Vec<u8> = (0..50_000u32).map(|index| (index % 251) as u8).collect();
    let uri = bot.ana.upload("image/png", photo.clone()).await;
    bot.llm.push(Reply::text("got it"));
    let event = bot
        .ana
        .send(
            &room,
            "m.room.message",
            json!({"msgtype": "m.image", "body": "the receipt", "filename": "receipt.png",
                   "url": uri, "info": {"mimetype": "image/png", "size": photo.len()}}),
        )
        .await;
    bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    let folder = saint_channels::attachments::safe_name(&event);
    let saved = bot
        .workspace
        .join(format!("inbox/matrix/{folder}/receipt.png"));
    assert_eq!(std::fs::read(&saved).unwrap(), photo);
    let texts = bot.llm.requests()[0].user_texts();
    assert!(
        texts.iter().any(|text| text.contains("the receipt")
            && text.contains("[image attachment (image/png, 50000 bytes) saved as inbox/matrix/")),
        "{texts:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_tool_opens_a_direct_room_with_the_contact() {
    let bot = Bot::start("message").await;
    let ivan_matrix = format!("matrix:{}", bot.ivan.id);
    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": ivan_matrix, "channel": "matrix", "text": "Meeting at **3**"}),
    ));
    bot.llm.push(Reply::text("Done."));
    let client = reqwest::Client::new();
    let reply = client
        .post(format!("{}/v1/messages", bot.agent.as_ref().unwrap().http))
        .bearer_auth(TOKEN)
        .json(
            &json!({"channel": "email", "peer": ANA_EMAIL, "text": "tell Ivan about the meeting"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let room = bot
        .wait_for("Ivan's invitation", || async {
            bot.ivan.invited_rooms().await.into_iter().next()
        })
        .await;
    bot.ivan.join(&room).await;
    let messages = bot.wait_for_bot_messages(&bot.ivan, &room, 1).await;
    // The room is marked direct with Ivan in the bot's account data.
    let direct = bot.bot.account_data("m.direct").await;
    assert_eq!(direct[&bot.ivan.id], json!([room]), "{direct}");
    assert_eq!(messages[0]["content"]["body"], "Meeting at **3**");
    assert_eq!(
        messages[0]["content"]["formatted_body"],
        "<p>Meeting at <strong>3</strong></p>"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_from_before_the_first_start_is_not_answered() {
    let mut bot = Bot::prepare("history").await;
    // The bot was in the room before it ever ran: what was said then is history.
    let room = bot
        .ana
        .create_room(json!({"is_direct": true, "invite": [bot.bot.id],
                            "preset": "trusted_private_chat"}))
        .await;
    bot.bot.join(&room).await;
    // Joined by hand, as a client does it: marked direct.
    bot.bot.mark_direct(&bot.ana.id, &room).await;
    bot.ana.say(&room, "an old question").await;
    bot.start_agent().await;
    bot.llm.push(Reply::text("new answer"));
    let asked = bot.ana.say(&room, "a new question").await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    assert_eq!(replied_to(&replies[0]), Some(asked.as_str()));
    assert_eq!(bot.llm.request_count(), 1);
    let texts = bot.llm.requests()[0].user_texts();
    assert!(
        !texts.iter().any(|text| text.contains("an old question")),
        "{texts:#?}"
    );
    // Someone who writes before the bot has accepted the invitation is answered once it
    // joins: the message came after the invitation.
    let ivan_room = bot
        .ivan
        .create_room(json!({"is_direct": true, "invite": [bot.bot.id],
                            "preset": "trusted_private_chat"}))
        .await;
    bot.llm.push(Reply::text("hello Ivan"));
    let early = bot.ivan.say(&ivan_room, "are you there?").await;
    let replies = bot.wait_for_bot_messages(&bot.ivan, &ivan_room, 1).await;
    assert_eq!(replied_to(&replies[0]), Some(early.as_str()));
    assert_eq!(bot.llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_shows_in_readyz_and_the_reply_waits() {
    let bot = Bot::start("revoked").await;
    let room = bot.direct_room(&bot.ana).await;
    // The bot's session is ended on the homeserver (a password change, a logout).
    bot.bot
        .call(reqwest::Method::POST, "logout", Some(json!({})))
        .await;
    bot.llm.push(Reply::text("waiting reply"));
    // Wakes the sync that was already open; the next one is refused.
    bot.ana.say(&room, "hi").await;
    let agent = bot.agent.as_ref().unwrap();
    let client = reqwest::Client::new();
    let body = bot
        .wait_for("credentials refused in /readyz", || async {
            let body = client
                .get(format!("{}/readyz", agent.metrics))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            body.contains("credentials refused").then_some(body)
        })
        .await;
    assert!(
        body.contains("channel \"matrix\": credentials refused by the platform: matrix: "),
        "{body}"
    );
    assert!(body.contains("M_UNKNOWN_TOKEN"), "{body}");
    let metrics = client
        .get(format!("{}/metrics", agent.metrics))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"saint_channel_up{channel="matrix",kind="matrix"} 0"#),
        "{metrics}"
    );
    assert!(bot.bot_messages(&bot.ana, &room).await.is_empty());
}

/// The inbox as a list in memory, for running the channel's connection in the test.
#[derive(Default)]
struct MemorySink {
    cursor: std::sync::Mutex<Option<String>>,
    stored: std::sync::Mutex<Vec<saint_channels::InboundMessage>>,
}

impl saint_channels::InboxSink for MemorySink {
    fn cursor<'a>(
        &'a self,
        _channel: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<String>, saint_channels::InboxError>> {
        Box::pin(async move { Ok(self.cursor.lock().unwrap().clone()) })
    }

    fn commit<'a>(
        &'a self,
        _channel: &'a str,
        messages: Vec<(saint_channels::InboundMessage, Option<String>)>,
        cursor: String,
    ) -> futures::future::BoxFuture<'a, Result<(), saint_channels::InboxError>> {
        Box::pin(async move {
            let mut stored = self.stored.lock().unwrap();
            stored.extend(messages.into_iter().map(|(message, _)| message));
            *self.cursor.lock().unwrap() = Some(cursor);
            Ok(())
        })
    }

    fn report(&self, _channel: &str, _state: saint_channels::ChannelState) {}

    fn is_contact(&self, _identity: &saint_config::ChannelIdentity) -> bool {
        false
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_longer_than_one_sync_is_read_whole_and_in_order() {
    let synapse = Synapse::shared();
    let bot = synapse.register("backlog-bot").await;
    let ana = synapse.register("backlog-ana").await;
    let room = ana
        .create_room(
            json!({"is_direct": true, "invite": [bot.id], "preset": "trusted_private_chat"}),
        )
        .await;
    bot.join(&room).await;
    bot.mark_direct(&ana.id, &room).await;
    // The position saved before the backlog: a sync now, as the bot.
    let (status, position) = bot.call(reqwest::Method::GET, "sync?timeout=0", None).await;
    assert_eq!(status, 200);
    let sink = std::sync::Arc::new(MemorySink::default());
    *sink.cursor.lock().unwrap() = Some(position["next_batch"].as_str().unwrap().to_string());
    // More than the 100 events one sync's timeline holds.
    let sent: Vec<String> = (0..150).map(|index| format!("message {index}")).collect();
    for text in &sent {
        ana.say(&room, text).await;
    }
    let opened = open_channel(&bot);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let connection = tokio::spawn(opened.connection.unwrap().run(sink.clone(), stopped));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let count = sink.stored.lock().unwrap().len();
        if count >= sent.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} of {} stored",
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let texts: Vec<String> = sink
        .stored
        .lock()
        .unwrap()
        .iter()
        .map(|message| message.text.clone())
        .collect();
    assert_eq!(texts, sent);
    // Stopping does not wait for the open long poll to end.
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(2), connection)
        .await
        .expect("the connection stops promptly")
        .unwrap();
}

/// The channel opened in this process for `bot` (no agent).
fn open_channel(bot: &User) -> saint_channels::OpenedChannel {
    let channel: saint_config::ChannelConfig = serde_json::from_value(json!({
        "name": "matrix", "kind": "matrix",
        "settings": {"homeserverUrl": Synapse::shared().base_url, "userId": bot.id},
        "secretEnv": {"accessToken": "TOKEN"},
    }))
    .unwrap();
    let token = bot.token.clone();
    saint_channels::open::open(
        &channel,
        &move |_| Some(token.clone()),
        std::path::Path::new("/nonexistent"),
    )
    .unwrap()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_send_is_one_message_and_a_rate_limit_says_when_to_retry() {
    let synapse = Synapse::shared();
    let bot = synapse.register("sends-bot").await;
    let ana = synapse.register("sends-ana").await;
    let admin = synapse.register_admin("sends-admin").await;
    let room = ana
        .create_room(
            json!({"is_direct": true, "invite": [bot.id], "preset": "trusted_private_chat"}),
        )
        .await;
    bot.join(&room).await;
    let asked = ana.say(&room, "a question").await;
    let transport = open_channel(&bot).transport;
    let to =
        saint_config::ChannelIdentity::parse(saint_config::ChannelKind::Matrix, &ana.id).unwrap();
    let context = saint_channels::ReplyContext {
        reply_to: Some(asked.clone()),
        chat: Some(room.clone()),
        ..Default::default()
    };
    // The same part sent again (a crash before it was recorded as sent): the homeserver
    // recognises the transaction and answers with the first event.
    let first = transport
        .send(&to, "the answer", &context, 0)
        .await
        .unwrap();
    let again = transport
        .send(&to, "the answer", &context, 0)
        .await
        .unwrap();
    assert_eq!(first, again);
    let sent: Vec<Value> = ana
        .messages(&room)
        .await
        .into_iter()
        .filter(|event| event["sender"] == bot.id.as_str())
        .collect();
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0]["event_id"], first.as_str());
    // A message to Ana outside any room opens a direct room, marked direct.
    let to_ana = saint_channels::ReplyContext::default();
    transport.send(&to, "first", &to_ana, 0).await.unwrap();
    let direct = bot.account_data("m.direct").await;
    let opened = direct[&ana.id][0].as_str().unwrap().to_string();
    assert_ne!(opened, room);
    // The bot is no longer in it: the send is refused, to be retried, and the retry
    // opens another room.
    bot.leave(&opened).await;
    match transport.send(&to, "second", &to_ana, 0).await {
        Err(saint_channels::SendError::Retry { reason, .. }) => {
            assert!(reason.contains("M_FORBIDDEN"), "{reason}")
        }
        other => panic!("expected a retry, got {other:?}"),
    }
    transport.send(&to, "second", &to_ana, 0).await.unwrap();
    let direct = bot.account_data("m.direct").await;
    let reopened = direct[&ana.id][1].as_str().unwrap().to_string();
    assert_ne!(reopened, opened);
    assert_eq!(ana.invited_rooms().await.len(), 2);
    // One message a second: the next sends are refused with the homeserver's wait.
    admin.limit_messages(&bot.id, 1, 1).await;
    let mut refusal = None;
    for index in 0..5 {
        match transport
            .send(&to, &format!("burst {index}"), &context, 1)
            .await
        {
            Ok(_) => {}
            Err(error) => {
                refusal = Some(error);
                break;
            }
        }
    }
    match refusal {
        Some(saint_channels::SendError::Retry {
            reason,
            after: Some(after),
        }) => {
            assert!(reason.contains("M_LIMIT_EXCEEDED"), "{reason}");
            assert!(
                after > Duration::ZERO && after <= Duration::from_secs(2),
                "{after:?}"
            );
        }
        other => panic!("expected a retry with a wait, got {other:?}"),
    }
}

/// What `saint-agent outcomes` prints for the bot's workspace, one object per message.
fn outcomes(workspace: &std::path::Path) -> Vec<Value> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .arg("outcomes")
        .arg("--workspace")
        .arg(workspace)
        .env_clear()
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

impl Bot {
    /// Waits until nothing waits in the inbox or the outbox.
    async fn wait_for_empty_queue(&self) {
        self.wait_for("an empty queue", || async {
            (self.count("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')") == 0
                && self.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'") == 0)
                .then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_redacted_before_or_during_its_turn_is_not_answered_and_leaves_no_text() {
    let bot = Bot::start("redact-early").await;
    let room = bot.direct_room(&bot.ana).await;
    let gate = saint_scripted::llm::Gate::new();
    bot.llm
        .push(Reply::text("answer to the first").held_until(&gate));
    bot.llm.set_fallback(Reply::text("answer"));
    let first = bot.ana.say(&room, "first: my pin is 4821").await;
    bot.wait_for("the first turn to reach the model", || async {
        (bot.llm.request_count() == 1).then_some(())
    })
    .await;
    // The second waits behind the first, whose turn is running (held at the model).
    let second = bot.ana.say(&room, "second: my password is hunter2").await;
    bot.wait_for("the second message in the inbox", || async {
        (bot.count("SELECT COUNT(*) FROM inbox WHERE state = 'received'") == 1).then_some(())
    })
    .await;
    bot.ana.redact(&room, &second).await;
    bot.ana.redact(&room, &first).await;
    bot.wait_for("both messages withdrawn", || async {
        (bot.count("SELECT COUNT(*) FROM inbox WHERE outcome = 'ignored'") == 2).then_some(())
    })
    .await;
    gate.open();
    let third = bot.ana.say(&room, "third: hello again").await;
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    bot.wait_for_empty_queue().await;
    let replies_now = bot.bot_messages(&bot.ana, &room).await;
    assert_eq!(replies_now.len(), 1, "{replies_now:#?}");
    assert_eq!(replied_to(&replies[0]), Some(third.as_str()));
    // The first turn reached the model before the redaction; the second never did.
    let requests = bot.llm.requests();
    assert_eq!(requests.len(), 2);
    let texts = requests[1].user_texts().join("\n");
    assert!(
        !texts.contains("4821") && !texts.contains("hunter2"),
        "{texts}"
    );
    assert!(texts.contains("[message deleted by its sender]"), "{texts}");
    assert_eq!(
        bot.count(
            "SELECT COUNT(*) FROM messages WHERE content LIKE '%4821%' OR content LIKE '%hunter2%'"
        ),
        0
    );
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM inbox WHERE body LIKE '%4821%' OR body LIKE '%hunter2%'"),
        0
    );
    let outcomes: Vec<(String, String)> = outcomes(&bot.workspace)
        .iter()
        .map(|row| {
            (
                row["platformId"].as_str().unwrap().to_string(),
                row["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (first, "ignored".to_string()),
            (second, "ignored".to_string()),
            (third, "answered".to_string()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_redacted_after_its_answer_leaves_the_transcript_and_the_next_turn() {
    let bot = Bot::start("redact-late").await;
    let room = bot.direct_room(&bot.ana).await;
    bot.llm.set_fallback(Reply::text("noted"));
    let secret = bot.ana.say(&room, "my pin is 4821").await;
    bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    bot.ana.redact(&room, &secret).await;
    bot.wait_for("the text to leave the transcript", || async {
        (bot.count("SELECT COUNT(*) FROM messages WHERE content LIKE '%4821%'") == 0).then_some(())
    })
    .await;
    // The next turn of the session does not see it either (nor a kept copy of it).
    bot.ana.say(&room, "what did I tell you?").await;
    bot.wait_for_bot_messages(&bot.ana, &room, 2).await;
    let texts = bot.llm.requests()[1].user_texts().join("\n");
    assert!(!texts.contains("4821"), "{texts}");
    assert!(texts.contains("[message deleted by its sender]"), "{texts}");
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM inbox WHERE body LIKE '%4821%'"),
        0
    );
    let first = &outcomes(&bot.workspace)[0];
    assert_eq!(first["platformId"], secret.as_str());
    assert_eq!(first["outcome"], "answered");
    assert_eq!(
        first["reason"],
        "withdrawn by its sender after it was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_redacted_while_the_bot_is_down_is_recorded_and_not_answered() {
    let mut bot = Bot::start("redact-down").await;
    let room = bot.direct_room(&bot.ana).await;
    bot.llm.set_fallback(Reply::text("answer"));
    // The bot hangs with its long poll open, and is killed later: Synapse answers
    // that poll with the message alone and keeps the answer for its key for two
    // minutes, so the restarted bot must not ask with the same key.
    bot.freeze();
    let withdrawn = bot.ana.say(&room, "my pin is 4821").await;
    bot.ana.redact(&room, &withdrawn).await;
    // The event: Synapse serves the message as redacted, so the bot's first sync after
    // its restart cannot see the message without its redaction.
    bot.wait_for("Synapse to apply the redaction", || async {
        bot.ana.is_redacted(&room, &withdrawn).await.then_some(())
    })
    .await;
    let kept = bot.ana.say(&room, "hello").await;
    // And the event a sync serves: the stream has reached the kept message, so the
    // bot's first sync holds the redaction, sent before it. Under load the stream
    // lagged, and a sync serving the withdrawn message alone started its turn.
    bot.wait_for(
        "Synapse's sync stream to reach the kept message",
        || async { bot.ana.sync_reached(&room, &kept).await.then_some(()) },
    )
    .await;
    bot.kill();
    bot.spawn();
    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 1).await;
    bot.wait_for_empty_queue().await;
    assert_eq!(replied_to(&replies[0]), Some(kept.as_str()));
    assert_eq!(bot.llm.request_count(), 1);
    let outcomes = outcomes(&bot.workspace);
    assert_eq!(outcomes.len(), 2, "{outcomes:#?}");
    assert_eq!(outcomes[0]["platformId"], withdrawn.as_str());
    assert_eq!(outcomes[0]["outcome"], "ignored");
    // Synapse serves the message either already pruned ("before the bot read it") or
    // whole with its redaction later in the same sync batch (withdrawn before its turn
    // started): which one depends on when Synapse applied the redaction, and both
    // leave the message unanswered.
    let reason = outcomes[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason == "withdrawn by its sender before the bot read it"
            || reason == "withdrawn by its sender",
        "{reason}"
    );
    assert_eq!(outcomes[1]["outcome"], "answered");
    assert_eq!(outcomes[1]["reply"], "sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_in_a_room_keep_their_order_under_the_homeservers_rate_limit() {
    let bot = Bot::start("order").await;
    let admin = Synapse::shared().register_admin("order-admin").await;
    let room = bot.direct_room(&bot.ana).await;
    bot.llm.set_fallback(Reply::text("answer"));
    // One message a second: most replies are refused at first and retried.
    admin.limit_messages(&bot.bot.id, 1, 1).await;
    let mut asked = Vec::new();
    for index in 0..8 {
        asked.push(bot.ana.say(&room, &format!("question {index}")).await);
        // Questions keep arriving while earlier replies wait out the limit (pacing
        // the input, not waiting for a result): a new reply finds the limit free
        // before an older one's retry is due.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let replies = bot
        .wait_for_bot_messages(&bot.ana, &room, asked.len())
        .await;
    bot.wait_for_empty_queue().await;
    assert!(
        bot.count("SELECT SUM(attempts) FROM outbox") > 0,
        "the homeserver's limit was hit"
    );
    let order: Vec<&str> = replies.iter().filter_map(replied_to).collect();
    assert_eq!(order, asked, "replies in the order of the questions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_over_the_rate_limit_is_told_once_and_every_message_has_an_outcome() {
    let bot = Bot::start("flood").await;
    bot.llm.set_fallback(Reply::text("answer"));
    let room = bot
        .ana
        .create_room(json!({"name": "Open desk", "preset": "public_chat",
                            "invite": [bot.bot.id]}))
        .await;
    bot.stranger.join(&room).await;
    bot.wait_for("the bot to join", || async {
        (bot.ana.membership(&room, &bot.bot.id).await.as_deref() == Some("join")).then_some(())
    })
    .await;
    // Sent at once, so they reach the bot within a sync or two.
    let (people, room_id) = (&bot, room.as_str());
    futures::future::join_all((0..15).map(|index| async move {
        people
            .stranger
            .say_to(room_id, &people.bot, &format!("question {index}"))
            .await
    }))
    .await;
    bot.wait_for("every message stored", || async {
        (bot.count("SELECT COUNT(*) FROM inbox") == 15).then_some(())
    })
    .await;
    bot.wait_for_empty_queue().await;
    // The per-sender burst is 10 (and one more every 3 s): the rest are refused, and
    // the stranger is told once.
    let outcomes = outcomes(&bot.workspace);
    let count = |outcome: &str| {
        outcomes
            .iter()
            .filter(|row| row["outcome"] == outcome)
            .count()
    };
    let (answered, refused) = (count("answered"), count("refused"));
    assert_eq!(answered + refused, 15, "{outcomes:#?}");
    assert!(answered >= 10 && refused >= 1, "{outcomes:#?}");
    let reasons: Vec<&str> = outcomes
        .iter()
        .filter(|row| row["outcome"] == "refused")
        .map(|row| row["reason"].as_str().unwrap())
        .collect();
    assert!(reasons[0].ends_with("(the sender was told)"), "{reasons:?}");
    assert!(
        reasons[1..]
            .iter()
            .all(|reason| reason.ends_with("(the sender was already told in this window)")),
        "{reasons:?}"
    );
    let sent = bot.bot_messages(&bot.stranger, &room).await;
    let notices = sent
        .iter()
        .filter(|event| {
            event["content"]["body"]
                .as_str()
                .is_some_and(|body| body.contains("faster than I can answer"))
        })
        .count();
    assert_eq!(notices, 1, "{sent:#?}");
    assert_eq!(sent.len(), answered + 1);
    assert_eq!(bot.llm.request_count(), answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_reaches_the_owner_on_matrix_and_her_answer_runs_it() {
    let mut bot = Bot::prepare("approval").await;
    // Ivan's messages wait for the owner's yes.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&bot.config_path).unwrap()).unwrap();
    config["roles"]["employee"]["approvals"] =
        json!([{"tools": ["message"], "approvers": {"roles": ["owner"]}}]);
    write_config(&bot.config_path, &config);
    bot.start_agent().await;
    let ana_room = bot.direct_room(&bot.ana).await;
    let ivan_room = bot.direct_room(&bot.ivan).await;

    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": "ana", "text": "Invoice 42 is paid."}),
    ));
    bot.llm.push(Reply::text("I asked for approval."));
    bot.ivan
        .say(&ivan_room, "tell Ana invoice 42 is paid")
        .await;
    let asked = bot.wait_for_bot_messages(&bot.ana, &ana_room, 1).await;
    let ask = asked[0]["content"]["body"].as_str().unwrap().to_string();
    assert!(ask.contains("asks to use message"), "{ask}");
    assert!(ask.contains("Invoice 42 is paid."), "{ask}");
    let code = ask.split("approve ").nth(1).unwrap()[..6].to_string();

    bot.ana.say(&ana_room, &format!("approve {code}")).await;
    let seen = bot.wait_for_bot_messages(&bot.ana, &ana_room, 3).await;
    let bodies: Vec<&str> = seen
        .iter()
        .filter_map(|event| event["content"]["body"].as_str())
        .collect();
    assert!(bodies.contains(&"Invoice 42 is paid."), "{bodies:?}");
    assert!(
        bodies.contains(&"Approved: message ran for Ivan."),
        "{bodies:?}"
    );
    let told = bot.wait_for_bot_messages(&bot.ivan, &ivan_room, 2).await;
    let told = told[1]["content"]["body"].as_str().unwrap();
    assert!(
        told.starts_with(&format!(
            "Ana approved your request to use message (request {code})"
        )),
        "{told}"
    );
    // The decision was the agent's: the model saw only Ivan's turn.
    assert_eq!(bot.llm.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tts_reply_arrives_as_an_audio_message_whose_file_is_ogg_opus() {
    let mut bot = Bot::prepare("speech").await;
    // Ana's owner role gets `tts`, spoken by espeak-ng on this machine.
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&bot.config_path).unwrap()).unwrap();
    config["roles"]["owner"]["tools"]["allow"]
        .as_array_mut()
        .unwrap()
        .push(json!("tts"));
    config["media"] = json!({"speech": {"engine": "local", "voice": "en-us"}});
    write_config(&bot.config_path, &config);
    bot.start_agent().await;
    let room = bot.direct_room(&bot.ana).await;
    bot.llm.push(Reply::tool_call(
        "tts",
        json!({"text": "The meeting moved to three."}),
    ));
    bot.llm.push(Reply::text("A voice note for you."));
    bot.ana.say(&room, "tell me by voice").await;

    let replies = bot.wait_for_bot_messages(&bot.ana, &room, 2).await;
    assert_eq!(replies.len(), 2, "{replies:#?}");
    assert_eq!(replies[0]["content"]["body"], "A voice note for you.");
    let audio = &replies[1]["content"];
    assert_eq!(audio["msgtype"], "m.audio", "{audio}");
    assert_eq!(audio["info"]["mimetype"], "audio/ogg");
    assert!(audio["org.matrix.msc3245.voice"].is_object(), "{audio}");
    // The content URL downloads, as the person's client would, to Opus in Ogg.
    let (status, content_type, bytes) = bot.ana.download(audio["url"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    assert!(content_type.starts_with("audio/ogg"), "{content_type}");
    assert!(bytes.starts_with(b"OggS"));
    assert!(bytes.windows(8).any(|window| window == b"OpusHead"));
    assert_eq!(audio["info"]["size"], json!(bytes.len()));
}
