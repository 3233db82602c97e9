//! The status each Contact should have, judged against the SaintBots and Roles of its
//! namespace. Pure: no client.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{ResourceExt, runtime::events::Event};
use saint_config::ErrorChain;

use crate::{
    crd::{Contact, ContactStatus, Role, SaintBot},
    identity::{ContactInput, ContactProblems, resolve},
    saintbot_controller::validate::{RoleError, render_role},
    selection::{bot_uses_contact, bot_uses_role},
    status::{
        ConditionType, Reason, carry_transition_times, condition, find, problem_event, with_kstatus,
    },
};

/// The status every Contact of a namespace should have. A Role the Contact names must
/// exist in its namespace and be usable (the Role's own rule, [`render_role`]: bots leave
/// out an unusable Role and the Contacts holding it); beyond that, an identifier clash
/// or a role a bot does not select matters only between Contacts one bot uses, so each
/// bot's selection is resolved separately and the problems are merged. The answer depends only on the
/// namespace's objects, so reconciles of different Contacts never disagree.
pub fn contact_statuses(
    bots: &[SaintBot],
    contacts: &[Contact],
    roles: &[Role],
    now: &Time,
) -> BTreeMap<String, ContactStatus> {
    let unusable: BTreeMap<String, RoleError> = roles
        .iter()
        .filter_map(|role| Some((role.name_any(), render_role(role).err()?)))
        .collect();
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
            .filter(|name| !unusable.contains_key(name))
            .collect();
        for (slug, problems) in resolve(&inputs, &role_names).problems {
            merge_problems(merged.entry(slug).or_default(), problems);
        }
    }
    let role_names: BTreeSet<String> = roles.iter().map(|role| role.name_any()).collect();
    contacts
        .iter()
        .map(|contact| {
            let name = contact.name_any();
            let generation = contact.metadata.generation;
            let problems = merged.get(&name).cloned().unwrap_or_default();
            let (reason, message) = contact_ready(
                contact,
                &problems,
                role_names.contains(&contact.spec.role),
                unusable.get(&contact.spec.role),
                used.contains(&name),
            );
            let ready = condition(ConditionType::Ready, reason, message, generation, now);
            let previous = contact.status.clone().unwrap_or_default();
            let status = ContactStatus {
                conditions: carry_transition_times(&previous.conditions, with_kstatus(vec![ready])),
                observed_generation: generation,
                conflict_count: problems.conflicts.len() as i32,
                conflicts: problems.conflicts,
            };
            (name, status)
        })
        .collect()
}

