//! Attachments end to end: the real agent binary long-polls a scripted Telegram, saves
//! what Ivan and Marko send, and shows it to the scripted model through saint-media's
//! extraction child (`saint-agent extract-document`). A photo reaches a role with the
//! `image` tool as an image block, scaled to 1568 pixels, in both wire formats; a
//! role without it gets the note only; a PDF and an XLSX arrive as untrusted text, a
//! zip-bomb DOCX as a line saying why it was refused.

mod common;

use std::{path::PathBuf, time::Duration};

use base64::Engine;
use common::*;
use saint_media::fixtures::{self, Cell};
use saint_scripted::llm::{RecordedRequest, Reply, ScriptedLlm, Wire};
use saint_scripted::telegram::{self as scripted, Person, ScriptedTelegram};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "7700000003:AAF-media-test-token";
const MARKO_TELEGRAM: &str = "222222222";

fn ivan() -> Person {
    Person::new(IVAN_TELEGRAM.parse().unwrap(), "Ivan")
}

fn marko() -> Person {
    Person::new(MARKO_TELEGRAM.parse().unwrap(), "Marko")
}

struct Bot {
    llm: ScriptedLlm,
    telegram: ScriptedTelegram,
    workspace: PathBuf,
    // Fields drop in order: the agent stops before its directory goes.
    _agent: AgentProcess,
    _directory: tempfile::TempDir,
}

impl Bot {
    /// The example company on Telegram, Ivan's employee role given the `image` tool,
    /// the model speaking `wire`.
    async fn start(wire: Wire) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let telegram = ScriptedTelegram::start(BOT_TOKEN).await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path: PathBuf = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        if wire == Wire::Openai {
            config["model"]["provider"] = json!("openai");
        }
        config["roles"]["employee"]["tools"]["allow"]
            .as_array_mut()
            .unwrap()
            .push(json!("image"));
        config["channels"] = json!([
            {"name": "api", "kind": "http", "secretEnv": {"token": "SAINT_CHANNEL_API_TOKEN"}},
            {"name": "telegram", "kind": "telegram",
             "settings": {"apiBaseUrl": telegram.base_url()},
             "secretEnv": {"botToken": "TG_BOT_TOKEN"}},
        ]);
        write_config(&config_path, &config);
        let agent = spawn_agent(&config_path, &workspace, &[("TG_BOT_TOKEN", BOT_TOKEN)]);
        Self {
            llm,
            telegram,
            workspace,
            _agent: agent,
            _directory: directory,
        }
    }

    /// Sends `message` and waits for the bot's answer; the model's request for it.
    async fn ask(&self, message: Value) -> RecordedRequest {
        let before = self.telegram.sent().len() as u64;
        self.llm.push(Reply::text("Got it."));
        self.telegram.push_message(message);
        assert!(
            self.telegram
                .wait_for_sent(before + 1, Duration::from_secs(60))
                .await
        );
        self.llm.requests().pop().expect("a model request")
    }
}

fn document(from: &Person, file_id: &str, file_name: &str, mime_type: &str) -> Value {
    json!({
        "from": {"id": from.id, "is_bot": false, "first_name": from.first_name},
        "chat": scripted::private_chat(from),
        "caption": "please summarise",
        "document": {"file_id": file_id, "file_unique_id": "AgADdoc", "file_name": file_name, "mime_type": mime_type},
    })
}

/// The images of the last user message, as (media type, decoded bytes), in either
/// wire format.
fn images(request: &RecordedRequest) -> Vec<(String, Vec<u8>)> {
    let messages = request.body["messages"].as_array().unwrap();
    let last = messages
        .iter()
        .rev()
        .find(|message| message["role"] == "user")
        .unwrap();
    let blocks = last["content"].as_array().cloned().unwrap_or_default();
    let decode = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap()
    };
    blocks
        .iter()
        .filter_map(|block| match (request.wire, block["type"].as_str()) {
            (Wire::Anthropic, Some("image")) => {
                assert_eq!(block["source"]["type"], "base64");
                Some((
                    block["source"]["media_type"].as_str().unwrap().to_string(),
                    decode(block["source"]["data"].as_str().unwrap()),
                ))
            }
            (Wire::Openai, Some("image_url")) => {
                let url = block["image_url"]["url"].as_str().unwrap();
                let (media_type, data) = url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"))
                    .expect("a base64 data URL");
                Some((media_type.to_string(), decode(data)))
            }
            _ => None,
        })
        .collect()
}

