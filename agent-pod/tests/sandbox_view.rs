//! The sandbox shows each person only what their role may read: the real `saint-agent`
//! binary, the example company's config, real bubblewrap sandboxes and the scripted
//! model. Each person's `exec` lists everything under `/agent` from inside their
//! sandbox; the listing must equal, file for file, what their role's `read` rules allow
//! in the workspace (runtime state the agent itself wrote included), in both
//! directions. And it stays so while the workspace changes under it: a host-side
//! swapper renaming view entries to symlinks into `memory/private`, hard links planted
//! in folders the role reads whole.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and `saint-sandbox-runner` built into this
//! target directory (`cargo build -p saint-sandbox-runner`); a missing piece fails the
//! test with the reason.

mod common;

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    os::unix::fs::{MetadataExt, symlink},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use common::*;
use futures::StreamExt;
use saint_config::{BotConfig, FileAccessConfig, FileGlobs, RoleConfig, SandboxScope};
use saint_sandbox::{
    ExecEvent, ExecRequest, Sandbox, ScopeKey, View, Viewer,
    local::{LocalConfig, LocalSandbox},
};
use saint_scripted::llm::{Reply, ScriptedLlm};
use saint_tools::guard::{caller_view, role_paths::RolePaths};
use serde_json::{Value, json};

const MARKO_WHATSAPP: &str = "+385991234568";
/// Lists every file and link under `/agent` (relative), then a marker line.
const LIST: &str = "find /agent -mindepth 1 ! -type d -printf '%P\\n' | sort; echo END-OF-LIST";

fn require_sandbox() -> PathBuf {
    let runner =
        Path::new(env!("CARGO_BIN_EXE_saint-agent")).with_file_name("saint-sandbox-runner");
    assert!(
        runner.is_file() && Path::new("/usr/bin/bwrap").is_file(),
        "this test needs bubblewrap (/usr/bin/bwrap) and the saint-sandbox-runner binary ({}); \
         build it with `cargo build -p saint-sandbox-runner`",
        runner.display()
    );
    runner
}

/// The example company's workspace: persona files, every memory area, data, skills.
fn company_workspace(workspace: &Path) {
    seed_workspace(workspace);
    for file in [
        "TOOLS.md",
        "HEARTBEAT.md",
        "memory/shared/facts.md",
        "memory/shared/deep/more.md",
        "memory/private/finance.md",
        "memory/daily/2026-11-23.md",
        "memory/users/ana/secret.md",
        "memory/users/ivan/notes.md",
        "memory/users/marko/todo.md",
        "data/report.csv",
        "skills/scheduling/SKILL.md",
    ] {
        let path = workspace.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, format!("contents of {file}\n")).unwrap();
    }
}

/// Every file below `root` (relative) that the `read` tool opens, as the host sees it
/// now: regular files with one link (it refuses symlinks, hard links and sockets).
fn host_files(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut queue: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(directory) = queue.pop() {
        for entry in fs::read_dir(&directory).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                queue.push(entry.path());
            } else if kind.is_file() && entry.metadata().unwrap().nlink() == 1 {
                let relative = entry.path().strip_prefix(root).unwrap().to_path_buf();
                found.insert(relative.to_string_lossy().into_owned());
            }
        }
    }
    found
}

struct Company {
    llm: ScriptedLlm,
    _directory: tempfile::TempDir,
    workspace: PathBuf,
    config_path: PathBuf,
    config: Value,
    agent: AgentProcess,
    client: reqwest::Client,
}

impl Company {
    async fn start(scope: &str) -> Self {
        let _ = require_sandbox();
        let llm = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        fs::create_dir_all(&workspace).unwrap();
        company_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["sandbox"]["scope"] = json!(scope);
        write_config(&config_path, &config);
        let agent = spawn_agent(&config_path, &workspace, &[]);
        Self {
            llm,
            _directory: directory,
            workspace,
            config_path,
            config,
            agent,
            client: reqwest::Client::new(),
        }
    }

