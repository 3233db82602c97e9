//! The real `saint-agent` binary: flags and config errors, a message end to end over
//! TCP, hot reload without restart, graceful shutdown that finishes a running turn.

mod common;

use std::{process::Command, time::Duration};

use common::*;
use saint_scripted::llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_saint-agent"))
}

/// `saint-agent run` with `config` and `workspace` on loopback ports the kernel picks,
/// with an empty environment (callers add what they test).
fn run_on_loopback(config: &std::path::Path, workspace: impl AsRef<std::path::Path>) -> Command {
    let mut command = bin();
    command
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--config")
        .arg(config)
        .arg("--workspace")
        .arg(workspace.as_ref())
        .env_clear();
    command
}

#[test]
fn run_help_explains_config_workspace_and_the_model_environment() {
    let output = bin().args(["run", "--help"]).output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for needle in [
        "--config",
        "--workspace",
        "SAINT_CONFIG",
        "SAINT_WORKSPACE",
        "SAINT_MODEL_API_KEY",
    ] {
        assert!(help.contains(needle), "help lacks {needle}: {help}");
    }
}

/// Outside Kubernetes nothing is offered to the network unless asked: both listeners
/// default to loopback (the operator sets the pod address explicitly).
#[test]
fn the_http_and_metrics_listeners_default_to_loopback() {
    let output = bin().args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(
        help.contains("Default: loopback on the HTTP channel's `settings.port` (8080 when it"),
        "{help}"
    );
    assert!(help.contains("[default: 127.0.0.1:9090]"), "{help}");
    assert!(!help.contains("0.0.0.0"), "{help}");
}

#[test]
fn missing_model_key_and_invalid_config_fail_with_one_clear_line() {
    let directory = tempfile::tempdir().unwrap();
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config("http://127.0.0.1:9"));
    let output = run_on_loopback(&config_path, directory.path().join("workspace"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("SAINT_MODEL_API_KEY"), "{stderr}");

    std::fs::write(
        &config_path,
        FIXTURE.replace(
            "\"defaultRole\": \"external\"",
            "\"defaultRole\": \"ghost\"",
        ),
    )
    .unwrap();
    let output = bin()
        .args(["check-config", "--config"])
        .arg(&config_path)
        .env_clear()
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("defaultRole"), "{stderr}");
}

/// A declared channel whose settings cannot work and an HTTP channel whose token
/// variable is unset each get one warning at start, naming the channel and the field
/// or variable, instead of silence and a 401 on every message.
#[test]
fn unworkable_channels_and_a_missing_channel_token_are_named_at_start() {
    let directory = tempfile::tempdir().unwrap();
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config("http://127.0.0.1:9");
    config["channels"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "tg", "kind": "telegram"}));
    write_config(&config_path, &config);
    let mut child = run_on_loopback(&config_path, directory.path().join("workspace"))
        .env("RUST_LOG", "warn")
        .env("SAINT_MODEL_API_KEY", "sk-model-key")
        .env(
            "SAINT_SANDBOX_STATE",
            directory.path().join("sandbox-state"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Started (the warnings come before the listening line), then stopped.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("saint-agent listening"), "{line:?}");
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(r#"channel \"tg\""#))
        .collect();
    assert_eq!(warnings.len(), 1, "{stderr}");
    assert!(
        warnings[0].contains("secrets.botToken is required: the channel is not started"),
        "{stderr}"
    );
    // The fixture's WhatsApp channel lacks its phone number id: named, not started.
    assert!(
        stderr.contains(r#"channel \"whatsapp\": settings.phoneNumberId is required: the channel is not started"#),
        "{stderr}"
    );
    let token: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("SAINT_CHANNEL_API_TOKEN"))
        .collect();
    assert_eq!(token.len(), 1, "{stderr}");
    assert!(token[0].contains("401"), "{stderr}");
}

#[test]
fn check_config_prints_a_syntax_error_once_with_file_line_and_column() {
    let directory = tempfile::tempdir().unwrap();
    let config_path = directory.path().join("bad.json");
    std::fs::write(&config_path, "{ not json").unwrap();
    let output = bin()
        .args(["check-config", "--config"])
        .arg(&config_path)
        .env_clear()
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(
        stderr,
        format!(
            "saint-agent: failed to load config {}: failed to parse bot config: \
             key must be a string at line 1 column 3\n",
            config_path.display()
        )
    );
}

async fn post(client: &reqwest::Client, agent: &AgentProcess, peer: &str, text: &str) -> Value {
    let response = client
        .post(format!("{}/v1/messages", agent.http))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "whatsapp", "peer": peer, "text": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_answers_reloads_contacts_and_finishes_a_running_turn_on_sigterm() {
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();

    llm.push(Reply::text("Hello!"));
    let reply = post(&client, &agent, "+385910000002", "hi").await;
    assert_eq!(reply["reply"], "Hello!");
    assert_eq!(llm.requests()[0].model(), "claude-haiku-4-5");

    let mut config = test_config(&llm.base_url());
    config["contacts"].as_array_mut().unwrap().push(
        json!({"slug": "petra", "name": "Petra", "role": "owner", "identities": ["whatsapp:+385910000002"]}),
    );
    config["identityLinks"]["petra"] = json!(["whatsapp:+385910000002"]);
    write_config(&config_path, &config);
    llm.push(Reply::text("Hi Petra."));
    post(&client, &agent, "+385910000002", "hi again").await;
    assert_eq!(
        llm.requests()[1].model(),
        "claude-sonnet-4-5",
        "the new contact's role applies without a restart"
    );

    let metrics = reqwest::get(format!("{}/metrics", agent.metrics))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("saint_turns_total"), "{metrics}");

    // A slow turn is running when SIGTERM arrives: it must still complete.
    llm.push(Reply::text("slow but complete").with_delay(Duration::from_millis(800)));
    let slow = {
        let client = client.clone();
        let url = format!("{}/v1/messages", agent.http);
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(TOKEN)
                .json(&json!({"channel": "whatsapp", "peer": "+385910000002", "text": "take your time"}))
                .send()
                .await
        })
    };
    while llm.request_count() < 3 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = agent.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let response = slow.await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reply"], "slow but complete");
    let mut agent = agent;
    let status = tokio::task::spawn_blocking(move || agent.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "graceful shutdown exits 0: {status:?}");
}

