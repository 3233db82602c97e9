//! The `process` tool end to end: the real `saint-agent` binary, the scripted model, a
//! real bubblewrap sandbox and its runner. The model starts background commands, polls
//! one until it ends, kills another (and it is gone from the machine), is refused past
//! the role's `process.maxRunning` and by the role's exec blocklist, and a second person
//! sharing the very same sandbox can neither see nor kill the first one's process.
//! Every call is a usage line for its caller and counts in the per-tool metrics.
//!
//! Needs `bwrap` (Debian `bubblewrap`) and `saint-sandbox-runner` built into this
//! target directory (`cargo build -p saint-sandbox-runner`); a missing piece fails the
//! test with the reason.

mod common;

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

const ZORA_WHATSAPP: &str = "+385991230001";

struct Bot {
    llm: ScriptedLlm,
    _directory: tempfile::TempDir,
    workspace: PathBuf,
    agent: AgentProcess,
    client: reqwest::Client,
}

impl Bot {
    /// The example company with a second owner, Zora, and one sandbox for everybody
    /// with the same view (`shared`): Ana's and Zora's commands run side by side in it.
    async fn start() -> Self {
        let runner =
            Path::new(env!("CARGO_BIN_EXE_saint-agent")).with_file_name("saint-sandbox-runner");
        assert!(
            runner.is_file() && Path::new("/usr/bin/bwrap").is_file(),
            "this test needs bubblewrap (/usr/bin/bwrap) and the saint-sandbox-runner binary ({}); \
             build it with `cargo build -p saint-sandbox-runner`",
            runner.display()
        );
        let llm = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        config["sandbox"]["scope"] = json!("shared");
        config["roles"]["owner"]["process"] = json!({"maxRunning": 2});
        config["roles"]["owner"]["execBlocklist"] = json!(["rm -rf *"]);
        config["contacts"].as_array_mut().unwrap().push(json!({
            "slug": "zora",
            "name": "Zora",
            "role": "owner",
            "identities": [format!("whatsapp:{ZORA_WHATSAPP}")]
        }));
        write_config(&config_path, &config);
        let agent = spawn_agent(&config_path, &workspace, &[]);
        Self {
            llm,
            _directory: directory,
            workspace,
            agent,
            client: reqwest::Client::new(),
        }
    }

