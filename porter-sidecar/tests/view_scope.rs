//! A token registered with the caller's view (what their sandbox shows at `/agent`)
//! keeps the CLI inside it: the real daemon refuses a working directory or a named
//! file outside the view — the sessions database, another person's notes — that the
//! sandbox never shows, while calls inside the view and from the sandbox's own
//! `/workspace` run as before.

mod support;

use porter_protocol::{ErrorCode, Frame};
use support::*;

fn register(daemon: &Daemon, view: Option<&[&str]>) -> String {
    let view = view.map_or_else(String::new, |entries| {
        format!(r#","view":{}"#, serde_json::to_string(entries).unwrap())
    });
    let response = daemon.control(&format!(
        r#"{{"op":"register","session":"s-ivan","contact":"ivan","role":"employee","ttlSeconds":60{view}}}"#
    ));
    assert_eq!(response["ok"], true, "{response}");
    response["token"].as_str().unwrap().to_owned()
}

fn company(daemon: &Daemon) {
    for (file, text) in [
        ("data/report.csv", "report\n"),
        ("data/other.csv", "other\n"),
        (
            "sessions/transcripts.txt",
            "ana: the merger closes friday\n",
        ),
        ("memory/users/ana/secret.md", "ana's notes\n"),
    ] {
        let path = daemon.workspace.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

fn in_directory(
    mut request: porter_protocol::CliRequest,
    cwd: &str,
) -> porter_protocol::CliRequest {
    request.cwd = cwd.to_owned();
    request
}

#[test]
fn a_working_directory_outside_the_callers_view_is_refused() {
    let daemon = Daemon::start(|bin, registry| {
        registry
            .clis
            .insert("lister".into(), cli(&script(bin, "lister", "ls")));
    });
    company(&daemon);
    let token = register(&daemon, Some(&["data", "SOUL.md"]));
    for outside in [
        "/agent/sessions",
        "/agent/memory/users/ana",
        "/workspace/memory",
    ] {
        let frames = daemon.call(in_directory(request("lister", &[], &token), outside));
        assert_eq!(
            error_of(&frames),
            Some(ErrorCode::BadCwd),
            "{outside}: {frames:?}"
        );
        assert!(!stdout_of(&frames).contains("transcripts"), "{outside}");
    }
    let inside = daemon.call(in_directory(request("lister", &[], &token), "/agent/data"));
    assert_eq!(inside.last(), Some(&Frame::Exit { code: 0 }), "{inside:?}");
    assert!(stdout_of(&inside).contains("report.csv"));
    // The sandbox's own /workspace stands for the root, as before.
    let root = daemon.call(request("lister", &[], &token));
    assert_eq!(root.last(), Some(&Frame::Exit { code: 0 }), "{root:?}");

    // A token without a view (a local tokens file, an older agent) keeps the old reach.
    let unscoped = register(&daemon, None);
    let frames = daemon.call(in_directory(
        request("lister", &[], &unscoped),
        "/agent/sessions",
    ));
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
}

#[test]
fn a_file_the_cli_would_read_outside_the_view_is_refused() {
    assert!(
        std::path::Path::new("/usr/bin/git").is_file(),
        "this test needs git (apt-get install git)"
    );
    let daemon = Daemon::start(|_, registry| {
        registry.clis.insert("git".into(), cli("/usr/bin/git"));
    });
    company(&daemon);
    std::fs::write(
        daemon.workspace.join("data/change.patch"),
        "--- a/report.csv\n+++ b/report.csv\n@@ -1 +1 @@\n-report\n+report v2\n",
    )
    .unwrap();
    let token = register(&daemon, Some(&["data"]));
    // `git apply --stat FILE` reads FILE: outside the view it is refused, however the
    // path is spelled (a plain path by the view check, with its own message; `..`
    // spellings may already be refused by git's argument grammar).
    for (file, by_view) in [
        ("sessions/transcripts.txt", true),
        ("memory/users/ana/secret.md", true),
        ("../workspace/memory/users/ana/secret.md", false),
        ("data/../sessions/transcripts.txt", false),
    ] {
        let frames = daemon.call(request("git", &["apply", "--stat", file], &token));
        let refusal = frames.iter().find_map(|frame| match frame {
            Frame::Error { code, message } => Some((*code, message.clone())),
            _ => None,
        });
        assert!(
            matches!(&refusal, Some((ErrorCode::DeniedArgs, message))
                if !by_view || message.contains("may not read")),
            "{file}: {frames:?}"
        );
        assert!(!stdout_of(&frames).contains("merger"), "{frames:?}");
    }
    // Inside the view: git reads the patch and reports it.
    let frames = daemon.call(request(
        "git",
        &["apply", "--stat", "data/change.patch"],
        &token,
    ));
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
    assert!(stdout_of(&frames).contains("report.csv"), "{frames:?}");
}
