//! The heartbeat end to end: the real agent binary, the scripted model, a scripted
//! Telegram Bot API, and a clock file the test moves (SAINT_CLOCK_FILE), so an hourly
//! heartbeat is made due without waiting an hour. Ivan (telegram:333333333) is the one
//! contact the heartbeat notifies.

mod common;

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::telegram::ScriptedTelegram;
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000003:AAF-heartbeat-test-token";
const START: &str = "2026-03-02T08:00:00Z";

struct Bot {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    directory: tempfile::TempDir,
    workspace: PathBuf,
    clock: PathBuf,
    agent: Option<AgentProcess>,
}

fn set_clock(path: &Path, now: &str) {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, now).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

impl Bot {
    async fn start(heartbeat_file: &str) -> Self {
        Self::start_with(
            heartbeat_file,
            json!({"everySeconds": 3600, "role": "employee", "notify": ["ivan"]}),
        )
        .await
    }

    async fn start_with(heartbeat_file: &str, heartbeat: Value) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        std::fs::write(workspace.join("HEARTBEAT.md"), heartbeat_file).unwrap();
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "telegram", "kind": "telegram",
             "settings": {"apiBaseUrl": telegram.base_url()},
             "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        ]);
        config["heartbeat"] = heartbeat;
        write_config(&config_path, &config);
        let clock = directory.path().join("now");
        set_clock(&clock, START);
        let agent = spawn_agent(
            &config_path,
            &workspace,
            &[
                ("TG_BOT_TOKEN", BOT_TOKEN),
                ("SAINT_CLOCK_FILE", clock.to_str().unwrap()),
            ],
        );
        Self {
            llm,
            telegram,
            directory,
            workspace,
            clock,
            agent: Some(agent),
        }
    }

    fn last_beat(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.workspace.join("sessions/heartbeat.json")).ok()?;
        let state: Value = serde_json::from_str(&text).ok()?;
        state["last"].as_str().map(str::to_string)
    }

    fn turn_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line.get("turn").is_some())
            .collect()
    }

    fn queued_by_heartbeat(&self) -> i64 {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT count(*) FROM outbox WHERE origin = 'heartbeat'",
                [],
                |row| row.get(0),
            )
            .unwrap()
    }

    /// Moves the clock to `now` and waits until the beat due by then is recorded.
    async fn beat_at(&self, now: &str) {
        set_clock(&self.clock, now);
        let wanted: jiff::Timestamp = now.parse().unwrap();
        self.wait_for(&format!("the beat at {now}"), |bot| {
            bot.last_beat()
                .and_then(|last| last.parse::<jiff::Timestamp>().ok())
                .is_some_and(|last| last >= wanted)
        })
        .await;
    }

    async fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..600 {
            if done(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("timed out waiting for {what}");
    }
}

impl Drop for Bot {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.child.kill();
            let _ = agent.child.wait();
        }
        let _ = &self.directory;
    }
}

#[tokio::test]
async fn a_heartbeat_file_with_nothing_to_do_makes_no_model_call() {
    let bot = Bot::start("# HEARTBEAT.md\n\n<!-- Add tasks here. -->\n- \n").await;
    // The first beat is due one interval after the first start.
    bot.beat_at("2026-03-02T09:00:00Z").await;
    assert_eq!(
        bot.llm.request_count(),
        0,
        "an empty heartbeat called the model"
    );
    assert!(bot.turn_lines().is_empty(), "{:?}", bot.turn_lines());

    // The same clock, with a task written: the next beat calls the model.
    std::fs::write(
        bot.workspace.join("HEARTBEAT.md"),
        "Check whether the weekly report was sent.",
    )
    .unwrap();
    bot.llm.push(Reply::text(NOTHING));
    bot.beat_at("2026-03-02T10:00:00Z").await;
    assert_eq!(bot.llm.request_count(), 1);
}

const NOTHING: &str = "HEARTBEAT_OK";

