//! The reconnect loop every long-lived inbound connection shares (Telegram's long
//! polling and its webhook mode's token check, Matrix's sync, Slack's socket, Discord's
//! gateway, IMAP), written once: run a session until it ends or `stop` is set, turn how
//! it ended into a reported state and a wait, wait (or stop), and start again. A
//! platform implements [`Sessions`] — one session, its channel, its [`Policy`] — and is
//! a [`Connection`].
//!
//! The waits: refused credentials wait the platform's long wait
//! ([`CREDENTIALS_RETRY`], Discord ten minutes) and keep the backoff; any other failure
//! waits the backoff — 1 s, doubling to [`MAX_BACKOFF`] — or the platform's own wait
//! when that is longer. Each platform says when a session has served well enough for the
//! next failure to start again from 1 s ([`Backoff::reset`]): a stored batch, a sync
//! answer, Slack's `hello`, a mailbox opened.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::transport::{ChannelState, Connection, InboxSink, SendError};

/// The first wait after a failure, and the wait after a reset.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between failed attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Wait after the platform refused the credentials (they must be replaced first).
pub const CREDENTIALS_RETRY: Duration = Duration::from_secs(60);

/// How a session ended, and so what is reported and how long the loop waits.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The platform refused the credentials: reported, then the policy's long wait; the
    /// backoff stays as it is.
    CredentialsRefused(String),
    /// Anything else: reported as retrying, then the backoff — no sooner than `after`,
    /// the platform's own wait (`Retry-After`) — which doubles for the next failure.
    Failed {
        reason: String,
        after: Option<Duration>,
    },
    /// Reported as retrying, then `wait` exactly; the backoff stays as it is (the
    /// platform logs why).
    Retrying { reason: String, wait: Duration },
    /// Nothing to report: reconnect after `wait` (Slack refreshing its link, a Discord
    /// session that served and dropped; the platform logs why).
    Reconnect { wait: Duration },
}

impl SessionEnd {
    /// A failure without a wait of the platform's own.
    pub fn failed(reason: impl std::fmt::Display) -> Self {
        Self::Failed {
            reason: reason.to_string(),
            after: None,
        }
    }
}

/// A refused credential is refused; a rate limit waits at least the platform's wait;
/// anything else (a permanent refusal included: the next session may fare better) is a
/// failure.
impl From<SendError> for SessionEnd {
    fn from(error: SendError) -> Self {
        match error {
            SendError::Credentials { reason } => Self::CredentialsRefused(reason),
            SendError::Retry { reason, after } => Self::Failed { reason, after },
            SendError::Permanent { reason } => Self::failed(reason),
        }
    }
}

/// The wait between failed attempts: 1 s, doubling to [`MAX_BACKOFF`].
#[derive(Debug, PartialEq, Eq)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            next: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    /// The session served: the next failure waits 1 s again.
    pub fn reset(&mut self) {
        self.next = FIRST_BACKOFF;
    }

    /// The wait after a failure — the backoff, or the platform's own wait (`after`)
    /// when that is longer — and the backoff doubled for the next one.
    pub fn fail(&mut self, after: Option<Duration>) -> Duration {
        let wait = after.map_or(self.next, |after| after.max(self.next));
        self.next = (self.next * 2).min(MAX_BACKOFF);
        wait
    }
}

/// How a wait is logged: `retry_in_s`, or `retry_in_ms` (Matrix's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RetryIn {
    Seconds,
    Millis,
}

/// One platform's reconnect: its long wait after refused credentials and what it logs
/// (each in the platform's words; `None` logs nothing).
#[derive(Clone, Copy, Debug)]
pub struct Policy {
    credentials_retry: Duration,
    refused: Option<&'static str>,
    failed: Option<&'static str>,
    throttled: Option<&'static str>,
    retry_in: RetryIn,
}

impl Policy {
    /// Logs nothing; waits [`CREDENTIALS_RETRY`] after refused credentials.
    pub const fn quiet() -> Self {
        Self {
            credentials_retry: CREDENTIALS_RETRY,
            refused: None,
            failed: None,
            throttled: None,
            retry_in: RetryIn::Seconds,
        }
    }

