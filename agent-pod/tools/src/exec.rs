//! The `exec` tool: runs a shell command in the caller's sandbox (never on the agent's
//! machine) after the role's exec blocklist allowed it, with a fresh Porter token in
//! that one command's environment, revoked when the command ends.
//!
//! The blocklist is defence in depth only: shell quoting, `$IFS`, `$(printf …)`,
//! interpreters, `find -delete` and `xargs` get past any list of patterns. What holds
//! by construction is the sandbox: no credentials, no network, and at `/agent` only the
//! caller's view of the workspace — what their role's `read` rules allow, never
//! runtime state — in a sandbox no caller with a different view shares.
//!
//! Touches nothing itself: the sandbox backend runs the command, Porter's control
//! socket issues the token. Without a sandbox every call is refused (fail closed).

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::{StreamExt, future::BoxFuture};
use globset::{Glob, GlobSetBuilder};
use saint_config::{
    ErrorChain, RoleConfig,
    sandbox_contract::{SANDBOX_SCRATCH_MOUNT_PATH, SANDBOX_WORKSPACE_ROOTS},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, json};

use super::{Permit, ToolContext, ToolError, ToolOutput, TypedTool};
use saint_sandbox::{
    ExecEvent, ExecRequest, Sandbox, ScopeKey, View,
    porter_control::{HeldRequest, PorterControl, RequestGrant, RequestHold, TokenGrant},
};

use crate::guard::{caller_view, role_paths::RolePaths};
use parking_lot::Mutex;

/// `exec` without a sandbox: refuses everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExecUnavailableTool;

impl TypedTool for ExecUnavailableTool {
    type Input = ExecInput;
    const NAME: &'static str = "exec";
    const DESCRIPTION: &'static str = "Run a shell command in the sandbox.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        _context: &'a ToolContext,
        _input: ExecInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async {
            Err(ToolError::Denied(
                "commands cannot be run: no sandbox is available".to_string(),
            ))
        })
    }
}

/// Output limits for what the model sees.
#[derive(Clone, Copy, Debug)]
pub struct ExecLimits {
    /// Bytes of stdout shown to the model; the rest is counted, not shown.
    pub max_stdout_bytes: usize,
    /// Bytes of stderr shown to the model.
    pub max_stderr_bytes: usize,
    /// Longest timeout a call may ask for.
    pub max_timeout: Duration,
}

impl Default for ExecLimits {
    fn default() -> Self {
        Self {
            max_stdout_bytes: 32 * 1024,
            max_stderr_bytes: 16 * 1024,
            max_timeout: Duration::from_secs(3600),
        }
    }
}

/// Wrappers that run the next word as the command (`env gh …`, `time gh …`).
const COMMAND_WRAPPERS: &[&str] = &[
    "env", "command", "exec", "time", "nohup", "xargs", "nice", "timeout", "sudo",
];

/// Shell operators that start a new command (split naively, quotes or not: splitting
/// too eagerly only produces more candidates to check, never fewer).
const SEPARATORS: &[&str] = &[
    "&&", "||", ";", "|", "&", "\n", "$(", "`", "(", ")", "{", "}",
];

fn words(text: &str) -> Vec<String> {
    shell_words::split(text)
        .unwrap_or_else(|_| text.split_whitespace().map(str::to_string).collect())
}

