//! Roles: the Roles a bot selects, rendered for the config, re-checking what CEL may not
//! have (the CRD could be installed without validation, or an older version). Pure.
//!
//! [`render_role`] is the one rule for whether a Role is usable: the references
//! controller writes the Role's status from it and every bot selecting the Role applies
//! it, so the two never disagree. A Role that fails it is a problem of that Role alone:
//! bots selecting it leave it out of their config (with the Contacts holding it, who are
//! then treated as strangers) and render everything else.

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use saint_config::{
    ApprovalRule, Approvers, BOOTSTRAP_FILES, BotConfig, Budget, ConfigError, ContactConfig,
    ContactSlug, CronLimits, FileGlobs, MAX_RUNNING_PROCESSES, PorterRequests, ProcessLimits,
    Retention, RoleConfig, SessionsVisibility, Skills, SpawnLimits, ToolPolicy,
    is_known_tool_pattern,
};

use super::ValidateError;
use crate::{
    crd::{
        Role, SaintBot,
        formats::is_workspace_path,
        proactive::{CronLimitsSpec, SpawnLimitsSpec, bounds},
        role::{ApprovalRuleSpec, ProcessLimitsSpec},
    },
    identity::IdentityReport,
    selection::bot_uses_role,
};

/// Why a Role cannot be rendered: the Role, the field and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("failed to render Role {role:?}: {field}: {message}")]
pub struct RoleError {
    /// `metadata.name` of the Role.
    pub role: String,
    /// The Role's field, as `spec.tools.allow`.
    pub field: String,
    /// What is wrong, quoting the value.
    pub message: String,
}

