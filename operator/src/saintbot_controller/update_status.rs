//! Computes and writes status: the SaintBot's conditions, counts and config hash, each
//! Contact's conflicts, and Events on real transitions. Condition logic is pure; only
//! `patch_*` and `publish_*` talk to the API server.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::ObjectReference},
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder},
};
use saint_config::ErrorChain;
use serde_json::json;

use super::validate::ValidatedSaintBot;
use crate::{
    crd::{CONDITION_READY, Contact, ContactStatus, Role, RoleStatus, SaintBot, SaintBotStatus},
    identity::{ContactInput, ContactProblems, resolve},
    labels::FIELD_MANAGER,
    selection::{bot_uses_contact, bot_uses_role},
};

/// Condition: the config was rendered from the spec, Contacts and Roles.
pub const CONDITION_CONFIG_RENDERED: &str = "ConfigRendered";
/// Condition: every Contact identifier is linked (no conflicts, no missing roles).
pub const CONDITION_IDENTITIES_LINKED: &str = "IdentitiesLinked";
/// Whether every Porter CLI keeps its credential outside the CLI's process.
pub const CONDITION_CREDENTIALS_ISOLATED: &str = "CredentialsIsolated";

/// Why status could not be written.
#[derive(Debug, thiserror::Error)]
pub enum UpdateStatusError {
    #[error("failed to patch status of SaintBot {name:?}")]
    PatchBot { name: String, source: kube::Error },
    #[error("failed to patch status of Contact {name:?}")]
    PatchContact { name: String, source: kube::Error },
    #[error("failed to patch status of Role {name:?}")]
    PatchRole { name: String, source: kube::Error },
}

/// What reconcile achieved, as far as status is concerned.
pub enum Outcome<'a> {
    /// Rendered and applied.
    Applied {
        bot: &'a ValidatedSaintBot,
        config_hash: String,
        deployment: &'a Deployment,
    },
    /// The spec (or what it refers to) cannot be rendered.
    Invalid {
        reason: &'static str,
        message: String,
    },
}

fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Keeps `lastTransitionTime` of a condition whose status did not change: GitOps tools
/// and humans read it as "since when is this so".
pub fn carry_transition_times(previous: &[Condition], mut next: Vec<Condition>) -> Vec<Condition> {
    for condition in &mut next {
        if let Some(old) = previous.iter().find(|old| old.type_ == condition.type_)
            && old.status == condition.status
        {
            condition.last_transition_time = old.last_transition_time.clone();
        }
    }
    next
}

fn pod_ready(deployment: &Deployment) -> bool {
    let generation = deployment.metadata.generation;
    let Some(status) = &deployment.status else {
        return false;
    };
    let current = generation.is_none() || status.observed_generation >= generation;
    current && status.ready_replicas.unwrap_or(0) >= 1 && status.updated_replicas.unwrap_or(0) >= 1
}

