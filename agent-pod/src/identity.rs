//! Who is asking: a channel identity (`whatsapp:+385…`) → the canonical contact through
//! the config's identity links → their role, and the session the message belongs to.
//!
//! Pure: reads only the config it is given. Unknown senders get the default role and a
//! slug derived from their identity, never a contact's slug.

use std::sync::Arc;

use saint_config::{BotConfig, ChannelIdentity, ChannelKind, ContactSlug, DmScope, SessionKey};

use saint_tools::Caller;

/// Why a sender could not be resolved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    #[error("failed to resolve sender: the peer id is empty")]
    EmptyPeer,
    // The cause is part of this message (shown to the integration that sent it), so it
    // is not also a `source`.
    #[error("failed to resolve sender: {0}")]
    InvalidPeer(saint_config::IdentityError),
    #[error("failed to resolve sender: role {0:?} is not defined")]
    MissingRole(String),
    #[error("contact {0:?} no longer exists")]
    NoSuchContact(String),
}

/// The canonical contact slug an identity links to, if any.
pub fn linked_slug<'a>(
    config: &'a BotConfig,
    identity: &ChannelIdentity,
) -> Option<&'a ContactSlug> {
    config
        .identity_links
        .iter()
        .find(|(_, identities)| identities.contains(identity))
        .map(|(slug, _)| slug)
        .or_else(|| {
            config
                .contacts
                .iter()
                .find(|contact| contact.identities.contains(identity))
                .map(|contact| &contact.slug)
        })
}

/// The session key. `per-channel-peer` and `per-peer` differ only for people with
/// several links, which the operator merges, so both scopes yield the same keys here.
pub fn session_key(
    scope: DmScope,
    known_slug: Option<&ContactSlug>,
    identity: &ChannelIdentity,
) -> SessionKey {
    match (scope, known_slug) {
        (_, Some(slug)) => SessionKey::for_contact(slug),
        (DmScope::PerChannelPeer | DmScope::PerPeer, None) => SessionKey::for_stranger(identity),
    }
}

/// Builds the [`Caller`] for someone a request names as `peer` on a channel of `kind`
/// (the HTTP API, the chat page): authenticated, speaking directly. The peer goes
/// through the same [`ChannelIdentity::parse`] the operator rendered the links with.
pub fn caller_for(
    config: &BotConfig,
    kind: ChannelKind,
    peer: &str,
) -> Result<Caller, IdentityError> {
    caller_for_message(config, &MessageSender::direct(&parse_peer(kind, peer)?))
}

/// `peer` on a channel of `kind` as a [`ChannelIdentity`], parsed by the rules the
/// operator rendered the contacts with; an empty or malformed peer is refused.
pub fn parse_peer(kind: ChannelKind, peer: &str) -> Result<ChannelIdentity, IdentityError> {
    if peer.trim().is_empty() {
        return Err(IdentityError::EmptyPeer);
    }
    ChannelIdentity::parse(kind, peer).map_err(IdentityError::InvalidPeer)
}

/// A channel message's sender, as the channel parsed and authenticated them, and what
/// decides the message's session.
#[derive(Clone, Copy, Debug)]
pub struct MessageSender<'a> {
    /// Who the channel says sent it.
    pub identity: &'a ChannelIdentity,
    /// Whether the channel authenticated the sender; an unauthenticated one is a
    /// stranger (default role, own session) even when the identity names a contact, so
    /// a forged `From:` never gets the contact's role.
    pub verified: bool,
    /// For an unauthenticated sender, what the message proves about its origin.
    pub unverified_origin: Option<&'a str>,
    /// The group conversation it was said in: the channel's name and the
    /// conversation's id.
    pub conversation: Option<(&'a str, &'a str)>,
}

impl<'a> MessageSender<'a> {
    /// An authenticated sender speaking to the bot directly.
    pub fn direct(identity: &'a ChannelIdentity) -> Self {
        Self {
            identity,
            verified: true,
            unverified_origin: None,
            conversation: None,
        }
    }
}