/// Every command the line may run, as word lists: each piece between shell operators,
/// and (recursively) quoted arguments that look like commands (`sh -c '…'`).
pub fn command_segments(command: &str) -> Vec<Vec<String>> {
    fn collect(text: &str, depth: usize, out: &mut Vec<Vec<String>>) {
        let mut pieces = vec![text.to_string()];
        for separator in SEPARATORS {
            pieces = pieces
                .iter()
                .flat_map(|piece| {
                    piece
                        .split(separator)
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
        }
        for piece in pieces {
            let piece_words = words(&piece);
            if piece_words.is_empty() {
                continue;
            }
            if depth < 3 {
                for word in piece_words
                    .iter()
                    .filter(|word| word.contains(char::is_whitespace))
                {
                    collect(word, depth + 1, out);
                }
            }
            out.push(piece_words);
        }
    }
    let mut segments = Vec::new();
    collect(command, 0, &mut segments);
    segments
}

/// The strings blocklist globs are matched against: the whole normalised command line,
/// each segment, and each segment with its program's directory stripped
/// (`/usr/bin/rm -rf /` → `rm -rf /`) and wrappers skipped (`env rm …` → `rm …`).
pub fn blocklist_candidates(command: &str) -> Vec<String> {
    let mut candidates = vec![words(command).join(" ")];
    for segment in command_segments(command) {
        candidates.push(segment.join(" "));
        let mut start = 0;
        while start < segment.len()
            && (segment[start].contains('=')
                || COMMAND_WRAPPERS.contains(&program_name(&segment[start])))
        {
            start += 1;
        }
        if let Some(program) = segment.get(start) {
            let mut stripped = vec![program_name(program).to_string()];
            stripped.extend(segment[start + 1..].iter().cloned());
            candidates.push(stripped.join(" "));
        }
    }
    candidates.sort();
    candidates.dedup();
    candidates
}

fn program_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Checks `command` against a role's blocklist; absent means the role has no exec.
/// An unparseable pattern refuses everything (fail closed).
pub fn check_blocklist(command: &str, blocklist: Option<&[String]>) -> Result<(), ToolError> {
    let Some(blocklist) = blocklist else {
        return Err(ToolError::Denied(
            "your role may not run commands".to_string(),
        ));
    };
    let mut builder = GlobSetBuilder::new();
    for pattern in blocklist {
        let glob = Glob::new(pattern.trim()).map_err(|_| {
            ToolError::Denied(
                "commands are disabled: the role's exec blocklist is invalid".to_string(),
            )
        })?;
        builder.add(glob);
    }
    let set = builder.build().map_err(|_| {
        ToolError::Denied("commands are disabled: the role's exec blocklist is invalid".to_string())
    })?;
    for candidate in blocklist_candidates(command) {
        if let Some(index) = set.matches(&candidate).first() {
            return Err(ToolError::Denied(format!(
                "this command is blocked for your role (matches `{}`)",
                blocklist[*index].trim()
            )));
        }
    }
    Ok(())
}

/// The checks a command line passes before anything starts, whichever tool runs it
/// (`exec`, `process`), so no tool is a way around them: not empty, not matched by the
/// role's blocklist (absent: the role runs no commands), a working directory beneath
/// `/workspace` or `/agent` (default `/workspace`). Returns the working directory.
pub fn admit_command(
    command: &str,
    cwd: Option<String>,
    role: &RoleConfig,
) -> Result<String, ToolError> {
    if command.trim().is_empty() {
        return Err(ToolError::InvalidInput("command is empty".to_string()));
    }
    // The blocklist decides before anything starts: no sandbox, no token.
    check_blocklist(command, role.exec_blocklist.as_deref())?;
    let cwd = cwd.unwrap_or_else(|| SANDBOX_SCRATCH_MOUNT_PATH.to_string());
    let inside = SANDBOX_WORKSPACE_ROOTS
        .iter()
        .any(|root| cwd == *root || cwd.starts_with(&format!("{root}/")));
    if !inside {
        return Err(ToolError::InvalidInput(
            "cwd must be under /workspace or /agent".to_string(),
        ));
    }
    Ok(cwd)
}

/// What Porter's audit log records of a command: a digest, never the line itself (it
/// may hold values the caller typed).
fn command_digest(command: &str) -> String {
    use sha2::{Digest, Sha256};
    format!(
        "sha256:{}",
        &hex::encode(Sha256::digest(command.as_bytes()))[..16]
    )
}

/// A request through Porter as an approval names it and its one-time grant admits it:
/// the credential, the host (`name`, or `name:port`), the method and the path as
/// Porter reported it held.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PorterRequest {
    pub cli: String,
    pub host: String,
    pub method: String,
    pub path: String,
}

impl std::fmt::Display for PorterRequest {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "{} https://{}{}",
            self.method, self.host, self.path
        )
    }
}

/// A request Porter held while a command ran, and which of the role's approval rules
/// (by index in `approvals`) holds it. The usage log records these as `porterHeld`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldPorterRequest {
    pub rule: usize,
    #[serde(flatten)]
    pub request: PorterRequest,
}

/// The metering key under which a command's held requests are recorded.
pub const PORTER_HELD: &str = "porterHeld";

