//! Tool policy: which tools a role may see and call, checked once, by the runtime.
//!
//! Pure: reads only the role and the tool names; no I/O. A pattern is a tool name, a
//! `group:<name>` from [`saint_config::TOOL_GROUPS`], or a glob (`sessions_*`). Deny
//! always wins over allow. The `skill` tool is the one exception to "allowed by a
//! pattern": the role's `skills` setting is its permission (any skill allowed →
//! offered, unless a deny pattern names it). Tools that need the sandbox (`exec`,
//! `process`) are withheld from every role unless the runtime says a sandbox is
//! available and the role has an exec blocklist; the fail-closed `exec` tool of the
//! catalog refuses every call, so a model that names it anyway fails closed.
//!
//! The decision travels as a [`Permit`]: only this module makes one, and
//! [`Tool::call`] takes one, so a tool never asks the policy itself — holding the permit
//! is the proof its call was allowed. Depends on the tool contract (`lib.rs`) only,
//! never on a tool module.

use std::sync::Arc;

use futures::future::BoxFuture;
use globset::GlobBuilder;
use saint_config::{RoleConfig, Skills, TOOL_GROUPS};

use crate::{Caller, Tool, ToolContext, ToolError, ToolOutput, exec::PorterRequest};

/// Proof that the policy let one role call one tool. There is no public way to build
/// one outside this module (private fields, no `Default`, no `Clone`), and
/// [`Tool::call`] cannot be invoked without one, so a call the policy did not allow
/// does not compile, let alone run:
///
/// ```compile_fail,E0451
/// // Private fields: only the policy mints permits.
/// let permit = saint_tools::Permit { tool: "write", role: "owner".to_string() };
/// ```
///
/// ```compile_fail,E0061
/// use saint_tools::{Tool, ToolContext, write::WriteTool};
/// // A tool call without a permit does not type-check.
/// fn call(context: &ToolContext) {
///     let _ = WriteTool.call(context, serde_json::json!({"path": "a", "content": "b"}));
/// }
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Permit {
    tool: &'static str,
    role: String,
    /// The approval code, when this call runs because an approver said yes to exactly
    /// it ([`PermittedTool::call_approved`]).
    approval: Option<String>,
    /// Requests through Porter that approval said yes to: a command this call runs
    /// gets a one-time grant for each.
    porter_grants: Vec<PorterRequest>,
}

impl Permit {
    /// The tool this permit is for.
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The role it was issued to.
    pub fn role(&self) -> &str {
        &self.role
    }

    /// The approval this call runs under, if an approver said yes to exactly it: what a
    /// tool may allow beyond the role's own limits only then (a sub-agent on a dearer
    /// model).
    pub fn approval(&self) -> Option<&str> {
        self.approval.as_deref()
    }

    /// The Porter requests the approval this call runs under said yes to (none without
    /// an approval).
    pub fn porter_grants(&self) -> &[PorterRequest] {
        &self.porter_grants
    }

    /// Refuses a call this permit was not issued for: another tool, or a caller of
    /// another role (a permit handed on to the wrong call proves nothing).
    pub fn covers(&self, tool: &str, caller: &Caller) -> Result<(), ToolError> {
        if self.tool == tool && self.role == caller.role_name {
            Ok(())
        } else {
            Err(ToolError::Denied(format!(
                "your role may not use the {tool} tool"
            )))
        }
    }
}

/// A tool the caller's role may call, together with its permit: what the runtime
/// offers the model and calls.
pub struct PermittedTool {
    tool: Arc<dyn Tool>,
    permit: Permit,
}

impl PermittedTool {
    /// The tool's name.
    pub fn name(&self) -> &'static str {
        self.tool.name()
    }

    /// The tool's description for the model.
    pub fn description(&self) -> &str {
        self.tool.description()
    }

    /// The tool's input schema for the model.
    pub fn input_schema(&self) -> serde_json::Value {
        self.tool.input_schema()
    }

    /// The permit this tool is called with.
    pub fn permit(&self) -> &Permit {
        &self.permit
    }

    /// Calls the tool with its permit.
    pub fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        input: serde_json::Value,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.tool.call(&self.permit, context, input)
    }

    /// Calls the tool with its permit marked approved by `code`: only the runtime's
    /// approvals call this, with the exact arguments the approver said yes to (and the
    /// Porter requests held for it, which the command gets once each).
    pub fn call_approved<'a>(
        &'a self,
        context: &'a ToolContext,
        input: serde_json::Value,
        code: &str,
        porter_grants: &[PorterRequest],
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        let permit = Permit {
            tool: self.permit.tool,
            role: self.permit.role.clone(),
            approval: Some(code.to_string()),
            porter_grants: porter_grants.to_vec(),
        };
        Box::pin(async move { self.tool.call(&permit, context, input).await })
    }
}

