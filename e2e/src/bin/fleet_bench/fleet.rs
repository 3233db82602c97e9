//! The fleet's objects: for bot `i`, a Secret with its keys, its own Role, one Contact
//! holding that Role and the SaintBot selecting both; plus one `external` Role every bot
//! shares as its default. Pure: builds JSON objects, sends nothing.

use kube::{
    api::DynamicObject,
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};

/// Label value of the Role every bot selects besides its own.
pub const SHARED: &str = "fleet-shared";

/// Name of the shared Role (every bot's `defaultRole`).
pub const SHARED_ROLE: &str = "fleet-external";

/// The kinds the fleet creates, each with its API resource.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Secret,
    Role,
    Contact,
    SaintBot,
}

impl Kind {
    /// Its API resource (no discovery needed: the kinds are fixed).
    pub fn resource(self) -> ApiResource {
        let (group, version, kind, plural) = match self {
            Kind::Secret => ("", "v1", "Secret", "secrets"),
            Kind::Role => ("saint.work", "v1alpha1", "Role", "roles"),
            Kind::Contact => ("saint.work", "v1alpha1", "Contact", "contacts"),
            Kind::SaintBot => ("saint.work", "v1alpha1", "SaintBot", "saintbots"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    }
}

/// Name of bot `index` (`fleet-0042`): zero-padded so listings sort by index.
pub fn bot_name(index: usize) -> String {
    format!("fleet-{index:04}")
}

fn object(kind: Kind, value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|error| {
        panic!("the fleet's {kind:?} builder made an invalid object: {error}")
    })
}

/// The Role every bot uses for senders that match no Contact.
pub fn shared_role() -> DynamicObject {
    object(
        Kind::Role,
        json!({
            "apiVersion": "saint.work/v1alpha1",
            "kind": "Role",
            "metadata": {"name": SHARED_ROLE, "labels": {"saint.work/bot": SHARED}},
            "spec": {
                "description": "Unknown senders: web tools only",
                "tools": {"allow": ["web_search", "web_fetch"]},
                "memoryScope": ["ownUser"],
                "files": {"read": ["memory/users/<self>/**"]},
                "skills": [],
                "budget": {"usd": 0.5, "period": "month"},
                "bootstrap": ["SOUL.md", "IDENTITY.md"],
                "inject": [],
                "model": "claude-haiku-4-5",
                "files": {"read": [], "write": []},
                "sessionsVisibility": "none",
                "external": true,
            },
        }),
    )
}

/// Bot `index`'s objects in the order a person would apply them: what the bot
/// references first, the SaintBot last.
pub fn bot_objects(index: usize) -> Vec<(Kind, DynamicObject)> {
    let bot = bot_name(index);
    let secret = format!("{bot}-keys");
    let role = format!("{bot}-staff");
    let labels = json!({"saint.work/bot": bot});
    vec![
        (
            Kind::Secret,
            object(
                Kind::Secret,
                json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": secret, "labels": labels},
                    "type": "Opaque",
                    "stringData": {
                        "api-key": format!("bench-api-key-{index}"),
                        "http-token": format!("bench-http-token-{index}"),
                    },
                }),
            ),
        ),
        (
            Kind::Role,
            object(
                Kind::Role,
                json!({
                    "apiVersion": "saint.work/v1alpha1",
                    "kind": "Role",
                    "metadata": {"name": role, "labels": labels},
                    "spec": {
                        "description": "Staff: read, web and limited exec",
                        "tools": {"allow": ["exec", "read", "web_search", "web_fetch", "message", "memory_search"]},
                        "execBlocklist": ["rm -rf *"],
                        "memoryScope": ["shared", "ownUser"],
                        "files": {"read": ["MEMORY.md", "memory/shared/**", "memory/users/<self>/**"]},
                        "skills": [],
                        "budget": {"usd": 2.0, "period": "month"},
                        "bootstrap": ["SOUL.md", "IDENTITY.md", "USER.md"],
                        "inject": [],
                        "model": "claude-haiku-4-5",
                        "files": {
                            "read": ["memory/shared/**", "memory/users/<self>/**", "data/**"],
                            "write": ["memory/users/<self>/**", "data/**"],
                        },
                        "sessionsVisibility": "own",
                    },
                }),
            ),
        ),
        (
            Kind::Contact,
            object(
                Kind::Contact,
                json!({
                    "apiVersion": "saint.work/v1alpha1",
                    "kind": "Contact",
                    "metadata": {"name": format!("{bot}-owner"), "labels": labels},
                    "spec": {
                        "displayName": format!("Owner {index}"),
                        "role": role,
                        // Unique per Contact: a shared identifier would be a conflict.
                        "identifiers": {
                            "phone": format!("+3859910{index:05}"),
                            "email": format!("owner-{index}@fleet.example"),
                        },
                        "bots": [bot],
                    },
                }),
            ),
        ),
        (
            Kind::SaintBot,
            object(
                Kind::SaintBot,
                json!({
                    "apiVersion": "saint.work/v1alpha1",
                    "kind": "SaintBot",
                    "metadata": {"name": bot},
                    "spec": {
                        "persona": {"files": {
                            "SOUL.md": format!("You are bot {index} of the fleet: brief and exact.\n"),
                            "IDENTITY.md": format!("Name: Fleet {index}.\n"),
                        }},
                        "model": {
                            "provider": "anthropic",
                            "name": "claude-haiku-4-5",
                            "apiKeySecretRef": {"name": secret, "key": "api-key"},
                        },
                        "channels": [{
                            "name": "api",
                            "kind": "http",
                            "settings": {"port": "8080"},
                            "secrets": {"token": {"name": secret, "key": "http-token"}},
                        }],
                        "storage": {"size": "1Gi"},
                        "defaultRole": SHARED_ROLE,
                        "contactSelector": {"matchLabels": {"saint.work/bot": bot}},
                        "roleSelector": {"matchExpressions": [{
                            "key": "saint.work/bot",
                            "operator": "In",
                            "values": [bot, SHARED],
                        }]},
                    },
                }),
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bot_gets_a_secret_a_role_a_contact_and_itself_with_distinct_names() {
        let objects = bot_objects(7);
        let names: Vec<(String, String)> = objects
            .iter()
            .map(|(kind, object)| (format!("{kind:?}"), object.metadata.name.clone().unwrap()))
            .collect();
        assert_eq!(
            names,
            [
                ("Secret", "fleet-0007-keys"),
                ("Role", "fleet-0007-staff"),
                ("Contact", "fleet-0007-owner"),
                ("SaintBot", "fleet-0007"),
            ]
            .map(|(kind, name)| (kind.to_owned(), name.to_owned()))
        );
    }

    #[test]
    fn contacts_of_different_bots_share_no_identifier() {
        let identifiers = |index| bot_objects(index)[2].1.data["spec"]["identifiers"].clone();
        let (first, second) = (identifiers(1), identifiers(1000));
        assert_ne!(first["phone"], second["phone"]);
        assert_ne!(first["email"], second["email"]);
    }
}
