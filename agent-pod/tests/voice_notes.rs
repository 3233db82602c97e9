//! Voice notes end to end: the real agent binary fetches a WhatsApp voice note — a real
//! Opus/Ogg file, made here with Debian's `opusenc` from a generated WAV — from the
//! scripted Graph API, posts it to a scripted OpenAI-compatible transcription endpoint
//! (this file's, which records every request), and the transcript reaches the scripted
//! model marked as one. A failed, too long or too large note, or one the budget cannot
//! take, is told to the person with the answer; the message is always answered. Every
//! request is metered: a usage line, Prometheus series, the spend.

mod common;

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode},
    routing::post,
};
use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_scripted::{self as scripted, ScriptedGraph};
use serde_json::{Value, json};

const PHONE_NUMBER_ID: &str = "100000000000001";
const ACCESS_TOKEN: &str = "EAAG-test-access-token";
const APP_SECRET: &str = "test-app-secret";
const VERIFY_TOKEN: &str = "test-verify-token";
const TRANSCRIPTION_KEY: &str = "sk-transcription-key";
/// Marko: a manager, whose role has a budget (5 USD a month).
const MARKO: &str = "385991234568";
/// Ana: the owner, without a budget.
const ANA: &str = "385991234567";
const MODEL: &str = "whisper-1";
const PER_MINUTE: f64 = 0.006;

/// One request the transcription endpoint received.
#[derive(Clone, Debug)]
struct Heard {
    path: String,
    authorization: Option<String>,
    content_type: String,
    body: Vec<u8>,
}

impl Heard {
    /// The text of multipart field `name`.
    fn field(&self, name: &str) -> Option<String> {
        let marker = format!("name=\"{name}\"\r\n\r\n");
        let body = String::from_utf8_lossy(&self.body);
        let start = body.find(&marker)? + marker.len();
        let end = body[start..].find("\r\n--")?;
        Some(body[start..start + end].to_string())
    }

    fn carries(&self, bytes: &[u8]) -> bool {
        self.body.windows(bytes.len()).any(|window| window == bytes)
    }
}

/// What the endpoint answers next: a status and body, after a delay.
#[derive(Clone)]
struct Answer {
    status: u16,
    body: Value,
    delay: Duration,
}

#[derive(Clone, Default)]
struct Endpoint {
    heard: Arc<Mutex<Vec<Heard>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
}

impl Endpoint {
    async fn start() -> (Self, SocketAddr) {
        let endpoint = Self::default();
        let app = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(endpoint.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (endpoint, address)
    }

    fn answer(&self, status: u16, body: Value, delay: Duration) {
        self.answers.lock().unwrap().push(Answer {
            status,
            body,
            delay,
        });
    }

    fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap().clone()
    }
}

async fn transcribe(
    State(endpoint): State<Endpoint>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_string)
    };
    endpoint.heard.lock().unwrap().push(Heard {
        path: "/v1/audio/transcriptions".to_string(),
        authorization: header("authorization"),
        content_type: header("content-type").unwrap_or_default(),
        body: body.to_vec(),
    });
    let answer = {
        let mut answers = endpoint.answers.lock().unwrap();
        (!answers.is_empty()).then(|| answers.remove(0))
    };
    let answer = answer.unwrap_or(Answer {
        status: 200,
        body: json!({"text": "(unscripted)"}),
        delay: Duration::ZERO,
    });
    tokio::time::sleep(answer.delay).await;
    (
        StatusCode::from_u16(answer.status).unwrap(),
        answer.body.to_string(),
    )
}

