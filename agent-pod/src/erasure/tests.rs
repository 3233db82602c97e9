//! Retention over real stores with the clock given: exactly what is older than the
//! role's limit goes, a thing exactly at the limit stays, and people whose role keeps
//! everything keep everything.

use jiff::{SignedDuration, Timestamp};
use pretty_assertions::assert_eq;
use rusqlite::params;
use saint_channels::{
    message::{InboundMessage, ReplyContext},
    queue,
};
use saint_config::{ChannelKind, Retention};
use saint_llm::Message;

use super::{retention::sweep, *};
use crate::session::SessionStore;

const FIXTURE: &str = include_str!("../../config/tests/fixtures/acme-bot-config.json");
const NOW: &str = "2026-03-20T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// `days` (fractional) before [`NOW`].
fn ago(days: f64) -> Timestamp {
    now() - SignedDuration::from_secs_f64(days * 86_400.0)
}

fn config() -> BotConfig {
    let mut config: BotConfig = serde_json::from_str(FIXTURE).unwrap();
    config.roles.get_mut("employee").unwrap().retention = Some(Retention {
        transcripts_days: Some(7),
        attachments_days: Some(3),
        memory_days: Some(30),
        usage_days: Some(10),
    });
    config
}

fn message_ages(store: &SessionStore, key: &str, ages: &[f64]) {
    for age in ages {
        let id = store
            .append(
                key,
                key.trim_start_matches("person:"),
                "employee",
                "telegram:333333333",
                &Message::user_text(format!("{age} days old")),
            )
            .unwrap();
        store
            .queue("age a message", |transaction| {
                transaction.execute(
                    "UPDATE messages SET created_at = ?2 WHERE id = ?1",
                    params![id, ago(*age).to_string()],
                )
            })
            .unwrap();
    }
}

fn inbox_row(workspace: &Path, store: &SessionStore, sender: &str, platform_id: &str, age: f64) {
    let message = InboundMessage {
        channel: "telegram".into(),
        kind: ChannelKind::Telegram,
        platform_id: platform_id.into(),
        sender: sender.parse().unwrap(),
        sender_verified: true,
        unverified_origin: None,
        display_name: None,
        text: "with a file".into(),
        attachments: Vec::new(),
        sent_at: NOW.into(),
        context: ReplyContext::default(),
        conversation: None,
        pressed: false,
    };
    store
        .queue("store a message", |transaction| {
            let id = queue::insert_inbound(transaction, &message)?.unwrap();
            transaction.execute(
                "UPDATE inbox SET state = 'answered', received_at = ?2 WHERE id = ?1",
                params![id, ago(age).as_millisecond()],
            )
        })
        .unwrap();
    let folder = workspace.join("inbox/telegram").join(platform_id);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("file.txt"), "bytes").unwrap();
}

fn texts(store: &SessionStore, key: &str) -> Vec<String> {
    store
        .all_messages(key)
        .unwrap()
        .iter()
        .map(|stored| stored.message.text())
        .collect()
}

fn note(workspace: &Path, slug: &str, name: &str, age: f64) {
    let folder = workspace.join("memory/users").join(slug);
    std::fs::create_dir_all(&folder).unwrap();
    let path = folder.join(name);
    std::fs::write(&path, "a note").unwrap();
    let file = std::fs::File::options().write(true).open(&path).unwrap();
    file.set_modified(super::retention::system_time(ago(age)))
        .unwrap();
}

