//! The turn: resolve the sender, persist their message, check their budget, pick the
//! role's model and visible tools, build the system prompt, then loop model call → tool
//! calls → results until the model answers, compacting the context when it nears the
//! window. Every decision about *who may do what* is made here in code, before and
//! around the model, never by it.
//!
//! [`Runtime`]'s methods are all in this file: what the agent, channels and background
//! work call, and the store operations the steps share. The steps have their own
//! homes: `inbound` (a message: its sender, an approver's answer, its attachments and
//! voice notes), `turn` (a `Turn` prepared, iterated and finished; its model
//! calls through the failover chain in `turn/failover.rs`), `approval` (asking,
//! deciding, running and expiring approvals), `voice` (transcription) and
//! `session_cache` (what a turn keeps of its session for the next).

mod approval;
mod assignment;
mod attachments;
mod chain_health;
mod compaction;
mod group;
mod inbound;
mod model;
mod session_cache;
mod turn;
mod voice;

use parking_lot::Mutex;
use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use saint_channels::{OutboundBody, ReplyContext};
use saint_config::{BotConfig, ChannelIdentity};
use saint_llm::{CancellationToken, ClientOptions, LlmError, Message, Usage};
use saint_tools::Caller;
use tokio::sync::mpsc::UnboundedSender;

pub use self::{
    assignment::{Assignment, AssignmentEnd, Outlets, narrowed_role, reachable_recipient},
    attachments::InboundAttachment,
    chain_health::{
        ChainHealth, ChainHealthTiming, ChainReport, ChainReportPublisher, KubernetesChainReports,
        MODEL_CHAIN_FAILING, MODEL_CHAIN_RECOVERED, PublishError, RecordingPublisher,
    },
    compaction::{estimate_tokens, split_point, summary_request},
    model::{
        ChainEntry, EnvLookup, ModelAccess, ModelChain, ModelSetupError, Now, endpoint_for,
        process_env,
    },
    turn::{ITERATION_CAP_REPLY, OVER_BUDGET_REPLY},
};
use self::{
    session_cache::SessionCache,
    turn::{Accepted, Destination, QueueStep, TurnInput},
};
use saint_tools::toolset::ToolSet;

use crate::{
    budget::SpendLedger,
    config_watch::ConfigStore,
    identity::IdentityError,
    metering::{self, Metering},
    session::{SessionError, SessionStore},
};

/// Size of the per-session lock table at which idle entries are swept.
const SESSION_LOCK_SWEEP_AT: usize = 256;

/// Limits of the tool loop.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    /// Model calls per turn before the turn stops.
    pub max_iterations: usize,
    /// Characters of one tool result sent to the model; the rest is cut with a note.
    pub max_tool_result_chars: usize,
    /// Compact when the estimated context exceeds this share of the window.
    pub compaction_ratio: f64,
    /// Messages always kept verbatim by compaction.
    pub keep_recent_messages: usize,
    /// Safety net over each tool's own limits.
    pub tool_timeout: Duration,
    /// Model client timeouts and retries.
    pub client: ClientOptions,
    /// Runs saint-media's extraction child on attachments (images, documents); `None`:
    /// the model gets the channel's note of each file only. The binary sets it to
    /// itself (`saint-agent extract-document`); in-process tests have no such binary.
    pub media: Option<saint_media::Extractor>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            max_iterations: 16,
            max_tool_result_chars: 32_000,
            compaction_ratio: 0.75,
            keep_recent_messages: 6,
            tool_timeout: Duration::from_secs(300),
            client: ClientOptions::default(),
            media: None,
        }
    }
}