/// The [`Caller`] for a channel message from `sender`: the contact their identity links
/// to (only when the channel authenticated them), that contact's role, and the session
/// the message belongs to ([`message_session`]), decided once, here.
pub fn caller_for_message(
    config: &BotConfig,
    sender: &MessageSender<'_>,
) -> Result<Caller, IdentityError> {
    let identity = sender.identity;
    let contact = linked_slug(config, identity)
        .filter(|_| sender.verified)
        .and_then(|slug| config.contacts.iter().find(|contact| &contact.slug == slug));
    let (slug, display_name, role_name) = match contact {
        Some(contact) => (
            contact.slug.clone(),
            contact.name.clone(),
            contact.role.clone(),
        ),
        None => (
            ContactSlug::for_stranger(identity),
            identity.to_string(),
            config.default_role.clone(),
        ),
    };
    let role = config
        .roles
        .get(&role_name)
        .ok_or_else(|| IdentityError::MissingRole(role_name.clone()))?;
    let known = contact.is_some();
    let session_key = message_session(
        session_key(config.sessions.dm_scope, known.then_some(&slug), identity),
        sender,
    );
    Ok(Caller {
        slug: slug.into(),
        display_name,
        role_name,
        role: Arc::new(role.clone()),
        known,
        identity: identity.to_string(),
        session_key: session_key.into(),
        trigger: saint_tools::Trigger::Message,
        depth: 0,
        may_message: None,
    })
}

/// The session a channel message belongs to: the group conversation's when it was said
/// in one, whoever wrote; an unauthenticated sender's own per origin (mail claiming one
/// address may come from several senders, and the address's owner signs); else the
/// sender's `own` session. The dispatcher's lanes are these sessions too, so one
/// session's messages are answered one at a time, in order, whatever channel they came
/// on: a turn that is retried or resumed never finds a newer message of its session
/// answered before it.
fn message_session(own: SessionKey, sender: &MessageSender<'_>) -> SessionKey {
    match (sender.conversation, sender.unverified_origin) {
        (Some((channel, id)), _) => SessionKey::for_conversation(channel, id),
        (None, Some(origin)) if !sender.verified => {
            SessionKey::for_unverified(sender.identity.as_ref(), origin)
        }
        (None, _) => own,
    }
}

/// The [`Caller`] for work a contact set going earlier (a scheduled job, a sub-agent):
/// the contact as the config knows them *now*, with their current role, in `session_key`.
/// A contact removed since is refused, so their work stops instead of running with a
/// role they no longer hold. `identity` is the channel identity the work speaks for
/// (where its result goes); absent, the contact's first identity.
pub fn caller_for_contact(
    config: &BotConfig,
    slug: &str,
    identity: Option<&str>,
    session_key: String,
    trigger: saint_tools::Trigger,
) -> Result<Caller, IdentityError> {
    let contact = config
        .contacts
        .iter()
        .find(|contact| contact.slug == slug)
        .ok_or_else(|| IdentityError::NoSuchContact(slug.to_string()))?;
    let role = config
        .roles
        .get(&contact.role)
        .ok_or_else(|| IdentityError::MissingRole(contact.role.clone()))?;
    // Only an identity that is still theirs: one moved to someone else since the work
    // was set going must not receive it.
    let identity = identity
        .filter(|wanted| {
            contact
                .identities
                .iter()
                .any(|identity| identity.as_str() == *wanted)
        })
        .map(str::to_string)
        .or_else(|| {
            contact
                .identities
                .first()
                .map(|identity| identity.to_string())
        })
        .unwrap_or_else(|| format!("contact:{slug}"));
    Ok(Caller {
        slug: contact.slug.to_string(),
        display_name: contact.name.clone(),
        role_name: contact.role.clone(),
        role: Arc::new(role.clone()),
        known: true,
        identity,
        session_key,
        trigger,
        depth: 0,
        may_message: None,
    })
}

/// The slug the bot's own work (the heartbeat) is metered to; the leading `_` keeps it
/// apart from every Contact's.
pub const BOT_SLUG: &str = "_bot";