/// A mono 16-bit WAV of `seconds` of a 440 Hz tone at 16 kHz.
fn tone_wav(seconds: u32) -> Vec<u8> {
    let rate = 16_000u32;
    let samples: Vec<i16> = (0..rate * seconds)
        .map(|index| {
            let phase = f64::from(index) * 440.0 * std::f64::consts::TAU / f64::from(rate);
            (phase.sin() * 8_000.0) as i16
        })
        .collect();
    let data = (samples.len() * 2) as u32;
    let mut wav = Vec::with_capacity(44 + data as usize);
    wav.extend(b"RIFF");
    wav.extend((36 + data).to_le_bytes());
    wav.extend(b"WAVEfmt ");
    wav.extend(16u32.to_le_bytes());
    wav.extend(1u16.to_le_bytes()); // PCM
    wav.extend(1u16.to_le_bytes()); // mono
    wav.extend(rate.to_le_bytes());
    wav.extend((rate * 2).to_le_bytes());
    wav.extend(2u16.to_le_bytes());
    wav.extend(16u16.to_le_bytes());
    wav.extend(b"data");
    wav.extend(data.to_le_bytes());
    for sample in samples {
        wav.extend(sample.to_le_bytes());
    }
    wav
}

/// A real voice note: `seconds` of tone encoded by `opusenc` (Debian `opus-tools`) as
/// Opus in Ogg, the way WhatsApp's and Telegram's voice notes come.
fn voice_note(directory: &Path, seconds: u32) -> Vec<u8> {
    let wav = directory.join(format!("tone-{seconds}.wav"));
    let ogg = directory.join(format!("tone-{seconds}.ogg"));
    std::fs::write(&wav, tone_wav(seconds)).unwrap();
    let status = Command::new("opusenc")
        .args(["--quiet", "--bitrate", "24"])
        .arg(&wav)
        .arg(&ogg)
        .status()
        .expect("opusenc runs (Debian package opus-tools; ./test.sh prerequisites installs it)");
    assert!(status.success(), "opusenc failed");
    let bytes = std::fs::read(&ogg).unwrap();
    assert!(bytes.starts_with(b"OggS"));
    bytes
}

struct Bot {
    llm: ScriptedLlm,
    graph: ScriptedGraph,
    endpoint: Endpoint,
    workspace: PathBuf,
    directory: PathBuf,
    agent: AgentProcess,
    client: reqwest::Client,
    _directory: tempfile::TempDir,
}

impl Bot {
    /// The example company on WhatsApp; `media` is the config's `media` section, given
    /// the endpoint's base URL (`None`: no transcription).
    async fn start(media: impl FnOnce(&str) -> Option<Value>) -> Self {
        Self::start_with(media, |_| {}).await
    }

