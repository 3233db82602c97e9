//! The runtime's side of approvals (the rules and the store are `crate::approvals`):
//! asking the approvers when a turn reaches a call that needs a yes, taking an
//! approver's answer, running exactly the stored call once it is approved, and telling
//! the requester when a request is declined or expires.

use std::{sync::Arc, time::Instant};

use saint_config::{ApprovalRule, BotConfig, SessionKey};
use saint_tools::{
    Caller, ToolContext, ToolError, Trigger,
    exec::{HeldPorterRequest, PORTER_HELD, PorterRequest},
    policy,
    process::PORTER_HELD_START,
};
use serde_json::{Map, Value, json};

use super::Runtime;
use crate::{
    approvals::{self, ApprovalStore, Request},
    identity,
    metering::ToolCallRecord,
};

/// Longest stretch of arguments or result quoted in a message.
const QUOTE_CHARS: usize = 1_500;

fn quoted(text: &str) -> String {
    let total = text.chars().count();
    if total <= QUOTE_CHARS {
        return text.to_string();
    }
    let kept: String = text.chars().take(QUOTE_CHARS).collect();
    format!("{kept} […{} more characters]", total - QUOTE_CHARS)
}

fn display_name<'c>(config: &'c BotConfig, slug: &'c str) -> &'c str {
    config
        .contacts
        .iter()
        .find(|contact| contact.slug == slug)
        .map_or(slug, |contact| contact.name.as_str())
}

/// What an approval request says of the Porter requests it waits for.
fn porter_clause(porter: &[PorterRequest]) -> String {
    if porter.is_empty() {
        return String::new();
    }
    let requests: Vec<String> = porter.iter().map(ToString::to_string).collect();
    format!(
        ", which makes {} (held until approved; on a yes the command runs again and may make {} once)",
        requests.join(", "),
        if porter.len() == 1 { "it" } else { "each" }
    )
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The call waiting for a yes: the tool, its arguments, the rule that holds it and the
/// Porter requests it held, if any.
struct HeldCall<'a> {
    tool: &'a str,
    input: &'a Value,
    rule: &'a ApprovalRule,
    porter: &'a [PorterRequest],
}

/// Stores the approval request off the async workers; a refusal is what the model is
/// told.
async fn store_request(
    store: Arc<ApprovalStore>,
    caller: &Caller,
    call: &HeldCall<'_>,
) -> Result<Request, String> {
    let tool = call.tool;
    let (requester, role, session, identity) = (
        caller.slug.clone(),
        caller.role_name.clone(),
        caller.session_key.clone(),
        caller.identity.clone(),
    );
    let (owned_tool, owned_input, owned_rule, owned_porter) = (
        tool.to_string(),
        call.input.clone(),
        call.rule.clone(),
        call.porter.to_vec(),
    );
    let stored = tokio::task::spawn_blocking(move || {
        store.request(
            &requester,
            &role,
            &session,
            &identity,
            &owned_tool,
            &owned_input,
            &owned_porter,
            &owned_rule,
            now_ms(),
        )
    })
    .await;
    match stored {
        Ok(Ok(request)) => Ok(request),
        Ok(Err(error @ approvals::ApprovalError::TooManyWaiting { .. })) => {
            tracing::warn!(requester = %caller.slug, tool, "approval request refused: too many waiting");
            Err(format!("not run: {tool} needs approval, and {error}"))
        }
        Ok(Err(error)) => {
            tracing::error!(error = %saint_config::ErrorChain(&error), "failed to store an approval request");
            Err(format!(
                "not run: {tool} needs approval, and the request could not be stored"
            ))
        }
        Err(_) => Err(format!(
            "not run: {tool} needs approval, and the request could not be stored"
        )),
    }
}

/// What the approvers are asked.
fn approval_question(
    caller: &Caller,
    rule: &ApprovalRule,
    tool: &str,
    request: &Request,
) -> String {
    let minutes = rule.timeout_seconds.div_ceil(60);
    format!(
        "Approval needed: {} ({}) asks to use {tool} with {}{}. Reply \"approve {code}\" to run exactly this once, or \"reject {code}\". Without an answer within {minutes} min it is not run.",
        caller.display_name,
        caller.role_name,
        quoted(&request.input.to_string()),
        porter_clause(&request.porter),
        code = request.code,
    )
}

