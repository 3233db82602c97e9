//! Proxy keys: one per sandbox command, registered by the agent over the control
//! socket, bound to the caller (session, contact, role, command) and to fresh
//! placeholders for every credential, revoked when the command ends. A key is the
//! password in the command's proxy URL; keys are compared in constant time.
//!
//! Holds state in memory only.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use porter_protocol::control::HeldRequest;

use crate::inject::{holds::KeyApprovals, placeholder};
use parking_lot::Mutex;

/// Longest lifetime the agent may ask for; a command that runs longer is killed anyway.
pub const MAX_KEY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Prefix of proxy keys (so a key is recognisable in a report, never mistaken for a
/// placeholder).
pub const KEY_PREFIX: &str = "porter_key_";

/// Who a key speaks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    pub session: String,
    pub contact: String,
    pub role: Option<String>,
    /// A digest of the command line (for the audit), when the agent sent one.
    pub command: Option<String>,
}

/// The placeholders one key holds for one credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placeholders {
    /// Stands for the secret (for OAuth 2.0: the refresh token).
    pub secret: String,
    /// OAuth 2.0: the access token Porter hands out at the token endpoint.
    pub access: Option<String>,
}

/// One live key.
#[derive(Debug)]
pub struct Key {
    pub grant: Grant,
    /// By credential (registry entry) name.
    pub placeholders: BTreeMap<String, Placeholders>,
    /// Requests held for an approval, the grants that admit approved ones once, and
    /// what was held; they live and die with the key.
    pub approvals: KeyApprovals,
    expires_at: Instant,
    /// Cancelled when the key is revoked or expires: its tunnels close.
    pub ended: CancellationToken,
    token: String,
}

