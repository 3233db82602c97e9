//! Erasure and export of one person with the real binary over real stores: three people
//! write over the HTTP channel (their turns, usage lines) and a Telegram channel's queue
//! (inbox rows with attachments, replies in the outbox, a group conversation), keep
//! memory notes (indexed with vectors), a scheduled job and a sub-agent session. After
//! `saint-agent erase --contact ivan` no byte of the workspace — SQLite files included —
//! holds Ivan's slug, identities, the canary phrase he sent or his note's vector, while
//! Ana's and Marko's data is all there; `export` before it carries the canary.

mod common;

use std::{path::Path, process::Command, sync::Arc};

use common::*;
use rusqlite::Connection;
use saint_agent::{
    schedule::{jobs::JobStore, jobs::NewJob, spec::Spec},
    session::SessionStore,
};
use saint_channels::{
    message::{AttachmentRef, Conversation, InboundMessage, OutboundBody, ReplyContext},
    queue,
};
use saint_config::ChannelKind;
use saint_llm::Message;
use saint_memory::{Embedder, EmbeddingError, IndexOptions, MemoryIndex};
use saint_scripted::llm::Reply;

const CANARY: &str = "quokka-marmalade-7731";
const MARKO_TELEGRAM: &str = "222222222";
const GROUP: &str = "group:telegram:-100555";
const DIMENSIONS: usize = 8;

/// Vectors whose bytes are recognisable: the canary's note embeds to (0.6, 0.8, 0, …).
struct MarkedEmbedder;

impl Embedder for MarkedEmbedder {
    fn model_id(&self) -> String {
        "marked-test-embedder".into()
    }
    fn dimensions(&self) -> usize {
        DIMENSIONS
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0; DIMENSIONS];
                if text.contains(CANARY) {
                    (vector[0], vector[1]) = (0.6, 0.8);
                } else {
                    (vector[2], vector[3]) = (0.8, 0.6);
                }
                vector
            })
            .collect())
    }
}

fn canary_vector_bytes() -> Vec<u8> {
    [0.6f32, 0.8f32]
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

fn inbound(sender: &str, platform_id: &str, text: &str, group: bool) -> InboundMessage {
    InboundMessage {
        channel: "telegram".into(),
        kind: ChannelKind::Telegram,
        platform_id: platform_id.into(),
        sender: format!("telegram:{sender}").parse().unwrap(),
        sender_verified: true,
        unverified_origin: None,
        display_name: None,
        text: text.into(),
        attachments: vec![AttachmentRef {
            id: format!("file-{platform_id}"),
            kind: "document".into(),
            mime_type: "text/plain".into(),
            file_name: Some("note.txt".into()),
        }],
        sent_at: "2026-11-20T09:00:00Z".into(),
        context: ReplyContext::default(),
        conversation: group.then(|| Conversation {
            id: "-100555".into(),
            title: None,
        }),
        pressed: false,
    }
}

/// The Telegram side: inbox rows (answered, each with its attachment on disk), the
/// replies in the outbox, and a group conversation both Ivan and Marko wrote in.
fn telegram_traffic(workspace: &Path, store: &SessionStore) {
    for (sender, platform_id, text) in [
        (IVAN_TELEGRAM, "701", format!("ivan on telegram: {CANARY}")),
        (
            MARKO_TELEGRAM,
            "702",
            "marko on telegram: lighthouse".to_string(),
        ),
        (IVAN_TELEGRAM, "703", format!("[group] {CANARY} again")),
        (MARKO_TELEGRAM, "704", "[group] marko agrees".to_string()),
    ] {
        let message = inbound(sender, platform_id, &text, platform_id >= "703");
        let folder = workspace.join("inbox/telegram").join(platform_id);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("note.txt"), format!("attached: {text}")).unwrap();
        store
            .queue("store a message", |transaction| {
                let id = queue::insert_inbound(transaction, &message)?.unwrap();
                queue::queue_reply(
                    transaction,
                    id,
                    "telegram",
                    message.sender.as_ref(),
                    &OutboundBody {
                        text: format!("reply to {text}"),
                        files: Vec::new(),
                        context: ReplyContext::default(),
                    },
                )
                .map(drop)
            })
            .unwrap();
    }
    for (contact, role, identity, text) in [
        (
            "ivan",
            "employee",
            IVAN_TELEGRAM,
            format!("[Ivan (employee)]: {CANARY}"),
        ),
        (
            "marko",
            "manager",
            MARKO_TELEGRAM,
            "[Marko (manager)]: lighthouse".into(),
        ),
        (
            "ivan",
            "employee",
            IVAN_TELEGRAM,
            "[Ivan (employee)]: one more".into(),
        ),
    ] {
        let identity = format!("telegram:{identity}");
        store
            .append(GROUP, contact, role, &identity, &Message::user_text(text))
            .unwrap();
        store
            .append(
                GROUP,
                contact,
                role,
                &identity,
                &Message::assistant_text("ok"),
            )
            .unwrap();
    }
    // A sub-agent Ivan started.
    store
        .append(
            "subagent:sa1:person:ivan",
            "ivan",
            "employee",
            &format!("telegram:{IVAN_TELEGRAM}"),
            &Message::user_text(format!("research {CANARY}")),
        )
        .unwrap();
}

