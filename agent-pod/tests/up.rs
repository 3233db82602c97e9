//! `saint-agent up`, as a newcomer runs it: the real binary, the embedded example company
//! (the operator's own render), its files under the data directory, the model found in
//! the environment or a local Ollama (or a clear line saying what to set), and the chat
//! page driven in Debian's headless Chromium.

use std::{
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use std::os::unix::process::CommandExt;

use fantoccini::{Client, ClientBuilder, Locator};
use saint_scripted::llm::{Gate, Reply, ScriptedLlm};
use serde_json::{Value, json};

/// A running `saint-agent up` and what it printed up to the page's address.
struct Up {
    child: Child,
    chat_url: String,
    base_url: String,
    token: String,
    /// `http://<address>` of the page's listener and of the metrics listener, as bound.
    http_url: String,
    metrics_url: String,
    printed: Vec<String>,
    /// Where its log goes.
    log: PathBuf,
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `up` in `directory` (its working directory, standing in for a fresh clone)
/// with only `environment` set: no inherited model keys, no cargo.
fn start_up(directory: &Path, environment: &[(&str, String)]) -> Up {
    start_up_with(directory, environment, &["--listen", "127.0.0.1:0"])
}

/// [`start_up`] with more arguments (`--listen` among them).
fn start_up_with(directory: &Path, environment: &[(&str, String)], arguments: &[&str]) -> Up {
    launch(
        Path::new(env!("CARGO_BIN_EXE_saint-agent")),
        directory,
        environment,
        arguments,
    )
}

/// [`start_up_with`], running `binary`.
fn launch(
    binary: &Path,
    directory: &Path,
    environment: &[(&str, String)],
    arguments: &[&str],
) -> Up {
    let home = directory.join("home");
    let clone = directory.join("clone");
    std::fs::create_dir_all(&clone).unwrap();
    let mut command = Command::new(binary);
    command
        .args([
            "up",
            "--metrics-listen",
            "127.0.0.1:0",
            "--no-build",
            "--no-memory",
        ])
        .args(arguments)
        .current_dir(&clone)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &home)
        // Short, so the sandbox's sockets fit whatever the test directory's length.
        .env("SAINT_SANDBOX_STATE", directory.join("s"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(directory.join("up.log")).unwrap());
    for (name, value) in environment {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("failed to start saint-agent up");
    let stdout = child.stdout.take().unwrap();
    // Read lines on a thread so a bot that never prints fails the test with what it said.
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let mut printed = Vec::new();
    let mut chat_url = None;
    // The address, then its notices, then the line that ends the start-up report.
    while let Ok(line) = received.recv_timeout(Duration::from_secs(60)) {
        if let Some(url) = line
            .strip_prefix("Chat with ")
            .and_then(|rest| rest.split_once(" at "))
            .map(|(_, url)| url.to_string())
        {
            chat_url = Some(url);
        }
        let done = line.starts_with("Press Ctrl-C");
        printed.push(line);
        if done {
            break;
        }
    }
    let Some(chat_url) = chat_url else {
        let _ = child.kill();
        panic!("saint-agent up never printed the page's address; it printed {printed:#?}");
    };
    let (base_url, token) = chat_url.split_once("/chat#token=").unwrap();
    let listening = |name: &str| {
        printed
            .iter()
            .filter(|line| line.starts_with("saint-agent listening "))
            .flat_map(|line| line.split(' '))
            .find_map(|part| part.strip_prefix(&format!("{name}=")))
            .map(|address| format!("http://{address}"))
            .unwrap_or_else(|| panic!("no {name}= in {printed:#?}"))
    };
    Up {
        base_url: base_url.to_string(),
        token: token.to_string(),
        http_url: listening("http"),
        metrics_url: listening("metrics"),
        chat_url,
        child,
        printed,
        log: directory.join("up.log"),
    }
}

async fn post_message(up: &Up, channel: &str, peer: &str, text: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/messages", up.base_url))
        .bearer_auth(&up.token)
        .json(&json!({"channel": channel, "peer": peer, "text": text}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn status(up: &Up) -> Value {
    reqwest::Client::new()
        .get(format!("{}/v1/status", up.base_url))
        .bearer_auth(&up.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn files_under(directory: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_model_the_bot_starts_and_the_log_the_api_and_the_page_say_what_to_set() {
    let directory = tempfile::tempdir().unwrap();
    // Nothing answers here: no Ollama either.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let up = start_up(directory.path(), &[("SAINT_OLLAMA_URL", nowhere)]);
    let printed = up.printed.join("\n");
    assert!(
        printed.contains("no model endpoint: set SAINT_MODEL_API_KEY")
            && printed.contains("SAINT_MODEL_BASE_URL")
            && printed.contains("Ollama"),
        "{printed}"
    );

    // A message is refused with the variable to set, never a bare 401 or 502.
    let (code, body) = post_message(&up, "http", "someone", "hello?").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("SAINT_MODEL_API_KEY"),
        "{body}"
    );
    let status = status(&up).await;
    let notices = status["notices"].to_string();
    assert!(notices.contains("no model endpoint"), "{status}");
    // Whether exec runs is said once, from what the sandbox set-up did.
    let exec = exec_lines(&up.printed);
    assert_eq!(exec.len(), 1, "{printed}");
    assert!(notices.contains(&exec[0]), "{status}");
    assert_eq!(status["modelReady"], false, "{status}");
    assert_eq!(status["bot"], "acme-assistant");

    // Everything lives under the data directory; the working directory (a clone) stays
    // empty, so no bot file, registry or workspace can be committed by accident.
    assert_eq!(
        files_under(&directory.path().join("clone")),
        Vec::<PathBuf>::new()
    );
    let bot = directory
        .path()
        .join("home/.local/share/saint/acme-assistant");
    for file in ["bot-config.json", "chat-token", "persona/SOUL.md"] {
        assert!(
            bot.join(file).is_file(),
            "{file} missing under {}",
            bot.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(bot.join("chat-token")).unwrap(),
        up.token
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_local_ollama_is_found_and_its_model_serves_every_role() {
    let ollama = ScriptedLlm::start().await.unwrap();
    ollama.set_models(&["llama3.2:latest", "qwen2.5:7b"]);
    ollama.set_fallback(Reply::text("hello from ollama"));
    let directory = tempfile::tempdir().unwrap();
    let up = start_up(directory.path(), &[("SAINT_OLLAMA_URL", ollama.base_url())]);
    let printed = up.printed.join("\n");
    assert!(
        printed.contains("model: llama3.2:latest from the local Ollama"),
        "{printed}"
    );
    // Ana is the owner; an employee's role names its own (Anthropic) model, which a
    // local Ollama does not serve, so every role uses the discovered one.
    for (channel, peer) in [("email", "ana@company.hr"), ("email", "ivan@company.hr")] {
        let (code, body) = post_message(&up, channel, peer, "hi").await;
        assert_eq!(code, 200, "{body}");
        assert_eq!(body["reply"], "hello from ollama");
    }
    let requests = ollama.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.model(), "llama3.2:latest");
        assert_eq!(request.wire, saint_scripted::llm::Wire::Openai);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_environment_names_the_model_and_a_bad_provider_is_refused_by_name() {
    let directory = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["up", "--listen", "127.0.0.1:0", "--no-build", "--no-memory"])
        .env_clear()
        .env("HOME", directory.path())
        .env("SAINT_MODEL_BASE_URL", "http://127.0.0.1:9")
        .env("SAINT_MODEL_PROVIDER", "gpt")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("SAINT_MODEL_PROVIDER=\"gpt\" is not a provider")
            && stderr.contains("anthropic")
            && stderr.contains("openai"),
        "{stderr}"
    );
}

/// The lines saying whether exec runs.
fn exec_lines(printed: &[String]) -> Vec<String> {
    printed
        .iter()
        .map(|line| line.trim())
        .filter(|line| line.starts_with("exec: "))
        .map(str::to_string)
        .collect()
}

/// `up` said exec was disabled whenever Porter was not beside the binary, while exec
/// ran anyway: the sandbox does not need Porter. Here neither companion is beside the
/// binary and the runner is named by SAINT_SANDBOX_RUNNER.
#[tokio::test(flavor = "multi_thread")]
async fn without_porter_up_says_exec_runs_when_it_does() {
    let original = Path::new(env!("CARGO_BIN_EXE_saint-agent"));
    let runner = original.with_file_name("saint-sandbox-runner");
    assert!(
        runner.is_file() && Path::new("/usr/bin/bwrap").is_file(),
        "this test needs bubblewrap and {}: `cargo build -p saint-sandbox-runner`",
        runner.display()
    );
    let alone = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let binary = alone.path().join("saint-agent");
    if std::fs::hard_link(original, &binary).is_err() {
        std::fs::copy(original, &binary).unwrap();
    }
    let directory = tempfile::tempdir().unwrap();
    let up = launch(
        &binary,
        directory.path(),
        &[
            ("SAINT_SANDBOX_RUNNER", runner.display().to_string()),
            ("SAINT_OLLAMA_URL", "http://127.0.0.1:9".to_string()),
        ],
        &["--listen", "127.0.0.1:0"],
    );
    let printed = up.printed.join("\n");
    assert!(
        printed.contains("porter is not next to saint-agent"),
        "{printed}"
    );
    assert_eq!(
        exec_lines(&up.printed),
        ["exec: on, commands run in the sandbox"],
        "{printed}"
    );
    assert!(!printed.contains("exec is disabled"), "{printed}");
}

async fn get_with_host(url: &str, host: &str, token: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .header("host", host)
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// Nothing private without the token: `/metrics` (every person's slug, role, spend and
/// tool calls) is served on the metrics listener only, and a request naming a host this
/// machine does not serve — what a page on another site sends after pointing its own
/// name here (DNS rebinding) — is refused on every route of both listeners.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_live_only_on_the_metrics_listener_and_other_host_names_are_refused() {
    let model = ScriptedLlm::start().await.unwrap();
    model.set_fallback(Reply::text("hello Ana"));
    let directory = tempfile::tempdir().unwrap();
    let up = start_up_with(
        directory.path(),
        &[
            ("SAINT_MODEL_BASE_URL", model.base_url()),
            ("SAINT_MODEL_PROVIDER", "anthropic".to_string()),
            ("SAINT_MODEL_API_KEY", "test-key".to_string()),
        ],
        &[
            "--listen",
            "127.0.0.1:0",
            "--public-host",
            "chat.acme.example",
        ],
    );
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{}/v1/messages", up.http_url))
        .bearer_auth(&up.token)
        .json(&json!({"channel": "email", "peer": "ana@company.hr", "text": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    let on_page_port = client
        .get(format!("{}/metrics", up.http_url))
        .send()
        .await
        .unwrap();
    assert_eq!(on_page_port.status(), 404);
    let metrics = client
        .get(format!("{}/metrics", up.metrics_url))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let metrics = metrics.text().await.unwrap();
    assert!(
        metrics.contains(r#"role="owner",person="ana""#),
        "{metrics}"
    );

    let port = up.http_url.rsplit(':').next().unwrap().to_string();
    let foreign = [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
    ];
    let routes = [
        (reqwest::Method::GET, "/chat"),
        (reqwest::Method::GET, "/chat/app.js"),
        (reqwest::Method::GET, "/healthz"),
        (reqwest::Method::GET, "/readyz"),
        (reqwest::Method::GET, "/metrics"),
        (reqwest::Method::GET, "/v1/people"),
        (reqwest::Method::GET, "/v1/status"),
        (reqwest::Method::POST, "/v1/messages"),
        (reqwest::Method::GET, "/channels/whatsapp/webhook"),
        (reqwest::Method::POST, "/channels/whatsapp/webhook"),
        (reqwest::Method::GET, "/no-such-route"),
    ];
    for host in &foreign {
        for (method, path) in &routes {
            let response = client
                .request(method.clone(), format!("{}{path}", up.http_url))
                .header("host", host)
                .bearer_auth(&up.token)
                .json(&json!({"channel": "email", "peer": "ana@company.hr", "text": "hi"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 421, "{method} {path} as {host}");
            let body = response.text().await.unwrap();
            assert!(body.contains("--public-host"), "{body}");
        }
        for path in ["/metrics", "/readyz"] {
            let (code, _) = get_with_host(&format!("{}{path}", up.metrics_url), host, "").await;
            assert_eq!(code, 421, "metrics listener {path} as {host}");
        }
    }
    // The one answer that went through is the one asked for before.
    assert_eq!(model.requests().len(), 1);

    // This machine's own names, and the one passed with --public-host, are answered.
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "chat.acme.example".to_string(),
    ] {
        for path in ["/chat", "/v1/status", "/readyz"] {
            let (code, body) =
                get_with_host(&format!("{}{path}", up.http_url), &host, &up.token).await;
            assert_eq!(code, 200, "{path} as {host}: {body}");
        }
    }
    let (code, _) = get_with_host(&format!("{}/metrics", up.metrics_url), "localhost", "").await;
    assert_eq!(code, 200);
}

async fn get_json(url: &str, token: &str) -> Value {
    reqwest::Client::new()
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn post_as(url: &str, token: &str, channel: &str, peer: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .bearer_auth(token)
        .json(&json!({"channel": channel, "peer": peer, "text": "hi"}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// `up` listening past loopback says so in its log and on the page, and the page has no
/// person picker: each person gets a link of their own that speaks only as them, and the
/// page's main token offers no one to speak as.
#[tokio::test(flavor = "multi_thread")]
async fn past_loopback_up_warns_and_each_person_speaks_only_through_their_own_link() {
    let model = ScriptedLlm::start().await.unwrap();
    model.set_fallback(Reply::text("hello"));
    let directory = tempfile::tempdir().unwrap();
    let up = start_up_with(
        directory.path(),
        &[
            ("SAINT_MODEL_BASE_URL", model.base_url()),
            ("SAINT_MODEL_PROVIDER", "anthropic".to_string()),
            ("SAINT_MODEL_API_KEY", "test-key".to_string()),
        ],
        &["--listen", "0.0.0.0:0"],
    );
    let printed = up.printed.join("\n");
    assert!(
        printed.contains("warning: listening on 0.0.0.0:")
            && printed.contains("The page has no person picker here"),
        "{printed}"
    );
    let log = std::fs::read_to_string(&up.log).unwrap();
    assert!(
        log.lines()
            .any(|line| line.contains("WARN") && line.contains("listening on 0.0.0.0:")),
        "{log}"
    );
    // Every address of the machine is listened on; the links open on this one.
    assert!(up.base_url.starts_with("http://127.0.0.1:"), "{printed}");
    let link = |person: &str| {
        up.printed
            .iter()
            .find(|line| line.trim_start().starts_with(&format!("{person} (")))
            .and_then(|line| line.split_once("/chat#token="))
            .map(|(_, token)| token.to_string())
            .unwrap_or_else(|| panic!("no link for {person}: {printed}"))
    };
    let (ana, ivan) = (link("Ana"), link("Ivan"));
    assert!(
        ana != up.token && ivan != up.token && ana != ivan,
        "{printed}"
    );

    // The page's main token: the warning, no picker, no one to speak as.
    let main = get_json(&format!("{}/v1/status", up.base_url), &up.token).await;
    assert_eq!(main["picker"], false, "{main}");
    assert!(
        main["warnings"]
            .to_string()
            .contains("listening on 0.0.0.0:"),
        "{main}"
    );
    assert_eq!(
        get_json(&format!("{}/v1/people", up.base_url), &up.token).await,
        json!([])
    );

    // Ana's own link: Ana alone, and nothing of how the bot is run.
    let people = get_json(&format!("{}/v1/people", up.base_url), &ana).await;
    assert_eq!(people.as_array().unwrap().len(), 1, "{people}");
    assert_eq!(
        (&people[0]["name"], &people[0]["role"]),
        (&json!("Ana"), &json!("owner"))
    );
    let hers = get_json(&format!("{}/v1/status", up.base_url), &ana).await;
    assert_eq!(
        (&hers["notices"], &hers["warnings"], &hers["picker"]),
        (&json!([]), &json!([]), &json!(false)),
        "{hers}"
    );
    // It speaks as her and no one else; Ivan's speaks as him.
    for (channel, peer) in [("email", "ivan@company.hr"), ("http", "chat-page-stranger")] {
        let (code, body) = post_as(&up.base_url, &ana, channel, peer).await;
        assert_eq!(code, 403, "{body}");
        assert_eq!(body["error"], "this link speaks only as Ana");
    }
    assert_eq!(model.requests().len(), 0);
    assert_eq!(
        post_as(&up.base_url, &ana, "email", "ana@company.hr")
            .await
            .0,
        200
    );
    assert_eq!(
        post_as(&up.base_url, &ivan, "email", "ivan@company.hr")
            .await
            .0,
        200
    );

    // Her link reads back her own conversation, and no one else's.
    let history = |token: &str, peer: &str| {
        reqwest::Client::new()
            .get(format!(
                "{}/v1/history?channel=email&peer={peer}",
                up.base_url
            ))
            .bearer_auth(token.to_string())
            .send()
    };
    let hers = history(&ana, "ana@company.hr").await.unwrap();
    assert_eq!(hers.status(), 200);
    let hers: Value = hers.json().await.unwrap();
    let said: Vec<(&str, &str)> = hers["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["from"].as_str().unwrap(),
                item["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(said, [("person", "hi"), ("bot", "hello")], "{hers}");
    // Paged, newest first: one message, then the one before it.
    let page = |before: Option<i64>| {
        let before = before.map(|id| format!("&before={id}")).unwrap_or_default();
        reqwest::Client::new()
            .get(format!(
                "{}/v1/history?channel=email&peer=ana@company.hr&limit=1{before}",
                up.base_url
            ))
            .bearer_auth(ana.clone())
            .send()
    };
    let newest: Value = page(None).await.unwrap().json().await.unwrap();
    assert_eq!(
        (&newest["items"][0]["text"], &newest["more"]),
        (&json!("hello"), &json!(true)),
        "{newest}"
    );
    let older: Value = page(newest["oldest"].as_i64())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        (&older["items"][0]["text"], &older["more"]),
        (&json!("hi"), &json!(false)),
        "{older}"
    );
    let his = history(&ana, "ivan@company.hr").await.unwrap();
    assert_eq!(his.status(), 403);

    // Past loopback an IP address names this machine; a name nobody passed does not.
    let health = format!("{}/healthz", up.base_url);
    assert_eq!(get_with_host(&health, "192.0.2.7:8080", "").await.0, 200);
    assert_eq!(get_with_host(&health, "evil.example", "").await.0, 421);

    // In a browser: Ana's page speaks as her, with no control to pick anyone else; the
    // main link's page says to open one's own link.
    let driver = start_driver().await;
    let page = browser(&driver, &directory.path().join("chromium")).await;
    page.goto(&format!("{}/chat#token={ana}", up.base_url))
        .await
        .unwrap();
    let talking = page
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::XPath("//span[@id='talking-as' and not(@hidden)]"))
        .await
        .expect("the page never said whom it speaks as");
    assert_eq!(talking.text().await.unwrap(), "Talking as Ana (owner)");
    assert!(
        page.find_all(Locator::Css("#person"))
            .await
            .unwrap()
            .is_empty()
    );
    // Another document: a new fragment alone would not load the page again.
    page.goto("about:blank").await.unwrap();
    page.goto(&format!("{}/chat#token={}", up.base_url, up.token))
        .await
        .unwrap();
    // One line says it; the warning is among the details behind it.
    page.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::XPath(
            "//span[@id='notice-summary' and contains(., 'open your own link')]",
        ))
        .await
        .expect("the main link's page never said to open one's own link");
    page.find(Locator::Css("#notice-more"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let details = text_of(&page, "#notice-details").await;
    assert!(
        details.contains("warning: listening on 0.0.0.0:"),
        "{details}"
    );
    assert!(
        page.find_all(Locator::Css("#person"))
            .await
            .unwrap()
            .is_empty()
    );
    page.close().await.unwrap();
}

// ---- the chat page in a real browser ----

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // chromedriver leads its own process group, which the Chromium it started
        // shares: kill them all, so a failed test leaves no browser behind.
        if let Some(group) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

async fn start_driver() -> Driver {
    for binary in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(binary).is_file(),
            "{binary} is missing: install Debian's chromium and chromium-driver \
             (./test.sh installs them)"
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(CHROMEDRIVER)
        .process_group(0)
        .arg(format!("--port={port}"))
        .arg("--allowed-ips=127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("failed to start chromedriver");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // Ready when /status says so; give up after 30 s with the reason.
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(response) = http.get(format!("{}/status", driver.url)).send().await
            && let Ok(body) = response.json::<Value>().await
            && body["value"]["ready"] == true
        {
            return driver;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not become ready on {}", driver.url);
}

async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_string(),
        json!({
            "binary": CHROMIUM,
            "args": [
                "--headless=new",
                // Root in a VM: Chromium's own sandbox needs user namespaces it may not get.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1200,800",
                format!("--user-data-dir={}", profile.display()),
            ]
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("failed to open a Chromium session")
}

/// Sends `text` from the page as the person at `index` of the select, and waits for the
/// reply to finish; returns the reply's text.
async fn send_as(page: &Client, index: usize, text: &str) -> String {
    page.find(Locator::Css("#person"))
        .await
        .unwrap()
        .select_by_value(&index.to_string())
        .await
        .unwrap();
    let before = page
        .find_all(Locator::Css(".msg.bot[data-state=done], .msg.error"))
        .await
        .unwrap()
        .len();
    page.find(Locator::Css("#text"))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
    page.find(Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // Wait on the page's own state, not on time.
    let finished = page
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::XPath(&format!(
            "(//div[contains(@class,'msg') and (@data-state='done' or @data-state='error')])[{}]",
            before + 1
        )))
        .await
        .expect("the reply never finished on the page");
    let state = finished
        .attr("data-state")
        .await
        .unwrap()
        .unwrap_or_default();
    let text = finished
        .find(Locator::Css(".text"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(state, "done", "the page showed an error: {text}");
    text
}

async fn text_of(page: &Client, selector: &str) -> String {
    page.find(Locator::Css(selector))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn visible_messages(page: &Client) -> Vec<String> {
    let mut texts = Vec::new();
    for message in page.find_all(Locator::Css("#log .msg")).await.unwrap() {
        texts.push(message.text().await.unwrap());
    }
    texts
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_page_shows_two_people_their_own_conversation_role_and_tools() {
    let model = ScriptedLlm::start().await.unwrap();
    // Ana's turn: the model writes a note (the owner may), then answers; the
    // stranger's turn: text only.
    model.push(Reply::tool_call(
        "write",
        json!({"path": "notes/from-the-page.md", "content": "Ana was here"}),
    ));
    model.push(Reply::text("Hello Ana. I wrote that down."));
    model.push(Reply::text("Hello, stranger."));
    // A reply carrying markup (a prompt-injected model, say) is shown as text.
    let markup =
        "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>";
    model.push(Reply::text(markup));
    let directory = tempfile::tempdir().unwrap();
    let up = start_up(
        directory.path(),
        &[
            ("SAINT_MODEL_BASE_URL", model.base_url()),
            ("SAINT_MODEL_PROVIDER", "anthropic".to_string()),
            ("SAINT_MODEL_API_KEY", "test-key".to_string()),
        ],
    );
    let driver = start_driver().await;
    let page = browser(&driver, &directory.path().join("chromium")).await;
    page.goto(&up.chat_url).await.unwrap();
    page.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("#person option"))
        .await
        .expect("the page never listed anyone");

    // The token left the address bar as soon as the page read it.
    let address = page.current_url().await.unwrap();
    assert!(!address.as_str().contains(&up.token), "{address}");
    assert_eq!(text_of(&page, "#bot").await, "acme-assistant");

    let mut options = Vec::new();
    for option in page.find_all(Locator::Css("#person option")).await.unwrap() {
        options.push(option.text().await.unwrap());
    }
    assert_eq!(
        options,
        [
            "Ana (owner)",
            "Ivan (employee)",
            "Marko (manager)",
            "A stranger (external)"
        ]
    );

    // Ana, the owner.
    let reply = send_as(&page, 0, "Who are you?").await;
    assert_eq!(reply, "Hello Ana. I wrote that down.");
    assert_eq!(text_of(&page, "#applied-person").await, "Ana");
    assert_eq!(text_of(&page, "#applied-role").await, "owner");
    let owner_tools = text_of(&page, "#applied-tools").await;
    for tool in ["read", "write", "edit", "web_fetch"] {
        assert!(owner_tools.contains(tool), "owner tools: {owner_tools}");
    }
    assert_eq!(text_of(&page, "#log .tools li").await, "write → ok");
    assert_eq!(
        std::fs::read_to_string(
            directory
                .path()
                .join("home/.local/share/saint/acme-assistant/workspace/notes/from-the-page.md")
        )
        .unwrap(),
        "Ana was here"
    );
    if let Ok(directory) = std::env::var("SAINT_SCREENSHOT_DIR") {
        let png = page.screenshot().await.unwrap();
        std::fs::write(Path::new(&directory).join("chat-page.png"), png).unwrap();
    }

    // A stranger sees none of Ana's conversation and gets the external role.
    page.find(Locator::Css("#person"))
        .await
        .unwrap()
        .select_by_value("3")
        .await
        .unwrap();
    assert_eq!(visible_messages(&page).await, Vec::<String>::new());
    let reply = send_as(&page, 3, "Hi, who are you?").await;
    assert_eq!(reply, "Hello, stranger.");
    assert_eq!(
        text_of(&page, "#applied-person").await,
        "a stranger (not a contact)"
    );
    assert_eq!(text_of(&page, "#applied-role").await, "external");
    assert_eq!(
        text_of(&page, "#applied-tools").await,
        "web_search, web_fetch"
    );
    let seen = visible_messages(&page).await.join("\n");
    assert!(!seen.contains("Ana"), "{seen}");
    assert_eq!(send_as(&page, 3, "Show me something").await, markup);
    assert!(
        page.find_all(Locator::Css("#log img, #log script"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(page.title().await.unwrap(), "acme-assistant — Saint");

    // Back to Ana: her conversation is still there.
    page.find(Locator::Css("#person"))
        .await
        .unwrap()
        .select_by_value("0")
        .await
        .unwrap();
    let seen = visible_messages(&page).await.join("\n");
    assert!(
        seen.contains("Who are you?") && seen.contains("Hello Ana") && !seen.contains("stranger"),
        "{seen}"
    );
    page.close().await.unwrap();

    // What the model was given: the owner's turn carried the persona and the owner's
    // tools; the stranger's carried only the external role's.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    let soul = std::fs::read_to_string(
        directory
            .path()
            .join("home/.local/share/saint/acme-assistant/persona/SOUL.md"),
    )
    .unwrap();
    let first_line = soul.lines().find(|line| !line.trim().is_empty()).unwrap();
    assert!(requests[0].system().contains(first_line.trim()));
    assert!(requests[0].tool_names().contains(&"write".to_string()));
    assert_eq!(requests[2].tool_names(), ["web_fetch", "web_search"]);
    assert_eq!(requests[2].user_texts(), ["Hi, who are you?"]);
}

/// Where the browser tests leave a screenshot of each state: `SAINT_SCREENSHOT_DIR`, or
/// `chat-page-screenshots` in the target directory's scratch space.
fn screenshot_directory() -> PathBuf {
    let directory = std::env::var_os("SAINT_SCREENSHOT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page-screenshots"));
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

async fn screenshot(page: &Client, name: &str) {
    let path = screenshot_directory().join(format!("{name}.png"));
    std::fs::write(&path, page.screenshot().await.unwrap()).unwrap();
    println!("screenshot of {name}: {}", path.display());
}

/// Waits until the JavaScript expression `condition` holds on the page; the error says
/// which condition never did.
async fn wait_until(page: &Client, condition: &str, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let script = format!("return Boolean({condition});");
    loop {
        if page.execute(&script, Vec::new()).await.unwrap() == Value::Bool(true) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("not within {timeout:?}: {condition}"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the scripted model has received `count` requests.
async fn wait_for_requests(model: &ScriptedLlm, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.request_count() < count {
        assert!(
            Instant::now() < deadline,
            "the model never got request {count}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn evaluate(page: &Client, script: &str) -> Value {
    page.execute(script, Vec::new()).await.unwrap()
}

/// `up` answering through `model_url` (Anthropic's wire format), and its page open in
/// Chromium with the person picker listed.
async fn bot_with_page(directory: &Path, model_url: String) -> (Up, Driver, Client) {
    let up = start_up(
        directory,
        &[
            ("SAINT_MODEL_BASE_URL", model_url),
            ("SAINT_MODEL_PROVIDER", "anthropic".to_string()),
            ("SAINT_MODEL_API_KEY", "test-key".to_string()),
        ],
    );
    let driver = start_driver().await;
    let page = browser(&driver, &directory.join("chromium")).await;
    page.goto(&up.chat_url).await.unwrap();
    page.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("#person option"))
        .await
        .expect("the page never listed anyone");
    (up, driver, page)
}

/// Types `text` and presses Send, without waiting for the reply.
async fn type_and_send(page: &Client, text: &str) {
    page.find(Locator::Css("#text"))
        .await
        .unwrap()
        .send_keys(text)
        .await
        .unwrap();
    page.find(Locator::Css("#send"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

const LAST_BOT: &str = "[...document.querySelectorAll('#log .msg.bot, #log .msg.error')].pop()";

const MARKDOWN_REPLY: &str = r#"Here is **the plan** for _this week_:

| Day | Task |
| --- | ---: |
| Monday | Review `budget.xlsx` |
| Tuesday | Call [the bank](https://bank.example/contact) |

- Draft the report
- Send it to [Ivan](javascript:document.title='pwned')
  - check the numbers first

1. first
2. second

```sh
echo "<b>not bold</b>"
```

<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">"#;

/// The reply as the page built it: what a reader sees, element by element.
const RENDERED: &str = r#"
const text = [...document.querySelectorAll('#log .msg.bot .text')].pop();
return {
  strong: [...text.querySelectorAll('strong')].map((node) => node.textContent),
  em: [...text.querySelectorAll('em')].map((node) => node.textContent),
  headers: [...text.querySelectorAll('table th')].map((node) => node.textContent),
  cells: [...text.querySelectorAll('table td')].map((node) => node.textContent),
  bullets: [...text.querySelectorAll(':scope > ul > li')].map((node) => node.firstChild.textContent),
  nested: [...text.querySelectorAll('ul ul > li')].map((node) => node.textContent),
  numbered: [...text.querySelectorAll('ol > li')].map((node) => node.textContent),
  code: [...text.querySelectorAll('.code-block code')].map((node) => node.textContent),
  copy: text.querySelectorAll('.code-block button.copy').length,
  links: [...text.querySelectorAll('a')].map((node) => [node.textContent, node.href, node.rel, node.target]),
  markup: document.querySelectorAll('#log script, #log img, #log b').length,
  shown: text.textContent.includes(`<script>document.title='pwned'</script><img src=x onerror="document.title='pwned'">`),
};
"#;

/// Markdown renders (a table, lists, a code block with a copy button), markup in a
/// reply is shown as text and never runs, the indicator shows while the model works,
/// tool calls open to their arguments and result, the conversation comes back after a
/// reload, and the page fits a phone's width.
#[tokio::test(flavor = "multi_thread")]
async fn replies_render_as_markdown_after_an_indicator_and_come_back_after_a_reload() {
    let model = ScriptedLlm::start().await.unwrap();
    let gate = Gate::new();
    model.push(
        Reply::tool_call(
            "write",
            json!({"path": "notes/plan.md", "content": "the plan"}),
        )
        .held_until(&gate),
    );
    model.push(Reply::text(MARKDOWN_REPLY));
    let directory = tempfile::tempdir().unwrap();
    let (_up, _driver, page) = bot_with_page(directory.path(), model.base_url()).await;

    type_and_send(&page, "Plan the week").await;
    // The model has the request and holds its answer: the page says the bot is on it.
    wait_for_requests(&model, 1).await;
    wait_until(
        &page,
        "document.querySelector('.msg.bot[data-state=pending] .typing:not([hidden])')?.offsetHeight > 0",
        Duration::from_secs(10),
    )
    .await
    .expect("no indicator while the model works");
    assert_eq!(text_of(&page, ".msg.bot .typing").await, "Thinking");
    screenshot(&page, "1-thinking").await;
    gate.open();
    wait_until(
        &page,
        &format!("{LAST_BOT}.dataset.state === 'done'"),
        Duration::from_secs(30),
    )
    .await
    .expect("the reply never finished");
    assert!(
        page.find_all(Locator::Css(".typing:not([hidden])"))
            .await
            .unwrap()
            .is_empty(),
        "the indicator stays after the answer"
    );

    let rendered = evaluate(&page, RENDERED).await;
    assert_eq!(
        rendered,
        json!({
            "strong": ["the plan"],
            "em": ["this week"],
            "headers": ["Day", "Task"],
            "cells": ["Monday", "Review budget.xlsx", "Tuesday", "Call the bank"],
            "bullets": ["Draft the report", "Send it to [Ivan](javascript:document.title='pwned')"],
            "nested": ["check the numbers first"],
            "numbered": ["first", "second"],
            "code": ["echo \"<b>not bold</b>\""],
            "copy": 1,
            "links": [["the bank", "https://bank.example/contact", "noopener noreferrer", "_blank"]],
            "markup": 0,
            "shown": true,
        })
    );
    assert_eq!(page.title().await.unwrap(), "acme-assistant — Saint");
    // Times on both sides.
    assert_eq!(
        evaluate(
            &page,
            "return document.querySelectorAll('#log .msg .meta time').length"
        )
        .await,
        json!(2)
    );

    // The tool call opens to its arguments and what it returned.
    page.find(Locator::Css("#log .tools summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(&page, "#log .tools summary").await, "write → ok");
    let arguments = text_of(&page, "#log .tools .arguments").await;
    assert!(
        arguments.contains("\"path\": \"notes/plan.md\""),
        "{arguments}"
    );
    assert!(
        !text_of(&page, "#log .tools .preview").await.is_empty(),
        "no result preview"
    );
    screenshot(&page, "2-markdown-and-tool").await;

    // A reload: the conversation comes back from the server, rendered the same way.
    page.refresh().await.unwrap();
    wait_until(
        &page,
        "[...document.querySelectorAll('.history .msg.user')].some((node) => node.textContent.includes('Plan the week')) \
         && document.querySelectorAll('.history .msg.bot table td').length === 4 \
         && document.querySelectorAll('.history .msg.bot .tools li').length === 1",
        Duration::from_secs(30),
    )
    .await
    .expect("the conversation did not come back after a reload");
    assert_eq!(
        evaluate(
            &page,
            "return document.querySelectorAll('#log script, #log img').length"
        )
        .await,
        json!(0)
    );
    screenshot(&page, "3-history-after-reload").await;

    // A phone: nothing wider than the screen.
    page.set_window_size(375, 812).await.unwrap();
    wait_until(&page, "innerWidth <= 390", Duration::from_secs(10))
        .await
        .expect("the window did not shrink to a phone's width");
    let widths = evaluate(
        &page,
        "return [document.documentElement.scrollWidth, innerWidth]",
    )
    .await;
    assert!(
        widths[0].as_u64().unwrap() <= widths[1].as_u64().unwrap(),
        "horizontal scroll at phone width: {widths}"
    );
    screenshot(&page, "4-phone").await;
    page.close().await.unwrap();
}

/// Stop cancels the turn on the server: the model call is dropped (the scripted model
/// sees its request closed), the page says it stopped, and the next message is answered.
#[tokio::test(flavor = "multi_thread")]
async fn stop_cancels_a_slow_turn_and_the_model_sees_its_request_closed() {
    let model = ScriptedLlm::start().await.unwrap();
    // Never released: only a stop ends this turn.
    let gate = Gate::new();
    model.push(Reply::text("too late").held_until(&gate));
    model.push(Reply::text("Back again."));
    let directory = tempfile::tempdir().unwrap();
    let (_up, _driver, page) = bot_with_page(directory.path(), model.base_url()).await;

    type_and_send(&page, "Write me a novel").await;
    wait_for_requests(&model, 1).await;
    let stop = page
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath("//button[@id='stop' and not(@hidden)]"))
        .await
        .expect("no stop button while the turn runs");
    stop.click().await.unwrap();
    assert!(
        model.wait_closed(1, Duration::from_secs(10)).await,
        "the model's request stayed open after stop"
    );
    wait_until(
        &page,
        &format!("{LAST_BOT}.dataset.state === 'stopped'"),
        Duration::from_secs(10),
    )
    .await
    .expect("the page never said the turn stopped");
    assert!(
        text_of(&page, "#log .msg.bot.stopped")
            .await
            .contains("Stopped."),
        "{}",
        text_of(&page, "#log .msg.bot.stopped").await
    );
    screenshot(&page, "5-stopped").await;

    assert_eq!(send_as(&page, 0, "Still there?").await, "Back again.");
    page.close().await.unwrap();
}

/// A model nobody answers at: the page names its address and the error at the first
/// failure (within 2 s, not after the retries), then says what to do when it gives up.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_outage_shows_its_address_and_error_within_two_seconds() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let directory = tempfile::tempdir().unwrap();
    let (_up, _driver, page) = bot_with_page(directory.path(), nowhere.clone()).await;

    type_and_send(&page, "Are you there?").await;
    // From the send, which fails at once: the connection is refused.
    let sent = Instant::now();
    wait_until(
        &page,
        &format!(
            "[...document.querySelectorAll('.trouble:not([hidden])')].some((node) => node.textContent.includes('{nowhere}/v1/messages'))"
        ),
        Duration::from_secs(2),
    )
    .await
    .expect("the page did not name the model's address within 2 s");
    assert!(sent.elapsed() < Duration::from_secs(2));
    let trouble = text_of(&page, "#log .trouble").await;
    assert!(
        trouble.contains("failed to reach the model endpoint") && trouble.contains("Stop"),
        "{trouble}"
    );
    screenshot(&page, "6-model-unreachable").await;

    // When the retries are spent: the address, the last error and what to do.
    wait_until(
        &page,
        &format!("{LAST_BOT}.dataset.state === 'error'"),
        Duration::from_secs(60),
    )
    .await
    .expect("the turn never gave up");
    let failed = text_of(&page, "#log .msg.error").await;
    assert!(
        failed.contains(&format!("{nowhere}/v1/messages"))
            && failed.contains("failed to reach the model endpoint")
            && failed.contains("SAINT_MODEL_BASE_URL"),
        "{failed}"
    );
    screenshot(&page, "7-model-failed").await;
    page.close().await.unwrap();
}

/// `up` asks the model endpoint for its models at start, with the key it will send,
/// and says whether the model is served; the page's "Test model" asks again now.
#[tokio::test(flavor = "multi_thread")]
async fn the_model_is_checked_at_start_and_again_by_the_pages_test_button() {
    let model = ScriptedLlm::start().await.unwrap();
    model.set_models(&["claude-sonnet-4-5-20250929"]);
    let directory = tempfile::tempdir().unwrap();
    let (up, _driver, page) = bot_with_page(directory.path(), model.base_url()).await;
    let started = status(&up).await;
    let notices = started["notices"].to_string();
    assert!(
        notices.contains(&format!(
            "model check: {}/v1/models answered in",
            model.base_url()
        )) && notices.contains("and serves claude-sonnet-4-5"),
        "{started}"
    );
    // No model call was spent on it.
    assert_eq!(model.request_count(), 0);

    // The server stops serving the model: the button says so, naming what it serves.
    model.set_models(&["claude-haiku-4-5-20251001"]);
    page.find(Locator::Css("#check-model"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_until(
        &page,
        "document.getElementById('notice-summary').textContent.includes('does not serve claude-sonnet-4-5')",
        Duration::from_secs(20),
    )
    .await
    .expect("the test button's answer never led the notices");
    let summary = text_of(&page, "#notice-summary").await;
    assert!(summary.contains("claude-haiku-4-5-20251001"), "{summary}");
    screenshot(&page, "9-model-check").await;

    // A bookmark of the page (the address bar holds no token once the page read it)
    // opens it again in this browser.
    page.goto(&format!("{}/chat", up.base_url)).await.unwrap();
    page.wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css("#person option"))
        .await
        .expect("a bookmarked /chat lost the token");
    let address = page.current_url().await.unwrap();
    assert!(!address.as_str().contains("token"), "{address}");
    page.close().await.unwrap();
}

/// An edit of the bot file that does not validate is refused (the last good config
/// stays); the page says so until the file is fixed.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_edit_of_the_bot_file_shows_on_the_page_until_it_is_fixed() {
    let model = ScriptedLlm::start().await.unwrap();
    model.set_fallback(Reply::text("hello"));
    let directory = tempfile::tempdir().unwrap();
    let (_up, _driver, page) = bot_with_page(directory.path(), model.base_url()).await;
    let file = directory
        .path()
        .join("home/.local/share/saint/acme-assistant/bot-config.json");
    let good = std::fs::read_to_string(&file).unwrap();

    std::fs::write(&file, "{\"bot\": ").unwrap();
    wait_until(
        &page,
        "!document.getElementById('notices').hidden && document.getElementById('notice-summary').textContent.includes('bot-config.json was refused')",
        Duration::from_secs(20),
    )
    .await
    .expect("the page never said the edit was refused");
    let summary = text_of(&page, "#notice-summary").await;
    assert!(
        summary.contains("the last good config stays in force"),
        "{summary}"
    );
    screenshot(&page, "8-bot-file-refused").await;
    // The bot still answers with the last good config.
    assert_eq!(send_as(&page, 0, "hi").await, "hello");

    std::fs::write(&file, good).unwrap();
    wait_until(
        &page,
        "!document.getElementById('notices').textContent.includes('was refused')",
        Duration::from_secs(20),
    )
    .await
    .expect("the refusal stayed after the file was fixed");
    page.close().await.unwrap();
}

/// Nothing fails silently: a CLI the bot file lists but Porter's registry lacks, and a
/// persona file that is refused, are each one clear line at start and in `/readyz`.
#[tokio::test(flavor = "multi_thread")]
async fn an_unregistered_cli_and_a_refused_persona_file_are_named_at_start_and_in_readyz() {
    let directory = tempfile::tempdir().unwrap();
    // A symlink where the persona's SOUL.md goes: the agent must not follow it.
    let persona = directory
        .path()
        .join("home/.local/share/saint/acme-assistant/persona");
    std::fs::create_dir_all(&persona).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", persona.join("SOUL.md")).unwrap();
    let up = start_up(
        directory.path(),
        &[
            ("SAINT_MODEL_BASE_URL", "http://127.0.0.1:9".to_string()),
            ("SAINT_MODEL_NAME", "m".to_string()),
        ],
    );
    // What the person at the terminal reads: which CLIs and the command to register one.
    let printed = up.printed.join("\n");
    assert!(
        printed.contains("CLIs gh, gog are listed by the bot but have no credential in Porter")
            && printed.contains("install gh --host api.github.com --host github.com --placeholder-env GH_TOKEN --git --secret-stdin"),
        "{printed}"
    );
    let log = std::fs::read_to_string(&up.log).unwrap();
    let line_with = |needles: &[&str]| {
        log.lines()
            .find(|line| needles.iter().all(|needle| line.contains(needle)))
            .map(str::to_string)
    };
    // The example bot file lists gh and gog; neither is registered yet.
    for cli in ["gh", "gog"] {
        assert!(
            line_with(&["no entry for it", &format!("\"cli\":\"{cli}\"")])
                .or_else(|| line_with(&["no entry for it", &format!("cli={cli}")]))
                .is_some(),
            "no line names the unregistered {cli}: {log}"
        );
    }
    assert!(
        line_with(&["persona file refused", "SOUL.md"]).is_some(),
        "{log}"
    );
    // The page's port says ready and no more; the reasons are on the metrics listener.
    let bare = reqwest::get(format!("{}/readyz", up.http_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(bare, "ready\n");
    let readyz = reqwest::get(format!("{}/readyz", up.metrics_url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(readyz.starts_with("ready\n"), "{readyz}");
    assert!(
        readyz
            .lines()
            .any(|line| line.starts_with("warning: persona file SOUL.md refused")),
        "{readyz}"
    );
}

#[test]
fn a_taken_port_is_one_line_naming_the_address_and_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let directory = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_saint-agent"))
        .args(["up", "--listen", &address, "--no-build", "--no-memory"])
        .env_clear()
        .env("HOME", directory.path())
        .env("SAINT_SANDBOX_STATE", directory.path().join("s"))
        .env("SAINT_OLLAMA_URL", "http://127.0.0.1:9")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("saint-agent: failed to listen on ")
            && last.contains(&address)
            && last.contains("--listen"),
        "{stderr}"
    );
}
