//! The sandbox shows each person only what their role may read: the real `saint-agent`
//! binary, the example company's config, real bubblewrap sandboxes and the scripted
//! model. Each person's `exec` lists everything under `/agent` from inside their
//! sandbox; the listing must equal, file for file, what their role's `read` rules allow
//! in the workspace (runtime state the agent itself wrote included), in both
//! directions.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and `saint-sandbox-runner` built into this
//! target directory (`cargo build -p saint-sandbox-runner`); a missing piece fails the
//! test with the reason.

mod common;

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use common::*;
use saint_config::BotConfig;
use saint_llm::scripted::{Reply, ScriptedLlm};
use saint_tools::guard::role_paths::RolePaths;
use serde_json::{Value, json};

const MARKO_WHATSAPP: &str = "+385991234568";
/// Lists every file and link under `/agent` (relative), then a marker line.
const LIST: &str = "find /agent -mindepth 1 ! -type d -printf '%P\\n' | sort; echo END-OF-LIST";

fn require_sandbox() {
    let runner =
        Path::new(env!("CARGO_BIN_EXE_saint-agent")).with_file_name("saint-sandbox-runner");
    assert!(
        runner.is_file() && Path::new("/usr/bin/bwrap").is_file(),
        "this test needs bubblewrap (/usr/bin/bwrap) and the saint-sandbox-runner binary ({}); \
         build it with `cargo build -p saint-sandbox-runner`",
        runner.display()
    );
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

/// Every regular file below `root` (relative), as the host sees it now.
fn host_files(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut queue: Vec<PathBuf> = vec![root.to_path_buf()];
    while let Some(directory) = queue.pop() {
        for entry in fs::read_dir(&directory).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                queue.push(entry.path());
            } else {
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
        require_sandbox();
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