fn jobs(workspace: &Path) {
    let store = JobStore::open(workspace.join("sessions/jobs.sqlite3")).unwrap();
    let now = jiff::Timestamp::now();
    for (owner, identity, text) in [
        ("ivan", IVAN_TELEGRAM, format!("remind me of {CANARY}")),
        (
            "marko",
            MARKO_TELEGRAM,
            "weekly lighthouse report".to_string(),
        ),
    ] {
        store
            .add(
                &NewJob {
                    owner: owner.into(),
                    owner_role: "employee".into(),
                    owner_identity: format!("telegram:{identity}"),
                    spec: Spec::parse("every 1 days", "UTC", now).unwrap(),
                    text,
                    deliver_to: None,
                    deliver_identity: None,
                    next_run: now,
                },
                10,
            )
            .unwrap();
    }
}

fn memory(workspace: &Path) {
    for (slug, text) in [
        ("ivan", format!("# Ivan\n\nIvan keeps {CANARY} in mind.\n")),
        (
            "marko",
            "# Marko\n\nMarko likes the lighthouse.\n".to_string(),
        ),
    ] {
        let folder = workspace.join("memory/users").join(slug);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("notes.md"), text).unwrap();
    }
    let index = MemoryIndex::open(IndexOptions::new(workspace), Arc::new(MarkedEmbedder)).unwrap();
    let report = index.reindex_all().unwrap();
    assert!(report.chunks_written >= 3, "{report:?}");
}

/// Every file under `root` whose bytes hold any of `needles` (ASCII case-insensitive).
fn files_holding(root: &Path, needles: &[&[u8]]) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let entry = entry.unwrap();
            let (path, kind) = (entry.path(), entry.file_type().unwrap());
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            // Sockets (Porter's, the sandbox runners') hold no data.
            if !kind.is_file() {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap().to_ascii_lowercase();
            for needle in needles {
                let needle = needle.to_ascii_lowercase();
                if bytes.windows(needle.len()).any(|window| window == needle) {
                    found.push(format!(
                        "{} holds {:?}",
                        path.display(),
                        String::from_utf8_lossy(&needle)
                    ));
                }
            }
        }
    }
    found.sort();
    found
}

fn agent(arguments: &[&str], config: &Path, workspace: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(arguments)
        .arg("--config")
        .arg(config)
        .arg("--workspace")
        .arg(workspace)
        .env_clear()
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap()
}

fn count(database: &Path, query: &str) -> i64 {
    Connection::open(database)
        .unwrap()
        .query_row(query, [], |row| row.get(0))
        .unwrap()
}