    async fn start_with(
        media: impl FnOnce(&str) -> Option<Value>,
        adjust: impl FnOnce(&mut Value),
    ) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let graph = ScriptedGraph::start(ACCESS_TOKEN).await.unwrap();
        let (endpoint, address) = Endpoint::start().await;
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
        if let Some(media) = media(&format!("http://{address}")) {
            config["media"] = media;
        }
        config["model"]["prices"][MODEL] =
            json!({"inputPerMtok": 0, "outputPerMtok": 0, "perAudioMinute": PER_MINUTE});
        adjust(&mut config);
        write_config(&config_path, &config);
        let agent = spawn_agent(
            &config_path,
            &workspace,
            &[
                ("WA_ACCESS_TOKEN", ACCESS_TOKEN),
                ("WA_APP_SECRET", APP_SECRET),
                ("WA_VERIFY_TOKEN", VERIFY_TOKEN),
                ("SAINT_TRANSCRIPTION_API_KEY", TRANSCRIPTION_KEY),
            ],
        );
        Self {
            llm,
            graph,
            endpoint,
            workspace,
            directory: directory.path().to_path_buf(),
            agent,
            client: reqwest::Client::new(),
            _directory: directory,
        }
    }

    /// Sends `from` a voice note of `bytes` as WhatsApp message `id` and waits for the
    /// answer the platform was sent; returns it.
    async fn voice_note(&self, from: &str, id: &str, mime_type: &str, bytes: Vec<u8>) -> String {
        let media_id = format!("media-{id}");
        self.graph.add_media(&media_id, mime_type, bytes);
        let before = self.graph.delivered_texts().len();
        let delivery = scripted::media_delivery(
            PHONE_NUMBER_ID,
            from,
            id,
            "audio",
            json!({"mime_type": mime_type, "sha256": "x", "id": media_id, "voice": true}),
        );
        let body = serde_json::to_vec(&delivery).unwrap();
        let status = self
            .client
            .post(format!("{}/channels/whatsapp/webhook", self.agent.http))
            .header("content-type", "application/json")
            .header(
                "x-hub-signature-256",
                scripted::signature(APP_SECRET, &body),
            )
            .body(body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
        assert!(
            self.graph
                .wait_for_sent(before as u64 + 1, Duration::from_secs(60))
                .await,
            "no answer to the voice note {id} within 60 s; graph saw {:#?}",
            self.graph.requests()
        );
        let delivered = self.graph.delivered_texts();
        assert_eq!(delivered.len(), before + 1, "{delivered:#?}");
        delivered.last().unwrap().1.clone()
    }

    /// The text of the user messages in the model's last request.
    fn model_saw(&self) -> String {
        self.llm
            .requests()
            .last()
            .expect("a model request")
            .user_texts()
            .join("\n")
    }

    fn usage_lines(&self, field: &str) -> Vec<Value> {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line.get(field).is_some())
            .collect()
    }

    async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.agent.metrics))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    fn spent(&self, contact: &str) -> f64 {
        rusqlite::Connection::open(self.workspace.join("sessions/transcripts.sqlite3"))
            .unwrap()
            .query_row(
                "SELECT COALESCE(SUM(usd), 0.0) FROM spend WHERE contact = ?1",
                [contact],
                |row| row.get(0),
            )
            .unwrap()
    }
}

fn transcription(base_url: &str, limits: Value) -> Option<Value> {
    let mut transcription = json!({
        "baseUrl": base_url, "model": MODEL, "apiKeyEnv": "SAINT_TRANSCRIPTION_API_KEY",
    });
    transcription
        .as_object_mut()
        .unwrap()
        .extend(limits.as_object().unwrap().clone());
    Some(json!({"transcription": transcription}))
}

