//! Proxy keys: one per sandbox command, registered by the agent over the control
//! socket, bound to the caller (session, contact, role, command) and to fresh
//! placeholders for every credential, revoked when the command ends. A key is the
//! password in the command's proxy URL; keys are compared in constant time.
//!
//! Holds state in memory only.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::inject::placeholder;

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
        let mut entries = self.entries.lock().expect("key store lock");
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
            expires_at: now + ttl.min(MAX_KEY_TTL),
            ended: CancellationToken::new(),
            token: token.clone(),
        });
        let mut entries = self.entries.lock().expect("key store lock");
        sweep(&mut entries, now);
        entries.insert(digest(&token), key.clone());
        (token, key)
    }

    /// Revokes a key and closes its tunnels; returns whether it existed.
    pub fn revoke(&self, token: &str) -> bool {
        let mut entries = self.entries.lock().expect("key store lock");
        let hash = digest(token);
        match entries.get(&hash) {
            Some(key) if bool::from(key.token.as_bytes().ct_eq(token.as_bytes())) => {
                let key = entries.remove(&hash).expect("just found");
                key.ended.cancel();
                true
            }
            _ => false,
        }
    }

    /// Ends every expired key (their tunnels close); the daemon calls it periodically.
    pub fn sweep(&self, now: Instant) {
        sweep(&mut self.entries.lock().expect("key store lock"), now);
    }

    /// Ends every key (shutdown).
    pub fn end_all(&self) {
        for (_, key) in self.entries.lock().expect("key store lock").drain() {
            key.ended.cancel();
        }
    }

    /// Keys currently live (for metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().expect("key store lock").len()
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
        assert!(store.revoke(&token));
        assert!(
            key.ended.is_cancelled(),
            "revoking closes the key's tunnels"
        );
        assert!(
            store.find(&token, now).is_none(),
            "a replayed key is refused"
        );
        let (short, short_key) = store.register(grant("owner"), [], Duration::from_secs(1), now);
        assert!(store.find(&short, now + Duration::from_secs(2)).is_none());
        assert!(short_key.ended.is_cancelled());
        assert!(store.find("", now).is_none());
    }

    #[test]
    fn the_sweep_ends_expired_keys() {
        let store = KeyStore::default();
        let now = Instant::now();
        let (_, key) = store.register(grant("owner"), [], Duration::from_secs(1), now);
        store.sweep(now);
        assert!(!key.ended.is_cancelled());
        store.sweep(now + Duration::from_secs(1));
        assert!(key.ended.is_cancelled());
        assert!(store.is_empty());
    }
}