#[tokio::test]
async fn erasing_one_person_leaves_no_byte_of_them_and_keeps_everyone_else() {
    let bot = InProcess::start().await;
    bot.llm
        .set_fallback(Reply::text("Noted.").with_usage(100, 20));
    for round in 0..3 {
        bot.reply("whatsapp", ANA_WHATSAPP, &format!("ana {round}: sunflower"))
            .await;
        bot.reply(
            "telegram",
            IVAN_TELEGRAM,
            &format!("ivan {round}: {CANARY}"),
        )
        .await;
        bot.reply(
            "telegram",
            MARKO_TELEGRAM,
            &format!("marko {round}: lighthouse"),
        )
        .await;
    }
    let InProcess {
        directory,
        workspace,
        config_path,
        runtime,
        router,
        ..
    } = bot;
    drop((runtime, router));
    {
        let store = SessionStore::open(workspace.join("sessions/transcripts.sqlite3")).unwrap();
        telegram_traffic(&workspace, &store);
    }
    jobs(&workspace);
    memory(&workspace);
    let usage_before = std::fs::read_to_string(workspace.join("logs/usage.jsonl")).unwrap();
    let others_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| line.contains("\"user\":\"ana\"") || line.contains("\"user\":\"marko\""))
            .map(str::to_string)
            .collect()
    };
    assert!(usage_before.contains("\"user\":\"ivan\""));

    // Before: Ivan is everywhere.
    let needles: [&[u8]; 5] = [
        b"ivan",
        IVAN_TELEGRAM.as_bytes(),
        b"U024BK3",
        CANARY.as_bytes(),
        &canary_vector_bytes(),
    ];
    let before = files_holding(&workspace, &needles);
    for expected in [
        "transcripts.sqlite3",
        "index.sqlite",
        "usage.jsonl",
        "701/note.txt",
    ] {
        assert!(
            before.iter().any(|line| line.contains(expected)),
            "{expected} should hold Ivan before: {before:#?}"
        );
    }

    let archive = directory.path().join("ivan.zip");
    let exported = agent(
        &[
            "export",
            "--contact",
            "ivan",
            "--output",
            archive.to_str().unwrap(),
        ],
        &config_path,
        &workspace,
    );
    assert!(exported.contains("exported ivan"), "{exported}");
    let bytes = std::fs::read(&archive).unwrap();
    assert!(
        bytes
            .windows(CANARY.len())
            .any(|window| window == CANARY.as_bytes())
    );
    for entry in [
        "transcripts.jsonl",
        "jobs.jsonl",
        "inbox.jsonl",
        "outbox.jsonl",
        "usage.jsonl",
        "memory/users/ivan/notes.md",
        "attachments/inbox/telegram/701/note.txt",
    ] {
        assert!(
            bytes
                .windows(entry.len())
                .any(|window| window == entry.as_bytes()),
            "the archive lacks {entry}"
        );
    }

    let report = agent(&["erase", "--contact", "ivan"], &config_path, &workspace);
    for line in [
        "sessions: 2",
        "group messages: 4",
        // Two Telegram messages, and the outcome rows of his three HTTP messages.
        "inbox rows: 5",
        "outbox rows: 2",
        "scheduled jobs: 1",
        "attachment files: 2",
        "memory files: 1",
        "removed: memory/users/ivan",
        "removed: inbox/telegram/701",
    ] {
        assert!(report.contains(line), "{line:?} missing from:\n{report}");
    }

    // After: nothing of Ivan anywhere, SQLite files and their logs included.
    assert_eq!(files_holding(&workspace, &needles), Vec::<String>::new());

    // Everyone else is intact.
    let transcripts = workspace.join("sessions/transcripts.sqlite3");
    let store = SessionStore::open(&transcripts).unwrap();
    assert_eq!(store.all_messages("person:ana").unwrap().len(), 6);
    assert_eq!(store.all_messages("person:marko").unwrap().len(), 6);
    assert_eq!(store.all_messages("person:ivan").unwrap().len(), 0);
    let group: Vec<String> = store
        .all_messages(GROUP)
        .unwrap()
        .iter()
        .map(|message| message.message.text())
        .collect();
    assert_eq!(group, ["[Marko (manager)]: lighthouse", "ok"]);
    drop(store);
    // The others' two Telegram rows, and the outcome rows of Ana's and Marko's three
    // HTTP messages each.
    assert_eq!(count(&transcripts, "SELECT count(*) FROM inbox"), 8);
    assert_eq!(count(&transcripts, "SELECT count(*) FROM outbox"), 2);
    assert!(workspace.join("inbox/telegram/702/note.txt").exists());
    assert_eq!(
        count(
            &workspace.join("sessions/jobs.sqlite3"),
            "SELECT count(*) FROM jobs"
        ),
        1
    );
    let index = workspace.join(".saint/memory/index.sqlite");
    assert_eq!(
        count(
            &index,
            "SELECT count(*) FROM files WHERE path LIKE 'memory/users/iv%'"
        ),
        0
    );
    assert!(
        count(
            &index,
            "SELECT count(*) FROM chunks WHERE path LIKE 'memory/users/marko/%'"
        ) >= 1
    );
    assert!(
        count(
            &index,
            "SELECT count(*) FROM chunks WHERE path LIKE 'memory/users/ana/%'"
        ) >= 1
    );
    assert_eq!(
        count(&index, "SELECT count(*) FROM chunks_vec"),
        count(&index, "SELECT count(*) FROM chunks")
    );
    // Usage: the others' lines untouched, Ivan's still there under a pseudonym, with
    // their costs.
    let usage_after = std::fs::read_to_string(workspace.join("logs/usage.jsonl")).unwrap();
    assert_eq!(others_lines(&usage_after), others_lines(&usage_before));
    assert_eq!(usage_after.lines().count(), usage_before.lines().count());
    let pseudonymised: Vec<serde_json::Value> = usage_after
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .filter(|line: &serde_json::Value| {
            line["user"]
                .as_str()
                .is_some_and(|user| user.starts_with("erased-"))
        })
        .collect();
    let ivans_lines = usage_before
        .lines()
        .filter(|line| line.contains("\"user\":\"ivan\""))
        .count();
    assert_eq!(pseudonymised.len(), ivans_lines);
    let turns: Vec<&serde_json::Value> = pseudonymised
        .iter()
        .filter(|line| line.get("turn").is_some())
        .collect();
    assert_eq!(turns.len(), 3);
    assert!(turns.iter().all(|line| line["costUsd"].is_number()));

    // A second erasure finds nothing and uses the same pseudonym.
    let again = agent(&["erase", "--contact", "ivan"], &config_path, &workspace);
    assert!(again.contains("sessions: 0"), "{again}");
    let pseudonym = pseudonymised[0]["user"].as_str().unwrap();
    assert!(again.contains(pseudonym), "{again}");
}