    /// Logs a failure as a warning with `message`, the reason and `retry_in_s`.
    pub const fn failed(self, message: &'static str) -> Self {
        Self {
            failed: Some(message),
            ..self
        }
    }

    /// Logs a failure that came with the platform's own wait (a rate limit) with
    /// `message` instead.
    pub const fn throttled(self, message: &'static str) -> Self {
        Self {
            throttled: Some(message),
            ..self
        }
    }

    /// Logs refused credentials as an error with `message` and the reason.
    pub const fn refused(self, message: &'static str) -> Self {
        Self {
            refused: Some(message),
            ..self
        }
    }

    /// Waits `wait` after refused credentials.
    pub const fn credentials_retry(self, wait: Duration) -> Self {
        Self {
            credentials_retry: wait,
            ..self
        }
    }

    /// Logs the wait in milliseconds (`retry_in_ms`).
    pub const fn in_millis(self) -> Self {
        Self {
            retry_in: RetryIn::Millis,
            ..self
        }
    }

    /// Reports how a session ended and returns the wait before the next one.
    fn wait_after(
        &self,
        channel: &str,
        report: &impl Fn(ChannelState),
        end: SessionEnd,
        backoff: &mut Backoff,
    ) -> Duration {
        match end {
            SessionEnd::CredentialsRefused(reason) => {
                if let Some(message) = self.refused {
                    tracing::error!(%channel, %reason, "{message}");
                }
                report(ChannelState::CredentialsRefused(reason));
                self.credentials_retry
            }
            SessionEnd::Failed { reason, after } => {
                let wait = backoff.fail(after);
                let message = after.and(self.throttled).or(self.failed);
                match (message, self.retry_in) {
                    (None, _) => {}
                    (Some(message), RetryIn::Seconds) => {
                        tracing::warn!(%channel, %reason, retry_in_s = wait.as_secs(), "{message}");
                    }
                    (Some(message), RetryIn::Millis) => {
                        tracing::warn!(%channel, %reason, retry_in_ms = wait.as_millis() as u64, "{message}");
                    }
                }
                report(ChannelState::Retrying(reason));
                wait
            }
            SessionEnd::Retrying { reason, wait } => {
                report(ChannelState::Retrying(reason));
                wait
            }
            SessionEnd::Reconnect { wait } => wait,
        }
    }
}

/// A long-lived connection served in sessions: its [`Connection`] runs one session
/// after another until it is stopped, reporting how each one ended and waiting as
/// [`Sessions::POLICY`] and the backoff say.
pub trait Sessions: Send + Sync + 'static {
    /// What is logged and how long refused credentials wait.
    const POLICY: Policy;

    /// The channel's name, for the reports and the log.
    fn channel(&self) -> &str;

    /// Runs one session until it ends (a session that serves for good never does),
    /// storing what arrives in `sink`; resets `backoff` once it has served.
    fn run_session(
        &self,
        sink: &dyn InboxSink,
        backoff: &mut Backoff,
    ) -> impl Future<Output = SessionEnd> + Send;
}

impl<T: Sessions> Connection for T {
    fn run(
        self: Arc<Self>,
        sink: Arc<dyn InboxSink>,
        stop: watch::Receiver<bool>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move { serve(self.as_ref(), sink.as_ref(), &stop).await })
    }
}

/// Runs `connection`'s sessions until `stop` is set (or its sender is dropped).
async fn serve<T: Sessions>(connection: &T, sink: &dyn InboxSink, stop: &watch::Receiver<bool>) {
    let channel = connection.channel();
    let report = |state| sink.report(channel, state);
    let mut backoff = Backoff::default();
    loop {
        let mut stop_signal = stop.clone();
        let end = tokio::select! {
            end = connection.run_session(sink, &mut backoff) => end,
            _ = stop_signal.wait_for(|stopped| *stopped) => return,
        };
        let wait = T::POLICY.wait_after(channel, &report, end, &mut backoff);
        if stopped_during(stop, wait).await {
            return;
        }
    }
}