#[test]
fn retention_deletes_exactly_what_is_older_than_the_roles_limit() {
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path();
    let store = SessionStore::open(workspace.join(TRANSCRIPTS)).unwrap();
    // Ivan is an employee (7 days of transcripts); Marko's role keeps everything.
    message_ages(&store, "person:ivan", &[20.0, 7.001, 7.0, 6.99, 1.0]);
    message_ages(&store, "person:marko", &[20.0, 1.0]);
    inbox_row(workspace, &store, "telegram:333333333", "old", 8.0);
    inbox_row(workspace, &store, "telegram:333333333", "middle", 4.0);
    inbox_row(workspace, &store, "telegram:333333333", "fresh", 2.0);
    inbox_row(workspace, &store, "telegram:222222222", "marko", 8.0);
    note(workspace, "ivan", "old.md", 30.5);
    note(workspace, "ivan", "new.md", 29.5);
    note(workspace, "marko", "old.md", 300.0);
    let usage: String = [("ivan", 11.0), ("ivan", 9.0), ("marko", 11.0)]
        .iter()
        .map(|(user, age)| {
            format!(
                "{{\"ts\":\"{}\",\"user\":\"{user}\",\"costUsd\":0.5}}\n",
                ago(*age)
            )
        })
        .collect();
    std::fs::create_dir_all(workspace.join("logs")).unwrap();
    std::fs::write(workspace.join(USAGE_LOG), usage).unwrap();

    let report = sweep(workspace, &config(), now()).unwrap();

    assert_eq!(
        texts(&store, "person:ivan"),
        ["7 days old", "6.99 days old", "1 days old"]
    );
    assert_eq!(texts(&store, "person:marko"), ["20 days old", "1 days old"]);
    let senders: Vec<String> = store
        .queue("read the inbox", |transaction| {
            let mut statement = transaction.prepare("SELECT platform_id FROM inbox ORDER BY id")?;
            statement.query_map([], |row| row.get(0))?.collect()
        })
        .unwrap();
    assert_eq!(senders, ["middle", "fresh", "marko"]);
    let folders: Vec<bool> = ["old", "middle", "fresh", "marko"]
        .iter()
        .map(|name| workspace.join("inbox/telegram").join(name).exists())
        .collect();
    assert_eq!(folders, [false, false, true, true]);
    assert!(!workspace.join("memory/users/ivan/old.md").exists());
    assert!(workspace.join("memory/users/ivan/new.md").exists());
    assert!(workspace.join("memory/users/marko/old.md").exists());
    let usage = std::fs::read_to_string(workspace.join(USAGE_LOG)).unwrap();
    assert_eq!(usage.lines().count(), 2);
    assert!(usage.contains(&ago(9.0).to_string()), "{usage}");
    assert_eq!(
        report.counts,
        BTreeMap::from([
            ("attachment files", 2),
            ("inbox rows", 1),
            ("memory files", 1),
            ("transcript messages", 2),
            ("usage lines", 1),
        ])
    );

    // Nothing more is old at the same time; a day later, the next ones are.
    assert_eq!(sweep(workspace, &config(), now()).unwrap().total(), 0);
    let later = sweep(workspace, &config(), now() + SignedDuration::from_hours(24)).unwrap();
    assert_eq!(later.counts.get("transcript messages"), Some(&2));
}

#[test]
fn pseudonyms_are_stable_per_workspace_and_differ_between_people() {
    let directory = tempfile::tempdir().unwrap();
    let first = pseudonym(directory.path(), "ivan").unwrap();
    assert_eq!(pseudonym(directory.path(), "ivan").unwrap(), first);
    assert_ne!(pseudonym(directory.path(), "ana").unwrap(), first);
    assert!(first.starts_with("erased-") && !first.contains("ivan"));
    let other = tempfile::tempdir().unwrap();
    assert_ne!(pseudonym(other.path(), "ivan").unwrap(), first);
}

