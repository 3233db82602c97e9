//! How a turn carries its state: the transcript kept in memory between turns of a
//! session, the budget tracked in memory within a turn, and the typed outcome the
//! channel receives. Driven over the HTTP API against the scripted LLM.

mod common;

use common::*;
use pretty_assertions::assert_eq;
use saint_agent::runtime::{ITERATION_CAP_REPLY, OVER_BUDGET_REPLY, RuntimeOptions};
use saint_scripted::llm::Reply;
use serde_json::{Value, json};

/// Plays one conversation — a tool call, a turn that hits the iteration cap (its reply
/// is stored by the runtime, not the loop), turns long enough to be compacted — and
/// returns what the model was sent (system prompt and messages of every request).
/// With `restart_every_turn`, each turn runs on a fresh runtime that reads the store.
async fn play(restart_every_turn: bool) -> Vec<(String, Value)> {
    let options = RuntimeOptions {
        max_iterations: 2,
        keep_recent_messages: 2,
        ..RuntimeOptions::default()
    };
    let mut bot = InProcess::start_with(
        |config| {
            config["model"]["contextWindow"] = json!(3_000);
        },
        options,
    )
    .await;
    bot.llm.set_fallback(Reply::text("ok"));
    let long = "All about anvils. ".repeat(150);
    let turns: Vec<(String, Vec<Reply>)> = vec![
        (
            "read USER.md".into(),
            vec![
                Reply::tool_call("read", json!({"path": "USER.md"})),
                Reply::text("It says who you are."),
            ],
        ),
        (
            "loop".into(),
            vec![
                Reply::tool_call("read", json!({"path": "USER.md"})),
                Reply::tool_call("read", json!({"path": "SOUL.md"})),
            ],
        ),
        (format!("Message 1: {long}"), vec![]),
        (format!("Message 2: {long}"), vec![]),
        (format!("Message 3: {long}"), vec![]),
        ("and now?".into(), vec![Reply::text("Now we are here.")]),
    ];
    for (text, replies) in turns {
        if restart_every_turn {
            bot.restart();
        }
        for reply in replies {
            bot.llm.push(reply);
        }
        bot.reply("whatsapp", ANA_WHATSAPP, &text).await;
        assert_eq!(bot.llm.pending(), 0, "every scripted reply was used");
    }
    bot.llm
        .requests()
        .iter()
        .map(|request| (request.system(), request.body["messages"].clone()))
        .collect()
}

#[tokio::test]
async fn a_kept_transcript_sends_the_model_exactly_what_reading_the_store_sends() {
    let kept = play(false).await;
    let read = play(true).await;
    assert!(
        kept.iter()
            .any(|(system, _)| system.contains("## Summary of the earlier conversation")),
        "the conversation was compacted"
    );
    assert!(
        kept.iter().any(|(_, messages)| messages
            .to_string()
            .contains(ITERATION_CAP_REPLY.split('.').next().unwrap())),
        "a later request carries the stored iteration-cap reply"
    );
    assert_eq!(kept.len(), read.len());
    for (index, (kept, read)) in kept.iter().zip(&read).enumerate() {
        assert_eq!(kept, read, "request {index}");
    }
}

#[tokio::test]
async fn a_turn_that_spends_the_budget_stops_before_its_next_model_call() {
    let bot = InProcess::start().await;
    // A stranger is `external`: 0.50 USD a month; haiku input costs 1 USD per million
    // tokens, so this first call costs 0.60 and the tool loop must not call again.
    bot.llm
        .push(Reply::tool_call("web_search", json!({"query": "anvils"})).with_usage(600_000, 10));
    bot.llm.set_fallback(Reply::text("a second model call"));
    let (status, body) = bot.send("telegram", "999", "search anvils").await;
    assert_eq!(status, axum::http::StatusCode::OK, "{body}");
    assert_eq!(body["reply"], OVER_BUDGET_REPLY);
    assert_eq!(body["outcome"], "over_budget");
    assert_eq!(bot.llm.request_count(), 1, "no model call past the budget");
    let day = saint_agent::metering::spend_day(jiff::Timestamp::now());
    let spent = bot
        .runtime
        .store()
        .spent_between("_telegram-999", &day, &day)
        .unwrap();
    // 600,000 input tokens at 1 USD and 10 output tokens at 5 USD per million.
    assert!((spent - 0.600_05).abs() < 1e-9, "spent {spent}");
}

#[tokio::test]
async fn the_channel_is_told_how_each_turn_ended() {
    let options = RuntimeOptions {
        max_iterations: 1,
        ..RuntimeOptions::default()
    };
    let bot = InProcess::start_with(|_| {}, options).await;
    bot.llm.push(Reply::text("hello"));
    let (_, answered) = bot.send("whatsapp", ANA_WHATSAPP, "hi").await;
    assert_eq!(answered["outcome"], "answered");
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "USER.md"})));
    let (_, capped) = bot.send("whatsapp", ANA_WHATSAPP, "loop").await;
    assert_eq!(capped["outcome"], "iteration_cap");
    assert_eq!(capped["reply"], ITERATION_CAP_REPLY);
}