async fn a_photo_reaches_the_model_as_an_image_block_scaled_down(wire: Wire) {
    let bot = Bot::start(wire).await;
    let photo = fixtures::photo_with_exif(3000, 2000, 1);
    bot.telegram
        .add_file("AgACAgIAAxk-photo", "photos/file_7.jpg", photo.clone());

    let request = bot
        .ask(scripted::photo(
            scripted::private_chat(&ivan()),
            &ivan(),
            "AgACAgIAAxk-photo",
            "what is on this receipt?",
        ))
        .await;

    assert_eq!(request.wire, wire);
    let images = images(&request);
    assert_eq!(images.len(), 1, "{:#}", request.body["messages"]);
    let (media_type, bytes) = &images[0];
    assert_eq!(media_type, "image/jpeg");
    let decoded = image::load_from_memory(bytes).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (1568, 1045));
    assert!(bytes.len() < photo.len() / 2);
    assert!(
        !bytes
            .windows(fixtures::EXIF_MARKER.len())
            .any(|window| window == fixtures::EXIF_MARKER)
    );
    let texts = request.user_texts().join("\n");
    assert!(texts.contains("what is on this receipt?"), "{texts}");
    assert!(
        texts.contains("image, 3000 × 2000 scaled to 1568 × 1045; shown below"),
        "{texts}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_reaches_an_anthropic_model_as_an_image_block_scaled_down() {
    a_photo_reaches_the_model_as_an_image_block_scaled_down(Wire::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_reaches_an_openai_compatible_model_as_an_image_block_scaled_down() {
    a_photo_reaches_the_model_as_an_image_block_scaled_down(Wire::Openai).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_the_image_tool_gets_the_note_only() {
    let bot = Bot::start(Wire::Anthropic).await;
    bot.telegram.add_file(
        "AgACAgIAAxk-marko",
        "photos/file_8.jpg",
        fixtures::photo_with_exif(800, 600, 1),
    );

    let request = bot
        .ask(scripted::photo(
            scripted::private_chat(&marko()),
            &marko(),
            "AgACAgIAAxk-marko",
            "the whiteboard",
        ))
        .await;

    assert!(
        images(&request).is_empty(),
        "{:#}",
        request.body["messages"]
    );
    let texts = request.user_texts().join("\n");
    assert!(texts.contains("[image attachment (image/jpeg,"), "{texts}");
    assert!(!texts.contains("shown below"), "{texts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdf_and_a_workbook_reach_the_model_as_untrusted_text_and_a_zip_bomb_as_a_refusal() {
    let bot = Bot::start(Wire::Anthropic).await;
    let pdf = fixtures::pdf(3, |page| {
        format!("Invoice 2041, page {page}: total due 1,250 EUR")
    });
    bot.telegram
        .add_file("BQACAgIAAxk-pdf", "documents/file_9.pdf", pdf);
    let xlsx = fixtures::xlsx(&[(
        "Costs",
        vec![
            vec![Cell::Text("item"), Cell::Text("eur")],
            vec![Cell::Text("ferry"), Cell::Number(86.5)],
        ],
    )]);
    bot.telegram
        .add_file("BQACAgIAAxk-xlsx", "documents/file_10.xlsx", xlsx);

    let request = bot
        .ask(document(
            &ivan(),
            "BQACAgIAAxk-pdf",
            "invoice.pdf",
            "application/pdf",
        ))
        .await;
    let texts = request.user_texts().join("\n");
    assert!(
        texts.contains("<<<EXTERNAL_UNTRUSTED_CONTENT>>>"),
        "{texts}"
    );
    assert!(
        texts.contains("invoice.pdf (PDF text, complete)"),
        "{texts}"
    );
    for page in 1..=3 {
        assert!(
            texts.contains(&format!("Invoice 2041, page {page}: total due 1,250 EUR")),
            "{texts}"
        );
    }

    let request = bot
        .ask(document(
            &ivan(),
            "BQACAgIAAxk-xlsx",
            "trip.xlsx",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        ))
        .await;
    let texts = request.user_texts().join("\n");
    assert!(texts.contains("trip.xlsx (XLSX text, complete)"), "{texts}");
    assert!(
        texts.contains("## Sheet: Costs\nitem,eur\nferry,86.5\n"),
        "{texts}"
    );

    // A gigabyte of zeros in a megabyte: refused from its headers, and said so.
    bot.telegram.add_file(
        "BQACAgIAAxk-bomb",
        "documents/file_11.docx",
        fixtures::zip_bomb_docx(1 << 30, false),
    );
    let request = bot
        .ask(document(
            &ivan(),
            "BQACAgIAAxk-bomb",
            "minutes.docx",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ))
        .await;
    let texts = request.user_texts().join("\n");
    assert!(
        texts.contains(
            "minutes.docx: no text could be read: refused: refused archive: \
             word/document.xml inflates 1031×"
        ),
        "{texts}"
    );
    assert!(texts.contains("a zip bomb]"), "{texts}");
}

/// The `image` tool: the model looks at a file Ivan may read and sees it, scaled, beside
/// the tool's result; a file his role may not read and a URL on a loopback address are
/// refused (the probe listening there is never connected to).
async fn the_image_tool_shows_a_readable_file_and_refuses_the_rest(wire: Wire) {
    let bot = Bot::start(wire).await;
    std::fs::create_dir_all(bot.workspace.join("data")).unwrap();
    std::fs::write(
        bot.workspace.join("data/chart.jpg"),
        fixtures::photo_with_exif(3000, 2000, 1),
    )
    .unwrap();
    std::fs::write(
        bot.workspace.join("memory/users/ana/photo.jpg"),
        fixtures::photo_with_exif(800, 600, 1),
    )
    .unwrap();
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.set_nonblocking(true).unwrap();
    let private = format!("http://{}/chart.png", probe.local_addr().unwrap());

    bot.llm
        .push(Reply::tool_call("image", json!({"path": "data/chart.jpg"})));
    bot.llm
        .push(Reply::tool_call("image", json!({"url": private})));
    bot.llm.push(Reply::tool_call(
        "image",
        json!({"path": "memory/users/ana/photo.jpg"}),
    ));
    let last = bot
        .ask(scripted::private_text(&ivan(), "what does our chart show?"))
        .await;

    let requests = bot.llm.requests();
    assert_eq!(requests.len(), 4, "three tool calls, then the answer");
    let seen = &requests[1];
    let shown = images(seen);
    assert_eq!(shown.len(), 1, "{:#}", seen.body["messages"]);
    assert_eq!(shown[0].0, "image/jpeg");
    let decoded = image::load_from_memory(&shown[0].1).unwrap();
    assert_eq!((decoded.width(), decoded.height()), (1568, 1045));
    let results = seen.tool_results();
    assert!(
        !results[0].1 && results[0].0.contains("3000 × 2000 scaled to 1568 × 1045"),
        "{results:?}"
    );
    // The refused calls add no image: the history keeps only the first round's.
    let image_count = |request: &RecordedRequest| {
        request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
            .filter(|block| block["type"] == "image" || block["type"] == "image_url")
            .count()
    };
    let refused_url = requests[2].tool_results();
    assert!(refused_url[1].1, "{refused_url:?}");
    assert_eq!(image_count(&requests[2]), 1);
    assert!(
        matches!(probe.accept(), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "the guard let a request reach a loopback address"
    );
    let refused_path = last.tool_results();
    assert!(refused_path[2].1, "{refused_path:?}");
    assert_eq!(image_count(&last), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_tool_shows_an_anthropic_model_a_readable_file_and_refuses_the_rest() {
    the_image_tool_shows_a_readable_file_and_refuses_the_rest(Wire::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_tool_shows_an_openai_compatible_model_a_readable_file_and_refuses_the_rest() {
    the_image_tool_shows_a_readable_file_and_refuses_the_rest(Wire::Openai).await;
}
