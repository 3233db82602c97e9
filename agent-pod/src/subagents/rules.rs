//! What a sub-agent may do, decided from its parent's caller and the spawn's request
//! before anything runs. Pure: reads only the caller, the config and the request.
//!
//! The rules:
//! - The child runs as the parent's person, with the parent's role (already narrowed if
//!   the parent is itself a sub-agent) narrowed again by [`narrowed_role`]: denials are
//!   only added, so asking for a tool the parent lacks gets nothing.
//! - `cron` and `message` reach a child only when the spawn's `tools` names them
//!   literally (not by a group or a glob) and the parent's role allows them; otherwise
//!   they are denied, so a background child never schedules work or writes to people
//!   unless that was the point of the spawn.
//! - Depth: a person's turn is depth 0; its children depth 1. A spawn whose child would
//!   be deeper than the role's `spawn.maxDepth` is refused, and a child at that depth
//!   does not get `sessions_spawn` at all.
//! - Time: the spawn may ask for less than the role's `spawn.timeoutSeconds`, never more.
//! - Model: the spawn may name another model only when it costs no more than the role's
//!   own, per the bot's `model.prices`, in both the input and the output price; a model
//!   without a price is refused (its spend could not be counted against the budget).

use std::time::Duration;

use saint_config::{BotConfig, KNOWN_TOOLS, RoleConfig};
use saint_tools::{Caller, ToolError, policy};

use crate::runtime::narrowed_role;

/// The tools a child gets only when the spawn names them.
pub const ONLY_WHEN_ASKED: &[&str] = &["cron", "message"];

/// The spawn tool's own name.
pub const SPAWN_TOOL: &str = "sessions_spawn";

/// What a spawn asks for beyond its task.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpawnRequest {
    /// The tools the child may use at most (names, `group:<name>` or globs); `None`:
    /// whatever the parent may use (but see [`ONLY_WHEN_ASKED`]).
    pub tools: Option<Vec<String>>,
    /// Another model for the child.
    pub model: Option<String>,
    /// A shorter timeout than the role's, in seconds.
    pub timeout_seconds: Option<u64>,
    /// Whether an approver said yes to exactly this spawn ([`saint_tools::Permit::approval`]).
    pub approved: bool,
}

/// What the child runs with.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildPlan {
    /// The parent's role, narrowed (its `model` set to the child's model).
    pub role: RoleConfig,
    /// The child's depth.
    pub depth: u32,
    /// The model its turn uses.
    pub model: String,
    /// How long it may run.
    pub timeout: Duration,
}

/// Decides what a child of `parent` may do, or why it may not start.
pub fn plan_child(
    parent: &Caller,
    config: &BotConfig,
    request: &SpawnRequest,
) -> Result<ChildPlan, ToolError> {
    let limits = &parent.role.spawn;
    let depth = parent.depth + 1;
    if depth > limits.max_depth {
        return Err(ToolError::Denied(format!(
            "sub-agents may nest at most {} deep for your role (spawn.maxDepth); this one would be {depth} deep",
            limits.max_depth
        )));
    }
    if let Some(tools) = &request.tools {
        check_patterns(tools)?;
    }
    let model = child_model(
        config,
        &parent.role,
        request.model.as_deref(),
        request.approved,
    )?;
    let timeout = child_timeout(&parent.role, request.timeout_seconds)?;
    let mut deny: Vec<&str> = ONLY_WHEN_ASKED
        .iter()
        .copied()
        .filter(|tool| !named_literally(request.tools.as_deref(), tool))
        .collect();
    if depth >= limits.max_depth {
        deny.push(SPAWN_TOOL);
    }
    let mut role = narrowed_role(&parent.role, request.tools.as_deref(), &deny);
    role.model = Some(model.clone());
    Ok(ChildPlan {
        role,
        depth,
        model,
        timeout,
    })
}

fn named_literally(tools: Option<&[String]>, tool: &str) -> bool {
    tools.is_some_and(|tools| tools.iter().any(|named| named.trim() == tool))
}

