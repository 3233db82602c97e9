//! The agent's RoleBinding: the bot's ServiceAccount bound, in the bot's namespace only,
//! to the agent ClusterRole the chart ships (sandbox Jobs, their pods, Events). The
//! operator never holds those rights itself: it may grant them only because it holds
//! `bind` on that one ClusterRole, so a leaked operator token cannot run Jobs itself;
//! what it may create is fenced by the chart's operator-writes and operator-bindings
//! admission policies.
//! Never Secrets. Pure: no client.

use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};

use super::child_metadata;
use crate::{labels::agent_account_name, saintbot_controller::validate::ValidatedSaintBot};

/// RoleBinding `<bot>-agent`: ServiceAccount `<bot>-agent` → ClusterRole
/// `bot.agent_cluster_role`, effective in the bot's namespace only. What a Job may contain
/// is fenced by the chart's ValidatingAdmissionPolicy, not by the binding.
pub fn agent_role_binding(bot: &ValidatedSaintBot) -> RoleBinding {
    let name = agent_account_name(&bot.name);
    RoleBinding {
        metadata: child_metadata(bot, name.clone(), "agent"),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_string(),
            kind: "ClusterRole".to_string(),
            name: bot.agent_cluster_role.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_string(),
            name,
            namespace: Some(bot.namespace.clone()),
            ..Subject::default()
        }]),
    }
}