fn invalid_role(role: &str, field: &str, message: impl Into<String>) -> RoleError {
    RoleError {
        role: role.to_string(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Paths and globs the file tools or the prompt resolve must stay inside the workspace
/// (the CRD's rule, [`is_workspace_path`]): the agent would refuse or never match one
/// that does not, and the Role would look as if it granted something.
fn check_workspace_paths(role: &str, field: &str, paths: &[String]) -> Result<(), RoleError> {
    match paths.iter().find(|path| !is_workspace_path(path)) {
        Some(path) => Err(invalid_role(
            role,
            field,
            format!(
                "{path:?} must be a path inside the workspace: relative, without '..' \
                 segments, backslashes or control characters"
            ),
        )),
        None => Ok(()),
    }
}

/// Converts a Role resource into the rendered role, or says which field makes it unusable.
/// Covers every rule the agent's `saint_config::validate` applies to one role on its own
/// (what its approval rules need from the bot — approvers that exist, someone besides
/// the requester — is `settle_approvals`'s), so a bot whose Roles all pass both never
/// fails that check because of a role.
pub fn render_role(role: &Role) -> Result<RoleConfig, RoleError> {
    let name = role.name_any();
    let spec = &role.spec;
    for (list, patterns) in [
        ("spec.tools.allow", &spec.tools.allow),
        ("spec.tools.deny", &spec.tools.deny),
    ] {
        if let Some(pattern) = patterns
            .iter()
            .find(|pattern| !is_known_tool_pattern(pattern))
        {
            return Err(invalid_role(
                &name,
                list,
                format!(
                    "{pattern:?} is not a known tool, group:<name>, a glob matching one or an \
                     MCP server's tools (<server>.<tool>, <server>.*)"
                ),
            ));
        }
    }
    if let Some(file) = spec
        .bootstrap
        .iter()
        .find(|file| !BOOTSTRAP_FILES.contains(&file.as_str()))
    {
        return Err(invalid_role(
            &name,
            "spec.bootstrap",
            format!("{file:?} is not a bootstrap file (one of {BOOTSTRAP_FILES:?})"),
        ));
    }
    for (field, paths) in [
        ("spec.files.read", &spec.files.read),
        ("spec.files.write", &spec.files.write),
        ("spec.files.denyWrite", &spec.files.deny_write),
        ("spec.inject", &spec.inject),
    ] {
        check_workspace_paths(&name, field, paths)?;
    }
    if let Some(budget) = &spec.budget
        && !(budget.usd.is_finite() && budget.usd >= 0.0)
    {
        return Err(invalid_role(
            &name,
            "spec.budget.usd",
            "must be a number ≥ 0",
        ));
    }
    let skills = match spec.skills.as_slice() {
        [] => Skills::None,
        [only] if only == "*" => Skills::All,
        list if list.iter().any(|skill| skill == "*") => {
            return Err(invalid_role(
                &name,
                "spec.skills",
                "'*' must be the only entry",
            ));
        }
        list => Skills::Only(list.to_vec()),
    };
    let role = RoleConfig {
        description: spec.description.clone(),
        tools: ToolPolicy {
            allow: spec.tools.allow.clone(),
            deny: spec.tools.deny.clone(),
        },
        model: spec.model.clone(),
        exec_blocklist: spec.exec_blocklist.clone(),
        memory_scope: spec.memory_scope.clone(),
        files: FileGlobs {
            read: spec.files.read.clone(),
            write: spec.files.write.clone(),
            deny_write: spec.files.deny_write.clone(),
        },
        skills,
        budget: spec.budget.as_ref().map(|budget| Budget {
            usd: budget.usd,
            period: budget.period,
        }),
        bootstrap: spec.bootstrap.clone(),
        inject: spec.inject.clone(),
        sessions_visibility: SessionsVisibility::from_kind(
            spec.sessions_visibility,
            &spec.sessions_visible_roles,
        ),
        external: spec.external,
        cron: cron_limits(&name, spec.cron.as_ref())?,
        spawn: spawn_limits(&name, spec.spawn.as_ref())?,
        process: process_limits(&name, spec.process.as_ref())?,
        retention: spec.retention.as_ref().map(|retention| Retention {
            transcripts_days: retention.transcripts_days,
            attachments_days: retention.attachments_days,
            memory_days: retention.memory_days,
            usage_days: retention.usage_days,
        }),
        approvals: render_approvals(&name, &spec.approvals)?,
    };
    if let Some((scope, file)) = role.memory_beyond_read() {
        return Err(invalid_role(
            &name,
            "spec.memoryScope",
            saint_config::memory_scope_message(scope, file, "spec.files.read"),
        ));
    }
    Ok(role)
}

/// Approval timeout when a rule names none: the agent's own default.
pub use saint_config::DEFAULT_APPROVAL_TIMEOUT_SECONDS;

/// `spec.approvals`, rendered; what the rules say on their own is checked here (tools,
/// argument globs, some approver, timeouts), by the agent's own rule (see
/// [`agents_approval_check`]). Whether the approvers exist and someone besides the
/// requester can decide depends on the bot: [`settle_approvals`].
fn render_approvals(
    role: &str,
    rules: &[ApprovalRuleSpec],
) -> Result<Vec<ApprovalRule>, RoleError> {
    let mut rendered = Vec::with_capacity(rules.len());
    for (index, rule) in rules.iter().enumerate() {
        let field = format!("spec.approvals[{index}].approvers.contacts");
        let contacts = rule
            .approvers
            .contacts
            .iter()
            .map(|contact| {
                ContactSlug::parse(contact).map_err(|_| {
                    invalid_role(
                        role,
                        &field,
                        format!(
                            "{contact:?} is not a Contact name (lower-case letters, digits and \
                             '-', at most 63)"
                        ),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        rendered.push(ApprovalRule {
            tools: rule.tools.clone(),
            porter: rule.porter.as_ref().map(|porter| PorterRequests {
                hosts: porter.hosts.clone(),
                methods: porter.methods.clone(),
                paths: porter.paths.clone(),
            }),
            when: rule.when.clone(),
            approvers: Approvers {
                roles: rule.approvers.roles.clone(),
                contacts,
            },
            timeout_seconds: rule
                .timeout_seconds
                .unwrap_or(DEFAULT_APPROVAL_TIMEOUT_SECONDS),
        });
    }
    // On their own, the approvers always exist: one stand-in Role per approver Role and
    // one stand-in Contact per approver Contact, none of them holding this Role, so only
    // what the rules themselves say can fail.
    let stand_ins: BTreeSet<String> = rendered
        .iter()
        .flat_map(|rule| rule.approvers.roles.iter().cloned())
        .filter(|approver| approver != role)
        .collect();
    let contacts: BTreeSet<ContactSlug> = rendered
        .iter()
        .flat_map(|rule| rule.approvers.contacts.iter().cloned())
        .collect();
    let contacts = contacts
        .into_iter()
        .map(|slug| stand_in_contact(slug, STAND_IN_ROLE))
        .collect();
    agents_approval_check(
        role,
        &rendered,
        stand_ins.iter().map(String::as_str),
        contacts,
    )?;
    Ok(rendered)
}

/// The Role stand-in Contacts hold in [`agents_approval_check`]: not a DNS label, so no
/// Role's name.
const STAND_IN_ROLE: &str = " stand-in";

fn stand_in_contact(slug: ContactSlug, role: &str) -> ContactConfig {
    ContactConfig {
        name: slug.as_str().to_string(),
        slug,
        role: role.to_string(),
        identities: Vec::new(),
        erase: false,
    }
}

/// Runs the agent's own check (`saint_config::validate`) over the approval rules `rules`
/// of Role `role`, in a config holding only them, the Roles `others` (empty) and
/// `contacts`: the operator refuses exactly what the agent would, named as the Role's
/// field (`roles.<role>.approvals[0].approvers` → `spec.approvals[0].approvers`).
fn agents_approval_check<'a>(
    role: &str,
    rules: &[ApprovalRule],
    others: impl Iterator<Item = &'a str>,
    contacts: Vec<ContactConfig>,
) -> Result<(), RoleError> {
    if rules.is_empty() {
        return Ok(());
    }
    let mut config: BotConfig = serde_json::from_value(serde_json::json!({
        "schemaVersion": saint_config::SCHEMA_VERSION,
        "bot": {"name": "approvals", "namespace": "approvals"},
        "model": {"provider": "anthropic", "name": "stand-in", "baseUrl": "https://stand-in.invalid"},
        "defaultRole": role,
        "roles": {},
        "sandbox": {"backend": "local"},
    }))
    .expect("the stand-in config parses");
    let empty: RoleConfig =
        serde_json::from_value(serde_json::json!({})).expect("an empty role parses");
    for other in others {
        config.roles.insert(other.to_string(), empty.clone());
    }
    for contact in &contacts {
        config.roles.insert(contact.role.clone(), empty.clone());
    }
    config.roles.insert(
        role.to_string(),
        RoleConfig {
            approvals: rules.to_vec(),
            ..empty
        },
    );
    config.contacts = contacts;
    let prefix = format!("roles.{role}.approvals");
    match saint_config::validate(&config) {
        Ok(()) => Ok(()),
        Err(ConfigError::Invalid { field, message }) if field.starts_with(&prefix) => {
            Err(invalid_role(
                role,
                &format!("spec.approvals{}", &field[prefix.len()..]),
                message,
            ))
        }
        // Nothing else in this config can be wrong; if the agent finds something, the
        // rules are refused rather than rendered unchecked.
        Err(error) => Err(invalid_role(
            role,
            "spec.approvals",
            saint_config::ErrorChain(&error).to_string(),
        )),
    }
}

/// Leaves out of the bot, one at a time, each Role whose approval rules it cannot
/// honour: an approver that is not one of its Roles or Contacts, or — the agent's rule —
/// an only approver who is the Role's one member (nobody approves their own request, so
/// theirs could never be decided). Leaving a Role out leaves out its Contacts, which may
/// be another Role's approvers, so the Contacts are resolved again (`resolve`) until no
/// rule fails. Returns the final resolution. Like an invalid Role, such a Role is a
/// problem of that Role alone unless the bot names it (`spec.defaultRole`,
/// `spec.heartbeat.role`), which the caller checks afterwards.
pub(super) fn settle_approvals(
    bot: &SaintBot,
    selected: &mut SelectedRoles,
    resolve: impl Fn(&BTreeMap<String, RoleConfig>) -> IdentityReport,
) -> IdentityReport {
    loop {
        let identity = resolve(&selected.rendered);
        let problem = selected.rendered.iter().find_map(|(name, role)| {
            check_approvers(bot, name, role, selected, &identity.contacts).err()
        });
        let Some(error) = problem else {
            selected
                .invalid
                .sort_by(|left, right| left.role.cmp(&right.role));
            return identity;
        };
        selected.rendered.remove(&error.role);
        selected.invalid.push(error);
    }
}

/// Whether the approvers of Role `name`'s rules are this bot's, and someone besides the
/// requester can decide (the agent's rule, over the bot's Roles and Contacts).
fn check_approvers(
    bot: &SaintBot,
    name: &str,
    role: &RoleConfig,
    selected: &SelectedRoles,
    contacts: &[ContactConfig],
) -> Result<(), RoleError> {
    for (index, rule) in role.approvals.iter().enumerate() {
        if let Some(missing) = rule
            .approvers
            .roles
            .iter()
            .find(|approver| !selected.rendered.contains_key(*approver))
        {
            let why = match selected.invalid(missing) {
                Some(error) => format!(
                    "which SaintBot {:?} leaves out ({}: {})",
                    bot.name_any(),
                    error.field,
                    error.message
                ),
                None => format!(
                    "which is not a Role SaintBot {:?} selects (it must exist in the \
                     namespace and match spec.roleSelector)",
                    bot.name_any()
                ),
            };
            return Err(invalid_role(
                name,
                &format!("spec.approvals[{index}].approvers.roles"),
                format!("names {missing:?}, {why}: nobody could decide for it"),
            ));
        }
        if let Some(missing) = rule
            .approvers
            .contacts
            .iter()
            .find(|approver| !contacts.iter().any(|contact| contact.slug == **approver))
        {
            return Err(invalid_role(
                name,
                &format!("spec.approvals[{index}].approvers.contacts"),
                format!(
                    "names {:?}, which is not a Contact SaintBot {:?} knows (it must exist \
                     in the namespace, match spec.contactSelector, name the bot in \
                     spec.bots if it lists bots, and hold a Role the bot renders): they \
                     could not decide",
                    missing.as_str(),
                    bot.name_any()
                ),
            ));
        }
    }
    agents_approval_check(
        name,
        &role.approvals,
        selected
            .rendered
            .keys()
            .map(String::as_str)
            .filter(|other| *other != name),
        contacts
            .iter()
            .map(|contact| stand_in_contact(contact.slug.clone(), &contact.role))
            .collect(),
    )
}

/// A number within `range`, or an error naming `field` of Role `role`.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    role: &str,
    field: &str,
    value: T,
    (low, high): (T, T),
) -> Result<T, RoleError> {
    if value < low || value > high {
        return Err(invalid_role(
            role,
            field,
            format!("{value} is outside {low} to {high}"),
        ));
    }
    Ok(value)
}

/// `spec.cron`, defaulted from `saint_config`'s defaults.
fn cron_limits(role: &str, spec: Option<&CronLimitsSpec>) -> Result<CronLimits, RoleError> {
    let mut limits = CronLimits::default();
    let Some(spec) = spec else {
        return Ok(limits);
    };
    if let Some(max_jobs) = spec.max_jobs {
        limits.max_jobs = within(role, "spec.cron.maxJobs", max_jobs, (0, bounds::MAX_JOBS))?;
    }
    if let Some(seconds) = spec.min_interval_seconds {
        limits.min_interval_seconds = within(
            role,
            "spec.cron.minIntervalSeconds",
            seconds,
            bounds::MIN_INTERVAL_SECONDS,
        )?;
    }
    Ok(limits)
}

/// `spec.spawn`, defaulted from `saint_config`'s defaults.
fn spawn_limits(role: &str, spec: Option<&SpawnLimitsSpec>) -> Result<SpawnLimits, RoleError> {
    let mut limits = SpawnLimits::default();
    let Some(spec) = spec else {
        return Ok(limits);
    };
    if let Some(depth) = spec.max_depth {
        limits.max_depth = within(role, "spec.spawn.maxDepth", depth, (0, bounds::MAX_DEPTH))?;
    }
    if let Some(concurrent) = spec.max_concurrent {
        limits.max_concurrent = within(
            role,
            "spec.spawn.maxConcurrent",
            concurrent,
            bounds::MAX_CONCURRENT,
        )?;
    }
    if let Some(seconds) = spec.timeout_seconds {
        limits.timeout_seconds = within(
            role,
            "spec.spawn.timeoutSeconds",
            seconds,
            bounds::SPAWN_TIMEOUT_SECONDS,
        )?;
    }
    Ok(limits)
}

/// `spec.process`, defaulted from `saint_config`'s defaults.
fn process_limits(
    role: &str,
    spec: Option<&ProcessLimitsSpec>,
) -> Result<ProcessLimits, RoleError> {
    let mut limits = ProcessLimits::default();
    if let Some(max_running) = spec.and_then(|spec| spec.max_running) {
        limits.max_running = within(
            role,
            "spec.process.maxRunning",
            max_running,
            (1, MAX_RUNNING_PROCESSES),
        )?;
    }
    Ok(limits)
}

/// The Roles a bot selects: those it can render, by name, and those it cannot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SelectedRoles {
    /// Rendered Roles by name: the config's `roles`.
    pub rendered: BTreeMap<String, RoleConfig>,
    /// Selected Roles that fail [`render_role`], sorted by name: left out of the config.
    pub invalid: Vec<RoleError>,
}

impl SelectedRoles {
    /// Why the selected Role `name` is unusable, if it is.
    pub fn invalid(&self, name: &str) -> Option<&RoleError> {
        self.invalid.iter().find(|error| error.role == name)
    }

    /// Checks that the Role the bot names in `field` (`spec.defaultRole`,
    /// `spec.heartbeat.role`) is one it can render. There is no safe stand-in for such a
    /// role, so this one fails the bot (which keeps its last applied config).
    pub fn require(
        &self,
        field: &'static str,
        name: &str,
        not_found: impl FnOnce() -> ValidateError,
    ) -> Result<(), ValidateError> {
        if let Some(error) = self.invalid(name) {
            return Err(ValidateError::RoleInvalid {
                field,
                role: name.to_string(),
                source: error.clone(),
            });
        }
        if !self.rendered.contains_key(name) {
            return Err(not_found());
        }
        Ok(())
    }
}

/// The Roles `bot` selects, rendered; the default role must be one it can render. A
/// selected Role that cannot be rendered is left out, not an error of the bot.
pub(super) fn selected_roles(
    bot: &SaintBot,
    roles: &[Role],
) -> Result<SelectedRoles, ValidateError> {
    let mut selected = SelectedRoles::default();
    let selected_names: BTreeSet<String> = roles
        .iter()
        .filter(|role| bot_uses_role(bot, role))
        .map(|role| role.name_any())
        .collect();
    for role in roles.iter().filter(|role| bot_uses_role(bot, role)) {
        match render_role(role).and_then(|rendered| {
            check_references(bot, role, &selected_names)?;
            Ok(rendered)
        }) {
            Ok(rendered) => {
                selected.rendered.insert(role.name_any(), rendered);
            }
            Err(error) => selected.invalid.push(error),
        }
    }
    selected
        .invalid
        .sort_by(|left, right| left.role.cmp(&right.role));
    let default_role = &bot.spec.default_role;
    selected.require("spec.defaultRole", default_role, || {
        ValidateError::DefaultRoleNotFound {
            role: default_role.clone(),
        }
    })?;
    Ok(selected)
}

/// What a Role names that only the bot selecting it can check: its `skills` must be
/// skills this bot declares (`spec.skills`) — the grant would otherwise do nothing, and
/// look as if it did — and its `sessionsVisibleRoles` Roles this bot selects. A Role
/// failing this is left out of this bot's config like an invalid one (other bots may
/// still use it).
fn check_references(
    bot: &SaintBot,
    role: &Role,
    selected_names: &BTreeSet<String>,
) -> Result<(), RoleError> {
    let name = role.name_any();
    let declared: Vec<&str> = bot
        .spec
        .skills
        .iter()
        .map(|skill| skill.name.as_str())
        .collect();
    if let Some(skill) = role
        .spec
        .skills
        .iter()
        .find(|skill| *skill != "*" && !declared.contains(&skill.as_str()))
    {
        let declared = if declared.is_empty() {
            "none".to_string()
        } else {
            declared.join(", ")
        };
        return Err(invalid_role(
            &name,
            "spec.skills",
            format!(
                "{skill:?} is not a skill SaintBot {:?} declares in its spec.skills \
                 (declared: {declared})",
                bot.name_any()
            ),
        ));
    }
    if let Some(visible) = role
        .spec
        .sessions_visible_roles
        .iter()
        .find(|visible| !selected_names.contains(*visible))
    {
        return Err(invalid_role(
            &name,
            "spec.sessionsVisibleRoles",
            format!(
                "{visible:?} is not a Role SaintBot {:?} selects (it must exist in the \
                 namespace and match spec.roleSelector)",
                bot.name_any()
            ),
        ));
    }
    Ok(())
}

/// A selected Role left out of the bot's config because it cannot be rendered, with the
/// Contacts that hold it (left out too: to the bot they are strangers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftOutRole {
    /// Why the Role is unusable.
    pub error: RoleError,
    /// Contacts the bot uses that hold this Role, sorted.
    pub contacts: Vec<String>,
}

/// One line for the bot's status naming every left-out Role, its Contacts and its
/// problem; `None` when every selected Role renders.
pub fn left_out_summary(roles: &[LeftOutRole]) -> Option<String> {
    if roles.is_empty() {
        return None;
    }
    let listed: Vec<String> = roles
        .iter()
        .map(|left_out| {
            let holders = if left_out.contacts.is_empty() {
                "no contacts".to_string()
            } else {
                format!("contacts {}", left_out.contacts.join(", "))
            };
            format!(
                "{} ({holders}; {}: {})",
                left_out.error.role, left_out.error.field, left_out.error.message
            )
        })
        .collect();
    Some(format!(
        "invalid Roles left out, their contacts treated as strangers: {}",
        listed.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn role(name: &str, spec: Value) -> Role {
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Role",
            "metadata": {"name": name, "namespace": "acme"}, "spec": spec,
        }))
        .unwrap()
    }

    fn bot(default_role: &str) -> SaintBot {
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": "my-bot", "namespace": "acme"},
            "spec": {"model": {"provider": "anthropic", "name": "m"}, "defaultRole": default_role},
        }))
        .unwrap()
    }

    #[test]
    fn every_unusable_role_field_is_named_with_its_value() {
        let cases = [
            (
                json!({"tools": {"allow": ["teleport*"]}}),
                "spec.tools.allow",
                "teleport*",
            ),
            (
                json!({"tools": {"deny": ["nothing?"]}}),
                "spec.tools.deny",
                "nothing?",
            ),
            (
                json!({"bootstrap": ["EVIL.md"]}),
                "spec.bootstrap",
                "EVIL.md",
            ),
            (
                json!({"files": {"read": ["/**"]}}),
                "spec.files.read",
                "/**",
            ),
            (
                json!({"files": {"write": ["../**"]}}),
                "spec.files.write",
                "../**",
            ),
            (
                json!({"files": {"denyWrite": ["a/../../b"]}}),
                "spec.files.denyWrite",
                "a/../../b",
            ),
            (
                json!({"inject": ["../../../etc/passwd"]}),
                "spec.inject",
                "../../../etc/passwd",
            ),
            (
                json!({"budget": {"usd": -1.0, "period": "month"}}),
                "spec.budget.usd",
                "",
            ),
            (json!({"skills": ["*", "x"]}), "spec.skills", "'*'"),
            (
                json!({"cron": {"minIntervalSeconds": 30}}),
                "spec.cron.minIntervalSeconds",
                "30",
            ),
            (
                json!({"spawn": {"maxConcurrent": 0}}),
                "spec.spawn.maxConcurrent",
                "0",
            ),
            (
                json!({"process": {"maxRunning": 33}}),
                "spec.process.maxRunning",
                "33",
            ),
            // Approval rules, as the agent reads them on their own.
            (
                json!({"approvals": [{"tools": [], "approvers": {"roles": ["owner"]}}]}),
                "spec.approvals[0].tools",
                "at least one tool",
            ),
            (
                json!({"approvals": [
                    {"tools": ["exec"], "approvers": {"roles": ["owner"]}},
                    {"tools": ["teleport"], "approvers": {"roles": ["owner"]}},
                ]}),
                "spec.approvals[1].tools",
                "\"teleport\"",
            ),
            (
                json!({"approvals": [{"tools": ["exec"], "when": {"command": "git [push"},
                    "approvers": {"roles": ["owner"]}}]}),
                "spec.approvals[0].when.command",
                "\"git [push\" is not a glob",
            ),
            (
                json!({"approvals": [{"tools": ["exec"], "approvers": {}}]}),
                "spec.approvals[0].approvers",
                "must name a role or a contact",
            ),
            (
                json!({"approvals": [{"tools": ["exec"], "approvers": {"contacts": ["Ana Banana"]}}]}),
                "spec.approvals[0].approvers.contacts",
                "\"Ana Banana\" is not a Contact name",
            ),
            (
                json!({"approvals": [{"tools": ["exec"], "approvers": {"roles": ["owner"]},
                    "timeoutSeconds": 0}]}),
                "spec.approvals[0].timeoutSeconds",
                "must be 1 to 604800",
            ),
            (
                json!({"approvals": [{"tools": ["exec"], "approvers": {"roles": ["owner"]},
                    "timeoutSeconds": 604_801}]}),
                "spec.approvals[0].timeoutSeconds",
                "must be 1 to 604800",
            ),
            // One rule per scope: memory may not reach what files.read refuses.
            (
                json!({"memoryScope": ["ownUser", "allUsers"], "files": {"read": ["memory/users/<self>/**"]}}),
                "spec.memoryScope",
                "allUsers reaches memory/users/someone-else/notes.md, which spec.files.read does not allow",
            ),
        ];
        for (spec, field, value) in cases {
            let error = render_role(&role("clerk", spec.clone())).expect_err(field);
            assert_eq!(
                (error.role.as_str(), error.field.as_str()),
                ("clerk", field)
            );
            let message = error.to_string();
            assert!(
                message.contains("Role \"clerk\"") && message.contains(value),
                "{spec}: {message}"
            );
        }
        // Patterns and paths that are fine stay fine.
        let fine = role(
            "clerk",
            json!({
                "tools": {"allow": ["read", "web_*", "group:fs"], "deny": ["exec"]},
                "files": {"read": ["**", "memory/users/<self>/**", "..notes/x"]},
                "inject": ["COMPANY.md"],
                "bootstrap": ["SOUL.md"],
                // Approvers who exist or not, this Role's own holders among them (they
                // approve each other): only a bot selecting the Role can tell.
                "approvals": [
                    {"tools": ["exec", "docs.*"], "when": {"command": "git push*"},
                     "approvers": {"roles": ["owner", "clerk"], "contacts": ["ana"]}},
                    {"tools": ["group:messaging"], "approvers": {"roles": ["clerk"]},
                     "timeoutSeconds": 604_800},
                ],
            }),
        );
        let rendered = render_role(&fine).expect("a usable role renders");
        assert_eq!(
            rendered
                .approvals
                .iter()
                .map(|rule| rule.timeout_seconds)
                .collect::<Vec<_>>(),
            [DEFAULT_APPROVAL_TIMEOUT_SECONDS, 604_800]
        );
    }

    #[test]
    fn an_unusable_selected_role_is_left_out_unless_the_bot_names_it_as_its_default() {
        let roles = [
            role("visitor", json!({"tools": {"allow": ["read"]}})),
            role("teleporter", json!({"tools": {"allow": ["teleport*"]}})),
        ];
        let selected = selected_roles(&bot("visitor"), &roles).expect("the bot renders");
        assert_eq!(selected.rendered.keys().collect::<Vec<_>>(), ["visitor"]);
        assert_eq!(selected.invalid.len(), 1);
        assert_eq!(
            (
                selected.invalid[0].role.as_str(),
                selected.invalid[0].field.as_str()
            ),
            ("teleporter", "spec.tools.allow")
        );

        let error = selected_roles(&bot("teleporter"), &roles).expect_err("no default role");
        let message = saint_config::ErrorChain(&error).to_string();
        assert!(
            matches!(
                error,
                ValidateError::RoleInvalid {
                    field: "spec.defaultRole",
                    ..
                }
            ),
            "{message}"
        );
        assert!(
            message.contains("spec.defaultRole names Role \"teleporter\", which is invalid")
                && message.contains("spec.tools.allow: \"teleport*\""),
            "{message}"
        );
        let error = selected_roles(&bot("ghost"), &roles).expect_err("no default role");
        assert!(
            matches!(error, ValidateError::DefaultRoleNotFound { .. }),
            "{error}"
        );
    }

    #[test]
    fn the_summary_names_each_left_out_role_its_contacts_and_its_problem() {
        assert_eq!(left_out_summary(&[]), None);
        let left_out = [
            LeftOutRole {
                error: invalid_role("a-role", "spec.inject", "\"/x\" must be relative"),
                contacts: vec![],
            },
            LeftOutRole {
                error: invalid_role("teleporter", "spec.tools.allow", "\"teleport*\" is bad"),
                contacts: vec!["ana".into(), "ivo".into()],
            },
        ];
        assert_eq!(
            left_out_summary(&left_out).unwrap(),
            "invalid Roles left out, their contacts treated as strangers: a-role (no contacts; \
             spec.inject: \"/x\" must be relative); teleporter (contacts ana, ivo; \
             spec.tools.allow: \"teleport*\" is bad)"
        );
    }
}