/// Two local agents of one bot on one machine would reap each other's sandboxes and
/// replace each other's Porter: the second is refused at start, in one line naming the
/// state directory and the first agent's pid.
#[tokio::test]
async fn a_second_agent_on_the_same_state_directory_says_so_and_exits() {
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let first = spawn_agent(&config_path, &workspace, &[]);
    let state = directory.path().join("sandbox-state");
    let output = run_on_loopback(&config_path, &workspace)
        .envs(environment())
        .env("RUST_LOG", "error")
        .env("SAINT_SANDBOX_STATE", &state)
        .output()
        .unwrap();
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("another saint-agent (pid {})", first.child.id())),
        "{stderr}"
    );
    assert!(stderr.contains(&state.display().to_string()), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_runs_in_the_local_sandbox_for_the_owner_and_is_never_offered_to_strangers() {
    let runner = std::path::Path::new(env!("CARGO_BIN_EXE_saint-agent"))
        .with_file_name("saint-sandbox-runner");
    assert!(
        runner.is_file() && std::path::Path::new("/usr/bin/bwrap").is_file(),
        "this test needs bubblewrap (/usr/bin/bwrap) and the saint-sandbox-runner binary ({}); \
         build it with `cargo build -p saint-sandbox-runner`",
        runner.display()
    );
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    seed_workspace(&workspace);
    let config_path = directory.path().join("bot-config.json");
    write_config(&config_path, &test_config(&llm.base_url()));
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();

    llm.push(Reply::tool_call(
        "exec",
        json!({"command": "echo sandboxed-$((6*7))"}),
    ));
    llm.push(Reply::text("Ran it."));
    post(&client, &agent, ANA_WHATSAPP, "run the echo").await;
    let requests = llm.requests();
    assert!(
        requests[0].tool_names().contains(&"exec".to_string()),
        "{:?}",
        requests[0].tool_names()
    );
    let results = requests[1].tool_results();
    assert!(
        !results[0].1 && results[0].0.contains("sandboxed-42"),
        "{results:?}"
    );

    llm.push(Reply::text("Hi."));
    post(&client, &agent, "+385910000003", "hello").await;
    assert!(!llm.requests()[2].tool_names().contains(&"exec".to_string()));
}

#[test]
fn enabled_memory_without_its_embedding_model_refuses_to_start() {
    let directory = tempfile::tempdir().unwrap();
    let config_path = directory.path().join("bot-config.json");
    let missing_model = directory.path().join("no-such-model");
    let mut config = test_config("http://127.0.0.1:9");
    config["memory"] = json!({"embeddings": {"kind": "local", "modelDir": missing_model}});
    write_config(&config_path, &config);
    let output = run_on_loopback(&config_path, directory.path().join("workspace"))
        .envs(environment())
        .output()
        .unwrap();
    assert!(
        !output.status.success(),
        "the agent started without its model"
    );
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("failed to start memory"), "{stderr}");
    assert!(
        stderr.contains("no-such-model"),
        "the error should name the model directory: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_tools_search_the_workspace_notes_when_the_embedding_model_is_present() {
    let model_dir = saint_memory::default_model_dir();
    assert!(
        model_dir.join("model.safetensors").is_file(),
        "this test needs the embedding model in {}; run agent-pod/memory/fetch-model.sh",
        model_dir.display()
    );
    let llm = ScriptedLlm::start().await.unwrap();
    let directory = tempfile::tempdir().unwrap();
    let workspace = directory.path().join("workspace");
    std::fs::create_dir_all(workspace.join("memory/shared")).unwrap();
    seed_workspace(&workspace);
    std::fs::write(
        workspace.join("memory/shared/pricing.md"),
        "# Pricing\n\nA standard anvil costs 40 euros.\n",
    )
    .unwrap();
    let config_path = directory.path().join("bot-config.json");
    let mut config = test_config(&llm.base_url());
    config["memory"] = json!({"embeddings": {"kind": "local", "modelDir": model_dir}});
    write_config(&config_path, &config);
    let agent = spawn_agent(&config_path, &workspace, &[]);
    let client = reqwest::Client::new();

    // The first index runs in the background; ask until it has caught up.
    let mut found = false;
    for _ in 0..50 {
        llm.push(Reply::tool_call(
            "memory_search",
            json!({"query": "what does an anvil cost?"}),
        ));
        llm.push(Reply::text("Let me check."));
        let before = llm.request_count();
        post(&client, &agent, ANA_WHATSAPP, "what does an anvil cost?").await;
        let request = &llm.requests()[before + 1];
        let (content, is_error) = request.tool_results().pop().unwrap();
        assert!(!is_error, "{content}");
        if content.contains("40 euros") {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(found, "memory_search never found the shared note");
    assert!(
        llm.requests()[0]
            .tool_names()
            .contains(&"memory_get".to_string())
    );
}

/// The HTTP channel's `settings.port` is where the agent listens when no `--listen`
/// says otherwise (the operator renders the same port into the pod's address, its
/// container port, Service and NetworkPolicy).
#[test]
fn the_http_channels_port_setting_is_where_the_agent_listens() {
    let directory = tempfile::tempdir().unwrap();
    let config_path = directory.path().join("bot-config.json");
    // A port free now; the agent binds it moments later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = test_config("http://127.0.0.1:9");
    config["channels"][0]["settings"] = json!({"port": port.to_string()});
    write_config(&config_path, &config);
    let mut child = bin()
        .args(["run", "--metrics-listen", "127.0.0.1:0"])
        .arg("--config")
        .arg(&config_path)
        .arg("--workspace")
        .arg(directory.path().join("workspace"))
        .env_clear()
        .env("SAINT_MODEL_API_KEY", "sk-model-key")
        .env(
            "SAINT_SANDBOX_STATE",
            directory.path().join("sandbox-state"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        line.contains(&format!("http=127.0.0.1:{port}")),
        "listening line {line:?}, expected port {port}"
    );
}

/// Whether process `pid` has `file` mapped (`/proc/<pid>/maps`).
fn maps_file(pid: u32, file: &std::path::Path) -> bool {
    let file = file.canonicalize().expect("canonical model path");
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .expect("/proc/<pid>/maps")
        .lines()
        .any(|line| line.ends_with(file.to_string_lossy().as_ref()))
}

#[test]
fn a_bot_without_memory_never_loads_the_model_and_one_with_memory_maps_it() {
    let model_dir = saint_memory::default_model_dir();
    let weights = model_dir.join("model.safetensors");
    assert!(
        weights.is_file(),
        "{} is needed for this test: run agent-pod/memory/fetch-model.sh",
        weights.display()
    );
    for enabled in [false, true] {
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config("http://127.0.0.1:9");
        // Both configs name the real model; only `enabled` differs.
        config["memory"] = json!({
            "enabled": enabled,
            "embeddings": {"kind": "local", "modelDir": model_dir},
        });
        write_config(&config_path, &config);
        let agent = spawn_agent(&config_path, &workspace, &[]);
        // Memory starts (and loads its model) before the agent reports its addresses.
        assert_eq!(
            maps_file(agent.child.id(), &weights),
            enabled,
            "memory.enabled = {enabled}: the weights file mapped = {}",
            !enabled
        );
    }
}
