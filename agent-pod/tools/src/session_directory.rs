//! What the session tools need from the session store, and who may see which session.
//!
//! Pure visibility logic plus a trait the session store implements; no I/O here.

use saint_config::{BotConfig, SessionKey, SessionsVisibility};

use super::Caller;

/// One session as the directory lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// Session key.
    pub key: String,
    /// Slug of the person the session belongs to.
    pub contact: String,
    /// Their role when they last wrote.
    pub role: String,
    /// Messages in the session.
    pub message_count: u64,
    /// RFC 3339 time of the last message.
    pub updated_at: String,
    /// For a group conversation's session: the channel identities of everyone who
    /// wrote in it (its `contact` is only whoever wrote last). Empty otherwise.
    pub members: Vec<String>,
}

/// One transcript entry shown by `sessions_history`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// `user`, `assistant` or `tool`.
    pub speaker: String,
    /// Text of the message.
    pub text: String,
    /// Whether it was said in the conversation (a person's or the bot's text), as
    /// opposed to a tool call or result made during a turn.
    pub said: bool,
}

/// Why the directory could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to read sessions: {0}")]
pub struct SessionDirectoryError(pub String);

/// Read access to sessions; implemented by the session store. Blocking calls (the tools
/// run them off the async runtime).
pub trait SessionDirectory: Send + Sync {
    /// All sessions, most recent first.
    fn list(&self) -> Result<Vec<SessionSummary>, SessionDirectoryError>;
    /// The last `limit` entries of a session, or `None` when it does not exist.
    fn history(
        &self,
        key: &str,
        limit: usize,
    ) -> Result<Option<Vec<HistoryEntry>>, SessionDirectoryError>;
}

/// The role a session's owner has now: their contact's current role, else the role
/// recorded with the session, else the default role.
fn owner_role<'c>(config: &'c BotConfig, session: &'c SessionSummary) -> &'c str {
    config
        .contacts
        .iter()
        .find(|contact| contact.slug == session.contact)
        .map(|contact| contact.role.as_str())
        .unwrap_or(if session.role.is_empty() {
            config.default_role.as_str()
        } else {
            session.role.as_str()
        })
}

/// The current role of the person behind a channel identity.
fn identity_role<'c>(config: &'c BotConfig, identity: &str) -> &'c str {
    config
        .contacts
        .iter()
        .find(|contact| {
            contact
                .identities
                .iter()
                .any(|known| known.as_ref() == identity)
        })
        .map_or(config.default_role.as_str(), |contact| {
            contact.role.as_str()
        })
}

/// Whether `key` is a sub-agent's session started, directly or through other
/// sub-agents, from the session `ancestor`. Ancestry alone never makes a session
/// someone's: a group conversation's session is shared, so its members' sub-agents all
/// descend from it (see [`may_see`]).
fn started_from(key: &str, ancestor: &str) -> bool {
    let mut key = key;
    while let Some(parent) = SessionKey::subagent_parent(key) {
        if parent == ancestor {
            return true;
        }
        key = parent;
    }
    false
}

/// Whether `caller` may see `session`. A group conversation's session is its members'
/// own; under `ownAndRoles` a non-member sees it only when every member has one of the
/// listed roles (a manager sees employees' groups, not one the owner talks in).
pub fn may_see(caller: &Caller, config: &BotConfig, session: &SessionSummary) -> bool {
    if SessionKey::is_conversation(&session.key) {
        let member = session.members.contains(&caller.identity);
        return match &caller.role.sessions_visibility {
            SessionsVisibility::All => true,
            SessionsVisibility::Own => member,
            SessionsVisibility::OwnAndRoles(roles) => {
                member
                    || (!session.members.is_empty()
                        && session.members.iter().all(|member| {
                            let role = identity_role(config, member);
                            roles.iter().any(|listed| listed == role)
                        }))
            }
            SessionsVisibility::None => false,
        };
    }
    // A sub-agent's session is its starter's: it carries their slug as its contact. A
    // stranger's slug is derived from their identity and may be shared, so for them the
    // sub-agent must also descend from their own session. Descent alone is not enough:
    // another member of a group conversation shares its session, not its sub-agents.
    let own = (caller.known && session.contact == caller.slug)
        || session.key == caller.session_key
        || (session.contact == caller.slug && started_from(&session.key, &caller.session_key));
    match &caller.role.sessions_visibility {
        SessionsVisibility::All => true,
        SessionsVisibility::Own => own,
        SessionsVisibility::OwnAndRoles(roles) => {
            own || roles.iter().any(|role| role == owner_role(config, session))
        }
        SessionsVisibility::None => false,
    }
}

