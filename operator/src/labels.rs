//! Names and labels shared by every child of a SaintBot. Every builder takes them from
//! here, so a child and the selectors that find it (the Service, the NetworkPolicies, the
//! operator's own watches) cannot disagree. Pure string functions.

use std::collections::BTreeMap;

/// The field manager of every server-side apply.
pub const FIELD_MANAGER: &str = "saint-operator";

/// Label naming the bot a child belongs to.
pub const BOT_LABEL: &str = "saint.work/bot";
/// Label marking sandbox Jobs and pods.
pub const SANDBOX_LABEL: &str = "saint.work/sandbox";
/// Pod-template annotation holding the hash of restart-relevant inputs.
pub const RESTART_HASH_ANNOTATION: &str = "saint.work/restart-hash";
/// ConfigMap annotation holding the hash of the rendered config.
pub const CONFIG_HASH_ANNOTATION: &str = "saint.work/config-hash";

/// Labels on every child of `bot`, with its component (`agent`, `sandbox`, `config`, …).
pub fn labels(bot: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "saint".to_string()),
        ("app.kubernetes.io/instance".to_string(), bot.to_string()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            FIELD_MANAGER.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
        (BOT_LABEL.to_string(), bot.to_string()),
    ])
}

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

/// The labels that select the bot's sandbox pods.
pub fn sandbox_selector(bot: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (BOT_LABEL.to_string(), bot.to_string()),
        (SANDBOX_LABEL.to_string(), "true".to_string()),
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