/// The role's approval rules that name Porter requests, as Porter's holds, with the
/// index of each rule in `role.approvals` (Porter reports a held request by its hold's
/// index).
pub fn porter_holds(role: &RoleConfig) -> (Vec<RequestHold>, Vec<usize>) {
    role.approvals
        .iter()
        .enumerate()
        .filter_map(|(index, rule)| {
            let porter = rule.porter.as_ref()?;
            Some((
                RequestHold {
                    hosts: porter.hosts.clone(),
                    methods: porter.methods.clone(),
                    paths: porter.paths.clone(),
                },
                index,
            ))
        })
        .unzip()
}

/// Whether the command calls one of the Porter CLIs (as a program, not an argument).
pub fn invokes_porter_cli(command: &str, clis: &[String]) -> bool {
    command_segments(command).iter().any(|segment| {
        segment
            .iter()
            .find(|word| !word.contains('=') && !COMMAND_WRAPPERS.contains(&program_name(word)))
            .is_some_and(|program| clis.iter().any(|cli| cli == program_name(program)))
    })
}

/// Keeps the first `limit` bytes, counting the rest.
#[derive(Debug, Default)]
pub struct CappedOutput {
    kept: Vec<u8>,
    total: usize,
}

impl CappedOutput {
    fn push(&mut self, data: &[u8], limit: usize) {
        self.total += data.len();
        let room = limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// The bytes kept.
    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// Whether bytes were dropped at the cap.
    pub fn truncated(&self) -> bool {
        self.total > self.kept.len()
    }

    fn render(&self, stream: &str) -> String {
        let mut text = String::from_utf8_lossy(&self.kept).into_owned();
        let hidden = self.total - self.kept.len();
        if hidden > 0 {
            text.push_str(&format!("\n[… {hidden} more bytes of {stream} not shown]"));
        }
        text
    }
}

/// `exec` backed by a sandbox.
pub struct ExecTool {
    sandbox: Arc<dyn Sandbox>,
    porter: Option<PorterControl>,
    limits: ExecLimits,
    /// The sandbox each session used last, so a session whose view changed (a role
    /// change) lets go of its old sandbox at once instead of at the idle timeout.
    last_scope: Mutex<HashMap<String, ScopeKey>>,
    /// Callers' views, recomputed only when the workspace's listed folders change.
    views: Arc<caller_view::ViewCache>,
}

impl ExecTool {
    /// `exec` running in `sandbox`, registering Porter tokens through `porter` (none:
    /// commands get no token, so Porter CLIs are refused by Porter).
    pub fn new(
        sandbox: Arc<dyn Sandbox>,
        porter: Option<PorterControl>,
        limits: ExecLimits,
    ) -> Self {
        Self {
            sandbox,
            porter,
            limits,
            last_scope: Mutex::new(HashMap::new()),
            views: Arc::default(),
        }
    }

    /// The caller's view of the workspace, from the cache while the workspace's listed
    /// folders are unchanged, else read off the disk (blocking I/O either way, so off
    /// the async workers).
    async fn view_for(&self, context: &ToolContext) -> Result<View, ToolError> {
        // Everything the view depends on besides the disk: who asks, and the rules.
        let key = format!(
            "{}\0{}\0{}\0{}\0{}",
            context.caller.role_name,
            context.caller.slug,
            serde_json::to_string(&context.caller.role.files).unwrap_or_default(),
            serde_json::to_string(&context.config.file_access).unwrap_or_default(),
            serde_json::to_string(&context.caller.role.skills).unwrap_or_default(),
        );
        let role = context.caller.role.clone();
        let config = context.config.clone();
        let slug = context.caller.slug.clone();
        let workspace = context.workspace.clone();
        let views = self.views.clone();
        let computed = tokio::task::spawn_blocking(move || {
            // Below `skills/` the sandbox shows (and so seeds) only the skills the role
            // may use.
            views.view_with_skills(&key, &workspace, Some(&role.skills), || {
                RolePaths::new(&role, &config.file_access, &slug)
            })
        })
        .await
        .map_err(|error| {
            ToolError::Failed(format!("failed to compute the sandbox view: {error}"))
        })?;
        computed.map_err(|error| match error {
            caller_view::CacheError::Rules(_) => {
                ToolError::Failed("failed to load the file rules of your role".to_string())
            }
            caller_view::CacheError::View(error @ caller_view::ViewError::TooManyEntries { .. }) => {
                ToolError::Denied(error.to_string())
            }
            caller_view::CacheError::View(error @ caller_view::ViewError::Read { .. }) => {
                tracing::error!(error = %ErrorChain(&error), "failed to compute the sandbox view; exec refused");
                ToolError::Failed(
                    "commands cannot run right now: the sandbox is unavailable".to_string(),
                )
            }
        })
    }