/// An incoming message.
#[derive(Clone, Debug)]
pub struct Inbound {
    /// Who sent it, as the channel parsed them (the same rules the operator rendered
    /// the contacts with): carried typed from the channel to the turn's caller.
    pub sender: ChannelIdentity,
    /// Message text.
    pub text: String,
    /// Whether the channel authenticated the sender; an unauthenticated one is served by
    /// the default role whatever contact the identity names.
    pub sender_verified: bool,
    /// For an unauthenticated sender, what the message proves about its origin
    /// ([`saint_channels::InboundMessage::unverified_origin`]): its own session.
    pub unverified_origin: Option<String>,
    /// Set when the message came through a channel's inbox: its reply is queued in the
    /// outbox in the same transaction as the answer.
    pub delivery: Option<Delivery>,
    /// A press of the bot's button ([`saint_channels::InboundMessage::pressed`]): an
    /// answer to an approval request or nothing, never a turn.
    pub pressed: bool,
    /// Files saved from the message; their notes are already in `text`.
    pub attachments: Vec<InboundAttachment>,
}

impl Inbound {
    /// A message from `sender`, whom the channel authenticated, answered to the caller
    /// directly (no outbox).
    pub fn direct(sender: ChannelIdentity, text: impl Into<String>) -> Self {
        Self {
            sender,
            text: text.into(),
            sender_verified: true,
            unverified_origin: None,
            delivery: None,
            pressed: false,
            attachments: Vec::new(),
        }
    }
}

/// Where a channel message's reply goes and how far its turn got before.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Inbox row id.
    pub inbox_id: i64,
    /// Channel name the reply leaves through.
    pub channel: String,
    /// Where the reply goes in the conversation (the message answered, its thread).
    pub context: saint_channels::ReplyContext,
    /// The person's message is already in the transcript as this id (a turn resumed
    /// after a restart): it is not stored again.
    pub accepted_message_id: Option<i64>,
    /// The group conversation it was said in (`None`: a direct message). Its session is
    /// the conversation's; the turn still runs with the sender's role.
    pub conversation: Option<saint_channels::Conversation>,
}

/// A person a background turn's answer goes to, on one of the bot's channels.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Recipient {
    /// Channel name (`channels[].name`).
    pub channel: String,
    /// Their identity on it (`telegram:42`).
    pub identity: String,
}

/// Progress of a turn, for streaming channels.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEvent {
    /// The message is durable; it will not be lost if the process dies now.
    Accepted {
        /// Stored message id.
        message_id: i64,
        /// Session it belongs to.
        session_key: String,
    },
    /// Who the sender is to the bot and what their role allows in this turn.
    Caller {
        /// Display name of the matched contact; `None` for a stranger.
        contact: Option<String>,
        /// The role applied.
        role: String,
        /// The model the role uses.
        model: String,
        /// Tools offered to the model in this turn.
        tools: Vec<String>,
    },
    /// More reply text.
    TextDelta(String),
    /// A tool call finished (`outcome` is `ok` or an error label).
    ToolCall {
        /// Tool name.
        name: String,
        /// Outcome label.
        outcome: String,
        /// The arguments the model called it with.
        arguments: serde_json::Value,
        /// The start of what the model got back (the result or the error).
        preview: String,
    },
    /// A model call failed: `retry_in` says when the next attempt starts, `None` that
    /// the turn gives up. Sent at the failure, so whoever waits hears of it at once.
    ModelTrouble {
        /// The endpoint called.
        address: String,
        /// What went wrong.
        error: String,
        /// When the next attempt starts.
        retry_in: Option<std::time::Duration>,
    },
}

/// How a turn ended, for the channel that delivers its reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The model answered.
    Answered,
    /// The person's budget is spent; they got [`OVER_BUDGET_REPLY`] and no model ran
    /// after the limit was reached.
    OverBudget,
    /// The tool loop hit its cap; they got [`ITERATION_CAP_REPLY`].
    IterationCap,
    /// The caller's authority changed while the turn ran (a demotion, a role edit, a
    /// removed contact): it stopped before its next call and said why.
    AuthorityChanged,
}

impl TurnOutcome {
    /// The label in metrics and the HTTP API.
    pub fn label(self) -> &'static str {
        match self {
            TurnOutcome::Answered => "answered",
            TurnOutcome::OverBudget => "over_budget",
            TurnOutcome::IterationCap => "iteration_cap",
            TurnOutcome::AuthorityChanged => "authority_changed",
        }
    }
}