/// Refuses a `tools` entry that names no tool at all (a typo would otherwise silently
/// leave the child without the tool it was meant to have).
fn check_patterns(tools: &[String]) -> Result<(), ToolError> {
    for pattern in tools {
        if !KNOWN_TOOLS
            .iter()
            .any(|tool| policy::pattern_matches(pattern, tool))
        {
            return Err(ToolError::InvalidInput(format!(
                "tools: {pattern:?} names no tool (known tools: {})",
                KNOWN_TOOLS.join(", ")
            )));
        }
    }
    Ok(())
}

/// The model a role's turns use.
pub fn role_model(config: &BotConfig, role: &RoleConfig) -> String {
    role.model
        .clone()
        .unwrap_or_else(|| config.model.name.clone())
}

/// The child's model: the role's own, or the one asked for when it is no more
/// expensive (input and output price both no higher, per `model.prices`) — or dearer,
/// when an approver said yes to exactly this spawn (`approved`; the role's `approvals`
/// decide which spawns may ask). A model without a price is refused either way: its
/// spend could not be counted against the person's budget.
pub fn child_model(
    config: &BotConfig,
    role: &RoleConfig,
    requested: Option<&str>,
    approved: bool,
) -> Result<String, ToolError> {
    let own = role_model(config, role);
    let Some(requested) = requested.map(str::trim).filter(|model| !model.is_empty()) else {
        return Ok(own);
    };
    if requested == own {
        return Ok(own);
    }
    let Some(price) = config.model.prices.get(requested) else {
        return Err(ToolError::Denied(format!(
            "model {requested:?} has no price in the bot's model.prices, so a sub-agent may not use it (its spend could not be counted); use {own:?} or a priced model no more expensive"
        )));
    };
    let Some(own_price) = config.model.prices.get(&own) else {
        return Err(ToolError::Denied(format!(
            "your role's model {own:?} has no price in the bot's model.prices, so no other model can be shown to cost no more; a sub-agent may use only {own:?}"
        )));
    };
    if !approved
        && (price.input_per_mtok > own_price.input_per_mtok
            || price.output_per_mtok > own_price.output_per_mtok)
    {
        return Err(ToolError::Denied(format!(
            "model {requested:?} costs more than your role's model {own:?} (USD per million tokens: input {} vs {}, output {} vs {}); a sub-agent may use only a model no more expensive in both, unless your role's approvals let you ask someone for it",
            price.input_per_mtok,
            own_price.input_per_mtok,
            price.output_per_mtok,
            own_price.output_per_mtok
        )));
    }
    Ok(requested.to_string())
}

/// The child's time limit: the role's `spawn.timeoutSeconds`, or less when asked.
pub fn child_timeout(role: &RoleConfig, requested: Option<u64>) -> Result<Duration, ToolError> {
    let most = role.spawn.timeout_seconds;
    match requested {
        Some(0) => Err(ToolError::InvalidInput(
            "timeoutSeconds must be at least 1".to_string(),
        )),
        Some(seconds) => Ok(Duration::from_secs(seconds.min(most))),
        None => Ok(Duration::from_secs(most)),
    }
}

/// Said to the child's model after its system prompt.
pub fn child_note(parent: &Caller, timeout: Duration) -> String {
    format!(
        "You are a sub-agent started by {} to do one task in the background; nobody reads along while you work. \
         Do the task with the tools you have, within {} seconds, and end with your final answer: \
         it is returned to {} in the conversation the work was started from.",
        parent.display_name,
        timeout.as_secs(),
        parent.display_name
    )
}

/// How a child ended, for the announcement in its parent's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildEnd {
    /// It answered.
    Answered(String),
    /// Its turn stopped at the step limit (the text says so).
    StepLimit(String),
    /// Its owner's budget is spent: nothing ran, or it stopped.
    OverBudget,
    /// It ran out of time and was cancelled.
    TimedOut(Duration),
    /// It failed.
    Failed(String),
    /// It was cancelled from outside (why).
    Stopped(&'static str),
    /// Its owner's authority changed while it ran: it stopped before its next call (the
    /// text says why).
    AuthorityChanged(String),
}