/// The whole SaintBot status for an outcome. Pure.
pub fn bot_status(bot: &SaintBot, outcome: &Outcome<'_>, now: &Time) -> SaintBotStatus {
    let generation = bot.metadata.generation;
    let previous = bot.status.clone().unwrap_or_default();
    let (conditions, counts, config_hash) = match outcome {
        Outcome::Invalid { reason, message } => (
            vec![
                condition(
                    CONDITION_READY,
                    false,
                    reason,
                    message.clone(),
                    generation,
                    now,
                ),
                condition(
                    CONDITION_CONFIG_RENDERED,
                    false,
                    reason,
                    message.clone(),
                    generation,
                    now,
                ),
            ],
            (previous.contacts, previous.roles, previous.conflicts),
            previous.config_hash.clone(),
        ),
        Outcome::Applied {
            bot: validated,
            config_hash,
            deployment,
        } => {
            let identity = &validated.identity;
            let conflicting = identity.conflicting_identities();
            let missing = identity.contacts_with_missing_role();
            let problems = conflicting.len() + missing.len();
            let ready = if validated.suspend {
                condition(
                    CONDITION_READY,
                    false,
                    "Suspended",
                    "spec.suspend is true; scaled to zero".into(),
                    generation,
                    now,
                )
            } else if pod_ready(deployment) {
                condition(
                    CONDITION_READY,
                    true,
                    "PodReady",
                    "the bot pod is ready".into(),
                    generation,
                    now,
                )
            } else {
                condition(
                    CONDITION_READY,
                    false,
                    "PodNotReady",
                    "config rendered; waiting for the bot pod".into(),
                    generation,
                    now,
                )
            };
            let linked = if problems == 0 {
                condition(
                    CONDITION_IDENTITIES_LINKED,
                    true,
                    "AllLinked",
                    "every contact identifier is linked".into(),
                    generation,
                    now,
                )
            } else {
                let mut parts: Vec<String> = Vec::new();
                if !conflicting.is_empty() {
                    parts.push(format!(
                        "claimed by several contacts, linked to none: {}",
                        conflicting.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
                if !missing.is_empty() {
                    let listed: Vec<String> = missing
                        .iter()
                        .map(|(contact, role)| format!("{contact} (role {role})"))
                        .collect();
                    parts.push(format!(
                        "contacts naming missing roles, left out: {}",
                        listed.join(", ")
                    ));
                }
                let reason = if identity.conflicting_identities().is_empty() {
                    "RoleNotFound"
                } else {
                    "IdentifierConflict"
                };
                condition(
                    CONDITION_IDENTITIES_LINKED,
                    false,
                    reason,
                    parts.join("; "),
                    generation,
                    now,
                )
            };
            let rendered = condition(
                CONDITION_CONFIG_RENDERED,
                true,
                "ConfigRendered",
                format!("bot-config.json sha256 {config_hash}"),
                generation,
                now,
            );
            let isolated = credentials_isolated(&validated.registry, generation, now);
            (
                vec![ready, rendered, linked, isolated],
                (
                    validated.config.contacts.len() as i32,
                    validated.config.roles.len() as i32,
                    problems as i32,
                ),
                Some(config_hash.clone()),
            )
        }
    };
    SaintBotStatus {
        conditions: carry_transition_times(&previous.conditions, conditions),
        observed_generation: generation,
        contacts: counts.0,
        roles: counts.1,
        conflicts: counts.2,
        config_hash,
    }
}

/// `CredentialsIsolated`: True when every Porter CLI runs in injection mode (the CLI
/// holds a placeholder, Porter puts the secret on the wire); False, reason
/// `EnvModeCredentials`, naming the CLIs whose credential sits in their environment —
/// the weaker mode, labelled wherever it shows.
fn credentials_isolated(
    registry: &porter_protocol::registry::Registry,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let in_env: Vec<&str> = registry
        .clis
        .iter()
        .filter(|(_, entry)| entry.effective_mode() == porter_protocol::registry::CliMode::Env)
        .map(|(name, _)| name.as_str())
        .collect();
    if registry.clis.is_empty() {
        condition(
            CONDITION_CREDENTIALS_ISOLATED,
            true,
            "NoCredentials",
            "the bot has no Porter CLIs".into(),
            generation,
            now,
        )
    } else if in_env.is_empty() {
        condition(
            CONDITION_CREDENTIALS_ISOLATED,
            true,
            "Injected",
            "every Porter CLI gets a placeholder; Porter puts the credential on the wire".into(),
            generation,
            now,
        )
    } else {
        condition(
            CONDITION_CREDENTIALS_ISOLATED,
            false,
            "EnvModeCredentials",
            format!(
                "weaker: the credential is in the environment of {} (env mode; argument \
                 checks only)",
                in_env.join(", ")
            ),
            generation,
            now,
        )
    }
}

/// Writes the SaintBot status with server-side apply on the status subresource.
pub async fn patch_bot_status(
    client: &Client,
    bot: &SaintBot,
    status: &SaintBotStatus,
) -> Result<(), UpdateStatusError> {
    let name = bot.name_any();
    let api: Api<SaintBot> = Api::namespaced(client.clone(), &bot.namespace().unwrap_or_default());
    let patch = json!({"apiVersion": "saint.work/v1alpha1", "kind": "SaintBot", "status": status});
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| UpdateStatusError::PatchBot { name, source })?;
    Ok(())
}

/// The status every Contact of a namespace should have, judged bot by bot: an
/// identifier clash or a missing role matters only between Contacts one bot uses, so
/// each bot's selection is resolved separately and the problems are merged. Every bot's
/// reconcile computes the same answer from the same namespace, so no two reconciles
/// fight over a Contact's status. Pure.
pub fn contact_statuses(
    bots: &[SaintBot],
    contacts: &[Contact],
    roles: &[Role],
    now: &Time,
) -> BTreeMap<String, ContactStatus> {
    let mut merged: BTreeMap<String, ContactProblems> = BTreeMap::new();
    let mut used: BTreeSet<String> = BTreeSet::new();
    for bot in bots {
        let inputs: Vec<ContactInput> = contacts
            .iter()
            .filter(|contact| bot_uses_contact(bot, contact))
            .map(|contact| ContactInput {
                slug: contact.name_any(),
                display_name: contact.spec.display_name.clone(),
                role: contact.spec.role.clone(),
                identifiers: contact.spec.identifiers.clone(),
            })
            .collect();
        used.extend(inputs.iter().map(|input| input.slug.clone()));
        let role_names: BTreeSet<String> = roles
            .iter()
            .filter(|role| bot_uses_role(bot, role))
            .map(|role| role.name_any())
            .collect();
        for (slug, problems) in resolve(&inputs, &role_names).problems {
            let entry = merged.entry(slug).or_default();
            for conflict in problems.conflicts {
                match entry
                    .conflicts
                    .iter_mut()
                    .find(|known| known.identity == conflict.identity)
                {
                    Some(known) => {
                        known.contacts.extend(conflict.contacts);
                        known.contacts.sort();
                        known.contacts.dedup();
                    }
                    None => entry.conflicts.push(conflict),
                }
            }
            entry.conflicts.sort();
            if entry.missing_role.is_none() {
                entry.missing_role = problems.missing_role;
            }
            for invalid in problems.invalid {
                if !entry.invalid.contains(&invalid) {
                    entry.invalid.push(invalid);
                }
            }
        }
    }
    contacts
        .iter()
        .map(|contact| {
            let name = contact.name_any();
            let generation = contact.metadata.generation;
            let problems = merged.get(&name).cloned().unwrap_or_default();
            let ready = if let Some(role) = &problems.missing_role {
                condition(
                    CONDITION_READY,
                    false,
                    "RoleNotFound",
                    format!("spec.role names Role {role:?}, which a bot using this contact does not have"),
                    generation,
                    now,
                )
            } else if !problems.conflicts.is_empty() {
                let listed: Vec<String> = problems
                    .conflicts
                    .iter()
                    .map(|conflict| format!("{} (also {})", conflict.identity, conflict.contacts.join(", ")))
                    .collect();
                condition(
                    CONDITION_READY,
                    false,
                    "IdentifierConflict",
                    format!("not linked: {}", listed.join("; ")),
                    generation,
                    now,
                )
            } else if !problems.invalid.is_empty() {
                condition(CONDITION_READY, false, "InvalidIdentifier", problems.invalid.join("; "), generation, now)
            } else if !used.contains(&name) {
                condition(
                    CONDITION_READY,
                    true,
                    "Unused",
                    "no SaintBot in the namespace uses this contact".into(),
                    generation,
                    now,
                )
            } else {
                condition(CONDITION_READY, true, "Linked", "every identifier is linked".into(), generation, now)
            };
            let previous = contact.status.clone().unwrap_or_default();
            let status = ContactStatus {
                conditions: carry_transition_times(&previous.conditions, vec![ready]),
                observed_generation: generation,
                conflict_count: problems.conflicts.len() as i32,
                conflicts: problems.conflicts,
            };
            (name, status)
        })
        .collect()
}

/// The Event a Contact deserves when its status changes: a Warning when it turns
/// unhealthy or its problem changes, nothing otherwise. Pure.
pub fn contact_transition_event(
    previous: Option<&ContactStatus>,
    next: &ContactStatus,
) -> Option<Event> {
    let now = find(&next.conditions, CONDITION_READY)?;
    let before = previous.and_then(|status| find(&status.conditions, CONDITION_READY));
    let changed =
        before.is_none_or(|before| before.reason != now.reason || before.message != now.message);
    (changed && now.status == "False").then(|| Event {
        type_: EventType::Warning,
        reason: now.reason.clone(),
        note: Some(truncate(&now.message, 1000)),
        action: "ResolveIdentities".to_string(),
        secondary: None,
    })
}

/// Patches the status of each Contact whose status would change.
pub async fn patch_contact_statuses(
    recorder: &Recorder,
    client: &Client,
    namespace: &str,
    contacts: &[Contact],
    statuses: &BTreeMap<String, ContactStatus>,
) -> Result<(), UpdateStatusError> {
    let api: Api<Contact> = Api::namespaced(client.clone(), namespace);
    for contact in contacts {
        let name = contact.name_any();
        let Some(status) = statuses.get(&name) else {
            continue;
        };
        if contact.status.as_ref() == Some(status) {
            continue;
        }
        let patch =
            json!({"apiVersion": "saint.work/v1alpha1", "kind": "Contact", "status": status});
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| UpdateStatusError::PatchContact {
            name: name.clone(),
            source,
        })?;
        if let Some(event) = contact_transition_event(contact.status.as_ref(), status)
            && let Err(error) = recorder.publish(&event, &contact.object_ref(&())).await
        {
            tracing::warn!(error = %ErrorChain(&error), contact = %name, "failed to publish event");
        }
    }
    Ok(())
}

/// At most `limit` bytes of `text`, cut at a character boundary (Event notes are capped at 1 kB).
fn truncate(text: &str, limit: usize) -> String {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// The status every Role of a namespace should have. Pure.
pub fn role_statuses(roles: &[Role], now: &Time) -> BTreeMap<String, RoleStatus> {
    roles
        .iter()
        .map(|role| {
            let generation = role.metadata.generation;
            let ready = match super::validate::render_role(role) {
                Ok(_) => condition(
                    CONDITION_READY,
                    true,
                    "Valid",
                    "bots can render this role".into(),
                    generation,
                    now,
                ),
                Err(error) => condition(
                    CONDITION_READY,
                    false,
                    "InvalidSpec",
                    error.to_string(),
                    generation,
                    now,
                ),
            };
            let previous = role.status.clone().unwrap_or_default();
            let status = RoleStatus {
                conditions: carry_transition_times(&previous.conditions, vec![ready]),
                observed_generation: generation,
            };
            (role.name_any(), status)
        })
        .collect()
}

/// Patches the status of each Role whose status would change.
pub async fn patch_role_statuses(
    client: &Client,
    namespace: &str,
    roles: &[Role],
    statuses: &BTreeMap<String, RoleStatus>,
) -> Result<(), UpdateStatusError> {
    let api: Api<Role> = Api::namespaced(client.clone(), namespace);
    for role in roles {
        let name = role.name_any();
        let Some(status) = statuses.get(&name) else {
            continue;
        };
        if role.status.as_ref() == Some(status) {
            continue;
        }
        let patch = json!({"apiVersion": "saint.work/v1alpha1", "kind": "Role", "status": status});
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| UpdateStatusError::PatchRole {
            name: name.clone(),
            source,
        })?;
    }
    Ok(())
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|condition| condition.type_ == type_)
}

