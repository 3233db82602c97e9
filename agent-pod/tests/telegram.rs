//! The Telegram channel end to end: the real agent binary long-polls a scripted Bot
//! API (getUpdates with offsets, sendMessage checked as Telegram HTML) and answers with
//! the scripted model. Ivan (telegram:333333333) is an employee and Marko
//! (telegram:222222222) a manager in the example config.

mod common;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::telegram::{
    self as scripted, BOT_USERNAME, Failure, Group, Person, ScriptedTelegram,
};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000002:AAF-agent-test-token";
const MARKO_TELEGRAM: &str = "222222222";
const WEBHOOK_SECRET: &str = "agent-hook_secret-1";

fn ivan() -> Person {
    Person::new(IVAN_TELEGRAM.parse().unwrap(), "Ivan")
}

fn marko() -> Person {
    Person::new(MARKO_TELEGRAM.parse().unwrap(), "Marko")
}

struct Bot {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    _directory: tempfile::TempDir,
    config_path: PathBuf,
    workspace: PathBuf,
    agent: Option<AgentProcess>,
}

impl Bot {
    async fn start() -> Self {
        Self::start_in(false).await
    }

    /// With `webhook`, the channel takes webhook deliveries instead of polling.
    async fn start_in(webhook: bool) -> Self {
        Self::start_with(webhook, |_| {}).await
    }