/// The announcement stored in the session the sub-agents were started from (and
/// delivered to the person); `started_by` is the id of the sub-agent that started this
/// one, if one did.
pub fn announcement(
    child_id: &str,
    started_by: Option<&str>,
    task: &str,
    end: &ChildEnd,
) -> String {
    let task = summary(task, 120);
    let who = match started_by {
        Some(parent) => format!("Sub-agent {child_id} (started by sub-agent {parent})"),
        None => format!("Sub-agent {child_id}"),
    };
    match end {
        ChildEnd::Answered(text) => {
            format!("{who} finished the task \"{task}\":\n\n{text}")
        }
        ChildEnd::StepLimit(text) => {
            format!("{who} stopped before finishing the task \"{task}\": {text}")
        }
        ChildEnd::OverBudget => {
            format!("{who} did not finish the task \"{task}\": the budget is spent.")
        }
        ChildEnd::TimedOut(after) => format!(
            "{who} timed out after {} s and was stopped before finishing the task \"{task}\".",
            after.as_secs()
        ),
        ChildEnd::Failed(reason) => {
            format!("{who} failed on the task \"{task}\": {reason}.")
        }
        ChildEnd::Stopped(why) => {
            format!("{who} was stopped before finishing the task \"{task}\": {why}.")
        }
        ChildEnd::AuthorityChanged(text) => {
            format!("{who} was stopped before finishing the task \"{task}\": {text}")
        }
    }
}

