//! What every connection of one runner shares: where commands may run, the token, the
//! live process groups and background processes (killed on shutdown) and the activity
//! clock behind the idle exit.
//!
//! Plain state: no I/O besides signalling process groups.

use std::{
    collections::HashSet,
    path::PathBuf,
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use tokio::time::Instant;

use crate::{
    background::Background,
    browser::Browsers,
    process_group::{ProcessGroup, kill_group_id},
    working_directory::Roots,
};
use parking_lot::Mutex;

/// What every connection shares.
pub struct State {
    /// Where commands may run.
    pub roots: Roots,
    /// The shell that runs command lines (`/bin/sh`).
    pub shell: PathBuf,
    /// Timeout for requests that name none.
    pub default_timeout_seconds: u64,
    /// Commands started in the background, kept between connections.
    pub background: Background,
    /// Headless browsers, one per owner.
    pub browsers: Browsers,
    /// The token every request must carry.
    token: String,
    active_connections: AtomicUsize,
    last_activity: Mutex<Instant>,
    live_groups: Mutex<HashSet<i32>>,
}

impl State {
    /// Shared state for a server.
    pub fn new(roots: Roots, shell: PathBuf, default_timeout_seconds: u64, token: String) -> Self {
        Self {
            roots,
            shell,
            default_timeout_seconds,
            background: Background::default(),
            browsers: Browsers::default(),
            token,
            active_connections: AtomicUsize::new(0),
            last_activity: Mutex::new(Instant::now()),
            live_groups: Mutex::new(HashSet::new()),
        }
    }

    /// Compares in constant time, so response timing does not reveal a token prefix.
    pub fn token_matches(&self, offered: &str) -> bool {
        let (expected, offered) = (self.token.as_bytes(), offered.as_bytes());
        if expected.len() != offered.len() {
            return false;
        }
        expected
            .iter()
            .zip(offered)
            .fold(0_u8, |difference, (a, b)| difference | (a ^ b))
            == 0
    }

    /// Records a live process group until the returned guard drops.
    pub fn register_group<'a>(&'a self, group: &ProcessGroup) -> GroupRegistration<'a> {
        let id = group.id();
        if let Some(id) = id {
            self.live_groups.lock().insert(id);
        }
        GroupRegistration { state: self, id }
    }

    /// Kills every command still running, background ones too (on shutdown).
    pub(crate) fn kill_live_groups(&self) {
        for id in self.live_groups.lock().drain() {
            kill_group_id(id);
        }
        self.background.kill_all();
        self.browsers.close_all();
    }

    fn touch(&self) {
        *self.last_activity.lock() = Instant::now();
    }

    /// Counts a new connection as active.
    pub(crate) fn connection_opened(&self) {
        self.active_connections.fetch_add(1, Ordering::SeqCst);
        self.touch();
    }

    /// Counts a connection as ended; the idle clock starts from now.
    pub(crate) fn connection_closed(&self) {
        self.touch();
        self.active_connections.fetch_sub(1, Ordering::SeqCst);
    }

    /// How long no connection has been active; `None` while one is, or while a
    /// background process runs (someone means to come back for it).
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        if self.active_connections.load(Ordering::SeqCst) > 0
            || self.background.running() > 0
            || self.browsers.running() > 0
        {
            return None;
        }
        Some(self.last_activity.lock().elapsed())
    }
}

// By hand: the token never reaches a log through `{:?}`.
impl std::fmt::Debug for State {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("State")
            .field("roots", &self.roots)
            .field("shell", &self.shell)
            .field("default_timeout_seconds", &self.default_timeout_seconds)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// Removes a group from the live list when its command ends.
pub struct GroupRegistration<'a> {
    state: &'a State,
    id: Option<i32>,
}

impl Drop for GroupRegistration<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.state.live_groups.lock().remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_token() {
        let base = tempfile::tempdir().unwrap();
        let roots = Roots::resolve(base.path(), base.path()).unwrap();
        let state = State::new(
            roots,
            PathBuf::from("/bin/sh"),
            120,
            "secret-runner-token".to_string(),
        );
        let shown = format!("{state:?}");
        assert!(!shown.contains("secret-runner-token"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }
}