    /// Has the model run `command` for the person on `channel`/`peer`; returns the
    /// tool result and whether it was an error.
    async fn exec(&self, channel: &str, peer: &str, command: &str) -> (String, bool) {
        let before = self.llm.requests().len();
        self.llm
            .push(Reply::tool_call("exec", json!({"command": command})));
        self.llm.push(Reply::text("done"));
        let response = self
            .client
            .post(format!("{}/v1/messages", self.agent.http))
            .bearer_auth(TOKEN)
            .json(&json!({"channel": channel, "peer": peer, "text": "please run it"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let requests = self.llm.requests();
        assert_eq!(requests.len(), before + 2, "one tool call, one answer");
        requests[before + 1]
            .tool_results()
            .pop()
            .expect("the exec result reached the model")
    }

    /// What `slug` (with `role`) may read, by the role's own rules, among the files
    /// in the workspace now.
    fn readable(&self, role: &str, slug: &str) -> BTreeSet<String> {
        let config: BotConfig = serde_json::from_value(self.config.clone()).unwrap();
        let rules = RolePaths::new(&config.roles[role], &config.file_access, slug).unwrap();
        host_files(&self.workspace)
            .into_iter()
            .filter(|file| rules.check_read(file).is_ok())
            .collect()
    }
}

fn listing(output: &str) -> BTreeSet<String> {
    let (files, rest) = output
        .split_once("END-OF-LIST")
        .unwrap_or_else(|| panic!("the listing did not finish: {output}"));
    assert!(rest.contains("[exit code 0]"), "{output}");
    files
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

fn assert_same(role: &str, shown: &BTreeSet<String>, readable: &BTreeSet<String>) {
    let forbidden: Vec<_> = shown.difference(readable).collect();
    let missing: Vec<_> = readable.difference(shown).collect();
    assert!(
        forbidden.is_empty() && missing.is_empty(),
        "{role}: visible in the sandbox but refused by `read`: {forbidden:?}; \
         readable but not in the sandbox: {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn each_role_sees_exactly_what_its_read_rules_allow() {
    let company = Company::start("session").await;
    let callers = [
        ("owner", "ana", "whatsapp", ANA_WHATSAPP),
        ("manager", "marko", "whatsapp", MARKO_WHATSAPP),
        ("employee", "ivan", "telegram", IVAN_TELEGRAM),
    ];
    for (role, slug, channel, peer) in callers {
        let (output, is_error) = company.exec(channel, peer, LIST).await;
        assert!(!is_error, "{role}: {output}");
        // Read after the command: the agent has written its transcripts and logs by now.
        let readable = company.readable(role, slug);
        let shown = listing(&output);
        assert_same(role, &shown, &readable);
        for private in [".saint/", "sessions/", "logs/", "config/"] {
            assert!(
                !shown.iter().any(|file| file.starts_with(private)),
                "{role}: runtime state {private} is visible: {shown:?}"
            );
        }
        assert!(
            host_files(&company.workspace).contains("sessions/transcripts.sqlite3"),
            "the runtime state the walk must hide exists"
        );
        // Nobody but the owner sees another person's notes or the private folder.
        if role != "owner" {
            for file in ["memory/users/ana/secret.md", "memory/private/finance.md"] {
                assert!(!shown.contains(file), "{role} sees {file}");
            }
        }
    }
    // Spot checks of what the rules mean, so a wrong rule cannot pass both sides.
    let ivan = listing(&company.exec("telegram", IVAN_TELEGRAM, LIST).await.0);
    assert!(ivan.contains("memory/users/ivan/notes.md"), "{ivan:?}");
    assert!(ivan.contains("memory/shared/deep/more.md"), "{ivan:?}");
    assert!(!ivan.contains("memory/daily/2026-11-23.md"), "{ivan:?}");
    assert!(!ivan.contains("AGENTS.md"), "{ivan:?}");
    let ana = listing(&company.exec("whatsapp", ANA_WHATSAPP, LIST).await.0);
    assert!(ana.contains("memory/private/finance.md"), "{ana:?}");

    // A stranger's role has no exec at all: nothing runs, nothing is shown.
    let (output, is_error) = company.exec("whatsapp", "+385910000009", LIST).await;
    assert!(
        is_error && !output.contains("END-OF-LIST"),
        "a stranger ran a command: {output}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn files_written_later_show_up_only_for_those_who_may_read_them() {
    let company = Company::start("session").await;
    let before = listing(&company.exec("telegram", IVAN_TELEGRAM, LIST).await.0);
    assert!(!before.contains("data/new.csv") && !before.contains("NEW.md"));
    // A file inside a folder the role reads whole, and one at the top the role may
    // not read.
    fs::write(company.workspace.join("data/new.csv"), "fresh\n").unwrap();
    fs::write(company.workspace.join("NEW.md"), "top secret\n").unwrap();
    let after = listing(&company.exec("telegram", IVAN_TELEGRAM, LIST).await.0);
    assert!(after.contains("data/new.csv"), "{after:?}");
    assert!(!after.contains("NEW.md"), "{after:?}");
    // The owner's view gains the new top-level file: the sandbox is restarted with it.
    let owner = listing(&company.exec("whatsapp", ANA_WHATSAPP, LIST).await.0);
    assert!(owner.contains("NEW.md"), "{owner:?}");
    let (output, _) = company
        .exec("whatsapp", ANA_WHATSAPP, "cat /agent/NEW.md")
        .await;
    assert!(output.contains("top secret"), "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn scope_agent_still_gives_each_view_its_own_sandbox_and_a_role_change_a_new_one() {
    let mut company = Company::start("agent").await;
    // Ivan leaves a file in his scratch /workspace; Marko, in the same bot with scope
    // `agent`, must not find it (he sees other parts of the workspace).
    let (output, is_error) = company
        .exec(
            "telegram",
            IVAN_TELEGRAM,
            "cp /agent/memory/users/ivan/notes.md /workspace/ivan-copy.md && echo copied",
        )
        .await;
    assert!(!is_error && output.contains("copied"), "{output}");
    let (output, _) = company
        .exec(
            "whatsapp",
            MARKO_WHATSAPP,
            "cat /workspace/ivan-copy.md 2>&1; echo status=$?",
        )
        .await;
    assert!(
        output.contains("status=1"),
        "Marko reads Ivan's scratch: {output}"
    );
    assert!(
        !output.contains("contents of memory/users/ivan"),
        "{output}"
    );
    // Ivan himself still finds it: his sandbox stayed warm.
    let (output, _) = company
        .exec("telegram", IVAN_TELEGRAM, "cat /workspace/ivan-copy.md")
        .await;
    assert!(
        output.contains("contents of memory/users/ivan/notes.md"),
        "{output}"
    );

    // Ivan is promoted to manager: his next command gets the manager's view, in a new
    // sandbox (the employee one, with its scratch, is not his any more).
    for contact in company.config["contacts"].as_array_mut().unwrap() {
        if contact["slug"] == "ivan" {
            contact["role"] = json!("manager");
        }
    }
    write_config(&company.config_path, &company.config);
    let promoted = listing(&company.exec("telegram", IVAN_TELEGRAM, LIST).await.0);
    assert_same(
        "ivan as manager",
        &promoted,
        &company.readable("manager", "ivan"),
    );
    assert!(
        promoted.contains("memory/daily/2026-11-23.md"),
        "{promoted:?}"
    );
    let (output, _) = company
        .exec(
            "telegram",
            IVAN_TELEGRAM,
            "cat /workspace/ivan-copy.md 2>&1; echo status=$?",
        )
        .await;
    assert!(
        output.contains("status=1"),
        "the old sandbox was reused: {output}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_local_sandbox_runs_under_a_seccomp_filter() {
    let company = Company::start("session").await;
    // keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 1) works in a user
    // namespace without a filter; the container runtime's default profile refuses it.
    let probe = "grep '^Seccomp:' /proc/self/status; python3 -c \"import ctypes, os; \
                 libc = ctypes.CDLL(None, use_errno=True); \
                 r = libc.syscall(250, 0, -3, 1); \
                 print('keyctl', r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok'); \
                 r = libc.syscall(272, 0x00020000); \
                 print('unshare', r, os.strerror(ctypes.get_errno()) if r < 0 else 'ok')\"";
    let (output, is_error) = company.exec("whatsapp", ANA_WHATSAPP, probe).await;
    assert!(!is_error, "{output}");
    assert!(
        output.contains("Seccomp:\t2"),
        "no seccomp filter: {output}"
    );
    assert!(
        output.contains("keyctl -1 Operation not permitted"),
        "keyctl was not refused: {output}"
    );
    assert!(
        output.contains("unshare -1 Operation not permitted"),
        "unshare was not refused: {output}"
    );
    // Ordinary work still runs: processes, pipes, threads.
    let (output, _) = company
        .exec(
            "whatsapp",
            ANA_WHATSAPP,
            "python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread-ok\",)); t.start(); t.join()' | cat",
        )
        .await;
    assert!(output.contains("thread-ok"), "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn hard_links_and_symlinks_planted_in_a_folder_read_whole_are_never_shown() {
    let company = Company::start("session").await;
    let before = listing(&company.exec("telegram", IVAN_TELEGRAM, LIST).await.0);
    assert!(before.contains("memory/shared/facts.md"), "{before:?}");
    // A hard link of the owner's private memory, and a symlink to it, planted in the
    // folder every employee reads whole.
    let private = company.workspace.join("memory/private/finance.md");
    fs::hard_link(&private, company.workspace.join("memory/shared/finance.md")).unwrap();
    symlink(
        "../private/finance.md",
        company.workspace.join("memory/shared/deep/finance-link.md"),
    )
    .unwrap();
    for (role, slug, channel, peer) in [
        ("employee", "ivan", "telegram", IVAN_TELEGRAM),
        ("owner", "ana", "whatsapp", ANA_WHATSAPP),
    ] {
        let (output, is_error) = company.exec(channel, peer, LIST).await;
        assert!(!is_error, "{role}: {output}");
        let shown = listing(&output);
        assert_same(role, &shown, &company.readable(role, slug));
        for planted in [
            "memory/shared/finance.md",
            "memory/shared/deep/finance-link.md",
            // Hard-linked now, so `read` refuses this name too.
            "memory/private/finance.md",
        ] {
            assert!(!shown.contains(planted), "{role} sees {planted}: {shown:?}");
        }
        // The rest of the folder is still there, file by file.
        for kept in ["memory/shared/facts.md", "memory/shared/deep/more.md"] {
            assert!(shown.contains(kept), "{role} lost {kept}: {shown:?}");
        }
        let (output, _) = company
            .exec(
                channel,
                peer,
                "grep -rl 'contents of memory/private' /agent; echo status=$?",
            )
            .await;
        assert!(output.contains("status=1"), "{role}: {output}");
    }
}

/// The private content the swapper tries to bring into `/agent`.
const PRIVATE_MARKER: &str = "PRIVATE-f7c1-owner-only";
/// View computations (each opened and checked by descriptor) while the swapper runs.
const SWAP_ROUNDS: usize = 10_000;
/// Every this many computations, a real sandbox is started with the view as well.
const REAL_SANDBOX_EVERY: usize = 100;

/// `(device, inode)` of what `path` names, links not followed.
fn identity(path: &Path) -> (u64, u64) {
    let metadata = fs::symlink_metadata(path).unwrap();
    (metadata.dev(), metadata.ino())
}

/// Runs `command` in `view`'s sandbox for `scope`, started afresh (so its mounts are
/// bound now, under the swapper); `Err` when the start was refused.
async fn fresh_sandbox_run(
    sandbox: &LocalSandbox,
    scope: &ScopeKey,
    view: &View,
    command: &str,
) -> Result<String, String> {
    sandbox.discard(scope).await.unwrap();
    let request = ExecRequest {
        command: command.to_string(),
        cwd: "/workspace".to_string(),
        timeout: Duration::from_secs(20),
        ..ExecRequest::default()
    };
    let mut events = sandbox
        .exec(scope, view, request)
        .await
        .map_err(|error| error.to_string())?;
    let mut output = String::new();
    while let Some(event) = events.next().await {
        match event.unwrap() {
            ExecEvent::Stdout(bytes) | ExecEvent::Stderr(bytes) => {
                output.push_str(&String::from_utf8_lossy(&bytes));
            }
            ExecEvent::Exit(0) => return Ok(output),
            other => panic!("the listing ended with {other:?}: {output}"),
        }
    }
    panic!("the listing's stream ended without an exit: {output}");
}

/// A regression: bubblewrap re-resolved each view entry's path, so a host-side rename of
/// a permitted entry to a symlink into `memory/private` between the walk and the bind
/// gave an employee the owner's private memory. Now entries are bound by descriptor.
///
/// Two swapper threads run as fast as they can for the whole test: one renames the
/// folder `memory/shared` away and a symlink to `memory/private` into its place, and
/// back (plain renames, as in the report); one atomically exchanges `SOUL.md` with a
/// symlink to `memory/private/finance.md` (`RENAME_EXCHANGE`). Meanwhile the
/// employee's view is computed 10,000 times by the real walk
/// (`saint_tools::guard::caller_view::compute`) and each is opened with `View::open` —
/// the very call `LocalSandbox::start` makes before bubblewrap, whose descriptors are what
/// bubblewrap binds (`--ro-bind-fd`). Real for every one of the 10,000: the walk, the
/// `openat2` opens and checks, and the assertion that every descriptor that passed is
/// the permitted object (device and inode of the real folder or file). Real for every
/// 100th (100 in all): a fresh `LocalSandbox` start with that view — bubblewrap
/// binding the descriptors, the real runner — and a command inside listing every file
/// under `/agent` and printing its contents, which must hold only permitted files and
/// never the private marker. A refused start is counted by who refused it (the check
/// before bubblewrap, or bubblewrap's own after it resolved the descriptor), never
/// retried.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_side_swapper_never_gets_a_forbidden_file_into_agent() {
    let runner = require_sandbox();
    let base = tempfile::tempdir().unwrap();
    let workspace = base.path().join("workspace");
    for (file, text) in [
        ("SOUL.md", "soul: be kind".to_string()),
        ("data/report.csv", "report".to_string()),
        ("memory/shared/facts.md", "shared facts".to_string()),
        ("memory/shared/deep/more.md", "more shared".to_string()),
        (
            "memory/private/finance.md",
            format!("{PRIVATE_MARKER} finance"),
        ),
        (
            "memory/private/notes/plans.md",
            format!("{PRIVATE_MARKER} plans"),
        ),
    ] {
        let path = workspace.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    // The symlinks the swapper moves into the permitted entries' places.
    symlink("private", workspace.join("memory/.shared-link")).unwrap();
    symlink("memory/private/finance.md", workspace.join(".soul-link")).unwrap();
    let permitted: BTreeMap<&str, (u64, u64)> = [
        ("SOUL.md", identity(&workspace.join("SOUL.md"))),
        ("data", identity(&workspace.join("data"))),
        ("memory/shared", identity(&workspace.join("memory/shared"))),
    ]
    .into_iter()
    .collect();
    let permitted_files: BTreeSet<&str> = [
        "SOUL.md",
        "data/report.csv",
        "memory/shared/facts.md",
        "memory/shared/deep/more.md",
    ]
    .into_iter()
    .collect();

    let mut role: RoleConfig = serde_json::from_value(json!({})).unwrap();
    role.files = FileGlobs {
        read: ["memory/shared/**", "data/**", "SOUL.md"]
            .map(String::from)
            .to_vec(),
        ..FileGlobs::default()
    };
    let rules = RolePaths::new(&role, &FileAccessConfig::default(), "acme-ivo").unwrap();
    assert_eq!(
        caller_view::compute(&workspace, &rules)
            .unwrap()
            .to_string(),
        "[SOUL.md, data/, memory/shared/]"
    );
    let sandbox = LocalSandbox::new(LocalConfig::new(
        workspace.clone(),
        base.path().join("state"),
        runner,
    ))
    .unwrap();
    let scope = ScopeKey::for_caller(
        SandboxScope::Session,
        "swapper",
        &Viewer {
            role: "employee",
            person: Some("acme-ivo"),
        },
    );

    let stop = Arc::new(AtomicBool::new(false));
    let folder_swaps = Arc::new(AtomicU64::new(0));
    let file_swaps = Arc::new(AtomicU64::new(0));
    let folder_swapper = {
        let (stop, swaps, memory) = (stop.clone(), folder_swaps.clone(), workspace.join("memory"));
        std::thread::spawn(move || {
            let (shared, away, link) = (
                memory.join("shared"),
                memory.join(".shared-away"),
                memory.join(".shared-link"),
            );
            while !stop.load(Ordering::Relaxed) {
                let swapped = fs::rename(&shared, &away)
                    .and_then(|()| fs::rename(&link, &shared))
                    .and_then(|()| fs::rename(&shared, &link))
                    .and_then(|()| fs::rename(&away, &shared));
                // Only when the test failed and its workspace is gone (the count says).
                if swapped.is_err() {
                    break;
                }
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let file_swapper = {
        let (stop, swaps, root) = (stop.clone(), file_swaps.clone(), workspace.clone());
        std::thread::spawn(move || {
            let (soul, link) = (root.join("SOUL.md"), root.join(".soul-link"));
            while !stop.load(Ordering::Relaxed) {
                let exchanged = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &soul,
                    rustix::fs::CWD,
                    &link,
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                if exchanged.is_err() {
                    break;
                }
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let listing_command = "cd /agent && find . -mindepth 1 ! -type d | sort | \
         while IFS= read -r f; do printf '%s\\t' \"$f\"; head -c 200 \"$f\" | tr '\\n' ' '; echo; done; \
         echo END-OF-LIST";
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for round in 1..=SWAP_ROUNDS {
        let view = caller_view::compute(&workspace, &rules).unwrap();
        for entry in view.entries() {
            assert!(
                permitted.contains_key(entry.path.as_str()),
                "the walk judged {} permitted",
                entry.path
            );
        }
        match view.open(&workspace) {
            Ok(opened) => {
                *counts.entry("opened").or_default() += 1;
                for (path, descriptor) in opened.mounts() {
                    let stat = rustix::fs::fstat(descriptor).unwrap();
                    assert_eq!(
                        Some(&(stat.st_dev, stat.st_ino)),
                        permitted.get(path),
                        "round {round}: the descriptor for {path} is not the permitted object"
                    );
                }
                if opened.mounts().any(|(path, _)| path == "memory/shared") {
                    *counts.entry("opened with memory/shared").or_default() += 1;
                }
            }
            Err(refused) => {
                let refused = refused.to_string();
                assert!(
                    refused.contains("changed after the view was computed"),
                    "{refused}"
                );
                *counts.entry("refused at open").or_default() += 1;
            }
        }
        if round % REAL_SANDBOX_EVERY != 0 {
            continue;
        }
        match fresh_sandbox_run(&sandbox, &scope, &view, listing_command).await {
            Ok(output) => {
                *counts.entry("real sandbox started").or_default() += 1;
                assert!(!output.contains(PRIVATE_MARKER), "round {round}: {output}");
                let (files, _) = output
                    .split_once("END-OF-LIST")
                    .unwrap_or_else(|| panic!("round {round}: unfinished listing: {output}"));
                for line in files.lines().filter(|line| !line.is_empty()) {
                    let (path, _) = line.split_once('\t').unwrap_or((line, ""));
                    let path = path.trim_start_matches("./");
                    assert!(
                        permitted_files.contains(path),
                        "round {round}: /agent/{path} is visible: {output}"
                    );
                    *counts.entry("real files listed").or_default() += 1;
                }
            }
            Err(refused) => {
                // Fail closed, each way: our check before bubblewrap; bubblewrap's own,
                // which turns the descriptor back into a path to mount it and dies when
                // that path is gone or the mount is not the descriptor's object.
                let kind = if refused.contains("changed after the view was computed") {
                    "real sandbox refused: view open"
                } else if refused.contains("Race condition binding dirfd") {
                    "real sandbox refused: bwrap mount check"
                } else if refused.contains("bwrap: Can't") {
                    // The descriptor's path was renamed away between bubblewrap reading it
                    // back and stating or mounting it ("Can't find source path", "Can't
                    // get type of source", "Can't bind mount …: No such file or
                    // directory"): bubblewrap stopped, nothing ran.
                    "real sandbox refused: bwrap path gone"
                } else {
                    panic!("round {round}: {refused}")
                };
                *counts.entry(kind).or_default() += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    folder_swapper.join().unwrap();
    file_swapper.join().unwrap();
    sandbox.shutdown().await;
    let (folder_swaps, file_swaps) = (
        folder_swaps.load(Ordering::Relaxed),
        file_swaps.load(Ordering::Relaxed),
    );
    println!(
        "{SWAP_ROUNDS} rounds, {folder_swaps} folder swaps, {file_swaps} file swaps: {counts:?}"
    );
    // The race was live: the swappers ran throughout, the checks refused views the
    // workspace no longer matched, and views with the folder bound still got through.
    assert!(
        folder_swaps > 1_000 && file_swaps > 1_000,
        "{folder_swaps} {file_swaps}"
    );
    assert!(
        counts.get("refused at open").copied().unwrap_or(0) > 0,
        "{counts:?}"
    );
    assert!(
        counts
            .get("opened with memory/shared")
            .copied()
            .unwrap_or(0)
            > 0,
        "{counts:?}"
    );
    let real: u64 = counts
        .iter()
        .filter(|(kind, _)| kind.starts_with("real sandbox"))
        .map(|(_, count)| count)
        .sum();
    assert_eq!(
        real,
        (SWAP_ROUNDS / REAL_SANDBOX_EVERY) as u64,
        "{counts:?}"
    );
    assert!(
        counts.get("real sandbox started").copied().unwrap_or(0) > 0,
        "{counts:?}"
    );
}