/// The Events a status change deserves: only transitions (a changed reason of `Ready` or
/// `IdentitiesLinked`, or a new config hash), never a repeat of the same state. Pure.
pub fn transition_events(previous: Option<&SaintBotStatus>, next: &SaintBotStatus) -> Vec<Event> {
    let empty = Vec::new();
    let previous_conditions = previous.map(|status| &status.conditions).unwrap_or(&empty);
    let mut events = Vec::new();
    for type_ in [CONDITION_READY, CONDITION_IDENTITIES_LINKED] {
        let Some(now) = find(&next.conditions, type_) else {
            continue;
        };
        let before = find(previous_conditions, type_);
        let changed =
            before.is_none_or(|before| before.status != now.status || before.reason != now.reason);
        let first_and_healthy = before.is_none() && now.status == "True";
        if changed && !first_and_healthy {
            let warning = now.status == "False"
                && !matches!(now.reason.as_str(), "PodNotReady" | "Suspended");
            events.push(Event {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: now.reason.clone(),
                note: Some(truncate(&now.message, 1000)),
                action: "Reconcile".to_string(),
                secondary: None,
            });
        }
    }
    let hash_changed = next.config_hash.is_some()
        && previous.and_then(|status| status.config_hash.as_ref()) != next.config_hash.as_ref();
    if hash_changed {
        events.push(Event {
            type_: EventType::Normal,
            reason: "ConfigRendered".to_string(),
            note: Some(format!(
                "rendered bot-config.json sha256 {}",
                next.config_hash.clone().unwrap_or_default()
            )),
            action: "RenderConfig".to_string(),
            secondary: None,
        });
    }
    events
}

