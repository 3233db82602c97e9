//! The `browser` tool: a headless Chromium in the caller's sandbox that the model
//! drives with a small action set — `open` a URL, `read` the page's text, `click` an
//! element (by CSS selector or visible text), `type` into a field, take a
//! `screenshot` (shown to the model as an image) and `close`.
//!
//! The browser never runs in the agent: the sandbox's runner starts it (one per person
//! per sandbox, a fresh profile each time) and drives it over the DevTools pipe. Its
//! only network is this module's [`egress`] proxy, served on a unix socket in the
//! sandbox's runner directory with a key per session: every request and redirect the
//! page makes passes `web_fetch`'s SSRF guard and the bot's URL blocklist. A session
//! belongs to one person (an owner tag derived here, as for `process`), ends when it
//! was idle too long or on `close`, and takes its cookies and storage with it.
//!
//! Touches nothing itself besides the egress socket it binds: the sandbox backend and
//! its runner do the rest. Without a sandbox the policy withholds the tool.

pub mod egress;

use parking_lot::Mutex;
use std::{
    collections::HashMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use base64::Engine;
use futures::future::BoxFuture;
use saint_config::sandbox_contract::SANDBOX_BROWSER_MOUNT_PATH;
use saint_sandbox::{
    BrowserAnswer, SandboxError, ScopeKey,
    runner_browser::{BrowserAction, BrowserRequest},
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};

use self::egress::Egress;
use super::{Caller, Permit, ToolContext, ToolError, ToolImage, ToolOutput, TypedTool};
use crate::{exec::ExecTool, guard::ssrf::SsrfGuard};

/// The tool's name in roles and the catalog.
pub const BROWSER_TOOL: &str = "browser";

/// Limits of the browser tool.
#[derive(Clone, Copy, Debug)]
pub struct BrowserLimits {
    /// Time one action may take (a page load waits for its load event this long).
    pub action_timeout: Duration,
    /// A session unused this long is ended (browser, profile and egress key).
    pub idle_timeout: Duration,
    /// Browsers one sandbox runs at once (over all people sharing it).
    pub max_sessions: u32,
    /// Most bytes of page text `read` returns.
    pub max_text_bytes: u32,
    /// Largest screenshot passed to the model.
    pub max_screenshot_bytes: usize,
}

impl Default for BrowserLimits {
    fn default() -> Self {
        Self {
            action_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_sessions: 4,
            max_text_bytes: 32 * 1024,
            max_screenshot_bytes: 4 * 1024 * 1024,
        }
    }
}

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BrowserVerb {
    // (Plain comments: a documented variant would make the schema a `oneOf`.)
    // Load `url` (starts the browser if needed).
    Open,
    // The page's visible text.
    Read,
    // Click an element by `selector` or by its visible `text`.
    Click,
    // Type `text` into the element `selector` names.
    Type,
    // A picture of the visible page.
    Screenshot,
    // End the browser: cookies and storage are gone.
    Close,
}

/// What `browser` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BrowserInput {
    /// open, read, click, type, screenshot or close
    pub action: BrowserVerb,
    /// open: a public http or https URL
    pub url: Option<String>,
    /// click, type: a CSS selector (`#submit`, `input[name=q]`)
    pub selector: Option<String>,
    /// click: visible text of a button or link (when no selector); type: the text to type
    pub text: Option<String>,
    /// read: `text` (the default) or `tree` (the accessibility tree: roles, names,
    /// values and states of the page's elements, one per line)
    pub format: Option<ReadFormat>,
}

/// How `read` shows the page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadFormat {
    // (Plain comments: a documented variant would make the schema a `oneOf`.)
    // The visible text.
    #[default]
    Text,
    // The accessibility tree.
    Tree,
}

/// Prepares a screenshot for the model (in the agent: decoded and re-encoded by
/// saint-media's child); without one the PNG is passed on as the browser made it.
pub type ImagePreparer =
    Arc<dyn Fn(Vec<u8>) -> BoxFuture<'static, Result<ToolImage, ScreenshotError>> + Send + Sync>;

/// Why the preparer refused a screenshot: its own error, which the model reads after
/// this sentence.
#[derive(Debug, thiserror::Error)]
#[error("the screenshot could not be prepared: {0}")]
pub struct ScreenshotError(pub Box<dyn std::error::Error + Send + Sync>);