/// The [`Caller`] of the bot's heartbeat: the bot itself with `role`, reaching only the
/// contacts in `notify`.
pub fn caller_for_heartbeat(
    config: &BotConfig,
    role_name: &str,
    notify: &[ContactSlug],
) -> Result<Caller, IdentityError> {
    let role = config
        .roles
        .get(role_name)
        .ok_or_else(|| IdentityError::MissingRole(role_name.to_string()))?;
    Ok(Caller {
        slug: BOT_SLUG.to_string(),
        display_name: format!("{} (heartbeat)", config.bot.name),
        role_name: role_name.to_string(),
        role: Arc::new(role.clone()),
        known: true,
        identity: "bot:heartbeat".to_string(),
        session_key: SessionKey::for_heartbeat().into(),
        trigger: saint_tools::Trigger::Heartbeat,
        depth: 0,
        may_message: Some(notify.iter().map(|slug| slug.to_string()).collect()),
    })
}

/// Why `caller` no longer holds, in `config` as it is now, the authority its work
/// started with — its role was changed or taken, or the contact removed — or `None`.
/// Checked before every model call and every tool call of a turn (a sub-agent's and a
/// scheduled run's included), so a demotion reaches running work within one call.
/// Any change of the caller's role counts, a promotion too: the work stops and says
/// so rather than judge which change narrows what it is doing.
pub fn authority_changed(config: &BotConfig, caller: &Caller) -> Option<String> {
    let role_now = |name: &str| config.roles.get(name);
    let same_role = |name: &str| {
        name == caller.role_name && role_now(name).is_some_and(|role| *role == *caller.role)
    };
    if caller.slug == BOT_SLUG {
        let role = config
            .heartbeat
            .as_ref()
            .map(|heartbeat| heartbeat.role.as_str());
        return match role {
            Some(role) if same_role(role) => None,
            Some(role) => Some(format!("the heartbeat now runs as {role}")),
            None => Some("the heartbeat was removed".to_owned()),
        };
    }
    if !caller.known {
        return (!same_role(&config.default_role))
            .then(|| format!("the role {} changed", caller.role_name));
    }
    let Some(contact) = config
        .contacts
        .iter()
        .find(|contact| contact.slug == caller.slug)
    else {
        return Some(format!("{} is no longer a contact", caller.display_name));
    };
    if same_role(&contact.role) {
        return None;
    }
    Some(if contact.role == caller.role_name {
        format!("the role {} was changed", caller.role_name)
    } else {
        format!(
            "{}'s role changed from {} to {}",
            caller.display_name, caller.role_name, contact.role
        )
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
    fn authority_changes_are_demotions_role_edits_and_removals_never_promotions() {
        let config = config();
        let trigger = saint_tools::Trigger::Subagent;
        let marko = caller_for_contact(&config, "marko", None, "s".into(), trigger).unwrap();
        assert_eq!(authority_changed(&config, &marko), None);
        let with = |edit: &dyn Fn(&mut BotConfig)| {
            let mut changed = config.clone();
            edit(&mut changed);
            authority_changed(&changed, &marko)
        };
        let set_role = |role: &'static str| {
            move |config: &mut BotConfig| {
                for contact in &mut config.contacts {
                    if contact.slug == "marko" {
                        contact.role = role.to_string();
                    }
                }
            }
        };
        assert_eq!(
            with(&set_role("employee")).as_deref(),
            Some("Marko's role changed from manager to employee")
        );
        // A promotion is a change of role too: the work stops rather than guess.
        assert!(with(&set_role("owner")).is_some());
        assert_eq!(
            with(&|config| {
                if let Some(role) = config.roles.get_mut("manager") {
                    role.files.read.clear();
                }
            })
            .as_deref(),
            Some("the role manager was changed")
        );
        assert_eq!(
            with(&|config| config.contacts.retain(|contact| contact.slug != "marko")).as_deref(),
            Some("Marko is no longer a contact")
        );
        // Another person's change is no change for Marko.
        assert_eq!(with(&set_role("manager")), None);
        let heartbeat_config = {
            let mut config = config.clone();
            config.heartbeat = Some(saint_config::HeartbeatConfig {
                every_seconds: 3600,
                active_hours: None,
                role: "employee".into(),
                notify: Vec::new(),
                watch: None,
            });
            config
        };
        let heartbeat = caller_for_heartbeat(&heartbeat_config, "employee", &[]).unwrap();
        assert_eq!(authority_changed(&heartbeat_config, &heartbeat), None);
        assert_eq!(
            authority_changed(&config, &heartbeat).as_deref(),
            Some("the heartbeat was removed")
        );
    }

    #[test]
    fn work_set_going_earlier_speaks_only_for_an_identity_still_the_contacts() {
        let mut config = config();
        let trigger = saint_tools::Trigger::Cron;
        let key = || "cron:job-1".to_string();
        let ivan = caller_for_contact(&config, "ivan", Some("telegram:333333333"), key(), trigger)
            .unwrap();
        assert_eq!(ivan.identity, "telegram:333333333");
        assert_eq!(ivan.role_name, "employee");
        // Ivan's Telegram moved to someone else: Ivan's job no longer speaks for it.
        let moved: saint_config::ChannelIdentity = "telegram:333333333".parse().unwrap();
        for contact in &mut config.contacts {
            contact.identities.retain(|identity| identity != &moved);
        }
        let ivan = caller_for_contact(&config, "ivan", Some("telegram:333333333"), key(), trigger)
            .unwrap();
        assert_eq!(ivan.identity, "slack:U024BK3");
        // Demoted: the current role; deleted: refused.
        config
            .contacts
            .iter_mut()
            .find(|c| c.slug == "ivan")
            .unwrap()
            .role = "external".into();
        assert_eq!(
            caller_for_contact(&config, "ivan", None, key(), trigger)
                .unwrap()
                .role_name,
            "external"
        );
        config.contacts.retain(|contact| contact.slug != "ivan");
        assert_eq!(
            caller_for_contact(&config, "ivan", None, key(), trigger).unwrap_err(),
            IdentityError::NoSuchContact("ivan".to_string())
        );
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
    fn an_unverified_sender_naming_the_owner_is_a_stranger() {
        let config = config();
        let ana = ChannelIdentity::parse(ChannelKind::Email, "ana@acme.example").unwrap();
        let forged = caller_for_message(
            &config,
            &MessageSender {
                verified: false,
                ..MessageSender::direct(&ana)
            },
        )
        .unwrap();
        assert_eq!(forged.role_name, "external");
        assert!(!forged.known);
        assert_ne!(
            forged.session_key,
            caller_for(&config, ChannelKind::Email, "ana@acme.example")
                .unwrap()
                .session_key
        );
        // Its session is its own per origin, decided with the caller, never patched in.
        let signed_elsewhere = caller_for_message(
            &config,
            &MessageSender {
                verified: false,
                unverified_origin: Some("dkim:mallory.example"),
                ..MessageSender::direct(&ana)
            },
        )
        .unwrap();
        assert_eq!(
            signed_elsewhere.session_key,
            String::from(SessionKey::for_unverified(
                "email:ana@acme.example",
                "dkim:mallory.example"
            ))
        );
    }

    #[test]
    fn a_group_message_is_the_conversations_session_and_the_senders_role() {
        let config = config();
        let ana = ChannelIdentity::parse(ChannelKind::Email, "ana@acme.example").unwrap();
        let in_group = caller_for_message(
            &config,
            &MessageSender {
                conversation: Some(("team", "thread-1")),
                ..MessageSender::direct(&ana)
            },
        )
        .unwrap();
        assert_eq!(
            in_group.session_key,
            String::from(SessionKey::for_conversation("team", "thread-1"))
        );
        assert_eq!(
            in_group.role_name,
            caller_for(&config, ChannelKind::Email, "ana@acme.example")
                .unwrap()
                .role_name
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
