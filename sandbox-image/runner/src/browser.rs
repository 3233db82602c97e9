//! The runner's headless browsers: one Chromium per owner, started by the first
//! `browser` request, driven over the DevTools protocol on a pipe (fds 3 and 4: no debug
//! port anyone in the sandbox could reach), and ended by `close`, at its idle timeout or
//! with the runner.
//!
//! Chromium's only network is an HTTP proxy at a loopback port this module relays to
//! the agent's guarded egress socket. Loopback is *not* bypassed (`<-loopback>`), so a
//! page cannot reach the sandbox's own ports (the runner's relays) directly, and every
//! request and redirect reaches the agent's guard. The guard challenges each connection
//! (407); only this browser's DevTools client answers with the session's key, so a
//! plain command in the sandbox that finds the relay port gets nothing through it.
//!
//! Each session has a fresh profile directory (cookies, storage, cache) under the
//! sandbox's temporary directory, deleted when it ends: nothing persists across
//! sessions, and an owner never acts on another owner's session.
//!
//! Touches only the browsers it started and their profile directories.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use base64::Engine;
use porter_protocol::{
    ErrorCode,
    browser::{BrowserAction, BrowserReply, BrowserRequest},
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    process::{Child, ChildStdin, Command},
    sync::{broadcast, oneshot},
    task::JoinHandle,
    time::Instant,
};

use crate::{background::Refusal, process_group::ProcessGroup};
use parking_lot::Mutex;

/// Where Chromium is looked for, first match wins (Debian's `/usr/bin/chromium` is a
/// wrapper script that reads `/etc/chromium.d`; the binary itself needs none of it).
pub const CHROMIUM_CANDIDATES: [&str; 3] = [
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
];

/// Largest DevTools message read from Chromium (a full-page screenshot fits).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// How long a new browser may take to answer its first command.
const START_DEADLINE: Duration = Duration::from_secs(30);

/// The viewport every page gets (screenshots are this size, within every provider's
/// image limits).
const VIEWPORT: (u32, u32) = (1280, 800);

/// The user name the browser answers the egress proxy's challenge with.
pub const EGRESS_USER: &str = "saint-browser";

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, DevToolsError>>>>>;

/// Why a DevTools command got no result.
#[derive(Debug, thiserror::Error)]
enum DevToolsError {
    #[error("the browser is gone ({0})")]
    Gone(std::io::Error),
    #[error("the browser closed its DevTools pipe")]
    PipeClosed,
    /// The method that got no answer.
    #[error("the browser did not answer {0} in time")]
    TimedOut(String),
    /// Chromium's own message for the command.
    #[error("{0}")]
    Chromium(String),
}

/// Why an action on the page did not happen; the agent's model reads the text.
#[derive(Debug, thiserror::Error)]
enum ActionError {
    #[error(transparent)]
    DevTools(#[from] DevToolsError),
    /// The exception's description.
    #[error("the page threw: {0}")]
    PageThrew(String),
    #[error("only http and https URLs may be opened, not {0:?}")]
    NotWebUrl(String),
    #[error("the browser closed while loading")]
    ClosedWhileLoading,
    #[error("click needs a selector or a text")]
    NoClickTarget,
    /// What was looked for: `the selector "…"` or `the text "…"`.
    #[error("nothing to click matches {0}")]
    NothingToClick(String),
    /// The selector.
    #[error("nothing to type into matches {0:?}")]
    NothingToType(String),
    #[error("the screenshot was not base64: {0}")]
    NotBase64(base64::DecodeError),
}

/// A DevTools client over Chromium's pipe: commands with ids, answers matched by id,
/// events broadcast. Proxy challenges are answered here, with the session's key.
struct DevTools {
    writer: Arc<tokio::sync::Mutex<ChildStdin>>,
    next_id: Arc<AtomicU64>,
    pending: Pending,
    events: broadcast::Sender<Value>,
    reader: JoinHandle<()>,
}

async fn write_message(
    writer: &tokio::sync::Mutex<ChildStdin>,
    message: &Value,
) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(message).expect("json value serialises");
    bytes.push(0);
    writer.lock().await.write_all(&bytes).await
}