/// One person's browser in one sandbox, as the agent holds it: the egress proxy the
/// browser reaches and its key.
struct Session {
    key: String,
    /// The egress socket as the agent sees it (removed when the session ends).
    socket: PathBuf,
    /// The same socket as the sandbox sees it.
    socket_in_sandbox: String,
    egress: Arc<Egress>,
    server: tokio::task::JoinHandle<()>,
    last_used: Instant,
}

impl Drop for Session {
    fn drop(&mut self) {
        // The key dies with the listener: no connection is served after this.
        self.server.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `browser` backed by the sandbox `exec` uses.
pub struct BrowserTool {
    exec: Arc<ExecTool>,
    guard: Arc<SsrfGuard>,
    limits: BrowserLimits,
    sessions: Mutex<HashMap<(ScopeKey, String), Session>>,
    preparer: Option<ImagePreparer>,
}

impl BrowserTool {
    /// `browser` in `exec`'s sandboxes, its egress checked by `guard`.
    pub fn new(exec: Arc<ExecTool>, guard: Arc<SsrfGuard>, limits: BrowserLimits) -> Self {
        Self {
            exec,
            guard,
            limits,
            sessions: Mutex::new(HashMap::new()),
            preparer: None,
        }
    }

    /// Screenshots go through `preparer` before the model sees them.
    pub fn with_image_preparer(mut self, preparer: ImagePreparer) -> Self {
        self.preparer = Some(preparer);
        self
    }

    fn sessions(&self) -> parking_lot::MutexGuard<'_, HashMap<(ScopeKey, String), Session>> {
        self.sessions.lock()
    }

    /// The caller's session with its socket in `socket_directory` (the sandbox's
    /// browser socket directory as the agent sees it), started with a new key and
    /// egress socket if none is live.
    fn session(
        &self,
        scope: &ScopeKey,
        owner: &str,
        socket_directory: &std::path::Path,
        blocklist: &[String],
    ) -> Result<(String, String, Arc<Egress>), ToolError> {
        let mut sessions = self.sessions();
        let idle = self.limits.idle_timeout;
        sessions.retain(|_, session| session.last_used.elapsed() < idle);
        let slot = (scope.clone(), owner.to_string());
        if let Some(session) = sessions.get_mut(&slot)
            && session.socket.parent() == Some(socket_directory)
        {
            session.last_used = Instant::now();
            return Ok((
                session.socket_in_sandbox.clone(),
                session.key.clone(),
                session.egress.clone(),
            ));
        }
        let key = saint_sandbox::random_token().map_err(unavailable)?;
        let directory = checked_socket_directory(socket_directory)?;
        // A name nobody can guess, in a directory the sandbox cannot write: a command in
        // the sandbox can neither plant a symlink where the agent binds nor replace the
        // socket with a listener of its own that would collect the browser's key.
        let name = saint_sandbox::browser_socket_file_name().map_err(unavailable)?;
        let socket = directory.join(&name);
        let listener = tokio::net::UnixListener::bind(&socket).map_err(|error| {
            ToolError::Failed(format!(
                "failed to open the browser's egress socket: {error}"
            ))
        })?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o660));
        let egress = Arc::new(Egress::new(
            self.guard.clone(),
            blocklist.to_vec(),
            key.clone(),
        ));
        let server = egress.clone().serve(listener);
        let socket_in_sandbox = format!("{SANDBOX_BROWSER_MOUNT_PATH}/{name}");
        sessions.insert(
            slot,
            Session {
                key: key.clone(),
                socket,
                socket_in_sandbox: socket_in_sandbox.clone(),
                egress: egress.clone(),
                server,
                last_used: Instant::now(),
            },
        );
        Ok((socket_in_sandbox, key, egress))
    }

    fn end_session(&self, scope: &ScopeKey, owner: &str) {
        self.sessions().remove(&(scope.clone(), owner.to_string()));
    }

    async fn act(
        &self,
        context: &ToolContext,
        input: BrowserInput,
    ) -> Result<ToolOutput, ToolError> {
        let action = runner_action(&input, self.limits.max_text_bytes)?;
        let sandbox = self.exec.caller_sandbox(context).await?;
        let owner = owner_tag(&context.caller);
        let handle = self
            .exec
            .sandbox()
            .ensure(&sandbox.scope, &sandbox.view)
            .await
            .map_err(unavailable)?;
        let socket_directory = handle.browser_sockets.clone().ok_or_else(|| {
            ToolError::Failed(format!(
                "the browser is unavailable: this sandbox's Job template mounts no browser \
                 socket directory at {SANDBOX_BROWSER_MOUNT_PATH} (an operator older than the \
                 browser rendered it; upgrade the operator)"
            ))
        })?;
        let (egress_socket, egress_key, egress) = self.session(
            &sandbox.scope,
            &owner,
            &socket_directory,
            &context.config.web.url_blocklist,
        )?;
        let before = counts(&egress);
        let request = BrowserRequest {
            token: String::new(),
            owner: owner.clone(),
            egress_socket,
            egress_key,
            timeout_seconds: self.limits.action_timeout.as_secs(),
            max_sessions: self.limits.max_sessions,
            idle_seconds: self.limits.idle_timeout.as_secs(),
            action: action.clone(),
        };
        let started = Instant::now();
        let answer = saint_sandbox::runner_client::browser(
            handle,
            request,
            self.limits.max_screenshot_bytes + self.limits.max_text_bytes as usize,
        )
        .await;
        let seconds = started.elapsed().as_secs_f64();
        if matches!(action, BrowserAction::Close) {
            self.end_session(&sandbox.scope, &owner);
        }
        let answer = answer.map_err(runner_refusal);
        if matches!(answer, Err(ToolError::NotFound(_))) {
            // The runner has no browser for this owner any more: neither do we.
            self.end_session(&sandbox.scope, &owner);
        }
        let BrowserAnswer { data, reply } = answer?;
        let after = counts(&egress);
        let mut metering = sandbox.metering;
        metering.insert("action".to_string(), json!(verb_label(input.action)));
        metering.insert("outputBytes".to_string(), json!(data.len()));
        metering.insert("seconds".to_string(), json!(seconds));
        metering.insert("browserStarted".to_string(), json!(reply.started));
        metering.insert("egressAllowed".to_string(), json!(after[0] - before[0]));
        metering.insert("egressRefused".to_string(), json!(after[1] - before[1]));
        metering.insert("egressBytes".to_string(), json!(after[2] - before[2]));
        let refused = after[1] - before[1];
        let mut content = match input.action {
            BrowserVerb::Close => reply.note.clone(),
            _ => format!("{}\npage: {} — {:?}", reply.note, reply.url, reply.title),
        };
        if refused > 0 {
            content.push_str(&format!(
                "\n{refused} request(s) of the page were refused (internal, local or blocklisted addresses, or ports other than 80 and 443)"
            ));
        }
        let mut output = ToolOutput {
            content,
            untrusted: true,
            metering,
            image: None,
            audio: None,
        };
        match input.action {
            BrowserVerb::Read => {
                output.content.push_str("\n\n");
                output.content.push_str(&String::from_utf8_lossy(&data));
            }
            BrowserVerb::Screenshot => {
                if !data.starts_with(b"\x89PNG\r\n\x1a\n") {
                    return Err(ToolError::Failed(
                        "the browser's screenshot is not a PNG".to_string(),
                    ));
                }
                output.content.push_str("\nthe screenshot is shown below");
                output.image = Some(match &self.preparer {
                    Some(preparer) => preparer(data)
                        .await
                        .map_err(|error| ToolError::Failed(error.to_string()))?,
                    None => ToolImage {
                        media_type: "image/png".to_string(),
                        base64: base64::engine::general_purpose::STANDARD.encode(&data),
                    },
                });
            }
            _ => {}
        }
        Ok(output)
    }
}