/// Sleeps `wait`; true when `stop` was set meanwhile (or its sender dropped).
async fn stopped_during(stop: &watch::Receiver<bool>, wait: Duration) -> bool {
    let mut signal = stop.clone();
    tokio::select! {
        _ = tokio::time::sleep(wait) => *stop.borrow(),
        _ = signal.wait_for(|stopped| *stopped) => true,
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_cap_and_waits_at_least_the_platforms_wait() {
        let second = Duration::from_secs(1);
        let mut backoff = Backoff::default();
        let waits: Vec<Duration> = (0..8).map(|_| backoff.fail(None)).collect();
        assert_eq!(
            waits,
            [1, 2, 4, 8, 16, 32, 60, 60].map(|seconds| seconds * second)
        );
        backoff.reset();
        assert_eq!(backoff.fail(Some(30 * second)), 30 * second);
        assert_eq!(backoff.fail(Some(second)), 2 * second);
        assert_eq!(backoff.fail(None), 4 * second);
    }

    #[test]
    fn send_errors_end_a_session_by_what_they_mean() {
        let after = Some(Duration::from_secs(5));
        let reason = || "no".to_string();
        assert_eq!(
            SessionEnd::from(SendError::Credentials { reason: reason() }),
            SessionEnd::CredentialsRefused(reason())
        );
        assert_eq!(
            SessionEnd::from(SendError::Retry {
                reason: reason(),
                after
            }),
            SessionEnd::Failed {
                reason: reason(),
                after
            }
        );
        assert_eq!(
            SessionEnd::from(SendError::Permanent { reason: reason() }),
            SessionEnd::failed("no")
        );
    }

    #[test]
    fn each_end_is_reported_and_waited_for_as_the_policy_says() {
        let reports = Mutex::new(Vec::new());
        let report = |state| reports.lock().push(state);
        let policy = Policy::quiet().credentials_retry(Duration::from_secs(120));
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = [
            SessionEnd::failed("lost"),
            SessionEnd::CredentialsRefused("refused".into()),
            SessionEnd::Failed {
                reason: "throttled".into(),
                after: Some(Duration::from_secs(30)),
            },
            SessionEnd::Reconnect {
                wait: Duration::from_millis(100),
            },
            SessionEnd::Retrying {
                reason: "held".into(),
                wait: Duration::from_secs(600),
            },
            SessionEnd::failed("lost again"),
        ]
        .into_iter()
        .map(|end| {
            policy
                .wait_after("chat", &report, end, &mut backoff)
                .as_millis() as u64
        })
        .collect();
        // The backoff's 1 s; the credentials' 120 s (the backoff kept at 2 s); the
        // platform's 30 s over the 2 s backoff (now 4 s); 100 ms; 600 s; 4 s.
        assert_eq!(waits, [1_000, 120_000, 30_000, 100, 600_000, 4_000]);
        assert_eq!(
            *reports.lock(),
            [
                ChannelState::Retrying("lost".into()),
                ChannelState::CredentialsRefused("refused".into()),
                ChannelState::Retrying("throttled".into()),
                ChannelState::Retrying("held".into()),
                ChannelState::Retrying("lost again".into()),
            ]
        );
    }

    #[tokio::test]
    async fn a_wait_ends_early_when_the_connection_is_stopped() {
        let (stop_sender, stop) = watch::channel(false);
        assert!(!stopped_during(&stop, Duration::from_millis(1)).await);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            stop_sender.send_replace(true);
        });
        let started = std::time::Instant::now();
        assert!(stopped_during(&stop, Duration::from_secs(60)).await);
        assert!(started.elapsed() < Duration::from_secs(30));
        // A dropped sender stops it too.
        let (stop_sender, stop) = watch::channel(false);
        drop(stop_sender);
        assert!(stopped_during(&stop, Duration::from_secs(60)).await);
    }
}
