//! The runtime driven over the HTTP API (`app()` + `oneshot`) against the scripted LLM
//! and the example company config: role → model and tools, identity links, budgets,
//! hot reload, the tool loop, streaming, auth, compaction.

mod common;

use axum::{
    body::Body,
    http::{Request, StatusCode},
};
use common::*;
use pretty_assertions::assert_eq;
use saint_agent::runtime::RuntimeOptions;
use saint_scripted::llm::{Reply, Wire};
use serde_json::json;

const OVER_BUDGET_REPLY: &str = "Sorry, I can't take on more requests for you right now. Please try again later, or ask the team for help.";

#[tokio::test]
async fn unknown_number_is_external_and_the_model_sees_only_web_tools_and_the_external_model() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::text("Hello, stranger."));
    assert_eq!(
        bot.reply("whatsapp", "+385 91 555 0000", "hi, who are you?")
            .await,
        "Hello, stranger."
    );
    let request = &bot.llm.requests()[0];
    assert_eq!(
        request.tool_names(),
        vec!["web_fetch".to_string(), "web_search".to_string()]
    );
    assert_eq!(request.model(), "claude-haiku-4-5");
    let system = request.system();
    assert!(system.contains("unknown contact"), "{system}");
    assert!(
        !system.contains("Acme sells anvils"),
        "external contacts must not get COMPANY.md: {system}"
    );
    for secret in ["claude", "sk-model-key", "anthropic", "bot-config"] {
        assert!(
            !system.to_lowercase().contains(secret),
            "system prompt reveals {secret:?}: {system}"
        );
    }
    assert_eq!(request.headers["x-api-key"], "sk-model-key");
}

#[tokio::test]
async fn owner_gets_the_default_model_and_the_full_unwithheld_tool_set() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::text("Hi Ana."));
    bot.reply("email", ANA_EMAIL, "morning").await;
    let request = &bot.llm.requests()[0];
    assert_eq!(request.model(), "claude-sonnet-4-5");
    let tools = request.tool_names();
    for expected in [
        "read",
        "write",
        "edit",
        "apply_patch",
        "web_fetch",
        "web_search",
        "message",
        "sessions_list",
    ] {
        assert!(
            tools.contains(&expected.to_string()),
            "{expected} missing from {tools:?}"
        );
    }
    assert!(
        !tools.contains(&"exec".to_string()),
        "exec must be withheld until the sandbox exists: {tools:?}"
    );
    assert!(
        request.system().contains("Acme sells anvils"),
        "owner gets COMPANY.md"
    );
    assert!(request.system().contains("Ana"), "{}", request.system());
}

#[tokio::test]
async fn one_person_from_two_linked_channels_lands_in_one_session() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::text("noted"));
    bot.llm.push(Reply::text("you said the blue one"));
    let (_, first) = bot
        .send("whatsapp", ANA_WHATSAPP, "remember: the blue one")
        .await;
    let (_, second) = bot
        .send("email", "ANA@acme.example", "which one did I pick?")
        .await;
    assert_eq!(first["sessionKey"], second["sessionKey"]);
    assert_eq!(first["sessionKey"], "person:ana");
    let texts = bot.llm.requests()[1].user_texts();
    assert_eq!(
        texts,
        vec![
            "remember: the blue one".to_string(),
            "which one did I pick?".to_string()
        ]
    );
}