/// The sandbox's browser socket directory as the agent sees it, accepted only when it
/// is a real directory of the agent's own, that no one else may write (the sandbox
/// backend made it before the sandbox started): anything else at that path (a symlink,
/// another's directory) is refused.
fn checked_socket_directory(directory: &std::path::Path) -> Result<PathBuf, ToolError> {
    use std::os::unix::fs::MetadataExt;
    let refuse = |why: String| {
        ToolError::Failed(format!(
            "the browser is unavailable: {} {why}",
            directory.display()
        ))
    };
    match std::fs::symlink_metadata(directory) {
        Ok(metadata)
            if metadata.is_dir()
                && metadata.uid() == rustix::process::geteuid().as_raw()
                && metadata.mode() & 0o022 == 0 =>
        {
            Ok(directory.to_path_buf())
        }
        Ok(_) => Err(refuse(
            "is not a directory of the agent's own that only it may write".to_string(),
        )),
        Err(error) => Err(refuse(format!("could not be read: {error}"))),
    }
}

/// What the model is told when the runner refuses a browser action.
fn runner_refusal(error: SandboxError) -> ToolError {
    match error {
        SandboxError::Refused {
            code: "no_such_process",
            message,
        } => ToolError::NotFound(message),
        SandboxError::Refused {
            code: "limit_reached",
            message,
        } => ToolError::Denied(message),
        SandboxError::Refused {
            code: "unsupported",
            message,
        } => ToolError::Failed(message),
        SandboxError::Refused { message, .. } => {
            ToolError::Failed(format!("the browser failed: {message}"))
        }
        error => unavailable(error),
    }
}

