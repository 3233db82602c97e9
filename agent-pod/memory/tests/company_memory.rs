//! Role-scoped hybrid search and scoped reads over a generated company memory, with
//! the real model and a real SQLite file.

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use saint_config::MemoryScope;
use saint_memory::{MemoryFileError, Scope, SearchHit, SearchRequest};
use support::*;

const ACQUISITION_QUERY: &str = "What is our plan to acquire the competitor and what will we pay?";

fn search(
    index: &saint_memory::MemoryIndex,
    query: &str,
    k: usize,
    scope: &Scope,
) -> Vec<SearchHit> {
    index
        .search(&SearchRequest { query, k, scope })
        .expect("search")
}

fn paths(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|hit| hit.path.as_str()).collect()
}

#[test]
fn every_role_sees_only_its_scope_even_when_the_best_matches_lie_outside() {
    let (_directory, index) = indexed_company();
    // The owner sees that the best matches are private acquisition notes.
    let owner_hits = search(
        &index,
        ACQUISITION_QUERY,
        5,
        &scope(&owner_scopes(), "ivana"),
    );
    assert_eq!(owner_hits.len(), 5);
    assert!(
        owner_hits
            .iter()
            .all(|hit| hit.path.starts_with("memory/private/")),
        "{:?}",
        paths(&owner_hits)
    );

    let roles: [(&str, Vec<MemoryScope>, &str); 4] = [
        ("owner", owner_scopes(), "ivana"),
        ("manager", manager_scopes(), "marko"),
        ("employee", employee_scopes(), "ana"),
        ("external", external_scopes(), "client-xyz"),
    ];
    for (role, scopes, slug) in roles {
        let hits = search(&index, ACQUISITION_QUERY, 5, &scope(&scopes, slug));
        assert!(!hits.is_empty(), "{role} found nothing");
        for hit in &hits {
            assert!(
                allowed_by_table(&scopes, slug, &hit.path),
                "{role} saw {}",
                hit.path
            );
        }
        if role == "employee" {
            // 40+ private notes outrank everything the employee may see; with the
            // filter inside the query the employee still gets a full page, and its
            // best in-scope matches are the staff news and Ana's own note on the rumours.
            assert_eq!(hits.len(), 5, "{:?}", paths(&hits));
            let mut best_two = vec![hits[0].path.as_str(), hits[1].path.as_str()];
            best_two.sort_unstable();
            assert_eq!(
                best_two,
                [
                    "memory/shared/acquisitions-faq.md",
                    "memory/users/ana/notes.md"
                ]
            );
        }
        if role == "external" {
            assert_eq!(paths(&hits), ["memory/users/client-xyz/context.md"]);
        }
    }
}

#[test]
fn a_slug_with_glob_characters_sees_no_one_elses_notes() {
    let (_directory, index) = indexed_company();
    let hits = search(
        &index,
        "notes about a person",
        10,
        &scope(&external_scopes(), "*"),
    );
    assert!(hits.is_empty(), "{:?}", paths(&hits));
    let hits = search(
        &index,
        "notes about a person",
        10,
        &Scope::for_role(&[], "ana"),
    );
    assert!(
        hits.is_empty(),
        "an empty scope must see nothing: {:?}",
        paths(&hits)
    );
}

#[test]
fn a_narrower_filter_only_shrinks_the_scope() {
    let (_directory, index) = indexed_company();
    let employee = scope(&employee_scopes(), "ana");
    let widened = employee
        .clone()
        .narrowed(&["*".to_string(), "memory/private/*".to_string()])
        .expect("filter");
    let hits = search(&index, ACQUISITION_QUERY, 10, &widened);
    assert!(!hits.is_empty());
    assert!(
        hits.iter()
            .all(|hit| allowed_by_table(&employee_scopes(), "ana", &hit.path)),
        "{:?}",
        paths(&hits)
    );

    let billing_only = employee
        .narrowed(&["memory/shared/billing/*".to_string()])
        .expect("filter");
    let hits = search(&index, "bicycle", 10, &billing_only);
    assert_eq!(hits.len(), 4, "{:?}", paths(&hits));
    assert!(
        hits.iter()
            .all(|hit| hit.path.starts_with("memory/shared/billing/"))
    );

    let private_only = scope(&employee_scopes(), "ana")
        .narrowed(&["memory/private/*".to_string()])
        .expect("filter");
    assert!(search(&index, ACQUISITION_QUERY, 10, &private_only).is_empty());
}

