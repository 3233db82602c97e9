//! What a turn keeps of its session for the next one: the transcript as the model sees
//! it (summary and uncompacted messages). The next turn reads only the messages stored
//! since — its own user message, a canned reply — instead of decoding the whole session
//! again. The cache lives beside the session's lock and is only reached through it, so
//! two turns never see it at once; it is dropped when a turn fails and when the idle
//! session's lock is swept, and not used once the store rewrote a stored message (a
//! message its sender withdrew).

use crate::session::{SessionStore, StoredMessage, Transcript};

use super::{Runtime, TurnError};

/// One session's kept transcript (empty until a turn of it has completed).
#[derive(Debug, Default)]
pub(crate) struct SessionCache {
    kept: Option<Kept>,
    /// The store's rewrite count when the transcript being kept was read.
    rewrites: u64,
}

#[derive(Debug)]
struct Kept {
    transcript: Transcript,
    /// The id of its last message (0 when none is left uncompacted): every uncompacted
    /// message up to it is in `transcript`, every later one is not.
    seen_through: i64,
    /// The store's rewrite count when it was read.
    rewrites: u64,
}

impl SessionCache {
    /// Keeps `transcript` for the session's next turn.
    pub(crate) fn keep(&mut self, transcript: Transcript) {
        let seen_through = transcript
            .messages
            .last()
            .map(|stored| stored.id)
            .unwrap_or_default();
        self.kept = Some(Kept {
            transcript,
            seen_through,
            rewrites: self.rewrites,
        });
    }

    /// The session's transcript: the kept one brought up to date with what was stored
    /// since, else read whole. Takes the cache's content: a turn that fails keeps
    /// nothing, and the next one reads the store again.
    pub(crate) async fn transcript(
        &mut self,
        runtime: &Runtime,
        key: &str,
    ) -> Result<Transcript, TurnError> {
        let key = key.to_string();
        // Read before the transcript: a rewrite in between makes the next read whole.
        let rewrites = runtime.store().rewrites();
        let kept = self.kept.take().filter(|kept| kept.rewrites == rewrites);
        self.rewrites = rewrites;
        match kept {
            None => runtime.blocking(move |store| store.transcript(&key)).await,
            Some(Kept {
                mut transcript,
                seen_through,
                ..
            }) => {
                let newer: Vec<StoredMessage> = runtime
                    .blocking(move |store: &SessionStore| store.messages_after(&key, seen_through))
                    .await?;
                transcript.messages.extend(newer);
                Ok(transcript)
            }
        }
    }
}