    /// One turn in which the model makes one `process` call for the person at `peer`;
    /// returns the tool result and whether it was an error.
    async fn process(&self, peer: &str, input: Value) -> (String, bool) {
        let before = self.llm.requests().len();
        self.llm.push(Reply::tool_call("process", input.clone()));
        self.llm.push(Reply::text("done"));
        let response = self
            .client
            .post(format!("{}/v1/messages", self.agent.http))
            .bearer_auth(TOKEN)
            .json(&json!({"channel": "whatsapp", "peer": peer, "text": "go on"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{input}");
        let requests = self.llm.requests();
        assert_eq!(
            requests.len(),
            before + 2,
            "one tool call, one answer: {input}"
        );
        requests[before + 1]
            .tool_results()
            .pop()
            .expect("the process result reached the model")
    }

    /// Starts `command` for the person at `peer`; returns the process id.
    async fn start_process(&self, peer: &str, command: &str) -> String {
        let (output, is_error) = self
            .process(peer, json!({"action": "start", "command": command}))
            .await;
        assert!(!is_error, "{command}: {output}");
        output
            .strip_prefix("started background process ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no id in {output:?}"))
            .to_string()
    }

    fn usage_lines(&self) -> Vec<Value> {
        fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .filter(|line: &Value| line["tool"] == "process")
            .collect()
    }
}

/// Processes on this machine (sandboxes included) whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(cmdline);
            }
        }
    }
    found
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "waited 15 s for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn process_runs_in_the_background_is_polled_to_its_end_killed_limited_and_private() {
    let bot = Bot::start().await;

    // Two long ones: Ana's role lets her run two at once.
    let first = bot.start_process(ANA_WHATSAPP, "sleep 3917.25").await;
    let second = bot.start_process(ANA_WHATSAPP, "sleep 3918.25").await;
    assert_ne!(first, second);
    wait_until("both sleeps to run in the sandbox", || {
        !processes_with("sleep 3917.25").is_empty() && !processes_with("sleep 3918.25").is_empty()
    })
    .await;

    // A third is refused before it runs, naming the limit.
    let (refused, is_error) = bot
        .process(
            ANA_WHATSAPP,
            json!({"action": "start", "command": "touch /workspace/third-ran"}),
        )
        .await;
    assert!(is_error, "{refused}");
    assert!(
        refused.contains("at most 2 background processes")
            && refused.contains("process.maxRunning"),
        "{refused}"
    );
    // So is what `exec` would refuse: the same blocklist, before anything starts.
    let (blocked, is_error) = bot
        .process(
            ANA_WHATSAPP,
            json!({"action": "start", "command": "rm -rf /workspace/x"}),
        )
        .await;
    assert!(
        is_error && blocked.contains("blocked for your role"),
        "{blocked}"
    );

    // Zora shares the sandbox but sees none of Ana's processes and cannot touch them.
    let (listed, is_error) = bot.process(ZORA_WHATSAPP, json!({"action": "list"})).await;
    assert!(!is_error, "{listed}");
    assert_eq!(listed, "no background processes");
    for action in ["poll", "kill"] {
        let (output, is_error) = bot
            .process(ZORA_WHATSAPP, json!({"action": action, "id": first}))
            .await;
        assert!(is_error, "zora's {action}: {output}");
        assert!(output.contains("not found"), "zora's {action}: {output}");
    }
    assert!(
        !processes_with("sleep 3917.25").is_empty(),
        "zora's kill did nothing"
    );
    let (listed, _) = bot.process(ANA_WHATSAPP, json!({"action": "list"})).await;
    assert!(
        listed.contains(&format!("{first} running")) && listed.contains("sleep 3917.25"),
        "{listed}"
    );

    // Ana's kill ends it: gone from the machine and from her list.
    let (killed, is_error) = bot
        .process(ANA_WHATSAPP, json!({"action": "kill", "id": first}))
        .await;
    assert!(!is_error, "{killed}");
    assert!(
        killed.ends_with(&format!("[process {first} killed]")),
        "{killed}"
    );
    wait_until("the killed process to be gone from the machine", || {
        processes_with("sleep 3917.25").is_empty()
    })
    .await;
    let (listed, _) = bot.process(ANA_WHATSAPP, json!({"action": "list"})).await;
    assert!(!listed.contains("3917.25"), "{listed}");

    // Below the limit again: `sleep 5; echo done` starts, runs, and its poll says so.
    let done = bot.start_process(ANA_WHATSAPP, "sleep 5; echo done").await;
    let (polled, is_error) = bot
        .process(ANA_WHATSAPP, json!({"action": "poll", "id": done}))
        .await;
    assert!(!is_error, "{polled}");
    assert!(
        polled.contains(&format!("[process {done} still running")),
        "{polled}"
    );
    assert!(!polled.contains("done\n"), "{polled}");
    // Polled until it ends: its output arrives once, with its exit code.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut output = String::new();
    let last = loop {
        let (polled, is_error) = bot
            .process(ANA_WHATSAPP, json!({"action": "poll", "id": done}))
            .await;
        assert!(!is_error, "{polled}");
        output.push_str(&polled);
        if !polled.contains("still running") {
            break polled;
        }
        assert!(
            Instant::now() < deadline,
            "`sleep 5; echo done` had not exited after 30 s: {output}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    // `done` may come with a poll that still saw the process run (it exits right
    // after): across the polls it arrives once, and the last poll says it ended.
    assert!(
        last.ends_with(&format!("[process {done} exited with code 0]")),
        "{last}"
    );
    assert_eq!(output.matches("done\n").count(), 1, "{output}");
    assert!(!bot.workspace.join("third-ran").exists());

    let (killed, _) = bot
        .process(ANA_WHATSAPP, json!({"action": "kill", "id": second}))
        .await;
    assert!(killed.ends_with("killed]"), "{killed}");
    wait_until("the second killed process to be gone", || {
        processes_with("sleep 3918.25").is_empty()
    })
    .await;

    // One usage line per call, for whoever made it.
    let lines = bot.usage_lines();
    let by = |user: &str| lines.iter().filter(|line| line["user"] == user).count();
    assert!(by("ana") >= 8 && by("zora") == 3, "{lines:#?}");
    assert!(
        lines
            .iter()
            .all(|line| line["role"] == "owner" && line["durationMs"].is_u64()),
        "{lines:#?}"
    );
    let exited = lines
        .iter()
        .find(|line| line["state"] == "exited")
        .unwrap_or_else(|| panic!("no line for the exit: {lines:#?}"));
    assert_eq!(exited["user"], "ana");
    assert_eq!(exited["exitCode"], 0);
    assert_eq!(exited["outputBytes"], 5);
    assert_eq!(exited["action"], "poll");
    assert!(
        lines
            .iter()
            .any(|line| line["user"] == "zora" && line["outcome"] == "not_found"),
        "{lines:#?}"
    );
    let metrics = bot
        .client
        .get(format!("{}/metrics", bot.agent.metrics))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for series in [
        r#"saint_tool_calls_total{tool="process",outcome="ok"}"#,
        r#"saint_tool_calls_total{tool="process",outcome="denied"}"#,
        r#"saint_tool_calls_total{tool="process",outcome="not_found"}"#,
        r#"saint_tool_call_duration_seconds_count{tool="process"}"#,
        // Each byte once: "done\n" of the ended poll.
        r#"saint_tool_output_bytes_total{tool="process",role="owner"} 5"#,
    ] {
        assert!(metrics.contains(series), "{series} missing from {metrics}");
    }
}
