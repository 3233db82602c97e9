//! The `process` tool: starts a command in the background in the caller's sandbox,
//! then `poll` (the output since the last poll, and the exit status), `write` (stdin),
//! `kill` (the whole process group) and `list`.
//!
//! A start passes exactly the checks of `exec` ([`admit_command`]: the role's blocklist,
//! the working directory) and runs in the same sandbox `exec` would use, with the same
//! Porter key path, so it is never a way around them. The processes live in the
//! sandbox's runner: they die with the sandbox. The runner keeps each one's unread
//! output capped (the oldest unread bytes dropped and counted), enforces the role's
//! `process.maxRunning` per person, and shows and touches only the processes of the
//! person asking (an owner tag derived here from the caller), even in a sandbox two
//! people share.
//!
//! Touches nothing itself: the sandbox backend and its runner do. Without a sandbox the
//! catalog's [`ProcessUnavailableTool`] refuses every call (fail closed).

use std::{collections::HashMap, sync::Arc, time::Duration};

use futures::future::BoxFuture;
use saint_config::ErrorChain;
use saint_sandbox::{
    Lease, ProcessAnswer, RunnerRequest, SandboxError, ScopeKey,
    runner_process::{
        OwnerRequest, ProcessReply, ProcessState, ProcessStatus, ProcessTarget, SpawnRequest,
        WriteRequest,
    },
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{Caller, Permit, ToolContext, ToolError, ToolOutput, TypedTool};
use crate::exec::{CallerSandbox, ExecTool, admit_command, invokes_porter_cli, note_held};
use parking_lot::Mutex;

/// The metering key under which a background command's start call is recorded when
/// Porter held requests of it for an approval: what the approval reruns.
pub const PORTER_HELD_START: &str = "porterHeldStart";

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProcessAction {
    // Start `command` in the background; returns its id. (Plain comments: a
    // documented variant would make the schema a `oneOf`, which tool APIs refuse.)
    Start,
    // The output since the last poll, and whether it still runs (its exit code once
    // it ended).
    Poll,
    // Write `data` to its stdin.
    Write,
    // Kill it and everything it started.
    Kill,
    // The caller's background processes.
    List,
}

/// What `process` takes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessInput {
    /// start, poll, write, kill or list
    pub action: ProcessAction,
    /// start: shell command line
    pub command: Option<String>,
    /// start: working directory under /workspace or /agent (default /workspace)
    pub cwd: Option<String>,
    /// start: kill the process after this many seconds (default and most: one hour)
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
    /// poll, write, kill: the id start returned
    pub id: Option<String>,
    /// write: text for its stdin (end a line with "\n")
    pub data: Option<String>,
    /// write: close its stdin afterwards (it sees end of input)
    pub close_stdin: Option<bool>,
}

/// `process` without a sandbox: refuses everything.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessUnavailableTool;

impl TypedTool for ProcessUnavailableTool {
    type Input = ProcessInput;
    const NAME: &'static str = "process";
    const DESCRIPTION: &'static str = "Run a command in the background in the sandbox.";

    fn run<'a>(
        &'a self,
        _permit: &'a Permit,
        _context: &'a ToolContext,
        _input: ProcessInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async {
            Err(ToolError::Denied(
                "commands cannot be run: no sandbox is available".to_string(),
            ))
        })
    }
}

/// What the agent holds for a process that may still run: the sandbox lease (so the
/// idle reaper leaves the sandbox alone) and the Porter key, until a poll or kill sees
/// it end, or its deadline passes.
struct Held {
    /// The key's token and which approval rule each of its holds stands for.
    porter_token: Option<(String, Vec<usize>)>,
    /// The start call's arguments: what an approval of a request it had held reruns.
    start: Value,
    /// Owns the lease; drops it at the process's deadline if nobody saw it end sooner.
    lease_holder: tokio::task::JoinHandle<()>,
}

/// `process` backed by the sandbox `exec` uses.
pub struct ProcessTool {
    exec: Arc<ExecTool>,
    held: Mutex<HashMap<(ScopeKey, String), Held>>,
}

impl ProcessTool {
    /// `process` sharing `exec`'s sandbox, view cache and Porter.
    pub fn new(exec: Arc<ExecTool>) -> Self {
        Self {
            exec,
            held: Mutex::new(HashMap::new()),
        }
    }

    async fn ask(
        &self,
        sandbox: &CallerSandbox,
        request: RunnerRequest,
    ) -> Result<ProcessAnswer, SandboxError> {
        saint_sandbox::process(
            self.exec.sandbox().as_ref(),
            &sandbox.scope,
            &sandbox.view,
            request,
        )
        .await
    }