/// Publishes Events about `bot`. Event failures are logged, never fatal: an Event is a
/// courtesy to humans, status is the record.
pub async fn publish_events(recorder: &Recorder, bot: &SaintBot, events: &[Event]) {
    let reference: ObjectReference = bot.object_ref(&());
    for event in events {
        if let Err(error) = recorder.publish(event, &reference).await {
            tracing::warn!(error = %ErrorChain(&error), reason = %event.reason, "failed to publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
    }

    fn ready(status: &str, reason: &str, at: &str) -> Condition {
        condition(
            CONDITION_READY,
            status == "True",
            reason,
            String::new(),
            Some(1),
            &time(at),
        )
    }

    #[test]
    fn env_mode_clis_are_labelled_weaker_in_the_status() {
        use porter_protocol::registry::{CliEntry, CliMode, Registry};
        let now = time("2026-01-01T00:00:00Z");
        let entry = |hosts: &[&str], mode: Option<CliMode>| CliEntry {
            bin: "/usr/bin/tool".into(),
            hosts: hosts.iter().map(|host| host.to_string()).collect(),
            mode,
            ..CliEntry::default()
        };
        let mut registry = Registry::default();
        let none = credentials_isolated(&registry, Some(1), &now);
        assert_eq!(
            (none.status.as_str(), none.reason.as_str()),
            ("True", "NoCredentials")
        );
        registry
            .clis
            .insert("gh".into(), entry(&["api.github.com"], None));
        let injected = credentials_isolated(&registry, Some(1), &now);
        assert_eq!(
            (injected.status.as_str(), injected.reason.as_str()),
            ("True", "Injected")
        );
        registry.clis.insert("gog".into(), entry(&[], None));
        registry.clis.insert(
            "signer".into(),
            entry(&["sign.example"], Some(CliMode::Env)),
        );
        let weaker = credentials_isolated(&registry, Some(1), &now);
        assert_eq!(
            (weaker.status.as_str(), weaker.reason.as_str()),
            ("False", "EnvModeCredentials")
        );
        assert!(weaker.message.contains("gog, signer"), "{}", weaker.message);
        assert!(!weaker.message.contains("gh"), "{}", weaker.message);
        assert!(weaker.message.starts_with("weaker"), "{}", weaker.message);
    }

    #[test]
    fn last_transition_time_moves_only_when_the_status_changes() {
        let previous = vec![ready("False", "PodNotReady", "2026-01-01T00:00:00Z")];
        let same = carry_transition_times(
            &previous,
            vec![ready("False", "Suspended", "2026-01-02T00:00:00Z")],
        );
        assert_eq!(
            same[0].last_transition_time,
            time("2026-01-01T00:00:00Z"),
            "reason alone is not a transition"
        );
        let flipped = carry_transition_times(
            &previous,
            vec![ready("True", "PodReady", "2026-01-02T00:00:00Z")],
        );
        assert_eq!(
            flipped[0].last_transition_time,
            time("2026-01-02T00:00:00Z")
        );
    }

    #[test]
    fn events_fire_on_transitions_only() {
        let first = SaintBotStatus {
            conditions: vec![ready("False", "PodNotReady", "2026-01-01T00:00:00Z")],
            config_hash: Some("abc".into()),
            ..SaintBotStatus::default()
        };
        let reasons = |events: Vec<Event>| {
            events
                .into_iter()
                .map(|event| event.reason)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reasons(transition_events(None, &first)),
            vec!["PodNotReady", "ConfigRendered"]
        );
        assert!(
            transition_events(Some(&first), &first).is_empty(),
            "a repeat of the same state is silent"
        );
        let ready_now = SaintBotStatus {
            conditions: vec![ready("True", "PodReady", "2026-01-01T00:01:00Z")],
            ..first.clone()
        };
        assert_eq!(
            reasons(transition_events(Some(&first), &ready_now)),
            vec!["PodReady"]
        );
    }

    #[test]
    fn long_event_notes_are_cut_at_a_character_boundary() {
        let text = "ž".repeat(600);
        let cut = truncate(&text, 1000);
        assert!(cut.len() <= 1000 && cut.chars().all(|character| character == 'ž'));
    }

    fn object<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).unwrap()
    }

    fn bot(name: &str) -> SaintBot {
        object(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": name, "namespace": "acme"},
            "spec": {"model": {"provider": "anthropic", "name": "m"}},
        }))
    }

    fn contact(name: &str, bots: &[&str], phone: &str) -> Contact {
        object(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
            "metadata": {"name": name, "namespace": "acme"},
            "spec": {"displayName": name, "role": "owner", "identifiers": {"phone": phone}, "bots": bots},
        }))
    }

    fn reasons(statuses: &BTreeMap<String, ContactStatus>) -> Vec<(String, String)> {
        statuses
            .iter()
            .map(|(name, status)| (name.clone(), status.conditions[0].reason.clone()))
            .collect()
    }

    #[test]
    fn a_shared_phone_conflicts_only_between_contacts_of_the_same_bot() {
        let roles: Vec<Role> = vec![object(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Role",
            "metadata": {"name": "owner", "namespace": "acme"}, "spec": {},
        }))];
        let bots = [bot("my-bot"), bot("other-bot")];
        let now = time("2026-01-01T00:00:00Z");
        let apart = [
            contact("acme-ana", &["my-bot"], "+385991234567"),
            contact("acme-twin", &["other-bot"], "+385991234567"),
        ];
        assert_eq!(
            reasons(&contact_statuses(&bots, &apart, &roles, &now)),
            vec![
                ("acme-ana".into(), "Linked".into()),
                ("acme-twin".into(), "Linked".into())
            ]
        );
        let together = [
            contact("acme-ana", &["my-bot"], "+385991234567"),
            contact("acme-twin", &[], "+385991234567"),
        ];
        let statuses = contact_statuses(&bots, &together, &roles, &now);
        assert_eq!(
            reasons(&statuses),
            vec![
                ("acme-ana".into(), "IdentifierConflict".into()),
                ("acme-twin".into(), "IdentifierConflict".into())
            ]
        );
        assert_eq!(
            statuses["acme-twin"].conflicts[0].contacts,
            vec!["acme-ana".to_string()]
        );
        let unused = [contact("acme-ghost", &["gone-bot"], "+385991234567")];
        assert_eq!(
            reasons(&contact_statuses(&bots, &unused, &roles, &now)),
            vec![("acme-ghost".into(), "Unused".into())]
        );
    }

    #[test]
    fn contacts_get_a_warning_event_only_when_their_problem_changes() {
        let conflict = ContactStatus {
            conditions: vec![condition(
                CONDITION_READY,
                false,
                "IdentifierConflict",
                "x".into(),
                None,
                &time("2026-01-01T00:00:00Z"),
            )],
            ..ContactStatus::default()
        };
        assert_eq!(
            contact_transition_event(None, &conflict).unwrap().reason,
            "IdentifierConflict"
        );
        assert!(contact_transition_event(Some(&conflict), &conflict).is_none());
        let fine = ContactStatus {
            conditions: vec![condition(
                CONDITION_READY,
                true,
                "Linked",
                String::new(),
                None,
                &time("2026-01-01T00:00:00Z"),
            )],
            ..ContactStatus::default()
        };
        assert!(contact_transition_event(Some(&conflict), &fine).is_none());
    }
}