impl DevTools {
    fn new(stdin: ChildStdin, stdout: tokio::process::ChildStdout, egress_key: String) -> Self {
        let writer = Arc::new(tokio::sync::Mutex::new(stdin));
        let next_id = Arc::new(AtomicU64::new(1));
        let pending: Pending = Arc::default();
        let (events, _) = broadcast::channel(256);
        let reader = tokio::spawn(read_messages(
            BufReader::new(stdout),
            pending.clone(),
            events.clone(),
            writer.clone(),
            next_id.clone(),
            egress_key,
        ));
        Self {
            writer,
            next_id,
            pending,
            events,
            reader,
        }
    }

    /// Sends `method` (to the page when `session` is given) and waits for its answer.
    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, DevToolsError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().insert(id, sender);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        if let Err(error) = write_message(&self.writer, &message).await {
            self.pending.lock().remove(&id);
            return Err(DevToolsError::Gone(error));
        }
        match tokio::time::timeout_at(deadline, receiver).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(DevToolsError::PipeClosed),
            Err(_) => {
                self.pending.lock().remove(&id);
                Err(DevToolsError::TimedOut(method.to_owned()))
            }
        }
    }
}

impl Drop for DevTools {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads NUL-separated messages: answers go to their caller, events to subscribers;
/// the Fetch domain's pauses and proxy challenges are answered at once.
async fn read_messages(
    mut reader: BufReader<tokio::process::ChildStdout>,
    pending: Pending,
    events: broadcast::Sender<Value>,
    writer: Arc<tokio::sync::Mutex<ChildStdin>>,
    next_id: Arc<AtomicU64>,
    egress_key: String,
) {
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        let mut limited = (&mut reader).take(MAX_MESSAGE as u64);
        match limited.read_until(0, &mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(_) if buffer.last() != Some(&0) => break,
            Ok(_) => {}
        }
        buffer.pop();
        let Ok(message) = serde_json::from_slice::<Value>(&buffer) else {
            continue;
        };
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            let sender = pending.lock().remove(&id);
            if let Some(sender) = sender {
                let answer = match message.get("error") {
                    Some(error) => Err(DevToolsError::Chromium(
                        error
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("DevTools error")
                            .to_string(),
                    )),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = sender.send(answer);
            }
            continue;
        }
        let method = message.get("method").and_then(Value::as_str).unwrap_or("");
        let reply = match method {
            // Every request pauses while the Fetch domain is on (it must be, for the
            // proxy challenge to reach us): let it go on unchanged.
            "Fetch.requestPaused" => Some((
                "Fetch.continueRequest",
                json!({"requestId": message["params"]["requestId"]}),
            )),
            "Fetch.authRequired" => {
                // Only the egress proxy gets the key; a site asking for a password
                // gets nothing.
                let from_proxy = message["params"]["authChallenge"]["source"] == "Proxy";
                let response = if from_proxy {
                    json!({"response": "ProvideCredentials", "username": EGRESS_USER, "password": egress_key})
                } else {
                    json!({"response": "CancelAuth"})
                };
                Some((
                    "Fetch.continueWithAuth",
                    json!({"requestId": message["params"]["requestId"], "authChallengeResponse": response}),
                ))
            }
            _ => None,
        };
        if let Some((reply_method, params)) = reply {
            let id = next_id.fetch_add(1, Ordering::SeqCst);
            let mut answer = json!({"id": id, "method": reply_method, "params": params});
            if let Some(session) = message.get("sessionId") {
                answer["sessionId"] = session.clone();
            }
            let _ = write_message(&writer, &answer).await;
            continue;
        }
        let _ = events.send(message);
    }
    // Whoever still waits learns the browser is gone.
    pending.lock().clear();
}