    fn hold(&self, scope: &ScopeKey, id: &str, held: Held) {
        let mut all = self.held.lock();
        // Past their deadline (nobody polled them to the end): their keys expired too.
        all.retain(|_, held| !held.lease_holder.is_finished());
        let previous = all.insert((scope.clone(), id.to_string()), held);
        drop(all);
        // A runner that was replaced hands out ids afresh: the old holder is stale.
        if let Some(previous) = previous {
            previous.lease_holder.abort();
        }
    }

    /// Lets go of what was held for a process seen ended (or gone). Requests Porter held
    /// for an approval under its key are noted in `metering` (with the start call that
    /// an approval reruns, as [`PORTER_HELD_START`]); returns the lines telling the
    /// model, empty when none.
    async fn release(
        &self,
        scope: &ScopeKey,
        id: &str,
        metering: &mut Map<String, Value>,
    ) -> String {
        let held = self.held.lock().remove(&(scope.clone(), id.to_string()));
        let Some(held) = held else {
            return String::new();
        };
        held.lease_holder.abort();
        let Some((token, hold_rules)) = held.porter_token else {
            return String::new();
        };
        let requests = self.exec.revoke_porter_key(&token).await;
        let lines = note_held(requests, &hold_rules, metering);
        if !lines.is_empty() {
            metering.insert(PORTER_HELD_START.to_string(), held.start);
        }
        lines
    }

    async fn start(
        &self,
        permit: &Permit,
        context: &ToolContext,
        input: ProcessInput,
    ) -> Result<ToolOutput, ToolError> {
        let command = input
            .command
            .ok_or_else(|| ToolError::InvalidInput("start needs a command".to_string()))?;
        // The call as the model made it, for an approval of a request it gets held.
        let mut start = json!({"action": "start", "command": command});
        if let Some(cwd) = &input.cwd {
            start["cwd"] = json!(cwd);
        }
        if let Some(seconds) = input.timeout_seconds {
            start["timeout_seconds"] = json!(seconds);
        }
        // Exactly the checks `exec` makes, before any sandbox or key exists.
        let cwd = admit_command(&command, input.cwd, &context.caller.role)?;
        let max_timeout = self.exec.limits().max_timeout;
        let timeout = input
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(max_timeout)
            .clamp(Duration::from_secs(1), max_timeout);
        let mut sandbox = self.exec.caller_sandbox(context).await?;
        let porter_clis = &context.config.porter.clis;
        sandbox.metering.insert(
            "porter".to_string(),
            json!(invokes_porter_cli(&command, porter_clis)),
        );
        let key = if porter_clis.is_empty() {
            None
        } else {
            // A key nobody revokes (the process was never polled to its end) expires
            // shortly after the process's own deadline.
            let lifetime = timeout + Duration::from_secs(60);
            self.exec
                .register_porter_key(
                    context,
                    Some(permit),
                    &command,
                    lifetime,
                    &mut sandbox.metering,
                )
                .await
        };
        let limit = context.caller.role.process.max_running;
        let request = RunnerRequest::Spawn(SpawnRequest {
            command: command.clone(),
            cwd,
            env: key.as_ref().map(|key| key.env.clone()).unwrap_or_default(),
            timeout_seconds: Some(timeout.as_secs()),
            token: String::new(),
            owner: owner_tag(&context.caller),
            max_running: limit,
            buffer_bytes: self.exec.limits().max_stdout_bytes as u32,
        });
        let (id, lease) = match self.ask(&sandbox, request).await {
            Ok(ProcessAnswer {
                reply: ProcessReply::Started { id },
                lease,
                ..
            }) => (id, lease),
            refused => {
                // Nothing runs: its key goes now rather than at its expiry.
                if let Some(key) = &key {
                    self.exec.revoke_porter_key(&key.token).await;
                }
                return Err(match refused {
                    Err(SandboxError::Refused {
                        code: "limit_reached",
                        message,
                    }) => ToolError::Denied(format!(
                        "{message}: your role lets you run at most {limit} background processes \
                         at once (process.maxRunning); kill one or wait for one to end"
                    )),
                    Err(SandboxError::Refused {
                        code: "bad_cwd",
                        message,
                    }) => ToolError::InvalidInput(message),
                    other => unavailable(other.err().as_ref()),
                });
            }
        };
        self.hold(
            &sandbox.scope,
            &id,
            Held {
                porter_token: key.map(|key| (key.token, key.hold_rules)),
                start,
                lease_holder: hold_lease(lease, timeout),
            },
        );
        let mut metering = sandbox.metering;
        metering.insert("action".to_string(), json!("start"));
        metering.insert("processId".to_string(), json!(id));
        metering.insert("timeoutSeconds".to_string(), json!(timeout.as_secs()));
        Ok(ToolOutput {
            content: format!(
                "started background process {id} (poll it for its output; it is killed after {} s)",
                timeout.as_secs()
            ),
            untrusted: false,
            metering,
            image: None,
            audio: None,
        })
    }

