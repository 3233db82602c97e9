//! Killing the indexer with SIGKILL in the middle of a large reindex leaves a database
//! that opens, passes its integrity checks, and finishes indexing on the next run.

mod support;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use saint_memory::{IndexOptions, MemoryIndex, default_model_dir};

const FILES: usize = 80;

fn large_corpus(root: &std::path::Path) {
    for number in 0..FILES {
        let paragraphs: Vec<String> = (0..4)
            .map(|paragraph| {
                format!(
                    "Paragraph {paragraph} of note {number}: the workshop logged repair order {number}-{paragraph} \
                     for a customer bicycle, replacing brake pads, truing the rear wheel, adjusting the \
                     derailleur and checking tyre pressure before the customer collected it on day {}.",
                    number % 28 + 1
                )
            })
            .collect();
        support::write(
            root,
            &format!(
                "memory/daily/2026-{:02}/note-{number:03}.md",
                number % 12 + 1
            ),
            &format!("# Workshop note {number}\n\n{}\n", paragraphs.join("\n\n")),
        );
    }
}

fn indexed_files(database: &std::path::Path) -> i64 {
    let Ok(connection) =
        rusqlite::Connection::open_with_flags(database, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    connection
        .query_row("SELECT count(*) FROM files", [], |row| row.get(0))
        .unwrap_or(0)
}

#[test]
fn a_killed_indexer_leaves_a_database_that_opens_and_finishes() {
    // Fail early and clearly when the model is absent.
    let embedder = support::embedder();
    let directory = tempfile::tempdir().expect("tempdir");
    large_corpus(directory.path());
    let options = IndexOptions::new(directory.path());
    let database = options.database.clone();

    let mut child = Command::new(env!("CARGO_BIN_EXE_saint-memory-index"))
        .arg("--workspace")
        .arg(directory.path())
        .arg("--model-dir")
        .arg(default_model_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the indexer");
    let deadline = Instant::now() + Duration::from_secs(120);
    while indexed_files(&database) < 10 {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the indexer exited before it could be killed"
        );
        assert!(Instant::now() < deadline, "the indexer made no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL"); // `Child::kill` sends SIGKILL on unix.
    let status = child.wait().expect("reap");
    assert!(!status.success());
    let indexed_when_killed = indexed_files(&database);
    assert!(
        indexed_when_killed < FILES as i64,
        "the kill came too late to test anything"
    );

    let index = MemoryIndex::open(options, embedder).expect("the database opens after the kill");
    assert_eq!(
        index.check_integrity().expect("check"),
        Vec::<String>::new()
    );
    let report = index.reindex_all().expect("the reindex completes");
    assert_eq!(report.files_seen, FILES);
    assert_eq!(
        report.files_unchanged as i64, indexed_when_killed,
        "finished files are not redone"
    );
    assert_eq!(index.stats().expect("stats").files, FILES);
    assert_eq!(
        index.check_integrity().expect("check"),
        Vec::<String>::new()
    );
}