    /// Like [`Bot::start_in`], with the config changed by `adjust` first.
    async fn start_with(webhook: bool, adjust: impl FnOnce(&mut Value)) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "telegram", "kind": "telegram",
             "settings": {"apiBaseUrl": telegram.base_url()},
             "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        ]);
        if webhook {
            config["channels"][1]["settings"]["mode"] = json!("webhook");
            config["channels"][1]["secretEnv"]["webhookSecret"] = json!("TG_WEBHOOK_SECRET");
        }
        adjust(&mut config);
        write_config(&config_path, &config);
        let mut bot = Self {
            llm,
            telegram,
            _directory: directory,
            config_path,
            workspace,
            agent: None,
        };
        bot.spawn();
        bot
    }

    fn spawn(&mut self) {
        self.agent = Some(spawn_agent(
            &self.config_path,
            &self.workspace,
            &[
                ("TG_BOT_TOKEN", BOT_TOKEN),
                ("TG_WEBHOOK_SECRET", WEBHOOK_SECRET),
            ],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.child.kill().unwrap(); // SIGKILL
            agent.child.wait().unwrap();
        }
    }

    fn count(&self, sql: &str) -> i64 {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(sql, [], |row| row.get(0))
            .unwrap()
    }

    /// Sends Telegram accepted, by chat.
    fn sent_by_chat(&self) -> BTreeMap<String, Vec<Value>> {
        let mut sent: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for body in self.telegram.sent() {
            sent.entry(body["chat_id"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(body);
        }
        sent
    }

    /// Waits (polling the recorders, bounded) until `done` holds.
    async fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..1200 {
            if done(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out waiting for {what}; telegram saw {:#?}",
            self.telegram
                .requests()
                .iter()
                .map(|request| (&request.method, request.status, &request.body))
                .collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ivan_is_answered_in_his_private_chat_in_telegram_html_with_his_role() {
    let bot = Bot::start().await;
    bot.llm.push(Reply::text(
        "## Today\n**Standup** at 10 & <review> at [noon](https://acme.example/cal)",
    ));
    bot.telegram
        .push_message(scripted::private_text(&ivan(), "What is on today?"));
    assert!(
        bot.telegram.wait_for_sent(1, Duration::from_secs(30)).await,
        "no reply: {:#?}",
        bot.telegram.requests()
    );
    let sent = bot.telegram.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["chat_id"], IVAN_TELEGRAM);
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert_eq!(
        sent[0]["text"],
        "<b>Today</b>\n<b>Standup</b> at 10 &amp; &lt;review&gt; at \
         <a href=\"https://acme.example/cal\">noon</a>"
    );
    assert!(
        sent[0].get("reply_parameters").is_none(),
        "no quote in a private chat"
    );
    assert!(
        bot.telegram
            .requests_of("sendChatAction")
            .iter()
            .any(|request| request.body["chat_id"] == IVAN_TELEGRAM
                && request.body["action"] == "typing")
    );
    // Ivan is an employee: his turn offers the employee's tools, not the manager's.
    let request = &bot.llm.requests()[0];
    let tools = request.tool_names();
    assert!(tools.contains(&"message".to_string()), "{tools:?}");
    assert!(!tools.contains(&"sessions_list".to_string()), "{tools:?}");
    assert!(
        request
            .user_texts()
            .iter()
            .any(|text| text.contains("What is on today?"))
    );
    bot.wait_for("the inbox row answered", |bot| {
        bot.count("SELECT COUNT(*) FROM inbox WHERE state = 'answered'") == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_each_turn_runs_with_its_senders_role() {
    let bot = Bot::start().await;
    let group = Group::new(-1001000000042, "Acme Leads");
    let ask = format!("@{BOT_USERNAME} which sessions are open?");
    // Marko (manager) asks first; the model calls sessions_list, which he may use.
    bot.llm
        .push(Reply::tool_call("sessions_list", json!({})).with_text("Checking."));
    bot.llm.push(Reply::text("Here they are."));
    let (_, marko_message) =
        bot.telegram
            .push_message(scripted::group_text(&group, &marko(), &ask));
    assert!(bot.telegram.wait_for_sent(1, Duration::from_secs(30)).await);
    // Then Ivan (employee) asks the same in the same group; the model tries the same.
    bot.llm
        .push(Reply::tool_call("sessions_list", json!({})).with_text("Checking."));
    bot.llm.push(Reply::text("I cannot list sessions for you."));
    let (_, ivan_message) = bot
        .telegram
        .push_message(scripted::group_text(&group, &ivan(), &ask));
    assert!(bot.telegram.wait_for_sent(2, Duration::from_secs(30)).await);
    // A group message that does not address the bot is never a turn.
    bot.telegram
        .push_message(scripted::group_text(&group, &ivan(), "thanks everyone"));

    let requests = bot.llm.requests();
    assert_eq!(requests.len(), 4, "two turns of two model calls each");
    let marko_tools = requests[0].tool_names();
    let ivan_tools = requests[2].tool_names();
    assert!(
        marko_tools.contains(&"sessions_list".to_string()),
        "Marko's turn: {marko_tools:?}"
    );
    assert!(
        !ivan_tools.contains(&"sessions_list".to_string()),
        "Ivan's turn must not offer a manager's tool: {ivan_tools:?}"
    );
    // The model's call in Ivan's turn was refused, not run.
    let ivan_results = requests[3].tool_results();
    let last = ivan_results.last().expect("a tool result in Ivan's turn");
    assert!(last.1, "sessions_list ran for Ivan: {last:?}");
    let marko_results = requests[1].tool_results();
    assert!(
        marko_results.iter().any(|(_, error)| !error),
        "sessions_list ran for Marko: {marko_results:?}"
    );
    // The mention is not part of what the model read.
    assert!(
        requests[0]
            .user_texts()
            .iter()
            .any(|text| text.contains("which sessions are open?")
                && !text.contains(&format!("@{BOT_USERNAME}")))
    );
    // Both replies went to the group, each quoting the message it answers.
    let sent = bot.telegram.sent();
    let chat = group.id.to_string();
    assert_eq!(sent[0]["chat_id"], chat);
    assert_eq!(sent[0]["reply_parameters"]["message_id"], marko_message);
    assert_eq!(sent[1]["chat_id"], chat);
    assert_eq!(sent[1]["reply_parameters"]["message_id"], ivan_message);
    // Wait for the unaddressed message to be confirmed: it was skipped, not stored.
    bot.wait_for("the last update confirmed", |bot| {
        bot.telegram.pending_updates().is_empty()
    })
    .await;
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 2);
    assert_eq!(bot.llm.request_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_twenty_times_while_polling_every_stored_message_is_answered_exactly_once() {
    const ROUNDS: usize = 20;
    let mut bot = Bot::start().await;
    // A slowly streaming model, so kills land while turns run.
    bot.llm.set_fallback(
        Reply::text(
            "This answer streams slowly, word by word, so a kill lands in the middle of it. "
                .repeat(3),
        )
        .with_chunk_delay(Duration::from_millis(10)),
    );
    let mut chats = Vec::new();
    for round in 0..ROUNDS {
        if round > 0 {
            bot.spawn();
        }
        let before = bot.llm.request_count();
        for sender in 0..3 {
            let person = Person::new(
                500_000_000 + (round * 10 + sender) as i64,
                &format!("Person {round}-{sender}"),
            );
            bot.telegram.push_message(scripted::private_text(
                &person,
                &format!("round {round} sender {sender}"),
            ));
            chats.push(person.id.to_string());
        }
        while bot.llm.request_count() == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5 + (round as u64 * 13) % 60)).await;
        bot.kill();
    }
    // A last run with no kill: every message is fetched (Telegram keeps what was not
    // confirmed) and answered.
    bot.spawn();
    bot.wait_for("every message's reply", |bot| {
        let sent = bot.sent_by_chat();
        chats.iter().all(|chat| sent.contains_key(chat))
    })
    .await;
    bot.wait_for("an empty queue", |bot| {
        bot.count("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')") == 0
            && bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'") == 0
            && bot.telegram.pending_updates().is_empty()
    })
    .await;
    assert_eq!(chats.len(), ROUNDS * 3);
    assert!(
        bot.llm.request_count() > chats.len(),
        "no turn was interrupted"
    );
    let sent = bot.sent_by_chat();
    for chat in &chats {
        assert_eq!(
            sent[chat].len(),
            1,
            "{chat} answered {} times",
            sent[chat].len()
        );
    }
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), (ROUNDS * 3) as i64);
    let stored_user_texts = bot
        .count("SELECT COUNT(*) FROM messages WHERE role = 'user' AND content LIKE '%\"round %'");
    assert_eq!(stored_user_texts, (ROUNDS * 3) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_reply_waits_for_retry_after_and_is_sent_once() {
    let bot = Bot::start().await;
    bot.telegram
        .fail_next("sendMessage", [Failure::too_many_requests(2)]);
    bot.llm.push(Reply::text("after the wait"));
    bot.telegram
        .push_message(scripted::private_text(&ivan(), "are you there?"));
    assert!(bot.telegram.wait_for_sent(1, Duration::from_secs(30)).await);
    let attempts = bot.telegram.requests_of("sendMessage");
    assert_eq!(
        attempts
            .iter()
            .map(|request| request.status)
            .collect::<Vec<_>>(),
        vec![429, 200]
    );
    assert!(
        attempts[1].at - attempts[0].at >= Duration::from_secs(2),
        "retried after {:?}",
        attempts[1].at - attempts[0].at
    );
    assert_eq!(bot.telegram.sent()[0]["text"], "after the wait");
    bot.wait_for("the outbox row sent", |bot| {
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'") == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_webhook_mode_only_deliveries_with_the_secret_token_are_answered() {
    let bot = Bot::start_in(true).await;
    let url = format!(
        "{}/channels/telegram/webhook",
        bot.agent.as_ref().unwrap().http
    );
    let message = json!({
        "message_id": 31, "date": 1_700_000_000,
        "from": {"id": ivan().id, "is_bot": false, "first_name": "Ivan"},
        "chat": {"id": ivan().id, "type": "private", "first_name": "Ivan"},
        "text": "hello over the webhook"});
    let update = json!({"update_id": 900, "message": message});
    let client = reqwest::Client::new();
    let post = |secret: Option<&'static str>| {
        let mut request = client.post(&url).json(&update);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post(None).await, 401);
    assert_eq!(post(Some("agent-hook_secret-2")).await, 401);
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 0);
    bot.llm.push(Reply::text("Hi Ivan"));
    assert_eq!(post(Some(WEBHOOK_SECRET)).await, 200);
    // Telegram redelivers when it misses an answer: stored and answered once.
    assert_eq!(post(Some(WEBHOOK_SECRET)).await, 200);
    assert!(bot.telegram.wait_for_sent(1, Duration::from_secs(30)).await);
    assert_eq!(bot.telegram.sent()[0]["chat_id"], IVAN_TELEGRAM);
    assert_eq!(bot.telegram.sent()[0]["text"], "Hi Ivan");
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 1);
    // The token was checked with getMe; updates were never polled.
    assert!(!bot.telegram.requests_of("getMe").is_empty());
    assert!(bot.telegram.requests_of("getUpdates").is_empty());
    assert_eq!(bot.llm.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_is_fetched_with_get_file_and_saved_in_the_inbox_folder() {
    let bot = Bot::start().await;
    let photo: Vec<u8> = (0..30_000u32).map(|index| (index % 249) as u8).collect();
    bot.telegram
        .add_file("AgACAgIAAxk-ivan", "photos/file_12.jpg", photo.clone());
    bot.llm.push(Reply::text("Nice receipt."));
    let (_, message_id) = bot.telegram.push_message(scripted::photo(
        scripted::private_chat(&ivan()),
        &ivan(),
        "AgACAgIAAxk-ivan",
        "the receipt",
    ));
    assert!(bot.telegram.wait_for_sent(1, Duration::from_secs(30)).await);
    // Only the largest size was fetched.
    let lookups = bot.telegram.requests_of("getFile");
    assert_eq!(lookups.len(), 1);
    assert_eq!(lookups[0].body["file_id"], "AgACAgIAAxk-ivan");
    let saved = bot.workspace.join(format!(
        "inbox/telegram/{IVAN_TELEGRAM}_{message_id}/image.jpg"
    ));
    assert_eq!(std::fs::read(&saved).unwrap(), photo);
    let texts = bot.llm.requests()[0].user_texts();
    assert!(
        texts.iter().any(|text| text.contains("the receipt")
            && text.contains(&format!(
                "[image attachment (image/jpeg, 30000 bytes) saved as inbox/telegram/{IVAN_TELEGRAM}_{message_id}/image.jpg]"
            ))),
        "{texts:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_stranger_is_recorded_not_answered_and_never_delays_a_colleague() {
    let bot = Bot::start().await;
    bot.llm.set_fallback(Reply::text("ok"));
    let stranger = Person::new(999_000_111, "Flood");
    // Sixty messages in one long-poll batch, then Ivan's: the stranger's burst allowance
    // is answered, the rest recorded; empty messages are never turns.
    for n in 0..60 {
        bot.telegram
            .push_message(scripted::private_text(&stranger, &format!("spam {n}")));
    }
    bot.telegram
        .push_message(scripted::private_text(&ivan(), "   "));
    bot.telegram
        .push_message(scripted::private_text(&ivan(), "Is the report ready?"));
    bot.wait_for("Ivan's answer", |bot| {
        bot.sent_by_chat().contains_key(IVAN_TELEGRAM)
    })
    .await;
    bot.wait_for("the stranger's messages stored", |bot| {
        bot.count("SELECT COUNT(*) FROM inbox WHERE sender = 'telegram:999000111'") == 60
    })
    .await;
    let limited = bot
        .count("SELECT COUNT(*) FROM inbox WHERE error = 'sender over their message rate limit'");
    assert!(
        (40..=50).contains(&limited),
        "the stranger's burst (10) is answered, the rest recorded: {limited} limited"
    );
    // Ivan's blank message is never a turn (skipped by the channel or recorded as empty).
    assert!(
        bot.llm.requests().iter().all(|request| request
            .user_texts()
            .last()
            .is_none_or(|text| !text.trim().is_empty())),
        "a blank message reached the model"
    );
    let ivan_turns = bot
        .llm
        .requests()
        .into_iter()
        .filter(|request| {
            request
                .user_texts()
                .last()
                .is_some_and(|text| text.contains("Is the report ready?"))
        })
        .count();
    assert_eq!(ivan_turns, 1);
    assert_eq!(bot.sent_by_chat()[IVAN_TELEGRAM].len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_refused_for_good_is_told_to_the_owner_once_without_its_text() {
    const ANA_TELEGRAM: &str = "111111111";
    // Ana, the owner, also talks to the bot on Telegram.
    let bot = Bot::start_with(false, |config| {
        for contact in config["contacts"].as_array_mut().unwrap() {
            if contact["slug"] == "ana" {
                contact["identities"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!(format!("telegram:{ANA_TELEGRAM}")));
            }
        }
        config["identityLinks"]["ana"]
            .as_array_mut()
            .unwrap()
            .push(json!(format!("telegram:{ANA_TELEGRAM}")));
    })
    .await;
    bot.llm
        .set_fallback(Reply::text("The Q3 numbers are 4.2 million."));
    // Ivan blocked the bot: his reply is refused for good.
    bot.telegram.block(IVAN_TELEGRAM);
    bot.telegram
        .push_message(scripted::private_text(&ivan(), "what are the Q3 numbers?"));
    bot.wait_for("the owner's notice", |bot| {
        bot.count(
            "SELECT COUNT(*) FROM outbox WHERE origin = 'dead_letter_notice' AND state = 'sent'",
        ) == 1
    })
    .await;
    // Marko is answered afterwards: the channel goes on.
    bot.telegram
        .push_message(scripted::private_text(&marko(), "hello"));
    bot.wait_for("Marko's reply", |bot| {
        bot.sent_by_chat().contains_key(MARKO_TELEGRAM)
    })
    .await;
    let sent = bot.sent_by_chat();
    let to_ana = &sent[ANA_TELEGRAM];
    assert_eq!(to_ana.len(), 1, "{sent:#?}");
    let notice = to_ana[0]["text"].as_str().unwrap();
    assert!(
        notice.contains("I could not deliver a message and gave up on it:"),
        "{notice}"
    );
    assert!(
        notice.contains("on telegram to ivan: telegram: Forbidden: bot was blocked by the user"),
        "{notice}"
    );
    assert!(!notice.contains("4.2 million"), "{notice}");
    assert!(!sent.contains_key(IVAN_TELEGRAM));
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE origin = 'dead_letter_notice'"),
        1
    );
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'failed' AND owner_notice IS NULL"),
        0,
        "the dead letter is marked told"
    );
}