impl std::fmt::Debug for PermittedTool {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PermittedTool")
            .field("permit", &self.permit)
            .finish_non_exhaustive()
    }
}

/// The permit for `caller` to call `tool`, or the refusal the model sees.
pub fn permit(
    caller: &Caller,
    tool: &dyn Tool,
    sandbox_available: bool,
) -> Result<Permit, ToolError> {
    let name = tool.name();
    if tool_allowed_with_sandbox(&caller.role, name, sandbox_available) {
        Ok(Permit {
            tool: name,
            role: caller.role_name.clone(),
            approval: None,
            porter_grants: Vec::new(),
        })
    } else {
        Err(ToolError::Denied(format!(
            "your role may not use the {name} tool"
        )))
    }
}

/// The tools `caller` may call, in catalog order, each with its permit. Tools the role
/// may not use are never returned, so they are never described to the model and a
/// call naming one finds nothing to run.
pub fn permitted_tools(
    caller: &Caller,
    all: &[Arc<dyn Tool>],
    sandbox_available: bool,
) -> Vec<PermittedTool> {
    all.iter()
        .filter_map(|tool| {
            permit(caller, tool.as_ref(), sandbox_available)
                .ok()
                .map(|permit| PermittedTool {
                    tool: Arc::clone(tool),
                    permit,
                })
        })
        .collect()
}

/// The tool that loads a skill's instructions: offered by the role's `skills` setting,
/// not by its tool allow list.
pub const SKILL_TOOL: &str = "skill";

/// Whether a `skills` setting lets the role use any skill at all (which skills are
/// installed is the skill tool's and the prompt's business: this module does no I/O).
pub fn skills_allow_any(skills: &Skills) -> bool {
    match skills {
        Skills::All => true,
        Skills::Only(names) => !names.is_empty(),
        Skills::None => false,
    }
}

/// `tools` without the `skill` tool when no installed skill is one the role may use
/// (the caller knows which skills are installed: this module does no I/O), so a role
/// allowed skills that are not installed is not offered a tool with nothing to load.
pub fn without_idle_skill_tool(
    mut tools: Vec<PermittedTool>,
    any_installed_skill_allowed: bool,
) -> Vec<PermittedTool> {
    if !any_installed_skill_allowed {
        tools.retain(|tool| tool.name() != SKILL_TOOL);
    }
    tools
}

/// The browser tool's name; it needs a sandbox, though not `exec`.
const BROWSER: &str = "browser";

/// Tools no role sees until the sandbox exists.
pub const WITHHELD_TOOLS: &[&str] = &["exec", "process"];

/// Whether `pattern` names `tool` (exact name, group membership, or glob match).
/// Unknown groups and malformed globs match nothing.
pub fn pattern_matches(pattern: &str, tool: &str) -> bool {
    if let Some(group) = pattern.strip_prefix("group:") {
        return TOOL_GROUPS
            .iter()
            .any(|(name, members)| *name == group && members.contains(&tool));
    }
    if pattern.contains(['*', '?', '[', '{']) {
        return GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map(|glob| glob.compile_matcher().is_match(tool))
            .unwrap_or(false);
    }
    pattern == tool
}

/// Whether the role may use the tool named `tool`: allowed by some allow pattern, denied
/// by none, and not withheld (sandbox tools are withheld: see [`tool_allowed_with_sandbox`]).
pub fn tool_allowed(role: &RoleConfig, tool: &str) -> bool {
    tool_allowed_with_sandbox(role, tool, false)
}

/// Like [`tool_allowed`], for a runtime that may have a working sandbox. The sandbox
/// tools (`exec`, `process`) are allowed only when `sandbox_available` is true *and* the
/// role has an `execBlocklist` (absent means the role has no exec at all). The budget
/// top-up is allowed only to a role with a budget whose approvals name it.
pub fn tool_allowed_with_sandbox(role: &RoleConfig, tool: &str, sandbox_available: bool) -> bool {
    if WITHHELD_TOOLS.contains(&tool) && !(sandbox_available && role.exec_blocklist.is_some()) {
        return false;
    }
    // The browser runs in the caller's sandbox: without one there is no browser.
    if tool == BROWSER && !sandbox_available {
        return false;
    }
    let denied = role
        .tools
        .deny
        .iter()
        .any(|pattern| pattern_matches(pattern, tool));
    if tool == SKILL_TOOL {
        // The role's `skills` setting is the permission (no allow entry needed); deny
        // still wins.
        return skills_allow_any(&role.skills) && !denied;
    }
    let allowed = role
        .tools
        .allow
        .iter()
        .any(|pattern| pattern_matches(pattern, tool));
    if tool == saint_config::TOP_UP_TOOL {
        // Only for a role with a budget whose approvals name the tool: someone else
        // decides every top-up (the tool itself runs only under an approved permit).
        let approved_by_someone = role.approvals.iter().any(|rule| {
            rule.tools
                .iter()
                .any(|pattern| pattern_matches(pattern, tool))
        });
        return allowed && !denied && role.budget.is_some() && approved_by_someone;
    }
    allowed && !denied
}