#[test]
fn their_approval_requests_go_and_decisions_they_took_keep_a_pseudonym() {
    use crate::approvals::ApprovalStore;
    use saint_config::{ApprovalRule, Approvers};

    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path();
    let store = ApprovalStore::open(workspace).unwrap();
    let rule = ApprovalRule {
        tools: vec!["message".to_string()],
        porter: None,
        when: Default::default(),
        approvers: Approvers {
            roles: vec!["owner".to_string()],
            contacts: Vec::new(),
        },
        timeout_seconds: 60,
    };
    let canary = "ivans-canary-approval-7731";
    let asked = store
        .request(
            "ivan",
            "employee",
            "person:ivan",
            "telegram:333",
            "message",
            &serde_json::json!({"to": "marko", "text": canary}),
            &[],
            &rule,
            0,
        )
        .unwrap();
    let decided_by_ivan = store
        .request(
            "marko",
            "manager",
            "person:marko",
            "telegram:222",
            "message",
            &serde_json::json!({"to": "ana", "text": "hi"}),
            &[],
            &rule,
            0,
        )
        .unwrap();
    store
        .decide(&decided_by_ivan.code, "ivan", |_| true, true, 1)
        .unwrap()
        .unwrap();
    drop(store);

    let person = Person {
        slug: "ivan".to_string(),
        identities: vec!["telegram:333".to_string()],
    };
    // Before: the export carries the request he made and the one he decided.
    let archive = directory.path().join("ivan.zip");
    super::export::export(workspace, &person, &archive).unwrap();
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&archive).unwrap()).unwrap();
    let mut entry = |name: &str| {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut zip.by_name(name).unwrap(), &mut text).unwrap();
        text
    };
    let requests = entry("approvals.jsonl");
    assert!(
        requests.contains(&asked.code) && requests.contains(canary),
        "{requests}"
    );
    assert!(requests.contains(&decided_by_ivan.code), "{requests}");
    let log = entry("approvals-log.jsonl");
    assert_eq!(
        log.lines().count(),
        2,
        "asked, and approved by him: {log}\nall: {}",
        std::fs::read_to_string(workspace.join(APPROVALS_LOG)).unwrap()
    );

    let report = erase(workspace, &person).unwrap();
    assert!(report.to_string().contains("approval requests"), "{report}");
    let database = std::fs::read(workspace.join(APPROVALS)).unwrap();
    let audit = std::fs::read(workspace.join(APPROVALS_LOG)).unwrap();
    for bytes in [&database, &audit] {
        for needle in ["ivan", canary, "telegram:333"] {
            assert!(
                !bytes
                    .windows(needle.len())
                    .any(|window| window == needle.as_bytes()),
                "{needle:?} is still there"
            );
        }
    }
    // Marko's request, decided by Ivan, stays, decided by the pseudonym.
    let store = ApprovalStore::open(workspace).unwrap();
    assert!(store.get(&asked.code).unwrap().is_none());
    assert!(store.get(&decided_by_ivan.code).unwrap().is_some());
}

#[test]
fn their_voice_notes_go_with_their_outbox_rows_and_a_note_another_still_needs_stays() {
    use saint_channels::message::{FileKind, OutboundBody, OutboundFile};

    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path();
    let store = SessionStore::open(workspace.join(TRANSCRIPTS)).unwrap();
    let audio = workspace.join(".saint/outbox/audio");
    std::fs::create_dir_all(&audio).unwrap();
    let body = |paths: &[&str]| OutboundBody {
        text: "spoken".into(),
        context: ReplyContext::default(),
        files: paths
            .iter()
            .map(|path| OutboundFile {
                path: (*path).to_string(),
                mime_type: "audio/ogg".into(),
                kind: FileKind::Voice,
            })
            .collect(),
    };
    for name in ["ivan.ogg", "shared.ogg", "marko.ogg"] {
        std::fs::write(audio.join(name), b"OggS").unwrap();
    }
    // A file outside the runtime's folder a tampered row names is never touched.
    std::fs::write(workspace.join("keep.txt"), "mine").unwrap();
    store
        .queue("queue voice notes", |transaction| {
            for (recipient, paths) in [
                (
                    "telegram:333333333",
                    &[
                        ".saint/outbox/audio/ivan.ogg",
                        ".saint/outbox/audio/shared.ogg",
                        "keep.txt",
                    ][..],
                ),
                (
                    "telegram:222222222",
                    &[
                        ".saint/outbox/audio/shared.ogg",
                        ".saint/outbox/audio/marko.ogg",
                    ][..],
                ),
            ] {
                queue::enqueue(
                    transaction,
                    "telegram",
                    recipient,
                    &body(paths),
                    "reply",
                    None,
                )?;
            }
            Ok(())
        })
        .unwrap();
    drop(store);

    let person = Person {
        slug: "ivan".to_string(),
        identities: vec!["telegram:333333333".to_string()],
    };
    let report = erase(workspace, &person).unwrap();
    assert!(!audio.join("ivan.ogg").exists());
    assert!(
        audio.join("shared.ogg").exists(),
        "Marko's row still names it"
    );
    assert!(audio.join("marko.ogg").exists());
    assert!(workspace.join("keep.txt").exists());
    assert!(
        report
            .paths
            .contains(&".saint/outbox/audio/ivan.ogg".to_string()),
        "{:?}",
        report.paths
    );
    // A second run finds nothing.
    let again = erase(workspace, &person).unwrap();
    assert!(again.paths.is_empty(), "{:?}", again.paths);
}
