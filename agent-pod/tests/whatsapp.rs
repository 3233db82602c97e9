//! The WhatsApp channel end to end: the real agent binary, the scripted model and a
//! scripted Graph API that speaks the Cloud API's wire format and records every
//! request. Webhooks are signed the way Meta signs them.

mod common;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{self as scripted, Failure, ScriptedGraph};
use serde_json::{Value, json};

const PHONE_NUMBER_ID: &str = "100000000000001";
const ACCESS_TOKEN: &str = "EAAG-test-access-token";
const APP_SECRET: &str = "test-app-secret";
const VERIFY_TOKEN: &str = "test-verify-token";
const ANA: &str = "385991234567";
const MARKO: &str = "385991234568";

struct Bot {
    llm: ScriptedLlm,
    graph: ScriptedGraph,
    _directory: tempfile::TempDir,
    config_path: PathBuf,
    workspace: PathBuf,
    agent: Option<AgentProcess>,
    client: reqwest::Client,
}

impl Bot {
    async fn start() -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let graph = ScriptedGraph::start(ACCESS_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "whatsapp", "kind": "whatsapp",
             "settings": {"phoneNumberId": PHONE_NUMBER_ID, "apiBaseUrl": graph.base_url()},
             "secretEnv": {"accessToken": "WA_ACCESS_TOKEN", "appSecret": "WA_APP_SECRET",
                           "verifyToken": "WA_VERIFY_TOKEN"}},
        ]);
        write_config(&config_path, &config);
        let mut bot = Self {
            llm,
            graph,
            _directory: directory,
            config_path,
            workspace,
            agent: None,
            client: reqwest::Client::new(),
        };
        bot.spawn();
        bot
    }

    fn spawn(&mut self) {
        self.agent = Some(spawn_agent(
            &self.config_path,
            &self.workspace,
            &[
                ("WA_ACCESS_TOKEN", ACCESS_TOKEN),
                ("WA_APP_SECRET", APP_SECRET),
                ("WA_VERIFY_TOKEN", VERIFY_TOKEN),
            ],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.child.kill().unwrap(); // SIGKILL
            agent.child.wait().unwrap();
        }
    }

    fn webhook_url(&self) -> String {
        format!(
            "{}/channels/whatsapp/webhook",
            self.agent.as_ref().unwrap().http
        )
    }

    async fn post_raw(&self, body: Vec<u8>, signature: Option<String>) -> u16 {
        let mut request = self
            .client
            .post(self.webhook_url())
            .header("content-type", "application/json")
            .body(body);
        if let Some(signature) = signature {
            request = request.header("x-hub-signature-256", signature);
        }
        request.send().await.unwrap().status().as_u16()
    }

    async fn deliver(&self, payload: &Value) -> u16 {
        let body = serde_json::to_vec(payload).unwrap();
        let signature = scripted::signature(APP_SECRET, &body);
        self.post_raw(body, Some(signature)).await
    }

    async fn text_from(&self, from: &str, id: &str, text: &str) -> u16 {
        self.deliver(&scripted::text_delivery(PHONE_NUMBER_ID, from, id, text))
            .await
    }

    fn database(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3")).unwrap()
    }

    fn count(&self, sql: &str) -> i64 {
        self.database()
            .query_row(sql, [], |row| row.get(0))
            .unwrap()
    }

    /// Sends the platform accepted, by the message they answer (`context.message_id`).
    fn replies_by_inbound(&self) -> BTreeMap<String, Vec<String>> {
        let mut replies: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for request in self.graph.requests() {
            if request.body["delivered"] == true
                && let Some(answered) = request.body["context"]["message_id"].as_str()
            {
                replies
                    .entry(answered.to_string())
                    .or_default()
                    .push(request.sent_text().unwrap_or_default().to_string());
            }
        }
        replies
    }

    /// Where in the Graph API's request log each delivered reply came, by the message it
    /// answers.
    fn reply_positions(&self) -> BTreeMap<String, Vec<usize>> {
        let mut positions: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (position, request) in self.graph.requests().iter().enumerate() {
            if request.body["delivered"] == true
                && let Some(answered) = request.body["context"]["message_id"].as_str()
            {
                positions
                    .entry(answered.to_string())
                    .or_default()
                    .push(position);
            }
        }
        positions
    }

    /// Waits (polling the recorder, bounded) until `done` holds.
    async fn wait_for(&self, what: &str, done: impl Fn(&Self) -> bool) {
        for _ in 0..600 {
            if done(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out waiting for {what}; graph saw {:#?}",
            self.graph.requests()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contact_is_answered_on_whatsapp_in_their_role_with_the_reply_quoting_their_message() {
    let bot = Bot::start().await;
    bot.llm.push(Reply::text(
        "## Plan\n**Done**, see [the doc](https://acme.example/doc).",
    ));
    assert_eq!(
        bot.text_from(ANA, "wamid.ANA1", "What is the plan?").await,
        200
    );
    bot.wait_for("the reply", |bot| bot.graph.delivered_texts().len() == 1)
        .await;
    assert_eq!(
        bot.graph.delivered_texts(),
        vec![(
            ANA.to_string(),
            "*Plan*\n*Done*, see the doc (https://acme.example/doc).".to_string()
        )]
    );
    let requests = bot.graph.requests();
    let send = requests
        .iter()
        .find(|request| request.body["delivered"] == true)
        .unwrap();
    assert_eq!(send.path, format!("/v21.0/{PHONE_NUMBER_ID}/messages"));
    assert_eq!(send.bearer.as_deref(), Some(ACCESS_TOKEN));
    assert_eq!(send.body["context"]["message_id"], "wamid.ANA1");
    assert!(
        requests
            .iter()
            .any(|request| request.body["status"] == "read"
                && request.body["message_id"] == "wamid.ANA1"),
        "a read receipt was sent"
    );
    // Ana is the owner: her turn offers the owner's tools, and the model saw her words.
    let model_request = &bot.llm.requests()[0];
    assert!(
        model_request
            .tool_names()
            .contains(&"sessions_list".to_string())
    );
    assert!(
        model_request
            .user_texts()
            .iter()
            .any(|text| text.contains("What is the plan?"))
    );
    // A stranger on the same channel gets the external role's tools only.
    bot.llm.push(Reply::text("Hello!"));
    assert_eq!(bot.text_from("385910000000", "wamid.S1", "hi").await, 200);
    bot.wait_for("the stranger's reply", |bot| {
        bot.graph.delivered_texts().len() == 2
    })
    .await;
    let mut stranger_tools = bot.llm.requests()[1].tool_names();
    stranger_tools.sort();
    assert_eq!(stranger_tools, vec!["web_fetch", "web_search"]);
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM inbox WHERE state = 'answered'"),
        2
    );
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'"),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verification_handshake_answers_only_the_right_token() {
    let bot = Bot::start().await;
    let url = |token: &str| {
        format!(
            "{}?hub.mode=subscribe&hub.verify_token={token}&hub.challenge=1158201444",
            bot.webhook_url()
        )
    };
    let right = bot.client.get(url(VERIFY_TOKEN)).send().await.unwrap();
    assert_eq!(right.status(), 200);
    assert_eq!(right.text().await.unwrap(), "1158201444");
    for wrong in ["wrong", "", "test-verify-toke", "test-verify-tokenX"] {
        assert_eq!(
            bot.client.get(url(wrong)).send().await.unwrap().status(),
            403,
            "{wrong:?}"
        );
    }
    let unsubscribe = format!(
        "{}?hub.mode=unsubscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=1",
        bot.webhook_url()
    );
    assert_eq!(
        bot.client.get(unsubscribe).send().await.unwrap().status(),
        403
    );
    let unknown = format!(
        "{}/channels/telegram/webhook",
        bot.agent.as_ref().unwrap().http
    );
    assert_eq!(bot.client.get(unknown).send().await.unwrap().status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_forged_and_malformed_deliveries_are_refused_and_nothing_is_stored() {
    let bot = Bot::start().await;
    let payload = scripted::text_delivery(PHONE_NUMBER_ID, ANA, "wamid.F1", "transfer the money");
    let body = serde_json::to_vec(&payload).unwrap();
    let good = scripted::signature(APP_SECRET, &body);
    let tampered = {
        let mut text = String::from_utf8(body.clone()).unwrap();
        text = text.replace("transfer the money", "transfer ALL the money");
        text.into_bytes()
    };
    let cases: Vec<(&str, Vec<u8>, Option<String>, u16)> = vec![
        ("no signature", body.clone(), None, 401),
        (
            "signed with another secret",
            body.clone(),
            Some(scripted::signature("other", &body)),
            401,
        ),
        ("tampered body", tampered, Some(good.clone()), 401),
        (
            "sha1 prefix",
            body.clone(),
            Some(good.replace("sha256=", "sha1=")),
            401,
        ),
        (
            "bare hex",
            body.clone(),
            Some(good.trim_start_matches("sha256=").to_string()),
            401,
        ),
        (
            "truncated mac",
            body.clone(),
            Some(good[..good.len() - 2].to_string()),
            401,
        ),
        ("empty", body.clone(), Some(String::new()), 401),
    ];
    for (name, body, signature, status) in cases {
        assert_eq!(bot.post_raw(body, signature).await, status, "{name}");
    }
    // Signed but not a delivery: malformed JSON, invalid UTF-8, another object.
    for (name, body) in [
        (
            "malformed json",
            b"{\"object\": \"whatsapp_business_account\", \"entry\": [".to_vec(),
        ),
        ("invalid utf-8", b"{\"object\": \"\xff\xfe\"}".to_vec()),
        (
            "another object",
            br#"{"object": "page", "entry": []}"#.to_vec(),
        ),
    ] {
        let signature = scripted::signature(APP_SECRET, &body);
        assert_eq!(bot.post_raw(body, Some(signature)).await, 400, "{name}");
    }
    // Oversized: refused before the signature is even computed.
    let huge = vec![b' '; 300 * 1024];
    let signature = scripted::signature(APP_SECRET, &huge);
    assert_eq!(bot.post_raw(huge, Some(signature)).await, 413);
    // A message type the bot does not handle is acknowledged (so the platform stops
    // retrying) but not stored; a message for another phone number likewise.
    let reaction = scripted::delivery(
        PHONE_NUMBER_ID,
        ANA,
        json!({"from": ANA, "id": "wamid.R1", "timestamp": "1700000000", "type": "reaction",
               "reaction": {"message_id": "wamid.X", "emoji": "👍"}}),
    );
    assert_eq!(bot.deliver(&reaction).await, 200);
    assert_eq!(
        bot.deliver(&scripted::text_delivery("999", ANA, "wamid.O1", "hi"))
            .await,
        200
    );
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 0);
    assert_eq!(bot.llm.request_count(), 0);
    // The genuine delivery still works afterwards.
    bot.llm.push(Reply::text("ok"));
    assert_eq!(bot.post_raw(body, Some(good)).await, 200);
    bot.wait_for("the genuine message's reply", |bot| {
        bot.graph.delivered_texts().len() == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_is_answered_once() {
    let bot = Bot::start().await;
    bot.llm
        .set_fallback(Reply::text("answer").with_delay(Duration::from_millis(200)));
    let payload = scripted::text_delivery(PHONE_NUMBER_ID, ANA, "wamid.D1", "once please");
    // Meta redelivers when it misses an acknowledgement: in a burst and later.
    let burst = futures::future::join_all((0..5).map(|_| bot.deliver(&payload))).await;
    assert!(burst.iter().all(|status| *status == 200), "{burst:?}");
    bot.wait_for("the reply", |bot| !bot.replies_by_inbound().is_empty())
        .await;
    assert_eq!(bot.deliver(&payload).await, 200);
    // A second message from Ana is answered after the first, so once its reply is out
    // every earlier delivery has been handled.
    assert_eq!(bot.text_from(ANA, "wamid.D2", "and this").await, 200);
    bot.wait_for("the second reply", |bot| {
        bot.replies_by_inbound().contains_key("wamid.D2")
    })
    .await;
    assert_eq!(bot.replies_by_inbound()["wamid.D1"].len(), 1);
    assert_eq!(bot.llm.request_count(), 2);
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried_until_sent() {
    let bot = Bot::start().await;
    bot.graph
        .fail_next_sends([Failure::rate_limited(Some(1)), Failure::server_error()]);
    bot.llm.push(Reply::text("eventually"));
    assert_eq!(bot.text_from(ANA, "wamid.RL1", "hello").await, 200);
    bot.wait_for("the retried reply", |bot| {
        bot.graph.delivered_texts().len() == 1
    })
    .await;
    let sends: Vec<_> = bot
        .graph
        .requests()
        .into_iter()
        .filter(|request| request.body["type"] == "text")
        .collect();
    assert_eq!(sends.len(), 3, "429, 500, then sent");
    assert_eq!(
        bot.graph.delivered_texts(),
        vec![(ANA.to_string(), "eventually".to_string())]
    );
    let metrics = bot
        .client
        .get(format!("{}/metrics", bot.agent.as_ref().unwrap().metrics))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"saint_channel_delivery_failures_total{channel="whatsapp",reason="retry"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"saint_channel_messages_total{channel="whatsapp",direction="in"} 1"#)
    );
    assert!(
        metrics.contains(r#"saint_channel_messages_total{channel="whatsapp",direction="out"} 1"#)
    );
    assert!(metrics.contains(r#"saint_channel_up{channel="whatsapp",kind="whatsapp"} 1"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_shows_in_readyz_and_metrics_and_the_reply_waits() {
    let bot = Bot::start().await;
    bot.graph.set_token("rotated-token");
    bot.llm.push(Reply::text("waiting reply"));
    assert_eq!(bot.text_from(ANA, "wamid.T1", "hi").await, 200);
    let agent = bot.agent.as_ref().unwrap();
    let readyz = format!("{}/readyz", agent.metrics);
    let mut body = String::new();
    for _ in 0..200 {
        body = bot
            .client
            .get(&readyz)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if body.contains("credentials refused") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        body.contains("warning: channel \"whatsapp\": credentials refused by the platform: whatsapp: Invalid OAuth access token"),
        "{body}"
    );
    assert!(body.contains("(HTTP 401, code 190)"), "{body}");
    let metrics = bot
        .client
        .get(format!("{}/metrics", agent.metrics))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"saint_channel_up{channel="whatsapp",kind="whatsapp"} 0"#),
        "{metrics}"
    );
    // The reply is kept, not dropped.
    assert_eq!(
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_is_split_on_paragraphs_under_the_limit() {
    let bot = Bot::start().await;
    let paragraphs: Vec<String> = (0..6)
        .map(|index| format!("Paragraph {index}: {}", "word ".repeat(180).trim_end()))
        .collect();
    bot.llm.push(Reply::text(paragraphs.join("\n\n")));
    assert_eq!(
        bot.text_from(ANA, "wamid.L1", "tell me everything").await,
        200
    );
    bot.wait_for("every part", |bot| {
        bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'sent'") == 1
    })
    .await;
    let parts: Vec<String> = bot
        .graph
        .delivered_texts()
        .into_iter()
        .map(|(_, text)| text)
        .collect();
    assert!(parts.len() >= 2, "{} parts", parts.len());
    assert!(parts.iter().all(|part| part.chars().count() <= 4_096));
    // Cut only between paragraphs: every part is whole paragraphs, in order.
    assert_eq!(parts.join("\n\n"), paragraphs.join("\n\n"));
    assert!(parts.iter().all(|part| part.starts_with("Paragraph ")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn media_is_saved_in_the_inbox_folder_and_oversized_media_is_refused() {
    let bot = Bot::start().await;
    let photo: Vec<u8> = (0..50_000u32).map(|index| (index % 251) as u8).collect();
    bot.graph
        .add_media("1037543291543636", "image/jpeg", photo.clone());
    bot.graph.add_media(
        "2000000000000001",
        "application/pdf",
        vec![0u8; 17 * 1024 * 1024],
    );
    bot.llm.set_fallback(Reply::text("got it"));
    let image = scripted::media_delivery(
        PHONE_NUMBER_ID,
        ANA,
        "wamid.M1",
        "image",
        json!({"caption": "the receipt", "mime_type": "image/jpeg", "sha256": "x", "id": "1037543291543636"}),
    );
    assert_eq!(bot.deliver(&image).await, 200);
    let document = scripted::media_delivery(
        PHONE_NUMBER_ID,
        ANA,
        "wamid.M2",
        "document",
        json!({"filename": "../../../etc/passwd", "mime_type": "application/pdf", "sha256": "x", "id": "2000000000000001"}),
    );
    assert_eq!(bot.deliver(&document).await, 200);
    bot.wait_for("both replies", |bot| bot.graph.delivered_texts().len() == 2)
        .await;
    let saved = bot.workspace.join("inbox/whatsapp/wamid.M1/image.jpg");
    assert_eq!(std::fs::read(&saved).unwrap(), photo);
    let texts: Vec<String> = bot
        .llm
        .requests()
        .iter()
        .flat_map(|request| request.user_texts())
        .collect();
    assert!(
        texts.iter().any(|text| text.contains("the receipt")
            && text.contains("[image attachment (image/jpeg, 50000 bytes) saved as inbox/whatsapp/wamid.M1/image.jpg]")),
        "{texts:#?}"
    );
    assert!(
        texts.iter().any(|text| text.contains("[document attachment not available: whatsapp: document is 17825792 bytes, over the 16777216-byte limit]")),
        "{texts:#?}"
    );
    assert!(!bot.workspace.join("inbox/whatsapp/wamid.M2").exists());
    assert!(!bot.workspace.join("etc").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_message_tool_sends_for_real_and_explains_the_closed_window() {
    let bot = Bot::start().await;
    // Marko wrote earlier today; the window is open for him.
    bot.llm.push(Reply::text("Hi Marko"));
    assert_eq!(bot.text_from(MARKO, "wamid.MK1", "hello bot").await, 200);
    bot.wait_for("Marko's reply", |bot| {
        bot.graph.delivered_texts().len() == 1
    })
    .await;
    // Ana asks the bot to message Marko, then someone who never wrote on WhatsApp.
    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": "marko", "text": "Meeting at **3**"}),
    ));
    bot.llm.push(Reply::tool_call(
        "message",
        json!({"to": "whatsapp:+385991234567", "channel": "whatsapp", "text": "note to self"}),
    ));
    bot.llm.push(Reply::text("Done."));
    let reply = bot
        .client
        .post(format!("{}/v1/messages", bot.agent.as_ref().unwrap().http))
        .bearer_auth(TOKEN)
        .json(
            &json!({"channel": "email", "peer": ANA_EMAIL, "text": "tell Marko about the meeting"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let results: Vec<(String, bool)> = bot
        .llm
        .requests()
        .iter()
        .flat_map(|request| request.tool_results())
        .collect();
    assert!(
        results.iter().any(|(text, error)| !error
            && text.contains("message to Marko")
            && text.ends_with(": sent")),
        "{results:#?}"
    );
    assert!(
        results.iter().any(|(text, error)| *error
            && text.contains("has not written on whatsapp in the last 24 hours")
            && text.contains("template")),
        "{results:#?}"
    );
    assert!(
        bot.graph
            .delivered_texts()
            .contains(&(MARKO.to_string(), "Meeting at *3*".to_string()))
    );
    assert!(!bot.graph.delivered_texts().iter().any(|(to, _)| to == ANA));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_flooding_sender_does_not_starve_the_others() {
    let bot = Bot::start().await;
    bot.llm
        .set_fallback(Reply::text("ok").with_delay(Duration::from_millis(100)));
    // A stranger sends 40 messages at once; the per-sender limit records the excess
    // without answering it.
    let ids: Vec<String> = (0..40).map(|index| format!("wamid.FL{index}")).collect();
    let flood: Vec<u16> = futures::future::join_all(
        ids.iter()
            .map(|id| bot.text_from("385910000001", id, "spam")),
    )
    .await;
    assert!(flood.iter().all(|status| *status == 200));
    assert_eq!(bot.text_from(ANA, "wamid.A1", "urgent question").await, 200);
    // Ana's message does not wait behind the stranger's queue.
    bot.wait_for("Ana's reply", |bot| {
        bot.replies_by_inbound().contains_key("wamid.A1")
    })
    .await;
    let stranger_answered = bot
        .replies_by_inbound()
        .keys()
        .filter(|id| id.starts_with("wamid.FL"))
        .count();
    assert!(
        stranger_answered < 10,
        "{stranger_answered} of the flood answered before Ana"
    );
    let ignored = bot
        .count("SELECT COUNT(*) FROM inbox WHERE state = 'failed' AND error LIKE '%rate limit%'");
    assert_eq!(
        ignored, 30,
        "10 fit the burst; the rest are recorded as ignored"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_twenty_times_every_acknowledged_message_is_answered_once() {
    const ROUNDS: usize = 20;
    let mut bot = Bot::start().await;
    // A slowly streaming model, so kills land while turns are running (and resumed turns
    // from the previous round are still streaming when the next kill comes).
    bot.llm.set_fallback(
        Reply::text(
            "This answer streams slowly, word by word, so a kill lands in the middle of it. "
                .repeat(3),
        )
        .with_chunk_delay(Duration::from_millis(10)),
    );
    let mut acknowledged = Vec::new();
    // How many requests the Graph API had seen when each kill had taken effect.
    let mut kill_boundaries = Vec::new();
    for round in 0..ROUNDS {
        if round > 0 {
            bot.spawn();
        }
        let before = bot.llm.request_count();
        for sender in 0..3 {
            let id = format!("wamid.K{round:02}S{sender}");
            let from = format!("3859100{round:02}{sender:03}");
            if bot
                .text_from(&from, &id, &format!("round {round} sender {sender}"))
                .await
                == 200
            {
                acknowledged.push(id);
            }
        }
        while bot.llm.request_count() == before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(5 + (round as u64 * 13) % 60)).await;
        bot.kill();
        kill_boundaries.push(bot.graph.requests().len());
    }
    // A last run with no kill: everything acknowledged gets its answer.
    bot.spawn();
    bot.wait_for("every acknowledged message's reply", |bot| {
        let replies = bot.replies_by_inbound();
        acknowledged.iter().all(|id| replies.contains_key(id))
    })
    .await;
    // Give any duplicate a chance to show before counting: the queue is empty once no
    // row is waiting.
    bot.wait_for("an empty queue", |bot| {
        bot.count("SELECT COUNT(*) FROM inbox WHERE state IN ('received', 'accepted')") == 0
            && bot.count("SELECT COUNT(*) FROM outbox WHERE state = 'queued'") == 0
    })
    .await;
    assert_eq!(acknowledged.len(), ROUNDS * 3);
    // The kills did interrupt turns: more model calls than messages.
    assert!(
        bot.llm.request_count() > acknowledged.len(),
        "no turn was interrupted"
    );
    // Exactly once, except where no outbox can do better: the bot died after the
    // platform took a reply and before the outbox recorded it (the platform offers no
    // idempotency key), so the reply in flight at that kill — the last one the platform
    // saw before it, or the first it saw after it while the dying connection drained — is
    // sent again after the restart, once. Any other repeat is a bug.
    let positions = bot.reply_positions();
    for id in &acknowledged {
        let copies = &positions[id];
        let in_flight_at_a_kill = copies.len() == 2
            && kill_boundaries.iter().any(|&boundary| {
                (copies[0] + 1 == boundary || copies[0] == boundary) && copies[1] > boundary
            });
        assert!(
            copies.len() == 1 || in_flight_at_a_kill,
            "{id} answered {} times (Graph requests {copies:?}; kills after request counts {kill_boundaries:?})",
            copies.len()
        );
    }
    // Each person's message is in the transcript once, however often its turn resumed.
    let stored_user_texts = bot
        .count("SELECT COUNT(*) FROM messages WHERE role = 'user' AND content LIKE '%\"round %'");
    assert_eq!(stored_user_texts, (ROUNDS * 3) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_forged_requests_does_not_lock_out_the_platform() {
    // Behind an Ingress the platform and an attacker share one source address: forged
    // requests are refused one by one and never block the genuine deliveries after them.
    let bot = Bot::start().await;
    let body = serde_json::to_vec(&scripted::text_delivery(
        PHONE_NUMBER_ID,
        ANA,
        "wamid.X",
        "x",
    ))
    .unwrap();
    let forged = futures::future::join_all(
        (0..200).map(|_| bot.post_raw(body.clone(), Some("sha256=00".to_string()))),
    )
    .await;
    assert!(forged.iter().all(|status| *status == 401), "{forged:?}");
    bot.llm.push(Reply::text("still here"));
    assert_eq!(bot.text_from(ANA, "wamid.G1", "genuine").await, 200);
    bot.wait_for("the genuine reply", |bot| {
        bot.graph.delivered_texts().len() == 1
    })
    .await;
    assert_eq!(bot.count("SELECT COUNT(*) FROM inbox"), 1);
}