/// Benchmark: erasing one person with 10,000 messages from a transcript database of
/// 30,000 (three people), VACUUM included; the median of three runs. Run the test
/// executable with `--ignored --nocapture erasure_time` (a release build for real
/// figures).
#[test]
#[ignore = "benchmark"]
fn erasure_time_for_one_person_with_10000_messages() {
    use saint_agent::erasure::{Person, erase};
    let mut times = Vec::new();
    for _ in 0..3 {
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path();
        let store = SessionStore::open(workspace.join("sessions/transcripts.sqlite3")).unwrap();
        store
            .queue("fill the transcripts", |transaction| {
                let now = jiff::Timestamp::now().to_string();
                let mut insert = transaction.prepare(
                    "INSERT INTO messages (session_key, role, content, identity, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?;
                for (slug, identity) in [
                    ("ivan", "telegram:333333333"),
                    ("marko", "telegram:222222222"),
                    ("ana", "whatsapp:+385991234567"),
                ] {
                    let key = format!("person:{slug}");
                    transaction.execute(
                        "INSERT INTO sessions (key, contact, role, last_identity, created_at, updated_at)
                         VALUES (?1, ?2, 'employee', ?3, ?4, ?4)",
                        rusqlite::params![key, slug, identity, now],
                    )?;
                    for index in 0..10_000 {
                        let role = if index % 2 == 0 { "user" } else { "assistant" };
                        let content = serde_json::json!([{"type": "text", "text": format!(
                            "message {index} of {slug}: a sentence of ordinary length about the work of the day"
                        )}])
                        .to_string();
                        insert.execute(rusqlite::params![key, role, content, identity, now])?;
                    }
                }
                Ok(())
            })
            .unwrap();
        drop(store);
        let person = Person {
            slug: "ivan".into(),
            identities: vec!["telegram:333333333".into()],
        };
        let started = std::time::Instant::now();
        let report = erase(workspace, &person).unwrap();
        times.push(started.elapsed());
        assert_eq!(report.counts["transcript messages"], 10_000);
    }
    times.sort();
    println!(
        "erasure of one person with 10,000 messages (of 30,000): median {} ms",
        times[1].as_millis()
    );
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

fn messages_of(workspace: &Path, key: &str) -> i64 {
    let connection = Connection::open_with_flags(
        workspace.join("sessions/transcripts.sqlite3"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    connection
        .query_row(
            "SELECT count(*) FROM messages WHERE session_key = ?1",
            [key],
            |row| row.get(0),
        )
        .unwrap()
}

/// The running agent: the employee role keeps transcripts 7 days, so moving the
/// scheduler's clock 8 days on has the sweeper delete Ivan's (an employee's) messages
/// and keep Ana's (the owner's role keeps everything); `saint-agent erase` is refused
/// while it runs; and a config marking Ivan `erase: true` has it erase him on reload.
#[tokio::test(flavor = "multi_thread")]
async fn the_running_agent_sweeps_by_its_clock_and_erases_a_contact_marked_erase_on_reload() {
    let llm = saint_scripted::llm::ScriptedLlm::start().await.unwrap();
    llm.set_fallback(Reply::text("Noted."));
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["roles"]["employee"]["retention"] = serde_json::json!({"transcriptsDays": 7});
    write_config(&config_path, &config);
    let clock = directory.path().join("now");
    let start = jiff::Timestamp::now();
    std::fs::write(&clock, start.to_string()).unwrap();
    let agent = spawn_agent(
        &config_path,
        &workspace,
        &[("SAINT_CLOCK_FILE", clock.to_str().unwrap())],
    );
    let client = reqwest::Client::new();
    for (channel, peer, text) in [
        ("telegram", IVAN_TELEGRAM, format!("ivan: {CANARY}")),
        ("telegram", IVAN_TELEGRAM, "ivan again".to_string()),
        ("whatsapp", ANA_WHATSAPP, "ana: sunflower".to_string()),
    ] {
        let response = client
            .post(format!("{}/v1/messages", agent.http))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"channel": channel, "peer": peer, "text": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    assert_eq!(messages_of(&workspace, "person:ivan"), 4);

    let refused = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["erase", "--contact", "ivan", "--config"])
        .arg(&config_path)
        .arg("--workspace")
        .arg(&workspace)
        .env_clear()
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8(refused.stderr).unwrap();
    assert!(
        stderr.contains("is busy") && stderr.contains("erase: true"),
        "{stderr}"
    );

    let later = start + jiff::SignedDuration::from_hours(8 * 24);
    let temporary = clock.with_extension("tmp");
    std::fs::write(&temporary, later.to_string()).unwrap();
    std::fs::rename(&temporary, &clock).unwrap();
    eventually("the sweep of Ivan's transcript", || {
        messages_of(&workspace, "person:ivan") == 0
    })
    .await;
    assert_eq!(messages_of(&workspace, "person:ana"), 2);

    for contact in config["contacts"].as_array_mut().unwrap() {
        if contact["slug"] == "ivan" {
            contact["erase"] = serde_json::json!(true);
        }
    }
    write_config(&config_path, &config);
    let erasures = workspace.join("logs/erasures.jsonl");
    eventually("the erasure of Ivan on reload", || erasures.exists()).await;
    let usage = std::fs::read_to_string(workspace.join("logs/usage.jsonl")).unwrap();
    assert!(!usage.contains("\"user\":\"ivan\""), "{usage}");
    assert!(usage.contains("\"user\":\"ana\""), "{usage}");
    assert_eq!(
        files_holding(&workspace, &[IVAN_TELEGRAM.as_bytes(), CANARY.as_bytes()]),
        Vec::<String>::new()
    );
    drop(agent);
}
