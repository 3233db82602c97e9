//! The `budget_top_up` tool: a person over (or near) their budget asks for more, and
//! someone their role's `approvals` name says yes.
//!
//! The tool never raises a budget by itself. It runs only under an approved permit
//! ([`saint_tools::Permit::approval`]): the turn that asks stores the request and tells
//! the approvers, and the runtime runs exactly those arguments once an approver agrees.
//! The policy shows it only to a role with a budget and an approval rule naming it
//! ([`saint_tools::policy::tool_allowed_with_sandbox`]), so it is never a way around
//! the budget; a misconfigured
//! role whose rule matches only some calls still cannot run one unapproved.
//!
//! A top-up is a credit in the person's `spend` for today (a negative amount), so the
//! budget's account, its store and erasure need nothing new: the period's charge is
//! spend minus top-ups. The live account takes the credit at once
//! ([`SpendLedger::credit`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use saint_tools::{Permit, Tool, ToolContext, ToolError, ToolOutput, typed};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{budget::SpendLedger, metering, session::SessionStore};

/// The tool's name in roles, approvals and the catalog.
pub const TOP_UP_TOOL: &str = saint_config::TOP_UP_TOOL;

/// What the model sends.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TopUpInput {
    /// USD to add to this period's budget.
    amount_usd: f64,
    /// Why, for the approver.
    reason: String,
}

/// Longest reason, in characters (the approver reads it in a chat message).
const MAX_REASON_CHARS: usize = 500;

/// Raises the caller's budget for this period by an approved amount.
pub struct TopUpTool {
    store: Arc<SessionStore>,
    budgets: SpendLedger,
}

impl TopUpTool {
    /// The tool, crediting `store`'s spend and the live accounts of `budgets` (the
    /// runtime's ledger).
    pub fn new(store: Arc<SessionStore>, budgets: SpendLedger) -> Self {
        Self { store, budgets }
    }
}

impl Tool for TopUpTool {
    fn name(&self) -> &'static str {
        TOP_UP_TOOL
    }

    fn description(&self) -> &str {
        "Ask for more budget for this period, when the person's work needs more than their \
         budget allows. It does not run by itself: someone the person's role names must \
         approve the exact amount first, and the person is told either way."
    }

    fn input_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "amountUsd": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "USD to add to this period's budget (at most the role's budget for one period)",
                },
                "reason": {
                    "type": "string",
                    "description": "Why the person needs it, in a sentence the approver will read",
                },
            },
            "required": ["amountUsd", "reason"],
            "additionalProperties": false,
        })
    }

    fn call<'a>(
        &'a self,
        permit: &'a Permit,
        context: &'a ToolContext,
        input: Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            permit.covers(TOP_UP_TOOL, &context.caller)?;
            let input: TopUpInput = typed::decode(input)?;
            let Some(budget) = context.caller.role.budget.clone() else {
                return Err(ToolError::Denied(
                    "your role has no budget to top up".to_string(),
                ));
            };
            if !(input.amount_usd.is_finite() && input.amount_usd > 0.0) {
                return Err(ToolError::InvalidInput(format!(
                    "amountUsd must be a positive number of USD, not {}",
                    input.amount_usd
                )));
            }
            if input.amount_usd > budget.usd {
                return Err(ToolError::InvalidInput(format!(
                    "amountUsd {} is more than your role's whole budget for one period ({} USD); ask for at most that",
                    input.amount_usd, budget.usd
                )));
            }
            if input.reason.trim().is_empty() || input.reason.chars().count() > MAX_REASON_CHARS {
                return Err(ToolError::InvalidInput(format!(
                    "reason must say why in 1 to {MAX_REASON_CHARS} characters"
                )));
            }
            // The one gate that matters: only an approver's yes to exactly this call
            // raises a budget.
            let Some(code) = permit.approval() else {
                return Err(ToolError::Denied(
                    "a budget top-up runs only once someone your role names approves it; \
                     your role's approvals do not cover this request"
                        .to_string(),
                ));
            };
            let now = jiff::Timestamp::now();
            let day = metering::spend_day(now);
            let slug = context.caller.slug.clone();
            let store = self.store.clone();
            let amount = input.amount_usd;
            tokio::task::spawn_blocking(move || store.add_spend(&slug, &day, -amount))
                .await
                .map_err(|_| ToolError::Failed("the storage task failed".to_string()))?
                .map_err(|error| {
                    ToolError::Failed(format!(
                        "failed to record the top-up: {}",
                        saint_config::ErrorChain(&error)
                    ))
                })?;
            self.budgets
                .credit(&context.caller.slug, &budget, amount, now);
            let mut metering = serde_json::Map::new();
            metering.insert("topUpUsd".to_string(), json!(amount));
            Ok(ToolOutput {
                metering,
                ..ToolOutput::text(format!(
                    "Added {amount} USD to {}'s budget for this {} (approval {code}).",
                    context.caller.display_name,
                    period_word(budget.period)
                ))
            })
        })
    }
}

fn period_word(period: saint_config::BudgetPeriod) -> &'static str {
    match period {
        saint_config::BudgetPeriod::Day => "day",
        saint_config::BudgetPeriod::Week => "week",
        saint_config::BudgetPeriod::Month => "month",
    }
}
