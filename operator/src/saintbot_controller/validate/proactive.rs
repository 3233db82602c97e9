//! What the bot does on its own: `spec.heartbeat`, `spec.schedule` and `spec.skills`,
//! rendered for the config and re-checked here with messages naming the SaintBot's field
//! (CEL may not have run, and it cannot check time zones). The agent checks the rendered
//! config again with `saint_config::validate`. Pure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use saint_config::{
    ActiveHours, ChannelKind, ContactConfig, ContactSlug, HeartbeatConfig, HeartbeatWatch,
    RoleConfig, SKILLS_MOUNT_PATH, ScheduleConfig, SkillsConfig, clock_minutes, is_known_timezone,
};

use super::ValidateError;
use crate::crd::{
    proactive::{ActiveHoursSpec, HeartbeatWatchSpec, bounds},
    saintbot::{HeartbeatSpec, SaintBotSpec, ScheduleSpec},
};

/// One declared skill, as the workload builder mounts it: key `key` of ConfigMap
/// `config_map` becomes `<SKILLS_MOUNT_PATH>/<name>/SKILL.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedSkill {
    /// Folder name under the mount.
    pub name: String,
    /// ConfigMap in the bot's namespace.
    pub config_map: String,
    /// Key of the SKILL.md in it.
    pub key: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ValidateError {
    ValidateError::InvalidSetting {
        field: field.into(),
        message: message.into(),
    }
}

fn check_timezone(field: &str, zone: &str) -> Result<(), ValidateError> {
    if is_known_timezone(zone) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{zone:?} is not an IANA time zone (e.g. Europe/Zagreb, UTC)"),
        ))
    }
}

/// `spec.schedule`, defaulted; an absent or all-default one renders as the default, which
/// the config leaves out (so configs of bots without it do not change).
pub(super) fn render_schedule(
    schedule: Option<&ScheduleSpec>,
) -> Result<ScheduleConfig, ValidateError> {
    let mut rendered = ScheduleConfig::default();
    let Some(schedule) = schedule else {
        return Ok(rendered);
    };
    if let Some(zone) = &schedule.time_zone {
        check_timezone("spec.schedule.timeZone", zone)?;
        rendered.timezone = zone.clone();
    }
    if let Some(grace) = schedule.missed_run_grace_seconds {
        if grace > bounds::MAX_MISSED_RUN_GRACE_SECONDS {
            return Err(invalid(
                "spec.schedule.missedRunGraceSeconds",
                format!(
                    "{grace} is more than {}",
                    bounds::MAX_MISSED_RUN_GRACE_SECONDS
                ),
            ));
        }
        rendered.missed_run_grace_seconds = grace;
    }
    Ok(rendered)
}

/// `spec.heartbeat`: its role must be one the bot selects (the rule of `defaultRole`), and
/// whom it notifies must be Contacts the bot renders and can reach: declaring an
/// identifier (`identifier_kinds`, by slug) on a kind of channel the bot serves
/// (`channel_kinds`). Declared, not linked: an identifier another Contact also claims is
/// reported as an `IdentifierConflict`, not made a reason to refuse the whole bot.
pub(super) fn render_heartbeat(
    heartbeat: Option<&HeartbeatSpec>,
    roles: &BTreeMap<String, RoleConfig>,
    contacts: &[ContactConfig],
    identifier_kinds: &BTreeMap<String, BTreeSet<ChannelKind>>,
    channel_kinds: &BTreeSet<ChannelKind>,
) -> Result<Option<HeartbeatConfig>, ValidateError> {
    let Some(heartbeat) = heartbeat else {
        return Ok(None);
    };
    let (shortest, longest) = bounds::HEARTBEAT_SECONDS;
    if !(shortest..=longest).contains(&heartbeat.every_seconds) {
        return Err(invalid(
            "spec.heartbeat.everySeconds",
            format!(
                "{} is outside {shortest} to {longest}",
                heartbeat.every_seconds
            ),
        ));
    }
    if !roles.contains_key(&heartbeat.role) {
        return Err(ValidateError::HeartbeatRoleNotFound {
            role: heartbeat.role.clone(),
        });
    }
    let notify = render_notify(&heartbeat.notify, contacts, identifier_kinds, channel_kinds)?;
    let active_hours = heartbeat
        .active_hours
        .as_ref()
        .map(render_active_hours)
        .transpose()?;
    let watch = heartbeat.watch.as_ref().map(render_watch).transpose()?;
    Ok(Some(HeartbeatConfig {
        every_seconds: heartbeat.every_seconds,
        active_hours,
        role: heartbeat.role.clone(),
        notify,
        watch,
    }))
}

/// Whom the heartbeat notifies: Contacts the bot renders and can reach, each once.
fn render_notify(
    names: &[String],
    contacts: &[ContactConfig],
    identifier_kinds: &BTreeMap<String, BTreeSet<ChannelKind>>,
    channel_kinds: &BTreeSet<ChannelKind>,
) -> Result<Vec<ContactSlug>, ValidateError> {
    let mut notify = Vec::with_capacity(names.len());
    for name in names {
        let known = contacts
            .iter()
            .find(|contact| contact.slug.as_str() == name);
        let Some(contact) = known else {
            return Err(invalid(
                "spec.heartbeat.notify",
                format!(
                    "{name:?} is not a Contact this bot uses (it must exist, be selected by \
                     spec.contactSelector and name a Role the bot selects)"
                ),
            ));
        };
        let declared = identifier_kinds.get(name);
        if declared.is_none_or(|kinds| kinds.is_disjoint(channel_kinds)) {
            let identifiers: Vec<&str> = declared
                .into_iter()
                .flatten()
                .map(|kind| kind.prefix())
                .collect();
            let channels: Vec<&str> = channel_kinds.iter().map(|kind| kind.prefix()).collect();
            return Err(invalid(
                "spec.heartbeat.notify",
                format!(
                    "{name:?} cannot be reached: the Contact has no identifier on a kind of \
                     channel this bot serves (its identifiers: {}; the bot's channels: \
                     {})",
                    words_or_none(&identifiers),
                    words_or_none(&channels)
                ),
            ));
        }
        if !notify.contains(&contact.slug) {
            notify.push(contact.slug.clone());
        }
    }
    Ok(notify)
}

