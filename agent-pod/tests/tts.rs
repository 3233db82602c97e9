//! The `tts` tool end to end: the real `saint-agent` binary and the scripted model.
//! Marko (manager, given `tts`) asks on scripted Telegram and the reply arrives as a
//! `sendVoice` upload of Opus in Ogg made by espeak-ng and opusenc on this machine;
//! on scripted WhatsApp the voice note comes from an OpenAI-compatible speech endpoint
//! (scripted here, answering with real Opus made by the same encoder), uploaded to
//! `/<phone-id>/media` and sent as `type: audio`. Ivan's role has no `tts` and never
//! sees it; every call is a usage line with its characters, bytes and price, counted
//! in the metrics, and a price the caller's budget cannot take refuses the call.
//!
//! Needs Debian `espeak-ng` and `opus-tools` (test.sh installs them).

mod common;

use std::{
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Json, Router, extract::State, http::HeaderMap, response::IntoResponse, routing::post};
use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{
    self as scripted, ScriptedGraph,
    discord::{ScriptedDiscord, direct_message},
    slack::{ScriptedSlack, message_event},
    telegram::{self as scripted_telegram, Person, ScriptedTelegram},
};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000004:AAF-tts-test-token";
const MARKO_TELEGRAM: &str = "222222222";
const MARKO_WHATSAPP: &str = "+385991234568";
const SPEECH_KEY: &str = "sk-speech-test-key";
const PHONE_NUMBER_ID: &str = "100000000000002";
const WA_ACCESS_TOKEN: &str = "EAAG-tts-access-token";
const WA_APP_SECRET: &str = "tts-app-secret";

fn marko() -> Person {
    Person::new(MARKO_TELEGRAM.parse().unwrap(), "Marko")
}

fn ivan() -> Person {
    Person::new(IVAN_TELEGRAM.parse().unwrap(), "Ivan")
}

/// Opus in Ogg made on this machine by the packaged encoders, as a speech service
/// would answer.
fn real_ogg_opus(text: &str) -> Vec<u8> {
    let directory = tempfile::tempdir().unwrap();
    let (wav, ogg) = (
        directory.path().join("a.wav"),
        directory.path().join("a.ogg"),
    );
    let spoke = std::process::Command::new("espeak-ng")
        .arg("-w")
        .arg(&wav)
        .arg(text)
        .status()
        .expect("this test needs espeak-ng (Debian espeak-ng)");
    assert!(spoke.success());
    let encoded = std::process::Command::new("opusenc")
        .arg("--quiet")
        .arg(&wav)
        .arg(&ogg)
        .status()
        .expect("this test needs opusenc (Debian opus-tools)");
    assert!(encoded.success());
    std::fs::read(ogg).unwrap()
}

fn is_ogg_opus(bytes: &[u8]) -> bool {
    bytes.starts_with(b"OggS") && bytes.windows(8).any(|window| window == b"OpusHead")
}

/// A request to the speech endpoint: its `Authorization` and JSON body.
type SpeechRequest = (Option<String>, Value);

/// A scripted OpenAI-compatible `/v1/audio/speech`: records each request (its
/// `Authorization` and JSON body) and answers with `audio`.
#[derive(Clone)]
struct ScriptedSpeech {
    requests: Arc<Mutex<Vec<SpeechRequest>>>,
    audio: Arc<Vec<u8>>,
}

