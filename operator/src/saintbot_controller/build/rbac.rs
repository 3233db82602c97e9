//! The agent's RBAC Role and RoleBinding: only what running sandbox Jobs needs, in the
//! bot's namespace. Never Secrets. Pure: no client.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

use super::child_metadata;
use crate::{labels::agent_account_name, saintbot_controller::validate::ValidatedSaintBot};

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(ToString::to_string).collect()),
        verbs: verbs.iter().map(ToString::to_string).collect(),
        ..PolicyRule::default()
    }
}

/// Role `<bot>-agent`: Jobs create/get/list/watch/delete (sandboxes), Pods
/// get/list/watch (to find a sandbox's pod), Events create/patch (a channel whose
/// credentials the platform refuses is reported on the SaintBot). What a Job may
/// contain is fenced by the chart's ValidatingAdmissionPolicy, not by this Role.
pub fn agent_role(bot: &ValidatedSaintBot) -> Role {
    Role {
        metadata: child_metadata(bot, agent_account_name(&bot.name), "agent"),
        rules: Some(vec![
            rule(
                "batch",
                &["jobs"],
                &["create", "get", "list", "watch", "delete"],
            ),
            rule("", &["pods"], &["get", "list", "watch"]),
            rule("events.k8s.io", &["events"], &["create", "patch"]),
        ]),
    }
}

/// RoleBinding `<bot>-agent` → ServiceAccount `<bot>-agent`.
pub fn agent_role_binding(bot: &ValidatedSaintBot) -> RoleBinding {
    let name = agent_account_name(&bot.name);
    RoleBinding {
        metadata: child_metadata(bot, name.clone(), "agent"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "Role".to_string(),
            name: name.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name,
            namespace: Some(bot.namespace.clone()),
            ..Subject::default()
        }]),
    }
}