fn counts(egress: &Egress) -> [u64; 3] {
    use std::sync::atomic::Ordering::Relaxed;
    let counts = &egress.counts;
    [
        counts.allowed.load(Relaxed),
        counts.refused.load(Relaxed),
        counts.bytes_sent.load(Relaxed) + counts.bytes_received.load(Relaxed),
    ]
}

fn non_empty(value: &Option<String>) -> Option<String> {
    value.clone().filter(|value| !value.trim().is_empty())
}

/// The runner's action for the model's input; a missing argument names the field.
fn runner_action(input: &BrowserInput, max_text_bytes: u32) -> Result<BrowserAction, ToolError> {
    let missing = |field: &str| {
        ToolError::InvalidInput(format!("{} needs {field}", verb_label(input.action)))
    };
    if input.format.is_some() && input.action != BrowserVerb::Read {
        return Err(ToolError::InvalidInput(format!(
            "format applies to read only, not to {}",
            verb_label(input.action)
        )));
    }
    Ok(match input.action {
        BrowserVerb::Open => {
            let url = non_empty(&input.url).ok_or_else(|| missing("url"))?;
            let parsed = url::Url::parse(url.trim()).map_err(|error| {
                ToolError::InvalidInput(format!("failed to parse URL: {error}"))
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ToolError::InvalidInput(format!(
                    "only http and https URLs may be opened, not {:?}",
                    parsed.scheme()
                )));
            }
            BrowserAction::Open {
                url: parsed.to_string(),
            }
        }
        BrowserVerb::Read => BrowserAction::Read {
            max_bytes: max_text_bytes,
            tree: input.format == Some(ReadFormat::Tree),
        },
        BrowserVerb::Click => {
            let (selector, text) = (non_empty(&input.selector), non_empty(&input.text));
            if selector.is_none() && text.is_none() {
                return Err(missing("a selector or a text"));
            }
            BrowserAction::Click { selector, text }
        }
        BrowserVerb::Type => BrowserAction::Type {
            selector: non_empty(&input.selector).ok_or_else(|| missing("selector"))?,
            text: input.text.clone().ok_or_else(|| missing("text"))?,
        },
        BrowserVerb::Screenshot => BrowserAction::Screenshot,
        BrowserVerb::Close => BrowserAction::Close,
    })
}

fn verb_label(verb: BrowserVerb) -> &'static str {
    match verb {
        BrowserVerb::Open => "open",
        BrowserVerb::Read => "read",
        BrowserVerb::Click => "click",
        BrowserVerb::Type => "type",
        BrowserVerb::Screenshot => "screenshot",
        BrowserVerb::Close => "close",
    }
}

fn unavailable(error: SandboxError) -> ToolError {
    ToolError::Failed(format!(
        "the browser is unavailable: {}",
        saint_config::ErrorChain(&error)
    ))
}

/// The tag a runner files the caller's browser under: a digest of who they are, the
/// same in every session of theirs (like `process`'s, in its own domain).
pub fn owner_tag(caller: &Caller) -> String {
    let digest = Sha256::digest(format!("saint-browser-owner\0{}", caller.slug).as_bytes());
    format!("b-{}", &hex::encode(digest)[..24])
}

impl TypedTool for BrowserTool {
    type Input = BrowserInput;
    const NAME: &'static str = BROWSER_TOOL;
    const DESCRIPTION: &'static str = "A headless web browser in your sandbox for pages that need JavaScript. \
         action=open with url loads a public page and returns its final URL and title; \
         action=read returns the page's visible text, or with format=tree its accessibility \
         tree (each element's role, name, value and state: what to click or type into); \
         action=click clicks the element a CSS \
         selector names, or the button or link whose visible text contains text; \
         action=type focuses the element selector names and types text; action=screenshot \
         shows you the visible page as an image; action=close ends the browser (cookies and \
         storage go with it). Internal and local addresses are never reachable.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        context: &'a ToolContext,
        input: BrowserInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(self.act(context, input))
    }
}