/// A week of four-hourly beats with `heartbeat.watch`: after the first beat runs, none
/// calls the model while the instructions and the watched file stay as they were; the
/// beat after the watched file changes does, and so does the one after HEARTBEAT.md
/// changes.
#[tokio::test]
async fn an_idle_heartbeat_watching_its_inputs_costs_nothing_for_a_week() {
    let bot = Bot::start_with(
        "Tell Ivan when data/orders.csv has a new order.",
        json!({"everySeconds": 14400, "role": "employee", "notify": ["ivan"],
               "watch": {"files": ["data/orders.csv"]}}),
    )
    .await;
    std::fs::create_dir_all(bot.workspace.join("data")).unwrap();
    std::fs::write(bot.workspace.join("data/orders.csv"), "id,item\n1,chair\n").unwrap();
    bot.llm.push(Reply::text(NOTHING));
    let start: jiff::Timestamp = START.parse().unwrap();
    let beat = |index: i64| {
        start
            .checked_add(jiff::SignedDuration::from_hours(4 * index))
            .unwrap()
    };
    bot.beat_at(&beat(1).to_string()).await;
    assert_eq!(bot.llm.request_count(), 1, "the first watched beat runs");
    for index in 2..=42 {
        bot.beat_at(&beat(index).to_string()).await;
    }
    assert_eq!(
        bot.llm.request_count(),
        1,
        "a week of beats with nothing changed made model calls"
    );
    std::fs::write(
        bot.workspace.join("data/orders.csv"),
        "id,item\n1,chair\n2,desk\n",
    )
    .unwrap();
    bot.llm.push(Reply::text(NOTHING));
    bot.beat_at(&beat(43).to_string()).await;
    assert_eq!(
        bot.llm.request_count(),
        2,
        "a changed input makes the next beat run"
    );
    bot.beat_at(&beat(44).to_string()).await;
    assert_eq!(bot.llm.request_count(), 2);
    std::fs::write(
        bot.workspace.join("HEARTBEAT.md"),
        "Tell Ivan when data/orders.csv has a new order, and how many there are.",
    )
    .unwrap();
    bot.llm.push(Reply::text(NOTHING));
    bot.beat_at(&beat(45).to_string()).await;
    assert_eq!(
        bot.llm.request_count(),
        3,
        "changed instructions make the next beat run"
    );
}

#[tokio::test]
async fn a_heartbeat_notifies_only_its_contacts_and_is_metered_to_the_bot() {
    let bot = Bot::start("Tell Ivan if an invoice is overdue.").await;
    // The model tries to reach Marko, whom the heartbeat may not notify, then reports.
    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": "marko", "text": "Invoice 42 is overdue."}),
    ));
    bot.llm.push(Reply::text("Invoice 42 is overdue."));
    bot.beat_at("2026-03-02T09:00:00Z").await;

    let requests = bot.llm.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[0].user_texts()[0].contains("Tell Ivan if an invoice is overdue."),
        "{:?}",
        requests[0].user_texts()
    );
    assert!(
        requests[0].system().contains("heartbeat"),
        "{}",
        requests[0].system()
    );
    let results = requests[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(results[0].1, "messaging Marko was not refused: {results:?}");
    assert!(
        results[0].0.contains("may message only ivan"),
        "{results:?}"
    );

    bot.wait_for("Ivan's notice on Telegram", |bot| {
        !bot.telegram.sent().is_empty()
    })
    .await;
    let sent = bot.telegram.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["chat_id"], IVAN_TELEGRAM);
    assert!(
        sent[0]["text"]
            .as_str()
            .unwrap()
            .contains("Invoice 42 is overdue."),
        "{sent:?}"
    );
    let turns = bot.turn_lines();
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(turns[0]["user"], "_bot");
    assert_eq!(turns[0]["role"], "employee");
    assert_eq!(turns[0]["trigger"], "heartbeat");
    let metrics_url = format!("{}/metrics", bot.agent.as_ref().unwrap().metrics);
    let metrics = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "saint_turns_total{role=\"employee\",outcome=\"answered\",trigger=\"heartbeat\"} 1"
        ),
        "{metrics}"
    );

    // Nothing to report: the answer stays in the heartbeat's session.
    bot.llm.push(Reply::text(NOTHING));
    bot.beat_at("2026-03-02T10:00:00Z").await;
    assert_eq!(bot.turn_lines().len(), 2);
    assert_eq!(bot.queued_by_heartbeat(), 1, "HEARTBEAT_OK was queued");
    // Each beat sees only its own turn: nothing the first beat read or said.
    let second = &bot.llm.requests()[2];
    let earlier = second.body.to_string();
    assert!(
        !earlier.contains("Invoice 42") && !earlier.contains("may message only"),
        "the second beat saw the first: {earlier}"
    );
    assert_eq!(second.user_texts().len(), 1, "{:?}", second.user_texts());
}

#[tokio::test]
async fn beats_missed_while_down_are_made_up_once() {
    let mut bot = Bot::start("Check the shared inbox.").await;
    bot.llm.set_fallback(Reply::text(NOTHING));
    bot.beat_at("2026-03-02T09:00:00Z").await;
    assert_eq!(bot.llm.request_count(), 1);
    if let Some(mut agent) = bot.agent.take() {
        agent.child.kill().unwrap();
        agent.child.wait().unwrap();
    }
    // Five intervals pass while the bot is down: one beat on start, not five.
    set_clock(&bot.clock, "2026-03-02T14:00:00Z");
    let config_path = bot.directory.path().join("bot-config.json");
    let clock = bot.clock.to_str().unwrap().to_string();
    bot.agent = Some(spawn_agent(
        &config_path,
        &bot.workspace,
        &[("TG_BOT_TOKEN", BOT_TOKEN), ("SAINT_CLOCK_FILE", &clock)],
    ));
    bot.beat_at("2026-03-02T14:00:00Z").await;
    assert_eq!(bot.llm.request_count(), 2);
    assert_eq!(bot.turn_lines().len(), 2);
}
