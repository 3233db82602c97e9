//! Names and labels shared by every child of a SaintBot. Every builder takes them from
//! here, so a child and the selectors that find it (the Service, the NetworkPolicies, the
//! operator's own watches) cannot disagree. Pure string functions.

use std::collections::BTreeMap;

// Label keys and the labels of sandbox Jobs are part of the sandbox contract: the agent
// builds sandbox Jobs from the operator's template and must label them the same way.
pub use saint_config::sandbox_contract::{labels, sandbox_labels, sandbox_selector};

/// The field manager of every server-side apply (also each object's
/// `app.kubernetes.io/managed-by`).
pub const FIELD_MANAGER: &str = saint_config::sandbox_contract::MANAGED_BY;
/// Pod-template annotation holding the hash of restart-relevant inputs.
pub const RESTART_HASH_ANNOTATION: &str = "saint.work/restart-hash";
/// ConfigMap annotation holding the hash of the rendered config.
pub const CONFIG_HASH_ANNOTATION: &str = "saint.work/config-hash";
/// Annotation holding the SHA-256 of a child as the operator built it (what
/// `cache::child_state::freshness` judges).
pub const DESIRED_HASH_ANNOTATION: &str = "saint.work/desired-hash";
/// Annotation the operator's cache puts on its own copy of a child (never written to
/// the API server): the hash of its compared content as stored
/// (`cache::child_state::content`).
pub const LIVE_CONTENT_ANNOTATION: &str = "saint.work/live-content";
/// Annotation the operator's cache puts on its own copy of a child (never written to
/// the API server): the hash of its operator labels as stored.
pub const LIVE_LABELS_ANNOTATION: &str = "saint.work/live-labels";

/// The labels that select the bot pod (stable: a Deployment selector is immutable).
pub fn agent_selector(bot: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "saint".to_string()),
        ("app.kubernetes.io/instance".to_string(), bot.to_string()),
        (
            "app.kubernetes.io/component".to_string(),
            "agent".to_string(),
        ),
    ])
}

/// `<bot>-config`.
pub fn config_map_name(bot: &str) -> String {
    format!("{bot}-config")
}
/// `<bot>-persona`.
pub fn persona_config_map_name(bot: &str) -> String {
    format!("{bot}-persona")
}
/// `<bot>-workspace`.
pub fn workspace_claim_name(bot: &str) -> String {
    format!("{bot}-workspace")
}
/// `<bot>-agent`: ServiceAccount, RBAC Role and RoleBinding.
pub fn agent_account_name(bot: &str) -> String {
    format!("{bot}-agent")
}
/// `<bot>-agent` NetworkPolicy name.
pub fn agent_network_policy_name(bot: &str) -> String {
    format!("{bot}-agent")
}
/// `<bot>-sandbox` NetworkPolicy name.
pub fn sandbox_network_policy_name(bot: &str) -> String {
    format!("{bot}-sandbox")
}

/// `<bot>-webhooks` Ingress name.
pub fn webhook_ingress_name(bot: &str) -> String {
    format!("{bot}-webhooks")
}
/// `app.kubernetes.io/component` of the webhook Ingress (the operator finds a stale one
/// by it).
pub const WEBHOOKS_COMPONENT: &str = "webhooks";

/// Path of a channel's webhook on the agent's HTTP port (the agent's router serves it).
pub fn channel_webhook_path(channel: &str) -> String {
    format!("/channels/{channel}/webhook")
}

/// Env var of a channel secret: `SAINT_CHANNEL_<CHANNEL>_<KEY>`, upper-case, non-alphanumerics → `_`.
pub fn channel_secret_env(channel: &str, key: &str) -> String {
    let raw = format!("SAINT_CHANNEL_{channel}_{key}");
    raw.chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_secret_env_names_are_upper_case_with_underscores() {
        assert_eq!(
            channel_secret_env("wa-main", "accessToken"),
            "SAINT_CHANNEL_WA_MAIN_ACCESSTOKEN"
        );
        assert_eq!(
            channel_secret_env("api", "token"),
            "SAINT_CHANNEL_API_TOKEN"
        );
    }
}