/// `spec.heartbeat.activeHours`: two times of day apart, in a known time zone.
fn render_active_hours(hours: &ActiveHoursSpec) -> Result<ActiveHours, ValidateError> {
    for (field, value) in [("start", &hours.start), ("end", &hours.end)] {
        if clock_minutes(value).is_none() {
            return Err(invalid(
                format!("spec.heartbeat.activeHours.{field}"),
                format!("{value:?} is not a time of day as HH:MM (00:00 to 23:59)"),
            ));
        }
    }
    if hours.start == hours.end {
        return Err(invalid(
            "spec.heartbeat.activeHours",
            "start and end are equal, which leaves no active time",
        ));
    }
    if let Some(zone) = &hours.time_zone {
        check_timezone("spec.heartbeat.activeHours.timeZone", zone)?;
    }
    Ok(ActiveHours {
        start: hours.start.clone(),
        end: hours.end.clone(),
        timezone: hours.time_zone.clone(),
    })
}

/// `spec.heartbeat.watch`: workspace files and https:// URLs.
fn render_watch(watch: &HeartbeatWatchSpec) -> Result<HeartbeatWatch, ValidateError> {
    if let Some(file) = watch
        .files
        .iter()
        .find(|file| !saint_config::is_workspace_relative(file))
    {
        return Err(invalid(
            "spec.heartbeat.watch.files",
            format!("{file:?} is not a relative path inside the workspace"),
        ));
    }
    if let Some(url) = watch
        .urls
        .iter()
        .find(|url| !saint_config::is_https_url(url))
    {
        return Err(invalid(
            "spec.heartbeat.watch.urls",
            format!("{url:?} is not an https:// URL with a host"),
        ));
    }
    Ok(HeartbeatWatch {
        files: watch.files.clone(),
        urls: watch.urls.clone(),
    })
}

/// `a, b` or `none`.
fn words_or_none(words: &[&str]) -> String {
    if words.is_empty() {
        "none".to_string()
    } else {
        words.join(", ")
    }
}

/// Whether `name` may be a skill's folder: lower-case letters, digits and '-', starting
/// with a letter or digit, at most 64 (`crd::proactive::SKILL_NAME_PATTERN`).
pub fn is_skill_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=64).contains(&bytes.len())
        && bytes[0] != b'-'
        && bytes
            .iter()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || *byte == b'-')
}

/// `spec.skills`: each a safe, unique folder name whose ConfigMap key exists. A missing
/// ConfigMap or key is [`ValidateError::SkillConfigMapNotFound`] (retried: a GitOps apply
/// may create the bot first). Any skill makes the mount a skills directory of the config.
pub(super) fn render_skills(
    spec: &SaintBotSpec,
    config_maps: &BTreeMap<String, ConfigMap>,
) -> Result<(SkillsConfig, Vec<ValidatedSkill>), ValidateError> {
    let mut seen = BTreeSet::new();
    let mut skills = Vec::with_capacity(spec.skills.len());
    for (index, skill) in spec.skills.iter().enumerate() {
        if !is_skill_name(&skill.name) {
            return Err(invalid(
                format!("spec.skills[{index}].name"),
                format!(
                    "{:?} must be lower-case letters, digits and '-' (at most 64), starting \
                     with a letter or digit",
                    skill.name
                ),
            ));
        }
        if !seen.insert(skill.name.as_str()) {
            return Err(invalid(
                format!("spec.skills[{index}].name"),
                format!("{:?} is declared twice", skill.name),
            ));
        }
        let reference = &skill.config_map_ref;
        let key = reference.key_or_default();
        let missing = |key: Option<&str>| ValidateError::SkillConfigMapNotFound {
            field: format!("spec.skills[{index}].configMapRef"),
            name: reference.name.clone(),
            key: key.map(str::to_string),
        };
        let config_map = config_maps.get(&reference.name).ok_or(missing(None))?;
        let has_key = config_map
            .data
            .as_ref()
            .is_some_and(|data| data.contains_key(key))
            || config_map
                .binary_data
                .as_ref()
                .is_some_and(|data| data.contains_key(key));
        if !has_key {
            return Err(missing(Some(key)));
        }
        skills.push(ValidatedSkill {
            name: skill.name.clone(),
            config_map: reference.name.clone(),
            key: key.to_string(),
        });
    }
    let config = SkillsConfig {
        directories: if skills.is_empty() {
            Vec::new()
        } else {
            vec![SKILLS_MOUNT_PATH.to_string()]
        },
    };
    Ok((config, skills))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_names_are_safe_folder_names() {
        for good in ["scheduling", "google-workspace", "a", "x1", &"a".repeat(64)] {
            assert!(is_skill_name(good), "{good}");
        }
        for bad in [
            "",
            "-x",
            "Skill",
            "a_b",
            "a/b",
            "..",
            "..data",
            "a.b",
            &"a".repeat(65),
        ] {
            assert!(!is_skill_name(bad), "{bad}");
        }
    }
}