/// The tools the role sees, in catalog order. Tools the role may not use are never
/// returned, so they are never described to the model. No sandbox is assumed.
pub fn visible_tools(role: &RoleConfig, all: &[Arc<dyn Tool>]) -> Vec<Arc<dyn Tool>> {
    visible_tools_with_sandbox(role, all, false)
}

/// [`visible_tools`] for a runtime that knows whether a sandbox is available.
pub fn visible_tools_with_sandbox(
    role: &RoleConfig,
    all: &[Arc<dyn Tool>],
    sandbox_available: bool,
) -> Vec<Arc<dyn Tool>> {
    all.iter()
        .filter(|tool| tool_allowed_with_sandbox(role, tool.name(), sandbox_available))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use futures::future::BoxFuture;
    use saint_config::KNOWN_TOOLS;

    use super::*;

    struct Named(&'static str);

    impl Tool for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn input_schema(&self) -> serde_json::Value {
            serde_json::json!({"type": "object", "properties": {}})
        }
        fn call<'a>(
            &'a self,
            _permit: &'a Permit,
            _context: &'a ToolContext,
            _input: serde_json::Value,
        ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
            Box::pin(async { Ok(ToolOutput::text("ok")) })
        }
    }

    fn catalog() -> Vec<Arc<dyn Tool>> {
        KNOWN_TOOLS
            .iter()
            .map(|name| Arc::new(Named(name)) as Arc<dyn Tool>)
            .collect()
    }

    fn role(allow: &[&str], deny: &[&str]) -> RoleConfig {
        serde_json::from_value(serde_json::json!({"tools": {"allow": allow, "deny": deny}}))
            .unwrap()
    }

    fn visible(role: &RoleConfig) -> Vec<&'static str> {
        visible_tools(role, &catalog())
            .iter()
            .map(|tool| tool.name())
            .collect()
    }

    #[test]
    fn groups_expand_to_their_members() {
        assert_eq!(
            visible(&role(&["group:fs"], &[])),
            ["read", "write", "edit", "apply_patch"]
        );
        assert_eq!(
            visible(&role(&["group:sessions", "group:messaging"], &[])),
            [
                "message",
                "sessions_list",
                "sessions_history",
                "sessions_send",
                "sessions_spawn"
            ]
        );
        assert!(visible(&role(&["group:nonexistent"], &[])).is_empty());
    }

    #[test]
    fn globs_match_tool_names() {
        assert_eq!(
            visible(&role(&["sessions_*"], &[])),
            [
                "sessions_list",
                "sessions_history",
                "sessions_send",
                "sessions_spawn"
            ]
        );
        assert_eq!(
            visible(&role(&["web_*", "memory_get"], &[])),
            ["web_search", "web_fetch", "memory_get"]
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        let names = visible(&role(&["*"], &["group:fs", "sessions_s*"]));
        for hidden in [
            "read",
            "write",
            "edit",
            "apply_patch",
            "sessions_send",
            "sessions_spawn",
        ] {
            assert!(!names.contains(&hidden), "{hidden} must be denied");
        }
        assert!(names.contains(&"sessions_list"));
        assert!(!tool_allowed(&role(&["write"], &["write"]), "write"));
        assert!(tool_allowed(&role(&["write"], &[]), "write"));
    }

    #[test]
    fn exec_and_process_are_withheld_from_every_role() {
        for allow in [&["*"][..], &["exec", "process"], &["group:runtime"]] {
            let names = visible(&role(allow, &[]));
            assert!(
                !names.contains(&"exec") && !names.contains(&"process"),
                "{allow:?}"
            );
        }
    }

    #[test]
    fn exec_needs_a_sandbox_and_a_blocklist_and_still_obeys_deny() {
        let mut with_blocklist = role(&["group:runtime", "read"], &[]);
        with_blocklist.exec_blocklist = Some(vec!["rm -rf *".to_string()]);
        let names = |role: &RoleConfig, sandbox| -> Vec<&'static str> {
            visible_tools_with_sandbox(role, &catalog(), sandbox)
                .iter()
                .map(|tool| tool.name())
                .collect()
        };
        assert_eq!(names(&with_blocklist, false), ["read"]);
        assert_eq!(names(&with_blocklist, true), ["read", "exec", "process"]);
        let without_blocklist = role(&["group:runtime", "read"], &[]);
        assert_eq!(
            names(&without_blocklist, true),
            ["read"],
            "absent blocklist means no exec at all"
        );
        let mut denied = role(&["*"], &["exec"]);
        denied.exec_blocklist = Some(Vec::new());
        assert!(!names(&denied, true).contains(&"exec"));
    }

    #[test]
    fn a_budget_top_up_needs_a_budget_and_an_approval_rule_naming_it() {
        let tool = saint_config::TOP_UP_TOOL;
        let rule = |tools: &[&str]| saint_config::ApprovalRule {
            tools: tools.iter().map(|tool| tool.to_string()).collect(),
            porter: None,
            when: Default::default(),
            approvers: saint_config::Approvers {
                roles: vec!["owner".to_string()],
                contacts: Vec::new(),
            },
            timeout_seconds: 60,
        };
        let mut asking = role(&["*"], &[]);
        asking.budget = Some(saint_config::Budget {
            usd: 2.0,
            period: saint_config::BudgetPeriod::Month,
        });
        assert!(
            !tool_allowed(&asking, tool),
            "no rule: it would raise its own"
        );
        asking.approvals = vec![rule(&["message"])];
        assert!(!tool_allowed(&asking, tool), "a rule for another tool");
        asking.approvals = vec![rule(&["budget_*"])];
        assert!(tool_allowed(&asking, tool));
        let mut unbudgeted = asking.clone();
        unbudgeted.budget = None;
        assert!(!tool_allowed(&unbudgeted, tool), "nothing to top up");
        let mut denied = asking.clone();
        denied.tools.deny = vec![tool.to_string()];
        assert!(!tool_allowed(&denied, tool), "deny wins");
        let mut not_allowed = asking.clone();
        not_allowed.tools.allow = vec!["read".to_string()];
        assert!(!tool_allowed(&not_allowed, tool));
    }

    #[test]
    fn the_skill_tool_follows_the_skills_setting_and_deny_still_wins() {
        let with_skills = |allow: &[&str], deny: &[&str], skills: serde_json::Value| {
            let mut role = role(allow, deny);
            role.skills = serde_json::from_value(skills).unwrap();
            visible(&role).contains(&SKILL_TOOL)
        };
        // No allow entry needed: the skills setting is the permission.
        assert!(with_skills(&[], &[], serde_json::json!("all")));
        assert!(with_skills(
            &["read"],
            &[],
            serde_json::json!({"only": ["pdf"]})
        ));
        // An allow list naming it does not give it to a role without skills.
        assert!(!with_skills(&["*"], &[], serde_json::json!("none")));
        assert!(!with_skills(
            &["skill"],
            &[],
            serde_json::json!({"only": []})
        ));
        for deny in ["skill", "group:skills", "sk*"] {
            assert!(
                !with_skills(&["*"], &[deny], serde_json::json!("all")),
                "{deny}"
            );
        }
    }

    #[test]
    fn the_skill_tool_is_withheld_when_no_installed_skill_is_allowed() {
        let mut owner: RoleConfig = serde_json::from_value(
            serde_json::json!({"skills": "all", "tools": {"allow": ["read"]}}),
        )
        .unwrap();
        owner.description = "owner".to_string();
        let caller =
            crate::test_fixtures::caller(&crate::test_fixtures::company_config(), "acme-ana");
        let caller = Caller {
            role: Arc::new(owner),
            ..caller
        };
        let names = |any: bool| -> Vec<&'static str> {
            without_idle_skill_tool(permitted_tools(&caller, &catalog(), false), any)
                .iter()
                .map(|tool| tool.name())
                .collect()
        };
        assert_eq!(names(true), ["read", "skill"]);
        assert_eq!(names(false), ["read"]);
    }

    #[test]
    fn external_role_sees_only_web_tools() {
        let external = role(
            &["web_search", "web_fetch"],
            &["group:fs", "group:runtime", "group:memory"],
        );
        assert_eq!(visible(&external), ["web_search", "web_fetch"]);
        assert!(
            visible(&role(&[], &[])).is_empty(),
            "an empty allow list shows nothing"
        );
    }
}