#[tokio::test]
async fn over_budget_contact_is_refused_without_a_model_call() {
    let bot = InProcess::start().await;
    // External budget: 0.50 USD per month; haiku input costs 1 USD per million tokens.
    bot.llm
        .push(Reply::text("expensive answer").with_usage(600_000, 10));
    assert_eq!(
        bot.reply("telegram", "999", "first question").await,
        "expensive answer"
    );
    assert_eq!(bot.llm.request_count(), 1);
    assert_eq!(
        bot.reply("telegram", "999", "second question").await,
        OVER_BUDGET_REPLY
    );
    assert_eq!(
        bot.llm.request_count(),
        1,
        "no model call for an over-budget contact"
    );
    // Another stranger has their own budget.
    bot.llm.push(Reply::text("fine"));
    assert_eq!(bot.reply("telegram", "1000", "hello").await, "fine");
    // Spend recorded for a known contact on earlier days of the month counts too.
    let day = saint_agent::metering::spend_day(jiff::Timestamp::now());
    bot.runtime.store().add_spend("ivan", &day, 2.0).unwrap();
    assert_eq!(
        bot.reply("telegram", IVAN_TELEGRAM, "help").await,
        OVER_BUDGET_REPLY
    );
    assert_eq!(bot.llm.request_count(), 2);
    let (_, metrics) = bot
        .metrics_request(Request::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert!(
        metrics.contains("saint_budget_refusals_total{role=\"external\"} 1"),
        "{metrics}"
    );
    // Both strangers' spend lands in one series: strangers cannot grow the series count.
    let stranger_spend: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("saint_llm_cost_usd_total{"))
        .collect();
    assert_eq!(
        stranger_spend.len(),
        1,
        "one cost series for the strangers: {stranger_spend:?}"
    );
    assert!(
        stranger_spend[0].starts_with(
            "saint_llm_cost_usd_total{model=\"claude-haiku-4-5\",role=\"external\",person=\"stranger\",trigger=\"message\"} 0.6"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_contact_added_to_the_config_file_applies_on_their_next_message() {
    let bot = InProcess::start().await;
    bot.llm.set_fallback(Reply::text("ok"));
    bot.reply("whatsapp", "+385910000001", "hello").await;
    assert_eq!(bot.llm.requests()[0].model(), "claude-haiku-4-5");

    bot.rewrite_config(|config| {
        let contacts = config["contacts"].as_array_mut().unwrap();
        contacts.push(json!({"slug": "petra", "name": "Petra", "role": "manager", "identities": ["whatsapp:+385910000001"]}));
        config["identityLinks"]["petra"] = json!(["whatsapp:+385910000001"]);
    });
    bot.reply("whatsapp", "+385910000001", "hello again").await;
    let request = &bot.llm.requests()[1];
    assert_eq!(request.model(), "claude-sonnet-4-5");
    assert!(
        request.tool_names().contains(&"sessions_list".to_string()),
        "{:?}",
        request.tool_names()
    );
    assert!(request.system().contains("Petra"), "{}", request.system());
}

#[tokio::test]
async fn an_invalid_config_change_is_refused_and_the_last_good_config_stays() {
    let bot = InProcess::start().await;
    bot.llm.set_fallback(Reply::text("ok"));
    bot.rewrite_config(|config| {
        config["defaultRole"] = json!("nobody");
        config["contacts"][1]["role"] = json!("owner"); // would make Ivan an owner
    });
    bot.reply("telegram", IVAN_TELEGRAM, "hi").await;
    let request = &bot.llm.requests()[0];
    assert_eq!(
        request.model(),
        "claude-haiku-4-5",
        "Ivan keeps the employee role"
    );
    assert_eq!(bot.runtime.config().counts(), (0, 1));
    let (status, _) = bot
        .request(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn owner_has_a_file_written_and_the_call_is_metered() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::tool_call(
        "write",
        json!({"path": "data/plan.md", "content": "Sell more anvils."}),
    ));
    bot.llm.push(Reply::text("Written."));
    assert_eq!(
        bot.reply("whatsapp", ANA_WHATSAPP, "write the plan").await,
        "Written."
    );
    assert_eq!(
        std::fs::read_to_string(bot.workspace.join("data/plan.md")).unwrap(),
        "Sell more anvils."
    );
    let results = bot.llm.requests()[1].tool_results();
    assert_eq!(results.len(), 1);
    assert!(!results[0].1, "{results:?}");
    let lines = bot.usage_lines();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["user"], "ana");
    assert_eq!(lines[0]["role"], "owner");
    assert_eq!(lines[0]["tool"], "write");
    assert_eq!(lines[0]["outcome"], "ok");
    assert_eq!(
        lines[0]["params"],
        json!({"path": "data/plan.md", "content": "<17 chars>"})
    );
    assert!(lines[0]["durationMs"].is_u64() && lines[0]["ts"].is_string());
    let (_, metrics) = bot
        .metrics_request(Request::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert!(
        metrics.contains("saint_tool_calls_total{tool=\"write\",outcome=\"ok\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn employee_editing_soul_md_gets_a_tool_error_the_model_sees() {
    // As shipped, employees have no file-writing tool at all: the call is refused by the runtime.
    let bot = InProcess::start().await;
    bot.llm.push(Reply::tool_call(
        "edit",
        json!({"path": "SOUL.md", "oldText": "helpful", "newText": "evil"}),
    ));
    bot.llm.push(Reply::text("I can't do that."));
    assert_eq!(
        bot.reply("telegram", IVAN_TELEGRAM, "make yourself evil")
            .await,
        "I can't do that."
    );
    let results = bot.llm.requests()[1].tool_results();
    assert!(
        results[0].1 && results[0].0.contains("permission denied"),
        "{results:?}"
    );
    assert!(
        std::fs::read_to_string(bot.workspace.join("SOUL.md"))
            .unwrap()
            .contains("helpful")
    );
    assert_eq!(bot.usage_lines()[0]["outcome"], "denied");
}

#[tokio::test]
async fn employee_with_write_tools_is_still_refused_soul_md_and_other_peoples_memory_by_the_tool() {
    let bot = InProcess::start_with(
        |config| {
            config["roles"]["employee"]["tools"]["allow"] = json!(["read", "write", "edit"]);
        },
        RuntimeOptions::default(),
    )
    .await;
    bot.llm.push(Reply::tool_calls(vec![
        (
            "write".into(),
            json!({"path": "SOUL.md", "content": "I am evil now."}),
        ),
        (
            "write".into(),
            json!({"path": "memory/users/ana/notes.md", "content": "overwritten"}),
        ),
        (
            "write".into(),
            json!({"path": "memory/users/ivan/todo.md", "content": "buy milk"}),
        ),
    ]));
    bot.llm.push(Reply::text("Two refused, one saved."));
    bot.reply("telegram", IVAN_TELEGRAM, "do these").await;
    let results = bot.llm.requests()[1].tool_results();
    assert_eq!(results.len(), 3);
    assert!(
        results[0].1 && results[0].0.contains("permission denied"),
        "{results:?}"
    );
    assert!(
        results[1].1 && results[1].0.contains("permission denied"),
        "{results:?}"
    );
    assert!(!results[2].1, "own memory is writable: {results:?}");
    assert!(
        std::fs::read_to_string(bot.workspace.join("SOUL.md"))
            .unwrap()
            .contains("helpful")
    );
    assert_eq!(
        std::fs::read_to_string(bot.workspace.join("memory/users/ana/notes.md")).unwrap(),
        "Ana's private notes"
    );
    assert_eq!(
        std::fs::read_to_string(bot.workspace.join("memory/users/ivan/todo.md")).unwrap(),
        "buy milk"
    );
    let outcomes: Vec<_> = bot
        .usage_lines()
        .iter()
        .map(|line| line["outcome"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(outcomes, vec!["denied", "denied", "ok"]);
}

#[tokio::test]
async fn the_openai_wire_format_runs_the_same_tool_loop() {
    let bot = InProcess::start_with(
        |config| {
            config["model"]["provider"] = json!("openai");
        },
        RuntimeOptions::default(),
    )
    .await;
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "COMPANY.md"})));
    bot.llm.push(Reply::text("Acme sells anvils."));
    assert_eq!(
        bot.reply("whatsapp", ANA_WHATSAPP, "what do we sell?")
            .await,
        "Acme sells anvils."
    );
    let requests = bot.llm.requests();
    assert!(requests.iter().all(|request| request.wire == Wire::Openai));
    let results = requests[1].tool_results();
    assert!(
        !results[0].1 && results[0].0.contains("Acme sells anvils"),
        "{results:?}"
    );
}

#[tokio::test]
async fn tool_loop_stops_at_the_iteration_cap() {
    let options = RuntimeOptions {
        max_iterations: 3,
        ..RuntimeOptions::default()
    };
    let bot = InProcess::start_with(|_| {}, options).await;
    bot.llm
        .set_fallback(Reply::tool_call("read", json!({"path": "USER.md"})));
    let reply = bot.reply("whatsapp", ANA_WHATSAPP, "loop forever").await;
    assert!(reply.contains("more steps than I'm allowed"), "{reply}");
    assert_eq!(bot.llm.request_count(), 3);
}

#[tokio::test]
async fn large_tool_results_are_capped_before_the_model_sees_them() {
    let options = RuntimeOptions {
        max_tool_result_chars: 1_000,
        ..RuntimeOptions::default()
    };
    let bot = InProcess::start_with(|_| {}, options).await;
    std::fs::write(bot.workspace.join("data.txt"), "x".repeat(50_000)).unwrap();
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "data.txt"})));
    bot.llm.push(Reply::text("big file"));
    bot.reply("whatsapp", ANA_WHATSAPP, "read it").await;
    let (content, is_error) = bot.llm.requests()[1].tool_results().remove(0);
    assert!(!is_error, "{content}");
    assert!(
        content.chars().count() < 1_100 && content.contains("[truncated: showing 1000 of"),
        "{}",
        content.len()
    );
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_transparently() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::rate_limited(0));
    bot.llm.push(Reply::overloaded());
    bot.llm.push(Reply::text("there you go"));
    assert_eq!(
        bot.reply("whatsapp", ANA_WHATSAPP, "hi").await,
        "there you go"
    );
    assert_eq!(bot.llm.request_count(), 3);
}