/// The first `limit` characters of `text` on one line, marked when cut.
fn summary(text: &str, limit: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= limit {
        return line;
    }
    let mut cut: String = line.chars().take(limit).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pretty_assertions::assert_eq;
    use saint_config::BotConfig;
    use saint_tools::{Trigger, policy::tool_allowed};

    use super::*;

    fn config() -> BotConfig {
        BotConfig::from_json(include_str!(
            "../../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap()
    }

    fn caller(config: &BotConfig, role: &str, depth: u32) -> Caller {
        let mut role_config = config.roles[role].clone();
        role_config.tools.allow.push("sessions_spawn".to_string());
        Caller {
            slug: "ivan".to_string(),
            display_name: "Ivan".to_string(),
            role_name: role.to_string(),
            role: Arc::new(role_config),
            known: true,
            identity: "telegram:333333333".to_string(),
            session_key: "person:ivan".to_string(),
            trigger: Trigger::Message,
            depth,
            may_message: None,
        }
    }

    fn asking(tools: &[&str]) -> SpawnRequest {
        SpawnRequest {
            tools: Some(tools.iter().map(|tool| tool.to_string()).collect()),
            ..SpawnRequest::default()
        }
    }

    #[test]
    fn a_child_never_gets_a_tool_its_parent_lacks_even_when_asked() {
        let config = config();
        let parent = caller(&config, "employee", 0);
        assert!(!tool_allowed(&parent.role, "write"));
        for request in [
            asking(&["write", "read"]),
            asking(&["*"]),
            asking(&["group:fs"]),
            SpawnRequest::default(),
        ] {
            let plan = plan_child(&parent, &config, &request).unwrap();
            for tool in KNOWN_TOOLS {
                if tool_allowed(&plan.role, tool) {
                    assert!(
                        tool_allowed(&parent.role, tool),
                        "{tool} is wider than the parent ({request:?})"
                    );
                }
            }
            assert!(!tool_allowed(&plan.role, "write"));
        }
        let plan = plan_child(&parent, &config, &asking(&["write", "read"])).unwrap();
        assert!(tool_allowed(&plan.role, "read"));
        assert!(!tool_allowed(&plan.role, "web_search"), "not asked for");
    }

    #[test]
    fn cron_and_message_need_the_parents_role_and_a_literal_request() {
        let config = config();
        let mut manager = caller(&config, "manager", 0);
        let mut role = (*manager.role).clone();
        role.spawn.max_depth = 2;
        manager.role = Arc::new(role);
        for (request, expected) in [
            (SpawnRequest::default(), false),
            (asking(&["*"]), false),
            (asking(&["group:automation", "group:messaging"]), false),
            (asking(&["cron", "message"]), true),
        ] {
            let plan = plan_child(&manager, &config, &request).unwrap();
            assert_eq!(tool_allowed(&plan.role, "cron"), expected, "{request:?}");
            assert_eq!(tool_allowed(&plan.role, "message"), expected, "{request:?}");
        }
        // The employee has message but not cron: asking for both gets only message.
        let employee = caller(&config, "employee", 0);
        let plan = plan_child(&employee, &config, &asking(&["cron", "message"])).unwrap();
        assert!(!tool_allowed(&plan.role, "cron"));
        assert!(tool_allowed(&plan.role, "message"));
    }

    #[test]
    fn depth_is_limited_and_the_deepest_child_cannot_spawn() {
        let config = config();
        let parent = caller(&config, "employee", 0);
        assert_eq!(parent.role.spawn.max_depth, 1);
        let plan = plan_child(&parent, &config, &SpawnRequest::default()).unwrap();
        assert_eq!(plan.depth, 1);
        assert!(!tool_allowed(&plan.role, SPAWN_TOOL));
        let child = caller(&config, "employee", 1);
        let refused = plan_child(&child, &config, &SpawnRequest::default()).unwrap_err();
        assert!(refused.to_string().contains("spawn.maxDepth"), "{refused}");

        let mut deeper = caller(&config, "employee", 0);
        let mut role = (*deeper.role).clone();
        role.spawn.max_depth = 2;
        deeper.role = Arc::new(role);
        let plan = plan_child(&deeper, &config, &SpawnRequest::default()).unwrap();
        assert!(
            tool_allowed(&plan.role, SPAWN_TOOL),
            "depth 1 of 2 may spawn"
        );
        deeper.depth = 1;
        deeper.role = Arc::new(plan.role);
        let plan = plan_child(&deeper, &config, &SpawnRequest::default()).unwrap();
        assert_eq!(plan.depth, 2);
        assert!(!tool_allowed(&plan.role, SPAWN_TOOL));
    }

    #[test]
    fn a_cheaper_model_is_allowed_a_dearer_or_unpriced_one_is_refused() {
        let config = config();
        let manager = config.roles["manager"].clone();
        assert_eq!(role_model(&config, &manager), "claude-sonnet-4-5");
        assert_eq!(
            child_model(&config, &manager, Some("claude-haiku-4-5"), false).unwrap(),
            "claude-haiku-4-5"
        );
        assert_eq!(
            child_model(&config, &manager, None, false).unwrap(),
            "claude-sonnet-4-5"
        );
        let employee = config.roles["employee"].clone();
        let dearer = child_model(&config, &employee, Some("claude-sonnet-4-5"), false).unwrap_err();
        assert!(
            dearer
                .to_string()
                .contains("costs more than your role's model \"claude-haiku-4-5\""),
            "{dearer}"
        );
        let unpriced = child_model(&config, &employee, Some("gpt-9"), false).unwrap_err();
        assert!(unpriced.to_string().contains("no price"), "{unpriced}");
        // Cheaper in input but dearer in output is still dearer.
        let mut mixed = config.clone();
        mixed.model.prices.insert(
            "odd".to_string(),
            saint_config::ModelPrice {
                input_per_mtok: 0.5,
                output_per_mtok: 6.0,
                per_audio_minute: None,
                per_million_characters: None,
            },
        );
        assert!(child_model(&mixed, &employee, Some("odd"), false).is_err());
        // The role's own model is always fine, priced or not.
        assert_eq!(
            child_model(&config, &employee, Some("claude-haiku-4-5"), false).unwrap(),
            "claude-haiku-4-5"
        );
        // An approver said yes to exactly this spawn: the dearer model is allowed, an
        // unpriced one still is not (its spend could not be counted).
        assert_eq!(
            child_model(&config, &employee, Some("claude-sonnet-4-5"), true).unwrap(),
            "claude-sonnet-4-5"
        );
        assert!(child_model(&config, &employee, Some("gpt-9"), true).is_err());
    }

    #[test]
    fn the_timeout_is_the_shorter_of_the_request_and_the_role() {
        let config = config();
        let role = &config.roles["employee"];
        assert_eq!(
            child_timeout(role, None).unwrap(),
            Duration::from_secs(role.spawn.timeout_seconds)
        );
        assert_eq!(
            child_timeout(role, Some(5)).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            child_timeout(role, Some(u64::MAX)).unwrap(),
            Duration::from_secs(role.spawn.timeout_seconds)
        );
        assert!(child_timeout(role, Some(0)).is_err());
    }

    #[test]
    fn a_tools_entry_naming_nothing_is_refused() {
        let config = config();
        let parent = caller(&config, "employee", 0);
        let error = plan_child(&parent, &config, &asking(&["wrte"])).unwrap_err();
        assert!(
            error.to_string().contains("\"wrte\" names no tool"),
            "{error}"
        );
    }
}
