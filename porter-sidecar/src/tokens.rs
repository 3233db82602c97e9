//! Caller tokens: per-command grants registered by the agent over the control socket,
//! and long-lived local-mode tokens from a file. Tokens are compared in constant time.
//!
//! Holds state in memory only; reads the local tokens file when told to.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use thiserror::Error;

/// Longest lifetime the agent may ask for; a command that runs longer is killed anyway.
pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Who a token speaks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    #[serde(default)]
    pub session: String,
    #[serde(default)]
    pub contact: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Workspace-relative folders and files the caller may read; none: the whole
    /// workspace (local tokens files, older agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub view: Option<Vec<String>>,
}

/// One entry of the local tokens file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LocalToken {
    token: String,
    #[serde(flatten)]
    grant: Grant,
}

/// The local tokens file: `{"tokens": [{"token": "...", "role": "owner", ...}]}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalTokensFile {
    tokens: Vec<LocalToken>,
}

/// Why a tokens file or a registration was refused.
#[derive(Debug, Error)]
pub enum TokenError {
    #[error("failed to parse tokens file")]
    Parse(#[source] serde_json::Error),
    #[error("tokens file entry {0} has a token shorter than 16 bytes")]
    Short(usize),
    #[error("failed to generate a token: {0}")]
    Random(String),
}

#[derive(Clone, Debug)]
struct Stored {
    token: String,
    grant: Grant,
    expires_at: Option<Instant>,
    local: bool,
}

/// All tokens Porter accepts.
#[derive(Debug, Default)]
pub struct TokenStore {
    // Keyed by SHA-256 of the token: the map lookup time depends only on a hash the
    // caller cannot steer towards a stored token; the final compare is constant time.
    entries: Mutex<HashMap<[u8; 32], Stored>>,
}

fn key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenStore {
    /// Checks a presented token; `None` if unknown, expired or revoked.
    pub fn validate(&self, presented: &str, now: Instant) -> Option<Grant> {
        if presented.is_empty() {
            return None;
        }
        let mut entries = self.entries.lock().expect("token store lock");
        let digest = key(presented);
        let stored = entries.get(&digest)?;
        if !bool::from(stored.token.as_bytes().ct_eq(presented.as_bytes())) {
            return None;
        }
        if stored.expires_at.is_some_and(|expiry| expiry <= now) {
            entries.remove(&digest);
            return None;
        }
        Some(stored.grant.clone())
    }

    /// Registers a fresh random token for one command.
    pub fn register(
        &self,
        grant: Grant,
        ttl: Duration,
        now: Instant,
    ) -> Result<String, TokenError> {
        let mut bytes = [0_u8; 32];
        getrandom::fill(&mut bytes).map_err(|error| TokenError::Random(error.to_string()))?;
        let token = hex::encode(bytes);
        let stored = Stored {
            token: token.clone(),
            grant,
            expires_at: Some(now + ttl.min(MAX_TOKEN_TTL)),
            local: false,
        };
        let mut entries = self.entries.lock().expect("token store lock");
        entries.retain(|_, entry| entry.expires_at.is_none_or(|expiry| expiry > now));
        entries.insert(key(&token), stored);
        Ok(token)
    }

    /// Revokes a token; returns whether it existed.
    pub fn revoke(&self, token: &str) -> bool {
        let mut entries = self.entries.lock().expect("token store lock");
        let digest = key(token);
        match entries.get(&digest) {
            Some(stored) if bool::from(stored.token.as_bytes().ct_eq(token.as_bytes())) => {
                entries.remove(&digest).is_some()
            }
            _ => false,
        }
    }

    /// Replaces all local-mode tokens with those in `text` (the tokens file).
    pub fn load_local(&self, text: &str) -> Result<usize, TokenError> {
        let file: LocalTokensFile = serde_json::from_str(text).map_err(TokenError::Parse)?;
        if let Some(index) = file.tokens.iter().position(|entry| entry.token.len() < 16) {
            return Err(TokenError::Short(index));
        }
        let mut entries = self.entries.lock().expect("token store lock");
        entries.retain(|_, entry| !entry.local);
        let count = file.tokens.len();
        for entry in file.tokens {
            entries.insert(
                key(&entry.token),
                Stored {
                    token: entry.token,
                    grant: entry.grant,
                    expires_at: None,
                    local: true,
                },
            );
        }
        Ok(count)
    }

    /// Tokens currently held (for metrics).
    pub fn len(&self) -> usize {
        self.entries.lock().expect("token store lock").len()
    }

    /// Whether no token is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(role: &str) -> Grant {
        Grant {
            session: "s1".into(),
            contact: "ana".into(),
            role: Some(role.into()),
            view: None,
        }
    }

    #[test]
    fn registered_tokens_work_until_revoked_or_expired() {
        let store = TokenStore::default();
        let now = Instant::now();
        let token = store
            .register(grant("employee"), Duration::from_secs(60), now)
            .unwrap();
        assert_eq!(token.len(), 64);
        assert_eq!(store.validate(&token, now), Some(grant("employee")));
        assert_eq!(store.validate(&token[..63], now), None);
        assert!(store.revoke(&token));
        assert_eq!(
            store.validate(&token, now),
            None,
            "a replayed token is refused"
        );
        let short = store
            .register(grant("owner"), Duration::from_secs(1), now)
            .unwrap();
        assert_eq!(store.validate(&short, now + Duration::from_secs(2)), None);
        assert_eq!(store.validate("", now), None);
    }

    #[test]
    fn local_tokens_replace_each_other_and_keep_registered_ones() {
        let store = TokenStore::default();
        let now = Instant::now();
        let registered = store
            .register(grant("owner"), Duration::from_secs(60), now)
            .unwrap();
        store
            .load_local(r#"{"tokens":[{"token":"local-token-aaaaaaaa","role":"owner"}]}"#)
            .unwrap();
        assert_eq!(
            store
                .validate("local-token-aaaaaaaa", now)
                .unwrap()
                .role
                .as_deref(),
            Some("owner")
        );
        store
            .load_local(r#"{"tokens":[{"token":"local-token-bbbbbbbb"}]}"#)
            .unwrap();
        assert_eq!(store.validate("local-token-aaaaaaaa", now), None);
        assert!(store.validate("local-token-bbbbbbbb", now).is_some());
        assert!(store.validate(&registered, now).is_some());
        assert!(matches!(
            store.load_local(r#"{"tokens":[{"token":"short"}]}"#),
            Err(TokenError::Short(0))
        ));
    }
}