#[test]
fn an_invoice_number_is_found_by_keyword() {
    let (_directory, index) = indexed_company();
    let hits = search(
        &index,
        "INV-2024-0042",
        3,
        &scope(&employee_scopes(), "ana"),
    );
    assert_eq!(
        hits[0].path,
        "memory/shared/billing/inv-2024-0042.md",
        "{:?}",
        paths(&hits)
    );
    assert!(hits[0].snippet.contains("Zagreb Couriers"));
    assert_eq!(hits[0].keyword_score, 1.0);
    assert!(hits[0].score > hits[1].score);
    assert_eq!((hits[0].start_line, hits[0].end_line), (1, 5));
}

#[test]
fn a_paraphrase_is_found_by_meaning_without_shared_words() {
    let (_directory, index) = indexed_company();
    let query = "where can guests leave their car";
    let hits = search(&index, query, 3, &scope(&employee_scopes(), "ana"));
    assert_eq!(
        hits[0].path,
        "memory/shared/office.md",
        "{:?}",
        paths(&hits)
    );
    // No word of the query occurs in the note: this hit is the vector side's alone.
    assert_eq!(hits[0].keyword_score, 0.0);
    assert!(hits[0].vector_score > 0.3, "{}", hits[0].vector_score);
    for word in query.split_whitespace() {
        assert!(
            !hits[0]
                .snippet
                .to_lowercase()
                .split(|c: char| !c.is_alphanumeric())
                .any(|token| token == word)
        );
    }
}

#[test]
fn editing_and_deleting_files_update_the_index() {
    let (directory, index) = indexed_company();
    let employee = scope(&employee_scopes(), "ana");
    let before = index.stats().expect("stats");

    // Unchanged files are skipped by hash.
    let report = index.reindex_all().expect("reindex");
    assert_eq!(
        (report.files_indexed, report.files_unchanged),
        (0, before.files)
    );

    let path = "memory/shared/billing/inv-2024-0042.md";
    write(
        directory.path(),
        path,
        "# Invoice INV-2024-0099\n\nCustomer: Zagreb Couriers\nAmount: EUR 3,450\nStatus: paid.\n",
    );
    let report = index.reindex_paths(&[path]).expect("reindex paths");
    assert_eq!(report.files_indexed, 1);
    let hits = search(&index, "INV-2024-0099", 1, &employee);
    assert_eq!(paths(&hits), [path]);
    assert!(hits[0].snippet.contains("paid"));
    let hits = search(&index, "INV-2024-0042", 10, &employee);
    assert!(
        hits.iter().all(|hit| !hit.snippet.contains("0042")),
        "{hits:?}"
    );

    std::fs::remove_file(directory.path().join(path)).expect("delete");
    let report = index
        .reindex_paths(&[directory.path().join(path)])
        .expect("reindex deleted");
    assert_eq!(report.files_removed, 1);
    let after = index.stats().expect("stats");
    assert_eq!(after.files, before.files - 1);
    assert_eq!(after.chunks, before.chunks - 1);
    let hits = search(&index, "INV-2024-0099 Zagreb Couriers", 10, &employee);
    assert!(
        hits.iter().all(|hit| hit.path != path),
        "{:?}",
        paths(&hits)
    );

    // Removing a whole directory removes all its files' chunks.
    std::fs::remove_dir_all(directory.path().join("memory/private/acquisition")).expect("rm -r");
    let report = index
        .reindex_paths(&["memory/private/acquisition"])
        .expect("reindex dir");
    assert_eq!(report.files_removed, ACQUISITION_NOTES);
    assert!(index.check_integrity().expect("check").is_empty());
}

