//! Roles: the Roles a bot selects, rendered for the config, re-checking what CEL may not
//! have (the CRD could be installed without validation, or an older version). Pure.

use std::collections::BTreeMap;

use kube::ResourceExt;
use saint_config::{
    Budget, CronLimits, FileGlobs, RoleConfig, SessionsVisibility, Skills, SpawnLimits, ToolPolicy,
    is_known_tool_pattern,
};

use super::ValidateError;
use crate::{
    crd::{
        Role, SaintBot,
        proactive::{CronLimitsSpec, SpawnLimitsSpec, bounds},
    },
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
        cron: cron_limits(&name, spec.cron.as_ref())?,
        spawn: spawn_limits(&name, spec.spawn.as_ref())?,
    })
}

/// A number within `range`, or an error naming `field` of Role `role`.
fn within<T: PartialOrd + std::fmt::Display + Copy>(
    role: &str,
    field: &str,
    value: T,
    (low, high): (T, T),
) -> Result<T, ValidateError> {
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
fn cron_limits(role: &str, spec: Option<&CronLimitsSpec>) -> Result<CronLimits, ValidateError> {
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
fn spawn_limits(role: &str, spec: Option<&SpawnLimitsSpec>) -> Result<SpawnLimits, ValidateError> {
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