    /// Records `scope` as the session's sandbox; discards the one it used before when
    /// no other session uses that one now.
    async fn switch_scope(&self, session: &str, scope: &ScopeKey) {
        let previous = {
            let mut last = self.last_scope.lock();
            let previous = last.insert(session.to_string(), scope.clone());
            match previous {
                Some(old) if old != *scope && !last.values().any(|other| *other == old) => {
                    Some(old)
                }
                _ => None,
            }
        };
        if let Some(old) = previous {
            tracing::info!(
                scope = old.id(),
                "the caller's view changed; discarding their old sandbox"
            );
            if let Err(error) = self.sandbox.discard(&old).await {
                tracing::warn!(error = %ErrorChain(&error), "failed to discard an old sandbox; the idle reaper will");
            }
        }
    }
}

/// What `exec` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecInput {
    /// Shell command line
    pub command: String,
    /// Working directory under /workspace or /agent (default /workspace)
    pub cwd: Option<String>,
    /// Kill the command after this many seconds
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
}

impl TypedTool for ExecTool {
    type Input = ExecInput;
    const NAME: &'static str = "exec";
    const DESCRIPTION: &'static str = "Run a shell command (sh -c) in your sandbox: no network, your scratch copy of the \
         workspace at /workspace (writable, the default directory) and, read-only at /agent, \
         the parts of the real workspace you may read. Installed CLIs work as usual. Returns \
         stdout, stderr and the exit code.";

    fn run<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: ExecInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let cwd = admit_command(&input.command, input.cwd, &context.caller.role)?;
            let sandbox_config = &context.config.sandbox;
            let default_timeout = Duration::from_secs(sandbox_config.exec_timeout_seconds.max(1));
            let timeout = input
                .timeout_seconds
                .map(Duration::from_secs)
                .unwrap_or(default_timeout)
                .clamp(Duration::from_secs(1), self.limits.max_timeout);
            let porter_clis = &context.config.porter.clis;
            let porter = json!(invokes_porter_cli(&input.command, porter_clis));
            let SandboxRun {
                stdout,
                stderr,
                ending,
                mut metering,
                held,
            } = self
                .run_in_sandbox(
                    context,
                    Some(permit),
                    SandboxCommand {
                        command: input.command,
                        cwd,
                        stdin: None,
                        timeout,
                        porter_key: !porter_clis.is_empty(),
                        max_stdout_bytes: self.limits.max_stdout_bytes,
                    },
                )
                .await?;
            metering.insert("porter".to_string(), porter);
            metering.insert("stdoutBytes".to_string(), json!(stdout.total));
            metering.insert("stderrBytes".to_string(), json!(stderr.total));
            let exit_code = match ending {
                Ending::Exited(code) => code,
                Ending::TimedOut => return Err(ToolError::Timeout(timeout.as_secs())),
            };
            metering.insert("exitCode".to_string(), json!(exit_code));
            metering.insert(
                "truncated".to_string(),
                json!(stdout.total > stdout.kept.len() || stderr.total > stderr.kept.len()),
            );
            let mut content = stdout.render("stdout");
            if stderr.total > 0 {
                if !content.is_empty() && !content.ends_with('\n') {
                    content.push('\n');
                }
                content.push_str("[stderr]\n");
                content.push_str(&stderr.render("stderr"));
            }
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            content.push_str(&format!("[exit code {exit_code}]"));
            if !held.is_empty() {
                content.push('\n');
                content.push_str(held.trim_end());
            }
            Ok(ToolOutput {
                content,
                untrusted: false,
                metering,
                image: None,
                audio: None,
            })
        })
    }
}

/// How a sandbox command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    TimedOut,
}

/// One command for [`ExecTool::run_in_sandbox`].
#[derive(Debug)]
pub struct SandboxCommand {
    /// The command line (`sh -c`).
    pub command: String,
    /// Working directory under `/workspace` or `/agent`.
    pub cwd: String,
    /// Bytes for its stdin.
    pub stdin: Option<Vec<u8>>,
    /// When the runner kills it.
    pub timeout: Duration,
    /// Whether it gets a Porter key (and so the proxy, placeholders and CA).
    pub porter_key: bool,
    /// Bytes of stdout kept (the rest is counted).
    pub max_stdout_bytes: usize,
}

