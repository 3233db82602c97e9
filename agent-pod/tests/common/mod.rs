//! Shared setup for the runtime tests: a workspace with persona files, a copy of the
//! example company config pointed at a scripted LLM, and the agent either in process
//! (`app()` + `oneshot`) or as the real `saint-agent` binary.

#![allow(dead_code)]

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::Arc,
    time::Duration,
};

use axum::{
    Router,
    body::{Body, to_bytes},
    http::{Request, StatusCode},
};
use saint_agent::{
    channel::http::{AppState, app, metrics_app},
    config_watch::ConfigStore,
    metering::Metering,
    runtime::{EnvLookup, ModelAccess, Runtime, RuntimeOptions},
    session::SessionStore,
};
use saint_llm::ClientOptions;
use saint_scripted::llm::ScriptedLlm;
use saint_tools::toolset::ToolSet;
use serde_json::{Value, json};
use tower::ServiceExt;

pub const TOKEN: &str = "test-channel-token";
pub const FIXTURE: &str = include_str!("../../config/tests/fixtures/acme-bot-config.json");

pub const ANA_WHATSAPP: &str = "+385991234567";
pub const ANA_EMAIL: &str = "ana@acme.example";
pub const IVAN_TELEGRAM: &str = "333333333";

/// The example company config, pointed at `base_url`, with web search configured so
/// `web_search` is a real tool of the catalog.
pub fn test_config(base_url: &str) -> Value {
    let mut config: Value = serde_json::from_str(FIXTURE).unwrap();
    config["model"]["baseUrl"] = json!(base_url);
    config["web"]["search"] =
        json!({"baseUrl": "http://127.0.0.1:9", "apiKeyEnv": "SAINT_BRAVE_API_KEY"});
    // Memory is switched off explicitly here (the fixture's model directory does not
    // exist in tests); the memory test switches it back on with the fetched model.
    config["memory"]["enabled"] = json!(false);
    config
}

pub fn environment() -> HashMap<String, String> {
    HashMap::from([
        (
            "SAINT_MODEL_API_KEY".to_string(),
            "sk-model-key".to_string(),
        ),
        ("SAINT_CHANNEL_API_TOKEN".to_string(), TOKEN.to_string()),
        ("SAINT_BRAVE_API_KEY".to_string(), "brave-key".to_string()),
    ])
}

pub fn seed_workspace(workspace: &Path) {
    for (file, text) in [
        ("SOUL.md", "You are Acme's helpful colleague."),
        ("IDENTITY.md", "Your name is Acme Assistant."),
        ("AGENTS.md", "Operating notes for the owner."),
        ("USER.md", "The people of Acme."),
        ("COMPANY.md", "Acme sells anvils."),
    ] {
        std::fs::write(workspace.join(file), text).unwrap();
    }
    std::fs::create_dir_all(workspace.join("memory/users/ana")).unwrap();
    std::fs::write(
        workspace.join("memory/users/ana/notes.md"),
        "Ana's private notes",
    )
    .unwrap();
}