/// One owner's browser.
struct Session {
    devtools: DevTools,
    /// The page's DevTools session.
    page: String,
    /// The process group of Chromium and its helpers; dropping it kills them all.
    _group: ProcessGroup,
    _child: Child,
    profile: PathBuf,
    relay: JoinHandle<()>,
    last_used: Mutex<Instant>,
    /// Unused this long, the session ends.
    idle: Duration,
    /// One action at a time per session.
    busy: tokio::sync::Mutex<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.relay.abort();
        // The group is killed by `_group`'s drop (after this body); the profile goes
        // now, whatever is still writing to it.
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Every browser of one runner.
#[derive(Default)]
pub struct Browsers {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    next_profile: AtomicU64,
}

/// What an action produced: bytes for the model (text or PNG) and the reply.
pub struct Acted {
    pub data: Vec<u8>,
    pub reply: BrowserReply,
}

fn refusal(code: ErrorCode, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

fn failed(message: impl Into<String>) -> Refusal {
    refusal(ErrorCode::Internal, message)
}

/// The Chromium binary, if the sandbox has one.
pub fn find_chromium() -> Option<PathBuf> {
    CHROMIUM_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

impl Browsers {
    fn sessions(&self) -> parking_lot::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock()
    }

    /// How many browsers run now.
    pub fn running(&self) -> usize {
        self.sessions().len()
    }

    /// Ends every browser (runner shutdown).
    pub fn close_all(&self) {
        self.sessions().clear();
    }

    /// Ends sessions unused for longer than their idle timeout (the server calls this
    /// periodically, every request too).
    pub fn reap_idle(&self) {
        self.sessions()
            .retain(|_, session| session.last_used.lock().elapsed() < session.idle);
    }

    /// Runs one action on the owner's session, starting it for `open`.
    pub async fn act(&self, request: &BrowserRequest) -> Result<Acted, Refusal> {
        let started_at = Instant::now();
        let deadline = started_at + Duration::from_secs(request.timeout_seconds.clamp(1, 300));
        self.reap_idle();
        if request.action == BrowserAction::Close {
            let closed = self.sessions().remove(&request.owner).is_some();
            return Ok(Acted {
                data: Vec::new(),
                reply: BrowserReply {
                    note: if closed {
                        "the browser is closed; its cookies and storage are gone".to_string()
                    } else {
                        "no browser was open".to_string()
                    },
                    ..BrowserReply::default()
                },
            });
        }
        let existing = self.sessions().get(&request.owner).cloned();
        let (session, started) = match existing {
            Some(session) => (session, false),
            None if matches!(request.action, BrowserAction::Open { .. }) => {
                if self.running() >= request.max_sessions as usize {
                    return Err(refusal(
                        ErrorCode::LimitReached,
                        format!(
                            "{} browsers are open in this sandbox already, the most allowed",
                            request.max_sessions
                        ),
                    ));
                }
                let session = Arc::new(self.start(request, deadline).await?);
                self.sessions()
                    .insert(request.owner.clone(), session.clone());
                (session, true)
            }
            None => {
                return Err(refusal(
                    ErrorCode::NoSuchProcess,
                    "no browser is open for you: open a URL first",
                ));
            }
        };
        let _busy = session.busy.lock().await;
        *session.last_used.lock() = Instant::now();
        let result = session.act(&request.action, deadline).await;
        *session.last_used.lock() = Instant::now();
        let (data, note) = match result {
            Ok(done) => done,
            Err(error) => {
                // A browser that stopped answering is ended, not kept half-alive.
                if session.devtools.reader.is_finished() {
                    self.sessions().remove(&request.owner);
                }
                return Err(failed(error.to_string()));
            }
        };
        let (url, title) = session.location(deadline).await.unwrap_or_default();
        Ok(Acted {
            data,
            reply: BrowserReply {
                url,
                title,
                note,
                started,
                milliseconds: started_at.elapsed().as_millis() as u64,
            },
        })
    }

    async fn start(&self, request: &BrowserRequest, deadline: Instant) -> Result<Session, Refusal> {
        let chromium = find_chromium().ok_or_else(|| {
            refusal(
                ErrorCode::Unsupported,
                format!(
                    "this sandbox has no Chromium (looked for {}); the sandbox image must carry it",
                    CHROMIUM_CANDIDATES.join(", ")
                ),
            )
        })?;
        let relay_listener = porter_protocol::relay::bind("127.0.0.1:0".parse().expect("address"))
            .await
            .map_err(|error| failed(format!("failed to start the browser's relay: {error}")))?;
        let relay_port = relay_listener
            .local_addr()
            .map_err(|error| failed(format!("failed to start the browser's relay: {error}")))?
            .port();
        let relay = tokio::spawn(porter_protocol::relay::serve(
            relay_listener,
            PathBuf::from(&request.egress_socket),
        ));
        let profile = self.new_profile()?;
        let mut command = Command::new("/bin/sh");
        // Chromium reads DevTools commands on fd 3 and writes on fd 4: the shell moves
        // the pipes there and gives Chromium nothing on stdin and stdout.
        command
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#)
            .arg(&chromium)
            .args(chromium_arguments(&profile, relay_port))
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("LANG", "C.UTF-8")
            // Whatever Chromium writes outside its profile lands in the profile too.
            .env("HOME", &profile)
            .env("XDG_CONFIG_HOME", profile.join("config"))
            .env("XDG_CACHE_HOME", profile.join("cache"))
            .current_dir(&profile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|error| {
            let _ = std::fs::remove_dir_all(&profile);
            failed(format!("failed to start {}: {error}", chromium.display()))
        })?;
        let group = ProcessGroup::new(child.id().unwrap_or_default());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(failed("failed to open the browser's DevTools pipe"));
        };
        let devtools = DevTools::new(stdin, stdout, request.egress_key.clone());
        let mut session = Session {
            devtools,
            page: String::new(),
            _group: group,
            _child: child,
            profile,
            relay,
            last_used: Mutex::new(Instant::now()),
            idle: Duration::from_secs(request.idle_seconds.max(1)),
            busy: tokio::sync::Mutex::new(()),
        };
        let first = deadline.min(Instant::now() + START_DEADLINE);
        let target = session
            .devtools
            .call(
                None,
                "Target.createTarget",
                json!({"url": "about:blank"}),
                first,
            )
            .await
            .map_err(|message| failed(format!("failed to start the browser: {message}")))?;
        let attached = session
            .devtools
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
                first,
            )
            .await
            .map_err(|message| failed(format!("failed to start the browser: {message}")))?;
        session.page = attached["sessionId"]
            .as_str()
            .ok_or_else(|| failed("failed to start the browser: no page session"))?
            .to_string();
        for (method, params) in [
            ("Fetch.enable", json!({"handleAuthRequests": true})),
            ("Page.enable", json!({})),
            (
                "Emulation.setDeviceMetricsOverride",
                json!({"width": VIEWPORT.0, "height": VIEWPORT.1, "deviceScaleFactor": 1, "mobile": false}),
            ),
        ] {
            session
                .devtools
                .call(Some(&session.page), method, params, first)
                .await
                .map_err(|message| failed(format!("failed to start the browser: {message}")))?;
        }
        Ok(session)
    }

