//! What a child object of a SaintBot says about itself, read the same way by the watch
//! caches and the controller: the hash of its compared [`content`], whether it is as the
//! operator last wrote it ([`freshness`]), and whether its pod runs or why it cannot
//! ([`rollout`]). A leaf of the cache layer that the controller reads too: the caches
//! keep these judgements in their records, the controller acts on them, and this module
//! imports neither. Pure but for [`rollout::agent_pods`].

pub mod content;
pub mod freshness;
pub mod rollout;

use sha2::{Digest, Sha256};

/// Lower-case hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
