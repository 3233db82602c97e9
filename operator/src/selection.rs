//! Which Contacts and Roles a SaintBot uses. Pure: the same functions decide what a
//! reconcile renders and which bots a Contact or Role change wakes up.

use kube::{
    ResourceExt,
    core::{Selector, SelectorExt},
};

use crate::crd::{Contact, Role, SaintBot};

fn selector_matches(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    match selector {
        None => true,
        // An unparsable selector selects nothing rather than everything: failing closed
        // keeps people out of a bot they were not meant to reach.
        Some(selector) => Selector::try_from(selector.clone())
            .map(|parsed| parsed.matches(labels))
            .unwrap_or(false),
    }
}

/// Whether `bot` knows `contact`: same namespace, the Contact's `bots` is empty or names
/// the bot, and the bot's `contactSelector` (absent: all) matches the Contact's labels.
pub fn bot_uses_contact(bot: &SaintBot, contact: &Contact) -> bool {
    bot.namespace() == contact.namespace()
        && (contact.spec.bots.is_empty()
            || contact.spec.bots.iter().any(|name| *name == bot.name_any()))
        && selector_matches(bot.spec.contact_selector.as_ref(), contact.labels())
}

/// Whether `bot` uses `role`: same namespace and the bot's `roleSelector` (absent: all)
/// matches the Role's labels.
pub fn bot_uses_role(bot: &SaintBot, role: &Role) -> bool {
    bot.namespace() == role.namespace()
        && selector_matches(bot.spec.role_selector.as_ref(), role.labels())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(name: &str, spec: serde_json::Value) -> SaintBot {
        let mut spec = spec;
        spec["model"] = serde_json::json!({"provider": "anthropic", "name": "m"});
        serde_json::from_value(serde_json::json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "SaintBot",
            "metadata": {"name": name, "namespace": "acme"}, "spec": spec,
        }))
        .unwrap()
    }

    fn contact(namespace: &str, labels: serde_json::Value, bots: &[&str]) -> Contact {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "saint.work/v1alpha1", "kind": "Contact",
            "metadata": {"name": "acme-ana", "namespace": namespace, "labels": labels},
            "spec": {"displayName": "Ana", "role": "owner", "bots": bots},
        }))
        .unwrap()
    }

    #[test]
    fn contacts_without_bots_belong_to_every_bot_in_their_namespace() {
        assert!(bot_uses_contact(
            &bot("my-bot", serde_json::json!({})),
            &contact("acme", serde_json::json!({}), &[])
        ));
        assert!(!bot_uses_contact(
            &bot("my-bot", serde_json::json!({})),
            &contact("other", serde_json::json!({}), &[])
        ));
    }

    #[test]
    fn contacts_naming_bots_belong_only_to_those() {
        let named = contact("acme", serde_json::json!({}), &["other-bot"]);
        assert!(!bot_uses_contact(
            &bot("my-bot", serde_json::json!({})),
            &named
        ));
        assert!(bot_uses_contact(
            &bot("other-bot", serde_json::json!({})),
            &named
        ));
    }

    #[test]
    fn the_contact_selector_filters_by_labels() {
        let selective = bot(
            "my-bot",
            serde_json::json!({"contactSelector": {"matchLabels": {"team": "sales"}}}),
        );
        assert!(bot_uses_contact(
            &selective,
            &contact("acme", serde_json::json!({"team": "sales"}), &[])
        ));
        assert!(!bot_uses_contact(
            &selective,
            &contact("acme", serde_json::json!({"team": "ops"}), &[])
        ));
    }
}