impl ScriptedSpeech {
    async fn start(audio: Vec<u8>) -> (Self, String) {
        let speech = Self {
            requests: Arc::default(),
            audio: Arc::new(audio),
        };
        let router = Router::new()
            .route("/v1/audio/speech", post(speak))
            .with_state(speech.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        (speech, format!("http://{address}"))
    }

    fn requests(&self) -> Vec<SpeechRequest> {
        self.requests.lock().unwrap().clone()
    }
}

async fn speak(
    State(speech): State<ScriptedSpeech>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> axum::response::Response {
    let authorization = headers
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    speech
        .requests
        .lock()
        .unwrap()
        .push((authorization, body.clone()));
    if body["response_format"] != "opus" || body["input"].as_str().is_none_or(str::is_empty) {
        return (axum::http::StatusCode::BAD_REQUEST, "bad request").into_response();
    }
    (
        [("content-type", "audio/ogg")],
        speech.audio.as_ref().clone(),
    )
        .into_response()
}

struct Bot {
    llm: ScriptedLlm,
    workspace: PathBuf,
    config_path: PathBuf,
    env: Vec<(String, String)>,
    agent: Option<AgentProcess>,
    // Fields drop in order: the agent stops before its directory goes.
    _directory: tempfile::TempDir,
}

impl Bot {
    /// The example company with `channels`, Marko's manager role given `tts`, the bot
    /// speaking with `speech`, unpriced.
    async fn start(channels: Value, speech: Value, env: &[(&str, &str)]) -> Self {
        Self::start_priced(channels, speech, None, env, |_| {}).await
    }

    /// [`Bot::start`], with speech priced at `per_million` USD per million characters
    /// in `model.prices` under the engine's model (`espeak-ng` for the local one), and
    /// the config changed by `edit` before the agent reads it.
    async fn start_priced(
        channels: Value,
        speech: Value,
        per_million: Option<f64>,
        env: &[(&str, &str)],
        edit: impl FnOnce(&mut Value),
    ) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["roles"]["manager"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("tts"));
        config["media"] = json!({"speech": speech});
        config["channels"] = channels;
        // Model calls cost nothing here, so a person's spend is what speech cost.
        for price in config["model"]["prices"]
            .as_object_mut()
            .unwrap()
            .values_mut()
        {
            *price = json!({"inputPerMtok": 0.0, "outputPerMtok": 0.0});
        }
        if let Some(per_million) = per_million {
            let model = config["media"]["speech"]["model"]
                .as_str()
                .unwrap_or(saint_config::media::LOCAL_SPEECH_PRICE_KEY)
                .to_string();
            config["model"]["prices"][model] = json!({"inputPerMtok": 0.0, "outputPerMtok": 0.0,
                "perMillionCharacters": per_million});
        }
        edit(&mut config);
        write_config(&config_path, &config);
        let mut bot = Self {
            llm,
            workspace,
            config_path,
            env: env
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
            agent: None,
            _directory: directory,
        };
        bot.spawn();
        bot
    }

    fn spawn(&mut self) {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        self.agent = Some(spawn_agent(&self.config_path, &self.workspace, &env));
    }

    fn kill(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            agent.child.kill().unwrap(); // SIGKILL
            agent.child.wait().unwrap();
        }
    }

    fn agent(&self) -> &AgentProcess {
        self.agent.as_ref().expect("the agent runs")
    }

    /// The outbox rows as (state, parts sent, body).
    fn outbox(&self) -> Vec<(String, i64, Value)> {
        let database =
            rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
                .unwrap();
        let mut statement = database
            .prepare("SELECT state, parts_sent, body FROM outbox ORDER BY id")
            .unwrap();
        statement
            .query_map([], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i64>(1)?,
                    serde_json::from_str(&row.get::<_, String>(2)?).unwrap(),
                ))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn usage_lines(&self, tool: &str) -> Vec<Value> {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| line["tool"] == tool)
            .collect()
    }

    async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.agent().metrics))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