/// A finished turn.
#[derive(Clone, Debug)]
pub struct TurnReply {
    /// The answer sent to the person.
    pub text: String,
    /// Session key.
    pub session_key: String,
    /// Id of the person's stored message.
    pub message_id: i64,
    /// How the turn ended.
    pub outcome: TurnOutcome,
    /// Tokens used by all model calls of the turn.
    pub usage: Usage,
    /// Model calls made (including compaction).
    pub model_calls: u32,
    /// Wall time spent inside model calls.
    pub model_time: Duration,
    /// Wall time the failover chain spent around the model attempts (budget
    /// reservations, metering, backoff waits): on a healthy primary, its overhead.
    pub failover_time: Duration,
}

/// Why a turn failed. Messages are safe to show to the integration that sent the message.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("failed to store the conversation")]
    Session(#[from] SessionError),
    #[error(transparent)]
    ModelSetup(#[from] ModelSetupError),
    #[error("failed to get an answer from the model")]
    Model(#[from] LlmError),
    #[error("failed: storage task panicked")]
    Join,
}

/// Everything a turn needs. Shared by all channels.
pub struct Runtime {
    pub(crate) config: Arc<ConfigStore>,
    pub(crate) store: Arc<SessionStore>,
    pub(crate) model: ModelAccess,
    // Whether the failover chain as a whole fails, reported outside the pod.
    pub(crate) chain_health: ChainHealth,
    pub(crate) tools: ToolSet,
    pub(crate) metering: Arc<Metering>,
    // Every person's budget accounts: each model call reserves its worst case here.
    pub(crate) budgets: SpendLedger,
    pub(crate) workspace: PathBuf,
    pub(crate) options: RuntimeOptions,
    // Whether `exec` runs in a working sandbox; without one it is withheld from every role.
    pub(crate) sandbox_available: bool,
    // One turn at a time per session, so messages and tool results interleave sanely;
    // the lock also guards what the last turn kept of the session.
    session_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<SessionCache>>>>,
    // The channels background turns queue answers for.
    outlets: std::sync::OnceLock<assignment::Outlets>,
    // Tool calls waiting for someone's yes; none when its database cannot be opened
    // (calls that need approval are then refused, never run).
    pub(crate) approval_store: Option<Arc<crate::approvals::ApprovalStore>>,
}

impl Runtime {
    /// Assembles a runtime.
    pub fn new(
        config: Arc<ConfigStore>,
        store: Arc<SessionStore>,
        model: ModelAccess,
        tools: ToolSet,
        metering: Arc<Metering>,
        workspace: PathBuf,
        options: RuntimeOptions,
    ) -> Self {
        // In a cluster the chain's failures become Events on the SaintBot.
        let chain_health = {
            let bot = &config.last_good().bot;
            ChainHealth::from_environment(&bot.name, &bot.namespace, model.env())
        };
        let approval_store = match crate::approvals::ApprovalStore::open(&workspace) {
            Ok(store) => Some(Arc::new(store)),
            Err(error) => {
                tracing::error!(error = %saint_config::ErrorChain(&error), "approvals unavailable: calls that need one are refused");
                None
            }
        };
        Self {
            approval_store,
            config,
            store,
            model,
            chain_health,
            tools,
            metering,
            budgets: SpendLedger::default(),
            workspace,
            options,
            sandbox_available: false,
            session_locks: Mutex::default(),
            outlets: std::sync::OnceLock::new(),
        }
    }

    /// Declares that the tool set's `exec` runs in a working sandbox, so roles with an
    /// `execBlocklist` that allow it see it.
    pub fn with_sandbox_available(mut self, available: bool) -> Self {
        self.sandbox_available = available;
        self
    }

    /// Checks budgets against `budgets` (shared with the tools that credit them: an
    /// approved top-up) instead of a ledger of its own.
    pub fn with_spend_ledger(mut self, budgets: SpendLedger) -> Self {
        self.budgets = budgets;
        self
    }

    /// Reports the failover chain's health through `health` instead of the default
    /// (Kubernetes Events in a cluster, nothing elsewhere).
    pub fn with_chain_health(mut self, health: ChainHealth) -> Self {
        self.chain_health = health;
        self
    }

    /// The config store.
    pub fn config(&self) -> &Arc<ConfigStore> {
        &self.config
    }

    /// The transcript store.
    pub fn store(&self) -> &Arc<SessionStore> {
        &self.store
    }

    /// Metering (usage log and metrics).
    pub fn metering(&self) -> &Arc<Metering> {
        &self.metering
    }

    /// `/readyz` lines for failover chain entries cooling down; refreshes the
    /// per-entry health gauge.
    pub fn model_health_lines(&self) -> Vec<String> {
        self.model.health_lines(&self.metering.metrics)
    }

    /// The tool catalog.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    fn session_lock(&self, key: &str) -> Arc<tokio::sync::Mutex<SessionCache>> {
        let mut table = self.session_locks.lock();
        // Keep the table small: drop locks nobody holds or waits for (only the table has
        // a reference; a turn clones its lock under this same mutex, so this cannot race).
        if table.len() >= SESSION_LOCK_SWEEP_AT {
            table.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        table.entry(key.to_string()).or_default().clone()
    }

    /// Runs a blocking store operation off the async workers.
    pub(crate) async fn blocking<T: Send + 'static>(
        &self,
        operation: impl FnOnce(&SessionStore) -> Result<T, SessionError> + Send + 'static,
    ) -> Result<T, TurnError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || operation(&store))
            .await
            .map_err(|_| TurnError::Join)?
            .map_err(TurnError::from)
    }

    /// Handles one inbound message end to end.
    pub async fn handle(
        &self,
        inbound: Inbound,
        events: Option<UnboundedSender<TurnEvent>>,
        cancel: CancellationToken,
    ) -> Result<TurnReply, TurnError> {
        inbound::handle(self, inbound, events, cancel).await
    }

    /// Runs `assignment` unless its owner is over budget. The caller's role is used as
    /// given (callers narrow it with [`narrowed_role`]).
    pub async fn run_assignment(
        &self,
        assignment: Assignment,
        cancel: &CancellationToken,
    ) -> Result<AssignmentEnd, TurnError> {
        let Assignment {
            caller,
            text,
            note,
            deliver,
            quiet_answer,
        } = assignment;
        // Checked before anything is stored: work the owner cannot pay for does not
        // run, and the caller tells them once.
        if let Some((budget, spent)) = self.spent_before_turn(&caller).await?
            && !metering::within_budget(Some(&budget), spent)
        {
            self.metering.metrics.budget_refusal(&caller.role_name);
            return Ok(AssignmentEnd::OverBudget);
        }
        let config = self.config.current();
        let reply = turn::run(
            self,
            TurnInput {
                caller: &caller,
                config: &config,
                text,
                accepted: Accepted::Store,
                destination: Destination::Send {
                    to: &deliver,
                    quiet: quiet_answer,
                },
                note: Some(&note),
                attached: Vec::new(),
                told: None,
            },
            None,
            cancel,
        )
        .await?;
        self.outbox_ready(deliver.iter().map(|recipient| recipient.channel.as_str()));
        Ok(AssignmentEnd::Ran(reply))
    }

    /// Queues `text` to `recipients` without a model call (a notice about their work:
    /// over budget, a job stopped, a sub-agent's result), noted in `caller.session_key`'s
    /// transcript as said by the bot. A turn running in that session finishes first, so
    /// the notice lands after it and the session's next turn sees it; never call this
    /// from inside a turn of the same session.
    pub async fn notify(
        &self,
        caller: &Caller,
        recipients: &[Recipient],
        text: &str,
    ) -> Result<(), TurnError> {
        self.notify_with(caller, recipients, text, ReplyContext::default())
            .await
    }

    /// [`Runtime::notify`] with what the message asks of its recipients (`context`: an
    /// approval request's code, which the platforms with buttons show as buttons).
    pub async fn notify_with(
        &self,
        caller: &Caller,
        recipients: &[Recipient],
        text: &str,
        context: ReplyContext,
    ) -> Result<(), TurnError> {
        let lock = self.session_lock(&caller.session_key);
        let _session = lock.lock().await;
        let (recipients_owned, body) = (recipients.to_vec(), text.to_string());
        let caller_owned = caller.clone();
        self.persist_notice(caller_owned, recipients_owned, body, context)
            .await?;
        self.outbox_ready(
            recipients
                .iter()
                .map(|recipient| recipient.channel.as_str()),
        );
        Ok(())
    }

    fn outbox_ready<'a>(&self, channels: impl Iterator<Item = &'a str>) {
        if let Some(outlets) = self.outlets.get() {
            for channel in channels {
                (outlets.ready)(channel);
            }
        }
    }

    /// Sets which channels can send on their own and what wakes their senders when a
    /// background turn queued something for them.
    pub fn set_outlets(&self, outlets: Outlets) {
        let _ = self.outlets.set(outlets);
    }

    /// Whether the channel named `channel` can send a message nobody asked for (it has
    /// a running transport; the HTTP API only answers requests).
    pub fn can_send(&self, channel: &str) -> bool {
        self.outlets
            .get()
            .is_some_and(|outlets| (outlets.can_send)(channel))
    }

    /// Where a message to contact `slug` goes, by the channels that can send now (see
    /// [`reachable_recipient`]).
    pub fn recipient_for(
        &self,
        config: &BotConfig,
        slug: &str,
        preferred: Option<&str>,
    ) -> Option<Recipient> {
        reachable_recipient(config, slug, preferred, |channel| self.can_send(channel))
    }

    /// Refuses every request past its deadline and tells its requester; returns how
    /// many. Run on a timer by the agent.
    pub async fn expire_approvals(&self) -> usize {
        self.approvals().expire().await
    }

    /// Approvals asked, decided and run on this runtime's store.
    fn approvals(&self) -> approval::Approvals<'_> {
        approval::Approvals { runtime: self }
    }

    /// Stores `text` as said by the bot in `caller`'s session and queues it to
    /// `recipients`, in one transaction.
    async fn persist_notice(
        &self,
        caller: Caller,
        recipients: Vec<Recipient>,
        text: String,
        context: ReplyContext,
    ) -> Result<(), TurnError> {
        let body = OutboundBody {
            text: text.clone(),
            files: Vec::new(),
            context,
        };
        let step = QueueStep::Send(Box::new((recipients, body)));
        self.persist_then(&caller, Message::assistant_text(text), None, step)
            .await
            .map(drop)
    }

    async fn persist(&self, caller: &Caller, message: Message) -> Result<i64, TurnError> {
        self.persist_then(caller, message, None, QueueStep::None)
            .await
    }

    // A model answer, its cost (spent at the time given) and the channel queue's step are
    // committed together.
    async fn persist_then(
        &self,
        caller: &Caller,
        message: Message,
        cost: Option<(f64, jiff::Timestamp)>,
        step: QueueStep,
    ) -> Result<i64, TurnError> {
        let (key, slug, role, identity) = (
            caller.session_key.clone(),
            caller.slug.clone(),
            caller.role_name.clone(),
            caller.identity.clone(),
        );
        let spend = cost
            .filter(|(usd, _)| *usd > 0.0)
            .map(|(usd, at)| (metering::spend_day(at), usd));
        let origin = caller.trigger.label();
        self.blocking(move |store| {
            let spend = spend.as_ref().map(|(day, usd)| (day.as_str(), *usd));
            store.append_then(
                &key,
                &slug,
                &role,
                &identity,
                &message,
                spend,
                |transaction, id| step.record(transaction, id, origin, &identity),
            )
        })
        .await
    }

    /// What the caller had spent in their budget's period, as stored; `None` for a role
    /// without a budget. Background work checks it before it starts; each model call is
    /// then checked by its reservation in the budget ledger.
    async fn spent_before_turn(
        &self,
        caller: &Caller,
    ) -> Result<Option<(saint_config::Budget, f64)>, TurnError> {
        let Some(budget) = caller.role.budget.clone() else {
            return Ok(None);
        };
        let (first, last) = metering::period_days(budget.period, jiff::Timestamp::now());
        let slug = caller.slug.clone();
        let spent = self
            .blocking(move |store| store.spent_between(&slug, &first, &last))
            .await?;
        Ok(Some((budget, spent)))
    }
}