/// The metric line of `name` whose labels include all of `labels`, as its value.
fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .find(|line| labels.iter().all(|label| line.contains(label)))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whatsapp_voice_note_is_transcribed_and_reaches_the_model_marked_as_a_transcript() {
    let bot = Bot::start(|base_url| transcription(base_url, json!({}))).await;
    let note = voice_note(&bot.directory, 3);
    bot.endpoint.answer(
        200,
        json!({"text": "Please order ten anvils for Friday."}),
        Duration::ZERO,
    );
    bot.llm.push(Reply::text("Ten anvils, ordered for Friday."));

    let answer = bot
        .voice_note(MARKO, "wamid.V1", "audio/ogg; codecs=opus", note.clone())
        .await;

    assert_eq!(answer, "Ten anvils, ordered for Friday.");
    let heard = bot.endpoint.heard();
    assert_eq!(heard.len(), 1);
    let request = &heard[0];
    assert_eq!(request.path, "/v1/audio/transcriptions");
    assert!(
        request
            .content_type
            .starts_with("multipart/form-data; boundary="),
        "{}",
        request.content_type
    );
    assert_eq!(
        request.authorization.as_deref(),
        Some(format!("Bearer {TRANSCRIPTION_KEY}").as_str())
    );
    assert_eq!(request.field("model").as_deref(), Some(MODEL));
    assert!(request.carries(&note), "the Ogg file's bytes were not sent");
    let body = String::from_utf8_lossy(&request.body);
    assert!(
        body.contains("name=\"file\"; filename=\"audio.ogg\"\r\nContent-Type: audio/ogg"),
        "{}",
        &body[..400.min(body.len())]
    );

    let saw = bot.model_saw();
    assert!(
        saw.contains(
            "[voice note transcript, inbox/whatsapp/wamid.V1/audio.ogg, 3 s]\n\
             Please order ten anvils for Friday.\n[end of voice note transcript]"
        ),
        "{saw}"
    );

    // Metered: a usage line, the series, the spend in Marko's budget.
    let lines = bot.usage_lines("transcription");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let line = &lines[0];
    assert_eq!(line["transcription"], "ok");
    assert_eq!(line["user"], "marko");
    assert_eq!(line["role"], "manager");
    assert_eq!(line["model"], MODEL);
    assert_eq!(line["audioBytes"], note.len() as u64);
    let seconds = line["audioSeconds"].as_f64().unwrap();
    assert!((seconds - 3.0).abs() < 0.05, "{seconds}");
    let cost = line["costUsd"].as_f64().unwrap();
    assert!((cost - seconds / 60.0 * PER_MINUTE).abs() < 1e-12, "{cost}");
    let metrics = bot.metrics().await;
    let labels = [
        "service=\"transcription\"",
        "role=\"manager\"",
        "person=\"marko\"",
    ];
    assert_eq!(
        metric(&metrics, "saint_media_audio_bytes_total", &labels),
        Some(note.len() as f64),
        "{metrics}"
    );
    let counted = metric(&metrics, "saint_media_audio_seconds_total", &labels).unwrap();
    assert!((counted - seconds).abs() < 1e-9);
    assert_eq!(
        metric(
            &metrics,
            "saint_media_requests_total",
            &[
                "service=\"transcription\"",
                "outcome=\"ok\"",
                "role=\"manager\""
            ]
        ),
        Some(1.0)
    );
    let model_cost = metric(
        &metrics,
        "saint_llm_cost_usd_total",
        &["model=\"whisper-1\"", "person=\"marko\""],
    )
    .unwrap();
    assert!((model_cost - cost).abs() < 1e-12);
    // The model's own calls are priced too (Marko's role uses Sonnet), so his spend is
    // at least the transcription's.
    assert!(bot.spent("marko") >= cost, "{}", bot.spent("marko"));
    // The ledger lists it, so his rows' costs still sum to his llm_cost_usd series.
    let ledger = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["ledger", "--contact", "marko", "--workspace"])
        .arg(&bot.workspace)
        .output()
        .unwrap();
    assert!(ledger.status.success(), "{ledger:?}");
    let rows: Vec<Value> = String::from_utf8(ledger.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|row: &Value| row["kind"] == "transcription")
        .collect();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        (&rows[0]["what"], &rows[0]["outcome"], &rows[0]["role"]),
        (&json!(MODEL), &json!("ok"), &json!("manager"))
    );
    assert!((rows[0]["costUsd"].as_f64().unwrap() - cost).abs() < 1e-12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_slow_transcription_is_told_to_the_person_and_the_message_still_answered() {
    let bot = Bot::start(|base_url| transcription(base_url, json!({"timeoutSeconds": 1}))).await;
    let note = voice_note(&bot.directory, 2);
    bot.endpoint
        .answer(500, json!({"error": "overloaded"}), Duration::ZERO);
    bot.llm
        .push(Reply::text("Sorry, could you type it instead?"));

    let answer = bot
        .voice_note(ANA, "wamid.F1", "audio/ogg; codecs=opus", note.clone())
        .await;

    assert_eq!(
        answer,
        "(I could not listen to your voice note: the transcription service answered with \
         status 500.)\n\nSorry, could you type it instead?"
    );
    let saw = bot.model_saw();
    assert!(
        saw.contains(
            "[voice note inbox/whatsapp/wamid.F1/audio.ogg: not transcribed: the transcription \
             service answered with status 500. The person is told so with your answer]"
        ),
        "{saw}"
    );

    // An endpoint slower than timeoutSeconds counts as failed, and is said so.
    bot.endpoint
        .answer(200, json!({"text": "too late"}), Duration::from_secs(5));
    bot.llm.push(Reply::text("Please type it."));
    let answer = bot
        .voice_note(ANA, "wamid.F2", "audio/ogg; codecs=opus", note.clone())
        .await;
    assert_eq!(
        answer,
        "(I could not listen to your voice note: the transcription service did not answer \
         within 1 seconds.)\n\nPlease type it."
    );
    assert!(!bot.model_saw().contains("too late"));

    // An answer without text, or one far larger than any transcript, is no transcript.
    bot.endpoint
        .answer(200, json!({"transcript": "wrong field"}), Duration::ZERO);
    bot.endpoint.answer(
        200,
        json!({"text": "a".repeat(2 * 1024 * 1024)}),
        Duration::ZERO,
    );
    bot.llm.set_fallback(Reply::text("Please type it."));
    for id in ["wamid.F3", "wamid.F4"] {
        let answer = bot
            .voice_note(ANA, id, "audio/ogg; codecs=opus", note.clone())
            .await;
        assert_eq!(
            answer,
            "(I could not listen to your voice note: the transcription service's answer held \
             no text.)\n\nPlease type it."
        );
    }

    let outcomes: Vec<Value> = bot
        .usage_lines("transcription")
        .iter()
        .map(|line| json!([line["transcription"], line["costUsd"]]))
        .collect();
    // A failed request costs nothing (Ana's spend is her model calls' alone).
    assert_eq!(
        outcomes,
        vec![
            json!(["failed", 0.0]),
            json!(["timeout", 0.0]),
            json!(["bad_answer", 0.0]),
            json!(["bad_answer", 0.0])
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_long_or_too_large_recording_is_refused_before_it_is_sent() {
    let bot =
        Bot::start(|base_url| transcription(base_url, json!({"maxSeconds": 2, "maxBytes": 60000})))
            .await;
    let long = voice_note(&bot.directory, 3);
    bot.llm.set_fallback(Reply::text("Noted."));

    let answer = bot
        .voice_note(MARKO, "wamid.L1", "audio/ogg; codecs=opus", long)
        .await;
    assert_eq!(
        answer,
        "(I could not listen to your voice note: the recording is 3 seconds long, over the \
         2-second limit for transcription.)\n\nNoted."
    );

    // A WAV file (no length read from it) over maxBytes.
    let wav = tone_wav(2);
    assert!(wav.len() > 60_000);
    let answer = bot
        .voice_note(MARKO, "wamid.L2", "audio/wav", wav.clone())
        .await;
    assert_eq!(
        answer,
        format!(
            "(I could not listen to your voice note: the file is {} bytes, over the \
             60000-byte limit for transcription.)\n\nNoted.",
            wav.len()
        )
    );
    assert!(bot.endpoint.heard().is_empty(), "nothing is sent");
    let outcomes: Vec<Value> = bot
        .usage_lines("transcription")
        .iter()
        .map(|line| json!([line["transcription"], line["audioBytes"]]))
        .collect();
    assert_eq!(
        outcomes,
        vec![json!(["too_long", 0]), json!(["too_large", 0])]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_the_budget_cannot_take_is_not_sent_and_the_person_is_told() {
    // 200 USD a minute: a 3-second note would cost 10 USD of Marko's 5.
    let bot = Bot::start_with(
        |base_url| transcription(base_url, json!({})),
        |config| config["model"]["prices"][MODEL]["perAudioMinute"] = json!(200.0),
    )
    .await;
    let note = voice_note(&bot.directory, 3);
    bot.llm.push(Reply::text("Understood."));

    let answer = bot
        .voice_note(MARKO, "wamid.B1", "audio/ogg; codecs=opus", note)
        .await;

    assert_eq!(
        answer,
        "(I could not listen to your voice note: transcribing it would pass your budget.)\n\n\
         Understood."
    );
    assert!(bot.endpoint.heard().is_empty());
    let lines = bot.usage_lines("transcription");
    assert_eq!(lines[0]["transcription"], "over_budget");
    let metrics = bot.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "saint_budget_refusals_total",
            &["role=\"manager\""]
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_transcription_configured_the_model_is_told_why_it_cannot_hear_the_note() {
    let bot = Bot::start(|_| None).await;
    let note = voice_note(&bot.directory, 1);
    bot.llm
        .push(Reply::text("I can't listen to voice notes; please type."));

    let answer = bot
        .voice_note(ANA, "wamid.N1", "audio/ogg; codecs=opus", note)
        .await;

    assert_eq!(answer, "I can't listen to voice notes; please type.");
    let saw = bot.model_saw();
    assert!(
        saw.contains(
            "[voice note inbox/whatsapp/wamid.N1/audio.ogg: not transcribed, because \
             transcription is not configured for this bot; you cannot hear it]"
        ),
        "{saw}"
    );
    assert!(bot.endpoint.heard().is_empty());
}

/// The operator's real rendering (`validate` and the config map and workload builders)
/// of a SaintBot with `spec.media.transcription`, read by the agent's config parser: the
/// agent gets the endpoint and limits, and the key's variable is one the operator sets
/// on the agent container from the Secret.
#[test]
fn the_operators_rendered_transcription_is_what_the_agent_reads() {
    use saint_operator::{
        crd::{
            media::{MediaSpec, TranscriptionSpec},
            saintbot::ModelPriceSpec,
        },
        offline::{Manifests, read_manifests},
        saintbot_controller::{
            build::{config_map::rendered_config_json, workload::deployment},
            validate::validate,
        },
        settings::OperatorSettings,
    };

    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../operator/tests/fixtures/acme.yaml");
    let mut manifests = Manifests::default();
    read_manifests(
        &std::fs::read_to_string(fixture).unwrap(),
        "acme",
        &mut manifests,
    )
    .unwrap();
    let mut bot = manifests.bots.remove(0);
    bot.spec.media = Some(MediaSpec {
        transcription: Some(TranscriptionSpec {
            base_url: "https://stt.acme.example".into(),
            model: MODEL.into(),
            api_key_secret_ref: Some(saint_operator::crd::SecretKeyReference {
                name: "acme-stt".into(),
                key: "api-key".into(),
            }),
            max_seconds: Some(300),
            max_bytes: Some(8 * 1024 * 1024),
            ..TranscriptionSpec::default()
        }),
        ..MediaSpec::default()
    });
    bot.spec.model.prices.insert(
        MODEL.into(),
        ModelPriceSpec {
            per_audio_minute: Some(PER_MINUTE),
            per_million_characters: None,
            ..ModelPriceSpec::default()
        },
    );
    let validated = validate(
        &bot,
        &manifests.dereferenced,
        &OperatorSettings::with_tag("test"),
    )
    .expect("the bot renders");

    let config = saint_config::BotConfig::from_json(&rendered_config_json(&validated))
        .expect("the agent accepts the rendered config");

    let transcription = config.media.transcription.expect("transcription rendered");
    assert_eq!(
        (
            transcription.base_url.as_str(),
            transcription.model.as_str(),
            transcription.max_seconds,
            transcription.max_bytes,
            transcription.timeout_seconds,
        ),
        ("https://stt.acme.example", MODEL, 300, 8 * 1024 * 1024, 60)
    );
    assert_eq!(
        config.model.prices[MODEL].per_audio_minute,
        Some(PER_MINUTE)
    );
    let key_variable = transcription.api_key_env.expect("a key variable");
    let pod = serde_json::to_value(deployment(&validated)).unwrap();
    let agent = pod["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|container| container["name"] == "agent")
        .unwrap();
    assert!(
        agent["env"].as_array().unwrap().contains(&json!({
            "name": key_variable,
            "valueFrom": {"secretKeyRef": {"name": "acme-stt", "key": "api-key"}},
        })),
        "{:#}",
        agent["env"]
    );
}