    async fn act(
        &self,
        context: &ToolContext,
        action: ProcessAction,
        input: ProcessInput,
    ) -> Result<ToolOutput, ToolError> {
        let owner = owner_tag(&context.caller);
        let id = || {
            input
                .id
                .clone()
                .filter(|id| !id.trim().is_empty())
                .ok_or_else(|| {
                    ToolError::InvalidInput(format!("{action:?} needs an id").to_lowercase())
                })
        };
        let request = match action {
            ProcessAction::Poll => RunnerRequest::Poll(target(&owner, id()?)),
            ProcessAction::Kill => RunnerRequest::Kill(target(&owner, id()?)),
            ProcessAction::Write => RunnerRequest::Write(WriteRequest {
                token: String::new(),
                owner,
                id: id()?,
                data: input.data.clone().unwrap_or_default(),
                close: input.close_stdin.unwrap_or(false),
            }),
            ProcessAction::List => RunnerRequest::List(OwnerRequest {
                token: String::new(),
                owner,
            }),
            // Answered by `start` before this; not an action on a running process.
            ProcessAction::Start => {
                return Err(ToolError::InvalidInput(
                    "start takes a command, not an id".to_string(),
                ));
            }
        };
        let sandbox = self.exec.caller_sandbox(context).await?;
        let answer = match self.ask(&sandbox, request).await {
            Ok(answer) => answer,
            Err(SandboxError::Refused {
                code: "no_such_process",
                message,
            }) => {
                if let Ok(id) = id() {
                    self.release(&sandbox.scope, &id, &mut Map::new()).await;
                }
                return Err(ToolError::NotFound(message));
            }
            Err(SandboxError::Refused {
                code: "bad_request",
                message,
            }) => return Err(ToolError::InvalidInput(message)),
            Err(error) => return Err(unavailable(Some(&error))),
        };
        let mut metering = sandbox.metering;
        metering.insert("action".to_string(), json!(action_label(action)));
        let content = match &answer.reply {
            ProcessReply::Status { status } => {
                let held = if status.state == ProcessState::Running {
                    String::new()
                } else {
                    self.release(&sandbox.scope, &status.id, &mut metering)
                        .await
                };
                record_status(&mut metering, status, &answer);
                let mut content = render_output(&answer);
                content.push_str(&held);
                if action == ProcessAction::Write {
                    content.push_str(&format!(
                        "wrote {} bytes to the stdin of {}{}\n",
                        input.data.as_deref().unwrap_or_default().len(),
                        status.id,
                        if input.close_stdin.unwrap_or(false) {
                            " and closed it"
                        } else {
                            ""
                        }
                    ));
                }
                content.push_str(&status_line(status));
                content
            }
            ProcessReply::Listed { processes } => {
                metering.insert("processes".to_string(), json!(processes.len()));
                render_list(processes)
            }
            ProcessReply::Started { .. } => return Err(unavailable(None)),
        };
        Ok(ToolOutput {
            content,
            untrusted: false,
            metering,
            image: None,
            audio: None,
        })
    }
}

impl TypedTool for ProcessTool {
    type Input = ProcessInput;
    const NAME: &'static str = "process";
    const DESCRIPTION: &'static str = "Run a shell command in the background in your sandbox (the same sandbox, rules and \
         limits as exec) and come back to it later. action=start with command (and cwd, \
         timeout_seconds) returns an id; action=poll with id returns the output since the \
         last poll and whether it still runs or its exit code; action=write with id and data \
         sends text to its stdin (close_stdin to end it); action=kill with id ends it and \
         everything it started; action=list shows your background processes. Unread output \
         beyond a cap is dropped oldest first and counted.";

    fn run<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: ProcessInput,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            match input.action {
                ProcessAction::Start => self.start(permit, context, input).await,
                action => self.act(context, action, input).await,
            }
        })
    }
}

/// The tag a runner files the caller's processes under: a digest of who they are (the
/// runner never learns the name), the same in every session of theirs.
pub fn owner_tag(caller: &Caller) -> String {
    let digest = Sha256::digest(format!("saint-process-owner\0{}", caller.slug).as_bytes());
    format!("o-{}", &hex::encode(digest)[..24])
}

fn target(owner: &str, id: String) -> ProcessTarget {
    ProcessTarget {
        token: String::new(),
        owner: owner.to_string(),
        id,
    }
}

fn action_label(action: ProcessAction) -> &'static str {
    match action {
        ProcessAction::Start => "start",
        ProcessAction::Poll => "poll",
        ProcessAction::Write => "write",
        ProcessAction::Kill => "kill",
        ProcessAction::List => "list",
    }
}

/// Holds `lease` until `timeout` (and a margin for the runner's kill) has passed, unless
/// the returned task is aborted sooner.
fn hold_lease(lease: Lease, timeout: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::time::sleep(timeout + Duration::from_secs(10)).await;
        drop(lease);
    })
}

