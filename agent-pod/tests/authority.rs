//! Authority is read at the moment of use: a person demoted while their turn runs gets
//! no further tool call and no further model call under the role they lost. The real
//! runtime in this process, the scripted model holding its answer until the test has
//! changed the bot file (the event the test waits on is the model's request arriving).

mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use saint_scripted::llm::{Gate, Reply};
use serde_json::{Value, json};

const MARKO_WHATSAPP: &str = "+385991234568";
/// In a file only managers read (`memory/daily/**`).
const CANARY: &str = "canary-daily-plan-4411";

fn demote_marko(config: &mut Value) {
    for contact in config["contacts"].as_array_mut().unwrap() {
        if contact["slug"] == "marko" {
            contact["role"] = json!("employee");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_managers_running_turn_stops_before_its_next_tool_call() {
    let bot = Arc::new(InProcess::start().await);
    std::fs::create_dir_all(bot.workspace.join("memory/daily")).unwrap();
    std::fs::write(bot.workspace.join("memory/daily/plan.md"), CANARY).unwrap();
    let gate = Gate::new();
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "SOUL.md"})));
    bot.llm
        .push(Reply::tool_call("read", json!({"path": "memory/daily/plan.md"})).held_until(&gate));
    // No third answer is queued: a model call after the demotion would fail the turn.
    let turn = {
        let bot = bot.clone();
        tokio::spawn(async move {
            bot.send("whatsapp", MARKO_WHATSAPP, "What is the plan?")
                .await
        })
    };
    // The turn's second model call has arrived (its first tool call ran as a manager).
    for _ in 0..400 {
        if bot.llm.request_count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        bot.llm.request_count(),
        2,
        "the turn never made its second model call"
    );
    bot.rewrite_config(|config| {
        config["model"]["baseUrl"] = json!(bot.llm.base_url());
        demote_marko(config);
    });
    gate.open();
    let (status, body) = turn.await.unwrap();
    assert_eq!(status, 200, "{body}");
    let reply = body["reply"].as_str().unwrap_or_default();
    assert!(
        reply.starts_with("I stopped this work: Marko's role changed from manager to employee"),
        "{body}"
    );
    assert_eq!(
        bot.llm.request_count(),
        2,
        "a model call was made after the demotion"
    );
    assert!(!body.to_string().contains(CANARY));
    // The tool call the model asked for after the demotion was answered as not run.
    let transcript = rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
        .unwrap()
        .prepare("SELECT content FROM messages")
        .unwrap()
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !transcript.contains(CANARY),
        "the manager-only file was read"
    );
    assert!(
        transcript.contains("not run: Marko's role changed"),
        "{transcript}"
    );

    // Marko's next message runs as an employee: the file is refused by his new role.
    bot.llm.push(Reply::tool_call(
        "read",
        json!({"path": "memory/daily/plan.md"}),
    ));
    bot.llm.push(Reply::text("I cannot read that."));
    let (_, body) = bot.send("whatsapp", MARKO_WHATSAPP, "And now?").await;
    assert_eq!(body["reply"], "I cannot read that.", "{body}");
    let results = bot.llm.requests()[3].tool_results();
    let (content, refused) = results.last().unwrap();
    assert!(refused, "the read was refused: {results:?}");
    assert!(content.contains("may not read"), "{content}");
    assert!(!content.contains(CANARY));
}
