//! Turns nobody typed just now: a scheduled job, the heartbeat, a sub-agent. Each runs
//! as the person it belongs to — the [`Caller`] its starter built from the config as it
//! is *now* — never wider: a narrower role is made by adding denials to theirs, and deny
//! always wins. Its answer is queued to the people it is for in the transaction that
//! stores it; it is metered to its owner under its own trigger.

use std::sync::Arc;

use saint_channels::ReplyContext;
use saint_config::{BotConfig, ChannelIdentity, KNOWN_TOOLS, RoleConfig};
use saint_llm::CancellationToken;
use saint_tools::{Caller, policy};

use super::{
    Recipient, Runtime, TurnError, TurnReply,
    turn::{Accepted, Destination, TurnInput},
};
use crate::metering;

/// One background turn.
#[derive(Clone, Debug)]
pub struct Assignment {
    /// Who it runs as (their current role, possibly narrowed), in which session, and
    /// what started it (`caller.trigger`).
    pub caller: Caller,
    /// What the model is asked to do.
    pub text: String,
    /// Said to the model after the system prompt: who set this going and where its
    /// answer goes, since nobody reads along live.
    pub note: String,
    /// Who receives the final answer (through the outbox); empty: nobody, the answer
    /// stays in the session.
    pub deliver: Vec<Recipient>,
    /// An answer equal to this means "nothing to report" and is not sent.
    pub quiet_answer: Option<&'static str>,
}

/// How a background turn ended.
#[derive(Debug)]
pub enum AssignmentEnd {
    /// It ran; its answer is stored (and queued to the recipients when it said something).
    Ran(TurnReply),
    /// Its owner's budget was already spent: nothing ran, nothing was stored.
    OverBudget,
}

/// `role` narrowed for a background turn: `only` (when given) lists the tools it may
/// use at most, and every tool in `deny` is taken away. The role's own allow list is
/// kept and only denials are added, so the result can never allow a tool the role does
/// not: a request for a tool the role lacks simply finds nothing.
pub fn narrowed_role(role: &RoleConfig, only: Option<&[String]>, deny: &[&str]) -> RoleConfig {
    let mut narrowed = role.clone();
    let mut extra: Vec<String> = deny.iter().map(|tool| tool.to_string()).collect();
    if let Some(only) = only {
        extra.extend(
            KNOWN_TOOLS
                .iter()
                .filter(|tool| {
                    !only
                        .iter()
                        .any(|pattern| policy::pattern_matches(pattern, tool))
                })
                .map(|tool| tool.to_string()),
        );
    }
    for tool in extra {
        if !narrowed.tools.deny.contains(&tool) {
            narrowed.tools.deny.push(tool);
        }
    }
    narrowed
}

impl Runtime {
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
        let reply = self
            .turn(
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
}

/// Where a message to contact `slug` goes: their identity `preferred` when a channel of
/// its kind can send (`can_send`), else their first identity on a channel that can;
/// `None` when no channel can reach them (the message then stays in a session).
pub fn reachable_recipient(
    config: &BotConfig,
    slug: &str,
    preferred: Option<&str>,
    can_send: impl Fn(&str) -> bool,
) -> Option<Recipient> {
    let contact = config
        .contacts
        .iter()
        .find(|contact| contact.slug == slug)?;
    let reachable = |identity: &ChannelIdentity| {
        config
            .channels
            .iter()
            .filter(|channel| channel.kind == identity.kind())
            .find(|channel| can_send(&channel.name))
            .map(|channel| Recipient {
                channel: channel.name.clone(),
                identity: identity.to_string(),
            })
    };
    let preferred = preferred.and_then(|wanted| {
        contact
            .identities
            .iter()
            .find(|identity| identity.as_str() == wanted)
    });
    preferred
        .into_iter()
        .chain(contact.identities.iter())
        .find_map(reachable)
}

/// The channels as background turns see them (the agent's channel hub).
#[derive(Clone)]
pub struct Outlets {
    /// Wakes the sender of the channel named by the argument.
    pub ready: Arc<dyn Fn(&str) + Send + Sync>,
    /// Whether the channel named by the argument can send on its own.
    pub can_send: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}