fn unavailable(error: Option<&SandboxError>) -> ToolError {
    if let Some(error) = error {
        tracing::error!(error = %ErrorChain(error), "sandbox unavailable; process refused");
    }
    ToolError::Failed(
        "background commands cannot run right now: the sandbox is unavailable".to_string(),
    )
}

fn record_status(
    metering: &mut Map<String, Value>,
    status: &ProcessStatus,
    answer: &ProcessAnswer,
) {
    metering.insert("processId".to_string(), json!(status.id));
    metering.insert("state".to_string(), json!(state_label(status.state)));
    metering.insert(
        "outputBytes".to_string(),
        json!(answer.stdout.len() + answer.stderr.len()),
    );
    metering.insert("droppedBytes".to_string(), json!(status.dropped_bytes));
    if let Some(code) = status.exit_code {
        metering.insert("exitCode".to_string(), json!(code));
    }
}

fn state_label(state: ProcessState) -> &'static str {
    match state {
        ProcessState::Running => "running",
        ProcessState::Exited => "exited",
        ProcessState::Killed => "killed",
        ProcessState::TimedOut => "timed_out",
    }
}

/// The new output as the model sees it: stdout, then stderr under a marker, then what
/// was dropped at the cap.
fn render_output(answer: &ProcessAnswer) -> String {
    let mut content = String::from_utf8_lossy(&answer.stdout).into_owned();
    if !answer.stderr.is_empty() {
        if !content.is_empty() && !content.ends_with('\n') {
            content.push('\n');
        }
        content.push_str("[stderr]\n");
        content.push_str(&String::from_utf8_lossy(&answer.stderr));
    }
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    content
}

fn status_line(status: &ProcessStatus) -> String {
    let dropped = if status.dropped_bytes > 0 {
        format!(
            "[… {} older bytes of output were dropped unread]\n",
            status.dropped_bytes
        )
    } else {
        String::new()
    };
    let state = match (status.state, status.exit_code) {
        (ProcessState::Running, _) => format!("still running after {} s", status.seconds),
        (ProcessState::Exited, Some(code)) => format!("exited with code {code}"),
        (ProcessState::Exited, None) => "exited".to_string(),
        (ProcessState::Killed, _) => "killed".to_string(),
        (ProcessState::TimedOut, _) => "killed at its timeout".to_string(),
    };
    format!("{dropped}[process {} {state}]", status.id)
}

fn render_list(processes: &[ProcessStatus]) -> String {
    if processes.is_empty() {
        return "no background processes".to_string();
    }
    processes
        .iter()
        .map(|status| {
            let state = match (status.state, status.exit_code) {
                (ProcessState::Running, _) => format!("running {} s", status.seconds),
                (ProcessState::Exited, Some(code)) => format!("exited ({code}), not yet polled"),
                (state, _) => format!("{}, not yet polled", state_label(state)),
            };
            format!("{} {state}: {}", status.id, status.command)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: ProcessState, exit_code: Option<i32>, dropped_bytes: u64) -> ProcessStatus {
        ProcessStatus {
            id: "p2".to_string(),
            command: "sleep 5; echo done".to_string(),
            state,
            exit_code,
            seconds: 5,
            output_bytes: 5,
            dropped_bytes,
        }
    }

    #[test]
    fn status_lines_name_the_process_its_state_and_what_was_dropped() {
        assert_eq!(
            status_line(&status(ProcessState::Exited, Some(0), 0)),
            "[process p2 exited with code 0]"
        );
        assert_eq!(
            status_line(&status(ProcessState::Running, None, 12)),
            "[… 12 older bytes of output were dropped unread]\n[process p2 still running after 5 s]"
        );
        assert_eq!(
            render_list(&[status(ProcessState::Running, None, 0)]),
            "p2 running 5 s: sleep 5; echo done"
        );
        assert_eq!(render_list(&[]), "no background processes");
    }

    #[test]
    fn owner_tags_differ_per_person_and_reveal_no_name() {
        let caller = |slug: &str| Caller {
            slug: slug.to_string(),
            display_name: slug.to_string(),
            role_name: "owner".to_string(),
            role: Arc::new(serde_json::from_value(json!({})).unwrap()),
            known: true,
            identity: format!("http:{slug}"),
            session_key: format!("http:{slug}"),
            trigger: Default::default(),
            depth: 0,
            may_message: None,
        };
        let ana = owner_tag(&caller("ana"));
        assert_eq!(ana, owner_tag(&caller("ana")));
        assert_ne!(ana, owner_tag(&caller("zora")));
        assert!(!ana.contains("ana"), "{ana}");
        assert!(ana.len() <= saint_sandbox::runner_process::MAX_OWNER_LEN);
    }
}