fn telegram_channels(telegram: &ScriptedTelegram) -> Value {
    json!([
        {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
        {"name": "telegram", "kind": "telegram",
         "settings": {"apiBaseUrl": telegram.base_url()},
         "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
    ])
}

/// The successful `sendVoice` uploads so far.
fn voices(telegram: &ScriptedTelegram) -> Vec<Value> {
    telegram
        .requests_of("sendVoice")
        .into_iter()
        .filter(|request| request.status == 200)
        .map(|request| request.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telegram_reply_carries_a_voice_note_spoken_by_espeak_ng() {
    let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    let bot = Bot::start_priced(
        telegram_channels(&telegram),
        json!({"engine": "local", "voice": "en-us"}),
        Some(15.0),
        &[("TG_BOT_TOKEN", BOT_TOKEN)],
        |_| {},
    )
    .await;
    let spoken = "The delivery arrives at nine.";
    bot.llm
        .push(Reply::tool_call("tts", json!({"text": spoken})));
    bot.llm.push(Reply::text("Here it is as a voice note."));
    telegram.push_message(scripted_telegram::private_text(
        &marko(),
        "say when the delivery comes",
    ));

    assert!(
        telegram
            .wait_for_requests(Duration::from_secs(60), |requests| requests
                .iter()
                .any(|request| request.method == "sendVoice" && request.status == 200))
            .await,
        "no sendVoice answered 200 within 60 s: {:?}",
        telegram.requests_of("sendVoice")
    );
    let voices = voices(&telegram);
    assert_eq!(voices.len(), 1, "{voices:?}");
    assert_eq!(voices[0]["chat_id"], json!(222222222));
    assert_eq!(voices[0]["voice"]["contentType"], "audio/ogg");
    let bytes = saint_scripted::file_bytes(&voices[0]["voice"]).unwrap();
    assert!(is_ogg_opus(&bytes), "not Opus in Ogg");
    // The text went first, the voice note after it.
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0]["text"]
            .as_str()
            .unwrap()
            .contains("Here it is as a voice note."),
        "{sent:?}"
    );
    let text_at = telegram.requests_of("sendMessage")[0].at;
    assert!(telegram.requests_of("sendVoice")[0].at > text_at);

    // The model was offered the tool and told what happened.
    let requests = bot.llm.requests();
    assert!(requests[0].tool_names().contains(&"tts".to_string()));
    let results = requests[1].tool_results();
    assert!(!results[0].1, "{results:?}");
    assert!(results[0].0.contains("voice note made"), "{results:?}");

    // Metered per character, with the price.
    let lines = bot.usage_lines("tts");
    assert_eq!(lines.len(), 1, "{lines:?}");
    let line = &lines[0];
    assert_eq!(line["user"], "marko");
    assert_eq!(line["role"], "manager");
    assert_eq!(line["outcome"], "ok");
    assert_eq!(line["engine"], "local");
    let characters = spoken.chars().count() as u64;
    assert_eq!(line["characters"], json!(characters));
    assert_eq!(line["audioBytes"], json!(bytes.len()));
    let cost = line["costUsd"].as_f64().unwrap();
    assert!(
        (cost - 15.0 * characters as f64 / 1e6).abs() < 1e-12,
        "{cost}"
    );
    // Charged to Marko's budget.
    let spent: f64 = rusqlite::Connection::open(bot.workspace.join("sessions/transcripts.sqlite3"))
        .unwrap()
        .query_row(
            "SELECT SUM(usd) FROM spend WHERE contact = 'marko'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!((spent - cost).abs() < 1e-12, "spent {spent}, speech {cost}");
    let metrics = bot.metrics().await;
    assert!(
        metrics.contains(&format!(
            "saint_tool_characters_total{{tool=\"tts\",role=\"manager\"}} {characters}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "saint_tool_audio_bytes_total{{tool=\"tts\",role=\"manager\"}} {}",
            bytes.len()
        )),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voice_note_waiting_in_the_outbox_across_a_restart_is_sent_once() {
    let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    let mut bot = Bot::start(
        telegram_channels(&telegram),
        json!({"engine": "local"}),
        &[("TG_BOT_TOKEN", BOT_TOKEN)],
    )
    .await;
    // The text goes out; the voice note is answered "wait 2 s", and the agent is killed
    // (SIGKILL) the moment that answer is given: the row, its text part recorded and its
    // file on disk, is all that survives.
    telegram.fail_next(
        "sendVoice",
        [scripted_telegram::Failure::too_many_requests(2)],
    );
    bot.llm.push(Reply::tool_call(
        "tts",
        json!({"text": "Stored, then sent."}),
    ));
    bot.llm.push(Reply::text("Voice note follows."));
    telegram.push_message(scripted_telegram::private_text(&marko(), "speak"));
    assert!(
        telegram
            .wait_for_requests(Duration::from_secs(60), |requests| requests
                .iter()
                .any(|request| request.method == "sendVoice" && request.status == 429))
            .await,
        "the first sendVoice was not answered 429 within 60 s"
    );
    bot.kill();
    let rows = bot.outbox();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (state, parts_sent, body) = &rows[0];
    assert_eq!((state.as_str(), *parts_sent), ("queued", 1), "{rows:?}");
    let file = &body["files"][0];
    assert_eq!(file["kind"], "voice");
    assert_eq!(file["mimeType"], "audio/ogg");
    assert!(bot.workspace.join(file["path"].as_str().unwrap()).is_file());

    bot.spawn();
    assert!(
        telegram
            .wait_for_requests(Duration::from_secs(60), |requests| requests
                .iter()
                .any(|request| request.method == "sendVoice" && request.status == 200))
            .await,
        "the voice note was not sent after the restart within 60 s"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while bot.outbox()[0].0 != "sent" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the row was not marked sent within 30 s: {:?}",
            bot.outbox()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(voices(&telegram).len(), 1, "the voice note once");
    assert_eq!(telegram.sent().len(), 1, "the text was not sent again");
    assert_eq!(bot.outbox()[0].1, 2);
    // Delivered, the file is gone: nothing of the voice note stays on the volume.
    let stored = bot.workspace.join(file["path"].as_str().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while stored.exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sent voice note was not removed within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_http_api_the_model_is_told_the_voice_note_cannot_be_sent() {
    let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    let bot = Bot::start(
        telegram_channels(&telegram),
        json!({"engine": "local"}),
        &[("TG_BOT_TOKEN", BOT_TOKEN)],
    )
    .await;
    bot.llm
        .push(Reply::tool_call("tts", json!({"text": "hello"})));
    bot.llm.push(Reply::text("Text only here."));
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", bot.agent().http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "telegram", "peer": MARKO_TELEGRAM, "text": "say hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let results = bot.llm.requests()[1].tool_results();
    assert!(!results[0].1, "{results:?}");
    assert!(results[0].0.contains("carries text only"), "{results:?}");
    assert!(telegram.requests_of("sendVoice").is_empty());
    let left: Vec<_> = std::fs::read_dir(bot.workspace.join(".saint/outbox/audio"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "the unsendable file is not kept");
    assert_eq!(
        bot.usage_lines("tts").len(),
        1,
        "still metered: it was spoken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_tts_never_sees_it_and_a_call_it_names_is_refused() {
    let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    let bot = Bot::start(
        telegram_channels(&telegram),
        json!({"engine": "local"}),
        &[("TG_BOT_TOKEN", BOT_TOKEN)],
    )
    .await;
    // Ivan's model asks for the tool anyway (a prompt injection would).
    bot.llm
        .push(Reply::tool_call("tts", json!({"text": "hello"})));
    bot.llm.push(Reply::text("I cannot speak."));
    telegram.push_message(scripted_telegram::private_text(&ivan(), "say hello"));
    assert!(
        telegram.wait_for_sent(1, Duration::from_secs(60)).await,
        "no reply to Ivan within 60 s"
    );
    let requests = bot.llm.requests();
    assert!(
        !requests[0].tool_names().contains(&"tts".to_string()),
        "{:?}",
        requests[0].tool_names()
    );
    let results = requests[1].tool_results();
    assert!(results[0].1, "{results:?}");
    assert!(results[0].0.contains("not available"), "{results:?}");
    assert!(telegram.requests_of("sendVoice").is_empty());
    assert!(!bot.workspace.join(".saint/outbox/audio").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_the_budget_cannot_take_is_refused_before_it_is_made() {
    let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
    // Marko's manager budget is 5 USD a month; 11 characters at 1 USD each are more.
    let bot = Bot::start_priced(
        telegram_channels(&telegram),
        json!({"engine": "local"}),
        Some(1_000_000.0),
        &[("TG_BOT_TOKEN", BOT_TOKEN)],
        |_| {},
    )
    .await;
    bot.llm
        .push(Reply::tool_call("tts", json!({"text": "hello there"})));
    bot.llm.push(Reply::text("No voice note, sorry."));
    telegram.push_message(scripted_telegram::private_text(&marko(), "say hello"));
    assert!(
        telegram.wait_for_sent(1, Duration::from_secs(60)).await,
        "no reply to Marko within 60 s"
    );
    let results = bot.llm.requests()[1].tool_results();
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].0.contains("budget cannot take it"),
        "{results:?}"
    );
    assert!(telegram.requests_of("sendVoice").is_empty());
    assert!(bot.usage_lines("tts").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whatsapp_reply_carries_a_voice_note_from_the_speech_endpoint() {
    let audio = real_ogg_opus("Your order is ready.");
    let (speech, speech_url) = ScriptedSpeech::start(audio.clone()).await;
    let graph = ScriptedGraph::start(WA_ACCESS_TOKEN).await.unwrap();
    let bot = Bot::start_priced(
        json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "whatsapp", "kind": "whatsapp",
             "settings": {"phoneNumberId": PHONE_NUMBER_ID, "apiBaseUrl": graph.base_url()},
             "secretEnv": {"accessToken": "WA_ACCESS_TOKEN", "appSecret": "WA_APP_SECRET",
                           "verifyToken": "WA_VERIFY_TOKEN"}},
        ]),
        json!({"engine": "openai", "baseUrl": speech_url, "model": "gpt-4o-mini-tts",
               "voice": "alloy", "apiKeyEnv": "SAINT_SPEECH_API_KEY"}),
        Some(15.0),
        &[
            ("WA_ACCESS_TOKEN", WA_ACCESS_TOKEN),
            ("WA_APP_SECRET", WA_APP_SECRET),
            ("WA_VERIFY_TOKEN", "verify"),
            ("SAINT_SPEECH_API_KEY", SPEECH_KEY),
        ],
        |_| {},
    )
    .await;
    bot.llm.push(Reply::tool_call(
        "tts",
        json!({"text": "Your order is ready."}),
    ));
    bot.llm.push(Reply::text("Sent you a voice note."));
    let delivery = scripted::text_delivery(
        PHONE_NUMBER_ID,
        MARKO_WHATSAPP.trim_start_matches('+'),
        "wamid.IN-tts-1",
        "is my order ready?",
    );
    let body = serde_json::to_vec(&delivery).unwrap();
    let status = reqwest::Client::new()
        .post(format!("{}/channels/whatsapp/webhook", bot.agent().http))
        .header("content-type", "application/json")
        .header(
            "x-hub-signature-256",
            scripted::signature(WA_APP_SECRET, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);

    assert!(
        graph.wait_for_sent(2, Duration::from_secs(60)).await,
        "the text and the audio message were not both sent within 60 s: {:?}",
        graph.delivered()
    );
    // The endpoint got the documented request with the key from the agent's env.
    let requests = speech.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0.as_deref(), Some("Bearer sk-speech-test-key"));
    assert_eq!(
        requests[0].1,
        json!({"model": "gpt-4o-mini-tts", "input": "Your order is ready.", "voice": "alloy",
               "response_format": "opus"})
    );
    // Uploaded to the media endpoint, then sent as audio by the id it answered.
    let uploads = graph.uploads();
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].1, audio);
    let upload = graph
        .requests()
        .into_iter()
        .find(|request| request.path.ends_with("/media"))
        .unwrap();
    assert_eq!(upload.body["type"], "audio/ogg");
    assert_eq!(upload.body["file"]["contentType"], "audio/ogg");
    let delivered = graph.delivered();
    assert_eq!(delivered[0]["text"]["body"], "Sent you a voice note.");
    assert_eq!(delivered[1]["type"], "audio");
    assert_eq!(delivered[1]["to"], MARKO_WHATSAPP.trim_start_matches('+'));
    assert_eq!(delivered[1]["audio"]["id"], json!(uploads[0].0));
    let lines = bot.usage_lines("tts");
    assert_eq!(lines[0]["engine"], "openai");
    assert_eq!(lines[0]["audioBytes"], json!(audio.len()));
    // Priced in model.prices under the endpoint's model.
    let characters = lines[0]["characters"].as_f64().unwrap();
    let cost = lines[0]["costUsd"].as_f64().unwrap();
    assert!((cost - 15.0 * characters / 1e6).abs() < 1e-12, "{cost}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discord_reply_carries_the_voice_note_as_an_attached_file() {
    const DISCORD_TOKEN: &str = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.G1a2b3.tts-test-token";
    const MARKO_DISCORD: &str = "80351110224678914";
    const MARKO_DM: &str = "1200000000000000009";
    let discord = ScriptedDiscord::start(DISCORD_TOKEN, Duration::from_millis(500))
        .await
        .unwrap();
    let identity = format!("discord:{MARKO_DISCORD}");
    let bot = Bot::start_priced(
        json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "discord", "kind": "discord",
             "settings": {"apiBaseUrl": discord.api_base_url()},
             "secretEnv": {"botToken": "DISCORD_BOT_TOKEN"}},
        ]),
        json!({"engine": "local"}),
        None,
        &[("DISCORD_BOT_TOKEN", DISCORD_TOKEN)],
        |config| add_identity(config, "marko", &identity),
    )
    .await;
    assert!(
        discord
            .wait_until(Duration::from_secs(30), |discord| discord.connected())
            .await,
        "the agent never identified on the gateway"
    );
    bot.llm
        .push(Reply::tool_call("tts", json!({"text": "See you at noon."})));
    bot.llm.push(Reply::text("Voice note below."));
    discord
        .dispatch_message(direct_message(
            "1300000000000000009",
            MARKO_DM,
            MARKO_DISCORD,
            "say it",
        ))
        .unwrap();
    assert!(
        discord.wait_for_posted(2, Duration::from_secs(60)).await,
        "the text and the file were not both posted within 60 s: {:#?}",
        discord.requests()
    );
    let posted = discord.posted();
    assert_eq!(posted[0].content(), "Voice note below.");
    let file = &posted[1].body["files"][0];
    assert_eq!(posted[1].channel_id, MARKO_DM);
    assert_eq!(file["contentType"], "audio/ogg");
    assert_eq!(
        posted[1].body["attachments"][0]["filename"],
        file["fileName"]
    );
    assert_eq!(posted[1].body["allowed_mentions"], json!({"parse": []}));
    assert_eq!(posted[1].body["enforce_nonce"], true);
    assert!(is_ogg_opus(&scripted::file_bytes(file).unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slack_reply_shares_the_voice_note_as_an_uploaded_file() {
    const SLACK_BOT_TOKEN: &str = "xoxb-1111-2222-tts-test";
    const SLACK_APP_TOKEN: &str = "xapp-1-A0SAINT-3333-tts-test";
    const ANA_SLACK: &str = "U0ANA0009";
    const ANA_DM: &str = "D0ANA9";
    let slack = ScriptedSlack::start(SLACK_BOT_TOKEN, SLACK_APP_TOKEN)
        .await
        .unwrap();
    let identity = format!("slack:{ANA_SLACK}");
    let bot = Bot::start_priced(
        json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "slack", "kind": "slack", "settings": {"apiBaseUrl": slack.api_url()},
             "secretEnv": {"botToken": "SLACK_BOT_TOKEN", "appToken": "SLACK_APP_TOKEN"}},
        ]),
        json!({"engine": "local"}),
        None,
        &[
            ("SLACK_BOT_TOKEN", SLACK_BOT_TOKEN),
            ("SLACK_APP_TOKEN", SLACK_APP_TOKEN),
        ],
        |config| {
            config["roles"]["owner"]["tools"]["allow"]
                .as_array_mut()
                .unwrap()
                .push(json!("tts"));
            add_identity(config, "ana", &identity);
        },
    )
    .await;
    assert!(
        slack.wait_for_connections(1, Duration::from_secs(30)).await,
        "the agent never opened a socket"
    );
    bot.llm.push(Reply::tool_call(
        "tts",
        json!({"text": "Board meeting at ten."}),
    ));
    bot.llm.push(Reply::text("Here is the voice note."));
    slack.push_event(message_event(
        ANA_DM,
        "im",
        ANA_SLACK,
        "1700000900.000100",
        "read it to me",
    ));
    assert!(
        slack
            .wait_for_shared_files(1, Duration::from_secs(60))
            .await,
        "no file shared within 60 s: {:#?}",
        slack.requests()
    );
    let files = slack.shared_files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].channel, ANA_DM);
    assert!(is_ogg_opus(&files[0].data));
    assert_eq!(slack.posted()[0].text, "Here is the voice note.");
    // The documented order, the token on the Web API calls and never on the upload.
    let calls: Vec<(String, Option<String>)> = slack
        .requests()
        .into_iter()
        .filter(|request| request.method.contains("file") || request.method.contains("upload"))
        .map(|request| (request.method, request.bearer))
        .collect();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(
        calls[0],
        (
            "files.getUploadURLExternal".to_string(),
            Some(SLACK_BOT_TOKEN.to_string())
        )
    );
    assert!(calls[1].0.starts_with("POST /upload/F0TTS"), "{calls:?}");
    assert_eq!(calls[1].1, None);
    assert_eq!(
        calls[2],
        (
            "files.completeUploadExternal".to_string(),
            Some(SLACK_BOT_TOKEN.to_string())
        )
    );
}
