//! Sub-agents: `sessions_spawn` starts a child turn in the background as the caller,
//! never wider, and its result is announced back into the caller's session.
//!
//! - A child is the parent's [`Caller`] with the role narrowed by [`rules::plan_child`]
//!   (deny-only), in the session `SessionKey::for_subagent(parent, child)`, with
//!   `trigger: Subagent` and `depth: parent + 1`. It is metered to the same person.
//! - At most the role's `spawn.maxConcurrent` children of one person run at once,
//!   counted under one lock when the spawn is made, so a flood of spawns cannot pass it.
//! - A child is cancelled (its [`CancellationToken`]) when its time is up, when the
//!   sub-agent that started it is cancelled, and at shutdown; [`Subagents::shutdown`]
//!   waits for every child.
//! - When a child ends — answer, step limit, budget, error, timeout, shutdown — one
//!   announcement is stored in the parent's session as said by the bot — after the
//!   parent's turn when it is still running (`Runtime::notify` waits for it), so the
//!   parent's next turn sees it — and, unless the parent is itself a sub-agent, queued
//!   to the person on the bot's channel of the identity the parent turn spoke for, when
//!   that channel can push (any kind but the HTTP API, whose caller only hears through
//!   the session).

pub mod rules;
pub mod tool;

use std::{
    collections::HashMap,
    future::Future,
    hash::{BuildHasher, RandomState},
    sync::{Arc, Mutex, OnceLock, Weak},
    time::Duration,
};

use saint_config::{BotConfig, ChannelIdentity, KNOWN_TOOLS, SessionKey};
use saint_llm::CancellationToken;
use saint_tools::{Caller, Tool, ToolContext, ToolError, Trigger, policy};
use tokio_util::task::TaskTracker;

use self::rules::{ChildEnd, SpawnRequest};
use crate::runtime::{Assignment, AssignmentEnd, Recipient, Runtime, TurnError, TurnOutcome};

/// How long a cancelled child's turn may take to notice and record itself before it is
/// dropped (a tool call ignores cancellation until its own limit).
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// How long shutdown waits for cancelled children to finish and announce.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);

/// Running sub-agents and the `sessions_spawn` tool that starts them.
pub struct Subagents {
    runtime: OnceLock<Weak<Runtime>>,
    state: Mutex<State>,
    /// Every child's token descends from this one: cancelling it stops them all.
    root: CancellationToken,
    tasks: TaskTracker,
}

#[derive(Default)]
struct State {
    /// Set by shutdown: no child starts after it.
    closed: bool,
    /// Children running per person (contact slug).
    per_person: HashMap<String, u32>,
    /// Each running child's token by its session key; a child's own spawns take child
    /// tokens of it, so cancelling a child cancels what it started.
    tokens: HashMap<String, CancellationToken>,
}

impl Default for Subagents {
    fn default() -> Self {
        Self {
            runtime: OnceLock::new(),
            state: Mutex::default(),
            root: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }
}

impl Subagents {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The `sessions_spawn` tool.
    pub fn tool(self: &Arc<Self>) -> Option<Arc<dyn Tool>> {
        Some(Arc::new(tool::SpawnTool {
            subagents: self.clone(),
        }))
    }

    /// Gives the registry the runtime children run in (held weakly: the runtime's tool
    /// set holds the registry).
    pub fn attach(&self, runtime: &Arc<Runtime>) {
        let _ = self.runtime.set(Arc::downgrade(runtime));
    }

    /// How many children run now.
    pub fn running(&self) -> usize {
        self.lock().tokens.len()
    }