/// What the model is told once the approvers were asked.
fn asked_reply(
    caller: &Caller,
    tool: &str,
    porter: &[PorterRequest],
    names: &[&str],
    request: &Request,
) -> String {
    if !porter.is_empty() {
        let requests: Vec<String> = porter.iter().map(ToString::to_string).collect();
        return format!(
            "Held: {} needs approval from {}. They were asked (request {}); once approved the same command runs again and may make it once, and {} is told either way. Tell them so; do not try another way around it.",
            requests.join(", "),
            names.join(" or "),
            request.code,
            caller.display_name,
        );
    }
    format!(
        "Not run yet: {tool} needs approval from {}. They were asked (request {}); it runs once approved, and {} is told either way. Tell them so; do not try another way around it.",
        names.join(" or "),
        request.code,
        caller.display_name,
    )
}

/// The runtime's approvals: asked, decided, run and expired.
pub(super) struct Approvals<'r> {
    pub(super) runtime: &'r Runtime,
}

impl Approvals<'_> {
    fn store(&self) -> Option<Arc<ApprovalStore>> {
        self.runtime.approval_store.clone()
    }

    /// Counts `event` and sets the pending gauge from the store.
    async fn count(&self, event: &str, role: &str) {
        self.runtime.metering.metrics.approval(event, role);
        if let Some(store) = self.store()
            && let Ok(Ok(pending)) = tokio::task::spawn_blocking(move || store.pending()).await
        {
            self.runtime.metering.metrics.approvals_pending(pending);
        }
    }

    /// The call `tool(input)` of `caller` needs a yes under `rule` (for a command whose
    /// requests through Porter were held: those `porter` requests): stores it, asks the
    /// approvers who can be reached, and returns what the model is told (not run yet).
    pub(super) async fn ask(
        &self,
        caller: &Caller,
        config: &Arc<BotConfig>,
        rule: &ApprovalRule,
        tool: &str,
        input: &Value,
        porter: &[PorterRequest],
    ) -> (String, bool) {
        let Some(store) = self.store() else {
            return (
                format!("not run: {tool} needs approval, and approvals are unavailable"),
                true,
            );
        };
        let deciders = approvals::deciders(config, &rule.approvers, &caller.slug);
        let reachable: Vec<_> = deciders
            .iter()
            .filter_map(|slug| Some((*slug, self.runtime.recipient_for(config, slug, None)?)))
            .collect();
        let names: Vec<&str> = deciders
            .iter()
            .map(|slug| display_name(config, slug))
            .collect();
        if reachable.is_empty() {
            return (
                format!(
                    "not run: {tool} needs approval from {}, and none of them can be reached on a channel",
                    if names.is_empty() {
                        "someone else".to_string()
                    } else {
                        names.join(" or ")
                    }
                ),
                true,
            );
        }
        let call = HeldCall {
            tool,
            input,
            rule,
            porter,
        };
        let request = match store_request(store, caller, &call).await {
            Ok(request) => request,
            Err(refusal) => return (refusal, true),
        };
        self.runtime
            .metering
            .metrics
            .approval("requested", &caller.role_name);
        let text = approval_question(caller, rule, tool, &request);
        for (slug, recipient) in reachable {
            self.ask_approver(config, slug, recipient, &request, &text)
                .await;
        }
        (asked_reply(caller, tool, porter, &names, &request), false)
    }

    /// Sends one approver the question, with the request's code on the platform's
    /// buttons; an approver who cannot be resolved is left out.
    async fn ask_approver(
        &self,
        config: &BotConfig,
        slug: &str,
        recipient: super::Recipient,
        request: &Request,
        text: &str,
    ) {
        let session_key = match slug.parse() {
            Ok(contact) => SessionKey::for_contact(&contact).into(),
            Err(_) => return,
        };
        let approver = match identity::caller_for_contact(
            config,
            slug,
            Some(&recipient.identity),
            session_key,
            Trigger::Message,
        ) {
            Ok(approver) => approver,
            Err(error) => {
                tracing::warn!(%error, approver = slug, "approver left out");
                return;
            }
        };
        // Where the platform has buttons, Approve and Reject carry this code (and
        // nothing else); the text keeps the code for typing it.
        let asks = saint_channels::ReplyContext {
            approval: Some(request.code.clone()),
            ..Default::default()
        };
        if let Err(error) = self
            .runtime
            .notify_with(&approver, &[recipient], text, asks)
            .await
        {
            tracing::warn!(error = %saint_config::ErrorChain(&error), approver = slug, "failed to ask an approver");
        }
    }

    /// A command call (`exec`, or `process` seen ending) whose requests through Porter
    /// were held under the role's Porter approval rules: asks for the approvals, one
    /// per rule, each bound to the call that reruns the command (the `exec` arguments,
    /// or the `process` start) and the requests held. Returns what the model is told,
    /// empty when nothing was held.
    pub(super) async fn ask_porter(
        &self,
        caller: &Caller,
        config: &Arc<BotConfig>,
        tool: &str,
        input: &Value,
        metering: &Map<String, Value>,
    ) -> String {
        let Some(held) = metering.get(PORTER_HELD) else {
            return String::new();
        };
        let Ok(held) = serde_json::from_value::<Vec<HeldPorterRequest>>(held.clone()) else {
            return String::new();
        };
        let rerun = match tool {
            "exec" => input.clone(),
            "process" => match metering.get(PORTER_HELD_START) {
                Some(start) => start.clone(),
                None => return String::new(),
            },
            _ => return String::new(),
        };
        let mut by_rule: std::collections::BTreeMap<usize, Vec<PorterRequest>> =
            std::collections::BTreeMap::new();
        for held in held {
            let requests = by_rule.entry(held.rule).or_default();
            if !requests.contains(&held.request) {
                requests.push(held.request);
            }
        }
        let mut told = String::new();
        for (index, requests) in by_rule {
            let Some(rule) = caller.role.approvals.get(index) else {
                continue;
            };
            let (text, _) = self
                .ask(caller, config, rule, tool, &rerun, &requests)
                .await;
            told.push('\n');
            told.push_str(&text);
        }
        told
    }

    /// `caller`'s answer to request `code`, typed or a button pressed: what they are told
    /// back. Only a Contact can decide (a stranger is refused like anyone the rule does
    /// not name). An approved request runs here, as its requester, with exactly its
    /// stored arguments.
    pub(super) async fn decide(
        &self,
        config: &Arc<BotConfig>,
        caller: &Caller,
        approve: bool,
        code: &str,
    ) -> String {
        let Some(store) = self.store() else {
            return "Approvals are unavailable on this bot right now.".to_string();
        };
        let (decider, role, owned_code, known) = (
            caller.slug.clone(),
            caller.role_name.clone(),
            code.to_string(),
            caller.known,
        );
        let decided = tokio::task::spawn_blocking(move || {
            store.decide(
                &owned_code,
                &decider,
                |approvers| {
                    known
                        && (approvers.roles.contains(&role)
                            || approvers
                                .contacts
                                .iter()
                                .any(|slug| slug.as_str() == decider))
                },
                approve,
                now_ms(),
            )
        })
        .await;
        let request = match decided {
            Ok(Ok(Ok(request))) => {
                let event = if approve { "approved" } else { "rejected" };
                self.runtime
                    .metering
                    .metrics
                    .approval(event, &request.requester_role);
                request
            }
            Ok(Ok(Err(refusal))) => {
                self.count("refused", "").await;
                return format!("Not done: {refusal}.");
            }
            Ok(Err(error)) => {
                tracing::error!(error = %saint_config::ErrorChain(&error), "failed to record an approval decision");
                return "Not done: the decision could not be recorded.".to_string();
            }
            Err(_) => return "Not done: the decision could not be recorded.".to_string(),
        };
        let requester_name = display_name(config, &request.requester).to_string();
        if !approve {
            self.tell_requester(
                config,
                &request,
                &format!(
                    "{} declined your request to use {} (request {}); it was not run.",
                    caller.display_name, request.tool, request.code
                ),
            )
            .await;
            return format!(
                "Declined: {requester_name}'s {} will not run.",
                request.tool
            );
        }
        let (content, outcome) = self.run_approved(config, &request, &caller.slug).await;
        if let Some(store) = self.store() {
            store.ran(&request, outcome, now_ms());
        }
        self.tell_requester(
            config,
            &request,
            &format!(
                "{} approved your request to use {} (request {}). {}: {}",
                caller.display_name,
                request.tool,
                request.code,
                if outcome == "ok" {
                    "It ran"
                } else {
                    "It did not run"
                },
                quoted(&content)
            ),
        )
        .await;
        if outcome == "ok" {
            format!("Approved: {} ran for {requester_name}.", request.tool)
        } else {
            format!(
                "Approved, but {} did not run for {requester_name}: {}",
                request.tool,
                quoted(&content)
            )
        }
    }

    /// Runs an approved request as its requester with their current role: exactly the
    /// stored call, through the requester's own permit. Returns what it said and its
    /// outcome label.
    async fn run_approved(
        &self,
        config: &Arc<BotConfig>,
        request: &Request,
        approved_by: &str,
    ) -> (String, &'static str) {
        if approvals::digest(&request.tool, &request.input, &request.porter) != request.digest {
            return (
                "its arguments changed after it was asked".to_string(),
                "denied",
            );
        }
        let requester = match identity::caller_for_contact(
            config,
            &request.requester,
            Some(&request.identity),
            request.session_key.clone(),
            Trigger::Message,
        ) {
            Ok(requester) => requester,
            Err(error) => return (format!("the requester is gone: {error}"), "denied"),
        };
        let visible = policy::permitted_tools(
            &requester,
            self.runtime.tools.all(),
            self.runtime.sandbox_available,
        );
        let Some(tool) = visible.iter().find(|tool| tool.name() == request.tool) else {
            return (
                format!(
                    "{}'s role no longer allows {}",
                    requester.display_name, request.tool
                ),
                "denied",
            );
        };
        let context = ToolContext {
            caller: requester.clone(),
            workspace: self.runtime.workspace.clone(),
            config: config.clone(),
        };
        let started = Instant::now();
        let result = match tokio::time::timeout(
            self.runtime.options.tool_timeout,
            tool.call_approved(
                &context,
                request.input.clone(),
                &request.code,
                &request.porter,
            ),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(ToolError::Timeout(
                self.runtime.options.tool_timeout.as_secs(),
            )),
        };
        let (content, outcome, mut extra) = match result {
            Ok(output) => (output.content, "ok", output.metering),
            Err(error) => (error.to_string(), error.outcome(), Map::new()),
        };
        extra.insert("approval".to_string(), json!(request.code));
        extra.insert("approvedBy".to_string(), json!(approved_by));
        self.runtime
            .metering
            .record_tool_call(&ToolCallRecord {
                user: &requester.slug,
                role: &requester.role_name,
                tool: &request.tool,
                input: &request.input,
                duration: started.elapsed(),
                outcome,
                extra: &extra,
                trigger: requester.trigger.label(),
            })
            .await;
        (content, outcome)
    }

    /// Notes `text` in the requester's session (their next turn sees it) and sends it
    /// to them where they asked, when that channel can send.
    async fn tell_requester(&self, config: &Arc<BotConfig>, request: &Request, text: &str) {
        let requester = match identity::caller_for_contact(
            config,
            &request.requester,
            Some(&request.identity),
            request.session_key.clone(),
            Trigger::Message,
        ) {
            Ok(requester) => requester,
            Err(error) => {
                tracing::warn!(%error, "the requester of an approval is gone; not told");
                return;
            }
        };
        let recipients: Vec<_> = self
            .runtime
            .recipient_for(config, &request.requester, Some(&request.identity))
            .into_iter()
            .collect();
        if let Err(error) = self.runtime.notify(&requester, &recipients, text).await {
            tracing::warn!(error = %saint_config::ErrorChain(&error), "failed to tell a requester about their approval");
        }
    }

    /// Refuses every request past its deadline and tells its requester; returns how
    /// many. Run on a timer by the agent.
    pub(super) async fn expire(&self) -> usize {
        let Some(store) = self.store() else {
            return 0;
        };
        let expired = match tokio::task::spawn_blocking(move || store.expire(now_ms())).await {
            Ok(Ok(expired)) => expired,
            Ok(Err(error)) => {
                tracing::error!(error = %saint_config::ErrorChain(&error), "failed to expire approvals");
                return 0;
            }
            Err(_) => return 0,
        };
        let config = self.runtime.config.current();
        for request in &expired {
            self.count("expired", &request.requester_role).await;
            self.tell_requester(
                &config,
                request,
                &format!(
                    "Nobody approved your request to use {} (request {}) in time; it was not run.",
                    request.tool, request.code
                ),
            )
            .await;
        }
        expired.len()
    }
}
