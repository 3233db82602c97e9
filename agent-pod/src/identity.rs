//! Who is asking: a channel identity (`whatsapp:+385…`) → the canonical contact through
//! the config's identity links → their role, and the session the message belongs to.
//!
//! Pure: reads only the config it is given. Unknown senders get the default role and a
//! slug derived from their identity, never a contact's slug.

use std::sync::Arc;

use saint_config::{BotConfig, ChannelKind, DmScope};

use crate::tools::Caller;

/// Why a sender could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    #[error("failed to resolve sender: the peer id is empty")]
    EmptyPeer,
    #[error("failed to resolve sender: role {0:?} is not defined")]
    MissingRole(String),
}

/// Parses a channel kind from its identity prefix (`whatsapp`).
pub fn channel_kind(prefix: &str) -> Option<ChannelKind> {
    [
        ChannelKind::Http,
        ChannelKind::Whatsapp,
        ChannelKind::Telegram,
        ChannelKind::Email,
        ChannelKind::Slack,
        ChannelKind::Discord,
    ]
    .into_iter()
    .find(|kind| kind.prefix() == prefix.trim().to_ascii_lowercase())
}

/// Normalises a peer id the way the operator normalises identities: lower-case, and
/// phone numbers in E.164 (`00385 99-123` → `+38599123`).
pub fn normalise_peer(kind: ChannelKind, peer: &str) -> String {
    let peer = peer.trim().to_lowercase();
    match kind {
        ChannelKind::Whatsapp => {
            let digits: String = peer
                .chars()
                .filter(|character| character.is_ascii_digit())
                .collect();
            let international = peer.starts_with('+') || peer.starts_with("00");
            let digits = if !peer.starts_with('+') && peer.starts_with("00") {
                &digits[2..]
            } else {
                &digits[..]
            };
            if international || !digits.is_empty() {
                format!("+{digits}")
            } else {
                peer
            }
        }
        _ => peer,
    }
}

/// The identity string (`whatsapp:+385991234567`).
pub fn identity(kind: ChannelKind, peer: &str) -> String {
    format!("{}:{}", kind.prefix(), normalise_peer(kind, peer))
}

/// The canonical contact slug an identity links to, if any.
pub fn linked_slug<'a>(config: &'a BotConfig, identity: &str) -> Option<&'a str> {
    config
        .identity_links
        .iter()
        .find(|(_, identities)| identities.iter().any(|linked| linked == identity))
        .map(|(slug, _)| slug.as_str())
        .or_else(|| {
            config
                .contacts
                .iter()
                .find(|contact| contact.identities.iter().any(|linked| linked == identity))
                .map(|contact| contact.slug.as_str())
        })
}

// Unknown senders get a slug usable in paths (`memory/users/<slug>/`) that can never
// equal a contact's slug: contact slugs are Kubernetes names, which contain no `_`.
fn unknown_slug(identity: &str) -> String {
    let mut cleaned = String::with_capacity(identity.len());
    for character in identity.chars() {
        let character = if character.is_ascii_alphanumeric() {
            character
        } else {
            '-'
        };
        if !(character == '-' && cleaned.ends_with('-')) {
            cleaned.push(character);
        }
    }
    format!("_{}", cleaned.trim_matches('-'))
}

/// The session key. Known people have one session across every linked channel (identity
/// links exist precisely to merge them); unknown senders one per channel identity.
/// `per-channel-peer` and `per-peer` differ only for people with several links, which
/// the operator merges, so both scopes yield the same keys here.
pub fn session_key(scope: DmScope, known_slug: Option<&str>, identity: &str) -> String {
    match (scope, known_slug) {
        (_, Some(slug)) => format!("person:{slug}"),
        (DmScope::PerChannelPeer | DmScope::PerPeer, None) => format!("peer:{identity}"),
    }
}

/// Builds the [`Caller`] for a message from `peer` on a channel of `kind`.
pub fn caller_for(
    config: &BotConfig,
    kind: ChannelKind,
    peer: &str,
) -> Result<Caller, IdentityError> {
    if peer.trim().is_empty() {
        return Err(IdentityError::EmptyPeer);
    }
    let identity = identity(kind, peer);
    let contact = linked_slug(config, &identity)
        .and_then(|slug| config.contacts.iter().find(|contact| contact.slug == slug));
    let (slug, display_name, role_name, known) = match contact {
        Some(contact) => (
            contact.slug.clone(),
            contact.name.clone(),
            contact.role.clone(),
            true,
        ),
        None => (
            unknown_slug(&identity),
            identity.clone(),
            config.default_role.clone(),
            false,
        ),
    };
    let role = config
        .roles
        .get(&role_name)
        .ok_or_else(|| IdentityError::MissingRole(role_name.clone()))?;
    let session_key = session_key(
        config.sessions.dm_scope,
        known.then_some(slug.as_str()),
        &identity,
    );
    Ok(Caller {
        slug,
        display_name,
        role_name,
        role: Arc::new(role.clone()),
        known,
        identity,
        session_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BotConfig {
        BotConfig::from_json(include_str!(
            "../config/tests/fixtures/acme-bot-config.json"
        ))
        .unwrap()
    }

    #[test]
    fn linked_channels_of_one_person_share_a_session() {
        let config = config();
        let from_whatsapp = caller_for(&config, ChannelKind::Whatsapp, "+385 99 123 4567").unwrap();
        let from_email = caller_for(&config, ChannelKind::Email, "Ana@Acme.Example").unwrap();
        assert_eq!(
            (
                from_whatsapp.slug.as_str(),
                from_whatsapp.role_name.as_str()
            ),
            ("ana", "owner")
        );
        assert!(from_whatsapp.known);
        assert_eq!(from_whatsapp.session_key, from_email.session_key);
        assert_eq!(from_email.identity, "email:ana@acme.example");
    }

    #[test]
    fn unknown_number_gets_the_default_role_and_its_own_session() {
        let config = config();
        let stranger = caller_for(&config, ChannelKind::Whatsapp, "00385 91 000 0000").unwrap();
        assert_eq!(stranger.role_name, "external");
        assert!(!stranger.known);
        assert_eq!(stranger.identity, "whatsapp:+385910000000");
        assert_eq!(stranger.slug, "_whatsapp-385910000000");
        assert_eq!(stranger.session_key, "peer:whatsapp:+385910000000");
        assert!(stranger.role.external);
    }

    #[test]
    fn same_peer_on_an_unlinked_channel_is_a_stranger() {
        let config = config();
        // Ivan is linked on telegram and slack, not whatsapp.
        let caller = caller_for(&config, ChannelKind::Whatsapp, "333333333").unwrap();
        assert_eq!(caller.role_name, "external");
        assert_eq!(
            caller_for(&config, ChannelKind::Telegram, "333333333")
                .unwrap()
                .slug,
            "ivan"
        );
    }

    #[test]
    fn empty_peer_is_refused() {
        assert_eq!(
            caller_for(&config(), ChannelKind::Email, "  ").unwrap_err(),
            IdentityError::EmptyPeer
        );
    }
}
