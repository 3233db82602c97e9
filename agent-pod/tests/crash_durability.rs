//! `kill -9` of the real agent mid-turn, 20 times: every message the agent acknowledged
//! (the SSE `accepted` event, sent only after the commit) is in the transcript, and the
//! database passes `PRAGMA integrity_check` after every crash.

mod common;

use std::{collections::BTreeSet, time::Duration};

use common::*;
use futures::StreamExt;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::json;

const ROUNDS: usize = 20;
const SENDERS: usize = 4;

/// Sends one streaming message; returns its text once the agent acknowledged it.
async fn send_until_acknowledged(
    client: reqwest::Client,
    url: String,
    peer: String,
    text: String,
) -> Option<String> {
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": peer, "text": text, "stream": true}))
        .send()
        .await
        .ok()?;
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if seen.contains("event: accepted") {
            return Some(text);
        }
    }
    None
}

fn stored_user_texts(database: &std::path::Path) -> (String, BTreeSet<String>) {
    let connection = rusqlite::Connection::open(database).unwrap();
    let integrity: String = connection
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    let mut statement = connection
        .prepare("SELECT content FROM messages WHERE role = 'user'")
        .unwrap();
    let texts = statement
        .query_map([], |row| row.get::<_, String>(0))
        .unwrap()
        .map(|content| {
            let blocks: Vec<saint_llm::ContentBlock> =
                serde_json::from_str(&content.unwrap()).unwrap();
            blocks
                .into_iter()
                .filter_map(|block| match block {
                    saint_llm::ContentBlock::Text { text } => Some(text),
                    _ => None,
                })
                .collect::<String>()
        })
        .collect();
    (integrity, texts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_mid_turn_never_loses_an_acknowledged_message() {
    let llm = ScriptedLlm::start().await.unwrap();
    // A slowly streaming model with a tool call, so kills land mid-stream and mid-loop.
    llm.set_fallback(
        Reply::tool_call("read", json!({"path": "SOUL.md"}))
            .with_text("Checking my notes, one moment.")
            .with_chunk_delay(Duration::from_millis(15)),
    );
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let database = workspace.join("sessions/transcripts.sqlite3");
    let client = reqwest::Client::new();
    let mut acknowledged = BTreeSet::new();
    let mut killed_mid_turn = 0;

    for round in 0..ROUNDS {
        let mut agent = spawn_agent(&config_path, &workspace, &[]);
        let url = format!("{}/v1/messages", agent.http);
        let requests_before = llm.request_count();
        let mut sends = Vec::new();
        for sender in 0..SENDERS {
            // Two senders are Ana on linked channels (one session, serialised turns).
            let peer = if sender < 2 {
                ANA_WHATSAPP.to_string()
            } else {
                format!("+38591{round:03}{sender:04}")
            };
            let text = format!("round {round} message from sender {sender}");
            sends.push(tokio::spawn(send_until_acknowledged(
                client.clone(),
                url.clone(),
                peer,
                text,
            )));
        }
        // Kill once the model is streaming, at a different moment each round.
        while llm.request_count() == requests_before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5 + (round as u64 * 17) % 120)).await;
        // The model always asks for another tool call, so a turn only ends at the
        // iteration cap (16 model calls); fewer calls than that means no turn had ended.
        let calls_this_round = llm.request_count() - requests_before;
        agent.child.kill().unwrap(); // SIGKILL
        agent.child.wait().unwrap();
        if calls_this_round < 16 {
            killed_mid_turn += 1;
        }
        for send in sends {
            if let Some(text) = send.await.unwrap() {
                acknowledged.insert(text);
            }
        }
        let (integrity, stored) = stored_user_texts(&database);
        assert_eq!(integrity, "ok", "round {round}: database damaged");
        let lost: Vec<_> = acknowledged.difference(&stored).collect();
        assert!(
            lost.is_empty(),
            "round {round}: acknowledged but lost: {lost:?}"
        );
    }
    assert_eq!(
        killed_mid_turn, ROUNDS,
        "every kill landed while a model call was under way"
    );
    assert!(
        acknowledged.len() >= ROUNDS,
        "too few acknowledged messages to prove anything: {}",
        acknowledged.len()
    );
    eprintln!(
        "{ROUNDS} kills mid-turn, {} acknowledged messages, none lost",
        acknowledged.len()
    );

    // The store still opens and serves after all the crashes.
    let store = saint_agent::session::SessionStore::open(&database).unwrap();
    assert_eq!(store.integrity_check().unwrap(), "ok");
    assert!(!store.transcript("person:ana").unwrap().messages.is_empty());
    drop(store);

    // Ana's transcript holds turns cut off by the kills; a restarted agent must still send
    // the model a valid conversation: every tool call answered in the next message.
    let agent = spawn_agent(&config_path, &workspace, &[]);
    llm.push(Reply::text("All good."));
    let before = llm.request_count();
    let response = client
        .post(format!("{}/v1/messages", agent.http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "email", "peer": ANA_EMAIL, "text": "are you still there?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request = &llm.requests()[before];
    let messages = request.body["messages"].as_array().unwrap();
    let mut unanswered_calls = 0;
    for (index, message) in messages.iter().enumerate() {
        let calls: Vec<&str> = message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "tool_use")
            .map(|block| block["id"].as_str().unwrap())
            .collect();
        let answers: Vec<&str> = messages
            .get(index + 1)
            .and_then(|next| next["content"].as_array())
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "tool_result")
            .map(|block| block["tool_use_id"].as_str().unwrap())
            .collect();
        unanswered_calls += calls.iter().filter(|id| !answers.contains(id)).count();
    }
    assert_eq!(
        unanswered_calls, 0,
        "a cut-off tool call reached the model unanswered"
    );
    // And the model sees every acknowledged message Ana sent before the crashes.
    let seen: BTreeSet<String> = request.user_texts().into_iter().collect();
    let from_ana = acknowledged
        .iter()
        .filter(|text| text.ends_with("sender 0") || text.ends_with("sender 1"));
    let missing: Vec<_> = from_ana.filter(|text| !seen.contains(*text)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not shown to the model after restart: {missing:?}"
    );
}