    /// A new, empty profile directory under the temporary directory (never reused).
    fn new_profile(&self) -> Result<PathBuf, Refusal> {
        let number = self.next_profile.fetch_add(1, Ordering::SeqCst);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.subsec_nanos())
            .unwrap_or_default();
        let path = std::env::temp_dir().join(format!(
            "saint-browser-{}-{number}-{nanos}",
            std::process::id()
        ));
        // `create_dir` fails on anything already there (a planted symlink included).
        std::fs::create_dir(&path)
            .map_err(|error| failed(format!("failed to create the browser profile: {error}")))?;
        Ok(path)
    }
}

/// Chromium's flags: headless, a throwaway profile, and the relay as its only proxy
/// (loopback included), with no background traffic of its own.
pub fn chromium_arguments(profile: &Path, relay_port: u16) -> Vec<String> {
    vec![
        "--headless".to_string(),
        // The sandbox is the isolation: Chromium's own needs namespaces it cannot have.
        "--no-sandbox".to_string(),
        "--disable-gpu".to_string(),
        "--disable-dev-shm-usage".to_string(),
        "--disable-quic".to_string(),
        "--no-first-run".to_string(),
        "--no-default-browser-check".to_string(),
        "--disable-background-networking".to_string(),
        "--disable-component-update".to_string(),
        "--disable-sync".to_string(),
        "--disable-extensions".to_string(),
        "--disable-breakpad".to_string(),
        "--disable-crash-reporter".to_string(),
        "--mute-audio".to_string(),
        // One renderer process per page keeps interception in one DevTools session.
        "--disable-site-isolation-trials".to_string(),
        "--disable-features=IsolateOrigins,site-per-process,MediaRouter,OptimizationHints,Translate".to_string(),
        // WebRTC may not go around the proxy.
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".to_string(),
        format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1),
        format!("--user-data-dir={}", profile.display()),
        format!("--proxy-server=http://127.0.0.1:{relay_port}"),
        // Without this Chromium would reach loopback directly (the runner's ports).
        "--proxy-bypass-list=<-loopback>".to_string(),
        // Chromium never resolves a name itself; the proxy does, and checks.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1".to_string(),
        "--remote-debugging-pipe".to_string(),
        "about:blank".to_string(),
    ]
}