#[cfg(test)]
mod tests {
    use saint_config::SessionsVisibility;

    use super::*;
    use crate::test_fixtures::{caller, company_config};

    fn session(key: &str, contact: &str) -> SessionSummary {
        SessionSummary {
            key: key.to_string(),
            contact: contact.to_string(),
            role: "employee".to_string(),
            message_count: 1,
            updated_at: "2026-11-25T00:00:00Z".to_string(),
            members: Vec::new(),
        }
    }

    /// A sub-agent's session is its starter's own: by contact for a known person, by the
    /// session it was started from for anyone (also through a sub-agent's sub-agent).
    #[test]
    fn ones_own_sub_agents_sessions_are_ones_own() {
        let config = company_config();
        let ivo = caller(&config, "acme-ivo");
        assert_eq!(ivo.role.sessions_visibility, SessionsVisibility::Own);
        let child: String = SessionKey::for_subagent(&ivo.session_key, "c1").into();
        let grandchild: String = SessionKey::for_subagent(&child, "c2").into();
        assert!(may_see(&ivo, &config, &session(&child, "acme-ivo")));
        assert!(may_see(&ivo, &config, &session(&grandchild, "acme-ivo")));
        // Someone else's child stays theirs.
        let others: String = SessionKey::for_subagent("session-acme-marko", "c3").into();
        assert!(!may_see(&ivo, &config, &session(&others, "acme-marko")));

        // A stranger under `own` visibility sees the children of their session only.
        let mut stranger = caller(&config, "nobody");
        let mut role = (*stranger.role).clone();
        role.sessions_visibility = SessionsVisibility::Own;
        stranger.role = std::sync::Arc::new(role);
        let theirs: String = SessionKey::for_subagent(&stranger.session_key, "c4").into();
        assert!(may_see(&stranger, &config, &session(&theirs, "nobody")));
        assert!(!may_see(
            &stranger,
            &config,
            &session(&others, "acme-marko")
        ));
        assert!(!started_from("session-nobody", "session-nobody"));
    }

    /// In a group conversation everyone's turn runs in the group's session, so every
    /// member's sub-agent descends from it; a member still sees only their own.
    #[test]
    fn in_a_group_another_members_sub_agent_stays_theirs() {
        let config = company_config();
        let group: String = SessionKey::for_conversation("telegram", "-100042").into();
        let in_group = |slug: &str| {
            let mut caller = caller(&config, slug);
            caller.session_key = group.clone();
            caller
        };
        let (ivo, marko) = (in_group("acme-ivo"), in_group("acme-marko"));
        let markos: String = SessionKey::for_subagent(&group, "c1").into();
        let markos_grandchild: String = SessionKey::for_subagent(&markos, "c2").into();
        assert!(may_see(&marko, &config, &session(&markos, "acme-marko")));
        assert!(!may_see(&ivo, &config, &session(&markos, "acme-marko")));
        assert!(!may_see(
            &ivo,
            &config,
            &session(&markos_grandchild, "acme-marko")
        ));

        // A stranger in the group: their own sub-agent only.
        let mut stranger = in_group("nobody");
        let mut role = (*stranger.role).clone();
        role.sessions_visibility = SessionsVisibility::Own;
        stranger.role = std::sync::Arc::new(role);
        let theirs: String = SessionKey::for_subagent(&group, "c3").into();
        assert!(may_see(&stranger, &config, &session(&theirs, "nobody")));
        assert!(!may_see(
            &stranger,
            &config,
            &session(&markos, "acme-marko")
        ));
    }
}