/// Adds `identity` to the contact `slug`, and to its identity links when the config
/// has them: an identity the fixture company lacks.
pub fn add_identity(config: &mut Value, slug: &str, identity: &str) {
    let contact = config["contacts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|contact| contact["slug"] == slug)
        .unwrap();
    contact["identities"]
        .as_array_mut()
        .unwrap()
        .push(json!(identity));
    if let Some(links) = config["identityLinks"][slug].as_array_mut() {
        links.push(json!(identity));
    }
}

pub fn write_config(path: &Path, config: &Value) {
    // Write then rename, like a ConfigMap update: readers never see half a file.
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, serde_json::to_string_pretty(config).unwrap()).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

/// An agent running in this process behind `app()`.
pub struct InProcess {
    pub directory: tempfile::TempDir,
    pub workspace: PathBuf,
    pub config_path: PathBuf,
    pub llm: ScriptedLlm,
    pub runtime: Arc<Runtime>,
    pub router: Router,
    options: RuntimeOptions,
}

impl InProcess {
    pub async fn start() -> Self {
        Self::start_with(|_| {}, RuntimeOptions::default()).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut Value), mut options: RuntimeOptions) -> Self {
        let llm = ScriptedLlm::start().await.unwrap();
        let directory = tempfile::tempdir().unwrap();
        let workspace = directory.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        seed_workspace(&workspace);
        let config_path = directory.path().join("bot-config.json");
        let mut config = test_config(&llm.base_url());
        adjust(&mut config);
        write_config(&config_path, &config);

        options.client = ClientOptions {
            min_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            ..options.client
        };
        let (runtime, router) = Self::assemble(&workspace, &config_path, options.clone());
        Self {
            directory,
            workspace,
            config_path,
            llm,
            runtime,
            router,
            options,
        }
    }

    /// A new runtime over the same workspace, config and model, as after a restart:
    /// nothing is kept in memory from before.
    pub fn restart(&mut self) {
        (self.runtime, self.router) =
            Self::assemble(&self.workspace, &self.config_path, self.options.clone());
    }

    fn assemble(
        workspace: &Path,
        config_path: &Path,
        options: RuntimeOptions,
    ) -> (Arc<Runtime>, Router) {
        let variables = environment();
        let env: EnvLookup = Arc::new(move |name| variables.get(name).cloned());
        let config_store = Arc::new(ConfigStore::load(config_path).unwrap());
        let store =
            Arc::new(SessionStore::open(workspace.join("sessions/transcripts.sqlite3")).unwrap());
        let metering = Arc::new(Metering::open(workspace).unwrap());
        let model = ModelAccess::new(None, env.clone(), options.client.clone());
        let tools = ToolSet::builtin(workspace, store.clone(), env.clone());
        let runtime = Arc::new(Runtime::new(
            config_store,
            store,
            model,
            tools,
            metering,
            workspace.to_path_buf(),
            options,
        ));
        let router = app(AppState::new(runtime.clone(), env));
        (runtime, router)
    }

    pub fn rewrite_config(&self, adjust: impl FnOnce(&mut Value)) {
        let mut config = test_config(&self.llm.base_url());
        adjust(&mut config);
        write_config(&self.config_path, &config);
    }

    pub async fn request(&self, request: Request<Body>) -> (StatusCode, String) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 16 * 1024 * 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A request to the metrics listener's router: `/metrics`, and the `/readyz` that
    /// says why (neither is on the HTTP channel's port).
    pub async fn metrics_request(&self, request: Request<Body>) -> (StatusCode, String) {
        let variables = environment();
        let env: EnvLookup = Arc::new(move |name| variables.get(name).cloned());
        let router = metrics_app(AppState::new(self.runtime.clone(), env));
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let body = to_bytes(response.into_body(), 16 * 1024 * 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// Sends a message as `channel:peer`; returns the status and JSON body.
    pub async fn send(&self, channel: &str, peer: &str, text: &str) -> (StatusCode, Value) {
        let (status, body) = self
            .request(message_request(channel, peer, text, false, Some(TOKEN)))
            .await;
        (
            status,
            serde_json::from_str(&body).unwrap_or(json!({"raw": body})),
        )
    }

    /// Sends and expects a 200; returns the reply text.
    pub async fn reply(&self, channel: &str, peer: &str, text: &str) -> String {
        let (status, body) = self.send(channel, peer, text).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["reply"].as_str().unwrap().to_string()
    }

    /// The usage log's tool-call lines.
    pub fn usage_lines(&self) -> Vec<Value> {
        self.all_usage_lines()
            .into_iter()
            .filter(|line| line.get("tool").is_some())
            .collect()
    }

    /// The usage log's turn lines.
    pub fn turn_lines(&self) -> Vec<Value> {
        self.all_usage_lines()
            .into_iter()
            .filter(|line| line.get("turn").is_some())
            .collect()
    }

    fn all_usage_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(self.workspace.join("logs/usage.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

pub fn message_request(
    channel: &str,
    peer: &str,
    text: &str,
    stream: bool,
    token: Option<&str>,
) -> Request<Body> {
    let mut builder = Request::post("/v1/messages").header("content-type", "application/json");
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let body = json!({"channel": channel, "peer": peer, "text": text, "stream": stream});
    builder.body(Body::from(body.to_string())).unwrap()
}

/// The real binary, started with the test config.
pub struct AgentProcess {
    pub child: Child,
    pub http: String,
    pub metrics: String,
}

pub fn spawn_agent(
    config_path: &Path,
    workspace: &Path,
    extra_env: &[(&str, &str)],
) -> AgentProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_saint-agent"));
    command
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--config-poll-ms",
            "100",
        ])
        .arg("--config")
        .arg(config_path)
        .arg("--workspace")
        .arg(workspace)
        .env_clear()
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (name, value) in environment() {
        command.env(name, value);
    }
    // Sandbox state stays inside the test's directory (outside the workspace).
    let state = config_path.parent().unwrap().join("sandbox-state");
    command.env("SAINT_SANDBOX_STATE", &state);
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("failed to start saint-agent");
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addresses: HashMap<&str, &str> = line
        .trim()
        .split(' ')
        .filter_map(|part| part.split_once('='))
        .collect();
    let (Some(http), Some(metrics)) = (addresses.get("http"), addresses.get("metrics")) else {
        let _ = child.kill();
        panic!("saint-agent did not report its addresses: {line:?}");
    };
    AgentProcess {
        http: format!("http://{http}"),
        metrics: format!("http://{metrics}"),
        child,
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