/// A string as a JavaScript literal (JSON is valid JavaScript).
fn literal(value: &str) -> String {
    serde_json::to_string(value).expect("string serialises")
}

const CLICK_SCRIPT: &str = r#"(function (selector, text) {
  let element = null;
  if (selector) {
    element = document.querySelector(selector);
  } else {
    const wanted = text.trim().toLowerCase();
    const candidates = document.querySelectorAll(
      'button, a, input[type=submit], input[type=button], [role=button], summary, label');
    for (const candidate of candidates) {
      const shown = (candidate.innerText || candidate.value || '').trim().toLowerCase();
      if (shown.includes(wanted)) { element = candidate; break; }
    }
  }
  if (!element) return null;
  element.scrollIntoView({block: 'center'});
  element.click();
  return (element.innerText || element.value || element.tagName).trim().slice(0, 80);
})"#;

const FOCUS_SCRIPT: &str = r#"(function (selector) {
  const element = document.querySelector(selector);
  if (!element) return false;
  element.scrollIntoView({block: 'center'});
  element.focus();
  return document.activeElement === element;
})"#;

impl Session {
    async fn evaluate(&self, expression: &str, deadline: Instant) -> Result<Value, ActionError> {
        let answer = self
            .devtools
            .call(
                Some(&self.page),
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
                deadline,
            )
            .await?;
        if let Some(exception) = answer.get("exceptionDetails") {
            let text = exception["exception"]["description"]
                .as_str()
                .or(exception["text"].as_str())
                .unwrap_or("script error");
            return Err(ActionError::PageThrew(text.to_owned()));
        }
        Ok(answer["result"]["value"].clone())
    }

    async fn location(&self, deadline: Instant) -> Result<(String, String), ActionError> {
        let value = self
            .evaluate("[location.href, document.title]", deadline)
            .await?;
        Ok((
            value[0].as_str().unwrap_or_default().to_string(),
            value[1].as_str().unwrap_or_default().to_string(),
        ))
    }

