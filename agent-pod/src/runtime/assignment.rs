//! Turns nobody typed just now: a scheduled job, the heartbeat, a sub-agent. Each runs
//! as the person it belongs to — the [`Caller`] its starter built from the config as it
//! is *now* — never wider: a narrower role is made by adding denials to theirs, and deny
//! always wins. Its answer is queued to the people it is for in the transaction that
//! stores it; it is metered to its owner under its own trigger.

use std::sync::Arc;

use saint_config::{BotConfig, ChannelIdentity, KNOWN_TOOLS, RoleConfig};
use saint_tools::{Caller, policy};

use super::{Recipient, TurnReply};

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