    /// Cancels every running child and waits for them (and their announcements); returns
    /// how many were running. No child starts afterwards.
    pub async fn shutdown(&self) -> usize {
        let running = {
            let mut state = self.lock();
            state.closed = true;
            state.tokens.len()
        };
        self.root.cancel();
        self.tasks.close();
        if tokio::time::timeout(SHUTDOWN_WAIT, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                remaining = self.tasks.len(),
                "sub-agents did not finish after cancellation; leaving them"
            );
        }
        running
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a child of `context.caller` doing `task`; returns what the parent's model
    /// is told.
    fn spawn(
        self: &Arc<Self>,
        context: &ToolContext,
        task: String,
        request: SpawnRequest,
    ) -> Result<String, ToolError> {
        let runtime = self
            .runtime
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| ToolError::Failed("sub-agents are not available".to_string()))?;
        let parent = &context.caller;
        let plan = rules::plan_child(parent, &context.config, &request)?;
        let id = new_child_id();
        let child_key: String = SessionKey::for_subagent(&parent.session_key, &id).into();
        let child = Caller {
            role: Arc::new(plan.role),
            session_key: child_key.clone(),
            trigger: Trigger::Subagent,
            depth: plan.depth,
            ..parent.clone()
        };
        let (slot, cancel) = self.reserve(parent, &child_key)?;
        let tools: Vec<&'static str> =
            policy::permitted_tools(&child, runtime.tools().all(), runtime.sandbox_available)
                .iter()
                .map(|tool| tool.name())
                .collect();
        let recipients =
            announcement_recipients(&context.config, parent, |name| runtime.can_send(name));
        tracing::info!(
            child = %id,
            person = %parent.slug,
            depth = plan.depth,
            model = %plan.model,
            timeout_seconds = plan.timeout.as_secs(),
            "sub-agent started"
        );
        let reply = started_reply(
            &id,
            &child_key,
            &plan.model,
            plan.timeout,
            &tools,
            request.tools.as_deref(),
            parent,
            !recipients.is_empty(),
        );
        let note = rules::child_note(parent, plan.timeout);
        let work = Child {
            id,
            task,
            note,
            caller: child,
            parent: parent.clone(),
            recipients,
            timeout: plan.timeout,
        };
        self.tasks.spawn(work.run(runtime, slot, cancel));
        Ok(reply)
    }

    /// Takes one of the person's places for a child, or refuses when they are all taken
    /// or shutdown has begun. Checked and counted under one lock.
    fn reserve(
        self: &Arc<Self>,
        parent: &Caller,
        child_key: &str,
    ) -> Result<(Slot, CancellationToken), ToolError> {
        let most = parent.role.spawn.max_concurrent;
        let mut state = self.lock();
        if state.closed {
            return Err(ToolError::Failed(
                "the assistant is shutting down; no sub-agent can start now".to_string(),
            ));
        }
        let running = state.per_person.get(&parent.slug).copied().unwrap_or(0);
        if running >= most {
            return Err(ToolError::Denied(format!(
                "{running} of your sub-agents are running, the most your role allows at once (spawn.maxConcurrent {most}); wait for one to finish"
            )));
        }
        *state.per_person.entry(parent.slug.clone()).or_default() += 1;
        let cancel = match state.tokens.get(&parent.session_key) {
            Some(parent_token) => parent_token.child_token(),
            None => self.root.child_token(),
        };
        state.tokens.insert(child_key.to_string(), cancel.clone());
        Ok((
            Slot {
                subagents: self.clone(),
                person: parent.slug.clone(),
                key: child_key.to_string(),
            },
            cancel,
        ))
    }
}

/// A person's place for one running child; given back when dropped (also when the
/// child's task panics).
struct Slot {
    subagents: Arc<Subagents>,
    person: String,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.subagents.lock();
        state.tokens.remove(&self.key);
        if let Some(count) = state.per_person.get_mut(&self.person) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                state.per_person.remove(&self.person);
            }
        }
    }
}

/// One child's work.
struct Child {
    id: String,
    task: String,
    note: String,
    caller: Caller,
    parent: Caller,
    recipients: Vec<Recipient>,
    timeout: Duration,
}

impl Child {
    async fn run(self, runtime: Arc<Runtime>, slot: Slot, cancel: CancellationToken) {
        let assignment = Assignment {
            caller: self.caller.clone(),
            text: self.task.clone(),
            note: self.note.clone(),
            deliver: Vec::new(),
            quiet_answer: None,
        };
        let shutting_down = slot.subagents.root.clone();
        let end = supervise(
            runtime.run_assignment(assignment, &cancel),
            self.timeout,
            &cancel,
            &shutting_down,
        )
        .await;
        // No longer running: the person's place is free before the announcement waits
        // for the parent's session.
        drop(slot);
        tracing::info!(child = %self.id, person = %self.caller.slug, end = end_label(&end), "sub-agent ended");
        let text = rules::announcement(&self.id, &self.task, &end);
        // Said in the parent's session, as the bot, under the sub-agent trigger.
        let speaker = Caller {
            trigger: Trigger::Subagent,
            ..self.parent.clone()
        };
        if let Err(error) = runtime.notify(&speaker, &self.recipients, &text).await {
            tracing::warn!(child = %self.id, error = %saint_config::ErrorChain(&error), "failed to announce a sub-agent's result");
        }
    }
}