#[test]
fn the_watcher_indexes_changes_made_by_others() {
    let (directory, index) = indexed_company();
    let _watcher =
        saint_memory::watch(Arc::clone(&index), Duration::from_millis(200)).expect("watch");
    let employee = scope(&employee_scopes(), "ana");
    write(
        directory.path(),
        "memory/shared/new/holidays.md",
        "# Holidays\n\nThe shop is closed from 24 December to 2 January; code word ZEBRA-7781.\n",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let hits = search(&index, "ZEBRA-7781", 1, &employee);
        if hits
            .first()
            .is_some_and(|hit| hit.path == "memory/shared/new/holidays.md")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher never indexed the new file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::remove_file(directory.path().join("memory/shared/new/holidays.md")).expect("delete");
    loop {
        let hits = search(&index, "ZEBRA-7781", 5, &employee);
        if hits
            .iter()
            .all(|hit| hit.path != "memory/shared/new/holidays.md")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher never removed the deleted file"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn searches_run_while_the_index_is_being_rewritten() {
    let (directory, index) = indexed_company();
    for number in 0..30 {
        write(
            directory.path(),
            &format!("memory/shared/bulk/note-{number}.md"),
            &format!(
                "# Bulk note {number}\n\nSpare part number {number} is stored on shelf {}.\n",
                number % 7
            ),
        );
    }
    let writer_index = Arc::clone(&index);
    let writer = std::thread::spawn(move || writer_index.reindex_all().expect("reindex"));
    let employee = scope(&employee_scopes(), "ana");
    let mut searches = 0;
    while !writer.is_finished() {
        let hits = search(&index, "INV-2024-0043 Hotel Esplanade", 1, &employee);
        assert_eq!(hits[0].path, "memory/shared/billing/inv-2024-0043.md");
        searches += 1;
    }
    let report = writer.join().expect("writer thread");
    assert_eq!(report.files_indexed, 30);
    assert!(searches > 0);
}

#[test]
fn memory_get_reads_in_scope_and_refuses_outside() {
    let (directory, index) = indexed_company();
    let employee = scope(&employee_scopes(), "ana");
    let text = index
        .read_memory_file(&employee, "memory/shared/office.md", Some(3), Some(1))
        .expect("read");
    assert_eq!(
        (text.start_line, text.end_line, text.total_lines),
        (3, 3, 5)
    );
    assert!(text.text.starts_with("Our parking garage"));
    let own = index
        .read_memory_file(&employee, "./memory/users/ana/notes.md", None, None)
        .expect("own notes");
    assert_eq!(own.path, "memory/users/ana/notes.md");

    for path in [
        "memory/private/finances.md",
        "memory/users/marko/notes.md",
        "memory/daily/2026-11-20.md",
    ] {
        let error = index
            .read_memory_file(&employee, path, None, None)
            .expect_err("must be refused");
        assert!(
            matches!(error, MemoryFileError::OutOfScope(_)),
            "{path}: {error}"
        );
    }
    for path in [
        "memory/shared/../private/finances.md",
        "/etc/passwd",
        "memory/shared/office.txt",
        "",
    ] {
        let error = index
            .read_memory_file(&employee, path, None, None)
            .expect_err("must be refused");
        assert!(
            matches!(error, MemoryFileError::InvalidPath(_)),
            "{path}: {error}"
        );
    }
    // A symlink inside the shared scope that points at a private file is refused.
    std::os::unix::fs::symlink(
        "../private/finances.md",
        directory.path().join("memory/shared/leak.md"),
    )
    .expect("link");
    let error = index
        .read_memory_file(&employee, "memory/shared/leak.md", None, None)
        .expect_err("symlink");
    assert!(matches!(error, MemoryFileError::OutOfScope(_)), "{error}");
    // … and is never indexed under the shared path either.
    index
        .reindex_paths(&["memory/shared/leak.md"])
        .expect("reindex");
    let hits = search(&index, "Marko's salary", 10, &employee);
    assert!(
        hits.iter()
            .all(|hit| hit.path != "memory/shared/leak.md" && !hit.snippet.contains("salary"))
    );
    let owner = scope(&owner_scopes(), "ivana");
    let error = index
        .read_memory_file(&owner, "memory/shared/missing.md", None, None)
        .expect_err("missing");
    assert!(matches!(error, MemoryFileError::NotFound(_)), "{error}");
}