/// Adds one bot's view of a Contact's problems to what other bots found.
fn merge_problems(entry: &mut ContactProblems, problems: ContactProblems) {
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

/// A Contact's `Ready` reason and message: its Role first (missing, unusable, not
/// selected by a bot using it), then its identifiers, then whether any bot uses it.
fn contact_ready(
    contact: &Contact,
    problems: &ContactProblems,
    role_exists: bool,
    role_unusable: Option<&RoleError>,
    used: bool,
) -> (Reason, String) {
    if !role_exists {
        (
            Reason::RoleNotFound,
            format!(
                "spec.role names Role {:?}, which does not exist in namespace {}",
                contact.spec.role,
                contact.namespace().unwrap_or_default()
            ),
        )
    } else if let Some(error) = role_unusable {
        (
            Reason::RoleNotFound,
            format!(
                "spec.role names Role {:?}, which is invalid, so bots leave this contact \
                 out and treat the person as a stranger: {}",
                contact.spec.role,
                ErrorChain(error)
            ),
        )
    } else if let Some(role) = &problems.missing_role {
        (
            Reason::RoleNotFound,
            format!("spec.role names Role {role:?}, which a bot using this contact does not have"),
        )
    } else if !problems.conflicts.is_empty() {
        let listed: Vec<String> = problems
            .conflicts
            .iter()
            .map(|conflict| {
                format!(
                    "{} (also {})",
                    conflict.identity,
                    conflict.contacts.join(", ")
                )
            })
            .collect();
        (
            Reason::IdentifierConflict,
            format!("not linked: {}", listed.join("; ")),
        )
    } else if !problems.invalid.is_empty() {
        (Reason::InvalidIdentifier, problems.invalid.join("; "))
    } else if !used {
        (
            Reason::Unused,
            "no SaintBot in the namespace uses this contact".to_string(),
        )
    } else {
        (Reason::Linked, "every identifier is linked".to_string())
    }
}

/// The Event a Contact deserves when its status changes: a Warning when it turns
/// unhealthy or its problem changes, nothing otherwise. Pure.
pub fn contact_transition_event(
    previous: Option<&ContactStatus>,
    next: &ContactStatus,
) -> Option<Event> {
    let ready = ConditionType::Ready.as_str();
    let now = find(&next.conditions, ready)?;
    let before = previous.and_then(|status| find(&status.conditions, ready));
    problem_event(before, now, "ResolveIdentities")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn time(text: &str) -> Time {
        Time(text.parse().unwrap())
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
    fn a_contact_naming_a_role_missing_from_its_namespace_is_not_ready_even_without_bots() {
        let now = time("2026-01-01T00:00:00Z");
        let mut visitor = contact("acme-ana", &[], "+385991234567");
        visitor.spec.role = "visitor".into();
        let statuses = contact_statuses(&[], &[visitor], &[], &now);
        let ready = &statuses["acme-ana"].conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "False", "RoleNotFound")
        );
        assert!(ready.message.contains("\"visitor\""), "{}", ready.message);
        assert!(
            ready.message.contains("namespace acme"),
            "{}",
            ready.message
        );
        let warning = contact_transition_event(None, &statuses["acme-ana"]).unwrap();
        assert_eq!(
            (warning.reason.as_str(), warning.type_),
            ("RoleNotFound", kube::runtime::events::EventType::Warning)
        );
    }

    #[test]
    fn a_contact_holding_an_invalid_role_is_not_ready_naming_the_role_and_its_problem() {
        let roles: Vec<Role> = vec![
            object(json!({
                "apiVersion": "saint.work/v1alpha1", "kind": "Role",
                "metadata": {"name": "owner", "namespace": "acme"},
                "spec": {"tools": {"allow": ["teleport*"]}},
            })),
            object(json!({
                "apiVersion": "saint.work/v1alpha1", "kind": "Role",
                "metadata": {"name": "clerk", "namespace": "acme"}, "spec": {},
            })),
        ];
        let now = time("2026-01-01T00:00:00Z");
        let mut vesna = contact("acme-vesna", &[], "+385991234568");
        vesna.spec.role = "clerk".into();
        let contacts = [contact("acme-ana", &[], "+385991234567"), vesna];
        // With a bot and without: an unusable Role leaves its Contacts out of every bot.
        for bots in [vec![bot("my-bot")], vec![]] {
            let statuses = contact_statuses(&bots, &contacts, &roles, &now);
            let ready = &statuses["acme-ana"].conditions[0];
            assert_eq!(
                (ready.status.as_str(), ready.reason.as_str()),
                ("False", "RoleNotFound")
            );
            assert!(
                ready.message.contains("Role \"owner\", which is invalid")
                    && ready.message.contains("spec.tools.allow: \"teleport*\""),
                "{}",
                ready.message
            );
            let other = &statuses["acme-vesna"].conditions[0];
            assert_eq!(other.status, "True", "{}", other.message);
        }
    }

    #[test]
    fn contacts_get_a_warning_event_only_when_their_problem_changes() {
        let conflict = ContactStatus {
            conditions: vec![condition(
                ConditionType::Ready,
                Reason::IdentifierConflict,
                "x",
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
                ConditionType::Ready,
                Reason::Linked,
                String::new(),
                None,
                &time("2026-01-01T00:00:00Z"),
            )],
            ..ContactStatus::default()
        };
        assert!(contact_transition_event(Some(&conflict), &fine).is_none());
    }
}
