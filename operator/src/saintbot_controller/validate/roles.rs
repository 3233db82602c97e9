//! Roles: the Roles a bot selects, rendered for the config, re-checking what CEL may not
//! have (the CRD could be installed without validation, or an older version). Pure.

use std::collections::BTreeMap;

use kube::ResourceExt;
use saint_config::{
    Budget, FileGlobs, RoleConfig, SessionsVisibility, Skills, ToolPolicy, is_known_tool_pattern,
};

use super::ValidateError;
use crate::{
    crd::{Role, SaintBot},
    selection::bot_uses_role,
};

fn invalid_role(role: &str, field: &str, message: impl Into<String>) -> ValidateError {
    ValidateError::InvalidRole {
        role: role.to_string(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// Converts a Role resource into the rendered role.
pub fn render_role(role: &Role) -> Result<RoleConfig, ValidateError> {
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
                format!("{pattern:?} is not a known tool, group:<name> or a glob matching one"),
            ));
        }
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
    Ok(RoleConfig {
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
        cron: Default::default(),
        spawn: Default::default(),
    })
}

/// The Roles `bot` selects, by name; the default role must be one of them.
pub(super) fn selected_roles(
    bot: &SaintBot,
    roles: &[Role],
) -> Result<BTreeMap<String, RoleConfig>, ValidateError> {
    let mut selected = BTreeMap::new();
    for role in roles.iter().filter(|role| bot_uses_role(bot, role)) {
        selected.insert(role.name_any(), render_role(role)?);
    }
    if !selected.contains_key(&bot.spec.default_role) {
        return Err(ValidateError::DefaultRoleNotFound {
            role: bot.spec.default_role.clone(),
        });
    }
    Ok(selected)
}