/// What a sandbox command produced.
#[derive(Debug)]
pub struct SandboxRun {
    pub stdout: CappedOutput,
    pub stderr: CappedOutput,
    pub ending: Ending,
    /// Facts for the usage log (sandbox scope and view, duration, Porter trouble,
    /// requests held for an approval).
    pub metering: Map<String, serde_json::Value>,
    /// Lines naming the requests Porter held for an approval (empty: none).
    pub held: String,
}

/// The caller's sandbox: which one, what its `/agent` shows, and the facts the usage
/// log records about it.
pub struct CallerSandbox {
    pub scope: ScopeKey,
    pub view: View,
    pub metering: Map<String, serde_json::Value>,
}

/// A Porter key registered for one command: its token (to revoke), the environment
/// that carries it, and which approval rule each of its holds stands for.
pub struct PorterKey {
    pub token: String,
    pub env: std::collections::BTreeMap<String, String>,
    pub hold_rules: Vec<usize>,
}

/// Records what Porter held under a command's key in `metering` (as [`PORTER_HELD`])
/// and returns the lines that tell the model, empty when nothing was held.
pub fn note_held(
    held: Vec<HeldRequest>,
    hold_rules: &[usize],
    metering: &mut Map<String, serde_json::Value>,
) -> String {
    let held: Vec<HeldPorterRequest> = held
        .into_iter()
        .filter_map(|held| {
            Some(HeldPorterRequest {
                rule: *hold_rules.get(held.hold)?,
                request: PorterRequest {
                    cli: held.cli,
                    host: held.host,
                    method: held.method,
                    path: held.path,
                },
            })
        })
        .collect();
    if held.is_empty() {
        return String::new();
    }
    let lines: String = held
        .iter()
        .map(|held| format!("[porter held for approval: {}]\n", held.request))
        .collect();
    metering.insert(PORTER_HELD.to_string(), json!(held));
    lines
}

impl ExecTool {
    /// The backend commands run in (for the `process` tool, which shares it).
    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// The limits on what the model sees of a command's output.
    pub fn limits(&self) -> ExecLimits {
        self.limits
    }

    /// The caller's sandbox for this call: their scope and their view, the session's
    /// previous sandbox let go if the view changed.
    pub async fn caller_sandbox(&self, context: &ToolContext) -> Result<CallerSandbox, ToolError> {
        let viewer = caller_view::viewer(
            &context.caller.role_name,
            &context.caller.role,
            &context.caller.slug,
        );
        let scope = ScopeKey::for_caller(
            context.config.sandbox.scope,
            &context.caller.session_key,
            &viewer,
        );
        let view = self.view_for(context).await?;
        self.switch_scope(&context.caller.session_key, &scope).await;
        let mut metering = Map::new();
        metering.insert("sandboxScope".to_string(), json!(scope.scope_label()));
        metering.insert("sandboxView".to_string(), json!(view.digest()));
        Ok(CallerSandbox {
            scope,
            view,
            metering,
        })
    }