fn end_label(end: &ChildEnd) -> &'static str {
    match end {
        ChildEnd::Answered(_) => "answered",
        ChildEnd::StepLimit(_) => "step_limit",
        ChildEnd::OverBudget => "over_budget",
        ChildEnd::TimedOut(_) => "timed_out",
        ChildEnd::Failed(_) => "failed",
        ChildEnd::Stopped(_) => "stopped",
    }
}

/// Runs `turn` until it ends, its time is up, or `cancel` fires. Past the time limit
/// the child's token is cancelled (which also stops what it started) and the turn is
/// given [`CANCEL_GRACE`] to notice and record itself before it is dropped.
async fn supervise(
    turn: impl Future<Output = Result<AssignmentEnd, TurnError>>,
    timeout: Duration,
    cancel: &CancellationToken,
    shutting_down: &CancellationToken,
) -> ChildEnd {
    tokio::pin!(turn);
    let stopped = || {
        ChildEnd::Stopped(if shutting_down.is_cancelled() {
            "the assistant was shutting down"
        } else {
            "the sub-agent that started it stopped"
        })
    };
    let timed_out = tokio::select! {
        result = &mut turn => {
            return match result {
                Ok(AssignmentEnd::OverBudget) => ChildEnd::OverBudget,
                Ok(AssignmentEnd::Ran(reply)) => match reply.outcome {
                    TurnOutcome::Answered => ChildEnd::Answered(reply.text),
                    TurnOutcome::IterationCap => ChildEnd::StepLimit(reply.text),
                    TurnOutcome::OverBudget => ChildEnd::OverBudget,
                },
                Err(_) if cancel.is_cancelled() => stopped(),
                Err(error) => ChildEnd::Failed(error.to_string()),
            };
        }
        () = tokio::time::sleep(timeout) => true,
        () = cancel.cancelled() => false,
    };
    cancel.cancel();
    let _ = tokio::time::timeout(CANCEL_GRACE, &mut turn).await;
    if timed_out {
        ChildEnd::TimedOut(timeout)
    } else {
        stopped()
    }
}

/// Who hears a child's result besides the parent's session: the person, at the
/// identity the parent turn spoke for, on a channel of its kind that can send now
/// (`can_send`: it has a running transport; the HTTP API only answers requests). A
/// sub-agent's own child reports only to the sub-agent's session: the person hears the
/// sub-agent's result.
pub fn announcement_recipients(
    config: &BotConfig,
    parent: &Caller,
    can_send: impl Fn(&str) -> bool,
) -> Vec<Recipient> {
    if parent.trigger == Trigger::Subagent {
        return Vec::new();
    }
    let Ok(identity) = parent.identity.parse::<ChannelIdentity>() else {
        return Vec::new();
    };
    config
        .channels
        .iter()
        .filter(|channel| channel.kind == identity.kind())
        .find(|channel| can_send(&channel.name))
        .map(|channel| Recipient {
            channel: channel.name.clone(),
            identity: identity.to_string(),
        })
        .into_iter()
        .collect()
}

/// What the parent's model is told when its child started.
#[allow(clippy::too_many_arguments)]
fn started_reply(
    id: &str,
    key: &str,
    model: &str,
    timeout: Duration,
    tools: &[&str],
    asked: Option<&[String]>,
    parent: &Caller,
    delivered: bool,
) -> String {
    let may_use = if tools.is_empty() {
        "no tools".to_string()
    } else {
        tools.join(", ")
    };
    let mut reply = format!(
        "Started sub-agent {id} (session {key}) with the model {model}, for at most {} s. It may use: {may_use}.",
        timeout.as_secs()
    );
    let withheld: Vec<&str> = asked
        .into_iter()
        .flatten()
        .map(|name| name.trim())
        .filter(|name| KNOWN_TOOLS.contains(name) && !tools.contains(name))
        .collect();
    if !withheld.is_empty() {
        reply.push_str(&format!(
            " Not given (not yours to give, or not for sub-agents at this depth): {}.",
            withheld.join(", ")
        ));
    }
    reply.push_str(" Its result will be added to this conversation when it ends");
    if delivered {
        reply.push_str(&format!(" and sent to {}", parent.display_name));
    }
    reply.push_str("; do not wait for it.");
    reply
}

/// A short id unique among this agent's children (48 random bits).
fn new_child_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let random = RandomState::new().hash_one((sequence, std::time::SystemTime::now()));
    format!("{:012x}", random & 0xffff_ffff_ffff)
}

#[cfg(test)]
mod tests;