#[tokio::test]
async fn model_failure_is_a_502_that_hides_internals_and_keeps_the_message() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::failure(
        400,
        None,
        "invalid_request_error",
        "model claude-x does not exist",
    ));
    let (status, body) = bot.send("whatsapp", ANA_WHATSAPP, "hi").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert!(!body.to_string().contains("claude"), "{body}");
    let messages = bot.runtime.store().all_messages("person:ana").unwrap();
    assert_eq!(messages.len(), 1, "the acknowledged question is kept");
}

#[tokio::test]
async fn requests_without_the_channel_token_are_refused_before_any_model_call() {
    let bot = InProcess::start().await;
    bot.llm.set_fallback(Reply::text("should not happen"));
    for token in [None, Some("wrong-token"), Some("")] {
        let (status, _) = bot
            .request(message_request(
                "whatsapp",
                ANA_WHATSAPP,
                "hi",
                false,
                token,
            ))
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
    }
    let (status, _) = bot
        .request(message_request("pigeon", "1", "hi", false, Some(TOKEN)))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(bot.llm.request_count(), 0);
    let (status, body) = bot
        .request(Request::get("/healthz").body(Body::empty()).unwrap())
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ok"));
}

#[tokio::test]
async fn streaming_reply_sends_accepted_deltas_tool_events_and_done() {
    let bot = InProcess::start().await;
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "SOUL.md"})).with_text("Looking. "));
    bot.llm.push(Reply::text("You are helpful."));
    let (status, body) = bot
        .request(message_request(
            "whatsapp",
            ANA_WHATSAPP,
            "who am I?",
            true,
            Some(TOKEN),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    let events: Vec<(String, serde_json::Value)> = body
        .split("\n\n")
        .filter(|chunk| !chunk.trim().is_empty())
        .map(|chunk| {
            let name = chunk
                .lines()
                .find_map(|line| line.strip_prefix("event: "))
                .unwrap()
                .to_string();
            let data = chunk
                .lines()
                .find_map(|line| line.strip_prefix("data: "))
                .unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    assert_eq!(events.first().unwrap().0, "accepted");
    assert!(events[0].1["messageId"].is_i64());
    let streamed: String = events
        .iter()
        .filter(|(name, _)| name == "delta")
        .map(|(_, data)| data["text"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, "Looking. You are helpful.");
    assert!(
        events.iter().any(|(name, data)| name == "tool"
            && data["name"] == "read"
            && data["outcome"] == "ok")
    );
    let (name, done) = events.last().unwrap();
    assert_eq!(name, "done");
    assert_eq!(done["reply"], "You are helpful.");
}

#[tokio::test]
async fn context_near_the_window_is_compacted_by_the_model_and_the_turn_continues() {
    let bot = InProcess::start_with(
        |config| {
            config["model"]["contextWindow"] = json!(3_000);
        },
        RuntimeOptions {
            keep_recent_messages: 2,
            ..RuntimeOptions::default()
        },
    )
    .await;
    bot.llm.set_fallback(Reply::text("ok"));
    let long = "All about anvils. ".repeat(150); // about 700 tokens per message
    for number in 1..=3 {
        bot.reply(
            "whatsapp",
            ANA_WHATSAPP,
            &format!("Message {number}: {long}"),
        )
        .await;
    }
    let requests = bot.llm.requests();
    let summariser = requests
        .iter()
        .position(|request| request.system().starts_with("You summarise conversations"));
    let summariser = summariser.expect("a compaction call was made");
    assert!(requests[summariser].tool_names().is_empty());
    let next = &requests[summariser + 1];
    assert!(
        next.system()
            .contains("## Summary of the earlier conversation\n\nok"),
        "{}",
        next.system()
    );
    let kept = next.user_texts();
    assert!(
        !kept.iter().any(|text| text.starts_with("Message 1:")),
        "message 1 was summarised away"
    );
    assert!(kept.last().unwrap().starts_with("Message 3:"));
    assert!(requests[summariser].user_texts()[0].contains("Person: Message 1:"));
    let transcript = bot.runtime.store().transcript("person:ana").unwrap();
    assert_eq!(transcript.summary, "ok");
    assert_eq!(
        bot.runtime
            .store()
            .all_messages("person:ana")
            .unwrap()
            .len(),
        6,
        "compaction keeps the full record"
    );
}

#[tokio::test]
async fn a_tool_call_cut_off_by_a_crash_is_answered_as_interrupted_on_the_next_turn() {
    let bot = InProcess::start().await;
    let store = bot.runtime.store();
    let identity = format!("whatsapp:{ANA_WHATSAPP}");
    store
        .append(
            "person:ana",
            "ana",
            "owner",
            &identity,
            &saint_llm::Message::user_text("read the plan"),
        )
        .unwrap();
    let call = saint_llm::Message {
        role: saint_llm::ChatRole::Assistant,
        content: vec![saint_llm::ContentBlock::ToolUse {
            id: "toolu_cut".into(),
            name: "read".into(),
            input: json!({"path": "data/plan.md"}),
        }],
    };
    // The process died here: the call is stored, its result never was.
    store
        .append("person:ana", "ana", "owner", &identity, &call)
        .unwrap();
    bot.llm.push(Reply::text("Sorry, where were we?"));
    bot.reply("whatsapp", ANA_WHATSAPP, "hello?").await;
    let request = &bot.llm.requests()[0];
    let results = request.tool_results();
    assert_eq!(results.len(), 1);
    assert!(
        results[0].1 && results[0].0.contains("interrupted"),
        "{results:?}"
    );
    let messages = request.body["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "question, cut-off call, then results and the new question together"
    );
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_cut");
    assert_eq!(messages[2]["content"][1]["text"], "hello?");
}

/// The HTTP channel's port is where anyone may knock: its `/readyz` says ready and no
/// more, and it has no `/metrics` (each person's slug, role, spend and tool calls).
#[tokio::test]
async fn the_http_port_reveals_readiness_and_nothing_else() {
    let bot = InProcess::start().await;
    // The example company's WhatsApp channel cannot work: the reason stays off this port.
    let (status, body) = bot
        .request(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "ready\n"));
    bot.llm.push(Reply::text("hello"));
    assert_eq!(bot.reply("whatsapp", ANA_WHATSAPP, "hi").await, "hello");
    let (status, body) = bot
        .request(Request::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, metrics) = bot
        .metrics_request(Request::get("/metrics").body(Body::empty()).unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(metrics.contains("person=\"ana\""), "{metrics}");
}

#[tokio::test]
async fn readyz_names_each_declared_channel_that_cannot_work() {
    let bot = InProcess::start().await;
    let (status, body) = bot
        .metrics_request(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], "ready", "{body}");
    // The example company's WhatsApp channel names no phone number id (nor the app
    // secret and verify token): it is not started, and readyz says which setting is
    // missing. Its HTTP channel has its token.
    assert_eq!(lines.len(), 2, "{body}");
    assert_eq!(
        lines[1],
        "warning: channel \"whatsapp\": settings.phoneNumberId is required: the channel is not \
         started, its messages are not received",
        "{body}"
    );
    // A config without the WhatsApp channel and with an HTTP token variable nobody
    // set: the warning follows the config in force.
    bot.rewrite_config(|config| {
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_UNSET_TOKEN"}}
        ]);
    });
    // Every request reads the newest valid config, as a message does.
    let (_, body) = bot
        .metrics_request(Request::get("/readyz").body(Body::empty()).unwrap())
        .await;
    assert!(body.contains("SAINT_UNSET_TOKEN"), "{body}");
    assert!(body.contains("401"), "{body}");
    assert!(!body.contains("whatsapp"), "{body}");
}

/// The HTTP channel's outcome rows, oldest first: `count` of them, read as soon as the
/// last response arrived (each row is committed before its response is sent).
fn http_outcomes(bot: &InProcess, count: usize) -> Vec<saint_channels::queue::Outcome> {
    let rows = bot
        .runtime
        .store()
        .queue("read the inbox", |transaction| {
            saint_channels::queue::outcomes(transaction, 0, 100)
        })
        .unwrap();
    assert_eq!(
        rows.len(),
        count,
        "outcome rows committed when the responses arrived: {rows:#?}"
    );
    rows
}

#[tokio::test]
async fn every_http_message_gets_one_outcome_row_queryable_like_the_other_channels() {
    let bot = InProcess::start().await;
    bot.llm.push(Reply::text("Morning, Ana."));
    let (status, answered) = bot
        .send("whatsapp", ANA_WHATSAPP, "my secret plan for Monday")
        .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    // Refused, with the reason the client was given; ignored; failed.
    let (status, _) = bot.send("pigeon", "1", "coo").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = bot.send("telegram", "not-a-number", "hello").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = bot.send("telegram", IVAN_TELEGRAM, "   ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    bot.llm.push(Reply::failure(
        400,
        None,
        "invalid_request_error",
        "no such model",
    ));
    let (status, _) = bot.send("telegram", IVAN_TELEGRAM, "are you there?").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    // Not authenticated: nobody's message, no row.
    let (status, _) = bot
        .request(message_request(
            "whatsapp",
            ANA_WHATSAPP,
            "hi",
            false,
            Some("wrong"),
        ))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let rows = http_outcomes(&bot, 5);
    let summary: Vec<(&str, &str, &str, Option<&str>)> = rows
        .iter()
        .map(|row| {
            (
                row.channel.as_str(),
                row.sender.as_str(),
                row.outcome.as_str(),
                row.reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(summary.len(), 5, "{rows:#?}");
    assert_eq!(
        summary[..4],
        [
            ("api", "whatsapp:+385991234567", "answered", None),
            (
                "api",
                "pigeon:1",
                "refused",
                Some("unknown channel \"pigeon\"")
            ),
            ("api", "telegram:not-a-number", "refused", summary[2].3),
            (
                "api",
                "telegram:333333333",
                "ignored",
                Some("empty message")
            ),
        ]
    );
    assert!(
        summary[2].3.is_some_and(|reason| !reason.is_empty()),
        "{rows:#?}"
    );
    assert_eq!(summary[4].1, "telegram:333333333");
    assert_eq!(summary[4].2, "failed");
    // Each row is its own message; the text stays in the transcript only.
    let store = bot.runtime.store();
    let (message_id, bodies): (Option<i64>, Vec<String>) = store
        .queue("read the inbox", |transaction| {
            let message_id = transaction.query_row(
                "SELECT message_id FROM inbox WHERE outcome = 'answered'",
                [],
                |row| row.get(0),
            )?;
            let mut statement = transaction.prepare("SELECT body FROM inbox")?;
            let bodies = statement
                .query_map([], |row| row.get(0))?
                .collect::<Result<_, _>>()?;
            Ok((message_id, bodies))
        })
        .unwrap();
    assert_eq!(message_id, answered["messageId"].as_i64());
    assert!(bodies.iter().all(|body| body == "{}"), "{bodies:?}");

    // `saint-agent outcomes` lists them like any channel's messages.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["outcomes", "--workspace"])
        .arg(&bot.workspace)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines: Vec<serde_json::Value> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0]["channel"], "api");
    assert_eq!(lines[0]["outcome"], "answered");
    assert_eq!(lines[3]["reason"], "empty message");
    assert!(
        !lines
            .iter()
            .any(|line| line.to_string().contains("secret plan")),
        "{lines:?}"
    );
}