    /// A Porter key bound to the caller and `command`, living `lifetime` unless revoked
    /// sooner; none without Porter (a failure is logged and noted in `metering`: the
    /// command runs without a key, so Porter refuses its CLIs).
    ///
    /// The key carries the role's Porter approval rules as holds, and for a call an
    /// approver said yes to (`permit`), a one-time grant for each request approved.
    pub async fn register_porter_key(
        &self,
        context: &ToolContext,
        permit: Option<&Permit>,
        command: &str,
        lifetime: Duration,
        metering: &mut Map<String, serde_json::Value>,
    ) -> Option<PorterKey> {
        let porter = self.porter.as_ref()?;
        let (hold, hold_rules) = porter_holds(&context.caller.role);
        let grants = match permit.and_then(|permit| Some((permit, permit.approval()?))) {
            Some((permit, code)) => permit
                .porter_grants()
                .iter()
                .map(|request| RequestGrant {
                    approval: code.to_string(),
                    host: request.host.clone(),
                    method: request.method.clone(),
                    path: request.path.clone(),
                })
                .collect(),
            None => Vec::new(),
        };
        let grant = TokenGrant {
            session: context.caller.session_key.clone(),
            contact: context.caller.slug.clone(),
            role: context.caller.role_name.clone(),
            command: Some(command_digest(command)),
            hold,
            grants,
        };
        match porter.register(&grant, lifetime).await {
            // The proxy URL with this command's key, its placeholders and the CA: the
            // command reaches its CLIs' hosts only through Porter.
            Ok(registration) => Some(PorterKey {
                token: registration.token,
                env: registration.env,
                hold_rules,
            }),
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "failed to register a porter key; the command runs without one");
                metering.insert("porterTokenError".to_string(), json!(true));
                None
            }
        }
    }

    /// Revokes a key whose command ended (a lost revoke expires by itself) and returns
    /// the requests Porter held for an approval under it.
    pub async fn revoke_porter_key(&self, token: &str) -> Vec<HeldRequest> {
        let Some(porter) = &self.porter else {
            return Vec::new();
        };
        match porter.revoke(token).await {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "failed to revoke porter token; it expires by itself");
                Vec::new()
            }
        }
    }

    /// Runs `command` in the caller's sandbox (their view, their scope), with a Porter
    /// key of its own when asked for, revoked when it ends. `exec` and stdio MCP
    /// servers both run here, so both get the same sandbox and the same Porter path.
    pub async fn run_in_sandbox(
        &self,
        context: &ToolContext,
        permit: Option<&Permit>,
        command: SandboxCommand,
    ) -> Result<SandboxRun, ToolError> {
        let CallerSandbox {
            scope,
            view,
            mut metering,
        } = self.caller_sandbox(context).await?;

        let mut env = std::collections::BTreeMap::new();
        let mut token = None;
        if command.porter_key {
            // A lost revoke still expires shortly after the command's own deadline.
            let lifetime = command.timeout + Duration::from_secs(60);
            if let Some(key) = self
                .register_porter_key(context, permit, &command.command, lifetime, &mut metering)
                .await
            {
                env.extend(key.env);
                token = Some((key.token, key.hold_rules));
            }
        }

        let request = ExecRequest {
            command: command.command,
            cwd: command.cwd,
            env,
            timeout: command.timeout,
            stdin: command.stdin,
        };
        let started = std::time::Instant::now();
        let result = self
            .run(
                &scope,
                &view,
                request,
                command.timeout,
                command.max_stdout_bytes,
            )
            .await;
        let mut held = String::new();
        if let Some((token, hold_rules)) = &token {
            let requests = self.revoke_porter_key(token).await;
            held = note_held(requests, hold_rules, &mut metering);
        }
        metering.insert(
            "durationMs".to_string(),
            json!(started.elapsed().as_millis() as u64),
        );
        let (stdout, stderr, ending) = result?;
        Ok(SandboxRun {
            stdout,
            stderr,
            ending,
            metering,
            held,
        })
    }

    async fn run(
        &self,
        scope: &ScopeKey,
        view: &View,
        request: ExecRequest,
        timeout: Duration,
        max_stdout_bytes: usize,
    ) -> Result<(CappedOutput, CappedOutput, Ending), ToolError> {
        let mut events = self
            .sandbox
            .exec(scope, view, request)
            .await
            .map_err(|error| {
                tracing::error!(error = %ErrorChain(&error), "sandbox unavailable; exec refused");
                // A view refused at bind time (the workspace changed since the walk) is
                // not offered again: the next command walks afresh.
                self.views.forget_all();
                ToolError::Failed(
                    "commands cannot run right now: the sandbox is unavailable".to_string(),
                )
            })?;
        let (mut stdout, mut stderr) = (CappedOutput::default(), CappedOutput::default());
        // The runner enforces the timeout; this backstop only guards a wedged runner.
        let backstop = tokio::time::sleep(timeout + Duration::from_secs(30));
        tokio::pin!(backstop);
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = &mut backstop => return Ok((stdout, stderr, Ending::TimedOut)),
            };
            match event {
                Some(Ok(ExecEvent::Stdout(data))) => stdout.push(&data, max_stdout_bytes),
                Some(Ok(ExecEvent::Stderr(data))) => {
                    stderr.push(&data, self.limits.max_stderr_bytes)
                }
                Some(Ok(ExecEvent::Exit(code))) => {
                    return Ok((stdout, stderr, Ending::Exited(code)));
                }
                Some(Ok(ExecEvent::TimedOut)) => return Ok((stdout, stderr, Ending::TimedOut)),
                Some(Err(error)) => {
                    tracing::error!(error = %ErrorChain(&error), "sandbox command failed");
                    return Err(ToolError::Failed(
                        "the command could not be run in the sandbox".to_string(),
                    ));
                }
                None => {
                    return Err(ToolError::Failed(
                        "the sandbox ended the command unexpectedly".to_string(),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocklist(patterns: &[&str]) -> Vec<String> {
        patterns.iter().map(|pattern| pattern.to_string()).collect()
    }

    #[test]
    fn absent_blocklist_means_no_exec_and_empty_means_anything() {
        assert!(matches!(
            check_blocklist("ls", None),
            Err(ToolError::Denied(_))
        ));
        assert!(check_blocklist("rm -rf /tmp/x", Some(&[])).is_ok());
    }

    #[test]
    fn blocklist_matches_normalised_commands_and_every_segment() {
        let list = blocklist(&["rm -rf *", "gh auth *", "curl*"]);
        let blocked = [
            "rm -rf /",
            "rm   -rf   '/'",
            "echo hi; rm -rf /",
            "echo hi&&rm -rf /",
            "true | /usr/bin/rm -rf /",
            "env FOO=1 rm -rf /",
            "sh -c 'rm -rf /'",
            "echo $(gh auth token)",
            "X=1 gh auth status",
            "curl https://example.com",
        ];
        for command in blocked {
            assert!(
                matches!(
                    check_blocklist(command, Some(&list)),
                    Err(ToolError::Denied(_))
                ),
                "{command}"
            );
        }
        for command in ["rm -r build", "gh pr list", "echo rm", "ls -la"] {
            assert!(check_blocklist(command, Some(&list)).is_ok(), "{command}");
        }
    }

    #[test]
    fn porter_rules_become_holds_and_held_requests_name_their_rule() {
        let role: RoleConfig = serde_json::from_value(json!({"approvals": [
            {"tools": ["exec"], "approvers": {"roles": ["owner"]}},
            {"porter": {"hosts": ["api.github.com"], "methods": ["PUT"],
                        "paths": ["/repos/*/*/pulls/*/merge"]},
             "approvers": {"roles": ["owner"]}},
        ]}))
        .unwrap();
        let (holds, rules) = porter_holds(&role);
        assert_eq!(rules, [1], "only the Porter rule is a hold, by its index");
        assert_eq!(holds[0].paths, ["/repos/*/*/pulls/*/merge"]);
        let held = |hold: usize| HeldRequest {
            hold,
            cli: "gh".into(),
            host: "api.github.com".into(),
            method: "PUT".into(),
            path: "/repos/o/r/pulls/1/merge".into(),
        };
        let mut metering = Map::new();
        // A hold index Porter could not have been given is dropped, not trusted.
        let lines = note_held(vec![held(0), held(7)], &rules, &mut metering);
        assert_eq!(
            lines,
            "[porter held for approval: PUT https://api.github.com/repos/o/r/pulls/1/merge]\n"
        );
        assert_eq!(
            metering[PORTER_HELD],
            json!([{"rule": 1, "cli": "gh", "host": "api.github.com", "method": "PUT",
                    "path": "/repos/o/r/pulls/1/merge"}])
        );
        let mut nothing = Map::new();
        assert_eq!(note_held(Vec::new(), &rules, &mut nothing), "");
        assert!(nothing.is_empty());
    }

    #[test]
    fn an_invalid_pattern_disables_exec() {
        let list = blocklist(&["rm [-rf"]);
        assert!(matches!(
            check_blocklist("ls", Some(&list)),
            Err(ToolError::Denied(_))
        ));
    }

    #[test]
    fn porter_cli_detection_looks_at_programs_not_arguments() {
        let clis = vec!["gh".to_string()];
        assert!(invokes_porter_cli("gh pr list", &clis));
        assert!(invokes_porter_cli(
            "cd repo && GH_PAGER= gh pr list | head",
            &clis
        ));
        assert!(invokes_porter_cli("/tmp/saint-bin/gh --version", &clis));
        assert!(!invokes_porter_cli("echo gh", &clis));
        assert!(!invokes_porter_cli("ghost", &clis));
    }

    #[test]
    fn capped_output_keeps_the_head_and_counts_the_rest() {
        let mut output = CappedOutput::default();
        output.push(b"hello ", 8);
        output.push(b"world", 8);
        assert_eq!(
            output.render("stdout"),
            "hello wo\n[… 3 more bytes of stdout not shown]"
        );
    }
}