    /// Loads `url`; answers once the page's load event fired or the deadline passed.
    async fn open(&self, url: &str, deadline: Instant) -> Result<(Vec<u8>, String), ActionError> {
        // The agent sends only web URLs; a file or chrome URL is never opened.
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ActionError::NotWebUrl(url.to_owned()));
        }
        let mut events = self.devtools.events.subscribe();
        let navigated = self
            .devtools
            .call(
                Some(&self.page),
                "Page.navigate",
                json!({"url": url}),
                deadline,
            )
            .await?;
        if let Some(error) = navigated["errorText"].as_str() {
            return Ok((Vec::new(), format!("the page did not load: {error}")));
        }
        // The load event of our page (or the deadline: a page may never finish).
        let loaded = tokio::time::timeout_at(deadline, async {
            loop {
                match events.recv().await {
                    Ok(event)
                        if event["method"] == "Page.loadEventFired"
                            && event["sessionId"] == self.page.as_str() =>
                    {
                        return true;
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return false,
                }
            }
        })
        .await;
        let note = match loaded {
            Ok(true) => "loaded",
            Ok(false) => return Err(ActionError::ClosedWhileLoading),
            Err(_) => "still loading at the deadline",
        };
        Ok((Vec::new(), note.to_string()))
    }

    /// The page's accessibility tree as text, at most `max_bytes`.
    async fn read_tree(
        &self,
        max_bytes: u32,
        deadline: Instant,
    ) -> Result<(Vec<u8>, String), ActionError> {
        let answer = self
            .devtools
            .call(
                Some(&self.page),
                "Accessibility.getFullAXTree",
                json!({}),
                deadline,
            )
            .await?;
        let nodes = answer["nodes"].as_array().cloned().unwrap_or_default();
        let (text, cut) = crate::accessibility::render(&nodes, max_bytes as usize);
        let note = if cut {
            format!("the page's accessibility tree, cut at {} bytes", text.len())
        } else {
            "the page's accessibility tree".to_string()
        };
        Ok((text.into_bytes(), note))
    }

    /// The page's visible text, at most `max_bytes`.
    async fn read_text(
        &self,
        max_bytes: u32,
        deadline: Instant,
    ) -> Result<(Vec<u8>, String), ActionError> {
        let text = self
            .evaluate(
                "document.body ? document.body.innerText : document.documentElement.innerText",
                deadline,
            )
            .await?;
        let mut text = text.as_str().unwrap_or_default().to_string();
        let whole = text.len();
        let mut end = whole.min(max_bytes as usize);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        let note = if end < whole {
            format!("the page's text, cut to {end} of {whole} bytes")
        } else {
            "the page's text".to_string()
        };
        Ok((text.into_bytes(), note))
    }

    async fn act(
        &self,
        action: &BrowserAction,
        deadline: Instant,
    ) -> Result<(Vec<u8>, String), ActionError> {
        match action {
            BrowserAction::Open { url } => self.open(url, deadline).await,
            BrowserAction::Read {
                max_bytes,
                tree: true,
            } => self.read_tree(*max_bytes, deadline).await,
            BrowserAction::Read {
                max_bytes,
                tree: false,
            } => self.read_text(*max_bytes, deadline).await,
            BrowserAction::Click { selector, text } => {
                let (selector, text) = (selector.as_deref(), text.as_deref());
                if selector.is_none() && text.is_none() {
                    return Err(ActionError::NoClickTarget);
                }
                let expression = format!(
                    "{CLICK_SCRIPT}({}, {})",
                    selector.map_or("null".to_string(), literal),
                    literal(text.unwrap_or_default())
                );
                match self.evaluate(&expression, deadline).await? {
                    Value::String(shown) => Ok((Vec::new(), format!("clicked {shown:?}"))),
                    _ => Err(ActionError::NothingToClick(selector.map_or_else(
                        || format!("the text {:?}", text.unwrap_or_default()),
                        |selector| format!("the selector {selector:?}"),
                    ))),
                }
            }
            BrowserAction::Type { selector, text } => {
                let focused = self
                    .evaluate(&format!("{FOCUS_SCRIPT}({})", literal(selector)), deadline)
                    .await?;
                if focused != Value::Bool(true) {
                    return Err(ActionError::NothingToType(selector.clone()));
                }
                self.devtools
                    .call(
                        Some(&self.page),
                        "Input.insertText",
                        json!({"text": text}),
                        deadline,
                    )
                    .await?;
                Ok((
                    Vec::new(),
                    format!("typed {} characters", text.chars().count()),
                ))
            }
            BrowserAction::Screenshot => {
                let shot = self
                    .devtools
                    .call(
                        Some(&self.page),
                        "Page.captureScreenshot",
                        json!({"format": "png"}),
                        deadline,
                    )
                    .await?;
                let png = base64::engine::general_purpose::STANDARD
                    .decode(shot["data"].as_str().unwrap_or_default())
                    .map_err(ActionError::NotBase64)?;
                Ok((png, "a PNG of the visible page".to_string()))
            }
            BrowserAction::Close => Ok((Vec::new(), String::new())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chromium_goes_only_through_the_relay_loopback_included() {
        let arguments = chromium_arguments(Path::new("/tmp/p"), 4711);
        assert!(arguments.contains(&"--proxy-server=http://127.0.0.1:4711".to_string()));
        assert!(arguments.contains(&"--proxy-bypass-list=<-loopback>".to_string()));
        assert!(arguments.contains(&"--user-data-dir=/tmp/p".to_string()));
        assert!(arguments.contains(&"--remote-debugging-pipe".to_string()));
        assert!(
            !arguments
                .iter()
                .any(|argument| argument.starts_with("--remote-debugging-port")),
            "no port anyone in the sandbox could reach"
        );
    }

    #[test]
    fn literals_cannot_break_out_of_the_script() {
        assert_eq!(literal(r#"a"); alert(1); ("#), r#""a\"); alert(1); (""#);
    }
}
