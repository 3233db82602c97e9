//! Sub-agents: `sessions_spawn` starts a child turn in the background as the caller,
//! never wider, and its result is announced back into the caller's session.
//!
//! - A child is the parent's [`Caller`] with the role narrowed by [`rules::plan_child`]
//!   (deny-only), in the session `SessionKey::for_subagent(parent, child)`, with
//!   `trigger: Subagent` and `depth: parent + 1`. It is metered to the same person.
//! - At most the role's `spawn.maxConcurrent` children of one person run at once,
//!   counted under one lock when the spawn is made, so a flood of spawns cannot pass it.
//!   A child keeps its place until its result is stored (see below), so a turn cannot
//!   start more than that many children by letting quick ones end: their results wait
//!   for the turn. A sub-agent's turn, whose children report elsewhere, may start at
//!   most [`SPAWNS_PER_SUBAGENT`] × `maxConcurrent` children in all.
//! - A child is cancelled (its [`CancellationToken`]) when its time is up, when the
//!   sub-agent that started it is cancelled, and at shutdown; [`Subagents::shutdown`]
//!   waits for every child.
//! - When a child ends — answer, step limit, budget, error, timeout, shutdown — one
//!   announcement is stored, as said by the bot, in the session the tree of sub-agents
//!   was started from: the nearest one up from the child that is not a sub-agent's (the
//!   person's own, a group conversation's, a job's), as a sub-agent runs one turn and
//!   never reads what arrives after it. It is stored after that session's running turn
//!   (`Runtime::notify` waits for it), so its next turn sees it, and queued to the
//!   person on the bot's channel of the identity the tree's first turn spoke for, when
//!   that channel can push (any kind but the HTTP API, whose caller only hears through
//!   the session). A grandchild's announcement names the sub-agent that started it.

pub mod rules;
pub mod tool;

use parking_lot::Mutex;
use std::{
    collections::HashMap,
    future::Future,
    hash::{BuildHasher, RandomState},
    sync::{Arc, OnceLock, Weak},
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

/// A sub-agent may start at most this many times its role's `spawn.maxConcurrent`
/// children over its one turn: their results go to the session the tree was started
/// from, which may be idle, so waiting for places would not bound them.
pub const SPAWNS_PER_SUBAGENT: u32 = 2;

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
    /// Children started so far by each running sub-agent (by its session key).
    started_by_subagent: HashMap<String, u32>,
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

    fn lock(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
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
        // Said as the bot, under the sub-agent trigger, in the session the tree of
        // sub-agents was started from.
        let speaker = Caller {
            session_key: home_session(&parent.session_key).to_string(),
            trigger: Trigger::Subagent,
            ..parent.clone()
        };
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
            started_by: subagent_id(&parent.session_key).map(str::to_string),
            task,
            note,
            caller: child,
            speaker,
            recipients,
            timeout: plan.timeout,
        };
        self.tasks.spawn(work.run(runtime, slot, cancel));
        Ok(reply)
    }

    /// Takes one of the person's places for a child, or refuses when they are all taken,
    /// when a sub-agent parent has started all the children it may, or when shutdown has
    /// begun. Checked and counted under one lock.
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
                "{running} of your sub-agents are running or have a result waiting to be added, the most your role allows at once (spawn.maxConcurrent {most}); a result is added after the turn running in its conversation, then its place is free"
            )));
        }
        if SessionKey::subagent_parent(&parent.session_key).is_some() {
            let most_started = most.saturating_mul(SPAWNS_PER_SUBAGENT);
            let started = state
                .started_by_subagent
                .entry(parent.session_key.clone())
                .or_default();
            if *started >= most_started {
                return Err(ToolError::Denied(format!(
                    "this sub-agent has started {started} sub-agents, the most one sub-agent may start ({SPAWNS_PER_SUBAGENT} × spawn.maxConcurrent {most}); finish with what you have"
                )));
            }
            *started += 1;
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

/// A person's place for one child, held until its result is stored; given back when
/// dropped (also when the child's task panics or is dropped).
struct Slot {
    subagents: Arc<Subagents>,
    person: String,
    key: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.subagents.lock();
        state.tokens.remove(&self.key);
        state.started_by_subagent.remove(&self.key);
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
    /// The id of the sub-agent that started this one, if one did.
    started_by: Option<String>,
    task: String,
    note: String,
    caller: Caller,
    /// Who says the announcement, and in which session.
    speaker: Caller,
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
        tracing::info!(child = %self.id, person = %self.caller.slug, end = end_label(&end), "sub-agent ended");
        let text = rules::announcement(&self.id, self.started_by.as_deref(), &self.task, &end);
        if let Err(error) = runtime.notify(&self.speaker, &self.recipients, &text).await {
            tracing::warn!(child = %self.id, error = %saint_config::ErrorChain(&error), "failed to announce a sub-agent's result");
        }
        // The place is given back only now: a child that ended keeps it while its result
        // waits for the running turn it goes to, so that turn cannot start more children
        // by letting quick ones end.
        drop(slot);
    }
}

fn end_label(end: &ChildEnd) -> &'static str {
    match end {
        ChildEnd::Answered(_) => "answered",
        ChildEnd::StepLimit(_) => "step_limit",
        ChildEnd::OverBudget => "over_budget",
        ChildEnd::TimedOut(_) => "timed_out",
        ChildEnd::Failed(_) => "failed",
        ChildEnd::AuthorityChanged(_) => "authority_changed",
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
                    TurnOutcome::AuthorityChanged => ChildEnd::AuthorityChanged(reply.text),
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

/// Who hears a child's result besides the session it is stored in: the person, at the
/// identity the parent turn spoke for (a sub-agent speaks for the identity of the turn
/// that started its tree), on a channel of its kind that can send now (`can_send`: it
/// has a running transport; the HTTP API only answers requests).
pub fn announcement_recipients(
    config: &BotConfig,
    parent: &Caller,
    can_send: impl Fn(&str) -> bool,
) -> Vec<Recipient> {
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

/// The session a sub-agent started from `parent` reports into: the nearest one up from
/// `parent` that is not a sub-agent's.
pub fn home_session(parent: &str) -> &str {
    let mut key = parent;
    while let Some(up) = SessionKey::subagent_parent(key) {
        key = up;
    }
    key
}

/// The id of the sub-agent whose session is `key`, or `None` when `key` is no
/// sub-agent's.
pub fn subagent_id(key: &str) -> Option<&str> {
    let parent = SessionKey::subagent_parent(key)?;
    key.strip_suffix(parent)?
        .strip_suffix(':')?
        .rsplit_once(':')
        .map(|(_, id)| id)
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
    if SessionKey::subagent_parent(&parent.session_key).is_some() {
        reply.push_str(
            " Its result will be added to the conversation you were started from when it ends, not to yours",
        );
    } else {
        reply.push_str(" Its result will be added to this conversation when it ends");
    }
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
