//! The status each Role should have: whether bots can render it. Judged from the Role
//! alone, so a Role in a namespace without any SaintBot gets its status too. Pure: no
//! client.
//!
//! The rule is [`render_role`], the one every bot selecting the Role applies: a Role
//! that fails it is left out of those bots' configs (with the Contacts holding it) and
//! stops none of them, so this condition and its Warning are where the problem shows.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::Event;
use saint_config::ErrorChain;

use crate::{
    crd::{Role, RoleStatus},
    saintbot_controller::validate::render_role,
    status::{
        ConditionType, Reason, carry_transition_times, condition, find, problem_event, with_kstatus,
    },
};

/// The status `role` should have.
pub fn role_status(role: &Role, now: &Time) -> RoleStatus {
    let generation = role.metadata.generation;
    let (reason, message) = match render_role(role) {
        Ok(_) => (Reason::Valid, "bots can render this role".to_string()),
        Err(error) => (Reason::InvalidSpec, ErrorChain(&error).to_string()),
    };
    let ready = condition(ConditionType::Ready, reason, message, generation, now);
    let previous = role.status.clone().unwrap_or_default();
    RoleStatus {
        conditions: carry_transition_times(&previous.conditions, with_kstatus(vec![ready])),
        observed_generation: generation,
    }
}

/// A Warning when the Role turns invalid or its problem changes, nothing otherwise.
pub fn role_transition_event(previous: Option<&RoleStatus>, next: &RoleStatus) -> Option<Event> {
    let ready = ConditionType::Ready.as_str();
    let now = find(&next.conditions, ready)?;
    let before = previous.and_then(|status| find(&status.conditions, ready));
    problem_event(before, now, "RenderRole")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn role(allow: &[&str]) -> Role {
        serde_json::from_value(json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Role",
            "metadata": {"name": "acme-clerk", "namespace": "acme", "generation": 4},
            "spec": {"tools": {"allow": allow}},
        }))
        .unwrap()
    }

    #[test]
    fn a_role_is_ready_when_bots_can_render_it_and_invalid_naming_the_field_otherwise() {
        let now = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let valid = role_status(&role(&["read"]), &now);
        let ready = &valid.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "True", "Valid")
        );
        assert_eq!(valid.observed_generation, Some(4));
        assert!(role_transition_event(None, &valid).is_none());

        let invalid = role_status(&role(&["teleport*"]), &now);
        let ready = &invalid.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec")
        );
        assert!(
            ready.message.contains("spec.tools.allow: \"teleport*\""),
            "the message names the field and the pattern: {}",
            ready.message
        );
        let warning = role_transition_event(Some(&valid), &invalid).unwrap();
        assert_eq!(warning.type_, kube::runtime::events::EventType::Warning);
        assert!(role_transition_event(Some(&invalid), &invalid).is_none());
    }
}