/// All keys Porter accepts.
#[derive(Debug, Default)]
pub struct KeyStore {
    // Keyed by SHA-256 of the key: the map lookup time depends only on a hash the
    // caller cannot steer towards a stored key; the final compare is constant time.
    entries: Mutex<HashMap<[u8; 32], Arc<Key>>>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl KeyStore {
    /// The live key `presented` names; `None` if unknown, expired or revoked.
    pub fn find(&self, presented: &str, now: Instant) -> Option<Arc<Key>> {
        if presented.is_empty() {
            return None;
        }
        let mut entries = self.entries.lock();
        let hash = digest(presented);
        let key = entries.get(&hash)?;
        if !bool::from(key.token.as_bytes().ct_eq(presented.as_bytes())) {
            return None;
        }
        if key.expires_at <= now {
            let key = entries.remove(&hash)?;
            key.ended.cancel();
            return None;
        }
        Some(key.clone())
    }

    /// Issues a fresh key for one command, with fresh placeholders for each credential
    /// in `credentials` (`(name, wants an access placeholder)`).
    pub fn register(
        &self,
        grant: Grant,
        credentials: impl IntoIterator<Item = (String, bool)>,
        approvals: KeyApprovals,
        ttl: Duration,
        now: Instant,
    ) -> (String, Arc<Key>) {
        let token = placeholder::fresh(KEY_PREFIX);
        let placeholders = credentials
            .into_iter()
            .map(|(name, oauth)| {
                let placeholders = Placeholders {
                    secret: placeholder::fresh(placeholder::PREFIX),
                    access: oauth.then(|| placeholder::fresh(placeholder::PREFIX)),
                };
                (name, placeholders)
            })
            .collect();
        let key = Arc::new(Key {
            grant,
            placeholders,
            approvals,
            expires_at: now + ttl.min(MAX_KEY_TTL),
            ended: CancellationToken::new(),
            token: token.clone(),
        });
        let mut entries = self.entries.lock();
        sweep(&mut entries, now);
        entries.insert(digest(&token), key.clone());
        (token, key)
    }

    /// Revokes a key and closes its tunnels; returns the requests it had held for an
    /// approval, or `None` when no such key was live.
    pub fn revoke(&self, token: &str) -> Option<Vec<HeldRequest>> {
        let mut entries = self.entries.lock();
        let hash = digest(token);
        match entries.get(&hash) {
            Some(key) if bool::from(key.token.as_bytes().ct_eq(token.as_bytes())) => {
                let key = entries.remove(&hash).expect("just found");
                key.ended.cancel();
                Some(key.approvals.take_held())
            }
            _ => None,
        }
    }

    /// Ends every expired key (their tunnels close); the daemon calls it periodically.
    pub fn sweep(&self, now: Instant) {
        sweep(&mut self.entries.lock(), now);
    }

    /// Ends every key (shutdown).
    pub fn end_all(&self) {
        for (_, key) in self.entries.lock().drain() {
            key.ended.cancel();
        }
    }

    /// Keys currently live (for metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether no key is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn sweep(entries: &mut HashMap<[u8; 32], Arc<Key>>, now: Instant) {
    entries.retain(|_, key| {
        let live = key.expires_at > now;
        if !live {
            key.ended.cancel();
        }
        live
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(role: &str) -> Grant {
        Grant {
            session: "s1".into(),
            contact: "ana".into(),
            role: Some(role.into()),
            command: None,
        }
    }

    #[test]
    fn keys_work_until_revoked_or_expired_and_end_their_tunnels() {
        let store = KeyStore::default();
        let now = Instant::now();
        let (token, key) = store.register(
            grant("employee"),
            [("gh".to_owned(), false), ("gog".to_owned(), true)],
            KeyApprovals::default(),
            Duration::from_secs(60),
            now,
        );
        assert!(token.starts_with(KEY_PREFIX));
        assert_eq!(store.find(&token, now).unwrap().grant, grant("employee"));
        assert!(key.placeholders["gh"].access.is_none());
        assert!(key.placeholders["gog"].access.is_some());
        assert_ne!(
            key.placeholders["gh"].secret,
            key.placeholders["gog"].secret
        );
        assert!(store.find(&token[..token.len() - 1], now).is_none());
        assert_eq!(store.revoke(&token), Some(Vec::new()));
        assert!(
            key.ended.is_cancelled(),
            "revoking closes the key's tunnels"
        );
        assert!(
            store.find(&token, now).is_none(),
            "a replayed key is refused"
        );
        let (short, short_key) = store.register(
            grant("owner"),
            [],
            KeyApprovals::default(),
            Duration::from_secs(1),
            now,
        );
        assert!(store.find(&short, now + Duration::from_secs(2)).is_none());
        assert!(short_key.ended.is_cancelled());
        assert!(store.find("", now).is_none());
    }

    #[test]
    fn grants_live_and_die_with_their_key_and_revoke_reports_what_was_held() {
        use porter_protocol::control::{RequestGrant, RequestHold};

        use crate::inject::holds::HoldDecision;
        let store = KeyStore::default();
        let now = Instant::now();
        let hold = RequestHold {
            hosts: vec!["api.github.com".into()],
            methods: vec!["PUT".into()],
            paths: vec!["/repos/*/*/pulls/*/merge".into()],
        };
        let approvals = |grants| KeyApprovals::new(std::slice::from_ref(&hold), grants).unwrap();
        let granted = vec![RequestGrant {
            approval: "K7QX2P".into(),
            host: "api.github.com".into(),
            method: "PUT".into(),
            path: "/repos/o/r/pulls/1/merge".into(),
        }];
        let (with_grant, _) = store.register(
            grant("employee"),
            [],
            approvals(granted.clone()),
            Duration::from_secs(60),
            now,
        );
        let (without, _) = store.register(
            grant("employee"),
            [],
            approvals(Vec::new()),
            Duration::from_secs(60),
            now,
        );
        let decide = |token: &str| {
            store.find(token, now).unwrap().approvals.decide(
                "gh",
                "api.github.com",
                443,
                "PUT",
                "/repos/o/r/pulls/1/merge",
            )
        };
        assert!(
            matches!(decide(&without), HoldDecision::Held(_)),
            "another key's grant admits nothing"
        );
        assert_eq!(
            decide(&with_grant),
            HoldDecision::Granted {
                approval: "K7QX2P".into()
            }
        );
        assert!(matches!(decide(&with_grant), HoldDecision::Held(_)));
        let held = store.revoke(&without).unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].path, "/repos/o/r/pulls/1/merge");
        assert_eq!(
            store.revoke(&without),
            None,
            "a revoked key reports nothing"
        );
        // A grant expires with its key: an unused one is worth nothing afterwards.
        let (expiring, _) = store.register(
            grant("employee"),
            [],
            approvals(granted),
            Duration::from_secs(1),
            now,
        );
        assert!(
            store
                .find(&expiring, now + Duration::from_secs(2))
                .is_none()
        );
    }

    #[test]
    fn the_sweep_ends_expired_keys() {
        let store = KeyStore::default();
        let now = Instant::now();
        let (_, key) = store.register(
            grant("owner"),
            [],
            KeyApprovals::default(),
            Duration::from_secs(1),
            now,
        );
        store.sweep(now);
        assert!(!key.ended.is_cancelled());
        store.sweep(now + Duration::from_secs(1));
        assert!(key.ended.is_cancelled());
        assert!(store.is_empty());
    }
}
